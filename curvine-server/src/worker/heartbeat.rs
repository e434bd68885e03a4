//! Registration and heartbeats: the worker registers and sends its full block report in
//! pages of ids in order (retrying until the master answers), then heartbeats every
//! `worker.heartbeat_interval` with its tier reports and the blocks committed/removed
//! since the last delivered heartbeat.
//! It re-registers when the master says it does not know the worker, or after the
//! master was unreachable (it may have restarted).
//!
//! With replicated masters the worker is given every master (`master.peers`) and
//! talks to the leader alone: a follower answers `NotLeader { leader }`, and the
//! worker moves to the master named (or, when none is, or a master does not answer, to
//! the next one) and registers there, with a full block report, before it
//! heartbeats. A leader that changes is thus always told the worker's blocks anew.
//!
//! Blocks the master lists in `delete_blocks` are deleted and reported as removed in
//! the next heartbeat.
//!
//! A worker short of space asks for a heartbeat at once (`EarlyHeartbeat`) before it
//! evicts anything: blocks of files just deleted or overwritten are only freed when a
//! heartbeat brings their deletion, and evicting live blocks to make room that those
//! deletions are about to free would push hot data down a tier for nothing.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use curvine_common::proto::master_service_client::MasterServiceClient;
use curvine_common::proto::{BlockReportPage, HeartbeatRequest, RegisterRequest, WorkerAddress};
use curvine_common::tasks::{Task, Tasks};
use curvine_common::{BlockId, FsError, FsResult};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};
use tracing::{debug, info, warn};

use super::block_store::BlockStore;
use super::layout;
use super::replicator::{scrubbed, start_copies, CopyCtx};
use tokio_util::task::TaskTracker;

/// gRPC metadata key carrying `cluster.auth_token` on worker -> master calls (also sent
/// as `authorization: Bearer <token>`, like the client does).
pub const AUTH_METADATA_KEY: &str = "x-curvine-token";

/// Longest wait between attempts to reach the master.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(1);

pub struct HeartbeatConf {
    /// Every master the worker may report to (`host:port`); the leader is found among
    /// them and through the hints of the others.
    pub master_addrs: Vec<String>,
    pub address: WorkerAddress,
    pub interval: Duration,
    pub rpc_timeout: Duration,
    pub connect_timeout: Duration,
    pub auth_token: String,
    /// Blocks per page of the full block report (`worker.block_report_page`).
    pub report_page: usize,
    /// Set at each registration, for the read-through asking for mount secrets.
    pub registration: Arc<Registration>,
}

/// This worker's id and the session key of its current registration with the master
/// (`None` while it is not registered): the master gives mount secrets only to a
/// caller that shows them; and the address of that master, the only one that knows the
/// key.
#[derive(Debug, Default)]
pub struct Registration(Mutex<Option<(u32, String)>>, Mutex<String>);

/// The channel to `master`. A master cut off the network (its link down, its host
/// gone) answers nothing, not even a refusal: HTTP/2 pings every heartbeat interval,
/// each to be answered within `connect_timeout`, end such a connection and the calls
/// waiting on it within an interval and a connect timeout, and the worker moves on to
/// the next master instead of waiting `rpc_timeout` on every call. TCP keepalive does
/// the same below HTTP/2 for a connection nothing else is sent on.
fn master_endpoint(master: &str, conf: &HeartbeatConf) -> FsResult<Endpoint> {
    let ping = conf.interval.max(Duration::from_millis(100));
    Ok(Endpoint::from_shared(format!("http://{master}"))
        .map_err(|e| FsError::config(format!("master address {master}: {e}")))?
        .connect_timeout(conf.connect_timeout)
        .timeout(conf.rpc_timeout)
        .tcp_keepalive(Some(ping))
        .http2_keep_alive_interval(ping)
        .keep_alive_timeout(conf.connect_timeout)
        .keep_alive_while_idle(true))
}

impl Registration {
    pub fn get(&self) -> Option<(u32, String)> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
    fn set(&self, v: Option<(u32, String)>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = v;
    }

