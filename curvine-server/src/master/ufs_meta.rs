//! Entries under a mount, loaded from the under-store on demand.
//!
//! A lookup or listing under a mount asks the store for what the master has not seen
//! (or has not checked within the mount's sync interval): one stat (or a one-entry
//! listing, for a prefix) per unknown path component, one paginated listing per
//! directory listed. The store is asked with no lock held; what it said is then recorded
//! in one mutation, so the records always match one answer of the store.
//!
//! A file's blocks are records with no replica (`BlockRec::ufs`) until a worker fetches
//! them. When the store's length or ETag of a file changes, its blocks are dropped and
//! new ones (new ids) made, so cached bytes of the old object are never served.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use curvine_common::proto::{CallerInfo, FileType, LocatedBlock, StorageTier, UfsRange};
use curvine_common::{BlockId, FsError, FsResult, InodeId, WorkerId};

use super::mounts::Mount;
use super::namespace::{is_dir, is_file, Delete, Namespace, Reader, Txn};
use super::records::{BlockRec, InodeRec, UfsRec};
use crate::ufs::{self, Object};

/// Directories `resync` walks at most in one call.
const MAX_RESYNC_DIRS: usize = 100_000;

fn root() -> CallerInfo {
    CallerInfo::default()
}

fn join_key(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// Whether a record loaded at `at` must be checked again.
fn stale(m: &Mount, at: i64, now: i64) -> bool {
    let every = m.info.sync_interval_ms;
    at <= 0 || every == 0 || (every > 0 && now.saturating_sub(at) >= every)
}

/// Counts of a resync.
#[derive(Debug, Default, Clone, Copy)]
pub struct Synced {
    pub dirs: u64,
    pub entries: u64,
    pub changed: u64,
    pub removed: u64,
    /// Removed subtrees left to the purge task (too large for one entry).
    pub detached: u64,
    /// Inodes removed in the entry being made (kept under `master.delete_batch`).
    removed_inodes: u64,
}

impl Synced {
    fn add(&mut self, o: Synced) {
        self.dirs += o.dirs;
        self.entries += o.entries;
        self.changed += o.changed;
        self.removed += o.removed;
        self.detached += o.detached;
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> FsResult<T> + Send + 'static,
) -> FsResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| FsError::internal(format!("metadata load: {e}")))?
}

impl Namespace {
    /// Before a lookup of `path` (and a listing of it, with `list`): record what the
    /// under-store has along it that the master has not seen or not checked within the
    /// sync interval (`force`: check now). Paths outside mounts return at once; paths
    /// the call itself will refuse (bad, not found) are left to it.
    pub async fn ufs_prepare(
        self: &Arc<Self>,
        path: &str,
        list: bool,
        force: bool,
    ) -> FsResult<()> {
        if self.mounts.is_empty() {
            return Ok(());
        }
        let Ok(path) = curvine_common::path::normalize(path) else {
            return Ok(());
        };
        let Some((m, rel)) = self.mounts.resolve(&path) else {
            return Ok(());
        };
        let mut dir = m.info.path.clone();
        let mut key = String::new();
        for name in rel.split('/').filter(|c| !c.is_empty()) {
            let child_key = join_key(&key, name);
            let child_path = curvine_common::path::child(&dir, name);
            let ns = self.clone();
            let (d, n) = (dir.clone(), name.to_string());
            let (parent, child) = blocking(move || ns.local_pair(&d, &n)).await?;
            let Some(parent) = parent.filter(is_dir) else {
                return Ok(());
            };
            let now = curvine_common::types::now_ms();
            let check = match &child {
                Some(c) => c
                    .ufs
                    .as_ref()
                    .is_some_and(|u| u.persisted && (force || stale(&m, u.loaded_ms, now))),
                // a name the listing of a fresh directory did not have is not there
                None => {
                    force
                        || parent
                            .ufs
                            .as_ref()
                            .is_none_or(|u| stale(&m, u.listed_ms, now))
                }
            };
            let child = if check && parent.ufs.is_some() {
                let found = ufs::probe(m.uri(), m.op()?, &child_key).await?;
                let ns = self.clone();
                let (d, n, k, id) = (dir.clone(), name.to_string(), child_key.clone(), m.id());
                blocking(move || ns.record_entry(id, &d, &n, &k, found)).await?
            } else {
                child
            };
            match child {
                Some(c) if is_dir(&c) => {}
                _ => return Ok(()),
            }
            dir = child_path;
            key = child_key;
        }
        if list {
            self.ufs_list(&m, &dir, &key, force).await?;
        }
        Ok(())
    }

