//! The cluster configuration: one TOML file, sections `[cluster] [master] [journal]
//! [worker] [client] [fuse] [log]`. Sizes (`"128MB"`) and durations (`"30s"`) are parsed
//! at load; unknown keys and bad values are rejected naming the key.

pub mod keys;
mod observe;
mod units;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::{FsError, FsResult};
use crate::proto::StorageTier;

pub use observe::{LogConf, LogFormat, WebConf};
pub use units::{parse_duration, parse_size, ByteSize, Dur, ParseError, Tier};

/// Environment variable that overrides the configuration file path.
pub const CONF_ENV: &str = "CURVINE_CONF_FILE";

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConf {
    pub cluster: ClusterSection,
    pub master: MasterConf,
    pub journal: JournalConf,
    pub worker: WorkerConf,
    pub client: ClientConf,
    pub fuse: FuseConf,
    pub log: LogConf,
    /// Under-store mounts applied at master start (`[[mount]]`).
    pub mount: Vec<crate::mount::MountConf>,
    pub web: WebConf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSection {
    /// Free-form name shown in reports.
    pub name: String,
    /// Shared secret required on every RPC and data stream; empty = no authentication.
    pub auth_token: String,
    /// A file holding the secret (first line, trimmed); used when `auth_token` is empty.
    pub auth_token_file: String,
}

impl Default for ClusterSection {
    fn default() -> Self {
        ClusterSection {
            name: "curvine".into(),
            auth_token: String::new(),
            auth_token_file: String::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MasterConf {
    /// Address the master's gRPC service binds to.
    pub hostname: String,
    pub rpc_port: u16,
    /// HTTP port of the console, `/api`, `/metrics` and the probes; 0 = off.
    pub web_port: u16,
    /// RocksDB directory for the namespace and block map.
    pub meta_dir: PathBuf,
    /// Defaults for files created without explicit values.
    pub block_size: ByteSize,
    pub replicas: u32,
    pub storage_tier: Tier,
    /// A worker silent for this long is declared lost.
    pub worker_lost_timeout: Dur,
    /// How long a master that has just started, or just become leader, waits for the
    /// workers it knows of to register and report their blocks. Until they all have,
    /// or this has passed, a block with no replica reported is not yet known rather than
    /// lost: its reads wait and it is not re-replicated. Unset: twice
    /// `worker.heartbeat_interval` (at most `worker_lost_timeout`).
    pub worker_report_grace: Option<Dur>,
    /// A file whose writer has not renewed its lease for this long is removed.
    pub lease_timeout: Dur,
    /// How long the master remembers a client's mutation (its request id and reply), so
    /// a retry of it after a lost reply or a failover is answered, not applied again.
    /// Longer than `client.rpc_timeout`, within which a client retries.
    pub retry_cache_ttl: Dur,
    /// At most this many remembered mutations; the oldest go first.
    pub retry_cache_entries: u64,
    /// Entries per `list` reply page.
    pub list_page_size: u32,
    /// Inodes a recursive delete removes per journal entry. A larger subtree is
    /// detached at once (its path is gone) and removed in the background, this many
    /// inodes per entry.
    pub delete_batch: u32,
    /// Maximum length of one path component in bytes.
    pub max_name_len: usize,
    /// Maximum path length in bytes. Clients refuse paths given to them of PATH_MAX
    /// (4096) bytes or more; a mount makes longer ones (see `path::MAX_MOUNT_PATH_LEN`).
    pub max_path_len: usize,
    /// How often the master scans for blocks below their replica count, while one may be
    /// (an idle master does not scan).
    pub replication_interval: Dur,
    /// Re-replication copies in flight in the whole cluster ...
    pub replication_max_inflight: u32,
    /// ... and per receiving worker.
    pub replication_per_worker: u32,
    /// A copy not reported done within this time is given up (and rescheduled).
    pub replication_timeout: Dur,
    /// Blocks of load jobs (`cv load`) in flight per worker.
    pub load_per_worker: u32,
    /// Async mounts: how long after a file is closed its upload to the under-store
    /// starts (the most a persist waits; a failed upload is retried after it too).
    pub persist_delay: Dur,
    /// Uploads to under-stores in flight at once (persist jobs, `cv persist`).
    pub persist_concurrency: u32,
    /// How often the master looks for files past their mount's TTL.
    pub ttl_interval: Dur,
    /// Memory for RocksDB memtables, all column families together: the master's
    /// memory stays bounded as the namespace grows.
    pub meta_write_buffer: ByteSize,
    /// RocksDB block cache (index, filter and data blocks of the metadata).
    pub meta_cache: ByteSize,
    /// Directories whose inode (and the edge naming them) the master keeps encoded in
    /// memory, so resolving a path reads only its last component from RocksDB.
    /// 0 = none.
    pub dir_cache_entries: usize,
    /// Bytes of file inodes (and of the edges naming them) the master keeps encoded in
    /// memory, so a stat of a cached file reads nothing from RocksDB. 0 = none.
    pub file_cache: ByteSize,
    /// Threads of the master's runtime; 0 = one per core.
    pub threads: usize,
    /// Unix socket for clients on the master's host (empty = none). The master listens
    /// on this path followed by `.` and its RPC port (see [`local_socket_path`]); clients
    /// whose master address is a loopback one connect there instead of over TCP.
    pub local_socket: PathBuf,
    /// How long an idle runtime thread polls for the next request before it sleeps
    /// (see [`crate::busy_poll`]); 0 = sleep at once.
    pub busy_poll: Dur,
    /// This master's id (replicated masters only, non-zero). Not among `peers`: the
    /// master joins a running group and waits to be added (`cv admin add-master`).
    pub node_id: u64,
    /// The masters that form a replicated group on its first start, as
    /// `"ID=host:port"`. Once the group runs, its membership is the one stored in the
    /// replicated log (`cv admin add-master` / `remove-master` change it), and a list
    /// that differs is logged and ignored. Empty = one master without replication.
    pub peers: Vec<String>,
    /// Election timing, in openraft's terms: a follower that has heard no leader for
    /// its leader lease (twice this) plus this once to twice (randomized) starts an
    /// election, so a dead leader is replaced after 3-4 times this (7-8 times for a
    /// follower that lost its last election to a longer log).
    pub election_timeout: Dur,
    /// How often the leader sends heartbeats to the followers.
    pub heartbeat_interval: Dur,
    /// Replicated masters: a snapshot of the namespace every this many log entries,
    /// after which the log up to a tenth of this before it is dropped.
    pub snapshot_entries: u64,
}

/// One master of a replicated group (`master.peers`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub id: u64,
    /// `host:port` of the master's RPC port.
    pub addr: String,
}

impl MasterConf {
    /// The masters of `peers`, checked: unique ids (non-zero) and addresses, each with
    /// a `host:port`, and `node_id` among them. Empty when replication is off.
    pub fn peer_list(&self) -> FsResult<Vec<Peer>> {
        let mut out: Vec<Peer> = Vec::with_capacity(self.peers.len());
        for p in &self.peers {
            let bad = || {
                FsError::config(format!(
                    "master.peers: {p:?} is not \"ID=host:port\" with a non-zero numeric ID"
                ))
            };
            let (id, addr) = p.split_once('=').ok_or_else(bad)?;
            let id: u64 = id.trim().parse().map_err(|_| bad())?;
            let addr = addr.trim();
            if id == 0 || !is_host_port(addr) {
                return Err(bad());
            }
            if out.iter().any(|q| q.id == id || q.addr == addr) {
                return Err(FsError::config(format!(
                    "master.peers: {p:?} repeats an id or an address"
                )));
            }
            out.push(Peer {
                id,
                addr: addr.to_string(),
            });
        }
        if !out.is_empty() && self.node_id == 0 {
            return Err(FsError::config(
                "master.node_id must be set (non-zero) when master.peers is",
            ));
        }
        Ok(out)
    }

    /// Whether this master joins a running group rather than forming one: `peers` is
    /// set and `node_id` is not among them. It waits to be added with
    /// `cv admin add-master` and takes the group's membership from the leader.
    pub fn joins(&self) -> bool {
        !self.peers.is_empty()
            && !self
                .peer_list()
                .is_ok_and(|p| p.iter().any(|p| p.id == self.node_id))
    }
}

/// Set `section.key=value` in `table` (see [`ClusterConf::parse_with`]).
fn apply_set(table: &mut toml::Table, set: &str) -> FsResult<()> {
    let bad = || FsError::config(format!("--set {set:?} is not section.key=value"));
    let (path, value) = set.split_once('=').ok_or_else(bad)?;
    let (section, key) = path.trim().split_once('.').ok_or_else(bad)?;
    if section.is_empty() || key.is_empty() || key.contains('.') {
        return Err(bad());
    }
    let value = match toml::from_str::<toml::Table>(&format!("v = {}", value.trim())) {
        Ok(mut t) => t.remove("v").ok_or_else(bad)?,
        Err(_) => toml::Value::String(value.trim().to_string()),
    };
    let sec = table
        .entry(section.to_string())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    match sec {
        toml::Value::Table(t) => {
            t.insert(key.to_string(), value);
            Ok(())
        }
        _ => Err(FsError::config(format!(
            "--set {set:?}: [{section}] is not a section"
        ))),
    }
}

/// Whether `addr` is a `host:port` (a non-empty host, a numeric port).
pub fn is_host_port(addr: &str) -> bool {
    matches!(addr.rsplit_once(':'),
        Some((h, port)) if !h.is_empty() && !h.contains(char::is_whitespace) && port.parse::<u16>().is_ok())
}

impl Default for MasterConf {
    fn default() -> Self {
        MasterConf {
            hostname: "127.0.0.1".into(),
            rpc_port: 8995,
            web_port: 9000,
            meta_dir: PathBuf::from("/var/tmp/curvine/meta"),
            block_size: ByteSize(128 << 20),
            replicas: 1,
            storage_tier: Tier(StorageTier::Mem),
            worker_lost_timeout: Dur(Duration::from_secs(30)),
            worker_report_grace: None,
            lease_timeout: Dur(Duration::from_secs(60)),
            retry_cache_ttl: Dur(Duration::from_secs(600)),
            retry_cache_entries: 100_000,
            list_page_size: 1000,
            delete_batch: 1000,
            max_name_len: 255,
            max_path_len: crate::path::MAX_MOUNT_PATH_LEN,
            replication_interval: Dur(Duration::from_secs(5)),
            replication_max_inflight: 64,
            replication_per_worker: 4,
            replication_timeout: Dur(Duration::from_secs(120)),
            load_per_worker: 4,
            persist_delay: Dur(Duration::from_secs(5)),
            persist_concurrency: 4,
            ttl_interval: Dur(Duration::from_secs(60)),
            // sized for a master host of millions of files; the shipped local
            // profiles set a few MB
            meta_write_buffer: ByteSize(64 << 20),
            meta_cache: ByteSize(256 << 20),
            dir_cache_entries: 1_000_000,
            file_cache: ByteSize(512 << 20),
            threads: 1,
            local_socket: PathBuf::new(),
            busy_poll: Dur(Duration::from_micros(50)),
            node_id: 0,
            peers: Vec::new(),
            election_timeout: Dur(Duration::from_millis(500)),
            heartbeat_interval: Dur(Duration::from_millis(100)),
            snapshot_entries: 100_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JournalConf {
    /// Sync the RocksDB WAL before acknowledging a mutation, so acknowledged work
    /// survives a host crash. Concurrent mutations share one sync (group commit). Off =
    /// faster; acknowledged work still survives `kill -9` of the master (the record is in
    /// the OS's page cache), but a host crash may lose the last mutations.
    pub sync: bool,
}

impl Default for JournalConf {
    fn default() -> Self {
        JournalConf { sync: true }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FsyncPolicy {
    /// Leave block data to the page cache (tmpfs has nothing to sync).
    None,
    /// fsync the block file and its checksums before acknowledging a commit.
    OnCommit,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConf {
    /// Address clients reach the data plane on (also what the master hands out).
    pub hostname: String,
    pub data_port: u16,
    /// HTTP port of `/metrics` and the probes; 0 = off.
    pub web_port: u16,
    /// Tier directories: `[MEM:4GB]/dev/shm/curvine`, `[SSD:50GB]/path`, `[HDD]/path`.
    pub data_dir: Vec<String>,
    /// Checksum chunk size; CRC32C is stored per chunk.
    pub chunk_size: ByteSize,
    /// Past this fraction of a tier's capacity, cold blocks move down a tier ...
    pub high_watermark: f64,
    /// ... until usage falls below this fraction.
    pub low_watermark: f64,
    pub heartbeat_interval: Dur,
    pub fsync: FsyncPolicy,
    /// Maximum payload bytes in one data frame.
    pub max_frame_size: ByteSize,
    /// Data-plane connections open at once; past it, new ones wait to be accepted.
    pub max_connections: usize,
    /// Per-tier overrides of `fsync` (unset = `fsync`).
    pub fsync_mem: Option<FsyncPolicy>,
    pub fsync_ssd: Option<FsyncPolicy>,
    pub fsync_hdd: Option<FsyncPolicy>,
    /// Background re-verification of stored CRC32C, bytes per second; 0 = off.
    pub scrub_rate: ByteSize,
    /// Pause between two full scrub passes.
    pub scrub_interval: Dur,
    /// Re-replication copies this worker receives at once.
    pub copy_concurrency: u32,
    /// Blocks in one page of the full block report a worker sends when it registers.
    pub block_report_page: u32,
    /// How long an idle runtime thread polls for the next request before it sleeps
    /// (see [`crate::busy_poll`]); 0 = sleep at once.
    pub busy_poll: Dur,
}

impl WorkerConf {
    /// The fsync policy of block data in `tier`.
    pub fn fsync_for(&self, tier: StorageTier) -> FsyncPolicy {
        let o = match tier {
            StorageTier::Mem => self.fsync_mem,
            StorageTier::Ssd => self.fsync_ssd,
            StorageTier::Hdd => self.fsync_hdd,
            StorageTier::Unspecified => None,
        };
        o.unwrap_or(self.fsync)
    }
}

impl Default for WorkerConf {
    fn default() -> Self {
        WorkerConf {
            hostname: "127.0.0.1".into(),
            data_port: 8997,
            web_port: 9001,
            data_dir: vec![
                "[MEM:4GB]/dev/shm/curvine".into(),
                "[SSD:20GB]/var/tmp/curvine/ssd".into(),
            ],
            chunk_size: ByteSize(64 << 10),
            high_watermark: 0.95,
            low_watermark: 0.85,
            heartbeat_interval: Dur(Duration::from_secs(3)),
            fsync: FsyncPolicy::None,
            max_frame_size: ByteSize(4 << 20),
            max_connections: 4096,
            fsync_mem: None,
            fsync_ssd: None,
            fsync_hdd: None,
            scrub_rate: ByteSize(32 << 20),
            scrub_interval: Dur(Duration::from_secs(3600)),
            copy_concurrency: 4,
            block_report_page: 65_536,
            busy_poll: Dur(Duration::from_micros(50)),
        }
    }
}

/// One parsed `worker.data_dir` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TierDir {
    pub tier: StorageTier,
    /// `None` = the free space of the file system it lives on.
    pub capacity: Option<u64>,
    pub path: PathBuf,
}

impl TierDir {
    /// Parse `[MEM:4GB]/dev/shm/curvine`; a bad entry is an error naming it.
    pub fn parse(entry: &str) -> FsResult<TierDir> {
        let bad = |why: &str| FsError::config(format!("worker.data_dir entry {entry:?}: {why}"));
        let rest = entry.trim();
        let rest = rest
            .strip_prefix('[')
            .ok_or_else(|| bad("expected [TIER:SIZE]/path"))?;
        let (spec, path) = rest
            .split_once(']')
            .ok_or_else(|| bad("missing ] after the tier"))?;
        let (tier_s, cap_s) = match spec.split_once(':') {
            Some((t, c)) => (t, Some(c)),
            None => (spec, None),
        };
        let tier = StorageTier::parse(tier_s.trim()).ok_or_else(|| {
            bad(&format!(
                "unknown tier {tier_s:?} (expected MEM, SSD or HDD)"
            ))
        })?;
        let capacity = match cap_s {
            Some(c) => Some(parse_size(c).map_err(|e| bad(&e.to_string()))?),
            None => None,
        };
        if path.trim().is_empty() || !path.starts_with('/') {
            return Err(bad("the path must be absolute"));
        }
        Ok(TierDir {
            tier,
            capacity,
            path: PathBuf::from(path),
        })
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientConf {
    /// Master addresses (`host:port`); the first reachable one is used.
    pub master_addrs: Vec<String>,
    /// Defaults for created files (0 / empty = the master's default).
    pub block_size: ByteSize,
    pub replicas: u32,
    pub storage_tier: Tier,
    /// Read and write block files directly when the worker is on this host.
    pub short_circuit: bool,
    /// Short-circuit reads and writes of SSD/HDD blocks use O_DIRECT (no page-cache
    /// copy, writeback or second cached copy); off = buffered I/O.
    pub direct_io: bool,
    /// Verify CRC32C on every read (short-circuit reads included).
    pub verify_checksum: bool,
    /// Payload bytes per data-plane frame.
    pub frame_size: ByteSize,
    /// How far ahead a remote reader asks the worker to stream.
    pub read_ahead: ByteSize,
    /// Blocks past the one being read that a sequential reader of an under-store file
    /// asks the workers to fetch from the store ahead (0 = none).
    pub ufs_read_ahead_blocks: u32,
    pub connect_timeout: Dur,
    pub rpc_timeout: Dur,
    /// Attempts for idempotent master calls on a retryable error.
    pub rpc_retries: u32,
    pub retry_backoff: Dur,
    /// Replicated masters: reads (stats, listings, opens) may be answered by a follower
    /// from what it has applied, slightly behind the leader. Off = every read is
    /// linearizable: served by the leader once it has confirmed its leadership.
    pub read_from_followers: bool,
    /// Host name this client reports for local-worker placement and short-circuit.
    pub hostname: String,
}

impl Default for ClientConf {
    fn default() -> Self {
        ClientConf {
            master_addrs: vec!["127.0.0.1:8995".into()],
            block_size: ByteSize(0),
            replicas: 0,
            storage_tier: Tier(StorageTier::Unspecified),
            short_circuit: true,
            direct_io: true,
            verify_checksum: true,
            frame_size: ByteSize(1 << 20),
            read_ahead: ByteSize(16 << 20),
            ufs_read_ahead_blocks: 1,
            connect_timeout: Dur(Duration::from_secs(5)),
            rpc_timeout: Dur(Duration::from_secs(30)),
            rpc_retries: 5,
            retry_backoff: Dur(Duration::from_millis(200)),
            read_from_followers: false,
            hostname: "127.0.0.1".into(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FuseConf {
    pub mnt_path: PathBuf,
    /// HTTP port of `/metrics` and the probes; 0 = off.
    pub web_port: u16,
    /// Curvine directory shown at the mount point.
    pub fs_path: String,
    pub attr_ttl: Dur,
    pub entry_ttl: Dur,
    pub negative_ttl: Dur,
    pub max_write: ByteSize,
    pub writeback_cache: bool,
    /// Keep the kernel's page cache of a file across opens while the master reports
    /// the file unchanged (length, mtime, ctime) when it is opened for reading.
    pub keep_cache: bool,
    /// Handles opened read-only skip the kernel's page cache: every read is served by
    /// the daemon (from the block's pages on this host's tmpfs, one copy into the
    /// caller's buffer). A shared mapping of such a handle fails (ENODEV).
    pub direct_io: bool,
    pub read_only: bool,
    /// Where the mount keeps the content of files being modified in place once it
    /// outgrows memory (unlinked temp files); empty = the system temp dir. A tmpfs
    /// directory makes random writes to large files much cheaper than a disk one.
    pub spill_dir: PathBuf,
    /// Memory for the content of files being modified in place, shared by all of them;
    /// past it, they move to `spill_dir`.
    pub dirty_mem: ByteSize,
    /// Threads of the daemon's runtime; 0 = one per core (at least 2, at most 8).
    pub threads: usize,
    /// How long an idle runtime thread polls for the next request before it sleeps
    /// (see [`crate::busy_poll`]); 0 = sleep at once.
    pub busy_poll: Dur,
    /// Every namespace change through the mount returns only once the master's journal
    /// holds it on disk (with `journal.sync`). Off: as on a local file system, changes
    /// are durable once fsync, fdatasync or fsyncdir returns (and the master syncs
    /// them at once anyway); a crash of the master process loses nothing either way.
    pub sync_each_call: bool,
}

impl Default for FuseConf {
    fn default() -> Self {
        FuseConf {
            mnt_path: PathBuf::from("/curvine-fuse"),
            web_port: 9002,
            fs_path: "/".into(),
            attr_ttl: Dur(Duration::from_secs(30)),
            entry_ttl: Dur(Duration::from_secs(30)),
            negative_ttl: Dur(Duration::from_secs(0)),
            max_write: ByteSize(1 << 20),
            writeback_cache: false,
            keep_cache: true,
            direct_io: false,
            read_only: false,
            spill_dir: PathBuf::new(),
            dirty_mem: ByteSize(1 << 30),
            threads: 0,
            busy_poll: Dur(Duration::from_micros(50)),
            sync_each_call: false,
        }
    }
}

/// The smallest file cache (`master.file_cache`) the master accepts, besides 0.
const MIN_FILE_CACHE: u64 = 64 << 10;

/// The longest `busy_poll` accepted.
const MAX_BUSY_POLL: Duration = Duration::from_millis(10);

impl ClusterConf {
    /// Load from `path`, or from `$CURVINE_CONF_FILE` when `path` is `None`.
    pub fn load_default(path: Option<&Path>) -> FsResult<ClusterConf> {
        match path {
            Some(p) => Self::load(p),
            None => match std::env::var_os(CONF_ENV) {
                Some(p) => Self::load(Path::new(&p)),
                None => Err(FsError::config(format!(
                    "no configuration file: pass --conf FILE or set {CONF_ENV}"
                ))),
            },
        }
    }

    pub fn load(path: &Path) -> FsResult<ClusterConf> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| FsError::config(format!("read {}: {e}", path.display())))?;
        let mut conf =
            Self::parse(&text).map_err(|e| FsError::config(format!("{}: {e}", path.display())))?;
        conf.resolve_auth_token()?;
        Ok(conf)
    }

    /// Fill `cluster.auth_token` from `cluster.auth_token_file` when only the file is
    /// set (`load` does this; call it after building a configuration by hand).
    pub fn resolve_auth_token(&mut self) -> FsResult<()> {
        let c = &mut self.cluster;
        if !c.auth_token.is_empty() || c.auth_token_file.is_empty() {
            return Ok(());
        }
        let text = std::fs::read_to_string(&c.auth_token_file).map_err(|e| {
            FsError::config(format!(
                "cluster.auth_token_file {}: {e}",
                c.auth_token_file
            ))
        })?;
        let token = text.lines().next().unwrap_or("").trim().to_string();
        if token.is_empty() {
            return Err(FsError::config(format!(
                "cluster.auth_token_file {} is empty",
                c.auth_token_file
            )));
        }
        c.auth_token = token;
        Ok(())
    }

    pub fn parse(text: &str) -> FsResult<ClusterConf> {
        Self::parse_with(text, &[])
    }

    /// [`parse`](Self::parse) with `sets` applied over the file: each `section.key=value`
    /// (`curvine-server --set`), `value` in TOML (`8996`, `"a b"`, `["x"]`) or else taken
    /// as a string. Several processes on one host share a file this way (the local HA
    /// profile gives each master its `node_id` and ports).
    pub fn parse_with(text: &str, sets: &[String]) -> FsResult<ClusterConf> {
        let conf: ClusterConf = if sets.is_empty() {
            toml::from_str(text).map_err(|e| FsError::config(e.to_string().trim().to_string()))?
        } else {
            let mut table: toml::Table = toml::from_str(text)
                .map_err(|e| FsError::config(e.to_string().trim().to_string()))?;
            for s in sets {
                apply_set(&mut table, s)?;
            }
            toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| FsError::config(e.to_string().trim().to_string()))?
        };
        conf.validate()?;
        Ok(conf)
    }

    /// [`load`](Self::load) with `sets` applied over the file (see [`parse_with`](Self::parse_with)).
    pub fn load_with(path: &Path, sets: &[String]) -> FsResult<ClusterConf> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| FsError::config(format!("read {}: {e}", path.display())))?;
        let mut conf = Self::parse_with(&text, sets)
            .map_err(|e| FsError::config(format!("{}: {e}", path.display())))?;
        conf.resolve_auth_token()?;
        Ok(conf)
    }

    pub fn validate(&self) -> FsResult<()> {
        for m in &self.mount {
            m.to_info()?;
        }
        let w = &self.worker;
        if !(0.0 < w.low_watermark
            && w.low_watermark <= w.high_watermark
            && w.high_watermark <= 1.0)
        {
            return Err(FsError::config(
                "worker.low_watermark and worker.high_watermark must satisfy 0 < low <= high <= 1",
            ));
        }
        if w.chunk_size.0 == 0 || w.chunk_size.0 > (16 << 20) {
            return Err(FsError::config("worker.chunk_size must be in (0, 16MB]"));
        }
        if w.block_report_page == 0 || w.block_report_page > 1 << 20 {
            return Err(FsError::config(
                "worker.block_report_page must be from 1 to 1048576",
            ));
        }
        if w.max_frame_size.0 < w.chunk_size.0 {
            return Err(FsError::config(
                "worker.max_frame_size must be at least worker.chunk_size",
            ));
        }
        for d in &w.data_dir {
            TierDir::parse(d)?;
        }
        if self.master.block_size.0 == 0 {
            return Err(FsError::config("master.block_size must be positive"));
        }
        if self.master.replicas == 0 {
            return Err(FsError::config("master.replicas must be at least 1"));
        }
        if self.master.snapshot_entries < 10 {
            return Err(FsError::config(
                "master.snapshot_entries must be at least 10",
            ));
        }
        if self.master.delete_batch == 0 {
            return Err(FsError::config("master.delete_batch must be at least 1"));
        }
        let fc = self.master.file_cache.0;
        if fc != 0 && fc < MIN_FILE_CACHE {
            // below this, eight chunks of 1 KiB and the tables leave room for nothing
            return Err(FsError::config(format!(
                "master.file_cache must be 0 (off) or at least 64KB, not {fc} bytes"
            )));
        }
        if self.client.master_addrs.is_empty() {
            return Err(FsError::config("client.master_addrs must not be empty"));
        }
        self.master.peer_list()?;
        let (hb, el) = (
            self.master.heartbeat_interval.get(),
            self.master.election_timeout.get(),
        );
        if hb.is_zero() || el < hb * 3 {
            // a follower must hear several heartbeats before it may call an election
            return Err(FsError::config(format!(
                "master.heartbeat_interval must be positive and master.election_timeout at \
                 least three times it (now {hb:?} and {el:?})"
            )));
        }
        if let Some(g) = self.master.worker_report_grace {
            // a worker silent that long is lost anyway: waiting longer for it is pointless
            let lost = self.master.worker_lost_timeout.get();
            if g.get() > lost {
                return Err(FsError::config(format!(
                    "master.worker_report_grace must be at most master.worker_lost_timeout \
                     ({lost:?}), not {:?}",
                    g.get()
                )));
            }
        }
        if self.client.frame_size.0 == 0 {
            return Err(FsError::config("client.frame_size must be positive"));
        }
        if self.fuse.direct_io && self.fuse.writeback_cache {
            // a direct read does not wait for pages the kernel holds dirty, so a reader
            // could miss an earlier write of this mount
            return Err(FsError::config(
                "fuse.direct_io and fuse.writeback_cache cannot both be on: reads that skip \
                 the page cache would not see writes the kernel still holds there",
            ));
        }
        for (key, d) in [
            ("master.busy_poll", self.master.busy_poll),
            ("worker.busy_poll", self.worker.busy_poll),
            ("fuse.busy_poll", self.fuse.busy_poll),
        ] {
            // polling is for the gap between two requests; longer only burns a core
            if d.get() > MAX_BUSY_POLL {
                return Err(FsError::config(format!(
                    "{key} must be at most {MAX_BUSY_POLL:?} (0s turns polling off), not {:?}",
                    d.get()
                )));
            }
        }
        Ok(())
    }

    /// How long a master that has just started or become leader waits for its workers'
    /// reports: `master.worker_report_grace`, or twice `worker.heartbeat_interval` (a
    /// worker registers within a heartbeat or two of the master's start), at most
    /// `master.worker_lost_timeout`.
    pub fn worker_report_grace(&self) -> Duration {
        match self.master.worker_report_grace {
            Some(g) => g.get(),
            None => (self.worker.heartbeat_interval.get() * 2)
                .min(self.master.worker_lost_timeout.get()),
        }
    }

    /// The worker's tier directories, fastest tier first.
    pub fn tier_dirs(&self) -> FsResult<Vec<TierDir>> {
        let mut dirs = self
            .worker
            .data_dir
            .iter()
            .map(|d| TierDir::parse(d))
            .collect::<FsResult<Vec<_>>>()?;
        dirs.sort_by_key(|d| d.tier as i32);
        Ok(dirs)
    }

    /// Worker threads for the master's runtime: `master.threads`, or one per core for 0.
    pub fn master_threads(&self) -> usize {
        match self.master.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }

    pub fn master_addr(&self) -> String {
        format!("{}:{}", self.master.hostname, self.master.rpc_port)
    }
}

/// The Unix socket a master on `port` listens on, for `master.local_socket = base`:
/// `base` followed by `.PORT`. Keyed by port, a client set up for one local master can
/// never reach another one on the same host through a shared `local_socket` setting.
pub fn local_socket_path(base: &Path, port: u16) -> PathBuf {
    let mut p = base.as_os_str().to_os_string();
    p.push(format!(".{port}"));
    PathBuf::from(p)
}

#[cfg(test)]
mod tests;
