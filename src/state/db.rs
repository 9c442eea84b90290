//! The database under the state: embedded SQLite (the default, one file) or PostgreSQL (a
//! server that several workers share), behind one small interface. The state's modules write
//! their SQL once, with `?1`-style parameters, integers bound as 64-bit, text as text and bytes
//! as bytes; [`Conn`] runs it on either database (for PostgreSQL the parameters become `$1`).
//! Where the dialects differ (SQLite's temporary tables, `INSERT OR REPLACE`) a module asks
//! [`Conn::is_postgres`] and says both.
//!
//! Every write runs in one transaction ([`Db::write`]): SQLite's `BEGIN IMMEDIATE` (one writer
//! at a time), PostgreSQL's `SERIALIZABLE`, where a transaction that collides with another
//! worker's is rolled back and run again, so a read-then-write is as safe on both.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::core::backoff::Backoff;
use crate::core::error::{Result, SlateError};

/// The backends as the state metrics label them (`backend="sqlite"`, `backend="postgres"`).
pub const BACKENDS: [&str; 2] = ["sqlite", "postgres"];

/// What the state databases of this process ran so far, per backend (indexed as [`BACKENDS`]):
/// `GET /metrics` exposes it as `slate_state_statements_total` and
/// `slate_state_transactions_total` (bench/workers.sh divides them by the keys applied).
static STATEMENTS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
static WRITES: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
static READS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// Counts of one backend's state operations since the process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// Statements the state ran through [`Conn`] (a batch counts once; BEGIN, COMMIT and
    /// ROLLBACK are not counted: they are the transactions').
    pub statements: u64,
    /// Write transactions begun ([`Db::write`], [`Db::write_locking`], and on PostgreSQL
    /// [`Db::on_writer`]); on PostgreSQL each attempt of one run again after a conflict or a
    /// lost connection counts.
    pub writes: u64,
    /// Calls of [`Db::read`] (a connection taken for reads; no transaction around them), each
    /// attempt counted.
    pub reads: u64,
}

/// The state operations of each backend so far, in the order of [`BACKENDS`].
pub fn op_counts() -> [(&'static str, OpCounts); 2] {
    std::array::from_fn(|i| {
        (
            BACKENDS[i],
            OpCounts {
                statements: STATEMENTS[i].load(Relaxed),
                writes: WRITES[i].load(Relaxed),
                reads: READS[i].load(Relaxed),
            },
        )
    })
}

/// A value bound to a statement or read from a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

/// What a database call failed with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbError {
    /// A query for one row found none.
    NoRows,
    /// The transaction collided with another (PostgreSQL's serialization failure or deadlock):
    /// run it again.
    Conflict(String),
    /// The connection is gone (the server restarted, the network dropped).
    Closed(String),
    Other(String),
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DbError::NoRows => f.write_str("query returned no rows"),
            DbError::Conflict(s) | DbError::Closed(s) | DbError::Other(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for DbError {}

pub type DbResult<T> = std::result::Result<T, DbError>;

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> Self {
        match e {
            rusqlite::Error::QueryReturnedNoRows => DbError::NoRows,
            e => DbError::Other(e.to_string()),
        }
    }
}

impl From<tokio_postgres::Error> for DbError {
    fn from(e: tokio_postgres::Error) -> Self {
        use tokio_postgres::error::SqlState;
        let text = match e.as_db_error() {
            // the server's own message, without the driver's "db error: " prefix
            Some(d) => format!("{}: {}", d.severity(), d.message()),
            // "error connecting to server: Connection refused (os error 111)"
            None => {
                let mut text = e.to_string();
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    text = format!("{text}: {c}");
                    cause = c.source();
                }
                text
            }
        };
        match e.code() {
            Some(c)
                if *c == SqlState::T_R_SERIALIZATION_FAILURE
                    || *c == SqlState::T_R_DEADLOCK_DETECTED =>
            {
                DbError::Conflict(text)
            }
            Some(c)
                if *c == SqlState::ADMIN_SHUTDOWN
                    || *c == SqlState::CRASH_SHUTDOWN
                    || *c == SqlState::CANNOT_CONNECT_NOW
                    || c.code().starts_with("08") =>
            {
                DbError::Closed(text)
            }
            None if e.is_closed() || text.contains("connection") => DbError::Closed(text),
            _ => DbError::Other(text),
        }
    }
}

/// `query_row(...).optional()`: no row is `None`, not an error.
pub trait OptionalExtension<T> {
    fn optional(self) -> DbResult<Option<T>>;
}

impl<T> OptionalExtension<T> for DbResult<T> {
    fn optional(self) -> DbResult<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(DbError::NoRows) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A Rust value that binds as a [`Value`].
pub trait ToValue {
    fn to_value(&self) -> Value;
}

macro_rules! int_to_value {
    ($($t:ty),*) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> Value {
                Value::Int(i64::try_from(*self).unwrap_or(i64::MAX))
            }
        }
    )*};
}
int_to_value!(i64, i32, u32, u64, usize, u8, u16, i16);

impl ToValue for bool {
    fn to_value(&self) -> Value {
        Value::Int(*self as i64)
    }
}
impl ToValue for f64 {
    fn to_value(&self) -> Value {
        Value::Real(*self)
    }
}
impl ToValue for str {
    fn to_value(&self) -> Value {
        Value::Text(self.to_string())
    }
}
impl ToValue for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
}
impl ToValue for [u8] {
    fn to_value(&self) -> Value {
        Value::Blob(self.to_vec())
    }
}
impl ToValue for Vec<u8> {
    fn to_value(&self) -> Value {
        Value::Blob(self.clone())
    }
}
impl ToValue for Value {
    fn to_value(&self) -> Value {
        self.clone()
    }
}
impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}
impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value {
        match self {
            Some(v) => v.to_value(),
            None => Value::Null,
        }
    }
}

/// The parameters of a statement: `params![a, b, c]`.
macro_rules! params {
    () => { &[] as &[$crate::state::db::Value] };
    ($($p:expr),+ $(,)?) => {
        &[$($crate::state::db::ToValue::to_value(&$p)),+] as &[$crate::state::db::Value]
    };
}
pub(crate) use params;

/// A Rust value read from a row's [`Value`].
pub trait FromValue: Sized {
    fn from_value(v: &Value) -> std::result::Result<Self, String>;
}

