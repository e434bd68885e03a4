//! On-disk layout of a tier directory.
//!
//! ```text
//! <tier dir>/worker.id              decimal worker id, written after registration
//! <tier dir>/cluster.id             cluster id the master handed out
//! <tier dir>/layout                 "2": every block is in its shard (`ensure_sharded`)
//! <tier dir>/staging/<id>.<seq>     a block being written (remote or short-circuit);
//!                                   everything here is deleted at start
//! <tier dir>/staging/<id>.<seq>.crc its sidecar while the commit is in progress
//! <tier dir>/blocks/<xx>/<id>       a committed block, xx = two lowercase hex digits
//!                                   of `shard_of(id)`, <id> = decimal block id
//! <tier dir>/blocks/<xx>/<id>.crc   its CRC sidecar
//! <tier dir>/spare/<seq>            (tmpfs tiers) the file of a deleted block, kept for
//!                                   a new block to write over; deleted at start
//! <tier dir>/index/<n>/             (the last tier only) the block index, a RocksDB
//!                                   rebuilt from `blocks/` at every start
//! ```
//!
//! Sidecar format (all little endian): `b"CVC1"`, `u32 chunk_size`, `u64 block_len`, then
//! one `u32` CRC32C per `chunk_size` chunk of the block (the last chunk may be short), as
//! produced by `curvine_common::checksum::encode_crcs`. A block whose sidecar is missing,
//! malformed, or disagrees with the data file's size is discarded at start.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use curvine_common::checksum::{chunk_count, decode_crcs, encode_crcs};
use curvine_common::conf::TierDir;
use curvine_common::types::BLOCK_INDEX_BITS;
use curvine_common::{FsError, FsResult};

pub const STAGING_DIR: &str = "staging";
pub const BLOCKS_DIR: &str = "blocks";
/// Files of deleted blocks kept to be written over (`Tier::spares`); cleared at start.
pub const SPARE_DIR: &str = "spare";
pub const WORKER_ID_FILE: &str = "worker.id";
pub const CLUSTER_ID_FILE: &str = "cluster.id";
/// Written once every block of the tier is in the shard `shard_of` gives it.
pub const LAYOUT_FILE: &str = "layout";
const LAYOUT: &str = "2";
pub const SIDECAR_EXT: &str = "crc";
const SIDECAR_MAGIC: &[u8; 4] = b"CVC1";
const SIDECAR_HEADER: usize = 16;

/// The shard directory of a block: the low byte of its file's inode number mixed with
/// its index in the file, so that the blocks of one-block files spread over all 256.
/// (It used to be `block_id % 256`, the index alone: every block that began a
/// file went to shard 00. `migrate_shards` moves blocks left there.)
pub fn shard_of(block_id: u64) -> u8 {
    (block_id ^ (block_id >> BLOCK_INDEX_BITS)) as u8
}

/// Shard directory name of a block: `shard_of` as two hex digits.
pub fn shard_name(block_id: u64) -> String {
    format!("{:02x}", shard_of(block_id))
}

/// A block id written as `block_file` names it (decimal, no sign, no leading zero): a
/// file named otherwise ("007") would be indexed under an id whose path is not its own.
pub fn canonical_id(name: &str) -> Option<u64> {
    let id = name.parse::<u64>().ok()?;
    (id.to_string() == name).then_some(id)
}

/// Make sure every block of the tier at `dir` is in its shard directory: unless its
/// `layout` file says so already, move those that are not (`migrate_shards`), then
/// write it. Returns the files moved.
pub fn ensure_sharded(dir: &Path) -> FsResult<u64> {
    let marker = dir.join(LAYOUT_FILE);
    if fs::read_to_string(&marker).is_ok_and(|s| s.trim() == LAYOUT) {
        return Ok(0);
    }
    let blocks = dir.join(BLOCKS_DIR);
    let moved = migrate_shards(&blocks).map_err(|e| {
        FsError::io(format!(
            "cannot move blocks into their shard directories under {}: {e}",
            blocks.display()
        ))
    })?;
    write_atomic(&marker, LAYOUT.as_bytes())?;
    Ok(moved)
}

/// Move every block file and sidecar under `blocks` that is not in its shard directory
/// (an older layout, or a move cut short by a crash) into it. Each file is renamed on its
/// own, so a crash leaves each either where it was or where it belongs, and the next
/// start finishes the job; pairs are matched up only after this has run. Returns the
/// files moved. Names that are not block ids are left for the index scan to discard.
pub fn migrate_shards(blocks: &Path) -> io::Result<u64> {
    let mut made = [false; 256];
    let mut moved = 0;
    for shard in fs::read_dir(blocks)? {
        let shard = shard?;
        if !shard.file_type()?.is_dir() {
            continue;
        }
        let here = shard.file_name();
        for f in fs::read_dir(shard.path())? {
            let f = f?;
            let name = f.file_name();
            let Some(name) = name.to_str() else { continue };
            let stem = sidecar_stem(name).unwrap_or(name);
            let Some(id) = canonical_id(stem) else {
                continue;
            };
            let want = shard_name(id);
            if here.to_str() == Some(want.as_str()) {
                continue;
            }
            let dir = blocks.join(&want);
            let s = usize::from(shard_of(id));
            if !made[s] {
                fs::create_dir_all(&dir)?;
                made[s] = true;
            }
            fs::rename(f.path(), dir.join(name))?;
            moved += 1;
        }
    }
    Ok(moved)
}

