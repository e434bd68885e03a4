//! The master calls a writer makes (block allocation, complete, sync, abandon) and the
//! leases of the files writers hold open, renewed in the background.

use std::sync::{Arc, Weak};
use std::time::Duration;

use curvine_common::proto::{self, FileStatus};
use curvine_common::rpc::HasRequestId;
use curvine_common::{FsError, FsResult, RequestId};
use tokio::sync::watch;
use tracing::{debug, warn};

use super::{status_of, CurvineFs, Inner};
use crate::master::CallKind;

impl CurvineFs {
    pub(crate) fn lease_acquire(&self, file_id: u64) -> LeaseGuard {
        let mut l = self.inner.leases.lock().unwrap_or_else(|p| p.into_inner());
        *l.entry(file_id).or_default() += 1;
        LeaseGuard {
            inner: Arc::downgrade(&self.inner),
            file_id,
        }
    }

    pub(crate) async fn add_block(
        &self,
        file_id: u64,
        path: &str,
        previous: Vec<proto::CommittedBlock>,
        excluded_workers: Vec<u32>,
    ) -> FsResult<(proto::LocatedBlock, RequestId)> {
        let req = proto::AddBlockRequest {
            file_id,
            path: path.to_string(),
            previous,
            caller: self.caller(),
            excluded_workers,
        };
        let id = req.request_id();
        let r = rpc!(self, "add_block", Once, req).await?;
        let block = r
            .block
            .ok_or_else(|| FsError::protocol("add_block reply without a block"))?;
        Ok((block, id))
    }

    pub(crate) async fn complete(
        &self,
        file_id: u64,
        path: &str,
        blocks: Vec<proto::CommittedBlock>,
        (len, min_len): (u64, u64),
        mtime_ms: i64,
    ) -> FsResult<FileStatus> {
        let req = proto::CompleteRequest {
            file_id,
            path: path.to_string(),
            blocks,
            len,
            caller: self.caller(),
            min_len,
            mtime_ms,
        };
        let r = rpc!(self, "complete", Once, req).await?;
        status_of(r.status, "complete")
    }

    /// Publish the committed blocks and length of a file still being written.
    pub(crate) async fn sync_file(
        &self,
        file_id: u64,
        path: &str,
        blocks: Vec<proto::CommittedBlock>,
        len: u64,
    ) -> FsResult<FileStatus> {
        let req = proto::SyncRequest {
            file_id,
            path: path.to_string(),
            blocks,
            len,
            caller: self.caller(),
        };
        let r = rpc!(self, "sync", Once, req).await?;
        status_of(r.status, "sync")
    }

    /// Give up a file being written: a new file disappears, an append rolls back to
    /// its committed blocks.
    pub(crate) async fn abandon(&self, file_id: u64, path: &str) -> FsResult<()> {
        let req = proto::AbandonRequest {
            file_id,
            path: path.to_string(),
            caller: self.caller(),
        };
        rpc!(self, "abandon", Mutation, req).await?;
        Ok(())
    }
}

/// Keeps a file's lease renewed while a writer has it open.
pub(crate) struct LeaseGuard {
    inner: Weak<Inner>,
    file_id: u64,
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            let mut l = inner.leases.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = l.get_mut(&self.file_id) {
                *n -= 1;
                if *n == 0 {
                    l.remove(&self.file_id);
                }
            }
        }
    }
}

/// Renews the leases of open files every `period`; exits when the `CurvineFs` is gone.
pub(super) async fn renew_leases(
    inner: Weak<Inner>,
    mut shutdown: watch::Receiver<()>,
    period: Duration,
) {
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(period) => {}
        }
        let Some(fs) = inner.upgrade() else { return };
        fs.copies.trim(period);
        let file_ids: Vec<u64> = {
            let l = fs.leases.lock().unwrap_or_else(|p| p.into_inner());
            l.keys().copied().collect()
        };
        if file_ids.is_empty() {
            continue;
        }
        let req = proto::RenewLeaseRequest {
            client_id: fs.client_id,
            file_ids,
        };
        match fs
            .master
            .call("renew_lease", CallKind::Idempotent, req)
            .await
        {
            Ok(_) => debug!("leases renewed"),
            Err(e) => warn!(error = %e, "lease renewal failed"),
        }
    }
}
