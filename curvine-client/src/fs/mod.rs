//! `CurvineFs`: the client handle. Cheap to clone (an `Arc` inside); holds one gRPC
//! channel to the master, the worker connection pool and the lease renewer. The
//! namespace calls are here; the calls writers make and the leases they hold are in
//! `writes`, the under-store, job and cluster calls in `cluster`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use curvine_common::path::{normalize_within, MAX_MOUNT_PATH_LEN, MAX_PATH_LEN};
use curvine_common::proto::{self, CallerInfo, FileStatus, StorageTier};
use curvine_common::rpc::HasRequestId;
use curvine_common::{ClusterConf, FsError, FsResult, RequestId, WorkerId};
use tokio::sync::watch;

use crate::block_reader::BlockReadOpts;
use crate::block_writer::BlockWriteOpts;
use crate::master::{CallKind, MasterClient};
use crate::options::{CreateOptions, SetAttr};
use crate::pool::WorkerPool;
use crate::reader::FsReader;
use crate::writer::{FsWriter, SpareCopies};

/// One master call: `rpc!(self, "name", Idempotent|Mutation|Once, request)` is the future of
/// `MasterClient::call` (`name` labels errors and logs; the request's type picks the
/// method).
macro_rules! rpc {
    ($fs:expr, $name:literal, $kind:ident, $req:expr) => {
        $fs.inner.master.call($name, CallKind::$kind, $req)
    };
}

mod cluster;
mod writes;

use writes::renew_leases;
pub(crate) use writes::LeaseGuard;

pub(crate) struct Inner {
    pub(crate) conf: ClusterConf,
    pub(crate) master: MasterClient,
    pub(crate) pool: WorkerPool,
    client_id: u64,
    /// The last call id given (`CallerInfo.call_id`).
    calls: std::sync::atomic::AtomicU64,
    user: String,
    /// Open writers' file ids (with a count of writers each) for lease renewal.
    leases: Mutex<HashMap<u64, usize>>,
    /// Memory of closed writers' block copies, for the next writers.
    pub(crate) copies: SpareCopies,
    /// Dropped with `Inner`, which stops the lease renewer.
    _shutdown: watch::Sender<()>,
}

/// A directory's entries as `CurvineFs::read_dir` gives them.
#[derive(Debug, Default, Clone)]
pub struct Listing {
    pub entries: Vec<FileStatus>,
    /// The caller may read the directory but not search it: each entry holds its id,
    /// name, path and file type alone.
    pub names_only: bool,
}

/// A connection to a Curvine cluster.
#[derive(Clone)]
pub struct CurvineFs {
    pub(crate) inner: Arc<Inner>,
    uid: u32,
    gid: u32,
    /// Supplementary groups sent with every call (see `CallerInfo.groups`).
    groups: Arc<[u32]>,
    /// Longest path accepted (PATH_MAX - 1, or longer for a mount).
    max_path: usize,
    /// Mutations are acknowledged before the journal is on disk (`CallerInfo.defer_sync`).
    defer_sync: bool,
}

#[allow(unsafe_code)]
fn effective_ids() -> (u32, u32) {
    // SAFETY: geteuid/getegid have no preconditions and cannot fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

fn new_client_id() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let seed = nanos ^ (u64::from(std::process::id()) << 40);
    // splitmix64 so that ids from close instants differ in every bit
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)).max(1)
}

#[allow(unsafe_code)]
fn supplementary_groups() -> Vec<u32> {
    // SAFETY: a size query (null buffer, 0), then a buffer of the size it gave; the
    // kernel writes at most `n` entries.
    unsafe {
        let n = libc::getgroups(0, std::ptr::null_mut());
        if n <= 0 {
            return Vec::new();
        }
        let mut v = vec![0 as libc::gid_t; n as usize];
        let got = libc::getgroups(n, v.as_mut_ptr());
        v.truncate(got.max(0) as usize);
        v
    }
}

