//! `--bwlimit RATE`: bytes read from the source, at most RATE a second for the whole process
//! (every copy and stream shares one bucket), with an optional timetable as rclone writes it:
//! `"08:00,10M 19:00,off"` (from 08:00 10 MiB/s, from 19:00 no limit), also with seconds
//! (`08:00:30,1M`) and a weekday (`Mon-08:00,512k`). The rate in force is looked up on every
//! take, so a timetable switches mid-copy.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{Datelike, Timelike};

use crate::core::units::parse_size;

/// One entry of a timetable: from `at` (seconds into the week, or into the day when `day` is
/// None), `rate` bytes/s (None: no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    day: Option<u32>,
    at: u32,
    rate: Option<u64>,
}

/// A bandwidth limit: one rate, or a timetable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    slots: Vec<Slot>,
    text: String,
}

const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

fn rate(s: &str, whole: &str) -> Result<Option<u64>, String> {
    if s.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    match parse_size(s).map_err(|e| format!("'{whole}': {e}"))? {
        // no rate at all is no limit (as rclone's `0`), never a copy that stands still
        0 => Ok(None),
        r if r < 1024 => Err(format!("'{whole}': {r} B/s is below 1 KiB/s")),
        r => Ok(Some(r)),
    }
}

impl Schedule {
    /// Parses `10M`, `off`, or a timetable of `[Ddd-]HH:MM[:SS],RATE` entries separated by
    /// spaces. The error names the entry.
    pub fn parse(s: &str) -> Result<Schedule, String> {
        let text = s.trim().to_string();
        if text.is_empty() {
            return Err("empty bandwidth limit".into());
        }
        if !text.contains(',') {
            if text.contains(':') || text.contains(char::is_whitespace) {
                return Err(format!(
                    "'{text}': a timetable is TIME,RATE entries (08:00,10M 19:00,off)"
                ));
            }
            let r = rate(&text, &text)?;
            return Ok(Schedule {
                slots: vec![Slot {
                    day: None,
                    at: 0,
                    rate: r,
                }],
                text,
            });
        }
        let mut slots = Vec::new();
        for entry in text.split_whitespace() {
            let (when, r) = entry
                .split_once(',')
                .ok_or_else(|| format!("'{entry}': expected TIME,RATE (08:00,10M)"))?;
            let (day, clock) = match when.split_once('-') {
                Some((d, c)) => {
                    let i = DAYS
                        .iter()
                        .position(|x| x.eq_ignore_ascii_case(d))
                        .ok_or_else(|| format!("'{entry}': unknown day '{d}' (Mon..Sun)"))?;
                    (Some(i as u32), c)
                }
                None => (None, when),
            };
            let parts: Vec<&str> = clock.split(':').collect();
            let num = |p: &str, max: u32| -> Result<u32, String> {
                p.parse::<u32>()
                    .ok()
                    .filter(|v| *v < max)
                    .ok_or_else(|| format!("'{entry}': '{clock}' is not a time (HH:MM)"))
            };
            let at = match parts.as_slice() {
                [h, m] => num(h, 24)? * 3600 + num(m, 60)? * 60,
                [h, m, sec] => num(h, 24)? * 3600 + num(m, 60)? * 60 + num(sec, 60)?,
                _ => return Err(format!("'{entry}': '{clock}' is not a time (HH:MM)")),
            };
            slots.push(Slot {
                day,
                at,
                rate: rate(r, entry)?,
            });
        }
        slots.sort_by_key(|s| s.day.map(|d| d * 86_400).unwrap_or(0) + s.at);
        let daily = slots.iter().all(|s| s.day.is_none());
        let weekly = slots.iter().all(|s| s.day.is_some());
        if !(daily || weekly) {
            return Err(format!(
                "'{text}': give every entry a day (Mon-08:00,…) or none"
            ));
        }
        Ok(Schedule { slots, text })
    }

    /// The rate in force at `weekday` (0 = Monday), `secs` seconds into the day: the last
    /// entry at or before it, wrapping around to the day's (week's) last entry.
    pub fn rate_at(&self, weekday: u32, secs: u32) -> Option<u64> {
        let key = |s: &Slot| s.day.map(|d| d * 86_400).unwrap_or(0) + s.at;
        let now = match self.slots.first().and_then(|s| s.day) {
            Some(_) => weekday * 86_400 + secs,
            None => secs,
        };
        // sorted when parsed
        self.slots
            .iter()
            .rev()
            .find(|s| key(s) <= now)
            .or(self.slots.last())
            .and_then(|s| s.rate)
    }

