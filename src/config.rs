//! The TOML config file (`--config`, default `~/.config/slate/slate.toml` when it exists).
//! Unknown keys are errors naming the key and the line. For `copy` it holds defaults for the
//! copier and the price table of `--estimate`; the daemon's pairs and event sources come later.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

use crate::copy::estimate::Prices;
use crate::core::error::{Result, SlateError};
use crate::core::units::parse_size;

/// The whole config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Defaults for `slate copy` (flags override them).
    #[serde(default)]
    pub copy: CopyConfig,
    /// Prices used by `--estimate`.
    #[serde(default)]
    pub pricing: Prices,
    /// How `slate sync --config` runs.
    #[serde(default)]
    pub daemon: DaemonConfig,
    /// The pairs `slate sync --config` keeps equal, all in one process.
    #[serde(default)]
    pub pairs: Vec<PairConfig>,
    /// The folders `slate mount --config` mounts, all in one process.
    #[serde(default)]
    pub mounts: Vec<MountConfig>,
    /// rclone remotes defined here (`[remotes.NAME]`, rclone's option names): locations
    /// `NAME:path` of every command, each with its own credentials; they win over a remote of
    /// the same name in rclone's config file.
    #[serde(default)]
    pub remotes: Remotes,
}

/// The `[remotes]` tables. Their `Debug` shows names only: values hold keys and secrets.
#[derive(Default, Deserialize)]
#[serde(transparent)]
pub struct Remotes(
    pub std::collections::BTreeMap<String, std::collections::BTreeMap<String, toml::Value>>,
);

impl std::fmt::Debug for Remotes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// One `[[mounts]]` entry: `slate mount`'s flags by their names (a flag given on the command
/// line is the default of every entry).
#[derive(Debug, Default, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct MountConfig {
    pub src: String,
    pub mountpoint: String,
    pub events: Option<String>,
    pub dir_cache_time: Option<String>,
    pub read_only: Option<bool>,
    pub cache_dir: Option<String>,
    #[serde(default, deserialize_with = "de_size")]
    pub cache_max_size: Option<u64>,
    #[serde(default, deserialize_with = "de_size")]
    pub memory_limit: Option<u64>,
    pub write_back: Option<String>,
    pub allow_other: Option<bool>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub umask: Option<String>,
    pub storage_class: Option<String>,
    pub acl: Option<String>,
    pub bwlimit: Option<String>,
    pub listen: Option<String>,
}

/// Settings of the daemon.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    /// The manifest database (default: ~/.local/share/slate/slate.db; `--db` wins).
    pub db: Option<String>,
    /// Full compare and repair of every pair on this schedule, e.g. "24h"; "0" disables.
    pub drift_check_interval: Option<String>,
    /// A canary through every pair on this schedule, e.g. "5m" (default: off).
    pub canary_interval: Option<String>,
    /// The freshness objective: changes at the replica within this long of the source's
    /// write, e.g. "15m" (the default).
    pub freshness_target: Option<String>,
    /// Address of the listener (webhook deliveries), e.g. "127.0.0.1:3030"; `--listen` wins.
    pub listen: Option<String>,
    /// How long dead letters are kept (e.g. "30d", the default): the daemon drops older ones
    /// every hour, so the table cannot grow without bound.
    pub dead_letter_retention: Option<String>,
    /// Host names requests may address the listener by, besides its own address.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Local folders jobs may read and write (none unless listed).
    #[serde(default)]
    pub allow_roots: Vec<String>,
    /// A file holding the webhook intake's token (SLATE_WEBHOOK_TOKEN otherwise).
    pub webhook_token_file: Option<String>,
    /// Pub/Sub push with authentication: the audience its OIDC tokens carry; set, a delivery
    /// without a valid Google-signed token is refused (401).
    pub pubsub_push_audience: Option<String>,
    /// ... and the service account the tokens must be of.
    pub pubsub_push_service_account: Option<String>,
    /// ... and where the signing keys are (default Google's).
    pub pubsub_push_jwks_url: Option<String>,
    /// Event Grid with Microsoft Entra ID authentication: the application (audience) its
    /// tokens carry, and the tenant that issues them.
    pub eventgrid_audience: Option<String>,
    pub eventgrid_tenant: Option<String>,
    /// ... the application that asks for the tokens (default Event Grid's own,
    /// 4962773b-9cdb-44cf-a8bf-237846a00ab7) ...
    pub eventgrid_client_id: Option<String>,
    /// ... and where the signing keys are (default the tenant's).
    pub eventgrid_jwks_url: Option<String>,
}

