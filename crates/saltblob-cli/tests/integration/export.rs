//! `saltblob export` and `saltblob import` between embedded stores: a round trip keeps every blob identical
//! (bytes, content type, metadata, sealed metadata, expiry, encryption key name; a key that is not UTF-8, an
//! empty blob, a 20 MiB one, sealed ones) and writes nothing to the source; a truncated or corrupted stream is
//! refused with its offset and key, every blob before the damage imported and nothing of the damaged one; a rerun
//! skips what is there; `--after` and `--prefix` export part of a store; blobs the target cannot seal, and blobs
//! sealed with a customer key, are named, never lost silently. The round trip through Cassandra is in `cql.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use saltblob::{LateMetadata, PutOptions, StoreConfig};

use crate::common::*;

/// A `saltblob` command on the store at `url`, without progress bars.
pub fn cli(url: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_saltblob"));
    c.args(["--store", url, "--quiet"])
        .env_remove("SALTBLOB_STORE");
    c
}

/// A keyring with key `k1`, as `dir/keys.ring` (not `keyring`: that name beside a store seals all its puts,
/// see `common::store_url`).
pub fn make_keyring(dir: &Path) -> PathBuf {
    let ring = dir.join("keys.ring");
    for args in [&["new"][..], &["add"][..]] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_saltblob"));
        c.arg("keyring").args(args).arg(&ring);
        if args == ["add"] {
            c.arg("k1");
        }
        ok(&mut c);
    }
    ring
}

/// The URL of the embedded store in `dir` that opens sealed blobs with `ring`.
pub fn keyed_url(dir: &Path, ring: &Path) -> String {
    format!(
        "rocksdb://{}?encryption=local&keyring={}",
        dir.display(),
        ring.display()
    )
}

/// What a store holds for one key, as an import must reproduce it.
#[derive(Debug, PartialEq, Eq)]
pub struct Held {
    pub size: u64,
    pub content_type: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub sealed_metadata: BTreeMap<String, String>,
    /// The expiry, to the minute (an import puts the time left as a TTL).
    pub expires_minute: Option<u64>,
    pub sealed_under: Option<String>,
    pub data: blake3::Hash,
}

/// Every blob of the store at `url`, by key, read in process (no CLI runs on it meanwhile).
pub fn snapshot(url: &str) -> BTreeMap<Vec<u8>, Held> {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let store = saltblob::open(url, StoreConfig::default())
            .await
            .expect("open");
        let mut out = BTreeMap::new();
        for entry in store.list("").await.expect("list") {
            let m = entry.manifest.expect("manifest");
            let data = store.get(&entry.key).await.expect("get");
            let mut metadata = m.metadata.clone();
            metadata.remove(saltblob::manifest::SEALED_METADATA_KEY);
            let sealed_metadata = store
                .sealed_metadata(&entry.key, &m, None)
                .await
                .expect("sealed metadata");
            out.insert(
                entry.key.to_vec(),
                Held {
                    size: m.size,
                    content_type: m.content_type.clone(),
                    metadata,
                    sealed_metadata,
                    expires_minute: m.expires_micros.map(|t| (t + 30_000_000) / 60_000_000),
                    sealed_under: m.sealed_by().map(|s| s.kek.name.clone()),
                    data: blake3::hash(&data),
                },
            );
        }
        out
    })
}

/// The version of every key of the store at `url`.
fn versions(url: &str) -> BTreeMap<Vec<u8>, String> {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let store = saltblob::open(url, StoreConfig::default())
            .await
            .expect("open");
        let list = store.list("").await.expect("list");
        list.into_iter()
            .map(|e| {
                let m = e.manifest.expect("manifest");
                (e.key.to_vec(), m.version.to_string())
            })
            .collect()
    })
}

fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; n];
    Noise::new(seed).fill(&mut v);
    v
}