impl CurvineFs {
    /// Connect to the cluster's master (the first reachable of `client.master_addrs`).
    pub async fn connect(conf: ClusterConf) -> FsResult<CurvineFs> {
        let master = MasterClient::connect(
            &conf.client,
            &conf.cluster.auth_token,
            &conf.master.local_socket,
        )
        .await?;
        Ok(Self::with_master(conf, master))
    }

    /// A handle whose master channel connects on first use (no I/O here).
    pub fn connect_lazy(conf: ClusterConf) -> FsResult<CurvineFs> {
        let master = MasterClient::lazy(
            &conf.client,
            &conf.cluster.auth_token,
            &conf.master.local_socket,
        )?;
        Ok(Self::with_master(conf, master))
    }

    fn with_master(conf: ClusterConf, master: MasterClient) -> CurvineFs {
        let (tx, rx) = watch::channel(());
        let (uid, gid) = effective_ids();
        let groups: Arc<[u32]> = supplementary_groups().into();
        let inner = Arc::new(Inner {
            pool: WorkerPool::new(conf.client.connect_timeout.get()),
            master,
            client_id: new_client_id(),
            calls: std::sync::atomic::AtomicU64::new(0),
            user: std::env::var("USER").unwrap_or_default(),
            leases: Mutex::new(HashMap::new()),
            copies: SpareCopies::default(),
            _shutdown: tx,
            conf,
        });
        let period = (inner.conf.master.lease_timeout.get() / 3).max(Duration::from_millis(100));
        tokio::spawn(renew_leases(Arc::downgrade(&inner), rx, period));
        CurvineFs {
            inner,
            uid,
            gid,
            groups,
            max_path: MAX_PATH_LEN - 1,
            defer_sync: false,
        }
    }

    /// The same connection acting as another user (FUSE requests, tests), with no
    /// supplementary groups.
    pub fn with_identity(&self, uid: u32, gid: u32) -> CurvineFs {
        self.with_groups(uid, gid, &[])
    }

    /// The same connection acting as another user with supplementary `groups`.
    pub fn with_groups(&self, uid: u32, gid: u32, groups: &[u32]) -> CurvineFs {
        CurvineFs {
            inner: self.inner.clone(),
            uid,
            gid,
            groups: groups.into(),
            max_path: self.max_path,
            defer_sync: self.defer_sync,
        }
    }

    /// The same connection with its mutations acknowledged once the master applied
    /// them, before its journal is on disk (the master syncs it at once; `sync_journal`
    /// waits for that). Changes survive a crash of the master process either way; only
    /// a crash of its host may lose the last ones not yet synced. The FUSE mount works
    /// so, which makes its changes durable at fsync as on a local file system.
    pub fn deferring_sync(&self, defer: bool) -> CurvineFs {
        CurvineFs {
            defer_sync: defer,
            ..self.clone()
        }
    }

    /// The same connection for a mount, which makes paths longer than PATH_MAX: its
    /// directory, then up to PATH_MAX - 1 bytes relative to a directory inside it.
    pub fn for_mount(&self) -> CurvineFs {
        CurvineFs {
            max_path: MAX_MOUNT_PATH_LEN,
            ..self.clone()
        }
    }

    /// Validate and normalize a path before it goes to the master.
    pub(crate) fn norm(&self, path: &str) -> FsResult<String> {
        normalize_within(path, self.max_path)
    }

    pub fn conf(&self) -> &ClusterConf {
        &self.inner.conf
    }

    pub fn client_id(&self) -> u64 {
        self.inner.client_id
    }

    pub fn caller_info(&self) -> CallerInfo {
        CallerInfo {
            uid: self.uid,
            gid: self.gid,
            user: self.inner.user.clone(),
            client_host: self.inner.conf.client.hostname.clone(),
            client_id: self.inner.client_id,
            groups: self.groups.to_vec(),
            defer_sync: self.defer_sync,
            // every request gets its own id; a retry resends the same request
            call_id: (self.inner.calls).fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1,
            read_from_followers: self.inner.conf.client.read_from_followers,
        }
    }