impl FromValue for i64 {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        match v {
            Value::Int(i) => Ok(*i),
            Value::Real(f) => Ok(*f as i64),
            other => Err(format!("expected an integer, found {other:?}")),
        }
    }
}
impl FromValue for f64 {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        match v {
            Value::Int(i) => Ok(*i as f64),
            Value::Real(f) => Ok(*f),
            other => Err(format!("expected a number, found {other:?}")),
        }
    }
}
impl FromValue for bool {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        i64::from_value(v).map(|i| i != 0)
    }
}
impl FromValue for String {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        match v {
            Value::Text(s) => Ok(s.clone()),
            other => Err(format!("expected text, found {other:?}")),
        }
    }
}
impl FromValue for Vec<u8> {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        match v {
            Value::Blob(b) => Ok(b.clone()),
            Value::Text(s) => Ok(s.as_bytes().to_vec()),
            other => Err(format!("expected bytes, found {other:?}")),
        }
    }
}
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        match v {
            Value::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

/// A column index of a [`Row`] (only `usize`, so that a literal index needs no suffix).
pub trait RowIndex {
    fn index(self) -> usize;
}

impl RowIndex for usize {
    fn index(self) -> usize {
        self
    }
}

/// One row of a result.
#[derive(Debug, Clone, PartialEq)]
pub struct Row(Vec<Value>);

impl Row {
    /// Column `i` as a `T` (`r.get::<_, i64>(0)`, as rusqlite spells it).
    pub fn get<I: RowIndex, T: FromValue>(&self, i: I) -> DbResult<T> {
        let i = i.index();
        let v = self
            .0
            .get(i)
            .ok_or_else(|| DbError::Other(format!("no column {i} in a row of {}", self.0.len())))?;
        T::from_value(v).map_err(|e| DbError::Other(format!("column {i}: {e}")))
    }
}

/// A connection (within a transaction when it writes), as the state's modules see it.
pub enum Conn<'a> {
    Lite(&'a rusqlite::Connection),
    Pg(&'a tokio_postgres::Client),
}

/// `?N` → `$N` (PostgreSQL's parameters), outside quoted text and names.
fn to_pg(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut quote: Option<char> = None;
    let mut next = 1;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                }
                out.push(c);
            }
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                out.push(c);
            }
            None if c == '?' => {
                out.push('$');
                if chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                    while let Some(d) = chars.next_if(|d| d.is_ascii_digit()) {
                        out.push(d);
                    }
                } else {
                    out.push_str(&next.to_string());
                    next += 1;
                }
            }
            None => out.push(c),
        }
    }
    out
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Int(i) => ValueRef::Integer(*i),
            Value::Real(f) => ValueRef::Real(*f),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

impl tokio_postgres::types::ToSql for Value {
    fn to_sql(
        &self,
        ty: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>>
    {
        use tokio_postgres::types::{IsNull, Type};
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
                Type::BOOL => (*i != 0).to_sql(ty, out),
                Type::FLOAT8 => (*i as f64).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR | Type::UNKNOWN => i.to_string().to_sql(ty, out),
                _ => Err(format!("an integer cannot be bound as {ty}").into()),
            },
            Value::Real(f) => match *ty {
                Type::FLOAT8 => f.to_sql(ty, out),
                Type::FLOAT4 => (*f as f32).to_sql(ty, out),
                Type::INT8 => (*f as i64).to_sql(ty, out),
                _ => Err(format!("a number cannot be bound as {ty}").into()),
            },
            Value::Text(s) => s.as_str().to_sql(ty, out),
            Value::Blob(b) => b.as_slice().to_sql(ty, out),
        }
    }

    fn accepts(_: &tokio_postgres::types::Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

fn pg_row(row: &tokio_postgres::Row) -> DbResult<Row> {
    use tokio_postgres::types::Type;
    let mut vals = Vec::with_capacity(row.len());
    for (i, col) in row.columns().iter().enumerate() {
        let bad = |e: tokio_postgres::Error| DbError::Other(format!("column {}: {e}", col.name()));
        let v = match *col.type_() {
            Type::INT8 => row
                .try_get::<_, Option<i64>>(i)
                .map_err(bad)?
                .map(Value::Int),
            Type::INT4 => row
                .try_get::<_, Option<i32>>(i)
                .map_err(bad)?
                .map(|v| Value::Int(v.into())),
            Type::INT2 => row
                .try_get::<_, Option<i16>>(i)
                .map_err(bad)?
                .map(|v| Value::Int(v.into())),
            Type::BOOL => row
                .try_get::<_, Option<bool>>(i)
                .map_err(bad)?
                .map(|v| Value::Int(v as i64)),
            Type::FLOAT8 => row
                .try_get::<_, Option<f64>>(i)
                .map_err(bad)?
                .map(Value::Real),
            Type::FLOAT4 => row
                .try_get::<_, Option<f32>>(i)
                .map_err(bad)?
                .map(|v| Value::Real(v.into())),
            Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR | Type::UNKNOWN => row
                .try_get::<_, Option<String>>(i)
                .map_err(bad)?
                .map(Value::Text),
            Type::BYTEA => row
                .try_get::<_, Option<Vec<u8>>>(i)
                .map_err(bad)?
                .map(Value::Blob),
            ref other => {
                return Err(DbError::Other(format!(
                    "column {}: type {other} is not read by slate (cast it in the query)",
                    col.name()
                )))
            }
        };
        vals.push(v.unwrap_or(Value::Null));
    }
    Ok(Row(vals))
}

fn lite_row(r: &rusqlite::Row, n: usize) -> rusqlite::Result<Row> {
    use rusqlite::types::ValueRef;
    let mut vals = Vec::with_capacity(n);
    for i in 0..n {
        vals.push(match r.get_ref(i)? {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => Value::Int(i),
            ValueRef::Real(f) => Value::Real(f),
            ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        });
    }
    Ok(Row(vals))
}

/// Waits for a future of the PostgreSQL driver on this thread. Its connections are driven by
/// the database's own runtime, so this works from any thread, a runtime's worker included
/// (which it blocks, as a SQLite call does).
fn wait<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

fn pg_params(p: &[Value]) -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
    p.iter()
        .map(|v| v as &(dyn tokio_postgres::types::ToSql + Sync))
        .collect()
}

