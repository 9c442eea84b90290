//! `slate check SRC DST`: proves that a followed pair's events flow end to end with a canary
//! (`engine::canary`): written at the source, its event and its replica waited for, then its
//! delete. Each step's latency is printed; exit 0 when the chain held, 1 when a step did not
//! happen within `--timeout` (the line says where it likely broke), 2 on errors.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::open_db;
use crate::config::Config;
use crate::core::error::SlateError;
use crate::core::location::Location;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The pair's source, as the daemon was given it.
    pub src: String,
    /// The pair's destination, as the daemon was given it.
    pub dst: String,
    /// How long each half (the write, then the delete) may take.
    #[arg(long, default_value = "60s", value_parser = crate::core::filter::parse_age)]
    pub timeout: Duration,
    /// The daemon's database (else the config's daemon.db, else the default).
    #[arg(long, env = "SLATE_DB", hide_env_values = true)]
    pub db: Option<PathBuf>,
    /// The daemon's config file (its daemon.db and [remotes]).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

async fn run_inner(args: CheckArgs) -> Result<i32, SlateError> {
    let cfg = Config::load(args.config.as_deref())?;
    let db = args
        .db
        .clone()
        .or_else(|| cfg.daemon.db.clone().map(PathBuf::from));
    let manifest = open_db(&db)?;
    let src = Location::parse(&args.src)?;
    let dst = Location::parse(&args.dst)?;
    let (s, d, m) = (src.to_string(), dst.to_string(), manifest.clone());
    let pair = crate::state::blocking(move || m.find_pair(&s, &d))
        .await?
        .ok_or_else(|| SlateError::Manifest {
            path: manifest.path().display().to_string(),
            why: format!(
                "knows no pair {src} -> {dst}: start the daemon on it with this database first"
            ),
        })?;
    let key = crate::engine::canary::new_key("check", pair.id);
    let say = |line: String| println!("{line}");
    let run = tokio::select! {
        r = crate::engine::canary::run(manifest.clone(), pair.id, &src, &dst, &key, args.timeout, &say) => Some(r),
        _ = super::shutdown_signal() => None,
    };
    let Some(report) = run else {
        // interrupted: the canary goes from both sides before the exit
        crate::engine::canary::remove(manifest, pair.id, &src, &dst, &key).await;
        return Err(SlateError::Interrupted);
    };
    let report = report?;
    let line = report.summary(&src.to_string(), &dst.to_string(), args.timeout);
    Ok(match report.verdict() {
        crate::engine::canary::Verdict::Ok => {
            println!("{line}");
            0
        }
        _ => {
            eprintln!("slate: {line}");
            1
        }
    })
}

pub async fn run(args: CheckArgs) -> i32 {
    match run_inner(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("slate: {e}");
            e.exit_code()
        }
    }
}
