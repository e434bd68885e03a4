//! The tonic `MasterService`: decode, run the namespace work on a blocking thread, wait
//! for durability, reply.
//!
//! Namespace calls read RocksDB and mutations take the namespace's mutation lock (a
//! `std::sync::Mutex`): both may block, so every handler hands that work to
//! [`MasterSvc::run`] and only the waits that are async by nature (the WAL sync, the
//! under-store, long polls) stay on the runtime. Calls that touch nothing but small
//! in-memory tables (`renew_lease`, the mount table, load jobs, `watch`) run inline.

use std::net::SocketAddr;
use std::sync::Arc;

use curvine_common::proto::master_service_server::MasterService;
use curvine_common::proto::*;
use curvine_common::{BlockId, FsError, FsResult, WorkerId};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tracing::error;

use super::namespace::Namespace;

pub struct MasterSvc {
    pub ns: Arc<Namespace>,
    /// The master is stopping: long polls (`watch`) end at once.
    pub stop: CancellationToken,
    /// The address the master listens on (the scope of its fault points).
    #[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
    pub addr: SocketAddr,
}

type Reply<T> = Result<Response<T>, Status>;

impl MasterSvc {
    /// Run `f` against the namespace: the one place every handler's namespace work
    /// goes through. A panic in `f` fails this call alone with `Internal`; the master
    /// goes on serving (the mutation lock tolerates being poisoned, and a mutation that
    /// panicked applied nothing).
    ///
    /// `f` runs on the calling runtime thread: most calls are done in tens of
    /// microseconds, and handing each to tokio's blocking pool (`spawn_blocking`) cost
    /// 35-45 % of the master's create, stat and delete rates (`curvine-bench meta`, 8
    /// clients, 2 cores). Moving this work off the runtime without that cost (a
    /// namespace thread taking calls in batches) is a step of the HA work (docs/ha.md).
    pub(super) async fn run<T, F>(&self, call: &'static str, f: F) -> FsResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Arc<Namespace>) -> FsResult<T> + Send + 'static,
    {
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            #[cfg(feature = "fault-injection")]
            crate::fault::disk_hook("master.namespace", &self.addr.to_string())?;
            f(&self.ns)
        }));
        done.unwrap_or_else(|_| {
            error!(call, "master call panicked; failed it and serving on");
            Err(FsError::internal(format!(
                "{call}: the master failed the call"
            )))
        })
    }

    /// [`run`](Self::run) a mutation and acknowledge it only once its write is durable
    /// (group commit), or at once when the caller defers that (`defer`, see
    /// [`defers_sync`]: the sync is started now, and `SyncJournal` waits for it).
    async fn mutation<T, F>(&self, call: &'static str, defer: bool, f: F) -> Result<T, Status>
    where
        T: Send + 'static,
        F: FnOnce(&Arc<Namespace>) -> FsResult<(T, u64)> + Send + 'static,
    {
        let (v, seq) = self.run(call, f).await?;
        if defer {
            self.ns.syncer.request(seq);
        } else {
            self.ns.syncer.wait(seq).await?;
        }
        Ok(v)
    }
}

/// How long `AddMaster` waits for a new master to catch up with the log.
const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(60);

/// `Ok` for the superuser; else `PermissionDenied` naming `what`.
fn superuser(c: &Option<CallerInfo>, what: &str) -> FsResult<()> {
    if super::namespace::is_root(&caller(c)) {
        Ok(())
    } else {
        Err(FsError::PermissionDenied {
            path: format!("{what} (superuser only)"),
        })
    }
}

/// This master's Raft node; membership calls need replication.
fn replicated(ns: &Namespace) -> FsResult<&Arc<super::raft::Replica>> {
    ns.replica.get().ok_or_else(|| {
        FsError::invalid("this master runs alone (master.peers is empty): there is no group")
    })
}

fn caller(c: &Option<CallerInfo>) -> CallerInfo {
    c.clone().unwrap_or_default()
}

/// The caller takes its reply before the WAL sync (`CallerInfo.defer_sync`).
fn defers_sync(c: &Option<CallerInfo>) -> bool {
    c.as_ref().is_some_and(|c| c.defer_sync)
}

