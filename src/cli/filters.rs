//! The filter flags `copy`, `sync` and `diff` share, spelled as rclone spells them:
//! `--include`, `--exclude`, `--include-from`, `--exclude-from`, `--filter-from`,
//! `--files-from`, `--min-size`, `--max-size`, `--min-age`, `--max-age`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use crate::core::error::SlateError;
use crate::core::filter::{parse_age, Filter};
use crate::core::units::parse_size;

#[derive(Debug, Args, Clone, Default)]
pub struct FilterArgs {
    /// Only keys matching this glob (`*`, `**`, `?`); repeatable.
    #[arg(long)]
    pub include: Vec<String>,
    /// Leave out keys matching this glob; repeatable; wins over --include.
    #[arg(long)]
    pub exclude: Vec<String>,
    /// Include globs read from a file, one per line (`#` and `;` start comments).
    #[arg(long, value_name = "FILE")]
    pub include_from: Vec<PathBuf>,
    /// Exclude globs read from a file, one per line.
    #[arg(long, value_name = "FILE")]
    pub exclude_from: Vec<PathBuf>,
    /// rclone's filter file: `- GLOB` and `+ GLOB` lines. slate applies every exclude before
    /// any include, so a file whose order says otherwise is refused, naming the line.
    #[arg(long, value_name = "FILE")]
    pub filter_from: Vec<PathBuf>,
    /// Only the keys listed in this file, one per line, relative to the source's prefix.
    #[arg(long, value_name = "FILE")]
    pub files_from: Vec<PathBuf>,
    /// Only objects of at least this size (`100k`, `16Mi`, `1G`; a bare number is bytes).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub min_size: Option<u64>,
    /// Only objects of at most this size.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub max_size: Option<u64>,
    /// Only objects modified at least this long ago (`30m`, `2d`; ms, s, m, h, d, w, M, y; a
    /// bare number is days).
    #[arg(long, value_parser = parse_age, value_name = "AGE")]
    pub min_age: Option<Duration>,
    /// Only objects modified within this age (e.g. 7d, 12h).
    #[arg(long, value_parser = parse_age, value_name = "AGE")]
    pub max_age: Option<Duration>,
}

/// The non-comment lines of a list file, trimmed, with their line numbers.
fn lines_of(option: &str, path: &Path) -> Result<Vec<(usize, String)>, SlateError> {
    let text = std::fs::read_to_string(path).map_err(|e| SlateError::BadOption {
        option: option.into(),
        why: format!("{}: {e}", path.display()),
    })?;
    Ok(text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim().to_string()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .collect())
}

/// An rclone filter file as slate's two lists, when its order means the same: every `-`
/// rule before every `+` rule, and the `+` rules closed by an exclude of everything (`- **`):
/// rclone adds none to a filter file, so without it a `+` rule excludes nothing, where
/// slate's includes are exclusive.
pub(crate) fn parse_filter_file(
    path: &Path,
    lines: &[(usize, String)],
) -> Result<(Vec<String>, Vec<String>), SlateError> {
    let (mut include, mut exclude) = (Vec::new(), Vec::new());
    let bad = |n: usize, why: String| SlateError::BadOption {
        option: "--filter-from".into(),
        why: format!("{}, line {n}: {why}", path.display()),
    };
    let mut closed = false;
    for (n, line) in lines {
        let (sign, glob) = match line.split_at_checked(2) {
            Some((s @ ("- " | "+ "), g)) => (s.trim(), g.trim().to_string()),
            _ if line == "!" => {
                return Err(bad(*n, "`!` (clear the rules) is not supported".into()))
            }
            _ => return Err(bad(*n, format!("{line:?} is not `- GLOB` or `+ GLOB`"))),
        };
        if closed {
            return Err(bad(
                *n,
                "a rule after `- **` matches nothing in rclone's order; remove it".into(),
            ));
        }
        match sign {
            "-" if !include.is_empty() && (glob == "**" || glob == "*") => closed = true,
            "-" if !include.is_empty() => {
                return Err(bad(
                    *n,
                    format!(
                        "`- {glob}` comes after an include: in rclone's order it excludes only what \
                         no include took, and slate applies every exclude first; move it above the `+` lines"
                    ),
                ))
            }
            "-" => exclude.push(glob),
            _ => include.push(glob),
        }
    }
    if !include.is_empty() && !closed {
        let last = lines.last().map(|(n, _)| *n).unwrap_or(0);
        return Err(bad(
            last,
            "the `+` rules are not followed by `- **`: in rclone's order they then exclude nothing, \
             and slate's includes are exclusive; end the file with `- **` (or use --include)"
                .into(),
        ));
    }
    Ok((include, exclude))
}

