//! Inventory reports as a source's listing (`--inventory URL`): an S3 Inventory report
//! (`manifest.json` naming gzipped CSV or Parquet files) or an Azure Blob Inventory report
//! (`<rule>-manifest.json` naming CSV or Parquet files), read instead of listing the source.
//!
//! A report's files are in no key order across files, so their rows are sorted as they are
//! read: runs of [`RUN_ROWS`] rows sorted in memory and written to temporary files, merged
//! back in key order (an external merge sort: memory stays at one run whatever the report's
//! size). What comes out is what a listing of the source would give: [`Entry`]s relative to
//! the source's prefix, in key order, the ETag and time written as the store's own listing
//! writes them (so that the manifest rows made from a report compare equal with the next
//! listing's), folder markers, older versions, snapshots and delete markers left out.
//!
//! The report's time (when its scan began) is what the caller needs to cover the gap: a key
//! written after it is not in the report (see docs/USAGE.md, "From an inventory report").

use std::collections::BinaryHeap;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use object_store::ObjectStoreExt as _;
use serde::Deserialize;
use tokio::sync::mpsc;

use super::side::{store_path, Side};
use crate::core::error::{Result, SlateError};
use crate::core::location::{Location, Scheme};
use crate::core::object::Entry;

/// Rows sorted in memory before they are written out as a run (~40 MB of rows with keys of
/// ~100 bytes).
pub const RUN_ROWS: usize = 200_000;

/// Which service wrote the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    S3,
    Azure,
}

/// The format of the report's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// S3: gzipped, no header, the columns named by the manifest's `fileSchema`. Azure:
    /// plain, a header row naming the columns.
    Csv,
    Parquet,
}

/// An opened report: its manifest read, its files named.
#[derive(Debug, Clone)]
pub struct Report {
    /// The manifest, as the user named it (or as found under the folder they named).
    pub url: String,
    pub kind: Kind,
    pub format: Format,
    /// The bucket (S3) the report is of; Azure's reports are of a whole account.
    pub source_bucket: Option<String>,
    /// When the report's scan began: objects written after it may be missing from it.
    pub time: SystemTime,
    /// The data files, in the manifest's order, with the size the manifest gives each.
    pub files: Vec<(Location, Option<u64>)>,
    /// S3 CSV: the columns (`fileSchema`); Azure CSV files name theirs in a header row.
    columns: Vec<String>,
    /// Azure: what the rule left out (checked against the source: a report that leaves out
    /// part of it would make that part look deleted).
    filters: AzureFilters,
}

/// A report that cannot be used as it is (its manifest, a row, its scope): exit 2.
fn bad(url: &str, why: impl Into<String>) -> SlateError {
    SlateError::BadOption {
        option: "--inventory".into(),
        why: format!("{url}: {}", why.into()),
    }
}

/// Reading a report failed on the way (the network, the local disk): exit 1, run again.
fn failed(url: &str, why: impl Into<String>) -> SlateError {
    SlateError::List {
        url: url.to_string(),
        detail: format!("reading the inventory report: {}", why.into()),
    }
}

/// S3 Inventory's `manifest.json` (the fields slate reads).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct S3Manifest {
    source_bucket: String,
    /// Milliseconds since the epoch, as a string.
    creation_timestamp: String,
    file_format: String,
    #[serde(default)]
    file_schema: String,
    files: Vec<S3File>,
}

#[derive(Deserialize)]
struct S3File {
    key: String,
    size: Option<u64>,
}

/// Azure Blob Inventory's `<rule>-manifest.json` (the fields slate reads).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AzureManifest {
    files: Vec<AzureFile>,
    /// e.g. `2021-05-26T13:25:36Z`
    inventory_start_time: Option<String>,
    inventory_completion_time: Option<String>,
    #[serde(default)]
    status: Option<String>,
    rule_definition: Option<AzureRule>,
}

#[derive(Deserialize)]
struct AzureFile {
    blob: String,
    size: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AzureRule {
    format: Option<String>,
    /// `objectType` in the manifests Azure writes (`objects` in older ones).
    #[serde(alias = "objectType")]
    objects: Option<String>,
    #[serde(default)]
    filters: AzureFilters,
}

/// What an Azure rule left out of its report.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AzureFilters {
    #[serde(default)]
    blob_types: Vec<String>,
    #[serde(default)]
    prefix_match: Vec<String>,
    #[serde(default)]
    exclude_prefix: Vec<String>,
}

impl Report {
    /// Reads the manifest at `url`: an S3 `manifest.json`, an Azure `*-manifest.json`, or a
    /// folder holding reports (the newest manifest under it is taken: S3's and Azure's
    /// layouts both name their folders by time).
    pub async fn open(url: &Location) -> Result<Report> {
        let side = Side::open(url)?;
        let base = base_name(url);
        let (side, manifest) = if base.ends_with("manifest.json") {
            (side, url.clone())
        } else {
            let found = newest_manifest(&side).await?;
            let loc = child(url, &found);
            (side.with_loc(loc.clone()), loc)
        };
        let text = read_all(&side, &manifest).await?;
        let shown = manifest.raw.clone();
        if base_name(&manifest) == "manifest.json" {
            Report::s3(&shown, &manifest, &text)
        } else {
            Report::azure(&shown, &manifest, &text)
        }
    }

