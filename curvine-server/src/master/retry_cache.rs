//! The retry cache: a client's mutation applied once however often it is sent.
//!
//! A client gives each call an id (`CallerInfo.client_id` and `call_id`) and sends a
//! mutation whose reply it did not get (a lost connection, a master that stopped, a
//! failover) again with the same id. The mutation's journal entry records the id and a
//! summary of its reply (`Summary`) in `meta` (`rc/` + client + call), in the same
//! entry as the change itself, so every master that applies the entry knows it: a
//! retry that finds its id, on this master or on a new leader, is answered from the
//! record and changes nothing. Only successes are recorded: a mutation that failed
//! changed nothing, and its retry runs again.
//!
//! Records expire after `master.retry_cache_ttl` and beyond `master.retry_cache_entries`:
//! a time index (`rt/` + time + client + call) gives the oldest, and each recorded
//! mutation removes up to two expired ones in its own entry, so expiry is replicated
//! like everything else.

use std::sync::Mutex;

use curvine_common::proto::{CallerInfo, FileStatus, LocatedBlock};
use curvine_common::{FsError, FsResult};
use prost::Message;

use super::namespace::{Namespace, Txn};

const REPLY_PREFIX: &[u8] = b"rc/";
const TIME_PREFIX: &[u8] = b"rt/";
/// Expired records a recorded mutation removes at most.
const EXPIRE_PER_ENTRY: usize = 2;

/// What the leader remembers between mutations: where the time index's live records
/// start (the last one it removed), so expiry does not walk over the tombstones of the
/// removed ones each time, and until when none is due, so most mutations do not look.
/// A hint only: empty on a new leader, which starts from the beginning once.
#[derive(Default)]
pub(super) struct RetryCache {
    cursor: Mutex<Cursor>,
}

#[derive(Default)]
struct Cursor {
    from: Vec<u8>,
    /// No record expires by age before this time (ms).
    quiet_until: i64,
}

fn reply_key(client: u64, call: u64) -> Vec<u8> {
    let mut k = REPLY_PREFIX.to_vec();
    k.extend_from_slice(&client.to_be_bytes());
    k.extend_from_slice(&call.to_be_bytes());
    k
}

fn time_key(at_ms: i64, client: u64, call: u64) -> Vec<u8> {
    let mut k = TIME_PREFIX.to_vec();
    k.extend_from_slice(&(at_ms.max(0) as u64).to_be_bytes());
    k.extend_from_slice(&client.to_be_bytes());
    k.extend_from_slice(&call.to_be_bytes());
    k
}

/// A reply as the retry cache keeps it: written into the entry, read back for a retry.
pub(super) trait Summary: Sized {
    fn put(&self, out: &mut Vec<u8>);
    fn take(b: &mut &[u8]) -> FsResult<Self>;
}

fn corrupt(what: &str) -> FsError {
    FsError::internal(format!("retry cache: corrupt {what} record"))
}

fn take_bytes<const N: usize>(b: &mut &[u8]) -> FsResult<[u8; N]> {
    let (head, rest) = b.split_at_checked(N).ok_or_else(|| corrupt("number"))?;
    *b = rest;
    head.try_into().map_err(|_| corrupt("number"))
}

macro_rules! message_summary {
    ($($t:ty),*) => {$(
        impl Summary for $t {
            fn put(&self, out: &mut Vec<u8>) {
                // encoding into a Vec cannot run out of room
                let _ = self.encode_length_delimited(out);
            }
            fn take(b: &mut &[u8]) -> FsResult<Self> {
                <$t>::decode_length_delimited(b).map_err(|_| corrupt(stringify!($t)))
            }
        }
    )*};
}
message_summary!(FileStatus, LocatedBlock);

macro_rules! number_summary {
    ($($t:ty),*) => {$(
        impl Summary for $t {
            fn put(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_be_bytes());
            }
            fn take(b: &mut &[u8]) -> FsResult<Self> {
                Ok(<$t>::from_be_bytes(take_bytes(b)?))
            }
        }
    )*};
}
number_summary!(i64, u64);

impl Summary for bool {
    fn put(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
    fn take(b: &mut &[u8]) -> FsResult<Self> {
        Ok(take_bytes::<1>(b)?[0] != 0)
    }
}

impl Summary for () {
    fn put(&self, _: &mut Vec<u8>) {}
    fn take(_: &mut &[u8]) -> FsResult<Self> {
        Ok(())
    }
}

impl<T: Summary> Summary for Option<T> {
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            Some(v) => {
                out.push(1);
                v.put(out);
            }
            None => out.push(0),
        }
    }
    fn take(b: &mut &[u8]) -> FsResult<Self> {
        match take_bytes::<1>(b)?[0] {
            0 => Ok(None),
            _ => Ok(Some(T::take(b)?)),
        }
    }
}

