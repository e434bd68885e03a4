//! Inodes held in memory in front of RocksDB.
//!
//! Resolving a path reads the root, then one edge and one inode per component. The
//! cache keeps what those reads found, in two parts with their own bounds:
//! - directories: few, and passed by every call below them. Their inodes and the edges
//!   naming them are kept up to `master.dir_cache_entries` of each.
//! - files and symlinks: the last component of most calls. Inodes that encode to at
//!   most [`MAX_FILE_REC`] bytes (a file of a few dozen blocks), and the edges naming
//!   them, are kept within `master.file_cache` bytes. A stat of a cached file then reads
//!   nothing from RocksDB.
//!
//! A full directory part starts over and refills from reads; a full file part drops an
//! eighth of its files at a time and then lets few new ones in (`Part::room_for`).
//! Inodes are kept encoded: a decoded one, with its strings, lists and maps, takes about
//! 200 bytes before its contents.
//!
//! Writes go through the store first and then through [`InodeCache::applied`], which
//! updates every key they touched. A reader fills the cache from what it read only if
//! no write was applied since it looked (a generation counter), so a value read before
//! a write can never be stored after it. A write fills only the directory part: files
//! enter on a read, so creating a million files does not churn the files kept.

use std::collections::HashMap;
use std::sync::Mutex;

use prost::Message;

use super::records::{op::Kind, InodeRec, JournalEntry};
use super::store::edge_key;
use curvine_common::proto::FileType;

/// The largest encoded file inode kept. Its block list grows with the file; a file of
/// many blocks is read rarely for each of them and would crowd out small ones.
pub const MAX_FILE_REC: usize = 512;

/// What one entry costs besides its own bytes, in the file part's budget: its slot in
/// the map's table (24 bytes plus a control byte, at a load of 44-88 %) and the
/// allocator's header and rounding of the boxed bytes.
const ENTRY_OVERHEAD: usize = 64;

/// What a cache lookup found.
pub enum Cached<T> {
    Hit(T),
    /// Not cached; pass the generation to the `fill_*` call after reading the store.
    Miss(u64),
}

pub struct InodeCache {
    /// Directories, and edges to them, each at most.
    dir_cap: usize,
    /// Bytes for files and the edges to them (`ENTRY_OVERHEAD` counted per entry).
    file_cap: usize,
    inner: Mutex<Inner>,
}

/// Inodes of one kind, and the edges naming them.
#[derive(Default)]
struct Part {
    inodes: HashMap<u64, Box<[u8]>>,
    /// `edge_key(parent, name)` -> child id. The directory part holds only edges to
    /// its directories; the file part holds edges to its files and, when a read found
    /// them, to anything but a cached directory. An inode dropped leaves its edges,
    /// which stay true until a write changes them.
    edges: HashMap<Box<[u8]>, u64>,
    /// What the entries cost, by `ENTRY_OVERHEAD` plus their bytes.
    bytes: usize,
    /// The class `shed` drops next.
    next_class: u8,
    /// The part had to shed to let an entry in, and is still near full (`room_for`).
    pressed: bool,
    /// Entries read while `pressed`, let in or not.
    refused: u32,
}

impl Part {
    fn clear(&mut self) {
        self.inodes.clear();
        self.edges.clear();
        self.bytes = 0;
        self.pressed = false;
    }

    fn put_inode(&mut self, id: u64, rec: Box<[u8]>) {
        self.bytes += rec.len() + ENTRY_OVERHEAD;
        if let Some(old) = self.inodes.insert(id, rec) {
            self.bytes -= old.len() + ENTRY_OVERHEAD;
        }
    }

    fn remove_inode(&mut self, id: u64) {
        if let Some(old) = self.inodes.remove(&id) {
            self.bytes -= old.len() + ENTRY_OVERHEAD;
        }
    }

    fn put_edge(&mut self, key: &[u8], child: u64) {
        if self.edges.insert(key.into(), child).is_none() {
            self.bytes += key.len() + ENTRY_OVERHEAD;
        }
    }

