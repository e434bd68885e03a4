//! Data path: odd sizes across block boundaries, short-circuit and remote, concurrent
//! writers, random preads against a reference, replicas.

mod common;

use common::{data, run};
use curvine_client::{CreateOptions, CurvineFs};

const BLOCK: usize = 8 << 20; // MiniCluster's block size
const CHUNK: usize = 64 << 10;

fn sizes() -> Vec<usize> {
    vec![
        0,
        1,
        CHUNK - 1,
        CHUNK + 1,
        (1 << 20) + 7,
        BLOCK - 1,
        BLOCK,
        BLOCK + 1,
        3 * BLOCK + 12_345,
    ]
}

async fn client(s: &common::Shared, short_circuit: bool) -> CurvineFs {
    let mut conf = s.cluster.client_conf();
    conf.client.short_circuit = short_circuit;
    CurvineFs::connect(conf).await.unwrap()
}

async fn write_in_pieces(fs: &CurvineFs, path: &str, body: &[u8], piece: usize) {
    let mut w = fs.create(path, true).await.unwrap();
    for c in body.chunks(piece.max(1)) {
        w.write(c).await.unwrap();
    }
    let st = w.close().await.unwrap();
    assert_eq!(st.len, body.len() as u64, "{path}");
}

async fn odd_sizes(short_circuit: bool) {
    let s = common::shared(2);
    let fs = client(s, short_circuit).await;
    let dir = format!("/data-odd-{short_circuit}");
    for (i, size) in sizes().into_iter().enumerate() {
        let body = data(size, i as u64 + 1);
        let path = format!("{dir}/f{size}");
        // odd piece sizes exercise frame and chunk boundaries
        write_in_pieces(&fs, &path, &body, 100_003).await;
        assert_eq!(fs.stat(&path).await.unwrap().len, size as u64);
        let back = fs.read_file(&path).await.unwrap();
        assert!(back == body, "{path}: content differs");
        // and read with the other mode
        let other = client(s, !short_circuit).await;
        assert!(
            other.read_file(&path).await.unwrap() == body,
            "{path} cross-mode"
        );
    }
}

#[test]
fn odd_sizes_short_circuit() {
    run(2, |_| odd_sizes(true));
}

#[test]
fn odd_sizes_remote() {
    run(2, |_| odd_sizes(false));
}

#[test]
fn concurrent_writers_to_different_files() {
    run(2, |s| async move {
        let mut tasks = Vec::new();
        for t in 0..8u64 {
            let fs = s.fs.clone();
            tasks.push(tokio::spawn(async move {
                let body = data(3 * (1 << 20) + t as usize * 1000, 100 + t);
                let path = format!("/data-conc/f{t}");
                write_in_pieces(&fs, &path, &body, 128 << 10).await;
                (path, body)
            }));
        }
        for t in tasks {
            let (path, body) = t.await.unwrap();
            assert!(s.fs.read_file(&path).await.unwrap() == body, "{path}");
        }
    });
}

async fn random_preads(short_circuit: bool) {
    let s = common::shared(2);
    let fs = client(s, short_circuit).await;
    let size = 2 * BLOCK + 333_333;
    let body = data(size, 77);
    let path = format!("/data-pread-{short_circuit}");
    write_in_pieces(&fs, &path, &body, 1 << 20).await;
    let mut r = fs.open(&path).await.unwrap();
    let mut x: u64 = 12345;
    for _ in 0..200 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let off = (x >> 11) as usize % size;
        let len = ((x >> 40) as usize % 300_000).min(size - off);
        let mut buf = vec![0u8; len];
        let mut got = 0;
        while got < len {
            let n = r.pread((off + got) as u64, &mut buf[got..]).await.unwrap();
            assert!(n > 0, "short pread at {}", off + got);
            got += n;
        }
        assert!(buf == body[off..off + len], "pread {off}+{len}");
    }
    // pread past EOF returns 0; seek then sequential read continues correctly
    let mut one = [0u8; 1];
    assert_eq!(r.pread(size as u64, &mut one).await.unwrap(), 0);
    r.seek(BLOCK as u64 - 10).unwrap();
    let mut buf = vec![0u8; 20];
    let mut got = 0;
    while got < 20 {
        got += r.read(&mut buf[got..]).await.unwrap();
    }
    assert_eq!(buf, &body[BLOCK - 10..BLOCK + 10]);
    assert!(r.seek(size as u64 + 1).is_err());
}

#[test]
fn random_preads_short_circuit() {
    run(2, |_| random_preads(true));
}

#[test]
fn random_preads_remote() {
    run(2, |_| random_preads(false));
}

