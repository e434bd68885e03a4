//! Reading one block from one replica: a short-circuit block file (pread straight into
//! the caller's buffer, CRC verified per chunk) or a remote READ_DATA stream (chunk
//! aligned frames with their CRCs, kept open as read-ahead for sequential reads).

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::ptr::NonNull;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use curvine_common::aligned::MappedBuf;
use curvine_common::checksum::{chunk_count, verify_chunks};
use curvine_common::frame::header;
use curvine_common::proto::{BlockLocation, DataOp, StorageTier, UfsRange};
use curvine_common::{FsError, FsResult};
use tracing::debug;

use crate::block_writer::DEFAULT_CHUNK_SIZE;
use crate::pool::{is_local_host, worker_addr, DataConn, WorkerPool};

/// Forward gaps up to this size are skipped by reading through the stream; larger ones
/// reopen it at the new offset.
const MAX_SKIP: u64 = 4 << 20;

#[derive(Debug, Clone)]
pub(crate) struct BlockReadOpts {
    pub token: String,
    pub short_circuit: bool,
    pub verify_checksum: bool,
    pub client_host: String,
    /// Read SSD and HDD block files with O_DIRECT (`client.direct_io`).
    pub direct_io: bool,
}

pub(crate) fn mismatch(block_id: u64, worker: &str, offset: u64) -> FsError {
    FsError::ChecksumMismatch {
        block_id,
        worker: worker.to_string(),
        message: format!("chunk at block offset {offset}"),
    }
}

/// An open replica of a block.
pub(crate) enum BlockSource {
    Local(LocalBlock),
    Remote(RemoteStream),
}

impl BlockSource {
    /// Whether this reads a block file on this host (short-circuit).
    pub(crate) fn is_local(&self) -> bool {
        matches!(self, BlockSource::Local(_))
    }

    /// Open block `block_id` on `loc` to read from `offset`, asking a remote worker to
    /// stream `len` bytes (0 = to the block's end). `need_len` is the length the master
    /// recorded; a replica shorter than that is refused. `ufs`: the block may not be
    /// on the worker yet; it fetches it from this range of the under-store (streamed,
    /// never short-circuit).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn open(
        pool: &WorkerPool,
        block_id: u64,
        need_len: u64,
        loc: &BlockLocation,
        offset: u64,
        len: u64,
        ufs: Option<&UfsRange>,
        opts: &BlockReadOpts,
    ) -> FsResult<BlockSource> {
        let a = loc.address.clone().unwrap_or_default();
        let addr = worker_addr(&a);
        let sc = opts.short_circuit && ufs.is_none() && is_local_host(&a.host, &opts.client_host);
        let mut h = header(DataOp::ReadOpen);
        h.block_id = block_id;
        h.offset = offset;
        h.len = len;
        h.short_circuit = sc;
        h.ufs = ufs.cloned();
        h.token.clone_from(&opts.token);
        let mut frame = BytesMut::new();
        let (conn, ok) = pool.open(&addr, &h, &mut frame).await?;
        if ok.op != DataOp::Ok as i32 {
            return Err(FsError::protocol(format!(
                "worker {addr}: expected OK to READ_OPEN of block {block_id}, got op {}",
                ok.op
            )));
        }
        if ok.block_len < need_len {
            return Err(FsError::BlockNotFound {
                block_id,
                worker: format!("{addr} (has {} of {need_len} bytes)", ok.block_len),
            });
        }
        let chunk_size = if ok.chunk_size == 0 {
            DEFAULT_CHUNK_SIZE
        } else {
            ok.chunk_size as usize
        };
        if !ok.path.is_empty() {
            pool.put(conn);
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
            if opts.verify_checksum && ok.crcs.len() != chunk_count(ok.block_len, chunk_size as u32)
            {
                return Err(FsError::protocol(format!(
                    "worker {addr}: block {block_id} has {} CRCs for {} bytes",
                    ok.crcs.len(),
                    ok.block_len
                )));
            }
            debug!(block = block_id, worker = %addr, direct = direct.is_some(), "short-circuit read");
            return Ok(BlockSource::Local(LocalBlock {
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
            }));
        }
        let start = offset / chunk_size as u64 * chunk_size as u64;
        Ok(BlockSource::Remote(RemoteStream {
            block_id,
            addr,
            conn: Some(conn),
            chunk_size,
            verify: opts.verify_checksum,
            frame: BytesMut::new(),
            frame_off: start,
            next_off: start,
            done: false,
        }))
    }

    /// Whether `offset` can be served without reopening.
    pub(crate) fn covers(&self, offset: u64) -> bool {
        match self {
            BlockSource::Local(l) => offset < l.block_len,
            BlockSource::Remote(r) => r.covers(offset),
        }
    }

    /// Up to `n` bytes at block offset `offset` without a copy (see `LocalBlock::mapped`);
    /// None for a remote stream or a block file that cannot be mapped.
    pub(crate) fn mapped(&mut self, offset: u64, n: usize) -> FsResult<Option<Bytes>> {
        match self {
            BlockSource::Local(l) => l.mapped(offset, n),
            BlockSource::Remote(_) => Ok(None),
        }
    }

    /// Read at block offset `offset` into `dst`; 0 means the source cannot serve it
    /// (a finished stream), not the end of the block.
    pub(crate) async fn read_at(
        &mut self,
        pool: &WorkerPool,
        offset: u64,
        dst: &mut [u8],
    ) -> FsResult<usize> {
        match self {
            BlockSource::Local(l) => l.read_at(offset, dst),
            BlockSource::Remote(r) => r.read_at(pool, offset, dst).await,
        }
    }
}

