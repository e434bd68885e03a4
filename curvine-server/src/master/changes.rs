//! The change log: what each namespace mutation touched (inodes, directory entries) and
//! which client made it, kept in memory for clients that cache metadata (FUSE mounts).
//! A mount follows the log with long polls (`Watch`) and drops the kernel's cache entries
//! that other clients changed, so it can let the kernel keep them much longer than the
//! time a stale entry could be tolerated.
//!
//! The log is not persisted: each master start begins a new epoch, and a follower from
//! another epoch, or one that fell behind what the log holds, is told to reset. Nor is
//! it kept while no one follows it: a master without mounts holds no changes (they were
//! 4 MiB or more of its memory at 100,000 files), and a follower that comes back later
//! resets, as one that fell behind does.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use curvine_common::proto::{Change, ChangedEntry, WatchRequest, WatchResponse};
use tokio::sync::watch;

use super::records::{op::Kind, Op};

/// Changes kept for followers: a follower further behind than this must reset.
pub(super) const KEPT_CHANGES: usize = 65_536;
/// ... and the memory they may take (estimated). A create's change takes about 180
/// bytes: 65,536 of them added 11.5 MiB to the master's peak RSS at 100,000 files. A
/// mount asks again 5 ms after each reply, so it is rarely more than a few hundred
/// changes behind.
pub(super) const KEPT_BYTES: usize = 4 << 20;
/// Changes sent in one reply at the most.
const MAX_REPLY_CHANGES: usize = 4_096;
/// The longest a watch call waits for a change.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// The log keeps changes while a watch call waits, and for this long after one ended: a
/// mount asks again 5 ms after each reply, so this only covers a slow or broken link.
pub(super) const FOLLOW_GRACE: Duration = Duration::from_secs(120);

struct Kept {
    origin: u64,
    change: Change,
    /// Estimated memory of this entry.
    bytes: usize,
}

struct Log {
    /// The newest change's sequence (0 before the first).
    last: u64,
    /// The changes `last - kept.len() + 1 ..= last`.
    kept: VecDeque<Kept>,
    /// Sum of the kept entries' `bytes`.
    bytes: usize,
    /// Watch calls waiting now.
    watching: usize,
    /// When the last watch call ended.
    watched: Option<Instant>,
}

impl Log {
    fn followed(&self, grace: Duration) -> bool {
        self.watching > 0 || self.watched.is_some_and(|t| t.elapsed() < grace)
    }
}

/// A watch call in progress; ends it (also when the call is dropped) on drop.
struct Watching<'a>(&'a ChangeLog);

impl<'a> Watching<'a> {
    fn start(log: &'a ChangeLog) -> Watching<'a> {
        log.lock().watching += 1;
        Watching(log)
    }
}

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        let mut log = self.0.lock();
        log.watching -= 1;
        log.watched = Some(Instant::now());
    }
}

pub(super) struct ChangeLog {
    epoch: String,
    log: Mutex<Log>,
    /// The newest sequence, for waiting followers.
    newest: watch::Sender<u64>,
    cap: usize,
    byte_cap: usize,
    grace: Duration,
}

