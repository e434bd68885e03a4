//! Re-replication: find committed blocks with fewer live replicas than their file asks
//! for and hand worker-to-worker copies to the targets in their heartbeat replies.
//!
//! State is in memory only (a restarted master rescans): one copy per block in flight,
//! at most `replication_max_inflight` in the cluster and `replication_per_worker` per
//! target. A copy ends when the target reports its result, or after
//! `replication_timeout`, so a failed or lost copy never holds a slot for good.
//! Bad replicas (reported by readers, found by scrubbers) are dropped from the block map
//! when another live replica remains, and trigger a scan.
//!
//! A master that has just started or become leader scans only once its workers have
//! reported (or `master.worker_report_grace` passed, see `tenure`): until then a block
//! whose replicas no worker has reported yet is not known to be short.
//!
//! A scan reads the whole block map, so the periodic one runs only when something may
//! have left a block short since the last scan found every block whole: a replica
//! forgotten, a worker lost or registered, a bad replica, a failed copy, a file's replica
//! count changed (see [`Replication::mark`]), or copies still in flight. An idle master
//! with a million blocks does no work.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use curvine_common::proto::{CopyCommand, CopyResult, StorageTier};
use curvine_common::{BlockId, FsResult, WorkerId};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use super::namespace::{is_file, Delete, Namespace, Reader};
use super::records::BlockRec;

struct Inflight {
    target: WorkerId,
    started: Instant,
}

#[derive(Default)]
struct State {
    inflight: HashMap<BlockId, Inflight>,
    under: u64,
    missing: u64,
    done: u64,
    failed: u64,
    bad: u64,
    /// Events that may have left a block short of replicas, counted by `mark`.
    events: u64,
    /// `events` as it was when the last scan began, if that scan found nothing to do.
    clean_at: Option<u64>,
}

/// Progress figures for `Report`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReplicationStats {
    pub under_replicated: u64,
    pub missing: u64,
    pub in_flight: u64,
    pub done: u64,
    pub failed: u64,
    pub bad_replicas: u64,
}

#[derive(Default)]
pub(super) struct Replication {
    st: Mutex<State>,
    /// Wakes the scan loop (worker lost, bad replica, failed copy).
    pub kick: Notify,
}

impl Replication {
    /// Something may have left a block with fewer live replicas than its file asks for:
    /// the next periodic scan must run.
    pub fn mark(&self) {
        self.lock().events += 1;
    }

    /// [`mark`](Self::mark), and scan now.
    pub fn wake(&self) {
        self.mark();
        self.kick.notify_one();
    }

    /// A block record was dropped: if some were missing, the next scan counts them again.
    pub fn block_dropped(&self) {
        let mut s = self.lock();
        if s.missing > 0 {
            s.events += 1;
        }
    }

    /// Whether a periodic scan could find anything to do.
    pub fn needs_scan(&self) -> bool {
        let s = self.lock();
        s.clean_at != Some(s.events)
    }
}

impl Replication {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn stats(&self) -> ReplicationStats {
        let s = self.lock();
        ReplicationStats {
            under_replicated: s.under,
            missing: s.missing,
            in_flight: s.inflight.len() as u64,
            done: s.done,
            failed: s.failed,
            bad_replicas: s.bad,
        }
    }

    /// Copies in flight towards `worker`.
    pub fn inflight_to(&self, worker: WorkerId) -> u64 {
        self.lock()
            .inflight
            .values()
            .filter(|i| i.target == worker)
            .count() as u64
    }

    /// Results a worker reported in its heartbeat.
    pub fn finished(&self, worker: WorkerId, results: &[CopyResult]) {
        if results.is_empty() {
            return;
        }
        let mut s = self.lock();
        let mut failed = false;
        for r in results {
            let block = BlockId(r.block_id);
            if s.inflight.get(&block).is_some_and(|i| i.target == worker) {
                s.inflight.remove(&block);
            }
            if r.ok {
                s.done += 1;
                debug!(
                    block = block.0,
                    worker = worker.0,
                    "re-replication copy done"
                );
            } else {
                s.failed += 1;
                failed = true;
                warn!(block = block.0, worker = worker.0, error = %r.error, "re-replication copy failed");
            }
        }
        drop(s);
        if failed {
            self.wake();
        }
    }

