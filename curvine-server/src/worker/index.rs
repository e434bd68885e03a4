//! The worker's index of committed blocks, in a RocksDB under the slowest tier's directory
//! (`<tier dir>/index/<n>`), so that the worker's memory does not grow with the number of
//! blocks it holds: RocksDB keeps a bounded memtable and block cache, and the rest on disk.
//!
//! The block files are the truth. The index is removed and rebuilt from them at every
//! start (`BlockStore::open`), so it is written without a write-ahead log: a crash loses
//! nothing the next start does not rebuild. Each index gets a directory of its own
//! (`<n>` counts the indexes this process opened): RocksDB refuses a second open of a
//! directory while the same process has it open, as a store that is still being
//! dropped does.
//!
//! Two column families:
//! - `default`: block id (u64, big endian, so ids iterate in order) → `BlockMeta`
//!   (22 bytes, little endian: len u64, last access u64, chunk size u32, tier u16);
//! - `lru`: tier (u16 BE) ++ last access (u64 BE) ++ block id (u64 BE) → nothing, so a
//!   tier's least recently used blocks come first.
//!
//! Callers hold the block store's lock around every call that changes the index.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use curvine_common::{FsError, FsResult};
use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, Direction, IteratorMode,
    Options, WriteBatch, WriteOptions, DB,
};
use tracing::warn;

/// The directory of the index inside a tier directory.
pub const INDEX_DIR: &str = "index";

/// Indexes opened by this process: the name of the next one's directory.
static OPENED: AtomicU64 = AtomicU64::new(0);

const CF_LRU: &str = "lru";
const META_LEN: usize = 22;

/// One committed block in the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockMeta {
    pub len: u64,
    pub last_access: u64,
    pub chunk_size: u32,
    /// Index into the store's tiers.
    pub tier: u16,
}

impl BlockMeta {
    pub fn new(tier: usize, len: u64, chunk_size: u32, last_access: u64) -> BlockMeta {
        BlockMeta {
            len,
            last_access,
            chunk_size,
            // the store takes at most MAX_TIERS tiers
            tier: u16::try_from(tier).unwrap_or(u16::MAX),
        }
    }

    pub fn tier(&self) -> usize {
        usize::from(self.tier)
    }

    fn encode(&self) -> [u8; META_LEN] {
        let mut b = [0u8; META_LEN];
        b[..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..16].copy_from_slice(&self.last_access.to_le_bytes());
        b[16..20].copy_from_slice(&self.chunk_size.to_le_bytes());
        b[20..].copy_from_slice(&self.tier.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<BlockMeta> {
        if b.len() != META_LEN {
            return None;
        }
        Some(BlockMeta {
            len: u64::from_le_bytes(b[..8].try_into().ok()?),
            last_access: u64::from_le_bytes(b[8..16].try_into().ok()?),
            chunk_size: u32::from_le_bytes(b[16..20].try_into().ok()?),
            tier: u16::from_le_bytes(b[20..].try_into().ok()?),
        })
    }

    fn lru_key(&self, id: u64) -> [u8; 18] {
        let mut k = [0u8; 18];
        k[..2].copy_from_slice(&self.tier.to_be_bytes());
        k[2..10].copy_from_slice(&self.last_access.to_be_bytes());
        k[10..].copy_from_slice(&id.to_be_bytes());
        k
    }
}

pub struct BlockIndex {
    db: DB,
    write: WriteOptions,
    /// Declared after `db`, so dropped after it: the directory goes once it is closed.
    dir: RemovedOnDrop,
}

/// A directory removed when this is dropped.
struct RemovedOnDrop(PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        match std::fs::remove_dir_all(&self.0) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => warn!(dir = %self.0.display(), error = %e, "cannot remove the block index"),
        }
    }
}

impl std::fmt::Debug for BlockIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockIndex")
            .field("dir", &self.dir.0)
            .finish()
    }
}

fn index_err(what: &str, dir: &Path, e: impl std::fmt::Display) -> FsError {
    FsError::io(format!("block index {}: {what}: {e}", dir.display()))
}

