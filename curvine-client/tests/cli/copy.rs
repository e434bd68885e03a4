//! `cv fs put`, `get` and `cp`: trees in every direction, and their progress on a
//! terminal, on a pipe and with `--quiet`.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use curvine_server::testing::MiniCluster;

use super::{conf_for, cv, ok, one_line_error};

/// `cv ARGS` under a pseudo-terminal (util-linux `script`): whether it succeeded, and
/// what the terminal showed.
fn on_terminal(conf: &Path, args: &[&str]) -> (bool, String) {
    // wide enough for the whole label: a narrower terminal cuts it, not the bar
    let mut line = format!(
        "stty cols 200 rows 40; '{}' --conf '{}'",
        env!("CARGO_BIN_EXE_cv"),
        conf.display()
    );
    for a in args {
        line.push_str(&format!(" '{a}'"));
    }
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("run script");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

#[test]
fn copies_draw_a_bar_on_a_terminal() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(MiniCluster::builder().start()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = conf_for(&cluster, dir.path());
    let body = pattern(6_000_000, 1);
    let local = dir.path().join("big.bin");
    std::fs::write(&local, &body).unwrap();

    let e = cv(&conf, &["fs", "put", local.to_str().unwrap(), "/bar/"]);
    one_line_error(&e, "/bar/: no such directory");
    ok(&conf, &["fs", "mkdir", "/bar"]);
    let (done, screen) = on_terminal(&conf, &["fs", "put", local.to_str().unwrap(), "/bar/"]);
    assert!(done, "{screen}");
    // the bar is left full: what, bytes of the total, rate and ETA
    assert!(
        screen.contains("put ")
            && screen.contains("5.72 MiB/5.72 MiB")
            && screen.contains("MiB/s")
            && screen.contains("ETA")
            && screen.contains("[===="),
        "{screen}"
    );
    let out = dir.path().join("out.bin");
    let (done, screen) = on_terminal(&conf, &["fs", "get", "/bar/big.bin", out.to_str().unwrap()]);
    assert!(done && screen.contains("get /bar/big.bin -> "), "{screen}");
    assert!(std::fs::read(&out).unwrap() == body);
    ok(&conf, &["fs", "touch", "/bar/empty"]);
    let (done, screen) = on_terminal(&conf, &["fs", "cp", "-r", "/bar", "/bar2"]);
    assert!(
        done && screen.contains("cp /bar -> /bar2") && screen.contains("files 2/2"),
        "{screen}"
    );
    assert!(cv(&conf, &["fs", "cat", "/bar2/big.bin"]).stdout == body);
    rt.block_on(cluster.shutdown()).unwrap();
}

#[test]
fn progress_is_plain_lines_on_a_pipe_and_nothing_when_quiet() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(MiniCluster::builder().start()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = conf_for(&cluster, dir.path());

    // a fifo the test feeds: a line must come while the copy still runs
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let mut child = Command::new(env!("CARGO_BIN_EXE_cv"))
        .arg("--conf")
        .arg(&conf)
        .args(["fs", "put", fifo.to_str().unwrap(), "/lines/fifo"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines_tx.send(l).is_err() {
                break;
            }
        }
    });
    let (more_tx, more) = mpsc::channel::<()>();
    let feeder = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            // opening blocks until cv opens its end
            let mut w = std::fs::OpenOptions::new().write(true).open(&fifo)?;
            w.write_all(&[7u8; 1 << 20])?;
            let _ = more.recv();
            w.write_all(&[7u8; 1 << 20])
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let running = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let l = lines.recv_timeout(left).expect("a progress line in time");
        if l.contains("1.0 MiB") {
            break l;
        }
    };
    assert!(
        running.starts_with("put ") && running.contains("-> /lines/fifo: 1.0 MiB, "),
        "{running}"
    );
    more_tx.send(()).unwrap();
    feeder.join().unwrap().unwrap();
    let status = child.wait().unwrap();
    let rest: Vec<String> = lines.iter().collect();
    assert!(status.success(), "{rest:?}");
    let last = rest.last().cloned().unwrap_or_default();
    assert!(last.contains("-> /lines/fifo: 2.0 MiB in "), "{rest:?}");
    assert!(ok(&conf, &["fs", "stat", "/lines/fifo"]).contains("size: 2097152"));

    // a regular file on a pipe: one summary line; with -q nothing at all
    let local = dir.path().join("f.bin");
    std::fs::write(&local, pattern(300_000, 2)).unwrap();
    let out = cv(&conf, &["fs", "put", local.to_str().unwrap(), "/lines/f"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success()
            && err.lines().count() == 1
            && err.contains("-> /lines/f: 293.0 KiB in "),
        "{out:?}"
    );
    for args in [
        &["-q", "fs", "get", "/lines/f", "/dev/null", "-f"][..],
        &["fs", "cp", "--quiet", "/lines/f", "/lines/g"],
        &["fs", "put", "-q", local.to_str().unwrap(), "/lines/h"],
    ] {
        let out = cv(&conf, args);
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{args:?}: {out:?}"
        );
    }
    rt.block_on(cluster.shutdown()).unwrap();
}

