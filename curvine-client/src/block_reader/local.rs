//! A block file on this host read by the client itself (short-circuit): whole chunks
//! `pread` straight into the caller's buffer and verified there, partial chunks through
//! a one-chunk cache, each chunk verified once; SSD and HDD files through an O_DIRECT
//! window (`direct`), tmpfs files also as slices of a mapping (`mapped`).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;
use curvine_common::block_read::{chunk_size_of, mismatch};
use curvine_common::checksum::{chunk_count, verify_chunks};
use curvine_common::proto::{DataHeader, StorageTier};
use curvine_common::{BlockId, FsError, FsResult};
use tracing::debug;

use super::direct::DirectWindow;
use super::mapped::{BlockMap, MapSlice, MapState};
use super::BlockReadOpts;

/// A block file on this host, read with pread.
pub(crate) struct LocalBlock {
    pub(super) block_id: BlockId,
    pub(super) worker: String,
    pub(super) file: Arc<File>,
    pub(super) block_len: u64,
    pub(super) chunk_size: u64,
    pub(super) crcs: Vec<u32>,
    pub(super) verify: bool,
    /// The last chunk read for a partial-chunk access (verified).
    pub(super) cache: Option<(u64, Vec<u8>)>,
    /// One bit per chunk already verified through this source. Block files are
    /// immutable once committed, so a later partial read of such a chunk (4 KiB random
    /// reads through FUSE) preads just the bytes asked for instead of loading and
    /// checksumming the whole chunk again. The worker's scrubber covers later decay.
    pub(super) verified: Vec<u64>,
    /// The block file mapped into memory, once a caller asked for bytes without a copy.
    pub(super) map: MapState,
    /// Set when `file` was opened with O_DIRECT (an SSD or HDD block): reads go through it.
    pub(super) direct: Option<DirectWindow>,
}

impl LocalBlock {
    /// The block file a worker on this host named in its reply `ok` to a short-circuit
    /// READ_OPEN, opened for reading.
    pub(super) fn open(
        block_id: BlockId,
        addr: String,
        ok: DataHeader,
        opts: &BlockReadOpts,
    ) -> FsResult<LocalBlock> {
        let chunk_size = chunk_size_of(&ok);
        let disk = ok.tier == StorageTier::Ssd as i32 || ok.tier == StorageTier::Hdd as i32;
        let direct = (disk && opts.direct_io)
            .then(|| DirectWindow::open(&ok.path))
            .flatten();
        let (file, direct) = match direct {
            Some((file, window)) => (file, Some(window)),
            None => {
                let file = File::open(&ok.path)
                    .map_err(|e| FsError::io_ctx(format!("open block file {}", ok.path), e))?;
                (Arc::new(file), None)
            }
        };
        if opts.verify_checksum && ok.crcs.len() != chunk_count(ok.block_len, chunk_size as u32) {
            return Err(FsError::protocol(format!(
                "worker {addr}: block {block_id} has {} CRCs for {} bytes",
                ok.crcs.len(),
                ok.block_len
            )));
        }
        debug!(block = %block_id, worker = %addr, direct = direct.is_some(), "short-circuit read");
        Ok(LocalBlock {
            block_id,
            worker: addr,
            file,
            block_len: ok.block_len,
            chunk_size: chunk_size as u64,
            verified: vec![0; chunk_count(ok.block_len, chunk_size as u32).div_ceil(64)],
            crcs: ok.crcs,
            verify: opts.verify_checksum,
            cache: None,
            map: MapState::Unknown,
            direct,
        })
    }

    fn pread(&mut self, buf: &mut [u8], offset: u64) -> FsResult<()> {
        let res = match &mut self.direct {
            Some(d) => d.read_exact_at(buf, offset, self.block_len),
            None => self.file.read_exact_at(buf, offset),
        };
        res.map_err(|e| {
            FsError::io_ctx(
                format!(
                    "read block {} at {offset} (worker {})",
                    self.block_id, self.worker
                ),
                e,
            )
        })
    }

