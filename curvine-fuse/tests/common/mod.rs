//! Shared harness: one MiniCluster and one real mount (the `curvine-fuse` binary as a
//! child process) per test binary. The mount is torn down at process exit (atexit), and
//! the daemon gets SIGTERM if the test process dies (PR_SET_PDEATHSIG), so no mount is
//! left behind.

#![allow(dead_code, unsafe_code)]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use curvine_client::CurvineFs;
use curvine_server::testing::MiniCluster;
use tokio::runtime::Runtime;

pub struct Shared {
    pub rt: Runtime,
    pub cluster: MiniCluster,
    pub fs: CurvineFs,
    /// The mount point.
    pub mnt: PathBuf,
    pub conf_file: PathBuf,
    _dir: tempfile::TempDir,
}

static SHARED: OnceLock<Shared> = OnceLock::new();
static DAEMON_PID: AtomicI32 = AtomicI32::new(0);
static MNT: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The daemon binary under test.
pub fn daemon_bin() -> &'static str {
    env!("CARGO_BIN_EXE_curvine-fuse")
}

/// A cluster conf file for the daemon: the master's local socket, client and fuse sections.
pub fn write_conf(cluster: &MiniCluster, path: &Path, extra_fuse: &str) {
    let c = cluster.client_conf();
    let addrs: Vec<String> = c
        .client
        .master_addrs
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect();
    // the mount's web port is off unless a test asks for one
    let web = if extra_fuse.contains("web_port") {
        ""
    } else {
        "web_port = 0\n"
    };
    let text = format!(
        "[master]\nlocal_socket = \"{}\"\n\n\
         [client]\nmaster_addrs = [{}]\nhostname = \"{}\"\nrpc_timeout = \"10s\"\nconnect_timeout = \"2s\"\n\n\
         [fuse]\n{web}{extra_fuse}\n\n[log]\nlevel = \"warn\"\n",
        c.master.local_socket.display(),
        addrs.join(", "),
        c.client.hostname
    );
    std::fs::write(path, text).expect("write conf");
}

/// Start the daemon on `mnt`; it dies with the thread that spawns it, so spawn it from
/// a thread that lives as long as the process.
pub fn spawn_daemon(conf: &Path, mnt: &Path, args: &[&str]) -> Child {
    let mut cmd = Command::new(daemon_bin());
    cmd.arg("--conf")
        .arg(conf)
        .arg("--mnt-path")
        .arg(mnt)
        .args(args)
        .stdin(Stdio::null());
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    cmd.spawn().expect("spawn curvine-fuse")
}

pub fn is_mounted(mnt: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = mnt.to_string_lossy().replace(' ', "\\040");
    text.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        f.get(4) == Some(&want.as_str()) && l.contains(" - fuse")
    })
}

/// Wait until `cond` holds or `timeout` passes.
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

extern "C" fn teardown() {
    let pid = DAEMON_PID.load(Ordering::SeqCst);
    let mnt = MNT.lock().ok().and_then(|m| m.clone());
    if pid > 0 {
        // SAFETY: plain signal to our own child.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    if let Some(mnt) = mnt {
        if !wait_for(Duration::from_secs(15), || !is_mounted(&mnt)) {
            let _ = Command::new("umount").arg("-l").arg(&mnt).status();
            if pid > 0 {
                // SAFETY: as above.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
        // the shared state lives in a static and is never dropped: remove its temp dir
        // (conf and mount point) here, once nothing is mounted on it
        if !is_mounted(&mnt) {
            if let Some(dir) = mnt.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

fn start() -> Shared {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("test runtime");
    let (cluster, fs) = rt.block_on(async {
        let cluster = MiniCluster::builder()
            .workers(1)
            .start()
            .await
            .expect("start MiniCluster");
        let fs = CurvineFs::connect(cluster.client_conf())
            .await
            .expect("connect");
        (cluster, fs)
    });
    let dir = tempfile::Builder::new()
        .prefix("curvine-fuse-test-")
        .tempdir()
        .expect("temp dir");
    // others (the unprivileged tests) must reach the mount point
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir mnt");
    let conf_file = dir.path().join("cluster.toml");
    // extra [fuse] lines run the suites on another kind of mount, e.g.
    // CURVINE_FUSE_TEST_CONF='writeback_cache = true'
    let extra = std::env::var("CURVINE_FUSE_TEST_CONF").unwrap_or_default();
    write_conf(&cluster, &conf_file, &extra);
    *MNT.lock().expect("mnt lock") = Some(mnt.clone());
    // SAFETY: registering a plain extern "C" fn.
    unsafe {
        libc::atexit(teardown);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let conf_file = conf_file.clone();
        let mnt = mnt.clone();
        std::thread::spawn(move || {
            let child = spawn_daemon(&conf_file, &mnt, &[]);
            let _ = tx.send(child.id() as i32);
            let mut child = child;
            let _ = child.wait();
        });
    }
    let pid = rx.recv().expect("daemon pid");
    DAEMON_PID.store(pid, Ordering::SeqCst);
    assert!(
        wait_for(Duration::from_secs(20), || is_mounted(&mnt)),
        "curvine-fuse did not mount {}",
        mnt.display()
    );
    Shared {
        rt,
        cluster,
        fs,
        mnt,
        conf_file,
        _dir: dir,
    }
}

pub fn shared() -> &'static Shared {
    SHARED.get_or_init(start)
}

/// A fresh directory on the mount for one test: (path on the mount, Curvine path).
pub fn test_dir(name: &str) -> (PathBuf, String) {
    let s = shared();
    let p = s.mnt.join(name);
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir(&p).expect("mkdir test dir");
    (p, format!("/{name}"))
}

/// Deterministic test data.
pub fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The errno of an io::Error.
pub fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// Run `sh -c script` in `dir`; panics with the output on failure.
pub fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "`{script}` failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Run `sh -c script` as user/group 65534 (nobody); returns (success, stdout+stderr).
pub fn sh_as_nobody(dir: &Path, script: &str) -> (bool, String) {
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .current_dir(dir)
        .output()
        .expect("run setpriv");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Run `sh -c script` in `dir` as `uid`/`gid` with supplementary `groups` (none when
/// empty); returns (success, stdout+stderr).
pub fn sh_as(uid: u32, gid: u32, groups: &[u32], dir: &Path, script: &str) -> (bool, String) {
    let groups_arg = if groups.is_empty() {
        "--clear-groups".to_string()
    } else {
        let list: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        format!("--groups={}", list.join(","))
    };
    let out = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg(groups_arg)
        .args(["sh", "-c", script])
        .current_dir(dir)
        .output()
        .expect("run setpriv");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}
