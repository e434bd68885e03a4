//! Worker: tiered block store, data-plane server, registration and heartbeats.
//!
//! - `layout`: the on-disk layout of a tier dir (block files, CRC sidecars, ids);
//!   `layout::block_path(tier_dirs, block_id)` finds a committed block on disk.
//! - `tiers`: preparing tier dirs, capacity (statvfs), per-tier accounting.
//! - `block_store`: reservations, commit, delete, reads, block reports.
//! - `index`: the index of committed blocks and their LRU order, in RocksDB on disk.
//! - `eviction`: LRU demotion to the next slower tier.
//! - `data_server`, `write_path`, `read_path`: the framed TCP data plane.
//! - `ufs_fetch`: read-through of under-store blocks (fetch, stream, keep).
//! - `ufs_load`: the blocks of load jobs the master hands out (fetch and keep).
//! - `heartbeat`: registration and heartbeats with the master.

pub mod block_store;
pub mod data_server;
pub mod eviction;
pub mod heartbeat;
mod index;
pub mod layout;
mod read_path;
pub mod replicator;
pub mod scrubber;
pub mod tiers;
mod ufs_fetch;
mod ufs_load;
mod web;
mod write_path;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use curvine_common::conf::FsyncPolicy;
use curvine_common::proto::{StorageTier, WorkerAddress};
use curvine_common::tasks::Tasks;
use curvine_common::{ClusterConf, FsError, FsResult};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::info;

/// How long the background tasks get to stop at shutdown.
const TASKS_STOP_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

pub use block_store::{BlockStore, StoreConf};
pub use layout::block_path;

/// Open the block store described by `conf` (prepares dirs, clears staging, rebuilds
/// the index). Blocking.
/// The masters a worker reports to: every master of `master.peers` when the masters
/// are replicated (the worker finds the leader among them), else `master.hostname`
/// and `master.rpc_port`.
pub fn worker_masters(conf: &ClusterConf) -> FsResult<Vec<String>> {
    let peers = conf.master.peer_list()?;
    if peers.is_empty() {
        return Ok(vec![conf.master_addr()]);
    }
    Ok(peers.into_iter().map(|p| p.addr).collect())
}

pub fn open_store(conf: &ClusterConf, worker: String) -> FsResult<Arc<BlockStore>> {
    let w = &conf.worker;
    let chunk_size = u32::try_from(w.chunk_size.as_u64())
        .map_err(|_| FsError::config("worker.chunk_size too large"))?;
    BlockStore::open(
        &conf.tier_dirs()?,
        StoreConf {
            chunk_size,
            fsync: w.fsync == FsyncPolicy::OnCommit,
            fsync_tiers: [StorageTier::Mem, StorageTier::Ssd, StorageTier::Hdd]
                .into_iter()
                .map(|t| (t, w.fsync_for(t) == FsyncPolicy::OnCommit))
                .collect(),
            default_reserve: conf.master.block_size.as_u64(),
            high_watermark: w.high_watermark,
            low_watermark: w.low_watermark,
            worker,
        },
    )
}

/// Serve the data plane on `listener` and report to the master until `cancel` fires.
pub async fn run(
    conf: ClusterConf,
    listener: TcpListener,
    cancel: CancellationToken,
) -> FsResult<()> {
    run_with_web(conf, listener, None, cancel).await
}

/// [`run`], with `/metrics` and the probes served on `web` when given.
pub async fn run_with_web(
    conf: ClusterConf,
    listener: TcpListener,
    web: Option<TcpListener>,
    cancel: CancellationToken,
) -> FsResult<()> {
    let port = listener
        .local_addr()
        .map_err(|e| FsError::io_ctx("worker listener address", e))?
        .port();
    let worker = format!("{}:{port}", conf.worker.hostname);
    let store = {
        let conf = conf.clone();
        let worker = worker.clone();
        tokio::task::spawn_blocking(move || open_store(&conf, worker))
            .await
            .map_err(|e| FsError::internal(format!("open block store: {e}")))??
    };
    let registration = Arc::new(heartbeat::Registration::default());
    let ctx = Arc::new(data_server::DataCtx {
        store: store.clone(),
        auth_token: conf.cluster.auth_token.clone(),
        max_frame: conf.worker.max_frame_size.as_usize(),
        chunk_size: store.conf().chunk_size,
        worker: worker.clone(),
        ufs: Arc::new(ufs_fetch::UfsCtx::new(
            conf.master_addr(),
            conf.cluster.auth_token.clone(),
            conf.client.rpc_timeout.get(),
            registration.clone(),
        )),
    });
    let hb = heartbeat::HeartbeatConf {
        master_addrs: worker_masters(&conf)?,
        address: WorkerAddress {
            worker_id: 0,
            host: conf.worker.hostname.clone(),
            data_port: u32::from(port),
        },
        interval: conf.worker.heartbeat_interval.get(),
        rpc_timeout: conf.client.rpc_timeout.get(),
        connect_timeout: conf.client.connect_timeout.get(),
        auth_token: conf.cluster.auth_token.clone(),
        report_page: conf.worker.block_report_page as usize,
        registration,
    };
    let bg = Arc::new(replicator::Background::new(conf.worker.copy_concurrency));
    let copy = replicator::CopyCtx {
        store: store.clone(),
        bg: bg.clone(),
        auth_token: conf.cluster.auth_token.clone(),
        max_frame: conf.worker.max_frame_size.as_usize(),
        timeout: conf.master.replication_timeout.get(),
        loads: Some(ufs_load::Loads::new(ctx.clone())),
    };
    let scrub = scrubber::ScrubConf {
        rate: conf.worker.scrub_rate.as_u64(),
        interval: conf.worker.scrub_interval.get(),
    };
    info!(%worker, masters = ?hb.master_addrs, "worker starting");
    let tasks = Tasks::new(&cancel);
    if let Some(l) = web {
        let app = web::app(&conf, &store);
        let served = curvine_common::web::spawn(l, app, tasks.token());
        tasks.spawn("web", |_| async move {
            let _ = served.await;
        });
    }
    let limit = conf.worker.max_connections;
    tasks.spawn("data_server", move |t| {
        data_server::serve(ctx, listener, t, limit)
    });
    let all = tasks.clone();
    let s = store.clone();
    tasks.spawn("heartbeat", move |t| {
        heartbeat::run_heartbeat_with(hb, s, Some(copy), t, Some(all))
    });
    let s = store.clone();
    tasks.spawn("scrubber", move |t| scrubber::run_scrubber(s, bg, scrub, t));
    tasks.spawn("eviction", move |t| eviction::run_evictor(store, t));
    cancel.cancelled().await;
    tasks.shutdown(TASKS_STOP_DEADLINE).await;
    info!(%worker, "worker stopped");
    Ok(())
}
