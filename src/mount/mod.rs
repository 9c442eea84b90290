//! `slate mount SRC MOUNTPOINT`: a store location as a folder, over FUSE (the fuser crate,
//! mounting through `fusermount3`). The file system (`fs.rs`) is independent of the binding
//! (`fuse.rs`); change events (`--events`, the daemon's transports) invalidate the mount's
//! and the kernel's entries as they arrive, and each message is acknowledged once its
//! invalidations are applied. See docs/MOUNT.md for what it does and does not do.

pub mod cache;
pub mod fs;
pub mod fuse;
pub mod metrics;
pub mod state;
pub mod stream;
pub mod write;
pub mod writeback;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::core::error::{Result, SlateError};
use crate::core::location::{Location, Scheme};
use crate::events::route::Scope;
use crate::events::source::Source;
use crate::events::Parsed;

/// What a mount is asked for.
#[derive(Debug, Clone)]
pub struct MountSpec {
    pub src: String,
    pub mountpoint: PathBuf,
    pub events: Option<String>,
    pub opts: fs::FsOpts,
    pub allow_other: bool,
    /// `--storage-class` and `--acl` of what the mount writes (as the copier's).
    pub placement: crate::core::meta::Placement,
    /// `--listen`: where `/metrics` is served (loopback only).
    pub listen: Option<String>,
}

/// The store of `loc`: object_store's client of a cloud location (every write carrying the
/// canned ACL of `placement`, as the copier's), or its local file system over a folder.
fn store_of(
    loc: &Location,
    placement: &crate::core::meta::Placement,
) -> Result<(Arc<dyn object_store::ObjectStore>, String)> {
    match loc.scheme {
        Scheme::Local => {
            let fs = object_store::local::LocalFileSystem::new_with_prefix(&loc.prefix).map_err(
                |e| SlateError::Store {
                    url: loc.to_string(),
                    detail: e.to_string(),
                },
            )?;
            Ok((Arc::new(fs), String::new()))
        }
        _ => {
            let mut h = http::HeaderMap::new();
            if let Some(acl) = &placement.acl {
                let name = match loc.scheme {
                    Scheme::Gcs => "x-goog-acl",
                    _ => "x-amz-acl",
                };
                if let Ok(v) = http::HeaderValue::from_str(acl) {
                    h.insert(name, v);
                }
            }
            Ok((
                crate::stores::build_with_headers(loc, &h)?.store,
                loc.prefix.clone(),
            ))
        }
    }
}

/// Applies the changes `source` delivers to the mount: each key's entry and its folders are
/// invalidated in the mount and in the kernel, then the message is acknowledged. Messages
/// that name no change of this location are acknowledged and counted; malformed ones are
/// logged (WARN, with the reason) and acknowledged: a mount keeps no dead letters.
async fn follow<S: Source>(
    mut source: S,
    fs: Arc<fs::Fs>,
    notifier: fuser::Notifier,
    scope: Scope,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(200);
    loop {
        let batch = tokio::select! {
            b = source.next_batch() => b,
            _ = stop.wait_for(|v| *v) => return,
        };
        let batch = match batch {
            Ok(b) => {
                backoff = Duration::from_millis(200);
                b
            }
            Err(e) => {
                tracing::warn!(events = %source.spec(), error = %e, "mount: receiving events failed; trying again");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.wait_for(|v| *v) => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
                continue;
            }
        };
        let mut acks = Vec::with_capacity(batch.len());
        for m in batch {
            let mut keys = Vec::new();
            collect(&m.parsed, &scope, &mut keys);
            if let Err(why) = &m.parsed {
                tracing::warn!(events = %source.spec(), reason = %why, "mount: a message that names no change was dropped (`slate mount-status` lists it)");
                fs.keep_dropped(source.spec(), why, m.decoded.as_deref().unwrap_or(&m.raw));
            }
            if let Ok(Parsed::Batch(items)) = &m.parsed {
                // the good events of the message are applied; its malformed ones are kept
                for i in items {
                    if let Parsed::Invalid(why) = i {
                        tracing::warn!(events = %source.spec(), reason = %why, "mount: a malformed event of a message was dropped (`slate mount-status` lists it)");
                        fs.keep_dropped(source.spec(), why, m.decoded.as_deref().unwrap_or(&m.raw));
                    }
                }
            }
            for rel in keys {
                invalidate(&fs, &notifier, &rel).await;
            }
            acks.push(m.ack);
        }
        let failed = source.ack(acks).await;
        if failed > 0 {
            tracing::warn!(events = %source.spec(), failed, "mount: acknowledgements failed: those messages come again");
        }
    }
}

