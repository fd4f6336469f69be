//! `saltblob keyring`: the local key provider's keyring file made private, keys added and rotated, listed
//! without their bytes; loose permissions, a second `new` and damage refused with what to fix. No store is
//! opened or made.

use std::os::unix::fs::PermissionsExt;

use crate::common::{fails, ok, saltblob};

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn keys_are_added_rotated_and_listed_in_a_private_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("store");
    let file = dir.path().join("keys.ring");
    let run = |args: &[&str]| {
        let mut c = saltblob(&store);
        c.arg("keyring").args(args);
        c
    };
    let f = file.to_str().expect("utf-8 path");
    ok(&mut run(&["new", f]));
    assert_eq!(
        std::fs::metadata(&file).expect("made").permissions().mode() & 0o777,
        0o600
    );
    fails(&mut run(&["new", f]), 2, "exists already");
    ok(&mut run(&["add", f, "orders"]));
    fails(&mut run(&["add", f, "orders"]), 2, "rotate it");
    fails(&mut run(&["add", f, "bad name"]), 2, "key name");
    let rotated = stdout(&ok(&mut run(&["rotate", f, "orders"])));
    assert!(rotated.contains("version 2"), "{rotated}");
    fails(&mut run(&["rotate", f, "logs"]), 2, "add it first");

    let listed: serde_json::Value =
        serde_json::from_slice(&ok(&mut run(&["list", f, "--json"])).stdout).expect("JSON");
    let keys = listed["keys"].as_array().expect("keys");
    let rows: Vec<_> = keys
        .iter()
        .map(|k| {
            (
                k["name"].as_str(),
                k["version"].as_u64(),
                k["state"].as_str(),
                k["current"].as_bool(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (Some("orders"), Some(1), Some("active"), Some(false)),
            (Some("orders"), Some(2), Some("active"), Some(true)),
        ]
    );
    // The key bytes (offset 27 of the file for the first key) show in no listing.
    let bytes = std::fs::read(&file).expect("read");
    let hex: String = bytes[27..59].iter().map(|b| format!("{b:02x}")).collect();
    let text = stdout(&ok(&mut run(&["list", f])));
    assert!(
        text.contains("orders\tversion 2\tactive (current)"),
        "{text}"
    );
    for shown in [&text, &listed.to_string()] {
        assert!(!shown.contains(&hex[..16]), "key bytes listed: {shown}");
    }

    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    fails(&mut run(&["list", f]), 2, "chmod 600");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let mut damaged = bytes.clone();
    damaged[30] ^= 1;
    std::fs::write(&file, &damaged).expect("write");
    fails(&mut run(&["list", f]), 4, "corrupt keyring");
    assert!(!store.exists(), "no store was opened or made");
}
