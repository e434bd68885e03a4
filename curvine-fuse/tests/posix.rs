//! POSIX behaviour through a real mount: data (sequential, append, truncate, random
//! writes compared with a local file), namespace calls, attributes, xattrs, directory
//! listing, errnos and permissions as an unprivileged user.

#![allow(unsafe_code)]

mod common;

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;

use common::{
    data, errno_of, is_mounted, sh, sh_as_nobody, shared, spawn_daemon, test_dir, wait_for,
    write_conf,
};
use rand::{Rng, SeedableRng};

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL in path")
}

fn curvine_read(path: &str) -> Vec<u8> {
    let s = shared();
    s.rt.block_on(s.fs.read_file(path))
        .expect("read through the client")
}

#[test]
fn write_then_read_back_and_through_the_client() {
    let (dir, cv) = test_dir("rw");
    let body = data(3 << 20 | 123, 1);
    fs::write(dir.join("f"), &body).unwrap();
    assert_eq!(
        fs::metadata(dir.join("f")).unwrap().len(),
        body.len() as u64
    );
    assert_eq!(fs::read(dir.join("f")).unwrap(), body);
    // close-to-open: the native client sees the closed file
    assert_eq!(curvine_read(&format!("{cv}/f")), body);
    // empty file
    File::create(dir.join("empty")).unwrap();
    assert_eq!(fs::read(dir.join("empty")).unwrap(), b"");
}

/// Pages kept across opens (`fuse.keep_cache`) never hide a change made elsewhere: a
/// file rewritten in place by another client, same length and same inode, reads back
/// new on the next open, also after this mount wrote it or read it twice.
#[test]
fn directory_times_follow_changes_here_and_elsewhere() {
    let (dir, cv) = test_dir("dirtimes");
    let s = shared();
    let master = |p: &str| {
        let st = s.rt.block_on(s.fs.stat(p)).unwrap();
        (st.mtime_ms, st.ctime_ms)
    };
    let mount = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        (
            m.mtime() * 1000 + m.mtime_nsec() / 1_000_000,
            m.ctime() * 1000 + m.ctime_nsec() / 1_000_000,
        )
    };
    fs::metadata(&dir).unwrap();
    // the mount answers the directory's attributes itself after its own creates
    for i in 0..20 {
        File::create(dir.join(format!("f{i}"))).unwrap();
        assert_eq!(mount(&dir), master(&cv), "after create {i}");
    }
    fs::create_dir(dir.join("sub")).unwrap();
    assert_eq!(mount(&dir), master(&cv), "after mkdir");
    std::os::unix::fs::symlink("f2", dir.join("ln")).unwrap();
    assert_eq!(mount(&dir), master(&cv), "after symlink");
    fs::remove_file(dir.join("f0")).unwrap();
    assert_eq!(mount(&dir), master(&cv), "after unlink");
    for i in 5..15 {
        fs::remove_file(dir.join(format!("f{i}"))).unwrap();
        assert_eq!(mount(&dir), master(&cv), "after unlink {i}");
    }
    fs::remove_dir(dir.join("sub")).unwrap();
    assert_eq!(mount(&dir), master(&cv), "after rmdir");
    fs::rename(dir.join("f1"), dir.join("g1")).unwrap();
    assert_eq!(mount(&dir), master(&cv), "after rename");
    let other = dir.join("other");
    fs::create_dir(&other).unwrap();
    let other_cv = format!("{cv}/other");
    fs::metadata(&other).unwrap();
    fs::rename(dir.join("g1"), other.join("g1")).unwrap();
    assert_eq!(mount(&dir), master(&cv), "after a rename out of it");
    assert_eq!(
        mount(&other),
        master(&other_cv),
        "the other side of that rename"
    );
    fs::hard_link(dir.join("f3"), dir.join("h3")).unwrap();
    assert_eq!(mount(&dir), master(&cv), "after link");
    // a change made by another client shows once the mount hears of it from the master
    // (the kernel keeps attributes for the default attr_ttl, 30 s)
    File::create(dir.join("f4")).unwrap();
    s.rt.block_on(s.fs.write_file(&format!("{cv}/elsewhere"), b"x"))
        .unwrap();
    let want = master(&cv);
    assert!(
        common::wait_for(std::time::Duration::from_secs(5), || mount(&dir) == want),
        "the directory's times after a create elsewhere: {:?} vs {want:?}",
        mount(&dir)
    );
}

/// Closing a file that was created and never written changes none of its times: the
/// times the kernel kept from the create stay true, so a refused truncate that follows
/// sees the same ctime however late the mount hears of the close.
#[test]
fn closing_an_unwritten_new_file_keeps_its_times() {
    let (dir, cv) = test_dir("unwritten");
    let s = shared();
    let ms = |m: &fs::Metadata| {
        (
            m.mtime() * 1000 + m.mtime_nsec() / 1_000_000,
            m.ctime() * 1000 + m.ctime_nsec() / 1_000_000,
        )
    };
    let now_ms = curvine_common::types::now_ms;
    for i in 0..5 {
        let p = dir.join(format!("f{i}"));
        let f = File::create(&p).unwrap();
        let open = ms(&f.metadata().unwrap());
        // the close comes in a later millisecond than the create
        assert!(wait_for(std::time::Duration::from_secs(5), || now_ms() > open.1 + 2));
        drop(f);
        let st = s.rt.block_on(s.fs.stat(&format!("{cv}/f{i}"))).unwrap();
        assert_eq!((st.mtime_ms, st.ctime_ms), open, "file {i}");
        assert_eq!(ms(&fs::metadata(&p).unwrap()), open, "file {i}");
    }
}

