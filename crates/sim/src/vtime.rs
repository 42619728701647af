//! The engine in virtual time: a closed-loop client of fixed lengths run against an [`Engine`]
//! without sleeping, to learn in milliseconds what the real-time server will do (preset
//! calibration, tests, and what a sweep should show).

use crate::cost::{Profile, StepCost};
use crate::engine::{Emit, Engine, EngineRequest};

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

/// Runs `requests` requests of `input` prompt and `output` forced output tokens with `concurrency`
/// always in flight.
pub fn closed_loop(profile: &Profile, cost: &dyn StepCost, concurrency: u32, input: u32, output: u32, requests: u64) -> VirtualRun {
    let mut e = Engine::new(profile.clone(), 0);
    let mut t = 0.0f64;
    let mut next_id = 0u64;
    let mut started = std::collections::HashMap::new();
    let mut first: std::collections::HashMap<u64, f64> = std::collections::HashMap::new();
    let (mut done, mut tokens) = (0u64, 0u64);
    let (mut ttft_sum, mut tpot_sum, mut n_tpot) = (0.0, 0.0, 0u64);
    let mut submit = |e: &mut Engine, t: f64, started: &mut std::collections::HashMap<u64, f64>| {
        let id = next_id;
        next_id += 1;
        let _ = e.submit(EngineRequest { id, prompt_tokens: input, max_tokens: output, min_tokens: 0, ignore_eos: true });
        started.insert(id, t);
    };
    for _ in 0..concurrency.min(requests as u32) {
        submit(&mut e, t, &mut started);
    }
    let mut sent = concurrency.min(requests as u32) as u64;
    let mut out = Vec::new();
    while let Some(plan) = e.plan() {
        t += e.cost(cost, &plan).as_secs_f64();
        e.apply(&plan, &mut out);
        for x in out.drain(..) {
            match x {
                Emit::Token { id, index } => {
                    tokens += 1;
                    if index == 0 {
                        ttft_sum += t - started.get(&id).copied().unwrap_or(t);
                        first.insert(id, t);
                    }
                }
                Emit::Done { id, completion_tokens, .. } => {
                    done += 1;
                    if completion_tokens > 1 {
                        tpot_sum += (t - first.get(&id).copied().unwrap_or(t)) / (completion_tokens - 1) as f64;
                        n_tpot += 1;
                    }
                    if sent < requests {
                        submit(&mut e, t, &mut started);
                        sent += 1;
                    }
                }
            }
        }
    }
    VirtualRun {
        output_tokens_per_s: if t > 0.0 { tokens as f64 / t } else { 0.0 },
        tpot_ms: if n_tpot > 0 { tpot_sum / n_tpot as f64 * 1e3 } else { 0.0 },
        ttft_ms: if done > 0 { ttft_sum / done as f64 * 1e3 } else { 0.0 },
        seconds: t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::preset;

    #[test]
    fn reference_presets_hit_their_documented_plateaus() {
        // docs/design.md: 485 tok/s at concurrency 64 in the KVM guest; ~806 tok/s plateau in LXC.
        for (name, want) in [("reference-kvm", 485.0), ("reference-lxc", 806.0)] {
            let p = preset(name).expect("preset");
            let at64 = closed_loop(&p, &p.cost, 64, 256, 64, 256).output_tokens_per_s;
            let at256 = closed_loop(&p, &p.cost, 256, 256, 64, 1024).output_tokens_per_s;
            let at8 = closed_loop(&p, &p.cost, 8, 256, 64, 32).output_tokens_per_s;
            assert!((at64 - want).abs() / want < 0.03, "{name}: {at64:.0} tok/s at c=64, want {want}");
            assert!((at256 - at64).abs() / at64 < 0.03, "{name}: plateau beyond 64 ({at256:.0})");
            assert!(at8 < at64 * 0.6, "{name}: still rising below the plateau ({at8:.0})");
        }
    }

    #[test]
    fn tpot_at_concurrency_one_is_the_step_time() {
        let p = preset("reference-kvm").expect("preset");
        let r = closed_loop(&p, &p.cost, 1, 16, 64, 4);
        let step = p.cost.step(&crate::cost::StepBatch { prefill_tokens: 0, decode_batch: 1, context_tokens: 16 + 32 }).as_secs_f64() * 1e3;
        assert!((r.tpot_ms - step).abs() / step < 0.01, "{} vs {step}", r.tpot_ms);
    }
}
