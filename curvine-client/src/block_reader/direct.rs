//! Reading a block file on disk with O_DIRECT through a window of its bytes that grows
//! while reads follow each other, with the next windows read ahead on tokio's blocking
//! pool once a reader is sequential (see `DirectWindow`).

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use curvine_common::aligned::MappedBuf;
use tracing::debug;

/// Alignment of O_DIRECT reads: offset, length and buffer.
const DIRECT_ALIGN: u64 = crate::block_writer::DIRECT_ALIGN as u64;
/// Sizes of the reads a `DirectWindow` makes: the first, and the most it grows to.
/// On this project's virtio disk, 2 readers of 1 MiB O_DIRECT reads were fastest: 1.70,
/// 2.08, 2.89, 2.36 and 1.62 GiB/s at 256 KiB, 512 KiB, 1, 2 and 4 MiB (fio).
pub(super) const DIRECT_MIN: usize = 64 << 10;
pub(super) const DIRECT_MAX: usize = 1 << 20;

/// A block file on disk read with O_DIRECT through a window of its bytes.
///
/// Through the page cache, every byte read from an SSD block was copied into a new page
/// cache page first, a second cached copy of data Curvine already caches, which the
/// kernel must then reclaim; on this project's VMs filling new pages is also where most
/// of the time went. O_DIRECT reads go from the disk into
/// the window, which is reused. The window doubles while reads follow each other, up to
/// `DIRECT_MAX`, and starts again at `DIRECT_MIN` after a jump, so that random reads
/// read little more than they ask for.
///
/// Once a sequential reader has reached the largest window, the next `READ_AHEAD`
/// windows are read ahead on tokio's blocking pool while the caller copies and verifies
/// this one, so the disk always has reads to work on instead of idling through each
/// window's CPU work.
pub(super) struct DirectWindow {
    file: Arc<File>,
    buf: MappedBuf,
    /// Block offset of `buf[0]`; `buf.len()` bytes are valid.
    off: u64,
    /// Size of the next read at the end of the last one.
    pub(super) grow: usize,
    /// Where the last read that filled the window ended.
    next: u64,
    /// The windows after this one, being read in the background, in block order.
    ahead: VecDeque<ReadAhead>,
    /// Used windows' buffers, for the next read-aheads.
    spare: Vec<MappedBuf>,
    /// Windows that came from a read-ahead, and the most read ahead at once.
    #[cfg(test)]
    pub(super) ahead_used: usize,
    #[cfg(test)]
    pub(super) ahead_most: usize,
}

/// Windows a sequential O_DIRECT reader reads ahead. Two readers on this project's
/// disk: with one window, 2.1 requests in flight and
/// 2.14-2.25 GiB/s; two, 3.9 and 2.45-2.49; four, 7.1 and 2.65-2.70. Each window is a
/// 2 MiB huge page (1 MiB used) while the reader reads on, and 1 MiB read in vain when
/// it stops.
pub(super) const READ_AHEAD: usize = 4;

/// A window read on the blocking pool: `len` bytes asked for at block offset `off`.
struct ReadAhead {
    off: u64,
    len: usize,
    done: std::sync::mpsc::Receiver<(MappedBuf, std::io::Result<()>)>,
}

