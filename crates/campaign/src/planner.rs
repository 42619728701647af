//! The next-step planner: candidate steps from probe findings, the model's plan ranking, the bench
//! sweep and server metrics, and log warnings; each with its expected gain (the model's numbers),
//! its evidence (journal ids), its kind (runnable, or needs a person) and, when runnable, the exact
//! experiment.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::bench_step::BenchSummary;
use crate::engine::EngineTemplate;
use crate::finding::{Code, Evidence, Severity};
use crate::goal::Goal;
use crate::journal::{ExpState, Experiment, FindingRow, QuestionRow, QuestionState};
use crate::knobs::KnobValues;
use crate::plan_step::{self, Layout, ModelBox};
use crate::probe_step::{BoxFacts, FindingId};

/// Gains below this factor are not worth a step (the model's own error is larger).
pub const MIN_STEP_GAIN: f64 = 1.02;
/// Running requests within this of the concurrency count as "at the cap" only when they stay below it.
const QUEUE_EPS: f64 = 0.5;
/// A sweep "plateaus" past the running cap when throughput grew less than this from the first point
/// at or above the cap to the last, although concurrency at least doubled: below its cap a server
/// gains far more than that from twice the requests, so the cap, not the GPUs, set the ceiling.
/// Looser than bench's point-to-point MIN_GAIN because queued requests make each point noisy.
const PLATEAU_GROWTH: f64 = 0.25;

/// Where a step comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepSource {
    /// The first measurement in this environment.
    Baseline,
    /// A probe finding (e.g. a VM without P2P).
    ProbeFinding,
    /// The model ranks another parallelism plan higher.
    PlanRank,
    /// The sweep plateaued with requests queued behind the running cap.
    RunningCap,
    /// KV usage reached 100%.
    KvFull,
    /// A server log warning (e.g. untuned MoE kernels).
    LogWarning,
    /// An experiment already queued (`campaign add`, a re-queued failure or an interrupted
    /// step): `continue` runs it before anything the planner proposes.
    Queued,
    /// An experiment failed and a person must fix the cause.
    Failure,
}

/// What kind of step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// The exact experiment: the knobs it sets (on top of the campaign's).
    Runnable {
        /// The experiment's knobs.
        knobs: BTreeMap<String, String>,
    },
    /// A person must act; the question and how to answer it.
    NeedsPerson {
        /// The question's key: it is asked once per key.
        key: String,
        /// The question.
        question: String,
        /// How to act on it and answer, in words.
        how: String,
    },
}

/// A candidate next step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// What the step does, in words.
    pub title: String,
    /// Which rule proposed it.
    pub source: StepSource,
    /// Runnable (with its knobs) or needs a person (with the question).
    pub kind: StepKind,
    /// Expected gain over the current best as a factor (1.25 = +25%), from the model with the
    /// box's calibration when it has one (the figure steps are ranked by).
    pub gain: Option<f64>,
    /// The model's own gain, without the calibration.
    pub raw_gain: Option<f64>,
    /// The experiment the calibration behind `gain` was fitted to (`None`: `gain` is raw).
    pub calibrated_on: Option<i64>,
    /// The model's numbers: current and predicted output tok/s.
    pub current_tok_s: Option<f64>,
    /// The model's predicted output tok/s after the step.
    pub predicted_tok_s: Option<f64>,
    /// Why, in words.
    pub basis: String,
    /// Journal records it rests on ("experiment 3", "finding 2").
    pub evidence: Vec<Evidence>,
}

/// What the campaign should do next.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Verdict {
    /// Run or ask the first of these steps (ranked).
    Steps(Vec<Step>),
    /// The goal is met by this experiment.
    GoalMet {
        /// The experiment that met it.
        experiment: i64,
        /// Its best output tok/s.
        output_tok_s: f64,
    },
    /// No step with a positive expected gain.
    NothingLeft {
        /// Why, in words.
        reason: String,
    },
}

/// Everything the planner reads.
#[derive(Debug, Clone)]
pub struct View<'a> {
    /// The campaign's goal.
    pub goal: &'a Goal,
    /// The engine template experiments launch.
    pub engine: &'a EngineTemplate,
    /// The current environment's facts.
    pub facts: &'a BoxFacts,
    /// The current probe's findings: (journal finding id, code).
    pub probe_findings: Vec<(i64, FindingId)>,
    /// Experiments in the current environment.
    pub experiments: Vec<&'a Experiment>,
    /// Every finding of the journal.
    pub findings: &'a [FindingRow],
    /// Every question of the journal.
    pub questions: &'a [QuestionRow],
    /// The model's view of the box, when the model can price this campaign.
    pub model: Option<ModelBox>,
    /// The knobs of the baseline (campaign knobs plus template defaults).
    pub base_knobs: BTreeMap<String, String>,
    /// The baseline's knobs the planner reads, parsed.
    pub base_values: KnobValues,
}

