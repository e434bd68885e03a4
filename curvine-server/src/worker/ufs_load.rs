//! Load-job tasks on the worker: the master's heartbeat reply names blocks of
//! under-store files to fetch (`LoadCommand`). Each is fetched as a read-through does,
//! with no reader (`ufs_fetch::load`), joining a read's fetch of the same block if one
//! is in progress. The result goes back in the next heartbeat, which the worker sends
//! at once so the master can hand out the next block. The master bounds how many run
//! at once (`master.load_per_worker`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use curvine_common::proto::{CopyResult, LoadCommand};
use curvine_common::FsError;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use super::data_server::DataCtx;

/// Loads in progress and results not reported yet.
pub struct Loads {
    data: Arc<DataCtx>,
    results: Mutex<Vec<CopyResult>>,
    active: Mutex<HashSet<u64>>,
}

impl std::fmt::Debug for Loads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loads").finish_non_exhaustive()
    }
}

impl Loads {
    pub fn new(data: Arc<DataCtx>) -> Arc<Loads> {
        Arc::new(Loads {
            data,
            results: Mutex::default(),
            active: Mutex::default(),
        })
    }

    /// Results to send in the next heartbeat.
    pub fn take_results(&self) -> Vec<CopyResult> {
        std::mem::take(&mut *self.results.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Put back results whose heartbeat failed.
    pub fn restore_results(&self, mut r: Vec<CopyResult>) {
        let mut g = self.results.lock().unwrap_or_else(|p| p.into_inner());
        r.append(&mut g);
        *g = r;
    }

    /// Start the loads the master asked for; each runs on `tracker` until done or
    /// `cancel`. A block already being loaded is not started twice.
    pub fn start(
        self: &Arc<Self>,
        cmds: Vec<LoadCommand>,
        tracker: &TaskTracker,
        cancel: &CancellationToken,
    ) {
        for cmd in cmds {
            let Some(u) = cmd.ufs else {
                continue;
            };
            let id = cmd.block_id;
            if !self
                .active
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id)
            {
                continue;
            }
            let me = self.clone();
            let cancel = cancel.clone();
            tracker.spawn(async move {
                debug!(block = id, key = %u.key, "loading a block");
                let r = tokio::select! {
                    _ = cancel.cancelled() => Err(FsError::Unavailable { message: "worker stopping".into() }),
                    r = super::ufs_fetch::load(&me.data, id, u) => r,
                };
                me.active
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                let result = match r {
                    Ok(()) => CopyResult {
                        block_id: id,
                        ok: true,
                        error: String::new(),
                    },
                    Err(e) => {
                        warn!(block = id, error = %e, "load of a block failed");
                        CopyResult {
                            block_id: id,
                            ok: false,
                            error: e.to_string(),
                        }
                    }
                };
                me.results
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(result);
                me.data.store.early_heartbeat.request();
            });
        }
    }
}
