//! `cv fs ...`: the file system commands.

use std::io::Write;
use std::path::PathBuf;

use anyhow::bail;
use clap::Subcommand;
use curvine_client::stdout::Stdout;
use curvine_client::{CurvineFs, FileStatus, FileType, FsError, SetAttr};

use crate::copy::{self, Loc};
use crate::format::{human, long_line, percent, stat_text};
use crate::progress::Mode;

#[derive(Subcommand)]
pub enum FsCmd {
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

pub async fn run(fs: &CurvineFs, cmd: FsCmd, mode: Mode) -> anyhow::Result<()> {
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
