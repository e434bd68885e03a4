//! Kernel cache coherence across clients. The mount follows the master's change log
//! (`CurvineFs::watch_changes`) and tells the kernel to drop the entries and attributes
//! that other clients changed. The kernel may then keep them for `entry_ttl` and
//! `attr_ttl` however long those are: a change made elsewhere reaches this mount's
//! cache within a round trip to the master, not when a timeout runs out.
//!
//! While the mount does not follow the log (before its first reply, or while the
//! master cannot be reached) replies carry at most `UNFOLLOWED_TTL`. A reply that tells
//! the mount to reset (a restarted master, or a follower that fell too far behind) drops
//! every entry and attribute the kernel may hold.
//!
//! Notifications are written to a duplicate of the `/dev/fuse` descriptor, not through
//! fuse3's reply path. Dropping an entry makes the kernel take its directory's lock, and
//! a request holding that lock may be waiting for its reply: a notification that held
//! fuse3's reply lock meanwhile would deadlock the mount. So entry notifications go from
//! their own thread and its own descriptor, and nothing else waits for them.

use std::fs::File;
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::Duration;

use curvine_client::CurvineFs;
use curvine_common::tasks::Task;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::dirattrs::DirAttrs;
use crate::inodes::InodeTable;
use crate::listings::Listings;

/// The longest a reply's entry or attributes may be cached while the mount does not
/// follow the master's changes (the default TTLs before the change log existed).
pub(crate) const UNFOLLOWED_TTL: Duration = Duration::from_secs(1);
/// How long one watch call waits for a change before it is made again.
const WATCH_WAIT: Duration = Duration::from_secs(10);
/// Pause after a failed watch call.
const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// After a reply with changes, the next watch call waits this long, so that changes
/// made in quick succession come back in one reply. Each reply costs the master a
/// wake-up and a round trip: without the pause, a client making changes one after
/// another ran at half its speed while a mount followed it.
const BATCH_PAUSE: Duration = Duration::from_millis(5);
/// Notifications are sent again after this long. A lookup that read the master just
/// before another client's change may reply after the first notification went out
/// (which then found nothing to drop); the second one drops what that reply left.
const RESEND_AFTER: Duration = Duration::from_millis(200);

const FUSE_NOTIFY_INVAL_INODE: i32 = 2;
const FUSE_NOTIFY_INVAL_ENTRY: i32 = 3;
const OUT_HEADER: usize = 16;

/// A notification message: `fuse_out_header` (unique 0, the code in `error`) + body.
fn message(code: i32, body: &[u8]) -> Vec<u8> {
    let len = OUT_HEADER + body.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&code.to_ne_bytes());
    m.extend_from_slice(&0u64.to_ne_bytes());
    m.extend_from_slice(body);
    m
}

/// Drop the attributes of `ino`; with `pages`, its cached pages too.
fn inval_inode(ino: u64, pages: bool) -> Vec<u8> {
    let mut b = Vec::with_capacity(24);
    b.extend_from_slice(&ino.to_ne_bytes());
    b.extend_from_slice(&(if pages { 0i64 } else { -1i64 }).to_ne_bytes());
    b.extend_from_slice(&0i64.to_ne_bytes()); // length 0: to the end
    message(FUSE_NOTIFY_INVAL_INODE, &b)
}

/// Drop the entry `name` of directory `parent` (a negative one too).
fn inval_entry(parent: u64, name: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(16 + name.len() + 1);
    b.extend_from_slice(&parent.to_ne_bytes());
    b.extend_from_slice(&(name.len() as u32).to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes()); // flags
    b.extend_from_slice(name.as_bytes());
    b.push(0);
    message(FUSE_NOTIFY_INVAL_ENTRY, &b)
}

/// Write one notification; the kernel not knowing the node or name (ENOENT) is fine.
fn send(dev: &File, msg: &[u8]) {
    match (&*dev).write(msg) {
        Ok(n) if n == msg.len() => {}
        Ok(n) => warn!(wrote = n, len = msg.len(), "short FUSE notification write"),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        Err(e) => debug!(error = %e, "FUSE notification refused"),
    }
}

