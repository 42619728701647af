//! Computes a run's report from its per-request records: latency summaries (corrected and
//! uncorrected for coordinated omission), throughput, steady state, achieved concurrency, goodput,
//! errors and warnings. Pure computation over [`RequestRecord`]s; rendering lives in `export`.
//!
//! Definitions (servetune's own; `definitions` renders the other tools'):
//! - TTFT: first chunk carrying an output token (content or reasoning; a role-only chunk is not one)
//!   minus the *intended* send time; `ttft_uncorrected` uses the actual send time.
//! - TTFC: first chunk carrying answer content minus the intended send time.
//! - ITL: gaps between consecutive token-carrying chunks (`itl`), and per token (`itl_per_token`:
//!   each gap divided over the tokens its chunk carried).
//! - TPOT: (last chunk - first chunk) / (output tokens - 1), requests with 2+ tokens.
//! - E2E: end of response minus intended send; `e2e_uncorrected` from the actual send.
//! - Schedule lag: actual minus intended send.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::record::{ErrorKind, RequestRecord, CHUNK_SLACK};
use crate::scrape::ServerMetrics;
use crate::selfcheck::ClientCheck;
use crate::spec::{Load, Slo, SloMetric};
use crate::stats::{Recorder, Summary};

/// Request counts.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RequestCounts {
    /// Measured requests that completed without an error.
    pub completed: u64,
    /// Measured requests that failed.
    pub failed: u64,
    /// Failed requests by kind (every kind present, zeros included).
    pub errors: BTreeMap<ErrorKind, u64>,
    /// Failed requests with an HTTP status other than 200, by that status.
    pub http_statuses: BTreeMap<u16, u64>,
    /// Warmup requests sent (excluded from every statistic).
    pub warmup: u64,
    /// Completed requests that returned fewer tokens than asked while `--ignore-eos` was set.
    pub stopped_early: u64,
    /// Completed requests whose server-reported token count differs from the chunk count.
    pub token_count_mismatches: u64,
    /// Token chunks past the per-request cap (`max_tokens` + 64), counted but not stored.
    pub chunks_dropped: u64,
    /// Requests whose task panicked (a bug) and left no record; never silently dropped.
    pub lost: u64,
    /// Up to three example details per error kind (the API key redacted).
    pub error_examples: BTreeMap<ErrorKind, Vec<String>>,
}

/// Latency summaries in ms.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Latency {
    /// Time to first token from the intended send (coordinated-omission corrected).
    pub ttft: Summary,
    /// Time to first token from the actual send.
    pub ttft_uncorrected: Summary,
    /// Time to first content token (excludes reasoning), corrected.
    pub ttfc: Summary,
    /// Gaps between token-carrying chunks.
    pub itl: Summary,
    /// Gaps between chunks divided over the tokens each chunk carried (one value per token).
    pub itl_per_token: Summary,
    /// Time per output token after the first, per request.
    pub tpot: Summary,
    /// End to end from the intended send.
    pub e2e: Summary,
    /// End to end from the actual send.
    pub e2e_uncorrected: Summary,
}

/// Rates over the measurement window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Throughput {
    /// Completed requests per second.
    pub requests_per_s: f64,
    /// Prompt tokens of completed requests per second.
    pub input_tokens_per_s: f64,
    /// Output tokens of completed requests per second.
    pub output_tokens_per_s: f64,
    /// Input plus output tokens per second.
    pub total_tokens_per_s: f64,
}

/// Throughput over the window where in-flight requests stayed near the target.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SteadyState {
    /// Window start, s from the run's start.
    pub start_s: f64,
    /// Window end, s from the run's start.
    pub end_s: f64,
    /// Requests in flight the load aims at (the concurrency, or rate x mean E2E).
    pub target_in_flight: f64,
    /// Time-weighted mean in flight inside the window.
    pub mean_in_flight: f64,
    /// Output tokens per second inside the window.
    pub output_tokens_per_s: f64,
    /// Requests ending per second inside the window.
    pub requests_per_s: f64,
}

