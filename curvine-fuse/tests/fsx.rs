//! A random-operation data checker: one file on the mount and one local file go through
//! the same seeded sequence of reads, writes (also past the end), mapped reads and
//! writes, truncates up and down, fallocate in each mode, fsyncs and reopens. After every
//! operation both must report the same size by `fstat` and `lseek(SEEK_END)`; every read
//! must return the same bytes, and the whole contents are compared regularly and at the
//! end (through the mount and through the native client).
//!
//! `CURVINE_FSX_OPS` sets the number of operations (100,000 by default) and
//! `CURVINE_FSX_SEED` the seed (a failure prints the seed and the last operations, so a
//! run can be replayed).

#![allow(unsafe_code)]

mod common;

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::{shared, test_dir};
use rand::{rngs::StdRng, Rng, SeedableRng};

/// Longest the file grows (as fsx's default).
const MAX_LEN: u64 = 256 << 10;
/// Longest single operation.
const MAX_OP: u64 = 64 << 10;
const PAGE: u64 = 4096;
/// Whole contents are compared after this many operations.
const FULL_CHECK_EVERY: u64 = 2_000;

#[derive(Debug, Clone, Copy)]
enum Op {
    Read { off: u64, len: u64 },
    Write { off: u64, len: u64 },
    MapRead { off: u64, len: u64 },
    MapWrite { off: u64, len: u64 },
    Truncate { len: u64 },
    Fallocate { mode: i32, off: u64, len: u64 },
    Fsync,
    Reopen,
}

impl Op {
    fn kind(&self) -> &'static str {
        match self {
            Op::Read { .. } => "read",
            Op::Write { .. } => "write",
            Op::MapRead { .. } => "mapread",
            Op::MapWrite { .. } => "mapwrite",
            Op::Truncate { .. } => "truncate",
            Op::Fallocate { .. } => "fallocate",
            Op::Fsync => "fsync",
            Op::Reopen => "reopen",
        }
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn open_rw(p: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(p)
        .unwrap_or_else(|e| panic!("open {}: {e}", p.display()))
}

fn size_of(f: &File) -> std::io::Result<(u64, u64)> {
    let st = f.metadata()?.len();
    // SAFETY: a valid descriptor; lseek touches no memory.
    let end = unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_END) };
    if end < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((st, end as u64))
}

fn pattern(seed: u64, len: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // never zero, so a lost write never passes for a hole
            (x >> 24) as u8 | 1
        })
        .collect()
}

/// `mmap` of `[off, off + len)` of `f` (shared), `off` rounded down to a page.
struct Mapping {
    ptr: *mut libc::c_void,
    map_len: usize,
    skip: usize,
}

impl Mapping {
    fn new(f: &File, off: u64, len: u64, write: bool) -> std::io::Result<Mapping> {
        let start = off / PAGE * PAGE;
        let skip = (off - start) as usize;
        let map_len = skip + len as usize;
        let prot = libc::PROT_READ | if write { libc::PROT_WRITE } else { 0 };
        // SAFETY: a fresh shared mapping of a valid descriptor, checked for failure
        // below; it is unmapped in drop and used only within its length.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                prot,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                start as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapping { ptr, map_len, skip })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `map_len` bytes long and lives as long as `self`; the
        // callers map only within the file's length, so no page past it is touched.
        unsafe {
            std::slice::from_raw_parts(
                (self.ptr as *const u8).add(self.skip),
                self.map_len - self.skip,
            )
        }
    }

