//! Units: byte sizes ([`KIB`], [`MIB`], [`parse_size`]) and durations in microseconds ([`micros`]). A leaf: it
//! uses no other module of the crate.

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
}
