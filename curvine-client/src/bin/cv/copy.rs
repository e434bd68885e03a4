//! `cv fs put`, `get` and `cp`: copy a file, or with `-r` a directory tree, from the
//! local file system into Curvine, out of it, or within it, showing progress.
//!
//! The whole source is listed before anything is written, so a source that cannot be
//! copied (a missing path, a directory without `-r`, a socket inside the tree) and a
//! destination file that exists without `-f` fail with nothing changed. Symlinks inside
//! a tree are copied as symlinks; a symlink named on the command line is followed.
//!
//! Each file is written under a temporary name and renamed into place when whole
//! (`file`). SIGINT, SIGTERM and SIGHUP stop the copy: the file in progress is removed,
//! the files already renamed stay, and `cv` exits with 128 + the signal's number.

mod file;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use curvine_client::{CurvineFs, FileType, FsError};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::progress::{Mode, Transfer};
use file::{copy_file, InFlight, Job};

/// One side of a copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loc {
    Local(PathBuf),
    Cv(String),
}

impl Loc {
    /// A `cp` operand: `file:` names a local path (`file:///tmp/x`, `file:/tmp/x`,
    /// `file:x`), anything else a Curvine path.
    pub fn parse(s: &str) -> anyhow::Result<Loc> {
        let Some(rest) = s.strip_prefix("file:") else {
            return Ok(Loc::Cv(s.to_string()));
        };
        let path = match rest.strip_prefix("//") {
            Some(p) if p.starts_with('/') => p,
            Some(_) => bail!("{s:?}: a file URI names no host; write file:///path"),
            None => rest,
        };
        if path.is_empty() {
            bail!("{s:?}: no local path");
        }
        Ok(Loc::Local(PathBuf::from(path)))
    }

    fn join(&self, rel: &str) -> Loc {
        if rel.is_empty() {
            return self.clone();
        }
        match self {
            Loc::Local(p) => Loc::Local(p.join(rel)),
            Loc::Cv(p) => Loc::Cv(format!("{}/{rel}", p.trim_end_matches('/'))),
        }
    }

    /// The last component, `None` for a root.
    fn base_name(&self) -> anyhow::Result<Option<String>> {
        match self {
            Loc::Local(p) => match p.file_name() {
                Some(n) => Ok(Some(
                    n.to_str()
                        .with_context(|| format!("{}: the name is not UTF-8", p.display()))?
                        .to_string(),
                )),
                None => Ok(None),
            },
            Loc::Cv(p) => {
                let n = p.trim_end_matches('/').rsplit('/').next().unwrap_or("");
                Ok((!n.is_empty()).then(|| n.to_string()))
            }
        }
    }
}

impl std::fmt::Display for Loc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Loc::Local(p) => write!(f, "{}", p.display()),
            Loc::Cv(p) => f.write_str(p),
        }
    }
}

/// How to copy.
pub struct Opts {
    /// `put`, `get` or `cp`, for the progress line.
    pub verb: &'static str,
    pub recursive: bool,
    /// Replace destination files that exist.
    pub force: bool,
    pub mode: Mode,
}

#[derive(Debug, PartialEq, Eq)]
enum Kind {
    Dir,
    /// A regular file of this many bytes.
    File(u64),
    /// A local fifo or device named on the command line: read to its end.
    Stream,
    Symlink(String),
}

/// A path of the source, relative to its root ("" for the root itself).
struct Item {
    rel: String,
    kind: Kind,
}

