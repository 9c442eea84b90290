//! `slate mount SRC MOUNTPOINT`: see `mount/` and docs/MOUNT.md.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::core::error::SlateError;
use crate::mount::{fs::FsOpts, MountSpec};

#[derive(Debug, Args)]
pub struct MountArgs {
    /// The location to mount: s3://, az://, gs://BUCKET[/PREFIX], a remote, or a local folder.
    /// Without it, every `[[mounts]]` entry of the config file is mounted.
    pub src: Option<String>,
    /// An existing empty folder to mount it on.
    pub mountpoint: Option<PathBuf>,
    /// Config file: its remotes, and its `[[mounts]]` when no SRC is given (default:
    /// ~/.config/slate/slate.toml when it exists).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Run in the background once mounted (the command returns when every mount shows, or
    /// fails with the mount's error); its log goes to --log-file.
    #[arg(long)]
    pub daemon: bool,
    /// Where --daemon writes its log. [default: mount.log in --cache-dir]
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
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
    /// The budget of data in memory at once, fetched or being uploaded, whatever the number
    /// of open files and their sizes.
    #[arg(long, default_value = "16MiB", value_parser = crate::core::units::parse_size, value_name = "SIZE")]
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

/// Set in the process `--daemon` starts: it serves the mounts itself.
const DAEMON_CHILD: &str = "SLATE_MOUNT_DAEMON_CHILD";

pub async fn run(a: MountArgs) -> i32 {
    let specs = match specs(&a) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("slate: {e}");
            return e.exit_code();
        }
    };
    if a.daemon && std::env::var_os(DAEMON_CHILD).is_none() {
        return daemonize(&a, &specs);
    }
    let results = futures::future::join_all(specs.into_iter().map(crate::mount::run)).await;
    let mut code = 0;
    for r in results {
        if let Err(e) = r {
            eprintln!("slate: {e}");
            if code == 0 {
                code = e.exit_code();
            }
        }
    }
    code
}

/// The mounts asked for: SRC and MOUNTPOINT, or the config's `[[mounts]]` (the flags are
/// each entry's defaults).
fn specs(a: &MountArgs) -> Result<Vec<MountSpec>, SlateError> {
    let need = |option: &str, why: &str| SlateError::BadOption {
        option: option.into(),
        why: why.into(),
    };
    match (&a.src, &a.mountpoint) {
        (Some(src), Some(mp)) => {
            if a.config.is_some() {
                // its remotes
                crate::config::Config::load(a.config.as_deref())?;
            } else {
                crate::config::load_default_remotes();
            }
            Ok(vec![spec_of(a, src, mp, None)?])
        }
        (Some(_), None) => Err(need("MOUNTPOINT", "give the folder to mount SRC on")),
        (None, _) => {
            let origin = a
                .config
                .clone()
                .or_else(crate::config::default_path)
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let cfg = crate::config::Config::load(a.config.as_deref())?;
            if cfg.mounts.is_empty() {
                return Err(need(
                    "SRC",
                    "give SRC and MOUNTPOINT, or [[mounts]] entries in the config file (--config)",
                ));
            }
            cfg.mounts
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    spec_of(
                        a,
                        &m.src,
                        &PathBuf::from(&m.mountpoint),
                        Some((i, m, &origin)),
                    )
                })
                .collect()
        }
    }
}

/// One mount's spec: the flags, and over them a config entry's settings.
fn spec_of(
    a: &MountArgs,
    src: &str,
    mountpoint: &std::path::Path,
    entry: Option<(usize, &crate::config::MountConfig, &String)>,
) -> Result<MountSpec, SlateError> {
    // SAFETY: getuid and getgid cannot fail and touch no memory
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut o = MountOverrides::default();
    if let Some((i, m, origin)) = entry {
        let bad = |field: &str, why: String| SlateError::Config {
            path: origin.to_string(),
            why: format!("mounts[{i}].{field}: {why}"),
        };
        o.dir_ttl = m
            .dir_cache_time
            .as_deref()
            .map(crate::core::filter::parse_age)
            .transpose()
            .map_err(|e| bad("dir_cache_time", e))?;
        o.write_back = m
            .write_back
            .as_deref()
            .map(crate::core::filter::parse_age)
            .transpose()
            .map_err(|e| bad("write_back", e))?;
        o.umask = m
            .umask
            .as_deref()
            .map(parse_umask)
            .transpose()
            .map_err(|e| bad("umask", e))?;
        o.bwlimit = m
            .bwlimit
            .as_deref()
            .map(crate::copy::bwlimit::Schedule::parse)
            .transpose()
            .map_err(|e| bad("bwlimit", e))?;
        crate::core::location::Location::parse(src).map_err(|e| bad("src", e.to_string()))?;
    }
    let m = entry.map(|e| e.1).cloned().unwrap_or_default();
    let cache_dir = m
        .cache_dir
        .map(PathBuf::from)
        .or_else(|| a.cache_dir.clone())
        .unwrap_or_else(default_cache_dir);
    // the state records paths in it: they must hold from any working folder
    let cache_dir = std::path::absolute(&cache_dir).unwrap_or(cache_dir);
    let bwlimit = o.bwlimit.or_else(|| a.bwlimit.clone());
    Ok(MountSpec {
        src: src.to_string(),
        mountpoint: mountpoint.to_path_buf(),
        events: m.events.or_else(|| a.events.clone()),
        opts: FsOpts {
            dir_ttl: o.dir_ttl.unwrap_or(a.dir_cache_time),
            uid: m.uid.or(a.uid).unwrap_or(uid),
            gid: m.gid.or(a.gid).unwrap_or(gid),
            umask: o.umask.unwrap_or(a.umask),
            read_only: m.read_only.unwrap_or(a.read_only),
            scheme: crate::core::location::Scheme::Local,
            cache_max: m
                .cache_max_size
                .or(a.cache_max_size)
                .unwrap_or_else(|| crate::mount::cache::default_max(&cache_dir)),
            memory_limit: m.memory_limit.unwrap_or(a.memory_limit),
            write_back: o.write_back.or(a.write_back),
            storage_class: None,
            bwlimit: bwlimit.map(|s| std::sync::Arc::new(crate::copy::bwlimit::BwLimit::new(s))),
            cache_dir,
        },
        placement: crate::core::meta::Placement {
            storage_class: m.storage_class.or_else(|| a.storage_class.clone()),
            acl: m.acl.or_else(|| a.acl.clone()),
        },
        allow_other: m.allow_other.unwrap_or(a.allow_other),
        listen: m.listen.or_else(|| a.listen.clone()),
    })
}

