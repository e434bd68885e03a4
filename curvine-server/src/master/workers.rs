//! Worker registry: addresses, per-tier capacity, liveness, queued block deletions, and
//! the worker-facing calls (register, heartbeat; the full block report in pages is in
//! `replicas`).

mod replicas;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use curvine_common::proto::{
    BlockLocation, BlockReportPage, CopyCommand, HeartbeatRequest, HeartbeatResponse,
    RegisterRequest, RegisterResponse, StorageTier, TierReport, WorkerAddress, WorkerReport,
};
use curvine_common::types::now_ms;
use curvine_common::{BlockId, FsError, FsResult, WorkerId};
use prost::Message;
use tracing::{debug, info, warn};

use super::namespace::{Delete, Namespace};
use super::store::{self, Store};

pub(super) struct WorkerState {
    pub id: WorkerId,
    pub address: WorkerAddress,
    pub tiers: Vec<TierReport>,
    /// None until the worker registers with this master instance.
    pub last_seen: Option<Instant>,
    pub last_heartbeat_ms: i64,
    /// Bytes handed out (one block size per allocation) since the last heartbeat.
    pub reserved: HashMap<StorageTier, u64>,
    pub pending_deletes: Vec<BlockId>,
    /// Bytes per tier of replicas queued for deletion here (`pending_deletes`), and of
    /// those sent in the last heartbeat reply: used in the tier reports until the
    /// worker's next heartbeat, but about to be free. Placement counts them as free, so
    /// files overwritten in a full tier do not push their successors down a tier.
    pub freeing: HashMap<StorageTier, u64>,
    pub freeing_sent: HashMap<StorageTier, u64>,
    /// Re-replication copies to hand out in the next heartbeat reply.
    pub pending_copies: Vec<CopyCommand>,
    /// Blocks to tell the worker it may drop (the under-store holds them).
    pub pending_droppable: Vec<BlockId>,
    /// Blocks allocated here since the last heartbeat: (tier, bytes in `reserved`).
    pub reserved_blocks: HashMap<BlockId, (StorageTier, u64)>,
    pub scrubbed_bytes: u64,
    /// Its background tasks, as of its last heartbeat.
    pub tasks: Vec<curvine_common::proto::TaskReport>,
    /// Liveness as last logged by the lost-worker detector.
    pub was_alive: bool,
    /// The key of its current registration (`RegisterResponse.session`); empty until it
    /// registers with this master instance.
    pub session: String,
    /// Being drained (`cv admin decommission`): no new blocks, replicas moved off.
    pub draining: bool,
    /// Blocks still recorded on it, and whether a re-replication scan has counted them
    /// since the drain began.
    pub draining_blocks: u64,
    pub drain_scanned: bool,
}

pub(super) struct Workers {
    map: RwLock<HashMap<WorkerId, WorkerState>>,
    lost_timeout: Duration,
}

/// A chosen replica target.
pub(super) struct Target {
    pub worker_id: WorkerId,
    pub tier: StorageTier,
    pub address: WorkerAddress,
}

impl Workers {
    pub fn new(lost_timeout: Duration) -> Workers {
        Workers {
            map: RwLock::new(HashMap::new()),
            lost_timeout,
        }
    }