impl Conn<'_> {
    /// True on PostgreSQL (for the few statements the dialects spell differently).
    pub fn is_postgres(&self) -> bool {
        matches!(self, Conn::Pg(_))
    }

    /// Counts one statement of this connection's backend.
    fn counted(&self) -> &Self {
        STATEMENTS[self.is_postgres() as usize].fetch_add(1, Relaxed);
        self
    }

    /// Runs a statement; returns the number of rows it changed.
    pub fn execute(&self, sql: &str, p: &[Value]) -> DbResult<usize> {
        match self.counted() {
            Conn::Lite(c) => Ok(c
                .prepare_cached(sql)?
                .execute(rusqlite::params_from_iter(p))?),
            Conn::Pg(c) => {
                let n = wait(c.execute(to_pg(sql).as_str(), &pg_params(p)))?;
                Ok(n as usize)
            }
        }
    }

    /// Runs statements without parameters, separated by `;`.
    pub fn execute_batch(&self, sql: &str) -> DbResult<()> {
        match self.counted() {
            Conn::Lite(c) => Ok(c.execute_batch(sql)?),
            Conn::Pg(c) => Ok(wait(c.batch_execute(sql))?),
        }
    }

    /// Every row of a query, each mapped by `f`.
    pub fn query_map<T>(
        &self,
        sql: &str,
        p: &[Value],
        mut f: impl FnMut(&Row) -> DbResult<T>,
    ) -> DbResult<Vec<T>> {
        match self.counted() {
            Conn::Lite(c) => {
                let mut st = c.prepare_cached(sql)?;
                let n = st.column_count();
                let mut rows = st.query(rusqlite::params_from_iter(p))?;
                let mut out = Vec::new();
                while let Some(r) = rows.next()? {
                    out.push(f(&lite_row(r, n)?)?);
                }
                Ok(out)
            }
            Conn::Pg(c) => {
                let rows = wait(c.query(to_pg(sql).as_str(), &pg_params(p)))?;
                rows.iter().map(|r| f(&pg_row(r)?)).collect()
            }
        }
    }

    /// The first row of a query mapped by `f`; [`DbError::NoRows`] when there is none.
    pub fn query_row<T>(
        &self,
        sql: &str,
        p: &[Value],
        f: impl FnOnce(&Row) -> DbResult<T>,
    ) -> DbResult<T> {
        let row = match self.counted() {
            Conn::Lite(c) => {
                let mut st = c.prepare_cached(sql)?;
                let n = st.column_count();
                let mut rows = st.query(rusqlite::params_from_iter(p))?;
                match rows.next()? {
                    Some(r) => lite_row(r, n)?,
                    None => return Err(DbError::NoRows),
                }
            }
            Conn::Pg(c) => {
                let rows = wait(c.query(to_pg(sql).as_str(), &pg_params(p)))?;
                match rows.first() {
                    Some(r) => pg_row(r)?,
                    None => return Err(DbError::NoRows),
                }
            }
        };
        f(&row)
    }

    /// Whether a query returns any row.
    pub fn exists(&self, sql: &str, p: &[Value]) -> DbResult<bool> {
        self.query_row(sql, p, |_| Ok(()))
            .optional()
            .map(|r| r.is_some())
    }
}

/// SQLite migrations, applied in order; `PRAGMA user_version` is the last one applied.
const SQLITE_MIGRATIONS: &[&str] = &[
    include_str!("../../schema/sqlite/0001_init.sql"),
    include_str!("../../schema/sqlite/0002_inbox.sql"),
    include_str!("../../schema/sqlite/0003_tombstones.sql"),
    include_str!("../../schema/sqlite/0004_jobs.sql"),
    include_str!("../../schema/sqlite/0005_expansions.sql"),
    include_str!("../../schema/sqlite/0006_leases.sql"),
    include_str!("../../schema/sqlite/0007_equality.sql"),
    include_str!("../../schema/sqlite/0008_uploads.sql"),
    include_str!("../../schema/sqlite/0009_claims.sql"),
    include_str!("../../schema/sqlite/0010_partitions.sql"),
    include_str!("../../schema/sqlite/0011_deadletters.sql"),
    include_str!("../../schema/sqlite/0012_brake.sql"),
    include_str!("../../schema/sqlite/0013_entries.sql"),
    include_str!("../../schema/sqlite/0014_canaries_freshness.sql"),
    include_str!("../../schema/sqlite/0015_feed_cursors.sql"),
];

/// PostgreSQL migrations, applied in order; the table `slate_schema` holds the last one
/// applied. (PostgreSQL came with SQLite's eighth: its first migration is all of those.)
const POSTGRES_MIGRATIONS: &[&str] = &[
    include_str!("../../schema/postgres/0001_init.sql"),
    include_str!("../../schema/postgres/0002_claims.sql"),
    include_str!("../../schema/postgres/0003_partitions.sql"),
    include_str!("../../schema/postgres/0004_deadletters.sql"),
    include_str!("../../schema/postgres/0005_brake.sql"),
    include_str!("../../schema/postgres/0006_entries.sql"),
    include_str!("../../schema/postgres/0007_canaries_freshness.sql"),
    include_str!("../../schema/postgres/0008_feed_cursors.sql"),
];

/// Connections of a SQLite database that only read.
const READERS: usize = 4;

/// Connections a PostgreSQL pool keeps at most.
const PG_POOL: usize = 8;

/// How long a call waits for PostgreSQL to come back (a restart, a failover) before it fails.
const PG_RECONNECT: Duration = Duration::from_secs(60);

/// The waits of the database's retry loops, on the one schedule of `core/backoff.rs`:
/// a transaction that lost a serialization conflict (PostgreSQL) is run again at once and
/// then after 1, 2, 4 … 200 ms, 50 times at most.
const CONFLICTS: Backoff = Backoff {
    initial: Duration::from_millis(2),
    max: Duration::from_millis(200),
    attempts: 50,
    deadline: None,
};

/// A server that cannot be reached (a restart, a failover): asked again every 50 to 500 ms
/// until [`PG_RECONNECT`].
const RECONNECT: Backoff = Backoff {
    initial: Duration::from_millis(100),
    max: Duration::from_millis(500),
    attempts: u32::MAX,
    deadline: Some(PG_RECONNECT),
};

/// A new SQLite database another process is switching to WAL at the same instant: asked
/// again every few milliseconds for as long as the busy timeout.
const WAL_BUSY: Backoff = Backoff {
    initial: Duration::from_millis(10),
    max: Duration::from_millis(25),
    attempts: u32::MAX,
    deadline: Some(Duration::from_secs(30)),
};

/// Where the state lives, from `--db`: a file path (SQLite) or a `postgres://` URL.
#[derive(Clone, PartialEq, Eq)]
pub enum Location {
    Sqlite(PathBuf),
    Postgres(String),
}

impl std::fmt::Debug for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown())
    }
}

