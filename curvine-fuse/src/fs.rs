//! `CurvineFuse`: the mount's state — inode table, per-inode write state, open file and
//! directory handles — and the data operations (open, read, write, flush, release,
//! truncate) that `ops.rs` routes FUSE requests to. Files unlinked while open here
//! are kept under a hidden name (`hidden`).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use curvine_client::{CurvineFs, FileStatus, FsError, FsReader, Listing, SetAttr as CvSetAttr};
use fuse3::raw::prelude::{FileAttr, ReplyEntry};
use fuse3::raw::Request;
use fuse3::{Errno, Result};
use tokio::sync::RwLock;
use tracing::{debug, warn};

use crate::attr::{apply_local, errno, to_attr};
use crate::bufpool::BufPool;
use crate::coherence::Coherence;
use crate::dirattrs::DirAttrs;
use crate::dirty::Spill;
use crate::file::{Content, FileState};
use crate::groups::Groups;
use crate::inodes::{InodeTable, NameError};
use crate::listings::Listings;

mod hidden;

pub(crate) use hidden::HIDDEN_DIR;

/// What the mount was asked for (from `[fuse]` and the command line).
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Curvine directory shown at the mount point.
    pub fs_path: String,
    pub read_only: bool,
    pub attr_ttl: Duration,
    pub entry_ttl: Duration,
    pub negative_ttl: Duration,
    pub max_write: u32,
    pub writeback_cache: bool,
    /// Keep the page cache across opens of an unchanged file (`fuse.keep_cache`).
    pub keep_cache: bool,
    /// Read-only handles skip the kernel's page cache (`fuse.direct_io`).
    pub direct_io: bool,
    /// Where dirty files spill (unlinked temp files) once they hold `dirty_mem` bytes
    /// of memory together.
    pub spill_dir: PathBuf,
    pub dirty_mem: u64,
    /// Every namespace call waits for the master's journal sync (`fuse.sync_each_call`);
    /// otherwise changes are durable at fsync, fsyncdir and unmount.
    pub sync_each_call: bool,
}

type StateRef = Arc<RwLock<FileState>>;

/// What identifies a version of a file's content for the page cache: the master
/// changes at least one of these with every change of the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Version {
    len: u64,
    mtime_ms: i64,
    ctime_ms: i64,
}

impl Version {
    fn of(st: &FileStatus) -> Version {
        Version {
            len: st.len,
            mtime_ms: st.mtime_ms,
            ctime_ms: st.ctime_ms,
        }
    }
}

/// A change of a file's content made without a handle's write.
enum Edit {
    SetLen(u64),
    Zero { off: u64, end: u64 },
}

/// `open` reply flag: reads and writes of this handle skip the kernel's page cache.
pub(crate) const FOPEN_DIRECT_IO: u32 = 1 << 0;
/// `open` reply flag: keep the file's pages in the kernel's cache.
pub(crate) const FOPEN_KEEP_CACHE: u32 = 1 << 1;

struct Slot {
    state: StateRef,
    /// Open handles (plus in-flight setattr calls) on the inode.
    opens: usize,
}

pub(crate) struct Handle {
    pub ino: u64,
    pub writable: bool,
    /// Readers of Curvine's copy, one per block recently read (see `Lane`).
    lanes: Mutex<Vec<Arc<Lane>>>,
    /// Block size of the file (0 until the first reader is open).
    block_size: AtomicU64,
    tick: AtomicU64,
    /// A write through this handle already dropped (or found none of) the file's
    /// set-ID bits.
    set_id_checked: std::sync::atomic::AtomicBool,
}

/// Readers per handle: at most this many blocks keep an open reader. (Several readers
/// per block, so read-ahead requests of one block run in parallel, measured slower on
/// a 2-core machine: one per block.)
const MAX_LANES: usize = 16;

/// A reader for one block of the file at one generation. An `FsReader` keeps a single
/// block source open, so random reads across blocks through one reader would reopen a
/// source (a worker round trip) on every switch; one reader per block avoids that and
/// lets reads of different blocks run concurrently.
struct Lane {
    block: u64,
    gen: u64,
    last_use: AtomicU64,
    reader: tokio::sync::Mutex<Option<FsReader>>,
}

