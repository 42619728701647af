//! Service-level objectives, `METRIC:pNN<TIME` (`ttft:p99<2s,tpot:p90<50ms`): bench judges a
//! measured run by them, plan a predicted one, and a campaign states its goal with them.

use serde::Serialize;

use crate::{bad, parse_duration, InputError};

/// Which latency an SLO bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SloMetric {
    /// Time to first token.
    Ttft,
    /// Time per output token after the first.
    Tpot,
    /// Inter-token latency.
    Itl,
    /// End-to-end request latency.
    E2e,
}

impl SloMetric {
    /// Every metric, in the order help texts list them.
    pub const ALL: [SloMetric; 4] = [SloMetric::Ttft, SloMetric::Tpot, SloMetric::Itl, SloMetric::E2e];

    /// The lower-case name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            SloMetric::Ttft => "ttft",
            SloMetric::Tpot => "tpot",
            SloMetric::Itl => "itl",
            SloMetric::E2e => "e2e",
        }
    }
}

/// One objective: the `percentile` of `metric` must stay below `threshold_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Slo {
    /// The latency bounded.
    pub metric: SloMetric,
    /// Which percentile, 0 < p <= 100.
    pub percentile: f64,
    /// The bound, in milliseconds.
    pub threshold_ms: f64,
}

impl Slo {
    /// Whether `value_ms` (that percentile of the metric) meets the objective.
    pub fn met_by(&self, value_ms: f64) -> bool {
        value_ms < self.threshold_ms
    }
}

impl std::fmt::Display for Slo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:p{}<{}ms", self.metric.name(), self.percentile, self.threshold_ms)
    }
}

/// Parses a comma-separated list of objectives given to `flag`, e.g. `ttft:p99<2s,tpot:p90<50ms`:
/// each bound with a unit, each percentile of a metric once.
pub fn parse_slos(flag: &str, s: &str) -> Result<Vec<Slo>, InputError> {
    parse_list(flag, s, true)
}

/// [`parse_slos`] as releases before stop 64 took objectives: a bound without a unit in seconds,
/// a percentile bounded twice kept. For objectives already stored (a campaign's goal in its
/// journal), which must read as they were written.
pub fn parse_slos_stored(flag: &str, s: &str) -> Result<Vec<Slo>, InputError> {
    parse_list(flag, s, false)
}

fn parse_list(flag: &str, s: &str, strict: bool) -> Result<Vec<Slo>, InputError> {
    let out = s.split(',').map(str::trim).filter(|p| !p.is_empty()).map(|p| parse_one(flag, p, strict)).collect::<Result<Vec<_>, _>>()?;
    if out.is_empty() {
        return Err(bad(format!("{flag} is empty: write METRIC:pNN<TIME, e.g. ttft:p99<2s")));
    }
    if strict {
        for (i, a) in out.iter().enumerate() {
            if let Some(b) = out[..i].iter().find(|b| b.metric == a.metric && b.percentile == a.percentile) {
                return Err(bad(format!(
                    "{flag}: {}:p{} is bounded twice ({b} and {a}); give each percentile of a metric once",
                    a.metric.name(),
                    a.percentile
                )));
            }
        }
    }
    Ok(out)
}

fn parse_one(flag: &str, part: &str, strict: bool) -> Result<Slo, InputError> {
    let hint = "write METRIC:pNN<TIME, e.g. ttft:p99<2s,tpot:p90<50ms (metrics: ttft, tpot, itl, e2e)";
    let (metric, rest) = part.split_once(':').ok_or_else(|| bad(format!("{flag} {part:?}: {hint}")))?;
    let metric = SloMetric::ALL
        .into_iter()
        .find(|m| m.name() == metric.trim())
        .ok_or_else(|| bad(format!("{flag} {part:?}: unknown SLO metric {:?}; known: ttft, tpot, itl, e2e", metric.trim())))?;
    let (p, t) = rest.split_once('<').ok_or_else(|| bad(format!("{flag} {part:?}: {hint}")))?;
    let p = p.trim();
    let percentile: f64 = p
        .strip_prefix('p')
        .and_then(|x| x.parse().ok())
        .filter(|x: &f64| *x > 0.0 && *x <= 100.0)
        .ok_or_else(|| bad(format!("{flag} {part:?}: {p:?} is not a percentile like p50, p99 or p99.9")))?;
    let t = t.trim();
    if strict && !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(bad(format!("{flag} {part:?}: {t:?} has no unit; write {t}ms or {t}s")));
    }
    let threshold = parse_duration(flag, t)?;
    Ok(Slo { metric, percentile, threshold_ms: threshold.as_secs_f64() * 1e3 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_objectives_parses_in_order() {
        let v = parse_slos("--slo", "ttft:p99<2s, tpot:p90<50ms").expect("valid");
        assert_eq!(
            v,
            vec![
                Slo { metric: SloMetric::Ttft, percentile: 99.0, threshold_ms: 2000.0 },
                Slo { metric: SloMetric::Tpot, percentile: 90.0, threshold_ms: 50.0 },
            ]
        );
        assert!(v[1].met_by(49.9) && !v[1].met_by(50.0));
    }

    #[test]
    fn a_bound_without_a_unit_or_a_percentile_bounded_twice_is_refused_saying_so() {
        let e = parse_slos("--slo", "tpot:p50<2").expect_err("no unit");
        assert!(e.0.contains("\"2\" has no unit; write 2ms or 2s"), "{e}");
        let e = parse_slos("--slo", "tpot:p50<2s,tpot:p50<1s").expect_err("twice");
        assert!(e.0.contains("tpot:p50 is bounded twice"), "{e}");
        // Two percentiles of one metric are two objectives.
        assert_eq!(parse_slos("--slo", "tpot:p50<20ms,tpot:p99<50ms").expect("two").len(), 2);
        // What an older release stored reads as it was written: seconds, and both bounds.
        let stored = parse_slos_stored("--goal", "tpot:p90<0.05,tpot:p90<1s").expect("stored");
        assert_eq!(stored.iter().map(|s| s.threshold_ms).collect::<Vec<_>>(), [50.0, 1000.0]);
    }

    #[test]
    fn malformed_objectives_name_the_flag_and_the_part() {
        for s in ["", "ttft", "lat:p99<1s", "ttft:99<1s", "ttft:p0<1s", "ttft:p99<fast", "tpot:p50<2", "tpot:p50<2s,tpot:p50<1s"] {
            let e = parse_slos("--goal", s).expect_err(s);
            assert!(e.0.contains("--goal"), "{e}");
        }
    }
}
