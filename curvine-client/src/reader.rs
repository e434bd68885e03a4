//! `FsReader`: reads a file block by block from the nearest replica (short-circuit on
//! this host, else a remote stream kept open as read-ahead), verifying CRCs, and moves
//! on to the next replica when one fails. A replica that sent bad data (checksum
//! mismatch, missing or short block) is reported to the master (`ReportBadBlock`), which
//! drops it and re-replicates the block; an unreachable worker is left to the master's
//! heartbeat timeout.

use std::collections::HashSet;

use bytes::Bytes;
use curvine_common::proto::{FileStatus, LocatedBlock};
use curvine_common::{BlockId, FsError, FsResult, RequestId, WorkerId};
use tracing::warn;

use crate::block_reader::{BlockReadOpts, BlockSource};
use crate::fs::CurvineFs;
use crate::master::CallKind;
use crate::metrics::{self, IoPath};
use crate::pool::is_local_host;

fn io_path(src: &BlockSource) -> IoPath {
    if src.is_local() {
        IoPath::ShortCircuit
    } else {
        IoPath::Remote
    }
}

/// Whether `e` says the replica itself is bad (not just unreachable).
fn replica_is_bad(e: &FsError) -> bool {
    matches!(
        e,
        FsError::ChecksumMismatch { .. } | FsError::BlockNotFound { .. } | FsError::Protocol { .. }
    )
}

pub struct FsReader {
    fs: CurvineFs,
    status: FileStatus,
    blocks: Vec<LocatedBlock>,
    len: u64,
    pos: u64,
    /// The open replica: (block index, location index, source).
    src: Option<(usize, usize, BlockSource)>,
    /// (block index, location index) pairs that failed during this read.
    failed: HashSet<(usize, usize)>,
    /// Blocks whose locations were asked of the master again (a worker dropped a block
    /// the under-store holds, before the master knew): at most once each.
    refreshed: HashSet<usize>,
    /// End of the last read, to tell sequential reads (read-ahead) from random ones.
    last_end: u64,
    /// Bytes read from local block files since this reader last yielded its runtime
    /// thread (those reads never wait, see `read_some`).
    unyielded: usize,
    /// Workers that failed to fetch an uncached block for this reader: the master
    /// gives such blocks to other workers (see `refetcher`).
    avoid: Vec<WorkerId>,
    /// Blocks up to this index had their under-store read-ahead started.
    prefetched: usize,
    /// The master call that located the blocks (the open), sent to the workers for
    /// their spans.
    req: RequestId,
}

/// Times one read asks the master for another fetcher of an uncached block.
const MAX_REFETCH: u32 = 2;

/// A reader served from local block files yields its runtime thread after this many
/// bytes.
const YIELD_EVERY: usize = 1 << 20;

impl FsReader {
    /// A reader over `blocks` (as `open` returns them). Public so tests and tools can read
    /// from known locations.
    pub fn new(fs: CurvineFs, status: FileStatus, mut blocks: Vec<LocatedBlock>) -> FsReader {
        blocks.sort_by_key(|b| b.offset);
        FsReader {
            len: status.len,
            fs,
            status,
            blocks,
            pos: 0,
            src: None,
            failed: HashSet::new(),
            refreshed: HashSet::new(),
            last_end: 0,
            unyielded: 0,
            avoid: Vec::new(),
            prefetched: 0,
            req: RequestId::default(),
        }
    }

    /// The same reader, its blocks located by master call `req`.
    pub(crate) fn located_by(mut self, req: RequestId) -> FsReader {
        self.req = req;
        self
    }