    fn remove_edge(&mut self, key: &[u8]) {
        if self.edges.remove(key).is_some() {
            self.bytes -= key.len() + ENTRY_OVERHEAD;
        }
    }

    /// Whether an entry of `len` bytes may be added within `cap` bytes. A part it would
    /// take past `cap` drops an eighth of its entries (those whose inode ids fall in the
    /// next of eight classes) until it fits. From then on, until the part is down to
    /// three quarters of `cap`, only one `read` entry in [`ADMIT_WHEN_FULL`] is let in.
    /// Files read in a cycle longer than the cache holds (a million stat'ed in turn)
    /// then mostly keep their place and hit in proportion, where letting each in would
    /// drop each before it came round, at the cost of a copy, an insert and a shed per
    /// miss; and a file read often still gets in.
    fn room_for(&mut self, len: usize, cap: usize, read: bool) -> bool {
        let cost = len + ENTRY_OVERHEAD;
        if cost > cap {
            return false;
        }
        if self.pressed && self.bytes + cost <= cap / 4 * 3 {
            self.pressed = false;
        }
        if read && self.pressed {
            self.refused = self.refused.wrapping_add(1);
            if !self.refused.is_multiple_of(ADMIT_WHEN_FULL) {
                return false;
            }
        }
        if self.bytes + cost <= cap {
            return true;
        }
        self.pressed = true;
        for _ in 0..CLASSES {
            self.shed();
            if self.bytes + cost <= cap {
                return true;
            }
        }
        self.clear();
        true
    }

    /// Drop the entries of the next class.
    fn shed(&mut self) {
        let class = self.next_class;
        self.next_class = (class + 1) % CLASSES;
        let mut freed = 0;
        self.inodes.retain(|id, v| {
            let keep = class_of(*id) != class;
            if !keep {
                freed += v.len() + ENTRY_OVERHEAD;
            }
            keep
        });
        self.edges.retain(|k, child| {
            let keep = class_of(*child) != class;
            if !keep {
                freed += k.len() + ENTRY_OVERHEAD;
            }
            keep
        });
        self.bytes -= freed;
    }
}

/// Eviction classes of the file part.
const CLASSES: u8 = 8;

/// One read entry in this many is let into a full file part (`Part::room_for`).
const ADMIT_WHEN_FULL: u32 = 64;

/// An inode's eviction class: the top bits of its id scrambled, so consecutive ids
/// (files made one after another) spread over all of them.
fn class_of(id: u64) -> u8 {
    (id.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 61) as u8
}

#[derive(Default)]
struct Inner {
    /// Bumped by every applied write.
    gen: u64,
    dirs: Part,
    files: Part,
}

fn encode(i: &InodeRec) -> Box<[u8]> {
    i.encode_to_vec().into_boxed_slice()
}

fn is_dir(i: &InodeRec) -> bool {
    i.file_type == FileType::Dir as i32
}

impl Inner {
    /// Room for one more directory or edge to one: a full part starts over.
    fn dir_room(&mut self, cap: usize) {
        if self.dirs.inodes.len() >= cap || self.dirs.edges.len() >= cap {
            self.dirs.clear();
        }
    }

    /// Keep the file inode `rec` (encoded), replacing any copy; `read`: found by a read,
    /// not written.
    fn keep_file(&mut self, id: u64, rec: &[u8], read: bool, cap: usize) {
        self.files.remove_inode(id);
        if rec.len() <= MAX_FILE_REC && self.files.room_for(rec.len(), cap, read) {
            self.files.put_inode(id, rec.into());
        }
    }

    /// Keep the edge `key -> child`: with the directories if `child` is a cached one,
    /// else with the files if `child` is a cached file or `read` (the walk that read
    /// the edge reads the inode next, so both are kept on a first visit).
    fn keep_edge(&mut self, key: &[u8], child: u64, read: bool, caps: (usize, usize)) {
        let (dir_cap, file_cap) = caps;
        if self.dirs.inodes.contains_key(&child) {
            if self.dirs.edges.len() >= dir_cap {
                self.dir_room(dir_cap);
                return;
            }
            self.dirs.put_edge(key, child);
        } else if file_cap > 0
            && (read || self.files.inodes.contains_key(&child))
            && self.files.room_for(key.len(), file_cap, read)
        {
            self.files.put_edge(key, child);
        }
    }
}

