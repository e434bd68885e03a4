//! Block writes on the data plane: remote (WRITE_DATA frames verified chunk by chunk)
//! and short-circuit (the client writes the staging file and sends all CRCs at commit).
//!
//! A remote write overlaps the network and the disk: the connection task reads frames
//! and hands each payload buffer to a blocking writer thread (verify CRC32C, `pwrite`),
//! which returns the buffer for reuse; at most `MAX_BUFFERS` payloads are in flight.

use std::fs::File;
use std::os::unix::fs::FileExt;

use bytes::BytesMut;
use curvine_common::checksum::{chunk_count, verify_chunks};
use curvine_common::frame::{header, read_frame};
use curvine_common::proto::{DataHeader, DataOp, StorageTier};
use curvine_common::{BlockId, FsError, FsResult};
use tokio::sync::mpsc;
use tracing::debug;

use super::block_store::WriteHandle;
use crate::metrics::{self, ChecksumSource, IoPath};

use super::data_server::{join_err, take_spare, Conn, DataCtx, MAX_BUFFERS};

struct Job {
    offset: u64,
    crcs: Vec<u32>,
    buf: BytesMut,
}

pub(super) async fn handle_write(ctx: &DataCtx, conn: &mut Conn, open: DataHeader) -> FsResult<()> {
    let id = open.block_id;
    let drop_conn = fault_data!("worker.write_block", &ctx.worker);
    let want = StorageTier::try_from(open.tier).unwrap_or(StorageTier::Unspecified);
    let store = ctx.store.clone();
    let reserve = open.reserve;
    // Where the block fits as things are, on a tier without fsync, opening it is a file
    // create, done here as such a commit is; otherwise it may evict, wait for a heartbeat
    // or meet a busy file system, in the blocking pool.
    let handle = match store.try_begin_write(BlockId(id), want, reserve)? {
        Some(h) => h,
        None => tokio::task::spawn_blocking(move || store.begin_write(BlockId(id), want, reserve))
            .await
            .map_err(join_err)??,
    };
    let mut ok = header(DataOp::Ok);
    ok.block_id = id;
    ok.chunk_size = ctx.chunk_size;
    ok.tier = handle.tier() as i32;
    debug!(block = id, short_circuit = open.short_circuit, peer = %conn.peer, "write open");
    if open.short_circuit {
        ok.path = handle.staging_path().display().to_string();
        conn.send(&ok, &[]).await?;
        fault_drop!(return drop_conn, conn);
        short_circuit_write(ctx, conn, handle).await
    } else {
        conn.send(&ok, &[]).await?;
        remote_write(ctx, conn, handle, drop_conn).await
    }
}

async fn short_circuit_write(ctx: &DataCtx, conn: &mut Conn, handle: WriteHandle) -> FsResult<()> {
    let Some(h) = read_frame(&mut conn.rd, &mut conn.buf, ctx.max_frame).await? else {
        return Err(FsError::io("client closed the connection during a write"));
    };
    match DataOp::try_from(h.op) {
        Ok(DataOp::WriteCommit) => {
            commit(ctx, conn, handle, h.len, h.crcs, IoPath::ShortCircuit).await
        }
        Ok(DataOp::WriteAbort) => Ok(()),
        _ => Err(FsError::protocol(format!(
            "expected WRITE_COMMIT or WRITE_ABORT, got op {}",
            h.op
        ))),
    }
}

async fn commit(
    ctx: &DataCtx,
    conn: &mut Conn,
    handle: WriteHandle,
    len: u64,
    crcs: Vec<u32>,
    path: IoPath,
) -> FsResult<()> {
    let id = handle.id;
    let tier = handle.tier();
    if ctx.store.conf().fsync_for(handle.tier()) {
        tokio::task::spawn_blocking(move || handle.commit(len, crcs))
            .await
            .map_err(join_err)??;
    } else {
        // without fsync a commit is a few metadata syscalls: cheaper inline
        handle.commit(len, crcs)?;
    }
    metrics::worker().written(tier, path, len);
    let mut ok = header(DataOp::Ok);
    ok.block_id = id;
    ok.len = len;
    conn.send(&ok, &[]).await
}

