//! Replication of the namespace between masters through openraft (`master.peers`).
//!
//! Each mutation's journal entry is one log entry ([`Proposal`]). The log and the vote
//! live in the master's RocksDB (`log_store`); the state machine is `apply::step` on
//! each committed entry, its batch written with the applied log id (`state_machine`);
//! the RPCs between masters are the gRPC service `RaftService` on the master's port
//! (`network`), in our own encoding (`wire`). Raft runs on a runtime of its own, so a
//! mutation waiting for its commit on a client's runtime thread never holds up the
//! replication it waits for.

mod log_store;
mod members;
mod network;
mod propose;
mod reads;
pub(super) mod snapshot;
mod state_machine;
pub(super) mod wire;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use curvine_common::{ClusterConf, FsError, FsResult};
use openraft::{BasicNode, RaftMetrics, SnapshotPolicy};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::namespace::Namespace;
use super::records::JournalEntry;
use super::store::Store;

pub use network::RaftSvc;
pub use propose::{stopped, Decided};

/// One log entry's payload: a mutation's journal entry and the client it was made for
/// (`CallerInfo.client_id`, 0 for the master's own), which the change log reports.
/// The mutations of several clients built as one batch share an entry; `parts` then
/// says whose each run of its ops is.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Proposal {
    #[prost(uint64, tag = "1")]
    pub origin: u64,
    #[prost(message, optional, tag = "2")]
    pub entry: Option<JournalEntry>,
    #[prost(message, repeated, tag = "3")]
    pub parts: Vec<ProposalPart>,
    /// The leader's term when it was built: applied only when logged in that term,
    /// else applied as nothing (0: in any term). An entry built on entries still in
    /// flight is valid only in the log they are in.
    #[prost(uint64, tag = "4")]
    pub term: u64,
}

/// The ops of a shared entry up to `end` (from the previous part's end) were made for
/// client `origin`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProposalPart {
    #[prost(uint64, tag = "1")]
    pub origin: u64,
    #[prost(uint64, tag = "2")]
    pub end: u64,
}

openraft::declare_raft_types!(
    /// The master's openraft types.
    pub Cfg:
        D = Proposal,
        R = bool,
        NodeId = u64,
        Node = BasicNode,
        SnapshotData = tokio::fs::File,
);

pub type Raft = openraft::Raft<Cfg>;

/// The cluster id of a replicated group, the same on every master: made of
/// `cluster.name` alone, so a master added later (`cv admin add-master`) formats with
/// the group's id whatever `master.peers` it was given; a master of a group of another
/// name is refused.
pub fn group_id(conf: &ClusterConf) -> String {
    format!("cv-{}", conf.cluster.name)
}

/// What a stopped master's data directory holds of the replication (tests, tools):
/// indexes of log entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredRaft {
    /// The first and last entries of the log.
    pub first_log: Option<u64>,
    pub last_log: Option<u64>,
    /// The last entry dropped by log compaction.
    pub purged: Option<u64>,
    /// The last entry the applied state covers.
    pub applied: Option<u64>,
    /// The last entry of the last snapshot installed from a leader.
    pub installed: Option<u64>,
    /// The last entry of the current snapshot (`<meta_dir>/snapshots/current.snap`).
    pub snapshot: Option<u64>,
}

