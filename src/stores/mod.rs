//! Builds object_store clients for a [`Location`] from the standard environment variables of
//! each cloud. No config file is needed; nothing secret is ever printed.
//!
//! Missing credentials are detected here, before any request: object_store would otherwise
//! fall back to a cloud metadata endpoint, which hangs or fails far from the cause.
//!
//! `SLATE_FAULTS` (a test hook: `faults.rs`, built only with the cargo feature `faults`, which
//! the tests turn on) wraps every store built here in a `FaultyStore` that fails a share of the
//! requests. A slate built without the feature ignores the variable, with one warning.

pub mod aws;
pub mod azblob;
#[cfg(feature = "faults")]
pub mod faults;
pub mod gcsmeta;
pub mod inventory;
pub mod limit;
pub mod list;
pub mod local;
pub mod pace;
pub mod requests;
pub mod retry;
pub mod s3copy;
pub mod s3tags;
pub mod side;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::list::PaginatedListStore;
use object_store::multipart::MultipartStore;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};

use crate::core::error::{Result, SlateError};
use crate::core::location::{Location, Scheme};
use crate::core::remote::Remote;
#[cfg(feature = "faults")]
use faults::{FaultConfig, FaultyStore};

/// The environment variable of the fault-injecting store (the `faults` feature).
pub const FAULTS_ENV: &str = "SLATE_FAULTS";

/// The environment variables slate reads, with what they do (shown by `--help`).
pub const ENV_HELP: &str = "\
Credentials and endpoints (no config file needed; each cloud's own CLI setup works as is).
Explicit variables win; then, in order:
  S3 and S3-compatibles (MinIO, R2, Ceph, OCI), and SQS, one chain for both:
    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN   static credentials
    ~/.aws/credentials, ~/.aws/config     what `aws configure` writes; AWS_PROFILE picks the
                                          profile (keys, SSO, credential_process, assumed role);
                                          AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE move them
    AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN  web identity (EKS)
    AWS_CONTAINER_CREDENTIALS_RELATIVE_URI     ECS task role
    SLATE_USE_INSTANCE_METADATA=true      EC2 instance role (opt-in)
    AWS_REGION / AWS_DEFAULT_REGION       region (else the profile's, else us-east-1)
    AWS_ENDPOINT_URL                      endpoint of an S3-compatible server
    AWS_ALLOW_HTTP=true                   allow http:// endpoints (implied by an http:// endpoint)
    AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true virtual-hosted style (default: path style)
  Azure Blob (and the Storage Queue of `azqueue://` events):
    AZURE_STORAGE_CONNECTION_STRING       account, key or SAS, and endpoints in one string
    AZURE_STORAGE_ACCOUNT_NAME, AZURE_STORAGE_ACCOUNT_KEY   shared key
    AZURE_STORAGE_SAS_KEY                 SAS token
    AZURE_STORAGE_SAS_URL                 a container (or account) SAS URL: endpoint, account
                                          and token in one (as the portal and
                                          `az storage container generate-sas --as-url` give it)
    AZURE_STORAGE_QUEUE_SAS_URL           the events queue's SAS URL (an account SAS URL in
                                          AZURE_STORAGE_SAS_URL whose ss= has q serves too)
    AZURE_CLIENT_ID, AZURE_CLIENT_SECRET, AZURE_TENANT_ID   service principal
    AZURE_FEDERATED_TOKEN_FILE            workload identity
    AZURE_USE_AZURE_CLI=true              the token of `az login`
    SLATE_USE_INSTANCE_METADATA=true      managed identity (opt-in)
    AZURE_STORAGE_USE_EMULATOR=true       Azurite (AZURITE_BLOB_STORAGE_URL moves it)
  Google Cloud Storage:
    GOOGLE_APPLICATION_CREDENTIALS        service account or user credentials file
    ~/.config/gcloud/application_default_credentials.json   `gcloud auth application-default login`
    GOOGLE_SERVICE_ACCOUNT / GOOGLE_SERVICE_ACCOUNT_KEY   service account file / JSON
    GOOGLE_BASE_URL                       another endpoint
    STORAGE_EMULATOR_HOST                 an emulator (fake-gcs-server), no credentials
    SLATE_USE_INSTANCE_METADATA=true      the GCE service account (opt-in)
