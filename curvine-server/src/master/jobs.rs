//! Load jobs: `cv load PATH` asks the master to bring the blocks of a mount's files into
//! the cache. The master plans the job in the background (it lists PATH, loading the
//! under-store's metadata as a listing does, and opens each file), queues one task per
//! block that no live worker holds, and hands tasks to workers in their heartbeat
//! replies, at most `master.load_per_worker` in flight per worker. Any worker with a
//! free slot takes the oldest queued task, so the blocks spread over all live workers.
//! A worker fetches its blocks as a read-through does (`worker::ufs_load`) and reports
//! each result in its next heartbeat, which it sends early when a load ends.
//!
//! A task whose worker is lost, re-registers (restarted) or says nothing for
//! [`SENT_TIMEOUT`] goes back to the queue, so a job survives a worker's loss; a block
//! that fails [`MAX_ATTEMPTS`] times is counted failed and its error kept.
//!
//! Jobs live in the master's memory only: a restarted master forgets them (what they
//! loaded stays cached; `cv load` again loads the rest). The last [`KEPT_ENDED`] ended
//! jobs are kept for `cv load --status`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use curvine_common::proto::{
    CallerInfo, CopyResult, FileStatus, FileType, LoadCommand, LoadJob, LoadState, StorageTier,
    UfsRange,
};
use curvine_common::types::now_ms;
use curvine_common::{FsError, FsResult};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::namespace::{check, is_file, Namespace};

/// A task handed to a worker that has not reported it within this time is requeued.
const SENT_TIMEOUT: Duration = Duration::from_secs(600);
/// Tries per block before it counts as failed.
const MAX_ATTEMPTS: u32 = 3;
/// Ended jobs kept for status queries.
const KEPT_ENDED: usize = 100;
/// Failures kept per job.
const KEPT_ERRORS: usize = 10;

struct Task {
    block: u64,
    inode: u64,
    ufs: UfsRange,
    attempts: u32,
}

struct Sent {
    worker: u32,
    at: Instant,
    task: Task,
}

struct Job {
    info: LoadJob,
    started: Instant,
    ended: Option<Instant>,
    planning: bool,
    cancel: CancellationToken,
    queue: VecDeque<Task>,
    sent: HashMap<u64, Sent>,
    /// Blocks still to load per file, and whether one of them failed.
    left: HashMap<u64, (u32, bool)>,
}

impl Job {
    fn snapshot(&self) -> LoadJob {
        let mut j = self.info.clone();
        j.blocks_in_flight = self.sent.len() as u64;
        j.elapsed_ms = self
            .ended
            .unwrap_or_else(Instant::now)
            .duration_since(self.started)
            .as_millis() as u64;
        j
    }

    fn running(&self) -> bool {
        self.info.state == LoadState::LoadRunning as i32
    }

    fn error(&mut self, e: String) {
        if self.info.errors.len() < KEPT_ERRORS {
            self.info.errors.push(e);
        }
    }

    /// One block of file `inode` ended (loaded, or failed for good).
    fn block_ended(&mut self, inode: u64, len: u64, ok: bool) {
        if ok {
            self.info.blocks_done += 1;
            self.info.bytes_done += len;
        } else {
            self.info.blocks_failed += 1;
        }
        if let Some((n, failed)) = self.left.get_mut(&inode) {
            *n = n.saturating_sub(1);
            *failed |= !ok;
            if *n == 0 {
                if *failed {
                    self.info.files_failed += 1;
                } else {
                    self.info.files_done += 1;
                }
                self.left.remove(&inode);
            }
        }
    }

