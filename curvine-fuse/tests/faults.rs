//! Bad input and faults, each test on its own MiniCluster and mount: a full cluster
//! (ENOSPC, other files intact), a worker stopped during a read (EIO, no hang, later
//! reads work), a master restart under the mount, 255/256-byte names and paths beyond
//! PATH_MAX, setgid directories and ctime/mtime updates, times set to the nanosecond
//! kept across a master restart.

#![allow(unsafe_code)]

mod common;

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::mpsc;
use std::time::Duration;

use common::{data, errno_of, is_mounted, spawn_daemon, wait_for};
use curvine_server::testing::{MiniCluster, TierSpec};
use tokio::runtime::Runtime;

/// One cluster and one mount of it; the daemon is stopped and the mount detached on drop.
struct Env {
    rt: Runtime,
    cluster: Option<MiniCluster>,
    daemon: Option<Child>,
    mnt: PathBuf,
    _dir: tempfile::TempDir,
}

impl Env {
    fn start(tiers: Option<Vec<TierSpec>>) -> Env {
        Env::start_with(tiers, false)
    }

    /// `short_circuit`: the daemon reads block files on this host itself (tests of the
    /// data path); without it reads go through the worker (so stopping it matters).
    fn start_with(tiers: Option<Vec<TierSpec>>, short_circuit: bool) -> Env {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let cluster = rt.block_on(async {
            let mut b = MiniCluster::builder().workers(1);
            if let Some(t) = tiers {
                b = b.tiers(t);
            }
            b.start().await.expect("start MiniCluster")
        });
        let dir = tempfile::tempdir().expect("temp dir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).expect("mkdir mnt");
        let conf = dir.path().join("cluster.toml");
        let c = cluster.client_conf();
        // enough retries to ride out a master restart
        let text = format!(
            "[master]\nlocal_socket = \"{}\"\n\n\
             [client]\nmaster_addrs = [\"{}\"]\nhostname = \"{}\"\nrpc_timeout = \"10s\"\n\
             connect_timeout = \"2s\"\nshort_circuit = {short_circuit}\nrpc_retries = 30\n\
             retry_backoff = \"100ms\"\n\n\
             [fuse]\nweb_port = 0\n\n[log]\nlevel = \"warn\"\n",
            c.master.local_socket.display(),
            c.client.master_addrs[0],
            c.client.hostname
        );
        fs::write(&conf, text).expect("write conf");
        let daemon = spawn_daemon(&conf, &mnt, &[]);
        let env = Env {
            rt,
            cluster: Some(cluster),
            daemon: Some(daemon),
            mnt,
            _dir: dir,
        };
        assert!(
            wait_for(Duration::from_secs(20), || is_mounted(&env.mnt)
                && fs::read_dir(&env.mnt).is_ok()),
            "no mount at {}",
            env.mnt.display()
        );
        env
    }

    fn stop_worker(&mut self) {
        let c = self.cluster.as_mut().expect("cluster");
        self.rt.block_on(c.stop_worker(0)).expect("stop worker");
    }

    fn start_worker(&mut self) {
        let c = self.cluster.as_mut().expect("cluster");
        self.rt.block_on(async {
            c.start_worker(0).await.expect("start worker");
            c.wait_workers_live(1).await.expect("worker live");
        });
    }

    fn stop_master(&mut self) {
        let c = self.cluster.as_mut().expect("cluster");
        self.rt.block_on(c.stop_master()).expect("stop master");
    }

    fn start_master(&mut self) {
        let c = self.cluster.as_mut().expect("cluster");
        self.rt.block_on(async {
            c.start_master().await.expect("start master");
            c.wait_workers_live(1).await.expect("worker live");
        });
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(mut c) = self.daemon.take() {
            // SAFETY: a signal to our own child.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
            if !wait_for(Duration::from_secs(20), || {
                matches!(c.try_wait(), Ok(Some(_)))
            }) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if is_mounted(&self.mnt) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.mnt)
                .status();
        }
        if let Some(c) = self.cluster.take() {
            let _ = self.rt.block_on(c.shutdown());
        }
    }
}

/// Run `f` on another thread; panics if it does not finish within `limit` (a hang).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("operation hung for more than {limit:?}"))
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL")
}

