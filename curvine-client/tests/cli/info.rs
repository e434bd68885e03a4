//! `cv fs count`, `blocks`, `setrep`, the `--json` outputs, `cv version` and shell
//! completions, and usage errors as one line.

use std::process::Command;

use curvine_server::testing::MiniCluster;
use serde_json::Value;

use super::{conf_for, cv, ok, one_line_error, small_block_cluster};

fn json(conf: &std::path::Path, args: &[&str]) -> Value {
    let text = ok(conf, args);
    // from_str refuses anything after the first document
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
}

#[test]
fn count_blocks_and_setrep_describe_and_change_files() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = small_block_cluster(&rt, 2);
    let dir = tempfile::tempdir().unwrap();
    let conf = conf_for(&cluster, dir.path());
    let local = dir.path().join("f.bin");
    std::fs::write(&local, vec![5u8; 2_621_440]).unwrap();
    ok(&conf, &["fs", "mkdir", "-p", "/info/d/s"]);
    ok(&conf, &["fs", "put", local.to_str().unwrap(), "/info/d/f"]);
    ok(&conf, &["fs", "touch", "/info/d/s/e"]);

    let count = ok(&conf, &["fs", "count", "/info/d"]);
    let row: Vec<&str> = count.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row, ["2", "2", "2621440", "/info/d"], "{count}");
    let c = json(&conf, &["fs", "count", "--json", "/info/d"]);
    assert_eq!(
        (&c["dirs"], &c["files"], &c["bytes"]),
        (&2.into(), &2.into(), &2_621_440.into())
    );

    let text = ok(&conf, &["fs", "blocks", "/info/d/f"]);
    assert_eq!(text.lines().count(), 4, "a header and 3 blocks: {text}");
    assert!(
        text.lines().skip(1).all(|l| l.contains(" worker ")),
        "{text}"
    );
    let blocks = json(&conf, &["fs", "blocks", "--json", "/info/d/f"]);
    let blocks = blocks.as_array().unwrap();
    let offsets: Vec<u64> = blocks
        .iter()
        .map(|b| b["offset"].as_u64().unwrap())
        .collect();
    assert_eq!(offsets, [0, 1 << 20, 2 << 20]);
    assert!(blocks
        .iter()
        .all(|b| b["locations"].as_array().unwrap().len() == 1));
    one_line_error(&cv(&conf, &["fs", "blocks", "/info/d"]), "/info/d");

    // -w returns once every block has its replicas
    let out = Command::new("timeout")
        .arg("60")
        .arg(env!("CARGO_BIN_EXE_cv"))
        .arg("--conf")
        .arg(&conf)
        .args(["fs", "setrep", "-w", "2", "/info/d"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("replicas set to 2 on 2 files"));
    let blocks = json(&conf, &["fs", "blocks", "--json", "/info/d/f"]);
    for b in blocks.as_array().unwrap() {
        let on: Vec<u64> = b["locations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["worker_id"].as_u64().unwrap())
            .collect();
        assert!(on.len() == 2 && on[0] != on[1], "{b}");
    }
    let st = json(&conf, &["fs", "stat", "--json", "/info/d/s/e"]);
    assert_eq!(st["replicas"], 2);

    // bad counts change nothing
    for (n, code) in [("0", 2), ("x", 2), ("17", 2)] {
        let e = cv(&conf, &["fs", "setrep", n, "/info/d/f"]);
        one_line_error(&e, n);
        assert_eq!(e.status.code(), Some(code));
    }
    one_line_error(
        &cv(&conf, &["fs", "setrep", "1", "/info/nope"]),
        "/info/nope",
    );
    assert_eq!(
        json(&conf, &["fs", "stat", "--json", "/info/d/f"])["replicas"],
        2
    );
    rt.block_on(cluster.shutdown()).unwrap();
}

#[test]
fn json_outputs_are_one_document_each() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(MiniCluster::builder().start()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = conf_for(&cluster, dir.path());
    ok(&conf, &["fs", "mkdir", "-p", "/js/sub"]);
    let local = dir.path().join("x");
    std::fs::write(&local, b"twelve bytes").unwrap();
    ok(&conf, &["fs", "put", local.to_str().unwrap(), "/js/x"]);
    ok(&conf, &["fs", "put", local.to_str().unwrap(), "/js/sub/y"]);
    ok(&conf, &["fs", "ln", "-s", "/js/x", "/js/l"]);

    let ls = json(&conf, &["fs", "ls", "--json", "/js"]);
    let mut names: Vec<(&str, &str)> = ls
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["type"].as_str().unwrap()))
        .collect();
    names.sort();
    assert_eq!(names, [("l", "symlink"), ("sub", "dir"), ("x", "file")]);
    let ls = json(&conf, &["fs", "ls", "--json", "/js/x"]);
    assert_eq!(ls[0]["path"], "/js/x");

    let st = json(&conf, &["fs", "stat", "--json", "/js/x"]);
    assert_eq!((&st["len"], &st["mode"]), (&12.into(), &"644".into()));
    assert!(st["mtime_ms"].as_i64().unwrap() > 0 && st["complete"] == true);
    let st = json(&conf, &["fs", "stat", "--json", "/js/l"]);
    assert_eq!(st["symlink_target"], "/js/x");

    let du = json(&conf, &["fs", "du", "--json", "/js"]);
    let mut rows: Vec<(String, u64)> = du
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["path"].as_str().unwrap().into(),
                r["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        [
            ("/js/l".into(), 0),
            ("/js/sub".into(), 12),
            ("/js/x".into(), 12)
        ]
    );
    let du = json(&conf, &["fs", "du", "-s", "--json", "/js"]);
    assert_eq!(du[0]["bytes"], 24);

    let df = json(&conf, &["fs", "df", "--json"]);
    let report = json(&conf, &["report", "--json"]);
    assert_eq!(df["capacity"], report["capacity"]);
    let tiers: Vec<&str> = df["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tier"].as_str().unwrap())
        .collect();
    assert_eq!(tiers, ["MEM", "SSD"]);
    let df = ok(&conf, &["fs", "df"]);
    assert!(df.contains("MEM") && df.contains("all"), "{df}");
    rt.block_on(cluster.shutdown()).unwrap();
}