#[tonic::async_trait]
impl MasterService for MasterSvc {
    async fn mkdir(&self, req: Request<MkdirRequest>) -> Reply<MkdirResponse> {
        fault_rpc!("master.Mkdir", &req);
        let r = req.into_inner();
        self.ns.check_writable(&r.path)?;
        let st = self
            .mutation("mkdir", defers_sync(&r.caller), move |ns| {
                ns.mkdir(&r.path, r.parents, r.mode, &caller(&r.caller))
            })
            .await?;
        Ok(Response::new(MkdirResponse { status: Some(st) }))
    }

    async fn create(&self, req: Request<CreateRequest>) -> Reply<CreateResponse> {
        fault_rpc!("master.Create", &req);
        let r = req.into_inner();
        self.ns.check_writable(&r.path)?;
        let (st, first_block) = self
            .mutation("create", defers_sync(&r.caller), move |ns| ns.create(&r))
            .await?;
        Ok(Response::new(CreateResponse {
            status: Some(st),
            first_block,
        }))
    }

    async fn append(&self, req: Request<AppendRequest>) -> Reply<AppendResponse> {
        fault_rpc!("master.Append", &req);
        let r = req.into_inner();
        self.ns.check_writable(&r.path)?;
        let (st, last) = self
            .mutation("append", defers_sync(&r.caller), move |ns| ns.append(&r))
            .await?;
        Ok(Response::new(AppendResponse {
            status: Some(st),
            last_block: last,
        }))
    }

    async fn add_block(&self, req: Request<AddBlockRequest>) -> Reply<AddBlockResponse> {
        fault_rpc!("master.AddBlock", &req);
        let r = req.into_inner();
        let b = self
            .mutation("add_block", defers_sync(&r.caller), move |ns| {
                ns.add_block(&r)
            })
            .await?;
        Ok(Response::new(AddBlockResponse { block: Some(b) }))
    }

    async fn complete(&self, req: Request<CompleteRequest>) -> Reply<CompleteResponse> {
        fault_rpc!("master.Complete", &req);
        let r = req.into_inner();
        let file_id = r.file_id;
        let mut st = self
            .mutation("complete", defers_sync(&r.caller), move |ns| {
                ns.complete(&r)
            })
            .await?;
        // a through mount: close returns once the under-store holds the file
        if self.ns.persist_on_close(file_id).await? {
            st.persisted = true;
        }
        Ok(Response::new(CompleteResponse { status: Some(st) }))
    }

    async fn sync(&self, req: Request<SyncRequest>) -> Reply<SyncResponse> {
        fault_rpc!("master.Sync", &req);
        let r = req.into_inner();
        let st = self.mutation("sync", false, move |ns| ns.sync(&r)).await?;
        Ok(Response::new(SyncResponse { status: Some(st) }))
    }

    async fn mknod(&self, req: Request<MknodRequest>) -> Reply<MknodResponse> {
        fault_rpc!("master.Mknod", &req);
        let r = req.into_inner();
        self.ns.check_writable(&r.path)?;
        let st = self
            .mutation("mknod", defers_sync(&r.caller), move |ns| ns.mknod(&r))
            .await?;
        Ok(Response::new(MknodResponse { status: Some(st) }))
    }

    async fn abandon(&self, req: Request<AbandonRequest>) -> Reply<AbandonResponse> {
        fault_rpc!("master.Abandon", &req);
        let r = req.into_inner();
        let client = caller(&r.caller).client_id;
        self.mutation("abandon", defers_sync(&r.caller), move |ns| {
            ns.abandon(r.file_id, &r.path, Some(client))
        })
        .await?;
        Ok(Response::new(AbandonResponse {}))
    }

    async fn renew_lease(&self, req: Request<RenewLeaseRequest>) -> Reply<RenewLeaseResponse> {
        fault_rpc!("master.RenewLease", &req);
        let r = req.into_inner();
        self.ns.renew_lease(r.client_id, &r.file_ids);
        Ok(Response::new(RenewLeaseResponse {}))
    }

    async fn get_status(&self, req: Request<GetStatusRequest>) -> Reply<GetStatusResponse> {
        fault_rpc!("master.GetStatus", &req);
        let r = req.into_inner();
        self.ns.linearize(&r.caller).await?;
        self.ns.ufs_prepare(&r.path, false, false).await?;
        let st = self
            .run("get_status", move |ns| {
                ns.get_status(&r.path, r.follow_symlink, &caller(&r.caller))
            })
            .await?;
        Ok(Response::new(GetStatusResponse { status: Some(st) }))
    }

