//! Under-store mounts against a real S3 server on loopback (s3s-fs) and `file://`
//! directories: mount, metadata load, read-through via the workers, resync, free, bad
//! input. Block size 96 KiB so that multi-block objects stay small.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::ufs::{mount_info, names, on_a_worker, run_s3, S3Env};
use curvine_client::{CurvineFs, FileType, FsError};
use curvine_common::conf::{ByteSize, Dur};
use curvine_server::testing::s3::{
    object_data as data, options as s3_options, Proxy, S3Server, ACCESS_KEY,
};
use curvine_server::testing::{wait_until, MiniCluster};

const BS: usize = 96 << 10;
const BUCKET: &str = "bkt";

fn conf_hook(c: &mut curvine_common::ClusterConf) {
    c.master.block_size = ByteSize(BS as u64);
    c.worker.chunk_size = ByteSize(16 << 10);
    c.worker.heartbeat_interval = Dur(Duration::from_millis(100));
}

/// One cluster (2 workers) and one S3 server for the tests of this binary.
fn run<F: std::future::Future<Output = ()>>(f: impl FnOnce(&'static S3Env) -> F) {
    run_s3(&[BUCKET], 2, conf_hook, f)
}

fn bucket_op(s3: &S3Server) -> opendal::Operator {
    common::ufs::bucket_op(s3, BUCKET)
}

async fn put(s3: &S3Server, key: &str, bytes: &[u8]) {
    common::ufs::put(s3, BUCKET, key, bytes).await
}

#[test]
fn a_bucket_lists_stats_and_reads_byte_for_byte_then_from_cache() {
    run(|e| async move {
        let objects: Vec<(&str, Vec<u8>)> = vec![
            ("t1/empty", Vec::new()),
            ("t1/one", data(1, 1)),
            ("t1/dir/short", data(BS - 1, 2)),
            ("t1/dir/exact", data(BS, 3)),
            ("t1/dir/long", data(BS + 1, 4)),
            ("t1/dir/sub/several", data(3 * BS + 5, 5)),
            ("t1/ünï/日本 語.bin", data(1000, 6)),
        ];
        for (k, v) in &objects {
            put(&e.s3, k, v).await;
        }
        let proxy = Proxy::start(e.s3.addr).await.unwrap();
        let m =
            e.fs.mount(mount_info(
                &format!("s3://{BUCKET}/t1"),
                "/mnt1",
                s3_options(&proxy.endpoint()),
            ))
            .await
            .unwrap();
        assert_eq!(m.options["secret_access_key"], "***", "a secret was shown");
        let listed = e.fs.mounts().await.unwrap();
        let mine = listed.iter().find(|m| m.path == "/mnt1").expect("listed");
        assert_eq!(mine.options["secret_access_key"], "***");
        assert_eq!(mine.options["access_key_id"], ACCESS_KEY);

        assert_eq!(names(&e.fs, "/mnt1").await, ["dir", "empty", "one", "ünï"]);
        assert_eq!(
            names(&e.fs, "/mnt1/dir").await,
            ["exact", "long", "short", "sub"]
        );
        let st = e.fs.stat("/mnt1/dir").await.unwrap();
        assert_eq!(st.file_type, FileType::Dir as i32);
        for (k, v) in &objects {
            let path = format!("/mnt1/{}", k.strip_prefix("t1/").unwrap());
            let st = e.fs.stat(&path).await.unwrap();
            assert_eq!(st.len, v.len() as u64, "{path}");
            assert!(st.persisted, "{path}");
            assert!(st.mtime_ms > 0, "{path}");
            let got = e.fs.read_file(&path).await.unwrap();
            assert!(got == *v, "{path}: cold read differs from the object");
        }
        // every block is cached now: reading again asks nothing of the store
        let before = proxy.received();
        for (k, v) in &objects {
            let path = format!("/mnt1/{}", k.strip_prefix("t1/").unwrap());
            assert!(
                e.fs.read_file(&path).await.unwrap() == *v,
                "{path}: warm read differs"
            );
        }
        assert_eq!(proxy.received(), before, "a warm read went to the store");

        // a listing is trusted for the sync interval: a new object shows after a resync
        put(&e.s3, "t1/late/x", b"late").await;
        assert!(matches!(
            e.fs.stat("/mnt1/late/x").await,
            Err(FsError::NotFound { .. })
        ));
        e.fs.resync("/mnt1").await.unwrap();
        assert_eq!(e.fs.read_file("/mnt1/late/x").await.unwrap(), b"late");

        // free drops the cached blocks; the next read fetches them again
        let path = "/mnt1/dir/sub/several";
        let blocks = e.fs.block_locations(path).await.unwrap();
        assert_eq!(blocks.len(), 4);
        let known = wait_until(Duration::from_secs(10), || async {
            let b = e.fs.block_locations(path).await.unwrap();
            b.iter().all(|b| b.ufs.is_none() && !b.locations.is_empty())
        })
        .await;
        if let Err(err) = known {
            let b = e.fs.block_locations(path).await;
            panic!("the master does not know of the fetched blocks: {err}: {b:?}");
        }
        let r = e.fs.free("/mnt1/dir").await.unwrap();
        assert!(r.blocks >= 4 && r.files >= 1, "{r:?}");
        wait_until(Duration::from_secs(10), || async {
            blocks.iter().all(|b| !on_a_worker(&e.cluster, b.block_id))
        })
        .await
        .expect("the workers drop the freed blocks");
        let before = proxy.received();
        let v = &objects[5].1;
        assert!(e.fs.read_file(path).await.unwrap() == *v);
        assert!(
            proxy.received() > before,
            "a freed block was not fetched again"
        );
        e.fs.umount("/mnt1").await.unwrap();
        assert!(names(&e.fs, "/mnt1").await.is_empty());
    });
}

#[test]
fn an_overwritten_object_is_seen_after_resync_never_mixed() {
    run(|e| async move {
        put(&e.s3, "t2/f", &data(2 * BS + 10, 7)).await;
        e.fs.mount(mount_info(
            &format!("s3://{BUCKET}/t2"),
            "/mnt2",
            s3_options(&e.s3.endpoint()),
        ))
        .await
        .unwrap();
        // only the first block is cached
        let mut r = e.fs.open("/mnt2/f").await.unwrap();
        let mut b = vec![0u8; 100];
        r.read_full(&mut b).await.unwrap();
        assert_eq!(b, data(2 * BS + 10, 7)[..100]);
        drop(r);
        let new = data(2 * BS + 10, 8); // same length, new bytes: the ETag tells
        put(&e.s3, "t2/f", &new).await;
        let s = e.fs.resync("/mnt2").await.unwrap();
        assert!(s.changed >= 1, "{s:?}");
        assert!(
            e.fs.read_file("/mnt2/f").await.unwrap() == new,
            "old blocks were served"
        );
        let longer = data(3 * BS, 9);
        put(&e.s3, "t2/f", &longer).await;
        e.fs.resync("/mnt2/f").await.unwrap();
        assert_eq!(e.fs.stat("/mnt2/f").await.unwrap().len, longer.len() as u64);
        assert!(e.fs.read_file("/mnt2/f").await.unwrap() == longer);
        // gone from the store: gone after a resync
        bucket_op(&e.s3).delete("t2/f").await.unwrap();
        e.fs.resync("/mnt2").await.unwrap();
        assert!(matches!(
            e.fs.stat("/mnt2/f").await,
            Err(FsError::NotFound { .. })
        ));
        e.fs.umount("/mnt2").await.unwrap();
    });
}

#[test]
fn a_store_failing_mid_read_fails_the_read_and_caches_nothing() {
    run(|e| async move {
        let v = data(3 * BS, 10);
        put(&e.s3, "t3/big", &v).await;
        let proxy = Proxy::start(e.s3.addr).await.unwrap();
        e.fs.mount(mount_info(
            &format!("s3://{BUCKET}/t3"),
            "/mnt3",
            s3_options(&proxy.endpoint()),
        ))
        .await
        .unwrap();
        e.fs.stat("/mnt3/big").await.unwrap();
        // the store dies 40 KiB into the transfer
        proxy.cut_after(Some(40 << 10));
        let err = e.fs.read_file("/mnt3/big").await.unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, FsError::UnderStore { .. }), "{err:?}");
        assert!(msg.contains("s3://bkt/t3") && msg.contains("big"), "{msg}");
        // no partial block stays: no worker holds a block of the file
        let blocks = e.fs.block_locations("/mnt3/big").await.unwrap();
        for b in &blocks {
            assert!(
                !on_a_worker(&e.cluster, b.block_id),
                "block {} stayed",
                b.block_id
            );
        }
        // the store is back: the read works
        proxy.cut_after(None);
        assert!(e.fs.read_file("/mnt3/big").await.unwrap() == v);
        e.fs.umount("/mnt3").await.unwrap();
    });
}

