//! The control-plane client: one framed connection (`master_conn`) to the current master,
//! shared by every call, per-call timeouts, retries of idempotent calls and of mutations
//! the master applies once per request id (`CallKind::Once`), and failover across
//! `client.master_addrs` on `Unavailable` / `NotLeader`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use curvine_common::conf::ClientConf;
use curvine_common::rpc::MasterRpc;
use curvine_common::types::REQUEST_TARGET;
use curvine_common::{FsError, FsResult};
use tracing::{debug, debug_span, info, warn, Instrument};

use crate::master_conn::Conn;
use crate::metrics;
use crate::retry::RetryPolicy;

/// Whether a call may be repeated safely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallKind {
    /// Reads (and idempotent writes such as `mkdir -p`): retried on any retryable error.
    Idempotent,
    /// Mutations: retried only when the master surely did not apply them: `NotLeader`,
    /// or the request never reached it (connection refused, as while it restarts).
    Mutation,
    /// Mutations the master applies once per request id (`CallerInfo.call_id`, kept in
    /// its retry cache): retried on any retryable error, a lost reply and a failover
    /// included, with the same id; a retry of one already applied gets its first reply.
    Once,
}

pub(crate) struct MasterClient {
    addrs: Vec<String>,
    /// Index into `addrs` of the master in use, and the connection to it once made.
    current: Mutex<(usize, Option<Arc<Conn>>)>,
    /// One connection attempt at a time.
    connecting: tokio::sync::Mutex<()>,
    connect_timeout: Duration,
    rpc_timeout: Duration,
    retry: RetryPolicy,
    token: String,
    /// The master's Unix socket, for a master on this host.
    local_socket: Option<PathBuf>,
}

impl MasterClient {
    /// Connect to the first reachable master in `conf.master_addrs`; fails with
    /// `Unavailable` (or `Timeout`) within `connect_timeout` per address.
    pub(crate) async fn connect(
        conf: &ClientConf,
        auth_token: &str,
        local_socket: &Path,
    ) -> FsResult<MasterClient> {
        let client = Self::lazy(conf, auth_token, local_socket)?;
        let mut last = None;
        for (i, addr) in client.addrs.iter().enumerate() {
            let local = client.local_socket.as_deref();
            match Conn::open(addr, &client.token, client.connect_timeout, local).await {
                Ok(conn) => {
                    info!(master = %addr, "connected to master");
                    *client.lock() = (i, Some(Arc::new(conn)));
                    return Ok(client);
                }
                Err(e) => {
                    debug!(master = %addr, error = %e, "master unreachable");
                    last = Some(e);
                }
            }
        }
        let detail = last.map(|e| e.to_string()).unwrap_or_default();
        Err(FsError::Unavailable {
            message: format!(
                "no master reachable at {} ({detail})",
                client.addrs.join(", ")
            ),
        })
    }

