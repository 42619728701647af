//! Predictions against the public end-to-end measurements in `data/validation/e2e.toml`, scored
//! separately on its fit set and its test set (the split is by source and fixed in that file), the
//! test set's median being the headline. `servetune plan --validate` prints this; VALIDATION.md
//! holds a copy.
//!
//! Every case that is not excluded and that the model can express (a catalog model or a config
//! under `data/validation/configs/`, a catalog GPU, a stated tp, a known weight format, a modelled
//! interconnect, a client concurrency below the engine's stated running-request cap, and a measured
//! output rate or a measured TTFT and TPOT) is scored with `plan`'s defaults plus only what the case
//! states; every other case is counted with its reason.
//!
//! Modules: `cases` reads the data files (e2e.toml, the frozen holdout) into scenarios; `constants`
//! says where each fitted constant came from; `markdown` writes the report; `calibrated` scores each
//! deployment after calibrating on its lowest concurrency; `crossval` refits the constants with
//! each of 5 hashed folds of the fit set's sources (or each source) left out and scores what was
//! left out.

mod calibrated;
mod cases;
mod constants;
pub mod crossval;
mod markdown;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

use crate::hw;
use crate::predict::{Engine, Scenario};
use crate::quant::Dtype;
use crate::request::{LinkSource, ModelSource, ScenarioSpec};
use crate::workload::{LengthDist, VirtualBench, Workload};
use crate::ModelError;

pub use calibrated::*;
use cases::*;
pub use cases::{Data, FIT_EXTENSION_NOTE};
pub use constants::constants;
pub use markdown::{bands_table, calibrated_markdown, markdown};

/// Which half of the data a case belongs to (e2e.toml's `set`, fixed by a hash of its source).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Set {
    /// Data constants may be chosen from.
    Fit,
    /// Held out: never used to choose a constant.
    Test,
    /// The frozen holdout (`data/validation/holdout.toml`): gathered before this round's fitting,
    /// scored only by `plan --validate --holdout`, once per landing, every look logged in
    /// HOLDOUT.md beside it.
    Holdout,
}

/// The serving engine a case ran (e2e.toml's `engine`).
pub use crate::predict::EngineName;

/// What a row's measured output rate is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// The source's output tokens/s.
    OutputTokS,
    /// c x output_len / (TTFT + (output_len - 1) x TPOT) from the source's TTFT and TPOT
    /// (AIConfigurator's silicon rows publish no rate): a derivation, not a measurement.
    DerivedFromTtftTpot,
}

/// One scored case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// e2e.toml's id.
    pub id: String,
    /// Fit or test.
    pub set: Set,
    /// The publication it came from.
    pub source_key: String,
    /// GPU as e2e.toml names it.
    pub gpu: String,
    /// Engine.
    pub engine: EngineName,
    /// Client concurrency.
    pub concurrency: u32,
    /// Requests the model runs at once (concurrency capped by its KV capacity).
    pub running: u32,
    /// What `measured` is.
    pub measure: Measure,
    /// Output tokens/s of the deployment, measured (or derived, see `measure`).
    pub measured: f64,
    /// Output tokens/s predicted: what the case's benchmark would measure (the workload run in
    /// virtual time, derived from TTFT and TPOT as the measurement was when it was), else the
    /// steady state.
    pub predicted: f64,
    /// The steady-state prediction (every request running, prefill amortized).
    pub predicted_steady: f64,
    /// Whether `predicted` comes from a virtual run of the case's workload.
    pub virtual_run: bool,
    /// The workload the virtual run used, in words (requests and lengths), empty without one.
    pub workload: String,
    /// (predicted - measured) / measured.
    pub error: f64,
    /// Measured TPOT, ms, when the source gives it.
    pub tpot_measured_ms: Option<f64>,
    /// Predicted TPOT, ms.
    pub tpot_predicted_ms: f64,
    /// Measured TTFT, ms, when the source gives it.
    pub ttft_measured_ms: Option<f64>,
    /// Predicted TTFT, ms: the virtual run's mean, else the steady state's.
    pub ttft_predicted_ms: f64,
    /// Stand-ins the scoring used (a sibling model's config), empty when none.
    pub note: String,
    /// The case ran an early engine release ([`crate::predict::EngineRelease::is_early`]): its
    /// steps take the fitted early-release scale, and it counts in
    /// [`early_release_objective`], not [`fit_objective`].
    pub early_release: bool,
    /// AIConfigurator 0.12.0's estimate of the same output tokens/s ([`crate::aic`]), when it
    /// gave one.
    pub aic_predicted: Option<f64>,
    /// Its (estimate - measured) / measured.
    pub aic_error: Option<f64>,
    /// Dense or MoE: with the GPU's architecture and the engine, the family whose residuals give
    /// a prediction's interval ([`crate::interval`]).
    pub model_kind: crate::interval::ModelKind,
}

