//! openraft's RPCs between masters, as the gRPC service `RaftService` on the master's
//! port: the client side (`Net`, one `PeerClient` per target) and the server side
//! (`RaftSvc`). A request names the sender's cluster id; a master of another cluster is
//! refused, and a body that does not decode is refused without reaching openraft.
//!
//! Snapshots (`snapshot`) go in chunks of `SNAPSHOT_CHUNK` bytes read from the file
//! (`PeerClient::full_snapshot`); the follower writes them to a file of its own, checks
//! the whole file once the last has come, and only then hands it to openraft to install
//! (`RaftSvc::snapshot_chunk`). Neither side holds more than a chunk in memory.

use std::collections::HashMap;
use std::future::Future;
use std::io::SeekFrom;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use curvine_common::proto::raft_service_client::RaftServiceClient;
use curvine_common::proto::raft_service_server::RaftService;
use curvine_common::proto::{RaftReply, RaftRequest};
use curvine_common::FsError;
use openraft::error::{
    Fatal, InstallSnapshotError, NetworkError, RPCError, RaftError, ReplicationClosed,
    StreamingError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::storage::Snapshot;
use openraft::{AnyError, BasicNode, ErrorSubject, ErrorVerb, StorageIOError, Vote};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};
use tracing::{info, warn};

use super::super::auth::AUTH_METADATA_KEY;
use super::{snapshot, wire, Cfg, Raft};

/// Bytes of a snapshot file per call.
const SNAPSHOT_CHUNK: usize = 1 << 20;
/// How long the last chunk may take: the follower checks and installs the snapshot
/// before it answers.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

pub const KIND_APPEND: u32 = 1;
pub const KIND_VOTE: u32 = 2;
pub const KIND_SNAPSHOT: u32 = 3;

/// When each peer last answered a raft call: the leader's view of which masters it
/// reaches (`cv admin masters`).
#[derive(Debug, Default)]
pub struct Reach(Mutex<HashMap<u64, Instant>>);

impl Reach {
    fn answered(&self, id: u64) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(id, Instant::now());
    }

    /// How long ago master `id` last answered (`None`: never since this master started).
    pub fn since(&self, id: u64) -> Option<Duration> {
        let m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&id).map(|t| t.elapsed())
    }
}

/// Makes a client per peer.
pub struct Net {
    pub cluster_id: String,
    pub from: u64,
    pub token: String,
    pub connect_timeout: Duration,
    pub reach: Arc<Reach>,
}

impl RaftNetworkFactory<Cfg> for Net {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerClient {
        PeerClient {
            target,
            addr: node.addr.clone(),
            cluster_id: self.cluster_id.clone(),
            from: self.from,
            token: self.token.clone(),
            connect_timeout: self.connect_timeout,
            client: None,
            reach: self.reach.clone(),
        }
    }
}

pub struct PeerClient {
    target: u64,
    addr: String,
    cluster_id: String,
    from: u64,
    token: String,
    connect_timeout: Duration,
    client: Option<RaftServiceClient<Channel>>,
    reach: Arc<Reach>,
}

type RpcErr<E = openraft::error::Infallible> = RPCError<u64, BasicNode, RaftError<u64, E>>;

fn net_err<E: std::error::Error>(e: FsError) -> RPCError<u64, BasicNode, E> {
    RPCError::Network(NetworkError::new(&e))
}

impl PeerClient {
    /// One call; an error that says the peer was never reached is `Unreachable`.
    async fn call<E: std::error::Error>(
        &mut self,
        kind: u32,
        body: Vec<u8>,
        ttl: Duration,
    ) -> Result<Vec<u8>, RPCError<u64, BasicNode, E>> {
        let client = match &self.client {
            Some(c) => c.clone(),
            None => {
                let ep = Endpoint::from_shared(format!("http://{}", self.addr))
                    .map_err(|e| {
                        RPCError::Unreachable(Unreachable::new(&FsError::config(format!(
                            "peer address {}: {e}",
                            self.addr
                        ))))
                    })?
                    .connect_timeout(self.connect_timeout)
                    .tcp_nodelay(true);
                let c = RaftServiceClient::new(ep.connect_lazy())
                    .max_decoding_message_size(256 << 20)
                    .max_encoding_message_size(256 << 20);
                self.client = Some(c.clone());
                c
            }
        };
        let mut req = Request::new(RaftRequest {
            cluster_id: self.cluster_id.clone(),
            from: self.from,
            kind,
            body,
        });
        req.set_timeout(ttl);
        if !self.token.is_empty() {
            if let Ok(v) = self.token.parse() {
                req.metadata_mut().insert(AUTH_METADATA_KEY, v);
            }
        }
        let mut client = client;
        let r = tokio::time::timeout(ttl, client.call(req)).await;
        if matches!(&r, Ok(Ok(_)))
            || matches!(&r, Ok(Err(s)) if s.code() != tonic::Code::Unavailable)
        {
            self.reach.answered(self.target);
        }
        match r {
            Ok(Ok(r)) => Ok(r.into_inner().body),
            Ok(Err(s)) if s.code() == tonic::Code::Unavailable => Err(RPCError::Unreachable(
                Unreachable::new(&FsError::Unavailable {
                    message: format!("master {} ({}): {}", self.target, self.addr, s.message()),
                }),
            )),
            Ok(Err(s)) => Err(net_err(FsError::from(s))),
            Err(_) => Err(net_err(FsError::Timeout {
                message: format!("raft call to master {} ({})", self.target, self.addr),
            })),
        }
    }
}

