//! Keys are bytes, and the CLI names and prints any of them losslessly (issue 12, item 17): on the command line
//! a key is %-escaped (`%XX` one byte, `%25` a '%'), and `ls`, `head`, `describe`, `fsck` print keys in the
//! same form, without control characters, so that what they print is accepted back.

use crate::common::*;

/// NUL, 0xff, a newline, ESC, '%' and a space, as the CLI writes them.
const ESCAPED: &str = "k%00%FF%0A%1B[31m%2541%20end";
const RAW: &[u8] = b"k\x00\xff\n\x1b[31m%41 end";

#[test]
fn any_key_round_trips_through_put_ls_get_head_rm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let input = dir.path().join("in.bin");
    std::fs::write(&input, b"payload").expect("write");
    ok(saltblob(&store).args(["put", ESCAPED]).arg(&input));
    // %XX is decoded: "%41" names the key "A", and "caf%C3%A9" is UTF-8 printed as itself.
    ok(saltblob(&store).args(["put", "%41"]).arg(&input));
    ok(saltblob(&store).args(["put", "caf%C3%A9"]).arg(&input));

    let listing = ok(saltblob(&store).arg("ls")).stdout;
    assert_eq!(
        String::from_utf8(listing.clone()).expect("UTF-8"),
        format!("A\ncafé\n{ESCAPED}\n")
    );
    assert!(
        !listing.iter().any(|&b| b != b'\n' && b.is_ascii_control()),
        "no control character reaches the terminal"
    );
    let long =
        String::from_utf8(ok(saltblob(&store).args(["ls", "-l", "k%00"])).stdout).expect("UTF-8");
    assert!(long.trim_end().ends_with(ESCAPED), "{long}");
    assert_eq!(long.lines().count(), 1, "{long}");

    // What ls printed is accepted back.
    for line in String::from_utf8(listing).expect("UTF-8").lines() {
        assert_eq!(ok(saltblob(&store).args(["get", line])).stdout, b"payload");
    }
    let head = json(&ok(saltblob(&store).args(["head", ESCAPED, "--json"])));
    assert_eq!(head["key"], ESCAPED);
    let key = head["key"].as_str().expect("string");
    assert_eq!(
        saltblob::unescape_key(key).expect("escaped"),
        RAW,
        "lossless"
    );
    let describe = json(&ok(saltblob(&store).args(["describe", ESCAPED, "--json"])));
    assert_eq!(describe["key"], ESCAPED);
    let text =
        String::from_utf8(ok(saltblob(&store).args(["head", ESCAPED])).stdout).expect("UTF-8");
    assert!(
        text.contains(&format!("key:          {ESCAPED}\n")),
        "{text}"
    );
    let fsck = json(&ok(saltblob(&store).args(["fsck", "--json"])));
    assert_eq!(fsck["blobs"], 3, "{fsck}");

    ok(saltblob(&store).args(["rm", ESCAPED]));
    let gone = saltblob(&store)
        .args(["get", ESCAPED])
        .output()
        .expect("run");
    assert_eq!(gone.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&gone.stderr);
    assert!(
        stderr.contains(&format!("no blob with key \"{ESCAPED}\"")),
        "{stderr}"
    );
    let listing = ok(saltblob(&store).arg("ls")).stdout;
    assert_eq!(listing, b"A\ncaf\xc3\xa9\n");
}

#[test]
fn a_bad_escape_is_refused_and_says_how_to_write_a_percent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    for key in ["50%off", "100%", "%4"] {
        let out = saltblob(&store)
            .args(["put", key, "-"])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{key}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("%25"), "{key}: {stderr}");
    }
    assert!(!store.exists(), "nothing was created");
}