    /// The directory `dir` and its entry `name`, as the store has them now.
    fn local_pair(&self, dir: &str, name: &str) -> FsResult<(Option<InodeRec>, Option<InodeRec>)> {
        let d = match self.walk(&*self.store, dir, &root(), false) {
            Ok(w) => w.inode,
            Err(FsError::NotFound { .. }) | Err(FsError::NotADirectory { .. }) => None,
            Err(e) => return Err(e),
        };
        let Some(d) = d else {
            return Ok((None, None));
        };
        let child = match self.store.child(d.id, name)? {
            Some(id) => self.store.inode(id)?,
            None => None,
        };
        Ok((Some(d), child))
    }

    /// Load the listing of directory `dir` (key `key`) unless it is fresh.
    async fn ufs_list(
        self: &Arc<Self>,
        m: &Arc<Mount>,
        dir: &str,
        key: &str,
        force: bool,
    ) -> FsResult<Synced> {
        let ns = self.clone();
        let d = dir.to_string();
        let ino = blocking(move || match ns.walk(&*ns.store, &d, &root(), false) {
            Ok(w) => Ok(w.inode),
            Err(FsError::NotFound { .. }) | Err(FsError::NotADirectory { .. }) => Ok(None),
            Err(e) => Err(e),
        })
        .await?;
        let Some(ino) = ino.filter(is_dir) else {
            return Ok(Synced::default());
        };
        let Some(u) = &ino.ufs else {
            return Ok(Synced::default());
        };
        if !force && !stale(m, u.listed_ms, curvine_common::types::now_ms()) {
            return Ok(Synced::default());
        }
        let objs = ufs::list_dir(m.uri(), m.op()?, key).await?;
        let ns = self.clone();
        let (d, k, id) = (dir.to_string(), key.to_string(), m.id());
        blocking(move || ns.record_listing(id, &d, &k, objs)).await
    }

    /// Record what the store said of entry `name` of `dir` (`found`: nothing).
    fn record_entry(
        &self,
        mount_id: u64,
        dir: &str,
        name: &str,
        key: &str,
        found: Option<Object>,
    ) -> FsResult<Option<InodeRec>> {
        let path = curvine_common::path::child(dir, name);
        let (ino, detached) = self
            .mutate(0, |txn| {
                let w = self.walk(&*txn, &path, &root(), false)?;
                let parent = w.dir()?.clone();
                let mut s = Synced::default();
                let r = self.reconcile(
                    txn,
                    mount_id,
                    &parent,
                    dir,
                    name,
                    key,
                    w.inode.clone(),
                    found.as_ref(),
                    &mut s,
                )?;
                Ok((r, s.detached))
            })?
            .0;
        if detached > 0 {
            self.purge.wake();
        }
        Ok(ino)
    }

    /// Record a directory's listing: new entries added, changed ones updated (their
    /// blocks dropped), entries the store no longer has removed.
    fn record_listing(
        &self,
        mount_id: u64,
        dir: &str,
        key: &str,
        objs: Vec<Object>,
    ) -> FsResult<Synced> {
        let max_name = self.conf.max_name_len;
        let s = self
            .mutate(0, |txn| {
                let mut s = Synced {
                    dirs: 1,
                    ..Default::default()
                };
                let w = self.walk(&*txn, dir, &root(), false)?;
                let d = w.existing()?.clone();
                if !is_dir(&d) {
                    return Ok(s);
                }
                let mut have: HashMap<String, u64> = HashMap::new();
                let mut after = String::new();
                loop {
                    let (page, more) = txn.list(d.id, &after, 4096)?;
                    match page.last() {
                        Some((n, _)) if more => after = n.clone(),
                        _ => after.clear(),
                    }
                    have.extend(page);
                    if after.is_empty() {
                        break;
                    }
                }
                let mut seen = HashSet::new();
                for o in &objs {
                    if o.name.len() > max_name || curvine_common::path::check_name(&o.name).is_err()
                    {
                        continue;
                    }
                    if !seen.insert(o.name.clone()) {
                        continue; // an object and a prefix of one name: the first wins
                    }
                    s.entries += 1;
                    let ex = match have.get(&o.name) {
                        Some(id) => txn.inode(*id)?,
                        None => None,
                    };
                    let k = join_key(key, &o.name);
                    self.reconcile(txn, mount_id, &d, dir, &o.name, &k, ex, Some(o), &mut s)?;
                }
                for (name, id) in &have {
                    if seen.contains(name) {
                        continue;
                    }
                    if let Some(ino) = txn.inode(*id)? {
                        let k = join_key(key, name);
                        self.reconcile(txn, mount_id, &d, dir, name, &k, Some(ino), None, &mut s)?;
                    }
                }
                let mut d = txn.must_inode(d.id)?;
                let u = d.ufs.get_or_insert_with(|| {
                    Box::new(UfsRec {
                        mount_id,
                        key: key.to_string(),
                        persisted: true,
                        ..Default::default()
                    })
                });
                u.listed_ms = txn.now;
                u.loaded_ms = txn.now;
                txn.put_inode(d);
                Ok(s)
            })?
            .0;
        if s.detached > 0 {
            self.purge.wake();
        }
        Ok(s)
    }

