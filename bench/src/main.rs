//! curvine-bench: throughput of the Rust client against a running cluster.
//!
//! `fs.write` writes `--file-num` files of `--file-size` with `--client-threads` writers
//! and records each file's CRC32C in a manifest beside them; `fs.read` reads them back
//! and compares (a mismatch is a non-zero exit). `meta` measures create+complete, stat
//! and delete of empty files; `md` does the same with system calls under a local
//! directory (a FUSE mount, or bindfs to compare with), as mdtest does. Every figure is printed with the bytes and seconds behind it.
//! I/O buffers start on a page boundary, as fio's and dd's do (see
//! `curvine_common::aligned` for what an unaligned buffer costs).

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use curvine_client::stdout::{self, Stdout};
use curvine_client::{CreateOptions, CurvineFs};
use curvine_common::aligned::AlignedBuf;
use curvine_common::conf::parse_size;
use curvine_common::proto::StorageTier;
use curvine_common::ClusterConf;

#[derive(Parser, Debug, Clone)]
#[command(name = "curvine-bench", about = "Curvine client throughput benchmark")]
struct Args {
    /// fs.write | fs.read | meta | ufs.read (Rust client), fuse.write | fuse.read (plain
    /// file I/O under --dir, a directory of a Curvine FUSE mount), md (mdtest-like create,
    /// stat and remove of empty files under --dir, on any file system)
    #[arg(long)]
    action: String,
    /// Curvine directory the files live in.
    #[arg(long, default_value = "/curvine-bench")]
    dir: String,
    /// Cluster configuration file (default: $CURVINE_CONF_FILE).
    #[arg(long)]
    conf: Option<PathBuf>,
    /// Compute CRC32C of the data written and compare it on read.
    #[arg(long, default_value = "true", action = clap::ArgAction::Set)]
    checksum: bool,
    #[arg(long, default_value_t = 2)]
    client_threads: usize,
    #[arg(long, default_value = "128KB", value_parser = parse_size)]
    buf_size: u64,
    #[arg(long, default_value = "100MB", value_parser = parse_size)]
    file_size: u64,
    #[arg(long, default_value_t = 10)]
    file_num: usize,
    /// Tier for written blocks: mem | ssd | hdd (default: the cluster's).
    #[arg(long)]
    storage_type: Option<String>,
    /// Read with the data plane instead of short-circuit (overrides client.short_circuit).
    #[arg(long, default_value = "false", action = clap::ArgAction::Set)]
    no_short_circuit: bool,
    /// `meta`: passes of the stat phase over all files, so it lasts long enough to
    /// measure (one pass over 40,000 files took 0.3-0.7 s).
    #[arg(long, default_value_t = 5)]
    stat_rounds: usize,
    /// Threads of the runtime the client tasks run on (0: one per client thread, at
    /// least 2). `meta` with 8 clients on 1 thread is how an async program with 8 calls
    /// in flight runs; see bench/README.md.
    #[arg(long, default_value_t = 0)]
    runtime_threads: usize,
    /// `meta`: spread the files over this many directories, made first and timed as a
    /// mkdir phase (0: all files in one directory).
    #[arg(long, default_value_t = 0)]
    meta_dirs: usize,
    /// `meta`: leave the files in place (no delete phase), e.g. to grow a namespace.
    #[arg(long)]
    meta_keep: bool,
    /// `ufs.read`: the S3 endpoint (credentials from $AWS_ACCESS_KEY_ID and
    /// $AWS_SECRET_ACCESS_KEY) and bucket; --dir is where it is mounted.
    #[arg(long, default_value = "http://127.0.0.1:9000")]
    ufs_endpoint: String,
    #[arg(long, default_value = "bench")]
    ufs_bucket: String,
    /// `ufs.read`: small objects under one prefix, for the listing figures.
    #[arg(long, default_value_t = 10_000)]
    list_objects: usize,
    /// Serve this process's client metrics at `/metrics` on this port during the run
    /// (0: not served). A summary is printed at the end either way.
    #[arg(long, default_value_t = 0)]
    metrics_port: u16,
}

mod metrics;
mod ufs;

const MANIFEST: &str = "_bench_manifest";

