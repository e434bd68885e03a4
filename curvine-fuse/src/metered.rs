//! What the kernel talks to: [`Metered`] answers every request by handing it to
//! [`CurvineFuse`], and counts and times it by opcode (`crate::metrics`).

use std::ffi::OsStr;
use std::time::Instant;

use fuse3::raw::prelude::*;
use fuse3::{Inode, Result};
use futures_util::stream::Stream;

use crate::fs::CurvineFuse;
use crate::metrics;

pub struct Metered(pub CurvineFuse);

fn done<T>(op: &'static str, start: Instant, r: &Result<T>) {
    let errno = r.as_ref().err().map(|e| -libc::c_int::from(*e));
    metrics::fuse().request(op, start, errno);
}

/// Time `$call` as opcode `$op`.
macro_rules! metered {
    ($op:literal, $call:expr) => {{
        let start = Instant::now();
        let r = $call.await;
        done($op, start, &r);
        r
    }};
}

impl Filesystem for Metered {
    async fn init(&self, req: Request) -> Result<ReplyInit> {
        metered!("init", Filesystem::init(&self.0, req))
    }

    async fn ready(&self, notify: fuse3::notify::Notify) {
        Filesystem::ready(&self.0, notify).await
    }

    async fn destroy(&self, req: Request) {
        let start = Instant::now();
        Filesystem::destroy(&self.0, req).await;
        metrics::fuse().request("destroy", start, None);
    }

    async fn lookup(&self, req: Request, parent: Inode, name: &OsStr) -> Result<ReplyEntry> {
        metered!("lookup", Filesystem::lookup(&self.0, req, parent, name))
    }

    async fn forget(&self, req: Request, inode: Inode, nlookup: u64) {
        let start = Instant::now();
        Filesystem::forget(&self.0, req, inode, nlookup).await;
        metrics::fuse().request("forget", start, None);
    }

    async fn batch_forget(&self, req: Request, inodes: &[(Inode, u64)]) {
        let start = Instant::now();
        Filesystem::batch_forget(&self.0, req, inodes).await;
        metrics::fuse().request("batch_forget", start, None);
    }

    async fn getattr(
        &self,
        req: Request,
        inode: Inode,
        fh: Option<u64>,
        flags: u32,
    ) -> Result<ReplyAttr> {
        metered!(
            "getattr",
            Filesystem::getattr(&self.0, req, inode, fh, flags)
        )
    }

    async fn setattr(
        &self,
        req: Request,
        inode: Inode,
        fh: Option<u64>,
        set: SetAttr,
    ) -> Result<ReplyAttr> {
        metered!("setattr", Filesystem::setattr(&self.0, req, inode, fh, set))
    }

    async fn readlink(&self, req: Request, inode: Inode) -> Result<ReplyData> {
        metered!("readlink", Filesystem::readlink(&self.0, req, inode))
    }

    async fn symlink(
        &self,
        req: Request,
        parent: Inode,
        name: &OsStr,
        link: &OsStr,
    ) -> Result<ReplyEntry> {
        metered!(
            "symlink",
            Filesystem::symlink(&self.0, req, parent, name, link)
        )
    }

    async fn mknod(
        &self,
        req: Request,
        parent: Inode,
        name: &OsStr,
        mode: u32,
        rdev: u32,
    ) -> Result<ReplyEntry> {
        metered!(
            "mknod",
            Filesystem::mknod(&self.0, req, parent, name, mode, rdev)
        )
    }

    async fn mkdir(
        &self,
        req: Request,
        parent: Inode,
        name: &OsStr,
        mode: u32,
        umask: u32,
    ) -> Result<ReplyEntry> {
        metered!(
            "mkdir",
            Filesystem::mkdir(&self.0, req, parent, name, mode, umask)
        )
    }

    async fn unlink(&self, req: Request, parent: Inode, name: &OsStr) -> Result<()> {
        metered!("unlink", Filesystem::unlink(&self.0, req, parent, name))
    }

    async fn rmdir(&self, req: Request, parent: Inode, name: &OsStr) -> Result<()> {
        metered!("rmdir", Filesystem::rmdir(&self.0, req, parent, name))
    }

    async fn rename(
        &self,
        req: Request,
        parent: Inode,
        name: &OsStr,
        new_parent: Inode,
        new_name: &OsStr,
    ) -> Result<()> {
        metered!(
            "rename",
            Filesystem::rename(&self.0, req, parent, name, new_parent, new_name)
        )
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
        metered!(
            "rename2",
            Filesystem::rename2(&self.0, req, parent, name, new_parent, new_name, flags)
        )
    }

    async fn link(
        &self,
        req: Request,
        inode: Inode,
        new_parent: Inode,
        new_name: &OsStr,
    ) -> Result<ReplyEntry> {
        metered!(
            "link",
            Filesystem::link(&self.0, req, inode, new_parent, new_name)
        )
    }

    async fn open(&self, req: Request, inode: Inode, flags: u32) -> Result<ReplyOpen> {
        metered!("open", Filesystem::open(&self.0, req, inode, flags))
    }

