//! Curvine's servers: the master (namespace and block map on RocksDB, worker registry,
//! placement) and the worker (tiered block store and data plane). They never import
//! each other; they meet only through `curvine-common`.

// First: its hook macros are used by the modules below.
#[macro_use]
pub mod fault;
pub mod master;
pub mod metrics;
mod rocks;
/// In-process clusters and test servers for tests (the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod ufs;
pub mod worker;
