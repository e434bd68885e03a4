//! Snapshots of a replicated master's namespace, as files in `<meta_dir>/snapshots`.
//!
//! A snapshot is a dump of the namespace column families (`inodes`, `edges`, `blocks`,
//! `worker_blocks`, `meta`) read through one RocksDB snapshot, so it is the state as of
//! one applied entry, and that entry's id and membership are read from the same RocksDB
//! snapshot (`raft_meta`, written in the same batch as the entry's records). It is
//! written and read as a stream: memory stays bounded whatever the namespace's size.
//!
//! The file: `MAGIC`, the header's length (u32 LE) and the header (`WSnapHeader`), then
//! records `tag (u8, the column family's place in CFS plus one), key length (u32 LE),
//! value length (u32 LE), key, value`, then `END`, the number of records (u64 LE) and
//! the CRC32C of every byte before it (u32 LE). A file that does not end exactly there,
//! or whose count or checksum differ, is refused.
//!
//! Installing one replaces the namespace column families: the file is first renamed to
//! `install.snap` (the intent, durable), then the column families are cleared and
//! written in bounded batches, the last of which also writes the applied log id
//! (synced), and the file becomes `current.snap`. A master that stops in between finds
//! `install.snap` when it starts and installs it again before it opens its namespace
//! (`recover`), so it serves either the old state or the new one, never a mix.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use curvine_common::{FsError, FsResult};
use openraft::{BasicNode, SnapshotMeta};
use prost::Message;
use rocksdb::{IteratorMode, WriteBatch};

use super::super::store::{
    Store, CF_BLOCKS, CF_EDGES, CF_INODES, CF_META, CF_RAFT_META, CF_WORKER_BLOCKS,
};
use super::state_machine::APPLIED;
use super::wire;

/// The directory of a master's snapshots, inside its RocksDB directory.
pub const DIR: &str = "snapshots";
/// The newest snapshot, built here or installed from a leader.
pub const CURRENT: &str = "current.snap";
/// A snapshot being installed (see the module's comment).
pub const INSTALL: &str = "install.snap";
/// `raft_meta` key of the last log id of the last snapshot installed from a leader.
pub const INSTALLED: &[u8] = b"installed";

const MAGIC: &[u8; 8] = b"CVSNAP01";
const END: u8 = 0;
/// The column families of a snapshot; a record's tag is its place here plus one.
const CFS: [&str; 5] = [CF_INODES, CF_EDGES, CF_BLOCKS, CF_WORKER_BLOCKS, CF_META];
/// No key or value of the namespace comes near this; a length above it is corruption.
const MAX_RECORD: usize = 64 << 20;
/// Bytes of records per write batch when installing.
const INSTALL_BATCH: usize = 4 << 20;

#[derive(Clone, PartialEq, prost::Message)]
pub struct WSnapHeader {
    #[prost(message, optional, tag = "1")]
    pub applied: Option<wire::WApplied>,
    #[prost(string, tag = "2")]
    pub id: String,
}

pub type Meta = SnapshotMeta<u64, BasicNode>;

/// One record of a snapshot: its column family, key and value.
pub type Record = (&'static str, Vec<u8>, Vec<u8>);

fn io(what: &str, path: &Path, e: std::io::Error) -> FsError {
    FsError::io_ctx(format!("snapshot {what} {}", path.display()), e)
}

fn corrupt(path: &Path, what: impl std::fmt::Display) -> FsError {
    FsError::Protocol {
        message: format!("snapshot {}: {what}", path.display()),
    }
}

/// Whether `id` is a snapshot id this master makes (and may name a file after).
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_digit() || b == b'-')
}

/// The file a snapshot of id `id` is received into.
pub fn received(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("recv-{id}.snap"))
}

/// Make `path`'s rename or creation durable: sync its directory.
fn sync_dir(dir: &Path) -> FsResult<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("sync", dir, e))
}

/// Writes records, counting them and summing their bytes.
struct Writer {
    out: BufWriter<File>,
    crc: crc_fast::Digest,
    count: u64,
}

impl Writer {
    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.crc.update(b);
        self.out.write_all(b)
    }

    fn record(&mut self, tag: u8, k: &[u8], v: &[u8]) -> std::io::Result<()> {
        let mut h = [0u8; 9];
        h[0] = tag;
        h[1..5].copy_from_slice(&(k.len() as u32).to_le_bytes());
        h[5..].copy_from_slice(&(v.len() as u32).to_le_bytes());
        self.put(&h)?;
        self.put(k)?;
        self.put(v)?;
        self.count += 1;
        Ok(())
    }

    fn finish(mut self) -> std::io::Result<File> {
        self.put(&[END])?;
        let count = self.count.to_le_bytes();
        self.put(&count)?;
        let crc = self.crc.finalize() as u32;
        self.out.write_all(&crc.to_le_bytes())?;
        let f = self.out.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        Ok(f)
    }
}

fn new_writer(path: &Path) -> FsResult<Writer> {
    let f = File::create(path).map_err(|e| io("create", path, e))?;
    Ok(Writer {
        out: BufWriter::with_capacity(1 << 20, f),
        crc: crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi),
        count: 0,
    })
}

