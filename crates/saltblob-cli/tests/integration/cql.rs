//! The CLI on a real Cassandra (`TEST_CQL=127.0.0.1:9042`, started with `scripts/cassandra.sh start1`): a 200 MiB
//! file round-trips through put/get/ls/describe/rm, 30 and 100 MiB blobs (beyond the 16 MiB mutation limit)
//! store and read back, `import-salted` imports an article-schema table and rejects an incomplete blob, and a
//! store moves from RocksDB to Cassandra and back through `export` and `import`, identical.

use std::fs::File;
use std::process::{Command, Stdio};

use crate::common::*;

/// The `host:port` in `TEST_CQL`. These tests are ignored unless asked for (`--include-ignored`), so that a run
/// without a cluster reports them as skipped; asked for without `TEST_CQL`, they fail.
fn cluster() -> String {
    std::env::var("TEST_CQL")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .expect("this test needs a cluster: set TEST_CQL=host:port (e.g. 127.0.0.1:9042)")
}

fn cql(url: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_saltblob"));
    c.arg("--store").arg(url).arg("--quiet");
    c.env_remove("SALTBLOB_STORE");
    c
}

#[test]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
fn the_cli_round_trips_large_blobs_on_cassandra() {
    let host = cluster();
    let url = format!("cql://{host}/cli_{:08x}?rf=1", rand::random::<u32>());
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("in.bin");
    let digest = random_file(&input, 200 << 20, 5);
    ok(cql(&url).args(["put", "big"]).arg(&input));
    let out = dir.path().join("out.bin");
    ok(cql(&url).args(["get", "big", "-o"]).arg(&out));
    assert_eq!(hash_file(&out), digest, "200 MiB through a file");
    ok(cql(&url)
        .args(["put", "piped", "-"])
        .stdin(Stdio::from(File::open(&input).expect("open"))));
    let piped = dir.path().join("piped.bin");
    ok(cql(&url)
        .args(["get", "piped"])
        .stdout(Stdio::from(File::create(&piped).expect("create"))));
    assert_eq!(hash_file(&piped), digest, "200 MiB through stdin/stdout");
    let d = json(&ok(cql(&url).args(["describe", "big", "--json"])));
    assert_eq!(
        (d["layout"].as_str(), d["salt_count"].as_u64()),
        (Some("salted"), Some(100))
    );
    let range = ok(cql(&url).args(["get", "big", "--range", "65530-65545"]));
    assert_eq!(range.stdout, file_range(&input, 65530..65546));
    for mib in [30u64, 100] {
        let path = dir.path().join(format!("{mib}.bin"));
        let digest = random_file(&path, mib << 20, mib);
        ok(cql(&url).args(["put", &format!("m{mib}")]).arg(&path));
        let out = ok(cql(&url).args(["get", &format!("m{mib}")]));
        assert_eq!(blake3::hash(&out.stdout), digest, "{mib} MiB read back");
    }
    let listing = String::from_utf8_lossy(&ok(cql(&url).args(["ls"])).stdout).into_owned();
    assert_eq!(listing, "big\nm100\nm30\npiped\n");
    ok(cql(&url).args(["rm", "big"]));
    let out = cql(&url).args(["get", "big"]).output().expect("run");
    assert_eq!(out.status.code(), Some(3), "get after rm: not found");
}

