//! Push deliveries proven by their sender's token: a Pub/Sub push subscription with
//! authentication sends `Authorization: Bearer JWT`, a Google-signed OIDC token (RS256) whose
//! audience is the one configured on the subscription; Event Grid, with Microsoft Entra ID
//! authentication, sends an Entra ID token for the configured application. When an audience is
//! configured, a delivery is stored only with such a token: signed by a key of the configured
//! JWKS (fetched over HTTPS and cached; fetched again for a key id it does not know, at most
//! once a minute), of the right issuer and audience, not expired, and (Pub/Sub) of the
//! configured service account with a verified email. A bad token is answered 401 (the sender
//! does not retry: it will never be good); keys that cannot be fetched are answered 503 (the
//! sender retries), and keys fetched before are kept meanwhile.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;

/// Who may push, and how to check it.
#[derive(Debug, Clone)]
pub struct JwtPolicy {
    /// The `aud` the token must carry.
    pub audience: String,
    /// Issuers accepted (`iss`).
    pub issuers: Vec<String>,
    /// When set, the `email` claim must be this (Pub/Sub's service account), with
    /// `email_verified` true.
    pub email: Option<String>,
    /// When set, the application that asked for the token (`azp` in v2 tokens, `appid` in
    /// v1) must be this one: Event Grid's own, so that no other application of the tenant
    /// that may get a token for the audience can push events.
    pub client: Option<String>,
    /// Where the signing keys are published (a JWKS document).
    pub jwks_url: String,
}

/// The application id of Azure Event Grid's service principal (Microsoft.EventGrid), which asks
/// Entra ID for the tokens of its deliveries.
pub const EVENT_GRID_APP_ID: &str = "4962773b-9cdb-44cf-a8bf-237846a00ab7";

impl JwtPolicy {
    /// Pub/Sub push: Google's issuers and keys.
    pub fn pubsub(audience: String, email: Option<String>, jwks_url: Option<String>) -> Self {
        JwtPolicy {
            audience,
            issuers: vec![
                "https://accounts.google.com".into(),
                "accounts.google.com".into(),
            ],
            email,
            client: None,
            jwks_url: jwks_url
                .unwrap_or_else(|| "https://www.googleapis.com/oauth2/v3/certs".into()),
        }
    }

    /// Event Grid with Entra ID: the tenant's issuers (v1 and v2 tokens) and keys; tokens
    /// asked for by `client` (default Event Grid's own application).
    pub fn eventgrid(
        audience: String,
        tenant: &str,
        client: Option<String>,
        jwks_url: Option<String>,
    ) -> Self {
        JwtPolicy {
            audience,
            issuers: vec![
                format!("https://login.microsoftonline.com/{tenant}/v2.0"),
                format!("https://sts.windows.net/{tenant}/"),
            ],
            email: None,
            client: Some(client.unwrap_or_else(|| EVENT_GRID_APP_ID.to_string())),
            jwks_url: jwks_url.unwrap_or_else(|| {
                format!("https://login.microsoftonline.com/{tenant}/discovery/v2.0/keys")
            }),
        }
    }
}

/// Why a delivery's token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The token is missing or wrong: 401.
    Bad(String),
    /// The keys could not be fetched: 503, the sender retries.
    Unavailable(String),
}

/// One RSA key of a JWKS: modulus and exponent, big-endian.
#[derive(Debug, Clone)]
struct Key {
    n: Vec<u8>,
    e: Vec<u8>,
}

/// The keys of one JWKS URL, fetched when needed.
#[derive(Debug, Default)]
pub struct Keys {
    cache: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    keys: HashMap<String, Key>,
    /// When the document was last asked for, and whether that failed.
    asked: Option<Instant>,
    failed: bool,
}

