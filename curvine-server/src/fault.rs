//! Fault injection for tests (cargo feature `fault-injection`, off by default).
//!
//! Named points in the servers call a hook macro; without the feature the macros expand
//! to nothing (or to a constant), so release binaries carry no hooks and no point names.
//! With the feature, a test arms a fault on a point:
//!
//! ```ignore
//! fault::arm_at("disk.commit", [worker_addr], Fault::Os(libc::EIO), Some(1));
//! ```
//!
//! Points and what each fault does there:
//! - `master.<Rpc>` (e.g. `master.Create`, `master.AddBlock`, `master.GetStatus`), at the
//!   top of every master RPC handler; scope = the master's `ip:port`. `Delay` sleeps
//!   before handling, `Error` replies with that error, `Drop` never replies (a lost
//!   request; the client's rpc timeout fires).
//! - `master.namespace`, on the blocking thread of every master call that reads or
//!   changes the namespace, before it does; scope = the master's `ip:port`. `Panic`
//!   panics there (the call fails with `Internal`, the master serves on), `Delay`
//!   sleeps, `Error` fails the call with that error.
//! - `master.purge`, on the blocking thread before each entry of the removal of a
//!   detached subtree (a large recursive delete); scope = the master's `ip:port`.
//!   `Delay` slows the removal down, `Error` fails the step (retried after a second).
//! - `worker.read_block`, `worker.write_block`, at the open of a data-plane block read or
//!   write; scope = the worker's `host:port`. `Delay` sleeps, `Error` answers an ERROR
//!   frame, `Drop` closes the connection mid-stream without an error frame (a read sends
//!   its first data frame first; a write takes its first data frame first).
//! - `worker.ufs_fetch`, before a worker fetches a block from the under-store (a read
//!   through or a load job's block); scope = the worker's `host:port`. `Delay` sleeps,
//!   `Error` fails the fetch with that error (nothing is kept).
//! - `disk.write_chunk` (each payload written to a staging file), `disk.commit` (the
//!   staging -> blocks rename), `disk.read_chunk` (each pread of a remote read); scope =
//!   the worker's `host:port`. `Os(errno)` fails the syscall with that errno (ENOSPC
//!   becomes `FsError::NoSpace`), `Error` fails it with that error, `Delay` sleeps
//!   (these points run on blocking threads), `Drop` is EIO.
//! - `Panic` panics at any point, as a bug there would.
//!
//! The registry is process-global (MiniCluster runs every node in the test's process);
//! rules scoped to one cluster's addresses keep parallel tests apart.

#[cfg(feature = "fault-injection")]
pub use registry::*;

/// Master RPC hook: `fault_rpc!("master.Create", &req);` at the top of a handler
/// returning `Result<_, tonic::Status>`.
#[cfg(feature = "fault-injection")]
macro_rules! fault_rpc {
    ($point:expr, $req:expr) => {
        $crate::fault::rpc_hook($point, $req.local_addr()).await?
    };
}
#[cfg(not(feature = "fault-injection"))]
macro_rules! fault_rpc {
    ($point:expr, $req:expr) => {
        let _ = &$req;
    };
}

/// Data-plane hook: evaluates to `true` when the connection must be dropped mid-stream;
/// `?`s an injected error. In an async fn returning `FsResult`.
#[cfg(feature = "fault-injection")]
macro_rules! fault_data {
    ($point:expr, $scope:expr) => {
        $crate::fault::data_hook($point, $scope).await?
    };
}
#[cfg(not(feature = "fault-injection"))]
macro_rules! fault_data {
    ($point:expr, $scope:expr) => {{
        let _ = &$scope;
        false
    }};
}

