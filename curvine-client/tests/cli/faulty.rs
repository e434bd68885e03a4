//! A local file that breaks part-way through a read, for the copy tests: a FUSE file
//! system, served by the test process, whose one file `src.bin` reads well up to `good`
//! bytes and past them fails with EIO, ends early, or hangs, until `heal` makes the
//! whole file readable.
//!
//! A process cannot exit while the file system holds one of its reads (the kernel
//! waits for the answer once the request was taken), so a test ends a hung read with
//! `fail_hung` before it waits for the reader to exit.

use std::ffi::OsStr;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use fuse3::raw::prelude::*;
use fuse3::raw::MountHandle;
use fuse3::{Inode, Result};
use futures_util::stream::{self, Stream};
use std::sync::Arc;

use tokio::sync::{watch, Notify};

pub const NAME: &str = "src.bin";
const ROOT: Inode = 1;
const FILE: Inode = 2;
const TTL: Duration = Duration::from_secs(1);
/// Reads go straight to the file system, so each read(2) sees what `read` answers.
const FOPEN_DIRECT_IO: u32 = 1;

/// What a read past the good bytes does while the file is broken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Past {
    /// Fails with EIO.
    Fail,
    /// Finds the end of the file, though its size says more.
    End,
    /// Waits until healed (then reads well) or `fail_hung` (then fails with EIO).
    Hang,
}

struct Broken {
    size: u64,
    good: u64,
    past: Past,
    healed: watch::Sender<bool>,
    fail_hung: Arc<Notify>,
}

/// The file's bytes from `start` to `end`.
pub fn bytes_at(start: u64, end: u64) -> Vec<u8> {
    (start..end).map(|i| (i % 241) as u8).collect()
}

impl Broken {
    fn attr(&self, ino: Inode) -> FileAttr {
        let (kind, perm, size, nlink) = if ino == ROOT {
            (FileType::Directory, 0o755, 0, 2)
        } else {
            (FileType::RegularFile, 0o644, self.size, 1)
        };
        let t = (UNIX_EPOCH + Duration::from_secs(1_700_000_000)).into();
        FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: t,
            mtime: t,
            ctime: t,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
        }
    }
}

impl Filesystem for Broken {
    async fn init(&self, _req: Request) -> Result<ReplyInit> {
        Ok(ReplyInit::new(NonZeroU32::new(128 << 10).unwrap()))
    }

    async fn destroy(&self, _req: Request) {}

    async fn lookup(&self, _req: Request, parent: Inode, name: &OsStr) -> Result<ReplyEntry> {
        if parent != ROOT || name != NAME {
            return Err(libc::ENOENT.into());
        }
        Ok(ReplyEntry {
            ttl: TTL,
            attr: self.attr(FILE),
            generation: 0,
        })
    }

    async fn getattr(
        &self,
        _req: Request,
        inode: Inode,
        _fh: Option<u64>,
        _flags: u32,
    ) -> Result<ReplyAttr> {
        match inode {
            ROOT | FILE => Ok(ReplyAttr {
                ttl: TTL,
                attr: self.attr(inode),
            }),
            _ => Err(libc::ENOENT.into()),
        }
    }

    async fn open(&self, _req: Request, inode: Inode, _flags: u32) -> Result<ReplyOpen> {
        if inode != FILE {
            return Err(libc::EISDIR.into());
        }
        Ok(ReplyOpen {
            fh: 0,
            flags: FOPEN_DIRECT_IO,
        })
    }

    async fn read(
        &self,
        _req: Request,
        _inode: Inode,
        _fh: u64,
        offset: u64,
        size: u32,
    ) -> Result<ReplyData> {
        let mut end = (offset + u64::from(size)).min(self.size);
        if !*self.healed.borrow() {
            if offset >= self.good {
                match self.past {
                    Past::Fail => return Err(libc::EIO.into()),
                    Past::End => return Ok(Bytes::new().into()),
                    Past::Hang => {
                        let mut healed = self.healed.subscribe();
                        tokio::select! {
                            _ = healed.wait_for(|h| *h) => {}
                            _ = self.fail_hung.notified() => return Err(libc::EIO.into()),
                        }
                    }
                }
            } else {
                end = end.min(self.good);
            }
        }
        if offset >= end {
            return Ok(Bytes::new().into());
        }
        Ok(Bytes::from(bytes_at(offset, end)).into())
    }

    async fn release(
        &self,
        _req: Request,
        _inode: Inode,
        _fh: u64,
        _flags: u32,
        _lock_owner: u64,
        _flush: bool,
    ) -> Result<()> {
        Ok(())
    }