/// An experiment's layout from its knobs.
/// An unset `tp` spans every GPU of the box, an unset `pp` or `ep` is 1 (no pipeline, no expert
/// parallelism), and an unset `max_running` is the engine's own default cap, which the model
/// applies by engine and release (`servetune_model::predict::BatchDefaults`); an unset or `auto`
/// `kv_dtype` is the engine's default cache for the checkpoint, which the model decides.
pub fn layout(knobs: &KnobValues, gpus: u32) -> Layout {
    Layout {
        tp: knobs.tp.unwrap_or(gpus),
        pp: knobs.pp.unwrap_or(1),
        ep: knobs.ep.unwrap_or(1),
        max_running: knobs.max_running,
        kv_cache: knobs.kv_cache,
        mem_fraction: knobs.mem_fraction,
    }
}

/// The best finished experiment in the view's environment: what a step's gain is measured against.
pub fn best_experiment(v: &View<'_>) -> Option<i64> {
    best_done(v).map(|(e, _)| e.id)
}

fn best_done<'a>(v: &View<'a>) -> Option<(&'a Experiment, &'a BenchSummary)> {
    v.experiments
        .iter()
        .filter(|e| e.state == ExpState::Done)
        .filter_map(|e| e.result.as_ref().map(|r| (*e, r)))
        .max_by(|a, b| a.1.best_output_tok_s(true).total_cmp(&b.1.best_output_tok_s(true)))
}

fn question_state(v: &View<'_>, key: &str) -> Option<QuestionState> {
    v.questions.iter().find(|q| q.key == key).map(|q| q.state)
}

fn tried(v: &View<'_>, knobs: &BTreeMap<String, String>) -> bool {
    v.experiments.iter().any(|e| &e.knobs == knobs)
}

/// The ranked next steps, or why there are none.
pub fn plan(v: &View<'_>) -> Verdict {
    let best = best_done(v);
    if let Some((e, r)) = best {
        let tok = r.best_output_tok_s(true);
        if tok >= v.goal.output_tok_s {
            return Verdict::GoalMet { experiment: e.id, output_tok_s: tok };
        }
    }
    let current = best.map_or(v.base_values, |(e, _)| e.values);
    let lay = crate::verdict::measured_layout(&current, v.facts.gpus, best.map(|(_, r)| r));
    let mut asks: Vec<Step> = Vec::new();
    let mut runs: Vec<Step> = Vec::new();
    asks.extend(p2p_question(v, lay));
    asks.extend(failure_question(v));
    let baseline = (!tried(v, &v.base_knobs)).then(|| Step {
        title: "baseline: the campaign's launch command as given".into(),
        source: StepSource::Baseline,
        kind: StepKind::Runnable { knobs: v.base_knobs.clone() },
        gain: None,
        raw_gain: None,
        calibrated_on: None,
        current_tok_s: None,
        predicted_tok_s: v.model.as_ref().and_then(|m| plan_step::predict(m, lay)).map(|p| p.output_tok_s),
        basis: "measure the starting point before changing anything".into(),
        evidence: Vec::new(),
    });
    if let Some((e, r)) = best {
        runs.extend(plan_rank(v, e, lay));
        runs.extend(running_cap(v, e, r, lay));
        runs.extend(kv_full(v, e, r, lay));
        asks.extend(moe_question(v, lay));
    }
    let by_gain = |a: &Step, b: &Step| b.gain.unwrap_or(0.0).total_cmp(&a.gain.unwrap_or(0.0));
    asks.sort_by(by_gain);
    runs.sort_by(by_gain);
    // A failure blocks everything; then a step that fixes the box itself (a critical environment
    // finding), whatever the gains, since knob results measured on a box that is about to change
    // do not carry over; then questions worth more than the next runnable step; then the
    // baseline, then the runnable steps by gain.
    asks.sort_by_key(|s| {
        if s.source == StepSource::Failure {
            0
        } else if fixes_the_box(v, s) {
            1
        } else {
            2
        }
    });
    let mut steps: Vec<Step> = Vec::new();
    let top_run = runs.first().and_then(|s| s.gain).unwrap_or(MIN_STEP_GAIN);
    let (first, later): (Vec<Step>, Vec<Step>) = asks
        .into_iter()
        .partition(|s| s.source == StepSource::Failure || fixes_the_box(v, s) || s.gain.is_none_or(|g| g >= top_run) || baseline.is_some());
    steps.extend(first);
    steps.extend(baseline);
    steps.extend(runs);
    steps.extend(later);
    if steps.is_empty() {
        let tok = best.map_or(0.0, |(_, r)| r.best_output_tok_s(true));
        return Verdict::NothingLeft {
            reason: format!(
                "no step with a positive expected gain: {} experiment(s) in this environment, best {tok:.1} output tok/s against the goal {}",
                v.experiments.len(),
                v.goal.text
            ),
        };
    }
    Verdict::Steps(steps)
}

