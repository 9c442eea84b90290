//! rclone remotes as locations: `slate copy azure:cont aws:bucket/p` with the remotes of an
//! rclone.conf, each end with its own credentials and endpoint, the remote's placement applied,
//! what slate cannot honour refused in one line, and no secret of the config in any output.
//! Each slate here runs with no cloud variable at all: everything comes from the config.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::*;

/// Secrets of the configs below: none may appear in any output.
const S3_KEY_ID: &str = "AKIAREMOTESTEST00001";
const S3_SECRET: &str = "remote-secret-Zq9xv7Lw2pK4";

/// `slate` with no cloud variable, HOME in `home` (no ~/.aws, no rclone.conf but the test's).
fn bare(home: &Path) -> Command {
    let mut c = slate();
    for k in [
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_REGION",
        "AZURE_STORAGE_USE_EMULATOR",
        "AZURITE_BLOB_STORAGE_URL",
        "STORAGE_EMULATOR_HOST",
        "RCLONE_CONFIG",
    ] {
        c.env_remove(k);
    }
    for (k, _) in std::env::vars() {
        if k.starts_with("RCLONE_") {
            c.env_remove(k);
        }
    }
    c.env("HOME", home);
    c
}

fn rclone_conf(dir: &Path, azure_sas: &str) -> std::path::PathBuf {
    let text = format!(
        "# written by `rclone config`\n\
         [azure]\n\
         type = azureblob\n\
         sas_url = {azure_sas}\n\
         \n\
         [aws]\n\
         type = s3\n\
         provider = Other\n\
         access_key_id = {S3_KEY_ID}\n\
         secret_access_key = {S3_SECRET}\n\
         endpoint = {}\n\
         region = us-east-1\n\
         acl = public-read\n\
         storage_class = STANDARD_IA\n\
         server_side_encryption = AES256\n\
         chunk_size = 16Mi\n\
         \n\
         [vault]\n\
         type = crypt\n\
         remote = aws:slate-dst/secret\n\
         password = obscured-password-XYZ\n\
         \n\
         [replica]\n\
         type = alias\n\
         remote = aws:slate-dst\n",
        s3_endpoint()
    );
    let p = dir.join("rclone.conf");
    std::fs::write(&p, text).unwrap();
    p
}

/// The storage class, whether AllUsers may read, and the server-side encryption of an S3
/// object (as moto answers).
fn placed(bucket: &str, key: &str) -> (Option<String>, bool, Option<String>) {
    let (status, headers, _) = s3_signed("HEAD", &format!("/{bucket}/{key}"), &[], "");
    assert_eq!(status, 200, "HEAD {key}");
    let (status, _, acl) = s3_signed("GET", &format!("/{bucket}/{key}?acl"), &[], "");
    assert_eq!(status, 200, "{acl}");
    (
        headers.get("x-amz-storage-class").cloned(),
        acl.contains("http://acs.amazonaws.com/groups/global/AllUsers"),
        headers.get("x-amz-server-side-encryption").cloned(),
    )
}

fn no_secret(what: &str, text: &str, sas: &str) {
    let sig = sas.split("sig=").nth(1);
    for s in [S3_SECRET, S3_KEY_ID, "obscured-password-XYZ", AZURITE_KEY]
        .into_iter()
        .chain(sig)
    {
        assert!(
            !text.contains(s),
            "{what} shows a secret of the config: {text}"
        );
    }
}