/// Fills the store at `url` (which has key `k1`) with a blob of each kind: empty, a key that is not UTF-8 with a
/// content type and metadata, one with a TTL, a 20 MiB one (an extent file), sealed ones (inline; chunked with
/// sealed metadata), and a few under `dir/`.
pub fn fill(url: &str, big: usize) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let store = saltblob::open(url, StoreConfig::default())
            .await
            .expect("open");
        let put = async |key: &[u8], data: Vec<u8>, opts: PutOptions| {
            store.put(key, data, &opts).await.expect("put");
        };
        put(b"empty", Vec::new(), PutOptions::new()).await;
        put(
            b"k\xff\x00 x",
            noise(1000, 1),
            PutOptions::new()
                .with_content_type("text/plain; charset=latin1")
                .with_metadata("owner", "ana")
                .with_metadata("s3:etag", "\"abc\""),
        )
        .await;
        put(
            b"ttl",
            noise(300_000, 2),
            PutOptions::new().with_ttl(std::time::Duration::from_secs(30 * 86_400)),
        )
        .await;
        put(b"big", noise(big, 3), PutOptions::new()).await;
        put(
            b"sealed/inline",
            noise(500, 4),
            PutOptions::new().with_encryption_key("k1"),
        )
        .await;
        let late = LateMetadata::new();
        late.insert("s3:checksum-crc32", "AAAAAA==");
        put(
            b"sealed/chunked",
            noise(700_000, 5),
            PutOptions::new()
                .with_encryption_key("k1")
                .with_metadata("owner", "bo")
                .with_late_metadata(late),
        )
        .await;
        for (i, k) in ["dir/a", "dir/b", "dir/c"].into_iter().enumerate() {
            put(
                k.as_bytes(),
                noise(5000 + i, 10 + i as u64),
                PutOptions::new(),
            )
            .await;
        }
    });
}

fn summary(out: &Output) -> serde_json::Value {
    json(out)
}

#[test]
fn a_store_round_trips_through_a_file_identical_and_export_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ring = make_keyring(dir.path());
    let src = keyed_url(&dir.path().join("src"), &ring);
    let dst = keyed_url(&dir.path().join("dst"), &ring);
    fill(&src, 20 << 20);
    let before = snapshot(&src);
    let versions_before = versions(&src);
    assert_eq!(before.len(), 9);

    let file = dir.path().join("all.sbx");
    let out = summary(&ok(cli(&src).args(["export", "--json"]).arg(&file)));
    assert_eq!(out["exported"], 9, "{out}");
    assert_eq!(out["skipped"], 0, "{out}");
    assert_eq!(out["failed"], 0, "{out}");
    let total: u64 = before.values().map(|h| h.size).sum();
    assert_eq!(out["bytes"], total, "{out}");
    assert_eq!(out["last_key"], "ttl", "{out}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the stream holds plaintext: private");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".saltblob-"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "no temporary file left: {leftovers:?}"
    );

    let out = summary(&ok(cli(&dst).args(["import", "--json"]).arg(&file)));
    assert_eq!(out["imported"], 9, "{out}");
    assert_eq!(out["complete"], true, "{out}");
    assert_eq!(snapshot(&dst), before, "the target holds the same blobs");
    assert_eq!(snapshot(&src), before, "the source is unchanged");
    assert_eq!(versions(&src), versions_before, "export wrote nothing");
    let fsck = json(&ok(cli(&dst).args(["fsck", "--json"])));
    assert_eq!(fsck["damaged"], serde_json::json!([]), "{fsck}");
    let head = json(&ok(cli(&dst).args(["head", "sealed/chunked", "--json"])));
    assert_eq!(head["encryption"]["key"], "k1", "sealed again: {head}");

    // A rerun skips what is there: the plaintext blobs, whose digest the stream gives before their data; sealed
    // ones are imported again (their plaintext digest comes after the data), identical.
    let out = summary(&ok(cli(&dst).args(["import", "--json"]).arg(&file)));
    assert_eq!(
        (out["skipped"].as_u64(), out["imported"].as_u64()),
        (Some(7), Some(2)),
        "{out}"
    );
    assert_eq!(snapshot(&dst), before);

    // An existing file is replaced only with --force.
    fails(
        cli(&src).arg("export").arg(&file),
        2,
        "exists; pass --force",
    );
    ok(cli(&src).args(["export", "--force"]).arg(&file));

    // Through a pipe, standard output to standard input.
    let piped = keyed_url(&dir.path().join("piped"), &ring);
    let mut export = cli(&src)
        .args(["export", "-"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn export");
    let stdout = export.stdout.take().expect("stdout");
    ok(cli(&piped).args(["import", "-"]).stdin(Stdio::from(stdout)));
    child_succeeded(export);
    assert_eq!(snapshot(&piped), before);
}

/// A store with `n` plaintext blobs `b0`, `b1`, ... of 200 KB each (chunked), exported to `dir/all.sbx`.
fn small_store(dir: &Path, n: usize) -> (String, PathBuf) {
    let url = format!("rocksdb://{}", dir.join("src").display());
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let store = saltblob::open(&url, StoreConfig::default())
            .await
            .expect("open");
        for i in 0..n {
            store
                .put(
                    format!("b{i}"),
                    noise(200_000, i as u64),
                    &PutOptions::new(),
                )
                .await
                .expect("put");
        }
    });
    drop(runtime);
    let file = dir.join("all.sbx");
    ok(cli(&url).arg("export").arg(&file));
    (url, file)
}

