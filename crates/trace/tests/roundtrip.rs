//! A trace written by the simulator for a known plan is attributed within 2% of the simulator's
//! own split.

use std::time::Duration;

use servetune_sim::from_plan::PlanCost;
use servetune_sim::profile::{write_trace, Split, StepRecord};
use servetune_sim::{StepBatch, StepCost};
use servetune_trace::{analyze, Category, Phase};

/// 180 decode steps of batch 16 and every 20th step a 2048-token prefill, as the sim records them.
fn steps(cost: &PlanCost) -> Vec<StepRecord> {
    let mut out = Vec::new();
    let mut t = 1000.0;
    for i in 0..200u32 {
        let b = if i.is_multiple_of(20) {
            StepBatch { prefill_tokens: 2048, decode_batch: 0, context_tokens: 2048 }
        } else {
            StepBatch { prefill_tokens: 0, decode_batch: 16, context_tokens: 16 * 1500 }
        };
        let dur: Duration = cost.step(&b);
        let split = cost.split(&b).fitted(dur);
        out.push(StepRecord { start_us: t, split, prefill: b.decode_batch == 0 });
        t += split.total_ms() * 1e3;
    }
    out
}

fn close(measured: f64, truth: f64, what: &str) {
    assert!((measured - truth).abs() <= 0.02 * truth.abs() + 1e-6, "{what}: measured {measured} against the sim's {truth}");
}

#[test]
fn a_sim_trace_is_attributed_within_2_percent_of_the_sims_split() {
    // Over PCIe (NCCL, not NVLink's custom all-reduce, whose small-message latency the per-kernel
    // floor already covers), so every decode step has all-reduce time to attribute.
    let scenario = servetune_model::ScenarioSpec::parse_pairs("test", "model=llama-3.1-70b,gpu=h100-sxm,gpus=4,link=pcie5-p2p")
        .and_then(|s| s.build())
        .expect("plan");
    let cost = PlanCost { scenario };
    let steps = steps(&cost);
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("sim.trace.json");
    write_trace(&path, &steps, 4).expect("writes");
    let r = analyze(&path, 1.0).expect("analyses");
    for (phase, prefill) in [(Phase::Decode, false), (Phase::Prefill, true)] {
        let mine: Vec<&Split> = steps.iter().filter(|s| s.prefill == prefill).map(|s| &s.split).collect();
        let n = mine.len() as f64;
        let mean = |f: fn(&Split) -> f64| mine.iter().map(|s| f(s)).sum::<f64>() / n;
        let p = r.phases.iter().find(|p| p.phase == phase).expect("phase found");
        assert_eq!(p.steps, mine.len(), "{phase:?} steps");
        let cat = |c: Category| p.categories.iter().find(|x| x.category == c).map_or(0.0, |x| x.ms);
        close(cat(Category::DenseGemm), mean(|s| s.matmul_ms), "GEMM");
        close(cat(Category::Attention), mean(|s| s.attention_ms), "attention");
        close(cat(Category::Nccl), mean(|s| s.communication_ms), "all-reduce");
        close(p.idle_ms, mean(|s| s.overhead_ms), "host overhead");
        close(p.mean_ms, mean(Split::total_ms), "step");
    }
    let decode = r.phases.iter().find(|p| p.phase == Phase::Decode).expect("decode");
    assert!(decode.nccl_calls_per_step == servetune_sim::profile::LAYERS as f64, "{}", decode.nccl_calls_per_step);
}
