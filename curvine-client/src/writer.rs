//! `FsWriter`: buffers writes into frames of whole chunks, streams each block to all of
//! its replicas, rolls over to a new block at the block size, and completes the file
//! on close.
//!
//! Replica failures: the bytes of the current block are kept until it is committed on
//! every replica. When a replica fails (connection lost, error reply, failed commit) the
//! block is given up and written again from that copy to a fresh allocation that
//! excludes the failed worker (`add_block` with `excluded_workers`; the master drops the
//! uncommitted allocation). After `MAX_REPLACEMENTS` such attempts, or when the master
//! has no other worker, the write fails with the error; a file never completes with
//! fewer replicas than it asked for (the master checks every block's replica count).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use curvine_common::aligned::AlignedBuf;
use curvine_common::proto::{CommittedBlock, FileStatus, LocatedBlock};
use curvine_common::{BlockId, FsError, FsResult, RequestId, WorkerId};
use tracing::{debug, warn};

use crate::block_writer::{BlockWriter, Traced, DEFAULT_CHUNK_SIZE};
use crate::fs::{CurvineFs, LeaseGuard};

const DEFAULT_BLOCK_SIZE: u64 = 128 << 20;
/// Fresh allocations tried for one file after replica failures.
const MAX_REPLACEMENTS: u32 = 5;
/// Waits before giving up on NoSpace: deleted blocks free their space only once the
/// workers deleted them (heartbeat) and the master saw their new tier reports.
const NO_SPACE_BACKOFF: [u64; 4] = [100, 200, 400, 800];
/// Waits for a live worker when the master has none (e.g. just restarted, before the
/// workers' next heartbeat): up to 50 × 200 ms.
const NO_WORKER_WAITS: u32 = 50;
const NO_WORKER_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// Idle block copies a client keeps for its next writers, in bytes of capacity.
const SPARE_COPY_BYTES: usize = 256 << 20;

/// The memory of writers' block copies (`FsWriter::block_data`), passed from a closed
/// writer to the next one. A copy grows to the block size (128 MiB) for every block
/// sent over the network; made afresh per file, its pages were faulted in and zeroed by
/// the kernel each time, and the growing vector copied itself on the way: 55 % of the
/// client's time in a data-plane `fs.write`. Up to
/// `SPARE_COPY_BYTES` of copies are kept; the client's lease task drops those unused for
/// one of its periods (20 s by default).
#[derive(Default)]
pub(crate) struct SpareCopies {
    spare: Mutex<Vec<(Vec<u8>, Instant)>>,
}

impl SpareCopies {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Vec<u8>, Instant)>> {
        self.spare.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An empty vector, with the capacity of a spare copy when there is one.
    fn take(&self) -> Vec<u8> {
        self.lock().pop().map(|(v, _)| v).unwrap_or_default()
    }

    /// Keep `copy`'s memory for another writer, within `SPARE_COPY_BYTES` (the most
    /// recently given are kept).
    fn give(&self, mut copy: Vec<u8>) {
        if copy.capacity() == 0 || copy.capacity() > SPARE_COPY_BYTES {
            return;
        }
        copy.clear();
        let mut gone = Vec::new();
        {
            let mut spare = self.lock();
            spare.push((copy, Instant::now()));
            let mut total: usize = spare.iter().map(|(v, _)| v.capacity()).sum();
            while total > SPARE_COPY_BYTES {
                let (oldest, _) = spare.remove(0);
                total -= oldest.capacity();
                gone.push(oldest);
            }
        }
        drop(gone); // freed outside the lock
    }

    /// Drop the copies given more than `idle` ago.
    pub(crate) fn trim(&self, idle: Duration) {
        let old: Vec<_> = {
            let mut spare = self.lock();
            let old = spare
                .iter()
                .position(|(_, t)| t.elapsed() < idle)
                .unwrap_or(spare.len());
            spare.drain(..old).collect()
        };
        drop(old); // freed outside the lock
    }

    #[cfg(test)]
    pub(crate) fn kept(&self) -> Vec<usize> {
        self.lock().iter().map(|(v, _)| v.capacity()).collect()
    }
}

/// The first allocation of a writer's `Pending` buffer, unless a write needs more.
const MIN_PENDING: usize = 8 << 10;

