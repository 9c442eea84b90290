//! A backfill from an inventory report (`--inventory`): reports written here in the layout S3
//! Inventory and Azure Blob Inventory publish (manifest, CSV and Parquet files, rows in no
//! key order across files, rows that are not current objects, keys outside the pair) drive a
//! backfill whose result equals a listing-driven one, and what changed after the report's
//! time (a new key, an overwrite, a delete) is not lost.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use futures::TryStreamExt;
use object_store::{path::Path, ObjectStore, ObjectStoreExt, PutPayload};

/// One object as a report row holds it.
#[derive(Clone, Debug)]
struct Row {
    key: String,
    size: u64,
    etag: String,
    modified_ms: i64,
    latest: bool,
    delete_marker: bool,
}

/// The current objects under `prefix`, as a report of the whole bucket would list them.
async fn rows_of(store: &Arc<dyn ObjectStore>, prefix: &str) -> Vec<Row> {
    let metas: Vec<_> = store
        .list(Some(&Path::from(prefix)))
        .try_collect()
        .await
        .expect("listing");
    metas
        .into_iter()
        .map(|m| Row {
            key: m.location.as_ref().to_string(),
            size: m.size,
            etag: m.e_tag.expect("etag").trim_matches('"').to_string(),
            modified_ms: m.last_modified.timestamp_millis(),
            latest: true,
            delete_marker: false,
        })
        .collect()
}

fn data() -> BTreeMap<String, Vec<u8>> {
    let mut d = BTreeMap::new();
    for i in 0..240 {
        d.insert(
            format!("shards/{:02}/part-{i:04}.bin", i % 9),
            bytes(7_000 + i as u64, 100 + (i * 37) % 3_000),
        );
    }
    d.insert("a b+c%d.txt".into(), b"form-encoded in S3's CSV".to_vec());
    d.insert(
        "\u{e9}t\u{e9}/caf\u{e9} \u{2713}.txt".into(),
        b"unicode".to_vec(),
    );
    d.insert("zero".into(), Vec::new());
    d.insert("to-overwrite".into(), b"before the report".to_vec());
    d.insert("to-delete".into(), b"deleted after the report".to_vec());
    d
}

/// The report's rows: the pair's objects shuffled across `files` files, with rows the
/// backfill must leave out (an older version, a delete marker, keys outside the pair).
fn report_rows(mut rows: Vec<Row>, prefix: &str, files: usize) -> Vec<Vec<Row>> {
    let extra = |key: String, latest, delete_marker| Row {
        key,
        size: 5,
        etag: "0123456789abcdef0123456789abcdef".into(),
        modified_ms: 1_700_000_000_000,
        latest,
        delete_marker,
    };
    rows.push(extra(
        format!("{prefix}/shards/00/old-version"),
        false,
        false,
    ));
    rows.push(extra(format!("{prefix}/marked-deleted"), true, true));
    rows.push(extra(format!("{prefix}-other/outside"), true, false));
    rows.push(extra("elsewhere/outside".into(), true, false));
    // no key order: reversed, then dealt out
    rows.reverse();
    let mut out = vec![Vec::new(); files];
    for (i, r) in rows.into_iter().enumerate() {
        out[(i * 7) % files].push(r);
    }
    out
}

const S3_SCHEMA: &str =
    "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag, StorageClass";

/// S3 Inventory's CSV: gzipped, no header, keys URL-encoded as a form is.
fn s3_csv(bucket: &str, rows: &[Row]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    {
        let mut w = csv::WriterBuilder::new()
            .quote_style(csv::QuoteStyle::Always)
            .from_writer(&mut gz);
        for r in rows {
            let key: String = url::form_urlencoded::byte_serialize(r.key.as_bytes()).collect();
            let time = chrono::DateTime::from_timestamp_millis(r.modified_ms)
                .expect("time")
                .format("%Y-%m-%dT%H:%M:%S%.3fZ")
                .to_string();
            let size = if r.delete_marker {
                String::new()
            } else {
                r.size.to_string()
            };
            w.write_record([
                bucket,
                &key,
                "",
                if r.latest { "true" } else { "false" },
                if r.delete_marker { "true" } else { "false" },
                &size,
                &time,
                &r.etag,
                "STANDARD",
            ])
            .expect("csv row");
        }
        w.flush().expect("csv");
    }
    gz.finish().expect("gzip")
}