impl Handle {
    /// The lane for block `block` at generation `gen` (created if absent; the least
    /// recently used lane goes when there are too many).
    fn lane(&self, block: u64, gen: u64) -> Arc<Lane> {
        let now = self.tick.fetch_add(1, Ordering::Relaxed);
        let mut lanes = lock(&self.lanes);
        lanes.retain(|l| l.gen == gen);
        if let Some(l) = lanes.iter().find(|l| l.block == block) {
            l.last_use.store(now, Ordering::Relaxed);
            return l.clone();
        }
        if lanes.len() >= MAX_LANES {
            if let Some(i) =
                (0..lanes.len()).min_by_key(|&i| lanes[i].last_use.load(Ordering::Relaxed))
            {
                lanes.swap_remove(i);
            }
        }
        let l = Arc::new(Lane {
            block,
            gen,
            last_use: AtomicU64::new(now),
            reader: tokio::sync::Mutex::new(None),
        });
        lanes.push(l.clone());
        l
    }
}

pub struct CurvineFuse {
    pub(crate) fs: CurvineFs,
    pub(crate) opts: MountOptions,
    pub(crate) inodes: Arc<InodeTable>,
    files: Mutex<HashMap<u64, Slot>>,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    pub(crate) dirs: Mutex<HashMap<u64, Arc<Listing>>>,
    /// Open files whose name was unlinked (or renamed over) here: the hidden name they
    /// were moved to, deleted by the last release.
    hidden: Mutex<HashMap<u64, String>>,
    next_fh: AtomicU64,
    /// Files whose kernel page cache matches a known version of the file: the version
    /// this mount last opened for reading, or wrote in whole (`fuse.keep_cache`).
    cached: Mutex<HashMap<u64, Version>>,
    /// Reply buffers of large reads.
    bufs: Arc<BufPool>,
    /// Directory attributes kept for `attr_ttl` (see `dirattrs`).
    pub(crate) dir_attrs: Arc<DirAttrs>,
    /// Following the master's changes, which lets the kernel cache for long.
    pub(crate) coherence: Arc<Coherence>,
    /// Directories whose every name this mount knows (see `listings`).
    pub(crate) listings: Arc<Listings>,
    /// Memory and spill files of the files being modified in place.
    spill: Arc<Spill>,
    /// Supplementary groups of the calling processes.
    groups: Groups,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl CurvineFuse {
    /// A mount of `opts.fs_path` (which must be a directory) on the cluster `fs`.
    pub async fn new(fs: CurvineFs, opts: MountOptions) -> curvine_common::FsResult<CurvineFuse> {
        // paths below the mount may be longer than PATH_MAX (see `for_mount`)
        let fs = fs.for_mount().deferring_sync(!opts.sync_each_call);
        let root = fs.stat(&opts.fs_path).await?;
        if attr_kind_is_dir(&root) {
            Ok(CurvineFuse {
                inodes: Arc::new(InodeTable::new(root.path.clone(), root.id)),
                fs,
                files: Mutex::new(HashMap::new()),
                handles: Mutex::new(HashMap::new()),
                dirs: Mutex::new(HashMap::new()),
                hidden: Mutex::new(HashMap::new()),
                cached: Mutex::new(HashMap::new()),
                next_fh: AtomicU64::new(1),
                bufs: Arc::new(BufPool::default()),
                dir_attrs: Arc::new(DirAttrs::new(opts.attr_ttl)),
                coherence: Arc::default(),
                listings: Arc::default(),
                spill: Spill::new(opts.spill_dir.clone(), opts.dirty_mem),
                groups: Groups::default(),
                opts,
            })
        } else {
            Err(FsError::NotADirectory { path: root.path })
        }
    }

    /// How long the kernel may keep an entry: `entry_ttl`, at most 1s while the mount
    /// does not follow the master's changes.
    pub(crate) fn entry_ttl(&self) -> Duration {
        self.coherence.ttl(self.opts.entry_ttl)
    }

    /// As `entry_ttl`, for attributes.
    pub(crate) fn attr_ttl(&self) -> Duration {
        self.coherence.ttl(self.opts.attr_ttl)
    }

    /// Follow the master's changes; `fd` is the mount's `/dev/fuse` descriptor.
    pub(crate) fn follow_changes(&self, fd: Option<i32>) {
        self.coherence.start(
            fd,
            self.fs.clone(),
            self.inodes.clone(),
            self.dir_attrs.clone(),
            self.listings.clone(),
        );
    }

    /// Whether `name` is surely not in directory `parent` (answered without the master).
    pub(crate) fn surely_absent(&self, parent: u64, name: &OsStr) -> bool {
        self.coherence.following()
            && name
                .to_str()
                .is_some_and(|n| self.listings.absent(parent, n))
    }

    /// A call that adds `name` to `parent` succeeded (`ok`): the listing keeps the
    /// name. On failure the listing is forgotten: the call found the directory otherwise
    /// than the mount thought, or failed half way.
    pub(crate) fn note_added(&self, parent: u64, name: &OsStr, ok: bool) {
        self.note_name(parent, name, ok, Listings::added);
    }

    /// As `note_added`, for a call that removes `name` from `parent`.
    pub(crate) fn note_removed(&self, parent: u64, name: &OsStr, ok: bool) {
        self.note_name(parent, name, ok, Listings::removed);
    }

    fn note_name(&self, parent: u64, name: &OsStr, ok: bool, keep: fn(&Listings, u64, &str)) {
        match (ok, name.to_str()) {
            (true, Some(n)) => keep(&self.listings, parent, n),
            _ => self.listings.forget(parent),
        }
    }

    /// The cluster acting as the caller of `req` (owner of what it creates; the master
    /// checks its permissions), with the caller's supplementary groups.
    pub(crate) fn caller(&self, req: &Request) -> CurvineFs {
        let groups = self.groups.of(req.pid, req.uid, req.gid);
        self.fs.with_groups(req.uid, req.gid, &groups)
    }

    /// Directory `ino` lost an entry through this mount and the master stamped it
    /// `at_ms` (0: the master did not say, so the mount's copy goes).
    pub(crate) fn dir_stamped(&self, ino: u64, at_ms: i64) {
        if at_ms > 0 {
            self.dir_attrs.stamped(ino, at_ms);
        } else {
            self.dir_attrs.changed(ino);
        }
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        if self.opts.read_only {
            Err(Errno::from(libc::EROFS))
        } else {
            Ok(())
        }
    }

    pub(crate) fn path_of(&self, ino: u64) -> Result<String> {
        self.inodes
            .path(ino)
            .ok_or_else(|| Errno::from(libc::ENOENT))
    }

    pub(crate) fn child_of(&self, parent: u64, name: &OsStr) -> Result<String> {
        let name = name.to_str().ok_or_else(|| Errno::from(libc::EINVAL))?;
        match self.inodes.child_path(parent, name) {
            Ok(Some(p)) => Ok(p),
            Ok(None) => Err(Errno::from(libc::ENOENT)),
            Err(NameError::TooLong) => Err(Errno::from(libc::ENAMETOOLONG)),
            Err(NameError::Invalid) => Err(Errno::from(libc::EINVAL)),
        }
    }

    /// Attributes of `st`, with this mount's unflushed length and mtime.
    pub(crate) async fn attr_of(&self, st: &FileStatus) -> FileAttr {
        let ino = self.inodes.ino_of(st.id);
        let mut attr = to_attr(st, ino);
        self.unlinked_links(st, &mut attr);
        if let Some(state) = self.state(ino) {
            let s = state.read().await;
            if let Some(len) = s.local_len() {
                apply_local(&mut attr, len, s.mtime_ms);
            }
        }
        attr
    }

    /// A lookup reply for `st` found at `path`: the kernel now holds one more reference.
    pub(crate) async fn entry(&self, st: &FileStatus, path: &str) -> ReplyEntry {
        let attr = self.attr_of(st).await;
        self.entry_of(attr, path)
    }

    /// A lookup reply with `attr` for `path`: the kernel now holds one more reference.
    pub(crate) fn entry_of(&self, attr: FileAttr, path: &str) -> ReplyEntry {
        self.inodes.remember(attr.ino, path);
        ReplyEntry {
            ttl: self.entry_ttl(),
            attr,
            generation: 0,
        }
    }

    /// `lstat` of `path` for a reply to the kernel. The local state of node `ino` (the
    /// one the kernel asks about; by default the one this mount knows at `path`) is held
    /// across the master call and applied after it. Otherwise a stream closing meanwhile
    /// would leave the reply with the length from before its data was committed, and
    /// the kernel would place the next O_APPEND write there, over that data.
    pub(crate) async fn lstat_for_reply(
        &self,
        fs: &CurvineFs,
        ino: Option<u64>,
        path: &str,
    ) -> std::result::Result<(FileStatus, FileAttr), FsError> {
        let known = ino.or_else(|| self.inodes.ino_at(path));
        let state = known.and_then(|ino| self.state(ino));
        let guard = match &state {
            Some(s) => Some(s.read().await),
            None => None,
        };
        let st = fs.lstat(path).await?;
        let ino = self.inodes.ino_of(st.id);
        let mut attr = to_attr(&st, ino);
        self.unlinked_links(&st, &mut attr);
        match &guard {
            Some(g) if known == Some(ino) => {
                if let Some(len) = g.local_len() {
                    apply_local(&mut attr, len, g.mtime_ms);
                }
            }
            _ => {
                drop(guard);
                attr = self.attr_of(&st).await;
            }
        }
        Ok((st, attr))
    }

    /// A file unlinked while open here waits under a hidden name, which is no link a
    /// program knows: it has one link fewer (0 after its last name went).
    fn unlinked_links(&self, st: &FileStatus, attr: &mut FileAttr) {
        if lock(&self.hidden).contains_key(&attr.ino) {
            attr.nlink = st.nlink.saturating_sub(1);
        }
    }

    // ---------- per-inode state and handles ----------

    /// In writeback mode the kernel keeps the mtime of a file it writes and sends it (a
    /// SETATTR of the times alone) as it writes pages back, last of all at close. For a
    /// file this mount is streaming, that time stays with the stream and is written at
    /// close: completing the stream first would split the file into several streams,
    /// and lose the record that the kernel's pages are the whole file. True when the
    /// time was kept so.
    pub(crate) async fn keep_kernel_mtime(&self, ino: u64, mtime_ms: i64) -> bool {
        if !self.opts.writeback_cache {
            return false;
        }
        match self.state(ino) {
            Some(state) => state.write().await.keep_mtime(mtime_ms),
            None => false,
        }
    }

    fn state(&self, ino: u64) -> Option<StateRef> {
        lock(&self.files).get(&ino).map(|s| s.state.clone())
    }

    /// Take a reference on the inode's state (created clean if absent).
    pub(crate) fn open_state(&self, ino: u64) -> StateRef {
        let mut files = lock(&self.files);
        let slot = files.entry(ino).or_insert_with(|| Slot {
            state: Arc::new(RwLock::new(FileState::new(self.spill.clone()))),
            opens: 0,
        });
        slot.opens += 1;
        slot.state.clone()
    }

    /// Drop a reference; the state goes when unreferenced and clean.
    pub(crate) async fn close_state(&self, ino: u64) {
        let state = {
            let mut files = lock(&self.files);
            let Some(slot) = files.get_mut(&ino) else {
                return;
            };
            slot.opens = slot.opens.saturating_sub(1);
            if slot.opens > 0 {
                return;
            }
            slot.state.clone()
        };
        // decide under the state lock so a concurrent open cannot lose local changes
        let clean = state.read().await.is_clean();
        if clean {
            let mut files = lock(&self.files);
            if let Some(slot) = files.get(&ino) {
                if slot.opens == 0 && Arc::ptr_eq(&slot.state, &state) {
                    files.remove(&ino);
                }
            }
        }
    }

    pub(crate) fn new_handle(&self, ino: u64, writable: bool) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let h = Arc::new(Handle {
            ino,
            writable,
            lanes: Mutex::new(Vec::new()),
            block_size: AtomicU64::new(0),
            tick: AtomicU64::new(0),
            set_id_checked: std::sync::atomic::AtomicBool::new(false),
        });
        lock(&self.handles).insert(fh, h);
        fh
    }

