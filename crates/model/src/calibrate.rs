//! Fits named efficiency factors to measured throughput (a bench JSON's runs): the memory
//! efficiency (one multiplier on every memory-streaming rate, `Engine::stream_scale`), the per-step overhead and,
//! with four or more points, a multiplier on communication time. Coordinate descent on the squared
//! log error; prints the fitted values and residuals.

use serde::Serialize;

use crate::predict::{Engine, Scenario};

/// A measured operating point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Measured {
    /// Closed-loop concurrency.
    pub concurrency: u32,
    /// Measured output tokens/s (finite, > 0).
    pub output_tokens_per_s: f64,
}

/// One point's prediction after the fit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Residual {
    /// Closed-loop concurrency.
    pub concurrency: u32,
    /// Measured output tokens/s.
    pub measured: f64,
    /// Predicted output tokens/s with the fitted engine.
    pub predicted: f64,
    /// (predicted - measured) / measured.
    pub error: f64,
}

/// The fit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    /// Multiplier on every memory-streaming rate (the kernel tables' and the engine's).
    pub memory_efficiency_scale: f64,
    /// Fitted host overhead per step, ms.
    pub step_overhead_ms: f64,
    /// Fitted multiplier on communication time (fitted only with four or more points).
    pub comm_scale: f64,
    /// The engine with the fitted values.
    pub engine: Engine,
    /// Each measured point against its prediction.
    pub residuals: Vec<Residual>,
    /// Root-mean-square of ln(predicted / measured).
    pub rms_log_error: f64,
}

/// `base` with fitted factors: every memory-streaming rate times `mem`, the whole per-step
/// overhead `over` ms (the per-kernel floor folded in), communication time times `comm`. The
/// campaign applies a stored calibration with it.
pub fn apply(base: &Engine, mem: f64, over: f64, comm: f64) -> Engine {
    // A measurement of the box replaces an early release's calibrated step scale: the fitted
    // figures are the box's own, not multiples of the model's.
    Engine {
        stream_scale: base.stream_scale * mem,
        step_overhead_ms: over,
        kernel_overhead_us: 0.0,
        comm_scale: comm,
        release_step_scale: 1.0,
        ..*base
    }
}

fn loss(s: &Scenario, pts: &[Measured], e: Engine) -> f64 {
    let sc = Scenario { engine: e, ..s.clone() };
    pts.iter().map(|m| (sc.point(m.concurrency).output_tokens_per_s / m.output_tokens_per_s).ln().powi(2)).sum::<f64>()
        / pts.len().max(1) as f64
}

/// Fits the factors to `pts` (checked by [`crate::inputs`]: finite, positive). `None` without points.
pub fn fit(s: &Scenario, pts: &[Measured]) -> Option<Fit> {
    if pts.is_empty() {
        return None;
    }
    // The fit starts from the model's own figures, without an early release's step scale
    // (`apply` drops it: the fitted factors take its place).
    let base = Engine { release_step_scale: 1.0, ..s.engine };
    // The fitted overhead is the whole per-step overhead with graphs (the per-layer floor folded in).
    let graphs = Scenario { engine: Engine { cuda_graphs: true, ..base }, ..s.clone() };
    let (mut mem, mut over, mut comm) = (1.0f64, graphs.overhead_ms(), base.comm_scale);
    let fit_comm = pts.len() >= 4;
    // Past the scale that brings the slowest stream to the peak, every rate is capped.
    let q = &s.quant;
    let slowest = [q.attention, q.dense_ffn, q.shared_experts, q.embeddings]
        .into_iter()
        .map(|dt| s.dense_stream_efficiency(dt))
        .chain([s.expert_stream_efficiency(), base.hbm_efficiency])
        .fold(1.0f64, f64::min);
    let mem_max = base.stream_scale / slowest;
    let mut step = [0.5f64, 2.0, 0.5];
    for _ in 0..60 {
        for k in 0..3 {
            if k == 2 && !fit_comm {
                continue;
            }
            let cur = loss(s, pts, apply(&base, mem, over, comm));
            let mut best = (cur, 0.0);
            for dir in [-1.0, 1.0] {
                let (m2, o2, c2) = match k {
                    0 => ((mem * (1.0 + dir * step[0])).clamp(0.05, mem_max), over, comm),
                    1 => (mem, (over + dir * step[1]).clamp(0.0, 200.0), comm),
                    _ => (mem, over, (comm * (1.0 + dir * step[2])).clamp(0.1, 10.0)),
                };
                let l = loss(s, pts, apply(&base, m2, o2, c2));
                if l < best.0 {
                    best = (l, dir);
                }
            }
            if best.1 != 0.0 {
                match k {
                    0 => mem = (mem * (1.0 + best.1 * step[0])).clamp(0.05, mem_max),
                    1 => over = (over + best.1 * step[1]).clamp(0.0, 200.0),
                    _ => comm = (comm * (1.0 + best.1 * step[2])).clamp(0.1, 10.0),
                }
            } else {
                step[k] /= 2.0;
            }
        }
    }
    let engine = apply(&base, mem, over, comm);
    let sc = Scenario { engine, ..s.clone() };
    let residuals = pts
        .iter()
        .map(|m| {
            let p = sc.point(m.concurrency).output_tokens_per_s;
            Residual {
                concurrency: m.concurrency,
                measured: m.output_tokens_per_s,
                predicted: p,
                error: (p - m.output_tokens_per_s) / m.output_tokens_per_s,
            }
        })
        .collect();
    Some(Fit {
        memory_efficiency_scale: mem,
        step_overhead_ms: over,
        comm_scale: comm,
        engine,
        residuals,
        rms_log_error: loss(s, pts, engine).sqrt(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::tests::scenario;
    use crate::quant::Dtype;

    /// "Measurements" of `truth` at concurrencies 1 to 128.
    fn measured_from(truth: &Scenario) -> Vec<Measured> {
        [1, 8, 32, 64, 128].iter().map(|&c| Measured { concurrency: c, output_tokens_per_s: truth.point(c).output_tokens_per_s }).collect()
    }

    #[test]
    fn fit_recovers_a_known_engine() {
        let s = scenario("deepseek-v3", Dtype::Fp8, "h200", "nvlink", 8, 8);
        // "Measurements" from a slower engine: 70% memory efficiency, 4 ms overhead, 1.5x comm.
        let pts = measured_from(&Scenario { engine: apply(&s.engine, 0.7, 4.0, 1.5), ..s.clone() });
        let f = fit(&s, &pts).expect("fit");
        assert!(f.rms_log_error < 0.01, "{f:?}");
        assert!(f.residuals.iter().all(|r| r.error.abs() < 0.02), "{:?}", f.residuals);
    }

    #[test]
    fn a_calibration_replaces_an_early_releases_step_scale_and_still_fits() {
        let mut s = scenario("deepseek-v3", Dtype::Fp8, "h200", "nvlink", 8, 8);
        s.engine.release_step_scale = 2.2;
        assert_eq!(apply(&s.engine, 1.0, 5.0, 1.0).release_step_scale, 1.0);
        // Measurements of a box slower than the model: the fit finds factors at scale 1.
        let pts = measured_from(&Scenario { engine: apply(&s.engine, 0.5, 9.0, 2.0), ..s.clone() });
        let f = fit(&s, &pts).expect("fit");
        assert_eq!(f.engine.release_step_scale, 1.0);
        assert!(f.rms_log_error < 0.01, "{f:?}");
    }
}
