//! A master's tenure: from the moment it is the master the workers report to (a
//! single master's start; the first moment a replicated master is seen leading in a
//! term) until it stops being that. At its start it knows where blocks are only from
//! its records; which replicas are live it learns as each worker registers and reports
//! its blocks, a heartbeat or two later. Until every worker the registry names has
//! reported, or `master.worker_report_grace` has passed (whichever comes first), a
//! block with no live replica is *not yet known* rather than lost:
//!
//! - an `open` of its file is answered `ReplicasUnknown`, which the client tries again
//!   within `client.rpc_timeout`;
//! - re-replication and uploads wait (the block map is not complete yet);
//! - `/readyz` answers 503, and the report (`cv report`, the console) says how many
//!   workers have reported.
//!
//! After that such a block is listed without a location: its read fails, no live
//! replica. A follower has no window: it answers no `open` (the leader alone hears
//! the workers; `NotLeader` sends the client there).

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use curvine_common::proto::{LocatedBlock, WorkerReports};
use curvine_common::{FsError, FsResult, WorkerId};
use tracing::{info, warn};

use super::namespace::Namespace;
use super::store;

/// The window of one tenure.
#[derive(Debug)]
struct Window {
    /// 0 on a single master; the term on a replicated one.
    key: u64,
    since: Instant,
    /// The workers the registry named when the tenure began.
    expected: BTreeSet<WorkerId>,
    /// Those of them that have reported their blocks since.
    reported: BTreeSet<WorkerId>,
    /// Every expected worker reported or the grace passed: for the rest of the tenure.
    closed: bool,
}

/// Where a tenure's wait for its workers stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Phase {
    /// Still waiting: (reported, expected) workers, time since the tenure began, and
    /// the most the wait goes on.
    Waiting {
        reported: usize,
        expected: usize,
        elapsed: Duration,
        left: Duration,
    },
    /// The wait ended at this call; `silent` are the workers that had not reported.
    Ended {
        expected: usize,
        elapsed: Duration,
        silent: Vec<WorkerId>,
    },
    /// Nothing to wait for: no tenure, or its wait ended before.
    Done,
}

/// The current tenure's wait for its workers' reports.
#[derive(Debug, Default)]
pub(super) struct Reporting(Mutex<Option<Window>>);

impl Reporting {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Window>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether tenure `key` is the current one.
    fn is_current(&self, key: Option<u64>) -> bool {
        self.lock().as_ref().map(|w| w.key) == key
    }

    /// Note that this master is in tenure `key` (`None`: it hears no worker). A new
    /// tenure begins a wait, at `now`, for the workers of `expected`.
    pub fn begin(&self, key: Option<u64>, expected: BTreeSet<WorkerId>, now: Instant) {
        let mut w = self.lock();
        if w.as_ref().map(|w| w.key) == key {
            return;
        }
        *w = key.map(|key| Window {
            key,
            since: now,
            expected,
            reported: BTreeSet::new(),
            closed: false,
        });
    }

    /// Worker `id` reported its blocks in tenure `key`.
    pub fn reported(&self, key: u64, id: WorkerId) {
        if let Some(w) = self.lock().as_mut().filter(|w| w.key == key) {
            w.reported.insert(id);
        }
    }

    /// The wait as of `now`, with `grace` the longest it lasts. The first call that
    /// finds it over closes it and answers `Ended`.
    pub fn phase(&self, grace: Duration, now: Instant) -> Phase {
        let mut g = self.lock();
        let Some(w) = g.as_mut().filter(|w| !w.closed) else {
            return Phase::Done;
        };
        let elapsed = now.saturating_duration_since(w.since);
        let reported = w.expected.intersection(&w.reported).count();
        if reported < w.expected.len() && elapsed < grace {
            return Phase::Waiting {
                reported,
                expected: w.expected.len(),
                elapsed,
                left: grace - elapsed,
            };
        }
        w.closed = true;
        Phase::Ended {
            expected: w.expected.len(),
            elapsed,
            silent: w.expected.difference(&w.reported).copied().collect(),
        }
    }
}

