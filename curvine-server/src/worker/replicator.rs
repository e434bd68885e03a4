//! Re-replication on the receiving worker: the master's heartbeat reply lists blocks to
//! copy from another worker. Each copy reads the block over the source's data plane
//! (READ_OPEN, READ_DATA frames verified against their CRC32C), writes a staging file
//! with freshly computed local CRCs and commits it like any write; the result goes back
//! in the next heartbeat. At most `worker.copy_concurrency` copies run at once; a copy
//! that fails drops its `WriteHandle` (staging removed, reservation released) and its
//! semaphore permit with it.

use std::collections::HashSet;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use curvine_common::block_read::BlockReadStream;
use curvine_common::checksum::chunk_crcs_into;
use curvine_common::proto::{CopyCommand, CopyResult, StorageTier};
use curvine_common::{BlockId, FsError, FsResult};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use super::block_store::BlockStore;
use super::data_server::join_err;

/// Work done in the background that the heartbeat reports to the master.
#[derive(Debug)]
pub struct Background {
    results: Mutex<Vec<CopyResult>>,
    bad: Mutex<Vec<u64>>,
    /// Bytes the scrubber verified since start.
    pub scrubbed: AtomicU64,
    /// Blocks being copied (a repeated command is ignored).
    active: Mutex<HashSet<u64>>,
    permits: Arc<Semaphore>,
}

impl Background {
    pub fn new(copy_concurrency: u32) -> Background {
        Background {
            results: Mutex::default(),
            bad: Mutex::default(),
            scrubbed: AtomicU64::new(0),
            active: Mutex::default(),
            permits: Arc::new(Semaphore::new(copy_concurrency.max(1) as usize)),
        }
    }

    /// Copy results and scrubber findings to send in the next heartbeat.
    pub fn take_report(&self) -> (Vec<CopyResult>, Vec<u64>) {
        let r = std::mem::take(&mut *self.results.lock().unwrap_or_else(|p| p.into_inner()));
        let b = std::mem::take(&mut *self.bad.lock().unwrap_or_else(|p| p.into_inner()));
        (r, b)
    }

    /// Put back a report whose heartbeat failed.
    pub fn restore_report(&self, results: Vec<CopyResult>, bad: Vec<u64>) {
        self.results
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(results);
        self.bad
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(bad);
    }

    pub fn note_bad(&self, id: u64) {
        self.bad.lock().unwrap_or_else(|p| p.into_inner()).push(id);
    }

    /// Copies running now.
    pub fn active_copies(&self) -> usize {
        self.active.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Free copy slots (for tests: every permit comes back).
    pub fn free_permits(&self) -> usize {
        self.permits.available_permits()
    }
}

/// Where and how copies connect.
#[derive(Debug, Clone)]
pub struct CopyCtx {
    pub store: Arc<BlockStore>,
    pub bg: Arc<Background>,
    pub auth_token: String,
    pub max_frame: usize,
    pub timeout: Duration,
    /// Load-job tasks (`ufs_load`), when this worker runs them.
    pub loads: Option<Arc<super::ufs_load::Loads>>,
}

/// Start the copies the master asked for; each runs on `tracker` until done or `cancel`.
pub fn start_copies(
    ctx: &CopyCtx,
    cmds: Vec<CopyCommand>,
    tracker: &TaskTracker,
    cancel: &CancellationToken,
) {
    for cmd in cmds {
        {
            let mut a = ctx.bg.active.lock().unwrap_or_else(|p| p.into_inner());
            if !a.insert(cmd.block_id) {
                continue;
            }
        }
        let ctx = ctx.clone();
        let cancel = cancel.clone();
        tracker.spawn(async move {
            let id = cmd.block_id;
            let res = tokio::select! {
                _ = cancel.cancelled() => Err(FsError::Unavailable { message: "worker stopping".into() }),
                r = run_copy(&ctx, &cmd) => r,
            };
            ctx.bg
                .active
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            let result = match res {
                Ok(()) => CopyResult {
                    block_id: id,
                    ok: true,
                    error: String::new(),
                },
                Err(e) => {
                    warn!(block = id, error = %e, "block copy failed");
                    CopyResult {
                        block_id: id,
                        ok: false,
                        error: e.to_string(),
                    }
                }
            };
            ctx.bg
                .results
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(result);
        });
    }
}

async fn run_copy(ctx: &CopyCtx, cmd: &CopyCommand) -> FsResult<()> {
    let _permit = ctx
        .bg
        .permits
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| FsError::internal("copy semaphore closed"))?;
    if ctx.store.block_info(BlockId(cmd.block_id))?.is_some() {
        return Ok(()); // already here (e.g. a repeated command)
    }
    match tokio::time::timeout(ctx.timeout, copy_block(ctx, cmd)).await {
        Ok(r) => r,
        Err(_) => Err(FsError::Timeout {
            message: format!("copy of block {} ({:?})", cmd.block_id, ctx.timeout),
        }),
    }
}