/// After a data-plane hook said so, end the stream by closing the connection without
/// an error frame: `fault_drop!(return drop_conn, conn)` or `fault_drop!(break ...)`.
#[cfg(feature = "fault-injection")]
macro_rules! fault_drop {
    (return $cond:expr, $conn:expr) => {
        if $cond {
            return $crate::worker::data_server::drop_mid_stream($conn).await;
        }
    };
    (break $cond:expr, $conn:expr) => {
        if $cond {
            break $crate::worker::data_server::drop_mid_stream($conn).await;
        }
    };
}
#[cfg(not(feature = "fault-injection"))]
macro_rules! fault_drop {
    ($kw:tt $cond:expr, $conn:expr) => {
        let _ = $cond;
    };
}

/// Disk hook (blocking context): `?`s an injected I/O error, or sleeps.
#[cfg(feature = "fault-injection")]
macro_rules! fault_disk {
    ($point:expr, $scope:expr) => {
        $crate::fault::disk_hook($point, $scope)?
    };
}
#[cfg(not(feature = "fault-injection"))]
macro_rules! fault_disk {
    ($point:expr, $scope:expr) => {
        let _ = &$scope;
    };
}

#[cfg(feature = "fault-injection")]
mod registry {
    use std::collections::HashMap;
    use std::net::SocketAddr;
    use std::sync::{Mutex, MutexGuard, OnceLock};
    use std::time::Duration;

    use curvine_common::{FsError, FsResult};
    use tracing::warn;

    /// What an armed point does when hit.
    #[derive(Debug, Clone)]
    pub enum Fault {
        /// Sleep, then carry on.
        Delay(Duration),
        /// Fail with this error.
        Error(FsError),
        /// Fail an I/O syscall with this errno (`libc::EIO`, `libc::ENOSPC`).
        Os(i32),
        /// Lose the request or connection (see the module docs per point).
        Drop,
        /// Panic (a bug at that point).
        Panic,
    }

    #[derive(Debug)]
    struct Rule {
        /// Addresses (`ip:port`) the rule applies to; empty = every node.
        scope: Vec<String>,
        fault: Fault,
        /// Hits left; `None` = until cleared.
        remaining: Option<u32>,
        /// Times it fired.
        fired: u32,
    }

    fn rules() -> MutexGuard<'static, HashMap<String, Vec<Rule>>> {
        static RULES: OnceLock<Mutex<HashMap<String, Vec<Rule>>>> = OnceLock::new();
        RULES
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Arm `fault` on `point` for every node, for `times` hits (`None` = until cleared).
    pub fn arm(point: &str, fault: Fault, times: Option<u32>) {
        arm_at(point, Vec::<String>::new(), fault, times);
    }

    /// Arm `fault` on `point` of the nodes listening on `scope` (`ip:port`). The hit
    /// count is shared: with `times = Some(1)` only the first of them to be hit fails.
    pub fn arm_at<S: ToString>(
        point: &str,
        scope: impl IntoIterator<Item = S>,
        fault: Fault,
        times: Option<u32>,
    ) {
        let scope = scope.into_iter().map(|s| s.to_string()).collect();
        rules().entry(point.to_string()).or_default().push(Rule {
            scope,
            fault,
            remaining: times,
            fired: 0,
        });
    }

    /// Remove every rule on `point` that matches any of `scope` (or all when empty).
    pub fn clear_at<S: ToString>(point: &str, scope: impl IntoIterator<Item = S>) {
        let scope: Vec<String> = scope.into_iter().map(|s| s.to_string()).collect();
        if let Some(v) = rules().get_mut(point) {
            v.retain(|r| !scope.is_empty() && !r.scope.iter().any(|s| scope.contains(s)));
        }
    }

    /// Remove every rule.
    pub fn clear_all() {
        rules().clear();
    }

    /// How often rules on `point` matching `scope` (any, when empty) fired.
    pub fn fired<S: ToString>(point: &str, scope: impl IntoIterator<Item = S>) -> u32 {
        let scope: Vec<String> = scope.into_iter().map(|s| s.to_string()).collect();
        rules().get(point).map_or(0, |v| {
            v.iter()
                .filter(|r| scope.is_empty() || r.scope.iter().any(|s| scope.contains(s)))
                .map(|r| r.fired)
                .sum()
        })
    }