/// Why a case was not scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// e2e.toml excludes it: speculative decoding.
    ExcludedSpeculative,
    /// e2e.toml excludes it: a decode-only benchmark at a fixed context.
    ExcludedDecodeOnly,
    /// e2e.toml excludes it: client concurrency at or above the server's running cap.
    ExcludedAtRunningCap,
    /// e2e.toml excludes it: the deployment (parallelism, workers) is unresolved in the source.
    ExcludedUnresolved,
    /// e2e.toml excludes it for another reason.
    ExcludedOther,
    /// An offline run (all requests queued at once): no client concurrency below the engine's cap.
    Offline,
    /// Concurrency at or above the stated running-request cap.
    AtRunningCap,
    /// The source states no tp.
    NoTp,
    /// The model has no catalog entry or config here.
    UnknownModel,
    /// The GPU is not in the catalog.
    UnknownGpu,
    /// The weight format is not stated.
    UnknownQuant,
    /// The interconnect (xGMI) has no link in the catalog.
    UnmodelledInterconnect,
    /// Neither an output rate nor TTFT and TPOT were measured.
    NoMeasure,
    /// The model refused the deployment (an architecture it cannot parse, or it does not fit).
    Refused,
    /// The measured rate needs more prefill compute than the GPUs' dense peak: the prompts
    /// cannot all have been computed (a prefix-cache hit or a misreported length), so the case
    /// does not measure what its lengths say.
    Implausible,
}

impl SkipReason {
    /// Words for a reader.
    pub fn words(self) -> &'static str {
        match self {
            SkipReason::ExcludedSpeculative => "excluded in e2e.toml: speculative decoding",
            SkipReason::ExcludedDecodeOnly => "excluded in e2e.toml: decode-only benchmark at a fixed context",
            SkipReason::ExcludedAtRunningCap => "excluded in e2e.toml: client concurrency at or above the running cap",
            SkipReason::ExcludedUnresolved => "excluded in e2e.toml: deployment unresolved in the source",
            SkipReason::ExcludedOther => "excluded in e2e.toml: other",
            SkipReason::Offline => "offline run (all requests queued at once, above any engine's running cap)",
            SkipReason::AtRunningCap => "concurrency at or above the stated running-request cap",
            SkipReason::NoTp => "tp not stated",
            SkipReason::UnknownModel => "model not in the catalog nor under data/validation/configs",
            SkipReason::UnknownGpu => "GPU not in the catalog",
            SkipReason::UnknownQuant => "weight format not stated",
            SkipReason::UnmodelledInterconnect => "interconnect without a catalog link for this GPU",
            SkipReason::NoMeasure => "no output rate, nor TTFT and TPOT, measured",
            SkipReason::Refused => "plan refused the deployment",
            SkipReason::Implausible => "measured rate needs more prefill compute than the GPUs' dense peak",
        }
    }

    fn of_exclusion(reason: &str) -> SkipReason {
        if reason.starts_with("speculative") {
            SkipReason::ExcludedSpeculative
        } else if reason.starts_with("decode-only") {
            SkipReason::ExcludedDecodeOnly
        } else if reason.contains("running") || reason.starts_with("client concurrency") {
            SkipReason::ExcludedAtRunningCap
        } else if reason.contains("unresolved") {
            SkipReason::ExcludedUnresolved
        } else {
            SkipReason::ExcludedOther
        }
    }
}

/// Skipped cases with one reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skipped {
    /// The reason.
    pub reason: SkipReason,
    /// The reason in words.
    pub words: &'static str,
    /// How many cases.
    pub count: usize,
    /// The first such case's id.
    pub first_id: String,
    /// The first such case's detail (its GPU, model, or plan's error).
    pub first_detail: String,
}

