//! `FsWriter`: buffers writes into frames of whole chunks, streams each block to all of
//! its replicas, rolls over to a new block at the block size, and completes the file
//! on close.

use curvine_common::proto::{CommittedBlock, FileStatus, LocatedBlock};
use curvine_common::{FsError, FsResult};
use tracing::{debug, warn};

use crate::block_writer::{BlockWriter, DEFAULT_CHUNK_SIZE};
use crate::fs::{CurvineFs, LeaseGuard};

const DEFAULT_BLOCK_SIZE: u64 = 128 << 20;

pub struct FsWriter {
    fs: CurvineFs,
    status: FileStatus,
    path: String,
    /// File length so far (bytes accepted by `write`).
    pos: u64,
    block_size: u64,
    /// Bytes not yet sent; never spans a block boundary.
    buf: Vec<u8>,
    /// Bytes of the current block, sent and buffered.
    in_block: u64,
    block: Option<BlockWriter>,
    /// Blocks committed since the last add_block / complete.
    committed: Vec<CommittedBlock>,
    chunk_size: usize,
    failed: Option<FsError>,
    closed: bool,
    _lease: LeaseGuard,
}

impl FsWriter {
    /// A writer for a file the master has just created (or opened for append: writing
    /// continues at `status.len`, in a new block).
    pub(crate) fn new(
        fs: CurvineFs,
        status: FileStatus,
        _last_block: Option<LocatedBlock>,
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
            pos: status.len,
            block_size,
            buf: Vec::new(),
            in_block: 0,
            block: None,
            committed: Vec::new(),
            chunk_size: DEFAULT_CHUNK_SIZE,
            failed: None,
            closed: false,
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
            self.buf.extend_from_slice(&data[..n]);
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

    /// Commit the last block and complete the file; returns its final status.
    pub async fn close(&mut self) -> FsResult<FileStatus> {
        self.check()?;
        let res = async {
            self.finish_block().await?;
            let blocks = std::mem::take(&mut self.committed);
            self.fs
                .complete(self.status.id, &self.path, blocks, self.pos)
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

    async fn ensure_block(&mut self) -> FsResult<()> {
        if self.block.is_some() {
            return Ok(());
        }
        let previous = std::mem::take(&mut self.committed);
        let located = self
            .fs
            .add_block(self.status.id, &self.path, previous)
            .await?;
        let opts = self.fs.write_opts(self.block_size);
        let bw = BlockWriter::open(&self.fs.inner.pool, &located, &opts).await?;
        self.chunk_size = bw.chunk_size();
        self.block = Some(bw);
        Ok(())
    }

    async fn send(&mut self, data: &[u8]) -> FsResult<()> {
        self.ensure_block().await?;
        match self.block.as_mut() {
            Some(b) => b.write(data).await,
            None => Err(FsError::internal("no open block")),
        }
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
        let res = self.send(&buf[..n]).await;
        self.buf = buf;
        res?;
        self.buf.drain(..n);
        Ok(())
    }

    /// Send what is buffered and commit the current block on every replica.
    async fn finish_block(&mut self) -> FsResult<()> {
        self.send_buffered(true).await?;
        if let Some(b) = self.block.take() {
            let committed = b.commit(&self.fs.inner.pool).await?;
            self.committed.push(committed);
        }
        self.in_block = 0;
        Ok(())
    }
}

impl Drop for FsWriter {
    fn drop(&mut self) {
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
