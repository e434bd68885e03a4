//! Eviction: least-recently-used committed blocks move down one tier (MEM -> SSD -> HDD)
//! when a tier passes its high watermark (background task) or when a reservation does
//! not fit (synchronously, in the caller's blocking thread). The last tier drops only
//! blocks the master named droppable (their under-store holds them; a read fetches
//! them again), least recently used first, and reports them removed; when no such
//! block is left a write gets NoSpace.
//!
//! A move copies block + sidecar into the next tier's staging dir, then, under the index
//! lock, renames them into that tier's `blocks/` and repoints the index; the source is
//! deleted afterwards. Readers that already opened the old file keep reading it.

use curvine_common::tasks::Task;
use std::fs;
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};

use curvine_common::{BlockId, FsResult};

use super::block_store::{ensure_parent, BlockStore};
use super::index::BlockMeta;
use super::layout::{block_file, remove_quiet, sidecar_of, STAGING_DIR};

/// How often the background task checks the watermarks without being woken.
const EVICT_POLL: Duration = Duration::from_secs(1);
/// Blocks read from the LRU order at a time by an eviction pass.
const EVICT_BATCH: usize = 256;

impl BlockStore {
    /// Reserve `n` bytes in tier `idx` if they fit as it is (removing spare block files
    /// in their way), without evicting or waiting.
    pub(super) fn reserve_if_fits(&self, idx: usize, n: u64) -> bool {
        let mut g = self.lock();
        let t = &mut g.tiers[idx];
        if !t.fits(n) {
            return false;
        }
        t.reserved += n;
        let doomed = t.spares_in_the_way();
        drop(g);
        for p in doomed {
            if let Err(e) = remove_quiet(&p) {
                warn!(path = %p.display(), error = %e, "cannot remove a spare block file");
            }
        }
        true
    }

    /// Reserve `n` bytes in tier `idx`, demoting LRU blocks out of it if needed.
    pub(super) fn reserve_in(&self, idx: usize, n: u64) -> bool {
        let mut asked = false;
        loop {
            if self.reserve_if_fits(idx, n) {
                return true;
            }
            let victim = {
                let mut g = self.lock();
                let last = idx + 1 == g.tiers.len();
                let t = &mut g.tiers[idx];
                if t.fits(n) {
                    // room was freed since the look above
                    continue;
                }
                if n > t.capacity {
                    return false;
                }
                if !asked {
                    // blocks of deleted files may be waiting for a heartbeat to free them
                    drop(g);
                    asked = true;
                    self.early_heartbeat.request_and_wait();
                    continue;
                }
                if last {
                    drop(g);
                    if self.drop_one(idx) {
                        continue;
                    }
                    return false;
                }
                match pick_victim(&mut g, idx) {
                    Ok(Some(v)) => v,
                    Ok(None) => return false,
                    Err(e) => {
                        warn!(error = %e, "cannot pick a block to demote");
                        return false;
                    }
                }
            };
            if !self.demote(victim, idx) {
                return false;
            }
        }
    }

    /// Move block `id` (already marked `moving`) from tier `from` to `from + 1`.
    /// Returns false (and clears the mark) if it could not be moved.
    fn demote(&self, id: u64, from: usize) -> bool {
        let len = match self.lock().blocks.get(id) {
            Ok(m) => m.map_or(0, |m| m.len),
            Err(e) => {
                warn!(block = id, error = %e, "demoting block failed");
                self.unmark(id);
                return false;
            }
        };
        let to = from + 1;
        if !self.reserve_in(to, len) {
            self.unmark(id);
            return false;
        }
        match self.copy_and_switch(id, from, to, len) {
            Ok(true) => true,
            Ok(false) => {
                // deleted while moving: the space it held is already free
                self.release(to, len);
                true
            }
            Err(e) => {
                warn!(block = id, error = %e, "demoting block failed");
                self.release(to, len);
                self.unmark(id);
                false
            }
        }
    }

    fn unmark(&self, id: u64) {
        self.lock().moving.remove(&id);
    }

