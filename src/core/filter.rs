//! `--include`, `--exclude`, `--files-from`, `--min-size`/`--max-size` and
//! `--min-age`/`--max-age`: which keys a reconcile looks at. Keys a filter
//! leaves out are neither copied nor deleted, on either side (as with rclone's filters).
//!
//! Globs match the key relative to the pair's prefix: `*` any run of characters but `/`, `**`
//! any run including `/` (`a/**/b` also matches `a/b`), `?` one character (not one byte) but
//! `/`. Every other character is literal, `[`, `{` and `\` included. A pattern without `/` also
//! matches the last segment of a key (`*.tmp` matches `a/b/c.tmp`); a leading `/` anchors
//! nothing more than the pattern already does (`/top/*` is `top/*`).
//!
//! A [`Filter`] is built once from the patterns ([`Filter::new`] refuses a bad one, naming it)
//! and holds them compiled: globset parses each glob into a regular expression and
//! regex-automata runs all of a list's at once, in time linear in the key (no backtracking).
//! globset matches `?` against one byte and a mid-segment `**` against no `/` (it is made for
//! paths that need not be UTF-8); its expression is adjusted for both before it is compiled.

use std::time::{Duration, SystemTime};

use regex_automata::meta::Regex;
use regex_automata::util::syntax;

/// Most patterns in one list (`include` or `exclude`): a caller of the jobs API sends them.
pub const MAX_PATTERNS: usize = 100;
/// Longest pattern, in bytes.
pub const MAX_PATTERN_BYTES: usize = 1024;

/// Parses `7d`, `12h`, `30m`, `45s`, `2w`.
pub fn parse_age(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("'{s}' is not an age (e.g. 7d, 12h)"))?;
    if unit == "ms" {
        return Ok(Duration::from_millis(n));
    }
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" | "" => 86_400,
        "w" => 7 * 86_400,
        // rclone's month and year
        "M" => 30 * 86_400,
        "y" => 365 * 86_400,
        other => {
            return Err(format!(
            "unknown unit '{other}' in '{s}' (use ms, s, m, h, d, w, M, y; a bare number is days)"
        ))
        }
    };
    Ok(Duration::from_secs(n.saturating_mul(secs)))
}

/// Why a pattern list was refused. `list` is `"include"` or `"exclude"`; `pattern` is the
/// refused pattern as shown (cut when long), absent when the list as a whole is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternError {
    pub list: &'static str,
    pub pattern: Option<String>,
    pub why: String,
}

impl std::fmt::Display for PatternError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.pattern {
            Some(p) => write!(f, "pattern '{p}': {}", self.why),
            None => f.write_str(&self.why),
        }
    }
}

impl std::error::Error for PatternError {}

/// A pattern as an error message shows it: one line, at most 64 characters.
fn shown(pattern: &str) -> String {
    let mut out: String = pattern.chars().take(64).collect::<String>();
    if out.len() < pattern.len() {
        out.push('…');
    }
    out.escape_debug().to_string()
}

