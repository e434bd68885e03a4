//! Recording the replicas a worker reports: the pages of its full block report, and
//! (for `heartbeat`) the replicas added and removed since.

use std::ops::RangeInclusive;
use std::time::Instant;

use curvine_common::proto::{BlockReplica, BlockReportPage, BlockReportPageResponse};
use curvine_common::{BlockId, FsError, FsResult, WorkerId};
use tracing::{debug, info};

use crate::master::namespace::{is_file, Namespace, Reader, Txn};
use crate::master::records::{BlockRec, Loc};

impl Namespace {
    /// One page of a registered worker's full block report: record the replicas that are
    /// new or moved, forget those recorded in the page's id range that it leaves out, and
    /// queue the deletion of blocks that belong to nothing.
    pub fn report_blocks(&self, page: BlockReportPage) -> FsResult<(BlockReportPageResponse, u64)> {
        let id = WorkerId(page.worker_id);
        if !self.registered(id) {
            debug!(worker = id.0, "block report from an unregistered worker");
            return Ok((BlockReportPageResponse { reregister: true }, 0));
        }
        let ids = page.first..=page.last;
        if ids.is_empty() {
            return Err(FsError::invalid(format!(
                "block report page from {} to {}: its first id is above its last",
                page.first, page.last
            )));
        }
        let mut reported = page.blocks;
        if let Some(r) = reported.iter().find(|r| !ids.contains(&r.block_id)) {
            return Err(FsError::invalid(format!(
                "block report page from {} to {} holds block {}",
                page.first, page.last, r.block_id
            )));
        }
        reported.sort_unstable_by_key(|r| r.block_id);
        reported.dedup_by_key(|r| r.block_id);
        let (todo, gone) = self.report_diff(id, ids, &reported)?;
        let (stale, seq) = if todo.is_empty() && gone.is_empty() {
            (Vec::new(), 0)
        } else {
            self.mutate(0, |txn| {
                let mut stale = Vec::new();
                for &i in &todo {
                    if !self.record_replica(txn, id, &reported[i])? {
                        stale.push(BlockId(reported[i].block_id));
                    }
                }
                // Replicas recorded for this worker but absent from its report are gone.
                for &b in &gone {
                    self.forget_replica(txn, id, b)?;
                }
                Ok(stale)
            })?
        };
        let n_stale = stale.len();
        if let Some(w) = self.workers.write().get_mut(&id) {
            w.last_seen = Some(Instant::now());
            w.pending_deletes.extend(stale);
        }
        let end = if page.last == u64::MAX {
            "the end".to_string()
        } else {
            page.last.to_string()
        };
        let changed = todo.len() + gone.len();
        if changed + n_stale > 0 {
            info!(worker = id.0, from = page.first, to = %end, blocks = reported.len(), changed,
                stale = n_stale, "block report page");
        } else {
            debug!(worker = id.0, from = page.first, to = %end, blocks = reported.len(),
                "block report page, all as recorded");
        }
        if page.last == u64::MAX {
            // its last page: the master knows every replica this worker holds
            self.note_reported(id);
        }
        Ok((BlockReportPageResponse { reregister: false }, seq))
    }

    /// Compare a page of a worker's full report (sorted by block id, no repeats, all in
    /// `ids`) with what the store records for it in `ids`, without the namespace lock:
    /// the indices of the replicas to record (new, or on another tier) and the blocks
    /// recorded but no longer reported. Reading a million block records under the lock
    /// held every namespace change for 6.5 s when a worker restarted; a restarted
    /// worker's report mostly matches its record.
    fn report_diff(
        &self,
        worker: WorkerId,
        ids: RangeInclusive<u64>,
        reported: &[BlockReplica],
    ) -> FsResult<(Vec<usize>, Vec<BlockId>)> {
        // the store's index of a worker's blocks is in block id order too
        let recorded = self.store.worker_blocks(worker.0, ids)?;
        let (mut todo, mut gone) = (Vec::new(), Vec::new());
        let mut j = 0;
        for (i, r) in reported.iter().enumerate() {
            while recorded.get(j).is_some_and(|&b| b < r.block_id) {
                gone.push(BlockId(recorded[j]));
                j += 1;
            }
            let on_record = recorded.get(j) == Some(&r.block_id);
            if on_record {
                j += 1;
            }
            if !on_record || !self.replica_recorded(worker, r)? {
                todo.push(i);
            }
        }
        gone.extend(recorded[j..].iter().map(|&b| BlockId(b)));
        Ok((todo, gone))
    }

    /// Whether `record_replica` would find `r` already recorded as it is.
    fn replica_recorded(&self, worker: WorkerId, r: &BlockReplica) -> FsResult<bool> {
        let Some(b) = self.store.block(r.block_id)? else {
            return Ok(false);
        };
        let tier = reported_tier(r, &b);
        Ok(b.locs
            .iter()
            .any(|l| l.worker_id == worker.0 && l.tier == tier))
    }

    /// Record that `worker` holds replica `r`. Returns false when the block belongs to
    /// nothing (not recorded, and its owner is not a file being written): delete it.
    pub(super) fn record_replica(
        &self,
        txn: &mut Txn<'_>,
        worker: WorkerId,
        r: &BlockReplica,
    ) -> FsResult<bool> {
        match txn.block(r.block_id)? {
            Some(mut b) => {
                let tier = reported_tier(r, &b);
                match b.locs.iter_mut().find(|l| l.worker_id == worker.0) {
                    Some(l) if l.tier == tier => return Ok(true),
                    Some(l) => l.tier = tier,
                    None => b.locs.push(Loc {
                        worker_id: worker.0,
                        tier,
                    }),
                }
                txn.put_worker_block(worker.0, b.id);
                txn.put_block(b);
                Ok(true)
            }
            None => {
                let owner = BlockId(r.block_id).inode().0;
                Ok(txn
                    .inode(owner)?
                    .is_some_and(|i| is_file(&i) && !i.complete))
            }
        }
    }

    pub(in crate::master) fn forget_replica(
        &self,
        txn: &mut Txn<'_>,
        worker: WorkerId,
        block: BlockId,
    ) -> FsResult<()> {
        txn.del_worker_block(worker.0, block.0);
        self.repl.mark();
        if let Some(mut b) = txn.block(block.0)? {
            let before = b.locs.len();
            b.locs.retain(|l| l.worker_id != worker.0);
            if b.locs.len() != before {
                txn.put_block(b);
            }
        }
        Ok(())
    }
}

/// The tier a reported replica is recorded in: the reported one, or (0, a worker that
/// does not say) the block's first replica's.
fn reported_tier(r: &BlockReplica, b: &BlockRec) -> i32 {
    if r.tier == 0 {
        b.locs.first().map_or(0, |l| l.tier)
    } else {
        r.tier
    }
}