/// Read [`StoredRaft`] from the data directory of a master that is not running.
pub fn stored_raft(meta_dir: &std::path::Path) -> FsResult<StoredRaft> {
    let store = Store::open(meta_dir, 1 << 20, 1 << 20, 0, 0)?;
    let index = |key: &[u8]| -> FsResult<Option<u64>> {
        match store.raft_meta(key)? {
            Some(v) => Ok(Some(wire::decode::<wire::WLogId>("log id", &v)?.index)),
            None => Ok(None),
        }
    };
    let entry_index = |v: Option<Vec<u8>>| -> FsResult<Option<u64>> {
        match v {
            Some(v) => {
                let e: wire::WEntry = wire::decode("log entry", &v)?;
                Ok(e.log_id.map(|l| l.index))
            }
            None => Ok(None),
        }
    };
    let applied = match store.raft_meta(state_machine::APPLIED)? {
        Some(v) => wire::from_applied(&wire::decode("applied state", &v)?)?
            .0
            .map(|l| l.index),
        None => None,
    };
    let current = meta_dir.join(snapshot::DIR).join(snapshot::CURRENT);
    let snapshot = match current.exists() {
        true => snapshot::read_meta(&current)?.last_log_id.map(|l| l.index),
        false => None,
    };
    Ok(StoredRaft {
        first_log: entry_index(store.raft_log(0, u64::MAX)?.into_iter().next())?,
        last_log: entry_index(store.raft_log_last()?)?,
        purged: index(log_store::PURGED)?,
        applied,
        installed: index(snapshot::INSTALLED)?,
        snapshot,
    })
}

/// This master's place in the replicated group.
pub struct Replica {
    pub id: u64,
    raft: Raft,
    /// id -> `host:port` of the masters of `master.peers`: the addresses of the
    /// group before its membership is known here.
    peers: BTreeMap<u64, String>,
    /// When each peer last answered this master's raft calls.
    reach: Arc<network::Reach>,
    /// `master.election_timeout`: a member silent for longer is `unreachable`.
    election_timeout: Duration,
    metrics: watch::Receiver<RaftMetrics<u64, BasicNode>>,
    handle: tokio::runtime::Handle,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    /// Reads waiting for the leadership to be confirmed (`reads`).
    reads: reads::ReadIndex,
    /// Where snapshots are received (`<meta_dir>/snapshots`).
    snap_dir: std::path::PathBuf,
    /// Proposals to log, in order (`submit`).
    proposals: propose::Queue,
}

impl Replica {
    /// Start this master's Raft node over `store`, applying committed entries to `ns`.
    /// A group whose log is empty everywhere is initialized with `master.peers` as its
    /// members (every master proposes the same membership; openraft accepts that).
    pub async fn start(
        conf: &ClusterConf,
        store: Arc<Store>,
        ns: Weak<Namespace>,
        cluster_id: String,
    ) -> FsResult<Arc<Replica>> {
        let m = &conf.master;
        let peers: BTreeMap<u64, String> =
            m.peer_list()?.into_iter().map(|p| (p.id, p.addr)).collect();
        let ms = |d: Duration| d.as_millis().max(1) as u64;
        let config = openraft::Config {
            cluster_name: cluster_id.clone(),
            election_timeout_min: ms(m.election_timeout.get()),
            election_timeout_max: 2 * ms(m.election_timeout.get()),
            heartbeat_interval: ms(m.heartbeat_interval.get()),
            // a snapshot every `snapshot_entries` entries; the log keeps a tenth of
            // that before it, so a follower briefly away catches up from the log
            snapshot_policy: SnapshotPolicy::LogsSinceLast(m.snapshot_entries),
            max_in_snapshot_log_to_keep: m.snapshot_entries / 10,
            // a follower further behind than this gets a snapshot, not entries
            replication_lag_threshold: m.snapshot_entries,
            // each chunk of a snapshot (`network`) within this; the last one, which
            // waits for the install, has a longer deadline of its own
            install_snapshot_timeout: 10_000,
            ..Default::default()
        }
        .validate()
        .map_err(|e| FsError::config(format!("master replication: {e}")))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("master-raft")
            .enable_all()
            .build()
            .map_err(|e| FsError::io_ctx("start the raft runtime", e))?;
        let handle = runtime.handle().clone();
        let log = match ns.upgrade() {
            Some(n) => log_store::LogStore::with_syncer(store.clone(), n.syncer.clone(), &handle),
            None => log_store::LogStore::new(store.clone(), conf.journal.sync),
        };
        let snap_dir = m.meta_dir.join(snapshot::DIR);
        let sm = state_machine::StateMachine::open(store, ns, snap_dir.clone(), m.node_id)?;
        let reach = Arc::new(network::Reach::default());
        let net = network::Net {
            cluster_id,
            from: m.node_id,
            token: conf.cluster.auth_token.clone(),
            connect_timeout: conf.client.connect_timeout.get(),
            reach: reach.clone(),
        };
        let id = m.node_id;
        let raft = handle
            .spawn(async move { Raft::new(id, Arc::new(config), net, log, sm).await })
            .await
            .map_err(|e| FsError::internal(format!("start raft: {e}")))?
            .map_err(|e| FsError::internal(format!("start raft: {e}")))?;
        let members: BTreeMap<u64, BasicNode> = peers
            .iter()
            .map(|(id, a)| (*id, BasicNode::new(a)))
            .collect();
        let r = raft.clone();
        let joins = m.joins();
        handle
            .spawn(async move {
                match r.is_initialized().await {
                    Ok(false) if joins => info!(
                        "this master is not among master.peers: it waits to be added \
                         (cv admin add-master)"
                    ),
                    Ok(false) => match r.initialize(members).await {
                        Ok(()) => info!("initialized the master group"),
                        Err(e) => debug!(error = %e, "the master group was initialized elsewhere"),
                    },
                    Ok(true) => {}
                    Err(e) => warn!(error = %e, "raft stopped before it was initialized"),
                }
            })
            .await
            .map_err(|e| FsError::internal(format!("initialize raft: {e}")))?;
        info!(node_id = id, peers = ?peers, "master replication started");
        let metrics = raft.metrics();
        members::note_stored_membership(&metrics.borrow(), &peers);
        let proposals = propose::start(raft.clone(), &handle);
        Ok(Arc::new(Replica {
            id,
            proposals,
            metrics,
            raft,
            peers,
            reach,
            election_timeout: m.election_timeout.get(),
            handle,
            runtime: Mutex::new(Some(runtime)),
            reads: Default::default(),
            snap_dir,
        }))
    }