fn main() {
    let args = Args::parse();
    match run(args) {
        Ok(()) => {}
        // whoever read our output stopped reading (`curvine-bench ... | head -1`)
        Err(e) if stdout::is_closed(e.as_ref()) => std::process::exit(stdout::CLOSED_EXIT.into()),
        Err(e) => {
            eprintln!("curvine-bench: {e:#}");
            std::process::exit(1);
        }
    }
}

/// `println!` that returns an error, marked as such when the reader has gone, in place of
/// panicking.
macro_rules! say {
    ($($arg:tt)*) => {
        writeln!(Stdout::lock(), $($arg)*)
    };
}

fn run(args: Args) -> anyhow::Result<()> {
    if args.client_threads == 0 || args.buf_size == 0 {
        bail!("--client-threads and --buf-size must be positive");
    }
    match args.action.as_str() {
        "fuse.write" => {
            require_fuse(&args.dir)?;
            return fuse_write(&args);
        }
        "fuse.read" => {
            require_fuse(&args.dir)?;
            return fuse_read(&args);
        }
        "md" => return md(&args),
        _ => {}
    }
    let mut conf = ClusterConf::load_default(args.conf.as_deref()).context("load cluster conf")?;
    curvine_common::web::set_recording(conf.web.metrics);
    if args.no_short_circuit {
        conf.client.short_circuit = false;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(match args.runtime_threads {
            0 => args.client_threads.max(2),
            n => n,
        })
        .enable_all()
        .build()
        .context("start runtime")?;
    rt.block_on(async move {
        let stop_web = tokio_util::sync::CancellationToken::new();
        let _stop_web = stop_web.clone().drop_guard();
        metrics::serve(&conf, args.metrics_port, stop_web).await?;
        let fs = CurvineFs::connect(conf)
            .await
            .context("connect to the cluster")?;
        let before = curvine_client::metrics::client().totals();
        let r = run_action(&fs, &args).await;
        metrics::summary(&before, &curvine_client::metrics::client().totals())?;
        r
    })
}

async fn run_action(fs: &CurvineFs, args: &Args) -> anyhow::Result<()> {
    match args.action.as_str() {
        "fs.write" => fs_write(fs, args).await,
        "fs.read" => fs_read(fs, args).await,
        "meta" => meta(fs, args).await,
        "ufs.read" => {
            ufs::ufs_read(
                fs,
                &ufs::UfsArgs {
                    dir: args.dir.clone(),
                    endpoint: args.ufs_endpoint.clone(),
                    bucket: args.ufs_bucket.clone(),
                    threads: args.client_threads,
                    file_size: args.file_size,
                    file_num: args.file_num,
                    buf_size: args.buf_size as usize,
                    list_objects: args.list_objects,
                },
            )
            .await
        }
        other => bail!(
            "unknown action {other:?} (expected fs.write, fs.read, fuse.write, fuse.read, meta or ufs.read)"
        ),
    }
}

fn file_path(dir: &str, i: usize) -> String {
    format!("{}/file-{i:06}", dir.trim_end_matches('/'))
}

/// Deterministic content: a fixed pseudo-random pattern stamped with the file index and
/// offset every 4 KiB, so misplaced data is caught by the checksum.
fn fill(buf: &mut [u8], pattern: &[u8], file: usize, offset: u64) {
    buf.copy_from_slice(&pattern[..buf.len()]);
    let mut pos = 0usize;
    while pos + 16 <= buf.len() {
        let abs = offset + pos as u64;
        if abs.is_multiple_of(4096) {
            buf[pos..pos + 8].copy_from_slice(&(file as u64).to_le_bytes());
            buf[pos + 8..pos + 16].copy_from_slice(&abs.to_le_bytes());
        }
        pos += 4096 - (abs % 4096) as usize;
    }
}

fn pattern(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn print_throughput(
    action: &str,
    bytes: u64,
    elapsed: Duration,
    files: usize,
) -> std::io::Result<()> {
    let secs = elapsed.as_secs_f64();
    let gib = bytes as f64 / (1u64 << 30) as f64;
    let rate = files as f64 / secs.max(1e-9);
    say!(
        "{action}: {files} files, {bytes} bytes ({gib:.2} GiB) in {secs:.2} s, {rate:.0} files/s"
    )?;
    say!("{action}: {:.2} GiB/s", gib / secs.max(1e-9))
}

async fn fs_write(fs: &CurvineFs, args: &Args) -> anyhow::Result<()> {
    let tier = match &args.storage_type {
        Some(s) => StorageTier::parse(s)
            .with_context(|| format!("--storage-type {s:?}: expected mem, ssd or hdd"))?,
        None => StorageTier::Unspecified,
    };
    fs.mkdir(&args.dir, true).await.context("mkdir")?;
    let pattern = Arc::new(pattern(args.buf_size as usize));
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.client_threads {
        let (fs, args, pattern, next) = (fs.clone(), args.clone(), pattern.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut crcs = Vec::new();
            let mut buf = AlignedBuf::zeroed(args.buf_size as usize);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= args.file_num {
                    break;
                }
                let path = file_path(&args.dir, i);
                let opts = CreateOptions {
                    overwrite: true,
                    storage_tier: tier,
                    first_block: args.file_size > 0,
                    ..Default::default()
                };
                let mut w = fs
                    .create_with(&path, opts)
                    .await
                    .with_context(|| format!("create {path}"))?;
                let mut crc = file_crc();
                let mut off = 0u64;
                while off < args.file_size {
                    let n = (args.file_size - off).min(args.buf_size) as usize;
                    fill(&mut buf[..n], &pattern, i, off);
                    if args.checksum {
                        crc.update(&buf[..n]);
                    }
                    w.write(&buf[..n])
                        .await
                        .with_context(|| format!("write {path}"))?;
                    off += n as u64;
                }
                w.close().await.with_context(|| format!("close {path}"))?;
                crcs.push((i, crc.finalize() as u32));
            }
            anyhow::Ok(crcs)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.context("writer task")??);
    }
    let elapsed = start.elapsed();
    all.sort();
    print_throughput(
        "fs.write",
        args.file_size * args.file_num as u64,
        elapsed,
        args.file_num,
    )?;
    if args.checksum {
        fs.write_file(
            &format!("{}/{MANIFEST}", args.dir),
            manifest(args, &all).as_bytes(),
        )
        .await
        .context("write manifest")?;
        say!("fs.write: checksum {:08x}", total_crc(&all))?;
    }
    Ok(())
}

async fn fs_read(fs: &CurvineFs, args: &Args) -> anyhow::Result<()> {
    let expected = if args.checksum {
        let raw = fs
            .read_file(&format!("{}/{MANIFEST}", args.dir))
            .await
            .context("read the manifest of fs.write (run fs.write with --checksum true first)")?;
        Some(parse_manifest(args, raw)?)
    } else {
        None
    };
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.client_threads {
        let (fs, args, next) = (fs.clone(), args.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            let mut buf = AlignedBuf::zeroed(args.buf_size as usize);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= args.file_num {
                    break;
                }
                let path = file_path(&args.dir, i);
                let mut r = fs
                    .open(&path)
                    .await
                    .with_context(|| format!("open {path}"))?;
                let mut crc = file_crc();
                let mut total = 0u64;
                loop {
                    let n = r
                        .read(&mut buf)
                        .await
                        .with_context(|| format!("read {path}"))?;
                    if n == 0 {
                        break;
                    }
                    if args.checksum {
                        crc.update(&buf[..n]);
                    }
                    total += n as u64;
                }
                if total != args.file_size {
                    anyhow::bail!("{path}: read {total} bytes, expected {}", args.file_size);
                }
                out.push((i, crc.finalize() as u32));
            }
            anyhow::Ok(out)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.context("reader task")??);
    }
    let elapsed = start.elapsed();
    all.sort();
    print_throughput(
        "fs.read",
        args.file_size * args.file_num as u64,
        elapsed,
        args.file_num,
    )?;
    if let Some(expected) = expected {
        compare("fs.read", args, &expected, &all)?;
    }
    Ok(())
}

