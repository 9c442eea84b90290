//! rclone remotes as locations: `NAME:bucket/prefix` resolved from rclone's config file
//! (`--rclone-config`, `RCLONE_CONFIG`, `~/.config/rclone/rclone.conf`), with rclone's
//! `RCLONE_CONFIG_NAME_KEY` variables over it. A remote's options become the settings of
//! that one location (its own credentials, endpoint, account), in the names of the
//! environment variables slate reads for a plain URL, so the store code has one set of names.
//!
//! Types served: `s3`, `azureblob`, `google cloud storage`, `local` and `alias`. Another type
//! (crypt, union, drive…), an encrypted config, or an option slate cannot honour is a one-line
//! error naming it; an option is never silently ignored. Option values are never printed:
//! errors name the remote and the option.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::RwLock;

use crate::core::location::Scheme;

/// The rclone config file `--rclone-config` named.
static CONFIG_PATH: RwLock<Option<PathBuf>> = RwLock::new(None);

/// Uses `path` as rclone's config file (`--rclone-config`), over `RCLONE_CONFIG`.
pub fn set_config_path(path: PathBuf) {
    if let Ok(mut p) = CONFIG_PATH.write() {
        *p = Some(path);
    }
}

fn explicit_path() -> Option<PathBuf> {
    CONFIG_PATH.read().ok().and_then(|p| p.clone())
}

/// Remotes of slate's own config file (`[remotes.NAME]`) and that file's path.
static SLATE_REMOTES: RwLock<Option<(String, BTreeMap<String, Section>)>> = RwLock::new(None);

/// Uses the remotes of slate's config file `origin` (`[remotes.NAME]` tables, rclone's
/// option names): they win over rclone's config file's remotes of the same name. The last
/// config loaded is the one in force.
pub fn set_config_remotes(origin: &str, remotes: BTreeMap<String, Section>) {
    if let Ok(mut r) = SLATE_REMOTES.write() {
        *r = Some((origin.to_string(), remotes));
    }
}

/// Held by the unit tests that load a config or resolve a location through the
/// process-wide remotes above: `Config::validate` replaces them, so two such tests at once
/// would see each other's remotes.
#[cfg(test)]
pub(crate) static TEST_GLOBALS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Set by a process that serves the API: locations of jobs may name only the remotes the
/// operator gave explicitly (`--rclone-config`, `[remotes]` of slate's config), never the
/// ones of whoever's rclone.conf or `RCLONE_CONFIG*` variables the process happens to see,
/// and errors do not list remote names.
static EXPLICIT_ONLY: AtomicBool = AtomicBool::new(false);

/// From now on, only explicitly given remotes resolve (see [`EXPLICIT_ONLY`]).
pub fn explicit_only() {
    EXPLICIT_ONLY.store(true, Relaxed);
}

fn implicit_allowed() -> bool {
    // unit tests never read the developer's own rclone config
    !EXPLICIT_ONLY.load(Relaxed) && !cfg!(test)
}

/// A resolved remote: the settings of the locations named through it. Its `Debug` shows
/// option names, never values.
#[derive(Clone, PartialEq, Eq)]
pub struct Remote {
    pub name: String,
    pub scheme: Scheme,
    /// Settings under the names of the environment variables slate reads for a plain URL
    /// (`AWS_ACCESS_KEY_ID`, `AZURE_STORAGE_SAS_URL`, `GOOGLE_BASE_URL`, …).
    vars: BTreeMap<String, String>,
    /// rclone's `env_auth`: the process environment (and each cloud's credential chain)
    /// fills what the remote does not say. Without it the remote's own options are all.
    pub env_auth: bool,
    /// Canned ACL of what is written (S3 `acl`, GCS `object_acl`): a default `--acl`
    /// overrides.
    pub acl: Option<String>,
    /// Storage class or access tier of what is written (`storage_class`, `access_tier`).
    pub storage_class: Option<String>,
    /// Local remotes: `copy_links`.
    pub copy_links: bool,
    /// Where the remote is defined, for messages: the config file, or the environment.
    pub origin: String,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("name", &self.name)
            .field("scheme", &self.scheme)
            .field("settings", &self.vars.keys().collect::<Vec<_>>())
            .field("env_auth", &self.env_auth)
            .field("origin", &self.origin)
            .finish()
    }
}