/// The scheme of `s` (`postgres` of `postgres://…`), if it starts with one: letters, digits,
/// `+ - .`, then `://`.
fn scheme(s: &str) -> Option<&str> {
    let (scheme, _) = s.split_once("://")?;
    let mut chars = scheme.chars();
    (chars.next()?.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)))
    .then_some(scheme)
}

/// `URL` with its password, if any, replaced by `***` (and the query's `password=` too). The
/// credentials are read as the driver reads them: everything before the first `@` (a password
/// may hold `/`, `?` or `:`), the user before its first `:`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (user, rest) = match rest.split_once('@') {
        Some((userinfo, after)) => match userinfo.split_once(':') {
            Some((name, _)) => (format!("{name}:***@"), after),
            None => (format!("{userinfo}@"), after),
        },
        None => (String::new(), rest),
    };
    let rest = match rest.split_once('?') {
        Some((path, query)) => {
            let q: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => kv.to_string(),
                })
                .collect();
            format!("{path}?{}", q.join("&"))
        }
        None => rest.to_string(),
    };
    format!("{scheme}://{user}{rest}")
}

impl Location {
    /// Reads `--db`: `postgres://` or `postgresql://` is a PostgreSQL server, a value with any
    /// other scheme is an error (naming it), anything else a SQLite file.
    pub fn parse(s: &str) -> std::result::Result<Location, String> {
        match scheme(s) {
            Some(sc) if sc.eq_ignore_ascii_case("postgres") || sc.eq_ignore_ascii_case("postgresql") => {
                Ok(Location::Postgres(s.to_string()))
            }
            Some(sc) => Err(format!(
                "{}: slate keeps its state in a SQLite file (a path) or in PostgreSQL (postgres://USER@HOST:PORT/DB), not in {sc}://",
                redact(s)
            )),
            None => Ok(Location::Sqlite(PathBuf::from(s))),
        }
    }

    /// How the location is shown: the path, or the URL without its password.
    pub fn shown(&self) -> String {
        match self {
            Location::Sqlite(p) => p.display().to_string(),
            Location::Postgres(u) => redact(u),
        }
    }
}

struct Lite {
    /// The one connection that writes.
    writer: Mutex<rusqlite::Connection>,
    /// Connections that only read (`PRAGMA query_only`), taken round-robin.
    readers: Vec<Mutex<rusqlite::Connection>>,
    next_reader: std::sync::atomic::AtomicUsize,
}

struct Pg {
    pool: deadpool_postgres::Pool,
    /// Drives the pool's connections; shut down in the background on drop (a runtime may not
    /// be dropped where blocking is not allowed: inside another runtime's task).
    rt: Option<tokio::runtime::Runtime>,
}

impl Drop for Pg {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

enum Backend {
    Lite(Lite),
    Pg(Pg),
}

/// An open state database.
pub struct Db {
    backend: Backend,
    /// The path, or the URL without its password: for messages.
    shown: String,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Db({})", self.shown)
    }
}

impl Db {
    /// Opens (creating if needed) the database at `loc` and brings its schema up to date. A
    /// database written by a newer slate is refused.
    pub fn open(loc: &Location) -> Result<Db> {
        Db::open_with(loc, false)
    }

    /// [`Db::open`] that also rewrites an older manifest in place (`slate db migrate`), when
    /// no other slate process uses the database.
    pub fn open_migrating(loc: &Location) -> Result<Db> {
        Db::open_with(loc, true)
    }

    fn open_with(loc: &Location, migrate: bool) -> Result<Db> {
        let shown = loc.shown();
        let err = |why: String| SlateError::Manifest {
            path: shown.clone(),
            why,
        };
        let backend = match loc {
            Location::Sqlite(path) => Backend::Lite(open_sqlite(path, migrate).map_err(err)?),
            Location::Postgres(url) => Backend::Pg(open_postgres(url, migrate).map_err(err)?),
        };
        let db = Db { backend, shown };
        db.keep_clock()?;
        Ok(db)
    }

    /// On PostgreSQL, measures the server's clock when it is due (at open, then every few
    /// minutes): claims and leases compare times on it.
    fn keep_clock(&self) -> Result<()> {
        if let Backend::Pg(pg) = &self.backend {
            if super::clock::begin() {
                let started = Instant::now();
                let client = self.pg_client(pg, started)?;
                sync_clock(&Conn::Pg(&client)).map_err(|e| self.err(e))?;
            }
        }
        Ok(())
    }