/// The manifest fs.write / fuse.write leave beside the files: sizes, then each file's CRC.
fn manifest(args: &Args, crcs: &[(usize, u32)]) -> String {
    std::iter::once(format!("{} {}\n", args.file_num, args.file_size))
        .chain(crcs.iter().map(|(i, c)| format!("{i} {c:08x}\n")))
        .collect()
}

fn parse_manifest(args: &Args, raw: Vec<u8>) -> anyhow::Result<Vec<u32>> {
    let text = String::from_utf8(raw).context("manifest is not text")?;
    let mut lines = text.lines();
    let head = lines.next().unwrap_or_default();
    if head != format!("{} {}", args.file_num, args.file_size) {
        bail!("the write run had files/size {head:?}; pass the same --file-num and --file-size");
    }
    lines
        .map(|l| {
            let c = l.split_whitespace().nth(1).unwrap_or_default();
            u32::from_str_radix(c, 16).with_context(|| format!("bad manifest line {l:?}"))
        })
        .collect()
}

/// A running CRC32C of a whole file (the same sum as the chunks' CRCs use).
fn file_crc() -> crc_fast::Digest {
    crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi)
}

/// One CRC32C over every file's index and CRC, in file order: the summary printed by a
/// write and a read run. (Folding the CRCs with rotate-and-xor, as before, cancelled out:
/// a million files of the bench's pattern summed to ffffffff.)
fn total_crc(crcs: &[(usize, u32)]) -> u32 {
    let mut d = file_crc();
    for (i, c) in crcs {
        d.update(&(*i as u64).to_le_bytes());
        d.update(&c.to_le_bytes());
    }
    d.finalize() as u32
}