fn keys(url: &str) -> Vec<String> {
    String::from_utf8(ok(cli(url).arg("ls")).stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_truncated_stream_imports_what_is_complete_and_names_where_to_resume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (src, file) = small_store(dir.path(), 5);
    let bytes = std::fs::read(&file).expect("read");
    // Cut inside the data of b2 (each record is a little over 200 KB).
    let cut = bytes.len() * 5 / 10;
    let part = dir.path().join("part.sbx");
    std::fs::write(&part, &bytes[..cut]).expect("write");
    let dst = format!("rocksdb://{}", dir.path().join("dst").display());
    let out = cli(&dst)
        .args(["import", "--json"])
        .arg(&part)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains(&format!("truncated: it ends at byte {cut}"))
            && stderr.contains("\"b2\"")
            && stderr.contains("the last complete key is b1")
            && stderr.contains("saltblob export --after 'b1'"),
        "{stderr}"
    );
    let s = summary(&out);
    assert_eq!(
        (s["imported"].as_u64(), s["complete"].as_bool()),
        (Some(2), Some(false)),
        "{s}"
    );
    assert_eq!(keys(&dst), ["b0", "b1"], "nothing of b2");

    // Export the rest after the last complete key, and import it: the target is whole.
    let rest = dir.path().join("rest.sbx");
    ok(cli(&src).args(["export", "--after", "b1"]).arg(&rest));
    let s = summary(&ok(cli(&dst).args(["import", "--json"]).arg(&rest)));
    assert_eq!(s["imported"], 3, "{s}");
    assert_eq!(snapshot(&dst), snapshot(&src));

    // Importing the whole stream again now skips every blob.
    let s = summary(&ok(cli(&dst).args(["import", "--json"]).arg(&file)));
    assert_eq!(
        (s["skipped"].as_u64(), s["imported"].as_u64()),
        (Some(5), Some(0)),
        "{s}"
    );
}

#[test]
fn an_interrupted_import_rerun_goes_on_where_it_stopped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (src, file) = small_store(dir.path(), 4);
    let bytes = std::fs::read(&file).expect("read");
    let part = dir.path().join("part.sbx");
    std::fs::write(&part, &bytes[..bytes.len() * 6 / 10]).expect("write");
    let dst = format!("rocksdb://{}", dir.path().join("dst").display());
    fails(cli(&dst).arg("import").arg(&part), 4, "truncated");
    let s = summary(&ok(cli(&dst).args(["import", "--json"]).arg(&file)));
    assert_eq!(
        (s["skipped"].as_u64(), s["imported"].as_u64()),
        (Some(2), Some(2)),
        "{s}"
    );
    assert_eq!(snapshot(&dst), snapshot(&src));
}

