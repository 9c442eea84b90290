//! Push deliveries proven by their tokens (issue 23). Pub/Sub: with an audience configured,
//! the daemon stores a push only with a token signed by a key of the configured JWKS, for the
//! audience, of the service account; the test signs its own tokens (tests/keys/) and serves
//! their public keys as a JWKS on 127.0.0.1.

mod common;

use std::io::{Read, Write};
use std::process::Stdio;

use base64::Engine as _;
use common::*;
use ring::signature::KeyPair;

const AUD: &str = "https://slate.test/events/pubsub";
const SA: &str = "push@test-project.iam.gserviceaccount.com";

fn key(n: u8) -> ring::signature::RsaKeyPair {
    let der = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/keys/test-only-rsa-{n}.pk8")),
    )
    .expect("test key");
    ring::signature::RsaKeyPair::from_pkcs8(&der).expect("pkcs8")
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

/// The public half of `k` as a JWK named `kid`.
fn jwk(k: &ring::signature::RsaKeyPair, kid: &str) -> serde_json::Value {
    let c: ring::rsa::PublicKeyComponents<Vec<u8>> = k.public_key().into();
    serde_json::json!({"kty": "RSA", "alg": "RS256", "use": "sig", "kid": kid,
        "n": b64(&c.n), "e": b64(&c.e)})
}

/// A token with `claims`, its header naming `kid`, signed with `k`.
fn token(k: &ring::signature::RsaKeyPair, kid: &str, claims: &serde_json::Value) -> String {
    let head = b64(
        serde_json::json!({"alg": "RS256", "kid": kid, "typ": "JWT"})
            .to_string()
            .as_bytes(),
    );
    let body = b64(claims.to_string().as_bytes());
    let signed = format!("{head}.{body}");
    let mut sig = vec![0; k.public().modulus_len()];
    k.sign(
        &ring::signature::RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        signed.as_bytes(),
        &mut sig,
    )
    .expect("sign");
    format!("{signed}.{}", b64(&sig))
}

/// Serves `doc` to every request on 127.0.0.1 (a JWKS endpoint); returns its URL.
fn serve_jwks(doc: String) -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{doc}",
                doc.len()
            );
        }
    });
    format!("http://{addr}/oauth2/v3/certs")
}

/// A daemon of one webhook pair, `SRC/PREFIX` to a local folder, with `daemon_lines` in its
/// `[daemon]` table and no API token: (its folder, the destination, the daemon, its address).
fn webhook_daemon(
    daemon_lines: &str,
    src: &str,
    prefix: &str,
) -> (tempfile::TempDir, std::path::PathBuf, Child, String) {
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log, dst) = (
        dir.path().join("s.db"),
        dir.path().join("d.log"),
        dir.path().join("dst"),
    );
    std::fs::create_dir_all(&dst).expect("dst");
    let conf = dir.path().join("slate.toml");
    std::fs::write(
        &conf,
        format!(
            "[daemon]\nlisten = \"127.0.0.1:0\"\ndrift_check_interval = \"0\"\n{daemon_lines}\n\
             [[pairs]]\nsrc = \"{src}/{prefix}\"\ndst = \"{}\"\nevents = \"webhook\"\n",
            dst.display()
        ),
    )
    .expect("config");
    let mut c = slate_db(&db);
    c.args(["sync", "--config", &conf.display().to_string(), "--quiet"])
        .env_remove("SLATE_API_TOKEN")
        .env("RUST_LOG", "slate=info,warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"));
    let daemon = spawn_daemon(c, &log, 1);
    let addr = listen_addr(&read_log(&log)).expect("listening");
    (dir, dst, daemon, addr)
}

