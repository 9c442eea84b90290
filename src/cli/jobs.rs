//! `slate jobs` and `slate status ID`: the jobs in the database, read directly (no server
//! needed; a job whose process died shows as interrupted).

use std::path::PathBuf;

use clap::Args;

use super::open_db;
use crate::copy::progress::human_bytes;
use crate::state::jobs::{Job, JobState, JobStore};

#[derive(Debug, Args)]
pub struct JobsArgs {
    /// Only jobs in this state (queued, running, succeeded, failed, cancelled, interrupted).
    #[arg(long, value_parser = parse_state)]
    pub state: Option<JobState>,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// One JSON object per line, as the API shows them.
    #[arg(long)]
    pub json: bool,
    /// The database: a SQLite file, or PostgreSQL as
    /// postgres://USER@HOST:PORT/DB (password from the URL, PGPASSWORD or ~/.pgpass)
    /// [default: ~/.local/share/slate/slate.db]
    #[arg(long, env = "SLATE_DB", hide_env_values = true)]
    pub db: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The job's id (from `slate jobs` or `POST /jobs`).
    pub id: i64,
    /// The job as JSON, as the API shows it.
    #[arg(long)]
    pub json: bool,
    /// Wait until the job is finished, then print it.
    #[arg(long)]
    pub wait: bool,
    /// The database: a SQLite file, or PostgreSQL as
    /// postgres://USER@HOST:PORT/DB (password from the URL, PGPASSWORD or ~/.pgpass)
    /// [default: ~/.local/share/slate/slate.db]
    #[arg(long, env = "SLATE_DB", hide_env_values = true)]
    pub db: Option<PathBuf>,
}

fn parse_state(s: &str) -> Result<JobState, String> {
    JobState::parse(s).ok_or_else(|| {
        format!("unknown state '{s}' (queued, running, succeeded, failed, cancelled, interrupted)")
    })
}

/// `12.5%`, or objects when there is no byte total.
fn progress(j: &Job) -> String {
    if j.bytes_total > 0 {
        let pct = j.bytes_done as f64 * 100.0 / j.bytes_total as f64;
        format!("{pct:.1}%{}", if j.total_known { "" } else { "+" })
    } else if j.objects_total > 0 {
        format!("{}/{}", j.objects_done, j.objects_total)
    } else {
        "-".into()
    }
}

fn age(t: Option<&str>) -> String {
    let Some(t) = t.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()) else {
        return "-".into();
    };
    let s = (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

fn rate(j: &Job) -> String {
    if j.state() == JobState::Running {
        format!("{}/s", human_bytes(j.rate as u64))
    } else {
        "-".into()
    }
}

pub async fn run_jobs(args: JobsArgs) -> i32 {
    let r = open_db(&args.db).and_then(|m| JobStore::new(&m).list(args.state, args.limit, None));
    let jobs = match r {
        Ok(j) => j,
        Err(e) => {
            eprintln!("slate: {e}");
            return e.exit_code();
        }
    };
    if args.json {
        for j in &jobs {
            println!("{}", serde_json::to_string(j).unwrap_or_default());
        }
        return 0;
    }
    println!(
        "{:<6} {:<10} {:<12} {:>9} {:>12} {:>6}  src -> dst",
        "id", "kind", "state", "progress", "rate", "age"
    );
    for j in &jobs {
        println!(
            "{:<6} {:<10} {:<12} {:>9} {:>12} {:>6}  {} -> {}",
            j.id,
            j.kind,
            j.state,
            progress(j),
            rate(j),
            age(j.created_at.as_deref()),
            j.src,
            j.dst
        );
    }
    0
}

/// Exit code from the job's state: 0 succeeded, 1 failed, 3 cancelled or interrupted,
/// 4 still queued or running; 2 when there is no such job.
pub async fn run_status(args: StatusArgs) -> i32 {
    let m = match open_db(&args.db) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("slate: {e}");
            return e.exit_code();
        }
    };
    loop {
        let job = match JobStore::new(&m).get(args.id) {
            Ok(Some(j)) => j,
            Ok(None) => {
                eprintln!("slate: no job {} in {}", args.id, m.path().display());
                return 2;
            }
            Err(e) => {
                eprintln!("slate: {e}");
                return e.exit_code();
            }
        };
        if args.wait && !job.state().is_final() {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            continue;
        }
        print_job(&job, args.json);
        return job.state().exit_code();
    }
}

fn print_job(j: &Job, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(j).unwrap_or_default());
        return;
    }
    let or = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    println!("job {}: {} {} -> {}", j.id, j.kind, j.src, j.dst);
    println!("  state:     {}", j.state);
    println!(
        "  progress:  {} objects of {}{}, {} of {} ({}), {} failed",
        j.objects_done,
        j.objects_total,
        if j.total_known { "" } else { " so far" },
        human_bytes(j.bytes_done),
        human_bytes(j.bytes_total),
        progress(j),
        j.objects_failed
    );
    if j.state() == JobState::Running {
        println!("  rate:      {}", rate(j));
    }
    println!("  created:   {}", or(&j.created_at));
    println!("  started:   {}", or(&j.started_at));
    println!("  finished:  {}", or(&j.finished_at));
    if j.options.as_object().is_some_and(|o| !o.is_empty()) {
        println!("  options:   {}", j.options);
    }
    if let Some(e) = &j.error {
        println!("  error:     {e}");
    }
    if let Some(r) = &j.result {
        println!("  result:    {r}");
    }
    if j.state() == JobState::Interrupted {
        println!("  (resume it with POST /jobs/{}/resume)", j.id);
    }
}
