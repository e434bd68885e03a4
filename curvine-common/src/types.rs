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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_id_keeps_owner_and_index() {
        let b = BlockId::new(InodeId(77), 5);
        assert_eq!(b.inode(), InodeId(77));
        assert_eq!(b.index(), 5);
    }
}
