//! Load jobs and read-through under faults, against a real S3 server on loopback
//! (s3s-fs): `cv load`'s master-run jobs (progress, cancel, a worker lost mid-job, a
//! master restarted mid-job, a leader stopped mid-job, the store gone afterwards),
//! concurrent cold readers of one block, read-ahead, and a worker lost during a cold
//! read. Each test runs its own cluster and server, since they stop nodes. Needs
//! `--features curvine-server/fault-injection`.

use std::time::Duration;

mod common;

use common::runtime;
use common::ufs::{bucket_op, mount_info, on_a_worker, on_worker, put};
use curvine_client::proto::{LoadJob, LoadState};
use curvine_client::CurvineFs;
use curvine_common::conf::{ByteSize, Dur};
use curvine_server::fault::{self, Fault};
use curvine_server::testing::ha::HaCluster;
use curvine_server::testing::s3::{object_data as data, options as s3_options, Proxy, S3Server};
use curvine_server::testing::{wait_until, MiniCluster};

const BS: usize = 96 << 10;
const BUCKET: &str = "bkt";

async fn cluster(workers: usize) -> MiniCluster {
    MiniCluster::builder()
        .workers(workers)
        .conf(|c| {
            c.master.block_size = ByteSize(BS as u64);
            c.master.worker_lost_timeout = Dur(Duration::from_secs(1));
            c.master.load_per_worker = 2;
            c.worker.chunk_size = ByteSize(16 << 10);
            c.worker.heartbeat_interval = Dur(Duration::from_millis(100));
        })
        .start()
        .await
        .expect("cluster")
}

/// Put `objects` (key, bytes) into the test bucket and mount `s3://bkt/prefix` at
/// `path` through `endpoint`.
async fn mount_with(
    fs: &CurvineFs,
    s3: &S3Server,
    endpoint: &str,
    prefix: &str,
    path: &str,
    objects: &[(String, Vec<u8>)],
) {
    for (k, v) in objects {
        put(s3, BUCKET, &format!("{prefix}/{k}"), v).await;
    }
    let uri = format!("s3://{BUCKET}/{prefix}");
    fs.mount(mount_info(&uri, path, s3_options(endpoint)))
        .await
        .expect("mount");
}

/// Wait until job `id` ends; its last state.
async fn wait_job(fs: &CurvineFs, id: u64, within: Duration) -> LoadJob {
    let r = wait_until(within, || async {
        fs.load_job(id)
            .await
            .is_ok_and(|j| j.state != LoadState::LoadRunning as i32)
    })
    .await;
    let j = fs.load_job(id).await.expect("job");
    assert!(r.is_ok(), "job {id} did not end within {within:?}: {j:?}");
    j
}

/// Slow the fetches of the worker at data address `w` by `delay`, submit a load of
/// `path` (not recursive) and wait until that worker has taken one of its blocks.
async fn load_with_slow_fetches(fs: &CurvineFs, w: &str, delay: Duration, path: &str) -> LoadJob {
    fault::arm_at("worker.ufs_fetch", [w], Fault::Delay(delay), None);
    let job = fs.submit_load(path, false).await.unwrap();
    wait_until(Duration::from_secs(20), || async {
        fault::fired("worker.ufs_fetch", [w]) > 0
    })
    .await
    .expect("the worker got load tasks");
    job
}

fn objects() -> Vec<(String, Vec<u8>)> {
    [
        ("empty", 0),
        ("one", 1),
        ("dir/exact", BS),
        ("dir/plus", BS + 1),
        ("dir/sub/several", 3 * BS + 7),
    ]
    .iter()
    .enumerate()
    .map(|(i, (k, n))| (k.to_string(), data(*n, i as u64 + 100)))
    .collect()
}