/// One pair: a source kept equal to a destination.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairConfig {
    /// A name for logs.
    pub name: Option<String>,
    /// Source URL (s3://, az://, gs://, a local path).
    pub src: String,
    /// Destination URL.
    pub dst: String,
    /// Where change events come from: `sqs://QUEUE` for S3, `azqueue://ACCOUNT/QUEUE` or
    /// `webhook` for Azure, `webhook` for GCS; none for local folders.
    pub events: Option<String>,
    /// Only keys matching these globs.
    #[serde(default)]
    pub include: Vec<String>,
    /// Leave out keys matching these globs.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Delete at the destination what the source no longer has (default true).
    pub delete: Option<bool>,
    /// Refuse a reconcile that would delete more than this: a count or "N%" (`--once`).
    pub max_delete: Option<String>,
    /// The daemon's brake on mass deletes: a count, "N%" of the source's objects, or "off"
    /// (default "50%"), within `delete_brake_window` (default "10m").
    pub delete_brake: Option<String>,
    pub delete_brake_window: Option<String>,
    /// Where deletes and overwrites keep what they would remove at the destination (a local
    /// folder, or a prefix of the destination's bucket), as rclone's --backup-dir.
    pub backup_dir: Option<String>,
    /// A local source: follow symlinks that stay inside it (as `--copy-links`; default false:
    /// symlinks are skipped). A link leading outside the folder is skipped all the same.
    pub copy_links: Option<bool>,
    /// Storage class (access tier on Azure) of what this pair writes; overrides `[copy]`.
    pub storage_class: Option<String>,
    /// Canned ACL of what this pair writes (S3, GCS); overrides `[copy]`.
    pub acl: Option<String>,
}

impl PairConfig {
    /// The pair's placement: its own values, else the `[copy]` section's.
    pub fn placement(&self, copy: &CopyConfig) -> crate::core::meta::Placement {
        crate::core::meta::Placement {
            storage_class: self
                .storage_class
                .clone()
                .or_else(|| copy.storage_class.clone()),
            acl: self.acl.clone().or_else(|| copy.acl.clone()),
        }
    }
}

impl Config {
    /// Checks what serde cannot: pair URLs, delete limits, the drift interval. Errors name the
    /// pair (by number and name) and the field.
    pub fn validate(&self, origin: &str) -> Result<()> {
        let bad = |why: String| SlateError::Config {
            path: origin.to_string(),
            why: one_line(&why),
        };
        // the pairs may name the remotes defined beside them
        crate::core::remote::set_config_remotes(origin, self.remote_sections());
        for (name, sec) in self.remote_sections() {
            let ty = sec
                .get("type")
                .ok_or_else(|| bad(format!("remotes.{name}: no type")))?;
            if ty != "alias" {
                crate::core::remote::translate(&name, ty, &sec, origin.to_string())
                    .map_err(|why| bad(format!("remotes.{name}: {why}")))?;
            }
        }
        for (i, p) in self.pairs.iter().enumerate() {
            let which = format!(
                "pairs[{i}]{}",
                p.name
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            );
            crate::core::location::Location::parse(&p.src)
                .map_err(|e| bad(format!("{which}.src: {e}")))?;
            let dst = crate::core::location::Location::parse(&p.dst)
                .map_err(|e| bad(format!("{which}.dst: {e}")))?;
            p.placement(&self.copy)
                .for_store(dst.scheme)
                .map_err(|e| bad(format!("{which}: {e}")))?;
            crate::core::filter::Filter::new(p.include.clone(), p.exclude.clone(), None)
                .map_err(|e| bad(format!("{which}.{}: {e}", e.list)))?;
            if p.delete_brake.is_some() || p.delete_brake_window.is_some() {
                crate::core::brake::BrakePolicy::parse(
                    p.delete_brake.as_deref().unwrap_or("50%"),
                    p.delete_brake_window.as_deref(),
                )
                .map_err(|e| bad(format!("{which}.delete_brake: {e}")))?;
            }
            if let Some(m) = &p.max_delete {
                crate::engine::once::MaxDelete::parse(m)
                    .map_err(|e| bad(format!("{which}.max_delete: {e}")))?;
            }
        }
        if let Some(b) = &self.copy.bwlimit {
            crate::copy::bwlimit::Schedule::parse(b)
                .map_err(|e| bad(format!("copy.bwlimit: {e}")))?;
        }
        if let Some(d) = &self.daemon.dead_letter_retention {
            crate::core::filter::parse_age(d)
                .map_err(|e| bad(format!("daemon.dead_letter_retention: {e}")))?;
        }
        if let Some(d) = &self.daemon.drift_check_interval {
            if d.trim() != "0" {
                crate::core::filter::parse_age(d)
                    .map_err(|e| bad(format!("daemon.drift_check_interval: {e}")))?;
            }
        }
        if let Some(d) = &self.daemon.freshness_target {
            crate::core::filter::parse_age(d)
                .map_err(|e| bad(format!("daemon.freshness_target: {e}")))?;
        }
        if let Some(d) = &self.daemon.canary_interval {
            if !matches!(d.trim(), "0" | "off") {
                crate::core::filter::parse_age(d)
                    .map_err(|e| bad(format!("daemon.canary_interval: {e}")))?;
            }
        }
        Ok(())
    }
}

