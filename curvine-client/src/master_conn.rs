//! One framed connection to the master (`curvine_common::rpc`): many calls in flight at
//! once, matched to their replies by id. A caller writes its request straight onto the
//! socket; only when the socket is full does a writer task drain the rest. A reader task
//! hands each reply to its caller.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use curvine_common::rpc::{self, MasterRpc, Reply};
use curvine_common::{FsError, FsResult};
use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{oneshot, Notify};
use tracing::debug;

/// Why a call failed, and whether the master surely did not apply it.
#[derive(Debug)]
pub(crate) struct CallError {
    pub(crate) error: FsError,
    /// The request never reached the master, or the master said it did not apply it.
    pub(crate) not_applied: bool,
}

enum Outcome {
    Reply(Reply),
    /// The connection ended before the reply came.
    Lost {
        not_applied: bool,
        why: String,
    },
}

struct Shared {
    /// `None` once the connection is finished: no new call may start on it.
    pending: Mutex<Option<HashMap<u64, oneshot::Sender<Outcome>>>>,
    /// The master said it stops, or the connection ended: no new call may start here.
    closing: AtomicBool,
    /// The `Conn` is gone.
    dropped: AtomicBool,
}

impl Shared {
    fn accepting(&self) -> bool {
        !self.closing.load(Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<HashMap<u64, oneshot::Sender<Outcome>>>> {
        lock(&self.pending)
    }

    /// End the connection: every call still waiting fails.
    fn finish(&self, not_applied: bool, why: &str) {
        self.closing.store(true, Ordering::SeqCst);
        let calls = self.lock().take();
        for (_, tx) in calls.into_iter().flatten() {
            let _ = tx.send(Outcome::Lost {
                not_applied,
                why: why.to_string(),
            });
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The write side of the connection: TCP, or the master's Unix socket on this host.
enum WriteHalf {
    Tcp(tokio::net::tcp::OwnedWriteHalf),
    Unix(tokio::net::unix::OwnedWriteHalf),
}

impl WriteHalf {
    async fn writable(&self) -> std::io::Result<()> {
        match self {
            WriteHalf::Tcp(w) => w.writable().await,
            WriteHalf::Unix(w) => w.writable().await,
        }
    }

    fn try_write(&self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            WriteHalf::Tcp(w) => w.try_write(buf),
            WriteHalf::Unix(w) => w.try_write(buf),
        }
    }
}

/// The port of `hostport` when it names this host's loopback interface.
fn loopback_port(hostport: &str) -> Option<u16> {
    let (host, port) = hostport.rsplit_once(':')?;
    let port = port.parse::<u16>().ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    loopback.then_some(port)
}

pub(crate) struct Conn {
    addr: String,
    /// Bytes of requests not yet written (callers write directly while this is empty;
    /// the writer task drains it when the socket was full).
    out: Arc<Mutex<BytesMut>>,
    wr: Arc<WriteHalf>,
    wake_writer: Arc<Notify>,
    next_id: AtomicU64,
    shared: Arc<Shared>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        // the writer task ends; the socket's write side closes with the last handle
        self.shared.dropped.store(true, Ordering::SeqCst);
        self.wake_writer.notify_one();
    }
}

impl Conn {
    /// Connect to `addr` (`host:port`, an `http://` prefix is ignored) and say hello.
    /// When `addr` is a loopback address and `local_socket` is given, the Unix socket of
    /// the master on that port is tried first (TCP if it cannot be reached). Any error
    /// here means no request was sent.
    pub(crate) async fn open(
        addr: &str,
        token: &str,
        timeout: Duration,
        local_socket: Option<&Path>,
    ) -> FsResult<Conn> {
        let hostport = addr
            .strip_prefix("http://")
            .or_else(|| addr.strip_prefix("https://"))
            .unwrap_or(addr)
            .trim_end_matches('/');
        let hello = rpc::hello(token)?;
        let what = format!("hello to master {addr}");
        let socket = local_socket
            .zip(loopback_port(hostport))
            .map(|(base, port)| curvine_common::conf::local_socket_path(base, port));
        let local = match socket.as_deref() {
            Some(path) => match tokio::time::timeout(timeout, UnixStream::connect(path)).await {
                Ok(Ok(s)) => {
                    curvine_common::busy_poll::watch(&s);
                    Some(s)
                }
                Ok(Err(e)) => {
                    debug!(socket = %path.display(), error = %e, "master local socket unusable; using TCP");
                    None
                }
                Err(_) => None,
            },
            None => None,
        };
        let (mut rd, wr): (Box<dyn AsyncRead + Unpin + Send>, WriteHalf) = match local {
            Some(mut s) => {
                crate::pool::timed(&what, timeout, s.write_all(&hello)).await?;
                let (rd, wr) = s.into_split();
                (Box::new(rd), WriteHalf::Unix(wr))
            }
            None => {
                let mut s = crate::pool::connect("master", hostport, timeout).await?;
                crate::pool::timed(&what, timeout, s.write_all(&hello)).await?;
                let (rd, wr) = s.into_split();
                (Box::new(rd), WriteHalf::Tcp(wr))
            }
        };
        let wr = Arc::new(wr);
        let shared = Arc::new(Shared {
            pending: Mutex::new(Some(HashMap::new())),
            closing: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
        });
        let out = Arc::new(Mutex::new(BytesMut::new()));
        let wake_writer = Arc::new(Notify::new());

        let (sh, w, o, wake) = (shared.clone(), wr.clone(), out.clone(), wake_writer.clone());
        tokio::spawn(async move {
            while !sh.dropped.load(Ordering::SeqCst) {
                let pending = !lock(&o).is_empty();
                if !pending {
                    wake.notified().await;
                    continue;
                }
                if let Err(e) = w.writable().await {
                    return sh.finish(false, &format!("write to master: {e}"));
                }
                let mut o = lock(&o);
                match w.try_write(&o) {
                    Ok(n) => o.advance(n),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => {
                        debug!(error = %e, "write to master failed");
                        o.clear();
                        drop(o);
                        // some of these requests may have arrived
                        return sh.finish(false, &format!("write to master: {e}"));
                    }
                }
            }
        });

        let sh = shared.clone();
        tokio::spawn(async move {
            let mut buf = BytesMut::with_capacity(64 << 10);
            let why = loop {
                match rd.read_buf(&mut buf).await {
                    Ok(0) => break "master closed the connection".to_string(),
                    Ok(_) => {}
                    Err(e) => break format!("read from master: {e}"),
                }
                let mut broken = None;
                loop {
                    let frame = match rpc::split_frame(&mut buf, 9) {
                        Ok(Some(f)) => f,
                        Ok(None) => break,
                        Err(e) => {
                            broken = Some(e.to_string());
                            break;
                        }
                    };
                    match rpc::parse_reply(frame) {
                        Ok((_, Reply::GoAway(last))) => {
                            // calls after `last` were not applied; earlier ones still get
                            // their replies
                            sh.closing.store(true, Ordering::SeqCst);
                            let late: Vec<_> = match sh.lock().as_mut() {
                                Some(calls) => {
                                    let ids: Vec<u64> =
                                        calls.keys().copied().filter(|id| *id > last).collect();
                                    ids.iter().filter_map(|id| calls.remove(id)).collect()
                                }
                                None => Vec::new(),
                            };
                            for tx in late {
                                let _ = tx.send(Outcome::Lost {
                                    not_applied: true,
                                    why: "master is stopping".into(),
                                });
                            }
                        }
                        Ok((id, reply)) => {
                            let tx = sh.lock().as_mut().and_then(|c| c.remove(&id));
                            if let Some(tx) = tx {
                                let _ = tx.send(Outcome::Reply(reply));
                            } // else the caller gave up (timeout)
                        }
                        Err(e) => {
                            broken = Some(e.to_string());
                            break;
                        }
                    }
                }
                if let Some(b) = broken {
                    break format!("bad reply from master: {b}");
                }
            };
            debug!(why = %why, "master connection ended");
            sh.finish(false, &why);
        });

        Ok(Conn {
            addr: addr.to_string(),
            out,
            wr,
            wake_writer,
            next_id: AtomicU64::new(1),
            shared,
        })
    }

    /// Whether new calls can still start here.
    pub(crate) fn usable(&self) -> bool {
        self.shared.accepting()
    }

    /// One call, waiting at most `timeout` for its reply.
    pub(crate) async fn call<R: MasterRpc>(
        &self,
        req: &R,
        timeout: Duration,
    ) -> Result<R::Response, CallError> {
        let (otx, orx) = oneshot::channel();
        let not_sent = |why: &str| CallError {
            error: FsError::Unavailable {
                message: format!("master {}: {why}", self.addr),
            },
            not_applied: true,
        };
        let id = {
            // ids reach the writer in increasing order, which a goaway relies on
            let mut g = self.shared.lock();
            let Some(calls) = g.as_mut().filter(|_| self.shared.accepting()) else {
                return Err(not_sent("connection closed"));
            };
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let mut frame = BytesMut::new();
            rpc::encode_request(&mut frame, id, req);
            let mut out = lock(&self.out);
            if out.is_empty() {
                // the usual case: straight onto the socket, no task in between
                match self.wr.try_write(&frame) {
                    Ok(n) => frame.advance(n),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => {
                        drop(out);
                        drop(g);
                        self.shared.finish(false, &format!("write to master: {e}"));
                        return Err(not_sent(&e.to_string()));
                    }
                }
                if !frame.is_empty() {
                    out.extend_from_slice(&frame);
                    self.wake_writer.notify_one();
                }
            } else {
                out.extend_from_slice(&frame); // the writer is on it
            }
            calls.insert(id, otx);
            id
        };
        let outcome = match tokio::time::timeout(timeout, orx).await {
            Ok(Ok(o)) => o,
            Ok(Err(_)) => Outcome::Lost {
                not_applied: false,
                why: "connection dropped".into(),
            },
            Err(_) => {
                self.forget(id);
                return Err(CallError {
                    error: FsError::Timeout {
                        message: format!("{} ({timeout:?})", R::NAME),
                    },
                    not_applied: false,
                });
            }
        };
        match outcome {
            Outcome::Reply(Reply::Ok(body)) => R::Response::decode(body).map_err(|e| CallError {
                error: FsError::protocol(format!("cannot decode {} reply: {e}", R::NAME)),
                not_applied: false,
            }),
            Outcome::Reply(Reply::Err(status)) => Err(CallError {
                error: FsError::from(status),
                not_applied: false,
            }),
            Outcome::Reply(Reply::GoAway(_)) => Err(CallError {
                error: FsError::protocol("goaway in place of a reply"),
                not_applied: false,
            }),
            Outcome::Lost { not_applied, why } => Err(CallError {
                error: FsError::Unavailable {
                    message: format!("master {}: {why}", self.addr),
                },
                not_applied,
            }),
        }
    }

    fn forget(&self, id: u64) {
        if let Some(calls) = self.shared.lock().as_mut() {
            calls.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::loopback_port;

    #[test]
    fn only_loopback_addresses_with_a_port_use_the_local_socket() {
        assert_eq!(loopback_port("127.0.0.1:8995"), Some(8995));
        assert_eq!(loopback_port("127.0.0.2:9"), Some(9));
        assert_eq!(loopback_port("[::1]:7"), Some(7));
        assert_eq!(loopback_port("LocalHost:1"), Some(1));
        assert_eq!(loopback_port("10.0.0.1:8995"), None);
        assert_eq!(loopback_port("master.example:8995"), None);
        assert_eq!(loopback_port("127.0.0.1"), None);
        assert_eq!(loopback_port("127.0.0.1:99999"), None);
    }
}
