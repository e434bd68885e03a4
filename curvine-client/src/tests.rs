//! Data-plane tests against the in-test fake worker (no master needed).

use std::time::{Duration, Instant};

use curvine_common::conf::{ByteSize, Dur};
use curvine_common::proto::FileStatus;
use curvine_common::{BlockId, ClusterConf, FsError};

use crate::block_reader::BlockSource;
use crate::block_writer::{BlockWriteOpts, BlockWriter};
use crate::fake_worker::{located, FakeWorker};
use crate::pool::WorkerPool;
use crate::{CurvineFs, FsReader};

const CS: usize = 4096;
const BLOCK: u64 = 77 << 24;

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

fn conf(short_circuit: bool) -> ClusterConf {
    let mut c = ClusterConf::default();
    c.client.master_addrs = vec!["127.0.0.1:1".into()];
    c.client.short_circuit = short_circuit;
    c.client.hostname = "127.0.0.1".into();
    c.client.read_ahead = ByteSize(64 << 10);
    c.client.connect_timeout = Dur(Duration::from_secs(2));
    c
}

fn status(len: u64) -> FileStatus {
    FileStatus {
        id: 77,
        path: "/t/file".into(),
        name: "file".into(),
        file_type: 1,
        len,
        ..Default::default()
    }
}

fn write_opts(short_circuit: bool) -> BlockWriteOpts {
    BlockWriteOpts {
        token: String::new(),
        short_circuit,
        client_host: "127.0.0.1".into(),
        reserve: 1 << 20,
        direct_io: true,
        req: Default::default(),
    }
}

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("timed out")
}

#[tokio::test]
async fn remote_write_is_pipelined_and_committed() {
    let w = FakeWorker::start(CS).await;
    let pool = WorkerPool::new(Duration::from_secs(2));
    let block = located(BLOCK, 0, 0, &[&w]);
    let payload = data(3 * 4 * CS + 100);
    let mut bw = within(BlockWriter::open(&pool, &block, &write_opts(false)))
        .await
        .unwrap();
    // the fake never replies before the commit: a stop-and-wait client would hang here
    for frame in payload.chunks(4 * CS) {
        within(bw.write(frame)).await.unwrap();
    }
    assert_eq!(bw.written(), payload.len() as u64);
    let committed = within(bw.commit(&pool)).await.unwrap();
    assert_eq!(committed.len, payload.len() as u64);
    assert_eq!(committed.worker_ids, vec![u32::from(w.addr.port())]);
    assert_eq!(w.block(BLOCK).unwrap(), payload);
    assert_eq!(w.state.lock().unwrap().data_frames, 4);
    // the connection went back to the pool after the clean commit
    assert_eq!(pool.idle_count(&w.addr.to_string()), 1);
}

#[tokio::test]
async fn replicated_write_fails_naming_the_worker_that_did_not_commit() {
    let good = FakeWorker::start(CS).await;
    let bad = FakeWorker::start(CS).await;
    bad.state.lock().unwrap().fail_commit = true;
    let pool = WorkerPool::new(Duration::from_secs(2));
    let block = located(BLOCK, 0, 0, &[&good, &bad]);
    let mut bw = BlockWriter::open(&pool, &block, &write_opts(false))
        .await
        .unwrap();
    within(bw.write(&data(2 * CS))).await.unwrap();
    let e = within(bw.commit(&pool)).await.unwrap_err();
    assert!(e.to_string().contains(&bad.addr.to_string()), "{e}");
    assert!(good.block(BLOCK).is_some());
    assert!(bad.block(BLOCK).is_none());
}

/// A short-circuit writer of block `BLOCK` on `w`, and the pool it needs.
async fn short_circuit_writer(w: &FakeWorker) -> (WorkerPool, BlockWriter) {
    let pool = WorkerPool::new(Duration::from_secs(2));
    let block = located(BLOCK, 0, 0, &[w]);
    let bw = BlockWriter::open(&pool, &block, &write_opts(true))
        .await
        .unwrap();
    (pool, bw)
}

#[tokio::test]
async fn short_circuit_write_sends_all_crcs_at_commit() {
    let w = FakeWorker::start(CS).await;
    w.state.lock().unwrap().short_circuit = true;
    let (pool, mut bw) = short_circuit_writer(&w).await;
    let payload = data(5 * CS + 7);
    bw.write(&payload[..4 * CS]).await.unwrap();
    bw.write(&payload[4 * CS..]).await.unwrap();
    within(bw.commit(&pool)).await.unwrap();
    assert_eq!(w.block(BLOCK).unwrap(), payload);
    // nothing went over the socket but the open and the commit
    assert_eq!(w.state.lock().unwrap().data_frames, 0);
}

