//! How keys and store URLs are shown to people: keys escaped losslessly, URLs without their password.
//!
//! # Keys
//!
//! Keys are bytes. [`escape_key`] writes a key as text that round-trips through [`unescape_key`]: a character of
//! valid UTF-8 stands for itself, except `%`, white space, control characters and invisible formatting
//! characters (zero-width and bidirectional marks); every other byte is `%XX` (two uppercase hex digits). The
//! text thus holds no control character, no white space and nothing that reorders or hides what follows it,
//! and can be pasted back on a command line. [`unescape_key`] reads `%XX` (either case) as one byte and any
//! other character as its UTF-8 bytes; a `%` not followed by two hex digits is an error.
//!
//! # URLs
//!
//! [`redact_url`] hides the password of a store URL (`scheme://user:password@host/...`). The user information
//! ends at the LAST `@` of the URL, so a password may hold any character, `/ ? # @ :` included, raw or
//! %-encoded; the cluster backend's URL parser reads the user information by the same rule.

use std::fmt::Write as _;

/// Characters that do not show (zero-width, soft hyphen, word joiners, byte order mark) or that reorder the text
/// around them (bidirectional marks, embeddings, overrides and isolates).
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

/// Whether `c` is written as itself by [`escape_key`].
fn is_plain(c: char) -> bool {
    c != '%' && !c.is_control() && !c.is_whitespace() && !is_invisible(c)
}

/// The key as text, lossless and safe to print (see the [module documentation](self)).
pub fn escape_key(key: &[u8]) -> String {
    let mut out = String::with_capacity(key.len());
    for chunk in key.utf8_chunks() {
        for c in chunk.valid().chars() {
            if is_plain(c) {
                out.push(c);
            } else {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    let _ = write!(out, "%{b:02X}");
                }
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The key that [`escape_key`] wrote as `text`; `Err` says what is wrong (a `%` without two hex digits).
pub fn unescape_key(text: &str) -> Result<Vec<u8>, String> {
    let bytes = text.as_bytes();
    let mut key = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let byte = bytes
                .get(i + 1..i + 3)
                .and_then(|hex| std::str::from_utf8(hex).ok())
                .filter(|hex| hex.bytes().all(|h| h.is_ascii_hexdigit()))
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or_else(|| {
                    format!(
                        "the % at byte {i} is not followed by two hex digits; write a % in a key as %25 \
                         (bytes are written %XX, e.g. %00 for NUL)"
                    )
                })?;
            key.push(byte);
            i += 3;
        } else {
            key.push(b);
            i += 1;
        }
    }
    Ok(key)
}

/// The URL with its password hidden: `scheme://user:***@rest`. Everything before the last `@` is the user
/// information; when it has no `:`, all of it is hidden (`scheme://***@rest`), as it may be a token. A URL
/// without `@` is returned as it is.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    match rest.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}{user}:***@{hosts}"),
            None => format!("{scheme}***@{hosts}"),
        },
        None => url.to_owned(),
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of lowercase or uppercase hex `text`; `None` if it is not hex.
pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keys_are_escaped_readably() {
        assert_eq!(escape_key(b"photos/cat.jpg"), "photos/cat.jpg");
        assert_eq!(escape_key("café".as_bytes()), "café");
        assert_eq!(
            escape_key(b"\x00\xff\n\x1b[31m 50%"),
            "%00%FF%0A%1B[31m%2050%25"
        );
        assert_eq!(escape_key("a\u{202E}b".as_bytes()), "a%E2%80%AEb");
        assert_eq!(unescape_key("%00%ff%0a"), Ok(b"\x00\xff\n".to_vec()));
        assert_eq!(unescape_key("café").as_deref(), Ok("café".as_bytes()));
        for bad in ["50%", "50%off", "%4", "%%41"] {
            let e = unescape_key(bad).expect_err(bad);
            assert!(e.contains("%25"), "{bad}: {e}");
        }
    }

    #[test]
    fn passwords_are_hidden_whatever_they_hold() {
        for password in [
            "s3cret",
            "pa/ss",
            "p?a#s",
            "p@ss:w0rd",
            "p%2Fss%40x",
            "/?#@:",
            "",
        ] {
            let url = format!("cql://user:{password}@h1,h2:9042/ks?rf=1");
            let shown = redact_url(&url);
            assert_eq!(shown, "cql://user:***@h1,h2:9042/ks?rf=1", "{url}");
        }
        assert_eq!(redact_url("CQL://u:s3cret@h"), "CQL://u:***@h");
        assert_eq!(redact_url("token@h/ks"), "***@h/ks");
        assert_eq!(redact_url("cql://h/ks?rf=1"), "cql://h/ks?rf=1");
        assert_eq!(redact_url("memory://"), "memory://");
    }

    proptest! {
        #[test]
        fn escaped_keys_round_trip_and_print_safely(key in proptest::collection::vec(any::<u8>(), 0..64)) {
            let text = escape_key(&key);
            prop_assert!(!text.chars().any(|c| c.is_control() || c.is_whitespace() || is_invisible(c)));
            prop_assert_eq!(unescape_key(&text), Ok(key));
        }

        #[test]
        fn no_password_survives_redaction(user in "[a-z]{1,8}", password in "\\PC{0,24}", tail in "[a-z0-9.,:/?=&]{0,24}") {
            let url = format!("cql://{user}:{password}@{tail}");
            let shown = redact_url(&url);
            prop_assert_eq!(shown, format!("cql://{user}:***@{tail}"));
        }
    }
}
