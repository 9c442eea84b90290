//! What travels with an object's bytes: the five HTTP properties a browser or a CDN reads,
//! user metadata, and the modification time, in the key and format rclone uses on each store
//! so that each tool reads the other's replicas. Pure: attributes in, attributes out, with
//! every rule of the mapping across S3, Azure and GCS here (and in docs/METADATA.md).
//!
//! - Names are lower-case everywhere (S3 and GCS fold them; Azure keeps case but compares
//!   without it).
//! - Azure takes only C# identifiers as names: every other character becomes `_` (`my-key` →
//!   `my_key`), and a leading digit gets a `_` before it. Two names that become one are an
//!   error naming both.
//! - Header values are ASCII. A value with other characters is written as an RFC 2047 word
//!   (`=?UTF-8?B?…?=`), as the S3 console does, and read back decoded. A control character in
//!   a value is an error naming the field.
//! - Sizes: S3 takes 2 KiB of user metadata (names and values), Azure and GCS 8 KiB. More is
//!   an error naming the object's largest field.
//! - Modification time: user metadata `mtime`: S3 as Unix seconds with up to nine decimals
//!   (`1700000000.123456789`), Azure and GCS as RFC 3339 with nanoseconds; GCS also reads
//!   gsutil's `goog-reserved-file-mtime` (whole seconds).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use object_store::{Attribute, AttributeValue, Attributes};

use super::location::Scheme;

/// The user-metadata name that carries the modification time (rclone's, on every store).
pub const MTIME_KEY: &str = "mtime";
/// gsutil's name for the modification time on GCS (Unix seconds); read, never written.
pub const GSUTIL_MTIME_KEY: &str = "goog-reserved-file-mtime";

/// What travels with an object's bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub content_language: Option<String>,
    pub content_disposition: Option<String>,
    pub cache_control: Option<String>,
    /// User metadata, names lower-case, values decoded; without the modification time.
    pub user: BTreeMap<String, String>,
    /// The modification time recorded with the object (rclone's `mtime`), or a local file's.
    pub mtime: Option<SystemTime>,
    /// `mtime` is the store's last-modified time, taken because the object records none: it
    /// is written to the destination, but it is no metadata of the object's own, so the
    /// [`Meta::fingerprint`] leaves it out.
    pub listed_time: bool,
    /// Object tags (S3's; read only where the source says it has some). Written to S3 and
    /// Azure (blob index tags) destinations; GCS and local folders have no place for them.
    pub tags: BTreeMap<String, String>,
}

/// One change made to fit a destination, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note(pub String);

