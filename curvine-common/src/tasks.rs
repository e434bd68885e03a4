//! Background work in one shape. Every loop of a server (heartbeat, lease expiry,
//! lost-worker detection, replication, scrubbing, eviction, the change-log follower...)
//! is a named [`Task`] started by [`Tasks::spawn`] on one tracker. A task says what it
//! is doing ([`Task::busy`], [`Task::idle`], [`Task::failed`]); [`Tasks::report`] lists
//! them for `cv report` and the web console; [`Tasks::shutdown`] cancels them all and
//! waits for them up to a deadline, naming the ones that did not stop.

use std::fmt::Display;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use tokio_util::task::TaskTracker;
use tracing::{warn, Instrument};

use crate::proto::{TaskReport, TaskState};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[derive(Debug)]
struct Status {
    state: TaskState,
    detail: String,
    since_ms: i64,
    runs: u64,
    errors: u64,
    last_error: String,
}

#[derive(Debug)]
struct Inner {
    name: String,
    status: Mutex<Status>,
    cancel: CancellationToken,
}

/// One background task's handle: its name, its state, and its stop signal.
#[derive(Debug, Clone)]
pub struct Task(Arc<Inner>);

impl Task {
    fn new(name: &str, cancel: CancellationToken) -> Task {
        Task(Arc::new(Inner {
            name: name.to_string(),
            status: Mutex::new(Status {
                state: TaskState::Idle,
                detail: String::new(),
                since_ms: now_ms(),
                runs: 0,
                errors: 0,
                last_error: String::new(),
            }),
            cancel,
        }))
    }

    pub fn name(&self) -> &str {
        &self.0.name
    }

    fn set(&self, f: impl FnOnce(&mut Status)) {
        let mut s = self.0.status.lock().unwrap_or_else(|p| p.into_inner());
        let before = s.state;
        f(&mut s);
        if s.state != before {
            s.since_ms = now_ms();
        }
    }

    /// Working on `what` (shown as the task's detail).
    pub fn busy(&self, what: impl Into<String>) {
        let what = what.into();
        self.set(|s| {
            s.state = TaskState::Busy;
            s.detail = what;
        });
    }

    /// Done with one round of work; waiting for the next.
    pub fn idle(&self) {
        self.set(|s| {
            if s.state != TaskState::Idle {
                s.runs += 1;
            }
            s.state = TaskState::Idle;
            s.detail.clear();
        });
    }

    /// The last round failed with `err` (the task goes on; the next success clears the
    /// state, the count and the message stay).
    pub fn failed(&self, err: &dyn Display) {
        let msg = err.to_string();
        self.set(|s| {
            s.runs += 1;
            s.errors += 1;
            s.state = TaskState::Error;
            s.detail.clear();
            s.last_error = msg;
        });
    }

    fn stopped(&self) {
        self.set(|s| {
            s.state = TaskState::Stopped;
            s.detail.clear();
        });
    }

    /// Whether the task was asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancel.is_cancelled()
    }

    /// Resolves when the task is asked to stop.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.0.cancel.cancelled()
    }

    /// The stop signal, for work the task hands on (connections, sub-tasks).
    pub fn token(&self) -> CancellationToken {
        self.0.cancel.clone()
    }

    /// Sleep for `d`; false when the task was asked to stop meanwhile.
    pub async fn sleep(&self, d: Duration) -> bool {
        tokio::select! {
            _ = self.cancelled() => false,
            _ = tokio::time::sleep(d) => true,
        }
    }

    pub fn report(&self) -> TaskReport {
        let s = self.0.status.lock().unwrap_or_else(|p| p.into_inner());
        TaskReport {
            name: self.0.name.clone(),
            state: s.state as i32,
            detail: s.detail.clone(),
            since_ms: s.since_ms,
            runs: s.runs,
            errors: s.errors,
            last_error: s.last_error.clone(),
        }
    }
}

/// Every background task of one process (or of one server within it).
#[derive(Debug, Clone)]
pub struct Tasks {
    tracker: TaskTracker,
    cancel: CancellationToken,
    all: Arc<Mutex<Vec<Task>>>,
}

impl Tasks {
    /// Tasks stopped by `shutdown`, or when `parent` is cancelled.
    pub fn new(parent: &CancellationToken) -> Tasks {
        Tasks {
            tracker: TaskTracker::new(),
            cancel: parent.child_token(),
            all: Arc::default(),
        }
    }

    /// A task that is not a future on the tracker (a dedicated thread): listed and
    /// cancelled with the others, stopped by its owner.
    pub fn register(&self, name: &str) -> Task {
        let t = Task::new(name, self.cancel.child_token());
        self.all
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(t.clone());
        t
    }

