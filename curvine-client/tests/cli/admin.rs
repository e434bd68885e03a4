//! `cv admin decommission`: draining a worker, its progress line, `cv report`, the
//! cancel, and the refusals as one-line errors.

use serde_json::Value;

use super::{conf_for, cv, ok, one_line_error, small_block_cluster};

#[test]
fn decommission_drains_a_worker_and_reports_it() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = small_block_cluster(&rt, 2);
    let dir = tempfile::tempdir().unwrap();
    let conf = conf_for(&cluster, dir.path());
    let local = dir.path().join("f.bin");
    let body: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&local, &body).unwrap();
    ok(&conf, &["fs", "put", local.to_str().unwrap(), "/adm/f"]);

    let report: Value = serde_json::from_str(&ok(&conf, &["report", "--json"])).unwrap();
    let workers = report["workers"].as_array().unwrap();
    assert!(
        workers.iter().all(|w| w["decommission"] == "none"),
        "{report}"
    );
    // drain the worker holding the file's first block
    let blocks: Value =
        serde_json::from_str(&ok(&conf, &["fs", "blocks", "--json", "/adm/f"])).unwrap();
    let id = blocks[0]["locations"][0]["worker_id"]
        .as_u64()
        .unwrap()
        .to_string();
    let other = workers
        .iter()
        .map(|w| w["id"].as_u64().unwrap().to_string())
        .find(|w| *w != id)
        .unwrap();

    one_line_error(
        &cv(&conf, &["admin", "decommission", "77"]),
        "no worker with id 77",
    );
    let out = ok(&conf, &["admin", "decommission", &id]);
    assert!(
        out.starts_with(&format!("worker {id}: drained in ")),
        "{out}"
    );
    let text = ok(&conf, &["report"]);
    assert!(text.contains("decommissioned (drained)"), "{text}");
    let blocks: Value =
        serde_json::from_str(&ok(&conf, &["fs", "blocks", "--json", "/adm/f"])).unwrap();
    for b in blocks.as_array().unwrap() {
        let on: Vec<String> = b["locations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["worker_id"].to_string())
            .collect();
        assert_eq!(on, vec![other.clone()], "{blocks}");
    }
    let back = dir.path().join("back.bin");
    ok(&conf, &["fs", "get", "/adm/f", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == body);

    // the last worker taking blocks cannot be drained
    one_line_error(
        &cv(&conf, &["admin", "decommission", &other]),
        "nowhere to go",
    );
    let out = ok(&conf, &["admin", "decommission", "--cancel", &id]);
    assert_eq!(out.trim(), format!("worker {id}: no longer draining"));
    let report: Value = serde_json::from_str(&ok(&conf, &["report", "--json"])).unwrap();
    assert!(
        report["workers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["decommission"] == "none"),
        "{report}"
    );
    rt.block_on(cluster.shutdown()).unwrap();
}

#[test]
fn admin_masters_lists_the_group_as_json() {
    use curvine_server::testing::ha::HaCluster;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(HaCluster::start(3)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf.toml");
    let addrs: Vec<String> = (0..3).map(|i| format!("\"{}\"", cluster.addr(i))).collect();
    std::fs::write(
        &conf,
        format!(
            "[client]\nmaster_addrs = [{}]\nrpc_timeout = \"30s\"\n[log]\nlevel = \"warn\"\n",
            addrs.join(", ")
        ),
    )
    .unwrap();
    // the leader answers once one is elected (the client waits through the election)
    let list: Value = serde_json::from_str(&ok(&conf, &["admin", "masters", "--json"])).unwrap();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 3, "{list:?}");
    for (i, m) in list.iter().enumerate() {
        assert_eq!(m["id"], i as u64 + 1, "{m}");
        assert_eq!(m["address"], cluster.addr(i).to_string(), "{m}");
    }
    let leaders = list.iter().filter(|m| m["role"] == "leader").count();
    assert_eq!(leaders, 1, "{list:?}");
    let text = ok(&conf, &["admin", "masters"]);
    assert!(
        text.contains("leader") && text.contains("ADDRESS"),
        "{text}"
    );
    one_line_error(
        &cv(&conf, &["admin", "add-master", "9", "no-port"]),
        "is not host:port",
    );
    one_line_error(&cv(&conf, &["admin", "remove-master", "9"]), "master 9");
    rt.block_on(cluster.shutdown()).unwrap();
}

#[test]
fn admin_masters_lists_a_single_master_as_leader() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt
        .block_on(curvine_server::testing::MiniCluster::builder().start())
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = conf_for(&cluster, dir.path());
    let list: Value = serde_json::from_str(&ok(&conf, &["admin", "masters", "--json"])).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["role"], "leader", "{list}");
    assert_eq!(list[0]["address"], cluster.master_addr().to_string());
    one_line_error(&cv(&conf, &["admin", "remove-master", "1"]), "runs alone");
    rt.block_on(cluster.shutdown()).unwrap();
}
