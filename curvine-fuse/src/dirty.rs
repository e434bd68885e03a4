//! `DirtyBuf`: the whole content of a file being modified in place (random writes,
//! overwrites, truncates). Kept in memory while the mount's budget for such content
//! (`fuse.dirty_mem`) allows, spilled to an unlinked temp file otherwise; uploaded to
//! Curvine as a rewrite of everything after the first changed byte when the file is
//! flushed.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use curvine_client::CurvineFs;
use curvine_common::{FsError, FsResult};

const IO_CHUNK: usize = 1 << 20;

/// Where the dirty buffers of one mount live: memory, up to `mem_budget` bytes for all
/// of them together, then unlinked temp files in `dir`.
#[derive(Debug)]
pub struct Spill {
    dir: PathBuf,
    mem_budget: u64,
    mem_used: AtomicU64,
}

impl Spill {
    pub fn new(dir: PathBuf, mem_budget: u64) -> Arc<Spill> {
        Arc::new(Spill {
            dir,
            mem_budget,
            mem_used: AtomicU64::new(0),
        })
    }

    /// Take `n` bytes of the budget; false (and nothing taken) if they are not left.
    fn reserve(&self, n: u64) -> bool {
        self.mem_used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&u| u <= self.mem_budget)
            })
            .is_ok()
    }

    fn release(&self, n: u64) {
        self.mem_used.fetch_sub(n, Ordering::AcqRel);
    }

    /// Bytes of the budget in use.
    #[cfg(test)]
    fn mem_used(&self) -> u64 {
        self.mem_used.load(Ordering::Acquire)
    }
}

enum Store {
    /// The content, and the bytes of the budget it holds (its length or more).
    Mem(Vec<u8>, u64),
    File(File),
}

pub struct DirtyBuf {
    store: Store,
    len: u64,
    /// Bytes `[0, clean_prefix)` are unchanged from Curvine's copy.
    clean_prefix: u64,
    /// Curvine's length when the content was loaded.
    base_len: u64,
    spill: Arc<Spill>,
}

impl Drop for DirtyBuf {
    fn drop(&mut self) {
        if let Store::Mem(_, held) = self.store {
            self.spill.release(held);
        }
    }
}

impl DirtyBuf {
    /// An empty buffer for a file Curvine holds with `base_len` bytes that will be
    /// replaced entirely.
    pub fn empty(spill: Arc<Spill>, base_len: u64) -> DirtyBuf {
        DirtyBuf {
            store: Store::Mem(Vec::new(), 0),
            len: 0,
            clean_prefix: 0,
            base_len,
            spill,
        }
    }