    /// Ok(false) = the block was deleted meanwhile (nothing left behind).
    fn copy_and_switch(&self, id: u64, from: usize, to: usize, len: u64) -> std::io::Result<bool> {
        let (src, dst_dir) = {
            let g = self.lock();
            (block_file(&g.tiers[from].dir, id), g.tiers[to].dir.clone())
        };
        let tmp = dst_dir.join(STAGING_DIR).join(format!("{id}.move"));
        let tmp_sc = sidecar_of(&tmp);
        let copied = fs::copy(&src, &tmp).and_then(|_| fs::copy(sidecar_of(&src), &tmp_sc));
        if let Err(e) = copied {
            let _ = remove_quiet(&tmp);
            let _ = remove_quiet(&tmp_sc);
            if !self
                .lock()
                .blocks
                .contains(id)
                .map_err(std::io::Error::other)?
            {
                return Ok(false);
            }
            return Err(e);
        }
        let to_tier = self.lock().tiers[to].tier;
        if self.conf.fsync_for(to_tier) {
            for p in [&tmp, &tmp_sc] {
                fs::File::open(p)?.sync_all()?;
            }
        }
        let dst = block_file(&dst_dir, id);
        ensure_parent(&dst).map_err(|e| std::io::Error::other(e.to_string()))?;
        {
            let mut g = self.lock();
            let here = g.blocks.get(id).map_err(std::io::Error::other)?;
            let m = match here {
                Some(m) if g.moving.contains(&id) && m.tier() == from => m,
                _ => {
                    drop(g);
                    let _ = remove_quiet(&tmp);
                    let _ = remove_quiet(&tmp_sc);
                    return Ok(false);
                }
            };
            let moved = BlockMeta::new(to, m.len, m.chunk_size, m.last_access);
            g.blocks
                .replace(id, Some(&m), &moved)
                .map_err(std::io::Error::other)?;
            let renamed =
                fs::rename(&tmp_sc, sidecar_of(&dst)).and_then(|()| fs::rename(&tmp, &dst));
            if let Err(e) = renamed {
                // the block stays where it was
                if let Err(e) = g.blocks.replace(id, Some(&moved), &m) {
                    warn!(block = id, error = %e, "cannot restore a block's index entry");
                }
                return Err(e);
            }
            g.moving.remove(&id);
            let tier_kind = g.tiers[to].tier;
            crate::metrics::worker().evicted(g.tiers[from].tier, len);
            let f = &mut g.tiers[from];
            f.committed = f.committed.saturating_sub(len);
            f.blocks = f.blocks.saturating_sub(1);
            let t = &mut g.tiers[to];
            t.reserved = t.reserved.saturating_sub(len);
            t.committed += len;
            t.blocks += 1;
            g.note_added(id, len, tier_kind);
        }
        for p in [sidecar_of(&src), src] {
            if let Err(e) = remove_quiet(&p) {
                warn!(path = %p.display(), error = %e, "cannot remove demoted block");
            }
        }
        debug!(block = id, from, to, "block demoted");
        Ok(true)
    }

    /// Demote tier `idx`'s least recently used blocks until it is below its low
    /// watermark, a batch at a time in LRU order (entries that changed meanwhile are
    /// skipped). Returns the number of blocks moved.
    fn evict_tier(&self, idx: usize) -> FsResult<usize> {
        let mut moved = 0;
        loop {
            let batch = {
                let mut g = self.lock();
                g.record_touches()?;
                g.blocks
                    .oldest(idx, EVICT_BATCH, |id| g.moving.contains(&id))?
            };
            if batch.is_empty() {
                return Ok(moved);
            }
            let mut tried = false;
            for id in batch {
                {
                    let mut g = self.lock();
                    let t = &g.tiers[idx];
                    if (t.used() as f64) < self.conf.low_watermark * t.capacity as f64 {
                        return Ok(moved);
                    }
                    match g.blocks.get(id)? {
                        Some(m) if m.tier() == idx && !g.moving.contains(&id) => {
                            g.moving.insert(id);
                        }
                        _ => continue,
                    }
                }
                tried = true;
                if !self.demote(id, idx) {
                    return Ok(moved);
                }
                moved += 1;
            }
            if !tried {
                // the order named only blocks that left the tier meanwhile; the next
                // pass reads it afresh
                return Ok(moved);
            }
        }
    }

