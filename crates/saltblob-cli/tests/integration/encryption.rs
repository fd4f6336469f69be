//! Encryption at rest through the CLI on the embedded store: a keyring, a store URL naming it, sealed puts in
//! every layout (inline, RocksDB's blob files, an extent file) that read back and leave no plaintext anywhere in
//! the store's directory; a store opened without the key refuses them by name; `rekey` re-wraps them under a
//! rotated key so the old version can be retired; `encrypt` seals plaintext blobs.

use std::path::Path;

use crate::common::{fails, json, ok, saltblob};

const MARKER: &[u8] = b"SALTBLOB-CLI-PLAINTEXT-MARKER";

/// A blob of each layout on the embedded store, by name and size: inline, in RocksDB's blob files, in an extent
/// file (at or above 8 MiB).
const LAYOUTS: [(&str, usize); 3] = [
    ("inline", 500),
    ("blob-files", 300_000),
    ("extent", 20 << 20),
];

/// A file of `len` bytes holding the marker every 64 bytes between pseudo-random bytes.
fn marked_file(path: &Path, len: usize, seed: u64) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut v: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect();
    for piece in v.chunks_mut(64) {
        let n = piece.len().min(MARKER.len());
        piece[..n].copy_from_slice(&MARKER[..n]);
    }
    std::fs::write(path, v).expect("write");
}

