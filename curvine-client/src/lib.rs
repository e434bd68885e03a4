//! Curvine's Rust client: `CurvineFs` (namespace calls to the master over gRPC),
//! `FsWriter` and `FsReader` (block data over the workers' framed data plane, or
//! short-circuit through the block files when the worker is on this host).

mod block_reader;
mod block_writer;
mod fs;
mod master;
mod master_conn;
pub mod metrics;
mod options;
mod pool;
mod reader;
pub mod retry;
pub mod stdout;
mod writer;

#[cfg(test)]
mod fake_master;
#[cfg(test)]
mod fake_worker;
#[cfg(test)]
mod tests;

pub use curvine_common::proto;
pub use curvine_common::proto::{CallerInfo, FileStatus, FileType, StorageTier};
pub use curvine_common::{ClusterConf, FsError, FsResult};
pub use fs::{CurvineFs, Listing};
pub use options::{CreateOptions, SetAttr};
pub use reader::FsReader;
pub use writer::FsWriter;