/// Bytes written but not yet sent, in a page-aligned buffer: block files are written
/// from it, and the kernel copies from an aligned start faster (`curvine_common::aligned`).
#[derive(Default)]
struct Pending(AlignedBuf);

impl Pending {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// Append `data`. The buffer doubles as it must grow, up to `full` (a frame) and
    /// past it only as far as `data` needs: a writer of a small file allocates little.
    /// Growing straight to a whole frame zeroed 1 MiB for every new writer, and a
    /// client writing 4 KiB files spent half its time doing that.
    fn extend(&mut self, data: &[u8], full: usize) {
        let (len, need) = (self.0.len(), self.0.len() + data.len());
        if self.0.capacity() < need {
            let cap = need.max((2 * self.0.capacity()).clamp(MIN_PENDING, full.max(MIN_PENDING)));
            let mut bigger = AlignedBuf::zeroed(cap);
            bigger[..len].copy_from_slice(&self.0);
            bigger.set_len(len);
            self.0 = bigger;
        }
        self.0.set_len(need);
        self.0[len..].copy_from_slice(data);
    }

    /// Drop the first `n` bytes (sent).
    fn consume(&mut self, n: usize) {
        let len = self.0.len();
        self.0.copy_within(n..len, 0);
        self.0.set_len(len - n);
    }
}

pub struct FsWriter {
    fs: CurvineFs,
    status: FileStatus,
    path: String,
    /// File length so far (bytes accepted by `write`).
    pos: u64,
    block_size: u64,
    /// Bytes not yet sent; never spans a block boundary.
    buf: Pending,
    /// Bytes of the current block, sent and buffered.
    in_block: u64,
    block: Option<BlockWriter>,
    /// The block allocated with the create, until the first write opens it.
    first_block: Option<LocatedBlock>,
    /// The master call that allocated the block being written (the create, the append,
    /// then each add_block), sent to its workers for their spans.
    req: RequestId,
    /// Blocks committed since the last add_block / complete.
    committed: Vec<CommittedBlock>,
    chunk_size: usize,
    failed: Option<FsError>,
    closed: bool,
    /// Everything sent to the current block, kept until it is committed (to write the
    /// block again on a replacement worker).
    block_data: Vec<u8>,
    /// Workers that failed during this write; never allocated again for it.
    excluded: Vec<WorkerId>,
    replacements: u32,
    /// The replica failure being recovered from: reported if no replacement exists.
    replica_err: Option<FsError>,
    no_space_waits: usize,
    no_worker_waits: u32,
    /// File length at the last successful `sync`.
    synced: Option<u64>,
    /// The file is at least this long once closed (`extend_to`).
    min_len: u64,
    /// The mtime to close with (`set_mtime`); 0 = the time of the close.
    mtime_ms: i64,
    _lease: LeaseGuard,
}

impl FsWriter {
    /// A writer for a file the master has just created, with the first block it may
    /// have allocated at the create (or opened for append: writing continues at the end
    /// of the file's data, before any hole past it, in a new block).
    pub(crate) fn new(
        fs: CurvineFs,
        status: FileStatus,
        first_block: Option<LocatedBlock>,
        req: RequestId,
    ) -> Self {
        let block_size = if status.block_size > 0 {
            status.block_size
        } else if fs.conf().client.block_size.0 > 0 {
            fs.conf().client.block_size.0
        } else {
            DEFAULT_BLOCK_SIZE
        };
        let lease = fs.lease_acquire(status.id);
        FsWriter {
            path: status.path.clone(),
            pos: status.len - status.tail_zeros.min(status.len),
            block_size,
            buf: Pending::default(),
            in_block: 0,
            block: None,
            first_block,
            req,
            committed: Vec::new(),
            chunk_size: DEFAULT_CHUNK_SIZE,
            failed: None,
            closed: false,
            block_data: Vec::new(),
            excluded: Vec::new(),
            replacements: 0,
            replica_err: None,
            no_space_waits: 0,
            no_worker_waits: 0,
            synced: None,
            min_len: 0,
            mtime_ms: 0,
            _lease: lease,
            status,
            fs,
        }
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// Bytes written so far (the file length once closed).
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// Make the file at least `len` bytes long when it is closed: the bytes past what
    /// was written become a hole that reads as zeros (truncate or fallocate of a file
    /// being written), unless later writes get there first.
    pub fn extend_to(&mut self, len: u64) {
        self.min_len = self.min_len.max(len);
    }

    /// Close with this mtime (ms since the epoch) instead of the time of the close: when
    /// the writes actually happened (a mount reports that time while it writes).
    pub fn set_mtime(&mut self, mtime_ms: i64) {
        self.mtime_ms = mtime_ms;
    }

    /// The status the master returned at create/append.
    pub fn status(&self) -> &FileStatus {
        &self.status
    }

    fn frame_cap(&self) -> usize {
        let frame = self.fs.conf().client.frame_size.as_usize();
        (frame / self.chunk_size * self.chunk_size).max(self.chunk_size)
    }

    fn check(&self) -> FsResult<()> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.closed {
            return Err(FsError::invalid(format!(
                "{}: writer already closed",
                self.path
            )));
        }
        Ok(())
    }