/// Requests in flight over the whole run (ramp and drain included).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Concurrency {
    /// Little's law: sum of request durations (actual send to end) over the run duration.
    pub mean: f64,
    /// The most in flight at once.
    pub max: u64,
}

/// One SLO judged on a run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SloResult {
    /// The latency bounded.
    pub metric: SloMetric,
    /// Which percentile.
    pub percentile: f64,
    /// The bound, ms.
    pub threshold_ms: f64,
    /// The measured percentile, ms.
    pub value_ms: f64,
    /// The value is below the bound.
    pub met: bool,
}

/// Requests meeting every SLO.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Goodput {
    /// Requests meeting every threshold, per second; failed requests never do.
    pub requests_per_s: f64,
    /// Share of measured requests (completed + failed) meeting every threshold.
    pub fraction: f64,
    /// Each SLO's verdict.
    pub slos: Vec<SloResult>,
    /// Every SLO met and no request failed.
    pub all_met: bool,
}

/// One load point's results.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RunReport {
    /// The load in words (`c=8`, `rate=2/s`).
    pub label: String,
    /// The load.
    pub load: Load,
    /// Closed loop: the concurrency.
    pub concurrency: Option<u32>,
    /// Open loop: the rate, requests/s.
    pub rate: Option<f64>,
    /// Stopped early (a signal): what was measured until then.
    pub partial: bool,
    /// Measurement window: first measured intended send to last measured end.
    pub duration_s: f64,
    /// Counts and errors.
    pub requests: RequestCounts,
    /// Latency summaries.
    pub latency_ms: Latency,
    /// Actual minus intended send, ms.
    pub schedule_lag_ms: Summary,
    /// Rates over the window.
    pub throughput: Throughput,
    /// The steady window, when one was found.
    pub steady_state: Option<SteadyState>,
    /// In flight over the whole run.
    pub concurrency_achieved: Concurrency,
    /// Requests actually sent per second: (n - 1) / (last actual send - first actual send).
    pub achieved_send_rate_per_s: f64,
    /// Goodput under `--slo`.
    pub goodput: Option<Goodput>,
    /// What the server's metrics said.
    pub server_metrics: Option<ServerMetrics>,
    /// The client's self-check: its CPU and how late it read (`null` when the run was not
    /// measured live, e.g. a report rebuilt from records).
    pub client: Option<ClientCheck>,
    /// Warnings and observations, in words.
    pub notes: Vec<String>,
}

/// Inputs beside the records.
#[derive(Debug, Clone)]
pub struct RunContext<'a> {
    /// The load point.
    pub load: Load,
    /// Stopped early.
    pub partial: bool,
    /// `--ignore-eos` was set.
    pub ignore_eos: bool,
    /// `--slo`.
    pub slos: &'a [Slo],
    /// Last intended send time of the schedule (ns), for the open-loop steady window.
    pub last_intended_ns: u64,
    /// When a stop (a signal) ended the point, ns from its start: the measured window runs to
    /// it at least, since the run was under load (an open loop waiting for its next arrival)
    /// until then. None for a point that ran to its end.
    pub stopped_ns: Option<u64>,
}

const NS: f64 = 1e9;

/// Per-request values used by both the summaries and goodput.
struct PerRequest {
    ttft_ms: Option<f64>,
    tpot_ms: Option<f64>,
    itl_mean_ms: Option<f64>,
    e2e_ms: f64,
}

fn per_request(r: &RequestRecord) -> PerRequest {
    let ms = |ns: u64| ns as f64 / 1e6;
    let ttft_ms = r.first_token_ns().map(|t| ms(t.saturating_sub(r.intended_ns)));
    let out = r.output_tokens();
    let tpot_ms = match (r.chunks.first(), r.chunks.last()) {
        (Some(f), Some(l)) if out >= 2 && r.chunks.len() >= 2 => Some(ms(l.at_ns.saturating_sub(f.at_ns)) / (out - 1) as f64),
        _ => None,
    };
    let itl_mean_ms = (r.chunks.len() >= 2).then(|| {
        let (f, l) = (r.chunks[0].at_ns, r.chunks[r.chunks.len() - 1].at_ns);
        ms(l.saturating_sub(f)) / (r.chunks.len() - 1) as f64
    });
    PerRequest { ttft_ms, tpot_ms, itl_mean_ms, e2e_ms: ms(r.end_ns.saturating_sub(r.intended_ns)) }
}