#[test]
fn copy_between_two_remotes_of_an_rclone_config_with_their_credentials_and_placement() {
    let home = tempfile::tempdir().unwrap();
    let src = Place::new(End::Az("slate-src"), "rc-src");
    let data: BTreeMap<String, Vec<u8>> = (0..5)
        .map(|i| (format!("d/f{i}"), bytes(i, 700 + i as usize)))
        .collect();
    src.seed(&data);
    let sas = container_sas_url("slate-src", "rl");
    let conf = rclone_conf(home.path(), &sas);
    let conf_s = conf.display().to_string();
    let dst_prefix = unique("rc-dst");
    let (from, to) = (
        format!("azure:slate-src/{}", src.prefix),
        format!("aws:slate-dst/{dst_prefix}"),
    );

    let out = run({
        let mut c = bare(home.path());
        c.args(["--rclone-config", &conf_s, "copy", &from, &to, "-vv"]);
        c
    });
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{all}");
    no_secret("copy -vv", &all, &sas);
    let dst = Place::at(End::S3("slate-dst"), &dst_prefix);
    assert_same(&dst.read(), &data);
    for k in data.keys() {
        let (class, public, sse) = placed("slate-dst", &format!("{dst_prefix}/{k}"));
        assert_eq!(
            class.as_deref(),
            Some("STANDARD_IA"),
            "{k}: the remote's storage_class"
        );
        assert!(
            public,
            "{k}: the remote's acl = public-read grants AllUsers"
        );
        assert_eq!(
            sse.as_deref(),
            Some("AES256"),
            "{k}: server_side_encryption"
        );
    }
    // within the remote's endpoint, bucket to bucket: CopyObject, with the same placement
    let across = unique("rc-across");
    let out = run({
        let mut c = bare(home.path());
        c.args([
            "--rclone-config",
            &conf_s,
            "copy",
            &to,
            &format!("aws:slate-src/{across}"),
        ]);
        c
    });
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success() && all.contains("server-side"), "{all}");
    let (class, public, sse) = placed("slate-src", &format!("{across}/d/f1"));
    assert_eq!(
        (class.as_deref(), public, sse.as_deref()),
        (Some("STANDARD_IA"), true, Some("AES256"))
    );

    // again, the config from RCLONE_CONFIG: the manifest knows the pair, nothing moves
    let out = run({
        let mut c = bare(home.path());
        c.env("RCLONE_CONFIG", &conf).args(["copy", &from, &to]);
        c
    });
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{all}");
    assert!(
        all.contains("copied 0 ") && all.contains("skipped 5"),
        "{all}"
    );
    // diff through an alias of the same store agrees
    let out = run({
        let mut c = bare(home.path());
        c.env("RCLONE_CONFIG", &conf)
            .args(["diff", &from, &format!("replica:{dst_prefix}")]);
        c
    });
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // a flag wins over the remote's option
    let flagged = unique("rc-flag");
    let out = run({
        let mut c = bare(home.path());
        c.env("RCLONE_CONFIG", &conf).args([
            "copy",
            &from,
            &format!("aws:slate-dst/{flagged}"),
            "--storage-class",
            "GLACIER_IR",
            "-q",
        ]);
        c
    });
    assert!(out.status.success(), "{}", stderr(&out));
    let (class, _, _) = placed("slate-dst", &format!("{flagged}/d/f0"));
    assert_eq!(class.as_deref(), Some("GLACIER_IR"));
}

