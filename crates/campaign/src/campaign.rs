//! The campaign's operations: `init` (probe and write the journal), `probe` (re-probe), `add`
//! (queue an experiment), `continue_once` (recover stale steps, run the top runnable step or stop to
//! ask), `answer`, and `view` (the planner's input from the journal).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use servetune_stats::SloMetric;

use crate::bench_step::{self, BenchPlan};
use crate::classify::{ExitInfo, Failure, FailureKind};
use crate::engine::{Context, EngineTemplate, LogSignal, Rendered};
use crate::executor::{self, Handle, LaunchSpec, Launched, NotReady};
use crate::executor_slurm::{self, SlurmServer, SlurmSettings};
use crate::goal::{self, Goal};
use crate::http::Endpoint;
use crate::journal::{self, CampaignRow, ExpState, Experiment, Journal, NewFinding, Owner, QuestionRow, QuestionState, Update};
use crate::plan_step::{self, ModelBox};
use crate::planner::{self, Step, StepKind, Verdict, View};
use crate::probe_step::{self, BoxFacts, ProbeFinding};
use crate::{now_ms, CampaignError, Result};

/// Grace between SIGTERM and SIGKILL at teardown.
pub const TEARDOWN_GRACE: Duration = Duration::from_secs(10);

/// The campaign's resolved settings, stored in the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub goal: Goal,
    pub engine: EngineTemplate,
    /// What `{model}` becomes (a path, an HF id or a catalog name).
    pub model: String,
    /// The model catalog name the performance model prices, when it knows the model.
    pub catalog_model: Option<String>,
    pub quant: String,
    /// The GPU model and count, when given instead of (or over) the probe's.
    pub gpu: Option<String>,
    pub gpus: Option<u32>,
    pub bench: BenchPlan,
    /// Knobs every experiment sets.
    pub knobs: BTreeMap<String, String>,
    /// Environment variables whose values are secrets (stripped from fingerprints).
    pub secret_env: Vec<String>,
    pub ready_timeout_s: Option<u64>,
    /// Where experiments run: this machine, or a Slurm cluster.
    #[serde(default)]
    pub executor: Executor,
}

/// Where experiments run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Executor {
    /// A process group on this machine.
    #[default]
    Local,
    /// A batch job per experiment on a Slurm cluster.
    Slurm(SlurmSettings),
}

/// `campaign init`'s inputs.
#[derive(Debug, Clone)]
pub struct InitOptions {
    pub dir: PathBuf,
    pub settings: Settings,
    pub probe_root: Option<PathBuf>,
}

/// The environment as the journal knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvBody {
    pub facts: BoxFacts,
    pub findings: Vec<ProbeFinding>,
    /// Where the probe came from: "live" or the snapshot directory.
    pub source: String,
    pub report: serde_json::Value,
}

/// Builds the settings from flags (the CLI's raw values).
pub fn settings(goal_text: &str, engine: EngineTemplate, model: &str, quant: &str, knobs: BTreeMap<String, String>) -> Result<Settings> {
    let goal = goal::parse(goal_text)?;
    engine.validate()?;
    engine.check_knobs(&knobs)?;
    let catalog_model = servetune_model::spec::catalog(model).ok().map(|m| m.name);
    Ok(Settings {
        bench: BenchPlan {
            concurrency: vec![1, 8, 32],
            requests: 32,
            input_len: 256,
            output_len: 64,
            timeout_s: 120.0,
            slos: goal.slos.clone(),
        },
        goal,
        engine,
        model: model.to_string(),
        catalog_model: catalog_model.map(|_| model.to_string()),
        quant: quant.to_string(),
        gpu: None,
        gpus: None,
        knobs,
        secret_env: Vec::new(),
        ready_timeout_s: None,
        executor: Executor::Local,
    })
}

/// Probes, checks the engine renders, and writes the journal.
pub fn init(o: &InitOptions) -> Result<Journal> {
    let probed = probe_step::probe(o.probe_root.as_deref())?;
    let mut settings = o.settings.clone();
    if journal::path_in(&o.dir).exists() {
        return Err(CampaignError::Input(format!(
            "{} already holds a campaign ({}): continue it, or give a new directory",
            o.dir.display(),
            journal::path_in(&o.dir).display()
        )));
    }
    // Secrets go to DIR/secrets.json (owner-only); the journal keeps placeholders.
    settings.knobs = crate::secrets::seal_knobs(&o.dir, &settings.engine, &settings.knobs, &settings.secret_env)?;
    settings.model = crate::secrets::seal_url(&o.dir, &settings.model)?;
    let env = env_body(&probed, o.probe_root.as_deref());
    if let Executor::Slurm(cfg) = &settings.executor {
        if cfg.nodes > 1 && settings.engine.multi_node.is_empty() {
            return Err(CampaignError::Input(format!(
                "--nodes {}: engine {} has no multi_node words, so it cannot span nodes; use sglang or sim, or give a template with multi_node (see servetune campaign engines --help){}",
                cfg.nodes,
                settings.engine.name,
                if settings.engine.name == "vllm" { "; vLLM across nodes runs on a Ray cluster started beforehand" } else { "" }
            )));
        }
        let knobs = effective_knobs(&settings, &env.facts, &BTreeMap::new())?;
        let n = |k: &str| knobs.get(k).and_then(|v| v.parse::<u32>().ok()).unwrap_or(1);
        let mut c = cfg.clone();
        executor_slurm::check(&mut c, n("tp") * n("pp"), &o.dir)?;
        settings.executor = Executor::Slurm(c);
    }
    let s = &settings;
    // Render once now so a template or knob problem is reported before anything is written.
    let ctx = context(s, &env.facts, 0)?;
    s.engine.render(&ctx, &s.knobs)?;
    let row = CampaignRow {
        goal: s.goal.text.clone(),
        model: s.model.clone(),
        engine: s.engine.name.clone(),
        settings: serde_json::to_string(s).map_err(|e| CampaignError::Runtime(e.to_string()))?,
        created_at: now_ms(),
    };
    let j = Journal::create(&o.dir, &row)?;
    record_env(&j, &env)?;
    if let Some(m) = model_box(s, &env.facts) {
        if let Err(e) = plan_step::check(&m) {
            j.add_note(&format!("the performance model cannot price this campaign ({e}); steps come without predicted gains"))?;
        }
    } else {
        j.add_note("the performance model does not know this model or GPU: steps come without predicted gains")?;
    }
    Ok(j)
}

