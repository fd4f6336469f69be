//! `saltblob census` and `saltblob plan` from the command line, on the embedded store: the census's counts and
//! files, the plan on a modelled cluster from the store or from a census file, and bad input.

use crate::common::*;

/// 20 small blobs (inline), 5 of 100 KiB (one partition) and one of 20 MiB (salted).
fn store_with_a_long_tail(dir: &std::path::Path) -> std::path::PathBuf {
    let store = dir.join("store");
    let file = dir.join("blob.bin");
    for (i, size) in (0..20)
        .map(|i| (i, 100 + i * 10))
        .chain((20..25).map(|i| (i, 100 << 10)))
    {
        random_file(&file, size, i);
        ok(saltblob(&store).args(["put", &format!("k/{i}")]).arg(&file));
    }
    random_file(&file, 20 << 20, 99);
    ok(saltblob(&store).args(["put", "k/large"]).arg(&file));
    store
}

/// The object of the JSON list `list` whose `field` is `name` (null when none is).
fn row(list: &serde_json::Value, field: &str, name: &str) -> serde_json::Value {
    list.as_array()
        .and_then(|a| a.iter().find(|x| x[field] == name))
        .cloned()
        .unwrap_or_default()
}

#[test]
fn census_counts_by_layout_and_writes_json_and_svg() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store_with_a_long_tail(dir.path());
    let svg = dir.path().join("sizes.svg");
    let c = json(&ok(saltblob(&store)
        .args(["census", "--json", "--svg"])
        .arg(&svg)));
    let class = |name: &str| row(&c["classes"], "class", name);
    assert_eq!(c["all"]["count"], 26, "{c}");
    assert_eq!(class("inline")["count"], 20, "{c}");
    assert_eq!(class("single-partition")["count"], 5, "{c}");
    assert_eq!(class("single-partition")["bytes"], 5 * (100 << 10), "{c}");
    assert_eq!(class("salted")["count"], 1, "{c}");
    assert_eq!(class("salted")["p50"], 20 << 20, "{c}");
    // P50 of all 26: the 13th smallest is 220 bytes, within its bucket (to 12.5% above).
    let p50 = c["all"]["p50"].as_u64().expect("p50");
    assert!((220..=248).contains(&p50), "{c}");
    let svg = std::fs::read_to_string(&svg).expect("svg written");
    assert!(svg.starts_with("<svg") && svg.contains("salted"), "{svg}");

    let text =
        String::from_utf8(ok(saltblob(&store).args(["census", "k/2"])).stdout).expect("utf-8");
    assert!(
        text.contains("census of keys under \"k/2\": 6 blob(s)"),
        "{text}"
    );
    let sample = json(&ok(
        saltblob(&store).args(["census", "--json", "--sample", "3"])
    ));
    assert_eq!(
        (&sample["all"]["count"], &sample["sampled"]),
        (&3.into(), &true.into()),
        "{sample}"
    );
}