    /// The gRPC service other masters call.
    pub fn service(&self, cluster_id: &str) -> RaftSvc {
        RaftSvc::new(self.raft.clone(), cluster_id, self.snap_dir.clone())
    }

    /// The address of master `leader`: from the current membership (so masters added
    /// later are named), else from `master.peers`.
    fn leader_addr(&self, leader: Option<u64>) -> String {
        let Some(l) = leader else {
            return String::new();
        };
        let m = self.metrics.borrow();
        match m.membership_config.membership().get_node(&l) {
            Some(n) => n.addr.clone(),
            None => self.peers.get(&l).cloned().unwrap_or_default(),
        }
    }

    /// `Ok` when this master is the leader; else `NotLeader` naming the leader it knows.
    pub fn check_leader(&self) -> FsResult<()> {
        let (leads, leader) = {
            let m = self.metrics.borrow();
            (m.state.is_leader(), m.current_leader)
        };
        if leads && leader == Some(self.id) {
            Ok(())
        } else {
            Err(FsError::NotLeader {
                leader: self.leader_addr(leader),
            })
        }
    }

    /// Whether this master leads now (background work only the leader does).
    pub fn is_leader(&self) -> bool {
        self.check_leader().is_ok()
    }

    /// Run `f`, which blocks, where it does not stall a runtime thread's other tasks:
    /// on a worker of a multi-thread runtime through `block_in_place`.
    pub fn blocking<T>(&self, f: impl FnOnce() -> T) -> T {
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(f)
            }
            _ => f(),
        }
    }

    /// Stop Raft and its runtime.
    pub async fn shutdown(&self) {
        let raft = self.raft.clone();
        let _ = self
            .handle
            .spawn(async move { raft.shutdown().await })
            .await;
        let rt = self
            .runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(rt) = rt {
            rt.shutdown_background();
        }
    }
}
