//! The continue loop: [`continue_once`] recovers what a dead controller left (a stale heartbeat,
//! an interrupted step: re-queued, its server's process group killed), reads the journal into a
//! [`Snapshot`] and the planner's [`View`], then runs a queued experiment, starts the planner's top
//! step (asking a person when that step needs one), or stops. [`continue_until`] is the loop that
//! `servetune campaign continue` and the demo both run: it holds the controller lock, runs one
//! step or steps until one is blocked, and says how it [`Stopped`].

use super::*;

/// What one `continue` did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Outcome {
    /// An experiment ran to an end state (done, failed or interrupted).
    Progress {
        /// The experiment.
        experiment: i64,
        /// The state it ended in.
        state: ExpState,
        /// What happened, in one line.
        line: String,
    },
    /// The next step needs a person.
    NeedsPerson {
        /// The question asked.
        question: QuestionRow,
    },
    /// Nothing left: the goal is met, or no step has a positive expected gain.
    NothingLeft {
        /// The goal is met.
        goal_met: bool,
        /// Why, in words.
        reason: String,
    },
}

/// Options of a run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Set by Ctrl-C: tear down and record the step as interrupted.
    pub cancel: Arc<AtomicBool>,
}

/// Re-queues steps whose owner died (stale heartbeat) and interrupted ones; kills what is left of
/// their servers. Returns what it did, in words.
pub fn recover(j: &mut Journal) -> Result<Vec<String>> {
    let me = i64::from(std::process::id());
    let mut said = Vec::new();
    for e in j.experiments()? {
        if e.state == ExpState::Interrupted {
            j.transition(e.id, &[ExpState::Interrupted], ExpState::Planned, &Update::default(), "re-queued after an interrupt")?;
            said.push(format!("experiment {} was interrupted: re-queued", e.id));
            continue;
        }
        if !e.state.is_active() {
            continue;
        }
        let (owner_alive, age) = owner_of(&e, me);
        if owner_alive && age < journal::STALE_AFTER_MS {
            return Err(CampaignError::Runtime(format!(
                "experiment {} is {} by another servetune (pid {}, heartbeat {:.1}s ago): wait for it, or stop that process",
                e.id,
                e.state.as_str(),
                e.owner_pid.unwrap_or(0),
                age as f64 / 1000.0
            )));
        }
        if let Some(line) = reattach(j, &e, owner_alive, age)? {
            said.push(line);
            continue;
        }
        if let (Some(g), Some(log)) = (e.server_pgid, e.log_path.as_deref()) {
            stale_group(g, log, &e);
        }
        let why = format!(
            "stale: owner pid {} {} while {} (last heartbeat {:.1}s ago); re-queued",
            e.owner_pid.unwrap_or(0),
            if owner_alive { "stopped beating" } else { "is gone" },
            e.state.as_str(),
            age as f64 / 1000.0
        );
        j.transition(e.id, &[e.state], ExpState::Planned, &Update::default(), &why)?;
        said.push(format!("experiment {}: {why}", e.id));
    }
    Ok(said)
}

/// The most a kept `exp-ID.result.json` may hold: a sweep's summary is well under a KB a point.
pub const MAX_KEPT_RESULT: u64 = 16 * servetune_io::MIB;