#[test]
fn pubsub_pushes_are_stored_only_with_a_good_oidc_token() {
    let (k1, k2) = (key(1), key(2));
    let jwks = serve_jwks(serde_json::json!({"keys": [jwk(&k1, "k1")]}).to_string());
    let prefix = unique("jwt");
    let (dir, dst, daemon, addr) = webhook_daemon(
        &format!(
            "pubsub_push_audience = \"{AUD}\"\npubsub_push_service_account = \"{SA}\"\n\
             pubsub_push_jwks_url = \"{jwks}\"\n"
        ),
        "gs://slate-src",
        &prefix,
    );
    let log = dir.path().join("d.log");

    let object = format!("{prefix}/pushed.bin");
    rt().block_on(async {
        use object_store::ObjectStoreExt;
        gcs_writer("slate-src")
            .put(
                &object_store::path::Path::from(object.clone()),
                bytes(5, 77).into(),
            )
            .await
            .expect("put")
    });
    let body = serde_json::json!({"message": {"attributes": {"eventType": "OBJECT_FINALIZE",
        "bucketId": "slate-src", "objectId": object, "payloadFormat": "NONE"},
        "messageId": "m-1"}, "subscription": "projects/test-project/subscriptions/s"})
    .to_string();
    let now = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()) as i64;
    let good = serde_json::json!({"aud": AUD, "iss": "https://accounts.google.com",
        "iat": now, "exp": now + 3600, "email": SA, "email_verified": true, "sub": "1"});
    let post = |tok: Option<String>| {
        let mut r = reqwest::blocking::Client::new()
            .post(format!("http://{addr}/events/pubsub"))
            .header("content-type", "application/json")
            .body(body.clone());
        if let Some(t) = tok {
            r = r.bearer_auth(t);
        }
        r.send().expect("post").status().as_u16()
    };
    let with = |field: &str, value: serde_json::Value| {
        let mut c = good.clone();
        c[field] = value;
        c
    };
    // refused: no token, another key's signature under k1's name, an unknown key, another
    // audience, expired, another account, alg none
    let unsigned = format!(
        "{}.{}.",
        b64(br#"{"alg":"none","kid":"k1"}"#),
        b64(good.to_string().as_bytes())
    );
    for (what, tok) in [
        ("no token", None),
        ("signed by another key", Some(token(&k2, "k1", &good))),
        ("an unknown key", Some(token(&k2, "k2", &good))),
        (
            "another audience",
            Some(token(&k1, "k1", &with("aud", "https://other/".into()))),
        ),
        (
            "expired",
            Some(token(&k1, "k1", &with("exp", (now - 7200).into()))),
        ),
        (
            "another account",
            Some(token(&k1, "k1", &with("email", "x@y.z".into()))),
        ),
        ("alg none", Some(unsigned)),
    ] {
        assert_eq!(post(tok), 401, "{what}");
    }
    assert!(
        read_local(&dst).is_empty(),
        "nothing stored from a refused push"
    );
    // a good token: stored and applied
    assert_eq!(post(Some(token(&k1, "k1", &good))), 200);
    wait_for("the pushed object copied", 60, || {
        read_local(&dst).get("pushed.bin") == Some(&bytes(5, 77))
    });
    let text = read_log(&log);
    assert!(
        text.contains("a push delivery with a bad token refused"),
        "{}",
        log_tail(&text)
    );
    assert_eq!(daemon.stop(libc::SIGTERM), Some(0));
}