    pub fn note_bad(&self, n: u64) {
        if n > 0 {
            self.lock().bad += n;
            self.wake();
        }
    }
}

impl Namespace {
    /// One pass over the block map: schedule copies for under-replicated blocks.
    /// Returns the number of copies scheduled. Blocking (scans RocksDB).
    pub fn replication_scan(&self) -> FsResult<usize> {
        let timeout = self.conf.replication_timeout.0;
        let max_total = self.conf.replication_max_inflight.max(1) as usize;
        let per_worker = self.conf.replication_per_worker.max(1) as u64;
        let events = {
            let mut s = self.repl.lock();
            let before = s.inflight.len();
            s.inflight.retain(|_, i| i.started.elapsed() < timeout);
            let expired = (before - s.inflight.len()) as u64;
            if expired > 0 {
                warn!(expired, "re-replication copies timed out; rescheduling");
                s.failed += expired;
            }
            s.events
        };
        let live = self.workers.live_addresses();
        // Replicas on draining workers count as sources, not as replicas the file keeps.
        let draining = self.workers.draining();
        let mut drain_left: HashMap<WorkerId, u64> = HashMap::new();
        let mut drop: Vec<(WorkerId, BlockId)> = Vec::new();
        // Block keys are big-endian ids that begin with the inode: a file's blocks come
        // one after another, so its replica count is read once and the memo stays one
        // entry however many files there are.
        let mut replicas_of: Option<(u64, Option<(u32, i32)>)> = None;
        let (mut under, mut missing, mut scheduled) = (0u64, 0u64, 0usize);
        let mut commands: Vec<(WorkerId, CopyCommand)> = Vec::new();
        self.store.for_each_block(|b: BlockRec| {
            if !b.committed {
                return Ok(());
            }
            let want = match replicas_of {
                Some((ino, v)) if ino == b.inode => v,
                _ => {
                    let v = self
                        .store
                        .inode_for_scan(b.inode)?
                        .filter(is_file)
                        .map(|i| (i.replicas.max(1), i.storage_tier));
                    replicas_of = Some((b.inode, v));
                    v
                }
            };
            let Some((want, tier)) = want else {
                return Ok(());
            };
            let id = BlockId(b.id);
            let live_locs: Vec<WorkerId> = b
                .locs
                .iter()
                .map(|l| WorkerId(l.worker_id))
                .filter(|w| live.contains_key(w))
                .collect();
            let on_draining: Vec<WorkerId> = b
                .locs
                .iter()
                .map(|l| WorkerId(l.worker_id))
                .filter(|w| draining.contains(w))
                .collect();
            for w in &on_draining {
                *drain_left.entry(*w).or_default() += 1;
            }
            let kept = live_locs.iter().filter(|w| !draining.contains(w)).count();
            if kept >= want as usize {
                drop.extend(on_draining.iter().map(|w| (*w, id)));
                return Ok(());
            }
            if live_locs.is_empty() {
                // an under-store block is fetched again when read, not lost
                if !b.ufs {
                    missing += 1;
                }
                return Ok(());
            }
            under += 1;
            let mut s = self.repl.lock();
            if s.inflight.contains_key(&id) || s.inflight.len() >= max_total {
                return Ok(());
            }
            let mut excluded: Vec<WorkerId> =
                b.locs.iter().map(|l| WorkerId(l.worker_id)).collect();
            let mut per: HashMap<WorkerId, u64> = HashMap::new();
            for i in s.inflight.values() {
                *per.entry(i.target).or_default() += 1;
            }
            excluded.extend(
                per.iter()
                    .filter(|(_, n)| **n >= per_worker)
                    .map(|(w, _)| *w),
            );
            let tier = StorageTier::try_from(tier).unwrap_or(StorageTier::Mem);
            let Ok(targets) = self.workers.place(tier, 1, b.len, "", &excluded) else {
                return Ok(()); // no room anywhere right now; the next scan retries
            };
            let Some(t) = targets.into_iter().next() else {
                return Ok(());
            };
            // Source: the first live replica (rotating by block id spreads the load).
            let src = live_locs[(b.id as usize) % live_locs.len()];
            let Some(source) = live.get(&src).cloned() else {
                return Ok(());
            };
            s.inflight.insert(
                id,
                Inflight {
                    target: t.worker_id,
                    started: Instant::now(),
                },
            );
            scheduled += 1;
            commands.push((
                t.worker_id,
                CopyCommand {
                    block_id: b.id,
                    len: b.len,
                    tier: t.tier as i32,
                    source: Some(source),
                },
            ));
            Ok(())
        })?;
        {
            let mut s = self.repl.lock();
            s.under = under;
            s.missing = missing;
            // Missing blocks have no replica to copy from: they do not keep the scans going
            // (with one replica per file, a worker gone for good would have the master
            // read its block map every interval). Its return, or their files' deletion,
            // marks the count stale.
            s.clean_at = (under == 0 && s.inflight.is_empty()).then_some(events);
        }
        for (w, c) in commands {
            self.workers.queue_copy(w, c);
        }
        self.workers.note_drain(&draining, &drain_left);
        if !drop.is_empty() {
            self.drop_drained(drop)?;
        }
        if scheduled > 0 || missing > 0 {
            info!(
                under_replicated = under,
                missing, scheduled, "re-replication scan"
            );
        }
        Ok(scheduled)
    }