/// The standard properties, in a fixed order, with the names users know them by.
fn props(m: &Meta) -> [(&'static str, &Option<String>); 5] {
    [
        ("Content-Type", &m.content_type),
        ("Content-Encoding", &m.content_encoding),
        ("Content-Language", &m.content_language),
        ("Content-Disposition", &m.content_disposition),
        ("Cache-Control", &m.cache_control),
    ]
}

impl Meta {
    /// What a local file carries: a Content-Type from its extension (as rclone guesses it)
    /// and its modification time.
    pub fn of_local_file(path: &str, mtime: Option<SystemTime>) -> Meta {
        Meta {
            content_type: content_type_for(path),
            mtime,
            ..Meta::default()
        }
    }

    /// Reads what a store returned with an object (a GET or a HEAD) on `scheme`.
    pub fn from_attributes(scheme: Scheme, attrs: &Attributes) -> Meta {
        let mut m = Meta::default();
        let mut gsutil = None;
        for (k, v) in attrs.iter() {
            let v = v.as_ref().to_string();
            match k {
                Attribute::ContentType => m.content_type = Some(v),
                Attribute::ContentEncoding => m.content_encoding = Some(v),
                Attribute::ContentLanguage => m.content_language = Some(v),
                Attribute::ContentDisposition => m.content_disposition = Some(v),
                Attribute::CacheControl => m.cache_control = Some(v),
                Attribute::Metadata(name) => {
                    let name = name.to_ascii_lowercase();
                    if name == MTIME_KEY {
                        if let Some(t) = parse_mtime(scheme, &v) {
                            m.mtime = Some(t);
                            continue;
                        }
                    }
                    if scheme == Scheme::Gcs && name == GSUTIL_MTIME_KEY {
                        gsutil = v.trim().parse::<u64>().ok();
                        continue;
                    }
                    m.user.insert(name, decode_value(&v));
                }
                _ => {}
            }
        }
        if m.mtime.is_none() {
            m.mtime = gsutil.map(|s| UNIX_EPOCH + Duration::from_secs(s));
        }
        m
    }

    /// The attributes that write this onto `scheme` (names and values made to fit, each
    /// change noted), with the storage class when one is asked for. An error names the field
    /// that cannot be held.
    pub fn to_attributes(
        &self,
        scheme: Scheme,
        storage_class: Option<&str>,
    ) -> Result<(Attributes, Vec<Note>), String> {
        let mut out = Attributes::new();
        let mut notes = Vec::new();
        let fields = [
            Attribute::ContentType,
            Attribute::ContentEncoding,
            Attribute::ContentLanguage,
            Attribute::ContentDisposition,
            Attribute::CacheControl,
        ];
        for (attr, (name, value)) in fields.into_iter().zip(props(self)) {
            if let Some(v) = value {
                out.insert(
                    attr,
                    AttributeValue::from(header_value(name, v, &mut notes)?),
                );
            }
        }
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        let mut total = 0usize;
        let mut largest = ("", 0usize);
        for (name, value) in &self.user {
            if name == MTIME_KEY && self.mtime.is_some() {
                continue;
            }
            let stored = match scheme {
                Scheme::Azure => azure_name(name),
                _ => name.to_ascii_lowercase(),
            };
            if !valid_header_name(&stored) {
                return Err(format!(
                    "metadata name '{name}' cannot be sent as an HTTP header"
                ));
            }
            if stored != *name {
                notes.push(Note(format!(
                    "metadata '{name}' stored as '{stored}' (Azure takes C# identifiers)"
                )));
            }
            if let Some(other) = names.insert(stored.clone(), name.clone()) {
                return Err(format!(
                    "metadata names '{other}' and '{name}' both become '{stored}' on {}",
                    scheme.short()
                ));
            }
            let v = header_value(&format!("metadata '{name}'"), value, &mut notes)?;
            let size = stored.len() + v.len();
            total += size;
            if size > largest.1 {
                largest = (name, size);
            }
            out.insert(Attribute::Metadata(stored.into()), AttributeValue::from(v));
        }
        if let Some(t) = self.mtime {
            let v = format_mtime(scheme, t);
            total += MTIME_KEY.len() + v.len();
            out.insert(
                Attribute::Metadata(MTIME_KEY.into()),
                AttributeValue::from(v),
            );
            if scheme == Scheme::Gcs {
                // gsutil's key too, in whole seconds, as rclone writes both
                if let Ok(d) = t.duration_since(UNIX_EPOCH) {
                    let v = d.as_secs().to_string();
                    total += GSUTIL_MTIME_KEY.len() + v.len();
                    out.insert(
                        Attribute::Metadata(GSUTIL_MTIME_KEY.into()),
                        AttributeValue::from(v),
                    );
                }
            }
        }
        let limit = match scheme {
            Scheme::S3 => 2 * 1024,
            _ => 8 * 1024,
        };
        if total > limit {
            return Err(format!(
                "user metadata of {total} bytes is more than {} holds ({limit}); the largest \
                 field is '{}' ({} bytes)",
                scheme.short(),
                largest.0,
                largest.1
            ));
        }
        if let Some(class) = storage_class {
            out.insert(
                Attribute::StorageClass,
                AttributeValue::from(class.to_string()),
            );
        }
        Ok((out, notes))
    }

    /// The same, with `listed` (the store's last-modified) standing in for a modification
    /// time the object does not record ([`Meta::listed_time`]).
    pub fn or_listed_time(mut self, listed: Option<SystemTime>) -> Meta {
        if self.mtime.is_none() {
            self.mtime = listed;
            self.listed_time = true;
        }
        self
    }

    /// A digest of everything here, to see a metadata-only change (`xxh3`, hex).
    pub fn fingerprint(&self) -> String {
        let mut s = String::new();
        for (name, v) in props(self) {
            s.push_str(name);
            s.push('\0');
            s.push_str(v.as_deref().unwrap_or("\u{1}"));
            s.push('\0');
        }
        for (k, v) in &self.user {
            s.push_str(k);
            s.push('\0');
            s.push_str(v);
            s.push('\0');
        }
        if !self.tags.is_empty() {
            s.push_str("\0tags\0");
            for (k, v) in &self.tags {
                s.push_str(k);
                s.push('\0');
                s.push_str(v);
                s.push('\0');
            }
        }
        let recorded = self.mtime.filter(|_| !self.listed_time);
        if let Some(t) = recorded.and_then(|t| t.duration_since(UNIX_EPOCH).ok()) {
            // milliseconds: what every store and file system here keeps at least
            s.push_str(&t.as_millis().to_string());
        }
        format!("{:016x}", xxhash_rust::xxh3::xxh3_64(s.as_bytes()))
    }
}

/// Tags as Azure takes them (blob index tags): keys of 1 to 128 and values of up to 256
/// characters from `A-Za-z0-9 +-./:=_`, at most 10. Any other character becomes `_` (noted);
/// a key or value too long, or more than 10 tags, is an error naming it.
pub fn azure_tags(
    tags: &BTreeMap<String, String>,
) -> Result<(BTreeMap<String, String>, Vec<Note>), String> {
    if tags.len() > 10 {
        return Err(format!("{} tags: Azure takes 10 at most", tags.len()));
    }
    let fit = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || " +-./:=_".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut out = BTreeMap::new();
    let mut notes = Vec::new();
    for (k, v) in tags {
        let (k2, v2) = (fit(k), fit(v));
        if k2.is_empty() || k2.len() > 128 || v2.len() > 256 {
            return Err(format!(
                "tag '{k}': Azure takes keys of 1 to 128 characters and values of up to 256"
            ));
        }
        if k2 != *k || v2 != *v {
            notes.push(Note(format!(
                "tag '{k}' stored as '{k2}={v2}' (Azure takes A-Za-z0-9 +-./:=_)"
            )));
        }
        if out.insert(k2.clone(), v2).is_some() {
            return Err(format!("two tags become '{k2}' on Azure"));
        }
    }
    Ok((out, notes))
}

/// The Content-Type rclone gives a local file: from its extension, `application/octet-stream`
/// when the extension says nothing.
pub fn content_type_for(path: &str) -> Option<String> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let mime = name
        .rsplit_once('.')
        .and_then(|(_, ext)| mime_guess::from_ext(ext).first());
    let Some(mime) = mime else {
        return Some("application/octet-stream".into());
    };
    // text types read as UTF-8 by a browser unless told otherwise; rclone sends the same
    Some(if mime.type_() == "text" {
        format!("{mime}; charset=utf-8")
    } else {
        mime.to_string()
    })
}

