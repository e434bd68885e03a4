//! The control-plane client: one tonic channel to the current master (reused by every
//! call), per-call timeouts, retries of idempotent calls and failover across
//! `client.master_addrs` on `Unavailable` / `NotLeader`.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;
use std::time::Duration;

use curvine_common::conf::ClientConf;
use curvine_common::proto::master_service_client::MasterServiceClient;
use curvine_common::{FsError, FsResult};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tracing::{debug, info, warn};

use crate::retry::RetryPolicy;

/// gRPC metadata key carrying `cluster.auth_token` (also sent as `authorization: Bearer`).
pub const AUTH_METADATA_KEY: &str = "x-curvine-token";

/// Whether a call may be repeated safely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallKind {
    /// Reads (and idempotent writes such as `mkdir -p`): retried on any retryable error.
    Idempotent,
    /// Mutations: retried only when the master surely did not apply them: `NotLeader`,
    /// or the request never reached it (connection refused, as while it restarts).
    Mutation,
}

pub(crate) type Client = MasterServiceClient<Channel>;

pub(crate) struct MasterClient {
    addrs: Vec<String>,
    /// Index into `addrs` of the master in use, and its channel.
    current: RwLock<(usize, Channel)>,
    connect_timeout: Duration,
    rpc_timeout: Duration,
    retry: RetryPolicy,
    token: Option<(MetadataValue<Ascii>, MetadataValue<Ascii>)>,
}

fn endpoint(addr: &str, connect_timeout: Duration, rpc_timeout: Duration) -> FsResult<Endpoint> {
    let uri = if addr.starts_with("http://") || addr.starts_with("https://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    let ep = Endpoint::from_shared(uri)
        .map_err(|e| FsError::config(format!("bad master address {addr:?}: {e}")))?;
    // Our own timeout (rpc_timeout) fires first and reports a clean Timeout.
    Ok(ep
        .connect_timeout(connect_timeout)
        .timeout(rpc_timeout + Duration::from_secs(1))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true))
}