    /// A reader or scrubber found `worker`'s replica of `block` bad. The location is
    /// dropped (and the worker told to delete it) when another live replica remains.
    pub fn report_bad_block(
        &self,
        block: BlockId,
        worker: WorkerId,
        reason: &str,
    ) -> FsResult<(bool, u64)> {
        let live = self.workers.live_addresses();
        let (removed, seq) = self.mutate(0, |txn| {
            let Some(b) = txn.block(block.0)? else {
                return Ok(false);
            };
            if !b.locs.iter().any(|l| l.worker_id == worker.0) {
                return Ok(false);
            }
            let others = b
                .locs
                .iter()
                .filter(|l| l.worker_id != worker.0 && live.contains_key(&WorkerId(l.worker_id)))
                .count();
            // the under-store holds a persisted file's blocks: its last replica can go
            let in_store = b.ufs
                && txn
                    .inode(b.inode)?
                    .is_some_and(|i| i.ufs.as_ref().is_some_and(|u| u.persisted));
            if others == 0 && !in_store {
                warn!(block = block.0, worker = worker.0, %reason, "bad replica reported but it is the last live one; keeping it");
                return Ok(false);
            }
            let tier = b.locs.iter().find(|l| l.worker_id == worker.0).map_or(0, |l| l.tier);
            let tier = super::apply::tier_of(tier);
            self.forget_replica(txn, worker, block)?;
            txn.delete_replica(Delete {
                worker,
                block,
                tier,
                len: b.len,
            });
            Ok(true)
        })?;
        if removed {
            info!(block = block.0, worker = worker.0, %reason, "bad replica removed");
            self.repl.note_bad(1);
        }
        Ok((removed, seq))
    }
}

/// Scan every `interval` while [`Replication::needs_scan`], or at once when kicked.
pub(super) async fn replication_loop(
    ns: std::sync::Arc<Namespace>,
    interval: Duration,
    task: curvine_common::tasks::Task,
) {
    let interval = interval.max(Duration::from_millis(10));
    loop {
        let kicked = tokio::select! {
            _ = task.cancelled() => return,
            _ = tokio::time::sleep(interval) => false,
            _ = ns.repl.kick.notified() => true,
        };
        if !kicked && !ns.repl.needs_scan() {
            continue;
        }
        if !ns.leads() {
            // the leader re-replicates and drains; the scan waits until this master leads
            task.idle();
            continue;
        }
        if let Some(w) = ns.waiting_for_workers() {
            // replicas not reported yet are not lost: the scan waits for the whole block
            // map, and the end of the wait wakes it
            task.busy(format!(
                "wait for the workers' reports ({} of {})",
                w.reported, w.expected
            ));
            continue;
        }
        task.busy("scan for blocks below their replica count");
        let n = ns.clone();
        match tokio::task::spawn_blocking(move || n.replication_scan()).await {
            Ok(Ok(_)) => task.idle(),
            Ok(Err(e)) => {
                warn!(error = %e, "re-replication scan failed");
                task.failed(&e);
            }
            Err(e) => {
                warn!(error = %e, "re-replication scan panicked");
                task.failed(&e);
            }
        }
    }
}
