//! Block store: index rebuild at start, invalid blocks discarded, eviction, delete.

use curvine_common::checksum::chunk_crcs;
use curvine_common::proto::StorageTier;
use curvine_common::BlockId;
use std::os::unix::fs::FileExt;

use super::*;
use crate::worker::{block_path, open_store};

/// Write and commit a block straight through the store API.
fn put(store: &Arc<BlockStore>, id: u64, data: &[u8]) -> StorageTier {
    let h = store
        .begin_write(BlockId(id), StorageTier::Unspecified, data.len() as u64)
        .unwrap();
    let tier = h.tier();
    h.clone_file().unwrap().write_all_at(data, 0).unwrap();
    h.commit(data.len() as u64, chunk_crcs(data, CS)).unwrap();
    tier
}

fn dirs(conf: &ClusterConf) -> Vec<curvine_common::conf::TierDir> {
    conf.tier_dirs().unwrap()
}

#[test]
fn index_is_rebuilt_at_start_and_staging_cleared() {
    let tmp = tempfile::tempdir().unwrap();
    let conf = conf_with(tmp.path(), &["MEM:1MB", "SSD:1MB"]);
    {
        let store = open_store(&conf, "w".into()).unwrap();
        put(&store, 1, &pattern(CS + 1, 1));
        put(&store, 2, &pattern(0, 2));
        put(&store, 0x1_0000_0003, &pattern(3 * CS, 3));
        // an unfinished write at "crash" time
        let h = store
            .begin_write(BlockId(4), StorageTier::Mem, 100)
            .unwrap();
        std::mem::forget(h);
    }
    assert!(!staging_empty(tmp.path()));
    let store = open_store(&conf, "w".into()).unwrap();
    assert!(staging_empty(tmp.path()));
    assert_eq!(
        store.block_info(BlockId(1)).unwrap(),
        Some((CS as u64 + 1, StorageTier::Mem))
    );
    assert_eq!(
        store.block_info(BlockId(2)).unwrap(),
        Some((0, StorageTier::Mem))
    );
    assert_eq!(
        store.block_info(BlockId(0x1_0000_0003)).unwrap(),
        Some((3 * CS as u64, StorageTier::Mem))
    );
    assert!(store.block_info(BlockId(4)).unwrap().is_none());
    let g = store.lock();
    assert_eq!(g.tiers[0].used(), 4 * CS as u64 + 1);
    assert_eq!(g.tiers[0].blocks, 3);
    drop(g);
    let r = store.open_read(BlockId(0x1_0000_0003)).unwrap();
    assert_eq!(r.crcs, chunk_crcs(&pattern(3 * CS, 3), CS));
    let ids = store.block_ids().unwrap();
    assert_eq!(ids, [BlockId(1), BlockId(2), BlockId(0x1_0000_0003)]);
    // a page names the replicas held from an id on, with their length and tier
    let page = store.replicas_from(BlockId(2), 2).unwrap();
    let got: Vec<_> = page.iter().map(|r| (r.block_id, r.len, r.tier)).collect();
    let mem = StorageTier::Mem as i32;
    assert_eq!(got, [(2, 0, mem), (0x1_0000_0003, 3 * CS as u64, mem)]);
}