impl MasterClient {
    /// Connect to the first reachable master in `conf.master_addrs`; fails with
    /// `Unavailable` (or `Timeout`) within `connect_timeout` per address.
    pub(crate) async fn connect(conf: &ClientConf, auth_token: &str) -> FsResult<MasterClient> {
        let mut client = Self::lazy(conf, auth_token)?;
        let mut last = None;
        for (i, addr) in client.addrs.iter().enumerate() {
            let ep = endpoint(addr, client.connect_timeout, client.rpc_timeout)?;
            match tokio::time::timeout(client.connect_timeout, ep.connect()).await {
                Ok(Ok(ch)) => {
                    info!(master = %addr, "connected to master");
                    client.current = RwLock::new((i, ch));
                    return Ok(client);
                }
                Ok(Err(e)) => {
                    debug!(master = %addr, error = %e, "master unreachable");
                    last = Some(FsError::Unavailable {
                        message: format!("master {addr}: {}", error_chain(&e)),
                    });
                }
                Err(_) => {
                    debug!(master = %addr, "connect timed out");
                    last = Some(FsError::Timeout {
                        message: format!("connect to master {addr} ({:?})", client.connect_timeout),
                    });
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

    /// A client whose channel connects on first use (no network I/O here).
    pub(crate) fn lazy(conf: &ClientConf, auth_token: &str) -> FsResult<MasterClient> {
        if conf.master_addrs.is_empty() {
            return Err(FsError::config("client.master_addrs must not be empty"));
        }
        let connect_timeout = conf.connect_timeout.get();
        let rpc_timeout = conf.rpc_timeout.get();
        let first = endpoint(&conf.master_addrs[0], connect_timeout, rpc_timeout)?;
        let token = if auth_token.is_empty() {
            None
        } else {
            let bad = |_| FsError::config("cluster.auth_token must be printable ASCII");
            Some((
                MetadataValue::try_from(auth_token).map_err(bad)?,
                MetadataValue::try_from(format!("Bearer {auth_token}")).map_err(bad)?,
            ))
        };
        Ok(MasterClient {
            addrs: conf.master_addrs.clone(),
            current: RwLock::new((0, first.connect_lazy())),
            connect_timeout,
            rpc_timeout,
            retry: RetryPolicy {
                attempts: conf.rpc_retries.max(1),
                backoff: conf.retry_backoff.get(),
            },
            token,
        })
    }

    fn client(&self) -> (usize, Client) {
        let cur = self.current.read().unwrap_or_else(|p| p.into_inner());
        (cur.0, MasterServiceClient::new(cur.1.clone()))
    }

    /// Move to another master after `failed` was unavailable or not the leader.
    fn failover(&self, failed: usize, leader: Option<&str>) {
        if self.addrs.len() < 2 && leader.is_none() {
            return; // the channel reconnects to the only master by itself
        }
        let mut cur = self.current.write().unwrap_or_else(|p| p.into_inner());
        if cur.0 != failed {
            return; // another call already moved on
        }
        let next = leader
            .and_then(|l| self.addrs.iter().position(|a| a == l))
            .unwrap_or((failed + 1) % self.addrs.len());
        let addr = leader.unwrap_or(&self.addrs[next]);
        match endpoint(addr, self.connect_timeout, self.rpc_timeout) {
            Ok(ep) => {
                warn!(from = %self.addrs[failed], to = %addr, "switching master");
                *cur = (next, ep.connect_lazy());
            }
            Err(e) => warn!(error = %e, "bad leader hint ignored"),
        }
    }

    /// Make one call: `f(client, request)` with the auth metadata, the per-call timeout,
    /// retries per `kind` and failover.
    pub(crate) async fn call<Req, Resp, F, Fut>(
        &self,
        what: &'static str,
        kind: CallKind,
        req: Req,
        f: F,
    ) -> FsResult<Resp>
    where
        Req: Clone,
        F: Fn(Client, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        // set by an attempt whose request never left this host
        let undelivered = AtomicBool::new(false);
        let retry_if = |e: &FsError| match kind {
            CallKind::Idempotent => e.is_retryable(),
            // the master surely did not apply a mutation it refused as a follower or
            // never received
            CallKind::Mutation => {
                matches!(e, FsError::NotLeader { .. }) || undelivered.load(Ordering::Relaxed)
            }
        };
        self.retry
            .run_if(what, retry_if, |_| {
                let req = req.clone();
                let f = &f;
                let undelivered = &undelivered;
                async move {
                    undelivered.store(false, Ordering::Relaxed);
                    let (idx, client) = self.client();
                    let mut request = tonic::Request::new(req);
                    if let Some((raw, bearer)) = &self.token {
                        request
                            .metadata_mut()
                            .insert(AUTH_METADATA_KEY, raw.clone());
                        request
                            .metadata_mut()
                            .insert("authorization", bearer.clone());
                    }
                    let res = match tokio::time::timeout(self.rpc_timeout, f(client, request)).await
                    {
                        Ok(Ok(resp)) => Ok(resp.into_inner()),
                        Ok(Err(status)) => {
                            if never_sent(&status) {
                                undelivered.store(true, Ordering::Relaxed);
                            }
                            Err(FsError::from(status))
                        }
                        Err(_) => Err(FsError::Timeout {
                            message: format!("{what} ({:?})", self.rpc_timeout),
                        }),
                    };
                    match res {
                        Ok(v) => Ok(v),
                        Err(e) => {
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
                    }
                }
            })
            .await
            .map_err(|e| match e {
                FsError::Unavailable { message } => FsError::Unavailable {
                    message: format!("{what}: {message}"),
                },
                other => other,
            })
    }
}

/// Whether a failed call's request surely never reached the master: the connection
/// to it could not be made (refused, or the connect itself failed or timed out).
fn never_sent(status: &tonic::Status) -> bool {
    if status.code() != tonic::Code::Unavailable {
        return false;
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(e) = src {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return true;
            }
        }
        if let Some(t) = e.downcast_ref::<tonic::transport::Error>() {
            // tonic's own error for a connection it could not establish
            if error_chain(t).contains("tcp connect error") {
                return true;
            }
        }
        src = e.source();
    }
    false
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use curvine_common::proto::MkdirRequest;

    use super::*;

    /// A mutation whose connection is refused never reached the master: it is retried.
    /// One that reached it and failed is not.
    #[tokio::test]
    async fn mutations_retry_only_when_never_sent() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        }; // closed again: connections are refused
        let mut conf = ClientConf::default();
        conf.master_addrs = vec![format!("127.0.0.1:{port}")];
        conf.rpc_retries = 3;
        conf.retry_backoff = curvine_common::conf::Dur(Duration::from_millis(1));
        let client = MasterClient::lazy(&conf, "").unwrap();
        let calls = AtomicU32::new(0);
        let err = client
            .call(
                "mkdir",
                CallKind::Mutation,
                MkdirRequest::default(),
                |mut c, r| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async move { c.mkdir(r).await }
                },
            )
            .await
            .unwrap_err();
        assert!(matches!(err, FsError::Unavailable { .. }), "{err}");
        assert_eq!(calls.load(Ordering::SeqCst), 3, "refused: every try made");

        // a server that answers but breaks the call: the request was sent, no retry
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                drop(s); // accept, then hang up
            }
        });
        conf.master_addrs = vec![addr.to_string()];
        let client = MasterClient::lazy(&conf, "").unwrap();
        let calls = AtomicU32::new(0);
        let idempotent = AtomicU32::new(0);
        let _ = client
            .call(
                "mkdir",
                CallKind::Mutation,
                MkdirRequest::default(),
                |mut c, r| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async move { c.mkdir(r).await }
                },
            )
            .await
            .unwrap_err();
        let _ = client
            .call(
                "mkdir",
                CallKind::Idempotent,
                MkdirRequest::default(),
                |mut c, r| {
                    idempotent.fetch_add(1, Ordering::SeqCst);
                    async move { c.mkdir(r).await }
                },
            )
            .await
            .unwrap_err();
        assert_eq!(idempotent.load(Ordering::SeqCst), 3);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "maybe delivered: not retried"
        );
    }
}