    /// Remember the first failure: the open streams are dropped (aborted), the file is
    /// abandoned so no partial file stays visible, and every later call reports the
    /// same error.
    async fn fail(&mut self, e: FsError) -> FsError {
        self.block = None;
        self.failed = Some(e.clone());
        if let Err(ae) = self.fs.abandon(self.status.id, &self.path).await {
            // The lease expiry removes it later.
            warn!(path = %self.path, error = %ae, "abandon after a failed write failed");
        }
        e
    }

    /// Write `n` zero bytes (fill a gap).
    pub async fn write_zeros(&mut self, mut n: u64) -> FsResult<()> {
        static ZEROS: [u8; 64 << 10] = [0u8; 64 << 10];
        while n > 0 {
            let k = n.min(ZEROS.len() as u64) as usize;
            self.write(&ZEROS[..k]).await?;
            n -= k as u64;
        }
        Ok(())
    }

    pub async fn write(&mut self, data: &[u8]) -> FsResult<()> {
        self.check()?;
        match self.write_inner(data).await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(e).await),
        }
    }

    async fn write_inner(&mut self, mut data: &[u8]) -> FsResult<()> {
        while !data.is_empty() {
            let room = self.block_size - self.in_block;
            if room == 0 {
                self.finish_block().await?;
                continue;
            }
            if self.buf.is_empty() && data.len() >= self.frame_cap() {
                // large write: send straight from the caller's buffer
                self.ensure_block().await?;
                let cap = self.frame_cap() as u64;
                let mut n = (data.len() as u64).min(room).min(cap);
                if n < room {
                    n = n / self.chunk_size as u64 * self.chunk_size as u64;
                }
                if n > 0 {
                    let n = n as usize;
                    self.send(&data[..n]).await?;
                    self.in_block += n as u64;
                    self.pos += n as u64;
                    data = &data[n..];
                    if self.in_block == self.block_size {
                        self.finish_block().await?;
                    }
                    continue;
                }
            }
            let n = data
                .len()
                .min(self.frame_cap().saturating_sub(self.buf.len()).max(1))
                .min(room as usize);
            let cap = self.frame_cap();
            self.buf.extend(&data[..n], cap);
            self.in_block += n as u64;
            self.pos += n as u64;
            data = &data[n..];
            if self.in_block == self.block_size {
                self.finish_block().await?;
            } else if self.buf.len() >= self.frame_cap() {
                self.send_buffered(false).await?;
            }
        }
        Ok(())
    }

    /// Push buffered whole chunks to the workers. A trailing partial chunk stays
    /// buffered (the data plane takes whole chunks except at a block's end); it is sent
    /// at the block's end or on close, and the file is durable once `close` returns.
    pub async fn flush(&mut self) -> FsResult<()> {
        self.check()?;
        match self.send_buffered(false).await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(e).await),
        }
    }

    /// hflush/hsync: commit everything written so far on every replica and publish it,
    /// so a reader that opens the file now sees all of it (the file stays open for
    /// writing; later writes go to a new block). Durable as far as the tier's fsync
    /// policy makes a committed block durable. Published data survives this writer: if
    /// it fails or is dropped later, the file keeps what was synced. Nothing new since
    /// the last sync = no round trip.
    pub async fn sync(&mut self) -> FsResult<()> {
        self.check()?;
        let res = async {
            if self.in_block == 0 && self.committed.is_empty() && self.synced == Some(self.pos) {
                return Ok(());
            }
            self.finish_block().await?;
            let blocks = std::mem::take(&mut self.committed);
            let r = self
                .fs
                .sync_file(self.status.id, &self.path, blocks.clone(), self.pos)
                .await;
            if r.is_err() {
                self.committed = blocks;
            }
            r?;
            self.synced = Some(self.pos);
            Ok(())
        }
        .await;
        match res {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(e).await),
        }
    }

    /// Commit the last block and complete the file; returns its final status.
    pub async fn close(&mut self) -> FsResult<FileStatus> {
        self.check()?;
        let res = async {
            self.finish_block().await?;
            let blocks = std::mem::take(&mut self.committed);
            self.fs
                .complete(
                    self.status.id,
                    &self.path,
                    blocks,
                    (self.pos, self.min_len),
                    self.mtime_ms,
                )
                .await
        }
        .await;
        match res {
            Ok(st) => {
                self.closed = true;
                debug!(path = %self.path, len = self.pos, "file closed");
                Ok(st)
            }
            Err(e) => Err(self.fail(e).await),
        }
    }

    /// Replicas this write ever gave up on (for tests and logs).
    pub fn excluded_workers(&self) -> &[WorkerId] {
        &self.excluded
    }

    async fn ensure_block(&mut self) -> FsResult<()> {
        if self.block.is_some() {
            return Ok(());
        }
        loop {
            let located = match self.allocate().await {
                Ok(l) => l,
                Err(e @ FsError::NoSpace { .. }) => {
                    self.wait_for_space(e).await?;
                    continue;
                }
                // no worker at all yet (workers re-register after a master restart):
                // wait for one, for up to 10 s
                Err(e @ FsError::Unavailable { .. })
                    if self.replica_err.is_none() && self.no_worker_waits < NO_WORKER_WAITS =>
                {
                    self.no_worker_waits += 1;
                    debug!(path = %self.path, error = %e, "no worker to place a block on; waiting");
                    tokio::time::sleep(NO_WORKER_WAIT).await;
                    continue;
                }
                // no other worker can take the block: the replica's error says why
                Err(e @ FsError::Unavailable { .. }) => {
                    return Err(self.replica_err.take().unwrap_or(e))
                }
                Err(e) => return Err(e),
            };
            let mut opts = self.fs.write_opts(self.block_size);
            opts.req = self.req;
            match BlockWriter::open_traced(&self.fs.inner.pool, &located, &opts).await {
                Ok(bw) => {
                    self.chunk_size = bw.chunk_size();
                    self.block = Some(bw);
                    return Ok(());
                }
                Err((e @ FsError::NoSpace { .. }, _)) => self.wait_for_space(e).await?,
                Err((e, bad)) => self.note_failure(e, bad, BlockId(located.block_id))?,
            }
        }
    }

    /// Wait a little for space to be freed, or give up with `e`.
    async fn wait_for_space(&mut self, e: FsError) -> FsResult<()> {
        let Some(ms) = NO_SPACE_BACKOFF.get(self.no_space_waits) else {
            return Err(e);
        };
        self.no_space_waits += 1;
        debug!(path = %self.path, error = %e, "no space; waiting {ms} ms before retrying");
        tokio::time::sleep(std::time::Duration::from_millis(*ms)).await;
        Ok(())
    }

    /// Ask the master for the next block (committing the finished ones), avoiding the
    /// workers that failed.
    async fn allocate(&mut self) -> FsResult<curvine_common::proto::LocatedBlock> {
        if let Some(b) = self.first_block.take() {
            return Ok(b);
        }
        let previous = std::mem::take(&mut self.committed);
        let r = self
            .fs
            .add_block(
                self.status.id,
                &self.path,
                previous.clone(),
                self.excluded.iter().map(|w| w.0).collect(),
            )
            .await;
        match r {
            Ok((block, req)) => {
                self.req = req;
                Ok(block)
            }
            Err(e) => {
                self.committed = previous;
                Err(e)
            }
        }
    }

    /// Record a replica failure: Ok = try a fresh allocation, Err = give up.
    fn note_failure(&mut self, e: FsError, bad: Option<WorkerId>, block: BlockId) -> FsResult<()> {
        self.block = None;
        // A full worker: the master placed the block on the roomiest one already.
        if self.replacements >= MAX_REPLACEMENTS || matches!(e, FsError::NoSpace { .. }) {
            return Err(e);
        }
        self.replacements += 1;
        self.replica_err = Some(e.clone());
        if let Some(w) = bad {
            if !self.excluded.contains(&w) {
                self.excluded.push(w);
            }
        }
        let worker = bad.map(|w| w.0);
        warn!(path = %self.path, block = block.0, worker = ?worker, error = %e,
            "replica failed; writing the block again on other workers");
        Ok(())
    }

    /// Open a fresh block and send it everything the failed one had received.
    async fn rewrite_block(&mut self) -> FsResult<()> {
        loop {
            self.ensure_block().await?;
            let data = std::mem::take(&mut self.block_data);
            let res = self.resend(&data).await;
            self.block_data = data;
            match res {
                Ok(()) => return Ok(()),
                Err((e, bad)) => {
                    let id = self.block.as_ref().map_or(BlockId(0), |b| b.block_id());
                    self.note_failure(e, bad, id)?;
                }
            }
        }
    }

    /// Send `data` to the open block in frames of whole chunks (the last piece may be
    /// short only when it ends the data).
    async fn resend(&mut self, data: &[u8]) -> Traced<()> {
        let cap = self.frame_cap();
        let Some(b) = self.block.as_mut() else {
            return Err((FsError::internal("no open block"), None));
        };
        for piece in data.chunks(cap) {
            if let Err(e) = b.write(piece).await {
                let bad = b.failed_worker();
                return Err((e, bad));
            }
        }
        Ok(())
    }

    async fn send(&mut self, data: &[u8]) -> FsResult<()> {
        self.ensure_block().await?;
        // Short-circuit-only blocks are read back from the local file if a rewrite is
        // needed; only data sent over the network is kept in memory (and, once a
        // rewrite filled the copy, everything after it, so the copy stays whole).
        let remote = self.block.as_ref().is_some_and(|b| b.has_remote());
        if !self.block_data.is_empty() || remote {
            if self.block_data.capacity() == 0 {
                // room for the whole block at once: a growing vector copies itself
                self.block_data = self.fs.inner.copies.take();
                self.block_data.reserve(self.block_size as usize);
            }
            self.block_data.extend_from_slice(data);
        }
        let res = match self.block.as_mut() {
            Some(b) => b.write(data).await.map_err(|e| (e, b.failed_worker())),
            None => Err((FsError::internal("no open block"), None)),
        };
        match res {
            Ok(()) => {
                // A short-circuit frame is a plain pwrite that never waits, so a writer
                // would otherwise keep its runtime thread for a whole file; tasks woken
                // meanwhile (another writer's master reply) waited 45-50 ms for it. A
                // frame that also went over a socket counted against tokio's budget.
                if !remote {
                    tokio::task::yield_now().await;
                }
                Ok(())
            }
            Err((e, bad)) => {
                let id = self.block.as_ref().map_or(BlockId(0), |b| b.block_id());
                let local = self.block.as_ref().and_then(|b| b.local_copy());
                self.note_failure(e, bad, id)?;
                self.recover_local(local)?;
                self.rewrite_block().await
            }
        }
    }

    /// Load the failed block's bytes from its short-circuit file when they were not
    /// kept in memory.
    fn recover_local(&mut self, local: Option<(std::fs::File, u64)>) -> FsResult<()> {
        if !self.block_data.is_empty() {
            return Ok(());
        }
        let Some((file, len)) = local else {
            return Ok(());
        };
        use std::os::unix::fs::FileExt;
        let mut data = vec![0u8; len as usize];
        file.read_exact_at(&mut data, 0)
            .map_err(|e| FsError::io_ctx("read back a failed short-circuit block", e))?;
        self.block_data = data;
        Ok(())
    }

    /// Send the buffer: all of it when `last` (the block's end), else whole chunks.
    async fn send_buffered(&mut self, last: bool) -> FsResult<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        // the chunk size is only known once the block is open
        self.ensure_block().await?;
        let n = if last {
            self.buf.len()
        } else {
            self.buf.len() / self.chunk_size * self.chunk_size
        };
        if n == 0 {
            return Ok(());
        }
        let buf = std::mem::take(&mut self.buf);
        let res = self.send(&buf.bytes()[..n]).await;
        self.buf = buf;
        res?;
        self.buf.consume(n);
        Ok(())
    }

    /// Send what is buffered and commit the current block on every replica.
    async fn finish_block(&mut self) -> FsResult<()> {
        self.send_buffered(true).await?;
        while let Some(b) = self.block.take() {
            let id = b.block_id();
            let local = if b.has_remote() { None } else { b.local_copy() };
            match b.commit_traced(&self.fs.inner.pool).await {
                Ok(committed) => {
                    self.committed.push(committed);
                    self.replica_err = None;
                }
                Err((e, bad)) => {
                    self.note_failure(e, bad, id)?;
                    self.recover_local(local)?;
                    self.rewrite_block().await?;
                }
            }
        }
        self.block_data.clear();
        self.in_block = 0;
        Ok(())
    }
}