#[test]
fn blocks_with_missing_or_bad_sidecars_are_discarded_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let conf = conf_with(tmp.path(), &["MEM:1MB"]);
    {
        let store = open_store(&conf, "w".into()).unwrap();
        for id in 1..=6 {
            put(&store, id, &pattern(2 * CS, id as u8));
        }
    }
    let path = |id| block_path(&dirs(&conf), id).unwrap();
    let (b1, s1) = path(1);
    std::fs::remove_file(&s1).unwrap();
    let (b2, _) = path(2);
    // the data file no longer matches the sidecar's length / chunk count
    std::fs::OpenOptions::new()
        .append(true)
        .open(&b2)
        .unwrap()
        .write_all_at(&[0u8; 5000], 0)
        .unwrap();
    // a sidecar one CRC short, with its header intact
    let (b4, s4) = path(4);
    let len = std::fs::metadata(&s4).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&s4)
        .unwrap()
        .set_len(len - 4)
        .unwrap();
    // a sidecar with a bad magic
    let (b5, s5) = path(5);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&s5)
        .unwrap()
        .write_all_at(b"XXXX", 0)
        .unwrap();
    // a sidecar whose block is gone
    let (b6, s6) = path(6);
    std::fs::remove_file(&b6).unwrap();
    // a block file and sidecar named as no block is: "007" is not how 7 is written
    let (b3, s3) = path(3);
    let odd = b3.with_file_name("007");
    let odd_sidecar = b3.with_file_name("007.crc");
    std::fs::copy(&b3, &odd).unwrap();
    std::fs::copy(&s3, &odd_sidecar).unwrap();

    let store = open_store(&conf, "w".into()).unwrap();
    assert_eq!(store.block_ids().unwrap(), [BlockId(3)]);
    for gone in [&b1, &b2, &b4, &s4, &b5, &s5, &s6, &odd, &odd_sidecar] {
        assert!(!gone.exists(), "{} is left", gone.display());
    }
    assert!(b3.exists() && s3.exists());
    assert_eq!(store.lock().tiers[0].used(), 2 * CS as u64);
    let r = store.open_read(BlockId(3)).unwrap();
    assert_eq!(r.crcs, chunk_crcs(&pattern(2 * CS, 3), CS));
}

#[test]
fn blocks_in_the_old_shard_layout_are_moved_at_start() {
    use crate::worker::layout::shard_name;
    let tmp = tempfile::tempdir().unwrap();
    let conf = conf_with(tmp.path(), &["MEM:1MB"]);
    // first blocks of three files: shards 05, 09 and 00 now; all 00 (id % 256) before
    let (a, b, c) = (5u64 << 24, 9u64 << 24, 0x100u64 << 24);
    {
        let store = open_store(&conf, "w".into()).unwrap();
        for (i, id) in [a, b, c].into_iter().enumerate() {
            put(&store, id, &pattern(CS + 1, i as u8));
        }
    }
    assert_eq!(
        (shard_name(a), shard_name(b), shard_name(c)),
        ("05".into(), "09".into(), "00".into())
    );
    let blocks = tmp.path().join("t0").join("blocks");
    let old = blocks.join("00");
    // as an older worker left it: no layout file, `a` wholly in the old shard, and `b`
    // split as a crash mid-move would leave it (its sidecar still there)
    std::fs::remove_file(tmp.path().join("t0").join("layout")).unwrap();
    let (ba, sa) = block_path(&dirs(&conf), a).unwrap();
    let (_, sb) = block_path(&dirs(&conf), b).unwrap();
    for f in [&ba, &sa, &sb] {
        std::fs::rename(f, old.join(f.file_name().unwrap())).unwrap();
    }
    std::fs::write(old.join("junk"), b"x").unwrap();

    let store = open_store(&conf, "w".into()).unwrap();
    let mut want = vec![BlockId(a), BlockId(b), BlockId(c)];
    want.sort();
    assert_eq!(store.block_ids().unwrap(), want);
    for (i, id) in [a, b, c].into_iter().enumerate() {
        let (data, sidecar) = block_path(&dirs(&conf), id).unwrap();
        assert!(data.starts_with(blocks.join(shard_name(id))) && sidecar.exists());
        let r = store.open_read(BlockId(id)).unwrap();
        let mut buf = vec![0u8; CS + 1];
        r.file.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(buf, pattern(CS + 1, i as u8));
    }
    // what is left in 00 is `c`, which belongs there; the stray file is gone
    let mut left: Vec<String> = std::fs::read_dir(&old)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, [c.to_string(), format!("{c}.crc")]);
    assert_eq!(store.lock().tiers[0].used(), 3 * (CS as u64 + 1));
    // the tier says so, and later starts skip the move
    let layout = tmp.path().join("t0").join("layout");
    assert_eq!(std::fs::read_to_string(&layout).unwrap(), "2");
    drop(store);
    assert_eq!(
        open_store(&conf, "w".into()).unwrap().block_ids().unwrap(),
        want
    );
}