/// A block file on this host, read with pread.
pub(crate) struct LocalBlock {
    block_id: u64,
    worker: String,
    file: Arc<File>,
    block_len: u64,
    chunk_size: u64,
    crcs: Vec<u32>,
    verify: bool,
    /// The last chunk read for a partial-chunk access (verified).
    cache: Option<(u64, Vec<u8>)>,
    /// One bit per chunk already verified through this source. Block files are
    /// immutable once committed, so a later partial read of such a chunk (4 KiB random
    /// reads through FUSE) preads just the bytes asked for instead of loading and
    /// checksumming the whole chunk again. The worker's scrubber covers later decay.
    verified: Vec<u64>,
    /// The block file mapped into memory, once a caller asked for bytes without a copy.
    map: MapState,
    /// Set when `file` was opened with O_DIRECT (an SSD or HDD block): reads go through it.
    direct: Option<DirectWindow>,
}

/// Alignment of O_DIRECT reads: offset, length and buffer.
const DIRECT_ALIGN: u64 = crate::block_writer::DIRECT_ALIGN as u64;
/// Sizes of the reads a `DirectWindow` makes: the first, and the most it grows to.
/// On this project's virtio disk, 2 readers of 1 MiB O_DIRECT reads were fastest: 1.70,
/// 2.08, 2.89, 2.36 and 1.62 GiB/s at 256 KiB, 512 KiB, 1, 2 and 4 MiB (fio).
const DIRECT_MIN: usize = 64 << 10;
const DIRECT_MAX: usize = 1 << 20;

/// A block file on disk read with O_DIRECT through a window of its bytes.
///
/// Through the page cache, every byte read from an SSD block was copied into a new page
/// cache page first, a second cached copy of data Curvine already caches, which the
/// kernel must then reclaim; on this project's VMs filling new pages is also where most
/// of the time went. O_DIRECT reads go from the disk into
/// the window, which is reused. The window doubles while reads follow each other, up to
/// `DIRECT_MAX`, and starts again at `DIRECT_MIN` after a jump, so that random reads
/// read little more than they ask for.
///
/// Once a sequential reader has reached the largest window, the next `READ_AHEAD`
/// windows are read ahead on tokio's blocking pool while the caller copies and verifies
/// this one, so the disk always has reads to work on instead of idling through each
/// window's CPU work.
struct DirectWindow {
    file: Arc<File>,
    buf: MappedBuf,
    /// Block offset of `buf[0]`; `buf.len()` bytes are valid.
    off: u64,
    /// Size of the next read at the end of the last one.
    grow: usize,
    /// Where the last read that filled the window ended.
    next: u64,
    /// The windows after this one, being read in the background, in block order.
    ahead: VecDeque<ReadAhead>,
    /// Used windows' buffers, for the next read-aheads.
    spare: Vec<MappedBuf>,
    /// Windows that came from a read-ahead, and the most read ahead at once.
    #[cfg(test)]
    ahead_used: usize,
    #[cfg(test)]
    ahead_most: usize,
}

