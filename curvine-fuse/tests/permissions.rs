//! POSIX permission and ownership rules through a real mount, as root and as
//! unprivileged users (two uids, one with a supplementary group, and nobody): sticky
//! directories, chown/chgrp and the set-ID bits, open and utimensat permissions,
//! directories that may be read or searched but not both, long paths and names, symlink
//! ownership, link counts and times past 2038; bad input (long names and paths, chown to
//! an unknown uid, a rename into a sticky directory) as root, as nobody and as a user
//! with a supplementary group.

#![allow(unsafe_code)]

mod common;

use std::ffi::CString;
use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use common::{errno_of, sh, sh_as, sh_as_nobody, shared, test_dir};

/// uid/gid of user A, who is also in group `GA`.
const A: u32 = 5001;
const GA: u32 = 7001;
/// uid/gid of user B (no other groups).
const B: u32 = 5002;

fn as_a(dir: &Path, script: &str) -> (bool, String) {
    sh_as(A, A, &[A, GA], dir, script)
}

fn as_b(dir: &Path, script: &str) -> (bool, String) {
    sh_as(B, B, &[], dir, script)
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

fn owner(p: &Path) -> (u32, u32) {
    let m = fs::symlink_metadata(p).unwrap();
    (m.uid(), m.gid())
}

fn ctime_ns(p: &Path) -> i128 {
    let m = fs::symlink_metadata(p).unwrap();
    i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec())
}

/// Wait until the clock is past `ns` (so a change gets a later ctime).
fn past(ns: i128) {
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as i128)
            .unwrap_or(0)
    };
    assert!(
        common::wait_for(Duration::from_secs(5), || now() > ns + 2_000_000),
        "clock"
    );
}

fn denied(r: (bool, String), what: &str) {
    assert!(!r.0 && r.1.contains("Permission denied"), "{what}: {}", r.1);
}

fn not_permitted(r: (bool, String), what: &str) {
    assert!(
        !r.0 && r.1.contains("Operation not permitted"),
        "{what}: {}",
        r.1
    );
}

fn ok(r: (bool, String), what: &str) {
    assert!(r.0, "{what}: {}", r.1);
}

fn open_dir(dir: &Path) -> i32 {
    let c = CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string; the descriptor is closed by the caller.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    assert!(fd >= 0, "open {}", dir.display());
    fd
}

/// `mkdirat`/`openat(O_CREAT)`/`fstatat` relative to `dfd`: the errno on failure.
fn at(dfd: i32, rel: &str, op: &str) -> Result<libc::stat, i32> {
    let c = CString::new(rel).unwrap();
    // SAFETY: valid C string and descriptor; `st` is written by fstatat only.
    unsafe {
        let r = match op {
            "mkdir" => libc::mkdirat(dfd, c.as_ptr(), 0o755),
            "create" => {
                let fd = libc::openat(dfd, c.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644);
                if fd >= 0 {
                    libc::close(fd);
                    0
                } else {
                    -1
                }
            }
            _ => 0,
        };
        if r != 0 {
            return Err(errno_of(&std::io::Error::last_os_error()));
        }
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstatat(dfd, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) != 0 {
            return Err(errno_of(&std::io::Error::last_os_error()));
        }
        Ok(st)
    }
}

#[test]
fn sticky_directory_keeps_others_entries() {
    let (dir, _) = test_dir("sticky_rules");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    sh(
        &dir,
        &format!("mkdir -m 1777 t && mkdir bdir && chown {B} bdir"),
    );
    ok(as_a(&dir, "mkdir t/da && touch t/a"), "A creates");
    ok(as_b(&dir, "mkdir t/db && touch t/b bdir/f"), "B creates");
    not_permitted(as_b(&dir, "rm -f t/a"), "unlink of A's file");
    not_permitted(as_b(&dir, "mv t/a t/x"), "rename of A's file");
    not_permitted(as_b(&dir, "mv -T t/b t/a"), "rename over A's file");
    not_permitted(as_b(&dir, "mv -T t/db t/da"), "directory over A's");
    not_permitted(as_b(&dir, "mv bdir/f t/a"), "rename into it over A's file");
    not_permitted(as_b(&dir, "rmdir t/da"), "rmdir of A's directory");
    // nothing changed
    assert_eq!(owner(&dir.join("t/a")).0, A);
    assert!(dir.join("t/da").is_dir() && dir.join("bdir/f").exists());
    assert!(!dir.join("t/x").exists());
    // the owner of the entry, of the directory, and root may
    ok(as_b(&dir, "mv t/b t/b2 && rm t/b2"), "B's own");
    ok(as_a(&dir, "rm t/a && rmdir t/da"), "A's own");
    sh(&dir, &format!("chown {A} t"));
    ok(as_a(&dir, "rmdir t/db"), "the directory's owner");
    let (ok_nobody, out) = sh_as_nobody(&dir, "touch t/n");
    assert!(ok_nobody, "{out}");
    sh(&dir, "rm t/n");
}

