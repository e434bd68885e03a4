//! Fault-injection tests (feature `fault-injection`): errors, delays and dropped
//! connections armed on named master RPCs, data-plane ops and disk ops. Each test owns
//! its MiniCluster and scopes its faults to that cluster's addresses, so tests running
//! in parallel in this binary do not see each other's faults.

mod common;

use std::time::{Duration, Instant};

use common::{block_files, data, runtime, staging_files};
use curvine_client::{CreateOptions, CurvineFs};
use curvine_common::conf::Dur;
use curvine_common::FsError;
use curvine_server::fault::{self, Fault};
use curvine_server::testing::{wait_until, MiniCluster};

/// A cluster whose clients read and write over the network (the disk and data-plane
/// points sit on the worker's remote paths).
async fn cluster(workers: usize) -> MiniCluster {
    MiniCluster::builder()
        .workers(workers)
        .conf(|c| c.client.short_circuit = false)
        .start()
        .await
        .unwrap()
}

fn worker_addrs(c: &MiniCluster) -> Vec<String> {
    (0..c.worker_count())
        .map(|i| c.worker_addr(i).to_string())
        .collect()
}

/// Clear this cluster's rules (other tests' rules stay).
fn clear(c: &MiniCluster, points: &[&str]) {
    let mut scope = worker_addrs(c);
    scope.push(c.master_addr().to_string());
    for p in points {
        fault::clear_at(p, &scope);
    }
}

async fn no_staging_left(c: &MiniCluster) {
    for i in 0..c.worker_count() {
        wait_until(Duration::from_secs(10), || async {
            staging_files(c, i).is_empty()
        })
        .await
        .unwrap_or_else(|_| panic!("staging files left: {:?}", staging_files(c, i)));
    }
}

fn replicated(n: u32) -> CreateOptions {
    CreateOptions {
        overwrite: true,
        replicas: n,
        ..Default::default()
    }
}

#[test]
fn commit_error_fails_the_write_and_leaves_nothing() {
    runtime().block_on(async {
        let c = cluster(1).await;
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        let w = worker_addrs(&c);
        fault::arm_at("disk.commit", &w, Fault::Os(libc::EIO), None);
        let e = fs.write_file("/ic/f", &data(1 << 20, 1)).await.unwrap_err();
        match &e {
            FsError::Io { message } => {
                assert!(message.contains("injected fault at disk.commit"), "{e}")
            }
            other => panic!("expected the commit's I/O error, got {other:?}"),
        }
        assert!(fault::fired("disk.commit", &w) >= 1);
        // no visible partial file, no block, no staging file
        assert!(!fs.exists("/ic/f").await.unwrap());
        assert!(block_files(&c, 0).is_empty(), "{:?}", block_files(&c, 0));
        no_staging_left(&c).await;
        clear(&c, &["disk.commit"]);
        let body = data(1 << 20, 2);
        fs.write_file("/ic/f", &body).await.unwrap();
        assert!(fs.read_file("/ic/f").await.unwrap() == body);
        c.shutdown().await.unwrap();
    });
}

#[test]
fn read_chunk_error_on_one_replica_reads_from_the_other() {
    runtime().block_on(async {
        let c = cluster(3).await;
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        let body = data(3 << 20, 3);
        let mut wr = fs.create_with("/ir/f", replicated(2)).await.unwrap();
        wr.write(&body).await.unwrap();
        wr.close().await.unwrap();
        let w = worker_addrs(&c);
        // whichever replica the reader tries first fails once, with EIO
        fault::arm_at("disk.read_chunk", &w, Fault::Os(libc::EIO), Some(1));
        let got = fs.read_file("/ir/f").await.unwrap();
        assert_eq!(fault::fired("disk.read_chunk", &w), 1);
        assert!(got == body);
        clear(&c, &["disk.read_chunk"]);
        c.shutdown().await.unwrap();
    });
}

#[test]
fn read_block_dropped_mid_stream_continues_on_another_replica() {
    runtime().block_on(async {
        let c = cluster(3).await;
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        // several READ_DATA frames (1 MiB each): the drop comes after the first
        let body = data(5 << 20, 4);
        let mut wr = fs.create_with("/id/f", replicated(2)).await.unwrap();
        wr.write(&body).await.unwrap();
        wr.close().await.unwrap();
        let w = worker_addrs(&c);
        fault::arm_at("worker.read_block", &w, Fault::Drop, Some(1));
        let got = fs.read_file("/id/f").await.unwrap();
        assert_eq!(fault::fired("worker.read_block", &w), 1);
        assert!(got == body);
        clear(&c, &["worker.read_block"]);
        c.shutdown().await.unwrap();
    });
}