impl DirectWindow {
    /// `path` opened with O_DIRECT, and a window to read it through; None where the file
    /// system refuses O_DIRECT.
    pub(super) fn open(path: &str) -> Option<(Arc<File>, DirectWindow)> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .ok()?;
        let file = Arc::new(file);
        let window = DirectWindow {
            file: file.clone(),
            buf: MappedBuf::default(),
            off: 0,
            grow: DIRECT_MIN,
            next: u64::MAX,
            ahead: VecDeque::new(),
            spare: Vec::new(),
            #[cfg(test)]
            ahead_used: 0,
            #[cfg(test)]
            ahead_most: 0,
        };
        Some((file, window))
    }

    /// Fill `dst` with the bytes at `offset` of the block file, `block_len` bytes long.
    pub(super) fn read_exact_at(
        &mut self,
        dst: &mut [u8],
        offset: u64,
        block_len: u64,
    ) -> std::io::Result<()> {
        let mut done = 0;
        while done < dst.len() {
            let at = offset + done as u64;
            let end = self.off + self.buf.len() as u64;
            if at < self.off || at >= end {
                self.fill(at, block_len)?;
                continue;
            }
            let s = (at - self.off) as usize;
            let n = (self.buf.len() - s).min(dst.len() - done);
            dst[done..done + n].copy_from_slice(&self.buf[s..s + n]);
            done += n;
        }
        Ok(())
    }

    /// Read the window starting at the aligned offset at or before `at`.
    fn fill(&mut self, at: u64, block_len: u64) -> std::io::Result<()> {
        let start = at / DIRECT_ALIGN * DIRECT_ALIGN;
        if at >= block_len {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let sequential = start <= self.next && self.next <= at + DIRECT_ALIGN;
        self.grow = if sequential {
            (self.grow * 2).min(DIRECT_MAX)
        } else {
            DIRECT_MIN
        };
        let want = window_len(self.grow, start, block_len);
        // Reads ahead that start elsewhere (after a jump) are left to finish unused; one
        // that failed is read again below, where a lasting error is returned.
        if self.ahead.front().is_some_and(|a| a.off != start) {
            self.ahead.clear();
        }
        let ahead = self.ahead.pop_front().and_then(|a| match a.done.recv() {
            Ok((buf, Ok(()))) => Some(buf),
            Ok((_, Err(e))) => {
                debug!(error = %e, at = start, "read-ahead of a block file failed; reading again");
                None
            }
            Err(_) => None,
        });
        match ahead {
            Some(buf) => {
                self.spare.push(std::mem::replace(&mut self.buf, buf));
                #[cfg(test)]
                {
                    self.ahead_used += 1;
                }
            }
            None => {
                if self.buf.capacity() < want {
                    // the first window is small; once it grows, take the largest at once
                    let cap = if want <= DIRECT_MIN {
                        DIRECT_MIN
                    } else {
                        DIRECT_MAX
                    };
                    self.buf = MappedBuf::new(cap)?;
                }
                read_window(&self.file, &mut self.buf, start, want)?;
            }
        }
        let got = self.buf.len();
        self.off = start;
        self.next = start + got as u64;
        if start + got as u64 <= at {
            self.buf.set_len(0);
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if self.grow == DIRECT_MAX {
            self.read_ahead(block_len);
        }
        Ok(())
    }

    /// Start reading the windows after `next` on tokio's blocking pool, up to
    /// `READ_AHEAD` of them (nothing outside a runtime: each `fill` reads in place then).
    fn read_ahead(&mut self, block_len: u64) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut off = self
            .ahead
            .back()
            .map_or(self.next, |a| a.off + a.len as u64);
        while self.ahead.len() < READ_AHEAD && off < block_len {
            let want = window_len(DIRECT_MAX, off, block_len);
            let spare = self.spare.pop().filter(|b| b.capacity() >= want);
            let mut buf = match spare.map_or_else(|| MappedBuf::new(DIRECT_MAX), Ok) {
                Ok(b) => b,
                Err(e) => {
                    // no more read-ahead then: `fill` reads in place and reports errors
                    debug!(error = %e, "no buffer for a read-ahead");
                    return;
                }
            };
            let file = self.file.clone();
            let (tx, done) = std::sync::mpsc::sync_channel(1);
            rt.spawn_blocking(move || {
                let res = read_window(&file, &mut buf, off, want);
                // the reader may have moved on and dropped the receiver
                let _ = tx.send((buf, res));
            });
            self.ahead.push_back(ReadAhead {
                off,
                len: want,
                done,
            });
            off += want as u64;
        }
        #[cfg(test)]
        {
            self.ahead_most = self.ahead_most.max(self.ahead.len());
        }
    }
}

/// The length of a window of `grow` bytes at aligned `start` of a `block_len`-byte file:
/// whole alignment units, the last one past the file's end if its length is unaligned.
fn window_len(grow: usize, start: u64, block_len: u64) -> usize {
    (grow as u64).min((block_len - start).div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN) as usize
}

/// Read `want` bytes at `start` of `file` into `buf`, fewer only at the end of the file;
/// `buf`'s length is then what was read.
fn read_window(file: &File, buf: &mut MappedBuf, start: u64, want: usize) -> std::io::Result<()> {
    buf.set_len(want);
    let mut got = 0;
    while got < want {
        // short only at the end of the file, whose length need not be aligned
        match file.read_at(&mut buf[got..want], start + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => {
                buf.set_len(0);
                return Err(e);
            }
        }
    }
    buf.set_len(got);
    Ok(())
}