/// Medians of one set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SetSummary {
    /// Scored cases.
    pub cases: usize,
    /// Median |error| over the set's rows (0 when none).
    pub median_abs_error: f64,
    /// Median signed error.
    pub median_error: f64,
    /// Rows predicted above the measurement.
    pub over_predicted: usize,
    /// Rows whose rate was measured (not derived).
    pub measured_cases: usize,
    /// Median |error| over those rows.
    pub measured_median_abs_error: f64,
    /// Rows with a measured TPOT.
    pub tpot_cases: usize,
    /// Median |TPOT error| over those rows.
    pub tpot_median_abs_error: f64,
    /// Rows with a measured TTFT.
    pub ttft_cases: usize,
    /// Median |TTFT error| over those rows.
    pub ttft_median_abs_error: f64,
    /// Median |error| of the steady-state prediction over the same rows (equal to
    /// `median_abs_error` when no virtual run was made).
    pub steady_median_abs_error: f64,
}

/// A constant of the model and the data it was chosen from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConstantOrigin {
    /// The engine field or data entry.
    pub name: &'static str,
    /// Its value.
    pub value: f64,
    /// The fit cases or the kernel/comm data it was set from, or "assumption".
    pub set_from: &'static str,
}

/// The validation report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Validation {
    /// Always "servetune.validation/2".
    pub schema: &'static str,
    /// The file scored.
    pub data: &'static str,
    /// Cases in it.
    pub total_cases: usize,
    /// The headline: median |error| of output tokens/s on the test set.
    pub headline_test_median_abs_error: f64,
    /// The fit set's medians.
    pub fit: SetSummary,
    /// The test set's medians.
    pub test: SetSummary,
    /// The frozen holdout's medians (no cases unless `data` is the holdout file).
    pub holdout: SetSummary,
    /// The error by concurrency band, set by set.
    pub bands: Vec<BandSummary>,
    /// The signed TPOT and TTFT errors by set, engine and band.
    pub latency_bands: Vec<LatencyBand>,
    /// The same data scored calibrated on each deployment's lowest concurrency
    /// (`plan --validate --calibrated`, and always with `--holdout`); `None` when not asked.
    pub calibrated: Option<CalibratedValidation>,
    /// One row per scored case, test set first.
    pub rows: Vec<Row>,
    /// Cases not scored, by reason.
    pub skipped: Vec<Skipped>,
    /// Where each fitted constant came from.
    pub constants: Vec<ConstantOrigin>,
    /// The engine defaults every case started from.
    pub engine: Engine,
    /// What the predictions are.
    pub predicted_by: PredictedBy,
    /// AIConfigurator beside `plan` on the cases it estimated.
    pub aiconfigurator: AicComparison,
    /// How many measurements fall inside the interval `plan` gives beside each prediction.
    pub interval_coverage: IntervalCoverage,
}

/// How many scored measurements of today's releases fall inside the committed interval of their
/// family (`crates/model/data/validation/intervals.json`, the one `plan` prints beside each
/// prediction). The table is computed from e2e.toml's test-set rows, so on e2e.toml the count
/// takes those rows and is in sample (a check of the table, near its nominal share by
/// construction); on the frozen holdout it takes every row and is out of sample: how often the
/// interval holds for a deployment it never saw.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct IntervalCoverage {
    /// Whether the table was computed without these rows (the holdout).
    pub out_of_sample: bool,
    /// The share the interval is meant to hold.
    pub nominal: f64,
    /// The committed table's tail: its intervals span the quantiles `tail` and `1 - tail` of
    /// measured / predicted ([`crate::interval::IntervalTable::tail`]).
    pub tail: f64,
    /// The committed table's leave-one-publication-out coverage on the test set, the share its
    /// tail was chosen to reach.
    pub cross_validated: f64,
    /// Rows counted (today's releases; an early release's rows carry a calibration of their own,
    /// as in the table).
    pub rows: usize,
    /// Measured inside the interval.
    pub inside: usize,
    /// Measured below it: over-predicted past the interval.
    pub below: usize,
    /// Measured above it: under-predicted past the interval.
    pub above: usize,
}

impl IntervalCoverage {
    /// `rows` against the committed table.
    fn of(rows: &[Row], out_of_sample: bool) -> Result<Self, ModelError> {
        let t = crate::interval::committed();
        let mut c = IntervalCoverage {
            out_of_sample,
            nominal: t.coverage,
            tail: t.tail,
            cross_validated: t.cross_validated_coverage,
            rows: 0,
            inside: 0,
            below: 0,
            above: 0,
        };
        let counted = |r: &&Row| if out_of_sample { crate::interval::current_row(r) } else { crate::interval::table_row(r) };
        for r in rows.iter().filter(counted) {
            let i = crate::interval::lookup(t, crate::interval::row_family(r)?);
            let ratio = r.measured / r.predicted;
            c.rows += 1;
            if ratio < i.low {
                c.below += 1;
            } else if ratio > i.high {
                c.above += 1;
            } else {
                c.inside += 1;
            }
        }
        Ok(c)
    }