    /// Ends the job once it is planned and every task ended.
    fn maybe_end(&mut self) {
        if !self.running() || self.planning || !self.queue.is_empty() || !self.sent.is_empty() {
            return;
        }
        let failed = self.info.blocks_failed > 0 || !self.info.errors.is_empty();
        self.info.state = if failed {
            LoadState::LoadFailed
        } else {
            LoadState::LoadDone
        } as i32;
        self.ended = Some(Instant::now());
        info!(job = self.info.id, path = %self.info.path, files = self.info.files_done,
            bytes = self.info.bytes_done, failed_blocks = self.info.blocks_failed,
            secs = self.started.elapsed().as_secs_f64(), "load job ended");
    }

    fn requeue(&mut self, block: u64, why: &str) {
        if let Some(s) = self.sent.remove(&block) {
            debug!(
                job = self.info.id,
                block,
                worker = s.worker,
                why,
                "load task requeued"
            );
            self.queue.push_front(s.task);
        }
    }
}

#[derive(Default)]
struct State {
    next: u64,
    jobs: BTreeMap<u64, Job>,
}

/// The master's load jobs.
pub(super) struct Jobs {
    st: Mutex<State>,
    per_worker: usize,
}

impl Jobs {
    pub fn new(per_worker: u32) -> Jobs {
        Jobs {
            st: Mutex::default(),
            per_worker: per_worker.max(1) as usize,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new job for `path`, being planned.
    fn submit(&self, path: &str) -> (LoadJob, CancellationToken) {
        let mut st = self.lock();
        st.next += 1;
        let id = st.next;
        let cancel = CancellationToken::new();
        let job = Job {
            info: LoadJob {
                id,
                path: path.to_string(),
                state: LoadState::LoadRunning as i32,
                started_ms: now_ms(),
                ..Default::default()
            },
            started: Instant::now(),
            ended: None,
            planning: true,
            cancel: cancel.clone(),
            queue: VecDeque::new(),
            sent: HashMap::new(),
            left: HashMap::new(),
        };
        let snap = job.snapshot();
        st.jobs.insert(id, job);
        let ended: Vec<u64> = st
            .jobs
            .iter()
            .filter(|(_, j)| !j.running())
            .map(|(id, _)| *id)
            .collect();
        for id in ended.iter().take(ended.len().saturating_sub(KEPT_ENDED)) {
            st.jobs.remove(id);
        }
        (snap, cancel)
    }

    /// File `inode` of `len` bytes belongs to the job: `cached` blocks are held already,
    /// `tasks` are to load.
    fn add_file(&self, job: u64, inode: u64, len: u64, cached: (u64, u64), tasks: Vec<Task>) {
        let mut st = self.lock();
        let Some(j) = st.jobs.get_mut(&job).filter(|j| j.running()) else {
            return;
        };
        j.info.files_total += 1;
        j.info.bytes_total += len;
        j.info.blocks_total += cached.0 + tasks.len() as u64;
        j.info.blocks_done += cached.0;
        j.info.bytes_done += cached.1;
        if tasks.is_empty() {
            j.info.files_done += 1;
        } else if j.left.insert(inode, (tasks.len() as u32, false)).is_some() {
            // the same file twice (a hard link): its blocks are queued once
            return;
        }
        j.queue.extend(tasks);
    }

    /// Planning ended (`Err`: the listing failed part way).
    fn planned(&self, job: u64, r: FsResult<()>) {
        let mut st = self.lock();
        if let Some(j) = st.jobs.get_mut(&job) {
            j.planning = false;
            if let Err(e) = r {
                if j.running() {
                    warn!(job, error = %e, "planning a load job failed");
                    j.error(e.to_string());
                }
            }
            j.maybe_end();
        }
    }

    /// Tasks for worker `worker` (its heartbeat), after requeueing tasks of workers
    /// that are not alive or did not answer in time.
    pub fn dispatch(&self, worker: u32, alive: impl Fn(u32) -> bool) -> Vec<LoadCommand> {
        let mut st = self.lock();
        let mut busy = 0;
        for j in st.jobs.values_mut().filter(|j| j.running()) {
            let stale: Vec<u64> = j
                .sent
                .iter()
                .filter(|(_, s)| !alive(s.worker) || s.at.elapsed() > SENT_TIMEOUT)
                .map(|(b, _)| *b)
                .collect();
            for b in stale {
                j.requeue(b, "worker lost or silent");
            }
            busy += j.sent.values().filter(|s| s.worker == worker).count();
        }
        let mut out = Vec::new();
        for j in st.jobs.values_mut().filter(|j| j.running()) {
            while busy < self.per_worker {
                let Some(t) = j.queue.pop_front() else {
                    break;
                };
                out.push(LoadCommand {
                    block_id: t.block,
                    ufs: Some(t.ufs.clone()),
                });
                j.sent.insert(
                    t.block,
                    Sent {
                        worker,
                        at: Instant::now(),
                        task: t,
                    },
                );
                busy += 1;
            }
        }
        out
    }

    /// Results of loads that `worker` ran.
    pub fn finished(&self, worker: u32, results: &[CopyResult]) {
        if results.is_empty() {
            return;
        }
        let mut st = self.lock();
        for r in results {
            for j in st.jobs.values_mut().filter(|j| j.running()) {
                if j.sent.get(&r.block_id).is_none_or(|s| s.worker != worker) {
                    continue;
                }
                let Some(mut s) = j.sent.remove(&r.block_id) else {
                    continue;
                };
                if r.ok {
                    j.block_ended(s.task.inode, s.task.ufs.len, true);
                } else {
                    s.task.attempts += 1;
                    if s.task.attempts < MAX_ATTEMPTS {
                        debug!(job = j.info.id, block = r.block_id, worker, error = %r.error,
                            "load failed, will retry");
                        j.queue.push_back(s.task);
                    } else {
                        warn!(job = j.info.id, block = r.block_id, worker, error = %r.error,
                            "load of a block failed");
                        j.error(r.error.clone());
                        j.block_ended(s.task.inode, s.task.ufs.len, false);
                    }
                }
                j.maybe_end();
            }
        }
    }

    /// `worker` registered again (it restarted): what it was loading is lost.
    pub fn worker_restarted(&self, worker: u32) {
        let mut st = self.lock();
        for j in st.jobs.values_mut().filter(|j| j.running()) {
            let lost: Vec<u64> = j
                .sent
                .iter()
                .filter(|(_, s)| s.worker == worker)
                .map(|(b, _)| *b)
                .collect();
            for b in lost {
                j.requeue(b, "worker restarted");
            }
        }
    }

    /// Job `id`, or NotFound.
    pub fn get(&self, id: u64) -> FsResult<LoadJob> {
        self.lock()
            .jobs
            .get(&id)
            .map(Job::snapshot)
            .ok_or_else(|| FsError::not_found(format!("load job {id}")))
    }

    /// Jobs of `path` (all jobs if empty), oldest first.
    pub fn list(&self, path: &str) -> Vec<LoadJob> {
        self.lock()
            .jobs
            .values()
            .filter(|j| path.is_empty() || j.info.path == path)
            .map(Job::snapshot)
            .collect()
    }

    /// Jobs running now, for `cv report`.
    pub fn running(&self) -> Vec<LoadJob> {
        self.lock()
            .jobs
            .values()
            .filter(|j| j.running())
            .map(Job::snapshot)
            .collect()
    }

    /// Cancel job `id`: nothing more is handed out; loads in flight finish and stay
    /// cached.
    pub fn cancel(&self, id: u64) -> FsResult<LoadJob> {
        let mut st = self.lock();
        let j = st
            .jobs
            .get_mut(&id)
            .ok_or_else(|| FsError::not_found(format!("load job {id}")))?;
        if j.running() {
            j.cancel.cancel();
            j.queue.clear();
            j.sent.clear();
            j.info.state = LoadState::LoadCancelled as i32;
            j.ended = Some(Instant::now());
            info!(job = id, path = %j.info.path, "load job cancelled");
        }
        Ok(j.snapshot())
    }
}

impl Namespace {
    /// Start a load job for `path` (the files in it, or under it with `recursive`);
    /// it is planned in the background.
    pub fn submit_load(self: &Arc<Self>, path: &str, recursive: bool, c: CallerInfo) -> LoadJob {
        let (job, cancel) = self.jobs.submit(path);
        info!(job = job.id, path, recursive, "load job submitted");
        let ns = self.clone();
        let (id, path) = (job.id, path.to_string());
        tokio::spawn(async move {
            let r = tokio::select! {
                r = ns.plan_load(id, &path, recursive, &c) => r,
                _ = cancel.cancelled() => Ok(()),
            };
            ns.jobs.planned(id, r);
        });
        job
    }

    async fn plan_load(
        self: &Arc<Self>,
        job: u64,
        path: &str,
        recursive: bool,
        c: &CallerInfo,
    ) -> FsResult<()> {
        self.ufs_prepare(path, false, false).await?;
        let st = self.get_status(path, true, c)?;
        if st.file_type != FileType::Dir as i32 {
            return self.plan_file(job, st, c).await;
        }
        let mut dirs = vec![st.path];
        while let Some(dir) = dirs.pop() {
            self.ufs_prepare(&dir, true, false).await?;
            let mut after = String::new();
            loop {
                let (page, more) = self.list(&dir, &after, 0, c)?;
                for e in &page {
                    if e.file_type == FileType::Dir as i32 {
                        if recursive {
                            dirs.push(e.path.clone());
                        }
                    } else if e.file_type == FileType::File as i32 {
                        self.plan_file(job, e.clone(), c).await?;
                    }
                }
                match page.last() {
                    Some(e) if more => after = e.name.clone(),
                    _ => break,
                }
            }
        }
        Ok(())
    }

    /// Queue the blocks of file `st` that no live worker holds.
    async fn plan_file(self: &Arc<Self>, job: u64, st: FileStatus, c: &CallerInfo) -> FsResult<()> {
        let ns = self.clone();
        let c = c.clone();
        let (inode, len, cached, tasks) =
            tokio::task::spawn_blocking(move || ns.load_tasks(&st.path, &c))
                .await
                .map_err(|e| FsError::internal(format!("plan load: {e}")))??;
        self.jobs.add_file(job, inode, len, cached, tasks);
        Ok(())
    }

    /// File `path`'s id, length, cached (blocks, bytes) and the tasks loading the rest.
    #[allow(clippy::type_complexity)]
    fn load_tasks(
        &self,
        path: &str,
        c: &CallerInfo,
    ) -> FsResult<(u64, u64, (u64, u64), Vec<Task>)> {
        let w = self.walk(&*self.store, path, c, true)?;
        let ino = w.existing()?;
        if !is_file(ino) {
            return Ok((ino.id, 0, (0, 0), Vec::new()));
        }
        check(c, ino, 4, || w.path.clone())?;
        let mut cached = (0, 0);
        let mut tasks = Vec::new();
        for b in self.located_blocks(ino.id)? {
            match &ino.ufs {
                Some(u) if b.locations.is_empty() => tasks.push(Task {
                    block: b.block_id,
                    inode: ino.id,
                    ufs: UfsRange {
                        mount_id: u.mount_id,
                        key: u.key.clone(),
                        offset: b.offset,
                        len: b.len,
                        etag: u.etag.clone(),
                        tier: if ino.storage_tier == 0 {
                            StorageTier::Unspecified as i32
                        } else {
                            ino.storage_tier
                        },
                    },
                    attempts: 0,
                }),
                // held by a live worker, or a native block (nothing to load)
                _ => {
                    cached.0 += 1;
                    cached.1 += b.len;
                }
            }
        }
        Ok((ino.id, ino.len, cached, tasks))
    }
}