/// An Azure metadata name: a C# identifier (letters, digits and `_`, not starting with a digit).
fn azure_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

fn valid_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A value as a header can carry it: ASCII as is, anything else as an RFC 2047 word.
fn header_value(field: &str, v: &str, notes: &mut Vec<Note>) -> Result<String, String> {
    if v.chars().any(|c| c.is_control() && c != '\t') {
        return Err(format!("{field} holds a control character"));
    }
    if v.is_ascii() {
        return Ok(v.to_string());
    }
    notes.push(Note(format!(
        "{field} has non-ASCII characters: stored as an RFC 2047 word"
    )));
    Ok(format!(
        "=?UTF-8?B?{}?=",
        base64::engine::general_purpose::STANDARD.encode(v.as_bytes())
    ))
}

/// Decodes a value stored as one RFC 2047 word (`=?UTF-8?B?…?=` or `?Q?`); others as they are.
pub fn decode_value(v: &str) -> String {
    let Some(inner) = v.strip_prefix("=?").and_then(|r| r.strip_suffix("?=")) else {
        return v.to_string();
    };
    let mut parts = inner.splitn(3, '?');
    let (Some(charset), Some(enc), Some(text)) = (parts.next(), parts.next(), parts.next()) else {
        return v.to_string();
    };
    if !charset.eq_ignore_ascii_case("utf-8") {
        return v.to_string();
    }
    let bytes = match enc {
        "B" | "b" => base64::engine::general_purpose::STANDARD.decode(text).ok(),
        "Q" | "q" => q_decode(text),
        _ => None,
    };
    bytes
        .and_then(|b| String::from_utf8(b).ok())
        .unwrap_or_else(|| v.to_string())
}

