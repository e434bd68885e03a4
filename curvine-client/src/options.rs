//! Options for `create_with` and `set_attr`.

use curvine_common::proto::StorageTier;

/// How a file is created. `Default`: no overwrite, parents created, mode 0644, and the
/// client/cluster defaults for replicas, block size and tier.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateOptions {
    /// Replace an existing file.
    pub overwrite: bool,
    /// Fail with `AlreadyExists` if the path exists (O_EXCL).
    pub exclusive: bool,
    pub create_parents: bool,
    pub mode: u32,
    /// 0 = `client.replicas`, then the master's default.
    pub replicas: u32,
    /// 0 = `client.block_size`, then the master's default.
    pub block_size: u64,
    /// `Unspecified` = `client.storage_tier`, then the master's default.
    pub storage_tier: StorageTier,
    /// Have the master allocate the first block with the create: a writer that will
    /// write saves its add_block call (a 4 KiB file then takes 4 calls instead of 5). A
    /// file closed empty gives the block back; `touch`-like callers leave this off.
    pub first_block: bool,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            overwrite: false,
            exclusive: false,
            create_parents: true,
            mode: 0o644,
            replicas: 0,
            block_size: 0,
            storage_tier: StorageTier::Unspecified,
            first_block: false,
        }
    }
}

/// Attributes to change; `None` leaves the attribute as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub mtime_ms: Option<i64>,
    pub atime_ms: Option<i64>,
    /// Nanoseconds within the second of `mtime_ms`/`atime_ms`, for times finer than a
    /// millisecond (their millisecond must be that of the `_ms` value).
    pub mtime_nsec: Option<u32>,
    pub atime_nsec: Option<u32>,
    pub replicas: Option<u32>,
    /// Change a symlink itself (lchown, lutimes), not what it points to.
    pub no_follow: bool,
    /// Set mtime and atime to the master's now (utimensat's UTIME_NOW), which a writer
    /// who is not the owner may do; `mtime_ms`/`atime_ms`, when given too, are what the
    /// owner gets.
    pub times_now: bool,
}