/// A store under `root` with a 100KB MEM tier (watermarks 0.8 and 0.5) over an SSD
/// tier, and blocks 1 to 9 of 10 KiB each in MEM: past the high watermark.
fn nine_blocks_past_the_high_watermark(root: &std::path::Path) -> Arc<BlockStore> {
    let mut conf = conf_with(root, &["MEM:100KB", "SSD:1MB"]);
    conf.worker.high_watermark = 0.8;
    conf.worker.low_watermark = 0.5;
    let store = open_store(&conf, "w".into()).unwrap();
    for id in 1..=9u64 {
        assert_eq!(
            put(&store, id, &pattern(10 * 1024, id as u8)),
            StorageTier::Mem
        );
    }
    store
}

#[test]
fn background_eviction_brings_a_tier_below_its_low_watermark() {
    let tmp = tempfile::tempdir().unwrap();
    let store = nine_blocks_past_the_high_watermark(tmp.path());
    // touch the oldest so it survives
    store.open_read(BlockId(1)).unwrap();
    let moved = store.evict_once();
    assert_eq!(moved, 5); // 90KB -> below 50KB
    let g = store.lock();
    assert!((g.tiers[0].used() as f64) < 0.5 * g.tiers[0].capacity as f64);
    assert_eq!(g.tiers[0].blocks + g.tiers[1].blocks, 9);
    assert_eq!(g.tiers[1].used(), 50 * 1024);
    drop(g);
    assert_eq!(
        store.block_info(BlockId(1)).unwrap().unwrap().1,
        StorageTier::Mem
    );
    for id in 2..=6u64 {
        assert_eq!(
            store.block_info(BlockId(id)).unwrap().unwrap().1,
            StorageTier::Ssd,
            "block {id}"
        );
        let r = store.open_read(BlockId(id)).unwrap();
        let mut buf = vec![0u8; 10 * 1024];
        r.file.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(buf, pattern(10 * 1024, id as u8));
        assert!(r.path.starts_with(tmp.path().join("t1")));
    }
    assert!(staging_empty(tmp.path()));
    // below the high watermark nothing moves
    assert_eq!(store.evict_once(), 0);
}

#[test]
fn reads_gathered_past_a_batch_keep_the_lru_order() {
    let tmp = tempfile::tempdir().unwrap();
    let store = nine_blocks_past_the_high_watermark(tmp.path());
    // more reads than one batch: some are written to the index on the way, the rest
    // are still gathered when the eviction reads the order
    for _ in 0..600 {
        store.open_read(BlockId(1)).unwrap();
        store.open_read(BlockId(2)).unwrap();
    }
    store.open_read(BlockId(3)).unwrap();
    assert_eq!(store.evict_once(), 5);
    for id in [1u64, 2, 3, 9] {
        let tier = store.block_info(BlockId(id)).unwrap().unwrap().1;
        assert_eq!(tier, StorageTier::Mem, "block {id}");
    }
    for id in 4..=8u64 {
        let tier = store.block_info(BlockId(id)).unwrap().unwrap().1;
        assert_eq!(tier, StorageTier::Ssd, "block {id}");
    }
    // the index lives in the last tier's directory
    assert!(tmp.path().join("t1").join("index").is_dir());
}

#[test]
fn delete_frees_space_and_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let conf = conf_with(tmp.path(), &["MEM:1MB"]);
    let store = open_store(&conf, "w".into()).unwrap();
    put(&store, 8, &pattern(CS, 8));
    let (path, sc) = block_path(&dirs(&conf), 8).unwrap();
    let (added, removed) = store.take_pending();
    assert_eq!(added.len(), 1);
    assert!(removed.is_empty());
    assert!(store.delete(BlockId(8)).unwrap());
    assert!(!store.delete(BlockId(8)).unwrap());
    assert!(!path.exists() && !sc.exists());
    assert_eq!(store.lock().tiers[0].used(), 0);
    let (added, removed) = store.take_pending();
    assert!(added.is_empty());
    assert_eq!(removed, vec![8]);
    // undelivered reports go back unless superseded
    store.restore_pending(vec![], vec![8]);
    put(&store, 8, &pattern(CS, 9));
    let (added, removed) = store.take_pending();
    assert_eq!(added.len(), 1);
    assert!(removed.is_empty());
}