fn slo_value(p: &PerRequest, m: SloMetric) -> Option<f64> {
    match m {
        SloMetric::Ttft => p.ttft_ms,
        SloMetric::Tpot => p.tpot_ms,
        SloMetric::Itl => p.itl_mean_ms,
        SloMetric::E2e => Some(p.e2e_ms),
    }
}

/// The latency recorders of a run.
#[derive(Default)]
struct Recorders {
    ttft: Recorder,
    ttft_u: Recorder,
    ttfc: Recorder,
    itl: Recorder,
    itl_tok: Recorder,
    tpot: Recorder,
    e2e: Recorder,
    e2e_u: Recorder,
}

impl Recorders {
    fn add(&mut self, r: &RequestRecord, p: &PerRequest) {
        if let Some(t) = r.first_token_ns() {
            self.ttft.record_ns(t.saturating_sub(r.intended_ns));
            self.ttft_u.record_ns(t.saturating_sub(r.actual_ns));
        }
        if let Some(t) = r.first_content_ns() {
            self.ttfc.record_ns(t.saturating_sub(r.intended_ns));
        }
        // Tokens per chunk: scale the chunk counts so they add up to the reconciled output count;
        // each of a chunk's k tokens gets an equal share of its gap.
        let scale = if r.output_tokens_chunks > 0 { r.output_tokens() as f64 / r.output_tokens_chunks as f64 } else { 1.0 };
        for w in r.chunks.windows(2) {
            let gap = w[1].at_ns.saturating_sub(w[0].at_ns);
            self.itl.record_ns(gap);
            let k = (f64::from(w[1].tokens) * scale).round().max(1.0) as u64;
            self.itl_tok.record_ns_n(gap / k, k);
        }
        if let Some(t) = p.tpot_ms {
            self.tpot.record_ms(t);
        }
        self.e2e.record_ns(r.end_ns.saturating_sub(r.intended_ns));
        self.e2e_u.record_ns(r.end_ns.saturating_sub(r.actual_ns));
    }

    fn summaries(&self) -> Latency {
        Latency {
            ttft: self.ttft.summary(),
            ttft_uncorrected: self.ttft_u.summary(),
            ttfc: self.ttfc.summary(),
            itl: self.itl.summary(),
            itl_per_token: self.itl_tok.summary(),
            tpot: self.tpot.summary(),
            e2e: self.e2e.summary(),
            e2e_uncorrected: self.e2e_u.summary(),
        }
    }
}

/// Everything summed over the measured requests of a run.
struct Tally {
    counts: RequestCounts,
    rec: Recorders,
    lag: Recorder,
    slo: Vec<Recorder>,
    in_tok: u64,
    out_tok: u64,
    good: u64,
    busy_ns: u128,
    start: u64,
    end: u64,
}

impl Tally {
    fn new(slos: usize, warmup: u64) -> Self {
        Self {
            counts: RequestCounts {
                completed: 0,
                failed: 0,
                errors: ErrorKind::ALL.iter().map(|k| (*k, 0)).collect(),
                http_statuses: BTreeMap::new(),
                warmup,
                stopped_early: 0,
                token_count_mismatches: 0,
                chunks_dropped: 0,
                lost: 0,
                error_examples: BTreeMap::new(),
            },
            rec: Recorders::default(),
            lag: Recorder::new(),
            slo: (0..slos).map(|_| Recorder::new()).collect(),
            in_tok: 0,
            out_tok: 0,
            good: 0,
            busy_ns: 0,
            start: u64::MAX,
            end: 0,
        }
    }

