//! `--profile NAME`: a store named in the configuration file, used as `--store` would be; refused beside
//! `--store`, and when the file lacks it.

use std::process::Command;

use crate::common::{fails, ok};

#[test]
fn a_profile_names_the_store_and_is_refused_beside_store_or_when_missing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[profiles.here]\nstore = \"rocksdb://{}\"\n",
            store.display()
        ),
    )
    .expect("write");
    let value = dir.path().join("value");
    std::fs::write(&value, b"by profile").expect("write");
    let saltblob = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_saltblob"));
        c.env_remove("SALTBLOB_STORE")
            .env_remove("SALTBLOB_PROFILE")
            .env("SALTBLOB_CONFIG", &config)
            .current_dir(dir.path())
            .arg("--quiet");
        c
    };
    ok(saltblob()
        .args(["--profile", "here", "put", "k"])
        .arg(&value));
    let got = ok(saltblob().args(["--profile", "here", "get", "k"]));
    assert_eq!(got.stdout, b"by profile");
    assert!(store.exists(), "the profile's store was used");
    assert!(
        !dir.path().join("saltblob-data").exists(),
        "the default store was not"
    );
    let got = ok(saltblob()
        .env("SALTBLOB_PROFILE", "here")
        .args(["get", "k"]));
    assert_eq!(got.stdout, b"by profile", "SALTBLOB_PROFILE picks it too");
    fails(
        saltblob().args(["--profile", "there", "ls"]),
        2,
        "has no [profiles.there] (profiles there: here)",
    );
    fails(
        saltblob()
            .args(["--profile", "here", "--store"])
            .arg(format!("rocksdb://{}", store.display()))
            .arg("ls"),
        2,
        "both name a store",
    );
}