/// One glob as a regular expression for regex-automata (bytes, Unicode off, anchored).
fn translate(pattern: &str) -> Result<String, String> {
    // only `*` and `?` are special: escape what globset would read as a class, an
    // alternation or an escape
    let mut glob = String::with_capacity(pattern.len() + 8);
    for c in pattern.chars() {
        if matches!(c, '[' | ']' | '{' | '}' | '\\') {
            glob.push('\\');
        }
        glob.push(c);
    }
    let parsed = globset::GlobBuilder::new(&glob)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| e.kind().to_string())?;
    // globset writes `*` as `[^/]*` and `?` as `[^/]`, both over bytes (its expression is
    // `(?-u)`), and a `**` inside a segment as two `*`. Literals are escaped (`\[`, `\^`,
    // `\xc3`), so `[^/]` stands for nothing else. A run of bytes is a run of characters
    // here: every literal and every `?` is a whole character, and UTF-8 is self-synchronising.
    let re = parsed.regex().replace("[^/]*[^/]*", ".*");
    let mut out = String::with_capacity(re.len() + 16);
    let mut rest = re.as_str();
    while let Some(i) = rest.find("[^/]") {
        out.push_str(&rest[..i + 4]);
        rest = &rest[i + 4..];
        if !rest.starts_with('*') {
            // a lone `[^/]` is a `?`: one character. The keys are UTF-8 (`&str`), so a lead
            // byte tells the length of its character.
            out.truncate(out.len() - 4);
            out.push_str(ONE_CHAR);
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// One UTF-8 character but `/`, in a `(?-u)` expression over valid UTF-8.
const ONE_CHAR: &str = r"(?:[\x00-\x2e\x30-\x7f]|[\xc0-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf7][\x80-\xbf]{3})";

/// Compiles expressions into one matcher (`None` for none).
fn compile(exprs: &[String]) -> Result<Option<Regex>, String> {
    if exprs.is_empty() {
        return Ok(None);
    }
    Regex::builder()
        .syntax(syntax::Config::new().utf8(false).dot_matches_new_line(true))
        .configure(
            Regex::config()
                .utf8_empty(false)
                .nfa_size_limit(Some(10 << 20)),
        )
        .build_many(exprs)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// One list of globs, compiled.
#[derive(Clone, Default)]
struct Globs {
    texts: Vec<String>,
    /// The patterns without `/`, matched against a key's last segment.
    segment: Option<Regex>,
    /// The others, matched against the whole key.
    path: Option<Regex>,
}

impl Globs {
    fn new(list: &'static str, texts: Vec<String>) -> Result<Globs, PatternError> {
        let refuse = |pattern: &str, why: String| PatternError {
            list,
            pattern: Some(shown(pattern)),
            why,
        };
        if texts.len() > MAX_PATTERNS {
            return Err(PatternError {
                list,
                pattern: None,
                why: format!(
                    "{} patterns, more than the {MAX_PATTERNS} accepted",
                    texts.len()
                ),
            });
        }
        let (mut segment, mut path) = (Vec::new(), Vec::new());
        let (mut segment_texts, mut path_texts) = (Vec::new(), Vec::new());
        for t in &texts {
            if t.is_empty() {
                return Err(refuse(t, "empty pattern".into()));
            }
            if t.len() > MAX_PATTERN_BYTES {
                return Err(refuse(
                    t,
                    format!(
                        "{} bytes, more than the {MAX_PATTERN_BYTES} accepted",
                        t.len()
                    ),
                ));
            }
            if t.contains('/') {
                path.push(translate(t.trim_start_matches('/')).map_err(|why| refuse(t, why))?);
                path_texts.push(t);
            } else {
                segment.push(translate(t).map_err(|why| refuse(t, why))?);
                segment_texts.push(t);
            }
        }
        // a set that does not compile: find the pattern to blame
        let build = |exprs: &[String], texts: &[&String]| {
            compile(exprs).map_err(|why| {
                let culprit = exprs
                    .iter()
                    .zip(texts)
                    .find(|(e, _)| compile(std::slice::from_ref(*e)).is_err());
                match culprit {
                    Some((_, t)) => refuse(t, format!("too complex ({why})")),
                    None => PatternError {
                        list,
                        pattern: None,
                        why: format!("the patterns together are too complex ({why})"),
                    },
                }
            })
        };
        Ok(Globs {
            segment: build(&segment, &segment_texts)?,
            path: build(&path, &path_texts)?,
            texts,
        })
    }

    fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    fn matches(&self, key: &str) -> bool {
        if self.path.as_ref().is_some_and(|re| re.is_match(key)) {
            return true;
        }
        let last = key.rsplit('/').next().unwrap_or(key);
        self.segment.as_ref().is_some_and(|re| re.is_match(last))
    }
}

/// The filters of one reconcile: built by [`Filter::new`], which compiles the globs once.
#[derive(Clone, Default)]
pub struct Filter {
    include: Globs,
    exclude: Globs,
    pub max_age: Option<Duration>,
    /// `--min-age`: only objects older than this.
    pub min_age: Option<Duration>,
    /// `--min-size` / `--max-size` in bytes, both inclusive (as rclone's).
    pub min_size: Option<u64>,
    pub max_size: Option<u64>,
    /// `--files-from`: only these keys (exact, relative to the pair's prefix).
    pub files: Option<std::sync::Arc<std::collections::HashSet<String>>>,
    /// Leaves canary keys out (`diff`'s reports); otherwise every filter admits them.
    pub no_canaries: bool,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter")
            .field("include", &self.include.texts)
            .field("exclude", &self.exclude.texts)
            .field("max_age", &self.max_age)
            .field("min_age", &self.min_age)
            .field("min_size", &self.min_size)
            .field("max_size", &self.max_size)
            .field("files", &self.files.as_ref().map(|f| f.len()))
            .field("no_canaries", &self.no_canaries)
            .finish()
    }
}

impl Filter {
    /// Checks and compiles the globs: at most [`MAX_PATTERNS`] per list, none empty or longer
    /// than [`MAX_PATTERN_BYTES`]. The error names the list and the pattern.
    pub fn new(
        include: Vec<String>,
        exclude: Vec<String>,
        max_age: Option<Duration>,
    ) -> Result<Filter, PatternError> {
        Ok(Filter {
            include: Globs::new("include", include)?,
            exclude: Globs::new("exclude", exclude)?,
            max_age,
            ..Default::default()
        })
    }

    /// The include globs as given.
    pub fn include(&self) -> &[String] {
        &self.include.texts
    }

    /// The exclude globs as given.
    pub fn exclude(&self) -> &[String] {
        &self.exclude.texts
    }

    /// Whether the key is looked at. Excludes win over includes; no include means all. A
    /// canary's key ([`crate::core::canary`]) is always looked at, unless `no_canaries`.
    pub fn key(&self, key: &str) -> bool {
        if crate::core::canary::is_canary(key) {
            return !self.no_canaries;
        }
        if self.exclude.matches(key) {
            return false;
        }
        if let Some(files) = &self.files {
            if !files.contains(key) {
                return false;
            }
        }
        self.include.is_empty() || self.include.matches(key)
    }

    /// Whether an object modified at `mtime` is young enough and old enough (no mtime: yes).
    pub fn age(&self, mtime: Option<SystemTime>, now: SystemTime) -> bool {
        let Some(t) = mtime else { return true };
        // a time in the future is of age 0
        let age = now.duration_since(t).unwrap_or_default();
        self.max_age.is_none_or(|max| age <= max) && self.min_age.is_none_or(|min| age >= min)
    }

    /// Whether an object of `size` bytes is within `--min-size`/`--max-size` (unknown: yes).
    pub fn size(&self, size: Option<u64>) -> bool {
        let Some(n) = size else { return true };
        self.min_size.is_none_or(|min| n >= min) && self.max_size.is_none_or(|max| n <= max)
    }

    pub fn is_empty(&self) -> bool {
        self.include.is_empty()
            && self.exclude.is_empty()
            && self.max_age.is_none()
            && self.min_age.is_none()
            && self.min_size.is_none()
            && self.max_size.is_none()
            && self.files.is_none()
    }

    /// The same key globs without the age: what a destination's listing is filtered by (a
    /// destination's times are when it was written, not when the source changed).
    pub fn keys_only(&self) -> Filter {
        Filter {
            max_age: None,
            min_age: None,
            min_size: None,
            max_size: None,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `key` passes a filter that includes `pattern` alone.
    fn glob(pattern: &str, key: &str) -> bool {
        Filter::new(vec![pattern.into()], vec![], None)
            .unwrap_or_else(|e| panic!("{pattern}: {e}"))
            .key(key)
    }

    #[test]
    fn globs() {
        let cases = [
            ("shards/**", "shards/a/b.bin", true),
            ("shards/**", "shards/x", true),
            ("shards/**", "shards", false),
            ("shards/**", "other/shards/x", false),
            ("*.tmp", "a/b/c.tmp", true),
            ("*.tmp", "c.tmp", true),
            ("*.tmp", "a/b/c.tmpx", false),
            ("*.tmp", "a.tmp/c", false),
            ("a/*.bin", "a/x.bin", true),
            ("a/*.bin", "a/b/x.bin", false),
            ("a/**/x.bin", "a/x.bin", true),
            ("a/**/x.bin", "a/b/c/x.bin", true),
            ("a/**/x.bin", "a/bx.bin", false),
            ("**/x.bin", "x.bin", true),
            ("**/x.bin", "d/e/x.bin", true),
            ("**/x.bin", "dx.bin", false),
            ("**", "any/thing", true),
            ("file?.txt", "dir/file1.txt", true),
            ("file?.txt", "dir/file12.txt", false),
            ("file?.txt", "dir/file.txt", false),
            ("/top/*", "top/y", true),
            ("/top/*", "a/top/y", false),
            // `?` is one character, however many bytes it takes
            ("?.txt", "é.txt", true),
            ("?.txt", "dir/💎.txt", true),
            ("?.txt", "éé.txt", false),
            ("??.txt", "é.txt", false),
            ("a/?/b", "a/日/b", true),
            ("a?b", "a/b", false),
            ("caf?/*", "café/x", true),
            ("?*.txt", "é.txt", true),
            ("*?*", "é", true),
            ("*??", "é", false),
            ("?**", "é", true),
            ("a/?**", "a/é/b", true),
            // non-ASCII literals and `*` around them
            ("日本/*.bin", "日本/x.bin", true),
            ("*é*", "dir/aéb", true),
            ("*é*", "dir/aeb", false),
            // a `**` inside a segment is any run, `/` included
            ("a/b**", "a/bc/d", true),
            ("a/b**", "a/c", false),
            ("x**.gz", "dir/x1.gz", true),
            // brackets, braces and backslashes are literal
            ("x[1].txt", "dir/x[1].txt", true),
            ("x[1].txt", "dir/x1.txt", false),
            ("{a,b}/*", "{a,b}/c", true),
            ("{a,b}/*", "a/c", false),
            ("a\\b", "a\\b", true),
            ("a\\*", "a\\z", true),
            // keys may hold newlines
            ("a/*", "a/x\ny", true),
            ("a/**", "a/x\n/y", true),
        ];
        for (p, t, want) in cases {
            assert_eq!(glob(p, t), want, "{p} vs {t}");
        }
    }

    #[test]
    fn filters_combine() {
        let f = Filter::new(vec!["shards/**".into()], vec!["*.tmp".into()], None).unwrap();
        assert!(f.key("shards/a.bin"));
        assert!(!f.key("shards/a.tmp"));
        assert!(!f.key("other/a.bin"));
        assert_eq!(f.include(), ["shards/**"]);
        assert_eq!(f.exclude(), ["*.tmp"]);
        assert!(!f.is_empty());
        assert!(Filter::default().key("anything"));
        assert!(Filter::default().is_empty());
        // several patterns in a list, with and without `/`: any of them
        let f = Filter::new(
            vec!["a/*".into(), "*.bin".into(), "x?".into()],
            vec!["a/secret".into(), "*.tmp".into()],
            None,
        )
        .unwrap();
        for (key, want) in [
            ("a/b", true),
            ("z/y/c.bin", true),
            ("q/xy", true),
            ("a/secret", false),
            ("a/c.tmp", false),
            ("b/c", false),
        ] {
            assert_eq!(f.key(key), want, "{key}");
        }
        let now = SystemTime::now();
        let f = Filter::new(vec![], vec![], Some(Duration::from_secs(7 * 86_400))).unwrap();
        assert!(f.age(Some(now - Duration::from_secs(86_400)), now));
        assert!(!f.age(Some(now - Duration::from_secs(8 * 86_400)), now));
        assert!(f.age(None, now));
        let f = Filter {
            min_age: Some(Duration::from_secs(3600)),
            ..Default::default()
        };
        assert!(!f.age(Some(now - Duration::from_secs(60)), now));
        assert!(f.age(Some(now - Duration::from_secs(7200)), now));
        assert!(!f.is_empty());
    }

    #[test]
    fn bad_pattern_lists_are_refused_by_name() {
        let long = "a".repeat(MAX_PATTERN_BYTES + 1);
        let e = Filter::new(vec!["ok/*".into(), long], vec![], None).unwrap_err();
        assert_eq!(e.list, "include");
        assert!(e.why.contains("1025 bytes"), "{e}");
        let shown = e.pattern.clone().unwrap();
        assert!(shown.starts_with("aaaa") && shown.ends_with('…') && shown.len() < 80);
        let e = Filter::new(vec![], vec!["".into()], None).unwrap_err();
        assert_eq!((e.list, e.why.as_str()), ("exclude", "empty pattern"));
        assert_eq!(e.to_string(), "pattern '': empty pattern");
        let many = vec!["*.x".to_string(); MAX_PATTERNS + 1];
        let e = Filter::new(many, vec![], None).unwrap_err();
        assert_eq!(e.pattern, None);
        assert!(e.why.contains("101 patterns"), "{e}");
        // control characters are shown escaped, on one line
        let e = Filter::new(vec!["a\nb".repeat(400)], vec![], None).unwrap_err();
        assert!(!e.to_string().contains('\n'), "{e}");
        // the longest lists of ordinary patterns compile
        let big: Vec<String> = (0..MAX_PATTERNS)
            .map(|i| format!("{i}/{}/**/*.b?n", "dir*/".repeat(200)))
            .collect();
        assert!(big.iter().all(|p| p.len() <= MAX_PATTERN_BYTES));
        let f = Filter::new(big.clone(), big, None).unwrap();
        assert!(!f.key(&"b".repeat(300)));
        // one whose expressions outgrow the size limit is refused, not built
        let e = Filter::new(vec!["?".repeat(300); MAX_PATTERNS], vec![], None).unwrap_err();
        assert!(e.why.contains("too complex"), "{e}");
    }

    #[test]
    fn pathological_globs_finish() {
        // a backtracking matcher takes exponential time on these; the compiled ones are linear
        let stars = "**/".repeat(300) + "x";
        let key = "a/".repeat(5_000) + "b";
        let f = Filter::new(vec![stars.clone()], vec![], None).unwrap();
        assert!(!f.key(&key));
        assert!(f.key(&("a/".repeat(5_000) + "x")));
        let runs = "a*".repeat(200) + "b";
        let f = Filter::new(vec![runs, "*?*?*?*?*?*?*?*?*?*?c".into()], vec![], None).unwrap();
        assert!(!f.key(&"a".repeat(50_000)));
        assert!(f.key(&("a".repeat(50_000) + "c")));
        let f = Filter::new(vec!["/a**a**a**a**a**a**a**b".into()], vec![], None).unwrap();
        assert!(!f.key(&"a/".repeat(20_000)));
    }

    #[test]
    fn sizes_and_listed_files() {
        let f = Filter {
            min_size: Some(10),
            max_size: Some(100),
            files: Some(std::sync::Arc::new(["a/b".to_string()].into())),
            ..Default::default()
        };
        for (n, want) in [
            (Some(9), false),
            (Some(10), true),
            (Some(100), true),
            (Some(101), false),
            (None, true),
        ] {
            assert_eq!(f.size(n), want, "{n:?}");
        }
        assert!(f.key("a/b") && !f.key("a/c") && !f.key("a"));
        assert!(!f.is_empty());
        assert!(f.keys_only().min_size.is_none() && f.keys_only().files.is_some());
    }

    #[test]
    fn ages() {
        assert_eq!(parse_age("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_age("12h"), Ok(Duration::from_secs(12 * 3600)));
        assert_eq!(parse_age("2w"), Ok(Duration::from_secs(14 * 86_400)));
        // rclone's units besides: ms, M (30 days), y (365 days)
        assert_eq!(parse_age("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_age("2M"), Ok(Duration::from_secs(60 * 86_400)));
        assert_eq!(parse_age("1y"), Ok(Duration::from_secs(365 * 86_400)));
        assert!(parse_age("7q").is_err());
        assert!(parse_age("d").is_err());
    }
}
