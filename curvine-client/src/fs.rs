//! `CurvineFs`: the client handle. Cheap to clone (an `Arc` inside); holds one gRPC
//! channel to the master, the worker connection pool and the lease renewer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use curvine_common::path::{normalize_within, MAX_MOUNT_PATH_LEN, MAX_PATH_LEN};
use curvine_common::proto::{self, CallerInfo, FileStatus, StorageTier};
use curvine_common::{ClusterConf, FsError, FsResult};
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::block_reader::BlockReadOpts;
use crate::block_writer::BlockWriteOpts;
use crate::master::{CallKind, MasterClient};
use crate::options::{CreateOptions, SetAttr};
use crate::pool::WorkerPool;
use crate::reader::FsReader;
use crate::writer::{FsWriter, SpareCopies};

/// One master call: `rpc!(self, "name", Idempotent|Mutation, request)` is the future of
/// `MasterClient::call` (`name` labels errors and logs; the request's type picks the
/// method).
macro_rules! rpc {
    ($fs:expr, $name:literal, $kind:ident, $req:expr) => {
        $fs.inner.master.call($name, CallKind::$kind, $req)
    };
}

pub(crate) struct Inner {
    pub(crate) conf: ClusterConf,
    pub(crate) master: MasterClient,
    pub(crate) pool: WorkerPool,
    client_id: u64,
    user: String,
    /// Open writers' file ids (with a count of writers each) for lease renewal.
    leases: Mutex<HashMap<u64, usize>>,
    /// Memory of closed writers' block copies, for the next writers.
    pub(crate) copies: SpareCopies,
    /// Dropped with `Inner`, which stops the lease renewer.
    _shutdown: watch::Sender<()>,
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
        }
    }

    pub(crate) fn lease_acquire(&self, file_id: u64) -> LeaseGuard {
        let mut l = self.inner.leases.lock().unwrap_or_else(|p| p.into_inner());
        *l.entry(file_id).or_default() += 1;
        LeaseGuard {
            inner: Arc::downgrade(&self.inner),
            file_id,
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
            CallKind::Mutation
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
        let r = rpc!(self, "create", Mutation, req).await?;
        let status = status_of(r.status, "create")?;
        Ok(FsWriter::new(self.clone(), status, r.first_block))
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
        let r = rpc!(self, "append", Mutation, req).await?;
        let status = status_of(r.status, "append")?;
        // the writer continues in a new block: the last one stays as it is
        Ok(FsWriter::new(self.clone(), status, None))
    }

    pub async fn open(&self, path: &str) -> FsResult<FsReader> {
        let req = proto::OpenRequest {
            path: self.norm(path)?,
            caller: self.caller(),
            exclude_fetchers: Vec::new(),
        };
        let r = rpc!(self, "open", Idempotent, req).await?;
        let status = status_of(r.status, "open")?;
        Ok(FsReader::new(self.clone(), status, r.blocks))
    }

    /// The blocks of `path` as `block_locations` gives them, with uncached blocks
    /// given to workers other than `exclude` for fetching.
    pub(crate) async fn blocks_avoiding(
        &self,
        path: &str,
        exclude: &[u32],
    ) -> FsResult<Vec<proto::LocatedBlock>> {
        let req = proto::OpenRequest {
            path: self.norm(path)?,
            caller: self.caller(),
            exclude_fetchers: exclude.to_vec(),
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

    /// All entries of a directory (every page the master returns).
    pub async fn list(&self, path: &str) -> FsResult<Vec<FileStatus>> {
        let mut out = Vec::new();
        let mut start_after = String::new();
        loop {
            let (page, has_more) = self.list_page(path, &start_after, 0).await?;
            let last = page.last().map(|s| s.name.clone());
            out.extend(page);
            match last {
                Some(name) if has_more => start_after = name,
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
        let req = proto::ListRequest {
            path: self.norm(path)?,
            start_after: start_after.to_string(),
            limit,
            caller: self.caller(),
        };
        let r = rpc!(self, "list", Idempotent, req).await?;
        Ok((r.statuses, r.has_more))
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
        Ok(rpc!(self, "rename", Mutation, req).await?.time_ms)
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
        let r = rpc!(self, "delete", Mutation, req).await?;
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
        let r = rpc!(self, "set_attr", Mutation, req).await?;
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
        rpc!(self, "truncate", Mutation, req).await?;
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
        let r = rpc!(self, "symlink", Mutation, req).await?;
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
        let r = rpc!(self, "mknod", Mutation, req).await?;
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
        let r = rpc!(self, "link", Mutation, req).await?;
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
        rpc!(self, "set_xattr", Mutation, req).await?;
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
        rpc!(self, "remove_xattr", Mutation, req).await?;
        Ok(())
    }

    /// Mount the under-store `info.ufs_uri` at `info.path` (the master checks the store
    /// by listing it). The reply lists the mount with its secrets out.
    pub async fn mount(&self, mut info: proto::MountInfo) -> FsResult<proto::MountInfo> {
        info.path = self.norm(&info.path)?;
        let req = proto::MountRequest {
            mount: Some(info),
            caller: self.caller(),
        };
        let r = rpc!(self, "mount", Mutation, req).await?;
        r.mount
            .ok_or_else(|| FsError::protocol("mount: the reply has no mount"))
    }

    /// Remove the mount at `path` (what Curvine cached of it goes; the store stays).
    pub async fn umount(&self, path: &str) -> FsResult<()> {
        let req = proto::UmountRequest {
            path: self.norm(path)?,
            caller: self.caller(),
        };
        rpc!(self, "umount", Mutation, req).await?;
        Ok(())
    }

    /// Every mount, secrets out.
    pub async fn mounts(&self) -> FsResult<Vec<proto::MountInfo>> {
        let r = rpc!(self, "list_mounts", Idempotent, proto::ListMountsRequest {}).await?;
        Ok(r.mounts)
    }

    /// Check `path` (under a mount) and what was loaded below it against the store now.
    pub async fn resync(&self, path: &str) -> FsResult<proto::ResyncResponse> {
        let req = proto::ResyncRequest {
            path: self.norm(path)?,
            caller: self.caller(),
        };
        rpc!(self, "resync", Idempotent, req).await
    }

    /// Drop the cached blocks of the persisted files at or under `path`.
    pub async fn free(&self, path: &str) -> FsResult<proto::FreeResponse> {
        let req = proto::FreeRequest {
            path: self.norm(path)?,
            caller: self.caller(),
        };
        rpc!(self, "free", Idempotent, req).await
    }

    /// Start a load job on the master for the files at `path` (under it with
    /// `recursive`): their blocks are fetched from the under-store into the cache.
    pub async fn submit_load(&self, path: &str, recursive: bool) -> FsResult<proto::LoadJob> {
        let req = proto::SubmitLoadRequest {
            path: self.norm(path)?,
            recursive,
            caller: self.caller(),
        };
        let r: proto::SubmitLoadResponse = rpc!(self, "submit_load", Mutation, req).await?;
        r.job
            .ok_or_else(|| FsError::protocol("submit_load: no job in the reply"))
    }

    /// Load job `id`.
    pub async fn load_job(&self, id: u64) -> FsResult<proto::LoadJob> {
        let req = proto::GetLoadRequest {
            job_id: id,
            path: String::new(),
        };
        let r: proto::GetLoadResponse = rpc!(self, "get_load", Idempotent, req).await?;
        r.jobs
            .into_iter()
            .next()
            .ok_or_else(|| FsError::not_found(format!("load job {id}")))
    }

    /// The load jobs of `path` (every job the master keeps when empty), oldest first.
    pub async fn load_jobs(&self, path: &str) -> FsResult<Vec<proto::LoadJob>> {
        let path = if path.is_empty() {
            String::new()
        } else {
            self.norm(path)?
        };
        let req = proto::GetLoadRequest { job_id: 0, path };
        let r: proto::GetLoadResponse = rpc!(self, "get_load", Idempotent, req).await?;
        Ok(r.jobs)
    }

    /// Cancel load job `id`; blocks loaded so far stay cached.
    pub async fn cancel_load(&self, id: u64) -> FsResult<proto::LoadJob> {
        let req = proto::CancelLoadRequest {
            job_id: id,
            caller: self.caller(),
        };
        let r: proto::CancelLoadResponse = rpc!(self, "cancel_load", Idempotent, req).await?;
        r.job
            .ok_or_else(|| FsError::protocol("cancel_load: no job in the reply"))
    }

    /// Upload the files at or under `path` that the under-store does not hold yet
    /// (under a through or async mount); returns once they are persisted.
    pub async fn persist(&self, path: &str) -> FsResult<proto::PersistResponse> {
        let req = proto::PersistRequest {
            path: self.norm(path)?,
            caller: self.caller(),
        };
        rpc!(self, "persist", Idempotent, req).await
    }

    /// Cluster capacity and usage, per worker and tier.
    /// Wait until every namespace change the master made before this call is on disk
    /// (its journal synced; immediate with `journal.sync = false`). What makes the
    /// changes of a handle that defers syncs (`deferring_sync`) durable.
    pub async fn sync_journal(&self) -> FsResult<()> {
        self.inner
            .master
            .call(
                "sync_journal",
                CallKind::Idempotent,
                proto::SyncJournalRequest {},
            )
            .await
            .map(drop)
    }

    /// Begin draining worker `worker` (its id, or its data address `host:port`), or end
    /// the drain with `cancel`. Returns the worker's id. Superuser only.
    pub async fn decommission(&self, worker: &str, cancel: bool) -> FsResult<u32> {
        let (worker_id, address) = match worker.parse::<u32>() {
            Ok(id) if id > 0 => (id, String::new()),
            _ => (0, worker.to_string()),
        };
        let req = proto::DecommissionRequest {
            worker_id,
            address,
            cancel,
            caller: self.caller(),
        };
        let r: proto::DecommissionResponse = rpc!(self, "decommission", Mutation, req).await?;
        Ok(r.worker_id)
    }

    pub async fn report(&self) -> FsResult<proto::ReportResponse> {
        self.inner
            .master
            .call("report", CallKind::Idempotent, proto::ReportRequest {})
            .await
    }

    /// The master's changes after `after` (in the log named `epoch`) made by other
    /// clients than this one, waiting up to `wait` (capped at half the call timeout)
    /// for one. See `WatchRequest` in the protocol; a `reset` reply means the caller
    /// must drop whatever it caches.
    pub async fn watch_changes(
        &self,
        epoch: &str,
        after: u64,
        wait: std::time::Duration,
    ) -> FsResult<proto::WatchResponse> {
        let wait = wait.min(self.inner.master.rpc_timeout() / 2);
        let req = proto::WatchRequest {
            epoch: epoch.to_string(),
            after_seq: after,
            exclude_client: self.inner.client_id,
            wait_ms: wait.as_millis().min(u32::MAX as u128) as u32,
        };
        self.inner
            .master
            .call("watch", CallKind::Idempotent, req)
            .await
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

    // ---------- used by writers ----------

    pub(crate) async fn add_block(
        &self,
        file_id: u64,
        path: &str,
        previous: Vec<proto::CommittedBlock>,
        excluded_workers: Vec<u32>,
    ) -> FsResult<proto::LocatedBlock> {
        let req = proto::AddBlockRequest {
            file_id,
            path: path.to_string(),
            previous,
            caller: self.caller(),
            excluded_workers,
        };
        let r = rpc!(self, "add_block", Mutation, req).await?;
        r.block
            .ok_or_else(|| FsError::protocol("add_block reply without a block"))
    }

    pub(crate) async fn complete(
        &self,
        file_id: u64,
        path: &str,
        blocks: Vec<proto::CommittedBlock>,
        (len, min_len): (u64, u64),
        mtime_ms: i64,
    ) -> FsResult<FileStatus> {
        let req = proto::CompleteRequest {
            file_id,
            path: path.to_string(),
            blocks,
            len,
            caller: self.caller(),
            min_len,
            mtime_ms,
        };
        let r = rpc!(self, "complete", Mutation, req).await?;
        status_of(r.status, "complete")
    }

    /// Publish the committed blocks and length of a file still being written.
    pub(crate) async fn sync_file(
        &self,
        file_id: u64,
        path: &str,
        blocks: Vec<proto::CommittedBlock>,
        len: u64,
    ) -> FsResult<FileStatus> {
        let req = proto::SyncRequest {
            file_id,
            path: path.to_string(),
            blocks,
            len,
            caller: self.caller(),
        };
        let r = rpc!(self, "sync", Mutation, req).await?;
        status_of(r.status, "sync")
    }

    /// Give up a file being written: a new file disappears, an append rolls back to
    /// its committed blocks.
    pub(crate) async fn abandon(&self, file_id: u64, path: &str) -> FsResult<()> {
        let req = proto::AbandonRequest {
            file_id,
            path: path.to_string(),
            caller: self.caller(),
        };
        rpc!(self, "abandon", Mutation, req).await?;
        Ok(())
    }
}

fn status_of(s: Option<FileStatus>, what: &str) -> FsResult<FileStatus> {
    s.ok_or_else(|| FsError::protocol(format!("{what} reply without a status")))
}

/// Keeps a file's lease renewed while a writer has it open.
pub(crate) struct LeaseGuard {
    inner: Weak<Inner>,
    file_id: u64,
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            let mut l = inner.leases.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = l.get_mut(&self.file_id) {
                *n -= 1;
                if *n == 0 {
                    l.remove(&self.file_id);
                }
            }
        }
    }
}

/// Renews the leases of open files every `period`; exits when the `CurvineFs` is gone.
async fn renew_leases(inner: Weak<Inner>, mut shutdown: watch::Receiver<()>, period: Duration) {
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(period) => {}
        }
        let Some(fs) = inner.upgrade() else { return };
        fs.copies.trim(period);
        let file_ids: Vec<u64> = {
            let l = fs.leases.lock().unwrap_or_else(|p| p.into_inner());
            l.keys().copied().collect()
        };
        if file_ids.is_empty() {
            continue;
        }
        let req = proto::RenewLeaseRequest {
            client_id: fs.client_id,
            file_ids,
        };
        match fs
            .master
            .call("renew_lease", CallKind::Idempotent, req)
            .await
        {
            Ok(_) => debug!("leases renewed"),
            Err(e) => warn!(error = %e, "lease renewal failed"),
        }
    }
}