    /// The path, or the URL without its password.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self.backend, Backend::Pg(_))
    }

    fn err(&self, e: impl std::fmt::Display) -> SlateError {
        SlateError::Manifest {
            path: self.shown.clone(),
            why: e.to_string(),
        }
    }

    /// Runs `f` in one write transaction. On PostgreSQL a transaction that collided with
    /// another's, or whose connection dropped before it committed, is run again: `f` must
    /// only touch the database.
    pub fn write<T>(&self, f: impl FnMut(&Conn) -> DbResult<T>) -> Result<T> {
        self.write_as("BEGIN ISOLATION LEVEL SERIALIZABLE", f)
    }

    /// [`Db::write`] at PostgreSQL's READ COMMITTED: for statements that lock what they take
    /// themselves (`FOR UPDATE SKIP LOCKED`), which SERIALIZABLE would only make collide.
    pub fn write_locking<T>(&self, f: impl FnMut(&Conn) -> DbResult<T>) -> Result<T> {
        self.write_as("BEGIN ISOLATION LEVEL READ COMMITTED", f)
    }

    fn write_as<T>(&self, begin: &str, mut f: impl FnMut(&Conn) -> DbResult<T>) -> Result<T> {
        match &self.backend {
            Backend::Lite(l) => {
                let c = l
                    .writer
                    .lock()
                    .map_err(|_| self.err("internal: database lock poisoned"))?;
                c.execute_batch("BEGIN IMMEDIATE")
                    .map_err(|e| self.err(e))?;
                WRITES[0].fetch_add(1, Relaxed);
                match f(&Conn::Lite(&c)) {
                    Ok(v) => match c.execute_batch("COMMIT") {
                        Ok(()) => Ok(v),
                        Err(e) => {
                            let _ = c.execute_batch("ROLLBACK");
                            Err(self.err(e))
                        }
                    },
                    Err(e) => {
                        let _ = c.execute_batch("ROLLBACK");
                        Err(self.err(e))
                    }
                }
            }
            Backend::Pg(pg) => {
                if super::clock::due() {
                    if let Err(e) = self.keep_clock() {
                        tracing::warn!(error = %e, "measuring the database server's clock failed");
                    }
                }
                let started = Instant::now();
                let mut attempt = 0u32;
                loop {
                    attempt += 1;
                    // detached from the pool unless the transaction ended cleanly: a panic in
                    // `f`, or a ROLLBACK that failed, must not hand a connection still inside
                    // a transaction to the next caller
                    let mut held = Detach(Some(self.pg_client(pg, started)?));
                    let Some(client) = held.0.as_ref() else {
                        return Err(self.err("internal: no connection"));
                    };
                    WRITES[1].fetch_add(1, Relaxed);
                    let outcome = (|| {
                        wait(client.batch_execute(begin))?;
                        match f(&Conn::Pg(client)) {
                            Ok(v) => {
                                wait(client.batch_execute("COMMIT")).map_err(|e| {
                                    // a COMMIT whose answer was lost may have landed: not
                                    // run again (a conflict at COMMIT did not land)
                                    match DbError::from(e) {
                                        DbError::Closed(s) => DbError::Other(format!(
                                            "connection lost while committing: {s}"
                                        )),
                                        e => e,
                                    }
                                })?;
                                Ok(v)
                            }
                            Err(e) => Err(e),
                        }
                    })();
                    match outcome {
                        Ok(v) => {
                            held.give_back();
                            return Ok(v);
                        }
                        Err(e) => {
                            if !client.is_closed() && wait(client.batch_execute("ROLLBACK")).is_ok()
                            {
                                held.give_back();
                            }
                            let again = match e {
                                DbError::Conflict(_) => attempt < CONFLICTS.attempts,
                                DbError::Closed(_) => started.elapsed() < PG_RECONNECT,
                                _ => false,
                            };
                            if !again {
                                return Err(self.err(e));
                            }
                            drop(held);
                            std::thread::sleep(CONFLICTS.delay(attempt.saturating_add(1)));
                        }
                    }
                }
            }
        }
    }

    /// Runs reads (each statement sees the latest commits; no transaction around them).
    pub fn read<T>(&self, mut f: impl FnMut(&Conn) -> DbResult<T>) -> Result<T> {
        match &self.backend {
            Backend::Lite(l) => {
                READS[0].fetch_add(1, Relaxed);
                let n = l.readers.len();
                let start = l.next_reader.fetch_add(1, Relaxed);
                for i in 0..n {
                    if let Ok(c) = l.readers[(start + i) % n].try_lock() {
                        return f(&Conn::Lite(&c)).map_err(|e| self.err(e));
                    }
                }
                let c = l.readers[start % n]
                    .lock()
                    .map_err(|_| self.err("internal: database lock poisoned"))?;
                f(&Conn::Lite(&c)).map_err(|e| self.err(e))
            }
            Backend::Pg(pg) => {
                if super::clock::due() {
                    if let Err(e) = self.keep_clock() {
                        tracing::warn!(error = %e, "measuring the database server's clock failed");
                    }
                }
                let started = Instant::now();
                let mut attempt = 1u32;
                loop {
                    let client = self.pg_client(pg, started)?;
                    READS[1].fetch_add(1, Relaxed);
                    match f(&Conn::Pg(&client)) {
                        Ok(v) => return Ok(v),
                        Err(DbError::Closed(_)) if started.elapsed() < PG_RECONNECT => {
                            drop(client);
                            attempt = attempt.saturating_add(1);
                            std::thread::sleep(RECONNECT.delay(attempt));
                        }
                        Err(e) => return Err(self.err(e)),
                    }
                }
            }
        }
    }

    /// Runs statements on the writing connection outside any transaction (SQLite's temporary
    /// tables live on it); on PostgreSQL the same as [`Db::write`].
    pub fn on_writer<T>(&self, f: impl FnMut(&Conn) -> DbResult<T>) -> Result<T> {
        match &self.backend {
            Backend::Lite(l) => {
                let mut f = f;
                let c = l
                    .writer
                    .lock()
                    .map_err(|_| self.err("internal: database lock poisoned"))?;
                f(&Conn::Lite(&c)).map_err(|e| self.err(e))
            }
            Backend::Pg(_) => self.write(f),
        }
    }

    /// A pooled PostgreSQL connection; while the server cannot be reached (a restart), asked
    /// again until [`PG_RECONNECT`] after `since`.
    fn pg_client(&self, pg: &Pg, since: Instant) -> Result<deadpool_postgres::Object> {
        let rt = pg
            .rt
            .as_ref()
            .ok_or_else(|| self.err("internal: the database is closing"))?;
        let mut attempt = 1u32;
        loop {
            let pool = pg.pool.clone();
            let got = wait(rt.spawn(async move { pool.get().await }))
                .map_err(|e| self.err(format!("internal: {e}")))?;
            match got {
                Ok(c) => return Ok(c),
                Err(e) if since.elapsed() < PG_RECONNECT => {
                    tracing::debug!(db = %self.shown, "waiting for PostgreSQL: {e}");
                    attempt = attempt.saturating_add(1);
                    std::thread::sleep(RECONNECT.delay(attempt));
                }
                Err(e) => return Err(self.err(pool_error(e))),
            }
        }
    }
}

/// A pooled connection that goes back to the pool only through [`Detach::give_back`]; dropped
/// otherwise, it is detached and closed.
struct Detach(Option<deadpool_postgres::Object>);

impl Detach {
    fn give_back(&mut self) {
        drop(self.0.take());
    }
}

impl Drop for Detach {
    fn drop(&mut self) {
        if let Some(o) = self.0.take() {
            drop(deadpool_postgres::Object::take(o));
        }
    }
}

fn pool_error(e: deadpool_postgres::PoolError) -> String {
    match e {
        deadpool_postgres::PoolError::Backend(e) => DbError::from(e).to_string(),
        e => e.to_string(),
    }
}