    fn add(&mut self, r: &RequestRecord, ctx: &RunContext<'_>) {
        self.start = self.start.min(r.intended_ns);
        self.end = self.end.max(r.end_ns);
        self.lag.record_ns(r.actual_ns.saturating_sub(r.intended_ns));
        self.busy_ns += u128::from(r.end_ns.saturating_sub(r.actual_ns));
        self.counts.chunks_dropped += r.chunks_dropped;
        match r.error {
            Some(k) => self.add_failure(k, r),
            None => self.add_success(r, ctx),
        }
    }

    fn add_failure(&mut self, k: ErrorKind, r: &RequestRecord) {
        let c = &mut self.counts;
        c.failed += 1;
        *c.errors.entry(k).or_default() += 1;
        if let (ErrorKind::HttpStatus, Some(s)) = (k, r.status) {
            *c.http_statuses.entry(s).or_default() += 1;
        }
        let ex = c.error_examples.entry(k).or_default();
        if ex.len() < 3 {
            ex.push(r.error_detail.clone().unwrap_or_default());
        }
    }

    fn add_success(&mut self, r: &RequestRecord, ctx: &RunContext<'_>) {
        let c = &mut self.counts;
        c.completed += 1;
        let out = r.output_tokens();
        self.in_tok += r.input_tokens();
        self.out_tok += out;
        if ctx.ignore_eos && out < u64::from(r.output_tokens_requested) {
            c.stopped_early += 1;
        }
        if r.token_count_mismatch() {
            c.token_count_mismatches += 1;
        }
        let p = per_request(r);
        self.rec.add(r, &p);
        let mut all = true;
        for (i, s) in ctx.slos.iter().enumerate() {
            match slo_value(&p, s.metric) {
                Some(v) => {
                    self.slo[i].record_ms(v);
                    all &= s.met_by(v);
                }
                None => all = false,
            }
        }
        if all {
            self.good += 1;
        }
    }

    /// The measurement window, ns.
    fn window_ns(&self) -> u64 {
        if self.end > self.start && self.start != u64::MAX {
            self.end - self.start
        } else {
            0
        }
    }

    fn goodput(&self, ctx: &RunContext<'_>, per_s: impl Fn(u64) -> f64) -> Option<Goodput> {
        if ctx.slos.is_empty() {
            return None;
        }
        let slos: Vec<SloResult> = ctx
            .slos
            .iter()
            .zip(&self.slo)
            .map(|(s, rec)| {
                let value_ms = rec.percentile_ms(s.percentile);
                // A metric no request produced cannot be met.
                SloResult {
                    metric: s.metric,
                    percentile: s.percentile,
                    threshold_ms: s.threshold_ms,
                    value_ms,
                    met: !rec.is_empty() && s.met_by(value_ms),
                }
            })
            .collect();
        let total = self.counts.completed + self.counts.failed;
        let all_met = slos.iter().all(|s| s.met) && self.counts.failed == 0;
        let fraction = if total > 0 { self.good as f64 / total as f64 } else { 0.0 };
        Some(Goodput { requests_per_s: per_s(self.good), fraction, slos, all_met })
    }
}