    /// Load the whole of `path` (`len` bytes) from Curvine.
    pub async fn load(fs: &CurvineFs, path: &str, spill: Arc<Spill>) -> FsResult<DirtyBuf> {
        let mut r = fs.open(path).await?;
        let len = r.len();
        let mut d = DirtyBuf::empty(spill, len);
        // the whole file is coming: claim its room (or go to a file) at once
        d.make_room(len)?;
        let mut buf = vec![0u8; IO_CHUNK];
        let mut off = 0u64;
        while off < len {
            let want = ((len - off) as usize).min(IO_CHUNK);
            r.read_exact_at(off, &mut buf[..want]).await?;
            d.put(off, &buf[..want])?;
            off += want as u64;
        }
        d.clean_prefix = len;
        Ok(d)
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// Write `data` at `off`, filling any gap with zeros.
    pub fn write_at(&mut self, off: u64, data: &[u8]) -> FsResult<()> {
        self.clean_prefix = self.clean_prefix.min(off).min(self.len);
        self.put(off, data)
    }

    /// Make sure the store can hold `len` bytes: take more of the memory budget, or
    /// move to a temp file when the budget has no more.
    fn make_room(&mut self, len: u64) -> FsResult<()> {
        let Store::Mem(v, held) = &mut self.store else {
            return Ok(());
        };
        if len <= *held {
            return Ok(());
        }
        // grow by at least half again, so a file written front to back reserves
        // O(log n) times
        let want = len.max(held.saturating_add(*held / 2));
        for ask in [want, len] {
            if self.spill.reserve(ask - *held) {
                *held = ask;
                // keep the allocation what the budget counts
                v.reserve_exact(ask as usize - v.len());
                return Ok(());
            }
        }
        self.spill_to_file()
    }

    fn put(&mut self, off: u64, data: &[u8]) -> FsResult<()> {
        let end = off + data.len() as u64;
        self.make_room(end)?;
        match &mut self.store {
            Store::Mem(v, _) => {
                let (off, end) = (off as usize, end as usize);
                if v.len() < end {
                    v.resize(end, 0);
                }
                v[off..end].copy_from_slice(data);
            }
            Store::File(f) => {
                f.write_all_at(data, off)
                    .map_err(|e| FsError::io_ctx("write fuse spill file", e))?;
            }
        }
        self.len = self.len.max(end);
        Ok(())
    }

    /// Cut or extend (with zeros) to `len`.
    pub fn set_len(&mut self, len: u64) -> FsResult<()> {
        self.clean_prefix = self.clean_prefix.min(len);
        self.make_room(len)?;
        match &mut self.store {
            Store::Mem(v, _) => v.resize(len as usize, 0),
            Store::File(f) => f
                .set_len(len)
                .map_err(|e| FsError::io_ctx("resize fuse spill file", e))?,
        }
        self.len = len;
        Ok(())
    }

    /// Up to `size` bytes at `off` (fewer at the end of the content).
    pub fn read_at(&self, off: u64, size: usize) -> FsResult<Vec<u8>> {
        if off >= self.len {
            return Ok(Vec::new());
        }
        let n = (size as u64).min(self.len - off) as usize;
        match &self.store {
            Store::Mem(v, _) => Ok(v[off as usize..off as usize + n].to_vec()),
            Store::File(f) => {
                let mut out = vec![0u8; n];
                f.read_exact_at(&mut out, off)
                    .map_err(|e| FsError::io_ctx("read fuse spill file", e))?;
                Ok(out)
            }
        }
    }

    fn spill_to_file(&mut self) -> FsResult<()> {
        let Store::Mem(v, held) = &self.store else {
            return Ok(());
        };
        let f = tempfile::tempfile_in(&self.spill.dir)
            .map_err(|e| FsError::io_ctx("create fuse spill file", e))?;
        f.write_all_at(v, 0)
            .map_err(|e| FsError::io_ctx("write fuse spill file", e))?;
        f.set_len(self.len)
            .map_err(|e| FsError::io_ctx("resize fuse spill file", e))?;
        self.spill.release(*held);
        self.store = Store::File(f);
        Ok(())
    }

    /// Make Curvine's copy of `path` equal to this content: cut it at the first changed
    /// byte and append the rest. Curvine keeps the inode (id, owner, mode, xattrs, links).
    pub async fn upload(&self, fs: &CurvineFs, path: &str) -> FsResult<()> {
        let keep = self.clean_prefix.min(self.base_len);
        if keep == self.base_len && self.len == self.base_len {
            return Ok(());
        }
        if keep < self.base_len {
            fs.truncate(path, keep).await?;
        }
        if self.len > keep {
            let mut w = fs.append(path).await?;
            let mut off = keep;
            while off < self.len {
                let chunk = self.read_at(off, IO_CHUNK)?;
                w.write(&chunk).await?;
                off += chunk.len() as u64;
            }
            w.close().await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spill(budget: u64) -> Arc<Spill> {
        Spill::new(std::env::temp_dir(), budget)
    }

    #[test]
    fn writes_fill_gaps_and_track_clean_prefix() {
        let mut d = DirtyBuf::empty(spill(1 << 20), 0);
        d.write_at(4, b"xy").unwrap();
        assert_eq!(d.len(), 6);
        assert_eq!(d.read_at(0, 100).unwrap(), b"\0\0\0\0xy");
        assert_eq!(d.clean_prefix, 0);
        d.set_len(3).unwrap();
        assert_eq!(d.read_at(0, 100).unwrap(), b"\0\0\0");
        assert_eq!(d.read_at(3, 10).unwrap(), b"");
    }

    #[test]
    fn spill_keeps_content() {
        const BUDGET: u64 = 1 << 20;
        let sp = spill(BUDGET);
        let mut d = DirtyBuf::empty(sp.clone(), 0);
        d.write_at(0, b"head").unwrap();
        assert!(matches!(d.store, Store::Mem(..)));
        d.write_at(BUDGET + 10, b"tail").unwrap();
        assert!(matches!(d.store, Store::File(_)));
        assert_eq!(sp.mem_used(), 0, "a spilled buffer gives its memory back");
        assert_eq!(d.len(), BUDGET + 14);
        assert_eq!(d.read_at(0, 4).unwrap(), b"head");
        assert_eq!(d.read_at(BUDGET + 8, 10).unwrap(), b"\0\0tail");
        d.set_len(2).unwrap();
        assert_eq!(d.read_at(0, 10).unwrap(), b"he");
    }

    #[test]
    fn buffers_share_the_budget_and_return_it_when_dropped() {
        let sp = spill(1000);
        let mut a = DirtyBuf::empty(sp.clone(), 0);
        a.write_at(0, &[1; 600]).unwrap();
        let mut b = DirtyBuf::empty(sp.clone(), 0);
        b.write_at(0, &[2; 300]).unwrap();
        assert!(matches!(b.store, Store::Mem(..)));
        assert!(
            sp.mem_used() >= 900 && sp.mem_used() <= 1000,
            "{}",
            sp.mem_used()
        );
        // 600 more do not fit next to a's 600: b moves to a file, a stays
        b.write_at(300, &[3; 600]).unwrap();
        assert!(matches!(b.store, Store::File(_)));
        assert!(matches!(a.store, Store::Mem(..)));
        assert_eq!(b.read_at(0, 900).unwrap()[299..301], [2, 3]);
        drop(a);
        assert_eq!(sp.mem_used(), 0);
        let mut c = DirtyBuf::empty(sp.clone(), 0);
        c.write_at(0, &[4; 1000]).unwrap();
        assert!(matches!(c.store, Store::Mem(..)));
    }
}
