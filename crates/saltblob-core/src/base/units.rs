//! Units: byte sizes ([`KIB`], [`MIB`], [`parse_size`]), durations as people write them ([`parse_duration`], the
//! one parser of every crate: URL parameters and command-line flags) and durations in microseconds ([`micros`]).
//! A leaf: it uses no other module of the crate.

use std::time::Duration;

/// 1 KiB.
pub const KIB: u64 = 1024;
/// 1 MiB.
pub const MIB: u64 = 1024 * KIB;

/// Parses a byte count as people write it: `65536`, `64k`, `64KiB`, `8m`, `8MiB`, `1GiB` (K/KB, M/MB and G/GB are
/// binary units too). The error says what is accepted.
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("\"{s}\" is not a size (e.g. 65536, 64KiB, 8MiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => KIB,
        "m" | "mb" | "mib" => MIB,
        "g" | "gb" | "gib" => 1 << 30,
        _ => {
            return Err(format!(
                "\"{s}\" has an unknown unit (use B, KiB, MiB or GiB)"
            ));
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("\"{s}\" is too large"))
}

/// Nanoseconds in a second.
const SECOND: u128 = 1_000_000_000;

/// The units of [`parse_duration`], each with its nanoseconds.
const TIME_UNITS: [(&[&str], u128); 10] = [
    (&["ns", "nsec", "nanos"], 1),
    (&["us", "µs", "usec"], 1_000),
    (&["ms", "msec", "millis"], 1_000_000),
    (&["s", "sec", "secs", "second", "seconds"], SECOND),
    (&["m", "min", "mins", "minute", "minutes"], 60 * SECOND),
    (&["h", "hr", "hrs", "hour", "hours"], 3_600 * SECOND),
    (&["d", "day", "days"], 86_400 * SECOND),
    (&["w", "wk", "wks", "week", "weeks"], 604_800 * SECOND),
    // 30.44 days.
    (&["M", "month", "months"], 2_630_016 * SECOND),
    // 365.25 days.
    (&["y", "yr", "yrs", "year", "years"], 31_557_600 * SECOND),
];

/// Parses a duration as people write it: spans of a number and a unit, summed, such as `500ms`, `10s`, `1h30m`,
/// `2h 37min` or `1.5s`; a number alone is seconds (`600`, `0.5`, `0`). Units (case matters: `M` is a month, `m` a
/// minute): `ns`, `us` or `µs`, `ms`, `s`, `m` or `min`, `h`, `d`, `w`, `M`, `y` and their long forms (`sec`,
/// `seconds`, `mins`, `hours`, `days`, `weeks`, `months`, `years`, …); a month is 30.44 days and a year 365.25.
/// Spaces may separate spans, a number from its unit, and digits (`1 000ms`). Fractions finer than a nanosecond
/// are dropped. The error says what is accepted; bounds are the caller's.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let not_one =
        || format!("\"{s}\" is not a duration (e.g. 500ms, 10s, 1h30m; a number alone is seconds)");
    let too_long = || format!("\"{s}\" is too long a duration");
    let t = s.trim();
    let mut rest = t.strip_prefix('+').unwrap_or(t);
    if rest.is_empty() {
        return Err(not_one());
    }
    let mut nanos: u128 = 0;
    let mut first = true;
    while !rest.is_empty() {
        // The number: digits and a dot, spaces between them ignored (`1 000s`).
        let mut end = 0;
        for (i, b) in rest.bytes().enumerate() {
            match b {
                b'0'..=b'9' | b'.' => end = i + 1,
                b if b.is_ascii_whitespace() => {}
                _ => break,
            }
        }
        let (number, after) = rest.split_at(end);
        let number: String = number.chars().filter(|c| !c.is_whitespace()).collect();
        if number.is_empty() {
            return Err(not_one());
        }
        let after = after.trim_start();
        let end = after
            .find(|c: char| !c.is_alphabetic())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(end);
        rest = after.trim_start();
        let per = if unit.is_empty() && first && rest.is_empty() {
            SECOND
        } else {
            match TIME_UNITS.iter().find(|(names, _)| names.contains(&unit)) {
                Some((_, per)) => *per,
                None if unit.is_empty() => return Err(not_one()),
                None => {
                    return Err(format!(
                        "\"{s}\" has an unknown unit \"{unit}\" (use ns, us, ms, s, m, h, d, w, M or y)"
                    ));
                }
            }
        };
        let span = span_nanos(&number, per).map_err(|bad| match bad {
            BadSpan::NoNumber => not_one(),
            BadSpan::TooLong => too_long(),
        })?;
        nanos = nanos.checked_add(span).ok_or_else(too_long)?;
        first = false;
    }
    let secs = u64::try_from(nanos / SECOND).map_err(|_| too_long())?;
    let sub = u32::try_from(nanos % SECOND).map_err(|_| too_long())?;
    Ok(Duration::new(secs, sub))
}