    pub(crate) fn caller(&self) -> Option<CallerInfo> {
        Some(self.caller_info())
    }

    pub(crate) fn write_opts(&self, reserve: u64) -> BlockWriteOpts {
        let c = &self.inner.conf;
        BlockWriteOpts {
            token: c.cluster.auth_token.clone(),
            short_circuit: c.client.short_circuit,
            client_host: c.client.hostname.clone(),
            reserve,
            direct_io: c.client.direct_io,
            req: RequestId::default(),
        }
    }

    pub(crate) fn read_opts(&self) -> BlockReadOpts {
        let c = &self.inner.conf;
        BlockReadOpts {
            token: c.cluster.auth_token.clone(),
            short_circuit: c.client.short_circuit,
            verify_checksum: c.client.verify_checksum,
            client_host: c.client.hostname.clone(),
            direct_io: c.client.direct_io,
            req: RequestId::default(),
        }
    }

    // ---------- namespace ----------

    pub async fn mkdir(&self, path: &str, parents: bool) -> FsResult<FileStatus> {
        self.mkdir_with_mode(path, parents, 0o755).await
    }

    pub async fn mkdir_with_mode(
        &self,
        path: &str,
        parents: bool,
        mode: u32,
    ) -> FsResult<FileStatus> {
        let req = proto::MkdirRequest {
            path: self.norm(path)?,
            parents,
            mode,
            caller: self.caller(),
        };
        // mkdir -p is idempotent, so it may be retried
        let kind = if parents {
            CallKind::Idempotent
        } else {
            CallKind::Once
        };
        let r = self.inner.master.call("mkdir", kind, req).await?;
        status_of(r.status, "mkdir")
    }

    pub async fn create(&self, path: &str, overwrite: bool) -> FsResult<FsWriter> {
        let opts = CreateOptions {
            overwrite,
            ..Default::default()
        };
        self.create_with(path, opts).await
    }

    pub async fn create_with(&self, path: &str, opts: CreateOptions) -> FsResult<FsWriter> {
        let c = &self.inner.conf.client;
        let tier = if opts.storage_tier == StorageTier::Unspecified {
            c.storage_tier.0
        } else {
            opts.storage_tier
        };
        let req = proto::CreateRequest {
            path: self.norm(path)?,
            overwrite: opts.overwrite,
            create_parents: opts.create_parents,
            mode: opts.mode,
            replicas: if opts.replicas == 0 {
                c.replicas
            } else {
                opts.replicas
            },
            block_size: if opts.block_size == 0 {
                c.block_size.0
            } else {
                opts.block_size
            },
            storage_tier: tier as i32,
            caller: self.caller(),
            exclusive: opts.exclusive,
            first_block: opts.first_block,
        };
        let id = req.request_id();
        let r = rpc!(self, "create", Once, req).await?;
        let status = status_of(r.status, "create")?;
        Ok(FsWriter::new(self.clone(), status, r.first_block, id))
    }

    /// A writer at the end of `path`. A hole a truncate left past the file's data is
    /// written out as zeros first, so the new bytes land at the file's length.
    pub async fn append(&self, path: &str) -> FsResult<FsWriter> {
        let mut w = self.append_to_data(path).await?;
        w.write_zeros(w.status().tail_zeros).await?;
        Ok(w)
    }

    /// A writer at the end of `path`'s data, before the hole a truncate or fallocate may
    /// have left past it (`FileStatus::tail_zeros`). The file keeps its length unless
    /// the writes go past it; the part of the hole they do not cover still reads as
    /// zeros. For writers that fill a preallocated file from its data's end.
    pub async fn append_to_data(&self, path: &str) -> FsResult<FsWriter> {
        let req = proto::AppendRequest {
            path: self.norm(path)?,
            caller: self.caller(),
        };
        let id = req.request_id();
        let r = rpc!(self, "append", Once, req).await?;
        let status = status_of(r.status, "append")?;
        // the writer continues in a new block: the last one stays as it is
        Ok(FsWriter::new(self.clone(), status, None, id))
    }