/// Forgets `rel` in the mount and in the kernel (its entry, its inode's pages, and the
/// listings of the folders above it).
async fn invalidate(fs: &fs::Fs, notifier: &fuser::Notifier, rel: &str) {
    let gone = fs.invalidate(rel);
    // the kernel's side blocks while it holds the folder's lock for a lookup that this
    // process answers: never on a runtime worker, which that answer needs
    let n = notifier.clone();
    let done = tokio::task::spawn_blocking(move || {
        for (parent, name, ino) in gone {
            // ENOENT: the kernel never looked it up; nothing to drop
            let _ = n.inval_entry(fuser::INodeNo(parent), std::ffi::OsStr::new(&name));
            if let Some(ino) = ino {
                let _ = n.inval_inode(fuser::INodeNo(ino), 0, 0);
            }
        }
    })
    .await;
    if let Err(e) = done {
        tracing::warn!(key = %rel, error = %e, "mount: invalidating the kernel's entry failed");
    }
    tracing::debug!(key = %rel, "mount: invalidated");
    fs.invalidations
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// A local folder's changes, by inotify (as the daemon follows a local source): each key
/// touched is invalidated; when the kernel dropped events, every listing is read again.
async fn follow_local(
    root: PathBuf,
    fs: Arc<fs::Fs>,
    notifier: fuser::Notifier,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>> {
    use crate::events::watch;
    let (tx, mut rx) = tokio::sync::mpsc::channel(watch::CHANNEL);
    let r = root.clone();
    // a recursive watch walks the whole tree: off the runtime's workers
    let handle =
        tokio::task::spawn_blocking(move || watch::watch(r, Duration::from_millis(50), tx))
            .await
            .map_err(|e| SlateError::Store {
                url: root.display().to_string(),
                detail: e.to_string(),
            })??;
    Ok(tokio::spawn(async move {
        let _keep = handle;
        loop {
            let batch = tokio::select! {
                b = rx.recv() => b,
                _ = stop.wait_for(|v| *v) => return,
            };
            let Some(batch) = batch else { return };
            if !batch.rescan.is_empty() {
                tracing::warn!(root = %root.display(), "mount: file events were lost: every folder is listed again");
                fs.forget_all_listings();
            }
            for rel in batch.keys {
                invalidate(&fs, &notifier, &rel).await;
            }
        }
    }))
}

/// The keys (relative to the mount) `parsed` changes; a folder event names its folder.
fn collect(parsed: &std::result::Result<Parsed, String>, scope: &Scope, out: &mut Vec<String>) {
    let Ok(p) = parsed else { return };
    match p {
        Parsed::Events(evs) => {
            for e in evs {
                if let Some(rel) = scope.rel(&e.bucket, &e.key) {
                    out.push(rel.to_string());
                }
            }
        }
        Parsed::PrefixReconcile { bucket, prefix } => {
            if let Some(rel) = scope.rel_prefix(bucket, prefix) {
                out.push(rel.trim_end_matches('/').to_string());
            }
        }
        Parsed::Batch(items) => {
            for i in items {
                collect(&Ok(i.clone()), scope, out);
            }
        }
        Parsed::Ignore(_) | Parsed::Handshake { .. } | Parsed::Invalid(_) => {}
    }
}

/// Starts following `spec` for the mount.
async fn start_events(
    spec: &str,
    loc: &Location,
    fs: Arc<fs::Fs>,
    notifier: fuser::Notifier,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>> {
    let scope = Scope {
        bucket: loc.bucket.clone(),
        prefix: loc.prefix.clone(),
    };
    let bad = |why: &str| SlateError::BadOption {
        option: "--events".into(),
        why: format!("'{spec}': {why}"),
    };
    Ok(match loc.scheme {
        Scheme::Local if spec == "inotify" => {
            return follow_local(loc.local_path(), fs, notifier, stop).await
        }
        Scheme::S3 if spec.starts_with("sqs://") => {
            let s = crate::events::sqs::SqsSource::connect(spec).await?;
            tokio::spawn(follow(s, fs, notifier, scope, stop))
        }
        Scheme::Azure if spec.starts_with("azqueue://") => {
            let s = crate::events::azqueue::AzQueueSource::connect(spec).await?;
            tokio::spawn(follow(s, fs, notifier, scope, stop))
        }
        Scheme::Gcs if spec.starts_with("pubsub://") => {
            let s = crate::events::pubsub::PubSubSource::connect(spec).await?;
            tokio::spawn(follow(s, fs, notifier, scope, stop))
        }
        _ => {
            return Err(bad(
                "a mount follows its own queue: sqs:// for s3://, azqueue:// for az://, pubsub:// for gs://; a local folder's changes come by inotify (the default there)",
            ))
        }
    })
}

fn mount_err(spec: &MountSpec, detail: String) -> SlateError {
    SlateError::Mount {
        mountpoint: spec.mountpoint.display().to_string(),
        detail,
    }
}

/// Mounts, serves until SIGTERM, SIGINT or an unmount (`fusermount3 -u`), and unmounts.
pub async fn run(spec: MountSpec) -> Result<()> {
    tame_allocator();
    let loc = Location::parse(&spec.src)?;
    let meta = std::fs::metadata(&spec.mountpoint).map_err(|e| SlateError::BadOption {
        option: "MOUNTPOINT".into(),
        why: format!("{}: {e}", spec.mountpoint.display()),
    })?;
    if !meta.is_dir() {
        return Err(SlateError::BadOption {
            option: "MOUNTPOINT".into(),
            why: format!("{} is not a folder", spec.mountpoint.display()),
        });
    }
    // a class or ACL the store has not, or a remote's own, as the copier takes them
    let placement = crate::copy::CopyOptions {
        placement: spec.placement.clone(),
        ..Default::default()
    }
    .placement_for(&loc)?;
    let (store, prefix) = store_of(&loc, &placement)?;
    let mut opts = spec.opts.clone();
    opts.scheme = loc.scheme;
    opts.storage_class = placement.storage_class.clone();
    let cache_err = |why: String| SlateError::BadOption {
        option: "--cache-dir".into(),
        why,
    };
    let mut fs = fs::Fs::new(store, &prefix, opts).map_err(cache_err)?;
    // a rename's CopyObject keeps the class asked for (object_store's would make it STANDARD)
    if placement.storage_class.is_some() {
        if let Some(c) =
            crate::stores::s3copy::S3CrossBucket::with_placement(&loc, &loc, &placement)?
        {
            fs.set_copier(Arc::new(c));
        }
    }
    // the mount's state: what a killed mount of this source left to upload goes first
    let state = state::MountState::open(&spec.opts.cache_dir).map_err(cache_err)?;
    fs.set_backlog(writeback::Backlog::load(&loc.to_string(), state).map_err(cache_err)?);
    let fs = Arc::new(fs);
    if let Some(addr) = &spec.listen {
        let bound = metrics::serve(addr, fs.clone()).await?;
        tracing::info!(%bound, "the mount's metrics: http://{bound}/metrics");
    }
    // the root is listed before the mount shows: credentials or a bucket that fail, fail here
    fs.readdir(fs::ROOT).await.map_err(|e| SlateError::Store {
        url: loc.to_string(),
        detail: format!(
            "listing it failed: {}",
            std::io::Error::from_raw_os_error(e)
        ),
    })?;
    let mut options = vec![
        fuser::MountOption::FSName(format!("slate:{}", spec.src)),
        fuser::MountOption::Subtype("slate".into()),
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
    ];
    if spec.opts.read_only {
        options.push(fuser::MountOption::RO);
    }
    if spec.allow_other {
        options.push(fuser::MountOption::CUSTOM("allow_other".into()));
    }
    let mut config = fuser::Config::default();
    config.mount_options = options;
    config.n_threads = Some(2);
    let adapter = fuse::Adapter {
        fs: fs.clone(),
        rt: tokio::runtime::Handle::current(),
    };
    let mut session = fuser::Session::new(adapter, &spec.mountpoint, &config).map_err(|e| {
        SlateError::BadOption {
            option: "MOUNTPOINT".into(),
            why: format!(
                "{}: mounting failed: {e} (is fuse3 installed, /dev/fuse there?)",
                spec.mountpoint.display()
            ),
        }
    })?;
    let notifier = session.notifier();
    let mut unmounter = session.unmount_callable();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let uploader = tokio::spawn(fs.clone().upload_behind(stop_rx.clone()));
    // a local folder is followed by inotify unless told otherwise
    let events_spec = spec
        .events
        .clone()
        .or_else(|| (loc.scheme == Scheme::Local).then(|| "inotify".to_string()));
    let events = match &events_spec {
        Some(e) => match start_events(e, &loc, fs.clone(), notifier, stop_rx).await {
            Ok(h) => Some(h),
            Err(err) => {
                let _ = unmounter.unmount();
                return Err(err);
            }
        },
        None => None,
    };
    tracing::info!(src = %spec.src, mountpoint = %spec.mountpoint.display(),
        events = events_spec.as_deref().unwrap_or("none (folders kept for --dir-cache-time)"),
        "mounted");
    eprintln!(
        "slate: {} mounted on {} (stop with Ctrl-C, SIGTERM or `fusermount3 -u {}`)",
        spec.src,
        spec.mountpoint.display(),
        spec.mountpoint.display()
    );
    let mut served = tokio::task::spawn_blocking(move || session.run());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| mount_err(&spec, format!("SIGTERM handler: {e}")))?;
    let ended = tokio::select! {
        r = &mut served => Some(r),
        _ = term.recv() => None,
        _ = tokio::signal::ctrl_c() => None,
    };
    let _ = stop_tx.send(true);
    let result = match ended {
        Some(r) => r,
        None => {
            tracing::info!("unmounting");
            if let Err(e) = unmounter.unmount() {
                tracing::warn!(error = %e, "unmount failed");
            }
            served.await
        }
    };
    if let Some(h) = events {
        let _ = h.await;
    }
    let _ = uploader.await;
    // files closed with --write-back are uploaded before the process ends
    let waiting = fs.waiting_count();
    if waiting > 0 {
        eprintln!("slate: uploading {waiting} file(s) closed with --write-back");
    }
    let failed = fs.settle("").await;
    if failed > 0 {
        return Err(mount_err(
            &spec,
            format!("{failed} file(s) closed with --write-back could not be uploaded: they stay in {} and the next mount of {} uploads them (`slate mount-status` lists them)", spec.opts.cache_dir.display(), spec.src),
        ));
    }
    match result {
        Ok(Ok(())) => {
            eprintln!("slate: {} unmounted", spec.mountpoint.display());
            Ok(())
        }
        Ok(Err(e)) => Err(mount_err(&spec, format!("the FUSE session ended: {e}"))),
        Err(e) => Err(mount_err(&spec, format!("the FUSE session failed: {e}"))),
    }
}

/// A mount lives long and moves buffers of megabytes (parts) through many threads: glibc's
/// allocator would keep freed ones in per-thread arenas and raise its mmap threshold past
/// them, so the process's resident memory would stay at its peak long after. A fixed
/// threshold maps and unmaps every buffer of 256 KiB and up, and two arenas are enough.
fn tame_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it is called before the mount's own
    // threads start
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}
