//! Writes under mounts against a real S3 server on loopback (s3s-fs): `through` and
//! `async` uploads land in the bucket byte for byte, renames and deletes follow,
//! read-only mounts refuse writes, a TTL frees cached blocks, blocks of persisted files
//! leave a full last tier and come back on a read, and an upload to a store
//! that is down fails `close` naming the store and the key. Block size 96 KiB so that
//! multi-block files stay small.

mod common;

use std::time::Duration;

use common::ufs::{on_a_worker, run_s3, S3Env};
use curvine_client::proto::{MountInfo, MountMode, TtlAction};
use curvine_client::{CurvineFs, FsError};
use curvine_common::conf::{ByteSize, Dur, TierDir};
use curvine_common::proto::StorageTier;
use curvine_server::testing::s3::{object_data as data, options as s3_options, S3Server};
use curvine_server::testing::{wait_until, MiniCluster, TierSpec};

const BS: usize = 96 << 10;
const BUCKET: &str = "wbkt";

fn conf_hook(c: &mut curvine_common::ClusterConf) {
    c.master.block_size = ByteSize(BS as u64);
    c.master.persist_delay = Dur(Duration::from_millis(300));
    c.master.ttl_interval = Dur(Duration::from_millis(100));
    c.worker.chunk_size = ByteSize(16 << 10);
    c.worker.heartbeat_interval = Dur(Duration::from_millis(100));
}

