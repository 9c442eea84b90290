//! A range of keys: what one partition of a partitioned reconcile walks, and what a listing
//! of it asks the store for. A plain type of the bottom layer, so that the stores use it
//! without importing the engine.

/// A range of keys, relative to the pair's prefixes: after `after` (exclusive) through
/// `through` (inclusive); None is open. A partition of a partitioned reconcile walks one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyRange {
    pub after: Option<String>,
    pub through: Option<String>,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> KeyRange {
        KeyRange::default()
    }

    /// Whether `key` comes before the range (at or below `after`).
    pub fn before(&self, key: &str) -> bool {
        self.after.as_deref().is_some_and(|a| key <= a)
    }

    /// Whether `key` comes after the range (above `through`).
    pub fn beyond(&self, key: &str) -> bool {
        self.through.as_deref().is_some_and(|t| key > t)
    }

    pub fn contains(&self, key: &str) -> bool {
        !self.before(key) && !self.beyond(key)
    }

    /// Whether no key under the folder `dir` (ending in `/`) can be in the range.
    pub fn misses_folder(&self, dir: &str) -> bool {
        // every key under `dir` starts with it: all of them are at or below an `after` that
        // sorts above `dir` without starting with it, and all are above a `through` that
        // sorts below `dir`
        let below = self
            .after
            .as_deref()
            .is_some_and(|a| a > dir && !a.starts_with(dir));
        below || self.through.as_deref().is_some_and(|t| t < dir)
    }

    pub fn is_all(&self) -> bool {
        self.after.is_none() && self.through.is_none()
    }

    /// `(a, b]` for the log.
    pub fn text(&self) -> String {
        format!(
            "({}, {}]",
            self.after
                .as_deref()
                .map_or("first key".into(), |a| format!("'{a}'")),
            self.through
                .as_deref()
                .map_or("last key".into(), |t| format!("'{t}'"))
        )
    }
}