/// A sweep measured by a `continue` whose journal could not take it (a full disk) was written
/// beside the journal as `exp-ID.result.json` (`keep_measured`), and its step left
/// `benchmarking`. Once its owner is gone, the next `continue` records that sweep as the step's
/// result (done, with the model's verdict) instead of re-running it, and removes the file. A file
/// that cannot be read as a sweep summary is named and left; the step is then re-run as usual.
pub(super) fn import_kept(j: &mut Journal, dir: &Path, say: &mut dyn FnMut(&str)) -> Result<Option<Outcome>> {
    let me = i64::from(std::process::id());
    for e in j.experiments()? {
        let file = dir.join(format!("exp-{}.result.json", e.id));
        if e.state != ExpState::Benchmarking || std::fs::symlink_metadata(&file).is_err() {
            continue;
        }
        if still_owned(&e, me) {
            continue;
        }
        let read = servetune_io::read_regular(&file, &file.display().to_string(), MAX_KEPT_RESULT).map_err(|x| x.to_string());
        let summary = match read.and_then(|b| {
            serde_json::from_slice::<bench_step::BenchSummary>(&b).map_err(|x| format!("{}: not a sweep summary ({x})", file.display()))
        }) {
            Ok(summary) => summary,
            Err(why) => {
                say(&format!("experiment {}: the kept sweep cannot be imported ({why}); the step is re-run", e.id));
                continue;
            }
        };
        if let (Some(g), Some(log)) = (e.server_pgid, e.log_path.as_deref()) {
            stale_group(g, log, &e);
        }
        let snap = Snapshot::read(j)?;
        let mut knobs = snap.settings.knobs.clone();
        knobs.extend(e.knobs.clone());
        let bench = e.bench_path.clone().map_or_else(|| dir.join(format!("exp-{}.bench.json", e.id)), PathBuf::from);
        let line = record_done(j, &snap, e.id, &knobs, summary, &bench)?;
        // Recorded: the journal holds the sweep now. A file that cannot be removed is harmless
        // (the step is done, so it is never imported again).
        let _ = std::fs::remove_file(&file);
        say(&format!(
            "experiment {}: imported the sweep kept in {} by a continue whose journal could not take it; not re-run",
            e.id,
            file.display()
        ));
        return Ok(Some(Outcome::Progress { experiment: e.id, state: ExpState::Done, line }));
    }
    Ok(None)
}

/// A stale step whose Slurm job still runs is taken over (same attempt, new owner) instead of being
/// submitted again; `continue_once` then follows it from readiness on. A job that ended while
/// nobody watched is cancelled if needed and the step re-queued as usual.
pub(super) fn reattach(j: &mut Journal, e: &Experiment, owner_alive: bool, age: i64) -> Result<Option<String>> {
    let (Some(job), Some(port), Some(log)) = (e.slurm_job, e.server_port, e.log_path.as_deref()) else { return Ok(None) };
    let settings = load_settings(j)?;
    let nodes = match &settings.executor {
        Executor::Slurm(c) => c.nodes.get() as usize,
        Executor::Local => 1,
    };
    let mut srv = SlurmServer::attach(job, port, Path::new(log), nodes);
    let state = srv.state().map_or_else(|| "unknown".to_string(), |s| format!("{} (from {})", s.state.name(), s.source));
    if !srv.is_live() {
        j.add_event("slurm", &format!("experiment {}: Slurm job {job} is {state}; not re-attached", e.id))?;
        return Ok(None);
    }
    let why = format!(
        "re-attached to Slurm job {job} ({state}): owner pid {} {} (last heartbeat {:.1}s ago); not submitted again",
        e.owner_pid.unwrap_or(0),
        if owner_alive { "stopped beating" } else { "is gone" },
        age as f64 / 1000.0
    );
    let owner = Owner { pid: i64::from(std::process::id()), pgid: None };
    j.transition(e.id, &[e.state], ExpState::Launching, &Update { owner: Some(owner), ..Update::default() }, &why)?;
    Ok(Some(format!("experiment {}: {why}", e.id)))
}

/// Whether a process other than `me` that is alive owns the step, and how long ago (ms) the step
/// last beat.
fn owner_of(e: &Experiment, me: i64) -> (bool, i64) {
    (e.owner_pid.is_some_and(|p| p != me && process_alive(p)), now_ms() - e.heartbeat_at.unwrap_or(0))
}

/// Whether another live process still beats for `e` (a step `continue` must leave alone).
fn still_owned(e: &Experiment, me: i64) -> bool {
    let (alive, age) = owner_of(e, me);
    alive && age < journal::STALE_AFTER_MS
}

