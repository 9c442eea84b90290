//! The delete brake's policy (pure): how many deletes a pair may apply within a sliding
//! window before the daemon holds the rest for an operator. `--max-delete` means the same for
//! `--once`; this is its meaning for a daemon that applies deletes one event at a time.

use std::time::Duration;

/// Deletes fewer than this never engage the brake (a small pair deleting a few files).
pub const FLOOR: u64 = 10;

/// How much a pair may delete within its window.
#[derive(Debug, Clone, PartialEq)]
pub enum Limit {
    /// No brake (`off`).
    Off,
    /// At most this many deletes.
    Count(u64),
    /// At most this share of the objects the manifest held for the source at the window's
    /// start (and never fewer than [`FLOOR`]).
    Percent(f64),
}

/// A pair's brake: its limit and its window.
#[derive(Debug, Clone, PartialEq)]
pub struct BrakePolicy {
    pub limit: Limit,
    pub window: Duration,
}

impl Default for BrakePolicy {
    /// Half of the source's objects within 10 minutes (and more than [`FLOOR`]).
    fn default() -> Self {
        BrakePolicy {
            limit: Limit::Percent(50.0),
            window: Duration::from_secs(600),
        }
    }
}

impl BrakePolicy {
    /// `off`, a count (`100`) or a percentage (`50%`), with a window (`10m`).
    pub fn parse(limit: &str, window: Option<&str>) -> Result<BrakePolicy, String> {
        let l = limit.trim();
        let limit = if l.eq_ignore_ascii_case("off") {
            Limit::Off
        } else if let Some(p) = l.strip_suffix('%') {
            let p: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("'{l}' is not a percentage like 50%"))?;
            if !(p > 0.0 && p <= 100.0) {
                return Err(format!("'{l}': a percentage above 0 and at most 100"));
            }
            Limit::Percent(p)
        } else {
            let n: u64 = l
                .parse()
                .map_err(|_| format!("'{l}' is neither a count, a percentage (50%) nor off"))?;
            if n == 0 {
                return Err("0 would hold every delete: say off, or a count above 0".into());
            }
            Limit::Count(n)
        };
        let window = match window {
            None => Duration::from_secs(600),
            Some(w) => {
                let d = crate::core::filter::parse_age(w)?;
                if d.is_zero() {
                    return Err("the window must be longer than 0".into());
                }
                d
            }
        };
        Ok(BrakePolicy { limit, window })
    }

    pub fn is_off(&self) -> bool {
        self.limit == Limit::Off
    }

    /// The most deletes the window takes, given `base` objects at its start.
    pub fn limit(&self, base: u64) -> u64 {
        match self.limit {
            Limit::Off => u64::MAX,
            Limit::Count(n) => n,
            Limit::Percent(p) => ((base as f64 * p / 100.0).floor() as u64).max(FLOOR),
        }
    }

    /// Whether the `n`th delete of a window whose base is `base` may be applied.
    pub fn allows(&self, n: u64, base: u64) -> bool {
        n <= self.limit(base)
    }

    /// `50% per 10m`, `100 per 1h`, `off`.
    pub fn text(&self) -> String {
        match self.limit {
            Limit::Off => "off".into(),
            Limit::Count(n) => format!("{n}"),
            Limit::Percent(p) => format!("{p}%"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_limit() {
        // (limit, window) → Ok(limit for a base of 200, window secs) or an error
        type Case<'a> = (&'a str, Option<&'a str>, Result<(u64, u64), ()>);
        let cases: &[Case] = &[
            ("50%", None, Ok((100, 600))),
            ("50%", Some("1h"), Ok((100, 3600))),
            ("10%", None, Ok((20, 600))),
            ("1%", None, Ok((FLOOR, 600))), // 2 → the floor
            ("100", Some("30s"), Ok((100, 30))),
            ("off", None, Ok((u64::MAX, 600))),
            ("OFF", None, Ok((u64::MAX, 600))),
            ("0", None, Err(())),
            ("150%", None, Err(())),
            ("0%", None, Err(())),
            ("lots", None, Err(())),
            ("50%", Some("0s"), Err(())),
            ("50%", Some("soon"), Err(())),
        ];
        for (limit, window, want) in cases {
            let got = BrakePolicy::parse(limit, *window)
                .map(|p| (p.limit(200), p.window.as_secs()))
                .map_err(|_| ());
            assert_eq!(&got, want, "{limit} {window:?}");
        }
    }

    #[test]
    fn the_default_brakes_past_half_and_never_below_the_floor() {
        let p = BrakePolicy::default();
        // (nth delete, base, allowed)
        for (n, base, want) in [
            (100, 200, true),
            (101, 200, false),
            (10, 4, true), // a small pair: the floor
            (11, 4, false),
            (1, 0, true),
            (500_000, 1_000_000, true),
            (500_001, 1_000_000, false),
        ] {
            assert_eq!(p.allows(n, base), want, "delete {n} of a base of {base}");
        }
        assert!(BrakePolicy::parse("off", None).unwrap().allows(u64::MAX, 0));
    }
}
