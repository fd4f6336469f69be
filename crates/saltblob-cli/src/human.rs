//! Parsing and printing keys, sizes, durations, ranges and layouts for people.

use saltblob::{ByteRange, ChunkLayout, Description, Layout, LayoutClass, Manifest, ManifestBody};

pub use saltblob::{escape_key, parse_duration, parse_size};

/// A key named on the command line: %-escaped as `saltblob ls` prints it ([`saltblob::escape_key`]), so that
/// any key (bytes, not only UTF-8) can be named: `%XX` is one byte, `%25` a `%`, other characters themselves.
#[derive(Clone, Debug)]
pub struct KeyArg(pub Vec<u8>);

impl KeyArg {
    /// The key as `ls` prints it: escaped, lossless, without control characters.
    pub fn shown(&self) -> String {
        escape_key(&self.0)
    }
}

impl AsRef<[u8]> for KeyArg {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Parses a key argument (clap's value parser).
pub fn parse_key(s: &str) -> Result<KeyArg, String> {
    saltblob::unescape_key(s).map(KeyArg)
}

/// Parses an HTTP-style inclusive range: `START-END`, `START-` (to the end) or `-N` (the last N bytes). The
/// store resolves it against the size of the version it reads.
pub fn parse_range(s: &str) -> Result<ByteRange, String> {
    let bad = || {
        format!(
            "\"{s}\" is not a byte range; use START-END (inclusive, e.g. 0-1023), START- or -SUFFIX"
        )
    };
    let (a, b) = s.split_once('-').ok_or_else(bad)?;
    let num = |x: &str| x.trim().parse::<u64>().map_err(|_| bad());
    match (a.trim().is_empty(), b.trim().is_empty()) {
        (false, false) => {
            let (start, end) = (num(a)?, num(b)?);
            if end < start {
                return Err(format!("\"{s}\": the end comes before the start"));
            }
            Ok(ByteRange::Bounded {
                start,
                end: end.saturating_add(1),
            })
        }
        (false, true) => Ok(ByteRange::From(num(a)?)),
        (true, false) => Ok(ByteRange::Suffix(num(b)?)),
        (true, true) => Err(bad()),
    }
}

/// `62914560 (60.0 MiB)`.
pub fn bytes(n: u64) -> String {
    let units = ["KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = None;
    for u in units {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = Some(u);
    }
    match unit {
        Some(u) => format!("{n} ({v:.1} {u})"),
        None => format!("{n} B"),
    }
}

/// Short size: `60.0 MiB`.
pub fn short(n: u64) -> String {
    let s = bytes(n);
    match s.split_once(" (") {
        Some((_, rest)) => rest.trim_end_matches(')').to_owned(),
        None => s,
    }
}

/// RFC 3339 time of Unix microseconds.
pub fn time(micros: u64) -> String {
    /// 9999-12-31T23:59:59.999999Z, the last instant RFC 3339 can write.
    const LAST_RFC3339_MICROS: u64 = 253_402_300_799_999_999;
    if micros > LAST_RFC3339_MICROS {
        // A time stored past year 9999 (a damaged manifest or a broken clock) is shown, not a panic.
        return format!("{micros} µs after 1970 (past year 9999)");
    }
    humantime::format_rfc3339_millis(
        std::time::UNIX_EPOCH + std::time::Duration::from_micros(micros),
    )
    .to_string()
}

/// Run-length summary of bytes per salt: `655360 x60, 589824 x40`.
pub fn per_salt_summary(per_salt: &[u64]) -> String {
    let mut runs: Vec<(u64, usize)> = Vec::new();
    for &b in per_salt {
        match runs.last_mut() {
            Some((v, n)) if *v == b => *n += 1,
            _ => runs.push((b, 1)),
        }
    }
    runs.iter()
        .map(|(v, n)| {
            if *n == 1 {
                v.to_string()
            } else {
                format!("{v} x{n}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the manifest's digest is: `blake3`, or `blake3-keyed` for a sealed version (keyed with the version's
/// digest key, so that it says nothing about the plaintext).
fn digest_name(m: &Manifest) -> &'static str {
    if m.sealed_by().is_some() {
        "blake3-keyed"
    } else {
        "blake3"
    }
}

/// The manifest as a JSON value.
pub fn manifest_json(key: &[u8], m: &Manifest) -> serde_json::Value {
    let mut v = serde_json::json!({
        "key": escape_key(key),
        "version": m.version.to_string(),
        "size": m.size,
        "created": time(m.created_micros),
        "expires": m.expires_micros.map(time),
        "digest": format!("{}:{}", digest_name(m), m.digest_hex()),
        "content_type": m.content_type,
        "metadata": m.metadata,
    });
    v["layout"] = m.layout_kind().into();
    v["encryption"] = match m.sealed_by() {
        Some(s) => serde_json::json!({
            "provider": s.kek.provider,
            "key": s.kek.name,
            "key_version": s.kek.version,
        }),
        None => serde_json::Value::Null,
    };
    match &m.body {
        ManifestBody::Inline(_) => {}
        ManifestBody::Chunked {
            layout,
            codec,
            stored_bytes,
        } => {
            chunk_layout_json(&mut v, layout);
            v["codec"] = codec.name().into();
            v["stored_bytes"] = (*stored_bytes).into();
        }
        ManifestBody::Segmented(segments) => {
            v["segment_count"] = segments.len().into();
            v["stored_bytes"] = m.stored_bytes().into();
        }
    }
    v
}

/// Sets `v`'s `chunk_size`, `chunk_count` and `salt_count` to `layout`'s.
fn chunk_layout_json(v: &mut serde_json::Value, layout: &ChunkLayout) {
    v["chunk_size"] = layout.chunk_size.into();
    v["chunk_count"] = layout.chunk_count.into();
    v["salt_count"] = layout.salt_count.into();
}

/// A layout as JSON: `layout` (`inline`, `single-partition` or `salted`) and, when chunked, its geometry as
/// [`manifest_json`] gives it.
pub fn layout_json(layout: &Layout) -> serde_json::Value {
    let mut v = serde_json::json!({ "layout": LayoutClass::of_layout(layout).as_str() });
    if let Layout::Chunked(l) = layout {
        chunk_layout_json(&mut v, l);
    }
    v
}

/// A layout in words: `inline`, or e.g. `salted (16 x 64.0 KiB chunks, 8 salts)`.
pub fn layout_text(layout: &Layout) -> String {
    let class = LayoutClass::of_layout(layout).as_str();
    match layout {
        Layout::Inline => class.to_owned(),
        Layout::Chunked(l) => format!(
            "{class} ({} x {} chunks, {} salt{})",
            l.chunk_count,
            short(u64::from(l.chunk_size)),
            l.salt_count,
            if l.salt_count == 1 { "" } else { "s" }
        ),
    }
}

/// The description as a JSON value.
pub fn describe_json(d: &Description) -> serde_json::Value {
    let mut v = manifest_json(&d.key, &d.manifest);
    v["layout"] = d.layout_kind.into();
    v["storage"] = d.storage.clone().into();
    v["bytes_per_salt"] = d.bytes_per_salt.clone().into();
    v
}

/// The manifest as aligned `name: value` lines.
pub fn manifest_text(key: &[u8], m: &Manifest) -> String {
    let mut lines = vec![
        format!("key:          {}", escape_key(key)),
        format!("version:      {}", m.version),
        format!("size:         {}", bytes(m.size)),
        format!("created:      {}", time(m.created_micros)),
        format!("digest:       {}:{}", digest_name(m), m.digest_hex()),
    ];
    if let Some(expires) = m.expires_micros {
        lines.push(format!("expires:      {}", time(expires)));
    }
    lines.push(match m.sealed_by() {
        Some(s) => format!(
            "encryption:   sealed (AES-256-GCM) under {} key {}",
            s.kek.provider, s.kek
        ),
        None => "encryption:   none (plaintext)".into(),
    });
    match &m.body {
        ManifestBody::Inline(_) => {
            lines.push("layout:       inline (stored in the manifest)".into())
        }
        ManifestBody::Chunked {
            layout,
            codec,
            stored_bytes,
        } => {
            lines.push(format!("layout:       {}", m.layout_kind()));
            lines.push(format!(
                "chunk size:   {}",
                bytes(u64::from(layout.chunk_size))
            ));
            lines.push(format!("chunk count:  {}", layout.chunk_count));
            lines.push(format!("salt count:   {}", layout.salt_count));
            lines.push(format!("codec:        {codec}"));
            lines.push(format!("stored bytes: {}", bytes(*stored_bytes)));
        }
        ManifestBody::Segmented(segments) => {
            lines.push(format!(
                "layout:       segmented ({} segments, composed without copying)",
                segments.len()
            ));
            lines.push(format!("stored bytes: {}", bytes(m.stored_bytes())));
        }
    }
    if let Some(ct) = &m.content_type {
        lines.push(format!("content type: {ct}"));
    }
    for (k, v) in &m.metadata {
        lines.push(format!("meta {k}: {v}"));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("8m"), Ok(8 << 20));
        assert!(
            parse_size("").is_err()
                && parse_size("12 parsecs").is_err()
                && parse_size("-1").is_err()
        );
        assert_eq!(parse_range("0-1023").map(|r| r.resolve(5000)), Ok(0..1024));
        assert_eq!(parse_range("100-").map(|r| r.resolve(5000)), Ok(100..5000));
        assert_eq!(parse_range("-10").map(|r| r.resolve(5000)), Ok(4990..5000));
        assert!(
            parse_range("5-4").is_err() && parse_range("-").is_err() && parse_range("a-b").is_err()
        );
        assert_eq!(per_salt_summary(&[5, 5, 5, 3]), "5 x3, 3");
        assert_eq!(short(60 << 20), "60.0 MiB");
    }

    #[test]
    fn times_past_year_9999_are_shown_not_a_panic() {
        assert_eq!(time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(time(253_402_300_799_999_999), "9999-12-31T23:59:59.999Z");
        assert_eq!(
            time(253_402_300_800_000_000),
            "253402300800000000 µs after 1970 (past year 9999)"
        );
        assert!(time(u64::MAX).ends_with("(past year 9999)"));
    }

    /// The flags' durations were read by humantime: whatever it reads, [`parse_duration`] reads the same (spans
    /// of whole or fractional numbers with each of its units, with and without spaces, drawn from a fixed seed).
    #[test]
    fn durations_read_as_humantime_read_them() {
        use rand::{Rng, SeedableRng};
        const UNITS: [&str; 43] = [
            "nanos", "nsec", "ns", "usec", "us", "µs", "millis", "msec", "ms", "seconds", "second",
            "secs", "sec", "s", "minutes", "minute", "min", "mins", "m", "hours", "hour", "hr",
            "hrs", "h", "days", "day", "d", "weeks", "week", "wk", "wks", "w", "months", "month",
            "M", "years", "year", "yr", "yrs", "y", "x", "", "S",
        ];
        let mut rng = rand::rngs::StdRng::seed_from_u64(56);
        let mut same = 0;
        for _ in 0..20_000 {
            let mut text = String::new();
            for span in 0..rng.random_range(1..=3) {
                if span > 0 && rng.random_bool(0.5) {
                    text.push(' ');
                }
                text.push_str(&rng.random_range(0..100_000u32).to_string());
                if rng.random_bool(0.3) {
                    text.push_str(&format!(".{}", rng.random_range(0..1000u32)));
                }
                if rng.random_bool(0.2) {
                    text.push(' ');
                }
                text.push_str(UNITS[rng.random_range(0..UNITS.len())]);
            }
            if let Ok(want) = humantime::parse_duration(&text) {
                assert_eq!(parse_duration(&text), Ok(want), "{text:?}");
                same += 1;
            }
        }
        assert!(same > 10_000, "{same}");
        for default in ["0", "10s", "30s", "60s", "10m"] {
            assert_eq!(
                parse_duration(default).ok(),
                humantime::parse_duration(default).ok()
            );
        }
    }
}
