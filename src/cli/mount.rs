//! `slate mount SRC MOUNTPOINT`: see `mount/` and docs/MOUNT.md.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::mount::{fs::FsOpts, MountSpec};

#[derive(Debug, Args)]
pub struct MountArgs {
    /// The location to mount: s3://, az://, gs://BUCKET[/PREFIX], a remote, or a local folder.
    pub src: String,
    /// An existing empty folder to mount it on.
    pub mountpoint: PathBuf,
    /// The mount's own queue or subscription of the source's change events (sqs://,
    /// azqueue://, pubsub://; not the daemon's: a queue hands each message to one consumer).
    /// A change shows in the mount as its event arrives.
    #[arg(long, value_name = "URL")]
    pub events: Option<String>,
    /// How long a folder's listing is kept (as rclone's): events invalidate it sooner.
    #[arg(long, default_value = "5m", value_parser = crate::core::filter::parse_age, value_name = "DURATION")]
    pub dir_cache_time: Duration,
    /// Refuse writes (EROFS).
    #[arg(long)]
    pub read_only: bool,
    /// Where files open for writing are kept until `close` has uploaded them.
    /// [default: $XDG_CACHE_HOME/slate/mount, else ~/.cache/slate/mount]
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Let other users reach the mount (needs `user_allow_other` in /etc/fuse.conf unless root).
    #[arg(long)]
    pub allow_other: bool,
    /// The owner files show (default: the mounting user).
    #[arg(long)]
    pub uid: Option<u32>,
    /// The group files show (default: the mounting user's).
    #[arg(long)]
    pub gid: Option<u32>,
    /// Permission bits taken from files (0666) and folders (0777), in octal.
    #[arg(long, default_value = "022", value_parser = parse_umask)]
    pub umask: u32,
}

/// `$XDG_CACHE_HOME/slate/mount`, else `~/.cache/slate/mount`, else the temporary folder's.
fn default_cache_dir() -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env("XDG_CACHE_HOME")
        .or_else(|| env("HOME").map(|h| h.join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("slate")
        .join("mount")
}

fn parse_umask(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("'{s}': an octal mask such as 022"))
}

pub async fn run(a: MountArgs) -> i32 {
    // SAFETY: getuid and getgid cannot fail and touch no memory
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let spec = MountSpec {
        src: a.src,
        mountpoint: a.mountpoint,
        events: a.events,
        opts: FsOpts {
            dir_ttl: a.dir_cache_time,
            uid: a.uid.unwrap_or(uid),
            gid: a.gid.unwrap_or(gid),
            umask: a.umask,
            read_only: a.read_only,
            scheme: crate::core::location::Scheme::Local,
            cache_dir: a.cache_dir.unwrap_or_else(default_cache_dir),
        },
        allow_other: a.allow_other,
    };
    match crate::mount::run(spec).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("slate: {e}");
            e.exit_code()
        }
    }
}
