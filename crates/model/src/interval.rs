//! How far a prediction may be off: intervals from the validation residuals of its family (GPU
//! architecture x engine x model kind), the committed table of them
//! (`crates/model/data/validation/intervals.json`), and the lookup for a scenario.
//!
//! The table is computed from `plan --validate`'s test-set rows: an interval describes the error
//! on deployments the model was not fitted to, and the fit set's rows are the ones it was fitted
//! to (until stop 61 both sets were pooled, which the frozen holdout's out-of-sample count showed
//! too narrow: 49% of its measurements inside the 80% interval, HOLDOUT.md look 49). No constant
//! of the model is chosen from it.
//!
//! A new deployment is most often a new publication, whose offset the rows of one publication
//! share, so the quantiles a family's interval spans are chosen by leaving each publication out
//! in turn: the table made from the other publications' rows must hold the left-out rows at the
//! nominal share ([`NOMINAL_COVERAGE`]). The interval spans the quantiles `tail` and `1 - tail`
//! of measured / predicted, with `tail` the largest on a [`TAIL_STEP`] grid from
//! `(1 - NOMINAL_COVERAGE) / 2` down whose leave-one-publication-out coverage reaches the
//! nominal share (a cross-validated choice, not a fit of the model; until stop 63 the tail was
//! fixed at 10%, whose leave-one-publication-out coverage was 65%). Regenerate it with
//! `servetune plan --validate --write-intervals crates/model/data/validation/intervals.json`; a CLI
//! test recomputes it and fails when the committed file differs.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::hw::Arch;
use crate::predict::{EngineName, Scenario};
use crate::spec::ModelSpec;
use crate::validate::Row;
use crate::ModelError;

/// Dense or mixture-of-experts: the model kinds whose errors differ most (expert routing, EP
/// all-to-all and expert-weight streaming are only in the second).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// Every token runs every weight.
    Dense,
    /// Routed experts.
    Moe,
}

impl ModelKind {
    /// The kind of `m`.
    pub fn of(m: &ModelSpec) -> Self {
        if m.moe.is_some() {
            ModelKind::Moe
        } else {
            ModelKind::Dense
        }
    }

    /// As the table writes it.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Dense => "dense",
            ModelKind::Moe => "moe",
        }
    }
}

/// A family of deployments whose prediction errors are pooled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Family {
    /// The GPU architecture.
    pub gpu_arch: Arch,
    /// The serving engine.
    pub engine: EngineName,
    /// Dense or MoE.
    pub model_kind: ModelKind,
}

impl Family {
    /// The family of a scenario.
    pub fn of(s: &Scenario) -> Self {
        Family { gpu_arch: s.gpu.arch, engine: s.engine.serving, model_kind: ModelKind::of(&s.model) }
    }

    /// In words, e.g. `hopper x sglang x moe`.
    pub fn words(&self) -> String {
        format!("{} x {} x {}", arch_name(self.gpu_arch), self.engine.name(), self.model_kind.name())
    }
}

/// An architecture as the table writes it.
pub fn arch_name(a: Arch) -> &'static str {
    match a {
        Arch::Ampere => "ampere",
        Arch::Ada => "ada",
        Arch::Hopper => "hopper",
        Arch::Blackwell => "blackwell",
        Arch::BlackwellRtx => "blackwell_rtx",
        Arch::Cdna3 => "cdna3",
        Arch::Cdna4 => "cdna4",
    }
}

/// The residual figures of one family (or of every case pooled).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// The family (None: every scored case pooled).
    pub family: Option<Family>,
    /// Scored cases in it.
    pub cases: usize,
    /// Publications they come from.
    pub sources: usize,
    /// Median |predicted - measured| / measured.
    pub median_abs_error: f64,
    /// Median (predicted - measured) / measured: above 0, the model over-predicts.
    pub median_error: f64,
    /// The table's `tail` quantile of measured / predicted: the interval's low end as a factor of
    /// a prediction.
    pub low: f64,
    /// The `1 - tail` quantile of measured / predicted: the interval's high end.
    pub high: f64,
}

