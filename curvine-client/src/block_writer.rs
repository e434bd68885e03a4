//! Writing one block to every replica: remote streams (WRITE_DATA frames pipelined, the
//! worker answers only at commit) or short-circuit (the client writes the staging file the
//! local worker hands out). CRC32C is computed once per chunk while the data is hot.

use std::fs::File;
use std::path::PathBuf;

use bytes::BytesMut;
use curvine_common::aligned::AlignedBuf;
use curvine_common::checksum::chunk_crcs_into;
use curvine_common::frame::header;
use curvine_common::proto::{CommittedBlock, DataOp, LocatedBlock, StorageTier};
use curvine_common::types::{RequestId, REQUEST_TARGET};
use curvine_common::{BlockId, FsError, FsResult, WorkerId};
use tracing::{debug, debug_span, Instrument, Span};

use crate::metrics::{self, IoPath};
use crate::pool::{is_local_host, worker_addr, DataConn, WorkerPool};

pub(crate) use curvine_common::block_read::DEFAULT_CHUNK_SIZE;

/// What a block write needs from the client configuration.
#[derive(Debug, Clone)]
pub(crate) struct BlockWriteOpts {
    pub token: String,
    pub short_circuit: bool,
    pub client_host: String,
    /// Bytes to reserve on the worker (the block size).
    pub reserve: u64,
    /// Short-circuit writes to disk tiers bypass the page cache (O_DIRECT).
    pub direct_io: bool,
    /// The master call that allocated the block, sent in WRITE_OPEN for the worker's
    /// span.
    pub req: RequestId,
}

enum Sink {
    Remote,
    ShortCircuit {
        file: File,
        path: PathBuf,
        /// On a disk tier: the same file opened with O_DIRECT, for the whole 4 KiB
        /// pieces (the page cache would only add a copy and writeback work);
        /// `file` takes a block's short last piece.
        direct: Option<DirectFile>,
    },
}

/// Alignment O_DIRECT needs for buffer, offset and length (`AlignedBuf` starts on a
/// page, which covers the buffer).
pub(crate) const DIRECT_ALIGN: usize = 4096;

/// A block file opened with O_DIRECT and an aligned bounce buffer for it.
struct DirectFile {
    file: File,
    buf: AlignedBuf,
}

impl DirectFile {
    /// `path` opened with O_DIRECT; None where the file system refuses it.
    fn open(path: &std::path::Path) -> Option<DirectFile> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .ok()
            .map(|file| DirectFile {
                file,
                buf: AlignedBuf::default(),
            })
    }

    /// Write `data` (a multiple of `DIRECT_ALIGN`) at `offset` (aligned) through an
    /// aligned copy.
    fn write_at(&mut self, data: &[u8], offset: u64) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        if self.buf.capacity() < data.len() {
            self.buf = AlignedBuf::zeroed(data.len());
        }
        self.buf.set_len(data.len());
        self.buf.copy_from_slice(data);
        self.file.write_all_at(&self.buf, offset)
    }
}

struct Replica {
    conn: DataConn,
    worker_id: WorkerId,
    sink: Sink,
}

/// An open block on all of its replicas.
pub(crate) struct BlockWriter {
    block_id: BlockId,
    replicas: Vec<Replica>,
    chunk_size: usize,
    written: u64,
    /// Every chunk's CRC so far (short-circuit commits carry them all).
    all_crcs: Vec<u32>,
    frame_crcs: Vec<u32>,
    /// A short last chunk was written; nothing may follow it.
    ended_partial: bool,
    /// The replica whose stream failed, once one did.
    failed: Option<WorkerId>,
    /// `client.write`: the open and the commit run in it.
    span: Span,
}

/// A failed block write and the worker to blame, when one is known.
pub(crate) type Traced<T> = Result<T, (FsError, Option<WorkerId>)>;