/// Why a span of [`parse_duration`] is refused.
enum BadSpan {
    NoNumber,
    TooLong,
}

/// `number` (ASCII digits with at most one `.`, and at least one digit) units of `per` nanoseconds, in
/// nanoseconds with the fraction of a nanosecond dropped.
fn span_nanos(number: &str, per: u128) -> std::result::Result<u128, BadSpan> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(BadSpan::NoNumber);
    }
    let digits = |s: &str| {
        s.bytes().try_fold(0u128, |n, d| {
            n.checked_mul(10)?.checked_add(u128::from(d - b'0'))
        })
    };
    // Digits past the 20th weigh less than a nanosecond of the longest unit; 10^20 times a year's nanoseconds
    // (below 10^17) fits in a u128.
    let fraction = &fraction[..fraction.len().min(20)];
    let scale = 10u128.pow(u32::try_from(fraction.len()).unwrap_or(20));
    let part = digits(fraction).map_or(0, |f| f * per / scale);
    digits(whole)
        .and_then(|w| w.checked_mul(per))
        .and_then(|w| w.checked_add(part))
        .ok_or(BadSpan::TooLong)
}

/// `d` in microseconds, saturating.
pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("8m"), Ok(8 << 20));
        assert_eq!(parse_size(" 1GiB "), Ok(1 << 30));
        for bad in ["", "12 parsecs", "-1", "KiB", "99999999999999999999G"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn micros_saturate() {
        assert_eq!(micros(Duration::from_millis(3)), 3000);
        assert_eq!(micros(Duration::MAX), u64::MAX);
    }

    #[test]
    fn durations_parse_in_every_form_the_crates_accepted() {
        let ms = Duration::from_millis;
        let secs = Duration::from_secs;
        for (text, want) in [
            // Command-line flags: spans with units, fractions, words.
            ("10s", secs(10)),
            ("10m", secs(600)),
            ("1h30m", secs(5400)),
            ("500ms", ms(500)),
            ("2h 37min", secs(9420)),
            ("1hour 12min 5s", secs(4325)),
            ("4.2s", ms(4200)),
            ("2 days", secs(172_800)),
            ("1w", secs(604_800)),
            ("1M", secs(2_630_016)),
            ("1y", secs(31_557_600)),
            ("3us", Duration::from_micros(3)),
            ("3µs", Duration::from_micros(3)),
            ("7ns", Duration::from_nanos(7)),
            ("1.5h", secs(5400)),
            ("1 000 ms", secs(1)),
            ("5s3m", secs(185)),
            // CQL URL timeouts: a bare number is seconds, decimals, `min`.
            ("3", secs(3)),
            ("0.5", ms(500)),
            ("1.", secs(1)),
            (".25s", ms(250)),
            ("2min", secs(120)),
            // Encryption URL parameters: `0`, bare seconds, `h`, a leading `+`.
            ("0", Duration::ZERO),
            ("600", secs(600)),
            ("250ms", ms(250)),
            ("2h", secs(7200)),
            ("+5s", secs(5)),
            (" 30s ", secs(30)),
            ("0.0000000015s", Duration::from_nanos(1)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text:?}");
        }
        for (bad, says) in [
            ("", "not a duration"),
            ("soon", "not a duration"),
            ("5x", "unknown unit \"x\""),
            ("1h 30", "not a duration"),
            ("-1s", "not a duration"),
            ("1.2.3s", "not a duration"),
            ("s", "not a duration"),
            (".", "not a duration"),
            ("5s -3s", "not a duration"),
            ("5 s s", "not a duration"),
            ("600000000000y", "too long"),
            ("99999999999999999999999999999999999999999s", "too long"),
        ] {
            let e = parse_duration(bad).expect_err(bad);
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    proptest::proptest! {
        #[test]
        fn a_duration_written_in_spans_parses_back(h in 0u64..10_000, m in 0u64..60, s in 0u64..60, ms in 0u64..1000) {
            let want = Duration::from_millis(((h * 60 + m) * 60 + s) * 1000 + ms);
            proptest::prop_assert_eq!(parse_duration(&format!("{h}h{m}m{s}s{ms}ms")), Ok(want));
            proptest::prop_assert_eq!(parse_duration(&format!("{h}h {m}min {s}.{ms:03}s")), Ok(want));
        }

        #[test]
        fn any_text_parses_or_is_refused_without_panicking(text in "\\PC{0,12}") {
            let _ = parse_duration(&text);
        }
    }
}
