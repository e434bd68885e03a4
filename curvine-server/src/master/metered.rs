//! The master's service as clients see it: every call, gRPC or framed, goes through
//! [`Metered`], which counts it by method and status code and times it
//! (`curvine_master_calls_total`, `curvine_master_call_duration_seconds`). A call
//! that panics fails with `Internal` here, for its caller alone: the connection and
//! the other calls on it go on.

use std::panic::AssertUnwindSafe;
use std::time::Instant;

use futures_util::FutureExt;
use tracing::error;

use curvine_common::proto::master_service_server::MasterService;
use curvine_common::proto::*;
use tonic::{Request, Response, Status};

use super::service::MasterSvc;
use crate::metrics;

pub struct Metered(pub MasterSvc);

macro_rules! metered {
    ($($id:literal $name:ident $req:ident $resp:ident $method:ident;)*) => {
        #[tonic::async_trait]
        impl MasterService for Metered {
            $(
                async fn $method(&self, req: Request<$req>) -> Result<Response<$resp>, Status> {
                    let start = Instant::now();
                    let r = match AssertUnwindSafe(self.0.$method(req)).catch_unwind().await {
                        Ok(r) => r,
                        Err(_) => {
                            error!(call = stringify!($name), "master call panicked; failed it and serving on");
                            Err(Status::from(curvine_common::FsError::internal(format!(
                                "{}: the master failed the call",
                                stringify!($name)
                            ))))
                        }
                    };
                    metrics::master().call(
                        stringify!($name),
                        start,
                        r.as_ref().err().map(Status::code),
                    );
                    r
                }
            )*
        }
    };
}

// every method of the protocol's table, so none goes unmetered
curvine_common::master_methods!(metered);
