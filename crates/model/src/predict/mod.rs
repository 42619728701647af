//! The performance model: memory fit per GPU, decode step time as a breakdown, prefill and TTFT,
//! curves over concurrency, the saturation point and the bottleneck in words.
//!
//! Decode step of one replica (tp x pp GPUs) at batch b, per pipeline stage and micro-batch x = b/pp:
//! - weights: attention, dense FFN and shared experts / tp; routed experts: the expected distinct
//!   experts E(1-(1-k/E)^x) / tp (experts split by TP), or per EP rank (E/ep)(1-(1-k/E)^x) times an
//!   imbalance factor (fitted: 1.0); LM head / tp;
//! - KV: each request's context (MLA latent replicated on every TP rank; DSA reads top-k latents plus
//!   every indexer key; GQA split over KV heads); a sliding-window layer holds and reads at most its
//!   window; a linear-attention layer (Gated DeltaNet, Mamba-2, KDA) holds a fixed state per request instead,
//!   read and written back once per step;
//! - compute: 2 x active parameters x tokens at the GEMM's format's TFLOPS, plus attention;
//! - communication: 2 TP all-reduces per layer as the engine runs them ([`crate::comm`]: custom
//!   one-shot/two-shot where used, else NCCL's cheapest algorithm and protocol); EP all-to-all; PP sends;
//! - overhead per step.
//!
//! Overlap rule (named `Overlap`): `None` gives step = max(weights + kv, compute) + communication +
//! overhead + prefill share; `Full` hides communication under the larger of memory and compute.
//!
//! This file holds the inputs and outputs: the parallelism [`Plan`], the [`Scenario`] a
//! prediction runs on, and what it returns per concurrency ([`Point`], with its [`StepMs`] and
//! [`StepDetail`]). The methods of [`Scenario`] are spread over the files of this module by concern:
//!
//! - `memory`: the memory fit: weight bytes on the busiest GPU, KV bytes per token (MLA, GQA, DSA
//!   indexer keys, sliding windows) and linear-attention state per request, the KV capacity left,
//!   and how many requests run at once.
//! - `step`: the decode step's terms: the weights and KV one GPU reads, at the streaming rates of
//!   the kernel tables or the engine's figures, the compute, and one stage's step assembled by
//!   the overlap rule; [`Scenario::point`] turns it into throughput, TPOT and TTFT.
//! - `collectives`: all-reduces of the TP group (custom or NCCL, within a node or across the
//!   network), a q/k norm's extra all-reduces, EP all-to-alls and pipeline sends, and where a
//!   multi-node plan crosses the network.
//! - `prefill`: the per-step overhead (fixed, per kernel, per request, launches without CUDA
//!   graphs), the kernels a step runs, and prefill time as a pass of its own or inside a decode step.
//! - `bottleneck`: the largest term of a step, with the numbers a reader needs ([`Bottleneck`]).
//! - `limits`: the engines' default batch limits ([`BatchDefaults`]): the running cap a scheduler
//!   keeps and the largest decode batch it replays as a CUDA graph, by release, GPU and plan.
//! - `engine`: the serving engine's behaviour the prediction assumes ([`Engine`], [`EngineName`])
//!   and the defaults, each naming its source.
//!
//! The public paths are this module's (`predict::Engine`, `predict::Bottleneck`, ...): callers do
//! not see the split.

mod bottleneck;
mod collectives;
mod engine;
mod limits;
mod mem_share;
mod memory;
mod prefill;
mod step;
#[cfg(test)]
pub(crate) mod tests;

pub use bottleneck::Bottleneck;
pub use collectives::{Across, QkGathers, QkNormAllReduces};
pub use engine::{
    distinct_expert_fraction, AiterCut, Engine, EngineName, EngineRelease, ReleaseFeature, ShareCuts, VisionCut, CDNA3_FLOOR_SCALE,
    EARLY_RELEASES_END, EARLY_RELEASE_STEP_SCALE, SGLANG_CHECKPOINT_KV, SGLANG_PIECEWISE_DEFAULT, SGLANG_REQUEST_LATENCY_MS,
    TRTLLM_MEM_FRACTION, TRTLLM_REQUEST_LATENCY_MS, VLLM_CHECKPOINT_KV, VLLM_GPU_MEMORY_UTILIZATION, VLLM_REQUEST_LATENCY_MS,
    VLLM_V1_DEFAULT,
};
pub use limits::{BatchDefaults, StatePool, StatePoolRelease, StateSlots, SGLANG_STATE_TO_KV};
pub use mem_share::MemShare;
pub use memory::{Memory, RunningLimit};
pub use prefill::{prefill_gemm_efficiency, PrefillPass, PREFILL_MOE_EFFICIENCY};
pub use step::hopper_fp8_kv_efficiency;

use serde::Serialize;

use crate::hw::{Cluster, GpuSpec, LinkProfile};
use crate::quant::Quant;
use crate::spec::ModelSpec;
use crate::ModelError;

