//! The FUSE request handlers: namespace calls go to the master as the calling user,
//! data calls to `CurvineFuse`'s per-inode state.

use std::ffi::OsStr;
use std::num::NonZeroU32;

use bytes::Bytes;
use curvine_client::{CreateOptions, FileType as CvFileType, FsError, SetAttr as CvSetAttr};
use fuse3::raw::prelude::*;
use fuse3::{Errno, Inode, Result, Timestamp};
use futures_util::stream::{self, Stream};
use tracing::{debug, info, warn};

use crate::attr::{empty_attr, errno, kind, ms, permits};
use crate::fs::CurvineFuse;

const XATTR_LOCAL_NAMESPACES: [&str; 2] = ["security.", "system."];
const RENAME_NOREPLACE: u32 = 1;
const RENAME_EXCHANGE: u32 = 2;
const FALLOC_FL_KEEP_SIZE: u32 = libc::FALLOC_FL_KEEP_SIZE as u32;
const FALLOC_FL_PUNCH_HOLE: u32 = libc::FALLOC_FL_PUNCH_HOLE as u32;
const FALLOC_FL_ZERO_RANGE: u32 = libc::FALLOC_FL_ZERO_RANGE as u32;
/// `write_flags`: the writer lacks CAP_FSETID, the file's set-ID bits go.
const FUSE_WRITE_KILL_SUIDGID: u32 = 1 << 2;

fn e(err: FsError) -> Errno {
    errno(&err)
}

fn xattr_reply(value: Vec<u8>, size: u32) -> Result<ReplyXAttr> {
    if size == 0 {
        Ok(ReplyXAttr::Size(value.len() as u32))
    } else if value.len() > size as usize {
        Err(Errno::from(libc::ERANGE))
    } else {
        Ok(ReplyXAttr::Data(Bytes::from(value)))
    }
}

/// Whether a setattr sets both times to now: utimensat with UTIME_NOW for both (or
/// `touch`), which a writer who does not own the file may do. fuse3 turns the kernel's
/// "now" flags into the time it read the request, so a time within a second of the
/// daemon's clock counts as now; the master gives the owner the exact times sent.
fn touches(atime: Option<Timestamp>, mtime: Option<Timestamp>) -> bool {
    let now = curvine_common::types::now_ms();
    let near = |t: Option<Timestamp>| t.is_some_and(|t| (ms(t) - now).abs() < 1000);
    near(atime) && near(mtime)
}

fn is_local_xattr(name: &str) -> bool {
    XATTR_LOCAL_NAMESPACES.iter().any(|p| name.starts_with(p))
}

impl Filesystem for CurvineFuse {
    async fn init(&self, _req: Request) -> Result<ReplyInit> {
        let max_write = NonZeroU32::new(self.opts.max_write.max(4096)).unwrap_or(NonZeroU32::MIN);
        let mut reply = ReplyInit::new(max_write);
        reply.max_background = Some(64);
        reply.congestion_threshold = Some(48);
        info!(root = %self.opts.fs_path, "fuse session initialised");
        Ok(reply)
    }

    async fn ready(&self, _notify: fuse3::notify::Notify) {
        // fuse3's notifier writes under its reply lock: see `coherence` for why not
        self.follow_changes(crate::mount::fuse_device_fd());
    }

    async fn destroy(&self, _req: Request) {
        self.coherence.stop();
        crate::tasks().shutdown(crate::TASK_STOP_DEADLINE).await;
        self.flush_all().await;
        if let Err(err) = self.fs.sync_journal().await {
            warn!(error = %err, "unmount: the master's journal sync failed");
        }
    }

    async fn lookup(&self, req: Request, parent: Inode, name: &OsStr) -> Result<ReplyEntry> {
        let path = self.child_of(parent, name)?;
        let res = if self.surely_absent(parent, name) {
            Err(FsError::not_found(&path))
        } else {
            self.lstat_for_reply(&self.caller(&req), None, &path).await
        };
        match res {
            Ok((_, attr)) => Ok(self.entry_of(attr, &path)),
            Err(FsError::NotFound { .. }) if !self.opts.negative_ttl.is_zero() => Ok(ReplyEntry {
                ttl: self.opts.negative_ttl,
                attr: empty_attr(0, FileType::RegularFile),
                generation: 0,
            }),
            Err(err) => Err(e(err)),
        }
    }

