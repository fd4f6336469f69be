//! Bulk data movement (issue 61, item 4): `cp` and `sync` between local trees and prefixes, both ways.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::common::*;

/// A non-UTF-8 file name.
const ODD_NAME: &[u8] = b"n\xff\xfe.bin";

/// Every regular file under `dir` (symlinks not followed), by its `/`-separated path under `dir`, with its
/// BLAKE3 digest.
fn tree(dir: &Path) -> BTreeMap<Vec<u8>, blake3::Hash> {
    fn visit(dir: &Path, rel: &[u8], out: &mut BTreeMap<Vec<u8>, blake3::Hash>) {
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let entry = entry.expect("entry");
            let mut path = rel.to_vec();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(entry.file_name().as_bytes());
            let kind = entry.file_type().expect("file type");
            if kind.is_dir() {
                visit(&entry.path(), &path, out);
            } else if kind.is_file() {
                out.insert(path, hash_file(&entry.path()));
            }
        }
    }
    let mut out = BTreeMap::new();
    visit(dir, b"", &mut out);
    out
}

/// A tree with nested directories, an empty file, a 20 MiB file and a file whose name is not UTF-8.
fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("a/b/c")).expect("mkdir");
    std::fs::create_dir_all(root.join("d")).expect("mkdir");
    std::fs::write(root.join("a/b/c/deep.txt"), b"deep").expect("write");
    std::fs::write(root.join("a/b/empty"), b"").expect("write");
    std::fs::write(root.join("top.txt"), b"top").expect("write");
    random_file(&root.join("d/big.bin"), 20 << 20, 61);
    std::fs::write(root.join("d").join(OsStr::from_bytes(ODD_NAME)), b"odd").expect("write");
}

/// The summary `--json` printed.
fn summary(out: &std::process::Output) -> serde_json::Value {
    json(out)
}

#[test]
fn cp_r_copies_a_tree_in_and_back_out_byte_identical() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let src = dir.path().join("src");
    make_tree(&src);
    let want = tree(&src);

    let up = summary(&ok(saltblob(&store)
        .args(["cp", "-r", "-j", "3", "--json"])
        .arg(&src)
        .arg("sb:t")));
    assert_eq!(up["copied"], 5, "{up}");
    assert_eq!(up["bytes"], (20 << 20) + 4 + 3 + 3, "{up}");
    assert_eq!(up["failed"], 0, "{up}");
    let keys = String::from_utf8(ok(saltblob(&store).args(["ls", "t/"])).stdout).expect("UTF-8");
    assert_eq!(
        keys, "t/a/b/c/deep.txt\nt/a/b/empty\nt/d/big.bin\nt/d/n%FF%FE.bin\nt/top.txt\n",
        "keys are the paths under the tree, a non-UTF-8 name as its bytes"
    );
    let head = json(&ok(saltblob(&store).args([
        "head",
        "t/d/big.bin",
        "--json",
    ])));
    assert_eq!(
        head["digest"],
        format!("blake3:{}", want[&b"d/big.bin"[..]].to_hex())
    );

    let back = dir.path().join("back");
    let down = summary(&ok(saltblob(&store)
        .args(["cp", "-r", "--json", "sb:t/"])
        .arg(&back)));
    assert_eq!(down["copied"], 5, "{down}");
    assert_eq!(tree(&back), want, "the tree comes back byte-identical");
    let leftovers: Vec<_> = std::fs::read_dir(back.join("d"))
        .expect("read dir")
        .map(|e| e.expect("entry").file_name())
        .filter(|n| n.as_bytes().starts_with(b"."))
        .collect();
    assert!(
        leftovers.is_empty(),
        "no temporary file left: {leftovers:?}"
    );

    // Again with --skip-existing: everything is there already, both ways.
    let again = summary(&ok(saltblob(&store)
        .args(["cp", "-r", "--skip-existing", "--json"])
        .arg(&src)
        .arg("sb:t/")));
    assert_eq!(
        (again["copied"].clone(), again["skipped"].clone()),
        (0.into(), 5.into()),
        "{again}"
    );
    std::fs::write(back.join("top.txt"), b"TOP").expect("write");
    let again = summary(&ok(saltblob(&store)
        .args(["cp", "-r", "--skip-existing", "--json", "sb:t"])
        .arg(&back)));
    assert_eq!(
        (again["copied"].clone(), again["skipped"].clone()),
        (1.into(), 4.into()),
        "{again}"
    );
    assert_eq!(std::fs::read(back.join("top.txt")).expect("read"), b"top");

    // One file: into a prefix, and out into a directory.
    ok(saltblob(&store)
        .arg("cp")
        .arg(src.join("d").join(OsStr::from_bytes(ODD_NAME)))
        .arg("sb:one/"));
    let one = dir.path().join("one");
    std::fs::create_dir(&one).expect("mkdir");
    ok(saltblob(&store)
        .args(["cp", "sb:one/n%FF%FE.bin"])
        .arg(&one));
    assert_eq!(
        std::fs::read(one.join(OsStr::from_bytes(ODD_NAME))).expect("read"),
        b"odd"
    );
    // A directory without -r, a missing key, both sides local: refused with their codes.
    fails(saltblob(&store).arg("cp").arg(&src).arg("sb:x/"), 2, "-r");
    fails(
        saltblob(&store).args(["cp", "sb:missing"]).arg(&one),
        3,
        "not found",
    );
    fails(saltblob(&store).arg("cp").arg(&src).arg(&one), 2, "sb:KEY");
}