/// One cluster (2 workers) and one S3 server for the tests of this binary.
fn run<F: std::future::Future<Output = ()>>(f: impl FnOnce(&'static S3Env) -> F) {
    run_s3(&[BUCKET], 2, conf_hook, f)
}

fn op_for(s3: &S3Server, bucket: &str) -> opendal::Operator {
    common::ufs::bucket_op(s3, bucket)
}

/// The object's bytes, or None when the bucket has no such key.
async fn object(s3: &S3Server, key: &str) -> Option<Vec<u8>> {
    match op_for(s3, BUCKET).read(key).await {
        Ok(b) => Some(b.to_vec()),
        Err(e) if e.kind() == opendal::ErrorKind::NotFound => None,
        Err(e) => panic!("read {key}: {e}"),
    }
}

fn mount_info(prefix: &str, path: &str, mode: MountMode, endpoint: &str) -> MountInfo {
    MountInfo {
        mode: mode as i32,
        ..common::ufs::mount_info(
            &format!("s3://{BUCKET}/{prefix}"),
            path,
            s3_options(endpoint),
        )
    }
}

#[test]
fn through_writes_are_in_the_bucket_when_close_returns() {
    run(|e| async move {
        e.fs.mount(mount_info(
            "w1",
            "/w1",
            MountMode::Through,
            &e.s3.endpoint(),
        ))
        .await
        .unwrap();
        let files = [
            ("empty", Vec::new()),
            ("small", data(1000, 1)),
            ("d/exact", data(BS, 2)),
            ("d/several", data(3 * BS + 7, 3)),
        ];
        e.fs.mkdir("/w1/d", true).await.unwrap();
        for (name, v) in &files {
            let path = format!("/w1/{name}");
            e.fs.write_file(&path, v).await.unwrap();
            // no wait: close returned after the upload
            let got = object(&e.s3, &format!("w1/{name}")).await;
            assert!(got.as_ref() == Some(v), "{path}: the bucket differs");
            let st = e.fs.stat(&path).await.unwrap();
            assert!(st.persisted, "{path}: not marked persisted");
            assert_eq!(st.ufs_key, *name);
            assert!(e.fs.read_file(&path).await.unwrap() == *v, "{path}");
        }
        // an append and a truncate are uploaded again before they return
        let tail = data(BS / 2, 9);
        let mut w = e.fs.append("/w1/d/exact").await.unwrap();
        w.write(&tail).await.unwrap();
        w.close().await.unwrap();
        let mut whole = files[2].1.clone();
        whole.extend_from_slice(&tail);
        assert!(object(&e.s3, "w1/d/exact").await.as_ref() == Some(&whole));
        assert!(e.fs.stat("/w1/d/exact").await.unwrap().persisted);
        e.fs.truncate("/w1/small", 10).await.unwrap();
        let got = object(&e.s3, "w1/small").await.unwrap();
        assert!(
            got == files[1].1[..10],
            "the truncate did not reach the bucket"
        );
        assert!(e.fs.stat("/w1/small").await.unwrap().persisted);
        // the cached blocks stay: a resync keeps the entry and its bytes
        e.fs.resync("/w1").await.unwrap();
        assert!(e.fs.read_file("/w1/d/several").await.unwrap() == files[3].1);
        let r = e.fs.report().await.unwrap();
        assert_eq!(r.persist_pending, 0, "{r:?}");
        e.fs.umount("/w1").await.unwrap();
    });
}

/// An append to a through file whose blocks a worker dropped before the master heard
/// of it (an eviction between heartbeats): the upload at close reads what that worker
/// no longer has from the object it came from, and the bucket gets the whole file.
#[test]
fn a_through_append_uploads_blocks_a_worker_dropped_unreported() {
    run(|e| async move {
        e.fs.mount(mount_info(
            "w9",
            "/w9",
            MountMode::Through,
            &e.s3.endpoint(),
        ))
        .await
        .unwrap();
        let first = data(2 * BS, 31);
        e.fs.write_file("/w9/f", &first).await.unwrap();
        // the block files go behind the workers' backs: their reports still list them
        let mut removed = 0;
        for b in e.fs.block_locations("/w9/f").await.unwrap() {
            for i in 0..e.cluster.worker_count() {
                let dirs: Vec<TierDir> = e
                    .cluster
                    .worker_dirs(i)
                    .into_iter()
                    .map(|path| TierDir {
                        tier: StorageTier::Mem,
                        capacity: None,
                        path,
                    })
                    .collect();
                if let Some((data_file, _)) = curvine_server::worker::block_path(&dirs, b.block_id)
                {
                    std::fs::remove_file(&data_file).unwrap();
                    removed += 1;
                }
            }
        }
        assert!(removed >= 2, "{removed} block files removed");
        let tail = data(1000, 32);
        let mut w = e.fs.append("/w9/f").await.unwrap();
        w.write(&tail).await.unwrap();
        w.close()
            .await
            .expect("the append's upload reads the dropped blocks from the store");
        let mut whole = first.clone();
        whole.extend_from_slice(&tail);
        assert!(object(&e.s3, "w9/f").await.as_ref() == Some(&whole));
        e.fs.umount("/w9").await.unwrap();
    });
}

#[test]
fn async_writes_reach_the_bucket_later_and_persist_forces_them() {
    run(|e| async move {
        e.fs.mount(mount_info("w2", "/w2", MountMode::Async, &e.s3.endpoint()))
            .await
            .unwrap();
        let v = data(2 * BS + 11, 4);
        e.fs.write_file("/w2/later", &v).await.unwrap();
        let st = e.fs.stat("/w2/later").await.unwrap();
        assert!(!st.persisted, "an async write was persisted at close");
        wait_until(Duration::from_secs(20), || async {
            object(&e.s3, "w2/later").await.as_ref() == Some(&v)
        })
        .await
        .expect("the persist job uploads the file");
        wait_until(Duration::from_secs(10), || async {
            e.fs.stat("/w2/later").await.unwrap().persisted
        })
        .await
        .expect("the file is marked persisted");

        // cv persist uploads at once, whatever the delay
        let w = data(BS + 1, 5);
        e.fs.write_file("/w2/now", &w).await.unwrap();
        let r = e.fs.persist("/w2").await.unwrap();
        assert!(r.files <= 1, "{r:?}");
        assert!(object(&e.s3, "w2/now").await.as_ref() == Some(&w));
        assert!(e.fs.stat("/w2/now").await.unwrap().persisted);
        let r = e.fs.report().await.unwrap();
        assert_eq!(r.persist_pending, 0, "{r:?}");
        e.fs.umount("/w2").await.unwrap();
    });
}

#[test]
fn cache_mode_never_writes_the_bucket() {
    run(|e| async move {
        e.fs.mount(mount_info("w3", "/w3", MountMode::Cache, &e.s3.endpoint()))
            .await
            .unwrap();
        e.fs.write_file("/w3/f", b"only here").await.unwrap();
        let st = e.fs.stat("/w3/f").await.unwrap();
        assert!(!st.persisted);
        assert_eq!(e.fs.report().await.unwrap().persist_pending, 0);
        assert_eq!(object(&e.s3, "w3/f").await, None);
        e.fs.umount("/w3").await.unwrap();
    });
}

#[test]
fn rename_and_delete_under_a_through_mount_follow_in_the_bucket() {
    run(|e| async move {
        let op = op_for(&e.s3, BUCKET);
        op.write("w4/dir/obj", b"in a dir".to_vec()).await.unwrap();
        e.fs.mount(mount_info(
            "w4",
            "/w4",
            MountMode::Through,
            &e.s3.endpoint(),
        ))
        .await
        .unwrap();
        let v = data(BS + 3, 6);
        e.fs.write_file("/w4/a", &v).await.unwrap();
        e.fs.rename("/w4/a", "/w4/b").await.unwrap();
        assert_eq!(object(&e.s3, "w4/a").await, None);
        assert!(object(&e.s3, "w4/b").await.as_ref() == Some(&v));
        let st = e.fs.stat("/w4/b").await.unwrap();
        assert_eq!(st.ufs_key, "b");
        assert!(st.persisted);
        assert!(e.fs.read_file("/w4/b").await.unwrap() == v);
        // the entry is the store's after a resync, with the same bytes
        e.fs.resync("/w4").await.unwrap();
        assert!(e.fs.read_file("/w4/b").await.unwrap() == v);

        // a directory the store holds objects under cannot be renamed atomically
        let err = e.fs.rename("/w4/dir", "/w4/dir2").await.unwrap_err();
        assert!(matches!(err, FsError::UnderStore { .. }), "{err:?}");
        assert!(err.to_string().contains("atomic"), "{err}");
        assert!(e.fs.stat("/w4/dir/obj").await.is_ok());
        assert!(object(&e.s3, "w4/dir/obj").await.is_some());
        // out of the mount: a cross-device link
        let err = e.fs.rename("/w4/b", "/w4-outside").await.unwrap_err();
        assert!(matches!(err, FsError::CrossDevice { .. }), "{err:?}");

        e.fs.delete("/w4/b", false).await.unwrap();
        assert_eq!(object(&e.s3, "w4/b").await, None);
        e.fs.delete("/w4/dir", true).await.unwrap();
        assert_eq!(object(&e.s3, "w4/dir/obj").await, None);
        e.fs.resync("/w4").await.unwrap();
        assert!(e.fs.list("/w4").await.unwrap().is_empty());
        e.fs.umount("/w4").await.unwrap();
    });
}

#[test]
fn a_read_only_mount_refuses_writes() {
    run(|e| async move {
        let op = op_for(&e.s3, BUCKET);
        op.write("w5/obj", b"fixed".to_vec()).await.unwrap();
        let mut m = mount_info("w5", "/w5", MountMode::Through, &e.s3.endpoint());
        m.read_only = true;
        e.fs.mount(m).await.unwrap();
        assert_eq!(e.fs.read_file("/w5/obj").await.unwrap(), b"fixed");
        let ro = |r: Result<(), FsError>| match r {
            Err(FsError::ReadOnly { .. }) => {}
            other => panic!("not refused as read-only: {other:?}"),
        };
        ro(e.fs.write_file("/w5/new", b"x").await);
        ro(e.fs.delete("/w5/obj", false).await);
        ro(e.fs.rename("/w5/obj", "/w5/obj2").await);
        ro(e.fs.mkdir("/w5/d", false).await.map(|_| ()));
        assert_eq!(FsError::ReadOnly { path: "/w5".into() }.errno(), 30);
        assert_eq!(
            object(&e.s3, "w5/obj").await.as_deref(),
            Some(&b"fixed"[..])
        );
        assert_eq!(object(&e.s3, "w5/new").await, None);
        e.fs.umount("/w5").await.unwrap();
    });
}

#[test]
fn a_ttl_frees_cached_blocks_of_files_not_opened_for_that_long() {
    run(|e| async move {
        let op = op_for(&e.s3, BUCKET);
        let v = data(2 * BS, 7);
        op.write("w6/obj", v.clone()).await.unwrap();
        let mut m = mount_info("w6", "/w6", MountMode::Through, &e.s3.endpoint());
        m.ttl_ms = 1500;
        m.ttl_action = TtlAction::Free as i32;
        e.fs.mount(m).await.unwrap();
        let opened = std::time::Instant::now();
        assert!(e.fs.read_file("/w6/obj").await.unwrap() == v);
        // (block_locations opens the file, which counts as an access: asked once)
        let blocks = e.fs.block_locations("/w6/obj").await.unwrap();
        assert_eq!(blocks.len(), 2);
        wait_until(Duration::from_secs(10), || async {
            blocks.iter().all(|b| on_a_worker(&e.cluster, b.block_id))
        })
        .await
        .expect("the fetched blocks are cached");
        wait_until(Duration::from_secs(15), || async {
            blocks.iter().all(|b| !on_a_worker(&e.cluster, b.block_id))
        })
        .await
        .expect("the TTL frees the blocks");
        assert!(
            opened.elapsed() >= Duration::from_millis(1400),
            "freed before the TTL"
        );
        // the entry stays, and the next read fetches the blocks again
        assert!(e.fs.read_file("/w6/obj").await.unwrap() == v);
        e.fs.umount("/w6").await.unwrap();
    });
}

#[test]
fn a_through_write_to_a_store_that_is_down_fails_close_naming_it() {
    let mut s3 = None;
    run(|_| async {
        s3 = Some(S3Server::start(&["down"]).await.unwrap());
    });
    let mut s3 = s3.unwrap();
    run(|e| {
        let s3 = &mut s3;
        async move {
            let mut m = mount_info("", "/w7", MountMode::Through, &s3.endpoint());
            m.ufs_uri = "s3://down".into();
            e.fs.mount(m).await.unwrap();
            s3.kill();
            let v = data(BS + 5, 8);
            let err = e.fs.write_file("/w7/f", &v).await.unwrap_err();
            assert!(matches!(err, FsError::UnderStore { .. }), "{err:?}");
            let msg = err.to_string();
            assert!(msg.contains("s3://down") && msg.contains('f'), "{msg}");
            // nothing is lost: the file stays in Curvine, pending, and uploads later
            assert!(e.fs.read_file("/w7/f").await.unwrap() == v);
            assert!(!e.fs.stat("/w7/f").await.unwrap().persisted);
            assert!(e.fs.report().await.unwrap().persist_pending >= 1);
            s3.restart().await.unwrap();
            e.fs.persist("/w7").await.unwrap();
            let got = op_for(s3, "down").read("f").await.unwrap().to_vec();
            assert!(got == v, "the retried upload differs");
            assert!(e.fs.stat("/w7/f").await.unwrap().persisted);
            e.fs.umount("/w7").await.unwrap();
        }
    });
}

#[test]
fn persisted_blocks_leave_a_full_last_tier_and_come_back_on_read() {
    run(|e| async move {
        // one worker whose only tier holds 5 blocks
        let cluster = MiniCluster::builder()
            .workers(1)
            .tiers(vec![TierSpec {
                tier: "MEM",
                capacity: 5 * BS as u64,
                tmpfs: false,
            }])
            .conf(conf_hook)
            .start()
            .await
            .unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        fs.mount(mount_info(
            "w8",
            "/w8",
            MountMode::Through,
            &e.s3.endpoint(),
        ))
        .await
        .unwrap();
        let a = data(4 * BS, 12);
        fs.write_file("/w8/a", &a).await.unwrap();
        let blocks_a = fs.block_locations("/w8/a").await.unwrap();
        assert!(blocks_a.iter().all(|b| on_a_worker(&cluster, b.block_id)));
        // b needs the room of two of a's blocks: they go once the worker has learned
        // that the store holds them
        let b = data(3 * BS, 13);
        wait_until(Duration::from_secs(20), || async {
            fs.write_file("/w8/b", &b).await.is_ok()
        })
        .await
        .expect("the write finds room by dropping persisted blocks");
        assert!(object(&e.s3, "w8/b").await.as_ref() == Some(&b));
        let gone = blocks_a
            .iter()
            .filter(|x| !on_a_worker(&cluster, x.block_id))
            .count();
        assert!(gone >= 2, "only {gone} blocks of a left the tier");
        // they come back on the next read, byte for byte
        assert!(fs.read_file("/w8/a").await.unwrap() == a);
        assert!(fs.read_file("/w8/b").await.unwrap() == b);
        fs.umount("/w8").await.unwrap();
        drop(fs);
        cluster.shutdown().await.unwrap();
    });
}
