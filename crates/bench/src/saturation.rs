//! Finds the knee of a sweep: the load from which throughput stops growing, with the evidence.

use serde::Serialize;

use servetune_stats::{knee, LoadPoint};

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
    /// The finding in words.
    pub evidence: String,
}

/// The knee of the sweep by the one saturation rule ([`servetune_stats::knee`], shared with
/// `plan`), with the evidence: plateau throughput and how TTFT grew beyond it. `None` when the
/// sweep has fewer than 2 points or throughput still rises at the last point.
pub fn find(runs: &[RunReport]) -> Option<Saturation> {
    let points: Vec<LoadPoint> =
        runs.iter().map(|r| LoadPoint { load: load_key(r), output_tokens_per_s: r.throughput.output_tokens_per_s }).collect();
    let k = &runs[knee(&points)?];
    let mut beyond: Vec<&RunReport> = runs.iter().filter(|r| load_key(r) >= load_key(k)).collect();
    beyond.sort_by(|a, b| load_key(a).total_cmp(&load_key(b)));
    let last = *beyond.last()?;
    let tput = |r: &RunReport| r.throughput.output_tokens_per_s;
    let plateau = beyond.iter().map(|r| tput(r)).fold(0.0, f64::max);
    let t0 = k.latency_ms.ttft.p99;
    let growth = if t0 > 0.0 { last.latency_ms.ttft.p99 / t0 } else { 0.0 };
    let spread = beyond.iter().map(|r| (tput(r) / tput(k).max(1e-9) - 1.0).abs() * 100.0).fold(0.0, f64::max);
    let evidence = format!(
        "throughput plateaus at {plateau:.0} tok/s from {}; beyond it TTFT p99 grows {growth:.1}x ({:.0} ms to {:.0} ms at {}) while output throughput stays within {spread:.0}% of {:.0} tok/s",
        load_words(k),
        t0,
        last.latency_ms.ttft.p99,
        load_words(last),
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

fn load_words(r: &RunReport) -> String {
    match (r.concurrency, r.rate) {
        (Some(c), _) => format!("concurrency {c}"),
        (_, Some(x)) => format!("rate {x} req/s"),
        _ => r.label.clone(),
    }
}

fn load_key(r: &RunReport) -> f64 {
    r.concurrency.map(f64::from).or(r.rate).unwrap_or(0.0)
}
