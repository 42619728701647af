//! The campaign journal: one SQLite file per campaign (WAL, FULL sync), versioned major/minor.
//! Every state change is its own committed transaction before the caller goes on, so a `kill -9`
//! at any moment loses nothing already recorded; `events` is an append-only log of those changes.
//! Writers take the write lock at the start of a transaction (IMMEDIATE): a deferred one that read
//! first would fail with "database is locked" when the heartbeat thread wrote in between.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};

use crate::bench_step::BenchSummary;
use crate::classify::Failure;
use crate::{now_ms, CampaignError, Result};

/// The journal's file name inside the campaign directory.
pub const FILE_NAME: &str = "journal.sqlite";
/// Schema major version: a binary refuses a journal with a higher one.
pub const SCHEMA_MAJOR: i64 = 1;
/// Schema minor version: additions an older binary of the same major can ignore. 1 added the
/// `fabrics` table (interconnect measurements, `campaign fabric`); 2 added experiments.slurm_job and
/// server_port (the Slurm executor); 3 added the `calibrations` and `predictions` tables (the
/// box's calibration and the track record, [`crate::verdict`]).
pub const SCHEMA_MINOR: i64 = 3;
/// The minor version that added the `fabrics` table; a journal of an older minor gets the table
/// when its first fabric document is recorded (or when it is opened), and reads as having none until then.
const FABRICS_MINOR: i64 = 1;
/// A running step whose heartbeat is older than this, or whose owner process is gone, is stale.
pub const STALE_AFTER_MS: i64 = 15_000;

const SCHEMA: &str = "
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE campaign(id INTEGER PRIMARY KEY CHECK (id = 1), goal TEXT NOT NULL, model TEXT NOT NULL,
  engine TEXT NOT NULL, settings TEXT NOT NULL, created_at INTEGER NOT NULL);
CREATE TABLE fingerprints(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, hash TEXT NOT NULL, body TEXT NOT NULL,
  created_at INTEGER NOT NULL);
CREATE TABLE experiments(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, title TEXT NOT NULL,
  knobs TEXT NOT NULL, origin TEXT NOT NULL, state TEXT NOT NULL, failure TEXT, attempt INTEGER NOT NULL DEFAULT 0,
  env_fingerprint INTEGER, fingerprint INTEGER, log_path TEXT, bench_path TEXT, result TEXT, owner_pid INTEGER,
  server_pgid INTEGER, heartbeat_at INTEGER, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
  slurm_job INTEGER, server_port INTEGER);
CREATE TABLE events(id INTEGER PRIMARY KEY, at INTEGER NOT NULL, experiment INTEGER, from_state TEXT,
  to_state TEXT NOT NULL, detail TEXT NOT NULL);
CREATE TABLE findings(id INTEGER PRIMARY KEY, source TEXT NOT NULL, code TEXT NOT NULL, severity TEXT NOT NULL,
  title TEXT NOT NULL, evidence TEXT NOT NULL, fix TEXT NOT NULL, experiment INTEGER, created_at INTEGER NOT NULL);
CREATE TABLE tasks(id INTEGER PRIMARY KEY, title TEXT NOT NULL, state TEXT NOT NULL, experiment INTEGER,
  question INTEGER, updated_at INTEGER NOT NULL);
CREATE TABLE questions(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, text TEXT NOT NULL, how TEXT NOT NULL,
  gain REAL, evidence TEXT NOT NULL, state TEXT NOT NULL, answer TEXT, created_at INTEGER NOT NULL,
  answered_at INTEGER);
CREATE TABLE notes(id INTEGER PRIMARY KEY, at INTEGER NOT NULL, text TEXT NOT NULL);
";

/// Minor 1: one `servetune fabric p2p --json` document per row, measured in the environment of
/// probe fingerprint `env_fingerprint`; `source` is the file it was read from.
const FABRICS_TABLE: &str = "
CREATE TABLE IF NOT EXISTS fabrics(id INTEGER PRIMARY KEY, env_fingerprint INTEGER NOT NULL REFERENCES fingerprints(id),
  source TEXT NOT NULL, body TEXT NOT NULL, created_at INTEGER NOT NULL);
";

/// Minor 3: the model fitted to an experiment's sweep (`calibrations`, one per measured
/// experiment, keyed by the environment it was measured in) and every prediction the campaign
/// acted on (`predictions`: a measured experiment's points, or a step's gain), as JSON bodies
/// ([`crate::verdict`]).
pub(crate) const VERDICT_TABLES: &str = "
CREATE TABLE IF NOT EXISTS calibrations(id INTEGER PRIMARY KEY, experiment INTEGER NOT NULL, env_hash TEXT NOT NULL,
  fabric INTEGER, body TEXT NOT NULL, created_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS predictions(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, experiment INTEGER, question INTEGER,
  body TEXT NOT NULL, created_at INTEGER NOT NULL);
";

/// An experiment's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpState {
    /// Queued, not started.
    Planned,
    /// The server process is starting.
    Launching,
    /// The server answered /health and a one-token generation.
    Ready,
    /// The bench sweep is running.
    Benchmarking,
    /// Benchmarked and torn down.
    Done,
    /// Failed; the failure record says which kind and why.
    Failed,
    /// Not run (superseded or declined).
    Skipped,
    /// Stopped by Ctrl-C; `continue` runs it again.
    Interrupted,
}