#[test]
fn a_load_job_caches_every_file_and_they_read_with_the_store_gone() {
    runtime().block_on(async {
        let c = cluster(2).await;
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        let mut s3 = S3Server::start(&[BUCKET]).await.unwrap();
        let objs = objects();
        mount_with(&fs, &s3, &s3.endpoint(), "l1", "/l1", &objs).await;
        let job = fs.submit_load("/l1", true).await.unwrap();
        assert_eq!(job.state, LoadState::LoadRunning as i32);
        let j = wait_job(&fs, job.id, Duration::from_secs(30)).await;
        let total: usize = objs.iter().map(|(_, v)| v.len()).sum();
        assert_eq!(j.state, LoadState::LoadDone as i32, "{j:?}");
        assert_eq!((j.files_total, j.files_done, j.files_failed), (5, 5, 0));
        assert_eq!((j.bytes_total, j.bytes_done), (total as u64, total as u64));
        assert_eq!(j.blocks_done, j.blocks_total);
        // empty 0, one 1, exact 1, plus 2, several 4
        assert_eq!(j.blocks_total, 8);
        // the job is listed by path; the report lists only running jobs
        let by_path = fs.load_jobs("/l1").await.unwrap();
        assert!(by_path.iter().any(|x| x.id == job.id));
        assert!(fs.report().await.unwrap().load_jobs.is_empty());
        // every block is on a worker, and the master knows where
        for (k, _) in &objs {
            let path = format!("/l1/{k}");
            for b in fs.block_locations(&path).await.unwrap() {
                assert!(on_a_worker(&c, b.block_id), "{path}: block not loaded");
            }
        }
        let known = wait_until(Duration::from_secs(10), || async {
            let mut all = true;
            for (k, _) in &objs {
                let bs = fs.block_locations(&format!("/l1/{k}")).await.unwrap();
                all &= bs
                    .iter()
                    .all(|b| b.ufs.is_none() && !b.locations.is_empty());
            }
            all
        })
        .await;
        assert!(known.is_ok(), "the master does not know the loaded blocks");
        // the store is gone: every file still reads, byte for byte
        s3.kill();
        for (k, v) in &objs {
            let got = fs.read_file(&format!("/l1/{k}")).await.unwrap();
            assert!(got == *v, "{k}: differs after the store stopped");
        }
        // loading again with everything cached ends at once with nothing to fetch
        let again = fs.submit_load("/l1", true).await.unwrap();
        let j = wait_job(&fs, again.id, Duration::from_secs(10)).await;
        assert_eq!(j.state, LoadState::LoadDone as i32, "{j:?}");
        assert_eq!(j.files_done, 5);
        c.shutdown().await.unwrap();
    });
}

#[test]
fn a_load_finishes_on_another_worker_when_one_is_lost() {
    runtime().block_on(async {
        let mut c = cluster(2).await;
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        let s3 = S3Server::start(&[BUCKET]).await.unwrap();
        let objs: Vec<(String, Vec<u8>)> = (0..4)
            .map(|i| (format!("f{i}"), data(2 * BS + i, 200 + i as u64)))
            .collect();
        mount_with(&fs, &s3, &s3.endpoint(), "l2", "/l2", &objs).await;
        // worker 0's fetches hang: it is stopped while it holds load tasks
        let w0 = c.worker_addr(0).to_string();
        let job = load_with_slow_fetches(&fs, &w0, Duration::from_secs(600), "/l2").await;
        c.stop_worker(0).await.unwrap();
        let j = wait_job(&fs, job.id, Duration::from_secs(30)).await;
        fault::clear_at("worker.ufs_fetch", [&w0]);
        assert_eq!(j.state, LoadState::LoadDone as i32, "{j:?}");
        assert_eq!((j.files_done, j.blocks_done), (4, 2 + 3 * 3));
        for (k, v) in &objs {
            let path = format!("/l2/{k}");
            for b in fs.block_locations(&path).await.unwrap() {
                assert!(on_worker(&c, 1, b.block_id), "{path}: not on worker 1");
            }
            assert!(fs.read_file(&path).await.unwrap() == *v, "{path} differs");
        }
        c.shutdown().await.unwrap();
    });
}

