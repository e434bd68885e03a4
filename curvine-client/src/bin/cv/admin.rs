//! `cv admin ...`: cluster administration that needs the superuser.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Subcommand;
use curvine_client::stdout::Stdout;
use curvine_client::CurvineFs;
use curvine_common::proto::WorkerReport;
use curvine_common::report::drain_state;
use indicatif::{ProgressBar, ProgressStyle};

use crate::progress::{Mode, LINE_EVERY};

#[derive(Subcommand)]
pub enum AdminCmd {
    /// Drain a worker: it takes no new blocks, its blocks are copied to other workers
    /// and then removed from it. Shows progress until it is empty (Ctrl-C stops
    /// watching; the drain goes on).
    Decommission {
        /// The worker's id, or its data address host:port (as `cv report` shows them).
        worker: String,
        /// End the drain: the worker takes new blocks again.
        #[arg(long)]
        cancel: bool,
        /// Start the drain and return at once.
        #[arg(long)]
        no_wait: bool,
    },
    /// List the masters of the group as its leader sees them: id, address, role
    /// (leader, follower, learner, unreachable), last log index and lag.
    Masters {
        /// Print a JSON list of objects (`id`, `address`, `role`, `last_log_index`,
        /// `lag`, `voter`).
        #[arg(long)]
        json: bool,
    },
    /// Add a master to the group: it must run already, configured with `node_id = ID`
    /// and not among its `master.peers`. It joins as a learner and becomes a voter once
    /// it has caught up with the log.
    AddMaster {
        /// The new master's id (a positive number no member has).
        id: u64,
        /// host:port of its RPC port.
        addr: String,
    },
    /// Remove a master from the group (stop it afterwards). The last voter stays.
    RemoveMaster { id: u64 },
}

pub async fn run(fs: &CurvineFs, cmd: AdminCmd, mode: Mode) -> anyhow::Result<()> {
    match cmd {
        AdminCmd::Decommission {
            worker,
            cancel,
            no_wait,
        } => decommission(fs, &worker, cancel, no_wait, mode).await,
        AdminCmd::Masters { json } => masters(fs, json).await,
        AdminCmd::AddMaster { id, addr } => {
            fs.add_master(id, &addr).await?;
            let mut out = Stdout::lock();
            writeln!(out, "master {id} at {addr}: added as a voter")?;
            Ok(out.flush()?)
        }
        AdminCmd::RemoveMaster { id } => {
            fs.remove_master(id).await?;
            let mut out = Stdout::lock();
            writeln!(out, "master {id}: removed from the group")?;
            Ok(out.flush()?)
        }
    }
}

async fn masters(fs: &CurvineFs, json: bool) -> anyhow::Result<()> {
    let r = fs.list_masters().await?;
    let mut out = Stdout::lock();
    if json {
        let list: Vec<serde_json::Value> = r
            .masters
            .iter()
            .map(|m| {
                serde_json::json!({
                    "id": m.id,
                    "address": m.address,
                    "role": m.role,
                    "last_log_index": m.last_log_index,
                    "lag": m.lag,
                    "voter": m.voter,
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::Value::Array(list))?;
        return Ok(out.flush()?);
    }
    writeln!(
        out,
        "{:>4}  {:<24} {:<12} {:>10} {:>8}",
        "ID", "ADDRESS", "ROLE", "LAST_INDEX", "LAG"
    )?;
    for m in &r.masters {
        writeln!(
            out,
            "{:>4}  {:<24} {:<12} {:>10} {:>8}",
            m.id, m.address, m.role, m.last_log_index, m.lag
        )?;
    }
    Ok(out.flush()?)
}

async fn decommission(
    fs: &CurvineFs,
    worker: &str,
    cancel: bool,
    no_wait: bool,
    mode: Mode,
) -> anyhow::Result<()> {
    let id = fs.decommission(worker, cancel).await?;
    if cancel || no_wait {
        let mut out = Stdout::lock();
        let what = if cancel {
            "no longer draining"
        } else {
            "draining"
        };
        writeln!(out, "worker {id}: {what}")?;
        return Ok(out.flush()?);
    }
    let bar = if mode == Mode::Bar {
        let b = ProgressBar::new(0);
        b.set_style(
            ProgressStyle::with_template(
                "{spinner} {wide_msg} [{bar:25}] {pos}/{len} blocks [{elapsed}]",
            )?
            .progress_chars("=> "),
        );
        b.enable_steady_tick(Duration::from_millis(200));
        b
    } else {
        ProgressBar::hidden()
    };
    let (started, mut last_line) = (Instant::now(), Instant::now());
    let mut err = std::io::stderr();
    let mut first: Option<u64> = None;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let w = this_worker(fs, id).await?;
        if !w.decommissioning {
            bar.abandon();
            bail!("worker {id}: the drain was cancelled");
        }
        if drain_state(&w) == "drained" {
            break;
        }
        if w.drain_scanned {
            // the most blocks seen on it: copies of blocks written before the drain
            // may still be arriving when it is first counted
            let total = first.get_or_insert(0);
            *total = (*total).max(w.draining_blocks);
            let total = *total;
            bar.set_length(total);
            bar.set_position(total.saturating_sub(w.draining_blocks));
        }
        bar.set_message(format!("worker {id}: {}", left(&w)));
        if mode == Mode::Lines && last_line.elapsed() >= LINE_EVERY {
            writeln!(err, "worker {id}: {}", left(&w))?;
            last_line = Instant::now();
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = &mut ctrl_c => {
                bar.abandon();
                writeln!(err, "worker {id}: {}; the drain goes on (`cv report` shows it)", left(&w))?;
                return Ok(());
            }
        }
    }
    bar.finish_and_clear();
    let mut out = Stdout::lock();
    writeln!(
        out,
        "worker {id}: drained in {:.1}s (no blocks left on it)",
        started.elapsed().as_secs_f64()
    )?;
    Ok(out.flush()?)
}

/// `12 blocks left`, or that the master has not counted them yet.
fn left(w: &WorkerReport) -> String {
    if w.drain_scanned {
        format!("{} blocks left", w.draining_blocks)
    } else {
        "counting blocks".into()
    }
}

async fn this_worker(fs: &CurvineFs, id: u32) -> anyhow::Result<WorkerReport> {
    let r = fs.report().await?;
    match r
        .workers
        .into_iter()
        .find(|w| w.address.as_ref().is_some_and(|a| a.worker_id == id))
    {
        Some(w) => Ok(w),
        None => bail!("worker {id} is not in the master's report"),
    }
}