#[test]
fn plan_models_a_cluster_from_the_store_or_from_a_census_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store_with_a_long_tail(dir.path());
    let census = dir.path().join("census.json");
    std::fs::write(
        &census,
        ok(saltblob(&store).args(["census", "--json"])).stdout,
    )
    .expect("write census");
    let plan = |args: &[&str]| {
        json(&ok(saltblob(&store)
            .args(["plan", "--json", "--racks", "3", "--nodes-per-rack", "4"])
            .args(args)))
    };
    let from_store = plan(&["--target-exposure", "50%"]);
    let by_name = |name: &str| row(&from_store["policies"], "name", name);
    let current = by_name("current");
    // 20 inline (1 partition: 1/16 at risk), 5 one-partition blobs (manifest + chunks: 1 - 2(3/4)^2 + (9/16)^2),
    // one salted over 100 salts (all but certainly at risk).
    let expected = (20.0 / 16.0 + 5.0 * (1.0 - 2.0 * 0.5625 + 0.31640625) + 1.0) / 26.0;
    let keys = current["keys_at_risk"].as_f64().expect("keys_at_risk");
    assert!(
        (keys - expected).abs() < 1e-6,
        "{keys} vs {expected}: {current}"
    );
    assert!(
        current["bytes_at_risk"].as_f64().expect("bytes") > 0.9,
        "{current}"
    );
    // Unsalted, the large blob is one partition too: less at risk.
    assert!(
        by_name("unsalted")["keys_at_risk"].as_f64() < Some(keys),
        "{from_store}"
    );
    // On a cluster blobs above the threshold get 1 MiB chunks: a 100 KiB blob is one chunk, one partition even
    // when every chunked blob may fan out; only the 20 MiB one is salted.
    assert_eq!(
        by_name("salt-all")["salted_keys"].as_f64(),
        Some(1.0 / 26.0),
        "{from_store}"
    );
    assert_eq!(
        by_name("salt-all")["fanout_threshold"],
        16 << 10,
        "{from_store}"
    );
    assert_eq!(from_store["recommendation"]["met"], true, "{from_store}");
    assert_eq!(from_store["model"]["placement"], "hashed", "{from_store}");

    // The same from the census file, with no store at all; --policy adds a row.
    let gone = dir.path().join("no-store");
    let from_file = json(&ok(saltblob(&gone)
        .args([
            "plan",
            "--json",
            "--racks",
            "3",
            "--nodes-per-rack",
            "4",
            "--census",
        ])
        .arg(&census)
        .args(["--policy", "name=narrow,max_salt=2"])));
    assert!(!gone.exists(), "the plan opened no store");
    let narrow = row(&from_file["policies"], "name", "narrow");
    assert_eq!(narrow["max_salt"], 2, "{narrow}");
    assert_eq!(
        from_file["policies"][0]["keys_at_risk"], current["keys_at_risk"],
        "{from_file}"
    );

    let text = String::from_utf8(
        ok(saltblob(&store).args([
            "plan",
            "--racks",
            "3",
            "--nodes-per-rack",
            "2",
            "--placement",
            "spread",
        ]))
        .stdout,
    )
    .expect("utf-8");
    assert!(
        text.contains("model: 3 racks x 2 nodes, rf 3, placement spread"),
        "{text}"
    );
    assert!(text.lines().any(|l| l.starts_with("current")), "{text}");
}

#[test]
fn census_and_plan_refuse_bad_input_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("empty");
    ok(saltblob(&empty).args(["put", "other", "/dev/null"]));
    fails(
        saltblob(&empty).args(["census", "k/"]),
        3,
        "no key starts with \"k/\"",
    );
    fails(
        saltblob(&dir.path().join("none")).args(["census"]),
        3,
        "no blob to count",
    );
    fails(
        saltblob(&empty).args(["census", "--svg", "x.png"]),
        2,
        "--svg x.png",
    );
    fails(
        saltblob(&empty).args(["census", "--sample", "0"]),
        2,
        "--sample 0",
    );
    let plan = |args: &[&str]| {
        let mut c = saltblob(&empty);
        c.arg("plan").args(args);
        c
    };
    fails(
        &mut plan(&["--racks", "2", "--nodes-per-rack", "3", "--rf", "3"]),
        2,
        "rf",
    );
    fails(
        &mut plan(&["--racks", "1", "--nodes-per-rack", "3", "--rf", "1"]),
        2,
        "racks",
    );
    fails(
        &mut plan(&["--racks", "3", "--nodes-per-rack", "0"]),
        2,
        "nodes-per-rack",
    );
    fails(
        &mut plan(&[
            "--racks",
            "4",
            "--nodes-per-rack",
            "2",
            "--placement",
            "spread",
        ]),
        2,
        "placement",
    );
    fails(&mut plan(&["--racks", "3"]), 2, "--nodes-per-rack");
    fails(&mut plan(&[]), 2, "cql:// store");
    fails(
        &mut plan(&[
            "--racks",
            "3",
            "--nodes-per-rack",
            "2",
            "--policy",
            "max_salt=0",
        ]),
        2,
        "max salt",
    );
    fails(
        &mut plan(&[
            "--racks",
            "3",
            "--nodes-per-rack",
            "2",
            "--target-exposure",
            "200%",
        ]),
        2,
        "--target-exposure",
    );
    let not_census = dir.path().join("x.json");
    std::fs::write(&not_census, "{\"format\": \"other\"}").expect("write");
    let mut c = plan(&["--racks", "3", "--nodes-per-rack", "2", "--census"]);
    fails(c.arg(&not_census), 2, "not a census");
    let mut c = plan(&["--racks", "3", "--nodes-per-rack", "2", "--bench"]);
    fails(c.arg(&not_census), 2, "saltblob bench --json");
}

