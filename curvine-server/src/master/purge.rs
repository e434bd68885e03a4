//! Recursive deletes in bounded entries. A recursive delete of more than
//! `master.delete_batch` inodes is one small entry that detaches the subtree (its
//! directory entry goes, so the path is gone at once) and records its root under
//! `del/` in `meta`. The `purge` task then removes the detached inodes, their blocks and
//! their replicas in entries of at most `delete_batch` inodes each, deepest first, and
//! drops the record with the root. The record makes the removal resume after a
//! restart; nothing else can reach a detached subtree (no path leads into it), so the
//! task is the only writer of its entries.
//!
//! `umount` and `resync` (a directory gone from the store) hand subtrees of that size to
//! the same task.
//!
//! Until the task reaches them, the detached inodes still count in the master's file
//! and directory totals, their blocks stay on the workers, and a file of the subtree
//! that has another hard link outside it keeps that link count.

use std::sync::Arc;
use std::time::Duration;

use curvine_common::tasks::Task;
use curvine_common::{FsError, FsResult};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use super::namespace::{is_dir, Namespace, Txn};
use super::records::InodeRec;

/// `del/` ‖ inode id (BE u64) -> nothing: the root of a detached subtree.
pub const META_DETACHED_PREFIX: &[u8] = b"del/";

/// How long the task waits after a failed step before it tries again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

pub fn detached_key(root: u64) -> Vec<u8> {
    let mut k = META_DETACHED_PREFIX.to_vec();
    k.extend_from_slice(&root.to_be_bytes());
    k
}

/// Wakes the `purge` task when a subtree is detached.
#[derive(Default)]
pub struct Purge {
    wake: Notify,
}

impl Purge {
    pub fn wake(&self) {
        self.wake.notify_one();
    }
}

/// Where the removal of one detached subtree stands: the directories from its root
/// down to the one being emptied, each with the last name passed in it. Kept in memory
/// only: after a restart the walk starts again at the root, and finds only what is left.
#[derive(Debug, Clone, Default)]
pub(super) struct Cursor {
    frames: Vec<Frame>,
}

#[derive(Debug, Clone)]
struct Frame {
    dir: u64,
    /// The directory's name in the frame above it (empty for the root).
    name: String,
    /// Entries up to this name were removed or are being descended into.
    after: String,
}

impl Namespace {
    /// Detach directory `ino`, named `name` in `parent`, for removal in the
    /// background: its entry goes, its root is recorded. The caller wakes the task
    /// once the entry is applied.
    pub(super) fn detach(
        &self,
        txn: &mut Txn<'_>,
        parent: u64,
        name: &str,
        ino: u64,
    ) -> FsResult<()> {
        self.detach_as(txn, parent, name, ino, true)
    }

    /// `detach` of an entry that does not count in its directory's link count (an
    /// under-store directory is linked without its `..`; `subdir` false then).
    pub(super) fn detach_as(
        &self,
        txn: &mut Txn<'_>,
        parent: u64,
        name: &str,
        ino: u64,
        subdir: bool,
    ) -> FsResult<()> {
        txn.unlink_entry_as(parent, name, subdir)?;
        txn.put_meta(detached_key(ino), Vec::new());
        Ok(())
    }

    /// How many inodes lie below directory `dir`, counted no further than `limit`: at
    /// most `limit` entries are read, so a caller can tell whether removing them in
    /// its own entry would pass `master.delete_batch`.
    pub(super) fn count_below(txn: &Txn<'_>, dir: &InodeRec, limit: u64) -> FsResult<u64> {
        if u64::from(dir.children) >= limit {
            return Ok(limit);
        }
        let mut seen = 0u64;
        let mut dirs = vec![dir.id];
        while let Some(d) = dirs.pop() {
            let mut after = String::new();
            loop {
                let want = limit.saturating_sub(seen).clamp(1, 1024) as usize;
                let (entries, more) = txn.list(d, &after, want)?;
                for (_, id) in &entries {
                    seen += 1;
                    if seen >= limit {
                        return Ok(seen);
                    }
                    match txn.inode_for_scan(*id)? {
                        Some(c) if is_dir(&c) && c.children > 0 => dirs.push(c.id),
                        _ => {}
                    }
                }
                match entries.last() {
                    Some((name, _)) if more => after = name.clone(),
                    _ => break,
                }
            }
        }
        Ok(seen)
    }

    /// Roots of the subtrees detached and not yet removed.
    pub(super) fn detached_roots(&self) -> FsResult<Vec<u64>> {
        let mut out = Vec::new();
        for (k, _) in self.store.meta_scan(META_DETACHED_PREFIX)? {
            match <[u8; 8]>::try_from(&k[..]) {
                Ok(b) => out.push(u64::from_be_bytes(b)),
                Err(_) => warn!(key = ?k, "ignoring a malformed detached-subtree record"),
            }
        }
        Ok(out)
    }