    async fn list(&self, req: Request<ListRequest>) -> Reply<ListResponse> {
        fault_rpc!("master.List", &req);
        let r = req.into_inner();
        self.ns.linearize(&r.caller).await?;
        self.ns.ufs_prepare(&r.path, true, false).await?;
        let reply = self
            .run("list", move |ns| {
                let c = caller(&r.caller);
                ns.list_page(&r.path, &r.start_after, r.limit, r.accept_names, &c)
            })
            .await?;
        Ok(Response::new(reply))
    }

    async fn open(&self, req: Request<OpenRequest>) -> Reply<OpenResponse> {
        fault_rpc!("master.Open", &req);
        // the leader alone hears the workers, so it alone knows which replicas are live
        self.ns.check_leads()?;
        let r = req.into_inner();
        self.ns.linearize(&r.caller).await?;
        self.ns.ufs_prepare(&r.path, false, false).await?;
        let (st, blocks) = self
            .run("open", move |ns| {
                let c = caller(&r.caller);
                let (st, mut blocks) = ns.open(&r.path, &c)?;
                if !r.exclude_fetchers.is_empty() {
                    ns.avoid_fetchers(&mut blocks, &c.client_host, &r.exclude_fetchers);
                }
                // a block no worker has reported yet is not lost while they report
                ns.check_locations_known(&st.path, &blocks)?;
                Ok((st, blocks))
            })
            .await?;
        Ok(Response::new(OpenResponse {
            status: Some(st),
            blocks,
        }))
    }

    async fn rename(&self, req: Request<RenameRequest>) -> Reply<RenameResponse> {
        fault_rpc!("master.Rename", &req);
        let r = req.into_inner();
        self.ns.check_writable(&r.src)?;
        self.ns.check_writable(&r.dst)?;
        let c = caller(&r.caller);
        let copy = self.ns.ufs_rename_prepare(&r.src, &r.dst, &c).await?;
        let renamed = self
            .mutation("rename", defers_sync(&r.caller), move |ns| {
                ns.rename(&r.src, &r.dst, r.flags, &c)
            })
            .await;
        let time_ms = match (renamed, copy) {
            (Ok(t), Some(copy)) => {
                self.ns.ufs_rename_done(copy).await?;
                t
            }
            (Ok(t), None) => t,
            (Err(e), Some(copy)) => {
                self.ns.ufs_rename_undo(&copy).await;
                return Err(e);
            }
            (Err(e), None) => return Err(e),
        };
        Ok(Response::new(RenameResponse { time_ms }))
    }

    async fn delete(&self, req: Request<DeleteRequest>) -> Reply<DeleteResponse> {
        fault_rpc!("master.Delete", &req);
        let r = req.into_inner();
        self.ns.check_writable(&r.path)?;
        let c = caller(&r.caller);
        let target = self.ns.ufs_delete_target(&r.path, &c).await?;
        let at = self
            .mutation("delete", defers_sync(&r.caller), move |ns| {
                ns.delete(&r.path, r.recursive, &c)
            })
            .await?;
        if let Some((m, key, dir)) = target {
            self.ns.ufs_delete(&m, &key, dir).await?;
        }
        Ok(Response::new(DeleteResponse {
            deleted: true,
            parent_mtime_ms: at,
        }))
    }

    async fn set_attr(&self, req: Request<SetAttrRequest>) -> Reply<SetAttrResponse> {
        fault_rpc!("master.SetAttr", &req);
        let r = req.into_inner();
        self.ns.check_writable(&r.path)?;
        let st = self
            .mutation("set_attr", defers_sync(&r.caller), move |ns| {
                ns.set_attr(&r)
            })
            .await?;
        Ok(Response::new(SetAttrResponse { status: Some(st) }))
    }

    async fn truncate(&self, req: Request<TruncateRequest>) -> Reply<TruncateResponse> {
        fault_rpc!("master.Truncate", &req);
        let r = req.into_inner();
        self.ns.check_writable(&r.path)?;
        let mut st = self
            .mutation("truncate", defers_sync(&r.caller), move |ns| {
                ns.truncate(&r.path, r.len, &caller(&r.caller))
            })
            .await?;
        // a through mount: the store's object gets the new length before the reply
        if self.ns.persist_on_close(st.id).await? {
            st.persisted = true;
        }
        Ok(Response::new(TruncateResponse { status: Some(st) }))
    }