/// Kills what is left of a stale step's server group ([`executor::kill_stale_group`]). A group
/// number no process can have (outside 2..=i32::MAX) is a damaged journal and is left alone; the
/// step was alive from its planning to its last heartbeat (or last change, with none).
fn stale_group(pgid: i64, log: &str, e: &Experiment) {
    let Ok(g) = i32::try_from(pgid) else { return };
    let until = e.heartbeat_at.unwrap_or(e.updated_at);
    executor::kill_stale_group(g, log, (e.created_at, until));
}

#[expect(unsafe_code, reason = "kill(pid, 0) only asks whether a process exists; no memory is shared")]
pub(super) fn process_alive(pid: i64) -> bool {
    // A pid outside i32 names no process (a damaged journal), not the one its low bits name.
    let Ok(pid) = i32::try_from(pid) else { return false };
    // SAFETY: signal 0 performs the permission and existence check only.
    pid > 0 && unsafe { libc::kill(pid, 0) == 0 }
}

/// The planner's input from the journal.
pub struct Snapshot {
    /// The campaign's settings.
    pub settings: Settings,
    /// The journal id of the current environment's probe fingerprint.
    pub env_id: i64,
    /// The current environment.
    pub env: EnvBody,
    /// Every experiment, oldest first.
    pub experiments: Vec<Experiment>,
    /// Every finding, oldest first.
    pub findings: Vec<journal::FindingRow>,
    /// Every question, oldest first.
    pub questions: Vec<QuestionRow>,
    /// Fingerprint ids of probes with the current environment's hash.
    pub env_ids: Vec<i64>,
    /// The current environment's newest calibration (`crate::verdict`), when it has one.
    pub calibration: Option<plan_step::Calibration>,
    /// The current environment's measured NCCL all-reduce and its fabric record
    /// (`crate::fabric_step::allreduce_for`).
    pub allreduce: Option<(i64, servetune_model::comm::MeasuredAllReduce)>,
    /// The engine version the newest launch's server reported (its launch fingerprint).
    pub engine_version: Option<String>,
}

/// The engine version the newest launch's server reported, from its launch fingerprint.
pub(crate) fn reported_engine_version(j: &Journal) -> Result<Option<String>> {
    Ok(j.latest_fingerprint(journal::FingerprintKind::Experiment)?
        .and_then(|f| serde_json::from_value::<super::experiment::LaunchFingerprint>(f.body).ok())
        .and_then(|l| l.engine_version))
}

impl Snapshot {
    /// Reads everything the planner needs.
    pub fn read(j: &Journal) -> Result<Self> {
        let settings = load_settings(j)?;
        let (env_id, env) = current_env(j)?;
        let env_ids = j.probe_ids(&env.facts.hash)?;
        let calibration = crate::verdict::calibration_for(j, &env.facts.hash, None)?;
        let allreduce = crate::fabric_step::allreduce_for(j, &env.facts.hash, None)?;
        let engine_version = reported_engine_version(j)?;
        Ok(Self {
            settings,
            env_id,
            env,
            experiments: j.experiments()?,
            findings: j.findings()?,
            questions: j.questions()?,
            env_ids,
            calibration,
            allreduce,
            engine_version,
        })
    }