    /// The share inside (0 with no rows).
    pub fn share(&self) -> f64 {
        if self.rows == 0 {
            0.0
        } else {
            self.inside as f64 / self.rows as f64
        }
    }
}

/// AIConfigurator's estimates scored like `plan`'s, set by set, on the cases it gave one for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AicComparison {
    /// The tool and version.
    pub tool: &'static str,
    /// The file its estimates come from.
    pub data: &'static str,
    /// Test set.
    pub test: crate::aic::SideBySide,
    /// Fit set.
    pub fit: crate::aic::SideBySide,
}

/// What a validation's predictions are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PredictedBy {
    /// The steady state: every request running, prefill amortized.
    SteadyState,
    /// Each case's benchmark workload run through the engine in virtual time.
    VirtualRun,
}

/// A case made ready to predict: its scenario with the fitted constants under scoring, its
/// concurrency, workload and measurement.
struct Prepared {
    s: Scenario,
    conc: u32,
    output_len: u32,
    measure: Measure,
    measured: f64,
    workload: Workload,
    note: &'static str,
    early_release: bool,
}

/// Builds one case's scenario with `engine`'s fitted constants (the case keeps its own CUDA graphs
/// and prefill mixing), or says why it cannot be scored.
fn prepare(c: &E2eCase, engine: &Engine, latency: Latency) -> Result<Prepared, (SkipReason, String)> {
    let (spec, conc, note) = spec_of(c)?;
    let (measure, measured) = measured_of(c, conc, spec.output_len).ok_or((SkipReason::NoMeasure, String::new()))?;
    let mut s: Scenario = spec.build().map_err(|e| (SkipReason::Refused, e.to_string()))?;
    // The fitted constants under scoring, with what the case and its engine set.
    let e = s.engine;
    let request_latency_ms = match latency {
        Latency::PerEngine => e.request_latency_ms,
        Latency::Zero => 0.0,
    };
    // sglang's prefill ran eagerly before its piecewise CUDA graphs became the default.
    let release = crate::predict::EngineRelease { name: c.engine, version: c.engine_version.clone() };
    let early = release.is_early(c.date.as_deref());
    let prefill_graphs = if c.engine == EngineName::Sglang { release.prefill_graphs(c.date.as_deref()) } else { e.prefill_graphs };
    let base = Engine {
        cuda_graphs: e.cuda_graphs,
        prefill_graphs,
        // vLLM's V0 (before 0.8.0) runs prompts as steps of their own.
        mixed_prefill: e.mixed_prefill && release.mixes_prefill(),
        // A share the case states (given), else its release's default (with_defaults).
        mem_share: e.mem_share,
        serving: e.serving,
        request_latency_ms,
        ..*engine
    };
    s.engine = release.with_defaults(base, c.date.as_deref());
    s.check_fit().map_err(|e| (SkipReason::Refused, e.to_string()))?;
    check_plausible(&s, measured)?;
    let workload = workload_of(c, spec.input_len, spec.output_len);
    Ok(Prepared { s, conc, output_len: spec.output_len, measure, measured, workload, note, early_release: early })
}

/// The row of a prepared case: with `bench`, the prediction is what the case's benchmark would
/// measure (its workload run in virtual time), else the steady state.
fn predict(c: &E2eCase, p: &Prepared, bench: Option<&dyn VirtualBench>) -> Row {
    let (s, conc, w) = (&p.s, p.conc, &p.workload);
    let point = s.point(conc);
    let client = bench.map(|b| b.run(s, w, conc));
    let ttft = client.map_or(point.ttft_ms, |r| r.ttft_ms.mean);
    let (predicted, tpot) = match (client, p.measure) {
        (None, _) => (point.output_tokens_per_s, point.tpot_ms),
        (Some(r), Measure::OutputTokS) => (r.output_tokens_per_s, r.tpot_ms.mean),
        (Some(r), Measure::DerivedFromTtftTpot) => {
            // The same derivation as the measurement's, from the predicted mean TTFT and TPOT.
            let e2e_s = (r.ttft_ms.mean + (p.output_len as f64 - 1.0) * r.tpot_ms.mean) / 1e3;
            (conc as f64 * p.output_len as f64 / e2e_s.max(1e-12), r.tpot_ms.mean)
        }
    };
    Row {
        id: c.id.clone(),
        set: c.set,
        source_key: c.source_key.clone(),
        gpu: c.gpu.clone(),
        engine: c.engine,
        concurrency: conc,
        running: point.running,
        measure: p.measure,
        measured: p.measured,
        predicted,
        predicted_steady: point.output_tokens_per_s,
        virtual_run: client.is_some(),
        workload: client.map_or(String::new(), |r| format!("{} req, in {}, out {}", r.requests, w.input.label(), w.output.label())),
        error: (predicted - p.measured) / p.measured,
        tpot_measured_ms: c.tpot(),
        tpot_predicted_ms: tpot,
        ttft_measured_ms: c.ttft(),
        ttft_predicted_ms: ttft,
        note: p.note.to_string(),
        early_release: p.early_release,
        aic_predicted: None,
        aic_error: None,
        model_kind: crate::interval::ModelKind::of(&s.model),
    }
}