#[test]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
fn import_salted_copies_complete_blobs_and_names_missing_chunks() {
    let host = cluster();
    let ks = format!("article_{:08x}", rand::random::<u32>());
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let payload = random_bytes(300_000, 9);
    runtime.block_on(async {
        let config = saltblob::cql::CqlConfig::from_url(&format!("cql://{host}/{ks}")).expect("url");
        let session = saltblob::cql::CqlStore::open_session(&config).await.expect("session");
        for ddl in [
            format!("CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"),
            format!(
                "CREATE TABLE {ks}.blobs (key text, salt int, chunk_id int, chunk blob, total_chunks int, \
                 salt_cardinality int, PRIMARY KEY ((key, salt), chunk_id))"
            ),
        ] {
            session.query_unpaged(ddl, ()).await.expect("ddl");
            session.await_schema_agreement().await.expect("agreement");
        }
        let insert = format!(
            "INSERT INTO {ks}.blobs (key, salt, chunk_id, chunk, total_chunks, salt_cardinality) VALUES (?, ?, ?, ?, ?, ?)"
        );
        // "whole" is complete; "partial" lacks chunk ids 2 and 4. Both: 5 chunks of 65536 bytes over 3 salts.
        for (key, skip) in [("whole", vec![]), ("partial", vec![2, 4])] {
            for (i, piece) in payload.chunks(65536).enumerate() {
                let id = i32::try_from(i).expect("id");
                if skip.contains(&id) {
                    continue;
                }
                let layout = (id == 0).then_some(5i32);
                let salts = (id == 0).then_some(3i32);
                session
                    .query_unpaged(insert.clone(), (key, id % 3, id, piece, layout, salts))
                    .await
                    .expect("insert");
            }
        }
    });
    let url = format!("cql://{host}/{ks}?rf=1");
    let out = cql(&url)
        .args(["import-salted", &format!("{ks}.blobs")])
        .output()
        .expect("run import");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(4),
        "an incomplete blob makes the import fail: {stdout}{stderr}"
    );
    assert!(stdout.contains("imported whole"), "{stdout}");
    assert!(
        stdout.contains("REJECTED partial: missing chunk ids 2, 4 of 0..5"),
        "{stdout}"
    );
    assert!(
        stderr.contains("imported 1 blob(s)") && stderr.contains("rejected 1"),
        "{stderr}"
    );
    let got = ok(cql(&url).args(["get", "whole"]));
    assert!(got.stdout == payload, "imported blob is byte-identical");
    assert_eq!(
        cql(&url)
            .args(["head", "partial"])
            .output()
            .expect("run")
            .status
            .code(),
        Some(3)
    );
}

fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; n];
    Noise::new(seed).fill(&mut v);
    v
}

/// `census` counts a cluster store; `plan` without a shape reads the live ring, and refuses one node (no pair to
/// lose) saying how to model a cluster instead; with a shape it runs on the cluster's census.
#[test]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
fn census_and_plan_on_cassandra() {
    let host = cluster();
    let url = format!("cql://{host}/plan_{:08x}?rf=1", rand::random::<u32>());
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("in.bin");
    for (key, size) in [("a", 100), ("b", 200 << 10), ("c", 12 << 20)] {
        random_file(&input, size, size);
        ok(cql(&url).args(["put", key]).arg(&input));
    }
    let census = json(&ok(cql(&url).args(["census", "--json"])));
    assert_eq!(census["all"]["count"], 3, "{census}");
    assert_eq!(
        census["partitions"].as_array().map(Vec::len),
        Some(3),
        "{census}"
    );
    let out = cql(&url).args(["plan"]).output().expect("run plan");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the ring has 1 node(s)") && stderr.contains("--racks"),
        "{stderr}"
    );
    let plan = json(&ok(cql(&url).args([
        "plan",
        "--json",
        "--racks",
        "3",
        "--nodes-per-rack",
        "3",
    ])));
    assert_eq!(plan["census"]["all"]["count"], 3, "{plan}");
}

