//! Bulk data movement (issue 61, item 4): `rm` of many keys and of prefixes, `ls --json`, `--delimiter`,
//! `-h` and `--summarize`, `put --metadata`.

use crate::common::*;

/// Puts `data` under each of `keys`.
fn put_all(store: &std::path::Path, dir: &std::path::Path, keys: &[&str], data: &[u8]) {
    let input = dir.join("in.bin");
    std::fs::write(&input, data).expect("write");
    for key in keys {
        ok(saltblob(store).args(["put", key]).arg(&input));
    }
}

/// The keys `ls` lists, one a line.
fn listed(store: &std::path::Path) -> String {
    String::from_utf8(ok(saltblob(store).arg("ls")).stdout).expect("UTF-8")
}

#[test]
fn rm_deletes_several_keys_and_prefixes_and_a_dry_run_deletes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    put_all(
        &store,
        dir.path(),
        &["a/1", "a/2", "a/sub/3", "ab", "b", "c"],
        b"x",
    );

    let dry = ok(saltblob(&store).args(["rm", "--prefix", "--dry-run", "a/"]));
    assert_eq!(String::from_utf8_lossy(&dry.stdout), "a/1\na/2\na/sub/3\n");
    assert_eq!(
        listed(&store),
        "a/1\na/2\na/sub/3\nab\nb\nc\n",
        "nothing removed"
    );
    let s = json(&ok(
        saltblob(&store).args(["rm", "--prefix", "--json", "a/"])
    ));
    assert_eq!(
        (s["deleted"].clone(), s["failed"].clone()),
        (3.into(), 0.into()),
        "{s}"
    );
    assert_eq!(listed(&store), "ab\nb\nc\n", "exactly the prefix is gone");

    // Several keys: each deleted; one that holds no blob is named and the exit code is 3.
    fails(
        saltblob(&store).args(["rm", "ab", "missing", "b"]),
        3,
        "missing",
    );
    assert_eq!(listed(&store), "c\n");
    fails(
        saltblob(&store).args(["rm", "--prefix", ""]),
        2,
        "empty prefix",
    );
    let s = json(&ok(saltblob(&store).args(["rm", "-r", "--json", "c"])));
    assert_eq!(s["deleted"], 1, "{s}");
    assert_eq!(listed(&store), "");
}

#[test]
fn ls_prints_json_lines_common_prefixes_human_sizes_and_totals() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    put_all(
        &store,
        dir.path(),
        &["photos/1.jpg", "photos/2/3.jpg", "readme%00"],
        b"hello",
    );
    let big = dir.path().join("big.bin");
    random_file(&big, 3 << 20, 9);
    ok(saltblob(&store).args(["put", "x/big.bin"]).arg(&big));

    let out = String::from_utf8(ok(saltblob(&store).args(["ls", "--json"])).stdout).expect("UTF-8");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(lines[2]["key"], "readme%00", "keys %-escaped");
    assert_eq!(lines[3]["size"], 3 << 20);
    for line in &lines {
        for field in [
            "key",
            "size",
            "version",
            "created",
            "layout",
            "content_type",
        ] {
            assert!(line.get(field).is_some(), "{field} in {line}");
        }
    }

    let grouped = String::from_utf8(ok(saltblob(&store).args(["ls", "--delimiter", "/"])).stdout)
        .expect("UTF-8");
    assert_eq!(grouped, "PRE photos/\nreadme%00\nPRE x/\n");
    let nested =
        String::from_utf8(ok(saltblob(&store).args(["ls", "--delimiter", "/", "photos/"])).stdout)
            .expect("UTF-8");
    assert_eq!(nested, "photos/1.jpg\nPRE photos/2/\n");
    let grouped_json =
        String::from_utf8(ok(saltblob(&store).args(["ls", "--json", "--delimiter", "/"])).stdout)
            .expect("UTF-8");
    let first: serde_json::Value =
        serde_json::from_str(grouped_json.lines().next().expect("a line")).expect("JSON");
    assert_eq!(first, serde_json::json!({ "prefix": "photos/" }));

    let long = String::from_utf8(
        ok(saltblob(&store).args(["ls", "-l", "-h", "--summarize", "x/"])).stdout,
    )
    .expect("UTF-8");
    assert!(
        long.contains("3.0 MiB") && long.contains("x/big.bin"),
        "{long}"
    );
    assert!(
        long.contains("Total Objects: 1\n   Total Size: 3.0 MiB"),
        "{long}"
    );
    let total =
        String::from_utf8(ok(saltblob(&store).args(["ls", "--json", "--summarize"])).stdout)
            .expect("UTF-8");
    let last: serde_json::Value =
        serde_json::from_str(total.lines().last().expect("a line")).expect("JSON");
    assert_eq!(
        last,
        serde_json::json!({ "total_objects": 4, "total_size": 15 + (3 << 20) })
    );
    // --help still works, -h is --human-readable.
    let help =
        String::from_utf8(ok(saltblob(&store).args(["ls", "--help"])).stdout).expect("UTF-8");
    assert!(help.contains("--human-readable"), "{help}");
}

#[test]
fn put_stores_metadata_and_a_content_type() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let input = dir.path().join("in.txt");
    std::fs::write(&input, b"hi").expect("write");
    ok(saltblob(&store)
        .args(["put", "k", "--content-type", "text/plain"])
        .args([
            "--metadata",
            "owner=ana",
            "--metadata",
            "x-amz-meta-tag=a=b",
        ])
        .arg(&input));
    let head = json(&ok(saltblob(&store).args(["head", "k", "--json"])));
    assert_eq!(head["content_type"], "text/plain");
    assert_eq!(
        head["metadata"],
        serde_json::json!({ "owner": "ana", "x-amz-meta-tag": "a=b" })
    );
    fails(
        saltblob(&store)
            .args(["put", "k2", "--metadata", "noequals"])
            .arg(&input),
        2,
        "NAME=VALUE",
    );
    fails(
        saltblob(&store)
            .args(["put", "k2", "--metadata", "s3:etag=x"])
            .arg(&input),
        2,
        "reserved",
    );
}