/// Scores one case with `engine`'s fitted constants: its row, or why it was skipped.
fn score(c: &E2eCase, engine: &Engine, bench: Option<&dyn VirtualBench>, latency: Latency) -> Result<Row, (SkipReason, String)> {
    prepare(c, engine, latency).map(|p| predict(c, &p, bench))
}

fn median(xs: &[f64]) -> f64 {
    servetune_stats::median(xs).unwrap_or(0.0)
}

/// Each source's median |error| over `(source, error)` rows (the calibrated-form check and the
/// cross-validation read their rows by source).
#[cfg(test)]
pub(crate) fn source_medians<'a>(rows: impl IntoIterator<Item = (&'a str, f64)>) -> std::collections::BTreeMap<&'a str, f64> {
    let mut by_source: std::collections::BTreeMap<&str, Vec<f64>> = std::collections::BTreeMap::new();
    for (source, e) in rows {
        by_source.entry(source).or_default().push(e.abs());
    }
    by_source.into_iter().map(|(k, e)| (k, median(&e))).collect()
}

/// The median |error| of `(source, error)` rows, and the median over the sources of each
/// source's median (each publication weighing the same).
#[cfg(test)]
pub(crate) fn medians<'a>(rows: impl IntoIterator<Item = (&'a str, f64)>) -> (f64, f64) {
    let rows: Vec<(&str, f64)> = rows.into_iter().collect();
    let all: Vec<f64> = rows.iter().map(|(_, e)| e.abs()).collect();
    let per_source: Vec<f64> = source_medians(rows).into_values().collect();
    (median(&all), median(&per_source))
}

/// The medians of the rows of `set`.
pub fn summary(rows: &[Row], set: Set) -> SetSummary {
    let rs: Vec<&Row> = rows.iter().filter(|r| r.set == set).collect();
    let abs: Vec<f64> = rs.iter().map(|r| r.error.abs()).collect();
    let signed: Vec<f64> = rs.iter().map(|r| r.error).collect();
    let meas: Vec<f64> = rs.iter().filter(|r| r.measure == Measure::OutputTokS).map(|r| r.error.abs()).collect();
    let tpot: Vec<f64> = rs.iter().filter_map(|r| r.tpot_measured_ms.map(|m| ((r.tpot_predicted_ms - m) / m).abs())).collect();
    let ttft: Vec<f64> =
        rs.iter().filter_map(|r| r.ttft_measured_ms.filter(|m| *m > 0.0).map(|m| ((r.ttft_predicted_ms - m) / m).abs())).collect();
    let steady: Vec<f64> = rs.iter().map(|r| ((r.predicted_steady - r.measured) / r.measured).abs()).collect();
    SetSummary {
        cases: rs.len(),
        median_abs_error: median(&abs),
        median_error: median(&signed),
        over_predicted: signed.iter().filter(|e| **e > 0.0).count(),
        measured_cases: meas.len(),
        measured_median_abs_error: median(&meas),
        tpot_cases: tpot.len(),
        tpot_median_abs_error: median(&tpot),
        ttft_cases: ttft.len(),
        ttft_median_abs_error: median(&ttft),
        steady_median_abs_error: median(&steady),
    }
}

/// A band of client concurrency: where batching, attention over long contexts and the engine's
/// per-request work differ most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Band {
    /// c < 16.
    Low,
    /// 16 <= c < 64.
    Mid,
    /// c >= 64.
    High,
}

impl Band {
    /// The band of a client concurrency.
    pub fn of(concurrency: u32) -> Band {
        match concurrency {
            0..=15 => Band::Low,
            16..=63 => Band::Mid,
            _ => Band::High,
        }
    }