async fn remote_write(
    ctx: &DataCtx,
    conn: &mut Conn,
    mut handle: WriteHandle,
    drop_conn: bool,
) -> FsResult<()> {
    let id = handle.id;
    let cs = ctx.chunk_size as usize;
    let file = handle.clone_file()?;
    let (tx, rx) = mpsc::channel::<Job>(MAX_BUFFERS);
    let (free_tx, mut free_rx) = mpsc::unbounded_channel::<BytesMut>();
    let worker = ctx.worker.clone();
    let mut writer =
        tokio::task::spawn_blocking(move || disk_writer(file, rx, free_tx, cs, id, worker));
    let mut tx = Some(tx);
    let mut received = 0u64;
    let mut ended_partial = false;
    let mut in_flight = 0usize;
    let result = loop {
        let frame = tokio::select! {
            biased;
            r = &mut writer => {
                // the writer only stops early on an error
                break match r {
                    Ok(Err(e)) => Err(e),
                    Ok(Ok(_)) => Err(FsError::internal("block writer stopped early")),
                    Err(e) => Err(join_err(e)),
                };
            }
            r = read_frame(&mut conn.rd, &mut conn.buf, ctx.max_frame) => r,
        };
        let h = match frame {
            Ok(Some(h)) => h,
            Ok(None) => break Err(FsError::io("client closed the connection during a write")),
            Err(e) => break Err(e),
        };
        match DataOp::try_from(h.op) {
            Ok(DataOp::WriteData) => {
                let n = conn.buf.len();
                if let Err(e) = check_data(&h, received, n, cs, ended_partial) {
                    break Err(e);
                }
                if n == 0 {
                    continue;
                }
                if let Err(e) = handle.ensure_reserved(received + n as u64) {
                    break Err(e);
                }
                ended_partial = !n.is_multiple_of(cs);
                let next = match take_spare(conn).or_else(|| free_rx.try_recv().ok()) {
                    Some(b) => b,
                    None if in_flight < MAX_BUFFERS => {
                        in_flight += 1;
                        BytesMut::new()
                    }
                    None => match free_rx.recv().await {
                        Some(b) => b,
                        // the writer is gone: its result says why
                        None => continue,
                    },
                };
                let buf = std::mem::replace(&mut conn.buf, next);
                let job = Job {
                    offset: h.offset,
                    crcs: h.crcs,
                    buf,
                };
                let Some(sender) = tx.as_ref() else {
                    break Err(FsError::internal("block writer closed"));
                };
                if sender.send(job).await.is_err() {
                    // writer failed; the next loop turn collects its error
                    continue;
                }
                received += n as u64;
                fault_drop!(break drop_conn, conn);
            }
            Ok(DataOp::WriteCommit) => {
                tx = None;
                let crcs = match (&mut writer).await {
                    Ok(Ok(c)) => c,
                    Ok(Err(e)) => break Err(e),
                    Err(e) => break Err(join_err(e)),
                };
                if h.len != received {
                    break Err(FsError::invalid(format!(
                        "block {id}: commit of {} bytes but {received} were received",
                        h.len
                    )));
                }
                while let Ok(b) = free_rx.try_recv() {
                    conn.spare.push(b);
                }
                return commit(ctx, conn, handle, h.len, crcs, IoPath::Remote).await;
            }
            Ok(DataOp::WriteAbort) => {
                tx = None;
                let _ = (&mut writer).await;
                debug!(block = id, "write aborted by the client");
                break Ok(());
            }
            _ => {
                break Err(FsError::protocol(format!(
                    "unexpected op {} during a block write",
                    h.op
                )))
            }
        }
    };
    drop(tx);
    while let Ok(b) = free_rx.try_recv() {
        conn.spare.push(b);
    }
    result
}

fn check_data(
    h: &DataHeader,
    received: u64,
    n: usize,
    cs: usize,
    ended_partial: bool,
) -> FsResult<()> {
    if h.offset != received {
        return Err(FsError::protocol(format!(
            "block {}: WRITE_DATA at offset {} but {received} bytes were received",
            h.block_id, h.offset
        )));
    }
    if ended_partial && n > 0 {
        return Err(FsError::protocol(format!(
            "block {}: data after a partial last chunk",
            h.block_id
        )));
    }
    let want = chunk_count(n as u64, cs as u32);
    if h.crcs.len() != want {
        return Err(FsError::protocol(format!(
            "block {}: {} checksums for a payload of {n} bytes ({want} chunks)",
            h.block_id,
            h.crcs.len()
        )));
    }
    Ok(())
}

/// Verify and write payloads in order; returns every chunk's CRC once the channel closes.
fn disk_writer(
    file: File,
    mut rx: mpsc::Receiver<Job>,
    free: mpsc::UnboundedSender<BytesMut>,
    cs: usize,
    id: u64,
    worker: String,
) -> FsResult<Vec<u32>> {
    let mut all = Vec::new();
    while let Some(job) = rx.blocking_recv() {
        if let Err(i) = verify_chunks(&job.buf, cs, &job.crcs) {
            metrics::worker().checksum_failure(ChecksumSource::Write);
            return Err(FsError::ChecksumMismatch {
                block_id: id,
                worker,
                message: format!(
                    "chunk at block offset {} does not match its CRC32C",
                    job.offset + (i * cs) as u64
                ),
            });
        }
        fault_disk!("disk.write_chunk", &worker);
        file.write_all_at(&job.buf, job.offset)
            .map_err(|e| FsError::io_ctx(format!("write block {id}"), e))?;
        all.extend_from_slice(&job.crcs);
        let _ = free.send(job.buf);
    }
    Ok(all)
}
