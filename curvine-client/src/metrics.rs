//! The client library's Prometheus metrics (docs/metrics.md lists them): block bytes read
//! and written by path (short-circuit or remote), and master calls by method and error
//! code with their latency. One set per process, registered on first use in the
//! process's registry, so whatever serves that registry exports them: the FUSE mount's
//! web port, `curvine-bench --metrics-port`. The per-method counters and histograms are
//! resolved at creation: a call or a read bumps atomics only.

use std::sync::LazyLock;
use std::time::Instant;

use curvine_common::web::prometheus::{
    exponential_buckets, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts,
};
use curvine_common::web::{recording, register};
use curvine_common::FsError;

macro_rules! method_table {
    ($($id:literal $name:ident $req:ident $resp:ident $f:ident;)*) => {
        /// Every master method: wire number and name.
        const METHODS: &[(u16, &str)] = &[$(($id, stringify!($name))),*];
    };
}
curvine_common::master_methods!(method_table);

/// How block bytes moved between this client and a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoPath {
    /// The client read or wrote the block file itself, on the worker's host.
    ShortCircuit = 0,
    /// Over the data plane.
    Remote = 1,
}

const PATHS: [&str; 2] = ["short_circuit", "remote"];

pub struct ClientMetrics {
    read: [IntCounter; 2],
    written: [IntCounter; 2],
    /// By method number: the `Ok` counter and the latency histogram.
    calls: Vec<Option<(IntCounter, Histogram)>>,
    calls_by_code: IntCounterVec,
    /// Failed calls of every method (for `totals`; exported through `calls_by_code`).
    errors: IntCounter,
}

static CLIENT: LazyLock<ClientMetrics> = LazyLock::new(|| {
    let read = register(
        IntCounterVec::new(
            Opts::new(
                "curvine_client_read_bytes_total",
                "Block bytes this process's clients read, by path (short_circuit, remote).",
            ),
            &["path"],
        )
        .expect("valid metric"),
    );
    let written = register(
        IntCounterVec::new(
            Opts::new(
                "curvine_client_written_bytes_total",
                "Block bytes this process's clients sent to replicas, by path \
                 (short_circuit, remote); a block on two replicas counts twice.",
            ),
            &["path"],
        )
        .expect("valid metric"),
    );
    let calls_by_code = register(
        IntCounterVec::new(
            Opts::new(
                "curvine_client_master_calls_total",
                "Master calls this process's clients made, by method and outcome (Ok or \
                 the error code).",
            ),
            &["method", "code"],
        )
        .expect("valid metric"),
    );
    let latency = register(
        HistogramVec::new(
            HistogramOpts::new(
                "curvine_client_master_call_duration_seconds",
                "Time a master call took as the caller saw it, retries and failovers \
                 included, by method.",
            )
            .buckets(exponential_buckets(50e-6, 4.0, 9).expect("valid buckets")),
            &["method"],
        )
        .expect("valid metric"),
    );
    let max = METHODS
        .iter()
        .map(|(id, _)| *id as usize)
        .max()
        .unwrap_or(0);
    let mut calls = vec![None; max + 1];
    for (id, name) in METHODS {
        calls[*id as usize] = Some((
            calls_by_code.with_label_values(&[name, "Ok"]),
            latency.with_label_values(&[name]),
        ));
    }
    ClientMetrics {
        read: PATHS.map(|p| read.with_label_values(&[p])),
        written: PATHS.map(|p| written.with_label_values(&[p])),
        calls,
        calls_by_code,
        errors: IntCounter::new("errors", "failed calls").expect("valid metric"),
    }
});

/// The client metrics of this process, registered on first use.
pub fn client() -> &'static ClientMetrics {
    &CLIENT
}

impl ClientMetrics {
    pub(crate) fn read(&self, path: IoPath, bytes: usize) {
        if !recording() {
            return;
        }
        self.read[path as usize].inc_by(bytes as u64);
    }

    pub(crate) fn written(&self, path: IoPath, bytes: usize) {
        if !recording() {
            return;
        }
        self.written[path as usize].inc_by(bytes as u64);
    }

    /// Count one master call of method number `method` that started at `start`.
    pub(crate) fn call(&self, method: u16, start: Instant, err: Option<&FsError>) {
        let Some(Some((ok, latency))) = self.calls.get(method as usize) else {
            return;
        };
        latency.observe(start.elapsed().as_secs_f64());
        match err {
            None => ok.inc(),
            Some(e) => {
                self.errors.inc();
                let name = METHODS
                    .iter()
                    .find(|(id, _)| *id == method)
                    .map_or("", |(_, n)| n);
                self.calls_by_code
                    .with_label_values(&[name, format!("{:?}", e.code()).as_str()])
                    .inc()
            }
        }
    }

    /// Totals since the process started, for a summary line.
    pub fn totals(&self) -> ClientTotals {
        let ok: u64 = self.calls.iter().flatten().map(|(c, _)| c.get()).sum();
        let errors = self.errors.get();
        let call_seconds = self
            .calls
            .iter()
            .flatten()
            .map(|(_, h)| h.get_sample_sum())
            .sum();
        ClientTotals {
            read_short_circuit: self.read[0].get(),
            read_remote: self.read[1].get(),
            written_short_circuit: self.written[0].get(),
            written_remote: self.written[1].get(),
            calls: ok + errors,
            errors,
            call_seconds,
        }
    }
}

/// What `ClientMetrics::totals` sums up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClientTotals {
    pub read_short_circuit: u64,
    pub read_remote: u64,
    pub written_short_circuit: u64,
    pub written_remote: u64,
    /// Master calls made, and those that failed.
    pub calls: u64,
    pub errors: u64,
    /// The time those calls took, summed.
    pub call_seconds: f64,
}
