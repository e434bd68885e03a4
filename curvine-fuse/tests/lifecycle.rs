//! Daemon lifecycle: SIGTERM unmounts cleanly; after kill -9 the dead mount is detected
//! and replaced by the next start; --read-only refuses writes with EROFS.

#![allow(unsafe_code)]

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use common::{data, errno_of, is_mounted, shared, spawn_daemon, wait_for, write_conf};

/// A daemon of this test; stopped (and its mount detached) even when the test fails.
struct Daemon {
    child: Option<Child>,
    mnt: PathBuf,
}

impl Daemon {
    fn start(mnt: &Path, args: &[&str]) -> Daemon {
        Daemon::start_with(&shared().conf_file, mnt, args)
    }

    fn start_with(conf: &Path, mnt: &Path, args: &[&str]) -> Daemon {
        let child = spawn_daemon(conf, mnt, args);
        let d = Daemon {
            child: Some(child),
            mnt: mnt.to_path_buf(),
        };
        assert!(
            wait_for(Duration::from_secs(20), || is_mounted(mnt)
                && fs::read_dir(mnt).is_ok()),
            "no mount at {}",
            mnt.display()
        );
        d
    }

    fn signal(&self, sig: i32) {
        if let Some(c) = &self.child {
            // SAFETY: a signal to our own child.
            unsafe {
                libc::kill(c.id() as i32, sig);
            }
        }
    }

    fn wait(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        for _ in 0..1000 {
            if let Ok(Some(st)) = c.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        c.wait().ok()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.signal(libc::SIGTERM);
            self.wait();
        }
        if is_mounted(&self.mnt) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.mnt)
                .status();
        }
    }
}

fn fresh_mount_point(name: &str) -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let mnt = t.path().join(name);
    fs::create_dir(&mnt).unwrap();
    (t, mnt)
}

#[test]
fn sigterm_unmounts_and_kill_9_leaves_a_replaceable_mount() {
    let (_t, mnt) = fresh_mount_point("m");
    let mut d = Daemon::start(&mnt, &[]);
    fs::create_dir_all(mnt.join("lifecycle")).unwrap();
    fs::write(mnt.join("lifecycle/f"), b"survives").unwrap();

    d.signal(libc::SIGKILL);
    d.wait();
    let err = fs::read_dir(&mnt).unwrap_err();
    assert_eq!(
        errno_of(&err),
        libc::ENOTCONN,
        "a dead mount is left behind"
    );

    let mut d = Daemon::start(&mnt, &[]);
    assert_eq!(fs::read(mnt.join("lifecycle/f")).unwrap(), b"survives");

    d.signal(libc::SIGTERM);
    let st = d.wait().expect("daemon exit status");
    assert!(st.success(), "clean exit on SIGTERM: {st:?}");
    assert!(!is_mounted(&mnt), "unmounted on SIGTERM");
}

#[test]
fn read_only_mount_refuses_writes() {
    let (_t, mnt) = fresh_mount_point("ro");
    fs::create_dir_all(shared().mnt.join("ro-src")).unwrap();
    fs::write(shared().mnt.join("ro-src/f"), b"ro").unwrap();
    let _d = Daemon::start(&mnt, &["--read-only", "--fs-path", "/ro-src"]);
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"ro");
    let err = fs::write(mnt.join("g"), b"x").unwrap_err();
    assert_eq!(errno_of(&err), libc::EROFS);
    let err = fs::OpenOptions::new()
        .write(true)
        .open(mnt.join("f"))
        .unwrap_err();
    assert_eq!(errno_of(&err), libc::EROFS);
}

/// A mount of the shared cluster at a fresh mount point `name`, with `fuse_lines` in its
/// conf's `[fuse]` section; the temp dir holds the mount point and the conf.
fn mount_with(name: &str, fuse_lines: &str) -> (tempfile::TempDir, PathBuf, Daemon) {
    let (t, mnt) = fresh_mount_point(name);
    let conf = t.path().join(format!("{name}.toml"));
    write_conf(&shared().cluster, &conf, fuse_lines);
    let d = Daemon::start_with(&conf, &mnt, &[]);
    (t, mnt, d)
}

/// A read-only mapping (`flags`: MAP_SHARED or MAP_PRIVATE) of the first `len` bytes of
/// `f`; MAP_FAILED when the kernel refuses. The caller unmaps it.
fn map_file(f: &fs::File, len: usize, flags: i32) -> *mut libc::c_void {
    use std::os::fd::AsRawFd;
    // SAFETY: a new mapping of an open file; nothing aliases it until the caller uses it.
    unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            flags,
            f.as_raw_fd(),
            0,
        )
    }
}

