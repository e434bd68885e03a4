//! `curvine-fuse --conf FILE --mnt-path DIR [--fs-path /sub] [--read-only]`: mount a
//! Curvine directory. SIGTERM/SIGINT unmount cleanly; a stale mount at DIR (from a
//! crashed daemon) is replaced.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use curvine_client::CurvineFs;
use curvine_common::ClusterConf;
use curvine_fuse::{CurvineFuse, MountOptions};
use tokio::signal::unix::{signal, SignalKind};
use tracing::{error, info, warn};

#[derive(Parser, Debug)]
#[command(name = "curvine-fuse", about = "Mount a Curvine file system with FUSE")]
struct Args {
    /// Cluster configuration (default: $CURVINE_CONF_FILE).
    #[arg(long)]
    conf: Option<PathBuf>,
    /// Mount point (default: fuse.mnt_path).
    #[arg(long)]
    mnt_path: Option<PathBuf>,
    /// Curvine directory to show at the mount point (default: fuse.fs_path).
    #[arg(long)]
    fs_path: Option<String>,
    /// Mount read-only (writes fail with EROFS).
    #[arg(long)]
    read_only: bool,
    /// Directory for spilled dirty file content (default: fuse.spill_dir, else the
    /// system temp dir).
    #[arg(long)]
    spill_dir: Option<PathBuf>,
}

fn main() {
    let args = Args::parse();
    let conf = match ClusterConf::load_default(args.conf.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("curvine-fuse: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = init_log(&conf) {
        eprintln!("curvine-fuse: {e}");
        std::process::exit(2);
    }
    // one worker per core: more only adds context switches to the request path
    let workers = match conf.fuse.threads {
        0 => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .clamp(2, 8),
        n => n,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("curvine-fuse")
        .on_thread_park(curvine_common::busy_poll::before_park)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("curvine-fuse: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = rt.block_on(run(args, conf)) {
        error!("{e:#}");
        eprintln!("curvine-fuse: {e:#}");
        std::process::exit(1);
    }
}

/// The filter for `log.level`. fuse3 wraps every request it serves in an INFO span
/// holding the request formatted with `Debug`; at the default level that formatting
/// cost more CPU than serving a 4 KiB read. fuse3 stays at `warn` unless the level
/// names it (`info,fuse3=debug`).
fn log_filter(level: &str) -> String {
    if level.contains("fuse3") {
        level.to_string()
    } else {
        format!("{level},fuse3=warn")
    }
}

fn init_log(conf: &ClusterConf) -> curvine_common::FsResult<()> {
    curvine_common::web::set_recording(conf.web.metrics);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(log_filter(&conf.log.level)));
    curvine_common::logging::init(&conf.log, filter, "fuse")
}

async fn run(args: Args, conf: ClusterConf) -> anyhow::Result<()> {
    let mut fuse_conf = conf.fuse.clone();
    if let Some(p) = args.fs_path {
        fuse_conf.fs_path = p;
    }
    if args.read_only {
        fuse_conf.read_only = true;
    }
    let mnt = args.mnt_path.unwrap_or_else(|| fuse_conf.mnt_path.clone());
    let spill = args.spill_dir.unwrap_or_else(|| {
        if fuse_conf.spill_dir.as_os_str().is_empty() {
            std::env::temp_dir()
        } else {
            fuse_conf.spill_dir.clone()
        }
    });
    std::fs::create_dir_all(&spill)
        .with_context(|| format!("create the spill directory {}", spill.display()))?;
    let opts = MountOptions::from_conf(&fuse_conf, spill);

    let mnt = curvine_fuse::prepare_mount_point(&mnt)?;
    let mounted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let web_stop = tokio_util::sync::CancellationToken::new();
    let _web_stop = web_stop.clone().drop_guard();
    curvine_fuse::web::start(&conf, mounted.clone(), web_stop).await?;
    // before connecting, so the master and worker connections are polled too
    curvine_common::busy_poll::set(fuse_conf.busy_poll.get());
    let fs = CurvineFs::connect(conf)
        .await
        .context("connect to the master")?;
    let fuse = CurvineFuse::new(fs, opts)
        .await
        .with_context(|| format!("open {}", fuse_conf.fs_path))?;
    let mut handle = curvine_fuse::mount(fuse, &mnt).await?;
    mounted.store(true, std::sync::atomic::Ordering::Release);
    if curvine_common::busy_poll::global().enabled() {
        match curvine_fuse::fuse_device_fd() {
            Some(fd) => curvine_common::busy_poll::global().watch(fd),
            None => warn!("no /dev/fuse descriptor found; requests are not busy-polled"),
        }
        // the callers wait in the kernel on this machine: keep their CPUs from halting
        curvine_common::busy_poll::keep_a_cpu_awake();
    }
    {
        let mnt = mnt.clone();
        tokio::task::spawn_blocking(move || curvine_fuse::tune_read_ahead(&mnt));
    }
    info!(mnt = %mnt.display(), fs_path = %fuse_conf.fs_path, "curvine-fuse serving");

    let mut term = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("install SIGINT handler")?;
    let why = tokio::select! {
        r = &mut handle => {
            // unmounted from outside (fusermount3 -u / umount)
            r.context("fuse session")?;
            info!("unmounted externally");
            return Ok(());
        }
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    info!(signal = why, "unmounting");
    mounted.store(false, std::sync::atomic::Ordering::Release);
    match tokio::time::timeout(Duration::from_secs(20), handle.unmount()).await {
        Ok(Ok(())) => info!("unmounted"),
        Ok(Err(e)) => {
            warn!(error = %e, "unmount failed (busy?), detaching lazily");
            curvine_fuse::lazy_unmount(&mnt)?;
        }
        Err(_) => {
            warn!("unmount timed out, detaching lazily");
            curvine_fuse::lazy_unmount(&mnt)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::log_filter;

    #[test]
    fn fuse3_is_quiet_unless_named() {
        assert_eq!(log_filter("info"), "info,fuse3=warn");
        assert_eq!(log_filter("info,fuse3=debug"), "info,fuse3=debug");
        // the result must parse as a filter
        for l in ["info", "debug", "warn,curvine_fuse=debug"] {
            tracing_subscriber::EnvFilter::try_new(log_filter(l)).unwrap();
        }
    }
}
