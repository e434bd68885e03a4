//! A tiny in-test master on 127.0.0.1:0 (framed transport): just enough of the service (create,
//! add_block, complete, open, renew_lease) to drive `FsWriter` and `FsReader` against a
//! fake worker.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use curvine_common::proto::master_service_server::MasterService;
use curvine_common::proto::*;
use curvine_common::FsError;
use curvine_common::{rpc, rpc_server};
use tokio::io::AsyncReadExt;
use tonic::{Request, Response, Status};

#[derive(Default)]
pub(crate) struct MasterState {
    pub files: HashMap<String, (FileStatus, Vec<LocatedBlock>)>,
    pub completes: Vec<CompleteRequest>,
    pub add_blocks: Vec<AddBlockRequest>,
    pub renewals: usize,
}

#[derive(Clone)]
pub(crate) struct FakeMaster {
    pub state: Arc<Mutex<MasterState>>,
    block_size: u64,
    location: BlockLocation,
}

impl FakeMaster {
    /// Serve on 127.0.0.1:0; blocks go to `location`.
    pub(crate) async fn start(
        block_size: u64,
        location: BlockLocation,
    ) -> (FakeMaster, SocketAddr) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let m = FakeMaster {
            state: Arc::default(),
            block_size,
            location,
        };
        let svc = Arc::new(m.clone());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let svc = svc.clone();
                tokio::spawn(async move {
                    let mut magic = [0u8; 4];
                    if s.read_exact(&mut magic).await.is_ok() && magic == rpc::HELLO_MAGIC {
                        rpc_server::serve(s, svc, |_| true, std::future::pending()).await;
                    }
                });
            }
        });
        (m, addr)
    }

    fn find_by_id(st: &mut MasterState, id: u64) -> Option<&mut (FileStatus, Vec<LocatedBlock>)> {
        st.files.values_mut().find(|(s, _)| s.id == id)
    }

    fn apply(blocks: &mut [LocatedBlock], done: &[CommittedBlock]) {
        for c in done {
            if let Some(b) = blocks.iter_mut().find(|b| b.block_id == c.block_id) {
                b.len = c.len;
            }
        }
        let mut off = 0;
        for b in blocks.iter_mut() {
            b.offset = off;
            off += b.len;
        }
    }
}

type R<T> = Result<Response<T>, Status>;

#[allow(clippy::result_large_err)]
fn unimplemented<T>() -> R<T> {
    Err(Status::unimplemented("not in the fake master"))
}