/// Every file under `dir` that holds the marker.
fn files_with_marker(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                todo.push(path);
            } else if let Ok(bytes) = std::fs::read(&path)
                && bytes.windows(MARKER.len()).any(|w| w == MARKER)
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[test]
fn sealed_blobs_read_back_leave_no_plaintext_and_survive_a_key_rotation() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("store");
    let ring = dir.path().join("keys.ring");
    let r = ring.to_str().expect("utf-8");
    let keyring = |args: &[&str]| {
        let mut c = saltblob(&store);
        c.arg("keyring").args(args);
        c
    };
    ok(&mut keyring(&["new", r]));
    ok(&mut keyring(&["add", r, "tenant"]));
    let url = |key: Option<&str>| {
        let mut url = format!("rocksdb://{}?encryption=local&keyring={r}", store.display());
        if let Some(key) = key {
            url.push_str(&format!("&encryption_key={key}"));
        }
        url
    };
    let cli = |url: &str| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_saltblob"));
        c.args(["--store", url, "--quiet"])
            .env_remove("SALTBLOB_STORE");
        c
    };
    let sealed = url(Some("tenant"));
    let blobs = LAYOUTS;
    for (i, (name, len)) in blobs.iter().enumerate() {
        let file = dir.path().join(name);
        marked_file(&file, *len, i as u64);
        ok(cli(&sealed).args(["put", name]).arg(&file));
        let head = json(&ok(cli(&sealed).args(["head", name, "--json"])));
        assert_eq!(head["encryption"]["key"], "tenant", "{name}: {head}");
        assert!(
            head["digest"]
                .as_str()
                .is_some_and(|d| d.starts_with("blake3-keyed:")),
            "{head}"
        );
        let out = dir.path().join(format!("{name}.out"));
        ok(cli(&sealed).args(["get", name, "-o"]).arg(&out));
        assert!(
            std::fs::read(&out).expect("read") == std::fs::read(&file).expect("read"),
            "{name}"
        );
        std::fs::remove_file(&out).expect("rm");
    }
    let describe = json(&ok(cli(&sealed).args(["describe", "extent", "--json"])));
    assert_eq!(describe["storage"], "extent", "{describe}");
    let found = files_with_marker(&store);
    assert!(found.is_empty(), "plaintext stored in {found:?}");

    // Without the provider, or with a store whose keyring lacks the key: refused, naming the key.
    fails(
        saltblob(&store).args(["get", "blob-files"]),
        1,
        "\"tenant\" version 1",
    );
    let other = dir.path().join("other.ring");
    let o = other.to_str().expect("utf-8");
    ok(&mut keyring(&["new", o]));
    let elsewhere = format!("rocksdb://{}?encryption=local&keyring={o}", store.display());
    fails(
        cli(&elsewhere).args(["get", "inline"]),
        1,
        "no such key version",
    );
    fails(
        cli(&url(Some("nope"))).args(["put", "x", "/dev/null"]),
        1,
        "no such key",
    );
    // fsck without the keys checks the rest and lists the sealed blobs it could not read; their chunks are
    // theirs, not orphans. With the keys it reads them all.
    let fsck = json(&ok(saltblob(&store).args(["fsck", "--json"])));
    assert_eq!(
        fsck["unverified"].as_array().map(Vec::len),
        Some(3),
        "{fsck}"
    );
    assert!(
        fsck["unverified"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("\"tenant\" version 1")),
        "{fsck}"
    );
    assert_eq!(fsck["orphans"], serde_json::json!([]), "{fsck}");
    assert_eq!(fsck["damaged"], serde_json::json!([]), "{fsck}");
    let text = String::from_utf8_lossy(&ok(saltblob(&store).arg("fsck")).stdout).into_owned();
    assert!(text.contains("3 sealed blob(s) not verified"), "{text}");
    let fsck = json(&ok(cli(&sealed).args(["fsck", "--json"])));
    assert_eq!(
        (&fsck["blobs"], &fsck["unverified"]),
        (&serde_json::json!(3), &serde_json::json!([])),
        "{fsck}"
    );
    let no_keyring = format!("rocksdb://{}?encryption=local", store.display());
    fails(cli(&no_keyring).arg("ls"), 2, "keyring=FILE");

    // Rotate, re-wrap, retire the old version: everything still reads.
    ok(&mut keyring(&["rotate", r, "tenant"]));
    let report = json(&ok(cli(&sealed).args(["rekey", "--json"])));
    assert_eq!(report["outcomes"]["re-wrapped"], 3, "{report}");
    let again = json(&ok(cli(&sealed).args(["rekey", "--json"])));
    assert_eq!(again["outcomes"]["current already"], 3, "{again}");
    ok(&mut keyring(&["retire", r, "tenant", "1"]));
    for (name, _) in blobs {
        let head = json(&ok(cli(&sealed).args(["head", name, "--json"])));
        assert_eq!(head["encryption"]["key_version"], 2, "{name}: {head}");
        ok(cli(&sealed).args(["get", name]));
    }

    // A plaintext blob, then sealed by `encrypt`.
    let plain = dir.path().join("plain");
    marked_file(&plain, 100_000, 9);
    ok(cli(&url(None)).args(["put", "plain"]).arg(&plain));
    let head = json(&ok(cli(&url(None)).args(["head", "plain", "--json"])));
    assert!(head["encryption"].is_null(), "{head}");
    let report = json(&ok(
        cli(&url(None)).args(["encrypt", "--key", "tenant", "--json"])
    ));
    assert_eq!(report["outcomes"]["sealed"], 1, "{report}");
    assert_eq!(report["outcomes"]["sealed already"], 3, "{report}");
    let head = json(&ok(cli(&url(None)).args(["head", "plain", "--json"])));
    assert_eq!(head["encryption"]["key"], "tenant", "{head}");
    let out = dir.path().join("plain.out");
    ok(cli(&url(None)).args(["get", "plain", "-o"]).arg(&out));
    assert!(std::fs::read(&out).expect("read") == std::fs::read(&plain).expect("read"));

    // `get -o` into a named pipe writes through it and leaves it a pipe (a rename would replace it with a file,
    // as it once replaced /dev/null).
    use std::os::unix::fs::FileTypeExt;
    let fifo = dir.path().join("pipe");
    ok(std::process::Command::new("mkfifo").arg(&fifo));
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).expect("read the pipe"))
    };
    ok(cli(&url(None)).args(["get", "plain", "-o"]).arg(&fifo));
    let through = reader.join().expect("reader");
    assert!(
        through == std::fs::read(&plain).expect("read"),
        "the pipe carried the blob"
    );
    let kind = std::fs::symlink_metadata(&fifo).expect("stat").file_type();
    assert!(kind.is_fifo(), "the pipe is still a pipe: {kind:?}");
}