/// A duplicate of descriptor `fd` (the mount's `/dev/fuse`), for notifications.
#[allow(unsafe_code)]
fn dup_fd(fd: i32) -> std::io::Result<File> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) reads no memory; `fd` is open for the whole session
    // (fuse3 owns it), and on success the new descriptor is ours alone.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `new` was just returned by fcntl and nothing else owns it.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(new) }))
}

struct Notifier {
    dev: Arc<File>,
    /// To the thread that writes entry and page notifications.
    queue: mpsc::Sender<Vec<u8>>,
}

impl Notifier {
    fn start(fd: i32) -> std::io::Result<Notifier> {
        let dev = Arc::new(dup_fd(fd)?);
        let (queue, rx) = mpsc::channel::<Vec<u8>>();
        let d = dev.clone();
        std::thread::Builder::new()
            .name("fuse-notify".into())
            .spawn(move || {
                // ends when the mount's state (and with it the sender) is gone
                for msg in rx {
                    send(&d, &msg);
                }
            })?;
        Ok(Notifier { dev, queue })
    }
}

/// Whether the mount follows the master's changes, and how it tells the kernel.
#[derive(Default)]
pub(crate) struct Coherence {
    following: AtomicBool,
    notifier: OnceLock<Notifier>,
    stop: CancellationToken,
}

impl Coherence {
    /// Whether the mount follows the master's changes now.
    pub(crate) fn following(&self) -> bool {
        self.following.load(Ordering::Acquire)
    }

    /// `ttl` from the configuration, capped at `UNFOLLOWED_TTL` while the mount does not
    /// follow the master's changes.
    pub(crate) fn ttl(&self, ttl: Duration) -> Duration {
        if self.following() {
            ttl
        } else {
            ttl.min(UNFOLLOWED_TTL)
        }
    }

    /// Drop the kernel's attributes of `ino` before the caller replies (an open that
    /// found the file changed). Attributes only: that takes no lock a request may hold.
    pub(crate) fn drop_attrs_now(&self, ino: u64) {
        if let Some(n) = self.notifier.get() {
            send(&n.dev, &inval_inode(ino, false));
        }
    }