fn env_body(p: &probe_step::Probed, root: Option<&Path>) -> EnvBody {
    EnvBody {
        facts: p.facts.clone(),
        findings: p.findings.clone(),
        source: root.map_or("live".into(), |r| r.display().to_string()),
        report: p.report.clone(),
    }
}

fn record_env(j: &Journal, env: &EnvBody) -> Result<i64> {
    let body = serde_json::to_value(env).map_err(|e| CampaignError::Runtime(e.to_string()))?;
    let id = j.add_fingerprint("probe", &env.facts.hash, &body)?;
    for f in &env.findings {
        j.add_finding(&NewFinding {
            source: "probe",
            code: &f.code,
            severity: &f.severity,
            title: &f.title,
            evidence: &f.evidence,
            fix: &f.fix,
            experiment: None,
        })?;
    }
    j.add_event(
        "probed",
        &format!(
            "environment {} ({} {} , {} GPU(s), P2P {}) from {}",
            env.facts.hash,
            env.facts.vm,
            env.facts.container,
            env.facts.gpus,
            if env.facts.p2p_ok { "ok" } else { "no" },
            env.source
        ),
    )?;
    Ok(id)
}

/// Re-probes the box (e.g. after moving it) and records the new environment.
pub fn reprobe(dir: &Path, root: Option<&Path>) -> Result<BoxFacts> {
    let j = Journal::open(dir)?;
    let probed = probe_step::probe(root)?;
    let env = env_body(&probed, root);
    record_env(&j, &env)?;
    Ok(env.facts)
}

/// The settings stored in the journal.
pub fn load_settings(j: &Journal) -> Result<Settings> {
    serde_json::from_str(&j.campaign()?.settings).map_err(|e| CampaignError::Runtime(format!("journal settings: {e}")))
}

/// The current environment: its fingerprint id and body.
pub fn current_env(j: &Journal) -> Result<(i64, EnvBody)> {
    let fp = j
        .latest_fingerprint("probe")?
        .ok_or_else(|| CampaignError::Runtime("the journal holds no probe of the box: run servetune campaign probe DIR".into()))?;
    let body: EnvBody =
        serde_json::from_value(fp.body).map_err(|e| CampaignError::Runtime(format!("journal probe fingerprint {}: {e}", fp.id)))?;
    Ok((fp.id, body))
}

fn gpu_name(s: &Settings, f: &BoxFacts) -> Option<String> {
    s.gpu.clone().or_else(|| f.gpu_model.clone())
}

/// The catalog link between the GPUs: the probed NVLink / P2P state on the campaign's GPU (the
/// stated one, else the probed one).
fn link(s: &Settings, f: &BoxFacts) -> &'static str {
    servetune_model::hw::probed_link(gpu_name(s, f).as_deref(), f.nvlink, f.p2p_ok)
}

fn gpu_count(s: &Settings, f: &BoxFacts) -> u32 {
    s.gpus.unwrap_or(f.gpus)
}

/// The model's view of the campaign, when it knows the model and the GPU.
pub fn model_box(s: &Settings, f: &BoxFacts) -> Option<ModelBox> {
    Some(ModelBox {
        model: s.catalog_model.clone()?,
        quant: s.quant.clone(),
        gpu: gpu_name(s, f)?,
        gpus: gpu_count(s, f).max(1),
        link: link(s, f).to_string(),
        input_len: s.bench.input_len,
        output_len: s.bench.output_len,
        tpot_ms: s.goal.bound_ms(SloMetric::Tpot),
        ttft_ms: s.goal.bound_ms(SloMetric::Ttft),
        max_concurrency: s.bench.concurrency.iter().copied().max().unwrap_or(1),
        sweep: s.bench.concurrency.clone(),
        serving: servetune_model::predict::EngineName::from_name(&s.engine.name).unwrap_or_default(),
        calibration: None,
    })
    .filter(|m| plan_step::check(m).is_ok())
}

