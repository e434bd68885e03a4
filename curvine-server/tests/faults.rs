//! Fault tests: each owns its MiniCluster (or real processes) and stops/restarts nodes.

mod common;

use std::io::Write;
use std::time::Duration;

use common::{block_files, data, runtime, staging_files};
use curvine_client::{CreateOptions, CurvineFs};
use curvine_common::proto::StorageTier;
use curvine_common::FsError;
use curvine_server::testing::{wait_until, MiniCluster, TierSpec};
use tokio::io::AsyncWriteExt;

#[test]
fn master_restart_keeps_namespace_and_data() {
    runtime().block_on(async {
        let mut cluster = MiniCluster::builder().start().await.unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        fs.mkdir("/r/a/b", true).await.unwrap();
        let body = data(9 << 20, 1);
        fs.write_file("/r/a/big", &body).await.unwrap();
        fs.write_file("/r/a/small", b"small").await.unwrap();
        fs.rename("/r/a/small", "/r/a/b/moved").await.unwrap();
        fs.write_file("/r/gone", b"x").await.unwrap();
        fs.delete("/r/gone", false).await.unwrap();

        cluster.restart_master().await.unwrap();
        // the same client keeps working after the master comes back
        assert!(fs.read_file("/r/a/big").await.unwrap() == body);
        assert_eq!(fs.read_file("/r/a/b/moved").await.unwrap(), b"small");
        assert!(!fs.exists("/r/a/small").await.unwrap());
        assert!(!fs.exists("/r/gone").await.unwrap());
        fs.write_file("/r/after", b"after").await.unwrap();
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn worker_restart_rereports_blocks() {
    runtime().block_on(async {
        let mut cluster = MiniCluster::builder().start().await.unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        let body = data(10 << 20, 2);
        fs.write_file("/w/f", &body).await.unwrap();
        cluster.restart_worker(0).await.unwrap();
        assert!(fs.read_file("/w/f").await.unwrap() == body);
        let r = cluster.report().await.unwrap();
        let blocks: u64 = r.workers[0].tiers.iter().map(|t| t.blocks).sum();
        assert!(blocks >= 2, "blocks re-reported: {blocks}");
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn corrupted_block_byte_is_detected() {
    runtime().block_on(async {
        let cluster = MiniCluster::builder().start().await.unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        let body = data(300_000, 3);
        fs.write_file("/c/f", &body).await.unwrap();
        let files: Vec<_> = block_files(&cluster, 0).into_values().collect();
        assert_eq!(files.len(), 1, "{files:?}");
        let mut bytes = std::fs::read(&files[0]).unwrap();
        bytes[200_000] ^= 0x40;
        std::fs::write(&files[0], &bytes).unwrap();
        for short_circuit in [true, false] {
            let mut conf = cluster.client_conf();
            conf.client.short_circuit = short_circuit;
            let fs = CurvineFs::connect(conf).await.unwrap();
            let e = fs.read_file("/c/f").await.unwrap_err();
            match e {
                FsError::ChecksumMismatch {
                    block_id, worker, ..
                } => {
                    assert_ne!(block_id, 0);
                    assert!(!worker.is_empty());
                }
                other => panic!(
                    "short_circuit={short_circuit}: expected a checksum error, got {other:?}"
                ),
            }
        }
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn full_tier_demotes_to_the_next() {
    runtime().block_on(async {
        let cluster = MiniCluster::builder()
            .tiers(vec![
                TierSpec {
                    tier: "MEM",
                    capacity: 24 << 20,
                    tmpfs: true,
                },
                TierSpec {
                    tier: "SSD",
                    capacity: 512 << 20,
                    tmpfs: false,
                },
            ])
            .start()
            .await
            .unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        let mut bodies = Vec::new();
        for i in 0..8 {
            let body = data(6 << 20, 10 + i);
            let opts = CreateOptions {
                overwrite: true,
                storage_tier: StorageTier::Mem,
                ..Default::default()
            };
            let mut w = fs.create_with(&format!("/t/f{i}"), opts).await.unwrap();
            w.write(&body).await.unwrap();
            w.close().await.unwrap();
            bodies.push(body);
        }
        wait_until(Duration::from_secs(10), || async {
            let r = cluster.report().await.unwrap();
            let tiers = &r.workers[0].tiers;
            let mem = tiers
                .iter()
                .find(|t| t.tier == StorageTier::Mem as i32)
                .unwrap();
            let ssd = tiers
                .iter()
                .find(|t| t.tier == StorageTier::Ssd as i32)
                .unwrap();
            mem.used <= mem.capacity && ssd.used > 0
        })
        .await
        .unwrap();
        for (i, body) in bodies.iter().enumerate() {
            assert!(fs.read_file(&format!("/t/f{i}")).await.unwrap() == *body);
        }
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn all_tiers_full_is_a_clean_error() {
    runtime().block_on(async {
        let cluster = MiniCluster::builder()
            .tiers(vec![
                TierSpec {
                    tier: "MEM",
                    capacity: 8 << 20,
                    tmpfs: true,
                },
                TierSpec {
                    tier: "SSD",
                    capacity: 16 << 20,
                    tmpfs: false,
                },
            ])
            .start()
            .await
            .unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        let keep = data(1 << 20, 5);
        fs.write_file("/full/keep", &keep).await.unwrap();
        let big = data(40 << 20, 6);
        let e = fs.write_file("/full/big", &big).await.unwrap_err();
        assert!(matches!(e, FsError::NoSpace { .. }), "{e:?}");
        // no partial file is visible, earlier data is intact, staging is clean
        assert!(!fs.exists("/full/big").await.unwrap());
        assert!(fs.read_file("/full/keep").await.unwrap() == keep);
        wait_until(Duration::from_secs(10), || async {
            staging_files(&cluster, 0).is_empty()
        })
        .await
        .unwrap();
        // space freed by deletion is usable again
        fs.write_file("/full/again", &data(4 << 20, 7))
            .await
            .unwrap();
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn client_killed_mid_write_leaves_nothing() {
    runtime().block_on(async {
        let cluster = MiniCluster::builder().start().await.unwrap();
        let conf = cluster.client_conf();
        // A client on its own runtime, dropped mid-write like a killed process.
        let conf2 = conf.clone();
        std::thread::spawn(move || {
            let rt = runtime();
            rt.block_on(async {
                let fs = CurvineFs::connect(conf2).await.unwrap();
                let mut w = fs.create("/k/partial", true).await.unwrap();
                w.write(&data(9 << 20, 8)).await.unwrap();
                // no close: the writer, its runtime and every connection go away
                drop(w);
            });
            drop(rt);
        })
        .join()
        .unwrap();
        let fs = CurvineFs::connect(conf).await.unwrap();
        wait_until(Duration::from_secs(30), || async {
            !fs.exists("/k/partial").await.unwrap_or(true)
        })
        .await
        .unwrap();
        wait_until(Duration::from_secs(10), || async {
            staging_files(&cluster, 0).is_empty()
        })
        .await
        .unwrap();
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn garbage_bytes_do_not_hurt_servers() {
    runtime().block_on(async {
        let cluster = MiniCluster::builder().start().await.unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        fs.write_file("/g/before", b"before").await.unwrap();
        let junk = data(100_000, 99);
        for addr in [cluster.master_addr(), cluster.worker_addr(0)] {
            for prefix in [
                &b"\xff\xff\xff\xff"[..],
                b"\x00\x00\x00\x08\x00\x00\x00\x04",
                b"GET / HTTP/1.1\r\n\r\n",
            ] {
                let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                let _ = s.write_all(prefix).await;
                let _ = s.write_all(&junk).await;
                drop(s);
            }
        }
        assert_eq!(fs.read_file("/g/before").await.unwrap(), b"before");
        fs.write_file("/g/after", &data(1 << 20, 4)).await.unwrap();
        cluster.shutdown().await.unwrap();
    });
}

/// kill -9 the master process during a metadata load; after restart every acknowledged
/// mutation is present.
#[test]
fn master_kill9_keeps_acknowledged_mutations() {
    let dir = tempfile::tempdir().unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let conf_path = dir.path().join("conf.toml");
    let mut f = std::fs::File::create(&conf_path).unwrap();
    write!(
        f,
        "[master]\nhostname = \"127.0.0.1\"\nrpc_port = {port}\nmeta_dir = \"{}\"\n\
         [client]\nmaster_addrs = [\"127.0.0.1:{port}\"]\nrpc_timeout = \"5s\"\nrpc_retries = 1\n\
         [log]\nlevel = \"warn\"\n",
        dir.path().join("meta").display()
    )
    .unwrap();
    drop(f);
    let start = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_curvine-server"))
            .args(["master", "--conf"])
            .arg(&conf_path)
            .spawn()
            .unwrap()
    };
    let rt = runtime();
    let mut child = start();
    let conf = curvine_common::ClusterConf::load(&conf_path).unwrap();
    let acked = rt.block_on(async {
        let fs = wait_connect(&conf).await;
        fs.mkdir("/k9", true).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let mut tasks = Vec::new();
        for t in 0..4 {
            let (fs, tx) = (fs.clone(), tx.clone());
            tasks.push(tokio::spawn(async move {
                for i in 0.. {
                    let p = format!("/k9/t{t}-{i}");
                    let r = match i % 3 {
                        0 => fs.mkdir(&p, false).await.map(|_| ()),
                        _ => match fs.create(&p, false).await {
                            Ok(mut w) => w.close().await.map(|_| ()),
                            Err(e) => Err(e),
                        },
                    };
                    match r {
                        Ok(()) => {
                            let _ = tx.send(p);
                        }
                        Err(_) => break,
                    }
                }
            }));
        }
        drop(tx);
        // let some work get acknowledged, then kill -9
        let mut acked = Vec::new();
        while acked.len() < 300 {
            match rx.recv().await {
                Some(p) => acked.push(p),
                None => break,
            }
        }
        child.kill().unwrap(); // SIGKILL
        let _ = child.wait();
        for t in tasks {
            let _ = t.await;
        }
        while let Ok(p) = rx.try_recv() {
            acked.push(p);
        }
        acked
    });
    assert!(acked.len() >= 300);
    let mut child = start();
    rt.block_on(async {
        let fs = wait_connect(&conf).await;
        for p in &acked {
            let st = fs
                .stat(p)
                .await
                .unwrap_or_else(|e| panic!("acknowledged {p} lost after kill -9: {e}"));
            // acknowledged files were closed: complete, not half-written
            assert!(
                st.complete || st.file_type == curvine_common::proto::FileType::Dir as i32,
                "{p}"
            );
        }
    });
    child.kill().unwrap();
    let _ = child.wait();
}

async fn wait_connect(conf: &curvine_common::ClusterConf) -> CurvineFs {
    let mut last = None;
    for _ in 0..200 {
        match CurvineFs::connect(conf.clone()).await {
            Ok(fs) => match fs.exists("/").await {
                Ok(_) => return fs,
                Err(e) => last = Some(e),
            },
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("master did not come up: {last:?}");
}
