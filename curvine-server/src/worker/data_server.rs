//! Data-plane server: accepts framed TCP connections and runs one operation at a time
//! per connection (see the protocol in `curvine.proto` above `enum DataOp`). Any error
//! is answered with an ERROR frame and the connection is closed; the staging file and
//! reservation of an unfinished write are released when its `WriteHandle` drops. Each
//! operation runs in a `worker.read` / `worker.write` span with the request id the
//! client sent (target `curvine::request`, debug level).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use curvine_common::frame::{error_header, read_frame, write_frame};
use curvine_common::proto::{DataHeader, DataOp};
use curvine_common::tasks::Task;
use curvine_common::types::{RequestId, REQUEST_TARGET};
use curvine_common::{FsError, FsResult};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;
use tracing::{debug, debug_span, info, warn, Instrument, Span};

use super::block_store::BlockStore;
use super::{read_path, write_path};

/// Read buffer of the socket (headers and small frames; large payloads bypass it).
const SOCKET_BUF: usize = 64 << 10;
/// After an error reply, how long to drain what the client still sends so that the
/// close does not reset the connection before the client read the error.
const ERROR_LINGER: Duration = Duration::from_secs(2);
/// Payload buffers a connection keeps in flight between the socket and the disk.
pub(super) const MAX_BUFFERS: usize = 3;

/// What every connection needs.
pub struct DataCtx {
    pub store: Arc<BlockStore>,
    pub auth_token: String,
    pub max_frame: usize,
    pub chunk_size: u32,
    /// `host:port` of this worker, for errors.
    pub worker: String,
    /// Under-store operators and read-through fetches.
    pub ufs: Arc<super::ufs_fetch::UfsCtx>,
}

impl DataCtx {
    pub(super) fn check_token(&self, h: &DataHeader, peer: SocketAddr) -> FsResult<()> {
        if self.auth_token.is_empty() || h.token == self.auth_token {
            return Ok(());
        }
        warn!(%peer, "data-plane request with a missing or wrong auth token");
        Err(FsError::Unauthenticated {
            message: "missing or wrong cluster auth token".into(),
        })
    }
}

/// One client connection: socket halves and reusable payload buffers.
pub(super) struct Conn {
    pub rd: BufReader<OwnedReadHalf>,
    pub wr: OwnedWriteHalf,
    pub peer: SocketAddr,
    /// Receives frame payloads.
    pub buf: BytesMut,
    /// Spare payload buffers kept across operations.
    pub spare: Vec<BytesMut>,
}

impl Conn {
    pub async fn send(&mut self, h: &DataHeader, payload: &[u8]) -> FsResult<()> {
        write_frame(&mut self.wr, h, payload).await
    }
}

/// Accept connections until `task` is stopped, at most `max_connections` open at once
/// (`worker.max_connections`): past it, the next accept waits for a connection to
/// close (the kernel's backlog holds the callers meanwhile). Returns once every
/// connection ended.
pub async fn serve(ctx: Arc<DataCtx>, listener: TcpListener, task: Task, max_connections: usize) {
    let max = max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max));
    let conns = TaskTracker::new();
    let cancel = task.token();
    loop {
        let slot = match slots.clone().try_acquire_owned() {
            Ok(s) => s,
            Err(_) => {
                warn!(
                    max,
                    "data-plane connection limit reached; new connections wait"
                );
                task.busy(format!(
                    "{max} connections open (worker.max_connections); new ones wait"
                ));
                let s = tokio::select! {
                    _ = cancel.cancelled() => break,
                    s = slots.clone().acquire_owned() => s,
                };
                task.idle();
                match s {
                    Ok(s) => s,
                    Err(_) => break,
                }
            }
        };
        let accepted = tokio::select! {
            _ = cancel.cancelled() => break,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, peer)) => {
                curvine_common::busy_poll::watch(&stream);
                let ctx = ctx.clone();
                let cancel = cancel.clone();
                conns.spawn(async move {
                    let _slot = slot;
                    tokio::select! {
                        _ = cancel.cancelled() => {}
                        _ = handle_conn(ctx, stream, peer) => {}
                    }
                });
            }
            Err(e) => {
                // e.g. EMFILE: back off briefly instead of spinning
                warn!(error = %e, "accept failed");
                task.failed(&e);
                if !task.sleep(Duration::from_millis(50)).await {
                    break;
                }
            }
        }
    }
    conns.close();
    conns.wait().await;
}

