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
        let held = c.file_bytes();
        assert!(held <= cap, "{held} bytes at {id}");
    }
    let (inodes, edges) = c.snapshot();
    assert!(inodes.len() > 100 && !edges.is_empty(), "{}", inodes.len());
}

#[test]
fn a_full_file_part_keeps_most_of_what_it_holds() {
    // 64 KiB, 1 KiB chunks: about 1,800 small files
    let c = InodeCache::new(16, 64 << 10);
    let cached = |ids: std::ops::Range<u64>| {
        ids.filter(|id| matches!(c.inode(*id), Cached::Hit(_)))
            .count()
    };
    for id in 1..=1000 {
        read(&c, &file(id, 0));
    }
    assert_eq!(cached(1..1001), 1000);
    // a scan of ten times as many files, each read once
    for id in 10_000..20_000 {
        read(&c, &file(id, 0));
    }
    let kept = cached(1..1001);
    assert!(kept >= 500, "{kept} of the first 1000 left");
    assert!(cached(10_000..20_000) < 2000);
    // a file read over and over gets in
    for _ in 0..ADMIT_WHEN_FULL {
        read(&c, &file(50_000, 0));
    }
    assert!(matches!(c.inode(50_000), Cached::Hit(_)));
    // with most of it gone, every read gets in again, into chunks compacted
    for id in 1..20_000 {
        let mut e = JournalEntry::default();
        e.push(Kind::DelInode(id));
        c.applied(&e);
    }
    for id in 60_000..61_500 {
        read(&c, &file(id, 0));
        let held = c.file_bytes();
        assert!(held <= 64 << 10, "{held} bytes");
    }
    assert_eq!(cached(60_000..61_500), 1500);
}

#[test]
fn records_read_back_whole_from_large_chunks() {
    // 16 MB: chunks of 256 KiB, so offsets past 16 bits
    let c = InodeCache::new(16, 16 << 20);
    let name = |id: u64| format!("file-{id}");
    for id in 1..=20_000u64 {
        read(&c, &file(id, 3));
        read_edge(&c, &edge_key(1, &name(id)), id);
    }
    for id in 1..=20_000u64 {
        assert!(
            matches!(c.inode(id), Cached::Hit(r) if r == file(id, 3)),
            "{id}"
        );
        assert!(matches!(c.child(&edge_key(1, &name(id))), Cached::Hit(i) if i == id));
    }
    assert!(c.file_bytes() <= 16 << 20);
}

#[test]
fn rewrites_of_cached_files_are_compacted_not_shed() {
    let cap = 64 << 10;
    let c = InodeCache::new(16, cap);
    for id in 1..=200 {
        read(&c, &file(id, 0));
    }
    // each write leaves the copy it replaces behind in its chunk: many times the
    // cap of them
    for round in 0..200 {
        for id in 1..=200 {
            c.applied(&put_inode(file(id, 1 + round % 3)));
        }
        let held = c.file_bytes();
        assert!(held <= cap, "{held} bytes in round {round}");
    }
    let (inodes, _) = c.snapshot();
    assert_eq!(inodes.len(), 200, "files dropped to make room");
    assert!(inodes.iter().all(|i| i.blocks.len() == 1 + 199 % 3));
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
