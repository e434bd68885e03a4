//! Shared helpers for the integration tests: one MiniCluster per test binary, hosted on
//! a runtime that outlives the individual tests (each test `block_on`s it).

#![allow(dead_code)]

pub mod ha;
pub mod ufs;

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use curvine_client::CurvineFs;
use curvine_server::testing::MiniCluster;
use tokio::runtime::Runtime;

pub struct Shared {
    pub rt: Runtime,
    pub cluster: MiniCluster,
    pub fs: CurvineFs,
    /// Workers the cluster was started with.
    pub workers: usize,
}

static SHARED: OnceLock<Shared> = OnceLock::new();

/// The binary's cluster (`workers` workers, default tiers), started on first use. The
/// first test to ask decides the count (tests run in any order), so every test of a
/// binary must ask for the same number.
pub fn shared(workers: usize) -> &'static Shared {
    let s = start_shared(workers);
    assert_eq!(
        s.workers, workers,
        "this binary's shared cluster has {} workers; every test must ask for the same count",
        s.workers
    );
    s
}

fn start_shared(workers: usize) -> &'static Shared {
    SHARED.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .expect("test runtime");
        let (cluster, fs) = rt.block_on(async {
            let cluster = MiniCluster::builder()
                .workers(workers)
                .start()
                .await
                .expect("start MiniCluster");
            let fs = CurvineFs::connect(cluster.client_conf())
                .await
                .expect("connect");
            (cluster, fs)
        });
        Shared {
            rt,
            cluster,
            fs,
            workers,
        }
    })
}

/// Run a test body on the shared runtime.
pub fn run<F: Future<Output = ()>>(workers: usize, f: impl FnOnce(&'static Shared) -> F) {
    let s = shared(workers);
    s.rt.block_on(f(s));
}

/// Deterministic test data.
pub fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A fresh runtime for tests that own their cluster.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("test runtime")
}

pub fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                files_under(&p, out);
            } else {
                out.push(p);
            }
        }
    }
}

/// Files under `sub` (`blocks` or `staging`) of every tier dir of worker `i`.
fn worker_files(cluster: &MiniCluster, i: usize, sub: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in cluster.worker_dirs(i) {
        files_under(&d.join(sub), &mut out);
    }
    out
}

/// Committed block files (not checksum sidecars) of worker `i`, by block id.
pub fn block_files(cluster: &MiniCluster, i: usize) -> HashMap<u64, PathBuf> {
    worker_files(cluster, i, "blocks")
        .into_iter()
        .filter(|p| p.extension().is_none())
        .filter_map(|p| {
            let id = p.file_name()?.to_str()?.parse().ok()?;
            Some((id, p))
        })
        .collect()
}

/// Files of writes in progress (or left behind) on worker `i`.
pub fn staging_files(cluster: &MiniCluster, i: usize) -> Vec<PathBuf> {
    worker_files(cluster, i, "staging")
}