fn open_sqlite(path: &Path, migrate: bool) -> std::result::Result<Lite, String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let e = |e: rusqlite::Error| e.to_string();
    let conn = rusqlite::Connection::open(path).map_err(e)?;
    conn.busy_timeout(Duration::from_secs(30)).map_err(e)?;
    // Switching a new database to WAL needs it to itself for a moment, and SQLite answers
    // "database is locked" at once (without the busy handler) when another process opens it at
    // the same instant: asked again for as long as the busy timeout.
    let started = Instant::now();
    let mut attempt = 1u32;
    loop {
        match conn.execute_batch("PRAGMA journal_mode = WAL;") {
            Ok(()) => break,
            Err(rusqlite::Error::SqliteFailure(f, _))
                if f.code == rusqlite::ErrorCode::DatabaseBusy
                    && WAL_BUSY.deadline.is_some_and(|d| started.elapsed() < d) =>
            {
                attempt = attempt.saturating_add(1);
                std::thread::sleep(WAL_BUSY.delay(attempt));
            }
            Err(err) => return Err(err.to_string()),
        }
    }
    conn.execute_batch(
        "PRAGMA synchronous = NORMAL;
         PRAGMA foreign_keys = ON;
         PRAGMA temp_store = FILE;
         PRAGMA cache_size = -32768;",
    )
    .map_err(e)?;
    // Each migration in its own IMMEDIATE transaction that reads the version again: two
    // processes opening a new database at once must not both apply migration 1.
    let mut conn = conn;
    let known = SQLITE_MIGRATIONS.len() as i64;
    loop {
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(e)?;
        let version: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(e)?;
        if version > known {
            return Err(newer(version, known));
        }
        if version == known {
            break;
        }
        let v = version + 1;
        if v == SQLITE_GATED
            && tx
                .query_row("SELECT EXISTS (SELECT 1 FROM objects)", [], |r| {
                    r.get::<_, bool>(0)
                })
                .map_err(e)?
        {
            manifest_gate(migrate, &sqlite_users(path))?;
        }
        tx.execute_batch(SQLITE_MIGRATIONS[version as usize])
            .map_err(|err| format!("migration {v:04}: {err}"))?;
        tx.execute_batch(&format!("PRAGMA user_version = {v}"))
            .map_err(e)?;
        tx.commit().map_err(e)?;
    }
    let mut readers = Vec::with_capacity(READERS);
    for _ in 0..READERS {
        let r = rusqlite::Connection::open(path).map_err(e)?;
        r.busy_timeout(Duration::from_secs(30)).map_err(e)?;
        r.execute_batch("PRAGMA query_only = ON; PRAGMA cache_size = -2048;")
            .map_err(e)?;
        readers.push(Mutex::new(r));
    }
    Ok(Lite {
        writer: Mutex::new(conn),
        readers,
        next_reader: Default::default(),
    })
}

/// The migrations that rewrite the manifest in place (SQLite's 13, PostgreSQL's 6: one row per
/// key). On a database whose manifest has rows they run only when `slate db migrate` asks
/// ([`Db::open_migrating`]) and no other slate process uses the database: a worker of
/// the old layout would fail on every write after it, so a rolling update across it is
/// refused, and the operator is told to take `slate db backup` first.
const SQLITE_GATED: i64 = 13;
const POSTGRES_GATED: i64 = 6;

fn manifest_gate(allowed: bool, others: &[String]) -> std::result::Result<(), String> {
    if !allowed {
        return Err(
            "its manifest is in the layout of an older slate (two rows per key); this \
             slate keeps one row per key. Stop every slate process that uses it, then run \
             `slate db backup --to FILE` and `slate db migrate` (a rolling update across this \
             change is refused)"
                .into(),
        );
    }
    if !others.is_empty() {
        return Err(format!(
            "other slate processes use it ({}); stop them before `slate db migrate`",
            others.join(", ")
        ));
    }
    Ok(())
}

/// The other processes of this host that hold the SQLite file at `path` open.
fn sqlite_users(path: &Path) -> Vec<String> {
    let me = std::process::id().to_string();
    let Ok(target) = std::fs::canonicalize(path) else {
        return Vec::new();
    };
    let names = [
        target.clone(),
        PathBuf::from(format!("{}-wal", target.display())),
    ];
    let mut users = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return users;
    };
    for p in procs.flatten() {
        let pid = p.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        if fds
            .flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .any(|l| names.contains(&l))
        {
            users.push(format!("pid {pid}"));
        }
    }
    users
}

fn newer(version: i64, known: i64) -> String {
    format!(
        "written by a newer slate (schema version {version}, this slate knows up to {known}); upgrade slate or use another --db"
    )
}

/// The password for a connection with none in its URL: `PGPASSWORD`, else the first match in
/// the password file (`PGPASSFILE`, else `~/.pgpass`), as libpq finds it.
fn password_for(cfg: &tokio_postgres::Config) -> Option<Vec<u8>> {
    if let Some(p) = std::env::var_os("PGPASSWORD") {
        return Some(p.into_encoded_bytes());
    }
    let file = std::env::var_os("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pgpass")))?;
    let text = std::fs::read_to_string(file).ok()?;
    let host = match cfg.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "localhost".to_string(),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432).to_string();
    let db = cfg
        .get_dbname()
        .unwrap_or_else(|| cfg.get_user().unwrap_or(""));
    let user = cfg.get_user().unwrap_or("");
    pgpass_lookup(&text, &host, &port, db, user).map(String::into_bytes)
}

/// The password of the first line of a `.pgpass` text (`host:port:db:user:password`, `*`
/// matching anything, `\:` and `\\` escaped) that matches.
fn pgpass_lookup(text: &str, host: &str, port: &str, db: &str, user: &str) -> Option<String> {
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut fields = Vec::with_capacity(5);
        let mut cur = String::new();
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        cur.push(n);
                    }
                }
                ':' if fields.len() < 4 => fields.push(std::mem::take(&mut cur)),
                c => cur.push(c),
            }
        }
        fields.push(cur);
        if fields.len() != 5 {
            continue;
        }
        let want = [host, port, db, user];
        if fields[..4]
            .iter()
            .zip(want)
            .all(|(f, w)| f == "*" || f == w)
        {
            return fields.pop();
        }
    }
    None
}

fn open_postgres(url: &str, migrate: bool) -> std::result::Result<Pg, String> {
    // libpq's TLS parameters (verify-ca, verify-full, sslrootcert, …) are ours to apply
    let (url, tls) = super::pgtls::strip(url)?;
    let tls = super::pgtls::Connector::new(&tls)?;
    let mut cfg: tokio_postgres::Config = url.parse().map_err(|e: tokio_postgres::Error| {
        format!("not a PostgreSQL URL ({e}); expected postgres://USER@HOST:PORT/DB")
    })?;
    if cfg.get_password().is_none() {
        if let Some(p) = password_for(&cfg) {
            cfg.password(p);
        }
    }
    if cfg.get_application_name().is_none() {
        // who this process is, for the server's session list and `slate db migrate`
        cfg.application_name(format!(
            "slate/{}@{}",
            std::process::id(),
            super::owner::host_id()
        ));
    }
    if cfg.get_connect_timeout().is_none() {
        cfg.connect_timeout(Duration::from_secs(10));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("slate-postgres")
        .enable_all()
        .build()
        .map_err(|e| format!("internal: starting the database runtime: {e}"))?;
    let mgr = deadpool_postgres::Manager::from_config(
        cfg,
        tls,
        deadpool_postgres::ManagerConfig {
            recycling_method: deadpool_postgres::RecyclingMethod::Fast,
        },
    );
    let pool = deadpool_postgres::Pool::builder(mgr)
        .max_size(PG_POOL)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| format!("internal: {e}"))?;
    let pg = Pg { pool, rt: Some(rt) };
    migrate_postgres(&pg, migrate)?;
    Ok(pg)
}

