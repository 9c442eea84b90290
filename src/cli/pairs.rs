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
    #[arg(long, env = "SLATE_DB", hide_env_values = true)]
    pub db: Option<PathBuf>,
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
    for p in pairs {
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
    }
    Ok(())
}

pub async fn run(args: PairsArgs) -> i32 {
    match open_db(&args.db).and_then(|m| print(&m)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("slate: {e}");
            e.exit_code()
        }
    }
}
