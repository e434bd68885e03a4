//! RocksDB store: column families `inodes`, `edges`, `blocks`, `worker_blocks`, `meta`.
//! Reads go to RocksDB (thread safe), through an in-memory cache of inodes in front
//! (`inode_cache`); writes only through `write`, which writes the `WriteBatch` that
//! `apply::step` made of one journal entry atomically and then brings the cache up to
//! date.

use std::ops::RangeInclusive;
use std::path::Path;

use curvine_common::{FsError, FsResult};
use prost::Message;
use rocksdb::{
    ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteBatch, WriteOptions, DB,
};

use super::inode_cache::{Cached, InodeCache};
use super::records::{BlockRec, Counters, InodeRec, JournalEntry};

pub const CF_INODES: &str = "inodes";
pub const CF_EDGES: &str = "edges";
pub const CF_BLOCKS: &str = "blocks";
pub const CF_WORKER_BLOCKS: &str = "worker_blocks";
pub const CF_META: &str = "meta";
/// Replicated masters: the Raft log (index, BE u64 -> encoded entry) ...
pub const CF_RAFT_LOG: &str = "raft_log";
/// ... and the vote, the last purged log id and what the state machine applied.
pub const CF_RAFT_META: &str = "raft_meta";

pub const META_COUNTERS: &[u8] = b"counters";
pub const META_CLUSTER_ID: &[u8] = b"cluster_id";
pub const META_FORMAT: &[u8] = b"format_version";
/// `w/` ‖ worker id (BE u32) -> encoded `proto::WorkerAddress`.
pub const META_WORKER_PREFIX: &[u8] = b"w/";
/// `u/` ‖ inode id (BE u64) -> writer client id (BE u64): files under construction.
pub const META_OPEN_PREFIX: &[u8] = b"u/";

/// 2: directories count their subdirectories in nlink (`master::upgrade`).
const FORMAT_VERSION: &[u8] = b"2";

pub fn db_err(what: &str, e: rocksdb::Error) -> FsError {
    FsError::io(format!("metadata store: {what}: {e}"))
}

fn decode_err(what: &str, e: prost::DecodeError) -> FsError {
    FsError::internal(format!("metadata store: corrupt {what}: {e}"))
}

fn decode_inode(v: &[u8]) -> FsResult<InodeRec> {
    InodeRec::decode(v).map_err(|e| decode_err("inode", e))
}

pub fn edge_key(parent: u64, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + name.len());
    k.extend_from_slice(&parent.to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

pub fn worker_block_key(worker: u32, block: u64) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..4].copy_from_slice(&worker.to_be_bytes());
    k[4..].copy_from_slice(&block.to_be_bytes());
    k
}

pub fn open_key(inode: u64) -> Vec<u8> {
    let mut k = META_OPEN_PREFIX.to_vec();
    k.extend_from_slice(&inode.to_be_bytes());
    k
}

/// `wd/` ‖ worker id (BE u32) -> empty: workers being drained (`cv admin decommission`).
pub const META_DRAIN_PREFIX: &[u8] = b"wd/";

pub fn drain_key(worker: u32) -> Vec<u8> {
    let mut k = META_DRAIN_PREFIX.to_vec();
    k.extend_from_slice(&worker.to_be_bytes());
    k
}

pub fn worker_key(worker: u32) -> Vec<u8> {
    let mut k = META_WORKER_PREFIX.to_vec();
    k.extend_from_slice(&worker.to_be_bytes());
    k
}

fn be_u64(v: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(v.try_into().ok()?))
}

pub struct Store {
    db: DB,
    /// Directories, small files and the edges naming them, in front of `db`.
    cache: InodeCache,
    /// The options of every point get, made once: RocksDB's C API allocates a fresh
    /// set per call otherwise.
    read: rocksdb::ReadOptions,
}

