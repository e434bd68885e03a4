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
//! A full directory part starts over and refills from reads. The file part packs its
//! records into chunks and counts what its chunks and tables take, so the memory it
//! holds is what it counts, however often its files come and go. Full, it compacts what
//! was replaced or dropped, or drops an eighth of its files at a time and then lets few
//! new ones in (`Files::room_for`).
//! Inodes are kept encoded: a decoded one, with its strings, lists and maps, takes about
//! 200 bytes before its contents.
//!
//! Writes go through the store first and then through [`InodeCache::applied`], which
//! updates every key they touched. A reader fills the cache from what it read only if
//! no write was applied since it looked (a generation counter), so a value read before
//! a write can never be stored after it. A write fills only the directory part: files
//! enter on a read, so creating a million files does not churn the files kept.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;

use hashbrown::HashTable;
use prost::Message;

use super::records::{op::Kind, InodeRec, JournalEntry};
use super::store::edge_key;
use curvine_common::proto::FileType;

/// The largest encoded file inode kept. Its block list grows with the file; a file of
/// many blocks is read rarely for each of them and would crowd out small ones.
pub const MAX_FILE_REC: usize = 512;

/// What a cache lookup found.
pub enum Cached<T> {
    Hit(T),
    /// Not cached; pass the generation to the `fill_*` call after reading the store.
    Miss(u64),
}

pub struct InodeCache {
    /// Directories, and edges to them, each at most.
    dir_cap: usize,
    /// Bytes for files and the edges to them (`Files::held`).
    file_cap: usize,
    inner: Mutex<Inner>,
}

/// Directory inodes and the edges naming them.
#[derive(Default)]
struct Dirs {
    inodes: HashMap<u64, Box<[u8]>>,
    /// `edge_key(parent, name)` -> child id, for cached directories only.
    edges: HashMap<Box<[u8]>, u64>,
}

impl Dirs {
    fn clear(&mut self) {
        self.inodes.clear();
        self.edges.clear();
    }
}

/// Eviction classes of the file part.
const CLASSES: usize = 8;

/// One read entry in this many is let into a full file part (`Files::room_for`).
const ADMIT_WHEN_FULL: u32 = 64;

/// What one slot of the file part's tables is counted at while they are neither
/// grown nor rebuilt: the slot and its control byte, at a load of two thirds.
const SLOT_COST: usize = (std::mem::size_of::<Slot>() + 1) * 3 / 2;

/// The file part's chunks hold `file_cache / CHUNKS_PER_CAP` bytes each, within these.
/// From 8 MB, a chunk is at the master's mmap threshold (`main.rs`, 128 KiB): it is
/// mapped on its own and given back to the kernel when dropped, and none of the heap's
/// free space is left behind between other allocations.
const CHUNKS_PER_CAP: usize = 64;
const MIN_CHUNK: usize = 1 << 10;
const MAX_CHUNK: usize = 1 << 18;

/// An inode's eviction class: the top bits of its id scrambled, so consecutive ids
/// (files made one after another) spread over all of them.
fn class_of(id: u64) -> usize {
    (id.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 61) as usize
}

/// A record of the file part: an inode (`id` its own) or the key of an edge naming
/// `id`, in chunk `chunk` of the arena of `class_of(id)`.
#[derive(Clone, Copy)]
struct Slot {
    id: u64,
    off: u32,
    chunk: u16,
    len: u16,
}

/// The records of one class, appended to chunks of equal size. A record replaced or
/// dropped stays where it is until its class is compacted or shed.
#[derive(Default)]
struct Arena {
    chunks: Vec<Vec<u8>>,
    /// Bytes of the records still in a table.
    live: usize,
}

impl Arena {
    fn get(&self, s: &Slot) -> &[u8] {
        let off = s.off as usize;
        &self.chunks[s.chunk as usize][off..off + s.len as usize]
    }

    /// Whether `len` more bytes fit in the last chunk.
    fn fits(&self, len: usize, chunk: usize) -> bool {
        self.chunks.last().is_some_and(|c| c.len() + len <= chunk)
    }

    /// Whether a record of `len` bytes can be added at all: a slot numbers its chunk
    /// in 16 bits.
    fn can_take(&self, len: usize, chunk: usize) -> bool {
        self.fits(len, chunk) || self.chunks.len() < u16::MAX as usize
    }