#[test]
fn full_cluster_gives_enospc_and_keeps_other_files() {
    let env = Env::start(Some(vec![TierSpec {
        tier: "MEM",
        capacity: 48 << 20,
        tmpfs: true,
    }]));
    let keep = data(3 << 20, 7);
    fs::write(env.p("keep"), &keep).unwrap();

    let chunk = data(1 << 20, 8);
    let big = env.p("big");
    let res = within(Duration::from_secs(120), move || {
        let mut f = File::create(&big)?;
        for _ in 0..200 {
            f.write_all(&chunk)?;
        }
        f.sync_all()
    });
    let err = res.expect_err("200 MiB cannot fit in 48 MiB");
    assert_eq!(errno_of(&err), libc::ENOSPC, "{err}");

    // the other file is intact, and removing the partial one frees the space again
    assert_eq!(fs::read(env.p("keep")).unwrap(), keep);
    // the client abandons a file whose write failed, so it may already be gone
    if let Err(e) = fs::remove_file(env.p("big")) {
        assert_eq!(errno_of(&e), libc::ENOENT, "{e}");
    }
    let again = data(8 << 20, 9);
    assert!(
        wait_for(Duration::from_secs(30), || {
            fs::write(env.p("again"), &again).is_ok()
                && fs::read(env.p("again")).is_ok_and(|d| d == again)
        }),
        "space is reusable after the delete"
    );
    assert_eq!(fs::read(env.p("keep")).unwrap(), keep);
}

#[test]
fn worker_stopped_during_read_gives_eio_then_reads_work_again() {
    let mut env = Env::start(None);
    // three 8 MiB blocks
    let body = data(24 << 20, 3);
    fs::write(env.p("f"), &body).unwrap();

    let f = File::open(env.p("f")).unwrap();
    let mut head = vec![0u8; 1 << 20];
    f.read_exact_at(&mut head, 0).unwrap();
    assert_eq!(head, body[..1 << 20]);

    env.stop_worker();
    let res = within(Duration::from_secs(60), move || {
        let mut buf = vec![0u8; 1 << 20];
        f.read_exact_at(&mut buf, 20 << 20)
    });
    let err = res.expect_err("the only worker is gone");
    assert_eq!(errno_of(&err), libc::EIO, "{err}");

    env.start_worker();
    let p = env.p("f");
    let back = within(Duration::from_secs(60), move || fs::read(p)).unwrap();
    assert!(back == body, "content after the worker came back");
}

/// The block files of worker 0 (`blocks/SHARD/ID`, not their CRC sidecars).
fn block_files(env: &Env) -> Vec<PathBuf> {
    let c = env.cluster.as_ref().expect("cluster");
    let shards = c
        .worker_dirs(0)
        .into_iter()
        .filter_map(|d| fs::read_dir(d.join("blocks")).ok())
        .flat_map(|rd| rd.flatten().map(|e| e.path()));
    shards
        .filter_map(|s| fs::read_dir(s).ok())
        .flat_map(|rd| rd.flatten().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_none())
        .collect()
}

#[test]
fn a_corrupt_chunk_read_on_this_host_gives_eio_and_the_rest_still_reads() {
    // short-circuit: the daemon replies straight from the mapped block file (MEM tier on
    // tmpfs) once the block is open, so this covers the CRC check of that path
    let env = Env::start_with(None, true);
    // three 8 MiB blocks
    let body = data(24 << 20, 11);
    fs::write(env.p("f"), &body).unwrap();
    let mut blocks = block_files(&env);
    assert_eq!(blocks.len(), 3, "three blocks: {blocks:?}");
    // the third block: the one whose file holds the body's last byte
    blocks.retain(|p| {
        let len = fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let mut last = [0u8; 1];
        len == 8 << 20
            && File::open(p)
                .and_then(|f| f.read_exact_at(&mut last, len - 1))
                .is_ok()
            && last[0] == body[body.len() - 1]
    });
    // flip a byte in place, 6 MiB into the third block (the file keeps its length)
    let at = (22 << 20) + 77;
    let w = OpenOptions::new().write(true).open(&blocks[0]).unwrap();
    w.write_all_at(&[body[at] ^ 0x5a], 6 << 20 | 77).unwrap();
    drop(w);

    let f = File::open(env.p("f")).unwrap();
    // no kernel read-ahead: each read below asks the daemon for just its own range
    assert_eq!(
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) },
        0
    );
    let res = within(Duration::from_secs(60), move || {
        let mut buf = vec![0u8; 64 << 10];
        // opens the third block (a copy into a buffer) ...
        f.read_exact_at(&mut buf, 16 << 20)?;
        assert!(buf == body[16 << 20..(16 << 20) + (64 << 10)], "at 16 MiB");
        // ... so this one is served from its mapping, and meets the bad chunk
        let bad = f.read_exact_at(&mut buf, 22 << 20);
        // the block's good chunks still read, on the same handle
        f.read_exact_at(&mut buf, 17 << 20)?;
        assert!(buf == body[17 << 20..(17 << 20) + (64 << 10)], "at 17 MiB");
        Ok::<_, std::io::Error>((bad, body))
    });
    let (bad, body) = res.unwrap();
    let err = bad.expect_err("the only replica is corrupt");
    assert_eq!(errno_of(&err), libc::EIO, "{err}");
    let p = env.p("f");
    let head = within(Duration::from_secs(60), move || {
        let mut head = vec![0u8; 8 << 20];
        File::open(p)?.read_exact_at(&mut head, 0).map(|_| head)
    })
    .unwrap();
    assert!(head == body[..8 << 20], "first block");
}

