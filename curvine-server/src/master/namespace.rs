//! The namespace: path resolution, permission checks and the mutation primitive.
//! Operations live in `tree.rs` (directories, names), `files.rs` (file lifecycle) and
//! `attrs.rs` (attributes, xattrs); worker-facing calls in `workers.rs`.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use curvine_common::conf::MasterConf;
use curvine_common::proto::{CallerInfo, FileStatus, FileType, StorageTier};
use curvine_common::types::now_ms;
use curvine_common::{FsError, FsResult, InodeId};
use prost::Message;
use tracing::info;

use super::apply::{self, Applied, Effects};
use super::changes::{ChangeLog, FOLLOW_GRACE, KEPT_BYTES, KEPT_CHANGES};
use super::lease::Leases;
use super::records::{Counters, InodeRec};
use super::store::{self, Store};
use super::syncer::Syncer;
use super::workers::Workers;

pub const S_ISUID: u32 = 0o4000;
pub const S_ISGID: u32 = 0o2000;
const S_IXGRP: u32 = 0o010;
pub const S_ISVTX: u32 = 0o1000;
const MAX_SYMLINK_HOPS: u32 = 40;

pub struct Namespace {
    pub(super) store: Arc<Store>,
    pub(super) conf: MasterConf,
    /// The mutation lock, and the counters as of the last mutation (a single master;
    /// replicated, the store holds them: `counters`).
    pub(super) mu: Mutex<Counters>,
    pub(super) syncer: Arc<Syncer>,
    pub(super) leases: Leases,
    pub(super) workers: Workers,
    pub(super) cluster_id: String,
    pub(super) repl: super::replication::Replication,
    /// What each mutation touched, for clients that cache metadata.
    pub(super) changes: ChangeLog,
    /// Under-store mounts and their operators.
    pub(super) mounts: super::mounts::Mounts,
    /// The master's background tasks (started by `master::run`, listed by `report`).
    pub(super) tasks: curvine_common::tasks::Tasks,
    /// Load jobs (the running ones and the last ended; recorded in `meta`).
    pub(super) jobs: super::jobs::Jobs,
    /// Uploads of files written under mounts.
    pub(super) persister: super::persist::Persister,
    /// When files under mounts with a TTL were last opened (in memory: after a restart
    /// a file's age counts from its mtime).
    pub(super) opened: super::ttl::LastOpen,
    /// Wakes the task that removes detached subtrees (large recursive deletes).
    pub(super) purge: super::purge::Purge,
    /// Replicated masters (`master.peers`): this master's Raft node, set once at start.
    pub(super) replica: std::sync::OnceLock<Arc<super::raft::Replica>>,
    /// Where expiry of the retry cache resumes (`retry_cache`).
    pub(super) retries: super::retry_cache::RetryCache,
    /// The mutations being built into one entry (replicated masters, `batch`).
    pub(super) batch: Arc<super::batch::Batcher>,
    /// A new tenure's wait for the workers' reports (`tenure`).
    pub(super) reporting: super::tenure::Reporting,
}

/// Read access shared by the store (lock-free reads) and a transaction (its own
/// pending writes first).
pub(super) trait Reader {
    fn inode(&self, id: u64) -> FsResult<Option<InodeRec>>;
    fn child(&self, parent: u64, name: &str) -> FsResult<Option<u64>>;
}

impl Reader for Store {
    fn inode(&self, id: u64) -> FsResult<Option<InodeRec>> {
        Store::inode(self, id)
    }
    fn child(&self, parent: u64, name: &str) -> FsResult<Option<u64>> {
        Store::child(self, parent, name)
    }
}

pub(super) use super::txn::{Delete, Txn};

/// Result of walking a path.
pub(super) struct Walk {
    /// The directory holding the entry (`None` for `/`).
    pub parent: Option<InodeRec>,
    pub name: String,
    pub inode: Option<InodeRec>,
    /// Normalized path of the entry (after following symlinks).
    pub path: String,
    /// Ids of the directories from `/` down to the parent.
    pub chain: Vec<u64>,
}

