//! Persistent records (prost-encoded values in RocksDB) and the journal entry every
//! namespace mutation is expressed as.
//!
//! A `JournalEntry` is a list of record-level operations computed by the namespace under
//! its mutation lock. Applying it (`apply::step`) is a pure function of the entry: the
//! RocksDB writes and the effects on the master's memory (leases, replica accounting,
//! deletions to send to workers) both follow from the entry alone, so the same entries
//! can later be replicated by Raft and applied on followers unchanged.

use std::collections::BTreeMap;

/// One inode: a file, a directory or a symlink.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InodeRec {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// `proto::FileType` as i32.
    #[prost(int32, tag = "2")]
    pub file_type: i32,
    #[prost(uint32, tag = "3")]
    pub mode: u32,
    #[prost(uint32, tag = "4")]
    pub uid: u32,
    #[prost(uint32, tag = "5")]
    pub gid: u32,
    #[prost(int64, tag = "6")]
    pub mtime_ms: i64,
    #[prost(int64, tag = "7")]
    pub atime_ms: i64,
    #[prost(int64, tag = "8")]
    pub ctime_ms: i64,
    #[prost(uint32, tag = "9")]
    pub nlink: u32,
    #[prost(uint64, tag = "10")]
    pub len: u64,
    #[prost(uint64, tag = "11")]
    pub block_size: u64,
    #[prost(uint32, tag = "12")]
    pub replicas: u32,
    /// `proto::StorageTier` as i32.
    #[prost(int32, tag = "13")]
    pub storage_tier: i32,
    #[prost(bool, tag = "14")]
    pub complete: bool,
    #[prost(string, tag = "15")]
    pub symlink_target: String,
    /// Directories: number of entries.
    #[prost(uint32, tag = "16")]
    pub children: u32,
    /// Files: index of the next block to allocate (appends keep counting).
    #[prost(uint32, tag = "17")]
    pub next_block_index: u32,
    /// Files: block ids in file order (committed ones, then at most a few allocated).
    #[prost(uint64, repeated, tag = "18")]
    pub blocks: Vec<u64>,
    #[prost(btree_map = "string, bytes", tag = "19")]
    pub xattrs: BTreeMap<String, Vec<u8>>,
    /// The directory and name this inode was last linked under (its primary name).
    #[prost(uint64, tag = "20")]
    pub parent: u64,
    #[prost(string, tag = "21")]
    pub name: String,
    /// Set while an append is in progress, or once a writer synced (hflush): abandoning
    /// keeps the committed data instead of removing the file.
    #[prost(bool, tag = "22")]
    pub appending: bool,
    /// Device files: the device number.
    #[prost(uint32, tag = "23")]
    pub rdev: u32,
    /// Files: the last `tail_zeros` bytes of `len` lie past the last block (a hole left
    /// by extending the file); they read as zeros.
    #[prost(uint64, tag = "24")]
    pub tail_zeros: u64,
    /// A mount point: the id of the mount whose root this directory is.
    #[prost(uint64, tag = "25")]
    pub mount_id: u64,
    /// Under a mount: the under-store object or prefix this entry mirrors.
    #[prost(message, optional, boxed, tag = "26")]
    pub ufs: Option<Box<UfsRec>>,
    /// Nanoseconds within the second of `mtime_ms`, kept when a caller sets the time
    /// (utimensat). They count only while their millisecond agrees with `mtime_ms`
    /// (`curvine_common::types::time_nsec`): a writer that sets `mtime_ms` alone (to
    /// now) need not clear them, and records written before this field read as whole
    /// milliseconds.
    #[prost(uint32, tag = "27")]
    pub mtime_nsec: u32,
    /// Nanoseconds within the second of `atime_ms`, as `mtime_nsec`.
    #[prost(uint32, tag = "28")]
    pub atime_nsec: u32,
}

/// The under-store identity of an entry under a mount. A file's blocks are valid only
/// for this identity: when the store's length or ETag changes, they are dropped.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UfsRec {
    #[prost(uint64, tag = "1")]
    pub mount_id: u64,
    /// Relative to the mount's root; "" for the root itself.
    #[prost(string, tag = "2")]
    pub key: String,
    /// Empty when the store has none (then mtime and length identify the object).
    #[prost(string, tag = "3")]
    pub etag: String,
    #[prost(int64, tag = "4")]
    pub mtime_ms: i64,
    #[prost(uint64, tag = "5")]
    pub len: u64,
    /// The under-store holds this entry's data.
    #[prost(bool, tag = "6")]
    pub persisted: bool,
    /// When the status was loaded or last checked (trusted for the sync interval).
    #[prost(int64, tag = "7")]
    pub loaded_ms: i64,
    /// Directories: when their listing was loaded (0: never).
    #[prost(int64, tag = "8")]
    pub listed_ms: i64,
}

