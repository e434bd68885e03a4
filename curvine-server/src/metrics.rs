//! The master's and the worker's Prometheus metrics (docs/metrics.md lists them).
//!
//! Each side's metrics are created and registered once, on first use ([`master`],
//! [`worker`]). Hot paths bump counters and histograms resolved at creation (atomics, no
//! lock); gauges that mirror state the master or the worker already keeps (namespace
//! sizes, tier usage) are set when `/metrics` is scraped.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Instant;

use curvine_common::proto::{ReportResponse, StorageTier, TierReport};
use curvine_common::web::prometheus::{
    exponential_buckets, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts,
};
use curvine_common::web::{recording, register};

macro_rules! method_names {
    ($($id:literal $name:ident $req:ident $resp:ident $f:ident;)*) => {
        /// The master's RPC methods, as named in `curvine.proto`.
        pub const MASTER_METHODS: &[&str] = &[$(stringify!($name)),*];
    };
}
curvine_common::master_methods!(method_names);

const TIERS: [StorageTier; 3] = [StorageTier::Mem, StorageTier::Ssd, StorageTier::Hdd];

fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"))
}

fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    register(IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric"))
}

fn gauge(name: &str, help: &str) -> IntGauge {
    register(IntGauge::new(name, help).expect("valid metric"))
}

fn counter(name: &str, help: &str) -> IntCounter {
    register(IntCounter::new(name, help).expect("valid metric"))
}

/// Latency buckets from 50 µs to about 3 s.
fn latency_buckets() -> Vec<f64> {
    exponential_buckets(50e-6, 4.0, 9).expect("valid buckets")
}

fn tier_index(t: StorageTier) -> usize {
    match t {
        StorageTier::Mem | StorageTier::Unspecified => 0,
        StorageTier::Ssd => 1,
        StorageTier::Hdd => 2,
    }
}

/// Raise a counter that mirrors a running total kept elsewhere up to `total`.
fn catch_up(c: &IntCounter, total: u64) {
    let now = c.get();
    if total > now {
        c.inc_by(total - now);
    }
}

pub struct MasterMetrics {
    calls: HashMap<&'static str, (IntCounter, Histogram)>,
    calls_by_code: IntCounterVec,
    pub journal_sync: Histogram,
    files: IntGauge,
    dirs: IntGauge,
    blocks: IntGauge,
    workers: IntGaugeVec,
    capacity: IntGaugeVec,
    used: IntGaugeVec,
    under_replicated: IntGauge,
    missing: IntGauge,
    awaited_workers: IntGauge,
    copies_in_flight: IntGauge,
    copies_done: IntCounter,
    copies_failed: IntCounter,
    bad_replicas: IntCounter,
    scrubbed: IntGauge,
}

static MASTER: LazyLock<MasterMetrics> = LazyLock::new(|| {
    let calls_by_code = counter_vec(
        "curvine_master_calls_total",
        "Calls the master answered, by method and gRPC status code.",
        &["method", "code"],
    );
    let latency = register(
        HistogramVec::new(
            HistogramOpts::new(
                "curvine_master_call_duration_seconds",
                "Time the master took to answer a call, durability wait included, by method.",
            )
            .buckets(latency_buckets()),
            &["method"],
        )
        .expect("valid metric"),
    );
    let calls = MASTER_METHODS
        .iter()
        .map(|m| {
            (
                *m,
                (
                    calls_by_code.with_label_values(&[*m, "Ok"]),
                    latency.with_label_values(&[m]),
                ),
            )
        })
        .collect();
    MasterMetrics {
        calls,
        calls_by_code,
        journal_sync: register(
            Histogram::with_opts(
                HistogramOpts::new(
                    "curvine_master_journal_sync_duration_seconds",
                    "Time one group commit of the metadata WAL took (fsync).",
                )
                .buckets(latency_buckets()),
            )
            .expect("valid metric"),
        ),
        files: gauge("curvine_master_files", "Files in the namespace."),
        dirs: gauge("curvine_master_dirs", "Directories in the namespace."),
        blocks: gauge("curvine_master_blocks", "Blocks in the block map."),
        workers: gauge_vec(
            "curvine_master_workers",
            "Registered workers by state (live, lost).",
            &["state"],
        ),
        capacity: gauge_vec(
            "curvine_master_capacity_bytes",
            "Capacity of the live workers, by tier.",
            &["tier"],
        ),
        used: gauge_vec(
            "curvine_master_used_bytes",
            "Bytes used on the live workers, by tier.",
            &["tier"],
        ),
        under_replicated: gauge(
            "curvine_master_under_replicated_blocks",
            "Committed blocks with fewer live replicas than their file wants.",
        ),
        missing: gauge(
            "curvine_master_missing_blocks",
            "Committed blocks with no live replica.",
        ),
        awaited_workers: gauge(
            "curvine_master_awaited_workers",
            "Workers a master just started or become leader still waits to hear from \
             (0 once all reported or master.worker_report_grace passed).",
        ),
        copies_in_flight: gauge(
            "curvine_master_replication_copies_in_flight",
            "Re-replication copies scheduled and not yet reported.",
        ),
        copies_done: counter(
            "curvine_master_replication_copies_done_total",
            "Re-replication copies that finished since the master started.",
        ),
        copies_failed: counter(
            "curvine_master_replication_copies_failed_total",
            "Re-replication copies that failed or timed out since the master started.",
        ),
        bad_replicas: counter(
            "curvine_master_bad_replicas_total",
            "Replicas reported bad (failed reads, scrubber) since the master started.",
        ),
        scrubbed: gauge(
            "curvine_master_scrubbed_bytes",
            "Bytes the live workers' scrubbers verified since each started.",
        ),
    }
});