    pub(super) fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<WorkerId, WorkerState>> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }
    pub(super) fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<WorkerId, WorkerState>> {
        self.map.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Load the persisted worker addresses (all dead until they register).
    pub fn load(&self, store: &Store) -> FsResult<()> {
        let mut m = self.write();
        for (k, v) in store.meta_scan(store::META_WORKER_PREFIX)? {
            let Ok(k) = <[u8; 4]>::try_from(&k[..]) else {
                continue;
            };
            let id = WorkerId(u32::from_be_bytes(k));
            let address = WorkerAddress::decode(&*v).unwrap_or_default();
            m.insert(id, new_state(id, address));
        }
        for (k, _) in store.meta_scan(store::META_DRAIN_PREFIX)? {
            let Ok(k) = <[u8; 4]>::try_from(&k[..]) else {
                continue;
            };
            if let Some(w) = m.get_mut(&WorkerId(u32::from_be_bytes(k))) {
                w.draining = true;
            }
        }
        Ok(())
    }

    /// After the namespace was replaced (a snapshot installed): take the workers and
    /// drains it records; workers registered here keep their liveness and queues.
    pub fn reload(&self, store: &Store) -> FsResult<()> {
        let mut stored = HashMap::new();
        for (k, v) in store.meta_scan(store::META_WORKER_PREFIX)? {
            if let Ok(k) = <[u8; 4]>::try_from(&k[..]) {
                stored.insert(
                    WorkerId(u32::from_be_bytes(k)),
                    WorkerAddress::decode(&*v).unwrap_or_default(),
                );
            }
        }
        let mut draining = std::collections::HashSet::new();
        for (k, _) in store.meta_scan(store::META_DRAIN_PREFIX)? {
            if let Ok(k) = <[u8; 4]>::try_from(&k[..]) {
                draining.insert(WorkerId(u32::from_be_bytes(k)));
            }
        }
        let mut m = self.write();
        for (id, address) in stored {
            m.entry(id).or_insert_with(|| new_state(id, address));
        }
        for (id, w) in m.iter_mut() {
            w.draining = draining.contains(id);
        }
        Ok(())
    }

    pub(super) fn alive(&self, w: &WorkerState) -> bool {
        w.last_seen.is_some_and(|t| t.elapsed() < self.lost_timeout)
    }

    /// The registered host of worker `id` when it is alive and `session` is the key of
    /// its current registration.
    pub fn session_host(&self, id: WorkerId, session: &str) -> Option<String> {
        let m = self.read();
        let w = m.get(&id)?;
        let ok = self.alive(w)
            && !w.session.is_empty()
            && same(w.session.as_bytes(), session.as_bytes());
        ok.then(|| w.address.host.clone())
    }

    #[cfg(test)]
    pub fn is_alive(&self, id: WorkerId) -> bool {
        self.read().get(&id).is_some_and(|w| self.alive(w))
    }

    /// Addresses of the live workers.
    pub fn live_addresses(&self) -> HashMap<WorkerId, WorkerAddress> {
        self.read()
            .values()
            .filter(|w| self.alive(w))
            .map(|w| (w.id, w.address.clone()))
            .collect()
    }

    /// Queue replica `d` (a journal effect) for deletion on its worker.
    pub fn queue_delete(&self, d: Delete) {
        if let Some(w) = self.write().get_mut(&d.worker) {
            w.pending_deletes.push(d.block);
            *w.freeing.entry(d.tier).or_default() += d.len;
        }
    }

    /// Tell `worker` in its next heartbeat that it may drop `block` (the under-store
    /// holds it).
    pub fn queue_droppable(&self, worker: WorkerId, block: BlockId) {
        if let Some(w) = self.write().get_mut(&worker) {
            w.pending_droppable.push(block);
        }
    }

    /// Remember that `block` holds `bytes` of `worker`'s reservation in `tier`.
    pub fn track_reservation(
        &self,
        worker: WorkerId,
        block: BlockId,
        tier: StorageTier,
        bytes: u64,
    ) {
        if let Some(w) = self.write().get_mut(&worker) {
            w.reserved_blocks.insert(block, (tier, bytes));
        }
    }

    /// A block allocated since the last heartbeat was committed with `len` bytes: its
    /// reservation shrinks to that.
    pub fn block_committed(&self, worker: WorkerId, block: BlockId, len: u64) {
        if let Some(w) = self.write().get_mut(&worker) {
            if let Some((tier, bytes)) = w.reserved_blocks.get_mut(&block) {
                let r = w.reserved.entry(*tier).or_default();
                *r = r.saturating_sub(bytes.saturating_sub(len));
                *bytes = len.min(*bytes);
            }
        }
    }

    /// A replica was dropped: give back its reservation. (Space it used is counted
    /// free once the worker deleted it and reported its tiers.)
    pub fn block_dropped(&self, worker: WorkerId, block: BlockId) {
        if let Some(w) = self.write().get_mut(&worker) {
            if let Some((t, bytes)) = w.reserved_blocks.remove(&block) {
                let r = w.reserved.entry(t).or_default();
                *r = r.saturating_sub(bytes);
            }
        }
    }

    pub fn queue_copy(&self, worker: WorkerId, c: CopyCommand) {
        if let Some(w) = self.write().get_mut(&worker) {
            w.pending_copies.push(c);
        }
    }

    /// Log workers that went silent or came back; returns the number lost.
    pub fn detect_lost(&self) -> usize {
        let mut m = self.write();
        let mut lost = 0;
        for w in m.values_mut() {
            let alive = w.last_seen.is_some_and(|t| t.elapsed() < self.lost_timeout);
            if w.was_alive && !alive {
                warn!(worker = w.id.0, host = %w.address.host, "worker lost (no heartbeat)");
                lost += 1;
            }
            w.was_alive = alive;
        }
        lost
    }

    /// The worker to fetch under-store block `block` for a reader on `host`: one on that
    /// host if any, else any live one; the same one for every reader of the block while
    /// the workers stay the same, so concurrent readers join one fetch.
    pub fn pick_fetcher(
        &self,
        block: BlockId,
        host: &str,
        exclude: &[WorkerId],
    ) -> Option<BlockLocation> {
        let m = self.read();
        let mut live: Vec<&WorkerState> = m
            .values()
            .filter(|w| self.alive(w) && !w.draining && !exclude.contains(&w.id))
            .collect();
        live.sort_by_key(|w| w.id);
        let local: Vec<&WorkerState> = live
            .iter()
            .copied()
            .filter(|w| !host.is_empty() && w.address.host == host)
            .collect();
        let pool = if local.is_empty() { &live } else { &local };
        if pool.is_empty() {
            return None;
        }
        // spread a file's blocks over the workers
        let w = pool[(block.0 as usize).wrapping_mul(0x9E37_79B9) % pool.len()];
        Some(BlockLocation {
            worker_id: w.id.0,
            address: Some(w.address.clone()),
            tier: 0,
        })
    }

    /// Choose `replicas` distinct live workers for a block of `block_size` bytes:
    /// the requested tier first, then slower tiers; within a tier the caller's host
    /// first, then the most free space.
    pub fn place(
        &self,
        tier: StorageTier,
        replicas: u32,
        block_size: u64,
        client_host: &str,
        excluded: &[WorkerId],
    ) -> FsResult<Vec<Target>> {
        let mut m = self.write();
        let live: Vec<WorkerId> = m
            .values()
            .filter(|w| w.last_seen.is_some_and(|t| t.elapsed() < self.lost_timeout))
            .filter(|w| !w.draining && !excluded.contains(&w.id))
            .map(|w| w.id)
            .collect();
        if live.is_empty() {
            return Err(FsError::Unavailable {
                message: if excluded.is_empty() {
                    "no live workers".into()
                } else {
                    format!("no live workers besides the {} excluded", excluded.len())
                },
            });
        }
        let mut tiers = vec![];
        let mut t = Some(tier);
        while let Some(x) = t {
            tiers.push(x);
            t = x.next();
        }
        let mut chosen: Vec<Target> = Vec::new();
        // First pass: room for a whole block; second pass: any room at all.
        for need in [block_size.max(1), 1] {
            for &t in &tiers {
                while chosen.len() < replicas as usize {
                    let best = live
                        .iter()
                        .filter(|id| !chosen.iter().any(|c| c.worker_id == **id))
                        .filter_map(|id| {
                            let w = m.get(id)?;
                            let free = free_in(w, t);
                            (free >= need).then_some((w, free))
                        })
                        .max_by_key(|(w, free)| {
                            (
                                !client_host.is_empty() && w.address.host == client_host,
                                *free,
                            )
                        });
                    let Some((w, _)) = best else { break };
                    chosen.push(Target {
                        worker_id: w.id,
                        tier: t,
                        address: w.address.clone(),
                    });
                }
            }
            if chosen.len() == replicas as usize {
                break;
            }
        }
        if chosen.len() < replicas as usize {
            return Err(FsError::no_space(format!(
                "need {replicas} workers with free space for a block, found {} (of {} live)",
                chosen.len(),
                live.len()
            )));
        }
        for c in &chosen {
            if let Some(w) = m.get_mut(&c.worker_id) {
                *w.reserved.entry(c.tier).or_default() += block_size;
            }
        }
        Ok(chosen)
    }

    pub fn reports(&self) -> Vec<WorkerReport> {
        let mut v: Vec<WorkerReport> = self
            .read()
            .values()
            .map(|w| WorkerReport {
                address: Some(w.address.clone()),
                tiers: w.tiers.clone(),
                alive: self.alive(w),
                last_heartbeat_ms: w.last_heartbeat_ms,
                scrubbed_bytes: w.scrubbed_bytes,
                copies_in_flight: 0,
                tasks: w.tasks.clone(),
                decommissioning: w.draining,
                draining_blocks: w.draining_blocks,
                drain_scanned: w.drain_scanned,
            })
            .collect();
        v.sort_by_key(|r| r.address.as_ref().map(|a| a.worker_id));
        v
    }
}

