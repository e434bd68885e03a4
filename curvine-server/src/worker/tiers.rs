//! Tier directories: preparing them at start, their capacity, and per-tier accounting.

use std::fs;
use std::path::{Path, PathBuf};

use curvine_common::conf::TierDir;
use curvine_common::proto::{StorageTier, TierReport};
use curvine_common::{FsError, FsResult};

use super::layout::{remove_quiet, BLOCKS_DIR, SPARE_DIR, STAGING_DIR};

/// One tier directory and its space accounting (bytes).
#[derive(Debug, Clone)]
pub struct Tier {
    pub tier: StorageTier,
    pub dir: std::path::PathBuf,
    pub capacity: u64,
    /// Bytes of committed blocks.
    pub committed: u64,
    /// Bytes reserved by writes and moves in progress.
    pub reserved: u64,
    pub blocks: u64,
    /// Whether files of deleted blocks are kept here to be written over (tmpfs only).
    pub recycles: bool,
    /// Files of deleted blocks kept for new blocks to write over, with their sizes. On
    /// tmpfs, writing over pages that exist costs a copy; writing a new file also costs
    /// allocating every page, and in a VM that hands freed memory back to its host, a
    /// host fault per page as well. They are not counted
    /// as used, and give way to any reservation that needs their room.
    pub spares: Vec<(PathBuf, u64)>,
}

/// At most this many spare files per tier.
pub const MAX_SPARES: usize = 256;

impl Tier {
    pub fn new(tier: StorageTier, dir: PathBuf, capacity: u64) -> Tier {
        let recycles = is_tmpfs(&dir);
        Tier {
            tier,
            dir,
            capacity,
            committed: 0,
            reserved: 0,
            blocks: 0,
            recycles,
            spares: Vec::new(),
        }
    }

    pub fn used(&self) -> u64 {
        self.committed + self.reserved
    }

    /// Bytes held by spare files.
    pub fn spare_bytes(&self) -> u64 {
        self.spares.iter().map(|(_, len)| len).sum()
    }

    /// Whether a deleted block's file of `len` bytes may be kept as a spare: the tier
    /// recycles, and with it the tier stays under `limit` bytes in all.
    pub fn has_room_for_spare(&self, len: u64, limit: u64) -> bool {
        self.recycles
            && self.spares.len() < MAX_SPARES
            && self.used() + self.spare_bytes() + len <= limit
    }

    pub fn take_spare(&mut self) -> Option<PathBuf> {
        self.spares.pop().map(|(p, _)| p)
    }

    /// Spares to remove so that the tier's blocks, reservations and the spares that
    /// stay fit its capacity (the caller removes the files).
    pub fn spares_in_the_way(&mut self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        if self.spares.is_empty() {
            return out;
        }
        let limit = self.usable_capacity();
        while !self.spares.is_empty() && self.used() + self.spare_bytes() > limit {
            out.extend(self.take_spare());
        }
        out
    }

    /// Bytes the tier can hold in all: its capacity, but no more than its committed
    /// blocks plus what its filesystem still has. Other data on the same disk can leave
    /// the filesystem short of the tier's share, and a write it cannot back would fail
    /// halfway with ENOSPC.
    pub fn usable_capacity(&self) -> u64 {
        match fs_free_bytes(&self.dir) {
            Ok(free) => self
                .capacity
                .min(self.committed + self.spare_bytes().saturating_add(free)),
            Err(_) => self.capacity,
        }
    }

    pub fn fits(&self, n: u64) -> bool {
        self.used().saturating_add(n) <= self.usable_capacity()
    }

    pub fn report(&self) -> TierReport {
        TierReport {
            tier: self.tier as i32,
            capacity: self.usable_capacity(),
            used: self.used(),
            blocks: self.blocks,
            dir: self.dir.display().to_string(),
            evictable: 0, // filled in by the block store, which knows the droppable set
        }
    }
}

/// Create `staging/`, `spare/` and `blocks/` under `td`, check the directory is writable
/// and clear aborted writes from `staging/` and kept files from `spare/`. Errors name
/// the `worker.data_dir` entry.
pub fn prepare_dir(td: &TierDir) -> FsResult<()> {
    let entry = format!("[{}]{}", td.tier.name(), td.path.display());
    let bad = |what: &str, e: std::io::Error| {
        FsError::config(format!("worker.data_dir entry {entry}: {what}: {e}"))
    };
    let staging = td.path.join(STAGING_DIR);
    fs::create_dir_all(&staging).map_err(|e| bad("create staging dir", e))?;
    fs::create_dir_all(td.path.join(BLOCKS_DIR)).map_err(|e| bad("create blocks dir", e))?;
    let probe = td.path.join(".write-probe");
    fs::write(&probe, b"ok").map_err(|e| bad("directory is not writable", e))?;
    remove_quiet(&probe).map_err(|e| bad("remove write probe", e))?;
    let spare = td.path.join(SPARE_DIR);
    fs::create_dir_all(&spare).map_err(|e| bad("create spare dir", e))?;
    for (dir, what) in [(&staging, "staging"), (&spare, "spare")] {
        let entries = fs::read_dir(dir).map_err(|e| bad(&format!("list {what} dir"), e))?;
        for ent in entries.flatten() {
            let p = ent.path();
            let r = if p.is_dir() {
                fs::remove_dir_all(&p)
            } else {
                remove_quiet(&p)
            };
            r.map_err(|e| bad(&format!("clear {what} dir"), e))?;
        }
    }
    Ok(())
}

/// Whether `path` is on tmpfs.
#[allow(unsafe_code)]
pub fn is_tmpfs(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: `c` is a valid NUL-terminated string and `st` points to writable memory of
    // the right type; statfs only writes into it.
    let rc = unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) };
    // SAFETY: statfs returned 0, so it filled the struct.
    rc == 0 && unsafe { st.assume_init() }.f_type == libc::TMPFS_MAGIC
}

/// Free bytes available to unprivileged users on the file system holding `path`.
// the statvfs field types differ between platforms, hence the casts
#[allow(unsafe_code, clippy::unnecessary_cast)]
pub fn fs_free_bytes(path: &Path) -> FsResult<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| FsError::config(format!("{}: path contains NUL", path.display())))?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c` is a valid NUL-terminated string and `st` points to writable memory of
    // the right type; statvfs only writes into it.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(FsError::io_ctx(
            format!("statvfs {}", path.display()),
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: statvfs returned 0, so it filled the struct.
    let st = unsafe { st.assume_init() };
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepare_clears_staging_and_reports_bad_entries() {
        let tmp = tempfile::tempdir().unwrap();
        let td = TierDir {
            tier: StorageTier::Mem,
            capacity: Some(1 << 20),
            path: tmp.path().join("t"),
        };
        prepare_dir(&td).unwrap();
        let leftover = td.path.join(STAGING_DIR).join("5.1");
        fs::write(&leftover, b"partial").unwrap();
        prepare_dir(&td).unwrap();
        assert!(!leftover.exists());
        assert!(fs_free_bytes(&td.path).unwrap() > 0);

        // a regular file where the directory should be
        let file = tmp.path().join("file");
        fs::write(&file, b"x").unwrap();
        let td = TierDir {
            tier: StorageTier::Ssd,
            capacity: None,
            path: file.clone(),
        };
        let e = prepare_dir(&td).unwrap_err().to_string();
        assert!(e.contains(&file.display().to_string()), "{e}");
    }
}