#[test]
fn chown_chgrp_and_the_set_id_bits() {
    let (dir, _) = test_dir("chown_rules");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    let f = dir.join("f");
    sh(&dir, &format!("touch f && chown {A}:{A} f && chmod 666 f"));
    not_permitted(as_a(&dir, &format!("chown {B} f")), "give the file away");
    not_permitted(as_b(&dir, &format!("chown {B} f")), "take it");
    not_permitted(sh_as_nobody(&dir, "chown 65534 f"), "nobody takes it");
    not_permitted(sh_as_nobody(&dir, "chmod 777 f"), "nobody's chmod");
    not_permitted(
        sh_as_nobody(&dir, &format!("chgrp {A} f")),
        "nobody's chgrp",
    );
    assert_eq!((owner(&f), mode(&f)), ((A, A), 0o666));
    not_permitted(
        sh_as(A, A, &[], &dir, &format!("chgrp {GA} f")),
        "without the supplementary group",
    );
    ok(
        as_a(&dir, &format!("chgrp {GA} f")),
        "to a supplementary group",
    );
    assert_eq!(owner(&f), (A, GA));
    not_permitted(as_a(&dir, "chgrp 7002 f"), "to a group A is not in");
    assert_eq!(owner(&f), (A, GA));
    // root: any uid, known or not
    sh(&dir, "chown 4000000:4000001 f");
    assert_eq!(owner(&f), (4_000_000, 4_000_001));

    // chown drops set-user-ID and group-executable set-group-ID, root's chown too
    sh(
        &dir,
        &format!("chown {A}:{A} f && chmod 6755 f && chown {A} f"),
    );
    assert_eq!(mode(&f), 0o755);
    sh(&dir, "chmod 6745 f");
    ok(as_a(&dir, &format!("chgrp {GA} f")), "chgrp");
    assert_eq!(mode(&f), 0o2745, "set-group-ID without group-execute stays");

    // a write or truncate by another user drops them
    sh(&dir, "chmod 4777 f");
    ok(as_b(&dir, "echo x >> f"), "B appends");
    assert_eq!(mode(&f), 0o777, "after B's write");
    sh(&dir, "chmod 4777 f");
    ok(as_b(&dir, "truncate -s 1 f"), "B truncates");
    assert_eq!(mode(&f), 0o777, "after B's truncate");
    // root's write keeps them
    sh(&dir, "chmod 4777 f && echo y >> f");
    assert_eq!(mode(&f), 0o4777);

    // set-group-ID by an owner outside the file's group is dropped
    sh(&dir, &format!("touch g && chown {A}:7002 g"));
    ok(as_a(&dir, "chmod 2755 g"), "chmod");
    assert_eq!(mode(&dir.join("g")), 0o755);
    ok(
        as_a(&dir, &format!("chgrp {GA} g && chmod 2755 g")),
        "member",
    );
    assert_eq!(mode(&dir.join("g")), 0o2755);

    // ctime moves with every successful chmod/chown, not with a refused one
    let g = dir.join("g");
    for (i, cmd) in ["chmod 644 g", "chmod 644 g", &format!("chgrp {GA} g")]
        .iter()
        .enumerate()
    {
        let before = ctime_ns(&g);
        past(before);
        ok(as_a(&dir, cmd), cmd);
        assert!(ctime_ns(&g) > before, "ctime after {cmd} ({i})");
    }
    let before = (ctime_ns(&g), mode(&g), owner(&g));
    past(before.0);
    not_permitted(as_b(&dir, "chmod 777 g"), "B's chmod");
    not_permitted(as_b(&dir, &format!("chown {B} g")), "B's chown");
    assert_eq!((ctime_ns(&g), mode(&g), owner(&g)), before);
}