fn new_state(id: WorkerId, mut address: WorkerAddress) -> WorkerState {
    address.worker_id = id.0;
    WorkerState {
        id,
        address,
        tiers: Vec::new(),
        last_seen: None,
        last_heartbeat_ms: 0,
        reserved: HashMap::new(),
        pending_deletes: Vec::new(),
        freeing: HashMap::new(),
        freeing_sent: HashMap::new(),
        pending_copies: Vec::new(),
        pending_droppable: Vec::new(),
        reserved_blocks: HashMap::new(),
        scrubbed_bytes: 0,
        tasks: Vec::new(),
        was_alive: false,
        session: String::new(),
        draining: false,
        draining_blocks: 0,
        drain_scanned: false,
    }
}

/// Whether `host` (an address, or a name resolved now) is `peer`.
async fn host_has(host: &str, peer: IpAddr) -> bool {
    let peer = peer.to_canonical();
    if let Ok(ip) = host.parse::<IpAddr>() {
        return ip.to_canonical() == peer;
    }
    match tokio::net::lookup_host((host, 0)).await {
        Ok(mut addrs) => addrs.any(|a| a.ip().to_canonical() == peer),
        Err(e) => {
            warn!(%host, error = %e, "cannot resolve a worker's host");
            false
        }
    }
}

