//! The engine in virtual time: a closed-loop client run against the simulator's engine without
//! sleeping, to learn in milliseconds what the real-time server will do (preset calibration,
//! tests, what a sweep should show, and `servetune plan`'s client-measured figures). The
//! scheduling is [`crate::engine::Engine`]'s; only the clock is simulated. The run itself is the
//! engine's event-driven form ([`events`]), which touches a decoding request only when something
//! happens to it; a property test holds it to the engine's own plan/apply loop, bit for bit.

use crate::cost::{Profile, StepBatch, StepCost};

mod events;

/// What a virtual closed-loop run measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VirtualRun {
    /// Output tokens per second of virtual time.
    pub output_tokens_per_s: f64,
    /// Mean time between tokens of one request, ms.
    pub tpot_ms: f64,
    /// Mean time to first token, ms.
    pub ttft_ms: f64,
    /// Virtual seconds the run took.
    pub seconds: f64,
}

/// One request of a virtual run: its prompt and forced output length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lengths {
    /// Prompt tokens.
    pub input: u32,
    /// Output tokens (generated past EOS, as a benchmark with `ignore_eos` does).
    pub output: u32,
}

/// One finished request's timings, seconds from the run's start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Record {
    /// Prompt tokens.
    pub input: u32,
    /// Output tokens generated.
    pub output: u32,
    /// Sent by the client.
    pub sent: f64,
    /// Admitted into the running batch (first time).
    pub admitted: f64,
    /// First token.
    pub first_token: f64,
    /// Last token.
    pub done: f64,
}

/// Everything a closed-loop virtual run saw.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Trace {
    /// Finished requests, in the order they finished.
    pub records: Vec<Record>,
    /// Requests the engine refused (larger than the whole KV cache).
    pub refused: u64,
    /// Virtual seconds from the first request to the last token.
    pub seconds: f64,
    /// Output tokens generated.
    pub output_tokens: u64,
    /// Output tokens produced by decode actions (not a prefill's first token).
    pub decode_tokens: u64,
    /// Seconds of prefill: prefill-only steps, and what prompt chunks added to decode steps.
    pub prefill_seconds: f64,
    /// Seconds of decode (the rest).
    pub decode_seconds: f64,
    /// Most requests running in one step.
    pub peak_running: u32,
}

/// A step cost remembered per (prefill tokens, decode batch, context within 0.5%): a virtual run
/// asks for tens of thousands of steps whose batches repeat, and the model's step is not free.
/// The first step seen in a context bucket sets its cost, so a run stays deterministic.
#[derive(Debug)]
pub struct Memo<'a> {
    inner: &'a dyn StepCost,
    seen: std::sync::Mutex<std::collections::HashMap<(u32, u32, i64), std::time::Duration>>,
}

impl<'a> Memo<'a> {
    /// Remembers `inner`'s steps.
    pub fn new(inner: &'a dyn StepCost) -> Self {
        Self { inner, seen: std::sync::Mutex::new(std::collections::HashMap::new()) }
    }
}

impl StepCost for Memo<'_> {
    fn step(&self, b: &StepBatch) -> std::time::Duration {
        let bucket = if b.context_tokens == 0 { -1 } else { ((b.context_tokens as f64).ln() * 200.0).round() as i64 };
        let key = (b.prefill_tokens, b.decode_batch, bucket);
        let Ok(mut seen) = self.seen.lock() else { return self.inner.step(b) };
        *seen.entry(key).or_insert_with(|| self.inner.step(b))
    }

    fn split(&self, b: &StepBatch) -> crate::profile::Split {
        self.inner.split(b)
    }
}

/// What prompt chunks add to a step: the step less the same step without them (its decode
/// requests' context only), in seconds.
fn prefill_part(cost: &dyn StepCost, b: &StepBatch, dt: f64) -> f64 {
    if b.prefill_tokens == 0 {
        return 0.0;
    }
    if b.decode_batch == 0 {
        return dt;
    }
    // The chunk's context is one more share of the step's context tokens (as PlanCost reads it).
    let decode_ctx = b.context_tokens * b.decode_batch as u64 / (b.decode_batch as u64 + 1);
    let decode_only = cost.step(&StepBatch { prefill_tokens: 0, decode_batch: b.decode_batch, context_tokens: decode_ctx }).as_secs_f64();
    (dt - decode_only).clamp(0.0, dt)
}

/// Runs `requests` in order with `concurrency` in flight (closed loop: a finished or refused
/// request is replaced by the next at once), each with its own lengths.
pub fn run_closed(profile: &Profile, cost: &dyn StepCost, requests: &[Lengths], concurrency: u32) -> Trace {
    run_closed_counted(profile, cost, requests, concurrency, None)
}

/// [`run_closed`], adding 1 to `finished` as each request completes (a progress line reads it
/// from another thread while the run goes on). The run is [`events`]' event-driven form of the
/// engine, held to [`crate::engine::Engine`]'s trace by a property test.
pub fn run_closed_counted(
    profile: &Profile,
    cost: &dyn StepCost,
    requests: &[Lengths],
    concurrency: u32,
    finished: Option<&std::sync::atomic::AtomicU64>,
) -> Trace {
    events::run(profile, cost, requests, concurrency, finished, events::MAX_PAGE_BUCKETS)
}

/// Runs `requests` requests of `input` prompt and `output` forced output tokens with `concurrency`
/// always in flight.
pub fn closed_loop(profile: &Profile, cost: &dyn StepCost, concurrency: u32, input: u32, output: u32, requests: u64) -> VirtualRun {
    let reqs = vec![Lengths { input, output }; requests as usize];
    let tr = run_closed(profile, cost, &reqs, concurrency.min(requests.min(u32::MAX as u64) as u32));
    let t = tr.seconds;
    let done = tr.records.len();
    let ttft: f64 = tr.records.iter().map(|r| r.first_token - r.sent).sum();
    let tpots: Vec<f64> = tr.records.iter().filter(|r| r.output > 1).map(|r| (r.done - r.first_token) / (r.output - 1) as f64).collect();
    VirtualRun {
        output_tokens_per_s: if t > 0.0 { tr.output_tokens as f64 / t } else { 0.0 },
        tpot_ms: if tpots.is_empty() { 0.0 } else { tpots.iter().sum::<f64>() / tpots.len() as f64 * 1e3 },
        ttft_ms: if done > 0 { ttft / done as f64 * 1e3 } else { 0.0 },
        seconds: t,
    }
}

#[cfg(test)]
mod tests;
