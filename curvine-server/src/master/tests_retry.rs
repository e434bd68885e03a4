//! The retry cache on a single master: a mutation sent again with its request id gets
//! its first reply and is not applied again; records expire by count.

use curvine_common::conf::MasterConf;
use curvine_common::proto::*;
use curvine_common::FsError;

use super::namespace::Namespace;
use super::tests::{create_req, mconf, root};

fn call(id: u64) -> CallerInfo {
    CallerInfo {
        call_id: id,
        ..root()
    }
}

fn open_with(dir: &std::path::Path, f: impl FnOnce(&mut MasterConf)) -> Namespace {
    let mut conf = mconf(dir);
    f(&mut conf);
    Namespace::load(conf, false, std::time::Duration::from_secs(30)).unwrap()
}

#[test]
fn a_retried_mutation_gets_its_first_reply() {
    let d = tempfile::tempdir().unwrap();
    let ns = open_with(d.path(), |_| {});
    let (a, _) = ns.mkdir("/a", false, 0o755, &call(1)).unwrap();
    let (again, _) = ns.mkdir("/a", false, 0o755, &call(1)).unwrap();
    assert_eq!(again, a, "the retry is answered as the first try");
    // another call is a new mutation: the directory exists
    let e = ns.mkdir("/a", false, 0o755, &call(2)).unwrap_err();
    assert!(matches!(e, FsError::AlreadyExists { .. }), "{e}");

    let mut req = create_req("/f", &call(3));
    req.exclusive = true;
    let ((f, _), _) = ns.create(&req).unwrap();
    let ((f2, _), _) = ns.create(&req).unwrap();
    assert_eq!(f2.id, f.id);
    let (t, _) = ns.rename("/f", "/g", 0, &call(4)).unwrap();
    assert_eq!(ns.rename("/f", "/g", 0, &call(4)).unwrap().0, t);
    let (t, _) = ns.delete("/a", false, &call(5)).unwrap();
    assert_eq!(ns.delete("/a", false, &call(5)).unwrap().0, t);
    assert_eq!(ns.counters().files, 1, "one file, created once");
    assert!(ns.get_status("/g", true, &root()).is_ok());
    assert!(ns.get_status("/a", true, &root()).is_err());

    // a failure is not recorded: the retry runs again
    assert!(ns.delete("/none", false, &call(6)).is_err());
    ns.mkdir("/none", false, 0o755, &call(7)).unwrap();
    ns.delete("/none", false, &call(6)).unwrap();

    // the records are part of the namespace: a restarted master still has them
    drop(ns);
    let ns = open_with(d.path(), |_| {});
    assert_eq!(ns.mkdir("/a", false, 0o755, &call(1)).unwrap().0, a);
    assert!(
        ns.get_status("/a", true, &root()).is_err(),
        "not made again"
    );
}

#[test]
fn records_past_the_count_expire() {
    let d = tempfile::tempdir().unwrap();
    let ns = open_with(d.path(), |c| c.retry_cache_entries = 4);
    for i in 1..=20 {
        ns.mkdir(&format!("/d{i}"), false, 0o755, &call(i)).unwrap();
    }
    assert!(ns.counters().retry_entries <= 5, "{:?}", ns.counters());
    // the newest is still known; the oldest was dropped, so its retry runs again
    assert!(ns.mkdir("/d20", false, 0o755, &call(20)).is_ok());
    let e = ns.mkdir("/d1", false, 0o755, &call(1)).unwrap_err();
    assert!(matches!(e, FsError::AlreadyExists { .. }), "{e}");
    // a mutation without a request id records nothing
    let before = ns.counters().retry_entries;
    ns.mkdir("/plain", false, 0o755, &root()).unwrap();
    assert!(ns.counters().retry_entries <= before);
}