/// Compare the read run's per-file CRCs with the write run's; a mismatch is an error.
fn compare(
    action: &str,
    args: &Args,
    expected: &[u32],
    got: &[(usize, u32)],
) -> anyhow::Result<()> {
    let bad: Vec<usize> = got
        .iter()
        .filter(|(i, c)| expected.get(*i) != Some(c))
        .map(|(i, _)| *i)
        .collect();
    say!("{action}: checksum {:08x}", total_crc(got))?;
    if !bad.is_empty() {
        bail!(
            "checksum mismatch in {} file(s), first {}",
            bad.len(),
            file_path(&args.dir, bad[0])
        );
    }
    say!("{action}: checksum matches the write run")?;
    Ok(())
}

/// Run `work(file index)` for every file on `--client-threads` OS threads.
fn on_threads(
    args: &Args,
    work: impl Fn(usize) -> anyhow::Result<u32> + Sync,
) -> anyhow::Result<Vec<(usize, u32)>> {
    let next = AtomicUsize::new(0);
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.client_threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= args.file_num {
                            return anyhow::Ok(out);
                        }
                        out.push((i, work(i)?));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("bench thread panicked"))?
            })
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    let mut all: Vec<(usize, u32)> = results.into_iter().flatten().collect();
    all.sort();
    Ok(all)
}

/// md: like `mdtest -n FILE_NUM` with CLIENT_THREADS processes (threads here: the
/// kernel sees each as its own caller): every thread creates (open O_CREAT|O_EXCL, close),
/// then stats, then removes its own FILE_NUM empty files, the phases separated. File i of
/// thread t is in directory (t + i * CLIENT_THREADS) mod --meta-dirs: one shared
/// directory, one per thread (as `mdtest -u`), or spread over many.
fn md(args: &Args) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let base = std::path::Path::new(&args.dir).join("md");
    if base.exists() {
        std::fs::remove_dir_all(&base).with_context(|| format!("clear {}", base.display()))?;
    }
    let dirs = args.meta_dirs.max(1);
    for d in 0..dirs {
        let p = base.join(format!("d{d}"));
        std::fs::create_dir_all(&p).with_context(|| format!("mkdir {}", p.display()))?;
    }
    let (n, threads) = (args.file_num, args.client_threads);
    // --meta-dirs equal to the threads gives each its own directory (`mdtest -u`)
    let path = |t: usize, i: usize| {
        let d = (t + i * threads) % dirs;
        base.join(format!("d{d}")).join(format!("f{t}.{i}"))
    };
    for phase in ["create", "stat", "remove"] {
        let start = Instant::now();
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let path = &path;
                    scope.spawn(move || {
                        for i in 0..n {
                            let p = path(t, i);
                            let r = match phase {
                                "create" => std::fs::OpenOptions::new()
                                    .write(true)
                                    .create_new(true)
                                    .mode(0o644)
                                    .open(&p)
                                    .map(drop),
                                "stat" => std::fs::metadata(&p).map(drop),
                                _ => std::fs::remove_file(&p),
                            };
                            r.with_context(|| format!("{phase} {}", p.display()))?;
                        }
                        anyhow::Ok(())
                    })
                })
                .collect();
            handles.into_iter().try_for_each(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("md thread panicked"))?
            })
        })?;
        let secs = start.elapsed().as_secs_f64();
        say!(
            "md.{phase}: {threads} procs x {n} files in {dirs} dirs, {secs:.2} s, {:.0} ops/s",
            (threads * n) as f64 / secs.max(1e-9)
        )?;
    }
    std::fs::remove_dir_all(&base).with_context(|| format!("clear {}", base.display()))?;
    Ok(())
}

