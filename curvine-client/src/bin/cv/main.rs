//! `cv`: command-line access to a Curvine cluster (`cv fs ...`, `cv report`, ...).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::bail;
use clap::{CommandFactory, Parser, Subcommand};
use curvine_client::stdout::{self, Stdout};
use curvine_client::{ClusterConf, CurvineFs};
use curvine_common::conf::CONF_ENV;

mod admin;
mod cluster;
mod copy;
mod format;
mod fs;
mod progress;

use crate::format::human;
use crate::progress::Mode;

#[derive(Parser)]
#[command(name = "cv", about = "Curvine command-line client", version)]
struct Cli {
    /// Cluster configuration file (default: $CURVINE_CONF_FILE, else
    /// ./conf/curvine-cluster.toml if present, else built-in defaults).
    #[arg(long, global = true, value_name = "FILE")]
    conf: Option<PathBuf>,
    /// No progress bar or progress lines on standard error.
    #[arg(short = 'q', long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// File system commands.
    #[command(subcommand)]
    Fs(fs::FsCmd),
    /// Cluster capacity and usage per worker and tier.
    Report {
        /// Print the report as one JSON object (the console's /api/report).
        #[arg(long)]
        json: bool,
    },
    /// Mount an under-store (S3 bucket, directory) at a Curvine path; alone, list the
    /// mounts. `cv mount resync PATH` checks PATH against the store now.
    Mount(cluster::MountArgs),
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
    /// Cluster administration (superuser).
    #[command(subcommand)]
    Admin(admin::AdminCmd),
    /// Print the version of cv.
    Version,
    /// Print a shell completion script: `source <(cv completions bash)`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
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
    let r = rt.block_on(run(cli));
    // dropping the runtime would wait for its blocking pool: a read a stopped copy left
    // there (of a slow local file) must not hold up the exit
    rt.shutdown_background();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        // the reader of our output went away (`cv fs cat F | head`): stop quietly, as cat does
        Err(e) if stdout::is_closed(e.as_ref()) => ExitCode::from(stdout::CLOSED_EXIT),
        Err(e) => {
            if let Some(i) = e.downcast_ref::<copy::Interrupted>() {
                eprintln!("cv: {i}");
                // the status a shell gives a command that signal ended
                return ExitCode::from(u8::try_from(128 + i.signal).unwrap_or(1));
            }
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

/// Help and version go out as clap prints them; a usage error becomes one line on
/// stderr (clap's message and the usage), exit status 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        // clap prints these to stdout (help on a bare `cv` to stderr) and knows the code
        let code = e.exit_code();
        return match e.print() {
            Ok(()) => ExitCode::from(u8::try_from(code).unwrap_or(2)),
            Err(_) => ExitCode::from(stdout::CLOSED_EXIT),
        };
    }
    eprintln!("cv: {}", one_line(&e.render().to_string()));
    ExitCode::from(2)
}

/// Clap's multi-line message as one line: the message up to its first blank line, and
/// the usage.
fn one_line(text: &str) -> String {
    let mut lines = text.lines();
    let mut msg: Vec<&str> = Vec::new();
    for l in lines.by_ref() {
        if l.trim().is_empty() {
            break;
        }
        msg.push(l.trim());
    }
    let mut line = msg.join(" ");
    if let Some(m) = line.strip_prefix("error: ") {
        line = m.to_string();
    }
    if let Some(u) = lines.find_map(|l| l.trim().strip_prefix("Usage: ")) {
        line.push_str(&format!(" (usage: {u})"));
    }
    line
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
    // the commands that need no cluster
    match cli.cmd {
        Cmd::Version => {
            let mut out = Stdout::lock();
            writeln!(out, "cv {}", env!("CARGO_PKG_VERSION"))?;
            return Ok(out.flush()?);
        }
        Cmd::Completions { shell } => {
            // into memory first: clap_complete panics on a failed write, and a reader
            // that goes away (`cv completions bash | head`) is not a bug
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "cv", &mut script);
            let mut out = Stdout::lock();
            out.write_all(&script)?;
            return Ok(out.flush()?);
        }
        _ => {}
    }
    let mode = Mode::detect(cli.quiet);
    let conf = load_conf(cli.conf.as_deref())?;
    let fs = CurvineFs::connect(conf).await?;
    match cli.cmd {
        Cmd::Report { json: false } => cluster::report(&fs).await,
        Cmd::Report { json: true } => cluster::report_json(&fs).await,
        Cmd::Fs(cmd) => fs::run(&fs, cmd, mode).await,
        Cmd::Mount(args) => cluster::mount_cmd(&fs, args).await,
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
        } => cluster::load_status(&fs, &s).await,
        Cmd::Load {
            cancel: Some(id), ..
        } => {
            let j = fs.cancel_load(id).await?;
            let mut out = Stdout::lock();
            writeln!(out, "{}", cluster::job_line(&j))?;
            Ok(out.flush()?)
        }
        Cmd::Load {
            recursive,
            no_wait,
            path: Some(path),
            ..
        } => cluster::load(&fs, &path, recursive, no_wait, mode).await,
        Cmd::Load { .. } => bail!("load: name a PATH, --status or --cancel"),
        Cmd::Persist { path } => {
            let r = fs.persist(&path).await?;
            let mut out = Stdout::lock();
            writeln!(out, "persisted {} files ({})", r.files, human(r.bytes))?;
            Ok(out.flush()?)
        }
        Cmd::Admin(cmd) => admin::run(&fs, cmd, mode).await,
        Cmd::Version | Cmd::Completions { .. } => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        use fs::FsCmd;
        let cli = Cli::try_parse_from(["cv", "--conf", "x.toml", "fs", "ls", "-l", "/a"]).unwrap();
        assert!(matches!(cli.cmd, Cmd::Fs(FsCmd::Ls { long: true, .. })));
        assert!(Cli::try_parse_from(["cv", "fs", "frobnicate"]).is_err());
        let cli = Cli::try_parse_from(["cv", "fs", "ln", "-s", "/t", "/l"]).unwrap();
        assert!(matches!(cli.cmd, Cmd::Fs(FsCmd::Ln { symbolic: true, .. })));
        let cli = Cli::try_parse_from(["cv", "-q", "fs", "cp", "-r", "/a", "/b"]).unwrap();
        assert!(
            cli.quiet
                && matches!(
                    cli.cmd,
                    Cmd::Fs(FsCmd::Cp {
                        recursive: true,
                        ..
                    })
                )
        );
        for bad in [
            &["fs", "setrep", "0", "/a"][..],
            &["fs", "setrep", "x", "/a"],
        ] {
            assert!(
                Cli::try_parse_from(["cv"].iter().chain(bad)).is_err(),
                "{bad:?}"
            );
        }
        assert!(Cli::try_parse_from(["cv", "completions", "tcsh"]).is_err());
        let cli = Cli::try_parse_from(["cv", "admin", "decommission", "--cancel", "3"]).unwrap();
        assert!(matches!(
            cli.cmd,
            Cmd::Admin(admin::AdminCmd::Decommission { cancel: true, .. })
        ));
        Cli::command().debug_assert();
    }

    #[test]
    fn usage_errors_fit_one_line() {
        let e = Cli::try_parse_from(["cv", "fs", "stat"]).err().unwrap();
        let l = one_line(&e.render().to_string());
        assert!(
            !l.contains('\n') && l.contains("<PATH>") && l.contains("usage: cv fs stat"),
            "{l}"
        );
    }
}
