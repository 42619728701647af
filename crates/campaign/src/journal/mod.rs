//! The campaign journal: one SQLite file per campaign (WAL, FULL sync), versioned major/minor.
//! Every state change is its own committed transaction before the caller goes on, so a `kill -9`
//! at any moment loses nothing already recorded; `events` is an append-only log of those changes.
//! Writers take the write lock at the start of a transaction (IMMEDIATE): a deferred one that read
//! first would fail with "database is locked" when the heartbeat thread wrote in between.
//!
//! The journal is split by concern: [`schema`] (tables, versions, the open-time check and the
//! migrations), [`experiments`] (states, transitions, owners) and [`records`] (fingerprints,
//! findings, questions, notes, events, fabric measurements). This module opens and creates the
//! file and holds what every part shares.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OpenFlags, TransactionBehavior};
use serde::Serialize;

use crate::{now_ms, CampaignError, Result};

pub mod experiments;
pub mod records;
pub mod schema;

pub use experiments::{ExpState, Experiment, Owner, TaskRow, TaskState, Update};
pub use records::{EventRow, FabricRow, FindingRow, FingerprintKind, FingerprintRow, NewFinding, NoteRow, QuestionRow, QuestionState};
use schema::{check, configure, environment_error, migrate, FABRICS_TABLE, SCHEMA, VERDICT_TABLES};
pub use schema::{SCHEMA_MAJOR, SCHEMA_MINOR};

/// The journal's file name inside the campaign directory.
pub const FILE_NAME: &str = "journal.sqlite";
/// A running step whose heartbeat is older than this, or whose owner process is gone, is stale.
pub const STALE_AFTER_MS: i64 = 15_000;

/// The campaign row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CampaignRow {
    /// The goal as the user wrote it.
    pub goal: String,
    /// The model, as given.
    pub model: String,
    /// The engine template's name.
    pub engine: String,
    /// The resolved settings (engine template, bench plan, box overrides) as JSON.
    pub settings: String,
    /// When the campaign was created, ms since the epoch.
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