/// Copy one block from `cmd.source` into this worker's store.
pub async fn copy_block(ctx: &CopyCtx, cmd: &CopyCommand) -> FsResult<()> {
    let id = cmd.block_id;
    let src = cmd
        .source
        .clone()
        .ok_or_else(|| FsError::invalid(format!("copy of block {id} without a source")))?;
    let addr = format!("{}:{}", src.host, src.data_port);
    let mut stream =
        BlockReadStream::connect(&addr, &ctx.auth_token, BlockId(id), cmd.len, ctx.max_frame)
            .await?;
    let tier = StorageTier::try_from(cmd.tier).unwrap_or(StorageTier::Unspecified);
    let store = ctx.store.clone();
    let len = cmd.len;
    let handle = tokio::task::spawn_blocking(move || store.begin_write(BlockId(id), tier, len))
        .await
        .map_err(join_err)??;
    let file = handle.clone_file()?;
    let local_cs = ctx.store.conf().chunk_size.max(1) as usize;
    let mut crcs = Vec::with_capacity(len.div_ceil(local_cs as u64) as usize);
    // Bytes received but not yet written: always less than one local chunk between
    // frames. The stream ends with exactly `len` bytes (or fails).
    let mut carry: Vec<u8> = Vec::new();
    let mut written = 0u64;
    let mut buf = BytesMut::new();
    loop {
        match stream.next(&mut buf).await {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => {
                if matches!(e, FsError::ChecksumMismatch { .. }) {
                    crate::metrics::worker()
                        .checksum_failure(crate::metrics::ChecksumSource::Replication);
                }
                return Err(e);
            }
        }
        carry.extend_from_slice(&buf);
        let whole = carry.len() / local_cs * local_cs;
        if whole > 0 {
            chunk_crcs_into(&carry[..whole], local_cs, &mut crcs);
            write_at(&file, &carry[..whole], written)?;
            written += whole as u64;
            carry.drain(..whole);
        }
    }
    if !carry.is_empty() {
        chunk_crcs_into(&carry, local_cs, &mut crcs);
        write_at(&file, &carry, written)?;
    }
    drop(file);
    let stored = handle.tier();
    tokio::task::spawn_blocking(move || handle.commit(len, crcs))
        .await
        .map_err(join_err)??;
    crate::metrics::worker().written(stored, crate::metrics::IoPath::Replication, len);
    info!(block = id, len, source = %addr, "block copied");
    debug!(block = id, "copy committed");
    Ok(())
}

fn write_at(file: &std::fs::File, data: &[u8], off: u64) -> FsResult<()> {
    file.write_all_at(data, off)
        .map_err(|e| FsError::io_ctx(format!("write copied block at {off}"), e))
}

/// Scrubbed-byte counter, for the heartbeat.
pub fn scrubbed(bg: &Background) -> u64 {
    bg.scrubbed.load(Ordering::Relaxed)
}