    /// The master this worker registered with last (empty before it first did).
    pub fn master(&self) -> String {
        self.1
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
    fn set_master(&self, addr: &str) {
        *self.1.lock().unwrap_or_else(PoisonError::into_inner) = addr.to_string();
    }
}

/// Lets code short of space ask the heartbeat task for a heartbeat now, and wait until
/// one that started after the request has applied the master's pending deletions.
#[derive(Debug, Default)]
pub struct EarlyHeartbeat {
    wake: Notify,
    state: Mutex<EarlyState>,
    done: Condvar,
}

#[derive(Debug, Default)]
struct EarlyState {
    /// Longest wait; `None` while no registered heartbeat task runs (nothing to wait for).
    wait: Option<Duration>,
    /// Requests made so far.
    asked: u64,
    /// Requests answered: every request up to this one was made before a heartbeat
    /// that has since ended.
    answered: u64,
}

impl EarlyHeartbeat {
    fn state(&self) -> std::sync::MutexGuard<'_, EarlyState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Blocking: ask for a heartbeat and wait for it to end, at most one heartbeat
    /// interval (the deletions would not have come sooner without asking). Returns at
    /// once when no heartbeat task is registered with a master. True when a heartbeat
    /// answered.
    pub fn request_and_wait(&self) -> bool {
        let mut g = self.state();
        let Some(wait) = g.wait else { return false };
        g.asked += 1;
        let mine = g.asked;
        self.wake.notify_one();
        let (g, r) = self
            .done
            .wait_timeout_while(g, wait, |s| s.answered < mine && s.wait.is_some())
            .unwrap_or_else(PoisonError::into_inner);
        if r.timed_out() {
            debug!("early heartbeat not answered in time");
        }
        g.answered >= mine
    }

    /// Ask for a heartbeat soon, without waiting for it (results to report).
    pub fn request(&self) {
        let mut g = self.state();
        if g.wait.is_none() {
            return;
        }
        g.asked += 1;
        self.wake.notify_one();
    }

    /// The heartbeat task is registered (`Some(interval)`) or not (`None`); waiters
    /// return when it is not.
    pub(super) fn set_registered(&self, interval: Option<Duration>) {
        let mut g = self.state();
        g.wait = interval;
        if interval.is_none() {
            g.answered = g.asked;
            self.done.notify_all();
        }
    }

    /// Whether a heartbeat task is registered with a master now (the worker's `/readyz`).
    pub fn is_registered(&self) -> bool {
        self.state().wait.is_some()
    }

    /// Requests made up to now; a heartbeat starting now answers them when it ends.
    pub(super) fn asked(&self) -> u64 {
        self.state().asked
    }

    pub(super) fn answered(&self, upto: u64) {
        let mut g = self.state();
        g.answered = g.answered.max(upto);
        self.done.notify_all();
    }
}

struct Session {
    conf: HeartbeatConf,
    store: Arc<BlockStore>,
    copy: Option<CopyCtx>,
    copies: TaskTracker,
    cancel: CancellationToken,
    client: Option<MasterServiceClient<Channel>>,
    /// Index in `conf.master_addrs` of the master talked to.
    current: usize,
    /// Hints followed at once since the last registration: stale hints that point
    /// around in a circle during an election must not spin.
    hops: usize,
    worker_id: u32,
    cluster_id: String,
    /// This worker's background tasks, reported with each heartbeat.
    all: Option<Tasks>,
}

/// Run until `cancel` fires.
pub async fn run_heartbeat(conf: HeartbeatConf, store: Arc<BlockStore>, cancel: CancellationToken) {
    let task = Tasks::new(&cancel).register("heartbeat");
    run_heartbeat_with(conf, store, None, task, None).await
}

/// Like `run_heartbeat`, also running the master's copy commands (re-replication) and
/// reporting their results and the scrubber's findings. Returns after every copy ended.
pub async fn run_heartbeat_with(
    conf: HeartbeatConf,
    store: Arc<BlockStore>,
    copy: Option<CopyCtx>,
    task: Task,
    all: Option<Tasks>,
) {
    let cancel = task.token();
    let dirs = store.dirs();
    let mut s = Session {
        worker_id: layout::read_worker_id(&dirs),
        cluster_id: layout::read_cluster_id(&dirs),
        conf,
        store,
        copy,
        copies: TaskTracker::new(),
        cancel: cancel.clone(),
        client: None,
        current: 0,
        hops: 0,
        all,
    };
    heartbeat_loop(&mut s, &task).await;
    s.store.early_heartbeat.set_registered(None);
    s.copies.close();
    s.copies.wait().await;
}

async fn heartbeat_loop(s: &mut Session, task: &Task) {
    let mut registered = false;
    let retry_wait = s.conf.interval.min(MAX_RETRY_WAIT);
    let store = s.store.clone();
    let early = &store.early_heartbeat;
    loop {
        let wait = if !registered {
            early.set_registered(None);
            task.busy(format!("register with the master at {}", s.master()));
            match s.register().await {
                Ok(()) => {
                    task.idle();
                    registered = true;
                    s.hops = 0;
                    early.set_registered(Some(s.conf.interval));
                    s.conf.interval
                }
                Err(e) => {
                    task.failed(&e);
                    if s.follow(&e) {
                        // the leader is named: register there at once
                        continue;
                    }
                    warn!(master = %s.master(), error = %e, "register with the master failed, retrying");
                    retry_wait
                }
            }
        } else {
            let upto = early.asked();
            task.busy("heartbeat");
            let sent = s.heartbeat().await;
            // answered also when it failed: waiters go on and evict rather than wait on
            // a master that does not answer
            early.answered(upto);
            match &sent {
                Ok(_) => task.idle(),
                Err(e) => task.failed(e),
            }
            match sent {
                Ok(true) => s.conf.interval,
                Ok(false) => {
                    info!(
                        worker_id = s.worker_id,
                        "master asked this worker to re-register"
                    );
                    registered = false;
                    continue;
                }
                Err(e) => {
                    registered = false;
                    if s.follow(&e) {
                        info!(master = %s.master(), "the leader changed; registering with it");
                        continue;
                    }
                    warn!(master = %s.master(), error = %e, "heartbeat failed; re-registering");
                    // at once: a master restarted is back within moments and waits for
                    // this worker's report before it serves reads of its blocks; one
                    // that is down refuses, and the registration's retries wait
                    continue;
                }
            }
        };
        tokio::select! {
            _ = task.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
            _ = early.wake.notified(), if registered => {}
        }
    }
}

impl Session {
    /// The master talked to now.
    fn master(&self) -> &str {
        let a = &self.conf.master_addrs;
        a.get(self.current).or(a.first()).map_or("", |s| s.as_str())
    }

