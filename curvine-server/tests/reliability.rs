//! Reliability tests on a 3-worker MiniCluster: worker loss during writes and reads,
//! corrupt replicas (reads and the scrubber), re-replication back to the replica count,
//! full tiers, a mixed load of 64 clients, and cluster authentication.
//!
//! Figures are printed with `FIGURE` in the line (run with `--nocapture`).
//! `CURVINE_LOAD_SECS` sets the mixed load's duration (default 120 s, the issue's
//! 2-minute run in CI; set it lower for a quick local run); the 1 GiB re-replication
//! measurement is `#[ignore]`d.

mod common;

use std::time::{Duration, Instant};

use common::{block_files, data, runtime, staging_files};
use curvine_client::{CreateOptions, CurvineFs};
use curvine_common::conf::{ByteSize, Dur};
use curvine_common::proto::master_service_client::MasterServiceClient;
use curvine_common::proto::{LocatedBlock, MkdirRequest, ReportResponse};
use curvine_common::{ClusterConf, FsError};
use curvine_server::testing::{wait_until, MiniCluster, MiniClusterBuilder, TierSpec};

/// Fast failure detection and re-replication for tests.
fn fast(c: &mut ClusterConf) {
    c.master.worker_lost_timeout = Dur(Duration::from_millis(1500));
    c.master.replication_interval = Dur(Duration::from_millis(200));
    c.master.replication_timeout = Dur(Duration::from_secs(20));
    c.worker.heartbeat_interval = Dur(Duration::from_millis(100));
    c.worker.scrub_rate = ByteSize(0);
}

/// `fast`, but a worker is declared lost only after 30 s: for tests that stop no worker.
/// At 1.5 s, a heartbeat held up by the other tests on a 2-core machine lost a worker,
/// and with it the only replica of a file just written.
fn steady(c: &mut ClusterConf) {
    fast(c);
    c.master.worker_lost_timeout = Dur(Duration::from_secs(30));
}

fn cluster3() -> MiniClusterBuilder {
    MiniCluster::builder().workers(3).conf(fast)
}

/// Three workers none of which the test stops.
fn steady3() -> MiniClusterBuilder {
    MiniCluster::builder().workers(3).conf(steady)
}

/// The master's id for worker `i` (matched by data port).
async fn worker_id(cluster: &MiniCluster, i: usize) -> u32 {
    let port = u32::from(cluster.worker_addr(i).port());
    let r = cluster.report().await.unwrap();
    r.workers
        .iter()
        .filter_map(|w| w.address.as_ref())
        .find(|a| a.data_port == port)
        .map(|a| a.worker_id)
        .expect("worker registered")
}

async fn index_of(cluster: &MiniCluster, id: u32) -> usize {
    for i in 0..cluster.worker_count() {
        if worker_id(cluster, i).await == id {
            return i;
        }
    }
    panic!("no worker with id {id}");
}

async fn blocks_of(fs: &CurvineFs, path: &str) -> Vec<LocatedBlock> {
    // FsReader keeps its blocks private; ask the master directly.
    let mut c =
        MasterServiceClient::connect(format!("http://{}", fs.conf().client.master_addrs[0]))
            .await
            .unwrap();
    let mut req = tonic::Request::new(curvine_common::proto::OpenRequest {
        path: path.into(),
        caller: Some(fs.caller_info()),
        exclude_fetchers: vec![],
    });
    let token = &fs.conf().cluster.auth_token;
    if !token.is_empty() {
        req.metadata_mut()
            .insert("x-curvine-token", token.parse().unwrap());
    }
    c.open(req).await.unwrap().into_inner().blocks
}

fn opts(replicas: u32, block_size: u64) -> CreateOptions {
    CreateOptions {
        replicas,
        block_size,
        overwrite: true,
        create_parents: true,
        ..Default::default()
    }
}

