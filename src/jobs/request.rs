//! `POST /jobs` bodies: parsed and checked field by field before anything is stored, every
//! refusal naming the field (`src`, `options.transfers`), and turned into the copier's and
//! the reconciler's options when the job runs.

use serde_json::{json, Map, Value};

use crate::copy::{CopyOptions, ProgressMode};
use crate::core::error::SlateError;
use crate::core::filter::{Filter, MAX_PATTERNS};
use crate::core::location::Location;
use crate::core::meta::Placement;
use crate::core::units::parse_size;
use crate::engine::lease::Wait;
use crate::engine::once::{MaxDelete, SyncOptions};
use crate::engine::plan::Rule;

/// What a job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Copy,
    SyncOnce,
    Diff,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Copy => "copy",
            Kind::SyncOnce => "sync-once",
            Kind::Diff => "diff",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        [Kind::Copy, Kind::SyncOnce, Kind::Diff]
            .into_iter()
            .find(|k| k.name() == s)
    }
}

/// A request the API refuses: the status, the message and the field it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub field: Option<String>,
    pub message: String,
}

impl Refused {
    fn bad(field: &str, message: impl Into<String>) -> Refused {
        Refused {
            status: 400,
            field: Some(field.into()),
            message: message.into(),
        }
    }

    pub(super) fn not_found(id: i64) -> Refused {
        Refused {
            status: 404,
            field: None,
            message: format!("no job {id}"),
        }
    }

    pub(super) fn conflict(message: String) -> Refused {
        Refused {
            status: 409,
            field: None,
            message,
        }
    }

    pub(super) fn internal(e: SlateError) -> Refused {
        Refused {
            status: 500,
            field: None,
            message: e.to_string(),
        }
    }
}

/// A checked `POST /jobs` body.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRequest {
    pub kind: Kind,
    pub src: String,
    pub dst: String,
    /// The options as given (normalised JSON object), stored with the job.
    pub options: Value,
}

const FIELDS: &[&str] = &["kind", "src", "dst", "options"];

const OPTION_FIELDS: &[&str] = &[
    "transfers",
    "streams",
    "chunk_size",
    "verify",
    "dry_run",
    "no_delete",
    "max_delete",
    "include",
    "exclude",
    "copy_links",
    "storage_class",
    "acl",
    "checksum",
    "size_only",
    "bwlimit",
    "no_server_side_copy",
];

/// Checks a `POST /jobs` body; every refusal names the field.
pub fn parse_request(body: &[u8]) -> Result<JobRequest, Refused> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| Refused::bad("body", format!("not JSON: {e}")))?;
    let Value::Object(o) = v else {
        return Err(Refused::bad("body", "must be a JSON object"));
    };
    if let Some(k) = o.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(Refused::bad(
            k,
            format!("unknown field '{k}' (known: kind, src, dst, options)"),
        ));
    }
    // the announcement's `POST /jobs {"src": …, "dst": …}`: without a kind, a copy
    let kind_text = match o.get("kind") {
        None | Some(Value::Null) => Kind::Copy.name().to_string(),
        Some(_) => text(&o, "kind")?,
    };
    let kind = Kind::parse(&kind_text).ok_or_else(|| {
        Refused::bad(
            "kind",
            format!("unknown kind '{kind_text}' (known: copy, sync-once, diff)"),
        )
    })?;
    let (src, dst) = (text(&o, "src")?, text(&o, "dst")?);
    for (name, url) in [("src", &src), ("dst", &dst)] {
        Location::parse(url).map_err(|e| Refused::bad(name, e.to_string()))?;
    }
    let req = JobRequest {
        kind,
        src,
        dst,
        options: options(o.get("options"))?,
    };
    // the options are checked now, not when the job starts
    req.settings(&CopyOptions::default())?;
    Ok(req)
}

