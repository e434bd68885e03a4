//! The mount's Prometheus metrics (docs/metrics.md lists them): requests by opcode with
//! their latency, bytes read and written, and errors by errno. Created and registered
//! once, on first use; the per-opcode counters and histograms are resolved then, so a
//! request bumps atomics only.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Instant;

use curvine_common::web::prometheus::{
    exponential_buckets, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts,
};
use curvine_common::web::register;

/// The opcodes the mount answers, as labelled.
pub const OPS: [&str; 37] = [
    "init",
    "lookup",
    "forget",
    "batch_forget",
    "getattr",
    "setattr",
    "readlink",
    "symlink",
    "mknod",
    "mkdir",
    "unlink",
    "rmdir",
    "rename",
    "rename2",
    "link",
    "open",
    "read",
    "write",
    "statfs",
    "release",
    "fsync",
    "flush",
    "setxattr",
    "getxattr",
    "listxattr",
    "removexattr",
    "opendir",
    "readdir",
    "readdirplus",
    "releasedir",
    "fsyncdir",
    "access",
    "create",
    "interrupt",
    "fallocate",
    "destroy",
    "ready",
];

pub struct FuseMetrics {
    ops: HashMap<&'static str, (IntCounter, Histogram)>,
    errors: IntCounterVec,
    pub read_bytes: IntCounter,
    pub written_bytes: IntCounter,
}

static FUSE: LazyLock<FuseMetrics> = LazyLock::new(|| {
    let requests = register(
        IntCounterVec::new(
            Opts::new(
                "curvine_fuse_requests_total",
                "FUSE requests answered, by opcode.",
            ),
            &["op"],
        )
        .expect("valid metric"),
    );
    let latency = register(
        HistogramVec::new(
            HistogramOpts::new(
                "curvine_fuse_request_duration_seconds",
                "Time the mount took to answer a request, by opcode.",
            )
            .buckets(exponential_buckets(20e-6, 4.0, 10).expect("valid buckets")),
            &["op"],
        )
        .expect("valid metric"),
    );
    FuseMetrics {
        ops: OPS
            .iter()
            .map(|op| {
                (
                    *op,
                    (
                        requests.with_label_values(&[*op]),
                        latency.with_label_values(&[*op]),
                    ),
                )
            })
            .collect(),
        errors: register(
            IntCounterVec::new(
                Opts::new(
                    "curvine_fuse_errors_total",
                    "FUSE requests answered with an error, by opcode and errno name.",
                ),
                &["op", "errno"],
            )
            .expect("valid metric"),
        ),
        read_bytes: register(
            IntCounter::new(
                "curvine_fuse_read_bytes_total",
                "Bytes returned to read requests.",
            )
            .expect("valid metric"),
        ),
        written_bytes: register(
            IntCounter::new(
                "curvine_fuse_written_bytes_total",
                "Bytes accepted by write requests.",
            )
            .expect("valid metric"),
        ),
    }
});

/// The mount's metrics, registered on first use.
pub fn fuse() -> &'static FuseMetrics {
    &FUSE
}

impl FuseMetrics {
    /// One answered request of `op` that started at `start`; `errno` is the positive
    /// error number it failed with, if it did.
    pub fn request(&self, op: &'static str, start: Instant, errno: Option<i32>) {
        if !curvine_common::web::recording() {
            return;
        }
        if let Some((n, latency)) = self.ops.get(op) {
            n.inc();
            latency.observe(start.elapsed().as_secs_f64());
        }
        if let Some(e) = errno {
            self.errors
                .with_label_values(&[op, errno_name(e).as_str()])
                .inc();
        }
    }
}

/// `ENOENT` for 2, and so on for the errors a mount answers with; the number otherwise.
pub fn errno_name(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENODEV => "ENODEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::EMLINK => "EMLINK",
        libc::ERANGE => "ERANGE",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ELOOP => "ELOOP",
        libc::ENODATA => "ENODATA",
        libc::ENOTSUP => "ENOTSUP",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EINTR => "EINTR",
        libc::ESTALE => "ESTALE",
        _ => return e.to_string(),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_counted_by_name() {
        let m = fuse();
        let before = m.errors.with_label_values(&["lookup", "ENOENT"]).get();
        m.request("lookup", Instant::now(), Some(libc::ENOENT));
        m.request("lookup", Instant::now(), None);
        assert_eq!(
            m.errors.with_label_values(&["lookup", "ENOENT"]).get(),
            before + 1
        );
        assert_eq!(errno_name(9999), "9999");
    }
}

#[cfg(test)]
mod dashboard {
    /// Every `curvine_fuse_*` metric the Grafana dashboard queries is registered.
    #[test]
    fn every_fuse_metric_the_dashboard_queries_exists() {
        // a labelled family is exported once it has a sample: give the errors one
        super::fuse().request("lookup", std::time::Instant::now(), Some(libc::ENOENT));
        let exported: Vec<String> = curvine_common::web::prometheus::gather()
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        let text = include_str!("../../etc/grafana/curvine.json");
        let mut checked = 0;
        for w in text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("curvine_fuse_"))
        {
            let base = w.strip_suffix("_bucket").unwrap_or(w);
            assert!(exported.iter().any(|n| n == base), "{base} not exported");
            checked += 1;
        }
        assert!(checked >= 4);
    }
}