    /// Bring entry `name` of `parent` in line with the store's `found`. Entries that are
    /// Curvine's own (not from the store, or not persisted yet) are left alone.
    #[allow(clippy::too_many_arguments)]
    fn reconcile(
        &self,
        txn: &mut Txn<'_>,
        mount_id: u64,
        parent: &InodeRec,
        dir: &str,
        name: &str,
        key: &str,
        existing: Option<InodeRec>,
        found: Option<&Object>,
        s: &mut Synced,
    ) -> FsResult<Option<InodeRec>> {
        if let Some(e) = &existing {
            if !e.ufs.as_ref().is_some_and(|u| u.persisted) {
                return Ok(existing);
            }
        }
        let path = curvine_common::path::child(dir, name);
        match (existing, found) {
            (None, None) => Ok(None),
            (None, Some(o)) => {
                s.changed += 1;
                Ok(Some(self.add_entry(txn, mount_id, parent, name, key, o)?))
            }
            (Some(e), None) => {
                s.removed += 1;
                self.remove_entry(txn, parent, &path, name, e, s)?;
                Ok(None)
            }
            (Some(e), Some(o)) if is_dir(&e) != o.dir || !(is_dir(&e) || is_file(&e)) => {
                s.changed += 1;
                self.remove_entry(txn, parent, &path, name, e, s)?;
                Ok(Some(self.add_entry(txn, mount_id, parent, name, key, o)?))
            }
            (Some(mut e), Some(o)) => {
                let Some(mut u) = e.ufs.take() else {
                    return Ok(Some(e));
                };
                if is_file(&e) && changed(&u, o) {
                    s.changed += 1;
                    let old: Vec<u64> = std::mem::take(&mut e.blocks);
                    for b in txn.blocks(&old)?.into_iter().flatten() {
                        txn.drop_block(&b);
                    }
                    e.len = o.len;
                    e.tail_zeros = 0;
                    if o.mtime_ms > 0 {
                        e.mtime_ms = o.mtime_ms;
                    }
                    e.ctime_ms = txn.now;
                    add_blocks(txn, &mut e, o.len);
                    u.len = o.len;
                    u.etag = o.etag.clone();
                    u.mtime_ms = o.mtime_ms;
                }
                u.loaded_ms = txn.now;
                e.ufs = Some(u);
                txn.put_inode(e.clone());
                Ok(Some(e))
            }
        }
    }

    fn add_entry(
        &self,
        txn: &mut Txn<'_>,
        mount_id: u64,
        parent: &InodeRec,
        name: &str,
        key: &str,
        o: &Object,
    ) -> FsResult<InodeRec> {
        let owner = CallerInfo {
            uid: parent.uid,
            gid: parent.gid,
            ..Default::default()
        };
        let (kind, mode) = if o.dir {
            (FileType::Dir, 0o755)
        } else {
            (FileType::File, 0o644)
        };
        let mut ino = Self::new_inode(txn, kind, mode, &owner, parent, name);
        ino.complete = true;
        if o.mtime_ms > 0 {
            ino.mtime_ms = o.mtime_ms;
        }
        ino.ufs = Some(Box::new(UfsRec {
            mount_id,
            key: key.to_string(),
            etag: o.etag.clone(),
            mtime_ms: o.mtime_ms,
            len: o.len,
            persisted: true,
            loaded_ms: txn.now,
            listed_ms: 0,
        }));
        if o.dir {
            txn.counters.dirs += 1;
        } else {
            ino.block_size = self.conf.block_size.0.max(1);
            ino.replicas = 1;
            ino.len = o.len;
            add_blocks(txn, &mut ino, o.len);
            txn.counters.files += 1;
        }
        txn.link_entry(parent.id, name, ino.id)?;
        txn.put_inode(ino.clone());
        Ok(ino)
    }