    async fn forget(&self, _req: Request, inode: Inode, nlookup: u64) {
        self.forget_inode(inode, nlookup);
    }

    async fn batch_forget(&self, _req: Request, inodes: &[(Inode, u64)]) {
        for (ino, n) in inodes {
            self.forget_inode(*ino, *n);
        }
    }

    async fn getattr(
        &self,
        req: Request,
        inode: Inode,
        _fh: Option<u64>,
        _flags: u32,
    ) -> Result<ReplyAttr> {
        if let Some(attr) = self.dir_attrs.get(inode, self.attr_ttl()) {
            return Ok(ReplyAttr {
                ttl: self.attr_ttl(),
                attr,
            });
        }
        let path = self.path_of(inode)?;
        let started = std::time::Instant::now();
        let fs = self.caller(&req);
        let (_, attr) = self
            .lstat_for_reply(&fs, Some(inode), &path)
            .await
            .map_err(e)?;
        self.dir_attrs.fetched(&attr, started);
        Ok(ReplyAttr {
            ttl: self.attr_ttl(),
            attr,
        })
    }

    async fn setattr(
        &self,
        req: Request,
        inode: Inode,
        _fh: Option<u64>,
        set: SetAttr,
    ) -> Result<ReplyAttr> {
        self.check_writable()?;
        let path = self.path_of(inode)?;
        let fs = self.caller(&req);
        let times_only = set.size.is_none()
            && set.mode.is_none()
            && set.uid.is_none()
            && set.gid.is_none()
            && set.atime.is_none();
        if let (true, Some(mtime)) = (times_only, set.mtime) {
            if self.keep_kernel_mtime(inode, ms(mtime)).await {
                let (_, attr) = self
                    .lstat_for_reply(&fs, Some(inode), &path)
                    .await
                    .map_err(e)?;
                return Ok(ReplyAttr {
                    ttl: self.attr_ttl(),
                    attr,
                });
            }
        }
        if let Some(size) = set.size {
            self.set_len(inode, size).await?;
        }
        let attrs = CvSetAttr {
            mode: set.mode.map(|m| m & 0o7777),
            uid: set.uid,
            gid: set.gid,
            mtime_ms: set.mtime.map(ms),
            atime_ms: set.atime.map(ms),
            mtime_nsec: set.mtime.map(|t| t.nsec),
            atime_nsec: set.atime.map(|t| t.nsec),
            replicas: None,
            // the node itself: a symlink's own owner and times (lchown, lutimes)
            no_follow: true,
            times_now: touches(set.atime, set.mtime),
        };
        let st = if attrs.mode.is_none()
            && attrs.uid.is_none()
            && attrs.gid.is_none()
            && attrs.mtime_ms.is_none()
            && attrs.atime_ms.is_none()
        {
            fs.lstat(&path).await.map_err(e)?
        } else {
            // local changes first, so their completion does not override the new times
            self.flush_ino(inode).await?;
            fs.set_attr(&path, attrs).await.map_err(e)?
        };
        self.dir_attrs.changed(inode);
        Ok(ReplyAttr {
            ttl: self.attr_ttl(),
            attr: self.attr_of(&st).await,
        })
    }

    async fn readlink(&self, req: Request, inode: Inode) -> Result<ReplyData> {
        let path = self.path_of(inode)?;
        let target = self.caller(&req).readlink(&path).await.map_err(e)?;
        Ok(ReplyData {
            data: Bytes::from(target.into_bytes()),
        })
    }

    async fn symlink(
        &self,
        req: Request,
        parent: Inode,
        name: &OsStr,
        link: &OsStr,
    ) -> Result<ReplyEntry> {
        self.check_writable()?;
        let path = self.child_of(parent, name)?;
        let target = link.to_str().ok_or_else(|| Errno::from(libc::EINVAL))?;
        let r = self.caller(&req).symlink(target, &path).await;
        self.note_added(parent, name, r.is_ok());
        let st = r.map_err(e)?;
        self.dir_attrs.stamped(parent, st.ctime_ms);
        Ok(self.entry(&st, &path).await)
    }

