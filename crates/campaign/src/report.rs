//! The status report: computed once from the journal into [`Report`] (a documented `Serialize`
//! struct), then rendered by small exporters (terminal, Markdown here; HTML in [`crate::report_html`])
//! that write to `impl Write`. Every number carries the journal record it comes from.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;

use crate::campaign::{LaunchFingerprint, Snapshot};
use crate::journal::{ExpState, Journal, TaskState};
use crate::planner::{self, StepKind, Verdict};
use crate::probe_step::BoxFacts;
use crate::text::md;
use crate::Result;

/// The report's schema.
pub const SCHEMA: &str = "servetune.report/1";
/// Additions within the major version a reader of `servetune.report/1` may ignore: 1 added
/// `schema_minor` and `fabric` (measured per-pair bandwidth and latency); 2 added `track_record`,
/// `calibrations`, calibrated predictions with intervals, grouped warnings and the steps' raw gains.
pub const SCHEMA_MINOR: u32 = 2;

/// The status report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Always "servetune.report/1".
    pub schema: &'static str,
    /// [`SCHEMA_MINOR`].
    pub schema_minor: u32,
    pub goal: String,
    /// The goal's output tok/s.
    pub goal_output_tok_s: f64,
    /// The best measured result against the goal, and the headline bottleneck in one sentence.
    pub standing: Standing,
    pub model: String,
    pub engine: String,
    pub environment: BoxFacts,
    pub counts: Counts,
    pub tasks: Vec<TaskLine>,
    /// Launch commands of experiments that reached ready, copy-pasteable.
    pub launch_commands: Vec<LaunchLine>,
    /// Findings (probe, logs, analysis) with their fixes.
    pub warnings: Vec<WarningLine>,
    pub results: Vec<ResultLine>,
    /// Each done experiment's sweep, point by point, with the model's prediction beside it.
    pub curves: Vec<Curve>,
    /// The model's step-time breakdown of each done experiment at its best point.
    pub breakdown: Vec<BreakdownLine>,
    /// The GPU peer-to-peer matrix of each environment the campaign probed (oldest first), where
    /// the probe read one.
    pub p2p: Vec<P2pMatrix>,
    /// Measured GPU-to-GPU bandwidth and latency of each environment with a recorded fabric
    /// document (`campaign fabric`), oldest environment first.
    pub fabric: Vec<FabricLine>,
    pub analysis: Vec<String>,
    /// Each step the campaign acted on with a predicted gain, against the gain measured since.
    pub track_record: Vec<crate::verdict::TrackLine>,
    /// The box's calibrations: the model fitted to each measured experiment's sweep.
    pub calibrations: Vec<CalibrationLine>,
    pub next_steps: Vec<StepLine>,
    /// Why nothing is left, when that is the case.
    pub stop_reason: Option<String>,
    pub open_questions: Vec<QuestionLine>,
    pub notes: Vec<String>,
}

/// Where the campaign stands.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Standing {
    /// The best measured point (under the goal's latency objectives), if any experiment is done.
    pub best: Option<BestPoint>,
    /// One sentence: best against goal and the dominant step term with its numbers.
    pub headline: String,
}

/// The best measured point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BestPoint {
    pub experiment: i64,
    pub output_tok_s: f64,
    pub concurrency: u32,
    /// output_tok_s / the goal's output tok/s.
    pub share_of_goal: f64,
}

/// One experiment's sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Curve {
    pub experiment: i64,
    pub title: String,
    /// Where it ran, in words (e.g. "kvm guest, no P2P").
    pub environment: String,
    /// Concurrency at bench's saturation knee.
    pub knee_concurrency: Option<u32>,
    /// The experiment whose calibration the predictions use (`None`: the model's own figures).
    pub calibrated_on: Option<i64>,
    /// The measured points with their predictions.
    pub points: Vec<CurvePoint>,
}

/// One load point of a sweep (bench's numbers) and the model's prediction for it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurvePoint {
    pub concurrency: u32,
    pub output_tok_s: f64,
    pub ttft_p50_ms: f64,
    pub ttft_p99_ms: f64,
    pub tpot_p50_ms: f64,
    pub tpot_p90_ms: f64,
    pub tpot_p99_ms: f64,
    /// The prediction the campaign stood by when the point was measured: the model with the box's
    /// calibration from an earlier experiment in the same environment (see the curve's
    /// `calibrated_on`), else the model's own. The same number as the verdict finding's.
    pub predicted_output_tok_s: Option<f64>,
    /// The model's own prediction, without calibration.
    pub uncalibrated_output_tok_s: Option<f64>,
    /// The prediction's interval.
    pub predicted_low: Option<f64>,
    /// The prediction's interval.
    pub predicted_high: Option<f64>,
}

/// The model's step of one experiment at its best measured concurrency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakdownLine {
    pub experiment: i64,
    pub title: String,
    pub step: crate::plan_step::StepAt,
}

