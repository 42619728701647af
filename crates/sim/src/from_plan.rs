//! `servetune sim --from-plan`: the performance model's prediction as the simulator's step cost,
//! so a simulated deployment behaves as `servetune plan` predicts. One engine is one replica of the
//! plan (its TP x PP GPUs).

use std::time::Duration;

use servetune_model::predict::Scenario;

use crate::cost::{ParametricCost, Profile, StepBatch, StepCost};

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
            // A prefill-only step streams the weights itself; mixed into decode it rides along.
            // The chunk's prompts are not known one by one: the chunk is taken as one prompt.
            ms += s.prefill_ms(b.prefill_tokens as f64, b.prefill_tokens as f64, b.decode_batch == 0);
            if b.decode_batch == 0 {
                ms += s.engine.step_overhead_ms;
            }
        }
        Duration::from_secs_f64(ms.max(0.01) / 1e3)
    }

    fn split(&self, b: &StepBatch) -> crate::profile::Split {
        crate::profile::plan_split(&self.scenario, b, self.step(b))
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
        cost: ParametricCost {
            overhead_ms: t1,
            per_decode_token_ms: ((t64 - t1) / 63.0).max(0.0),
            per_prefill_token_ms: 0.0,
            per_context_token_us: 0.0,
        },
        moe_efficiency: s.model.moe.as_ref().map(|_| s.engine.moe_efficiency),
    }
}