/// Measures the offset of the server's clock from this host's (see [`super::clock`]).
fn sync_clock(c: &Conn) -> DbResult<()> {
    let sent = super::clock::local_ms();
    let server: i64 = c.query_row(
        "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
        &[],
        |r| r.get(0),
    )?;
    super::clock::measured(server, sent, super::clock::local_ms());
    Ok(())
}

/// Applies PostgreSQL's migrations, under a transaction-wide advisory lock so that workers
/// starting together apply each once.
fn migrate_postgres(pg: &Pg, migrate: bool) -> std::result::Result<(), String> {
    let Some(rt) = pg.rt.as_ref() else {
        return Err("internal: no runtime".into());
    };
    let pool = pg.pool.clone();
    let client = wait(rt.spawn(async move { pool.get().await }))
        .map_err(|e| format!("internal: {e}"))?
        .map_err(pool_error)?;
    let known = POSTGRES_MIGRATIONS.len() as i64;
    let e = |e: tokio_postgres::Error| DbError::from(e).to_string();
    wait(client.batch_execute(
        "BEGIN;
         SELECT pg_advisory_xact_lock(7135902841);
         CREATE TABLE IF NOT EXISTS slate_schema (version BIGINT NOT NULL);",
    ))
    .map_err(e)?;
    let version: i64 =
        match wait(client.query_opt("SELECT version FROM slate_schema", &[])).map_err(e)? {
            Some(r) => r.try_get(0).map_err(e)?,
            None => {
                wait(client.batch_execute("INSERT INTO slate_schema VALUES (0)")).map_err(e)?;
                0
            }
        };
    if version > known {
        let _ = wait(client.batch_execute("ROLLBACK"));
        return Err(newer(version, known));
    }
    for v in version..known {
        if v + 1 == POSTGRES_GATED {
            let rows = wait(client.query_one("SELECT EXISTS (SELECT 1 FROM objects)", &[]))
                .and_then(|r| r.try_get::<_, bool>(0));
            let others = wait(client.query(
                "SELECT application_name FROM pg_stat_activity
                 WHERE datname = current_database() AND application_name LIKE 'slate/%'
                   AND application_name <> current_setting('application_name')",
                &[],
            ))
            .map(|rows| {
                rows.iter()
                    .filter_map(|r| r.try_get::<_, String>(0).ok())
                    .collect::<Vec<_>>()
            });
            let gate = match (rows, others) {
                (Ok(false), _) => Ok(()),
                (Ok(true), Ok(mut others)) => {
                    others.sort();
                    others.dedup();
                    manifest_gate(migrate, &others)
                }
                (Err(err), _) | (_, Err(err)) => Err(e(err)),
            };
            if let Err(why) = gate {
                let _ = wait(client.batch_execute("ROLLBACK"));
                return Err(why);
            }
        }
        wait(client.batch_execute(POSTGRES_MIGRATIONS[v as usize]))
            .map_err(|err| format!("migration postgres/{:04}: {}", v + 1, e(err)))?;
    }
    wait(client.execute("UPDATE slate_schema SET version = $1", &[&known])).map_err(e)?;
    wait(client.batch_execute("COMMIT")).map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::db::testing::conformance;

    conformance!(statements_and_transactions_are_counted_per_backend);

    /// A write of 1,000 statements and a read of one add to their backend's counts: at least
    /// (the counts are the process's, and the tests running beside this one add to them too).
    fn statements_and_transactions_are_counted_per_backend(loc: &Location) {
        let db = Db::open(loc).unwrap();
        let i = db.is_postgres() as usize;
        assert_eq!(
            BACKENDS[i],
            if db.is_postgres() {
                "postgres"
            } else {
                "sqlite"
            }
        );
        let before = op_counts()[i].1;
        let sum = db
            .write(|c| {
                let mut sum = 0;
                for n in 0..1_000i64 {
                    sum += c.query_row("SELECT ?1 + 1", params![n], |r| r.get::<_, i64>(0))?;
                }
                Ok(sum)
            })
            .unwrap();
        assert_eq!(sum, 500_500);
        let after_write = op_counts()[i].1;
        assert!(after_write.statements >= before.statements + 1_000);
        assert!(after_write.writes > before.writes);
        let one: i64 = db
            .read(|c| c.query_row("SELECT 1", params![], |r| r.get(0)))
            .unwrap();
        assert_eq!(one, 1);
        let after = op_counts()[i].1;
        assert!(after.statements > after_write.statements);
        assert!(after.reads > after_write.reads);
        assert!(after.writes >= after_write.writes);
    }

    #[test]
    fn parameters_become_postgres_numbers_outside_quotes() {
        for (sql, want) in [
            ("SELECT ?1, ?2", "SELECT $1, $2"),
            ("a = ?10 AND b = ?3", "a = $10 AND b = $3"),
            ("x = ? AND y = ?", "x = $1 AND y = $2"),
            ("x = '?1' AND \"a?\" = ?1", "x = '?1' AND \"a?\" = $1"),
            ("it''s ?2", "it''s $2"),
        ] {
            assert_eq!(to_pg(sql), want, "{sql}");
        }
    }

    #[test]
    fn locations_by_scheme_and_passwords_never_shown() {
        for (arg, want) in [
            ("/var/lib/slate/slate.db", Ok("sqlite")),
            ("rel/slate.db", Ok("sqlite")),
            ("C:\\slate.db", Ok("sqlite")),
            ("postgres://u@h:5432/db", Ok("postgres")),
            ("postgresql://u:pw@h/db", Ok("postgres")),
            ("POSTGRES://u@h/db", Ok("postgres")),
            ("mysql://u:hunter2@h/db", Err("mysql://")),
            ("sqlite://x.db", Err("sqlite://")),
        ] {
            let got = Location::parse(arg).map(|l| match l {
                Location::Sqlite(_) => "sqlite",
                Location::Postgres(_) => "postgres",
            });
            match (got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w, "{arg}"),
                (Err(e), Err(w)) => {
                    assert!(e.contains(w), "{arg}: {e}");
                    assert!(!e.contains("hunter2"), "{e}");
                }
                (g, w) => panic!("{arg}: {g:?}, expected {w:?}"),
            }
        }
        for (url, want) in [
            ("postgres://u:pw@h:1/db", "postgres://u:***@h:1/db"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            (
                "postgres://h/db?password=pw&sslmode=disable",
                "postgres://h/db?password=***&sslmode=disable",
            ),
            ("postgres://u:p@ss@h/db", "postgres://u:***@ss@h/db"),
            ("postgres://u:a/b?c@h:1/db", "postgres://u:***@h:1/db"),
            (
                "postgres://u:x:y@h/db?sslmode=disable",
                "postgres://u:***@h/db?sslmode=disable",
            ),
        ] {
            assert_eq!(redact(url), want);
            assert_eq!(Location::parse(url).unwrap().shown(), want);
        }
    }

    #[test]
    fn pgpass_lines_match_as_libpq_reads_them() {
        let text = "# comment\n\
                    other:5432:*:u:nope\n\
                    h:5440:db:u:first\\:one\n\
                    *:*:*:u:any\n";
        assert_eq!(
            pgpass_lookup(text, "h", "5440", "db", "u").as_deref(),
            Some("first:one")
        );
        assert_eq!(
            pgpass_lookup(text, "h", "5441", "db", "u").as_deref(),
            Some("any")
        );
        assert_eq!(pgpass_lookup(text, "h", "5440", "db", "v"), None);
    }
}