    async fn read(
        &self,
        req: Request,
        inode: Inode,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> Result<ReplyData> {
        let r = metered!(
            "read",
            Filesystem::read(&self.0, req, inode, fh, offset, size)
        );
        if let Ok(d) = &r {
            metrics::fuse().read_bytes.inc_by(d.data.len() as u64);
        }
        r
    }

    #[allow(clippy::too_many_arguments)]
    async fn write(
        &self,
        req: Request,
        inode: Inode,
        fh: u64,
        offset: u64,
        data: &[u8],
        write_flags: u32,
        flags: u32,
    ) -> Result<ReplyWrite> {
        let r = metered!(
            "write",
            Filesystem::write(&self.0, req, inode, fh, offset, data, write_flags, flags)
        );
        if let Ok(w) = &r {
            metrics::fuse().written_bytes.inc_by(u64::from(w.written));
        }
        r
    }

    async fn statfs(&self, req: Request, inode: Inode) -> Result<ReplyStatFs> {
        metered!("statfs", Filesystem::statfs(&self.0, req, inode))
    }

    async fn release(
        &self,
        req: Request,
        inode: Inode,
        fh: u64,
        flags: u32,
        lock_owner: u64,
        flush: bool,
    ) -> Result<()> {
        metered!(
            "release",
            Filesystem::release(&self.0, req, inode, fh, flags, lock_owner, flush)
        )
    }

    async fn fsync(&self, req: Request, inode: Inode, fh: u64, datasync: bool) -> Result<()> {
        metered!(
            "fsync",
            Filesystem::fsync(&self.0, req, inode, fh, datasync)
        )
    }

    async fn flush(&self, req: Request, inode: Inode, fh: u64, lock_owner: u64) -> Result<()> {
        metered!(
            "flush",
            Filesystem::flush(&self.0, req, inode, fh, lock_owner)
        )
    }

    async fn setxattr(
        &self,
        req: Request,
        inode: Inode,
        name: &OsStr,
        value: &[u8],
        flags: u32,
        position: u32,
    ) -> Result<()> {
        metered!(
            "setxattr",
            Filesystem::setxattr(&self.0, req, inode, name, value, flags, position)
        )
    }

    async fn getxattr(
        &self,
        req: Request,
        inode: Inode,
        name: &OsStr,
        size: u32,
    ) -> Result<ReplyXAttr> {
        metered!(
            "getxattr",
            Filesystem::getxattr(&self.0, req, inode, name, size)
        )
    }

    async fn listxattr(&self, req: Request, inode: Inode, size: u32) -> Result<ReplyXAttr> {
        metered!(
            "listxattr",
            Filesystem::listxattr(&self.0, req, inode, size)
        )
    }

    async fn removexattr(&self, req: Request, inode: Inode, name: &OsStr) -> Result<()> {
        metered!(
            "removexattr",
            Filesystem::removexattr(&self.0, req, inode, name)
        )
    }

    async fn opendir(&self, req: Request, inode: Inode, flags: u32) -> Result<ReplyOpen> {
        metered!("opendir", Filesystem::opendir(&self.0, req, inode, flags))
    }

    async fn readdir<'a>(
        &'a self,
        req: Request,
        parent: Inode,
        fh: u64,
        offset: i64,
    ) -> Result<ReplyDirectory<impl Stream<Item = Result<DirectoryEntry>> + Send + 'a>> {
        metered!(
            "readdir",
            Filesystem::readdir(&self.0, req, parent, fh, offset)
        )
    }

    async fn readdirplus<'a>(
        &'a self,
        req: Request,
        parent: Inode,
        fh: u64,
        offset: u64,
        lock_owner: u64,
    ) -> Result<ReplyDirectoryPlus<impl Stream<Item = Result<DirectoryEntryPlus>> + Send + 'a>>
    {
        metered!(
            "readdirplus",
            Filesystem::readdirplus(&self.0, req, parent, fh, offset, lock_owner)
        )
    }

    async fn releasedir(&self, req: Request, inode: Inode, fh: u64, flags: u32) -> Result<()> {
        metered!(
            "releasedir",
            Filesystem::releasedir(&self.0, req, inode, fh, flags)
        )
    }

    async fn fsyncdir(&self, req: Request, inode: Inode, fh: u64, datasync: bool) -> Result<()> {
        metered!(
            "fsyncdir",
            Filesystem::fsyncdir(&self.0, req, inode, fh, datasync)
        )
    }

    async fn access(&self, req: Request, inode: Inode, mask: u32) -> Result<()> {
        metered!("access", Filesystem::access(&self.0, req, inode, mask))
    }

    async fn create(
        &self,
        req: Request,
        parent: Inode,
        name: &OsStr,
        mode: u32,
        flags: u32,
    ) -> Result<ReplyCreated> {
        metered!(
            "create",
            Filesystem::create(&self.0, req, parent, name, mode, flags)
        )
    }

    async fn interrupt(&self, req: Request, unique: u64) -> Result<()> {
        metered!("interrupt", Filesystem::interrupt(&self.0, req, unique))
    }

    async fn fallocate(
        &self,
        req: Request,
        inode: Inode,
        fh: u64,
        offset: u64,
        length: u64,
        mode: u32,
    ) -> Result<()> {
        metered!(
            "fallocate",
            Filesystem::fallocate(&self.0, req, inode, fh, offset, length, mode)
        )
    }
}