    /// One pass: bring every tier above its high watermark below its low watermark.
    /// Returns the number of blocks moved.
    pub fn evict_once(&self) -> usize {
        let n_tiers = self.lock().tiers.len();
        let mut moved = 0;
        for idx in 0..n_tiers.saturating_sub(1) {
            let (used, cap) = {
                let g = self.lock();
                (g.tiers[idx].used(), g.tiers[idx].capacity)
            };
            if (used as f64) <= self.conf.high_watermark * cap as f64 {
                continue;
            }
            self.early_heartbeat.request_and_wait();
            let used = self.lock().tiers[idx].used();
            if (used as f64) <= self.conf.high_watermark * cap as f64 {
                continue;
            }
            match self.evict_tier(idx) {
                Ok(n) => moved += n,
                Err(e) => warn!(tier = idx, error = %e, "eviction pass failed"),
            }
        }
        if moved > 0 {
            info!(moved, "eviction pass demoted blocks");
        }
        if let Some(last) = n_tiers.checked_sub(1) {
            let mut dropped = 0;
            loop {
                let (used, cap) = {
                    let g = self.lock();
                    (g.tiers[last].used(), g.tiers[last].capacity)
                };
                let limit = if dropped == 0 {
                    self.conf.high_watermark
                } else {
                    self.conf.low_watermark
                };
                if (used as f64) <= limit * cap as f64 || !self.drop_one(last) {
                    break;
                }
                dropped += 1;
            }
            if dropped > 0 {
                info!(dropped, "eviction pass dropped under-store blocks");
            }
            moved += dropped;
        }
        moved
    }

    /// Blocks the under-store holds (the master's word): the last tier may drop them.
    pub fn mark_droppable(&self, ids: &[u64]) -> FsResult<()> {
        let mut g = self.lock();
        for &id in ids {
            if g.blocks.get(id)?.is_some() {
                g.droppable.insert(id);
            }
        }
        Ok(())
    }

    /// Drop the least recently used droppable block of tier `idx`; whether one went.
    fn drop_one(&self, idx: usize) -> bool {
        let victim = {
            let mut g = self.lock();
            if let Err(e) = g.record_touches() {
                warn!(error = %e, "cannot record block reads before a drop");
            }
            let g = &mut *g;
            let (moving, droppable) = (&g.moving, &g.droppable);
            if droppable.is_empty() {
                return false;
            }
            match g.blocks.oldest(idx, 1, |id| {
                moving.contains(&id) || !droppable.contains(&id)
            }) {
                Ok(v) => v.first().copied(),
                Err(e) => {
                    warn!(error = %e, "cannot pick a block to drop");
                    None
                }
            }
        };
        let Some(id) = victim else {
            return false;
        };
        match self.delete(BlockId(id)) {
            Ok(_) => {
                debug!(block = id, "dropped a block the under-store holds");
                true
            }
            Err(e) => {
                warn!(block = id, error = %e, "cannot drop a block");
                false
            }
        }
    }
}

/// The least recently used committed block of tier `idx` that is not already moving;
/// marks it moving.
fn pick_victim(g: &mut super::block_store::Inner, idx: usize) -> FsResult<Option<u64>> {
    g.record_touches()?;
    let moving = &g.moving;
    let Some(&id) = g.blocks.oldest(idx, 1, |id| moving.contains(&id))?.first() else {
        return Ok(None);
    };
    g.moving.insert(id);
    Ok(Some(id))
}

/// Background eviction: runs a pass when woken after a commit, or every second.
pub async fn run_evictor(store: Arc<BlockStore>, task: Task) {
    loop {
        tokio::select! {
            _ = task.cancelled() => return,
            _ = store.evict_wakeup.notified() => {}
            _ = tokio::time::sleep(EVICT_POLL) => {}
        }
        task.busy("move or drop blocks of tiers above their high watermark");
        let s = store.clone();
        match tokio::task::spawn_blocking(move || s.evict_once()).await {
            Ok(_) => task.idle(),
            Err(e) => {
                warn!(error = %e, "eviction pass panicked");
                task.failed(&e);
            }
        }
    }
}
