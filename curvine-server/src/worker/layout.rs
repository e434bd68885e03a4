//! On-disk layout of a tier directory.
//!
//! ```text
//! <tier dir>/worker.id              decimal worker id, written after registration
//! <tier dir>/cluster.id             cluster id the master handed out
//! <tier dir>/staging/<id>.<seq>     a block being written (remote or short-circuit);
//!                                   everything here is deleted at start
//! <tier dir>/staging/<id>.<seq>.crc its sidecar while the commit is in progress
//! <tier dir>/blocks/<xx>/<id>       a committed block, xx = two lowercase hex digits
//!                                   of block_id % 256, <id> = decimal block id
//! <tier dir>/blocks/<xx>/<id>.crc   its CRC sidecar
//! <tier dir>/spare/<seq>            (tmpfs tiers) the file of a deleted block, kept for
//!                                   a new block to write over; deleted at start
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
use curvine_common::{FsError, FsResult};

pub const STAGING_DIR: &str = "staging";
pub const BLOCKS_DIR: &str = "blocks";
/// Files of deleted blocks kept to be written over (`Tier::spares`); cleared at start.
pub const SPARE_DIR: &str = "spare";
pub const WORKER_ID_FILE: &str = "worker.id";
pub const CLUSTER_ID_FILE: &str = "cluster.id";
pub const SIDECAR_EXT: &str = "crc";
const SIDECAR_MAGIC: &[u8; 4] = b"CVC1";
const SIDECAR_HEADER: usize = 16;

/// Shard directory name of a block: `block_id % 256` as two hex digits.
pub fn shard_name(block_id: u64) -> String {
    format!("{:02x}", block_id % 256)
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
    }
}