/// A required, non-empty string field, trimmed.
fn text(o: &Map<String, Value>, name: &str) -> Result<String, Refused> {
    match o.get(name) {
        None | Some(Value::Null) => Err(Refused::bad(name, format!("'{name}' is required"))),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        Some(_) => Err(Refused::bad(
            name,
            format!("'{name}' must be a non-empty string"),
        )),
    }
}

/// The `options` object (`{}` when absent), naming only known options.
fn options(v: Option<&Value>) -> Result<Value, Refused> {
    match v {
        None | Some(Value::Null) => Ok(json!({})),
        Some(Value::Object(opts)) => {
            if let Some(k) = opts.keys().find(|k| !OPTION_FIELDS.contains(&k.as_str())) {
                return Err(Refused::bad(
                    &format!("options.{k}"),
                    format!("unknown option '{k}' (known: {})", OPTION_FIELDS.join(", ")),
                ));
            }
            Ok(Value::Object(opts.clone()))
        }
        Some(_) => Err(Refused::bad("options", "must be a JSON object")),
    }
}

/// A job's options turned into the copier's and the reconciler's.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) copy: CopyOptions,
    pub(super) sync: SyncOptions,
}

impl JobRequest {
    /// The options on top of `base` (the config's copier settings).
    pub(super) fn settings(&self, base: &CopyOptions) -> Result<Settings, Refused> {
        let empty = Map::new();
        let o = Opts(self.options.as_object().unwrap_or(&empty));
        let mut copy = o.copy(base)?;
        // a job's own bandwidth limit: its own bucket
        if let Some(b) = o.string("bwlimit")? {
            let s =
                crate::copy::bwlimit::Schedule::parse(&b).map_err(|e| Opts::bad("bwlimit", e))?;
            copy.bwlimit = Some(std::sync::Arc::new(crate::copy::bwlimit::BwLimit::new(s)));
        }
        // the storage class and ACL, checked for the destination's store
        copy.placement = Placement {
            storage_class: o.string("storage_class")?.or(copy.placement.storage_class),
            acl: o.string("acl")?.or(copy.placement.acl),
        };
        if let Ok(dst) = Location::parse(&self.dst) {
            copy.placement = copy.placement.for_store(dst.scheme).map_err(|e| {
                let k = if e.starts_with("ACL") {
                    "acl"
                } else {
                    "storage_class"
                };
                Opts::bad(k, e)
            })?;
        }
        let max_delete = o.max_delete()?;
        let rule = match (o.flag("checksum")?, o.flag("size_only")?) {
            (true, true) => {
                return Err(Opts::bad(
                    "size_only",
                    "'checksum' and 'size_only' are two different rules: give one",
                ))
            }
            (true, _) => Rule::Checksum,
            (_, true) => Rule::SizeOnly,
            _ => Rule::ModTime,
        };
        if self.kind == Kind::Copy && rule != Rule::ModTime {
            let k = if rule == Rule::Checksum {
                "checksum"
            } else {
                "size_only"
            };
            return Err(Opts::bad(
                k,
                format!("'{k}' applies to sync-once and diff jobs"),
            ));
        }
        let (dry_run, no_delete) = (o.flag("dry_run")?, o.flag("no_delete")?);
        let filter = Filter::new(o.list("include")?, o.list("exclude")?, None)
            .map_err(|e| Opts::bad(e.list, format!("'{}': {e}", e.list)))?;
        let only_sync = [
            ("dry_run", dry_run),
            ("no_delete", no_delete),
            ("max_delete", max_delete.is_some()),
        ];
        self.check_scope(&only_sync, &filter)?;
        Ok(Settings {
            sync: SyncOptions {
                dry_run,
                no_delete,
                max_delete,
                filter,
                // as `sync --once`: both sides listed, the manifest sparing HEADs
                full: true,
                copy: copy.clone(),
                // a job waits for another reconcile of its pair to finish
                wait: Wait::Yes,
                unless_synced: false,
                rule,
                enqueue: false,
                enqueue_deletes: false,
                backup: None,
                inventory: None,
                copy_only: false,
                purpose: format!("job ({})", self.kind.name()),
            },
            copy,
        })
    }