#[test]
fn a_restarted_master_carries_on_its_load_jobs() {
    runtime().block_on(async {
        let mut c = cluster(1).await;
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        let s3 = S3Server::start(&[BUCKET]).await.unwrap();
        let objs: Vec<(String, Vec<u8>)> = (0..3)
            .map(|i| (format!("f{i}"), data(2 * BS + i, 500 + i as u64)))
            .collect();
        mount_with(&fs, &s3, &s3.endpoint(), "l5", "/l5", &objs).await;
        // the worker's fetches are slow: the master stops while the job has blocks out
        let w0 = c.worker_addr(0).to_string();
        let job = load_with_slow_fetches(&fs, &w0, Duration::from_secs(2), "/l5").await;
        let before = fs.load_job(job.id).await.unwrap();
        assert_eq!(before.state, LoadState::LoadRunning as i32, "{before:?}");
        c.restart_master().await.unwrap();
        fault::clear_at("worker.ufs_fetch", [&w0]);
        // the same job, carried on to the end by the restarted master
        let j = wait_job(&fs, job.id, Duration::from_secs(30)).await;
        assert_eq!(j.state, LoadState::LoadDone as i32, "{j:?}");
        assert_eq!((j.path.as_str(), j.started_ms), ("/l5", job.started_ms));
        // f0 is two blocks long, f1 and f2 three
        assert_eq!((j.files_done, j.blocks_done, j.blocks_total), (3, 8, 8));
        for (k, v) in &objs {
            let path = format!("/l5/{k}");
            for b in fs.block_locations(&path).await.unwrap() {
                assert!(on_a_worker(&c, b.block_id), "{path}: block not loaded");
            }
            assert!(fs.read_file(&path).await.unwrap() == *v, "{path} differs");
        }
        // ids are not given twice across restarts, and a cancelled job stays cancelled
        mount_with(&fs, &s3, &s3.endpoint(), "l6", "/l6", &objs).await;
        let next = load_with_slow_fetches(&fs, &w0, Duration::from_secs(2), "/l6").await;
        assert!(next.id > job.id, "{} after {}", next.id, job.id);
        let cancelled = fs.cancel_load(next.id).await.unwrap();
        assert_eq!(cancelled.state, LoadState::LoadCancelled as i32);
        c.restart_master().await.unwrap();
        fault::clear_at("worker.ufs_fetch", [&w0]);
        let j = fs.load_job(next.id).await.unwrap();
        assert_eq!(j.state, LoadState::LoadCancelled as i32, "{j:?}");
        let ended = fs.load_job(job.id).await.unwrap();
        assert_eq!(ended.state, LoadState::LoadDone as i32, "{ended:?}");
        c.shutdown().await.unwrap();
    });
}

#[test]
fn a_load_job_carries_on_under_the_next_leader() {
    runtime().block_on(async {
        let mut c = HaCluster::start_with(3, |c| {
            c.master.block_size = ByteSize(BS as u64);
            c.master.load_per_worker = 2;
        })
        .await
        .unwrap();
        let first = common::ha::leader(&c, Duration::from_secs(30)).await;
        c.start_workers_with(1, |w| {
            w.worker.chunk_size = ByteSize(16 << 10);
            w.worker.heartbeat_interval = Dur(Duration::from_millis(100));
        })
        .await
        .unwrap();
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        let mut s3 = S3Server::start(&[BUCKET]).await.unwrap();
        let objs: Vec<(String, Vec<u8>)> = (0..3)
            .map(|i| (format!("f{i}"), data(2 * BS + i, 700 + i as u64)))
            .collect();
        mount_with(&fs, &s3, &s3.endpoint(), "h1", "/h1", &objs).await;
        // the worker takes the job's first tasks from the first leader, slowly
        let w = c.worker_addr(0).to_string();
        let job = load_with_slow_fetches(&fs, &w, Duration::from_secs(2), "/h1").await;
        c.stop(first).await.unwrap();
        fault::clear_at("worker.ufs_fetch", [&w]);
        // the job, under its id, is carried on to the end by the next leader
        let j = wait_job(&fs, job.id, Duration::from_secs(30)).await;
        assert_eq!(j.state, LoadState::LoadDone as i32, "{j:?}");
        assert_eq!((j.path.as_str(), j.started_ms), ("/h1", job.started_ms));
        // f0 is two blocks long, f1 and f2 three
        assert_eq!((j.files_done, j.blocks_done, j.blocks_total), (3, 8, 8));
        let next = common::ha::leader(&c, Duration::from_secs(30)).await;
        assert_ne!(next, first);
        // every file reads from the cache alone
        s3.kill();
        for (k, v) in &objs {
            let path = format!("/h1/{k}");
            assert!(fs.read_file(&path).await.unwrap() == *v, "{path} differs");
        }
        c.shutdown().await.unwrap();
    });
}