/// Whether `s` changes the environment itself to resolve a critical probe finding of the current
/// box (the box is wrong, e.g. a VM guest without GPU peer-to-peer).
fn fixes_the_box(v: &View<'_>, s: &Step) -> bool {
    s.source == StepSource::ProbeFinding
        && v.probe_findings.iter().any(|(id, _)| {
            s.evidence.contains(&Evidence::Finding(*id)) && v.findings.iter().any(|f| f.id == *id && f.severity == Severity::Critical)
        })
}

/// The current and the what-if output tok/s of a step.
type Pair = (Option<f64>, Option<f64>);

/// Prices a what-if with the box as the planner sees it (calibrated when it can be) and with the
/// model alone: ((current, new) with the calibration, the raw gain, the calibration's experiment).
fn priced(v: &View<'_>, price: impl Fn(&ModelBox) -> Pair) -> (Pair, Option<f64>, Option<i64>) {
    let Some(m) = v.model.as_ref() else { return ((None, None), None, None) };
    let shown = price(m);
    let raw = if m.calibration.is_some() { price(&m.uncalibrated()) } else { shown };
    (shown, gain_of(raw.0, raw.1), m.calibration.map(|c| c.experiment))
}

/// What a gain rests on, for the words of a step: nothing for the model alone, else the
/// calibration's experiment and the model's own figure.
fn calibration_words(raw_gain: Option<f64>, calibrated_on: Option<i64>) -> String {
    match (calibrated_on, raw_gain) {
        (Some(e), Some(r)) => format!(", calibrated on experiment {e}; the model alone {:+.0}%", (r - 1.0) * 100.0),
        (Some(e), None) => format!(", calibrated on experiment {e}"),
        (None, _) => String::new(),
    }
}

fn gain_of(cur: Option<f64>, new: Option<f64>) -> Option<f64> {
    match (cur, new) {
        (Some(c), Some(n)) if c > 0.0 => Some(n / c),
        _ => None,
    }
}

fn p2p_question(v: &View<'_>, lay: Layout) -> Option<Step> {
    let (fid, _) = v.probe_findings.iter().find(|(_, code)| *code == FindingId::VmNoP2p)?;
    let key = format!("p2p:{}", v.facts.hash);
    if question_state(v, &key).is_some_and(|s| s != QuestionState::Open) {
        return None;
    }
    // The link with P2P on, on this GPU's own NVLink or PCIe generation (`hw::probed_link`).
    let price = |m: &ModelBox| {
        let cur = plan_step::predict(m, lay).map(|p| p.output_tok_s);
        let new =
            plan_step::with_link(m, lay, servetune_model::hw::probed_link(Some(&m.gpu), v.facts.nvlink, true)).map(|p| p.output_tok_s);
        (cur, new)
    };
    let ((cur, new), raw_gain, calibrated_on) = priced(v, price);
    let gain = gain_of(cur, new);
    let gain_words = match (cur, new, gain) {
        (Some(c), Some(n), Some(g)) => {
            format!(
                "plan predicts {c:.0} -> {n:.0} output tok/s ({:+.0}%{})",
                (g - 1.0) * 100.0,
                calibration_words(raw_gain, calibrated_on)
            )
        }
        _ => "the model cannot price it for this model/GPU".into(),
    };
    // The current figure rests on the box's measured all-reduce when one is recorded.
    let fabric = v.model.as_ref().and_then(|m| m.allreduce.as_ref()).map(|(id, _)| *id);
    let gain_words = match fabric {
        Some(id) => {
            format!("{gain_words}; the current figure prices NCCL's all-reduce as measured (fabric {id}), the P2P one by the model")
        }
        None => gain_words,
    };
    let critical = v.findings.iter().any(|f| f.id == *fid && f.severity == Severity::Critical);
    let basis = if critical {
        format!(
            "{gain_words}; asked before any knob tuning: a critical probe finding says the box itself is wrong ({} guest without GPU peer-to-peer), and knob results measured on a box that is about to change do not carry over",
            v.facts.vm
        )
    } else {
        gain_words.clone()
    };
    Some(Step {
        title: "get GPU peer-to-peer: move to bare metal or an LXC container, or give the VM a P2P clique".into(),
        source: StepSource::ProbeFinding,
        kind: StepKind::NeedsPerson {
            key,
            question: format!(
                "This {} guest has no GPU peer-to-peer, so every all-reduce is staged through host memory. Can you move the GPUs to bare metal or an LXC container (or give the VM a P2P clique)? {gain_words}.",
                v.facts.vm
            ),
            how: "after moving, re-probe with servetune campaign probe DIR, then answer --done; answer --declined to go on without P2P".into(),
        },
        gain,
        raw_gain,
        calibrated_on,
        current_tok_s: cur,
        predicted_tok_s: new,
        basis,
        evidence: std::iter::once(Evidence::Finding(*fid)).chain(fabric.map(Evidence::Fabric)).collect(),
    })
}