#[test]
fn bad_data_dir_entry_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("plainfile");
    std::fs::write(&file, b"x").unwrap();
    let mut conf = ClusterConf::default();
    conf.worker.data_dir = vec![format!("[MEM:1MB]{}", file.display())];
    let e = open_store(&conf, "w".into()).unwrap_err();
    assert!(e.to_string().contains("plainfile"), "{e}");
}

/// A small tmpfs mounted at `dir` for the life of the value (root only).
struct SmallFs(std::path::PathBuf);

impl SmallFs {
    #[allow(unsafe_code)]
    fn mount(dir: &std::path::Path, size: &str) -> std::io::Result<SmallFs> {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        std::fs::create_dir_all(dir)?;
        let target = CString::new(dir.as_os_str().as_bytes()).expect("no NUL");
        let opts = CString::new(format!("size={size}")).expect("no NUL");
        // SAFETY: every pointer is a valid NUL-terminated string that outlives the call.
        let rc = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                opts.as_ptr().cast(),
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(SmallFs(dir.to_path_buf()))
    }
}

impl Drop for SmallFs {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        use std::os::unix::ffi::OsStrExt;
        let target = std::ffi::CString::new(self.0.as_os_str().as_bytes()).expect("no NUL");
        // SAFETY: a valid NUL-terminated path.
        unsafe {
            libc::umount2(target.as_ptr(), libc::MNT_DETACH);
        }
    }
}

/// A tier whose filesystem holds less than its configured capacity takes no more than
/// the filesystem has: the write goes to the next tier, or fails with a no-space error
/// that names the filesystem's room, instead of failing halfway with ENOSPC.
#[test]
#[allow(unsafe_code)]
fn a_tier_never_promises_more_than_its_filesystem_has() {
    let tmp = tempfile::tempdir().unwrap();
    let small = match SmallFs::mount(&tmp.path().join("t0"), "1m") {
        Ok(m) => m,
        Err(e) if e.raw_os_error() == Some(libc::EPERM) && unsafe { libc::geteuid() } != 0 => {
            return eprintln!("skipped: mounting a tmpfs needs root ({e})");
        }
        Err(e) => panic!("mount a 1 MiB tmpfs: {e}"),
    };
    let conf = conf_with(tmp.path(), &["MEM:64MB", "SSD:64MB"]);
    let store = open_store(&conf, "w".into()).unwrap();
    // 2 MiB fits MEM's accounting (64 MB) but not its filesystem (1 MiB)
    let big = pattern(2 << 20, 5);
    assert_eq!(put(&store, 1, &big), StorageTier::Ssd);
    assert_eq!(store.open_read(BlockId(1)).unwrap().len, big.len() as u64);
    // what the filesystem can hold still goes to MEM
    assert_eq!(put(&store, 2, &pattern(256 << 10, 6)), StorageTier::Mem);
    // and the report shows the filesystem's room, not the configured 64 MB
    let mem = &store.tier_reports()[0];
    assert!(
        mem.capacity <= 1 << 20,
        "MEM reports {} bytes",
        mem.capacity
    );
    assert!(mem.capacity >= mem.used, "{mem:?}");
    drop(store);

    // with no tier below, the error says why
    let mut only = conf_with(tmp.path(), &["MEM:64MB"]);
    only.worker.data_dir.truncate(1);
    let store = open_store(&only, "w".into()).unwrap();
    let e = store
        .begin_write(BlockId(3), StorageTier::Unspecified, 2 << 20)
        .unwrap_err();
    assert!(matches!(e, FsError::NoSpace { .. }), "{e}");
    assert!(e.to_string().contains("its filesystem has"), "{e}");
    drop(store);
    drop(small);
}

/// A temp dir on tmpfs, where tiers keep the files of deleted blocks; None elsewhere.
fn shm_dir() -> Option<tempfile::TempDir> {
    let d = tempfile::tempdir_in("/dev/shm").ok()?;
    crate::worker::tiers::is_tmpfs(d.path()).then_some(d)
}

fn inode_of(p: &std::path::Path) -> u64 {
    std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap())
}