impl Walk {
    pub fn parent_path(&self) -> String {
        match self.path.rfind('/') {
            Some(0) | None => "/".to_string(),
            Some(i) => self.path[..i].to_string(),
        }
    }
    /// The existing entry, or NotFound naming the path.
    pub fn existing(&self) -> FsResult<&InodeRec> {
        self.inode
            .as_ref()
            .ok_or_else(|| FsError::not_found(&self.path))
    }
    /// The parent directory; `/` itself has none.
    pub fn dir(&self) -> FsResult<&InodeRec> {
        self.parent
            .as_ref()
            .ok_or_else(|| FsError::invalid("the root directory cannot be used here"))
    }
}

pub(super) fn is_root(c: &CallerInfo) -> bool {
    c.uid == 0
}

/// Whether `gid` is the caller's group or one of its supplementary groups.
pub(super) fn in_group(c: &CallerInfo, gid: u32) -> bool {
    c.gid == gid || c.groups.contains(&gid)
}

/// Whether `caller` has all bits of `mask` (4 r, 2 w, 1 x) on `ino`: the owner's bits
/// for the owner, the group's for a member of the file's group (primary or
/// supplementary), the others' bits for everyone else.
pub(super) fn allowed(c: &CallerInfo, ino: &InodeRec, mask: u32) -> bool {
    if is_root(c) {
        return true;
    }
    let bits = if c.uid == ino.uid {
        ino.mode >> 6
    } else if in_group(c, ino.gid) {
        ino.mode >> 3
    } else {
        ino.mode
    };
    bits & mask == mask
}

/// `allowed`, or PermissionDenied naming `path()`, which is only built on a denial.
pub(super) fn check(
    c: &CallerInfo,
    ino: &InodeRec,
    mask: u32,
    path: impl FnOnce() -> String,
) -> FsResult<()> {
    if allowed(c, ino, mask) {
        Ok(())
    } else {
        Err(FsError::PermissionDenied { path: path() })
    }
}

/// In a sticky directory only the owner of the entry or of the directory (or root) may
/// remove, rename or replace the entry (EPERM otherwise, as Linux).
pub(super) fn check_sticky(
    c: &CallerInfo,
    dir: &InodeRec,
    child: &InodeRec,
    path: &str,
) -> FsResult<()> {
    if dir.mode & S_ISVTX == 0 || is_root(c) || c.uid == child.uid || c.uid == dir.uid {
        Ok(())
    } else {
        Err(FsError::NotPermitted {
            path: path.to_string(),
        })
    }
}

/// The mode `ino` keeps after its data is changed (a write or truncate) by `c`, as
/// Linux: set-user-ID goes, and set-group-ID when group-executable or when the caller
/// is not in the file's group. Root (CAP_FSETID) keeps them.
pub(super) fn mode_after_write(c: &CallerInfo, ino: &InodeRec) -> u32 {
    if is_root(c) || !is_file(ino) {
        return ino.mode;
    }
    let mut mode = ino.mode & !S_ISUID;
    if mode & S_ISGID != 0 && (mode & S_IXGRP != 0 || !in_group(c, ino.gid)) {
        mode &= !S_ISGID;
    }
    mode
}

/// The mode a non-directory keeps when its owner or group changes: set-user-ID goes,
/// set-group-ID too when group-executable (Linux does so for every caller).
pub(super) fn mode_after_chown(ino: &InodeRec) -> u32 {
    if is_dir(ino) {
        return ino.mode;
    }
    let mut mode = ino.mode & !S_ISUID;
    if mode & S_IXGRP != 0 {
        mode &= !S_ISGID;
    }
    mode
}

pub(super) fn is_dir(i: &InodeRec) -> bool {
    i.file_type == FileType::Dir as i32
}
pub(super) fn is_file(i: &InodeRec) -> bool {
    i.file_type == FileType::File as i32
}
pub(super) fn is_symlink(i: &InodeRec) -> bool {
    i.file_type == FileType::Symlink as i32
}

