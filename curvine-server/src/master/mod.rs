//! Master: namespace and block map in RocksDB, worker registry, placement, gRPC service.
//!
//! Layout: `store` (RocksDB column families and their reads and writes), `apply` (a
//! journal entry turned into a write batch and typed effects, a pure step), `records`
//! (persisted prost records and the `JournalEntry`), `syncer` (WAL group commit),
//! `namespace` (path walk, permissions, the mutation primitive), `tree`, `files` and
//! `attrs` (the operations), `workers` (registry, placement, block reports), `lease`
//! (writer leases), `changes` (the change log mounts follow), `service` (the tonic
//! service); under-stores: `mounts`, `ufs_meta` (metadata), `persist` (uploads),
//! `ufs_write` (renames, deletes, read-only mounts), `ttl`; `purge` (recursive deletes
//! of large subtrees in bounded entries); `raft` and `replicated` (replicated masters:
//! openraft's log, state machine and RPCs, and the leader's mutations); `tenure` (a
//! master that has just started or become leader waits for its workers' reports).

mod apply;
mod attrs;
pub mod auth;
mod batch;
mod changes;
mod decommission;
mod files;
mod framed;
mod inode_cache;
mod jobs;
mod lease;
mod metered;
mod mounts;
mod namespace;
mod persist;
mod purge;
mod raft;
mod records;
mod replicated;
mod replication;
mod retry_cache;
mod service;
mod store;
mod syncer;
mod tenure;
mod tree;
mod ttl;
mod txn;
mod ufs_meta;
mod ufs_write;
mod upgrade;
pub mod web;
mod workers;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_posix;
#[cfg(test)]
mod tests_purge;
#[cfg(test)]
mod tests_replication;
#[cfg(test)]
mod tests_retry;
#[cfg(test)]
mod tests_rpc;
#[cfg(test)]
mod tests_workers;

use std::sync::Arc;
use std::time::{Duration, Instant};

use curvine_common::proto::master_service_server::MasterServiceServer;
use curvine_common::{ClusterConf, FsError, FsResult};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

pub use attrs::{XATTR_CREATE, XATTR_REPLACE};
pub use namespace::Namespace;
pub use raft::{group_id, stored_raft, StoredRaft};
pub use replication::ReplicationStats;
pub use tree::{RENAME_EXCHANGE, RENAME_NOREPLACE};

/// Serve the master on `listener` until `cancel` fires; returns after RocksDB is closed.
pub async fn run(
    conf: ClusterConf,
    listener: TcpListener,
    cancel: CancellationToken,
) -> FsResult<()> {
    run_with_web(conf, listener, None, cancel).await
}

