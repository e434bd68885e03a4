//! `DirtyBuf`: the whole content of a file being modified in place (random writes,
//! overwrites, truncates). Kept in memory while small, spilled to an unlinked temp file
//! when it grows; uploaded to Curvine as a rewrite of everything after the first changed
//! byte when the file is flushed.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use curvine_client::CurvineFs;
use curvine_common::{FsError, FsResult};

/// Content above this size moves from memory to a temp file.
pub const SPILL_BYTES: u64 = 64 << 20;
const IO_CHUNK: usize = 1 << 20;

enum Store {
    Mem(Vec<u8>),
    File(File),
}

pub struct DirtyBuf {
    store: Store,
    len: u64,
    /// Bytes `[0, clean_prefix)` are unchanged from Curvine's copy.
    clean_prefix: u64,
    /// Curvine's length when the content was loaded.
    base_len: u64,
    spill_dir: PathBuf,
}

impl DirtyBuf {
    /// An empty buffer for a file Curvine holds with `base_len` bytes that will be
    /// replaced entirely.
    pub fn empty(spill_dir: PathBuf, base_len: u64) -> DirtyBuf {
        DirtyBuf {
            store: Store::Mem(Vec::new()),
            len: 0,
            clean_prefix: 0,
            base_len,
            spill_dir,
        }
    }

    /// Load the whole of `path` (`len` bytes) from Curvine.
    pub async fn load(fs: &CurvineFs, path: &str, spill_dir: PathBuf) -> FsResult<DirtyBuf> {
        let mut r = fs.open(path).await?;
        let len = r.len();
        let mut d = DirtyBuf::empty(spill_dir, len);
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

    fn put(&mut self, off: u64, data: &[u8]) -> FsResult<()> {
        let end = off + data.len() as u64;
        if end > SPILL_BYTES {
            self.spill()?;
        }
        match &mut self.store {
            Store::Mem(v) => {
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
        if len > SPILL_BYTES {
            self.spill()?;
        }
        match &mut self.store {
            Store::Mem(v) => v.resize(len as usize, 0),
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
            Store::Mem(v) => Ok(v[off as usize..off as usize + n].to_vec()),
            Store::File(f) => {
                let mut out = vec![0u8; n];
                f.read_exact_at(&mut out, off)
                    .map_err(|e| FsError::io_ctx("read fuse spill file", e))?;
                Ok(out)
            }
        }
    }

    fn spill(&mut self) -> FsResult<()> {
        let Store::Mem(v) = &self.store else {
            return Ok(());
        };
        let f = tempfile::tempfile_in(&self.spill_dir)
            .map_err(|e| FsError::io_ctx("create fuse spill file", e))?;
        f.write_all_at(v, 0)
            .map_err(|e| FsError::io_ctx("write fuse spill file", e))?;
        f.set_len(self.len)
            .map_err(|e| FsError::io_ctx("resize fuse spill file", e))?;
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

    fn dir() -> PathBuf {
        std::env::temp_dir()
    }

    #[test]
    fn writes_fill_gaps_and_track_clean_prefix() {
        let mut d = DirtyBuf::empty(dir(), 0);
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
        let mut d = DirtyBuf::empty(dir(), 0);
        d.write_at(0, b"head").unwrap();
        d.write_at(SPILL_BYTES + 10, b"tail").unwrap();
        assert!(matches!(d.store, Store::File(_)));
        assert_eq!(d.len(), SPILL_BYTES + 14);
        assert_eq!(d.read_at(0, 4).unwrap(), b"head");
        assert_eq!(d.read_at(SPILL_BYTES + 8, 10).unwrap(), b"\0\0tail");
        d.set_len(2).unwrap();
        assert_eq!(d.read_at(0, 10).unwrap(), b"he");
    }
}