/// The fuse.* actions time the mount, so `dir` must be on one: a mount point with
/// nothing mounted is a plain local directory, and the run would time the local disk.
fn require_fuse(dir: &str) -> anyhow::Result<()> {
    // the directory may not exist yet: its nearest existing ancestor decides
    let mut p = std::path::Path::new(dir);
    while !p.exists() {
        p = p.parent().unwrap_or(std::path::Path::new("/"));
    }
    if !on_fuse(p)? {
        bail!(
            "{dir} is not on a FUSE mount: mount Curvine there first \
             (bin/curvine-fuse.sh start --mnt-path DIR)"
        );
    }
    Ok(())
}

/// Whether `p` lies on a FUSE file system.
#[allow(unsafe_code)]
fn on_fuse(p: &std::path::Path) -> anyhow::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes())
        .with_context(|| format!("{} has a NUL byte", p.display()))?;
    // SAFETY: an all-zero statfs is valid; statfs gets a NUL-terminated path and
    // writes only into `st`.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statfs {}", p.display()));
    }
    Ok(st.f_type as i64 == FUSE_SUPER_MAGIC)
}

/// fuse.write: plain std::fs writes under --dir (a directory of the FUSE mount).
fn fuse_write(args: &Args) -> anyhow::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(&args.dir).with_context(|| format!("mkdir {}", args.dir))?;
    let pattern = pattern(args.buf_size as usize);
    let start = Instant::now();
    let all = on_threads(args, |i| {
        let path = file_path(&args.dir, i);
        let mut f = std::fs::File::create(&path).with_context(|| format!("create {path}"))?;
        let mut buf = AlignedBuf::zeroed(args.buf_size as usize);
        let (mut crc, mut off) = (file_crc(), 0u64);
        while off < args.file_size {
            let n = (args.file_size - off).min(args.buf_size) as usize;
            fill(&mut buf[..n], &pattern, i, off);
            if args.checksum {
                crc.update(&buf[..n]);
            }
            f.write_all(&buf[..n])
                .with_context(|| format!("write {path}"))?;
            off += n as u64;
        }
        // close reports errors of the last writes; flush them explicitly
        f.flush().with_context(|| format!("flush {path}"))?;
        drop(f);
        Ok(crc.finalize() as u32)
    })?;
    print_throughput(
        "fuse.write",
        args.file_size * args.file_num as u64,
        start.elapsed(),
        args.file_num,
    )?;
    if args.checksum {
        let m = format!("{}/{MANIFEST}", args.dir);
        std::fs::write(&m, manifest(args, &all)).with_context(|| format!("write {m}"))?;
        say!("fuse.write: checksum {:08x}", total_crc(&all))?;
    }
    Ok(())
}

/// fuse.read: plain std::fs reads of the files fuse.write (or fs.write) made.
fn fuse_read(args: &Args) -> anyhow::Result<()> {
    use std::io::Read;
    let expected = if args.checksum {
        let m = format!("{}/{MANIFEST}", args.dir);
        let raw = std::fs::read(&m)
            .with_context(|| format!("read {m} (run a write action with --checksum true first)"))?;
        Some(parse_manifest(args, raw)?)
    } else {
        None
    };
    let start = Instant::now();
    let all = on_threads(args, |i| {
        let path = file_path(&args.dir, i);
        let mut f = std::fs::File::open(&path).with_context(|| format!("open {path}"))?;
        let mut buf = AlignedBuf::zeroed(args.buf_size as usize);
        let (mut crc, mut total) = (file_crc(), 0u64);
        loop {
            let n = f.read(&mut buf).with_context(|| format!("read {path}"))?;
            if n == 0 {
                break;
            }
            if args.checksum {
                crc.update(&buf[..n]);
            }
            total += n as u64;
        }
        if total != args.file_size {
            bail!("{path}: read {total} bytes, expected {}", args.file_size);
        }
        Ok(crc.finalize() as u32)
    })?;
    print_throughput(
        "fuse.read",
        args.file_size * args.file_num as u64,
        start.elapsed(),
        args.file_num,
    )?;
    if let Some(expected) = expected {
        compare("fuse.read", args, &expected, &all)?;
    }
    Ok(())
}