/// The master's metrics, registered on first use.
pub fn master() -> &'static MasterMetrics {
    &MASTER
}

impl MasterMetrics {
    /// Count one answered call of `method` that started at `start`; `code` is `None` for
    /// success, else the gRPC status code.
    pub fn call(&self, method: &'static str, start: Instant, code: Option<tonic::Code>) {
        let Some((ok, latency)) = self.calls.get(method) else {
            return;
        };
        latency.observe(start.elapsed().as_secs_f64());
        match code {
            None => ok.inc(),
            Some(c) => self
                .calls_by_code
                .with_label_values(&[method, format!("{c:?}").as_str()])
                .inc(),
        }
    }

    /// Set the gauges that mirror the master's report.
    pub fn refresh(&self, r: &ReportResponse) {
        let set = |g: &IntGauge, v: u64| g.set(i64::try_from(v).unwrap_or(i64::MAX));
        set(&self.files, r.files);
        set(&self.dirs, r.dirs);
        set(&self.blocks, r.blocks);
        let live = r.workers.iter().filter(|w| w.alive).count() as u64;
        set(&self.workers.with_label_values(&["live"]), live);
        set(
            &self.workers.with_label_values(&["lost"]),
            r.workers.len() as u64 - live,
        );
        let totals = curvine_common::report::tiers_total(r);
        for t in TIERS {
            let row = totals.iter().find(|x| x.tier == t as i32);
            let (cap, used) = row.map_or((0, 0), |x: &TierReport| (x.capacity, x.used));
            set(&self.capacity.with_label_values(&[t.name()]), cap);
            set(&self.used.with_label_values(&[t.name()]), used);
        }
        set(&self.under_replicated, r.under_replicated);
        set(&self.missing, r.missing_blocks);
        set(
            &self.awaited_workers,
            r.reporting
                .as_ref()
                .map_or(0, |w| u64::from(w.expected.saturating_sub(w.reported))),
        );
        set(&self.copies_in_flight, r.copies_in_flight);
        catch_up(&self.copies_done, r.copies_done);
        catch_up(&self.copies_failed, r.copies_failed);
        catch_up(&self.bad_replicas, r.bad_replicas);
        set(
            &self.scrubbed,
            r.workers
                .iter()
                .filter(|w| w.alive)
                .map(|w| w.scrubbed_bytes)
                .sum(),
        );
    }
}

/// How bytes reached or left a worker's block files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoPath {
    /// The client reads or writes the block file itself, on the worker's host.
    ShortCircuit,
    /// Streamed over the data plane.
    Remote,
    /// A re-replication copy from another worker.
    Replication,
}

impl IoPath {
    const ALL: [IoPath; 3] = [IoPath::ShortCircuit, IoPath::Remote, IoPath::Replication];

    fn label(self) -> &'static str {
        match self {
            IoPath::ShortCircuit => "short_circuit",
            IoPath::Remote => "remote",
            IoPath::Replication => "replication",
        }
    }
}

/// Where a stored block was found bad.
#[derive(Clone, Copy, Debug)]
pub enum ChecksumSource {
    /// Data a client sent did not match the CRCs it sent with it.
    Write,
    /// A re-replication copy did not match its source's CRCs.
    Replication,
    /// The scrubber found a stored block that no longer matches its CRCs.
    Scrub,
}

pub struct WorkerMetrics {
    read: [[IntCounter; 3]; 3],
    written: [[IntCounter; 3]; 3],
    blocks: IntGaugeVec,
    stored: IntGaugeVec,
    capacity: IntGaugeVec,
    evictions: [IntCounter; 3],
    evicted_bytes: [IntCounter; 3],
    checksum: [IntCounter; 3],
    pub open_streams: IntGauge,
    pub scrubbed: IntCounter,
}