    fn s3(shown: &str, manifest: &Location, text: &[u8]) -> Result<Report> {
        let m: S3Manifest = serde_json::from_slice(text)
            .map_err(|e| bad(shown, format!("not an S3 Inventory manifest.json: {e}")))?;
        let format = match m.file_format.to_ascii_lowercase().as_str() {
            "csv" => Format::Csv,
            "parquet" => Format::Parquet,
            _ => {
                return Err(bad(
                    shown,
                    format!(
                        "fileFormat {:?} is not read (CSV and Parquet are)",
                        m.file_format
                    ),
                ))
            }
        };
        let ms: i64 = m.creation_timestamp.trim().parse().map_err(|_| {
            bad(
                shown,
                format!("creationTimestamp {:?}", m.creation_timestamp),
            )
        })?;
        let columns = m
            .file_schema
            .split(',')
            .map(|c| c.trim().to_string())
            .collect::<Vec<_>>();
        if format == Format::Csv {
            check_columns(&columns.iter().map(|c| column(c)).collect::<Vec<_>>())
                .map_err(|why| bad(shown, format!("fileSchema: {why}")))?;
        }
        Ok(Report {
            url: shown.to_string(),
            kind: Kind::S3,
            format,
            source_bucket: Some(m.source_bucket),
            time: UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64),
            files: m
                .files
                .iter()
                .map(|f| Ok((data_file(manifest, &f.key)?, f.size)))
                .collect::<Result<_>>()?,
            columns,
            filters: AzureFilters::default(),
        })
    }

    fn azure(shown: &str, manifest: &Location, text: &[u8]) -> Result<Report> {
        let m: AzureManifest = serde_json::from_slice(text).map_err(|e| {
            bad(
                shown,
                format!("not an Azure Blob Inventory manifest (or an S3 manifest.json): {e}"),
            )
        })?;
        if let Some(s) = m.status.as_deref() {
            if !s.eq_ignore_ascii_case("succeeded") {
                return Err(bad(
                    shown,
                    format!(
                        "the report's status is {s:?}: only a finished report lists everything"
                    ),
                ));
            }
        }
        let rule = m.rule_definition.as_ref();
        if let Some(o) = rule.and_then(|r| r.objects.as_deref()) {
            if !o.eq_ignore_ascii_case("blob") {
                return Err(bad(shown, format!("a report of {o:?}, not of blobs")));
            }
        }
        let format = match rule.and_then(|r| r.format.as_deref()) {
            Some(f) if f.eq_ignore_ascii_case("parquet") => Format::Parquet,
            Some(f) if f.eq_ignore_ascii_case("csv") => Format::Csv,
            Some(f) => {
                return Err(bad(
                    shown,
                    format!("format {f:?} is not read (csv and parquet are)"),
                ))
            }
            // no rule in the manifest: by the files' names
            None => match m.files.first().map(|f| f.blob.to_ascii_lowercase()) {
                Some(b) if b.ends_with(".parquet") => Format::Parquet,
                _ => Format::Csv,
            },
        };
        let when = m
            .inventory_start_time
            .as_deref()
            .or(m.inventory_completion_time.as_deref())
            .ok_or_else(|| bad(shown, "no inventoryStartTime"))?;
        let time =
            parse_time(when).ok_or_else(|| bad(shown, format!("inventoryStartTime {when:?}")))?;
        Ok(Report {
            url: shown.to_string(),
            kind: Kind::Azure,
            format,
            source_bucket: None,
            time: UNIX_EPOCH + Duration::from_millis(time.max(0) as u64),
            files: m
                .files
                .iter()
                .map(|f| Ok((data_file(manifest, &f.blob)?, f.size)))
                .collect::<Result<_>>()?,
            columns: Vec::new(),
            filters: rule.map(|r| r.filters.clone()).unwrap_or_default(),
        })
    }

    /// Checks that the report can be of `src`: the same kind of store, and for S3 the same
    /// bucket.
    pub fn check_source(&self, src: &Location) -> Result<()> {
        let fits = match self.kind {
            Kind::S3 => src.scheme == Scheme::S3,
            Kind::Azure => src.scheme == Scheme::Azure,
        };
        if !fits {
            return Err(bad(
                &self.url,
                format!(
                    "an {} inventory report cannot list the source {src}",
                    match self.kind {
                        Kind::S3 => "S3",
                        Kind::Azure => "Azure",
                    }
                ),
            ));
        }
        if self.kind == Kind::Azure {
            self.covers(src)?;
        }
        if let Some(b) = &self.source_bucket {
            if *b != src.bucket {
                return Err(bad(
                    &self.url,
                    format!(
                        "the report is of bucket {b:?}, the source is bucket {:?}",
                        src.bucket
                    ),
                ));
            }
        }
        Ok(())
    }

    /// An Azure rule's filters leave nothing of `src` out: a `prefixMatch` (when there is
    /// one) holds all of `container/prefix/`, no `excludePrefix` reaches into it, and block
    /// blobs are included.
    fn covers(&self, src: &Location) -> Result<()> {
        let f = &self.filters;
        let path = if src.prefix.is_empty() {
            format!("{}/", src.bucket)
        } else {
            format!("{}/{}/", src.bucket, src.prefix)
        };
        if !f.prefix_match.is_empty()
            && !f.prefix_match.iter().any(|p| path.starts_with(p.as_str()))
        {
            return Err(bad(
                &self.url,
                format!(
                    "its rule's prefixMatch {:?} does not hold all of {path}",
                    f.prefix_match
                ),
            ));
        }
        if let Some(e) = f
            .exclude_prefix
            .iter()
            .find(|e| e.starts_with(path.as_str()) || path.starts_with(e.as_str()))
        {
            return Err(bad(
                &self.url,
                format!("its rule's excludePrefix {e:?} leaves out part of {path}"),
            ));
        }
        if !f.blob_types.is_empty()
            && !f
                .blob_types
                .iter()
                .any(|t| t.eq_ignore_ascii_case("blockBlob"))
        {
            return Err(bad(
                &self.url,
                format!("its rule reports only {:?}, not block blobs", f.blob_types),
            ));
        }
        Ok(())
    }

    /// Sends the report's objects under `src` into `tx` as a listing of `src` would (see the
    /// module documentation); returns how many were sent. Rows the report holds twice (a
    /// key in two files) are sent once.
    pub async fn list(&self, src: &Location, tx: mpsc::Sender<Result<Entry>>) -> Result<u64> {
        let tmp = TempDir::new()?;
        let container = match self.kind {
            Kind::Azure => Some(src.bucket.clone()),
            Kind::S3 => None,
        };
        let strip = if src.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", src.prefix)
        };
        let mut sorter = Sorter::new(tmp.path.clone());
        // the files lie in the manifest's bucket: one client for all of them
        let client = match self.files.first() {
            Some((f, _)) if f.scheme != Scheme::Local => Some(Side::open(f)?),
            _ => None,
        };
        let (mut not_current, mut outside) = (0u64, 0u64);
        for (i, (file, size)) in self.files.iter().enumerate() {
            if tx.is_closed() {
                // the walk ended (an error, a lost lease, a stop): nothing more to read
                return Ok(0);
            }
            let (local, temporary) = fetch(client.as_ref(), file, *size, &tmp.path, i).await?;
            let (kind, format, columns, shown) = (
                self.kind,
                self.format,
                self.columns.clone(),
                file.raw.clone(),
            );
            let (strip2, container2) = (strip.clone(), container.clone());
            let read;
            (sorter, read) = tokio::task::spawn_blocking(move || -> Result<(Sorter, [u64; 2])> {
                let mut sorter = sorter;
                let mut outside = 0u64;
                let mut keep = |r: Record| -> Result<()> {
                    match r.relative(&strip2, container2.as_deref()) {
                        Some(rel) => sorter.push(Record { key: rel, ..r })?,
                        None => outside += 1,
                    }
                    Ok(())
                };
                let read = match format {
                    Format::Csv => read_csv(&local, kind, &columns, &mut keep),
                    Format::Parquet => read_parquet(&local, &mut keep),
                };
                if temporary {
                    let _ = std::fs::remove_file(&local);
                }
                let not_current = read.map_err(|why| bad(&shown, why))?;
                Ok((sorter, [not_current, outside]))
            })
            .await
            .map_err(|e| failed(&self.url, e.to_string()))??;
            not_current += read[0];
            outside += read[1];
        }
        tracing::info!(report = %self.url, taken = sorter.rows(), not_current, outside,
            "inventory report read: rows taken; rows left out as not current objects (older versions, delete markers, snapshots, directories) or outside the source");
        if sorter.rows() == 0 {
            // a report of another prefix, container or rule: an empty source would look
            // deleted to everything after it
            return Err(bad(
                &self.url,
                format!(
                    "it lists no object under {src} (a report of another prefix or container?)"
                ),
            ));
        }
        let kind = self.kind;
        let url = self.url.clone();
        let sent = super::list::producer(move || sorter.drain(kind, &tx))
            .await
            .map_err(|e| failed(&url, e))??;
        drop(tmp);
        Ok(sent)
    }
}