/// How soon an unknown key id makes the keys be fetched again.
const REFETCH_AFTER: Duration = Duration::from_secs(60);
/// ... and how soon after a fetch that failed: until one succeeds, a token of an unknown key
/// is answered 503 (retried by Event Grid and Pub/Sub), never 401 (which Event Grid does not
/// retry: the delivery would be lost).
const RETRY_FAILED_AFTER: Duration = Duration::from_secs(5);
/// Largest JWKS document read.
const MAX_JWKS: usize = 1 << 20;
/// Clock skew allowed on `exp`/`nbf`/`iat`.
const LEEWAY_SECS: i64 = 60;

fn b64url(s: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .map_err(|_| "not base64url".to_string())
}

/// The keys of a JWKS document (RSA keys with a `kid`; others are left out).
fn parse_jwks(doc: &[u8]) -> Result<HashMap<String, Key>, String> {
    let v: Value = serde_json::from_slice(doc).map_err(|e| format!("JWKS: not JSON: {e}"))?;
    let mut out = HashMap::new();
    for k in v["keys"].as_array().ok_or("JWKS: no keys")? {
        if k["kty"] != "RSA" {
            continue;
        }
        let (Some(kid), Some(n), Some(e)) = (k["kid"].as_str(), k["n"].as_str(), k["e"].as_str())
        else {
            continue;
        };
        if let (Ok(n), Ok(e)) = (b64url(n), b64url(e)) {
            out.insert(kid.to_string(), Key { n, e });
        }
    }
    Ok(out)
}

impl Keys {
    /// The key `kid`, fetching the document when it is not known yet (at most once a minute).
    async fn get(&self, url: &str, kid: &str) -> Result<Key, Refusal> {
        let due = {
            let c = self
                .cache
                .lock()
                .map_err(|_| Refusal::Unavailable("internal: keys lock poisoned".into()))?;
            if let Some(k) = c.keys.get(kid) {
                return Ok(k.clone());
            }
            let wait = if c.failed {
                RETRY_FAILED_AFTER
            } else {
                REFETCH_AFTER
            };
            match c.asked {
                Some(t) if t.elapsed() < wait && c.failed => {
                    return Err(Refusal::Unavailable(format!(
                        "no signing key '{kid}' and the keys could not be fetched; try again"
                    )))
                }
                Some(t) => t.elapsed() >= wait,
                None => true,
            }
        };
        if !due {
            return Err(Refusal::Bad(format!("no signing key '{kid}'")));
        }
        let fetched = fetch(url).await;
        let mut c = self
            .cache
            .lock()
            .map_err(|_| Refusal::Unavailable("internal: keys lock poisoned".into()))?;
        c.asked = Some(Instant::now());
        c.failed = fetched.is_err();
        match fetched {
            Ok(keys) => c.keys = keys,
            // the keys fetched before stay (a passing outage of the key server); this token's
            // key may be a new one: 503, so the sender tries again
            Err(e) => {
                tracing::warn!(error = %e, "fetching the push tokens' signing keys failed; the ones fetched before stay");
                return Err(Refusal::Unavailable(e));
            }
        }
        c.keys
            .get(kid)
            .cloned()
            .ok_or_else(|| Refusal::Bad(format!("no signing key '{kid}'")))
    }
}

async fn fetch(url: &str) -> Result<HashMap<String, Key>, String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())?;
    let mut resp = client.get(url).send().await.map_err(|e| {
        format!(
            "JWKS {url}: {}",
            crate::stores::side::one_line(&e.without_url())
        )
    })?;
    if !resp.status().is_success() {
        return Err(format!("JWKS {url}: HTTP {}", resp.status()));
    }
    let mut body = Vec::new();
    while let Some(piece) = resp.chunk().await.map_err(|e| {
        format!(
            "JWKS {url}: {}",
            crate::stores::side::one_line(&e.without_url())
        )
    })? {
        if body.len() + piece.len() > MAX_JWKS {
            return Err(format!("JWKS {url}: over {MAX_JWKS} bytes"));
        }
        body.extend_from_slice(&piece);
    }
    parse_jwks(&body)
}

/// The token of an `Authorization: Bearer …` header.
pub fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