#[test]
fn a_killed_store_fails_reads_cleanly_and_they_work_when_it_is_back() {
    let mut s3 = None;
    run(|_| async {
        s3 = Some(S3Server::start(&["killed"]).await.unwrap());
    });
    let mut s3 = s3.unwrap();
    run(|e| {
        let s3 = &mut s3;
        async move {
            let v = data(2 * BS + 3, 11);
            common::ufs::put(s3, "killed", "obj", &v).await;
            e.fs.mount(mount_info(
                "s3://killed",
                "/mnt4",
                s3_options(&s3.endpoint()),
            ))
            .await
            .unwrap();
            assert_eq!(e.fs.stat("/mnt4/obj").await.unwrap().len, v.len() as u64);
            s3.kill();
            let err = e.fs.read_file("/mnt4/obj").await.unwrap_err();
            assert!(matches!(err, FsError::UnderStore { .. }), "{err:?}");
            assert!(err.to_string().contains("s3://killed"), "{err}");
            // the master and workers go on serving other paths
            e.fs.write_file("/t4-local", b"still here").await.unwrap();
            assert_eq!(e.fs.read_file("/t4-local").await.unwrap(), b"still here");
            s3.restart().await.unwrap();
            assert!(e.fs.read_file("/mnt4/obj").await.unwrap() == v);
            e.fs.umount("/mnt4").await.unwrap();
        }
    });
}

