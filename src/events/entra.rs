//! An Entra ID token for Azure Resource Manager, from the same places the blob client finds
//! its credential, in this order:
//!
//! 1. a service principal's secret: `AZURE_TENANT_ID`, `AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET`;
//! 2. workload identity (AKS, or any federation): `AZURE_TENANT_ID`, `AZURE_CLIENT_ID`,
//!    `AZURE_FEDERATED_TOKEN_FILE`, the file read at each login (it is rotated);
//! 3. managed identity, opted in with `SLATE_USE_INSTANCE_METADATA=true` (as for the blob
//!    client): App Service, Functions and Container Apps through `IDENTITY_ENDPOINT` and
//!    `IDENTITY_HEADER`; else the instance metadata service (`AZURE_MSI_ENDPOINT` moves it); a
//!    user-assigned identity by `AZURE_CLIENT_ID`;
//! 4. `az login`, opted in with `AZURE_USE_AZURE_CLI=true`: `az account get-access-token`.
//!
//! Which one applies is decided from the settings alone ([`Credential::of`], table-tested);
//! [`token`] makes the one request (or runs `az`). What a message may never show (a secret, an
//! assertion, a token, the identity header) is returned with the token, for scrubbing.

use std::time::Duration;

use serde_json::Value;

/// The public cloud's token endpoint.
pub const LOGIN: &str = "https://login.microsoftonline.com";
/// The instance metadata service's token endpoint (only ever asked when opted in).
const IMDS: &str = "http://169.254.169.254/metadata/identity/oauth2/token";

/// Which Entra ID credential the settings name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    Secret {
        tenant: String,
        client: String,
        secret: String,
    },
    Workload {
        tenant: String,
        client: String,
        token_file: String,
    },
    /// App Service style: an endpoint and the header value it checks.
    AppService {
        endpoint: String,
        header: String,
        client: Option<String>,
    },
    /// The instance metadata service, or the endpoint that stands in for it.
    Imds {
        endpoint: String,
        client: Option<String>,
    },
    AzCli {
        tenant: Option<String>,
    },
}

fn truthy(v: Option<String>) -> bool {
    v.is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

impl Credential {
    /// The credential `get` (a setting by its environment variable's name) names, or None.
    pub fn of(get: &dyn Fn(&str) -> Option<String>) -> Option<Credential> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let tenant = get("AZURE_TENANT_ID");
        let client = get("AZURE_CLIENT_ID");
        if let (Some(t), Some(c)) = (&tenant, &client) {
            if let Some(secret) = get("AZURE_CLIENT_SECRET") {
                return Some(Credential::Secret {
                    tenant: t.clone(),
                    client: c.clone(),
                    secret,
                });
            }
            if let Some(token_file) = get("AZURE_FEDERATED_TOKEN_FILE") {
                return Some(Credential::Workload {
                    tenant: t.clone(),
                    client: c.clone(),
                    token_file,
                });
            }
        }
        if truthy(get("SLATE_USE_INSTANCE_METADATA")) {
            if let (Some(endpoint), Some(header)) =
                (get("IDENTITY_ENDPOINT"), get("IDENTITY_HEADER"))
            {
                return Some(Credential::AppService {
                    endpoint,
                    header,
                    client,
                });
            }
            return Some(Credential::Imds {
                endpoint: get("AZURE_MSI_ENDPOINT")
                    .or_else(|| get("MSI_ENDPOINT"))
                    .unwrap_or_else(|| IMDS.into()),
                client,
            });
        }
        if truthy(get("AZURE_USE_AZURE_CLI")) {
            return Some(Credential::AzCli { tenant });
        }
        None
    }

    /// How a message names it.
    pub fn describe(&self) -> &'static str {
        match self {
            Credential::Secret { .. } => "service principal (client secret)",
            Credential::Workload { .. } => "workload identity",
            Credential::AppService { .. } | Credential::Imds { .. } => "managed identity",
            Credential::AzCli { .. } => "`az login`",
        }
    }
}