#[test]
fn relayout_applies_a_new_policy_once_and_refuses_one_the_backend_cannot_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store_with_a_long_tail(dir.path());
    let salts = |key: &str| {
        let d = json(&ok(saltblob(&store).args(["describe", key, "--json"])));
        d["bytes_per_salt"].as_array().map_or(0, Vec::len)
    };
    assert_eq!(
        salts("k/20"),
        1,
        "100 KiB: one partition under the default policy"
    );
    let run = |args: &[&str]| {
        json(&ok(saltblob(&store)
            .args(["relayout", "--json"])
            .args(args)))
    };

    // Each moved key with its layout before and after: 100 KiB in two 64 KiB chunks, from one salt to two.
    let chunks = |layout: &str, salts: u32| {
        serde_json::json!({
            "layout": layout, "chunk_size": 64 << 10, "chunk_count": 2, "salt_count": salts
        })
    };
    let moves_are_the_100_kib_blobs = |r: &serde_json::Value| {
        let moves = r["moves"].as_array().expect("moves");
        let keys: Vec<_> = moves.iter().map(|m| m["key"].clone()).collect();
        assert_eq!(keys, ["k/20", "k/21", "k/22", "k/23", "k/24"], "{r}");
        for m in moves {
            assert_eq!(m["from"], chunks("single-partition", 1), "{m}");
            assert_eq!(m["to"], chunks("salted", 2), "{m}");
            assert_eq!(m["bytes"], 100 << 10, "{m}");
        }
    };
    let dry = run(&["--policy", "fanout=64KiB", "--dry-run"]);
    assert_eq!(
        (&dry["moved"], &dry["scanned"]),
        (&5.into(), &26.into()),
        "{dry}"
    );
    moves_are_the_100_kib_blobs(&dry);
    assert_eq!(salts("k/20"), 1, "a dry run writes nothing");
    let text = String::from_utf8(
        ok(saltblob(&store).args(["relayout", "--dry-run", "--policy", "fanout=64KiB"])).stdout,
    )
    .expect("utf-8");
    assert!(
        text.contains(
            "\n  k/20: single-partition (2 x 64.0 KiB chunks, 1 salt) -> salted (2 x 64.0 KiB chunks, 2 salts), 100.0 KiB\n"
        ),
        "{text}"
    );
    // The text lists 20 moves at most, unless --verbose: here the 20 inline blobs move too.
    let listed = |args: &[&str]| {
        let out = ok(saltblob(&store)
            .args([
                "relayout",
                "--dry-run",
                "--policy",
                "fanout=64KiB,inline=64",
            ])
            .args(args))
        .stdout;
        let text = String::from_utf8(out).expect("utf-8");
        let n = text.lines().filter(|l| l.starts_with("  k/")).count();
        (n, text)
    };
    let (n, text) = listed(&[]);
    assert_eq!(n, 20, "{text}");
    assert!(text.contains("... and 5 more (--verbose"), "{text}");
    let (n, text) = listed(&["--verbose"]);
    assert_eq!(n, 25, "{text}");
    assert!(
        text.contains("  k/0: inline -> single-partition (1 x 64.0 KiB chunks, 1 salt), 100 B"),
        "{text}"
    );

    let file = dir.path().join("k20.bin");
    ok(saltblob(&store).args(["get", "k/20", "-o"]).arg(&file));
    let r = run(&["--policy", "fanout=64KiB"]);
    assert_eq!(
        (&r["moved"], &r["moved_bytes"]),
        (&5.into(), &(5 * (100 << 10)).into()),
        "{r}"
    );
    assert_eq!(r["lost_to_writers"], 0, "{r}");
    moves_are_the_100_kib_blobs(&r);
    assert_eq!(
        salts("k/20"),
        2,
        "100 KiB in 64 KiB chunks, now over 2 salts"
    );
    let again = dir.path().join("again.bin");
    ok(saltblob(&store).args(["get", "k/20", "-o"]).arg(&again));
    assert_eq!(
        hash_file(&again),
        hash_file(&file),
        "the bytes are unchanged"
    );
    let again = run(&["--policy", "fanout=64KiB"]);
    assert_eq!(
        (&again["moved"], &again["fits"], &again["moves"]),
        (&0.into(), &26.into(), &serde_json::json!([])),
        "a second run moves nothing: {again}"
    );
    // Resumed after a key: only what follows it is scanned.
    let resumed = run(&["--policy", "fanout=64KiB", "--after", "k/3"]);
    assert_eq!(resumed["scanned"], 7, "k/4 to k/9 and k/large: {resumed}");
    assert_eq!(resumed["last_key"], "k/large", "{resumed}");
    // Resumed from where a pass stood (here after k/3, as a run stopped there saves it): the file is read, only
    // what follows is scanned, and the file is removed once the pass is complete.
    let resume = dir.path().join("relayout.pass");
    let stood = "saltblob-pass 1\nprefix \nin_flight 1\nrange ordered after k/3\n";
    std::fs::write(&resume, stood).expect("progress file");
    let path = resume.to_str().expect("a UTF-8 path");
    let resumed = run(&["--policy", "fanout=64KiB", "--resume", path]);
    assert_eq!(resumed["scanned"], 7, "k/4 to k/9 and k/large: {resumed}");
    assert!(!resume.exists(), "removed once the pass is complete");
    let whole = run(&["--policy", "fanout=64KiB", "--resume", path]);
    assert_eq!(whole["scanned"], 26, "no file: the whole store: {whole}");
    assert!(!resume.exists());
    std::fs::write(&resume, stood.replace("prefix ", "prefix k/1")).expect("progress file");
    fails(
        saltblob(&store).args(["relayout", "--resume", path]),
        2,
        "a pass under prefix \"k/1\", not \"\"",
    );
    fails(
        saltblob(&store).args(["relayout", "--resume", path, "--after", "k/3"]),
        2,
        "cannot be used with",
    );

    fails(
        saltblob(&store).args(["relayout", "--policy", "chunk_size=128MiB"]),
        2,
        "--policy chunk_size=128MiB on the rocksdb backend: invalid chunk size",
    );
    fails(
        saltblob(&store).args(["relayout", "--policy", "max_salt=0"]),
        2,
        "max salt",
    );
}

