//! Curvine's FUSE mount on the fuse3 crate: `CurvineFuse` serves a Curvine directory
//! through the kernel with POSIX semantics. Sequential writes stream straight to the
//! workers; other writes go through a per-file dirty buffer uploaded on flush.

mod attr;
mod bufpool;
mod coherence;
mod dirattrs;
mod dirs;
mod dirty;
mod file;
mod fs;
mod groups;
mod inodes;
mod listings;
mod metered;
pub mod metrics;
pub mod mount;
mod ops;
pub mod web;

pub use fs::{CurvineFuse, MountOptions};
pub use mount::{fuse_device_fd, lazy_unmount, mount, prepare_mount_point, tune_read_ahead};

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use curvine_common::conf::FuseConf;
use curvine_common::tasks::Tasks;
use tokio_util::sync::CancellationToken;

/// How long the daemon's background tasks get to stop when the mount goes away.
const TASK_STOP_DEADLINE: Duration = Duration::from_secs(5);

/// The daemon's background tasks (the change-log follower), listed at its web port's
/// `/api/tasks` and stopped at unmount.
pub fn tasks() -> &'static Tasks {
    static TASKS: OnceLock<Tasks> = OnceLock::new();
    TASKS.get_or_init(|| Tasks::new(&CancellationToken::new()))
}

impl MountOptions {
    /// Options from the `[fuse]` section; `spill_dir` holds large dirty files.
    pub fn from_conf(c: &FuseConf, spill_dir: PathBuf) -> MountOptions {
        MountOptions {
            fs_path: c.fs_path.clone(),
            read_only: c.read_only,
            attr_ttl: c.attr_ttl.get(),
            entry_ttl: c.entry_ttl.get(),
            negative_ttl: c.negative_ttl.get(),
            max_write: c.max_write.0.clamp(4096, 1 << 20) as u32,
            writeback_cache: c.writeback_cache,
            keep_cache: c.keep_cache,
            direct_io: c.direct_io,
            spill_dir,
            dirty_mem: c.dirty_mem.0,
            sync_each_call: c.sync_each_call,
        }
    }
}