/// Windows a sequential O_DIRECT reader reads ahead. Two readers on this project's
/// disk: with one window, 2.1 requests in flight and
/// 2.14-2.25 GiB/s; two, 3.9 and 2.45-2.49; four, 7.1 and 2.65-2.70. Each window is a
/// 2 MiB huge page (1 MiB used) while the reader reads on, and 1 MiB read in vain when
/// it stops.
const READ_AHEAD: usize = 4;

/// A window read on the blocking pool: `len` bytes asked for at block offset `off`.
struct ReadAhead {
    off: u64,
    len: usize,
    done: std::sync::mpsc::Receiver<(MappedBuf, std::io::Result<()>)>,
}

impl DirectWindow {
    /// `path` opened with O_DIRECT, and a window to read it through; None where the file
    /// system refuses O_DIRECT.
    fn open(path: &str) -> Option<(Arc<File>, DirectWindow)> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .ok()?;
        let file = Arc::new(file);
        let window = DirectWindow {
            file: file.clone(),
            buf: MappedBuf::default(),
            off: 0,
            grow: DIRECT_MIN,
            next: u64::MAX,
            ahead: VecDeque::new(),
            spare: Vec::new(),
            #[cfg(test)]
            ahead_used: 0,
            #[cfg(test)]
            ahead_most: 0,
        };
        Some((file, window))
    }

    /// Fill `dst` with the bytes at `offset` of the block file, `block_len` bytes long.
    fn read_exact_at(
        &mut self,
        dst: &mut [u8],
        offset: u64,
        block_len: u64,
    ) -> std::io::Result<()> {
        let mut done = 0;
        while done < dst.len() {
            let at = offset + done as u64;
            let end = self.off + self.buf.len() as u64;
            if at < self.off || at >= end {
                self.fill(at, block_len)?;
                continue;
            }
            let s = (at - self.off) as usize;
            let n = (self.buf.len() - s).min(dst.len() - done);
            dst[done..done + n].copy_from_slice(&self.buf[s..s + n]);
            done += n;
        }
        Ok(())
    }

    /// Read the window starting at the aligned offset at or before `at`.
    fn fill(&mut self, at: u64, block_len: u64) -> std::io::Result<()> {
        let start = at / DIRECT_ALIGN * DIRECT_ALIGN;
        if at >= block_len {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let sequential = start <= self.next && self.next <= at + DIRECT_ALIGN;
        self.grow = if sequential {
            (self.grow * 2).min(DIRECT_MAX)
        } else {
            DIRECT_MIN
        };
        let want = window_len(self.grow, start, block_len);
        // Reads ahead that start elsewhere (after a jump) are left to finish unused; one
        // that failed is read again below, where a lasting error is returned.
        if self.ahead.front().is_some_and(|a| a.off != start) {
            self.ahead.clear();
        }
        let ahead = self.ahead.pop_front().and_then(|a| match a.done.recv() {
            Ok((buf, Ok(()))) => Some(buf),
            Ok((_, Err(e))) => {
                debug!(error = %e, at = start, "read-ahead of a block file failed; reading again");
                None
            }
            Err(_) => None,
        });
        match ahead {
            Some(buf) => {
                self.spare.push(std::mem::replace(&mut self.buf, buf));
                #[cfg(test)]
                {
                    self.ahead_used += 1;
                }
            }
            None => {
                if self.buf.capacity() < want {
                    // the first window is small; once it grows, take the largest at once
                    let cap = if want <= DIRECT_MIN {
                        DIRECT_MIN
                    } else {
                        DIRECT_MAX
                    };
                    self.buf = MappedBuf::new(cap)?;
                }
                read_window(&self.file, &mut self.buf, start, want)?;
            }
        }
        let got = self.buf.len();
        self.off = start;
        self.next = start + got as u64;
        if start + got as u64 <= at {
            self.buf.set_len(0);
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if self.grow == DIRECT_MAX {
            self.read_ahead(block_len);
        }
        Ok(())
    }

    /// Start reading the windows after `next` on tokio's blocking pool, up to
    /// `READ_AHEAD` of them (nothing outside a runtime: each `fill` reads in place then).
    fn read_ahead(&mut self, block_len: u64) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut off = self
            .ahead
            .back()
            .map_or(self.next, |a| a.off + a.len as u64);
        while self.ahead.len() < READ_AHEAD && off < block_len {
            let want = window_len(DIRECT_MAX, off, block_len);
            let spare = self.spare.pop().filter(|b| b.capacity() >= want);
            let mut buf = match spare.map_or_else(|| MappedBuf::new(DIRECT_MAX), Ok) {
                Ok(b) => b,
                Err(e) => {
                    // no more read-ahead then: `fill` reads in place and reports errors
                    debug!(error = %e, "no buffer for a read-ahead");
                    return;
                }
            };
            let file = self.file.clone();
            let (tx, done) = std::sync::mpsc::sync_channel(1);
            rt.spawn_blocking(move || {
                let res = read_window(&file, &mut buf, off, want);
                // the reader may have moved on and dropped the receiver
                let _ = tx.send((buf, res));
            });
            self.ahead.push_back(ReadAhead {
                off,
                len: want,
                done,
            });
            off += want as u64;
        }
        #[cfg(test)]
        {
            self.ahead_most = self.ahead_most.max(self.ahead.len());
        }
    }
}

