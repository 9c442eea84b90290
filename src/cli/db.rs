//! `slate db`: the state database itself: a consistent backup, and the migrations a worker
//! does not run on its own (the manifest's rewrite to one row per key).

use std::path::{Path, PathBuf};

use clap::Args;

use crate::state::db::{redact, Location};
use crate::state::manifest::Manifest;

#[derive(Debug, Args)]
pub struct DbArgs {
    /// The state database: a SQLite file, or PostgreSQL as postgres://USER@HOST:PORT/DB
    /// [default: ~/.local/share/slate/slate.db]
    #[arg(long, env = "SLATE_DB", hide_env_values = true, global = true)]
    pub db: Option<PathBuf>,
    #[command(subcommand)]
    pub action: DbAction,
}

#[derive(Debug, clap::Subcommand)]
pub enum DbAction {
    /// A consistent copy of the state, taken while slate runs: SQLite's `VACUUM INTO` a new
    /// file (open it with --db), PostgreSQL's `pg_dump --format=custom` (restore it with
    /// `pg_restore`). The database is read as it is: an older schema is not migrated.
    Backup {
        /// The file to write; it must not exist.
        #[arg(long)]
        to: PathBuf,
    },
    /// Bring the schema up to date, including the rewrites a worker refuses to run on its own
    /// (the manifest's, to one row per key). Stop every slate process that uses the database
    /// first and take `slate db backup` before: refused while another slate process uses it.
    Migrate,
}

pub async fn run(args: DbArgs) -> i32 {
    let result = match super::db_location(&args.db) {
        Ok(loc) => match args.action {
            DbAction::Backup { to } => tokio::task::spawn_blocking(move || backup(&loc, &to))
                .await
                .unwrap_or_else(|e| Err(format!("internal: {e}"))),
            DbAction::Migrate => tokio::task::spawn_blocking(move || migrate(&loc))
                .await
                .unwrap_or_else(|e| Err(format!("internal: {e}"))),
        },
        Err(e) => Err(e.to_string()),
    };
    match result {
        Ok(line) => {
            println!("{line}");
            0
        }
        Err(why) => {
            eprintln!("error: {why}");
            1
        }
    }
}

fn migrate(loc: &Location) -> Result<String, String> {
    let m = Manifest::open_migrating(loc).map_err(|e| e.to_string())?;
    let pairs = m.pairs().map_err(|e| e.to_string())?;
    Ok(format!(
        "{}: schema up to date ({} pair(s), {} source and {} destination object(s) in the manifest)",
        loc.shown(),
        pairs.len(),
        pairs.iter().map(|p| p.src_objects).sum::<u64>(),
        pairs.iter().map(|p| p.dst_objects).sum::<u64>()
    ))
}

fn backup(loc: &Location, to: &Path) -> Result<String, String> {
    if to.exists() {
        return Err(format!(
            "{}: exists; a backup is written to a new file",
            to.display()
        ));
    }
    match loc {
        Location::Sqlite(path) => backup_sqlite(path, to),
        Location::Postgres(url) => backup_postgres(url, to),
    }
}

fn backup_sqlite(path: &Path, to: &Path) -> Result<String, String> {
    let shown = path.display();
    if !path.exists() {
        return Err(format!("{shown}: no such database"));
    }
    let c = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| format!("{shown}: {e}"))?;
    c.busy_timeout(std::time::Duration::from_secs(30))
        .map_err(|e| format!("{shown}: {e}"))?;
    let dest = to
        .to_str()
        .ok_or_else(|| format!("{}: not a UTF-8 path", to.display()))?;
    // one read transaction: the copy is the database as of one moment, writers go on
    c.execute("VACUUM INTO ?1", [dest])
        .map_err(|e| format!("{shown}: backing up to {dest}: {e}"))?;
    let bytes = std::fs::metadata(to).map(|m| m.len()).unwrap_or(0);
    Ok(format!(
        "{shown} backed up to {dest} ({bytes} bytes; open it with --db {dest})"
    ))
}

fn backup_postgres(url: &str, to: &Path) -> Result<String, String> {
    let shown = redact(url);
    // the password travels in the environment, never on pg_dump's command line (which
    // every user of the host can read in the process list)
    let mut parsed = url::Url::parse(url).map_err(|e| format!("{shown}: not a URL: {e}"))?;
    let password = parsed.password().map(|p| {
        percent_encoding::percent_decode_str(p)
            .decode_utf8_lossy()
            .into_owned()
    });
    let _ = parsed.set_password(None);
    let mut cmd = std::process::Command::new("pg_dump");
    cmd.args(["--format=custom", "--no-password", "--file"])
        .arg(to)
        .arg("--dbname")
        .arg(parsed.as_str())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    if let Some(p) = password {
        cmd.env("PGPASSWORD", p);
    }
    let out = cmd.output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "pg_dump not found: a PostgreSQL backup is taken with \
             PostgreSQL's own pg_dump (Debian: apt-get install postgresql-client)"
            .to_string(),
        _ => format!("running pg_dump: {e}"),
    })?;
    if !out.status.success() {
        let _ = std::fs::remove_file(to);
        let why = String::from_utf8_lossy(&out.stderr);
        let line = why
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("failed");
        return Err(format!("{shown}: pg_dump: {}", line.trim()));
    }
    let bytes = std::fs::metadata(to).map(|m| m.len()).unwrap_or(0);
    Ok(format!(
        "{shown} backed up to {} ({bytes} bytes, pg_dump custom format; restore with pg_restore)",
        to.display()
    ))
}