    /// As the report writes it.
    pub fn words(self) -> &'static str {
        match self {
            Band::Low => "c < 16",
            Band::Mid => "16 <= c < 64",
            Band::High => "c >= 64",
        }
    }
}

/// The medians of one set's rows in one concurrency band.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BandSummary {
    /// The set.
    pub set: Set,
    /// The band.
    pub band: Band,
    /// Rows in it.
    pub cases: usize,
    /// Median |error|.
    pub median_abs_error: f64,
    /// Median signed error (above 0: over-predicted).
    pub median_error: f64,
    /// Rows predicted above the measurement.
    pub over_predicted: usize,
}

/// The error by set and concurrency band, every (set, band) with at least one row.
pub fn bands(rows: &[Row]) -> Vec<BandSummary> {
    band_summaries(rows.iter().map(|r| (r.set, r.concurrency, r.error)))
}

/// The same from (set, concurrency, error) triples (the calibrated scoring uses it too).
pub fn band_summaries(errors: impl Iterator<Item = (Set, u32, f64)>) -> Vec<BandSummary> {
    let mut groups: std::collections::BTreeMap<(u8, Band), (Set, Vec<f64>)> = std::collections::BTreeMap::new();
    for (set, c, e) in errors {
        groups.entry((set as u8, Band::of(c))).or_insert_with(|| (set, Vec::new())).1.push(e);
    }
    groups
        .into_iter()
        .map(|((_, band), (set, errors))| {
            let abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
            BandSummary {
                set,
                band,
                cases: errors.len(),
                median_abs_error: median(&abs),
                median_error: median(&errors),
                over_predicted: errors.iter().filter(|e| **e > 0.0).count(),
            }
        })
        .collect()
}

/// The signed TPOT and TTFT errors of one set's rows of one engine in one concurrency band: where
/// a throughput that scores well hides a decode step too slow against a prefill too fast (or the
/// reverse), which a benchmark with other lengths would not forgive.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencyBand {
    /// The set.
    pub set: Set,
    /// The engine.
    pub engine: EngineName,
    /// The band.
    pub band: Band,
    /// Rows whose source gives a TPOT.
    pub tpot_cases: usize,
    /// Median of predicted / measured TPOT - 1 (above 0: decode predicted slower); 0 without rows.
    pub tpot_median_error: f64,
    /// Rows whose source gives a TTFT.
    pub ttft_cases: usize,
    /// Median of predicted / measured TTFT - 1 (above 0: first token predicted later); 0 without rows.
    pub ttft_median_error: f64,
}

/// The TPOT and TTFT split by set, engine and concurrency band, every group with a TPOT or a TTFT.
pub fn latency_bands(rows: &[Row]) -> Vec<LatencyBand> {
    type Errors = (Vec<f64>, Vec<f64>);
    let mut groups: std::collections::BTreeMap<(u8, u8, Band), (Set, EngineName, Errors)> = std::collections::BTreeMap::new();
    for r in rows {
        let tpot = r.tpot_measured_ms.filter(|m| *m > 0.0).map(|m| r.tpot_predicted_ms / m - 1.0);
        let ttft = r.ttft_measured_ms.filter(|m| *m > 0.0).map(|m| r.ttft_predicted_ms / m - 1.0);
        if tpot.is_none() && ttft.is_none() {
            continue;
        }
        let g =
            groups.entry((r.set as u8, r.engine as u8, Band::of(r.concurrency))).or_insert_with(|| (r.set, r.engine, Default::default()));
        g.2 .0.extend(tpot);
        g.2 .1.extend(ttft);
    }
    let med = |v: &[f64]| if v.is_empty() { 0.0 } else { median(v) };
    groups
        .into_iter()
        .map(|((_, _, band), (set, engine, (tpot, ttft)))| LatencyBand {
            set,
            engine,
            band,
            tpot_cases: tpot.len(),
            tpot_median_error: med(&tpot),
            ttft_cases: ttft.len(),
            ttft_median_error: med(&ttft),
        })
        .collect()
}

/// The objective the fitted constants minimize: the median |error| over the FIT set's rows of
/// today's releases (an early release's rows fit [`early_release_objective`] instead) with
/// each source weighing sqrt(its rows) in all ([`FIT_WEIGHTING`]: a row weighs 1 / sqrt(its
/// source's scored fit rows); each source the same, 1 / its rows, from step 15 to step 30). The split assigns
/// whole sources to a set, so the test set asks how the model does on sources it has not seen;
/// a plain median would let the three AIConfigurator sources that hold most of the fit rows set
/// the constants alone. The weighted median is the lower one ([`servetune_stats::weighted_median`]).
/// None without fit rows.
pub fn fit_objective(v: &Validation) -> Option<f64> {
    fit_rows_objective(v, false)
}

