//! The serving end of the framed control-plane transport (`rpc`): one connection's
//! requests run through any `MasterService` implementation (the master's, or a test's).

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tonic::transport::server::{Connected, TcpConnectInfo};
use tonic::{Request, Status};
use tracing::{debug, warn};

use crate::proto::master_service_server::MasterService;
use crate::proto::*;
use crate::rpc;

/// A call's encoded response, or its error.
type Handled = Result<Vec<u8>, Status>;

/// How long a client may take to finish its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Serve one framed connection whose magic was already read, until the client leaves,
/// breaks the protocol, or `stop` completes. `token_ok` judges the hello's token; calls
/// on a connection it refused fail with `Unauthenticated`.
///
/// On `stop` the connection reads no more requests, answers every request it has read,
/// tells the client which ones those were (goaway) and closes.
pub async fn serve<S, A, F>(stream: TcpStream, svc: Arc<S>, token_ok: A, stop: F)
where
    S: MasterService,
    A: FnOnce(&[u8]) -> bool,
    F: Future<Output = ()>,
{
    crate::busy_poll::watch(&stream);
    let info = stream.connect_info();
    let peer = info
        .remote_addr
        .map_or_else(|| "unknown".to_string(), |a| a.to_string());
    let (rd, wr) = stream.into_split();
    serve_halves(rd, wr, info, peer, svc, token_ok, stop).await
}

/// `serve` for a connection on the master's Unix socket (a client on this host).
/// Calls see `master_addr`, the master's TCP address, as the address they reached.
pub async fn serve_unix<S, A, F>(
    stream: UnixStream,
    master_addr: SocketAddr,
    svc: Arc<S>,
    token_ok: A,
    stop: F,
) where
    S: MasterService,
    A: FnOnce(&[u8]) -> bool,
    F: Future<Output = ()>,
{
    crate::busy_poll::watch(&stream);
    let info = TcpConnectInfo {
        local_addr: Some(master_addr),
        remote_addr: None,
    };
    let (rd, wr) = stream.into_split();
    serve_halves(
        rd,
        wr,
        info,
        "local socket".to_string(),
        svc,
        token_ok,
        stop,
    )
    .await
}

async fn serve_halves<S, A, F, R, W>(
    mut rd: R,
    mut wr: W,
    info: TcpConnectInfo,
    peer: String,
    svc: Arc<S>,
    token_ok: A,
    stop: F,
) where
    S: MasterService,
    A: FnOnce(&[u8]) -> bool,
    F: Future<Output = ()>,
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let authed = match read_hello(&mut rd).await {
        Ok(token) => token_ok(&token),
        Err(e) => return debug!(%peer, error = %e, "bad framed hello; closed"),
    };
    if !authed {
        warn!(%peer, "framed master connection with a wrong or missing cluster auth token");
    }
    // One task per connection: it reads requests, runs them as concurrent futures and
    // writes every reply ready at once in one write. No per-request task or channel.
    let call = |id: u64, method: u16, body: Bytes| {
        let (svc, info) = (svc.clone(), info.clone());
        async move {
            let reply = if authed {
                dispatch(&*svc, method, body, info).await
            } else {
                Err(Status::from(crate::FsError::Unauthenticated {
                    message: "wrong or missing cluster auth token".into(),
                }))
            };
            (id, reply)
        }
    };
    let mut inflight = FuturesUnordered::new();
    let mut buf = BytesMut::with_capacity(64 << 10);
    let mut out = BytesMut::with_capacity(64 << 10);
    let mut last_id = 0u64;
    let mut reading = true;
    tokio::pin!(stop);
    loop {
        if !out.is_empty() {
            if let Err(e) = wr.write_all(&out).await {
                return debug!(%peer, error = %e, "framed reply write failed");
            }
            out.clear();
        }
        if !reading && inflight.is_empty() {
            break;
        }
        tokio::select! {
            biased;
            _ = &mut stop, if reading => {
                // answer what was read; tell the client nothing later was applied
                rpc::encode_goaway(&mut out, last_id);
                reading = false;
            }
            Some((id, reply)) = inflight.next(), if !inflight.is_empty() => {
                rpc::encode_reply(&mut out, id, Handled::as_deref(&reply));
                while let Some(Some((id, reply))) = inflight.next().now_or_never() {
                    rpc::encode_reply(&mut out, id, Handled::as_deref(&reply));
                }
            }
            r = rd.read_buf(&mut buf), if reading => {
                match r {
                    Ok(0) => reading = false, // the client is done; finish its calls
                    Ok(_) => loop {
                        let frame = match rpc::split_frame(&mut buf, 10) {
                            Ok(Some(f)) => f,
                            Ok(None) => break,
                            Err(e) => {
                                return warn!(%peer, error = %e,
                                    "framed connection broke the protocol; closed");
                            }
                        };
                        let Ok((id, method, body)) = rpc::parse_request(frame) else {
                            continue; // split_frame's minimum length rules this out
                        };
                        last_id = last_id.max(id);
                        // Most calls finish at their first poll (a namespace read or
                        // a write that needs no sync): answer those here, and leave
                        // only the waiting ones to `inflight`.
                        let mut fut = Box::pin(call(id, method, body));
                        match poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await {
                            Poll::Ready((id, reply)) => {
                                rpc::encode_reply(&mut out, id, Handled::as_deref(&reply));
                            }
                            Poll::Pending => inflight.push(fut),
                        }
                    },
                    Err(e) => {
                        return debug!(%peer, error = %e, "framed connection read failed");
                    }
                }
            }
        }
    }
    let _ = wr.shutdown().await;
}

async fn read_hello(rd: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Vec<u8>> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    let mut v = [0u8; 3];
    tokio::time::timeout(HELLO_TIMEOUT, rd.read_exact(&mut v))
        .await
        .map_err(|_| bad("hello timed out"))??;
    if v[0] != rpc::VERSION {
        return Err(bad("unknown framed protocol version"));
    }
    let len = u16::from_be_bytes([v[1], v[2]]) as usize;
    if len > rpc::MAX_TOKEN {
        return Err(bad("token too long"));
    }
    let mut token = vec![0u8; len];
    tokio::time::timeout(HELLO_TIMEOUT, rd.read_exact(&mut token))
        .await
        .map_err(|_| bad("hello timed out"))??;
    Ok(token)
}

macro_rules! dispatch_table {
    ($($id:literal $name:ident $req:ident $resp:ident $f:ident;)*) => {
        /// Decode a framed request, run it through the `MasterService` method of its
        /// number and encode the reply.
        async fn dispatch<S: MasterService>(
            svc: &S,
            method: u16,
            body: Bytes,
            info: TcpConnectInfo,
        ) -> Handled {
            match method {
                $($id => {
                    let req = $req::decode(body).map_err(|e| {
                        Status::invalid_argument(format!(
                            "cannot decode {} request: {e}",
                            stringify!($name)
                        ))
                    })?;
                    let mut r = Request::new(req);
                    r.extensions_mut().insert(info);
                    let resp = svc.$f(r).await?;
                    Ok(resp.into_inner().encode_to_vec())
                })*
                m => Err(Status::unimplemented(format!("unknown master method {m}"))),
            }
        }
    };
}
crate::master_methods!(dispatch_table);
