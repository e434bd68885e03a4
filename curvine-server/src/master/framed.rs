//! The master's port serves two protocols: gRPC (workers, tools) and the framed
//! transport of `curvine_common::rpc` (the Rust client, FUSE, Java). A connection is
//! sorted by its first four bytes; framed calls go to the same `MasterService` methods
//! as gRPC ones (`rpc_server`), so both behave alike (auth, fault points, errors).

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use curvine_common::rpc::HELLO_MAGIC;
use curvine_common::rpc_server;
use curvine_common::{FsError, FsResult};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::net::{TcpStream, UnixListener};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tracing::{debug, warn};

use super::auth::AuthInterceptor;
use super::metered::Metered as MasterSvc;

/// How long a new connection may take to send its first four bytes.
const SNIFF_TIMEOUT: Duration = Duration::from_secs(10);

/// A gRPC connection whose first bytes were already read to sort it.
pub(super) struct Sniffed {
    head: [u8; 4],
    pos: usize,
    inner: TcpStream,
}

impl AsyncRead for Sniffed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.pos < self.head.len() {
            let n = (self.head.len() - self.pos).min(buf.remaining());
            let start = self.pos;
            buf.put_slice(&self.head[start..start + n]);
            self.pos += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Sniffed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Connected for Sniffed {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.inner.connect_info()
    }
}

/// Accept connections until `cancel` fires: framed ones are served here, the rest are
/// handed to gRPC through `grpc`.
pub(super) async fn accept_loop(
    listener: TcpListener,
    svc: Arc<MasterSvc>,
    auth: AuthInterceptor,
    grpc: mpsc::Sender<std::io::Result<Sniffed>>,
    cancel: CancellationToken,
) {
    while let Some((stream, _)) = next_conn(|| listener.accept(), &cancel, "master").await {
        let _ = stream.set_nodelay(true);
        let (svc, auth, grpc, cancel) = (svc.clone(), auth.clone(), grpc.clone(), cancel.clone());
        tokio::spawn(async move {
            let mut stream = stream;
            let Some(head) = sniff(&mut stream, &cancel).await else {
                return;
            };
            if head == HELLO_MAGIC {
                let stop = cancel.cancelled_owned();
                rpc_server::serve(stream, svc, |t| auth.allows_token(t), stop).await;
            } else {
                let _ = grpc
                    .send(Ok(Sniffed {
                        head,
                        pos: 0,
                        inner: stream,
                    }))
                    .await;
            }
        });
    }
}

/// The next connection from `accept`, or `None` once `cancel` fires. A failed accept
/// (out of fds and the like) is logged and retried after a pause: the listener itself
/// stays usable.
async fn next_conn<T, F>(
    mut accept: impl FnMut() -> F,
    cancel: &CancellationToken,
    what: &str,
) -> Option<T>
where
    F: std::future::Future<Output = std::io::Result<T>>,
{
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return None,
            r = accept() => match r {
                Ok(conn) => return Some(conn),
                Err(e) => {
                    warn!(error = %e, "{what} accept failed");
                    tokio::select! {
                        _ = cancel.cancelled() => return None,
                        _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                }
            },
        }
    }
}

/// The first four bytes of a new connection, or `None` when it closed, sent nothing in
/// time, or the master stops.
async fn sniff(
    stream: &mut (impl AsyncRead + Unpin),
    cancel: &CancellationToken,
) -> Option<[u8; 4]> {
    let mut head = [0u8; 4];
    let read = tokio::time::timeout(SNIFF_TIMEOUT, stream.read_exact(&mut head));
    tokio::select! {
        _ = cancel.cancelled() => None,
        r = read => match r {
            Ok(Ok(_)) => Some(head),
            Ok(Err(e)) => {
                debug!(error = %e, "connection closed before a request");
                None
            }
            Err(_) => {
                debug!("connection sent nothing; closed");
                None
            }
        },
    }
}

/// Listen on `path` for clients on this host. A socket file left by a master that is
/// gone is replaced; one a live process still serves, or a file that is not a socket,
/// is an error naming the path.
pub(super) fn bind_local_socket(path: &Path) -> FsResult<UnixListener> {
    let what = |e: std::io::Error, step: &str| {
        FsError::io_ctx(format!("master.local_socket {}: {step}", path.display()), e)
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| what(e, "create its directory"))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => {
            return Err(FsError::config(format!(
                "master.local_socket {} exists and is not a socket",
                path.display()
            )));
        }
        Ok(_) => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(FsError::config(format!(
                    "master.local_socket {} is served by another running process",
                    path.display()
                )));
            }
            std::fs::remove_file(path).map_err(|e| what(e, "remove the stale socket"))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(what(e, "inspect")),
    }
    let listener = UnixListener::bind(path).map_err(|e| what(e, "bind"))?;
    // any local user may connect; the hello's cluster token still decides
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| what(e, "set its mode"))?;
    Ok(listener)
}

/// Serve framed connections from clients on this host until `cancel` fires; their calls
/// count as calls to `master_addr` (the TCP address), as fault points and logs expect.
pub(super) async fn accept_local(
    listener: UnixListener,
    master_addr: std::net::SocketAddr,
    svc: Arc<MasterSvc>,
    auth: AuthInterceptor,
    cancel: CancellationToken,
) {
    let what = "master local socket";
    while let Some((stream, _)) = next_conn(|| listener.accept(), &cancel, what).await {
        let (svc, auth, cancel) = (svc.clone(), auth.clone(), cancel.clone());
        tokio::spawn(async move {
            let mut stream = stream;
            let Some(head) = sniff(&mut stream, &cancel).await else {
                return;
            };
            if head == HELLO_MAGIC {
                let stop = cancel.cancelled_owned();
                let ok = |t: &[u8]| auth.allows_token(t);
                rpc_server::serve_unix(stream, master_addr, svc, ok, stop).await;
            } else {
                debug!("local socket connection is not a framed client; closed");
            }
        });
    }
}