    /// Copy `data` in; with `sync`, msync(MS_SYNC) after (the local file's mapping is
    /// its page cache already, so it skips the disk write).
    fn write(&mut self, data: &[u8], sync: bool) -> std::io::Result<()> {
        // SAFETY: as in `bytes`; the mapping is writable (made with PROT_WRITE).
        let dst = unsafe {
            std::slice::from_raw_parts_mut((self.ptr as *mut u8).add(self.skip), data.len())
        };
        dst.copy_from_slice(data);
        // SAFETY: msync of the whole live mapping.
        if sync && unsafe { libc::msync(self.ptr, self.map_len, libc::MS_SYNC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in `new`, once.
        unsafe {
            libc::munmap(self.ptr, self.map_len);
        }
    }
}

fn fallocate(f: &File, mode: i32, off: u64, len: u64) -> std::io::Result<()> {
    // SAFETY: a valid descriptor; fallocate touches no memory.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, off as libc::off_t, len as libc::off_t) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn mode_name(mode: i32) -> String {
    let mut parts = Vec::new();
    if mode & libc::FALLOC_FL_KEEP_SIZE != 0 {
        parts.push("KEEP_SIZE");
    }
    if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 {
        parts.push("PUNCH_HOLE");
    }
    if mode & libc::FALLOC_FL_ZERO_RANGE != 0 {
        parts.push("ZERO_RANGE");
    }
    if parts.is_empty() {
        "0".into()
    } else {
        parts.join("|")
    }
}

struct Run {
    seed: u64,
    mnt: File,
    local: File,
    mnt_path: std::path::PathBuf,
    local_path: std::path::PathBuf,
    log: VecDeque<String>,
    step: u64,
}

impl Run {
    fn fail(&self, what: String) -> ! {
        let last: Vec<&String> = self.log.iter().collect();
        panic!(
            "fsx: {what}\n  at operation {} (seed {}; replay with CURVINE_FSX_SEED={} \
             CURVINE_FSX_OPS={})\n  last operations:\n    {}",
            self.step,
            self.seed,
            self.seed,
            self.step + 1,
            last.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n    ")
        );
    }

    fn len(&self) -> u64 {
        match size_of(&self.local) {
            Ok((n, _)) => n,
            Err(e) => self.fail(format!("local fstat: {e}")),
        }
    }

    fn pick(&self, rng: &mut StdRng) -> Op {
        let len = self.len();
        let off_len = |rng: &mut StdRng, limit: u64| {
            let off = rng.gen_range(0..limit.max(1));
            let n = rng.gen_range(1..=MAX_OP.min(limit.max(1)));
            (off, n)
        };
        match rng.gen_range(0..100) {
            0..=19 => {
                let (off, n) = off_len(rng, MAX_LEN);
                Op::Read { off, len: n }
            }
            20..=39 => {
                let (off, n) = off_len(rng, MAX_LEN);
                Op::Write {
                    off,
                    len: n.min(MAX_LEN - off),
                }
            }
            40..=44 => {
                // past the end, leaving a gap
                let off = (len + rng.gen_range(1..32 << 10)).min(MAX_LEN - 1);
                let n = rng.gen_range(1..=(MAX_LEN - off).min(MAX_OP));
                Op::Write { off, len: n }
            }
            45..=54 => {
                let (off, n) = off_len(rng, MAX_LEN);
                Op::MapRead { off, len: n }
            }
            55..=69 => {
                let (off, n) = off_len(rng, MAX_LEN);
                Op::MapWrite {
                    off,
                    len: n.min(MAX_LEN - off),
                }
            }
            70..=79 => {
                // down as often as up
                let to = if rng.gen_bool(0.5) && len > 0 {
                    rng.gen_range(0..len)
                } else {
                    rng.gen_range(len..=MAX_LEN)
                };
                Op::Truncate { len: to }
            }
            80..=93 => {
                let mode = [
                    0,
                    libc::FALLOC_FL_KEEP_SIZE,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    libc::FALLOC_FL_ZERO_RANGE,
                    libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                ][rng.gen_range(0..5)];
                let (off, n) = off_len(rng, MAX_LEN);
                Op::Fallocate {
                    mode,
                    off,
                    len: n.min(MAX_LEN - off),
                }
            }
            94..=97 => Op::Fsync,
            _ => Op::Reopen,
        }
    }

    fn describe(&self, op: &Op, size: u64) -> String {
        let s = match *op {
            Op::Read { off, len } => format!("READ {off:#x}+{len:#x}"),
            Op::Write { off, len } => format!("WRITE {off:#x}+{len:#x}"),
            Op::MapRead { off, len } => format!("MAPREAD {off:#x}+{len:#x}"),
            Op::MapWrite { off, len } => format!("MAPWRITE {off:#x}+{len:#x}"),
            Op::Truncate { len } if len < size => format!("TRUNCATE DOWN {size:#x}->{len:#x}"),
            Op::Truncate { len } => format!("TRUNCATE UP {size:#x}->{len:#x}"),
            Op::Fallocate { mode, off, len } => {
                format!("FALLOCATE {} {off:#x}+{len:#x}", mode_name(mode))
            }
            Op::Fsync => "FSYNC".into(),
            Op::Reopen => "CLOSE/OPEN".into(),
        };
        format!("{:>7} {s} (size {size:#x})", self.step)
    }

    /// Apply `op` to both files; false when the local file system cannot do it (the
    /// operation is then left out of the run).
    fn apply(&mut self, op: Op, data_seed: u64) -> bool {
        match op {
            Op::Read { off, len } => {
                let mut a = vec![0u8; len as usize];
                let mut b = vec![0u8; len as usize];
                let ka = read_full(&self.mnt, &mut a, off)
                    .unwrap_or_else(|e| self.fail(format!("read on the mount: {e}")));
                let kb = read_full(&self.local, &mut b, off)
                    .unwrap_or_else(|e| self.fail(format!("local read: {e}")));
                if ka != kb {
                    self.fail(format!(
                        "read at {off:#x}: {ka:#x} bytes on the mount, {kb:#x} locally"
                    ));
                }
                if a[..ka] != b[..kb] {
                    let at = (0..ka).find(|&i| a[i] != b[i]).unwrap_or(0);
                    self.fail(format!(
                        "read at {off:#x}: bytes differ from {:#x} (mount {:#04x}, local {:#04x})",
                        off + at as u64,
                        a[at],
                        b[at]
                    ));
                }
            }
            Op::Write { off, len } => {
                let buf = pattern(data_seed, len);
                if let Err(e) = self.mnt.write_all_at(&buf, off) {
                    self.fail(format!("write on the mount: {e}"));
                }
                if let Err(e) = self.local.write_all_at(&buf, off) {
                    self.fail(format!("local write: {e}"));
                }
            }
            Op::MapRead { off, len } => {
                let size = self.len();
                if off >= size {
                    return false;
                }
                let len = len.min(size - off);
                let a = Mapping::new(&self.mnt, off, len, false)
                    .unwrap_or_else(|e| self.fail(format!("mmap on the mount: {e}")));
                let b = Mapping::new(&self.local, off, len, false)
                    .unwrap_or_else(|e| self.fail(format!("local mmap: {e}")));
                if a.bytes() != b.bytes() {
                    let at = (0..len as usize)
                        .find(|&i| a.bytes()[i] != b.bytes()[i])
                        .unwrap_or(0);
                    self.fail(format!(
                        "mapped read at {off:#x}: bytes differ from {:#x}",
                        off + at as u64
                    ));
                }
            }
            Op::MapWrite { off, len } => {
                // as fsx: grow the file first when the mapping reaches past its end
                let end = off + len;
                if end > self.len() {
                    self.truncate_both(end);
                }
                let buf = pattern(data_seed, len);
                for (f, sync, name) in [
                    (&self.mnt, true, "on the mount"),
                    (&self.local, false, "locally"),
                ] {
                    let res = Mapping::new(f, off, len, true).and_then(|mut m| m.write(&buf, sync));
                    if let Err(e) = res {
                        self.fail(format!("mapped write {name}: {e}"));
                    }
                }
            }
            Op::Truncate { len } => self.truncate_both(len),
            Op::Fallocate { mode, off, len } => {
                if let Err(e) = fallocate(&self.local, mode, off, len) {
                    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                        return false;
                    }
                    self.fail(format!("local fallocate: {e}"));
                }
                if let Err(e) = fallocate(&self.mnt, mode, off, len) {
                    self.fail(format!("fallocate {} on the mount: {e}", mode_name(mode)));
                }
            }
            Op::Fsync => {
                if let Err(e) = self.mnt.sync_all() {
                    self.fail(format!("fsync on the mount: {e}"));
                }
            }
            Op::Reopen => {
                self.mnt = open_rw(&self.mnt_path);
                self.local = open_rw(&self.local_path);
                self.compare_all("after reopen");
            }
        }
        true
    }

    fn truncate_both(&self, len: u64) {
        if let Err(e) = self.mnt.set_len(len) {
            self.fail(format!("truncate on the mount: {e}"));
        }
        if let Err(e) = self.local.set_len(len) {
            self.fail(format!("local truncate: {e}"));
        }
    }

    fn check_size(&self) {
        let (ls, le) = match size_of(&self.local) {
            Ok(s) => s,
            Err(e) => self.fail(format!("local size: {e}")),
        };
        let (ms, me) = match size_of(&self.mnt) {
            Ok(s) => s,
            Err(e) => self.fail(format!("size on the mount: {e}")),
        };
        if ls != ms || le != me {
            self.fail(format!(
                "size: stat {ms:#x} / lseek(SEEK_END) {me:#x} on the mount, \
                 {ls:#x} / {le:#x} locally"
            ));
        }
    }

    fn compare_all(&self, when: &str) {
        let want = std::fs::read(&self.local_path)
            .unwrap_or_else(|e| self.fail(format!("read the local file: {e}")));
        let got = std::fs::read(&self.mnt_path)
            .unwrap_or_else(|e| self.fail(format!("read the file on the mount: {e}")));
        if got.len() != want.len() {
            self.fail(format!(
                "{when}: {:#x} bytes on the mount, {:#x} locally",
                got.len(),
                want.len()
            ));
        }
        if let Some(at) = (0..got.len()).find(|&i| got[i] != want[i]) {
            self.fail(format!(
                "{when}: contents differ from {at:#x} (mount {:#04x}, local {:#04x})",
                got[at], want[at]
            ));
        }
    }
}

/// pread until `buf` is full or the end of the file.
fn read_full(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let n = f.read_at(&mut buf[done..], off + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

#[test]
fn random_operations_match_a_local_file() {
    let ops = env_u64("CURVINE_FSX_OPS", 100_000);
    let seed = env_u64("CURVINE_FSX_SEED", 20261128);
    let (dir, cv) = test_dir("fsx");
    let local_dir = tempfile::tempdir().expect("local temp dir");
    let mnt_path = dir.join("f");
    let local_path = local_dir.path().join("f");
    let mut run = Run {
        seed,
        mnt: open_rw(&mnt_path),
        local: open_rw(&local_path),
        mnt_path,
        local_path,
        log: VecDeque::new(),
        step: 0,
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut skipped = 0u64;
    // count and time per kind of operation, printed at the end
    let mut spent: std::collections::BTreeMap<&str, (u64, std::time::Duration)> =
        Default::default();
    while run.step < ops {
        let op = run.pick(&mut rng);
        let data_seed = rng.gen();
        let line = run.describe(&op, run.len());
        if run.log.len() == 40 {
            run.log.pop_front();
        }
        run.log.push_back(line);
        let started = std::time::Instant::now();
        if !run.apply(op, data_seed) {
            skipped += 1;
        }
        let e = spent.entry(op.kind()).or_default();
        e.0 += 1;
        e.1 += started.elapsed();
        run.check_size();
        run.step += 1;
        if run.step.is_multiple_of(FULL_CHECK_EVERY) {
            run.compare_all("full check");
        }
    }
    run.compare_all("at the end");
    drop(run.mnt);
    let want = std::fs::read(&run.local_path).expect("read the local file");
    let s = shared();
    let got =
        s.rt.block_on(s.fs.read_file(&format!("{cv}/f")))
            .expect("read through the client");
    assert!(
        got == want,
        "Curvine's copy differs from the local file after close"
    );
    eprintln!("fsx: {ops} operations, seed {seed}, {skipped} not applicable locally");
    for (kind, (n, t)) in spent {
        eprintln!("fsx: {kind:>10} {n:>7} in {:>8.2} s", t.as_secs_f64());
    }
}

/// Each fallocate mode on a file with data, against a local file: a hole punched in the
/// middle and at the end, a range zeroed inside and past the end (growing the file only
/// without KEEP_SIZE), and space kept past the end without growing.
#[test]
fn fallocate_modes_as_on_a_local_file() {
    let (dir, _) = test_dir("fallocate-modes");
    let local_dir = tempfile::tempdir().expect("local temp dir");
    let steps: [(i32, u64, u64); 6] = [
        (
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            5000,
            70_000,
        ),
        (libc::FALLOC_FL_ZERO_RANGE, 100_000, 3000),
        (
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            190_000,
            50_000,
        ),
        (libc::FALLOC_FL_ZERO_RANGE, 195_000, 20_000),
        (libc::FALLOC_FL_KEEP_SIZE, 0, 400_000),
        (
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            150_000,
            1 << 20,
        ),
    ];
    for (i, (mode, off, len)) in steps.into_iter().enumerate() {
        let name = format!("f{i}");
        let body = pattern(i as u64 + 1, 200_000);
        let m = open_rw(&dir.join(&name));
        let l = open_rw(&local_dir.path().join(&name));
        for f in [&m, &l] {
            f.write_all_at(&body, 0).expect("write");
        }
        fallocate(&l, mode, off, len).expect("local fallocate");
        fallocate(&m, mode, off, len)
            .unwrap_or_else(|e| panic!("fallocate {} {off}+{len}: {e}", mode_name(mode)));
        let what = format!("{} {off}+{len}", mode_name(mode));
        assert_eq!(size_of(&m).unwrap(), size_of(&l).unwrap(), "{what}: size");
        let want = std::fs::read(local_dir.path().join(&name)).unwrap();
        assert!(
            std::fs::read(dir.join(&name)).unwrap() == want,
            "{what}: open file"
        );
        drop(m);
        assert!(
            std::fs::read(dir.join(&name)).unwrap() == want,
            "{what}: after close"
        );
    }
}