fn failure_question(v: &View<'_>) -> Option<Step> {
    if v.experiments.iter().any(|e| e.state == ExpState::Done) {
        return None;
    }
    let e = v.experiments.iter().rev().find(|e| e.state == ExpState::Failed)?;
    let f = e.failure.as_ref()?;
    let key = format!("fix:{}:{}", e.id, e.attempt);
    if question_state(v, &key).is_some_and(|s| s != QuestionState::Open) {
        return None;
    }
    Some(Step {
        title: format!("fix the failed experiment {} ({})", e.id, f.kind.name()),
        source: StepSource::Failure,
        kind: StepKind::NeedsPerson {
            key,
            question: format!(
                "Experiment {} ({}) failed: {}. Evidence: {}. Corrective step: {}",
                e.id,
                e.title,
                f.summary,
                f.evidence.join(" | "),
                f.corrective
            ),
            how: "fix the cause, then answer --done to run it again, or --declined to leave it failed".into(),
        },
        gain: None,
        raw_gain: None,
        calibrated_on: None,
        current_tok_s: None,
        predicted_tok_s: None,
        basis: "no experiment has succeeded in this environment".into(),
        evidence: vec![Evidence::Experiment(e.id)],
    })
}

fn plan_rank(v: &View<'_>, best: &Experiment, lay: Layout) -> Vec<Step> {
    let Some(m) = v.model.as_ref() else { return Vec::new() };
    if v.engine.knob("tp").is_none() {
        return Vec::new();
    }
    let cur = plan_step::predict(m, lay).map(|p| p.output_tok_s);
    plan_step::better_plans(m, lay)
        .into_iter()
        .filter_map(|alt| {
            let mut knobs = best.knobs.clone();
            for (k, val) in [("tp", alt.layout.tp), ("pp", alt.layout.pp), ("ep", alt.layout.ep)] {
                if v.engine.knob(k).is_some() {
                    knobs.insert(k.into(), val.to_string());
                } else if val != 1 {
                    return None;
                }
            }
            if tried(v, &knobs) || v.engine.check_knobs(&knobs).is_err() {
                return None;
            }
            let gain = gain_of(cur, Some(alt.predicted.output_tok_s)).filter(|g| *g >= MIN_STEP_GAIN)?;
            let raw = m.uncalibrated();
            let raw_gain = gain_of(
                plan_step::predict(&raw, lay).map(|p| p.output_tok_s),
                plan_step::predict(&raw, alt.layout).map(|p| p.output_tok_s),
            );
            Some(Step {
                title: format!("try {} (plan ranks it above {})", alt.label, layout_label(lay)),
                source: StepSource::PlanRank,
                kind: StepKind::Runnable { knobs },
                gain: Some(gain),
                raw_gain,
                calibrated_on: m.calibration.map(|c| c.experiment),
                current_tok_s: cur,
                predicted_tok_s: Some(alt.predicted.output_tok_s),
                basis: format!(
                    "plan --rank predicts {:.0} output tok/s at concurrency {} against {:.0}",
                    alt.predicted.output_tok_s,
                    alt.predicted.concurrency,
                    cur.unwrap_or(0.0)
                ),
                evidence: vec![Evidence::Experiment(best.id)],
            })
        })
        .take(2)
        .collect()
}

fn layout_label(l: Layout) -> String {
    let mut s = format!("TP{}", l.tp);
    if l.pp > 1 {
        s += &format!("+PP{}", l.pp);
    }
    if l.ep > 1 {
        s += &format!("+EP{}", l.ep);
    }
    s
}

/// The sweep plateaued past the point where requests began to queue behind the running cap.
fn running_cap(v: &View<'_>, best: &Experiment, r: &BenchSummary, lay: Layout) -> Option<Step> {
    let knob = v.engine.knob("max_running")?;
    let last = r.points.last()?;
    let running = last.server_max_running?;
    let capped = last.server_max_queued.unwrap_or(0.0) > 0.0 && running + QUEUE_EPS < f64::from(last.concurrency);
    let prev = r.points.iter().find(|p| f64::from(p.concurrency) + QUEUE_EPS >= running && 2 * p.concurrency <= last.concurrency)?;
    let growth = if prev.output_tok_s > 0.0 { last.output_tok_s / prev.output_tok_s - 1.0 } else { f64::INFINITY };
    if !(capped && growth < PLATEAU_GROWTH) {
        return None;
    }
    let new_cap = (running.round() as u32).saturating_mul(2).max(1);
    let mut knobs = best.knobs.clone();
    knobs.insert(knob.name.clone(), new_cap.to_string());
    if tried(v, &knobs) || v.engine.check_knobs(&knobs).is_err() {
        return None;
    }
    let m = v.model.as_ref();
    let conc = last.concurrency;
    let price = |m: &ModelBox| {
        let cur = plan_step::predict_at(m, Layout { max_running: Some(running.round() as u32), ..lay }, conc);
        (cur, plan_step::predict_at(m, Layout { max_running: Some(new_cap), ..lay }, conc))
    };
    let ((cur, new), raw_gain, calibrated_on) = priced(v, price);
    let gain = gain_of(cur, new);
    if m.is_some() && gain.is_none_or(|g| g < MIN_STEP_GAIN) {
        return None;
    }
    Some(Step {
        title: format!("raise the running-request cap to {new_cap}"),
        source: StepSource::RunningCap,
        kind: StepKind::Runnable { knobs },
        gain,
        raw_gain,
        calibrated_on,
        current_tok_s: cur,
        predicted_tok_s: new,
        basis: format!(
            "at concurrency {conc} throughput grew {:.1}% over concurrency {} while at most {running:.0} requests ran and {:.0} queued",
            (last.output_tok_s / prev.output_tok_s - 1.0) * 100.0,
            prev.concurrency,
            last.server_max_queued.unwrap_or(0.0)
        ),
        evidence: vec![Evidence::Experiment(best.id)],
    })
}

