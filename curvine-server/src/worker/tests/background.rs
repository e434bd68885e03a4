//! Re-replication copies between two data servers, and the scrubber.

use std::sync::Arc;
use std::time::{Duration, Instant};

use curvine_common::proto::{CopyCommand, StorageTier, WorkerAddress};
use curvine_common::BlockId;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::*;
use crate::worker::layout::{block_file, sidecar_of};
use crate::worker::replicator::{start_copies, Background, CopyCtx};
use crate::worker::scrubber::scrub_pass;

fn cmd(id: u64, len: u64, src: SocketAddr) -> CopyCommand {
    CopyCommand {
        block_id: id,
        len,
        tier: StorageTier::Mem as i32,
        source: Some(WorkerAddress {
            worker_id: 1,
            host: src.ip().to_string(),
            data_port: u32::from(src.port()),
        }),
    }
}

fn ctx(store: &Arc<BlockStore>, bg: &Arc<Background>) -> CopyCtx {
    CopyCtx {
        store: store.clone(),
        bg: bg.clone(),
        auth_token: String::new(),
        max_frame: 4 << 20,
        timeout: Duration::from_secs(10),
        loads: None,
    }
}

async fn run(ctx: &CopyCtx, cmds: Vec<CopyCommand>) {
    let tracker = TaskTracker::new();
    start_copies(ctx, cmds, &tracker, &CancellationToken::new());
    tracker.close();
    tracker.wait().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_blocks_between_workers_and_frees_every_slot() {
    let t1 = tempfile::tempdir().unwrap();
    let t2 = tempfile::tempdir().unwrap();
    let src = TestServer::start(&conf_with(t1.path(), &["MEM:64MB"])).await;
    let dst = TestServer::start(&conf_with(t2.path(), &["MEM:64MB"])).await;
    let sizes = [0usize, 1, CS - 1, CS, 3 * CS + 5, 400 * CS + 17];
    let mut cmds = Vec::new();
    for (i, n) in sizes.iter().enumerate() {
        let id = 500 + i as u64;
        write_block(src.addr, id, &pattern(*n, i as u8), 0)
            .await
            .unwrap();
        cmds.push(cmd(id, *n as u64, src.addr));
    }
    // a copy shorter than the stored block (a truncated file keeps a prefix)
    cmds.push(CopyCommand {
        block_id: 505,
        ..cmd(505, 0, src.addr)
    });
    let bg = Arc::new(Background::new(2));
    let c = ctx(&dst.store, &bg);
    run(&c, cmds[..sizes.len()].to_vec()).await;
    let (results, bad) = bg.take_report();
    assert!(bad.is_empty());
    assert_eq!(results.len(), sizes.len());
    assert!(results.iter().all(|r| r.ok), "{results:?}");
    for (i, n) in sizes.iter().enumerate() {
        let id = 500 + i as u64;
        assert_eq!(
            read_block(dst.addr, id).await.unwrap(),
            pattern(*n, i as u8)
        );
    }
    assert_eq!((bg.active_copies(), bg.free_permits()), (0, 2));
    // a prefix copy of a long block
    write_block(src.addr, 600, &pattern(10 * CS, 9), 0)
        .await
        .unwrap();
    run(&c, vec![cmd(600, (3 * CS + 100) as u64, src.addr)]).await;
    assert!(bg.take_report().0[0].ok);
    assert_eq!(
        read_block(dst.addr, 600).await.unwrap(),
        &pattern(10 * CS, 9)[..3 * CS + 100]
    );
    assert!(staging_empty(t2.path()));
    src.stop().await;
    dst.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_copies_leave_nothing_behind() {
    let t1 = tempfile::tempdir().unwrap();
    let t2 = tempfile::tempdir().unwrap();
    let src = TestServer::start(&conf_with(t1.path(), &["MEM:64MB"])).await;
    let dst = TestServer::start(&conf_with(t2.path(), &["MEM:64MB"])).await;
    let body = pattern(20 * CS, 3);
    write_block(src.addr, 7, &body, 0).await.unwrap();
    // corrupt the source: the copy must verify and refuse it
    let p = block_file(&t1.path().join("t0"), 7);
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[5 * CS + 1] ^= 1;
    std::fs::write(&p, &bytes).unwrap();
    assert!(sidecar_of(&p).exists());
    let dead = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let bg = Arc::new(Background::new(1));
    let c = ctx(&dst.store, &bg);
    run(
        &c,
        vec![
            cmd(7, body.len() as u64, src.addr),       // checksum mismatch
            cmd(8, 100, src.addr),                     // not on the source
            cmd(9, 100, dead),                         // source unreachable
            cmd(7, (body.len() * 2) as u64, src.addr), // longer than the source's block
        ],
    )
    .await;
    let (results, _) = bg.take_report();
    assert!(results.iter().all(|r| !r.ok), "{results:?}");
    assert!(
        results.iter().any(|r| r.error.contains("hecksum")),
        "{results:?}"
    );
    assert_eq!((bg.active_copies(), bg.free_permits()), (0, 1));
    assert!(dst.store.block_ids().unwrap().is_empty());
    assert!(staging_empty(t2.path()));
    assert_eq!(dst.used(0), 0, "reservations released");
    src.stop().await;
    dst.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrubber_removes_a_corrupt_block_and_reports_it() {
    let t = tempfile::tempdir().unwrap();
    let srv = TestServer::start(&conf_with(t.path(), &["MEM:64MB"])).await;
    for id in 1..=4u64 {
        write_block(srv.addr, id, &pattern(50 * CS + 3, id as u8), 0)
            .await
            .unwrap();
    }
    let _ = srv.store.take_pending();
    let p = block_file(&t.path().join("t0"), 3);
    let mut bytes = std::fs::read(&p).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x10;
    std::fs::write(&p, &bytes).unwrap();
    let bg = Background::new(1);
    let stats = scrub_pass(&srv.store, &bg, 0, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!((stats.blocks, stats.bad), (4, 1));
    assert_eq!(bg.take_report().1, vec![3]);
    let (_, removed) = srv.store.take_pending();
    assert_eq!(removed, vec![3]);
    assert!(srv.store.block_info(BlockId(3)).unwrap().is_none());
    assert!(srv.store.block_info(BlockId(2)).unwrap().is_some());
    // a clean pass finds nothing
    let stats = scrub_pass(&srv.store, &bg, 0, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!((stats.blocks, stats.bad), (3, 0));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrubber_keeps_to_its_rate() {
    let t = tempfile::tempdir().unwrap();
    let srv = TestServer::start(&conf_with(t.path(), &["MEM:64MB"])).await;
    for id in 1..=4u64 {
        write_block(srv.addr, id, &pattern(256 << 10, id as u8), 0)
            .await
            .unwrap();
    }
    let bg = Background::new(1);
    let t0 = Instant::now();
    // 1 MiB at 4 MiB/s: about 250 ms
    let stats = scrub_pass(&srv.store, &bg, 4 << 20, &CancellationToken::new())
        .await
        .unwrap();
    let el = t0.elapsed();
    assert_eq!(stats.bytes, 1 << 20);
    assert!(el >= Duration::from_millis(200), "{el:?}");
    srv.stop().await;
}

/// Scrubber throughput unthrottled (figure for the closing note).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrubber_throughput_figure() {
    let t = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let srv = TestServer::start(&conf_with(t.path(), &["MEM:512MB"])).await;
    let body = pattern(8 << 20, 1);
    for id in 1..=16u64 {
        write_on(
            &mut connect(srv.addr).await,
            id,
            &body,
            1 << 20,
            8 << 20,
            "",
        )
        .await
        .unwrap();
    }
    let bg = Background::new(1);
    let t0 = Instant::now();
    let stats = scrub_pass(&srv.store, &bg, 0, &CancellationToken::new())
        .await
        .unwrap();
    let s = t0.elapsed().as_secs_f64();
    assert_eq!(stats.bytes, 128 << 20);
    println!(
        "FIGURE scrubber: {} MiB verified in {:.3}s = {:.0} MiB/s unthrottled (tmpfs, 4 KiB chunks, 1 thread)",
        stats.bytes >> 20,
        s,
        (stats.bytes >> 20) as f64 / s
    );
    srv.stop().await;
}
