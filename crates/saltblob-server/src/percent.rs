//! Percent-encoding (RFC 3986) of the texts S3 carries in URLs and headers: query parameters, listing names with
//! `encoding-type=url`, the rule id of `x-amz-expiration`, tag sets in `x-amz-tagging`.

/// `text` with every byte but the unreserved characters (`A-Z a-z 0-9 - _ . ~`) and those in `keep` encoded as
/// `%XX` (upper-case hex).
pub(crate) fn encode(text: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) || keep.contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `text` with each `%XX` decoded (a `%` not followed by two hex digits stays as it is), and `+` as a space if
/// `plus_is_space` (form encoding; SigV4 query parameters keep it); bytes that are not UTF-8 replaced.
pub(crate) fn decode(text: &str, plus_is_space: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b, hex) {
            (b'%', Some(decoded)) => {
                out.push(decoded);
                i += 3;
            }
            (b'+', _) if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_round_trip_and_bad_escapes_stay() {
        assert_eq!(encode("a b/c+d", b"/"), "a%20b/c%2Bd");
        assert_eq!(encode("r/1 é", b""), "r%2F1%20%C3%A9");
        assert_eq!(decode("a%2Fb%zz+", false), "a/b%zz+");
        assert_eq!(decode("a+b%2B", true), "a b+");
        assert_eq!(decode(&encode("k=v&w é", b""), false), "k=v&w é");
    }
}
