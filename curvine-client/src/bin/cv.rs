//! `cv`: command-line access to a Curvine cluster (`cv fs ...`, `cv report`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use curvine_client::proto::{LoadJob, LoadState};
use curvine_client::stdout::{self, Stdout};
use curvine_client::{
    ClusterConf, CreateOptions, CurvineFs, FileStatus, FileType, FsError, SetAttr, StorageTier,
};
use curvine_common::conf::CONF_ENV;

#[derive(Parser)]
#[command(name = "cv", about = "Curvine command-line client", version)]
struct Cli {
    /// Cluster configuration file (default: $CURVINE_CONF_FILE, else
    /// ./conf/curvine-cluster.toml if present, else built-in defaults).
    #[arg(long, global = true, value_name = "FILE")]
    conf: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// File system commands.
    #[command(subcommand)]
    Fs(FsCmd),
    /// Cluster capacity and usage per worker and tier.
    Report {
        /// Print the report as one JSON object (the console's /api/report).
        #[arg(long)]
        json: bool,
    },
    /// Mount an under-store (S3 bucket, directory) at a Curvine path; alone, list the
    /// mounts. `cv mount resync PATH` checks PATH against the store now.
    Mount(MountArgs),
    /// Remove a mount: what Curvine cached of it goes; the under-store is untouched.
    Umount { path: String },
    /// Drop the cached blocks of under-store files (their entries stay).
    Free { path: String },
    /// Upload now the files at or under PATH that the under-store does not hold yet
    /// (async mounts; a through write that failed).
    Persist { path: String },
    /// Load files of a mount into the cache: a job the master runs on the workers,
    /// shown with a progress bar until it ends.
    Load {
        /// Load every file under PATH.
        #[arg(short = 'r', long)]
        recursive: bool,
        /// Print the job id and return at once.
        #[arg(long)]
        no_wait: bool,
        /// Show job JOB (a number), or the jobs of a path.
        #[arg(long, value_name = "JOB|PATH", conflicts_with_all = ["cancel", "path"])]
        status: Option<String>,
        /// Cancel job JOB (what it loaded stays cached).
        #[arg(long, value_name = "JOB", conflicts_with = "path")]
        cancel: Option<u64>,
        #[arg(required_unless_present_any = ["status", "cancel"])]
        path: Option<String>,
    },
}

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
struct MountArgs {
    #[command(subcommand)]
    sub: Option<MountSub>,
    /// s3://bucket/prefix or file:///dir
    ufs: Option<String>,
    /// The Curvine directory (made if missing; must be empty if it exists).
    path: Option<String>,
    /// An OpenDAL config key of the service, e.g. endpoint=http://..., region=...
    #[arg(long = "option", short = 'o', value_name = "KEY=VALUE")]
    options: Vec<String>,
    /// through (default: close returns once the store holds the file), async (uploaded
    /// after close) or cache (never written to the store).
    #[arg(long)]
    mode: Option<String>,
    /// Age since the last open at which a persisted file's cached data goes (e.g. 7d).
    #[arg(long)]
    ttl: Option<String>,
    /// free (drop the cached blocks) or delete (the entry, from Curvine only).
    #[arg(long)]
    ttl_action: Option<String>,
    /// How long a loaded listing or status is trusted: a duration, never or always.
    #[arg(long)]
    sync_interval: Option<String>,
    /// Refuse every write under the mount (EROFS).
    #[arg(long)]
    read_only: bool,
    /// List as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum MountSub {
    /// Check PATH and what was loaded below it against the under-store now.
    Resync { path: String },
}