/// One object as a report row gives it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Record {
    key: String,
    size: u64,
    etag: Option<String>,
    mtime_ms: Option<i64>,
}

impl Record {
    /// The key relative to the source (`strip`: its prefix and a `/`), or None when the row
    /// is not under it or names a folder marker. An Azure report is of a whole account: its
    /// `Name` is `container/blob` (as its rules' `prefixMatch` is), so a row of another
    /// container is not the source's.
    fn relative(&self, strip: &str, container: Option<&str>) -> Option<String> {
        let mut key = self.key.as_str();
        if let Some(c) = container {
            key = key.strip_prefix(c)?.strip_prefix('/')?;
        }
        let rel = key.strip_prefix(strip)?;
        (!rel.is_empty() && !rel.ends_with('/')).then(|| rel.to_string())
    }

    fn entry(self, kind: Kind) -> Entry {
        // S3's listings quote their ETags, its inventory does not
        let etag = self.etag.filter(|e| !e.is_empty()).map(|e| match kind {
            Kind::S3 if !e.starts_with('"') => format!("\"{e}\""),
            _ => e,
        });
        Entry {
            rel: self.key,
            size: self.size,
            etag,
            mtime: self
                .mtime_ms
                .and_then(|ms| u64::try_from(ms).ok())
                .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        }
    }
}

/// A column name as compared: lower case, without `-`, `_` or spaces (S3's CSV schema says
/// `LastModifiedDate`, its Parquet `last_modified_date`, Azure's `Last-Modified`).
fn norm(c: &str) -> String {
    c.chars()
        .filter(|c| !matches!(c, '-' | '_' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

/// What a column is to slate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Col {
    Key,
    Size,
    Modified,
    ETag,
    /// S3 `IsLatest`, Azure `IsCurrentVersion`: false for an older version.
    Latest,
    /// S3 `IsDeleteMarker`, Azure `Deleted` (soft-deleted blobs).
    Deleted,
    /// Azure `Snapshot`: a snapshot, not the blob.
    Snapshot,
    /// Azure `hdi_isfolder` (accounts with a hierarchical namespace): a directory, which a
    /// listing does not give as an object.
    Folder,
    Other,
}

fn column(name: &str) -> Col {
    match norm(name).as_str() {
        "key" | "name" => Col::Key,
        "size" | "contentlength" => Col::Size,
        "lastmodifieddate" | "lastmodified" => Col::Modified,
        "etag" => Col::ETag,
        "islatest" | "iscurrentversion" => Col::Latest,
        "isdeletemarker" | "deleted" => Col::Deleted,
        "snapshot" => Col::Snapshot,
        "hdiisfolder" => Col::Folder,
        _ => Col::Other,
    }
}

/// The columns a report must have: the key, the size, and the ETag (every copy from a report
/// reads the source with the report's ETag as `If-Match`: without it, a chunked copy of an
/// object overwritten meanwhile could stitch two versions).
fn check_columns(cols: &[Col]) -> std::result::Result<(), String> {
    for (want, name) in [
        (Col::Key, "the key (Key, Name)"),
        (Col::Size, "the size (Size, Content-Length)"),
        (Col::ETag, "the ETag (ETag; add it to the report's fields)"),
    ] {
        if !cols.contains(&want) {
            return Err(format!("the report has no column for {name}"));
        }
    }
    Ok(())
}

/// One row's fields as they come, by column.
#[derive(Default)]
struct Fields {
    key: Option<String>,
    size: Option<u64>,
    modified: Option<i64>,
    etag: Option<String>,
    latest: Option<bool>,
    deleted: Option<bool>,
    snapshot: bool,
    folder: bool,
}

impl Fields {
    /// The object the row is, or None for a row that is not a current object (an older
    /// version, a delete marker, a snapshot, a soft-deleted blob, a directory).
    fn record(self) -> std::result::Result<Option<Record>, String> {
        if self.latest == Some(false) || self.deleted == Some(true) || self.snapshot || self.folder
        {
            return Ok(None);
        }
        let key = self.key.ok_or("a row without a key")?;
        let size = self
            .size
            .ok_or_else(|| format!("key {key:?}: a row without a size"))?;
        let etag = self
            .etag
            .ok_or_else(|| format!("key {key:?}: a row without an ETag"))?;
        Ok(Some(Record {
            key,
            size,
            etag: Some(etag),
            mtime_ms: self.modified,
        }))
    }
}

/// `true`, `false`, or empty (unknown); anything else is an error.
fn truthy(s: &str) -> std::result::Result<Option<bool>, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(Some(true)),
        "false" => Ok(Some(false)),
        "" => Ok(None),
        _ => Err(format!("{s:?} is neither true nor false")),
    }
}

/// An RFC 3339 time (S3's `2016-11-06T21:32:00.000Z`, Azure's `2021-05-26T13:25:36.1234567Z`)
/// or an HTTP date, as Unix milliseconds.
fn parse_time(s: &str) -> Option<i64> {
    let s = s.trim();
    chrono::DateTime::parse_from_rfc3339(s)
        .or_else(|_| chrono::DateTime::parse_from_rfc2822(s))
        .ok()
        .map(|t| t.timestamp_millis())
}