fn stream_err(e: RPCError<u64, BasicNode, openraft::error::Infallible>) -> SnapErr {
    match e {
        RPCError::Unreachable(u) => StreamingError::Unreachable(u),
        RPCError::Timeout(t) => StreamingError::Timeout(t),
        RPCError::Network(n) => StreamingError::Network(n),
        other => StreamingError::Network(NetworkError::new(&other)),
    }
}

type SnapErr = StreamingError<Cfg, Fatal<u64>>;

impl PeerClient {
    /// Send the snapshot file in chunks; the follower's vote once it installed it, or
    /// as soon as it is higher than ours.
    async fn send_snapshot(
        &mut self,
        vote: Vote<u64>,
        mut snapshot: Snapshot<Cfg>,
        option: RPCOption,
    ) -> Result<SnapshotResponse<u64>, SnapErr> {
        let read_err = |e: std::io::Error| -> SnapErr {
            let e = StorageIOError::new(
                ErrorSubject::Snapshot(Some(snapshot.meta.signature())),
                ErrorVerb::Read,
                AnyError::new(&e),
            );
            StreamingError::StorageError(e.into())
        };
        let f = &mut snapshot.snapshot;
        let len = f.metadata().await.map_err(read_err)?.len();
        f.seek(SeekFrom::Start(0)).await.map_err(read_err)?;
        info!(target_node = self.target, snapshot = %snapshot.meta.snapshot_id, bytes = len,
            "sending a namespace snapshot");
        let mut buf = vec![0u8; SNAPSHOT_CHUNK];
        let mut offset = 0u64;
        loop {
            let n = (len - offset).min(SNAPSHOT_CHUNK as u64) as usize;
            f.read_exact(&mut buf[..n]).await.map_err(read_err)?;
            let done = offset + n as u64 >= len;
            let body = wire::WSnapChunk {
                vote: Some(wire::vote(&vote)),
                id: snapshot.meta.snapshot_id.clone(),
                offset,
                data: buf[..n].to_vec(),
                done,
            }
            .encode_to_vec();
            let ttl = if done {
                INSTALL_TIMEOUT
            } else {
                option.hard_ttl()
            };
            let reply = self
                .call(KIND_SNAPSHOT, body, ttl)
                .await
                .map_err(stream_err)?;
            let bad = |e: FsError| StreamingError::Network(NetworkError::new(&e));
            let r: wire::WSnapReply = wire::decode("snapshot reply", &reply).map_err(bad)?;
            let theirs = wire::from_vote(r.vote.as_ref()).map_err(bad)?;
            if done || theirs > vote {
                return Ok(SnapshotResponse::new(theirs));
            }
            offset += n as u64;
        }
    }
}