/// The committed table: `crates/model/data/validation/intervals.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalTable {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The command that writes it.
    pub generated_by: String,
    /// The share of measurements an interval is meant to hold.
    pub coverage: f64,
    /// The quantile of measured / predicted an interval starts at (it ends at `1 - tail`): the
    /// largest on the grid whose leave-one-publication-out coverage reaches `coverage`.
    pub tail: f64,
    /// The share of the test-set rows inside the interval of the table made without their
    /// publication, at `tail`: what the interval holds for a publication it never saw.
    pub cross_validated_coverage: f64,
    /// A family with fewer cases uses the pooled figures.
    pub min_cases: usize,
    /// A family whose cases come from fewer publications uses the pooled figures too: one
    /// source's cases show that source's offset, not the family's spread.
    #[serde(default)]
    pub min_sources: usize,
    /// Every scored case together.
    pub pooled: Figures,
    /// One entry per family with at least one case, sorted.
    pub families: Vec<Figures>,
    /// The intervals of calibrated predictions (`plan --calibrate`), from the test set's rows
    /// scored by `plan --validate --calibrated`.
    pub calibrated: CalibratedTable,
}

/// The intervals of calibrated predictions: one calibration measures a deployment's offset, so
/// what is left is the spread of the calibrated errors, pooled over every family (the test set has
/// too few calibrated rows to split them) and centred on the prediction, each span chosen by
/// leaving publications out as the raw table's is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibratedTable {
    /// The calibrated deployment at its other concurrencies (each test-set deployment calibrated
    /// on its lowest measured concurrency, scored at the others).
    pub same_deployment: CalibratedFigures,
    /// Other deployments of the same model, GPU type, engine, format and lengths (other plans or
    /// GPU counts) priced with that calibration.
    pub other_deployments: CalibratedFigures,
}

/// One pooled span of calibrated errors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibratedFigures {
    /// The span holds the `1 - 2 tail` quantile of |ln(measured / predicted)| on either side of
    /// the prediction.
    pub tail: f64,
    /// Its leave-one-publication-out coverage.
    pub cross_validated_coverage: f64,
    /// The pooled figures at `tail`.
    pub figures: Figures,
}

/// The table's schema and version (2: the tail is chosen by leaving publications out; 1 had it
/// fixed at 10%).
pub const SCHEMA: &str = "servetune.intervals/2";
/// The share of measurements an interval is meant to hold.
pub const NOMINAL_COVERAGE: f64 = 0.8;
/// The grid the tail is chosen on.
pub const TAIL_STEP: f64 = 0.005;
/// A family with fewer scored cases falls back to the pooled figures.
pub const MIN_CASES: usize = 5;
/// A family whose cases come from fewer publications falls back to the pooled figures (a rule,
/// not a fit: a family's spread needs more than one publication's offset; set with the move to
/// test-set rows in stop 61, when four families had their own interval from one publication).
pub const MIN_SOURCES: usize = 3;
/// The command that regenerates the committed table.
pub const COMMAND: &str = "servetune plan --validate --write-intervals crates/model/data/validation/intervals.json";

/// The quantile `q` of sorted values (linear interpolation between order statistics).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Four decimals: the table is compared as written, so it must not carry float noise.
fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// A measurement and its prediction, as the table reads a validation row.
#[derive(Debug, Clone, Copy)]
struct Resid<'a> {
    /// The publication.
    source: &'a str,
    measured: f64,
    predicted: f64,
}

impl<'a> Resid<'a> {
    fn of(r: &'a Row) -> Self {
        Resid { source: &r.source_key, measured: r.measured, predicted: r.predicted }
    }

    fn ratio(&self) -> f64 {
        self.measured / self.predicted
    }

    fn error(&self) -> f64 {
        (self.predicted - self.measured) / self.measured
    }
}

fn figures(family: Option<Family>, rows: &[Resid], tail: f64) -> Figures {
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let ratios = sorted(rows.iter().map(Resid::ratio).collect());
    let abs = sorted(rows.iter().map(|r| r.error().abs()).collect());
    let signed = sorted(rows.iter().map(Resid::error).collect());
    let mut sources: Vec<&str> = rows.iter().map(|r| r.source).collect();
    sources.sort_unstable();
    sources.dedup();
    Figures {
        family,
        cases: rows.len(),
        sources: sources.len(),
        median_abs_error: round4(quantile(&abs, 0.5)),
        median_error: round4(quantile(&signed, 0.5)),
        low: round4(quantile(&ratios, tail)),
        high: round4(quantile(&ratios, 1.0 - tail)),
    }
}