/// An S3 Inventory CSV key: URL-encoded as a form is (`+` a space, `%XX` a byte).
fn s3_key(raw: &str) -> std::result::Result<String, String> {
    let plus = raw.replace('+', " ");
    percent_encoding::percent_decode_str(&plus)
        .decode_utf8()
        .map(|k| k.into_owned())
        .map_err(|_| format!("key {raw:?} is not UTF-8 once decoded"))
}

fn read_csv(
    path: &Path,
    kind: Kind,
    schema: &[String],
    keep: &mut dyn FnMut(Record) -> Result<()>,
) -> std::result::Result<u64, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut buf = BufReader::new(file);
    // gzip by its magic bytes, whatever the file is called
    let gz = buf
        .fill_buf()
        .map_err(|e| e.to_string())?
        .starts_with(&[0x1f, 0x8b]);
    let input: Box<dyn Read> = if gz {
        Box::new(flate2::bufread::MultiGzDecoder::new(buf))
    } else {
        Box::new(buf)
    };
    let mut rd = csv::ReaderBuilder::new()
        .has_headers(kind == Kind::Azure)
        .from_reader(input);
    let cols: Vec<Col> = match kind {
        Kind::S3 => schema.iter().map(|c| column(c)).collect(),
        Kind::Azure => rd
            .headers()
            .map_err(|e| format!("header row: {e}"))?
            .iter()
            .map(column)
            .collect(),
    };
    check_columns(&cols)?;
    let mut skipped = 0u64;
    let mut rec = csv::StringRecord::new();
    loop {
        let ok = rd.read_record(&mut rec);
        // the line of the file where the record began (a quoted field may hold line breaks)
        let line = rec.position().map(|p| p.line()).unwrap_or(0);
        match ok {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => return Err(format!("line {line}: {e}")),
        }
        if rec.len() != cols.len() {
            return Err(format!(
                "line {line}: {} fields where the report names {} columns",
                rec.len(),
                cols.len()
            ));
        }
        let at = |why: String| format!("line {line}: {why}");
        let mut f = Fields::default();
        for (c, v) in cols.iter().zip(rec.iter()) {
            match c {
                Col::Key => {
                    f.key = Some(match kind {
                        Kind::S3 => s3_key(v).map_err(at)?,
                        Kind::Azure => v.to_string(),
                    })
                }
                Col::Size if !v.is_empty() => {
                    f.size = Some(v.trim().parse().map_err(|_| at(format!("size {v:?}")))?)
                }
                Col::Modified if !v.is_empty() => {
                    f.modified = Some(parse_time(v).ok_or_else(|| at(format!("time {v:?}")))?)
                }
                Col::ETag if !v.is_empty() => f.etag = Some(v.to_string()),
                Col::Latest => f.latest = truthy(v).map_err(at)?,
                Col::Deleted => f.deleted = truthy(v).map_err(at)?,
                Col::Folder => f.folder = truthy(v).map_err(at)? == Some(true),
                Col::Snapshot => f.snapshot = !v.trim().is_empty(),
                _ => {}
            }
        }
        match f.record().map_err(at)? {
            Some(r) => keep(r).map_err(|e| e.to_string())?,
            None => skipped += 1,
        }
    }
    Ok(skipped)
}

/// A report's Parquet file (S3's columns `key`, `size`, `last_modified_date`, `e_tag`, …;
/// Azure's the same names as its CSV). Keys are as they are: only S3's CSV encodes them.
fn read_parquet(
    path: &Path,
    keep: &mut dyn FnMut(Record) -> Result<()>,
) -> std::result::Result<u64, String> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let reader = SerializedFileReader::new(file).map_err(|e| e.to_string())?;
    let names: Vec<Col> = reader
        .metadata()
        .file_metadata()
        .schema_descr()
        .root_schema()
        .get_fields()
        .iter()
        .map(|f| column(f.name()))
        .collect();
    check_columns(&names)?;
    let mut skipped = 0u64;
    let rows = reader.get_row_iter(None).map_err(|e| e.to_string())?;
    for (i, row) in rows.enumerate() {
        let at = |why: String| format!("row {}: {why}", i + 1);
        let row = row.map_err(|e| at(e.to_string()))?;
        let mut f = Fields::default();
        for (name, v) in row.get_column_iter() {
            let unexpected = || at(format!("column {name} holds {v}"));
            match (column(name), v) {
                (_, Field::Null) => {}
                (Col::Key, Field::Str(s)) => f.key = Some(s.clone()),
                (Col::Size, Field::Long(n)) => {
                    f.size = Some(u64::try_from(*n).map_err(|_| unexpected())?)
                }
                (Col::Size, Field::Int(n)) => {
                    f.size = Some(u64::try_from(*n).map_err(|_| unexpected())?)
                }
                (Col::Size, Field::ULong(n)) => f.size = Some(*n),
                (Col::Size, Field::Str(s)) => {
                    f.size = Some(s.trim().parse().map_err(|_| unexpected())?)
                }
                (Col::Modified, Field::TimestampMillis(ms)) => f.modified = Some(*ms),
                (Col::Modified, Field::TimestampMicros(us)) => f.modified = Some(us / 1000),
                (Col::Modified, Field::Long(ms)) => f.modified = Some(*ms),
                (Col::Modified, Field::Str(s)) => {
                    f.modified = Some(parse_time(s).ok_or_else(unexpected)?)
                }
                (Col::ETag, Field::Str(s)) => f.etag = Some(s.clone()),
                (Col::Latest, Field::Bool(b)) => f.latest = Some(*b),
                (Col::Latest, Field::Str(s)) => f.latest = truthy(s).map_err(at)?,
                (Col::Deleted, Field::Bool(b)) => f.deleted = Some(*b),
                (Col::Deleted, Field::Str(s)) => f.deleted = truthy(s).map_err(at)?,
                (Col::Folder, Field::Bool(b)) => f.folder = *b,
                (Col::Folder, Field::Str(s)) => f.folder = truthy(s).map_err(at)? == Some(true),
                (Col::Snapshot, Field::Str(s)) => f.snapshot = !s.trim().is_empty(),
                (Col::Key | Col::Size | Col::Modified | Col::ETag, _) => return Err(unexpected()),
                _ => {}
            }
        }
        match f.record().map_err(at)? {
            Some(r) => keep(r).map_err(|e| e.to_string())?,
            None => skipped += 1,
        }
    }
    Ok(skipped)
}