/// What to set for an Entra ID credential, for messages.
pub const HINT: &str = "no Entra ID credential (AZURE_TENANT_ID and AZURE_CLIENT_ID with \
    AZURE_CLIENT_SECRET or AZURE_FEDERATED_TOKEN_FILE; SLATE_USE_INSTANCE_METADATA=true for a \
    managed identity; AZURE_USE_AZURE_CLI=true for `az login`; a SAS or an account key cannot \
    call Azure Resource Manager)";

/// A token.
pub struct Token {
    pub token: String,
    /// What a message must never show: the token and what obtained it.
    pub secrets: Vec<String>,
}

/// The one-line error of an Entra ID or ARM answer.
pub fn answer_error(status: u16, v: &Value) -> String {
    let (code, message) = match &v["error"] {
        // ARM, App Service: {"error": {"code", "message"}}
        Value::Object(e) => (
            e.get("code").and_then(Value::as_str).unwrap_or_default(),
            e.get("message").and_then(Value::as_str).unwrap_or_default(),
        ),
        // Entra ID, IMDS: {"error": "invalid_client", "error_description": "AADSTS…"}
        Value::String(c) => (
            c.as_str(),
            v["error_description"].as_str().unwrap_or_default(),
        ),
        _ => ("", ""),
    };
    let message = crate::core::error::first_line(message);
    format!("HTTP {status} {code} {message}")
        .trim_end()
        .to_string()
}

/// `text` with each of `secrets` hidden.
pub fn scrub(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .filter(|s| s.len() >= 4)
        .fold(text.to_string(), |t, s| t.replace(s.as_str(), "(hidden)"))
}

fn tenant_ok(tenant: &str) -> Result<(), String> {
    if tenant
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))
    {
        Ok(())
    } else {
        Err("AZURE_TENANT_ID: a tenant id or domain (letters, digits, '-', '.')".into())
    }
}

