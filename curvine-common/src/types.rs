//! Ids that cross module boundaries, and small helpers around them.

use std::fmt;

use crate::proto::StorageTier;

/// Inode id; the root directory is 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InodeId(pub u64);

impl InodeId {
    pub const ROOT: InodeId = InodeId(1);
}

/// Block id = inode id << 24 | block index, so the owner is recoverable from the id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(pub u64);

pub const BLOCK_INDEX_BITS: u32 = 24;

impl BlockId {
    pub fn new(inode: InodeId, index: u32) -> BlockId {
        BlockId((inode.0 << BLOCK_INDEX_BITS) | u64::from(index & 0xff_ffff))
    }
    pub fn inode(self) -> InodeId {
        InodeId(self.0 >> BLOCK_INDEX_BITS)
    }
    pub fn index(self) -> u32 {
        (self.0 & 0xff_ffff) as u32
    }
}

/// The tracing target of the request spans (`client.call`, `master.call`,
/// `worker.read`, `worker.write`, ...): `log.level = "info,curvine::request=debug"` turns
/// them and their one line per request on (docs/architecture.md, "Request ids").
pub const REQUEST_TARGET: &str = "curvine::request";

/// One client request as every process logs it: the client's random id and the call's
/// number among that client's calls (`CallerInfo.client_id` and `call_id`; on the data
/// plane `DataHeader.client_id` and `call_id`). A block stream carries the id of the
/// master call that located or allocated its block. Shown as `<client hex>-<call>`;
/// all zero (`-`) when the caller sent none (workers, older clients).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RequestId {
    pub client: u64,
    pub call: u64,
}

impl RequestId {
    pub fn is_none(self) -> bool {
        self.client == 0 && self.call == 0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_none() {
            return f.write_str("-");
        }
        write!(f, "{:x}-{}", self.client, self.call)
    }
}

impl fmt::Display for BlockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for InodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerId(pub u32);

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl StorageTier {
    /// Parse `mem|ssd|hdd` (case-insensitive).
    pub fn parse(s: &str) -> Option<StorageTier> {
        match s.to_ascii_lowercase().as_str() {
            "mem" | "memory" => Some(StorageTier::Mem),
            "ssd" => Some(StorageTier::Ssd),
            "hdd" | "disk" => Some(StorageTier::Hdd),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            StorageTier::Mem => "MEM",
            StorageTier::Ssd => "SSD",
            StorageTier::Hdd => "HDD",
            StorageTier::Unspecified => "DEFAULT",
        }
    }
    /// The next slower tier, if any.
    pub fn next(self) -> Option<StorageTier> {
        match self {
            StorageTier::Mem => Some(StorageTier::Ssd),
            StorageTier::Ssd => Some(StorageTier::Hdd),
            StorageTier::Hdd => None,
            StorageTier::Unspecified => Some(StorageTier::Mem),
        }
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Nanoseconds within the second of a time kept as `ms` milliseconds with finer
/// nanoseconds `nsec` beside them: `nsec` while it lies in `ms`'s millisecond, else
/// that millisecond's own (a record or status written without the nanoseconds, or a
/// time set again in whole milliseconds since).
pub fn time_nsec(ms: i64, nsec: u32) -> u32 {
    let whole = (ms.rem_euclid(1000) * 1_000_000) as u32;
    if nsec < 1_000_000_000 && nsec / 1_000_000 == whole / 1_000_000 {
        nsec
    } else {
        whole
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nanoseconds_count_only_within_their_millisecond() {
        assert_eq!(time_nsec(4_294_967_296_123, 123_456_789), 123_456_789);
        // none kept (an old record), or a time set in whole milliseconds since
        assert_eq!(time_nsec(4_294_967_296_123, 0), 123_000_000);
        assert_eq!(time_nsec(1_999, 123_456_789), 999_000_000);
        assert_eq!(time_nsec(-1_500, 0), 500_000_000);
        assert_eq!(time_nsec(7, 2_000_000_000), 7_000_000);
    }

    #[test]
    fn block_id_keeps_owner_and_index() {
        let b = BlockId::new(InodeId(77), 5);
        assert_eq!(b.inode(), InodeId(77));
        assert_eq!(b.index(), 5);
    }
}
