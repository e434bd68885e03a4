//! Data-plane connections to workers: framed TCP streams with `TCP_NODELAY`, pooled per
//! worker address. A connection goes back to the pool only after a clean end of an
//! operation (write commit OK, READ_END, short-circuit OK), never mid-stream.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use curvine_common::frame::{recv_frame, with_worker, write_frame};
use curvine_common::proto::{DataHeader, WorkerAddress};
use curvine_common::{FsError, FsResult};
use tokio::io::{AsyncRead, BufReader, ReadBuf};
use tokio::net::TcpStream;
use tracing::debug;

/// Largest frame payload the client accepts from a worker (workers send at most 1 MiB).
pub(crate) const MAX_RECV_PAYLOAD: usize = 64 << 20;
/// Idle connections kept per worker.
const MAX_IDLE_PER_WORKER: usize = 16;
/// Read buffer for frame headers; large payloads bypass it.
const READ_BUF: usize = 64 << 10;

/// `host:port` of a worker's data plane.
pub(crate) fn worker_addr(a: &WorkerAddress) -> String {
    if a.host.contains(':') && !a.host.starts_with('[') {
        format!("[{}]:{}", a.host, a.data_port)
    } else {
        format!("{}:{}", a.host, a.data_port)
    }
}

/// Whether a worker host is this client's host (short-circuit candidates).
pub(crate) fn is_local_host(host: &str, client_host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h == client_host
        || matches!(
            h,
            "127.0.0.1" | "localhost" | "::1" | "localhost.localdomain"
        )
}

/// One framed connection to a worker.
pub(crate) struct DataConn {
    stream: BufReader<TcpStream>,
    addr: String,
}

impl DataConn {
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    pub(crate) async fn send(&mut self, h: &DataHeader, payload: &[u8]) -> FsResult<()> {
        write_frame(&mut self.stream, h, payload)
            .await
            .map_err(|e| with_worker(e, &self.addr))
    }

    /// Receive one frame; an ERROR frame becomes its error, a closed stream an I/O error.
    pub(crate) async fn recv(&mut self, payload: &mut BytesMut) -> FsResult<DataHeader> {
        recv_frame(&mut self.stream, payload, MAX_RECV_PAYLOAD, &self.addr).await
    }

    /// After a failed send, the worker has usually written an ERROR frame explaining why
    /// before closing; fetch it (briefly) so the caller sees the real cause.
    pub(crate) async fn error_after_send_failure(&mut self, send_err: FsError) -> FsError {
        let mut buf = BytesMut::new();
        match tokio::time::timeout(Duration::from_millis(500), self.recv(&mut buf)).await {
            Ok(Err(e)) if !matches!(e, FsError::Io { .. }) => e,
            _ => send_err,
        }
    }
}

/// The stream of a block read (`curvine_common::block_read`) reads frames through this.
impl AsyncRead for DataConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

/// Idle connections per worker address.
pub(crate) struct WorkerPool {
    idle: Mutex<HashMap<String, Vec<BufReader<TcpStream>>>>,
    connect_timeout: Duration,
}

impl WorkerPool {
    pub(crate) fn new(connect_timeout: Duration) -> Self {
        WorkerPool {
            idle: Mutex::new(HashMap::new()),
            connect_timeout,
        }
    }

