//! Curvine's servers: the master (namespace and block map on RocksDB, worker registry,
//! placement) and the worker (tiered block store and data plane). They never import
//! each other; they meet only through `curvine-common`.

pub mod master;
pub mod testing;
pub mod worker;
