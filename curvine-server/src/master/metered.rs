//! The master's service as clients see it: every call, gRPC or framed, goes through
//! [`Metered`], which counts it by method and status code and times it
//! (`curvine_master_calls_total`, `curvine_master_call_duration_seconds`). A call
//! that panics fails with `Internal` here, for its caller alone: the connection and
//! the other calls on it go on. Each call runs in a `master.call` span carrying its
//! method and request id (target `curvine::request`, at debug level: off by default),
//! and ends with one `answered` line in it.

use std::panic::AssertUnwindSafe;
use std::time::Instant;

use futures_util::FutureExt;
use tracing::{debug, debug_span, error, Instrument};

use curvine_common::proto::master_service_server::MasterService;
use curvine_common::proto::*;
use curvine_common::rpc::HasRequestId;
use curvine_common::types::REQUEST_TARGET;
use curvine_common::web::recording;
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
                    // no clock reading either when metrics are off (`web.metrics`)
                    let start = recording().then(Instant::now);
                    // fields are formatted only when the span is on (REQUEST_TARGET=debug)
                    let span = debug_span!(
                        target: REQUEST_TARGET,
                        "master.call",
                        method = stringify!($name),
                        req = %req.get_ref().request_id(),
                    );
                    let call = AssertUnwindSafe(self.0.$method(req)).catch_unwind();
                    let r = match call.instrument(span.clone()).await {
                        Ok(r) => r,
                        Err(_) => {
                            error!(call = stringify!($name), "master call panicked; failed it and serving on");
                            Err(Status::from(curvine_common::FsError::internal(format!(
                                "{}: the master failed the call",
                                stringify!($name)
                            ))))
                        }
                    };
                    let code = r.as_ref().err().map(Status::code);
                    if let Some(start) = start {
                        metrics::master().call(stringify!($name), start, code);
                    }
                    span.in_scope(|| {
                        debug!(
                            target: REQUEST_TARGET,
                            code = ?code.unwrap_or(tonic::Code::Ok),
                            micros = start.map_or(0, |s| s.elapsed().as_micros() as u64),
                            "answered"
                        )
                    });
                    r
                }
            )*
        }
    };
}

// every method of the protocol's table, so none goes unmetered
curvine_common::master_methods!(metered);
