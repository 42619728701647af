//! Finds the knee of a sweep: the load from which throughput stops growing, with the evidence.

use serde::Serialize;

use crate::report::RunReport;

/// The saturation finding of a sweep.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Saturation {
    /// The best output throughput from the knee on.
    pub plateau_output_tokens_per_s: f64,
    /// Closed-loop sweeps: the concurrency at the knee.
    pub at_concurrency: Option<u32>,
    /// Open-loop sweeps: the rate at the knee.
    pub at_rate: Option<f64>,
    /// TTFT p99 at the last point over TTFT p99 at the knee.
    pub ttft_p99_growth: f64,
    pub evidence: String,
}

/// Throughput must grow by at least this fraction from one point to the next for the curve to count
/// as still rising (a doubling of load that buys under 10% more tokens is a plateau).
const MIN_GAIN: f64 = 0.10;

/// The knee is the first point whose throughput no later point beats by more than [`MIN_GAIN`].
/// `None` when the sweep has fewer than 2 points or throughput still rises at the last point.
pub fn find(runs: &[RunReport]) -> Option<Saturation> {
    if runs.len() < 2 {
        return None;
    }
    let mut pts: Vec<&RunReport> = runs.iter().collect();
    pts.sort_by(|a, b| load_key(a).total_cmp(&load_key(b)));
    let tput = |r: &RunReport| r.throughput.output_tokens_per_s;
    let knee = (0..pts.len() - 1).find(|&i| pts[i + 1..].iter().all(|r| tput(r) < tput(pts[i]) * (1.0 + MIN_GAIN)))?;
    let k = pts[knee];
    let last = pts[pts.len() - 1];
    let plateau = pts[knee..].iter().map(|r| tput(r)).fold(0.0, f64::max);
    let t0 = k.latency_ms.ttft.p99;
    let growth = if t0 > 0.0 { last.latency_ms.ttft.p99 / t0 } else { 0.0 };
    let at = match (k.concurrency, k.rate) {
        (Some(c), _) => format!("concurrency {c}"),
        (_, Some(r)) => format!("rate {r} req/s"),
        _ => k.label.clone(),
    };
    let beyond = match (last.concurrency, last.rate) {
        (Some(c), _) => format!("concurrency {c}"),
        (_, Some(r)) => format!("rate {r} req/s"),
        _ => last.label.clone(),
    };
    let evidence = format!(
        "throughput plateaus at {plateau:.0} tok/s from {at}; beyond it TTFT p99 grows {growth:.1}x ({:.0} ms to {:.0} ms at {beyond}) while output throughput stays within {:.0}% of {:.0} tok/s",
        t0,
        last.latency_ms.ttft.p99,
        pts[knee..].iter().map(|r| (tput(r) / tput(k).max(1e-9) - 1.0).abs() * 100.0).fold(0.0, f64::max),
        tput(k)
    );
    Some(Saturation {
        plateau_output_tokens_per_s: plateau,
        at_concurrency: k.concurrency,
        at_rate: k.rate,
        ttft_p99_growth: growth,
        evidence,
    })
}

fn load_key(r: &RunReport) -> f64 {
    r.concurrency.map(f64::from).or(r.rate).unwrap_or(0.0)
}