impl Remote {
    /// The setting named as the environment variable `name`, if the remote gives it.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// The settings whose names start with `prefix` (`AWS_`, `AZURE_`, `GOOGLE_`).
    pub fn vars_with_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.vars
            .iter()
            .filter(move |(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// What makes the store behind this remote a different one from another with the same
    /// bucket name: its endpoint and account (no secret).
    pub fn endpoint_id(&self) -> String {
        let names: &[&str] = match self.scheme {
            Scheme::S3 => &["AWS_ENDPOINT_URL"],
            Scheme::Azure => &[
                "AZURE_STORAGE_ACCOUNT_NAME",
                "AZURE_STORAGE_ENDPOINT",
                "AZURE_STORAGE_USE_EMULATOR",
            ],
            Scheme::Gcs => &["GOOGLE_BASE_URL"],
            Scheme::Local => &[],
        };
        let mut out: Vec<String> = names
            .iter()
            .filter_map(|n| self.var(n).map(|v| format!("{n}={v}")))
            .collect();
        if let Some(sas) = self.var("AZURE_STORAGE_SAS_URL") {
            // the endpoint and account of a SAS URL, without its token
            out.push(sas.split('?').next().unwrap_or("").to_string());
        }
        out.join(" ")
    }
}

/// What a location name resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// A store remote and the path inside it.
    Store(Remote, String),
    /// An alias: the location it stands for, to be parsed in its turn.
    Alias(String),
}

/// A remote's section of the config: option → value.
pub type Section = BTreeMap<String, String>;

/// The parsed config file: its sections and where it was read from. Its `Debug` shows the
/// remotes' names only.
#[derive(Default)]
pub struct Config {
    pub path: Option<PathBuf>,
    sections: BTreeMap<String, Section>,
    /// Where a section came from when not from `path` (slate's config file).
    origins: BTreeMap<String, String>,
}

/// The config file to read: `--rclone-config`, `RCLONE_CONFIG`, then the places rclone
/// looks (`$XDG_CONFIG_HOME/rclone/rclone.conf`, `~/.config/rclone/rclone.conf`,
/// `~/.rclone.conf`): the first that exists.
pub fn config_path() -> Option<PathBuf> {
    if let Some(p) = explicit_path() {
        return Some(p);
    }
    if !implicit_allowed() {
        return None;
    }
    if let Some(p) = std::env::var_os("RCLONE_CONFIG").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".config")));
    [
        xdg.map(|x| x.join("rclone/rclone.conf")),
        home.map(|h| h.join(".rclone.conf")),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.exists())
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("path", &self.path)
            .field("remotes", &self.sections.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Config {
    /// Reads the config file [`config_path`] finds (none: an empty config, the environment's
    /// remotes only).
    pub fn load() -> Result<Config, String> {
        let mut c = Config::load_rclone()?;
        if let Ok(guard) = SLATE_REMOTES.read() {
            if let Some((origin, remotes)) = guard.as_ref() {
                for (name, sec) in remotes {
                    c.sections.insert(name.clone(), sec.clone());
                    c.origins.insert(name.clone(), origin.clone());
                }
            }
        }
        Ok(c)
    }

    fn load_rclone() -> Result<Config, String> {
        let Some(path) = config_path() else {
            return Ok(Config::default());
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            // rclone runs without a config file; a named one that is missing is an error
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && explicit_path().is_none()
                    && std::env::var_os("RCLONE_CONFIG").is_none() =>
            {
                return Ok(Config::default())
            }
            Err(e) => return Err(format!("rclone config {}: {e}", path.display())),
        };
        let mut c = Config::parse(&text)
            .map_err(|why| format!("rclone config {}: {why}", path.display()))?;
        c.path = Some(path);
        Ok(c)
    }

    /// Parses rclone's INI form: `[name]` sections of `key = value` lines, `#` and `;`
    /// comments. An encrypted config is refused (its remotes cannot be read without rclone's
    /// password, which slate does not take).
    pub fn parse(text: &str) -> Result<Config, String> {
        let mut c = Config::default();
        let mut current: Option<String> = None;
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.starts_with("RCLONE_ENCRYPT_V0:") {
                return Err(
                    "is encrypted (rclone config encryption): slate cannot read it; \
                            decrypt it with `rclone config encryption remove`, or give slate a \
                            separate config with --rclone-config"
                        .into(),
                );
            }
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                let name = name.trim().to_string();
                c.sections.entry(name.clone()).or_default();
                current = Some(name);
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                return Err(format!("line {}: neither [section] nor key = value", n + 1));
            };
            let Some(sec) = &current else {
                return Err(format!("line {}: an option before any [remote]", n + 1));
            };
            c.sections
                .entry(sec.clone())
                .or_default()
                .insert(k.trim().to_string(), v.trim().to_string());
        }
        Ok(c)
    }

    /// The names of the remotes defined (file and environment), for messages.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.sections.keys().cloned().collect();
        if !implicit_allowed() {
            return names;
        }
        for (k, _) in std::env::vars() {
            if let Some(rest) = k.strip_prefix("RCLONE_CONFIG_") {
                if let Some(n) = rest.strip_suffix("_TYPE") {
                    names.push(n.to_ascii_lowercase());
                }
            }
        }
        names.sort();
        names.dedup();
        names
    }

    /// The options of remote `name`, in rclone's order of precedence: the config file's
    /// section, then rclone's backend-wide variables (`RCLONE_S3_ACL`, …), then the remote's
    /// own (`RCLONE_CONFIG_NAME_ACL`, which can also define a remote alone). Of the latter,
    /// only the options its type knows are taken: `RCLONE_CONFIG_PROD_EU_TYPE` is remote
    /// `prod_eu`'s, not an option `eu_type` of remote `prod`. `None` when nothing defines it.
    fn section(&self, name: &str) -> Option<(Section, String)> {
        let mut sec = self.sections.get(name).cloned();
        let mut origin = match self.origins.get(name) {
            Some(o) => o.clone(),
            None => self
                .path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        };
        if !implicit_allowed() {
            return sec.map(|s| (s, origin));
        }
        let env_name = format!(
            "RCLONE_CONFIG_{}_",
            name.to_ascii_uppercase().replace('-', "_")
        );
        let Some(ty) = std::env::var(format!("{env_name}TYPE"))
            .ok()
            .or_else(|| sec.as_ref().and_then(|s| s.get("type").cloned()))
        else {
            // a section without a type is refused by `resolve`, naming it
            return sec.map(|s| (s, origin));
        };
        let table = table_of(&ty);
        let known = |key: &str| key == "type" || table.is_some_and(|t| t(key).is_some());
        let from_env: Vec<(String, String)> = std::env::vars()
            .filter_map(|(k, v)| {
                let key = k.strip_prefix(&env_name)?.to_ascii_lowercase();
                known(&key).then_some((key, v))
            })
            .collect();
        if sec.is_none() {
            if from_env.is_empty() {
                return None;
            }
            origin = format!("{env_name}* variables");
        }
        let s = sec.get_or_insert_with(Section::new);
        if let Some(backend) = backend_env(&ty) {
            let prefix = format!("RCLONE_{backend}_");
            for (k, v) in std::env::vars() {
                if let Some(key) = k.strip_prefix(&prefix) {
                    s.insert(key.to_ascii_lowercase(), v);
                }
            }
        }
        for (k, v) in from_env {
            s.insert(k, v);
        }
        sec.map(|s| (s, origin))
    }

    /// Resolves `name` with `path` (what follows `name:`). `Ok(None)`: no such remote.
    pub fn resolve(&self, name: &str, path: &str) -> Result<Option<Resolved>, String> {
        let Some((sec, origin)) = self.section(name) else {
            return Ok(None);
        };
        let where_ = if origin.is_empty() {
            String::new()
        } else {
            format!(" ({origin})")
        };
        let ty = sec
            .get("type")
            .ok_or_else(|| format!("remote '{name}'{where_} has no type"))?;
        if ty == "alias" {
            let target = sec
                .get("remote")
                .ok_or_else(|| format!("alias remote '{name}'{where_} has no 'remote' option"))?;
            let path = path.trim_start_matches('/');
            let joined = match (
                target.ends_with(':') || target.ends_with('/'),
                path.is_empty(),
            ) {
                (_, true) => target.clone(),
                (true, false) => format!("{target}{path}"),
                (false, false) => format!("{target}/{path}"),
            };
            return Ok(Some(Resolved::Alias(joined)));
        }
        let remote = translate(name, ty, &sec, origin)
            .map_err(|why| format!("remote '{name}'{where_}: {why}"))?;
        Ok(Some(Resolved::Store(remote, path.to_string())))
    }
}

