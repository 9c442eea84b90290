//! `slate pairs`: the pairs the manifest knows, with object counts and last sync time.

use std::path::PathBuf;

use clap::Args;

use super::open_db;
use crate::copy::progress::human_bytes;
use crate::core::error::SlateError;
use crate::state::manifest::Manifest;

#[derive(Debug, Args)]
pub struct PairsArgs {
    /// The manifest database: a SQLite file, or PostgreSQL as
    /// postgres://USER@HOST:PORT/DB (password from the URL, PGPASSWORD or ~/.pgpass)
    /// [default: ~/.local/share/slate/slate.db]
    #[arg(long, env = "SLATE_DB", hide_env_values = true, global = true)]
    pub db: Option<PathBuf>,
    #[command(subcommand)]
    pub action: Option<BrakeAction>,
}

/// What an operator does with a pair's engaged delete brake.
#[derive(Debug, clap::Subcommand)]
pub enum BrakeAction {
    /// Apply the deletes the pair's delete brake holds (each still only if the source says
    /// the object is gone) and release the brake; the running daemon applies them within
    /// seconds.
    ReleaseDeletes { src: String, dst: String },
    /// Forget the deletes the brake holds (the destination keeps those objects for now; the
    /// next reconcile, a drift check or `sync --once`, finds them again and puts them through
    /// the brake once more) and release the brake.
    DropDeletes { src: String, dst: String },
}

/// The pair `src -> dst` of the database, or an error naming it.
fn find(m: &Manifest, src: &str, dst: &str) -> Result<i64, SlateError> {
    let norm = |s: &str| {
        crate::core::location::Location::parse(s)
            .map(|l| l.to_string())
            .unwrap_or_else(|_| s.to_string())
    };
    for (s, d) in [(norm(src), norm(dst)), (src.to_string(), dst.to_string())] {
        if let Some(p) = m.find_pair(&s, &d)? {
            return Ok(p.id);
        }
    }
    Err(SlateError::BadOption {
        option: "SRC DST".into(),
        why: format!("no pair {src} -> {dst} in the database (slate pairs lists them)"),
    })
}

fn brake_action(m: &Manifest, action: &BrakeAction) -> Result<(), SlateError> {
    let b = crate::state::brake::Brakes::new(m);
    match action {
        BrakeAction::ReleaseDeletes { src, dst } => {
            let id = find(m, src, dst)?;
            let n = b.release(id)?;
            tracing::warn!(
                pair = id,
                held = n,
                "delete brake released by an operator: the held deletes are applied"
            );
            println!("{n} held delete(s) released for {src} -> {dst}; the brake is off until the limit is passed again");
        }
        BrakeAction::DropDeletes { src, dst } => {
            let id = find(m, src, dst)?;
            let n = b.drop_held(id)?;
            tracing::warn!(
                pair = id,
                dropped = n,
                "delete brake released by an operator: the held deletes are dropped"
            );
            println!("{n} held delete(s) dropped for {src} -> {dst} (the destination keeps those objects until a reconcile finds them again)");
        }
    }
    Ok(())
}

fn when(t: Option<i64>) -> String {
    match t {
        None => "never".into(),
        Some(t) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            format!("{} s ago", (now - t).max(0))
        }
    }
}

/// Prints the table of pairs.
pub fn print(m: &Manifest) -> Result<(), SlateError> {
    let pairs = m.pairs()?;
    println!(
        "{:<4} {:>10} {:>12} {:>10} {:<14} pair",
        "id", "objects", "bytes", "dst rows", "last sync"
    );
    let brakes = crate::state::brake::Brakes::new(m);
    for p in pairs {
        let brake = brakes.state(p.id, std::time::Duration::from_secs(600))?;
        println!(
            "{:<4} {:>10} {:>12} {:>10} {:<14} {} -> {}",
            p.id,
            p.src_objects,
            human_bytes(p.src_bytes),
            p.dst_objects,
            when(p.last_sync_at),
            p.src,
            p.dst
        );
        if let Some((at, why)) = &p.last_failure {
            println!(
                "     LAST RUN FAILED {}: {why} (a running daemon retries it; its log has more)",
                when(Some(*at))
            );
        }
        if brake.engaged {
            println!(
                "     DELETE BRAKE ENGAGED: {} delete(s) held ({}); release with \
                 `slate pairs release-deletes {} {}` or drop with `drop-deletes`",
                brake.held,
                brake.reason.unwrap_or_default(),
                p.src,
                p.dst
            );
        }
    }
    Ok(())
}

pub async fn run(args: PairsArgs) -> i32 {
    let r = open_db(&args.db).and_then(|m| match &args.action {
        None => print(&m),
        Some(a) => brake_action(&m, a),
    });
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("slate: {e}");
            e.exit_code()
        }
    }
}