impl RaftNetwork<Cfg> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<Cfg>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RpcErr> {
        let body = wire::WAppend {
            vote: Some(wire::vote(&rpc.vote)),
            prev: wire::opt_log_id(&rpc.prev_log_id),
            entries: rpc.entries.iter().map(wire::entry).collect(),
            commit: wire::opt_log_id(&rpc.leader_commit),
        }
        .encode_to_vec();
        let reply = self.call(KIND_APPEND, body, option.hard_ttl()).await?;
        let r: wire::WAppendReply = wire::decode("append reply", &reply).map_err(net_err)?;
        Ok(match r.kind {
            0 => AppendEntriesResponse::Success,
            1 => AppendEntriesResponse::PartialSuccess(wire::from_opt_log_id(&r.matching)),
            2 => AppendEntriesResponse::Conflict,
            _ => AppendEntriesResponse::HigherVote(
                wire::from_vote(r.vote.as_ref()).map_err(net_err)?,
            ),
        })
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<Cfg>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RpcErr<InstallSnapshotError>> {
        // openraft sends snapshots through `full_snapshot` below
        Err(net_err(FsError::internal(
            "master snapshots are sent whole (full_snapshot)",
        )))
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote<u64>,
        snapshot: Snapshot<Cfg>,
        cancel: impl Future<Output = ReplicationClosed> + openraft::OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<u64>, StreamingError<Cfg, Fatal<u64>>> {
        tokio::select! {
            r = self.send_snapshot(vote, snapshot, option) => r,
            closed = cancel => Err(StreamingError::Closed(closed)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RpcErr> {
        let body = wire::WVoteReq {
            vote: Some(wire::vote(&rpc.vote)),
            last: wire::opt_log_id(&rpc.last_log_id),
        }
        .encode_to_vec();
        let reply = self.call(KIND_VOTE, body, option.hard_ttl()).await?;
        let r: wire::WVoteReply = wire::decode("vote reply", &reply).map_err(net_err)?;
        Ok(VoteResponse {
            vote: wire::from_vote(r.vote.as_ref()).map_err(net_err)?,
            vote_granted: r.granted,
            last_log_id: wire::from_opt_log_id(&r.last),
        })
    }
}

/// The server side, added to the master's gRPC server when replication is on.
pub struct RaftSvc {
    raft: Raft,
    cluster_id: String,
    /// Where snapshots are received.
    snap_dir: PathBuf,
    /// The snapshot being received.
    recv: tokio::sync::Mutex<Option<Receiving>>,
}

struct Receiving {
    id: String,
    file: tokio::fs::File,
    /// Bytes received.
    offset: u64,
}

fn refuse(e: FsError) -> Status {
    Status::from(e)
}

impl RaftSvc {
    pub fn new(raft: Raft, cluster_id: &str, snap_dir: PathBuf) -> RaftSvc {
        RaftSvc {
            raft,
            cluster_id: cluster_id.to_string(),
            snap_dir,
            recv: Default::default(),
        }
    }

    /// A chunk of a snapshot: appended to the file being received; after the last, the
    /// whole file is checked and installed. A chunk out of order, or a file that is not
    /// sound, is refused and changes nothing.
    async fn snapshot_chunk(&self, body: &[u8]) -> Result<Vec<u8>, FsError> {
        let w: wire::WSnapChunk = wire::decode("snapshot chunk", body)?;
        let vote = wire::from_vote(w.vote.as_ref())?;
        let mine = self.raft.metrics().borrow().vote;
        let reply = |v: &Vote<u64>| {
            wire::WSnapReply {
                vote: Some(wire::vote(v)),
            }
            .encode_to_vec()
        };
        if vote < mine {
            return Ok(reply(&mine));
        }
        if !snapshot::valid_id(&w.id) {
            return Err(FsError::Protocol {
                message: format!("snapshot chunk: bad snapshot id {:?}", w.id),
            });
        }
        let path = snapshot::received(&self.snap_dir, &w.id);
        let fs_err = |what: &str, e: std::io::Error| {
            FsError::io_ctx(format!("snapshot {what} {}", path.display()), e)
        };
        let mut recv = self.recv.lock().await;
        if w.offset == 0 {
            if let Some(old) = recv.take() {
                if old.id != w.id {
                    let _ =
                        tokio::fs::remove_file(snapshot::received(&self.snap_dir, &old.id)).await;
                }
            }
            tokio::fs::create_dir_all(&self.snap_dir)
                .await
                .map_err(|e| fs_err("create dir for", e))?;
            let file = tokio::fs::File::create(&path)
                .await
                .map_err(|e| fs_err("create", e))?;
            *recv = Some(Receiving {
                id: w.id.clone(),
                file,
                offset: 0,
            });
        }
        let r = match recv.as_mut() {
            Some(r) if r.id == w.id && r.offset == w.offset => r,
            other => {
                return Err(FsError::Protocol {
                    message: format!(
                        "snapshot chunk of {} at offset {}: expected {}",
                        w.id,
                        w.offset,
                        other.map_or("a first chunk".to_string(), |r| format!(
                            "{} at offset {}",
                            r.id, r.offset
                        ))
                    ),
                })
            }
        };
        r.file
            .write_all(&w.data)
            .await
            .map_err(|e| fs_err("write", e))?;
        r.offset += w.data.len() as u64;
        if !w.done {
            return Ok(reply(&mine));
        }
        let Some(Receiving { mut file, .. }) = recv.take() else {
            return Err(FsError::internal("snapshot chunk: nothing received"));
        };
        drop(recv);
        file.flush().await.map_err(|e| fs_err("write", e))?;
        file.sync_all().await.map_err(|e| fs_err("sync", e))?;
        drop(file);
        let p = path.clone();
        let checked = tokio::task::spawn_blocking(move || snapshot::verify(&p))
            .await
            .map_err(|e| FsError::internal(format!("snapshot check: {e}")))
            .and_then(|r| r)
            .and_then(|m| match m.snapshot_id == w.id {
                true => Ok(m),
                false => Err(FsError::Protocol {
                    message: format!("snapshot {} names itself {}", w.id, m.snapshot_id),
                }),
            });
        let meta = match checked {
            Ok(m) => m,
            Err(e) => {
                let _ = tokio::fs::remove_file(&path).await;
                return Err(e);
            }
        };
        let f = tokio::fs::File::open(&path)
            .await
            .map_err(|e| fs_err("open", e))?;
        let res = self
            .raft
            .install_full_snapshot(
                vote,
                Snapshot {
                    meta,
                    snapshot: Box::new(f),
                },
            )
            .await;
        // installed, it was moved away; not (older than what is applied here), it goes
        let _ = tokio::fs::remove_file(&path).await;
        let resp = res.map_err(|e| FsError::Unavailable {
            message: format!("raft: {e}"),
        })?;
        Ok(reply(&resp.vote))
    }

    async fn append(&self, body: &[u8]) -> Result<Vec<u8>, FsError> {
        let w: wire::WAppend = wire::decode("append", body)?;
        let rpc = AppendEntriesRequest {
            vote: wire::from_vote(w.vote.as_ref())?,
            prev_log_id: wire::from_opt_log_id(&w.prev),
            entries: w
                .entries
                .into_iter()
                .map(wire::from_entry)
                .collect::<Result<_, _>>()?,
            leader_commit: wire::from_opt_log_id(&w.commit),
        };
        let r = self.raft.append_entries(rpc).await.map_err(raft_err)?;
        let mut out = wire::WAppendReply::default();
        match r {
            AppendEntriesResponse::Success => {}
            AppendEntriesResponse::PartialSuccess(m) => {
                out.kind = 1;
                out.matching = wire::opt_log_id(&m);
            }
            AppendEntriesResponse::Conflict => out.kind = 2,
            AppendEntriesResponse::HigherVote(v) => {
                out.kind = 3;
                out.vote = Some(wire::vote(&v));
            }
        }
        Ok(out.encode_to_vec())
    }

    async fn vote(&self, body: &[u8]) -> Result<Vec<u8>, FsError> {
        let w: wire::WVoteReq = wire::decode("vote", body)?;
        let rpc = VoteRequest {
            vote: wire::from_vote(w.vote.as_ref())?,
            last_log_id: wire::from_opt_log_id(&w.last),
        };
        let r = self.raft.vote(rpc).await.map_err(raft_err)?;
        Ok(wire::WVoteReply {
            vote: Some(wire::vote(&r.vote)),
            granted: r.vote_granted,
            last: wire::opt_log_id(&r.last_log_id),
        }
        .encode_to_vec())
    }
}

fn raft_err<E: std::error::Error + 'static>(e: RaftError<u64, E>) -> FsError {
    FsError::Unavailable {
        message: format!("raft: {e}"),
    }
}

#[tonic::async_trait]
impl RaftService for RaftSvc {
    async fn call(&self, req: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let peer = req.remote_addr();
        let r = req.into_inner();
        if r.cluster_id != self.cluster_id {
            warn!(?peer, from = r.from, theirs = %r.cluster_id, ours = %self.cluster_id,
                "refused a raft call from a master of another cluster");
            return Err(refuse(FsError::PermissionDenied {
                path: format!("cluster {}", r.cluster_id),
            }));
        }
        let res = match r.kind {
            KIND_APPEND => self.append(&r.body).await,
            KIND_VOTE => self.vote(&r.body).await,
            KIND_SNAPSHOT => self.snapshot_chunk(&r.body).await,
            k => Err(FsError::Protocol {
                message: format!("raft call of unknown kind {k}"),
            }),
        };
        match res {
            Ok(body) => Ok(Response::new(RaftReply { body })),
            Err(e) => {
                if matches!(e, FsError::Protocol { .. }) {
                    warn!(?peer, from = r.from, error = %e, "refused a raft call");
                }
                Err(refuse(e))
            }
        }
    }
}
