//! One file of a copy. Its bytes go to `NAME._COPYING_` in the target's directory
//! (Hadoop's shell does the same), which is renamed over the target only once whole, so
//! neither a failure nor an interrupt leaves a partial file under the target's name.
//! The temporary is removed on any failure; `InFlight` names it so that an interrupt,
//! which drops the copy wherever it is, can remove it too.
//!
//! Replacing (`-f`) happens at the rename, which is atomic on both sides: Curvine's
//! rename replaces an existing file in one namespace transaction, and so does
//! rename(2). Without `-f` the rename refuses an existing target (RENAME_NOREPLACE in
//! Curvine, a hard link locally), so a file that appeared during the copy is kept.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{bail, Context};
use curvine_client::{CreateOptions, CurvineFs, FsError, FsReader, FsWriter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::warn;

use super::Loc;
use crate::progress::Transfer;

/// Appended to the target's name for the file being written.
pub const TEMP_SUFFIX: &str = "._COPYING_";

/// Bytes moved per read and write.
const CHUNK: usize = 4 << 20;

/// The master's rename flag that refuses to replace an existing target (as in
/// renameat2; the fuse mount passes it through unchanged).
const RENAME_NOREPLACE: u32 = 1;

/// The temporary file a copy is writing, if any.
#[derive(Default)]
pub struct InFlight(Mutex<Option<Loc>>);

impl InFlight {
    fn set(&self, tmp: Option<Loc>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = tmp;
    }

    /// Remove the temporary a dropped copy left; returns its name if it is gone.
    pub async fn remove(&self, fs: &CurvineFs) -> Option<Loc> {
        let tmp = self.0.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        remove_temp(fs, &tmp).await.then_some(tmp)
    }
}

/// How to copy one file.
pub struct Job<'a> {
    pub src: Loc,
    pub dst: Loc,
    /// Replace an existing target.
    pub force: bool,
    /// Fail before writing anything when the target exists (without `-f`, unless the
    /// caller already knows it does not).
    pub check_exists: bool,
    /// The size the listing gave: the copy must read that many bytes (`None` for a
    /// stream, read to its end).
    pub len: Option<u64>,
    pub progress: &'a Transfer,
}

/// Copy `job.src` to `job.dst` through a temporary beside it.
pub async fn copy_file(fs: &CurvineFs, job: &Job<'_>, inflight: &InFlight) -> anyhow::Result<()> {
    if job.check_exists && !job.force && exists(fs, &job.dst).await? {
        return Err(exists_error(&job.dst));
    }
    let dst = match &job.dst {
        Loc::Local(p) => match local_target(p).await? {
            LocalTarget::Special(p) => {
                // a device or fifo (`get F /dev/null`): written in place, as cp does
                let mut src = Source::open(fs, &job.src).await?;
                // (a fifo's open waits for its reader)
                let f = tokio::fs::OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .await
                    .with_context(|| format!("open {}", p.display()))?;
                let mut sink = Sink::Local(f, p);
                pump(&mut src, &mut sink, job).await?;
                return sink.close().await;
            }
            LocalTarget::File(p) => Loc::Local(p),
        },
        Loc::Cv(p) => Loc::Cv(p.clone()),
    };
    let mut src = Source::open(fs, &job.src).await?;
    let tmp = temp_of(&dst)?;
    // named before it exists: an interrupt from here on removes it
    inflight.set(Some(tmp.clone()));
    let r = write_and_rename(fs, &mut src, &tmp, &dst, job).await;
    if r.is_err() {
        remove_temp(fs, &tmp).await;
    }
    inflight.set(None);
    r
}

async fn write_and_rename(
    fs: &CurvineFs,
    src: &mut Source,
    tmp: &Loc,
    dst: &Loc,
    job: &Job<'_>,
) -> anyhow::Result<()> {
    let mut sink = Sink::create(fs, tmp, job.len).await?;
    pump(src, &mut sink, job).await?;
    sink.close().await?;
    drop(sink);
    rename_into_place(fs, tmp, dst, job.force).await
}