#[test]
fn wrong_credentials_and_bad_input_are_refused_and_change_nothing() {
    run(|e| async move {
        let uri = format!("s3://{BUCKET}/t5");
        let mut wrong = s3_options(&e.s3.endpoint());
        wrong.insert("secret_access_key".into(), "not-the-secret".into());
        let err =
            e.fs.mount(mount_info(&uri, "/mnt5", wrong))
                .await
                .unwrap_err();
        assert!(matches!(err, FsError::UnderStore { .. }), "{err:?}");
        assert!(!err.to_string().contains("not-the-secret"), "{err}");
        assert!(
            !e.fs.exists("/mnt5").await.unwrap(),
            "a refused mount left its directory"
        );

        let mut unknown = s3_options(&e.s3.endpoint());
        unknown.insert("regoin".into(), "x".into());
        let err =
            e.fs.mount(mount_info(&uri, "/mnt5", unknown))
                .await
                .unwrap_err();
        assert!(
            err.to_string().contains("unknown option \"regoin\""),
            "{err}"
        );

        let err =
            e.fs.mount(mount_info("ftp://x/y", "/mnt5", HashMap::new()))
                .await
                .unwrap_err();
        assert!(err.to_string().contains("unsupported scheme"), "{err}");

        // nothing listens on this port
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let err =
            e.fs.mount(mount_info(
                &uri,
                "/mnt5",
                s3_options(&format!("http://{closed}")),
            ))
            .await
            .unwrap_err();
        assert!(matches!(err, FsError::UnderStore { .. }), "{err:?}");

        e.fs.mkdir("/t5-full", false).await.unwrap();
        e.fs.write_file("/t5-full/f", b"x").await.unwrap();
        let err =
            e.fs.mount(mount_info(&uri, "/t5-full", s3_options(&e.s3.endpoint())))
                .await
                .unwrap_err();
        assert!(matches!(err, FsError::DirectoryNotEmpty { .. }), "{err:?}");

        e.fs.mount(mount_info(
            &uri,
            "/mnt5/inner",
            s3_options(&e.s3.endpoint()),
        ))
        .await
        .unwrap();
        for nested in ["/mnt5", "/mnt5/inner/deeper", "/mnt5/inner"] {
            let err =
                e.fs.mount(mount_info(&uri, nested, s3_options(&e.s3.endpoint())))
                    .await
                    .unwrap_err();
            assert!(err.to_string().contains("nested"), "{nested}: {err}");
        }
        let err = e.fs.umount("/t5-full").await.unwrap_err();
        assert!(err.to_string().contains("not a mount point"), "{err}");
        e.fs.umount("/mnt5/inner").await.unwrap();
        assert!(!e
            .fs
            .mounts()
            .await
            .unwrap()
            .iter()
            .any(|m| m.path.starts_with("/mnt5")));
    });
}

#[test]
fn a_directory_mounts_with_file_uri() {
    run(|e| async move {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        let v = data(BS + 7, 12);
        std::fs::write(dir.path().join("a/b/f"), &v).unwrap();
        std::fs::write(dir.path().join("top"), b"top").unwrap();
        let uri = format!("file://{}", dir.path().display());
        e.fs.mount(mount_info(&uri, "/mnt6", HashMap::new()))
            .await
            .unwrap();
        assert_eq!(names(&e.fs, "/mnt6").await, ["a", "top"]);
        assert_eq!(e.fs.stat("/mnt6/a/b/f").await.unwrap().len, v.len() as u64);
        assert!(e.fs.read_file("/mnt6/a/b/f").await.unwrap() == v);
        assert_eq!(e.fs.read_file("/mnt6/top").await.unwrap(), b"top");
        e.fs.umount("/mnt6").await.unwrap();
        let err =
            e.fs.mount(mount_info("file:///no/such/dir", "/mnt6", HashMap::new()))
                .await
                .unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
    });
}

/// Its own cluster: the master restarts.
#[test]
fn a_mount_survives_a_master_restart() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let s3 = S3Server::start(&["restart"]).await.unwrap();
        common::ufs::put(&s3, "restart", "x/y", b"persisted").await;
        let mut cluster = MiniCluster::builder()
            .workers(1)
            .conf(conf_hook)
            .start()
            .await
            .unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        fs.mount(mount_info("s3://restart", "/m", s3_options(&s3.endpoint())))
            .await
            .unwrap();
        assert_eq!(fs.read_file("/m/x/y").await.unwrap(), b"persisted");
        cluster.restart_master().await.unwrap();
        cluster.wait_workers_live(1).await.unwrap();
        let mounts = fs.mounts().await.unwrap();
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].ufs_uri, "s3://restart");
        assert_eq!(mounts[0].options["secret_access_key"], "***");
        common::ufs::put(&s3, "restart", "x/z", b"new").await;
        assert_eq!(fs.read_file("/m/x/y").await.unwrap(), b"persisted");
        fs.resync("/m/x").await.unwrap();
        assert_eq!(fs.read_file("/m/x/z").await.unwrap(), b"new");
        cluster.shutdown().await.unwrap();
    });
}