/// Where a listing might be cut to go on in parallel, from one page of its keys (`page`, in key
/// order): up to `n` keys above the page's last, each about `pages` pages of keys beyond the
/// one before (the page's spread, extrapolated), all strictly below `below` (None: open).
///
/// Keys are read as numbers in the radix of the characters the page holds (a missing
/// character, past a key's end, is the smallest digit), from a few characters before the
/// first one in which the page's first and last keys differ, so that a page of
/// `f0000`..`f0999` extrapolates to `f1…` as decimal counting does, and a cut is made of
/// characters the keys use (valid UTF-8 whatever they hold). `level` (a folder's level, as a
/// listing with a delimiter walks it): no cut holds a `/` after it, so that a folder is never
/// split between two spans.
pub fn cuts(
    page: &[&str],
    pages: u32,
    n: usize,
    below: Option<&str>,
    level: Option<&str>,
) -> Vec<String> {
    /// Characters before the first differing one that the numbers start at (room to carry).
    const CARRY: usize = 4;
    let (Some(first), Some(last)) = (page.first().copied(), page.last().copied()) else {
        return Vec::new();
    };
    if first >= last || n == 0 || pages == 0 {
        return Vec::new();
    }
    let floor = level.map_or(0, str::len);
    if !last.is_char_boundary(floor) || !first.starts_with(&last[..floor]) {
        return Vec::new();
    }
    let common = first
        .char_indices()
        .zip(last.chars())
        .take_while(|((_, a), b)| a == b)
        .last()
        .map_or(0, |((i, c), _)| i + c.len_utf8());
    // a few characters back from where they differ, never into the level
    let mut q = common;
    for _ in 0..CARRY {
        if q <= floor {
            break;
        }
        q = last[..q].char_indices().last().map_or(0, |(i, _)| i);
    }
    let q = q.max(floor);
    let head = &last[..q];
    let mut alphabet: Vec<char> = page
        .iter()
        .filter(|k| k.starts_with(head))
        .flat_map(|k| k[q..].chars())
        .collect();
    alphabet.sort_unstable();
    alphabet.dedup();
    let radix = alphabet.len() as u128 + 1;
    // digits that fit in 127 bits
    let width = (127.0 / (radix as f64).log2()).floor() as usize;
    if width == 0 {
        return Vec::new();
    }
    let num = |k: &str| -> u128 {
        let mut chars = k[q..].chars();
        (0..width).fold(0u128, |acc, _| {
            let d = chars
                .next()
                .and_then(|c| alphabet.binary_search(&c).ok())
                .map_or(0, |r| r as u128 + 1);
            acc * radix + d
        })
    };
    let (a, b) = (num(first), num(last));
    let Some(step) = b
        .checked_sub(a)
        .and_then(|d| d.checked_mul(u128::from(pages)))
        .filter(|s| *s > 0)
    else {
        return Vec::new();
    };
    let text = |mut v: u128| -> Option<String> {
        let mut digits = vec![0u128; width];
        for d in digits.iter_mut().rev() {
            *d = v % radix;
            v /= radix;
        }
        if v > 0 {
            return None; // past the key space these characters can write
        }
        let end = digits.iter().rposition(|d| *d != 0).map_or(0, |i| i + 1);
        let mut s = head.to_string();
        for d in &digits[..end] {
            // a missing character before others reads as the smallest one
            s.push(alphabet[(*d as usize).max(1) - 1]);
        }
        Some(s)
    };
    let fits = |out: &[String], cut: &str| {
        let above = out.last().map_or(last, String::as_str);
        let slash = level.is_some() && cut[floor..].contains('/');
        cut > above && below.is_none_or(|b| cut < b) && !slash
    };
    let mut out: Vec<String> = Vec::with_capacity(n);
    let mut at = b;
    while out.len() < n {
        let Some(cut) = at.checked_add(step).and_then(|v| {
            at = v;
            text(v)
        }) else {
            // past what the page's characters write: one last cut where the page's leading
            // character is the next one (the keys beyond are unknown; their span cuts again)
            let next = last[q..]
                .chars()
                .next()
                .and_then(|c| char::from_u32(c as u32 + 1).or(char::from_u32(0xE000)))
                .map(|c| format!("{head}{c}"));
            if let Some(cut) = next.filter(|c| fits(&out, c)) {
                out.push(cut);
            }
            break;
        };
        if !fits(&out, &cut) {
            break;
        }
        out.push(cut);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{cuts, KeyRange};

    fn r(after: Option<&str>, through: Option<&str>) -> KeyRange {
        KeyRange {
            after: after.map(str::to_string),
            through: through.map(str::to_string),
        }
    }

    #[test]
    fn a_range_holds_keys_after_its_start_through_its_end() {
        // (range, key, contains)
        let cases = [
            (r(None, None), "a", true),
            (r(Some("b"), None), "b", false),
            (r(Some("b"), None), "b0", true),
            (r(None, Some("m")), "m", true),
            (r(None, Some("m")), "m/", false),
            (r(Some("a/x"), Some("c")), "a/y", true),
            (r(Some("a/x"), Some("c")), "a/w", false),
            (r(Some("a/x"), Some("c")), "c0", false),
        ];
        for (range, key, want) in cases {
            assert_eq!(range.contains(key), want, "{} holds {key}", range.text());
        }
    }

    #[test]
    fn a_folder_is_skipped_only_when_none_of_its_keys_can_be_in_range() {
        // (range, folder, missed)
        let cases = [
            (r(Some("b"), None), "a/", true),
            (r(Some("a/x"), None), "a/", false), // a/y is after a/x
            (r(Some("a0"), None), "a/", true),   // '/' sorts before '0'
            (r(Some("a"), None), "a/", false),
            (r(None, Some("a/m")), "a/", false),
            (r(None, Some("a")), "a/", true),
            (r(None, Some("a.txt")), "a/", true), // '.' sorts before '/'
            (r(None, Some("a0")), "a/", false),
            (r(None, None), "z/", false),
        ];
        for (range, dir, want) in cases {
            assert_eq!(
                range.misses_folder(dir),
                want,
                "{} misses {dir}",
                range.text()
            );
        }
    }

    /// Where `cut` falls in `all` (sorted): how many keys sort at or below it.
    fn rank(all: &[String], cut: &str) -> usize {
        all.partition_point(|k| k.as_str() <= cut)
    }

    #[test]
    fn cuts_fall_about_as_many_pages_ahead_as_asked() {
        let hex = |i: u64| format!("{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        // (what the keys are, how many, page size, pages per cut)
        type Keys = Box<dyn Fn(u64) -> String>;
        let cases: Vec<(&str, Keys, u64, usize, u32)> = vec![
            (
                "counted",
                Box::new(|i| format!("f{i:04}")),
                10_000,
                1_000,
                1,
            ),
            (
                "counted, 3 pages",
                Box::new(|i| format!("f{i:04}")),
                10_000,
                1_000,
                3,
            ),
            ("content hashes", Box::new(hex), 50_000, 1_000, 2),
            (
                "hashes in a tree",
                Box::new(move |i| {
                    let h = hex(i);
                    format!("{}/{}/{h}.bin", &h[..2], &h[2..4])
                }),
                50_000,
                1_000,
                2,
            ),
            (
                "unicode names",
                Box::new(|i| format!("\u{e9}t\u{e9}-{i:05}.txt")),
                20_000,
                500,
                2,
            ),
            (
                "small pages",
                Box::new(|i| format!("k{i:05}")),
                3_000,
                20,
                4,
            ),
        ];
        for (what, key, count, size, pages) in cases {
            let mut all: Vec<String> = (0..count).map(&key).collect();
            all.sort();
            let page: Vec<&str> = all[..size].iter().map(String::as_str).collect();
            let got = cuts(&page, pages, 3, None, None);
            assert_eq!(got.len(), 3, "{what}: {got:?}");
            let mut before = size;
            for (j, cut) in got.iter().enumerate() {
                let at = rank(&all, cut);
                let ideal = size * (1 + (j + 1) * pages as usize);
                assert!(
                    at > before && at >= ideal / 3 && at <= ideal * 3,
                    "{what}: cut {j} {cut:?} falls at key {at}, {ideal} would be {pages} page(s) on"
                );
                before = at;
            }
        }
    }

    #[test]
    fn cuts_stay_below_the_range_and_out_of_folders() {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // (page, below, level, cuts)
        type Case<'a> = (Vec<&'a str>, Option<&'a str>, Option<&'a str>, Vec<String>);
        let cases: Vec<Case> = vec![
            (vec!["a0", "a5", "b0"], None, None, own(&["c"])),
            (vec!["a00", "a05", "a10"], None, None, own(&["a50", "aa0"])),
            (vec!["a00", "a05", "a10"], Some("a60"), None, own(&["a50"])),
            (vec!["a00", "a05", "a10"], Some("a50"), None, own(&[])),
            // at a level, a cut never holds a '/' after it (it would fall inside a folder)
            (
                vec!["x/a0", "x/a5", "x/b0"],
                None,
                Some("x/"),
                own(&["x/c"]),
            ),
            (vec!["x/a", "x/a/", "x/b/"], None, Some("x/"), own(&["x/c"])),
            (
                vec!["x/a-", "x/a.", "x/a/"],
                None,
                Some("x/"),
                own(&["x/b"]),
            ),
            (vec!["x/0/", "x/00", "x/01"], None, Some("x/"), own(&[])),
            (
                vec!["x/0/", "x/00", "x/01"],
                None,
                None,
                own(&["x/1", "x/10"]),
            ),
            (vec!["x/a/0", "x/a/1"], None, None, own(&["x/a/a", "x/a/x"])),
            // nothing to extrapolate
            (vec!["b", "a"], None, None, own(&[])),
            (vec!["a", "a"], None, None, own(&[])),
            (vec!["a"], None, None, own(&[])),
            // the key space those characters write runs out
            (vec!["a", "b", "c"], None, None, own(&["d"])),
            (vec!["a", "b", "c"], Some("d"), None, own(&[])),
        ];
        for (page, below, level, want) in cases {
            let got = cuts(&page, 1, 2, below, level);
            assert_eq!(got, want, "cuts of {page:?} below {below:?} at {level:?}");
        }
    }
}
