//! No output channel shows the password of a store URL (issue 12, item 14): `--help` with `SALTBLOB_STORE`, the
//! errors of an unknown scheme, a bad URL and a failed connection (with trace logs), `import-salted`'s usage
//! error, and the bench's terminal output, JSON and plot. Each password holds a character a URL gives a meaning
//! to, raw or %-encoded.

use std::process::{Command, Output};

/// Passwords, each with the fragments that must show nowhere (the raw text, its pieces around the special
/// characters, and the decoded text of a %-encoded one).
const PASSWORDS: [(&str, &[&str]); 5] = [
    ("Zq9s3cret", &["Zq9", "s3cret"]),
    ("Zq9/s3cret", &["Zq9", "s3cret"]),
    ("Zq9?s3#cret", &["Zq9", "s3#cret", "cret"]),
    ("Zq9@s3:cret", &["Zq9", "s3:cret", "cret"]),
    (
        "Zq9%2Fs3%40cret%25",
        &["Zq9", "s3%40cret", "Zq9/s3@cret%", "cret"],
    ),
];

fn saltblob() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_saltblob"));
    c.arg("--quiet").env_remove("SALTBLOB_STORE");
    c
}

/// Fails if any of `needles` is in the output or the file texts.
fn assert_hidden(what: &str, needles: &[&str], out: &Output, files: &[&std::path::Path]) {
    let mut channels = vec![
        ("stdout", String::from_utf8_lossy(&out.stdout).into_owned()),
        ("stderr", String::from_utf8_lossy(&out.stderr).into_owned()),
    ];
    for f in files {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{what}: {f:?}: {e}"));
        assert!(!text.is_empty(), "{what}: {f:?} is empty");
        channels.push(("file", text));
    }
    for (channel, text) in channels {
        for needle in needles {
            assert!(
                !text.contains(needle),
                "{what}: {channel} shows the password ({needle:?}): {text}"
            );
        }
    }
}

#[test]
fn no_output_shows_the_password() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (password, needles) in PASSWORDS {
        let cql = format!("cql://admin:{password}@127.0.0.1:1/ks?connect_timeout=300ms");
        let out = saltblob()
            .arg("--help")
            .env("SALTBLOB_STORE", &cql)
            .output()
            .expect("run");
        assert!(out.status.success());
        assert_hidden("--help", needles, &out, &[]);

        for (what, url) in [
            ("connection refused", cql.clone()),
            ("unknown scheme", cql.replace("cql://", "CQL://")),
            ("bad option", format!("{cql}&nope=1")),
            ("bad port", cql.replace(":1/", ":0/")),
            ("no scheme", cql.replace("cql://", "")),
        ] {
            let out = saltblob()
                .args(["ls"])
                .env("SALTBLOB_STORE", &url)
                .env("SALTBLOB_LOG", "trace")
                .output()
                .expect("run");
            assert!(!out.status.success(), "{what}");
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("admin:***@")
                    || what == "connection refused",
                "{what}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_hidden(what, needles, &out, &[]);
        }

        let memory = format!("memory://admin:{password}@nowhere");
        let out = saltblob()
            .args(["--store", &memory, "import-salted", "ks.t"])
            .output()
            .expect("run");
        assert!(!out.status.success());
        assert_hidden("import-salted", needles, &out, &[]);

        let (json, plot) = (dir.path().join("bench.json"), dir.path().join("bench.svg"));
        let out = saltblob()
            .args([
                "--store",
                &memory,
                "bench",
                "--count",
                "1",
                "--large-mb",
                "1",
            ])
            .args([
                "--small-kb",
                "64",
                "--concurrency",
                "2",
                "--no-probe",
                "--json",
            ])
            .arg(&json)
            .arg("--plot")
            .arg(&plot)
            .env("SALTBLOB_LOG", "trace")
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_hidden("bench", needles, &out, &[&json, &plot]);
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).expect("read json")).expect("JSON");
        assert_eq!(report["store"], "memory://admin:***@nowhere");
    }
}