async fn handle_conn(ctx: Arc<DataCtx>, stream: TcpStream, peer: SocketAddr) {
    let _open = crate::metrics::OpenStream::open();
    if let Err(e) = stream.set_nodelay(true) {
        debug!(%peer, error = %e, "set TCP_NODELAY failed");
    }
    let (rd, wr) = stream.into_split();
    let mut conn = Conn {
        rd: BufReader::with_capacity(SOCKET_BUF, rd),
        wr,
        peer,
        buf: BytesMut::new(),
        spare: Vec::new(),
    };
    debug!(%peer, "data connection opened");
    // serve_conn logged the failure (in the operation's span)
    if let Err(e) = serve_conn(&ctx, &mut conn).await {
        let _ = conn.send(&error_header(&e), &[]).await;
        let _ = conn.wr.shutdown().await;
        linger(&mut conn).await;
    }
    debug!(%peer, "data connection closed");
}

/// Discard input until the client closes (bounded in time) so it can read our error.
async fn linger(conn: &mut Conn) {
    let mut sink = [0u8; 8192];
    let drain = async {
        loop {
            match conn.rd.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    };
    let _ = tokio::time::timeout(ERROR_LINGER, drain).await;
}

/// The span of one data operation: the block and the request id the client sent with
/// its `*_OPEN` (see `RequestId`); fields are formatted only when the span is on.
macro_rules! op_span {
    ($name:literal, $h:expr) => {
        debug_span!(
            target: REQUEST_TARGET,
            $name,
            block = $h.block_id,
            req = %RequestId { client: $h.client_id, call: $h.call_id },
        )
    };
}

/// The end of one data operation, in its span: one line when request spans are on, and
/// the failure logged there (so it carries the request id) before the connection closes.
fn ended(span: &Span, peer: SocketAddr, r: FsResult<()>) -> FsResult<()> {
    let _in = span.enter();
    match &r {
        Ok(()) => debug!(target: REQUEST_TARGET, "served"),
        Err(e) => log_failure(peer, e),
    }
    r
}

fn log_failure(peer: SocketAddr, e: &FsError) {
    match e {
        FsError::Io { .. } => debug!(%peer, error = %e, "data connection failed"),
        _ => info!(%peer, error = %e, "data request failed"),
    }
}

async fn serve_conn(ctx: &DataCtx, conn: &mut Conn) -> FsResult<()> {
    let peer = conn.peer;
    loop {
        let h = match read_frame(&mut conn.rd, &mut conn.buf, ctx.max_frame).await {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(()),
            Err(e) => {
                log_failure(conn.peer, &e);
                return Err(e);
            }
        };
        match DataOp::try_from(h.op) {
            Ok(DataOp::WriteOpen) => {
                let span = op_span!("worker.write", h);
                let r = async {
                    ctx.check_token(&h, conn.peer)?;
                    write_path::handle_write(ctx, conn, h).await
                };
                ended(&span, peer, r.instrument(span.clone()).await)?;
            }
            Ok(DataOp::ReadOpen) => {
                let span = op_span!("worker.read", h);
                let r = async {
                    ctx.check_token(&h, conn.peer)?;
                    read_path::handle_read(ctx, conn, h).await
                };
                ended(&span, peer, r.instrument(span.clone()).await)?;
            }
            // nothing in progress: a late cancel or abort is harmless
            Ok(DataOp::ReadCancel) | Ok(DataOp::WriteAbort) => {}
            _ => {
                let e =
                    FsError::protocol(format!("unexpected data op {} on an idle connection", h.op));
                log_failure(conn.peer, &e);
                return Err(e);
            }
        }
    }
}

/// A payload buffer kept from an earlier operation on this connection, if any.
pub(super) fn take_spare(conn: &mut Conn) -> Option<BytesMut> {
    conn.spare.pop()
}

/// Close the connection without an error frame, as if the worker died mid-stream
/// (fault injection; the caller's error only ends the connection).
#[cfg(feature = "fault-injection")]
pub(super) async fn drop_mid_stream(conn: &mut Conn) -> FsResult<()> {
    let _ = conn.wr.shutdown().await;
    Err(FsError::io(format!(
        "connection to {} dropped mid-stream (injected fault)",
        conn.peer
    )))
}

pub(super) fn join_err(e: tokio::task::JoinError) -> FsError {
    FsError::internal(format!("worker task failed: {e}"))
}
