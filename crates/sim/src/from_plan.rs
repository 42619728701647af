//! `servetune sim --from-plan`: the performance model's prediction as the simulator's step cost,
//! so a simulated deployment behaves as `servetune plan` predicts. One engine is one replica of the
//! plan (its TP x PP GPUs). [`PlanBench`] runs the same engine and cost in virtual time for
//! `servetune plan`'s client-measured figures.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use servetune_model::predict::{PrefillPass, Scenario};
use servetune_model::workload::{ClientEffects, ClientRun, Latency, LengthDist, VirtualBench, Workload};

use crate::cost::{ParametricCost, Profile, Scheduling, StepBatch, StepCost, MAX_STEP};
use crate::vtime::{run_closed_counted, Lengths, Memo, Trace};

/// Step cost from the model: decode at the batch and mean context, plus the prefill chunk.
#[derive(Debug, Clone)]
pub struct PlanCost {
    /// The resolved plan whose step times the engine takes.
    pub scenario: Scenario,
}

impl PlanCost {
    /// The model's time for a step of batch `b`, ms, before any bound.
    pub fn step_ms(&self, b: &StepBatch) -> f64 {
        let s = &self.scenario;
        let mut ms = 0.0;
        if b.decode_batch > 0 {
            let ctx = b.context_tokens as f64 / (b.decode_batch + u32::from(b.prefill_tokens > 0)) as f64;
            ms += s.decode_step_ms(b.decode_batch as f64, ctx);
        }
        if b.prefill_tokens > 0 {
            // Without mixed prefill (sglang's default) prompt chunks run as a pass of their own, which
            // streams the weights and pays the step overhead itself; mixed into decode (vLLM V1,
            // --enable-mixed-chunk) they ride along. The chunk's prompts are not known one by one:
            // each is taken to be the scenario's prompt length for its attention span.
            let pass = prefill_pass(s, b);
            ms += s.prefill_ms(b.prefill_tokens as f64, s.input_len.max(1) as f64, pass);
            if pass == PrefillPass::Standalone {
                // The pass's own step overhead, at the release's step scale as every other term.
                ms += s.scaled_overhead_ms();
            }
            // Without prefill CUDA graphs (TensorRT-LLM; sglang before 0.5.10) the step runs eagerly.
            ms += s.eager_prefill_ms_in(pass);
        }
        ms
    }
}

impl StepCost for PlanCost {
    fn step(&self, b: &StepBatch) -> Duration {
        step_duration(self.step_ms(b))
    }

    fn pricing(&self) -> String {
        let s = &self.scenario;
        let chunk = if s.engine.mixed_prefill {
            "prompt chunks ride in decode steps (mixed prefill) and add their GEMM, attention and all-reduce time to the step"
        } else {
            "prompt chunks run as a pass of their own (prefill-first), paying the weight reads and the step overhead themselves"
        };
        format!(
            "the performance model (servetune plan) for {}: a decode step by its batch and mean context; {chunk}, priced by the model's prefill for the chunk's tokens at a {}-token prompt's attention span; cost.per_prefill_token_ms is that price per token for a full chunk, cost.overhead_ms and cost.per_decode_token_ms summarise decode at batch 1 and 64 (display only)",
            s.model.name, s.input_len
        )
    }

    fn split(&self, b: &StepBatch) -> crate::profile::Split {
        crate::profile::plan_split(&self.scenario, b, self.step(b))
    }
}

/// A step of `ms` milliseconds as a duration: at least 10 us, at most [`MAX_STEP`] (a cost that
/// is not finite is held to it too). [`check_cost`] refuses a deployment whose steps come near
/// either bound at the boundary, so this only keeps a bug from panicking the engine thread.
fn step_duration(ms: f64) -> Duration {
    if ms.is_nan() {
        return MAX_STEP;
    }
    Duration::try_from_secs_f64(ms.max(0.01) / 1e3).map_or(MAX_STEP, |d| d.min(MAX_STEP))
}

/// Why [`check_cost`] refuses a deployment: the step that the model prices out of range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("the model prices a step of {what} at {ms} ms, {why}")]
pub struct CostOutOfRange {
    /// The step, in words ("a decode batch of 64").
    pub what: String,
    /// Its predicted time, ms (may be infinite or NaN).
    pub ms: f64,
    /// What is wrong with it.
    pub why: &'static str,
}