#[test]
fn kept_pages_follow_changes_made_elsewhere() {
    let (dir, cv) = test_dir("keep");
    let s = shared();
    let p = dir.join("f");
    let cvp = format!("{cv}/f");
    let ino = |p: &Path| fs::metadata(p).unwrap().ino();
    let v1 = data(1 << 20, 21);
    let mut f = File::create(&p).unwrap();
    f.write_all(&v1).unwrap();
    let written = f.metadata().unwrap().modified().unwrap();
    drop(f);
    // the mtime of the last write stays the file's after close (kept pages survive it)
    assert_eq!(fs::metadata(&p).unwrap().modified().unwrap(), written);
    let first = ino(&p);
    for round in 0..3u64 {
        // read it twice: the second open may keep the pages of the first
        let want = if round == 0 {
            v1.clone()
        } else {
            data(1 << 20, 21 + round)
        };
        assert!(fs::read(&p).unwrap() == want, "round {round}: first read");
        assert!(fs::read(&p).unwrap() == want, "round {round}: second read");
        // another client rewrites the file in place: same length, same inode
        let next = data(1 << 20, 22 + round);
        s.rt.block_on(async {
            s.fs.truncate(&cvp, 0).await?;
            let mut w = s.fs.append(&cvp).await?;
            w.write(&next).await?;
            w.close().await.map(drop)
        })
        .unwrap();
        assert_eq!(ino(&p), first, "the client kept the inode");
        let mut got = Vec::new();
        File::open(&p).unwrap().read_to_end(&mut got).unwrap();
        assert!(
            got == next,
            "round {round}: the open after the change reads it"
        );
    }
}

#[test]
fn append_mode_and_o_trunc() {
    let (dir, _) = test_dir("append");
    let p = dir.join("log");
    for i in 0..5 {
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .unwrap();
        writeln!(f, "line {i}").unwrap();
    }
    assert_eq!(
        fs::read_to_string(&p).unwrap(),
        "line 0\nline 1\nline 2\nline 3\nline 4\n"
    );
    let mut f = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    f.write_all(b"short").unwrap();
    drop(f);
    assert_eq!(fs::read(&p).unwrap(), b"short");
    // O_TRUNC without a write empties the file
    OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    assert_eq!(fs::metadata(&p).unwrap().len(), 0);
}

#[test]
fn o_excl_and_create_existing() {
    let (dir, _) = test_dir("excl");
    let p = dir.join("x");
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&p)
        .unwrap();
    let err = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&p)
        .unwrap_err();
    assert_eq!(errno_of(&err), libc::EEXIST);
    fs::write(&p, b"abc").unwrap();
    // O_CREAT without O_EXCL opens the existing file, keeping its content
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&p)
        .unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "abc");
}

#[test]
fn read_sees_unclosed_writes_of_another_handle() {
    let (dir, _) = test_dir("raw");
    let p = dir.join("f");
    let mut w = File::create(&p).unwrap();
    w.write_all(b"hello ").unwrap();
    let mut r = File::open(&p).unwrap();
    let mut s = String::new();
    r.read_to_string(&mut s).unwrap();
    assert_eq!(s, "hello ");
    w.write_all(b"world").unwrap();
    // overwrite in place through the writer, then read through a new handle
    w.write_all_at(b"J", 0).unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"Jello world");
    assert_eq!(fs::metadata(&p).unwrap().len(), 11);
    drop(w);
    assert_eq!(fs::read(&p).unwrap(), b"Jello world");
}

/// A write-only handle bypasses the kernel's page cache; a reader holding cached pages
/// of the same file must still see its appends and overwrites (the kernel drops the
/// pages a direct write covers), as must a reader that opens afterwards.
#[test]
fn reader_with_cached_pages_sees_a_write_only_handle() {
    let (dir, _) = test_dir("wronly");
    let p = dir.join("f");
    let first = data(10_000, 41);
    let mut w = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    w.write_all(&first).unwrap();
    let r = File::open(&p).unwrap();
    let mut buf = vec![0u8; 64 << 10];
    let n = r.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..n], &first[..], "first read");

    let more = data(5_000, 42);
    w.write_all(&more).unwrap();
    w.write_all_at(b"overwritten", 4_100).unwrap();
    let mut want = first.clone();
    want.extend_from_slice(&more);
    want[4_100..4_111].copy_from_slice(b"overwritten");
    let n = r.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..n], &want[..], "the same reader, before close");
    drop(w);
    let n = r.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..n], &want[..], "the same reader, after close");
    assert_eq!(fs::read(&p).unwrap(), want, "a new reader");
}