/// A config entry's settings that need parsing.
#[derive(Default)]
struct MountOverrides {
    dir_ttl: Option<Duration>,
    write_back: Option<Duration>,
    umask: Option<u32>,
    bwlimit: Option<crate::copy::bwlimit::Schedule>,
}

/// Whether `dir` is a mount point now (/proc/mounts).
fn is_mounted(dir: &std::path::Path) -> bool {
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return false;
    };
    let want = dir.to_string_lossy().to_string();
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
}

/// `--daemon`: this command again, detached (its own session, its output to the log), and
/// an answer once every mount shows or the process ended.
fn daemonize(a: &MountArgs, specs: &[MountSpec]) -> i32 {
    use std::os::unix::process::CommandExt;
    let log = a.log_file.clone().unwrap_or_else(|| {
        specs
            .first()
            .map(|s| s.opts.cache_dir.join("mount.log"))
            .unwrap_or_else(|| PathBuf::from("mount.log"))
    });
    let fail = |why: String| {
        eprintln!("slate: --daemon: {why}");
        2
    };
    if let Some(parent) = log.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let file = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
    {
        Ok(f) => f,
        Err(e) => return fail(format!("{}: {e}", log.display())),
    };
    let (out, err) = match (file.try_clone(), file.try_clone()) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => return fail(format!("{}: {e}", log.display())),
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return fail(format!("this program's path: {e}")),
    };
    let args: Vec<std::ffi::OsString> = std::env::args_os()
        .skip(1)
        .filter(|x| x != "--daemon")
        .collect();
    let mut cmd = std::process::Command::new(exe);
    cmd.args(args)
        .env(DAEMON_CHILD, "1")
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err);
    // SAFETY: setsid(2) only, between fork and exec: async-signal-safe, no allocation
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return fail(e.to_string()),
    };
    let until = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(5).collect();
            for l in tail.into_iter().rev() {
                eprintln!("{l}");
            }
            eprintln!(
                "slate: the mount ended ({status}); its log: {}",
                log.display()
            );
            return status.code().filter(|c| *c != 0).unwrap_or(1);
        }
        if specs.iter().all(|s| is_mounted(&s.mountpoint)) {
            eprintln!(
                "slate: mounted in the background (pid {}; log {}; stop with `fusermount3 -u MOUNTPOINT` or kill {})",
                child.id(),
                log.display(),
                child.id()
            );
            return 0;
        }
        if std::time::Instant::now() > until {
            return fail(format!(
                "not mounted after 120 s (pid {} still runs; its log: {})",
                child.id(),
                log.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
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

/// `slate mount-status`: a line per file waiting for its upload, per file lost before its
/// upload, then per dropped message.
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
    let listed = crate::mount::state::MountState::open(&dir).and_then(|s| {
        Ok((
            s.pending(src.as_deref())?,
            s.lost(src.as_deref())?,
            s.dropped(src.as_deref())?,
        ))
    });
    let (pending, lost, dropped) = match listed {
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
    println!(
        "{} file(s) lost before their upload (their kept bytes were gone; not uploaded)",
        lost.len()
    );
    for l in &lost {
        println!(
            "lost     {}/{}  {} bytes  closed {}  found gone {}  was kept in {}",
            l.src.trim_end_matches('/'),
            l.rel,
            l.size,
            when(l.since),
            when(l.at),
            l.file.display()
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
