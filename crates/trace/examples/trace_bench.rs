//! The trace benchmark's two halves (scripts/bench-trace): `write FILE MB` draws a trace of about
//! MB megabytes with the simulator's Kineto writer (decode steps of a known plan, a prefill every
//! 20th step); `analyze FILE` runs the analysis `servetune trace` runs and prints its time.

use std::io::{BufWriter, Write};
use std::time::Instant;

use servetune_sim::from_plan::PlanCost;
use servetune_sim::profile::{write_events, StepRecord};
use servetune_sim::{StepBatch, StepCost};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("write") if args.len() == 4 => {
            let mb: f64 = args[3].parse().map_err(|_| format!("{}: not a size in MB", args[3]))?;
            write(&args[2], mb)
        }
        Some("analyze") if args.len() == 3 => {
            let t0 = Instant::now();
            let r = servetune_trace::analyze(std::path::Path::new(&args[2]), 1.0).map_err(|e| e.to_string())?;
            let secs = t0.elapsed().as_secs_f64();
            let steps: usize = r.phases.iter().map(|p| p.steps).sum();
            println!("analysed {} GPU events in {steps} steps in {secs:.2} s", r.gpu_events);
            Ok(())
        }
        _ => Err("usage: trace_bench write FILE MB | trace_bench analyze FILE".into()),
    }
}

/// Writes about `mb` MB of steps.
fn write(path: &str, mb: f64) -> Result<(), String> {
    let scenario = servetune_model::ScenarioSpec::parse_pairs("bench", "model=llama-3.1-70b,gpu=h100-sxm,gpus=4")
        .and_then(|s| s.build())
        .map_err(|e| e.to_string())?;
    let cost = PlanCost { scenario };
    let step = |i: u64| {
        if i.is_multiple_of(20) {
            StepBatch { prefill_tokens: 2048, decode_batch: 0, context_tokens: 2048 }
        } else {
            StepBatch { prefill_tokens: 0, decode_batch: 32, context_tokens: 32 * 1500 }
        }
    };
    // One cycle of 20 steps (a prefill and 19 decodes), drawn at a late timestamp, sizes a step.
    let cycle: Vec<StepRecord> = (0..20)
        .map(|i| {
            let b = step(i);
            StepRecord { start_us: 2e9, split: cost.split(&b).fitted(cost.step(&b)), prefill: b.prefill_tokens > 0 }
        })
        .collect();
    let mut probe = Vec::new();
    write_events(&mut probe, &cycle, 4).map_err(|e| e.to_string())?;
    let n = ((mb * 1e6) / (probe.len() as f64 / 20.0)).ceil() as u64;
    let mut t = 1e6;
    let steps: Vec<StepRecord> = (0..n)
        .map(|i| {
            let b = step(i);
            let split = cost.split(&b).fitted(cost.step(&b));
            let s = StepRecord { start_us: t, split, prefill: b.prefill_tokens > 0 };
            t += split.total_ms() * 1e3;
            s
        })
        .collect();
    let f = std::fs::File::create(path).map_err(|e| format!("{path}: {e}"))?;
    let mut w = BufWriter::with_capacity(1 << 20, f);
    write_events(&mut w, &steps, 4).map_err(|e| format!("{path}: {e}"))?;
    w.flush().map_err(|e| format!("{path}: {e}"))?;
    println!("wrote {n} steps to {path}");
    Ok(())
}