/// How the model is split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// GPUs in the deployment.
    pub gpus: u32,
    /// Tensor parallelism.
    pub tp: u32,
    /// Pipeline parallelism.
    pub pp: u32,
    /// Expert parallelism within the TP group (1: every expert split over TP ranks).
    pub ep: u32,
    /// Attention data-parallel over the TP ranks (each rank serves its own requests).
    pub dp_attention: bool,
}

impl Plan {
    /// Independent replicas.
    pub fn dp(&self) -> u32 {
        (self.gpus / (self.tp * self.pp)).max(1)
    }

    /// The plan as a reader writes it, e.g. `TP4+PP2 x2 replicas`.
    pub fn label(&self) -> String {
        let mut s = format!("TP{}", self.tp);
        if self.pp > 1 {
            s += &format!("+PP{}", self.pp);
        }
        if self.ep > 1 {
            s += &format!("+EP{}", self.ep);
        }
        if self.dp_attention {
            s += "+DPattn";
        }
        if self.dp() > 1 {
            s += &format!(" x{} replicas", self.dp());
        }
        s
    }

    /// Refuses a plan that does not divide the GPUs or the model, with the fix.
    pub fn check(&self, model: &ModelSpec) -> Result<(), ModelError> {
        if self.tp == 0 || self.pp == 0 || self.ep == 0 {
            return Err(ModelError::Input("--tp, --pp and --ep must be at least 1".into()));
        }
        if self.tp * self.pp > self.gpus {
            return Err(ModelError::Input(format!(
                "the plan needs tp x pp = {} x {} = {} GPUs but --gpus is {}: lower --tp/--pp or raise --gpus",
                self.tp,
                self.pp,
                self.tp * self.pp,
                self.gpus
            )));
        }
        if !self.gpus.is_multiple_of(self.tp * self.pp) {
            return Err(ModelError::Input(format!(
                "--gpus {} is not a multiple of tp x pp = {}: replicas must be whole",
                self.gpus,
                self.tp * self.pp
            )));
        }
        if self.pp > model.layers {
            return Err(ModelError::Input(format!("--pp {} is more than the model's {} layers", self.pp, model.layers)));
        }
        let heads = match model.attention {
            crate::spec::Attention::Gqa { heads, .. } | crate::spec::Attention::Mla { heads, .. } => heads,
        };
        if !self.dp_attention && self.tp > heads {
            return Err(ModelError::Input(format!(
                "--tp {} is more than the model's {heads} attention heads: each rank would hold less than one head (sglang and vLLM refuse it); lower --tp, or add --dp-attention",
                self.tp
            )));
        }
        if let Some(la) = model.linear.filter(|la| la.mixer != crate::spec::LinearMixer::GatedDeltaNet) {
            if !la.value_heads.is_multiple_of(self.tp) {
                let what = if la.mixer == crate::spec::LinearMixer::Kda { "KDA" } else { "Mamba-2" };
                return Err(ModelError::Input(format!(
                    "--tp {} does not divide the model's {} {what} heads (vLLM and sglang shard them evenly): pick a --tp that divides {}",
                    self.tp, la.value_heads, la.value_heads
                )));
            }
        }
        // Grouped-query attention's heads are split evenly over the ranks (vLLM and sglang assert
        // it); MLA keeps the bound above only: public sglang measurements of DeepSeek-R1 at TP72
        // on GB200 (AIConfigurator's silicon rows) say its MLA runs there.
        if let crate::spec::Attention::Gqa { kv_heads, .. } = model.attention {
            if !self.dp_attention && !heads.is_multiple_of(self.tp) {
                return Err(ModelError::Input(format!(
                    "--tp {} does not divide the model's {heads} attention heads (vLLM and sglang shard them evenly and refuse it): pick a --tp that divides {heads}",
                    self.tp
                )));
            }
            // Fewer KV heads than ranks are replicated, a whole number of ranks each; more are split.
            let even = if self.tp >= kv_heads { self.tp.is_multiple_of(kv_heads.max(1)) } else { kv_heads.is_multiple_of(self.tp) };
            if !self.dp_attention && !even {
                return Err(ModelError::Input(format!(
                    "--tp {} does not split the model's {kv_heads} key/value heads evenly (vLLM's and sglang's QKV projection needs --tp to divide them, or to be a multiple of them): pick another --tp",
                    self.tp
                )));
            }
        }
        if self.ep > 1 && (model.moe.is_none() || !self.tp.is_multiple_of(self.ep)) {
            return Err(ModelError::Input(format!("--ep {} needs an MoE model and must divide --tp {}", self.ep, self.tp)));
        }
        Ok(())
    }
}