    /// The fault to apply at `point` on node `node`, consuming one hit.
    pub fn take(point: &str, node: &str) -> Option<Fault> {
        let mut g = rules();
        let v = g.get_mut(point)?;
        let r = v.iter_mut().find(|r| {
            r.remaining != Some(0) && (r.scope.is_empty() || r.scope.iter().any(|s| s == node))
        })?;
        if let Some(n) = r.remaining.as_mut() {
            *n -= 1;
        }
        r.fired += 1;
        warn!(point, node, fault = ?r.fault, "injecting fault");
        Some(r.fault.clone())
    }

    fn os_error(point: &str, errno: i32) -> FsError {
        FsError::io_ctx(
            format!("injected fault at {point}"),
            std::io::Error::from_raw_os_error(errno),
        )
    }

    /// See `fault_rpc!`.
    pub async fn rpc_hook(point: &str, local: Option<SocketAddr>) -> Result<(), tonic::Status> {
        let node = local.map(|a| a.to_string()).unwrap_or_default();
        match take(point, &node) {
            None => Ok(()),
            Some(Fault::Delay(d)) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
            Some(Fault::Error(e)) => Err(e.into()),
            Some(Fault::Os(errno)) => Err(os_error(point, errno).into()),
            Some(Fault::Drop) => std::future::pending().await,
            Some(Fault::Panic) => panic!("injected panic at {point}"),
        }
    }

    /// See `fault_data!`: Ok(true) = drop the connection mid-stream.
    pub async fn data_hook(point: &str, node: &str) -> FsResult<bool> {
        match take(point, node) {
            None => Ok(false),
            Some(Fault::Delay(d)) => {
                tokio::time::sleep(d).await;
                Ok(false)
            }
            Some(Fault::Error(e)) => Err(e),
            Some(Fault::Os(errno)) => Err(os_error(point, errno)),
            Some(Fault::Drop) => Ok(true),
            Some(Fault::Panic) => panic!("injected panic at {point}"),
        }
    }

    /// See `fault_disk!`.
    pub fn disk_hook(point: &str, node: &str) -> FsResult<()> {
        match take(point, node) {
            None => Ok(()),
            Some(Fault::Delay(d)) => {
                std::thread::sleep(d);
                Ok(())
            }
            Some(Fault::Error(e)) => Err(e),
            Some(Fault::Os(errno)) => Err(os_error(point, errno)),
            Some(Fault::Drop) => Err(os_error(point, libc::EIO)),
            Some(Fault::Panic) => panic!("injected panic at {point}"),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn scoped_rules_fire_only_on_their_nodes_and_count_down() {
            let p = "test.scoped";
            arm_at(p, ["a:1", "b:2"], Fault::Os(libc::EIO), Some(2));
            assert!(take(p, "c:3").is_none());
            assert!(matches!(take(p, "b:2"), Some(Fault::Os(_))));
            assert!(matches!(take(p, "a:1"), Some(Fault::Os(_))));
            assert!(take(p, "a:1").is_none(), "only two hits were armed");
            assert_eq!(fired(p, ["a:1"]), 2);
            assert_eq!(fired(p, ["c:3"]), 0);
            clear_at(p, ["a:1"]);
            assert_eq!(fired(p, Vec::<String>::new()), 0);
        }

        #[test]
        fn enospc_maps_to_no_space() {
            let p = "test.enospc";
            arm_at(p, ["n:1"], Fault::Os(libc::ENOSPC), None);
            for _ in 0..3 {
                let e = disk_hook(p, "n:1").unwrap_err();
                assert!(matches!(e, FsError::NoSpace { .. }), "{e:?}");
            }
            assert!(disk_hook(p, "other:1").is_ok());
            clear_at(p, ["n:1"]);
            assert!(disk_hook(p, "n:1").is_ok());
        }
    }
}