/// A short-circuit block on a disk tier is written with O_DIRECT (whole 4 KiB pieces)
/// and its short last piece buffered; the file holds exactly the data.
#[tokio::test]
async fn short_circuit_write_to_a_disk_tier_uses_direct_io() {
    // a disk directory (O_DIRECT is refused by some in-memory file systems)
    let w = FakeWorker::start_in(CS, std::path::Path::new("/var/tmp")).await;
    {
        let mut s = w.state.lock().unwrap();
        s.short_circuit = true;
        s.tier = curvine_common::proto::StorageTier::Ssd as i32;
    }
    let (pool, mut bw) = short_circuit_writer(&w).await;
    let payload = data(5 * CS + 7);
    assert_eq!(bw.direct_sinks(), 1, "O_DIRECT on the SSD tier");
    bw.write(&payload[..CS]).await.unwrap();
    bw.write(&payload[CS..4 * CS]).await.unwrap();
    bw.write(&payload[4 * CS..]).await.unwrap();
    within(bw.commit(&pool)).await.unwrap();
    assert!(w.block(BLOCK).unwrap() == payload);

    // buffered when configured off
    let mut opts = write_opts(true);
    opts.direct_io = false;
    let bw = BlockWriter::open(&pool, &located(BLOCK + 1, 0, 0, &[&w]), &opts)
        .await
        .unwrap();
    assert_eq!(bw.direct_sinks(), 0);
}

#[tokio::test]
async fn remote_read_verifies_and_serves_every_offset() {
    let w = FakeWorker::start(CS).await;
    let content = data(300_000);
    w.put_block(BLOCK, content.clone());
    let fs = CurvineFs::connect_lazy(conf(false)).unwrap();
    let blocks = vec![located(BLOCK, 0, content.len() as u64, &[&w])];
    let mut r = FsReader::new(fs, status(content.len() as u64), blocks);
    let mut all = vec![0u8; content.len() + 10];
    let n = within(r.read_full(&mut all)).await.unwrap();
    assert_eq!(n, content.len());
    assert_eq!(&all[..n], &content[..]);
    assert_eq!(within(r.read(&mut all)).await.unwrap(), 0, "EOF");
    // unaligned random reads, including a partial last chunk
    for (off, len) in [
        (5000u64, 10usize),
        (4095, 2),
        (299_990, 100),
        (123_457, 70_000),
    ] {
        let mut buf = vec![0u8; len];
        let got = within(r.pread(off, &mut buf)).await.unwrap();
        let end = (off as usize + len).min(content.len());
        assert_eq!(&buf[..got], &content[off as usize..end], "at {off}");
    }
    assert!(matches!(
        r.seek(300_001),
        Err(FsError::InvalidArgument { .. })
    ));
}

#[tokio::test]
async fn corrupted_payload_is_detected_naming_block_and_worker() {
    let w = FakeWorker::start(CS).await;
    w.put_block(BLOCK, data(50_000));
    w.state.lock().unwrap().corrupt_reads = true;
    let fs = CurvineFs::connect_lazy(conf(false)).unwrap();
    let mut r = FsReader::new(fs, status(50_000), vec![located(BLOCK, 0, 50_000, &[&w])]);
    let mut buf = vec![0u8; 1000];
    match within(r.read(&mut buf)).await {
        Err(FsError::ChecksumMismatch {
            block_id, worker, ..
        }) => {
            assert_eq!(block_id, BLOCK);
            assert_eq!(worker, w.addr.to_string());
        }
        other => panic!("expected a checksum mismatch, got {other:?}"),
    }
}

#[tokio::test]
async fn a_bad_replica_is_skipped_for_the_next_one() {
    let bad = FakeWorker::start(CS).await;
    let good = FakeWorker::start(CS).await;
    let content = data(40_000);
    bad.put_block(BLOCK, content.clone());
    good.put_block(BLOCK, content.clone());
    bad.state.lock().unwrap().corrupt_reads = true;
    let fs = CurvineFs::connect_lazy(conf(false)).unwrap();
    let blocks = vec![located(BLOCK, 0, 40_000, &[&bad, &good])];
    let mut r = FsReader::new(fs, status(40_000), blocks);
    let mut buf = vec![0u8; 40_000];
    within(r.read_exact_at(0, &mut buf)).await.unwrap();
    assert_eq!(buf, content);
    assert!(good.state.lock().unwrap().streamed_frames > 0);
}