pub(super) fn status(i: &InodeRec, path: String, name: String) -> FileStatus {
    let len = if is_dir(i) {
        0
    } else if is_symlink(i) {
        i.symlink_target.len() as u64
    } else {
        i.len
    };
    FileStatus {
        id: i.id,
        path,
        name,
        file_type: i.file_type,
        len,
        mode: i.mode,
        uid: i.uid,
        gid: i.gid,
        mtime_ms: i.mtime_ms,
        atime_ms: i.atime_ms,
        ctime_ms: i.ctime_ms,
        mtime_nsec: curvine_common::types::time_nsec(i.mtime_ms, i.mtime_nsec),
        atime_nsec: curvine_common::types::time_nsec(i.atime_ms, i.atime_nsec),
        nlink: i.nlink,
        block_size: i.block_size,
        replicas: i.replicas,
        storage_tier: i.storage_tier,
        complete: is_dir(i) || is_symlink(i) || i.complete,
        symlink_target: i.symlink_target.clone(),
        children: i.children,
        rdev: i.rdev,
        tail_zeros: if is_file(i) { i.tail_zeros } else { 0 },
        ufs_key: i.ufs.as_ref().map(|u| u.key.clone()).unwrap_or_default(),
        persisted: i.ufs.as_ref().is_some_and(|u| u.persisted),
    }
}