    async fn mknod(
        &self,
        req: Request,
        parent: Inode,
        name: &OsStr,
        mode: u32,
        rdev: u32,
    ) -> Result<ReplyEntry> {
        self.check_writable()?;
        let path = self.child_of(parent, name)?;
        let fs = self.caller(&req);
        let special = match mode & libc::S_IFMT {
            0 | libc::S_IFREG => None,
            libc::S_IFIFO => Some(CvFileType::Fifo),
            libc::S_IFSOCK => Some(CvFileType::Socket),
            libc::S_IFCHR => Some(CvFileType::CharDevice),
            libc::S_IFBLK => Some(CvFileType::BlockDevice),
            _ => return Err(Errno::from(libc::EINVAL)),
        };
        if let Some(kind) = special {
            let r = fs.mknod(&path, kind, mode & 0o7777, rdev).await;
            self.note_added(parent, name, r.is_ok());
            let st = r.map_err(e)?;
            self.dir_attrs.stamped(parent, st.ctime_ms);
            return Ok(self.entry(&st, &path).await);
        }
        let opts = CreateOptions {
            exclusive: true,
            create_parents: false,
            mode: mode & 0o7777,
            ..Default::default()
        };
        let r = fs.create_with(&path, opts).await;
        self.note_added(parent, name, r.is_ok());
        let mut w = r.map_err(e)?;
        self.dir_attrs.stamped(parent, w.status().ctime_ms);
        let mut st = w.close().await.map_err(e)?;
        if mode & 0o7777 == 0 {
            st = fs
                .set_attr(
                    &path,
                    CvSetAttr {
                        mode: Some(0),
                        ..Default::default()
                    },
                )
                .await
                .map_err(e)?;
        }
        Ok(self.entry(&st, &path).await)
    }

    async fn mkdir(
        &self,
        req: Request,
        parent: Inode,
        name: &OsStr,
        mode: u32,
        _umask: u32,
    ) -> Result<ReplyEntry> {
        self.check_writable()?;
        let path = self.child_of(parent, name)?;
        let mark = self.listings.mark();
        let r = self
            .caller(&req)
            .mkdir_with_mode(&path, false, mode & 0o7777)
            .await;
        self.note_added(parent, name, r.is_ok());
        let st = r.map_err(e)?;
        // a new directory is empty: lookups in it need not ask the master
        self.listings.made(self.inodes.ino_of(st.id), mark);
        // its `..` is one more link of the parent
        self.dir_attrs.stamped_links(parent, st.ctime_ms, 1);
        Ok(self.entry(&st, &path).await)
    }

    async fn unlink(&self, req: Request, parent: Inode, name: &OsStr) -> Result<()> {
        self.check_writable()?;
        let path = self.child_of(parent, name)?;
        let fs = self.caller(&req);
        let hidden = self.hide_if_open(&fs, &path).await;
        if !matches!(hidden, Ok(None)) {
            // hidden (the name is gone), or failed; not open here: removed below
            self.note_removed(parent, name, hidden.is_ok());
        }
        if hidden?.is_some() {
            self.dir_attrs.changed(parent);
            return Ok(());
        }
        let r = fs.delete_stamped(&path, false).await;
        self.note_removed(parent, name, r.is_ok());
        let at = r.map_err(e)?;
        self.dir_stamped(parent, at);
        self.inodes.unlinked(&path);
        Ok(())
    }

    async fn rmdir(&self, req: Request, parent: Inode, name: &OsStr) -> Result<()> {
        self.check_writable()?;
        let path = self.child_of(parent, name)?;
        // the kernel has already refused rmdir of a non-directory (ENOTDIR)
        let r = self.caller(&req).delete_stamped(&path, false).await;
        self.note_removed(parent, name, r.is_ok());
        let at = r.map_err(e)?;
        if let Some(ino) = self.inodes.ino_at(&path) {
            self.listings.forget(ino);
        }
        if at > 0 {
            self.dir_attrs.stamped_links(parent, at, -1);
        } else {
            self.dir_attrs.changed(parent);
        }
        self.inodes.unlinked(&path);
        Ok(())
    }

    async fn rename(
        &self,
        req: Request,
        parent: Inode,
        name: &OsStr,
        new_parent: Inode,
        new_name: &OsStr,
    ) -> Result<()> {
        self.rename2(req, parent, name, new_parent, new_name, 0)
            .await
    }