/// `put --customer-key FILE` on a store without a key provider seals every layout (inline, RocksDB's blob files,
/// an extent file) under the key in FILE, which is stored nowhere; `get --customer-key` reads them back, whole and
/// by range; without it, or with another key, the read is refused naming the customer key; no plaintext is in the
/// store's directory; fsck lists them as unverified; a key file readable by others or of the wrong length is
/// refused before anything is written.
#[test]
fn customer_keys_seal_blobs_that_read_only_with_the_same_key() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("store");
    let key_file = |name: &str, bytes: &[u8], mode: u32| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).expect("write key");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        path
    };
    let key = key_file("customer.key", &[0x3C; 32], 0o600);
    let other = key_file("other.key", &[0xC3; 32], 0o600);
    let blobs = LAYOUTS;
    for (i, (name, len)) in blobs.iter().enumerate() {
        let file = dir.path().join(name);
        marked_file(&file, *len, 20 + i as u64);
        ok(saltblob(&store)
            .args(["put", name])
            .arg(&file)
            .arg("--customer-key")
            .arg(&key));
        let head = json(&ok(saltblob(&store).args(["head", name, "--json"])));
        assert_eq!(head["encryption"]["provider"], "customer", "{name}: {head}");
        let out = dir.path().join(format!("{name}.out"));
        ok(saltblob(&store)
            .args(["get", name, "--customer-key"])
            .arg(&key)
            .arg("-o")
            .arg(&out));
        assert!(
            std::fs::read(&out).expect("read") == std::fs::read(&file).expect("read"),
            "{name}"
        );
        let part = ok(saltblob(&store)
            .args(["get", name, "--range", "100-199", "--customer-key"])
            .arg(&key));
        assert_eq!(part.stdout, std::fs::read(&file).expect("read")[100..200]);
        fails(
            saltblob(&store).args(["get", name]),
            1,
            "sealed under a customer key, which the read did not give",
        );
        fails(
            saltblob(&store)
                .args(["get", name, "--customer-key"])
                .arg(&other),
            1,
            "not the one it was sealed with",
        );
    }
    let found = files_with_marker(&store);
    assert!(found.is_empty(), "plaintext stored in {found:?}");
    let fsck = json(&ok(saltblob(&store).args(["fsck", "--json"])));
    assert_eq!(
        fsck["unverified"].as_array().map(Vec::len),
        Some(3),
        "{fsck}"
    );
    assert_eq!(fsck["damaged"], serde_json::json!([]), "{fsck}");

    // A key given for a blob not sealed under one is refused (usage), as S3 refuses it.
    let plain = dir.path().join("plain");
    marked_file(&plain, 5000, 30);
    ok(saltblob(&store).args(["put", "plain"]).arg(&plain));
    fails(
        saltblob(&store)
            .args(["get", "plain", "--customer-key"])
            .arg(&key),
        2,
        "not sealed under a customer key",
    );

    // Bad key files: refused before anything is written.
    let loose = key_file("loose.key", &[1; 32], 0o644);
    let short = key_file("short.key", &[1; 16], 0o600);
    let data = dir.path().join("inline");
    fails(
        saltblob(&store)
            .args(["put", "refused"])
            .arg(&data)
            .arg("--customer-key")
            .arg(&loose),
        2,
        "accessible by group or others",
    );
    fails(
        saltblob(&store)
            .args(["put", "refused"])
            .arg(&data)
            .arg("--customer-key")
            .arg(&short),
        2,
        "holds 16 bytes",
    );
    fails(saltblob(&store).args(["head", "refused"]), 3, "not found");
}