/// S3 Inventory's Parquet: its column names and types.
fn s3_parquet(bucket: &str, rows: &[Row]) -> Vec<u8> {
    use parquet::data_type::{BoolType, ByteArray, ByteArrayType, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;
    let schema = Arc::new(
        parse_message_type(
            "message s3 {
                required binary bucket (STRING);
                required binary key (STRING);
                optional binary version_id (STRING);
                optional boolean is_latest;
                optional boolean is_delete_marker;
                optional int64 size;
                optional int64 last_modified_date (TIMESTAMP(MILLIS,true));
                optional binary e_tag (STRING);
                optional binary storage_class (STRING);
            }",
        )
        .expect("schema"),
    );
    let props = Arc::new(WriterProperties::builder().build());
    let mut buf = Vec::new();
    {
        let mut w = SerializedFileWriter::new(&mut buf, schema, props).expect("writer");
        let mut g = w.next_row_group().expect("row group");
        let n = rows.len();
        let strs = |f: &dyn Fn(&Row) -> String| -> Vec<ByteArray> {
            rows.iter()
                .map(|r| ByteArray::from(f(r).as_str()))
                .collect()
        };
        let all = vec![1i16; n];
        let mut col = 0;
        while let Some(mut c) = g.next_column().expect("column") {
            match col {
                0 => c.typed::<ByteArrayType>().write_batch(
                    &strs(&|_| bucket.to_string()),
                    None,
                    None,
                ),
                1 => c
                    .typed::<ByteArrayType>()
                    .write_batch(&strs(&|r| r.key.clone()), None, None),
                2 => c
                    .typed::<ByteArrayType>()
                    .write_batch(&[], Some(&vec![0i16; n]), None),
                3 => c.typed::<BoolType>().write_batch(
                    &rows.iter().map(|r| r.latest).collect::<Vec<_>>(),
                    Some(&all),
                    None,
                ),
                4 => c.typed::<BoolType>().write_batch(
                    &rows.iter().map(|r| r.delete_marker).collect::<Vec<_>>(),
                    Some(&all),
                    None,
                ),
                5 => {
                    // a delete marker has no size
                    let def: Vec<i16> = rows.iter().map(|r| (!r.delete_marker) as i16).collect();
                    let vals: Vec<i64> = rows
                        .iter()
                        .filter(|r| !r.delete_marker)
                        .map(|r| r.size as i64)
                        .collect();
                    c.typed::<Int64Type>().write_batch(&vals, Some(&def), None)
                }
                6 => c.typed::<Int64Type>().write_batch(
                    &rows.iter().map(|r| r.modified_ms).collect::<Vec<_>>(),
                    Some(&all),
                    None,
                ),
                7 => c.typed::<ByteArrayType>().write_batch(
                    &strs(&|r| r.etag.clone()),
                    Some(&all),
                    None,
                ),
                _ => c.typed::<ByteArrayType>().write_batch(
                    &strs(&|_| "STANDARD".into()),
                    Some(&all),
                    None,
                ),
            }
            .expect("write column");
            c.close().expect("close column");
            col += 1;
        }
        g.close().expect("close row group");
        w.close().expect("close file");
    }
    buf
}

async fn put(store: &Arc<dyn ObjectStore>, key: &str, body: Vec<u8>) {
    store
        .put(&Path::from(key), PutPayload::from(body))
        .await
        .expect("put");
}