#[test]
fn two_replicas_are_written_to_both_workers() {
    run(2, |s| async move {
        let before: Vec<u64> = block_counts(s).await;
        let body = data(BLOCK + 5, 9);
        let opts = CreateOptions {
            overwrite: true,
            replicas: 2,
            ..Default::default()
        };
        let mut w = s.fs.create_with("/data-rep2", opts).await.unwrap();
        w.write(&body).await.unwrap();
        w.close().await.unwrap();
        assert_eq!(s.fs.stat("/data-rep2").await.unwrap().replicas, 2);
        assert!(s.fs.read_file("/data-rep2").await.unwrap() == body);
        // both workers gained the file's two blocks (reported by heartbeat)
        curvine_server::testing::wait_until(std::time::Duration::from_secs(10), || async {
            let after = block_counts(s).await;
            after.iter().zip(&before).all(|(a, b)| *a >= b + 2)
        })
        .await
        .unwrap();
    });
}

async fn block_counts(s: &common::Shared) -> Vec<u64> {
    let mut r = s.fs.report().await.unwrap().workers;
    r.sort_by_key(|w| w.address.as_ref().map(|a| a.data_port));
    r.iter()
        .map(|w| w.tiers.iter().map(|t| t.blocks).sum())
        .collect()
}

/// hflush/hsync: what a writer synced is visible to new readers and to stat while the
/// file is still open, across block boundaries and with replicas; a writer that then
/// goes away leaves the synced data (and only that) in a complete file.
async fn sync_publishes(s: &common::Shared, path: &str, replicas: u32) {
    let opts = CreateOptions {
        overwrite: true,
        replicas,
        ..Default::default()
    };
    let body = data(2 * BLOCK + 777, 31 + replicas as u64);
    let mut w = s.fs.create_with(path, opts).await.unwrap();
    // a sync before any write publishes an empty file
    w.sync().await.unwrap();
    assert_eq!(s.fs.stat(path).await.unwrap().len, 0);
    let cuts = [1, 2, CHUNK + 3, BLOCK - 5, BLOCK + 9, 2 * BLOCK + 100];
    let mut at = 0;
    for cut in cuts {
        w.write(&body[at..cut]).await.unwrap();
        at = cut;
        w.sync().await.unwrap();
        // a second sync with nothing new is a no-op
        w.sync().await.unwrap();
        let st = s.fs.stat(path).await.unwrap();
        assert_eq!(st.len, cut as u64, "{path}: stat after sync at {cut}");
        assert!(!st.complete, "{path} is still being written");
        let back = s.fs.read_file(path).await.unwrap();
        assert!(
            back == body[..cut],
            "{path}: new reader after sync at {cut}"
        );
    }
    // unsynced bytes are not visible yet
    w.write(&body[at..]).await.unwrap();
    assert_eq!(s.fs.stat(path).await.unwrap().len, at as u64);
    let st = w.close().await.unwrap();
    assert_eq!(st.len, body.len() as u64);
    assert!(
        s.fs.read_file(path).await.unwrap() == body,
        "{path}: after close"
    );

    // a writer dropped after a sync: the file keeps the synced prefix, complete
    let lost = format!("{path}-dropped");
    let mut w =
        s.fs.create_with(
            &lost,
            CreateOptions {
                overwrite: true,
                replicas,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    w.write(&body[..BLOCK + 3]).await.unwrap();
    w.sync().await.unwrap();
    w.write(&body[BLOCK + 3..]).await.unwrap();
    drop(w);
    curvine_server::testing::wait_until(std::time::Duration::from_secs(10), || async {
        s.fs.stat(&lost).await.is_ok_and(|st| st.complete)
    })
    .await
    .unwrap();
    let st = s.fs.stat(&lost).await.unwrap();
    assert_eq!(st.len, (BLOCK + 3) as u64);
    assert!(s.fs.read_file(&lost).await.unwrap() == body[..BLOCK + 3]);
}

#[test]
fn sync_publishes_to_new_readers() {
    run(2, |s| async move {
        sync_publishes(s, "/data-sync1", 1).await;
        sync_publishes(s, "/data-sync2", 2).await;
    });
}

/// A file grown by truncate keeps a hole past its data: no blocks, the bytes read as
/// zeros. Writing from the end of the data fills the hole without changing the length
/// (the FUSE mount's path for fio's fallocate-then-write); a plain append writes the
/// hole out first, and shrinking into the hole keeps the data.
#[test]
fn grown_files_hold_a_hole_of_zeros() {
    run(2, |s| async move {
        let fs = &s.fs;
        let path = "/data-hole";
        let head = data(BLOCK + 5, 41);
        fs.write_file(path, &head).await.unwrap();
        let before = block_counts(s).await;
        let len = (3 * BLOCK + 17) as u64;
        fs.truncate(path, len).await.unwrap();
        let st = fs.stat(path).await.unwrap();
        assert_eq!((st.len, st.tail_zeros), (len, len - head.len() as u64));
        assert_eq!(block_counts(s).await, before, "growing wrote blocks");
        let mut want = head.clone();
        want.resize(len as usize, 0);
        assert!(
            fs.read_file(path).await.unwrap() == want,
            "read of the hole"
        );
        let mut r = fs.open(path).await.unwrap();
        let mut buf = vec![7u8; 100];
        r.read_exact_at(head.len() as u64 - 50, &mut buf)
            .await
            .unwrap();
        assert!(
            buf == want[head.len() - 50..head.len() + 50],
            "pread across"
        );

        // fill part of the hole from the data's end: the length stays
        let fill = data(BLOCK, 42);
        let mut w = fs.append_to_data(path).await.unwrap();
        assert_eq!(w.pos(), head.len() as u64);
        w.write(&fill).await.unwrap();
        let st = w.close().await.unwrap();
        assert_eq!(
            (st.len, st.tail_zeros),
            (len, len - (head.len() + BLOCK) as u64)
        );
        want[head.len()..head.len() + BLOCK].copy_from_slice(&fill);
        assert!(fs.read_file(path).await.unwrap() == want, "after filling");

        // a writer that ends early but extends the file on close
        let mut w = fs.append_to_data(path).await.unwrap();
        w.write(b"xyz").await.unwrap();
        w.extend_to(len + 10);
        let st = w.close().await.unwrap();
        assert_eq!(st.len, len + 10);
        let at = head.len() + BLOCK;
        want[at..at + 3].copy_from_slice(b"xyz");
        want.resize(len as usize + 10, 0);
        assert!(fs.read_file(path).await.unwrap() == want, "after extend_to");

        // shrink into the hole: the data stays, the hole shortens
        fs.truncate(path, (at + 4) as u64).await.unwrap();
        want.truncate(at + 4);
        assert_eq!(fs.stat(path).await.unwrap().tail_zeros, 1);
        // a plain append lands at the length: the hole is written out first
        let mut w = fs.append(path).await.unwrap();
        w.write(b"end").await.unwrap();
        let st = w.close().await.unwrap();
        assert_eq!((st.len, st.tail_zeros), (at as u64 + 7, 0));
        want.extend_from_slice(b"end");
        assert!(fs.read_file(path).await.unwrap() == want, "after append");
        fs.delete(path, false).await.unwrap();
    });
}

/// Distinct values of `progress` seen by a task that runs whenever the runtime lets it,
/// while `work` runs beside it on the same (single) thread.
async fn progress_seen_while<F: std::future::Future<Output = ()>>(
    progress: &std::sync::Arc<std::sync::atomic::AtomicUsize>,
    work: F,
) -> usize {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let done = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn({
        let (progress, done) = (progress.clone(), done.clone());
        async move {
            let mut seen = std::collections::BTreeSet::new();
            while !done.load(Ordering::Relaxed) {
                seen.insert(progress.load(Ordering::Relaxed));
                tokio::task::yield_now().await;
            }
            seen.len()
        }
    });
    work.await;
    done.store(true, Ordering::Relaxed);
    watcher.await.unwrap()
}

/// Short-circuit reads and writes are plain preads and pwrites that never wait; they
/// must still give the runtime thread back now and then, or every task woken meanwhile
/// (another writer's master reply) waits until a whole file is done.
#[test]
fn local_reads_and_writes_let_other_tasks_run() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let s = common::shared(2);
    let mut conf = s.cluster.client_conf();
    conf.client.short_circuit = true;
    conf.client.frame_size = curvine_common::conf::ByteSize(256 << 10);
    // one thread: the watcher runs only when the reader or writer yields
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let fs = CurvineFs::connect(conf).await.unwrap();
        let body = data(3 * BLOCK, 41);
        let path = "/data-yield/f";
        let piece = 128 << 10;
        let progress = Arc::new(AtomicUsize::new(0));
        let seen = progress_seen_while(&progress, async {
            let mut w = fs.create(path, true).await.unwrap();
            for c in body.chunks(piece) {
                w.write(c).await.unwrap();
                progress.fetch_add(c.len(), Ordering::Relaxed);
            }
            w.close().await.unwrap();
        })
        .await;
        // 96 frames of 256 KiB; without yields only the master and worker calls around
        // each of the three blocks let the watcher in
        assert!(seen >= 48, "the writer let other tasks run {seen} times");

        progress.store(0, Ordering::Relaxed);
        let mut back = vec![0u8; body.len()];
        let seen = progress_seen_while(&progress, async {
            let mut r = fs.open(path).await.unwrap();
            for c in back.chunks_mut(piece) {
                r.read_full(c).await.unwrap();
                progress.fetch_add(c.len(), Ordering::Relaxed);
            }
        })
        .await;
        assert!(back == body, "{path}: content differs");
        // one yield per MiB read: 24
        assert!(seen >= 16, "the reader let other tasks run {seen} times");
    });
}