/// Checks a token's claims against `policy` at `now` (unix seconds): pure.
pub fn check_claims(claims: &Value, policy: &JwtPolicy, now: i64) -> Result<(), String> {
    let aud_ok = match &claims["aud"] {
        Value::String(a) => *a == policy.audience,
        Value::Array(a) => a
            .iter()
            .any(|x| x.as_str() == Some(policy.audience.as_str())),
        _ => false,
    };
    if !aud_ok {
        return Err("the token's audience is not this endpoint's".into());
    }
    let iss = claims["iss"].as_str().unwrap_or("");
    if !policy.issuers.iter().any(|i| i == iss) {
        return Err("the token's issuer is not accepted".into());
    }
    let exp = claims["exp"].as_i64().ok_or("the token has no expiry")?;
    if exp + LEEWAY_SECS < now {
        return Err("the token has expired".into());
    }
    if claims["nbf"]
        .as_i64()
        .is_some_and(|nbf| nbf - LEEWAY_SECS > now)
        || claims["iat"]
            .as_i64()
            .is_some_and(|iat| iat - LEEWAY_SECS > now)
    {
        return Err("the token is not valid yet".into());
    }
    if let Some(want) = &policy.client {
        let by = claims["azp"].as_str().or(claims["appid"].as_str());
        if by != Some(want.as_str()) {
            return Err("the token was not asked for by the configured application".into());
        }
    }
    if let Some(want) = &policy.email {
        if claims["email"].as_str() != Some(want.as_str()) {
            return Err("the token is not the configured service account's".into());
        }
        if claims["email_verified"] != Value::Bool(true) {
            return Err("the token's email is not verified".into());
        }
    }
    Ok(())
}