impl InodeCache {
    /// A cache of at most `dir_cap` directories and `file_cap` bytes of files; 0 turns
    /// either part off.
    pub fn new(dir_cap: usize, file_cap: usize) -> InodeCache {
        InodeCache {
            dir_cap,
            file_cap,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn inode(&self, id: u64) -> Cached<InodeRec> {
        let g = self.lock();
        let rec = g.dirs.inodes.get(&id).or_else(|| g.files.inodes.get(&id));
        match rec.map(|b| InodeRec::decode(&b[..])) {
            Some(Ok(i)) => Cached::Hit(i),
            // what `encode` wrote always decodes; were it not to, the store answers
            _ => Cached::Miss(g.gen),
        }
    }

    pub fn child(&self, key: &[u8]) -> Cached<u64> {
        let g = self.lock();
        match g.dirs.edges.get(key).or_else(|| g.files.edges.get(key)) {
            Some(&c) => Cached::Hit(c),
            None => Cached::Miss(g.gen),
        }
    }

    /// Keep `rec`, read from the store at generation `gen` as `raw`.
    pub fn fill_inode(&self, gen: u64, rec: &InodeRec, raw: &[u8]) {
        let dir = is_dir(rec);
        if (dir && self.dir_cap == 0) || (!dir && (self.file_cap == 0 || raw.len() > MAX_FILE_REC))
        {
            return;
        }
        let mut g = self.lock();
        if g.gen != gen {
            return;
        }
        if dir {
            if !g.dirs.inodes.contains_key(&rec.id) {
                g.dir_room(self.dir_cap);
                g.dirs.put_inode(rec.id, raw.into());
            }
        } else if !g.files.inodes.contains_key(&rec.id) {
            g.keep_file(rec.id, raw, true, self.file_cap);
        }
    }

    /// Keep the edge `key -> child`, read at generation `gen`.
    pub fn fill_child(&self, gen: u64, key: &[u8], child: u64) {
        let mut g = self.lock();
        if g.gen == gen {
            g.keep_edge(key, child, true, (self.dir_cap, self.file_cap));
        }
    }

    /// Bring the cache up to date with `entry`, just written to the store.
    pub fn applied(&self, entry: &JournalEntry) {
        let mut g = self.lock();
        g.gen += 1;
        for op in &entry.ops {
            match &op.kind {
                Some(Kind::PutInode(i)) if is_dir(i) => {
                    g.files.remove_inode(i.id);
                    if self.dir_cap == 0 {
                        continue;
                    }
                    if !g.dirs.inodes.contains_key(&i.id) {
                        g.dir_room(self.dir_cap);
                    }
                    g.dirs.put_inode(i.id, encode(i));
                }
                Some(Kind::PutInode(i)) => {
                    g.dirs.remove_inode(i.id);
                    if g.files.inodes.contains_key(&i.id) {
                        g.keep_file(i.id, &encode(i), false, self.file_cap);
                    }
                }
                Some(Kind::DelInode(id)) => {
                    g.dirs.remove_inode(*id);
                    g.files.remove_inode(*id);
                }
                Some(Kind::PutEdge(e)) => {
                    let k = edge_key(e.parent, &e.name);
                    g.dirs.remove_edge(&k);
                    g.files.remove_edge(&k);
                    g.keep_edge(&k, e.child, false, (self.dir_cap, self.file_cap));
                }
                Some(Kind::DelEdge(e)) => {
                    let k = edge_key(e.parent, &e.name);
                    g.dirs.remove_edge(&k);
                    g.files.remove_edge(&k);
                }
                _ => {}
            }
        }
    }

    /// Every cached entry, for checks against the store: (inodes, edges).
    #[cfg(test)]
    pub fn snapshot(&self) -> (Vec<InodeRec>, Vec<(Vec<u8>, u64)>) {
        let g = self.lock();
        let parts = [&g.dirs, &g.files];
        (
            parts
                .iter()
                .flat_map(|p| p.inodes.values())
                .map(|b| InodeRec::decode(&b[..]).expect("cached inode decodes"))
                .collect(),
            parts
                .iter()
                .flat_map(|p| p.edges.iter())
                .map(|(k, v)| (k.to_vec(), *v))
                .collect(),
        )
    }

    /// The bytes the file part counts, and what its entries do take by that count.
    #[cfg(test)]
    pub fn file_bytes(&self) -> (usize, usize) {
        let g = self.lock();
        let f = &g.files;
        let inodes: usize = f.inodes.values().map(|v| v.len() + ENTRY_OVERHEAD).sum();
        let edges: usize = f.edges.keys().map(|k| k.len() + ENTRY_OVERHEAD).sum();
        (f.bytes, inodes + edges)
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

    fn file(id: u64, blocks: usize) -> InodeRec {
        InodeRec {
            id,
            file_type: FileType::File as i32,
            blocks: (0..blocks as u64).map(|b| (id << 20) | b).collect(),
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

    fn put_inode(i: InodeRec) -> JournalEntry {
        let mut e = JournalEntry::default();
        e.push(Kind::PutInode(i));
        e
    }

    /// Look `rec` up, and keep it as a reader that missed would.
    fn read(c: &InodeCache, rec: &InodeRec) {
        if let Cached::Miss(gen) = c.inode(rec.id) {
            c.fill_inode(gen, rec, &rec.encode_to_vec());
        }
    }

    fn read_edge(c: &InodeCache, key: &[u8], child: u64) {
        if let Cached::Miss(gen) = c.child(key) {
            c.fill_child(gen, key, child);
        }
    }

    #[test]
    fn a_read_from_before_a_write_is_not_kept() {
        let c = InodeCache::new(16, 1 << 20);
        for rec in [dir(5), file(6, 1)] {
            let Cached::Miss(gen) = c.inode(rec.id) else {
                panic!("empty cache hit")
            };
            c.applied(&JournalEntry::default());
            c.fill_inode(gen, &rec, &rec.encode_to_vec());
            assert!(
                matches!(c.inode(rec.id), Cached::Miss(_)),
                "stale read kept"
            );
            read(&c, &rec);
            assert!(matches!(c.inode(rec.id), Cached::Hit(r) if r == rec));
        }
    }

    #[test]
    fn edges_are_kept_by_what_they_name() {
        // directories only: an edge read is kept once its directory is
        let c = InodeCache::new(16, 0);
        let k = edge_key(1, "a");
        read_edge(&c, &k, 7);
        assert!(matches!(c.child(&k), Cached::Miss(_)), "edge kept");
        c.applied(&put_inode(dir(7)));
        c.applied(&put_edge(1, "a", 7));
        assert!(matches!(c.child(&k), Cached::Hit(7)));
        // The name now points at something else: the old edge goes.
        c.applied(&put_edge(1, "a", 9));
        assert!(matches!(c.child(&k), Cached::Miss(_)));

        // with files: an edge read is kept before its file is, one written only to a
        // cached file
        let c = InodeCache::new(16, 1 << 20);
        read_edge(&c, &k, 9);
        assert!(matches!(c.child(&k), Cached::Hit(9)));
        c.applied(&put_edge(1, "a", 10));
        assert!(
            matches!(c.child(&k), Cached::Miss(_)),
            "edge to an uncached file"
        );
        read(&c, &file(10, 1));
        c.applied(&put_edge(1, "a", 10));
        assert!(matches!(c.child(&k), Cached::Hit(10)));
        let mut del = JournalEntry::default();
        del.push(Kind::DelEdge(EdgeRec {
            parent: 1,
            name: "a".into(),
            child: 10,
        }));
        c.applied(&del);
        assert!(matches!(c.child(&k), Cached::Miss(_)));
    }

    #[test]
    fn writes_update_cached_files_and_add_none() {
        let c = InodeCache::new(16, 1 << 20);
        // a created file is not cached by its write
        c.applied(&put_inode(file(3, 0)));
        assert!(matches!(c.inode(3), Cached::Miss(_)));
        read(&c, &file(3, 0));
        // a write to it replaces the copy
        c.applied(&put_inode(file(3, 2)));
        assert!(matches!(c.inode(3), Cached::Hit(r) if r.blocks.len() == 2));
        // one grown past MAX_FILE_REC is dropped
        c.applied(&put_inode(file(3, 200)));
        assert!(matches!(c.inode(3), Cached::Miss(_)));
        read(&c, &file(3, 200));
        assert!(matches!(c.inode(3), Cached::Miss(_)), "big file kept");
        // an id reused as a directory leaves the file part
        read(&c, &file(4, 0));
        c.applied(&put_inode(dir(4)));
        assert!(matches!(c.inode(4), Cached::Hit(r) if is_dir(&r)));
        let (inodes, _) = c.snapshot();
        assert_eq!(inodes.len(), 1);
    }

    #[test]
    fn the_file_part_stays_within_its_bytes() {
        let cap = 64 << 10;
        let c = InodeCache::new(16, cap);
        for id in 1..5000u64 {
            read(&c, &file(id, (id % 7) as usize));
            let k = edge_key(1, &format!("f{id}"));
            read_edge(&c, &k, id);
            if id % 3 == 0 {
                c.applied(&put_inode(file(id, 20)));
            }
            if id % 5 == 0 {
                c.applied(&put_edge(1, &format!("f{id}"), id + 1));
            }
            let (counted, actual) = c.file_bytes();
            assert_eq!(counted, actual, "bytes miscounted at {id}");
            assert!(counted <= cap, "{counted} bytes at {id}");
        }
        let (inodes, edges) = c.snapshot();
        assert!(inodes.len() > 100 && !edges.is_empty(), "{}", inodes.len());
    }

    #[test]
    fn a_full_file_part_keeps_most_of_what_it_holds() {
        let c = InodeCache::new(16, 100 * (file(1, 0).encoded_len() + ENTRY_OVERHEAD));
        let cached = |ids: std::ops::Range<u64>| {
            ids.filter(|id| matches!(c.inode(*id), Cached::Hit(_)))
                .count()
        };
        for id in 1..=100 {
            read(&c, &file(id, 0));
        }
        assert_eq!(cached(1..101), 100);
        // a scan of ten times as many files, each read once
        for id in 1000..2000 {
            read(&c, &file(id, 0));
        }
        let kept = cached(1..101);
        assert!(kept >= 50, "{kept} of the first 100 left");
        assert!(cached(1000..2000) < 50);
        // a file read over and over gets in
        for _ in 0..ADMIT_WHEN_FULL {
            read(&c, &file(5000, 0));
        }
        assert!(matches!(c.inode(5000), Cached::Hit(_)));
        // with most of it gone, every read gets in again
        for id in 1..2000 {
            let mut e = JournalEntry::default();
            e.push(Kind::DelInode(id));
            c.applied(&e);
        }
        read(&c, &file(6000, 0));
        assert!(matches!(c.inode(6000), Cached::Hit(_)));
    }

    #[test]
    fn a_full_cache_starts_over_and_zero_turns_it_off() {
        let c = InodeCache::new(2, 1 << 20);
        for id in 1..=3 {
            read(&c, &dir(id));
        }
        let (dirs, _) = c.snapshot();
        assert_eq!(dirs.iter().map(|d| d.id).collect::<Vec<_>>(), vec![3]);
        let off = InodeCache::new(0, 0);
        off.applied(&put_inode(dir(1)));
        read(&off, &file(2, 0));
        assert!(matches!(off.inode(1), Cached::Miss(_)));
        assert!(matches!(off.inode(2), Cached::Miss(_)));
    }
}