impl Store {
    /// Open (creating if needed) the store in `dir`, with at most `write_buffer` bytes
    /// of memtables (all column families), a `cache`-byte block cache, and up to
    /// `dir_cache` directories and `file_cache` bytes of files held in memory.
    pub fn open(
        dir: &Path,
        write_buffer: u64,
        cache: u64,
        dir_cache: usize,
        file_cache: usize,
    ) -> FsResult<Store> {
        std::fs::create_dir_all(dir)
            .map_err(|e| FsError::io_ctx(format!("create {}", dir.display()), e))?;
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.set_compression_type(rocksdb::DBCompressionType::None);
        opts.increase_parallelism(2);
        opts.set_max_background_jobs(2);
        // Bounded memory: the memtables of all column families share `write_buffer`
        // (a full one is flushed early), and every table block goes through one LRU
        // cache (`point_lookup_tables`).
        let write_buffer = (write_buffer as usize).max(1 << 20);
        opts.set_db_write_buffer_size(write_buffer);
        // A compaction reads each input file through a buffer of this size (2 MB by
        // default): five inputs took 10 MB at once, the master's peak RSS. The tables
        // are small and read from the page cache; 256 KiB reads are enough.
        opts.set_compaction_readahead_size(256 << 10);
        let block_cache = rocksdb::Cache::new_lru_cache((cache as usize).max(1 << 20))
            .map_err(|e| db_err("block cache", e))?;
        let table = crate::rocks::point_lookup_tables(&block_cache);
        // Each column family may take half of `write_buffer`: inodes and edges take
        // nearly all the writes of a namespace, and `set_db_write_buffer_size` above
        // has RocksDB flush early once all of them together come near the cap.
        let cfs = [
            CF_INODES,
            CF_EDGES,
            CF_BLOCKS,
            CF_WORKER_BLOCKS,
            CF_META,
            CF_RAFT_LOG,
            CF_RAFT_META,
        ]
        .into_iter()
        .map(|n| {
            // Every create updates its directory's inode, so each flushed table of
            // inodes spans from that directory's id to the newest file's: a
            // compaction into one big last level rewrote all of it, every few
            // seconds (26 MB at 300,000 files, and 10+ MB of memory while it ran).
            // The small base level and small tables of `column_family` keep each
            // compaction's work and memory bounded as the namespace grows.
            let o = crate::rocks::column_family(&table, write_buffer / 2);
            ColumnFamilyDescriptor::new(n, o)
        });
        let db = DB::open_cf_descriptors(&opts, dir, cfs)
            .map_err(|e| db_err(&format!("open {}", dir.display()), e))?;
        Ok(Store {
            db,
            cache: InodeCache::new(dir_cache, file_cache),
            read: rocksdb::ReadOptions::default(),
        })
    }

    pub(super) fn cf(&self, name: &str) -> FsResult<&rocksdb::ColumnFamily> {
        self.db.cf_handle(name).ok_or_else(|| {
            FsError::internal(format!("metadata store: missing column family {name}"))
        })
    }

