//! `slate deadletters`: the messages no pair could use, listed, shown, retried and purged.
//!
//! ```text
//! slate deadletters [--pair ID | --no-pair] [--json] [--limit N]
//! slate deadletters show ID [--json]
//! slate deadletters retry ID... | --all
//! slate deadletters purge --older-than 30d | --all
//! ```

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::open_db;
use crate::core::error::SlateError;
use crate::state::deadletters::{DeadLetters, Filter, Letter};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DeadLettersArgs {
    #[command(subcommand)]
    pub action: Option<Action>,
    #[command(flatten)]
    pub list: ListArgs,
}

#[derive(Debug, Args)]
pub struct DbArg {
    /// The database: a SQLite file, or PostgreSQL as postgres://USER@HOST:PORT/DB
    /// [default: ~/.local/share/slate/slate.db]
    #[arg(long, env = "SLATE_DB", hide_env_values = true)]
    pub db: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this pair's letters (its id, as `slate pairs` shows it).
    #[arg(long, conflicts_with = "no_pair")]
    pub pair: Option<i64>,
    /// Only the letters of no pair (malformed messages, buckets no pair follows).
    #[arg(long)]
    pub no_pair: bool,
    /// One JSON object per line, the event included.
    #[arg(long)]
    pub json: bool,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    #[command(flatten)]
    pub db: DbArg,
}

#[derive(Debug, Subcommand)]
pub enum Action {
    /// One letter: where it came from, why, and the message (decoded when it was base64).
    Show {
        id: i64,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Read letters again and store their events in the inbox of the pairs they name now
    /// (the daemon applies them); a letter that still cannot be used stays, with the reason.
    Retry {
        /// The letters' ids.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        ids: Vec<i64>,
        /// Every letter.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Drop letters.
    Purge {
        /// Only letters older than this (e.g. 30d, 12h).
        #[arg(long, required_unless_present = "all", conflicts_with = "all")]
        older_than: Option<String>,
        /// Every letter.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        db: DbArg,
    },
}

/// `s` with control characters shown escaped: a message from a cloud must not drive the
/// terminal it is printed on.
fn printable(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_control() && c != '\n' {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

fn when(ms: i64) -> String {
    let now = crate::core::metrics::unix_ms() as i64;
    let s = ((now - ms) / 1000).max(0);
    match s {
        0..=119 => format!("{s} s ago"),
        120..=7199 => format!("{} min ago", s / 60),
        7200..=172_799 => format!("{} h ago", s / 3600),
        _ => format!("{} d ago", s / 86_400),
    }
}

/// A letter as the API and `--json` show it.
pub fn letter_json(l: &Letter, with_text: bool) -> serde_json::Value {
    let mut v = serde_json::json!({
        "id": l.id,
        "pair": l.pair_id,
        "source": l.source,
        "queue": l.queue,
        "reason": l.reason,
        "received_at_ms": l.received_at,
        "decoded": l.decoded.is_some(),
    });
    if with_text {
        v["message"] = serde_json::Value::String(l.text());
    }
    v
}

fn list(args: ListArgs) -> Result<i32, SlateError> {
    let m = open_db(&args.db.db)?;
    let dl = DeadLetters::new(&m);
    let f = Filter {
        pair: match (args.pair, args.no_pair) {
            (Some(p), _) => Some(Some(p)),
            (None, true) => Some(None),
            (None, false) => None,
        },
        before_id: None,
        limit: args.limit.max(1),
    };
    let letters = dl.list(&f)?;
    if args.json {
        for l in &letters {
            println!("{}", letter_json(l, true));
        }
        return Ok(0);
    }
    let total = dl.count()?;
    println!(
        "{:<6} {:<6} {:<18} {:<12} {:<30} reason",
        "id", "pair", "source", "received", "queue"
    );
    for l in &letters {
        let mut reason = printable(&l.reason);
        if reason.chars().count() > 160 {
            reason = reason.chars().take(159).collect::<String>() + "…";
        }
        println!(
            "{:<6} {:<6} {:<18} {:<12} {:<30} {}",
            l.id,
            l.pair_id.map_or("-".to_string(), |p| p.to_string()),
            l.source,
            when(l.received_at),
            printable(&l.queue),
            reason
        );
    }
    let unowned = dl.unowned_by_queue()?;
    if letters.len() as u64 == total {
        println!("{total} dead letter(s)");
    } else {
        println!(
            "{} of {total} dead letter(s) shown (--limit)",
            letters.len()
        );
    }
    for (q, n) in unowned {
        println!("  {n} of no pair from {}", printable(&q));
    }
    Ok(0)
}

fn show(id: i64, json: bool, db: DbArg) -> Result<i32, SlateError> {
    let m = open_db(&db.db)?;
    let Some(l) = DeadLetters::new(&m).get(id)? else {
        eprintln!("slate: no dead letter {id} (slate deadletters lists them)");
        return Ok(1);
    };
    if json {
        println!("{}", letter_json(&l, true));
        return Ok(0);
    }
    println!("id:       {}", l.id);
    println!(
        "pair:     {}",
        l.pair_id.map_or("none".to_string(), |p| p.to_string())
    );
    println!("source:   {}", l.source);
    println!("queue:    {}", printable(&l.queue));
    println!("received: {}", when(l.received_at));
    println!("reason:   {}", printable(&l.reason));
    println!(
        "message{}:",
        if l.decoded.is_some() {
            " (decoded from base64)"
        } else {
            ""
        }
    );
    println!("{}", printable(&l.text()));
    Ok(0)
}

async fn retry(ids: Vec<i64>, all: bool, db: DbArg) -> Result<i32, SlateError> {
    let m = open_db(&db.db)?;
    let ids = if all {
        DeadLetters::new(&m).all_ids()?
    } else {
        ids
    };
    let r = crate::events::retry::retry(m, ids).await?;
    for (id, why) in &r.kept {
        println!("{id}: kept: {}", printable(why));
    }
    for id in &r.unknown {
        eprintln!("slate: no dead letter {id}");
    }
    println!(
        "{} retried into the inbox, {} kept, {} unknown",
        r.stored.len(),
        r.kept.len(),
        r.unknown.len()
    );
    Ok(if r.unknown.is_empty() && r.kept.is_empty() {
        0
    } else {
        1
    })
}

fn purge(older_than: Option<String>, all: bool, db: DbArg) -> Result<i32, SlateError> {
    let age = match (older_than, all) {
        (_, true) => 0,
        (Some(a), false) => crate::core::filter::parse_age(&a)
            .map_err(|why| SlateError::BadOption {
                option: "--older-than".into(),
                why,
            })?
            .as_millis() as i64,
        (None, false) => {
            return Err(SlateError::BadOption {
                option: "--older-than".into(),
                why: "say how old (e.g. 30d), or --all".into(),
            })
        }
    };
    let m = open_db(&db.db)?;
    let n = DeadLetters::new(&m).purge(age)?;
    println!("{n} dead letter(s) dropped");
    Ok(0)
}

pub async fn run(args: DeadLettersArgs) -> i32 {
    let r = match args.action {
        None => list(args.list),
        Some(Action::Show { id, json, db }) => show(id, json, db),
        Some(Action::Retry { ids, all, db }) => retry(ids, all, db).await,
        Some(Action::Purge {
            older_than,
            all,
            db,
        }) => purge(older_than, all, db),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("slate: {e}");
            e.exit_code()
        }
    }
}