#[test]
fn a_deleted_blocks_file_is_written_over_by_the_next_block() {
    let Some(tmp) = shm_dir() else {
        eprintln!("no tmpfs at /dev/shm: skipped");
        return;
    };
    let conf = conf_with(tmp.path(), &["MEM:1MB"]);
    let store = open_store(&conf, "w".into()).unwrap();
    put(&store, 1, &pattern(3 * CS + 5, 1));
    let (old, _) = block_path(&dirs(&conf), 1).unwrap();
    let ino = inode_of(&old);
    assert!(store.delete(BlockId(1)).unwrap());
    assert!(!old.exists());
    {
        let g = store.lock();
        assert_eq!(g.tiers[0].spares.len(), 1);
        assert_eq!(g.tiers[0].used(), 0, "a spare is not used space");
    }
    // a shorter block over the longer file: only its own bytes remain
    let data = pattern(CS + 1, 2);
    put(&store, 2, &data);
    let (new, _) = block_path(&dirs(&conf), 2).unwrap();
    assert_eq!(inode_of(&new), ino, "the spare file was reused");
    assert!(store.lock().tiers[0].spares.is_empty());
    let r = store.open_read(BlockId(2)).unwrap();
    assert_eq!(r.len, data.len() as u64);
    assert_eq!(std::fs::read(&r.path).unwrap(), data);
    assert_eq!(r.crcs, chunk_crcs(&data, CS));
    // a restart drops what was kept
    put(&store, 3, &pattern(CS, 3));
    assert!(store.delete(BlockId(3)).unwrap());
    assert_eq!(store.lock().tiers[0].spares.len(), 1);
    drop(store);
    let store = open_store(&conf, "w".into()).unwrap();
    assert!(store.lock().tiers[0].spares.is_empty());
    let spare_dir = tmp.path().join("t0").join("spare");
    assert_eq!(std::fs::read_dir(spare_dir).unwrap().count(), 0);
}

#[test]
fn a_block_file_still_open_or_mapped_elsewhere_is_never_written_over() {
    let Some(tmp) = shm_dir() else {
        eprintln!("no tmpfs at /dev/shm: skipped");
        return;
    };
    let conf = conf_with(tmp.path(), &["MEM:1MB"]);
    let store = open_store(&conf, "w".into()).unwrap();
    let first = pattern(2 * CS, 1);
    put(&store, 1, &first);
    let (p1, _) = block_path(&dirs(&conf), 1).unwrap();
    // a reader that opened the block before it was deleted
    let held = std::fs::File::open(&p1).unwrap();
    assert!(store.delete(BlockId(1)).unwrap());
    assert!(store.lock().tiers[0].spares.is_empty());
    put(&store, 2, &pattern(2 * CS, 2));
    let mut back = vec![0u8; first.len()];
    held.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(
        back, first,
        "the open file still holds the deleted block's bytes"
    );
    drop(held);
    // a mapping outlives the descriptor it was made from
    let (p2, _) = block_path(&dirs(&conf), 2).unwrap();
    let f = std::fs::File::open(&p2).unwrap();
    let map = Mapping::of(&f, 2 * CS);
    drop(f);
    assert!(store.delete(BlockId(2)).unwrap());
    assert!(store.lock().tiers[0].spares.is_empty());
    put(&store, 3, &pattern(2 * CS, 3));
    assert_eq!(map.bytes(), &pattern(2 * CS, 2)[..]);
}

#[test]
fn spares_give_way_to_a_reservation_that_needs_their_room() {
    let Some(tmp) = shm_dir() else {
        eprintln!("no tmpfs at /dev/shm: skipped");
        return;
    };
    // 16 chunks: with the low watermark at 0.85, up to 13 chunks of blocks and spares
    let conf = conf_with(tmp.path(), &[&format!("MEM:{}", 16 * CS)]);
    let store = open_store(&conf, "w".into()).unwrap();
    for id in 1..=3 {
        put(&store, id, &pattern(4 * CS, id as u8));
    }
    for id in 1..=3 {
        assert!(store.delete(BlockId(id)).unwrap());
    }
    assert_eq!(store.lock().tiers[0].spare_bytes(), 12 * CS as u64);
    // 14 chunks fit only once the spares are gone (the reservation comes first)
    let data = pattern(14 * CS, 9);
    assert_eq!(put(&store, 9, &data), StorageTier::Mem);
    let g = store.lock();
    assert_eq!(g.tiers[0].used(), 14 * CS as u64);
    assert_eq!(g.tiers[0].spare_bytes(), 0);
    assert!(g.tiers[0].spares.is_empty());
    drop(g);
    let r = store.open_read(BlockId(9)).unwrap();
    assert_eq!(std::fs::read(&r.path).unwrap(), data);
}