/// Runs merged at once; more are first merged a group at a time into longer runs, so that
/// a report of hundreds of millions of rows never holds more files open than this.
const MERGE_FAN_IN: usize = 64;

/// The external sort: rows gathered into runs, each sorted and written out once full, then
/// merged.
struct Sorter {
    dir: PathBuf,
    rows: Vec<Record>,
    runs: Vec<PathBuf>,
    run_rows: usize,
    count: u64,
    made: usize,
}

impl Sorter {
    fn new(dir: PathBuf) -> Sorter {
        Sorter::with_runs_of(dir, RUN_ROWS)
    }

    fn with_runs_of(dir: PathBuf, run_rows: usize) -> Sorter {
        Sorter {
            dir,
            rows: Vec::new(),
            runs: Vec::new(),
            run_rows,
            count: 0,
            made: 0,
        }
    }

    /// Rows pushed so far.
    fn rows(&self) -> u64 {
        self.count
    }

    fn push(&mut self, r: Record) -> Result<()> {
        self.rows.push(r);
        self.count += 1;
        if self.rows.len() >= self.run_rows {
            self.spill()?;
        }
        Ok(())
    }

    fn next_path(&mut self) -> PathBuf {
        self.made += 1;
        self.dir.join(format!("run-{}", self.made))
    }

    fn spill(&mut self) -> Result<()> {
        self.rows.sort_unstable();
        let path = self.next_path();
        let io = |e: std::io::Error| failed(&path.display().to_string(), e.to_string());
        let mut w = BufWriter::new(std::fs::File::create(&path).map_err(io)?);
        for r in self.rows.drain(..) {
            write_record(&mut w, &r).map_err(io)?;
        }
        w.flush().map_err(io)?;
        self.runs.push(path);
        Ok(())
    }

    /// Sends every row in key order, each key once (of rows a report holds twice, the newest
    /// by modification time); returns how many were sent.
    fn drain(mut self, kind: Kind, tx: &mpsc::Sender<Result<Entry>>) -> Result<u64> {
        let mut out = Dedup::new(|r: Record| tx.blocking_send(Ok(r.entry(kind))).is_ok());
        if self.runs.is_empty() {
            self.rows.sort_unstable();
            for r in std::mem::take(&mut self.rows) {
                if !out.push(r) {
                    break;
                }
            }
        } else {
            if !self.rows.is_empty() {
                self.spill()?;
            }
            // fewer runs than the fan-in: longer runs first, a group at a time
            while self.runs.len() > MERGE_FAN_IN {
                let group: Vec<PathBuf> = self.runs.drain(..MERGE_FAN_IN).collect();
                let path = self.next_path();
                let io = |e: std::io::Error| failed(&path.display().to_string(), e.to_string());
                let mut w = BufWriter::new(std::fs::File::create(&path).map_err(io)?);
                merge(&group, &mut |r| write_record(&mut w, &r).is_ok())?;
                w.flush().map_err(io)?;
                for p in &group {
                    let _ = std::fs::remove_file(p);
                }
                self.runs.push(path);
            }
            let runs = std::mem::take(&mut self.runs);
            merge(&runs, &mut |r| out.push(r))?;
        }
        let (sent, doubled) = out.finish();
        if doubled > 0 {
            tracing::warn!(
                rows = doubled,
                "the inventory report holds keys more than once; the newest row of each was taken"
            );
        }
        Ok(sent)
    }
}

/// Merges sorted runs, calling `each` with every row in order until it says stop.
fn merge(runs: &[PathBuf], each: &mut dyn FnMut(Record) -> bool) -> Result<()> {
    let io = |p: &Path, e: std::io::Error| failed(&p.display().to_string(), e.to_string());
    let mut readers = Vec::new();
    let mut heap = BinaryHeap::new();
    for (i, p) in runs.iter().enumerate() {
        let mut rd = BufReader::new(std::fs::File::open(p).map_err(|e| io(p, e))?);
        if let Some(r) = read_record(&mut rd).map_err(|e| io(p, e))? {
            heap.push(std::cmp::Reverse((r, i)));
        }
        readers.push(rd);
    }
    while let Some(std::cmp::Reverse((r, i))) = heap.pop() {
        if let Some(next) = read_record(&mut readers[i]).map_err(|e| io(&runs[i], e))? {
            heap.push(std::cmp::Reverse((next, i)));
        }
        if !each(r) {
            break;
        }
    }
    Ok(())
}

/// Rows in key order in, each key once out: of equal keys, the row with the latest
/// modification time (then the last in sort order).
struct Dedup<F: FnMut(Record) -> bool> {
    held: Option<Record>,
    send: F,
    sent: u64,
    doubled: u64,
    open: bool,
}

impl<F: FnMut(Record) -> bool> Dedup<F> {
    fn new(send: F) -> Self {
        Dedup {
            held: None,
            send,
            sent: 0,
            doubled: 0,
            open: true,
        }
    }

    /// False once the receiver is gone.
    fn push(&mut self, r: Record) -> bool {
        match self.held.take() {
            Some(h) if h.key == r.key => {
                self.doubled += 1;
                self.held = Some(if r.mtime_ms >= h.mtime_ms { r } else { h });
            }
            Some(h) => {
                self.sent += 1;
                self.open = (self.send)(h);
                self.held = Some(r);
            }
            None => self.held = Some(r),
        }
        self.open
    }

    fn finish(mut self) -> (u64, u64) {
        if let (Some(h), true) = (self.held.take(), self.open) {
            self.sent += 1;
            (self.send)(h);
        }
        (self.sent, self.doubled)
    }
}

fn write_record(w: &mut impl Write, r: &Record) -> std::io::Result<()> {
    w.write_all(&(r.key.len() as u32).to_le_bytes())?;
    w.write_all(r.key.as_bytes())?;
    w.write_all(&r.size.to_le_bytes())?;
    w.write_all(&r.mtime_ms.unwrap_or(i64::MIN).to_le_bytes())?;
    match &r.etag {
        Some(e) => {
            w.write_all(&(e.len() as u32).to_le_bytes())?;
            w.write_all(e.as_bytes())?;
        }
        None => w.write_all(&u32::MAX.to_le_bytes())?,
    }
    Ok(())
}

