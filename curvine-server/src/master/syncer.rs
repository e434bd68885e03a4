//! Group commit: mutations are written with the WAL on but unsynced; an acknowledgement
//! waits until a dedicated thread has synced the WAL past its write. One fsync covers
//! every write made before it, so concurrent mutations share it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use curvine_common::tasks::{Task, Tasks};
use curvine_common::{FsError, FsResult};
use tokio::sync::watch;
use tracing::error;

use super::store::Store;

struct Shared {
    /// Sequence of the last write applied to the store.
    written: AtomicU64,
    /// Highest sequence some waiter needs synced, and the stop flag.
    want: Mutex<(u64, bool)>,
    cv: Condvar,
    synced: watch::Sender<u64>,
    failed: AtomicBool,
}

pub struct Syncer {
    shared: Arc<Shared>,
    enabled: bool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Syncer {
    /// Start the sync thread (with `enabled`), listed among `tasks` as `journal_sync`.
    pub fn start(store: Arc<Store>, enabled: bool, tasks: &Tasks) -> FsResult<Syncer> {
        let (tx, _) = watch::channel(0u64);
        let shared = Arc::new(Shared {
            written: AtomicU64::new(0),
            want: Mutex::new((0, false)),
            cv: Condvar::new(),
            synced: tx,
            failed: AtomicBool::new(false),
        });
        let thread = if enabled {
            let sh = shared.clone();
            let task = tasks.register("journal_sync");
            Some(
                std::thread::Builder::new()
                    .name("master-wal-sync".into())
                    .spawn(move || sync_loop(sh, store, task))
                    .map_err(|e| FsError::internal(format!("spawn WAL sync thread: {e}")))?,
            )
        } else {
            None
        };
        Ok(Syncer {
            shared,
            enabled,
            thread: Mutex::new(thread),
        })
    }

    /// Whether writes are synced at all (`journal.sync`).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Record that a write happened; returns its sequence. Call under the mutation lock.
    pub fn wrote(&self) -> u64 {
        self.shared.written.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Sequence of the last write so far.
    pub fn last_written(&self) -> u64 {
        self.shared.written.load(Ordering::SeqCst)
    }

    /// Have the sync thread make the write with sequence `seq` durable, without waiting
    /// for it (a mutation acknowledged before its sync: `CallerInfo.defer_sync`).
    pub fn request(&self, seq: u64) {
        if !self.enabled || seq == 0 || *self.shared.synced.borrow() >= seq {
            return;
        }
        let mut w = self.shared.want.lock().unwrap_or_else(|p| p.into_inner());
        if w.0 < seq {
            w.0 = seq;
            self.shared.cv.notify_one();
        }
    }

    /// Wait until the write with sequence `seq` is durable (no-op with sync off).
    pub async fn wait(&self, seq: u64) -> FsResult<()> {
        if !self.enabled || seq == 0 {
            return Ok(());
        }
        let mut rx = self.shared.synced.subscribe();
        if *rx.borrow() >= seq {
            return Ok(());
        }
        self.request(seq);
        let failed = &self.shared.failed;
        rx.wait_for(|s| *s >= seq || failed.load(Ordering::SeqCst))
            .await
            .map_err(|_| FsError::Unavailable {
                message: "master is shutting down".into(),
            })?;
        if *rx.borrow() >= seq {
            Ok(())
        } else {
            Err(FsError::io(
                "metadata WAL sync failed; mutation may not be durable",
            ))
        }
    }

    /// Stop the sync thread (after a final sync).
    pub fn stop(&self) {
        {
            let mut w = self.shared.want.lock().unwrap_or_else(|p| p.into_inner());
            w.1 = true;
            self.shared.cv.notify_all();
        }
        let handle = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn sync_loop(sh: Arc<Shared>, store: Arc<Store>, task: Task) {
    loop {
        let stop = {
            let mut w = sh.want.lock().unwrap_or_else(|p| p.into_inner());
            while w.0 <= *sh.synced.borrow() && !w.1 {
                w = sh.cv.wait(w).unwrap_or_else(|p| p.into_inner());
            }
            w.1
        };
        let target = sh.written.load(Ordering::SeqCst);
        let started = curvine_common::web::recording().then(std::time::Instant::now);
        task.busy("fsync the metadata WAL");
        match store.sync_wal() {
            Ok(()) => {
                if let Some(t) = started {
                    crate::metrics::master()
                        .journal_sync
                        .observe(t.elapsed().as_secs_f64());
                }
                sh.synced.send_replace(target);
                task.idle();
            }
            Err(e) => {
                error!(error = %e, "metadata WAL sync failed");
                task.failed(&e);
                sh.failed.store(true, Ordering::SeqCst);
                sh.synced.send_modify(|_| {});
            }
        }
        if stop {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn store(dir: &std::path::Path) -> Arc<Store> {
        Arc::new(Store::open(dir, 1 << 20, 1 << 20, 16, 64 << 10).unwrap())
    }

    #[tokio::test]
    async fn a_requested_sync_happens_with_nobody_waiting() {
        let d = tempfile::tempdir().unwrap();
        let s = Syncer::start(store(d.path()), true, &Tasks::new(&Default::default())).unwrap();
        let seq = s.wrote();
        assert_eq!(s.last_written(), seq);
        s.request(seq);
        let mut rx = s.shared.synced.subscribe();
        tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|v| *v >= seq))
            .await
            .expect("the sync thread synced the requested write")
            .unwrap();
        // a waiter for it now returns at once
        s.wait(seq).await.unwrap();
        s.stop();
    }

    #[tokio::test]
    async fn without_sync_nothing_waits() {
        let d = tempfile::tempdir().unwrap();
        let s = Syncer::start(store(d.path()), false, &Tasks::new(&Default::default())).unwrap();
        let seq = s.wrote();
        s.request(seq);
        s.wait(seq).await.unwrap();
    }
}