#[test]
fn a_corrupt_stream_is_refused_with_the_offset_and_key_and_the_damaged_blob_is_not_published() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, file) = small_store(dir.path(), 3);
    let bytes = std::fs::read(&file).expect("read");
    let dst = |name: &str| format!("rocksdb://{}", dir.path().join(name).display());

    // A byte of b1's data flipped: its frame's checksum fails.
    let mut bad = bytes.clone();
    let at = bytes.len() / 2;
    bad[at] ^= 0x20;
    let path = dir.path().join("bad.sbx");
    std::fs::write(&path, &bad).expect("write");
    let out = cli(&dst("one"))
        .arg("import")
        .arg(&path)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("corrupt at byte")
            && stderr.contains("\"b1\"")
            && stderr.contains("CRC32C"),
        "{stderr}"
    );
    assert!(stderr.contains("--after 'b0'"), "{stderr}");
    assert_eq!(keys(&dst("one")), ["b0"]);

    // The last blob's digest changed (the 32 bytes before the 29-byte trailer): its frames all check, the
    // digest does not, and the put that streamed them fails before it commits.
    let mut bad = bytes.clone();
    let digest_at = bytes.len() - 29 - 32;
    bad[digest_at + 5] ^= 1;
    std::fs::write(&path, &bad).expect("write");
    let out = cli(&dst("two"))
        .arg("import")
        .arg(&path)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains(&format!("corrupt at byte {digest_at}"))
            && stderr.contains("\"b2\"")
            && stderr.contains("BLAKE3"),
        "{stderr}"
    );
    assert_eq!(keys(&dst("two")), ["b0", "b1"]);
    fails(cli(&dst("two")).args(["head", "b2"]), 3, "not found");
    let fsck = json(&ok(cli(&dst("two")).args(["fsck", "--json"])));
    assert_eq!(fsck["damaged"], serde_json::json!([]), "{fsck}");

    // Not a stream, another version, an empty file: refused before the store is opened (none is created).
    let other = dir.path().join("other.bin");
    std::fs::write(&other, b"PK\x03\x04 not an export at all").expect("write");
    fails(
        cli(&dst("three")).arg("import").arg(&other),
        2,
        "not a saltblob export stream",
    );
    let mut newer = bytes.clone();
    newer[8] = 9;
    std::fs::write(&other, &newer).expect("write");
    fails(
        cli(&dst("three")).arg("import").arg(&other),
        2,
        "format version 9",
    );
    std::fs::write(&other, b"").expect("write");
    fails(
        cli(&dst("three")).arg("import").arg(&other),
        4,
        "the input is empty",
    );
    fails(
        cli(&dst("three"))
            .arg("import")
            .arg(dir.path().join("missing.sbx")),
        2,
        "cannot read",
    );
    assert!(!dir.path().join("three").exists(), "no store was created");
}

#[test]
fn after_and_prefix_export_part_of_a_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ring = make_keyring(dir.path());
    let src = keyed_url(&dir.path().join("src"), &ring);
    fill(&src, 100_000);
    let file = dir.path().join("part.sbx");
    let out = summary(&ok(cli(&src)
        .args(["export", "--json", "--prefix", "dir/", "--after", "dir/a"])
        .arg(&file)));
    assert_eq!(out["exported"], 2, "{out}");
    let dst = keyed_url(&dir.path().join("dst"), &ring);
    ok(cli(&dst).arg("import").arg(&file));
    assert_eq!(keys(&dst), ["dir/b", "dir/c"]);
    // A key that is not UTF-8 is named %-escaped.
    let out = summary(&ok(cli(&src)
        .args(["export", "--json", "--prefix", "k%FF"])
        .arg(dir.path().join("k.sbx"))));
    assert_eq!(
        (out["exported"].as_u64(), out["last_key"].as_str()),
        (Some(1), Some("k%FF%00%20x")),
        "{out}"
    );
}

#[test]
fn sealed_blobs_fail_by_name_where_the_target_cannot_seal_them_and_the_rest_imports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ring = make_keyring(dir.path());
    let src = keyed_url(&dir.path().join("src"), &ring);
    fill(&src, 100_000);
    let file = dir.path().join("all.sbx");
    ok(cli(&src).arg("export").arg(&file));
    let plain = format!("rocksdb://{}", dir.path().join("plain").display());
    let out = cli(&plain)
        .args(["import", "--json"])
        .arg(&file)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("sealed/chunked") && stderr.contains("sealed under local key \"k1\""),
        "{stderr}"
    );
    let s = summary(&out);
    assert_eq!(
        (s["imported"].as_u64(), s["failed"].as_u64()),
        (Some(7), Some(2)),
        "{s}"
    );
    fails(cli(&plain).args(["head", "sealed/inline"]), 3, "not found");

    // The source opened without its keyring cannot read its sealed blobs: they are named, the rest exported.
    let no_keys = format!("rocksdb://{}", dir.path().join("src").display());
    let out = cli(&no_keys)
        .args(["export", "--json"])
        .arg(dir.path().join("partial.sbx"))
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("sealed/inline") && stderr.contains("key unavailable"),
        "{stderr}"
    );
    let s = summary(&out);
    assert_eq!(
        (s["exported"].as_u64(), s["failed"].as_u64()),
        (Some(7), Some(2)),
        "{s}"
    );
    let out = summary(&ok(cli(&format!(
        "rocksdb://{}",
        dir.path().join("p2").display()
    ))
    .args(["import", "--json"])
    .arg(dir.path().join("partial.sbx"))));
    assert_eq!(
        (out["imported"].as_u64(), out["left_out"].as_u64()),
        (Some(7), Some(2)),
        "{out}"
    );
}

