//! Per-inode write state. Curvine files are written sequentially (blocks are immutable
//! once committed), so the mount keeps, for every file open for writing:
//!
//! - `Clean`: Curvine holds the content; reads go to Curvine.
//! - `Streaming`: an `FsWriter` at the end of the file. Writes at its position go
//!   straight to the workers — the fast path of sequential writers (fio, cp, loaders,
//!   log appenders). A write a little past it waits in `ahead` for the bytes before it:
//!   with the kernel's writeback cache, page writes of one file arrive in parallel and
//!   out of order. A gap still open when the stream must settle is zero-filled.
//! - `Dirty`: any other write (overwrite, truncate to a middle, write then read) moves the
//!   whole content into a `DirtyBuf`; reads are served from it and flush uploads it.
//!
//! Every state change that alters Curvine's copy bumps `gen`, so open readers reopen.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use curvine_client::{CurvineFs, FileStatus, FsWriter};
use curvine_common::{FsError, FsResult};
use tracing::debug;

use crate::dirty::{DirtyBuf, Spill};

/// At most this many bytes of one file wait for the bytes before them.
const AHEAD_MAX: usize = 32 << 20;

/// Zeros written in one piece by `zero_range`.
const ZERO_CHUNK: usize = 1 << 20;

/// Whether `[off, end)` overlaps one of the waiting writes `ahead`.
fn overlaps(ahead: &BTreeMap<u64, Vec<u8>>, off: u64, end: u64) -> bool {
    ahead
        .range(..end)
        .next_back()
        .is_some_and(|(o, d)| o + d.len() as u64 > off)
}

pub enum Content {
    Clean,
    Streaming(Box<FsWriter>),
    Dirty(DirtyBuf),
}

