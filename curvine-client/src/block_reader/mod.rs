//! Reading one block from one replica: a short-circuit block file (`local`: pread
//! straight into the caller's buffer, CRC verified per chunk, through an O_DIRECT
//! window in `direct` or a tmpfs mapping in `mapped`) or a remote READ_DATA stream
//! (`remote`: chunk aligned frames with their CRCs, kept open as read-ahead for
//! sequential reads).

mod direct;
mod local;
mod mapped;
mod remote;
#[cfg(test)]
mod tests;

use bytes::{Bytes, BytesMut};
use curvine_common::block_read::{check_opened, read_open};
use curvine_common::proto::{BlockLocation, UfsRange};
use curvine_common::{BlockId, FsResult, RequestId};

use crate::pool::{is_local_host, worker_addr, WorkerPool};
use local::LocalBlock;
use remote::RemoteStream;

#[derive(Debug, Clone)]
pub(crate) struct BlockReadOpts {
    pub token: String,
    pub short_circuit: bool,
    pub verify_checksum: bool,
    pub client_host: String,
    /// Read SSD and HDD block files with O_DIRECT (`client.direct_io`).
    pub direct_io: bool,
    /// The master call that located the block, sent in READ_OPEN for the worker's span.
    pub req: RequestId,
}

/// An open replica of a block.
pub(crate) enum BlockSource {
    Local(LocalBlock),
    Remote(RemoteStream),
}

impl BlockSource {
    /// Whether this reads a block file on this host (short-circuit).
    pub(crate) fn is_local(&self) -> bool {
        matches!(self, BlockSource::Local(_))
    }

    /// Open block `block_id` on `loc` to read from `offset`, asking a remote worker to
    /// stream `len` bytes (0 = to the block's end). `need_len` is the length the master
    /// recorded; a replica shorter than that is refused. `ufs`: the block may not be
    /// on the worker yet; it fetches it from this range of the under-store (streamed,
    /// never short-circuit).
    #[allow(clippy::too_many_arguments)]
    #[tracing::instrument(
        target = "curvine::request",
        name = "client.read",
        level = "debug",
        skip_all,
        fields(block = block_id.0, req = %opts.req)
    )]
    pub(crate) async fn open(
        pool: &WorkerPool,
        block_id: BlockId,
        need_len: u64,
        loc: &BlockLocation,
        offset: u64,
        len: u64,
        ufs: Option<&UfsRange>,
        opts: &BlockReadOpts,
    ) -> FsResult<BlockSource> {
        let a = loc.address.clone().unwrap_or_default();
        let addr = worker_addr(&a);
        let sc = opts.short_circuit && ufs.is_none() && is_local_host(&a.host, &opts.client_host);
        let mut h = read_open(block_id, offset, len, &opts.token);
        h.short_circuit = sc;
        h.ufs = ufs.cloned();
        h.client_id = opts.req.client;
        h.call_id = opts.req.call;
        let mut frame = BytesMut::new();
        let (conn, ok) = pool.open(&addr, &h, &mut frame).await?;
        check_opened(&addr, block_id, need_len, &ok)?;
        if !ok.path.is_empty() {
            pool.put(conn);
            return LocalBlock::open(block_id, addr, ok, opts).map(BlockSource::Local);
        }
        Ok(BlockSource::Remote(RemoteStream::new(
            conn,
            &addr,
            block_id,
            &ok,
            offset,
            opts.verify_checksum,
        )))
    }

    /// Whether `offset` can be served without reopening.
    pub(crate) fn covers(&self, offset: u64) -> bool {
        match self {
            BlockSource::Local(l) => offset < l.block_len,
            BlockSource::Remote(r) => r.covers(offset),
        }
    }

    /// Up to `n` bytes at block offset `offset` without a copy (see `LocalBlock::mapped`);
    /// None for a remote stream or a block file that cannot be mapped.
    pub(crate) fn mapped(&mut self, offset: u64, n: usize) -> FsResult<Option<Bytes>> {
        match self {
            BlockSource::Local(l) => l.mapped(offset, n),
            BlockSource::Remote(_) => Ok(None),
        }
    }

    /// Read at block offset `offset` into `dst`; 0 means the source cannot serve it
    /// (a finished stream), not the end of the block.
    pub(crate) async fn read_at(
        &mut self,
        pool: &WorkerPool,
        offset: u64,
        dst: &mut [u8],
    ) -> FsResult<usize> {
        match self {
            BlockSource::Local(l) => l.read_at(offset, dst),
            BlockSource::Remote(r) => r.read_at(pool, offset, dst).await,
        }
    }
}