impl BlockWriter {
    /// Open the block on every location; any failure fails the whole open (streams
    /// already opened are dropped, which aborts them on their workers).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) async fn open(
        pool: &WorkerPool,
        block: &LocatedBlock,
        opts: &BlockWriteOpts,
    ) -> FsResult<BlockWriter> {
        Self::open_traced(pool, block, opts)
            .await
            .map_err(|(e, _)| e)
    }

    /// `open`, naming the worker that failed.
    pub(crate) async fn open_traced(
        pool: &WorkerPool,
        block: &LocatedBlock,
        opts: &BlockWriteOpts,
    ) -> Traced<BlockWriter> {
        let span = debug_span!(
            target: REQUEST_TARGET,
            "client.write",
            block = block.block_id,
            req = %opts.req,
        );
        let mut current = None;
        let mut bw = Self::open_inner(pool, block, opts, &mut current)
            .instrument(span.clone())
            .await
            .map_err(|e| (e, current))?;
        bw.span = span;
        Ok(bw)
    }

    async fn open_inner(
        pool: &WorkerPool,
        block: &LocatedBlock,
        opts: &BlockWriteOpts,
        current: &mut Option<WorkerId>,
    ) -> FsResult<BlockWriter> {
        if block.locations.is_empty() {
            return Err(FsError::Unavailable {
                message: format!(
                    "block {}: the master gave no worker to write to",
                    block.block_id
                ),
            });
        }
        let mut replicas = Vec::with_capacity(block.locations.len());
        let mut chunk_size = None;
        let mut scratch = BytesMut::new();
        for loc in &block.locations {
            *current = Some(WorkerId(loc.worker_id));
            let addr_pb = loc.address.clone().unwrap_or_default();
            let addr = worker_addr(&addr_pb);
            let sc = opts.short_circuit && is_local_host(&addr_pb.host, &opts.client_host);
            let mut h = header(DataOp::WriteOpen);
            h.block_id = block.block_id;
            h.tier = loc.tier;
            h.reserve = opts.reserve;
            h.short_circuit = sc;
            h.token.clone_from(&opts.token);
            h.client_id = opts.req.client;
            h.call_id = opts.req.call;
            let (conn, ok) = pool.open(&addr, &h, &mut scratch).await?;
            if ok.op != DataOp::Ok as i32 {
                return Err(FsError::protocol(format!(
                    "worker {addr}: expected OK to WRITE_OPEN of block {}, got op {}",
                    block.block_id, ok.op
                )));
            }
            let cs = if ok.chunk_size == 0 {
                DEFAULT_CHUNK_SIZE
            } else {
                ok.chunk_size as usize
            };
            match chunk_size {
                None => chunk_size = Some(cs),
                Some(c) if c != cs => {
                    return Err(FsError::protocol(format!(
                        "block {}: replicas disagree on the chunk size ({c} vs {cs} at {addr})",
                        block.block_id
                    )))
                }
                Some(_) => {}
            }
            let sink = if sc && !ok.path.is_empty() {
                let path = PathBuf::from(&ok.path);
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(|e| {
                        FsError::io_ctx(format!("open short-circuit file {}", path.display()), e)
                    })?;
                let tier = if ok.tier != 0 { ok.tier } else { loc.tier };
                let disk = tier == StorageTier::Ssd as i32 || tier == StorageTier::Hdd as i32;
                let direct = if disk && opts.direct_io {
                    DirectFile::open(&path)
                } else {
                    None
                };
                debug!(block = block.block_id, worker = %addr, direct = direct.is_some(),
                    "short-circuit write");
                Sink::ShortCircuit { file, path, direct }
            } else {
                Sink::Remote
            };
            replicas.push(Replica {
                conn,
                worker_id: WorkerId(loc.worker_id),
                sink,
            });
        }
        Ok(BlockWriter {
            block_id: BlockId(block.block_id),
            replicas,
            chunk_size: chunk_size.unwrap_or(DEFAULT_CHUNK_SIZE),
            written: 0,
            all_crcs: Vec::new(),
            frame_crcs: Vec::new(),
            ended_partial: false,
            failed: None,
            span: Span::none(),
        })
    }

    pub(crate) fn chunk_size(&self) -> usize {
        self.chunk_size
    }

    /// The worker whose stream failed, if one did.
    pub(crate) fn failed_worker(&self) -> Option<WorkerId> {
        self.failed
    }

    pub(crate) fn block_id(&self) -> BlockId {
        self.block_id
    }

    /// Whether any replica receives the data over the network (then the writer must
    /// keep its own copy to write the block again elsewhere).
    pub(crate) fn has_remote(&self) -> bool {
        self.replicas.iter().any(|r| matches!(r.sink, Sink::Remote))
    }

    /// A second handle on a short-circuit block file and the bytes written so far: the
    /// data can be read back from it to rewrite the block on another worker, even after
    /// that worker died (the open handle keeps the file).
    pub(crate) fn local_copy(&self) -> Option<(File, u64)> {
        self.replicas.iter().find_map(|r| match &r.sink {
            Sink::ShortCircuit { file, .. } => file.try_clone().ok().map(|f| (f, self.written)),
            Sink::Remote => None,
        })
    }

    /// Short-circuit replicas written with O_DIRECT.
    #[cfg(test)]
    pub(crate) fn direct_sinks(&self) -> usize {
        self.replicas
            .iter()
            .filter(|r| {
                matches!(
                    r.sink,
                    Sink::ShortCircuit {
                        direct: Some(_),
                        ..
                    }
                )
            })
            .count()
    }

    #[cfg(test)]
    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// Send `data` to every replica. It must be whole chunks, except for the block's
    /// last piece. Remote replicas get one frame without waiting for an ack.
    pub(crate) async fn write(&mut self, data: &[u8]) -> FsResult<()> {
        if data.is_empty() {
            return Ok(());
        }
        if self.ended_partial {
            return Err(FsError::internal(format!(
                "block {}: data after a partial chunk",
                self.block_id
            )));
        }
        self.frame_crcs.clear();
        chunk_crcs_into(data, self.chunk_size, &mut self.frame_crcs);
        let mut h = header(DataOp::WriteData);
        h.block_id = self.block_id.0;
        h.offset = self.written;
        h.crcs = std::mem::take(&mut self.frame_crcs);
        let mut any_sc = false;
        for r in &mut self.replicas {
            match &mut r.sink {
                Sink::Remote => {
                    if let Err(e) = r.conn.send(&h, data).await {
                        self.failed = Some(r.worker_id);
                        return Err(r.conn.error_after_send_failure(e).await);
                    }
                    metrics::client().written(IoPath::Remote, data.len());
                }
                Sink::ShortCircuit { file, path, direct } => {
                    any_sc = true;
                    let aligned = data.len().is_multiple_of(DIRECT_ALIGN)
                        && self.written.is_multiple_of(DIRECT_ALIGN as u64);
                    let mut res = match direct {
                        Some(d) if aligned => d.write_at(data, self.written),
                        _ => Err(std::io::ErrorKind::Unsupported.into()),
                    };
                    if let Err(e) = &res {
                        if direct.is_some()
                            && aligned
                            && e.kind() == std::io::ErrorKind::InvalidInput
                        {
                            // the file system wants another alignment: buffered from now on
                            debug!(block = self.block_id.0, "O_DIRECT refused; buffered writes");
                            *direct = None;
                        }
                        if direct.is_none() || !aligned {
                            use std::os::unix::fs::FileExt;
                            res = file.write_all_at(data, self.written);
                        }
                    }
                    if let Err(e) = res {
                        self.failed = Some(r.worker_id);
                        return Err(FsError::io_ctx(
                            format!("write short-circuit file {}", path.display()),
                            e,
                        ));
                    }
                    metrics::client().written(IoPath::ShortCircuit, data.len());
                }
            }
        }
        if any_sc {
            self.all_crcs.extend_from_slice(&h.crcs);
        }
        self.frame_crcs = h.crcs;
        self.written += data.len() as u64;
        self.ended_partial = !data.len().is_multiple_of(self.chunk_size);
        Ok(())
    }

    /// Commit on every replica; all must acknowledge, else the error names the worker.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) async fn commit(self, pool: &WorkerPool) -> FsResult<CommittedBlock> {
        self.commit_traced(pool).await.map_err(|(e, _)| e)
    }

    /// `commit`, naming the worker that failed.
    pub(crate) async fn commit_traced(self, pool: &WorkerPool) -> Traced<CommittedBlock> {
        let span = self.span.clone();
        self.commit_inner(pool).instrument(span).await
    }

    async fn commit_inner(mut self, pool: &WorkerPool) -> Traced<CommittedBlock> {
        let mut h = header(DataOp::WriteCommit);
        h.block_id = self.block_id.0;
        h.len = self.written;
        let sc_crcs = std::mem::take(&mut self.all_crcs);
        for r in &mut self.replicas {
            let res = match &r.sink {
                Sink::Remote => r.conn.send(&h, &[]).await,
                Sink::ShortCircuit { .. } => {
                    let mut hs = h.clone();
                    hs.crcs.clone_from(&sc_crcs);
                    r.conn.send(&hs, &[]).await
                }
            };
            if let Err(e) = res {
                let w = Some(r.worker_id);
                return Err((r.conn.error_after_send_failure(e).await, w));
            }
        }
        let mut scratch = BytesMut::new();
        let mut worker_ids = Vec::with_capacity(self.replicas.len());
        for mut r in self.replicas.drain(..) {
            let ok = match r.conn.recv(&mut scratch).await {
                Ok(ok) => ok,
                Err(e) => return Err((e, Some(r.worker_id))),
            };
            if ok.op != DataOp::Ok as i32 || (ok.len != 0 && ok.len != self.written) {
                let w = Some(r.worker_id);
                return Err((
                    FsError::protocol(format!(
                        "worker {}: bad reply to the commit of block {} (op {}, len {} of {})",
                        r.conn.addr(),
                        self.block_id,
                        ok.op,
                        ok.len,
                        self.written
                    )),
                    w,
                ));
            }
            worker_ids.push(r.worker_id.0);
            pool.put(r.conn);
        }
        debug!(
            block = self.block_id.0,
            len = self.written,
            "block committed"
        );
        Ok(CommittedBlock {
            block_id: self.block_id.0,
            len: self.written,
            worker_ids,
        })
    }
}

impl Drop for BlockWriter {
    fn drop(&mut self) {
        for r in &self.replicas {
            if let Sink::ShortCircuit { path, .. } = &r.sink {
                debug!(block = self.block_id.0, path = %path.display(), "aborting short-circuit block");
            }
        }
        // Dropping the connections aborts the streams; the workers delete the staging
        // files and free the reservations.
    }
}