impl Namespace {
    /// The tenure this master is in: 0 on a single master, the term a replicated one
    /// leads in, `None` on a follower.
    fn tenure(&self) -> Option<u64> {
        match self.replica.get() {
            None => Some(0),
            Some(r) => r.is_leader().then(|| r.term()),
        }
    }

    /// Note the tenure; a new one begins a wait for the workers the registry names.
    /// Called at start, at every tick of the lost-worker task (so a new leader's
    /// begins within a tick of its election) and before anything asks about the wait.
    pub(super) fn note_tenure(&self) -> Option<u64> {
        let key = self.tenure();
        if !self.reporting.is_current(key) {
            let expected = key.map(|_| self.known_workers()).unwrap_or_default();
            self.reporting.begin(key, expected, Instant::now());
        }
        key
    }

    /// The workers the registry names (workers registered with this master or,
    /// replicated, with any leader before).
    fn known_workers(&self) -> BTreeSet<WorkerId> {
        match self.store.meta_scan(store::META_WORKER_PREFIX) {
            Ok(rows) => rows
                .iter()
                .filter_map(|(k, _)| <[u8; 4]>::try_from(&k[..]).ok())
                .map(|k| WorkerId(u32::from_be_bytes(k)))
                .collect(),
            Err(e) => {
                warn!(error = %e, "cannot read the worker registry; waiting for the workers in memory");
                self.workers.read().keys().copied().collect()
            }
        }
    }

    /// Worker `id` has registered and reported all its blocks to this master.
    pub(super) fn note_reported(&self, id: WorkerId) {
        if let Some(key) = self.note_tenure() {
            self.reporting.reported(key, id);
        }
        // the last report ends the wait at once
        self.waiting_for_workers();
    }

    /// The most this master waits for its workers' reports (resolved when the
    /// namespace was loaded).
    pub(super) fn report_grace(&self) -> Duration {
        self.conf
            .worker_report_grace
            .map_or(Duration::ZERO, |g| g.get())
    }

    /// While this master, just started or just become leader, still waits for its
    /// workers' reports: how many have reported and how long it may wait more. The
    /// call that finds the wait over logs it and wakes the work that waited.
    pub(super) fn waiting_for_workers(&self) -> Option<WorkerReports> {
        self.note_tenure()?;
        match self.reporting.phase(self.report_grace(), Instant::now()) {
            Phase::Waiting {
                reported,
                expected,
                elapsed,
                left,
            } => Some(WorkerReports {
                reported: reported as u32,
                expected: expected as u32,
                elapsed_ms: elapsed.as_millis() as u64,
                left_ms: left.as_millis().max(1) as u64,
            }),
            Phase::Ended {
                expected,
                elapsed,
                silent,
            } => {
                let secs = elapsed.as_secs_f64();
                if silent.is_empty() {
                    if expected > 0 {
                        info!(workers = expected, secs, "every worker has reported");
                    }
                } else {
                    let silent: Vec<u32> = silent.iter().map(|w| w.0).collect();
                    warn!(
                        workers = expected,
                        ?silent,
                        secs,
                        "worker report grace passed; blocks only these workers held count as lost"
                    );
                }
                // the re-replication scan waited for the whole block map
                self.repl.wake();
                None
            }
            Phase::Done => None,
        }
    }

