//! Reading one block over a worker's data plane, the part every reader shares: the
//! `READ_OPEN` request, the checks on the worker's `OK`, and the `READ_DATA` frames
//! that follow until `READ_END`, each in order and each chunk verified against the
//! CRC32C it carries. The client's remote reads, the worker's re-replication and the
//! master's uploads to an under-store all read a block through [`BlockReadStream`].

use bytes::BytesMut;
use tokio::io::{AsyncRead, BufReader};
use tokio::net::TcpStream;

use crate::checksum::verify_chunks;
use crate::error::{FsError, FsResult};
use crate::frame::{header, recv_frame, with_worker, write_frame};
use crate::proto::{DataHeader, DataOp};
use crate::types::BlockId;

/// Chunk size assumed when a worker's reply names none.
pub const DEFAULT_CHUNK_SIZE: usize = 64 << 10;

/// Read buffer of a connection opened by [`BlockReadStream::connect`]; frame headers go
/// through it, large payloads bypass it.
const READ_BUF: usize = 64 << 10;

/// A `READ_OPEN` of `len` bytes (0 = to the block's end) of `block` from `offset`.
pub fn read_open(block: BlockId, offset: u64, len: u64, token: &str) -> DataHeader {
    let mut h = header(DataOp::ReadOpen);
    h.block_id = block.0;
    h.offset = offset;
    h.len = len;
    token.clone_into(&mut h.token);
    h
}

/// Check the worker's reply to a `READ_OPEN` (already through `check_error`): an `OK`
/// for a replica of at least `need_len` bytes, the length the master recorded.
pub fn check_opened(addr: &str, block: BlockId, need_len: u64, reply: &DataHeader) -> FsResult<()> {
    if reply.op != DataOp::Ok as i32 {
        return Err(FsError::protocol(format!(
            "worker {addr}: expected OK to READ_OPEN of block {block}, got op {}",
            reply.op
        )));
    }
    if reply.block_len < need_len {
        return Err(FsError::BlockNotFound {
            block_id: block.0,
            worker: format!("{addr} (has {} of {need_len} bytes)", reply.block_len),
        });
    }
    Ok(())
}

/// The chunk size of a replica from the worker's reply to `READ_OPEN`.
pub fn chunk_size_of(reply: &DataHeader) -> usize {
    match reply.chunk_size {
        0 => DEFAULT_CHUNK_SIZE,
        n => n as usize,
    }
}

/// The error of a chunk whose bytes do not match their CRC.
pub fn mismatch(block: BlockId, worker: &str, offset: u64) -> FsError {
    FsError::ChecksumMismatch {
        block_id: block.0,
        worker: worker.to_string(),
        message: format!("chunk at block offset {offset}"),
    }
}

/// The `READ_DATA` frames of a block a worker agreed to stream, read from `R`.
pub struct BlockReadStream<R> {
    /// The connection; handed back by [`BlockReadStream::take_reader`] after `READ_END`.
    rd: Option<R>,
    addr: String,
    block: BlockId,
    chunk_size: usize,
    verify: bool,
    max_frame: usize,
    /// Block offset the next frame must start at.
    next_off: u64,
    /// With [`BlockReadStream::until`]: frames are cut at this offset, and the stream
    /// must reach it.
    end: Option<u64>,
    ended: bool,
}

impl BlockReadStream<BufReader<TcpStream>> {
    /// Connect to the worker at `addr` and ask for the first `len` bytes of `block`,
    /// which the worker must hold whole; every chunk is verified. The bytes past `len`
    /// of a longer replica are not returned.
    pub async fn connect(
        addr: &str,
        token: &str,
        block: BlockId,
        len: u64,
        max_frame: usize,
    ) -> FsResult<Self> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| FsError::io_ctx(format!("connect to {addr}"), e))?;
        // a socket option the kernel refuses only costs latency
        let _ = stream.set_nodelay(true);
        let mut rd = BufReader::with_capacity(READ_BUF, stream);
        write_frame(&mut rd, &read_open(block, 0, len, token), &[])
            .await
            .map_err(|e| with_worker(e, addr))?;
        let mut buf = BytesMut::new();
        let reply = recv_frame(&mut rd, &mut buf, max_frame, addr).await?;
        check_opened(addr, block, len, &reply)?;
        Ok(BlockReadStream::new(rd, addr, block, &reply, 0, true, max_frame).until(len))
    }
}