#[test]
fn write_block_dropped_mid_stream_moves_to_a_replacement() {
    runtime().block_on(async {
        let c = cluster(3).await;
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        let w = worker_addrs(&c);
        fault::arm_at("worker.write_block", &w, Fault::Drop, Some(1));
        let body = data(5 << 20, 5);
        let mut wr = fs.create_with("/iw/f", replicated(2)).await.unwrap();
        wr.write(&body).await.unwrap();
        wr.close().await.unwrap();
        assert_eq!(fault::fired("worker.write_block", &w), 1);
        assert_eq!(
            wr.excluded_workers().len(),
            1,
            "the dropped replica is replaced"
        );
        assert!(fs.read_file("/iw/f").await.unwrap() == body);
        no_staging_left(&c).await;
        clear(&c, &["worker.write_block"]);
        c.shutdown().await.unwrap();
    });
}

#[test]
fn slow_or_lost_stat_is_retried() {
    runtime().block_on(async {
        let c = MiniCluster::builder()
            .conf(|c| {
                c.client.short_circuit = false;
                c.client.rpc_timeout = Dur(Duration::from_millis(500));
                c.client.rpc_retries = 3;
            })
            .start()
            .await
            .unwrap();
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        fs.write_file("/is/f", b"hello").await.unwrap();
        let m = [c.master_addr().to_string()];
        for fault in [Fault::Delay(Duration::from_secs(3)), Fault::Drop] {
            fault::clear_at("master.GetStatus", &m);
            fault::arm_at("master.GetStatus", &m, fault.clone(), Some(1));
            let t = Instant::now();
            let st = fs.stat("/is/f").await.unwrap();
            let took = t.elapsed();
            assert_eq!(st.len, 5);
            assert_eq!(fault::fired("master.GetStatus", &m), 1, "{fault:?}");
            // the first try timed out after rpc_timeout; the retry did not wait the delay out
            assert!(
                took >= Duration::from_millis(500) && took < Duration::from_secs(3),
                "{fault:?}: {took:?}"
            );
        }
        clear(&c, &["master.GetStatus"]);
        c.shutdown().await.unwrap();
    });
}

#[test]
fn add_block_error_fails_the_write_and_hides_the_file() {
    runtime().block_on(async {
        let c = cluster(1).await;
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        let m = [c.master_addr().to_string()];
        let mut wr = fs.create("/ia/f", true).await.unwrap();
        // the first 8 MiB block is committed; the allocation of the second one fails
        wr.write(&data(8 << 20, 6)).await.unwrap();
        fault::arm_at(
            "master.AddBlock",
            &m,
            Fault::Error(FsError::internal("injected add_block failure")),
            None,
        );
        wr.write(&data(1 << 20, 7)).await.unwrap_or(());
        let e = wr.close().await.unwrap_err();
        assert!(
            matches!(&e, FsError::Internal { message } if message.contains("injected")),
            "{e:?}"
        );
        assert!(fault::fired("master.AddBlock", &m) >= 1);
        // abandoned: neither a complete file nor a half-written one is visible
        match fs.stat("/ia/f").await {
            Err(FsError::NotFound { .. }) => {}
            other => panic!("expected the file to be gone, got {other:?}"),
        }
        // its committed block is deleted from the worker too
        wait_until(Duration::from_secs(10), || async {
            block_files(&c, 0).is_empty()
        })
        .await
        .unwrap();
        no_staging_left(&c).await;
        clear(&c, &["master.AddBlock"]);
        fs.write_file("/ia/f", &data(9 << 20, 8)).await.unwrap();
        c.shutdown().await.unwrap();
    });
}

#[test]
fn enospc_on_write_is_a_clear_no_space_error() {
    runtime().block_on(async {
        let c = cluster(1).await;
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        let w = worker_addrs(&c);
        fault::arm_at("disk.write_chunk", &w, Fault::Os(libc::ENOSPC), None);
        let e = fs.write_file("/in/f", &data(2 << 20, 9)).await.unwrap_err();
        match &e {
            FsError::NoSpace { message } => assert!(message.contains("disk.write_chunk"), "{e}"),
            other => panic!("expected NoSpace, got {other:?}"),
        }
        assert!(fault::fired("disk.write_chunk", &w) >= 1);
        assert!(!fs.exists("/in/f").await.unwrap());
        no_staging_left(&c).await;
        clear(&c, &["disk.write_chunk"]);
        fs.write_file("/in/f", &data(2 << 20, 10)).await.unwrap();
        c.shutdown().await.unwrap();
    });
}