    /// The planner's view.
    pub fn view(&self) -> Result<View<'_>> {
        let s = &self.settings;
        let base_knobs = effective_knobs(s, &self.env.facts, &BTreeMap::new())?;
        let probe_findings = self
            .env
            .findings
            .iter()
            .filter_map(|pf| {
                self.findings
                    .iter()
                    .find(|f| f.source == Source::Probe && f.code == Code::Probe(pf.code) && f.evidence == pf.evidence)
                    .map(|f| (f.id, pf.code))
            })
            .collect();
        Ok(View {
            goal: &s.goal,
            engine: &s.engine,
            facts: &self.env.facts,
            probe_findings,
            experiments: self.experiments.iter().filter(|e| e.env_fingerprint.is_some_and(|id| self.env_ids.contains(&id))).collect(),
            findings: &self.findings,
            questions: &self.questions,
            model: model_box(s, &self.env.facts).map(|m| {
                m.calibrated(self.calibration)
                    .with_engine_version(&s.engine.name, self.engine_version.clone())
                    .with_allreduce(self.allreduce.clone())
            }),
            base_values: crate::knobs::KnobValues::parse(&base_knobs, "the campaign's knobs")?,
            base_knobs,
        })
    }
}

/// The next steps without running anything, in the order `continue` takes them: the queued
/// experiments (and interrupted ones, which `continue` re-queues) first, then the planner's
/// ranked steps.
pub fn next(dir: &Path) -> Result<Verdict> {
    let j = Journal::open(dir)?;
    next_of(&Snapshot::read(&j)?)
}

/// [`next`] of a journal already read (the reports' "Next steps" too).
pub(crate) fn next_of(snap: &Snapshot) -> Result<Verdict> {
    let verdict = planner::plan(&snap.view()?);
    let me = i64::from(std::process::id());
    // A step whose owner is gone or stopped beating: `continue` recovers it (re-attaches or
    // re-queues it) before anything else, as `recover` decides.
    let stale = |e: &Experiment| e.state.is_active() && !still_owned(e, me);
    let queued: Vec<planner::Step> = snap
        .experiments
        .iter()
        .filter(|e| matches!(e.state, ExpState::Planned | ExpState::Interrupted) || stale(e))
        .map(|e| planner::Step {
            title: format!("run experiment {} ({})", e.id, e.title),
            source: planner::StepSource::Queued,
            kind: planner::StepKind::Runnable { knobs: e.knobs.clone() },
            gain: None,
            raw_gain: None,
            calibrated_on: None,
            current_tok_s: None,
            predicted_tok_s: None,
            basis: if e.state == ExpState::Interrupted {
                "it was interrupted: continue re-queues it and runs it first".into()
            } else if e.state.is_active() {
                format!("it is {} but its owner stopped: continue recovers it first (re-attaches or re-queues it)", e.state.as_str())
            } else {
                "it is queued: continue runs it before any step the planner proposes".into()
            },
            evidence: vec![crate::finding::Evidence::Experiment(e.id)],
        })
        .collect();
    if queued.is_empty() {
        return Ok(verdict);
    }
    let rest = match verdict {
        Verdict::Steps(s) => s,
        Verdict::GoalMet { .. } | Verdict::NothingLeft { .. } => Vec::new(),
    };
    Ok(Verdict::Steps(queued.into_iter().chain(rest).collect()))
}

/// One `continue`: recover, then run a queued experiment, or the top runnable step, or stop.
pub fn continue_once(dir: &Path, o: &RunOptions, say: &mut dyn FnMut(&str)) -> Result<Outcome> {
    let mut j = Journal::open(dir)?;
    if let Some(imported) = import_kept(&mut j, dir, say)? {
        return Ok(imported);
    }
    for line in recover(&mut j)? {
        say(&line);
    }
    let snap = Snapshot::read(&j)?;
    let me = i64::from(std::process::id());
    if let Some(e) = snap.experiments.iter().find(|e| e.state == ExpState::Launching && e.owner_pid == Some(me) && e.slurm_job.is_some()) {
        return resume_experiment(&mut j, dir, &snap, e.id, o, say);
    }
    if let Some(e) = snap.experiments.iter().find(|e| e.state == ExpState::Planned) {
        return run_experiment(&mut j, dir, &snap, e.id, o, say);
    }
    match planner::plan(&snap.view()?) {
        Verdict::GoalMet { experiment, output_tok_s } => Ok(Outcome::NothingLeft {
            goal_met: true,
            reason: format!("goal met: experiment {experiment} reached {output_tok_s:.1} output tok/s (goal {})", snap.settings.goal.text),
        }),
        Verdict::NothingLeft { reason } => Ok(Outcome::NothingLeft { goal_met: false, reason }),
        Verdict::Steps(steps) => {
            let top = steps.into_iter().next().ok_or_else(|| CampaignError::Runtime("the planner returned no step".into()))?;
            start_step(&mut j, dir, &snap, top, o, say)
        }
    }
}