";

/// object_store's own retries are off: every request has one retry budget, slate's
/// ([`retry::Retry`]), which also counts failures and tells the adaptive limits of throttling.
fn retry_config() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: 0,
        retry_timeout: Duration::from_secs(60),
    }
}

fn client_options(allow_http: bool) -> ClientOptions {
    // No whole-request timeout: a 64 MiB chunk on a slow link is not an error. A stalled
    // connection is, which the read timeout catches.
    ClientOptions::new()
        .with_allow_http(allow_http)
        .with_timeout_disabled()
        .with_connect_timeout(Duration::from_secs(10))
        .with_read_timeout(Duration::from_secs(60))
        .with_pool_max_idle_per_host(256)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn env_true(name: &str) -> bool {
    env(name).is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

/// What a remote with `env_auth = true` takes from the environment: credentials and where the
/// cloud's chain finds them, nothing that says which store or account.
const ENV_AUTH_VARS: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AZURE_CLIENT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_TENANT_ID",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_USE_AZURE_CLI",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_SERVICE_ACCOUNT",
    "GOOGLE_SERVICE_ACCOUNT_PATH",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "SLATE_USE_INSTANCE_METADATA",
];

/// The settings of one location, by the names of the environment variables slate reads:
/// its rclone remote's first; then, for a plain URL or a remote with `env_auth = true`, the
/// process environment. A remote without `env_auth` is all it says (as in rclone).
pub(crate) struct Vars<'a>(Option<&'a Remote>);

impl<'a> Vars<'a> {
    pub(crate) fn of(loc: &'a Location) -> Vars<'a> {
        Vars(loc.remote.as_deref())
    }

    /// Whether the process environment fills what the location does not say.
    pub(crate) fn uses_env(&self) -> bool {
        self.0.is_none_or(|r| r.env_auth)
    }

    pub(crate) fn get(&self, name: &str) -> Option<String> {
        if let Some(v) = self.0.and_then(|r| r.var(name)) {
            return Some(v.to_string());
        }
        if self.takes_env(name) {
            env(name)
        } else {
            None
        }
    }

    /// Whether `name` may come from the process environment: always for a plain URL; for a
    /// remote with `env_auth = true`, only a credential (as rclone's env_auth: never the
    /// endpoint, account, connection string, SAS URL, emulator or addressing style, which
    /// the remote names), and a session token only when the remote gives no keys of its own.
    fn takes_env(&self, name: &str) -> bool {
        match self.0 {
            None => true,
            Some(r) if !r.env_auth => false,
            Some(r) => match name {
                "AWS_SESSION_TOKEN" => r.var("AWS_ACCESS_KEY_ID").is_none(),
                _ => ENV_AUTH_VARS.contains(&name),
            },
        }
    }

    pub(crate) fn is_true(&self, name: &str) -> bool {
        self.get(name)
            .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
    }

    /// Every setting whose name starts with `prefix`: what object_store's `from_env` reads,
    /// from this location's settings.
    fn with_prefix(&self, prefix: &str) -> Vec<(String, String)> {
        let mut out: BTreeMap<String, String> = BTreeMap::new();
        for (k, v) in std::env::vars() {
            if k.starts_with(prefix) && self.takes_env(&k) {
                out.insert(k, v);
            }
        }
        if let Some(r) = self.0 {
            for (k, v) in r.vars_with_prefix(prefix) {
                out.insert(k.to_string(), v.to_string());
            }
        }
        out.into_iter().collect()
    }

    /// How a message names setting `var`: the variable, or `option` of the remote that gave it.
    fn named(&self, var: &str, option: &str) -> String {
        match self.0 {
            Some(r) if r.var(var).is_some() => format!("{option} of remote '{}'", r.name),
            _ => var.to_string(),
        }
    }

    /// The name of the place the settings come from, for messages.
    fn source(&self) -> String {
        match self.0 {
            Some(r) if r.origin.is_empty() => format!("remote '{}'", r.name),
            Some(r) => format!("remote '{}' of {}", r.name, r.origin),
            None => "the environment".into(),
        }
    }
}

fn missing(loc: &Location, hint: &str) -> SlateError {
    SlateError::MissingCredentials {
        url: loc.to_string(),
        hint: hint.to_string(),
    }
}

fn store_err(loc: &Location, e: object_store::Error) -> SlateError {
    SlateError::Store {
        url: loc.to_string(),
        detail: e.to_string(),
    }
}

/// A store client with the other faces of the same client: its paginated listing (one
/// request per page, with a delimiter if wanted: what walking "folders" without holding a whole
/// level in memory needs) and its multipart API (parts by number, so that one failed part can
/// be sent again).
#[derive(Clone)]
pub struct Stores {
    pub store: Arc<dyn ObjectStore>,
    pub pager: Arc<dyn PaginatedListStore>,
    pub parts: Arc<dyn MultipartStore>,
}

fn all<S: ObjectStore + PaginatedListStore + MultipartStore>(s: S) -> Stores {
    let s = Arc::new(s);
    Stores {
        store: s.clone(),
        pager: s.clone(),
        parts: s,
    }
}

/// The faces of `s`. A slate built without the `faults` feature never fails a request on
/// purpose: `SLATE_FAULTS` only earns one warning.
#[cfg(not(feature = "faults"))]
fn wrap<S: ObjectStore + PaginatedListStore + MultipartStore>(
    _loc: &Location,
    s: S,
    _name: &'static str,
) -> Result<Stores> {
    if std::env::var_os(FAULTS_ENV).is_some_and(|v| !v.is_empty()) {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            tracing::warn!(
                "{FAULTS_ENV} is ignored: this slate was built without the faults feature"
            )
        });
    }
    Ok(all(s))
}

