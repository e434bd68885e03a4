//! What both ends of Curvine's wire agree on: the protocol (gRPC control plane and the
//! framed data plane), ids, typed errors, the cluster configuration and CRC32C chunking.

pub mod aligned;
pub mod block_read;
pub mod busy_poll;
pub mod checksum;
pub mod conf;
pub mod error;
pub mod frame;
pub mod logging;
pub mod mount;
pub mod path;
pub mod report;
pub mod rpc;
pub mod rpc_server;
pub mod tasks;
pub mod types;
pub mod web;

/// Generated protobuf and gRPC code (`proto/curvine.proto`).
#[allow(clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("curvine");
}

pub use conf::ClusterConf;
pub use error::{ErrorCode, FsError, FsResult};
pub use types::{BlockId, InodeId, RequestId, WorkerId};