#[tokio::test]
async fn reads_span_blocks_and_honour_the_masters_block_length() {
    let w = FakeWorker::start(CS).await;
    let a = data(3 * CS);
    let b: Vec<u8> = data(2 * CS + 10).iter().map(|x| x ^ 0x5a).collect();
    w.put_block(BLOCK, a.clone());
    w.put_block(BLOCK + 1, b.clone());
    // the master says block 1 is truncated to 5000 bytes (the worker holds more)
    let blocks = vec![
        located(BLOCK, 0, a.len() as u64, &[&w]),
        located(BLOCK + 1, a.len() as u64, 5000, &[&w]),
    ];
    let len = a.len() as u64 + 5000;
    let fs = CurvineFs::connect_lazy(conf(false)).unwrap();
    let mut r = FsReader::new(fs, status(len), blocks);
    let mut buf = vec![0u8; len as usize + 100];
    let n = within(r.read_full(&mut buf)).await.unwrap();
    assert_eq!(n as u64, len);
    assert_eq!(&buf[..a.len()], &a[..]);
    assert_eq!(&buf[a.len()..n], &b[..5000]);
}

#[tokio::test]
async fn short_circuit_read_uses_the_block_file_and_checks_crcs() {
    let w = FakeWorker::start(CS).await;
    w.state.lock().unwrap().short_circuit = true;
    let content = data(10 * CS + 123);
    w.put_block(BLOCK, content.clone());
    let len = content.len() as u64;
    let fs = CurvineFs::connect_lazy(conf(true)).unwrap();
    let blocks = vec![located(BLOCK, 0, len, &[&w])];
    let mut r = FsReader::new(fs.clone(), status(len), blocks.clone());
    let mut buf = vec![0u8; content.len()];
    within(r.read_exact_at(0, &mut buf)).await.unwrap();
    assert_eq!(buf, content);
    // partial-chunk reads go through the verified chunk cache
    let mut small = [0u8; 10];
    within(r.read_exact_at(CS as u64 * 3 + 5, &mut small))
        .await
        .unwrap();
    assert_eq!(&small[..], &content[3 * CS + 5..3 * CS + 15]);
    {
        let s = w.state.lock().unwrap();
        assert_eq!(s.sc_opens, 1);
        assert_eq!(s.streamed_frames, 0);
    }
    // corrupt the block file on disk: the next reader must notice
    let p = w.block_path(BLOCK);
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[2 * CS + 1] ^= 1;
    std::fs::write(&p, &bytes).unwrap();
    let mut r = FsReader::new(fs, status(len), blocks);
    let e = within(r.read_exact_at(0, &mut buf)).await.unwrap_err();
    match e {
        FsError::ChecksumMismatch {
            block_id,
            worker,
            message,
        } => {
            assert_eq!(block_id, BLOCK);
            assert_eq!(worker, w.addr.to_string());
            assert!(message.contains(&(2 * CS).to_string()), "{message}");
        }
        other => panic!("expected a checksum mismatch, got {other:?}"),
    }
}

#[tokio::test]
async fn block_source_reports_a_missing_block() {
    let w = FakeWorker::start(CS).await;
    let pool = WorkerPool::new(Duration::from_secs(2));
    let opts = CurvineFs::connect_lazy(conf(false)).unwrap().read_opts();
    let res = BlockSource::open(&pool, BlockId(BLOCK), 10, &w.location(), 0, 0, None, &opts).await;
    assert!(matches!(
        res,
        Err(FsError::BlockNotFound {
            block_id: BLOCK,
            ..
        })
    ));
}

#[tokio::test]
async fn connect_fails_fast_when_no_master_listens() {
    // a port that was just free: nothing listens there
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut c = conf(false);
    c.client.master_addrs = vec![format!("127.0.0.1:{port}")];
    c.client.connect_timeout = Dur(Duration::from_secs(1));
    let t = Instant::now();
    let e = CurvineFs::connect(c)
        .await
        .err()
        .expect("connect must fail");
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(matches!(e, FsError::Unavailable { .. }), "{e}");
    assert!(e.to_string().contains(&port.to_string()), "{e}");
}

#[tokio::test]
async fn bad_paths_are_rejected_before_any_rpc() {
    let fs = CurvineFs::connect_lazy(conf(false)).unwrap();
    for p in ["relative", "/a/../b", ""] {
        let e = fs.stat(p).await.unwrap_err();
        assert!(matches!(e, FsError::InvalidPath { .. }), "{p}: {e}");
    }
    let e = fs.mkdir("no/slash", true).await.unwrap_err();
    assert!(matches!(e, FsError::InvalidPath { .. }));
}

#[tokio::test]
async fn identity_override_keeps_the_connection() {
    let fs = CurvineFs::connect_lazy(conf(false)).unwrap();
    let other = fs.with_identity(1234, 99);
    let ci = other.caller_info();
    assert_eq!((ci.uid, ci.gid), (1234, 99));
    assert_eq!(ci.client_id, fs.caller_info().client_id);
    assert_eq!(ci.client_host, "127.0.0.1");
}

mod end_to_end {
    use super::*;
    use crate::fake_master::FakeMaster;