    pub(crate) fn next_dir_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    fn handle(&self, fh: u64) -> Result<Arc<Handle>> {
        lock(&self.handles)
            .get(&fh)
            .cloned()
            .ok_or_else(|| Errno::from(libc::EBADF))
    }

    // ---------- data operations ----------

    /// Open `ino` (a regular file) with open(2) `flags`; returns the handle.
    /// Open `ino`; returns the handle and the `open` reply flags.
    pub(crate) async fn open_file(&self, ino: u64, flags: u32) -> Result<(u64, u32)> {
        let acc = flags as i32 & libc::O_ACCMODE;
        let writable = acc != libc::O_RDONLY;
        if writable {
            self.check_writable()?;
        }
        let path = self.path_of(ino)?;
        let state = self.open_state(ino);
        if writable {
            // the kernel drops the file's pages at this open (no keep-cache flag)
            self.forget_cached(ino);
            if flags as i32 & libc::O_TRUNC != 0 {
                let res = state.write().await.set_len(&self.fs, &path, 0).await;
                if let Err(e) = res {
                    self.close_state(ino).await;
                    return Err(errno(&e));
                }
            }
            return Ok((self.new_handle(ino, true), self.write_open_flags(flags)));
        }
        let gen = {
            let s = state.read().await;
            (self.opts.keep_cache && s.is_clean()).then_some(s.gen)
        };
        let Some(gen) = gen else {
            self.forget_cached(ino);
            if !self.opts.keep_cache {
                // close-to-open without a look at the master: the kernel asks it
                self.coherence.drop_attrs_now(ino);
            }
            return Ok((self.new_handle(ino, false), self.read_open_flags(false)));
        };
        // Close-to-open: the master's status decides whether the cached pages are
        // still this file's. The reader is the one the first read would open anyway.
        let reader = match self.fs.open(&path).await {
            Ok(r) => r,
            Err(err) => {
                self.close_state(ino).await;
                return Err(errno(&err));
            }
        };
        if self.inodes.ino_of(reader.status().id) != ino {
            // The name now holds another file (replaced by another client, and the
            // kernel has not heard yet). ESTALE makes the kernel look the name up
            // again and retry the open once, which then opens the new file.
            self.close_state(ino).await;
            return Err(Errno::from(libc::ESTALE));
        }
        let now = Version::of(reader.status());
        let keep = lock(&self.cached).insert(ino, now) == Some(now);
        if !keep {
            // Close-to-open: the kernel may hold this file's attributes from before
            // another client changed it, and would read only up to the length it knows.
            self.coherence.drop_attrs_now(ino);
        }
        let fh = self.new_handle(ino, false);
        let h = self.handle(fh)?;
        let bs = reader.status().block_size;
        h.block_size.store(bs, Ordering::Relaxed);
        *h.lane(0, gen).reader.lock().await = Some(reader);
        Ok((fh, self.read_open_flags(keep)))
    }