/// Event Grid with Entra ID authentication: with `eventgrid_audience` and `eventgrid_tenant`
/// set, a webhook delivery is stored only with a token of the tenant (v1 or v2 issuer), for
/// the application, signed by a key of the JWKS.
#[test]
fn event_grid_deliveries_are_stored_only_with_a_good_entra_token() {
    const APP: &str = "api://slate-events";
    const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
    let (k1, k2) = (key(1), key(2));
    let jwks = serve_jwks(serde_json::json!({"keys": [jwk(&k1, "k1")]}).to_string());
    let prefix = unique("entra");
    let (_dir, dst, daemon, addr) = webhook_daemon(
        &format!(
            "eventgrid_audience = \"{APP}\"\neventgrid_tenant = \"{TENANT}\"\n\
             eventgrid_jwks_url = \"{jwks}\"\n"
        ),
        "az://slate-src",
        &prefix,
    );

    // written after the backfill: only a delivery can bring them
    let store = az("slate-src");
    let put = |name: &str, seed: usize| {
        use object_store::ObjectStoreExt;
        rt().block_on(store.put(
            &object_store::path::Path::from(format!("{prefix}/{name}")),
            bytes(5, seed).into(),
        ))
        .expect("put");
    };
    put("v1.bin", 31);
    put("v2.bin", 32);
    let body = |name: &str| {
        serde_json::json!([{
            "topic": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Storage/storageAccounts/devstoreaccount1",
            "subject": format!("/blobServices/default/containers/slate-src/blobs/{prefix}/{name}"),
            "eventType": "Microsoft.Storage.BlobCreated",
            "eventTime": "2026-12-04T03:00:00.0000000Z",
            "id": unique("ev"),
            "data": {"api": "PutBlob", "contentLength": 5, "blobType": "BlockBlob",
                "url": format!("http://127.0.0.1:10000/devstoreaccount1/slate-src/{prefix}/{name}")},
            "dataVersion": "", "metadataVersion": "1"
        }])
        .to_string()
    };
    let now = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()) as i64;
    let eg_app = "4962773b-9cdb-44cf-a8bf-237846a00ab7";
    let v2 = serde_json::json!({"aud": APP, "azp": eg_app,
        "iss": format!("https://login.microsoftonline.com/{TENANT}/v2.0"),
        "iat": now, "nbf": now, "exp": now + 3600, "tid": TENANT, "sub": "eventgrid"});
    let v1 = serde_json::json!({"aud": APP, "appid": eg_app, "iss": format!("https://sts.windows.net/{TENANT}/"),
        "iat": now, "nbf": now, "exp": now + 3600, "tid": TENANT, "sub": "eventgrid"});
    let post = |name: &str, tok: Option<String>| {
        let mut r = reqwest::blocking::Client::new()
            .post(format!("http://{addr}/events/eventgrid"))
            .header("content-type", "application/json")
            .body(body(name));
        if let Some(t) = tok {
            r = r.bearer_auth(t);
        }
        r.send().expect("post").status().as_u16()
    };
    let with = |field: &str, value: serde_json::Value| {
        let mut c = v2.clone();
        c[field] = value;
        c
    };
    for (what, tok) in [
        ("no token", None),
        ("signed by another key", Some(token(&k2, "k1", &v2))),
        ("an unknown key", Some(token(&k2, "k2", &v2))),
        (
            "another application",
            Some(token(&k1, "k1", &with("aud", "api://other".into()))),
        ),
        (
            "another tenant",
            Some(token(
                &k1,
                "k1",
                &with(
                    "iss",
                    "https://login.microsoftonline.com/00000000-0000-0000-0000-000000000000/v2.0"
                        .into(),
                ),
            )),
        ),
        (
            "expired",
            Some(token(&k1, "k1", &with("exp", (now - 7200).into()))),
        ),
        (
            "another application of the tenant",
            Some(token(
                &k1,
                "k1",
                &with("azp", "11111111-2222-3333-4444-555555555555".into()),
            )),
        ),
    ] {
        assert_eq!(post("v2.bin", tok), 401, "{what}");
    }
    assert!(
        read_local(&dst).is_empty(),
        "nothing stored from a refused delivery"
    );
    // good tokens of either issuer: stored and applied
    assert_eq!(post("v2.bin", Some(token(&k1, "k1", &v2))), 200);
    assert_eq!(post("v1.bin", Some(token(&k1, "k1", &v1))), 200);
    wait_for("both delivered blobs copied", 60, || {
        let got = read_local(&dst);
        got.get("v1.bin") == Some(&bytes(5, 31)) && got.get("v2.bin") == Some(&bytes(5, 32))
    });
    assert_eq!(daemon.stop(libc::SIGTERM), Some(0));
}
