use super::*;

#[test]
fn sizes_and_durations_parse() {
    assert_eq!(parse_size("128MB").unwrap(), 128 << 20);
    assert_eq!(parse_size("64kb").unwrap(), 64 << 10);
    assert_eq!(parse_size("4GiB").unwrap(), 4 << 30);
    assert_eq!(parse_size("100").unwrap(), 100);
    assert!(parse_size("12XB").is_err());
    assert!(parse_size("MB").is_err());
    assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
    assert!(parse_duration("soon").is_err());
}

#[test]
fn tier_dirs_parse_and_reject_bad_entries() {
    let d = TierDir::parse("[MEM:4GB]/dev/shm/curvine").unwrap();
    assert_eq!(d.tier, StorageTier::Mem);
    assert_eq!(d.capacity, Some(4 << 30));
    let d = TierDir::parse("[HDD]/data").unwrap();
    assert_eq!(d.capacity, None);
    let e = TierDir::parse("[NVM:1GB]/x").unwrap_err().to_string();
    assert!(
        e.contains("[NVM:1GB]/x") && e.contains("unknown tier"),
        "{e}"
    );
    assert!(TierDir::parse("/no/tier").is_err());
    assert!(TierDir::parse("[SSD:1GB]relative").is_err());
    assert!(TierDir::parse("[SSD:lots]/x").is_err());
}

