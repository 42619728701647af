//! Prometheus text exposition of the simulator's state, in sglang's names (default) or vLLM's.
//! Names follow the servers' own documentation (docs/metrics.md lists them with their sources).

use std::fmt::Write;

use crate::driver::Published;
use crate::MetricsStyle;

/// Bucket bounds of time to first token, seconds (sglang's).
pub const TTFT_BUCKETS: &[f64] =
    &[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 25.0, 30.0];
/// Bucket bounds of inter-token latency, seconds.
pub const ITL_BUCKETS: &[f64] =
    &[0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5];
/// Bucket bounds of end-to-end latency, seconds.
pub const E2E_BUCKETS: &[f64] = &[0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 90.0, 120.0, 180.0, 300.0];
/// Bucket bounds of token emission lateness against the simulated step end, seconds.
pub const LATENESS_BUCKETS: &[f64] = &[0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05];

/// A cumulative-bucket histogram in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    /// Sum of observations, seconds.
    pub sum: f64,
    /// Observations.
    pub count: u64,
}

impl Histogram {
    /// An empty histogram over bucket upper bounds `bounds` (seconds, ascending).
    pub fn new(bounds: &'static [f64]) -> Self {
        Self { bounds, counts: vec![0; bounds.len()], sum: 0.0, count: 0 }
    }

    /// Records one value, seconds.
    pub fn observe(&mut self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|b| v <= *b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }

    /// Share of observations at or below `bound` (one of the bucket bounds).
    pub fn fraction_le(&self, bound: f64) -> f64 {
        if self.count == 0 {
            return 1.0;
        }
        let n: u64 = self.bounds.iter().zip(&self.counts).filter(|(b, _)| **b <= bound).map(|(_, c)| *c).sum();
        n as f64 / self.count as f64
    }

    fn render(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            cum += c;
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\",{labels}}} {cum}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\",{labels}}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

fn gauge(out: &mut String, kind: &str, name: &str, help: &str, labels: &str, v: f64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{labels}}} {v}");
}

/// Renders the exposition text.
pub fn render(p: &Published, style: MetricsStyle, model: &str) -> String {
    let mut o = String::with_capacity(8192);
    let labels = format!("model_name=\"{}\"", model.replace('"', "'"));
    let s = &p.stats;
    let kv = if s.kv_total_pages > 0 { s.kv_used_pages as f64 / s.kv_total_pages as f64 } else { 0.0 };
    match style {
        MetricsStyle::Sglang => {
            gauge(&mut o, "gauge", "sglang:num_running_reqs", "The number of running requests.", &labels, s.running as f64);
            gauge(&mut o, "gauge", "sglang:num_queue_reqs", "The number of requests in the waiting queue.", &labels, s.queued as f64);
            gauge(&mut o, "gauge", "sglang:token_usage", "The token usage (fraction of the KV cache in use).", &labels, kv);
            gauge(&mut o, "gauge", "sglang:gen_throughput", "The generation throughput (token/s).", &labels, p.gen_throughput);
            gauge(
                &mut o,
                "counter",
                "sglang:num_retracted_reqs_total",
                "Requests retracted (preempted) for lack of KV cache.",
                &labels,
                s.preemptions as f64,
            );
            gauge(&mut o, "counter", "sglang:prompt_tokens_total", "Number of prefill tokens processed.", &labels, s.prompt_tokens as f64);
            gauge(
                &mut o,
                "counter",
                "sglang:generation_tokens_total",
                "Number of generation tokens processed.",
                &labels,
                s.generation_tokens as f64,
            );
            p.ttft.render(&mut o, "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", &labels);
            p.itl.render(&mut o, "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", &labels);
            p.e2e.render(&mut o, "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", &labels);
        }
        MetricsStyle::Vllm => {
            gauge(
                &mut o,
                "gauge",
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                &labels,
                s.running as f64,
            );
            gauge(&mut o, "gauge", "vllm:num_requests_waiting", "Number of requests waiting to be processed.", &labels, s.queued as f64);
            gauge(&mut o, "gauge", "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", &labels, kv);
            gauge(
                &mut o,
                "counter",
                "vllm:num_preemptions_total",
                "Cumulative number of preemption from the engine.",
                &labels,
                s.preemptions as f64,
            );
            gauge(&mut o, "counter", "vllm:prompt_tokens_total", "Number of prefill tokens processed.", &labels, s.prompt_tokens as f64);
            gauge(
                &mut o,
                "counter",
                "vllm:generation_tokens_total",
                "Number of generation tokens processed.",
                &labels,
                s.generation_tokens as f64,
            );
            p.ttft.render(&mut o, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", &labels);
            p.itl.render(&mut o, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", &labels);
            p.e2e.render(&mut o, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", &labels);
        }
    }
    p.lateness.render(&mut o, "servetune_sim_emit_lateness_seconds", "Token emission time minus the simulated step end.", &labels);
    gauge(&mut o, "gauge", "servetune_sim_emit_lateness_max_seconds", "Largest emission lateness so far.", &labels, p.lateness_max_s);
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        for v in [0.05, 0.5, 0.7, 5.0] {
            h.observe(v);
        }
        let mut s = String::new();
        h.render(&mut s, "x", "h", "m=\"a\"");
        assert!(s.contains("x_bucket{le=\"0.1\",m=\"a\"} 1\n"));
        assert!(s.contains("x_bucket{le=\"1\",m=\"a\"} 3\n"));
        assert!(s.contains("x_bucket{le=\"+Inf\",m=\"a\"} 4\n"));
        assert!((h.fraction_le(1.0) - 0.75).abs() < 1e-9);
    }

    #[test]
    fn both_styles_name_the_gauges() {
        let p = Published::default();
        let s = render(&p, MetricsStyle::Sglang, "m");
        assert!(s.contains("sglang:num_running_reqs{model_name=\"m\"} 0"));
        assert!(s.contains("sglang:num_queue_reqs"));
        let v = render(&p, MetricsStyle::Vllm, "m");
        assert!(v.contains("vllm:num_requests_waiting{model_name=\"m\"} 0"));
        assert!(v.contains("vllm:kv_cache_usage_perc"));
    }
}