#[test]
fn version_completions_and_usage_errors_need_no_cluster() {
    let dir = tempfile::tempdir().unwrap();
    // a master nobody listens on: none of these may need it
    let conf = dir.path().join("conf.toml");
    std::fs::write(&conf, "[client]\nmaster_addrs = [\"127.0.0.1:1\"]\n").unwrap();
    let v = ok(&conf, &["version"]);
    assert_eq!(v.trim(), format!("cv {}", env!("CARGO_PKG_VERSION")));
    for shell in ["bash", "zsh", "fish"] {
        let script = ok(&conf, &["completions", shell]);
        for word in ["setrep", "blocks", "count", "completions", "quiet"] {
            assert!(script.contains(word), "{shell}: no {word}");
        }
        if shell == "bash" {
            let file = dir.path().join("cv.bash");
            std::fs::write(&file, &script).unwrap();
            let check = Command::new("bash").arg("-n").arg(&file).output().unwrap();
            assert!(check.status.success(), "bash -n: {check:?}");
        }
    }
    // usage errors: one line, exit status 2
    for (args, why) in [
        (
            &["completions", "tcsh"][..],
            "'tcsh' for '<SHELL>' [possible values: bash",
        ),
        (&["fs", "stat"], "<PATH> (usage: cv fs stat <PATH>)"),
        (&["fs", "setrep", "2"], "<PATH> (usage: cv fs setrep"),
    ] {
        let e = cv(&conf, args);
        one_line_error(&e, why);
        assert_eq!(e.status.code(), Some(2));
    }
}
