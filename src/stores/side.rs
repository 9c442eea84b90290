//! An opened location: a cloud store (through object_store) or a local folder (slate's own
//! file code, so that keys stay byte-exact), and the key → object_store path mapping that
//! refuses keys object_store would rename.

use std::sync::Arc;

use object_store::list::PaginatedListStore;
use object_store::multipart::MultipartStore;
use object_store::path::Path as StorePath;
use object_store::ObjectStore;

use crate::core::error::SlateError;
use crate::core::location::Location;

/// One end of a copy.
#[derive(Clone)]
pub enum Side {
    Cloud {
        store: Arc<dyn ObjectStore>,
        /// The same store's page-at-a-time listing (with a delimiter when wanted).
        pager: Arc<dyn PaginatedListStore>,
        /// The same store's multipart API (parts by number, each one retried on its own).
        parts: Arc<dyn MultipartStore>,
        loc: Location,
    },
    Local {
        loc: Location,
    },
}

impl Side {
    pub fn open(loc: &Location) -> Result<Side, SlateError> {
        Ok(match loc.scheme {
            crate::core::location::Scheme::Local => Side::Local { loc: loc.clone() },
            _ => {
                let s = crate::stores::build_paged(loc)?;
                Side::Cloud {
                    store: s.store,
                    pager: s.pager,
                    parts: s.parts,
                    loc: loc.clone(),
                }
            }
        })
    }

    pub fn location(&self) -> &Location {
        match self {
            Side::Cloud { loc, .. } | Side::Local { loc } => loc,
        }
    }

    /// The same store at another location (a sub-prefix of the same bucket).
    pub fn with_loc(&self, loc: Location) -> Side {
        match self {
            Side::Cloud {
                store,
                pager,
                parts,
                ..
            } => Side::Cloud {
                store: store.clone(),
                pager: pager.clone(),
                parts: parts.clone(),
                loc,
            },
            Side::Local { .. } => Side::Local { loc },
        }
    }
}

/// Parses a key into an object_store path without re-encoding it (keys are data).
///
/// object_store drops a leading and a trailing `/` (`Path::parse("a/")` is `a`, and `/` is the
/// bucket itself), so such a key would name another object, or the bucket: a HEAD, PUT or
/// DELETE sent for it would act on that instead (a DELETE on the bucket URL is S3's
/// DeleteBucket). Those keys are refused, naming the key; nothing is sent for them.
pub fn store_path(key: &str) -> Result<StorePath, SlateError> {
    let refuse = |why: String| SlateError::Unaddressable {
        key: key.to_string(),
        why,
    };
    let path = StorePath::parse(key).map_err(|e| refuse(e.to_string()))?;
    if path.as_ref() == key && !key.is_empty() {
        return Ok(path);
    }
    Err(refuse(unaddressable(key).to_string()))
}

/// Why object_store cannot name `key` as it is (see [`store_path`]); for a key it refuses.
pub fn unaddressable(key: &str) -> &'static str {
    if key.is_empty() || key.chars().all(|c| c == '/') {
        "it names the bucket itself"
    } else if key.ends_with('/') {
        "a key ending in '/' (a folder marker) would name the object without the '/'"
    } else if key.starts_with('/') {
        "a key beginning with '/' would name the object without the '/'"
    } else {
        "it contains an empty segment ('//')"
    }
}

/// A bucket prefix (or a pair's prefix) as an object_store path; a trailing `/` is allowed.
pub fn prefix_path(prefix: &str) -> Result<StorePath, SlateError> {
    store_path(prefix.strip_suffix('/').unwrap_or(prefix))
}
/// Makes one line of an object_store error (they carry response bodies over several lines).
pub fn one_line(e: &dyn std::fmt::Display) -> String {
    let s = e
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if s.len() > 400 {
        let mut cut = 400;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}…", &s[..cut])
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_object_store_would_rename_are_refused() {
        // key → Ok(the same path) or Err(a phrase of the reason)
        let table: &[(&str, Result<&str, &str>)] = &[
            ("a", Ok("a")),
            ("a/b c+%ü", Ok("a/b c+%ü")),
            ("", Err("bucket itself")),
            ("/", Err("bucket itself")),
            ("//", Err("empty path segment")),
            ("folder/", Err("folder marker")),
            ("/etc", Err("beginning with '/'")),
            ("a//b", Err("empty path segment")),
        ];
        for (key, want) in table {
            match (store_path(key), want) {
                (Ok(p), Ok(w)) => assert_eq!(p.as_ref(), *w, "{key:?}"),
                (Err(e), Err(w)) => {
                    let text = e.to_string();
                    assert!(e.is_permanent_for_key(), "{key:?}");
                    assert!(text.contains(w), "{key:?}: {text}");
                }
                (got, _) => panic!("{key:?}: got {got:?}, want {want:?}"),
            }
        }
        assert_eq!(prefix_path("data/").expect("prefix").as_ref(), "data");
    }
}