fn join_stack(stack: &[(Cow<'_, str>, InodeRec)], name: &str) -> String {
    let mut s = String::new();
    for (n, _) in stack.iter().skip(1) {
        s.push('/');
        s.push_str(n);
    }
    if !name.is_empty() {
        s.push('/');
        s.push_str(name);
    }
    if s.is_empty() {
        s.push('/');
    }
    s
}

impl Namespace {
    /// Open (formatting on first use) the namespace in `conf.master.meta_dir`.
    pub fn load(
        conf: MasterConf,
        sync: bool,
        lost_timeout: std::time::Duration,
    ) -> FsResult<Namespace> {
        Self::load_as(conf, sync, lost_timeout, None)
    }

    /// [`load`](Self::load), formatting with cluster id `cluster` and a root whose times
    /// are 0 when given: every master of a replicated group formats the same state, on
    /// which the same log then gives the same namespace.
    pub fn load_as(
        mut conf: MasterConf,
        sync: bool,
        lost_timeout: std::time::Duration,
        cluster: Option<String>,
    ) -> FsResult<Namespace> {
        // `master::run` resolves it from the whole configuration; a namespace built from
        // the master's section alone takes the default's
        conf.worker_report_grace.get_or_insert_with(|| {
            curvine_common::conf::Dur(curvine_common::ClusterConf::default().worker_report_grace())
        });
        let store = Arc::new(Store::open(
            &conf.meta_dir,
            conf.meta_write_buffer.0,
            conf.meta_cache.0,
            conf.dir_cache_entries,
            usize::try_from(conf.file_cache.0).unwrap_or(usize::MAX),
        )?);
        // a snapshot install a stop interrupted is finished before anything is read
        super::raft::snapshot::recover(&store, &conf.meta_dir)?;
        if !store.is_formatted()? {
            super::upgrade::format(&store, cluster)?;
        }
        super::upgrade::upgrade(&store)?;
        let counters = store.counters()?;
        let cluster_id = store
            .meta(store::META_CLUSTER_ID)?
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_default();
        let tasks = curvine_common::tasks::Tasks::new(&Default::default());
        let syncer = Arc::new(Syncer::start(store.clone(), sync, &tasks)?);
        let mounts = super::mounts::Mounts::load(&store)?;
        let jobs = super::jobs::Jobs::new(conf.load_per_worker);
        let ns = Namespace {
            jobs,
            store,
            conf,
            mu: Mutex::new(counters),
            syncer,
            leases: Leases::default(),
            workers: Workers::new(lost_timeout),
            cluster_id,
            repl: Default::default(),
            changes: ChangeLog::new(KEPT_CHANGES, KEPT_BYTES, FOLLOW_GRACE),
            mounts,
            tasks,
            persister: Default::default(),
            opened: Default::default(),
            purge: Default::default(),
            replica: Default::default(),
            retries: Default::default(),
            batch: Default::default(),
            reporting: Default::default(),
        };
        ns.workers.load(&ns.store)?;
        // Writers of files open before the restart get a fresh lease to continue.
        for (k, v) in ns.store.meta_scan(store::META_OPEN_PREFIX)? {
            if let (Ok(k), Ok(v)) = (<[u8; 8]>::try_from(&k[..]), <[u8; 8]>::try_from(&v[..])) {
                ns.leases
                    .grant(u64::from_be_bytes(k), u64::from_be_bytes(v));
            }
        }
        info!(
            cluster_id = %ns.cluster_id,
            files = counters.files,
            dirs = counters.dirs,
            open_files = ns.leases.len(),
            "namespace opened"
        );
        Ok(ns)
    }

    pub fn counters(&self) -> Counters {
        if self.replica.get().is_some() {
            // applied by the state machine, which leaves `mu` alone
            return self.store.counters().unwrap_or_default();
        }
        *self.mu.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// Run `f` under the mutation lock and apply what it built as one journal entry,
    /// made for client `origin` (its `CallerInfo.client_id`; 0 for the master's own).
    /// Returns the write's sequence for `Syncer::wait` (0 when nothing was written).
    pub(super) fn mutate<R>(
        &self,
        origin: u64,
        f: impl FnOnce(&mut Txn<'_>) -> FsResult<R>,
    ) -> FsResult<(R, u64)> {
        if let Some(rep) = self.replica.get() {
            return self.mutate_replicated(rep, origin, f);
        }
        let mut guard = self.mu.lock().unwrap_or_else(|p| p.into_inner());
        let mut txn = Txn::new(&self.store, *guard, now_ms());
        let r = f(&mut txn)?;
        if txn.counters != *guard {
            let c = txn.counters.encode_to_vec();
            txn.put_meta(store::META_COUNTERS.to_vec(), c);
        }
        if txn.entry.ops.is_empty() {
            return Ok((r, 0));
        }
        let Applied { batch, effects } = apply::step(&self.store, &txn.entry)?;
        // an entry of effects alone (a lease released on a file already gone) writes
        // nothing and needs no sync
        let seq = if batch.is_empty() {
            0
        } else {
            self.store.write(batch, &txn.entry)?;
            let seq = self.syncer.wrote();
            self.changes.record(origin, &txn.entry.ops);
            seq
        };
        if let Some(c) = effects.counters {
            *guard = c;
        }
        self.apply_effects(&effects);
        drop(guard);
        if effects.blocks_dropped {
            self.repl.block_dropped();
        }
        Ok((r, seq))
    }

    /// Bring the master's memory up to date with an applied entry's effects (in apply
    /// order: under the mutation lock, or in the replicated state machine).
    pub(super) fn apply_effects(&self, fx: &Effects) {
        for &id in &fx.released {
            self.leases.release(id);
        }
        for g in &fx.granted {
            self.leases.grant(g.inode, g.client_id);
        }
        for c in &fx.committed {
            self.workers.block_committed(c.worker, c.block, c.len);
        }
        for f in &fx.freed {
            self.workers.block_dropped(f.worker, f.block);
        }
        for &d in &fx.deletes {
            self.workers.queue_delete(d);
        }
        for m in &fx.mounts {
            self.mounts.apply(m);
        }
    }

    /// Validate `path` against the configured limits and split it.
    pub(super) fn components<'p>(&self, path: &'p str) -> FsResult<Vec<&'p str>> {
        if path.len() > self.conf.max_path_len {
            return Err(FsError::NameTooLong {
                path: path.to_string(),
            });
        }
        let comps = curvine_common::path::components_within(path, self.conf.max_path_len)?;
        if comps.iter().any(|c| c.len() > self.conf.max_name_len) {
            return Err(FsError::NameTooLong {
                path: path.to_string(),
            });
        }
        Ok(comps)
    }

    /// Walk `path`, checking search permission on every directory passed. Symlinks in
    /// the middle are followed; the last one only when `follow_last`.
    pub(super) fn walk(
        &self,
        r: &impl Reader,
        path: &str,
        c: &CallerInfo,
        follow_last: bool,
    ) -> FsResult<Walk> {
        let comps = self.components(path)?;
        let root = r
            .inode(InodeId::ROOT.0)?
            .ok_or_else(|| FsError::internal("root inode missing"))?;
        // names borrow from `path`; only the parts of a symlink target are copied
        let mut stack: Vec<(Cow<'_, str>, InodeRec)> = Vec::with_capacity(comps.len() + 1);
        stack.push((Cow::Borrowed(""), root));
        let mut queue: VecDeque<Cow<'_, str>> = comps.into_iter().map(Cow::Borrowed).collect();
        let mut hops = 0;
        while let Some(name) = queue.pop_front() {
            let last = queue.is_empty();
            if name == "." {
                continue;
            }
            if name == ".." {
                if stack.len() > 1 {
                    stack.pop();
                }
                continue;
            }
            let dir = &stack[stack.len() - 1].1;
            check(c, dir, 1, || join_stack(&stack, ""))?;
            let child = match r.child(dir.id, &name)? {
                Some(id) => r.inode(id)?,
                None => None,
            };
            let Some(child) = child else {
                if last {
                    let chain = stack.iter().map(|(_, i)| i.id).collect();
                    return Ok(Walk {
                        path: join_stack(&stack, &name),
                        parent: Some(dir.clone()),
                        name: name.into_owned(),
                        inode: None,
                        chain,
                    });
                }
                return Err(FsError::not_found(join_stack(&stack, &name)));
            };
            if is_symlink(&child) && (!last || follow_last) {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(FsError::InvalidPath {
                        path: path.to_string(),
                        message: "too many levels of symbolic links".into(),
                    });
                }
                let target = &child.symlink_target;
                if target.starts_with('/') {
                    stack.truncate(1);
                }
                for part in target.split('/').rev().filter(|p| !p.is_empty()) {
                    queue.push_front(Cow::Owned(part.to_string()));
                }
                continue;
            }
            if last {
                let chain = stack.iter().map(|(_, i)| i.id).collect();
                return Ok(Walk {
                    path: join_stack(&stack, &name),
                    parent: Some(dir.clone()),
                    name: name.into_owned(),
                    inode: Some(child),
                    chain,
                });
            }
            if !is_dir(&child) {
                return Err(FsError::NotADirectory {
                    path: join_stack(&stack, &name),
                });
            }
            stack.push((name, child));
        }
        // The path ended at a directory already on the stack (`/`, or a symlink to `.`/`..`).
        let path = join_stack(&stack, "");
        let (name, ino) = stack.pop().unwrap_or_default();
        let parent = stack.last().map(|(_, i)| i.clone());
        let chain = stack.iter().map(|(_, i)| i.id).collect();
        Ok(Walk {
            parent,
            name: name.into_owned(),
            inode: Some(ino),
            path,
            chain,
        })
    }

    /// A fresh inode of `kind` to be linked under `parent` (setgid inheritance applied).
    pub(super) fn new_inode(
        txn: &mut Txn<'_>,
        kind: FileType,
        mode: u32,
        c: &CallerInfo,
        parent: &InodeRec,
        name: &str,
    ) -> InodeRec {
        let mut mode = mode & 0o7777;
        let mut gid = c.gid;
        if parent.mode & S_ISGID != 0 {
            gid = parent.gid;
            if kind == FileType::Dir {
                mode |= S_ISGID;
            }
        }
        let id = txn.alloc_inode();
        InodeRec {
            id,
            file_type: kind as i32,
            mode,
            uid: c.uid,
            gid,
            mtime_ms: txn.now,
            atime_ms: txn.now,
            ctime_ms: txn.now,
            nlink: if kind == FileType::Dir { 2 } else { 1 },
            parent: parent.id,
            name: name.to_string(),
            storage_tier: StorageTier::Unspecified as i32,
            ..Default::default()
        }
    }
}