    /// Reply flags for a handle opened read-only; `keep`: the kernel's pages of the
    /// file are still its content.
    fn read_open_flags(&self, keep: bool) -> u32 {
        if self.opts.direct_io {
            FOPEN_DIRECT_IO
        } else if keep {
            FOPEN_KEEP_CACHE
        } else {
            0
        }
    }

    /// Reply flags for a handle opened for writing. Without the writeback cache, the
    /// kernel copies each write into page-cache pages and sends those; the pages were
    /// never used afterwards (the next open drops them), yet the copy into new pages
    /// cost as much CPU as the daemon's write into the block. A write-only handle cannot
    /// read or be mapped, so it goes straight to the daemon instead. The kernel drops
    /// cached pages of the range such a write covers, so other handles still read it.
    pub(crate) fn write_open_flags(&self, flags: u32) -> u32 {
        let write_only = flags as i32 & libc::O_ACCMODE == libc::O_WRONLY;
        if write_only && !self.opts.writeback_cache {
            FOPEN_DIRECT_IO
        } else {
            0
        }
    }

    fn forget_cached(&self, ino: u64) {
        lock(&self.cached).remove(&ino);
    }

    /// The kernel dropped `n` references to `ino`; with the last one its pages are gone
    /// too, and so is the record of their version.
    pub(crate) fn forget_inode(&self, ino: u64, n: u64) {
        if self.inodes.forget(ino, n) {
            self.forget_cached(ino);
        }
    }