impl ExpState {
    /// The name stored in the journal.
    pub fn as_str(self) -> &'static str {
        match self {
            ExpState::Planned => "planned",
            ExpState::Launching => "launching",
            ExpState::Ready => "ready",
            ExpState::Benchmarking => "benchmarking",
            ExpState::Done => "done",
            ExpState::Failed => "failed",
            ExpState::Skipped => "skipped",
            ExpState::Interrupted => "interrupted",
        }
    }

    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "planned" => ExpState::Planned,
            "launching" => ExpState::Launching,
            "ready" => ExpState::Ready,
            "benchmarking" => ExpState::Benchmarking,
            "done" => ExpState::Done,
            "failed" => ExpState::Failed,
            "skipped" => ExpState::Skipped,
            "interrupted" => ExpState::Interrupted,
            other => return Err(CampaignError::Runtime(format!("journal: unknown experiment state {other:?}"))),
        })
    }

    /// A server may be up in this state.
    pub fn is_active(self) -> bool {
        matches!(self, ExpState::Launching | ExpState::Ready | ExpState::Benchmarking)
    }

    /// Finished for good (done, failed or skipped).
    pub fn is_final(self) -> bool {
        matches!(self, ExpState::Done | ExpState::Failed | ExpState::Skipped)
    }
}

/// A task's state in the status report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Finished (an experiment done, failed or skipped; a question answered).
    Done,
    /// Running now.
    InProgress,
    /// Planned, or waiting on a person.
    NotDone,
}

impl TaskState {
    fn as_str(self) -> &'static str {
        match self {
            TaskState::Done => "done",
            TaskState::InProgress => "in_progress",
            TaskState::NotDone => "not_done",
        }
    }

    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "done" => TaskState::Done,
            "in_progress" => TaskState::InProgress,
            "not_done" => TaskState::NotDone,
            other => return Err(CampaignError::Runtime(format!("journal: unknown task state {other:?}"))),
        })
    }

    fn of(s: ExpState) -> Self {
        match s {
            s if s.is_final() => TaskState::Done,
            s if s.is_active() => TaskState::InProgress,
            _ => TaskState::NotDone,
        }
    }
}

/// A question's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuestionState {
    /// Waiting for a person.
    Open,
    /// The person did it (`answer --done`).
    Done,
    /// The person will not do it (`answer --declined`).
    Declined,
    /// Answered in words.
    Answered,
}

impl QuestionState {
    /// The name stored in the journal.
    pub fn as_str(self) -> &'static str {
        match self {
            QuestionState::Open => "open",
            QuestionState::Done => "done",
            QuestionState::Declined => "declined",
            QuestionState::Answered => "answered",
        }
    }

    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "open" => QuestionState::Open,
            "done" => QuestionState::Done,
            "declined" => QuestionState::Declined,
            "answered" => QuestionState::Answered,
            other => return Err(CampaignError::Runtime(format!("journal: unknown question state {other:?}"))),
        })
    }
}

/// The campaign row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CampaignRow {
    /// The goal as the user wrote it.
    pub goal: String,
    pub model: String,
    pub engine: String,
    /// The resolved settings (engine template, bench plan, box overrides) as JSON.
    pub settings: String,
    pub created_at: i64,
}

/// A fingerprint: of the box (`probe`) or of one experiment's launch (`experiment`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FingerprintRow {
    pub id: i64,
    pub kind: String,
    /// Stable hash of the body's identifying parts (what makes two environments the same).
    pub hash: String,
    pub body: serde_json::Value,
    pub created_at: i64,
}

/// One experiment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Experiment {
    pub id: i64,
    /// Idempotent key: engine, knobs and environment hash.
    pub key: String,
    pub title: String,
    pub knobs: BTreeMap<String, String>,
    /// Why it was planned (the planner step or the person who added it).
    pub origin: String,
    pub state: ExpState,
    pub failure: Option<Failure>,
    pub attempt: i64,
    pub env_fingerprint: Option<i64>,
    pub fingerprint: Option<i64>,
    pub log_path: Option<String>,
    pub bench_path: Option<String>,
    pub result: Option<BenchSummary>,
    pub owner_pid: Option<i64>,
    pub server_pgid: Option<i64>,
    pub heartbeat_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    /// The Slurm job of the current attempt (Slurm executor).
    pub slurm_job: Option<u64>,
    /// The port the current attempt's server listens on (Slurm executor).
    pub server_port: Option<u16>,
}

/// A finding from the probe, a server log or the analysis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FindingRow {
    pub id: i64,
    pub source: String,
    pub code: String,
    pub severity: String,
    pub title: String,
    pub evidence: String,
    pub fix: String,
    pub experiment: Option<i64>,
}

/// A task of the status report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskRow {
    pub id: i64,
    pub title: String,
    pub state: TaskState,
    pub experiment: Option<i64>,
    pub question: Option<i64>,
}

/// A question for a person.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuestionRow {
    pub id: i64,
    pub key: String,
    pub text: String,
    /// How to act on it, in words.
    pub how: String,
    /// Expected gain as a factor over the current best (1.6 = +60%), when the model predicts one.
    pub gain: Option<f64>,
    /// Journal ids the question rests on, e.g. "finding 3".
    pub evidence: Vec<String>,
    pub state: QuestionState,
    pub answer: Option<String>,
}

/// One state change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRow {
    pub id: i64,
    pub at: i64,
    pub experiment: Option<i64>,
    pub from_state: Option<String>,
    pub to_state: String,
    pub detail: String,
}

/// A note.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NoteRow {
    pub id: i64,
    pub at: i64,
    pub text: String,
}

/// An interconnect measurement (`servetune fabric p2p --json`) recorded for an environment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FabricRow {
    pub id: i64,
    /// The probe fingerprint of the environment it was measured in.
    pub env_fingerprint: i64,
    /// The file it was read from.
    pub source: String,
    /// The whole fabric document.
    pub body: serde_json::Value,
    pub created_at: i64,
}

/// An open journal.
#[derive(Debug)]
pub struct Journal {
    conn: Connection,
    path: PathBuf,
}

