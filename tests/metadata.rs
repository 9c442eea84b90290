//! A replica is the same object: Content-* headers, user metadata and the modification time
//! travel on every path (single PUT, multipart, server-side, to and from local folders), and
//! storage class and ACL land where asked. Every property is read back with the emulator's
//! own API (a signed HEAD to moto and Azurite, fake-gcs-server's JSON API), not through slate.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use object_store::path::Path;
use object_store::{Attribute, AttributeValue, Attributes, ObjectStore, PutOptions};

fn s3_request(
    method: &str,
    bucket: &str,
    key_and_query: &str,
) -> (u16, BTreeMap<String, String>, String) {
    s3_signed(method, &format!("/{bucket}/{key_and_query}"), &[], "")
}

/// The properties of a stored object as its store reports them: `content-type`, … ,
/// `meta:NAME` for user metadata, `class` for the storage class / access tier.
fn props(end: &End, key: &str) -> BTreeMap<String, String> {
    const STD: [&str; 5] = [
        "content-type",
        "cache-control",
        "content-disposition",
        "content-encoding",
        "content-language",
    ];
    let mut out = BTreeMap::new();
    match end {
        End::S3(b) => {
            let (status, h, _) = s3_request("HEAD", b, &enc(key));
            assert_eq!(status, 200, "HEAD s3://{b}/{key}");
            for (k, v) in h {
                if let Some(name) = k.strip_prefix("x-amz-meta-") {
                    out.insert(format!("meta:{name}"), v);
                } else if k == "x-amz-storage-class" {
                    out.insert("class".into(), v);
                } else if STD.contains(&k.as_str()) {
                    out.insert(k, v);
                }
            }
        }
        End::Az(c) => {
            let (status, h) = az_head(c, key);
            assert_eq!(status, 200, "HEAD az://{c}/{key}: {h:?}");
            for (k, v) in h {
                if let Some(name) = k.strip_prefix("x-ms-meta-") {
                    out.insert(format!("meta:{name}"), v);
                } else if k == "x-ms-access-tier" {
                    out.insert("class".into(), v);
                } else if STD.contains(&k.as_str()) {
                    out.insert(k, v);
                }
            }
        }
        End::Gs(b) => {
            let url = format!(
                "{}/storage/v1/b/{b}/o/{}",
                gcs_endpoint(),
                url::form_urlencoded::byte_serialize(key.as_bytes()).collect::<String>()
            );
            let r = reqwest::blocking::get(url).expect("gcs get");
            assert!(
                r.status().is_success(),
                "GET gs://{b}/{key}: {}",
                r.status()
            );
            let v: serde_json::Value = r.json().expect("json");
            for (field, name) in [
                ("contentType", "content-type"),
                ("cacheControl", "cache-control"),
                ("contentDisposition", "content-disposition"),
                ("contentEncoding", "content-encoding"),
                ("contentLanguage", "content-language"),
                ("storageClass", "class"),
            ] {
                if let Some(s) = v.get(field).and_then(|s| s.as_str()) {
                    if !s.is_empty() {
                        out.insert(name.into(), s.into());
                    }
                }
            }
            if let Some(m) = v.get("metadata").and_then(|m| m.as_object()) {
                for (k, val) in m {
                    out.insert(format!("meta:{k}"), val.as_str().unwrap_or("").into());
                }
            }
        }
        End::Local => unreachable!("local files carry only their mtime"),
    }
    out
}

/// The source's modification time: 2020-09-13T12:26:40.5Z.
const MTIME_SECS: u64 = 1_600_000_000;
fn mtime() -> SystemTime {
    UNIX_EPOCH + Duration::new(MTIME_SECS, 500_000_000)
}

/// rclone's spelling of [`mtime`] on each store.
fn mtime_as(end: &End) -> &'static str {
    match end {
        End::S3(_) => "1600000000.5",
        End::Az(_) => "2020-09-13T12:26:40.500000000Z",
        End::Gs(_) => "2020-09-13T12:26:40.5Z",
        End::Local => "",
    }
}

/// The metadata name a name becomes on `end` (Azure: C# identifiers).
fn name_on(end: &End, name: &str) -> String {
    match end {
        End::Az(_) => name.replace('-', "_"),
        _ => name.to_string(),
    }
}