/// Random writes (inside, across and past the end), reads and truncates on the mount and
/// on a local file; every read and the final content must match byte for byte.
#[test]
fn random_workload_matches_a_local_file() {
    let (dir, cv) = test_dir("random");
    let local_dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mp = dir.join("f");
    let lp = local_dir.path().join("f");
    let initial = data(300_000, 3);
    fs::write(&mp, &initial).unwrap();
    fs::write(&lp, &initial).unwrap();
    for round in 0..4 {
        let mut m = OpenOptions::new().read(true).write(true).open(&mp).unwrap();
        let mut l = OpenOptions::new().read(true).write(true).open(&lp).unwrap();
        for step in 0..60 {
            let len = l.metadata().unwrap().len();
            match rng.gen_range(0..10) {
                0..=4 => {
                    let off = rng.gen_range(0..len + 70_000);
                    let n = rng.gen_range(1..40_000);
                    let buf = data(n, round * 1000 + step);
                    m.write_all_at(&buf, off).unwrap();
                    l.write_all_at(&buf, off).unwrap();
                }
                5..=7 => {
                    let off = rng.gen_range(0..len + 10);
                    let n = rng.gen_range(1..100_000);
                    let mut a = vec![0u8; n];
                    let mut b = vec![0u8; n];
                    let ka = m.read_at(&mut a, off).unwrap();
                    let kb = l.read_at(&mut b, off).unwrap();
                    assert_eq!(ka, kb, "read length at {off} (round {round} step {step})");
                    assert!(
                        a[..ka] == b[..kb],
                        "read content at {off} (round {round} step {step})"
                    );
                }
                8 => {
                    let n = rng.gen_range(0..len + 50_000);
                    m.set_len(n).unwrap();
                    l.set_len(n).unwrap();
                }
                _ => {
                    // sequential append at the end
                    let buf = data(rng.gen_range(1..200_000), step);
                    m.seek(SeekFrom::End(0)).unwrap();
                    l.seek(SeekFrom::End(0)).unwrap();
                    m.write_all(&buf).unwrap();
                    l.write_all(&buf).unwrap();
                }
            }
            assert_eq!(m.metadata().unwrap().len(), l.metadata().unwrap().len());
        }
        if round % 2 == 0 {
            m.sync_all().unwrap();
        }
    }
    let want = fs::read(&lp).unwrap();
    assert!(
        fs::read(&mp).unwrap() == want,
        "final content through the mount"
    );
    assert!(
        curvine_read(&format!("{cv}/f")) == want,
        "final content in Curvine"
    );
}

#[test]
fn sparse_write_past_the_end_reads_zeros() {
    let (dir, _) = test_dir("sparse");
    let p = dir.join("f");
    let f = File::create(&p).unwrap();
    f.write_all_at(b"end", 5_000_000).unwrap();
    drop(f);
    let got = fs::read(&p).unwrap();
    assert_eq!(got.len(), 5_000_003);
    assert!(got[..5_000_000].iter().all(|b| *b == 0));
    assert_eq!(&got[5_000_000..], b"end");
    // extend with truncate
    let f = OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(5_000_010).unwrap();
    drop(f);
    let got = fs::read(&p).unwrap();
    assert_eq!(&got[5_000_000..], b"end\0\0\0\0\0\0\0");
}

#[test]
fn namespace_calls_and_errnos() {
    let (dir, _) = test_dir("ns");
    fs::create_dir(dir.join("d")).unwrap();
    fs::write(dir.join("d/f"), b"x").unwrap();
    let err = fs::create_dir(dir.join("d")).unwrap_err();
    assert_eq!(errno_of(&err), libc::EEXIST);
    let err = File::open(dir.join("missing")).unwrap_err();
    assert_eq!(errno_of(&err), libc::ENOENT);
    let err = fs::create_dir(dir.join("d/f/sub")).unwrap_err();
    assert_eq!(errno_of(&err), libc::ENOTDIR);
    let err = OpenOptions::new()
        .write(true)
        .open(dir.join("d"))
        .unwrap_err();
    assert_eq!(errno_of(&err), libc::EISDIR);
    let err = fs::remove_dir(dir.join("d")).unwrap_err();
    assert_eq!(errno_of(&err), libc::ENOTEMPTY);
    let err = fs::remove_dir(dir.join("d/f")).unwrap_err();
    assert_eq!(errno_of(&err), libc::ENOTDIR);
    let err = fs::remove_file(dir.join("d")).unwrap_err();
    assert_eq!(errno_of(&err), libc::EISDIR);
    let long = "n".repeat(256);
    let err = fs::write(dir.join(&long), b"x").unwrap_err();
    assert_eq!(errno_of(&err), libc::ENAMETOOLONG);
    let ok = "n".repeat(255);
    fs::write(dir.join(&ok), b"x").unwrap();
    assert_eq!(fs::read(dir.join(&ok)).unwrap(), b"x");

    fs::rename(dir.join("d/f"), dir.join("g")).unwrap();
    assert!(!dir.join("d/f").exists());
    assert_eq!(fs::read(dir.join("g")).unwrap(), b"x");
    // rename a directory with content, then use the new paths
    fs::write(dir.join("d/inner"), b"in").unwrap();
    fs::rename(dir.join("d"), dir.join("e")).unwrap();
    assert_eq!(fs::read(dir.join("e/inner")).unwrap(), b"in");
    fs::remove_file(dir.join("e/inner")).unwrap();
    fs::remove_dir(dir.join("e")).unwrap();
    assert!(!dir.join("e").exists());
}