#[tonic::async_trait]
impl MasterService for FakeMaster {
    async fn create(&self, r: Request<CreateRequest>) -> R<CreateResponse> {
        let r = r.into_inner();
        let mut st = self.state.lock().unwrap();
        if st.files.contains_key(&r.path) && !r.overwrite {
            return Err(FsError::exists(r.path).into());
        }
        let status = FileStatus {
            id: st.files.len() as u64 + 100,
            path: r.path.clone(),
            name: r.path.rsplit('/').next().unwrap_or("").into(),
            file_type: FileType::File as i32,
            block_size: self.block_size,
            mode: r.mode,
            ..Default::default()
        };
        st.files.insert(r.path, (status.clone(), Vec::new()));
        Ok(Response::new(CreateResponse {
            status: Some(status),
            first_block: None,
        }))
    }
    async fn add_block(&self, r: Request<AddBlockRequest>) -> R<AddBlockResponse> {
        let r = r.into_inner();
        let mut st = self.state.lock().unwrap();
        st.add_blocks.push(r.clone());
        let (_, blocks) = Self::find_by_id(&mut st, r.file_id)
            .ok_or_else(|| Status::from(FsError::not_found(r.path.clone())))?;
        Self::apply(blocks, &r.previous);
        let offset = blocks.iter().map(|b| b.len).sum();
        let b = LocatedBlock {
            block_id: (r.file_id << 24) | blocks.len() as u64,
            offset,
            len: 0,
            locations: vec![self.location.clone()],
            ufs: None,
        };
        blocks.push(b.clone());
        Ok(Response::new(AddBlockResponse { block: Some(b) }))
    }
    async fn complete(&self, r: Request<CompleteRequest>) -> R<CompleteResponse> {
        let r = r.into_inner();
        let mut st = self.state.lock().unwrap();
        st.completes.push(r.clone());
        let (status, blocks) = Self::find_by_id(&mut st, r.file_id)
            .ok_or_else(|| Status::from(FsError::not_found(r.path.clone())))?;
        Self::apply(blocks, &r.blocks);
        let sum: u64 = blocks.iter().map(|b| b.len).sum();
        if sum != r.len {
            return Err(
                FsError::invalid(format!("blocks sum to {sum}, complete says {}", r.len)).into(),
            );
        }
        status.len = r.len;
        status.complete = true;
        Ok(Response::new(CompleteResponse {
            status: Some(status.clone()),
        }))
    }
    async fn sync(&self, r: Request<SyncRequest>) -> R<SyncResponse> {
        let r = r.into_inner();
        let mut st = self.state.lock().unwrap();
        let (status, blocks) = Self::find_by_id(&mut st, r.file_id)
            .ok_or_else(|| Status::from(FsError::not_found(r.path.clone())))?;
        Self::apply(blocks, &r.blocks);
        status.len = r.len;
        Ok(Response::new(SyncResponse {
            status: Some(status.clone()),
        }))
    }
    async fn mknod(&self, _r: Request<MknodRequest>) -> R<MknodResponse> {
        Err(Status::unimplemented("mknod"))
    }
    async fn open(&self, r: Request<OpenRequest>) -> R<OpenResponse> {
        let r = r.into_inner();
        let st = self.state.lock().unwrap();
        let (status, blocks) = st
            .files
            .get(&r.path)
            .ok_or_else(|| Status::from(FsError::not_found(r.path.clone())))?;
        Ok(Response::new(OpenResponse {
            status: Some(status.clone()),
            blocks: blocks.clone(),
        }))
    }
    async fn renew_lease(&self, _r: Request<RenewLeaseRequest>) -> R<RenewLeaseResponse> {
        self.state.lock().unwrap().renewals += 1;
        Ok(Response::new(RenewLeaseResponse {}))
    }
    async fn mkdir(&self, _r: Request<MkdirRequest>) -> R<MkdirResponse> {
        unimplemented()
    }
    async fn append(&self, _r: Request<AppendRequest>) -> R<AppendResponse> {
        unimplemented()
    }
    async fn abandon(&self, _r: Request<AbandonRequest>) -> R<AbandonResponse> {
        unimplemented()
    }
    async fn get_status(&self, _r: Request<GetStatusRequest>) -> R<GetStatusResponse> {
        unimplemented()
    }
    async fn list(&self, _r: Request<ListRequest>) -> R<ListResponse> {
        unimplemented()
    }
    async fn rename(&self, _r: Request<RenameRequest>) -> R<RenameResponse> {
        unimplemented()
    }
    async fn delete(&self, _r: Request<DeleteRequest>) -> R<DeleteResponse> {
        unimplemented()
    }
    async fn set_attr(&self, _r: Request<SetAttrRequest>) -> R<SetAttrResponse> {
        unimplemented()
    }
    async fn truncate(&self, _r: Request<TruncateRequest>) -> R<TruncateResponse> {
        unimplemented()
    }
    async fn symlink(&self, _r: Request<SymlinkRequest>) -> R<SymlinkResponse> {
        unimplemented()
    }
    async fn readlink(&self, _r: Request<ReadlinkRequest>) -> R<ReadlinkResponse> {
        unimplemented()
    }
    async fn link(&self, _r: Request<LinkRequest>) -> R<LinkResponse> {
        unimplemented()
    }
    async fn set_xattr(&self, _r: Request<SetXattrRequest>) -> R<SetXattrResponse> {
        unimplemented()
    }
    async fn get_xattr(&self, _r: Request<GetXattrRequest>) -> R<GetXattrResponse> {
        unimplemented()
    }
    async fn list_xattr(&self, _r: Request<ListXattrRequest>) -> R<ListXattrResponse> {
        unimplemented()
    }
    async fn remove_xattr(&self, _r: Request<RemoveXattrRequest>) -> R<RemoveXattrResponse> {
        unimplemented()
    }
    async fn report(&self, _r: Request<ReportRequest>) -> R<ReportResponse> {
        unimplemented()
    }
    async fn watch(&self, _r: Request<WatchRequest>) -> R<WatchResponse> {
        unimplemented()
    }
    async fn register_worker(&self, _r: Request<RegisterRequest>) -> R<RegisterResponse> {
        unimplemented()
    }
    async fn heartbeat(&self, _r: Request<HeartbeatRequest>) -> R<HeartbeatResponse> {
        unimplemented()
    }
    async fn report_blocks(&self, _r: Request<BlockReportPage>) -> R<BlockReportPageResponse> {
        unimplemented()
    }
    async fn report_bad_block(
        &self,
        _r: Request<ReportBadBlockRequest>,
    ) -> R<ReportBadBlockResponse> {
        Ok(tonic::Response::new(ReportBadBlockResponse::default()))
    }
    async fn mount(&self, _r: Request<MountRequest>) -> R<MountResponse> {
        unimplemented()
    }
    async fn umount(&self, _r: Request<UmountRequest>) -> R<UmountResponse> {
        unimplemented()
    }
    async fn list_mounts(&self, _r: Request<ListMountsRequest>) -> R<ListMountsResponse> {
        unimplemented()
    }
    async fn get_mount(&self, _r: Request<GetMountRequest>) -> R<GetMountResponse> {
        unimplemented()
    }
    async fn resync(&self, _r: Request<ResyncRequest>) -> R<ResyncResponse> {
        unimplemented()
    }
    async fn free(&self, _r: Request<FreeRequest>) -> R<FreeResponse> {
        unimplemented()
    }
    async fn sync_journal(&self, _r: Request<SyncJournalRequest>) -> R<SyncJournalResponse> {
        Ok(Response::new(SyncJournalResponse {}))
    }
    async fn submit_load(&self, _r: Request<SubmitLoadRequest>) -> R<SubmitLoadResponse> {
        unimplemented()
    }
    async fn get_load(&self, _r: Request<GetLoadRequest>) -> R<GetLoadResponse> {
        unimplemented()
    }
    async fn cancel_load(&self, _r: Request<CancelLoadRequest>) -> R<CancelLoadResponse> {
        unimplemented()
    }
    async fn persist(&self, _r: Request<PersistRequest>) -> R<PersistResponse> {
        unimplemented()
    }
    async fn decommission(&self, _r: Request<DecommissionRequest>) -> R<DecommissionResponse> {
        unimplemented()
    }

    async fn list_masters(&self, _r: Request<ListMastersRequest>) -> R<ListMastersResponse> {
        unimplemented()
    }

    async fn add_master(&self, _r: Request<AddMasterRequest>) -> R<AddMasterResponse> {
        unimplemented()
    }

    async fn remove_master(&self, _r: Request<RemoveMasterRequest>) -> R<RemoveMasterResponse> {
        unimplemented()
    }
}