#[test]
fn mount_survives_a_master_restart() {
    let mut env = Env::start(None);
    fs::create_dir(env.p("d")).unwrap();
    fs::write(env.p("d/before"), b"before").unwrap();
    // a handle opened before the restart
    let mut open = File::open(env.p("d/before")).unwrap();

    env.stop_master();
    // calls made while the master is down are retried until it is back
    let (mnt1, mnt2) = (env.mnt.clone(), env.mnt.clone());
    let lookup = std::thread::spawn(move || fs::metadata(mnt1.join("d/before")).map(|m| m.len()));
    let list = std::thread::spawn(move || {
        fs::read_dir(mnt2.join("d")).map(|it| it.filter_map(|e| e.ok()).count())
    });
    // and so are mutations, which never reached the stopped master
    let mnt3 = env.mnt.clone();
    let mutate = std::thread::spawn(move || -> Result<(), String> {
        let d = mnt3.join("made-while-down");
        fs::create_dir(&d).map_err(|e| format!("mkdir: {e}"))?;
        fs::write(d.join("f"), b"while down").map_err(|e| format!("write: {e}"))?;
        fs::rename(d.join("f"), d.join("g")).map_err(|e| format!("rename: {e}"))?;
        fs::remove_file(d.join("g")).map_err(|e| format!("unlink: {e}"))
    });
    // the lookup, the listing and the mkdir are all waiting on the mount now
    assert!(
        wait_for(Duration::from_secs(10), || threads_in_fuse() >= 3),
        "requests did not reach the mount"
    );
    env.start_master();
    assert_eq!(lookup.join().unwrap().unwrap(), 6);
    assert_eq!(list.join().unwrap().unwrap(), 1);
    mutate.join().unwrap().unwrap();
    assert!(env.p("made-while-down").is_dir());
    assert_eq!(fs::read_dir(env.p("made-while-down")).unwrap().count(), 0);

    let mut s = String::new();
    open.read_to_string(&mut s).unwrap();
    assert_eq!(s, "before");
    fs::write(env.p("d/after"), b"after").unwrap();
    assert_eq!(fs::read(env.p("d/after")).unwrap(), b"after");
    fs::rename(env.p("d/after"), env.p("d/renamed")).unwrap();
    assert_eq!(fs::read_dir(env.p("d")).unwrap().count(), 2);
}

#[test]
fn times_past_2038_are_kept_to_the_nanosecond_across_a_master_restart() {
    use std::time::{SystemTime, UNIX_EPOCH};
    let mut env = Env::start(None);
    let f = env.p("t");
    fs::write(&f, b"x").unwrap();
    // 2106-02-07 06:28:16.123456789 and 2038-01-19 03:14:08.000000001
    let mtime = UNIX_EPOCH + Duration::new(4_294_967_296, 123_456_789);
    let atime = UNIX_EPOCH + Duration::new(2_147_483_648, 1);
    let times = fs::FileTimes::new().set_modified(mtime).set_accessed(atime);
    File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_times(times)
        .unwrap();
    let exact = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        (
            (m.mtime(), m.mtime_nsec()),
            (m.atime(), m.atime_nsec()),
            m.modified().unwrap(),
        )
    };
    let want = ((4_294_967_296, 123_456_789), (2_147_483_648, 1), mtime);
    assert_eq!(exact(&f), want);

    env.stop_master();
    env.start_master();
    // a new name: the kernel asks the restarted master for its attributes
    fs::rename(&f, env.p("t2")).unwrap();
    assert_eq!(exact(&env.p("t2")), want);
    assert!(mtime > SystemTime::now());
}