/// The refit's descent over the jointly fitted engine constants: from `e`, to the neighbour that
/// `objective` scores lowest within `reach` grid steps of each (the per-kernel floor, which the
/// GEMM floor follows, by 0.1 us; the MoE efficiency by 0.05; the per-request cost by 2.5 us),
/// until no neighbour scores lower. `on_move` hears each move and its score. The refit scans share
/// it: `validate::tests::joint_refit_on_the_fit_set` (steady state) and the simulator's tests'
/// virtual-run scan.
pub fn refit_descent(mut e: Engine, reach: [i32; 3], objective: &dyn Fn(&Engine) -> f64, on_move: &mut dyn FnMut(&Engine, f64)) -> Engine {
    loop {
        let mut best = (objective(&e), e);
        for o in -reach[0]..=reach[0] {
            for m in -reach[1]..=reach[1] {
                for r in -reach[2]..=reach[2] {
                    let floor = ((e.kernel_overhead_us + 0.1 * o as f64) * 10.0).round() / 10.0;
                    let c = Engine {
                        kernel_overhead_us: floor,
                        gemm_floor_us: floor,
                        moe_efficiency: ((e.moe_efficiency + 0.05 * m as f64) * 100.0).round() / 100.0,
                        request_step_us: e.request_step_us + 2.5 * r as f64,
                        ..e
                    };
                    let f = objective(&c);
                    if f < best.0 - 1e-12 {
                        best = (f, c);
                    }
                }
            }
        }
        if best.1 == e {
            return e;
        }
        e = best.1;
        on_move(&e, best.0);
    }
}

/// The objective [`crate::predict::EARLY_RELEASE_STEP_SCALE`] minimizes: the median |error| of
/// the FIT set's early-release rows, weighted as in [`fit_objective`]. None
/// without such rows.
pub fn early_release_objective(v: &Validation) -> Option<f64> {
    fit_rows_objective(v, true)
}

/// The source-weighted median |error| of the FIT set's rows of early releases (`early`) or of
/// today's.
fn fit_rows_objective(v: &Validation, early: bool) -> Option<f64> {
    let rows: Vec<&Row> = v.rows.iter().filter(|r| r.set == Set::Fit && r.early_release == early).collect();
    FIT_WEIGHTING.objective(&rows)
}

/// How [`fit_objective`] weighs a row: [`crossval::Weighting::SqrtSource`] since VALIDATION.md
/// step 31, chosen by the leave-sources-out cross-validation of the refit on the fit set
/// ([`crossval`]); [`crossval::Weighting::PerSource`] from step 15 to step 30. On the statistic
/// fixed before the run it tied with [`crossval::Weighting::PerRow`]; the rows' out-of-fold
/// median, a rule set after seeing the tie, chose it, and leaving out one source at a time
/// favours the plain median by 0.002.
pub const FIT_WEIGHTING: crossval::Weighting = crossval::Weighting::SqrtSource;

fn group_skips(skips: Vec<(SkipReason, String, String)>) -> Vec<Skipped> {
    let mut out: Vec<Skipped> = Vec::new();
    for (reason, id, detail) in skips {
        match out.iter_mut().find(|s| s.reason == reason) {
            Some(s) => s.count += 1,
            None => out.push(Skipped { reason, words: reason.words(), count: 1, first_id: id, first_detail: detail }),
        }
    }
    out.sort_by(|a, b| b.count.cmp(&a.count).then(a.reason.cmp(&b.reason)));
    out
}

/// Scores every case of e2e.toml with the engine defaults, steady state only.
pub fn run() -> Result<Validation, ModelError> {
    run_with(&Engine::default())
}

/// Scores every case of e2e.toml with `engine`'s constants, steady state only (to refit them on
/// the fit set).
pub fn run_with(engine: &Engine) -> Result<Validation, ModelError> {
    run_with_bench(engine, None)
}

/// Scores every case of e2e.toml with `engine`'s constants; with `bench`, each prediction is what
/// the case's benchmark would measure (`servetune plan --validate` passes the simulator's
/// virtual-time engine).
pub fn run_with_bench(engine: &Engine, bench: Option<&dyn VirtualBench>) -> Result<Validation, ModelError> {
    run_cases(Data::E2e, engine, bench, Latency::PerEngine)
}