/// The family of a validation row: its GPU's architecture (by e2e.toml's name, resolved as
/// `--gpu` resolves it), its engine and its model kind.
pub fn row_family(r: &Row) -> Result<Family, ModelError> {
    let name = if r.gpu == "a100-80gb" { "a100" } else { r.gpu.as_str() };
    let gpu = crate::hw::resolve_gpu_name(name)
        .and_then(|n| crate::hw::gpu(n).ok())
        .ok_or_else(|| ModelError::Input(format!("validation row {}: GPU {:?} is not in the catalog", r.id, r.gpu)))?;
    Ok(Family { gpu_arch: gpu.arch, engine: r.engine, model_kind: r.model_kind })
}

/// Whether a scored validation row is of today's releases, with a rate on both sides (an early
/// release's rows carry a calibration of their own, `Row::early_release`, and a plan predicts for
/// a current release unless told otherwise).
pub fn current_row(r: &Row) -> bool {
    r.predicted > 0.0 && r.measured > 0.0 && !r.early_release
}

/// Whether a validation row is one the table is computed from: a [`current_row`] of the test set
/// (the model was not fitted to it).
pub fn table_row(r: &Row) -> bool {
    r.set == crate::validate::Set::Test && current_row(r)
}

/// The tails tried, widest first: from `(1 - NOMINAL_COVERAGE) / 2` down to 0 by [`TAIL_STEP`].
fn tails() -> impl Iterator<Item = f64> {
    let widest = ((1.0 - NOMINAL_COVERAGE) / 2.0 / TAIL_STEP).round() as usize;
    (0..=widest).rev().map(|k| round4(k as f64 * TAIL_STEP))
}

/// The widest tail (narrowest interval) whose cross-validated coverage `cv` reaches the nominal
/// share, with that coverage; where none does, tail 0 (the extremes).
fn choose_tail(cv: &dyn Fn(f64) -> f64) -> (f64, f64) {
    let mut last = (0.0, 0.0);
    for tail in tails() {
        last = (tail, cv(tail));
        if last.1 >= NOMINAL_COVERAGE {
            return last;
        }
    }
    last
}

/// The publications of `rows`, each once.
fn publications<'a>(rows: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut v: Vec<&str> = rows.collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The table of `rows` (validate's scored cases; those [`table_row`] takes) and of the
/// calibrated test rows of `calibrated`, each span chosen by leaving each publication out in turn
/// (the module's doc).
pub fn table(rows: &[Row], calibrated: &crate::validate::CalibratedValidation) -> Result<IntervalTable, ModelError> {
    let raw = raw_table(rows)?;
    let same: Vec<Resid> = calibrated
        .rows
        .iter()
        .filter(|r| r.set == crate::validate::Set::Test && r.measured > 0.0 && r.predicted > 0.0)
        .map(|r| Resid { source: &r.source_key, measured: r.measured, predicted: r.predicted })
        .collect();
    let other: Vec<Resid> = calibrated
        .other_plans
        .iter()
        .map(|o| &o.row)
        .filter(|r| r.set == crate::validate::Set::Test && r.measured > 0.0 && r.predicted > 0.0)
        .map(|r| Resid { source: &r.source_key, measured: r.measured, predicted: r.predicted })
        .collect();
    let same_deployment = calibrated_figures(&same, "calibrated on one concurrency")?;
    let other_deployments = calibrated_figures(&other, "carried to another deployment")?;
    Ok(IntervalTable { calibrated: CalibratedTable { same_deployment, other_deployments }, ..raw })
}

/// The raw part of [`table`] (its calibrated spans empty).
fn raw_table(rows: &[Row]) -> Result<IntervalTable, ModelError> {
    let mut usable: Vec<(Family, Resid)> = Vec::new();
    for r in rows.iter().filter(|r| table_row(r)) {
        usable.push((row_family(r)?, Resid::of(r)));
    }
    if usable.is_empty() {
        return Err(ModelError::Input("no scored test-set case: the interval table needs at least one".into()));
    }
    let (tail, cv) = choose_tail(&|t| cross_validated(&usable, t));
    Ok(IntervalTable { cross_validated_coverage: round4(cv), ..table_at(&usable, tail) })
}