    /// `ReplicasUnknown` when a block of `blocks` has no live location while this
    /// master still waits for its workers' reports: a worker that has not reported
    /// yet may hold it.
    pub(super) fn check_locations_known(
        &self,
        path: &str,
        blocks: &[LocatedBlock],
    ) -> FsResult<()> {
        let Some(missing) = blocks.iter().find(|b| b.locations.is_empty()) else {
            return Ok(());
        };
        let Some(w) = self.waiting_for_workers() else {
            return Ok(());
        };
        let since = match self.replica.get() {
            None => "started",
            Some(_) => "became leader",
        };
        Err(FsError::ReplicasUnknown {
            path: path.to_string(),
            block_id: missing.block_id,
            message: format!(
                "{} of {} workers have reported since this master {since} {} ms ago; it \
                 waits for the others at most {} ms more",
                w.reported, w.expected, w.elapsed_ms, w.left_ms
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[u32]) -> BTreeSet<WorkerId> {
        v.iter().map(|&i| WorkerId(i)).collect()
    }

    const GRACE: Duration = Duration::from_secs(6);

    #[test]
    fn the_wait_ends_when_every_worker_known_has_reported() {
        let r = Reporting::default();
        let t0 = Instant::now();
        r.begin(Some(0), ids(&[1, 2]), t0);
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(
            r.phase(GRACE, at(100)),
            Phase::Waiting {
                reported: 0,
                expected: 2,
                elapsed: Duration::from_millis(100),
                left: Duration::from_millis(5900),
            }
        );
        r.reported(0, WorkerId(2));
        // a worker the registry did not name (new) counts for nothing
        r.reported(0, WorkerId(9));
        assert!(matches!(
            r.phase(GRACE, at(200)),
            Phase::Waiting { reported: 1, .. }
        ));
        r.reported(0, WorkerId(1));
        assert_eq!(
            r.phase(GRACE, at(300)),
            Phase::Ended {
                expected: 2,
                elapsed: Duration::from_millis(300),
                silent: vec![],
            }
        );
        // over for the rest of the tenure, whatever comes
        assert_eq!(r.phase(GRACE, at(400)), Phase::Done);
        r.begin(Some(0), ids(&[1, 2, 3]), at(500));
        assert_eq!(r.phase(GRACE, at(600)), Phase::Done);
    }

    #[test]
    fn the_wait_ends_at_the_grace_naming_the_silent_workers() {
        let r = Reporting::default();
        let t0 = Instant::now();
        r.begin(Some(0), ids(&[1, 2, 3]), t0);
        r.reported(0, WorkerId(2));
        assert!(matches!(
            r.phase(GRACE, t0 + GRACE - Duration::from_millis(1)),
            Phase::Waiting {
                reported: 1,
                expected: 3,
                ..
            }
        ));
        assert_eq!(
            r.phase(GRACE, t0 + GRACE),
            Phase::Ended {
                expected: 3,
                elapsed: GRACE,
                silent: vec![WorkerId(1), WorkerId(3)],
            }
        );
        assert_eq!(r.phase(GRACE, t0 + GRACE * 2), Phase::Done);
    }

    #[test]
    fn no_worker_known_or_no_grace_is_no_wait() {
        let r = Reporting::default();
        let t0 = Instant::now();
        r.begin(Some(0), BTreeSet::new(), t0);
        assert!(matches!(
            r.phase(GRACE, t0),
            Phase::Ended { expected: 0, .. }
        ));
        let r = Reporting::default();
        r.begin(Some(0), ids(&[1]), t0);
        assert!(matches!(r.phase(Duration::ZERO, t0), Phase::Ended { .. }));
    }

    #[test]
    fn each_term_led_waits_anew_and_a_follower_not_at_all() {
        let r = Reporting::default();
        let t0 = Instant::now();
        r.begin(Some(3), ids(&[1]), t0);
        r.reported(3, WorkerId(1));
        assert!(matches!(r.phase(GRACE, t0), Phase::Ended { .. }));
        // the same term again: the same tenure, still over
        r.begin(Some(3), ids(&[1]), t0 + Duration::from_secs(1));
        assert_eq!(r.phase(GRACE, t0 + Duration::from_secs(1)), Phase::Done);
        // a follower: nothing to wait for
        r.begin(None, ids(&[1]), t0 + Duration::from_secs(2));
        assert_eq!(r.phase(GRACE, t0 + Duration::from_secs(2)), Phase::Done);
        // leading again in a later term: the workers must report again
        let t5 = t0 + Duration::from_secs(3);
        r.begin(Some(5), ids(&[1]), t5);
        // a report of the old term does not count in the new one
        r.reported(3, WorkerId(1));
        assert!(matches!(
            r.phase(GRACE, t5),
            Phase::Waiting {
                reported: 0,
                expected: 1,
                ..
            }
        ));
        r.reported(5, WorkerId(1));
        assert!(matches!(r.phase(GRACE, t5), Phase::Ended { .. }));
    }
}
