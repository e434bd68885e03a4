//! A block being written: its staging file and space reservation, and the commit
//! that checks it, writes its sidecar and renames it into `blocks/` (`WriteHandle`).

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use curvine_common::checksum::chunk_count;
use curvine_common::proto::StorageTier;
use curvine_common::{FsError, FsResult};
use tracing::{debug, warn};

use super::BlockStore;
use crate::worker::index::BlockMeta;
use crate::worker::layout::{block_file, remove_quiet, sidecar_of, Sidecar};

/// A block being written: holds its reservation and staging file. Dropped without
/// `commit`, it removes the staging file and releases the reservation.
pub struct WriteHandle {
    pub(super) store: Arc<BlockStore>,
    pub id: u64,
    pub(super) tier: usize,
    pub(super) reserved: u64,
    pub(super) staging: PathBuf,
    /// The staging file is a deleted block's file, written over.
    pub(super) recycled: bool,
    pub(super) file: Option<File>,
    pub(super) done: bool,
}

impl std::fmt::Debug for WriteHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteHandle")
            .field("id", &self.id)
            .field("staging", &self.staging)
            .finish()
    }
}

impl WriteHandle {
    pub fn staging_path(&self) -> &Path {
        &self.staging
    }

    pub fn tier(&self) -> StorageTier {
        self.store.lock().tiers[self.tier].tier
    }

    pub(super) fn tier_name(&self) -> &'static str {
        self.tier().name()
    }

    /// A handle on the staging file for a writer thread.
    pub fn clone_file(&self) -> FsResult<File> {
        match &self.file {
            Some(f) => f
                .try_clone()
                .map_err(|e| FsError::io_ctx(self.staging.display(), e)),
            None => Err(FsError::internal("staging file not open")),
        }
    }

    /// Make sure `total` bytes are reserved (no eviction; the open reserved the block size).
    pub fn ensure_reserved(&mut self, total: u64) -> FsResult<()> {
        if total <= self.reserved {
            return Ok(());
        }
        let extra = total - self.reserved;
        let mut g = self.store.lock();
        let t = &mut g.tiers[self.tier];
        if !t.fits(extra) {
            return Err(FsError::no_space(format!(
                "block {} grew past its reservation of {} bytes and tier {} is full",
                self.id,
                self.reserved,
                t.tier.name()
            )));
        }
        t.reserved += extra;
        self.reserved = total;
        Ok(())
    }

    /// Commit: check the length and CRC count, write the sidecar, rename staging ->
    /// blocks and publish the block in the index and the pending report. Blocking.
    pub fn commit(mut self, len: u64, crcs: Vec<u32>) -> FsResult<()> {
        let store = self.store.clone();
        let cs = store.conf.chunk_size;
        let id = self.id;
        let mut size = fs::metadata(&self.staging)
            .map_err(|e| FsError::io_ctx(self.staging.display(), e))?
            .len();
        if self.recycled && size > len {
            // the rest of the spare file this block was written over
            if let Some(f) = &self.file {
                f.set_len(len)
                    .map_err(|e| FsError::io_ctx(self.staging.display(), e))?;
                size = len;
            }
        }
        if size != len {
            return Err(FsError::invalid(format!(
                "block {id}: commit of {len} bytes but the staging file has {size}"
            )));
        }
        if crcs.len() != chunk_count(len, cs) {
            return Err(FsError::invalid(format!(
                "block {id}: {} checksums for {len} bytes in chunks of {cs}",
                crcs.len()
            )));
        }
        self.ensure_reserved(len)?;
        let fsync = store.conf.fsync_for(self.tier());
        if fsync {
            if let Some(f) = &self.file {
                f.sync_all()
                    .map_err(|e| FsError::io_ctx(self.staging.display(), e))?;
            }
        }
        let staging_sc = sidecar_of(&self.staging);
        let sc = Sidecar {
            chunk_size: cs,
            len,
            crcs,
        };
        write_file(&staging_sc, &sc.encode(), fsync)?;
        fault_disk!("disk.commit", &store.conf.worker);
        let (dst, tier_kind, over_high) = {
            let mut g = store.lock();
            if g.blocks.contains(id)? {
                drop(g);
                let _ = remove_quiet(&staging_sc);
                return Err(FsError::exists(format!("block {id}")));
            }
            let dst = block_file(&g.tiers[self.tier].dir, id);
            ensure_parent(&dst)?;
            fs::rename(&staging_sc, sidecar_of(&dst))
                .map_err(|e| FsError::io_ctx(sidecar_of(&dst).display(), e))?;
            if let Err(e) = fs::rename(&self.staging, &dst) {
                let _ = remove_quiet(&sidecar_of(&dst));
                return Err(FsError::io_ctx(dst.display(), e));
            }
            g.tick += 1;
            let meta = BlockMeta::new(self.tier, len, cs, g.tick);
            if let Err(e) = g.blocks.replace(id, None, &meta) {
                // not indexed, so not committed: the files go
                for p in [sidecar_of(&dst), dst.clone()] {
                    if let Err(e) = remove_quiet(&p) {
                        warn!(path = %p.display(), error = %e, "cannot remove an unindexed block file");
                    }
                }
                return Err(e);
            }
            let t = &mut g.tiers[self.tier];
            t.reserved = t.reserved.saturating_sub(self.reserved);
            t.committed += len;
            t.blocks += 1;
            let tier_kind = t.tier;
            let over_high = (t.used() as f64) > store.conf.high_watermark * t.capacity as f64;
            // a block written anew (an append) holds bytes the store may not have
            g.droppable.remove(&id);
            g.note_added(id, len, tier_kind);
            self.done = true;
            (dst, tier_kind, over_high)
        };
        if fsync {
            if let Some(parent) = dst.parent() {
                let _ = File::open(parent).and_then(|d| d.sync_all());
            }
        }
        if over_high {
            store.evict_wakeup.notify_one();
        }
        debug!(block = id, len, tier = tier_kind.name(), "block committed");
        Ok(())
    }
}

impl Drop for WriteHandle {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.file = None;
        for p in [self.staging.clone(), sidecar_of(&self.staging)] {
            if let Err(e) = remove_quiet(&p) {
                warn!(path = %p.display(), error = %e, "cannot remove staging file");
            }
        }
        self.store.release(self.tier, self.reserved);
        debug!(block = self.id, "write aborted, staging removed");
    }
}

pub(in crate::worker) fn ensure_parent(p: &Path) -> FsResult<()> {
    if let Some(parent) = p.parent() {
        fs::create_dir_all(parent).map_err(|e| FsError::io_ctx(parent.display(), e))?;
    }
    Ok(())
}

pub(in crate::worker) fn write_file(p: &Path, bytes: &[u8], sync: bool) -> FsResult<()> {
    let mut f = File::create(p).map_err(|e| FsError::io_ctx(p.display(), e))?;
    f.write_all(bytes)
        .map_err(|e| FsError::io_ctx(p.display(), e))?;
    if sync {
        f.sync_all().map_err(|e| FsError::io_ctx(p.display(), e))?;
    }
    Ok(())
}