    fn get_raw(&self, cf: &str, key: &[u8]) -> FsResult<Option<rocksdb::DBPinnableSlice<'_>>> {
        self.db
            .get_pinned_cf_opt(self.cf(cf)?, key, &self.read)
            .map_err(|e| db_err("read", e))
    }

    pub fn is_formatted(&self) -> FsResult<bool> {
        Ok(self.get_raw(CF_META, META_FORMAT)?.is_some())
    }

    pub fn format_version() -> &'static [u8] {
        FORMAT_VERSION
    }

    pub fn inode(&self, id: u64) -> FsResult<Option<InodeRec>> {
        let gen = match self.cache.inode(id) {
            Cached::Hit(i) => return Ok(Some(i)),
            Cached::Miss(gen) => gen,
        };
        match self.get_raw(CF_INODES, &id.to_be_bytes())? {
            Some(v) => {
                let i = decode_inode(&v)?;
                self.cache.fill_inode(gen, &i, &v);
                Ok(Some(i))
            }
            None => Ok(None),
        }
    }

    /// An inode for a scan over many: from the cache if it is there, else from RocksDB
    /// without keeping it, so that a scan does not push out what calls read.
    pub fn inode_for_scan(&self, id: u64) -> FsResult<Option<InodeRec>> {
        match self.cache.inode(id) {
            Cached::Hit(i) => Ok(Some(i)),
            Cached::Miss(_) => self.inode_uncached(id),
        }
    }

    fn inode_uncached(&self, id: u64) -> FsResult<Option<InodeRec>> {
        self.get_raw(CF_INODES, &id.to_be_bytes())?
            .map(|v| decode_inode(&v))
            .transpose()
    }

    /// Several inodes in one call (missing ones are `None`), for a listing: those
    /// cached from the cache, the others in one RocksDB batch, not kept (a listing
    /// passes over a directory as a scan does).
    pub fn inodes(&self, ids: &[u64]) -> FsResult<Vec<Option<InodeRec>>> {
        let mut out = Vec::with_capacity(ids.len());
        let mut missed = Vec::new();
        for (n, &id) in ids.iter().enumerate() {
            match self.cache.inode(id) {
                Cached::Hit(i) => out.push(Some(i)),
                Cached::Miss(_) => {
                    out.push(None);
                    missed.push(n);
                }
            }
        }
        if missed.is_empty() {
            return Ok(out);
        }
        let cf = self.cf(CF_INODES)?;
        let keys: Vec<[u8; 8]> = missed.iter().map(|&n| ids[n].to_be_bytes()).collect();
        let res = self.db.batched_multi_get_cf(cf, keys.iter(), false);
        for (&n, r) in missed.iter().zip(res) {
            if let Some(v) = r.map_err(|e| db_err("read", e))? {
                out[n] = Some(decode_inode(&v)?);
            }
        }
        Ok(out)
    }

    pub fn child(&self, parent: u64, name: &str) -> FsResult<Option<u64>> {
        let key = edge_key(parent, name);
        let gen = match self.cache.child(&key) {
            Cached::Hit(c) => return Ok(Some(c)),
            Cached::Miss(gen) => gen,
        };
        match self.get_raw(CF_EDGES, &key)? {
            Some(v) => {
                let c =
                    be_u64(&v).ok_or_else(|| FsError::internal("metadata store: corrupt edge"))?;
                self.cache.fill_child(gen, &key, c);
                Ok(Some(c))
            }
            None => Ok(None),
        }
    }

    /// Entries of `parent` with names after `start_after`, at most `limit`; and whether
    /// more follow.
    pub fn list(
        &self,
        parent: u64,
        start_after: &str,
        limit: usize,
    ) -> FsResult<(Vec<(String, u64)>, bool)> {
        let prefix = parent.to_be_bytes();
        let start = edge_key(parent, start_after);
        let mut out = Vec::new();
        let it = self.db.iterator_cf(
            self.cf(CF_EDGES)?,
            IteratorMode::From(&start, Direction::Forward),
        );
        for item in it {
            let (k, v) = item.map_err(|e| db_err("scan", e))?;
            if !k.starts_with(&prefix) {
                break;
            }
            let name = std::str::from_utf8(&k[8..])
                .map_err(|_| FsError::internal("metadata store: bad edge name"))?;
            if !start_after.is_empty() && name == start_after {
                continue;
            }
            if out.len() == limit {
                return Ok((out, true));
            }
            let child =
                be_u64(&v).ok_or_else(|| FsError::internal("metadata store: corrupt edge"))?;
            out.push((name.to_string(), child));
        }
        Ok((out, false))
    }

    pub fn block(&self, id: u64) -> FsResult<Option<BlockRec>> {
        match self.get_raw(CF_BLOCKS, &id.to_be_bytes())? {
            Some(v) => Ok(Some(
                BlockRec::decode(&*v).map_err(|e| decode_err("block", e))?,
            )),
            None => Ok(None),
        }
    }

    pub fn blocks(&self, ids: &[u64]) -> FsResult<Vec<Option<BlockRec>>> {
        let cf = self.cf(CF_BLOCKS)?;
        let keys: Vec<[u8; 8]> = ids.iter().map(|i| i.to_be_bytes()).collect();
        let res = self.db.batched_multi_get_cf(cf, keys.iter(), false);
        res.into_iter()
            .map(|r| match r.map_err(|e| db_err("read", e))? {
                Some(v) => Ok(Some(
                    BlockRec::decode(&*v).map_err(|e| decode_err("block", e))?,
                )),
                None => Ok(None),
            })
            .collect()
    }

    /// Visit every inode record, without caching them (upgrades at start).
    pub fn for_each_inode(&self, mut f: impl FnMut(InodeRec) -> FsResult<()>) -> FsResult<()> {
        for item in self
            .db
            .iterator_cf(self.cf(CF_INODES)?, IteratorMode::Start)
        {
            let (_, v) = item.map_err(|e| db_err("scan", e))?;
            f(decode_inode(&v)?)?;
        }
        Ok(())
    }

    /// Visit every block record (re-replication scans).
    pub fn for_each_block(&self, mut f: impl FnMut(BlockRec) -> FsResult<()>) -> FsResult<()> {
        for item in self
            .db
            .iterator_cf(self.cf(CF_BLOCKS)?, IteratorMode::Start)
        {
            let (_, v) = item.map_err(|e| db_err("scan", e))?;
            f(BlockRec::decode(&*v).map_err(|e| decode_err("block", e))?)?;
        }
        Ok(())
    }

    /// Block ids recorded on `worker` within `ids`, in order (reverse index).
    pub fn worker_blocks(&self, worker: u32, ids: RangeInclusive<u64>) -> FsResult<Vec<u64>> {
        let prefix = worker.to_be_bytes();
        let start = worker_block_key(worker, *ids.start());
        let mut out = Vec::new();
        for item in self.db.iterator_cf(
            self.cf(CF_WORKER_BLOCKS)?,
            IteratorMode::From(&start, Direction::Forward),
        ) {
            let (k, _) = item.map_err(|e| db_err("scan", e))?;
            if !k.starts_with(&prefix) {
                break;
            }
            match be_u64(&k[4..]) {
                Some(b) if b > *ids.end() => break,
                Some(b) => out.push(b),
                None => {}
            }
        }
        Ok(out)
    }

    pub fn meta(&self, key: &[u8]) -> FsResult<Option<Vec<u8>>> {
        Ok(self.get_raw(CF_META, key)?.map(|v| v.to_vec()))
    }

    /// All `meta` entries under `prefix` as (key suffix, value).
    pub fn meta_scan(&self, prefix: &[u8]) -> FsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        for item in self.db.iterator_cf(
            self.cf(CF_META)?,
            IteratorMode::From(prefix, Direction::Forward),
        ) {
            let (k, v) = item.map_err(|e| db_err("scan", e))?;
            if !k.starts_with(prefix) {
                break;
            }
            out.push((k[prefix.len()..].to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    /// At most `limit` `meta` entries under `prefix` from key `from` on (whole keys).
    pub fn meta_from(
        &self,
        prefix: &[u8],
        from: &[u8],
        limit: usize,
    ) -> FsResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        let start = if from > prefix { from } else { prefix };
        for item in self.db.iterator_cf(
            self.cf(CF_META)?,
            IteratorMode::From(start, Direction::Forward),
        ) {
            let (k, v) = item.map_err(|e| db_err("scan", e))?;
            if !k.starts_with(prefix) || out.len() >= limit {
                break;
            }
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    pub fn counters(&self) -> FsResult<Counters> {
        match self.meta(META_COUNTERS)? {
            Some(v) => Counters::decode(&*v).map_err(|e| decode_err("counters", e)),
            None => Ok(Counters::default()),
        }
    }

    /// Apply one journal entry as one atomic write (WAL on, not synced; see `Syncer`),
    /// leaving aside its effects: for entries that have none (formatting, upgrades).
    pub fn apply(&self, entry: &JournalEntry) -> FsResult<()> {
        let applied = super::apply::step(self, entry)?;
        self.write(applied.batch, entry)
    }

    /// Write `batch`, made from `entry` by `apply::step`, as one atomic write (WAL on,
    /// not synced; see `Syncer`), then bring the cache up to date with `entry`.
    pub(super) fn write(&self, batch: WriteBatch, entry: &JournalEntry) -> FsResult<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(false);
        let res = self
            .db
            .write_opt(batch, &wo)
            .map_err(|e| db_err("write", e));
        // Even a failed write bumps the generation: reads racing it are not kept.
        let none = JournalEntry::default();
        self.cache.applied(if res.is_ok() { entry } else { &none });
        res
    }

    /// Every cached inode and edge equals what RocksDB holds.
    #[cfg(test)]
    pub fn check_cache(&self) {
        let (inodes, edges) = self.cache.snapshot();
        for d in inodes {
            assert_eq!(self.inode_uncached(d.id).unwrap(), Some(d), "cached inode");
        }
        for (k, c) in edges {
            let v = self.get_raw(CF_EDGES, &k).unwrap().map(|v| be_u64(&v));
            assert_eq!(v, Some(Some(c)), "cached edge {k:?}");
        }
    }

    /// RocksDB's memory by column family, for tests that look at the master's size.
    #[cfg(test)]
    pub fn memory_report(&self) -> String {
        let mib = |cf: &str, p: &str| {
            let v = self
                .cf(cf)
                .ok()
                .and_then(|h| self.db.property_int_value_cf(h, p).ok().flatten());
            format!("{:.2} MiB", v.unwrap_or(0) as f64 / 1048576.0)
        };
        let mut out = String::new();
        for cf in [CF_INODES, CF_EDGES, CF_BLOCKS, CF_WORKER_BLOCKS, CF_META] {
            out.push_str(&format!(
                "{cf} memtables {} table readers {} live sst {}\n",
                mib(cf, "rocksdb.size-all-mem-tables"),
                mib(cf, "rocksdb.estimate-table-readers-mem"),
                mib(cf, "rocksdb.live-sst-files-size"),
            ));
        }
        // the column families share one cache; the default one has none of its own
        out.push_str(&format!(
            "block cache {} of it pinned {}",
            mib(CF_INODES, "rocksdb.block-cache-usage"),
            mib(CF_INODES, "rocksdb.block-cache-pinned-usage"),
        ));
        out
    }

    /// Write `batch` of the replication log or vote (column families `raft_*`, which no
    /// cache holds) atomically, synced when `sync`.
    pub(super) fn write_raw(&self, batch: WriteBatch, sync: bool) -> FsResult<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        self.db
            .write_opt(batch, &wo)
            .map_err(|e| db_err("write raft log", e))
    }

    /// The database itself, for snapshots (`raft::snapshot`), which read through a
    /// RocksDB snapshot and write the namespace column families whole.
    pub(super) fn db(&self) -> &DB {
        &self.db
    }

    /// Drop every cached inode and edge: the namespace was replaced under the cache
    /// (a snapshot installed).
    pub(super) fn forget_cached(&self) {
        self.cache.clear();
    }

    pub(super) fn raft_meta(&self, key: &[u8]) -> FsResult<Option<Vec<u8>>> {
        Ok(self.get_raw(CF_RAFT_META, key)?.map(|v| v.to_vec()))
    }

    /// The encoded log entries with indexes in `from..to`, in order.
    pub(super) fn raft_log(&self, from: u64, to: u64) -> FsResult<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        let start = from.to_be_bytes();
        for item in self.db.iterator_cf(
            self.cf(CF_RAFT_LOG)?,
            IteratorMode::From(&start, Direction::Forward),
        ) {
            let (k, v) = item.map_err(|e| db_err("scan raft log", e))?;
            match be_u64(&k) {
                Some(i) if i < to => out.push(v.to_vec()),
                _ => break,
            }
        }
        Ok(out)
    }

    /// The encoded last entry of the log, if any.
    pub(super) fn raft_log_last(&self) -> FsResult<Option<Vec<u8>>> {
        let mut it = self
            .db
            .iterator_cf(self.cf(CF_RAFT_LOG)?, IteratorMode::End);
        match it.next() {
            Some(item) => Ok(Some(
                item.map_err(|e| db_err("scan raft log", e))?.1.to_vec(),
            )),
            None => Ok(None),
        }
    }

    /// Make every write so far durable (one fsync of the WAL).
    pub fn sync_wal(&self) -> FsResult<()> {
        self.db.flush_wal(true).map_err(|e| db_err("sync WAL", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::records::op::Kind;
    use rocksdb::perf::{set_perf_stats, PerfContext, PerfMetric, PerfStatsLevel};

    /// A cached file and its name are read without RocksDB; a scan's reads keep nothing.
    #[test]
    fn cached_files_are_read_without_rocksdb_and_scans_keep_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 4 << 20, 4 << 20, 16, 1 << 20).unwrap();
        let mut e = JournalEntry::default();
        e.push(Kind::PutInode(InodeRec {
            id: 5,
            file_type: curvine_common::proto::FileType::File as i32,
            ..Default::default()
        }));
        e.push(Kind::PutEdge(super::super::records::EdgeRec {
            parent: 1,
            name: "f".into(),
            child: 5,
        }));
        store.apply(&e).unwrap();
        assert_eq!(store.inode_for_scan(5).unwrap().map(|i| i.id), Some(5));
        assert!(
            store.cache.snapshot().0.is_empty(),
            "a scan filled the cache"
        );
        // a call's reads keep both
        assert_eq!(store.child(1, "f").unwrap(), Some(5));
        assert!(store.inode(5).unwrap().is_some());
        set_perf_stats(PerfStatsLevel::EnableCount);
        let mut ctx = PerfContext::default();
        ctx.reset();
        for _ in 0..10 {
            assert_eq!(store.child(1, "f").unwrap(), Some(5));
            assert_eq!(store.inode(5).unwrap().map(|i| i.id), Some(5));
            assert_eq!(store.inode_for_scan(5).unwrap().map(|i| i.id), Some(5));
        }
        let listed = store.inodes(&[5, 5]).unwrap();
        assert!(listed.iter().all(|i| i.as_ref().map(|i| i.id) == Some(5)));
        let memtable_gets = ctx.metric(PerfMetric::GetFromMemtableCount);
        set_perf_stats(PerfStatsLevel::Disable);
        assert_eq!(memtable_gets, 0, "cached reads went to RocksDB");
        // a listing reads what is not cached, in order, and keeps none of it
        let mut e = JournalEntry::default();
        for id in [6, 8] {
            e.push(Kind::PutInode(InodeRec {
                id,
                file_type: curvine_common::proto::FileType::File as i32,
                ..Default::default()
            }));
        }
        store.apply(&e).unwrap();
        let ids = |v: Vec<Option<InodeRec>>| v.into_iter().map(|i| i.map(|i| i.id)).collect();
        let listed: Vec<Option<u64>> = ids(store.inodes(&[8, 5, 7, 6]).unwrap());
        assert_eq!(listed, [Some(8), Some(5), None, Some(6)]);
        assert_eq!(
            store.cache.snapshot().0.len(),
            1,
            "a listing filled the cache"
        );
        // ...and so does the test: uncached, the same reads do
        ctx.reset();
        set_perf_stats(PerfStatsLevel::EnableCount);
        assert!(store.inode_uncached(5).unwrap().is_some());
        let memtable_gets = ctx.metric(PerfMetric::GetFromMemtableCount);
        set_perf_stats(PerfStatsLevel::Disable);
        assert!(memtable_gets > 0);
    }

    /// A get in a table of 600,000 keys reads a few small blocks. With one whole filter
    /// per table (750 KB here, more than a 512 KB cache shard holds) every get read that
    /// filter again.
    #[test]
    fn point_gets_in_a_large_table_read_small_blocks() {
        const N: u64 = 600_000;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 4 << 20, 4 << 20, 0, 0).unwrap();
        for start in (0..N).step_by(50_000) {
            let mut e = JournalEntry::default();
            // ids out of order, so the flushed tables overlap and compact into one
            for i in start..start + 50_000 {
                e.push(Kind::PutInode(InodeRec {
                    id: (i * 7_919) % N,
                    ..Default::default()
                }));
            }
            store.apply(&e).unwrap();
        }
        let cf = store.cf(CF_INODES).unwrap();
        store.db.flush_cf(cf).unwrap();
        store.db.compact_range_cf(cf, None::<&[u8]>, None::<&[u8]>);
        for id in (0..N).step_by(997) {
            assert!(store.inode_uncached(id).unwrap().is_some());
        }
        set_perf_stats(PerfStatsLevel::EnableCount);
        let mut ctx = PerfContext::default();
        ctx.reset();
        let gets = 2_000u64;
        for i in 0..gets {
            let id = (i * 104_729) % N;
            assert_eq!(store.inode_uncached(id).unwrap().map(|i| i.id), Some(id));
        }
        let per_get = ctx.metric(PerfMetric::BlockReadByte) / gets;
        set_perf_stats(PerfStatsLevel::Disable);
        assert!(
            per_get < 32 << 10,
            "{per_get} bytes read from tables per get"
        );
    }
}