/// Whether `engine` has a data-parallel attention path for `model`: sglang's Kimi Linear
/// (`kimi_linear.py`, adapted from vLLM's) shards its KDA layers over the whole TP group and has
/// none; vLLM's DP attention is data parallelism at TP1, which any model runs.
pub fn dp_attention_runs(model: &ModelSpec, engine: EngineName) -> bool {
    !(engine == EngineName::Sglang && model.linear.is_some_and(|la| la.mixer == crate::spec::LinearMixer::Kda))
}

/// Whether communication hides behind compute and memory traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Communication adds to the step.
    None,
    /// Communication hides under the larger of memory and compute.
    Full,
}

impl Overlap {
    /// The name `--overlap` takes.
    pub fn name(self) -> &'static str {
        match self {
            Overlap::None => "none",
            Overlap::Full => "full",
        }
    }

    /// Parses `none` or `full` given to `flag`.
    pub fn parse(flag: &str, s: &str) -> Result<Self, ModelError> {
        match s {
            "none" => Ok(Overlap::None),
            "full" => Ok(Overlap::Full),
            _ => Err(ModelError::Input(format!("{flag}: use none or full"))),
        }
    }
}

/// Everything a prediction needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    /// The model.
    pub model: ModelSpec,
    /// Its formats.
    pub quant: Quant,
    /// The GPU.
    pub gpu: GpuSpec,
    /// The link between GPUs.
    pub link: LinkProfile,
    /// The parallelism plan.
    pub plan: Plan,
    /// Engine behaviour.
    pub engine: Engine,
    /// Prompt tokens per request.
    pub input_len: u32,
    /// Output tokens per request.
    pub output_len: u32,
    /// The server's running-request limit, if any.
    pub max_running: Option<u32>,
    /// The nodes and network of a multi-node deployment (None: one node, `link` joins every GPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<Cluster>,
    /// The box's measured NCCL all-reduce (`--allreduce`), which prices the TP all-reduces NCCL
    /// runs within a node in place of the model ([`Scenario::tp_allreduce`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_allreduce: Option<std::sync::Arc<crate::comm::MeasuredAllReduce>>,
    /// The plan whose measurement the engine was calibrated on (`plan --calibrate`), if any: its
    /// predictions then carry the calibrated interval of that plan, or of another plan priced
    /// with its calibration ([`crate::interval::for_scenario`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibrated_on: Option<Plan>,
}

/// One step's time, by term, ms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct StepMs {
    /// Reading weights.
    pub weights: f64,
    /// Reading the KV cache.
    pub kv: f64,
    /// Tensor-core compute.
    pub compute: f64,
    /// Collectives and pipeline sends.
    pub communication: f64,
    /// Host overhead.
    pub overhead: f64,
    /// Share of prefill work mixed into each decode step (chunked prefill).
    pub prefill: f64,
    /// The step, by the overlap rule.
    pub total: f64,
}

/// Details behind the step terms, for the explanation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct StepDetail {
    /// All-reduces per stage step.
    pub allreduces: f64,
    /// One all-reduce, us (before comm_scale).
    pub allreduce_us: f64,
    /// The q/k norm's own all-reduces per stage step ([`ModelSpec::qk_norm_across_heads`]).
    pub qk_norm_allreduces: f64,
    /// One of them, us (before comm_scale).
    pub qk_norm_allreduce_us: f64,
    /// The q and k all-gathers per stage step ([`ModelSpec::qk_norm_gathered`]).
    pub qk_gathers: f64,
    /// All of them, us (before comm_scale).
    pub qk_gather_us: f64,
    /// The LM head's logits all-gather, us per stage step (before comm_scale; the gather over PP).
    pub logits_gather_us: f64,
    /// Distinct experts touched per MoE layer (busiest EP rank with EP).
    pub distinct_experts: f64,
    /// Weight bytes read per GPU per stage step, GB.
    pub weights_gb_per_gpu: f64,
    /// KV bytes read per GPU per stage step, GB.
    pub kv_gb_per_gpu: f64,
}

/// The prediction at one concurrency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// Requests offered (closed loop).
    pub concurrency: u32,
    /// Requests actually running (concurrency capped by KV capacity and the running limit).
    pub running: u32,
    /// Output tokens/s of the whole deployment.
    pub output_tokens_per_s: f64,
    /// Prompt and output tokens/s.
    pub total_tokens_per_s: f64,
    /// Time per output token, ms.
    pub tpot_ms: f64,
    /// Time to first token (prefill, first step, queueing), ms.
    pub ttft_ms: f64,
    /// Output tokens/s one request sees.
    pub per_user_tokens_per_s: f64,
    /// The step, by term.
    pub step_ms: StepMs,
    /// The numbers behind the terms.
    pub detail: StepDetail,
    /// The dominant term.
    pub bottleneck: Bottleneck,
    /// What a benchmark client would measure at this concurrency (the workload run in virtual time
    /// through [`crate::workload::VirtualBench`]); `None` when no virtual run was asked. The fields
    /// above are the steady state (every request running, prefill amortized).
    pub client: Option<crate::workload::ClientRun>,
}