/// Writes a report of `rows` in S3 Inventory's layout under `inv/` of slate-dst; returns
/// the manifest's URL.
async fn publish_s3(inv: &str, format: &str, rows: Vec<Vec<Row>>) -> String {
    let store = s3("slate-dst");
    let base = format!("{inv}/slate-src/config-1");
    let mut files = Vec::new();
    for (i, part) in rows.iter().enumerate() {
        let (name, body) = match format {
            "CSV" => (
                format!("{base}/data/part-{i}.csv.gz"),
                s3_csv("slate-src", part),
            ),
            _ => (
                format!("{base}/data/part-{i}.parquet"),
                s3_parquet("slate-src", part),
            ),
        };
        files.push(serde_json::json!({
            "key": name, "size": body.len(), "MD5checksum": "00000000000000000000000000000000"
        }));
        put(&store, &name, body).await;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    let manifest = serde_json::json!({
        "sourceBucket": "slate-src",
        "destinationBucket": "arn:aws:s3:::slate-dst",
        "version": "2016-11-30",
        "creationTimestamp": now.to_string(),
        "fileFormat": format,
        "fileSchema": if format == "CSV" { S3_SCHEMA.to_string() } else {
            "message s3.inventory { required binary bucket (STRING); required binary key (STRING); ... }".to_string()
        },
        "files": files,
    });
    let key = format!("{base}/2026-12-04T00-00Z/manifest.json");
    put(&store, &key, serde_json::to_vec(&manifest).expect("json")).await;
    format!("s3://slate-dst/{key}")
}

/// After the report: a new key, an overwrite (another size), a delete. Returns the source now.
async fn change_after_the_report(
    store: &Arc<dyn ObjectStore>,
    p: &str,
    want: &BTreeMap<String, Vec<u8>>,
) -> BTreeMap<String, Vec<u8>> {
    put(store, &format!("{p}/new-after"), b"new".to_vec()).await;
    let over = b"after the report!".to_vec();
    put(store, &format!("{p}/to-overwrite"), over.clone()).await;
    store
        .delete(&Path::from(format!("{p}/to-delete")))
        .await
        .expect("delete");
    let mut now = want.clone();
    now.insert("new-after".into(), b"new".to_vec());
    now.insert("to-overwrite".into(), over);
    now.remove("to-delete");
    now
}

fn number_after(line: &str, what: &str) -> u64 {
    let at = line
        .find(what)
        .unwrap_or_else(|| panic!("{what:?} in {line}"))
        + what.len();
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a number after {what:?} in {line}"))
}

fn number_before(line: &str, what: &str) -> u64 {
    let at = line
        .find(what)
        .unwrap_or_else(|| panic!("{what:?} in {line}"));
    line[..at]
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a number before {what:?} in {line}"))
}

fn sync(db: &std::path::Path, src: &str, dst: &str, extra: &[&str]) -> std::process::Output {
    let mut c = slate_db(db);
    c.args(["sync", "--once", src, dst]).args(extra);
    run(c)
}

/// The first line of a reconcile from a report, and the listing pass's.
fn lines(out: &std::process::Output) -> (String, String) {
    let text = stdout(out);
    let l: Vec<&str> = text.lines().filter(|l| l.starts_with("sync:")).collect();
    assert_eq!(l.len(), 2, "two passes: {text}");
    (l[0].to_string(), l[1].to_string())
}

#[test]
fn an_s3_inventory_report_drives_the_backfill_and_nothing_after_it_is_lost() {
    for format in ["CSV", "Parquet"] {
        let p = unique(&format!("inv-{}", format.to_lowercase()));
        let want = data();
        let src_store = s3("slate-src");
        let dst_store = s3("slate-dst");
        let (manifest, listed) = rt().block_on(async {
            seed(&src_store, &p, &want).await;
            let rows = rows_of(&src_store, &p).await;
            let n = rows.len();
            (
                publish_s3(&format!("inv-{p}"), format, report_rows(rows, &p, 3)).await,
                n,
            )
        });
        assert_eq!(listed, want.len());
        let now = rt().block_on(change_after_the_report(&src_store, &p, &want));

        check(
            format,
            &format!("s3://slate-src/{p}"),
            &format!("s3://slate-dst/{p}"),
            &dst_store,
            &p,
            &manifest,
            &want,
            &now,
            // one S3 endpoint: the overwrite is copied server-side as it is now; only the
            // delete is left
            1,
        );
    }
}

/// The backfill from the report at `manifest` and what follows it (see the module
/// documentation): `want` is the source at the report's time, `now` after the changes.
#[allow(clippy::too_many_arguments)]
fn check(
    format: &str,
    src: &str,
    dst_base: &str,
    dst_store: &Arc<dyn ObjectStore>,
    p: &str,
    manifest: &str,
    want: &BTreeMap<String, Vec<u8>>,
    now: &BTreeMap<String, Vec<u8>>,
    want_left: u64,
) {
    let tmp = tempfile::tempdir().expect("tmp");
    let db = tmp.path().join("slate.db");
    let dst = format!("{dst_base}-replica");
    let out = sync(&db, src, &dst, &["--inventory", manifest]);
    assert!(
        out.status.success(),
        "{format}: {}{}",
        stdout(&out),
        stderr(&out)
    );
    let (first, second) = lines(&out);
    // the report's current objects under the pair, nothing else: not the older version,
    // the delete marker, the snapshot or the keys outside the pair
    assert!(
        first.contains(&format!("source {} from the inventory report", want.len())),
        "{format}: {first}"
    );
    // what is gone since the report could not be copied as the report said (and the
    // overwrite, where the copy reads through slate with the report's ETag as If-Match):
    // left to the listing pass, not failed
    let left = number_before(&first, " not copied");
    assert_eq!(left, want_left, "{format}: {first}");
    assert_eq!(
        number_after(&first, "; copied ") + left,
        want.len() as u64,
        "{format}: {first}"
    );
    assert!(!first.contains("FAILED"), "{format}: {first}");
    // the listing pass: the new key and the overwrite copied (new when the first pass left
    // it, changed when a server-side copy took the old bytes), the rest equal by the
    // manifest (no HEAD, no byte)
    assert!(
        second.contains(&format!("source {} listed", now.len())),
        "{format}: {second}"
    );
    assert!(second.contains("; copied 2 ("), "{format}: {second}");
    assert!(
        second.contains(&format!("{} by the manifest", now.len() - 2)),
        "{format}: {second}"
    );
    let got = rt().block_on(read_all(dst_store, &format!("{p}-replica")));
    assert_same(&got, now);

    // equal to a backfill from a listing, key by key
    let listed_dst = format!("{dst_base}-listed");
    let out = sync(&db, src, &listed_dst, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let by_listing = rt().block_on(read_all(dst_store, &format!("{p}-listed")));
    assert_same(&got, &by_listing);

    // the manifest rows the report made compare equal with a listing's
    let again = sync(&db, src, &dst, &["--full"]);
    assert!(again.status.success(), "{}", stderr(&again));
    let line = stdout(&again);
    assert!(line.contains("copied 0"), "{format}: {line}");
    assert!(
        line.contains(&format!(
            "{} equal ({} by the manifest)",
            now.len(),
            now.len()
        )),
        "{format}: {line}"
    );
}

#[test]
fn a_report_of_another_bucket_or_a_broken_one_is_refused_by_name() {
    let p = unique("inv-bad");
    let tmp = tempfile::tempdir().expect("tmp");
    let db = tmp.path().join("slate.db");
    let manifest = rt().block_on(async {
        seed(&s3("slate-src"), &p, &data()).await;
        let rows = rows_of(&s3("slate-src"), &p).await;
        publish_s3(&format!("inv-{p}"), "CSV", vec![rows]).await
    });
    // a report of slate-src cannot list slate-dst
    let out = sync(
        &db,
        &format!("s3://slate-dst/{p}"),
        &format!("s3://slate-src/{p}-back"),
        &["--inventory", &manifest],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains("--inventory") && err.contains("\"slate-src\""),
        "{err}"
    );
    assert!(err.contains(&manifest), "{err}");

    // a data file that is not gzip nor CSV of the schema: the file is named
    let store = s3("slate-dst");
    let bad = manifest.replace("s3://slate-dst/", "");
    let text = rt().block_on(async {
        store
            .get(&Path::from(bad.as_str()))
            .await
            .expect("manifest")
            .bytes()
            .await
            .expect("body")
    });
    let mut m: serde_json::Value = serde_json::from_slice(&text).expect("json");
    let file = m["files"][0]["key"].as_str().expect("key").to_string();
    let row = b"\"slate-src\",\"k\",\"\",\"true\",\"false\",\"not-a-size\"\n".to_vec();
    let row_len = row.len();
    rt().block_on(put(&store, &file, row));
    // a file not as long as the manifest says (cut short, or replaced): a failed read, exit 1
    let out = sync(
        &db,
        &format!("s3://slate-src/{p}"),
        &format!("s3://slate-dst/{p}-x"),
        &["--inventory", &manifest],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&file) && err.contains("where the manifest says"),
        "{err}"
    );
    // the manifest made to agree: the row itself is refused, naming the file and the line
    m["files"][0]["size"] = row_len.into();
    rt().block_on(put(&store, &bad, serde_json::to_vec(&m).expect("json")));
    let out = sync(
        &db,
        &format!("s3://slate-src/{p}"),
        &format!("s3://slate-dst/{p}-x"),
        &["--inventory", &manifest],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains(&file) && err.contains("line 1"), "{err}");
    // nothing was written at the destination
    let left = rt().block_on(read_all(&store, &format!("{p}-x")));
    assert!(left.is_empty(), "{:?}", left.keys());

    // a manifest that is not one
    m["fileFormat"] = "ORC".into();
    let orc = bad.replace("manifest.json", "orc/manifest.json");
    rt().block_on(put(&store, &orc, serde_json::to_vec(&m).expect("json")));
    let out = sync(
        &db,
        &format!("s3://slate-src/{p}"),
        &format!("s3://slate-dst/{p}-x"),
        &["--inventory", &format!("s3://slate-dst/{orc}")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("\"ORC\""), "{}", stderr(&out));

    // a schema without ETags: no copy could be guarded by If-Match
    m["fileFormat"] = "CSV".into();
    m["fileSchema"] = "Bucket, Key, Size, LastModifiedDate".into();
    let plain = bad.replace("manifest.json", "plain/manifest.json");
    rt().block_on(put(&store, &plain, serde_json::to_vec(&m).expect("json")));
    let out = sync(
        &db,
        &format!("s3://slate-src/{p}"),
        &format!("s3://slate-dst/{p}-x"),
        &["--inventory", &format!("s3://slate-dst/{plain}")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("ETag"), "{}", stderr(&out));

    // a folder holding two configurations' reports: which one is not guessed
    let folder = format!("s3://slate-dst/inv-{p}/slate-src/");
    let other = format!("inv-{p}/slate-src/config-2/2026-12-04T00-00Z/manifest.json");
    rt().block_on(put(&store, &other, text.to_vec()));
    let out = sync(
        &db,
        &format!("s3://slate-src/{p}"),
        &format!("s3://slate-dst/{p}-x"),
        &["--inventory", &folder],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("name one of them") && err.contains("config-2"),
        "{err}"
    );

    // a local source is refused: listing it is what a report would save
    let out = sync(
        &db,
        "/tmp",
        &format!("s3://slate-dst/{p}-x"),
        &["--inventory", &manifest],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("local folder"), "{}", stderr(&out));
}

const AZ_FIELDS: [&str; 7] = [
    "Name",
    "Creation-Time",
    "Last-Modified",
    "ETag",
    "Content-Length",
    "BlobType",
    "Snapshot",
];

/// Azure's times: seven digits of a second.
fn az_time(ms: i64) -> String {
    let t = chrono::DateTime::from_timestamp_millis(ms).expect("time");
    format!(
        "{}.{:07}Z",
        t.format("%Y-%m-%dT%H:%M:%S"),
        ms.rem_euclid(1000) * 10_000
    )
}

/// Azure Blob Inventory's CSV: a header row, then `container/blob` names.
fn az_csv(rows: &[Row]) -> Vec<u8> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(AZ_FIELDS).expect("header");
    for r in rows {
        let t = az_time(r.modified_ms);
        // an older version stands for a snapshot here (Azure's report marks it so)
        let snapshot = if r.latest { String::new() } else { t.clone() };
        w.write_record([
            r.key.as_str(),
            &t,
            &t,
            &r.etag,
            &r.size.to_string(),
            "BlockBlob",
            &snapshot,
        ])
        .expect("row");
    }
    w.into_inner().expect("csv")
}

/// Azure Blob Inventory's Parquet: the same field names, times as timestamp_millis.
fn az_parquet(rows: &[Row]) -> Vec<u8> {
    use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;
    let schema = Arc::new(
        parse_message_type(
            "message az {
                required binary Name (STRING);
                optional int64 Creation-Time (TIMESTAMP(MILLIS,true));
                optional int64 Last-Modified (TIMESTAMP(MILLIS,true));
                optional binary ETag (STRING);
                optional int64 Content-Length;
                optional binary BlobType (STRING);
            }",
        )
        .expect("schema"),
    );
    let props = Arc::new(WriterProperties::builder().build());
    let mut buf = Vec::new();
    {
        let mut w = SerializedFileWriter::new(&mut buf, schema, props).expect("writer");
        let mut g = w.next_row_group().expect("row group");
        let all = vec![1i16; rows.len()];
        let strs = |f: &dyn Fn(&Row) -> String| -> Vec<ByteArray> {
            rows.iter()
                .map(|r| ByteArray::from(f(r).as_str()))
                .collect()
        };
        let mut col = 0;
        while let Some(mut c) = g.next_column().expect("column") {
            match col {
                0 => c
                    .typed::<ByteArrayType>()
                    .write_batch(&strs(&|r| r.key.clone()), None, None),
                1 | 2 => c.typed::<Int64Type>().write_batch(
                    &rows.iter().map(|r| r.modified_ms).collect::<Vec<_>>(),
                    Some(&all),
                    None,
                ),
                3 => c.typed::<ByteArrayType>().write_batch(
                    &strs(&|r| r.etag.clone()),
                    Some(&all),
                    None,
                ),
                4 => c.typed::<Int64Type>().write_batch(
                    &rows.iter().map(|r| r.size as i64).collect::<Vec<_>>(),
                    Some(&all),
                    None,
                ),
                _ => c.typed::<ByteArrayType>().write_batch(
                    &strs(&|_| "BlockBlob".into()),
                    Some(&all),
                    None,
                ),
            }
            .expect("write column");
            c.close().expect("close column");
            col += 1;
        }
        g.close().expect("close row group");
        w.close().expect("close file");
    }
    buf
}

/// Writes a report in Azure Blob Inventory's layout under `inv/` of the slate-dst container
/// (its paths relative to the container, as Azure writes them); returns the manifest's URL.
async fn publish_azure(inv: &str, format: &str, rows: Vec<Vec<Row>>) -> String {
    let store = az("slate-dst");
    let dir = format!("{inv}/2026/12/04/00-00-00/rule1");
    let mut files = Vec::new();
    for (i, part) in rows.iter().enumerate() {
        let (name, body) = match format {
            "csv" => (format!("{dir}/rule1_{i}.csv"), az_csv(part)),
            _ => (format!("{dir}/rule1_{i}.parquet"), az_parquet(part)),
        };
        files.push(serde_json::json!({"blob": name, "size": body.len()}));
        put(&store, &name, body).await;
    }
    let start = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let manifest = serde_json::json!({
        "destinationContainer": "slate-dst",
        "endpoint": azurite_url(),
        "files": files,
        "inventoryCompletionTime": start,
        "inventoryStartTime": start,
        "ruleDefinition": {
            "filters": {"blobTypes": ["blockBlob"], "includeBlobVersions": false,
                        "includeSnapshots": true, "prefixMatch": ["slate-src/"]},
            "format": format,
            "objectType": "blob",
            "schedule": "daily",
            "schemaFields": AZ_FIELDS,
        },
        "ruleName": "rule1",
        "status": "Succeeded",
        "summary": {"objectCount": 0, "totalObjectSize": 0},
        "version": "1.0",
    });
    let key = format!("{dir}/rule1-manifest.json");
    put(&store, &key, serde_json::to_vec(&manifest).expect("json")).await;
    format!("az://slate-dst/{key}")
}

#[test]
fn an_azure_blob_inventory_report_drives_the_backfill_and_nothing_after_it_is_lost() {
    for format in ["csv", "parquet"] {
        let p = unique(&format!("azinv-{format}"));
        let want = data();
        let src_store = az("slate-src");
        let dst_store = az("slate-dst");
        let manifest = rt().block_on(async {
            seed(&src_store, &p, &want).await;
            // Azure's names are `container/blob`; a row of another container is not ours
            let mut rows = rows_of(&src_store, &p).await;
            assert_eq!(rows.len(), want.len());
            for r in &mut rows {
                r.key = format!("slate-src/{}", r.key);
            }
            let mut parts = report_rows(rows, &format!("slate-src/{p}"), 2);
            parts[0].push(Row {
                key: format!("slate-dst/{p}/another-container"),
                size: 1,
                etag: "0x8D0".into(),
                modified_ms: 1_700_000_000_000,
                latest: true,
                delete_marker: false,
            });
            if format == "parquet" {
                // Parquet reports here carry no Snapshot column: leave the older version out
                for part in &mut parts {
                    part.retain(|r| r.latest && !r.delete_marker);
                }
            } else {
                // a CSV's delete marker has no Azure meaning: leave it out
                for part in &mut parts {
                    part.retain(|r| !r.delete_marker);
                }
            }
            publish_azure(&format!("inv-{p}"), format, parts).await
        });
        let now = rt().block_on(change_after_the_report(&src_store, &p, &want));
        check(
            format,
            &format!("az://slate-src/{p}"),
            &format!("az://slate-dst/{p}"),
            &dst_store,
            &p,
            &manifest,
            &want,
            &now,
            // bytes through slate with If-Match: the overwrite and the delete are left
            2,
        );
    }
}

#[test]
fn with_the_events_gap_the_pair_counts_as_reconciled_and_a_local_copy_of_a_report_is_read() {
    let p = unique("inv-events");
    let want = data();
    let src_store = s3("slate-src");
    let tmp = tempfile::tempdir().expect("tmp");
    // the report as `aws s3 sync s3://inventories/ ./reports/` leaves it: the bucket's layout
    // in a local folder, two runs of one configuration (the newest is taken)
    let reports = tmp.path().join("reports");
    rt().block_on(async {
        seed(&src_store, &p, &want).await;
        let rows = rows_of(&src_store, &p).await;
        let inv = format!("inv-{p}");
        let url = publish_s3(&inv, "CSV", report_rows(rows, &p, 2)).await;
        let store = s3("slate-dst");
        let key = url.trim_start_matches("s3://slate-dst/").to_string();
        let listed: Vec<_> = store
            .list(Some(&Path::from(inv.as_str())))
            .try_collect()
            .await
            .expect("listing");
        for m in listed {
            let body = store.get(&m.location).await.expect("get").bytes().await.expect("body");
            let to = reports.join(m.location.as_ref());
            std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
            std::fs::write(&to, &body).expect("write");
        }
        // an older run of the same configuration, whose manifest names files that are gone
        let older = reports.join(key.replace("2026-12-04T00-00Z", "2026-12-01T00-00Z"));
        std::fs::create_dir_all(older.parent().expect("parent")).expect("mkdir");
        std::fs::write(&older, br#"{"sourceBucket":"slate-src","creationTimestamp":"1","fileFormat":"CSV","fileSchema":"Bucket, Key, Size, ETag","files":[{"key":"gone.csv.gz"}]}"#).expect("write");
        src_store
            .delete(&Path::from(format!("{p}/to-delete")))
            .await
            .expect("delete");
        put(&src_store, &format!("{p}/new-after"), b"new".to_vec()).await;
    });
    let db = tmp.path().join("slate.db");
    let src = format!("s3://slate-src/{p}");
    let dst = format!("s3://slate-dst/{p}-ev");
    let folder = reports
        .join(format!("inv-{p}/slate-src"))
        .display()
        .to_string();
    let out = sync(
        &db,
        &src,
        &dst,
        &["--inventory", &folder, "--inventory-gap", "events"],
    );
    let text = stdout(&out);
    // one pass: what went since the report failed its copy (its event would bring it)
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert_eq!(
        text.lines().filter(|l| l.starts_with("sync:")).count(),
        1,
        "{text}"
    );
    assert!(text.contains("from the inventory report"), "{text}");
    assert!(text.contains("(made "), "{text}");
    assert!(text.contains("1 FAILED"), "{text}");
    assert!(!text.contains("new-after"), "{text}");
    // the pair counts as reconciled: the next run trusts the manifest for the destination
    // (what the events would have done is done by this listing of the source)
    let next = sync(&db, &src, &dst, &["--trust-manifest"]);
    let line = stdout(&next);
    assert!(next.status.success(), "{line}{}", stderr(&next));
    assert!(
        line.contains("destination from the manifest (not listed)"),
        "{line}"
    );
    assert!(line.contains("copied 1 (1 new"), "{line}");
    let mut now = want.clone();
    now.remove("to-delete");
    now.insert("new-after".into(), b"new".to_vec());
    assert_same(
        &rt().block_on(read_all(&s3("slate-dst"), &format!("{p}-ev"))),
        &now,
    );
}
