//! Where data lives: parses the URLs a user types (`s3://`, `az://`, `gs://`, `file://`, plain
//! paths) into a [`Location`]. Pure: no I/O beyond reading the current directory.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::core::error::SlateError;
use crate::core::remote::{self, Remote, Resolved};

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
    /// The rclone remote the location was named through (`NAME:path`): its own credentials,
    /// endpoint, account and placement defaults. `None`: the environment's, as for a URL.
    pub remote: Option<Arc<Remote>>,
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
            return Self::cloud(scheme, rest, is_dir_hint, raw, None);
        }
        if let Some(rest) = raw.strip_prefix(':') {
            let backend = rest.split([':', ',']).next().unwrap_or("");
            return Err(bad(format!(
                "':{backend}' is an rclone on-the-fly remote, which slate does not serve: name \
                 the remote in rclone.conf, or write s3://, az://, gs://"
            )));
        }
        if let Some((head, path)) = raw.split_once(':') {
            if !head.contains('/') && !raw.starts_with('.') {
                if remote::is_remote_name(head) {
                    return Self::through_remote(head, path, raw, 0);
                }
                if let Some((name, _)) = head.split_once(',') {
                    return Err(bad(format!(
                        "'{head}:' is an rclone connection string, which slate does not serve: \
                         put the options in remote '{name}' of the config, or write ./{raw} \
                         for a local path"
                    )));
                }
                // `s3:bucket` or `remote:path` (rclone style) is almost always a typo here
                return Err(bad(format!(
                    "'{head}:' is not a scheme slate knows nor a remote name; write s3://, \
                     az://, gs:// or ./{raw} for a local path"
                )));
            }
        }
        Ok(Self::local(Path::new(raw), is_dir_hint, raw))
    }

    /// A cloud location of `scheme` from `rest` (`bucket/prefix`), checked.
    fn cloud(
        scheme: Scheme,
        rest: &str,
        is_dir_hint: bool,
        raw: &str,
        remote: Option<Arc<Remote>>,
    ) -> Result<Self, SlateError> {
        let bad = |why: String| SlateError::BadUrl {
            url: raw.to_string(),
            why,
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
        Ok(Location {
            scheme,
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            is_dir_hint,
            raw: raw.to_string(),
            copy_links: false,
            remote,
        })
    }

    /// `NAME:path` through the rclone remote `NAME` (an alias: the location it names).
    fn through_remote(name: &str, path: &str, raw: &str, depth: u8) -> Result<Self, SlateError> {
        let bad = |why: String| SlateError::BadUrl {
            url: raw.to_string(),
            why,
        };
        let config = remote::Config::load().map_err(bad)?;
        let resolved = config.resolve(name, path).map_err(bad)?;
        let is_dir_hint = raw.ends_with('/');
        match resolved {
            None => {
                let known = config.names();
                let remotes = match (&config.path, known.is_empty()) {
                    (Some(p), false) => {
                        format!(
                            "a remote of {} (remotes: {})",
                            p.display(),
                            known.join(", ")
                        )
                    }
                    (Some(p), true) => format!("a remote ({} defines none)", p.display()),
                    (None, false) => format!("a remote (remotes: {})", known.join(", ")),
                    (None, true) => "a remote (no rclone config file: --rclone-config, \
                                     RCLONE_CONFIG, ~/.config/rclone/rclone.conf)"
                        .to_string(),
                };
                if matches!(
                    name.to_ascii_lowercase().as_str(),
                    "s3" | "s3a" | "az" | "azure" | "gs" | "gcs" | "file"
                ) {
                    return Err(bad(format!(
                        "'{name}:' is neither a scheme (did you mean {name}://{}?) nor {remotes}",
                        path.trim_start_matches('/')
                    )));
                }
                Err(bad(format!(
                    "'{name}:' is neither a scheme slate knows (s3://, az://, gs://, file://) nor \
                     {remotes}; write ./{raw} for a local path"
                )))
            }
            Some(Resolved::Alias(target)) => {
                if depth >= 8 {
                    return Err(bad(format!("alias '{name}' leads to aliases 8 deep")));
                }
                let mut loc = match target.split_once(':') {
                    Some((h, p)) if !h.contains('/') && remote::is_remote_name(h) => {
                        Self::through_remote(h, p, &target, depth + 1)?
                    }
                    _ => Location::parse(&target)?,
                };
                loc.raw = raw.to_string();
                loc.is_dir_hint |= is_dir_hint;
                Ok(loc)
            }
            Some(Resolved::Store(r, path)) => {
                let r = Arc::new(r);
                if r.scheme == Scheme::Local {
                    let mut loc = Self::local(Path::new(&path), is_dir_hint, raw);
                    loc.copy_links = r.copy_links;
                    loc.remote = Some(r);
                    return Ok(loc);
                }
                Self::cloud(
                    r.scheme,
                    path.trim_start_matches('/'),
                    is_dir_hint,
                    raw,
                    Some(r),
                )
            }
        }
    }

    /// The placement a remote gives what is written to it (`storage_class`/`access_tier`,
    /// `acl`/`object_acl`): defaults that the flags and the config override.
    pub fn remote_storage_class(&self) -> Option<String> {
        self.remote.as_ref().and_then(|r| r.storage_class.clone())
    }

    /// See [`Location::remote_storage_class`].
    pub fn remote_acl(&self) -> Option<String> {
        self.remote.as_ref().and_then(|r| r.acl.clone())
    }

    /// The endpoint, account and credentials that reach this location's store: two
    /// locations with the same bucket name behind different ones are different stores.
    fn reached_by(&self) -> Option<(&str, String)> {
        self.remote
            .as_ref()
            .map(|r| (r.name.as_str(), r.endpoint_id()))
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
            remote: None,
        }
    }

    /// The same location, following symlinks inside it when `on` and it is a local folder
    /// (`--copy-links`; cloud stores have no links).
    /// A local remote's `copy_links = true` stays on whatever the flag says.
    pub fn with_copy_links(mut self, on: bool) -> Location {
        let remote = self.remote.as_ref().is_some_and(|r| r.copy_links);
        self.copy_links = (on || remote) && self.scheme == Scheme::Local;
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

    /// The bucket's name with what reaches it: `s3://bkt`, or `REMOTE:bkt` through a remote
    /// (another endpoint or account than the environment's). What the uploads ledger and
    /// `slate cleanup` file a destination's uploads under.
    pub fn store_id(&self) -> String {
        match &self.remote {
            Some(r) if self.scheme != Scheme::Local => format!("{}:{}", r.name, self.bucket),
            _ => format!("{}://{}", self.scheme.short(), self.bucket),
        }
    }

    /// True when both locations are served by one store client (server-side copy possible).
    pub fn same_store(&self, other: &Location) -> bool {
        self.scheme == other.scheme
            && self.scheme != Scheme::Local
            && self.bucket == other.bucket
            && self.same_endpoint(other)
    }

    /// True when both are reached through the same endpoint, account and credentials (both
    /// through the environment, or through one remote): one client may act on both.
    pub fn same_endpoint(&self, other: &Location) -> bool {
        self.scheme == other.scheme && self.reached_by() == other.reached_by()
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
            // a remote names the store (its endpoint, account and credentials): the pair it
            // belongs to is another than the same bucket reached through the environment
            s if s != Scheme::Local && self.remote.is_some() => {
                let name = self.remote.as_ref().map(|r| r.name.as_str()).unwrap_or("");
                if self.prefix.is_empty() {
                    write!(f, "{name}:{}", self.bucket)
                } else {
                    write!(f, "{name}:{}/{}", self.bucket, self.prefix)
                }
            }
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
        let _g = crate::core::remote::TEST_GLOBALS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let cases = [
            ("ftp://host/x", "unknown scheme 'ftp'"),
            ("s3://", "missing bucket"),
            ("s3:///key", "missing bucket"),
            ("gs://b/../etc", "'..'"),
            ("s3://bad bucket/x", "invalid character"),
            ("s3:bucket/x", "did you mean s3://bucket/x?"),
            ("backup:bucket/x", "neither a scheme slate knows"),
            (":s3,provider=AWS:bucket", "on-the-fly remote"),
            ("aws,acl=private:bkt/x", "connection string"),
            ("a=b:x", "nor a remote name"),
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

    #[test]
    fn two_remotes_with_one_bucket_name_on_two_endpoints_are_two_stores() {
        let conf = remote::Config::parse(
            "[a]\ntype = s3\nendpoint = http://127.0.0.1:5000\n\
             [b]\ntype = s3\nendpoint = http://127.0.0.1:9000\n\
             [a2]\ntype = s3\nendpoint = http://127.0.0.1:5000\naccess_key_id = k\nsecret_access_key = s\n",
        )
        .unwrap();
        let loc = |name: &str, path: &str| match conf.resolve(name, path).unwrap() {
            Some(Resolved::Store(r, p)) => Location::cloud(
                r.scheme,
                &p,
                false,
                &format!("{name}:{path}"),
                Some(Arc::new(r)),
            )
            .unwrap(),
            other => panic!("{other:?}"),
        };
        let (a, b, a2) = (loc("a", "bkt/x"), loc("b", "bkt/y"), loc("a2", "bkt/z"));
        let env = Location::parse("s3://bkt/w").unwrap();
        assert!(a.same_store(&loc("a", "bkt/q")));
        assert!(!a.same_store(&b), "two endpoints");
        assert!(!a.same_store(&a2), "one endpoint, two sets of credentials");
        assert!(!a.same_store(&env), "a remote and the environment");
        // the name of a pair's end says which store
        assert_eq!(
            (a.to_string(), b.to_string()),
            ("a:bkt/x".into(), "b:bkt/y".into())
        );
        assert_eq!(loc("a", "bkt").to_string(), "a:bkt");
        // the uploads ledger files them apart: a remote's uploads are not the environment's
        assert_eq!(
            (a.store_id(), env.store_id()),
            ("a:bkt".into(), "s3://bkt".into())
        );
    }
}