#[test]
fn blobs_sealed_with_a_customer_key_are_named_and_not_exported() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let src = format!("rocksdb://{}", dir.path().join("src").display());
    let key = dir.path().join("customer.key");
    std::fs::write(&key, [7u8; 32]).expect("write key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let data = dir.path().join("data");
    std::fs::write(&data, noise(3000, 1)).expect("write");
    ok(cli(&src).args(["put", "a"]).arg(&data));
    ok(cli(&src)
        .args(["put", "c", "--customer-key"])
        .arg(&key)
        .arg(&data));
    ok(cli(&src).args(["put", "d"]).arg(&data));
    let file = dir.path().join("all.sbx");
    let out = cli(&src)
        .args(["export", "--json"])
        .arg(&file)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("not exported: c: sealed with a customer key")
            && stderr.contains("1 blob(s) were not exported"),
        "{stderr}"
    );
    let s = summary(&out);
    assert_eq!(
        (s["exported"].as_u64(), s["skipped"].as_u64()),
        (Some(2), Some(1)),
        "{s}"
    );
    let dst = format!("rocksdb://{}", dir.path().join("dst").display());
    let out = ok(cli(&dst).args(["import", "--json"]).arg(&file));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("not in the stream: c: sealed with a customer key"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(summary(&out)["left_out"], 1);
    assert_eq!(keys(&dst), ["a", "d"]);
}

#[test]
fn an_empty_store_exports_an_empty_stream_and_a_missing_one_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = format!("rocksdb://{}", dir.path().join("src").display());
    ok(cli(&src).args(["put", "x", "-"]).stdin(Stdio::null()));
    ok(cli(&src).args(["rm", "x"]));
    let file = dir.path().join("empty.sbx");
    let s = summary(&ok(cli(&src).args(["export", "--json"]).arg(&file)));
    assert_eq!(
        (s["exported"].as_u64(), s["bytes"].as_u64()),
        (Some(0), Some(0)),
        "{s}"
    );
    let dst = format!("rocksdb://{}", dir.path().join("dst").display());
    let s = summary(&ok(cli(&dst).args(["import", "--json"]).arg(&file)));
    assert_eq!(
        (s["imported"].as_u64(), s["complete"].as_bool()),
        (Some(0), Some(true)),
        "{s}"
    );
    let missing = format!("rocksdb://{}", dir.path().join("missing").display());
    fails(
        cli(&missing).arg("export").arg(dir.path().join("m.sbx")),
        3,
        "there is no store",
    );
    assert!(!dir.path().join("m.sbx").exists());
    fails(cli(&src).arg("export").arg(dir.path()), 2, "is a directory");
}

/// A 300 MiB blob exported and imported stays within 160 MiB resident on each side: streamed, never whole in
/// memory.
#[test]
fn a_large_blob_is_exported_and_imported_within_bounded_memory() {
    const LIMIT_MIB: f64 = 160.0;
    let dir = tempfile::tempdir().expect("tempdir");
    let src = format!("rocksdb://{}", dir.path().join("src").display());
    let input = dir.path().join("in.bin");
    let digest = random_file(&input, 300 << 20, 42);
    ok(cli(&src).args(["put", "huge"]).arg(&input));
    std::fs::remove_file(&input).expect("rm");
    let file = dir.path().join("huge.sbx");
    let export = ok(cli(&src)
        .arg("export")
        .arg(&file)
        .env("SALTBLOB_REPORT_PEAK_RSS", "1"));
    let dst = format!("rocksdb://{}", dir.path().join("dst").display());
    let import = ok(cli(&dst)
        .arg("import")
        .arg(&file)
        .env("SALTBLOB_REPORT_PEAK_RSS", "1"));
    let (out_peak, in_peak) = (peak_rss_mib(&export.stderr), peak_rss_mib(&import.stderr));
    println!("300 MiB: export peak {out_peak:.1} MiB, import peak {in_peak:.1} MiB");
    assert!(out_peak < LIMIT_MIB, "export peaked at {out_peak:.1} MiB");
    assert!(in_peak < LIMIT_MIB, "import peaked at {in_peak:.1} MiB");
    let got = dir.path().join("out.bin");
    ok(cli(&dst).args(["get", "huge", "-o"]).arg(&got));
    assert_eq!(hash_file(&got), digest);
}