/// The journal's path in `dir`.
pub fn path_in(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // FULL: a commit survives power loss too, not only a killed process.
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(())
}

/// An SQLite error on the journal at `path` in words that name the cause and the fix: another
/// process holding it, a directory or file the user cannot write, a full disk; `None` for the
/// errors that mean the file itself is damaged.
fn environment_error(path: &Path, e: &rusqlite::Error) -> Option<CampaignError> {
    use rusqlite::ErrorCode as C;
    let code = e.sqlite_error_code()?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let msg = match code {
        C::DatabaseBusy | C::DatabaseLocked => format!(
            "{}: locked by another process (another servetune campaign command on this campaign, or a program reading it) for over 10 s; wait for it to finish, or stop it (fuser {} names it)",
            path.display(),
            path.display()
        ),
        C::ReadOnly | C::CannotOpen | C::PermissionDenied if !writable(dir) || !writable(path) => format!(
            "{}: cannot write the journal there (permission denied or a read-only file system: the journal writes {} and its -wal and -shm files beside it); run as a user who can write {}, or copy the campaign directory somewhere writable",
            path.display(),
            path.display(),
            dir.display()
        ),
        C::DiskFull => format!("{}: the disk is full; free space on {} and run the command again (nothing measured is lost: the journal commits each step)", path.display(), dir.display()),
        _ => return None,
    };
    Some(CampaignError::Runtime(msg))
}

/// Whether this process may write `p` (a file or a directory).
fn writable(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else { return false };
    access_w(&c)
}

#[expect(unsafe_code, reason = "access(2) only checks a path's permissions; the string is NUL-terminated and borrowed")]
fn access_w(c: &std::ffi::CStr) -> bool {
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Checks the file read-only: SQLite's integrity check, then the schema version. Writes nothing.
fn check(path: &Path) -> Result<()> {
    let corrupt = |detail: String| {
        CampaignError::Input(format!(
            "{}: the journal is corrupt; SQLite's integrity check says: {detail}. Nothing was written to it: restore it from a backup, or start a new campaign directory",
            path.display()
        ))
    };
    let damaged = |e: rusqlite::Error| environment_error(path, &e).unwrap_or_else(|| corrupt(e.to_string()));
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX).map_err(damaged)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    let mut stmt = conn.prepare("PRAGMA integrity_check").map_err(damaged)?;
    let lines: Vec<String> =
        stmt.query_map([], |r| r.get::<_, String>(0)).and_then(|rows| rows.collect::<std::result::Result<_, _>>()).map_err(damaged)?;
    if lines != ["ok"] {
        return Err(corrupt(lines.join("; ")));
    }
    let meta = |k: &str| -> Result<Option<i64>> {
        let v: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [k], |r| r.get(0))
            .optional()
            .map_err(|e| corrupt(format!("no schema version ({e})")))?;
        Ok(v.and_then(|s| s.parse().ok()))
    };
    let major = meta("schema_major")?.ok_or_else(|| corrupt("no schema_major in meta".into()))?;
    let minor = meta("schema_minor")?.unwrap_or(0);
    if major > SCHEMA_MAJOR {
        return Err(CampaignError::Input(format!(
            "{}: written by a newer servetune (journal schema {major}.{minor}; this binary reads {SCHEMA_MAJOR}.x): use that newer servetune for this campaign",
            path.display()
        )));
    }
    Ok(())
}

/// Brings a journal of an older minor version up to this one (additions only, in one transaction):
/// the `fabrics` table (1.1), experiments.slurm_job / server_port (1.2) and the `calibrations` and
/// `predictions` tables (1.3), each added when missing.
fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let minor: i64 = conn
        .query_row("SELECT value FROM meta WHERE key = 'schema_minor'", [], |r| r.get::<_, String>(0))
        .optional()?
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if minor >= SCHEMA_MINOR {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(FABRICS_TABLE)?;
    tx.execute_batch(VERDICT_TABLES)?;
    let has_job: i64 = tx.query_row("SELECT COUNT(*) FROM pragma_table_info('experiments') WHERE name = 'slurm_job'", [], |r| r.get(0))?;
    if has_job == 0 {
        tx.execute_batch("ALTER TABLE experiments ADD COLUMN slurm_job INTEGER; ALTER TABLE experiments ADD COLUMN server_port INTEGER;")?;
    }
    tx.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_minor', ?1)", [SCHEMA_MINOR.to_string()])?;
    tx.commit()?;
    Ok(())
}

