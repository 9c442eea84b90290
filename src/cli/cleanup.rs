//! `slate cleanup [DST]`: aborts the uploads that slate processes which no longer run left
//! unfinished (multipart uploads, local temporary files), as recorded in the database. Uploads
//! slate did not record (another tool's) are never touched; those of a slate that still runs
//! are left to it.

use std::path::PathBuf;

use clap::Args;

use crate::copy::resume::{abort_upload, dst_id};
use crate::core::error::SlateError;
use crate::core::location::{Location, Scheme};
use crate::state::owner::{host_id, owner_tag};
use crate::state::uploads::{Upload, Uploads};
use crate::stores::side::Side;

const AFTER_HELP: &str = "\
Copies cut short (killed, interrupted, a job cancelled) keep what they wrote so that the same
copy, run again, continues from its last chunk; the next copy, sync or daemon start for the
same destination resumes or aborts them itself. This command aborts them now.

Examples:
  slate cleanup                          every destination in the database
  slate cleanup s3://bucket/datasets     uploads under that prefix only
  slate cleanup /mnt/replica --dry-run   list, abort nothing

Exit codes: 0 done (or nothing to do), 1 some could not be aborted, 2 bad input.
";

#[derive(Debug, Args)]
#[command(after_long_help = AFTER_HELP)]
pub struct CleanupArgs {
    /// The destination the copies wrote to (s3://BUCKET/PREFIX, az://…, gs://…, or the local
    /// folder); every destination when left out.
    pub dst: Option<String>,
    /// List what would be aborted; abort nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also abort uploads recorded by slate processes of other hosts (a container whose host
    /// name changed at every start): only when none of them runs any more.
    #[arg(long)]
    pub any_host: bool,
    /// The database the copies recorded their uploads in: a SQLite file, or PostgreSQL as
    /// postgres://USER@HOST:PORT/DB (password from the URL, PGPASSWORD or ~/.pgpass)
    /// [default: ~/.local/share/slate/slate.db]
    #[arg(long, env = "SLATE_DB", hide_env_values = true)]
    pub db: Option<PathBuf>,
}

/// The side an upload row was written to.
fn side_of(u: &Upload) -> Result<Side, SlateError> {
    // a cloud row names a bucket (`s3://bkt`, `REMOTE:bkt`); a local one an absolute path
    if !u.dst.starts_with('/') {
        Side::open(&Location::parse(&format!("{}/", u.dst))?)
    } else {
        Side::open(&Location::parse(&u.dst)?)
    }
}

fn chunks_of(u: &Upload) -> u64 {
    u.size.div_ceil(u.chunk_size.max(1))
}

async fn run_inner(args: CleanupArgs) -> Result<bool, SlateError> {
    let db = super::open_db(&args.db)?;
    let (filter_dst, prefix) = match &args.dst {
        None => (None, String::new()),
        Some(raw) => {
            let loc = Location::parse(raw)?;
            match loc.scheme {
                Scheme::Local => {
                    let root = loc.local_path();
                    (Some(dst_id(&Side::Local { loc }, &root)), String::new())
                }
                _ => (Some(loc.store_id()), loc.prefix.clone()),
            }
        }
    };
    let me = owner_tag(std::process::id()).unwrap_or_else(|| std::process::id().to_string());
    let host = host_id();
    let any_host = args.any_host;
    let in_use = |u: &Upload| {
        if !crate::state::owner::same_host(&u.host, &host) {
            !any_host
        } else {
            crate::state::owner::owner_alive(&u.owner)
        }
    };
    let (d, f) = (db.clone(), filter_dst.clone());
    let all = crate::state::blocking(move || Uploads::new(&d).list(f.as_deref())).await?;
    let all: Vec<Upload> = all
        .into_iter()
        .filter(|u| {
            prefix.is_empty()
                || u.key == prefix
                || u.key
                    .strip_prefix(&prefix)
                    .is_some_and(|r| r.starts_with('/'))
        })
        .collect();
    let kept = all.iter().filter(|u| in_use(u)).count();
    let where_ = |u: &Upload| match &u.temp {
        Some(t) => t.clone(),
        None => format!("{}/{}", u.dst, u.key),
    };
    if args.dry_run {
        for u in all.iter().filter(|u| !in_use(u)) {
            println!("would abort {} ({} chunks)", where_(u), chunks_of(u));
        }
        println!(
            "cleanup (dry run): {} upload(s) to abort, {kept} in use by a running slate",
            all.len() - kept
        );
        return Ok(true);
    }
    let (d, f, p) = (db.clone(), filter_dst, prefix);
    let taken = crate::state::blocking(move || {
        Uploads::new(&d).adopt_from(f.as_deref(), &p, &me, &host, any_host, &|_| true)
    })
    .await?;
    let mut ok = true;
    let mut aborted = 0;
    for u in &taken {
        match side_of(u) {
            Ok(side) => {
                // a temporary file is removed only next to where its row's object goes
                if !abort_upload(u, &side).await {
                    eprintln!("slate: could not abort {} (kept)", where_(u));
                    ok = false;
                    continue;
                }
                let (d, id) = (db.clone(), u.id);
                crate::state::blocking(move || Uploads::new(&d).forget(id)).await?;
                println!("aborted {}", where_(u));
                aborted += 1;
            }
            Err(e) => {
                eprintln!("slate: {}: {e}", where_(u));
                ok = false;
            }
        }
    }
    println!("cleanup: {aborted} upload(s) aborted, {kept} in use by a running slate");
    Ok(ok)
}

/// Runs `slate cleanup`; prints one error line and returns the exit code.
pub async fn run(args: CleanupArgs) -> i32 {
    match run_inner(args).await {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("slate: {e}");
            e.exit_code()
        }
    }
}