    /// After a failed call: drop the connection and choose the master to talk to next.
    /// True when `e` named the leader (`NotLeader` with a hint), to be tried at once
    /// (a few times in a row at most); else the next master is tried after the usual
    /// wait.
    fn follow(&mut self, e: &FsError) -> bool {
        self.client = None;
        match e {
            FsError::NotLeader { leader } if !leader.is_empty() => {
                let addrs = &mut self.conf.master_addrs;
                self.current = match addrs.iter().position(|a| a == leader) {
                    Some(i) => i,
                    None => {
                        // a master added to the group since this worker started
                        addrs.push(leader.clone());
                        addrs.len() - 1
                    }
                };
                self.hops += 1;
                self.hops <= self.conf.master_addrs.len()
            }
            _ => {
                // no leader known there, or that master did not answer
                self.current = (self.current + 1) % self.conf.master_addrs.len().max(1);
                false
            }
        }
    }

    async fn client(&mut self) -> FsResult<MasterServiceClient<Channel>> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let master = self.master().to_string();
        let ch = master_endpoint(&master, &self.conf)?.connect().await?;
        let c = MasterServiceClient::new(ch);
        self.client = Some(c.clone());
        Ok(c)
    }

    fn request<T>(&self, msg: T) -> FsResult<tonic::Request<T>> {
        let mut req = tonic::Request::new(msg);
        if !self.conf.auth_token.is_empty() {
            let v =
                self.conf.auth_token.parse().map_err(|_| {
                    FsError::config("cluster.auth_token is not valid ASCII metadata")
                })?;
            let bearer = format!("Bearer {}", self.conf.auth_token)
                .parse()
                .map_err(|_| FsError::config("cluster.auth_token is not valid ASCII metadata"))?;
            req.metadata_mut().insert(AUTH_METADATA_KEY, v);
            req.metadata_mut().insert("authorization", bearer);
        }
        Ok(req)
    }

    async fn register(&mut self) -> FsResult<()> {
        self.conf.registration.set(None);
        let mut client = self.client().await?;
        // Drain the incremental report first: everything committed before this point is
        // in the full report; later commits stay pending for the next heartbeat.
        let (added, removed) = self.store.take_pending();
        let r = self.register_with(&mut client).await;
        if r.is_err() {
            self.store.restore_pending(added, removed);
        }
        r
    }