#[test]
fn open_and_utimensat_permissions() {
    let (dir, _) = test_dir("open_rules");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    // group access through a supplementary group
    sh(
        &dir,
        &format!("echo data > f && chown 0:{GA} f && chmod 060 f"),
    );
    let (r, out) = as_a(&dir, "cat f");
    assert!(r && out == "data\n", "{out}");
    ok(
        as_a(&dir, "echo more >> f"),
        "O_WRONLY|O_APPEND as a member",
    );
    ok(as_a(&dir, "exec 3<>f"), "O_RDWR as a member");
    ok(as_a(&dir, ": > f"), "O_TRUNC as a member");
    denied(sh_as(A, A, &[], &dir, "cat f"), "not a member");
    denied(as_b(&dir, "cat f"), "others");
    // each class's bits count for that class only
    sh(
        &dir,
        &format!("echo data > g && chown {A}:{GA} g && chmod 406 g"),
    );
    ok(as_a(&dir, "cat g"), "owner reads");
    denied(as_a(&dir, "echo x >> g"), "owner may not write");
    ok(
        as_b(&dir, "cat g && echo x >> g && exec 3<>g"),
        "others read and write",
    );
    denied(
        sh_as(B, B, &[GA], &dir, "cat g"),
        "member of the group: none",
    );
    sh(&dir, "chmod 640 g");
    ok(sh_as(B, B, &[GA], &dir, "cat g"), "member reads");
    denied(sh_as(B, B, &[GA], &dir, "echo x >> g"), "member writes");
    denied(sh_as(B, B, &[GA], &dir, "exec 3<>g"), "member O_RDWR");
    denied(sh_as(B, B, &[GA], &dir, ": > g"), "member O_TRUNC");
    denied(as_b(&dir, "cat g"), "others read");
    denied(sh_as_nobody(&dir, "cat g"), "nobody reads");
    denied(sh_as_nobody(&dir, "echo x >> f"), "nobody writes");

    // utimensat: a writer who is not the owner may set now, nothing else
    sh(&dir, &format!("touch t && chown {A}:{A} t && chmod 666 t"));
    ok(as_b(&dir, "touch t"), "writer sets now");
    not_permitted(as_b(&dir, "touch -d @1000000000 t"), "writer sets a time");
    not_permitted(as_b(&dir, "touch -m -d @1000000000 t"), "writer sets mtime");
    sh(&dir, "chmod 644 t");
    denied(as_b(&dir, "touch t"), "not a writer");
    // the owner, even without write permission, sets any time, kept exactly
    sh(&dir, "chmod 444 t");
    ok(
        as_a(&dir, "touch -d @4294967296.123456789 t"),
        "owner sets a time",
    );
    let m = fs::metadata(dir.join("t")).unwrap();
    assert_eq!((m.mtime(), m.mtime_nsec()), (4_294_967_296, 123_456_789));
    assert_eq!((m.atime(), m.atime_nsec()), (4_294_967_296, 123_456_789));
    ok(as_a(&dir, "touch -m -d @2147483648 t"), "owner sets mtime");
    assert_eq!(fs::metadata(dir.join("t")).unwrap().mtime(), 2_147_483_648);
}