fn renameat2(from: &Path, to: &Path, flags: u32) -> std::io::Result<()> {
    let (a, b) = (cpath(from), cpath(to));
    // SAFETY: valid NUL-terminated paths; AT_FDCWD.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn rename_noreplace_and_exchange() {
    let (dir, _) = test_dir("rename2");
    fs::write(dir.join("a"), b"A").unwrap();
    fs::write(dir.join("b"), b"B").unwrap();
    let err = renameat2(&dir.join("a"), &dir.join("b"), libc::RENAME_NOREPLACE).unwrap_err();
    assert_eq!(errno_of(&err), libc::EEXIST);
    renameat2(&dir.join("a"), &dir.join("b"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(fs::read(dir.join("a")).unwrap(), b"B");
    assert_eq!(fs::read(dir.join("b")).unwrap(), b"A");
    renameat2(&dir.join("a"), &dir.join("c"), libc::RENAME_NOREPLACE).unwrap();
    assert_eq!(fs::read(dir.join("c")).unwrap(), b"B");
    // plain rename replaces
    fs::rename(dir.join("c"), dir.join("b")).unwrap();
    assert_eq!(fs::read(dir.join("b")).unwrap(), b"B");
    assert!(!dir.join("c").exists());
}

#[test]
fn symlink_readlink_and_hard_link() {
    let (dir, _) = test_dir("links");
    fs::write(dir.join("t"), b"target").unwrap();
    std::os::unix::fs::symlink("t", dir.join("s")).unwrap();
    assert_eq!(fs::read_link(dir.join("s")).unwrap(), Path::new("t"));
    assert!(fs::symlink_metadata(dir.join("s"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(fs::read(dir.join("s")).unwrap(), b"target");
    fs::hard_link(dir.join("t"), dir.join("h")).unwrap();
    assert_eq!(fs::metadata(dir.join("t")).unwrap().nlink(), 2);
    assert_eq!(
        fs::metadata(dir.join("t")).unwrap().ino(),
        fs::metadata(dir.join("h")).unwrap().ino()
    );
    fs::remove_file(dir.join("t")).unwrap();
    assert_eq!(fs::read(dir.join("h")).unwrap(), b"target");
}

#[test]
fn chmod_chown_utimens() {
    let (dir, _) = test_dir("attrs");
    let p = dir.join("f");
    fs::write(&p, b"x").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o4750)).unwrap();
    assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o4750);
    std::os::unix::fs::chown(&p, Some(1234), Some(5678)).unwrap();
    let m = fs::metadata(&p).unwrap();
    assert_eq!((m.uid(), m.gid()), (1234, 5678));
    let c = cpath(&p);
    let times = [
        libc::timespec {
            tv_sec: 1_000_000,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
    ];
    // SAFETY: valid path and two timespecs.
    assert_eq!(
        unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) },
        0
    );
    let m = fs::metadata(&p).unwrap();
    assert_eq!(m.atime(), 1_000_000);
    assert!(m.mtime() > 1_600_000_000, "mtime untouched by UTIME_OMIT");
    let times = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: 2_000_000,
            tv_nsec: 500_000_000,
        },
    ];
    // SAFETY: as above.
    assert_eq!(
        unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) },
        0
    );
    let m = fs::metadata(&p).unwrap();
    assert_eq!(m.mtime(), 2_000_000);
    assert_eq!(m.mtime_nsec(), 500_000_000);
    assert_eq!(m.atime(), 1_000_000);
    // futimens on a file still being written keeps the times past close (cp -p does this)
    let q = dir.join("g");
    let f = File::create(&q).unwrap();
    (&f).write_all(b"data").unwrap();
    f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(3_000_000))
        .unwrap();
    drop(f);
    let m = fs::metadata(&q).unwrap();
    assert_eq!(m.mtime(), 3_000_000);
    assert_eq!(m.len(), 4);
}

#[test]
fn statfs_reports_capacity() {
    let s = shared();
    let c = cpath(&s.mnt);
    // SAFETY: zeroed statvfs is a valid out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid path and out-parameter.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    assert!(st.f_blocks > 0, "capacity is reported");
    assert!(st.f_bfree <= st.f_blocks);
    assert_eq!(st.f_namemax, 255);
}

fn xattr_get(p: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    let (c, n) = (cpath(p), CString::new(name).unwrap());
    let mut buf = vec![0u8; 256];
    // SAFETY: valid strings and buffer.
    let r = unsafe { libc::getxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

#[test]
fn xattrs_set_get_list_remove() {
    let (dir, _) = test_dir("xattr");
    let p = dir.join("f");
    fs::write(&p, b"x").unwrap();
    let (c, n) = (cpath(&p), CString::new("user.color").unwrap());
    // SAFETY: valid strings and value.
    let r = unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), b"blue".as_ptr().cast(), 4, 0) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    assert_eq!(xattr_get(&p, "user.color").unwrap(), b"blue");
    // SAFETY: as above; XATTR_CREATE on an existing name fails.
    let r = unsafe {
        libc::setxattr(
            c.as_ptr(),
            n.as_ptr(),
            b"red".as_ptr().cast(),
            3,
            libc::XATTR_CREATE,
        )
    };
    assert_eq!(r, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EEXIST)
    );
    let mut buf = vec![0u8; 256];
    // SAFETY: valid path and buffer.
    let r = unsafe { libc::listxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r > 0);
    assert_eq!(&buf[..r as usize], b"user.color\0");
    // SAFETY: valid strings.
    assert_eq!(unsafe { libc::removexattr(c.as_ptr(), n.as_ptr()) }, 0);
    let err = xattr_get(&p, "user.color").unwrap_err();
    assert_eq!(errno_of(&err), libc::ENODATA);
}

#[test]
fn readdir_and_ls() {
    let (dir, _) = test_dir("list");
    for i in 0..120 {
        fs::write(dir.join(format!("file-{i:03}")), format!("{i}")).unwrap();
    }
    fs::create_dir(dir.join("sub")).unwrap();
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 121);
    assert_eq!(names[0], "file-000");
    assert_eq!(names[120], "sub");
    let out = sh(&dir, "ls -la");
    assert!(out.contains("file-119"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with('d') && l.ends_with(" sub")),
        "{out}"
    );
    assert!(out.lines().any(|l| l.ends_with(" .")), "{out}");
}