    pub async fn open(&self, path: &str) -> FsResult<FsReader> {
        let req = proto::OpenRequest {
            path: self.norm(path)?,
            caller: self.caller(),
            exclude_fetchers: Vec::new(),
        };
        let id = req.request_id();
        let r = rpc!(self, "open", Idempotent, req).await?;
        let status = status_of(r.status, "open")?;
        Ok(FsReader::new(self.clone(), status, r.blocks).located_by(id))
    }

    /// The blocks of `path` as `block_locations` gives them, with uncached blocks
    /// given to workers other than `exclude` for fetching.
    pub(crate) async fn blocks_avoiding(
        &self,
        path: &str,
        exclude: &[WorkerId],
    ) -> FsResult<Vec<proto::LocatedBlock>> {
        let req = proto::OpenRequest {
            path: self.norm(path)?,
            caller: self.caller(),
            exclude_fetchers: exclude.iter().map(|w| w.0).collect(),
        };
        Ok(rpc!(self, "open", Idempotent, req).await?.blocks)
    }

    /// The blocks of a file and the workers holding each (for data locality).
    pub async fn block_locations(&self, path: &str) -> FsResult<Vec<proto::LocatedBlock>> {
        let req = proto::OpenRequest {
            path: self.norm(path)?,
            caller: self.caller(),
            exclude_fetchers: Vec::new(),
        };
        Ok(rpc!(self, "open", Idempotent, req).await?.blocks)
    }

    async fn get_status(&self, path: &str, follow_symlink: bool) -> FsResult<FileStatus> {
        let req = proto::GetStatusRequest {
            path: self.norm(path)?,
            follow_symlink,
            caller: self.caller(),
        };
        let r = rpc!(self, "stat", Idempotent, req).await?;
        status_of(r.status, "stat")
    }

    /// Status of `path`, following symlinks.
    pub async fn stat(&self, path: &str) -> FsResult<FileStatus> {
        self.get_status(path, true).await
    }

    /// Status of `path` itself (a symlink is not followed).
    pub async fn lstat(&self, path: &str) -> FsResult<FileStatus> {
        self.get_status(path, false).await
    }

