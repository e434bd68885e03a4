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
//! Each job is recorded in `meta` ([`META_JOB_PREFIX`], a [`JobRec`]: a journal entry,
//! so replicated masters all hold it) when it is submitted and again when it ends. A
//! master that starts leading (a new leader, or a master restarted) carries on every
//! job recorded as running: it plans it again under the same id, which queues only
//! the blocks no live worker holds yet (what was loaded counts as done at once), and
//! answers for the ended ones. The last [`KEPT_ENDED`] ended jobs are kept for
//! `cv load --status`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use curvine_common::proto::{
    CallerInfo, CopyResult, FileStatus, FileType, LoadCommand, LoadJob, LoadState, StorageTier,
    UfsRange,
};
use curvine_common::types::now_ms;
use curvine_common::{FsError, FsResult};
use prost::Message;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::namespace::{check, is_file, Namespace};
use super::records::JobRec;

/// Load jobs are recorded in `meta` under this prefix and the id (big-endian).
pub const META_JOB_PREFIX: &[u8] = b"job/";

fn job_key(id: u64) -> Vec<u8> {
    let mut k = META_JOB_PREFIX.to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

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
    recursive: bool,
    caller: CallerInfo,
    /// The term this master led in when it took the job on (0 on a single master).
    term: u64,
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

    /// The job as recorded.
    fn record(&self) -> JobRec {
        JobRec {
            job: Some(self.snapshot()),
            recursive: self.recursive,
            caller: Some(self.caller.clone()),
        }
    }

    /// Ends the job once it is planned and every task ended; whether it ended now.
    fn maybe_end(&mut self) -> bool {
        if !self.running() || self.planning || !self.queue.is_empty() || !self.sent.is_empty() {
            return false;
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
        true
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
    jobs: BTreeMap<u64, Job>,
    /// Jobs that ended and are still recorded as running.
    unsaved: Vec<u64>,
    /// The term in which this master took on the recorded jobs (`Jobs::restore`).
    resumed: Option<u64>,
}

/// A job to plan: its id, path, whether recursive, and who submitted it.
pub(super) type ToPlan = (u64, String, bool, CallerInfo, CancellationToken);

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

    /// Take on job `rec` in `term`: a job recorded as running starts over (its plan is
    /// returned), an ended one is answered for. A job this master held from an earlier
    /// term is replaced and its planning stopped.
    fn take_on(&self, rec: JobRec, term: u64) -> Option<ToPlan> {
        let old = rec.job.unwrap_or_default();
        let running = old.state == LoadState::LoadRunning as i32;
        let now = Instant::now();
        let (info, age, ended) = if running {
            let info = LoadJob {
                id: old.id,
                path: old.path,
                state: old.state,
                started_ms: old.started_ms,
                ..Default::default()
            };
            let age = now_ms().saturating_sub(old.started_ms).max(0) as u64;
            (info, age, None)
        } else {
            let age = old.elapsed_ms;
            (old, age, Some(now))
        };
        let job = Job {
            recursive: rec.recursive,
            caller: rec.caller.unwrap_or_default(),
            term,
            started: now.checked_sub(Duration::from_millis(age)).unwrap_or(now),
            ended,
            planning: running,
            cancel: CancellationToken::new(),
            queue: VecDeque::new(),
            sent: HashMap::new(),
            left: HashMap::new(),
            info,
        };
        let plan = running.then(|| {
            let i = &job.info;
            let c = job.cancel.clone();
            (i.id, i.path.clone(), job.recursive, job.caller.clone(), c)
        });
        let mut st = self.lock();
        if let Some(old) = st.jobs.insert(job.info.id, job) {
            old.cancel.cancel();
        }
        st.trim();
        plan
    }

    /// Take on the recorded jobs (`recs`) as the master leading in `term`: the running
    /// ones are planned again (returned), the ended ones answered for. A job this
    /// master already took on in `term` is left as it is.
    pub(super) fn restore(&self, term: u64, recs: Vec<JobRec>) -> Vec<ToPlan> {
        let mut plans = Vec::new();
        for rec in recs {
            let Some(id) = rec.job.as_ref().map(|j| j.id) else {
                continue;
            };
            if self.lock().jobs.get(&id).is_some_and(|j| j.term == term) {
                continue;
            }
            plans.extend(self.take_on(rec, term));
        }
        self.lock().resumed = Some(term);
        plans
    }

    /// The term in which this master took on the recorded jobs (`None`: it has not
    /// since it last led).
    pub(super) fn resumed_in(&self) -> Option<u64> {
        self.lock().resumed
    }

    /// This master does not lead: the recorded jobs are taken on anew when it leads
    /// again, and ends it could not record are left to that.
    pub(super) fn stepped_down(&self) {
        let mut st = self.lock();
        st.resumed = None;
        st.unsaved.clear();
    }

    /// Records of the jobs that ended since the last call (`unsave` them if they could
    /// not be written).
    pub(super) fn take_unsaved(&self) -> Vec<JobRec> {
        let mut st = self.lock();
        let ids = std::mem::take(&mut st.unsaved);
        ids.iter()
            .filter_map(|id| st.jobs.get(id).map(Job::record))
            .collect()
    }

    /// Ended jobs whose records could not be written: try again later.
    pub(super) fn unsave(&self, recs: &[JobRec]) {
        let mut st = self.lock();
        st.unsaved
            .extend(recs.iter().filter_map(|r| r.job.as_ref().map(|j| j.id)));
    }
}

impl State {
    /// Forget the oldest ended jobs past `KEPT_ENDED`.
    fn trim(&mut self) {
        let ended: Vec<u64> = self
            .jobs
            .iter()
            .filter(|(_, j)| !j.running())
            .map(|(id, _)| *id)
            .collect();
        for id in ended.iter().take(ended.len().saturating_sub(KEPT_ENDED)) {
            self.jobs.remove(id);
        }
    }
}

impl Jobs {
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
        let Some(j) = st.jobs.get_mut(&job) else {
            return;
        };
        j.planning = false;
        if let Err(e) = r {
            if j.running() {
                warn!(job, error = %e, "planning a load job failed");
                j.error(e.to_string());
            }
        }
        if j.maybe_end() {
            st.unsaved.push(job);
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
        let mut ended = Vec::new();
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
                if j.maybe_end() {
                    ended.push(j.info.id);
                }
            }
        }
        st.unsaved.extend(ended);
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
            let snap = j.snapshot();
            st.unsaved.push(id);
            return Ok(snap);
        }
        Ok(j.snapshot())
    }
}