/// The measured files the journal in `dir` names, each with what it holds: every experiment's
/// bench result and server log, and every recorded fabric document's source. Read-only, and
/// best effort (nothing for a journal that does not read): for refusing an output that would
/// overwrite one, before the command opens the journal and reports what is wrong with it.
pub fn recorded_files(dir: &Path) -> Vec<(String, PathBuf)> {
    let path = path_in(dir);
    // Not a FIFO (an open would wait for a writer) nor a device.
    if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
        return Vec::new();
    }
    let Ok(conn) = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX) else {
        return Vec::new();
    };
    let _ = conn.busy_timeout(std::time::Duration::from_secs(2));
    let rows = |sql: &str| -> Vec<(i64, Option<String>, Option<String>)> {
        let Ok(mut st) = conn.prepare(sql) else { return Vec::new() };
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).map(|rows| rows.flatten().collect()).unwrap_or_default()
    };
    let mut out = Vec::new();
    for (id, bench, log) in rows("SELECT id, bench_path, log_path FROM experiments ORDER BY id") {
        out.extend(bench.map(|p| (format!("experiment {id}'s measured bench result"), PathBuf::from(p))));
        out.extend(log.map(|p| (format!("experiment {id}'s server log"), PathBuf::from(p))));
    }
    // Journals before schema 1.1 have no fabrics table: nothing to add.
    for (id, source, _) in rows("SELECT id, source, NULL FROM fabrics ORDER BY id") {
        out.extend(source.map(|p| (format!("the fabric document of the campaign's fabric record {id}"), PathBuf::from(p))));
    }
    out
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
        not_a_file(&path)?;
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
    ///
    /// Something at the journal's name that is not a file (a folder, a FIFO, a device, a link
    /// that leads nowhere) is refused as such, by `init` and every other command alike.
    pub fn open(dir: &Path) -> Result<Self> {
        let path = path_in(dir);
        not_a_file(&path)?;
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

    /// Records an event that is not an experiment's state change (e.g. a re-probe).
    pub fn add_event(&self, to_state: &str, detail: &str) -> Result<()> {
        self.conn.execute("INSERT INTO events(at, to_state, detail) VALUES (?1, ?2, ?3)", params![now_ms(), to_state, detail])?;
        Ok(())
    }
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

/// Refuses a journal path holding something other than a regular file (or nothing): a link is
/// followed to what it names, and a link to nothing would make `init` write the journal outside
/// the campaign's folder.
fn not_a_file(path: &Path) -> Result<()> {
    let Ok(link) = std::fs::symlink_metadata(path) else { return Ok(()) };
    let what = match std::fs::metadata(path) {
        Err(_) if link.file_type().is_symlink() => "a symbolic link to nothing",
        Ok(m) if m.is_file() => return Ok(()),
        Ok(m) if m.is_dir() => "a folder",
        _ => "not a regular file (a FIFO, a device or a socket)",
    };
    Err(CampaignError::Input(format!("{} is {what}, not a journal file: move it away, or give another campaign folder", path.display())))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::finding::{Code, Evidence, Severity, Source};
    use servetune_probe::findings::FindingId;

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

    /// A folder, a link to nothing or a FIFO at the journal's name is said to be that, by `open`
    /// and by `create` alike, and no journal is made where the link points.
    #[test]
    fn a_journal_that_is_a_folder_or_a_dangling_link_is_named_as_such() {
        let d = tempfile::tempdir().expect("tmp");
        let row = CampaignRow { goal: "g".into(), model: "m".into(), engine: "sim".into(), settings: "{}".into(), created_at: 0 };
        let folder = d.path().join("a");
        std::fs::create_dir_all(path_in(&folder)).expect("mkdir");
        for e in [Journal::open(&folder).err(), Journal::create(&folder, &row).err()] {
            let e = e.expect("refused");
            assert!(e.to_string().contains("is a folder, not a journal file"), "{e}");
        }
        let dangling = d.path().join("b");
        std::fs::create_dir_all(&dangling).expect("mkdir");
        let target = d.path().join("elsewhere.sqlite");
        std::os::unix::fs::symlink(&target, path_in(&dangling)).expect("link");
        let Err(e) = Journal::create(&dangling, &row) else { panic!("a dangling link is refused") };
        assert!(e.to_string().contains("a symbolic link to nothing"), "{e}");
        assert!(!target.exists());
        let fifo = d.path().join("c");
        std::fs::create_dir_all(&fifo).expect("mkdir");
        let made = std::process::Command::new("mkfifo").arg(path_in(&fifo)).status().expect("mkfifo");
        assert!(made.success(), "mkfifo");
        let Err(e) = Journal::open(&fifo) else { panic!("a FIFO is refused") };
        assert!(e.to_string().contains("not a regular file (a FIFO"), "{e}");
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

    /// Another program's SQLite file is named for what it is, not called corrupt, and left as it was.
    #[test]
    fn an_sqlite_file_without_a_meta_table_is_not_a_journal_rather_than_corrupt() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = path_in(d.path());
        Connection::open(&p).and_then(|c| c.execute_batch("CREATE TABLE t(a); INSERT INTO t VALUES (1);")).expect("other db");
        let bytes = std::fs::read(&p).expect("read");
        let e = Journal::open(d.path()).expect_err("not a journal");
        let m = e.to_string();
        assert!(matches!(&e, CampaignError::Input(_)), "{e}");
        assert!(m.contains("an SQLite database but not a servetune campaign journal") && m.contains("move the file away"), "{m}");
        assert!(!m.contains("corrupt") && !m.contains("backup"), "{m}");
        assert_eq!(std::fs::read(&p).expect("read"), bytes);
    }

    #[test]
    fn a_journal_older_than_the_fabrics_table_reads_none_and_gets_it_with_its_first_record() {
        let d = tempfile::tempdir().expect("tempdir");
        let mut j = Journal::create(d.path(), &row()).expect("create");
        j.conn.execute_batch("DROP TABLE fabrics; UPDATE meta SET value = '0' WHERE key = 'schema_minor';").expect("make it 1.0");
        let env = j.add_fingerprint(FingerprintKind::Probe, "h", &serde_json::json!({"vm": "kvm"})).expect("probe");
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
        let q = j.ask("p2p", "move?", "answer", Some(1.5), &[Evidence::Finding(1)]).expect("ask");
        assert_eq!(j.ask("p2p", "move?", "answer", Some(1.5), &[]).expect("ask again"), q);
        j.answer(q, QuestionState::Done, None).expect("answer");
        assert!(matches!(j.answer(q, QuestionState::Done, None), Err(CampaignError::Input(m)) if m.contains("already answered")));
        assert!(matches!(j.answer(99, QuestionState::Done, None), Err(CampaignError::Input(m)) if m.contains("no question 99")));
        assert_eq!(j.tasks().expect("tasks")[0].state, TaskState::Done);
    }

    #[test]
    fn findings_and_evidence_stored_as_words_by_an_older_servetune_read_back_as_types() {
        let d = tempfile::tempdir().expect("tempdir");
        let j = Journal::create(d.path(), &row()).expect("create");
        // What a 1.3 journal written before the typed findings holds: plain words.
        j.conn
            .execute_batch(
                "INSERT INTO findings(source, code, severity, title, evidence, fix, experiment, created_at) \
                 VALUES ('probe', 'vm_no_p2p', 'critical', 't', 'e', 'f', NULL, 1), ('log', 'moe_default_config', 'warning', 't', 'e', 'f', 1, 1); \
                 INSERT INTO questions(key, text, how, gain, evidence, state, created_at) \
                 VALUES ('p2p', 'move?', 'how', 1.5, '[\"finding 1\",\"experiment 2\"]', 'open', 1);",
            )
            .expect("old rows");
        let f = j.findings().expect("findings");
        assert_eq!((f[0].source, f[0].code, f[0].severity), (Source::Probe, Code::Probe(FindingId::VmNoP2p), Severity::Critical));
        assert_eq!((f[1].source, f[1].code, f[1].severity), (Source::Log, Code::MoeDefaultConfig, Severity::Warning));
        assert_eq!(j.questions().expect("questions")[0].evidence, [Evidence::Finding(1), Evidence::Experiment(2)]);
        // Written back by this servetune, the words are the same ones.
        let words: String = j.conn.query_row("SELECT severity FROM findings WHERE id = 1", [], |r| r.get(0)).expect("word");
        assert_eq!(words, "critical");
    }

    #[test]
    fn a_finding_or_fingerprint_name_this_servetune_does_not_know_is_refused_naming_its_row() {
        let d = tempfile::tempdir().expect("tempdir");
        let j = Journal::create(d.path(), &row()).expect("create");
        let f = NewFinding {
            source: Source::Executor,
            code: Code::PortNotFree,
            severity: Severity::Warning,
            title: "t",
            evidence: "e",
            fix: "f",
            experiment: None,
        };
        let id = j.add_finding(&f).expect("add");
        j.conn.execute("UPDATE findings SET severity = 'dire' WHERE id = ?1", [id]).expect("edit by hand");
        let e = j.findings().expect_err("unknown severity");
        assert!(e.to_string().contains(&format!("finding {id} has the severity \"dire\"")), "{e}");
        j.conn.execute("UPDATE findings SET severity = 'info', code = 'no_such_rule' WHERE id = ?1", [id]).expect("edit by hand");
        assert!(j.findings().expect_err("unknown code").to_string().contains(&format!("finding {id} has the code \"no_such_rule\"")));
        let fp = j.add_fingerprint(FingerprintKind::Probe, "h", &serde_json::json!({})).expect("probe");
        j.conn.execute("UPDATE fingerprints SET kind = 'vm' WHERE id = ?1", [fp]).expect("edit by hand");
        assert!(j.fingerprints().expect_err("unknown kind").to_string().contains(&format!("fingerprint {fp} has the kind \"vm\"")));
    }

    #[test]
    fn an_experiment_whose_stored_knob_is_not_a_number_is_refused_naming_the_knob() {
        let d = tempfile::tempdir().expect("tempdir");
        let mut j = Journal::create(d.path(), &row()).expect("create");
        let id = j.plan_experiment("k", "t", &BTreeMap::from([("tp".into(), "8".into())]), "o", None).expect("plan").expect("new");
        assert_eq!(j.experiment(id).expect("exp").values.tp, Some(8));
        j.conn.execute("UPDATE experiments SET knobs = '{\"tp\":\"eight\"}' WHERE id = ?1", [id]).expect("edit by hand");
        let e = j.experiment(id).expect_err("bad knob").to_string();
        assert!(e.contains(&format!("experiment {id}")) && e.contains("knob tp=\"eight\""), "{e}");
    }
}
