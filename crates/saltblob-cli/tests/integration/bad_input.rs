//! Every bad input gets a clear one-line error and a non-zero exit code, and changes nothing in the store.

use std::process::Command;

use crate::common::*;

/// Runs `cmd`, expects exit `code` and a single `saltblob: error:` line containing `needle`.
fn fails(cmd: &mut Command, code: i32, needle: &str) {
    let out = cmd.output().expect("run saltblob");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{cmd:?}: exit status; stderr: {stderr}"
    );
    assert_eq!(
        stderr.lines().count(),
        1,
        "{cmd:?}: one line of error, got: {stderr}"
    );
    assert!(stderr.starts_with("saltblob: error: "), "{cmd:?}: {stderr}");
    assert!(
        stderr.contains(needle),
        "{cmd:?}: expected \"{needle}\" in: {stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "{cmd:?}: nothing on stdout");
}

/// A listing of the store's keys with their versions, to show that nothing changed.
fn snapshot(store: &std::path::Path) -> String {
    String::from_utf8_lossy(&ok(saltblob(store).args(["ls", "-l"])).stdout).into_owned()
}

#[test]
fn bad_input_is_refused_clearly_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let input = dir.path().join("in.bin");
    random_file(&input, 300_000, 1);
    ok(saltblob(&store).args(["put", "existing"]).arg(&input));
    let before = snapshot(&store);

    fails(
        saltblob(&store).args(["put", ""]).arg(&input),
        2,
        "invalid key: the key is empty",
    );
    fails(
        saltblob(&store)
            .args(["put", &"k".repeat(1025)])
            .arg(&input),
        2,
        "1025 bytes long",
    );
    fails(saltblob(&store).args(["get", ""]), 2, "invalid key");
    fails(
        saltblob(&store).args(["get", "missing"]),
        3,
        "not found: no blob with key \"missing\"",
    );
    fails(saltblob(&store).args(["head", "missing"]), 3, "not found");
    fails(
        saltblob(&store).args(["describe", "missing"]),
        3,
        "not found",
    );
    fails(saltblob(&store).args(["rm", "missing"]), 3, "not found");
    fails(
        saltblob(&store).args(["get", "existing", "--range", "300000-300010"]),
        2,
        "range not satisfiable",
    );
    fails(
        saltblob(&store).args(["get", "existing", "--range", "299990-300000"]),
        2,
        "which holds 300000 bytes",
    );
    fails(
        saltblob(&store).args(["get", "existing", "--range", "10-5"]),
        2,
        "invalid range",
    );
    fails(
        saltblob(&store).args(["get", "existing", "--range", "x"]),
        2,
        "invalid range",
    );
    fails(
        saltblob(&store)
            .args(["put", "existing", "--chunk-size", "0"])
            .arg(&input),
        2,
        "invalid chunk size",
    );
    fails(
        saltblob(&store)
            .args(["put", "existing", "--chunk-size", "1GiB"])
            .arg(&input),
        2,
        "invalid chunk size",
    );
    fails(
        saltblob(&store)
            .args(["put", "existing", "--max-salt", "0"])
            .arg(&input),
        2,
        "invalid max salt",
    );
    fails(
        saltblob(&store)
            .args(["put", "existing", "--if-absent"])
            .arg(&input),
        2,
        "already exists",
    );
    fails(
        saltblob(&store)
            .args(["put", "new"])
            .arg(dir.path().join("no-such-file")),
        2,
        "cannot read",
    );
    fails(
        saltblob(&store).args(["put", "new"]).arg(dir.path()),
        2,
        "is a directory",
    );
    // Keys in KMS: no credentials to sign with, a malformed endpoint, a CA for a plain endpoint.
    let kms = |params: &str| {
        let url = format!("rocksdb://{}?encryption=aws-kms&{params}", store.display());
        let mut c = Command::new(env!("CARGO_BIN_EXE_saltblob"));
        c.args(["--store", &url, "put", "new"])
            .arg(&input)
            .env_remove("SALTBLOB_STORE")
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY");
        c
    };
    fails(
        &mut kms("encryption_key=k&kms_endpoint=http://127.0.0.1:1"),
        2,
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
    );
    fails(
        kms("encryption_key=k&kms_endpoint=kms.example")
            .env("AWS_ACCESS_KEY_ID", "a")
            .env("AWS_SECRET_ACCESS_KEY", "b"),
        2,
        "kms_endpoint: \"kms.example\": give http:// or https://",
    );
    fails(
        kms("encryption_key=k&kms_endpoint=http://127.0.0.1:1&kms_ca=/ca.pem")
            .env("AWS_ACCESS_KEY_ID", "a")
            .env("AWS_SECRET_ACCESS_KEY", "b"),
        2,
        "kms_ca: given for http://127.0.0.1:1",
    );
    assert_eq!(snapshot(&store), before, "the store is unchanged");

    // Store URLs.
    let mut unknown = Command::new(env!("CARGO_BIN_EXE_saltblob"));
    fails(
        unknown.args(["--store", "s3://bucket/x", "ls"]),
        2,
        "unknown scheme \"s3\"",
    );
    let mut empty = Command::new(env!("CARGO_BIN_EXE_saltblob"));
    fails(
        empty.args(["--store", "rocksdb://", "ls"]),
        2,
        "the path is empty",
    );
    let mut option = Command::new(env!("CARGO_BIN_EXE_saltblob"));
    fails(
        option.args([
            "--store",
            &format!("rocksdb://{}?colour=blue", store.display()),
            "ls",
        ]),
        2,
        "unknown option \"colour\"",
    );

    // Reading from a store that does not exist does not create it.
    let nowhere = dir.path().join("nowhere");
    fails(
        saltblob(&nowhere).args(["get", "k"]),
        3,
        "there is no store at",
    );
    assert!(!nowhere.exists(), "a read did not create a store");
}

/// A cluster that cannot be reached is one line of error (the driver's own log lines stay hidden), and
/// `SALTBLOB_LOG=debug` still shows the driver's log.
#[test]
fn an_unreachable_cluster_is_one_line() {
    let store = "cql://127.0.0.1:1/ks?connect_timeout=300ms";
    let ls = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_saltblob"));
        c.args(["--store", store, "--quiet", "ls"])
            .env_remove("SALTBLOB_STORE")
            .env_remove("SALTBLOB_LOG");
        c
    };
    fails(&mut ls(), 1, "cannot connect to the cluster at 127.0.0.1:1");

    let out = ls().env("SALTBLOB_LOG", "debug").output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.lines().any(|l| l.contains("scylla")),
        "SALTBLOB_LOG=debug shows the driver's log: {stderr}"
    );
    assert!(
        stderr
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("saltblob: error: ")),
        "{stderr}"
    );
}