pub struct FileState {
    pub content: Content,
    /// Bumped whenever Curvine's copy of the file changes.
    pub gen: u64,
    /// Modification time of local (not yet flushed) changes.
    pub mtime_ms: i64,
    /// While streaming: the file's length when it is past the writer's position (a
    /// truncate or fallocate extended it, or the stream fills a preallocated file). The
    /// rest stays a hole that reads as zeros (fio lays files out with fallocate, then
    /// writes them).
    zero_tail: u64,
    /// Streaming into a file that was empty when the stream began: every byte of the
    /// file comes from this mount's writes (the page cache holds nothing older).
    fresh: bool,
    /// The status of the last fresh stream closed, not yet taken by `take_written`.
    written: Option<FileStatus>,
    /// While streaming: writes past the writer's position, by offset, waiting for the
    /// bytes before them (none overlap); `ahead_bytes` is their total size.
    ahead: BTreeMap<u64, Vec<u8>>,
    ahead_bytes: usize,
    spill: Arc<Spill>,
    /// The error of a write that failed here. Later writes report it too, rather than
    /// what the abandoned file looks like by then (the kernel retries the rest of a
    /// direct write that was cut short); a truncate starts over.
    write_error: Option<FsError>,
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl FileState {
    pub fn new(spill: Arc<Spill>) -> FileState {
        FileState {
            content: Content::Clean,
            gen: 0,
            mtime_ms: 0,
            zero_tail: 0,
            fresh: false,
            written: None,
            ahead: BTreeMap::new(),
            ahead_bytes: 0,
            spill,
            write_error: None,
        }
    }

    /// Write every waiting write in order, zero-filling the gaps before them.
    async fn settle_ahead(&mut self) -> FsResult<()> {
        let Content::Streaming(w) = &mut self.content else {
            return Ok(());
        };
        self.ahead_bytes = 0;
        for (off, data) in std::mem::take(&mut self.ahead) {
            w.write_zeros(off.saturating_sub(w.pos())).await?;
            w.write(&data).await?;
        }
        Ok(())
    }

    pub fn is_clean(&self) -> bool {
        matches!(self.content, Content::Clean)
    }

    /// While a stream is open, take `mtime_ms` as the file's mtime: it is written with
    /// the stream at close. False (nothing kept) when no stream is open.
    pub fn keep_mtime(&mut self, mtime_ms: i64) -> bool {
        if let Content::Streaming(_) = self.content {
            self.mtime_ms = mtime_ms;
            true
        } else {
            false
        }
    }

    /// The file's length as this mount sees it, when it differs from Curvine's.
    pub fn local_len(&self) -> Option<u64> {
        match &self.content {
            Content::Clean => None,
            Content::Streaming(w) => {
                let ahead_end = self
                    .ahead
                    .last_key_value()
                    .map_or(0, |(o, d)| o + d.len() as u64);
                Some(w.pos().max(self.zero_tail).max(ahead_end))
            }
            Content::Dirty(d) => Some(d.len()),
        }
    }

    /// Start streaming with a writer the caller opened (create).
    pub fn start_stream(&mut self, w: FsWriter) {
        self.fresh = w.status().len == 0;
        self.content = Content::Streaming(Box::new(w));
        self.zero_tail = 0;
        self.mtime_ms = now_ms();
    }

    /// Write `data` at `off` of the file at `path` (`fs` acts for the mount).
    pub async fn write(
        &mut self,
        fs: &CurvineFs,
        path: &str,
        off: u64,
        data: &[u8],
    ) -> FsResult<()> {
        if let Some(e) = &self.write_error {
            return Err(e.clone());
        }
        let res = self.write_at(fs, path, off, data).await;
        if let Err(e) = &res {
            self.write_error = Some(e.clone());
        }
        res
    }

    async fn write_at(
        &mut self,
        fs: &CurvineFs,
        path: &str,
        off: u64,
        data: &[u8],
    ) -> FsResult<()> {
        self.mtime_ms = now_ms();
        self.written = None; // a closed fresh stream is no longer the whole story
        loop {
            match &mut self.content {
                Content::Streaming(w) => {
                    let pos = w.pos();
                    let end = off + data.len() as u64;
                    if off == pos {
                        w.write(data).await?;
                        // writes that arrived early follow on
                        while let Some(e) = self.ahead.first_entry() {
                            if *e.key() != w.pos() {
                                break;
                            }
                            let d = e.remove();
                            self.ahead_bytes -= d.len();
                            w.write(&d).await?;
                        }
                        return Ok(());
                    }
                    if off > pos
                        && self.ahead_bytes + data.len() <= AHEAD_MAX
                        && !overlaps(&self.ahead, off, end)
                    {
                        self.ahead.insert(off, data.to_vec());
                        self.ahead_bytes += data.len();
                        return Ok(());
                    }
                    if !self.ahead.is_empty() {
                        // no room, or an overlap: settle, then look again
                        self.settle_ahead().await?;
                        continue;
                    }
                    if off > pos {
                        w.write_zeros(off - pos).await?;
                        return w.write(data).await;
                    }
                    // an overwrite: finish the stream, then edit the content
                    self.close_stream().await?;
                }
                Content::Dirty(d) => return d.write_at(off, data),
                Content::Clean => {
                    let st = fs.stat(path).await?;
                    let (len, data_len) = (st.len, st.len - st.tail_zeros.min(st.len));
                    if off >= data_len {
                        // at or past the end of the data (a preallocated file being
                        // filled): stream from there; the hole keeps the length
                        debug!(path, len, data_len, "append stream");
                        let w = fs.append_to_data(path).await?;
                        self.start_stream(w);
                        self.zero_tail = len;
                    } else {
                        debug!(path, off, len, "overwrite: loading the content");
                        self.fresh = false;
                        let d = DirtyBuf::load(fs, path, self.spill.clone()).await?;
                        self.content = Content::Dirty(d);
                    }
                }
            }
        }
    }

    /// Serve a read from local state; `None` when Curvine's copy is current (read it).
    /// A stream in progress is completed first so Curvine can serve what it wrote.
    pub async fn read_local(&mut self, off: u64, size: usize) -> FsResult<Option<Vec<u8>>> {
        if let Content::Streaming(_) = self.content {
            self.close_stream().await?;
        }
        match &self.content {
            Content::Dirty(d) => Ok(Some(d.read_at(off, size)?)),
            _ => Ok(None),
        }
    }

    /// Set the file's length (truncate or extend with zeros).
    pub async fn set_len(&mut self, fs: &CurvineFs, path: &str, len: u64) -> FsResult<()> {
        self.mtime_ms = now_ms();
        self.written = None;
        self.write_error = None;
        loop {
            match &mut self.content {
                Content::Dirty(d) => return d.set_len(len),
                Content::Streaming(_) if !self.ahead.is_empty() => self.settle_ahead().await?,
                Content::Streaming(w) => {
                    // The master keeps the length the file had when the stream opened
                    // (a preallocated file being filled), so a length below it cannot
                    // wait for the close: the stream completes and the file is cut.
                    if len >= w.pos() && len >= w.status().len {
                        self.zero_tail = len;
                        return Ok(());
                    }
                    self.fresh = false;
                    self.close_stream().await?;
                }
                Content::Clean => {
                    // one master call either way: growing leaves a hole past the data
                    // (no zeros are written), and writes there stream again
                    let cur = fs.stat(path).await?.len;
                    if len != cur {
                        fs.truncate(path, len).await?;
                        self.gen += 1;
                    }
                    return Ok(());
                }
            }
        }
    }

    /// Make bytes `[off, end)` read as zeros; the length stays (fallocate PUNCH_HOLE and
    /// ZERO_RANGE).
    pub async fn zero_range(
        &mut self,
        fs: &CurvineFs,
        path: &str,
        off: u64,
        end: u64,
    ) -> FsResult<()> {
        let len = match self.local_len() {
            Some(len) => len,
            None => fs.stat(path).await?.len,
        };
        if off >= len {
            return Ok(());
        }
        if end >= len {
            // the range reaches the end: cut there and grow back, which leaves a hole
            // that stores no zeros
            self.set_len(fs, path, off).await?;
            return self.set_len(fs, path, len).await;
        }
        let zeros = vec![0u8; ((end - off) as usize).min(ZERO_CHUNK)];
        let mut at = off;
        while at < end {
            let n = ((end - at) as usize).min(zeros.len());
            self.write(fs, path, at, &zeros[..n]).await?;
            at += n as u64;
        }
        Ok(())
    }

    /// The status Curvine reported when a stream that wrote the whole file closed: the
    /// page cache then matches that version of the file.
    pub fn take_written(&mut self) -> Option<FileStatus> {
        self.written.take()
    }

    /// Make Curvine's copy current (flush, fsync, close).
    pub async fn flush(&mut self, fs: &CurvineFs, path: &str) -> FsResult<()> {
        match &self.content {
            Content::Clean => Ok(()),
            Content::Streaming(_) => self.close_stream().await,
            Content::Dirty(d) => {
                d.upload(fs, path).await?;
                self.content = Content::Clean;
                self.gen += 1;
                Ok(())
            }
        }
    }

    async fn close_stream(&mut self) -> FsResult<()> {
        let settled = self.settle_ahead().await;
        if let Content::Streaming(w) = &mut self.content {
            // a length set past the writer stays a hole of zeros
            w.extend_to(self.zero_tail);
            // the mtime this mount reported while writing stays the file's (the kernel
            // would drop the pages it kept if the mtime changed at close)
            w.set_mtime(self.mtime_ms);
            self.zero_tail = 0;
            let fresh = std::mem::take(&mut self.fresh);
            // a writer that failed to take the early writes is not closed as complete
            let res = match settled {
                Ok(()) => w.close().await.map(|st| {
                    if fresh {
                        self.written = Some(st);
                    }
                }),
                Err(e) => Err(e),
            };
            // a failed writer is not retried: its error is the result of this flush
            self.content = Content::Clean;
            self.gen += 1;
            res?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use curvine_server::testing::MiniCluster;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    fn chunk(i: u64) -> Vec<u8> {
        (0..64 * 1024u64)
            .map(|j| (i * 31 + j % 251) as u8)
            .collect()
    }

    #[test]
    fn early_writes_wait_for_the_bytes_before_them() {
        runtime().block_on(async {
            let cluster = MiniCluster::builder().start().await.unwrap();
            let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
            let new_state = |w| {
                let mut s = FileState::new(Spill::new(std::env::temp_dir(), 1 << 20));
                s.start_stream(w);
                s
            };
            const C: u64 = 64 * 1024;

            // out of order, as writeback delivers pages: one stream all the same
            let mut s = new_state(fs.create("/ahead", false).await.unwrap());
            let mut want = Vec::new();
            for i in [0u64, 2, 1, 3, 5, 4, 7, 6] {
                s.write(&fs, "/ahead", i * C, &chunk(i)).await.unwrap();
                assert!(matches!(s.content, Content::Streaming(_)), "chunk {i}");
            }
            for i in 0..8 {
                want.extend(chunk(i));
            }
            assert_eq!(s.local_len(), Some(8 * C));
            s.flush(&fs, "/ahead").await.unwrap();
            assert!(s.take_written().is_some(), "written as one fresh stream");
            assert!(fs.read_file("/ahead").await.unwrap() == want);

            // a gap nobody fills reads as zeros; the length counts the early write
            let mut s = new_state(fs.create("/gap", false).await.unwrap());
            s.write(&fs, "/gap", 0, &chunk(0)).await.unwrap();
            s.write(&fs, "/gap", 2 * C, &chunk(2)).await.unwrap();
            assert_eq!(s.local_len(), Some(3 * C));
            s.flush(&fs, "/gap").await.unwrap();
            let mut want = chunk(0);
            want.extend(vec![0u8; C as usize]);
            want.extend(chunk(2));
            assert!(fs.read_file("/gap").await.unwrap() == want);

            // a second write over an early one: the later bytes win
            let mut s = new_state(fs.create("/again", false).await.unwrap());
            s.write(&fs, "/again", C, &chunk(1)).await.unwrap();
            s.write(&fs, "/again", C, &chunk(9)).await.unwrap();
            s.write(&fs, "/again", 0, &chunk(0)).await.unwrap();
            s.flush(&fs, "/again").await.unwrap();
            let mut want = chunk(0);
            want.extend(chunk(9));
            assert!(fs.read_file("/again").await.unwrap() == want);
            cluster.shutdown().await.unwrap();
        });
    }

    /// A file with a hole past its data, filled by a stream from the data's end, then
    /// cut to a length between the stream's end and the length it had: the cut holds
    /// at close (the master kept the old length for a stream that did not reach it).
    #[test]
    fn a_cut_while_filling_a_hole_holds_at_close() {
        runtime().block_on(async {
            let cluster = MiniCluster::builder().start().await.unwrap();
            let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
            let p = "/cut";
            let mut s = FileState::new(Spill::new(std::env::temp_dir(), 1 << 20));
            s.start_stream(fs.create(p, false).await.unwrap());
            s.write(&fs, p, 0, &[1u8; 0x640]).await.unwrap();
            s.flush(&fs, p).await.unwrap();
            s.set_len(&fs, p, 0x33b99).await.unwrap();
            // past the data's end: a stream fills the hole from there
            s.write(&fs, p, 0x14000, &[2u8; 0x5000]).await.unwrap();
            s.write(&fs, p, 0x1a1ed, &[3u8; 0x528a]).await.unwrap();
            assert!(matches!(s.content, Content::Streaming(_)));
            s.set_len(&fs, p, 0x21cc7).await.unwrap();
            assert_eq!(s.local_len().unwrap_or(0x21cc7), 0x21cc7);
            s.flush(&fs, p).await.unwrap();
            assert_eq!(fs.stat(p).await.unwrap().len, 0x21cc7);
            let mut want = vec![0u8; 0x21cc7];
            want[..0x640].fill(1);
            want[0x14000..0x19000].fill(2);
            want[0x1a1ed..0x1f477].fill(3);
            assert!(fs.read_file(p).await.unwrap() == want);
            cluster.shutdown().await.unwrap();
        });
    }

    /// After a write fails, later writes report the same error, even once the flush
    /// has given up the stream and the client has dropped the file; a truncate clears it.
    #[test]
    fn a_failed_write_keeps_its_error() {
        use curvine_server::testing::TierSpec;
        runtime().block_on(async {
            // one 8 MiB block fits, a second does not
            let cluster = MiniCluster::builder()
                .tiers(vec![TierSpec {
                    tier: "MEM",
                    capacity: 12 << 20,
                    tmpfs: true,
                }])
                .start()
                .await
                .unwrap();
            let fs = CurvineFs::connect(cluster.client_conf()).await.unwrap();
            let mut s = FileState::new(Spill::new(std::env::temp_dir(), 1 << 20));
            s.start_stream(fs.create("/full", false).await.unwrap());
            let mb = vec![7u8; 1 << 20];
            let mut off = 0u64;
            let first = loop {
                match s.write(&fs, "/full", off, &mb).await {
                    Ok(()) => off += mb.len() as u64,
                    Err(e) => break e,
                }
                assert!(off <= 16 << 20, "12 MiB of tier took 16 MiB");
            };
            assert!(matches!(first, FsError::NoSpace { .. }), "{first}");
            assert!(s.flush(&fs, "/full").await.is_err());
            let again = s.write(&fs, "/full", off, &mb).await.unwrap_err();
            assert_eq!(again.errno(), first.errno(), "{again}");
            // a truncate starts over (the file is gone, so it fails on its own terms)
            let _ = s.set_len(&fs, "/full", 0).await;
            assert!(s.write_error.is_none());
            cluster.shutdown().await.unwrap();
        });
    }
}
