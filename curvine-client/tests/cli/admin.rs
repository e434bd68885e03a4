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