#[test]
fn fallocate_extends() {
    let (dir, _) = test_dir("falloc");
    let f = File::create(dir.join("f")).unwrap();
    f.write_all_at(b"ab", 0).unwrap();
    let c = cpath(&dir.join("f"));
    let _ = c;
    // SAFETY: valid fd.
    let r = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, 4096) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    drop(f);
    let got = fs::read(dir.join("f")).unwrap();
    assert_eq!(got.len(), 4096);
    assert_eq!(&got[..2], b"ab");
}

#[test]
fn permissions_for_an_unprivileged_user() {
    let (dir, _) = test_dir("perm");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(dir.join("secret"), b"s").unwrap();
    fs::set_permissions(dir.join("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(dir.join("public"), b"p").unwrap();
    fs::set_permissions(dir.join("public"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::create_dir(dir.join("open")).unwrap();
    fs::set_permissions(dir.join("open"), fs::Permissions::from_mode(0o777)).unwrap();
    fs::create_dir(dir.join("sticky")).unwrap();
    fs::set_permissions(dir.join("sticky"), fs::Permissions::from_mode(0o1777)).unwrap();
    fs::write(dir.join("sticky/roots"), b"r").unwrap();

    let (ok, out) = sh_as_nobody(&dir, "cat secret");
    assert!(!ok && out.contains("Permission denied"), "{out}");
    let (ok, out) = sh_as_nobody(&dir, "cat public");
    assert!(ok && out == "p", "{out}");
    let (ok, out) = sh_as_nobody(&dir, "echo x >> public");
    assert!(!ok && out.contains("Permission denied"), "{out}");
    let (ok, out) = sh_as_nobody(&dir, "touch new");
    assert!(!ok && out.contains("Permission denied"), "{out}");
    let (ok, out) = sh_as_nobody(&dir, "echo mine > open/mine && chmod 600 open/mine");
    assert!(ok, "{out}");
    let m = fs::metadata(dir.join("open/mine")).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o777), (65534, 65534, 0o600));
    let (ok, out) = sh_as_nobody(&dir, "rm -f sticky/roots");
    assert!(!ok, "sticky directory protects root's file: {out}");
    assert!(dir.join("sticky/roots").exists());
    let (ok, out) = sh_as_nobody(&dir, "chmod 777 public");
    assert!(!ok && out.contains("Operation not permitted"), "{out}");
}

/// fio's pattern: create, fallocate the full size, write from the start; an unwritten
/// tail reads back as zeros.
#[test]
fn fallocate_then_sequential_write() {
    let (dir, cv) = test_dir("layout");
    let f = File::create(dir.join("f")).unwrap();
    // SAFETY: valid fd.
    let r = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, 3 << 20) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    assert_eq!(f.metadata().unwrap().len(), 3 << 20);
    let body = data(2 << 20, 11);
    (&f).write_all(&body).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 3 << 20);
    drop(f);
    let got = curvine_read(&format!("{cv}/f"));
    assert_eq!(got.len(), 3 << 20);
    assert!(got[..2 << 20] == body[..]);
    assert!(got[2 << 20..].iter().all(|b| *b == 0));

    // fio's layout closes the preallocated file before the job reopens it and writes:
    // the preallocation is a hole (no zeros stored), and the job's writes stream into it
    let s = shared();
    let g = File::create(dir.join("g")).unwrap();
    // SAFETY: valid fd.
    let r = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&g), 0, 0, 3 << 20) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    drop(g);
    let st = s.rt.block_on(s.fs.stat(&format!("{cv}/g"))).unwrap();
    assert_eq!(
        (st.len, st.tail_zeros),
        (3 << 20, 3 << 20),
        "preallocation is a hole"
    );
    let mut g = OpenOptions::new().write(true).open(dir.join("g")).unwrap();
    g.write_all(&body).unwrap();
    assert_eq!(g.metadata().unwrap().len(), 3 << 20);
    drop(g);
    let st = s.rt.block_on(s.fs.stat(&format!("{cv}/g"))).unwrap();
    assert_eq!((st.len, st.tail_zeros), (3 << 20, 1 << 20));
    let got = fs::read(dir.join("g")).unwrap();
    assert_eq!(got.len(), 3 << 20);
    assert!(got[..2 << 20] == body[..]);
    assert!(got[2 << 20..].iter().all(|b| *b == 0));
}

#[test]
fn random_reads_across_blocks_match() {
    // 8 MiB blocks in the test cluster: five blocks and a tail, read at random through
    // two handles at once (each handle keeps one reader per block)
    let (dir, _) = test_dir("rand-blocks");
    let body = data((40 << 20) + 12_345, 11);
    fs::write(dir.join("f"), &body).unwrap();
    let a = File::open(dir.join("f")).unwrap();
    let b = File::open(dir.join("f")).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    for i in 0..400 {
        let len = rng.gen_range(1..(256 << 10));
        let off = rng.gen_range(0..body.len() as u64);
        let f = if i % 2 == 0 { &a } else { &b };
        let mut buf = vec![0u8; len];
        let n = f.read_at(&mut buf, off).unwrap();
        let end = (off as usize + len).min(body.len());
        assert_eq!(n, end - off as usize, "length at {off}+{len}");
        assert!(
            buf[..n] == body[off as usize..end],
            "content at {off}+{len}"
        );
    }
    // a rewrite is seen by the open handles' readers
    let new = data(body.len(), 12);
    fs::write(dir.join("f"), &new).unwrap();
    let mut buf = vec![0u8; 4096];
    a.read_exact_at(&mut buf, 33 << 20).unwrap();
    assert!(buf[..] == new[33 << 20..(33 << 20) + 4096]);
}