    fn take_idle(&self, addr: &str) -> Option<BufReader<TcpStream>> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.get_mut(addr).and_then(|v| v.pop())
    }

    async fn dial(&self, addr: &str) -> FsResult<DataConn> {
        let stream = connect("worker", addr, self.connect_timeout).await?;
        debug!(worker = %addr, "data connection opened");
        Ok(DataConn {
            stream: BufReader::with_capacity(READ_BUF, stream),
            addr: addr.to_string(),
        })
    }

    /// Return a connection after a clean end of an operation.
    pub(crate) fn put(&self, conn: DataConn) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let v = idle.entry(conn.addr).or_default();
        if v.len() < MAX_IDLE_PER_WORKER {
            v.push(conn.stream);
        }
    }

    /// Start an operation: send an `*_OPEN` header and wait for the worker's reply. A
    /// pooled connection the worker has since closed is replaced by a fresh one.
    pub(crate) async fn open(
        &self,
        addr: &str,
        header: &DataHeader,
        payload: &mut BytesMut,
    ) -> FsResult<(DataConn, DataHeader)> {
        if let Some(stream) = self.take_idle(addr) {
            let mut conn = DataConn {
                stream,
                addr: addr.to_string(),
            };
            match Self::exchange(&mut conn, header, payload).await {
                Ok(reply) => return Ok((conn, reply)),
                // a stale pooled connection: fall through to a fresh one
                Err(FsError::Io { .. }) => debug!(worker = %addr, "stale pooled connection"),
                Err(e) => return Err(e),
            }
        }
        let mut conn = self.dial(addr).await?;
        let reply = Self::exchange(&mut conn, header, payload).await?;
        Ok((conn, reply))
    }

    async fn exchange(
        conn: &mut DataConn,
        header: &DataHeader,
        payload: &mut BytesMut,
    ) -> FsResult<DataHeader> {
        if let Err(e) = conn.send(header, &[]).await {
            return Err(conn.error_after_send_failure(e).await);
        }
        conn.recv(payload).await
    }

    #[cfg(test)]
    pub(crate) fn idle_count(&self, addr: &str) -> usize {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.get(addr).map_or(0, |v| v.len())
    }
}

/// A TCP connection to `addr` with TCP_NODELAY, made within `timeout`; `what` names the
/// peer in errors. Any error means nothing was sent.
///
/// The same `timeout` also bounds how long the connection may go unanswered later: the
/// kernel probes an idle connection every second (keepalive) and drops the connection
/// once what it sent, a probe or a request, stays unacknowledged for `timeout`
/// (`TCP_USER_TIMEOUT`). A peer whose host is gone or cut off the network then fails
/// the calls waiting on it within `timeout` instead of `client.rpc_timeout`, and the
/// caller moves on to another master; a peer that is merely slow to answer is not
/// affected, because its kernel acknowledges the bytes and the probes.
pub(crate) async fn connect(what: &str, addr: &str, timeout: Duration) -> FsResult<TcpStream> {
    let what = format!("connect to {what} {addr}");
    let stream = timed(&what, timeout, TcpStream::connect(addr)).await?;
    curvine_common::busy_poll::watch(&stream);
    stream
        .set_nodelay(true)
        .map_err(|e| FsError::io_ctx(format!("{what}: set TCP_NODELAY"), e))?;
    let probe = timeout
        .min(Duration::from_secs(1))
        .max(Duration::from_millis(100));
    let sock = socket2::SockRef::from(&stream);
    sock.set_tcp_keepalive(
        &socket2::TcpKeepalive::new()
            .with_time(probe)
            .with_interval(probe),
    )
    .and_then(|()| sock.set_tcp_user_timeout(Some(timeout)))
    .map_err(|e| FsError::io_ctx(format!("{what}: set TCP keepalive"), e))?;
    Ok(stream)
}

/// Run the network step `what` within `timeout`: an I/O error is `Unavailable` (the
/// peer is unreachable or went away), running out of time is `Timeout`.
pub(crate) async fn timed<T>(
    what: &str,
    timeout: Duration,
    step: impl std::future::Future<Output = std::io::Result<T>>,
) -> FsResult<T> {
    match tokio::time::timeout(timeout, step).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(FsError::Unavailable {
            message: format!("{what}: {e}"),
        }),
        Err(_) => Err(FsError::Timeout {
            message: format!("{what} ({timeout:?})"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_hosts_are_recognized() {
        assert!(is_local_host("127.0.0.1", "node1"));
        assert!(is_local_host("localhost", "node1"));
        assert!(is_local_host("node1", "node1"));
        assert!(!is_local_host("node2", "node1"));
        let a = WorkerAddress {
            worker_id: 1,
            host: "::1".into(),
            data_port: 9,
        };
        assert_eq!(worker_addr(&a), "[::1]:9");
        assert!(is_local_host("[::1]", "x"));
    }
}