impl FilterArgs {
    /// The filter these flags describe; a bad glob, file or line is named.
    pub fn build(&self) -> Result<Filter, SlateError> {
        self.build_with(&[], &[], "")
    }

    /// [`FilterArgs::build`] with a config pair's own globs added (`pair`: how errors name
    /// the pair, e.g. ` with pairs[0]`).
    pub fn build_with(
        &self,
        more_include: &[String],
        more_exclude: &[String],
        pair: &str,
    ) -> Result<Filter, SlateError> {
        let mut include = self.include.clone();
        let mut exclude = self.exclude.clone();
        include.extend_from_slice(more_include);
        exclude.extend_from_slice(more_exclude);
        for p in &self.include_from {
            include.extend(lines_of("--include-from", p)?.into_iter().map(|(_, l)| l));
        }
        for p in &self.exclude_from {
            exclude.extend(lines_of("--exclude-from", p)?.into_iter().map(|(_, l)| l));
        }
        for p in &self.filter_from {
            let (i, e) = parse_filter_file(p, &lines_of("--filter-from", p)?)?;
            include.extend(i);
            exclude.extend(e);
        }
        let mut filter =
            Filter::new(include, exclude, self.max_age).map_err(|e| SlateError::BadOption {
                option: format!("--{}{pair}", e.list),
                why: e.to_string(),
            })?;
        if !self.files_from.is_empty() {
            let mut files = HashSet::new();
            for p in &self.files_from {
                for (_, l) in lines_of("--files-from", p)? {
                    files.insert(l.trim_start_matches('/').to_string());
                }
            }
            filter.files = Some(Arc::new(files));
        }
        if let (Some(min), Some(max)) = (self.min_size, self.max_size) {
            if min > max {
                return Err(SlateError::BadOption {
                    option: "--min-size".into(),
                    why: format!("{min} bytes is more than --max-size {max}: nothing would pass"),
                });
            }
        }
        filter.min_size = self.min_size;
        filter.max_size = self.max_size;
        filter.min_age = self.min_age;
        Ok(filter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<(usize, String)> {
        text.lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.to_string()))
            .collect()
    }

    #[test]
    fn filter_files_that_mean_the_same_in_both_orders() {
        let p = Path::new("f.txt");
        let ok = [
            ("- *.tmp\n- cache/**", (vec![], vec!["*.tmp", "cache/**"])),
            ("+ shards/**\n- **", (vec!["shards/**"], vec![])),
            (
                "- *.tmp\n+ shards/**\n+ *.bin\n- **",
                (vec!["shards/**", "*.bin"], vec!["*.tmp"]),
            ),
        ];
        for (text, (inc, exc)) in ok {
            let got = parse_filter_file(p, &lines(text)).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(
                got,
                (
                    inc.iter().map(|s| s.to_string()).collect(),
                    exc.iter().map(|s| s.to_string()).collect()
                ),
                "{text}"
            );
        }
        let refused = [
            ("+ a/**\n- a/tmp/**", "line 2"),
            ("+ a/**\n- **\n+ b/**", "line 3"),
            ("a/**", "line 1"),
            ("- a\n!", "line 2"),
            // rclone adds no `- **` to a filter file: a lone `+` rule excludes nothing there
            ("- x\n+ shards/**", "line 2"),
        ];
        for (text, line) in refused {
            let e = parse_filter_file(p, &lines(text))
                .expect_err(text)
                .to_string();
            assert!(e.contains("f.txt") && e.contains(line), "{text}: {e}");
        }
    }

    #[test]
    fn files_sizes_and_ages_from_flags() {
        let dir = tempfile::tempdir().expect("tmp");
        let list = dir.path().join("files.txt");
        std::fs::write(&list, "# wanted\na/b.bin\n/c.bin\n\n").expect("write");
        let f = FilterArgs {
            files_from: vec![list],
            min_size: Some(1),
            max_size: Some(1 << 20),
            min_age: Some(Duration::from_secs(60)),
            ..Default::default()
        }
        .build()
        .expect("filter");
        assert!(f.key("a/b.bin") && f.key("c.bin") && !f.key("d.bin"));
        assert!(f.size(Some(1)) && !f.size(Some(0)) && !f.size(Some(2 << 20)));
        assert_eq!(f.min_age, Some(Duration::from_secs(60)));
        let e = FilterArgs {
            min_size: Some(10),
            max_size: Some(5),
            ..Default::default()
        }
        .build()
        .expect_err("min > max")
        .to_string();
        assert!(e.contains("--min-size"), "{e}");
        let e = FilterArgs {
            exclude_from: vec![dir.path().join("missing.txt")],
            ..Default::default()
        }
        .build()
        .expect_err("missing file")
        .to_string();
        assert!(e.contains("missing.txt"), "{e}");
    }
}