#[test]
fn what_slate_cannot_honour_is_refused_in_one_line_naming_it() {
    let home = tempfile::tempdir().unwrap();
    let sas = container_sas_url("slate-src", "rl");
    let conf = rclone_conf(home.path(), &sas);
    let local = tempfile::tempdir().unwrap();
    let l = local.path().display().to_string();
    let try_copy = |conf: &Path, src: &str| {
        let out = run({
            let mut c = bare(home.path());
            c.env("RCLONE_CONFIG", conf).args(["copy", src, &l, "-vv"]);
            c
        });
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{src}: {err}");
        no_secret(src, &format!("{}{err}", stdout(&out)), &sas);
        err
    };
    let err = try_copy(&conf, "vault:x");
    assert!(
        err.contains("'vault'") && err.contains("type 'crypt'"),
        "{err}"
    );
    let err = try_copy(&conf, "nothere:x");
    assert!(err.contains("remotes: aws, azure, replica, vault"), "{err}");

    let enc = home.path().join("encrypted.conf");
    std::fs::write(
        &enc,
        "# Encrypted rclone configuration File\n\nRCLONE_ENCRYPT_V0:\nc2VjcmV0LWJ5dGVz\n",
    )
    .unwrap();
    let err = try_copy(&enc, "aws:slate-dst/x");
    assert!(
        err.contains("encrypted") && err.contains("encrypted.conf"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let ssec = home.path().join("ssec.conf");
    std::fs::write(
        &ssec,
        format!(
            "[aws]\ntype = s3\naccess_key_id = {S3_KEY_ID}\nsecret_access_key = {S3_SECRET}\n\
             sse_customer_key = {S3_SECRET}\n"
        ),
    )
    .unwrap();
    let err = try_copy(&ssec, "aws:slate-dst/x");
    assert!(
        err.contains("sse_customer_key") && err.contains("SSE-C"),
        "{err}"
    );
}

#[test]
fn pairs_of_slate_config_name_remotes_defined_in_it() {
    // a [[pairs]] entry whose ends are remotes of slate's own config: per-side credentials
    let home = tempfile::tempdir().unwrap();
    let src = Place::new(End::Local, "rc-pair-src");
    let data: BTreeMap<String, Vec<u8>> = (0..3)
        .map(|i| (format!("f{i}"), bytes(10 + i, 500)))
        .collect();
    src.seed(&data);
    let dst_prefix = unique("rc-pair-dst");
    let cfg = home.path().join("slate.toml");
    std::fs::write(
        &cfg,
        format!(
            "[remotes.disk]\ntype = \"local\"\n\n\
             [remotes.store]\ntype = \"s3\"\nprovider = \"Other\"\naccess_key_id = \"{S3_KEY_ID}\"\n\
             secret_access_key = \"{S3_SECRET}\"\nendpoint = \"{}\"\nforce_path_style = true\n\n\
             [[pairs]]\nsrc = \"disk:{}\"\ndst = \"store:slate-dst/{dst_prefix}\"\n",
            s3_endpoint(),
            src.root.display()
        ),
    )
    .unwrap();
    let db = home.path().join("s.db");
    let out = run({
        let mut c = bare(home.path());
        c.args([
            "sync",
            "--once",
            "--config",
            &cfg.display().to_string(),
            "--db",
            &db.display().to_string(),
            "-vv",
        ]);
        c
    });
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{all}");
    no_secret("sync --once -vv", &all, "");
    let dst = Place::at(End::S3("slate-dst"), &dst_prefix);
    assert_same(&dst.read(), &data);
    // the pair is named by its remote: another store than s3://slate-dst reached through the
    // environment
    let out = run({
        let mut c = bare(home.path());
        c.args(["pairs", "--db", &db.display().to_string()]);
        c
    });
    let text = stdout(&out);
    assert!(
        text.contains(&format!("store:slate-dst/{dst_prefix}")),
        "{text}"
    );

    // an option slate cannot honour in slate's config: the file and the remote named
    std::fs::write(&cfg, "[remotes.bad]\ntype = \"s3\"\nv2_auth = true\n").unwrap();
    let out = run({
        let mut c = bare(home.path());
        c.args([
            "sync",
            "--once",
            "--config",
            &cfg.display().to_string(),
            "--db",
            &db.display().to_string(),
        ]);
        c
    });
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("slate.toml") && err.contains("remotes.bad") && err.contains("v2_auth"),
        "{err}"
    );
}

#[test]
fn a_gcs_remote_reaches_its_endpoint_with_its_class_and_acl_and_asks_no_metadata_server() {
    // anonymous = true with an endpoint: object_store alone would ask the metadata server
    // (169.254.169.254) for a token on each write
    let home = tempfile::tempdir().unwrap();
    let conf = home.path().join("gcs.conf");
    std::fs::write(
        &conf,
        format!(
            "[g]\ntype = google cloud storage\nendpoint = {}\nanonymous = true\n\
             object_acl = publicRead\nstorage_class = NEARLINE\nproject_number = 12345\n",
            gcs_write_endpoint()
        ),
    )
    .unwrap();
    let src = Place::new(End::Local, "rc-gcs-src");
    let data: BTreeMap<String, Vec<u8>> = (0..3)
        .map(|i| (format!("g/f{i}"), bytes(20 + i, 900)))
        .collect();
    src.seed(&data);
    let prefix = unique("rc-gcs");
    let out = run({
        let mut c = bare(home.path());
        c.env("RCLONE_CONFIG", &conf)
            .args(["copy", &src.url(), &format!("g:slate-dst/{prefix}")]);
        c
    });
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{all}");
    assert!(!all.contains("169.254"), "{all}");
    assert_same(&Place::at(End::Gs("slate-dst"), &prefix).read(), &data);
    let url = format!(
        "{}/storage/v1/b/slate-dst/o/{}?projection=full",
        gcs_endpoint(),
        url::form_urlencoded::byte_serialize(format!("{prefix}/g/f0").as_bytes())
            .collect::<String>()
    );
    let v: serde_json::Value = reqwest::blocking::get(url).unwrap().json().unwrap();
    assert_eq!(v["storageClass"], "NEARLINE", "{v}");
    let acl = v["acl"].to_string();
    assert!(acl.contains("allUsers") && acl.contains("READER"), "{acl}");
}

#[test]
fn a_remote_takes_from_the_environment_only_credentials_and_only_with_env_auth() {
    let home = tempfile::tempdir().unwrap();
    let src = Place::new(End::Local, "rc-env-src");
    let data: BTreeMap<String, Vec<u8>> = (0..2)
        .map(|i| (format!("e{i}"), bytes(40 + i, 300)))
        .collect();
    src.seed(&data);
    let local_dst = tempfile::tempdir().unwrap();
    let conf = home.path().join("rclone.conf");
    std::fs::write(
        &conf,
        format!(
            "[aws]\ntype = s3\naccess_key_id = {S3_KEY_ID}\nsecret_access_key = {S3_SECRET}\n\
             endpoint = {ep}\nstorage_class = STANDARD_IA\n\n\
             [envy]\ntype = s3\nenv_auth = true\nendpoint = {ep}\n\n\
             [prod]\ntype = local\n",
            ep = s3_endpoint()
        ),
    )
    .unwrap();
    // what the environment says of another store: an endpoint nothing listens on, other
    // keys, another addressing style
    let hostile = |c: &mut Command| {
        c.env("RCLONE_CONFIG", &conf)
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
            .env("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
            .env("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "true")
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing");
    };
    for remote in ["aws", "envy"] {
        let prefix = unique(&format!("rc-env-{remote}"));
        let out = run({
            let mut c = bare(home.path());
            hostile(&mut c);
            c.args([
                "copy",
                &src.url(),
                &format!("{remote}:slate-dst/{prefix}"),
                "-q",
            ]);
            c
        });
        assert!(out.status.success(), "{remote}: {}", stderr(&out));
        assert_same(&Place::at(End::S3("slate-dst"), &prefix).read(), &data);
    }
    // rclone's variables: RCLONE_CONFIG_PROD_EU_* define remote prod_eu (not options of
    // remote prod), RCLONE_S3_* apply to every s3 remote over the file
    let prefix = unique("rc-env-prodeu");
    let out = run({
        let mut c = bare(home.path());
        c.env("RCLONE_CONFIG", &conf)
            .env("RCLONE_CONFIG_PROD_EU_TYPE", "s3")
            .env("RCLONE_CONFIG_PROD_EU_ENDPOINT", s3_endpoint())
            .env("RCLONE_CONFIG_PROD_EU_ACCESS_KEY_ID", S3_KEY_ID)
            .env("RCLONE_CONFIG_PROD_EU_SECRET_ACCESS_KEY", S3_SECRET)
            .env("RCLONE_S3_STORAGE_CLASS", "GLACIER_IR")
            .args([
                "copy",
                &src.url(),
                &format!("prod_eu:slate-dst/{prefix}"),
                "-q",
            ]);
        c
    });
    assert!(out.status.success(), "{}", stderr(&out));
    let (class, _, _) = placed("slate-dst", &format!("{prefix}/e0"));
    assert_eq!(
        class.as_deref(),
        Some("GLACIER_IR"),
        "RCLONE_S3_STORAGE_CLASS"
    );
    let out = run({
        let mut c = bare(home.path());
        c.env("RCLONE_CONFIG", &conf)
            .env("RCLONE_CONFIG_PROD_EU_TYPE", "s3")
            .args([
                "copy",
                &src.url(),
                &format!("prod:{}", local_dst.path().display()),
                "-q",
            ]);
        c
    });
    assert!(
        out.status.success(),
        "remote prod untouched by PROD_EU_*: {}",
        stderr(&out)
    );
    assert_same(&read_local(local_dst.path()), &data);
}