async fn meta(fs: &CurvineFs, args: &Args) -> anyhow::Result<()> {
    let dir = format!("{}/meta", args.dir.trim_end_matches('/'));
    if fs.exists(&dir).await? {
        fs.delete(&dir, true).await.context("clear the meta dir")?;
    }
    fs.mkdir(&dir, true).await?;
    let n = args.file_num;
    let threads = args.client_threads;
    // Each thread has its own client connection, as separate processes would.
    let mut clients = Vec::new();
    for _ in 0..threads {
        clients.push(CurvineFs::connect(fs.conf().clone()).await?);
    }
    let dirs = args.meta_dirs;
    let phases: &[&'static str] = match dirs {
        0 => &["create", "stat", "delete"],
        _ => &["mkdir", "create", "stat", "delete"],
    };
    let phases = match args.meta_keep {
        true => &phases[..phases.len() - 1],
        false => phases,
    };
    for &phase in phases {
        // the stat phase goes over the files `stat_rounds` times
        let ops = match phase {
            "stat" => n * args.stat_rounds.max(1),
            "mkdir" => dirs,
            _ => n,
        };
        let next = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        let mut tasks = Vec::new();
        for c in &clients {
            let (c, next, dir) = (c.clone(), next.clone(), dir.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= ops {
                        break;
                    }
                    let p = match dirs {
                        _ if phase == "mkdir" => format!("{dir}/d{i}"),
                        0 => format!("{dir}/f{}", i % n),
                        _ => format!("{dir}/d{}/f{}", i % n % dirs, i % n),
                    };
                    match phase {
                        "mkdir" => {
                            c.mkdir(&p, false).await?;
                        }
                        "create" => {
                            c.create(&p, false).await?.close().await?;
                        }
                        "stat" => {
                            c.stat(&p).await?;
                        }
                        _ => c.delete(&p, false).await?,
                    }
                }
                anyhow::Ok(())
            }));
        }
        for t in tasks {
            t.await.context("meta task")??;
        }
        let secs = start.elapsed().as_secs_f64();
        let what = match phase {
            "mkdir" => format!("{dirs} directories"),
            "stat" if ops > n => format!("{n} files x {} rounds", ops / n),
            _ if dirs > 0 => format!("{n} files in {dirs} directories"),
            _ => format!("{n} files"),
        };
        say!(
            "meta.{phase}: {what}, {threads} clients, {secs:.2} s, {:.0} ops/s",
            ops as f64 / secs.max(1e-9)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_total_checksum_sees_order_and_repeats() {
        use super::total_crc;
        let a: Vec<(usize, u32)> = (0..64).map(|i| (i, 0)).collect();
        // equal CRCs 32 files apart cancelled in the old rotate-and-xor fold
        let mut b = a.clone();
        b[0].1 = 0xdead_beef;
        b[32].1 = 0xdead_beef;
        assert_ne!(total_crc(&a), total_crc(&b));
        let mut swapped = b.clone();
        swapped.swap(0, 1);
        assert_ne!(total_crc(&b), total_crc(&swapped));
        assert_eq!(total_crc(&b), total_crc(&b.clone()));
    }

    use super::*;

    #[test]
    fn fuse_actions_refuse_a_directory_that_is_not_on_a_mount() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("not/made/yet");
        let err = require_fuse(missing.to_str().unwrap()).unwrap_err();
        assert!(
            err.to_string().contains("is not on a FUSE mount"),
            "{err:#}"
        );
        assert!(!missing.exists(), "the check must not create the directory");
        assert!(!on_fuse(std::path::Path::new("/")).unwrap());
    }
}