/// The faces of `s`, behind a [`FaultyStore`] when `SLATE_FAULTS` asks for one (a test hook;
/// see `faults.rs`). `name` is object_store's name of the store in its errors.
#[cfg(feature = "faults")]
fn wrap<S: ObjectStore + PaginatedListStore + MultipartStore>(
    loc: &Location,
    s: S,
    name: &'static str,
) -> Result<Stores> {
    let Some(cfg) = FaultConfig::from_env() else {
        return Ok(all(s));
    };
    let cfg = cfg.map_err(|why| SlateError::BadOption {
        option: faults::ENV.into(),
        why,
    })?;
    static ANNOUNCED: std::sync::Once = std::sync::Once::new();
    ANNOUNCED.call_once(|| {
        tracing::warn!(
            "{} is set ({}): failing store requests on purpose, a test hook",
            faults::ENV,
            cfg.describe()
        )
    });
    tracing::debug!(store = %loc, "store requests faulted");
    Ok(all(FaultyStore::new(s, cfg, name)))
}

/// Builds the store client for a cloud location, with the paginated listing and multipart
/// API of the same client. Panics never; local locations are an error (they are served by
/// slate's own file code, not object_store, and so are never faulted either).
pub fn build_paged(loc: &Location) -> Result<Stores> {
    build_with_headers(loc, &http::HeaderMap::new())
}

/// [`build_paged`] with headers sent on every request: a canned ACL (`x-amz-acl`,
/// `x-goog-acl`) for a destination written with `--acl`. Those headers name what a write
/// creates; S3 and GCS ignore them on the reads (HEAD, verify) that a copy's destination
/// client also makes. The client built here writes; the listings of a destination use
/// [`build_paged`]'s.
pub fn build_with_headers(loc: &Location, headers: &http::HeaderMap) -> Result<Stores> {
    match loc.scheme {
        Scheme::S3 => build_s3(loc, headers),
        Scheme::Azure => build_azure(loc, headers),
        Scheme::Gcs => build_gcs(loc, headers),
        Scheme::Local => Err(SlateError::Store {
            url: loc.to_string(),
            detail: "local paths have no object store".into(),
        }),
    }
}