    /// Options some kinds ignore are refused for them: `only_sync` is (option, set) of those
    /// only sync-once jobs take; a copy takes no filter.
    fn check_scope(&self, only_sync: &[(&str, bool)], filter: &Filter) -> Result<(), Refused> {
        if self.kind != Kind::SyncOnce {
            if let Some((k, _)) = only_sync.iter().find(|(_, set)| *set) {
                return Err(Refused::bad(
                    &format!("options.{k}"),
                    format!("'{k}' applies to sync-once jobs only"),
                ));
            }
        }
        if self.kind == Kind::Copy && !filter.include().is_empty() | !filter.exclude().is_empty() {
            return Err(Refused::bad(
                "options.include",
                "include/exclude apply to sync-once and diff jobs",
            ));
        }
        Ok(())
    }
}

/// A job's options object, read one option at a time; refusals name `options.NAME`.
struct Opts<'a>(&'a Map<String, Value>);

impl Opts<'_> {
    fn get(&self, k: &str) -> Option<&Value> {
        self.0.get(k).filter(|v| !v.is_null())
    }

    fn bad(k: &str, message: impl Into<String>) -> Refused {
        Refused::bad(&format!("options.{k}"), message)
    }

    /// The copier's settings: `base` with the job's counts, chunk size and verify.
    fn copy(&self, base: &CopyOptions) -> Result<CopyOptions, Refused> {
        let mut copy = base.clone();
        copy.progress = ProgressMode::Quiet;
        // a value asked for is fixed; without one the copier tunes it (and so does the base's)
        if let Some(n) = self.count("transfers")? {
            copy.transfers = Some(n);
        }
        if let Some(n) = self.count("streams")? {
            copy.streams = Some(n);
        }
        if let Some(n) = self.size("chunk_size")? {
            copy.chunk_size = Some(n);
        }
        copy.verify = self.flag("verify")?;
        copy.copy_links = self.flag("copy_links")?;
        if self.flag("no_server_side_copy")? {
            copy.server_side_copy = false;
        }
        copy.validate()
            .map_err(|e| Refused::bad("options", e.to_string()))?;
        Ok(copy)
    }

    /// 1 to 1024.
    fn count(&self, k: &str) -> Result<Option<usize>, Refused> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if (1..=1024).contains(&n) => Ok(Some(n as usize)),
                _ => Err(Self::bad(k, format!("'{k}' must be 1 to 1024"))),
            },
        }
    }

    /// Bytes, or a size like `"64MiB"`.
    fn size(&self, k: &str) -> Result<Option<u64>, Refused> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
            Some(Value::String(s)) => parse_size(s).map(Some).map_err(|e| Self::bad(k, e)),
            Some(_) => Err(Self::bad(k, format!("'{k}' must be a size like \"64MiB\""))),
        }
    }

    /// A non-empty string, or None when absent.
    fn string(&self, k: &str) -> Result<Option<String>, Refused> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
            Some(_) => Err(Self::bad(k, format!("'{k}' must be a non-empty string"))),
        }
    }

    fn flag(&self, k: &str) -> Result<bool, Refused> {
        match self.get(k) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(Self::bad(k, format!("'{k}' must be true or false"))),
        }
    }

    /// A list of patterns (strings).
    fn list(&self, k: &str) -> Result<Vec<String>, Refused> {
        let bad = || Self::bad(k, format!("'{k}' must be a list of patterns"));
        match self.get(k) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) if a.len() > MAX_PATTERNS => Err(Self::bad(
                k,
                format!(
                    "'{k}' holds {} patterns, more than the {MAX_PATTERNS} accepted",
                    a.len()
                ),
            )),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().map(str::to_string).ok_or_else(bad))
                .collect(),
            Some(_) => Err(bad()),
        }
    }

    /// A count or a percentage like `"10%"`.
    fn max_delete(&self) -> Result<Option<MaxDelete>, Refused> {
        let k = "max_delete";
        let text = match self.get(k) {
            None => return Ok(None),
            Some(Value::Number(n)) => n.to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => {
                return Err(Self::bad(
                    k,
                    format!("'{k}' must be a count or a percentage like \"10%\""),
                ))
            }
        };
        MaxDelete::parse(&text)
            .map(Some)
            .map_err(|e| Self::bad(k, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_checked_field_by_field() {
        let ok = parse_request(br#"{"kind":"copy","src":"/tmp/a","dst":"s3://b/x"}"#).unwrap();
        assert_eq!((ok.kind, ok.src.as_str()), (Kind::Copy, "/tmp/a"));
        // no kind: a copy, as the announcement's example posts it
        let ok = parse_request(br#"{"src":"/tmp/a","dst":"s3://b/x"}"#).unwrap();
        assert_eq!(ok.kind, Kind::Copy);
        let ok = parse_request(
            br#"{"src":"/a","dst":"s3://b/x","options":{"storage_class":"standard_ia","acl":"public-read"}}"#,
        )
        .unwrap();
        let s = ok.settings(&CopyOptions::default()).unwrap();
        assert_eq!(
            s.copy.placement.storage_class.as_deref(),
            Some("STANDARD_IA")
        );
        assert_eq!(s.copy.placement.acl.as_deref(), Some("public-read"));
        assert!(s.copy.server_side_copy, "the store copies by default");
        let ok =
            parse_request(br#"{"src":"/a","dst":"/b","options":{"no_server_side_copy":true}}"#)
                .unwrap();
        assert!(
            !ok.settings(&CopyOptions::default())
                .unwrap()
                .copy
                .server_side_copy
        );
        let ok = parse_request(
            br#"{"kind":"sync-once","src":"/a","dst":"/b","options":{"no_delete":true,"max_delete":"10%","transfers":4,"chunk_size":"8MiB","include":["x/**"]}}"#,
        )
        .unwrap();
        assert_eq!(ok.kind, Kind::SyncOnce);
        let s = ok.settings(&CopyOptions::default()).unwrap();
        assert_eq!(
            (s.copy.transfers, s.copy.streams, s.copy.chunk_size),
            (Some(4), None, Some(8 << 20)),
            "asked for: fixed; not asked for: adaptive"
        );
        assert!(s.sync.no_delete && s.sync.max_delete == Some(MaxDelete::Percent(10.0)));
        assert_eq!(s.sync.filter.include(), vec!["x/**".to_string()]);
        // (body, the field named)
        let table: &[(&str, &str)] = &[
            ("not json", "body"),
            ("[1]", "body"),
            (
                r#"{"kind":"copy","src":"/a","dst":"/b","extra":1}"#,
                "extra",
            ),
            (r#"{"kind":"move","src":"/a","dst":"/b"}"#, "kind"),
            (r#"{"kind":"copy","dst":"/b"}"#, "src"),
            (r#"{"kind":"copy","src":"","dst":"/b"}"#, "src"),
            (r#"{"kind":"copy","src":"nope://x","dst":"/b"}"#, "src"),
            (r#"{"kind":"copy","src":"/a","dst":"s3://"}"#, "dst"),
            (
                r#"{"kind":"copy","src":"/a","dst":"/b","options":3}"#,
                "options",
            ),
            (
                r#"{"kind":"copy","src":"/a","dst":"/b","options":{"speed":1}}"#,
                "options.speed",
            ),
            (
                r#"{"kind":"copy","src":"/a","dst":"/b","options":{"transfers":0}}"#,
                "options.transfers",
            ),
            (
                r#"{"kind":"copy","src":"/a","dst":"/b","options":{"chunk_size":"huge"}}"#,
                "options.chunk_size",
            ),
            (
                r#"{"kind":"copy","src":"/a","dst":"/b","options":{"chunk_size":-1}}"#,
                "options.chunk_size",
            ),
            (
                r#"{"kind":"copy","src":"/a","dst":"/b","options":{"no_delete":true}}"#,
                "options.no_delete",
            ),
            (
                r#"{"kind":"sync-once","src":"/a","dst":"/b","options":{"max_delete":"x"}}"#,
                "options.max_delete",
            ),
            (
                r#"{"kind":"sync-once","src":"/a","dst":"/b","options":{"max_delete":[]}}"#,
                "options.max_delete",
            ),
            (
                r#"{"kind":"sync-once","src":"/a","dst":"/b","options":{"verify":"yes"}}"#,
                "options.verify",
            ),
            (
                r#"{"kind":"diff","src":"/a","dst":"/b","options":{"include":[1]}}"#,
                "options.include",
            ),
            (
                r#"{"kind":"copy","src":"/a","dst":"/b","options":{"exclude":["x"]}}"#,
                "options.include",
            ),
            (
                r#"{"src":"/a","dst":"/b","options":{"bwlimit":"25:00,1M"}}"#,
                "options.bwlimit",
            ),
            (
                r#"{"kind":null,"src":"/a","dst":"/b","options":{"acl":"x"}}"#,
                "options.acl",
            ),
            (
                r#"{"src":"/a","dst":"az://c/p","options":{"storage_class":"GLACIER"}}"#,
                "options.storage_class",
            ),
            (
                r#"{"src":"/a","dst":"az://c/p","options":{"acl":"public-read"}}"#,
                "options.acl",
            ),
            (
                r#"{"kind":"copy","src":"/a","dst":"/b","options":{"copy_links":1}}"#,
                "options.copy_links",
            ),
            (
                r#"{"src":"/a","dst":"/b","options":{"no_server_side_copy":"yes"}}"#,
                "options.no_server_side_copy",
            ),
        ];
        for (body, field) in table {
            let e = parse_request(body.as_bytes()).expect_err(body);
            assert_eq!(
                (e.status, e.field.as_deref()),
                (400, Some(*field)),
                "{body}: {e:?}"
            );
            assert!(!e.message.is_empty() && !e.message.contains('\n'), "{e:?}");
        }
    }

    #[test]
    fn glob_lists_are_bounded_and_bad_ones_named() {
        let body = |opts: serde_json::Value| {
            json!({"kind": "sync-once", "src": "/a", "dst": "/b", "options": opts}).to_string()
        };
        let many: Vec<String> = (0..=MAX_PATTERNS).map(|i| format!("k{i}/*")).collect();
        let long = format!(
            "keep/{}",
            "x".repeat(crate::core::filter::MAX_PATTERN_BYTES)
        );
        let cases = [
            (
                json!({ "include": many }),
                "options.include",
                "101 patterns",
            ),
            (
                json!({"exclude": ["a/*", long]}),
                "options.exclude",
                "'keep/xxx",
            ),
            (json!({"include": [""]}), "options.include", "empty pattern"),
        ];
        for (opts, field, says) in cases {
            let e = parse_request(body(opts).as_bytes()).unwrap_err();
            assert_eq!((e.status, e.field.as_deref()), (400, Some(field)), "{e:?}");
            assert!(e.message.contains(says), "{e:?}");
            assert!(
                e.message.len() < 200,
                "the refusal does not echo a long pattern: {e:?}"
            );
        }
        let req = parse_request(
            body(json!({"include": ["?.txt", "x[1]/**"], "exclude": ["*.tmp"]})).as_bytes(),
        )
        .unwrap();
        let f = req.settings(&CopyOptions::default()).unwrap().sync.filter;
        assert!(f.key("é.txt") && f.key("x[1]/a/b") && !f.key("x[1]/a.tmp") && !f.key("ab.txt"));
    }
}