/// A read-only shared mapping, unmapped on drop.
struct Mapping(*mut libc::c_void, usize);

impl Mapping {
    #[allow(unsafe_code)]
    fn of(f: &std::fs::File, len: usize) -> Mapping {
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh read-only mapping of an open file of at least `len` bytes.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        Mapping(p, len)
    }

    #[allow(unsafe_code)]
    fn bytes(&self) -> &[u8] {
        // SAFETY: `len` readable bytes mapped until drop.
        unsafe { std::slice::from_raw_parts(self.0.cast(), self.1) }
    }
}

impl Drop for Mapping {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: exactly the range mmap returned.
        unsafe { libc::munmap(self.0, self.1) };
    }
}

#[test]
fn a_write_opens_without_waiting_only_where_it_fits_as_things_are() {
    let tmp = tempfile::tempdir().unwrap();
    let conf = conf_with(tmp.path(), &["MEM:100KB", "SSD:1MB"]);
    let store = open_store(&conf, "w".into()).unwrap();
    // room in MEM: opened at once, with its space reserved
    let h = store
        .try_begin_write(BlockId(1), StorageTier::Unspecified, 60 * 1024)
        .unwrap()
        .expect("fits");
    assert_eq!(h.tier(), StorageTier::Mem);
    assert_eq!(store.lock().tiers[0].reserved, 60 * 1024);
    let data = pattern(60 * 1024, 1);
    h.clone_file().unwrap().write_all_at(&data, 0).unwrap();
    h.commit(data.len() as u64, chunk_crcs(&data, CS)).unwrap();
    // MEM cannot take another 60 KB without moving a block down: left to begin_write,
    // with nothing reserved and no staging file made
    assert!(store
        .try_begin_write(BlockId(2), StorageTier::Unspecified, 60 * 1024)
        .unwrap()
        .is_none());
    assert_eq!(store.lock().tiers[0].reserved, 0);
    assert!(staging_empty(tmp.path()));
    // asked for SSD, it starts there
    let h = store
        .try_begin_write(BlockId(3), StorageTier::Ssd, 60 * 1024)
        .unwrap()
        .expect("fits in SSD");
    assert_eq!(h.tier(), StorageTier::Ssd);
    drop(h);
    assert_eq!(
        store.lock().tiers[1].reserved,
        0,
        "an abandoned write gives its room back"
    );
    // an existing block is refused at once
    assert!(matches!(
        store.try_begin_write(BlockId(1), StorageTier::Unspecified, 1),
        Err(FsError::AlreadyExists { .. })
    ));
    // a first tier that fsyncs by its own setting (the worker's is off) is left to
    // begin_write, also when no tier is asked for
    let tmp = tempfile::tempdir().unwrap();
    let mut conf = conf_with(tmp.path(), &["MEM:100KB", "SSD:1MB"]);
    conf.worker.fsync = curvine_common::conf::FsyncPolicy::None;
    conf.worker.fsync_mem = Some(curvine_common::conf::FsyncPolicy::OnCommit);
    conf.worker.fsync_ssd = Some(curvine_common::conf::FsyncPolicy::None);
    let store = open_store(&conf, "w".into()).unwrap();
    for want in [StorageTier::Unspecified, StorageTier::Mem] {
        assert!(store
            .try_begin_write(BlockId(4), want, 1024)
            .unwrap()
            .is_none());
    }
    assert_eq!(store.lock().tiers[0].reserved, 0);
    let h = store
        .try_begin_write(BlockId(4), StorageTier::Ssd, 1024)
        .unwrap()
        .expect("SSD does not fsync");
    assert_eq!(h.tier(), StorageTier::Ssd);
}