/// How slate reaches S3 for one bucket: the builder plus what it was built from.
pub struct S3Settings {
    pub builder: AmazonS3Builder,
    pub region: String,
    /// Custom endpoint (S3-compatibles), without trailing `/`.
    pub endpoint: Option<String>,
    pub allow_http: bool,
    pub virtual_hosted: bool,
    /// Requests go unsigned (`AWS_SKIP_SIGNATURE`, or a remote without keys or env_auth).
    pub anonymous: bool,
    /// `x-amz-request-payer: requester` on slate's own calls too (a remote's
    /// `requester_pays`; object_store sends it on its own).
    pub requester_pays: bool,
    /// Server-side encryption headers of what is written (a remote's
    /// `server_side_encryption`, `sse_kms_key_id`): object_store sends them on its writes,
    /// slate's own CopyObject calls send them too.
    pub sse: Vec<(&'static str, String)>,
}

/// Reads the S3 settings for `loc`: its remote's, else the environment's.
pub fn s3_settings(loc: &Location) -> Result<S3Settings> {
    let vars = Vars::of(loc);
    let static_keys =
        vars.get("AWS_ACCESS_KEY_ID").is_some() && vars.get("AWS_SECRET_ACCESS_KEY").is_some();
    // a remote without keys and without env_auth reads anonymously, as rclone does
    let anonymous = vars.is_true("AWS_SKIP_SIGNATURE") || (!static_keys && !vars.uses_env());
    if !static_keys && !anonymous && !aws::has_source() {
        return Err(missing(
            loc,
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run `aws configure` (~/.aws/\
             credentials; AWS_PROFILE picks a profile), or AWS_WEB_IDENTITY_TOKEN_FILE; on EC2 \
             set SLATE_USE_INSTANCE_METADATA=true",
        ));
    }
    let region = vars
        .get("AWS_REGION")
        .or_else(|| vars.get("AWS_DEFAULT_REGION"))
        .unwrap_or_else(|| {
            if vars.uses_env() {
                aws::region()
            } else {
                "us-east-1".into()
            }
        });
    let endpoint = vars
        .get("AWS_ENDPOINT_URL_S3")
        .or_else(|| vars.get("AWS_ENDPOINT_URL"))
        .or_else(|| vars.get("AWS_ENDPOINT"))
        .map(|e| e.trim_end_matches('/').to_string());
    let allow_http = vars.is_true("AWS_ALLOW_HTTP")
        || endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("http://"));
    let mut builder = if loc.remote.is_none() {
        AmazonS3Builder::from_env()
    } else {
        let mut b = AmazonS3Builder::new();
        for (k, v) in vars.with_prefix("AWS_") {
            if let Ok(key) = k.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() {
                b = b.with_config(key, v);
            }
        }
        b
    };
    builder = builder
        .with_bucket_name(&loc.bucket)
        .with_region(&region)
        .with_client_options(client_options(allow_http))
        .with_retry(retry_config());
    if let Some(ep) = &endpoint {
        builder = builder.with_endpoint(ep);
    }
    if anonymous {
        builder = builder.with_skip_signature(true);
    } else if !static_keys {
        // explicit keys win; else the AWS CLI's chain (shared files, SSO, roles)
        builder = builder.with_credentials(Arc::new(aws::SdkCredentials::for_profile(
            loc.remote
                .as_ref()
                .and_then(|r| r.var("AWS_PROFILE"))
                .map(str::to_string),
        )));
    }
    Ok(S3Settings {
        builder,
        region,
        endpoint,
        allow_http,
        virtual_hosted: vars.is_true("AWS_VIRTUAL_HOSTED_STYLE_REQUEST"),
        anonymous,
        requester_pays: vars.is_true("AWS_REQUEST_PAYER"),
        sse: [
            (
                "x-amz-server-side-encryption",
                vars.get("AWS_SERVER_SIDE_ENCRYPTION"),
            ),
            (
                "x-amz-server-side-encryption-aws-kms-key-id",
                vars.get("AWS_SSE_KMS_KEY_ID"),
            ),
        ]
        .into_iter()
        .filter_map(|(h, v)| v.map(|v| (h, v)))
        .collect(),
    })
}

/// The HTTP client options slate uses for every store (exposed for direct S3 calls).
pub fn http_options(allow_http: bool) -> ClientOptions {
    client_options(allow_http)
}