    async fn symlink(&self, req: Request<SymlinkRequest>) -> Reply<SymlinkResponse> {
        fault_rpc!("master.Symlink", &req);
        let r = req.into_inner();
        self.ns.check_writable(&r.link)?;
        let st = self
            .mutation("symlink", defers_sync(&r.caller), move |ns| {
                ns.symlink(&r.target, &r.link, &caller(&r.caller))
            })
            .await?;
        Ok(Response::new(SymlinkResponse { status: Some(st) }))
    }

    async fn readlink(&self, req: Request<ReadlinkRequest>) -> Reply<ReadlinkResponse> {
        fault_rpc!("master.Readlink", &req);
        let r = req.into_inner();
        self.ns.linearize(&r.caller).await?;
        let target = self
            .run("readlink", move |ns| {
                ns.readlink(&r.path, &caller(&r.caller))
            })
            .await?;
        Ok(Response::new(ReadlinkResponse { target }))
    }

    async fn link(&self, req: Request<LinkRequest>) -> Reply<LinkResponse> {
        fault_rpc!("master.Link", &req);
        let r = req.into_inner();
        self.ns.check_writable(&r.dst)?;
        let st = self
            .mutation("link", defers_sync(&r.caller), move |ns| {
                ns.link(&r.src, &r.dst, &caller(&r.caller))
            })
            .await?;
        Ok(Response::new(LinkResponse { status: Some(st) }))
    }

    async fn set_xattr(&self, req: Request<SetXattrRequest>) -> Reply<SetXattrResponse> {
        fault_rpc!("master.SetXattr", &req);
        let r = req.into_inner();
        self.ns.check_writable(&r.path)?;
        self.mutation("set_xattr", defers_sync(&r.caller), move |ns| {
            ns.set_xattr(&r.path, &r.name, &r.value, r.flags, &caller(&r.caller))
        })
        .await?;
        Ok(Response::new(SetXattrResponse {}))
    }

    async fn get_xattr(&self, req: Request<GetXattrRequest>) -> Reply<GetXattrResponse> {
        fault_rpc!("master.GetXattr", &req);
        let r = req.into_inner();
        self.ns.linearize(&r.caller).await?;
        let value = self
            .run("get_xattr", move |ns| {
                ns.get_xattr(&r.path, &r.name, &caller(&r.caller))
            })
            .await?;
        Ok(Response::new(GetXattrResponse { value }))
    }

    async fn list_xattr(&self, req: Request<ListXattrRequest>) -> Reply<ListXattrResponse> {
        fault_rpc!("master.ListXattr", &req);
        let r = req.into_inner();
        self.ns.linearize(&r.caller).await?;
        let names = self
            .run("list_xattr", move |ns| {
                ns.list_xattr(&r.path, &caller(&r.caller))
            })
            .await?;
        Ok(Response::new(ListXattrResponse { names }))
    }

    async fn remove_xattr(&self, req: Request<RemoveXattrRequest>) -> Reply<RemoveXattrResponse> {
        fault_rpc!("master.RemoveXattr", &req);
        let r = req.into_inner();
        self.ns.check_writable(&r.path)?;
        self.mutation("remove_xattr", defers_sync(&r.caller), move |ns| {
            ns.remove_xattr(&r.path, &r.name, &caller(&r.caller))
        })
        .await?;
        Ok(Response::new(RemoveXattrResponse {}))
    }

    async fn report(&self, req: Request<ReportRequest>) -> Reply<ReportResponse> {
        fault_rpc!("master.Report", &req);
        // the workers report to the leader: a follower's view of them is empty
        self.ns.check_leads()?;
        let r = self.run("report", |ns| Ok(ns.report())).await?;
        Ok(Response::new(r))
    }

    async fn register_worker(&self, req: Request<RegisterRequest>) -> Reply<RegisterResponse> {
        fault_rpc!("master.RegisterWorker", &req);
        // a worker registers and reports with the leader alone
        self.ns.check_leads()?;
        let r = req.into_inner();
        let r = self
            .mutation("register_worker", false, move |ns| ns.register_worker(r))
            .await?;
        Ok(Response::new(r))
    }

    async fn report_blocks(&self, req: Request<BlockReportPage>) -> Reply<BlockReportPageResponse> {
        fault_rpc!("master.ReportBlocks", &req);
        // a worker registers and reports with the leader alone
        self.ns.check_leads()?;
        let r = req.into_inner();
        let r = self
            .mutation("report_blocks", false, move |ns| ns.report_blocks(r))
            .await?;
        Ok(Response::new(r))
    }