/// [`figures`] with a span centred on the prediction in log terms: from `1/q` to `q`, where
/// `ln q` is the `1 - 2 tail` quantile of |ln(measured / predicted)|. A calibration removes a
/// deployment's offset, so its errors' sign is not the table's to carry (the test set's calibrated
/// rows lean to under-prediction, a median of -8.7% over 17 publications; the holdout's misses
/// lean the other way, HOLDOUT.md look 57).
fn centred_figures(rows: &[Resid], tail: f64) -> Figures {
    let mut logs: Vec<f64> = rows.iter().map(|r| r.ratio().ln().abs()).collect();
    logs.sort_by(f64::total_cmp);
    let q = quantile(&logs, 1.0 - 2.0 * tail).exp();
    Figures { low: round4(1.0 / q), high: round4(q), ..figures(None, rows, tail) }
}

/// The pooled span of calibrated rows ([`centred_figures`]), its tail chosen by leaving
/// publications out.
fn calibrated_figures(rows: &[Resid], what: &str) -> Result<CalibratedFigures, ModelError> {
    if rows.is_empty() {
        return Err(ModelError::Input(format!("no test-set row {what}: the interval table needs at least one")));
    }
    let cv = |tail: f64| {
        let mut inside = 0usize;
        for s in publications(rows.iter().map(|r| r.source)) {
            let rest: Vec<Resid> = rows.iter().filter(|r| r.source != s).copied().collect();
            if rest.is_empty() {
                continue;
            }
            let f = centred_figures(&rest, tail);
            inside += rows.iter().filter(|r| r.source == s && (f.low..=f.high).contains(&r.ratio())).count();
        }
        inside as f64 / rows.len() as f64
    };
    let (tail, coverage) = choose_tail(&cv);
    Ok(CalibratedFigures { tail, cross_validated_coverage: round4(coverage), figures: centred_figures(rows, tail) })
}

/// The raw table of `usable` rows at `tail` (its cross-validated coverage left at 0, its
/// calibrated spans empty).
fn table_at(usable: &[(Family, Resid)], tail: f64) -> IntervalTable {
    let mut keyed: Vec<(String, Family, Resid)> = usable.iter().map(|(f, r)| (f.words(), *f, *r)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    let mut families = Vec::new();
    for chunk in keyed.chunk_by(|a, b| a.0 == b.0) {
        let rows: Vec<Resid> = chunk.iter().map(|(_, _, r)| *r).collect();
        families.push(figures(Some(chunk[0].1), &rows, tail));
    }
    let all: Vec<Resid> = usable.iter().map(|(_, r)| *r).collect();
    let empty = CalibratedFigures { tail, cross_validated_coverage: 0.0, figures: figures(None, &[], tail) };
    IntervalTable {
        schema: SCHEMA.into(),
        generated_by: COMMAND.into(),
        coverage: NOMINAL_COVERAGE,
        tail,
        cross_validated_coverage: 0.0,
        min_cases: MIN_CASES,
        min_sources: MIN_SOURCES,
        pooled: figures(None, &all, tail),
        families,
        calibrated: CalibratedTable { same_deployment: empty.clone(), other_deployments: empty },
    }
}

/// The share of `usable` rows inside the interval of the table made at `tail` from the other
/// publications' rows (each publication left out in turn).
fn cross_validated(usable: &[(Family, Resid)], tail: f64) -> f64 {
    // Whether a family has figures of its own is decided on all the rows, as `plan` sees the
    // table; leaving one publication out only changes the figures, not which ones a row gets.
    let full = table_at(usable, tail);
    let own = |f: Family| full.families.iter().any(|x| x.family == Some(f) && x.cases >= full.min_cases && x.sources >= full.min_sources);
    let mut inside = 0usize;
    for s in publications(usable.iter().map(|(_, r)| r.source)) {
        let rest: Vec<(Family, Resid)> = usable.iter().filter(|(_, r)| r.source != s).copied().collect();
        if rest.is_empty() {
            continue;
        }
        let t = table_at(&rest, tail);
        inside += usable
            .iter()
            .filter(|(_, r)| r.source == s)
            .filter(|(f, r)| {
                // The family's figures from the other publications where it has its own (and the
                // others hold some of its rows), else the pooled ones.
                let fig = t.families.iter().find(|x| x.family == Some(*f)).filter(|_| own(*f)).unwrap_or(&t.pooled);
                (fig.low..=fig.high).contains(&r.ratio())
            })
            .count();
    }
    inside as f64 / usable.len() as f64
}

/// The committed table (embedded at build time).
pub fn committed() -> &'static IntervalTable {
    static TABLE: OnceLock<IntervalTable> = OnceLock::new();
    // Part of the crate and unit-tested: a parse failure is a build bug, not an input error.
    TABLE.get_or_init(|| {
        serde_json::from_str(include_str!("../data/validation/intervals.json"))
            .expect("crates/model/data/validation/intervals.json is valid (unit-tested)")
    })
}