/// Builds the report of one load point: tally the measured records, then derive rates, the
/// steady window, goodput and notes.
pub fn compute(records: &[RequestRecord], ctx: &RunContext<'_>, server_metrics: Option<ServerMetrics>) -> RunReport {
    let measured: Vec<&RequestRecord> = records.iter().filter(|r| !r.warmup).collect();
    let mut t = Tally::new(ctx.slos.len(), (records.len() - measured.len()) as u64);
    for r in &measured {
        t.add(r, ctx);
    }
    // A stopped point ran until its stop even where its last request ended long before (an open
    // loop at a low rate): the rates are over the time the run lasted.
    if let (Some(stop), true) = (ctx.stopped_ns, t.start != u64::MAX) {
        t.end = t.end.max(stop);
    }
    let duration_ns = t.window_ns();
    let dur_s = duration_ns as f64 / NS;
    let per_s = |n: u64| if dur_s > 0.0 { n as f64 / dur_s } else { 0.0 };
    let throughput = Throughput {
        requests_per_s: per_s(t.counts.completed),
        input_tokens_per_s: per_s(t.in_tok),
        output_tokens_per_s: per_s(t.out_tok),
        total_tokens_per_s: per_s(t.in_tok + t.out_tok),
    };
    let (steady_state, max_in_flight) = steady_state(&measured, ctx);
    let mean = if duration_ns > 0 { t.busy_ns as f64 / duration_ns as f64 } else { 0.0 };
    let goodput = t.goodput(ctx, per_s);
    let lag = t.lag.summary();
    let notes = notes(&t, ctx, &lag, &measured);
    let (concurrency, rate) = match ctx.load {
        Load::Closed { concurrency } => (Some(concurrency), None),
        Load::Open { rate, .. } => (None, Some(rate)),
    };
    RunReport {
        label: ctx.load.label(),
        load: ctx.load,
        concurrency,
        rate,
        partial: ctx.partial,
        duration_s: dur_s,
        latency_ms: t.rec.summaries(),
        requests: t.counts,
        schedule_lag_ms: lag,
        throughput,
        steady_state,
        concurrency_achieved: Concurrency { mean, max: max_in_flight },
        achieved_send_rate_per_s: send_rate(&measured),
        goodput,
        server_metrics,
        client: None,
        notes,
    }
}

fn send_rate(measured: &[&RequestRecord]) -> f64 {
    let (first, last) = measured.iter().fold((u64::MAX, 0), |(a, b), r| (a.min(r.actual_ns), b.max(r.actual_ns)));
    if measured.len() > 1 && last > first {
        (measured.len() - 1) as f64 / ((last - first) as f64 / NS)
    } else {
        0.0
    }
}

/// Warnings and observations about a run, in words.
fn notes(t: &Tally, ctx: &RunContext<'_>, lag: &Summary, measured: &[&RequestRecord]) -> Vec<String> {
    let c = &t.counts;
    let completed = c.completed;
    let mut notes = Vec::new();
    match ctx.load {
        Load::Open { max_concurrency: Some(cap), .. } if lag.p99 > 1.0 => notes.push(format!(
            "requests waited for a free slot under --max-concurrency {cap}: send lag p99 {:.1} ms, max {:.1} ms. The corrected TTFT/E2E include this queueing; the uncorrected ones do not.",
            lag.p99, lag.max
        )),
        Load::Open { .. } if lag.p99 > 1.0 => notes.push(format!(
            "WARNING: the client fell behind its schedule: send lag p99 {:.2} ms, max {:.2} ms. Corrected latencies include the lag; lower the rate or free CPU for the client.",
            lag.p99, lag.max
        )),
        _ => {}
    }
    if c.stopped_early > 0 {
        notes.push(format!(
            "{} of {completed} completed requests returned fewer tokens than max_tokens although --ignore-eos was set: this server does not honour ignore_eos/min_tokens; give --eos-token-id (or --tokenizer) so an EOS logit_bias is sent",
            c.stopped_early
        ));
    }
    if c.token_count_mismatches > 0 {
        notes.push(format!(
            "{} of {completed} completed requests: the server's usage.completion_tokens differs from the number of token chunks (several tokens per chunk, e.g. speculative decoding, or a server that miscounts). Output counts use the server's usage.",
            c.token_count_mismatches
        ));
    }
    let over = measured.iter().filter(|r| r.ok() && r.usage_over_requested()).count();
    if over > 0 {
        notes.push(format!(
            "{over} of {completed} completed requests: the server's usage.completion_tokens is more than the max_tokens the request asked for, which no server generates; their output tokens are counted from the tokenizer or the token chunks instead"
        ));
    }
    let no_usage = measured.iter().filter(|r| r.ok() && r.output_tokens_server.is_none() && r.output_tokens_tokenizer.is_none()).count();
    if no_usage > 0 {
        notes.push(format!(
            "{no_usage} of {completed} completed requests carried no server token count (usage): their output tokens are the number of token-carrying chunks, which undercounts when a chunk holds several tokens or a token has no text; give --tokenizer for exact counts"
        ));
    }
    if c.chunks_dropped > 0 {
        notes.push(format!(
            "{} token chunks arrived past the per-request cap of max_tokens + {CHUNK_SLACK}: they were counted but not stored (their gaps are not in ITL)",
            c.chunks_dropped
        ));
    }
    if c.failed > 0 {
        let total = c.completed + c.failed;
        let worst = c.errors.iter().filter(|(_, n)| **n > 0).max_by_key(|(_, n)| **n).map(|(k, n)| format!("{} x{n}", k.name()));
        notes.push(format!(
            "{} of {total} requests failed (most: {}); they count against goodput and are listed in the records",
            c.failed,
            worst.unwrap_or_default()
        ));
    }
    if ctx.partial {
        notes.push("PARTIAL: the run was stopped before its end; these numbers cover what was measured until then".into());
    }
    notes
}