/// Compare without an early exit on the first differing byte.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn free_in(w: &WorkerState, tier: StorageTier) -> u64 {
    let (cap, used) =
        w.tiers
            .iter()
            .filter(|t| t.tier == tier as i32)
            .fold((0u64, 0u64), |(c, u), t| {
                // blocks the worker drops when it needs the room count as free
                (c + t.capacity, u + t.used.saturating_sub(t.evictable))
            });
    let get = |m: &HashMap<StorageTier, u64>| m.get(&tier).copied().unwrap_or(0);
    let freeing = get(&w.freeing).saturating_add(get(&w.freeing_sent));
    cap.saturating_sub(used.saturating_sub(freeing))
        .saturating_sub(get(&w.reserved))
}

impl Namespace {
    /// Register a worker: its id, address and tiers, then its full block report, given
    /// here whole or (`paged`) in `report_blocks` pages that follow.
    pub fn register_worker(&self, mut req: RegisterRequest) -> FsResult<(RegisterResponse, u64)> {
        let blocks = std::mem::take(&mut req.blocks);
        if req.paged && !blocks.is_empty() {
            return Err(FsError::invalid(
                "a paged registration sends its blocks in ReportBlocks pages",
            ));
        }
        let paged = req.paged;
        let (resp, seq) = self.register_address(req)?;
        self.jobs.worker_restarted(resp.worker_id);
        if paged {
            return Ok((resp, seq));
        }
        let page = BlockReportPage {
            worker_id: resp.worker_id,
            first: 0,
            last: u64::MAX,
            blocks,
        };
        let (_, report_seq) = self.report_blocks(page)?;
        Ok((resp, seq.max(report_seq)))
    }

    fn register_address(&self, req: RegisterRequest) -> FsResult<(RegisterResponse, u64)> {
        if !req.cluster_id.is_empty() && req.cluster_id != self.cluster_id {
            return Err(FsError::invalid(format!(
                "worker belongs to cluster {}, this master serves {}",
                req.cluster_id, self.cluster_id
            )));
        }
        let address = req
            .address
            .clone()
            .ok_or_else(|| FsError::invalid("register without an address"))?;
        let known =
            req.worker_id != 0 && self.workers.read().contains_key(&WorkerId(req.worker_id));
        let session = format!("{:032x}", rand::random::<u128>());
        let (id, seq) = self.mutate(0, |txn| {
            let id = if known {
                req.worker_id
            } else {
                let id = txn.counters.next_worker.max(1);
                txn.counters.next_worker = id + 1;
                id
            };
            let mut addr = address.clone();
            addr.worker_id = id;
            txn.put_meta(store::worker_key(id), addr.encode_to_vec());
            Ok(WorkerId(id))
        })?;
        {
            let mut m = self.workers.write();
            let w = m
                .entry(id)
                .or_insert_with(|| new_state(id, address.clone()));
            w.address = address;
            w.address.worker_id = id.0;
            w.tiers = req.tiers;
            w.last_seen = Some(Instant::now());
            w.last_heartbeat_ms = now_ms();
            w.reserved.clear();
            w.reserved_blocks.clear();
            w.freeing_sent.clear();
            w.was_alive = true;
            w.session = session.clone();
        }
        // Its replicas are live again, and a copy it was sent may have been lost with it.
        self.repl.mark();
        info!(
            worker = id.0,
            host = %self.workers.read().get(&id).map(|w| w.address.host.clone()).unwrap_or_default(),
            paged = req.paged,
            "worker registered"
        );
        Ok((
            RegisterResponse {
                worker_id: id.0,
                cluster_id: self.cluster_id.clone(),
                session,
            },
            seq,
        ))
    }