fn build_s3(loc: &Location, headers: &http::HeaderMap) -> Result<Stores> {
    let st = s3_settings(loc)?;
    let s3 = st
        .builder
        // keeps S3's `x-amz-tagging-count` for slate (stores/s3tags.rs)
        .with_http_connector(requests::CountingConnector {
            store: Scheme::S3,
            tags: true,
        })
        .with_client_options(client_options(st.allow_http).with_default_headers(headers.clone()))
        .build()
        .map_err(|e| store_err(loc, e))?;
    wrap(loc, s3, "S3")
}

/// The parts of an Azure connection string slate uses. Its `Debug` never shows the key or
/// the SAS.
#[derive(Default, PartialEq)]
pub struct ConnectionString {
    pub account: Option<String>,
    pub key: Option<String>,
    pub sas: Option<String>,
    pub blob_endpoint: Option<String>,
    pub queue_endpoint: Option<String>,
    pub dev_storage: bool,
}

impl std::fmt::Debug for ConnectionString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |v: &Option<String>| v.as_ref().map(|_| "(set)");
        f.debug_struct("ConnectionString")
            .field("account", &self.account)
            .field("key", &hidden(&self.key))
            .field("sas", &hidden(&self.sas))
            .field("blob_endpoint", &self.blob_endpoint)
            .field("queue_endpoint", &self.queue_endpoint)
            .field("dev_storage", &self.dev_storage)
            .finish()
    }
}

impl ConnectionString {
    /// Parses `Key=Value;Key=Value` (values may contain `=`, as keys and SAS tokens do).
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        let mut out = ConnectionString::default();
        for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("segment without '=' (near '{}')", first_word(part)))?;
            match k.to_ascii_lowercase().as_str() {
                "accountname" => out.account = Some(v.to_string()),
                "accountkey" => out.key = Some(v.to_string()),
                "sharedaccesssignature" => out.sas = Some(v.trim_start_matches('?').to_string()),
                "blobendpoint" => out.blob_endpoint = Some(v.trim_end_matches('/').to_string()),
                "queueendpoint" => out.queue_endpoint = Some(v.trim_end_matches('/').to_string()),
                "usedevelopmentstorage" => out.dev_storage = v.eq_ignore_ascii_case("true"),
                _ => {}
            }
        }
        Ok(out)
    }
}

/// An Azure SAS URL: `https://ACCOUNT.blob.core.windows.net/CONTAINER?sv=…&sig=…` (or an
/// account SAS with no container; Azurite: `http://127.0.0.1:10000/ACCOUNT/CONTAINER?…`). Its
/// `Debug` never shows the token.
#[derive(PartialEq)]
pub struct SasUrl {
    /// Scheme, host and (Azurite) account path: what the service's URLs start with.
    pub endpoint: String,
    pub account: String,
    /// The container or queue the SAS names, if it names one.
    pub resource: Option<String>,
    /// The query, without `?`.
    pub token: String,
}

impl std::fmt::Debug for SasUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SasUrl")
            .field("endpoint", &self.endpoint)
            .field("account", &self.account)
            .field("resource", &self.resource)
            .field("token", &"(hidden)")
            .finish()
    }
}

impl SasUrl {
    /// Parses a SAS URL of `service` (`blob`, `queue`). Errors never repeat the token.
    pub fn parse(s: &str, service: &str) -> std::result::Result<SasUrl, String> {
        let u = url::Url::parse(s.trim()).map_err(|e| format!("not a URL ({e})"))?;
        let token = u.query().unwrap_or("").to_string();
        if !token.contains("sig=") {
            return Err("has no SAS token (no 'sig=' in its query)".into());
        }
        let host = u.host_str().ok_or("has no host")?.to_string();
        let origin = match u.port() {
            Some(p) => format!("{}://{host}:{p}", u.scheme()),
            None => format!("{}://{host}", u.scheme()),
        };
        let mut segs: Vec<String> = u
            .path_segments()
            .map(|p| p.filter(|s| !s.is_empty()).map(str::to_string).collect())
            .unwrap_or_default();
        let suffix = format!(".{service}.core.windows.net");
        let (endpoint, account) = if let Some(acct) = host.strip_suffix(&suffix) {
            (origin, acct.to_string())
        } else if host.parse::<std::net::IpAddr>().is_ok() || host == "localhost" {
            // an emulator: the account is the first path segment
            if segs.is_empty() {
                return Err(
                    "names no account (emulator URLs are http://HOST:PORT/ACCOUNT/…)".into(),
                );
            }
            let acct = segs.remove(0);
            (format!("{origin}/{acct}"), acct)
        } else {
            let acct = host.split('.').next().unwrap_or("").to_string();
            (origin, acct)
        };
        if account.is_empty() {
            return Err("names no account".into());
        }
        Ok(SasUrl {
            endpoint,
            account,
            resource: segs.first().cloned(),
            token,
        })
    }
}