/// The conformance suite's databases: every state test runs once on a SQLite file and once on
/// a database of its own in the test PostgreSQL server (`SLATE_TEST_PG_URL`, which
/// `scripts/services.sh` starts).
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// The test server's URL (a database there that each test's own is made beside).
    pub fn pg_url() -> String {
        std::env::var("SLATE_TEST_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5440/slate_test".into())
    }

    /// Runs `f` with an admin connection to the test server.
    fn admin(sql: &str) {
        let url = pg_url();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|e| {
                    panic!("PostgreSQL at {url}: {e} (scripts/services.sh start postgres)")
                });
            tokio::spawn(conn);
            client.batch_execute(sql).await.unwrap();
        });
    }

    /// A fresh database of its own on the test server, dropped with the value.
    pub struct PgDatabase {
        pub url: String,
        name: String,
    }

    impl PgDatabase {
        pub fn new() -> PgDatabase {
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("slate_t_{}_{n}_{}", std::process::id(), fastrand::u32(..));
            admin(&format!("CREATE DATABASE {name}"));
            let base = pg_url();
            let cut = base.rfind('/').unwrap_or(base.len());
            PgDatabase {
                url: format!("{}/{name}", &base[..cut]),
                name,
            }
        }
    }

    impl Drop for PgDatabase {
        fn drop(&mut self) {
            admin(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }

    /// Runs `case` on a fresh SQLite file.
    pub fn on_sqlite(case: impl FnOnce(&Location)) {
        let dir = tempfile::tempdir().unwrap();
        case(&Location::Sqlite(dir.path().join("sub/slate.db")));
    }

    /// Runs `case` on a fresh PostgreSQL database.
    pub fn on_postgres(case: impl FnOnce(&Location)) {
        let db = PgDatabase::new();
        case(&Location::Postgres(db.url.clone()));
    }

    /// Brings a fresh database at `loc` to the schema of an older slate: migrations up to
    /// SQLite's `sqlite` (PostgreSQL's `postgres`), then runs `sql` there (rows in the old
    /// layout). Opening it with the current code then migrates what is there.
    pub fn at_version(loc: &Location, sqlite: usize, postgres: usize, sql: &str) {
        match loc {
            Location::Sqlite(path) => {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                let c = rusqlite::Connection::open(path).unwrap();
                for m in &SQLITE_MIGRATIONS[..sqlite] {
                    c.execute_batch(m).unwrap();
                }
                c.execute_batch(&format!("PRAGMA user_version = {sqlite}"))
                    .unwrap();
                c.execute_batch(sql).unwrap();
            }
            Location::Postgres(url) => {
                let mut all =
                    String::from("CREATE TABLE slate_schema (version BIGINT NOT NULL);\n");
                for m in &POSTGRES_MIGRATIONS[..postgres] {
                    all.push_str(m);
                    all.push('\n');
                }
                all.push_str(&format!(
                    "INSERT INTO slate_schema VALUES ({postgres});\n{sql}"
                ));
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                        .await
                        .unwrap();
                    tokio::spawn(conn);
                    client.batch_execute(&all).await.unwrap();
                });
            }
        }
    }

    /// Another process using the database at `loc` until the value is dropped: a child that
    /// holds the SQLite file open, or a PostgreSQL session named as a slate worker's.
    pub enum AnotherUser {
        Child(std::process::Child),
        /// Held, not read: the session lives while its runtime drives the connection.
        Session(#[allow(dead_code)] tokio::runtime::Runtime),
    }

    impl Drop for AnotherUser {
        fn drop(&mut self) {
            if let AnotherUser::Child(c) = self {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    pub fn another_user(loc: &Location) -> AnotherUser {
        match loc {
            Location::Sqlite(path) => AnotherUser::Child(
                std::process::Command::new("sleep")
                    .arg("60")
                    .stdin(std::fs::File::open(path).unwrap())
                    .spawn()
                    .unwrap(),
            ),
            Location::Postgres(url) => {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .unwrap();
                let url = format!("{url}?application_name=slate%2F1%40elsewhere");
                let client = rt.block_on(async {
                    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                        .await
                        .unwrap();
                    tokio::spawn(conn);
                    client
                });
                // the session lives as long as the runtime holds its connection task
                std::mem::forget(client);
                AnotherUser::Session(rt)
            }
        }
    }

    /// `conformance!(a, b)`: the state tests `a(&Location)` and `b(&Location)`, each run as
    /// `sqlite::a` and `postgres::a`.
    macro_rules! conformance {
        ($($case:ident),+ $(,)?) => {
            mod sqlite {
                $(#[test]
                fn $case() {
                    $crate::state::db::testing::on_sqlite(super::$case);
                })+
            }
            mod postgres {
                $(#[test]
                fn $case() {
                    $crate::state::db::testing::on_postgres(super::$case);
                })+
            }
        };
    }
    pub(crate) use conformance;
}