#[test]
fn a_call_that_panics_fails_alone_and_the_master_serves_on() {
    runtime().block_on(async {
        let c = cluster(0).await;
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        let m = [c.master_addr().to_string()];
        fs.mkdir("/ip/kept", true).await.unwrap();
        // in the namespace work, on its blocking thread
        fault::arm_at("master.namespace", &m, Fault::Panic, Some(1));
        let e = fs.mkdir("/ip/a", false).await.unwrap_err();
        assert!(matches!(e, FsError::Internal { .. }), "{e:?}");
        // in the async part of a handler
        fault::arm_at("master.Mkdir", &m, Fault::Panic, Some(1));
        let e = fs.mkdir("/ip/b", false).await.unwrap_err();
        assert!(matches!(e, FsError::Internal { .. }), "{e:?}");
        assert_eq!(fault::fired("master.namespace", &m), 1);
        assert_eq!(fault::fired("master.Mkdir", &m), 1);
        // the same client and connection go on, and the panics applied nothing
        let names = |l: Vec<curvine_common::proto::FileStatus>| -> Vec<String> {
            l.into_iter().map(|s| s.name).collect()
        };
        assert_eq!(names(fs.list("/ip").await.unwrap()), ["kept"]);
        fs.mkdir("/ip/a", false).await.unwrap();
        fs.mkdir("/ip/b", false).await.unwrap();
        assert_eq!(names(fs.list("/ip").await.unwrap()), ["a", "b", "kept"]);
        clear(&c, &["master.namespace", "master.Mkdir"]);
    });
}

/// A recursive delete of 20,000 files in entries of 100 inodes: the tree is gone at
/// once, the master restarts half-way through the removal, and in the end every
/// counter is back and every block is gone from the worker.
#[test]
fn a_large_delete_is_gone_at_once_and_finishes_after_a_restart() {
    const DIRS: usize = 20;
    const FILES: usize = 1_000;
    const WITH_DATA: usize = 50; // one file in 50 has a block
    runtime().block_on(async {
        let mut c = MiniCluster::builder()
            .workers(1)
            .conf(|c| {
                c.master.delete_batch = 100;
                c.journal.sync = false;
            })
            .start()
            .await
            .unwrap();
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        fs.mkdir("/pd", false).await.unwrap();
        let base = c.report().await.unwrap();
        let mut writers = Vec::new();
        for d in 0..DIRS {
            let fs = fs.clone();
            writers.push(tokio::spawn(async move {
                fs.mkdir(&format!("/pd/t/d{d}"), true).await?;
                for f in 0..FILES {
                    let body = if f % WITH_DATA == 0 {
                        data(1024, f as u64)
                    } else {
                        Vec::new()
                    };
                    fs.write_file(&format!("/pd/t/d{d}/f{f}"), &body).await?;
                }
                curvine_common::FsResult::Ok(())
            }));
        }
        for w in writers {
            w.await.unwrap().unwrap();
        }
        let blocks = (DIRS * FILES / WITH_DATA) as u64;
        let full = c.report().await.unwrap();
        assert_eq!(full.files, base.files + (DIRS * FILES) as u64);
        assert_eq!(full.dirs, base.dirs + 1 + DIRS as u64);
        assert_eq!(full.blocks, base.blocks + blocks);
        assert_eq!(block_files(&c, 0).len() as u64, blocks);

        // slow each removal step down so that the restart falls in the middle
        let m = [c.master_addr().to_string()];
        fault::arm_at(
            "master.purge",
            &m,
            Fault::Delay(Duration::from_millis(20)),
            None,
        );
        let started = Instant::now();
        fs.delete("/pd/t", true).await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the delete took {:?}",
            started.elapsed()
        );
        assert!(!fs.exists("/pd/t").await.unwrap());
        assert!(fs.list("/pd").await.unwrap().is_empty());
        wait_until(Duration::from_secs(60), || async {
            c.report()
                .await
                .is_ok_and(|r| r.files + 1_000 <= full.files)
        })
        .await
        .expect("the background removal makes progress");
        c.restart_master().await.unwrap();
        let r = c.report().await.unwrap();
        assert!(r.files > base.files, "restarted after the removal ended");
        assert!(r.tasks.iter().any(|t| t.name == "purge"), "{:?}", r.tasks);
        clear(&c, &["master.purge"]);

        wait_until(Duration::from_secs(120), || async {
            c.report()
                .await
                .is_ok_and(|r| (r.files, r.dirs, r.blocks) == (base.files, base.dirs, base.blocks))
        })
        .await
        .expect("files, directories and blocks counted as before the tree");
        wait_until(Duration::from_secs(60), || async {
            block_files(&c, 0).is_empty()
        })
        .await
        .unwrap_or_else(|_| panic!("{} blocks left on the worker", block_files(&c, 0).len()));
        // the namespace is whole: the name is free, the parent is empty
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        assert!(fs.list("/pd").await.unwrap().is_empty());
        fs.write_file("/pd/t", b"again").await.unwrap();
        assert_eq!(fs.read_file("/pd/t").await.unwrap(), b"again");
    });
}