impl<R: AsyncRead + Unpin> BlockReadStream<R> {
    /// The stream that follows the worker's `OK` to a `READ_OPEN` (see `check_opened`):
    /// its first frame starts at `start`, the requested offset rounded down to a chunk.
    pub fn new(
        rd: R,
        addr: &str,
        block: BlockId,
        reply: &DataHeader,
        start: u64,
        verify: bool,
        max_frame: usize,
    ) -> Self {
        BlockReadStream {
            rd: Some(rd),
            addr: addr.to_string(),
            block,
            chunk_size: chunk_size_of(reply),
            verify,
            max_frame,
            next_off: start,
            end: None,
            ended: false,
        }
    }

    /// Cut frames at block offset `end` and fail a stream that ends before it.
    pub fn until(mut self, end: u64) -> Self {
        self.end = Some(end);
        self
    }

    /// The chunk size of the replica.
    pub fn chunk_size(&self) -> usize {
        self.chunk_size
    }

    /// The block being read.
    pub fn block(&self) -> BlockId {
        self.block
    }

    /// The worker's data-plane address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The next frame's bytes into `buf` (replacing its contents): `Some(offset)` of
    /// them in the block, or `None` at `READ_END`. A frame out of order, a chunk that
    /// does not match its CRC (when verifying), an error frame or a stream cut short
    /// is an error, after which the connection must not be reused.
    pub async fn next(&mut self, buf: &mut BytesMut) -> FsResult<Option<u64>> {
        let Some(rd) = self.rd.as_mut().filter(|_| !self.ended) else {
            buf.clear();
            return Ok(None);
        };
        let h = recv_frame(rd, buf, self.max_frame, &self.addr).await?;
        match DataOp::try_from(h.op) {
            Ok(DataOp::ReadData) => {
                if h.offset != self.next_off {
                    return Err(FsError::protocol(format!(
                        "worker {}: block {} frame at offset {}, expected {}",
                        self.addr, self.block, h.offset, self.next_off
                    )));
                }
                if self.verify {
                    verify_chunks(buf, self.chunk_size, &h.crcs).map_err(|i| {
                        mismatch(
                            self.block,
                            &self.addr,
                            h.offset + (i * self.chunk_size) as u64,
                        )
                    })?;
                }
                self.next_off = h.offset + buf.len() as u64;
                if let Some(end) = self.end {
                    buf.truncate(end.saturating_sub(h.offset).min(buf.len() as u64) as usize);
                }
                Ok(Some(h.offset))
            }
            Ok(DataOp::ReadEnd) => {
                if let Some(end) = self.end.filter(|&e| self.next_off < e) {
                    return Err(FsError::protocol(format!(
                        "worker {}: block {} stream ended at {} of {end} bytes",
                        self.addr, self.block, self.next_off
                    )));
                }
                self.ended = true;
                buf.clear();
                Ok(None)
            }
            _ => Err(FsError::protocol(format!(
                "worker {}: unexpected op {} in the stream of block {}",
                self.addr, h.op, self.block
            ))),
        }
    }

