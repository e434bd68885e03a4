//! The short-circuit reader against block files in temp dirs: partial, mapped and
//! O_DIRECT reads return the bytes, and corruption is caught.
use super::direct::{DirectWindow, DIRECT_MAX, DIRECT_MIN, READ_AHEAD};
use super::local::LocalBlock;
use super::mapped::{MapState, UNMAP_ELSEWHERE};
use curvine_common::checksum::{chunk_count, chunk_crcs};
use curvine_common::{BlockId, FsError};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

const CS: usize = 1024;

fn local(content: &[u8]) -> (tempfile::NamedTempFile, LocalBlock) {
    local_in(&std::env::temp_dir(), content)
}

fn local_in(dir: &std::path::Path, content: &[u8]) -> (tempfile::NamedTempFile, LocalBlock) {
    let mut f = tempfile::NamedTempFile::new_in(dir).unwrap();
    f.write_all(content).unwrap();
    let len = content.len() as u64;
    let block = LocalBlock {
        block_id: BlockId(7),
        worker: "w".into(),
        file: Arc::new(File::open(f.path()).unwrap()),
        block_len: len,
        chunk_size: CS as u64,
        crcs: chunk_crcs(content, CS),
        verify: true,
        cache: None,
        verified: vec![0; chunk_count(len, CS as u32).div_ceil(64)],
        map: MapState::Unknown,
        direct: None,
    };
    (f, block)
}

fn content(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

/// 2,000 (offset, length) pairs inside `len` bytes, lengths up to three chunks.
fn ranges(seed: u64, len: usize) -> Vec<(usize, usize)> {
    let mut rng = seed;
    (0..2000)
        .map(|_| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let off = (rng >> 33) as usize % len;
            (off, 1 + (rng >> 13) as usize % (3 * CS))
        })
        .collect()
}

#[test]
fn partial_reads_return_the_bytes_on_every_path() {
    let data = content(70 * CS + 100);
    let (_f, mut b) = local(&data);
    for (off, len) in ranges(12345, data.len()) {
        let mut out = vec![0u8; len];
        let n = b.read_at(off as u64, &mut out).unwrap();
        assert_eq!(n, len.min(data.len() - off));
        assert_eq!(&out[..n], &data[off..off + n], "read of {len} at {off}");
    }
    assert!(b.is_verified(69) || b.is_verified(0));
}

#[test]
fn a_corrupt_chunk_is_caught_until_it_was_verified() {
    let data = content(8 * CS);
    let (f, mut b) = local(&data);
    // chunk 2 is verified by a partial read, chunk 5 never read
    let mut out = [0u8; 16];
    b.read_at(2 * CS as u64 + 8, &mut out).unwrap();
    assert!(b.is_verified(2));
    assert!(!b.is_verified(5));
    let mut bad = data.clone();
    bad[5 * CS + 3] ^= 0xff;
    std::fs::write(f.path(), &bad).unwrap();
    match b.read_at(5 * CS as u64, &mut out) {
        Err(FsError::ChecksumMismatch { message, .. }) => {
            assert!(message.contains(&(5 * CS).to_string()), "{message}")
        }
        other => panic!("expected a checksum mismatch, got {other:?}"),
    }
    // whole-chunk reads verify (and mark) what they read
    let mut whole = vec![0u8; 2 * CS];
    b.read_at(0, &mut whole).unwrap();
    assert!(b.is_verified(0) && b.is_verified(1));
    assert_eq!(whole, data[..2 * CS]);
}

/// A block file on tmpfs (CI and the MiniCluster keep their MEM tiers there too).
fn on_tmpfs(content: &[u8]) -> (tempfile::NamedTempFile, LocalBlock) {
    local_in(std::path::Path::new("/dev/shm"), content)
}

