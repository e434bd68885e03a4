//! Directories held in memory in front of RocksDB.
//!
//! Every path resolution reads the root, then one edge and one inode per component. The
//! directories on the way are few and read by every call, so their inodes, and the
//! edges that name them, are kept here; the last component (usually a file) still comes
//! from RocksDB. Files are never cached, so memory is bounded by the directory count,
//! capped at `master.dir_cache_entries`.
//!
//! Writes go through the store first and then through [`DirCache::applied`], which
//! updates every key they touched. A reader fills the cache from what it read only if
//! no write was applied since it looked (a generation counter), so a value read before
//! a write can never be stored after it.

use std::collections::HashMap;
use std::sync::Mutex;

use prost::Message;

use super::records::{op::Kind, InodeRec, JournalEntry};
use super::store::edge_key;
use curvine_common::proto::FileType;

/// What a cache lookup found.
pub enum Cached<T> {
    Hit(T),
    /// Not cached; pass the generation to the `fill_*` call after reading the store.
    Miss(u64),
}

pub struct DirCache {
    cap: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Bumped by every applied write.
    gen: u64,
    /// Directory inodes, encoded: a third of the memory of decoded ones, whose
    /// strings, lists and maps make a record of about 200 bytes before its contents.
    dirs: HashMap<u64, Box<[u8]>>,
    /// `edge_key(parent, name)` -> directory id, only for directories in `dirs`.
    edges: HashMap<Box<[u8]>, u64>,
}

fn encode(i: &InodeRec) -> Box<[u8]> {
    i.encode_to_vec().into_boxed_slice()
}

fn is_dir(i: &InodeRec) -> bool {
    i.file_type == FileType::Dir as i32
}

impl Inner {
    /// Room for one more entry: a full cache starts over (it refills from reads).
    fn make_room(&mut self, cap: usize) {
        if self.dirs.len() >= cap || self.edges.len() >= cap {
            self.dirs.clear();
            self.edges.clear();
        }
    }
}

