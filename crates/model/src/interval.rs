//! How far a prediction may be off: intervals from the validation residuals of its family (GPU
//! architecture x engine x model kind), the committed table of them
//! (`crates/model/data/validation/intervals.json`), and the lookup for a scenario.
//!
//! The table is computed from `plan --validate`'s test-set rows: an interval describes the error
//! on deployments the model was not fitted to, and the fit set's rows are the ones it was fitted
//! to (until stop 61 both sets were pooled, which the frozen holdout's out-of-sample count showed
//! too narrow: 49% of its measurements inside the 80% interval, HOLDOUT.md look 49). No constant
//! of the model is chosen from it. Regenerate it with
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
    /// The [`LOW_QUANTILE`] quantile of measured / predicted: the interval's low end as a factor
    /// of a prediction.
    pub low: f64,
    /// The [`HIGH_QUANTILE`] quantile of measured / predicted: the interval's high end.
    pub high: f64,
}

/// The committed table: `crates/model/data/validation/intervals.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalTable {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The command that writes it.
    pub generated_by: String,
    /// The share of measurements an interval is meant to hold (between the two quantiles).
    pub coverage: f64,
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
}

/// The table's schema and version.
pub const SCHEMA: &str = "servetune.intervals/1";
/// The quantile of measured / predicted an interval starts at.
pub const LOW_QUANTILE: f64 = 0.1;
/// The quantile it ends at.
pub const HIGH_QUANTILE: f64 = 0.9;
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

fn figures(family: Option<Family>, rows: &[&Row]) -> Figures {
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let ratios = sorted(rows.iter().map(|r| r.measured / r.predicted).collect());
    let abs = sorted(rows.iter().map(|r| r.error.abs()).collect());
    let signed = sorted(rows.iter().map(|r| r.error).collect());
    let mut sources: Vec<&str> = rows.iter().map(|r| r.source_key.as_str()).collect();
    sources.sort_unstable();
    sources.dedup();
    Figures {
        family,
        cases: rows.len(),
        sources: sources.len(),
        median_abs_error: round4(quantile(&abs, 0.5)),
        median_error: round4(quantile(&signed, 0.5)),
        low: round4(quantile(&ratios, LOW_QUANTILE)),
        high: round4(quantile(&ratios, HIGH_QUANTILE)),
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

/// The table of `rows` (validate's scored cases; those [`table_row`] takes).
pub fn table(rows: &[Row]) -> Result<IntervalTable, ModelError> {
    let usable: Vec<&Row> = rows.iter().filter(|r| table_row(r)).collect();
    if usable.is_empty() {
        return Err(ModelError::Input("no scored test-set case: the interval table needs at least one".into()));
    }
    let mut keyed: Vec<(String, Family, &Row)> = Vec::new();
    for r in &usable {
        let f = row_family(r)?;
        keyed.push((f.words(), f, r));
    }
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    let mut families = Vec::new();
    for chunk in keyed.chunk_by(|a, b| a.0 == b.0) {
        let rows: Vec<&Row> = chunk.iter().map(|(_, _, r)| *r).collect();
        families.push(figures(Some(chunk[0].1), &rows));
    }
    Ok(IntervalTable {
        schema: SCHEMA.into(),
        generated_by: COMMAND.into(),
        coverage: round4(HIGH_QUANTILE - LOW_QUANTILE),
        min_cases: MIN_CASES,
        min_sources: MIN_SOURCES,
        pooled: figures(None, &usable),
        families,
    })
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

/// The interval a prediction of a family carries.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Interval {
    /// The family looked up.
    pub family: Family,
    /// Whether the family had fewer than [`MIN_CASES`] cases, so the pooled figures are used.
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
        if self.pooled {
            format!(
                "{} has fewer than {MIN_CASES} validation test-set cases or fewer than {MIN_SOURCES} sources, so all {} test-set cases pooled",
                self.family.words(),
                self.cases
            )
        } else {
            format!("{} validation test-set cases of {}", self.cases, self.family.words())
        }
    }
}

/// The interval of `family` from `t`: its own figures, or the pooled ones when it has fewer than
/// the table's `min_cases`.
pub fn lookup(t: &IntervalTable, family: Family) -> Interval {
    let own = t.families.iter().find(|f| f.family == Some(family) && f.cases >= t.min_cases && f.sources >= t.min_sources);
    let f = own.unwrap_or(&t.pooled);
    Interval {
        family,
        pooled: own.is_none(),
        cases: f.cases,
        coverage: t.coverage,
        low: f.low,
        high: f.high,
        median_abs_error: f.median_abs_error,
    }
}

/// The committed interval of a scenario's family.
pub fn for_scenario(s: &Scenario) -> Interval {
    lookup(committed(), Family::of(s))
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