/// Pages of `path` in the kernel's page cache, and the file's pages in all.
fn resident_pages(path: &Path) -> (usize, usize) {
    let f = fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    let page = 4096;
    let pages = len.div_ceil(page);
    let mut vec = vec![0u8; pages];
    let p = map_file(&f, len, libc::MAP_SHARED);
    assert_ne!(p, libc::MAP_FAILED, "mmap {}", path.display());
    // SAFETY: `p` maps `len` bytes of a file we hold open and is unmapped before return;
    // mincore writes one byte per page into `vec`, which has one per page.
    unsafe {
        let rc = libc::mincore(p, len, vec.as_mut_ptr());
        libc::munmap(p, len);
        assert_eq!(rc, 0, "mincore");
    }
    (vec.iter().filter(|b| *b & 1 == 1).count(), pages)
}

#[test]
fn writeback_mount_keeps_written_pages_for_the_first_read() {
    let (_t, mnt, _d) = mount_with("wb", "writeback_cache = true");
    fs::create_dir_all(mnt.join("wb")).unwrap();
    let p = mnt.join("wb/f");
    let body = data(4 << 20, 17);
    fs::write(&p, &body).unwrap();
    // the open that follows the write is answered with FOPEN_KEEP_CACHE: the kernel's
    // pages of the write are the file, so none are dropped
    // (an invalidation drops them all; memory reclaim on a busy machine may take a few
    // clean pages on its own, as it did once in CI: 1,023 of 1,024)
    let (resident, pages) = resident_pages(&p);
    assert!(
        resident * 10 >= pages * 9,
        "pages kept after the write: {resident} of {pages}"
    );
    assert!(fs::read(&p).unwrap() == body);
    let cv = shared()
        .rt
        .block_on(shared().fs.read_file("/wb/f"))
        .unwrap();
    assert!(cv == body, "the cluster holds what was written");
}

#[test]
fn direct_io_mount_reads_through_the_daemon() {
    use std::io::{Seek, SeekFrom, Write};
    use std::os::unix::fs::FileExt;

    let (_t, mnt, _d) = mount_with("dio", "direct_io = true");
    fs::create_dir_all(mnt.join("dio")).unwrap();
    let p = mnt.join("dio/f");
    // more than one 8 MiB block, an odd tail
    let mut body = data((9 << 20) + 4321, 23);
    fs::write(&p, &body).unwrap();
    assert!(fs::read(&p).unwrap() == body, "whole file");
    let f = fs::File::open(&p).unwrap();
    let mut rng = 7u64;
    for _ in 0..200 {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let off = (rng >> 33) as usize % body.len();
        let len = 1 + (rng >> 11) as usize % (3 << 20);
        let mut buf = vec![0u8; len];
        let n = f.read_at(&mut buf, off as u64).unwrap();
        // a direct read returns what the daemon sent: all of it, short only at the end
        assert_eq!(n, len.min(body.len() - off), "read of {len} at {off}");
        assert!(buf[..n] == body[off..off + n], "read of {len} at {off}");
    }

    // a read-only handle sees what another handle of this mount wrote before close
    let mut w = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    w.seek(SeekFrom::Start(5 << 20)).unwrap();
    w.write_all(b"written in place").unwrap();
    body[5 << 20..(5 << 20) + 16].copy_from_slice(b"written in place");
    let mut buf = vec![0u8; 64];
    f.read_exact_at(&mut buf, (5 << 20) - 24).unwrap();
    assert!(
        buf[..] == body[(5 << 20) - 24..(5 << 20) + 40],
        "unflushed write"
    );
    drop(w);

    // the documented cost: no shared mapping of a read-only handle; a private one works
    let len = body.len();
    let shared_map = map_file(&f, len, libc::MAP_SHARED);
    assert_eq!(
        shared_map,
        libc::MAP_FAILED,
        "MAP_SHARED of a direct-I/O handle"
    );
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENODEV)
    );
    let private = map_file(&f, len, libc::MAP_PRIVATE);
    assert_ne!(private, libc::MAP_FAILED, "MAP_PRIVATE");
    // SAFETY: `private` maps `len` readable bytes until the munmap below.
    unsafe {
        let view = std::slice::from_raw_parts(private as *const u8, len);
        let same = view == &body[..];
        libc::munmap(private, len);
        assert!(same, "the private mapping holds the file");
    }
}
