//! Read-only mappings of block files on tmpfs, so reads can hand out slices of a
//! block's pages as `Bytes` without a copy (see `BlockMap`).

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::ptr::NonNull;
use std::sync::Arc;

use tracing::debug;

/// Whether a block file was mapped.
pub(super) enum MapState {
    /// Not tried yet.
    Unknown,
    /// Not on tmpfs, or the kernel refused: read with pread.
    No,
    Mapped(Arc<BlockMap>),
}

/// A read-only shared mapping of a whole block file on tmpfs. Slices of it go out as
/// `Bytes` that keep it mapped, so the FUSE daemon replies straight from the block's
/// pages instead of copying them into a buffer first.
///
/// Touching a mapped page past the file's end kills the process (SIGBUS), so this
/// relies on committed block files never getting shorter: the worker writes a block in
/// a staging file and renames it into place, a truncate only shortens the block's
/// record on the master, and a deletion unlinks the file (its pages live on while
/// mapped). Only tmpfs files are mapped: their pages are in memory already, where a
/// disk file's would be read in by page faults.
pub(super) struct BlockMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is read-only and lives until drop; `&[u8]` views of it are Send
// and Sync like any shared bytes.
#[allow(unsafe_code)]
unsafe impl Send for BlockMap {}
#[allow(unsafe_code)]
unsafe impl Sync for BlockMap {}

impl BlockMap {
    /// Map the first `len` bytes of `file` if it is on tmpfs and has them all.
    #[allow(unsafe_code)]
    pub(super) fn of_tmpfs(file: &File, len: u64) -> Option<BlockMap> {
        let size = usize::try_from(len).ok().filter(|&n| n > 0)?;
        // SAFETY: an all-zero statfs is valid, and fstatfs fills it from an open fd.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0
            || st.f_type != libc::TMPFS_MAGIC
        {
            return None;
        }
        if file.metadata().ok()?.len() < len {
            return None;
        }
        // SAFETY: a fresh read-only mapping of an open file; nothing else aliases it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            debug!(error = %std::io::Error::last_os_error(), "cannot map a block file");
            return None;
        }
        Some(BlockMap {
            ptr: NonNull::new(p.cast())?,
            len: size,
        })
    }

    #[allow(unsafe_code)]
    pub(super) fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes until drop (see the type's docs).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

/// Mappings at least this large are unmapped on tokio's blocking pool (see `Drop`).
pub(super) const UNMAP_ELSEWHERE: usize = 4 << 20;

impl Drop for BlockMap {
    fn drop(&mut self) {
        let unmap = Unmap {
            addr: self.ptr.as_ptr() as usize,
            len: self.len,
        };
        // Unmapping a block whose pages were read takes milliseconds here (2.5-3 ms
        // for 100 MB: tens of thousands of page-table entries). On a runtime thread
        // that stalls every task queued behind it, the FUSE daemon's request loop
        // included, so a large mapping goes to the blocking pool. If the pool drops
        // the task unrun (runtime shutting down), dropping `unmap` still unmaps.
        match tokio::runtime::Handle::try_current() {
            Ok(rt) if self.len >= UNMAP_ELSEWHERE => drop(rt.spawn_blocking(move || drop(unmap))),
            _ => drop(unmap),
        }
    }
}

/// The range of a dropped `BlockMap`, unmapped when this is dropped.
struct Unmap {
    addr: usize,
    len: usize,
}

impl Drop for Unmap {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: exactly the range mmap returned, whose `BlockMap` (and every slice
        // of it) is gone.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// `len` bytes at `off` of a mapped block, as the owner of a `Bytes`.
pub(super) struct MapSlice {
    pub(super) map: Arc<BlockMap>,
    pub(super) off: usize,
    pub(super) len: usize,
}

impl AsRef<[u8]> for MapSlice {
    fn as_ref(&self) -> &[u8] {
        &self.map.bytes()[self.off..self.off + self.len]
    }
}