    /// A client that connects on first use (no network I/O here). `local_socket` (empty
    /// = none) is the master's Unix socket, used when a master address is a loopback one.
    pub(crate) fn lazy(
        conf: &ClientConf,
        auth_token: &str,
        local_socket: &Path,
    ) -> FsResult<MasterClient> {
        if conf.master_addrs.is_empty() {
            return Err(FsError::config("client.master_addrs must not be empty"));
        }
        if !auth_token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(FsError::config(
                "cluster.auth_token must be printable ASCII",
            ));
        }
        curvine_common::rpc::hello(auth_token)?;
        Ok(MasterClient {
            addrs: conf.master_addrs.clone(),
            current: Mutex::new((0, None)),
            connecting: tokio::sync::Mutex::new(()),
            connect_timeout: conf.connect_timeout.get(),
            rpc_timeout: conf.rpc_timeout.get(),
            retry: RetryPolicy {
                attempts: conf.rpc_retries.max(1),
                backoff: conf.retry_backoff.get(),
            },
            token: auth_token.to_string(),
            local_socket: Some(local_socket.to_path_buf()).filter(|p| !p.as_os_str().is_empty()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, Option<Arc<Conn>>)> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection to the current master, made now if there is none (or it ended).
    /// An error means nothing was sent.
    async fn conn(&self) -> FsResult<(usize, Arc<Conn>)> {
        let usable = |cur: &(usize, Option<Arc<Conn>>)| match &cur.1 {
            Some(c) if c.usable() => Some((cur.0, c.clone())),
            _ => None,
        };
        if let Some(c) = usable(&self.lock()) {
            return Ok(c);
        }
        let _one = self.connecting.lock().await;
        if let Some(c) = usable(&self.lock()) {
            return Ok(c);
        }
        let idx = self.lock().0;
        let local = self.local_socket.as_deref();
        let conn =
            Arc::new(Conn::open(&self.addrs[idx], &self.token, self.connect_timeout, local).await?);
        let mut cur = self.lock();
        if cur.0 == idx {
            cur.1 = Some(conn.clone());
        }
        Ok((idx, conn))
    }

    /// Move to another master after `failed` was unavailable or not the leader.
    fn failover(&self, failed: usize, leader: Option<&str>) {
        let mut cur = self.lock();
        if cur.0 != failed {
            return; // another call already moved on
        }
        match leader {
            Some(l) => match self.addrs.iter().position(|a| a == l) {
                Some(next) => *cur = (next, None),
                None => warn!(leader = %l, "leader hint not in client.master_addrs; ignored"),
            },
            None if self.addrs.len() > 1 => {
                let next = (failed + 1) % self.addrs.len();
                warn!(from = %self.addrs[failed], to = %self.addrs[next], "switching master");
                *cur = (next, None);
            }
            None => {} // the only master: the next call reconnects to it
        }
    }

    /// The per-call timeout.
    pub(crate) fn rpc_timeout(&self) -> Duration {
        self.rpc_timeout
    }

    /// Make one call with the per-call timeout, retries per `kind` and failover.
    pub(crate) async fn call<R: MasterRpc>(
        &self,
        what: &'static str,
        kind: CallKind,
        req: R,
    ) -> FsResult<R::Response> {
        // set by an attempt whose request the master surely did not apply
        let not_applied = AtomicBool::new(false);
        let retry_if = |e: &FsError| match kind {
            CallKind::Idempotent => e.is_retryable(),
            CallKind::Mutation => {
                matches!(e, FsError::NotLeader { .. }) || not_applied.load(Ordering::Relaxed)
            }
            // a lost reply, a stopped master, a timeout: the same request (same id) again
            CallKind::Once => e.is_retryable(),
        };
        // within the call's timeout, tries go on through an election with several
        // masters, and while a master waits for its workers' reports before it says
        // where a block is (`ReplicasUnknown`)
        let until = Some(Instant::now() + self.rpc_timeout);
        let several = self.addrs.len() > 1;
        let past = |e: &FsError| several || matches!(e, FsError::ReplicasUnknown { .. });
        // every try of the call, and what it logs, in one span with the request id the
        // master's `master.call` span shows too (formatted only when the span is on)
        let span = debug_span!(
            target: REQUEST_TARGET,
            "client.call",
            method = R::NAME,
            req = %req.request_id(),
        );
        // no clock reading when metrics are off (`web.metrics`)
        let start = curvine_common::web::recording().then(Instant::now);
        let tries = self.retry.run_if_until(what, retry_if, until, past, |_| {
            let req = &req;
            let not_applied = &not_applied;
            async move {
                not_applied.store(false, Ordering::Relaxed);
                let (idx, res) = match self.conn().await {
                    Ok((idx, conn)) => (idx, conn.call(req, self.rpc_timeout).await),
                    Err(error) => {
                        // unreachable (refused, or no answer within connect_timeout,
                        // as a host cut off the network): try the next master, even
                        // when this one was the leader a moment ago
                        let idx = self.lock().0;
                        self.failover(idx, None);
                        let ce = crate::master_conn::CallError {
                            error,
                            not_applied: true,
                        };
                        (idx, Err(ce))
                    }
                };
                let e = match res {
                    Ok(v) => return Ok(v),
                    Err(ce) => {
                        not_applied.store(ce.not_applied, Ordering::Relaxed);
                        ce.error
                    }
                };
                match &e {
                    FsError::NotLeader { leader } => {
                        let hint = (!leader.is_empty()).then_some(leader.as_str());
                        self.failover(idx, hint);
                    }
                    FsError::Unavailable { .. } => self.failover(idx, None),
                    _ => {}
                }
                Err(e)
            }
        });
        let r = tries.instrument(span).await;
        if let Some(start) = start {
            metrics::client().call(R::METHOD, start, r.as_ref().err());
        }
        r.map_err(|e| match e {
            FsError::Unavailable { message } => FsError::Unavailable {
                message: format!("{what}: {message}"),
            },
            other => other,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use curvine_common::proto::MkdirRequest;
    use tokio::io::AsyncReadExt;

    use super::*;

    /// A master that reads the hello and a request, then hangs up, first saying it
    /// applied nothing when `goaway`. Returns its address and a count of connections.
    async fn broken_master(goaway: bool) -> (std::net::SocketAddr, Arc<AtomicU32>) {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicU32::new(0));
        let n = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                n.fetch_add(1, Ordering::SeqCst);
                let mut b = [0u8; 64];
                let _ = s.read(&mut b).await;
                if goaway {
                    let mut g = bytes::BytesMut::new();
                    curvine_common::rpc::encode_goaway(&mut g, 0);
                    let _ = s.write_all(&g).await;
                    let _ = s.shutdown().await;
                    let _ = s.read(&mut b).await; // until the client hangs up
                }
            }
        });
        (addr, accepted)
    }

    fn conf(addr: String) -> ClientConf {
        let mut conf = ClientConf::default();
        conf.master_addrs = vec![addr];
        conf.rpc_retries = 3;
        conf.retry_backoff = curvine_common::conf::Dur(Duration::from_millis(1));
        conf.rpc_timeout = curvine_common::conf::Dur(Duration::from_secs(5));
        conf
    }

    /// A mutation whose connection is refused never reached the master: it is retried.
    /// One that reached it and failed is not; an idempotent call is.
    #[tokio::test]
    async fn mutations_retry_only_when_never_sent() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        }; // closed again: connections are refused
        let client =
            MasterClient::lazy(&conf(format!("127.0.0.1:{port}")), "", Path::new("")).unwrap();
        let err = client
            .call("mkdir", CallKind::Mutation, MkdirRequest::default())
            .await
            .unwrap_err();
        assert!(matches!(err, FsError::Unavailable { .. }), "{err}");

        // a server that reads the request, then hangs up: it may have applied it
        let (addr, accepted) = broken_master(false).await;
        let client = MasterClient::lazy(&conf(addr.to_string()), "", Path::new("")).unwrap();
        let _ = client
            .call("mkdir", CallKind::Mutation, MkdirRequest::default())
            .await
            .unwrap_err();
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "maybe delivered: not retried"
        );
        let _ = client
            .call("mkdir", CallKind::Idempotent, MkdirRequest::default())
            .await
            .unwrap_err();
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            4,
            "idempotent: every try made"
        );
    }

    /// A master that stops says which calls it did not apply (goaway); those mutations
    /// are retried, on a new connection.
    #[tokio::test]
    async fn goaway_makes_unapplied_mutations_retry() {
        let (addr, accepted) = broken_master(true).await;
        let client = MasterClient::lazy(&conf(addr.to_string()), "", Path::new("")).unwrap();
        let err = client
            .call("mkdir", CallKind::Mutation, MkdirRequest::default())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("stopping"), "{err}");
        assert_eq!(accepted.load(Ordering::SeqCst), 3, "not applied: retried");
    }
}
