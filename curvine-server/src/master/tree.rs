//! Names and directories: mkdir, stat, list, rename, delete, symlink, readlink, link.

use curvine_common::proto::{CallerInfo, FileStatus, FileType, ListResponse, MknodRequest};
use curvine_common::{FsError, FsResult};
use tracing::debug;

use super::namespace::{
    allowed, check, check_sticky, is_dir, is_root, is_symlink, status, Namespace, Txn, Walk,
};
use super::records::InodeRec;

/// `rename` flag: fail with AlreadyExists when the destination exists.
pub const RENAME_NOREPLACE: u32 = 1;
/// `rename` flag: atomically swap source and destination (both must exist).
pub const RENAME_EXCHANGE: u32 = 2;

impl Namespace {
    pub fn mkdir(
        &self,
        path: &str,
        parents: bool,
        mode: u32,
        c: &CallerInfo,
    ) -> FsResult<(FileStatus, u64)> {
        self.mutate_call(c, |txn| {
            let (ino, path) = {
                let w = self.walk(&*txn, path, c, true);
                match w {
                    Ok(w) if w.inode.is_some() => {
                        let ino = w.existing()?.clone();
                        if parents && is_dir(&ino) {
                            return Ok(status(&ino, w.path.clone(), w.name.clone()));
                        }
                        return Err(FsError::exists(&w.path));
                    }
                    _ => {
                        let ino = self.mkdir_in(txn, path, parents, mode, c)?;
                        let norm =
                            curvine_common::path::normalize_within(path, self.conf.max_path_len)?;
                        (ino, norm)
                    }
                }
            };
            Ok(status(&ino, path, ino.name.clone()))
        })
    }

