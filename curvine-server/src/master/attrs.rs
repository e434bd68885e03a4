//! Attributes: set_attr (chmod/chown/utimens/replicas), extended attributes, report.

use curvine_common::proto::{CallerInfo, FileStatus, ReportResponse, SetAttrRequest};
use curvine_common::{FsError, FsResult, WorkerId};

use super::namespace::{
    check, in_group, is_root, mode_after_chown, status, Namespace, S_ISGID, S_ISUID,
};

/// `set_xattr` flag: fail with AlreadyExists when the attribute exists.
pub const XATTR_CREATE: u32 = 1;
/// `set_xattr` flag: fail with NoSuchXattr when the attribute is missing.
pub const XATTR_REPLACE: u32 = 2;

const MAX_XATTR_NAME: usize = 255;
const MAX_XATTR_VALUE: usize = 64 << 10;

impl Namespace {
    /// chmod, chown, utimensat and the replica count, with Linux's rules: the mode by
    /// the owner (or root), or by a writer only to drop the set-ID bits a write drops;
    /// the owner by root; the group by root, or by the owner to a group the owner is
    /// in. A change of owner or group drops set-user-ID (and group-executable
    /// set-group-ID) of a non-directory. Times by the owner, or set to now by a writer.
    /// Every check comes first: a refused call changes nothing.
    pub fn set_attr(&self, req: &SetAttrRequest) -> FsResult<(FileStatus, u64)> {
        let c = req.caller.clone().unwrap_or_default();
        self.mutate_call(&c, |txn| {
            let w = self.walk(&*txn, &req.path, &c, !req.no_follow)?;
            let mut ino = w.existing()?.clone();
            let root = is_root(&c);
            let owner = root || c.uid == ino.uid;
            let not_permitted = || FsError::NotPermitted {
                path: w.path.clone(),
            };
            if let Some(uid) = req.uid {
                let may = root || (owner && uid == ino.uid);
                if !may {
                    return Err(not_permitted());
                }
            }
            if let Some(gid) = req.gid {
                let may = root || (owner && (gid == ino.gid || in_group(&c, gid)));
                if !may {
                    return Err(not_permitted());
                }
            }
            let chown = req.uid.is_some() || req.gid.is_some();
            let new_gid = req.gid.unwrap_or(ino.gid);
            if let Some(mode) = req.mode {
                let mode = mode & 0o7777;
                if !owner {
                    // a writer may drop the set-ID bits (the kernel does so before
                    // a write or truncate of theirs), nothing else
                    let setid = S_ISUID | S_ISGID;
                    let drops_only = mode != ino.mode
                        && mode & !setid == ino.mode & !setid
                        && mode & setid & !ino.mode == 0;
                    if !drops_only {
                        return Err(not_permitted());
                    }
                    check(&c, &ino, 2, || w.path.clone())?;
                }
            }
            let mtime_nsec = given_nsec(req.mtime_ms, req.mtime_nsec)?;
            let atime_nsec = given_nsec(req.atime_ms, req.atime_nsec)?;
            let explicit_times = req.mtime_ms.is_some() || req.atime_ms.is_some();
            if (explicit_times || req.times_now) && !owner {
                if !req.times_now {
                    return Err(not_permitted());
                }
                check(&c, &ino, 2, || w.path.clone())?;
            }
            if let Some(r) = req.replicas {
                if !owner {
                    return Err(FsError::PermissionDenied {
                        path: w.path.clone(),
                    });
                }
                if r == 0 || r > 16 {
                    return Err(FsError::invalid(format!(
                        "replicas {r} is out of range (1..=16)"
                    )));
                }
            }
            // every check passed: apply
            if chown {
                ino.uid = req.uid.unwrap_or(ino.uid);
                ino.gid = new_gid;
                ino.mode = mode_after_chown(&ino);
            }
            if let Some(mode) = req.mode {
                let mut mode = mode & 0o7777;
                if !root && mode & S_ISGID != 0 && !in_group(&c, new_gid) {
                    // Linux: set-group-ID is only for members of the file's group
                    mode &= !S_ISGID;
                }
                ino.mode = mode;
            }
            if req.times_now && !(owner && explicit_times) {
                ino.mtime_ms = txn.now;
                ino.atime_ms = txn.now;
            } else {
                if let (Some(t), Some(n)) = (req.mtime_ms, mtime_nsec) {
                    ino.mtime_ms = t;
                    ino.mtime_nsec = n;
                }
                if let (Some(t), Some(n)) = (req.atime_ms, atime_nsec) {
                    ino.atime_ms = t;
                    ino.atime_nsec = n;
                }
            }
            if let Some(r) = req.replicas {
                if ino.replicas != r {
                    self.repl.mark();
                }
                ino.replicas = r;
            }
            ino.ctime_ms = txn.now;
            txn.put_inode(ino.clone());
            Ok(status(&ino, w.path.clone(), w.name.clone()))
        })
    }