#[test]
fn unknown_keys_and_bad_values_name_the_key() {
    let e = ClusterConf::parse("[master]\nrpc_prot = 1\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("rpc_prot"), "{e}");
    let e = ClusterConf::parse("[client]\nblock_size = \"12 parsecs\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("block_size") || e.contains("12 parsecs"), "{e}");
    let e = ClusterConf::parse("[bogus]\n").unwrap_err().to_string();
    assert!(e.contains("bogus"), "{e}");
}

#[test]
fn busy_poll_defaults_to_50us_and_is_capped() {
    let conf = ClusterConf::parse("").unwrap();
    assert_eq!(conf.master.busy_poll.get(), Duration::from_micros(50));
    assert_eq!(conf.fuse.busy_poll.get(), Duration::from_micros(50));
    let conf = ClusterConf::parse("[worker]\nbusy_poll = \"0s\"\n").unwrap();
    assert_eq!(conf.worker.busy_poll.get(), Duration::ZERO);
    let e = ClusterConf::parse("[fuse]\nbusy_poll = \"1s\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("fuse.busy_poll") && e.contains("10ms"), "{e}");
}

#[test]
fn a_file_cache_too_small_to_hold_a_file_is_refused() {
    for ok in ["0", "64KB", "8MB"] {
        let conf = ClusterConf::parse(&format!("[master]\nfile_cache = \"{ok}\"\n"));
        assert!(conf.is_ok(), "{ok}");
    }
    let e = ClusterConf::parse("[master]\nfile_cache = \"4KB\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("master.file_cache") && e.contains("64KB"), "{e}");
}

#[test]
fn peers_parse_and_bad_ones_are_refused() {
    let conf = ClusterConf::parse("").unwrap();
    assert!(
        conf.master.peer_list().unwrap().is_empty(),
        "no peers by default"
    );
    let conf = ClusterConf::parse(
        "[master]\nnode_id = 2\npeers = [\"1=h1:8995\", \"2=h2:8995\", \"3 = h3:7\"]\n\
         election_timeout = \"600ms\"\nheartbeat_interval = \"100ms\"\n",
    )
    .unwrap();
    let peers = conf.master.peer_list().unwrap();
    assert_eq!(peers.len(), 3);
    assert_eq!(
        peers[2],
        Peer {
            id: 3,
            addr: "h3:7".into()
        }
    );
    assert_eq!(
        conf.master.election_timeout.get(),
        Duration::from_millis(600)
    );
    assert!(!conf.master.joins());
    // a master not among the peers joins the running group
    let joiner =
        ClusterConf::parse("[master]\nnode_id = 4\npeers = [\"1=h1:1\", \"2=h2:1\"]\n").unwrap();
    assert!(joiner.master.joins());
    for bad in [
        "node_id = 0\npeers = [\"1=h1:1\", \"2=h2:1\"]",
        "node_id = 1\npeers = [\"1=h1:1\", \"1=h2:1\"]",
        "node_id = 1\npeers = [\"1=h1:1\", \"2=h1:1\"]",
        "node_id = 1\npeers = [\"1=h1\"]",
        "node_id = 0\npeers = [\"0=h1:1\"]",
        "node_id = 1\npeers = [\"x=h1:1\"]",
        "election_timeout = \"200ms\"\nheartbeat_interval = \"100ms\"",
    ] {
        let e = ClusterConf::parse(&format!("[master]\n{bad}\n"));
        assert!(
            matches!(e, Err(FsError::Config { .. })),
            "{bad:?} was accepted"
        );
    }
}

#[test]
fn fuse_direct_io_refuses_the_writeback_cache() {
    let conf = ClusterConf::parse("[fuse]\ndirect_io = true\n").unwrap();
    assert!(conf.fuse.direct_io);
    let e = ClusterConf::parse("[fuse]\ndirect_io = true\nwriteback_cache = true\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("fuse.direct_io") && e.contains("fuse.writeback_cache"),
        "{e}"
    );
}

#[test]
fn the_local_socket_is_keyed_by_the_masters_port() {
    let p = local_socket_path(Path::new("/var/tmp/curvine/master.sock"), 8995);
    assert_eq!(p, Path::new("/var/tmp/curvine/master.sock.8995"));
}

#[test]
fn master_threads_default_to_one_and_zero_means_every_core() {
    let conf = ClusterConf::parse("").unwrap();
    assert_eq!(conf.master_threads(), 1);
    let conf = ClusterConf::parse("[master]\nthreads = 3\n").unwrap();
    assert_eq!(conf.master_threads(), 3);
    let conf = ClusterConf::parse("[master]\nthreads = 0\n").unwrap();
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(conf.master_threads(), cores);
}

#[test]
fn shipped_conf_parses() {
    // at run time: a test binary built in another checkout sharing the target dir
    // still reads this checkout's conf
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let path = Path::new(&dir).join("../conf/curvine-cluster.toml");
    let conf = ClusterConf::load(&path).unwrap();
    assert!(!conf.tier_dirs().unwrap().is_empty());
}

#[test]
fn sets_apply_over_the_file() {
    let text = "[master]\nrpc_port = 8995\npeers = [\"1=h:1\", \"2=h:2\"]\nnode_id = 1\n";
    let sets = [
        "master.node_id=2".to_string(),
        "master.meta_dir=/tmp/m 2".to_string(),
        "worker.data_dir=[\"[MEM:1MB]/tmp/w\"]".to_string(),
    ];
    let conf = ClusterConf::parse_with(text, &sets).unwrap();
    assert_eq!(conf.master.node_id, 2);
    assert_eq!(conf.master.rpc_port, 8995);
    assert_eq!(conf.master.meta_dir, std::path::PathBuf::from("/tmp/m 2"));
    assert_eq!(conf.worker.data_dir, vec!["[MEM:1MB]/tmp/w".to_string()]);
    for bad in ["master", "node_id=2", "master.nope=1", "master.node_id=x"] {
        assert!(
            ClusterConf::parse_with(text, &[bad.to_string()]).is_err(),
            "{bad:?} was accepted"
        );
    }
}

#[test]
fn worker_report_grace_follows_the_heartbeat_unless_set() {
    // twice the worker's heartbeat by default
    let conf = ClusterConf::parse("").unwrap();
    assert_eq!(conf.worker_report_grace(), Duration::from_secs(6));
    let conf = ClusterConf::parse("[worker]\nheartbeat_interval = \"200ms\"\n").unwrap();
    assert_eq!(conf.worker_report_grace(), Duration::from_millis(400));
    // never past the time after which a silent worker counts as lost anyway
    let conf = ClusterConf::parse(
        "[master]\nworker_lost_timeout = \"5s\"\n[worker]\nheartbeat_interval = \"10s\"\n",
    )
    .unwrap();
    assert_eq!(conf.worker_report_grace(), Duration::from_secs(5));
    let conf = ClusterConf::parse("[master]\nworker_report_grace = \"0s\"\n").unwrap();
    assert_eq!(conf.worker_report_grace(), Duration::ZERO);
    let e = ClusterConf::parse(
        "[master]\nworker_lost_timeout = \"5s\"\nworker_report_grace = \"6s\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("master.worker_report_grace") && e.contains("worker_lost_timeout"),
        "{e}"
    );
}
