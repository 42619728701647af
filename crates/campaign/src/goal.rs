//! The campaign goal: `output_tok_s>=1000 at tpot:p90<50ms`: a throughput floor, optionally under
//! latency objectives in servetune-stats' SLO syntax.

use serde::{Deserialize, Serialize};
use servetune_stats::{parse_slos, Slo};

use crate::{CampaignError, Result};

/// A parsed goal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Goal {
    /// As written.
    pub text: String,
    /// Output tokens per second to reach.
    pub output_tok_s: f64,
    /// The latency part as written (`tpot:p90<50ms`), if any.
    pub slos: Option<String>,
}

const HOW: &str =
    "write it as output_tok_s>=N, optionally followed by ' at ' and latency objectives, e.g. 'output_tok_s>=1000 at tpot:p90<50ms'";

/// Parses `--goal`.
pub fn parse(s: &str) -> Result<Goal> {
    let bad = |what: String| CampaignError::Input(format!("--goal {s:?}: {what}; {HOW}"));
    let (tput, lat) = match s.split_once(" at ") {
        Some((a, b)) => (a.trim(), Some(b.trim())),
        None => (s.trim(), None),
    };
    let num = tput
        .strip_prefix("output_tok_s")
        .map(str::trim)
        .and_then(|r| r.strip_prefix(">="))
        .ok_or_else(|| bad(format!("{tput:?} is not a throughput floor")))?;
    let v: f64 = num.trim().parse().map_err(|_| bad(format!("{:?} is not a number", num.trim())))?;
    if !(v > 0.0 && v.is_finite()) {
        return Err(bad(format!("{v} tok/s is not a goal: give a positive number")));
    }
    if let Some(l) = lat {
        parse_slos("--goal", l).map_err(|e| CampaignError::Input(format!("{e}; {HOW}")))?;
    }
    Ok(Goal { text: s.trim().to_string(), output_tok_s: v, slos: lat.map(str::to_string) })
}

impl Goal {
    /// The latency objectives.
    pub fn slo_list(&self) -> Vec<Slo> {
        // The goal as stored: an older campaign's objectives read as it took them.
        self.slos.as_deref().and_then(|l| servetune_stats::parse_slos_stored("--goal", l).ok()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servetune_stats::SloMetric;

    #[test]
    fn parses_floor_and_objectives() {
        let g = parse("output_tok_s>=1000 at tpot:p90<50ms").expect("goal");
        assert_eq!(g.output_tok_s, 1000.0);
        assert_eq!(g.slo_list(), vec![Slo { metric: SloMetric::Tpot, percentile: 90.0, threshold_ms: 50.0 }]);
        assert_eq!(parse("output_tok_s >= 5").expect("plain").slos, None);
    }

    #[test]
    fn bad_goals_name_the_problem() {
        for (g, says) in [
            ("tok>=5", "not a throughput floor"),
            ("output_tok_s>=x", "not a number"),
            ("output_tok_s>=0", "positive"),
            ("output_tok_s>=5 at tpot<5", "--goal"),
        ] {
            let e = parse(g).expect_err(g).to_string();
            assert!(e.contains(says), "{g}: {e}");
        }
    }
}