/// Copier defaults.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CopyConfig {
    /// Objects in flight at once.
    pub transfers: Option<usize>,
    /// Chunks in flight per large object.
    pub streams: Option<usize>,
    /// Chunk and multipart part size, e.g. "64MiB".
    #[serde(default, deserialize_with = "de_size")]
    pub chunk_size: Option<u64>,
    /// Budget for in-memory chunk buffers, e.g. "1GiB".
    #[serde(default, deserialize_with = "de_size")]
    pub memory_limit: Option<u64>,
    /// Storage class (access tier on Azure) of what is written.
    pub storage_class: Option<String>,
    /// Canned ACL of what is written (S3, GCS).
    pub acl: Option<String>,
    /// Bandwidth limit of the reads, all transfers together: `8M`, or a timetable
    /// (`"08:00,10M 19:00,off"`).
    pub bwlimit: Option<String>,
    /// false: every byte passes through slate, never a store-side copy
    /// (`--no-server-side-copy`).
    pub server_side_copy: Option<bool>,
}

fn de_size<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum S {
        N(u64),
        T(String),
    }
    match Option::<S>::deserialize(d)? {
        None => Ok(None),
        Some(S::N(n)) => Ok(Some(n)),
        Some(S::T(t)) => parse_size(&t).map(Some).map_err(serde::de::Error::custom),
    }
}

/// An error's reason on one line: control characters quoted from the file (a newline, an
/// escape sequence in a key or a URL) are shown escaped, so they cannot break the line or
/// drive the terminal.
fn one_line(why: &str) -> String {
    let mut out = String::with_capacity(why.len());
    for c in why.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The default config path, if one exists there.
pub fn default_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    let p = base.join("slate/slate.toml");
    p.exists().then_some(p)
}

/// For the commands without `--config` (`diff`, `cleanup`, `pairs`, `deadletters`): the
/// remotes of the default config file, so that locations and stored pairs naming them
/// resolve as in `sync` and `copy`. A config that does not parse is told, not fatal here.
pub fn load_default_remotes() {
    let Some(path) = default_path() else { return };
    let origin = path.display().to_string();
    match std::fs::read_to_string(&path)
        .map_err(|e| SlateError::Config {
            path: origin.clone(),
            why: e.to_string(),
        })
        .and_then(|text| Config::parse(&text, &origin))
    {
        Ok(c) => crate::core::remote::set_config_remotes(&origin, c.remote_sections()),
        Err(e) => tracing::warn!("its [remotes] are not used: {e}"),
    }
}