/// What an interval's figures come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// The raw model's errors on the test set, by family.
    Raw,
    /// A calibrated deployment at its other concurrencies.
    CalibratedSameDeployment,
    /// A calibration carried to another deployment (another plan or GPU count).
    CalibratedOtherDeployment,
}

/// The interval a prediction of a family carries.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Interval {
    /// The family looked up.
    pub family: Family,
    /// What the figures come from.
    pub basis: Basis,
    /// Whether the figures pool every family (a raw family with fewer than [`MIN_CASES`] cases or
    /// [`MIN_SOURCES`] publications, and every calibrated interval).
    pub pooled: bool,
    /// The cases the figures come from.
    pub cases: usize,
    /// The share of measurements the interval is meant to hold.
    pub coverage: f64,
    /// Low end as a factor of the prediction.
    pub low: f64,
    /// High end as a factor of the prediction.
    pub high: f64,
    /// The median |error| of those cases: differences smaller than this are ties.
    pub median_abs_error: f64,
}

impl Interval {
    /// The interval of a rate, (low, high).
    pub fn of(&self, rate: f64) -> (f64, f64) {
        (rate * self.low, rate * self.high)
    }

    /// Where the figures come from, in words.
    pub fn source_words(&self) -> String {
        match self.basis {
            Basis::CalibratedSameDeployment => format!(
                "calibrated: the errors of {} validation test-set cases calibrated on one concurrency of their deployment and scored at the others, every family pooled",
                self.cases
            ),
            Basis::CalibratedOtherDeployment => format!(
                "calibrated on another plan: the errors of {} validation test-set cases priced with the calibration of another deployment of theirs, every family pooled",
                self.cases
            ),
            Basis::Raw if self.pooled => format!(
                "{} has fewer than {MIN_CASES} validation test-set cases or fewer than {MIN_SOURCES} sources, so all {} test-set cases pooled",
                self.family.words(),
                self.cases
            ),
            Basis::Raw => format!("{} validation test-set cases of {}", self.cases, self.family.words()),
        }
    }
}

/// The raw interval of `family` from `t`: its own figures, or the pooled ones when it has fewer
/// than the table's `min_cases` or `min_sources`.
pub fn lookup(t: &IntervalTable, family: Family) -> Interval {
    let own = t.families.iter().find(|f| f.family == Some(family) && f.cases >= t.min_cases && f.sources >= t.min_sources);
    let f = own.unwrap_or(&t.pooled);
    Interval {
        family,
        basis: Basis::Raw,
        pooled: own.is_none(),
        cases: f.cases,
        coverage: t.coverage,
        low: f.low,
        high: f.high,
        median_abs_error: f.median_abs_error,
    }
}

/// The calibrated interval from `t`: of the calibrated deployment itself, or of another
/// deployment priced with its calibration (`other`).
pub fn lookup_calibrated(t: &IntervalTable, family: Family, other: bool) -> Interval {
    let (c, basis) = if other {
        (&t.calibrated.other_deployments, Basis::CalibratedOtherDeployment)
    } else {
        (&t.calibrated.same_deployment, Basis::CalibratedSameDeployment)
    };
    Interval {
        family,
        basis,
        pooled: true,
        cases: c.figures.cases,
        coverage: t.coverage,
        low: c.figures.low,
        high: c.figures.high,
        median_abs_error: c.figures.median_abs_error,
    }
}

