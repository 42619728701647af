//! The measured decode split beside the performance model's predicted one, and the largest
//! mismatch between them in words.

use serde::Serialize;

use crate::report::{PhaseSummary, TraceReport};
use crate::{Category, Phase};

/// The model's decode step, by term, ms (from `servetune_model`'s `StepMs`, kept free of that crate).
#[derive(Debug, Clone, Serialize)]
pub struct Predicted {
    /// The plan, in words.
    pub label: String,
    /// The concurrency the prediction is for.
    pub concurrency: u32,
    /// Reading weights.
    pub weights_ms: f64,
    /// Reading the KV cache.
    pub kv_ms: f64,
    /// Tensor-core compute.
    pub compute_ms: f64,
    /// Collectives.
    pub communication_ms: f64,
    /// Host overhead.
    pub overhead_ms: f64,
    /// The decode step without the amortized prefill share.
    pub step_ms: f64,
    /// All-reduces one GPU runs per decode step in the model (TP all-reduces and q/k-norm
    /// all-reduces; null when the prediction does not say; since schema minor 2).
    pub allreduces_per_step: Option<f64>,
}

/// A row of the side-by-side table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Term {
    /// NCCL, custom and fused all-reduce kernels.
    Communication,
    /// Dense and MoE GEMMs with routing: the weight reads (or compute) of the model.
    Matmul,
    /// Attention: the KV reads.
    Attention,
    /// Norms, element-wise, copies and unknown kernels: the model has no term for them.
    OtherKernels,
    /// GPU idle inside the step: host overhead.
    HostOverhead,
}

impl Term {
    /// The row in words.
    pub fn words(self) -> &'static str {
        match self {
            Term::Communication => "the all-reduce (communication)",
            Term::Matmul => "GEMM work (weights and compute)",
            Term::Attention => "attention (KV reads)",
            Term::OtherKernels => "norm, element-wise and copy work",
            Term::HostOverhead => "host overhead (GPU idle)",
        }
    }
}

/// One term, predicted and measured.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The term.
    pub term: Term,
    /// Predicted, ms per decode step.
    pub predicted_ms: f64,
    /// Predicted share of the step, %.
    pub predicted_pct: f64,
    /// Measured, ms per decode step.
    pub measured_ms: f64,
    /// Measured share of the step, %.
    pub measured_pct: f64,
}

/// The comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The prediction compared.
    pub predicted: Predicted,
    /// Measured mean decode step, ms.
    pub measured_step_ms: f64,
    /// The terms.
    pub rows: Vec<Row>,
    /// The row whose shares differ most.
    pub largest_mismatch: Term,
    /// That mismatch in words.
    pub summary: String,
    /// All-reduce kernels per decode step, measured against the model's count (null when the
    /// prediction gives no count; since schema minor 2).
    pub allreduce_calls: Option<AllreduceCheck>,
}

/// All-reduce calls per decode step, measured and in the model.
#[derive(Debug, Clone, Serialize)]
pub struct AllreduceCheck {
    /// The model's all-reduces per step.
    pub predicted_per_step: f64,
    /// NCCL all-reduce, custom and fused all-reduce kernels per measured step.
    pub measured_per_step: f64,
    /// The two in words.
    pub summary: String,
}

fn allreduce_check(predicted: f64, measured: f64) -> AllreduceCheck {
    // Under PP the model spreads a pass's once-only collectives (the embedding's all-reduce) over
    // the stages, so its count per stage step can be fractional: a stage's trace holds the whole
    // number below or above it.
    let near = |n: f64| (n - measured).abs() < 0.5;
    let summary = if near(predicted) || (predicted.fract() > 1e-9 && (near(predicted.floor()) || near(predicted.ceil()))) {
        format!("{measured:.1} all-reduces per decode step, as the model counts")
    } else if measured < 0.5 {
        format!(
            "no all-reduce kernel in the decode steps against {predicted:.0} in the model (one GPU, or a trace of another rank or stream?)"
        )
    } else {
        format!(
            "{measured:.1} all-reduces per decode step measured against {predicted:.0} in the model ({:+.0}%)",
            100.0 * (measured - predicted) / predicted.max(1e-9)
        )
    };
    AllreduceCheck { predicted_per_step: predicted, measured_per_step: measured, summary }
}

