//! The journal's schema and its versions: the tables as this servetune creates them, the
//! major/minor version it writes, the read-only check an `open` does first (SQLite's integrity
//! check, then the version), the migration that brings an older minor up to this one, and the
//! words an SQLite error of the environment (a lock, a read-only directory, a full disk) is
//! reported in.
//!
//! Versions: a major change is one an older servetune cannot read, and it refuses the file by
//! name; a minor change only adds (a table, a column), so an older minor is migrated on open, in
//! one transaction, and a newer minor of the same major is read with what this servetune knows.
//! Names the journal stores for enums (an experiment's state, a finding's severity) are the
//! words they always were, so reading them needs no migration.

use std::path::Path;

use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use crate::{CampaignError, Result};

/// Schema major version: a binary refuses a journal with a higher one.
pub const SCHEMA_MAJOR: i64 = 1;
/// Schema minor version: additions an older binary of the same major can ignore. 1 added the
/// `fabrics` table (interconnect measurements, `campaign fabric`); 2 added experiments.slurm_job and
/// server_port (the Slurm executor); 3 added the `calibrations` and `predictions` tables (the
/// box's calibration and the track record, [`crate::verdict`]); 4 added a record body, no table: a
/// fabric record holding a `fabric allreduce` document (calibrations fitted on one point,
/// `step_scale`, came just before it). A binary of minor 3 stops at such a record, naming it. 5
/// added a calibration body field, no table: `fitted_to`, what the factors were fitted against
/// (the sweep's own run; a body without it was fitted against the steady state and is not used),
/// and `priced` on prediction records (a record without it was priced on the steady state and is
/// kept, but does not widen later intervals).
pub const SCHEMA_MINOR: i64 = 5;
/// The minor version that added the `fabrics` table; a journal of an older minor gets the table
/// when its first fabric document is recorded (or when it is opened), and reads as having none until then.
pub(super) const FABRICS_MINOR: i64 = 1;
pub(super) const SCHEMA: &str = "
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
pub(super) const FABRICS_TABLE: &str = "
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

pub(super) fn configure(conn: &Connection) -> rusqlite::Result<()> {
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
pub(super) fn environment_error(path: &Path, e: &rusqlite::Error) -> Option<CampaignError> {
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
pub(super) fn writable(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else { return false };
    access_w(&c)
}

#[expect(unsafe_code, reason = "access(2) only checks a path's permissions; the string is NUL-terminated and borrowed")]
pub(super) fn access_w(c: &std::ffi::CStr) -> bool {
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Checks the file read-only: SQLite's integrity check, then the schema version. Writes nothing.
pub(super) fn check(path: &Path) -> Result<()> {
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
    // A healthy database of another program is not damaged: say what it is, not "restore it".
    let tables: i64 =
        conn.query_row("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'", [], |r| r.get(0)).map_err(damaged)?;
    if tables == 0 {
        return Err(CampaignError::Input(format!(
            "{} is an SQLite database but not a servetune campaign journal (no meta table): give the campaign's folder, or move the file away",
            path.display()
        )));
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
/// `predictions` tables (1.3), each added when missing; 1.4 and 1.5 change no table.
pub(super) fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
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
