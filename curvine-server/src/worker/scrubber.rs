//! Scrubber: re-verifies every stored block against its CRC32C sidecar in the background
//! at `worker.scrub_rate` bytes per second, one pass after another with
//! `worker.scrub_interval` between passes. A block that fails is deleted (so it is
//! reported as removed) and named in the next heartbeat's `bad_blocks`; the master then
//! re-replicates it from a good replica.

use curvine_common::tasks::Task;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use curvine_common::checksum::verify_chunks;
use curvine_common::{BlockId, FsError, FsResult};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::block_store::BlockStore;
use super::data_server::join_err;
use super::replicator::Background;

/// Bytes read per step (whole chunks).
const STEP: u64 = 1 << 20;

#[derive(Debug, Clone, Copy)]
pub struct ScrubConf {
    /// Bytes per second; 0 = off.
    pub rate: u64,
    pub interval: Duration,
}

/// What one pass found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PassStats {
    pub blocks: u64,
    pub bytes: u64,
    pub bad: u64,
}

/// Run passes until `cancel` fires.
pub async fn run_scrubber(
    store: Arc<BlockStore>,
    bg: Arc<Background>,
    conf: ScrubConf,
    task: Task,
) {
    if conf.rate == 0 {
        return;
    }
    let cancel = task.token();
    loop {
        let started = Instant::now();
        task.busy(format!(
            "verify every block's CRC32C at {} bytes/s",
            conf.rate
        ));
        let pass = scrub_pass(&store, &bg, conf.rate, &cancel).await;
        match &pass {
            Ok(_) => task.idle(),
            Err(e) => task.failed(e),
        }
        match pass {
            Ok(s) => {
                let secs = started.elapsed().as_secs_f64().max(1e-9);
                info!(
                    blocks = s.blocks,
                    bytes = s.bytes,
                    bad = s.bad,
                    mb_per_s = format!("{:.1}", s.bytes as f64 / secs / 1e6),
                    "scrub pass done"
                );
            }
            Err(e) => warn!(error = %e, "scrub pass failed"),
        }
        if !task
            .sleep(conf.interval.max(Duration::from_millis(10)))
            .await
        {
            return;
        }
    }
}

/// Verify every block once at `rate` bytes/s (0 = unthrottled).
pub async fn scrub_pass(
    store: &Arc<BlockStore>,
    bg: &Background,
    rate: u64,
    cancel: &CancellationToken,
) -> FsResult<PassStats> {
    let mut stats = PassStats::default();
    let started = Instant::now();
    let mut next = Some(BlockId(0));
    while let Some(from) = next {
        let ids = store.block_ids_from(from, SCRUB_PAGE)?;
        next = match ids.last() {
            Some(&l) if ids.len() == SCRUB_PAGE => l.0.checked_add(1).map(BlockId),
            _ => None,
        };
        for id in ids {
            if cancel.is_cancelled() {
                return Ok(stats);
            }
            scrub_block(store, bg, rate, cancel, id, started, &mut stats).await?;
        }
    }
    Ok(stats)
}

/// Blocks listed from the index at a time by a scrub pass.
const SCRUB_PAGE: usize = 1024;

/// Verify block `id`, pausing to keep the pass at `rate` bytes/s; remove it if it
/// fails its checksums.
async fn scrub_block(
    store: &Arc<BlockStore>,
    bg: &Background,
    rate: u64,
    cancel: &CancellationToken,
    id: BlockId,
    started: Instant,
    stats: &mut PassStats,
) -> FsResult<()> {
    let block = match store.open_read_quiet(id) {
        Ok(b) => Arc::new(b),
        Err(FsError::BlockNotFound { .. }) => return Ok(()), // deleted meanwhile
        Err(e) => {
            debug!(block = id.0, error = %e, "scrub: cannot open block");
            return Ok(());
        }
    };
    stats.blocks += 1;
    let cs = u64::from(block.chunk_size.max(1));
    let step = (STEP / cs).max(1) * cs;
    let mut off = 0u64;
    let mut bad = None;
    while off < block.len {
        let n = step.min(block.len - off);
        let b = block.clone();
        let r = tokio::task::spawn_blocking(move || -> FsResult<Option<u64>> {
            let mut buf = vec![0u8; n as usize];
            b.file
                .read_exact_at(&mut buf, off)
                .map_err(|e| FsError::io_ctx(format!("scrub block {id} at {off}"), e))?;
            let first = (off / cs) as usize;
            let last = (off + n).div_ceil(cs) as usize;
            let Some(crcs) = b.crcs.get(first..last) else {
                return Ok(Some(off));
            };
            Ok(verify_chunks(&buf, cs as usize, crcs)
                .err()
                .map(|i| off + i as u64 * cs))
        })
        .await
        .map_err(join_err)?;
        match r {
            Ok(None) => {}
            Ok(Some(at)) => {
                bad = Some(at);
                break;
            }
            Err(e) => {
                // a read error is as bad as a wrong checksum
                warn!(block = id.0, error = %e, "scrub: read failed");
                bad = Some(off);
                break;
            }
        }
        off += n;
        stats.bytes += n;
        bg.scrubbed.fetch_add(n, Ordering::Relaxed);
        crate::metrics::worker().scrubbed.inc_by(n);
        if rate > 0 {
            let due = Duration::from_secs_f64(stats.bytes as f64 / rate as f64);
            let elapsed = started.elapsed();
            if due > elapsed {
                tokio::select! {
                    _ = cancel.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(due - elapsed) => {}
                }
            }
        }
    }
    if let Some(at) = bad {
        warn!(block = id.0, offset = at, path = %block.path.display(),
            "scrub: stored block fails its checksum; removing it");
        crate::metrics::worker().checksum_failure(crate::metrics::ChecksumSource::Scrub);
        if store.delete(id)? {
            bg.note_bad(id.0);
        }
        stats.bad += 1;
    }
    Ok(())
}