    /// Create directory `path` (and, with `parents`, its missing ancestors).
    pub(super) fn mkdir_in(
        &self,
        txn: &mut Txn<'_>,
        path: &str,
        parents: bool,
        mode: u32,
        c: &CallerInfo,
    ) -> FsResult<InodeRec> {
        let mode = if mode == 0 { 0o755 } else { mode };
        // A loop, not recursion: a path may have tens of thousands of components, and
        // the missing ancestors are made without walking the whole path for each.
        let w = loop {
            match self.walk(&*txn, path, c, false) {
                Ok(w) => break w,
                Err(FsError::NotFound { path: missing }) if parents => {
                    // `missing`'s parent exists: make it, then each ancestor after it
                    // (when no symlink lies between) in the one made before it
                    let first = self.walk(&*txn, &missing, c, false)?;
                    let parent = first.dir()?.clone();
                    let mut dir = self.make_dir(txn, &parent, &first.name, mode, c, &missing)?;
                    let norm =
                        curvine_common::path::normalize_within(path, self.conf.max_path_len)?;
                    let rest = norm
                        .strip_prefix(missing.as_str())
                        .and_then(|r| r.strip_prefix('/'));
                    if let Some((between, _last)) = rest.and_then(|r| r.rsplit_once('/')) {
                        let mut at = missing.clone();
                        for name in between.split('/') {
                            at = curvine_common::path::child(&at, name);
                            dir = self.make_dir(txn, &dir, name, mode, c, &at)?;
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        };
        if let Some(existing) = &w.inode {
            if parents && is_dir(existing) {
                return Ok(existing.clone());
            }
            return Err(FsError::exists(&w.path));
        }
        let parent = w.dir()?.clone();
        self.make_dir(txn, &parent, &w.name, mode, c, &w.path)
    }

    /// Make directory `name` (at `path`) in `parent`, where nothing has that name.
    fn make_dir(
        &self,
        txn: &mut Txn<'_>,
        parent: &InodeRec,
        name: &str,
        mode: u32,
        c: &CallerInfo,
        path: &str,
    ) -> FsResult<InodeRec> {
        check(c, parent, 3, || match path.rsplit_once('/') {
            Some((p, _)) if !p.is_empty() => p.to_string(),
            _ => "/".to_string(),
        })?;
        let mut ino = Self::new_inode(txn, FileType::Dir, mode, c, parent, name);
        ino.complete = true;
        txn.counters.dirs += 1;
        txn.link_entry_as(parent.id, name, ino.id, true)?;
        txn.put_inode(ino.clone());
        debug!(path, id = ino.id, "mkdir");
        Ok(ino)
    }

    pub fn get_status(&self, path: &str, follow: bool, c: &CallerInfo) -> FsResult<FileStatus> {
        let w = self.walk(&*self.store, path, c, follow)?;
        let Some(ino) = &w.inode else {
            return Err(FsError::not_found(w.path));
        };
        Ok(status(ino, w.path, w.name))
    }

    /// A page of `path`'s entries with their attributes (read and search permission on
    /// the directory), and whether more follow.
    pub fn list(
        &self,
        path: &str,
        start_after: &str,
        limit: u32,
        c: &CallerInfo,
    ) -> FsResult<(Vec<FileStatus>, bool)> {
        let r = self.list_page(path, start_after, limit, false, c)?;
        Ok((r.statuses, r.has_more))
    }

    /// A page of `path`'s entries. Read permission lets a caller see the names, search
    /// permission the attributes, as on a local file system (`ls` of a directory with
    /// mode 0400 prints its names; `ls -l` fails on each entry): a caller without
    /// search permission gets names alone when it `accept_names`, and is refused
    /// otherwise.
    pub fn list_page(
        &self,
        path: &str,
        start_after: &str,
        limit: u32,
        accept_names: bool,
        c: &CallerInfo,
    ) -> FsResult<ListResponse> {
        let w = self.walk(&*self.store, path, c, true)?;
        let ino = w.existing()?;
        if !is_dir(ino) {
            return Ok(ListResponse {
                statuses: vec![status(ino, w.path.clone(), w.name.clone())],
                ..Default::default()
            });
        }
        check(c, ino, 4, || w.path.clone())?;
        let names_only = !allowed(c, ino, 1);
        if names_only && !accept_names {
            return Err(FsError::PermissionDenied { path: w.path });
        }
        let page = self.conf.list_page_size.max(1);
        let limit = if limit == 0 || limit > page {
            page
        } else {
            limit
        };
        let (entries, has_more) = self.store.list(ino.id, start_after, limit as usize)?;
        let ids: Vec<u64> = entries.iter().map(|(_, id)| *id).collect();
        let inodes = self.store.inodes(&ids)?;
        let statuses = entries
            .into_iter()
            .zip(inodes)
            .filter_map(|((name, _), i)| {
                let i = i?;
                let path = curvine_common::path::child(&w.path, &name);
                Some(if names_only {
                    // what readdir gives: d_ino and d_type
                    FileStatus {
                        id: i.id,
                        path,
                        name,
                        file_type: i.file_type,
                        ..Default::default()
                    }
                } else {
                    status(&i, path, name)
                })
            })
            .collect();
        Ok(ListResponse {
            statuses,
            has_more,
            names_only,
        })
    }

    pub fn readlink(&self, path: &str, c: &CallerInfo) -> FsResult<String> {
        let w = self.walk(&*self.store, path, c, false)?;
        let ino = w.existing()?;
        if !is_symlink(ino) {
            return Err(FsError::NotASymlink {
                path: w.path.clone(),
            });
        }
        Ok(ino.symlink_target.clone())
    }

    pub fn symlink(&self, target: &str, link: &str, c: &CallerInfo) -> FsResult<(FileStatus, u64)> {
        if target.len() >= curvine_common::path::MAX_PATH_LEN {
            return Err(FsError::NameTooLong {
                path: link.to_string(),
            });
        }
        if target.is_empty() || target.contains('\0') {
            return Err(FsError::InvalidPath {
                path: target.to_string(),
                message: "bad symlink target".into(),
            });
        }
        self.mutate_call(c, |txn| {
            let w = self.walk(&*txn, link, c, false)?;
            if w.inode.is_some() {
                return Err(FsError::exists(&w.path));
            }
            let dir = w.dir()?.clone();
            check(c, &dir, 3, || w.parent_path())?;
            let mut ino = Self::new_inode(txn, FileType::Symlink, 0o777, c, &dir, &w.name);
            ino.symlink_target = target.to_string();
            ino.complete = true;
            txn.counters.files += 1;
            txn.link_entry(dir.id, &w.name, ino.id)?;
            txn.put_inode(ino.clone());
            Ok(status(&ino, w.path.clone(), w.name.clone()))
        })
    }

    /// A fifo, socket or device node at `path`. Only uid 0 makes device nodes (EPERM
    /// for others, as mknod(2)).
    pub fn mknod(&self, req: &MknodRequest) -> FsResult<(FileStatus, u64)> {
        let c = req.caller.clone().unwrap_or_default();
        let kind = FileType::try_from(req.file_type).unwrap_or(FileType::Unspecified);
        match kind {
            FileType::Fifo | FileType::Socket => {}
            FileType::CharDevice | FileType::BlockDevice if c.uid == 0 => {}
            FileType::CharDevice | FileType::BlockDevice => {
                return Err(FsError::NotPermitted {
                    path: req.path.clone(),
                })
            }
            _ => {
                return Err(FsError::invalid(format!(
                    "{}: mknod makes fifos, sockets and devices, not {kind:?}",
                    req.path
                )))
            }
        }
        self.mutate_call(&c, |txn| {
            let w = self.walk(&*txn, &req.path, &c, false)?;
            if w.inode.is_some() {
                return Err(FsError::exists(&w.path));
            }
            let dir = w.dir()?.clone();
            check(&c, &dir, 3, || w.parent_path())?;
            let mut ino = Self::new_inode(txn, kind, req.mode, &c, &dir, &w.name);
            ino.rdev = req.rdev;
            ino.complete = true;
            txn.counters.files += 1;
            txn.link_entry(dir.id, &w.name, ino.id)?;
            txn.put_inode(ino.clone());
            Ok(status(&ino, w.path.clone(), w.name.clone()))
        })
    }

    pub fn link(&self, src: &str, dst: &str, c: &CallerInfo) -> FsResult<(FileStatus, u64)> {
        self.mutate_call(c, |txn| {
            let s = self.walk(&*txn, src, c, false)?;
            let mut ino = s.existing()?.clone();
            if is_dir(&ino) {
                return Err(FsError::PermissionDenied {
                    path: s.path.clone(),
                });
            }
            if !ino.complete && !is_symlink(&ino) {
                return Err(FsError::FileIncomplete {
                    path: s.path.clone(),
                });
            }
            let d = self.walk(&*txn, dst, c, false)?;
            if d.inode.is_some() {
                return Err(FsError::exists(&d.path));
            }
            let dir = d.dir()?.clone();
            check(c, &dir, 3, || d.parent_path())?;
            ino.nlink += 1;
            ino.ctime_ms = txn.now;
            txn.link_entry(dir.id, &d.name, ino.id)?;
            txn.put_inode(ino.clone());
            Ok(status(&ino, d.path.clone(), d.name.clone()))
        })
    }

    /// Delete `path`; returns the time stamped on its parent directory. A directory
    /// with `master.delete_batch` inodes or more below it is detached in this entry and
    /// removed in the background (`purge`).
    pub fn delete(&self, path: &str, recursive: bool, c: &CallerInfo) -> FsResult<(i64, u64)> {
        let ((at, detached), seq) = self.mutate_call(c, |txn| {
            let w = self.walk(&*txn, path, c, false)?;
            let Some(parent) = w.parent.clone() else {
                return Err(FsError::invalid("refusing to delete /"));
            };
            let ino = w.existing()?.clone();
            check(c, &parent, 3, || w.parent_path())?;
            check_sticky(c, &parent, &ino, &w.path)?;
            if is_dir(&ino) && ino.children > 0 {
                if !recursive {
                    return Err(FsError::DirectoryNotEmpty {
                        path: w.path.clone(),
                    });
                }
                // one entry removes at most `limit` inodes: the contents and `ino`
                let limit = u64::from(self.conf.delete_batch.max(1));
                let mut below = 0;
                self.scan_for_delete(txn, &ino, &w.path, c, limit, &mut below)?;
                if below >= limit {
                    self.detach(txn, parent.id, &w.name, ino.id)?;
                    debug!(path = %w.path, "delete: detached, removed in the background");
                    return Ok((txn.now, true));
                }
                self.delete_contents(txn, &ino, &w.path, c)?;
            }
            txn.unlink_entry_as(parent.id, &w.name, is_dir(&ino))?;
            txn.release_inode(ino)?;
            debug!(path = %w.path, recursive, "delete");
            Ok((txn.now, false))
        })?;
        if detached {
            self.purge.wake();
        }
        Ok((at, seq))
    }

    /// Check what removing everything below directory `dir` asks of `c`, as
    /// `delete_contents` does and in its order, and count in `seen` the inodes found.
    /// Root passes every check, so for root the count stops at `limit`.
    fn scan_for_delete(
        &self,
        txn: &Txn<'_>,
        dir: &InodeRec,
        path: &str,
        c: &CallerInfo,
        limit: u64,
        seen: &mut u64,
    ) -> FsResult<()> {
        let root = is_root(c);
        check(c, dir, 3, || path.to_string())?;
        let mut after = String::new();
        loop {
            let (entries, more) = txn.list(dir.id, &after, 1024)?;
            for (name, id) in &entries {
                if root && *seen >= limit {
                    return Ok(());
                }
                let Some(child) = txn.inode_for_scan(*id)? else {
                    continue;
                };
                *seen += 1;
                let child_path = curvine_common::path::child(path, name);
                check_sticky(c, dir, &child, &child_path)?;
                if is_dir(&child) && child.children > 0 {
                    self.scan_for_delete(txn, &child, &child_path, c, limit, seen)?;
                }
            }
            match entries.last() {
                Some((name, _)) if more => after = name.clone(),
                _ => break,
            }
        }
        Ok(())
    }

    /// Remove everything below directory `dir` (depth first).
    pub(super) fn delete_contents(
        &self,
        txn: &mut Txn<'_>,
        dir: &InodeRec,
        path: &str,
        c: &CallerInfo,
    ) -> FsResult<()> {
        check(c, dir, 3, || path.to_string())?;
        let mut after = String::new();
        loop {
            let (entries, more) = txn.list(dir.id, &after, 1024)?;
            for (name, id) in &entries {
                let Some(child) = txn.inode_for_scan(*id)? else {
                    continue;
                };
                let child_path = curvine_common::path::child(path, name);
                check_sticky(c, dir, &child, &child_path)?;
                if is_dir(&child) && child.children > 0 {
                    self.delete_contents(txn, &child, &child_path, c)?;
                }
                txn.del_edge(dir.id, name);
                txn.release_inode(child)?;
            }
            match entries.last() {
                Some((name, _)) if more => after = name.clone(),
                _ => break,
            }
        }
        Ok(())
    }

    /// Rename `src` to `dst`; returns the time stamped on both parent directories (0 when
    /// nothing changed).
    pub fn rename(&self, src: &str, dst: &str, flags: u32, c: &CallerInfo) -> FsResult<(i64, u64)> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags == RENAME_NOREPLACE | RENAME_EXCHANGE
        {
            return Err(FsError::invalid(format!("bad rename flags {flags:#x}")));
        }
        self.mutate_call(c, |txn| {
            let s = self.walk(&*txn, src, c, false)?;
            let sdir = s
                .parent
                .clone()
                .ok_or_else(|| FsError::invalid("cannot rename /"))?;
            let sino = s.existing()?.clone();
            let d = self.walk(&*txn, dst, c, false)?;
            let ddir = d
                .parent
                .clone()
                .ok_or_else(|| FsError::invalid("cannot rename onto /"))?;
            if s.path == d.path {
                return Ok(0);
            }
            check(c, &sdir, 3, || s.parent_path())?;
            check(c, &ddir, 3, || d.parent_path())?;
            check_sticky(c, &sdir, &sino, &s.path)?;
            if is_dir(&sino) && sdir.id != ddir.id {
                // its `..` changes: write permission on the directory moved
                check(c, &sino, 2, || s.path.clone())?;
            }
            if is_dir(&sino) && (d.chain.contains(&sino.id)) {
                return Err(FsError::invalid(format!(
                    "cannot move {} into its own subtree {}",
                    s.path, d.path
                )));
            }
            if flags & RENAME_EXCHANGE != 0 {
                return self.exchange(txn, &s, &d, c);
            }
            if let Some(dino) = &d.inode {
                if flags & RENAME_NOREPLACE != 0 {
                    return Err(FsError::exists(&d.path));
                }
                if dino.id == sino.id {
                    // Two names of one file: POSIX says do nothing.
                    return Ok(0);
                }
                check_sticky(c, &ddir, dino, &d.path)?;
                match (is_dir(&sino), is_dir(dino)) {
                    (false, true) => {
                        return Err(FsError::IsADirectory {
                            path: d.path.clone(),
                        })
                    }
                    (true, false) => {
                        return Err(FsError::NotADirectory {
                            path: d.path.clone(),
                        })
                    }
                    (true, true) if dino.children > 0 => {
                        return Err(FsError::DirectoryNotEmpty {
                            path: d.path.clone(),
                        })
                    }
                    _ => {}
                }
                txn.unlink_entry_as(ddir.id, &d.name, is_dir(dino))?;
                txn.release_inode(dino.clone())?;
            }
            txn.unlink_entry_as(sdir.id, &s.name, is_dir(&sino))?;
            txn.link_entry_as(ddir.id, &d.name, sino.id, is_dir(&sino))?;
            let mut moved = txn.must_inode(sino.id)?;
            moved.parent = ddir.id;
            moved.name = d.name.clone();
            moved.ctime_ms = txn.now;
            txn.put_inode(moved);
            debug!(src = %s.path, dst = %d.path, "rename");
            Ok(txn.now)
        })
    }

    fn exchange(&self, txn: &mut Txn<'_>, s: &Walk, d: &Walk, c: &CallerInfo) -> FsResult<i64> {
        let sino = s.existing()?.clone();
        let dino = d.existing()?.clone();
        let (sdir, ddir) = (s.dir()?.clone(), d.dir()?.clone());
        check_sticky(c, &ddir, &dino, &d.path)?;
        if is_dir(&dino) && s.chain.contains(&dino.id) {
            return Err(FsError::invalid(format!(
                "cannot move {} into its own subtree {}",
                d.path, s.path
            )));
        }
        if sino.id == dino.id {
            return Ok(0);
        }
        if sdir.id != ddir.id {
            // a directory moved to another parent changes its `..`
            for (ino, path) in [(&sino, &s.path), (&dino, &d.path)] {
                if is_dir(ino) {
                    check(c, ino, 2, || path.clone())?;
                }
            }
        }
        txn.put_edge(sdir.id, &s.name, dino.id);
        txn.put_edge(ddir.id, &d.name, sino.id);
        for (dir, (id, name)) in [(sdir.id, (dino.id, &s.name)), (ddir.id, (sino.id, &d.name))] {
            let mut i = txn.must_inode(id)?;
            let gains_dir = is_dir(&i);
            i.parent = dir;
            i.name = name.clone();
            i.ctime_ms = txn.now;
            txn.put_inode(i);
            let mut p = txn.must_inode(dir)?;
            p.mtime_ms = txn.now;
            p.ctime_ms = txn.now;
            if sdir.id != ddir.id && is_dir(&sino) != is_dir(&dino) {
                // the directory of the two changes parent: so do the link counts
                p.nlink = if gains_dir {
                    p.nlink.max(2) + 1
                } else {
                    p.nlink.saturating_sub(1).max(2)
                };
            }
            txn.put_inode(p);
        }
        Ok(txn.now)
    }
}
