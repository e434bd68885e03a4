//! Helpers for the tests of replicated masters (`testing::ha::HaCluster`).

use std::time::Duration;

use curvine_client::CurvineFs;
use curvine_server::testing::ha::HaCluster;
use curvine_server::testing::wait_until;

/// The index of the master that accepts a mutation (the leader), once one does within
/// `wait`.
pub async fn leader(c: &HaCluster, wait: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        for i in 0..c.len() {
            if !c.running(i) {
                continue;
            }
            let Ok(fs) = CurvineFs::connect(c.conf_of(i)).await else {
                continue;
            };
            if fs.mkdir("/", true).await.is_ok() {
                return i;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader elected within {wait:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait (up to `wait`) until master `i` has every path of `paths` and none of `gone`.
pub async fn has_all(c: &HaCluster, i: usize, paths: &[String], gone: &[String], wait: Duration) {
    let fs = CurvineFs::connect(c.conf_of(i)).await.unwrap();
    let fs = &fs;
    let ok = wait_until(wait, || async move {
        for p in paths {
            if !fs.exists(p).await.unwrap_or(false) {
                return false;
            }
        }
        for p in gone {
            if fs.exists(p).await.unwrap_or(true) {
                return false;
            }
        }
        true
    })
    .await;
    assert!(ok.is_ok(), "master {i} lacks acknowledged changes");
}
