//! `servetune sim --from-plan`: the performance model's prediction as the simulator's step cost,
//! so a simulated deployment behaves as `servetune plan` predicts. One engine is one replica of the
//! plan (its TP x PP GPUs). [`PlanBench`] runs the same engine and cost in virtual time for
//! `servetune plan`'s client-measured figures.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use servetune_model::predict::{PrefillPass, Scenario};
use servetune_model::workload::{ClientEffects, ClientRun, Latency, LengthDist, VirtualBench, Workload};

use crate::cost::{ParametricCost, Profile, Scheduling, StepBatch, StepCost};
use crate::vtime::{run_closed_counted, Lengths, Memo, Trace};

/// Step cost from the model: decode at the batch and mean context, plus the prefill chunk.
#[derive(Debug, Clone)]
pub struct PlanCost {
    /// The resolved plan whose step times the engine takes.
    pub scenario: Scenario,
}

impl StepCost for PlanCost {
    fn step(&self, b: &StepBatch) -> Duration {
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
                ms += s.overhead_ms();
            }
            // Without prefill CUDA graphs (TensorRT-LLM; sglang before 0.5.10) the step runs eagerly.
            ms += s.eager_prefill_ms();
        }
        Duration::from_secs_f64(ms.max(0.01) / 1e3)
    }

    fn split(&self, b: &StepBatch) -> crate::profile::Split {
        crate::profile::plan_split(&self.scenario, b, self.step(b))
    }
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

/// The engine limits of the predicted deployment; the parametric terms are a two-point summary of
/// the model (batch 1 and batch 64) for display only: the step cost itself is [`PlanCost`].
pub fn profile(s: &Scenario) -> Profile {
    let ctx = s.input_len as f64 + s.output_len as f64 / 2.0;
    let t1 = s.decode_step_ms(1.0, ctx);
    let t64 = s.decode_step_ms(64.0, ctx);
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
        max_running_requests: s.max_concurrency().max(1),
        kv_tokens: (s.max_kv_tokens() / s.plan.dp().max(1) as u64).max(64),
        page_size: 64,
        chunked_prefill_size: 8192,
        eos_mean_tokens: s.output_len.max(1),
        // An engine that does not mix prompt chunks into decode steps (sglang's default) runs them
        // first, alone, while decoding waits.
        scheduling: if s.engine.mixed_prefill { Scheduling::Mixed } else { Scheduling::PrefillFirst },
        cost: ParametricCost {
            overhead_ms: t1,
            per_decode_token_ms: ((t64 - t1) / 63.0).max(0.0),
            per_prefill_token_ms: 0.0,
            per_context_token_us: 0.0,
        },
        moe_efficiency: s.model.moe.as_ref().map(|_| s.engine.moe_efficiency),
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