/// A token for `resource` (`https://management.azure.com`, no trailing slash) by `cred`;
/// `login` is the token endpoint's host (the public cloud's, a sovereign cloud's, a test's).
pub async fn token(
    http: &reqwest::Client,
    cred: &Credential,
    login: &str,
    resource: &str,
) -> Result<Token, String> {
    let scope = format!("{resource}/.default");
    let (what, req, mut secrets) = match cred {
        Credential::Secret {
            tenant,
            client,
            secret,
        } => {
            tenant_ok(tenant)?;
            let form = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("grant_type", "client_credentials")
                .append_pair("client_id", client)
                .append_pair("client_secret", secret)
                .append_pair("scope", &scope)
                .finish();
            let url = format!("{login}/{tenant}/oauth2/v2.0/token");
            (
                format!("Entra ID token from {url}"),
                http.post(&url)
                    .header(
                        reqwest::header::CONTENT_TYPE,
                        "application/x-www-form-urlencoded",
                    )
                    .body(form),
                vec![secret.clone()],
            )
        }
        Credential::Workload {
            tenant,
            client,
            token_file,
        } => {
            tenant_ok(tenant)?;
            // read at each login: the kubelet rotates it
            let assertion = std::fs::read_to_string(token_file)
                .map_err(|e| format!("AZURE_FEDERATED_TOKEN_FILE {token_file}: {e}"))?
                .trim()
                .to_string();
            if assertion.is_empty() {
                return Err(format!("AZURE_FEDERATED_TOKEN_FILE {token_file} is empty"));
            }
            let form = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("grant_type", "client_credentials")
                .append_pair("client_id", client)
                .append_pair(
                    "client_assertion_type",
                    "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                )
                .append_pair("client_assertion", &assertion)
                .append_pair("scope", &scope)
                .finish();
            let url = format!("{login}/{tenant}/oauth2/v2.0/token");
            (
                format!("Entra ID token from {url} (workload identity)"),
                http.post(&url)
                    .header(
                        reqwest::header::CONTENT_TYPE,
                        "application/x-www-form-urlencoded",
                    )
                    .body(form),
                vec![assertion],
            )
        }
        Credential::AppService {
            endpoint,
            header,
            client,
        } => {
            let mut q = vec![("api-version", "2019-08-01"), ("resource", resource)];
            if let Some(c) = client {
                q.push(("client_id", c));
            }
            let mut h = reqwest::header::HeaderValue::from_str(header)
                .map_err(|_| "IDENTITY_HEADER is no header value".to_string())?;
            h.set_sensitive(true);
            (
                format!("managed identity token from {endpoint}"),
                http.get(endpoint).query(&q).header("X-IDENTITY-HEADER", h),
                vec![header.clone()],
            )
        }
        Credential::Imds { endpoint, client } => {
            let mut q = vec![("api-version", "2018-02-01"), ("resource", resource)];
            if let Some(c) = client {
                q.push(("client_id", c));
            }
            (
                format!("managed identity token from {endpoint}"),
                http.get(endpoint).query(&q).header("Metadata", "true"),
                vec![],
            )
        }
        Credential::AzCli { tenant } => return az_cli(tenant.as_deref(), resource).await,
    };
    let resp = req.send().await.map_err(|e| {
        format!(
            "{what}: {}",
            crate::stores::side::one_line(&e.without_url())
        )
    })?;
    let status = resp.status().as_u16();
    let v: Value =
        serde_json::from_str(&resp.text().await.unwrap_or_default()).unwrap_or(Value::Null);
    match v["access_token"].as_str() {
        Some(t) if status == 200 && !t.is_empty() => {
            secrets.push(t.to_string());
            Ok(Token {
                token: t.to_string(),
                secrets,
            })
        }
        _ => Err(scrub(
            &format!("{what}: {}", answer_error(status, &v)),
            &secrets,
        )),
    }
}

/// The token of `az login`, as `az account get-access-token` gives it.
async fn az_cli(tenant: Option<&str>, resource: &str) -> Result<Token, String> {
    let mut cmd = tokio::process::Command::new("az");
    cmd.args([
        "account",
        "get-access-token",
        "--output",
        "json",
        "--resource",
        &format!("{resource}/"),
    ]);
    if let Some(t) = tenant {
        tenant_ok(t)?;
        cmd.args(["--tenant", t]);
    }
    cmd.stdin(std::process::Stdio::null()).kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .map_err(|_| "`az account get-access-token` did not answer within 60 s".to_string())?
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                "AZURE_USE_AZURE_CLI=true but there is no `az` on PATH".to_string()
            }
            _ => format!("`az account get-access-token`: {e}"),
        })?;
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    match v["accessToken"].as_str() {
        Some(t) if out.status.success() && !t.is_empty() => Ok(Token {
            token: t.to_string(),
            secrets: vec![t.to_string()],
        }),
        _ => {
            let err = String::from_utf8_lossy(&out.stderr);
            let line = Some(crate::core::error::first_line(&err))
                .filter(|l| !l.is_empty())
                .unwrap_or_else(|| "no token in its output".into());
            Err(format!(
                "`az account get-access-token` ({}): {line} (run `az login`)",
                out.status
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn of(pairs: &[(&str, &str)]) -> Option<Credential> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Credential::of(&|k| m.get(k).cloned())
    }

    #[test]
    fn the_chain_picks_the_first_credential_named() {
        let secret = Credential::Secret {
            tenant: "t".into(),
            client: "c".into(),
            secret: "s".into(),
        };
        let workload = Credential::Workload {
            tenant: "t".into(),
            client: "c".into(),
            token_file: "/var/run/token".into(),
        };
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<Credential>);
        let cases: Vec<Case> = vec![
            (&[], None),
            (&[("AZURE_CLIENT_SECRET", "s")], None),
            // a secret without a tenant is not a credential
            (
                &[("AZURE_CLIENT_ID", "c"), ("AZURE_CLIENT_SECRET", "s")],
                None,
            ),
            (
                &[
                    ("AZURE_TENANT_ID", "t"),
                    ("AZURE_CLIENT_ID", "c"),
                    ("AZURE_CLIENT_SECRET", "s"),
                ],
                Some(secret.clone()),
            ),
            // the secret wins over the federated token, as in Azure's own chain
            (
                &[
                    ("AZURE_TENANT_ID", "t"),
                    ("AZURE_CLIENT_ID", "c"),
                    ("AZURE_CLIENT_SECRET", "s"),
                    ("AZURE_FEDERATED_TOKEN_FILE", "/var/run/token"),
                ],
                Some(secret),
            ),
            (
                &[
                    ("AZURE_TENANT_ID", "t"),
                    ("AZURE_CLIENT_ID", "c"),
                    ("AZURE_CLIENT_SECRET", " "),
                    ("AZURE_FEDERATED_TOKEN_FILE", "/var/run/token"),
                ],
                Some(workload.clone()),
            ),
            // the metadata service only when opted in
            (
                &[("IDENTITY_ENDPOINT", "http://x"), ("IDENTITY_HEADER", "h")],
                None,
            ),
            (
                &[
                    ("SLATE_USE_INSTANCE_METADATA", "true"),
                    ("IDENTITY_ENDPOINT", "http://x"),
                    ("IDENTITY_HEADER", "h"),
                ],
                Some(Credential::AppService {
                    endpoint: "http://x".into(),
                    header: "h".into(),
                    client: None,
                }),
            ),
            (
                &[
                    ("SLATE_USE_INSTANCE_METADATA", "1"),
                    ("AZURE_CLIENT_ID", "ua"),
                ],
                Some(Credential::Imds {
                    endpoint: IMDS.into(),
                    client: Some("ua".into()),
                }),
            ),
            (
                &[
                    ("SLATE_USE_INSTANCE_METADATA", "yes"),
                    ("AZURE_MSI_ENDPOINT", "http://127.0.0.1:9/token"),
                ],
                Some(Credential::Imds {
                    endpoint: "http://127.0.0.1:9/token".into(),
                    client: None,
                }),
            ),
            (&[("SLATE_USE_INSTANCE_METADATA", "false")], None),
            (
                &[("AZURE_USE_AZURE_CLI", "true"), ("AZURE_TENANT_ID", "t")],
                Some(Credential::AzCli {
                    tenant: Some("t".into()),
                }),
            ),
            // a managed identity named beside `az login` is used first
            (
                &[
                    ("AZURE_USE_AZURE_CLI", "true"),
                    ("SLATE_USE_INSTANCE_METADATA", "true"),
                ],
                Some(Credential::Imds {
                    endpoint: IMDS.into(),
                    client: None,
                }),
            ),
        ];
        for (settings, want) in cases {
            assert_eq!(of(settings), want, "{settings:?}");
        }
    }

    #[test]
    fn errors_are_one_line_without_secrets() {
        let v: Value = serde_json::json!({"error": "invalid_client",
            "error_description": "AADSTS7000215: bad secret s3cret-XYZ\r\nTrace ID: 1"});
        let line = scrub(&answer_error(401, &v), &["s3cret-XYZ".to_string()]);
        assert_eq!(
            line,
            "HTTP 401 invalid_client AADSTS7000215: bad secret (hidden)"
        );
        let v: Value =
            serde_json::json!({"error": {"code": "AuthorizationFailed", "message": "no"}});
        assert_eq!(answer_error(403, &v), "HTTP 403 AuthorizationFailed no");
        assert_eq!(answer_error(500, &Value::Null), "HTTP 500");
    }

    #[test]
    fn a_bad_tenant_is_refused_before_any_request() {
        assert!(tenant_ok("contoso.onmicrosoft.com").is_ok());
        assert!(tenant_ok("0000-11").is_ok());
        assert!(tenant_ok("a/../b").is_err());
        assert!(tenant_ok("a?x=1").is_err());
    }
}