    pub fn set_xattr(
        &self,
        path: &str,
        name: &str,
        value: &[u8],
        flags: u32,
        c: &CallerInfo,
    ) -> FsResult<((), u64)> {
        check_xattr_name(name)?;
        if value.len() > MAX_XATTR_VALUE {
            return Err(FsError::invalid(format!(
                "xattr value of {} bytes is too large",
                value.len()
            )));
        }
        self.mutate_call(c, |txn| {
            let w = self.walk(&*txn, path, c, true)?;
            let mut ino = w.existing()?.clone();
            check(c, &ino, 2, || w.path.clone())?;
            let exists = ino.xattrs.contains_key(name);
            if flags & XATTR_CREATE != 0 && exists {
                return Err(FsError::exists(&w.path));
            }
            if flags & XATTR_REPLACE != 0 && !exists {
                return Err(FsError::NoSuchXattr {
                    path: w.path.clone(),
                });
            }
            ino.xattrs.insert(name.to_string(), value.to_vec());
            ino.ctime_ms = txn.now;
            txn.put_inode(ino);
            Ok(())
        })
    }

    pub fn get_xattr(&self, path: &str, name: &str, c: &CallerInfo) -> FsResult<Vec<u8>> {
        let w = self.walk(&*self.store, path, c, true)?;
        let ino = w.existing()?;
        check(c, ino, 4, || w.path.clone())?;
        ino.xattrs
            .get(name)
            .cloned()
            .ok_or_else(|| FsError::NoSuchXattr {
                path: w.path.clone(),
            })
    }

    pub fn list_xattr(&self, path: &str, c: &CallerInfo) -> FsResult<Vec<String>> {
        let w = self.walk(&*self.store, path, c, true)?;
        let ino = w.existing()?;
        Ok(ino.xattrs.keys().cloned().collect())
    }

    pub fn remove_xattr(&self, path: &str, name: &str, c: &CallerInfo) -> FsResult<((), u64)> {
        self.mutate_call(c, |txn| {
            let w = self.walk(&*txn, path, c, true)?;
            let mut ino = w.existing()?.clone();
            check(c, &ino, 2, || w.path.clone())?;
            if ino.xattrs.remove(name).is_none() {
                return Err(FsError::NoSuchXattr {
                    path: w.path.clone(),
                });
            }
            ino.ctime_ms = txn.now;
            txn.put_inode(ino);
            Ok(())
        })
    }

    pub fn report(&self) -> ReportResponse {
        let counters = self.counters();
        let mut workers = self.workers.reports();
        for w in &mut workers {
            if let Some(a) = &w.address {
                w.copies_in_flight = self.repl.inflight_to(WorkerId(a.worker_id));
            }
        }
        let rs = self.repl.stats();
        let backlog = self.persist_backlog();
        let (mut capacity, mut used) = (0, 0);
        for w in workers.iter().filter(|w| w.alive) {
            for t in &w.tiers {
                capacity += t.capacity;
                used += t.used;
            }
        }
        ReportResponse {
            capacity,
            used,
            files: counters.files,
            dirs: counters.dirs,
            blocks: counters.blocks,
            workers,
            cluster_id: self.cluster_id.clone(),
            under_replicated: rs.under_replicated,
            missing_blocks: rs.missing,
            copies_in_flight: rs.in_flight,
            copies_done: rs.done,
            copies_failed: rs.failed,
            bad_replicas: rs.bad_replicas,
            tasks: self.tasks.report(),
            load_jobs: self.jobs.running(),
            persist_pending: backlog.0,
            persist_pending_bytes: backlog.1,
            persist_failed: self
                .persister
                .failed
                .load(std::sync::atomic::Ordering::Relaxed),
            reporting: self.waiting_for_workers(),
        }
    }
}

fn check_xattr_name(name: &str) -> FsResult<()> {
    if name.is_empty() || name.len() > MAX_XATTR_NAME || name.contains('\0') {
        return Err(FsError::invalid(format!("bad xattr name {name:?}")));
    }
    Ok(())
}

/// The nanoseconds within the second to keep for a time of `ms` a caller sets, given
/// `nsec` or not (then `ms`'s own); `None` when no time is given.
fn given_nsec(ms: Option<i64>, nsec: Option<u32>) -> FsResult<Option<u32>> {
    let Some(ms) = ms else { return Ok(None) };
    let whole = curvine_common::types::time_nsec(ms, 0);
    match nsec {
        None => Ok(Some(whole)),
        Some(n) if curvine_common::types::time_nsec(ms, n) == n => Ok(Some(n)),
        Some(n) => Err(FsError::invalid(format!(
            "nanoseconds {n} do not lie in the millisecond of {ms} ms"
        ))),
    }
}