/// Where one replica of a block lives.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Loc {
    #[prost(uint32, tag = "1")]
    pub worker_id: u32,
    #[prost(int32, tag = "2")]
    pub tier: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct BlockRec {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub inode: u64,
    #[prost(uint64, tag = "3")]
    pub len: u64,
    #[prost(message, repeated, tag = "4")]
    pub locs: Vec<Loc>,
    /// False between add_block (allocated) and the writer reporting it committed.
    #[prost(bool, tag = "5")]
    pub committed: bool,
    /// A block of an under-store file: with no replica it is not lost, a worker fetches
    /// it again from the store.
    #[prost(bool, tag = "6")]
    pub ufs: bool,
}

/// Id allocators and statistics kept in `meta`.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Counters {
    #[prost(uint64, tag = "1")]
    pub next_inode: u64,
    #[prost(uint32, tag = "2")]
    pub next_worker: u32,
    #[prost(uint64, tag = "3")]
    pub files: u64,
    #[prost(uint64, tag = "4")]
    pub dirs: u64,
    #[prost(uint64, tag = "5")]
    pub blocks: u64,
    #[prost(uint64, tag = "6")]
    pub next_mount: u64,
    /// Mutations in the retry cache (`retry_cache`).
    #[prost(uint64, tag = "7")]
    pub retry_entries: u64,
    /// The next load job's id (`jobs`); 0 counts as 1.
    #[prost(uint64, tag = "8")]
    pub next_job: u64,
}

/// A load job as recorded (`jobs::META_JOB_PREFIX`): what a restarted master or a new
/// leader needs to carry it on, or to answer for it once it ended.
#[derive(Clone, PartialEq, prost::Message)]
pub struct JobRec {
    /// Its id, path and start; once it ended, its state and figures at the end.
    #[prost(message, optional, tag = "1")]
    pub job: Option<curvine_common::proto::LoadJob>,
    #[prost(bool, tag = "2")]
    pub recursive: bool,
    /// Who submitted it: its files are listed and opened with their rights.
    #[prost(message, optional, tag = "3")]
    pub caller: Option<curvine_common::proto::CallerInfo>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EdgeRec {
    #[prost(uint64, tag = "1")]
    pub parent: u64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(uint64, tag = "3")]
    pub child: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WorkerBlockRec {
    #[prost(uint32, tag = "1")]
    pub worker_id: u32,
    #[prost(uint64, tag = "2")]
    pub block_id: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MetaRec {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// A writer's lease on a file under construction.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseRec {
    #[prost(uint64, tag = "1")]
    pub inode: u64,
    #[prost(uint64, tag = "2")]
    pub client_id: u64,
}

/// One replica of a block: `len` bytes in `tier` of `worker_id`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReplicaRec {
    #[prost(uint32, tag = "1")]
    pub worker_id: u32,
    #[prost(uint64, tag = "2")]
    pub block_id: u64,
    #[prost(int32, tag = "3")]
    pub tier: i32,
    #[prost(uint64, tag = "4")]
    pub len: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Op {
    #[prost(
        oneof = "op::Kind",
        tags = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15"
    )]
    pub kind: Option<op::Kind>,
}

pub mod op {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Kind {
        #[prost(message, tag = "1")]
        PutInode(super::InodeRec),
        #[prost(uint64, tag = "2")]
        DelInode(u64),
        #[prost(message, tag = "3")]
        PutEdge(super::EdgeRec),
        #[prost(message, tag = "4")]
        DelEdge(super::EdgeRec),
        #[prost(message, tag = "5")]
        PutBlock(super::BlockRec),
        #[prost(uint64, tag = "6")]
        DelBlock(u64),
        #[prost(message, tag = "7")]
        PutWorkerBlock(super::WorkerBlockRec),
        #[prost(message, tag = "8")]
        DelWorkerBlock(super::WorkerBlockRec),
        #[prost(message, tag = "9")]
        PutMeta(super::MetaRec),
        #[prost(bytes, tag = "10")]
        DelMeta(Vec<u8>),
        // The kinds below write nothing to RocksDB. They state what the master's memory
        // learns from the entry where the records cannot tell it: a lease granted or
        // released without an open-file record changing, a replica committed on a
        // worker that already held its location, a replica forgotten because its worker
        // lost it (nothing to delete) or dropped by the master (to delete).
        /// A writer's lease starts.
        #[prost(message, tag = "11")]
        GrantLease(super::LeaseRec),
        /// The lease on this inode ends.
        #[prost(uint64, tag = "12")]
        ReleaseLease(u64),
        /// A replica was committed (its worker's reservation becomes used space).
        #[prost(message, tag = "13")]
        ReplicaCommitted(super::ReplicaRec),
        /// A replica left the block map (its worker's reservation, if any, ends).
        #[prost(message, tag = "14")]
        ReplicaFreed(super::WorkerBlockRec),
        /// A replica the worker must delete.
        #[prost(message, tag = "15")]
        DeleteReplica(super::ReplicaRec),
    }
}

/// One namespace mutation, applied atomically.
#[derive(Clone, PartialEq, prost::Message)]
pub struct JournalEntry {
    #[prost(message, repeated, tag = "1")]
    pub ops: Vec<Op>,
}

impl JournalEntry {
    pub fn push(&mut self, kind: op::Kind) {
        self.ops.push(Op { kind: Some(kind) });
    }
}