fn per_tier_path(v: &IntCounterVec) -> [[IntCounter; 3]; 3] {
    TIERS.map(|t| IoPath::ALL.map(|p| v.with_label_values(&[t.name(), p.label()])))
}

static WORKER: LazyLock<WorkerMetrics> = LazyLock::new(|| {
    let read = counter_vec(
        "curvine_worker_read_bytes_total",
        "Block bytes read, by tier and path (short_circuit: granted to a client on this \
         host; remote: streamed).",
        &["tier", "path"],
    );
    let written = counter_vec(
        "curvine_worker_written_bytes_total",
        "Block bytes committed, by tier and path (short_circuit, remote, replication).",
        &["tier", "path"],
    );
    let evictions = counter_vec(
        "curvine_worker_evictions_total",
        "Blocks demoted out of a tier to the next slower one, by the tier they left.",
        &["tier"],
    );
    let evicted = counter_vec(
        "curvine_worker_evicted_bytes_total",
        "Bytes of blocks demoted out of a tier, by the tier they left.",
        &["tier"],
    );
    let checksum = counter_vec(
        "curvine_worker_checksum_failures_total",
        "Chunks found not to match their CRC32C, by where (write, replication, scrub).",
        &["source"],
    );
    WorkerMetrics {
        read: per_tier_path(&read),
        written: per_tier_path(&written),
        blocks: gauge_vec(
            "curvine_worker_blocks",
            "Committed blocks stored, by tier.",
            &["tier"],
        ),
        stored: gauge_vec(
            "curvine_worker_stored_bytes",
            "Bytes used by blocks and reservations, by tier.",
            &["tier"],
        ),
        capacity: gauge_vec(
            "curvine_worker_capacity_bytes",
            "Capacity, by tier.",
            &["tier"],
        ),
        evictions: TIERS.map(|t| evictions.with_label_values(&[t.name()])),
        evicted_bytes: TIERS.map(|t| evicted.with_label_values(&[t.name()])),
        checksum: ["write", "replication", "scrub"].map(|s| checksum.with_label_values(&[s])),
        open_streams: gauge(
            "curvine_worker_open_streams",
            "Data-plane connections open (reads and writes in progress or idle).",
        ),
        scrubbed: counter(
            "curvine_worker_scrubbed_bytes_total",
            "Block bytes the scrubber re-verified.",
        ),
    }
});

/// The worker's metrics, registered on first use.
pub fn worker() -> &'static WorkerMetrics {
    &WORKER
}

impl WorkerMetrics {
    pub fn read(&self, tier: StorageTier, path: IoPath, bytes: u64) {
        if !recording() {
            return;
        }
        self.read[tier_index(tier)][path as usize].inc_by(bytes);
    }

    pub fn written(&self, tier: StorageTier, path: IoPath, bytes: u64) {
        if !recording() {
            return;
        }
        self.written[tier_index(tier)][path as usize].inc_by(bytes);
    }

    /// One block of `bytes` demoted out of tier `from`.
    pub fn evicted(&self, from: StorageTier, bytes: u64) {
        self.evictions[tier_index(from)].inc();
        self.evicted_bytes[tier_index(from)].inc_by(bytes);
    }

    pub fn checksum_failure(&self, source: ChecksumSource) {
        self.checksum[source as usize].inc();
    }

    /// Set the per-tier gauges from the store's tier reports.
    pub fn refresh(&self, tiers: &[TierReport]) {
        for t in TIERS {
            let row = tiers.iter().find(|x| x.tier == t as i32);
            let (blocks, used, cap) = row.map_or((0, 0, 0), |x| (x.blocks, x.used, x.capacity));
            let set = |g: &IntGaugeVec, v: u64| {
                g.with_label_values(&[t.name()])
                    .set(i64::try_from(v).unwrap_or(i64::MAX))
            };
            set(&self.blocks, blocks);
            set(&self.stored, used);
            set(&self.capacity, cap);
        }
    }
}

/// Counts a data-plane connection while it is open (when metrics are recorded).
pub struct OpenStream(bool);

impl OpenStream {
    pub fn open() -> OpenStream {
        let on = recording();
        if on {
            worker().open_streams.inc();
        }
        OpenStream(on)
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        if self.0 {
            worker().open_streams.dec();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_valid_and_registered_once() {
        let m = master();
        let w = worker();
        m.call("Mkdir", Instant::now(), None);
        m.call("Mkdir", Instant::now(), Some(tonic::Code::NotFound));
        w.read(StorageTier::Ssd, IoPath::Remote, 10);
        let names: Vec<String> = curvine_common::web::prometheus::gather()
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        for n in [
            "curvine_master_calls_total",
            "curvine_master_call_duration_seconds",
            "curvine_worker_read_bytes_total",
            "curvine_worker_open_streams",
        ] {
            assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
        }
    }
}