    /// Remove entry `name` (at `path`) of `parent`, and what lies below it. The inodes
    /// one entry removes stay under `master.delete_batch` (counted in `s`): a subtree
    /// that would pass it is detached and removed by the purge task (`s.detached`; the
    /// caller wakes it once the entry is applied).
    fn remove_entry(
        &self,
        txn: &mut Txn<'_>,
        parent: &InodeRec,
        path: &str,
        name: &str,
        mut ino: InodeRec,
        s: &mut Synced,
    ) -> FsResult<()> {
        if is_dir(&ino) && ino.children > 0 {
            let limit = u64::from(self.conf.delete_batch.max(1));
            let left = limit.saturating_sub(s.removed_inodes);
            let below = Namespace::count_below(txn, &ino, left)?;
            if below >= left {
                self.detach_as(txn, parent.id, name, ino.id, false)?;
                s.detached += 1;
                return Ok(());
            }
            s.removed_inodes += below;
            self.delete_contents(txn, &ino, path, &root())?;
            ino = txn.must_inode(ino.id)?;
        }
        s.removed_inodes += 1;
        txn.unlink_entry(parent.id, name)?;
        txn.release_inode(ino)
    }

    /// Check `path` and every directory below it that the master has loaded against the
    /// store now.
    pub async fn resync(self: &Arc<Self>, path: &str) -> FsResult<Synced> {
        let path = curvine_common::path::normalize(path)?;
        let Some((m, _)) = self.mounts.resolve(&path) else {
            return Err(FsError::invalid(format!("{path}: not under a mount")));
        };
        self.ufs_prepare(&path, false, true).await?;
        let mut total = Synced::default();
        let mut queue = vec![path];
        let mut visited = 0usize;
        while let Some(dir) = queue.pop() {
            visited += 1;
            if visited > MAX_RESYNC_DIRS {
                break;
            }
            let Some((_, key)) = self.mounts.resolve(&dir) else {
                continue;
            };
            total.add(self.ufs_list(&m, &dir, &key, true).await?);
            let ns = self.clone();
            let d = dir.clone();
            let subdirs = blocking(move || ns.loaded_subdirs(&d)).await?;
            queue.extend(subdirs);
        }
        Ok(total)
    }

    /// Paths of the directories in `dir` that came from the store.
    fn loaded_subdirs(&self, dir: &str) -> FsResult<Vec<String>> {
        let w = self.walk(&*self.store, dir, &root(), false)?;
        let Some(d) = w.inode.filter(is_dir) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        let mut after = String::new();
        loop {
            let (page, more) = self.store.list(d.id, &after, 4096)?;
            let ids: Vec<u64> = page.iter().map(|(_, id)| *id).collect();
            for ((name, _), ino) in page.iter().zip(self.store.inodes(&ids)?) {
                if ino.is_some_and(|i| is_dir(&i) && i.ufs.is_some()) {
                    out.push(curvine_common::path::child(dir, name));
                }
            }
            match page.last() {
                Some((n, _)) if more => after = n.clone(),
                _ => return Ok(out),
            }
        }
    }

    /// Drop the cached blocks of the persisted files at or under `path`; the entries
    /// stay and the next read fetches the blocks again. Returns (files, blocks, bytes).
    pub fn free(&self, path: &str, c: &CallerInfo) -> FsResult<((u64, u64, u64), u64)> {
        self.mutate_call(c, |txn| {
            let w = self.walk(&*txn, path, c, true)?;
            let ino = w.existing()?.clone();
            let mut n = (0, 0, 0);
            self.free_in(txn, &ino, &mut n)?;
            Ok(n)
        })
    }

    fn free_in(&self, txn: &mut Txn<'_>, ino: &InodeRec, n: &mut (u64, u64, u64)) -> FsResult<()> {
        if is_file(ino) {
            return self.free_file(txn, ino, n);
        }
        if !is_dir(ino) {
            return Ok(());
        }
        let mut after = String::new();
        loop {
            let (page, more) = txn.list(ino.id, &after, 1024)?;
            for (_, id) in &page {
                if let Some(child) = txn.inode_for_scan(*id)? {
                    self.free_in(txn, &child, n)?;
                }
            }
            match page.last() {
                Some((name, _)) if more => after = name.clone(),
                _ => return Ok(()),
            }
        }
    }