/// Names under the Curvine directory `cv`, as the client sees them (hidden ones too).
fn curvine_names(cv: &str) -> Vec<String> {
    let s = shared();
    let mut names: Vec<String> =
        s.rt.block_on(s.fs.list(cv))
            .expect("list through the client")
            .into_iter()
            .map(|st| st.name)
            .collect();
    names.sort();
    names
}

#[test]
fn unlinked_open_file_stays_usable_until_closed() {
    let (dir, cv) = test_dir("unlinked-open");
    let p = dir.join("f");
    fs::write(&p, b"keep me").unwrap();
    let rw = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    let ro = File::open(&p).unwrap();
    fs::remove_file(&p).unwrap();
    assert!(!p.exists());
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0, "the name is gone");
    assert_eq!(
        errno_of(&fs::remove_file(&p).unwrap_err()),
        libc::ENOENT,
        "unlinked twice"
    );
    // both handles still reach the data; writes through one are seen by the other
    let mut buf = [0u8; 7];
    ro.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"keep me");
    rw.write_all_at(b"!", 7).unwrap();
    let mut buf = [0u8; 8];
    rw.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"keep me!");
    ro.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"keep me!");
    // a new file under the old name is a different file
    fs::write(&p, b"new").unwrap();
    rw.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"keep me!");
    assert_eq!(fs::read(&p).unwrap(), b"new");
    drop(rw);
    drop(ro);
    // the last close removes the hidden name
    assert!(
        common::wait_for(std::time::Duration::from_secs(10), || curvine_names(&cv)
            == ["f"]),
        "left behind: {:?}",
        curvine_names(&cv)
    );
}

#[test]
fn rename_over_an_open_file_keeps_its_content_for_the_holder() {
    let (dir, cv) = test_dir("rename-over-open");
    let a = dir.join("a");
    let b = dir.join("b");
    fs::write(&a, b"old content").unwrap();
    let held = File::open(&a).unwrap();
    fs::write(&b, b"new").unwrap();
    fs::rename(&b, &a).unwrap();
    assert_eq!(fs::read(&a).unwrap(), b"new");
    assert!(!b.exists());
    let mut s = String::new();
    (&held).read_to_string(&mut s).unwrap();
    assert_eq!(s, "old content");
    // a failed rename over an open file leaves it where it was
    assert!(fs::rename(dir.join("missing"), &a).is_err());
    assert_eq!(fs::read(&a).unwrap(), b"new");
    drop(held);
    assert!(
        common::wait_for(std::time::Duration::from_secs(10), || curvine_names(&cv)
            == ["a"]),
        "left behind: {:?}",
        curvine_names(&cv)
    );
}

