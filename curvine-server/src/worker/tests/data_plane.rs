//! Data-plane behaviour over real TCP connections.

use curvine_common::checksum::{chunk_crcs, verify_chunks};
use curvine_common::frame::write_frame;
use curvine_common::proto::{DataOp, StorageTier};
use curvine_common::{BlockId, FsError};
use tokio::io::AsyncWriteExt;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_round_trip_odd_sizes() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = TestServer::start(&conf_with(tmp.path(), &["MEM:16MB"])).await;
    let sizes = [0, 1, CS - 1, CS, CS + 1, 5 * CS + 7, 700 * CS + 3];
    let mut s = connect(srv.addr).await;
    for (i, &n) in sizes.iter().enumerate() {
        let id = 100 + i as u64;
        let data = pattern(n, i as u8);
        // one pooled connection for every operation, frames of 2 chunks
        write_on(&mut s, id, &data, 2 * CS, n as u64, "")
            .await
            .unwrap();
        let (start, got) = read_on(&mut s, id, 0, 0).await.unwrap();
        assert_eq!(start, 0);
        assert_eq!(got, data, "size {n}");
        assert_eq!(
            srv.store.block_info(BlockId(id)).unwrap(),
            Some((n as u64, StorageTier::Mem))
        );
    }
    // a range in the middle is widened to chunk boundaries
    let data = pattern(700 * CS + 3, 6);
    let (start, got) = read_on(&mut s, 106, CS as u64 + 10, 3 * CS as u64)
        .await
        .unwrap();
    assert_eq!(start, CS as u64);
    assert_eq!(got, &data[CS..5 * CS]);
    let (start, got) = read_on(&mut s, 106, 699 * CS as u64 + 1, 0).await.unwrap();
    assert_eq!(start, 699 * CS as u64);
    assert_eq!(got, &data[699 * CS..]);
    assert!(staging_empty(tmp.path()));
    srv.stop().await;
}

#[tokio::test]
async fn bad_crc_is_rejected_and_no_block_appears() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = TestServer::start(&conf_with(tmp.path(), &["MEM:1MB"])).await;
    let mut s = connect(srv.addr).await;
    write_frame(&mut s, &open_hdr(DataOp::WriteOpen, 7), &[])
        .await
        .unwrap();
    recv(&mut s).await.unwrap();
    let data = pattern(3 * CS, 1);
    let mut h = open_hdr(DataOp::WriteData, 7);
    h.crcs = chunk_crcs(&data, CS);
    h.crcs[1] ^= 1;
    write_frame(&mut s, &h, &data).await.unwrap();
    let e = recv(&mut s).await.unwrap_err();
    assert!(
        matches!(e, FsError::ChecksumMismatch { block_id: 7, .. }),
        "{e}"
    );
    assert!(wait_until(5, || srv.used(0) == 0 && staging_empty(tmp.path())).await);
    assert!(srv.store.block_info(BlockId(7)).unwrap().is_none());
    assert!(matches!(
        read_block(srv.addr, 7).await,
        Err(FsError::BlockNotFound { .. })
    ));
    srv.stop().await;
}

#[tokio::test]
async fn short_circuit_write_and_read() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = TestServer::start(&conf_with(tmp.path(), &["MEM:1MB"])).await;
    let mut s = connect(srv.addr).await;
    let data = pattern(3 * CS + 100, 9);
    let mut open = open_hdr(DataOp::WriteOpen, 42);
    open.short_circuit = true;
    open.reserve = data.len() as u64;
    write_frame(&mut s, &open, &[]).await.unwrap();
    let ok = recv(&mut s).await.unwrap();
    assert!(ok.path.contains("staging"), "{}", ok.path);
    std::fs::write(&ok.path, &data).unwrap();
    let mut c = open_hdr(DataOp::WriteCommit, 42);
    c.len = data.len() as u64;
    c.crcs = chunk_crcs(&data, CS);
    write_frame(&mut s, &c, &[]).await.unwrap();
    assert_eq!(recv(&mut s).await.unwrap().len, data.len() as u64);

    let mut r = open_hdr(DataOp::ReadOpen, 42);
    r.short_circuit = true;
    write_frame(&mut s, &r, &[]).await.unwrap();
    let ok = recv(&mut s).await.unwrap();
    assert_eq!(ok.block_len, data.len() as u64);
    assert_eq!(ok.chunk_size as usize, CS);
    let on_disk = std::fs::read(&ok.path).unwrap();
    assert_eq!(on_disk, data);
    assert!(verify_chunks(&on_disk, CS, &ok.crcs).is_ok());
    assert_eq!(ok.crcs.len(), 4);
    let (p, sc) = crate::worker::block_path(&srv_dirs(&srv), 42).unwrap();
    assert_eq!(p.display().to_string(), ok.path);
    assert!(sc.exists());
    srv.stop().await;
}