#[test]
fn cp_reports_an_unreadable_file_copies_the_rest_and_exits_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("sub")).expect("mkdir");
    std::fs::write(src.join("a.txt"), b"a").expect("write");
    std::fs::write(src.join("sub/b.txt"), b"b").expect("write");
    // A symlink to itself: unreadable for every user, root included.
    std::os::unix::fs::symlink("self.lnk", src.join("self.lnk")).expect("symlink");
    // Mode 000: unreadable, unless the tests run as root.
    let locked = src.join("locked.txt");
    std::fs::write(&locked, b"secret").expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    let locked_out = std::fs::read(&locked).is_err();
    if !locked_out {
        eprintln!("running as root: a mode 000 file is still readable, and is copied");
    }
    let out = saltblob(&store)
        .args(["cp", "-r", "--json"])
        .arg(&src)
        .arg("sb:u/")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("self.lnk"), "{stderr}");
    let s = summary(&out);
    let failed = if locked_out { 2 } else { 1 };
    assert_eq!(
        (s["copied"].clone(), s["failed"].clone()),
        ((4 - failed).into(), failed.into()),
        "{s}"
    );
    let paths: Vec<&str> = s["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["path"].as_str())
        .collect();
    assert!(paths.iter().any(|p| p.ends_with("/self.lnk")), "{s}");
    assert_eq!(
        paths.iter().any(|p| p.ends_with("/locked.txt")),
        locked_out,
        "{s}"
    );
    let keys = String::from_utf8(ok(saltblob(&store).args(["ls", "u/"])).stdout).expect("UTF-8");
    let want = if locked_out {
        "u/a.txt\nu/sub/b.txt\n"
    } else {
        "u/a.txt\nu/locked.txt\nu/sub/b.txt\n"
    };
    assert_eq!(keys, want, "the others are copied, nothing unread is");
}

#[test]
fn cp_follows_file_symlinks_and_not_a_directory_symlink_loop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("sub")).expect("mkdir");
    std::fs::write(src.join("sub/x.txt"), b"x").expect("write");
    std::os::unix::fs::symlink("..", src.join("sub/loop")).expect("symlink");
    std::os::unix::fs::symlink("sub/x.txt", src.join("link.txt")).expect("symlink");
    let out = ok(saltblob(&store)
        .args(["cp", "-r", "--json"])
        .arg(&src)
        .arg("sb:s/"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("symlink to a directory"), "{stderr}");
    let s = summary(&out);
    assert_eq!(
        (s["copied"].clone(), s["skipped"].clone()),
        (2.into(), 1.into()),
        "{s}"
    );
    let keys = String::from_utf8(ok(saltblob(&store).args(["ls", "s/"])).stdout).expect("UTF-8");
    assert_eq!(keys, "s/link.txt\ns/sub/x.txt\n");
    assert_eq!(
        ok(saltblob(&store).args(["get", "s/link.txt"])).stdout,
        b"x"
    );
}

#[test]
fn cp_no_clobber_leaves_an_existing_local_file_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let input = dir.path().join("new.txt");
    std::fs::write(&input, b"new").expect("write");
    ok(saltblob(&store).args(["put", "k"]).arg(&input));
    let dest = dir.path().join("dest.txt");
    std::fs::write(&dest, b"old").expect("write");
    let s = summary(&ok(saltblob(&store)
        .args(["cp", "-n", "--json", "sb:k"])
        .arg(&dest)));
    assert_eq!(
        (s["copied"].clone(), s["skipped"].clone()),
        (0.into(), 1.into()),
        "{s}"
    );
    assert_eq!(std::fs::read(&dest).expect("read"), b"old", "left alone");
    // -n into the store: the key is kept too.
    let s = summary(&ok(saltblob(&store)
        .args(["cp", "-n", "--json"])
        .arg(&dest)
        .arg("sb:k")));
    assert_eq!(s["skipped"], 1, "{s}");
    assert_eq!(ok(saltblob(&store).args(["get", "k"])).stdout, b"new");
    // Without -n, the file is replaced.
    ok(saltblob(&store).args(["cp", "sb:k"]).arg(&dest));
    assert_eq!(std::fs::read(&dest).expect("read"), b"new");
}

#[test]
fn cp_r_refuses_keys_that_would_escape_the_destination() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let input = dir.path().join("in.txt");
    std::fs::write(&input, b"data").expect("write");
    for key in ["p/ok", "p/../evil", "p//empty", "p/sub/"] {
        ok(saltblob(&store).args(["put", key]).arg(&input));
    }
    let dest = dir.path().join("out");
    let out = saltblob(&store)
        .args(["cp", "-r", "--json", "sb:p/"])
        .arg(&dest)
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = summary(&out);
    assert_eq!(
        (s["copied"].clone(), s["failed"].clone()),
        (1.into(), 3.into()),
        "{s}"
    );
    assert_eq!(tree(dir.path().join("out").as_path()).len(), 1);
    assert!(!dir.path().join("evil").exists(), "nothing escaped");
}