    /// The rate in force now (local time, as rclone reads its timetable).
    pub fn rate_now(&self) -> Option<u64> {
        let now = chrono::Local::now();
        self.rate_at(
            now.weekday().num_days_from_monday(),
            now.num_seconds_from_midnight(),
        )
    }

    pub fn text(&self) -> &str {
        &self.text
    }
}

/// The process's limiter: a token bucket whose rate follows the schedule.
#[derive(Debug)]
pub struct BwLimit {
    schedule: Schedule,
    /// (tokens, last refill, rate it was refilled at)
    state: Mutex<(f64, Instant)>,
}

impl BwLimit {
    pub fn new(schedule: Schedule) -> BwLimit {
        BwLimit {
            schedule,
            state: Mutex::new((0.0, Instant::now())),
        }
    }

    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// Waits until `n` bytes may be read. Bursts up to a tenth of a second's worth (at least
    /// 64 KiB); with no limit in force, at once.
    pub async fn take(&self, n: u64) {
        let mut need = n as f64;
        while let Some(w) = self.step(&mut need) {
            tokio::time::sleep(w).await;
        }
    }

    /// [`BwLimit::take`] for a thread of the blocking pool (local files).
    pub fn take_blocking(&self, n: u64) {
        let mut need = n as f64;
        while let Some(w) = self.step(&mut need) {
            std::thread::sleep(w);
        }
    }

    /// Grants what the bucket holds towards `need`; the pause before the next look, or None
    /// when all is granted (or no limit is in force).
    fn step(&self, need: &mut f64) -> Option<Duration> {
        if *need <= 0.0 {
            return None;
        }
        let rate = self.schedule.rate_now()? as f64;
        let burst = (rate / 10.0).max(64.0 * 1024.0);
        let mut st = self.state.lock().ok()?;
        let now = Instant::now();
        let tokens = (st.0 + now.duration_since(st.1).as_secs_f64() * rate).min(burst);
        let grant = tokens.min(*need).max(0.0);
        *need -= grant;
        *st = (tokens - grant, now);
        // at most a quarter second at a time: a timetable may lift the limit
        (*need > 0.0).then(|| Duration::from_secs_f64((need.min(burst) / rate).min(0.25)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rates_and_timetables() {
        let s = Schedule::parse("8M").unwrap();
        assert_eq!(s.rate_at(0, 0), Some(8 << 20));
        assert_eq!(Schedule::parse("off").unwrap().rate_at(3, 100), None);
        assert_eq!(Schedule::parse("0M").unwrap().rate_at(3, 100), None);
        assert!(Schedule::parse("0.5k")
            .unwrap_err()
            .contains("below 1 KiB/s"));
        // entries in any order
        let u = Schedule::parse("19:00,off 08:00,10M").unwrap();
        assert_eq!(u.rate_at(0, 9 * 3600), Some(10 << 20));
        let t = Schedule::parse("08:00,10M 19:00,off").unwrap();
        let h = |x: u32| x * 3600;
        // (weekday, seconds into the day, rate)
        let cases = [
            (0, h(9), Some(10 << 20)),
            (0, h(8), Some(10 << 20)),
            (0, h(19), None),
            (0, h(23), None),
            (0, h(3), None), // before the first entry: the day's last one still holds
        ];
        for (d, secs, want) in cases {
            assert_eq!(t.rate_at(d, secs), want, "{d} {secs}");
        }
        let w = Schedule::parse("Mon-08:00,512k Fri-18:00:30,off").unwrap();
        assert_eq!(w.rate_at(2, h(12)), Some(512 << 10));
        assert_eq!(w.rate_at(4, h(18) + 30), None);
        assert_eq!(w.rate_at(0, h(1)), None); // Monday night: Friday's entry
        for (bad, named) in [
            ("", "empty"),
            ("25:00,1M", "'25:00,1M'"),
            ("08:00 10M", "TIME,RATE"),
            ("Xyz-08:00,1M", "unknown day 'Xyz'"),
            ("08:00,fast", "'08:00,fast'"),
            ("Mon-08:00,1M 09:00,off", "every entry a day"),
        ] {
            let e = Schedule::parse(bad).unwrap_err();
            assert!(e.contains(named), "{bad}: {e}");
        }
    }
}
