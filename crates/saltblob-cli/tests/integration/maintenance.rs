//! `saltblob gc` and `saltblob fsck` from the command line: reports, dry runs, the grace period.

use crate::common::*;

#[test]
fn gc_reports_dry_runs_and_honours_the_grace_period() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let file = dir.path().join("blob.bin");
    random_file(&file, 3 << 20, 7);
    for _ in 0..3 {
        ok(saltblob(&store).args(["put", "k"]).arg(&file));
    }
    let gc = |args: &[&str]| json(&ok(saltblob(&store).args(["gc", "--json"]).args(args)));

    // Inside the default grace period (5 minutes) nothing goes.
    let r = gc(&[]);
    assert_eq!(r["reclaimed_versions"], 0, "{r}");
    assert!(r["next_due_micros"].is_u64(), "{r}");
    let r = gc(&["--grace", "0s", "--dry-run"]);
    assert_eq!(
        (&r["reclaimed_versions"], &r["dry_run"]),
        (&2.into(), &true.into()),
        "{r}"
    );
    let fsck = json(&ok(saltblob(&store).args(["fsck", "--json"])));
    assert_eq!(
        fsck["awaiting_reclaim"], 2,
        "a dry run deletes nothing: {fsck}"
    );

    let r = gc(&["--grace", "0s"]);
    assert_eq!(r["reclaimed_versions"], 2, "{r}");
    assert_eq!(
        r["reclaimed_bytes"].as_u64(),
        Some(2 * ((3 << 20) + 48 * 12)),
        "{r}"
    );
    let fsck = json(&ok(saltblob(&store).args(["fsck", "--json"])));
    assert_eq!(
        (&fsck["blobs"], &fsck["awaiting_reclaim"], &fsck["chunks"]),
        (&1.into(), &0.into(), &48.into()),
        "{fsck}"
    );
    let out = ok(saltblob(&store).args(["get", "k"]));
    assert_eq!(blake3::hash(&out.stdout), hash_file(&file));

    let text = String::from_utf8_lossy(&ok(saltblob(&store).arg("fsck")).stdout).into_owned();
    assert!(
        text.contains("1 blob(s) checked") && text.contains("damaged 0"),
        "{text}"
    );
}

#[test]
fn gc_and_fsck_reject_bad_durations_and_create_no_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("never");
    let out = saltblob(&store)
        .args(["gc", "--grace", "soon"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    for command in ["fsck", "gc"] {
        let out = ok(saltblob(&store).arg(command));
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("no store at"), "{command}: {said}");
    }
    assert!(
        !store.exists(),
        "read-only maintenance commands create no store"
    );
}

/// `ls` names a key whose manifest is damaged on stderr and goes on to the keys after it; it then fails with
/// the exit code of damage (4). `rm` removes the damaged key, and `ls` is clean again.
#[test]
fn ls_reports_a_damaged_manifest_and_lists_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let file = dir.path().join("v.bin");
    random_file(&file, 100, 1);
    for key in ["k1", "k2", "k3"] {
        ok(saltblob(&store).args(["put", key]).arg(&file));
    }
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let backend = saltblob::open_backend(&format!("rocksdb://{}", store.display()))
            .await
            .expect("open the store");
        backend
            .put_record(
                saltblob::Namespace::Manifest,
                b"k2",
                bytes::Bytes::from_static(b"\x01damaged"),
                &saltblob::Precondition::None,
            )
            .await
            .expect("damage k2's manifest");
    });
    drop(runtime);

    for long in [false, true] {
        let mut ls = saltblob(&store);
        ls.arg("ls");
        if long {
            ls.arg("-l");
        }
        let out = ls.output().expect("run ls");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(4), "{stderr}");
        let keys: Vec<&str> = stdout
            .lines()
            .map(|l| l.rsplit(' ').next().unwrap_or_default())
            .collect();
        assert_eq!(keys, ["k1", "k3"], "{stdout}");
        assert!(
            stderr.contains("damaged: corrupt manifest of key \"k2\"")
                && stderr.contains("1 listed key(s) have a damaged manifest"),
            "{stderr}"
        );
    }
    ok(saltblob(&store).args(["rm", "k2"]));
    let out = ok(saltblob(&store).arg("ls"));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "k1\nk3\n");
}

#[test]
fn a_put_with_a_ttl_shows_its_expiry_then_reads_as_not_found_and_gc_deletes_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let file = dir.path().join("blob.bin");
    random_file(&file, 100_000, 3);
    ok(saltblob(&store)
        .args(["put", "short", "--ttl", "1s"])
        .arg(&file));
    ok(saltblob(&store)
        .args(["put", "long", "--ttl", "30d"])
        .arg(&file));
    let head = json(&ok(saltblob(&store).args(["head", "short", "--json"])));
    assert!(head["expires"].is_string(), "{head}");
    let text =
        String::from_utf8(ok(saltblob(&store).args(["head", "long"])).stdout).expect("utf-8");
    assert!(text.contains("expires:"), "{text}");
    for bad in ["0s", "600000000y"] {
        let out = saltblob(&store)
            .args(["put", "bad", "--ttl", bad])
            .arg(&file)
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--ttl {bad}: {stderr}");
        assert!(stderr.contains("ttl"), "--ttl {bad}: {stderr}");
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let out = saltblob(&store)
        .args(["get", "short", "-o"])
        .arg(dir.path().join("out"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(3), "expired: not found");
    let gc = json(&ok(saltblob(&store).args(["gc", "--json", "--grace", "0s"])));
    assert_eq!(gc["expired"], 1, "{gc}");
    assert_eq!(gc["reclaimed_versions"], 1, "{gc}");
    let listed = String::from_utf8(ok(saltblob(&store).args(["ls"])).stdout).expect("utf-8");
    assert_eq!(listed, "long\n");
}

/// The read-only commands (`get`, `ls`, `head`, `describe`) write nothing: on a store whose reclaim queue has a
/// version due (replaced by a store with no grace period), each leaves the queue as it was; `gc` then reclaims
/// it.
#[test]
fn read_only_commands_reclaim_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let config = saltblob::StoreConfig::default().with_grace(std::time::Duration::ZERO);
        let s = saltblob::open(&store_url(&store), config)
            .await
            .expect("open");
        for fill in [1u8, 2] {
            let value = bytes::Bytes::from(vec![fill; 200 << 10]);
            s.put("k", value, &saltblob::PutOptions::new())
                .await
                .expect("put");
        }
    });
    drop(runtime);
    let awaiting =
        || json(&ok(saltblob(&store).args(["fsck", "--json"])))["awaiting_reclaim"].clone();
    assert_eq!(awaiting(), 1, "the replaced version is queued, due now");
    for args in [
        &["get", "k", "-o"][..],
        &["ls"],
        &["head", "k"],
        &["describe", "k"],
    ] {
        let mut cmd = saltblob(&store);
        cmd.args(args);
        if args[0] == "get" {
            cmd.arg(dir.path().join("out"));
        }
        ok(&mut cmd);
        assert_eq!(awaiting(), 1, "`saltblob {}` deleted nothing", args[0]);
    }
    let gc = json(&ok(saltblob(&store).args(["gc", "--json"])));
    assert_eq!(gc["reclaimed_versions"], 1, "{gc}");
}