/// [`run`], with the console, `/metrics` and the probes served on `web` when given.
pub async fn run_with_web(
    conf: ClusterConf,
    listener: TcpListener,
    web: Option<TcpListener>,
    cancel: CancellationToken,
) -> FsResult<()> {
    let addr = listener
        .local_addr()
        .map_err(|e| FsError::io_ctx("master listener address", e))?;
    // taken first: a socket another master serves stops this one before it opens anything
    let local = match &conf.master.local_socket {
        p if p.as_os_str().is_empty() => None,
        p => {
            let path = curvine_common::conf::local_socket_path(p, addr.port());
            let listener = framed::bind_local_socket(&path)?;
            Some((path, listener))
        }
    };
    let mut mconf = conf.master.clone();
    mconf.worker_report_grace = Some(curvine_common::conf::Dur(conf.worker_report_grace()));
    let sync = conf.journal.sync;
    let lost_timeout = conf.master.worker_lost_timeout.0;
    let group = (!conf.master.peers.is_empty()).then(|| raft::group_id(&conf));
    let cluster = group.clone();
    let ns =
        tokio::task::spawn_blocking(move || Namespace::load_as(mconf, sync, lost_timeout, cluster))
            .await
            .map_err(|e| FsError::internal(format!("open namespace: {e}")))??;
    let ns = Arc::new(ns);
    let replica = match group {
        Some(_) => {
            let cid = ns.cluster_id().to_string();
            let rep =
                raft::Replica::start(&conf, ns.store.clone(), Arc::downgrade(&ns), cid).await?;
            let _ = ns.replica.set(rep.clone());
            Some(rep)
        }
        None => None,
    };
    // a single master's wait for its workers' reports starts with it; a replicated
    // master's, when it leads
    ns.note_tenure();
    info!(%addr, cluster_id = %ns.cluster_id(), "master serving");
    if !conf.mount.is_empty() {
        // a store that is down must not keep the master from serving the rest
        let (ns, mounts) = (ns.clone(), conf.mount.clone());
        tokio::spawn(async move {
            match ns.apply_conf_mounts(&mounts).await {
                Ok(()) => {}
                // the leader applies them; its entries reach this master
                Err(FsError::NotLeader { .. }) => {
                    info!("configured mounts are left to the leader")
                }
                Err(e) => error!(error = %e, "a configured mount was not applied"),
            }
        });
    }

    {
        let n = ns.clone();
        ns.tasks.every(
            "lease_expiry",
            tick(conf.master.lease_timeout.0),
            "remove or complete files of writers gone silent",
            move || {
                let n = n.clone();
                async move { n.expire_leases().map(drop) }
            },
        );
        let n = ns.clone();
        ns.tasks.every(
            "lost_workers",
            tick(lost_timeout),
            "look for workers without a recent heartbeat",
            move || {
                let n = n.clone();
                async move {
                    // a new leader's tenure starts within a tick of its election, and
                    // the wait for the workers' reports ends within a tick of the grace
                    n.waiting_for_workers();
                    // workers report to the leader alone: a follower hears none
                    if n.leads() && n.workers.detect_lost() > 0 {
                        n.repl.wake();
                    }
                    FsResult::Ok(())
                }
            },
        );
        let n = ns.clone();
        ns.tasks.every(
            "load_jobs",
            Duration::from_secs(1),
            "carry on recorded load jobs, record the ended ones",
            move || {
                let n = n.clone();
                async move { n.job_upkeep().await }
            },
        );
        let (n, every) = (ns.clone(), conf.master.replication_interval.0);
        ns.tasks.spawn("replication", move |t| {
            replication::replication_loop(n, every, t)
        });
        ns.persister.configure(
            &conf.cluster.auth_token,
            conf.worker.max_frame_size.0 as usize,
            conf.master.persist_concurrency,
        );
        let n = ns.clone();
        ns.tasks
            .spawn("persist", move |t| persist::persist_loop(n, t));
        let n = ns.clone();
        ns.tasks.spawn("ttl", move |t| ttl::ttl_loop(n, t.token()));
        let (n, scope) = (ns.clone(), addr.to_string());
        ns.tasks
            .spawn("purge", move |t| purge::purge_loop(n, t, scope));
    }

    let serving = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let web = web.map(|l| {
        let app = web::app(&conf, &ns, serving.clone());
        curvine_common::web::spawn(l, app, cancel.child_token())
    });
    let svc = Arc::new(metered::Metered(service::MasterSvc {
        ns: ns.clone(),
        stop: cancel.clone(),
        addr,
    }));
    let auth = auth::AuthInterceptor::new(&conf.cluster.auth_token);
    // one port, two protocols: framed connections are served by `framed`, the rest
    // reach tonic through this channel
    let (grpc_tx, grpc_rx) = tokio::sync::mpsc::channel(64);
    let accept = tokio::spawn(framed::accept_loop(
        listener,
        svc.clone(),
        auth.clone(),
        grpc_tx,
        cancel.clone(),
    ));
    let local = local.map(|(path, listener)| {
        info!(socket = %path.display(), "master serving local clients");
        let serve = framed::accept_local(listener, addr, svc.clone(), auth.clone(), cancel.clone());
        (path, tokio::spawn(serve))
    });
    let grpc = MasterServiceServer::from_arc(svc)
        .max_decoding_message_size(256 << 20)
        .max_encoding_message_size(256 << 20);
    let grpc = tonic::service::interceptor::InterceptedService::new(grpc, auth.clone());
    let raft_svc = replica.as_ref().map(|r| {
        let svc = r.service(ns.cluster_id());
        let svc = curvine_common::proto::raft_service_server::RaftServiceServer::new(svc)
            .max_decoding_message_size(256 << 20)
            .max_encoding_message_size(256 << 20);
        tonic::service::interceptor::InterceptedService::new(svc, auth)
    });
    serving.store(true, std::sync::atomic::Ordering::Release);
    let served = tonic::transport::Server::builder()
        .add_service(grpc)
        .add_optional_service(raft_svc)
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::ReceiverStream::new(grpc_rx),
            cancel.cancelled(),
        )
        .await;
    serving.store(false, std::sync::atomic::Ordering::Release);
    let _ = accept.await;
    if let Some(web) = web {
        let _ = web.await;
    }
    if let Some((path, task)) = local {
        let _ = task.await;
        if let Err(e) = std::fs::remove_file(&path) {
            warn!(socket = %path.display(), error = %e, "cannot remove the master's local socket");
        }
    }
    ns.tasks.shutdown(TASKS_STOP_DEADLINE).await;
    if let Some(rep) = replica {
        // the state machine holds the namespace only weakly; Raft's tasks end here
        rep.shutdown().await;
    }
    ns.syncer.stop();
    // Connection tasks may still hold the service for a moment; RocksDB must be closed
    // before we return so the same meta_dir can be reopened in this process.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Arc::strong_count(&ns) > 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if Arc::strong_count(&ns) > 1 {
        warn!("master state still referenced at shutdown; RocksDB closes when released");
    }
    tokio::task::spawn_blocking(move || drop(ns))
        .await
        .map_err(|e| FsError::internal(format!("close namespace: {e}")))?;
    info!("master stopped");
    served.map_err(|e| FsError::Unavailable {
        message: format!("master rpc server: {e}"),
    })
}

/// How long the background tasks get to stop at shutdown.
const TASKS_STOP_DEADLINE: Duration = Duration::from_secs(10);

fn tick(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
}