    /// After a stream that wrote all of `ino` closed, its pages are that version.
    fn note_written(&self, ino: u64, s: &mut FileState) {
        if let Some(st) = s.take_written() {
            if self.opts.keep_cache && self.inodes.ino_of(st.id) == ino {
                lock(&self.cached).insert(ino, Version::of(&st));
            }
        }
    }

    pub(crate) async fn read(&self, ino: u64, fh: u64, off: u64, size: u32) -> Result<Bytes> {
        let h = self.handle(fh)?;
        let state = self.state(h.ino).ok_or_else(|| Errno::from(libc::EBADF))?;
        let gen = loop {
            {
                let s = state.read().await;
                match &s.content {
                    Content::Clean => break s.gen,
                    Content::Dirty(d) => {
                        return d
                            .read_at(off, size as usize)
                            .map(Bytes::from)
                            .map_err(|e| errno(&e))
                    }
                    Content::Streaming(_) => {}
                }
            }
            let mut s = state.write().await;
            match s.read_local(off, size as usize).await {
                Ok(Some(data)) => return Ok(Bytes::from(data)),
                Ok(None) => {}
                Err(e) => return Err(errno(&e)),
            }
        };
        let bs = h.block_size.load(Ordering::Relaxed);
        let block = off.checked_div(bs).unwrap_or(0);
        let lane = h.lane(block, gen);
        let mut r = lane.reader.lock().await;
        if r.is_none() {
            let path = self.path_of(ino)?;
            let reader = self.fs.open(&path).await.map_err(|e| errno(&e))?;
            let file_bs = reader.status().block_size;
            if bs == 0 && file_bs > 0 {
                // later reads pick their lane by block; this one stays in lane 0
                h.block_size.store(file_bs, Ordering::Relaxed);
            }
            *r = Some(reader);
        }
        let Some(reader) = r.as_mut() else {
            return Err(Errno::from(libc::EIO));
        };
        // straight from the block's pages when the block file is on this host's tmpfs
        if let Some(data) = reader.pread_mapped(off, size as usize) {
            return Ok(data);
        }
        let mut buf = self.bufs.get(size as usize);
        let n = reader.pread(off, buf.as_mut_slice()).await.map_err(|e| {
            warn!(path = reader.path(), off, error = %e, "read failed");
            errno(&e)
        })?;
        buf.truncate(n);
        Ok(buf.into_bytes())
    }

