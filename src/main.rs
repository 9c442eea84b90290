//! The `slate` binary: parse the command line, start logging, run, exit with the code.

use std::io::IsTerminal;

use clap::Parser;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// Threads for blocking work: file reads and writes, database calls, folder walks. Tokio's
/// default of 512 let the daemon's 128 keys in flight over local folders hold over 500 threads
/// (most of them waiting on the database's one writer), each with its stack and a share of
/// the allocator's arenas; past this many the work queues instead. Local disks and the
/// database gain nothing from more at once.
const BLOCKING_THREADS: usize = 128;

fn main() {
    let cli = match slate::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // an rclone flag slate lacks: name it as rclone's and say what to use
            if e.kind() == clap::error::ErrorKind::UnknownArgument {
                if let Some(clap::error::ContextValue::String(flag)) =
                    e.get(clap::error::ContextKind::InvalidArg)
                {
                    if let Some(line) = slate::cli::rclone::refusal(flag) {
                        eprintln!("slate: {line}");
                        std::process::exit(2);
                    }
                }
            }
            e.exit()
        }
    };
    slate::copy::tune_allocator();
    slate::copy::raise_open_files();
    // The daemon reports its health once a minute at info; one-shot commands keep quiet.
    let daemon = matches!(&cli.command, slate::cli::Command::Sync(a) if !a.once && !a.tuning.quiet);
    let mount = matches!(&cli.command, slate::cli::Command::Mount(_));
    let level = match cli.verbose {
        0 if daemon => "slate=info,warn",
        // fuser warns of the operations a mount leaves to their defaults, and of an unmount
        // another process did first
        0 if mount => "slate=info,fuser=error,warn",
        0 => "warn",
        1 => "slate=debug,info",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    // The AWS SDK traces whole responses and errors, and AWS's signature errors echo the
    // request's signed headers, the session token among them: those traces never show, even
    // under -vv or RUST_LOG=trace.
    let no_echoes = tracing_subscriber::filter::filter_fn(|m| {
        !(*m.level() == tracing::Level::TRACE
            && m.target()
                .starts_with("aws_smithy_runtime::client::orchestrator"))
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // colour codes only for a terminal: logs redirected to files and journald stay plain
        .with_ansi(std::io::stderr().is_terminal())
        .finish()
        .with(no_echoes)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .max_blocking_threads(BLOCKING_THREADS)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("slate: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = rt.block_on(slate::cli::run(cli));
    // Do not wait for background aborts or blocking reads of a cancelled copy.
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    std::process::exit(code);
}
