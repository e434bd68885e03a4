//! Mount TTLs: a background task that, every `master.ttl_interval`, finds the
//! persisted files of each mount with a TTL that nobody opened for that long, and
//! drops their cached blocks (`free`) or their entries (`delete`: from Curvine only,
//! never from the under-store; the next listing of the directory loads them again).
//!
//! The last open of a file is kept in memory: after a master restart, a file's age
//! counts from its mtime until it is opened again. Files not persisted yet are never
//! touched.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use curvine_common::proto::TtlAction;
use curvine_common::{FsError, FsResult};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::namespace::{is_dir, is_file, Namespace, Reader};
use super::records::InodeRec;

/// Entries looked at per directory page.
const PAGE: usize = 1024;

/// When files were last opened (inode id -> ms).
#[derive(Default)]
pub struct LastOpen(Mutex<HashMap<u64, i64>>);

impl LastOpen {
    fn get(&self, id: u64) -> Option<i64> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .copied()
    }
    fn set(&self, id: u64, at: i64) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, at);
    }
    fn forget(&self, id: u64) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    pub freed: u64,
    pub deleted: u64,
}

impl Namespace {
    /// In `open`: remember when a file under a mount with a TTL was opened.
    pub(super) fn note_open(&self, ino: &InodeRec) {
        let Some(u) = &ino.ufs else {
            return;
        };
        if self
            .mounts
            .by_id(u.mount_id)
            .is_some_and(|m| m.info.ttl_ms > 0)
        {
            self.opened.set(ino.id, curvine_common::types::now_ms());
        }
    }

    /// One pass over every mount with a TTL.
    pub fn expire_ttl(&self) -> FsResult<Expired> {
        let mut total = Expired::default();
        for m in self.mounts.list() {
            let ttl = m.info.ttl_ms as i64;
            if ttl <= 0 {
                continue;
            }
            let delete = m.info.ttl_action == TtlAction::Delete as i32;
            let now = curvine_common::types::now_ms();
            let root = match self.walk(
                &*self.store,
                &m.info.path,
                &curvine_common::proto::CallerInfo::default(),
                false,
            ) {
                Ok(w) => w.inode,
                Err(FsError::NotFound { .. }) => None,
                Err(e) => return Err(e),
            };
            let Some(root) = root else {
                continue;
            };
            let mut expired: Vec<(u64, String, InodeRec)> = Vec::new();
            let mut dirs = vec![root.id];
            while let Some(d) = dirs.pop() {
                let mut after = String::new();
                loop {
                    let (page, more) = self.store.list(d, &after, PAGE)?;
                    let ids: Vec<u64> = page.iter().map(|(_, id)| *id).collect();
                    for ((name, _), ino) in page.iter().zip(self.store.inodes(&ids)?) {
                        let Some(ino) = ino else { continue };
                        if is_dir(&ino) {
                            dirs.push(ino.id);
                            continue;
                        }
                        if !is_file(&ino) || !ino.complete {
                            continue;
                        }
                        if !ino.ufs.as_ref().is_some_and(|u| u.persisted) {
                            continue;
                        }
                        let last = self
                            .opened
                            .get(ino.id)
                            .unwrap_or(0)
                            .max(ino.mtime_ms)
                            .max(ino.ctime_ms);
                        if now.saturating_sub(last) >= ttl {
                            expired.push((d, name.clone(), ino));
                        }
                    }
                    match page.last() {
                        Some((n, _)) if more => after = n.clone(),
                        _ => break,
                    }
                }
            }
            for (dir, name, ino) in expired {
                if delete {
                    if self.ttl_delete(dir, &name, ino.id)? {
                        total.deleted += 1;
                        self.opened.forget(ino.id);
                    }
                } else if self.ttl_free(ino.id)? {
                    total.freed += 1;
                }
            }
        }
        Ok(total)
    }

    /// Drop the cached blocks of persisted file `id`; whether it had any.
    fn ttl_free(&self, id: u64) -> FsResult<bool> {
        let ((n, _), _) = self.mutate(0, |txn| {
            let Some(ino) = txn.inode(id)? else {
                return Ok(((0, 0, 0), ()));
            };
            let mut n = (0, 0, 0);
            self.free_file(txn, &ino, &mut n)?;
            Ok((n, ()))
        })?;
        Ok(n.1 > 0)
    }

    /// Remove entry `name` (inode `id`) of directory `dir` from Curvine, if it is still
    /// a persisted file; its directory's listing is loaded again on the next lookup.
    fn ttl_delete(&self, dir: u64, name: &str, id: u64) -> FsResult<bool> {
        Ok(self
            .mutate(0, |txn| {
                if txn.child(dir, name)? != Some(id) {
                    return Ok(false);
                }
                let Some(ino) = txn.inode(id)? else {
                    return Ok(false);
                };
                if !is_file(&ino) || !ino.ufs.as_ref().is_some_and(|u| u.persisted) {
                    return Ok(false);
                }
                txn.unlink_entry(dir, name)?;
                txn.release_inode(ino)?;
                let mut d = txn.must_inode(dir)?;
                if let Some(u) = d.ufs.as_mut() {
                    u.listed_ms = 0;
                }
                txn.put_inode(d);
                Ok(true)
            })?
            .0)
    }
}

/// Run `expire_ttl` every `master.ttl_interval` while a mount has a TTL.
pub async fn ttl_loop(ns: Arc<Namespace>, cancel: CancellationToken) {
    let every = ns.conf.ttl_interval.0.max(Duration::from_millis(10));
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        // the leader expires files; its entries reach the followers
        if !ns.leads() || !ns.mounts.list().iter().any(|m| m.info.ttl_ms > 0) {
            continue;
        }
        let n = ns.clone();
        match tokio::task::spawn_blocking(move || n.expire_ttl()).await {
            Ok(Ok(e)) if e != Expired::default() => {
                info!(
                    freed = e.freed,
                    deleted = e.deleted,
                    "mount TTL expired files"
                )
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => warn!(error = %e, "TTL pass failed"),
            Err(e) => warn!(error = %e, "TTL pass panicked"),
        }
    }
}