#[test]
fn sync_copies_only_what_differs_and_deletes_only_when_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let src = dir.path().join("src");
    make_tree(&src);
    let sync = |args: &[&str], from: &OsStr, to: &OsStr| {
        summary(&ok(saltblob(&store)
            .arg("sync")
            .args(args)
            .arg("--json")
            .arg(from)
            .arg(to)))
    };
    let (src_arg, prefix) = (src.as_os_str(), OsStr::new("sb:s"));
    let first = sync(&[], src_arg, prefix);
    assert_eq!(first["copied"], 5, "{first}");
    let second = sync(&[], src_arg, prefix);
    assert_eq!(
        (second["copied"].clone(), second["skipped"].clone()),
        (0.into(), 5.into()),
        "nothing the second time: {second}"
    );
    // The same size, other bytes: copied.
    std::fs::write(src.join("top.txt"), b"TOP").expect("write");
    let third = sync(&[], src_arg, prefix);
    assert_eq!(third["copied"], 1, "{third}");
    assert_eq!(
        ok(saltblob(&store).args(["get", "s/top.txt"])).stdout,
        b"TOP"
    );

    // --delete --dry-run changes nothing; --delete deletes what the source lacks.
    std::fs::remove_file(src.join("a/b/empty")).expect("rm");
    let dry = sync(&["--delete", "--dry-run"], src_arg, prefix);
    assert_eq!(
        (dry["deleted"].clone(), dry["dry_run"].clone()),
        (1.into(), true.into()),
        "{dry}"
    );
    assert_eq!(
        ok(saltblob(&store).args(["ls", "s/"]))
            .stdout
            .iter()
            .filter(|&&b| b == b'\n')
            .count(),
        5
    );
    let deleted = sync(&["--delete"], src_arg, prefix);
    assert_eq!(deleted["deleted"], 1, "{deleted}");
    let keys = String::from_utf8(ok(saltblob(&store).args(["ls", "s/"])).stdout).expect("UTF-8");
    assert!(!keys.contains("empty"), "{keys}");

    // From the store to a directory: the same.
    let out = dir.path().join("out");
    let down = sync(&[], prefix, out.as_os_str());
    assert_eq!(down["copied"], 4, "{down}");
    assert_eq!(tree(&out), tree(&src));
    let again = sync(&[], prefix, out.as_os_str());
    assert_eq!(
        (again["copied"].clone(), again["skipped"].clone()),
        (0.into(), 4.into()),
        "{again}"
    );
    std::fs::write(out.join("extra.txt"), b"extra").expect("write");
    let dry = sync(&["--delete", "--dry-run"], prefix, out.as_os_str());
    assert_eq!(dry["deleted"], 1, "{dry}");
    assert!(out.join("extra.txt").exists(), "a dry run deletes nothing");
    let wet = sync(&["--delete"], prefix, out.as_os_str());
    assert_eq!(
        (wet["deleted"].clone(), wet["copied"].clone()),
        (1.into(), 0.into()),
        "{wet}"
    );
    assert!(!out.join("extra.txt").exists());
    assert_eq!(tree(&out), tree(&src));
}

/// Four 128 MiB files copied in and out four at a time stay within 192 MiB resident: each transfer is
/// streamed, none read whole into memory (that alone would take 512 MiB).
#[test]
fn cp_r_streams_each_transfer_within_bounded_memory() {
    const LIMIT_MIB: f64 = 192.0;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let src = dir.path().join("src");
    std::fs::create_dir(&src).expect("mkdir");
    for i in 0..4 {
        random_file(&src.join(format!("f{i}")), 128 << 20, 100 + i);
    }
    let up = ok(saltblob(&store)
        .args(["cp", "-r", "-j", "4"])
        .arg(&src)
        .arg("sb:m/")
        .env("SALTBLOB_REPORT_PEAK_RSS", "1"));
    let out = dir.path().join("out");
    let down = ok(saltblob(&store)
        .args(["cp", "-r", "-j", "4", "sb:m/"])
        .arg(&out)
        .env("SALTBLOB_REPORT_PEAK_RSS", "1"));
    let (up_peak, down_peak) = (peak_rss_mib(&up.stderr), peak_rss_mib(&down.stderr));
    println!(
        "512 MiB in four files, four at a time: cp in peak {up_peak:.1} MiB, out {down_peak:.1} MiB"
    );
    assert_eq!(tree(&out), tree(&src));
    assert!(
        up_peak < LIMIT_MIB,
        "cp into the store peaked at {up_peak:.1} MiB"
    );
    assert!(
        down_peak < LIMIT_MIB,
        "cp out of the store peaked at {down_peak:.1} MiB"
    );
}