/// Checks that the model's step times for this deployment are finite and at most [`MAX_STEP`]
/// at the batches the engine can run (one request, the running cap, a full prefill chunk, and
/// both at once), so a huge or tiny number in the scenario (a per-request cost of 1e308 us, a
/// MoE efficiency of 1e-300) is refused before the server starts instead of stalling it for ever.
pub fn check_cost(s: &Scenario, prof: &Profile) -> Result<(), CostOutOfRange> {
    let cap = prof.max_running_requests.max(1);
    let ctx = (s.input_len as u64).saturating_add(s.output_len as u64 / 2);
    let cost = PlanCost { scenario: s.clone() };
    let batches = [
        ("a decode batch of 1".to_string(), StepBatch { prefill_tokens: 0, decode_batch: 1, context_tokens: ctx }),
        (
            format!("a decode batch of {cap}"),
            StepBatch { prefill_tokens: 0, decode_batch: cap, context_tokens: ctx.saturating_mul(cap as u64) },
        ),
        (
            format!("a prefill chunk of {} tokens", prof.chunked_prefill_size),
            StepBatch { prefill_tokens: prof.chunked_prefill_size, decode_batch: 0, context_tokens: 0 },
        ),
        (
            format!("a decode batch of {cap} with a prefill chunk"),
            StepBatch { prefill_tokens: prof.chunked_prefill_size, decode_batch: cap, context_tokens: ctx.saturating_mul(cap as u64) },
        ),
    ];
    for (what, b) in batches {
        let ms = cost.step_ms(&b);
        let why = if !ms.is_finite() {
            "not a finite number"
        } else if ms > MAX_STEP.as_secs_f64() * 1e3 {
            "longer than the simulator's limit of an hour per step"
        } else {
            continue;
        };
        return Err(CostOutOfRange { what, ms, why });
    }
    Ok(())
}

/// How a step's prefill tokens run: as a pass of their own in a prefill-only step, and beside
/// decode unless the engine keeps prompt chunks out of decode steps.
pub fn prefill_pass(s: &Scenario, b: &StepBatch) -> PrefillPass {
    if b.decode_batch == 0 || !s.engine.mixed_prefill {
        PrefillPass::Standalone
    } else {
        PrefillPass::Beside(b.decode_batch as f64)
    }
}

/// The engine limits of the predicted deployment; the parametric terms summarise the model for
/// display only (decode at batch 1 and batch 64; prefill per token of a full chunk, as a pass of
/// its own): the step cost itself is [`PlanCost`], and [`StepCost::pricing`] says how it prices.
pub fn profile(s: &Scenario) -> Profile {
    let ctx = s.input_len as f64 + s.output_len as f64 / 2.0;
    let t1 = s.decode_step_ms(1.0, ctx);
    let t64 = s.decode_step_ms(64.0, ctx);
    // The engine's own step budget (sglang's prefill chunk, vLLM's batched tokens) on this GPU.
    let chunk = s.step_tokens();
    let per_prefill = s.prefill_ms(chunk as f64, s.input_len.max(1) as f64, PrefillPass::Standalone) / chunk as f64;
    Profile {
        name: format!(
            "from-plan: {} {} on {} x {} ({}, {})",
            s.model.name,
            s.quant.experts.name(),
            s.plan.gpus,
            s.gpu.name,
            s.plan.label(),
            s.link.name
        ),
        model: s.model.name.clone(),
        tp_size: s.plan.tp,
        max_running_requests: replica_running_cap(s),
        kv_tokens: (s.max_kv_tokens() / s.plan.dp().max(1) as u64).max(64),
        page_size: 64,
        chunked_prefill_size: chunk,
        eos_mean_tokens: s.output_len.max(1),
        // An engine that does not mix prompt chunks into decode steps (sglang's default) runs them
        // first, alone, while decoding waits.
        scheduling: if s.engine.mixed_prefill { Scheduling::Mixed } else { Scheduling::PrefillFirst },
        cost: ParametricCost {
            overhead_ms: t1,
            per_decode_token_ms: ((t64 - t1) / 63.0).max(0.0),
            per_prefill_token_ms: if per_prefill.is_finite() { per_prefill.max(0.0) } else { 0.0 },
            per_context_token_us: 0.0,
        },
        moe_efficiency: s.model.moe.as_ref().map(|_| s.engine.moe_efficiency),
    }
}

/// One replica's running cap: the deployment's (stated, else the engine's default) shared over
/// its replicas; without one, the KV's estimate for the whole deployment, which the replica's own
/// KV pages bound first; and at most the replica's share of sglang's state-pool cap
/// ([`Scenario::state_running_cap`]).
fn replica_running_cap(s: &Scenario) -> u32 {
    let dp = s.plan.dp().max(1);
    let cap = match s.max_running.or_else(|| s.default_running_cap()) {
        Some(cap) => cap.div_ceil(dp).clamp(1, s.max_concurrency().max(1)),
        None => s.max_concurrency().max(1),
    };
    // sglang's state pool is each replica's own, and nothing else in the simulator bounds it.
    match s.state_running_cap() {
        Some(state) => cap.min(state.div_ceil(dp)).max(1),
        None => cap,
    }
}

/// The model's deployment run as a benchmark client sees it: [`VirtualBench`] by the simulator's
/// engine in virtual time ([`crate::vtime::run_closed`]) with [`PlanCost`] as the step cost and
/// [`profile`]'s limits (running cap, KV pages, chunked prefill). One engine is one replica; the
/// workload is split evenly over the plan's replicas.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlanBench;

