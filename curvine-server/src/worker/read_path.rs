//! Block reads on the data plane: short-circuit (reply with the block path and every
//! chunk's CRC) or remote (stream READ_DATA frames of whole chunks with their stored CRCs,
//! then READ_END). Ranges are widened to chunk boundaries so every chunk verifies.
//!
//! A remote read longer than one frame overlaps the disk and the network: a blocking
//! thread `pread`s frames into recycled buffers while the connection task sends them.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::BytesMut;
use curvine_common::frame::header;
use curvine_common::proto::{DataHeader, DataOp};
use curvine_common::{BlockId, FsError, FsResult};
use tokio::sync::mpsc;
use tracing::debug;

use super::data_server::{Conn, DataCtx, MAX_BUFFERS};
use crate::metrics::{self, IoPath};

/// Largest READ_DATA payload (whole chunks).
pub const MAX_READ_FRAME: u64 = 1 << 20;

/// The streamed range for a request: `[start, end)` widened to chunk boundaries.
pub fn widen(offset: u64, len: u64, block_len: u64, cs: u64) -> (u64, u64) {
    let start = offset / cs * cs;
    let end = if len == 0 {
        block_len
    } else {
        offset.saturating_add(len).min(block_len)
    };
    let end = end.div_ceil(cs).saturating_mul(cs).min(block_len);
    (start, end.max(start))
}

pub(super) async fn handle_read(ctx: &DataCtx, conn: &mut Conn, open: DataHeader) -> FsResult<()> {
    let id = open.block_id;
    if let Some(u) = &open.ufs {
        if ctx.store.block_info(BlockId(id))?.is_none() {
            let u = u.clone();
            let mut open = open;
            open.ufs = None;
            return Box::pin(super::ufs_fetch::handle(ctx, conn, open, u)).await;
        }
    }
    let drop_conn = fault_data!("worker.read_block", &ctx.worker);
    // opening a file and reading a few KiB of sidecar: cheap enough to do inline
    let block = ctx.store.open_read(BlockId(id))?;
    debug!(block = id, offset = open.offset, len = open.len, short_circuit = open.short_circuit,
        peer = %conn.peer, "read open");
    let mut ok = header(DataOp::Ok);
    ok.block_id = id;
    ok.block_len = block.len;
    ok.chunk_size = block.chunk_size;
    ok.tier = block.tier as i32;
    if open.short_circuit {
        ok.path = block.path.display().to_string();
        ok.crcs = block.crcs;
        conn.send(&ok, &[]).await?;
        // the client reads the file itself: count what it asked for
        let rest = block.len.saturating_sub(open.offset);
        let granted = if open.len == 0 {
            rest
        } else {
            open.len.min(rest)
        };
        metrics::worker().read(block.tier, IoPath::ShortCircuit, granted);
        fault_drop!(return drop_conn, conn);
        return Ok(());
    }
    if open.offset > block.len {
        return Err(FsError::invalid(format!(
            "block {id}: read offset {} is past its length {}",
            open.offset, block.len
        )));
    }
    conn.send(&ok, &[]).await?;
    let cs = u64::from(block.chunk_size);
    let (start, end) = widen(open.offset, open.len, block.len, cs);
    let frame = (MAX_READ_FRAME / cs).max(1) * cs;
    // an injected drop sends the first frame only, then closes the connection
    let end = if drop_conn {
        end.min(start + frame)
    } else {
        end
    };
    let crcs = Arc::new(block.crcs);
    if end - start <= frame {
        if end > start {
            let mut buf = std::mem::take(&mut conn.buf);
            let r = read_into(&block.file, &mut buf, start, end - start, id, &ctx.worker);
            let sent = match r {
                Ok(()) => send_data(conn, &crcs, cs, start, &buf).await,
                Err(e) => Err(e),
            };
            conn.buf = buf;
            sent?;
        }
    } else {
        let worker = ctx.worker.clone();
        stream_range(conn, block.file, crcs, cs, (start, end), frame, id, worker).await?;
    }
    metrics::worker().read(block.tier, IoPath::Remote, end - start);
    fault_drop!(return drop_conn, conn);
    let mut done = header(DataOp::ReadEnd);
    done.block_id = id;
    conn.send(&done, &[]).await
}

async fn send_data(conn: &mut Conn, crcs: &[u32], cs: u64, off: u64, buf: &[u8]) -> FsResult<()> {
    let first = (off / cs) as usize;
    let last = (off + buf.len() as u64).div_ceil(cs) as usize;
    let Some(slice) = crcs.get(first..last) else {
        return Err(FsError::internal("checksum sidecar shorter than the block"));
    };
    let mut h = header(DataOp::ReadData);
    h.offset = off;
    h.crcs = slice.to_vec();
    conn.send(&h, buf).await
}

fn read_into(
    file: &File,
    buf: &mut BytesMut,
    off: u64,
    n: u64,
    id: u64,
    worker: &str,
) -> FsResult<()> {
    fault_disk!("disk.read_chunk", worker);
    let n = n as usize;
    if buf.len() != n {
        buf.resize(n, 0);
    }
    file.read_exact_at(&mut buf[..], off)
        .map_err(|e| FsError::io_ctx(format!("read block {id} at {off}"), e))
}

#[allow(clippy::too_many_arguments)]
async fn stream_range(
    conn: &mut Conn,
    file: File,
    crcs: Arc<Vec<u32>>,
    cs: u64,
    (start, end): (u64, u64),
    frame: u64,
    id: u64,
    worker: String,
) -> FsResult<()> {
    let (tx, mut rx) = mpsc::channel::<FsResult<(u64, BytesMut)>>(MAX_BUFFERS);
    let (free_tx, mut free_rx) = mpsc::unbounded_channel::<BytesMut>();
    let mut pool: Vec<BytesMut> = std::mem::take(&mut conn.spare);
    pool.truncate(MAX_BUFFERS);
    while pool.len() < MAX_BUFFERS {
        pool.push(BytesMut::new());
    }
    for b in pool {
        let _ = free_tx.send(b);
    }
    let reader = tokio::task::spawn_blocking(move || {
        let mut off = start;
        while off < end {
            let Some(mut buf) = free_rx.blocking_recv() else {
                return free_rx;
            };
            let n = frame.min(end - off);
            let r = read_into(&file, &mut buf, off, n, id, &worker).map(|()| (off, buf));
            let failed = r.is_err();
            if tx.blocking_send(r).is_err() || failed {
                return free_rx;
            }
            off += n;
        }
        free_rx
    });
    let mut result = Ok(());
    while let Some(item) = rx.recv().await {
        let (off, buf) = match item {
            Ok(v) => v,
            Err(e) => {
                result = Err(e);
                break;
            }
        };
        let sent = send_data(conn, &crcs, cs, off, &buf).await;
        let _ = free_tx.send(buf);
        if let Err(e) = sent {
            result = Err(e);
            break;
        }
    }
    drop(rx);
    drop(free_tx);
    if let Ok(mut free_rx) = reader.await {
        while let Ok(b) = free_rx.try_recv() {
            conn.spare.push(b);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::widen;

    #[test]
    fn ranges_widen_to_chunks() {
        assert_eq!(widen(0, 0, 10, 4), (0, 10));
        assert_eq!(widen(5, 2, 10, 4), (4, 8));
        assert_eq!(widen(5, 100, 10, 4), (4, 10));
        assert_eq!(widen(10, 0, 10, 4), (8, 10));
        assert_eq!(widen(0, 0, 0, 4), (0, 0));
    }
}
