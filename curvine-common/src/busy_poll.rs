//! Busy polling before a runtime thread sleeps.
//!
//! A request answered by a thread that has gone to sleep waits for that thread to be
//! woken. On a virtual machine that does no idle polling, waking a sleeping vCPU costs
//! an interrupt and an exit to the host: tens of microseconds, more than a metadata call
//! or a 4 KiB read costs to serve (one FUSE request: 66-83 µs without polling, 19-26 with).
//!
//! A server process enables this with the time it may poll (`set`), registers the
//! descriptors its requests arrive on (`watch`: connections, `/dev/fuse`), and installs
//! `before_park` as its tokio runtime's `on_thread_park` hook. A runtime thread with
//! nothing left to run then polls those descriptors for up to that time before it
//! sleeps, and goes back to work as soon as one is readable or the runtime queues a
//! task. One thread polls at a time; a process that never calls `set` pays nothing.
//!
//! Polling keeps this process's CPU awake, but the reply still has to wake the client,
//! whose CPU went idle when it started waiting. A process that calls
//! `keep_a_cpu_awake` (the FUSE daemon) therefore also runs a keeper thread at
//! `SCHED_IDLE` priority, spinning while requests keep arriving (each within the
//! polling time of the last). It takes no requests; it only keeps an otherwise idle CPU
//! from halting, and any other thread that wakes there preempts it at once. It sleeps
//! as soon as the requests stop, and machines with one CPU get none.
//!
//! Polling only pays while a CPU would otherwise sit idle. When runnable threads
//! outnumber the CPUs (clients, master and worker all busy on a small machine), a
//! polling thread holds a CPU that another needs, and everything waits longer: 4 KiB
//! files written by 8 clients on 2 cores went from 6.9k to 10.1k files/s with polling
//! turned off, and read from 17k to 31k. So the process's
//! set (`set`) skips polling while `/proc/loadavg` counts more runnable threads than
//! there are CPUs, sampled at most once a millisecond.

