//! Directory handles: `opendir` fetches the directory's listing once, `readdir` and
//! `readdirplus` serve it page by page from the handle, `releasedir` drops it.

use std::ffi::OsString;
use std::sync::Arc;

use curvine_client::{FileStatus, Listing};
use fuse3::raw::prelude::*;
use fuse3::{Errno, Inode, Result};

use crate::attr::{empty_attr, errno, kind};
use crate::fs::{CurvineFuse, HIDDEN_DIR};
use crate::inodes::ROOT_INO;

/// The kernel's readdir reply buffer (one page).
const READDIR_BYTES: usize = 4096;

/// Bytes one readdirplus entry takes in a reply (fuse_entry_out + fuse_dirent + name, 8-aligned).
fn dirent_plus_size(name_len: usize) -> usize {
    (128 + 24 + name_len).div_ceil(8) * 8
}

impl CurvineFuse {
    /// `opendir`: list the directory as the caller and keep the listing under a new handle.
    /// A caller who may read the directory but not search it gets the names alone.
    pub(crate) async fn open_dir(&self, req: &Request, inode: Inode) -> Result<ReplyOpen> {
        let path = self.path_of(inode)?;
        let mut list = self
            .caller(req)
            .read_dir(&path)
            .await
            .map_err(|e| errno(&e))?;
        if inode == ROOT_INO {
            list.entries.retain(|st| st.name != HIDDEN_DIR);
        }
        let fh = self.next_dir_fh();
        self.dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(fh, Arc::new(list));
        Ok(ReplyOpen { fh, flags: 0 })
    }

    /// `readdir`: the entries of handle `fh` from `offset` on, `.` and `..` first.
    pub(crate) fn dir_entries(
        &self,
        parent: Inode,
        fh: u64,
        offset: i64,
    ) -> Result<Vec<Result<DirectoryEntry>>> {
        let list = self.dir_list(fh)?;
        let mut out = Vec::new();
        let dots = [(".", parent), ("..", ROOT_INO)];
        for (i, (name, ino)) in dots.iter().enumerate() {
            if (i as i64) >= offset {
                out.push(Ok(DirectoryEntry {
                    inode: *ino,
                    kind: FileType::Directory,
                    name: OsString::from(*name),
                    offset: i as i64 + 1,
                }));
            }
        }
        for (i, st) in list.entries.iter().enumerate() {
            let idx = i as i64 + 2;
            if idx >= offset {
                out.push(Ok(DirectoryEntry {
                    inode: self.inodes.ino_of(st.id),
                    kind: kind(st),
                    name: OsString::from(&st.name),
                    offset: idx + 1,
                }));
            }
        }
        Ok(out)
    }

    /// `readdirplus`: as `dir_entries` with each entry's attributes, as many as fit in
    /// one reply page.
    pub(crate) async fn dir_entries_plus(
        &self,
        parent: Inode,
        fh: u64,
        offset: u64,
    ) -> Result<Vec<Result<DirectoryEntryPlus>>> {
        let list = self.dir_list(fh)?;
        let dir = self.path_of(parent)?;
        let mut out = Vec::new();
        let dots = [(".", parent), ("..", ROOT_INO)];
        for (i, (name, ino)) in dots.iter().enumerate() {
            if (i as u64) >= offset {
                out.push(Ok(DirectoryEntryPlus {
                    inode: *ino,
                    generation: 0,
                    kind: FileType::Directory,
                    name: OsString::from(*name),
                    offset: i as i64 + 1,
                    attr: empty_attr(*ino, FileType::Directory),
                    entry_ttl: std::time::Duration::ZERO,
                    attr_ttl: std::time::Duration::ZERO,
                }));
            }
        }
        // Only what fits in one page-sized reply: every entry sent counts as a lookup,
        // and the kernel asks again for the rest.
        let mut room = READDIR_BYTES.saturating_sub(out.len() * dirent_plus_size(2));
        for (i, st) in list
            .entries
            .iter()
            .enumerate()
            .skip(offset.saturating_sub(2) as usize)
        {
            let need = dirent_plus_size(st.name.len());
            if need > room {
                break;
            }
            room -= need;
            let idx = i as i64 + 2;
            if list.names_only {
                out.push(Ok(name_only(self.inodes.ino_of(st.id), st, idx + 1)));
                continue;
            }
            let path = curvine_common::path::child(&dir, &st.name);
            let attr = self.attr_of(st).await;
            // counted like a lookup (the kernel references every entry it receives)
            self.inodes.remember(attr.ino, &path);
            out.push(Ok(DirectoryEntryPlus {
                inode: attr.ino,
                generation: 0,
                kind: attr.kind,
                name: OsString::from(&st.name),
                offset: idx + 1,
                attr,
                entry_ttl: self.entry_ttl(),
                attr_ttl: self.attr_ttl(),
            }));
        }
        Ok(out)
    }

    /// `releasedir`: drop handle `fh`'s listing.
    pub(crate) fn release_dir(&self, fh: u64) {
        self.dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh);
    }

    fn dir_list(&self, fh: u64) -> Result<Arc<Listing>> {
        self.dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh)
            .cloned()
            .ok_or_else(|| Errno::from(libc::EBADF))
    }
}

/// A readdirplus entry that gives the kernel a name, inode number and type but no
/// attributes: node id 0 tells it to make no dentry (the caller may not search the
/// directory, so it gets no attributes to cache), while the dirent keeps the inode
/// number that `getdents` reports.
fn name_only(ino: Inode, st: &FileStatus, next: i64) -> DirectoryEntryPlus {
    DirectoryEntryPlus {
        inode: ino,
        generation: 0,
        kind: kind(st),
        name: OsString::from(&st.name),
        offset: next,
        // fuse3 sends `attr.ino` as the entry's node id and `inode` as the dirent's
        attr: empty_attr(0, kind(st)),
        entry_ttl: std::time::Duration::ZERO,
        attr_ttl: std::time::Duration::ZERO,
    }
}