/// The committed interval of a scenario: the raw family's, or, where its engine was calibrated on
/// a measurement (`Scenario::calibrated_on`), the calibrated one of that plan or of another.
pub fn for_scenario(s: &Scenario) -> Interval {
    let family = Family::of(s);
    match s.calibrated_on {
        Some(plan) => lookup_calibrated(committed(), family, plan != s.plan),
        None => lookup(committed(), family),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_table_parses_and_its_families_are_sorted_and_distinct() {
        let t = committed();
        assert_eq!(t.schema, SCHEMA);
        assert!(t.pooled.cases >= t.families.iter().map(|f| f.cases).max().unwrap_or(0));
        assert_eq!(t.families.iter().map(|f| f.cases).sum::<usize>(), t.pooled.cases);
        let words: Vec<String> = t.families.iter().filter_map(|f| f.family.map(|x| x.words())).collect();
        assert!(words.windows(2).all(|w| w[0] < w[1]), "{words:?}");
        assert!(t.families.iter().chain([&t.pooled]).all(|f| f.low <= f.high && f.low > 0.0), "{t:?}");
        // Each span reaches the nominal share with each publication left out (or is the extremes).
        for (tail, cv) in [
            (t.tail, t.cross_validated_coverage),
            (t.calibrated.same_deployment.tail, t.calibrated.same_deployment.cross_validated_coverage),
            (t.calibrated.other_deployments.tail, t.calibrated.other_deployments.cross_validated_coverage),
        ] {
            assert!(cv >= t.coverage || tail == 0.0, "{t:?}");
        }
        assert!(t.calibrated.same_deployment.figures.cases > 0 && t.calibrated.other_deployments.figures.cases > 0);
    }

    /// A test-set row of publication `source` measuring `ratio` times its prediction.
    fn row(source: &str, gpu: &str, ratio: f64) -> Row {
        Row {
            id: format!("{source}-{ratio}"),
            set: crate::validate::Set::Test,
            source_key: source.into(),
            gpu: gpu.into(),
            engine: EngineName::Vllm,
            concurrency: 8,
            running: 8,
            measure: crate::validate::Measure::OutputTokS,
            measured: 100.0 * ratio,
            predicted: 100.0,
            predicted_steady: 100.0,
            virtual_run: false,
            workload: String::new(),
            error: 1.0 / ratio - 1.0,
            tpot_measured_ms: None,
            tpot_predicted_ms: 10.0,
            ttft_measured_ms: None,
            ttft_predicted_ms: 100.0,
            note: String::new(),
            early_release: false,
            aic_predicted: None,
            aic_error: None,
            model_kind: ModelKind::Dense,
        }
    }

    /// Publications whose rows share an offset: the 10% tail holds far fewer of a left-out
    /// publication's rows than 80%, so the table widens until leaving each publication out holds
    /// the nominal share, and no further.
    #[test]
    fn the_tail_is_the_widest_whose_leave_one_publication_out_coverage_reaches_the_nominal_share() {
        let mut rows = Vec::new();
        // 20 publications, offsets 0.60 to 1.55 apart by 0.05, three rows each.
        for i in 0..20 {
            for j in 0..3 {
                rows.push(row(&format!("pub-{i}"), "h100-sxm", (0.6 + 0.05 * i as f64) * (1.0 + 0.005 * j as f64)));
            }
        }
        let t = raw_table(&rows).expect("a table");
        assert!(t.cross_validated_coverage >= NOMINAL_COVERAGE, "{t:?}");
        let usable: Vec<(Family, Resid)> = rows.iter().map(|r| (row_family(r).expect("in the catalog"), Resid::of(r))).collect();
        assert!((cross_validated(&usable, t.tail) - t.cross_validated_coverage).abs() < 1e-4);
        let wider_tail = round4(t.tail + TAIL_STEP);
        assert!(wider_tail > (1.0 - NOMINAL_COVERAGE) / 2.0 + 1e-9 || cross_validated(&usable, wider_tail) < NOMINAL_COVERAGE, "{t:?}");
        assert!(t.tail < 0.1, "the offsets need a wider interval than the 10% tail: {t:?}");
        // The family's own figures (20 publications, 60 rows) at that tail.
        let own = lookup(&t, row_family(&rows[0]).expect("family"));
        assert!(!own.pooled && own.low < 0.7 && own.high > 1.45, "{own:?}");
        // Six publications with offsets of their own: a left-out extreme is outside any table
        // the others make, so no tail reaches 80% and the table spans the extremes, saying so.
        let apart: Vec<Row> = (0..6)
            .flat_map(|i| (0..4).map(move |j| row(&format!("p{i}"), "h100-sxm", (0.7 + 0.1 * i as f64) * (1.0 + 0.001 * j as f64))))
            .collect();
        let apart = raw_table(&apart).expect("a table");
        assert_eq!(apart.tail, 0.0, "{apart:?}");
        assert!(apart.cross_validated_coverage < NOMINAL_COVERAGE && apart.pooled.low == 0.7, "{apart:?}");
    }

    /// A calibrated scenario carries the calibrated interval of its own plan, and another plan
    /// priced with that calibration the interval of calibrations carried to another deployment;
    /// both are centred on the prediction and narrower than the raw pooled one.
    #[test]
    fn a_calibrated_plan_and_another_plan_under_its_calibration_carry_the_calibrated_intervals() {
        let mut s = crate::predict::tests::scenario("glm-5", crate::quant::Dtype::Nvfp4, "rtx-pro-6000-se", "pcie-host-staged", 8, 8);
        assert_eq!(for_scenario(&s).basis, Basis::Raw);
        s.calibrated_on = Some(s.plan);
        let same = for_scenario(&s);
        let t = committed();
        assert_eq!(
            (same.basis, same.pooled, same.cases),
            (Basis::CalibratedSameDeployment, true, t.calibrated.same_deployment.figures.cases)
        );
        assert!(same.source_words().starts_with("calibrated:"), "{}", same.source_words());
        let other = for_scenario(&crate::predict::Scenario { plan: crate::predict::Plan { tp: 4, pp: 2, ..s.plan }, ..s.clone() });
        assert_eq!(other.basis, Basis::CalibratedOtherDeployment);
        assert!(other.source_words().contains("another plan"), "{}", other.source_words());
        for i in [&same, &other] {
            assert!((i.low * i.high - 1.0).abs() < 1e-3, "centred in log terms: {i:?}");
            assert!(i.low < 1.0 && i.high > 1.0);
        }
        assert!(same.high - same.low < t.pooled.high - t.pooled.low, "{same:?} against {:?}", t.pooled);
    }

    #[test]
    fn quantiles_interpolate_between_order_statistics() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile(&v, 0.5), 3.0);
        assert_eq!(quantile(&v, 0.1), 1.4);
        assert_eq!(quantile(&v, 0.9), 4.6);
        assert_eq!(quantile(&[7.0], 0.9), 7.0);
    }

    #[test]
    fn a_small_family_falls_back_to_the_pooled_figures_and_says_so() {
        let t = committed();
        let rare = Family { gpu_arch: Arch::Ada, engine: EngineName::Trtllm, model_kind: ModelKind::Moe };
        let small = t.families.iter().find(|f| f.family == Some(rare)).map_or(0, |f| f.cases);
        assert!(small < MIN_CASES, "the test needs a family with few cases");
        let i = lookup(t, rare);
        assert!(i.pooled && i.cases == t.pooled.cases && i.low == t.pooled.low);
        assert!(i.source_words().contains("pooled"), "{}", i.source_words());
        if let Some(big) = t.families.iter().find(|f| f.cases >= MIN_CASES && f.sources >= MIN_SOURCES) {
            let i = lookup(t, big.family.expect("a family"));
            assert!(!i.pooled && i.cases == big.cases && i.high == big.high);
        }
    }

    /// A family with enough cases from too few publications takes the pooled figures too: its
    /// cases would show one publication's offset, not the family's spread.
    #[test]
    fn a_family_from_too_few_publications_falls_back_to_the_pooled_figures() {
        let t = committed();
        assert_eq!(t.min_sources, MIN_SOURCES);
        let narrow = t.families.iter().find(|f| f.cases >= MIN_CASES && f.sources < MIN_SOURCES).expect("such a family in the table");
        let i = lookup(t, narrow.family.expect("a family"));
        assert!(i.pooled && i.cases == t.pooled.cases && i.low == t.pooled.low, "{i:?}");
        assert!(i.source_words().contains(&format!("fewer than {MIN_SOURCES} sources")), "{}", i.source_words());
    }
}