#[test]
fn a_cancelled_load_stops_and_says_so() {
    runtime().block_on(async {
        let c = cluster(1).await;
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        let s3 = S3Server::start(&[BUCKET]).await.unwrap();
        let objs: Vec<(String, Vec<u8>)> = (0..3)
            .map(|i| (format!("f{i}"), data(3 * BS, 300 + i as u64)))
            .collect();
        mount_with(&fs, &s3, &s3.endpoint(), "l3", "/l3", &objs).await;
        let w0 = c.worker_addr(0).to_string();
        fault::arm_at(
            "worker.ufs_fetch",
            [&w0],
            Fault::Delay(Duration::from_secs(2)),
            None,
        );
        let job = fs.submit_load("/l3", false).await.unwrap();
        wait_until(Duration::from_secs(20), || async {
            fs.report().await.is_ok_and(|r| {
                r.load_jobs
                    .iter()
                    .any(|j| j.id == job.id && j.blocks_in_flight > 0)
            })
        })
        .await
        .expect("the job runs and is in the report");
        let j = fs.cancel_load(job.id).await.unwrap();
        fault::clear_at("worker.ufs_fetch", [&w0]);
        assert_eq!(j.state, LoadState::LoadCancelled as i32, "{j:?}");
        assert!(j.blocks_done < 9, "{j:?}");
        let j = fs.load_job(job.id).await.unwrap();
        assert_eq!(j.state, LoadState::LoadCancelled as i32);
        assert!(fs.report().await.unwrap().load_jobs.is_empty());
        // an unknown job is NotFound
        assert!(fs.cancel_load(9999).await.is_err());
        c.shutdown().await.unwrap();
    });
}

#[test]
fn a_load_of_a_missing_object_fails_naming_the_store_and_key() {
    runtime().block_on(async {
        let c = cluster(1).await;
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        let s3 = S3Server::start(&[BUCKET]).await.unwrap();
        let objs = vec![
            ("ok".to_string(), data(BS, 400)),
            ("gone".to_string(), data(BS, 401)),
        ];
        mount_with(&fs, &s3, &s3.endpoint(), "l4", "/l4", &objs).await;
        assert_eq!(fs.list("/l4").await.unwrap().len(), 2);
        bucket_op(&s3, BUCKET).delete("l4/gone").await.unwrap();
        let job = fs.submit_load("/l4", false).await.unwrap();
        let j = wait_job(&fs, job.id, Duration::from_secs(30)).await;
        assert_eq!(j.state, LoadState::LoadFailed as i32, "{j:?}");
        assert_eq!((j.files_done, j.files_failed), (1, 1), "{j:?}");
        let e = j.errors.first().expect("an error");
        assert!(e.contains("s3://bkt/l4") && e.contains("gone"), "{e}");
        c.shutdown().await.unwrap();
    });
}

#[test]
fn concurrent_cold_readers_of_a_block_cause_one_store_read() {
    runtime().block_on(async {
        let c = cluster(2).await;
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        let s3 = S3Server::start(&[BUCKET]).await.unwrap();
        let proxy = Proxy::start(s3.addr).await.unwrap();
        let v = data(4 * BS, 500);
        let objs = vec![("f".to_string(), v.clone())];
        mount_with(&fs, &s3, &proxy.endpoint(), "r1", "/r1", &objs).await;
        fs.stat("/r1/f").await.unwrap();
        // the fetches wait a moment so every reader arrives while they run
        let ws: Vec<String> = (0..2).map(|i| c.worker_addr(i).to_string()).collect();
        fault::arm_at(
            "worker.ufs_fetch",
            &ws,
            Fault::Delay(Duration::from_millis(300)),
            None,
        );
        let before = proxy.received();
        let reads = (0..4).map(|_| {
            let fs = fs.clone();
            tokio::spawn(async move { fs.read_file("/r1/f").await })
        });
        for r in futures_util::future::join_all(reads).await {
            assert!(r.unwrap().unwrap() == v, "a concurrent read differs");
        }
        fault::clear_at("worker.ufs_fetch", &ws);
        let got = proxy.received() - before;
        // one GET per block: the object's bytes plus headers, not four times them
        assert!(
            got >= v.len() as u64 && got < v.len() as u64 * 3 / 2,
            "{got} bytes from the store for a {} byte object",
            v.len()
        );
        c.shutdown().await.unwrap();
    });
}