fn header_meta(h: &WSnapHeader) -> FsResult<Meta> {
    let applied = h
        .applied
        .as_ref()
        .ok_or_else(|| FsError::internal("snapshot header without its log id"))?;
    let (last, membership) = wire::from_applied(applied)?;
    Ok(SnapshotMeta {
        last_log_id: last,
        last_membership: membership,
        snapshot_id: h.id.clone(),
    })
}

/// Write `header` and the records `rows` yields into `path` (tests and `build`).
fn write_file(
    path: &Path,
    header: &WSnapHeader,
    rows: impl FnOnce(&mut Writer) -> FsResult<()>,
) -> FsResult<()> {
    let mut w = new_writer(path)?;
    let h = header.encode_to_vec();
    let res = (|| -> FsResult<()> {
        let e = |e| io("write", path, e);
        w.put(MAGIC).map_err(e)?;
        w.put(&(h.len() as u32).to_le_bytes()).map_err(e)?;
        w.put(&h).map_err(e)?;
        rows(&mut w)?;
        w.finish().map_err(e)?;
        Ok(())
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(path);
    }
    res
}

/// Dump the namespace of `store` as of now into a new file in `dir`, named `tmp`, and
/// return its meta. `node` (this master's id) makes the snapshot's id unique.
pub fn build(store: &Store, dir: &Path, tmp: &str, node: u64) -> FsResult<Meta> {
    std::fs::create_dir_all(dir).map_err(|e| io("create", dir, e))?;
    let db = store.db();
    let snap = db.snapshot();
    let applied = snap
        .get_cf(store.cf(CF_RAFT_META)?, APPLIED)
        .map_err(|e| super::super::store::db_err("read", e))?
        .map(|v| wire::decode::<wire::WApplied>("applied state", &v))
        .transpose()?
        .unwrap_or_default();
    let (last, _) = wire::from_applied(&applied)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let id = match last {
        Some(l) => format!("{node}-{}-{}-{nanos}", l.leader_id.term, l.index),
        None => format!("{node}-0-0-{nanos}"),
    };
    let header = WSnapHeader {
        applied: Some(applied),
        id,
    };
    let path = dir.join(tmp);
    write_file(&path, &header, |w| {
        for (n, cf) in CFS.iter().enumerate() {
            for item in snap.iterator_cf(store.cf(cf)?, IteratorMode::Start) {
                let (k, v) = item.map_err(|e| super::super::store::db_err("scan", e))?;
                w.record(n as u8 + 1, &k, &v)
                    .map_err(|e| io("write", &path, e))?;
            }
        }
        Ok(())
    })?;
    header_meta(&header)
}

/// Reads a snapshot file record by record, checking it as it goes.
pub struct Reader {
    path: PathBuf,
    r: BufReader<File>,
    crc: crc_fast::Digest,
    count: u64,
    pub meta: Meta,
    done: bool,
}

impl Reader {
    pub fn open(path: &Path) -> FsResult<Reader> {
        let f = File::open(path).map_err(|e| io("open", path, e))?;
        let mut r = Reader {
            path: path.to_path_buf(),
            r: BufReader::with_capacity(1 << 20, f),
            crc: crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi),
            count: 0,
            meta: Meta::default(),
            done: false,
        };
        let mut magic = [0u8; 8];
        r.fill(&mut magic)?;
        if &magic != MAGIC {
            return Err(corrupt(path, "not a master snapshot"));
        }
        let len = r.u32()? as usize;
        if len > MAX_RECORD {
            return Err(corrupt(path, "header too long"));
        }
        let mut h = vec![0u8; len];
        r.fill(&mut h)?;
        let h: WSnapHeader = wire::decode("snapshot header", &h)?;
        r.meta = header_meta(&h)?;
        Ok(r)
    }

    fn fill(&mut self, b: &mut [u8]) -> FsResult<()> {
        self.r.read_exact(b).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                corrupt(&self.path, "truncated")
            } else {
                io("read", &self.path, e)
            }
        })?;
        self.crc.update(b);
        Ok(())
    }

    fn u32(&mut self) -> FsResult<u32> {
        let mut b = [0u8; 4];
        self.fill(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// The next record: (column family, key, value); `None` after the last, once the
    /// count and checksum are found right.
    pub fn next_record(&mut self) -> FsResult<Option<Record>> {
        if self.done {
            return Ok(None);
        }
        let mut tag = [0u8; 1];
        self.fill(&mut tag)?;
        if tag[0] == END {
            let mut c = [0u8; 8];
            self.fill(&mut c)?;
            let want = self.crc.finalize() as u32;
            let mut crc = [0u8; 4];
            self.r
                .read_exact(&mut crc)
                .map_err(|_| corrupt(&self.path, "truncated"))?;
            if u64::from_le_bytes(c) != self.count {
                return Err(corrupt(&self.path, "record count differs"));
            }
            if u32::from_le_bytes(crc) != want {
                return Err(corrupt(&self.path, "checksum differs"));
            }
            let mut rest = [0u8; 1];
            match self.r.read(&mut rest) {
                Ok(0) => {}
                Ok(_) => return Err(corrupt(&self.path, "bytes after the end")),
                Err(e) => return Err(io("read", &self.path, e)),
            }
            self.done = true;
            return Ok(None);
        }
        let cf = CFS
            .get(usize::from(tag[0]) - 1)
            .ok_or_else(|| corrupt(&self.path, format!("record of unknown tag {}", tag[0])))?;
        let (kl, vl) = (self.u32()? as usize, self.u32()? as usize);
        if kl > MAX_RECORD || vl > MAX_RECORD {
            return Err(corrupt(&self.path, "record too long"));
        }
        let (mut k, mut v) = (vec![0u8; kl], vec![0u8; vl]);
        self.fill(&mut k)?;
        self.fill(&mut v)?;
        self.count += 1;
        Ok(Some((cf, k, v)))
    }
}

/// Read the whole of a snapshot file, checking it; its meta when it is sound.
pub fn verify(path: &Path) -> FsResult<Meta> {
    let mut r = Reader::open(path)?;
    while r.next_record()?.is_some() {}
    Ok(r.meta)
}

/// The meta of a snapshot file, from its header alone.
pub fn read_meta(path: &Path) -> FsResult<Meta> {
    Ok(Reader::open(path)?.meta)
}

/// Replace the namespace column families of `store` with the snapshot in `path`, and
/// the applied state with the snapshot's (the last batch, synced). The file is checked
/// whole first: one that is not sound changes nothing.
pub fn load_into(store: &Store, path: &Path) -> FsResult<Meta> {
    let meta = verify(path)?;
    let mut r = Reader::open(path)?;
    let mut b = WriteBatch::default();
    for cf in CFS {
        // every key of the namespace sorts below 256 bytes of 0xff
        b.delete_range_cf(store.cf(cf)?, &[][..], &[0xffu8; 256][..]);
    }
    while let Some((cf, k, v)) = r.next_record()? {
        b.put_cf(store.cf(cf)?, k, v);
        if b.size_in_bytes() >= INSTALL_BATCH {
            store.write_raw(std::mem::take(&mut b), false)?;
        }
    }
    let applied = wire::applied(&meta.last_log_id, &meta.last_membership);
    let meta_cf = store.cf(CF_RAFT_META)?;
    b.put_cf(meta_cf, APPLIED, applied.encode_to_vec());
    if let Some(l) = &meta.last_log_id {
        b.put_cf(meta_cf, INSTALLED, wire::log_id(l).encode_to_vec());
    }
    store.write_raw(b, true)?;
    store.forget_cached();
    Ok(meta)
}

/// Move the checked snapshot `from` to `install.snap` and install it (see the module's
/// comment); then it is the current snapshot.
pub fn install(store: &Store, dir: &Path, from: &Path) -> FsResult<Meta> {
    let to = dir.join(INSTALL);
    std::fs::rename(from, &to).map_err(|e| io("rename", from, e))?;
    sync_dir(dir)?;
    finish_install(store, dir)
}

/// Make the checked snapshot `from` the current one, unless the current one (`cur`) is
/// as new: then `from` is removed. Whether it became current.
pub fn publish(dir: &Path, from: &Path, meta: &Meta, cur: &Option<Meta>) -> FsResult<bool> {
    if cur
        .as_ref()
        .is_some_and(|c| c.last_log_id >= meta.last_log_id)
    {
        let _ = std::fs::remove_file(from);
        return Ok(false);
    }
    std::fs::rename(from, dir.join(CURRENT)).map_err(|e| io("rename", from, e))?;
    sync_dir(dir)?;
    Ok(true)
}

fn finish_install(store: &Store, dir: &Path) -> FsResult<Meta> {
    let from = dir.join(INSTALL);
    let meta = load_into(store, &from)?;
    let to = dir.join(CURRENT);
    std::fs::rename(&from, &to).map_err(|e| io("rename", &from, e))?;
    sync_dir(dir)?;
    Ok(meta)
}

/// At start, before the namespace is opened: finish an install a stop interrupted.
/// Received files never installed are removed.
pub fn recover(store: &Store, meta_dir: &Path) -> FsResult<()> {
    let dir = meta_dir.join(DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("recv-") || name.ends_with(".tmp") {
            let _ = std::fs::remove_file(e.path());
        }
    }
    if dir.join(INSTALL).exists() {
        let meta = finish_install(store, &dir).map_err(|e| {
            FsError::internal(format!(
                "an interrupted snapshot install cannot be finished ({e}); empty {} \
                 to have this master join again by snapshot",
                meta_dir.display()
            ))
        })?;
        tracing::info!(snapshot = %meta.snapshot_id, "finished an interrupted snapshot install");
    }
    Ok(())
}

/// The namespace records of a snapshot file, for tests.
#[cfg(test)]
pub fn records(path: &Path) -> FsResult<Vec<Record>> {
    let mut r = Reader::open(path)?;
    let mut out = Vec::new();
    while let Some(rec) = r.next_record()? {
        out.push(rec);
    }
    Ok(out)
}

#[cfg(test)]
#[path = "snapshot_tests.rs"]
mod tests;