    /// Append `rec` (at most `chunk` bytes, `can_take`) and give its slot for `id`.
    fn push(&mut self, id: u64, rec: &[u8], chunk: usize) -> Slot {
        if !self.fits(rec.len(), chunk) {
            self.chunks.push(Vec::with_capacity(chunk));
        }
        let n = self.chunks.len() - 1;
        let c = &mut self.chunks[n];
        let off = c.len();
        c.extend_from_slice(rec);
        self.live += rec.len();
        Slot {
            id,
            off: off as u32,
            chunk: n as u16,
            len: rec.len() as u16,
        }
    }

    /// Bytes of its chunks that no record uses (dropped, replaced, or not yet filled).
    fn waste(&self, chunk: usize) -> usize {
        self.chunks.len() * chunk - self.live
    }
}

/// File and symlink inodes, and the edges naming them, within a number of bytes.
struct Files {
    /// Bytes per chunk; larger records are not kept.
    chunk: usize,
    arenas: [Arena; CLASSES],
    inodes: HashTable<Slot>,
    /// Edges to anything but a cached directory, found by their key's bytes: to files
    /// cached, and to files a read found (the walk that read the edge reads the inode
    /// next). An inode dropped leaves its edges, which stay true until a write changes
    /// them.
    edges: HashTable<Slot>,
    hasher: RandomState,
    /// The class `shed` drops next.
    next_class: usize,
    /// The part had to shed to let an entry in, and is still near as full as it was
    /// then: `live` at that time (`room_for`).
    pressed: Option<usize>,
    /// Entries read while `pressed`, let in or not.
    refused: u32,
}

impl Files {
    fn new(cap: usize) -> Files {
        Files {
            chunk: (cap / CHUNKS_PER_CAP).clamp(MIN_CHUNK, MAX_CHUNK),
            arenas: Default::default(),
            inodes: HashTable::new(),
            edges: HashTable::new(),
            hasher: RandomState::new(),
            next_class: 0,
            pressed: None,
            refused: 0,
        }
    }

    fn clear(&mut self) {
        self.arenas = Default::default();
        self.inodes = HashTable::new();
        self.edges = HashTable::new();
        self.pressed = None;
    }

    fn hash_id(&self, id: u64) -> u64 {
        self.hasher.hash_one(id)
    }

