//! The journal's records besides experiments: fingerprints (of the box and of each launch),
//! findings, questions for a person, notes, events and fabric measurements. Each is written in
//! its own transaction and read back oldest first; a finding's source, code and severity and a
//! question's evidence are parsed into their types ([`crate::finding`]) as they are read, and a
//! name this servetune does not know is refused with the row's id.

use rusqlite::{params, OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};

use super::schema::{FABRICS_MINOR, FABRICS_TABLE};
use super::Journal;
use crate::finding::{unknown, Code, Evidence, Severity, Source};
use crate::{now_ms, CampaignError, Result};

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
            other => return Err(crate::damaged(format!("journal: unknown question state {other:?}"))),
        })
    }
}

/// What a fingerprint is of; stored as its name (`probe`, `experiment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FingerprintKind {
    /// The box: a probe of the environment.
    Probe,
    /// One experiment's launch.
    Experiment,
}

impl FingerprintKind {
    /// The name the journal stores.
    pub fn as_str(self) -> &'static str {
        match self {
            FingerprintKind::Probe => "probe",
            FingerprintKind::Experiment => "experiment",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [FingerprintKind::Probe, FingerprintKind::Experiment].into_iter().find(|k| k.as_str() == s)
    }
}

/// A fingerprint: of the box (`probe`) or of one experiment's launch (`experiment`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FingerprintRow {
    /// The journal fingerprint id.
    pub id: i64,
    /// The box (`probe`) or one launch (`experiment`).
    pub kind: FingerprintKind,
    /// Stable hash of the body's identifying parts (what makes two environments the same).
    pub hash: String,
    /// The fingerprinted facts (JSON).
    pub body: serde_json::Value,
    /// When it was recorded, ms since the epoch.
    pub created_at: i64,
}

/// A finding from the probe, a server log or the analysis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FindingRow {
    /// The journal finding id.
    pub id: i64,
    /// Where it came from.
    pub source: Source,
    /// Which rule or signal raised it.
    pub code: Code,
    /// How much it matters.
    pub severity: Severity,
    /// One line: what is wrong and what it costs.
    pub title: String,
    /// The facts that raised it, naming where they were read.
    pub evidence: String,
    /// What to do about it.
    pub fix: String,
    /// The experiment it was found in (none for the box's own findings).
    pub experiment: Option<i64>,
}

/// A question for a person.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuestionRow {
    /// The journal question id.
    pub id: i64,
    /// Its key: a question is asked once per key.
    pub key: String,
    /// The question.
    pub text: String,
    /// How to act on it, in words.
    pub how: String,
    /// Expected gain as a factor over the current best (1.6 = +60%), when the model predicts one.
    pub gain: Option<f64>,
    /// Journal records the question rests on ("finding 3").
    pub evidence: Vec<Evidence>,
    /// Open, done or declined.
    pub state: QuestionState,
    /// The answer in words, when one was given.
    pub answer: Option<String>,
}

/// One state change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRow {
    /// The journal event id.
    pub id: i64,
    /// When, ms since the epoch.
    pub at: i64,
    /// The experiment whose state changed, if any.
    pub experiment: Option<i64>,
    /// The state it left.
    pub from_state: Option<String>,
    /// The state it entered (or what happened).
    pub to_state: String,
    /// What happened, in words.
    pub detail: String,
}

/// A note.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NoteRow {
    /// The journal note id.
    pub id: i64,
    /// When, ms since the epoch.
    pub at: i64,
    /// The note.
    pub text: String,
}

/// An interconnect measurement (`servetune fabric p2p --json`) recorded for an environment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FabricRow {
    /// The journal fabric record id.
    pub id: i64,
    /// The probe fingerprint of the environment it was measured in.
    pub env_fingerprint: i64,
    /// The file it was read from.
    pub source: String,
    /// The whole fabric document.
    pub body: serde_json::Value,
    /// When it was recorded, ms since the epoch.
    pub created_at: i64,
}

/// A finding to record.
#[derive(Debug, Clone)]
pub struct NewFinding<'a> {
    /// Where it came from.
    pub source: Source,
    /// Which rule or signal raised it.
    pub code: Code,
    /// How much it matters.
    pub severity: Severity,
    /// One line: what is wrong and what it costs.
    pub title: &'a str,
    /// The facts that raised it, naming where they were read.
    pub evidence: &'a str,
    /// What to do about it.
    pub fix: &'a str,
    /// The experiment it was found in (none for the box's own findings).
    pub experiment: Option<i64>,
}