/// `my-key` after the trip: a name that has been through Azure is `my_key` from then on.
fn expected_name(src: &End, dst: &End) -> String {
    match (src, dst) {
        (End::Az(_), _) | (_, End::Az(_)) => "my_key".into(),
        _ => "my-key".into(),
    }
}

const SMALL: &str = "site/index.html";
const BIG: &str = "big/model.bin";

/// Seeds the two objects with every property a user would set on that store.
fn seed_rich(p: &Place) {
    let small = b"<html><body>hello</body></html>".to_vec();
    let big = bytes(7, 6 * MIB);
    if let End::Local = p.end {
        for (k, data) in [(SMALL, &small), (BIG, &big)] {
            let path = p.root.join(k);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, data).unwrap();
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            f.set_modified(mtime()).unwrap();
        }
        return;
    }
    let store: std::sync::Arc<dyn ObjectStore> = match p.end {
        End::S3(b) => s3(b),
        End::Az(c) => az(c),
        End::Gs(b) => gcs_writer(b),
        End::Local => unreachable!(),
    };
    let mut a = Attributes::new();
    a.insert(Attribute::ContentType, "text/html; charset=utf-8".into());
    a.insert(Attribute::CacheControl, "max-age=60".into());
    a.insert(
        Attribute::ContentDisposition,
        "inline; filename=\"index.html\"".into(),
    );
    a.insert(Attribute::ContentLanguage, "de-DE".into());
    a.insert(Attribute::ContentEncoding, "identity".into());
    a.insert(Attribute::Metadata("owner".into()), "team-a".into());
    let dash = name_on(&p.end, "my-key");
    a.insert(Attribute::Metadata(dash.into()), "v1".into());
    a.insert(
        Attribute::Metadata("city".into()),
        "=?UTF-8?B?S8O2bG4=?=".into(),
    );
    a.insert(
        Attribute::Metadata("mtime".into()),
        AttributeValue::from(mtime_as(&p.end)),
    );
    let mut big_attrs = Attributes::new();
    big_attrs.insert(Attribute::ContentType, "application/x-model".into());
    big_attrs.insert(Attribute::Metadata("owner".into()), "team-b".into());
    big_attrs.insert(
        Attribute::Metadata("mtime".into()),
        AttributeValue::from(mtime_as(&p.end)),
    );
    rt().block_on(async {
        for (k, data, attrs) in [(SMALL, small, a), (BIG, big, big_attrs)] {
            let path = Path::parse(format!("{}/{k}", p.prefix)).unwrap();
            let opts = PutOptions {
                attributes: attrs,
                ..Default::default()
            };
            store
                .put_opts(&path, data.into(), opts)
                .await
                .expect("seed");
        }
    });
}

/// Checks what `dst` holds against what `src` carried.
fn check_rich(src: &Place, dst: &Place, what: &str) {
    if let End::Local = dst.end {
        for k in [SMALL, BIG] {
            let m =
                std::fs::metadata(dst.root.join(k)).unwrap_or_else(|e| panic!("{what}: {k}: {e}"));
            assert_eq!(m.modified().unwrap(), mtime(), "{what}: mtime of {k}");
        }
        return;
    }
    let small = props(&dst.end, &format!("{}/{SMALL}", dst.prefix));
    let big = props(&dst.end, &format!("{}/{BIG}", dst.prefix));
    let get = |m: &BTreeMap<String, String>, k: &str| m.get(k).cloned().unwrap_or_default();
    assert_eq!(
        get(&small, "content-type"),
        "text/html; charset=utf-8",
        "{what}: {small:?}"
    );
    assert_eq!(
        get(&small, "meta:mtime"),
        mtime_as(&dst.end),
        "{what}: {small:?}"
    );
    assert_eq!(
        get(&big, "meta:mtime"),
        mtime_as(&dst.end),
        "{what}: {big:?}"
    );
    if let End::Local = src.end {
        // a file has a name and a time: the type comes from its extension
        assert_eq!(
            get(&big, "content-type"),
            "application/octet-stream",
            "{what}: {big:?}"
        );
        return;
    }
    assert_eq!(
        get(&small, "cache-control"),
        "max-age=60",
        "{what}: {small:?}"
    );
    assert_eq!(
        get(&small, "content-disposition"),
        "inline; filename=\"index.html\"",
        "{what}: {small:?}"
    );
    assert_eq!(
        get(&small, "content-language"),
        "de-DE",
        "{what}: {small:?}"
    );
    assert_eq!(
        get(&small, "content-encoding"),
        "identity",
        "{what}: {small:?}"
    );
    assert_eq!(get(&small, "meta:owner"), "team-a", "{what}: {small:?}");
    assert_eq!(
        get(
            &small,
            &format!("meta:{}", expected_name(&src.end, &dst.end))
        ),
        "v1",
        "{what}: {small:?}"
    );
    assert_eq!(
        get(&small, "meta:city"),
        "=?UTF-8?B?S8O2bG4=?=",
        "{what}: {small:?}"
    );
    assert_eq!(
        get(&big, "content-type"),
        "application/x-model",
        "{what}: {big:?}"
    );
    assert_eq!(get(&big, "meta:owner"), "team-b", "{what}: {big:?}");
}