#[test]
fn a_cold_read_finishes_on_another_worker_when_its_fetcher_is_lost() {
    runtime().block_on(async {
        let mut c = cluster(2).await;
        // no read-ahead: only the reader's own fetch may hang
        let mut conf = c.client_conf();
        conf.client.ufs_read_ahead_blocks = 0;
        let fs = CurvineFs::connect(conf).await.unwrap();
        let s3 = S3Server::start(&[BUCKET]).await.unwrap();
        let v = data(3 * BS + 5, 600);
        let objs = vec![("f".to_string(), v.clone())];
        mount_with(&fs, &s3, &s3.endpoint(), "r2", "/r2", &objs).await;
        fs.stat("/r2/f").await.unwrap();
        // the first fetch hangs on whichever worker the master picked: one rule per
        // worker, so the one that fired names it
        let ws: Vec<String> = (0..2).map(|i| c.worker_addr(i).to_string()).collect();
        for w in &ws {
            fault::arm_at(
                "worker.ufs_fetch",
                [w],
                Fault::Delay(Duration::from_secs(600)),
                Some(1),
            );
        }
        let reader = {
            let fs = fs.clone();
            tokio::spawn(async move { fs.read_file("/r2/f").await })
        };
        wait_until(Duration::from_secs(20), || async {
            ws.iter().any(|w| fault::fired("worker.ufs_fetch", [w]) > 0)
        })
        .await
        .expect("a fetch started");
        let lost = (0..2)
            .find(|&i| fault::fired("worker.ufs_fetch", [&ws[i]]) > 0)
            .unwrap();
        fault::clear_at("worker.ufs_fetch", [&ws[1 - lost]]);
        c.stop_worker(lost).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(30), reader)
            .await
            .expect("the read finished")
            .unwrap()
            .unwrap();
        fault::clear_at("worker.ufs_fetch", &ws);
        assert!(got == v, "the read differs");
        for b in fs.block_locations("/r2/f").await.unwrap() {
            assert!(
                on_worker(&c, 1 - lost, b.block_id),
                "block {} not fetched",
                b.block_id
            );
        }
        c.shutdown().await.unwrap();
    });
}

#[test]
fn a_sequential_reader_has_the_next_block_fetched_ahead() {
    runtime().block_on(async {
        let c = cluster(2).await;
        let fs = CurvineFs::connect(c.client_conf()).await.unwrap();
        let s3 = S3Server::start(&[BUCKET]).await.unwrap();
        let v = data(4 * BS, 700);
        let objs = vec![("f".to_string(), v.clone())];
        mount_with(&fs, &s3, &s3.endpoint(), "r3", "/r3", &objs).await;
        let blocks = fs.block_locations("/r3/f").await.unwrap();
        assert_eq!(blocks.len(), 4);
        // read the first block only
        let mut r = fs.open("/r3/f").await.unwrap();
        let mut b = vec![0u8; BS];
        r.read_full(&mut b).await.unwrap();
        assert!(b == v[..BS]);
        wait_until(Duration::from_secs(10), || async {
            on_a_worker(&c, blocks[1].block_id)
        })
        .await
        .expect("the second block is fetched ahead");
        // one block ahead (client.ufs_read_ahead_blocks = 1): the rest stays in the store
        assert!(!on_a_worker(&c, blocks[2].block_id));
        assert!(!on_a_worker(&c, blocks[3].block_id));
        // the reader goes on through the prefetched block, and the next one is fetched
        r.read_full(&mut b).await.unwrap();
        assert!(b == v[BS..2 * BS]);
        wait_until(Duration::from_secs(10), || async {
            on_a_worker(&c, blocks[2].block_id)
        })
        .await
        .expect("the third block is fetched ahead");
        drop(r);
        assert!(fs.read_file("/r3/f").await.unwrap() == v);
        c.shutdown().await.unwrap();
    });
}