    async fn heartbeat(&self, req: Request<HeartbeatRequest>) -> Reply<HeartbeatResponse> {
        fault_rpc!("master.Heartbeat", &req);
        // a worker registers and reports with the leader alone
        self.ns.check_leads()?;
        let r = req.into_inner();
        let r = self
            .mutation("heartbeat", false, move |ns| ns.heartbeat(r))
            .await?;
        Ok(Response::new(r))
    }

    async fn report_bad_block(
        &self,
        req: Request<ReportBadBlockRequest>,
    ) -> Reply<ReportBadBlockResponse> {
        fault_rpc!("master.ReportBadBlock", &req);
        // a worker registers and reports with the leader alone
        self.ns.check_leads()?;
        let r = req.into_inner();
        let removed = self
            .mutation("report_bad_block", false, move |ns| {
                ns.report_bad_block(BlockId(r.block_id), WorkerId(r.worker_id), &r.reason)
            })
            .await?;
        Ok(Response::new(ReportBadBlockResponse { removed }))
    }

    async fn watch(&self, req: Request<WatchRequest>) -> Reply<WatchResponse> {
        fault_rpc!("master.Watch", &req);
        let r = req.into_inner();
        tokio::select! {
            resp = self.ns.changes.watch(&r) => Ok(Response::new(resp)),
            // the follower calls again, and finds the master gone or restarted
            _ = self.stop.cancelled() => Err(FsError::Unavailable {
                message: "the master is stopping".into(),
            }
            .into()),
        }
    }

    async fn mount(&self, req: Request<MountRequest>) -> Reply<MountResponse> {
        fault_rpc!("master.Mount", &req);
        let r = req.into_inner();
        let info = r
            .mount
            .ok_or_else(|| FsError::invalid("mount: no mount given"))?;
        let m = self.ns.mount(info, &caller(&r.caller)).await?;
        Ok(Response::new(MountResponse { mount: Some(m) }))
    }

    async fn umount(&self, req: Request<UmountRequest>) -> Reply<UmountResponse> {
        fault_rpc!("master.Umount", &req);
        let r = req.into_inner();
        self.ns.umount(&r.path, &caller(&r.caller)).await?;
        Ok(Response::new(UmountResponse {}))
    }

    async fn list_mounts(&self, req: Request<ListMountsRequest>) -> Reply<ListMountsResponse> {
        fault_rpc!("master.ListMounts", &req);
        Ok(Response::new(ListMountsResponse {
            mounts: self.ns.list_mounts(),
        }))
    }

    async fn get_mount(&self, req: Request<GetMountRequest>) -> Reply<GetMountResponse> {
        fault_rpc!("master.GetMount", &req);
        let peer = req.remote_addr().map(|a| a.ip());
        let r = req.into_inner();
        let worker = self
            .ns
            .is_worker(WorkerId(r.worker_id), &r.session, peer)
            .await;
        let m = self.ns.get_mount(r.mount_id, worker)?;
        Ok(Response::new(GetMountResponse {
            mount: Some(m),
            redacted: !worker,
        }))
    }

    async fn resync(&self, req: Request<ResyncRequest>) -> Reply<ResyncResponse> {
        fault_rpc!("master.Resync", &req);
        let r = req.into_inner();
        let s = self.ns.resync(&r.path).await?;
        Ok(Response::new(ResyncResponse {
            dirs: s.dirs,
            entries: s.entries,
            changed: s.changed,
            removed: s.removed,
        }))
    }

    async fn free(&self, req: Request<FreeRequest>) -> Reply<FreeResponse> {
        fault_rpc!("master.Free", &req);
        let r = req.into_inner();
        let (files, blocks, bytes) = self
            .mutation("free", defers_sync(&r.caller), move |ns| {
                ns.free(&r.path, &caller(&r.caller))
            })
            .await?;
        Ok(Response::new(FreeResponse {
            files,
            blocks,
            bytes,
        }))
    }

    async fn sync_journal(&self, req: Request<SyncJournalRequest>) -> Reply<SyncJournalResponse> {
        fault_rpc!("master.SyncJournal", &req);
        self.ns.syncer.wait(self.ns.syncer.last_written()).await?;
        Ok(Response::new(SyncJournalResponse {}))
    }