    /// Start `f(task)` as the task `name`, in a tracing span of that name.
    pub fn spawn<F, Fut>(&self, name: &str, f: F) -> Task
    where
        F: FnOnce(Task) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let t = self.register(name);
        let fut = f(t.clone());
        let done = t.clone();
        let span = tracing::info_span!("task", name = %name);
        self.tracker.spawn(
            async move {
                fut.await;
                done.stopped();
            }
            .instrument(span),
        );
        t
    }

    /// Start `step` every `period` until stopped, as the task `name`: busy with `what`
    /// while it runs, then idle, or in error with the message it returned.
    pub fn every<S, Fut, E>(&self, name: &str, period: Duration, what: &str, mut step: S) -> Task
    where
        S: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), E>> + Send,
        E: Display,
    {
        let what = what.to_string();
        self.spawn(name, move |task| async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = task.cancelled() => return,
                    _ = tick.tick() => {}
                }
                task.busy(what.as_str());
                match step().await {
                    Ok(()) => task.idle(),
                    Err(e) => {
                        warn!(task = task.name(), error = %e, "background task failed");
                        task.failed(&e);
                    }
                }
            }
        })
    }

    /// The stop signal every task of this set shares.
    pub fn token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Every task started so far, by name.
    pub fn report(&self) -> Vec<TaskReport> {
        let all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        let mut r: Vec<TaskReport> = all.iter().map(Task::report).collect();
        r.sort_by(|a, b| a.name.cmp(&b.name));
        r
    }

    /// Cancel every task and wait for the tracked ones up to `deadline`. Returns false,
    /// after a warning naming them, when some did not stop in time.
    pub async fn shutdown(&self, deadline: Duration) -> bool {
        self.cancel.cancel();
        self.tracker.close();
        if tokio::time::timeout(deadline, self.tracker.wait())
            .await
            .is_ok()
        {
            return true;
        }
        let left: Vec<String> = self
            .report()
            .into_iter()
            .filter(|t| t.state != TaskState::Stopped as i32)
            .map(|t| t.name)
            .collect();
        warn!(tasks = ?left, ?deadline, "background tasks did not stop in time");
        false
    }
}

/// `idle`, `busy`, `error` or `stopped`.
pub fn state_name(state: i32) -> &'static str {
    match TaskState::try_from(state) {
        Ok(TaskState::Idle) => "idle",
        Ok(TaskState::Busy) => "busy",
        Ok(TaskState::Error) => "error",
        Ok(TaskState::Stopped) => "stopped",
        Err(_) => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_report_their_state_and_stop_at_shutdown() {
        let root = CancellationToken::new();
        let tasks = Tasks::new(&root);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        let mut n = 0;
        let t = tasks.every("ticker", Duration::from_millis(1), "counting", move || {
            n += 1;
            let (fail, tx) = (n == 2, tx.clone());
            async move {
                let _ = tx.send(()).await;
                if fail {
                    Err("second round failed")
                } else {
                    Ok(())
                }
            }
        });
        for _ in 0..3 {
            rx.recv().await.unwrap();
        }
        // the failure stays counted after later successes
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while t.report().runs < 3 {
            assert!(tokio::time::Instant::now() < deadline, "{:?}", t.report());
            tokio::task::yield_now().await;
        }
        let r = t.report();
        assert_eq!((r.name.as_str(), r.errors), ("ticker", 1));
        assert_eq!(r.last_error, "second round failed");
        let stuck = tasks.spawn("stuck", |_t| std::future::pending::<()>());
        let listed: Vec<String> = tasks.report().into_iter().map(|r| r.name).collect();
        assert_eq!(listed, ["stuck", "ticker"]);
        // "stuck" ignores its stop signal: shutdown gives up at the deadline
        drop(rx);
        assert!(!tasks.shutdown(Duration::from_millis(50)).await);
        assert_eq!(t.report().state, TaskState::Stopped as i32);
        assert_ne!(stuck.report().state, TaskState::Stopped as i32);
    }

    #[tokio::test]
    async fn a_cancelled_parent_stops_the_tasks() {
        let root = CancellationToken::new();
        let tasks = Tasks::new(&root);
        let t = tasks.spawn("waiter", |t| async move { t.cancelled().await });
        let reg = tasks.register("thread");
        root.cancel();
        assert!(reg.is_cancelled());
        assert!(tasks.shutdown(Duration::from_secs(10)).await);
        assert_eq!(state_name(t.report().state), "stopped");
    }
}