impl Namespace {
    /// Start a load job for `path` (the files in it, or under it with `recursive`):
    /// recorded, then planned in the background.
    pub async fn submit_load(
        self: &Arc<Self>,
        path: &str,
        recursive: bool,
        c: CallerInfo,
    ) -> FsResult<LoadJob> {
        self.resume_jobs().await?;
        let ns = self.clone();
        let (p, cc) = (path.to_string(), c.clone());
        let started_ms = now_ms();
        let (rec, seq) = tokio::task::spawn_blocking(move || {
            ns.mutate(cc.client_id, |txn| {
                let id = txn.counters.next_job.max(1);
                txn.counters.next_job = id + 1;
                let rec = JobRec {
                    job: Some(LoadJob {
                        id,
                        path: p,
                        state: LoadState::LoadRunning as i32,
                        started_ms,
                        ..Default::default()
                    }),
                    recursive,
                    caller: Some(cc.clone()),
                };
                txn.put_meta(job_key(id), rec.encode_to_vec());
                Ok(rec)
            })
        })
        .await
        .map_err(|e| FsError::internal(format!("submit load: {e}")))??;
        self.syncer.wait(seq).await?;
        let plan = self
            .jobs
            .take_on(rec, self.term())
            .ok_or_else(|| FsError::internal("a new load job is not running"))?;
        let job = self.jobs.get(plan.0)?;
        info!(job = job.id, path, recursive, "load job submitted");
        self.plan_in_background(plan);
        Ok(job)
    }

