//! The worker's web port: `/metrics`, `/healthz`, and `/readyz`, ready while the worker
//! is registered with the master.

use std::sync::{Arc, Weak};

use axum::Router;
use curvine_common::web::{self, Probes, WebAuth};
use curvine_common::ClusterConf;

use super::BlockStore;
use crate::metrics;

pub(super) fn app(conf: &ClusterConf, store: &Arc<BlockStore>) -> Router {
    web::note_process("worker");
    let m = metrics::worker();
    // weak: the web server never keeps the store (and its index) open past shutdown
    let (ready, refresh): (Weak<BlockStore>, Weak<BlockStore>) =
        (Arc::downgrade(store), Arc::downgrade(store));
    let probes = Probes {
        ready: Arc::new(move || {
            let registered = ready
                .upgrade()
                .is_some_and(|s| s.early_heartbeat.is_registered());
            if registered {
                Ok(())
            } else {
                Err("not registered with the master".into())
            }
        }),
        refresh: Some(Arc::new(move || {
            if let Some(s) = refresh.upgrade() {
                m.refresh(&s.tier_reports());
            }
        })),
    };
    web::finish(web::probe_routes(probes), WebAuth::new(conf))
}
