//! Where data lives: parses the URLs a user types (`s3://`, `az://`, `gs://`, `file://`, plain
//! paths) into a [`Location`]. Pure: no I/O beyond reading the current directory.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::core::error::SlateError;

/// The kind of store behind a location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    S3,
    Azure,
    Gcs,
    Local,
}

impl Scheme {
    /// Short name used in the price table and summaries (`s3`, `az`, `gs`, `local`).
    pub fn short(self) -> &'static str {
        match self {
            Scheme::S3 => "s3",
            Scheme::Azure => "az",
            Scheme::Gcs => "gs",
            Scheme::Local => "local",
        }
    }
}

/// A parsed source or destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub scheme: Scheme,
    /// Bucket (S3, GCS) or container (Azure); empty for local paths.
    pub bucket: String,
    /// Key prefix inside the bucket, without leading or trailing `/`; for local paths the
    /// absolute path as text.
    pub prefix: String,
    /// The user wrote a trailing `/`: the location is a folder, never a single object.
    pub is_dir_hint: bool,
    /// What the user typed, for messages.
    pub raw: String,
    /// A local source: follow symlinks that stay inside the folder (`--copy-links`) instead
    /// of skipping them. Its listings, probes and reads all obey it (`stores::local`'s rule);
    /// not part of the location's name (a pair is the same pair with or without it).
    pub copy_links: bool,
}

impl Location {
    /// Parses a user-supplied location.
    pub fn parse(raw: &str) -> Result<Self, SlateError> {
        let bad = |why: String| SlateError::BadUrl {
            url: raw.to_string(),
            why,
        };
        if raw.is_empty() {
            return Err(bad("empty location".into()));
        }
        if raw.contains('\0') {
            return Err(bad("contains a NUL byte".into()));
        }
        let is_dir_hint = raw.ends_with('/');
        if let Some((scheme, rest)) = raw.split_once("://") {
            let scheme_lc = scheme.to_ascii_lowercase();
            let scheme = match scheme_lc.as_str() {
                "s3" | "s3a" => Scheme::S3,
                "az" | "azure" => Scheme::Azure,
                "gs" | "gcs" => Scheme::Gcs,
                "file" => {
                    if !rest.starts_with('/') {
                        return Err(bad("file:// URLs need an absolute path (file:///dir)".into()));
                    }
                    return Ok(Self::local(Path::new(rest), is_dir_hint, raw));
                }
                other => {
                    return Err(bad(format!(
                        "unknown scheme '{other}' (expected s3://, az://, gs://, file:// or a local path)"
                    )))
                }
            };
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(bad("missing bucket or container name".into()));
            }
            if let Some(c) = bucket
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
            {
                return Err(bad(format!(
                    "invalid character {c:?} in bucket name '{bucket}'"
                )));
            }
            let prefix = prefix.trim_matches('/');
            if prefix.split('/').any(|s| s == "." || s == "..") {
                return Err(bad("'.' and '..' are not allowed in a key prefix".into()));
            }
            if prefix.contains("//") {
                return Err(bad("empty path segment ('//') in key prefix".into()));
            }
            return Ok(Location {
                scheme,
                bucket: bucket.to_string(),
                prefix: prefix.to_string(),
                is_dir_hint,
                raw: raw.to_string(),
                copy_links: false,
            });
        }
        if raw.contains(':') && !raw.starts_with('.') && !raw.starts_with('/') {
            // `s3:bucket` or `remote:path` (rclone style) is almost always a typo here.
            let head = raw.split(':').next().unwrap_or(raw);
            if !head.contains('/') {
                return Err(bad(format!(
                    "'{head}:' is not a scheme slate knows; write s3://, az://, gs:// or ./{raw} for a local path"
                )));
            }
        }
        Ok(Self::local(Path::new(raw), is_dir_hint, raw))
    }

    fn local(path: &Path, is_dir_hint: bool, raw: &str) -> Self {
        let abs = if path.is_absolute() {
            path.to_path_buf()
        } else {
            std::env::current_dir()
                .map(|d| d.join(path))
                .unwrap_or_else(|_| path.to_path_buf())
        };
        let text = normalize(&abs);
        Location {
            scheme: Scheme::Local,
            bucket: String::new(),
            prefix: text,
            is_dir_hint,
            raw: raw.to_string(),
            copy_links: false,
        }
    }

    /// The same location, following symlinks inside it when `on` and it is a local folder
    /// (`--copy-links`; cloud stores have no links).
    pub fn with_copy_links(mut self, on: bool) -> Location {
        self.copy_links = on && self.scheme == Scheme::Local;
        self
    }

    /// For local locations, the path on disk.
    pub fn local_path(&self) -> PathBuf {
        PathBuf::from(&self.prefix)
    }

    /// Joins a relative key under this location's prefix (cloud keys only).
    pub fn key_for(&self, rel: &str) -> String {
        match (self.prefix.is_empty(), rel.is_empty()) {
            (true, _) => rel.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{}", self.prefix, rel),
        }
    }

    /// True when both locations are served by one store client (server-side copy possible).
    pub fn same_store(&self, other: &Location) -> bool {
        self.scheme == other.scheme && self.scheme != Scheme::Local && self.bucket == other.bucket
    }

    /// The last path segment of the prefix (used when copying one object into a folder).
    pub fn basename(&self) -> &str {
        self.prefix.rsplit('/').next().unwrap_or("")
    }
}