    async fn submit_load(&self, req: Request<SubmitLoadRequest>) -> Reply<SubmitLoadResponse> {
        fault_rpc!("master.SubmitLoad", &req);
        // load jobs and uploads run on the leader alone
        self.ns.check_leads()?;
        let r = req.into_inner();
        let path = curvine_common::path::normalize(&r.path)?;
        let job = self
            .ns
            .submit_load(&path, r.recursive, caller(&r.caller))
            .await?;
        Ok(Response::new(SubmitLoadResponse { job: Some(job) }))
    }

    async fn get_load(&self, req: Request<GetLoadRequest>) -> Reply<GetLoadResponse> {
        fault_rpc!("master.GetLoad", &req);
        // load jobs and uploads run on the leader alone
        self.ns.check_leads()?;
        self.ns.resume_jobs().await?;
        let r = req.into_inner();
        let jobs = if r.job_id != 0 {
            vec![self.ns.jobs.get(r.job_id)?]
        } else if r.path.is_empty() {
            self.ns.jobs.list("")
        } else {
            self.ns
                .jobs
                .list(&curvine_common::path::normalize(&r.path)?)
        };
        Ok(Response::new(GetLoadResponse { jobs }))
    }

    async fn cancel_load(&self, req: Request<CancelLoadRequest>) -> Reply<CancelLoadResponse> {
        fault_rpc!("master.CancelLoad", &req);
        // load jobs and uploads run on the leader alone
        self.ns.check_leads()?;
        self.ns.resume_jobs().await?;
        let r = req.into_inner();
        let job = self.ns.jobs.cancel(r.job_id)?;
        // the cancel is recorded before it is acknowledged
        self.ns.job_upkeep().await?;
        Ok(Response::new(CancelLoadResponse { job: Some(job) }))
    }

    async fn persist(&self, req: Request<PersistRequest>) -> Reply<PersistResponse> {
        fault_rpc!("master.Persist", &req);
        // load jobs and uploads run on the leader alone
        self.ns.check_leads()?;
        let r = req.into_inner();
        let (files, bytes) = self.ns.persist_path(&r.path, &caller(&r.caller)).await?;
        Ok(Response::new(PersistResponse { files, bytes }))
    }

    async fn decommission(&self, req: Request<DecommissionRequest>) -> Reply<DecommissionResponse> {
        fault_rpc!("master.Decommission", &req);
        let r = req.into_inner();
        let worker_id = self
            .mutation("decommission", false, move |ns| {
                ns.decommission(&r, &caller(&r.caller))
            })
            .await?;
        Ok(Response::new(DecommissionResponse {
            worker_id: worker_id.0,
        }))
    }

    async fn list_masters(&self, req: Request<ListMastersRequest>) -> Reply<ListMastersResponse> {
        fault_rpc!("master.ListMasters", &req);
        let r = req.into_inner();
        superuser(&r.caller, "list masters")?;
        let Some(rep) = self.ns.replica.get() else {
            // one master without replication: itself
            let me = MasterInfo {
                id: self.ns.conf.node_id,
                address: format!("{}:{}", self.ns.conf.hostname, self.addr.port()),
                role: "leader".into(),
                last_log_index: 0,
                lag: 0,
                voter: true,
            };
            return Ok(Response::new(ListMastersResponse {
                masters: vec![me],
                term: 0,
            }));
        };
        let (masters, term) = rep.masters()?;
        Ok(Response::new(ListMastersResponse { masters, term }))
    }

    async fn add_master(&self, req: Request<AddMasterRequest>) -> Reply<AddMasterResponse> {
        fault_rpc!("master.AddMaster", &req);
        let r = req.into_inner();
        superuser(&r.caller, "add a master")?;
        let rep = replicated(&self.ns)?;
        rep.add_master(r.id, r.address.trim(), CATCH_UP).await?;
        Ok(Response::new(AddMasterResponse {}))
    }

    async fn remove_master(
        &self,
        req: Request<RemoveMasterRequest>,
    ) -> Reply<RemoveMasterResponse> {
        fault_rpc!("master.RemoveMaster", &req);
        let r = req.into_inner();
        superuser(&r.caller, "remove a master")?;
        let rep = replicated(&self.ns)?;
        rep.remove_master(r.id).await?;
        Ok(Response::new(RemoveMasterResponse {}))
    }
}