/// First few characters of a segment, so an error names the place without leaking a secret.
fn first_word(s: &str) -> String {
    s.chars().take(12).collect()
}

/// The Azure builder for `loc` from the environment (credentials checked), and whether it
/// may speak plain HTTP. Shared by the store client and slate's own signed Blob calls.
pub fn azure_builder(loc: &Location) -> Result<(MicrosoftAzureBuilder, bool)> {
    let vars = Vars::of(loc);
    let mut b = if loc.remote.is_none() {
        MicrosoftAzureBuilder::from_env()
    } else {
        let mut b = MicrosoftAzureBuilder::new();
        for (k, v) in vars.with_prefix("AZURE_") {
            if let Ok(key) = k.to_ascii_lowercase().parse::<AzureConfigKey>() {
                b = b.with_config(key, v);
            }
        }
        b
    }
    .with_container_name(&loc.bucket);
    let mut has_auth = vars.get("AZURE_STORAGE_ACCOUNT_KEY").is_some()
        || vars.get("AZURE_STORAGE_ACCESS_KEY").is_some()
        || vars.get("AZURE_STORAGE_SAS_KEY").is_some()
        || vars.get("AZURE_STORAGE_SAS_TOKEN").is_some()
        || vars.get("AZURE_STORAGE_TOKEN").is_some()
        || (vars.get("AZURE_CLIENT_ID").is_some() && vars.get("AZURE_CLIENT_SECRET").is_some())
        || vars.get("AZURE_FEDERATED_TOKEN_FILE").is_some()
        || vars.is_true("AZURE_USE_AZURE_CLI")
        || vars.is_true("AZURE_SKIP_SIGNATURE")
        || vars.is_true("SLATE_USE_INSTANCE_METADATA");
    let mut emulator = vars.is_true("AZURE_STORAGE_USE_EMULATOR");
    let mut allow_http = vars.is_true("AZURE_ALLOW_HTTP") || emulator;
    if let Some(cs) = vars.get("AZURE_STORAGE_CONNECTION_STRING") {
        let cs = ConnectionString::parse(&cs).map_err(|why| SlateError::Store {
            url: loc.to_string(),
            detail: format!("AZURE_STORAGE_CONNECTION_STRING: {why}"),
        })?;
        if cs.dev_storage {
            emulator = true;
            allow_http = true;
            b = b.with_use_emulator(true);
        }
        if let Some(a) = cs.account {
            b = b.with_account(a);
        }
        if let Some(k) = cs.key {
            b = b.with_access_key(k);
            has_auth = true;
        }
        if let Some(sas) = cs.sas {
            b = b.with_config(AzureConfigKey::SasKey, sas);
            has_auth = true;
        }
        if let Some(ep) = cs.blob_endpoint {
            allow_http |= ep.starts_with("http://");
            b = b.with_endpoint(ep);
        }
    }
    if let Some(url) = vars.get("AZURE_STORAGE_SAS_URL") {
        // a container (or account) SAS URL, as the portal and `az storage container
        // generate-sas` give it: the endpoint, the account and the token in one
        let sas = SasUrl::parse(&url, "blob").map_err(|why| SlateError::Store {
            url: loc.to_string(),
            detail: format!("{}: {why}", vars.named("AZURE_STORAGE_SAS_URL", "sas_url")),
        })?;
        if let Some(c) = &sas.resource {
            if *c != loc.bucket {
                return Err(SlateError::Store {
                    url: loc.to_string(),
                    detail: format!(
                        "{} is for container '{c}', not '{}'",
                        vars.named("AZURE_STORAGE_SAS_URL", "sas_url"),
                        loc.bucket
                    ),
                });
            }
        }
        allow_http |= sas.endpoint.starts_with("http://");
        b = b
            .with_account(&sas.account)
            .with_endpoint(sas.endpoint.clone())
            .with_config(AzureConfigKey::SasKey, sas.token.clone());
        has_auth = true;
    }
    if let Some(ep) = vars.get("AZURE_STORAGE_ENDPOINT") {
        allow_http |= ep.starts_with("http://");
    }
    if !(has_auth || emulator) {
        if !vars.uses_env() {
            return Err(missing(
                loc,
                &format!(
                    "{} names no credentials: give it key, sas_url, tenant with client_id and \
                     client_secret, use_msi, use_az or use_emulator, or env_auth = true",
                    vars.source()
                ),
            ));
        }
        return Err(missing(
            loc,
            "set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME with \
             AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_KEY (Azurite: AZURE_STORAGE_USE_EMULATOR=true)",
        ));
    }
    Ok((b, allow_http))
}