    fn read_opts(&self) -> BlockReadOpts {
        let mut opts = self.fs.read_opts();
        opts.req = self.req;
        opts
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn pos(&self) -> u64 {
        self.pos
    }

    pub fn status(&self) -> &FileStatus {
        &self.status
    }

    pub fn path(&self) -> &str {
        &self.status.path
    }

    /// Move the position; past the end of the file is an error.
    pub fn seek(&mut self, pos: u64) -> FsResult<()> {
        if pos > self.len {
            return Err(FsError::invalid(format!(
                "{}: seek to {pos} past the end ({})",
                self.status.path, self.len
            )));
        }
        self.pos = pos;
        Ok(())
    }

    /// Read at the position; returns 0 at the end of the file.
    pub async fn read(&mut self, buf: &mut [u8]) -> FsResult<usize> {
        if self.pos >= self.len || buf.is_empty() {
            return Ok(0);
        }
        let want = (buf.len() as u64).min(self.len - self.pos) as usize;
        let n = self.read_some(self.pos, &mut buf[..want]).await?;
        self.pos += n as u64;
        Ok(n)
    }

    /// Fill `buf` from the position unless the file ends first; returns the bytes read.
    pub async fn read_full(&mut self, buf: &mut [u8]) -> FsResult<usize> {
        let n = self.pread(self.pos, buf).await?;
        self.pos += n as u64;
        Ok(n)
    }

    /// Read at `offset` without moving the position: as much as the file has, up to
    /// `buf.len()`.
    pub async fn pread(&mut self, offset: u64, buf: &mut [u8]) -> FsResult<usize> {
        if offset >= self.len {
            return Ok(0);
        }
        let want = (buf.len() as u64).min(self.len - offset) as usize;
        let mut done = 0;
        while done < want {
            let n = self
                .read_some(offset + done as u64, &mut buf[done..want])
                .await?;
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(done)
    }

    /// The bytes at `offset` without a copy into a buffer: `len` of them, or up to the
    /// end of the file, as a slice of the open replica's block file when that is on this
    /// host's tmpfs (see `BlockMap`). None when the replica open for that block is not
    /// such a file, no replica is open for it yet, or the range leaves the block; the
    /// caller then reads with `pread`, which opens the replica (so the next call may
    /// map). A chunk failing its CRC also gives None: `pread` meets the same chunk and
    /// handles it (the error names block and worker; other replicas are tried).
    pub fn pread_mapped(&mut self, offset: u64, len: usize) -> Option<Bytes> {
        if offset >= self.len || len == 0 {
            return Some(Bytes::new());
        }
        let want = (len as u64).min(self.len - offset);
        if offset + want > self.data_len() {
            return None;
        }
        let bi = self.block_index(offset);
        let block = self.blocks.get(bi)?;
        let in_off = offset.checked_sub(block.offset)?;
        if in_off + want > block.len {
            return None;
        }
        let (sbi, _, src) = self.src.as_mut()?;
        if *sbi != bi {
            return None;
        }
        match src.mapped(in_off, want as usize) {
            Ok(Some(b)) if b.len() as u64 == want => {
                metrics::client().read(IoPath::ShortCircuit, b.len());
                self.last_end = offset + want;
                Some(b)
            }
            Ok(_) => None,
            Err(e) => {
                warn!(path = %self.status.path, error = %e, "mapped read failed; reading again");
                self.src = None;
                None
            }
        }
    }

    /// Fill all of `buf` from `offset`; the file ending first is an error.
    pub async fn read_exact_at(&mut self, offset: u64, buf: &mut [u8]) -> FsResult<()> {
        let n = self.pread(offset, buf).await?;
        if n < buf.len() {
            return Err(FsError::io(format!(
                "{}: unexpected end of file at {} (wanted {} bytes at {offset})",
                self.status.path,
                offset + n as u64,
                buf.len()
            )));
        }
        Ok(())
    }

    /// Locations of a block in the order to try: this host's first when short-circuit
    /// is on, then as the master listed them.
    fn location_order(&self, bi: usize) -> Vec<usize> {
        let conf = &self.fs.conf().client;
        let locs = &self.blocks[bi].locations;
        let mut idx: Vec<usize> = (0..locs.len()).collect();
        if conf.short_circuit {
            idx.sort_by_key(|&i| {
                let host = locs[i].address.as_ref().map_or("", |a| a.host.as_str());
                !is_local_host(host, &conf.hostname)
            });
        }
        idx
    }

    /// Tell the master that replica `li` of block `bi` is bad (in the background; the
    /// read goes on from another replica either way).
    fn report_bad(&self, bi: usize, li: usize, e: &FsError) {
        if !replica_is_bad(e) {
            return;
        }
        let b = &self.blocks[bi];
        let Some(loc) = b.locations.get(li) else {
            return;
        };
        let req = curvine_common::proto::ReportBadBlockRequest {
            block_id: b.block_id,
            worker_id: loc.worker_id,
            reason: e.to_string(),
            caller: self.fs.caller(),
        };
        warn!(block = b.block_id, worker = loc.worker_id, error = %e, "reporting a bad replica");
        let fs = self.fs.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let r = fs
                    .inner
                    .master
                    .call("report_bad_block", CallKind::Mutation, req)
                    .await;
                if let Err(e) = r {
                    tracing::debug!(error = %e, "report of a bad replica failed");
                }
            });
        }
    }

    /// The replicas of block `bi` are gone from their workers but the under-store holds
    /// the file: tell the master (which then forgets them) and ask it for the block
    /// again, which names a worker to fetch it from the store.
    async fn refresh_block(&mut self, bi: usize) -> FsResult<()> {
        let b = self.blocks[bi].clone();
        for loc in &b.locations {
            let req = curvine_common::proto::ReportBadBlockRequest {
                block_id: b.block_id,
                worker_id: loc.worker_id,
                reason: "block not found on the worker".into(),
                caller: self.fs.caller(),
            };
            self.fs
                .inner
                .master
                .call("report_bad_block", CallKind::Mutation, req)
                .await?;
        }
        let fresh = self.fs.block_locations(&self.status.path).await?;
        let nb = fresh
            .into_iter()
            .find(|x| x.block_id == b.block_id && x.offset == b.offset)
            .ok_or_else(|| FsError::Unavailable {
                message: format!("{}: block {} is gone", self.status.path, b.block_id),
            })?;
        self.blocks[bi] = nb;
        Ok(())
    }

    /// Where the blocks end: past it, up to `len`, is the hole a truncate or fallocate
    /// left (reads as zeros).
    fn data_len(&self) -> u64 {
        self.len - self.status.tail_zeros.min(self.len)
    }

    /// Index of the block holding `offset` (`blocks.len()` past the last one).
    fn block_index(&self, offset: u64) -> usize {
        self.blocks.partition_point(|b| b.offset + b.len <= offset)
    }

    /// A sequential reader opens block `bi`: have the workers fetch the next uncached
    /// under-store blocks (`client.ufs_read_ahead_blocks`), so they are cached, or on
    /// their way, when the reader gets there. Each is a READ_OPEN naming the block's
    /// store range and asking for its last byte, dropped once the worker answers: the
    /// worker goes on fetching the whole block for its cache, and the reader later joins
    /// that fetch (the master gives every reader of a block the same worker).
    fn read_ahead_ufs(&mut self, bi: usize) {
        let n = self.fs.conf().client.ufs_read_ahead_blocks as usize;
        let upto = (bi + 1 + n).min(self.blocks.len());
        let from = (bi + 1).max(self.prefetched);
        if from >= upto {
            return;
        }
        self.prefetched = upto;
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for b in &self.blocks[from..upto] {
            let (Some(u), Some(loc)) = (b.ufs.clone(), b.locations.first().cloned()) else {
                continue;
            };
            if b.len == 0 {
                continue;
            }
            let (fs, id, len) = (self.fs.clone(), b.block_id, b.len);
            let opts = self.read_opts();
            rt.spawn(async move {
                let r = BlockSource::open(
                    &fs.inner.pool,
                    BlockId(id),
                    len,
                    &loc,
                    len - 1,
                    1,
                    Some(&u),
                    &opts,
                )
                .await;
                match r {
                    Ok(src) => {
                        tracing::debug!(block = id, "under-store read-ahead started");
                        drop(src);
                    }
                    Err(e) => {
                        tracing::debug!(block = id, error = %e, "under-store read-ahead failed")
                    }
                }
            });
        }
    }

    /// Block `bi` is not cached and its fetcher failed for another reason than the
    /// store (the worker died, say): ask the master for another worker to fetch it,
    /// or for the replica a load or another reader made meanwhile. True when block
    /// `bi` has a new location to try.
    async fn refetcher(&mut self, bi: usize, err: &Option<FsError>) -> bool {
        let b = &self.blocks[bi];
        if b.ufs.is_none() || matches!(err, Some(FsError::UnderStore { .. })) {
            return false;
        }
        for l in &b.locations {
            let w = WorkerId(l.worker_id);
            if !self.avoid.contains(&w) {
                self.avoid.push(w);
            }
        }
        let id = b.block_id;
        match self
            .fs
            .blocks_avoiding(&self.status.path, &self.avoid)
            .await
        {
            Ok(blocks) => match blocks.into_iter().find(|n| n.block_id == id) {
                Some(n) if !n.locations.is_empty() => {
                    warn!(
                        block = id,
                        "fetching worker failed; another one fetches the block"
                    );
                    self.blocks[bi] = n;
                    true
                }
                _ => false,
            },
            Err(e) => {
                warn!(block = id, error = %e, "cannot ask the master for another fetcher");
                false
            }
        }
    }

    /// Read from the block holding `offset`, at most to that block's end.
    async fn read_some(&mut self, offset: u64, dst: &mut [u8]) -> FsResult<usize> {
        // the hole past the data (the file was extended without writing) reads as zeros
        if offset >= self.data_len() && offset < self.len {
            let n = (dst.len() as u64).min(self.len - offset) as usize;
            dst[..n].fill(0);
            self.last_end = offset + n as u64;
            return Ok(n);
        }
        let bi = self.block_index(offset);
        let Some(block) = self.blocks.get(bi) else {
            return Err(FsError::protocol(format!(
                "{}: no block covers offset {offset} of {}",
                self.status.path, self.len
            )));
        };
        if offset < block.offset {
            return Err(FsError::protocol(format!(
                "{}: hole before block {} at offset {offset}",
                self.status.path, block.block_id
            )));
        }
        let (block_id, block_off, block_len) = (block.block_id, block.offset, block.len);
        let in_off = offset - block_off;
        let n = (dst.len() as u64).min(block_len - in_off) as usize;
        let dst = &mut dst[..n];
        let sequential = offset == self.last_end;
        let mut last_err: Option<FsError> = None;
        let mut refetched = 0;
        loop {
            // serve from the open source when it can
            if let Some((sbi, sli, src)) = self.src.as_mut() {
                if *sbi == bi && src.covers(in_off) {
                    let li = *sli;
                    match src.read_at(&self.fs.inner.pool, in_off, dst).await {
                        Ok(0) => self.src = None,
                        Ok(k) => {
                            self.last_end = offset + k as u64;
                            metrics::client().read(io_path(src), k);
                            if src.is_local() {
                                // a pread from a local file never waits; without a
                                // yield now and then, tasks woken meanwhile on this
                                // thread wait until the whole file is read
                                self.unyielded += k;
                                if self.unyielded >= YIELD_EVERY {
                                    self.unyielded = 0;
                                    tokio::task::yield_now().await;
                                }
                            }
                            return Ok(k);
                        }
                        Err(e) => {
                            warn!(block = block_id, error = %e, "replica failed, trying the next");
                            self.report_bad(bi, li, &e);
                            self.failed.insert((bi, li));
                            self.src = None;
                            last_err = Some(e);
                        }
                    }
                }
            }
            self.src = None;
            let Some(li) = self
                .location_order(bi)
                .into_iter()
                .find(|&li| !self.failed.contains(&(bi, li)))
            else {
                self.failed.retain(|&(b, _)| b != bi);
                let dropped = matches!(last_err, Some(FsError::BlockNotFound { .. }));
                if dropped && self.status.persisted && self.refreshed.insert(bi) {
                    match self.refresh_block(bi).await {
                        Ok(()) => continue,
                        Err(e) => {
                            warn!(block = block_id, error = %e, "cannot refresh the block's locations")
                        }
                    }
                }
                if refetched < MAX_REFETCH && self.refetcher(bi, &last_err).await {
                    refetched += 1;
                    continue;
                }
                // the master lists a block without a location only once it has heard
                // from its workers (`ReplicasUnknown` before, which `open` waits out):
                // every worker that held it is lost
                return Err(last_err.unwrap_or_else(|| FsError::Unavailable {
                    message: format!(
                        "{}: block {block_id} has no live replica: no live worker holds it",
                        self.status.path
                    ),
                }));
            };
            let ahead = self.fs.conf().client.read_ahead.0;
            let want = if sequential {
                (n as u64).max(ahead)
            } else {
                n as u64
            };
            let want = want.min(block_len - in_off);
            if sequential {
                self.read_ahead_ufs(bi);
            }
            let loc = self.blocks[bi].locations[li].clone();
            let ufs = self.blocks[bi].ufs.clone();
            let opts = self.read_opts();
            match BlockSource::open(
                &self.fs.inner.pool,
                BlockId(block_id),
                block_len,
                &loc,
                in_off,
                want,
                ufs.as_ref(),
                &opts,
            )
            .await
            {
                Ok(mut src) => match src.read_at(&self.fs.inner.pool, in_off, dst).await {
                    Ok(0) => {
                        self.failed.insert((bi, li));
                        last_err = Some(FsError::protocol(format!(
                            "block {block_id}: the replica sent no data at offset {in_off}"
                        )));
                    }
                    Ok(k) => {
                        metrics::client().read(io_path(&src), k);
                        self.src = Some((bi, li, src));
                        self.last_end = offset + k as u64;
                        return Ok(k);
                    }
                    Err(e) => {
                        warn!(block = block_id, error = %e, "replica failed, trying the next");
                        self.report_bad(bi, li, &e);
                        self.failed.insert((bi, li));
                        last_err = Some(e);
                    }
                },
                Err(e) => {
                    warn!(block = block_id, error = %e, "cannot open replica, trying the next");
                    self.report_bad(bi, li, &e);
                    self.failed.insert((bi, li));
                    last_err = Some(e);
                }
            }
        }
    }
}