/// Write `body` with `replicas`; once `kill_after` bytes are written, stop the worker
/// that holds the block being written. Returns the stopped worker's index.
async fn write_killing_a_worker(
    cluster: &mut MiniCluster,
    fs: &CurvineFs,
    path: &str,
    body: &[u8],
    replicas: u32,
    kill_after: usize,
) -> usize {
    let mut w = fs.create_with(path, opts(replicas, 1 << 20)).await.unwrap();
    w.write(&body[..kill_after]).await.unwrap();
    w.flush().await.unwrap();
    // The block in progress has a staging file on each of its workers.
    let victim = (0..cluster.worker_count())
        .find(|&i| !staging_files(cluster, i).is_empty())
        .expect("a worker is receiving the open block");
    cluster.stop_worker(victim).await.unwrap();
    w.write(&body[kill_after..]).await.unwrap();
    let st = w.close().await.unwrap();
    assert_eq!(st.len, body.len() as u64);
    victim
}

#[test]
fn worker_killed_during_a_write_with_two_replicas() {
    runtime().block_on(async {
        let mut cluster = cluster3().start().await.unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        let body = data(3 * (1 << 20) + 12345, 21);
        let victim =
            write_killing_a_worker(&mut cluster, &fs, "/w2/f", &body, 2, (1 << 20) + 300_000).await;
        // the master may still count the stopped worker as live for a moment
        let dead = u32::from(cluster.worker_addr(victim).port());
        // Every block has 2 replicas, none on the stopped worker's port.
        for b in blocks_of(&fs, "/w2/f").await {
            let ports: Vec<u32> = b
                .locations
                .iter()
                .map(|l| l.address.as_ref().unwrap().data_port)
                .collect();
            if b.offset >= 1 << 20 {
                assert!(ports.len() >= 2, "block {} on {ports:?}", b.block_id);
                assert!(
                    !ports.contains(&dead),
                    "block {} still on the dead worker",
                    b.block_id
                );
            }
        }
        assert_eq!(fs.read_file("/w2/f").await.unwrap(), body);
        assert!(staging_files(&cluster, (victim + 1) % 3).is_empty());
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn worker_killed_during_a_write_with_one_replica() {
    runtime().block_on(async {
        let mut cluster = cluster3()
            .conf(|c| {
                fast(c);
                c.client.short_circuit = false;
            })
            .start()
            .await
            .unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        let body = data(2 * (1 << 20) + 777, 22);
        let victim =
            write_killing_a_worker(&mut cluster, &fs, "/w1/f", &body, 1, (1 << 20) + 200_000).await;
        let dead = u32::from(cluster.worker_addr(victim).port());
        let blocks = blocks_of(&fs, "/w1/f").await;
        let last = blocks.last().unwrap();
        assert!(
            last.locations
                .iter()
                .all(|l| l.address.as_ref().unwrap().data_port != dead),
            "the block in progress moved off the dead worker"
        );
        // Blocks committed on the stopped worker come back with it.
        cluster.start_worker(victim).await.unwrap();
        cluster.wait_workers_live(3).await.unwrap();
        assert_eq!(fs.read_file("/w1/f").await.unwrap(), body);
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn write_fails_cleanly_when_no_replacement_exists() {
    runtime().block_on(async {
        let mut cluster = MiniCluster::builder()
            .workers(2)
            .conf(fast)
            .start()
            .await
            .unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        let body = data(2 << 20, 23);
        let mut w = fs.create_with("/nr/f", opts(2, 1 << 20)).await.unwrap();
        w.write(&body[..300_000]).await.unwrap();
        w.flush().await.unwrap();
        cluster.stop_worker(1).await.unwrap();
        let res = async {
            w.write(&body[300_000..]).await?;
            w.close().await
        }
        .await;
        let e = res.expect_err("2 replicas on 1 live worker must fail");
        assert!(
            matches!(
                e,
                FsError::Unavailable { .. } | FsError::NoSpace { .. } | FsError::Io { .. }
            ),
            "{e:?}"
        );
        // no partial file claims 2 replicas
        wait_until(Duration::from_secs(10), || async {
            !fs.exists("/nr/f").await.unwrap_or(true)
        })
        .await
        .unwrap();
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn worker_killed_during_reads() {
    runtime().block_on(async {
        let mut cluster = cluster3().start().await.unwrap();
        let body = data(4 * (1 << 20) + 99, 24);
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        let mut w = fs.create_with("/r/f", opts(2, 1 << 20)).await.unwrap();
        w.write(&body).await.unwrap();
        w.close().await.unwrap();
        let blocks = blocks_of(&fs, "/r/f").await;
        for short_circuit in [false, true] {
            let mut conf = cluster.client_conf();
            conf.client.short_circuit = short_circuit;
            conf.client.read_ahead = ByteSize(4 << 20);
            let fs = CurvineFs::connect(conf).await.unwrap();
            let mut r = fs.open("/r/f").await.unwrap();
            let mut got = vec![0u8; body.len()];
            let first = 1_500_000;
            r.read_exact_at(0, &mut got[..first]).await.unwrap();
            if !short_circuit {
                // the first replica of the block being streamed
                let id = blocks[1].locations[0].worker_id;
                let i = index_of(&cluster, id).await;
                cluster.stop_worker(i).await.unwrap();
            }
            r.read_exact_at(first as u64, &mut got[first..])
                .await
                .unwrap();
            assert_eq!(got, body, "short_circuit={short_circuit}");
        }
        cluster.shutdown().await.unwrap();
    });
}

/// The block files of `block` across the cluster, with their contents.
fn replicas_on_disk(cluster: &MiniCluster, block: u64) -> Vec<(usize, Vec<u8>)> {
    (0..cluster.worker_count())
        .filter_map(|i| {
            let p = block_files(cluster, i).remove(&block)?;
            Some((i, std::fs::read(p).ok()?))
        })
        .collect()
}

async fn wait_replicated(cluster: &MiniCluster, within: Duration) -> ReportResponse {
    let deadline = Instant::now() + within;
    loop {
        let r = cluster.report().await.unwrap();
        if r.under_replicated == 0 && r.missing_blocks == 0 && r.copies_in_flight == 0 {
            return r;
        }
        assert!(Instant::now() < deadline, "not re-replicated: {r:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn corrupt_replica_is_read_around_reported_and_replaced() {
    runtime().block_on(async {
        let cluster = steady3().start().await.unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        let body = data(700_000, 25);
        let mut w = fs.create_with("/c/f", opts(2, 1 << 20)).await.unwrap();
        w.write(&body).await.unwrap();
        w.close().await.unwrap();
        let b = blocks_of(&fs, "/c/f").await.remove(0);
        let bad = index_of(&cluster, b.locations[0].worker_id).await;
        let path = block_files(&cluster, bad).remove(&b.block_id).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[500_000] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        for short_circuit in [true, false] {
            let mut conf = cluster.client_conf();
            conf.client.short_circuit = short_circuit;
            let fs = CurvineFs::connect(conf).await.unwrap();
            // the reader tries locations[0] first, fails its checksum, goes on
            assert_eq!(fs.read_file("/c/f").await.unwrap(), body);
        }
        wait_until(Duration::from_secs(10), || async {
            cluster.report().await.map(|r| r.bad_replicas).unwrap_or(0) >= 1
        })
        .await
        .unwrap();
        let r = wait_replicated(&cluster, Duration::from_secs(30)).await;
        assert!(r.copies_done >= 1, "{r:?}");
        wait_until(Duration::from_secs(10), || async {
            let reps = replicas_on_disk(&cluster, b.block_id);
            reps.len() == 2 && reps.iter().all(|(_, d)| *d == body)
        })
        .await
        .unwrap_or_else(|_| {
            let reps = replicas_on_disk(&cluster, b.block_id);
            panic!(
                "replicas on disk: {:?}",
                reps.iter()
                    .map(|(i, d)| (*i, d == &body))
                    .collect::<Vec<_>>()
            )
        });
        assert_eq!(blocks_of(&fs, "/c/f").await[0].locations.len(), 2);
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn scrubber_finds_a_corrupt_replica_and_it_is_replaced() {
    runtime().block_on(async {
        let cluster = cluster3()
            .conf(|c| {
                steady(c);
                c.worker.scrub_rate = ByteSize(256 << 20);
                c.worker.scrub_interval = Dur(Duration::from_millis(100));
            })
            .start()
            .await
            .unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        let body = data(900_000, 26);
        let mut w = fs.create_with("/s/f", opts(2, 1 << 20)).await.unwrap();
        w.write(&body).await.unwrap();
        w.close().await.unwrap();
        let b = blocks_of(&fs, "/s/f").await.remove(0);
        let bad = index_of(&cluster, b.locations[1].worker_id).await;
        let path = block_files(&cluster, bad).remove(&b.block_id).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[10] ^= 0x80;
        std::fs::write(&path, &bytes).unwrap();
        wait_until(Duration::from_secs(20), || async {
            cluster.report().await.map(|r| r.bad_replicas).unwrap_or(0) >= 1
        })
        .await
        .unwrap();
        wait_replicated(&cluster, Duration::from_secs(30)).await;
        wait_until(Duration::from_secs(10), || async {
            let reps = replicas_on_disk(&cluster, b.block_id);
            reps.len() == 2 && reps.iter().all(|(_, d)| *d == body)
        })
        .await
        .unwrap();
        let r = cluster.report().await.unwrap();
        let scrubbed: u64 = r.workers.iter().map(|w| w.scrubbed_bytes).sum();
        assert!(scrubbed >= 900_000, "{scrubbed}");
        cluster.shutdown().await.unwrap();
    });
}

/// Write `files` files of `per_file` bytes with 2 replicas, stop a worker and time the
/// return to the full replica count.
async fn lose_a_worker(files: usize, per_file: usize, block_size: u64) -> (Duration, u64) {
    let cluster = cluster3()
        .conf(move |c| {
            fast(c);
            c.master.replication_max_inflight = 32;
            c.master.replication_per_worker = 8;
            c.worker.copy_concurrency = 8;
        })
        .tiers(vec![TierSpec {
            tier: "MEM",
            capacity: 4 << 30,
            tmpfs: true,
        }])
        .start()
        .await
        .unwrap();
    let mut cluster = cluster;
    let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
    let body = data(per_file, 27);
    for i in 0..files {
        let mut w = fs
            .create_with(&format!("/l/f{i}"), opts(2, block_size))
            .await
            .unwrap();
        w.write(&body).await.unwrap();
        w.close().await.unwrap();
    }
    let lost_blocks = block_files(&cluster, 0).len() as u64;
    let t0 = Instant::now();
    cluster.stop_worker(0).await.unwrap();
    let r = wait_replicated(&cluster, Duration::from_secs(600)).await;
    // Lost only counts after the heartbeat timeout; wait for the scan to have seen it.
    wait_until(Duration::from_secs(600), || async {
        let r = cluster.report().await.unwrap();
        r.copies_done >= lost_blocks && r.under_replicated == 0 && r.copies_in_flight == 0
    })
    .await
    .unwrap_or_else(|_| panic!("{r:?}"));
    let took = t0.elapsed();
    for i in 0..files {
        for b in blocks_of(&fs, &format!("/l/f{i}")).await {
            assert_eq!(b.locations.len(), 2, "block {}", b.block_id);
        }
    }
    assert_eq!(fs.read_file("/l/f0").await.unwrap(), body);
    cluster.shutdown().await.unwrap();
    (took, lost_blocks * block_size)
}

#[test]
fn lost_worker_blocks_return_to_their_replica_count() {
    runtime().block_on(async {
        let (took, bytes) = lose_a_worker(6, 3 << 20, 1 << 20).await;
        println!(
            "FIGURE re-replication: {} MiB of lost blocks back to 2 replicas in {:.2}s (incl. {:.1}s heartbeat timeout)",
            bytes >> 20,
            took.as_secs_f64(),
            1.5
        );
    });
}

#[test]
#[ignore = "1 GiB measurement; run with --ignored --nocapture"]
fn lost_worker_1gib_rereplication_time() {
    runtime().block_on(async {
        // 1.5 GiB of data with 2 replicas: worker 0 holds about 1 GiB of it.
        let (took, bytes) = lose_a_worker(12, 128 << 20, 8 << 20).await;
        println!(
            "FIGURE re-replication: {} MiB of lost blocks back to 2 replicas in {:.2}s (incl. 1.5s heartbeat timeout)",
            bytes >> 20,
            took.as_secs_f64()
        );
    });
}

#[test]
fn full_tiers_then_freed_space() {
    runtime().block_on(async {
        let cluster = steady3()
            .tiers(vec![
                TierSpec {
                    tier: "MEM",
                    capacity: 4 << 20,
                    tmpfs: true,
                },
                TierSpec {
                    tier: "SSD",
                    capacity: 8 << 20,
                    tmpfs: false,
                },
            ])
            .start()
            .await
            .unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        let body = data(1 << 20, 28);
        let mut written = Vec::new();
        let mut failed = None;
        for i in 0..100 {
            let p = format!("/full/f{i}");
            let res = async {
                let mut w = fs.create_with(&p, opts(1, 1 << 20)).await?;
                w.write(&body).await?;
                w.close().await
            }
            .await;
            match res {
                Ok(_) => written.push(p),
                Err(e) => {
                    failed = Some((p, e));
                    break;
                }
            }
        }
        let (p, e) = failed.expect("36 MiB of tiers must fill up");
        assert!(
            matches!(e, FsError::NoSpace { .. }),
            "expected NoSpace, got {e:?}"
        );
        assert!(written.len() >= 20, "only {} files fit", written.len());
        // no partial file
        wait_until(Duration::from_secs(10), || async {
            !fs.exists(&p).await.unwrap_or(true)
        })
        .await
        .unwrap();
        for p in &written {
            fs.delete(p, false).await.unwrap();
        }
        // space comes back once the workers delete the blocks
        wait_until(Duration::from_secs(20), || async {
            cluster.report().await.map(|r| r.used).unwrap_or(u64::MAX) == 0
        })
        .await
        .unwrap();
        // (half of what fitted: placement uses heartbeat-old free space)
        for i in 0..written.len() / 2 {
            let mut w = fs
                .create_with(&format!("/full/again{i}"), opts(1, 1 << 20))
                .await
                .unwrap();
            w.write(&body).await.unwrap();
            w.close().await.unwrap();
        }
        assert_eq!(fs.read_file("/full/again3").await.unwrap(), body);
        for i in 0..3 {
            assert!(staging_files(&cluster, i).is_empty());
        }
        cluster.shutdown().await.unwrap();
    });
}

/// This process's open sockets, and its open files under `dirs` (block and staging files;
/// not the block index's, which stay open while the worker runs).
fn open_fds(dirs: &[std::path::PathBuf]) -> (usize, usize) {
    let (mut sockets, mut files) = (0, 0);
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue;
        };
        if target.to_string_lossy().starts_with("socket:") {
            sockets += 1;
        } else if dirs
            .iter()
            .any(|d| target.starts_with(d) && !target.starts_with(d.join("index")))
        {
            files += 1;
        }
    }
    (sockets, files)
}

#[test]
fn mixed_load_of_64_clients() {
    let secs: u64 = std::env::var("CURVINE_LOAD_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    runtime().block_on(async {
        let cluster = steady3().start().await.unwrap();
        let conf = cluster.client_conf();
        let fs = CurvineFs::connect(conf.clone()).await.unwrap();
        fs.mkdir("/load", true).await.unwrap();
        let dirs: Vec<_> = (0..3).flat_map(|i| cluster.worker_dirs(i)).collect();
        let rt = tokio::runtime::Handle::current();
        let (sockets_before, _) = open_fds(&dirs);
        let tasks_before = rt.metrics().num_alive_tasks();
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut tasks = Vec::new();
        for c in 0..64u64 {
            let conf = conf.clone();
            tasks.push(tokio::spawn(async move {
                let fs = CurvineFs::connect(conf).await.unwrap();
                let mut lat: Vec<Duration> = Vec::new();
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let len = ((c * 7919 + n * 104_729) % (256 << 10)) as usize + 1;
                    let body = data(len, c * 1_000_003 + n);
                    let a = format!("/load/c{c}-{n}");
                    let b = format!("/load/c{c}-{n}.renamed");
                    let replicas = 1 + (n % 2) as u32;
                    let t = Instant::now();
                    let mut w = fs.create_with(&a, opts(replicas, 128 << 10)).await.unwrap();
                    w.write(&body).await.unwrap();
                    w.close().await.unwrap();
                    lat.push(t.elapsed());
                    let t = Instant::now();
                    assert_eq!(fs.read_file(&a).await.unwrap(), body);
                    lat.push(t.elapsed());
                    let t = Instant::now();
                    fs.rename(&a, &b).await.unwrap();
                    lat.push(t.elapsed());
                    let t = Instant::now();
                    fs.delete(&b, false).await.unwrap();
                    lat.push(t.elapsed());
                    n += 1;
                }
                lat
            }));
        }
        let started = Instant::now();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.expect("a client task failed"));
        }
        let el = started.elapsed().as_secs_f64();
        all.sort();
        let p99 = all[(all.len() * 99 / 100).min(all.len() - 1)];
        let p50 = all[all.len() / 2];
        println!(
            "FIGURE mixed load: 64 clients, {secs}s, {} ops, {:.0} ops/s, p50 {:.2} ms, p99 {:.2} ms",
            all.len(),
            all.len() as f64 / el,
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3
        );
        assert!(fs.list("/load").await.unwrap().is_empty());
        // no leaked file handles (sockets, block files) or tasks, in clients or servers
        // (one process: the 64 clients and the MiniCluster share this runtime)
        let leaks = || {
            let (sockets, data_files) = open_fds(&dirs);
            let tasks = rt.metrics().num_alive_tasks();
            (sockets, data_files, tasks)
        };
        wait_until(Duration::from_secs(20), || async {
            let (sockets, data_files, tasks) = leaks();
            sockets <= sockets_before && data_files == 0 && tasks <= tasks_before
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "leaked: (sockets, open block files, tasks) = {:?}, before: sockets \
                 {sockets_before}, tasks {tasks_before}",
                leaks()
            )
        });
        let (sockets, _, tasks) = leaks();
        println!(
            "mixed load leaks: sockets {sockets_before} -> {sockets}, tasks {tasks_before} -> \
             {tasks}, open block files 0, staging files 0"
        );
        // nothing left behind: no staging files, no blocks once deletions are delivered
        wait_until(Duration::from_secs(20), || async {
            (0..3).all(|i| staging_files(&cluster, i).is_empty() && block_files(&cluster, i).is_empty())
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "left behind: staging {:?} blocks {:?}",
                (0..3).map(|i| staging_files(&cluster, i).len()).collect::<Vec<_>>(),
                (0..3).map(|i| block_files(&cluster, i).len()).collect::<Vec<_>>()
            )
        });
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn wrong_or_missing_auth_token_is_refused() {
    runtime().block_on(async {
        let cluster = MiniCluster::builder()
            .workers(3)
            .conf(|c| {
                steady(c);
                c.cluster.auth_token = "s3cret-token".into();
            })
            .start()
            .await
            .unwrap();
        // workers registered with the token, clients with it work
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        fs.write_file("/a/ok", b"hello").await.unwrap();
        assert_eq!(fs.read_file("/a/ok").await.unwrap(), b"hello");
        // a client with a wrong token
        let mut conf = cluster.client_conf();
        conf.cluster.auth_token = "wrong".into();
        let bad = CurvineFs::connect(conf).await.unwrap();
        let e = bad.mkdir("/a/nope", true).await.unwrap_err();
        assert!(matches!(e, FsError::Unauthenticated { .. }), "{e:?}");
        let e = bad.stat("/a/ok").await.unwrap_err();
        assert!(matches!(e, FsError::Unauthenticated { .. }), "{e:?}");
        // a raw call without any token, worker-facing RPCs included
        let mut raw = MasterServiceClient::connect(format!("http://{}", cluster.master_addr()))
            .await
            .unwrap();
        let st = raw
            .mkdir(MkdirRequest {
                path: "/a/raw".into(),
                parents: true,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(st.code(), tonic::Code::Unauthenticated);
        let st = raw
            .heartbeat(curvine_common::proto::HeartbeatRequest {
                worker_id: 1,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(st.code(), tonic::Code::Unauthenticated);
        assert!(!fs.exists("/a/raw").await.unwrap());
        assert!(!fs.exists("/a/nope").await.unwrap());
        cluster.shutdown().await.unwrap();
    });
}

#[test]
fn auth_token_file_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("token");
    std::fs::write(&p, "from-file\n").unwrap();
    let mut c = ClusterConf::default();
    c.cluster.auth_token_file = p.display().to_string();
    c.resolve_auth_token().unwrap();
    assert_eq!(c.cluster.auth_token, "from-file");
    std::fs::write(&p, "\n").unwrap();
    let mut c = ClusterConf::default();
    c.cluster.auth_token_file = p.display().to_string();
    assert!(c.resolve_auth_token().is_err());
}

/// The report's entry for worker `id`.
async fn worker_report(cluster: &MiniCluster, id: u32) -> curvine_common::proto::WorkerReport {
    let r = cluster.report().await.unwrap();
    r.workers
        .into_iter()
        .find(|w| w.address.as_ref().is_some_and(|a| a.worker_id == id))
        .expect("worker in the report")
}

#[test]
fn decommission_moves_every_block_and_leaves_the_worker_empty() {
    runtime().block_on(async {
        let mut cluster = steady3().start().await.unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        let mut files = Vec::new();
        for (i, replicas) in [1, 1, 1, 1, 2, 2].into_iter().enumerate() {
            let (path, body) = (format!("/d/f{i}"), data(2_500_000 + i, 40 + i as u64));
            let mut w = fs
                .create_with(&path, opts(replicas, 1 << 20))
                .await
                .unwrap();
            w.write(&body).await.unwrap();
            w.close().await.unwrap();
            files.push((path, body, replicas as usize));
        }
        let (ids, held): (Vec<u32>, Vec<usize>) = {
            let mut ids = Vec::new();
            for i in 0..3 {
                ids.push(worker_id(&cluster, i).await);
            }
            (
                ids,
                (0..3).map(|i| block_files(&cluster, i).len()).collect(),
            )
        };
        // the worker holding the most blocks is drained
        let idx = (0..3).max_by_key(|i| held[*i]).unwrap();
        let id = ids[idx];
        assert!(held[idx] > 0, "no blocks on any worker: {held:?}");

        // bad input changes nothing
        let nobody = fs.with_identity(65534, 65534);
        let e = nobody
            .decommission(&id.to_string(), false)
            .await
            .unwrap_err();
        assert!(matches!(e, FsError::PermissionDenied { .. }), "{e}");
        for bad in ["999", "127.0.0.1:1", "nonsense"] {
            let e = fs.decommission(bad, false).await.unwrap_err();
            assert!(e.to_string().contains("no worker"), "{bad}: {e}");
        }
        assert!(!worker_report(&cluster, id).await.decommissioning);

        let a = cluster.worker_addr(idx);
        assert_eq!(
            fs.decommission(&format!("127.0.0.1:{}", a.port()), false)
                .await
                .unwrap(),
            id
        );
        wait_until(Duration::from_secs(60), || async {
            let w = worker_report(&cluster, id).await;
            curvine_common::report::drain_state(&w) == "drained"
                && block_files(&cluster, idx).is_empty()
        })
        .await
        .unwrap_or_else(|_| panic!("not drained: {:?}", block_files(&cluster, idx).len()));
        for (path, body, replicas) in &files {
            assert_eq!(&fs.read_file(path).await.unwrap(), body, "{path}");
            for b in blocks_of(&fs, path).await {
                let on: Vec<u32> = b.locations.iter().map(|l| l.worker_id).collect();
                assert!(!on.contains(&id) && on.len() == *replicas, "{path}: {on:?}");
            }
        }
        // a drained worker takes no new blocks, and stays drained across a restart
        let body = data(3_000_000, 99);
        let mut w = fs.create_with("/d/new", opts(2, 1 << 20)).await.unwrap();
        w.write(&body).await.unwrap();
        w.close().await.unwrap();
        for b in blocks_of(&fs, "/d/new").await {
            assert!(b.locations.iter().all(|l| l.worker_id != id));
        }
        cluster.restart_master().await.unwrap();
        cluster.wait_workers_live(3).await.unwrap();
        let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
        assert!(worker_report(&cluster, id).await.decommissioning);

        // draining every worker that takes blocks is refused
        let others: Vec<u32> = ids.iter().copied().filter(|w| *w != id).collect();
        fs.decommission(&others[0].to_string(), false)
            .await
            .unwrap();
        let e = fs
            .decommission(&others[1].to_string(), false)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("nowhere to go"), "{e}");
        for w in [others[0], id] {
            fs.decommission(&w.to_string(), true).await.unwrap();
            assert_eq!(
                curvine_common::report::drain_state(&worker_report(&cluster, w).await),
                "none"
            );
        }
        assert_eq!(fs.read_file("/d/new").await.unwrap(), body);
        cluster.shutdown().await.unwrap();
    });
}