fn srv_dirs(srv: &TestServer) -> Vec<curvine_common::conf::TierDir> {
    srv.store
        .lock()
        .tiers
        .iter()
        .map(|t| curvine_common::conf::TierDir {
            tier: t.tier,
            capacity: Some(t.capacity),
            path: t.dir.clone(),
        })
        .collect()
}

#[tokio::test]
async fn short_circuit_commit_with_wrong_length_fails_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = TestServer::start(&conf_with(tmp.path(), &["MEM:1MB"])).await;
    let mut s = connect(srv.addr).await;
    let mut open = open_hdr(DataOp::WriteOpen, 43);
    open.short_circuit = true;
    write_frame(&mut s, &open, &[]).await.unwrap();
    let ok = recv(&mut s).await.unwrap();
    std::fs::write(&ok.path, pattern(CS + 1, 0)).unwrap();
    let mut c = open_hdr(DataOp::WriteCommit, 43);
    c.len = CS as u64 + 1;
    c.crcs = vec![0]; // needs two
    write_frame(&mut s, &c, &[]).await.unwrap();
    assert!(matches!(
        recv(&mut s).await,
        Err(FsError::InvalidArgument { .. })
    ));
    assert!(wait_until(5, || srv.used(0) == 0 && staging_empty(tmp.path())).await);
    assert!(srv.store.block_info(BlockId(43)).unwrap().is_none());
    srv.stop().await;
}

#[tokio::test]
async fn disconnect_mid_write_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = TestServer::start(&conf_with(tmp.path(), &["MEM:1MB"])).await;
    let mut s = connect(srv.addr).await;
    write_frame(&mut s, &open_hdr(DataOp::WriteOpen, 5), &[])
        .await
        .unwrap();
    recv(&mut s).await.unwrap();
    assert!(srv.used(0) > 0);
    let data = pattern(2 * CS, 3);
    let mut h = open_hdr(DataOp::WriteData, 5);
    h.crcs = chunk_crcs(&data, CS);
    write_frame(&mut s, &h, &data).await.unwrap();
    // half a frame, then vanish
    s.write_all(&[0, 0, 1, 0, 0, 0]).await.unwrap();
    drop(s);
    assert!(wait_until(5, || srv.used(0) == 0 && staging_empty(tmp.path())).await);
    assert!(srv.store.block_info(BlockId(5)).unwrap().is_none());
    // the block id is still writable afterwards
    write_block(srv.addr, 5, &data, 0).await.unwrap();
    assert_eq!(read_block(srv.addr, 5).await.unwrap(), data);
    srv.stop().await;
}

