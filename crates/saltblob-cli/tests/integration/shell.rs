//! `saltblob completions` and `saltblob man`: made from the command line's definition, they name its commands
//! and options, and open no store.

use crate::common::{fails, ok, saltblob};

#[test]
fn completions_and_the_manual_page_name_the_commands_and_open_no_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let text = |args: &[&str]| {
        let out = ok(saltblob(&store).args(args));
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    let bash = text(&["completions", "bash"]);
    assert!(
        bash.contains("_saltblob()") && bash.contains("complete -F"),
        "{bash}"
    );
    for command in ["put", "get", "cp", "sync", "serve", "completions"] {
        assert!(bash.contains(command), "bash completions lack {command}");
    }
    assert!(
        bash.contains("--store"),
        "bash completions lack the global --store"
    );
    assert!(text(&["completions", "zsh"]).starts_with("#compdef saltblob"));
    assert!(text(&["completions", "fish"]).contains("complete -c saltblob"));
    let man = text(&["man"]);
    assert!(man.contains(".TH saltblob 1"), "{man}");
    assert!(
        man.contains("completions") && man.contains("\\-\\-store"),
        "{man}"
    );
    assert!(!store.exists(), "completions and man opened the store");
    fails(
        saltblob(&store).args(["completions", "cmd.exe"]),
        2,
        "invalid value",
    );
}