use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{LazyLock, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// The descriptors to poll and for how long: one per process (`global`), or a private
/// one in tests.
pub struct BusyPoll {
    /// Made on first use; None if the kernel refused one (polling then stays off).
    epfd: OnceLock<Option<RawFd>>,
    nanos: AtomicU64,
    polling: AtomicBool,
    /// When a poller last found a request (`now_nanos`).
    last_request: AtomicU64,
    /// The keeper, once started (None if its thread could not be made).
    keeper: OnceLock<Option<Thread>>,
    keeper_asleep: AtomicBool,
    /// Skip polling while the CPUs are crowded (`set_load_aware`).
    load_aware: AtomicBool,
    /// `/proc/loadavg` and the CPUs this process may use, found on first use (None:
    /// unreadable; polling then goes on regardless of load).
    load: OnceLock<Option<(std::fs::File, u32)>>,
    /// The last sample: more runnable threads than CPUs, and when (`now_nanos`).
    crowded: AtomicBool,
    sampled_at: AtomicU64,
}

/// How long a load sample stands, in nanoseconds.
const LOAD_SAMPLE_NANOS: u64 = 1_000_000;

/// The runnable threads in a `/proc/loadavg` line: the number before the `/` of its
/// fourth field ("0.20 0.18 0.12 3/180 11206" has 3).
fn runnable_in(loadavg: &str) -> Option<u32> {
    loadavg
        .split_whitespace()
        .nth(3)?
        .split('/')
        .next()?
        .parse()
        .ok()
}

static GLOBAL: BusyPoll = BusyPoll::new();

/// Nanoseconds since the first call, for timestamps that fit an atomic.
fn now_nanos() -> u64 {
    static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);
    u64::try_from(BASE.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The process's set, used by `set`, `watch` and `before_park`.
pub fn global() -> &'static BusyPoll {
    &GLOBAL
}

/// Poll for up to `d` before a runtime thread sleeps (zero turns polling off), unless
/// the CPUs are crowded (see the module docs).
pub fn set(d: Duration) {
    GLOBAL.set(d);
    GLOBAL.set_load_aware(true);
}

/// While polling is on, keep a CPU awake as long as requests arrive (see the module
/// docs). For the FUSE daemon, whose clients wait in the kernel on the same machine; a
/// keeper in the master and the workers made FUSE metadata calls slower.
pub fn keep_a_cpu_awake() {
    if !GLOBAL.enabled() || std::thread::available_parallelism().is_ok_and(|n| n.get() < 2) {
        return;
    }
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    if cpu_quota_in(&cgroups, Path::new("/sys/fs/cgroup")) {
        // the spinning would use up the quota the working threads need
        tracing::info!("no busy-poll keeper: a cgroup CPU quota limits this process");
        return;
    }
    GLOBAL.start_keeper();
}

/// Whether a cgroup CPU quota applies to the process whose `/proc/PID/cgroup` is
/// `cgroups`, with the cgroup file systems under `sys_root`: a `cpu.max` (v2, also in
/// the hybrid layout's `unified`) or `cpu.cfs_quota_us` (v1) other than unlimited, in
/// the process's group or any group above it.
fn cpu_quota_in(cgroups: &str, sys_root: &Path) -> bool {
    let limited = |root: PathBuf, rel: &str, file: &str| {
        let mut dir = root.join(rel.trim_start_matches('/'));
        loop {
            if let Ok(v) = std::fs::read_to_string(dir.join(file)) {
                let quota = v.split_whitespace().next().unwrap_or("max");
                if quota != "max" && quota != "-1" {
                    return true;
                }
            }
            if dir == root || !dir.pop() {
                return false;
            }
        }
    };
    cgroups.lines().any(|line| {
        let mut f = line.splitn(3, ':');
        let (_, controllers, rel) = (f.next(), f.next().unwrap_or(""), f.next().unwrap_or(""));
        if controllers.is_empty() {
            limited(sys_root.to_path_buf(), rel, "cpu.max")
                || limited(sys_root.join("unified"), rel, "cpu.max")
        } else if controllers.split(',').any(|c| c == "cpu") {
            limited(sys_root.join("cpu"), rel, "cpu.cfs_quota_us")
                || limited(sys_root.join(controllers), rel, "cpu.cfs_quota_us")
        } else {
            false
        }
    })
}

/// Poll `fd` too. A no-op while polling is off; a closed descriptor leaves the set by
/// itself.
pub fn watch(fd: &impl AsRawFd) {
    GLOBAL.watch(fd.as_raw_fd());
}

/// The `on_thread_park` hook.
pub fn before_park() {
    GLOBAL.before_park();
}

impl Default for BusyPoll {
    fn default() -> Self {
        Self::new()
    }
}

impl BusyPoll {
    pub const fn new() -> BusyPoll {
        BusyPoll {
            epfd: OnceLock::new(),
            nanos: AtomicU64::new(0),
            polling: AtomicBool::new(false),
            last_request: AtomicU64::new(0),
            keeper: OnceLock::new(),
            keeper_asleep: AtomicBool::new(false),
            load_aware: AtomicBool::new(false),
            load: OnceLock::new(),
            crowded: AtomicBool::new(false),
            sampled_at: AtomicU64::new(0),
        }
    }

    /// Skip polling while more threads are runnable than there are CPUs to run them.
    pub fn set_load_aware(&self, on: bool) {
        self.load_aware.store(on, Ordering::Relaxed);
    }

    /// Whether runnable threads outnumber the CPUs, from a sample at most
    /// `LOAD_SAMPLE_NANOS` old. Called by the one polling thread only.
    fn cpus_crowded(&self) -> bool {
        if !self.load_aware.load(Ordering::Relaxed) {
            return false;
        }
        let now = now_nanos();
        let last = self.sampled_at.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < LOAD_SAMPLE_NANOS {
            return self.crowded.load(Ordering::Relaxed);
        }
        self.sampled_at.store(now.max(1), Ordering::Relaxed);
        // The keeper, while it spins, is runnable too, but it gives way to anything
        // else: not a thread this poller would keep from a CPU.
        let keeper = u32::from(self.keeper_spinning());
        let crowded = self
            .sample_load()
            .is_some_and(|(runnable, cpus)| runnable.saturating_sub(keeper) > cpus);
        self.crowded.store(crowded, Ordering::Relaxed);
        crowded
    }

    /// (runnable threads, CPUs), or None when `/proc/loadavg` cannot be read.
    fn sample_load(&self) -> Option<(u32, u32)> {
        use std::os::unix::fs::FileExt;
        let (file, cpus) = self.load.get_or_init(|| {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            match std::fs::File::open("/proc/loadavg") {
                Ok(f) => Some((f, u32::try_from(cpus).unwrap_or(u32::MAX))),
                Err(e) => {
                    tracing::info!(error = %e, "busy polling ignores the load: no /proc/loadavg");
                    None
                }
            }
        }).as_ref()?;
        let mut buf = [0u8; 128];
        let n = file.read_at(&mut buf, 0).ok()?;
        let runnable = runnable_in(std::str::from_utf8(&buf[..n]).ok()?)?;
        Some((runnable, *cpus))
    }

    pub fn set(&self, d: Duration) {
        self.nanos.store(
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    pub fn enabled(&self) -> bool {
        self.nanos.load(Ordering::Relaxed) > 0
    }

    /// The epoll instance, made on first use.
    #[allow(unsafe_code)]
    fn epoll(&self) -> Option<RawFd> {
        *self.epfd.get_or_init(|| {
            // SAFETY: epoll_create1 takes no pointers.
            let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            if fd < 0 {
                tracing::warn!(error = %std::io::Error::last_os_error(), "busy polling off: epoll_create1 failed");
                self.nanos.store(0, Ordering::Relaxed);
                return None;
            }
            Some(fd)
        })
    }

    /// Poll `fd` for readability (level-triggered: it counts as long as unread data
    /// waits). Failures only cost the polling, so they are logged, not returned.
    #[allow(unsafe_code)]
    pub fn watch(&self, fd: RawFd) {
        if !self.enabled() {
            return;
        }
        let Some(epfd) = self.epoll() else { return };
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        if unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            let e = std::io::Error::last_os_error();
            // a descriptor number reused before the kernel dropped the old entry
            if e.raw_os_error() != Some(libc::EEXIST) {
                tracing::debug!(fd, error = %e, "busy polling: cannot watch descriptor");
            }
        }
    }

    /// Poll until a watched descriptor is readable, the current runtime has a task
    /// queued from outside its threads, or the time is up. Only one thread polls; the
    /// others go to sleep at once.
    #[allow(unsafe_code)]
    pub fn before_park(&self) {
        let nanos = self.nanos.load(Ordering::Relaxed);
        if nanos == 0 || self.polling.swap(true, Ordering::Acquire) {
            return;
        }
        if self.cpus_crowded() {
            self.polling.store(false, Ordering::Release);
            return;
        }
        if let Some(epfd) = self.epoll() {
            let metrics = tokio::runtime::Handle::try_current()
                .ok()
                .map(|h| h.metrics());
            let deadline = Instant::now() + Duration::from_nanos(nanos);
            let mut ev = [libc::epoll_event { events: 0, u64: 0 }];
            loop {
                // SAFETY: `ev` has room for the one event asked for; timeout 0 never blocks.
                let n = unsafe { libc::epoll_wait(epfd, ev.as_mut_ptr(), 1, 0) };
                if n != 0 || metrics.as_ref().is_some_and(|m| m.global_queue_depth() > 0) {
                    self.request_seen();
                    break;
                }
                if Instant::now() >= deadline {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        self.polling.store(false, Ordering::Release);
    }

    /// Start the keeper thread (once). It runs at `SCHED_IDLE`; if the kernel refuses
    /// that, there is no keeper, since one at normal priority would take CPU time.
    pub fn start_keeper(&'static self) {
        self.keeper.get_or_init(|| self.spawn_keeper());
    }

    fn spawn_keeper(&'static self) -> Option<Thread> {
        let spawned = std::thread::Builder::new()
            .name("busy-poll-keep".into()) // a thread name shows 15 bytes at most
            .spawn(move || {
                if let Err(e) = set_idle_priority() {
                    tracing::warn!(error = %e, "no busy-poll keeper: cannot set SCHED_IDLE");
                    return;
                }
                self.keep_awake();
            });
        match spawned {
            Ok(h) => Some(h.thread().clone()),
            Err(e) => {
                tracing::warn!(error = %e, "no busy-poll keeper: cannot start a thread");
                None
            }
        }
    }

    /// A poller found a request: keep (or wake) the keeper spinning. Nothing to do in
    /// a process without one (the master, the workers).
    fn request_seen(&self) {
        let Some(Some(keeper)) = self.keeper.get() else {
            return;
        };
        self.last_request.store(now_nanos(), Ordering::SeqCst);
        if self.keeper_asleep.load(Ordering::SeqCst)
            && self.keeper_asleep.swap(false, Ordering::SeqCst)
        {
            keeper.unpark();
        }
    }

    /// Whether this set's keeper thread exists and is awake (spinning).
    fn keeper_spinning(&self) -> bool {
        matches!(self.keeper.get(), Some(Some(_))) && !self.keeper_asleep.load(Ordering::SeqCst)
    }

    /// True while the last request came within the polling time.
    fn requests_flowing(&self) -> bool {
        let since = now_nanos().saturating_sub(self.last_request.load(Ordering::SeqCst));
        since <= self.nanos.load(Ordering::Relaxed)
    }

    /// The keeper's loop: spin while requests flow, sleep until the next one otherwise.
    fn keep_awake(&self) {
        loop {
            if self.requests_flowing() {
                std::hint::spin_loop();
                continue;
            }
            // publish "asleep" before the last look, so a request that lands between the
            // look and the park still unparks us (both sides use SeqCst)
            self.keeper_asleep.store(true, Ordering::SeqCst);
            if !self.requests_flowing() {
                std::thread::park();
            }
            self.keeper_asleep.store(false, Ordering::SeqCst);
        }
    }
}

/// Move the calling thread to `SCHED_IDLE`: it then runs only when its CPU has nothing
/// else to run.
#[allow(unsafe_code)]
fn set_idle_priority() -> std::io::Result<()> {
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: `p` is a valid sched_param; pid 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &p) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    /// A set polling for `d` that watches one end of a socket pair: (set, other end,
    /// watched end).
    fn watching(d: Duration) -> (BusyPoll, UnixStream, UnixStream) {
        let bp = BusyPoll::new();
        bp.set(d);
        let (a, b) = UnixStream::pair().unwrap();
        bp.watch(b.as_raw_fd());
        (bp, a, b)
    }

    #[test]
    fn polling_stops_when_a_watched_descriptor_is_readable() {
        let (bp, mut a, _b) = watching(Duration::from_secs(30));
        a.write_all(b"x").unwrap();
        let t = Instant::now();
        bp.before_park();
        // it returned because of the byte, not the 30 s
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    }

    #[test]
    fn polling_lasts_the_time_set_when_nothing_arrives() {
        let (bp, _a, _b) = watching(Duration::from_millis(20));
        let t = Instant::now();
        bp.before_park();
        assert!(t.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn runnable_threads_come_from_the_fourth_field_of_loadavg() {
        assert_eq!(runnable_in("0.20 0.18 0.12 3/180 11206\n"), Some(3));
        assert_eq!(runnable_in("1.00 1.00 1.00 17/2048 1"), Some(17));
        assert_eq!(runnable_in("0.20 0.18 0.12"), None);
        assert_eq!(runnable_in("0.20 0.18 0.12 x/180 1"), None);
        assert_eq!(runnable_in(""), None);
        // this machine's own file parses
        let own = std::fs::read_to_string("/proc/loadavg").unwrap();
        assert!(runnable_in(&own).is_some_and(|n| n >= 1), "{own}");
    }

    #[test]
    fn crowded_cpus_skip_the_polling() {
        let (bp, _a, _b) = watching(Duration::from_secs(30));
        bp.set_load_aware(true);
        // a sample saying "crowded", fresh: no polling at all
        bp.crowded.store(true, Ordering::Relaxed);
        bp.sampled_at.store(now_nanos().max(1), Ordering::Relaxed);
        let t = Instant::now();
        bp.before_park();
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        // a stale sample is taken again, from /proc/loadavg
        bp.sampled_at.store(1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(2));
        let (runnable, cpus) = bp.sample_load().expect("/proc/loadavg");
        assert!(runnable >= 1 && cpus >= 1);
        bp.set(Duration::from_millis(1));
        bp.before_park();
        assert!(bp.sampled_at.load(Ordering::Relaxed) > 1, "sampled again");
        // off: the sample is not looked at
        bp.set_load_aware(false);
        bp.crowded.store(true, Ordering::Relaxed);
        bp.sampled_at.store(now_nanos().max(1), Ordering::Relaxed);
        bp.set(Duration::from_millis(20));
        let t = Instant::now();
        bp.before_park();
        assert!(
            t.elapsed() >= Duration::from_millis(20),
            "polled despite the sample"
        );
    }

    #[test]
    fn off_means_no_polling_and_no_epoll() {
        let (bp, _a, _b) = watching(Duration::ZERO);
        assert!(bp.epfd.get().is_none());
        let t = Instant::now();
        bp.before_park();
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(!bp.enabled());
    }

    #[test]
    fn a_task_queued_from_outside_ends_the_polling() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let _enter = rt.enter();
        // keep the only worker busy, so the next task stays in the global queue
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        rt.spawn(async move {
            started_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        });
        started_rx.recv().unwrap();
        rt.spawn(async {});
        let (bp, _a, _b) = watching(Duration::from_secs(30));
        let t = Instant::now();
        bp.before_park();
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        release_tx.send(()).unwrap();
    }

    #[test]
    fn a_runtime_with_the_hook_still_runs_tasks_woken_from_outside() {
        // installed as on_thread_park, the polling must see the runtime's queue: a task
        // woken by a blocking-pool thread has to run long before the 30 s are up
        let (bp, _a, _b) = watching(Duration::from_secs(30));
        let hook = std::sync::Arc::new(bp);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .on_thread_park(move || hook.before_park())
            .build()
            .unwrap();
        let t = Instant::now();
        rt.block_on(async {
            let job = tokio::spawn(async {
                for _ in 0..3 {
                    tokio::task::spawn_blocking(|| ()).await.unwrap();
                }
            });
            tokio::time::timeout(Duration::from_secs(20), job)
                .await
                .expect("tasks stalled behind the polling")
                .unwrap();
        });
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        rt.shutdown_background();
    }

    /// Wait up to 20 s for `cond`.
    fn eventually(what: &str, cond: impl Fn() -> bool) {
        let t = Instant::now();
        while !cond() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "timed out waiting: {what}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn the_keeper_spins_at_idle_priority_only_while_requests_flow() {
        let bp: &'static BusyPoll = Box::leak(Box::new(BusyPoll::new()));
        bp.set(Duration::from_millis(30));
        bp.start_keeper();
        // the keeper's thread, found by its name (which the thread sets as it starts)
        let keeper_tid = || {
            std::fs::read_dir("/proc/self/task")
                .unwrap()
                .flatten()
                .find(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.trim() == "busy-poll-keep")
                })
                .and_then(|t| t.file_name().into_string().ok())
        };
        eventually("the keeper thread starts", || keeper_tid().is_some());
        let tid = keeper_tid().unwrap();
        // field 41 (policy), counted after the ")" that ends the thread name
        let policy = || -> i32 {
            let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
            stat.rsplit(')')
                .next()
                .unwrap()
                .split_whitespace()
                .nth(38)
                .unwrap()
                .parse()
                .unwrap()
        };
        eventually("the keeper runs at SCHED_IDLE", || {
            policy() == libc::SCHED_IDLE
        });
        // no requests yet: it sleeps
        eventually("the keeper sleeps", || {
            bp.keeper_asleep.load(Ordering::SeqCst)
        });
        // a request wakes it, and it spins until 30 ms pass without another
        bp.request_seen();
        assert!(!bp.keeper_asleep.load(Ordering::SeqCst));
        let state = || {
            let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
            s.rsplit(')')
                .next()
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
                .to_string()
        };
        eventually("the keeper spins", || state() == "R");
        // a spinning keeper is not counted against the CPUs when polling samples the load
        assert!(bp.keeper_spinning());
        eventually("the keeper sleeps again", || {
            bp.keeper_asleep.load(Ordering::SeqCst) && state() == "S"
        });
        assert!(!bp.keeper_spinning());
    }

    #[test]
    fn cgroup_cpu_quotas_are_found_in_v1_and_v2_layouts() {
        let root = tempfile::tempdir().unwrap();
        let put = |rel: &str, file: &str, v: &str| {
            let d = root.path().join(rel);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join(file), v).unwrap();
        };
        let v2 = "0::/pods/fuse\n";
        // v2: unlimited here and above
        put("pods/fuse", "cpu.max", "max 100000\n");
        put("pods", "cpu.max", "max 100000\n");
        assert!(!cpu_quota_in(v2, root.path()));
        // a quota on a parent group applies
        put("pods", "cpu.max", "200000 100000\n");
        assert!(cpu_quota_in(v2, root.path()));
        // v1 with cpu and cpuacct mounted together
        let v1 = "4:memory:/x\n2:cpu,cpuacct:/job\n";
        put("cpu,cpuacct/job", "cpu.cfs_quota_us", "-1\n");
        assert!(!cpu_quota_in(v1, root.path()));
        put("cpu,cpuacct/job", "cpu.cfs_quota_us", "50000\n");
        assert!(cpu_quota_in(v1, root.path()));
        // no cgroup information at all
        assert!(!cpu_quota_in("", root.path()));
    }
}