/// A policy is checked against the store's own backend: 16 MiB chunks, beyond a cluster's 8 MiB, are stored on
/// the embedded store (64 MiB), and 100 MiB ones refused naming the option. The plan, which models a cluster,
/// refuses 16 MiB naming the cluster's limit.
#[test]
fn relayout_checks_a_policy_against_the_stores_backend() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let file = dir.path().join("blob.bin");
    let digest = random_file(&file, 100 << 10, 7);
    ok(saltblob(&store).args(["put", "k"]).arg(&file));

    let r = json(&ok(saltblob(&store).args([
        "relayout",
        "--json",
        "--policy",
        "chunk_size=16MiB",
    ])));
    assert_eq!(r["moved"], 1, "{r}");
    assert_eq!(r["moves"][0]["to"]["chunk_size"], 16 << 20, "{r}");
    let d = json(&ok(saltblob(&store).args(["describe", "k", "--json"])));
    assert_eq!(
        (&d["chunk_size"], &d["chunk_count"]),
        (&(16 << 20).into(), &1.into()),
        "{d}"
    );
    let back = dir.path().join("back.bin");
    ok(saltblob(&store).args(["get", "k", "-o"]).arg(&back));
    assert_eq!(hash_file(&back), digest, "the bytes are unchanged");

    fails(
        saltblob(&store).args(["relayout", "--policy", "chunk_size=100MiB"]),
        2,
        "--policy chunk_size=100MiB on the rocksdb backend: invalid chunk size",
    );
    fails(
        saltblob(&store).args([
            "plan",
            "--racks",
            "3",
            "--nodes-per-rack",
            "2",
            "--policy",
            "chunk_size=16MiB",
        ]),
        2,
        "checked against the cql backend's limits",
    );
}