/// Committed block file of `block_id` under the tier directory `dir`.
pub fn block_file(dir: &Path, block_id: u64) -> PathBuf {
    dir.join(BLOCKS_DIR)
        .join(shard_name(block_id))
        .join(block_id.to_string())
}

/// The CRC sidecar beside a block (or staging) file.
pub fn sidecar_of(data: &Path) -> PathBuf {
    let mut s = data.as_os_str().to_os_string();
    s.push(".");
    s.push(SIDECAR_EXT);
    PathBuf::from(s)
}

/// The block file name a sidecar's name belongs to (`"7.crc"` -> `"7"`); None for a name
/// that is not a sidecar's.
pub fn sidecar_stem(name: &str) -> Option<&str> {
    name.strip_suffix(SIDECAR_EXT)?.strip_suffix('.')
}

/// Where a committed block lives, if it is on one of `tier_dirs`: `(block file, sidecar)`.
/// Useful for tests that corrupt or inspect blocks on disk.
pub fn block_path(tier_dirs: &[TierDir], block_id: u64) -> Option<(PathBuf, PathBuf)> {
    tier_dirs.iter().find_map(|t| {
        let p = block_file(&t.path, block_id);
        p.is_file().then(|| {
            let s = sidecar_of(&p);
            (p, s)
        })
    })
}

/// Parsed sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sidecar {
    pub chunk_size: u32,
    pub len: u64,
    pub crcs: Vec<u32>,
}

impl Sidecar {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(SIDECAR_HEADER + self.crcs.len() * 4);
        v.extend_from_slice(SIDECAR_MAGIC);
        v.extend_from_slice(&self.chunk_size.to_le_bytes());
        v.extend_from_slice(&self.len.to_le_bytes());
        v.extend_from_slice(&encode_crcs(&self.crcs));
        v
    }

    /// Decode and check self-consistency (chunk count matches the length).
    pub fn decode(bytes: &[u8]) -> Option<Sidecar> {
        if bytes.len() < SIDECAR_HEADER || &bytes[..4] != SIDECAR_MAGIC {
            return None;
        }
        let chunk_size = u32::from_le_bytes(bytes[4..8].try_into().ok()?);
        let len = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
        let crcs = decode_crcs(&bytes[SIDECAR_HEADER..])?;
        if chunk_size == 0 || crcs.len() != chunk_count(len, chunk_size) {
            return None;
        }
        Some(Sidecar {
            chunk_size,
            len,
            crcs,
        })
    }

    pub fn read(path: &Path) -> FsResult<Sidecar> {
        let bytes = fs::read(path).map_err(|e| FsError::io_ctx(path.display(), e))?;
        Sidecar::decode(&bytes)
            .ok_or_else(|| FsError::io(format!("{}: malformed checksum sidecar", path.display())))
    }
}

/// Read `worker.id` from the first tier dir that has a valid one; 0 if none.
pub fn read_worker_id(dirs: &[PathBuf]) -> u32 {
    dirs.iter()
        .find_map(|d| {
            fs::read_to_string(d.join(WORKER_ID_FILE))
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
        })
        .unwrap_or(0)
}

pub fn read_cluster_id(dirs: &[PathBuf]) -> String {
    dirs.iter()
        .find_map(|d| {
            fs::read_to_string(d.join(CLUSTER_ID_FILE))
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_default()
}

/// Persist the worker id and cluster id in every tier dir (write temp + rename).
pub fn write_ids(dirs: &[PathBuf], worker_id: u32, cluster_id: &str) -> FsResult<()> {
    for d in dirs {
        write_atomic(&d.join(WORKER_ID_FILE), worker_id.to_string().as_bytes())?;
        write_atomic(&d.join(CLUSTER_ID_FILE), cluster_id.as_bytes())?;
    }
    Ok(())
}

fn write_atomic(path: &Path, bytes: &[u8]) -> FsResult<()> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, bytes).map_err(|e| FsError::io_ctx(tmp.display(), e))?;
    fs::rename(&tmp, path).map_err(|e| FsError::io_ctx(path.display(), e))
}

/// Remove a file, treating "already gone" as success.
pub fn remove_quiet(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecar_round_trip_and_rejects_wrong_count() {
        let s = Sidecar {
            chunk_size: 4,
            len: 9,
            crcs: vec![1, 2, 3],
        };
        assert_eq!(Sidecar::decode(&s.encode()), Some(s.clone()));
        let mut bad = s.encode();
        bad.truncate(bad.len() - 4);
        assert_eq!(Sidecar::decode(&bad), None);
        assert_eq!(Sidecar::decode(b"junkjunkjunkjunk"), None);
    }

    #[test]
    fn paths_are_sharded() {
        let p = block_file(Path::new("/t"), 0x1ff);
        assert_eq!(p, PathBuf::from("/t/blocks/ff/511"));
        assert_eq!(sidecar_of(&p), PathBuf::from("/t/blocks/ff/511.crc"));
        // first blocks of files (index 0) spread by their inode
        let first = |inode: u64| shard_of(inode << BLOCK_INDEX_BITS);
        let shards: std::collections::HashSet<u8> = (1..=256).map(first).collect();
        assert_eq!(shards.len(), 256);
        // and a file's blocks by their index
        let (a, b) = ((7 << BLOCK_INDEX_BITS) | 1, (7 << BLOCK_INDEX_BITS) | 2);
        assert_eq!(shard_name(a), "06");
        assert_eq!(shard_name(b), "05");
    }
}
