//! Experiments: their states ([`ExpState`]) and the one way between them
//! ([`Journal::transition`], which checks the state it leaves and records an event in the same
//! transaction), who runs one (its owner process, its server's process group, a heartbeat), and
//! how a row is read back: knobs, failure and result are JSON columns decoded once, and the
//! knobs the planner reads are parsed into [`KnobValues`] there, so a bad value is refused with
//! the experiment's id rather than read as a default. Tasks (the status report's to-do list)
//! follow their experiment's or question's state.

use std::collections::BTreeMap;

use rusqlite::{params, OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};

use super::Journal;
use crate::bench_step::BenchSummary;
use crate::classify::Failure;
use crate::knobs::KnobValues;
use crate::{now_ms, CampaignError, Result};

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
            other => return Err(crate::damaged(format!("journal: unknown experiment state {other:?}"))),
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
            other => return Err(crate::damaged(format!("journal: unknown task state {other:?}"))),
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

/// One experiment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Experiment {
    /// The journal experiment id.
    pub id: i64,
    /// Idempotent key: engine, knobs and environment hash.
    pub key: String,
    /// Its configuration, in words.
    pub title: String,
    /// The knobs it sets, as the launch command's words.
    pub knobs: BTreeMap<String, String>,
    /// Why it was planned (the planner step or the person who added it).
    pub origin: String,
    /// Where it is in its life.
    pub state: ExpState,
    /// Why it failed, classified, when it did.
    pub failure: Option<Failure>,
    /// Launch attempts so far.
    pub attempt: i64,
    /// The probe fingerprint of the environment it runs in.
    pub env_fingerprint: Option<i64>,
    /// The launch fingerprint of its current attempt.
    pub fingerprint: Option<i64>,
    /// The server log of the current attempt.
    pub log_path: Option<String>,
    /// The bench JSON of the current attempt.
    pub bench_path: Option<String>,
    /// The measured sweep, once done.
    pub result: Option<BenchSummary>,
    /// The controller process that runs it.
    pub owner_pid: Option<i64>,
    /// The server's process group.
    pub server_pgid: Option<i64>,
    /// When the controller last said it is alive, ms since the epoch.
    pub heartbeat_at: Option<i64>,
    /// When it was planned, ms since the epoch.
    pub created_at: i64,
    /// When it last changed, ms since the epoch.
    pub updated_at: i64,
    /// The Slurm job of the current attempt (Slurm executor).
    pub slurm_job: Option<u64>,
    /// The port the current attempt's server listens on (Slurm executor).
    pub server_port: Option<u16>,
    /// The knobs the planner reads, parsed once from `knobs` when the row was read.
    #[serde(skip)]
    pub values: KnobValues,
}

/// A task of the status report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskRow {
    /// The journal task id.
    pub id: i64,
    /// What the task is, in words.
    pub title: String,
    /// Its state.
    pub state: TaskState,
    /// The experiment it follows, if any.
    pub experiment: Option<i64>,
    /// The question it follows, if any.
    pub question: Option<i64>,
}

/// Who runs an experiment: this process and, once launched, the server's process group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Owner {
    /// The controller's process id.
    pub pid: i64,
    /// The server's process group, once launched.
    pub pgid: Option<i64>,
}

/// Fields a transition sets (None leaves a field as it is).
#[derive(Debug, Clone, Default)]
pub struct Update {
    /// Set the failure.
    pub failure: Option<Failure>,
    /// Set the measured sweep.
    pub result: Option<BenchSummary>,
    /// Set the server log path.
    pub log_path: Option<String>,
    /// Set the bench JSON path.
    pub bench_path: Option<String>,
    /// Set the launch fingerprint.
    pub fingerprint: Option<i64>,
    /// Set the environment's probe fingerprint.
    pub env_fingerprint: Option<i64>,
    /// Set (or, with `Some(Owner{..})`, replace) the owner; `None` keeps it.
    pub owner: Option<Owner>,
    /// Count a new attempt.
    pub new_attempt: bool,
}

pub(super) const EXP_SELECT_BASE: &str = "SELECT id, key, title, knobs, origin, state, failure, attempt, env_fingerprint, fingerprint, log_path, bench_path, result, owner_pid, server_pgid, heartbeat_at, created_at, updated_at, slurm_job, server_port FROM experiments";
pub(super) const EXP_SELECT: &str = "SELECT id, key, title, knobs, origin, state, failure, attempt, env_fingerprint, fingerprint, log_path, bench_path, result, owner_pid, server_pgid, heartbeat_at, created_at, updated_at, slurm_job, server_port FROM experiments ORDER BY id";

/// An experiment row before its JSON columns are decoded.
pub(super) struct RawExperiment {
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

pub(super) fn exp_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawExperiment> {
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
        let bad = |what: &str, e: serde_json::Error| crate::damaged(format!("journal: experiment {id} {what}: {e}"));
        let knobs: BTreeMap<String, String> = serde_json::from_str(&self.knobs).map_err(|e| bad("knobs", e))?;
        Ok(Experiment {
            id,
            key: self.key,
            title: self.title,
            values: KnobValues::parse(&knobs, &format!("journal experiment {id}"))?,
            knobs,
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

impl Journal {
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
}
