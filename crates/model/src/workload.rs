//! What a benchmark client measures, as opposed to the steady decode rate: a closed-loop workload
//! (requests, concurrency, length distributions) and the figures a client would report for it
//! (output tok/s over the whole run, TTFT and TPOT percentiles), with the share of each effect
//! between the steady rate and the client's figure.
//!
//! The model does not run an engine: [`VirtualBench`] is the seam. `servetune-sim` implements it by
//! running its continuous-batching engine in virtual time with this model's step cost; `plan`
//! and `plan --validate` receive it from the caller (the CLI), so this crate never depends on the
//! simulator.

use serde::Serialize;
pub use servetune_stats::LengthDist;

use crate::predict::Scenario;

/// A closed-loop benchmark's workload, as `servetune bench` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Workload {
    /// Requests in the run; `None`: [`DEFAULT_REQUESTS_PER_CONCURRENCY`] x concurrency.
    pub requests: Option<u64>,
    /// Prompt lengths.
    pub input: LengthDist,
    /// Output lengths (forced, as a benchmark with `ignore_eos` does).
    pub output: LengthDist,
    /// Seed of the length draws.
    pub seed: u64,
}

/// Requests per unit of concurrency when a run's count is not given: InferenceX (InferenceMAX)
/// benchmarks run `--num-prompts $(( CONC * 10 ))` (its README, "Benchmark Client Configuration",
/// e.g. github.com/jyothisambolu/InferenceMAX README.md).
pub const DEFAULT_REQUESTS_PER_CONCURRENCY: u64 = 10;

impl Workload {
    /// Fixed lengths, the default request count.
    pub fn fixed(input: u32, output: u32) -> Self {
        Self { requests: None, input: LengthDist::Fixed { len: input.max(1) }, output: LengthDist::Fixed { len: output.max(1) }, seed: 0 }
    }

    /// Requests at `concurrency`: the given count, else 10 x concurrency; at least 1.
    pub fn requests_at(&self, concurrency: u32) -> u64 {
        self.requests.unwrap_or(DEFAULT_REQUESTS_PER_CONCURRENCY * concurrency.max(1) as u64).max(1)
    }
}

/// Mean and percentiles of one latency, ms.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Latency {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

impl Latency {
    /// Of a sample (servetune-stats' percentiles; zeros when empty).
    pub fn of(values: &[f64]) -> Self {
        let mut finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let mean = if finite.is_empty() { 0.0 } else { finite.iter().sum::<f64>() / finite.len() as f64 };
        // Sorted once here: each percentile's own sort of a sorted copy is one linear pass.
        finite.sort_by(f64::total_cmp);
        let p = |q| servetune_stats::percentile(&finite, q).unwrap_or(0.0);
        Self { mean, p50: p(50.0), p90: p(90.0), p99: p(99.0) }
    }
}

/// Where the client's run time went, as fractions of the run (they sum to 1), and how long
/// requests queued.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct ClientEffects {
    /// Decode at the full batch: the time the steady decode rate would need for the run's decode
    /// tokens.
    pub steady_decode: f64,
    /// Prefill: prefill passes, and prompt chunks inside decode steps.
    pub prefill: f64,
    /// Decode steps with fewer requests than the full batch (the ramp-up, the tail where fewer
    /// requests are left than the concurrency, and the gaps while replacements prefill), and
    /// context growth past the mean.
    pub ramp_tail: f64,
    /// Mean share of a request's latency spent waiting for admission (the running cap or the KV
    /// cache full); not a share of the run.
    pub queueing: f64,
}

/// What a client would measure for a workload at one concurrency.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClientRun {
    /// Requests run.
    pub requests: u64,
    /// Output tokens over the whole run's wall time (first request sent to last token).
    pub output_tokens_per_s: f64,
    /// Prompt and output tokens over the run's wall time.
    pub total_tokens_per_s: f64,
    /// Time to first token, ms.
    pub ttft_ms: Latency,
    /// Time per output token after the first, ms.
    pub tpot_ms: Latency,
    /// Virtual seconds the run took.
    pub seconds: f64,
    /// Requests that ran at once at most (per replica x replicas).
    pub peak_running: u32,
    /// The full batch the steady decode rate is taken at (min of concurrency and the cap).
    pub full_batch: u32,
    /// Decode tokens/s at the full batch and the mean context, without prefill.
    pub steady_decode_tokens_per_s: f64,
    /// Where the run's time went.
    pub effects: ClientEffects,
}

/// Runs a workload against a deployment in virtual time (implemented by `servetune-sim`).
pub trait VirtualBench: std::fmt::Debug + Sync {
    /// What a client would measure running `w` at `concurrency` against `s`.
    fn run(&self, s: &Scenario, w: &Workload, concurrency: u32) -> ClientRun;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_percentiles_come_from_the_sample() {
        let l = Latency::of(&[1.0, 2.0, 3.0, 4.0, 100.0]);
        assert_eq!(l.p50, 3.0);
        assert_eq!(l.mean, 22.0);
        assert!(l.p99 > 90.0 && l.p99 <= 100.0, "{}", l.p99);
        assert_eq!(Latency::of(&[]), Latency::default());
    }

    /// A bench that reports the concurrency and the workload's requests back, to see them arrive.
    #[derive(Debug)]
    struct Echo;

    impl VirtualBench for Echo {
        fn run(&self, _: &Scenario, w: &Workload, concurrency: u32) -> ClientRun {
            ClientRun {
                requests: w.requests_at(concurrency),
                output_tokens_per_s: concurrency as f64,
                total_tokens_per_s: 0.0,
                ttft_ms: Latency::default(),
                tpot_ms: Latency::default(),
                seconds: 1.0,
                peak_running: concurrency,
                full_batch: concurrency,
                steady_decode_tokens_per_s: 0.0,
                effects: ClientEffects::default(),
            }
        }
    }

    #[test]
    fn build_report_with_a_bench_puts_its_run_on_every_point_and_the_headline_follows_it() {
        use crate::request::{LinkSource, ModelSource, PlanRequest, ScenarioSpec};
        let mut spec = ScenarioSpec::new(ModelSource::Catalog("llama-3.1-8b".into()), "h100-sxm");
        spec.gpus = 1;
        spec.link = LinkSource::Catalog("nvlink".into());
        let mut req = PlanRequest::new(spec);
        req.concurrency = vec![1, 8];
        req.workload.requests = Some(7);
        let r = crate::build_report_with(&req, Some(&Echo)).expect("report");
        assert_eq!(r.workload, Some(req.workload));
        for p in &r.points {
            let c = p.client.expect("a client run per point");
            assert_eq!((c.requests, c.peak_running), (7, p.concurrency));
            assert_eq!(crate::report::headline_rate(p), p.concurrency as f64);
        }
        let plain = crate::build_report(&req).expect("report");
        assert!(plain.workload.is_none() && plain.points.iter().all(|p| p.client.is_none()));
        req.workload.requests = Some(0);
        let e = crate::build_report_with(&req, Some(&Echo)).expect_err("0 requests");
        assert!(e.to_string().contains("--requests 0"), "{e}");
    }

    #[test]
    fn the_default_request_count_is_ten_per_unit_of_concurrency() {
        let w = Workload::fixed(10, 10);
        assert_eq!(w.requests_at(64), 640);
        assert_eq!(Workload { requests: Some(5), ..w }.requests_at(64), 5);
    }
}