#[test]
fn long_paths_and_names_below_the_mount() {
    let (dir, cv) = test_dir("long_paths");
    let dfd = open_dir(&dir);
    let name = "n".repeat(255);
    assert!(at(dfd, &name, "create").is_ok(), "a name of NAME_MAX bytes");
    assert_eq!(
        at(dfd, &"n".repeat(256), "create").err(),
        Some(libc::ENAMETOOLONG)
    );
    // 16 names of 255 bytes and 15 slashes: PATH_MAX - 1 bytes
    let comps: Vec<String> = (0..16)
        .map(|i| format!("{i:x}").repeat(255).chars().take(255).collect())
        .collect();
    for n in 1..16 {
        at(dfd, &comps[..n].join("/"), "mkdir").expect("mkdir");
    }
    let full = comps.join("/");
    assert_eq!(full.len(), 4095);
    let st = at(dfd, &full, "create").expect("a path of PATH_MAX - 1 bytes");
    assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFREG);
    // one byte more (a doubled slash) is too long
    let over = full.replacen('/', "//", 1);
    assert_eq!(at(dfd, &over, "stat").err(), Some(libc::ENAMETOOLONG));
    // SAFETY: closing our own descriptor.
    unsafe { libc::close(dfd) };
    // the master holds it at its full path, past PATH_MAX
    let s = shared();
    let st =
        s.rt.block_on(s.fs.for_mount().stat(&format!("{cv}/{full}")))
            .unwrap();
    assert_eq!(st.name, comps[15]);
    sh(&dir, &format!("rm -r {}", comps[0]));
}

#[test]
fn symlink_owners_link_counts_and_unlinked_open_files() {
    let (dir, _) = test_dir("counts");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    // a symlink belongs to its creator; lchown changes it and not its target
    sh(&dir, "touch target");
    ok(as_a(&dir, "ln -s target l"), "A's symlink");
    assert_eq!(owner(&dir.join("l")), (A, A));
    sh(&dir, "chown -h 77:78 l");
    assert_eq!(owner(&dir.join("l")), (77, 78));
    assert_eq!(owner(&dir.join("target")), (0, 0));
    sh(&dir, "chown 79 l");
    assert_eq!(owner(&dir.join("target")).0, 79);
    assert_eq!(owner(&dir.join("l")), (77, 78));

    // a directory has 2 links plus one per subdirectory
    let nlink = |p: &str| fs::metadata(dir.join(p)).unwrap().nlink();
    fs::create_dir(dir.join("d")).unwrap();
    fs::create_dir(dir.join("e")).unwrap();
    assert_eq!(nlink("d"), 2);
    fs::create_dir(dir.join("d/x")).unwrap();
    fs::create_dir(dir.join("d/y")).unwrap();
    File::create(dir.join("d/file")).unwrap();
    assert_eq!(nlink("d"), 4);
    fs::remove_dir(dir.join("d/y")).unwrap();
    assert_eq!(nlink("d"), 3);
    fs::rename(dir.join("d/x"), dir.join("e/x")).unwrap();
    assert_eq!((nlink("d"), nlink("e")), (2, 3));
    assert_eq!(nlink("."), 4, "the test directory: d and e");

    // the same as unprivileged users, in directories of their own
    for (uid, gid, groups) in [(65534, 65534, &[][..]), (A, A, &[GA][..])] {
        let sub = format!("by{uid}");
        sh(&dir, &format!("mkdir {sub} && chown {uid}:{gid} {sub}"));
        let (r, out) = sh_as(
            uid,
            gid,
            groups,
            &dir.join(&sub),
            "mkdir d e d/x d/y && touch d/f && rmdir d/y && mv d/x e/x && ln -s e l",
        );
        assert!(r, "{uid}: {out}");
        let n = |p: &str| nlink(&format!("{sub}/{p}"));
        assert_eq!((n("."), n("d"), n("e"), n("e/x")), (4, 2, 3, 2), "{uid}");
        assert_eq!(owner(&dir.join(&sub).join("l")), (uid, gid));
    }

    // an open file whose last name is gone has no links; one with another name has it
    let f = File::create(dir.join("gone")).unwrap();
    fs::remove_file(dir.join("gone")).unwrap();
    assert_eq!(f.metadata().unwrap().nlink(), 0);
    fs::write(dir.join("two"), b"2").unwrap();
    let g = File::open(dir.join("two")).unwrap();
    fs::hard_link(dir.join("two"), dir.join("two2")).unwrap();
    fs::remove_file(dir.join("two")).unwrap();
    assert_eq!(g.metadata().unwrap().nlink(), 1);
    assert_eq!(fs::metadata(dir.join("two2")).unwrap().nlink(), 1);
}