/// `~/` and `$VAR`/`${VAR}` in a path, as rclone expands them in file options.
fn expand_path(p: &str) -> String {
    let mut out = match (p.strip_prefix("~/"), std::env::var("HOME")) {
        (Some(rest), Ok(home)) => format!("{home}/{rest}"),
        _ => p.to_string(),
    };
    while let Some(i) = out.find('$') {
        let rest = &out[i + 1..];
        let (name, len) = if let Some(r) = rest.strip_prefix('{') {
            match r.find('}') {
                Some(e) => (&r[..e], e + 2),
                None => break,
            }
        } else {
            let e = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            (&rest[..e], e)
        };
        if name.is_empty() {
            break;
        }
        let value = std::env::var(name).unwrap_or_default();
        out = format!("{}{value}{}", &out[..i], &out[i + 1 + len..]);
    }
    out
}

/// rclone's booleans.
fn truth(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

/// An endpoint as rclone takes it (a host alone means https).
fn endpoint_url(v: &str) -> String {
    let v = v.trim().trim_end_matches('/');
    if v.contains("://") {
        v.to_string()
    } else {
        format!("https://{v}")
    }
}

/// What slate does with one option of a remote.
enum Opt {
    /// Becomes the setting named as this environment variable.
    Var(&'static str),
    /// Handled by [`translate`] itself.
    Special,
    /// Only concerns what slate never does here (creating buckets) or tunes what slate tunes
    /// by itself (chunk sizes, concurrency): accepted, no effect.
    NoEffect,
    /// Accepted at rclone's default value only (`false` or empty): another value asks for a
    /// behaviour slate does not have. The text says which.
    DefaultOnly(&'static str),
    /// Refused whatever its value, with why.
    Refused(&'static str),
}

fn s3_opt(k: &str) -> Option<Opt> {
    use Opt::*;
    Some(match k {
        "access_key_id" => Var("AWS_ACCESS_KEY_ID"),
        "secret_access_key" => Var("AWS_SECRET_ACCESS_KEY"),
        "session_token" => Var("AWS_SESSION_TOKEN"),
        "region" => Special,
        "endpoint" => Special,
        "force_path_style" => Special,
        "server_side_encryption" => Special,
        "sse_kms_key_id" => Var("AWS_SSE_KMS_KEY_ID"),
        "requester_pays" => Special,
        "profile" => Var("AWS_PROFILE"),
        "acl" | "storage_class" | "env_auth" | "type" => Special,
        "provider"
        | "description"
        | "location_constraint"
        | "bucket_acl"
        | "no_check_bucket"
        | "chunk_size"
        | "upload_cutoff"
        | "copy_cutoff"
        | "upload_concurrency"
        | "list_chunk"
        | "list_version"
        | "list_url_encode"
        | "disable_checksum"
        | "memory_pool_flush_time"
        | "memory_pool_use_mmap"
        | "max_upload_parts"
        | "encoding"
        | "leave_parts_on_error"
        | "use_multipart_etag"
        | "might_gzip"
        | "use_already_exists"
        | "use_multipart_uploads"
        | "no_head"
        | "no_head_object" => NoEffect,
        "v2_auth" => DefaultOnly("AWS signature v2 is not served (slate signs v4)"),
        "decompress" => DefaultOnly("slate copies objects as stored, never decompressed"),
        "versions" | "version_at" | "version_deleted" => {
            DefaultOnly("slate reads current objects, not older versions")
        }
        "directory_markers" => DefaultOnly("slate writes no directory markers"),
        "sse_customer_algorithm"
        | "sse_customer_key"
        | "sse_customer_key_base64"
        | "sse_customer_key_md5" => DefaultOnly(
            "SSE-C (customer-provided keys) is not served: use server_side_encryption = \
             AES256 or aws:kms with sse_kms_key_id",
        ),
        "shared_credentials_file" => {
            Refused("set AWS_SHARED_CREDENTIALS_FILE with env_auth = true instead")
        }
        _ => return None,
    })
}

fn azure_opt(k: &str) -> Option<Opt> {
    use Opt::*;
    Some(match k {
        "account" => Var("AZURE_STORAGE_ACCOUNT_NAME"),
        "key" => Var("AZURE_STORAGE_ACCOUNT_KEY"),
        "sas_url" => Var("AZURE_STORAGE_SAS_URL"),
        "tenant" => Var("AZURE_TENANT_ID"),
        "client_id" => Var("AZURE_CLIENT_ID"),
        "client_secret" => Var("AZURE_CLIENT_SECRET"),
        "endpoint" => Special,
        "use_emulator" | "use_msi" | "use_az" => Special,
        "access_tier" | "env_auth" | "type" => Special,
        "description"
        | "chunk_size"
        | "upload_cutoff"
        | "upload_concurrency"
        | "list_chunk"
        | "disable_checksum"
        | "memory_pool_flush_time"
        | "memory_pool_use_mmap"
        | "encoding"
        | "no_check_container"
        | "no_head_object"
        | "public_access" => NoEffect,
        "archive_tier_delete" => {
            DefaultOnly("slate does not delete archived blobs to overwrite them")
        }
        "directory_markers" => DefaultOnly("slate writes no directory markers"),
        "delete_snapshots" => DefaultOnly("slate deletes blobs as Azure's default does"),
        "client_certificate_path"
        | "client_certificate_password"
        | "client_send_certificate_chain"
        | "username"
        | "password"
        | "service_principal_file"
        | "msi_object_id"
        | "msi_client_id"
        | "msi_mi_res_id"
        | "msi_endpoint" => Refused(
            "this way of signing in is not served: use key, sas_url, tenant with client_id and \
             client_secret, use_msi or use_az",
        ),
        _ => return None,
    })
}

fn gcs_opt(k: &str) -> Option<Opt> {
    use Opt::*;
    Some(match k {
        "service_account_file" => Var("GOOGLE_SERVICE_ACCOUNT"),
        "service_account_credentials" => Var("GOOGLE_SERVICE_ACCOUNT_KEY"),
        "endpoint" | "anonymous" => Special,
        "object_acl" | "storage_class" | "bucket_policy_only" | "env_auth" | "type" => Special,
        "description" | "project_number" | "location" | "bucket_acl" | "no_check_bucket"
        | "encoding" | "client_id" | "client_secret" | "auth_url" | "token_url" => NoEffect,
        "decompress" => DefaultOnly("slate copies objects as stored, never decompressed"),
        "directory_markers" => DefaultOnly("slate writes no directory markers"),
        "token" | "access_token" => Refused(
            "rclone's OAuth login token is not served (slate cannot refresh it): use \
             service_account_file, or env_auth = true with `gcloud auth application-default login`",
        ),
        "user_project" => Refused("requester-pays buckets of GCS are not served"),
        _ => return None,
    })
}

fn local_opt(k: &str) -> Option<Opt> {
    use Opt::*;
    Some(match k {
        "copy_links" | "type" => Special,
        "description" | "nounc" | "encoding" | "skip_links" | "no_check_updated" | "no_sparse"
        | "no_preallocate" | "case_sensitive" | "case_insensitive" => NoEffect,
        "links" => DefaultOnly("symlinks are skipped, or followed with copy_links"),
        "one_file_system" => DefaultOnly("slate does not stop at file system boundaries"),
        "no_set_modtime" => DefaultOnly("slate always sets the modification time"),
        "unicode_normalization" => DefaultOnly("slate keeps file names as they are"),
        _ => return None,
    })
}

/// The boolean options that set a variable to `true`: its name, and the option's value that
/// does (`force_path_style = false` asks for virtual-hosted requests).
fn flag_var(scheme: Scheme, k: &str) -> Option<(&'static str, bool)> {
    Some(match (scheme, k) {
        (Scheme::S3, "force_path_style") => ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", false),
        (Scheme::S3, "requester_pays") => ("AWS_REQUEST_PAYER", true),
        (Scheme::Azure, "use_emulator") => ("AZURE_STORAGE_USE_EMULATOR", true),
        (Scheme::Azure, "use_msi") => ("SLATE_USE_INSTANCE_METADATA", true),
        (Scheme::Azure, "use_az") => ("AZURE_USE_AZURE_CLI", true),
        (Scheme::Gcs, "anonymous") => ("GOOGLE_SKIP_SIGNATURE", true),
        _ => return None,
    })
}

/// The option table of type `ty`.
fn table_of(ty: &str) -> Option<fn(&str) -> Option<Opt>> {
    Some(match ty {
        "s3" => s3_opt,
        "azureblob" => azure_opt,
        "google cloud storage" | "gcs" => gcs_opt,
        "local" => local_opt,
        _ => return None,
    })
}

/// The name of type `ty` in rclone's backend-wide variables (`RCLONE_S3_…`).
fn backend_env(ty: &str) -> Option<&'static str> {
    Some(match ty {
        "s3" => "S3",
        "azureblob" => "AZUREBLOB",
        "google cloud storage" | "gcs" => "GCS",
        "local" => "LOCAL",
        _ => return None,
    })
}

/// Turns a remote's options into a [`Remote`]. Every option is either honoured, accepted as
/// having no effect here, or refused with why; unknown ones are refused.
pub fn translate(name: &str, ty: &str, sec: &Section, origin: String) -> Result<Remote, String> {
    let scheme = match ty {
        "s3" => Scheme::S3,
        "azureblob" => Scheme::Azure,
        "google cloud storage" | "gcs" => Scheme::Gcs,
        "local" => Scheme::Local,
        other => {
            return Err(format!(
                "type '{other}' is not served by slate (it serves s3, azureblob, google cloud \
                 storage, local and alias remotes)"
            ))
        }
    };
    let Some(table) = table_of(ty) else {
        return Err(format!("type '{ty}' is not served by slate"));
    };
    let mut r = Remote {
        name: name.to_string(),
        scheme,
        vars: BTreeMap::new(),
        env_auth: false,
        acl: None,
        storage_class: None,
        copy_links: false,
        origin,
    };
    let flag = |k: &str, v: &str| truth(v).ok_or_else(|| format!("{k} is not true or false"));
    let mut gcs_policy_only = false;
    for (k, v) in sec {
        let opt = table(k).ok_or_else(|| {
            format!("option '{k}' is not one slate knows for type {ty}: it cannot be honoured")
        })?;
        match opt {
            Opt::Var(var) => {
                if !v.is_empty() {
                    r.vars.insert(var.into(), v.clone());
                }
            }
            Opt::NoEffect => {}
            Opt::DefaultOnly(why) => {
                if !(v.is_empty() || truth(v) == Some(false)) {
                    return Err(format!("option '{k}' cannot be honoured: {why}"));
                }
            }
            Opt::Refused(why) => {
                if !v.is_empty() {
                    return Err(format!("option '{k}' cannot be honoured: {why}"));
                }
            }
            Opt::Special if flag_var(scheme, k).is_some() => {
                if let Some((var, when)) = flag_var(scheme, k) {
                    if flag(k, v)? == when {
                        r.vars.insert(var.into(), "true".into());
                    }
                }
            }
            Opt::Special => match (scheme, k.as_str()) {
                (_, "type") => {}
                (_, "env_auth") => r.env_auth = flag(k, v)?,
                (Scheme::S3, "region") => {
                    if v.starts_with("other-v2") {
                        return Err(format!(
                            "option 'region' = {v} asks for AWS signature v2, which is not served"
                        ));
                    }
                    if !v.is_empty() {
                        r.vars.insert("AWS_REGION".into(), v.clone());
                    }
                }
                (Scheme::S3, "endpoint") if !v.is_empty() => {
                    r.vars.insert("AWS_ENDPOINT_URL".into(), endpoint_url(v));
                }
                (Scheme::S3, "server_side_encryption") => match v.as_str() {
                    "" => {}
                    "AES256" | "aws:kms" => {
                        r.vars
                            .insert("AWS_SERVER_SIDE_ENCRYPTION".into(), v.clone());
                    }
                    _ => {
                        return Err(
                            "option 'server_side_encryption' is not AES256 or aws:kms".into()
                        )
                    }
                },
                (Scheme::S3, "acl") | (Scheme::Gcs, "object_acl") if !v.is_empty() => {
                    r.acl = Some(v.clone())
                }
                (Scheme::S3 | Scheme::Gcs, "storage_class") | (Scheme::Azure, "access_tier")
                    if !v.is_empty() =>
                {
                    r.storage_class = Some(v.clone())
                }
                (Scheme::Azure, "endpoint") if !v.is_empty() => {
                    r.vars
                        .insert("AZURE_STORAGE_ENDPOINT".into(), endpoint_url(v));
                }
                (Scheme::Gcs, "endpoint") if !v.is_empty() => {
                    // Google's Go client takes it with the JSON API's path; slate adds that
                    let url = endpoint_url(v);
                    let base = url
                        .trim_end_matches('/')
                        .trim_end_matches("/storage/v1")
                        .to_string();
                    r.vars.insert("GOOGLE_BASE_URL".into(), base);
                }
                (Scheme::Gcs, "bucket_policy_only") => gcs_policy_only = flag(k, v)?,
                (Scheme::Local, "copy_links") => r.copy_links = flag(k, v)?,
                _ => {}
            },
        }
    }
    if gcs_policy_only {
        // rclone: with uniform bucket-level access, object ACLs are not sent
        r.acl = None;
    }
    if scheme == Scheme::S3 {
        match (r.var("AWS_ACCESS_KEY_ID"), r.var("AWS_SECRET_ACCESS_KEY")) {
            (Some(_), None) => {
                return Err("has access_key_id but no secret_access_key".into());
            }
            (None, Some(_)) => {
                return Err("has secret_access_key but no access_key_id".into());
            }
            _ => {}
        }
        // the providers that take virtual-hosted requests only, as rclone sets them
        let provider = sec.get("provider").map(String::as_str).unwrap_or("");
        if !sec.contains_key("force_path_style")
            && matches!(provider, "Alibaba" | "Netease" | "TencentCOS" | "Qiniu")
        {
            r.vars
                .insert("AWS_VIRTUAL_HOSTED_STYLE_REQUEST".into(), "true".into());
        }
    }
    for var in ["GOOGLE_SERVICE_ACCOUNT"] {
        if let Some(p) = r.vars.get_mut(var) {
            *p = expand_path(p);
        }
    }
    Ok(r)
}

/// Whether `head` (what precedes the first `:` of a location) can name an rclone remote.
pub fn is_remote_name(head: &str) -> bool {
    !head.is_empty()
        && head
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '+' | '@' | ' '))
        && !head.starts_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(text: &str) -> Config {
        Config::parse(text).unwrap()
    }

    fn store(c: &Config, name: &str, path: &str) -> Result<(Remote, String), String> {
        match c.resolve(name, path)? {
            Some(Resolved::Store(r, p)) => Ok((r, p)),
            other => Err(format!("not a store: {other:?}")),
        }
    }

    const CONF: &str = "\
# rclone config
[aws]
type = s3
provider = Other
access_key_id = AKIAEXAMPLE
secret_access_key = SECRETKEYVALUE
endpoint = http://127.0.0.1:5000
acl = public-read
storage_class = STANDARD_IA
region = eu-west-1
server_side_encryption = aws:kms
sse_kms_key_id = arn:aws:kms:key/1

[azure]
type = azureblob
sas_url = http://127.0.0.1:10000/devstoreaccount1/cont?sv=1&sig=SECRETSIG
access_tier = Cool

[gcs]
type = google cloud storage
endpoint = 127.0.0.1:4443
anonymous = true
object_acl = publicRead
bucket_policy_only = true
storage_class = NEARLINE

[disk]
type = local
copy_links = true

[shortcut]
type = alias
remote = aws:bucket/base

[vault]
type = crypt
remote = aws:bucket/secret
password = OBSCURED
";

    #[test]
    fn resolves_each_type_into_its_settings() {
        let c = conf(CONF);
        let (r, p) = store(&c, "aws", "bucket/p").unwrap();
        assert_eq!((r.scheme, p.as_str()), (Scheme::S3, "bucket/p"));
        assert_eq!(r.var("AWS_ACCESS_KEY_ID"), Some("AKIAEXAMPLE"));
        assert_eq!(r.var("AWS_ENDPOINT_URL"), Some("http://127.0.0.1:5000"));
        assert_eq!(r.var("AWS_REGION"), Some("eu-west-1"));
        assert_eq!(r.var("AWS_SERVER_SIDE_ENCRYPTION"), Some("aws:kms"));
        assert_eq!(r.var("AWS_VIRTUAL_HOSTED_STYLE_REQUEST"), None);
        assert_eq!(r.acl.as_deref(), Some("public-read"));
        assert_eq!(r.storage_class.as_deref(), Some("STANDARD_IA"));
        assert!(!r.env_auth);
        assert_eq!(r.endpoint_id(), "AWS_ENDPOINT_URL=http://127.0.0.1:5000");

        let (r, _) = store(&c, "azure", "cont").unwrap();
        assert_eq!(r.scheme, Scheme::Azure);
        assert!(r.var("AZURE_STORAGE_SAS_URL").is_some());
        assert_eq!(r.storage_class.as_deref(), Some("Cool"));
        assert_eq!(
            r.endpoint_id(),
            "http://127.0.0.1:10000/devstoreaccount1/cont"
        );

        let (r, _) = store(&c, "gcs", "b").unwrap();
        assert_eq!(r.var("GOOGLE_BASE_URL"), Some("https://127.0.0.1:4443"));
        assert_eq!(r.var("GOOGLE_SKIP_SIGNATURE"), Some("true"));
        assert_eq!(
            r.acl, None,
            "bucket_policy_only drops object ACLs, as rclone does"
        );
        assert_eq!(r.storage_class.as_deref(), Some("NEARLINE"));

        let (r, p) = store(&c, "disk", "/data/x").unwrap();
        assert!(r.copy_links && r.scheme == Scheme::Local && p == "/data/x");

        assert_eq!(
            c.resolve("shortcut", "sub/dir").unwrap(),
            Some(Resolved::Alias("aws:bucket/base/sub/dir".into()))
        );
        assert_eq!(c.resolve("nothere", "x").unwrap(), None);
    }

    #[test]
    fn refuses_what_it_cannot_honour_naming_it_and_never_a_value() {
        let c = conf(CONF);
        let e = c.resolve("vault", "x").unwrap_err();
        assert!(e.contains("'vault'") && e.contains("type 'crypt'"), "{e}");
        assert!(!e.contains("OBSCURED"));
        for (text, want) in [
            ("[a]\ntype = s3\nv2_auth = true\n", "v2_auth"),
            ("[a]\ntype = s3\nsse_customer_key = SECRETX\n", "SSE-C"),
            (
                "[a]\ntype = s3\nregion = other-v2-signature\n",
                "signature v2",
            ),
            ("[a]\ntype = s3\nwhatever = SECRETX\n", "'whatever'"),
            (
                "[a]\ntype = s3\nforce_path_style = maybe\n",
                "force_path_style",
            ),
            (
                "[a]\ntype = google cloud storage\ntoken = {\"SECRETX\":1}\n",
                "OAuth",
            ),
            ("[a]\ntype = azureblob\nusername = SECRETX\n", "signing in"),
            ("[a]\ntype = drive\n", "type 'drive'"),
            ("[a]\ntype = local\nlinks = true\n", "symlinks"),
            ("[a]\nprovider = AWS\n", "no type"),
        ] {
            let e = conf(text).resolve("a", "b").unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains("SECRETX"), "{text}: {e}");
        }
        // rclone's defaults of such options are accepted
        assert!(conf("[a]\ntype = s3\nv2_auth = false\nchunk_size = 64Mi\n")
            .resolve("a", "b")
            .is_ok());
    }

    #[test]
    fn an_encrypted_config_is_refused_in_one_line() {
        let e = Config::parse(
            "# Encrypted rclone configuration File\n\nRCLONE_ENCRYPT_V0:\nAbCdEf==\n",
        )
        .unwrap_err();
        assert!(e.contains("encrypted") && !e.contains('\n'), "{e}");
        assert!(Config::parse("key = v\n").unwrap_err().contains("line 1"));
    }

    #[test]
    fn debug_shows_no_secret() {
        let (r, _) = store(&conf(CONF), "aws", "b").unwrap();
        let d = format!("{r:?}");
        assert!(
            !d.contains("SECRETKEYVALUE") && d.contains("AWS_SECRET_ACCESS_KEY"),
            "{d}"
        );
    }

    #[test]
    fn force_path_style_false_asks_for_virtual_hosted_requests() {
        let (r, _) = store(
            &conf("[a]\ntype = s3\nforce_path_style = false\nendpoint = s3.example.com\n"),
            "a",
            "b",
        )
        .unwrap();
        assert_eq!(r.var("AWS_VIRTUAL_HOSTED_STYLE_REQUEST"), Some("true"));
        assert_eq!(r.var("AWS_ENDPOINT_URL"), Some("https://s3.example.com"));
    }

    #[test]
    fn half_keys_providers_and_endpoints_as_rclone_takes_them() {
        let e = conf("[a]\ntype = s3\naccess_key_id = AKIAX\n")
            .resolve("a", "b")
            .unwrap_err();
        assert!(
            e.contains("no secret_access_key") && !e.contains("AKIAX"),
            "{e}"
        );
        let (r, _) = store(&conf("[a]\ntype = s3\nprovider = Alibaba\n"), "a", "b").unwrap();
        assert_eq!(r.var("AWS_VIRTUAL_HOSTED_STYLE_REQUEST"), Some("true"));
        let (r, _) = store(
            &conf("[a]\ntype = s3\nprovider = Alibaba\nforce_path_style = true\n"),
            "a",
            "b",
        )
        .unwrap();
        assert_eq!(r.var("AWS_VIRTUAL_HOSTED_STYLE_REQUEST"), None);
        let (r, _) = store(
            &conf("[g]\ntype = gcs\nendpoint = https://gcs.example.com/storage/v1/\n"),
            "g",
            "b",
        )
        .unwrap();
        assert_eq!(r.var("GOOGLE_BASE_URL"), Some("https://gcs.example.com"));
        // a BOM at the start of the file, as Windows editors write it
        assert!(Config::parse("\u{feff}[a]\ntype = local\n").is_ok());
    }

    #[test]
    fn paths_expand_home_and_variables() {
        let home = std::env::var("HOME").unwrap_or_default();
        assert_eq!(expand_path("~/k.json"), format!("{home}/k.json"));
        assert_eq!(expand_path("${HOME}/k.json"), format!("{home}/k.json"));
        assert_eq!(expand_path("/etc/k.json"), "/etc/k.json");
    }

    #[test]
    fn remote_names() {
        for ok in ["aws", "my-remote", "r2.prod", "a_b"] {
            assert!(is_remote_name(ok), "{ok}");
        }
        for bad in ["", "a/b", "-x", "s3 :"] {
            assert!(!is_remote_name(bad), "{bad}");
        }
    }
}
