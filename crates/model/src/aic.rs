//! NVIDIA AIConfigurator's own estimates for the validation cases, so `plan --validate` can score
//! it beside `plan` on the same cases. The estimates are data, made once by `scripts/aic-estimate`
//! (AIConfigurator 0.12.0, `aiconfigurator cli estimate`, offline) and kept in
//! `crates/model/data/validation/aiconfigurator.toml`; nothing here runs AIConfigurator.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::ModelError;

/// Where the estimates live, for messages and reports.
pub const AIC_PATH: &str = "crates/model/data/validation/aiconfigurator.toml";
const AIC: &str = include_str!("../data/validation/aiconfigurator.toml");

/// The tool and version the file holds estimates of.
pub const AIC_TOOL: &str = "NVIDIA AIConfigurator 0.12.0";

#[derive(Deserialize)]
struct File {
    estimate: Vec<Estimate>,
}

/// AIConfigurator's answer for one case.
#[derive(Debug, Clone, Deserialize)]
pub struct Estimate {
    /// The e2e.toml case id.
    pub id: String,
    /// Its estimate of the deployment's output tokens/s (absent when it gave none).
    pub output_tok_s: Option<f64>,
    /// Why it gave no estimate: its own error, or why the case could not be posed to it.
    pub refused: Option<String>,
}

impl Estimate {
    /// The estimate, when it is a usable rate.
    pub fn rate(&self) -> Option<f64> {
        self.output_tok_s.filter(|r| r.is_finite() && *r > 0.0)
    }
}

/// Every estimate by case id.
pub fn estimates() -> Result<HashMap<String, Estimate>, ModelError> {
    parse(AIC)
}

fn parse(text: &str) -> Result<HashMap<String, Estimate>, ModelError> {
    let f: File = toml::from_str(text).map_err(|e| ModelError::Input(format!("{AIC_PATH}: {e}")))?;
    Ok(f.estimate.into_iter().map(|e| (e.id.clone(), e)).collect())
}

/// `plan` and AIConfigurator on the cases of one set where AIConfigurator gave an estimate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct SideBySide {
    /// Scored cases of the set.
    pub scored: usize,
    /// Those with an AIConfigurator estimate.
    pub cases: usize,
    /// AIConfigurator's median |error| over them.
    pub aic_median_abs_error: f64,
    /// `plan`'s median |error| over the same cases.
    pub plan_median_abs_error: f64,
    /// Cases where `plan`'s |error| is the smaller.
    pub plan_closer: usize,
}

/// Compares `(plan error, AIConfigurator error)` pairs of a set's scored cases (`None` where
/// AIConfigurator gave no estimate).
pub fn side_by_side(errors: &[(f64, Option<f64>)]) -> SideBySide {
    let both: Vec<(f64, f64)> = errors.iter().filter_map(|(p, a)| a.map(|a| (p.abs(), a.abs()))).collect();
    let med = |xs: Vec<f64>| servetune_stats::median(&xs).unwrap_or(0.0);
    SideBySide {
        scored: errors.len(),
        cases: both.len(),
        aic_median_abs_error: med(both.iter().map(|b| b.1).collect()),
        plan_median_abs_error: med(both.iter().map(|b| b.0).collect()),
        plan_closer: both.iter().filter(|(p, a)| p < a).count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_estimates_parse_and_each_has_a_rate_or_a_reason() {
        let all = estimates().expect("aiconfigurator.toml parses");
        assert!(!all.is_empty());
        for e in all.values() {
            assert!(e.rate().is_some() != e.refused.is_some(), "{}: a rate or a refusal, not both or neither: {e:?}", e.id);
        }
    }

    #[test]
    fn side_by_side_scores_only_the_cases_with_an_estimate() {
        let s = side_by_side(&[(0.10, Some(-0.30)), (-0.50, Some(0.20)), (0.05, None), (0.30, Some(0.40))]);
        assert_eq!((s.scored, s.cases, s.plan_closer), (4, 3, 2));
        assert!((s.aic_median_abs_error - 0.30).abs() < 1e-12);
        assert!((s.plan_median_abs_error - 0.30).abs() < 1e-12);
    }

    #[test]
    fn a_broken_file_is_an_input_error_naming_it() {
        let e = parse("[[estimate]]\nid = 3\n").expect_err("id must be a string");
        assert!(e.to_string().contains(AIC_PATH), "{e}");
    }
}