impl Drop for FsWriter {
    fn drop(&mut self) {
        self.fs
            .inner
            .copies
            .give(std::mem::take(&mut self.block_data));
        if !self.closed && self.failed.is_none() {
            debug!(path = %self.path, "writer dropped without close; abandoning the file");
            // Abandon now when a runtime is at hand; otherwise the lease expires it.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let (fs, id, path) = (self.fs.clone(), self.status.id, self.path.clone());
                rt.spawn(async move {
                    if let Err(e) = fs.abandon(id, &path).await {
                        debug!(%path, error = %e, "abandon of a dropped writer failed");
                    }
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Pending, SpareCopies, MIN_PENDING, SPARE_COPY_BYTES};
    use std::time::Duration;

    #[test]
    fn spare_copies_pass_their_memory_on_within_a_cap_and_go_when_idle() {
        let s = SpareCopies::default();
        assert_eq!(s.take().capacity(), 0);
        s.give(Vec::new()); // no memory: nothing to keep
        assert!(s.kept().is_empty());
        let mut v = Vec::with_capacity(1 << 20);
        v.extend_from_slice(&[7u8; 100]);
        s.give(v);
        let v = s.take();
        assert!(v.is_empty(), "a copy is handed on empty");
        assert!(v.capacity() >= 1 << 20);
        assert!(s.kept().is_empty());
        // past the cap the oldest go; a copy larger than the cap is not kept at all
        // (capacity only: the pages of these are never touched)
        for _ in 0..3 {
            s.give(Vec::with_capacity(SPARE_COPY_BYTES / 2));
        }
        assert_eq!(s.kept().len(), 2);
        s.give(Vec::with_capacity(SPARE_COPY_BYTES + 1));
        assert_eq!(s.kept().len(), 2);
        s.trim(Duration::from_secs(3600));
        assert_eq!(s.kept().len(), 2);
        s.trim(Duration::ZERO);
        assert!(s.kept().is_empty());
    }

    #[test]
    fn pending_bytes_keep_their_order_and_an_aligned_start() {
        let mut p = Pending::default();
        assert!(p.is_empty());
        let data: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
        p.extend(&data[..100], 128);
        assert_eq!(p.bytes().as_ptr() as usize % 4096, 0);
        // grows past its first size, keeping what it held
        p.extend(&data[100..], 128);
        assert_eq!(p.bytes(), &data[..]);
        assert_eq!(p.bytes().as_ptr() as usize % 4096, 0);
        p.consume(250);
        assert_eq!(p.bytes(), &data[250..]);
        p.extend(&data[..10], 128);
        assert_eq!(p.len(), 60);
        assert_eq!(&p.bytes()[50..], &data[..10]);
        p.consume(60);
        assert!(p.is_empty());
    }

    #[test]
    fn pending_starts_small_and_doubles_up_to_a_frame() {
        let frame = 1 << 20;
        let mut p = Pending::default();
        p.extend(&[1; 4096], frame);
        assert_eq!(
            p.0.capacity(),
            MIN_PENDING,
            "a 4 KiB file allocates 8 KiB, not a frame"
        );
        let mut caps = vec![p.0.capacity()];
        while p.len() < frame {
            p.extend(&[2; 4096], frame);
            if caps.last() != Some(&p.0.capacity()) {
                caps.push(p.0.capacity());
            }
        }
        assert_eq!(caps.last(), Some(&frame), "stops at the frame");
        assert!(caps.windows(2).all(|w| w[1] == 2 * w[0]), "{caps:?}");
        // one write bigger than the frame takes what it needs at once
        let mut q = Pending::default();
        q.extend(&vec![3; frame + 5], frame);
        assert_eq!(q.0.capacity(), frame + 5);
        assert_eq!(p.bytes()[..4096], [1; 4096]);
        assert!(p.bytes()[4096..].iter().all(|&b| b == 2));
    }
}