#[test]
fn long_names_and_paths() {
    let env = Env::start(None);
    let n255 = "a".repeat(255);
    let n256 = "b".repeat(256);
    fs::write(env.p(&n255), b"x").unwrap();
    assert_eq!(fs::read(env.p(&n255)).unwrap(), b"x");
    assert!(fs::read_dir(&env.mnt)
        .unwrap()
        .any(|e| e.unwrap().file_name().len() == 255));
    fs::create_dir(env.p(&"d".repeat(255))).unwrap();
    for r in [
        fs::write(env.p(&n256), b"x"),
        fs::create_dir(env.p(&n256)),
        fs::metadata(env.p(&n256)).map(|_| ()),
        fs::rename(env.p(&n255), env.p(&n256)),
    ] {
        assert_eq!(errno_of(&r.unwrap_err()), libc::ENAMETOOLONG);
    }
    fs::remove_file(env.p(&n255)).unwrap();

    // a path string longer than PATH_MAX is refused by the kernel
    let long = env.mnt.join(format!("{}/f", vec!["d"; 2100].join("/")));
    assert!(long.as_os_str().len() > libc::PATH_MAX as usize);
    assert_eq!(
        errno_of(&fs::metadata(&long).unwrap_err()),
        libc::ENAMETOOLONG
    );

    // a tree deeper than PATH_MAX, built with *at calls: every level works up to the
    // master's max_path_len (64 KiB), the one beyond is refused
    let name = CString::new("c".repeat(200)).unwrap();
    // SAFETY: plain syscalls on fds this test owns (here and below).
    let mut fd = unsafe { libc::open(cpath(&env.mnt).as_ptr(), libc::O_DIRECTORY) };
    assert!(fd >= 0);
    let mut depth = 0;
    let mut last_err = 0;
    for _ in 0..400 {
        // SAFETY: plain syscalls on fds this test owns.
        let r = unsafe { libc::mkdirat(fd, name.as_ptr(), 0o755) };
        if r != 0 {
            last_err = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            break;
        }
        let next = unsafe { libc::openat(fd, name.as_ptr(), libc::O_DIRECTORY) };
        assert!(next >= 0);
        unsafe { libc::close(fd) };
        fd = next;
        depth += 1;
    }
    unsafe { libc::close(fd) };
    // "/ccc…" is 201 bytes: 326 levels fit in 65536 bytes, 327 do not
    assert_eq!(depth, 326);
    assert_eq!(last_err, libc::ENAMETOOLONG);
}

#[test]
fn setgid_directories_and_times() {
    let env = Env::start(None);
    let d = env.p("sg");
    fs::create_dir(&d).unwrap();
    std::os::unix::fs::chown(&d, None, Some(4242)).unwrap();
    fs::set_permissions(&d, fs::Permissions::from_mode(0o2775)).unwrap();
    assert_eq!(fs::metadata(&d).unwrap().mode() & 0o7777, 0o2775);

    fs::write(d.join("f"), b"x").unwrap();
    fs::create_dir(d.join("sub")).unwrap();
    let f = fs::metadata(d.join("f")).unwrap();
    let sub = fs::metadata(d.join("sub")).unwrap();
    assert_eq!(f.gid(), 4242, "files take the directory's group");
    assert_eq!(sub.gid(), 4242, "so do directories");
    assert_ne!(sub.mode() & 0o2000, 0, "and they keep the setgid bit");
    assert_eq!(f.mode() & 0o2000, 0, "files do not get it");

    // times: write moves mtime and ctime; chmod moves ctime only; creating and removing
    // entries moves the directory's mtime and ctime
    let tick = || std::thread::sleep(Duration::from_millis(20));
    let t = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        ((m.mtime(), m.mtime_nsec()), (m.ctime(), m.ctime_nsec()))
    };
    let file = d.join("f");
    let (m0, c0) = t(&file);
    // attributes are cached for up to attr_ttl; wait for changes to show
    tick();
    let mut w = OpenOptions::new().append(true).open(&file).unwrap();
    w.write_all(b"more").unwrap();
    w.sync_all().unwrap();
    drop(w);
    assert!(wait_for(Duration::from_secs(5), || {
        let (m, c) = t(&file);
        m > m0 && c > c0
    }));
    let (m1, c1) = t(&file);
    tick();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
    assert!(wait_for(Duration::from_secs(5), || t(&file).1 > c1));
    assert_eq!(t(&file).0, m1, "chmod leaves mtime alone");

    let (dm0, dc0) = t(&d);
    tick();
    fs::write(d.join("g"), b"").unwrap();
    assert!(wait_for(Duration::from_secs(5), || {
        let (m, c) = t(&d);
        m > dm0 && c > dc0
    }));
    let (dm1, dc1) = t(&d);
    tick();
    fs::remove_file(d.join("g")).unwrap();
    assert!(wait_for(Duration::from_secs(5), || {
        let (m, c) = t(&d);
        m > dm1 && c > dc1
    }));
}

/// Threads of this process blocked in a FUSE request (waiting for the daemon's answer).
fn threads_in_fuse() -> usize {
    let Ok(tasks) = fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| t.ok())
        .filter(|t| {
            fs::read_to_string(t.path().join("wchan"))
                .is_ok_and(|w| w.contains("request_wait_answer") || w.contains("fuse"))
        })
        .count()
}