/// Removes `.` and resolves `..` lexically, without touching the file system.
fn normalize(p: &Path) -> String {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    let s = out.to_string_lossy().to_string();
    if s.len() > 1 {
        s.trim_end_matches('/').to_string()
    } else {
        s
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.scheme {
            Scheme::Local => write!(f, "{}", self.prefix),
            s if self.prefix.is_empty() => write!(f, "{}://{}", s.short(), self.bucket),
            s => write!(f, "{}://{}/{}", s.short(), self.bucket, self.prefix),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cloud_urls() {
        let cases = [
            (
                "s3://b/datasets/imagenet",
                Scheme::S3,
                "b",
                "datasets/imagenet",
                false,
            ),
            ("s3://b", Scheme::S3, "b", "", false),
            ("s3://b/", Scheme::S3, "b", "", true),
            (
                "az://container/weights/",
                Scheme::Azure,
                "container",
                "weights",
                true,
            ),
            ("azure://c/x", Scheme::Azure, "c", "x", false),
            (
                "gs://other/a/b c+d%e",
                Scheme::Gcs,
                "other",
                "a/b c+d%e",
                false,
            ),
            ("GS://x/y", Scheme::Gcs, "x", "y", false),
        ];
        for (raw, scheme, bucket, prefix, dir) in cases {
            let l = Location::parse(raw).unwrap();
            assert_eq!(
                (
                    l.scheme,
                    l.bucket.as_str(),
                    l.prefix.as_str(),
                    l.is_dir_hint
                ),
                (scheme, bucket, prefix, dir),
                "{raw}"
            );
        }
    }

    #[test]
    fn parses_local_paths() {
        let l = Location::parse("/mnt/nvme/weights/").unwrap();
        assert_eq!(
            (l.scheme, l.prefix.as_str(), l.is_dir_hint),
            (Scheme::Local, "/mnt/nvme/weights", true)
        );
        let l = Location::parse("file:///tmp/x/../y").unwrap();
        assert_eq!(l.prefix, "/tmp/y");
        let l = Location::parse("./local/dir").unwrap();
        assert!(l.prefix.ends_with("/local/dir"), "{}", l.prefix);
        assert!(Path::new(&l.prefix).is_absolute());
    }

    #[test]
    fn rejects_bad_urls_naming_the_culprit() {
        let cases = [
            ("ftp://host/x", "unknown scheme 'ftp'"),
            ("s3://", "missing bucket"),
            ("s3:///key", "missing bucket"),
            ("gs://b/../etc", "'..'"),
            ("s3://bad bucket/x", "invalid character"),
            ("s3:bucket/x", "not a scheme"),
            ("file://relative", "absolute path"),
            ("", "empty"),
        ];
        for (raw, want) in cases {
            let err = Location::parse(raw).unwrap_err().to_string();
            assert!(err.contains(want), "{raw}: {err}");
            assert!(err.contains(raw), "{raw}: error must name the URL: {err}");
        }
    }

    #[test]
    fn joins_keys() {
        let l = Location::parse("s3://b/p").unwrap();
        assert_eq!(l.key_for("x/y"), "p/x/y");
        let l = Location::parse("s3://b").unwrap();
        assert_eq!(l.key_for("x"), "x");
        assert!(Location::parse("s3://b/a")
            .unwrap()
            .same_store(&Location::parse("s3://b/c").unwrap()));
        assert!(!Location::parse("s3://b/a")
            .unwrap()
            .same_store(&Location::parse("s3://c/a").unwrap()));
    }
}