/// The values the campaign fills into a template.
pub fn context(s: &Settings, f: &BoxFacts, port: u16) -> Result<Context> {
    let exe = std::env::current_exe().map_err(|e| CampaignError::Runtime(format!("cannot find the servetune binary: {e}")))?;
    let mut v = BTreeMap::new();
    v.insert("model".into(), s.model.clone());
    // Multi-node values: fixed on this machine, filled in on each node inside a Slurm job.
    match &s.executor {
        Executor::Local => {
            v.insert("host".into(), "127.0.0.1".into());
            v.insert("node_rank".into(), "0".into());
            v.insert("nnodes".into(), "1".into());
            v.insert("head".into(), "127.0.0.1".into());
        }
        Executor::Slurm(c) => {
            use servetune_slurm::RuntimeValue as R;
            v.insert("host".into(), R::NodeAddr.marker());
            v.insert("node_rank".into(), R::NodeRank.marker());
            v.insert("nnodes".into(), if c.nodes > 1 { R::Nnodes.marker() } else { "1".into() });
            v.insert("head".into(), R::Head.marker());
        }
    }
    v.insert("port".into(), port.to_string());
    // The multi-node rendezvous port (sglang --dist-init-addr, vLLM --master-port): the next one.
    v.insert("dist_port".into(), port.saturating_add(1).to_string());
    v.insert("servetune".into(), exe.display().to_string());
    v.insert("gpu".into(), gpu_name(s, f).unwrap_or_else(|| "unknown".into()));
    v.insert("gpus".into(), gpu_count(s, f).max(1).to_string());
    v.insert("link".into(), link(s, f).into());
    v.insert("quant".into(), s.quant.clone());
    v.insert("input_len".into(), s.bench.input_len.to_string());
    v.insert("output_len".into(), s.bench.output_len.to_string());
    Ok(Context { values: v })
}