    pub(crate) async fn write(&self, ino: u64, fh: u64, off: u64, data: &[u8]) -> Result<u32> {
        self.check_writable()?;
        let _ = self.handle(fh)?;
        let path = self.path_of(ino)?;
        let state = self.state(ino).ok_or_else(|| Errno::from(libc::EBADF))?;
        let mut s = state.write().await;
        if s.is_clean() {
            // the first write since Curvine's copy was current; later ones find the
            // record gone already (a record is only made while the state is clean)
            self.forget_cached(ino);
        }
        s.write(&self.fs, &path, off, data).await.map_err(|e| {
            warn!(path, off, len = data.len(), error = %e, "write failed");
            errno(&e)
        })?;
        Ok(data.len() as u32)
    }

    /// The kernel marks a write by a caller without CAP_FSETID (FUSE_WRITE_KILL_SUIDGID;
    /// it does so for writes that skip its page cache): as Linux, the file loses its
    /// set-user-ID bit, and its set-group-ID bit when group-executable, changed by the
    /// caller of `req` (the master lets a writer drop them). Looked at once per handle.
    pub(crate) async fn drop_set_id_for_write(
        &self,
        req: &Request,
        ino: u64,
        fh: u64,
    ) -> Result<()> {
        let h = self.handle(fh)?;
        if h.set_id_checked.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        let path = self.path_of(ino)?;
        let fs = self.caller(req);
        let st = fs.lstat(&path).await.map_err(|e| errno(&e))?;
        // set-user-ID always, set-group-ID when group-executable
        let mut mode = st.mode & 0o7777 & !0o4000;
        if mode & 0o010 != 0 {
            mode &= !0o2000;
        }
        if mode == st.mode & 0o7777 {
            return Ok(());
        }
        let attr = CvSetAttr {
            mode: Some(mode),
            ..Default::default()
        };
        fs.set_attr(&path, attr).await.map_err(|e| errno(&e))?;
        // the kernel holds the old mode
        self.coherence.drop_attrs_now(ino);
        Ok(())
    }

