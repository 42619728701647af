//! The bottleneck: the largest term of a step, with the numbers behind it.
//!
//! Of a step's terms, memory traffic (weights and KV) and compute do not add: the larger of the two
//! is the one that limits, and only it competes with communication, overhead and the prefill
//! share. The largest of those is the [`Bottleneck`], carrying its share of the step and what a
//! reader needs to act on it: for communication the TP size, the link, the all-reduces per step
//! and the cost of one (and the network when the TP group or the pipeline crosses nodes); for
//! weights the bytes per GPU, the distinct experts read and the GPU's bandwidth; for the KV cache
//! its bytes; for compute the GEMM format; for overhead whether CUDA graphs run. The renderers
//! put it in words; the ranking of fixes starts from it.

use serde::Serialize;

use super::{Across, QkGathers, QkNormAllReduces, Scenario, StepDetail, StepMs};
use crate::quant::ComputeFormat;

/// The step terms, for picking the largest.
#[derive(Debug, Clone, Copy)]
pub(super) enum Term {
    Communication,
    Weights,
    Kv,
    Compute,
    Overhead,
    Prefill,
}

/// What limits a step, with the numbers behind it. `share` is the term's fraction of the step
/// and `step_ms` the whole step, ms.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Bottleneck {
    /// TP all-reduces (or EP all-to-alls).
    Communication {
        /// Fraction of the step.
        share: f64,
        /// The step, ms.
        step_ms: f64,
        /// TP degree.
        tp: u32,
        /// The link's name.
        link: String,
        /// All-reduces per step (all stages).
        allreduces: f64,
        /// One all-reduce, us.
        allreduce_us: f64,
        /// The q/k norm's own small all-reduces (MiniMax-M2), when the model has them.
        #[serde(skip_serializing_if = "Option::is_none")]
        qk_norm: Option<QkNormAllReduces>,
        /// The q and k all-gathers of a q/k norm over the whole projections (OLMo), when the
        /// model has them.
        #[serde(skip_serializing_if = "Option::is_none")]
        qk_gathers: Option<QkGathers>,
        /// The LM head's all-gather of the step's logits, us per step (all stages), under TP.
        #[serde(skip_serializing_if = "Option::is_none")]
        logits_gather_us: Option<f64>,
        /// Collectives that cross the network of a multi-node plan (absent on one node).
        #[serde(skip_serializing_if = "Option::is_none")]
        across: Option<Across>,
    },
    /// Reading weights from memory.
    Weights {
        /// Fraction of the step.
        share: f64,
        /// The step, ms.
        step_ms: f64,
        /// Weight bytes read per GPU per step, GB.
        gb_per_gpu: f64,
        /// Distinct experts per MoE layer (MoE models only).
        distinct_experts: Option<f64>,
        /// The experts are counted on the busiest EP rank.
        busiest_ep_rank: bool,
        /// Peak memory bandwidth, GB/s.
        mem_bw_gbs: f64,
    },
    /// Reading the KV cache.
    KvCache {
        /// Fraction of the step.
        share: f64,
        /// The step, ms.
        step_ms: f64,
        /// KV bytes read per GPU per step, GB.
        gb_per_gpu: f64,
    },
    /// Tensor-core compute.
    Compute {
        /// Fraction of the step.
        share: f64,
        /// The step, ms.
        step_ms: f64,
        /// The experts' GEMM format.
        format: ComputeFormat,
    },
    /// Host overhead per step.
    Overhead {
        /// Fraction of the step.
        share: f64,
        /// The step, ms.
        step_ms: f64,
        /// The overhead, ms.
        overhead_ms: f64,
        /// Whether CUDA graphs are on.
        cuda_graphs: bool,
    },
    /// Prefill mixed into decode steps.
    Prefill {
        /// Fraction of the step.
        share: f64,
        /// The step, ms.
        step_ms: f64,
    },
}

impl Bottleneck {
    /// The term's fraction of the step.
    pub fn share(&self) -> f64 {
        match self {
            Bottleneck::Communication { share, .. }
            | Bottleneck::Weights { share, .. }
            | Bottleneck::KvCache { share, .. }
            | Bottleneck::Compute { share, .. }
            | Bottleneck::Overhead { share, .. }
            | Bottleneck::Prefill { share, .. } => *share,
        }
    }
}

impl Scenario {
    /// The dominant term of a point's step, with its numbers (the renderer puts it in words).
    pub fn bottleneck(&self, s: &StepMs, d: &StepDetail) -> Bottleneck {
        let share = |v: f64| if s.total > 0.0 { v / s.total } else { 0.0 };
        let pp = self.plan.pp as f64;
        let mem = s.weights + s.kv;
        let mem_bound = mem >= s.compute;
        let terms = [
            (Term::Communication, s.communication),
            (Term::Weights, if mem_bound { s.weights } else { 0.0 }),
            (Term::Kv, if mem_bound { s.kv } else { 0.0 }),
            (Term::Compute, if mem_bound { 0.0 } else { s.compute }),
            (Term::Overhead, s.overhead),
            (Term::Prefill, s.prefill),
        ];
        let (term, v) = terms.into_iter().fold((Term::Overhead, f64::NEG_INFINITY), |a, b| if b.1 > a.1 { b } else { a });
        let step_ms = s.total;
        match term {
            Term::Communication => Bottleneck::Communication {
                share: share(v),
                step_ms,
                tp: self.plan.tp,
                link: self.link.name.clone(),
                allreduces: d.allreduces * pp,
                allreduce_us: d.allreduce_us * self.engine.comm_scale,
                qk_norm: (d.qk_norm_allreduces > 0.0)
                    .then_some(QkNormAllReduces { count: d.qk_norm_allreduces * pp, us: d.qk_norm_allreduce_us * self.engine.comm_scale }),
                qk_gathers: (d.qk_gathers > 0.0)
                    .then_some(QkGathers { count: d.qk_gathers * pp, us: d.qk_gather_us * pp * self.engine.comm_scale }),
                logits_gather_us: (d.logits_gather_us > 0.0).then_some(d.logits_gather_us * pp * self.engine.comm_scale),
                across: self.across_nodes(),
            },
            Term::Weights => Bottleneck::Weights {
                share: share(v),
                step_ms,
                gb_per_gpu: d.weights_gb_per_gpu * pp,
                distinct_experts: self.model.moe.map(|_| d.distinct_experts),
                busiest_ep_rank: self.plan.ep > 1,
                mem_bw_gbs: self.gpu.mem_bw_gbs,
            },
            Term::Kv => Bottleneck::KvCache { share: share(v), step_ms, gb_per_gpu: d.kv_gb_per_gpu * pp },
            Term::Compute => Bottleneck::Compute { share: share(v), step_ms, format: self.quant.experts.compute() },
            Term::Prefill => Bottleneck::Prefill { share: share(v), step_ms },
            Term::Overhead => Bottleneck::Overhead { share: share(v), step_ms, overhead_ms: v, cuda_graphs: self.engine.cuda_graphs },
        }
    }
}
