//! A new leader's first moments. A master that has just become leader knows where
//! blocks are only as the workers find it: each moves to the new leader a heartbeat or
//! two after the old one went and registers there. Until then a block whose replicas
//! are all on workers it has not heard from has no live location, though nothing is
//! lost. A read `open` of such a file is answered `Busy` (the client tries again
//! within `client.rpc_timeout`) while this master has led for less than
//! `master.worker_lost_timeout`, after which a worker still silent counts as lost
//! anyway; from then on, and on a single master, the block is listed without a
//! location as before.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use curvine_common::proto::LocatedBlock;
use curvine_common::{FsError, FsResult};

use super::namespace::Namespace;

/// The term this master leads in and when it was first seen leading in it.
#[derive(Debug, Default)]
pub(super) struct Tenure(Mutex<Option<(u64, Instant)>>);

impl Tenure {
    /// Note that this master leads in `term` (`None`: it does not lead). How long it
    /// has led in that term, counted from the first time it was noted.
    pub fn note(&self, term: Option<u64>) -> Option<Duration> {
        let mut t = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(term) = term else {
            *t = None;
            return None;
        };
        match *t {
            Some((noted, since)) if noted == term => Some(since.elapsed()),
            _ => {
                *t = Some((term, Instant::now()));
                Some(Duration::ZERO)
            }
        }
    }
}

impl Namespace {
    /// How long this replicated master has led (`None` on a follower or a single
    /// master). Called at every tick of the lost-worker task, so the start of a
    /// tenure is noted within a tick of the election.
    pub(super) fn led_for(&self) -> Option<Duration> {
        self.replica.get()?.led_for()
    }

    /// `Busy` when a block of `blocks` has no live location and this master became
    /// leader less than `master.worker_lost_timeout` ago: the workers holding it may
    /// not have registered with it yet.
    pub(super) fn check_locations_known(
        &self,
        path: &str,
        blocks: &[LocatedBlock],
    ) -> FsResult<()> {
        let Some(missing) = blocks.iter().find(|b| b.locations.is_empty()) else {
            return Ok(());
        };
        match self.led_for() {
            Some(age) if age < self.conf.worker_lost_timeout.get() => Err(FsError::Busy {
                message: format!(
                    "{path}: block {} has no live replica yet; this master became \
                     leader {} ms ago and its workers are still registering",
                    missing.block_id,
                    age.as_millis()
                ),
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenure_starts_with_each_term_led() {
        let t = Tenure::default();
        assert_eq!(t.note(Some(3)), Some(Duration::ZERO));
        let first = t.note(Some(3)).unwrap();
        // the same term: counted from the first note, never reset
        assert!(t.note(Some(3)).unwrap() >= first);
        assert_eq!(t.note(None), None);
        assert_eq!(t.note(Some(3)), Some(Duration::ZERO));
        assert_eq!(t.note(Some(5)), Some(Duration::ZERO));
    }
}
