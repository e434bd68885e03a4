//! Registration and heartbeats against a fake master that implements only
//! RegisterWorker and Heartbeat.

use std::sync::Mutex;

use curvine_common::proto::master_service_server::{MasterService, MasterServiceServer};
use curvine_common::proto::*;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

use super::*;
use crate::worker::heartbeat::AUTH_METADATA_KEY;

#[derive(Default)]
struct FakeState {
    registers: Vec<RegisterRequest>,
    /// Block report pages, each with the number of registrations before it.
    pages: Vec<(usize, BlockReportPage)>,
    heartbeats: Vec<HeartbeatRequest>,
    /// Blocks to hand out in the next heartbeat reply.
    to_delete: Vec<u64>,
    /// Reply reregister=true to the next heartbeat.
    forget: bool,
    tokens: Vec<String>,
}

#[derive(Clone, Default)]
struct FakeMaster(Arc<Mutex<FakeState>>);

impl FakeMaster {
    fn with<R>(&self, f: impl FnOnce(&mut FakeState) -> R) -> R {
        f(&mut self.0.lock().unwrap())
    }
}

macro_rules! unimplemented_rpcs {
    ($($name:ident($req:ty) -> $resp:ty;)*) => {
        // the expansion of #[async_trait] (which cannot see into macro output)
        $(fn $name<'a, 'at>(
            &'a self,
            _r: Request<$req>,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response<$resp>, Status>> + Send + 'at>>
        where
            'a: 'at,
            Self: 'at,
        {
            Box::pin(async { Err(Status::unimplemented(stringify!($name))) })
        })*
    };
}

#[tonic::async_trait]
impl MasterService for FakeMaster {
    unimplemented_rpcs! {
        mkdir(MkdirRequest) -> MkdirResponse;
        create(CreateRequest) -> CreateResponse;
        append(AppendRequest) -> AppendResponse;
        add_block(AddBlockRequest) -> AddBlockResponse;
        complete(CompleteRequest) -> CompleteResponse;
        abandon(AbandonRequest) -> AbandonResponse;
        sync(SyncRequest) -> SyncResponse;
        mknod(MknodRequest) -> MknodResponse;
        renew_lease(RenewLeaseRequest) -> RenewLeaseResponse;
        get_status(GetStatusRequest) -> GetStatusResponse;
        list(ListRequest) -> ListResponse;
        open(OpenRequest) -> OpenResponse;
        rename(RenameRequest) -> RenameResponse;
        delete(DeleteRequest) -> DeleteResponse;
        set_attr(SetAttrRequest) -> SetAttrResponse;
        truncate(TruncateRequest) -> TruncateResponse;
        symlink(SymlinkRequest) -> SymlinkResponse;
        readlink(ReadlinkRequest) -> ReadlinkResponse;
        link(LinkRequest) -> LinkResponse;
        set_xattr(SetXattrRequest) -> SetXattrResponse;
        get_xattr(GetXattrRequest) -> GetXattrResponse;
        list_xattr(ListXattrRequest) -> ListXattrResponse;
        remove_xattr(RemoveXattrRequest) -> RemoveXattrResponse;
        report(ReportRequest) -> ReportResponse;
        report_bad_block(ReportBadBlockRequest) -> ReportBadBlockResponse;
        watch(WatchRequest) -> WatchResponse;
        mount(MountRequest) -> MountResponse;
        umount(UmountRequest) -> UmountResponse;
        list_mounts(ListMountsRequest) -> ListMountsResponse;
        get_mount(GetMountRequest) -> GetMountResponse;
        resync(ResyncRequest) -> ResyncResponse;
        free(FreeRequest) -> FreeResponse;
        sync_journal(SyncJournalRequest) -> SyncJournalResponse;
        submit_load(SubmitLoadRequest) -> SubmitLoadResponse;
        get_load(GetLoadRequest) -> GetLoadResponse;
        cancel_load(CancelLoadRequest) -> CancelLoadResponse;
        persist(PersistRequest) -> PersistResponse;
        decommission(DecommissionRequest) -> DecommissionResponse;
        list_masters(ListMastersRequest) -> ListMastersResponse;
        add_master(AddMasterRequest) -> AddMasterResponse;
        remove_master(RemoveMasterRequest) -> RemoveMasterResponse;
    }

    async fn register_worker(
        &self,
        r: Request<RegisterRequest>,
    ) -> Result<Response<RegisterResponse>, Status> {
        let token = r
            .metadata()
            .get(AUTH_METADATA_KEY)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let req = r.into_inner();
        self.with(|s| {
            s.tokens.push(token);
            s.registers.push(req);
        });
        Ok(Response::new(RegisterResponse {
            worker_id: 17,
            cluster_id: "c-1".into(),
            session: String::new(),
        }))
    }

    async fn report_blocks(
        &self,
        r: Request<BlockReportPage>,
    ) -> Result<Response<BlockReportPageResponse>, Status> {
        let page = r.into_inner();
        self.with(|s| s.pages.push((s.registers.len(), page)));
        Ok(Response::new(BlockReportPageResponse { reregister: false }))
    }

    async fn heartbeat(
        &self,
        r: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatResponse>, Status> {
        let req = r.into_inner();
        let reply = self.with(|s| {
            // a restarted master knows only workers that registered with it
            let known = req.worker_id == 17 && !s.registers.is_empty();
            s.heartbeats.push(req);
            HeartbeatResponse {
                delete_blocks: std::mem::take(&mut s.to_delete),
                reregister: std::mem::take(&mut s.forget) || !known,
                ..Default::default()
            }
        });
        Ok(Response::new(reply))
    }
}

/// Serve the fake master on `listener` until `cancel` fires.
fn spawn_master(
    listener: TcpListener,
    master: FakeMaster,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(MasterServiceServer::new(master))
            .serve_with_incoming_shutdown(
                TcpListenerStream::new(listener),
                cancel.cancelled_owned(),
            )
            .await;
    })
}

