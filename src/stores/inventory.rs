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
    /// The data files, in the manifest's order.
    pub files: Vec<Location>,
    /// S3 CSV: the columns (`fileSchema`); Azure CSV files name theirs in a header row.
    columns: Vec<String>,
}

fn bad(url: &str, why: impl Into<String>) -> SlateError {
    SlateError::BadOption {
        option: "--inventory".into(),
        why: format!("{url}: {}", why.into()),
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
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AzureRule {
    format: Option<String>,
    objects: Option<String>,
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
            other => {
                return Err(bad(
                    shown,
                    format!("fileFormat {other:?} is not read (CSV and Parquet are)"),
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
        if format == Format::Csv && !columns.iter().any(|c| norm(c) == "key") {
            return Err(bad(shown, "fileSchema names no Key column"));
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
                .map(|f| data_file(manifest, &f.key))
                .collect::<Result<_>>()?,
            columns,
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
                .map(|f| data_file(manifest, &f.blob))
                .collect::<Result<_>>()?,
            columns: Vec::new(),
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
        for (i, file) in self.files.iter().enumerate() {
            let local = fetch(file, &tmp.path, i).await?;
            let (kind, format, columns, shown) = (
                self.kind,
                self.format,
                self.columns.clone(),
                file.raw.clone(),
            );
            let (strip2, container2) = (strip.clone(), container.clone());
            sorter = tokio::task::spawn_blocking(move || -> Result<Sorter> {
                let mut sorter = sorter;
                let mut keep = |r: Record| -> Result<()> {
                    if let Some(rel) = r.relative(&strip2, container2.as_deref()) {
                        sorter.push(Record { key: rel, ..r })?;
                    }
                    Ok(())
                };
                let read = match format {
                    Format::Csv => read_csv(&local, kind, &columns, &mut keep),
                    Format::Parquet => read_parquet(&local, kind, &mut keep),
                };
                read.map_err(|why| bad(&shown, why))?;
                let _ = std::fs::remove_file(&local);
                Ok(sorter)
            })
            .await
            .map_err(|e| bad(&self.url, e.to_string()))??;
        }
        let kind = self.kind;
        let url = self.url.clone();
        let sent = tokio::task::spawn_blocking(move || sorter.drain(kind, &tx))
            .await
            .map_err(|e| bad(&url, e.to_string()))??;
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
        _ => Col::Other,
    }
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
}

impl Fields {
    /// The object the row is, or None for a row that is not a current object (an older
    /// version, a delete marker, a snapshot, a soft-deleted blob).
    fn record(self) -> std::result::Result<Option<Record>, String> {
        if self.latest == Some(false) || self.deleted == Some(true) || self.snapshot {
            return Ok(None);
        }
        let key = self.key.ok_or("a row without a key")?;
        let size = self
            .size
            .ok_or_else(|| format!("key {key:?}: a row without a size"))?;
        Ok(Some(Record {
            key,
            size,
            etag: self.etag,
            mtime_ms: self.modified,
        }))
    }
}

fn truthy(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" => Some(true),
        "false" => Some(false),
        "" => None,
        _ => None,
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
) -> std::result::Result<(), String> {
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
        .flexible(true)
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
    if !cols.contains(&Col::Key) || !cols.contains(&Col::Size) {
        return Err(format!(
            "the report has no {} column",
            if cols.contains(&Col::Key) {
                "size (Size, Content-Length)"
            } else {
                "key (Key, Name)"
            }
        ));
    }
    let mut rec = csv::StringRecord::new();
    let mut line = 0u64;
    loop {
        line += 1;
        match rd.read_record(&mut rec) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => return Err(format!("row {line}: {e}")),
        }
        let mut f = Fields::default();
        for (c, v) in cols.iter().zip(rec.iter()) {
            match c {
                Col::Key => {
                    f.key = Some(match kind {
                        Kind::S3 => s3_key(v).map_err(|e| format!("row {line}: {e}"))?,
                        Kind::Azure => v.to_string(),
                    })
                }
                Col::Size if !v.is_empty() => {
                    f.size = Some(
                        v.trim()
                            .parse()
                            .map_err(|_| format!("row {line}: size {v:?}"))?,
                    )
                }
                Col::Modified if !v.is_empty() => {
                    f.modified =
                        Some(parse_time(v).ok_or_else(|| format!("row {line}: time {v:?}"))?)
                }
                Col::ETag if !v.is_empty() => f.etag = Some(v.to_string()),
                Col::Latest => f.latest = truthy(v),
                Col::Deleted => f.deleted = truthy(v),
                Col::Snapshot => f.snapshot = !v.trim().is_empty(),
                _ => {}
            }
        }
        if let Some(r) = f.record().map_err(|e| format!("row {line}: {e}"))? {
            keep(r).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

fn read_parquet(
    path: &Path,
    kind: Kind,
    keep: &mut dyn FnMut(Record) -> Result<()>,
) -> std::result::Result<(), String> {
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
    if !names.contains(&Col::Key) || !names.contains(&Col::Size) {
        return Err("the report has no key or no size column".into());
    }
    let rows = reader.get_row_iter(None).map_err(|e| e.to_string())?;
    for (i, row) in rows.enumerate() {
        let line = i + 1;
        let row = row.map_err(|e| format!("row {line}: {e}"))?;
        let mut f = Fields::default();
        for (name, v) in row.get_column_iter() {
            let text = match v {
                Field::Str(s) => Some(s.as_str()),
                _ => None,
            };
            match (column(name), v) {
                (_, Field::Null) => {}
                (Col::Key, _) => {
                    let s = text.ok_or_else(|| format!("row {line}: key {v}"))?;
                    f.key = Some(s.to_string());
                }
                (Col::Size, Field::Long(n)) => f.size = u64::try_from(*n).ok(),
                (Col::Size, Field::Int(n)) => f.size = u64::try_from(*n).ok(),
                (Col::Size, Field::ULong(n)) => f.size = Some(*n),
                (Col::Size, Field::Str(s)) => f.size = s.trim().parse().ok(),
                (Col::Modified, Field::TimestampMillis(ms)) => f.modified = Some(*ms),
                (Col::Modified, Field::TimestampMicros(us)) => f.modified = Some(us / 1000),
                (Col::Modified, Field::Long(ms)) => f.modified = Some(*ms),
                (Col::Modified, Field::Str(s)) => {
                    f.modified =
                        Some(parse_time(s).ok_or_else(|| format!("row {line}: time {s:?}"))?)
                }
                (Col::ETag, Field::Str(s)) => f.etag = Some(s.clone()),
                (Col::Latest, Field::Bool(b)) => f.latest = Some(*b),
                (Col::Latest, Field::Str(s)) => f.latest = truthy(s),
                (Col::Deleted, Field::Bool(b)) => f.deleted = Some(*b),
                (Col::Deleted, Field::Str(s)) => f.deleted = truthy(s),
                (Col::Snapshot, Field::Str(s)) => f.snapshot = !s.trim().is_empty(),
                (Col::Size | Col::Modified, other) => {
                    return Err(format!("row {line}: column {name} holds {other}"))
                }
                _ => {}
            }
        }
        let _ = kind; // Parquet keys are not URL-encoded (S3 encodes only its CSV's)
        if let Some(r) = f.record().map_err(|e| format!("row {line}: {e}"))? {
            keep(r).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// The external sort: rows gathered into runs, each sorted and written out once full, then
/// merged.
struct Sorter {
    dir: PathBuf,
    rows: Vec<Record>,
    runs: Vec<PathBuf>,
}

impl Sorter {
    fn new(dir: PathBuf) -> Sorter {
        Sorter {
            dir,
            rows: Vec::new(),
            runs: Vec::new(),
        }
    }

    fn push(&mut self, r: Record) -> Result<()> {
        self.rows.push(r);
        if self.rows.len() >= RUN_ROWS {
            self.spill()?;
        }
        Ok(())
    }

    fn spill(&mut self) -> Result<()> {
        self.rows.sort_unstable();
        let path = self.dir.join(format!("run-{}", self.runs.len()));
        let io = |e: std::io::Error| bad(&path.display().to_string(), e.to_string());
        let mut w = BufWriter::new(std::fs::File::create(&path).map_err(io)?);
        for r in self.rows.drain(..) {
            write_record(&mut w, &r).map_err(io)?;
        }
        w.flush().map_err(io)?;
        self.runs.push(path);
        Ok(())
    }

    /// Sends every row in key order, each key once; returns how many were sent.
    fn drain(mut self, kind: Kind, tx: &mpsc::Sender<Result<Entry>>) -> Result<u64> {
        let mut sent = 0u64;
        let mut last: Option<String> = None;
        let mut doubled = 0u64;
        let mut send = |r: Record| -> bool {
            if last.as_deref() == Some(r.key.as_str()) {
                doubled += 1;
                return true;
            }
            last = Some(r.key.clone());
            sent += 1;
            tx.blocking_send(Ok(r.entry(kind))).is_ok()
        };
        if self.runs.is_empty() {
            self.rows.sort_unstable();
            for r in self.rows.drain(..) {
                if !send(r) {
                    break;
                }
            }
        } else {
            if !self.rows.is_empty() {
                self.spill()?;
            }
            let mut readers = Vec::new();
            let mut heap = BinaryHeap::new();
            for (i, p) in self.runs.iter().enumerate() {
                let io = |e: std::io::Error| bad(&p.display().to_string(), e.to_string());
                let mut rd = BufReader::new(std::fs::File::open(p).map_err(io)?);
                if let Some(r) = read_record(&mut rd).map_err(io)? {
                    heap.push(std::cmp::Reverse((r, i)));
                }
                readers.push(rd);
            }
            while let Some(std::cmp::Reverse((r, i))) = heap.pop() {
                let io =
                    |e: std::io::Error| bad(&self.runs[i].display().to_string(), e.to_string());
                if let Some(next) = read_record(&mut readers[i]).map_err(io)? {
                    heap.push(std::cmp::Reverse((next, i)));
                }
                if !send(r) {
                    break;
                }
            }
        }
        if doubled > 0 {
            tracing::warn!(
                rows = doubled,
                "the inventory report holds keys more than once; each was taken once"
            );
        }
        Ok(sent)
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

impl TempDir {
    fn new() -> Result<TempDir> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path =
            std::env::temp_dir().join(format!("slate-inventory-{}-{nanos:x}", std::process::id()));
        std::fs::create_dir_all(&path)
            .map_err(|e| bad(&path.display().to_string(), e.to_string()))?;
        Ok(TempDir { path })
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
    let mut best: Option<String> = None;
    while let Some(e) = rx.recv().await {
        let e = e?;
        let name = e.rel.rsplit('/').next().unwrap_or("");
        // S3 keeps `manifest.json` in a folder named by time; Azure's `<rule>-manifest.json`
        // lies in date/time folders: the greatest key is the newest either way
        if name.ends_with("manifest.json") && best.as_deref().is_none_or(|b| e.rel.as_str() > b) {
            best = Some(e.rel);
        }
    }
    task.await
        .map_err(|e| bad(&side.location().raw, e.to_string()))??;
    best.ok_or_else(|| {
        bad(
            &side.location().raw,
            "no manifest.json (S3) or *-manifest.json (Azure) under it",
        )
    })
}

/// The whole object (a manifest).
async fn read_all(side: &Side, loc: &Location) -> Result<Vec<u8>> {
    match side {
        Side::Local { .. } => {
            std::fs::read(loc.local_path()).map_err(|e| bad(&loc.raw, e.to_string()))
        }
        Side::Cloud { store, .. } => {
            let path = store_path(&loc.prefix)?;
            let got = store
                .get(&path)
                .await
                .map_err(|e| bad(&loc.raw, super::side::one_line(&e)))?;
            got.bytes()
                .await
                .map(|b| b.to_vec())
                .map_err(|e| bad(&loc.raw, super::side::one_line(&e)))
        }
    }
}

/// A data file on local disk: a local one as it is, a cloud one downloaded into `dir`.
async fn fetch(file: &Location, dir: &Path, i: usize) -> Result<PathBuf> {
    if file.scheme == Scheme::Local {
        // read in place: copied so that the caller may remove what it reads
        let to = dir.join(format!("file-{i}"));
        std::fs::copy(file.local_path(), &to).map_err(|e| bad(&file.raw, e.to_string()))?;
        return Ok(to);
    }
    let side = Side::open(file)?;
    let Side::Cloud { store, .. } = &side else {
        unreachable!("a cloud location opens a cloud side")
    };
    let path = store_path(&file.prefix)?;
    let got = store
        .get(&path)
        .await
        .map_err(|e| bad(&file.raw, super::side::one_line(&e)))?;
    let to = dir.join(format!("file-{i}"));
    let io = |e: std::io::Error| bad(&file.raw, e.to_string());
    let mut out = tokio::io::BufWriter::new(tokio::fs::File::create(&to).await.map_err(io)?);
    let mut body = got.into_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| bad(&file.raw, super::side::one_line(&e)))?;
        tokio::io::AsyncWriteExt::write_all(&mut out, &chunk)
            .await
            .map_err(io)?;
    }
    tokio::io::AsyncWriteExt::flush(&mut out)
        .await
        .map_err(io)?;
    Ok(to)
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