#[tokio::test]
async fn garbage_then_normal_write_works() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = TestServer::start(&conf_with(tmp.path(), &["MEM:1MB"])).await;
    let data = pattern(CS + 5, 2);
    write_block(srv.addr, 1, &data, 0).await.unwrap();
    for garbage in [&[0xffu8; 64][..], b"GET / HTTP/1.1\r\n\r\n", &[0, 0, 0, 1]] {
        let mut s = connect(srv.addr).await;
        s.write_all(garbage).await.unwrap();
        let _ = s.shutdown().await;
        assert!(recv(&mut s).await.is_err());
    }
    // oversized payload and unknown op
    let mut s = connect(srv.addr).await;
    let big = vec![0u8; (4 << 20) + 1];
    let _ = write_frame(&mut s, &open_hdr(DataOp::WriteData, 1), &big).await;
    assert!(matches!(
        recv(&mut s).await,
        Err(FsError::Protocol { .. }) | Err(FsError::Io { .. })
    ));
    let mut s = connect(srv.addr).await;
    let mut h = open_hdr(DataOp::WriteOpen, 1);
    h.op = 99;
    write_frame(&mut s, &h, &[]).await.unwrap();
    assert!(matches!(recv(&mut s).await, Err(FsError::Protocol { .. })));
    write_block(srv.addr, 2, &data, 0).await.unwrap();
    assert_eq!(read_block(srv.addr, 2).await.unwrap(), data);
    assert_eq!(read_block(srv.addr, 1).await.unwrap(), data);
    srv.stop().await;
}

#[tokio::test]
async fn auth_token_is_required_when_configured() {
    let tmp = tempfile::tempdir().unwrap();
    let mut conf = conf_with(tmp.path(), &["MEM:1MB"]);
    conf.cluster.auth_token = "s3cret".into();
    let srv = TestServer::start(&conf).await;
    let data = pattern(100, 1);
    let e = write_block(srv.addr, 1, &data, 0).await.unwrap_err();
    assert!(matches!(e, FsError::Unauthenticated { .. }), "{e}");
    let mut s = connect(srv.addr).await;
    let e = write_on(&mut s, 1, &data, CS, 0, "wrong")
        .await
        .unwrap_err();
    assert!(matches!(e, FsError::Unauthenticated { .. }), "{e}");
    let mut s = connect(srv.addr).await;
    write_on(&mut s, 1, &data, CS, 0, "s3cret").await.unwrap();
    // reads need it too
    let e = read_block(srv.addr, 1).await.unwrap_err();
    assert!(matches!(e, FsError::Unauthenticated { .. }), "{e}");
    let mut r = open_hdr(DataOp::ReadOpen, 1);
    r.token = "s3cret".into();
    r.short_circuit = true;
    write_frame(&mut s, &r, &[]).await.unwrap();
    assert_eq!(recv(&mut s).await.unwrap().block_len, 100);
    srv.stop().await;
}

#[tokio::test]
async fn existing_block_cannot_be_rewritten() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = TestServer::start(&conf_with(tmp.path(), &["MEM:1MB"])).await;
    let data = pattern(10, 1);
    write_block(srv.addr, 9, &data, 0).await.unwrap();
    let e = write_block(srv.addr, 9, &pattern(10, 2), 0)
        .await
        .unwrap_err();
    assert!(matches!(e, FsError::AlreadyExists { .. }), "{e}");
    assert_eq!(read_block(srv.addr, 9).await.unwrap(), data);
    srv.stop().await;
}

#[tokio::test]
async fn full_tier_demotes_lru_blocks_to_the_next_tier() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = TestServer::start(&conf_with(tmp.path(), &["MEM:64KB", "SSD:1MB"])).await;
    let blk = 24 * 1024;
    for id in 1..=2u64 {
        let t = write_block(srv.addr, id, &pattern(blk, id as u8), blk as u64)
            .await
            .unwrap();
        assert_eq!(t, StorageTier::Mem);
    }
    // block 1 was read last, so block 2 is the LRU one
    read_block(srv.addr, 1).await.unwrap();
    let t = write_block(srv.addr, 3, &pattern(blk, 3), blk as u64)
        .await
        .unwrap();
    assert_eq!(t, StorageTier::Mem);
    assert_eq!(
        srv.store.block_info(BlockId(2)).unwrap(),
        Some((blk as u64, StorageTier::Ssd))
    );
    assert_eq!(
        srv.store.block_info(BlockId(1)).unwrap(),
        Some((blk as u64, StorageTier::Mem))
    );
    for id in 1..=3u64 {
        assert_eq!(
            read_block(srv.addr, id).await.unwrap(),
            pattern(blk, id as u8)
        );
    }
    // larger than MEM altogether: falls back to SSD
    let t = write_block(srv.addr, 4, &pattern(CS, 4), 128 << 10)
        .await
        .unwrap();
    assert_eq!(t, StorageTier::Ssd);
    // the demotion shows in the incremental report with the new tier
    let (added, _) = srv.store.take_pending();
    assert!(added
        .iter()
        .any(|r| r.block_id == 2 && r.tier == StorageTier::Ssd as i32));
    srv.stop().await;
}