    async fn cluster(short_circuit: bool) -> (FakeWorker, FakeMaster, CurvineFs) {
        let w = FakeWorker::start(CS).await;
        w.state.lock().unwrap().short_circuit = short_circuit;
        // 10 chunks per block, 3 chunks per frame
        let (m, addr) = FakeMaster::start(10 * CS as u64, w.location()).await;
        let mut c = conf(short_circuit);
        c.client.master_addrs = vec![addr.to_string()];
        c.client.frame_size = ByteSize(3 * CS as u64);
        c.master.lease_timeout = Dur(Duration::from_millis(300));
        let fs = within(CurvineFs::connect(c)).await.unwrap();
        (w, m, fs)
    }

    async fn write_and_read_back(short_circuit: bool) {
        let (w, m, fs) = cluster(short_circuit).await;
        let content = data(25 * CS + 333); // 2.5 blocks
        let mut wr = within(fs.create("/e2e/f", false)).await.unwrap();
        // odd-sized writes exercise buffering, direct sends and block roll-over
        for piece in content.chunks(7 * CS + 5) {
            within(wr.write(piece)).await.unwrap();
        }
        within(wr.flush()).await.unwrap();
        assert_eq!(wr.pos(), content.len() as u64);
        let st = within(wr.close()).await.unwrap();
        assert_eq!(st.len, content.len() as u64);
        {
            let s = m.state.lock().unwrap();
            assert_eq!(s.add_blocks.len(), 3);
            // each add_block reports the block filled before it
            assert!(s.add_blocks[0].previous.is_empty());
            assert_eq!(s.add_blocks[1].previous.len(), 1);
            assert_eq!(s.add_blocks[1].previous[0].len, 10 * CS as u64);
            let done = &s.completes[0];
            assert_eq!(done.len, content.len() as u64);
            assert_eq!(done.blocks.len(), 1);
            assert_eq!(done.blocks[0].len, 5 * CS as u64 + 333);
        }
        assert_eq!(w.state.lock().unwrap().blocks.len(), 3);
        let back = within(fs.read_file("/e2e/f")).await.unwrap();
        assert_eq!(back, content);
        // The in-memory copy of remote blocks outlives its writer for the next one.
        drop(wr);
        let kept = fs.inner.copies.kept();
        if short_circuit {
            assert!(
                kept.is_empty(),
                "short-circuit blocks keep no copy: {kept:?}"
            );
            return;
        }
        assert_eq!(kept.len(), 1);
        assert!(kept[0] >= 10 * CS, "room for a whole block: {kept:?}");
        let other: Vec<u8> = content.iter().rev().map(|b| b ^ 0x5a).collect();
        let mut wr = within(fs.create("/e2e/g", false)).await.unwrap();
        within(wr.write(&other[..20 * CS])).await.unwrap();
        assert!(
            fs.inner.copies.kept().is_empty(),
            "the second writer took it: {:?}",
            fs.inner.copies.kept()
        );
        within(wr.write(&other[20 * CS..])).await.unwrap();
        within(wr.close()).await.unwrap();
        drop(wr);
        assert_eq!(fs.inner.copies.kept().len(), 1);
        assert_eq!(within(fs.read_file("/e2e/g")).await.unwrap(), other);
        assert_eq!(within(fs.read_file("/e2e/f")).await.unwrap(), content);
    }

    #[tokio::test]
    async fn remote_write_and_read_back_across_blocks() {
        write_and_read_back(false).await;
    }

    #[tokio::test]
    async fn short_circuit_write_and_read_back_across_blocks() {
        write_and_read_back(true).await;
    }

    #[tokio::test]
    async fn empty_file_completes_without_blocks() {
        let (_w, m, fs) = cluster(false).await;
        within(fs.write_file("/e2e/empty", b"")).await.unwrap();
        let s = m.state.lock().unwrap();
        assert!(s.add_blocks.is_empty());
        assert_eq!(s.completes[0].len, 0);
    }

    #[tokio::test]
    async fn open_writers_renew_their_lease_until_closed() {
        let (_w, m, fs) = cluster(false).await;
        let mut wr = within(fs.create("/e2e/lease", false)).await.unwrap();
        wr.write(b"x").await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while m.state.lock().unwrap().renewals < 2 {
            assert!(Instant::now() < deadline, "lease never renewed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        within(wr.close()).await.unwrap();
    }

    #[tokio::test]
    async fn a_failed_commit_fails_close_and_later_calls() {
        let (w, _m, fs) = cluster(false).await;
        w.state.lock().unwrap().fail_commit = true;
        let mut wr = within(fs.create("/e2e/fail", false)).await.unwrap();
        wr.write(&data(100)).await.unwrap();
        let e = within(wr.close()).await.unwrap_err();
        assert!(e.to_string().contains("disk failed"), "{e}");
        assert!(wr.write(b"more").await.is_err());
    }
}