/// Who acts in the bad-input cases: root, nobody, and user A with a supplementary group.
const ACTORS: [(&str, u32, u32, &[u32]); 3] = [
    ("root", 0, 0, &[]),
    ("nobody", 65534, 65534, &[]),
    ("A", A, A, &[GA]),
];

/// Every entry below `dir`, with its type, mode, owner and size, sorted: from `find`,
/// which walks by relative paths, so entries deeper than PATH_MAX are listed too.
fn tree(dir: &Path) -> String {
    sh(dir, "find . -printf '%p %y %m %U %G %s\\n' | LC_ALL=C sort")
}

/// `script` as `actor` fails with `message` (strerror of the expected errno) and leaves
/// everything under `dir` as it was.
fn fails_alone(actor: (&str, u32, u32, &[u32]), dir: &Path, script: &str, message: &str) {
    let before = tree(dir);
    let (ok, out) = sh_as(actor.1, actor.2, actor.3, dir, script);
    assert!(
        !ok && out.contains(message),
        "{}: `{script}`: {out}",
        actor.0
    );
    assert_eq!(
        tree(dir),
        before,
        "{}: `{script}` changed something",
        actor.0
    );
}

#[test]
fn bad_input_gets_its_errno_and_changes_nothing() {
    for actor in ACTORS {
        let (name, uid, gid, groups) = actor;
        let (dir, _) = test_dir(&format!("bad_input_{name}"));
        sh(&dir, &format!("chown {uid}:{gid} ."));
        let run = |script: &str| {
            let (ok, out) = sh_as(uid, gid, groups, &dir, script);
            assert!(ok, "{name}: `{script}`: {out}");
        };
        // names of NAME_MAX bytes work; one byte more is ENAMETOOLONG for every call
        let (n255, n256) = ("n".repeat(255), "m".repeat(256));
        run(&format!("touch {n255} && mkdir d{}", &n255[1..]));
        for script in [
            format!("touch {n256}"),
            format!("mkdir {n256}"),
            format!("mv {n255} {n256}"),
            format!("ln -s {n255} {n256}"),
            format!("ln {n255} {n256}"),
            format!("touch d{}/{n256}", &n255[1..]),
        ] {
            fails_alone(actor, &dir, &script, "File name too long");
        }

        // a relative path of PATH_MAX - 1 bytes works, of PATH_MAX bytes does not
        let comps: Vec<String> = (0..16)
            .map(|i| format!("{i:x}").repeat(255).chars().take(255).collect())
            .collect();
        let full = comps.join("/");
        assert_eq!(full.len(), 4095);
        run(&format!(
            "mkdir -p {} && touch {full}",
            comps[..15].join("/")
        ));
        run(&format!("test -f {full}"));
        let over = full.replacen('/', "//", 1);
        fails_alone(actor, &dir, &format!("touch {over}"), "File name too long");
        fails_alone(actor, &dir, &format!("mkdir {over}"), "File name too long");

        // chown to a uid no user has: root may, others get EPERM
        run("touch own");
        if uid == 0 {
            run("chown 4000000:4000001 own");
            assert_eq!(owner(&dir.join("own")), (4_000_000, 4_000_001));
        } else {
            fails_alone(actor, &dir, "chown 4000000 own", "Operation not permitted");
            fails_alone(actor, &dir, "chgrp 4000001 own", "Operation not permitted");
            assert_eq!(owner(&dir.join("own")), (uid, gid));
        }

        // a rename into a sticky directory over another user's entry: EPERM, except root
        sh(
            &dir,
            &format!("mkdir -m 1777 t && touch t/theirs && chown {B}:{B} t/theirs"),
        );
        run("touch mine");
        if uid == 0 {
            run("mv mine t/theirs");
            assert_eq!(owner(&dir.join("t/theirs")), (0, 0));
        } else {
            fails_alone(actor, &dir, "mv mine t/theirs", "Operation not permitted");
            assert_eq!(owner(&dir.join("t/theirs")), (B, B));
            // into it under a new name is fine
            run("mv mine t/new");
            assert_eq!(owner(&dir.join("t/new")), (uid, gid));
        }
        sh(&dir, "rm -rf ./*");
    }
}

