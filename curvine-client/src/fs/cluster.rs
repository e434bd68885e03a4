//! The calls on mounts and the cluster: under-store mounts, resync and free, load
//! jobs, persist, journal sync, the cluster report and the change log.

use curvine_common::proto;
use curvine_common::{FsError, FsResult};

use super::CurvineFs;
use crate::master::CallKind;

impl CurvineFs {
    /// Mount the under-store `info.ufs_uri` at `info.path` (the master checks the store
    /// by listing it). The reply lists the mount with its secrets out.
    pub async fn mount(&self, mut info: proto::MountInfo) -> FsResult<proto::MountInfo> {
        info.path = self.norm(&info.path)?;
        let req = proto::MountRequest {
            mount: Some(info),
            caller: self.caller(),
        };
        let r = rpc!(self, "mount", Mutation, req).await?;
        r.mount
            .ok_or_else(|| FsError::protocol("mount: the reply has no mount"))
    }

    /// Remove the mount at `path` (what Curvine cached of it goes; the store stays).
    pub async fn umount(&self, path: &str) -> FsResult<()> {
        let req = proto::UmountRequest {
            path: self.norm(path)?,
            caller: self.caller(),
        };
        rpc!(self, "umount", Mutation, req).await?;
        Ok(())
    }

    /// Every mount, secrets out.
    pub async fn mounts(&self) -> FsResult<Vec<proto::MountInfo>> {
        let r = rpc!(self, "list_mounts", Idempotent, proto::ListMountsRequest {}).await?;
        Ok(r.mounts)
    }

    /// Check `path` (under a mount) and what was loaded below it against the store now.
    pub async fn resync(&self, path: &str) -> FsResult<proto::ResyncResponse> {
        let req = proto::ResyncRequest {
            path: self.norm(path)?,
            caller: self.caller(),
        };
        rpc!(self, "resync", Idempotent, req).await
    }

    /// Drop the cached blocks of the persisted files at or under `path`.
    pub async fn free(&self, path: &str) -> FsResult<proto::FreeResponse> {
        let req = proto::FreeRequest {
            path: self.norm(path)?,
            caller: self.caller(),
        };
        rpc!(self, "free", Idempotent, req).await
    }

    /// Start a load job on the master for the files at `path` (under it with
    /// `recursive`): their blocks are fetched from the under-store into the cache.
    pub async fn submit_load(&self, path: &str, recursive: bool) -> FsResult<proto::LoadJob> {
        let req = proto::SubmitLoadRequest {
            path: self.norm(path)?,
            recursive,
            caller: self.caller(),
        };
        let r: proto::SubmitLoadResponse = rpc!(self, "submit_load", Mutation, req).await?;
        r.job
            .ok_or_else(|| FsError::protocol("submit_load: no job in the reply"))
    }

    /// Load job `id`.
    pub async fn load_job(&self, id: u64) -> FsResult<proto::LoadJob> {
        let req = proto::GetLoadRequest {
            job_id: id,
            path: String::new(),
        };
        let r: proto::GetLoadResponse = rpc!(self, "get_load", Idempotent, req).await?;
        r.jobs
            .into_iter()
            .next()
            .ok_or_else(|| FsError::not_found(format!("load job {id}")))
    }

    /// The load jobs of `path` (every job the master keeps when empty), oldest first.
    pub async fn load_jobs(&self, path: &str) -> FsResult<Vec<proto::LoadJob>> {
        let path = if path.is_empty() {
            String::new()
        } else {
            self.norm(path)?
        };
        let req = proto::GetLoadRequest { job_id: 0, path };
        let r: proto::GetLoadResponse = rpc!(self, "get_load", Idempotent, req).await?;
        Ok(r.jobs)
    }

