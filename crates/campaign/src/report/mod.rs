//! The status report: computed once from the journal into [`Report`] (a documented `Serialize`
//! struct), then rendered by small exporters (terminal, Markdown here; HTML in [`crate::report_html`])
//! that write to `impl Write`. Every number carries the journal record it comes from.
//!
//! This module holds the report's types (the `servetune.report/1` document); [`build()`] computes
//! one from the journal and the `text` module renders it as terminal text and Markdown.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;

use crate::campaign::{LaunchFingerprint, Snapshot};
use crate::finding::{Code, Severity, Source};
use crate::journal::{ExpState, Journal, TaskState};
use crate::planner::{self, StepKind, Verdict};
use crate::probe_step::BoxFacts;
use crate::text::md;
use crate::Result;

mod build;
mod text;
pub use build::*;
pub use text::*;

/// The report's schema.
pub const SCHEMA: &str = "servetune.report/1";
/// Additions within the major version a reader of `servetune.report/1` may ignore: 1 added
/// `schema_minor` and `fabric` (measured per-pair bandwidth and latency); 2 added `track_record`,
/// `calibrations`, calibrated predictions with intervals, grouped warnings and the steps' raw gains;
/// 3: a calibration fitted on one point holds `step_scale` in place of the three terms, and
/// `allreduce` (a recorded `fabric allreduce` document per environment) was added; 4: each
/// calibration says what it was fitted against (`fitted_to`), and every prediction is what the
/// campaign's sweep would measure (its run in virtual time, not the steady state).
pub const SCHEMA_MINOR: u32 = 4;

/// The status report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Always "servetune.report/1".
    pub schema: &'static str,
    /// [`SCHEMA_MINOR`].
    pub schema_minor: u32,
    /// The goal as given, e.g. `output_tok_s>=1000 at tpot:p90<50ms`.
    pub goal: String,
    /// The goal's output tok/s.
    pub goal_output_tok_s: f64,
    /// The best measured result against the goal, and the headline bottleneck in one sentence.
    pub standing: Standing,
    /// The model the campaign serves, as given to init (a path or a name; secrets in a URL are sealed).
    pub model: String,
    /// The engine template's name (sglang, vllm, llama-server, llama-cpp-python, sim, or the user's own).
    pub engine: String,
    /// The current environment's facts, from its newest probe.
    pub environment: BoxFacts,
    /// How many tasks are done, in progress and not done, and experiments by state.
    pub counts: Counts,
    /// The status report's tasks (one per experiment and per question), oldest first.
    pub tasks: Vec<TaskLine>,
    /// Launch commands of experiments that reached ready, copy-pasteable.
    pub launch_commands: Vec<LaunchLine>,
    /// Findings (probe, logs, analysis) with their fixes.
    pub warnings: Vec<WarningLine>,
    /// Every experiment with its state and best measured point.
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
    /// Minor 3: the measured NCCL all-reduce of each environment with a recorded `fabric
    /// allreduce` document, the newest per environment, oldest environment first; it prices the
    /// NCCL all-reduces of the predictions made there.
    pub allreduce: Vec<AllReduceLine>,
    /// What the measurements say, in sentences, each naming its journal records.
    pub analysis: Vec<String>,
    /// Each step the campaign acted on with a predicted gain, against the gain measured since.
    pub track_record: Vec<crate::verdict::TrackLine>,
    /// The box's calibrations: the model fitted to each measured experiment's sweep.
    pub calibrations: Vec<CalibrationLine>,
    /// The planner's ranked next steps; empty when nothing is left (see stop_reason).
    pub next_steps: Vec<StepLine>,
    /// Why nothing is left, when that is the case.
    pub stop_reason: Option<String>,
    /// Questions waiting for a person's answer.
    pub open_questions: Vec<QuestionLine>,
    /// Notes recorded in the journal, oldest first.
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
    /// The journal experiment that measured it.
    pub experiment: i64,
    /// Its output throughput, output tokens per second.
    pub output_tok_s: f64,
    /// The concurrency it was measured at.
    pub concurrency: u32,
    /// output_tok_s / the goal's output tok/s.
    pub share_of_goal: f64,
}