    pub async fn exists(&self, path: &str) -> FsResult<bool> {
        match self.lstat(path).await {
            Ok(_) => Ok(true),
            Err(FsError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// All entries of a directory with their attributes (every page the master
    /// returns); this needs read and search permission on it.
    pub async fn list(&self, path: &str) -> FsResult<Vec<FileStatus>> {
        Ok(self.list_all(path, false).await?.entries)
    }

    /// All entries of a directory as `readdir` sees them: with read but without search
    /// permission on it, the caller gets each entry's id, name, path and type alone
    /// (`names_only`), as a local file system gives names but refuses stat of them.
    pub async fn read_dir(&self, path: &str) -> FsResult<Listing> {
        self.list_all(path, true).await
    }

    async fn list_all(&self, path: &str, accept_names: bool) -> FsResult<Listing> {
        let mut out = Listing::default();
        let mut start_after = String::new();
        loop {
            let r = self
                .list_request(path, &start_after, 0, accept_names)
                .await?;
            // permissions may change between pages: one page of names marks them all
            out.names_only |= r.names_only;
            let last = r.statuses.last().map(|s| s.name.clone());
            out.entries.extend(r.statuses);
            match last {
                Some(name) if r.has_more => start_after = name,
                _ => return Ok(out),
            }
        }
    }

    /// One page of a directory listing: at most `limit` entries (0 = the master's page
    /// size) whose names sort after `start_after` (empty = from the start), and whether
    /// more follow. Listing a file returns the file itself.
    pub async fn list_page(
        &self,
        path: &str,
        start_after: &str,
        limit: u32,
    ) -> FsResult<(Vec<FileStatus>, bool)> {
        let r = self.list_request(path, start_after, limit, false).await?;
        Ok((r.statuses, r.has_more))
    }

    async fn list_request(
        &self,
        path: &str,
        start_after: &str,
        limit: u32,
        accept_names: bool,
    ) -> FsResult<proto::ListResponse> {
        let req = proto::ListRequest {
            path: self.norm(path)?,
            start_after: start_after.to_string(),
            limit,
            caller: self.caller(),
            accept_names,
        };
        rpc!(self, "list", Idempotent, req).await
    }

    pub async fn rename(&self, src: &str, dst: &str) -> FsResult<()> {
        self.rename_with_flags(src, dst, 0).await
    }

    /// Rename with `RENAME_FLAG_*` bits (e.g. no-replace / exchange, as in renameat2).
    pub async fn rename_with_flags(&self, src: &str, dst: &str, flags: u32) -> FsResult<()> {
        self.rename_stamped(src, dst, flags).await.map(drop)
    }

    /// `rename_with_flags`, returning the time the master gave the mtime and ctime of
    /// both parent directories (0 when the rename changed nothing).
    pub async fn rename_stamped(&self, src: &str, dst: &str, flags: u32) -> FsResult<i64> {
        let req = proto::RenameRequest {
            src: self.norm(src)?,
            dst: self.norm(dst)?,
            flags,
            caller: self.caller(),
        };
        Ok(rpc!(self, "rename", Once, req).await?.time_ms)
    }

    pub async fn delete(&self, path: &str, recursive: bool) -> FsResult<()> {
        self.delete_stamped(path, recursive).await.map(drop)
    }

    /// `delete`, returning the time the master gave the parent directory's mtime and
    /// ctime (0 when the master does not tell).
    pub async fn delete_stamped(&self, path: &str, recursive: bool) -> FsResult<i64> {
        let path = self.norm(path)?;
        let req = proto::DeleteRequest {
            path: path.clone(),
            recursive,
            caller: self.caller(),
        };
        let r = rpc!(self, "delete", Once, req).await?;
        if r.deleted {
            Ok(r.parent_mtime_ms)
        } else {
            Err(FsError::not_found(path))
        }
    }

    pub async fn set_attr(&self, path: &str, attr: SetAttr) -> FsResult<FileStatus> {
        let req = proto::SetAttrRequest {
            path: self.norm(path)?,
            mode: attr.mode,
            uid: attr.uid,
            gid: attr.gid,
            mtime_ms: attr.mtime_ms,
            atime_ms: attr.atime_ms,
            replicas: attr.replicas,
            caller: self.caller(),
            no_follow: attr.no_follow,
            times_now: attr.times_now,
            mtime_nsec: attr.mtime_nsec,
            atime_nsec: attr.atime_nsec,
        };
        let r = rpc!(self, "set_attr", Once, req).await?;
        status_of(r.status, "set_attr")
    }

    /// Set the length of a file. Growing it leaves a hole past its data that reads as
    /// zeros and takes no space; one master call either way.
    pub async fn truncate(&self, path: &str, len: u64) -> FsResult<()> {
        let req = proto::TruncateRequest {
            path: self.norm(path)?,
            len,
            caller: self.caller(),
        };
        rpc!(self, "truncate", Once, req).await?;
        Ok(())
    }

    /// Create a symlink `link` pointing at `target` (stored as given).
    pub async fn symlink(&self, target: &str, link: &str) -> FsResult<FileStatus> {
        if target.is_empty() || target.contains('\0') {
            return Err(FsError::InvalidPath {
                path: target.to_string(),
                message: "bad symlink target".into(),
            });
        }
        let req = proto::SymlinkRequest {
            target: target.to_string(),
            link: self.norm(link)?,
            caller: self.caller(),
        };
        let r = rpc!(self, "symlink", Once, req).await?;
        status_of(r.status, "symlink")
    }

    /// mknod(2) of a fifo, socket or device file (`rdev` for devices, which only
    /// uid 0 may make). Curvine keeps the name and attributes; the kernel of each host
    /// provides the pipe, socket or device.
    pub async fn mknod(
        &self,
        path: &str,
        file_type: proto::FileType,
        mode: u32,
        rdev: u32,
    ) -> FsResult<FileStatus> {
        let req = proto::MknodRequest {
            path: self.norm(path)?,
            file_type: file_type as i32,
            mode,
            rdev,
            caller: self.caller(),
        };
        let r = rpc!(self, "mknod", Once, req).await?;
        status_of(r.status, "mknod")
    }

    pub async fn readlink(&self, path: &str) -> FsResult<String> {
        let req = proto::ReadlinkRequest {
            path: self.norm(path)?,
            caller: self.caller(),
        };
        let r = rpc!(self, "readlink", Idempotent, req).await?;
        Ok(r.target)
    }

    /// Create a hard link `dst` to the file `src`.
    pub async fn link(&self, src: &str, dst: &str) -> FsResult<FileStatus> {
        let req = proto::LinkRequest {
            src: self.norm(src)?,
            dst: self.norm(dst)?,
            caller: self.caller(),
        };
        let r = rpc!(self, "link", Once, req).await?;
        status_of(r.status, "link")
    }

    pub async fn set_xattr(
        &self,
        path: &str,
        name: &str,
        value: &[u8],
        flags: u32,
    ) -> FsResult<()> {
        let req = proto::SetXattrRequest {
            path: self.norm(path)?,
            name: name.to_string(),
            value: value.to_vec(),
            flags,
            caller: self.caller(),
        };
        rpc!(self, "set_xattr", Once, req).await?;
        Ok(())
    }

    pub async fn get_xattr(&self, path: &str, name: &str) -> FsResult<Vec<u8>> {
        let req = proto::GetXattrRequest {
            path: self.norm(path)?,
            name: name.to_string(),
            caller: self.caller(),
        };
        let r = rpc!(self, "get_xattr", Idempotent, req).await?;
        Ok(r.value)
    }

    pub async fn list_xattr(&self, path: &str) -> FsResult<Vec<String>> {
        let req = proto::ListXattrRequest {
            path: self.norm(path)?,
            caller: self.caller(),
        };
        let r = rpc!(self, "list_xattr", Idempotent, req).await?;
        Ok(r.names)
    }

    pub async fn remove_xattr(&self, path: &str, name: &str) -> FsResult<()> {
        let req = proto::RemoveXattrRequest {
            path: self.norm(path)?,
            name: name.to_string(),
            caller: self.caller(),
        };
        rpc!(self, "remove_xattr", Once, req).await?;
        Ok(())
    }

    /// Write `data` as the whole content of `path` (created or overwritten).
    pub async fn write_file(&self, path: &str, data: &[u8]) -> FsResult<()> {
        let opts = CreateOptions {
            overwrite: true,
            first_block: !data.is_empty(),
            ..Default::default()
        };
        let mut w = self.create_with(path, opts).await?;
        w.write(data).await?;
        w.close().await?;
        Ok(())
    }

    /// The whole content of `path`.
    pub async fn read_file(&self, path: &str) -> FsResult<Vec<u8>> {
        let mut r = self.open(path).await?;
        let mut buf = vec![0u8; r.len() as usize];
        let n = r.read_full(&mut buf).await?;
        buf.truncate(n);
        Ok(buf)
    }
}

fn status_of(s: Option<FileStatus>, what: &str) -> FsResult<FileStatus> {
    s.ok_or_else(|| FsError::protocol(format!("{what} reply without a status")))
}
