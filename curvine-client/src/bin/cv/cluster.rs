//! Cluster commands: `cv report`, `cv mount`/`umount`, and load jobs (`cv load`).

use std::io::Write;

use anyhow::bail;
use clap::Subcommand;
use curvine_client::proto::{LoadJob, LoadState};
use curvine_client::stdout::Stdout;
use curvine_client::{CurvineFs, StorageTier};

use crate::format::{human, json_str, percent};
use crate::progress::{byte_bar, Mode, LINE_EVERY};

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct MountArgs {
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
pub enum MountSub {
    /// Check PATH and what was loaded below it against the under-store now.
    Resync { path: String },
}

pub async fn mount_cmd(fs: &CurvineFs, a: MountArgs) -> anyhow::Result<()> {
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
pub async fn load(
    fs: &CurvineFs,
    path: &str,
    recursive: bool,
    no_wait: bool,
    mode: Mode,
) -> anyhow::Result<()> {
    use std::time::{Duration, Instant};

    let job = fs.submit_load(path, recursive).await?;
    if no_wait {
        let mut out = Stdout::lock();
        writeln!(out, "{}", job.id)?;
        return Ok(out.flush()?);
    }
    let bar = if mode == Mode::Bar {
        byte_bar(Some(0))?
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
        bar.set_message(format!(
            "load job {}: files {}/{}",
            job.id, j.files_done, j.files_total
        ));
        if j.state != LoadState::LoadRunning as i32 {
            break j;
        }
        if mode == Mode::Lines && last_line.elapsed() >= LINE_EVERY {
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
    if mode == Mode::Lines {
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
pub async fn load_status(fs: &CurvineFs, what: &str) -> anyhow::Result<()> {
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
pub fn job_line(j: &LoadJob) -> String {
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

pub async fn report_json(fs: &CurvineFs) -> anyhow::Result<()> {
    let r = fs.report().await?;
    let mut out = Stdout::lock();
    writeln!(out, "{:#}", curvine_common::report::report_json(&r))?;
    Ok(())
}

pub async fn report(fs: &CurvineFs) -> anyhow::Result<()> {
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
    if let Some(w) = &r.reporting {
        // blocks on the workers not heard from yet are not lost: their reads wait
        writeln!(
            out,
            "safe mode: {} (reads of blocks on the others wait; no re-replication)",
            curvine_common::report::reporting_line(w)
        )?;
    }
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
            "  worker {} {}:{} {}{}",
            a.worker_id,
            a.host,
            a.data_port,
            if w.alive { "alive" } else { "LOST" },
            match curvine_common::report::drain_state(w) {
                "none" => String::new(),
                "drained" => "  decommissioned (drained)".into(),
                _ if w.drain_scanned =>
                    format!("  decommissioning: {} blocks left", w.draining_blocks),
                _ => "  decommissioning".into(),
            }
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