fn build_azure(loc: &Location, headers: &http::HeaderMap) -> Result<Stores> {
    let (b, allow_http) = azure_builder(loc)?;
    let azure = b
        .with_http_connector(requests::CountingConnector::new(Scheme::Azure))
        .with_client_options(client_options(allow_http).with_default_headers(headers.clone()))
        .with_retry(retry_config())
        .build()
        .map_err(|e| store_err(loc, e))?;
    wrap(loc, azure, "MicrosoftAzure")
}

fn build_gcs(loc: &Location, headers: &http::HeaderMap) -> Result<Stores> {
    let (b, allow_http, _) = gcs_builder(loc)?;
    let gcs = b
        .with_http_connector(requests::CountingConnector::new(Scheme::Gcs))
        .with_client_options(client_options(allow_http).with_default_headers(headers.clone()))
        .with_retry(retry_config())
        .build()
        .map_err(|e| store_err(loc, e))?;
    wrap(loc, gcs, "GCS")
}

/// The GCS builder for `loc` from the environment (credentials checked), whether it may
/// speak plain HTTP, and the base URL of its API (`https://storage.googleapis.com`, or the
/// emulator's). Shared by the store client and slate's own JSON API calls.
pub fn gcs_builder(loc: &Location) -> Result<(GoogleCloudStorageBuilder, bool, String)> {
    let vars = Vars::of(loc);
    let mut b = if loc.remote.is_none() {
        GoogleCloudStorageBuilder::from_env()
    } else {
        let mut b = GoogleCloudStorageBuilder::new();
        for (k, v) in vars.with_prefix("GOOGLE_") {
            if let Ok(key) = k.to_ascii_lowercase().parse::<GoogleConfigKey>() {
                b = b.with_config(key, v);
            }
        }
        b
    }
    .with_bucket_name(&loc.bucket);
    let mut base = vars
        .get("GOOGLE_BASE_URL")
        .map(|u| u.trim_end_matches('/').to_string())
        .unwrap_or_else(|| "https://storage.googleapis.com".into());
    let mut allow_http = vars
        .get("GOOGLE_BASE_URL")
        .is_some_and(|u| u.starts_with("http://"));
    let adc_file = std::env::var_os("HOME")
        .map(|h| {
            std::path::Path::new(&h).join(".config/gcloud/application_default_credentials.json")
        })
        .is_some_and(|p| p.exists())
        && vars.uses_env();
    let mut has_auth = vars.get("GOOGLE_SERVICE_ACCOUNT").is_some()
        || vars.get("GOOGLE_SERVICE_ACCOUNT_PATH").is_some()
        || vars.get("GOOGLE_SERVICE_ACCOUNT_KEY").is_some()
        || vars.get("GOOGLE_APPLICATION_CREDENTIALS").is_some()
        || vars.get("GOOGLE_BEARER_TOKEN").is_some()
        || vars.is_true("GOOGLE_SKIP_SIGNATURE")
        || vars.is_true("SLATE_USE_INSTANCE_METADATA")
        || adc_file;
    if let Some(host) = vars.get("STORAGE_EMULATOR_HOST") {
        // The variable Google's own client libraries honour: an emulator, no credentials.
        let url = if host.contains("://") {
            host
        } else {
            format!("http://{host}")
        };
        allow_http |= url.starts_with("http://");
        base = url.trim_end_matches('/').to_string();
        b = b
            .with_base_url(url.trim_end_matches('/'))
            .with_bearer_token("emulator");
        has_auth = true;
    }
    if vars.is_true("GOOGLE_SKIP_SIGNATURE") && vars.get("GOOGLE_BEARER_TOKEN").is_none() {
        // object_store 0.14 signs GCS writes even with skip_signature, asking the metadata
        // server for a token (an address off this machine): a fixed token keeps it from
        // asking. Reads stay unsigned; a write to real GCS is refused as anonymous ones are.
        b = b.with_bearer_token("anonymous");
    }
    if !has_auth && !vars.uses_env() {
        return Err(missing(
            loc,
            &format!(
                "{} names no credentials: give it service_account_file, \
                 service_account_credentials or anonymous = true, or env_auth = true",
                vars.source()
            ),
        ));
    }
    if !has_auth {
        return Err(missing(
            loc,
            "set GOOGLE_APPLICATION_CREDENTIALS (or GOOGLE_SERVICE_ACCOUNT_KEY; an emulator: \
             STORAGE_EMULATOR_HOST; on GCE: SLATE_USE_INSTANCE_METADATA=true)",
        ));
    }
    Ok((b, allow_http, base))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sas_urls() {
        let s = SasUrl::parse(
            "https://acct.blob.core.windows.net/site?sv=2021-12-02&sr=c&sp=rl&sig=SECRET%3D",
            "blob",
        )
        .unwrap();
        assert_eq!(s.endpoint, "https://acct.blob.core.windows.net");
        assert_eq!(s.account, "acct");
        assert_eq!(s.resource.as_deref(), Some("site"));
        assert_eq!(s.token, "sv=2021-12-02&sr=c&sp=rl&sig=SECRET%3D");
        assert!(!format!("{s:?}").contains("SECRET"));
        let s = SasUrl::parse(
            "http://127.0.0.1:10000/devstoreaccount1/c1?sv=1&sig=x",
            "blob",
        )
        .unwrap();
        assert_eq!(s.endpoint, "http://127.0.0.1:10000/devstoreaccount1");
        assert_eq!(
            (s.account.as_str(), s.resource.as_deref()),
            ("devstoreaccount1", Some("c1"))
        );
        let s = SasUrl::parse(
            "https://acct.queue.core.windows.net/?sv=1&ss=bq&sig=x",
            "queue",
        )
        .unwrap();
        assert_eq!((s.account.as_str(), s.resource), ("acct", None));
        for (bad, why) in [
            (
                "https://acct.blob.core.windows.net/c?sv=1&SECRETX",
                "no SAS token",
            ),
            ("not a url", "not a URL"),
            ("http://127.0.0.1:10000/?sv=1&sig=SECRETX", "no account"),
        ] {
            let e = SasUrl::parse(bad, "blob").unwrap_err();
            assert!(e.contains(why) && !e.contains("SECRETX"), "{bad}: {e}");
        }
    }

    #[test]
    fn parses_connection_strings() {
        let cs = ConnectionString::parse(
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=abc==;\
             BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1/;",
        )
        .unwrap();
        assert_eq!(cs.account.as_deref(), Some("devstoreaccount1"));
        assert_eq!(cs.key.as_deref(), Some("abc=="));
        assert_eq!(
            cs.blob_endpoint.as_deref(),
            Some("http://127.0.0.1:10000/devstoreaccount1")
        );
        let cs = ConnectionString::parse("UseDevelopmentStorage=true").unwrap();
        assert!(cs.dev_storage);
        let cs =
            ConnectionString::parse("AccountName=a;SharedAccessSignature=?sv=1&sig=x=").unwrap();
        assert_eq!(cs.sas.as_deref(), Some("sv=1&sig=x="));
        let err =
            ConnectionString::parse("AccountName=a;AccountKeySECRETSECRETSECRET").unwrap_err();
        assert!(
            !err.contains("SECRETSECRETSECRET"),
            "must not echo secrets: {err}"
        );
    }
}