    fn hash_key(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    fn inode(&self, id: u64) -> Option<&[u8]> {
        let s = self.inodes.find(self.hash_id(id), |s| s.id == id)?;
        Some(self.arenas[class_of(id)].get(s))
    }

    fn has_inode(&self, id: u64) -> bool {
        self.inode(id).is_some()
    }

    fn child(&self, key: &[u8]) -> Option<u64> {
        let arenas = &self.arenas;
        self.edges
            .find(self.hash_key(key), |s| arenas[class_of(s.id)].get(s) == key)
            .map(|s| s.id)
    }

    fn forget(&mut self, s: Slot) {
        self.arenas[class_of(s.id)].live -= s.len as usize;
    }

    /// What the part holds: its chunks and its tables' buckets.
    fn held(&self) -> usize {
        let chunks: usize = self.arenas.iter().map(|a| a.chunks.len()).sum();
        chunks * self.chunk + self.inodes.allocation_size() + self.edges.allocation_size()
    }

    fn remove_inode(&mut self, id: u64) {
        let h = self.hash_id(id);
        if let Ok(e) = self.inodes.find_entry(h, |s| s.id == id) {
            let (s, _) = e.remove();
            self.forget(s);
        }
    }

    fn remove_edge(&mut self, key: &[u8]) {
        let h = self.hash_key(key);
        let arenas = &self.arenas;
        if let Ok(e) = self
            .edges
            .find_entry(h, |s| arenas[class_of(s.id)].get(s) == key)
        {
            let (s, _) = e.remove();
            self.forget(s);
        }
    }

    /// Keep inode `rec` of `id`, replacing any copy, if there is room (`room_for`).
    fn put_inode(&mut self, id: u64, rec: &[u8], read: bool, cap: usize) {
        self.remove_inode(id);
        if !self.room_for(id, rec.len(), false, cap, read) {
            return;
        }
        let s = self.arenas[class_of(id)].push(id, rec, self.chunk);
        let h = self.hash_id(id);
        let hasher = &self.hasher;
        self.inodes.insert_unique(h, s, |s| hasher.hash_one(s.id));
    }

    /// Keep the edge `key -> child`, replacing any, if there is room (`room_for`).
    fn put_edge(&mut self, key: &[u8], child: u64, read: bool, cap: usize) {
        self.remove_edge(key);
        if !self.room_for(child, key.len(), true, cap, read) {
            return;
        }
        let s = self.arenas[class_of(child)].push(child, key, self.chunk);
        let h = self.hash_key(key);
        let Files {
            edges,
            arenas,
            hasher,
            ..
        } = self;
        edges.insert_unique(h, s, |s| hasher.hash_one(arenas[class_of(s.id)].get(s)));
    }

    /// What adding a record of `len` bytes for `id` (an edge's key or an inode) would
    /// add to what the part holds: a chunk, if the last of its class is full, and a
    /// table's growth, if the table is.
    fn cost(&self, id: u64, len: usize, edge: bool) -> usize {
        let mut cost = 0;
        if !self.arenas[class_of(id)].fits(len, self.chunk) {
            cost += self.chunk;
        }
        // hashbrown rehashes a table once its free buckets are used up (`capacity`
        // counts those left; a removal may leave a tombstone that is not one): in
        // place if it is at most half full, else into twice the buckets. Should it
        // ever grow one where this did not count it, `held` shows it and the next
        // insert makes room.
        let t = if edge { &self.edges } else { &self.inodes };
        if t.len() >= t.capacity() && t.len() + 1 > full(t) / 2 {
            cost += t.allocation_size().max(64);
        }
        cost
    }

    /// Whether a record of `len` bytes for `id` may be added within `cap` bytes.
    /// A part it would take past `cap` first compacts the classes of which half is
    /// waste and rebuilds its tables without the tombstones of removed slots (`rebuild`).
    /// If that is not enough, it drops an eighth of its entries (those whose
    /// ids fall in the next of the classes) until the record fits. From then on, until
    /// its entries take three quarters of what they took then, only one `read` entry in
    /// [`ADMIT_WHEN_FULL`] is let in. Files read in a cycle longer than the cache holds
    /// (a million stat'ed in turn) then mostly keep their place and hit in proportion,
    /// where letting each in would drop each before it came round, at the cost of a
    /// copy, an insert and a shed per miss; and a file read often still gets in.
    fn room_for(&mut self, id: u64, len: usize, edge: bool, cap: usize, read: bool) -> bool {
        if len > self.chunk
            || len > u16::MAX as usize
            || CLASSES * self.chunk > cap
            || !self.arenas[class_of(id)].can_take(len, self.chunk)
        {
            return false;
        }
        if let Some(at) = self.pressed {
            if self.live() + len + SLOT_COST <= at / 4 * 3 {
                self.pressed = None;
            }
        }
        if read && self.pressed.is_some() {
            self.refused = self.refused.wrapping_add(1);
            if !self.refused.is_multiple_of(ADMIT_WHEN_FULL) {
                return false;
            }
        }
        if self.held() + self.cost(id, len, edge) <= cap {
            return true;
        }
        for class in 0..CLASSES {
            let a = &self.arenas[class];
            if a.waste(self.chunk) * 2 >= a.chunks.len() * self.chunk && a.chunks.len() > 1 {
                self.compact(class);
                if self.held() + self.cost(id, len, edge) <= cap {
                    return true;
                }
            }
        }
        self.rebuild();
        if self.held() + self.cost(id, len, edge) <= cap {
            return true;
        }
        self.press();
        for _ in 0..CLASSES {
            self.shed();
            if self.held() + self.cost(id, len, edge) <= cap {
                return true;
            }
        }
        self.clear();
        true
    }

    fn press(&mut self) {
        if self.pressed.is_none() {
            self.pressed = Some(self.live());
        }
    }

    /// What the records and their slots take, without the chunks' waste.
    fn live(&self) -> usize {
        let records: usize = self.arenas.iter().map(|a| a.live).sum();
        records + (self.inodes.len() + self.edges.len()) * SLOT_COST
    }

    /// Rebuild the tables that removals left with few free buckets, or half empty:
    /// without tombstones, and smaller where they can be.
    fn rebuild(&mut self) {
        let Files {
            inodes,
            edges,
            arenas,
            hasher,
            ..
        } = self;
        rebuild(inodes, |s| hasher.hash_one(s.id));
        rebuild(edges, |s| hasher.hash_one(arenas[class_of(s.id)].get(s)));
    }

    /// Copy the records of `class` still in a table into fresh chunks.
    fn compact(&mut self, class: usize) {
        let chunk = self.chunk;
        let old = std::mem::take(&mut self.arenas[class]);
        let mut fresh = Arena::default();
        for s in self.inodes.iter_mut().chain(self.edges.iter_mut()) {
            if class_of(s.id) == class {
                *s = fresh.push(s.id, old.get(s), chunk);
            }
        }
        self.arenas[class] = fresh;
    }

    /// Drop the entries of the next class, and halve a table left half empty.
    fn shed(&mut self) {
        let class = self.next_class;
        self.next_class = (class + 1) % CLASSES;
        self.inodes.retain(|s| class_of(s.id) != class);
        self.edges.retain(|s| class_of(s.id) != class);
        self.arenas[class] = Arena::default();
        self.rebuild();
    }
}

/// How many slots `t` holds before it grows: 7 in 8 of its buckets.
fn full(t: &HashTable<Slot>) -> usize {
    t.allocation_size() / (std::mem::size_of::<Slot>() + 1) / 8 * 7
}

/// Rebuild `t` if removals left tombstones in an eighth of its buckets, or it is at
/// most half full: without the tombstones, and in fewer buckets where it fits.
fn rebuild(t: &mut HashTable<Slot>, hash: impl Fn(&Slot) -> u64) {
    let full = full(t);
    let tombstones = full.saturating_sub(t.capacity());
    if full == 0 || (tombstones < full / 8 && t.len() > full / 2) {
        return;
    }
    let mut fresh = HashTable::with_capacity(t.len());
    for s in t.drain() {
        fresh.insert_unique(hash(&s), s, &hash);
    }
    *t = fresh;
}

#[derive(Default)]
struct Inner {
    /// Bumped by every applied write.
    gen: u64,
    dirs: Dirs,
    files: Option<Files>,
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
            self.dirs.edges.insert(key.into(), child);
        } else if let Some(f) = &mut self.files {
            if read || f.has_inode(child) {
                f.put_edge(key, child, read, file_cap);
            }
        }
    }
}

