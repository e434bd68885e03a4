//! Block store: the committed blocks across the worker's tiers (their index is in
//! RocksDB, `index`), space reservations for writes, commit (staging -> blocks), reads,
//! deletion and the pending incremental block report. All file I/O here is blocking;
//! callers on the async runtime use `spawn_blocking` (or accept that tmpfs metadata
//! calls and the index's reads and unlogged writes, mostly in memory, are fast).
//!
//! Locking: one `std::sync::Mutex` over the index and the accounting; it is never held
//! across a data copy, only across the index's calls and a few metadata syscalls
//! (renames) that must be atomic with the index update.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use curvine_common::conf::TierDir;
use curvine_common::proto::{BlockReplica, StorageTier, TierReport};
use curvine_common::{BlockId, FsError, FsResult};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use super::heartbeat::EarlyHeartbeat;
use super::index::{BlockIndex, INDEX_DIR};
use super::layout::{self, block_file, remove_quiet, sidecar_of, Sidecar};
use super::tiers::{fs_free_bytes, prepare_dir, Tier};

mod scan;
mod write;

use scan::scan_tier;
pub(super) use write::ensure_parent;
pub use write::WriteHandle;

/// Store settings taken from the worker configuration.
#[derive(Debug, Clone)]
pub struct StoreConf {
    pub chunk_size: u32,
    /// fsync block data before acknowledging a commit (tiers not in `fsync_tiers`).
    pub fsync: bool,
    /// Per-tier overrides of `fsync`.
    pub fsync_tiers: Vec<(StorageTier, bool)>,
    /// Bytes reserved for a write that does not say how much it needs.
    pub default_reserve: u64,
    pub high_watermark: f64,
    pub low_watermark: f64,
    /// `host:port`, used in errors that name the worker.
    pub worker: String,
}

impl StoreConf {
    /// Whether block data in `tier` is fsynced at commit.
    pub fn fsync_for(&self, tier: StorageTier) -> bool {
        self.fsync_tiers
            .iter()
            .find(|(t, _)| *t == tier)
            .map_or(self.fsync, |(_, f)| *f)
    }
}

/// The most tier directories a worker takes (`BlockMeta` keeps the index in a u16).
pub const MAX_TIERS: usize = u16::MAX as usize;

#[derive(Debug)]
pub(super) struct Inner {
    pub tiers: Vec<Tier>,
    /// Every committed block, on disk (see `index`).
    pub blocks: BlockIndex,
    /// Blocks an eviction is copying to the next tier.
    pub moving: HashSet<u64>,
    pub tick: u64,
    /// Reads not yet in the index's LRU order: (block id, tick). Recorded in one write
    /// when `TOUCH_BATCH` have gathered, and before an eviction reads the order.
    pub touched: Vec<(u64, u64)>,
    pub pending_added: HashMap<u64, BlockReplica>,
    pub pending_removed: HashSet<u64>,
    /// Blocks the under-store holds (the master said so): the last tier may drop them.
    pub droppable: HashSet<u64>,
}

/// Reads gathered before they are written to the index at once.
const TOUCH_BATCH: usize = 1024;

impl Inner {
    /// Mark block `id` as used now.
    pub fn touch(&mut self, id: u64) -> FsResult<()> {
        self.tick += 1;
        self.touched.push((id, self.tick));
        if self.touched.len() >= TOUCH_BATCH {
            self.record_touches()?;
        }
        Ok(())
    }

    /// Write the gathered reads to the index's LRU order.
    pub fn record_touches(&mut self) -> FsResult<()> {
        if self.touched.is_empty() {
            return Ok(());
        }
        let r = self.blocks.touch_all(&mut self.touched);
        // kept on failure for the next try, up to a bound
        if r.is_ok() || self.touched.len() >= 4 * TOUCH_BATCH {
            self.touched.clear();
        }
        r
    }

    pub fn note_added(&mut self, id: u64, len: u64, tier: StorageTier) {
        self.pending_removed.remove(&id);
        self.pending_added.insert(
            id,
            BlockReplica {
                block_id: id,
                len,
                tier: tier as i32,
            },
        );
    }

    fn note_removed(&mut self, id: u64) {
        self.pending_added.remove(&id);
        self.pending_removed.insert(id);
    }
}