pub(super) fn fp_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<FingerprintRow> {
    let body: String = r.get(3)?;
    let id: i64 = r.get(0)?;
    let kind: String = r.get(1)?;
    let kind = FingerprintKind::parse(&kind).ok_or_else(|| {
        let e = unknown("kind", &kind, &format!("fingerprint {id}"), "probe, experiment");
        rusqlite::Error::FromSqlConversionFailure(1, rusqlite::types::Type::Text, Box::new(e))
    })?;
    Ok(FingerprintRow {
        id,
        kind,
        hash: r.get(2)?,
        body: serde_json::from_str(&body).unwrap_or(serde_json::Value::String(body)),
        created_at: r.get(4)?,
    })
}

impl Journal {
    /// Records a fingerprint; returns its id (an identical one of the same kind is reused).
    pub fn add_fingerprint(&self, kind: FingerprintKind, hash: &str, body: &serde_json::Value) -> Result<i64> {
        let text = body.to_string();
        if let Some(id) = self
            .conn
            .query_row("SELECT id FROM fingerprints WHERE kind = ?1 AND hash = ?2 AND body = ?3", params![kind.as_str(), hash, text], |r| {
                r.get(0)
            })
            .optional()?
        {
            return Ok(id);
        }
        self.conn.execute(
            "INSERT INTO fingerprints(kind, hash, body, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![kind.as_str(), hash, text, now_ms()],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// The fingerprint `id`.
    pub fn fingerprint(&self, id: i64) -> Result<Option<FingerprintRow>> {
        Ok(self.conn.query_row("SELECT id, kind, hash, body, created_at FROM fingerprints WHERE id = ?1", [id], fp_row).optional()?)
    }

    /// The newest fingerprint of `kind`.
    pub fn latest_fingerprint(&self, kind: FingerprintKind) -> Result<Option<FingerprintRow>> {
        Ok(self
            .conn
            .query_row(
                "SELECT id, kind, hash, body, created_at FROM fingerprints WHERE kind = ?1 ORDER BY id DESC LIMIT 1",
                [kind.as_str()],
                fp_row,
            )
            .optional()?)
    }

    /// Every fingerprint, oldest first.
    pub fn fingerprints(&self) -> Result<Vec<FingerprintRow>> {
        self.all("SELECT id, kind, hash, body, created_at FROM fingerprints ORDER BY id", fp_row)
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
        type Raw = (i64, String, String, String, String, String, String, Option<i64>);
        let raw: Vec<Raw> = self
            .all("SELECT id, source, code, severity, title, evidence, fix, experiment FROM findings ORDER BY id", |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?))
            })?;
        raw.into_iter()
            .map(|(id, source, code, severity, title, evidence, fix, experiment)| {
                let row = format!("finding {id}");
                Ok(FindingRow {
                    id,
                    source: Source::parse(&source).ok_or_else(|| unknown("source", &source, &row, "probe, executor, log, analysis"))?,
                    code: Code::parse(&code)
                        .ok_or_else(|| unknown("code", &code, &row, "the probe's rule ids, moe_default_config, port_not_free, plan_gap"))?,
                    severity: Severity::parse(&severity).ok_or_else(|| unknown("severity", &severity, &row, "info, warning, critical"))?,
                    title,
                    evidence,
                    fix,
                    experiment,
                })
            })
            .collect()
    }

    /// Asks a question (and opens its task) unless one with `key` exists; returns its id.
    pub fn ask(&mut self, key: &str, text: &str, how: &str, gain: Option<f64>, evidence: &[Evidence]) -> Result<i64> {
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
                    evidence: serde_json::from_str(&ev).map_err(|e| crate::damaged(format!("journal: question {id} evidence: {e}")))?,
                    state: QuestionState::parse(&state)?,
                    answer,
                })
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

    /// The ids of the probe fingerprints of the environment with hash `env_hash`.
    pub fn probe_ids(&self, env_hash: &str) -> Result<Vec<i64>> {
        Ok(self.fingerprints()?.into_iter().filter(|f| f.kind == FingerprintKind::Probe && f.hash == env_hash).map(|f| f.id).collect())
    }

    /// The fabric records measured in the environment with probe hash `env_hash` (under any of its
    /// probe fingerprints), oldest first.
    pub fn env_fabrics(&self, env_hash: &str) -> Result<Vec<FabricRow>> {
        let ids = self.probe_ids(env_hash)?;
        Ok(self.fabrics()?.into_iter().filter(|f| ids.contains(&f.env_fingerprint)).collect())
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
                let body = serde_json::from_str(&body).map_err(|e| crate::damaged(format!("journal: fabric record {id}: {e}")))?;
                Ok(FabricRow { id, env_fingerprint, source, body, created_at })
            })
            .collect()
    }
}