    /// Drop the cached blocks of file `ino` when the under-store holds it; adds to
    /// `n` = (files, blocks, bytes).
    pub(super) fn free_file(
        &self,
        txn: &mut Txn<'_>,
        ino: &InodeRec,
        n: &mut (u64, u64, u64),
    ) -> FsResult<()> {
        if !ino.ufs.as_ref().is_some_and(|u| u.persisted) {
            return Ok(()); // Curvine holds the only copy
        }
        let mut any = false;
        for mut b in txn.blocks(&ino.blocks)?.into_iter().flatten() {
            if b.locs.is_empty() || !b.ufs {
                continue;
            }
            for l in std::mem::take(&mut b.locs) {
                txn.del_worker_block(l.worker_id, b.id);
                txn.delete_replica(Delete {
                    worker: WorkerId(l.worker_id),
                    block: BlockId(b.id),
                    tier: super::apply::tier_of(l.tier),
                    len: b.len,
                });
                txn.replica_freed(l.worker_id, b.id);
            }
            n.1 += 1;
            n.2 += b.len;
            any = true;
            txn.put_block(b);
        }
        if any {
            n.0 += 1;
        }
        Ok(())
    }

    /// For `open`: each block of an under-store file that no live worker holds gets the
    /// worker that is to fetch it (on the reader's host first), and the range to fetch.
    pub(super) fn assign_fetchers(
        &self,
        ino: &InodeRec,
        blocks: &mut [LocatedBlock],
        client_host: &str,
    ) {
        // a file written again since its upload (an append, a truncate) keeps the old
        // object's etag: its unchanged blocks can be read from that object while it
        // is there (the fetch checks the etag)
        let Some(u) = ino
            .ufs
            .as_ref()
            .filter(|u| u.persisted || !u.etag.is_empty())
        else {
            return; // not in the store: Curvine's replicas are the only copy
        };
        for b in blocks.iter_mut() {
            if !b.locations.is_empty() {
                continue;
            }
            let Some(loc) = self
                .workers
                .pick_fetcher(BlockId(b.block_id), client_host, &[])
            else {
                continue;
            };
            b.locations = vec![loc];
            b.ufs = Some(UfsRange {
                mount_id: u.mount_id,
                key: u.key.clone(),
                offset: b.offset,
                len: b.len,
                etag: u.etag.clone(),
                tier: if ino.storage_tier == 0 {
                    StorageTier::Unspecified as i32
                } else {
                    ino.storage_tier
                },
            });
        }
    }
}

impl Namespace {
    /// For `open` with workers to avoid: each block `assign_fetchers` gave to one of
    /// `exclude` gets another live worker (none if there is no other).
    pub(super) fn avoid_fetchers(
        &self,
        blocks: &mut [LocatedBlock],
        client_host: &str,
        exclude: &[u32],
    ) {
        let avoid: Vec<WorkerId> = exclude.iter().map(|&w| WorkerId(w)).collect();
        for b in blocks.iter_mut().filter(|b| b.ufs.is_some()) {
            if b.locations.iter().any(|l| exclude.contains(&l.worker_id)) {
                b.locations = self
                    .workers
                    .pick_fetcher(BlockId(b.block_id), client_host, &avoid)
                    .into_iter()
                    .collect();
            }
        }
    }
}

/// Whether the store's object is not the one the blocks were made of: another length,
/// another ETag, or (when either answer has no ETag) another mtime, to the second since
/// stores give it at different precisions.
fn changed(u: &UfsRec, o: &Object) -> bool {
    if u.len != o.len {
        return true;
    }
    let (was, now) = (u.etag.trim_matches('"'), o.etag.trim_matches('"'));
    if !was.is_empty() && !now.is_empty() {
        return was != now;
    }
    u.mtime_ms.div_euclid(1000) != o.mtime_ms.div_euclid(1000)
}

/// Block records (no replica yet) covering `len` bytes of `ino`, with new ids.
fn add_blocks(txn: &mut Txn<'_>, ino: &mut InodeRec, len: u64) {
    let bs = ino.block_size.max(1);
    let mut off = 0;
    while off < len {
        let n = bs.min(len - off);
        let id = BlockId::new(InodeId(ino.id), ino.next_block_index).0;
        ino.next_block_index += 1;
        ino.blocks.push(id);
        txn.counters.blocks += 1;
        txn.put_block(BlockRec {
            id,
            inode: ino.id,
            len: n,
            locs: Vec::new(),
            committed: true,
            ufs: true,
        });
        off += n;
    }
}
