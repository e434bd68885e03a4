//! The set-up the under-store tests share (`ufs`, `ufs_write`, `ufs_secrets`,
//! `ufs_load`): a MiniCluster and a real S3 server (s3s-fs) on loopback, one per test
//! binary, and the bucket, mount and block helpers their tests use.

use std::collections::HashMap;
use std::future::Future;
use std::sync::OnceLock;

use curvine_client::proto::MountInfo;
use curvine_client::CurvineFs;
use curvine_common::conf::TierDir;
use curvine_common::proto::StorageTier;
use curvine_common::ClusterConf;
use curvine_server::testing::s3::{options as s3_options, S3Server};
use curvine_server::testing::MiniCluster;
use tokio::runtime::Runtime;

/// The binary's cluster and S3 server.
pub struct S3Env {
    pub rt: Runtime,
    pub cluster: MiniCluster,
    pub fs: CurvineFs,
    pub s3: S3Server,
}

static ENV: OnceLock<S3Env> = OnceLock::new();

/// The binary's cluster (`workers` workers, its conf changed by `conf`) and S3 server
/// (with `buckets`), started on first use. Every test of a binary asks with the same
/// arguments (the first one decides).
pub fn s3_env(buckets: &[&str], workers: usize, conf: fn(&mut ClusterConf)) -> &'static S3Env {
    ENV.get_or_init(|| {
        let rt = super::runtime();
        let (cluster, fs, s3) = rt.block_on(async {
            let s3 = S3Server::start(buckets).await.expect("start s3s-fs");
            let cluster = MiniCluster::builder()
                .workers(workers)
                .conf(conf)
                .start()
                .await
                .expect("cluster");
            let fs = CurvineFs::connect(cluster.client_conf())
                .await
                .expect("connect");
            (cluster, fs, s3)
        });
        S3Env {
            rt,
            cluster,
            fs,
            s3,
        }
    })
}

/// Run a test body on the binary's runtime, with its cluster and S3 server.
pub fn run_s3<F: Future<Output = ()>>(
    buckets: &[&str],
    workers: usize,
    conf: fn(&mut ClusterConf),
    f: impl FnOnce(&'static S3Env) -> F,
) {
    let e = s3_env(buckets, workers, conf);
    e.rt.block_on(f(e));
}

/// An operator on `bucket` of the server, to put and read objects the way any S3
/// client would.
pub fn bucket_op(s3: &S3Server, bucket: &str) -> opendal::Operator {
    curvine_server::ufs::build(&format!("s3://{bucket}"), &s3_options(&s3.endpoint()))
        .expect("operator")
}

pub async fn put(s3: &S3Server, bucket: &str, key: &str, bytes: &[u8]) {
    bucket_op(s3, bucket)
        .write(key, bytes.to_vec())
        .await
        .expect("put");
}

/// A mount of `uri` at `path` with `options`, a listing trusted for 60 s.
pub fn mount_info(uri: &str, path: &str, options: HashMap<String, String>) -> MountInfo {
    MountInfo {
        path: path.into(),
        ufs_uri: uri.into(),
        options,
        sync_interval_ms: 60_000,
        ..Default::default()
    }
}

/// Whether worker `i` holds a committed copy of `block` (in its MEM tier).
pub fn on_worker(cluster: &MiniCluster, i: usize, block: u64) -> bool {
    cluster.worker_dirs(i).into_iter().any(|path| {
        let dir = TierDir {
            tier: StorageTier::Mem,
            capacity: None,
            path,
        };
        curvine_server::worker::block_path(&[dir], block).is_some()
    })
}

/// Whether some worker holds a committed copy of `block`.
pub fn on_a_worker(cluster: &MiniCluster, block: u64) -> bool {
    (0..cluster.worker_count()).any(|i| on_worker(cluster, i, block))
}

/// The names in directory `path`, sorted.
pub async fn names(fs: &CurvineFs, path: &str) -> Vec<String> {
    let mut v: Vec<String> = fs
        .list(path)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    v.sort();
    v
}