impl<A: Summary, B: Summary> Summary for (A, B) {
    fn put(&self, out: &mut Vec<u8>) {
        self.0.put(out);
        self.1.put(out);
    }
    fn take(b: &mut &[u8]) -> FsResult<Self> {
        Ok((A::take(b)?, B::take(b)?))
    }
}

impl<A: Summary, B: Summary, C: Summary> Summary for (A, B, C) {
    fn put(&self, out: &mut Vec<u8>) {
        self.0.put(out);
        self.1.put(out);
        self.2.put(out);
    }
    fn take(b: &mut &[u8]) -> FsResult<Self> {
        Ok((A::take(b)?, B::take(b)?, C::take(b)?))
    }
}

impl Namespace {
    /// `mutate` for a client's mutation: with a request id (`c.call_id`), a retry of
    /// one already applied gets the recorded reply and changes nothing, and a new one
    /// records its reply in its own entry. The lookup runs under the mutation lock, so
    /// a retry that arrives while the first try is being applied waits for it.
    pub(super) fn mutate_call<R: Summary>(
        &self,
        c: &CallerInfo,
        f: impl FnOnce(&mut Txn<'_>) -> FsResult<R>,
    ) -> FsResult<(R, u64)> {
        if c.call_id == 0 || c.client_id == 0 {
            return self.mutate(c.client_id, f);
        }
        let key = reply_key(c.client_id, c.call_id);
        let done = self.mutate(c.client_id, |txn| {
            if let Some(reply) = txn.meta(&key)? {
                return Ok(Err(reply));
            }
            let r = f(txn)?;
            if !txn.entry.ops.is_empty() {
                let mut reply = Vec::new();
                r.put(&mut reply);
                self.record_reply(txn, c, key, reply)?;
            }
            Ok(Ok(r))
        });
        let (out, seq) = done.inspect_err(|_| {
            // the expiry this entry carried may not have happened: look again next time
            *self
                .retries
                .cursor
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Cursor::default();
        })?;
        match out {
            Ok(r) => Ok((r, seq)),
            Err(reply) => {
                let mut b = &reply[..];
                let r = R::take(&mut b)?;
                // a single master: the first try's write may still be waiting for its
                // sync, and so does this answer
                let seq = match self.replica.get() {
                    Some(_) => 0,
                    None => self.syncer.last_written(),
                };
                Ok((r, seq))
            }
        }
    }

    fn record_reply(
        &self,
        txn: &mut Txn<'_>,
        c: &CallerInfo,
        key: Vec<u8>,
        reply: Vec<u8>,
    ) -> FsResult<()> {
        txn.put_meta(key, reply);
        txn.put_meta(time_key(txn.now, c.client_id, c.call_id), Vec::new());
        txn.counters.retry_entries += 1;
        let ttl_ms = i64::try_from(self.conf.retry_cache_ttl.get().as_millis()).unwrap_or(i64::MAX);
        let cutoff = txn.now.saturating_sub(ttl_ms);
        let max = self.conf.retry_cache_entries.max(1);
        let mut cursor = self
            .retries
            .cursor
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if txn.now < cursor.quiet_until && txn.counters.retry_entries <= max {
            return Ok(());
        }
        let found = self
            .store
            .meta_from(TIME_PREFIX, &cursor.from, EXPIRE_PER_ENTRY)?;
        if found.is_empty() {
            // none recorded before this mutation: none is due for a ttl
            cursor.quiet_until = txn.now.saturating_add(ttl_ms);
        }
        for (k, _) in found {
            if txn.meta_deleted(&k) {
                // expired by an earlier mutation of the same batch
                cursor.from = k;
                continue;
            }
            let rest = &k[TIME_PREFIX.len()..];
            if rest.len() != 24 {
                txn.del_meta(k.clone());
                cursor.from = k;
                continue;
            }
            let mut b = rest;
            let at = u64::take(&mut b)? as i64;
            let (client, call) = (u64::take(&mut b)?, u64::take(&mut b)?);
            if at >= cutoff && txn.counters.retry_entries <= max {
                // the oldest left: nothing expires by age before it does
                cursor.quiet_until = at.saturating_add(ttl_ms);
                break;
            }
            txn.del_meta(reply_key(client, call));
            txn.del_meta(k.clone());
            txn.counters.retry_entries = txn.counters.retry_entries.saturating_sub(1);
            cursor.from = k;
        }
        Ok(())
    }
}
