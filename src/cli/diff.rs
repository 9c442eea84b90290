//! `slate diff SRC DST`: what differs between a pair's two sides. Exit 0 equal, 1 different,
//! 2 error. `--json` prints one JSON line per difference, then a summary line (a contract
//! scripts rely on); `--from-manifest` answers from the manifest alone, with no request.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Args;
use serde_json::json;

use super::open_db;
use crate::core::error::SlateError;
use crate::core::location::Location;
use crate::engine::once::{self, Counts};
use crate::engine::plan::Action;
use crate::engine::plan::Row;

#[derive(Debug, Args)]
#[command(after_long_help = crate::stores::ENV_HELP)]
pub struct DiffArgs {
    /// Source prefix or folder.
    pub src: Option<String>,
    /// Destination prefix or folder.
    pub dst: Option<String>,
    /// JSON lines: one per difference, then one summary line.
    #[arg(long)]
    pub json: bool,
    /// Answer from the manifest alone: zero requests to either store.
    #[arg(long)]
    pub from_manifest: bool,
    /// List the pairs the manifest knows instead (same as `slate pairs`).
    #[arg(long)]
    pub list_pairs: bool,
    /// How many differences the human output shows.
    #[arg(long, default_value_t = 20)]
    pub show: usize,
    #[command(flatten)]
    pub filters: super::filters::FilterArgs,
    /// The manifest database: a SQLite file, or PostgreSQL as
    /// postgres://USER@HOST:PORT/DB (password from the URL, PGPASSWORD or ~/.pgpass)
    /// [default: ~/.local/share/slate/slate.db]
    #[arg(long, env = "SLATE_DB", hide_env_values = true)]
    pub db: Option<PathBuf>,
    /// A local source: list the symlinks that stay inside it as `sync --copy-links` copies
    /// them (a link leading outside the folder is skipped all the same).
    #[arg(long, short = 'L')]
    pub copy_links: bool,
    #[command(flatten)]
    pub compare: super::sync::CompareArgs,
}

fn status(a: Action) -> &'static str {
    match a {
        Action::CopyMissing => "only_in_source",
        Action::Delete | Action::KeepExtra => "only_in_destination",
        Action::MetaChanged => "metadata_changed",
        _ => "changed",
    }
}

fn ago(t: i64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let s = (now - t).max(0);
    match s {
        0..=119 => format!("{s} s ago"),
        120..=7199 => format!("{} min ago", s / 60),
        7200..=172_799 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86_400),
    }
}

async fn run_inner(args: DiffArgs) -> Result<i32, SlateError> {
    let manifest = open_db(&args.db)?;
    if args.list_pairs {
        super::pairs::print(&manifest)?;
        return Ok(0);
    }
    let missing = |what: &str| SlateError::BadOption {
        option: what.into(),
        why: "is required".into(),
    };
    let src = Location::parse(args.src.as_deref().ok_or_else(|| missing("SRC"))?)?
        .with_copy_links(args.copy_links);
    let dst = Location::parse(args.dst.as_deref().ok_or_else(|| missing("DST"))?)?;
    // a canary of `slate check` or the daemon in flight is no difference
    let mut filter = args.filters.build()?;
    filter.no_canaries = true;

    let json = args.json;
    let show = args.show;
    let mut shown = 0usize;
    let mut each = |row: &Row, a: Action| {
        if json {
            let line = json!({
                "key": row.key,
                "status": status(a),
                "src_size": row.src.as_ref().map(|s| s.size),
                "dst_size": row.dst.as_ref().map(|s| s.size),
            });
            println!("{line}");
        } else if shown < show {
            shown += 1;
            println!("{:<20} {}", status(a), row.key);
        }
    };
    let (counts, belief): (Counts, Option<String>) = if args.from_manifest {
        let (s, d) = (src.to_string(), dst.to_string());
        let m = manifest.clone();
        let pair = crate::state::blocking(move || m.find_pair(&s, &d))
            .await?
            .ok_or_else(|| SlateError::Manifest {
                path: manifest.path().display().to_string(),
                why: format!(
                    "knows no pair {src} -> {dst}; run `slate sync --once {src} {dst}` first"
                ),
            })?;
        let belief = match pair.last_sync_at {
            Some(t) => format!("from the manifest, as of the last full sync {}", ago(t)),
            None => {
                "from the manifest; this pair never finished a full sync, so the belief is partial"
                    .into()
            }
        };
        let counts = once::compare_recorded(&manifest, pair.id, &filter, &mut each).await?;
        (counts, Some(belief))
    } else {
        let c = once::compare(
            &manifest,
            &src,
            &dst,
            &filter,
            args.compare.rule(),
            &mut each,
        )
        .await?;
        if let Some(e) = c.unreadable.first() {
            // an entry that cannot be read cannot be compared: the answer would be a guess
            return Err(SlateError::List {
                url: src.to_string(),
                detail: format!(
                    "{} entries could not be read; first: {e}",
                    c.unreadable.len()
                ),
            });
        }
        (c.counts, None)
    };
    let shown = shown;
    if json {
        println!(
            "{}",
            json!({"summary": {
                "only_in_source": counts.only_in_source,
                "only_in_destination": counts.only_in_destination + counts.kept,
                "changed": counts.changed,
                "metadata_changed": counts.metadata_changed,
                "equal": counts.equal,
                "equal_by": {
                    "manifest": counts.equal_recorded,
                    "digest": counts.equal_digest,
                    "mtime": counts.equal_mtime,
                    "content": counts.equal_content,
                    "size": counts.equal_size_only,
                },
                "bytes_to_copy": counts.bytes_to_copy,
            }})
        );
    } else {
        let diffs = counts.differences();
        if diffs as usize > shown {
            println!("… and {} more", diffs as usize - shown);
        }
        println!(
            "diff {src} -> {dst}{}",
            belief
                .as_deref()
                .map(|b| format!(" ({b})"))
                .unwrap_or_default()
        );
        let b = crate::copy::progress::human_bytes;
        println!(
            "  only in source:      {} ({})",
            counts.only_in_source,
            b(counts.bytes_only_in_source)
        );
        println!(
            "  only in destination: {} ({})",
            counts.only_in_destination + counts.kept,
            b(counts.bytes_only_in_destination)
        );
        println!(
            "  changed:             {} ({})",
            counts.changed,
            b(counts.bytes_changed)
        );
        if counts.metadata_changed > 0 {
            println!(
                "  metadata changed:    {} (same bytes; updated in place by sync)",
                counts.metadata_changed
            );
        }
        println!(
            "  equal:               {} ({}){}",
            counts.equal,
            b(counts.bytes_equal),
            if counts.equal > 0 {
                format!(": {}", counts.equal_by())
            } else {
                String::new()
            }
        );
        println!("  bytes to copy:       {}", counts.bytes_to_copy);
    }
    Ok(if counts.differences() == 0 { 0 } else { 1 })
}

pub async fn run(args: DiffArgs) -> i32 {
    match run_inner(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("slate: {e}");
            2
        }
    }
}