/// Scores the frozen holdout (`data/validation/holdout.toml`) as `plan --validate --holdout` does:
/// the engine defaults, each case's benchmark run through `bench`. Its score is looked at once per
/// landing and every look is logged in HOLDOUT.md; no constant is ever chosen from it.
pub fn run_holdout(engine: &Engine, bench: Option<&dyn VirtualBench>) -> Result<Validation, ModelError> {
    run_cases(Data::Holdout, engine, bench, Latency::PerEngine)
}

/// Which serving-path latency the cases run with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Latency {
    /// Each case its engine's ([`EngineName::request_latency_ms`]).
    PerEngine,
    /// None (to measure the TTFT gap the latencies are fitted to).
    Zero,
}

/// As [`run_with_bench`] with no serving-path latency in any case: the TTFT gaps
/// (measured - predicted) of its fit rows are what [`EngineName::request_latency_ms`] is the
/// median of.
pub fn run_without_request_latency(engine: &Engine, bench: Option<&dyn VirtualBench>) -> Result<Validation, ModelError> {
    run_cases(Data::E2e, engine, bench, Latency::Zero)
}

/// Highest client concurrency at which a row's TTFT gap counts toward an engine's serving-path
/// latency ([`median_ttft_gap_ms`]): the rows where a prompt rarely waits for another. It was
/// set when the virtual run mixed sglang's prompts into decode steps and the gap of sglang's fit
/// rows grew with concurrency (median 243 ms at c <= 8, 463 at c = 16..32, 1,046 above). With
/// sglang's prefill-first scheduling the gap is flat up to c = 64 (226 / 258 / 213 ms); the rule
/// was kept as it was.
pub const LATENCY_FIT_MAX_CONCURRENCY: u32 = 8;

/// The median TTFT gap, measured less predicted, ms, over the `set` rows of `engine` (today's
/// releases: not [`Row::early_release`]) that measured a TTFT at a client concurrency of at most [`LATENCY_FIT_MAX_CONCURRENCY`] (None when
/// there are none).
pub fn median_ttft_gap_ms(v: &Validation, set: Set, engine: EngineName) -> Option<f64> {
    let gaps: Vec<f64> = v
        .rows
        .iter()
        .filter(|r| r.set == set && r.engine == engine && !r.early_release && r.concurrency <= LATENCY_FIT_MAX_CONCURRENCY)
        .filter_map(|r| r.ttft_measured_ms.map(|m| m - r.ttft_predicted_ms))
        .collect();
    servetune_stats::median(&gaps)
}

fn run_cases(data: Data, engine: &Engine, bench: Option<&dyn VirtualBench>, latency: Latency) -> Result<Validation, ModelError> {
    let file = data.cases()?;
    let mut rows = Vec::new();
    let mut skips = Vec::new();
    for c in &file.case {
        match score(c, engine, bench, latency) {
            Ok(r) => rows.push(r),
            Err((reason, detail)) => skips.push((reason, c.id.clone(), detail)),
        }
    }
    rows.sort_by_key(|r| r.set != Set::Test);
    let aic = crate::aic::estimates()?;
    for r in &mut rows {
        r.aic_predicted = aic.get(&r.id).and_then(crate::aic::Estimate::rate);
        r.aic_error = r.aic_predicted.map(|a| (a - r.measured) / r.measured);
    }
    let side = |set: Set| {
        let errors: Vec<(f64, Option<f64>)> = rows.iter().filter(|r| r.set == set).map(|r| (r.error, r.aic_error)).collect();
        crate::aic::side_by_side(&errors)
    };
    let aiconfigurator =
        AicComparison { tool: crate::aic::AIC_TOOL, data: crate::aic::AIC_PATH, test: side(Set::Test), fit: side(Set::Fit) };
    let (fit, test, holdout) = (summary(&rows, Set::Fit), summary(&rows, Set::Test), summary(&rows, Set::Holdout));
    let bands = bands(&rows);
    let latency_bands = latency_bands(&rows);
    let interval_coverage = IntervalCoverage::of(&rows, data == Data::Holdout)?;
    Ok(Validation {
        schema: "servetune.validation/2",
        data: data.path(),
        total_cases: file.case.len(),
        headline_test_median_abs_error: test.median_abs_error,
        fit,
        test,
        holdout,
        bands,
        latency_bands,
        calibrated: None,
        rows,
        skipped: group_skips(skips),
        constants: constants(),
        engine: *engine,
        predicted_by: if bench.is_some() { PredictedBy::VirtualRun } else { PredictedBy::SteadyState },
        aiconfigurator,
        interval_coverage,
    })
}
