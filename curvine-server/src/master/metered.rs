//! The master's service as clients see it: every call, gRPC or framed, goes through
//! [`Metered`], which counts it by method and status code and times it
//! (`curvine_master_calls_total`, `curvine_master_call_duration_seconds`).

use std::time::Instant;

use curvine_common::proto::master_service_server::MasterService;
use curvine_common::proto::*;
use tonic::{Request, Response, Status};

use super::service::MasterSvc;
use crate::metrics;

pub struct Metered(pub MasterSvc);

macro_rules! metered {
    ($($method:ident($req:ty) -> $resp:ty, $name:literal;)*) => {
        #[tonic::async_trait]
        impl MasterService for Metered {
            $(
                async fn $method(&self, req: Request<$req>) -> Result<Response<$resp>, Status> {
                    let start = Instant::now();
                    let r = self.0.$method(req).await;
                    metrics::master().call($name, start, r.as_ref().err().map(Status::code));
                    r
                }
            )*
        }
    };
}

metered! {
    mkdir(MkdirRequest) -> MkdirResponse, "Mkdir";
    create(CreateRequest) -> CreateResponse, "Create";
    append(AppendRequest) -> AppendResponse, "Append";
    add_block(AddBlockRequest) -> AddBlockResponse, "AddBlock";
    complete(CompleteRequest) -> CompleteResponse, "Complete";
    sync(SyncRequest) -> SyncResponse, "Sync";
    abandon(AbandonRequest) -> AbandonResponse, "Abandon";
    renew_lease(RenewLeaseRequest) -> RenewLeaseResponse, "RenewLease";
    get_status(GetStatusRequest) -> GetStatusResponse, "GetStatus";
    list(ListRequest) -> ListResponse, "List";
    open(OpenRequest) -> OpenResponse, "Open";
    rename(RenameRequest) -> RenameResponse, "Rename";
    delete(DeleteRequest) -> DeleteResponse, "Delete";
    set_attr(SetAttrRequest) -> SetAttrResponse, "SetAttr";
    truncate(TruncateRequest) -> TruncateResponse, "Truncate";
    symlink(SymlinkRequest) -> SymlinkResponse, "Symlink";
    mknod(MknodRequest) -> MknodResponse, "Mknod";
    readlink(ReadlinkRequest) -> ReadlinkResponse, "Readlink";
    link(LinkRequest) -> LinkResponse, "Link";
    set_xattr(SetXattrRequest) -> SetXattrResponse, "SetXattr";
    get_xattr(GetXattrRequest) -> GetXattrResponse, "GetXattr";
    list_xattr(ListXattrRequest) -> ListXattrResponse, "ListXattr";
    remove_xattr(RemoveXattrRequest) -> RemoveXattrResponse, "RemoveXattr";
    report(ReportRequest) -> ReportResponse, "Report";
    register_worker(RegisterRequest) -> RegisterResponse, "RegisterWorker";
    heartbeat(HeartbeatRequest) -> HeartbeatResponse, "Heartbeat";
    report_blocks(BlockReportPage) -> BlockReportPageResponse, "ReportBlocks";
    report_bad_block(ReportBadBlockRequest) -> ReportBadBlockResponse, "ReportBadBlock";
    watch(WatchRequest) -> WatchResponse, "Watch";
    mount(MountRequest) -> MountResponse, "Mount";
    umount(UmountRequest) -> UmountResponse, "Umount";
    list_mounts(ListMountsRequest) -> ListMountsResponse, "ListMounts";
    get_mount(GetMountRequest) -> GetMountResponse, "GetMount";
    resync(ResyncRequest) -> ResyncResponse, "Resync";
    free(FreeRequest) -> FreeResponse, "Free";
    persist(PersistRequest) -> PersistResponse, "Persist";
}