fn read_record(rd: &mut impl Read) -> std::io::Result<Option<Record>> {
    let mut n4 = [0u8; 4];
    match rd.read_exact(&mut n4) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let text = |rd: &mut dyn Read, n: u32| -> std::io::Result<String> {
        let mut b = vec![0u8; n as usize];
        rd.read_exact(&mut b)?;
        String::from_utf8(b).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    };
    let key = text(rd, u32::from_le_bytes(n4))?;
    let mut n8 = [0u8; 8];
    rd.read_exact(&mut n8)?;
    let size = u64::from_le_bytes(n8);
    rd.read_exact(&mut n8)?;
    let mtime_ms = Some(i64::from_le_bytes(n8)).filter(|t| *t != i64::MIN);
    rd.read_exact(&mut n4)?;
    let etag = match u32::from_le_bytes(n4) {
        u32::MAX => None,
        n => Some(text(rd, n)?),
    };
    Ok(Some(Record {
        key,
        size,
        etag,
        mtime_ms,
    }))
}

/// A folder of temporary files, removed when dropped.
struct TempDir {
    path: PathBuf,
}

const TEMP_PREFIX: &str = "slate-inventory-";

impl TempDir {
    /// A new folder in `$TMPDIR`; the folders of slate processes that are gone (killed
    /// mid-sort) are removed first.
    fn new() -> Result<TempDir> {
        let root = std::env::temp_dir();
        sweep_dead(&root);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path = root.join(format!("{TEMP_PREFIX}{}-{nanos:x}", std::process::id()));
        std::fs::create_dir(&path)
            .map_err(|e| failed(&path.display().to_string(), e.to_string()))?;
        Ok(TempDir { path })
    }
}

/// Removes the sort folders of processes that no longer run (on this host: `$TMPDIR` is
/// local).
fn sweep_dead(root: &Path) {
    let Ok(dir) = std::fs::read_dir(root) else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(TEMP_PREFIX))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The last segment of a location's key or path.
fn base_name(loc: &Location) -> &str {
    loc.prefix.rsplit('/').next().unwrap_or("")
}

/// `loc` with `key` below it (a key its listing gave, relative to it).
fn child(loc: &Location, key: &str) -> Location {
    let mut l = loc.clone();
    l.prefix = loc.key_for(key);
    l.raw = match loc.scheme {
        Scheme::Local => l.prefix.clone(),
        s => format!("{}://{}/{}", s.short(), l.bucket, l.prefix),
    };
    l.is_dir_hint = false;
    l
}

/// A data file named by a manifest: its key is the bucket's (or container's) own; for a
/// report copied to a local folder, it is looked for under each folder above the manifest.
fn data_file(manifest: &Location, key: &str) -> Result<Location> {
    if manifest.scheme != Scheme::Local {
        let mut l = manifest.clone();
        l.prefix = key.trim_start_matches('/').to_string();
        l.raw = format!("{}://{}/{}", l.scheme.short(), l.bucket, l.prefix);
        return Ok(l);
    }
    let mut dir = manifest.local_path();
    while dir.pop() {
        let candidate = dir.join(key);
        if candidate.is_file() {
            return Location::parse(&candidate.display().to_string());
        }
    }
    Err(bad(
        &manifest.raw,
        format!("its file {key:?} is under no folder above the manifest"),
    ))
}