/// A name and a way to make the source end of that name.
type Ends = [(&'static str, fn() -> End); 4];

fn ends() -> Ends {
    [
        ("local", || End::Local),
        ("s3", || End::S3("slate-src")),
        ("az", || End::Az("slate-src")),
        ("gs", || End::Gs("slate-src")),
    ]
}

fn dst_end(name: &str) -> End {
    match name {
        "local" => End::Local,
        "s3" => End::S3("slate-dst"),
        "az" => End::Az("slate-dst"),
        _ => End::Gs("slate-dst"),
    }
}

#[test]
fn properties_metadata_and_mtime_travel_in_all_sixteen_directions() {
    for (sname, src_end) in ends() {
        let src = Place::new(src_end(), &format!("meta-{sname}"));
        seed_rich(&src);
        for (dname, _) in ends() {
            let dst = Place::new(dst_end(dname), &format!("meta-{sname}-{dname}"));
            // 5 MiB chunks: the 6 MiB object goes as a multipart upload to a cloud
            let out = run({
                let mut c = slate();
                c.args(["copy", &src.url(), &dst.url(), "--chunk-size", "5MiB", "-q"]);
                c
            });
            let what = format!("{sname} -> {dname}");
            assert!(out.status.success(), "{what}: {}", stderr(&out));
            check_rich(&src, &dst, &what);
        }
    }
}

#[test]
fn server_side_copies_keep_properties_in_one_bucket_and_across_buckets() {
    for (name, src_end, dst_end) in [
        ("s3-same", End::S3("slate-src"), End::S3("slate-src")),
        ("az-same", End::Az("slate-src"), End::Az("slate-src")),
        ("gs-same", End::Gs("slate-src"), End::Gs("slate-src")),
    ] {
        let src = Place::new(src_end, &format!("ss-{name}"));
        seed_rich(&src);
        let dst = Place::new(dst_end, &format!("ss-{name}-to"));
        let out = run({
            let mut c = slate();
            c.args(["copy", &src.url(), &dst.url(), "-q"]);
            c
        });
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        check_rich(&src, &dst, name);
    }
}

#[test]
fn storage_class_and_acl_land_where_asked_and_unknown_values_stop_first() {
    let src = Place::new(End::Local, "place-src");
    seed_rich(&src);
    // S3: class and canned ACL, on a single PUT and a multipart upload
    let dst = Place::new(End::S3("slate-dst"), "place-s3");
    let out = copy(
        &src.url(),
        &dst.url(),
        &[
            "--storage-class",
            "standard_ia",
            "--acl",
            "public-read",
            "-q",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    for k in [SMALL, BIG] {
        let key = format!("{}/{k}", dst.prefix);
        let p = props(&dst.end, &key);
        assert_eq!(
            p.get("class").map(String::as_str),
            Some("STANDARD_IA"),
            "{k}: {p:?}"
        );
        let (status, _, acl) = s3_request("GET", "slate-dst", &format!("{}?acl", enc(&key)));
        assert_eq!(status, 200, "{acl}");
        assert!(
            acl.contains("http://acs.amazonaws.com/groups/global/AllUsers"),
            "{k}: public-read grants AllUsers: {acl}"
        );
    }
    // S3 server-side (one bucket): the copy is made with the class asked for
    let again = Place::new(End::S3("slate-dst"), "place-s3-copy");
    let out = copy(
        &dst.url(),
        &again.url(),
        &["--storage-class", "GLACIER_IR", "-q"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let p = props(&again.end, &format!("{}/{SMALL}", again.prefix));
    assert_eq!(
        p.get("class").map(String::as_str),
        Some("GLACIER_IR"),
        "{p:?}"
    );
    assert_eq!(
        p.get("meta:mtime").map(String::as_str),
        Some("1600000000.5"),
        "{p:?}"
    );
    // Azure: an access tier, on a single PUT and a block list
    let dst = Place::new(End::Az("slate-dst"), "place-az");
    let out = copy(&src.url(), &dst.url(), &["--storage-class", "cool", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    for k in [SMALL, BIG] {
        let p = props(&dst.end, &format!("{}/{k}", dst.prefix));
        assert_eq!(
            p.get("class").map(String::as_str),
            Some("Cool"),
            "{k}: {p:?}"
        );
    }
    // GCS: a storage class and a predefined ACL
    let dst = Place::new(End::Gs("slate-dst"), "place-gs");
    let out = copy(
        &src.url(),
        &dst.url(),
        &["--storage-class", "NEARLINE", "--acl", "publicRead", "-q"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let key = format!("{}/{SMALL}", dst.prefix);
    let p = props(&dst.end, &key);
    assert_eq!(
        p.get("class").map(String::as_str),
        Some("NEARLINE"),
        "{p:?}"
    );
    let url = format!(
        "{}/storage/v1/b/slate-dst/o/{}?projection=full",
        gcs_endpoint(),
        url::form_urlencoded::byte_serialize(key.as_bytes()).collect::<String>()
    );
    let v: serde_json::Value = reqwest::blocking::get(url).unwrap().json().unwrap();
    let acl = v["acl"].to_string();
    assert!(
        acl.contains("allUsers") && acl.contains("READER"),
        "public-read grants allUsers: {acl}"
    );
    // values a store does not have: exit 2 naming them, nothing copied
    for (dst, args, named) in [
        ("az", vec!["--storage-class", "GLACIER"], "'GLACIER'"),
        ("az", vec!["--acl", "public-read"], "'public-read'"),
        ("s3", vec!["--storage-class", "Nearline2"], "'Nearline2'"),
        ("gs", vec!["--acl", "everyone"], "'everyone'"),
    ] {
        let place = Place::new(dst_end(dst), &format!("place-bad-{dst}"));
        let mut a = args.clone();
        a.push("-q");
        let out = copy(&src.url(), &place.url(), &a);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{dst} {args:?}: {}",
            stderr(&out)
        );
        let err = stderr(&out);
        assert!(err.contains(named), "{dst} {args:?}: {err}");
        assert!(err.trim().lines().count() == 1, "one line: {err}");
        assert!(place.read().is_empty(), "{dst} {args:?}: nothing copied");
    }
}

#[test]
fn metadata_a_destination_cannot_hold_is_an_error_naming_object_and_field() {
    // S3 holds 2 KiB of user metadata; an Azure blob with more cannot become an S3 object
    let src = Place::new(End::Az("slate-src"), "meta-big");
    let store = az("slate-src");
    let mut a = Attributes::new();
    a.insert(
        Attribute::Metadata("notes".into()),
        AttributeValue::from("x".repeat(3000)),
    );
    rt().block_on(async {
        let p = Path::parse(format!("{}/doc.txt", src.prefix)).unwrap();
        store
            .put_opts(
                &p,
                b"doc".to_vec().into(),
                PutOptions {
                    attributes: a,
                    ..Default::default()
                },
            )
            .await
            .expect("seed");
    });
    let dst = Place::new(End::S3("slate-dst"), "meta-big-to");
    let out = copy(&src.url(), &dst.url(), &["-q"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("doc.txt") && err.contains("'notes'"), "{err}");
    assert!(dst.read().is_empty(), "nothing partial at the destination");
}