    /// The connection, once `READ_END` arrived: clean, ready for another operation.
    pub fn take_reader(&mut self) -> Option<R> {
        if self.ended {
            self.rd.take()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::chunk_crcs;
    use crate::frame::error_header;

    const CS: usize = 16;

    fn ok(block_len: u64) -> DataHeader {
        let mut h = header(DataOp::Ok);
        h.block_len = block_len;
        h.chunk_size = CS as u32;
        h
    }

    fn data(offset: u64, bytes: &[u8]) -> DataHeader {
        let mut h = header(DataOp::ReadData);
        h.offset = offset;
        h.crcs = chunk_crcs(bytes, CS);
        h
    }

    /// A stream reading the frames `send` writes.
    async fn stream_of(
        frames: Vec<(DataHeader, Vec<u8>)>,
    ) -> BlockReadStream<tokio::io::DuplexStream> {
        let (mut a, b) = tokio::io::duplex(1 << 16);
        for (h, p) in frames {
            write_frame(&mut a, &h, &p).await.unwrap();
        }
        drop(a);
        BlockReadStream::new(b, "w:1", BlockId(7), &ok(40), 0, true, 1 << 20)
    }

    #[tokio::test]
    async fn frames_arrive_in_order_and_are_cut_at_the_end() {
        let body: Vec<u8> = (0..48u8).collect();
        let mut s = stream_of(vec![
            (data(0, &body[..32]), body[..32].to_vec()),
            (data(32, &body[32..]), body[32..].to_vec()),
            (header(DataOp::ReadEnd), vec![]),
        ])
        .await
        .until(40);
        let mut buf = BytesMut::new();
        assert_eq!(s.next(&mut buf).await.unwrap(), Some(0));
        assert_eq!(&buf[..], &body[..32]);
        assert!(s.take_reader().is_none(), "not before READ_END");
        assert_eq!(s.next(&mut buf).await.unwrap(), Some(32));
        assert_eq!(&buf[..], &body[32..40]);
        assert_eq!(s.next(&mut buf).await.unwrap(), None);
        assert!(s.take_reader().is_some());
    }

    #[tokio::test]
    async fn a_bad_chunk_names_its_offset() {
        let body = vec![5u8; 32];
        let mut h = data(0, &body);
        h.crcs[1] ^= 1;
        let mut s = stream_of(vec![(h, body)]).await;
        match s.next(&mut BytesMut::new()).await {
            Err(FsError::ChecksumMismatch {
                block_id, message, ..
            }) => {
                assert_eq!(block_id, 7);
                assert!(message.contains(&CS.to_string()), "{message}");
            }
            other => panic!("expected a checksum mismatch, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn gaps_short_streams_and_error_frames_fail() {
        let body = vec![1u8; 16];
        let mut s = stream_of(vec![(data(16, &body), body.clone())]).await;
        let e = s.next(&mut BytesMut::new()).await.unwrap_err();
        assert!(matches!(e, FsError::Protocol { .. }), "{e}");

        let mut s = stream_of(vec![
            (data(0, &body), body.clone()),
            (header(DataOp::ReadEnd), vec![]),
        ])
        .await
        .until(40);
        let mut buf = BytesMut::new();
        s.next(&mut buf).await.unwrap();
        let e = s.next(&mut buf).await.unwrap_err();
        assert!(matches!(e, FsError::Protocol { .. }), "{e}");
        assert!(s.take_reader().is_none());

        let err = error_header(&FsError::no_space("full"));
        let mut s = stream_of(vec![(err, vec![])]).await;
        let e = s.next(&mut BytesMut::new()).await.unwrap_err();
        assert!(matches!(e, FsError::NoSpace { .. }), "{e}");

        let mut s = stream_of(vec![]).await;
        let e = s.next(&mut BytesMut::new()).await.unwrap_err();
        assert!(e.to_string().contains("w:1"), "{e}");
    }

    #[test]
    fn a_short_replica_is_not_found() {
        let e = check_opened("w:1", BlockId(7), 41, &ok(40)).unwrap_err();
        assert!(
            matches!(e, FsError::BlockNotFound { block_id: 7, .. }),
            "{e}"
        );
        assert!(check_opened("w:1", BlockId(7), 40, &ok(40)).is_ok());
        let e = check_opened("w:1", BlockId(7), 1, &header(DataOp::ReadEnd)).unwrap_err();
        assert!(matches!(e, FsError::Protocol { .. }), "{e}");
    }
}