    /// Cancel load job `id`; blocks loaded so far stay cached.
    pub async fn cancel_load(&self, id: u64) -> FsResult<proto::LoadJob> {
        let req = proto::CancelLoadRequest {
            job_id: id,
            caller: self.caller(),
        };
        let r: proto::CancelLoadResponse = rpc!(self, "cancel_load", Idempotent, req).await?;
        r.job
            .ok_or_else(|| FsError::protocol("cancel_load: no job in the reply"))
    }

    /// Upload the files at or under `path` that the under-store does not hold yet
    /// (under a through or async mount); returns once they are persisted.
    pub async fn persist(&self, path: &str) -> FsResult<proto::PersistResponse> {
        let req = proto::PersistRequest {
            path: self.norm(path)?,
            caller: self.caller(),
        };
        rpc!(self, "persist", Idempotent, req).await
    }

    /// Cluster capacity and usage, per worker and tier.
    /// Wait until every namespace change the master made before this call is on disk
    /// (its journal synced; immediate with `journal.sync = false`). What makes the
    /// changes of a handle that defers syncs (`deferring_sync`) durable.
    pub async fn sync_journal(&self) -> FsResult<()> {
        self.inner
            .master
            .call(
                "sync_journal",
                CallKind::Idempotent,
                proto::SyncJournalRequest {},
            )
            .await
            .map(drop)
    }

    /// Begin draining worker `worker` (its id, or its data address `host:port`), or end
    /// the drain with `cancel`. Returns the worker's id. Superuser only.
    pub async fn decommission(&self, worker: &str, cancel: bool) -> FsResult<u32> {
        let (worker_id, address) = match worker.parse::<u32>() {
            Ok(id) if id > 0 => (id, String::new()),
            _ => (0, worker.to_string()),
        };
        let req = proto::DecommissionRequest {
            worker_id,
            address,
            cancel,
            caller: self.caller(),
        };
        let r: proto::DecommissionResponse = rpc!(self, "decommission", Mutation, req).await?;
        Ok(r.worker_id)
    }

    /// The masters of the group as its leader sees them (`cv admin masters`).
    pub async fn list_masters(&self) -> FsResult<proto::ListMastersResponse> {
        let req = proto::ListMastersRequest {
            caller: self.caller(),
        };
        rpc!(self, "list_masters", Idempotent, req).await
    }

    /// Add master `id` at `address` (`host:port`) to the group: a learner first, a
    /// voter once it has caught up with the log.
    pub async fn add_master(&self, id: u64, address: &str) -> FsResult<()> {
        let req = proto::AddMasterRequest {
            id,
            address: address.to_string(),
            caller: self.caller(),
        };
        let _: proto::AddMasterResponse = rpc!(self, "add_master", Mutation, req).await?;
        Ok(())
    }

    /// Remove master `id` from the group.
    pub async fn remove_master(&self, id: u64) -> FsResult<()> {
        let req = proto::RemoveMasterRequest {
            id,
            caller: self.caller(),
        };
        let _: proto::RemoveMasterResponse = rpc!(self, "remove_master", Mutation, req).await?;
        Ok(())
    }

    pub async fn report(&self) -> FsResult<proto::ReportResponse> {
        self.inner
            .master
            .call("report", CallKind::Idempotent, proto::ReportRequest {})
            .await
    }

    /// The master's changes after `after` (in the log named `epoch`) made by other
    /// clients than this one, waiting up to `wait` (capped at half the call timeout)
    /// for one. See `WatchRequest` in the protocol; a `reset` reply means the caller
    /// must drop whatever it caches.
    pub async fn watch_changes(
        &self,
        epoch: &str,
        after: u64,
        wait: std::time::Duration,
    ) -> FsResult<proto::WatchResponse> {
        let wait = wait.min(self.inner.master.rpc_timeout() / 2);
        let req = proto::WatchRequest {
            epoch: epoch.to_string(),
            after_seq: after,
            exclude_client: self.inner.client_id,
            wait_ms: wait.as_millis().min(u32::MAX as u128) as u32,
        };
        self.inner
            .master
            .call("watch", CallKind::Idempotent, req)
            .await
    }
}