    /// Up to `n` bytes at `offset` as a slice of the block file's mapping, each chunk
    /// they touch verified against its CRC on first use. None if the file cannot be
    /// mapped (the caller reads with `read_at`).
    pub(super) fn mapped(&mut self, offset: u64, n: usize) -> FsResult<Option<Bytes>> {
        if offset >= self.block_len || n == 0 {
            return Ok(None);
        }
        if matches!(self.map, MapState::Unknown) {
            self.map = match BlockMap::of_tmpfs(&self.file, self.block_len) {
                Some(m) => MapState::Mapped(Arc::new(m)),
                None => MapState::No,
            };
        }
        let MapState::Mapped(map) = &self.map else {
            return Ok(None);
        };
        let map = map.clone();
        let end = (offset + n as u64).min(self.block_len);
        if self.verify {
            let cs = self.chunk_size;
            for ci in offset / cs..end.div_ceil(cs) {
                if self.is_verified(ci) {
                    continue;
                }
                let (start, stop) = ((ci * cs) as usize, self.chunk_end(ci) as usize);
                self.verify_chunk(ci, &map.bytes()[start..stop])?;
            }
        }
        Ok(Some(Bytes::from_owner(MapSlice {
            map,
            off: offset as usize,
            len: (end - offset) as usize,
        })))
    }

    fn chunk_end(&self, index: u64) -> u64 {
        ((index + 1) * self.chunk_size).min(self.block_len)
    }

    pub(super) fn read_at(&mut self, offset: u64, dst: &mut [u8]) -> FsResult<usize> {
        if offset >= self.block_len {
            return Ok(0);
        }
        let n = (dst.len() as u64).min(self.block_len - offset) as usize;
        if !self.verify {
            self.pread(&mut dst[..n], offset)?;
            return Ok(n);
        }
        let end = offset + n as u64;
        let cs = self.chunk_size;
        let mut cur = offset;
        while cur < end {
            let ci = cur / cs;
            let cstart = ci * cs;
            let d = (cur - offset) as usize;
            if cur == cstart && end >= self.chunk_end(ci) {
                // whole chunks straight into the caller's buffer, verified in place
                let whole_end = if end == self.block_len {
                    end
                } else {
                    end / cs * cs
                };
                let len = (whole_end - cur) as usize;
                let out = &mut dst[d..d + len];
                self.pread(out, cur)?;
                let crcs = self.crcs.get(ci as usize..).unwrap_or(&[]);
                verify_chunks(out, cs as usize, crcs)
                    .map_err(|i| mismatch(self.block_id, &self.worker, cstart + i as u64 * cs))?;
                for c in ci..whole_end.div_ceil(cs) {
                    self.mark_verified(c);
                }
                cur = whole_end;
            } else if self.is_verified(ci) && !matches!(&self.cache, Some((i, _)) if *i == ci) {
                let m = (self.chunk_end(ci).min(end) - cur) as usize;
                self.pread(&mut dst[d..d + m], cur)?;
                cur += m as u64;
            } else {
                let chunk = self.load_chunk(ci)?;
                let s = (cur - cstart) as usize;
                let m = (chunk.len() - s).min((end - cur) as usize);
                dst[d..d + m].copy_from_slice(&chunk[s..s + m]);
                cur += m as u64;
            }
        }
        Ok(n)
    }

    pub(super) fn is_verified(&self, chunk: u64) -> bool {
        self.verified
            .get((chunk / 64) as usize)
            .is_some_and(|w| w & (1 << (chunk % 64)) != 0)
    }

    fn mark_verified(&mut self, chunk: u64) {
        if let Some(w) = self.verified.get_mut((chunk / 64) as usize) {
            *w |= 1 << (chunk % 64);
        }
    }

    /// Check chunk `index` (all of its bytes) against its CRC and mark it verified.
    fn verify_chunk(&mut self, index: u64, data: &[u8]) -> FsResult<()> {
        if self.crcs.get(index as usize).copied() != Some(curvine_common::checksum::crc32c(data)) {
            return Err(mismatch(
                self.block_id,
                &self.worker,
                index * self.chunk_size,
            ));
        }
        self.mark_verified(index);
        Ok(())
    }

    fn load_chunk(&mut self, index: u64) -> FsResult<&[u8]> {
        let hit = matches!(&self.cache, Some((i, _)) if *i == index);
        if !hit {
            let start = index * self.chunk_size;
            let len = (self.chunk_end(index) - start) as usize;
            let mut buf = match self.cache.take() {
                Some((_, b)) => b,
                None => Vec::with_capacity(self.chunk_size as usize),
            };
            buf.resize(len, 0);
            self.pread(&mut buf, start)?;
            self.verify_chunk(index, &buf)?;
            self.cache = Some((index, buf));
        }
        Ok(self
            .cache
            .as_ref()
            .map(|(_, b)| b.as_slice())
            .unwrap_or(&[]))
    }
}
