//! `cv fs ...`: the file system commands.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use clap::Subcommand;
use curvine_client::proto::LocatedBlock;
use curvine_client::stdout::Stdout;
use curvine_client::{CurvineFs, FileStatus, FileType, FsError, SetAttr};
use curvine_common::report::{block_json, status_json, tiers_total};
use serde_json::{json, Value};

use crate::copy::{self, Loc};
use crate::format::{human, long_line, percent, stat_text, tier_name};
use crate::progress::{Mode, LINE_EVERY};

#[derive(Subcommand)]
pub enum FsCmd {
    /// List a directory (or show a file).
    Ls {
        /// Long format: mode, links, owner, size, mtime.
        #[arg(short = 'l')]
        long: bool,
        /// Print a JSON array of statuses.
        #[arg(long)]
        json: bool,
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
    /// Copy a local file (a directory with -r) into Curvine.
    Put {
        /// Replace destination files that exist.
        #[arg(short = 'f')]
        force: bool,
        /// Copy a directory and everything under it.
        #[arg(short = 'r')]
        recursive: bool,
        local: PathBuf,
        remote: String,
    },
    /// Copy a Curvine file (a directory with -r) to the local file system.
    Get {
        /// Replace destination files that exist.
        #[arg(short = 'f')]
        force: bool,
        /// Copy a directory and everything under it.
        #[arg(short = 'r')]
        recursive: bool,
        remote: String,
        local: PathBuf,
    },
    /// Copy a file (a directory with -r) within Curvine, or to or from a local path
    /// written file:///path.
    Cp {
        /// Replace destination files that exist.
        #[arg(short = 'f')]
        force: bool,
        /// Copy a directory and everything under it.
        #[arg(short = 'r')]
        recursive: bool,
        src: String,
        dst: String,
    },
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
    Stat {
        /// Print the status as a JSON object.
        #[arg(long)]
        json: bool,
        path: String,
    },
    /// Space used in bytes (recursive).
    Du {
        /// Only the total for PATH.
        #[arg(short = 's')]
        summary: bool,
        /// Print a JSON array of {path, bytes}.
        #[arg(long)]
        json: bool,
        path: String,
    },
    /// Directories, files and bytes at and under PATH.
    Count {
        /// Print a JSON object.
        #[arg(long)]
        json: bool,
        path: String,
    },
    /// Cluster capacity, used and free space.
    Df {
        /// Print a JSON object, with a row per tier.
        #[arg(long)]
        json: bool,
    },
    /// The blocks of a file: id, offset, length and the workers (and tier) holding each.
    Blocks {
        /// Print a JSON array of blocks.
        #[arg(long)]
        json: bool,
        path: String,
    },
    /// Set the replica count of a file, or of every file under a directory. More
    /// replicas are copied in the background; fewer only apply to new blocks.
    Setrep {
        /// Wait until every block has N live replicas.
        #[arg(short = 'w')]
        wait: bool,
        /// Replicas per block (1 to 16).
        #[arg(value_parser = clap::value_parser!(u32).range(1..=16))]
        n: u32,
        path: String,
    },
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

pub async fn run(fs: &CurvineFs, cmd: FsCmd, mode: Mode) -> anyhow::Result<()> {
    let mut out = Stdout::lock();
    match cmd {
        FsCmd::Ls { long, json, path } => {
            let st = fs.lstat(&path).await?;
            let entries = if st.file_type != FileType::Dir as i32 {
                vec![st]
            } else if long || json {
                fs.list(&path).await?
            } else {
                // names alone need read permission only, as for `ls` without -l
                fs.read_dir(&path).await?.entries
            };
            if json {
                let v: Vec<Value> = entries.iter().map(status_json).collect();
                writeln!(out, "{}", Value::Array(v))?;
            } else {
                for e in &entries {
                    if long {
                        writeln!(out, "{}", long_line(e))?;
                    } else {
                        writeln!(out, "{}", e.name)?;
                    }
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
            recursive,
            local,
            remote,
        } => {
            let o = copy::Opts {
                verb: "put",
                recursive,
                force,
                mode,
            };
            copy::copy(fs, &Loc::Local(local), &Loc::Cv(remote), &o).await?;
        }
        FsCmd::Get {
            force,
            recursive,
            remote,
            local,
        } => {
            let o = copy::Opts {
                verb: "get",
                recursive,
                force,
                mode,
            };
            copy::copy(fs, &Loc::Cv(remote), &Loc::Local(local), &o).await?;
        }
        FsCmd::Cp {
            force,
            recursive,
            src,
            dst,
        } => {
            let (src, dst) = (Loc::parse(&src)?, Loc::parse(&dst)?);
            let o = copy::Opts {
                verb: "cp",
                recursive,
                force,
                mode,
            };
            copy::copy(fs, &src, &dst, &o).await?;
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
        FsCmd::Stat { json, path } => {
            let s = fs.lstat(&path).await?;
            if json {
                writeln!(out, "{}", status_json(&s))?;
            } else {
                writeln!(out, "{}", stat_text(&s))?;
            }
        }
        FsCmd::Du {
            summary,
            json,
            path,
        } => {
            let st = fs.lstat(&path).await?;
            let entries = if summary || st.file_type != FileType::Dir as i32 {
                vec![st]
            } else {
                fs.list(&path).await?
            };
            let mut rows = Vec::with_capacity(entries.len());
            for e in entries {
                rows.push((summarize(fs, &e).await?.bytes, e.path));
            }
            if json {
                let v: Vec<Value> = rows
                    .iter()
                    .map(|(bytes, path)| json!({"path": path, "bytes": bytes}))
                    .collect();
                writeln!(out, "{}", Value::Array(v))?;
            } else {
                for (bytes, path) in &rows {
                    writeln!(out, "{bytes}\t{path}")?;
                }
            }
        }
        FsCmd::Count { json, path } => {
            let st = fs.lstat(&path).await?;
            let s = summarize(fs, &st).await?;
            if json {
                let v =
                    json!({"path": st.path, "dirs": s.dirs, "files": s.files, "bytes": s.bytes});
                writeln!(out, "{v}")?;
            } else {
                writeln!(out, "{:>12} {:>12} {:>16} PATH", "DIRS", "FILES", "BYTES")?;
                writeln!(
                    out,
                    "{:>12} {:>12} {:>16} {}",
                    s.dirs, s.files, s.bytes, st.path
                )?;
            }
        }
        FsCmd::Df { json } => df(fs, &mut out, json).await?,
        FsCmd::Blocks { json, path } => {
            let blocks = fs.block_locations(&path).await?;
            if json {
                let v: Vec<Value> = blocks.iter().map(block_json).collect();
                writeln!(out, "{}", Value::Array(v))?;
            } else {
                writeln!(
                    out,
                    "{:<20} {:>14} {:>14}  LOCATIONS",
                    "BLOCK", "OFFSET", "LENGTH"
                )?;
                for b in &blocks {
                    writeln!(
                        out,
                        "{:<20} {:>14} {:>14}  {}",
                        b.block_id,
                        b.offset,
                        b.len,
                        locations(b)
                    )?;
                }
            }
        }
        FsCmd::Setrep { wait, n, path } => {
            let files = setrep(fs, n, &path).await?;
            writeln!(out, "{path}: replicas set to {n} on {} files", files.len())?;
            out.flush()?;
            if wait {
                wait_replicated(fs, n, &files, mode).await?;
            }
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

async fn df(fs: &CurvineFs, out: &mut Stdout, json: bool) -> anyhow::Result<()> {
    let r = fs.report().await?;
    let free = r.capacity.saturating_sub(r.used);
    let tiers = tiers_total(&r);
    if json {
        let v = json!({
            "capacity": r.capacity,
            "used": r.used,
            "free": free,
            "tiers": tiers.iter().map(|t| json!({
                "tier": tier_name(t.tier),
                "capacity": t.capacity,
                "used": t.used,
                "free": t.capacity.saturating_sub(t.used),
            })).collect::<Vec<_>>(),
        });
        writeln!(out, "{v}")?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<5} {:>12} {:>12} {:>12} {:>5}",
        "Tier", "Capacity", "Used", "Free", "Use%"
    )?;
    let rows = tiers
        .iter()
        .map(|t| (tier_name(t.tier), t.capacity, t.used))
        .chain([("all", r.capacity, r.used)]);
    for (name, cap, used) in rows {
        writeln!(
            out,
            "{:<5} {:>12} {:>12} {:>12} {:>5}",
            name,
            human(cap),
            human(used),
            human(cap.saturating_sub(used)),
            percent(used, cap)
        )?;
    }
    Ok(())
}

/// `worker 1 127.0.0.1:4000 MEM, worker 2 ...`, or why no worker holds the block.
fn locations(b: &LocatedBlock) -> String {
    let holders: Vec<String> = b
        .locations
        .iter()
        .map(|l| {
            let a = l.address.clone().unwrap_or_default();
            format!(
                "worker {} {}:{} {}",
                l.worker_id,
                a.host,
                a.data_port,
                tier_name(l.tier)
            )
        })
        .collect();
    match (b.ufs.is_some(), holders.is_empty()) {
        (true, true) => "not cached".into(),
        (true, false) => format!("not cached; fetched by {}", holders.join(", ")),
        (false, true) => "none (missing)".into(),
        (false, false) => holders.join(", "),
    }
}

/// Directories, files (anything not a directory) and bytes of regular files.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub dirs: u64,
    pub files: u64,
    pub bytes: u64,
}

/// What is at and under `st`, listing directories as it goes.
async fn summarize(fs: &CurvineFs, st: &FileStatus) -> anyhow::Result<Summary> {
    let mut s = Summary::default();
    let add = |e: &FileStatus, s: &mut Summary| {
        if e.file_type == FileType::Dir as i32 {
            s.dirs += 1;
        } else {
            s.files += 1;
            if e.file_type == FileType::File as i32 {
                s.bytes += e.len;
            }
        }
    };
    add(st, &mut s);
    if st.file_type != FileType::Dir as i32 {
        return Ok(s);
    }
    let mut stack = vec![st.path.clone()];
    while let Some(dir) = stack.pop() {
        for e in fs.list(&dir).await? {
            add(&e, &mut s);
            if e.file_type == FileType::Dir as i32 {
                stack.push(e.path.clone());
            }
        }
    }
    Ok(s)
}

/// Set the replica count of `path`'s files (all of them under a directory); returns
/// their paths. The count is checked by the first file, before any is changed.
async fn setrep(fs: &CurvineFs, n: u32, path: &str) -> anyhow::Result<Vec<String>> {
    let st = fs.stat(path).await?;
    let mut files = Vec::new();
    if st.file_type == FileType::Dir as i32 {
        let mut stack = vec![st.path.clone()];
        while let Some(dir) = stack.pop() {
            for e in fs.list(&dir).await? {
                if e.file_type == FileType::Dir as i32 {
                    stack.push(e.path);
                } else if e.file_type == FileType::File as i32 {
                    files.push(e.path);
                }
            }
        }
    } else if st.file_type == FileType::File as i32 {
        files.push(st.path);
    } else {
        bail!("{path}: not a file or directory");
    }
    for f in &files {
        let attr = SetAttr {
            replicas: Some(n),
            ..Default::default()
        };
        fs.set_attr(f, attr).await?;
    }
    Ok(files)
}

/// Poll until every block of `files` has at least `n` live replicas.
async fn wait_replicated(
    fs: &CurvineFs,
    n: u32,
    files: &[String],
    mode: Mode,
) -> anyhow::Result<()> {
    let mut last_line = std::time::Instant::now();
    loop {
        let (mut short, mut total) = (0usize, 0usize);
        for f in files {
            let blocks = fs.block_locations(f).await?;
            total += blocks.len();
            short += blocks
                .iter()
                .filter(|b| b.locations.len() < n as usize)
                .count();
        }
        if short == 0 {
            return Ok(());
        }
        if mode != Mode::Quiet && last_line.elapsed() >= LINE_EVERY {
            writeln!(
                std::io::stderr(),
                "setrep: {}/{total} blocks have {n} replicas",
                total - short
            )?;
            last_line = std::time::Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
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
        bail!("{cmd}: {failed} of {} paths failed", paths.len());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse() {
        assert_eq!(parse_mode("755").unwrap(), 0o755);
        assert_eq!(parse_mode("4755").unwrap(), 0o4755);
        assert!(parse_mode("9").is_err());
        assert!(parse_mode("17777").is_err());
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
}