#[test]
fn mapped_reads_return_the_bytes_of_a_tmpfs_block() {
    let data = content(70 * CS + 100);
    let (_f, mut b) = on_tmpfs(&data);
    for (off, len) in ranges(99, data.len()) {
        let got = b
            .mapped(off as u64, len)
            .unwrap()
            .expect("a tmpfs file maps");
        let n = len.min(data.len() - off);
        assert_eq!(
            &got[..],
            &data[off..off + n],
            "mapped read of {len} at {off}"
        );
    }
    assert!(b.mapped(data.len() as u64, 10).unwrap().is_none());
    // the bytes keep the mapping alive after the block is gone
    let tail = b.mapped(70 * CS as u64, 100).unwrap().unwrap();
    drop(b);
    assert_eq!(&tail[..], &data[70 * CS..]);
}

/// Whether this process has `path` mapped (from /proc/self/maps).
fn is_mapped(path: &std::path::Path) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let path = path.to_str().unwrap();
    maps.lines().any(|l| l.ends_with(path))
}

#[test]
fn a_large_mapping_is_unmapped_off_the_runtime_and_a_small_one_at_once() {
    let data = content(UNMAP_ELSEWHERE + CS);
    let (big_file, mut big) = on_tmpfs(&data);
    let (small_file, mut small) = on_tmpfs(&data[..CS]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        drop(big.mapped(UNMAP_ELSEWHERE as u64, 10).unwrap().unwrap());
        drop(small.mapped(0, 10).unwrap().unwrap());
        assert!(is_mapped(big_file.path()) && is_mapped(small_file.path()));
        drop(small);
        assert!(!is_mapped(small_file.path()));
        drop(big);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while is_mapped(big_file.path()) {
            assert!(
                std::time::Instant::now() < deadline,
                "still mapped after 10 s"
            );
            tokio::task::yield_now().await;
            std::thread::yield_now();
        }
    });
}

#[test]
fn a_block_file_on_disk_is_not_mapped() {
    // the crate's directory is on disk (not tmpfs); read at run time, see conf.rs
    let dir = tempfile::tempdir_in(std::env::var("CARGO_MANIFEST_DIR").unwrap()).unwrap();
    let data = content(3 * CS);
    let (_f, mut b) = local_in(dir.path(), &data);
    assert!(b.mapped(0, CS).unwrap().is_none());
    let mut out = vec![0u8; CS];
    assert_eq!(b.read_at(0, &mut out).unwrap(), CS);
    assert_eq!(out, data[..CS]);
}

#[test]
fn a_block_file_on_disk_is_read_with_o_direct_through_a_window() {
    let dir = tempfile::tempdir_in(std::env::var("CARGO_MANIFEST_DIR").unwrap()).unwrap();
    // a length that is not a multiple of the alignment, over several full windows
    let data = content(DIRECT_MAX * 2 + 3 * CS + 123);
    let (f, mut b) = local_in(dir.path(), &data);
    let opened = DirectWindow::open(f.path().to_str().unwrap());
    assert!(opened.is_some(), "the crate's file system takes O_DIRECT");
    (b.file, b.direct) = opened.map(|(file, w)| (file, Some(w))).unwrap();
    // sequential reads grow the window to its largest
    let mut back = vec![0u8; data.len()];
    for (i, piece) in back.chunks_mut(128 << 10).enumerate() {
        let off = (i * (128 << 10)) as u64;
        assert_eq!(b.read_at(off, piece).unwrap(), piece.len());
    }
    assert!(back == data, "sequential reads differ");
    assert_eq!(b.direct.as_ref().unwrap().grow, DIRECT_MAX);
    // random reads, partial chunks included, start small again
    for (off, len) in ranges(7, data.len()) {
        let mut out = vec![0u8; len];
        let n = b.read_at(off as u64, &mut out).unwrap();
        assert_eq!(n, len.min(data.len() - off));
        assert_eq!(out[..n], data[off..off + n], "read of {len} at {off}");
    }
    assert_eq!(b.direct.as_ref().unwrap().grow, DIRECT_MIN);
    // corruption on disk is still caught (the window holds no stale copy of it)
    let w = std::fs::OpenOptions::new()
        .write(true)
        .open(f.path())
        .unwrap();
    w.write_at(&[data[DIRECT_MAX + 1] ^ 0xff], DIRECT_MAX as u64 + 1)
        .unwrap();
    w.sync_all().unwrap();
    let (_other, mut fresh) = local_in(dir.path(), &data);
    let (file, w) = DirectWindow::open(f.path().to_str().unwrap()).unwrap();
    (fresh.file, fresh.direct) = (file, Some(w));
    let mut out = vec![0u8; CS];
    match fresh.read_at(DIRECT_MAX as u64, &mut out) {
        Err(FsError::ChecksumMismatch { .. }) => {}
        other => panic!("expected a checksum mismatch, got {other:?}"),
    }
}

