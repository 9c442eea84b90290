//! The command line: one file per subcommand. `main.rs` parses, starts logging and calls
//! [`run`]; the exit code comes from the result.

pub mod copy;
pub mod diff;
pub mod jobs;
pub mod pairs;
pub mod serve;
pub mod sync;

use clap::{Parser, Subcommand};

/// Keeps object stores consistent by replicating only what changed.
#[derive(Debug, Parser)]
#[command(name = "slate", version, about, propagate_version = true)]
pub struct Cli {
    /// More log output (-v debug, -vv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Copy objects from SRC to DST (one object or a whole prefix, any store to any store).
    Copy(copy::CopyArgs),
    /// Make DST equal to SRC, deletes included (`--once`: backfill / full reconcile).
    Sync(sync::SyncArgs),
    /// Report what differs between SRC and DST (exit 0 equal, 1 different, 2 error).
    Diff(diff::DiffArgs),
    /// The pairs the manifest knows, with object counts and last sync time.
    Pairs(pairs::PairsArgs),
    /// Serve the API and the dashboard (127.0.0.1:3030 by default) and run the jobs started
    /// through them.
    Serve(serve::ServeArgs),
    /// The jobs in the database: id, kind, state, progress, rate, age.
    Jobs(jobs::JobsArgs),
    /// One job in detail; exit 0 succeeded, 1 failed, 3 cancelled or interrupted, 4 not finished.
    Status(jobs::StatusArgs),
}

/// Runs the parsed command; returns the process exit code.
pub async fn run(cli: Cli) -> i32 {
    match cli.command {
        Command::Copy(args) => copy::run(args).await,
        Command::Sync(args) => sync::run(args).await,
        Command::Diff(args) => diff::run(args).await,
        Command::Pairs(args) => pairs::run(args).await,
        Command::Serve(args) => serve::run(args).await,
        Command::Jobs(args) => jobs::run_jobs(args).await,
        Command::Status(args) => jobs::run_status(args).await,
    }
}