impl Config {
    /// The `[remotes.NAME]` tables as rclone's options (booleans and numbers as text).
    pub fn remote_sections(
        &self,
    ) -> std::collections::BTreeMap<String, crate::core::remote::Section> {
        self.remotes
            .0
            .iter()
            .map(|(name, opts)| {
                let sec = opts
                    .iter()
                    .map(|(k, v)| {
                        let text = match v {
                            toml::Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        (k.clone(), text)
                    })
                    .collect();
                (name.clone(), sec)
            })
            .collect()
    }

    /// Parses config text; `origin` names the file in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config> {
        toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1)
                .map(|l| format!("line {l}: "))
                .unwrap_or_default();
            SlateError::Config {
                path: origin.to_string(),
                why: one_line(&format!("{line}{}", e.message().trim())),
            }
        })
    }

    /// Loads `path`, or the default path, or the built-in defaults.
    pub fn load(path: Option<&Path>) -> Result<Config> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => match default_path() {
                Some(p) => p,
                None => return Ok(Config::default()),
            },
        };
        let text = std::fs::read_to_string(&path).map_err(|e| SlateError::Config {
            path: path.display().to_string(),
            why: e.to_string(),
        })?;
        let origin = path.display().to_string();
        let c = Config::parse(&text, &origin).map_err(|e| match e {
            // rclone's `--config` is slate's `--rclone-config`
            SlateError::Config { path, why }
                if crate::core::remote::Config::parse(&text).is_ok()
                    && text
                        .lines()
                        .any(|l| l.trim_start().starts_with("type") && !l.contains('"')) =>
            {
                SlateError::Config {
                    path,
                    why: format!(
                        "{why} (this looks like an rclone config: give it with --rclone-config)"
                    ),
                }
            }
            other => other,
        })?;
        c.validate(&origin)?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_config_parses() {
        let _g = crate::core::remote::TEST_GLOBALS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let text = include_str!("../config.example.toml");
        let c = Config::parse(text, "config.example.toml").unwrap();
        c.validate("config.example.toml").unwrap();
        // the example leaves transfers, streams and chunk_size to the adaptive copier
        assert_eq!(
            (c.copy.transfers, c.copy.streams, c.copy.chunk_size),
            (None, None, None)
        );
        assert_eq!(c.copy.memory_limit, Some(1 << 30));
        assert!(c.pairs.len() >= 2, "the example documents pairs");
        assert!(c.pricing.egress_per_gib.contains_key("s3->s3"));
    }

    #[test]
    fn pairs_are_validated_naming_the_pair_and_field() {
        let _g = crate::core::remote::TEST_GLOBALS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let c = Config::parse(
            "[[pairs]]\nname = \"x\"\nsrc = \"ftp://a\"\ndst = \"/tmp/b\"\n",
            "c.toml",
        )
        .unwrap();
        let e = c.validate("c.toml").unwrap_err().to_string();
        assert!(e.contains("pairs[0] (x).src") && e.contains("ftp"), "{e}");
        let c = Config::parse(
            "[[pairs]]\nsrc = \"/a\"\ndst = \"/b\"\nmax_delete = \"lots\"\n",
            "c.toml",
        )
        .unwrap();
        assert!(c
            .validate("c.toml")
            .unwrap_err()
            .to_string()
            .contains("pairs[0].max_delete"));
        let c = Config::parse(
            "[[pairs]]\nsrc = \"/a\"\ndst = \"/b\"\nexclude = [\"*.tmp\", \"\"]\n",
            "c.toml",
        )
        .unwrap();
        let e = c.validate("c.toml").unwrap_err().to_string();
        assert!(
            e.contains("pairs[0].exclude: pattern '': empty pattern"),
            "{e}"
        );
        let e = Config::parse(
            "[[pairs]]\nsrc = \"/a\"\ndst = \"/b\"\nevnts = \"x\"\n",
            "c.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 4") && e.contains("evnts"), "{e}");
    }

    #[test]
    fn unknown_keys_name_the_key_and_line() {
        let _g = crate::core::remote::TEST_GLOBALS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let e = Config::parse("[copy]\ntransfers = 4\nstreamz = 2\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("x.toml") && e.contains("line 3") && e.contains("streamz"),
            "{e}"
        );
        let e = Config::parse("[copy]\nchunk_size = \"64XB\"\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("64XB"), "{e}");
    }
}