    /// Register, then send the full block report page by page, each page covering the
    /// ids from just above the last one to its own last id (the final page: to the end).
    async fn register_with(&mut self, client: &mut MasterServiceClient<Channel>) -> FsResult<()> {
        let started = Instant::now();
        let req = RegisterRequest {
            worker_id: self.worker_id,
            address: Some(self.conf.address.clone()),
            tiers: self.store.tier_reports(),
            blocks: Vec::new(),
            cluster_id: self.cluster_id.clone(),
            paged: true,
        };
        let resp = client
            .register_worker(self.request(req)?)
            .await?
            .into_inner();
        if resp.worker_id != self.worker_id || resp.cluster_id != self.cluster_id {
            let store = self.store.clone();
            let (id, cid) = (resp.worker_id, resp.cluster_id.clone());
            let dirs = store.dirs();
            tokio::task::spawn_blocking(move || layout::write_ids(&dirs, id, &cid))
                .await
                .map_err(|e| FsError::internal(e.to_string()))??;
        }
        self.worker_id = resp.worker_id;
        self.cluster_id = resp.cluster_id;
        self.conf
            .registration
            .set(Some((resp.worker_id, resp.session)));
        let master = self.master().to_string();
        self.conf.registration.set_master(&master);
        let per_page = self.conf.report_page.max(1);
        let (mut first, mut pages, mut blocks) = (0u64, 0, 0);
        loop {
            // one block more than a page, to know whether another page follows
            let mut replicas = self.store.replicas_from(BlockId(first), per_page + 1)?;
            let more = replicas.len() > per_page;
            replicas.truncate(per_page);
            // ids are distinct and in order, so only the final page can hold u64::MAX
            let last = match replicas.last() {
                Some(r) if more => r.block_id,
                _ => u64::MAX,
            };
            blocks += replicas.len();
            let page = BlockReportPage {
                worker_id: self.worker_id,
                first,
                last,
                blocks: replicas,
            };
            let r = client
                .report_blocks(self.request(page)?)
                .await?
                .into_inner();
            if r.reregister {
                return Err(FsError::protocol(
                    "the master forgot this worker during its block report",
                ));
            }
            pages += 1;
            if !more {
                break;
            }
            first = last + 1;
        }
        info!(worker_id = self.worker_id, blocks, pages,
            secs = started.elapsed().as_secs_f64(), master = %self.master(),
            "registered with the master");
        Ok(())
    }

    /// Ok(false) = the master wants a re-registration.
    async fn heartbeat(&mut self) -> FsResult<bool> {
        let mut client = self.client().await?;
        let (added, removed) = self.store.take_pending();
        let (copy_results, bad_blocks) = match &self.copy {
            Some(c) => c.bg.take_report(),
            None => (Vec::new(), Vec::new()),
        };
        let loads = self.copy.as_ref().and_then(|c| c.loads.clone());
        let load_results = loads.as_ref().map(|l| l.take_results()).unwrap_or_default();
        let req = HeartbeatRequest {
            worker_id: self.worker_id,
            tiers: self.store.tier_reports(),
            added: added.clone(),
            removed: removed.clone(),
            copy_results: copy_results.clone(),
            bad_blocks: bad_blocks.clone(),
            scrubbed_bytes: self.copy.as_ref().map_or(0, |c| scrubbed(&c.bg)),
            tasks: self.all.as_ref().map(Tasks::report).unwrap_or_default(),
            load_results: load_results.clone(),
        };
        let resp = match client.heartbeat(self.request(req)?).await {
            Ok(r) => r.into_inner(),
            Err(e) => {
                self.store.restore_pending(added, removed);
                if let Some(c) = &self.copy {
                    c.bg.restore_report(copy_results, bad_blocks);
                }
                if let Some(l) = &loads {
                    l.restore_results(load_results);
                }
                return Err(e.into());
            }
        };

        if resp.reregister {
            // the full report at registration supersedes what was just sent
            return Ok(false);
        }
        if !resp.delete_blocks.is_empty() {
            let store = self.store.clone();
            let ids = resp.delete_blocks;
            let n = ids.len();
            let deleted = tokio::task::spawn_blocking(move || {
                let mut deleted = 0;
                for id in ids {
                    match store.delete(BlockId(id)) {
                        Ok(true) => deleted += 1,
                        Ok(false) => {}
                        // the block stays indexed: the next full report names it again,
                        // and the master asks again
                        Err(e) => warn!(block = id, error = %e, "cannot delete block"),
                    }
                }
                deleted
            })
            .await
            .map_err(|e| FsError::internal(e.to_string()))?;
            info!(
                requested = n,
                deleted, "deleted blocks on the master's request"
            );
        }
        if !resp.droppable_blocks.is_empty() {
            let store = self.store.clone();
            let ids = resp.droppable_blocks;
            tokio::task::spawn_blocking(move || store.mark_droppable(&ids))
                .await
                .map_err(|e| FsError::internal(e.to_string()))??;
        }
        // after the deletions: a copy must not find the bad replica it replaces
        if !resp.copy_blocks.is_empty() {
            match &self.copy {
                Some(c) => {
                    debug!(n = resp.copy_blocks.len(), "copy commands from the master");
                    start_copies(c, resp.copy_blocks, &self.copies, &self.cancel);
                }
                None => debug!("copy commands ignored (no copier)"),
            }
        }
        if !resp.load_blocks.is_empty() {
            match &loads {
                Some(l) => {
                    debug!(n = resp.load_blocks.len(), "load commands from the master");
                    l.start(resp.load_blocks, &self.copies, &self.cancel);
                }
                None => debug!("load commands ignored (no loader)"),
            }
        }
        debug!(
            added = added.len(),
            removed = removed.len(),
            "heartbeat sent"
        );
        Ok(true)
    }
}