impl Journal {
    /// Every row `sql` selects (no parameters), mapped by `row`.
    fn all<T>(&self, sql: &str, row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>) -> Result<Vec<T>> {
        let mut st = self.conn.prepare(sql)?;
        let rows = st.query_map([], row)?.collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Creates the journal in `dir` (which must not hold one).
    pub fn create(dir: &Path, c: &CampaignRow) -> Result<Self> {
        let path = path_in(dir);
        if path.exists() {
            return Err(CampaignError::Input(format!(
                "{} already holds a campaign ({}): continue it, or give a new directory",
                dir.display(),
                path.display()
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| CampaignError::Runtime(format!("{}: cannot create it ({e})", dir.display())))?;
        let mut conn = Connection::open(&path)?;
        configure(&conn)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch(SCHEMA)?;
        tx.execute_batch(FABRICS_TABLE)?;
        tx.execute_batch(VERDICT_TABLES)?;
        tx.execute(
            "INSERT INTO meta(key, value) VALUES ('schema_major', ?1), ('schema_minor', ?2)",
            params![SCHEMA_MAJOR.to_string(), SCHEMA_MINOR.to_string()],
        )?;
        tx.execute(
            "INSERT INTO campaign(id, goal, model, engine, settings, created_at) VALUES (1, ?1, ?2, ?3, ?4, ?5)",
            params![c.goal, c.model, c.engine, c.settings, c.created_at],
        )?;
        tx.execute(
            "INSERT INTO events(at, to_state, detail) VALUES (?1, 'created', ?2)",
            params![now_ms(), format!("campaign created: goal {}", c.goal)],
        )?;
        tx.commit()?;
        Ok(Self { conn, path })
    }

    /// Opens the journal in `dir` after checking it read-only (integrity, version).
    pub fn open(dir: &Path) -> Result<Self> {
        let path = path_in(dir);
        if !path.is_file() {
            return Err(CampaignError::Input(format!(
                "{} holds no campaign (no {FILE_NAME}): start one with servetune campaign init {} --engine NAME --model M --goal G",
                dir.display(),
                dir.display()
            )));
        }
        check(&path)?;
        let named = |e: CampaignError| match e {
            CampaignError::Runtime(m) => CampaignError::Runtime(format!("{}: {m}", path.display())),
            other => other,
        };
        let said = |e: rusqlite::Error| environment_error(&path, &e).unwrap_or_else(|| named(e.into()));
        let mut conn =
            Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX).map_err(said)?;
        configure(&conn).map_err(said)?;
        migrate(&mut conn).map_err(said)?;
        Ok(Self { conn, path })
    }

    /// The connection, for the tables another module owns ([`crate::verdict`]).
    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The campaign row.
    pub fn campaign(&self) -> Result<CampaignRow> {
        Ok(self.conn.query_row("SELECT goal, model, engine, settings, created_at FROM campaign WHERE id = 1", [], |r| {
            Ok(CampaignRow { goal: r.get(0)?, model: r.get(1)?, engine: r.get(2)?, settings: r.get(3)?, created_at: r.get(4)? })
        })?)
    }

    /// Records a fingerprint; returns its id (an identical one of the same kind is reused).
    pub fn add_fingerprint(&self, kind: &str, hash: &str, body: &serde_json::Value) -> Result<i64> {
        let text = body.to_string();
        if let Some(id) = self
            .conn
            .query_row("SELECT id FROM fingerprints WHERE kind = ?1 AND hash = ?2 AND body = ?3", params![kind, hash, text], |r| r.get(0))
            .optional()?
        {
            return Ok(id);
        }
        self.conn.execute(
            "INSERT INTO fingerprints(kind, hash, body, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![kind, hash, text, now_ms()],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// The fingerprint `id`.
    pub fn fingerprint(&self, id: i64) -> Result<Option<FingerprintRow>> {
        Ok(self.conn.query_row("SELECT id, kind, hash, body, created_at FROM fingerprints WHERE id = ?1", [id], fp_row).optional()?)
    }

    /// The newest fingerprint of `kind`.
    pub fn latest_fingerprint(&self, kind: &str) -> Result<Option<FingerprintRow>> {
        Ok(self
            .conn
            .query_row("SELECT id, kind, hash, body, created_at FROM fingerprints WHERE kind = ?1 ORDER BY id DESC LIMIT 1", [kind], fp_row)
            .optional()?)
    }

    /// Every fingerprint, oldest first.
    pub fn fingerprints(&self) -> Result<Vec<FingerprintRow>> {
        self.all("SELECT id, kind, hash, body, created_at FROM fingerprints ORDER BY id", fp_row)
    }

    /// Plans an experiment and its task in one transaction. `Ok(None)` when its key exists already.
    pub fn plan_experiment(
        &mut self,
        key: &str,
        title: &str,
        knobs: &BTreeMap<String, String>,
        origin: &str,
        env_fp: Option<i64>,
    ) -> Result<Option<i64>> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let exists: Option<i64> = tx.query_row("SELECT id FROM experiments WHERE key = ?1", [key], |r| r.get(0)).optional()?;
        if exists.is_some() {
            return Ok(None);
        }
        let now = now_ms();
        let knobs_json = serde_json::to_string(knobs).map_err(|e| CampaignError::Runtime(e.to_string()))?;
        tx.execute(
            "INSERT INTO experiments(key, title, knobs, origin, state, env_fingerprint, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, 'planned', ?5, ?6, ?6)",
            params![key, title, knobs_json, origin, env_fp, now],
        )?;
        let id = tx.last_insert_rowid();
        tx.execute("INSERT INTO tasks(title, state, experiment, updated_at) VALUES (?1, 'not_done', ?2, ?3)", params![title, id, now])?;
        tx.execute(
            "INSERT INTO events(at, experiment, to_state, detail) VALUES (?1, ?2, 'planned', ?3)",
            params![now, id, format!("{title} ({origin})")],
        )?;
        tx.commit()?;
        Ok(Some(id))
    }

    /// Moves experiment `id` from `from` to `to` (refused when it is not in `from`), with the
    /// fields in `set`, its task and an event, in one transaction.
    pub fn transition(&mut self, id: i64, from: &[ExpState], to: ExpState, set: &Update, detail: &str) -> Result<()> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let cur: String = tx.query_row("SELECT state FROM experiments WHERE id = ?1", [id], |r| r.get(0))?;
        let cur = ExpState::parse(&cur)?;
        if !from.contains(&cur) {
            return Err(CampaignError::Runtime(format!(
                "experiment {id} is {}, not {:?}: another servetune changed it",
                cur.as_str(),
                from
            )));
        }
        let now = now_ms();
        let failure = set.failure.as_ref().map(serde_json::to_string).transpose().map_err(|e| CampaignError::Runtime(e.to_string()))?;
        let result = set.result.as_ref().map(serde_json::to_string).transpose().map_err(|e| CampaignError::Runtime(e.to_string()))?;
        tx.execute(
            "UPDATE experiments SET state = ?2, updated_at = ?3,
               failure = CASE WHEN ?4 IS NOT NULL THEN ?4 WHEN ?2 = 'planned' THEN NULL ELSE failure END,
               result = COALESCE(?5, result), log_path = COALESCE(?6, log_path), bench_path = COALESCE(?7, bench_path),
               fingerprint = COALESCE(?8, fingerprint), owner_pid = CASE WHEN ?9 THEN ?10 ELSE owner_pid END,
               server_pgid = CASE WHEN ?9 THEN ?11 ELSE server_pgid END, heartbeat_at = ?3,
               attempt = attempt + ?12, env_fingerprint = COALESCE(?13, env_fingerprint)
             WHERE id = ?1",
            params![
                id,
                to.as_str(),
                now,
                failure,
                result,
                set.log_path,
                set.bench_path,
                set.fingerprint,
                set.owner.is_some(),
                set.owner.map(|o| o.pid),
                set.owner.and_then(|o| o.pgid),
                i64::from(set.new_attempt),
                set.env_fingerprint,
            ],
        )?;
        tx.execute("UPDATE tasks SET state = ?2, updated_at = ?3 WHERE experiment = ?1", params![id, TaskState::of(to).as_str(), now])?;
        tx.execute(
            "INSERT INTO events(at, experiment, from_state, to_state, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![now, id, cur.as_str(), to.as_str(), detail],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Stamps the heartbeat of a running experiment.
    pub fn heartbeat(&self, id: i64) -> Result<()> {
        self.conn.execute("UPDATE experiments SET heartbeat_at = ?2 WHERE id = ?1", params![id, now_ms()])?;
        Ok(())
    }

    /// Sets the server's process group of a launching experiment (so a stale step can be cleaned up).
    pub fn set_server_pgid(&self, id: i64, pgid: i64) -> Result<()> {
        self.conn.execute("UPDATE experiments SET server_pgid = ?2, heartbeat_at = ?3 WHERE id = ?1", params![id, pgid, now_ms()])?;
        Ok(())
    }

    /// Records the Slurm job of a launching experiment and the port its server listens on, so a
    /// later `continue` can re-attach to it or cancel it.
    pub fn set_slurm_job(&self, id: i64, job: u64, port: u16) -> Result<()> {
        self.conn.execute(
            "UPDATE experiments SET slurm_job = ?2, server_port = ?3, server_pgid = NULL, heartbeat_at = ?4 WHERE id = ?1",
            params![id, job as i64, i64::from(port), now_ms()],
        )?;
        Ok(())
    }

    /// Every experiment, oldest first.
    pub fn experiments(&self) -> Result<Vec<Experiment>> {
        let rows = self.all(EXP_SELECT, exp_row)?;
        rows.into_iter().map(|r| r.decode()).collect()
    }

    /// The experiment `id`.
    pub fn experiment(&self, id: i64) -> Result<Experiment> {
        let mut st = self.conn.prepare(&format!("{EXP_SELECT_BASE} WHERE id = ?1"))?;
        let raw = st.query_row([id], exp_row)?;
        raw.decode()
    }

    /// Adds a finding unless the same (source, code, experiment) is recorded; returns its id.
    pub fn add_finding(&self, f: &NewFinding<'_>) -> Result<i64> {
        if let Some(id) = self
            .conn
            .query_row(
                "SELECT id FROM findings WHERE source = ?1 AND code = ?2 AND experiment IS ?3 AND evidence = ?4",
                params![f.source, f.code, f.experiment, f.evidence],
                |r| r.get(0),
            )
            .optional()?
        {
            return Ok(id);
        }
        self.conn.execute(
            "INSERT INTO findings(source, code, severity, title, evidence, fix, experiment, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![f.source, f.code, f.severity, f.title, f.evidence, f.fix, f.experiment, now_ms()],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Every finding, oldest first.
    pub fn findings(&self) -> Result<Vec<FindingRow>> {
        self.all("SELECT id, source, code, severity, title, evidence, fix, experiment FROM findings ORDER BY id", |r| {
            Ok(FindingRow {
                id: r.get(0)?,
                source: r.get(1)?,
                code: r.get(2)?,
                severity: r.get(3)?,
                title: r.get(4)?,
                evidence: r.get(5)?,
                fix: r.get(6)?,
                experiment: r.get(7)?,
            })
        })
    }

    /// Asks a question (and opens its task) unless one with `key` exists; returns its id.
    pub fn ask(&mut self, key: &str, text: &str, how: &str, gain: Option<f64>, evidence: &[String]) -> Result<i64> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if let Some(id) = tx.query_row("SELECT id FROM questions WHERE key = ?1", [key], |r| r.get(0)).optional()? {
            return Ok(id);
        }
        let now = now_ms();
        let ev = serde_json::to_string(evidence).map_err(|e| CampaignError::Runtime(e.to_string()))?;
        tx.execute(
            "INSERT INTO questions(key, text, how, gain, evidence, state, created_at) VALUES (?1, ?2, ?3, ?4, ?5, 'open', ?6)",
            params![key, text, how, gain, ev, now],
        )?;
        let id = tx.last_insert_rowid();
        tx.execute("INSERT INTO tasks(title, state, question, updated_at) VALUES (?1, 'not_done', ?2, ?3)", params![text, id, now])?;
        tx.execute("INSERT INTO events(at, to_state, detail) VALUES (?1, 'asked', ?2)", params![now, format!("question {id}: {text}")])?;
        tx.commit()?;
        Ok(id)
    }

    /// Records the answer to open question `id`.
    pub fn answer(&mut self, id: i64, state: QuestionState, text: Option<&str>) -> Result<()> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let cur: Option<String> = tx.query_row("SELECT state FROM questions WHERE id = ?1", [id], |r| r.get(0)).optional()?;
        match cur.as_deref().map(QuestionState::parse).transpose()? {
            None => return Err(CampaignError::Input(format!("there is no question {id}: servetune campaign status lists the open ones"))),
            Some(QuestionState::Open) => {}
            Some(s) => {
                return Err(CampaignError::Input(format!(
                    "question {id} is already answered ({}): ask servetune campaign next for what is open now",
                    s.as_str()
                )))
            }
        }
        let now = now_ms();
        tx.execute("UPDATE questions SET state = ?2, answer = ?3, answered_at = ?4 WHERE id = ?1", params![id, state.as_str(), text, now])?;
        tx.execute("UPDATE tasks SET state = 'done', updated_at = ?2 WHERE question = ?1", params![id, now])?;
        tx.execute(
            "INSERT INTO events(at, to_state, detail) VALUES (?1, 'answered', ?2)",
            params![now, format!("question {id}: {}", state.as_str())],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Every question, oldest first.
    pub fn questions(&self) -> Result<Vec<QuestionRow>> {
        let mut st = self.conn.prepare("SELECT id, key, text, how, gain, evidence, state, answer FROM questions ORDER BY id")?;
        let raw = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, Option<f64>>(4)?,
                    r.get::<_, String>(5)?,
                    r.get::<_, String>(6)?,
                    r.get::<_, Option<String>>(7)?,
                ))
            })?
            .collect::<std::result::Result<Vec<_>, _>>()?;
        raw.into_iter()
            .map(|(id, key, text, how, gain, ev, state, answer)| {
                Ok(QuestionRow {
                    id,
                    key,
                    text,
                    how,
                    gain,
                    evidence: serde_json::from_str(&ev)
                        .map_err(|e| CampaignError::Runtime(format!("journal: question {id} evidence: {e}")))?,
                    state: QuestionState::parse(&state)?,
                    answer,
                })
            })
            .collect()
    }

    /// Every task, oldest first.
    pub fn tasks(&self) -> Result<Vec<TaskRow>> {
        let mut st = self.conn.prepare("SELECT id, title, state, experiment, question FROM tasks ORDER BY id")?;
        let raw = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                ))
            })?
            .collect::<std::result::Result<Vec<_>, _>>()?;
        raw.into_iter()
            .map(|(id, title, state, experiment, question)| {
                Ok(TaskRow { id, title, state: TaskState::parse(&state)?, experiment, question })
            })
            .collect()
    }

    /// Adds a free-text note.
    pub fn add_note(&self, text: &str) -> Result<i64> {
        self.conn.execute("INSERT INTO notes(at, text) VALUES (?1, ?2)", params![now_ms(), text])?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Every note, oldest first.
    pub fn notes(&self) -> Result<Vec<NoteRow>> {
        self.all("SELECT id, at, text FROM notes ORDER BY id", |r| Ok(NoteRow { id: r.get(0)?, at: r.get(1)?, text: r.get(2)? }))
    }

    /// Every event, oldest first.
    pub fn events(&self) -> Result<Vec<EventRow>> {
        self.all("SELECT id, at, experiment, from_state, to_state, detail FROM events ORDER BY id", |r| {
            Ok(EventRow {
                id: r.get(0)?,
                at: r.get(1)?,
                experiment: r.get(2)?,
                from_state: r.get(3)?,
                to_state: r.get(4)?,
                detail: r.get(5)?,
            })
        })
    }

    /// Records a fabric document measured in the environment of probe fingerprint `env_fp`;
    /// returns its id (the same document for the same environment is recorded once). A journal
    /// of an older minor version gets the `fabrics` table here.
    pub fn add_fabric(&mut self, env_fp: i64, source: &str, body: &serde_json::Value) -> Result<i64> {
        let text = body.to_string();
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch(FABRICS_TABLE)?;
        tx.execute(
            "INSERT INTO meta(key, value) VALUES ('schema_minor', ?1)
               ON CONFLICT(key) DO UPDATE SET value = excluded.value WHERE CAST(meta.value AS INTEGER) < ?2",
            params![FABRICS_MINOR.to_string(), FABRICS_MINOR],
        )?;
        let known: Option<i64> = tx
            .query_row("SELECT id FROM fabrics WHERE env_fingerprint = ?1 AND body = ?2", params![env_fp, text], |r| r.get(0))
            .optional()?;
        if let Some(id) = known {
            tx.commit()?;
            return Ok(id);
        }
        let now = now_ms();
        tx.execute(
            "INSERT INTO fabrics(env_fingerprint, source, body, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![env_fp, source, text, now],
        )?;
        let id = tx.last_insert_rowid();
        tx.execute(
            "INSERT INTO events(at, to_state, detail) VALUES (?1, 'fabric', ?2)",
            params![now, format!("fabric record {id}: {source} for environment fingerprint {env_fp}")],
        )?;
        tx.commit()?;
        Ok(id)
    }

    /// Every fabric record, oldest first (none in a journal older than minor 1).
    pub fn fabrics(&self) -> Result<Vec<FabricRow>> {
        let has: i64 =
            self.conn.query_row("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'fabrics'", [], |r| r.get(0))?;
        if has == 0 {
            return Ok(Vec::new());
        }
        let rows = self.all("SELECT id, env_fingerprint, source, body, created_at FROM fabrics ORDER BY id", |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?, r.get::<_, i64>(4)?))
        })?;
        rows.into_iter()
            .map(|(id, env_fingerprint, source, body, created_at)| {
                let body = serde_json::from_str(&body).map_err(|e| CampaignError::Runtime(format!("journal: fabric record {id}: {e}")))?;
                Ok(FabricRow { id, env_fingerprint, source, body, created_at })
            })
            .collect()
    }

    /// Records an event that is not an experiment's state change (e.g. a re-probe).
    pub fn add_event(&self, to_state: &str, detail: &str) -> Result<()> {
        self.conn.execute("INSERT INTO events(at, to_state, detail) VALUES (?1, ?2, ?3)", params![now_ms(), to_state, detail])?;
        Ok(())
    }
}