fn measured(p: &PhaseSummary, term: Term) -> f64 {
    // + 0.0: an empty f64 sum is -0.0, which would print as "-0".
    let sum = |f: &dyn Fn(Category) -> bool| p.categories.iter().filter(|c| f(c.category)).map(|c| c.ms).sum::<f64>() + 0.0;
    match term {
        Term::Communication => sum(&|c| c.is_communication()),
        Term::Matmul => sum(&|c| matches!(c, Category::DenseGemm | Category::MoeGemm | Category::MoeRouting)),
        Term::Attention => sum(&|c| c == Category::Attention),
        Term::OtherKernels => sum(&|c| matches!(c, Category::NormElementwise | Category::MemcpyMemset | Category::Other)),
        Term::HostOverhead => p.idle_ms,
    }
}

/// Sets `predicted` beside the report's decode steps (all steps' phase when there is no decode).
pub fn compare(r: &TraceReport, predicted: Predicted) -> Option<Comparison> {
    let p = r.phases.iter().find(|p| p.phase == Phase::Decode).or_else(|| r.phases.first())?;
    // The memory-or-compute part of the step, split between GEMM and attention as weights and KV
    // bytes split the reads.
    let mem = predicted.weights_ms + predicted.kv_ms;
    let body = mem.max(predicted.compute_ms);
    let (mm, attn) = if mem > 0.0 { (body * predicted.weights_ms / mem, body * predicted.kv_ms / mem) } else { (body, 0.0) };
    let rows: Vec<Row> = [
        (Term::Communication, predicted.communication_ms),
        (Term::Matmul, mm),
        (Term::Attention, attn),
        (Term::OtherKernels, 0.0),
        (Term::HostOverhead, predicted.overhead_ms),
    ]
    .into_iter()
    .map(|(term, pred)| {
        let m = measured(p, term);
        Row { term, predicted_ms: pred, predicted_pct: share(pred, predicted.step_ms), measured_ms: m, measured_pct: share(m, p.mean_ms) }
    })
    .collect();
    let worst = rows.iter().max_by(|a, b| (a.measured_pct - a.predicted_pct).abs().total_cmp(&(b.measured_pct - b.predicted_pct).abs()))?;
    let mut summary = format!(
        "{} takes {:.0}% measured against {:.0}% predicted ({:.2} ms against {:.2} ms per decode step)",
        capitalized(worst.term.words()),
        worst.measured_pct,
        worst.predicted_pct,
        worst.measured_ms,
        worst.predicted_ms
    );
    if (worst.measured_pct - worst.predicted_pct).abs() < AGREE_POINTS {
        summary =
            format!("the split agrees with the prediction within {AGREE_POINTS:.0} points of the step; closest to a mismatch: {summary}");
    }
    let allreduce_calls = predicted.allreduces_per_step.map(|n| allreduce_check(n, p.allreduce_calls_per_step));
    Some(Comparison { measured_step_ms: p.mean_ms, largest_mismatch: worst.term, summary, rows, predicted, allreduce_calls })
}

/// Shares closer than this (percentage points of the step) are called agreeing: a trace's
/// step-to-step variation alone moves a term's share by about a point.
pub const AGREE_POINTS: f64 = 2.0;

fn share(ms: f64, step: f64) -> f64 {
    if step > 0.0 {
        100.0 * ms / step
    } else {
        0.0
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().chain(c).collect()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::allreduce_check;

    #[test]
    fn the_all_reduce_count_agrees_within_half_a_call_or_with_a_stage_of_a_fractional_count() {
        let agrees = |p: f64, m: f64| allreduce_check(p, m).summary.ends_with("as the model counts");
        assert!(agrees(161.0, 161.0) && agrees(161.0, 160.6));
        assert!(!agrees(161.0, 160.0) && !agrees(161.0, 17.0));
        // PP2: 80.5 per stage step (the embedding's all-reduce spread over the stages); the
        // first stage's trace holds 81, the second's 80.
        assert!(agrees(80.5, 81.0) && agrees(80.5, 80.0));
        assert!(!agrees(80.5, 79.0) && !agrees(80.5, 82.0));
        let off = allreduce_check(161.0, 17.0);
        assert!(off.summary.contains("17.0 all-reduces per decode step measured against 161 in the model (-89%)"), "{}", off.summary);
        assert!(allreduce_check(161.0, 0.0).summary.starts_with("no all-reduce kernel"));
    }
}
