//! Draining a worker (`cv admin decommission`). A draining worker takes no new blocks
//! and fetches nothing for readers; the re-replication scan copies each of its replicas
//! to another worker (it stays a source meanwhile), then removes the replica from it,
//! and counts what is left for `cv report`. The drain is recorded in the namespace
//! (`wd/` meta keys), so it outlives a master restart; `cancel` ends it.

use std::collections::{BTreeMap, HashMap, HashSet};

use curvine_common::proto::{CallerInfo, DecommissionRequest};
use curvine_common::{BlockId, FsError, FsResult, WorkerId};
use tracing::info;

use super::namespace::{is_root, Delete, Namespace};
use super::store;
use super::workers::Workers;

/// Replicas removed from draining workers per journal entry.
const DROP_BATCH: usize = 256;

impl Workers {
    /// The worker named by `id`, or (when None) by the data address `host:port`.
    pub fn resolve(&self, id: Option<WorkerId>, address: &str) -> FsResult<WorkerId> {
        let m = self.read();
        if let Some(id) = id {
            return if m.contains_key(&id) {
                Ok(id)
            } else {
                Err(FsError::invalid(format!("no worker with id {id}")))
            };
        }
        m.values()
            .find(|w| format!("{}:{}", w.address.host, w.address.data_port) == address)
            .map(|w| w.id)
            .ok_or_else(|| {
                FsError::invalid(format!(
                    "no worker at {address:?} (give its id or its data address host:port)"
                ))
            })
    }

    /// Live workers other than `id` that take new blocks.
    fn others_taking_blocks(&self, id: WorkerId) -> usize {
        self.read()
            .values()
            .filter(|w| w.id != id && !w.draining && self.alive(w))
            .count()
    }

    fn set_draining(&self, id: WorkerId, on: bool) {
        if let Some(w) = self.write().get_mut(&id) {
            w.draining = on;
            w.draining_blocks = 0;
            w.drain_scanned = false;
        }
    }

    /// The workers being drained.
    pub fn draining(&self) -> HashSet<WorkerId> {
        self.read()
            .values()
            .filter(|w| w.draining)
            .map(|w| w.id)
            .collect()
    }

    /// A scan that began with `draining` found `left[w]` blocks still on worker `w`.
    pub fn note_drain(&self, draining: &HashSet<WorkerId>, left: &HashMap<WorkerId, u64>) {
        let mut m = self.write();
        for id in draining {
            if let Some(w) = m.get_mut(id).filter(|w| w.draining) {
                w.draining_blocks = left.get(id).copied().unwrap_or(0);
                w.drain_scanned = true;
            }
        }
    }
}

impl Namespace {
    /// Begin draining a worker, or end it with `req.cancel`. Superuser only. Refused
    /// when no other live worker takes blocks: its replicas would have nowhere to go.
    pub fn decommission(
        &self,
        req: &DecommissionRequest,
        c: &CallerInfo,
    ) -> FsResult<(WorkerId, u64)> {
        if !is_root(c) {
            return Err(FsError::PermissionDenied {
                path: "decommission (superuser only)".into(),
            });
        }
        let named = (req.worker_id != 0).then_some(WorkerId(req.worker_id));
        let id = self.workers.resolve(named, &req.address)?;
        if !req.cancel && self.workers.others_taking_blocks(id) == 0 {
            return Err(FsError::Unavailable {
                message: format!(
                    "worker {id} is the only live worker taking blocks: its replicas would have nowhere to go"
                ),
            });
        }
        let ((), seq) = self.mutate(0, |txn| {
            if req.cancel {
                txn.del_meta(store::drain_key(id.0));
            } else {
                txn.put_meta(store::drain_key(id.0), Vec::new());
            }
            Ok(())
        })?;
        self.workers.set_draining(id, !req.cancel);
        self.repl.wake();
        info!(worker = id.0, cancel = req.cancel, "decommission");
        Ok((id, seq))
    }

    /// Remove the replicas `(worker, block)` of draining workers whose blocks have enough
    /// replicas on other workers (as the scan found them); each is checked again here
    /// and kept if no live worker that is not draining still holds its block.
    pub(super) fn drop_drained(&self, pairs: Vec<(WorkerId, BlockId)>) -> FsResult<usize> {
        let live = self.workers.live_addresses();
        let draining = self.workers.draining();
        let mut by_block: BTreeMap<BlockId, Vec<WorkerId>> = BTreeMap::new();
        for (w, b) in pairs {
            by_block.entry(b).or_default().push(w);
        }
        let by_block: Vec<(BlockId, Vec<WorkerId>)> = by_block.into_iter().collect();
        let mut dropped = 0;
        for chunk in by_block.chunks(DROP_BATCH) {
            let (n, _seq) = self.mutate(0, |txn| {
                let mut n = 0;
                for (block, workers) in chunk {
                    let Some(mut b) = txn.block(block.0)? else {
                        continue;
                    };
                    let keeps = |w: WorkerId| live.contains_key(&w) && !draining.contains(&w);
                    if !b.locs.iter().any(|l| keeps(WorkerId(l.worker_id))) {
                        continue;
                    }
                    let (gone, kept): (Vec<_>, Vec<_>) = b
                        .locs
                        .iter()
                        .cloned()
                        .partition(|l| workers.contains(&WorkerId(l.worker_id)));
                    if gone.is_empty() {
                        continue;
                    }
                    for l in &gone {
                        txn.del_worker_block(l.worker_id, block.0);
                        txn.delete_replica(Delete {
                            worker: WorkerId(l.worker_id),
                            block: *block,
                            tier: super::apply::tier_of(l.tier),
                            len: b.len,
                        });
                        n += 1;
                    }
                    b.locs = kept;
                    txn.put_block(b);
                }
                Ok(n)
            })?;
            dropped += n;
        }
        if dropped > 0 {
            // the next scan counts what is left
            self.repl.mark();
            info!(replicas = dropped, "drained replicas removed");
        }
        Ok(dropped)
    }
}