/// flock(2) and fcntl open-file-description locks on the mount. The mount does not ask
/// the kernel to route locks to it, so the kernel enforces them for every process on
/// this host: two open file descriptions conflict, and unlock / close releases.
#[test]
fn flock_and_fcntl_locks_exclude_each_other() {
    use std::os::fd::AsRawFd;
    let (dir, _) = test_dir("locks");
    let p = dir.join("lock");
    fs::write(&p, b"x").unwrap();
    let a = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    let b = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    // flock
    assert_eq!(
        unsafe { libc::flock(a.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    let r = unsafe { libc::flock(b.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(r, -1);
    assert_eq!(
        errno_of(&std::io::Error::last_os_error()),
        libc::EWOULDBLOCK
    );
    assert_eq!(
        unsafe { libc::flock(b.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) },
        -1
    );
    assert_eq!(unsafe { libc::flock(a.as_raw_fd(), libc::LOCK_UN) }, 0);
    assert_eq!(
        unsafe { libc::flock(b.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) },
        0
    );
    assert_eq!(
        unsafe { libc::flock(a.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) },
        0
    );
    assert_eq!(unsafe { libc::flock(a.as_raw_fd(), libc::LOCK_UN) }, 0);
    assert_eq!(unsafe { libc::flock(b.as_raw_fd(), libc::LOCK_UN) }, 0);
    // fcntl byte-range locks (OFD flavour: per open file description)
    let lk = |fd: i32, kind: i32, start: i64, len: i64| -> i32 {
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = kind as i16;
        fl.l_whence = libc::SEEK_SET as i16;
        fl.l_start = start;
        fl.l_len = len;
        let r = unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &fl) };
        if r == 0 {
            0
        } else {
            errno_of(&std::io::Error::last_os_error())
        }
    };
    assert_eq!(lk(a.as_raw_fd(), libc::F_WRLCK, 0, 10), 0);
    let busy = lk(b.as_raw_fd(), libc::F_WRLCK, 5, 10);
    assert!(busy == libc::EAGAIN || busy == libc::EACCES, "{busy}");
    assert_eq!(
        lk(b.as_raw_fd(), libc::F_WRLCK, 10, 10),
        0,
        "disjoint range"
    );
    // F_OFD_GETLK reports the holder's range
    let mut q: libc::flock = unsafe { std::mem::zeroed() };
    q.l_type = libc::F_WRLCK as i16;
    q.l_whence = libc::SEEK_SET as i16;
    q.l_start = 0;
    q.l_len = 1;
    assert_eq!(
        unsafe { libc::fcntl(b.as_raw_fd(), libc::F_OFD_GETLK, &mut q) },
        0
    );
    assert_eq!(q.l_type, libc::F_WRLCK as i16);
    assert_eq!((q.l_start, q.l_len), (0, 10));
    drop(a); // closing releases its locks
    assert_eq!(lk(b.as_raw_fd(), libc::F_WRLCK, 0, 10), 0);
}

fn mknod(p: &Path, mode: u32, dev: libc::dev_t) -> std::io::Result<()> {
    let c = cpath(p);
    if unsafe { libc::mknod(c.as_ptr(), mode, dev) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// mknod of a fifo, a socket and devices: the node and its attributes live in Curvine;
/// the kernel provides the pipe (a writer and a reader meet through it).
#[test]
fn mknod_fifo_socket_and_devices() {
    use std::os::unix::fs::FileTypeExt;
    let (dir, cv) = test_dir("mknod");
    let fifo = dir.join("fifo");
    mknod(&fifo, libc::S_IFIFO | 0o640, 0).unwrap();
    let md = fs::symlink_metadata(&fifo).unwrap();
    assert!(md.file_type().is_fifo());
    assert_eq!(md.mode() & 0o777, 0o640);
    assert_eq!(
        errno_of(&mknod(&fifo, libc::S_IFIFO | 0o640, 0).unwrap_err()),
        libc::EEXIST
    );
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || fs::write(&fifo, b"through the pipe").unwrap())
    };
    assert_eq!(fs::read(&fifo).unwrap(), b"through the pipe");
    writer.join().unwrap();

    mknod(&dir.join("sock"), libc::S_IFSOCK | 0o600, 0).unwrap();
    assert!(fs::symlink_metadata(dir.join("sock"))
        .unwrap()
        .file_type()
        .is_socket());
    // a unix socket bound on the mount is a socket node too
    let bound = dir.join("bound");
    let _l = std::os::unix::net::UnixListener::bind(&bound).unwrap();
    assert!(fs::symlink_metadata(&bound)
        .unwrap()
        .file_type()
        .is_socket());

    let null = dir.join("null");
    let dev = libc::makedev(1, 3);
    mknod(&null, libc::S_IFCHR | 0o666, dev).unwrap();
    let md = fs::symlink_metadata(&null).unwrap();
    assert!(md.file_type().is_char_device());
    assert_eq!(md.rdev(), dev);
    // (opening it is up to the kernel: FUSE mounts are nodev, so EACCES)
    assert_eq!(errno_of(&fs::write(&null, b"x").unwrap_err()), libc::EACCES);
    mknod(&dir.join("blk"), libc::S_IFBLK | 0o600, libc::makedev(7, 0)).unwrap();
    assert!(fs::symlink_metadata(dir.join("blk"))
        .unwrap()
        .file_type()
        .is_block_device());
    // the nodes are in Curvine, but their data is not
    let s = shared();
    let st = s.rt.block_on(s.fs.stat(&format!("{cv}/null"))).unwrap();
    assert_eq!(st.file_type, curvine_client::FileType::CharDevice as i32);
    assert!(s.rt.block_on(s.fs.open(&format!("{cv}/fifo"))).is_err());
    // chmod, rename and unlink of special files
    fs::set_permissions(&fifo, fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::symlink_metadata(&fifo).unwrap().mode() & 0o777, 0o600);
    fs::rename(&fifo, dir.join("fifo2")).unwrap();
    fs::remove_file(dir.join("fifo2")).unwrap();
    fs::remove_file(&null).unwrap();

    // an unprivileged user makes fifos but not devices (EPERM), through the mount and
    // through the client (the master checks too)
    let nobody = s.fs.with_identity(65534, 65534);
    let err =
        s.rt.block_on(nobody.mknod(
            &format!("{cv}/c"),
            curvine_client::FileType::CharDevice,
            0o600,
            0,
        ))
        .unwrap_err();
    assert_eq!(err.errno(), libc::EPERM, "{err}");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    let (ok, out) = sh_as_nobody(
        &dir,
        "mkdir -p u && mkfifo u/p && test -p u/p && \
         (mknod u/c c 1 3 2>&1; echo rc=$?)",
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("rc=1") && out.to_lowercase().contains("not permitted"),
        "{out}"
    );
}

/// The kernel keeps entries and attributes for the default 30 s here, yet a change
/// another client makes shows through the mount within seconds: the daemon follows the
/// master's change log and drops what the kernel cached.
#[test]
fn changes_made_elsewhere_reach_the_kernels_cache() {
    let (dir, cv) = test_dir("coherent");
    let s = shared();
    let soon = std::time::Duration::from_secs(5);
    for n in ["grow", "gone", "old", "mode", "opened"] {
        fs::write(dir.join(n), b"abc").unwrap();
    }
    fs::create_dir(dir.join("sub")).unwrap();
    // everything is now in the kernel's caches
    for n in ["grow", "gone", "old", "mode", "opened", "sub"] {
        fs::metadata(dir.join(n)).unwrap();
    }
    assert!(!dir.join("sub/new").exists());

    let body = data(100_000, 7);
    let grow = format!("{cv}/grow");
    s.rt.block_on(s.fs.write_file(&grow, &body)).unwrap();
    s.rt.block_on(s.fs.delete(&format!("{cv}/gone"), false))
        .unwrap();
    s.rt.block_on(s.fs.rename(&format!("{cv}/old"), &format!("{cv}/new")))
        .unwrap();
    s.rt.block_on(s.fs.set_attr(
        &format!("{cv}/mode"),
        curvine_client::SetAttr {
            mode: Some(0o600),
            ..Default::default()
        },
    ))
    .unwrap();
    s.rt.block_on(s.fs.write_file(&format!("{cv}/sub/new"), b"x"))
        .unwrap();

    let len = |n: &str| fs::metadata(dir.join(n)).map(|m| m.len()).ok();
    assert!(
        common::wait_for(soon, || len("grow") == Some(body.len() as u64)),
        "a file rewritten elsewhere: length {:?}",
        len("grow")
    );
    assert_eq!(fs::read(dir.join("grow")).unwrap(), body);
    assert!(
        common::wait_for(soon, || !dir.join("gone").exists()),
        "a file removed elsewhere"
    );
    assert!(common::wait_for(soon, || !dir.join("old").exists()
        && dir.join("new").exists()));
    assert!(
        common::wait_for(soon, || fs::metadata(dir.join("mode")).unwrap().mode()
            & 0o777
            == 0o600),
        "a chmod made elsewhere"
    );
    assert!(
        common::wait_for(soon, || dir.join("sub/new").exists()),
        "a file created elsewhere"
    );

    // close-to-open does not wait for the change log: an open right after another
    // client rewrote the file reads all of the new content
    let opened = format!("{cv}/opened");
    let longer = data(50_000, 9);
    s.rt.block_on(s.fs.write_file(&opened, &longer)).unwrap();
    let mut got = Vec::new();
    File::open(dir.join("opened"))
        .unwrap()
        .read_to_end(&mut got)
        .unwrap();
    assert_eq!(got.len(), longer.len());
    assert_eq!(got, longer);
}

/// Changes through the mount are acknowledged before the master's journal sync (as a
/// local file system's are before its journal commit); fsync and fsyncdir wait for it.
#[test]
fn fsync_and_fsyncdir_wait_for_the_masters_journal() {
    use curvine_server::testing::http::{get, metric_sum};
    let s = shared();
    let journal_syncs = || {
        let r =
            s.rt.block_on(get(s.cluster.master_web_addr(), "/metrics", &[]))
                .expect("scrape the master");
        metric_sum(
            &r.body,
            "curvine_master_calls_total",
            &[("method", "SyncJournal"), ("code", "Ok")],
        )
    };
    let (dir, cv) = test_dir("durable");
    let before = journal_syncs();
    let mut f = File::create(dir.join("f")).unwrap();
    f.write_all(b"kept").unwrap();
    f.sync_all().unwrap();
    File::open(&dir).unwrap().sync_all().unwrap();
    // other tests of this binary may sync too: at least these two did
    assert!(journal_syncs() - before >= 2.0);
    assert_eq!(curvine_read(&format!("{cv}/f")), b"kept");
}

/// Two mounts of one cluster: O_CREAT|O_EXCL of the same names from both at once
/// succeeds exactly once per name, and a file written and closed on one shows its final
/// size on the other (after the change log's round trip) and at once to the client.
#[test]
fn o_excl_is_exclusive_across_two_mounts() {
    let s = shared();
    let (dir, cv) = test_dir("two-mounts");
    let t = tempfile::tempdir().unwrap();
    let mnt2 = t.path().join("m2");
    fs::create_dir(&mnt2).unwrap();
    let conf = t.path().join("second.toml");
    write_conf(&s.cluster, &conf, "");
    let mut child = spawn_daemon(&conf, &mnt2, &[]);
    assert!(
        wait_for(std::time::Duration::from_secs(20), || is_mounted(&mnt2)),
        "second mount not ready"
    );
    let dir2 = mnt2.join("two-mounts");
    const NAMES: usize = 200;
    let wins: Vec<Vec<bool>> = std::thread::scope(|sc| {
        let hs: Vec<_> = [&dir, &dir2, &dir, &dir2]
            .into_iter()
            .map(|d| {
                sc.spawn(move || {
                    (0..NAMES)
                        .map(|i| {
                            match OpenOptions::new()
                                .write(true)
                                .create_new(true)
                                .open(d.join(format!("x{i}")))
                            {
                                Ok(_) => true,
                                Err(e) if errno_of(&e) == libc::EEXIST => false,
                                Err(e) => panic!("create x{i} in {}: {e}", d.display()),
                            }
                        })
                        .collect()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for i in 0..NAMES {
        let n = wins.iter().filter(|w| w[i]).count();
        assert_eq!(n, 1, "x{i} was created {n} times");
    }
    // the second mount looks at the file while it is written on the first
    let mut f = File::create(dir.join("grows")).unwrap();
    f.write_all(b"abc").unwrap();
    let _ = fs::metadata(dir2.join("grows")).unwrap();
    let body = data(3 << 20, 9);
    f.write_all(&body).unwrap();
    drop(f);
    let want = body.len() as u64 + 3;
    let st = s.rt.block_on(s.fs.stat(&format!("{cv}/grows"))).unwrap();
    assert_eq!(st.len, want);
    assert!(
        wait_for(std::time::Duration::from_secs(10), || fs::metadata(
            dir2.join("grows")
        )
        .is_ok_and(|m| m.len() == want)),
        "the second mount never saw the final size"
    );
    // SAFETY: a signal to our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    assert!(child.wait().unwrap().success());
}
