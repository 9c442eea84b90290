//! Quantities as people write them and read them: byte sizes (`64MiB`) and timestamps
//! (RFC 3339). Pure: the config, the CLI and job requests all parse sizes the same way.

/// Parses a byte size: `1048576`, `64MiB`, `64M` (= MiB), `1GiB`, `512k`, `1.5GiB`, and
/// rclone's spellings (`16Mi`, `1Gi`, `512Ki`): every unit is a power of 1024, as rclone's.
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (e.g. 64MiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "ki" | "kib" => 1 << 10,
        "m" | "mb" | "mi" | "mib" => 1 << 20,
        "g" | "gb" | "gi" | "gib" => 1 << 30,
        "t" | "tb" | "ti" | "tib" => 1 << 40,
        "p" | "pb" | "pi" | "pib" => 1 << 50,
        other => {
            return Err(format!(
                "unknown unit '{other}' in '{s}' (use B, KiB, MiB, GiB, TiB, PiB; or rclone's Ki, Mi, Gi, Ti, Pi)"
            ))
        }
    };
    let v = num * mult as f64;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(format!("'{s}' is out of range"));
    }
    Ok(v as u64)
}

/// Unix milliseconds as RFC 3339 UTC (`2024-05-01T12:00:00.000Z`); empty when out of range.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// A duration as a person reads it: `45s`, `10m`, `2h`, `3d` (the largest whole unit).
pub fn human_duration(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if s >= 86_400 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        _ if s >= 3_600 && s % 3_600 == 0 => format!("{}h", s / 3_600),
        _ if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        let ok = [
            ("1048576", 1 << 20),
            ("64MiB", 64 << 20),
            ("64M", 64 << 20),
            // rclone's spellings
            ("16Mi", 16 << 20),
            ("256Mi", 256 << 20),
            ("1Gi", 1 << 30),
            ("512Ki", 512 << 10),
            ("2Ti", 2 << 40),
            ("1P", 1 << 50),
            ("1GiB", 1 << 30),
            ("512k", 512 << 10),
            ("1.5GiB", 3 << 29),
            ("7 B", 7),
        ];
        for (s, want) in ok {
            assert_eq!(parse_size(s), Ok(want), "{s}");
        }
        for s in ["", "MiB", "12XB", "-1", "1e999GiB"] {
            assert!(parse_size(s).is_err(), "{s}");
        }
    }

    #[test]
    fn timestamps_are_utc_with_milliseconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }
}