/// Verifies `token` under `policy` with `keys`.
pub async fn verify(token: Option<&str>, policy: &JwtPolicy, keys: &Keys) -> Result<(), Refusal> {
    let bad = |why: &str| Refusal::Bad(why.to_string());
    let token = token.ok_or_else(|| bad("a bearer token is required"))?;
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("not a JWT"));
    };
    let header: Value = serde_json::from_slice(&b64url(h).map_err(|e| bad(&e))?)
        .map_err(|_| bad("the token's header is not JSON"))?;
    // RS256 only: `none` and HMAC (keyed with the public key) are refused
    if header["alg"] != "RS256" {
        return Err(bad("the token is not signed with RS256"));
    }
    let kid = header["kid"]
        .as_str()
        .ok_or_else(|| bad("the token names no key"))?;
    let key = keys.get(&policy.jwks_url, kid).await?;
    let sig = b64url(s).map_err(|e| bad(&e))?;
    let signed = &token[..h.len() + 1 + p.len()];
    ring::signature::RsaPublicKeyComponents {
        n: &key.n,
        e: &key.e,
    }
    .verify(
        &ring::signature::RSA_PKCS1_2048_8192_SHA256,
        signed.as_bytes(),
        &sig,
    )
    .map_err(|_| bad("the token's signature does not verify"))?;
    let claims: Value = serde_json::from_slice(&b64url(p).map_err(|e| bad(&e))?)
        .map_err(|_| bad("the token's claims are not JSON"))?;
    let now = crate::core::metrics::unix_ms() as i64 / 1000;
    check_claims(&claims, policy, now).map_err(|e| bad(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_checked_from_a_table() {
        let p = JwtPolicy::pubsub(
            "https://slate.example/events/pubsub".into(),
            Some("push@p.iam.gserviceaccount.com".into()),
            None,
        );
        let now = 1_800_000_000;
        let good = serde_json::json!({"aud": "https://slate.example/events/pubsub",
            "iss": "https://accounts.google.com", "exp": now + 600, "iat": now - 10,
            "email": "push@p.iam.gserviceaccount.com", "email_verified": true});
        assert_eq!(check_claims(&good, &p, now), Ok(()));
        // (field, value, accepted)
        let cases: Vec<(&str, Value, bool)> = vec![
            ("aud", "https://other/".into(), false),
            (
                "aud",
                serde_json::json!(["x", "https://slate.example/events/pubsub"]),
                true,
            ),
            ("iss", "https://evil.example".into(), false),
            ("iss", "accounts.google.com".into(), true),
            ("exp", (now - 3600).into(), false),
            ("exp", (now - 30).into(), true), // within the leeway
            ("exp", Value::Null, false),
            ("iat", (now + 3600).into(), false),
            ("email", "someone@else".into(), false),
            ("email_verified", false.into(), false),
            ("email_verified", "true".into(), false),
        ];
        for (field, value, ok) in cases {
            let mut c = good.clone();
            c[field] = value.clone();
            assert_eq!(check_claims(&c, &p, now).is_ok(), ok, "{field} = {value}");
        }
        let eg = JwtPolicy::eventgrid("api://slate".into(), "tenant-1", None, None);
        let entra = serde_json::json!({"aud": "api://slate", "azp": EVENT_GRID_APP_ID,
            "iss": "https://login.microsoftonline.com/tenant-1/v2.0", "exp": now + 60});
        assert_eq!(check_claims(&entra, &eg, now), Ok(()));
        let v1 = serde_json::json!({"aud": "api://slate", "appid": EVENT_GRID_APP_ID,
            "iss": "https://sts.windows.net/tenant-1/", "exp": now + 60});
        assert_eq!(check_claims(&v1, &eg, now), Ok(()));
        let other_tenant = serde_json::json!({"aud": "api://slate", "azp": EVENT_GRID_APP_ID,
            "iss": "https://login.microsoftonline.com/tenant-2/v2.0", "exp": now + 60});
        assert!(check_claims(&other_tenant, &eg, now).is_err());
        // another application of the tenant, or none named
        for by in [
            serde_json::json!("11111111-2222-3333-4444-555555555555"),
            Value::Null,
        ] {
            let mut c = entra.clone();
            c["azp"] = by;
            assert!(check_claims(&c, &eg, now).is_err(), "{c}");
        }
    }

    #[tokio::test]
    async fn tokens_that_are_no_rs256_jwt_are_refused_before_any_key_is_fetched() {
        let p = JwtPolicy::pubsub("a".into(), None, Some("http://127.0.0.1:9/unused".into()));
        let keys = Keys::default();
        let none = format!(
            "{}.{}.",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"aud":"a"}"#)
        );
        let hs = format!(
            "{}.e30.c2ln",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","kid":"k"}"#)
        );
        for t in [
            None,
            Some("x"),
            Some("a.b"),
            Some(none.as_str()),
            Some(hs.as_str()),
        ] {
            assert!(
                matches!(verify(t, &p, &keys).await, Err(Refusal::Bad(_))),
                "{t:?}"
            );
        }
        // a well-formed RS256 token whose keys cannot be fetched: the sender should retry
        let rs = format!(
            "{}.e30.c2ln",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"alg":"RS256","kid":"k"}"#)
        );
        assert!(matches!(
            verify(Some(&rs), &p, &keys).await,
            Err(Refusal::Unavailable(_))
        ));
        // and so is every delivery after it until a fetch succeeds: never a 401 that Event
        // Grid would not retry
        for _ in 0..3 {
            assert!(matches!(
                verify(Some(&rs), &p, &keys).await,
                Err(Refusal::Unavailable(_))
            ));
        }
    }

    /// After a fetch that worked, a key id the document does not have is refused (401) until
    /// the document may be fetched again.
    #[tokio::test]
    async fn an_unknown_key_after_a_good_fetch_is_refused() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/keys", l.local_addr().unwrap());
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((mut s, _)) = l.accept().await {
                let mut buf = [0u8; 2048];
                let _ = s.read(&mut buf).await;
                let doc = r#"{"keys":[{"kty":"RSA","kid":"k1","n":"AQAB","e":"AQAB"}]}"#;
                let _ = s
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{doc}",
                            doc.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            }
        });
        let keys = Keys::default();
        assert!(keys.get(&url, "k1").await.is_ok());
        assert!(matches!(keys.get(&url, "k9").await, Err(Refusal::Bad(_))));
    }
}