/// A finding to record.
#[derive(Debug, Clone)]
pub struct NewFinding<'a> {
    pub source: &'a str,
    pub code: &'a str,
    pub severity: &'a str,
    pub title: &'a str,
    pub evidence: &'a str,
    pub fix: &'a str,
    pub experiment: Option<i64>,
}

/// Who runs an experiment: this process and, once launched, the server's process group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Owner {
    pub pid: i64,
    pub pgid: Option<i64>,
}

/// Fields a transition sets (None leaves a field as it is).
#[derive(Debug, Clone, Default)]
pub struct Update {
    pub failure: Option<Failure>,
    pub result: Option<BenchSummary>,
    pub log_path: Option<String>,
    pub bench_path: Option<String>,
    pub fingerprint: Option<i64>,
    pub env_fingerprint: Option<i64>,
    /// Set (or, with `Some(Owner{..})`, replace) the owner; `None` keeps it.
    pub owner: Option<Owner>,
    /// Count a new attempt.
    pub new_attempt: bool,
}

const EXP_SELECT_BASE: &str = "SELECT id, key, title, knobs, origin, state, failure, attempt, env_fingerprint, fingerprint, log_path, bench_path, result, owner_pid, server_pgid, heartbeat_at, created_at, updated_at, slurm_job, server_port FROM experiments";
const EXP_SELECT: &str = "SELECT id, key, title, knobs, origin, state, failure, attempt, env_fingerprint, fingerprint, log_path, bench_path, result, owner_pid, server_pgid, heartbeat_at, created_at, updated_at, slurm_job, server_port FROM experiments ORDER BY id";