fn q_decode(text: &str) -> Option<Vec<u8>> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'_' => out.push(b' '),
            b'=' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    Some(out)
}

/// The modification time as rclone writes it on `scheme`.
pub fn format_mtime(scheme: Scheme, t: SystemTime) -> String {
    let (secs, nanos) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            if d.subsec_nanos() == 0 {
                (-(d.as_secs() as i64), 0)
            } else {
                (-(d.as_secs() as i64) - 1, 1_000_000_000 - d.subsec_nanos())
            }
        }
    };
    match scheme {
        Scheme::S3 | Scheme::Local => {
            let frac = format!("{nanos:09}");
            let frac = frac.trim_end_matches('0');
            if frac.is_empty() {
                secs.to_string()
            } else {
                format!("{secs}.{frac}")
            }
        }
        // Azure: always nine decimals (rclone's `timeFormatOut`)
        Scheme::Azure => chrono::DateTime::from_timestamp(secs, nanos)
            .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true))
            .unwrap_or_default(),
        // GCS: Go's RFC3339Nano, trailing zeros of the fraction dropped
        Scheme::Gcs => chrono::DateTime::from_timestamp(secs, nanos)
            .map(|d| {
                let full = d.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
                let body = full.trim_end_matches('Z').trim_end_matches('0');
                format!("{}Z", body.trim_end_matches('.'))
            })
            .unwrap_or_default(),
    }
}

/// Reads a modification time in any of the forms rclone and gsutil write (seconds with
/// decimals, or RFC 3339), whatever the store.
pub fn parse_mtime(_scheme: Scheme, v: &str) -> Option<SystemTime> {
    let v = v.trim();
    if let Ok(d) = chrono::DateTime::parse_from_rfc3339(v) {
        let secs = d.timestamp();
        let nanos = d.timestamp_subsec_nanos();
        return from_parts(secs, nanos);
    }
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    let secs: i64 = int.parse().ok()?;
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos: u32 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().ok()?
    };
    if v.starts_with('-') {
        return None;
    }
    from_parts(secs, nanos)
}

fn from_parts(secs: i64, nanos: u32) -> Option<SystemTime> {
    if secs >= 0 {
        UNIX_EPOCH.checked_add(Duration::new(secs as u64, nanos))
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_secs(secs.unsigned_abs()))?
            .checked_add(Duration::from_nanos(nanos as u64))
    }
}

/// Where an object goes and who may read it: a storage class (S3 classes, Azure access
/// tiers, GCS classes) and a canned ACL (S3 canned ACLs, GCS predefined ACLs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    pub storage_class: Option<String>,
    pub acl: Option<String>,
}

const S3_CLASSES: &[&str] = &[
    "STANDARD",
    "REDUCED_REDUNDANCY",
    "STANDARD_IA",
    "ONEZONE_IA",
    "INTELLIGENT_TIERING",
    "GLACIER",
    "DEEP_ARCHIVE",
    "GLACIER_IR",
    "OUTPOSTS",
    "SNOW",
    "EXPRESS_ONEZONE",
];
const AZURE_TIERS: &[&str] = &["Hot", "Cool", "Cold", "Archive"];
const GCS_CLASSES: &[&str] = &[
    "STANDARD",
    "NEARLINE",
    "COLDLINE",
    "ARCHIVE",
    "MULTI_REGIONAL",
    "REGIONAL",
    "DURABLE_REDUCED_AVAILABILITY",
];
const S3_ACLS: &[&str] = &[
    "private",
    "public-read",
    "public-read-write",
    "authenticated-read",
    "aws-exec-read",
    "bucket-owner-read",
    "bucket-owner-full-control",
];
/// GCS's predefined ACLs as its XML API's `x-goog-acl` names them.
const GCS_ACLS: &[&str] = &[
    "private",
    "project-private",
    "public-read",
    "public-read-write",
    "authenticated-read",
    "bucket-owner-read",
    "bucket-owner-full-control",
];