/// The newest manifest under a folder of reports.
async fn newest_manifest(side: &Side) -> Result<String> {
    let (tx, mut rx) = mpsc::channel(1024);
    let s = side.clone();
    let task = tokio::spawn(async move {
        super::list::list_entries(&s, tx, crate::copy::classify_store_error).await
    });
    // each series of reports (an S3 configuration, an Azure rule) and its newest manifest
    let mut newest: std::collections::BTreeMap<String, String> = Default::default();
    while let Some(e) = rx.recv().await {
        let e = e?;
        if let Some(series) = series(&e.rel) {
            let slot = newest.entry(series).or_default();
            if e.rel > *slot {
                *slot = e.rel;
            }
        }
    }
    task.await
        .map_err(|e| failed(&side.location().raw, e.to_string()))??;
    match newest.len() {
        0 => Err(bad(
            &side.location().raw,
            "no manifest.json (S3) or *-manifest.json (Azure) under it",
        )),
        1 => Ok(newest.into_values().next().unwrap_or_default()),
        _ => Err(bad(
            &side.location().raw,
            format!(
                "it holds reports of {} configurations or rules ({}): name one of them",
                newest.len(),
                newest.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

/// Which series of reports a manifest's key (relative to the folder searched) belongs to,
/// or None for another file. S3: `…/CONFIG/YYYY-MM-DDTHH-MMZ/manifest.json`, the series
/// being what comes before the time; Azure: `…/YYYY/MM/DD/HH-MM-SS/RULE/RULE-manifest.json`,
/// the rule. Within a series the greatest key is the newest (the times sort as text).
fn series(rel: &str) -> Option<String> {
    let mut parts = rel.rsplit('/');
    let name = parts.next()?;
    if name == "manifest.json" {
        let _time = parts.next();
        let rest: Vec<&str> = parts.collect();
        Some(rest.into_iter().rev().collect::<Vec<_>>().join("/"))
    } else {
        name.strip_suffix("-manifest.json")
            .map(|r| format!("rule {r}"))
    }
}

/// The whole object (a manifest).
async fn read_all(side: &Side, loc: &Location) -> Result<Vec<u8>> {
    match side {
        Side::Local { .. } => tokio::fs::read(loc.local_path())
            .await
            .map_err(|e| bad(&loc.raw, e.to_string())),
        Side::Cloud { store, .. } => {
            let path = store_path(&loc.prefix)?;
            let got = store.get(&path).await.map_err(|e| match e {
                object_store::Error::NotFound { .. } => bad(&loc.raw, "not found"),
                e => failed(&loc.raw, super::side::one_line(&e)),
            })?;
            got.bytes()
                .await
                .map(|b| b.to_vec())
                .map_err(|e| failed(&loc.raw, super::side::one_line(&e)))
        }
    }
}

/// A data file on local disk: a local one read where it is (false: not to be removed), a
/// cloud one downloaded into `dir` (true), its length checked against the manifest's.
async fn fetch(
    client: Option<&Side>,
    file: &Location,
    size: Option<u64>,
    dir: &Path,
    i: usize,
) -> Result<(PathBuf, bool)> {
    let short = |got: u64| {
        failed(
            &file.raw,
            format!("{got} bytes where the manifest says {}", size.unwrap_or(0)),
        )
    };
    if file.scheme == Scheme::Local {
        let path = file.local_path();
        let len = tokio::fs::metadata(&path)
            .await
            .map_err(|e| failed(&file.raw, e.to_string()))?
            .len();
        if size.is_some_and(|s| s != len) {
            return Err(short(len));
        }
        return Ok((path, false));
    }
    let Some(Side::Cloud { store, .. }) = client else {
        return Err(bad(&file.raw, "not in the manifest's bucket"));
    };
    let path = store_path(&file.prefix)?;
    let got = store
        .get(&path)
        .await
        .map_err(|e| failed(&file.raw, super::side::one_line(&e)))?;
    let to = dir.join(format!("file-{i}"));
    let io = |e: std::io::Error| failed(&to.display().to_string(), e.to_string());
    let mut out = tokio::io::BufWriter::new(tokio::fs::File::create(&to).await.map_err(io)?);
    let mut body = got.into_stream();
    let mut len = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| failed(&file.raw, super::side::one_line(&e)))?;
        len += chunk.len() as u64;
        tokio::io::AsyncWriteExt::write_all(&mut out, &chunk)
            .await
            .map_err(io)?;
    }
    tokio::io::AsyncWriteExt::flush(&mut out)
        .await
        .map_err(io)?;
    if size.is_some_and(|s| s != len) {
        return Err(short(len));
    }
    Ok((to, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_of_both_services_are_known() {
        let table = [
            ("Key", Col::Key),
            ("key", Col::Key),
            ("Name", Col::Key),
            ("Size", Col::Size),
            ("Content-Length", Col::Size),
            ("LastModifiedDate", Col::Modified),
            ("last_modified_date", Col::Modified),
            ("Last-Modified", Col::Modified),
            ("ETag", Col::ETag),
            ("e_tag", Col::ETag),
            ("Etag", Col::ETag),
            ("IsLatest", Col::Latest),
            ("IsCurrentVersion", Col::Latest),
            ("IsDeleteMarker", Col::Deleted),
            ("is_delete_marker", Col::Deleted),
            ("Deleted", Col::Deleted),
            ("Snapshot", Col::Snapshot),
            ("StorageClass", Col::Other),
            ("hdi_isfolder", Col::Folder),
            ("Bucket", Col::Other),
        ];
        for (name, want) in table {
            assert_eq!(column(name), want, "{name}");
        }
    }

    #[test]
    fn s3_keys_are_form_decoded() {
        let table = [
            ("a/b.txt", "a/b.txt"),
            ("my+file.txt", "my file.txt"),
            ("a%2Bb", "a+b"),
            ("%C3%A9t%C3%A9", "été"),
            ("100%25", "100%"),
        ];
        for (raw, want) in table {
            assert_eq!(s3_key(raw).unwrap(), want, "{raw}");
        }
        assert!(s3_key("%FF").is_err());
    }

    #[test]
    fn times_of_both_services_parse() {
        assert_eq!(
            parse_time("2016-11-06T21:32:00.000Z"),
            Some(1_478_467_920_000)
        );
        assert_eq!(
            parse_time("2021-05-26T13:25:36.1234567Z"),
            Some(1_622_035_536_123)
        );
        assert_eq!(
            parse_time("Wed, 26 May 2021 13:25:36 GMT"),
            Some(1_622_035_536_000)
        );
        assert_eq!(parse_time("yesterday"), None);
    }

    #[test]
    fn rows_that_are_not_current_objects_are_left_out() {
        let row = |latest, deleted, snapshot| Fields {
            key: Some("k".into()),
            size: Some(1),
            etag: Some("e".into()),
            latest,
            deleted,
            snapshot,
            ..Default::default()
        };
        assert!(row(None, None, false).record().unwrap().is_some());
        assert!(row(Some(true), Some(false), false)
            .record()
            .unwrap()
            .is_some());
        assert!(row(Some(false), None, false).record().unwrap().is_none());
        assert!(row(Some(true), Some(true), false)
            .record()
            .unwrap()
            .is_none());
        assert!(row(None, None, true).record().unwrap().is_none());
        let folder = Fields {
            folder: true,
            ..row(None, None, false)
        };
        assert!(folder.record().unwrap().is_none());
        // no ETag: no If-Match for the copy, so the row is refused
        let no_etag = Fields {
            etag: None,
            ..row(None, None, false)
        };
        assert!(no_etag.record().unwrap_err().contains("ETag"));
        assert_eq!(truthy("TRUE"), Ok(Some(true)));
        assert_eq!(truthy(""), Ok(None));
        assert!(truthy("yes").is_err());
        let no_size = Fields {
            key: Some("k".into()),
            ..Default::default()
        };
        assert!(no_size.record().unwrap_err().contains("\"k\""));
    }

    #[test]
    fn keys_are_made_relative_to_the_source() {
        let r = |k: &str| Record {
            key: k.into(),
            size: 0,
            etag: None,
            mtime_ms: None,
        };
        let table: &[(&str, &str, Option<&str>, Option<&str>)] = &[
            ("data/a", "data/", None, Some("a")),
            ("data/a/b", "data/", None, Some("a/b")),
            ("database/a", "data/", None, None),
            ("data/dir/", "data/", None, None),
            ("data/", "data/", None, None),
            ("x", "", None, Some("x")),
            ("c1/data/a", "data/", Some("c1"), Some("a")),
            ("data/a", "data/", Some("c1"), None),
            ("c2/data/a", "data/", Some("c1"), None),
            ("c1/x", "", Some("c1"), Some("x")),
            ("c10/x", "", Some("c1"), None),
        ];
        for (key, strip, container, want) in table {
            assert_eq!(
                r(key).relative(strip, *container).as_deref(),
                *want,
                "{key} {strip}"
            );
        }
    }

    #[test]
    fn a_report_without_key_size_or_etag_columns_is_refused() {
        let cols = |names: &[&str]| names.iter().map(|n| column(n)).collect::<Vec<_>>();
        assert!(check_columns(&cols(&["Bucket", "Key", "Size", "ETag"])).is_ok());
        assert!(check_columns(&cols(&["Name", "Content-Length", "Etag"])).is_ok());
        let e = check_columns(&cols(&["Name", "Content-Length", "Last-Modified"])).unwrap_err();
        assert!(e.contains("ETag"), "{e}");
        let e = check_columns(&cols(&["Bucket", "Size", "ETag"])).unwrap_err();
        assert!(e.contains("key"), "{e}");
    }

    #[test]
    fn an_azure_rule_that_leaves_out_part_of_the_source_is_refused() {
        let report = |prefix_match: &[&str], exclude: &[&str], types: &[&str]| Report {
            url: "az://inv/r-manifest.json".into(),
            kind: Kind::Azure,
            format: Format::Csv,
            source_bucket: None,
            time: UNIX_EPOCH,
            files: Vec::new(),
            columns: Vec::new(),
            filters: AzureFilters {
                blob_types: types.iter().map(|t| t.to_string()).collect(),
                prefix_match: prefix_match.iter().map(|t| t.to_string()).collect(),
                exclude_prefix: exclude.iter().map(|t| t.to_string()).collect(),
            },
        };
        let src = Location::parse("az://content/models").unwrap();
        // prefixMatch, excludePrefix, blobTypes → Ok, or a phrase of the refusal
        type Case<'a> = (&'a [&'a str], &'a [&'a str], &'a [&'a str], Option<&'a str>);
        let table: &[Case] = &[
            (&[], &[], &[], None),
            (&["content/"], &[], &["blockBlob"], None),
            (&["content/mod"], &[], &[], None),
            (&["other", "content/models/"], &[], &[], None),
            (&["content/models/a"], &[], &[], Some("prefixMatch")),
            (&["contents/"], &[], &[], Some("prefixMatch")),
            (&[], &["content/models/tmp"], &[], Some("excludePrefix")),
            (&[], &["content/"], &[], Some("excludePrefix")),
            (&[], &["content/data"], &[], None),
            (&[], &[], &["appendBlob"], Some("block blobs")),
        ];
        for (pm, ex, types, want) in table {
            let got = report(pm, ex, types).check_source(&src);
            match (got, want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => assert!(e.to_string().contains(w), "{pm:?} {ex:?}: {e}"),
                (got, _) => panic!("{pm:?} {ex:?} {types:?}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn manifests_are_grouped_by_configuration_or_rule() {
        let table = [
            (
                "src/daily/2026-12-03T01-00Z/manifest.json",
                Some("src/daily"),
            ),
            (
                "src/daily/2026-12-04T01-00Z/manifest.json",
                Some("src/daily"),
            ),
            (
                "src/weekly/2026-12-04T01-00Z/manifest.json",
                Some("src/weekly"),
            ),
            ("2026/12/04/01-00-00/r1/r1-manifest.json", Some("rule r1")),
            ("src/daily/hive/dt=2026-12-04-01-00/symlink.txt", None),
            ("src/daily/data/part-0.csv.gz", None),
        ];
        for (rel, want) in table {
            assert_eq!(series(rel).as_deref(), want, "{rel}");
        }
    }

    #[test]
    fn many_runs_merge_in_stages_and_doubles_keep_the_newest_row() {
        let dir = TempDir::new().unwrap();
        // runs of 10 rows: more runs than the merge opens at once
        let mut s = Sorter::with_runs_of(dir.path.clone(), 10);
        let n = 10 * (MERGE_FAN_IN * 2 + 3);
        for i in 0..n {
            let k = (i * 7919) % n;
            s.push(Record {
                key: format!("k{k:06}"),
                size: 1,
                etag: Some("e".into()),
                mtime_ms: Some(5),
            })
            .unwrap();
        }
        // k000003 twice more: an older row and a newer one
        for (t, size) in [(1, 2), (9, 3)] {
            s.push(Record {
                key: "k000003".into(),
                size,
                etag: Some("e".into()),
                mtime_ms: Some(t),
            })
            .unwrap();
        }
        assert!(s.runs.len() > MERGE_FAN_IN);
        let (tx, mut rx) = mpsc::channel(n + 10);
        assert_eq!(s.drain(Kind::S3, &tx).unwrap(), n as u64);
        drop(tx);
        let mut got = Vec::new();
        while let Ok(Ok(e)) = rx.try_recv() {
            got.push(e);
        }
        assert_eq!(got.len(), n);
        assert!(got.windows(2).all(|w| w[0].rel < w[1].rel));
        let three = got.iter().find(|e| e.rel == "k000003").unwrap();
        assert_eq!(
            three.size, 3,
            "the newest row of a key the report holds twice"
        );
        // the runs were removed as they were merged
        let left = std::fs::read_dir(&dir.path).unwrap().count();
        assert!(left <= MERGE_FAN_IN + 1, "{left} files left");
    }

    #[test]
    fn the_sort_merges_runs_in_key_order_and_drops_doubles() {
        let dir = TempDir::new().unwrap();
        let mut s = Sorter::new(dir.path.clone());
        // more than one run, keys in no order, one key twice across runs
        let n = RUN_ROWS * 2 + 17;
        let mut keys: Vec<String> = (0..n).map(|i| format!("k{:07}", (i * 7919) % n)).collect();
        keys.push("k0000005".into());
        for (i, k) in keys.iter().enumerate() {
            s.push(Record {
                key: k.clone(),
                size: i as u64,
                etag: (i % 2 == 0).then(|| format!("e{i}")),
                mtime_ms: (i % 3 == 0).then_some(i as i64),
            })
            .unwrap();
        }
        assert_eq!(s.runs.len(), 2);
        let (tx, mut rx) = mpsc::channel(n + 10);
        let sent = s.drain(Kind::Azure, &tx).unwrap();
        drop(tx);
        assert_eq!(sent, n as u64);
        let mut prev = String::new();
        let mut got = 0;
        while let Ok(Ok(e)) = rx.try_recv() {
            assert!(e.rel > prev, "{} after {prev}", e.rel);
            prev = e.rel;
            got += 1;
        }
        assert_eq!(got, n);
    }

    #[test]
    fn s3_etags_are_quoted_as_its_listings_quote_them() {
        let r = Record {
            key: "k".into(),
            size: 3,
            etag: Some("d41d8cd98f00b204e9800998ecf8427e".into()),
            mtime_ms: Some(1000),
        };
        let e = r.clone().entry(Kind::S3);
        assert_eq!(
            e.etag.as_deref(),
            Some("\"d41d8cd98f00b204e9800998ecf8427e\"")
        );
        assert_eq!(e.mtime, Some(UNIX_EPOCH + Duration::from_secs(1)));
        let a = Record {
            etag: Some("0x8D9C".into()),
            ..r
        }
        .entry(Kind::Azure);
        assert_eq!(a.etag.as_deref(), Some("0x8D9C"));
    }
}