/// An experiment row before its JSON columns are decoded.
struct RawExperiment {
    id: i64,
    key: String,
    title: String,
    knobs: String,
    origin: String,
    state: String,
    failure: Option<String>,
    attempt: i64,
    env_fingerprint: Option<i64>,
    fingerprint: Option<i64>,
    log_path: Option<String>,
    bench_path: Option<String>,
    result: Option<String>,
    owner_pid: Option<i64>,
    server_pgid: Option<i64>,
    heartbeat_at: Option<i64>,
    created_at: i64,
    updated_at: i64,
    slurm_job: Option<i64>,
    server_port: Option<i64>,
}

fn exp_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawExperiment> {
    Ok(RawExperiment {
        id: r.get(0)?,
        key: r.get(1)?,
        title: r.get(2)?,
        knobs: r.get(3)?,
        origin: r.get(4)?,
        state: r.get(5)?,
        failure: r.get(6)?,
        attempt: r.get(7)?,
        env_fingerprint: r.get(8)?,
        fingerprint: r.get(9)?,
        log_path: r.get(10)?,
        bench_path: r.get(11)?,
        result: r.get(12)?,
        owner_pid: r.get(13)?,
        server_pgid: r.get(14)?,
        heartbeat_at: r.get(15)?,
        created_at: r.get(16)?,
        updated_at: r.get(17)?,
        slurm_job: r.get(18)?,
        server_port: r.get(19)?,
    })
}