/// The share of GPU memory taken as the start when an experiment did not set `mem_fraction` (the
/// engine chose it) and there is no model to say the engine's default: vLLM's default utilization
/// is 0.9 and SGLang picks a static fraction near it on large GPUs. A step from it says that it
/// assumed it.
const UNSET_MEM_FRACTION: f64 = 0.88;

/// The KV cache filled: give it more memory, priced by the model at the concurrency where it
/// filled (the memory share moves the cache's capacity, and with it the running batch).
fn kv_full(v: &View<'_>, best: &Experiment, r: &BenchSummary, lay: Layout) -> Option<Step> {
    let knob = v.engine.knob("mem_fraction")?;
    let full = r.points.iter().find(|p| p.server_max_kv_usage.is_some_and(|k| k >= 0.99))?;
    // Unset: the engine's own share, as the model applies it by engine (else the constant).
    let engine_default = v.model.as_ref().and_then(|m| plan_step::scenario(m, lay).ok()).map(|s| s.mem_fraction_flag());
    let (cur, assumed) = match (best.values.mem_fraction, engine_default) {
        (Some(x), _) => (x, String::new()),
        (None, Some(d)) => (d, format!(" (unset: the engine's default, taken as {d})")),
        (None, None) => (UNSET_MEM_FRACTION, format!(" (unset: the engine's own, taken as {UNSET_MEM_FRACTION})")),
    };
    let new = ((cur + 0.04) * 100.0).round() / 100.0;
    let mut knobs = best.knobs.clone();
    knobs.insert(knob.name.clone(), format!("{new}"));
    if tried(v, &knobs) || v.engine.check_knobs(&knobs).is_err() {
        return None;
    }
    let conc = full.concurrency;
    let price = |m: &ModelBox| {
        let cur = plan_step::predict_at(m, Layout { mem_fraction: Some(cur), ..lay }, conc);
        (cur, plan_step::predict_at(m, Layout { mem_fraction: Some(new), ..lay }, conc))
    };
    let ((cur_tok, new_tok), raw_gain, calibrated_on) = priced(v, price);
    // As the cap step: with a model that sees less than the least worthwhile gain, the memory
    // was not what held the batch; without one, the measured full cache is the evidence.
    let gain = gain_of(cur_tok, new_tok);
    if v.model.is_some() && gain.is_none_or(|g| g < MIN_STEP_GAIN) {
        return None;
    }
    Some(Step {
        title: format!("give the KV cache more memory ({} {cur}{assumed} -> {new}); an fp8 KV cache is the other way", knob.name),
        source: StepSource::KvFull,
        kind: StepKind::Runnable { knobs },
        gain,
        raw_gain,
        calibrated_on,
        current_tok_s: cur_tok,
        predicted_tok_s: new_tok,
        basis: format!(
            "KV usage reached {:.0}% at concurrency {conc}{}",
            full.server_max_kv_usage.unwrap_or(1.0) * 100.0,
            calibration_words(raw_gain, calibrated_on)
        ),
        evidence: vec![Evidence::Experiment(best.id)],
    })
}