/// A copy stopped by a signal, after its partial file was removed.
#[derive(Debug)]
pub struct Interrupted {
    verb: &'static str,
    /// SIGINT, SIGTERM or SIGHUP.
    pub signal: i32,
    /// The partial file removed, if one was being written (and could be removed).
    removed: Option<Loc>,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.signal {
            libc::SIGINT => "SIGINT",
            libc::SIGTERM => "SIGTERM",
            _ => "SIGHUP",
        };
        write!(f, "{}: interrupted by {name}", self.verb)?;
        match &self.removed {
            Some(tmp) => write!(f, "; removed the partial {tmp}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for Interrupted {}

/// The signals that stop a copy, caught from its start.
struct Stops {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Stops {
    fn catch() -> anyhow::Result<Stops> {
        let catch = |kind| signal(kind).context("catch signals");
        Ok(Stops {
            int: catch(SignalKind::interrupt())?,
            term: catch(SignalKind::terminate())?,
            hup: catch(SignalKind::hangup())?,
        })
    }

    /// The number of the next of them to arrive.
    async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}

/// How long removing the partial file may take after an interrupt (a master that does
/// not answer must not keep `cv` from exiting).
const CLEANUP_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Copy `src` to `dst` as `cp` does: into `dst/NAME` when `dst` is a directory. A
/// signal ends it with `Interrupted`.
pub async fn copy(fs: &CurvineFs, src: &Loc, dst: &Loc, o: &Opts) -> anyhow::Result<()> {
    let mut stops = Stops::catch()?;
    let inflight = InFlight::default();
    let mut work = Box::pin(copy_all(fs, src, dst, o, &inflight));
    let caught = tokio::select! {
        r = &mut work => return r,
        n = stops.next() => n,
    };
    // the copy stops where it is (its progress bar stays, its writer is abandoned)
    drop(work);
    let removed = tokio::select! {
        r = tokio::time::timeout(CLEANUP_LIMIT, inflight.remove(fs)) => r.unwrap_or_else(|_| {
            tracing::warn!("the partial copy was not removed in time");
            None
        }),
        // a second signal: exit now
        _ = stops.next() => None,
    };
    Err(Interrupted {
        verb: o.verb,
        signal: caught,
        removed,
    }
    .into())
}

async fn copy_all(
    fs: &CurvineFs,
    src: &Loc,
    dst: &Loc,
    o: &Opts,
    inflight: &InFlight,
) -> anyhow::Result<()> {
    if matches!((src, dst), (Loc::Local(_), Loc::Local(_))) {
        bail!("{}: both sides are local; name a Curvine path", o.verb);
    }
    let items = plan(fs, src, o.recursive).await?;
    let src_is_dir = items[0].kind == Kind::Dir;
    let target = match is_dir(fs, dst).await? {
        Some(true) => match src.base_name()? {
            Some(n) => dst.join(&n),
            None => dst.clone(),
        },
        None if !src_is_dir && dst.to_string().ends_with('/') => {
            bail!("{dst}: no such directory")
        }
        _ => dst.clone(),
    };
    if let (Loc::Cv(s), Loc::Cv(t)) = (src, &target) {
        let (s, t) = (s.trim_end_matches('/'), t.trim_end_matches('/'));
        if s == t || (src_is_dir && (s.is_empty() || t.starts_with(&format!("{s}/")))) {
            bail!("{}: cannot copy {src} onto or into itself", o.verb);
        }
    }
    let target_exists = is_dir(fs, &target).await?;
    match (src_is_dir, target_exists) {
        (true, Some(false)) => bail!("{target}: exists and is not a directory"),
        (false, Some(true)) => bail!("{target}: is a directory"),
        (false, Some(false)) if !o.force => {
            bail!("{target}: already exists (-f replaces it)")
        }
        _ => {}
    }
    let total = items.iter().try_fold(0u64, |sum, i| match i.kind {
        Kind::File(n) => Some(sum + n),
        Kind::Stream => None,
        _ => Some(sum),
    });
    let files = items
        .iter()
        .filter(|i| matches!(i.kind, Kind::File(_) | Kind::Stream))
        .count() as u64;
    let t = Transfer::start(
        o.mode,
        format!("{} {src} -> {target}", o.verb),
        total,
        files,
    )?;
    for item in &items {
        let (s, d) = (src.join(&item.rel), target.join(&item.rel));
        let len = match &item.kind {
            Kind::Dir => {
                mkdir(fs, &d).await?;
                continue;
            }
            Kind::Symlink(to) => {
                symlink(fs, to, &d, o.force).await?;
                continue;
            }
            Kind::File(len) => Some(*len),
            Kind::Stream => None,
        };
        let job = Job {
            src: s,
            dst: d,
            force: o.force,
            // the target was checked above; a tree copied into a new directory finds
            // nothing there (and the rename refuses what appears meanwhile)
            check_exists: src_is_dir && target_exists.is_some(),
            len,
            progress: &t,
        };
        copy_file(fs, &job, inflight).await?;
        t.file_done();
    }
    t.finish()
}

/// Whether `loc` is a directory (following symlinks); `None` if it does not exist.
async fn is_dir(fs: &CurvineFs, loc: &Loc) -> anyhow::Result<Option<bool>> {
    match loc {
        Loc::Cv(p) => match fs.stat(p).await {
            Ok(st) => Ok(Some(st.file_type == FileType::Dir as i32)),
            Err(FsError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        },
        Loc::Local(p) => match tokio::fs::metadata(p).await {
            Ok(m) => Ok(Some(m.is_dir())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("stat {}", p.display())),
        },
    }
}

/// What to copy, parents before their children.
async fn plan(fs: &CurvineFs, src: &Loc, recursive: bool) -> anyhow::Result<Vec<Item>> {
    let root = match src {
        Loc::Cv(p) => {
            let st = fs.stat(p).await?;
            match FileType::try_from(st.file_type) {
                Ok(FileType::Dir) => Kind::Dir,
                Ok(FileType::File) => Kind::File(st.len),
                _ => bail!("{p}: not a regular file or directory"),
            }
        }
        Loc::Local(p) => {
            let m = tokio::fs::metadata(p)
                .await
                .with_context(|| p.display().to_string())?;
            if m.is_dir() {
                Kind::Dir
            } else if m.is_file() {
                Kind::File(m.len())
            } else {
                Kind::Stream
            }
        }
    };
    if root != Kind::Dir {
        return Ok(vec![Item {
            rel: String::new(),
            kind: root,
        }]);
    }
    if !recursive {
        bail!("{src}: is a directory (-r copies it)");
    }
    match src {
        Loc::Cv(p) => walk_cv(fs, p).await,
        Loc::Local(p) => {
            let p = p.clone();
            tokio::task::spawn_blocking(move || walk_local(&p))
                .await
                .context("list the local tree")?
        }
    }
}

fn child(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

async fn walk_cv(fs: &CurvineFs, root: &str) -> anyhow::Result<Vec<Item>> {
    let mut items = vec![Item {
        rel: String::new(),
        kind: Kind::Dir,
    }];
    let mut dirs = vec![(root.trim_end_matches('/').to_string(), String::new())];
    while let Some((abs, rel)) = dirs.pop() {
        let dir = if abs.is_empty() { "/" } else { abs.as_str() };
        for e in fs.list(dir).await? {
            let rel = child(&rel, &e.name);
            let kind = match FileType::try_from(e.file_type) {
                Ok(FileType::Dir) => {
                    dirs.push((e.path.trim_end_matches('/').to_string(), rel.clone()));
                    Kind::Dir
                }
                Ok(FileType::File) => Kind::File(e.len),
                Ok(FileType::Symlink) => Kind::Symlink(e.symlink_target.clone()),
                _ => bail!("{}: not a regular file, directory or symlink", e.path),
            };
            items.push(Item { rel, kind });
        }
    }
    Ok(items)
}

fn walk_local(root: &Path) -> anyhow::Result<Vec<Item>> {
    let mut items = vec![Item {
        rel: String::new(),
        kind: Kind::Dir,
    }];
    let mut dirs = vec![(root.to_path_buf(), String::new())];
    while let Some((abs, rel)) = dirs.pop() {
        let mut entries = std::fs::read_dir(&abs)
            .with_context(|| format!("list {}", abs.display()))?
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("list {}", abs.display()))?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let name = e
                .file_name()
                .into_string()
                .map_err(|_| anyhow::anyhow!("{}: the name is not UTF-8", path.display()))?;
            let rel = child(&rel, &name);
            let m = e
                .metadata()
                .with_context(|| format!("stat {}", path.display()))?;
            let kind = if m.is_dir() {
                dirs.push((path, rel.clone()));
                Kind::Dir
            } else if m.is_file() {
                Kind::File(m.len())
            } else if m.is_symlink() {
                let to = std::fs::read_link(&path)
                    .with_context(|| format!("read link {}", path.display()))?;
                let to = to
                    .to_str()
                    .with_context(|| format!("{}: the link target is not UTF-8", path.display()))?;
                Kind::Symlink(to.to_string())
            } else {
                bail!(
                    "{}: not a regular file, directory or symlink",
                    path.display()
                );
            };
            items.push(Item { rel, kind });
        }
    }
    Ok(items)
}

async fn mkdir(fs: &CurvineFs, d: &Loc) -> anyhow::Result<()> {
    match d {
        Loc::Cv(p) => {
            fs.mkdir(p, true).await?;
        }
        Loc::Local(p) => tokio::fs::create_dir_all(p)
            .await
            .with_context(|| format!("mkdir {}", p.display()))?,
    }
    Ok(())
}

async fn symlink(fs: &CurvineFs, to: &str, d: &Loc, force: bool) -> anyhow::Result<()> {
    match d {
        Loc::Cv(p) => {
            if force {
                match fs.delete(p, false).await {
                    Ok(()) | Err(FsError::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            fs.symlink(to, p).await?;
        }
        Loc::Local(p) => {
            if force {
                match tokio::fs::remove_file(p).await {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e).with_context(|| format!("remove {}", p.display())),
                }
            }
            tokio::fs::symlink(to, p)
                .await
                .with_context(|| format!("symlink {}", p.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_name_local_or_curvine_paths() {
        assert_eq!(Loc::parse("/a/b").unwrap(), Loc::Cv("/a/b".into()));
        assert_eq!(
            Loc::parse("file:///tmp/x").unwrap(),
            Loc::Local("/tmp/x".into())
        );
        assert_eq!(
            Loc::parse("file:/tmp/x").unwrap(),
            Loc::Local("/tmp/x".into())
        );
        assert_eq!(Loc::parse("file:x/y").unwrap(), Loc::Local("x/y".into()));
        assert!(Loc::parse("file://host/x").is_err());
        assert!(Loc::parse("file:").is_err());
    }

    #[test]
    fn paths_join_and_name() {
        let root = Loc::Cv("/".into());
        assert_eq!(root.join("a"), Loc::Cv("/a".into()));
        assert_eq!(root.base_name().unwrap(), None);
        let d = Loc::Cv("/d/e/".into());
        assert_eq!(d.join("f/g"), Loc::Cv("/d/e/f/g".into()));
        assert_eq!(d.base_name().unwrap().as_deref(), Some("e"));
        assert_eq!(
            Loc::Local("x/y".into()).base_name().unwrap().as_deref(),
            Some("y")
        );
    }
}