fn worker_conf(root: &Path, master_port: u16) -> ClusterConf {
    let mut conf = conf_with(root, &["MEM:1MB"]);
    conf.master.rpc_port = master_port;
    conf.worker.heartbeat_interval = curvine_common::conf::Dur(Duration::from_millis(50));
    conf.cluster.auth_token = "tok".into();
    conf.worker.block_report_page = 2;
    conf
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_heartbeats_and_deletes_on_request() {
    let tmp = tempfile::tempdir().unwrap();
    // the worker starts before the master
    let mlistener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mport = mlistener.local_addr().unwrap().port();
    drop(mlistener);
    let conf = worker_conf(tmp.path(), mport);
    let wl = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let waddr = wl.local_addr().unwrap();
    let wcancel = CancellationToken::new();
    let worker = tokio::spawn(crate::worker::run(conf.clone(), wl, wcancel.clone()));

    let master = FakeMaster::default();
    let mcancel = CancellationToken::new();
    let mlistener = TcpListener::bind(("127.0.0.1", mport)).await.unwrap();
    let mtask = spawn_master(mlistener, master.clone(), mcancel.clone());
    assert!(wait_until(10, || master.with(|s| !s.registers.is_empty())).await);
    let reg = master.with(|s| s.registers[0].clone());
    assert_eq!(reg.worker_id, 0);
    assert_eq!(
        reg.address.as_ref().unwrap().data_port,
        u32::from(waddr.port())
    );
    assert_eq!(reg.tiers.len(), 1);
    assert_eq!(reg.tiers[0].capacity, 1 << 20);
    assert_eq!(master.with(|s| s.tokens[0].clone()), "tok");
    // the id is persisted in the tier dir
    let id_file = tmp.path().join("t0").join("worker.id");
    assert!(
        wait_until(5, || std::fs::read_to_string(&id_file)
            .is_ok_and(|s| s == "17"))
        .await
    );

    // a committed block shows up in an incremental report
    let mut s = connect(waddr).await;
    let data = pattern(CS * 2, 1);
    write_on(&mut s, 77, &data, CS, 0, "tok").await.unwrap();
    let reported = |m: &FakeMaster| {
        m.with(|s| {
            s.heartbeats.iter().any(|h| {
                h.added
                    .iter()
                    .any(|b| b.block_id == 77 && b.len == data.len() as u64)
            })
        })
    };
    assert!(wait_until(10, || reported(&master)).await);

    // the master asks to delete it: gone from disk and reported as removed
    master.with(|s| s.to_delete.push(77));
    assert!(
        wait_until(10, || master
            .with(|s| s.heartbeats.iter().any(|h| h.removed.contains(&77))))
        .await
    );
    assert!(crate::worker::block_path(&conf.tier_dirs().unwrap(), 77).is_none());
    let hb = master.with(|s| s.heartbeats.last().unwrap().clone());
    assert_eq!(hb.worker_id, 17);
    assert_eq!(hb.tiers[0].used, 0);

    // the master forgets the worker: it re-registers with its id, and reports its blocks
    // in pages of two (worker_conf), in id order, covering every id
    for id in [14, 10, 12, 11, 13] {
        write_on(&mut s, id, &pattern(CS, id as u8), CS, 0, "tok")
            .await
            .unwrap();
    }
    master.with(|s| s.forget = true);
    assert!(wait_until(10, || master.with(|s| s.registers.len() >= 2)).await);
    assert_eq!(master.with(|s| s.registers[1].worker_id), 17);
    assert!(master.with(|s| s.registers[1].paged && s.registers[1].blocks.is_empty()));
    let last_page = |m: &FakeMaster, regs: usize| {
        m.with(|s| {
            s.pages
                .iter()
                .any(|(r, p)| *r == regs && p.last == u64::MAX)
        })
    };
    assert!(wait_until(10, || last_page(&master, 2)).await);
    let pages: Vec<(u64, u64, Vec<u64>)> = master.with(|s| {
        s.pages
            .iter()
            .filter(|(r, _)| *r == 2)
            .map(|(_, p)| {
                let ids = p.blocks.iter().map(|b| b.block_id).collect();
                (p.first, p.last, ids)
            })
            .collect()
    });
    assert_eq!(
        pages,
        [
            (0, 11, vec![10, 11]),
            (12, 13, vec![12, 13]),
            (14, u64::MAX, vec![14])
        ]
    );
    let page = master.with(|s| s.pages.last().unwrap().1.clone());
    assert_eq!(page.worker_id, 17);
    assert_eq!(page.blocks[0].len, CS as u64);
    assert_eq!(page.blocks[0].tier, StorageTier::Mem as i32);
    // the first registration, with no blocks, sent one page covering every id
    let first: Vec<_> = master.with(|s| {
        s.pages
            .iter()
            .filter(|(r, _)| *r == 1)
            .map(|(_, p)| (p.first, p.last, p.blocks.len()))
            .collect()
    });
    assert_eq!(first, [(0, u64::MAX, 0)]);

    // master restart: the worker comes back and registers again
    mcancel.cancel();
    mtask.await.unwrap();
    let before = master.with(|s| s.registers.len());
    let master2 = FakeMaster::default();
    let mcancel2 = CancellationToken::new();
    let mlistener = bind_retry(mport).await;
    let mtask2 = spawn_master(mlistener, master2.clone(), mcancel2.clone());
    assert!(wait_until(10, || master2.with(|s| !s.registers.is_empty())).await);
    assert_eq!(master2.with(|s| s.registers[0].cluster_id.clone()), "c-1");
    assert_eq!(master.with(|s| s.registers.len()), before);

    wcancel.cancel();
    tokio::time::timeout(Duration::from_secs(10), worker)
        .await
        .expect("worker stops after cancel")
        .unwrap()
        .unwrap();
    mcancel2.cancel();
    mtask2.await.unwrap();
}

async fn bind_retry(port: u16) -> TcpListener {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match TcpListener::bind(("127.0.0.1", port)).await {
            Ok(l) => return l,
            Err(e) if tokio::time::Instant::now() > deadline => panic!("rebind {port}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// A master cut off the network, as the worker sees it: the connection is made (the
/// kernel accepts it), then nothing ever comes back, neither replies nor HTTP/2 pings.
/// Returns its address and the bytes received so far.
async fn silent_master() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncReadExt;
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let got = Arc::new(AtomicUsize::new(0));
    let g = got.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let g = g.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = s.read(&mut buf).await {
                    g.fetch_add(n, Ordering::Relaxed);
                }
            });
        }
    });
    (addr, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_never_answers_is_left_for_the_next() {
    let tmp = tempfile::tempdir().unwrap();
    let (silent, got) = silent_master().await;
    let master = FakeMaster::default();
    let mcancel = CancellationToken::new();
    let ml = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let maddr = ml.local_addr().unwrap();
    let mtask = spawn_master(ml, master.clone(), mcancel.clone());
    let mut conf = worker_conf(tmp.path(), maddr.port());
    // the silent master first; a call to it would wait this long without pings
    conf.master.node_id = 1;
    conf.master.peers = vec![format!("1={silent}"), format!("2={maddr}")];
    conf.client.rpc_timeout = curvine_common::conf::Dur(Duration::from_secs(600));
    conf.client.connect_timeout = curvine_common::conf::Dur(Duration::from_secs(1));
    let wl = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let wcancel = CancellationToken::new();
    let worker = tokio::spawn(crate::worker::run(conf, wl, wcancel.clone()));

    assert!(
        wait_until(60, || master.with(|s| !s.registers.is_empty())).await,
        "the worker stayed on the silent master"
    );
    // it had sent its registration there (the connection was made, the call waited)
    assert!(got.load(std::sync::atomic::Ordering::Relaxed) > 0);

    wcancel.cancel();
    tokio::time::timeout(Duration::from_secs(10), worker)
        .await
        .expect("worker stops after cancel")
        .unwrap()
        .unwrap();
    mcancel.cancel();
    mtask.await.unwrap();
}

#[tokio::test]
async fn startup_error_names_the_bad_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("notadir");
    std::fs::write(&file, b"x").unwrap();
    let mut conf = ClusterConf::default();
    conf.worker.data_dir = vec![format!("[SSD:1MB]{}", file.display())];
    let wl = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let e = crate::worker::run(conf, wl, CancellationToken::new())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("notadir"), "{e}");
}

#[test]
fn early_heartbeat_waits_for_one_that_started_after_the_request() {
    use crate::worker::heartbeat::EarlyHeartbeat;
    let hb = Arc::new(EarlyHeartbeat::default());
    // no heartbeat task registered: nothing to wait for
    assert!(!hb.request_and_wait());

    hb.set_registered(Some(Duration::from_secs(600)));
    let before = hb.asked();
    let waiter = {
        let hb = hb.clone();
        std::thread::spawn(move || hb.request_and_wait())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while hb.asked() == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the request never came"
        );
        std::thread::yield_now();
    }
    // a heartbeat that began before the request does not answer it
    hb.answered(before);
    assert!(!waiter.is_finished());
    hb.answered(hb.asked());
    assert!(waiter.join().unwrap());

    // a task going away releases its waiters
    let waiter = {
        let hb = hb.clone();
        std::thread::spawn(move || hb.request_and_wait())
    };
    let asked = hb.asked();
    while hb.asked() == asked {
        std::thread::yield_now();
    }
    hb.set_registered(None);
    waiter.join().unwrap();
}
