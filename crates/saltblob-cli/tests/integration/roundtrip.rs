//! A 200 MiB file round-trips through put/get (file and stdin/stdout), ranges, overwrite with a small file.

use std::fs::File;
use std::process::Stdio;

use crate::common::*;

#[test]
fn a_200_mib_file_round_trips_by_file_and_by_pipe() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let input = dir.path().join("in.bin");
    let size: u64 = 200 << 20;
    let digest = random_file(&input, size, 42);

    // File in, file out.
    ok(saltblob(&store).args(["put", "big"]).arg(&input));
    let out_file = dir.path().join("out.bin");
    ok(saltblob(&store).args(["get", "big", "-o"]).arg(&out_file));
    assert_eq!(hash_file(&out_file), digest, "get -o returns the bytes put");

    // Standard input in, standard output out.
    ok(saltblob(&store)
        .args(["put", "piped", "-"])
        .stdin(Stdio::from(File::open(&input).expect("open"))));
    let piped_out = dir.path().join("piped.bin");
    ok(saltblob(&store)
        .args(["get", "piped"])
        .stdout(Stdio::from(File::create(&piped_out).expect("create"))));
    assert_eq!(hash_file(&piped_out), digest, "stdin/stdout round trip");

    let d = json(&ok(saltblob(&store).args(["describe", "piped", "--json"])));
    assert_eq!(d["layout"], "salted");
    assert_eq!(
        d["storage"], "extent",
        "a large stream goes to an extent file"
    );
    assert_eq!(d["size"], size);
    assert_eq!(d["salt_count"], 100);
    assert_eq!(d["chunk_count"], 3200);
    assert_eq!(d["digest"], format!("blake3:{}", digest.to_hex()));
    let per_salt: u64 = d["bytes_per_salt"]
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|v| v.as_u64())
        .sum();
    assert_eq!(per_salt, size);

    // Ranges: inclusive START-END, across chunk boundaries, open-ended, suffix.
    for (spec, range) in [
        ("0-0", 0..1),
        ("1000-2000", 1000..2001),
        ("65535-65537", 65535..65538),
        ("104857000-104858700", 104_857_000..104_858_701),
        ("209715100-", 209_715_100..209_715_200),
        ("-10", 209_715_190..209_715_200),
    ] {
        let out = ok(saltblob(&store).args(["get", "big", "--range", spec]));
        assert_eq!(
            out.stdout,
            file_range(&input, range.clone()),
            "range {spec}"
        );
    }

    // Overwrite with a 100 KiB file: reads return the small file.
    let small = dir.path().join("small.bin");
    let small_digest = random_file(&small, 100 << 10, 7);
    ok(saltblob(&store).args(["put", "big"]).arg(&small));
    let out = ok(saltblob(&store).args(["get", "big"]));
    assert_eq!(out.stdout.len(), 100 << 10);
    assert_eq!(blake3::hash(&out.stdout), small_digest);
    let head = json(&ok(saltblob(&store).args(["head", "big", "--json"])));
    assert_eq!(head["layout"], "single-partition");

    // ls shows both keys; rm removes one.
    let ls = ok(saltblob(&store).args(["ls"]));
    assert_eq!(String::from_utf8_lossy(&ls.stdout), "big\npiped\n");
    ok(saltblob(&store).args(["rm", "piped"]));
    let ls = ok(saltblob(&store).args(["ls", "-l"]));
    let listing = String::from_utf8_lossy(&ls.stdout);
    assert!(
        listing.contains("102400") && listing.contains("big") && !listing.contains("piped"),
        "{listing}"
    );
}

#[test]
fn per_put_chunk_size_and_max_salt_are_honoured() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let input = dir.path().join("in.bin");
    random_file(&input, 20 << 20, 3);
    ok(saltblob(&store)
        .args([
            "put",
            "k",
            "--chunk-size",
            "256KiB",
            "--max-salt",
            "16",
            "--codec",
            "zstd",
        ])
        .arg(&input));
    let d = json(&ok(saltblob(&store).args(["describe", "k", "--json"])));
    assert_eq!(
        (
            d["chunk_size"].as_u64(),
            d["chunk_count"].as_u64(),
            d["salt_count"].as_u64()
        ),
        (Some(262_144), Some(80), Some(16))
    );
    assert_eq!(d["codec"], "zstd");
    let out = ok(saltblob(&store).args(["get", "k"]));
    assert_eq!(blake3::hash(&out.stdout), hash_file(&input));
}

#[test]
fn get_into_an_existing_file_keeps_its_permissions() {
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let input = dir.path().join("in.bin");
    let digest = random_file(&input, 100_000, 7);
    ok(saltblob(&store).args(["put", "secret"]).arg(&input));
    for mode in [0o600, 0o640, 0o604] {
        let out = dir.path().join(format!("out-{mode:o}"));
        std::fs::write(&out, b"old").expect("write");
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(mode)).expect("chmod");
        ok(saltblob(&store).args(["get", "secret", "-o"]).arg(&out));
        assert_eq!(hash_file(&out), digest, "the new bytes replace the old");
        let got = std::fs::metadata(&out).expect("stat").permissions().mode() & 0o7777;
        assert_eq!(
            got, mode,
            "get -o kept the replaced file's mode {mode:o}, got {got:o}"
        );
    }
}

/// `saltblob demo` (what `scripts/demo.sh` runs) says where each blob is stored: inline blobs in their manifest,
/// small and medium ones in RocksDB's blob files, from 8 MiB (the extent threshold) in an extent file.
#[test]
fn the_demo_shows_where_each_blob_is_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = ok(saltblob(&dir.path().join("store")).args(["demo", "--small"]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().next().is_some_and(|h| h.contains("stored in")),
        "{text}"
    );
    for (key, stored) in [
        ("demo/00-0B ", "manifest"),
        ("demo/02-16.0KiB ", "manifest"),
        ("demo/03-16385B ", "blob files"),
        ("demo/05-1.0MiB ", "blob files"),
        ("demo/06-8.0MiB ", "extent"),
        ("demo/07-20.0MiB ", "extent"),
    ] {
        let line = text.lines().find(|l| l.starts_with(key));
        assert!(
            line.is_some_and(|l| l.contains(stored) && l.ends_with("verified")),
            "{key} should be stored in {stored}: {text}"
        );
    }
}
