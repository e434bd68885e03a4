//! Directory attributes as last fetched from the master, kept for `attr_ttl`.
//!
//! The kernel drops a directory's cached attributes whenever an entry is created in it,
//! so a loop of creates in one directory would ask the master for that directory before
//! every create. The mount keeps its own copy instead: fresh from the master for at
//! most `attr_ttl` (the staleness the kernel's attribute cache allows anyway), with
//! the times of this mount's own creates and removes applied. Any other change this
//! mount makes in a directory (rename, link, attributes) drops its copy.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fuse3::raw::prelude::{FileAttr, FileType};

use crate::attr::{ms, ts};

/// Copies kept at most: past it, expired ones go first.
const MAX_DIRS: usize = 4096;

pub(crate) struct DirAttrs {
    ttl: Duration,
    map: Mutex<HashMap<u64, Entry>>,
}

enum Entry {
    /// The master's attributes, fetched at this instant, plus this mount's creates.
    Copy(FileAttr, Instant),
    /// Changed here at this instant in a way the mount cannot apply: a fetch that began
    /// earlier may predate the change and is not kept.
    Changed(Instant),
}

impl DirAttrs {
    pub(crate) fn new(ttl: Duration) -> DirAttrs {
        DirAttrs {
            ttl,
            map: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The copy of directory `ino`, if one was fetched within `ttl` (the mount's current
    /// attribute timeout, never more than `attr_ttl`).
    pub(crate) fn get(&self, ino: u64, ttl: Duration) -> Option<FileAttr> {
        match self.lock().get(&ino) {
            Some(Entry::Copy(attr, at)) if at.elapsed() < ttl => Some(*attr),
            _ => None,
        }
    }

    /// Drop every copy (the mount cannot tell which directories changed).
    pub(crate) fn clear(&self) {
        let now = Instant::now();
        for e in self.lock().values_mut() {
            *e = Entry::Changed(now);
        }
    }

    /// Keep `attr`, fetched from the master by a call that began at `started`, when it
    /// is a directory's and no change made here since then could be missing from it.
    pub(crate) fn fetched(&self, attr: &FileAttr, started: Instant) {
        if attr.kind != FileType::Directory || self.ttl.is_zero() {
            return;
        }
        let mut map = self.lock();
        match map.get(&attr.ino) {
            Some(Entry::Changed(at)) if *at >= started => return,
            Some(Entry::Copy(old, _)) if ms(old.ctime) > ms(attr.ctime) => return,
            _ => {}
        }
        if map.len() >= MAX_DIRS {
            let ttl = self.ttl;
            map.retain(|_, e| match e {
                Entry::Copy(_, at) | Entry::Changed(at) => at.elapsed() < ttl,
            });
            if map.len() >= MAX_DIRS {
                map.clear();
            }
        }
        map.insert(attr.ino, Entry::Copy(*attr, Instant::now()));
    }

    /// This mount changed an entry of directory `ino` (created or removed one), and the
    /// master stamped the directory with the time `at_ms`.
    pub(crate) fn stamped(&self, ino: u64, at_ms: i64) {
        self.stamped_links(ino, at_ms, 0);
    }

    /// `stamped`, for a change that also added (`links` 1) or removed (-1) a
    /// subdirectory, whose `..` is a link of the directory.
    pub(crate) fn stamped_links(&self, ino: u64, at_ms: i64, links: i32) {
        let mut map = self.lock();
        match map.get_mut(&ino) {
            Some(Entry::Copy(attr, _)) => {
                attr.nlink = attr.nlink.saturating_add_signed(links).max(2);
                if at_ms > ms(attr.mtime) {
                    attr.mtime = ts(at_ms);
                }
                if at_ms > ms(attr.ctime) {
                    attr.ctime = ts(at_ms);
                }
            }
            _ => {
                map.insert(ino, Entry::Changed(Instant::now()));
            }
        }
    }

    /// This mount changed directory `ino` in a way whose times it does not know.
    pub(crate) fn changed(&self, ino: u64) {
        self.lock().insert(ino, Entry::Changed(Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::empty_attr;

    fn dir(ino: u64, ctime_ms: i64) -> FileAttr {
        let mut a = empty_attr(ino, FileType::Directory);
        a.mtime = ts(ctime_ms);
        a.ctime = ts(ctime_ms);
        a
    }

    #[test]
    fn copies_follow_creates_and_go_on_other_changes_or_expiry() {
        let d = DirAttrs::new(Duration::from_secs(60));
        assert!(d.get(5, Duration::MAX).is_none());
        let t0 = Instant::now();
        d.fetched(&empty_attr(6, FileType::RegularFile), t0);
        assert!(
            d.get(6, Duration::MAX).is_none(),
            "only directories are kept"
        );
        d.fetched(&dir(5, 1_000), t0);
        d.stamped(5, 2_500);
        let a = d.get(5, Duration::MAX).unwrap();
        assert_eq!((ms(a.mtime), ms(a.ctime)), (2_500, 2_500));
        // a fetch that saw the directory before that create does not take the copy back
        d.fetched(&dir(5, 1_000), Instant::now());
        assert_eq!(ms(d.get(5, Duration::MAX).unwrap().mtime), 2_500);
        // a change the mount cannot apply drops the copy, and a fetch that began before
        // it is not kept; one that began after it is
        let before = Instant::now();
        d.changed(5);
        assert!(d.get(5, Duration::MAX).is_none());
        d.fetched(&dir(5, 3_000), before);
        assert!(d.get(5, Duration::MAX).is_none());
        d.fetched(&dir(5, 3_000), Instant::now());
        assert_eq!(ms(d.get(5, Duration::MAX).unwrap().ctime), 3_000);
        // a create in a directory with no copy: earlier fetches are not kept either
        let before = Instant::now();
        d.stamped(9, 4_000);
        d.fetched(&dir(9, 1_000), before);
        assert!(d.get(9, Duration::MAX).is_none());

        let short = DirAttrs::new(Duration::from_millis(1));
        short.fetched(&dir(7, 1_000), Instant::now());
        let deadline = Instant::now() + Duration::from_secs(5);
        while short.get(7, Duration::from_millis(1)).is_some() {
            assert!(
                Instant::now() < deadline,
                "a copy older than attr_ttl is not served"
            );
        }
        // a subdirectory made or removed here: one link more or fewer, never below 2
        d.stamped_links(5, 3_500, 1);
        assert_eq!(d.get(5, Duration::MAX).unwrap().nlink, 3);
        d.stamped_links(5, 3_600, -1);
        d.stamped_links(5, 3_700, -1);
        let a = d.get(5, Duration::MAX).unwrap();
        assert_eq!((a.nlink, ms(a.mtime)), (2, 3_700));

        let off = DirAttrs::new(Duration::ZERO);
        off.fetched(&dir(8, 1_000), Instant::now());
        assert!(
            off.get(8, Duration::MAX).is_none(),
            "attr_ttl 0 keeps nothing"
        );
    }
}