impl RawExperiment {
    fn decode(self) -> Result<Experiment> {
        let id = self.id;
        let bad = |what: &str, e: serde_json::Error| CampaignError::Runtime(format!("journal: experiment {id} {what}: {e}"));
        Ok(Experiment {
            id,
            key: self.key,
            title: self.title,
            knobs: serde_json::from_str(&self.knobs).map_err(|e| bad("knobs", e))?,
            origin: self.origin,
            state: ExpState::parse(&self.state)?,
            failure: self.failure.as_deref().map(serde_json::from_str).transpose().map_err(|e| bad("failure", e))?,
            attempt: self.attempt,
            env_fingerprint: self.env_fingerprint,
            fingerprint: self.fingerprint,
            log_path: self.log_path,
            bench_path: self.bench_path,
            result: self.result.as_deref().map(serde_json::from_str).transpose().map_err(|e| bad("result", e))?,
            owner_pid: self.owner_pid,
            server_pgid: self.server_pgid,
            heartbeat_at: self.heartbeat_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
            slurm_job: self.slurm_job.map(|j| j as u64),
            server_port: self.server_port.and_then(|p| u16::try_from(p).ok()),
        })
    }
}

fn fp_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<FingerprintRow> {
    let body: String = r.get(3)?;
    Ok(FingerprintRow {
        id: r.get(0)?,
        kind: r.get(1)?,
        hash: r.get(2)?,
        body: serde_json::from_str(&body).unwrap_or(serde_json::Value::String(body)),
        created_at: r.get(4)?,
    })
}

