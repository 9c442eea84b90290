//! The local folders jobs may read and write: none unless the operator lists them
//! (`--allow-root DIR`, config `daemon.allow_roots`). A job naming a local path elsewhere is
//! refused when it is created and again when it runs, so that a request to the API cannot
//! copy a user's files out, or write over them, beyond what the operator allowed. Cloud URLs
//! are the credentials' business, not this list's.

use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use crate::core::location::{Location, Scheme};

static ROOTS: OnceLock<Vec<PathBuf>> = OnceLock::new();

/// Sets the roots of this process (once; canonicalized: symlinks and `..` resolved). A root
/// that does not exist is an error naming it.
pub fn set(roots: &[PathBuf]) -> Result<(), String> {
    let mut canon = Vec::with_capacity(roots.len());
    for r in roots {
        let c = r
            .canonicalize()
            .map_err(|e| format!("--allow-root {}: {e}", r.display()))?;
        if !c.is_dir() {
            return Err(format!("--allow-root {}: not a folder", r.display()));
        }
        canon.push(c);
    }
    let _ = ROOTS.set(canon);
    Ok(())
}

fn roots() -> &'static [PathBuf] {
    ROOTS.get().map(Vec::as_slice).unwrap_or(&[])
}

/// `path` with symlinks and `..` resolved as far as it exists; the part that does not exist
/// yet (a destination folder to be made) is appended as written, and may not climb.
fn resolve(path: &Path) -> Result<PathBuf, String> {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        match existing.canonicalize() {
            Ok(c) => {
                let mut out = c;
                for part in rest.iter().rev() {
                    out.push(part);
                }
                return Ok(out);
            }
            Err(_) => {
                let Some(name) = existing.file_name().map(|n| n.to_os_string()) else {
                    return Err(format!("{} cannot be resolved", path.display()));
                };
                rest.push(name);
                if !existing.pop() {
                    return Err(format!("{} cannot be resolved", path.display()));
                }
            }
        }
    }
}

/// Whether `path` (absolute, resolved) lies under one of `roots`.
pub fn inside(path: &Path, roots: &[PathBuf]) -> bool {
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return false;
    }
    roots.iter().any(|r| path.starts_with(r))
}

/// Checks one of a job's URLs (`field` is `src` or `dst`): a local path must lie under a root.
pub fn check(field: &str, url: &str) -> Result<(), String> {
    let Ok(loc) = Location::parse(url) else {
        return Ok(()); // the URL's own error is said elsewhere
    };
    if loc.scheme != Scheme::Local {
        return Ok(());
    }
    let path = loc.local_path();
    let abs = if path.is_absolute() {
        path.clone()
    } else {
        return Err(format!(
            "{field}: {} is not an absolute path (jobs take absolute local paths)",
            path.display()
        ));
    };
    let resolved = resolve(&abs)?;
    if inside(&resolved, roots()) {
        return Ok(());
    }
    let listed = if roots().is_empty() {
        "none are listed: start the server with --allow-root DIR".to_string()
    } else {
        roots()
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(format!(
        "{field}: {} is outside the local folders jobs may use ({listed})",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_inside_and_outside_the_roots() {
        let roots = [PathBuf::from("/srv/data"), PathBuf::from("/home/u/share")];
        // (path, inside)
        let cases = [
            ("/srv/data", true),
            ("/srv/data/a/b", true),
            ("/srv/database", false),
            ("/srv", false),
            ("/home/u/share/x", true),
            ("/home/u/.ssh", false),
            ("/srv/data/../../etc", false),
            ("/", false),
        ];
        for (p, want) in cases {
            assert_eq!(inside(Path::new(p), &roots), want, "{p}");
        }
        assert!(!inside(Path::new("/srv/data"), &[]), "no root: nothing");
    }

    #[test]
    fn a_path_that_does_not_exist_yet_resolves_through_its_parent() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::fs::create_dir(real.join("a")).unwrap();
        std::os::unix::fs::symlink("/etc", real.join("a/link")).unwrap();
        assert_eq!(
            resolve(&real.join("a/new/x")).unwrap(),
            real.join("a/new/x")
        );
        // a link inside the root to a folder outside it resolves outside
        assert_eq!(
            resolve(&real.join("a/link/passwd")).unwrap(),
            PathBuf::from("/etc/passwd")
        );
        assert!(!inside(
            &resolve(&real.join("a/link/x")).unwrap(),
            std::slice::from_ref(&real)
        ));
        assert!(inside(&resolve(&real.join("a/new")).unwrap(), &[real]));
    }
}