/// The workload's requests for one replica: lengths drawn with the workload's seed.
pub fn draw_lengths(w: &Workload, n: u64) -> Vec<Lengths> {
    if let (LengthDist::Fixed { len: input }, LengthDist::Fixed { len: output }) = (w.input, w.output) {
        // Nothing to draw (the draws below would be ignored): the same lengths, without the RNG.
        return vec![Lengths { input, output }; n as usize];
    }
    let mut rng = StdRng::seed_from_u64(w.seed);
    let mut one = |d: &LengthDist| {
        let u: f64 = rng.gen();
        // Box-Muller: a standard normal from two uniforms.
        let (u1, u2): (f64, f64) = (rng.gen_range(f64::MIN_POSITIVE..1.0), rng.gen());
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        d.draw(u, z)
    };
    (0..n).map(|_| Lengths { input: one(&w.input), output: one(&w.output) }).collect()
}

impl VirtualBench for PlanBench {
    fn run(&self, s: &Scenario, w: &Workload, concurrency: u32) -> ClientRun {
        run_plan(s, w, concurrency, None)
    }
}

/// [`PlanBench`] that counts, as they complete, the requests its runs simulate (one replica's:
/// a plan with DP attention simulates 1 / dp of the workload and scales), for a progress line on
/// another thread. The figures are [`PlanBench`]'s.
#[derive(Debug, Clone, Default)]
pub struct CountedPlanBench {
    /// Requests completed so far, over every run.
    pub finished: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl VirtualBench for CountedPlanBench {
    fn run(&self, s: &Scenario, w: &Workload, concurrency: u32) -> ClientRun {
        run_plan(s, w, concurrency, Some(&self.finished))
    }
}

fn run_plan(s: &Scenario, w: &Workload, concurrency: u32, finished: Option<&std::sync::atomic::AtomicU64>) -> ClientRun {
    let dp = s.plan.dp().max(1);
    let c = concurrency.max(1).div_ceil(dp);
    let n = w.requests_at(concurrency).div_ceil(dp as u64).max(1);
    let reqs = draw_lengths(w, n);
    let prof = profile(s);
    let cost = PlanCost { scenario: s.clone() };
    let tr = run_closed_counted(&prof, &Memo::new(&cost), &reqs, c, finished);
    summarize(&tr, &prof, &cost, w, c, dp)
}

fn summarize(tr: &Trace, prof: &Profile, cost: &PlanCost, w: &Workload, c: u32, dp: u32) -> ClientRun {
    let secs = tr.seconds.max(1e-12);
    let full = c.min(prof.max_running_requests).min(tr.records.len().max(1) as u32).max(1);
    let ctx = w.input.mean() + w.output.mean() / 2.0;
    let t_full = cost.step(&StepBatch { prefill_tokens: 0, decode_batch: full, context_tokens: (full as f64 * ctx) as u64 }).as_secs_f64();
    let ideal = tr.decode_tokens as f64 * t_full / full as f64;
    let prefill = tr.prefill_seconds / secs;
    let steady_decode = ideal / secs;
    let (mut queued, mut e2e) = (0.0, 0.0);
    let (mut ttft, mut tpot) = (Vec::with_capacity(tr.records.len()), Vec::with_capacity(tr.records.len()));
    let mut prompt = 0u64;
    // The serving path's latency outside the GPU's steps reaches the client's TTFT only; the
    // engine's steps and the closed loop's timing run without it (VALIDATION.md, step 7).
    let latency_ms = cost.scenario.engine.request_latency_ms.max(0.0);
    for r in &tr.records {
        queued += r.admitted - r.sent;
        e2e += r.done - r.sent;
        prompt += r.input as u64;
        ttft.push((r.first_token - r.sent) * 1e3 + latency_ms);
        if r.output > 1 {
            tpot.push((r.done - r.first_token) / (r.output - 1) as f64 * 1e3);
        }
    }
    let d = dp as f64;
    ClientRun {
        requests: tr.records.len() as u64 * dp as u64,
        output_tokens_per_s: tr.output_tokens as f64 / secs * d,
        total_tokens_per_s: (tr.output_tokens + prompt) as f64 / secs * d,
        ttft_ms: Latency::of(&ttft),
        tpot_ms: Latency::of(&tpot),
        seconds: tr.seconds,
        peak_running: tr.peak_running * dp,
        full_batch: full * dp,
        steady_decode_tokens_per_s: full as f64 / t_full.max(1e-12) * d,
        effects: ClientEffects {
            steady_decode,
            prefill,
            ramp_tail: 1.0 - steady_decode - prefill,
            queueing: if e2e > 0.0 { queued / e2e } else { 0.0 },
        },
    }
}