#[derive(Debug)]
pub struct BlockStore {
    pub(super) conf: StoreConf,
    pub(super) inner: Mutex<Inner>,
    /// Each tier's directory and kind, fastest first (fixed once open).
    tier_dirs: Vec<(PathBuf, StorageTier)>,
    staging_seq: AtomicU64,
    /// Wakes the eviction task after a commit pushed a tier past its high watermark.
    pub(super) evict_wakeup: Notify,
    /// Asked before evicting: the master may have deletions queued for this worker.
    pub(super) early_heartbeat: EarlyHeartbeat,
}

/// A committed block opened for reading.
#[derive(Debug)]
pub struct BlockReader {
    pub file: File,
    pub path: PathBuf,
    pub len: u64,
    pub chunk_size: u32,
    pub crcs: Vec<u32>,
    pub tier: StorageTier,
}

impl BlockStore {
    /// Prepare every tier dir, clear staging and rebuild the index from `blocks/`. The
    /// index goes in the last (slowest) tier's directory.
    pub fn open(dirs: &[TierDir], conf: StoreConf) -> FsResult<Arc<BlockStore>> {
        if dirs.is_empty() {
            return Err(FsError::config("worker.data_dir is empty"));
        }
        if dirs.len() > MAX_TIERS {
            return Err(FsError::config(format!(
                "worker.data_dir has {} entries; at most {MAX_TIERS}",
                dirs.len()
            )));
        }
        let mut tiers = Vec::with_capacity(dirs.len());
        for td in dirs {
            prepare_dir(td)?;
            tiers.push(Tier::new(
                td.tier,
                td.path.clone(),
                td.capacity.unwrap_or(0),
            ));
        }
        let last = &dirs[dirs.len() - 1].path;
        let mut inner = Inner {
            tiers,
            blocks: BlockIndex::create(&last.join(INDEX_DIR))?,
            moving: HashSet::new(),
            tick: 0,
            touched: Vec::new(),
            pending_added: HashMap::new(),
            pending_removed: HashSet::new(),
            droppable: HashSet::new(),
        };
        for (idx, td) in dirs.iter().enumerate() {
            let moved = layout::ensure_sharded(&td.path)?;
            if moved > 0 {
                info!(dir = %td.path.display(), files = moved, "block files moved to their shard directories");
            }
            scan_tier(&mut inner, idx)?;
        }
        for (td, t) in dirs.iter().zip(inner.tiers.iter_mut()) {
            if td.capacity.is_none() {
                t.capacity = fs_free_bytes(&td.path)
                    .map_err(|e| {
                        FsError::config(format!("worker.data_dir entry {}: {e}", td.path.display()))
                    })?
                    .saturating_add(t.committed);
            }
            info!(tier = t.tier.name(), dir = %t.dir.display(), capacity = t.capacity,
                used = t.committed, blocks = t.blocks, "tier ready");
        }
        let tier_dirs = inner
            .tiers
            .iter()
            .map(|t| (t.dir.clone(), t.tier))
            .collect();
        Ok(Arc::new(BlockStore {
            conf,
            inner: Mutex::new(inner),
            tier_dirs,
            staging_seq: AtomicU64::new(1),
            evict_wakeup: Notify::new(),
            early_heartbeat: EarlyHeartbeat::default(),
        }))
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent-enough state (every update
        // is a few field writes); keep serving rather than poisoning the worker.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn conf(&self) -> &StoreConf {
        &self.conf
    }

    pub fn dirs(&self) -> Vec<PathBuf> {
        self.lock().tiers.iter().map(|t| t.dir.clone()).collect()
    }

    pub fn tier_reports(&self) -> Vec<TierReport> {
        let g = self.lock();
        let mut v: Vec<TierReport> = g.tiers.iter().map(Tier::report).collect();
        let last = v.len().saturating_sub(1);
        for id in &g.droppable {
            if let Ok(Some(m)) = g.blocks.get(*id) {
                if m.tier() == last {
                    v[last].evictable += m.len;
                }
            }
        }
        v
    }

    /// Up to `limit` ids of committed blocks from `start` on, in order (a page of the
    /// full block report, or of a scrub pass).
    pub fn block_ids_from(&self, start: BlockId, limit: usize) -> FsResult<Vec<BlockId>> {
        let ids = self.lock().blocks.ids_from(start.0, limit)?;
        Ok(ids.into_iter().map(BlockId).collect())
    }

    /// The ids of every committed block, in order.
    #[cfg(test)]
    pub fn block_ids(&self) -> FsResult<Vec<BlockId>> {
        self.block_ids_from(BlockId(0), usize::MAX)
    }

    /// Up to `limit` replicas held, from block id `start` on, in order (a page of the
    /// full block report, in its wire form).
    pub fn replicas_from(&self, start: BlockId, limit: usize) -> FsResult<Vec<BlockReplica>> {
        let g = self.lock();
        Ok(g.blocks
            .entries_from(start.0, limit)?
            .into_iter()
            .map(|(id, m)| BlockReplica {
                block_id: id,
                len: m.len,
                tier: g.tiers[m.tier()].tier as i32,
            })
            .collect())
    }

    /// Take the incremental report accumulated since the last call.
    pub fn take_pending(&self) -> (Vec<BlockReplica>, Vec<u64>) {
        let mut g = self.lock();
        // taken whole, so a burst of commits does not leave its map's capacity behind
        let added = std::mem::take(&mut g.pending_added).into_values().collect();
        let removed = std::mem::take(&mut g.pending_removed).into_iter().collect();
        (added, removed)
    }

    /// Put back a report that could not be delivered, unless newer events superseded it.
    pub fn restore_pending(&self, added: Vec<BlockReplica>, removed: Vec<u64>) {
        let mut g = self.lock();
        for r in added {
            if !g.pending_removed.contains(&r.block_id) {
                g.pending_added.entry(r.block_id).or_insert(r);
            }
        }
        for id in removed {
            if !g.pending_added.contains_key(&id) {
                g.pending_removed.insert(id);
            }
        }
    }

    /// Committed length and tier of a block, if present.
    pub fn block_info(&self, id: BlockId) -> FsResult<Option<(u64, StorageTier)>> {
        let g = self.lock();
        Ok(g.blocks.get(id.0)?.map(|m| (m.len, g.tiers[m.tier()].tier)))
    }

    fn not_found(&self, id: u64) -> FsError {
        FsError::BlockNotFound {
            block_id: id,
            worker: self.conf.worker.clone(),
        }
    }

    /// Start writing `id`: reserve space (evicting or falling back to slower tiers) and
    /// create an empty staging file. Blocking (eviction may copy blocks).
    pub fn begin_write(
        self: &Arc<Self>,
        id: BlockId,
        want: StorageTier,
        reserve: u64,
    ) -> FsResult<WriteHandle> {
        let id = id.0;
        let reserve = self.check_new(id, reserve)?;
        let tier = self.reserve_somewhere(want, reserve)?;
        self.open_staging(id, tier, reserve)
    }

    /// `begin_write` when it needs no waiting: the first tier it would try has room
    /// as it is (no eviction, no early heartbeat) and does not fsync at commit (by its
    /// own setting or the worker's). None: call `begin_write` instead, off
    /// the async runtime. What is left is creating the staging file, as cheap as the
    /// metadata calls of a commit.
    pub fn try_begin_write(
        self: &Arc<Self>,
        id: BlockId,
        want: StorageTier,
        reserve: u64,
    ) -> FsResult<Option<WriteHandle>> {
        let id = id.0;
        let reserve = self.check_new(id, reserve)?;
        let (tier, kind) = self.first_tier(want);
        // A tier that fsyncs at commit keeps the open off the runtime too: its file
        // system may be busy flushing.
        if self.conf.fsync_for(kind) || !self.reserve_if_fits(tier, reserve) {
            return Ok(None);
        }
        self.open_staging(id, tier, reserve).map(Some)
    }

    /// The bytes to reserve for a new write of `id` (`reserve`, or the default), or an
    /// error if the block exists.
    fn check_new(&self, id: u64, reserve: u64) -> FsResult<u64> {
        if self.lock().blocks.contains(id)? {
            return Err(FsError::exists(format!("block {id}")));
        }
        Ok(if reserve == 0 {
            self.conf.default_reserve
        } else {
            reserve
        })
    }

    /// The index and kind of the first tier at or below `want`.
    fn first_tier(&self, want: StorageTier) -> (usize, StorageTier) {
        let g = self.lock();
        let idx = match want {
            StorageTier::Unspecified => 0,
            w => g
                .tiers
                .iter()
                .position(|t| t.tier as i32 >= w as i32)
                .unwrap_or(g.tiers.len() - 1),
        };
        (idx, g.tiers[idx].tier)
    }

    /// Create the staging file of a write of `id` with `reserve` bytes reserved in
    /// `tier` (given back if this fails).
    fn open_staging(self: &Arc<Self>, id: u64, tier: usize, reserve: u64) -> FsResult<WriteHandle> {
        let dir = self.lock().tiers[tier].dir.clone();
        let seq = self.staging_seq.fetch_add(1, Ordering::Relaxed);
        let staging = dir.join(layout::STAGING_DIR).join(format!("{id}.{seq}"));
        let mut handle = WriteHandle {
            store: self.clone(),
            id,
            tier,
            reserved: reserve,
            staging,
            file: None,
            recycled: false,
            done: false,
        };
        let spare = self.lock().tiers[tier].take_spare();
        if let Some(spare) = spare {
            // written over from the start; commit cuts what is left past the block's end
            let reused = fs::rename(&spare, &handle.staging).and_then(|()| {
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&handle.staging)
            });
            match reused {
                Ok(f) => {
                    handle.file = Some(f);
                    handle.recycled = true;
                }
                Err(e) => {
                    warn!(path = %spare.display(), error = %e, "cannot reuse a spare block file");
                    for p in [&spare, &handle.staging] {
                        let _ = remove_quiet(p);
                    }
                }
            }
        }
        if handle.file.is_none() {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&handle.staging)
                .map_err(|e| FsError::io_ctx(handle.staging.display(), e))?;
            handle.file = Some(file);
        }
        debug!(
            block = id,
            tier = handle.tier_name(),
            reserve,
            recycled = handle.recycled,
            "write opened"
        );
        Ok(handle)
    }

    /// Reserve `n` bytes in the first tier at or below `want` that can take it.
    fn reserve_somewhere(&self, want: StorageTier, n: u64) -> FsResult<usize> {
        let (start, _) = self.first_tier(want);
        let count = self.lock().tiers.len();
        for idx in start..count {
            if self.reserve_in(idx, n) {
                return Ok(idx);
            }
        }
        let g = self.lock();
        let free: Vec<String> = g.tiers[start..]
            .iter()
            .map(|t| {
                let disk = match fs_free_bytes(&t.dir) {
                    Ok(f) => format!("; its filesystem has {f}"),
                    Err(e) => format!("; {e}"),
                };
                format!(
                    "{} {} free of {}{disk}",
                    t.tier.name(),
                    t.capacity.saturating_sub(t.used()),
                    t.capacity
                )
            })
            .collect();
        Err(FsError::no_space(format!(
            "worker {} cannot reserve {n} bytes in any tier ({})",
            self.conf.worker,
            free.join(", ")
        )))
    }

    pub(super) fn release(&self, tier: usize, n: u64) {
        let mut g = self.lock();
        let t = &mut g.tiers[tier];
        t.reserved = t.reserved.saturating_sub(n);
    }

    /// Open a committed block for reading and mark it recently used. Retries if an
    /// eviction moved the block between the lookup and the open.
    pub fn open_read(&self, id: BlockId) -> FsResult<BlockReader> {
        self.open_read_inner(id.0, true)
    }

    /// Open a block without marking it used (the scrubber must not keep blocks hot).
    pub fn open_read_quiet(&self, id: BlockId) -> FsResult<BlockReader> {
        self.open_read_inner(id.0, false)
    }

    fn open_read_inner(&self, id: u64, touch: bool) -> FsResult<BlockReader> {
        // The block files are the truth, and a block only moves down the tiers, its new
        // copy in place before the old one goes: looked for from the fastest tier down,
        // it is found wherever it is, without a read of the index. Its length and chunk
        // size are in its sidecar. Retried if a block file went between its open and
        // its sidecar's (an eviction moved it).
        let mut last_err = None;
        for _ in 0..4 {
            let mut vanished = false;
            for (dir, tier) in &self.tier_dirs {
                let path = block_file(dir, id);
                let file = match File::open(&path) {
                    Ok(f) => f,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(FsError::io_ctx(path.display(), e)),
                };
                let sc = match fs::read(sidecar_of(&path)) {
                    Ok(sc) => sc,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        last_err = Some(e);
                        vanished = true;
                        break;
                    }
                    Err(e) => return Err(FsError::io_ctx(sidecar_of(&path).display(), e)),
                };
                let sc = Sidecar::decode(&sc).ok_or_else(|| {
                    FsError::io(format!("{}: malformed checksum sidecar", path.display()))
                })?;
                if touch {
                    self.lock().touch(id)?;
                }
                return Ok(BlockReader {
                    file,
                    path,
                    len: sc.len,
                    chunk_size: sc.chunk_size,
                    crcs: sc.crcs,
                    tier: *tier,
                });
            }
            if !vanished {
                return Err(self.not_found(id));
            }
        }
        warn!(block = id, error = ?last_err, "block file vanished while opening it");
        Err(self.not_found(id))
    }

    /// Delete a committed block (master request). Returns whether it existed.
    pub fn delete(&self, id: BlockId) -> FsResult<bool> {
        let id = id.0;
        let (path, tier, len) = {
            let mut g = self.lock();
            let Some(m) = g.blocks.remove(id)? else {
                return Ok(false);
            };
            // an eviction copying it finds it gone and drops its copy
            g.moving.remove(&id);
            g.droppable.remove(&id);
            let t = &mut g.tiers[m.tier()];
            t.committed = t.committed.saturating_sub(m.len);
            t.blocks = t.blocks.saturating_sub(1);
            let p = block_file(&t.dir, id);
            g.note_removed(id);
            (p, m.tier(), m.len)
        };
        let mut doomed = vec![sidecar_of(&path)];
        if !self.keep_spare(tier, &path, len) {
            doomed.push(path);
        }
        for p in doomed {
            if let Err(e) = remove_quiet(&p) {
                warn!(block = id, error = %e, path = %p.display(), "delete block file failed");
            }
        }
        debug!(block = id, "block deleted");
        Ok(true)
    }

    /// Keep the file of a deleted block, `len` bytes at `path`, as a spare of `tier` if
    /// there is room and nothing else has it open or mapped. False: the caller removes it.
    ///
    /// A reader that opened or mapped the block before its deletion keeps reading the
    /// old bytes, so such a file must never be written over. The file is first moved
    /// out of `blocks/` (no one can open it by its block path after that), then the
    /// kernel is asked for a write lease, which it grants only while no other open file
    /// refers to the file, a mapping's included.
    fn keep_spare(&self, tier: usize, path: &Path, len: u64) -> bool {
        let (limit, dir) = {
            let g = self.lock();
            let t = &g.tiers[tier];
            let limit = (t.capacity as f64 * self.conf.low_watermark) as u64;
            if !t.has_room_for_spare(len, limit) {
                return false;
            }
            (limit, t.dir.clone())
        };
        let seq = self.staging_seq.fetch_add(1, Ordering::Relaxed);
        let spare = dir.join(layout::SPARE_DIR).join(seq.to_string());
        if let Err(e) = fs::rename(path, &spare) {
            debug!(path = %path.display(), error = %e, "cannot move a block file aside");
            return false;
        }
        if unused_elsewhere(&spare) {
            let mut g = self.lock();
            let t = &mut g.tiers[tier];
            if t.has_room_for_spare(len, limit) {
                t.spares.push((spare, len));
                return true;
            }
        }
        if let Err(e) = remove_quiet(&spare) {
            warn!(path = %spare.display(), error = %e, "cannot remove a deleted block's file");
        }
        true
    }
}

/// Whether no open file but ours refers to the file at `path` (mappings included): the
/// kernel grants a write lease only then.
#[allow(unsafe_code)]
fn unused_elsewhere(path: &Path) -> bool {
    let Ok(f) = File::open(path) else {
        return false;
    };
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on a descriptor this function owns; F_SETLEASE reads no memory.
    let leased = unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_WRLCK) } == 0;
    if leased {
        // SAFETY: as above; closing the file would drop the lease too.
        unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK) };
    }
    leased
}