/// One experiment's sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Curve {
    /// The journal experiment.
    pub experiment: i64,
    /// The experiment's configuration, in words.
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

/// One load point of a sweep: the point as the journal keeps it (bench's numbers) and the model's
/// prediction for it. Serialized flat, as the schema's `point`: the measured figures it names
/// (concurrency, output tok/s, TTFT and TPOT percentiles), then the prediction.
#[derive(Debug, Clone, PartialEq)]
pub struct CurvePoint {
    /// The measured point, as the journal keeps it.
    pub measured: crate::bench_step::PointSummary,
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

impl Serialize for CurvePoint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let m = &self.measured;
        let mut st = s.serialize_struct("CurvePoint", 11)?;
        st.serialize_field("concurrency", &m.concurrency)?;
        st.serialize_field("output_tok_s", &m.output_tok_s)?;
        st.serialize_field("ttft_p50_ms", &m.ttft_p50_ms)?;
        st.serialize_field("ttft_p99_ms", &m.ttft_p99_ms)?;
        st.serialize_field("tpot_p50_ms", &m.tpot_p50_ms)?;
        st.serialize_field("tpot_p90_ms", &m.tpot_p90_ms)?;
        st.serialize_field("tpot_p99_ms", &m.tpot_p99_ms)?;
        st.serialize_field("predicted_output_tok_s", &self.predicted_output_tok_s)?;
        st.serialize_field("uncalibrated_output_tok_s", &self.uncalibrated_output_tok_s)?;
        st.serialize_field("predicted_low", &self.predicted_low)?;
        st.serialize_field("predicted_high", &self.predicted_high)?;
        st.end()
    }
}

/// The model's step of one experiment at its best measured concurrency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakdownLine {
    /// The journal experiment.
    pub experiment: i64,
    /// The experiment's configuration, in words.
    pub title: String,
    /// The model's step at that point: its terms (compute, memory, communication, overhead) in ms.
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
    /// `rows[i][j]`: GPU i to GPU j.
    pub rows: Vec<Vec<String>>,
}

/// The measured NCCL all-reduce of one environment, from the newest `fabric allreduce` document
/// recorded for it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllReduceLine {
    /// The journal's fabric record.
    pub record: i64,
    /// The probe fingerprint of the environment it was measured in.
    pub fingerprint: i64,
    /// The environment in words.
    pub environment: String,
    /// The file it was recorded from.
    pub source: String,
    /// The runs made with NCCL's defaults: ranks and (bytes, us) points.
    pub runs: Vec<servetune_model::comm::MeasuredRun>,
}

impl AllReduceLine {
    /// One row per measured size: the size in words and each run's time, us ("-" where a run did
    /// not measure that size); with the runs' rank counts as the column heads.
    pub fn table(&self) -> (Vec<String>, Vec<(String, Vec<String>)>) {
        let head = self.runs.iter().map(|r| format!("{} ranks, us", r.ranks())).collect();
        let mut sizes: Vec<f64> = self.runs.iter().flat_map(|r| r.points().iter().map(|p| p.0)).collect();
        sizes.sort_by(f64::total_cmp);
        sizes.dedup();
        let rows = sizes
            .into_iter()
            .map(|b| {
                let cells = self
                    .runs
                    .iter()
                    .map(|r| r.points().iter().find(|p| p.0 == b).map_or("-".to_string(), |p| format!("{:.1}", p.1)))
                    .collect();
                (bytes_words(b), cells)
            })
            .collect();
        (head, rows)
    }
}