/// A GPU peer-to-peer status matrix from the probe (`nvidia-smi topo -p2p r` words: OK, NS, ...).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct P2pMatrix {
    /// The probe fingerprint it comes from.
    pub fingerprint: i64,
    /// The environment in words (e.g. "kvm guest", "lxc container").
    pub environment: String,
    /// Which capability (read, write, ...).
    pub capability: String,
    /// rows[i][j]: GPU i to GPU j.
    pub rows: Vec<Vec<String>>,
}

/// Per-pair bandwidth (GB/s) and small-message latency (us) of one environment, from the newest
/// fabric document recorded for it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FabricLine {
    /// The journal's fabric record.
    pub record: i64,
    /// The probe fingerprint of the environment it was measured in.
    pub fingerprint: i64,
    /// The environment in words (e.g. "kvm guest, no P2P").
    pub environment: String,
    /// The file it was recorded from.
    pub source: String,
    #[serde(flatten)]
    pub matrices: crate::fabric_step::PairMatrices,
}

/// Task and experiment counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Counts {
    pub done: usize,
    pub in_progress: usize,
    pub not_done: usize,
    /// Experiments by state name.
    pub experiments: BTreeMap<String, usize>,
}

/// A task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskLine {
    pub id: i64,
    pub state: TaskState,
    pub title: String,
    /// "experiment 3" or "question 1".
    pub record: String,
    /// The outcome in a few words (done, failed: kind, the answer).
    pub outcome: String,
}

/// A working launch command.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaunchLine {
    pub experiment: i64,
    pub command: String,
    pub engine_version: Option<String>,
}

/// One calibration of the box: the model fitted to an experiment's sweep (calibration, not a
/// prediction).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationLine {
    /// The experiment it was fitted to.
    pub experiment: i64,
    /// The environment it belongs to, in words.
    pub environment: String,
    /// The fabric record of that environment it was made with, if any.
    pub fabric: Option<i64>,
    /// Whether later predictions use it (`crate::verdict::usable`: it fits its own sweep within the
    /// model's held-out error).
    pub used: bool,
    /// The fitted factors.
    #[serde(flatten)]
    pub factors: crate::plan_step::Calibration,
}

impl CalibrationLine {
    /// Whether it is used, in words.
    pub fn used_words(&self) -> &'static str {
        if self.used {
            "yes"
        } else {
            "no: fits its own sweep worse than the model's held-out error"
        }
    }
}

/// A warning or finding; one line for a finding that repeats across experiments.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WarningLine {
    /// The first journal finding of the group.
    pub finding: i64,
    /// Every journal finding the line stands for.
    pub findings: Vec<i64>,
    /// The experiments it was found in (empty for the box's own findings).
    pub experiments: Vec<i64>,
    pub severity: String,
    pub title: String,
    pub evidence: String,
    pub fix: String,
}

/// One experiment's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResultLine {
    pub experiment: i64,
    pub title: String,
    pub state: ExpState,
    pub best_output_tok_s: Option<f64>,
    pub at_concurrency: Option<u32>,
    pub tpot_p90_ms: Option<f64>,
    pub knee_concurrency: Option<u32>,
    pub failure: Option<String>,
    pub bench_json: Option<String>,
}

/// A ranked next step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepLine {
    pub rank: usize,
    pub title: String,
    pub needs_person: bool,
    /// The predicted gain the step is ranked by (calibrated when the box has a calibration).
    pub gain: Option<f64>,
    /// The model's own gain, without calibration.
    pub raw_gain: Option<f64>,
    /// The experiment the calibration came from.
    pub calibrated_on: Option<i64>,
    /// The gain's interval, from the track record so far.
    pub interval: Option<crate::verdict::Interval>,
    pub basis: String,
    pub evidence: Vec<String>,
}

/// An open question.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuestionLine {
    pub id: i64,
    pub text: String,
    pub how: String,
}

/// Computes the report from the journal.
pub fn build(j: &Journal) -> Result<Report> {
    let c = j.campaign()?;
    let snap = Snapshot::read(j)?;
    let tasks_rows = j.tasks()?;
    let exps = &snap.experiments;
    let mut experiments: BTreeMap<String, usize> = BTreeMap::new();
    for e in exps {
        *experiments.entry(e.state.as_str().to_string()).or_default() += 1;
    }
    let count = |s: TaskState| tasks_rows.iter().filter(|t| t.state == s).count();
    let counts = Counts {
        done: count(TaskState::Done),
        in_progress: count(TaskState::InProgress),
        not_done: count(TaskState::NotDone),
        experiments,
    };
    let tasks = task_lines(&tasks_rows, &snap);
    let launch_commands = launch_lines(j, exps);
    let warnings = warning_lines(&snap.findings);
    let results = exps.iter().map(result_line).collect();
    let track_record = crate::verdict::track_record(j)?;
    let (next_steps, stop_reason) = next_lines(&track_record, &snap)?;
    let (curves, breakdown) = curves(j, &snap)?;
    let standing = standing(&snap, &breakdown);
    let analysis = analysis(&snap).into_iter().chain(plateau_lines(&snap, &breakdown)).collect();
    Ok(Report {
        schema: SCHEMA,
        schema_minor: SCHEMA_MINOR,
        goal: c.goal,
        goal_output_tok_s: snap.settings.goal.output_tok_s,
        standing,
        model: c.model,
        engine: c.engine,
        environment: snap.env.facts.clone(),
        counts,
        tasks,
        launch_commands,
        warnings,
        results,
        curves,
        breakdown,
        p2p: p2p_matrices(j)?,
        fabric: fabric_lines(j)?,
        analysis,
        track_record,
        calibrations: calibration_lines(j)?,
        next_steps,
        stop_reason,
        open_questions: snap
            .questions
            .iter()
            .filter(|q| q.state == crate::journal::QuestionState::Open)
            .map(|q| QuestionLine { id: q.id, text: q.text.clone(), how: q.how.clone() })
            .collect(),
        notes: j.notes()?.into_iter().map(|n| n.text).collect(),
    })
}