/// How a run of `continue` ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Stopped {
    /// One step ran and `until_blocked` was not asked for.
    Stepped,
    /// A stop signal came: the step was torn down and recorded as interrupted.
    Interrupted,
    /// The next step needs a person.
    NeedsPerson(QuestionRow),
    /// Nothing left: the goal is met, or no step has a positive expected gain.
    NothingLeft {
        /// The goal is met.
        goal_met: bool,
        /// Why, in words.
        reason: String,
    },
}

/// The `continue` loop (`servetune campaign continue`, and the demo): holds the campaign's
/// controller lock for the whole run, and runs one step, or steps until one needs a person or
/// nothing is left when `until_blocked`. `say` gets every progress line; `stepped` gets each
/// finished step's summary line.
pub fn continue_until(
    dir: &Path,
    o: &RunOptions,
    until_blocked: bool,
    say: &mut dyn FnMut(&str),
    stepped: &mut dyn FnMut(&str),
) -> Result<Stopped> {
    let _controller = crate::controller::acquire(dir)?;
    loop {
        match continue_once(dir, o, say)? {
            Outcome::Progress { .. } if o.cancel.load(std::sync::atomic::Ordering::Relaxed) => return Ok(Stopped::Interrupted),
            Outcome::Progress { line, .. } => {
                stepped(&line);
                if !until_blocked {
                    return Ok(Stopped::Stepped);
                }
            }
            Outcome::NeedsPerson { question } => return Ok(Stopped::NeedsPerson(question)),
            Outcome::NothingLeft { goal_met, reason } => return Ok(Stopped::NothingLeft { goal_met, reason }),
        }
    }
}

pub(super) fn start_step(
    j: &mut Journal,
    dir: &Path,
    snap: &Snapshot,
    step: Step,
    o: &RunOptions,
    say: &mut dyn FnMut(&str),
) -> Result<Outcome> {
    match &step.kind {
        StepKind::NeedsPerson { key, question, how } => {
            let id = j.ask(key, question, how, step.gain, &step.evidence)?;
            crate::verdict::record_gain(j, &step, planner::best_experiment(&snap.view()?), None, Some(id))?;
            let q =
                j.questions()?.into_iter().find(|q| q.id == id).ok_or_else(|| CampaignError::Runtime(format!("question {id} vanished")))?;
            Ok(Outcome::NeedsPerson { question: q })
        }
        StepKind::Runnable { knobs } => {
            let s = &snap.settings;
            let key = exp_key(&s.engine.name, knobs, &snap.env.facts.hash);
            let title = if knobs.is_empty() { step.title.clone() } else { format!("{}: {}", step.title, knobs_title(knobs)) };
            let origin = format!(
                "{:?} step; {}; evidence: {}",
                step.source,
                step.basis,
                if step.evidence.is_empty() { "-".into() } else { step.evidence.iter().map(|e| e.name()).collect::<Vec<_>>().join(", ") }
            );
            let id = j.plan_experiment(&key, &title, knobs, &origin, Some(snap.env_id))?.ok_or_else(|| {
                CampaignError::Runtime(format!("the planner proposed {} again although it is in the journal", knobs_title(knobs)))
            })?;
            crate::verdict::record_gain(j, &step, planner::best_experiment(&snap.view()?), Some(id), None)?;
            let snap = Snapshot::read(j)?;
            run_experiment(j, dir, &snap, id, o, say)
        }
    }
}