/// A message size in words: "8 B", "64 KiB", "16 MiB".
fn bytes_words(b: f64) -> String {
    match b {
        b if b >= 1048576.0 => format!("{} MiB", b / 1048576.0),
        b if b >= 1024.0 => format!("{} KiB", b / 1024.0),
        b => format!("{b} B"),
    }
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
    /// The bandwidth and latency matrices.
    #[serde(flatten)]
    pub matrices: crate::fabric_step::PairMatrices,
}

/// Task and experiment counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Counts {
    /// Tasks done.
    pub done: usize,
    /// Tasks in progress.
    pub in_progress: usize,
    /// Tasks not done yet.
    pub not_done: usize,
    /// Experiments by state name.
    pub experiments: BTreeMap<String, usize>,
}

/// A task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskLine {
    /// The journal task id.
    pub id: i64,
    /// done, in_progress or not_done.
    pub state: TaskState,
    /// What the task is, in words.
    pub title: String,
    /// "experiment 3" or "question 1".
    pub record: String,
    /// The outcome in a few words (done, failed: kind, the answer).
    pub outcome: String,
}

/// A working launch command.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaunchLine {
    /// The journal experiment.
    pub experiment: i64,
    /// The launch command line, secrets redacted.
    pub command: String,
    /// The engine's version as the server or its command reported it; null when it did not say.
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
    /// Whether later predictions use it (`crate::verdict::usable`: fitted against the sweep's own
    /// run, and it fits its own sweep within the model's held-out error).
    pub used: bool,
    /// The fitted factors.
    #[serde(flatten)]
    pub factors: crate::plan_step::Calibration,
}

impl CalibrationLine {
    /// Whether it is used, in words.
    pub fn used_words(&self) -> String {
        match crate::verdict::unused_because(&self.factors) {
            None => "yes".into(),
            Some(why) => format!("no: {why}"),
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
    /// info, warning or critical.
    pub severity: Severity,
    /// One line: what is wrong and what it costs.
    pub title: String,
    /// The facts that raised it, naming where they were read.
    pub evidence: String,
    /// What to do about it.
    pub fix: String,
}

/// One experiment's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResultLine {
    /// The journal experiment.
    pub experiment: i64,
    /// The experiment's configuration, in words.
    pub title: String,
    /// The experiment's state: planned, launching, ready, benchmarking, done, failed or interrupted.
    pub state: ExpState,
    /// The best output tok/s measured under the goal's latency objectives; null until measured.
    pub best_output_tok_s: Option<f64>,
    /// The concurrency of that best point.
    pub at_concurrency: Option<u32>,
    /// The 90th-percentile time per output token at that point, ms.
    pub tpot_p90_ms: Option<f64>,
    /// The concurrency at bench's saturation knee, when bench found one.
    pub knee_concurrency: Option<u32>,
    /// The failure's kind and summary, for a failed experiment.
    pub failure: Option<String>,
    /// The bench JSON file of the sweep, when one was written.
    pub bench_json: Option<String>,
}

/// A ranked next step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepLine {
    /// Its rank, 1 first.
    pub rank: usize,
    /// What the step does, in words.
    pub title: String,
    /// Whether a person has to act (a question) rather than the campaign running it.
    pub needs_person: bool,
    /// The predicted gain the step is ranked by (calibrated when the box has a calibration).
    pub gain: Option<f64>,
    /// The model's own gain, without calibration.
    pub raw_gain: Option<f64>,
    /// The experiment the calibration came from.
    pub calibrated_on: Option<i64>,
    /// The gain's interval, from the track record so far.
    pub interval: Option<crate::verdict::Interval>,
    /// Why the planner proposes it, in words.
    pub basis: String,
    /// The journal records it rests on, e.g. finding 3, experiment 5.
    pub evidence: Vec<String>,
}

/// An open question.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuestionLine {
    /// The journal question id (servetune campaign answer DIR ID).
    pub id: i64,
    /// The question.
    pub text: String,
    /// How to act on it and answer, in words.
    pub how: String,
}