/// Move every byte of `src` to `sink`.
async fn pump(src: &mut Source, sink: &mut Sink, job: &Job<'_>) -> anyhow::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    let mut copied = 0u64;
    loop {
        let n = src.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        sink.write(&buf[..n]).await?;
        copied += n as u64;
        job.progress.add(n as u64);
    }
    match job.len {
        // a file that shrank while it was copied: what was read is no copy of it
        Some(len) if copied < len => {
            bail!(
                "{}: ended after {copied} of its {len} bytes (it shrank during the copy)",
                job.src
            )
        }
        _ => Ok(()),
    }
}

/// `NAME._COPYING_` beside `dst`.
fn temp_of(dst: &Loc) -> anyhow::Result<Loc> {
    Ok(match dst {
        Loc::Local(p) => {
            let name = p
                .file_name()
                .with_context(|| format!("{}: names no file", p.display()))?;
            let mut name = name.to_os_string();
            name.push(TEMP_SUFFIX);
            Loc::Local(p.with_file_name(name))
        }
        Loc::Cv(p) => Loc::Cv(format!("{}{TEMP_SUFFIX}", p.trim_end_matches('/'))),
    })
}

enum LocalTarget {
    /// A regular file's path, or where a new one goes.
    File(PathBuf),
    /// A device, fifo or socket, written in place.
    Special(PathBuf),
}

/// Where a local target really is: a symlink to a file is followed (the file it names
/// is replaced, as cp writes through it).
async fn local_target(p: &Path) -> anyhow::Result<LocalTarget> {
    let m = match tokio::fs::metadata(p).await {
        Ok(m) => m,
        // new, or a dangling symlink (replaced by the file)
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(LocalTarget::File(p.to_path_buf()))
        }
        Err(e) => return Err(e).with_context(|| format!("stat {}", p.display())),
    };
    if !m.is_file() && !m.is_dir() {
        return Ok(LocalTarget::Special(p.to_path_buf()));
    }
    let link = tokio::fs::symlink_metadata(p)
        .await
        .with_context(|| format!("stat {}", p.display()))?;
    if link.is_symlink() {
        let real = tokio::fs::canonicalize(p)
            .await
            .with_context(|| format!("resolve {}", p.display()))?;
        return Ok(LocalTarget::File(real));
    }
    Ok(LocalTarget::File(p.to_path_buf()))
}

/// Whether anything is at `loc` (a symlink itself counts).
async fn exists(fs: &CurvineFs, loc: &Loc) -> anyhow::Result<bool> {
    match loc {
        Loc::Cv(p) => Ok(fs.exists(p).await?),
        Loc::Local(p) => match tokio::fs::symlink_metadata(p).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e).with_context(|| format!("stat {}", p.display())),
        },
    }
}

fn exists_error(dst: &Loc) -> anyhow::Error {
    anyhow::anyhow!("{dst}: already exists (-f replaces it)")
}

/// Give the whole temporary its final name.
async fn rename_into_place(
    fs: &CurvineFs,
    tmp: &Loc,
    dst: &Loc,
    force: bool,
) -> anyhow::Result<()> {
    match (tmp, dst) {
        (Loc::Cv(t), Loc::Cv(d)) => {
            let flags = if force { 0 } else { RENAME_NOREPLACE };
            match fs.rename_with_flags(t, d, flags).await {
                Ok(()) => Ok(()),
                Err(FsError::AlreadyExists { .. }) => Err(exists_error(dst)),
                Err(e) => Err(e.into()),
            }
        }
        // Synchronous, here and where the temporary is created: an interrupt drops the
        // copy at an await, and a call left running on the blocking pool could recreate
        // or rename the temporary after the interrupt removed it. Both take microseconds.
        (Loc::Local(t), Loc::Local(d)) if force => {
            std::fs::rename(t, d).with_context(|| format!("rename to {}", d.display()))
        }
        (Loc::Local(t), Loc::Local(d)) => match std::fs::hard_link(t, d) {
            Ok(()) => std::fs::remove_file(t).with_context(|| format!("remove {}", t.display())),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(exists_error(dst)),
            // a file system without hard links: checked just before, then renamed
            Err(_) => {
                if std::fs::symlink_metadata(d).is_ok() {
                    return Err(exists_error(dst));
                }
                std::fs::rename(t, d).with_context(|| format!("rename to {}", d.display()))
            }
        },
        _ => bail!("{tmp} and {dst} are on different sides"),
    }
}