#[tokio::test]
async fn sequential_o_direct_reads_read_the_next_window_ahead() {
    let dir = tempfile::tempdir_in(std::env::var("CARGO_MANIFEST_DIR").unwrap()).unwrap();
    let data = content(DIRECT_MAX * (READ_AHEAD + 3) + 3 * CS + 123);
    let open = |data: &[u8]| {
        let (f, mut b) = local_in(dir.path(), data);
        let (file, w) = DirectWindow::open(f.path().to_str().unwrap()).unwrap();
        (b.file, b.direct) = (file, Some(w));
        (f, b)
    };
    let (_f, mut b) = open(&data);
    let mut back = vec![0u8; data.len()];
    for (i, piece) in back.chunks_mut(128 << 10).enumerate() {
        let off = (i * (128 << 10)) as u64;
        assert_eq!(b.read_at(off, piece).unwrap(), piece.len());
    }
    assert!(back == data, "sequential reads through read-ahead differ");
    // windows of 64, 128, 256, 512 KiB and 1 MiB read in place; the next ones
    // (READ_AHEAD + 1 of 1 MiB, then the rest) read ahead, READ_AHEAD at a time
    assert_eq!(b.direct.as_ref().unwrap().ahead_used, READ_AHEAD + 2);
    assert_eq!(b.direct.as_ref().unwrap().ahead_most, READ_AHEAD);
    // a jump leaves the pending window unused, and reads there are still right
    let mut out = vec![0u8; 3 * CS];
    assert_eq!(b.read_at(100, &mut out).unwrap(), out.len());
    assert_eq!(out, data[100..100 + 3 * CS]);

    // a byte gone bad in a window that was read ahead is still caught, and the
    // bytes before it still read
    let bad = DIRECT_MAX * 2 + DIRECT_MAX / 2;
    let (f, mut b) = open(&data);
    let w = std::fs::OpenOptions::new()
        .write(true)
        .open(f.path())
        .unwrap();
    w.write_at(&[data[bad] ^ 0xff], bad as u64).unwrap();
    w.sync_all().unwrap();
    let mut off = 0;
    let err = loop {
        let mut piece = vec![0u8; 128 << 10];
        match b.read_at(off as u64, &mut piece) {
            Ok(n) => {
                assert_eq!(piece[..n], data[off..off + n]);
                off += n;
            }
            Err(e) => break e,
        }
    };
    assert!(matches!(err, FsError::ChecksumMismatch { .. }), "{err:?}");
    assert_eq!(off, bad / (128 << 10) * (128 << 10));
}

#[test]
fn a_corrupt_chunk_is_caught_through_the_mapping() {
    let data = content(8 * CS);
    let (f, mut b) = on_tmpfs(&data);
    let first = b.mapped(CS as u64 + 5, 10).unwrap().unwrap();
    assert_eq!(&first[..], &data[CS + 5..CS + 15]);
    // flip a byte in place (block files never shrink; a rewrite would truncate)
    let w = std::fs::OpenOptions::new()
        .write(true)
        .open(f.path())
        .unwrap();
    w.write_at(&[data[6 * CS + 1] ^ 0xff], 6 * CS as u64 + 1)
        .unwrap();
    match b.mapped(5 * CS as u64, 2 * CS) {
        Err(FsError::ChecksumMismatch {
            block_id, message, ..
        }) => {
            assert_eq!(block_id, 7);
            assert!(message.contains(&(6 * CS).to_string()), "{message}");
        }
        other => panic!("expected a checksum mismatch, got {:?}", other.map(|_| ())),
    }
    // chunk 1 was verified before the flip and is still served
    assert_eq!(
        &b.mapped(CS as u64, CS).unwrap().unwrap()[..],
        &data[CS..2 * CS]
    );
}
