//! openraft's RPCs between masters, as the gRPC service `RaftService` on the master's
//! port: the client side (`Net`, one `PeerClient` per target) and the server side
//! (`RaftSvc`). A request names the sender's cluster id; a master of another cluster is
//! refused, and a body that does not decode is refused without reaching openraft.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use curvine_common::proto::raft_service_client::RaftServiceClient;
use curvine_common::proto::raft_service_server::RaftService;
use curvine_common::proto::{RaftReply, RaftRequest};
use curvine_common::FsError;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use prost::Message;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};
use tracing::warn;

use super::super::auth::AUTH_METADATA_KEY;
use super::{wire, Cfg, Raft};

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
        Err(net_err(FsError::Unavailable {
            message: "master snapshots are not implemented yet".into(),
        }))
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
    pub raft: Raft,
    pub cluster_id: String,
}

fn refuse(e: FsError) -> Status {
    Status::from(e)
}

impl RaftSvc {
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
            KIND_SNAPSHOT => Err(FsError::Unavailable {
                message: "master snapshots are not implemented yet".into(),
            }),
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