    /// The term this master leads in (0 on a single master).
    fn term(&self) -> u64 {
        self.replica.get().map_or(0, |r| r.term())
    }

    fn plan_in_background(self: &Arc<Self>, (id, path, recursive, c, cancel): ToPlan) {
        let ns = self.clone();
        tokio::spawn(async move {
            let r = tokio::select! {
                r = ns.plan_load(id, &path, recursive, &c) => r,
                _ = cancel.cancelled() => Ok(()),
            };
            ns.jobs.planned(id, r);
        });
    }

    /// On the master that leads, once per term: take on the recorded jobs (plan the
    /// running ones again). Called before a job is looked up, and by the `load_jobs`
    /// task, so a new leader carries them on within a tick.
    pub(super) async fn resume_jobs(self: &Arc<Self>) -> FsResult<()> {
        if !self.leads() {
            self.jobs.stepped_down();
            return Ok(());
        }
        let term = self.term();
        if self.jobs.resumed_in() == Some(term) {
            return Ok(());
        }
        // every record committed before now is applied here
        self.linearize(&None).await?;
        let mut recs = Vec::new();
        for (k, v) in self.store.meta_scan(META_JOB_PREFIX)? {
            match JobRec::decode(v.as_slice()) {
                Ok(r) => recs.push(r),
                Err(e) => {
                    warn!(key = ?k, error = %e, "a load job's record does not decode; skipped")
                }
            }
        }
        for plan in self.jobs.restore(term, recs) {
            info!(job = plan.0, path = %plan.1, "load job carried on");
            self.plan_in_background(plan);
        }
        Ok(())
    }

    /// The `load_jobs` task's step: take on the recorded jobs when this master starts
    /// leading, and record the ends of jobs (keeping the newest `KEPT_ENDED` ended).
    pub(super) async fn job_upkeep(self: &Arc<Self>) -> FsResult<()> {
        self.resume_jobs().await?;
        if !self.leads() {
            return Ok(());
        }
        let ended = self.jobs.take_unsaved();
        if ended.is_empty() {
            return Ok(());
        }
        let ns = self.clone();
        let recs = ended.clone();
        let saved = tokio::task::spawn_blocking(move || {
            let mut old: Vec<u64> = Vec::new();
            for (k, v) in ns.store.meta_scan(META_JOB_PREFIX)? {
                let rec = JobRec::decode(v.as_slice()).ok().and_then(|r| r.job);
                match (
                    <[u8; 8]>::try_from(k.as_slice()).map(u64::from_be_bytes),
                    rec,
                ) {
                    (Ok(id), Some(j)) if j.state != LoadState::LoadRunning as i32 => old.push(id),
                    _ => {}
                }
            }
            let ids: Vec<u64> = recs
                .iter()
                .filter_map(|r| r.job.as_ref().map(|j| j.id))
                .collect();
            old.retain(|id| !ids.contains(id));
            old.sort_unstable();
            let drop = (old.len() + ids.len()).saturating_sub(KEPT_ENDED);
            ns.mutate(0, |txn| {
                for r in &recs {
                    if let Some(j) = &r.job {
                        txn.put_meta(job_key(j.id), r.encode_to_vec());
                    }
                }
                for id in old.iter().take(drop) {
                    txn.del_meta(job_key(*id));
                }
                Ok(())
            })
        })
        .await
        .map_err(|e| FsError::internal(format!("record ended load jobs: {e}")));
        let res = match saved {
            Ok(Ok(((), seq))) => self.syncer.wait(seq).await,
            Ok(Err(e)) | Err(e) => Err(e),
        };
        if res.is_err() {
            self.jobs.unsave(&ended);
        }
        res
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
