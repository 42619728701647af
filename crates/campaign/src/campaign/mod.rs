//! The campaign's operations: `init` (probe and write the journal), `probe` (re-probe), `add`
//! (queue an experiment), `continue_once` (recover stale steps, run the top runnable step or stop to
//! ask), `answer`, and `view` (the planner's input from the journal).
//!
//! This module holds the campaign's settings and setup (`init`, `reprobe`, `add`, `answer`, the
//! launch context and the model's view of the box); `run` is the continue loop ([`continue_until`]) and `experiment`
//! one experiment's launch, benchmark and record.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::bench_step::{self, BenchPlan};
use crate::classify::{ExitInfo, Failure, FailureKind};
use crate::engine::{Context, EngineTemplate, LogSignal, Rendered};
use crate::executor::{self, Handle, LaunchSpec, Launched, NotReady};
use crate::executor_slurm::{self, SlurmServer, SlurmSettings};
use crate::finding::{Code, Severity, Source};
use crate::goal::{self, Goal};
use crate::http::Endpoint;
use crate::journal::{self, CampaignRow, ExpState, Experiment, Journal, NewFinding, Owner, QuestionRow, QuestionState, Update};
use crate::plan_step::{self, ModelBox};
use crate::planner::{self, Step, StepKind, Verdict, View};
use crate::probe_step::{self, BoxFacts, ProbeFinding};
use crate::{now_ms, CampaignError, Result};

mod experiment;
mod run;
pub use experiment::*;
pub use run::*;

/// Grace between SIGTERM and SIGKILL at teardown.
pub const TEARDOWN_GRACE: Duration = Duration::from_secs(10);

/// The campaign's resolved settings, stored in the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// The goal, parsed.
    pub goal: Goal,
    /// The engine template every experiment launches.
    pub engine: EngineTemplate,
    /// What `{model}` becomes (a path, an HF id or a catalog name).
    pub model: String,
    /// The model catalog name the performance model prices, when it knows the model.
    pub catalog_model: Option<String>,
    /// The quantization the performance model prices (e.g. nvfp4, fp8).
    pub quant: String,
    /// The GPU model and count, when given instead of (or over) the probe's.
    pub gpu: Option<String>,
    /// The GPU count, when given instead of the probe's.
    pub gpus: Option<u32>,
    /// The sweep every experiment runs.
    pub bench: BenchPlan,
    /// Knobs every experiment sets.
    pub knobs: BTreeMap<String, String>,
    /// Environment variables whose values are secrets (stripped from fingerprints).
    pub secret_env: Vec<String>,
    /// The readiness deadline in seconds, over the template's `ready_timeout_s`.
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
    /// The campaign directory (journal, logs, bench JSON).
    pub dir: PathBuf,
    /// The resolved settings.
    pub settings: Settings,
    /// A probe snapshot tree to read instead of the live box.
    pub probe_root: Option<PathBuf>,
}

/// The environment as the journal knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvBody {
    /// The facts the campaign needs.
    pub facts: BoxFacts,
    /// The probe's findings.
    pub findings: Vec<ProbeFinding>,
    /// Where the probe came from: "live" or the snapshot directory.
    pub source: String,
    /// The whole probe report.
    pub report: serde_json::Value,
}

/// Builds the settings from flags (the CLI's raw values).
pub fn settings(goal_text: &str, engine: EngineTemplate, model: &str, quant: &str, knobs: BTreeMap<String, String>) -> Result<Settings> {
    let goal = goal::parse(goal_text)?;
    engine.validate()?;
    engine.check_knobs(&knobs)?;
    // A catalog name, or the Hugging Face repository of a checkpoint the catalog lists (what
    // `sglang --model-path` and `vllm serve` take): the model's predictions use that entry.
    let catalog_model = servetune_model::spec::named_model(model).ok().map(|n| n.entry.name.clone());
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
        catalog_model,
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
    // A file at DIR is bad input, not "cannot create it (File exists)".
    if std::fs::metadata(&o.dir).is_ok_and(|m| !m.is_dir()) {
        return Err(CampaignError::Input(format!("{0} is a file, not a folder; give a new or empty folder", o.dir.display())));
    }
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
        if cfg.nodes.get() > 1 && settings.engine.multi_node.is_empty() {
            return Err(CampaignError::Input(format!(
                "--nodes {}: engine {} has no multi_node words, so it cannot span nodes; use sglang or sim, or give a template with multi_node (see servetune campaign engines --help){}",
                cfg.nodes,
                settings.engine.name,
                if settings.engine.kind() == crate::engine::EngineKind::Vllm { "; vLLM across nodes runs on a Ray cluster started beforehand" } else { "" }
            )));
        }
        let knobs = effective_knobs(&settings, &env.facts, &BTreeMap::new())?;
        let lay = crate::planner::layout(&crate::knobs::KnobValues::parse(&knobs, "the campaign's knobs")?, env.facts.gpus);
        let mut c = cfg.clone();
        executor_slurm::check(&mut c, lay.tp * lay.pp, &o.dir)?;
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
    let id = j.add_fingerprint(journal::FingerprintKind::Probe, &env.facts.hash, &body)?;
    for f in &env.findings {
        j.add_finding(&NewFinding {
            source: Source::Probe,
            code: Code::Probe(f.code),
            severity: f.severity,
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
    serde_json::from_str(&j.campaign()?.settings).map_err(|e| crate::damaged(format!("journal settings: {e}")))
}

/// The current environment: its fingerprint id and body.
pub fn current_env(j: &Journal) -> Result<(i64, EnvBody)> {
    let fp = j
        .latest_fingerprint(journal::FingerprintKind::Probe)?
        .ok_or_else(|| CampaignError::Runtime("the journal holds no probe of the box: run servetune campaign probe DIR".into()))?;
    let body: EnvBody = serde_json::from_value(fp.body).map_err(|e| crate::damaged(format!("journal probe fingerprint {}: {e}", fp.id)))?;
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
        requests: Some(s.bench.requests),
        objectives: s.goal.slo_list(),
        max_concurrency: s.bench.concurrency.iter().copied().max().unwrap_or(1),
        sweep: s.bench.concurrency.clone(),
        serving: servetune_model::predict::EngineName::from_name(&s.engine.name).unwrap_or_default(),
        engine_version: None,
        calibration: None,
        allreduce: None,
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
            v.insert("nnodes".into(), if c.nodes.get() > 1 { R::Nnodes.marker() } else { "1".into() });
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

/// How a person answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// An answer in words.
    Text(String),
    /// The person did what was asked.
    Done,
    /// The person will not do it: go on without it.
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

    /// A pid past i32 in a journal names no process, not the one its low 32 bits name.
    #[test]
    fn a_journal_pid_past_32_bits_is_no_live_process() {
        let me = i64::from(std::process::id());
        assert!(run::process_alive(me), "this process");
        assert!(!run::process_alive((1i64 << 32) + me));
        assert!(!run::process_alive(-1));
    }

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