#[derive(Subcommand)]
enum FsCmd {
    /// List a directory (or show a file).
    Ls {
        /// Long format: mode, links, owner, size, mtime.
        #[arg(short = 'l')]
        long: bool,
        path: String,
    },
    /// Create a directory.
    Mkdir {
        /// Create missing parents; no error if it exists.
        #[arg(short = 'p')]
        parents: bool,
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Copy a local file into Curvine.
    Put {
        /// Overwrite an existing file.
        #[arg(short = 'f')]
        force: bool,
        local: PathBuf,
        remote: String,
    },
    /// Copy a Curvine file to the local file system.
    Get { remote: String, local: PathBuf },
    /// Print a file to standard output.
    Cat { path: String },
    /// Remove a file or directory.
    Rm {
        /// Remove directories and their contents.
        #[arg(short = 'r')]
        recursive: bool,
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Rename or move.
    Mv { src: String, dst: String },
    /// Show a path's status.
    Stat { path: String },
    /// Space used in bytes (recursive).
    Du {
        /// Only the total for PATH.
        #[arg(short = 's')]
        summary: bool,
        path: String,
    },
    /// Cluster capacity, used and free space.
    Df,
    /// Create an empty file, or update the modification time of an existing one.
    Touch {
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Change permission bits (octal MODE, e.g. 755).
    Chmod { mode: String, path: String },
    /// Change the owner and group: UID, UID:GID or :GID (numeric ids).
    Chown { owner: String, path: String },
    /// Create a hard link, or with -s a symbolic link.
    Ln {
        #[arg(short = 's')]
        symbolic: bool,
        target: String,
        link: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cv: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        // the reader of our output went away (`cv fs cat F | head`): stop quietly, as cat does
        Err(e) if stdout::is_closed(e.as_ref()) => ExitCode::from(stdout::CLOSED_EXIT),
        Err(e) => {
            // one line: the outermost context plus the root cause
            let root = e.root_cause().to_string();
            let top = e.to_string();
            if top == root {
                eprintln!("cv: {top}");
            } else {
                eprintln!("cv: {top}: {root}");
            }
            ExitCode::FAILURE
        }
    }
}

/// `op` on each of `paths` in turn, going on past failures as rm and mkdir do. One path:
/// its error is the command's. Several: each failure is a line on stderr naming its path,
/// and the command fails at the end if any did.
async fn each<F, Fut>(cmd: &str, paths: &[String], op: F) -> anyhow::Result<()>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    if let [one] = paths {
        return op(one.clone()).await;
    }
    let mut failed = 0;
    for p in paths {
        if let Err(e) = op(p.clone()).await {
            eprintln!("cv: {cmd} {p}: {}", e.root_cause());
            failed += 1;
        }
    }
    if failed > 0 {
        anyhow::bail!("{cmd}: {failed} of {} paths failed", paths.len());
    }
    Ok(())
}

/// Set a path's access and modification times to now, creating it empty if missing.
async fn touch(fs: &CurvineFs, path: String) -> anyhow::Result<()> {
    match fs.stat(&path).await {
        Ok(_) => {
            // the master's now: a writer who does not own the file may set that
            let attr = SetAttr {
                times_now: true,
                ..Default::default()
            };
            fs.set_attr(&path, attr).await?;
        }
        Err(FsError::NotFound { .. }) => {
            let mut w = fs.create(&path, false).await?;
            w.close().await?;
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

fn load_conf(arg: Option<&Path>) -> anyhow::Result<ClusterConf> {
    if let Some(p) = arg {
        return Ok(ClusterConf::load(p)?);
    }
    if let Some(p) = std::env::var_os(CONF_ENV) {
        return Ok(ClusterConf::load(Path::new(&p))?);
    }
    let local = Path::new("conf/curvine-cluster.toml");
    if local.exists() {
        return Ok(ClusterConf::load(local)?);
    }
    Ok(ClusterConf::default())
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let conf = load_conf(cli.conf.as_deref())?;
    let fs = CurvineFs::connect(conf).await?;
    match cli.cmd {
        Cmd::Report { json: false } => report(&fs).await,
        Cmd::Report { json: true } => report_json(&fs).await,
        Cmd::Fs(cmd) => fs_cmd(&fs, cmd).await,
        Cmd::Mount(args) => mount_cmd(&fs, args).await,
        Cmd::Umount { path } => Ok(fs.umount(&path).await?),
        Cmd::Free { path } => {
            let r = fs.free(&path).await?;
            let mut out = Stdout::lock();
            writeln!(
                out,
                "freed {} blocks ({}) of {} files",
                r.blocks,
                human(r.bytes),
                r.files
            )?;
            Ok(out.flush()?)
        }
        Cmd::Load {
            status: Some(s), ..
        } => load_status(&fs, &s).await,
        Cmd::Load {
            cancel: Some(id), ..
        } => {
            let j = fs.cancel_load(id).await?;
            let mut out = Stdout::lock();
            writeln!(out, "{}", job_line(&j))?;
            Ok(out.flush()?)
        }
        Cmd::Load {
            recursive,
            no_wait,
            path: Some(path),
            ..
        } => load(&fs, &path, recursive, no_wait).await,
        Cmd::Load { .. } => bail!("load: name a PATH, --status or --cancel"),
        Cmd::Persist { path } => {
            let r = fs.persist(&path).await?;
            let mut out = Stdout::lock();
            writeln!(out, "persisted {} files ({})", r.files, human(r.bytes))?;
            Ok(out.flush()?)
        }
    }
}

async fn fs_cmd(fs: &CurvineFs, cmd: FsCmd) -> anyhow::Result<()> {
    let mut out = Stdout::lock();
    match cmd {
        FsCmd::Ls { long, path } => {
            let st = fs.lstat(&path).await?;
            let entries = if st.file_type == FileType::Dir as i32 {
                fs.list(&path).await?
            } else {
                vec![st]
            };
            for e in &entries {
                if long {
                    writeln!(out, "{}", long_line(e))?;
                } else {
                    writeln!(out, "{}", e.name)?;
                }
            }
        }
        FsCmd::Mkdir { parents, paths } => {
            each("mkdir", &paths, |p| async move {
                fs.mkdir(&p, parents).await?;
                Ok(())
            })
            .await?;
        }
        FsCmd::Put {
            force,
            local,
            remote,
        } => {
            let mut src =
                std::fs::File::open(&local).with_context(|| format!("open {}", local.display()))?;
            let size = src
                .metadata()
                .with_context(|| format!("stat {}", local.display()))?
                .len();
            let remote = into_dir(fs, &remote, &local).await?;
            let opts = CreateOptions {
                overwrite: force,
                first_block: size > 0,
                ..Default::default()
            };
            let mut w = fs.create_with(&remote, opts).await?;
            let mut buf = vec![0u8; 4 << 20];
            loop {
                let n = src
                    .read(&mut buf)
                    .with_context(|| format!("read {}", local.display()))?;
                if n == 0 {
                    break;
                }
                w.write(&buf[..n]).await?;
            }
            w.close().await?;
        }
        FsCmd::Get { remote, local } => {
            let mut r = fs.open(&remote).await?;
            let local = if local.is_dir() {
                local.join(base_name(&remote))
            } else {
                local
            };
            let mut dst = std::fs::File::create(&local)
                .with_context(|| format!("create {}", local.display()))?;
            let mut buf = vec![0u8; 4 << 20];
            loop {
                let n = r.read_full(&mut buf).await?;
                if n == 0 {
                    break;
                }
                dst.write_all(&buf[..n])
                    .with_context(|| format!("write {}", local.display()))?;
            }
        }
        FsCmd::Cat { path } => {
            let mut r = fs.open(&path).await?;
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = r.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                out.write_all(&buf[..n])?;
            }
        }
        FsCmd::Rm { recursive, paths } => {
            each("rm", &paths, |p| async move {
                fs.delete(&p, recursive).await?;
                Ok(())
            })
            .await?;
        }
        FsCmd::Mv { src, dst } => fs.rename(&src, &dst).await?,
        FsCmd::Stat { path } => {
            let s = fs.lstat(&path).await?;
            writeln!(out, "{}", stat_text(&s))?;
        }
        FsCmd::Du { summary, path } => {
            let st = fs.lstat(&path).await?;
            if summary || st.file_type != FileType::Dir as i32 {
                writeln!(out, "{}\t{}", du(fs, &st).await?, st.path)?;
            } else {
                for e in fs.list(&path).await? {
                    writeln!(out, "{}\t{}", du(fs, &e).await?, e.path)?;
                }
            }
        }
        FsCmd::Df => {
            let r = fs.report().await?;
            let free = r.capacity.saturating_sub(r.used);
            writeln!(
                out,
                "{:>12} {:>12} {:>12} {:>5}",
                "Capacity", "Used", "Free", "Use%"
            )?;
            writeln!(
                out,
                "{:>12} {:>12} {:>12} {:>5}",
                human(r.capacity),
                human(r.used),
                human(free),
                percent(r.used, r.capacity)
            )?;
        }
        FsCmd::Touch { paths } => each("touch", &paths, |p| touch(fs, p)).await?,
        FsCmd::Chmod { mode, path } => {
            let mode = parse_mode(&mode)?;
            let attr = SetAttr {
                mode: Some(mode),
                ..Default::default()
            };
            fs.set_attr(&path, attr).await?;
        }
        FsCmd::Chown { owner, path } => {
            let (uid, gid) = parse_owner(&owner)?;
            let attr = SetAttr {
                uid,
                gid,
                ..Default::default()
            };
            fs.set_attr(&path, attr).await?;
        }
        FsCmd::Ln {
            symbolic,
            target,
            link,
        } => {
            if symbolic {
                fs.symlink(&target, &link).await?;
            } else {
                fs.link(&target, &link).await?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

async fn mount_cmd(fs: &CurvineFs, a: MountArgs) -> anyhow::Result<()> {
    use curvine_common::mount;
    let mut out = Stdout::lock();
    if let Some(MountSub::Resync { path }) = a.sub {
        let r = fs.resync(&path).await?;
        writeln!(
            out,
            "resynced {path}: {} directories listed, {} entries, {} new or changed, {} removed",
            r.dirs, r.entries, r.changed, r.removed
        )?;
        return Ok(out.flush()?);
    }
    let (ufs, path) = match (a.ufs, a.path) {
        (Some(u), Some(p)) => (u, p),
        (Some(_), None) => bail!("mount: give both UFS_URI and CV_PATH"),
        _ => {
            let mounts = fs.mounts().await?;
            if a.json {
                writeln!(out, "{}", mounts_json(&mounts))?;
            } else {
                for m in &mounts {
                    let mut opts: Vec<String> =
                        m.options.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    opts.sort();
                    writeln!(
                        out,
                        "{} on {} (mode={}, sync_interval={}{}{}{})",
                        m.ufs_uri,
                        m.path,
                        mount::mode_name(m.mode),
                        mount::sync_interval_name(m.sync_interval_ms),
                        if m.ttl_ms > 0 {
                            format!(
                                ", ttl={}s, ttl_action={}",
                                m.ttl_ms / 1000,
                                mount::ttl_action_name(m.ttl_action)
                            )
                        } else {
                            String::new()
                        },
                        if m.read_only { ", read-only" } else { "" },
                        if opts.is_empty() {
                            String::new()
                        } else {
                            format!(", {}", opts.join(","))
                        },
                    )?;
                }
            }
            return Ok(out.flush()?);
        }
    };
    let mut options = std::collections::HashMap::new();
    for o in &a.options {
        let Some((k, v)) = o.split_once('=') else {
            bail!("--option {o:?}: expected KEY=VALUE");
        };
        options.insert(k.trim().to_string(), v.to_string());
    }
    let ttl = a.ttl.unwrap_or_default();
    let info = curvine_common::proto::MountInfo {
        path,
        ufs_uri: ufs,
        options,
        mode: mount::parse_mode(a.mode.as_deref().unwrap_or("")).map_err(anyhow::Error::msg)?
            as i32,
        ttl_ms: mount::parse_ttl(&ttl).map_err(anyhow::Error::msg)?,
        ttl_action: mount::parse_ttl_action(a.ttl_action.as_deref().unwrap_or(""), &ttl)
            .map_err(anyhow::Error::msg)? as i32,
        sync_interval_ms: mount::parse_sync_interval(a.sync_interval.as_deref().unwrap_or(""))
            .map_err(anyhow::Error::msg)?,
        read_only: a.read_only,
        ..Default::default()
    };
    let m = fs.mount(info).await?;
    writeln!(out, "mounted {} on {}", m.ufs_uri, m.path)?;
    Ok(out.flush()?)
}

fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn mounts_json(mounts: &[curvine_common::proto::MountInfo]) -> String {
    use curvine_common::mount;
    let items: Vec<String> = mounts
        .iter()
        .map(|m| {
            let mut opts: Vec<(&String, &String)> = m.options.iter().collect();
            opts.sort();
            let opts: Vec<String> = opts
                .iter()
                .map(|(k, v)| format!("{}:{}", json_str(k), json_str(v)))
                .collect();
            format!(
                "{{\"id\":{},\"path\":{},\"ufs\":{},\"mode\":\"{}\",\"sync_interval_ms\":{},\"ttl_ms\":{},\"ttl_action\":\"{}\",\"read_only\":{},\"options\":{{{}}}}}",
                m.mount_id,
                json_str(&m.path),
                json_str(&m.ufs_uri),
                mount::mode_name(m.mode),
                m.sync_interval_ms,
                m.ttl_ms,
                mount::ttl_action_name(m.ttl_action),
                m.read_only,
                opts.join(",")
            )
        })
        .collect();
    format!("[{}]", items.join(","))
}

/// Submit a load job for `path` and follow it to its end: a progress bar on a
/// terminal, a line every few seconds otherwise, then a summary. Ctrl-C cancels the
/// job. Fails when the job did not load everything.
async fn load(fs: &CurvineFs, path: &str, recursive: bool, no_wait: bool) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    use std::time::{Duration, Instant};

    let job = fs.submit_load(path, recursive).await?;
    if no_wait {
        let mut out = Stdout::lock();
        writeln!(out, "{}", job.id)?;
        return Ok(out.flush()?);
    }
    let tty = std::io::stderr().is_terminal();
    let bar = if tty {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} load {prefix} [{elapsed_precise}] [{wide_bar}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}",
            )?
            .progress_chars("=> "),
        );
        b.set_prefix(format!("job {}", job.id));
        b.enable_steady_tick(Duration::from_millis(200));
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut last_line = Instant::now();
    let mut err = std::io::stderr();
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let j = loop {
        let j = fs.load_job(job.id).await?;
        bar.set_length(j.bytes_total);
        bar.set_position(j.bytes_done);
        bar.set_message(format!("files {}/{}", j.files_done, j.files_total));
        if j.state != LoadState::LoadRunning as i32 {
            break j;
        }
        if !tty && last_line.elapsed() >= Duration::from_secs(2) {
            writeln!(err, "{}", job_line(&j))?;
            last_line = Instant::now();
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = &mut ctrl_c => {
                bar.abandon();
                let j = fs.cancel_load(job.id).await?;
                writeln!(err, "{}", job_line(&j))?;
                bail!("load {path}: job {} cancelled", job.id);
            }
        }
    };
    bar.finish_and_clear();
    if !tty {
        writeln!(err, "{}", job_line(&j))?;
    }
    let secs = (j.elapsed_ms as f64 / 1000.0).max(1e-3);
    let mut out = Stdout::lock();
    writeln!(
        out,
        "loaded {} files, {} in {:.1}s ({}/s), job {}",
        j.files_done,
        human(j.bytes_done),
        secs,
        human((j.bytes_done as f64 / secs) as u64),
        j.id
    )?;
    out.flush()?;
    for e in &j.errors {
        writeln!(err, "load: {e}")?;
    }
    match LoadState::try_from(j.state) {
        Ok(LoadState::LoadDone) => Ok(()),
        Ok(LoadState::LoadCancelled) => bail!("load {path}: job {} was cancelled", j.id),
        _ => bail!(
            "load {path}: {} of {} files not loaded ({} blocks failed)",
            j.files_failed,
            j.files_total,
            j.blocks_failed
        ),
    }
}

/// `cv load --status JOB|PATH`: a line per job.
async fn load_status(fs: &CurvineFs, what: &str) -> anyhow::Result<()> {
    let jobs = match what.parse::<u64>() {
        Ok(id) => vec![fs.load_job(id).await?],
        Err(_) => fs.load_jobs(what).await?,
    };
    if jobs.is_empty() {
        bail!("load: no job for {what}");
    }
    let mut out = Stdout::lock();
    for j in &jobs {
        writeln!(out, "{}", job_line(j))?;
        for e in &j.errors {
            writeln!(out, "  error: {e}")?;
        }
    }
    Ok(out.flush()?)
}

/// One line saying where load job `j` is.
fn job_line(j: &LoadJob) -> String {
    let state = match LoadState::try_from(j.state) {
        Ok(LoadState::LoadRunning) => "running",
        Ok(LoadState::LoadDone) => "done",
        Ok(LoadState::LoadFailed) => "failed",
        Ok(LoadState::LoadCancelled) => "cancelled",
        Err(_) => "unknown",
    };
    let secs = (j.elapsed_ms as f64 / 1000.0).max(1e-3);
    format!(
        "job {} {} {}: files {}/{} ({} failed)  {}/{}  blocks {}/{} ({} in flight, {} failed)  {}/s  {:.1}s",
        j.id,
        state,
        j.path,
        j.files_done,
        j.files_total,
        j.files_failed,
        human(j.bytes_done),
        human(j.bytes_total),
        j.blocks_done,
        j.blocks_total,
        j.blocks_in_flight,
        j.blocks_failed,
        human((j.bytes_done as f64 / secs) as u64),
        secs
    )
}

/// `put` into an existing directory keeps the local file's name.
async fn into_dir(fs: &CurvineFs, remote: &str, local: &Path) -> anyhow::Result<String> {
    match fs.stat(remote).await {
        Ok(st) if st.file_type == FileType::Dir as i32 => {
            let name = local
                .file_name()
                .and_then(|n| n.to_str())
                .context("the local path has no file name")?;
            Ok(curvine_common::path::child(st.path.trim_end_matches('/'), name).replace("//", "/"))
        }
        _ => Ok(remote.to_string()),
    }
}

fn base_name(path: &str) -> &str {
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(path)
}

/// Bytes under `st`, recursively (symlinks count as 0).
async fn du(fs: &CurvineFs, st: &FileStatus) -> anyhow::Result<u64> {
    if st.file_type != FileType::Dir as i32 {
        return Ok(if st.file_type == FileType::File as i32 {
            st.len
        } else {
            0
        });
    }
    let mut total = 0;
    let mut stack = vec![st.path.clone()];
    while let Some(dir) = stack.pop() {
        for e in fs.list(&dir).await? {
            if e.file_type == FileType::Dir as i32 {
                stack.push(e.path.clone());
            } else if e.file_type == FileType::File as i32 {
                total += e.len;
            }
        }
    }
    Ok(total)
}

async fn report_json(fs: &CurvineFs) -> anyhow::Result<()> {
    let r = fs.report().await?;
    let mut out = Stdout::lock();
    writeln!(out, "{:#}", curvine_common::report::report_json(&r))?;
    Ok(())
}

async fn report(fs: &CurvineFs) -> anyhow::Result<()> {
    let r = fs.report().await?;
    let mut out = Stdout::lock();
    writeln!(out, "cluster id: {}", r.cluster_id)?;
    writeln!(
        out,
        "capacity: {}  used: {} ({})  free: {}",
        human(r.capacity),
        human(r.used),
        percent(r.used, r.capacity),
        human(r.capacity.saturating_sub(r.used))
    )?;
    writeln!(
        out,
        "files: {}  dirs: {}  blocks: {}",
        r.files, r.dirs, r.blocks
    )?;
    writeln!(
        out,
        "replication: {} under-replicated  {} missing  copies {} in flight, {} done, {} failed  bad replicas {}",
        r.under_replicated,
        r.missing_blocks,
        r.copies_in_flight,
        r.copies_done,
        r.copies_failed,
        r.bad_replicas
    )?;
    writeln!(out, "master tasks:")?;
    for t in &r.tasks {
        writeln!(out, "  {}", task_line(t))?;
    }
    writeln!(out, "load jobs running: {}", r.load_jobs.len())?;
    for j in &r.load_jobs {
        writeln!(out, "  {}", job_line(j))?;
    }
    writeln!(
        out,
        "persist backlog: {} files ({})  {} uploads failed",
        r.persist_pending,
        human(r.persist_pending_bytes),
        r.persist_failed
    )?;
    let live = r.workers.iter().filter(|w| w.alive).count();
    writeln!(
        out,
        "workers: {} live, {} lost",
        live,
        r.workers.len() - live
    )?;
    for w in &r.workers {
        let a = w.address.clone().unwrap_or_default();
        writeln!(
            out,
            "  worker {} {}:{} {}",
            a.worker_id,
            a.host,
            a.data_port,
            if w.alive { "alive" } else { "LOST" }
        )?;
        if w.scrubbed_bytes > 0 || w.copies_in_flight > 0 {
            writeln!(
                out,
                "    scrubbed {}  copies in flight {}",
                human(w.scrubbed_bytes),
                w.copies_in_flight
            )?;
        }
        for t in &w.tiers {
            let tier = StorageTier::try_from(t.tier).unwrap_or(StorageTier::Unspecified);
            writeln!(
                out,
                "    {:<4} capacity {:>10}  used {:>10} ({:>4})  blocks {:>8}  {}",
                tier.name(),
                human(t.capacity),
                human(t.used),
                percent(t.used, t.capacity),
                t.blocks,
                t.dir
            )?;
        }
        for t in &w.tasks {
            writeln!(out, "    task {}", task_line(t))?;
        }
    }
    out.flush()?;
    if r.workers.is_empty() {
        bail!("no workers registered");
    }
    Ok(())
}

/// `name state [what it does | last error]  runs N, errors M`.
fn task_line(t: &curvine_common::proto::TaskReport) -> String {
    let state = curvine_common::tasks::state_name(t.state);
    let what = match state {
        "busy" => format!(" ({})", t.detail),
        "error" => format!(" ({})", t.last_error),
        _ => String::new(),
    };
    format!(
        "{:<14} {state}{what}  runs {}, errors {}",
        t.name, t.runs, t.errors
    )
}

fn parse_mode(s: &str) -> anyhow::Result<u32> {
    let m = u32::from_str_radix(s, 8)
        .map_err(|_| anyhow::anyhow!("bad mode {s:?}: expected octal, e.g. 755"))?;
    if m > 0o7777 {
        bail!("bad mode {s:?}: at most 7777");
    }
    Ok(m)
}

/// `UID`, `UID:GID`, `UID:` or `:GID` (numeric) -> the ids to change.
fn parse_owner(s: &str) -> anyhow::Result<(Option<u32>, Option<u32>)> {
    let id = |t: &str| -> anyhow::Result<Option<u32>> {
        if t.is_empty() {
            return Ok(None);
        }
        t.parse()
            .map(Some)
            .map_err(|_| anyhow::anyhow!("bad owner {s:?}: expected numeric UID[:GID]"))
    };
    let (u, g) = s.split_once(':').unwrap_or((s, ""));
    let ids = (id(u)?, id(g)?);
    if ids == (None, None) {
        bail!("bad owner {s:?}: expected numeric UID[:GID]");
    }
    Ok(ids)
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn percent(used: u64, cap: u64) -> String {
    if cap == 0 {
        return "-".into();
    }
    format!("{:.0}%", used as f64 * 100.0 / cap as f64)
}

fn mode_string(st: &FileStatus) -> String {
    let kind = match FileType::try_from(st.file_type) {
        Ok(FileType::Dir) => 'd',
        Ok(FileType::Symlink) => 'l',
        Ok(FileType::Fifo) => 'p',
        Ok(FileType::Socket) => 's',
        Ok(FileType::CharDevice) => 'c',
        Ok(FileType::BlockDevice) => 'b',
        _ => '-',
    };
    let mut s = String::with_capacity(10);
    s.push(kind);
    let m = st.mode;
    for (shift, special, special_ch) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
        let bits = (m >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        let x = bits & 1 != 0;
        s.push(match (m & special != 0, x) {
            (true, true) => special_ch,
            (true, false) => special_ch.to_ascii_uppercase(),
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// `YYYY-MM-DD HH:MM` (UTC) from milliseconds since the epoch.
fn format_time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // civil-from-days (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60
    )
}

fn long_line(e: &FileStatus) -> String {
    let mut name = e.name.clone();
    if e.file_type == FileType::Symlink as i32 {
        name = format!("{name} -> {}", e.symlink_target);
    }
    format!(
        "{} {:>3} {:>6} {:>6} {:>10} {} {}",
        mode_string(e),
        e.nlink,
        e.uid,
        e.gid,
        human(e.len),
        format_time(e.mtime_ms),
        name
    )
}

fn stat_text(s: &FileStatus) -> String {
    let kind = match FileType::try_from(s.file_type) {
        Ok(FileType::Dir) => "directory",
        Ok(FileType::Symlink) => "symlink",
        Ok(FileType::Fifo) => "fifo",
        Ok(FileType::Socket) => "socket",
        Ok(FileType::CharDevice) => "character device",
        Ok(FileType::BlockDevice) => "block device",
        _ => "file",
    };
    let tier = StorageTier::try_from(s.storage_tier).unwrap_or(StorageTier::Unspecified);
    let mut t = format!(
        "path: {}\ntype: {kind}\nid: {}\nsize: {} ({})\nmode: {} ({:04o})\nuid: {}\ngid: {}\nlinks: {}\nmtime: {}\natime: {}\nctime: {}\nblock size: {}\nreplicas: {}\ntier: {}\ncomplete: {}",
        s.path,
        s.id,
        s.len,
        human(s.len),
        mode_string(s),
        s.mode & 0o7777,
        s.uid,
        s.gid,
        s.nlink,
        format_time(s.mtime_ms),
        format_time(s.atime_ms),
        format_time(s.ctime_ms),
        human(s.block_size),
        s.replicas,
        tier.name(),
        s.complete
    );
    if !s.symlink_target.is_empty() {
        t.push_str(&format!("\ntarget: {}", s.symlink_target));
    }
    if !s.ufs_key.is_empty() {
        t.push_str(&format!(
            "\nunder-store key: {}\npersisted: {}",
            s.ufs_key, s.persisted
        ));
    }
    if s.file_type == FileType::Dir as i32 {
        t.push_str(&format!("\nchildren: {}", s.children));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_human_readable() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(4 << 30), "4.0 GiB");
        assert_eq!(percent(1, 4), "25%");
        assert_eq!(percent(1, 0), "-");
    }

    #[test]
    fn modes_parse_and_print() {
        assert_eq!(parse_mode("755").unwrap(), 0o755);
        assert_eq!(parse_mode("4755").unwrap(), 0o4755);
        assert!(parse_mode("9").is_err());
        assert!(parse_mode("17777").is_err());
        let st = FileStatus {
            file_type: FileType::Dir as i32,
            mode: 0o1777,
            ..Default::default()
        };
        assert_eq!(mode_string(&st), "drwxrwxrwt");
        let st = FileStatus {
            file_type: FileType::File as i32,
            mode: 0o4644,
            ..Default::default()
        };
        assert_eq!(mode_string(&st), "-rwSr--r--");
    }

    #[test]
    fn owners_parse() {
        assert_eq!(parse_owner("5001").unwrap(), (Some(5001), None));
        assert_eq!(parse_owner("5001:7001").unwrap(), (Some(5001), Some(7001)));
        assert_eq!(parse_owner(":7001").unwrap(), (None, Some(7001)));
        for bad in ["", ":", "alice", "1:x", "-1"] {
            assert!(parse_owner(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn times_format_in_utc() {
        assert_eq!(format_time(0), "1970-01-01 00:00");
        assert_eq!(format_time(951_782_400_000), "2000-02-29 00:00");
        assert_eq!(format_time(1_700_000_000_000), "2023-11-14 22:13");
    }

    #[test]
    fn conf_file_argument_is_used_and_errors_name_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "[client]\nmaster_addrs = [\"10.0.0.1:1\"]\n").unwrap();
        let c = load_conf(Some(&p)).unwrap();
        assert_eq!(c.client.master_addrs, vec!["10.0.0.1:1".to_string()]);
        std::fs::write(&p, "[client]\nbogus = 1\n").unwrap();
        let e = load_conf(Some(&p)).unwrap_err().to_string();
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn cli_parses_subcommands() {
        let cli = Cli::try_parse_from(["cv", "--conf", "x.toml", "fs", "ls", "-l", "/a"]).unwrap();
        assert!(matches!(cli.cmd, Cmd::Fs(FsCmd::Ls { long: true, .. })));
        assert!(Cli::try_parse_from(["cv", "fs", "frobnicate"]).is_err());
        let cli = Cli::try_parse_from(["cv", "fs", "ln", "-s", "/t", "/l"]).unwrap();
        assert!(matches!(cli.cmd, Cmd::Fs(FsCmd::Ln { symbolic: true, .. })));
        assert_eq!(base_name("/a/b/c"), "c");
    }
}