    async fn rename2(
        &self,
        req: Request,
        parent: Inode,
        name: &OsStr,
        new_parent: Inode,
        new_name: &OsStr,
        flags: u32,
    ) -> Result<()> {
        self.check_writable()?;
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0 {
            return Err(Errno::from(libc::EINVAL));
        }
        let src = self.child_of(parent, name)?;
        let dst = self.child_of(new_parent, new_name)?;
        let fs = self.caller(&req);
        let mut hidden = None;
        if flags == 0
            && src != dst
            && self.open_here(&dst)
            && fs
                .lstat(&src)
                .await
                .is_ok_and(|st| st.file_type != CvFileType::Dir as i32)
        {
            // a file open here that is about to be replaced stays readable
            hidden = self.hide_if_open(&fs, &dst).await?;
        }
        let at = match fs.rename_stamped(&src, &dst, flags).await {
            Ok(at) => at,
            Err(err) => {
                if let Some((ino, h)) = hidden {
                    self.unhide(&fs, ino, &h, &dst).await;
                }
                self.listings.forget(parent);
                self.listings.forget(new_parent);
                return Err(e(err));
            }
        };
        if flags & RENAME_EXCHANGE == 0 {
            // both names exist after an exchange; otherwise one went to the other
            self.note_removed(parent, name, true);
            self.note_added(new_parent, new_name, true);
        }
        for ino in [parent, new_parent] {
            if parent == new_parent {
                self.dir_stamped(ino, at);
            } else {
                // a directory moved between them changes both link counts
                self.dir_attrs.changed(ino);
            }
        }
        // a renamed directory's own ctime changes too (its mtime does not)
        if let Some(ino) = self.inodes.ino_at(&src) {
            self.dir_attrs.changed(ino);
        }
        self.inodes
            .renamed(&src, &dst, flags & RENAME_EXCHANGE != 0);
        Ok(())
    }

    async fn link(
        &self,
        req: Request,
        inode: Inode,
        new_parent: Inode,
        new_name: &OsStr,
    ) -> Result<ReplyEntry> {
        self.check_writable()?;
        let src = self.path_of(inode)?;
        let dst = self.child_of(new_parent, new_name)?;
        let fs = self.caller(&req);
        let r = fs.link(&src, &dst).await;
        self.note_added(new_parent, new_name, r.is_ok());
        let st = r.map_err(e)?;
        // the master gives the new parent the time it gives the inode's ctime
        self.dir_stamped(new_parent, st.ctime_ms);
        // the status of the shared inode, with its new link count
        let (_, attr) = self.lstat_for_reply(&fs, None, &dst).await.map_err(e)?;
        Ok(self.entry_of(attr, &dst))
    }

    async fn open(&self, _req: Request, inode: Inode, flags: u32) -> Result<ReplyOpen> {
        let (fh, flags) = self.open_file(inode, flags).await?;
        Ok(ReplyOpen { fh, flags })
    }