/// The facts of the environment an experiment ran in (its own probe fingerprint).
fn experiment_facts(j: &Journal, snap: &Snapshot, e: &crate::journal::Experiment) -> BoxFacts {
    e.env_fingerprint
        .filter(|id| *id != snap.env_id)
        .and_then(|id| j.fingerprint(id).ok().flatten())
        .and_then(|f| serde_json::from_value::<crate::campaign::EnvBody>(f.body).ok())
        .map_or_else(|| snap.env.facts.clone(), |b| b.facts)
}

fn curves(j: &Journal, snap: &Snapshot) -> Result<(Vec<Curve>, Vec<BreakdownLine>)> {
    let mut curves = Vec::new();
    let mut breakdown = Vec::new();
    let records = crate::verdict::point_records(j)?;
    for e in snap.experiments.iter().filter(|e| e.state == ExpState::Done) {
        let Some(r) = &e.result else { continue };
        let facts = experiment_facts(j, snap, e);
        let mb = crate::campaign::model_box(&snap.settings, &facts);
        // The predictions stored when the experiment was measured; a journal older than schema
        // 1.3 has none, and gets the model's own figure through the same path.
        let stored = records.iter().rfind(|x| x.experiment == e.id).cloned();
        let rec = stored.or_else(|| {
            let m = mb.as_ref()?;
            let layout = crate::verdict::measured_layout(&e.knobs, m.gpus, Some(r));
            let points = r
                .points
                .iter()
                .map(|p| crate::verdict::PointPrediction {
                    concurrency: p.concurrency,
                    raw: crate::plan_step::predict_at(m, layout, p.concurrency),
                    calibrated: None,
                })
                .collect();
            let (width, width_basis) = crate::verdict::width(&[]);
            Some(crate::verdict::PointsRecord { experiment: e.id, layout, calibration: None, points, width, width_basis })
        });
        let points = r
            .points
            .iter()
            .filter(|p| p.completed > 0)
            .map(|p| {
                let pred = rec.as_ref().and_then(|x| x.at(p.concurrency)).copied();
                let shown = pred.and_then(|x| x.shown());
                CurvePoint {
                    concurrency: p.concurrency,
                    output_tok_s: p.output_tok_s,
                    ttft_p50_ms: p.ttft_p50_ms,
                    ttft_p99_ms: p.ttft_p99_ms,
                    tpot_p50_ms: p.tpot_p50_ms,
                    tpot_p90_ms: p.tpot_p90_ms,
                    tpot_p99_ms: p.tpot_p99_ms,
                    predicted_output_tok_s: shown,
                    uncalibrated_output_tok_s: pred.and_then(|x| x.raw),
                    predicted_low: shown.zip(rec.as_ref()).map(|(v, x)| v / (1.0 + x.width)),
                    predicted_high: shown.zip(rec.as_ref()).map(|(v, x)| v * (1.0 + x.width)),
                }
            })
            .collect();
        curves.push(Curve {
            experiment: e.id,
            title: e.title.clone(),
            environment: environment_words(&facts),
            knee_concurrency: r.knee_concurrency,
            calibrated_on: rec.as_ref().and_then(|x| x.calibration).map(|c| c.experiment),
            points,
        });
        let best = result_line(e).at_concurrency;
        let m = mb.as_ref().zip(rec.as_ref()).map(|(m, x)| (m.calibrated(x.calibration), x.layout));
        if let Some(step) = m.zip(best).and_then(|((m, l), c)| crate::plan_step::step_at(&m, l, c)) {
            breakdown.push(BreakdownLine { experiment: e.id, title: e.title.clone(), step });
        }
    }
    Ok((curves, breakdown))
}

