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
    /// The most the block cache in --cache-dir holds (fetched blocks of objects, evicted
    /// least recently used). [default: a tenth of the free space there, at most 20 GiB]
    #[arg(long, value_parser = crate::core::units::parse_size, value_name = "SIZE")]
    pub cache_max_size: Option<u64>,
    /// The budget of fetched data in memory at once, whatever the number of open files and
    /// their sizes.
    #[arg(long, default_value = "256MiB", value_parser = crate::core::units::parse_size, value_name = "SIZE")]
    pub memory_limit: u64,
    /// close returns at once and the upload starts this long after the file's last close
    /// (as rclone's --vfs-write-back); such files are kept in --cache-dir's state, so a
    /// mount killed before uploading them uploads them when mounted again.
    #[arg(long, value_parser = crate::core::filter::parse_age, value_name = "DURATION")]
    pub write_back: Option<Duration>,
    /// Storage class of what the mount writes: an S3 class, an Azure access tier or a GCS
    /// class (as `slate copy --storage-class`).
    #[arg(long, value_name = "CLASS")]
    pub storage_class: Option<String>,
    /// Canned ACL of what the mount writes (S3 or GCS; as `slate copy --acl`).
    #[arg(long, value_name = "CANNED")]
    pub acl: Option<String>,
    /// Fetch and upload at most RATE a second together (`8M`, `off`), or a timetable as
    /// rclone's (`"08:00,10M 19:00,off"`).
    #[arg(long, value_name = "RATE|TIMETABLE", value_parser = crate::copy::bwlimit::Schedule::parse)]
    pub bwlimit: Option<crate::copy::bwlimit::Schedule>,
    /// Serve the mount's meters at http://ADDR/metrics (cache hits, bytes fetched and
    /// uploaded, uploads waiting, invalidations); a loopback address such as 127.0.0.1:9431.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
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
    let cache_dir = a.cache_dir.unwrap_or_else(default_cache_dir);
    // the state records paths in it: they must hold from any working folder
    let cache_dir = std::path::absolute(&cache_dir).unwrap_or(cache_dir);
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
            cache_max: a
                .cache_max_size
                .unwrap_or_else(|| crate::mount::cache::default_max(&cache_dir)),
            memory_limit: a.memory_limit,
            write_back: a.write_back,
            storage_class: None,
            bwlimit: a
                .bwlimit
                .map(|s| std::sync::Arc::new(crate::copy::bwlimit::BwLimit::new(s))),
            cache_dir,
        },
        placement: crate::core::meta::Placement {
            storage_class: a.storage_class,
            acl: a.acl,
        },
        allow_other: a.allow_other,
        listen: a.listen,
    };
    match crate::mount::run(spec).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("slate: {e}");
            e.exit_code()
        }
    }
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Only this mounted location's entries (as given to `slate mount`).
    pub src: Option<String>,
    /// The mounts' cache folder. [default: as `slate mount`'s]
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

/// `slate mount-status`: a line per file waiting for its upload, then per dropped message.
pub fn run_status(a: StatusArgs) -> i32 {
    let dir = a.cache_dir.unwrap_or_else(default_cache_dir);
    let src = match a.src.as_deref().map(crate::core::location::Location::parse) {
        Some(Ok(l)) => Some(l.to_string()),
        Some(Err(e)) => {
            eprintln!("slate: {e}");
            return e.exit_code();
        }
        None => None,
    };
    let listed = crate::mount::state::MountState::open(&dir)
        .and_then(|s| Ok((s.pending(src.as_deref())?, s.dropped(src.as_deref())?)));
    let (pending, dropped) = match listed {
        Ok(x) => x,
        Err(why) => {
            eprintln!("slate: --cache-dir: {why}");
            return 2;
        }
    };
    let when = |t: i64| {
        chrono::DateTime::from_timestamp(t, 0)
            .map(|d| d.to_rfc3339())
            .unwrap_or_default()
    };
    println!(
        "{} file(s) waiting for their upload (--write-back)",
        pending.len()
    );
    for p in &pending {
        println!(
            "waiting  {}/{}  {} bytes  closed {}  kept in {}",
            p.src.trim_end_matches('/'),
            p.rel,
            p.size,
            when(p.since),
            p.file.display()
        );
    }
    println!("{} event message(s) dropped", dropped.len());
    for d in &dropped {
        let text: String = d.text.chars().take(200).collect();
        println!(
            "dropped  {}  {}  from {}: {}  text: {}",
            when(d.at),
            d.src,
            d.source,
            d.reason,
            text.replace('\n', " ")
        );
    }
    0
}
