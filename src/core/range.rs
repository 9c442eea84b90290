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

#[cfg(test)]
mod tests {
    use super::KeyRange;

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
}