/// `saltblob upgrade` on a keyspace the landed build of schema format 1 wrote (the CQL crate's fixture): `ls` is
/// refused first with the way out named, the upgrade builds the listing index
/// (format 1 -> 3, every manifest read), `ls` then lists every key, a second upgrade finds it current, and
/// `--reconcile` goes through every manifest again with nothing to remove.
#[test]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
fn upgrade_builds_the_listing_index_of_a_format_1_keyspace() {
    let host = cluster();
    let ks = format!("cli_v1_{:08x}", rand::random::<u32>());
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let config = saltblob::cql::CqlConfig::from_url(&format!("cql://{host}/{ks}")).expect("url");
        let session = saltblob::cql::CqlStore::open_session(&config).await.expect("session");
        session
            .query_unpaged(
                format!(
                    "CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
                ),
                (),
            )
            .await
            .expect("keyspace");
        let fixture = include_str!("../../../saltblob-cql/tests/fixtures/format-1.cql");
        for statement in fixture.lines().filter(|l| !l.starts_with("--") && !l.trim().is_empty()) {
            session
                .query_unpaged(statement.replace("{ks}", &ks), ())
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
    });
    let url = format!("cql://{host}/{ks}?listing_max_rows=8");
    let refused = cql(&url).args(["ls"]).output().expect("run");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "ls of a format-1 keyspace");
    assert!(
        stderr.contains("saltblob --store <URL> upgrade"),
        "{stderr}"
    );

    let up = json(&ok(cql(&url).args(["upgrade", "--json"])));
    assert_eq!(
        (up["from_format"].as_u64(), up["to_format"].as_u64()),
        (Some(1), Some(3)),
        "{up}"
    );
    assert_eq!(up["complete"].as_bool(), Some(true), "{up}");
    assert!(up["manifests"].as_u64() >= Some(26), "{up}");
    assert!(up["ranges"].as_u64() > Some(1), "split at 8 rows: {up}");

    let listing = String::from_utf8_lossy(&ok(cql(&url).args(["ls"])).stdout).into_owned();
    let keys: Vec<&str> = listing.lines().collect();
    assert_eq!(keys.len(), 26, "{listing}");
    assert!(keys.contains(&"chunked/one.bin"), "{listing}");
    let one = ok(cql(&url).args(["get", "chunked/one.bin"])).stdout;
    let want: Vec<u8> = (0..40_000u32).map(|i| ((7 * i + 3) % 251) as u8).collect();
    assert_eq!(one, want, "a chunked blob of format 1 reads back");

    let again = json(&ok(cql(&url).args(["upgrade", "--json", "--reconcile"])));
    assert_eq!(
        (again["from_format"].as_u64(), again["to_format"].as_u64()),
        (Some(3), Some(3)),
        "{again}"
    );
    assert_eq!(again["stale_removed"].as_u64(), Some(0), "{again}");
    assert!(
        again["manifests"].as_u64() >= Some(26),
        "reconcile reads every manifest: {again}"
    );
}

/// A RocksDB store with a blob of each kind (empty, a key that is not UTF-8 with metadata, a TTL, 30 MiB: beyond
/// the 16 MiB mutation limit, sealed ones with and without sealed metadata) moves to Cassandra through a file
/// (`export`, then `import` into a fresh keyspace) and back to a new RocksDB store through a pipe: each side
/// holds the same blobs (bytes, content type, metadata, sealed metadata, expiry, encryption key name), and
/// `fsck` finds the keyspace sound; importing the file again into the keyspace skips the plaintext blobs.
#[test]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
fn a_store_moves_from_rocksdb_to_cassandra_and_back_identical() {
    use crate::export::{cli, fill, keyed_url, make_keyring, snapshot};

    let host = cluster();
    let dir = tempfile::tempdir().expect("tempdir");
    let ring = make_keyring(dir.path());
    let src = keyed_url(&dir.path().join("src"), &ring);
    fill(&src, 30 << 20);
    let before = snapshot(&src);
    assert_eq!(before.len(), 9);

    let file = dir.path().join("all.sbx");
    ok(cli(&src).arg("export").arg(&file));
    let url = format!(
        "cql://{host}/export_{:08x}?rf=1&encryption=local&keyring={}",
        rand::random::<u32>(),
        ring.display()
    );
    let s = json(&ok(cli(&url).args(["import", "--json"]).arg(&file)));
    assert_eq!(
        (s["imported"].as_u64(), s["failed"].as_u64()),
        (Some(9), Some(0)),
        "{s}"
    );
    assert_eq!(snapshot(&url), before, "RocksDB -> Cassandra");
    let fsck = json(&ok(cli(&url).args(["fsck", "--json"])));
    assert_eq!(fsck["damaged"], serde_json::json!([]), "{fsck}");
    let s = json(&ok(cli(&url).args(["import", "--json"]).arg(&file)));
    assert_eq!(
        (s["skipped"].as_u64(), s["imported"].as_u64()),
        (Some(7), Some(2)),
        "{s}"
    );

    let back = keyed_url(&dir.path().join("back"), &ring);
    let mut export = cli(&url)
        .args(["export", "-"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn export");
    let stdout = export.stdout.take().expect("stdout");
    let s = json(&ok(cli(&back)
        .args(["import", "--json", "-"])
        .stdin(Stdio::from(stdout))));
    child_succeeded(export);
    assert_eq!(s["imported"], 9, "{s}");
    assert_eq!(snapshot(&back), before, "Cassandra -> RocksDB");
}