/// The effective knobs (given + defaults) of an experiment.
fn effective_knobs(s: &Settings, f: &BoxFacts, knobs: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>> {
    let mut all = s.knobs.clone();
    all.extend(knobs.clone());
    Ok(s.engine.render(&context(s, f, 0)?, &all)?.knobs)
}

fn exp_key(engine: &str, knobs: &BTreeMap<String, String>, env_hash: &str) -> String {
    let k = serde_json::to_string(knobs).unwrap_or_default();
    journal::stable_hash(&format!("{engine}|{k}|{env_hash}"))
}

fn knobs_title(knobs: &BTreeMap<String, String>) -> String {
    knobs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

/// Queues an experiment with `knobs` (on top of the campaign's). `force` runs a configuration
/// again in the same environment; without it an existing key is refused.
pub fn add(dir: &Path, knobs: &BTreeMap<String, String>, force: bool) -> Result<i64> {
    let mut j = Journal::open(dir)?;
    let s = load_settings(&j)?;
    s.engine.check_knobs(knobs)?;
    let knobs = &crate::secrets::seal_knobs(dir, &s.engine, knobs, &s.secret_env)?;
    let (env_id, env) = current_env(&j)?;
    let eff = effective_knobs(&s, &env.facts, knobs)?;
    let mut key = exp_key(&s.engine.name, &eff, &env.facts.hash);
    if force {
        key = format!("{key}#{}", now_ms());
    }
    let title = if eff.is_empty() { s.engine.name.clone() } else { format!("{} {}", s.engine.name, knobs_title(&eff)) };
    j.plan_experiment(&key, &title, &eff, "added by a person (campaign add)", Some(env_id))?.ok_or_else(|| {
        CampaignError::Input(format!(
            "the configuration {} already ran in this environment: add --force to run it again",
            knobs_title(&eff)
        ))
    })
}

/// What one `continue` did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Outcome {
    /// An experiment ran to an end state (done, failed or interrupted).
    Progress { experiment: i64, state: ExpState, line: String },
    /// The next step needs a person.
    NeedsPerson { question: QuestionRow },
    /// Nothing left: the goal is met, or no step has a positive expected gain.
    NothingLeft { goal_met: bool, reason: String },
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
        let owner_alive = e.owner_pid.is_some_and(|p| p != me && process_alive(p));
        let age = now_ms() - e.heartbeat_at.unwrap_or(0);
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
        if let Some(g) = e.server_pgid {
            executor::kill_group(g as i32);
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

/// A stale step whose Slurm job still runs is taken over (same attempt, new owner) instead of being
/// submitted again; `continue_once` then follows it from readiness on. A job that ended while
/// nobody watched is cancelled if needed and the step re-queued as usual.
fn reattach(j: &mut Journal, e: &Experiment, owner_alive: bool, age: i64) -> Result<Option<String>> {
    let (Some(job), Some(port), Some(log)) = (e.slurm_job, e.server_port, e.log_path.as_deref()) else { return Ok(None) };
    let settings = load_settings(j)?;
    let nodes = match &settings.executor {
        Executor::Slurm(c) => c.nodes.max(1) as usize,
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

#[expect(unsafe_code, reason = "kill(pid, 0) only asks whether a process exists; no memory is shared")]
fn process_alive(pid: i64) -> bool {
    // SAFETY: signal 0 performs the permission and existence check only.
    pid > 0 && unsafe { libc::kill(pid as i32, 0) == 0 }
}

/// The planner's input from the journal.
pub struct Snapshot {
    pub settings: Settings,
    pub env_id: i64,
    pub env: EnvBody,
    pub experiments: Vec<Experiment>,
    pub findings: Vec<journal::FindingRow>,
    pub questions: Vec<QuestionRow>,
    /// Fingerprint ids of probes with the current environment's hash.
    pub env_ids: Vec<i64>,
    /// The current environment's newest calibration (`crate::verdict`), when it has one.
    pub calibration: Option<plan_step::Calibration>,
}

impl Snapshot {
    /// Reads everything the planner needs.
    pub fn read(j: &Journal) -> Result<Self> {
        let settings = load_settings(j)?;
        let (env_id, env) = current_env(j)?;
        let env_ids = j.fingerprints()?.into_iter().filter(|f| f.kind == "probe" && f.hash == env.facts.hash).map(|f| f.id).collect();
        let calibration = crate::verdict::calibration_for(j, &env.facts.hash, None)?;
        Ok(Self {
            settings,
            env_id,
            env,
            experiments: j.experiments()?,
            findings: j.findings()?,
            questions: j.questions()?,
            env_ids,
            calibration,
        })
    }

    /// The planner's view.
    pub fn view(&self) -> Result<View<'_>> {
        let s = &self.settings;
        let probe_findings = self
            .env
            .findings
            .iter()
            .filter_map(|pf| {
                self.findings
                    .iter()
                    .find(|f| f.source == "probe" && f.code == pf.code && f.evidence == pf.evidence)
                    .map(|f| (f.id, f.code.clone()))
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
            model: model_box(s, &self.env.facts).map(|m| m.calibrated(self.calibration)),
            base_knobs: effective_knobs(s, &self.env.facts, &BTreeMap::new())?,
        })
    }
}

/// The ranked next steps without running anything.
pub fn next(dir: &Path) -> Result<Verdict> {
    let j = Journal::open(dir)?;
    let snap = Snapshot::read(&j)?;
    Ok(planner::plan(&snap.view()?))
}

/// One `continue`: recover, then run a queued experiment, or the top runnable step, or stop.
pub fn continue_once(dir: &Path, o: &RunOptions, say: &mut dyn FnMut(&str)) -> Result<Outcome> {
    let mut j = Journal::open(dir)?;
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

fn start_step(j: &mut Journal, dir: &Path, snap: &Snapshot, step: Step, o: &RunOptions, say: &mut dyn FnMut(&str)) -> Result<Outcome> {
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
                if step.evidence.is_empty() { "-".into() } else { step.evidence.join(", ") }
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

/// Strips secrets: names containing KEY, TOKEN, SECRET or PASSWORD, and the values of `secret_env`.
pub fn strip_secrets(env: &BTreeMap<String, String>, argv: &[String], secret_env: &[String]) -> (BTreeMap<String, String>, Vec<String>) {
    const REDACTED: &str = "<redacted>";
    let secret_vals: Vec<String> = secret_env.iter().filter_map(|n| std::env::var(n).ok()).filter(|v| !v.is_empty()).collect();
    let is_secret_name = |n: &str| crate::secrets::is_secret_name(n, secret_env);
    let env = env
        .iter()
        .map(|(k, v)| (k.clone(), if is_secret_name(k) || secret_vals.contains(v) { REDACTED.into() } else { v.clone() }))
        .collect();
    let argv = argv.iter().map(|a| if secret_vals.iter().any(|s| a.contains(s.as_str())) { REDACTED.into() } else { a.clone() }).collect();
    (env, argv)
}

/// Inherited variables that change an engine's behaviour, recorded in fingerprints.
const ENV_PREFIXES: &[&str] = &["CUDA_", "NCCL_", "NVIDIA_", "HF_", "SGLANG_", "VLLM_", "OMP_", "PYTORCH_", "TORCH_", "LLAMA_"];

/// An experiment's launch fingerprint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchFingerprint {
    pub engine: String,
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub engine_version: Option<String>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    /// NCCL's version, when the environment says (NCCL_VERSION).
    pub nccl_version: Option<String>,
    /// MoE kernel config files the server said it loaded.
    pub moe_configs: Vec<String>,
    /// The probe fingerprint of the environment.
    pub environment: i64,
    /// The Slurm job, when the experiment ran as one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_job: Option<u64>,
    /// One line per node of a Slurm job (name, address, rank, kernel), as each node wrote it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
}

fn log_signals(e: &EngineTemplate, logs: &[PathBuf]) -> Vec<(LogSignal, String)> {
    logs.iter()
        .flat_map(|log| executor::log_tail(log, 5000))
        .filter_map(|l| e.logs.iter().find(|p| l.contains(&p.contains)).map(|p| (p.signal, l.clone())))
        .collect()
}

struct Heartbeat {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeat {
    /// Stamps the experiment's heartbeat every second from its own connection.
    fn start(dir: &Path, id: i64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let path = journal::path_in(dir);
        let handle = std::thread::spawn(move || {
            let Ok(conn) = rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE) else { return };
            let _ = conn.busy_timeout(Duration::from_secs(5));
            while !flag.load(Ordering::Relaxed) {
                let _ = conn.execute("UPDATE experiments SET heartbeat_at = ?2 WHERE id = ?1", rusqlite::params![id, now_ms()]);
                for _ in 0..10 {
                    if flag.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        });
        Self { stop, handle: Some(handle) }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A server that is up, with what the later phases need.
struct Up {
    server: Box<dyn Launched>,
    endpoint: Endpoint,
    rendered: Rendered,
    knobs: BTreeMap<String, String>,
    /// Every log of the server (one per node on Slurm), the main one first.
    logs: Vec<PathBuf>,
    bench_path: PathBuf,
    port: u16,
}

fn run_experiment(j: &mut Journal, dir: &Path, snap: &Snapshot, id: i64, o: &RunOptions, say: &mut dyn FnMut(&str)) -> Result<Outcome> {
    let _beat = Heartbeat::start(dir, id);
    let up = match launch(j, dir, snap, id, o, say)? {
        Ok(up) => up,
        Err(ended) => return Ok(ended),
    };
    ready_then_benchmark(j, snap, id, up, o, say)
}

/// Launching -> ready (fingerprinted) -> benchmarking -> done or failed.
fn ready_then_benchmark(j: &mut Journal, snap: &Snapshot, id: i64, up: Up, o: &RunOptions, say: &mut dyn FnMut(&str)) -> Result<Outcome> {
    let s = &snap.settings;
    let fp = fingerprint(j, s, snap, &up)?;
    let ready = Update { fingerprint: Some(fp), ..Update::default() };
    j.transition(id, &[ExpState::Launching], ExpState::Ready, &ready, "ready: /health answered and a one-token generation succeeded")?;
    say("  ready; benchmarking");
    let bench = Update { bench_path: Some(up.bench_path.display().to_string()), ..Update::default() };
    j.transition(id, &[ExpState::Ready], ExpState::Benchmarking, &bench, "bench sweep")?;
    benchmark(j, snap, id, up, o, say)
}

/// A re-attached Slurm job: readiness (at once if it serves), then the benchmark as usual.
fn resume_experiment(j: &mut Journal, dir: &Path, snap: &Snapshot, id: i64, o: &RunOptions, say: &mut dyn FnMut(&str)) -> Result<Outcome> {
    let _beat = Heartbeat::start(dir, id);
    let s = &snap.settings;
    let e = j.experiment(id)?;
    let (Some(job), Some(port), Some(log)) = (e.slurm_job, e.server_port, e.log_path.clone()) else {
        return Err(CampaignError::Runtime(format!("experiment {id}: no Slurm job to re-attach to")));
    };
    let nodes = match &s.executor {
        Executor::Slurm(c) => c.nodes.max(1) as usize,
        Executor::Local => 1,
    };
    say(&format!("experiment {id} (attempt {}): following Slurm job {job} again", e.attempt));
    let mut server: Box<dyn Launched> = Box::new(SlurmServer::attach(job, port, Path::new(&log), nodes));
    let ctx = context(s, &snap.env.facts, port)?;
    let mut knobs = s.knobs.clone();
    knobs.extend(e.knobs.clone());
    let rendered = s.engine.render(&ctx, &knobs)?;
    let (argv, env) = crate::secrets::unseal_launch(dir, &rendered.argv, &rendered.env)?;
    let spec = LaunchSpec {
        argv,
        env,
        log_path: PathBuf::from(&log),
        port,
        health: s.engine.health.clone(),
        generate: s.engine.generate.clone(),
        ready_timeout: Duration::from_secs(s.ready_timeout_s.unwrap_or(s.engine.ready_timeout_s)),
    };
    let beat = &mut |waiting: Option<String>| {
        if let Some(w) = waiting {
            say_every(&w, say);
        }
    };
    match executor::wait_ready(server.as_mut(), &spec, queue_timeout(s), &o.cancel, beat) {
        Err(NotReady::Interrupted) => interrupted(j, id, ExpState::Launching, server, say),
        Err(NotReady::Failed(f)) => {
            server.teardown(TEARDOWN_GRACE);
            fail(j, id, ExpState::Launching, f, say)
        }
        Ok(_) => {
            let endpoint = server.endpoint().unwrap_or_else(|| Endpoint::local(port));
            let logs = server.logs();
            let bench_path = dir.join(format!("exp-{id}-a{}.bench.json", e.attempt));
            let up = Up { server, endpoint, rendered, knobs, logs, bench_path, port };
            ready_then_benchmark(j, snap, id, up, o, say)
        }
    }
}

/// Planned -> launching -> up; `Err(outcome)` when it failed or was interrupted on the way.
fn launch(
    j: &mut Journal,
    dir: &Path,
    snap: &Snapshot,
    id: i64,
    o: &RunOptions,
    say: &mut dyn FnMut(&str),
) -> Result<std::result::Result<Up, Outcome>> {
    let s = &snap.settings;
    let e = j.experiment(id)?;
    let port = executor::free_port().map_err(|err| CampaignError::Runtime(format!("cannot find a free port: {err}")))?;
    let ctx = context(s, &snap.env.facts, port)?;
    let mut knobs = s.knobs.clone();
    knobs.extend(e.knobs.clone());
    let rendered = s.engine.render(&ctx, &knobs)?;
    let attempt = e.attempt + 1;
    let log_path = dir.join(format!("exp-{id}-a{attempt}.log"));
    let bench_path = dir.join(format!("exp-{id}-a{attempt}.bench.json"));
    let owner = Owner { pid: i64::from(std::process::id()), pgid: None };
    let up = Update {
        owner: Some(owner),
        new_attempt: true,
        log_path: Some(log_path.display().to_string()),
        env_fingerprint: Some(snap.env_id),
        ..Update::default()
    };
    j.transition(id, &[ExpState::Planned], ExpState::Launching, &up, &format!("launch on port {port}: {}", shown(&rendered.argv)))?;
    say(&format!("experiment {id} (attempt {attempt}): {}", e.title));
    let (argv, env) = crate::secrets::unseal_launch(dir, &rendered.argv, &rendered.env)?;
    let mut spec = LaunchSpec {
        argv,
        env,
        log_path: log_path.clone(),
        port,
        health: s.engine.health.clone(),
        generate: s.engine.generate.clone(),
        ready_timeout: Duration::from_secs(s.ready_timeout_s.unwrap_or(s.engine.ready_timeout_s)),
    };
    let mut rendered = rendered;
    // The port is picked by binding port 0 and releasing it; another process can take it before the
    // server binds it. That race gets one more try on a new port; a second port_in_use is recorded.
    for try_no in 0..2 {
        let mut server = match start_server(j, s, id, &spec, attempt) {
            Ok(srv) => srv,
            Err(f) => return fail(j, id, ExpState::Launching, f, say).map(Err),
        };
        let queue_timeout = queue_timeout(s);
        let beat = &mut |waiting: Option<String>| {
            if let Some(w) = waiting {
                say_every(&w, say);
            }
        };
        match executor::wait_ready(server.as_mut(), &spec, queue_timeout, &o.cancel, beat) {
            Err(NotReady::Interrupted) => return interrupted(j, id, ExpState::Launching, server, say).map(Err),
            Err(NotReady::Failed(f)) => {
                let td = server.teardown(TEARDOWN_GRACE);
                say(&format!("  torn down; port {} {}", spec.port, if td.port_free { "is free" } else { "is still taken" }));
                if f.kind == FailureKind::PortInUse && try_no == 0 {
                    let new_port =
                        executor::free_port().map_err(|err| CampaignError::Runtime(format!("cannot find a free port: {err}")))?;
                    j.add_event(
                        "retry",
                        &format!("experiment {id}: port {} was taken ({}); retrying on port {new_port}", spec.port, f.evidence.join(" | ")),
                    )?;
                    say(&format!("  port {} was taken; retrying on port {new_port}", spec.port));
                    rendered = s.engine.render(&context(s, &snap.env.facts, new_port)?, &knobs)?;
                    spec.argv = crate::secrets::unseal_launch(dir, &rendered.argv, &rendered.env)?.0;
                    spec.port = new_port;
                    continue;
                }
                return fail(j, id, ExpState::Launching, f, say).map(Err);
            }
            Ok(_) => {
                let endpoint = server.endpoint().unwrap_or_else(|| Endpoint::local(spec.port));
                let logs = server.logs();
                return Ok(Ok(Up { server, endpoint, rendered, knobs, logs, bench_path, port: spec.port }));
            }
        }
    }
    Err(CampaignError::Runtime(format!("experiment {id}: no launch try left")))
}

/// A launch command for people: values filled in on each node shown as `{node_rank}` and the like.
fn shown(argv: &[String]) -> String {
    argv.iter().map(|w| servetune_slurm::display_word(w)).collect::<Vec<_>>().join(" ")
}

/// Starts the server on the campaign's executor and journals how to find it again.
fn start_server(j: &Journal, s: &Settings, id: i64, spec: &LaunchSpec, attempt: i64) -> std::result::Result<Box<dyn Launched>, Failure> {
    let journal_err = |e: CampaignError| Failure {
        kind: FailureKind::SpawnFailed,
        exit: None,
        evidence: vec![e.to_string()],
        corrective: FailureKind::SpawnFailed.corrective().into(),
        summary: e.to_string(),
    };
    match &s.executor {
        Executor::Local => {
            let srv = executor::spawn(spec)?;
            j.set_server_pgid(id, i64::from(srv.pgid)).map_err(journal_err)?;
            Ok(Box::new(srv))
        }
        Executor::Slurm(cfg) => {
            let srv = executor_slurm::submit(cfg, spec, &format!("servetune-exp-{id}-a{attempt}"))?;
            j.set_slurm_job(id, srv.job, spec.port).map_err(journal_err)?;
            j.add_event("slurm", &format!("experiment {id}: submitted Slurm job {} ({} node(s))", srv.job, cfg.nodes.max(1)))
                .map_err(journal_err)?;
            Ok(Box::new(srv))
        }
    }
}

fn queue_timeout(s: &Settings) -> Duration {
    match &s.executor {
        Executor::Local => Duration::from_secs(60),
        Executor::Slurm(c) => Duration::from_secs(c.queue_timeout_s),
    }
}

/// How the server ended, if it does within `limit`.
fn ended_within(srv: &mut dyn Launched, limit: Duration) -> Option<ExitInfo> {
    let until = std::time::Instant::now() + limit;
    loop {
        if let Some(x) = srv.exited() {
            return Some(x);
        }
        if std::time::Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Says a waiting line when it changes (a queued job's reason), not every poll.
fn say_every(line: &str, say: &mut dyn FnMut(&str)) {
    thread_local!(static LAST: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) });
    LAST.with(|l| {
        if *l.borrow() != line {
            say(&format!("  {line}"));
            *l.borrow_mut() = line.to_string();
        }
    });
}

/// The bench sweep, teardown, and the experiment's end state.
fn benchmark(j: &mut Journal, snap: &Snapshot, id: i64, mut up: Up, o: &RunOptions, say: &mut dyn FnMut(&str)) -> Result<Outcome> {
    let port = up.port;
    let sweep = bench_step::run_sweep(&up.endpoint.url(), &snap.settings.bench, &up.bench_path, &o.cancel);
    if o.cancel.load(Ordering::Relaxed) {
        return interrupted(j, id, ExpState::Benchmarking, up.server, say);
    }
    // A server that went away makes every request fail; give its end a moment to show (a Slurm job
    // passes through COMPLETING) so the failure is the server's, not the benchmark's.
    let some_failed = sweep.as_ref().map_or(true, |sm| sm.points.iter().any(|p| p.failed > 0));
    let crash = ended_within(up.server.as_mut(), if some_failed { Duration::from_secs(15) } else { Duration::ZERO })
        .map(|x| up.server.failure(Some(x), false));
    let td = up.server.teardown(TEARDOWN_GRACE);
    say(&format!(
        "  torn down ({}); port {port} {}",
        if td.killed { "SIGKILL after the grace period" } else { "SIGTERM" },
        if td.port_free { "is free" } else { "is still taken" }
    ));
    record_log_findings(j, &snap.settings.engine, &up.logs, id)?;
    if !td.port_free {
        j.add_finding(&NewFinding {
            source: "executor",
            code: "port_not_free",
            severity: "warning",
            title: "the port stayed taken after teardown",
            evidence: &format!("port {port} after experiment {id}"),
            fix: "find the process with ss -ltnp and stop it",
            experiment: Some(id),
        })?;
    }
    if let Some(mut f) = crash {
        f.evidence.insert(0, "the server exited during the benchmark".into());
        return fail(j, id, ExpState::Benchmarking, f, say);
    }
    let summary = match sweep {
        Ok(sm) if !sm.all_failed() => sm,
        Ok(sm) => {
            let ex = sm.error_example.clone().unwrap_or_default();
            return fail(j, id, ExpState::Benchmarking, bench_failure(format!("every request failed; e.g. {ex}")), say);
        }
        Err(why) => return fail(j, id, ExpState::Benchmarking, bench_failure(why), say),
    };
    let line = record_done(j, snap, id, &up.knobs, summary, &up.bench_path)?;
    say(&format!("  {line}"));
    Ok(Outcome::Progress { experiment: id, state: ExpState::Done, line })
}

/// Records a measured sweep: the model's verdict and calibration, then the experiment done. When
/// the journal cannot take it (a full disk, a lost file system), the measurement is not lost: the
/// sweep's summary is written beside the journal (`exp-ID.result.json`) when it can be, the bench
/// JSON written during the sweep is named, and the error says both.
fn record_done(
    j: &mut Journal,
    snap: &Snapshot,
    id: i64,
    knobs: &BTreeMap<String, String>,
    summary: bench_step::BenchSummary,
    bench_json: &Path,
) -> Result<String> {
    let best = summary.best_output_tok_s(true);
    let knee = summary.knee_concurrency.map_or(String::new(), |c| format!(", knee at concurrency {c}"));
    let line = format!("experiment {id} done: best {best:.1} output tok/s{knee}");
    let kept = summary.clone();
    let recorded = (|| {
        if let Some(m) = model_box(&snap.settings, &snap.env.facts) {
            crate::verdict::record_measurement(j, &m, &snap.env.facts.hash, id, knobs, &summary)?;
        }
        j.transition(id, &[ExpState::Benchmarking], ExpState::Done, &Update { result: Some(summary), ..Update::default() }, &line)
    })();
    recorded.map_err(|e| keep_measured(j.path(), id, &kept, bench_json, e))?;
    Ok(line)
}

/// The error of a journal that could not take a measured sweep, after keeping the sweep beside it.
fn keep_measured(journal: &Path, id: i64, summary: &bench_step::BenchSummary, bench_json: &Path, e: CampaignError) -> CampaignError {
    let dir = journal.parent().unwrap_or(Path::new("."));
    let file = dir.join(format!("exp-{id}.result.json"));
    let kept = serde_json::to_vec_pretty(summary).map_err(std::io::Error::other).and_then(|b| std::fs::write(&file, b));
    let where_ = match kept {
        Ok(()) => format!("its summary is kept in {} and its requests in {}", file.display(), bench_json.display()),
        Err(w) => format!("it could not be kept in {} ({w}); its requests are in {}", file.display(), bench_json.display()),
    };
    CampaignError::Runtime(format!(
        "{}: the measured sweep of experiment {id} could not be recorded ({e}); {where_}. Free space and run campaign continue again (the step is then re-run)",
        journal.display()
    ))
}

fn bench_failure(why: String) -> Failure {
    Failure {
        kind: FailureKind::BenchFailed,
        exit: None,
        evidence: vec![why.clone()],
        corrective: FailureKind::BenchFailed.corrective().into(),
        summary: why,
    }
}

fn fail(j: &mut Journal, id: i64, from: ExpState, f: Failure, say: &mut dyn FnMut(&str)) -> Result<Outcome> {
    let line = format!("experiment {id} failed: {} ({})", f.kind.name(), f.summary);
    say(&format!("  {line}\n  evidence: {}\n  corrective step: {}", f.evidence.join(" | "), f.corrective));
    j.transition(id, &[from], ExpState::Failed, &Update { failure: Some(f), ..Update::default() }, &line)?;
    Ok(Outcome::Progress { experiment: id, state: ExpState::Failed, line })
}

fn interrupted(j: &mut Journal, id: i64, from: ExpState, mut server: Box<dyn Launched>, say: &mut dyn FnMut(&str)) -> Result<Outcome> {
    let port = server.endpoint().map_or(0, |e| e.port);
    let td = server.teardown(TEARDOWN_GRACE);
    let line = format!("experiment {id} interrupted; server torn down, port {port} {}", if td.port_free { "free" } else { "still taken" });
    j.transition(id, &[from], ExpState::Interrupted, &Update::default(), &line)?;
    say(&format!("  {line}"));
    Ok(Outcome::Progress { experiment: id, state: ExpState::Interrupted, line })
}

fn fingerprint(j: &Journal, s: &Settings, snap: &Snapshot, up: &Up) -> Result<i64> {
    let r = &up.rendered;
    let mut env: BTreeMap<String, String> = std::env::vars().filter(|(k, _)| ENV_PREFIXES.iter().any(|p| k.starts_with(p))).collect();
    env.extend(r.env.clone());
    let (env, argv) = strip_secrets(&env, &r.argv, &s.secret_env);
    let argv: Vec<String> = argv.iter().map(|w| servetune_slurm::display_word(w)).collect();
    let ctx = context(s, &snap.env.facts, up.port)?;
    let fill = |w: &str| -> String {
        let mut out = w.to_string();
        for (k, v) in ctx.values.iter().chain(r.knobs.iter()) {
            out = out.replace(&format!("{{{k}}}"), v);
        }
        out
    };
    let engine_version = s.engine.version.as_ref().and_then(|q| executor::version(q, &up.endpoint, &fill));
    let moe_configs =
        log_signals(&s.engine, &up.logs).into_iter().filter(|(sig, _)| *sig == LogSignal::MoeConfigLoaded).map(|(_, l)| l).collect();
    let (slurm_job, nodes) = match up.server.handle() {
        Handle::SlurmJob(job) => (Some(job), executor_slurm::JobFiles::of(&up.logs[0]).node_lines()),
        Handle::ProcessGroup(_) => (None, Vec::new()),
    };
    let f = &snap.env.facts;
    let lf = LaunchFingerprint {
        engine: s.engine.name.clone(),
        argv,
        env,
        engine_version,
        driver_version: f.driver_version.clone(),
        cuda_version: f.cuda_version.clone(),
        nccl_version: std::env::var("NCCL_VERSION").ok(),
        moe_configs,
        environment: snap.env_id,
        slurm_job,
        nodes,
    };
    let body = serde_json::to_value(&lf).map_err(|e| CampaignError::Runtime(e.to_string()))?;
    let hash = journal::stable_hash(&body.to_string());
    j.add_fingerprint("experiment", &hash, &body)
}

fn record_log_findings(j: &Journal, e: &EngineTemplate, logs: &[PathBuf], id: i64) -> Result<()> {
    if let Some((_, line)) = log_signals(e, logs).into_iter().find(|(s, _)| *s == LogSignal::MoeDefaultConfig) {
        j.add_finding(&NewFinding {
            source: "log",
            code: "moe_default_config",
            severity: "warning",
            title: "fused-MoE kernels run with untuned default configs",
            evidence: &line,
            fix: "tune the MoE kernels for this model's expert shape on these GPUs and install the config",
            experiment: Some(id),
        })?;
    }
    Ok(())
}

/// How a person answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Text(String),
    Done,
    Declined,
}

/// Records an answer; `--done` on a failure question re-queues that experiment.
pub fn answer(dir: &Path, q: i64, a: &Answer) -> Result<QuestionRow> {
    let mut j = Journal::open(dir)?;
    let (state, text) = match a {
        Answer::Text(t) => (QuestionState::Answered, Some(t.as_str())),
        Answer::Done => (QuestionState::Done, None),
        Answer::Declined => (QuestionState::Declined, None),
    };
    j.answer(q, state, text)?;
    let row = j.questions()?.into_iter().find(|x| x.id == q).ok_or_else(|| CampaignError::Runtime(format!("question {q} vanished")))?;
    if let (QuestionState::Done, Some(exp)) = (state, failed_experiment_of(&row.key)) {
        j.transition(exp, &[ExpState::Failed], ExpState::Planned, &Update::default(), &format!("re-queued: question {q} answered --done"))?;
    }
    Ok(row)
}

/// The experiment a failure question (`fix:<experiment>:<attempt>`) is about.
fn failed_experiment_of(key: &str) -> Option<i64> {
    key.strip_prefix("fix:")?.split(':').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_stripped_by_name_and_by_value() {
        let env = BTreeMap::from([
            ("HF_TOKEN".to_string(), "abc".to_string()),
            ("NCCL_ALGO".to_string(), "Ring".to_string()),
            ("MY_PASS".to_string(), "s3cret-value".to_string()),
        ]);
        std::env::set_var("SERVETUNE_TEST_SECRET_VALUE_ENV", "s3cret-value");
        let argv = vec!["srv".to_string(), "--api-key=s3cret-value".to_string()];
        let (e, a) = strip_secrets(&env, &argv, &["SERVETUNE_TEST_SECRET_VALUE_ENV".into()]);
        assert_eq!(e["HF_TOKEN"], "<redacted>");
        assert_eq!(e["MY_PASS"], "<redacted>");
        assert_eq!(e["NCCL_ALGO"], "Ring");
        assert_eq!(a, ["srv", "<redacted>"]);
    }

    #[test]
    fn a_sweep_the_journal_cannot_take_is_kept_beside_it_and_named() {
        let d = tempfile::tempdir().expect("tmp");
        let journal = d.path().join("journal.sqlite");
        let summary = bench_step::BenchSummary {
            points: Vec::new(),
            knee_concurrency: Some(64),
            knee_evidence: None,
            partial: false,
            error_example: None,
        };
        let full = CampaignError::Runtime("journal: database or disk is full".into());
        let e = keep_measured(&journal, 7, &summary, &d.path().join("exp-7-a1.bench.json"), full).to_string();
        let file = d.path().join("exp-7.result.json");
        assert!(
            e.contains("database or disk is full") && e.contains(&file.display().to_string()) && e.contains("exp-7-a1.bench.json"),
            "{e}"
        );
        let back: bench_step::BenchSummary = serde_json::from_slice(&std::fs::read(&file).expect("kept")).expect("json");
        assert_eq!(back, summary);
    }

    #[test]
    fn failure_question_keys_name_their_experiment() {
        assert_eq!(failed_experiment_of("fix:12:3"), Some(12));
        assert_eq!(failed_experiment_of("p2p:abc"), None);
    }
}