fn moe_question(v: &View<'_>, lay: Layout) -> Option<Step> {
    let ids: Vec<i64> = v.experiments.iter().map(|e| e.id).collect();
    let f = v.findings.iter().find(|f| f.code == Code::MoeDefaultConfig && f.experiment.is_some_and(|e| ids.contains(&e)))?;
    let key = format!("moe:{}", v.facts.hash);
    if question_state(v, &key).is_some_and(|s| s != QuestionState::Open) {
        return None;
    }
    v.model.as_ref()?;
    let price =
        |m: &ModelBox| (plan_step::predict(m, lay).map(|p| p.output_tok_s), plan_step::with_tuned_moe(m, lay).map(|p| p.output_tok_s));
    let ((cur, new), raw_gain, calibrated_on) = priced(v, price);
    let gain = gain_of(cur, new).filter(|g| *g >= MIN_STEP_GAIN)?;
    Some(Step {
        title: "tune the fused-MoE kernels for this model and GPU".into(),
        source: StepSource::LogWarning,
        kind: StepKind::NeedsPerson {
            key,
            question: format!(
                "The server runs untuned default MoE kernel configs. Run the engine's fused-MoE tuning for this model on these GPUs and install the config file? Plan predicts {:.0} -> {:.0} output tok/s ({:+.0}%{}).",
                cur.unwrap_or(0.0),
                new.unwrap_or(0.0),
                (gain - 1.0) * 100.0,
                calibration_words(raw_gain, calibrated_on)
            ),
            how: "run the tuning (hours of GPU time), put the config where the engine loads it, then answer --done; --declined to skip".into(),
        },
        gain: Some(gain),
        raw_gain,
        calibrated_on,
        current_tok_s: cur,
        predicted_tok_s: new,
        basis: format!("log line: {}", f.evidence),
        evidence: vec![Evidence::Finding(f.id)],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_step::PointSummary;
    use crate::finding::Source;

    fn point(c: u32, tok: f64, running: f64, queued: f64) -> PointSummary {
        PointSummary {
            concurrency: c,
            completed: 32,
            failed: 0,
            output_tok_s: tok,
            ttft_p50_ms: 10.0,
            ttft_p99_ms: 20.0,
            tpot_p50_ms: 5.0,
            tpot_p90_ms: 6.0,
            tpot_p99_ms: 7.0,
            slos_met: None,
            server_max_running: Some(running),
            server_max_queued: Some(queued),
            server_max_kv_usage: Some(0.1),
        }
    }

    fn exp(knobs: &[(&str, &str)], points: Vec<PointSummary>) -> Experiment {
        Experiment {
            id: 1,
            key: "k".into(),
            title: "t".into(),
            knobs: knobs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            origin: "test".into(),
            state: ExpState::Done,
            failure: None,
            attempt: 1,
            env_fingerprint: Some(1),
            fingerprint: None,
            log_path: None,
            bench_path: None,
            result: Some(BenchSummary { points, knee_concurrency: None, knee_evidence: None, partial: false, error_example: None }),
            owner_pid: None,
            server_pgid: None,
            heartbeat_at: None,
            created_at: 0,
            updated_at: 0,
            slurm_job: None,
            server_port: None,
            values: KnobValues::parse(&knobs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), "a test").expect("valid knobs"),
        }
    }

    fn facts() -> BoxFacts {
        BoxFacts {
            vm: "none".into(),
            container: "lxc".into(),
            gpu_name: None,
            gpu_model: Some("rtx-pro-6000-se".into()),
            gpus: 8,
            p2p_ok: true,
            nvlink: false,
            driver_version: None,
            cuda_version: None,
            hash: "h".into(),
        }
    }

    fn model() -> ModelBox {
        ModelBox {
            model: "qwen3-30b-a3b".into(),
            quant: "bf16".into(),
            gpu: "rtx-pro-6000-se".into(),
            gpus: 8,
            link: "pcie5-p2p".into(),
            input_len: 64,
            output_len: 16,
            requests: Some(64),
            objectives: Vec::new(),
            max_concurrency: 32,
            sweep: vec![4, 16, 32],
            serving: Default::default(),
            engine_version: None,
            calibration: None,
            allreduce: None,
        }
    }

    /// The model prices a campaign with the engine release its server reported: sglang 0.4.6 ran
    /// prefill eagerly; a version string that names no release, or another engine's version,
    /// leaves the current release's defaults.
    #[test]
    fn a_reported_engine_release_brings_its_defaults_and_another_engines_version_does_not() {
        let layout = crate::plan_step::Layout { tp: 8, pp: 1, ep: 1, max_running: None, kv_cache: None, mem_fraction: None };
        let graphs = |m: ModelBox| crate::plan_step::scenario(&m, layout).expect("prices").engine.prefill_graphs;
        assert!(!graphs(model().with_engine_version("sglang", Some("0.4.6".into()))));
        assert!(graphs(model().with_engine_version("sglang", Some("0.5.12".into()))));
        assert!(graphs(model().with_engine_version("sglang", Some("servetune-sim".into()))));
        assert!(graphs(model().with_engine_version("llama.cpp", Some("0.4.6".into()))));
    }

    fn steps(goal: f64, e: &Experiment, findings: &[FindingRow]) -> Verdict {
        steps_in(&facts(), model(), Vec::new(), goal, e, findings)
    }

    fn steps_in(
        f: &BoxFacts,
        m: ModelBox,
        probe_findings: Vec<(i64, FindingId)>,
        goal: f64,
        e: &Experiment,
        findings: &[FindingRow],
    ) -> Verdict {
        let g = Goal { text: format!("output_tok_s>={goal}"), output_tok_s: goal, slos: None };
        let eng = crate::engine::find(&crate::engine::builtins(), "sim").expect("sim");
        let v = View {
            goal: &g,
            engine: &eng,
            facts: f,
            probe_findings,
            experiments: vec![e],
            findings,
            questions: &[],
            model: Some(m),
            base_knobs: e.knobs.clone(),
            base_values: e.values,
        };
        plan(&v)
    }

    /// A KVM guest without P2P whose baseline plateaued behind the running cap, with the probe's
    /// P2P finding at `severity`: the ranked steps.
    fn kvm_steps(severity: Severity) -> Vec<Step> {
        let f = BoxFacts { vm: "kvm".into(), container: "none".into(), p2p_ok: false, hash: "kvm".into(), ..facts() };
        let m = ModelBox { link: "pcie-host-staged".into(), ..model() };
        let finding = FindingRow {
            id: 3,
            source: Source::Probe,
            code: Code::Probe(FindingId::VmNoP2p),
            severity,
            title: "kvm guest without GPU peer-to-peer".into(),
            evidence: "P2P read is not OK on 28 of 28 GPU pairs".into(),
            fix: "move".into(),
            experiment: None,
        };
        let e = exp(&BASE, vec![point(4, 580.0, 4.0, 0.0), point(16, 600.0, 4.0, 12.0), point(32, 620.0, 4.0, 28.0)]);
        let Verdict::Steps(s) = steps_in(&f, m, vec![(3, FindingId::VmNoP2p)], 1e6, &e, &[finding]) else { panic!("expected steps") };
        s
    }

    #[test]
    fn a_critical_finding_about_the_box_is_asked_before_knob_tuning_with_a_larger_gain() {
        let s = kvm_steps(Severity::Critical);
        let p2p = &s[0];
        assert_eq!(p2p.source, StepSource::ProbeFinding, "{s:?}");
        assert!(matches!(&p2p.kind, StepKind::NeedsPerson { key, .. } if key == "p2p:kvm"), "{p2p:?}");
        // The rule is what puts it first: a runnable knob step (the running cap, another plan) promises more.
        let best_run = s.iter().filter(|s| matches!(s.kind, StepKind::Runnable { .. })).filter_map(|s| s.gain).fold(0.0, f64::max);
        assert!(s.iter().any(|s| s.source == StepSource::RunningCap), "{s:?}");
        assert!(best_run > p2p.gain.unwrap_or(0.0), "runnable {best_run} vs p2p {:?}", p2p.gain);
        assert!(p2p.basis.contains("asked before any knob tuning") && p2p.basis.contains("do not carry over"), "{}", p2p.basis);
    }

    #[test]
    fn without_a_critical_finding_the_box_question_ranks_by_its_gain() {
        let s = kvm_steps(Severity::Warning);
        assert!(matches!(s[0].kind, StepKind::Runnable { .. }), "{s:?}");
        let p2p = s.iter().find(|s| s.source == StepSource::ProbeFinding).expect("still proposed");
        assert!(s[0].gain > p2p.gain, "{s:?}");
        assert!(!p2p.basis.contains("before any knob tuning"), "{}", p2p.basis);
    }

    const BASE: [(&str, &str); 4] = [("tp", "8"), ("pp", "1"), ("ep", "1"), ("max_running", "4")];

    /// [`kv_full`] on a vLLM sweep on one GPU run with `knobs`, whose cache filled at concurrency
    /// 32, priced by `model` (or by none), Qwen3-30B-A3B in BF16 on 96 GB with `lens` (prompt,
    /// output) tokens.
    fn kv_full_on_one_gpu(knobs: &[(&str, &str)], lens: Option<(u32, u32)>) -> Option<Step> {
        let model = lens.map(|(input_len, output_len)| ModelBox {
            gpus: 1,
            input_len,
            output_len,
            serving: servetune_model::predict::EngineName::Vllm,
            ..model()
        });
        let f = BoxFacts { gpus: 1, ..facts() };
        let mut full = point(32, 300.0, 6.0, 26.0);
        full.server_max_kv_usage = Some(1.0);
        let g = Goal { text: "output_tok_s>=1e6".into(), output_tok_s: 1e6, slos: None };
        let eng = crate::engine::find(&crate::engine::builtins(), "vllm").expect("vllm");
        let e = exp(knobs, vec![point(4, 100.0, 4.0, 0.0), full]);
        let v = View {
            goal: &g,
            engine: &eng,
            facts: &f,
            probe_findings: Vec::new(),
            experiments: vec![&e],
            findings: &[],
            questions: &[],
            model,
            base_knobs: e.knobs.clone(),
            base_values: e.values,
        };
        kv_full(&v, &e, e.result.as_ref().expect("result"), layout(&e.values, 1))
    }

    /// A sweep whose KV cache filled gets a step that raises the memory share, priced by the model
    /// at the concurrency where it filled: Qwen3-30B-A3B in BF16 on one 96 GB GPU with 8k-token
    /// prompts and 2k-token outputs holds fewer than the 32 clients, so 4 more points of memory run
    /// more of them (a gain above the planner's least worthwhile one). Unset, the share starts from
    /// vLLM's own default (0.9), not the constant for a campaign without a model.
    #[test]
    fn a_full_kv_cache_raises_the_memory_share_with_the_models_gain() {
        for (knobs, from) in [(vec![("tp", "1")], "0.9"), (vec![("tp", "1"), ("mem_fraction", "0.85")], "0.85")] {
            let step = kv_full_on_one_gpu(&knobs, Some((8_000, 2_000))).expect("a memory step");
            assert!(step.title.contains(&format!("mem_fraction {from}")), "{}", step.title);
            assert!(step.gain.is_some_and(|g| g >= MIN_STEP_GAIN), "{step:?}");
            assert!(step.predicted_tok_s > step.current_tok_s, "{step:?}");
            assert!(step.basis.contains("KV usage reached 100% at concurrency 32"), "{}", step.basis);
        }
    }

    /// A full cache the model says more memory would not relieve (short requests: the cache holds
    /// far more than the batch, so a larger share runs no more of them) gives no memory step; with
    /// no model to price it, the measured full cache alone proposes one.
    #[test]
    fn a_full_kv_cache_gives_no_memory_step_the_model_sees_no_gain_in_but_one_without_a_model() {
        assert!(kv_full_on_one_gpu(&[("tp", "1")], Some((200, 200))).is_none());
        let unpriced = kv_full_on_one_gpu(&[("tp", "1")], None).expect("a memory step without a model");
        assert_eq!(unpriced.gain, None, "{unpriced:?}");
    }

    #[test]
    fn queued_behind_the_cap_on_a_plateau_raises_the_cap_with_the_models_gain() {
        let e = exp(&BASE, vec![point(4, 580.0, 4.0, 0.0), point(16, 600.0, 4.0, 12.0), point(32, 620.0, 4.0, 28.0)]);
        let Verdict::Steps(s) = steps(1e6, &e, &[]) else { panic!("expected steps") };
        let cap = s.iter().find(|s| s.source == StepSource::RunningCap).expect("a cap step");
        assert!(matches!(&cap.kind, StepKind::Runnable { knobs } if knobs["max_running"] == "8"), "{cap:?}");
        assert!(cap.gain.is_some_and(|g| g > MIN_STEP_GAIN), "{cap:?}");
        assert_eq!(cap.evidence, [Evidence::Experiment(1)]);
    }

    #[test]
    fn no_cap_step_while_throughput_still_grows_or_nothing_queues() {
        let growing = exp(&BASE, vec![point(4, 300.0, 4.0, 0.0), point(32, 900.0, 4.0, 28.0)]);
        let unqueued = exp(&BASE, vec![point(4, 580.0, 4.0, 0.0), point(32, 600.0, 32.0, 0.0)]);
        for e in [growing, unqueued] {
            if let Verdict::Steps(s) = steps(1e6, &e, &[]) {
                assert!(s.iter().all(|s| s.source != StepSource::RunningCap), "{s:?}");
            }
        }
    }

    #[test]
    fn default_moe_config_warning_becomes_a_question_with_the_tuned_kernel_gain() {
        let e = exp(&BASE, vec![point(4, 580.0, 4.0, 0.0)]);
        let f = FindingRow {
            id: 7,
            source: Source::Log,
            code: Code::MoeDefaultConfig,
            severity: Severity::Warning,
            title: "t".into(),
            evidence: "Using default MoE config. Performance might be sub-optimal!".into(),
            fix: "tune".into(),
            experiment: Some(1),
        };
        // Kimi-K2's INT4 experts on a B200 stream at 0.40 of peak in kernels.toml's fused-MoE
        // tables: tuned kernels (the 0.8 assumption) are predicted to gain.
        let slow = ModelBox { model: "kimi-k2".into(), gpu: "b200".into(), quant: "int4".into(), ..model() };
        let Verdict::Steps(s) = steps_in(&facts(), slow, Vec::new(), 1e6, &e, std::slice::from_ref(&f)) else { panic!("expected steps") };
        let q = s.iter().find(|s| s.source == StepSource::LogWarning).expect("a MoE step");
        assert!(matches!(&q.kind, StepKind::NeedsPerson { key, .. } if key == "moe:h"));
        assert!(q.gain.is_some_and(|g| g > 1.0) && q.evidence == [Evidence::Finding(7)], "{q:?}");
        // On the RTX PRO 6000 the tables' BF16 fused-MoE rate (0.92) is already past the tuned
        // assumption (0.8): nothing to gain, so nothing to ask.
        let Verdict::Steps(s) = steps(1e6, &e, &[f]) else { panic!("expected steps") };
        assert!(s.iter().all(|s| s.source != StepSource::LogWarning), "{s:?}");
    }

    #[test]
    fn goal_met_ends_the_campaign() {
        let e = exp(&BASE, vec![point(4, 580.0, 4.0, 0.0)]);
        assert_eq!(steps(500.0, &e, &[]), Verdict::GoalMet { experiment: 1, output_tok_s: 580.0 });
    }
}