/// Remove a temporary; whether it is gone. A failure is logged (the copy's own error is
/// the one reported).
async fn remove_temp(fs: &CurvineFs, tmp: &Loc) -> bool {
    let r = match tmp {
        Loc::Cv(p) => match fs.delete(p, false).await {
            Ok(()) | Err(FsError::NotFound { .. }) => Ok(()),
            Err(e) => Err(anyhow::Error::from(e)),
        },
        Loc::Local(p) => match std::fs::remove_file(p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e.into()),
        },
    };
    match r {
        Ok(()) => true,
        Err(e) => {
            // a Curvine temporary still under our lease goes when the lease expires
            warn!(path = %tmp, error = %e, "cannot remove the partial copy");
            false
        }
    }
}

enum Source {
    Local(tokio::fs::File, PathBuf),
    Cv(Box<FsReader>),
}

impl Source {
    async fn open(fs: &CurvineFs, loc: &Loc) -> anyhow::Result<Source> {
        Ok(match loc {
            Loc::Local(p) => Source::Local(
                tokio::fs::File::open(p)
                    .await
                    .with_context(|| format!("open {}", p.display()))?,
                p.clone(),
            ),
            Loc::Cv(p) => Source::Cv(Box::new(fs.open(p).await?)),
        })
    }

    async fn read(&mut self, buf: &mut [u8]) -> anyhow::Result<usize> {
        Ok(match self {
            Source::Local(f, p) => f
                .read(buf)
                .await
                .with_context(|| format!("read {}", p.display()))?,
            Source::Cv(r) => r.read_full(buf).await?,
        })
    }
}

enum Sink {
    Local(tokio::fs::File, PathBuf),
    Cv(Box<FsWriter>),
}

impl Sink {
    /// A new file at `tmp`, replacing one a crashed copy left there.
    async fn create(fs: &CurvineFs, tmp: &Loc, len: Option<u64>) -> anyhow::Result<Sink> {
        Ok(match tmp {
            Loc::Local(p) => {
                // removed and made anew rather than truncated: a symlink left at the
                // temporary's name is not followed
                match std::fs::remove_file(p) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e).with_context(|| format!("remove {}", p.display())),
                }
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(p)
                    .with_context(|| format!("create {}", p.display()))?;
                Sink::Local(tokio::fs::File::from_std(f), p.clone())
            }
            Loc::Cv(p) => {
                let opts = CreateOptions {
                    overwrite: true,
                    first_block: len.is_some_and(|n| n > 0),
                    ..Default::default()
                };
                Sink::Cv(Box::new(fs.create_with(p, opts).await?))
            }
        })
    }

    async fn write(&mut self, data: &[u8]) -> anyhow::Result<()> {
        match self {
            Sink::Local(f, p) => f
                .write_all(data)
                .await
                .with_context(|| format!("write {}", p.display()))?,
            Sink::Cv(w) => w.write(data).await?,
        }
        Ok(())
    }

    async fn close(&mut self) -> anyhow::Result<()> {
        match self {
            // a tokio file writes in the background: flush waits for it and its error
            Sink::Local(f, p) => f
                .flush()
                .await
                .with_context(|| format!("write {}", p.display()))?,
            Sink::Cv(w) => {
                w.close().await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporaries_sit_beside_their_targets() {
        assert_eq!(
            temp_of(&Loc::Cv("/d/f.bin".into())).unwrap(),
            Loc::Cv("/d/f.bin._COPYING_".into())
        );
        assert_eq!(
            temp_of(&Loc::Local("x/y".into())).unwrap(),
            Loc::Local("x/y._COPYING_".into())
        );
        assert!(temp_of(&Loc::Local("/".into())).is_err());
    }
}