/// FNV-1a 64: a stable hash for idempotent keys (std's hasher may change between releases).
pub fn stable_hash(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> CampaignRow {
        CampaignRow { goal: "output_tok_s>=10".into(), model: "m".into(), engine: "sim".into(), settings: "{}".into(), created_at: 1 }
    }

    #[test]
    fn experiment_walks_its_states_and_keys_are_idempotent() {
        let d = tempfile::tempdir().expect("tempdir");
        let mut j = Journal::create(d.path(), &row()).expect("create");
        let k = BTreeMap::from([("tp".to_string(), "2".to_string())]);
        let id = j.plan_experiment("k1", "tp 2", &k, "test", None).expect("plan").expect("new");
        assert_eq!(j.plan_experiment("k1", "tp 2", &k, "test", None).expect("plan"), None);
        let own = Update { owner: Some(Owner { pid: 1, pgid: None }), new_attempt: true, ..Update::default() };
        j.transition(id, &[ExpState::Planned], ExpState::Launching, &own, "go").expect("launch");
        assert!(j.transition(id, &[ExpState::Planned], ExpState::Ready, &Update::default(), "x").is_err());
        j.transition(id, &[ExpState::Launching], ExpState::Ready, &Update::default(), "up").expect("ready");
        drop(j);
        let j = Journal::open(d.path()).expect("reopen");
        let e = j.experiment(id).expect("exp");
        assert_eq!((e.state, e.attempt, e.knobs), (ExpState::Ready, 1, k));
        assert_eq!(j.tasks().expect("tasks")[0].state, TaskState::InProgress);
        assert_eq!(j.events().expect("events").len(), 4);
    }

    #[test]
    fn newer_major_version_is_refused_by_name() {
        let d = tempfile::tempdir().expect("tempdir");
        let j = Journal::create(d.path(), &row()).expect("create");
        j.conn.execute("UPDATE meta SET value = '9' WHERE key = 'schema_major'", []).expect("bump");
        drop(j);
        let e = Journal::open(d.path()).expect_err("newer");
        assert!(
            matches!(&e, CampaignError::Input(m) if m.contains(&format!("schema 9.{SCHEMA_MINOR}")) && m.contains("newer servetune")),
            "{e}"
        );
    }

    #[test]
    fn a_1_0_journal_is_migrated_to_this_minor_on_open_and_keeps_its_rows() {
        let d = tempfile::tempdir().expect("tempdir");
        let mut j = Journal::create(d.path(), &row()).expect("create");
        let id = j.plan_experiment("k", "t", &BTreeMap::new(), "o", None).expect("plan").expect("new");
        j.transition(id, &[ExpState::Planned], ExpState::Launching, &Update::default(), "go").expect("launch");
        // Make it what a 1.0 binary wrote: no Slurm columns, minor 0.
        j.conn
            .execute_batch("ALTER TABLE experiments DROP COLUMN slurm_job; ALTER TABLE experiments DROP COLUMN server_port; UPDATE meta SET value = '0' WHERE key = 'schema_minor';")
            .expect("downgrade");
        drop(j);
        let j = Journal::open(d.path()).expect("open migrates");
        let e = j.experiment(id).expect("row survives");
        assert_eq!((e.state, e.slurm_job, e.server_port), (ExpState::Launching, None, None));
        j.set_slurm_job(id, 42, 8000).expect("new column");
        assert_eq!(j.experiment(id).expect("exp").slurm_job, Some(42));
        let minor: String = j.conn.query_row("SELECT value FROM meta WHERE key = 'schema_minor'", [], |r| r.get(0)).expect("minor");
        assert_eq!(minor, SCHEMA_MINOR.to_string());
    }

    #[test]
    fn corrupt_file_reports_integrity_and_is_left_untouched() {
        let d = tempfile::tempdir().expect("tempdir");
        drop(Journal::create(d.path(), &row()).expect("create"));
        let p = path_in(d.path());
        let _ = std::fs::remove_file(d.path().join(format!("{FILE_NAME}-wal")));
        let mut bytes = std::fs::read(&p).expect("read");
        for b in bytes.iter_mut().skip(4096).take(2000) {
            *b = 0x5a;
        }
        std::fs::write(&p, &bytes).expect("write");
        let e = Journal::open(d.path()).expect_err("corrupt");
        assert!(matches!(&e, CampaignError::Input(m) if m.contains("corrupt") && m.contains("integrity check")), "{e}");
        assert_eq!(std::fs::read(&p).expect("read"), bytes);
    }

    #[test]
    fn a_journal_older_than_the_fabrics_table_reads_none_and_gets_it_with_its_first_record() {
        let d = tempfile::tempdir().expect("tempdir");
        let mut j = Journal::create(d.path(), &row()).expect("create");
        j.conn.execute_batch("DROP TABLE fabrics; UPDATE meta SET value = '0' WHERE key = 'schema_minor';").expect("make it 1.0");
        let env = j.add_fingerprint("probe", "h", &serde_json::json!({"vm": "kvm"})).expect("probe");
        assert_eq!(j.fabrics().expect("none"), Vec::new());
        let doc = serde_json::json!({"schema": "servetune.fabric/1.1", "kind": "p2p"});
        let id = j.add_fabric(env, "p2p.json", &doc).expect("record");
        assert_eq!(j.add_fabric(env, "again.json", &doc).expect("same"), id, "the same document for the same box is one record");
        drop(j);
        let j = Journal::open(d.path()).expect("reopen");
        let rows = j.fabrics().expect("rows");
        assert_eq!((rows.len(), rows[0].env_fingerprint, rows[0].body.clone()), (1, env, doc));
        let minor: String = j.conn.query_row("SELECT value FROM meta WHERE key = 'schema_minor'", [], |r| r.get(0)).expect("minor");
        assert_eq!(minor, SCHEMA_MINOR.to_string());
    }

    #[test]
    fn answering_twice_or_unknown_is_refused() {
        let d = tempfile::tempdir().expect("tempdir");
        let mut j = Journal::create(d.path(), &row()).expect("create");
        let q = j.ask("p2p", "move?", "answer", Some(1.5), &["finding 1".into()]).expect("ask");
        assert_eq!(j.ask("p2p", "move?", "answer", Some(1.5), &[]).expect("ask again"), q);
        j.answer(q, QuestionState::Done, None).expect("answer");
        assert!(matches!(j.answer(q, QuestionState::Done, None), Err(CampaignError::Input(m)) if m.contains("already answered")));
        assert!(matches!(j.answer(99, QuestionState::Done, None), Err(CampaignError::Input(m)) if m.contains("no question 99")));
        assert_eq!(j.tasks().expect("tasks")[0].state, TaskState::Done);
    }
}