#[test]
fn trees_copy_in_every_direction() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(MiniCluster::builder().start()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = conf_for(&cluster, dir.path());
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("sub/deeper")).unwrap();
    std::fs::create_dir_all(src.join("empty")).unwrap();
    let body = pattern(300_000, 3);
    std::fs::write(src.join("a.txt"), b"alpha").unwrap();
    std::fs::write(src.join("sub/b.bin"), &body).unwrap();
    std::fs::write(src.join("sub/deeper/c"), b"c").unwrap();
    std::os::unix::fs::symlink("a.txt", src.join("link")).unwrap();
    let src_s = src.to_str().unwrap();

    // a directory needs -r; nothing is made without it
    let e = cv(&conf, &["fs", "put", src_s, "/tree"]);
    one_line_error(&e, "is a directory (-r copies it)");
    assert!(!cv(&conf, &["fs", "stat", "/tree"]).status.success());

    // local -> Curvine: a new path becomes the copy
    ok(&conf, &["fs", "put", "-r", src_s, "/tree"]);
    assert_eq!(ok(&conf, &["fs", "cat", "/tree/a.txt"]), "alpha");
    assert!(cv(&conf, &["fs", "cat", "/tree/sub/b.bin"]).stdout == body);
    assert_eq!(ok(&conf, &["fs", "cat", "/tree/sub/deeper/c"]), "c");
    assert!(ok(&conf, &["fs", "ls", "/tree/empty"]).is_empty());
    let link = ok(&conf, &["fs", "stat", "/tree/link"]);
    assert!(
        link.contains("type: symlink") && link.contains("target: a.txt"),
        "{link}"
    );
    // an existing directory receives the copy under its own name
    ok(&conf, &["fs", "mkdir", "/into"]);
    ok(&conf, &["fs", "put", "-r", src_s, "/into"]);
    assert_eq!(ok(&conf, &["fs", "cat", "/into/src/a.txt"]), "alpha");

    // within Curvine
    let e = cv(&conf, &["fs", "cp", "-r", "/tree", "/tree/inside"]);
    one_line_error(&e, "into itself");
    ok(&conf, &["fs", "cp", "-r", "/tree", "/copy"]);
    assert!(cv(&conf, &["fs", "cat", "/copy/sub/b.bin"]).stdout == body);
    let e = cv(&conf, &["fs", "cp", "/tree/sub/deeper/c", "/copy/a.txt"]);
    one_line_error(&e, "already exists");
    assert_eq!(ok(&conf, &["fs", "cat", "/copy/a.txt"]), "alpha");
    ok(
        &conf,
        &["fs", "cp", "-f", "/tree/sub/deeper/c", "/copy/a.txt"],
    );
    assert_eq!(ok(&conf, &["fs", "cat", "/copy/a.txt"]), "c");

    // Curvine -> local, with cp and file:// and with get
    let back = dir.path().join("back");
    let uri = format!("file://{}", back.display());
    ok(&conf, &["fs", "cp", "-r", "/copy", &uri]);
    assert!(std::fs::read(back.join("sub/b.bin")).unwrap() == body);
    assert_eq!(std::fs::read(back.join("a.txt")).unwrap(), b"c");
    assert_eq!(
        std::fs::read_link(back.join("link")).unwrap(),
        Path::new("a.txt")
    );
    assert!(std::fs::read_dir(back.join("empty"))
        .unwrap()
        .next()
        .is_none());
    ok(&conf, &["fs", "get", "-r", "/tree", back.to_str().unwrap()]);
    assert_eq!(std::fs::read(back.join("tree/a.txt")).unwrap(), b"alpha");
    let local_a = back.join("a.txt");
    let e = cv(
        &conf,
        &["fs", "get", "/tree/a.txt", local_a.to_str().unwrap()],
    );
    one_line_error(&e, "already exists");
    assert_eq!(std::fs::read(&local_a).unwrap(), b"c");
    ok(
        &conf,
        &["fs", "get", "-f", "/tree/a.txt", local_a.to_str().unwrap()],
    );
    assert_eq!(std::fs::read(&local_a).unwrap(), b"alpha");

    // bad input: one line, nothing made
    let e = cv(&conf, &["fs", "cp", "/nope", "/made"]);
    one_line_error(&e, "/nope");
    let e = cv(&conf, &["fs", "cp", &uri, "file:///tmp/x"]);
    one_line_error(&e, "both sides are local");
    let e = cv(&conf, &["fs", "cp", "file://host/x", "/made"]);
    one_line_error(&e, "file:///path");
    let made = Command::new("mkfifo")
        .arg(src.join("sub/pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    let e = cv(&conf, &["fs", "put", "-r", src_s, "/made"]);
    one_line_error(&e, "not a regular file, directory or symlink");
    assert!(!cv(&conf, &["fs", "stat", "/made"]).status.success());
    rt.block_on(cluster.shutdown()).unwrap();
}
