//! `curvine-server master|worker --conf FILE`

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use curvine_common::ClusterConf;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(name = "curvine-server", version, about = "Curvine master and worker")]
struct Cli {
    #[command(subcommand)]
    role: Role,
}

#[derive(Subcommand)]
enum Role {
    /// Run the master (namespace, block map, worker registry).
    Master {
        /// Cluster configuration file (default: $CURVINE_CONF_FILE).
        #[arg(long)]
        conf: Option<PathBuf>,
        /// Set `section.key=value` over the file (repeatable): several masters on one
        /// host share a file, each with its own `master.node_id` and ports.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
    /// Run a worker (tiered block store and data plane).
    Worker {
        #[arg(long)]
        conf: Option<PathBuf>,
        /// Set `section.key=value` over the file (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = real_main(cli) {
        eprintln!("curvine-server: {e:#}");
        std::process::exit(1);
    }
}

/// Keep the master's heap from growing with its namespace, before any thread starts.
///
/// What the master holds is capped (memtables, block cache, change log, directory
/// cache), but with glibc's defaults its peak RSS still grew from 51 to 76-81 MiB between
/// 100,000 and 1,000,000 files while the bytes in use stayed near 31 MiB: the rest was
/// free memory kept in the heaps of up to 16 arenas (one per thread, 8 per core), and
/// large blocks (memtable arenas, compaction buffers) that glibc's sliding mmap threshold
/// moved into those heaps after the first one was freed. Two arenas and a fixed 128 KiB
/// threshold (large blocks mapped and unmapped, given back when freed): 58 MiB at a
/// million files, with no change in metadata throughput.
/// jemalloc for the whole process (RocksDB's C++ included) gave 67 MiB. The worker
/// keeps the defaults: its data-plane buffers are large and reused, and mapping each one
/// afresh would fault in every page on every request.
#[allow(unsafe_code)]
fn bound_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets allocator parameters; called before other threads.
        // It returns 0 when a value is refused, which leaves glibc's default in place.
        let (arenas, mmap) = unsafe {
            (
                libc::mallopt(libc::M_ARENA_MAX, 2),
                libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10),
            )
        };
        if arenas == 0 || mmap == 0 {
            eprintln!("curvine-server: glibc refused a malloc setting (arena_max {arenas}, mmap_threshold {mmap}); using its defaults");
        }
    }
}

/// How often the master hands its heaps' free pages back to the kernel.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Give the free pages inside the master's heaps back to the kernel every `TRIM_EVERY`.
/// The master's peak at 2,000,000 files: 63.1 MiB with this and `bound_malloc`, 71.1
/// with `bound_malloc` alone, 70.6-71.9 with glibc's defaults. Each call takes 0.4-1.0 ms.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim_malloc() {
    loop {
        std::thread::sleep(TRIM_EVERY);
        let t = std::time::Instant::now();
        // SAFETY: malloc_trim only releases free memory; callable from any thread.
        let released = unsafe { libc::malloc_trim(0) };
        tracing::debug!(
            released,
            took_us = t.elapsed().as_micros() as u64,
            "malloc_trim"
        );
    }
}

fn real_main(cli: Cli) -> anyhow::Result<()> {
    let (is_master, conf_path, sets) = match cli.role {
        Role::Master { conf, sets } => (true, conf, sets),
        Role::Worker { conf, sets } => (false, conf, sets),
    };
    if is_master {
        bound_malloc();
    }
    let path =
        conf_path.or_else(|| std::env::var_os(curvine_common::conf::CONF_ENV).map(PathBuf::from));
    let conf = match path {
        Some(p) => ClusterConf::load_with(&p, &sets),
        None => ClusterConf::load_default(None),
    }
    .context("load cluster conf")?;
    init_logging(&conf, if is_master { "master" } else { "worker" })?;
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if is_master {
        std::thread::Builder::new()
            .name("malloc-trim".into())
            .spawn(trim_malloc)
            .context("start the malloc-trim thread")?;
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if is_master {
        rt.worker_threads(conf.master_threads());
    }
    curvine_common::busy_poll::set(if is_master {
        conf.master.busy_poll.get()
    } else {
        conf.worker.busy_poll.get()
    });
    let rt = rt
        .enable_all()
        .on_thread_park(curvine_common::busy_poll::before_park)
        .thread_name(if is_master { "master" } else { "worker" })
        .build()
        .context("start tokio runtime")?;
    rt.block_on(async move {
        let cancel = CancellationToken::new();
        let signals = cancel.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutdown requested");
            signals.cancel();
        });
        if is_master {
            let addr = conf.master_addr();
            let listener = TcpListener::bind(&addr)
                .await
                .with_context(|| format!("bind master rpc address {addr}"))?;
            tracing::info!(%addr, "master listening");
            let web = curvine_common::web::bind(&conf.master.hostname, conf.master.web_port)
                .await
                .context("master.web_port")?;
            curvine_server::master::run_with_web(conf, listener, web, cancel).await?;
        } else {
            let addr = format!(
                "{}:{}",
                bind_host(&conf.worker.hostname),
                conf.worker.data_port
            );
            let listener = TcpListener::bind(&addr)
                .await
                .with_context(|| format!("bind worker data address {addr}"))?;
            tracing::info!(%addr, "worker listening");
            let host = bind_host(&conf.worker.hostname);
            let web = curvine_common::web::bind(host, conf.worker.web_port)
                .await
                .context("worker.web_port")?;
            curvine_server::worker::run_with_web(conf, listener, web, cancel).await?;
        }
        tracing::info!("stopped");
        Ok(())
    })
}

/// Names that resolve to this host are bound as given; anything else binds all interfaces.
fn bind_host(host: &str) -> &str {
    if host == "localhost" || host.parse::<std::net::IpAddr>().is_ok() {
        host
    } else {
        "0.0.0.0"
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            // Without signal handlers the process still stops on SIGTERM's default action.
            std::future::pending::<()>().await;
        }
    }
}

fn init_logging(conf: &ClusterConf, role: &str) -> anyhow::Result<()> {
    use tracing_subscriber::EnvFilter;
    curvine_common::web::set_recording(conf.web.metrics);
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&conf.log.level))
        .with_context(|| format!("log.level {:?}", conf.log.level))?;
    let filter = curvine_server::ufs::without_secret_logs(filter);
    Ok(curvine_common::logging::init(&conf.log, filter, role)?)
}