/// `CLASS-TAG` in `dir`, holding `f` ("data", 0644) and a directory `sub`, with mode
/// `bits` in the place of `class` (owner, group or other) alone and owned so that user
/// A (in group GA through a supplementary group) falls in that class. Returns the
/// directory's name.
fn class_dir(dir: &Path, class: &str, tag: &str, bits: u32) -> String {
    let owner = match class {
        "owner" => format!("{A}:0"),
        "group" => format!("0:{GA}"),
        _ => "0:0".to_string(),
    };
    let d = format!("{class}-{tag}");
    sh(
        dir,
        &format!(
            "mkdir {d} {d}/sub && echo data > {d}/f && chmod 644 {d}/f && chown {owner} {d} \
             && chmod {:o} {d}",
            bits << class_shift(class)
        ),
    );
    d
}

// Ground truth, ext4 and tmpfs as an unprivileged user (the same for each class): with
// read but not search permission on a directory, open(O_RDONLY) and readdir work and
// give the names and types (`ls`, `ls -p`), while `ls -l`, stat or open of an entry,
// chdir and a lookup of a missing name fail with EACCES. With search but not read
// permission, open and readdir fail with EACCES and the entries can be used. With
// neither, all of it fails with EACCES.

#[test]
fn a_directory_read_but_not_searched_gives_its_names() {
    let (dir, _) = test_dir("dir_read_only");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    for class in ["owner", "group", "other"] {
        let d = class_dir(&dir, class, "r", 0o6);
        let (r, out) = as_a(&dir, &format!("exec 3<{d} && ls {d} && ls -p {d}"));
        assert!(r && out == "f\nsub\nf\nsub/\n", "{class}: {out}");
        for script in [
            format!("ls -l {d}"),
            format!("stat {d}/f"),
            format!("cat {d}/f"),
            format!("stat {d}/sub"),
            format!("env -C {d} true"),
            format!("stat {d}/nope"),
        ] {
            denied(as_a(&dir, &script), &format!("{class}: {script}"));
        }
        // the directory itself is seen from its parent
        let (r, out) = as_a(&dir, &format!("stat -c %a {d}"));
        let want = format!("{:o}", 0o6 << class_shift(class));
        assert!(r && out.trim() == want, "{class}: {out}");
        // the listing of names left nothing behind: root sees the entry as it is
        assert_eq!(sh(&dir, &format!("stat -c '%a %s' {d}/f")), "644 5\n");
        assert_eq!(sh(&dir, &format!("ls -l {d} | wc -l")), "3\n", "{class}");
    }
}

#[test]
fn a_directory_searched_but_not_read_gives_its_entries() {
    let (dir, _) = test_dir("dir_search_only");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    for class in ["owner", "group", "other"] {
        let d = class_dir(&dir, class, "x", 0o1);
        for script in [
            format!("exec 3<{d}"),
            format!("ls {d}"),
            format!("ls -p {d}"),
        ] {
            denied(as_a(&dir, &script), &format!("{class}: {script}"));
        }
        let (r, out) = as_a(
            &dir,
            &format!("stat -c '%a %s' {d}/f && cat {d}/f && ls {d}/sub && env -C {d} cat f"),
        );
        assert!(r && out == "644 5\ndata\ndata\n", "{class}: {out}");
        let (r, out) = as_a(&dir, &format!("stat {d}/nope"));
        assert!(
            !r && out.contains("No such file or directory"),
            "{class}: {out}"
        );
    }
}

#[test]
fn a_directory_neither_read_nor_searched_gives_nothing() {
    let (dir, _) = test_dir("dir_no_access");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    for class in ["owner", "group", "other"] {
        let d = class_dir(&dir, class, "none", 0);
        for script in [
            format!("exec 3<{d}"),
            format!("ls {d}"),
            format!("stat {d}/f"),
            format!("cat {d}/f"),
            format!("env -C {d} true"),
            format!("stat {d}/nope"),
        ] {
            denied(as_a(&dir, &script), &format!("{class}: {script}"));
        }
        assert_eq!(sh(&dir, &format!("ls {d}")), "f\nsub\n", "root: {class}");
    }
}

/// Where a class's bits sit in a mode.
fn class_shift(class: &str) -> u32 {
    match class {
        "owner" => 6,
        "group" => 3,
        _ => 0,
    }
}