    async fn read(
        &self,
        _req: Request,
        inode: Inode,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> Result<ReplyData> {
        let data = CurvineFuse::read(self, inode, fh, offset, size).await?;
        Ok(ReplyData { data })
    }

    async fn write(
        &self,
        req: Request,
        inode: Inode,
        fh: u64,
        offset: u64,
        data: &[u8],
        write_flags: u32,
        _flags: u32,
    ) -> Result<ReplyWrite> {
        if write_flags & FUSE_WRITE_KILL_SUIDGID != 0 {
            self.drop_set_id_for_write(&req, inode, fh).await?;
        }
        let written = CurvineFuse::write(self, inode, fh, offset, data).await?;
        Ok(ReplyWrite { written })
    }

    async fn statfs(&self, _req: Request, _inode: Inode) -> Result<ReplyStatFs> {
        let r = self.fs.report().await.map_err(e)?;
        let bsize = 4096u64;
        let free = r.capacity.saturating_sub(r.used) / bsize;
        Ok(ReplyStatFs {
            blocks: r.capacity / bsize,
            bfree: free,
            bavail: free,
            files: r.files + r.dirs,
            ffree: u64::from(u32::MAX),
            bsize: bsize as u32,
            namelen: 255,
            frsize: bsize as u32,
        })
    }

    async fn release(
        &self,
        _req: Request,
        inode: Inode,
        fh: u64,
        _flags: u32,
        _lock_owner: u64,
        _flush: bool,
    ) -> Result<()> {
        CurvineFuse::release(self, inode, fh).await
    }

    async fn fsync(&self, _req: Request, inode: Inode, _fh: u64, _datasync: bool) -> Result<()> {
        self.flush_ino(inode).await?;
        // the file's create and every change made through the mount before it
        self.durable().await
    }

    async fn flush(&self, _req: Request, inode: Inode, fh: u64, _lock_owner: u64) -> Result<()> {
        self.flush_handle(inode, fh).await
    }

    async fn setxattr(
        &self,
        req: Request,
        inode: Inode,
        name: &OsStr,
        value: &[u8],
        flags: u32,
        _position: u32,
    ) -> Result<()> {
        self.check_writable()?;
        let name = name.to_str().ok_or_else(|| Errno::from(libc::EINVAL))?;
        if is_local_xattr(name) {
            return Err(Errno::from(libc::EOPNOTSUPP));
        }
        let path = self.path_of(inode)?;
        let r = self.caller(&req).set_xattr(&path, name, value, flags).await;
        self.dir_attrs.changed(inode);
        r.map_err(e)
    }

    async fn getxattr(
        &self,
        req: Request,
        inode: Inode,
        name: &OsStr,
        size: u32,
    ) -> Result<ReplyXAttr> {
        let name = name.to_str().ok_or_else(|| Errno::from(libc::EINVAL))?;
        if is_local_xattr(name) {
            // e.g. security.capability, asked before every write: answered here
            return Err(Errno::from(libc::ENODATA));
        }
        let path = self.path_of(inode)?;
        let value = self.caller(&req).get_xattr(&path, name).await.map_err(e)?;
        xattr_reply(value, size)
    }

    async fn listxattr(&self, req: Request, inode: Inode, size: u32) -> Result<ReplyXAttr> {
        let path = self.path_of(inode)?;
        let names = self.caller(&req).list_xattr(&path).await.map_err(e)?;
        let mut out = Vec::new();
        for n in names {
            out.extend_from_slice(n.as_bytes());
            out.push(0);
        }
        xattr_reply(out, size)
    }

    async fn removexattr(&self, req: Request, inode: Inode, name: &OsStr) -> Result<()> {
        self.check_writable()?;
        let name = name.to_str().ok_or_else(|| Errno::from(libc::EINVAL))?;
        if is_local_xattr(name) {
            return Err(Errno::from(libc::ENODATA));
        }
        let path = self.path_of(inode)?;
        self.caller(&req).remove_xattr(&path, name).await.map_err(e)
    }

    async fn opendir(&self, req: Request, inode: Inode, _flags: u32) -> Result<ReplyOpen> {
        self.open_dir(&req, inode).await
    }

    async fn readdir<'a>(
        &'a self,
        _req: Request,
        parent: Inode,
        fh: u64,
        offset: i64,
    ) -> Result<ReplyDirectory<impl Stream<Item = Result<DirectoryEntry>> + Send + 'a>> {
        let entries = self.dir_entries(parent, fh, offset)?;
        Ok(ReplyDirectory {
            entries: stream::iter(entries),
        })
    }

    async fn readdirplus<'a>(
        &'a self,
        _req: Request,
        parent: Inode,
        fh: u64,
        offset: u64,
        _lock_owner: u64,
    ) -> Result<ReplyDirectoryPlus<impl Stream<Item = Result<DirectoryEntryPlus>> + Send + 'a>>
    {
        let entries = self.dir_entries_plus(parent, fh, offset).await?;
        Ok(ReplyDirectoryPlus {
            entries: stream::iter(entries),
        })
    }

    async fn releasedir(&self, _req: Request, _inode: Inode, fh: u64, _flags: u32) -> Result<()> {
        self.release_dir(fh);
        Ok(())
    }

    async fn fsyncdir(
        &self,
        _req: Request,
        _inode: Inode,
        _fh: u64,
        _datasync: bool,
    ) -> Result<()> {
        // the directory's entries, and every other change made through the mount
        self.durable().await
    }

    async fn access(&self, req: Request, inode: Inode, mask: u32) -> Result<()> {
        let path = self.path_of(inode)?;
        let st = self.caller(&req).lstat(&path).await.map_err(e)?;
        if mask & 2 != 0 && self.opts.read_only {
            return Err(Errno::from(libc::EROFS));
        }
        if permits(req.uid, req.gid, &st, mask & 7) {
            Ok(())
        } else {
            Err(Errno::from(libc::EACCES))
        }
    }

    async fn create(
        &self,
        req: Request,
        parent: Inode,
        name: &OsStr,
        mode: u32,
        flags: u32,
    ) -> Result<ReplyCreated> {
        self.check_writable()?;
        let path = self.child_of(parent, name)?;
        let fs = self.caller(&req);
        let perm = mode & 0o7777;
        let opts = CreateOptions {
            exclusive: true,
            create_parents: false,
            mode: perm,
            ..Default::default()
        };
        let r = fs.create_with(&path, opts).await;
        self.note_added(parent, name, r.is_ok());
        match r {
            Ok(w) => {
                let mut st = w.status().clone();
                self.dir_attrs.stamped(parent, st.ctime_ms);
                if perm == 0 {
                    st = fs
                        .set_attr(
                            &path,
                            CvSetAttr {
                                mode: Some(0),
                                ..Default::default()
                            },
                        )
                        .await
                        .map_err(e)?;
                }
                let ino = self.inodes.ino_of(st.id);
                let state = self.open_state(ino);
                {
                    let created_ms = w.status().mtime_ms;
                    let mut s = state.write().await;
                    s.start_stream(w);
                    // the file's times stay those of its create until it is written:
                    // closing it unwritten changes neither its mtime nor its ctime
                    s.mtime_ms = created_ms;
                }
                // The handle holds the new file's stream whatever its access mode: its
                // close (FLUSH) completes the file, so the file's times are final when
                // close(2) returns (not at the asynchronous RELEASE).
                let fh = self.new_handle(ino, true);
                let entry = self.entry(&st, &path).await;
                debug!(path, ino, "created");
                Ok(ReplyCreated {
                    ttl: entry.ttl,
                    attr: entry.attr,
                    generation: 0,
                    fh,
                    flags: self.write_open_flags(flags),
                })
            }
            Err(FsError::AlreadyExists { .. }) if flags as i32 & libc::O_EXCL == 0 => {
                // O_CREAT on an existing file: open it
                let (st, attr) = self.lstat_for_reply(&fs, None, &path).await.map_err(e)?;
                if kind(&st) == FileType::Directory {
                    return Err(Errno::from(libc::EISDIR));
                }
                let entry = self.entry_of(attr, &path);
                let (fh, open_flags) = match self.open_file(entry.attr.ino, flags).await {
                    Ok(r) => r,
                    Err(err) => {
                        self.forget_inode(entry.attr.ino, 1);
                        return Err(err);
                    }
                };
                let attr = if flags as i32 & libc::O_TRUNC != 0 {
                    let ino = Some(entry.attr.ino);
                    self.lstat_for_reply(&fs, ino, &path).await.map_err(e)?.1
                } else {
                    attr
                };
                Ok(ReplyCreated {
                    ttl: entry.ttl,
                    attr,
                    generation: 0,
                    fh,
                    flags: open_flags,
                })
            }
            Err(err) => Err(e(err)),
        }
    }

    async fn interrupt(&self, _req: Request, _unique: u64) -> Result<()> {
        Ok(())
    }

    async fn fallocate(
        &self,
        _req: Request,
        inode: Inode,
        _fh: u64,
        offset: u64,
        length: u64,
        mode: u32,
    ) -> Result<()> {
        self.check_writable()?;
        // the kernel has already refused a hole punched without KEEP_SIZE, and a punch
        // combined with ZERO_RANGE
        if mode & !(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) != 0 {
            return Err(Errno::from(libc::EOPNOTSUPP));
        }
        let end = offset
            .checked_add(length)
            .filter(|&end| end <= i64::MAX as u64)
            .ok_or_else(|| Errno::from(libc::EFBIG))?;
        if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) != 0 {
            self.zero_range(inode, offset, end).await?;
        }
        if mode & (FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE) != 0 {
            return Ok(());
        }
        let path = self.path_of(inode)?;
        let st = self.fs.lstat(&path).await.map_err(e)?;
        let cur = self.attr_of(&st).await.size;
        if end > cur {
            self.set_len(inode, end).await?;
        }
        Ok(())
    }
}