impl ChangeLog {
    /// A log keeping the last `cap` changes, fewer when they take more than `byte_cap`,
    /// while followed (a watch call waiting, or one ended less than `grace` ago).
    pub(super) fn new(cap: usize, byte_cap: usize, grace: Duration) -> ChangeLog {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        ChangeLog {
            epoch: format!("{:x}-{:x}", nanos, std::process::id()),
            log: Mutex::new(Log {
                last: 0,
                kept: VecDeque::new(),
                bytes: 0,
                watching: 0,
                watched: None,
            }),
            newest: watch::Sender::new(0),
            cap: cap.max(1),
            byte_cap,
            grace,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record what `entry`, applied for client `origin` (0: the master itself), touched.
    /// Called in apply order (under the namespace's mutation lock).
    pub(super) fn record(&self, origin: u64, ops: &[Op]) {
        let mut inodes: Vec<u64> = Vec::new();
        let mut entries: Vec<ChangedEntry> = Vec::new();
        for op in ops {
            match &op.kind {
                Some(Kind::PutInode(i)) => inodes.push(i.id),
                Some(Kind::DelInode(id)) => inodes.push(*id),
                Some(Kind::PutEdge(e)) | Some(Kind::DelEdge(e)) => entries.push(ChangedEntry {
                    parent: e.parent,
                    name: e.name.clone(),
                }),
                _ => {}
            }
        }
        if inodes.is_empty() && entries.is_empty() {
            return; // block bookkeeping only: nothing a client caches
        }
        inodes.sort_unstable();
        inodes.dedup();
        let bytes = std::mem::size_of::<Kept>()
            + inodes.capacity() * std::mem::size_of::<u64>()
            + entries.capacity() * std::mem::size_of::<ChangedEntry>()
            + entries.iter().map(|e| e.name.capacity()).sum::<usize>();
        let seq = {
            let mut log = self.lock();
            log.last += 1;
            let seq = log.last;
            if log.followed(self.grace) {
                log.kept.push_back(Kept {
                    origin,
                    change: Change {
                        seq,
                        inodes,
                        entries,
                    },
                    bytes,
                });
                log.bytes += bytes;
                // the newest change always stays
                while log.kept.len() > self.cap || (log.bytes > self.byte_cap && log.kept.len() > 1)
                {
                    if let Some(old) = log.kept.pop_front() {
                        log.bytes -= old.bytes;
                    }
                }
            } else {
                // Nobody to tell: count the change (a follower arriving later resets)
                // and keep nothing; the changes kept before cannot be followed on from.
                log.kept = VecDeque::new(); // its capacity too
                log.bytes = 0;
            }
            seq
        };
        self.newest.send_replace(seq);
    }

    /// Forget every change: the namespace was replaced (a snapshot installed), so
    /// every follower must reset.
    pub(super) fn forget(&self) {
        let seq = {
            let mut log = self.lock();
            log.last += 1;
            log.kept = VecDeque::new();
            log.bytes = 0;
            log.last
        };
        self.newest.send_replace(seq);
    }

    /// The changes after `after` not made by `exclude`, up to `MAX_REPLY_CHANGES`, and
    /// the sequence the caller has now seen; `None` when the log no longer holds them all.
    fn since(&self, after: u64, exclude: u64) -> Option<(Vec<Change>, u64)> {
        let log = self.lock();
        let first = log.last + 1 - log.kept.len() as u64;
        if after > log.last || after + 1 < first {
            return None;
        }
        let mut out = Vec::new();
        let mut seen = after;
        for k in log.kept.iter().skip((after + 1 - first) as usize) {
            if out.len() == MAX_REPLY_CHANGES {
                break;
            }
            seen = k.change.seq;
            if exclude == 0 || k.origin != exclude {
                out.push(k.change.clone());
            }
        }
        Some((out, seen))
    }

    /// Answer a watch call: changes from others after `req.after_seq`, waiting up to
    /// `req.wait_ms` (at most a minute) for one; a reset when the log cannot tell.
    pub(super) async fn watch(&self, req: &WatchRequest) -> WatchResponse {
        let reset = || WatchResponse {
            epoch: self.epoch.clone(),
            last_seq: *self.newest.borrow(),
            reset: true,
            changes: Vec::new(),
        };
        let _watching = Watching::start(self);
        if req.epoch != self.epoch {
            return reset();
        }
        let wait = Duration::from_millis(req.wait_ms.into()).min(MAX_WAIT);
        let deadline = tokio::time::Instant::now() + wait;
        let mut rx = self.newest.subscribe();
        let mut after = req.after_seq;
        loop {
            rx.borrow_and_update();
            let Some((changes, seen)) = self.since(after, req.exclude_client) else {
                return reset();
            };
            after = seen;
            if !changes.is_empty() || tokio::time::Instant::now() >= deadline {
                return WatchResponse {
                    epoch: self.epoch.clone(),
                    last_seq: after,
                    reset: false,
                    changes,
                };
            }
            // Only the caller's own changes (or none) so far: wait for the next one.
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                continue; // the deadline: one more look, then the empty reply
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::records::{op::Kind, EdgeRec, InodeRec, JournalEntry};
    use super::*;

    fn entry(inode: u64, parent: u64, name: &str) -> JournalEntry {
        let mut e = JournalEntry::default();
        e.push(Kind::PutInode(InodeRec {
            id: inode,
            ..Default::default()
        }));
        e.push(Kind::PutEdge(EdgeRec {
            parent,
            name: name.into(),
            child: inode,
        }));
        e.push(Kind::PutInode(InodeRec {
            id: inode,
            ..Default::default()
        }));
        e
    }

    fn req(log: &ChangeLog, after: u64, exclude: u64, wait_ms: u32) -> WatchRequest {
        WatchRequest {
            epoch: log.epoch.clone(),
            after_seq: after,
            exclude_client: exclude,
            wait_ms,
        }
    }

    /// Changes kept and their bytes.
    fn held(log: &ChangeLog) -> (usize, usize) {
        let l = log.lock();
        (l.kept.len(), l.bytes)
    }

    /// A watch for changes after 0 not made by `exclude`, waiting up to a minute.
    fn waiting(
        log: &std::sync::Arc<ChangeLog>,
        exclude: u64,
    ) -> tokio::task::JoinHandle<WatchResponse> {
        let l = log.clone();
        tokio::spawn(async move { l.watch(&req(&l, 0, exclude, 60_000)).await })
    }

    /// The reply of a `waiting` watch, which must come within 10 s.
    async fn answer(waiter: tokio::task::JoinHandle<WatchResponse>) -> WatchResponse {
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the watch returns once a change of another client came")
            .expect("no panic")
    }

    /// A log as a mount finds it: its first call (a reset) makes it followed.
    async fn followed(cap: usize, byte_cap: usize) -> ChangeLog {
        let log = ChangeLog::new(cap, byte_cap, FOLLOW_GRACE);
        assert!(log.watch(&WatchRequest::default()).await.reset);
        log
    }

    #[tokio::test]
    async fn a_first_call_resets_and_learns_the_epoch() {
        let log = ChangeLog::new(8, KEPT_BYTES, FOLLOW_GRACE);
        log.record(1, &entry(10, 1, "a").ops);
        let r = log.watch(&WatchRequest::default()).await;
        assert!(r.reset);
        assert_eq!(r.epoch, log.epoch);
        assert_eq!(r.last_seq, 1);
        let r = log.watch(&req(&log, r.last_seq, 0, 0)).await;
        assert!(!r.reset);
        assert!(r.changes.is_empty());
    }

    #[tokio::test]
    async fn changes_name_their_inodes_once_and_their_entries() {
        let log = followed(8, KEPT_BYTES).await;
        log.record(7, &entry(10, 1, "a").ops);
        log.record(0, &[]); // nothing touched: not a change
        let r = log.watch(&req(&log, 0, 0, 0)).await;
        assert_eq!(r.last_seq, 1);
        assert_eq!(r.changes.len(), 1);
        assert_eq!(r.changes[0].inodes, vec![10]);
        assert_eq!(r.changes[0].entries.len(), 1);
        assert_eq!(r.changes[0].entries[0].parent, 1);
        assert_eq!(r.changes[0].entries[0].name, "a");
    }

    #[tokio::test]
    async fn the_callers_own_changes_are_left_out_but_passed() {
        let log = followed(8, KEPT_BYTES).await;
        log.record(7, &entry(10, 1, "mine").ops);
        log.record(8, &entry(11, 1, "theirs").ops);
        log.record(7, &entry(12, 1, "mine too").ops);
        let r = log.watch(&req(&log, 0, 7, 0)).await;
        assert_eq!(r.last_seq, 3);
        let names: Vec<_> = r
            .changes
            .iter()
            .map(|c| c.entries[0].name.as_str())
            .collect();
        assert_eq!(names, ["theirs"]);
    }

    #[tokio::test]
    async fn a_follower_behind_the_kept_changes_resets() {
        let log = followed(2, KEPT_BYTES).await;
        for i in 0..3 {
            log.record(1, &entry(10 + i, 1, "x").ops);
        }
        assert!(log.watch(&req(&log, 0, 0, 0)).await.reset);
        let r = log.watch(&req(&log, 1, 0, 0)).await;
        assert!(!r.reset);
        assert_eq!(r.changes.len(), 2);
        // from another epoch, or ahead of the log (a restarted master)
        let mut other = req(&log, 3, 0, 0);
        other.epoch = "old".into();
        assert!(log.watch(&other).await.reset);
        assert!(log.watch(&req(&log, 4, 0, 0)).await.reset);
    }

    #[tokio::test]
    async fn the_log_keeps_no_more_changes_than_its_memory_allows() {
        let log = followed(1000, 8 << 10).await;
        let name = "n".repeat(200);
        for i in 0..100 {
            log.record(1, &entry(10 + i, 1, &name).ops);
        }
        let (kept, bytes) = {
            let l = log.lock();
            (l.kept.len(), l.bytes)
        };
        assert!(bytes <= 8 << 10, "{bytes} bytes kept");
        assert!(kept > 10 && kept < 100, "{kept} changes kept");
        // a follower from before the kept changes resets; one within them does not
        assert!(log.watch(&req(&log, 0, 0, 0)).await.reset);
        let r = log.watch(&req(&log, 99, 0, 0)).await;
        assert!(!r.reset);
        assert_eq!(r.changes.len(), 1);
        assert_eq!(r.changes[0].inodes, vec![109]);
    }

    #[tokio::test]
    async fn a_waiting_follower_wakes_for_a_change_of_another_client() {
        let log = std::sync::Arc::new(followed(8, KEPT_BYTES).await);
        let waiter = waiting(&log, 7);
        // the follower's own change does not end the wait; another client's does
        log.record(7, &entry(10, 1, "mine").ops);
        tokio::task::yield_now().await;
        log.record(8, &entry(11, 1, "theirs").ops);
        let r = answer(waiter).await;
        assert_eq!(r.last_seq, 2);
        assert_eq!(r.changes.len(), 1);
        assert_eq!(r.changes[0].inodes, vec![11]);
    }

    #[tokio::test]
    async fn a_wait_without_changes_ends_empty_at_its_deadline() {
        let log = followed(8, KEPT_BYTES).await;
        let r = log.watch(&req(&log, 0, 0, 20)).await;
        assert!(!r.reset);
        assert!(r.changes.is_empty());
        assert_eq!(r.last_seq, 0);
    }

    #[tokio::test]
    async fn an_unfollowed_log_keeps_nothing_and_a_late_follower_resets() {
        let log = ChangeLog::new(8, KEPT_BYTES, FOLLOW_GRACE);
        for i in 0..3 {
            log.record(1, &entry(10 + i, 1, "x").ops);
        }
        assert_eq!(held(&log), (0, 0));
        let r = log.watch(&WatchRequest::default()).await;
        assert!(r.reset);
        assert_eq!(r.last_seq, 3);
        log.record(1, &entry(20, 1, "y").ops);
        let r = log.watch(&req(&log, 3, 0, 0)).await;
        assert!(!r.reset);
        assert_eq!(r.changes.len(), 1);
        assert_eq!(r.changes[0].inodes, vec![20]);
    }

    #[tokio::test]
    async fn the_log_keeps_changes_while_a_watch_waits_and_not_after_its_followers_left() {
        // no grace: followed exactly while a watch call is in progress
        let log = std::sync::Arc::new(ChangeLog::new(8, KEPT_BYTES, Duration::ZERO));
        let waiter = waiting(&log, 0);
        while log.lock().watching == 0 {
            tokio::task::yield_now().await;
        }
        log.record(8, &entry(11, 1, "seen").ops);
        let r = answer(waiter).await;
        assert_eq!(r.changes.len(), 1);
        assert_eq!(log.lock().watching, 0);
        // the follower is gone: the next change is counted, nothing is kept, and the
        // follower coming back after it resets
        log.record(8, &entry(12, 1, "unseen").ops);
        assert_eq!(held(&log), (0, 0));
        let r = log.watch(&req(&log, 1, 0, 0)).await;
        assert!(r.reset);
        assert_eq!(r.last_seq, 2);
    }
}