    async fn flush(&self, _req: Request, _inode: Inode, _fh: u64, _lock_owner: u64) -> Result<()> {
        Ok(())
    }

    async fn opendir(&self, _req: Request, inode: Inode, _flags: u32) -> Result<ReplyOpen> {
        if inode != ROOT {
            return Err(libc::ENOTDIR.into());
        }
        Ok(ReplyOpen { fh: 0, flags: 0 })
    }

    async fn readdir<'a>(
        &'a self,
        _req: Request,
        _parent: Inode,
        _fh: u64,
        offset: i64,
    ) -> Result<ReplyDirectory<impl Stream<Item = Result<DirectoryEntry>> + Send + 'a>> {
        let entries = if offset == 0 {
            vec![Ok(DirectoryEntry {
                inode: FILE,
                kind: FileType::RegularFile,
                name: NAME.into(),
                offset: 1,
            })]
        } else {
            Vec::new()
        };
        Ok(ReplyDirectory {
            entries: stream::iter(entries),
        })
    }

    // the kernel lists with this one when the file system has it
    async fn readdirplus<'a>(
        &'a self,
        _req: Request,
        _parent: Inode,
        _fh: u64,
        offset: u64,
        _lock_owner: u64,
    ) -> Result<ReplyDirectoryPlus<impl Stream<Item = Result<DirectoryEntryPlus>> + Send + 'a>>
    {
        let entries = if offset == 0 {
            vec![Ok(DirectoryEntryPlus {
                inode: FILE,
                generation: 0,
                kind: FileType::RegularFile,
                name: NAME.into(),
                offset: 1,
                attr: self.attr(FILE),
                entry_ttl: TTL,
                attr_ttl: TTL,
            })]
        } else {
            Vec::new()
        };
        Ok(ReplyDirectoryPlus {
            entries: stream::iter(entries),
        })
    }
}

/// The mounted file system; `unmount` waits for the unmount, a drop (a failed test)
/// unmounts too.
pub struct FaultyDir {
    dir: PathBuf,
    healed: watch::Sender<bool>,
    fail_hung: Arc<Notify>,
    mount: Option<MountHandle>,
    rt: tokio::runtime::Handle,
}

impl FaultyDir {
    /// Mount on the empty directory `dir` a file of `size` bytes, broken past `good`.
    pub async fn mount(dir: &Path, size: u64, good: u64, past: Past) -> FaultyDir {
        let (healed, _) = watch::channel(false);
        let fail_hung = Arc::new(Notify::new());
        let fs = Broken {
            size,
            good,
            past,
            healed: healed.clone(),
            fail_hung: fail_hung.clone(),
        };
        let mut mo = fuse3::MountOptions::default();
        mo.fs_name("cv-test-faulty");
        let session = Session::new(mo);
        // through fusermount3 where there is one (the requests are then served on the
        // runtime), as curvine-fuse mounts
        let mount = if which_fusermount3() {
            session.mount_with_unprivileged(fs, dir).await
        } else {
            session.mount(fs, dir).await
        }
        .expect("mount the test file system");
        FaultyDir {
            dir: dir.to_path_buf(),
            healed,
            fail_hung,
            mount: Some(mount),
            rt: tokio::runtime::Handle::current(),
        }
    }

    pub fn file(&self) -> PathBuf {
        self.dir.join(NAME)
    }

    /// From now on every byte of the file reads well; hung reads go on.
    pub fn heal(&self) {
        self.healed.send_replace(true);
    }

    /// The reads hanging now fail with EIO (later ones hang again).
    pub fn fail_hung(&self) {
        self.fail_hung.notify_waiters();
    }

    pub async fn unmount(mut self) {
        self.heal();
        if let Some(m) = self.mount.take() {
            m.unmount().await.expect("unmount the test file system");
        }
    }
}

impl Drop for FaultyDir {
    fn drop(&mut self) {
        self.heal();
        if let Some(m) = self.mount.take() {
            // the handle unmounts on the runtime (a test thread is outside it)
            if let Err(e) = self.rt.block_on(m.unmount()) {
                // detached, so that removing the test's directory does not hang on it
                eprintln!("unmount {}: {e}; detaching it", self.dir.display());
                let _ = std::process::Command::new("umount")
                    .arg("-l")
                    .arg(&self.dir)
                    .status();
            }
        }
    }
}

fn which_fusermount3() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").is_file()))
}
