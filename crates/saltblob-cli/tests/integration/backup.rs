//! `saltblob backup` of a store no process holds (opened by the command): the copy opens as a store with every
//! blob byte-identical, `--verify` fscks it, `--copy` copies, and bad destinations are refused with nothing made.
//! (A backup through a serving process's admin socket: `serve.rs`; under concurrent writers, judged by the
//! history checker: the RocksDB crate's `backup` tests.)

use std::path::Path;

use crate::common::{fails, hash_file, json, ok, random_file, saltblob};

/// A store at `dir/store` with a small, an empty and a 24 MiB blob (the large one in an extent file); returns
/// the files put, by key.
fn filled(dir: &Path) -> Vec<(&'static str, std::path::PathBuf)> {
    let store = dir.join("store");
    let mut put = Vec::new();
    for (key, size) in [("small", 1000), ("empty", 0), ("large", 24 << 20)] {
        let file = dir.join(key);
        random_file(&file, size, size + 1);
        ok(saltblob(&store).args(["put", key]).arg(&file));
        put.push((key, file));
    }
    put
}

/// Every blob of `put` reads back from the store at `store` as the file it was put from.
fn holds(store: &Path, put: &[(&str, std::path::PathBuf)], scratch: &Path) {
    for (key, file) in put {
        let out = scratch.join(format!("{key}.out"));
        ok(saltblob(store).args(["get", key, "-o"]).arg(&out));
        assert_eq!(hash_file(&out), hash_file(file), "{key}");
        std::fs::remove_file(&out).expect("rm");
    }
}

#[test]
fn a_backup_opens_as_a_store_holding_every_blob() {
    let dir = tempfile::tempdir().expect("temp dir");
    let put = filled(dir.path());
    let store = dir.path().join("store");
    for (name, copy) in [("linked", false), ("copied", true)] {
        let dest = dir.path().join(name);
        let mut cmd = saltblob(&store);
        cmd.args(["backup", "--verify", "--json"]).arg(&dest);
        if copy {
            cmd.arg("--copy");
        }
        let report = json(&ok(&mut cmd));
        assert_eq!(report["copied"], copy, "{report}");
        assert!(report["extent_files"].as_u64() >= Some(1), "{report}");
        assert!(report["engine_files"].as_u64() >= Some(3), "{report}");
        assert_eq!(report["verified"]["blobs"], 3, "{report}");
        assert_eq!(report["verified"]["damaged"], 0, "{report}");
        holds(&dest, &put, dir.path());
        // The backup is a store of its own: writing to it leaves the source as it was.
        ok(saltblob(&dest).args(["rm", "large"]));
    }
    holds(&store, &put, dir.path());
    // The text report says what the copy shares.
    let out = ok(saltblob(&store).arg("backup").arg(dir.path().join("third")));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("hard-linked") && text.contains("1 extent files"),
        "{text}"
    );
}

#[test]
fn bad_destinations_are_refused_and_nothing_is_made() {
    let dir = tempfile::tempdir().expect("temp dir");
    filled(dir.path());
    let store = dir.path().join("store");
    let taken = dir.path().join("taken");
    std::fs::create_dir(&taken).expect("dir");
    fails(saltblob(&store).arg("backup").arg(&taken), 1, "it exists");
    assert_eq!(std::fs::read_dir(&taken).expect("list").count(), 0);
    fails(
        saltblob(&store)
            .arg("backup")
            .arg(dir.path().join("none/b")),
        1,
        "parent directory",
    );
    fails(
        saltblob(&store).arg("backup").arg(store.join("inside")),
        1,
        "inside the store",
    );
    fails(
        saltblob(&dir.path().join("absent"))
            .arg("backup")
            .arg(dir.path().join("b")),
        1,
        "nothing to back up",
    );
    assert!(!dir.path().join("absent").exists(), "no store created");
    // An admin socket named but not answered: said, and the store is not opened behind the user's back.
    fails(
        saltblob(&store)
            .args(["backup", "--admin-socket"])
            .arg(dir.path().join("no.sock"))
            .arg(dir.path().join("b")),
        1,
        "no server answers",
    );
    let staging: Vec<_> = std::fs::read_dir(&store)
        .expect("list")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("backup-staging-")
        })
        .collect();
    assert!(staging.is_empty(), "{staging:?}");
}