impl DirCache {
    /// A cache of at most `cap` directories; 0 turns it off.
    pub fn new(cap: usize) -> DirCache {
        DirCache {
            cap,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn inode(&self, id: u64) -> Cached<InodeRec> {
        let g = self.lock();
        match g.dirs.get(&id).map(|b| InodeRec::decode(&b[..])) {
            Some(Ok(i)) => Cached::Hit(i),
            // what `encode` wrote always decodes; were it not to, the store answers
            _ => Cached::Miss(g.gen),
        }
    }

    pub fn child(&self, key: &[u8]) -> Cached<u64> {
        let g = self.lock();
        match g.edges.get(key) {
            Some(&c) => Cached::Hit(c),
            None => Cached::Miss(g.gen),
        }
    }

    /// Keep `rec`, read from the store at generation `gen`, if it is a directory.
    pub fn fill_inode(&self, gen: u64, rec: &InodeRec) {
        if self.cap == 0 || !is_dir(rec) {
            return;
        }
        let mut g = self.lock();
        if g.gen == gen && !g.dirs.contains_key(&rec.id) {
            g.make_room(self.cap);
            g.dirs.insert(rec.id, encode(rec));
        }
    }

    /// Keep the edge `key -> child`, read at generation `gen`, if `child` is a cached
    /// directory.
    pub fn fill_child(&self, gen: u64, key: &[u8], child: u64) {
        if self.cap == 0 {
            return;
        }
        let mut g = self.lock();
        if g.gen == gen && g.dirs.contains_key(&child) {
            if g.edges.len() >= self.cap {
                g.make_room(self.cap);
                return;
            }
            g.edges.insert(key.into(), child);
        }
    }

    /// Bring the cache up to date with `entry`, just written to the store.
    pub fn applied(&self, entry: &JournalEntry) {
        let mut g = self.lock();
        g.gen += 1;
        if self.cap == 0 {
            return;
        }
        for op in &entry.ops {
            match &op.kind {
                Some(Kind::PutInode(i)) if is_dir(i) => {
                    if !g.dirs.contains_key(&i.id) {
                        g.make_room(self.cap);
                    }
                    g.dirs.insert(i.id, encode(i));
                }
                Some(Kind::PutInode(i)) => {
                    g.dirs.remove(&i.id);
                }
                Some(Kind::DelInode(id)) => {
                    g.dirs.remove(id);
                }
                Some(Kind::PutEdge(e)) => {
                    let k = edge_key(e.parent, &e.name);
                    if g.dirs.contains_key(&e.child) {
                        g.edges.insert(k.into(), e.child);
                    } else {
                        g.edges.remove(&k[..]);
                    }
                }
                Some(Kind::DelEdge(e)) => {
                    g.edges.remove(&edge_key(e.parent, &e.name)[..]);
                }
                _ => {}
            }
        }
    }

    /// Every cached entry, for checks against the store: (inodes, edges).
    #[cfg(test)]
    pub fn snapshot(&self) -> (Vec<InodeRec>, Vec<(Vec<u8>, u64)>) {
        let g = self.lock();
        (
            g.dirs
                .values()
                .map(|b| InodeRec::decode(&b[..]).expect("cached inode decodes"))
                .collect(),
            g.edges.iter().map(|(k, v)| (k.to_vec(), *v)).collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::records::EdgeRec;

    fn dir(id: u64) -> InodeRec {
        InodeRec {
            id,
            file_type: FileType::Dir as i32,
            ..Default::default()
        }
    }

    fn put_edge(parent: u64, name: &str, child: u64) -> JournalEntry {
        let mut e = JournalEntry::default();
        e.push(Kind::PutEdge(EdgeRec {
            parent,
            name: name.into(),
            child,
        }));
        e
    }

    #[test]
    fn a_read_from_before_a_write_is_not_kept() {
        let c = DirCache::new(16);
        let Cached::Miss(gen) = c.inode(5) else {
            panic!("empty cache hit")
        };
        c.applied(&JournalEntry::default());
        c.fill_inode(gen, &dir(5));
        assert!(matches!(c.inode(5), Cached::Miss(_)), "stale read was kept");
        let Cached::Miss(gen) = c.inode(5) else {
            panic!()
        };
        c.fill_inode(gen, &dir(5));
        assert!(matches!(c.inode(5), Cached::Hit(_)));
    }

    #[test]
    fn only_edges_to_cached_directories_are_kept() {
        let c = DirCache::new(16);
        let k = edge_key(1, "a");
        let Cached::Miss(gen) = c.child(&k) else {
            panic!()
        };
        c.fill_child(gen, &k, 7);
        assert!(
            matches!(c.child(&k), Cached::Miss(_)),
            "edge to a file kept"
        );
        let mut e = JournalEntry::default();
        e.push(Kind::PutInode(dir(7)));
        c.applied(&e);
        c.applied(&put_edge(1, "a", 7));
        assert!(matches!(c.child(&k), Cached::Hit(7)));
        // The name now points at something else: the old edge goes.
        c.applied(&put_edge(1, "a", 9));
        assert!(matches!(c.child(&k), Cached::Miss(_)));
    }

    #[test]
    fn a_full_cache_starts_over_and_zero_turns_it_off() {
        let c = DirCache::new(2);
        for id in 1..=3 {
            let Cached::Miss(gen) = c.inode(id) else {
                panic!()
            };
            c.fill_inode(gen, &dir(id));
        }
        let (dirs, _) = c.snapshot();
        assert_eq!(dirs.iter().map(|d| d.id).collect::<Vec<_>>(), vec![3]);
        let off = DirCache::new(0);
        let mut e = JournalEntry::default();
        e.push(Kind::PutInode(dir(1)));
        off.applied(&e);
        assert!(matches!(off.inode(1), Cached::Miss(_)));
    }
}