/// In-flight over time, from measured requests: returns the steady window and the max in flight.
fn steady_state(measured: &[&RequestRecord], ctx: &RunContext<'_>) -> (Option<SteadyState>, u64) {
    let mut ev: Vec<(u64, i64)> = Vec::with_capacity(measured.len() * 2);
    for r in measured {
        ev.push((r.actual_ns, 1));
        ev.push((r.end_ns.max(r.actual_ns), -1));
    }
    ev.sort_unstable();
    let mut cur = 0i64;
    let mut max = 0i64;
    let mut steps: Vec<(u64, i64)> = Vec::with_capacity(ev.len());
    for (t, d) in ev {
        cur += d;
        max = max.max(cur);
        steps.push((t, cur));
    }
    let (target, window) = match ctx.load {
        Load::Closed { concurrency } => {
            let target = concurrency as f64;
            let thr = (0.9 * target).ceil() as i64;
            let first = steps.iter().find(|(_, c)| *c >= thr).map(|(t, _)| *t);
            let last = steps.iter().rev().find(|(_, c)| *c >= thr).map(|(t, _)| *t);
            let last_drop = last.and_then(|l| steps.iter().find(|(t, c)| *t >= l && *c < thr).map(|(t, _)| *t));
            (target, first.zip(last_drop))
        }
        Load::Open { rate, max_concurrency, .. } => {
            let first = measured.iter().map(|r| r.intended_ns).min();
            let mean_e2e = if measured.is_empty() {
                0.0
            } else {
                measured.iter().map(|r| r.end_ns.saturating_sub(r.actual_ns) as f64 / NS).sum::<f64>() / measured.len() as f64
            };
            let little = rate * mean_e2e;
            let target = max_concurrency.map_or(little, |m| little.min(m as f64));
            // The window opens once the pipeline has filled (one mean E2E after the first send) and
            // closes at the last scheduled send, when draining begins.
            (target, first.map(|f| (f.saturating_add((mean_e2e * NS) as u64), ctx.last_intended_ns)))
        }
    };
    let Some((ws, we)) = window else {
        return (None, max as u64);
    };
    let run_start = measured.iter().map(|r| r.intended_ns).min().unwrap_or(0);
    let run_end = measured.iter().map(|r| r.end_ns).max().unwrap_or(0);
    if we <= ws || (we - ws).saturating_mul(10) < run_end.saturating_sub(run_start) {
        return (None, max as u64);
    }
    // Time-weighted mean in flight over the window.
    let mut area = 0f64;
    let mut prev_t = ws;
    let mut prev_c = steps.iter().take_while(|(t, _)| *t <= ws).last().map_or(0, |(_, c)| *c);
    for &(t, c) in steps.iter().filter(|(t, _)| *t > ws && *t <= we) {
        area += prev_c as f64 * (t - prev_t) as f64;
        prev_t = t;
        prev_c = c;
    }
    area += prev_c as f64 * (we - prev_t) as f64;
    let span = (we - ws) as f64;
    let mut tokens = 0u64;
    let mut done = 0u64;
    for r in measured.iter().filter(|r| r.ok()) {
        let scale = if r.output_tokens_chunks > 0 { r.output_tokens() as f64 / r.output_tokens_chunks as f64 } else { 1.0 };
        let in_window: u64 = r.chunks.iter().filter(|c| c.at_ns >= ws && c.at_ns < we).map(|c| c.tokens as u64).sum();
        tokens += (in_window as f64 * scale).round() as u64;
        if r.end_ns >= ws && r.end_ns < we {
            done += 1;
        }
    }
    let st = SteadyState {
        start_s: ws.saturating_sub(run_start) as f64 / NS,
        end_s: we.saturating_sub(run_start) as f64 / NS,
        target_in_flight: target,
        mean_in_flight: area / span,
        output_tokens_per_s: tokens as f64 / (span / NS),
        requests_per_s: done as f64 / (span / NS),
    };
    (Some(st), max as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Chunk;

    const MS: u64 = 1_000_000;

    fn rec(i: u64, intended: u64, actual: u64, chunks: &[u64], end: u64) -> RequestRecord {
        let mut r = RequestRecord::new(i, false, intended, 10, chunks.len() as u32);
        r.actual_ns = actual;
        r.end_ns = end;
        r.chunks = chunks.iter().map(|&t| Chunk { at_ns: t, tokens: 1, content: true }).collect();
        r.output_tokens_chunks = chunks.len() as u64;
        r.finish_reason = Some("length".into());
        r
    }

    fn ctx(load: Load) -> RunContext<'static> {
        RunContext { load, partial: false, ignore_eos: false, slos: &[], last_intended_ns: 0, stopped_ns: None }
    }

    #[test]
    fn corrected_latency_counts_the_wait_and_uncorrected_does_not() {
        // Intended at 0, sent at 100 ms (waited for a slot), first token 150 ms, end 200 ms.
        let r = rec(0, 0, 100 * MS, &[150 * MS, 175 * MS, 200 * MS], 200 * MS);
        let rep = compute(&[r], &ctx(Load::Closed { concurrency: 1 }), None);
        assert!((rep.latency_ms.ttft.p50 - 150.0).abs() < 0.2);
        assert!((rep.latency_ms.ttft_uncorrected.p50 - 50.0).abs() < 0.1);
        assert!((rep.latency_ms.e2e.max - 200.0).abs() < 0.2);
        assert!((rep.latency_ms.e2e_uncorrected.max - 100.0).abs() < 0.1);
        assert!((rep.schedule_lag_ms.p50 - 100.0).abs() < 0.1);
        assert!((rep.latency_ms.tpot.p50 - 25.0).abs() < 0.05);
        assert!((rep.latency_ms.itl.p50 - 25.0).abs() < 0.05);
    }

    #[test]
    fn failed_requests_are_counted_by_kind_and_spoil_goodput() {
        let ok = rec(0, 0, 0, &[10 * MS, 20 * MS], 20 * MS);
        let mut bad = rec(1, 0, 0, &[], 5 * MS);
        bad.fail(ErrorKind::HttpStatus, "HTTP 503", 5 * MS);
        let slos = [Slo { metric: SloMetric::Ttft, percentile: 99.0, threshold_ms: 100.0 }];
        let c = RunContext { slos: &slos, ..ctx(Load::Closed { concurrency: 2 }) };
        let rep = compute(&[ok, bad], &c, None);
        assert_eq!((rep.requests.completed, rep.requests.failed), (1, 1));
        assert_eq!(rep.requests.errors[&ErrorKind::HttpStatus], 1);
        assert_eq!(rep.requests.errors[&ErrorKind::Timeout], 0);
        let g = rep.goodput.expect("goodput");
        assert!((g.fraction - 0.5).abs() < 1e-9);
        assert!(!g.all_met, "a failed request means the SLO set is not met");
        assert!(g.slos[0].met);
    }

    /// An open loop at 0.1 req/s stopped by a signal 8 s in, its one request done after 23 ms:
    /// the rates are over the 8 s the run lasted, not the 23 ms of its last request.
    #[test]
    fn a_stopped_run_is_measured_to_its_stop_not_to_its_last_request() {
        let r = rec(0, 0, 0, &[10 * MS, 23 * MS], 23 * MS);
        let open = Load::Open { rate: 0.1, arrival: crate::spec::Arrival::Constant, max_concurrency: None };
        let stopped = RunContext { partial: true, stopped_ns: Some(8000 * MS), ..ctx(open) };
        let rep = compute(std::slice::from_ref(&r), &stopped, None);
        assert!((rep.duration_s - 8.0).abs() < 1e-9, "{}", rep.duration_s);
        assert!((rep.throughput.requests_per_s - 0.125).abs() < 1e-9, "{}", rep.throughput.requests_per_s);
        // A run that ended on its own is measured to its last request, as before.
        let rep = compute(&[r], &ctx(open), None);
        assert!((rep.duration_s - 0.023).abs() < 1e-9, "{}", rep.duration_s);
    }

    #[test]
    fn warmup_is_excluded_from_statistics() {
        let mut w = rec(0, 0, 0, &[900 * MS], 900 * MS);
        w.warmup = true;
        let m = rec(1, 1000 * MS, 1000 * MS, &[1010 * MS], 1010 * MS);
        let rep = compute(&[w, m], &ctx(Load::Closed { concurrency: 1 }), None);
        assert_eq!(rep.requests.warmup, 1);
        assert_eq!(rep.requests.completed, 1);
        assert!((rep.latency_ms.ttft.max - 10.0).abs() < 0.05);
    }

    #[test]
    fn usage_larger_than_chunks_spreads_tokens_over_chunks() {
        let mut r = rec(0, 0, 0, &[10 * MS, 20 * MS, 30 * MS], 30 * MS);
        r.output_tokens_requested = 8;
        r.output_tokens_server = Some(6);
        let rep = compute(&[r], &ctx(Load::Closed { concurrency: 1 }), None);
        assert_eq!(rep.requests.token_count_mismatches, 1);
        assert!((rep.latency_ms.itl_per_token.p50 - 5.0).abs() < 0.01);
        assert!((rep.latency_ms.tpot.p50 - 4.0).abs() < 0.01); // 20 ms over 5 tokens
    }

    /// A usage count above max_tokens is no count: the chunks count the output, and a note says so.
    #[test]
    fn usage_above_the_requested_max_tokens_is_passed_over_and_noted() {
        let mut r = rec(0, 0, 0, &[10 * MS, 20 * MS, 30 * MS], 30 * MS);
        r.output_tokens_server = Some(4_000_000_000);
        assert!(r.usage_over_requested());
        assert_eq!(r.output_tokens(), 3);
        let rep = compute(&[r], &ctx(Load::Closed { concurrency: 1 }), None);
        assert!(rep.notes.iter().any(|n| n.contains("more than the max_tokens the request asked for")), "{:?}", rep.notes);
        assert!(rep.throughput.output_tokens_per_s < 1000.0, "{}", rep.throughput.output_tokens_per_s);
    }

    #[test]
    fn closed_loop_steady_state_covers_the_full_window() {
        // Two slots, each running back-to-back 10 ms requests for 1 s, one token per ms.
        let mut recs = Vec::new();
        let mut i = 0;
        for slot in 0..2u64 {
            for k in 0..100u64 {
                let s = k * 10 * MS + slot;
                let chunks: Vec<u64> = (1..=10).map(|j| s + j * MS - 1).collect();
                recs.push(rec(i, s, s, &chunks, s + 10 * MS - 1));
                i += 1;
            }
        }
        let rep = compute(&recs, &ctx(Load::Closed { concurrency: 2 }), None);
        let st = rep.steady_state.expect("steady");
        assert!((st.output_tokens_per_s - 2000.0).abs() / 2000.0 < 0.02, "{}", st.output_tokens_per_s);
        assert!((rep.concurrency_achieved.mean - 2.0).abs() < 0.05);
        assert_eq!(rep.concurrency_achieved.max, 2);
    }
}
