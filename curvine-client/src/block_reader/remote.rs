//! A block streamed from a worker (READ_DATA frames through `BlockReadStream`), kept
//! open as read-ahead: later sequential reads take bytes from the last frame or the
//! frames after it, and small forward gaps are read through instead of reopening.

use bytes::BytesMut;
use curvine_common::block_read::{chunk_size_of, BlockReadStream};
use curvine_common::proto::DataHeader;
use curvine_common::{BlockId, FsResult};

use crate::pool::{DataConn, WorkerPool, MAX_RECV_PAYLOAD};

/// Forward gaps up to this size are skipped by reading through the stream; larger ones
/// reopen it at the new offset.
const MAX_SKIP: u64 = 4 << 20;

/// A READ_DATA stream from a worker, kept open as read-ahead for sequential reads.
pub(crate) struct RemoteStream {
    /// The frames; the connection goes back to the pool at READ_END.
    stream: BlockReadStream<DataConn>,
    /// The last frame's payload, at block offset `frame_off`.
    frame: BytesMut,
    frame_off: u64,
    next_off: u64,
    done: bool,
}

impl RemoteStream {
    /// The stream after the worker's OK (`ok`) to a READ_OPEN at block offset `offset`;
    /// its first frame starts at the chunk holding `offset`.
    pub(super) fn new(
        conn: DataConn,
        addr: &str,
        block_id: BlockId,
        ok: &DataHeader,
        offset: u64,
        verify: bool,
    ) -> RemoteStream {
        let cs = chunk_size_of(ok) as u64;
        let start = offset / cs * cs;
        RemoteStream {
            stream: BlockReadStream::new(conn, addr, block_id, ok, start, verify, MAX_RECV_PAYLOAD),
            frame: BytesMut::new(),
            frame_off: start,
            next_off: start,
            done: false,
        }
    }

    fn frame_end(&self) -> u64 {
        self.frame_off + self.frame.len() as u64
    }

    pub(super) fn covers(&self, offset: u64) -> bool {
        if offset >= self.frame_off && offset < self.frame_end() {
            return true;
        }
        !self.done && offset >= self.next_off && offset - self.next_off <= MAX_SKIP
    }

    async fn next_frame(&mut self, pool: &WorkerPool) -> FsResult<()> {
        match self.stream.next(&mut self.frame).await? {
            Some(off) => {
                self.frame_off = off;
                self.next_off = off + self.frame.len() as u64;
            }
            None => {
                self.done = true;
                self.frame_off = self.next_off;
                if let Some(c) = self.stream.take_reader() {
                    pool.put(c);
                }
            }
        }
        Ok(())
    }

    pub(super) async fn read_at(
        &mut self,
        pool: &WorkerPool,
        offset: u64,
        dst: &mut [u8],
    ) -> FsResult<usize> {
        loop {
            if offset >= self.frame_off && offset < self.frame_end() {
                let s = (offset - self.frame_off) as usize;
                let n = dst.len().min(self.frame.len() - s);
                dst[..n].copy_from_slice(&self.frame[s..s + n]);
                return Ok(n);
            }
            if self.done || offset < self.frame_off {
                return Ok(0);
            }
            self.next_frame(pool).await?;
        }
    }
}