/// The length of a window of `grow` bytes at aligned `start` of a `block_len`-byte file:
/// whole alignment units, the last one past the file's end if its length is unaligned.
fn window_len(grow: usize, start: u64, block_len: u64) -> usize {
    (grow as u64).min((block_len - start).div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN) as usize
}

/// Read `want` bytes at `start` of `file` into `buf`, fewer only at the end of the file;
/// `buf`'s length is then what was read.
fn read_window(file: &File, buf: &mut MappedBuf, start: u64, want: usize) -> std::io::Result<()> {
    buf.set_len(want);
    let mut got = 0;
    while got < want {
        // short only at the end of the file, whose length need not be aligned
        match file.read_at(&mut buf[got..want], start + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => {
                buf.set_len(0);
                return Err(e);
            }
        }
    }
    buf.set_len(got);
    Ok(())
}

enum MapState {
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
struct BlockMap {
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
    fn of_tmpfs(file: &File, len: u64) -> Option<BlockMap> {
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
    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes until drop (see the type's docs).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

/// Mappings at least this large are unmapped on tokio's blocking pool (see `Drop`).
const UNMAP_ELSEWHERE: usize = 4 << 20;

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
struct MapSlice {
    map: Arc<BlockMap>,
    off: usize,
    len: usize,
}

impl AsRef<[u8]> for MapSlice {
    fn as_ref(&self) -> &[u8] {
        &self.map.bytes()[self.off..self.off + self.len]
    }
}

impl LocalBlock {
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
    fn mapped(&mut self, offset: u64, n: usize) -> FsResult<Option<Bytes>> {
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

    fn read_at(&mut self, offset: u64, dst: &mut [u8]) -> FsResult<usize> {
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

    fn is_verified(&self, chunk: u64) -> bool {
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

/// A READ_DATA stream from a worker.
pub(crate) struct RemoteStream {
    block_id: u64,
    addr: String,
    /// `None` once READ_END arrived (the connection went back to the pool).
    conn: Option<DataConn>,
    chunk_size: usize,
    verify: bool,
    /// The last frame's payload, at block offset `frame_off`.
    frame: BytesMut,
    frame_off: u64,
    next_off: u64,
    done: bool,
}

impl RemoteStream {
    fn frame_end(&self) -> u64 {
        self.frame_off + self.frame.len() as u64
    }

    fn covers(&self, offset: u64) -> bool {
        if offset >= self.frame_off && offset < self.frame_end() {
            return true;
        }
        !self.done && offset >= self.next_off && offset - self.next_off <= MAX_SKIP
    }

    async fn next_frame(&mut self, pool: &WorkerPool) -> FsResult<()> {
        let Some(conn) = self.conn.as_mut() else {
            self.done = true;
            return Ok(());
        };
        let h = conn.recv(&mut self.frame).await?;
        match DataOp::try_from(h.op) {
            Ok(DataOp::ReadData) => {
                if h.offset != self.next_off {
                    return Err(FsError::protocol(format!(
                        "worker {}: block {} frame at offset {}, expected {}",
                        self.addr, self.block_id, h.offset, self.next_off
                    )));
                }
                if self.verify {
                    verify_chunks(&self.frame, self.chunk_size, &h.crcs).map_err(|i| {
                        mismatch(
                            self.block_id,
                            &self.addr,
                            h.offset + (i * self.chunk_size) as u64,
                        )
                    })?;
                }
                self.frame_off = h.offset;
                self.next_off = h.offset + self.frame.len() as u64;
                Ok(())
            }
            Ok(DataOp::ReadEnd) => {
                self.done = true;
                self.frame.clear();
                self.frame_off = self.next_off;
                if let Some(c) = self.conn.take() {
                    pool.put(c);
                }
                Ok(())
            }
            _ => Err(FsError::protocol(format!(
                "worker {}: unexpected op {} in the stream of block {}",
                self.addr, h.op, self.block_id
            ))),
        }
    }

    async fn read_at(&mut self, pool: &WorkerPool, offset: u64, dst: &mut [u8]) -> FsResult<usize> {
        loop {
            if offset >= self.frame_off && offset < self.frame_end() {
                let s = (offset - self.frame_off) as usize;
                let n = dst.len().min(self.frame.len() - s);
                dst[..n].copy_from_slice(&self.frame[s..s + n]);
                return Ok(n);
            }
            if self.done || offset < self.frame_off {
                return Ok(0);
            }
            self.next_frame(pool).await?;
        }
    }
}

#[cfg(test)]
mod local_tests {
    use super::*;
    use curvine_common::checksum::chunk_crcs;
    use std::io::Write;

    const CS: usize = 1024;

    fn local(content: &[u8]) -> (tempfile::NamedTempFile, LocalBlock) {
        local_in(&std::env::temp_dir(), content)
    }

    fn local_in(dir: &std::path::Path, content: &[u8]) -> (tempfile::NamedTempFile, LocalBlock) {
        let mut f = tempfile::NamedTempFile::new_in(dir).unwrap();
        f.write_all(content).unwrap();
        let len = content.len() as u64;
        let block = LocalBlock {
            block_id: 7,
            worker: "w".into(),
            file: Arc::new(File::open(f.path()).unwrap()),
            block_len: len,
            chunk_size: CS as u64,
            crcs: chunk_crcs(content, CS),
            verify: true,
            cache: None,
            verified: vec![0; chunk_count(len, CS as u32).div_ceil(64)],
            map: MapState::Unknown,
            direct: None,
        };
        (f, block)
    }

    fn content(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    /// 2,000 (offset, length) pairs inside `len` bytes, lengths up to three chunks.
    fn ranges(seed: u64, len: usize) -> Vec<(usize, usize)> {
        let mut rng = seed;
        (0..2000)
            .map(|_| {
                rng = rng
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let off = (rng >> 33) as usize % len;
                (off, 1 + (rng >> 13) as usize % (3 * CS))
            })
            .collect()
    }

    #[test]
    fn partial_reads_return_the_bytes_on_every_path() {
        let data = content(70 * CS + 100);
        let (_f, mut b) = local(&data);
        for (off, len) in ranges(12345, data.len()) {
            let mut out = vec![0u8; len];
            let n = b.read_at(off as u64, &mut out).unwrap();
            assert_eq!(n, len.min(data.len() - off));
            assert_eq!(&out[..n], &data[off..off + n], "read of {len} at {off}");
        }
        assert!(b.is_verified(69) || b.is_verified(0));
    }

    #[test]
    fn a_corrupt_chunk_is_caught_until_it_was_verified() {
        let data = content(8 * CS);
        let (f, mut b) = local(&data);
        // chunk 2 is verified by a partial read, chunk 5 never read
        let mut out = [0u8; 16];
        b.read_at(2 * CS as u64 + 8, &mut out).unwrap();
        assert!(b.is_verified(2));
        assert!(!b.is_verified(5));
        let mut bad = data.clone();
        bad[5 * CS + 3] ^= 0xff;
        std::fs::write(f.path(), &bad).unwrap();
        match b.read_at(5 * CS as u64, &mut out) {
            Err(FsError::ChecksumMismatch { message, .. }) => {
                assert!(message.contains(&(5 * CS).to_string()), "{message}")
            }
            other => panic!("expected a checksum mismatch, got {other:?}"),
        }
        // whole-chunk reads verify (and mark) what they read
        let mut whole = vec![0u8; 2 * CS];
        b.read_at(0, &mut whole).unwrap();
        assert!(b.is_verified(0) && b.is_verified(1));
        assert_eq!(whole, data[..2 * CS]);
    }

    /// A block file on tmpfs (CI and the MiniCluster keep their MEM tiers there too).
    fn on_tmpfs(content: &[u8]) -> (tempfile::NamedTempFile, LocalBlock) {
        local_in(std::path::Path::new("/dev/shm"), content)
    }

    #[test]
    fn mapped_reads_return_the_bytes_of_a_tmpfs_block() {
        let data = content(70 * CS + 100);
        let (_f, mut b) = on_tmpfs(&data);
        for (off, len) in ranges(99, data.len()) {
            let got = b
                .mapped(off as u64, len)
                .unwrap()
                .expect("a tmpfs file maps");
            let n = len.min(data.len() - off);
            assert_eq!(
                &got[..],
                &data[off..off + n],
                "mapped read of {len} at {off}"
            );
        }
        assert!(b.mapped(data.len() as u64, 10).unwrap().is_none());
        // the bytes keep the mapping alive after the block is gone
        let tail = b.mapped(70 * CS as u64, 100).unwrap().unwrap();
        drop(b);
        assert_eq!(&tail[..], &data[70 * CS..]);
    }

    /// Whether this process has `path` mapped (from /proc/self/maps).
    fn is_mapped(path: &std::path::Path) -> bool {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let path = path.to_str().unwrap();
        maps.lines().any(|l| l.ends_with(path))
    }

    #[test]
    fn a_large_mapping_is_unmapped_off_the_runtime_and_a_small_one_at_once() {
        let data = content(UNMAP_ELSEWHERE + CS);
        let (big_file, mut big) = on_tmpfs(&data);
        let (small_file, mut small) = on_tmpfs(&data[..CS]);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            drop(big.mapped(UNMAP_ELSEWHERE as u64, 10).unwrap().unwrap());
            drop(small.mapped(0, 10).unwrap().unwrap());
            assert!(is_mapped(big_file.path()) && is_mapped(small_file.path()));
            drop(small);
            assert!(!is_mapped(small_file.path()));
            drop(big);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while is_mapped(big_file.path()) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "still mapped after 10 s"
                );
                tokio::task::yield_now().await;
                std::thread::yield_now();
            }
        });
    }

    #[test]
    fn a_block_file_on_disk_is_not_mapped() {
        // the crate's directory is on disk (not tmpfs); read at run time, see conf.rs
        let dir = tempfile::tempdir_in(std::env::var("CARGO_MANIFEST_DIR").unwrap()).unwrap();
        let data = content(3 * CS);
        let (_f, mut b) = local_in(dir.path(), &data);
        assert!(b.mapped(0, CS).unwrap().is_none());
        let mut out = vec![0u8; CS];
        assert_eq!(b.read_at(0, &mut out).unwrap(), CS);
        assert_eq!(out, data[..CS]);
    }

    #[test]
    fn a_block_file_on_disk_is_read_with_o_direct_through_a_window() {
        let dir = tempfile::tempdir_in(std::env::var("CARGO_MANIFEST_DIR").unwrap()).unwrap();
        // a length that is not a multiple of the alignment, over several full windows
        let data = content(DIRECT_MAX * 2 + 3 * CS + 123);
        let (f, mut b) = local_in(dir.path(), &data);
        let opened = DirectWindow::open(f.path().to_str().unwrap());
        assert!(opened.is_some(), "the crate's file system takes O_DIRECT");
        (b.file, b.direct) = opened.map(|(file, w)| (file, Some(w))).unwrap();
        // sequential reads grow the window to its largest
        let mut back = vec![0u8; data.len()];
        for (i, piece) in back.chunks_mut(128 << 10).enumerate() {
            let off = (i * (128 << 10)) as u64;
            assert_eq!(b.read_at(off, piece).unwrap(), piece.len());
        }
        assert!(back == data, "sequential reads differ");
        assert_eq!(b.direct.as_ref().unwrap().grow, DIRECT_MAX);
        // random reads, partial chunks included, start small again
        for (off, len) in ranges(7, data.len()) {
            let mut out = vec![0u8; len];
            let n = b.read_at(off as u64, &mut out).unwrap();
            assert_eq!(n, len.min(data.len() - off));
            assert_eq!(out[..n], data[off..off + n], "read of {len} at {off}");
        }
        assert_eq!(b.direct.as_ref().unwrap().grow, DIRECT_MIN);
        // corruption on disk is still caught (the window holds no stale copy of it)
        let w = std::fs::OpenOptions::new()
            .write(true)
            .open(f.path())
            .unwrap();
        w.write_at(&[data[DIRECT_MAX + 1] ^ 0xff], DIRECT_MAX as u64 + 1)
            .unwrap();
        w.sync_all().unwrap();
        let (_other, mut fresh) = local_in(dir.path(), &data);
        let (file, w) = DirectWindow::open(f.path().to_str().unwrap()).unwrap();
        (fresh.file, fresh.direct) = (file, Some(w));
        let mut out = vec![0u8; CS];
        match fresh.read_at(DIRECT_MAX as u64, &mut out) {
            Err(FsError::ChecksumMismatch { .. }) => {}
            other => panic!("expected a checksum mismatch, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn sequential_o_direct_reads_read_the_next_window_ahead() {
        let dir = tempfile::tempdir_in(std::env::var("CARGO_MANIFEST_DIR").unwrap()).unwrap();
        let data = content(DIRECT_MAX * (READ_AHEAD + 3) + 3 * CS + 123);
        let open = |data: &[u8]| {
            let (f, mut b) = local_in(dir.path(), data);
            let (file, w) = DirectWindow::open(f.path().to_str().unwrap()).unwrap();
            (b.file, b.direct) = (file, Some(w));
            (f, b)
        };
        let (_f, mut b) = open(&data);
        let mut back = vec![0u8; data.len()];
        for (i, piece) in back.chunks_mut(128 << 10).enumerate() {
            let off = (i * (128 << 10)) as u64;
            assert_eq!(b.read_at(off, piece).unwrap(), piece.len());
        }
        assert!(back == data, "sequential reads through read-ahead differ");
        // windows of 64, 128, 256, 512 KiB and 1 MiB read in place; the next ones
        // (READ_AHEAD + 1 of 1 MiB, then the rest) read ahead, READ_AHEAD at a time
        assert_eq!(b.direct.as_ref().unwrap().ahead_used, READ_AHEAD + 2);
        assert_eq!(b.direct.as_ref().unwrap().ahead_most, READ_AHEAD);
        // a jump leaves the pending window unused, and reads there are still right
        let mut out = vec![0u8; 3 * CS];
        assert_eq!(b.read_at(100, &mut out).unwrap(), out.len());
        assert_eq!(out, data[100..100 + 3 * CS]);

        // a byte gone bad in a window that was read ahead is still caught, and the
        // bytes before it still read
        let bad = DIRECT_MAX * 2 + DIRECT_MAX / 2;
        let (f, mut b) = open(&data);
        let w = std::fs::OpenOptions::new()
            .write(true)
            .open(f.path())
            .unwrap();
        w.write_at(&[data[bad] ^ 0xff], bad as u64).unwrap();
        w.sync_all().unwrap();
        let mut off = 0;
        let err = loop {
            let mut piece = vec![0u8; 128 << 10];
            match b.read_at(off as u64, &mut piece) {
                Ok(n) => {
                    assert_eq!(piece[..n], data[off..off + n]);
                    off += n;
                }
                Err(e) => break e,
            }
        };
        assert!(matches!(err, FsError::ChecksumMismatch { .. }), "{err:?}");
        assert_eq!(off, bad / (128 << 10) * (128 << 10));
    }

    #[test]
    fn a_corrupt_chunk_is_caught_through_the_mapping() {
        let data = content(8 * CS);
        let (f, mut b) = on_tmpfs(&data);
        let first = b.mapped(CS as u64 + 5, 10).unwrap().unwrap();
        assert_eq!(&first[..], &data[CS + 5..CS + 15]);
        // flip a byte in place (block files never shrink; a rewrite would truncate)
        let w = std::fs::OpenOptions::new()
            .write(true)
            .open(f.path())
            .unwrap();
        w.write_at(&[data[6 * CS + 1] ^ 0xff], 6 * CS as u64 + 1)
            .unwrap();
        match b.mapped(5 * CS as u64, 2 * CS) {
            Err(FsError::ChecksumMismatch {
                block_id, message, ..
            }) => {
                assert_eq!(block_id, 7);
                assert!(message.contains(&(6 * CS).to_string()), "{message}");
            }
            other => panic!("expected a checksum mismatch, got {:?}", other.map(|_| ())),
        }
        // chunk 1 was verified before the flip and is still served
        assert_eq!(
            &b.mapped(CS as u64, CS).unwrap().unwrap()[..],
            &data[CS..2 * CS]
        );
    }
}