impl BlockIndex {
    /// A new, empty index under `parent`; the indexes there before are removed first.
    pub fn create(parent: &Path) -> FsResult<BlockIndex> {
        match std::fs::remove_dir_all(parent) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(index_err("remove the old index", parent, e)),
        }
        let dir = &parent.join(OPENED.fetch_add(1, Ordering::Relaxed).to_string());
        std::fs::create_dir_all(dir).map_err(|e| index_err("create", dir, e))?;
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.set_max_background_jobs(1);
        // Bounded memory whatever the number of blocks: 1 MB of memtables in all, one
        // 1 MB block cache, small write buffers (1 MB each by default) and compaction
        // reads, a short info log.
        opts.set_db_write_buffer_size(1 << 20);
        opts.set_writable_file_max_buffer_size(64 << 10);
        opts.set_compaction_readahead_size(256 << 10);
        opts.set_keep_log_file_num(2);
        opts.set_max_log_file_size(1 << 20);
        let cache = Cache::new_lru_cache(1 << 20).map_err(|e| index_err("block cache", dir, e))?;
        // The entries are looked up by id (every new block's first, which is not
        // there); the LRU order is only ever scanned, so it needs no filter.
        let point = crate::rocks::point_lookup_tables(&cache);
        let mut scanned = BlockBasedOptions::default();
        scanned.set_block_cache(&cache);
        scanned.set_cache_index_and_filter_blocks(true);
        let cfs = [
            (rocksdb::DEFAULT_COLUMN_FAMILY_NAME, &point),
            (CF_LRU, &scanned),
        ]
        .map(|(n, table)| {
            ColumnFamilyDescriptor::new(n, crate::rocks::column_family(table, 512 << 10))
        });
        let db = DB::open_cf_descriptors(&opts, dir, cfs).map_err(|e| index_err("open", dir, e))?;
        let mut write = WriteOptions::default();
        write.disable_wal(true);
        Ok(BlockIndex {
            db,
            write,
            dir: RemovedOnDrop(dir.to_path_buf()),
        })
    }

    fn err(&self, what: &str, e: impl std::fmt::Display) -> FsError {
        index_err(what, &self.dir.0, e)
    }

    fn lru(&self) -> FsResult<&ColumnFamily> {
        self.db
            .cf_handle(CF_LRU)
            .ok_or_else(|| self.err("open", "missing column family lru"))
    }

    pub fn get(&self, id: u64) -> FsResult<Option<BlockMeta>> {
        let Some(v) = self
            .db
            .get_pinned(id.to_be_bytes())
            .map_err(|e| self.err("read", e))?
        else {
            return Ok(None);
        };
        BlockMeta::decode(&v)
            .map(Some)
            .ok_or_else(|| self.err("read", format!("block {id}: malformed entry")))
    }

    pub fn contains(&self, id: u64) -> FsResult<bool> {
        Ok(self.get(id)?.is_some())
    }

    /// Add to `b` the writes that make `new` the entry of `id`, whose entry is `old`
    /// (None: it has none): the entry, and its place in the LRU order.
    fn stage(
        &self,
        b: &mut WriteBatch,
        id: u64,
        old: Option<&BlockMeta>,
        new: &BlockMeta,
    ) -> FsResult<()> {
        let lru = self.lru()?;
        if let Some(o) = old {
            b.delete_cf(lru, o.lru_key(id));
        }
        b.put(id.to_be_bytes(), new.encode());
        b.put_cf(lru, new.lru_key(id), []);
        Ok(())
    }

    fn write(&self, b: WriteBatch) -> FsResult<()> {
        self.db
            .write_opt(b, &self.write)
            .map_err(|e| self.err("write", e))
    }

    /// Write `new` for `id`, whose entry is `old` (None: it has none).
    pub fn replace(&self, id: u64, old: Option<&BlockMeta>, new: &BlockMeta) -> FsResult<()> {
        let mut b = WriteBatch::default();
        self.stage(&mut b, id, old, new)?;
        self.write(b)
    }

    /// Record that each block of `reads` (id, tick) was read at that tick: one batched
    /// read of their entries, one write. Blocks no longer in the index are passed over;
    /// an id read several times counts its latest read.
    pub fn touch_all(&self, reads: &mut Vec<(u64, u64)>) -> FsResult<()> {
        // by id, then tick: of each id's reads keep one, with the latest tick
        reads.sort_unstable();
        reads.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 = later.1;
            }
            same
        });
        let cf = self
            .db
            .cf_handle(rocksdb::DEFAULT_COLUMN_FAMILY_NAME)
            .ok_or_else(|| self.err("open", "missing column family default"))?;
        let keys: Vec<[u8; 8]> = reads.iter().map(|(id, _)| id.to_be_bytes()).collect();
        let found = self.db.batched_multi_get_cf(cf, keys.iter(), true);
        let mut b = WriteBatch::default();
        for (&(id, tick), v) in reads.iter().zip(found) {
            let Some(v) = v.map_err(|e| self.err("read", e))? else {
                continue;
            };
            let m = BlockMeta::decode(&v)
                .ok_or_else(|| self.err("read", format!("block {id}: malformed entry")))?;
            if m.last_access < tick {
                let now = BlockMeta {
                    last_access: tick,
                    ..m.clone()
                };
                self.stage(&mut b, id, Some(&m), &now)?;
            }
        }
        if b.is_empty() {
            return Ok(());
        }
        self.write(b)
    }

    /// Remove `id`; its entry, if it had one.
    pub fn remove(&self, id: u64) -> FsResult<Option<BlockMeta>> {
        let Some(old) = self.get(id)? else {
            return Ok(None);
        };
        let mut b = WriteBatch::default();
        b.delete(id.to_be_bytes());
        b.delete_cf(self.lru()?, old.lru_key(id));
        self.write(b)?;
        Ok(Some(old))
    }

    /// Add blocks the index does not have, in one write (the scan at start).
    pub fn insert_new(&self, entries: &[(u64, BlockMeta)]) -> FsResult<()> {
        let mut b = WriteBatch::default();
        for (id, m) in entries {
            self.stage(&mut b, *id, None, m)?;
        }
        self.write(b)
    }

    /// Up to `limit` entries from block id `start` on, in order of id.
    pub fn entries_from(&self, start: u64, limit: usize) -> FsResult<Vec<(u64, BlockMeta)>> {
        let from = start.to_be_bytes();
        let mut out = Vec::with_capacity(limit.min(4096));
        for kv in self
            .db
            .iterator(IteratorMode::From(&from, Direction::Forward))
        {
            if out.len() >= limit {
                break;
            }
            let (k, v) = kv.map_err(|e| self.err("scan", e))?;
            let id = u64::from_be_bytes(
                <[u8; 8]>::try_from(&k[..]).map_err(|_| self.err("scan", "malformed key"))?,
            );
            let m = BlockMeta::decode(&v)
                .ok_or_else(|| self.err("scan", format!("block {id}: malformed entry")))?;
            out.push((id, m));
        }
        Ok(out)
    }

    /// Up to `limit` block ids from `start` on, in order.
    pub fn ids_from(&self, start: u64, limit: usize) -> FsResult<Vec<u64>> {
        Ok(self
            .entries_from(start, limit)?
            .into_iter()
            .map(|(id, _)| id)
            .collect())
    }

    /// The ids of tier `tier`'s blocks, least recently used first, skipping those
    /// `skip` refuses, at most `limit` of them.
    pub fn oldest(
        &self,
        tier: usize,
        limit: usize,
        skip: impl Fn(u64) -> bool,
    ) -> FsResult<Vec<u64>> {
        let prefix = u16::try_from(tier).unwrap_or(u16::MAX).to_be_bytes();
        let mut out = Vec::new();
        let it = self
            .db
            .iterator_cf(self.lru()?, IteratorMode::From(&prefix, Direction::Forward));
        for kv in it {
            if out.len() >= limit {
                break;
            }
            let (k, _) = kv.map_err(|e| self.err("scan", e))?;
            if k.len() != 18 || k[..2] != prefix {
                break;
            }
            let id = u64::from_be_bytes(
                <[u8; 8]>::try_from(&k[10..]).map_err(|_| self.err("scan", "malformed key"))?,
            );
            if !skip(id) {
                out.push(id);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_come_back_in_order() {
        let d = tempfile::tempdir().unwrap();
        let ix = BlockIndex::create(&d.path().join(INDEX_DIR)).unwrap();
        for id in [5u64, 1, u64::MAX, 1 << 40] {
            ix.replace(id, None, &BlockMeta::new(1, id ^ 7, 4096, id))
                .unwrap();
        }
        assert_eq!(ix.get(5).unwrap(), Some(BlockMeta::new(1, 2, 4096, 5)));
        assert!(ix.get(6).unwrap().is_none());
        assert_eq!(ix.ids_from(0, 10).unwrap(), [1, 5, 1 << 40, u64::MAX]);
        assert_eq!(ix.ids_from(6, 1).unwrap(), [1 << 40]);
        let e = ix.entries_from(2, 2).unwrap();
        let big = BlockMeta::new(1, (1 << 40) ^ 7, 4096, 1 << 40);
        assert_eq!(e, [(5, BlockMeta::new(1, 2, 4096, 5)), (1 << 40, big)]);
        ix.insert_new(&[(7, BlockMeta::new(0, 3, 512, 0))]).unwrap();
        assert_eq!(ix.get(7).unwrap(), Some(BlockMeta::new(0, 3, 512, 0)));
        assert_eq!(ix.oldest(0, 10, |_| false).unwrap(), [7]);
        ix.remove(7).unwrap();
        assert_eq!(ix.remove(5).unwrap().map(|m| m.len), Some(2));
        assert!(ix.remove(5).unwrap().is_none());
        assert_eq!(ix.ids_from(0, 10).unwrap(), [1, 1 << 40, u64::MAX]);
    }

    #[test]
    fn the_lru_order_follows_every_change() {
        let d = tempfile::tempdir().unwrap();
        let ix = BlockIndex::create(&d.path().join(INDEX_DIR)).unwrap();
        for (id, tier, tick) in [(10u64, 0, 3u64), (11, 0, 1), (12, 1, 0), (13, 0, 2)] {
            ix.replace(id, None, &BlockMeta::new(tier, 1, 1, tick))
                .unwrap();
        }
        assert_eq!(ix.oldest(0, 10, |_| false).unwrap(), [11, 13, 10]);
        assert_eq!(ix.oldest(0, 2, |id| id == 11).unwrap(), [13, 10]);
        assert_eq!(ix.oldest(1, 10, |_| false).unwrap(), [12]);
        // read: last; a read older than the entry, and one of a block since removed,
        // change nothing
        ix.touch_all(&mut vec![(11, 9), (99, 10), (10, 2), (11, 5)])
            .unwrap();
        assert_eq!(ix.oldest(0, 10, |_| false).unwrap(), [13, 10, 11]);
        assert_eq!(ix.get(11).unwrap().unwrap().last_access, 9);
        assert_eq!(ix.get(10).unwrap().unwrap().last_access, 3);
        assert!(ix.get(99).unwrap().is_none());
        // moved down a tier, then removed
        let m = ix.get(13).unwrap().unwrap();
        ix.replace(
            13,
            Some(&m),
            &BlockMeta {
                tier: 1,
                ..m.clone()
            },
        )
        .unwrap();
        assert_eq!(ix.oldest(1, 10, |_| false).unwrap(), [12, 13]);
        ix.remove(12).unwrap();
        assert_eq!(ix.oldest(1, 10, |_| false).unwrap(), [13]);
        assert_eq!(ix.oldest(2, 10, |_| false).unwrap(), Vec::<u64>::new());
    }

    #[test]
    fn an_old_index_is_replaced_by_an_empty_one_and_removed_when_dropped() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join(INDEX_DIR);
        let old = BlockIndex::create(&dir).unwrap();
        old.replace(1, None, &BlockMeta::new(0, 1, 1, 1)).unwrap();
        // while the old one is still open, as a store being dropped may be
        let ix = BlockIndex::create(&dir).unwrap();
        assert!(ix.ids_from(0, 10).unwrap().is_empty());
        drop(old);
        ix.replace(2, None, &BlockMeta::new(0, 1, 1, 1)).unwrap();
        assert_eq!(ix.ids_from(0, 10).unwrap(), [2]);
        let own = ix.dir.0.clone();
        drop(ix);
        assert!(!own.exists());
    }

    #[test]
    fn a_malformed_entry_is_an_error_not_a_missing_block() {
        let d = tempfile::tempdir().unwrap();
        let ix = BlockIndex::create(&d.path().join(INDEX_DIR)).unwrap();
        ix.db.put(3u64.to_be_bytes(), b"short").unwrap();
        let e = ix.get(3).unwrap_err().to_string();
        assert!(e.contains("block 3: malformed entry"), "{e}");
    }
}