impl Placement {
    /// Checks the values for a destination on `scheme` and returns them in the spelling the
    /// store takes (`cool` → `Cool`; `publicRead` → `public-read`). The error names the
    /// value and the ones the store knows.
    pub fn for_store(&self, scheme: Scheme) -> Result<Placement, String> {
        let pick = |what: &str, v: &str, known: &[&str]| -> Result<String, String> {
            let squash = |s: &str| s.replace(['-', '_'], "").to_ascii_lowercase();
            known
                .iter()
                .find(|k| squash(k) == squash(v))
                .map(|k| k.to_string())
                .ok_or_else(|| {
                    format!(
                        "{what} '{v}' is not one {} knows (one of: {})",
                        scheme.short(),
                        known.join(", ")
                    )
                })
        };
        let storage_class = match (&self.storage_class, scheme) {
            (None, _) => None,
            (Some(v), Scheme::S3) => Some(pick("storage class", v, S3_CLASSES)?),
            (Some(v), Scheme::Azure) => Some(pick("access tier", v, AZURE_TIERS)?),
            (Some(v), Scheme::Gcs) => Some(pick("storage class", v, GCS_CLASSES)?),
            (Some(v), Scheme::Local) => {
                return Err(format!(
                    "storage class '{v}': a local destination has no storage classes"
                ))
            }
        };
        let acl = match (&self.acl, scheme) {
            (None, _) => None,
            (Some(v), Scheme::S3) => Some(pick("ACL", v, S3_ACLS)?),
            (Some(v), Scheme::Gcs) => Some(pick("ACL", v, GCS_ACLS)?),
            (Some(v), Scheme::Azure) => {
                return Err(format!(
                    "ACL '{v}': Azure Blob has no per-object ACL (set the container's public \
                     access level instead)"
                ))
            }
            (Some(v), Scheme::Local) => {
                return Err(format!("ACL '{v}': a local destination has no ACLs"))
            }
        };
        Ok(Placement { storage_class, acl })
    }