    /// Whether a call from `peer` naming worker `id` and `session` comes from that worker:
    /// it is alive, `session` is the key of its current registration, and `peer` (when
    /// the transport knows it) is an address of the host it registered with.
    pub async fn is_worker(&self, id: WorkerId, session: &str, peer: Option<IpAddr>) -> bool {
        if id.0 == 0 {
            return false;
        }
        let Some(host) = self.workers.session_host(id, session) else {
            debug!(
                worker = id.0,
                "a call named a worker without its current session key"
            );
            return false;
        };
        let Some(peer) = peer else {
            return true;
        };
        if host_has(&host, peer).await {
            return true;
        }
        warn!(worker = id.0, %peer, %host, "a worker's session key used from another host; refused");
        false
    }

    /// Whether worker `id` registered with this master instance.
    fn registered(&self, id: WorkerId) -> bool {
        self.workers
            .read()
            .get(&id)
            .is_some_and(|w| w.last_seen.is_some())
    }

    pub fn heartbeat(&self, req: HeartbeatRequest) -> FsResult<(HeartbeatResponse, u64)> {
        let id = WorkerId(req.worker_id);
        if !self.registered(id) {
            debug!(worker = id.0, "heartbeat from an unregistered worker");
            return Ok((
                HeartbeatResponse {
                    delete_blocks: Vec::new(),
                    reregister: true,
                    copy_blocks: Vec::new(),
                    load_blocks: Vec::new(),
                    droppable_blocks: Vec::new(),
                },
                0,
            ));
        }
        let droppable = self.droppable_of(&req.added)?;
        let (stale, seq) = if req.added.is_empty() && req.removed.is_empty() {
            (Vec::new(), 0)
        } else {
            self.mutate(0, |txn| {
                let mut stale = Vec::new();
                for r in &req.added {
                    if !self.record_replica(txn, id, r)? {
                        stale.push(BlockId(r.block_id));
                    }
                }
                for b in &req.removed {
                    self.forget_replica(txn, id, BlockId(*b))?;
                }
                Ok(stale)
            })?
        };
        self.repl.finished(id, &req.copy_results);
        self.jobs.finished(id.0, &req.load_results);
        if !req.bad_blocks.is_empty() {
            warn!(worker = id.0, blocks = ?req.bad_blocks, "scrubber found corrupt replicas");
            self.repl.note_bad(req.bad_blocks.len() as u64);
        }
        let mut m = self.workers.write();
        let Some(w) = m.get_mut(&id) else {
            return Ok((
                HeartbeatResponse {
                    delete_blocks: Vec::new(),
                    reregister: true,
                    copy_blocks: Vec::new(),
                    load_blocks: Vec::new(),
                    droppable_blocks: Vec::new(),
                },
                seq,
            ));
        };
        let back = !w.was_alive;
        if back {
            info!(worker = id.0, "worker is back");
            w.was_alive = true;
        }
        // An empty tier list means "unchanged".
        if !req.tiers.is_empty() {
            w.tiers = req.tiers;
        }
        w.last_seen = Some(Instant::now());
        w.last_heartbeat_ms = now_ms();
        w.reserved.clear();
        w.reserved_blocks.clear();
        w.pending_deletes.extend(stale);
        w.scrubbed_bytes = req.scrubbed_bytes;
        if !req.tasks.is_empty() {
            w.tasks = req.tasks;
        }
        let delete_blocks = raw(std::mem::take(&mut w.pending_deletes));
        // this report shows the deletions sent last time; those sent now show next time
        w.freeing_sent = std::mem::take(&mut w.freeing);
        let copy_blocks = std::mem::take(&mut w.pending_copies);
        w.pending_droppable
            .extend(droppable.into_iter().map(BlockId));
        let droppable_blocks = raw(std::mem::take(&mut w.pending_droppable));
        drop(m);
        let live = self.workers.live_addresses();
        let load_blocks = self
            .jobs
            .dispatch(id.0, |w| live.contains_key(&WorkerId(w)));
        if back {
            // its replicas are live again: blocks counted missing may not be
            self.repl.mark();
        }
        Ok((
            HeartbeatResponse {
                delete_blocks,
                reregister: false,
                copy_blocks,
                load_blocks,
                droppable_blocks,
            },
            seq,
        ))
    }
}

/// Block ids as the wire carries them.
fn raw(ids: Vec<BlockId>) -> Vec<u64> {
    ids.into_iter().map(|b| b.0).collect()
}