    /// Wait until every namespace change this mount made is on the master's disk
    /// (changes are acknowledged before that unless `sync_each_call`).
    pub(crate) async fn durable(&self) -> Result<()> {
        self.fs.sync_journal().await.map_err(|e| {
            warn!(error = %e, "the master's journal sync failed");
            errno(&e)
        })
    }

    /// Push local changes of `ino` to Curvine.
    pub(crate) async fn flush_ino(&self, ino: u64) -> Result<()> {
        let Some(state) = self.state(ino) else {
            return Ok(());
        };
        if state.read().await.is_clean() {
            // a read may have closed the stream already
            self.note_written(ino, &mut *state.write().await);
            return Ok(());
        }
        let path = self.path_of(ino)?;
        let mut s = state.write().await;
        let res = s.flush(&self.fs, &path).await.map_err(|e| {
            warn!(path, error = %e, "flush failed");
            errno(&e)
        });
        self.note_written(ino, &mut s);
        res
    }

    pub(crate) async fn flush_handle(&self, ino: u64, fh: u64) -> Result<()> {
        let h = self.handle(fh)?;
        if h.writable {
            self.flush_ino(ino).await
        } else {
            Ok(())
        }
    }

    pub(crate) async fn release(&self, ino: u64, fh: u64) -> Result<()> {
        // close(2) already flushed this handle's writes (FLUSH); the last release also
        // pushes what arrived after it (writes of a shared mapping)
        lock(&self.handles).remove(&fh);
        let last = lock(&self.files).get(&ino).is_some_and(|s| s.opens <= 1);
        let res = if last {
            self.flush_ino(ino).await
        } else {
            Ok(())
        };
        self.close_state(ino).await;
        if last {
            self.remove_hidden(ino).await;
        }
        res
    }

    /// Whether `ino` has open handles (or unflushed changes) in this mount.
    fn in_use(&self, ino: u64) -> bool {
        lock(&self.files).contains_key(&ino)
    }

    /// truncate(2)/ftruncate(2): set the length of `ino`.
    pub(crate) async fn set_len(&self, ino: u64, len: u64) -> Result<()> {
        self.edit(ino, Edit::SetLen(len)).await
    }

    /// fallocate(2) with PUNCH_HOLE or ZERO_RANGE: bytes `[off, end)` of `ino` read as
    /// zeros; the length stays.
    pub(crate) async fn zero_range(&self, ino: u64, off: u64, end: u64) -> Result<()> {
        self.edit(ino, Edit::Zero { off, end }).await
    }

    async fn edit(&self, ino: u64, edit: Edit) -> Result<()> {
        self.check_writable()?;
        let path = self.path_of(ino)?;
        let state = self.open_state(ino);
        self.forget_cached(ino);
        let res = {
            let mut s = state.write().await;
            match edit {
                Edit::SetLen(len) => s.set_len(&self.fs, &path, len).await,
                Edit::Zero { off, end } => s.zero_range(&self.fs, &path, off, end).await,
            }
        };
        self.close_state(ino).await;
        res.map_err(|e| errno(&e))
    }

    /// Flush every file with local changes (unmount).
    pub(crate) async fn flush_all(&self) {
        let inos: Vec<u64> = lock(&self.files).keys().copied().collect();
        for ino in inos {
            if let Err(e) = self.flush_ino(ino).await {
                warn!(ino, error = ?e, "flush at unmount failed");
            }
        }
        debug!("all files flushed");
    }
}

fn attr_kind_is_dir(st: &FileStatus) -> bool {
    st.file_type == curvine_client::FileType::Dir as i32
}

impl Drop for CurvineFuse {
    fn drop(&mut self) {
        self.coherence.stop();
    }
}
