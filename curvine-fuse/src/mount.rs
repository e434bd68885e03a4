//! Mounting: the mount point (stale mounts from a crashed daemon are lazily unmounted
//! first), fuse3 mount options from `[fuse]`, and kernel read-ahead for the new mount.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use fuse3::raw::{MountHandle, Session};
use tracing::{info, warn};

use crate::fs::CurvineFuse;

/// Kernel read-ahead for the mount (KiB): several 1 MiB reads in flight per stream.
const READ_AHEAD_KB: u32 = 8192;

/// Mount entries (mount point, fs type) from /proc/self/mountinfo.
fn mounts() -> Vec<(PathBuf, String)> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            let point = unescape(f.get(4)?);
            let fstype = f.get(sep + 1)?.to_string();
            Some((PathBuf::from(point), fstype))
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as \ooo.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether a FUSE file system is mounted at `dir`.
pub fn is_fuse_mounted(dir: &Path) -> bool {
    mounts()
        .iter()
        .any(|(p, t)| p == dir && (t == "fuse" || t.starts_with("fuse.")))
}

/// Lazily unmount whatever FUSE mount sits at `dir`.
pub fn lazy_unmount(dir: &Path) -> anyhow::Result<()> {
    let ok = Command::new("fusermount3")
        .arg("-uz")
        .arg(dir)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if ok {
        return Ok(());
    }
    let ok = Command::new("umount")
        .arg("-l")
        .arg(dir)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        bail!("cannot unmount {}", dir.display())
    }
}

/// Make `dir` ready to mount on: create it, and replace a dead mount ("Transport
/// endpoint is not connected") left by a crashed daemon. A live mount is an error.
pub fn prepare_mount_point(dir: &Path) -> anyhow::Result<PathBuf> {
    match std::fs::metadata(dir) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            warn!(dir = %dir.display(), "stale FUSE mount found, unmounting it");
            lazy_unmount(dir)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("create mount point {}", dir.display()))?;
        }
        Err(e) => return Err(e).with_context(|| format!("mount point {}", dir.display())),
        Ok(m) if !m.is_dir() => bail!("mount point {} is not a directory", dir.display()),
        Ok(_) => {}
    }
    let dir = dir
        .canonicalize()
        .with_context(|| format!("mount point {}", dir.display()))?;
    if is_fuse_mounted(&dir) {
        // alive (stat worked): probably another daemon serving it
        if std::fs::read_dir(&dir).is_err() {
            lazy_unmount(&dir)?;
        } else {
            bail!(
                "{} is already mounted (stop the other curvine-fuse first)",
                dir.display()
            );
        }
    }
    Ok(dir)
}

/// Mount `fuse` at `dir`. With `fusermount3` on the PATH the mount goes through it:
/// fuse3 then serves /dev/fuse non-blocking on the runtime, where the direct (root)
/// mount reads every request in a `spawn_blocking` hop. Without it, the direct mount.
pub async fn mount(fuse: CurvineFuse, dir: &Path) -> anyhow::Result<MountHandle> {
    let o = &fuse.opts;
    let mut mo = fuse3::MountOptions::default();
    mo.fs_name("curvine")
        .allow_other(true)
        .default_permissions(true)
        .read_only(o.read_only)
        .write_back(o.writeback_cache)
        .force_readdir_plus(true);
    let fuse = crate::metered::Metered(fuse);
    let session = Session::new(mo);
    let handle = if have_fusermount3() {
        session.mount_with_unprivileged(fuse, dir).await
    } else {
        session.mount(fuse, dir).await
    }
    .with_context(|| format!("mount {}", dir.display()))?;
    info!(dir = %dir.display(), "mounted");
    Ok(handle)
}

fn have_fusermount3() -> bool {
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|d| d.join("fusermount3").is_file())
}

/// Raise the kernel's read-ahead for the mount at `dir` (best effort, needs root).
pub fn tune_read_ahead(dir: &Path) {
    let Ok(m) = std::fs::metadata(dir) else {
        return;
    };
    let dev = m.dev();
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let p = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
    match std::fs::write(&p, READ_AHEAD_KB.to_string()) {
        Ok(()) => info!(path = %p, kb = READ_AHEAD_KB, "read-ahead set"),
        Err(e) => warn!(path = %p, error = %e, "cannot set read-ahead"),
    }
}

/// The descriptor this process reads FUSE requests from. fuse3 keeps it private, so it
/// is found among the process's open files; a daemon serves one mount, so there is one.
pub fn fuse_device_fd() -> Option<i32> {
    let dev = Path::new("/dev/fuse");
    std::fs::read_dir("/proc/self/fd")
        .ok()?
        .flatten()
        .find(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == dev))
        .and_then(|e| e.file_name().to_str()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fuse_device_is_found_among_open_files() {
        assert_eq!(fuse_device_fd(), None);
        let f = std::fs::File::open("/dev/fuse").expect("open /dev/fuse (tests run as root)");
        assert_eq!(fuse_device_fd(), Some(std::os::fd::AsRawFd::as_raw_fd(&f)));
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape(r"/x\134y"), r"/x\y");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape(r"/end\04"), r"/end\04");
    }

    #[test]
    fn root_is_not_fuse() {
        assert!(!is_fuse_mounted(Path::new("/")));
    }
}