impl InodeCache {
    /// A cache of at most `dir_cap` directories and `file_cap` bytes of files; 0 turns
    /// either part off.
    pub fn new(dir_cap: usize, file_cap: usize) -> InodeCache {
        let inner = Inner {
            files: (file_cap > 0).then(|| Files::new(file_cap)),
            ..Default::default()
        };
        InodeCache {
            dir_cap,
            file_cap,
            inner: Mutex::new(inner),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn inode(&self, id: u64) -> Cached<InodeRec> {
        let g = self.lock();
        let rec = match g.dirs.inodes.get(&id) {
            Some(b) => Some(&b[..]),
            None => g.files.as_ref().and_then(|f| f.inode(id)),
        };
        match rec.map(InodeRec::decode) {
            Some(Ok(i)) => Cached::Hit(i),
            // what `encode` wrote always decodes; were it not to, the store answers
            _ => Cached::Miss(g.gen),
        }
    }

    pub fn child(&self, key: &[u8]) -> Cached<u64> {
        let g = self.lock();
        let c = match g.dirs.edges.get(key) {
            Some(&c) => Some(c),
            None => g.files.as_ref().and_then(|f| f.child(key)),
        };
        match c {
            Some(c) => Cached::Hit(c),
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
                g.dirs.inodes.insert(rec.id, raw.into());
            }
        } else if let Some(f) = &mut g.files {
            if !f.has_inode(rec.id) {
                f.put_inode(rec.id, raw, true, self.file_cap);
            }
        }
    }

    /// Keep the edge `key -> child`, read at generation `gen`.
    pub fn fill_child(&self, gen: u64, key: &[u8], child: u64) {
        let mut g = self.lock();
        if g.gen == gen {
            g.keep_edge(key, child, true, (self.dir_cap, self.file_cap));
        }
    }

    /// Drop everything (the store was replaced); reads racing this are not kept.
    pub fn clear(&self) {
        let mut g = self.lock();
        g.gen += 1;
        g.dirs.clear();
        g.files = (self.file_cap > 0).then(|| Files::new(self.file_cap));
    }

    /// Bring the cache up to date with `entry`, just written to the store.
    pub fn applied(&self, entry: &JournalEntry) {
        let mut g = self.lock();
        g.gen += 1;
        let g = &mut *g;
        for op in &entry.ops {
            match &op.kind {
                Some(Kind::PutInode(i)) if is_dir(i) => {
                    if let Some(f) = &mut g.files {
                        f.remove_inode(i.id);
                    }
                    if self.dir_cap == 0 {
                        continue;
                    }
                    if !g.dirs.inodes.contains_key(&i.id) {
                        g.dir_room(self.dir_cap);
                    }
                    g.dirs.inodes.insert(i.id, encode(i));
                }
                Some(Kind::PutInode(i)) => {
                    g.dirs.inodes.remove(&i.id);
                    if let Some(f) = &mut g.files {
                        if f.has_inode(i.id) {
                            let rec = i.encode_to_vec();
                            if rec.len() <= MAX_FILE_REC {
                                f.put_inode(i.id, &rec, false, self.file_cap);
                            } else {
                                f.remove_inode(i.id);
                            }
                        }
                    }
                }
                Some(Kind::DelInode(id)) => {
                    g.dirs.inodes.remove(id);
                    if let Some(f) = &mut g.files {
                        f.remove_inode(*id);
                    }
                }
                Some(Kind::PutEdge(e)) => {
                    let k = edge_key(e.parent, &e.name);
                    g.dirs.edges.remove(&k[..]);
                    if let Some(f) = &mut g.files {
                        f.remove_edge(&k);
                    }
                    g.keep_edge(&k, e.child, false, (self.dir_cap, self.file_cap));
                }
                Some(Kind::DelEdge(e)) => {
                    let k = edge_key(e.parent, &e.name);
                    g.dirs.edges.remove(&k[..]);
                    if let Some(f) = &mut g.files {
                        f.remove_edge(&k);
                    }
                }
                _ => {}
            }
        }
    }

    /// Every cached entry, for checks against the store: (inodes, edges).
    #[cfg(test)]
    pub fn snapshot(&self) -> (Vec<InodeRec>, Vec<(Vec<u8>, u64)>) {
        let g = self.lock();
        let mut inodes: Vec<InodeRec> = g
            .dirs
            .inodes
            .values()
            .map(|b| InodeRec::decode(&b[..]).expect("cached inode decodes"))
            .collect();
        let mut edges: Vec<(Vec<u8>, u64)> =
            g.dirs.edges.iter().map(|(k, v)| (k.to_vec(), *v)).collect();
        if let Some(f) = &g.files {
            for s in f.inodes.iter() {
                let b = f.arenas[class_of(s.id)].get(s);
                inodes.push(InodeRec::decode(b).expect("cached inode decodes"));
            }
            for s in f.edges.iter() {
                edges.push((f.arenas[class_of(s.id)].get(s).to_vec(), s.id));
            }
        }
        (inodes, edges)
    }

    /// What the file part holds (`Files::held`); checks that each arena's live bytes
    /// are those of its slots.
    #[cfg(test)]
    pub fn file_bytes(&self) -> usize {
        let g = self.lock();
        let Some(f) = &g.files else {
            return 0;
        };
        let mut live = [0usize; CLASSES];
        for s in f.inodes.iter().chain(f.edges.iter()) {
            live[class_of(s.id)] += s.len as usize;
        }
        for (a, l) in f.arenas.iter().zip(live) {
            assert_eq!(a.live, l, "live bytes miscounted");
            assert!(a.chunks.iter().all(|c| c.len() <= f.chunk));
        }
        f.held()
    }
}

#[cfg(test)]
mod tests;
