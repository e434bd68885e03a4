//! Writer leases on files under construction (in memory; the set of open files is
//! persisted in `meta` so a restarted master can hand out fresh leases).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

struct Lease {
    client_id: u64,
    renewed: Instant,
}

#[derive(Default)]
pub struct Leases {
    map: Mutex<HashMap<u64, Lease>>,
}

impl Leases {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Lease>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn grant(&self, inode: u64, client_id: u64) {
        self.lock().insert(
            inode,
            Lease {
                client_id,
                renewed: Instant::now(),
            },
        );
    }

    pub fn release(&self, inode: u64) {
        self.lock().remove(&inode);
    }

    /// The client holding `inode`'s lease, renewing it when that is `client_id`.
    pub fn touch(&self, inode: u64, client_id: u64) -> Option<u64> {
        let mut m = self.lock();
        let l = m.get_mut(&inode)?;
        if l.client_id == client_id {
            l.renewed = Instant::now();
        }
        Some(l.client_id)
    }

    /// Renew `client_id`'s leases on `inodes` (all of its leases when empty).
    pub fn renew(&self, client_id: u64, inodes: &[u64]) {
        let now = Instant::now();
        let mut m = self.lock();
        if inodes.is_empty() {
            for l in m.values_mut().filter(|l| l.client_id == client_id) {
                l.renewed = now;
            }
        }
        for id in inodes {
            if let Some(l) = m.get_mut(id) {
                if l.client_id == client_id {
                    l.renewed = now;
                }
            }
        }
    }

    /// Files whose lease was not renewed within `timeout`.
    pub fn expired(&self, timeout: Duration) -> Vec<u64> {
        self.lock()
            .iter()
            .filter(|(_, l)| l.renewed.elapsed() >= timeout)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Replace every lease with fresh ones of `open` (inode, client) pairs.
    pub fn reset(&self, open: impl IntoIterator<Item = (u64, u64)>) {
        let now = Instant::now();
        let mut m = self.lock();
        m.clear();
        for (inode, client_id) in open {
            m.insert(
                inode,
                Lease {
                    client_id,
                    renewed: now,
                },
            );
        }
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }
}