    /// Send `msgs` now, and once more after `RESEND_AFTER`.
    fn notify(self: &Arc<Self>, msgs: Vec<Vec<u8>>) {
        let Some(n) = self.notifier.get() else {
            return;
        };
        if msgs.is_empty() {
            return;
        }
        for m in &msgs {
            let _ = n.queue.send(m.clone()); // the thread ends only with the process
        }
        let me = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = me.stop.cancelled() => {}
                _ = tokio::time::sleep(RESEND_AFTER) => {
                    if let Some(n) = me.notifier.get() {
                        for m in msgs {
                            let _ = n.queue.send(m);
                        }
                    }
                }
            }
        });
    }

    /// Start following the master's changes for the mount whose requests come from
    /// descriptor `fd`. Without a descriptor to notify through, the mount keeps the
    /// short TTLs.
    pub(crate) fn start(
        self: &Arc<Self>,
        fd: Option<i32>,
        fs: CurvineFs,
        inodes: Arc<InodeTable>,
        dir_attrs: Arc<DirAttrs>,
        listings: Arc<Listings>,
    ) {
        let Some(fd) = fd else {
            warn!("no /dev/fuse descriptor found: kernel cache timeouts stay at most 1s");
            return;
        };
        match Notifier::start(fd) {
            Ok(n) => {
                let _ = self.notifier.set(n);
            }
            Err(e) => {
                warn!(error = %e, "cannot set up FUSE notifications: kernel cache timeouts stay at most 1s");
                return;
            }
        }
        let me = self.clone();
        crate::tasks().spawn("change_log", move |task| {
            me.follow(fs, inodes, dir_attrs, listings, task)
        });
    }

    /// Stop following (the mount is going away).
    pub(crate) fn stop(&self) {
        self.following.store(false, Ordering::Release);
        self.stop.cancel();
    }

    async fn follow(
        self: Arc<Self>,
        fs: CurvineFs,
        inodes: Arc<InodeTable>,
        dirs: Arc<DirAttrs>,
        listings: Arc<Listings>,
        task: Task,
    ) {
        let mut epoch = String::new();
        let mut after = 0;
        let mut failing = false;
        loop {
            let r = tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = task.cancelled() => return,
                r = fs.watch_changes(&epoch, after, WATCH_WAIT) => r,
            };
            match r {
                Ok(resp) => {
                    task.busy(format!("applying {} changes", resp.changes.len()));
                    let mut msgs = Vec::new();
                    if resp.reset {
                        if !epoch.is_empty() {
                            info!("the master's change log restarted: dropping the kernel's cached entries");
                        }
                        dirs.clear();
                        listings.clear();
                        for (parent, name) in inodes.entries() {
                            msgs.push(inval_entry(parent, &name));
                        }
                        for ino in inodes.inos() {
                            msgs.push(inval_inode(ino, true));
                        }
                    }
                    for c in &resp.changes {
                        for id in &c.inodes {
                            let ino = inodes.ino_of(*id);
                            if inodes.knows(ino) {
                                dirs.changed(ino);
                                msgs.push(inval_inode(ino, true));
                            }
                        }
                        for e in &c.entries {
                            let parent = inodes.ino_of(e.parent);
                            listings.changed_elsewhere(parent);
                            if inodes.knows(parent) {
                                msgs.push(inval_entry(parent, &e.name));
                            }
                        }
                    }
                    self.notify(msgs);
                    epoch = resp.epoch;
                    after = resp.last_seq;
                    if failing {
                        info!("following the master's changes again");
                        failing = false;
                    }
                    self.following.store(true, Ordering::Release);
                    task.idle();
                    if !resp.changes.is_empty() {
                        tokio::select! {
                            _ = self.stop.cancelled() => return,
                            _ = task.cancelled() => return,
                            _ = tokio::time::sleep(BATCH_PAUSE) => {}
                        }
                    }
                }
                Err(e) => {
                    self.following.store(false, Ordering::Release);
                    task.failed(&e);
                    listings.clear();
                    if !failing {
                        warn!(error = %e, "cannot follow the master's changes: kernel cache timeouts are at most 1s until it answers");
                        failing = true;
                    }
                    tokio::select! {
                        _ = self.stop.cancelled() => return,
                        _ = task.cancelled() => return,
                        _ = tokio::time::sleep(RETRY_PAUSE) => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_are_laid_out_as_the_kernel_reads_them() {
        let m = inval_entry(7, "ab");
        assert_eq!(m.len(), 16 + 16 + 3);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 35);
        assert_eq!(i32::from_ne_bytes(m[4..8].try_into().unwrap()), 3);
        assert_eq!(u64::from_ne_bytes(m[8..16].try_into().unwrap()), 0);
        assert_eq!(u64::from_ne_bytes(m[16..24].try_into().unwrap()), 7);
        assert_eq!(u32::from_ne_bytes(m[24..28].try_into().unwrap()), 2);
        assert_eq!(&m[32..], b"ab\0");

        let m = inval_inode(9, false);
        assert_eq!(m.len(), 16 + 24);
        assert_eq!(i32::from_ne_bytes(m[4..8].try_into().unwrap()), 2);
        assert_eq!(u64::from_ne_bytes(m[16..24].try_into().unwrap()), 9);
        assert_eq!(i64::from_ne_bytes(m[24..32].try_into().unwrap()), -1);
        assert_eq!(
            i64::from_ne_bytes(inval_inode(9, true)[24..32].try_into().unwrap()),
            0
        );
    }

    #[test]
    fn ttls_are_capped_until_the_mount_follows() {
        let c = Coherence::default();
        let long = Duration::from_secs(60);
        assert_eq!(c.ttl(long), UNFOLLOWED_TTL);
        assert_eq!(c.ttl(Duration::ZERO), Duration::ZERO);
        c.following.store(true, Ordering::Release);
        assert_eq!(c.ttl(long), long);
        c.stop();
        assert_eq!(c.ttl(long), UNFOLLOWED_TTL);
    }
}
