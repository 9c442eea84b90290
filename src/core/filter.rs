//! `--include`, `--exclude` and `--max-age`: which keys a reconcile looks at. Keys a filter
//! leaves out are neither copied nor deleted, on either side (as with rclone's filters).
//!
//! Globs match the key relative to the pair's prefix: `*` any run of characters but `/`, `**`
//! any run including `/`, `?` one character but `/`. A pattern without `/` also matches the
//! last segment of a key (`*.tmp` matches `a/b/c.tmp`).

use std::time::{Duration, SystemTime};

/// Parses `7d`, `12h`, `30m`, `45s`, `2w`.
pub fn parse_age(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("'{s}' is not an age (e.g. 7d, 12h)"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" | "" => 86_400,
        "w" => 7 * 86_400,
        other => {
            return Err(format!(
                "unknown unit '{other}' in '{s}' (use s, m, h, d, w)"
            ))
        }
    };
    Ok(Duration::from_secs(n.saturating_mul(secs)))
}

/// Matches `text` against a glob.
pub fn glob(pattern: &str, text: &str) -> bool {
    fn rec(p: &[u8], t: &[u8]) -> bool {
        match p.first() {
            None => t.is_empty(),
            Some(b'*') if p.get(1) == Some(&b'*') => {
                let rest = &p[2..];
                // `**/` also matches nothing
                let rest_noslash = rest.strip_prefix(b"/").unwrap_or(rest);
                (0..=t.len()).any(|i| rec(rest, &t[i..]) || rec(rest_noslash, &t[i..]))
            }
            Some(b'*') => {
                let rest = &p[1..];
                for i in 0..=t.len() {
                    if rec(rest, &t[i..]) {
                        return true;
                    }
                    if i < t.len() && t[i] == b'/' {
                        return false;
                    }
                }
                false
            }
            Some(b'?') => !t.is_empty() && t[0] != b'/' && rec(&p[1..], &t[1..]),
            Some(c) => t.first() == Some(c) && rec(&p[1..], &t[1..]),
        }
    }
    if !pattern.contains('/') {
        let last = text.rsplit('/').next().unwrap_or(text);
        return rec(pattern.as_bytes(), last.as_bytes());
    }
    rec(pattern.trim_start_matches('/').as_bytes(), text.as_bytes())
}

/// The filters of one reconcile.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub max_age: Option<Duration>,
}

impl Filter {
    /// Whether the key is looked at. Excludes win over includes; no include means all.
    pub fn key(&self, key: &str) -> bool {
        if self.exclude.iter().any(|p| glob(p, key)) {
            return false;
        }
        self.include.is_empty() || self.include.iter().any(|p| glob(p, key))
    }

    /// Whether an object modified at `mtime` is young enough (no mtime: yes).
    pub fn age(&self, mtime: Option<SystemTime>, now: SystemTime) -> bool {
        match (self.max_age, mtime) {
            (Some(max), Some(t)) => now.duration_since(t).map(|age| age <= max).unwrap_or(true),
            _ => true,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.include.is_empty() && self.exclude.is_empty() && self.max_age.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let cases = [
            ("shards/**", "shards/a/b.bin", true),
            ("shards/**", "shards/x", true),
            ("shards/**", "other/shards/x", false),
            ("*.tmp", "a/b/c.tmp", true),
            ("*.tmp", "a/b/c.tmpx", false),
            ("a/*.bin", "a/x.bin", true),
            ("a/*.bin", "a/b/x.bin", false),
            ("a/**/x.bin", "a/x.bin", true),
            ("a/**/x.bin", "a/b/c/x.bin", true),
            ("file?.txt", "dir/file1.txt", true),
            ("file?.txt", "dir/file12.txt", false),
            ("/top/*", "top/y", true),
        ];
        for (p, t, want) in cases {
            assert_eq!(glob(p, t), want, "{p} vs {t}");
        }
    }

    #[test]
    fn filters_combine() {
        let f = Filter {
            include: vec!["shards/**".into()],
            exclude: vec!["*.tmp".into()],
            max_age: None,
        };
        assert!(f.key("shards/a.bin"));
        assert!(!f.key("shards/a.tmp"));
        assert!(!f.key("other/a.bin"));
        assert!(Filter::default().key("anything"));
        let now = SystemTime::now();
        let f = Filter {
            max_age: Some(Duration::from_secs(7 * 86_400)),
            ..Default::default()
        };
        assert!(f.age(Some(now - Duration::from_secs(86_400)), now));
        assert!(!f.age(Some(now - Duration::from_secs(8 * 86_400)), now));
        assert!(f.age(None, now));
    }

    #[test]
    fn ages() {
        assert_eq!(parse_age("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_age("12h"), Ok(Duration::from_secs(12 * 3600)));
        assert_eq!(parse_age("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert!(parse_age("7y").is_err());
        assert!(parse_age("d").is_err());
    }
}
