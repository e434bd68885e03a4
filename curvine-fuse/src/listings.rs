//! Directories whose every entry the mount knows, so a lookup of a name that is not
//! there is answered without asking the master. A create goes LOOKUP (the name is
//! absent), CREATE, FLUSH: for a directory known here that is two master calls, not
//! three.
//!
//! A directory becomes known when this mount makes it (it is empty then). This mount's
//! own creates, links, renames and removals keep it up to date; a change another client
//! makes in it (learnt from the master's change log) forgets it, and so does any failed
//! call that names it. All of it is forgotten while the mount does not follow the change
//! log, since the kernel then gets no word of other clients' changes either.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Names kept for all directories together; past it, everything is forgotten.
const MAX_NAMES: usize = 1 << 20;

#[derive(Default)]
struct Known {
    dirs: HashMap<u64, HashSet<String>>,
    names: usize,
}

#[derive(Default)]
pub(crate) struct Listings {
    known: Mutex<Known>,
    /// Bumped with every change learnt from the change log (see `mark`).
    heard: AtomicU64,
}

/// What `Listings::mark` takes: the changes heard of before a directory was made.
#[derive(Clone, Copy)]
pub(crate) struct Mark(u64);

impl Listings {
    fn lock(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Taken before a call that makes a directory. A change heard of between it and
    /// `made` may have been in that directory, so it is then not kept.
    pub(crate) fn mark(&self) -> Mark {
        Mark(self.heard.load(Ordering::Acquire))
    }

    /// This mount made directory `dir`: it is empty.
    pub(crate) fn made(&self, dir: u64, mark: Mark) {
        let mut k = self.lock();
        if self.heard.load(Ordering::Acquire) == mark.0 {
            k.dirs.insert(dir, HashSet::new());
        }
    }

    /// Whether `name` is surely not in directory `dir`.
    pub(crate) fn absent(&self, dir: u64, name: &str) -> bool {
        self.lock()
            .dirs
            .get(&dir)
            .is_some_and(|names| !names.contains(name))
    }

    /// This mount added `name` to `dir`.
    pub(crate) fn added(&self, dir: u64, name: &str) {
        let mut k = self.lock();
        let Some(names) = k.dirs.get_mut(&dir) else {
            return;
        };
        if names.insert(name.to_string()) {
            k.names += 1;
            if k.names > MAX_NAMES {
                *k = Known::default();
            }
        }
    }

    /// This mount removed `name` from `dir`.
    pub(crate) fn removed(&self, dir: u64, name: &str) {
        let mut k = self.lock();
        if k.dirs.get_mut(&dir).is_some_and(|n| n.remove(name)) {
            k.names -= 1;
        }
    }

    /// Forget directory `dir`: it changed in a way this mount does not know, or it is
    /// gone.
    pub(crate) fn forget(&self, dir: u64) {
        let mut k = self.lock();
        if let Some(names) = k.dirs.remove(&dir) {
            k.names -= names.len();
        }
    }

    /// Another client changed an entry of `dir`.
    pub(crate) fn changed_elsewhere(&self, dir: u64) {
        self.heard.fetch_add(1, Ordering::AcqRel);
        self.forget(dir);
    }

    /// Forget every directory.
    pub(crate) fn clear(&self) {
        self.heard.fetch_add(1, Ordering::AcqRel);
        *self.lock() = Known::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_made_here_knows_its_names() {
        let l = Listings::default();
        assert!(!l.absent(5, "a"), "an unknown directory answers nothing");
        l.made(5, l.mark());
        assert!(l.absent(5, "a"));
        l.added(5, "a");
        assert!(!l.absent(5, "a"));
        assert!(l.absent(5, "b"));
        l.removed(5, "a");
        assert!(l.absent(5, "a"));
        l.added(6, "x"); // not known: nothing kept
        assert!(!l.absent(6, "y"));
    }

    #[test]
    fn changes_elsewhere_forget_the_directory() {
        let l = Listings::default();
        l.made(5, l.mark());
        l.made(7, l.mark());
        l.changed_elsewhere(5);
        assert!(!l.absent(5, "a"));
        assert!(l.absent(7, "a"));
        l.clear();
        assert!(!l.absent(7, "a"));
    }

    #[test]
    fn a_change_heard_while_a_directory_is_made_keeps_it_unknown() {
        let l = Listings::default();
        let m = l.mark();
        l.changed_elsewhere(9); // perhaps a create inside the new directory
        l.made(5, m);
        assert!(!l.absent(5, "a"));
    }

    #[test]
    fn too_many_names_forget_everything() {
        let l = Listings::default();
        l.made(5, l.mark());
        for i in 0..=MAX_NAMES {
            l.added(5, &i.to_string());
        }
        assert!(!l.absent(5, "new"));
        assert_eq!(l.lock().names, 0);
    }
}