    /// Remove up to `master.delete_batch` inodes of the subtree detached at `root`, in
    /// one entry, from where `cursor` stands. Returns how many inodes went, whether the
    /// subtree is gone (its record with it), and the entry's sequence. On an error
    /// nothing was applied and `cursor` is as before.
    pub(super) fn purge_step(&self, root: u64, cursor: &mut Cursor) -> FsResult<(u64, bool, u64)> {
        let budget = u64::from(self.conf.delete_batch.max(1));
        let mut walk = cursor.clone();
        let ((removed, done), seq) = self.mutate(0, |txn| {
            if walk.frames.is_empty() {
                walk.frames.push(Frame {
                    dir: root,
                    name: String::new(),
                    after: String::new(),
                });
            }
            let mut removed = 0u64;
            while removed < budget {
                let Some(top) = walk.frames.last() else {
                    return Ok((removed, true));
                };
                let (dir, after) = (top.dir, top.after.clone());
                let want = (budget - removed).min(1024) as usize;
                let (entries, _) = txn.list(dir, &after, want)?;
                if entries.is_empty() {
                    // emptied (what this entry removed is past the cursor): it goes too
                    let Some(f) = walk.frames.pop() else {
                        return Ok((removed, true));
                    };
                    if let Some(d) = txn.inode_for_scan(f.dir)? {
                        txn.release_inode(d)?;
                        removed += 1;
                    }
                    match walk.frames.last_mut() {
                        Some(up) => {
                            txn.del_edge(up.dir, &f.name);
                            up.after = f.name;
                        }
                        None => {
                            txn.del_meta(detached_key(root));
                            return Ok((removed, true));
                        }
                    }
                    continue;
                }
                for (name, id) in entries {
                    match txn.inode_for_scan(id)? {
                        Some(child) if is_dir(&child) => {
                            walk.frames.push(Frame {
                                dir: child.id,
                                name,
                                after: String::new(),
                            });
                            break;
                        }
                        Some(child) => {
                            txn.del_edge(dir, &name);
                            txn.release_inode(child)?;
                            removed += 1;
                        }
                        None => txn.del_edge(dir, &name),
                    }
                    // nothing was pushed: the frame of `dir` is still the top one
                    if let Some(top) = walk.frames.last_mut() {
                        top.after = name;
                    }
                    if removed >= budget {
                        break;
                    }
                }
            }
            Ok((removed, false))
        })?;
        *cursor = walk;
        Ok((removed, done, seq))
    }
}

/// The `purge` task: removes every detached subtree, one bounded entry at a time,
/// starting with those recorded before a restart; then sleeps until woken.
pub async fn purge_loop(ns: Arc<Namespace>, task: Task, fault_scope: String) {
    loop {
        let roots = {
            let n = ns.clone();
            blocking(move || n.detached_roots()).await
        };
        let roots = match roots {
            Ok(r) => r,
            Err(e) => {
                warn!(error = %e, "cannot list detached subtrees");
                task.failed(&e);
                if !task.sleep(RETRY_AFTER).await {
                    return;
                }
                continue;
            }
        };
        if !roots.is_empty() && !ns.leads() {
            // the leader purges; its entries remove the roots here too
            task.idle();
            if !task.sleep(RETRY_AFTER).await {
                return;
            }
            continue;
        }
        if roots.is_empty() {
            task.idle();
            tokio::select! {
                _ = task.cancelled() => return,
                _ = ns.purge.wake.notified() => continue,
            }
        }
        for root in roots {
            let mut cursor = Cursor::default();
            let mut total = 0u64;
            loop {
                if task.is_cancelled() {
                    return;
                }
                task.busy(format!(
                    "remove detached subtree {root}: {total} inodes so far"
                ));
                let n = ns.clone();
                let _scope = fault_scope.clone();
                let step = blocking(move || {
                    #[cfg(feature = "fault-injection")]
                    crate::fault::disk_hook("master.purge", &_scope)?;
                    let r = n.purge_step(root, &mut cursor)?;
                    Ok((r, cursor))
                })
                .await;
                match step {
                    Ok(((removed, done, seq), c)) => {
                        cursor = c;
                        total += removed;
                        // nobody waits for these entries; a sync soon makes them durable
                        ns.syncer.request(seq);
                        if done {
                            info!(root, inodes = total, "detached subtree removed");
                            break;
                        }
                    }
                    Err(e) => {
                        warn!(root, error = %e, "removing a detached subtree failed; retrying");
                        task.failed(&e);
                        cursor = Cursor::default();
                        if !task.sleep(RETRY_AFTER).await {
                            return;
                        }
                    }
                }
            }
        }
        debug!("detached subtrees removed");
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> FsResult<T> + Send + 'static,
) -> FsResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| FsError::internal(format!("purge: {e}")))?
}