#[tokio::test]
async fn all_tiers_full_is_no_space_without_partial_block() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = TestServer::start(&conf_with(tmp.path(), &["MEM:32KB", "SSD:32KB"])).await;
    let blk = 24 * 1024;
    write_block(srv.addr, 1, &pattern(blk, 1), blk as u64)
        .await
        .unwrap();
    write_block(srv.addr, 2, &pattern(blk, 2), blk as u64)
        .await
        .unwrap();
    assert_eq!(
        srv.store.block_info(BlockId(1)).unwrap().unwrap().1,
        StorageTier::Ssd
    );
    let e = write_block(srv.addr, 3, &pattern(blk, 3), blk as u64)
        .await
        .unwrap_err();
    assert!(matches!(e, FsError::NoSpace { .. }), "{e}");
    assert!(e.to_string().contains("24576"), "{e}");
    // a write that grows past its reservation and the tier is refused too
    let e = write_block(srv.addr, 4, &pattern(blk, 4), 4096)
        .await
        .unwrap_err();
    assert!(matches!(e, FsError::NoSpace { .. }), "{e}");
    assert!(wait_until(5, || staging_empty(tmp.path())).await);
    assert!(
        srv.store.block_info(BlockId(3)).unwrap().is_none()
            && srv.store.block_info(BlockId(4)).unwrap().is_none()
    );
    assert!(wait_until(5, || srv.used(0) == blk as u64 && srv.used(1) == blk as u64).await);
    assert_eq!(read_block(srv.addr, 1).await.unwrap(), pattern(blk, 1));
    srv.stop().await;
}

#[tokio::test]
async fn abort_releases_the_reservation_and_keeps_the_connection() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = TestServer::start(&conf_with(tmp.path(), &["MEM:1MB"])).await;
    let mut s = connect(srv.addr).await;
    write_frame(&mut s, &open_hdr(DataOp::WriteOpen, 3), &[])
        .await
        .unwrap();
    recv(&mut s).await.unwrap();
    let data = pattern(CS, 1);
    let mut h = open_hdr(DataOp::WriteData, 3);
    h.crcs = chunk_crcs(&data, CS);
    write_frame(&mut s, &h, &data).await.unwrap();
    write_frame(&mut s, &open_hdr(DataOp::WriteAbort, 3), &[])
        .await
        .unwrap();
    write_on(&mut s, 4, &data, CS, 0, "").await.unwrap();
    assert!(srv.store.block_info(BlockId(3)).unwrap().is_none());
    assert_eq!(srv.used(0), CS as u64);
    assert!(staging_empty(tmp.path()));
    srv.stop().await;
}

/// Past `worker.max_connections` the accept loop waits (and says so in its task state)
/// until a connection closes; then the next caller is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_wait_for_one_to_close() {
    use curvine_common::tasks::state_name;
    let tmp = tempfile::tempdir().unwrap();
    let mut conf = conf_with(tmp.path(), &["MEM:16MB"]);
    conf.worker.max_connections = 2;
    let srv = TestServer::start(&conf).await;
    let at_limit = |want: bool| {
        let t = srv.task.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            while (state_name(t.report().state) == "busy") != want {
                assert!(tokio::time::Instant::now() < deadline, "{:?}", t.report());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let mut a = connect(srv.addr).await;
    let b = connect(srv.addr).await;
    at_limit(true).await;
    // the third waits in the backlog; a closed connection lets it in
    let mut c = connect(srv.addr).await;
    drop(b);
    let data = pattern(3 * CS + 1, 3);
    write_on(&mut c, 1, &data, CS, data.len() as u64, "")
        .await
        .unwrap();
    assert_eq!(read_on(&mut a, 1, 0, 0).await.unwrap().1, data);
    at_limit(true).await;
    srv.stop().await;
}