    pub fn is_empty(&self) -> bool {
        self.storage_class.is_none() && self.acl.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn mtime_is_written_as_rclone_writes_it() {
        let cases = [
            (
                Scheme::S3,
                t(1_700_000_000, 123_456_789),
                "1700000000.123456789",
            ),
            (Scheme::S3, t(1_700_000_000, 500_000_000), "1700000000.5"),
            (Scheme::S3, t(1_700_000_000, 0), "1700000000"),
            (
                Scheme::Azure,
                t(1_700_000_000, 123_456_789),
                "2023-11-14T22:13:20.123456789Z",
            ),
            (Scheme::Gcs, t(1_700_000_000, 0), "2023-11-14T22:13:20Z"),
            (
                Scheme::Gcs,
                t(1_700_000_000, 120_000_000),
                "2023-11-14T22:13:20.12Z",
            ),
        ];
        for (scheme, time, want) in cases {
            assert_eq!(format_mtime(scheme, time), want, "{scheme:?}");
            assert_eq!(parse_mtime(scheme, want), Some(time), "{want}");
        }
    }

    #[test]
    fn mtime_is_read_in_every_form_seen() {
        let cases = [
            ("1700000000.123456789", Some(t(1_700_000_000, 123_456_789))),
            ("1700000000.1", Some(t(1_700_000_000, 100_000_000))),
            ("1700000000", Some(t(1_700_000_000, 0))),
            (
                "2023-11-14T22:13:20.5+01:00",
                Some(t(1_699_996_400, 500_000_000)),
            ),
            ("2023-11-14T22:13:20Z", Some(t(1_700_000_000, 0))),
            ("yesterday", None),
            ("1700000000.1234567891", None),
            ("-5", None),
            ("", None),
        ];
        for (v, want) in cases {
            assert_eq!(parse_mtime(Scheme::S3, v), want, "{v}");
        }
    }

    fn attrs(pairs: &[(Attribute, &'static str)]) -> Attributes {
        let mut a = Attributes::new();
        for (k, v) in pairs {
            a.insert(k.clone(), AttributeValue::from(*v));
        }
        a
    }

    #[test]
    fn attributes_read_back_as_meta() {
        let a = attrs(&[
            (Attribute::ContentType, "text/html; charset=utf-8"),
            (Attribute::CacheControl, "max-age=60"),
            (Attribute::Metadata("Owner".into()), "team-a"),
            (Attribute::Metadata("mtime".into()), "1700000000.5"),
            (Attribute::Metadata("city".into()), "=?UTF-8?B?S8O2bG4=?="),
        ]);
        let m = Meta::from_attributes(Scheme::S3, &a);
        assert_eq!(m.content_type.as_deref(), Some("text/html; charset=utf-8"));
        assert_eq!(m.cache_control.as_deref(), Some("max-age=60"));
        assert_eq!(m.user.get("owner").map(String::as_str), Some("team-a"));
        assert_eq!(m.user.get("city").map(String::as_str), Some("Köln"));
        assert_eq!(m.mtime, Some(t(1_700_000_000, 500_000_000)));
        assert!(!m.user.contains_key("mtime"));
        // an mtime slate cannot read stays user metadata, not lost
        let a = attrs(&[(Attribute::Metadata("mtime".into()), "soon")]);
        let m = Meta::from_attributes(Scheme::S3, &a);
        assert_eq!(m.mtime, None);
        assert_eq!(m.user.get("mtime").map(String::as_str), Some("soon"));
        // gsutil's seconds on GCS, rclone's key first
        let a = attrs(&[(
            Attribute::Metadata("goog-reserved-file-mtime".into()),
            "1700000000",
        )]);
        assert_eq!(
            Meta::from_attributes(Scheme::Gcs, &a).mtime,
            Some(t(1_700_000_000, 0))
        );
        let a = attrs(&[
            (Attribute::Metadata("goog-reserved-file-mtime".into()), "1"),
            (Attribute::Metadata("mtime".into()), "2023-11-14T22:13:20Z"),
        ]);
        assert_eq!(
            Meta::from_attributes(Scheme::Gcs, &a).mtime,
            Some(t(1_700_000_000, 0))
        );
    }

    fn meta(user: &[(&str, &str)]) -> Meta {
        Meta {
            content_type: Some("text/html".into()),
            user: user
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            mtime: Some(t(1_700_000_000, 250_000_000)),
            ..Meta::default()
        }
    }

    #[test]
    fn names_are_made_to_fit_azure_and_said_so() {
        let m = meta(&[("my-key", "1"), ("2nd", "2"), ("plain_name", "3")]);
        let (a, notes) = m.to_attributes(Scheme::Azure, None).unwrap();
        let get = |k: &'static str| a.get(&Attribute::Metadata(k.into())).map(|v| v.to_string());
        assert_eq!(get("my_key").as_deref(), Some("1"));
        assert_eq!(get("_2nd").as_deref(), Some("2"));
        assert_eq!(get("plain_name").as_deref(), Some("3"));
        assert_eq!(
            get("mtime").as_deref(),
            Some("2023-11-14T22:13:20.250000000Z")
        );
        assert_eq!(notes.len(), 2, "{notes:?}");
        // S3 takes them as they are
        let (a, notes) = m.to_attributes(Scheme::S3, Some("STANDARD_IA")).unwrap();
        assert!(notes.is_empty());
        assert!(a.get(&Attribute::Metadata("my-key".into())).is_some());
        assert_eq!(
            a.get(&Attribute::StorageClass)
                .map(|v| v.to_string())
                .as_deref(),
            Some("STANDARD_IA")
        );
        assert_eq!(
            a.get(&Attribute::Metadata("mtime".into()))
                .map(|v| v.to_string())
                .as_deref(),
            Some("1700000000.25")
        );
        // two names that become one on Azure: an error naming both
        let err = meta(&[("a-b", "1"), ("a_b", "2")])
            .to_attributes(Scheme::Azure, None)
            .unwrap_err();
        assert!(err.contains("'a-b'") && err.contains("'a_b'"), "{err}");
    }

    #[test]
    fn values_are_encoded_checked_and_measured() {
        let (a, notes) = meta(&[("city", "Köln")])
            .to_attributes(Scheme::S3, None)
            .unwrap();
        let v = a
            .get(&Attribute::Metadata("city".into()))
            .unwrap()
            .to_string();
        assert_eq!(v, "=?UTF-8?B?S8O2bG4=?=");
        assert_eq!(decode_value(&v), "Köln");
        assert_eq!(notes.len(), 1);
        let err = meta(&[("note", "a\nb")])
            .to_attributes(Scheme::Gcs, None)
            .unwrap_err();
        assert!(err.contains("metadata 'note'"), "{err}");
        let big = "x".repeat(2100);
        let err = meta(&[("big", &big)])
            .to_attributes(Scheme::S3, None)
            .unwrap_err();
        assert!(err.contains("'big'") && err.contains("2048"), "{err}");
        assert!(meta(&[("big", &big)])
            .to_attributes(Scheme::Azure, None)
            .is_ok());
        assert_eq!(decode_value("=?UTF-8?Q?K=C3=B6ln_Mitte?="), "Köln Mitte");
        assert_eq!(decode_value("plain"), "plain");
        assert_eq!(decode_value("=?UTF-8?B?!!?="), "=?UTF-8?B?!!?=");
    }

    #[test]
    fn tags_are_made_to_fit_azure() {
        let t = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let (out, notes) = azure_tags(&t(&[("team", "a b+c"), ("owner@corp", "Jörg")])).unwrap();
        assert_eq!(out, t(&[("team", "a b+c"), ("owner_corp", "J_rg")]));
        assert_eq!(notes.len(), 1);
        assert!(azure_tags(&t(&[("a@", "1"), ("a_", "2")])).is_err());
        let many: Vec<(String, String)> = (0..11).map(|i| (format!("k{i}"), "v".into())).collect();
        assert!(azure_tags(&many.into_iter().collect()).is_err());
        assert!(azure_tags(&t(&[("k", &"v".repeat(257))])).is_err());
    }

    #[test]
    fn content_types_come_from_extensions() {
        let cases = [
            ("site/index.html", Some("text/html; charset=utf-8")),
            ("a/b.css", Some("text/css; charset=utf-8")),
            ("img.PNG", Some("image/png")),
            ("data.json", Some("application/json")),
            ("model.safetensors", Some("application/octet-stream")),
            ("README", Some("application/octet-stream")),
            ("dir.d/file", Some("application/octet-stream")),
        ];
        for (path, want) in cases {
            assert_eq!(content_type_for(path).as_deref(), want, "{path}");
        }
    }

    #[test]
    fn fingerprints_see_every_field() {
        let a = meta(&[("owner", "a")]);
        let mut b = a.clone();
        assert_eq!(a.fingerprint(), b.fingerprint());
        b.cache_control = Some("no-cache".into());
        assert_ne!(a.fingerprint(), b.fingerprint());
        let mut c = a.clone();
        c.user.insert("owner".into(), "b".into());
        assert_ne!(a.fingerprint(), c.fingerprint());
        let mut d = a.clone();
        d.mtime = Some(t(1_700_000_001, 0));
        assert_ne!(a.fingerprint(), d.fingerprint());
        // a last-modified time standing in for a recorded one is no metadata of the object
        let (mut e, mut f) = (a.clone(), a.clone());
        e.listed_time = true;
        f.listed_time = true;
        f.mtime = Some(t(1_700_000_009, 0));
        assert_eq!(e.fingerprint(), f.fingerprint());
        let mut g = a.clone();
        g.tags.insert("team".into(), "a".into());
        assert_ne!(a.fingerprint(), g.fingerprint());
    }

    #[test]
    fn placement_is_checked_per_store() {
        let p = |c: &str, a: Option<&str>| Placement {
            storage_class: Some(c.into()),
            acl: a.map(str::to_string),
        };
        assert_eq!(
            p("standard_ia", Some("public-read"))
                .for_store(Scheme::S3)
                .unwrap(),
            p("STANDARD_IA", Some("public-read"))
        );
        assert_eq!(
            p("cool", None).for_store(Scheme::Azure).unwrap(),
            p("Cool", None)
        );
        assert_eq!(
            p("nearline", Some("publicRead"))
                .for_store(Scheme::Gcs)
                .unwrap(),
            p("NEARLINE", Some("public-read"))
        );
        let err = p("NEARLINE", None).for_store(Scheme::S3).unwrap_err();
        assert!(
            err.contains("'NEARLINE'") && err.contains("GLACIER"),
            "{err}"
        );
        let err = p("Hot", Some("public-read"))
            .for_store(Scheme::Azure)
            .unwrap_err();
        assert!(err.contains("ACL 'public-read'"), "{err}");
        assert!(p("Hot", None).for_store(Scheme::Local).is_err());
        assert!(Placement::default()
            .for_store(Scheme::Local)
            .unwrap()
            .is_empty());
    }
}