fn standing(snap: &Snapshot, breakdown: &[BreakdownLine]) -> Standing {
    let goal = snap.settings.goal.output_tok_s;
    let best = snap
        .experiments
        .iter()
        .filter(|e| e.state == ExpState::Done)
        .map(result_line)
        .filter_map(|r| Some((r.experiment, r.best_output_tok_s?, r.at_concurrency?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(experiment, output_tok_s, concurrency)| BestPoint {
            experiment,
            output_tok_s,
            concurrency,
            share_of_goal: if goal > 0.0 { output_tok_s / goal } else { 0.0 },
        });
    let headline = match &best {
        None => format!("No experiment has finished yet; the goal is {}.", snap.settings.goal.text),
        Some(b) => {
            let why = breakdown
                .iter()
                .find(|x| x.experiment == b.experiment)
                .map_or(" The model cannot price this deployment, so no bottleneck is named.".to_string(), |x| {
                    format!(" The model's bottleneck there: {}.", x.step.bottleneck)
                });
            format!(
                "Best measured: {:.0} output tok/s at concurrency {} (experiment {}), {:.0}% of the goal ({}).{why}",
                b.output_tok_s,
                b.concurrency,
                b.experiment,
                b.share_of_goal * 100.0,
                snap.settings.goal.text
            )
        }
    };
    Standing { best, headline }
}

/// The environment in words, from the probe's facts.
fn environment_words(f: &BoxFacts) -> String {
    let place = match (f.vm.as_str(), f.container.as_str()) {
        ("none", "none") => "bare metal".to_string(),
        (vm, "none") => format!("{vm} guest"),
        (_, c) => format!("{c} container"),
    };
    format!("{place}, {}", if f.p2p_ok { "P2P" } else { "no P2P" })
}

fn p2p_matrices(j: &Journal) -> Result<Vec<P2pMatrix>> {
    let probes: Vec<_> = j.fingerprints()?.into_iter().filter(|f| f.kind == "probe").collect();
    let mut out: Vec<(String, P2pMatrix)> = Vec::new();
    for f in probes {
        let Ok(body) = serde_json::from_value::<crate::campaign::EnvBody>(f.body) else { continue };
        let Some(p2p) = body.report.get("p2p").and_then(|v| v.as_object()) else { continue };
        let Some((capability, m)) = p2p.get_key_value("read").or_else(|| p2p.iter().next()) else { continue };
        let Ok(rows) = serde_json::from_value::<Vec<Vec<String>>>(m.clone()) else { continue };
        if rows.is_empty() {
            continue;
        }
        // One matrix per environment: a re-probe of the same box replaces the earlier one.
        out.retain(|(hash, _)| *hash != f.hash);
        let m = P2pMatrix { fingerprint: f.id, environment: environment_words(&body.facts), capability: capability.clone(), rows };
        out.push((f.hash, m));
    }
    Ok(out.into_iter().map(|(_, m)| m).collect())
}

fn fabric_lines(j: &Journal) -> Result<Vec<FabricLine>> {
    let mut out: Vec<(String, FabricLine)> = Vec::new();
    for f in j.fabrics()? {
        let env = j.fingerprint(f.env_fingerprint)?.and_then(|fp| {
            let hash = fp.hash.clone();
            serde_json::from_value::<crate::campaign::EnvBody>(fp.body).ok().map(|b| (hash, environment_words(&b.facts)))
        });
        let (hash, environment) = env.unwrap_or_else(|| (format!("fingerprint {}", f.env_fingerprint), "unknown environment".into()));
        let matrices = crate::fabric_step::matrices_of(&f.body, f.id)?;
        // One per environment: a newer document of the same box replaces the earlier one.
        out.retain(|(h, _)| *h != hash);
        out.push((hash, FabricLine { record: f.id, fingerprint: f.env_fingerprint, environment, source: f.source, matrices }));
    }
    Ok(out.into_iter().map(|(_, l)| l).collect())
}

fn task_lines(tasks_rows: &[crate::journal::TaskRow], snap: &Snapshot) -> Vec<TaskLine> {
    let exps = &snap.experiments;
    tasks_rows
        .iter()
        .map(|t| {
            let (record, outcome) = match (t.experiment, t.question) {
                (Some(id), _) => (
                    format!("experiment {id}"),
                    exps.iter().find(|e| e.id == id).map_or(String::new(), |e| match &e.failure {
                        Some(f) if e.state == ExpState::Failed => format!("failed: {}", f.kind.name()),
                        _ => e.state.as_str().to_string(),
                    }),
                ),
                (None, Some(q)) => (
                    format!("question {q}"),
                    snap.questions
                        .iter()
                        .find(|x| x.id == q)
                        .map_or(String::new(), |x| x.answer.clone().unwrap_or_else(|| x.state.as_str().to_string())),
                ),
                _ => (String::new(), String::new()),
            };
            TaskLine { id: t.id, state: t.state, title: t.title.clone(), record, outcome }
        })
        .collect()
}

fn launch_lines(j: &Journal, exps: &[crate::journal::Experiment]) -> Vec<LaunchLine> {
    exps.iter()
        .filter(|e| matches!(e.state, ExpState::Done | ExpState::Ready | ExpState::Benchmarking))
        .filter_map(|e| {
            let fp = j.fingerprint(e.fingerprint?).ok()??;
            let lf: LaunchFingerprint = serde_json::from_value(fp.body).ok()?;
            Some(LaunchLine { experiment: e.id, command: shell_line(&lf), engine_version: lf.engine_version })
        })
        .collect()
}

/// Findings as report lines: the box's and the analysis' one by one, and a finding that repeats
/// across experiments (the same code, title and fix, such as a log warning every launch prints)
/// once, listing its experiments.
fn warning_lines(findings: &[crate::journal::FindingRow]) -> Vec<WarningLine> {
    let mut out: Vec<WarningLine> = Vec::new();
    for f in findings.iter().filter(|f| f.severity != "info" || f.source == "analysis") {
        let repeats = f.source != "analysis";
        if let Some(w) = out.iter_mut().find(|w| repeats && w.severity == f.severity && w.title == f.title && w.fix == f.fix) {
            w.findings.push(f.id);
            w.experiments.extend(f.experiment);
            continue;
        }
        out.push(WarningLine {
            finding: f.id,
            findings: vec![f.id],
            experiments: f.experiment.into_iter().collect(),
            severity: f.severity.clone(),
            title: f.title.clone(),
            evidence: f.evidence.clone(),
            fix: f.fix.clone(),
        });
    }
    out
}

fn calibration_lines(j: &Journal) -> Result<Vec<CalibrationLine>> {
    let probes = j.fingerprints()?;
    Ok(crate::verdict::calibrations(j)?
        .into_iter()
        .map(|(c, hash, fabric)| {
            let environment = probes
                .iter()
                .filter(|f| f.kind == "probe" && f.hash == hash)
                .find_map(|f| serde_json::from_value::<crate::campaign::EnvBody>(f.body.clone()).ok())
                .map_or_else(|| format!("environment {hash}"), |b| environment_words(&b.facts));
            CalibrationLine { experiment: c.experiment, environment, fabric, used: crate::verdict::usable(&c), factors: c }
        })
        .collect())
}

/// A planner step as the report shows it: its gain with what it rests on and its interval from
/// the campaign's `track` record.
pub fn step_line(track: &[crate::verdict::TrackLine], rank: usize, s: &planner::Step) -> StepLine {
    StepLine {
        rank,
        title: s.title.clone(),
        needs_person: matches!(s.kind, StepKind::NeedsPerson { .. }),
        gain: s.gain,
        raw_gain: s.raw_gain,
        calibrated_on: s.calibrated_on,
        interval: s.gain.map(|g| crate::verdict::gain_interval_of(track, g, s.calibrated_on.is_some())),
        basis: s.basis.clone(),
        evidence: s.evidence.clone(),
    }
}

fn next_lines(track: &[crate::verdict::TrackLine], snap: &Snapshot) -> Result<(Vec<StepLine>, Option<String>)> {
    Ok(match planner::plan(&snap.view()?) {
        Verdict::Steps(steps) => (steps.iter().enumerate().map(|(i, s)| step_line(track, i + 1, s)).collect(), None),
        Verdict::GoalMet { experiment, output_tok_s } => {
            (Vec::new(), Some(format!("goal met: experiment {experiment} reached {output_tok_s:.1} output tok/s")))
        }
        Verdict::NothingLeft { reason } => (Vec::new(), Some(reason)),
    })
}

fn result_line(e: &crate::journal::Experiment) -> ResultLine {
    let best = e
        .result
        .as_ref()
        .and_then(|r| r.points.iter().filter(|p| p.slos_met != Some(false)).max_by(|a, b| a.output_tok_s.total_cmp(&b.output_tok_s)));
    ResultLine {
        experiment: e.id,
        title: e.title.clone(),
        state: e.state,
        best_output_tok_s: best.map(|p| p.output_tok_s),
        at_concurrency: best.map(|p| p.concurrency),
        tpot_p90_ms: best.map(|p| p.tpot_p90_ms),
        knee_concurrency: e.result.as_ref().and_then(|r| r.knee_concurrency),
        failure: e.failure.as_ref().map(|f| format!("{}: {}", f.kind.name(), f.summary)),
        bench_json: e.bench_path.clone().filter(|_| e.state == ExpState::Done),
    }
}

fn analysis(snap: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    let f = &snap.env.facts;
    out.push(format!(
        "environment: {} GPU(s) {}, virtualization {}/{}, GPU peer-to-peer {}",
        f.gpus,
        f.gpu_name.as_deref().unwrap_or("unknown"),
        f.vm,
        f.container,
        if f.p2p_ok { "available" } else { "not available" }
    ));
    let done: Vec<_> = snap.experiments.iter().filter(|e| e.state == ExpState::Done).collect();
    if let Some(best) =
        done.iter().filter_map(|e| e.result.as_ref().map(|r| (e, r.best_output_tok_s(true)))).max_by(|a, b| a.1.total_cmp(&b.1))
    {
        out.push(format!(
            "best so far: experiment {} at {:.1} output tok/s, {:.0}% of the goal ({})",
            best.0.id,
            best.1,
            best.1 / snap.settings.goal.output_tok_s * 100.0,
            snap.settings.goal.text
        ));
    }
    for g in snap.findings.iter().filter(|x| x.code == "plan_gap") {
        out.push(format!("{}: {}", g.title, g.evidence));
    }
    out
}

/// The plateau of each done experiment, explained: the running cap from the server's metrics, then
/// the model's step (expert reads at the MoE kernels' efficiency, the TP all-reduce share).
fn plateau_lines(snap: &Snapshot, breakdown: &[BreakdownLine]) -> Vec<String> {
    let mut out = Vec::new();
    for e in snap.experiments.iter().filter(|e| e.state == ExpState::Done) {
        let Some(r) = &e.result else { continue };
        let (Some(knee), Some(last)) = (r.knee_concurrency, r.points.last()) else { continue };
        let at_knee = r.points.iter().find(|p| p.concurrency == knee).map_or(0.0, |p| p.output_tok_s);
        let mut line = format!(
            "experiment {}: throughput plateaus at {:.0} output tok/s from concurrency {knee} ({:.0} at concurrency {})",
            e.id, at_knee, last.output_tok_s, last.concurrency
        );
        if let (Some(run), Some(q)) = (last.server_max_running, last.server_max_queued) {
            if q > 0.0 {
                line += &format!(
                    "; at concurrency {} at most {run:.0} requests ran and {q:.0} queued: the running-request cap holds it",
                    last.concurrency
                );
            }
        }
        if let Some(b) = breakdown.iter().find(|b| b.experiment == e.id) {
            let s = &b.step;
            let pct = |v: f64| if s.total_ms > 0.0 { v / s.total_ms * 100.0 } else { 0.0 };
            line += &format!(
                "; the model's {:.1} ms step at concurrency {}: weight reads {:.1} ms ({:.0}%){}, TP{} all-reduce {:.1} ms ({:.0}%), prefill {:.1} ms, overhead {:.1} ms",
                s.total_ms,
                s.concurrency,
                s.weights_ms,
                pct(s.weights_ms),
                s.moe_efficiency.map_or(String::new(), |m| format!(" with MoE kernels at {:.0}% of memory bandwidth", m * 100.0)),
                s.tp,
                s.communication_ms,
                pct(s.communication_ms),
                s.prefill_ms,
                s.overhead_ms
            );
        }
        out.push(line);
    }
    out
}

/// A POSIX-shell-quoted command line with its environment in front.
pub fn shell_line(f: &LaunchFingerprint) -> String {
    let q = crate::text::shell_quote;
    let env = f.env.iter().map(|(k, v)| format!("{k}={}", q(v)));
    env.chain(f.argv.iter().map(|a| q(a))).collect::<Vec<_>>().join(" ")
}

pub(crate) fn gain_words(g: Option<f64>) -> String {
    g.map_or("gain unknown".into(), |g| format!("{:+.0}%", (g - 1.0) * 100.0))
}

/// A next step's gain in words: the figure it is ranked by, what it rests on (calibrated on which
/// experiment, with the model's own figure beside it) and its interval.
pub fn step_gain_words(s: &StepLine) -> String {
    let Some(g) = s.gain else { return gain_words(None) };
    let mut w = gain_words(Some(g));
    if let Some(e) = s.calibrated_on {
        w += &format!(" calibrated on experiment {e}; uncalibrated {}", gain_words(s.raw_gain));
    } else {
        w += " uncalibrated";
    }
    if let Some(i) = &s.interval {
        w += &format!("; interval {}..{}", gain_words(Some(i.low)), gain_words(Some(i.high)));
    }
    w
}

/// The journal records a warning line stands for: its findings and experiments.
pub fn finding_records(f: &WarningLine) -> String {
    let ids: Vec<String> = f.findings.iter().map(|i| i.to_string()).collect();
    let mut s = format!("finding{} {}", if ids.len() > 1 { "s" } else { "" }, ids.join(", "));
    if !f.experiments.is_empty() {
        let e: Vec<String> = f.experiments.iter().map(|i| i.to_string()).collect();
        s += &format!("; experiment{} {}", if e.len() > 1 { "s" } else { "" }, e.join(", "));
    }
    s
}

/// The journal records a track-record line rests on.
pub fn track_records(t: &crate::verdict::TrackLine) -> String {
    let mut s = format!("prediction {}, against experiment {}", t.record, t.reference);
    if let Some(q) = t.question {
        s += &format!(", question {q}");
    }
    if let Some(e) = t.experiment {
        s += &format!(", measured by experiment {e}");
    }
    s
}

/// A track-record line in words (terminal, Markdown and the demo).
pub fn track_words(t: &crate::verdict::TrackLine) -> String {
    let cal = t
        .predicted_calibrated
        .map_or(String::new(), |c| format!(", calibrated {} (on experiment {})", gain_words(Some(c)), t.calibrated_on.unwrap_or(0)));
    let iv = t.interval.as_ref().map_or(String::new(), |i| format!(", interval {}..{}", gain_words(Some(i.low)), gain_words(Some(i.high))));
    let m = match (t.measured, t.inside) {
        (Some(m), Some(true)) => format!("measured {} (inside)", gain_words(Some(m))),
        (Some(m), Some(false)) => format!("measured {} (OUTSIDE the interval)", gain_words(Some(m))),
        (Some(m), None) => format!("measured {}", gain_words(Some(m))),
        (None, _) => "not measured yet".into(),
    };
    format!("{}: predicted {} by the model alone{cal}{iv}; {m} [{}]", t.step, gain_words(t.predicted_raw), track_records(t))
}

/// The terminal status: counts, then tasks grouped done / in progress / not done.
pub fn write_terminal(r: &Report, mut out: impl Write) -> io::Result<()> {
    // Rendered whole, then sent with outside text's control characters escaped (`text::term`).
    let mut w: Vec<u8> = Vec::new();
    write_terminal_raw(r, &mut w)?;
    out.write_all(crate::text::term(&String::from_utf8_lossy(&w)).as_bytes())
}

fn write_terminal_raw(r: &Report, w: &mut Vec<u8>) -> io::Result<()> {
    writeln!(w, "campaign: {} on {} (engine {})", r.goal, r.model, r.engine)?;
    writeln!(w, "{}", r.standing.headline)?;
    writeln!(w, "tasks: {} done, {} in progress, {} not done", r.counts.done, r.counts.in_progress, r.counts.not_done)?;
    for (state, head) in [(TaskState::Done, "Done"), (TaskState::InProgress, "In progress"), (TaskState::NotDone, "Not done")] {
        writeln!(w, "\n{head}:")?;
        let lines: Vec<&TaskLine> = r.tasks.iter().filter(|t| t.state == state).collect();
        if lines.is_empty() {
            writeln!(w, "  (none)")?;
        }
        for t in lines {
            writeln!(w, "  [{}] {} -> {}", t.record, t.title, t.outcome)?;
        }
    }
    if !r.next_steps.is_empty() {
        writeln!(w, "\nNext steps:")?;
        for s in &r.next_steps {
            writeln!(w, "  {}. {}{} ({})", s.rank, if s.needs_person { "[needs a person] " } else { "" }, s.title, step_gain_words(s))?;
        }
    }
    if !r.track_record.is_empty() {
        writeln!(w, "\nTrack record (predicted against measured gain):")?;
        for t in &r.track_record {
            writeln!(w, "  {}", track_words(t))?;
        }
    }
    if let Some(s) = &r.stop_reason {
        writeln!(w, "\nNothing left: {s}")?;
    }
    Ok(())
}

/// The Markdown sweep tables: every measured point beside the model's prediction, and the model's
/// step by term at each experiment's best point.
fn write_markdown_sweeps(r: &Report, w: &mut impl Write) -> io::Result<()> {
    if r.curves.is_empty() {
        return Ok(());
    }
    writeln!(w, "\n### Sweeps (bench, with `servetune plan`'s prediction)\n")?;
    writeln!(w, "| experiment | concurrency | output tok/s | predicted tok/s | model alone tok/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p90 ms | TPOT p99 ms |")?;
    writeln!(w, "|---|---|---|---|---|---|---|---|---|---|")?;
    for c in &r.curves {
        for p in &c.points {
            let knee = if c.knee_concurrency == Some(p.concurrency) { " (knee)" } else { "" };
            writeln!(
                w,
                "| {} | {}{knee} | {:.1} | {} | {} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} |",
                c.experiment,
                p.concurrency,
                p.output_tok_s,
                p.predicted_output_tok_s.map_or("-".into(), |v| match c.calibrated_on {
                    Some(e) => format!("{v:.1} (calibrated on experiment {e})"),
                    None => format!("{v:.1}"),
                }),
                p.uncalibrated_output_tok_s.map_or("-".into(), |v| format!("{v:.1}")),
                p.ttft_p50_ms,
                p.ttft_p99_ms,
                p.tpot_p50_ms,
                p.tpot_p90_ms,
                p.tpot_p99_ms
            )?;
        }
    }
    if !r.breakdown.is_empty() {
        writeln!(w, "\n### Step time by term (the model, ms)\n")?;
        writeln!(w, "| experiment | concurrency | weights | KV | compute | communication | overhead | prefill | step | bottleneck |")?;
        writeln!(w, "|---|---|---|---|---|---|---|---|---|---|")?;
        for b in &r.breakdown {
            let s = &b.step;
            writeln!(
                w,
                "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
                b.experiment,
                s.concurrency,
                s.weights_ms,
                s.kv_ms,
                s.compute_ms,
                s.communication_ms,
                s.overhead_ms,
                s.prefill_ms,
                s.total_ms,
                md(&s.bottleneck)
            )?;
        }
    }
    Ok(())
}

/// A measured value as the report prints it: 3 significant digits or more.
pub(crate) fn measured_words(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The Markdown tables of each environment's measured bandwidth and latency.
fn write_markdown_fabric(r: &Report, w: &mut impl Write) -> io::Result<()> {
    for f in &r.fabric {
        let m = &f.matrices;
        writeln!(w, "\n### GPU-to-GPU bandwidth and latency: {} (fabric record {})\n", md(&f.environment), f.record)?;
        writeln!(
            w,
            "Measured by `servetune fabric p2p` ({} backend), recorded from {}{}.",
            md(&m.backend),
            md(&f.source),
            m.link.as_ref().map_or(String::new(), |l| format!("; the link `servetune plan --fabric` takes: {l}"))
        )?;
        for x in [&m.bandwidth, &m.latency] {
            writeln!(w, "\n{} ({}), row: from GPU, column: to GPU\n", x.title, x.unit)?;
            let head: Vec<String> = m.gpus.iter().map(|g| format!("GPU{g}")).collect();
            writeln!(w, "| from \\ to | {} |\n|---|{}", head.join(" | "), "---|".repeat(head.len()))?;
            for (g, row) in m.gpus.iter().zip(&x.values) {
                let cells: Vec<String> = row.iter().map(|v| v.map_or("-".into(), measured_words)).collect();
                writeln!(w, "| GPU{g} | {} |", cells.join(" | "))?;
            }
        }
    }
    Ok(())
}

/// The Markdown report.
pub fn write_markdown(r: &Report, mut w: impl Write) -> io::Result<()> {
    writeln!(w, "# Campaign status: {}\n", md(&r.goal))?;
    writeln!(
        w,
        "Model {}, engine {}. Tasks: **{} done, {} in progress, {} not done**.\n",
        md(&r.model),
        md(&r.engine),
        r.counts.done,
        r.counts.in_progress,
        r.counts.not_done
    )?;
    writeln!(w, "{}\n", md(&r.standing.headline))?;
    for (state, head) in [(TaskState::Done, "Done"), (TaskState::InProgress, "In progress"), (TaskState::NotDone, "Not done")] {
        writeln!(w, "## {head}\n")?;
        let lines: Vec<&TaskLine> = r.tasks.iter().filter(|t| t.state == state).collect();
        if lines.is_empty() {
            writeln!(w, "- (none)")?;
        }
        for t in lines {
            writeln!(w, "- {} ({}): {}", md(&t.title), md(&t.record), md(&t.outcome))?;
        }
        writeln!(w)?;
    }
    writeln!(w, "## Working launch commands\n")?;
    for l in &r.launch_commands {
        writeln!(
            w,
            "Experiment {} (engine version {}):\n\n{fence}sh\n{}\n{fence}\n",
            l.experiment,
            md(l.engine_version.as_deref().unwrap_or("unknown")),
            crate::text::term(&l.command),
            fence = crate::text::fence(&l.command)
        )?;
    }
    writeln!(w, "## Warnings and findings\n")?;
    for f in &r.warnings {
        writeln!(w, "- **{}** ({}, {}): {}. Fix: {}", md(&f.title), md(&f.severity), finding_records(f), md(&f.evidence), md(&f.fix))?;
    }
    writeln!(w, "\n## Results\n\n| experiment | configuration | state | best output tok/s | at concurrency | TPOT p90 ms | knee | failure |\n|---|---|---|---|---|---|---|---|")?;
    let num = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.1}"));
    for x in &r.results {
        writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            x.experiment,
            md(&x.title),
            x.state.as_str(),
            num(x.best_output_tok_s),
            x.at_concurrency.map_or("-".into(), |c| c.to_string()),
            num(x.tpot_p90_ms),
            x.knee_concurrency.map_or("-".into(), |c| c.to_string()),
            md(x.failure.as_deref().unwrap_or("-"))
        )?;
    }
    write_markdown_sweeps(r, &mut w)?;
    write_markdown_fabric(r, &mut w)?;
    writeln!(w, "\n## Analysis\n")?;
    for a in &r.analysis {
        writeln!(w, "- {}", md(a))?;
    }
    writeln!(w, "\n## Track record\n")?;
    if r.track_record.is_empty() {
        writeln!(w, "- (no step with a predicted gain taken yet)")?;
    }
    for t in &r.track_record {
        writeln!(w, "- {}", md(&track_words(t)))?;
    }
    if !r.calibrations.is_empty() {
        writeln!(w, "\n### Calibrations (the model fitted to each measured sweep)\n")?;
        writeln!(w, "| fitted to | environment | memory scale | overhead ms/step | communication scale | rms log error | points | used |\n|---|---|---|---|---|---|---|---|")?;
        for c in &r.calibrations {
            let f = &c.factors;
            writeln!(
                w,
                "| experiment {} | {} | {:.2} | {:.1} | {:.2} | {:.3} | {} | {} |",
                c.experiment,
                md(&c.environment),
                f.memory_efficiency_scale,
                f.step_overhead_ms,
                f.comm_scale,
                f.rms_log_error,
                f.points,
                c.used_words()
            )?;
        }
    }
    writeln!(w, "\n## Next steps\n")?;
    for s in &r.next_steps {
        writeln!(
            w,
            "{}. {}{} ({}): {} [evidence: {}]",
            s.rank,
            if s.needs_person { "(needs a person) " } else { "" },
            md(&s.title),
            md(&step_gain_words(s)),
            md(&s.basis),
            md(&s.evidence.join(", "))
        )?;
    }
    if let Some(s) = &r.stop_reason {
        writeln!(w, "Nothing left: {}", md(s))?;
    }
    if !r.open_questions.is_empty() {
        writeln!(w, "\n## Open questions\n")?;
        for q in &r.open_questions {
            writeln!(w, "- Q{}: {} ({})", q.id, md(&q.text), md(&q.how))?;
        }
    }
    Ok(())
}
