//! The performance model: memory fit per GPU, decode step time as a breakdown, prefill and TTFT,
//! curves over concurrency, the saturation point and the bottleneck in words.
//!
//! Decode step of one replica (tp x pp GPUs) at batch b, per pipeline stage and micro-batch x = b/pp:
//! - weights: attention, dense FFN and shared experts / tp; routed experts: the expected distinct
//!   experts E(1-(1-k/E)^x) / tp (experts split by TP), or per EP rank (E/ep)(1-(1-k/E)^x) times an
//!   imbalance factor (fitted: 1.0); LM head / tp;
//! - KV: each request's context (MLA latent replicated on every TP rank; DSA reads top-k latents plus
//!   every indexer key; GQA split over KV heads); a sliding-window layer holds and reads at most its
//!   window; a linear-attention (Gated DeltaNet) layer holds a fixed state per request instead,
//!   read and written back once per step;
//! - compute: 2 x active parameters x tokens at the GEMM's format's TFLOPS, plus attention;
//! - communication: 2 TP all-reduces per layer as the engine runs them ([`crate::comm`]: custom
//!   one-shot/two-shot where used, else NCCL's cheapest algorithm and protocol); EP all-to-all; PP sends;
//! - overhead per step.
//!
//! Overlap rule (named `Overlap`): `None` gives step = max(weights + kv, compute) + communication +
//! overhead + prefill share; `Full` hides communication under the larger of memory and compute.

use serde::{Deserialize, Serialize};

use crate::comm;
use crate::hw::{Cluster, GpuSpec, LinkKind, LinkProfile};
use crate::kernels::{prefill_attention_efficiency, PrefillAttention};
use crate::quant::{ComputeFormat, Dtype, KvDtype, Quant};
use crate::spec::{Attention, ModelSpec};
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
        if self.ep > 1 && (model.moe.is_none() || !self.tp.is_multiple_of(self.ep)) {
            return Err(ModelError::Input(format!("--ep {} needs an MoE model and must divide --tp {}", self.ep, self.tp)));
        }
        Ok(())
    }
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

/// [`Engine::cdna3_floor_scale`]'s default: fitted on the fit set's CDNA 3 rows (see there).
pub const CDNA3_FLOOR_SCALE: f64 = 2.6;

/// Engine behaviour the prediction assumes: every default names its source.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Engine {
    /// Per-step cost outside the modelled kernels that does not grow with the model's depth, ms
    /// (`--step-overhead-ms` sets it and drops [`Self::kernel_overhead_us`], so the flag gives
    /// the whole fixed per-step overhead; [`Self::request_step_us`], which grows with the batch,
    /// stays unless `--request-step-us` sets it). 0 by default: the fitted floor is per kernel.
    pub step_overhead_ms: f64,
    /// Per-step cost outside the modelled GEMMs, attention and collectives for each kernel a
    /// decode step runs with CUDA graphs, us: a small kernel's latency floor and the gap to the
    /// next (norms, rotary, routing, activations, quantization of activations, the collectives'
    /// launch), plus the host's share of the step spread over them. The kernels of a step are
    /// counted from the model's layers ([`Scenario::kernels_per_step`]: a dense GQA layer runs
    /// about 11, an MLA MoE layer with a shared expert 23, a DSA one 31), so the floor follows
    /// the architecture instead of one figure per layer. Chosen on the FIT set of e2e.toml (the
    /// argmin of its source-weighted median |error|, `validate::fit_objective`, over a grid with
    /// `moe_efficiency`; `validate::tests` checks it is the grid minimum), never the test set.
    pub kernel_overhead_us: f64,
    /// The launch floor of one GEMM that the kernel tables' latencies include and the per-step
    /// floor counts apart, us: the dense rates are taken net of it
    /// ([`crate::kernels::dense_decode_efficiency`]). The fitted per-kernel floor
    /// ([`Self::kernel_overhead_us`], refit together with it); a stated per-step overhead
    /// (`--step-overhead-ms`) or a calibrated one replaces the per-kernel floor but keeps this, so
    /// the GEMMs' floors then sit in the stated overhead, not twice.
    pub gemm_floor_us: f64,
    /// The per-kernel floor on AMD CDNA 3 (MI300X, MI325X) over [`Self::kernel_overhead_us`]: a
    /// multiplier, so a stated per-step overhead (which zeroes the per-kernel floor) drops it too.
    /// The fit set's CDNA 3 decode steps are a near-constant 13-14 ms above the NVIDIA-fitted
    /// floor at batch 4 and 8 alike (DeepSeek-R1, sglang 0.5.9 ROCm, TP8), which is a
    /// per-kernel floor, not a bandwidth rate; CDNA 4 (MI355X) fits at 1. Chosen on the FIT
    /// set's CDNA 3 rows only (`validate::cdna3_floor_scan_on_the_fit_set`), never the test set.
    pub cdna3_floor_scale: f64,
    /// Decode runs as CUDA graphs (no per-kernel launch cost).
    pub cuda_graphs: bool,
    /// Steps that carry prompt tokens run as CUDA graphs too ([`EngineName::graphs_prefill`]):
    /// vLLM V1 and sglang (since 0.5.10) replay piecewise graphs for them; TensorRT-LLM runs its
    /// context and mixed iterations (and sglang before 0.5.10 its prefill passes) eagerly by
    /// default, so such a step pays each kernel's launch ([`Self::launch_us`]) on top of the
    /// graph-mode floor.
    pub prefill_graphs: bool,
    /// Without CUDA graphs: the host's launch latency per kernel on top of
    /// [`Self::kernel_overhead_us`], us (CUDA launch ~4 us; an assumption).
    pub launch_us: f64,
    /// Per-step cost of each request running in a decode step, us: the work that grows with the
    /// batch outside the modelled GEMMs, attention reads and collectives (the scheduler's
    /// per-request bookkeeping, sampling, stop checks and output streaming, and the small
    /// element-wise kernels' growth with the batch). Without it the fit set's decode steps were
    /// short by more the larger the batch (TPOT under-predicted by a median of 4-11% at c <= 4
    /// and 13-17% above c = 32 on sglang and TensorRT-LLM rows). Chosen on the FIT set with
    /// [`Self::kernel_overhead_us`] and [`Self::moe_efficiency`] (the argmin of
    /// `validate::fit_objective` on a 2.5 us grid; `validate::tests` checks its neighbours),
    /// never the test set: 22.5 us in step 22, 25 us since [`Self::ep_imbalance`] was fitted in
    /// step 23; one figure for every engine and GPU (the fit set cannot tell them
    /// apart: one source each). A stated `--step-overhead-ms` leaves it in place;
    /// `--request-step-us` replaces it.
    pub request_step_us: f64,
    /// Whether communication hides behind compute.
    pub overlap: Overlap,
    /// Achieved fraction of peak memory bandwidth reading the KV cache where kernels.toml has no
    /// decode-attention rate (all but FP8 GQA on Hopper and dense MLA on the tables' GPUs:
    /// `Scenario::kv_read_efficiency`), and dense weights on a GPU or in a format it has no GEMM
    /// rate for ([`Scenario::dense_stream_efficiency`]); an assumption, typical of decode GEMV kernels.
    pub hbm_efficiency: f64,
    /// Achieved fraction of peak bandwidth reading expert weights in fused-MoE kernels at decode
    /// batch sizes, on a GPU or in a format kernels.toml has no MoE rate for (AMD, MXFP4:
    /// [`Self::moe_table`]); chosen on the FIT set of e2e.toml with `kernel_overhead_us`, see there.
    pub moe_efficiency: f64,
    /// Achieved fraction of peak tensor TFLOPS in decode steps (a torch BF16 GEMM reached 417 of 468
    /// TFLOPS on the reference RTX PRO 6000); prefill uses [`prefill_gemm_efficiency`] and
    /// [`PREFILL_MOE_EFFICIENCY`] from the kernel tables.
    pub gemm_efficiency: f64,
    /// Multiplier on modelled communication time (1 = the NCCL alpha-beta model; fitted by `--calibrate`).
    pub comm_scale: f64,
    /// Distinct experts the busiest EP rank reads over the mean rank's expected count under uniform
    /// routing. 1.0: chosen on the FIT set (the argmin of `validate::fit_objective` over 1.0..1.3
    /// by 0.05, each value with the per-kernel floor, the MoE efficiency and the per-request cost
    /// re-chosen; `validate::tests::ep_imbalance_scan_on_the_fit_set`, VALIDATION.md step 23),
    /// never the test set. The fit set's 168 rows with EP see no net excess: skewed routing loads
    /// the busiest rank more but also leaves fewer experts touched, and the two cancel there. It
    /// was 1.2, an assumption with no source, until step 23.
    pub ep_imbalance: f64,
    /// Share of GPU memory the engine may use (sglang's --mem-fraction-static is about 0.88 on large GPUs).
    pub mem_fraction: f64,
    /// Activation and workspace memory reserved per GPU, GB (an assumption).
    pub workspace_gb: f64,
    /// Time a request spends on the serving path outside the GPU's steps, between the client
    /// sending it and its first token reaching the client (HTTP, tokenization, the hand-offs to
    /// and from the scheduler, streaming), ms. It adds to the TTFT a client measures and to
    /// nothing else: the GPU's steps and the virtual run's closed loop run without it (placed in
    /// front of the engine, it shifted the closed loop's lockstep at c=64 and moved TTFT by far
    /// more than itself: VALIDATION.md, step 7). Default: sglang's
    /// ([`SGLANG_REQUEST_LATENCY_MS`]); [`EngineName::request_latency_ms`] gives each engine's.
    pub request_latency_ms: f64,
    /// Prefill tokens ride inside decode steps (vLLM V1's chunked prefill, sglang's
    /// --enable-mixed-chunk) instead of running as their own passes (sglang's default).
    pub mixed_prefill: bool,
    /// Decode reads expert weights at the kernel tables' fused-MoE rate
    /// ([`crate::kernels::moe_decode_efficiency`]) where kernels.toml has one, else at
    /// [`Self::moe_efficiency`]; a stated MoE efficiency (`moe-efficiency=` in `--from-plan`
    /// pairs, `sim --moe-efficiency`) turns it off.
    pub moe_table: bool,
    /// Multiplier on every memory-streaming rate (table or engine figure, capped at the peak):
    /// 1 unless `--calibrate` fitted it.
    pub stream_scale: f64,
    /// The serving engine whose defaults these are ([`EngineName::defaults`]).
    pub serving: EngineName,
}

impl Default for Engine {
    fn default() -> Self {
        Self {
            step_overhead_ms: 0.0,
            kernel_overhead_us: 4.5,
            gemm_floor_us: 4.5,
            cdna3_floor_scale: CDNA3_FLOOR_SCALE,
            cuda_graphs: true,
            prefill_graphs: true,
            launch_us: 4.0,
            request_step_us: 25.0,
            overlap: Overlap::None,
            hbm_efficiency: 0.80,
            moe_efficiency: 0.75,
            gemm_efficiency: 0.89,
            comm_scale: 1.0,
            ep_imbalance: 1.0,
            mem_fraction: 0.88,
            workspace_gb: 3.0,
            request_latency_ms: SGLANG_REQUEST_LATENCY_MS,
            mixed_prefill: false,
            moe_table: true,
            stream_scale: 1.0,
            serving: EngineName::Sglang,
        }
    }
}

/// The serving engine a deployment runs (`plan --engine`, e2e.toml's `engine`): what the model
/// sets by it is in [`EngineName::defaults`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineName {
    /// SGLang (the default).
    #[default]
    Sglang,
    /// vLLM (V1).
    Vllm,
    /// TensorRT-LLM.
    Trtllm,
}

impl EngineName {
    /// Every engine.
    pub const ALL: [EngineName; 3] = [EngineName::Sglang, EngineName::Vllm, EngineName::Trtllm];

    /// The engine's per-request serving-path latency, ms ([`Engine::request_latency_ms`]).
    pub fn request_latency_ms(self) -> f64 {
        match self {
            EngineName::Sglang => SGLANG_REQUEST_LATENCY_MS,
            EngineName::Vllm => VLLM_REQUEST_LATENCY_MS,
            EngineName::Trtllm => TRTLLM_REQUEST_LATENCY_MS,
        }
    }

    /// Whether the engine puts new prompts' tokens into the running decode steps by default
    /// (vLLM V1's chunked prefill, TensorRT-LLM's in-flight batching) rather than running them as
    /// passes of their own (sglang's default; `--enable-mixed-chunk` changes it).
    pub fn mixes_prefill(self) -> bool {
        matches!(self, EngineName::Vllm | EngineName::Trtllm)
    }

    /// Whether the engine's current default CUDA graphs cover steps that carry prompt tokens:
    /// vLLM V1's default `FULL_AND_PIECEWISE` mode replays piecewise graphs (attention outside)
    /// for mixed batches up to its largest capture size (512 tokens by default; a step carrying a
    /// bigger prompt chunk runs eagerly, which the model does not price: optimistic there);
    /// sglang replays piecewise CUDA graphs for prefill by default since sglang PR 16331 (merged
    /// 2026-03-02, first in 0.5.10; before it, prefill passes ran eagerly:
    /// [`SGLANG_PIECEWISE_DEFAULT`]); TensorRT-LLM's PyTorch backend captures generation-only
    /// iterations (its docs: piecewise CUDA graph, off by default, is what covers "context-only
    /// and mixed context+generation iterations").
    pub fn graphs_prefill(self) -> bool {
        matches!(self, EngineName::Vllm | EngineName::Sglang)
    }

    /// The share of GPU memory the engine takes by default: vLLM's `--gpu-memory-utilization`
    /// ([`VLLM_GPU_MEMORY_UTILIZATION`]); sglang's `--mem-fraction-static` is about 0.88 on large
    /// GPUs, which TensorRT-LLM is given too (its KV share is of the memory left free, which the
    /// model does not track).
    pub fn mem_fraction(self) -> f64 {
        match self {
            EngineName::Vllm => VLLM_GPU_MEMORY_UTILIZATION,
            _ => Engine::default().mem_fraction,
        }
    }

    /// The engine's name as the flag and e2e.toml write it.
    pub fn name(self) -> &'static str {
        match self {
            EngineName::Sglang => "sglang",
            EngineName::Vllm => "vllm",
            EngineName::Trtllm => "trtllm",
        }
    }

    /// The engine named `s` (`sglang`, `vllm`, `trtllm`), if the model knows it.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.name() == s)
    }

    /// Parses an engine given to `flag` (`sglang`, `vllm`, `trtllm`).
    pub fn parse(flag: &str, s: &str) -> Result<Self, ModelError> {
        Self::from_name(s).ok_or_else(|| ModelError::Input(format!("{flag}: unknown engine {s:?}; give sglang, vllm or trtllm")))
    }

    /// The model's defaults with this engine's: its serving-path latency, prefill mixing and
    /// memory share.
    pub fn defaults(self) -> Engine {
        Engine {
            serving: self,
            request_latency_ms: self.request_latency_ms(),
            mixed_prefill: self.mixes_prefill(),
            prefill_graphs: self.graphs_prefill(),
            mem_fraction: self.mem_fraction(),
            ..Engine::default()
        }
    }
}

/// The first sglang release, and the date, with piecewise CUDA graphs for prefill on by default
/// (sglang PR 16331 "Piecewise Cuda Graph set default", merged 2026-03-02; 0.5.9 predates it):
/// older sglang runs its prefill passes eagerly ([`EngineName::graphs_prefill`]).
pub const SGLANG_PIECEWISE_DEFAULT: ((u32, u32, u32), &str) = ((0, 5, 10), "2026-03-02");

/// Bytes per token of a q/k norm's all-reduce over the TP ranks ([`ModelSpec::qk_norm_across_heads`]):
/// the q and the k sum of squares, one fp32 each.
const QK_NORM_BYTES_PER_TOKEN: f64 = 2.0 * 4.0;

/// vLLM's `--gpu-memory-utilization` default (vLLM "Engine Arguments", docs.vllm.ai): the memory
/// share a vLLM deployment runs with.
pub const VLLM_GPU_MEMORY_UTILIZATION: f64 = 0.9;

/// sglang's per-request serving-path latency, ms ([`Engine::request_latency_ms`]): the median,
/// over the FIT set's sglang cases of e2e.toml at client concurrency 8 or less
/// ([`crate::validate::LATENCY_FIT_MAX_CONCURRENCY`]), of measured TTFT less the TTFT predicted
/// without it (`validate::tests` recomputes it). Since the virtual run schedules sglang prefill
/// first (a burst of prompts is prefilled before any of them decodes), the gap no longer grows with
/// concurrency on the fit set's sglang rows (medians 226 / 258 / 213 ms at c <= 8, 16-32 and 64;
/// 243 / 463 / 720 ms with mixed steps, 243.3 ms the constant then); the rule stays c <= 8.
pub const SGLANG_REQUEST_LATENCY_MS: f64 = 230.2;

/// vLLM's per-request serving-path latency, ms: as [`SGLANG_REQUEST_LATENCY_MS`], over the FIT
/// set's vLLM cases at c <= 8 (AIConfigurator's B300 rows; see VALIDATION.md).
pub const VLLM_REQUEST_LATENCY_MS: f64 = 19.4;

/// TensorRT-LLM's per-request serving-path latency, ms: as [`SGLANG_REQUEST_LATENCY_MS`], over
/// the FIT set's TensorRT-LLM cases at c <= 8 (AIConfigurator's H100 rows; see VALIDATION.md).
pub const TRTLLM_REQUEST_LATENCY_MS: f64 = 77.5;

/// Achieved fraction of peak memory bandwidth of GQA decode attention over an FP8 KV cache on
/// Hopper, from kernels.toml `[[decode_attention]]` (AIConfigurator's sglang 0.5.14 FA3 tables):
/// for each table at batch 32 and 256 (heads 8/1 and 32/8), the KV bytes added between its two
/// longest contexts over the latency added, against the GPU's peak; the median of the four
/// per GPU. H100 SXM 0.67, 0.66, 0.65, 0.69 -> 0.665; H200 0.53, 0.54, 0.53, 0.56 -> 0.535. The
/// same tables give 0.90-0.96 with a BF16 cache, so only the FP8 cache is slower. None for other
/// GPUs: their FP8 decode kernels differ by engine (flashinfer 0.25-0.41 against trtllm-gen
/// 0.72-0.97 on B200), so the engine's memory efficiency stays. Kernel data, not an e2e case.
pub fn hopper_fp8_kv_efficiency(gpu: &str) -> Option<f64> {
    // Relatives (H800, GH200, H200 NVL) read these tables through crate::kernels::table_gpu.
    match crate::kernels::table_gpu(gpu) {
        "h100-sxm" => Some(0.665),
        "h200" => Some(0.535),
        _ => None,
    }
}

/// Achieved fraction of peak tensor TFLOPS of a dense GEMM at prefill sizes, by compute format: the
/// median over kernels.toml `[[gemm]]` (AIConfigurator's sglang 0.5.14 tables on h100-sxm, h200,
/// b200, rtx-pro-6000-se and l40s; N=K=8192 and N=2048,K=7168; every point with M >= 2048 tokens):
/// bf16 0.728 (30 points), fp8 0.523 (48), fp4 0.434 (12). Kernel data, not an end-to-end case.
pub fn prefill_gemm_efficiency(fmt: ComputeFormat) -> f64 {
    match fmt {
        ComputeFormat::Bf16 => 0.728,
        ComputeFormat::Fp8 => 0.523,
        ComputeFormat::Fp4 => 0.434,
    }
}

/// Achieved fraction of the expert format's peak of a fused-MoE layer at prefill sizes: the median
/// over kernels.toml `[[moe]]` with balanced routing and >= 4096 tokens (112 points on the same five
/// GPUs; FLOPs = tokens x top-k x 3 x hidden x expert FFN x 2 / 8 ranks; int4 weight-only against
/// the bf16 peak). Kernel data, not an end-to-end case.
pub const PREFILL_MOE_EFFICIENCY: f64 = 0.159;

/// How a prefill's prompt tokens run ([`Scenario::prefill_ms`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PrefillPass {
    /// A pass of its own, which streams the weights once and pays its own all-reduces (sglang's
    /// default; a prefill-only step of any engine).
    Standalone,
    /// Riding in a decode step of this many decode tokens, which reads the weights anyway; the
    /// prompt tokens add their compute and their bytes to the step's all-reduces.
    Beside(f64),
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
}

/// Which collectives of a multi-node plan cross the network.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Across {
    /// The network's name.
    pub net: String,
    /// Nodes one TP group spans (1: TP stays within a node).
    pub tp_nodes: u32,
    /// Pipeline stages send to a stage on another node.
    pub pp: bool,
}

/// Memory per GPU, GB.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Memory {
    /// The GPU's memory.
    pub capacity_gb: f64,
    /// What the engine may use (capacity x mem_fraction).
    pub usable_gb: f64,
    /// Weights on the busiest GPU.
    pub weights_gb: f64,
    /// Activations and workspace.
    pub workspace_gb: f64,
    /// Left for the KV cache.
    pub kv_gb: f64,
    /// KV bytes per token on one GPU.
    pub kv_bytes_per_token: f64,
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

impl Scenario {
    fn layers_per_stage(&self) -> f64 {
        self.model.layers as f64 / self.plan.pp as f64
    }

    /// KV layers of one stage: (full-attention, sliding-window).
    fn kv_layers_per_stage(&self) -> (f64, f64) {
        let pp = self.plan.pp as f64;
        let c = self.model.layer_counts;
        (c.full as f64 / pp, c.sliding as f64 / pp)
    }

    /// Token-layers of KV one request holds (and reads) on a stage at context `ctx`: every token in a
    /// full-attention layer, at most the window in a sliding one.
    fn kv_token_layers(&self, ctx: f64) -> f64 {
        let (full, sliding) = self.kv_layers_per_stage();
        let window = self.model.sliding_window.map_or(ctx, |w| ctx.min(w as f64));
        full * ctx + sliding * window
    }

    /// TP ranks one request's KV is split over: MLA's latent is replicated on every TP rank (sglang
    /// and vLLM keep it whole per rank); GQA splits by KV head.
    fn kv_split(&self) -> f64 {
        match self.model.attention {
            Attention::Mla { .. } => 1.0,
            Attention::Gqa { kv_heads, .. } => (self.plan.tp.min(kv_heads)) as f64,
        }
    }

    /// Linear-attention state one request holds on one GPU (this stage's linear layers; heads split
    /// over TP ranks), bytes. It does not depend on the context.
    pub fn state_bytes_gpu(&self) -> f64 {
        let Some(la) = self.model.linear else { return 0.0 };
        let (recurrent, conv) = la.state_bytes_per_layer();
        let layers = self.model.layer_counts.linear as f64 / self.plan.pp as f64;
        (recurrent + conv) * layers / self.plan.tp.min(la.key_heads) as f64
    }

    /// Bytes one request holds on one GPU at context `ctx`: its KV plus its linear-attention state.
    pub fn request_bytes_gpu(&self, ctx: f64) -> f64 {
        self.kv_token_layers(ctx) * self.kv_bytes_per_token_layer() / self.kv_split() + self.state_bytes_gpu()
    }

    fn kv_bytes_per_token_layer(&self) -> f64 {
        let (main, rope, idx) = self.model.kv_elems_per_token_layer();
        let mla = matches!(self.model.attention, Attention::Mla { .. });
        let dsa = self.model.dsa.is_some();
        let share = self.model.indexer_share();
        match (self.quant.kv_cache, mla) {
            // A DSA model's sparse MLA backend (vLLM's FlashMLA Sparse, `fp8_ds_mla`: "custom
            // storage format is 656 bytes", its get_kv_cache_shape) keeps an fp8 latent + one fp32
            // scale per 128 + the bf16 rope part (656 B for GLM-5/DeepSeek-V3.2); indexer keys fp8
            // + fp32 scale per 128. Gives 61.5 KB/token for GLM-5 against the 62 KB a vLLM log of
            // GLM-5 reports.
            // Only layers that run the indexer keep its keys ([`ModelSpec::indexer_share`]).
            (KvDtype::Fp8, true) if dsa => main + main / 128.0 * 4.0 + rope * 2.0 + self.indexer_key_bytes(),
            // Dense MLA backends store the whole latent and rope head in the cache's dtype (the
            // same get_kv_cache_shape's other branch: head_size = 576 elements of one byte).
            (KvDtype::Fp8, true) => main + rope,
            (KvDtype::Fp8, false) => main + idx * share,
            (KvDtype::Bf16, _) => (main + rope + idx * share) * 2.0,
        }
    }

    /// Bytes of DSA indexer keys per token and layer, averaged over the layers: fp8 keys and an
    /// fp32 scale per 128 in each layer that runs the indexer.
    fn indexer_key_bytes(&self) -> f64 {
        let idx = self.model.kv_elems_per_token_layer().2;
        (idx + (idx / 128.0).ceil() * 4.0) * self.model.indexer_share()
    }

    /// KV bytes per token held on one GPU (all its KV layers; a sliding layer only up to its window).
    pub fn kv_bytes_per_token_gpu(&self) -> f64 {
        let (full, sliding) = self.kv_layers_per_stage();
        self.kv_bytes_per_token_layer() * (full + sliding) / self.kv_split()
    }

    /// Weight bytes on one GPU (the heaviest pipeline stage).
    pub fn weight_bytes_gpu(&self) -> f64 {
        let m = &self.model;
        let p = m.params();
        let q = &self.quant;
        let tp = self.plan.tp as f64;
        let stage = 1.0 / self.plan.pp as f64;
        let attn_split = if self.plan.dp_attention { 1.0 } else { tp };
        let experts = p.routed_experts * q.experts.bytes() / tp;
        let body = p.attention * q.attention.bytes() / attn_split
            + p.dense_ffn * q.dense_ffn.bytes() / tp
            + (p.shared_experts + p.router) * q.shared_experts.bytes() / tp
            + experts
            + p.norms * 2.0;
        body * stage + (p.embeddings + p.lm_head) * q.embeddings.bytes() / tp
    }

    /// Memory per GPU and the KV capacity it leaves.
    pub fn memory(&self) -> Memory {
        let cap = self.gpu.memory_gb;
        let usable = cap * self.engine.mem_fraction;
        let weights = self.weight_bytes_gpu() / 1e9;
        let kv = (usable - weights - self.engine.workspace_gb).max(0.0);
        Memory {
            capacity_gb: cap,
            usable_gb: usable,
            weights_gb: weights,
            workspace_gb: self.engine.workspace_gb,
            kv_gb: kv,
            kv_bytes_per_token: self.kv_bytes_per_token_gpu(),
        }
    }

    /// Tokens the whole deployment's KV cache holds.
    pub fn max_kv_tokens(&self) -> u64 {
        let m = self.memory();
        let per_pool = if m.kv_bytes_per_token > 0.0 { m.kv_gb * 1e9 / m.kv_bytes_per_token } else { 0.0 };
        // With DP attention each TP rank keeps its own requests' KV.
        let pools = self.plan.dp() as f64 * if self.plan.dp_attention { self.plan.tp as f64 } else { 1.0 };
        (per_pool * pools) as u64
    }

    /// The context a running request holds on average in a closed loop: its prompt and half its
    /// output. Both engines page the KV cache and grow each request's pages as it decodes (vLLM
    /// allocates blocks on demand and preempts on a full cache; sglang admits against an
    /// estimated output reservation and retracts when it runs out), so the requests at different
    /// stages of their output share the cache, not each at its full length.
    pub fn mean_context(&self) -> f64 {
        self.input_len as f64 + self.output_len as f64 / 2.0
    }

    /// Requests whose KV at `ctx` tokens each fits in the cache (before any running cap).
    fn requests_at(&self, ctx: f64) -> u64 {
        let c = self.model.layer_counts;
        let ctx = ctx.max(1.0);
        if c.sliding == 0 && c.linear == 0 {
            return (self.max_kv_tokens() as f64 / ctx) as u64;
        }
        // Sliding layers hold at most their window, linear layers a fixed state: count bytes per request.
        let per_request = self.request_bytes_gpu(ctx);
        let pools = self.plan.dp() as f64 * if self.plan.dp_attention { self.plan.tp as f64 } else { 1.0 };
        if per_request > 0.0 {
            (self.memory().kv_gb * 1e9 / per_request * pools) as u64
        } else {
            0
        }
    }

    /// Requests that run at once: those whose KV at the mean context ([`Self::mean_context`])
    /// fits, under the running cap.
    pub fn max_concurrency(&self) -> u32 {
        let kv = self.requests_at(self.mean_context()).min(u32::MAX as u64) as u32;
        self.max_running.map_or(kv, |m| kv.min(m))
    }

    /// Whether one request at its full context (input + output) fits in the KV cache.
    pub fn one_request_fits(&self) -> bool {
        self.requests_at((self.input_len + self.output_len) as f64) >= 1
    }

    /// Refuses a plan whose weights do not fit, with the numbers.
    pub fn check_fit(&self) -> Result<(), ModelError> {
        let m = self.memory();
        if m.weights_gb + m.workspace_gb >= m.usable_gb || !self.one_request_fits() || self.max_concurrency() == 0 {
            return Err(ModelError::DoesNotFit(format!(
                "{} on {} x {} with {}: {:.1} GB of weights + {:.1} GB workspace per GPU, but only {:.1} GB of {:.1} GB is usable (mem fraction {:.2}); no room for the KV of one {}-token request",
                self.model.name,
                self.plan.gpus,
                self.gpu.name,
                self.plan.label(),
                m.weights_gb,
                m.workspace_gb,
                m.usable_gb,
                m.capacity_gb,
                self.engine.mem_fraction,
                self.input_len + self.output_len
            )));
        }
        Ok(())
    }

    /// One pipeline stage's decode step for a micro-batch of `x` requests on one replica.
    fn stage(&self, x: f64, mean_ctx: f64) -> (StepMs, StepDetail) {
        let bw = self.gpu.mem_bw_gbs * 1e9;
        let w = self.weight_read(x);
        let kv_b = self.kv_read(x, mean_ctx);
        let comm = self.communication(x);
        let step = StepMs {
            weights: w.stream_bytes / bw * 1e3,
            kv: kv_b / (bw * self.kv_read_efficiency()) * 1e3,
            compute: self.compute_ms(x, mean_ctx),
            communication: comm.ms,
            ..Default::default()
        };
        let detail = StepDetail {
            allreduces: comm.allreduces,
            allreduce_us: comm.allreduce_us,
            qk_norm_allreduces: comm.qk_norm_allreduces,
            qk_norm_allreduce_us: comm.qk_norm_allreduce_us,
            distinct_experts: w.distinct,
            weights_gb_per_gpu: (w.dense + w.experts) / 1e9,
            kv_gb_per_gpu: kv_b / 1e9,
        };
        (step, detail)
    }

    /// Achieved fraction of peak bandwidth reading the KV cache in decode attention: the engine's
    /// memory efficiency, except for GQA attention over an FP8 cache on Hopper, where
    /// FlashAttention-3 (sglang's and vLLM's decode kernel there) dequantizes on the fly and
    /// streams at [`hopper_fp8_kv_efficiency`] (TensorRT-LLM runs its own XQA kernel, for which
    /// there is no table; the model has no engine to tell them apart, so it gets the same), and
    /// for dense MLA, which reads its latent at the kernel tables' rate for the GPU, the cache's
    /// format and the query heads per rank ([`crate::kernels::mla_decode_efficiency`]).
    fn kv_read_efficiency(&self) -> f64 {
        let hbm = self.engine.hbm_efficiency;
        let base = match (&self.model.attention, self.model.dsa, self.quant.kv_cache) {
            (Attention::Gqa { .. }, _, KvDtype::Fp8) => hopper_fp8_kv_efficiency(&self.gpu.name).unwrap_or(hbm),
            (Attention::Mla { heads, .. }, None, kv) => {
                crate::kernels::mla_decode_efficiency(&self.gpu.name, kv == KvDtype::Fp8, *heads as f64 / self.attn_split()).unwrap_or(hbm)
            }
            _ => hbm,
        };
        self.scaled(base)
    }

    /// `eff` times the calibrated [`Engine::stream_scale`], capped at the peak.
    pub(crate) fn scaled(&self, eff: f64) -> f64 {
        (eff * self.engine.stream_scale).min(1.0)
    }

    /// Achieved fraction of peak bandwidth reading dense weights stored as `dt` in a decode step:
    /// the kernel tables' rate for this GPU and format where there is one
    /// ([`crate::kernels::dense_decode_efficiency`]), else the engine's.
    pub fn dense_stream_efficiency(&self, dt: Dtype) -> f64 {
        let e = &self.engine;
        let table = crate::kernels::dense_decode_efficiency(&self.gpu.name, dt, self.gpu.mem_bw_gbs, e.gemm_floor_us);
        self.scaled(table.unwrap_or(e.hbm_efficiency))
    }

    /// Achieved fraction of peak bandwidth reading routed experts in a decode step: the kernel
    /// tables' fused-MoE rate for this GPU and the experts' format where there is one
    /// ([`crate::kernels::moe_decode_efficiency`]), else the engine's.
    pub fn expert_stream_efficiency(&self) -> f64 {
        let e = &self.engine;
        let split = if self.plan.ep > 1 { crate::kernels::MoeSplit::Ep } else { crate::kernels::MoeSplit::Tp };
        let table = if e.moe_table { crate::kernels::moe_decode_efficiency(&self.gpu.name, self.quant.experts, split) } else { None };
        self.scaled(table.unwrap_or(e.moe_efficiency))
    }

    /// Share of layers with experts.
    fn frac_moe(&self) -> f64 {
        self.model.moe_layers() as f64 / self.model.layers as f64
    }

    /// TP ranks attention weights are split over (1 with DP attention).
    fn attn_split(&self) -> f64 {
        if self.plan.dp_attention {
            1.0
        } else {
            self.plan.tp as f64
        }
    }

    /// Weight bytes one GPU reads per stage step for a micro-batch of `x`.
    fn weight_read(&self, x: f64) -> WeightRead {
        let m = &self.model;
        let p = m.params();
        let q = &self.quant;
        let tp = self.plan.tp as f64;
        let ls = self.layers_per_stage();
        let moe_layers_stage = self.frac_moe() * ls;
        let attn_b = p.attention / m.layers as f64 * ls * q.attention.bytes() / self.attn_split();
        let dense_b = if m.dense_layers > 0 {
            p.dense_ffn / m.dense_layers as f64 * ((1.0 - self.frac_moe()) * ls) * q.dense_ffn.bytes() / tp
        } else {
            0.0
        };
        let shared_b = if m.moe_layers() > 0 {
            (p.shared_experts + p.router) / m.moe_layers() as f64 * moe_layers_stage * q.shared_experts.bytes() / tp
        } else {
            0.0
        };
        let lm_b = p.lm_head * q.embeddings.bytes() / tp / self.plan.pp as f64;
        let (mut experts, mut distinct) = (0.0, 0.0);
        if let Some(moe) = m.moe {
            let (ee, k) = (moe.experts as f64, moe.top_k as f64);
            let expert_bytes = p.per_expert * q.experts.bytes();
            if self.plan.ep > 1 {
                let per_rank = ee / self.plan.ep as f64;
                distinct = (per_rank * (1.0 - (1.0 - k / ee).powf(x)) * self.engine.ep_imbalance).min(per_rank);
                // Experts live whole on their EP rank; ranks in a TP group beyond EP split them.
                experts = distinct * expert_bytes * moe_layers_stage / (tp / self.plan.ep as f64);
            } else {
                distinct = ee * (1.0 - (1.0 - k / ee).powf(x));
                experts = distinct * expert_bytes * moe_layers_stage / tp;
            }
        }
        let eff = |dt: Dtype| self.dense_stream_efficiency(dt);
        let stream_bytes = attn_b / eff(q.attention)
            + dense_b / eff(q.dense_ffn)
            + shared_b / eff(q.shared_experts)
            + lm_b / eff(q.embeddings)
            + if experts > 0.0 { experts / self.expert_stream_efficiency() } else { 0.0 };
        WeightRead { dense: attn_b + dense_b + shared_b + lm_b, experts, distinct, stream_bytes }
    }

    /// KV-cache bytes one GPU reads per stage step for a micro-batch of `x` at `mean_ctx`, plus the
    /// linear-attention state each request's step reads and writes back.
    fn kv_read(&self, x: f64, mean_ctx: f64) -> f64 {
        let m = &self.model;
        let tp = self.plan.tp as f64;
        let per_layer_tok = self.kv_bytes_per_token_layer();
        let reqs_per_gpu = if self.plan.dp_attention { x / tp } else { x };
        let state = 2.0 * self.state_bytes_gpu() * x;
        let kv = match (&m.attention, m.dsa) {
            (Attention::Mla { .. }, Some(d)) => {
                // DSA reads the top-k latents and every indexer key.
                let idx_share = if per_layer_tok > 0.0 { self.indexer_key_bytes().min(per_layer_tok) } else { 0.0 };
                let latent = per_layer_tok - idx_share;
                let (full, _) = self.kv_layers_per_stage();
                (mean_ctx.min(d.topk as f64) * latent + mean_ctx * idx_share) * full * reqs_per_gpu
            }
            (Attention::Mla { .. }, None) => self.kv_token_layers(mean_ctx) * per_layer_tok * reqs_per_gpu,
            (Attention::Gqa { .. }, _) => self.kv_token_layers(mean_ctx) * per_layer_tok * x / self.kv_split(),
        };
        kv + state
    }

    /// FLOPs of one decode token in this stage's linear-attention layers on one GPU: the gated delta
    /// rule's three state-sized products per head (state times key, the rank-one update, state
    /// times query), 2 FLOPs each.
    fn linear_flops_per_token(&self) -> f64 {
        let Some(la) = self.model.linear else { return 0.0 };
        let layers = self.model.layer_counts.linear as f64 / self.plan.pp as f64;
        let per_layer = 6.0 * la.value_heads as f64 * la.key_head_dim as f64 * la.value_head_dim as f64;
        per_layer * layers / self.plan.tp.min(la.key_heads) as f64
    }

    /// GEMM and attention time on one GPU per stage step, ms.
    fn compute_ms(&self, x: f64, mean_ctx: f64) -> f64 {
        let m = &self.model;
        let p = m.params();
        let q = &self.quant;
        let g = &self.gpu;
        let tp = self.plan.tp as f64;
        let ls = self.layers_per_stage();
        let moe_layers_stage = self.frac_moe() * ls;
        let eff = self.engine.gemm_efficiency * 1e12;
        let gemm = |params: f64, dt: Dtype, split: f64| 2.0 * params * x / split / (g.tflops(dt.compute()) * eff);
        let dense_params = if m.dense_layers > 0 { p.dense_ffn / m.dense_layers as f64 * (1.0 - self.frac_moe()) * ls } else { 0.0 };
        let shared_params = if m.moe_layers() > 0 { (p.shared_experts + p.router) / m.moe_layers() as f64 * moe_layers_stage } else { 0.0 };
        let gemm_s = gemm(p.attention / m.layers as f64 * ls, q.attention, self.attn_split())
            + gemm(dense_params, q.dense_ffn, tp)
            + gemm(shared_params, q.shared_experts, tp)
            + gemm(m.moe.map_or(0.0, |mo| p.per_expert * mo.top_k as f64) * moe_layers_stage, q.experts, tp)
            + gemm(p.lm_head / self.plan.pp as f64, q.embeddings, tp);
        // Attention scores and values: MLA absorbed, 2*heads*ctx*(2*kv_lora + rope) per token-layer.
        let attn_flops = match m.attention {
            Attention::Mla { heads, kv_lora_rank, qk_rope_head_dim, .. } => {
                let c = m.dsa.map_or(mean_ctx, |d| mean_ctx.min(d.topk as f64));
                let idx = m.dsa.map_or(0.0, |d| 2.0 * d.index_heads as f64 * d.index_head_dim as f64 * mean_ctx) * m.indexer_share();
                (2.0 * heads as f64 / self.attn_split() * c * (2.0 * kv_lora_rank as f64 + qk_rope_head_dim as f64) + idx) * x
            }
            Attention::Gqa { heads, head_dim, .. } => 4.0 * heads as f64 / tp * head_dim as f64 * self.kv_token_layers(mean_ctx) / ls * x,
        } * ls
            + self.linear_flops_per_token() * x;
        (gemm_s + attn_flops / (g.bf16_tflops * eff)) * 1e3
    }

    /// Collectives per stage step for a micro-batch of `x`.
    fn communication(&self, x: f64) -> Comm {
        let m = &self.model;
        let tp = self.plan.tp as f64;
        let ls = self.layers_per_stage();
        let act = x * m.hidden as f64 * 2.0;
        let mut c = Comm::default();
        let mut us = 0.0;
        if self.plan.dp_attention {
            // Attention is local; MoE layers dispatch and combine tokens over EP (or TP) ranks; dense layers all-reduce.
            let n = self.plan.ep.max(self.plan.tp);
            let k = m.moe.map_or(1.0, |mo| mo.top_k as f64);
            let bytes = act / tp * k;
            let a2a = self.across(n).map_or_else(|| self.link.alltoall_us(n, bytes), |h| comm::alltoall_across_us(&h, bytes));
            us += 2.0 * a2a * self.frac_moe() * ls;
            c.allreduces = 2.0 * (1.0 - self.frac_moe()) * ls;
        } else if self.plan.tp > 1 {
            c.allreduces = 2.0 * ls;
        }
        if c.allreduces > 0.0 {
            c.allreduce_us = self.tp_allreduce(act).us;
            us += c.allreduces * c.allreduce_us;
        }
        if self.qk_norm_allreduce() {
            // In every full-attention layer.
            c.qk_norm_allreduces = m.layer_counts.full as f64 / self.plan.pp as f64;
            c.qk_norm_allreduce_us = self.tp_allreduce(x * QK_NORM_BYTES_PER_TOKEN).us;
            us += c.qk_norm_allreduces * c.qk_norm_allreduce_us;
        }
        if self.plan.pp > 1 {
            us += self.pp_send_us(act);
        }
        c.ms = us * 1e-3 * self.engine.comm_scale;
        c
    }

    /// A group of `n` consecutive ranks laid over the nodes, when it spans more than one.
    fn across(&self, n: u32) -> Option<comm::Hierarchy<'_>> {
        let c = self.cluster.as_ref()?;
        let nodes = c.span(n);
        (nodes > 1).then(|| comm::Hierarchy {
            intra: &self.link,
            net: &c.net,
            nodes,
            per_node: n / nodes,
            net_gbs_per_gpu: c.net_gbs_per_gpu(),
        })
    }

    /// One TP all-reduce of `bytes` as the engine runs it: within a node ([`comm::allreduce`]) or,
    /// when the TP group spans nodes, NCCL's hierarchical one ([`comm::allreduce_across`]).
    ///
    /// Where the engine runs its custom kernel under CUDA graphs on the GPU's own NVLink and
    /// comm.toml measured that kernel for this GPU, engine and group size
    /// ([`comm::custom_measured_us`]), the measured latency replaces the one-shot / two-shot
    /// model, net of the per-kernel floor the step already counts for every collective
    /// ([`Engine::gemm_floor_us`], as for the GEMM tables). The model is 1.3-2.2x below those
    /// measurements from 128 KiB to 2 MiB (8x H200: 5.0 against vLLM's 7.9 us at 128 KiB, 14.2
    /// against vLLM's 18.1 and TensorRT-LLM's 30.5 us at 2 MiB), and above them at small sizes,
    /// where its 3 us floor comes on top of the step's per-kernel floor. When `--link-latency` /
    /// `--link-bw` change that NVLink's numbers, the measured figure is scaled by the model's
    /// ratio of the given link to the catalog one, so a faster link is never priced above the
    /// catalog's (the model and the table disagree by up to 4.8x, and switching between them
    /// would make it so). The custom kernel's model has a fixed latency floor, so the ratio
    /// follows the bandwidth; a latency alone leaves it at 1. A measured link (a `fabric` document) keeps the model. The method keeps
    /// the rule's one-shot / two-shot label. A separate prefill pass's all-reduces take the same
    /// graph-mode figure (sglang before 0.5.10 ran prefill eagerly, which the eager launches of
    /// [`Self::eager_prefill_ms`] price apart) and, in [`Self::point`], no per-kernel floor.
    pub fn tp_allreduce(&self, bytes: f64) -> comm::AllReduce {
        let n = self.plan.tp;
        match self.across(n) {
            Some(h) => comm::allreduce_across(&h, bytes),
            None => {
                let ar = comm::allreduce(&self.link, n, bytes, self.engine.cuda_graphs);
                let custom = matches!(ar.method, comm::Method::OneShot | comm::Method::TwoShot);
                match self.measured_custom_row() {
                    Some((lat, catalog)) if custom => {
                        let scale = match catalog {
                            None => 1.0,
                            Some(c) => {
                                let base = comm::allreduce(&c, n, bytes, self.engine.cuda_graphs).us;
                                if base > 0.0 {
                                    ar.us / base
                                } else {
                                    1.0
                                }
                            }
                        };
                        let us = comm::measured_latency_us(lat, bytes) * scale;
                        comm::AllReduce { us: (us - self.engine.gemm_floor_us).max(0.0), method: ar.method }
                    }
                    _ => ar,
                }
            }
        }
    }

    /// Whether the TP all-reduce's custom kernel is priced from its measured latency
    /// ([`Self::tp_allreduce`]): one node, CUDA graphs, the GPU's own catalog NVLink (its numbers
    /// or `--link-latency` / `--link-bw`'s, not a `fabric` document), and a comm.toml row for
    /// this GPU, engine and TP size.
    pub fn measured_custom_allreduce(&self) -> bool {
        self.measured_custom_row().is_some()
    }

    /// Whether that measured figure is scaled from the catalog link to user-given numbers.
    pub fn measured_custom_allreduce_scaled(&self) -> bool {
        matches!(self.measured_custom_row(), Some((_, Some(_))))
    }

    /// The comm.toml row [`Self::measured_custom_allreduce`] prices the custom kernel from, and
    /// the catalog link to scale it from when the plan's link has other numbers.
    fn measured_custom_row(&self) -> Option<(&'static [f64; 8], Option<LinkProfile>)> {
        let n = self.plan.tp;
        let applies =
            self.across(n).is_none() && self.engine.cuda_graphs && self.link.kind == LinkKind::Nvlink && self.link.name == self.gpu.link;
        if !applies {
            return None;
        }
        let row = comm::custom_measured_row(&self.gpu.name, self.engine.serving.name(), n)?;
        if crate::hw::is_catalog_link(&self.link) {
            return Some((row, None));
        }
        let catalog = crate::hw::link(&self.link.name).ok().filter(|c| c.kind == self.link.kind)?;
        Some((row, Some(catalog)))
    }

    /// Whether some stage boundary of a replica falls between nodes: the replica (tp x pp ranks,
    /// placed node-aligned) is larger than a node.
    fn pp_crosses_nodes(&self) -> bool {
        self.cluster.as_ref().is_some_and(|c| self.plan.pp > 1 && self.plan.tp * self.plan.pp > c.gpus_per_node)
    }

    /// One stage's send of `bytes` to the next, us. When a boundary crosses nodes the send goes over
    /// the network; the slowest stage paces the pipeline, so every stage is charged that send.
    fn pp_send_us(&self, bytes: f64) -> f64 {
        match &self.cluster {
            Some(c) if self.pp_crosses_nodes() => c.net.alpha_us + bytes / (c.net_gbs_per_gpu() * 1e3),
            _ => self.link.send_us(bytes),
        }
    }

    /// Which collectives cross the network (None on one node, or when every group fits in one).
    pub fn across_nodes(&self) -> Option<Across> {
        let c = self.cluster.as_ref()?;
        let group = if self.plan.dp_attention { self.plan.ep.max(self.plan.tp) } else { self.plan.tp };
        let tp_nodes = c.span(group);
        let pp = self.pp_crosses_nodes();
        (tp_nodes > 1 || pp).then(|| Across { net: c.net.name.clone(), tp_nodes, pp })
    }

    /// Refuses a plan whose groups straddle node boundaries, and a cluster that does not hold the
    /// plan's GPUs: a TP group and a replica (tp x pp) must each divide a node or be whole nodes.
    pub fn check_placement(&self) -> Result<(), ModelError> {
        let Some(c) = &self.cluster else { return Ok(()) };
        if c.nodes * c.gpus_per_node != self.plan.gpus {
            return Err(ModelError::Input(format!(
                "--gpus {} is not --nodes {} x --gpus-per-node {} = {}",
                self.plan.gpus,
                c.nodes,
                c.gpus_per_node,
                c.nodes * c.gpus_per_node
            )));
        }
        c.check_group(self.plan.tp, &format!("--tp {}", self.plan.tp))?;
        c.check_group(self.plan.tp * self.plan.pp, &format!("the replica (tp x pp = {} x {})", self.plan.tp, self.plan.pp))
    }

    /// The per-step overhead outside the modelled kernels: the fixed part, each kernel's floor,
    /// and without CUDA graphs each kernel's launch, ms.
    pub fn overhead_ms(&self) -> f64 {
        let e = &self.engine;
        let kernels = self.kernels_per_step();
        let per_kernel_us = match self.gpu.arch {
            crate::hw::Arch::Cdna3 => e.kernel_overhead_us * e.cdna3_floor_scale,
            _ => e.kernel_overhead_us,
        };
        let floor = e.step_overhead_ms + per_kernel_us * kernels / 1e3;
        if e.cuda_graphs {
            floor
        } else {
            floor + e.launch_us * kernels / 1e3
        }
    }

    /// The overhead of a decode step of `b` running requests: [`Self::overhead_ms`] plus each
    /// request's [`Engine::request_step_us`], ms.
    pub fn decode_overhead_ms(&self, b: f64) -> f64 {
        self.overhead_ms() + self.engine.request_step_us * b / 1e3
    }

    /// What a step carrying prompt tokens adds when the engine runs it without CUDA graphs while
    /// decode has them ([`Engine::prefill_graphs`]): each kernel's launch, ms (0 when decode runs
    /// eagerly too: [`Self::overhead_ms`] already counts the launches).
    pub fn eager_prefill_ms(&self) -> f64 {
        let e = &self.engine;
        if e.cuda_graphs && !e.prefill_graphs {
            e.launch_us * self.kernels_per_step() / 1e3
        } else {
            0.0
        }
    }

    /// Kernels one decode step runs on a GPU, counted from the layers as sglang and vLLM build
    /// them (fused where the engines fuse by default):
    /// - GQA attention (full or sliding): input norm, QKV GEMM, rotary + KV write, attention,
    ///   output GEMM: 5.
    /// - MLA attention: input norm, the fused q_a/kv_a GEMM, the q/kv norms, q_b GEMM, the
    ///   absorbed key BMM, rotary + KV write, split-KV decode attention and its combine, the
    ///   absorbed value BMM, output GEMM: 10. A DSA indexer adds its q and k GEMMs, key norm,
    ///   rotary, head-weight GEMM, activation quantization, logits and top-k: 8, in each layer
    ///   that runs it (GLM-5.2's "shared" indexer layers reuse the last top-k and add none).
    /// - Gated DeltaNet linear attention: input norm, two input GEMMs, causal conv, gating,
    ///   the recurrent update, gated norm, output GEMM: 8.
    /// - Dense FFN: post-attention norm, gate/up GEMM, activation, down GEMM: 4.
    /// - MoE FFN: norm, router GEMM, top-k, token sort, the two grouped GEMMs, activation and
    ///   the weighted combine: 8; a shared expert adds its gate/up, activation and down: 3.
    /// - Collectives: two all-reduces per layer under TP (a DP-attention MoE layer's dispatch
    ///   and combine instead).
    /// - A q/k norm over all heads (MiniMax-M2) under TP: its own all-reduce and the norm's
    ///   second half, in each full-attention layer: 2.
    /// - Per step: embedding, final norm, LM head, sampling: 4.
    pub fn kernels_per_step(&self) -> f64 {
        let m = &self.model;
        let c = m.layer_counts;
        let mla = matches!(m.attention, Attention::Mla { .. });
        let full = if mla { 10.0 + 8.0 * m.indexer_share() } else { 5.0 };
        let attention = c.full as f64 * full + c.sliding as f64 * 5.0 + c.linear as f64 * 8.0;
        let moe = m.moe.map_or(0.0, |mo| 8.0 + if mo.shared_experts > 0 { 3.0 } else { 0.0 });
        let ffn = m.dense_layers as f64 * 4.0 + m.moe_layers() as f64 * moe;
        let collectives = if self.plan.tp > 1 || self.plan.dp_attention { 2.0 * m.layers as f64 } else { 0.0 };
        // A q/k norm over all heads splits around its own all-reduce: that collective and the
        // norm's second half, in each full-attention layer.
        let qk_norm = if self.qk_norm_allreduce() { 2.0 * c.full as f64 } else { 0.0 };
        attention + ffn + collectives + qk_norm + 4.0
    }

    /// Whether each full-attention layer all-reduces its q/k norm's sum of squares across the
    /// attention's TP ranks ([`ModelSpec::qk_norm_across_heads`]; not with DP attention, where
    /// every rank holds all heads).
    fn qk_norm_allreduce(&self) -> bool {
        self.model.qk_norm_across_heads && self.plan.tp > 1 && !self.plan.dp_attention
    }

    /// Time to prefill `tokens` prompt tokens (prompts of `prompt_len` each) on one replica, ms,
    /// as a pass of its own or beside a decode step ([`PrefillPass`]).
    pub fn prefill_ms(&self, tokens: f64, prompt_len: f64, pass: PrefillPass) -> f64 {
        if tokens <= 0.0 {
            return 0.0;
        }
        let m = &self.model;
        let p = m.params();
        let g = &self.gpu;
        let e = &self.engine;
        let tp = self.plan.tp as f64;
        let gpus = tp * self.plan.pp as f64;
        // GEMMs over the tokens at the kernel tables' prefill efficiencies; each expert sees
        // tokens * k / E of them, in a fused-MoE kernel.
        let q = &self.quant;
        let gemm = |params: f64, dt: Dtype, eff: f64| 2.0 * params * tokens / gpus / (g.tflops(dt.compute()) * eff * 1e12);
        let dense = |params: f64, dt: Dtype| gemm(params, dt, prefill_gemm_efficiency(dt.compute()));
        let routed = m.moe.map_or(0.0, |mo| p.per_expert * mo.top_k as f64 * m.moe_layers() as f64);
        let gemm_s = dense(p.attention, q.attention)
            + dense(p.dense_ffn, q.dense_ffn)
            + dense(p.shared_experts + p.router, q.shared_experts)
            + gemm(routed, q.experts, PREFILL_MOE_EFFICIENCY)
            + dense(p.lm_head / tokens.max(1.0), q.embeddings);
        // Causal attention over the prompt: ~ 2 * heads * tokens^2/2 * (qk + v) per layer.
        let (heads, dim) = match m.attention {
            Attention::Mla { heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, .. } => {
                (heads, qk_nope_head_dim + qk_rope_head_dim + v_head_dim)
            }
            Attention::Gqa { heads, head_dim, .. } => (heads, 2 * head_dim),
        };
        // Causal attention within each prompt: a token attends to half its prompt on average, at most
        // the window in a sliding layer; a linear-attention layer costs its recurrence per token.
        let span = m.dsa.map_or(prompt_len / 2.0, |d| (prompt_len / 2.0).min(d.topk as f64));
        let c = m.layer_counts;
        let window = m.sliding_window.map_or(span, |w| span.min(w as f64));
        let span_layers = c.full as f64 * span + c.sliding as f64 * window;
        let linear_flops =
            m.linear.map_or(0.0, |la| 6.0 * la.value_heads as f64 * la.key_head_dim as f64 * la.value_head_dim as f64 * c.linear as f64);
        // Attention at the measured prefill-attention rate for the prompt's length (kernel
        // tables: short prompts reach a small share of the peak); the linear layers' chunked
        // recurrence at the BF16 GEMM rate.
        let kind = if matches!(m.attention, Attention::Mla { .. }) { PrefillAttention::Mla } else { PrefillAttention::Gqa };
        let attn_eff = prefill_attention_efficiency(&g.name, kind, prompt_len);
        let attn_s = (2.0 * heads as f64 * span_layers * dim as f64 / attn_eff
            + linear_flops / prefill_gemm_efficiency(ComputeFormat::Bf16))
            * tokens
            / gpus
            / (g.bf16_tflops * 1e12);
        let read_s = if pass == PrefillPass::Standalone {
            self.weight_bytes_gpu() / (g.mem_bw_gbs * 1e9 * self.scaled(e.hbm_efficiency))
        } else {
            0.0
        };
        let bytes = tokens * m.hidden as f64 * 2.0;
        let comm_us = match pass {
            _ if self.plan.tp <= 1 => 0.0,
            PrefillPass::Standalone => {
                let qk_norm =
                    if self.qk_norm_allreduce() { c.full as f64 * self.tp_allreduce(tokens * QK_NORM_BYTES_PER_TOKEN).us } else { 0.0 };
                2.0 * m.layers as f64 * self.tp_allreduce(bytes).us + qk_norm
            }
            // Riding in a decode step's all-reduces: only the extra bytes cost time, as the
            // all-reduce model prices them (its algorithm and protocol for the larger message)
            // beyond the decode tokens' own message (at least one token's).
            PrefillPass::Beside(d) => {
                let decode = d.max(1.0) * m.hidden as f64 * 2.0;
                2.0 * m.layers as f64 * (self.tp_allreduce(bytes + decode).us - self.tp_allreduce(decode).us).max(0.0)
            }
        };
        (gemm_s.max(read_s) + attn_s) * 1e3 + comm_us * 1e-3 * e.comm_scale
    }

    /// One decode step of one replica at batch `b` with mean context `mean_ctx`, without the
    /// amortized prefill share (for a simulator that runs prefill itself), ms.
    pub fn decode_step_ms(&self, b: f64, mean_ctx: f64) -> f64 {
        let pp = self.plan.pp as f64;
        let (st, _) = self.stage((b / pp).max(1.0 / pp), mean_ctx);
        let overhead = self.decode_overhead_ms(b);
        match self.engine.overlap {
            Overlap::None => ((st.weights + st.kv).max(st.compute) + st.communication) * pp + overhead,
            Overlap::Full => (st.weights + st.kv).max(st.compute).max(st.communication) * pp + overhead,
        }
    }

    /// The prediction at `concurrency` requests (closed loop).
    pub fn point(&self, concurrency: u32) -> Point {
        let cap = self.max_concurrency().max(1);
        let running = concurrency.clamp(1, cap);
        let dp = self.plan.dp() as f64;
        let b = running as f64 / dp;
        let pp = self.plan.pp as f64;
        let mean_ctx = self.mean_context();
        let (st, detail) = self.stage((b / pp).max(1.0 / pp), mean_ctx);
        // A token passes every stage; each stage runs pp micro-batches per step.
        let weights = st.weights * pp;
        let kv = st.kv * pp;
        let compute = st.compute * pp;
        let communication = st.communication * pp;
        let overhead = self.decode_overhead_ms(b);
        // b / output_len requests finish per step; their replacements' prefill passes (sglang runs
        // them as separate batches between decode steps) are amortized over the decode steps.
        let n = b / self.output_len.max(1) as f64;
        let (input, beside) = (self.input_len as f64, PrefillPass::Beside(b / pp));
        let prefill = match (self.engine.mixed_prefill, n <= 1.0) {
            // The replacements' prompt tokens ride in the decode steps: below one per step, one
            // prompt rides in every 1/n-th step (its all-reduce bytes are priced as that step's).
            (true, true) => n * self.prefill_ms(input, input, beside),
            (true, false) => self.prefill_ms(n * input, input, beside),
            // Requests waiting at a step boundary are prefilled together in their own pass (one weight
            // read, one set of all-reduce latencies); below one per step, a pass serves one request.
            (false, true) => n * self.prefill_ms(input, input, PrefillPass::Standalone),
            (false, false) => self.prefill_ms(n * input, input, PrefillPass::Standalone),
        };
        // Steps that carry prompt tokens (one in 1/n, every step once n >= 1) run eagerly where the
        // engine graphs decode only.
        let prefill = prefill + n.min(1.0) * self.eager_prefill_ms();
        let total = match self.engine.overlap {
            Overlap::None => (weights + kv).max(compute) + communication + overhead + prefill,
            Overlap::Full => (weights + kv).max(compute).max(communication) + overhead + prefill,
        };
        let step_ms = StepMs { weights, kv, compute, communication, overhead, prefill, total };
        let tpot = total;
        let out = running as f64 / (tpot / 1e3);
        let e2e = tpot * self.output_len as f64;
        let queue_ms = if concurrency > running { (concurrency as f64 / running as f64 - 1.0) * e2e } else { 0.0 };
        let ttft = self.prefill_ms(self.input_len as f64, self.input_len as f64, PrefillPass::Standalone)
            + self.eager_prefill_ms()
            + tpot
            + queue_ms
            + self.engine.request_latency_ms;
        Point {
            concurrency,
            running,
            output_tokens_per_s: out,
            total_tokens_per_s: out * (1.0 + self.input_len as f64 / self.output_len.max(1) as f64),
            tpot_ms: tpot,
            ttft_ms: ttft,
            per_user_tokens_per_s: 1e3 / tpot,
            step_ms,
            detail,
            bottleneck: self.bottleneck(&step_ms, &detail),
            client: None,
        }
    }

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

/// The step terms, for picking the largest.
#[derive(Debug, Clone, Copy)]
enum Term {
    Communication,
    Weights,
    Kv,
    Compute,
    Overhead,
    Prefill,
}

/// Weight bytes one GPU reads per stage step.
#[derive(Debug, Clone, Copy, Default)]
struct WeightRead {
    /// Attention, dense FFN, shared experts, router and LM head, bytes.
    dense: f64,
    /// Routed experts, bytes.
    experts: f64,
    /// Distinct experts touched per MoE layer (on the busiest EP rank with EP).
    distinct: f64,
    /// The bytes over each part's streaming rate: the bytes the GPU's peak bandwidth would read
    /// in the time they take.
    stream_bytes: f64,
}

/// Collectives of one stage step.
#[derive(Debug, Clone, Copy, Default)]
struct Comm {
    /// Time, ms (comm_scale applied).
    ms: f64,
    /// All-reduces per stage step.
    allreduces: f64,
    /// One all-reduce, us.
    allreduce_us: f64,
    /// The q/k norm's all-reduces per stage step, and one of them, us.
    qk_norm_allreduces: f64,
    qk_norm_allreduce_us: f64,
}

/// A q/k norm's all-reduces per step and the cost of one ([`Bottleneck::Communication`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct QkNormAllReduces {
    /// All-reduces per step (all stages).
    pub count: f64,
    /// One all-reduce, us.
    pub us: f64,
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::hw::{gpu, link};
    use crate::quant::Dtype;
    use crate::spec::catalog;

    pub fn scenario(model: &str, q: Dtype, g: &str, l: &str, gpus: u32, tp: u32) -> Scenario {
        Scenario {
            model: catalog(model).expect("model"),
            quant: Quant::preset(q),
            gpu: gpu(g).expect("gpu"),
            link: link(l).expect("link"),
            plan: Plan { gpus, tp, pp: 1, ep: 1, dp_attention: false },
            engine: Engine::default(),
            input_len: 1024,
            output_len: 1024,
            max_running: None,
            cluster: None,
        }
    }

    #[test]
    fn relatives_read_every_kernel_rate_of_the_gpu_whose_tables_they_share() {
        use crate::kernels::{
            dense_decode_table, mla_decode_efficiency, moe_decode_efficiency, prefill_attention_efficiency, MoeSplit, PrefillAttention,
        };
        for (relative, tables) in [
            ("h800", "h100-sxm"),
            ("gh200-96gb", "h100-sxm"),
            ("gh200-144gb", "h200"),
            ("h200-nvl", "h200"),
            ("a100-pcie", "a100"),
            ("a100-pcie-40gb", "a100"),
            ("a100-40gb", "a100"),
        ] {
            assert_eq!(hopper_fp8_kv_efficiency(relative), hopper_fp8_kv_efficiency(tables), "{relative}");
            for dt in [Dtype::Bf16, Dtype::Fp8, Dtype::Int4] {
                assert_eq!(dense_decode_table(relative, dt), dense_decode_table(tables, dt), "{relative} {dt:?}");
                for split in [MoeSplit::Tp, MoeSplit::Ep] {
                    assert_eq!(moe_decode_efficiency(relative, dt, split), moe_decode_efficiency(tables, dt, split), "{relative} {dt:?}");
                }
            }
            assert_eq!(mla_decode_efficiency(relative, false, 16.0), mla_decode_efficiency(tables, false, 16.0), "{relative}");
            assert_eq!(
                prefill_attention_efficiency(relative, PrefillAttention::Gqa, 4096.0),
                prefill_attention_efficiency(tables, PrefillAttention::Gqa, 4096.0),
                "{relative}"
            );
        }
        // The relatives do read tables: the Hopper ones an FP8-KV rate, all a BF16 GEMM rate.
        assert!(hopper_fp8_kv_efficiency("h800").is_some() && hopper_fp8_kv_efficiency("gh200-144gb").is_some());
        assert!(dense_decode_table("a100-pcie", Dtype::Bf16).is_some() && dense_decode_table("gh200-96gb", Dtype::Bf16).is_some());
    }

    #[test]
    fn dense_mla_reads_its_kv_at_the_tables_rate_for_its_heads_per_rank() {
        use crate::kernels::mla_decode_efficiency;
        // DeepSeek-V3 (128 heads) at TP8 on a B200 with an FP8 cache: 16 heads per rank.
        let tp8 = scenario("deepseek-v3", Dtype::Fp8, "b200", "nvlink5", 8, 8);
        assert_eq!(tp8.quant.kv_cache, KvDtype::Fp8);
        assert_eq!(Some(tp8.kv_read_efficiency()), mla_decode_efficiency("b200", true, 16.0));
        // DP attention keeps every head on each rank.
        let mut dp = tp8.clone();
        dp.plan.dp_attention = true;
        assert_eq!(Some(dp.kv_read_efficiency()), mla_decode_efficiency("b200", true, 128.0));
        assert!(dp.kv_read_efficiency() < tp8.kv_read_efficiency(), "more heads per rank, a slower latent read");
        // A BF16 cache reads at its own column.
        let mut bf16 = tp8.clone();
        bf16.quant.kv_cache = KvDtype::Bf16;
        assert_eq!(Some(bf16.kv_read_efficiency()), mla_decode_efficiency("b200", false, 16.0));
        // Hopper's FP8 path, a DSA model, and a GPU without tables keep the engine's efficiency.
        let hbm = Engine::default().hbm_efficiency;
        assert_eq!(scenario("deepseek-v3", Dtype::Fp8, "h200", "nvlink", 8, 8).kv_read_efficiency(), hbm);
        assert_eq!(scenario("glm-5", Dtype::Fp8, "b200", "nvlink5", 8, 8).kv_read_efficiency(), hbm);
        assert_eq!(scenario("deepseek-v3", Dtype::Fp8, "mi300x", "xgmi", 8, 8).kv_read_efficiency(), hbm);
    }

    #[test]
    fn a_chunk_beside_decode_costs_its_all_reduce_bytes_beyond_the_decode_batch_and_less_than_a_pass() {
        let s = scenario("llama-3.1-70b", Dtype::Fp8, "h100-sxm", "nvlink", 8, 8);
        for tokens in [64.0, 1024.0, 8192.0] {
            let beside = s.prefill_ms(tokens, 1024.0, PrefillPass::Beside(64.0));
            let alone = s.prefill_ms(tokens, 1024.0, PrefillPass::Standalone);
            assert!(beside > 0.0 && beside < alone, "{tokens} tokens: beside {beside} ms, alone {alone} ms");
        }
        // The chunk's bytes are priced beyond the decode batch's own message: against a larger
        // decode batch the same chunk adds what the all-reduce model charges for the difference.
        let m = &s.model;
        let bytes = |t: f64| t * m.hidden as f64 * 2.0;
        let extra = |decode: f64| s.tp_allreduce(bytes(1024.0 + decode)).us - s.tp_allreduce(bytes(decode)).us;
        let (small, large) =
            (s.prefill_ms(1024.0, 1024.0, PrefillPass::Beside(1.0)), s.prefill_ms(1024.0, 1024.0, PrefillPass::Beside(256.0)));
        let want = 2.0 * m.layers as f64 * (extra(256.0) - extra(1.0)) * 1e-3 * s.engine.comm_scale;
        assert!((large - small - want).abs() < 1e-9, "{large} - {small} vs {want}");
    }

    #[test]
    fn kernels_per_step_follow_the_documented_per_layer_counts() {
        // Llama-3.1-70B: 80 GQA layers of 5 attention + 4 FFN kernels, two all-reduces each under TP.
        let llama_tp8 = scenario("llama-3.1-70b", Dtype::Fp8, "h200", "nvlink", 8, 8);
        assert_eq!(llama_tp8.kernels_per_step(), 80.0 * (5.0 + 4.0 + 2.0) + 4.0);
        let llama_tp1 = scenario("llama-3.1-70b", Dtype::Fp8, "h200", "nvlink", 1, 1);
        assert_eq!(llama_tp1.kernels_per_step(), 80.0 * (5.0 + 4.0) + 4.0);
        // DeepSeek-V3: 61 MLA layers, 3 dense FFNs, 58 MoE layers with a shared expert.
        let ds = scenario("deepseek-v3", Dtype::Fp8, "h200", "nvlink", 8, 8);
        assert_eq!(ds.kernels_per_step(), 61.0 * 10.0 + 3.0 * 4.0 + 58.0 * 11.0 + 61.0 * 2.0 + 4.0);
        // GLM-5's DSA indexer adds 8 kernels to each of its MLA layers.
        let glm = scenario("glm-5", Dtype::Fp8, "b200", "nvlink5", 8, 8);
        let m = &glm.model;
        let moe = m.moe.expect("moe");
        let ffn = m.dense_layers as f64 * 4.0 + m.moe_layers() as f64 * (8.0 + if moe.shared_experts > 0 { 3.0 } else { 0.0 });
        assert_eq!(glm.kernels_per_step(), m.layers as f64 * (18.0 + 2.0) + ffn + 4.0);
        // The floor is the count times the fitted per-kernel cost.
        let e = Engine::default();
        assert!((ds.overhead_ms() - e.kernel_overhead_us * ds.kernels_per_step() / 1e3).abs() < 1e-12);
    }

    #[test]
    fn minimax_all_reduces_its_qk_norm_in_every_layer_under_tp_only() {
        // MiniMax-M2's q/k norm spans all heads: under TP each of its 62 layers adds the norm's
        // all-reduce and the norm's second half to the kernels, and the all-reduce to the step.
        // (On PCIe, where the all-reduce is the model's and costs more than its kernel floor.)
        let tp4 = scenario("minimax-m2", Dtype::Fp8, "h200", "pcie5-p2p", 4, 4);
        let mut local = tp4.clone();
        local.model.qk_norm_across_heads = false;
        assert_eq!(tp4.kernels_per_step() - local.kernels_per_step(), 2.0 * 62.0);
        let (a, b) = (tp4.stage(64.0, 1536.0).0, local.stage(64.0, 1536.0).0);
        let expected = 62.0 * tp4.tp_allreduce(64.0 * 8.0).us * 1e-3 * tp4.engine.comm_scale;
        assert!((a.communication - b.communication - expected).abs() < 1e-9, "{} vs {}", a.communication, b.communication);
        assert!(tp4.tp_allreduce(64.0 * 8.0).us > 0.0);
        let d = tp4.stage(64.0, 1536.0).1;
        assert_eq!((d.qk_norm_allreduces, d.qk_norm_allreduce_us), (62.0, tp4.tp_allreduce(64.0 * 8.0).us));
        assert_eq!(local.stage(64.0, 1536.0).1.qk_norm_allreduces, 0.0);
        // The bottleneck's words count them apart from the activation all-reduces.
        let words = |qk_norm_us: f64| {
            crate::report::bottleneck_words(&Bottleneck::Communication {
                share: 0.5,
                step_ms: 20.0,
                tp: 4,
                link: "pcie5-p2p".into(),
                allreduces: 124.0,
                allreduce_us: 30.0,
                qk_norm: Some(QkNormAllReduces { count: 62.0, us: qk_norm_us }),
                across: None,
            })
        };
        let priced = words(12.5);
        assert!(priced.contains("124 all-reduces x 30.0 us and 62 q/k-norm all-reduces x 12.5 us"), "{priced}");
        let within = words(0.0);
        assert!(within.contains("and 62 q/k-norm all-reduces within their kernel floors"), "{within}");
        // On one GPU, or with DP attention (every rank holds all heads), there is nothing to reduce.
        let tp1 = scenario("minimax-m2", Dtype::Fp8, "h200", "pcie5-p2p", 1, 1);
        let mut tp1_local = tp1.clone();
        tp1_local.model.qk_norm_across_heads = false;
        assert_eq!(tp1.kernels_per_step(), tp1_local.kernels_per_step());
        let mut dp = tp4.clone();
        dp.plan.dp_attention = true;
        let mut dp_local = dp.clone();
        dp_local.model.qk_norm_across_heads = false;
        assert_eq!(dp.kernels_per_step(), dp_local.kernels_per_step());
    }

    #[test]
    fn a_catalog_nvlink_box_prices_the_custom_all_reduce_from_the_measured_table() {
        // 8x H200 under vLLM, 2 MiB (128 tokens of Llama-3.1-70B's 8192 bf16 activations): the
        // measured 18.11 us at 1 Mi elements, less the per-kernel floor the step counts for it.
        let mut s = scenario("llama-3.1-70b", Dtype::Fp8, "h200", "nvlink", 8, 8);
        s.engine = EngineName::Vllm.defaults();
        let bytes = 128.0 * 8192.0 * 2.0;
        assert!(s.measured_custom_allreduce());
        let ar = s.tp_allreduce(bytes);
        assert!((ar.us - (18.11 - s.engine.gemm_floor_us)).abs() < 1e-9, "{ar:?}");
        assert!(ar.us > comm::allreduce(&s.link, 8, bytes, true).us - s.engine.gemm_floor_us, "the table is above the model here");
        // Each engine reads its own row: TensorRT-LLM's two-shot is slower at this size.
        s.engine = EngineName::Trtllm.defaults();
        assert!((s.tp_allreduce(bytes).us - (30.5 - s.engine.gemm_floor_us)).abs() < 1e-9);
        // User-given numbers for the same NVLink scale the measured figure by the model's ratio:
        // a slower link costs more, a faster one never more than the catalog's.
        let mut given = s.clone();
        given.link.beta_gbs = 300.0;
        assert!(given.measured_custom_allreduce() && given.measured_custom_allreduce_scaled());
        let ratio = comm::allreduce(&given.link, 8, bytes, true).us / comm::allreduce(&s.link, 8, bytes, true).us;
        assert!(ratio > 1.0);
        assert!((given.tp_allreduce(bytes).us - (30.5 * ratio - s.engine.gemm_floor_us)).abs() < 1e-9);
        given.link.beta_gbs = 1800.0;
        assert!(given.tp_allreduce(bytes).us < s.tp_allreduce(bytes).us);
        // A measured link (another name) keeps the model, which takes its latency and bandwidth.
        s.link.name = "measured-h200".into();
        assert!(!s.measured_custom_allreduce());
        assert_eq!(s.tp_allreduce(bytes), comm::allreduce(&s.link, 8, bytes, true));
        // So does a group size the table lacks, and eager mode.
        let mut six = scenario("llama-3.1-70b", Dtype::Fp8, "h200", "nvlink", 6, 6);
        six.engine = EngineName::Vllm.defaults();
        assert!(!six.measured_custom_allreduce());
        assert_eq!(six.tp_allreduce(bytes), comm::allreduce(&six.link, 6, bytes, true));
        let mut eager = scenario("llama-3.1-70b", Dtype::Fp8, "h200", "nvlink", 8, 8);
        eager.engine.cuda_graphs = false;
        assert!(!eager.measured_custom_allreduce());
        assert_eq!(eager.tp_allreduce(bytes), comm::allreduce(&eager.link, 8, bytes, false));
        // Past the custom kernel's 8 MiB, NCCL's model even on the measured box.
        let big = 16.0 * 1024.0 * 1024.0;
        s.link.name = "nvlink".into();
        assert_eq!(s.tp_allreduce(big), comm::allreduce(&s.link, 8, big, true));
    }

    #[test]
    fn dense_model_batch_one_weight_time_is_bytes_over_bandwidth() {
        let mut s = scenario("llama-3.1-8b", Dtype::Bf16, "h100-sxm", "nvlink", 1, 1);
        // Every streaming rate, the kernel table's and the engine's, capped at the peak.
        s.engine.stream_scale = 10.0;
        let p = s.point(1);
        // Attention, FFN and LM head are read once per step (the embedding table is a lookup).
        let params = s.model.params();
        let bytes = (params.attention + params.dense_ffn + params.lm_head) * 2.0;
        let want = bytes / 3350e9 * 1e3;
        assert!((p.step_ms.weights - want).abs() / want < 1e-9, "{} vs {want}", p.step_ms.weights);
        assert_eq!(p.step_ms.communication, 0.0);
    }

    #[test]
    fn layers_sharing_the_indexers_top_k_keep_no_indexer_keys_and_run_no_indexer_kernels() {
        // GLM-5 with its indexer in one layer of four (GLM-5.2's "shared" layers reuse the top-k).
        let every = scenario("glm-5", Dtype::Fp8, "b200", "nvlink5", 8, 8);
        let mut shared = every.clone();
        let layers = shared.model.layers;
        if let Some(d) = shared.model.dsa.as_mut() {
            d.indexer_layers = layers / 4;
        }
        let share = (layers / 4) as f64 / layers as f64;
        let idx = every.model.dsa.expect("GLM-5 has a DSA indexer").index_head_dim as f64;
        // Each layer that stops running it drops its fp8 keys and their fp32 scale per 128.
        let key_bytes = (idx + (idx / 128.0).ceil() * 4.0) * layers as f64;
        let dropped = every.kv_bytes_per_token_gpu() - shared.kv_bytes_per_token_gpu();
        assert!((dropped - key_bytes * (1.0 - share)).abs() < 1e-6, "{dropped} vs {}", key_bytes * (1.0 - share));
        assert!((every.kernels_per_step() - shared.kernels_per_step() - 8.0 * (layers - layers / 4) as f64).abs() < 1e-9);
        assert!(shared.model.params().attention < every.model.params().attention);
        assert!(shared.decode_step_ms(64.0, 4096.0) < every.decode_step_ms(64.0, 4096.0));
    }

    #[test]
    fn glm5_kv_is_about_62_kb_per_token() {
        let s = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie-host-staged", 8, 8);
        let kb = s.kv_bytes_per_token_gpu() / 1e3;
        assert!((kb - 62.25).abs() / 62.25 < 0.03, "{kb} KB vs the vLLM log's 62.25");
    }

    #[test]
    fn a_dense_mla_fp8_cache_holds_576_bytes_per_token_and_layer_and_only_dsa_takes_the_656_byte_layout() {
        // DeepSeek-V3: 512 latent + 64 rope, one byte each, over 61 layers.
        let mut ds = scenario("deepseek-v3", Dtype::Fp8, "h200", "nvlink", 8, 8);
        ds.quant.kv_cache = KvDtype::Fp8;
        assert_eq!(ds.kv_bytes_per_token_gpu(), 576.0 * 61.0);
        ds.quant.kv_cache = KvDtype::Bf16;
        assert_eq!(ds.kv_bytes_per_token_gpu(), 2.0 * 576.0 * 61.0);
        // GLM-5 (DSA): 656 B of sparse layout plus its indexer keys (fp8, an fp32 scale per 128).
        let glm = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie-host-staged", 8, 8);
        let idx = glm.model.dsa.expect("GLM-5 has a DSA indexer").index_head_dim as f64;
        let per_layer = glm.kv_bytes_per_token_gpu() / glm.model.layers as f64;
        assert_eq!(per_layer, 656.0 + idx + (idx / 128.0).ceil() * 4.0);
    }

    #[test]
    fn glm5_nvfp4_weights_match_the_measured_56_gb_per_gpu() {
        let s = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie-host-staged", 8, 8);
        let gb = s.memory().weights_gb;
        assert!((gb - 56.0).abs() / 56.0 < 0.03, "{gb} GB");
    }

    #[test]
    fn host_staged_tp8_is_communication_bound_at_low_concurrency() {
        let s = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie-host-staged", 8, 8);
        let p = s.point(8);
        match &p.bottleneck {
            Bottleneck::Communication { link, allreduces, .. } => {
                assert_eq!(link, "pcie-host-staged");
                assert_eq!(*allreduces, 156.0);
            }
            other => panic!("{other:?}"),
        }
        // With P2P the same plan is bound by expert weight reads instead.
        let q = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie5-p2p", 8, 8).point(64);
        assert!(matches!(q.bottleneck, Bottleneck::Weights { distinct_experts: Some(_), .. }), "{:?}", q.bottleneck);
    }

    /// The prefill efficiencies (medians over all five GPUs) against two H200 entries of
    /// kernels.toml at 8192 tokens: `[[moe]]` 15 (fp8_block, hidden 7168, expert FFN 2048, 256
    /// experts, top-8, moe_tp 8: 1881.3 us) and `[[gemm]]` 10 (fp8_block, N=K=8192: 992.74 us),
    /// within 25%.
    #[test]
    fn prefill_efficiencies_reproduce_h200_kernel_tables_within_25_percent() {
        let g = gpu("h200").expect("gpu");
        let fp8 = g.tflops(ComputeFormat::Fp8) * 1e12;
        let moe_us = 2.0 * 3.0 * 7168.0 * 2048.0 * 8.0 * 8192.0 / 8.0 / (fp8 * PREFILL_MOE_EFFICIENCY) * 1e6;
        assert!(((moe_us - 1881.3) / 1881.3).abs() < 0.25, "fused MoE {moe_us:.0} us vs 1881.3");
        let gemm_us = 2.0 * 8192.0f64.powi(3) / (fp8 * prefill_gemm_efficiency(ComputeFormat::Fp8)) * 1e6;
        assert!(((gemm_us - 992.74) / 992.74).abs() < 0.25, "GEMM {gemm_us:.0} us vs 992.74");
    }

    #[test]
    fn prefill_of_many_prompts_costs_their_sum_not_one_long_sequence() {
        // Regression: n prompts prefilled together were once charged attention as one prompt n times
        // as long (quadratic in n), so throughput fell with concurrency (found by the property test).
        let s = scenario("mixtral-8x7b", Dtype::Fp8, "h100-sxm", "nvlink", 2, 2);
        let one = s.prefill_ms(2048.0, 2048.0, PrefillPass::Beside(1.0));
        let eight = s.prefill_ms(8.0 * 2048.0, 2048.0, PrefillPass::Beside(1.0));
        assert!(eight <= 8.0 * one * (1.0 + 1e-9), "{eight} vs 8 x {one}");
        let mut s = s;
        s.input_len = 4096;
        s.output_len = 64;
        let (a, b) = (s.point(512).output_tokens_per_s, s.point(1024.min(s.max_concurrency())).output_tokens_per_s);
        assert!(b >= a, "{a} -> {b}");
    }

    #[test]
    fn the_steady_ttft_adds_the_request_latency_and_the_rate_does_not_change() {
        let mut s = scenario("llama-3.1-70b", Dtype::Fp8, "h200", "nvlink", 8, 8);
        s.engine.request_latency_ms = 0.0;
        let without = s.point(16);
        s.engine.request_latency_ms = 251.0;
        let with = s.point(16);
        assert!((with.ttft_ms - without.ttft_ms - 251.0).abs() < 1e-9, "{} vs {}", with.ttft_ms, without.ttft_ms);
        assert_eq!(with.output_tokens_per_s, without.output_tokens_per_s);
        assert_eq!(Engine::default().request_latency_ms, SGLANG_REQUEST_LATENCY_MS);
    }

    #[test]
    fn only_an_engine_that_graphs_decode_but_not_prefill_pays_eager_launches_on_prompt_steps() {
        let mut s = scenario("llama-3.1-70b", Dtype::Fp8, "h200", "nvlink", 8, 8);
        s.engine = EngineName::Trtllm.defaults();
        let launches = s.engine.launch_us * s.kernels_per_step() / 1e3;
        assert!((s.eager_prefill_ms() - launches).abs() < 1e-12 && launches > 0.0);
        // vLLM and today's sglang replay graphs for prompt steps too.
        for e in [EngineName::Vllm, EngineName::Sglang] {
            s.engine = e.defaults();
            assert_eq!(s.eager_prefill_ms(), 0.0, "{}", e.name());
        }
        // Without CUDA graphs every step already pays the launches (overhead_ms): not twice.
        s.engine = Engine { cuda_graphs: false, prefill_graphs: false, ..EngineName::Trtllm.defaults() };
        assert_eq!(s.eager_prefill_ms(), 0.0);
        // In the steady state the prompt steps' launches raise the step, by at most one step's worth.
        let graphs = Scenario { engine: EngineName::Trtllm.defaults(), ..s.clone() };
        let eager_free = Scenario { engine: Engine { prefill_graphs: true, ..graphs.engine }, ..s.clone() };
        let (with, without) = (graphs.point(64).step_ms.total, eager_free.point(64).step_ms.total);
        assert!(with > without && with - without <= launches + 1e-9, "{with} vs {without}");
    }

    #[test]
    fn an_fp8_kv_cache_streams_at_the_fa3_tables_rate_on_hopper_gqa_only() {
        let kv_ms = |model: &str, gpu: &str, kv: KvDtype| {
            let mut s = scenario(model, Dtype::Fp8, gpu, "nvlink", 8, 8);
            s.quant.kv_cache = kv;
            let bytes = s.kv_read(64.0, 2048.0);
            (s.stage(64.0, 2048.0).0.kv, bytes / (s.gpu.mem_bw_gbs * 1e9) * 1e3)
        };
        let (fp8, ideal) = kv_ms("llama-3.1-70b", "h200", KvDtype::Fp8);
        assert!((fp8 - ideal / 0.535).abs() < 1e-9, "{fp8} vs {ideal} / 0.535");
        let (bf16, ideal) = kv_ms("llama-3.1-70b", "h200", KvDtype::Bf16);
        assert!((bf16 - ideal / Engine::default().hbm_efficiency).abs() < 1e-9);
        let (b200, ideal) = kv_ms("llama-3.1-70b", "b200", KvDtype::Fp8);
        assert!((b200 - ideal / Engine::default().hbm_efficiency).abs() < 1e-9, "Blackwell keeps the engine's efficiency");
        let (mla, ideal) = kv_ms("deepseek-v3", "h200", KvDtype::Fp8);
        assert!((mla - ideal / Engine::default().hbm_efficiency).abs() < 1e-9, "MLA runs FlashMLA, not FA3");
    }

    #[test]
    fn step_terms_add_up_under_the_overlap_rule() {
        for l in ["pcie-host-staged", "nvlink"] {
            let mut s = scenario("deepseek-v3", Dtype::Fp8, "h200", l, 8, 8);
            for overlap in [Overlap::None, Overlap::Full] {
                s.engine.overlap = overlap;
                for c in [1, 16, 256] {
                    let t = s.point(c).step_ms;
                    let want = match overlap {
                        Overlap::None => (t.weights + t.kv).max(t.compute) + t.communication + t.overhead + t.prefill,
                        Overlap::Full => (t.weights + t.kv).max(t.compute).max(t.communication) + t.overhead + t.prefill,
                    };
                    assert!((t.total - want).abs() < 1e-9);
                }
            }
        }
    }

    #[test]
    fn plan_needing_more_gpus_is_refused() {
        let s = scenario("llama-3.1-8b", Dtype::Bf16, "h100-sxm", "nvlink", 4, 8);
        let e = s.plan.check(&s.model).expect_err("tp > gpus");
        assert!(e.to_string().contains("tp x pp = 8 x 1 = 8 GPUs but --gpus is 4"), "{e}");
    }

    #[test]
    fn a_plan_that_does_not_fit_gives_the_numbers() {
        let s = scenario("deepseek-v3", Dtype::Bf16, "rtx-4090", "pcie4-p2p", 8, 8);
        let e = s.check_fit().expect_err("does not fit");
        assert!(e.to_string().contains("GB of weights"), "{e}");
    }

    pub fn on_nodes(mut s: Scenario, net: &str, gpus_per_node: u32) -> Scenario {
        let net = crate::hw::net(net).expect("net");
        s.cluster = Some(Cluster { nodes: s.plan.gpus / gpus_per_node, gpus_per_node, nics_per_node: gpus_per_node, net });
        s.check_placement().expect("placed");
        s
    }

    fn deepseek_16(net: &str, tp: u32, pp: u32) -> Scenario {
        let mut s = scenario("deepseek-v3", Dtype::Fp8, "h100-sxm", "nvlink", 16, tp);
        s.plan.pp = pp;
        on_nodes(s, net, 8)
    }

    /// Over 100 GbE, TP16 pays two NCCL all-reduces per layer across the network (socket latency
    /// on every NET step), while TP8+PP2 keeps its all-reduces on NVLink and sends one activation
    /// per stage: TP16 is slower per step at every concurrency.
    #[test]
    fn tp16_across_two_nodes_is_slower_per_step_than_tp8_pp2_on_100gbe() {
        let tp16 = deepseek_16("eth-100g", 16, 1);
        let tp8pp2 = deepseek_16("eth-100g", 8, 2);
        for c in [1, 8, 32, 64] {
            let (a, b) = (tp16.point(c), tp8pp2.point(c));
            assert!(a.step_ms.total > b.step_ms.total, "c={c}: TP16 {:.1} ms vs TP8+PP2 {:.1} ms", a.step_ms.total, b.step_ms.total);
            assert!(a.step_ms.communication > b.step_ms.communication, "c={c}");
        }
        // At c=16 the network's all-reduces are the largest term (at c=8 the per-kernel floor
        // ties them; from c=32 the weight reads lead).
        match &tp16.point(16).bottleneck {
            Bottleneck::Communication { across: Some(a), .. } => assert_eq!((a.net.as_str(), a.tp_nodes, a.pp), ("eth-100g", 2, false)),
            other => panic!("TP16 over 100GbE should be communication-bound: {other:?}"),
        }
        assert_eq!(tp8pp2.across_nodes(), Some(Across { net: "eth-100g".into(), tp_nodes: 1, pp: true }));
    }

    #[test]
    fn more_network_bandwidth_is_never_slower() {
        for (tp, pp, dpa) in [(16, 1, false), (8, 2, false), (16, 1, true), (4, 4, false)] {
            let mut s = deepseek_16("roce-200", tp, pp);
            if dpa {
                s.plan.ep = tp;
                s.plan.dp_attention = true;
            }
            for c in [1, 16, 128] {
                let mut prev = f64::INFINITY;
                for beta in [5.0, 22.5, 47.0, 94.0, 400.0] {
                    let mut t = s.clone();
                    if let Some(cl) = &mut t.cluster {
                        cl.net.beta_gbs = beta;
                    }
                    let step = t.point(c).step_ms.total;
                    assert!(step <= prev + 1e-9, "TP{tp} PP{pp} c={c}: {beta} GB/s gives {step} ms, slower than {prev}");
                    prev = step;
                }
            }
        }
    }

    /// A cluster whose groups all fit in one node changes nothing, and a plan on one node has no
    /// cluster at all: the numbers are the single-node ones.
    #[test]
    fn groups_within_a_node_keep_the_single_node_numbers() {
        let one = scenario("deepseek-v3", Dtype::Fp8, "h200", "nvlink", 16, 8);
        let two = on_nodes(one.clone(), "eth-100g", 8);
        assert_eq!(two.across_nodes(), None);
        for c in [1, 32, 256] {
            assert_eq!(one.point(c), two.point(c));
        }
        assert_eq!(one.prefill_ms(4096.0, 1024.0, PrefillPass::Standalone), two.prefill_ms(4096.0, 1024.0, PrefillPass::Standalone));
    }

    #[test]
    fn groups_that_straddle_nodes_are_refused_naming_the_flag() {
        let mut s = scenario("llama-3.1-70b", Dtype::Bf16, "h100-sxm", "nvlink", 24, 8);
        s.cluster = Some(Cluster { nodes: 3, gpus_per_node: 8, nics_per_node: 8, net: crate::hw::net("ib-ndr").expect("net") });
        s.check_placement().expect("TP8 on 8-GPU nodes");
        s.plan.tp = 12;
        let e = s.check_placement().expect_err("TP12 straddles");
        assert!(e.to_string().contains("--tp 12") && e.to_string().contains("--gpus-per-node"), "{e}");
        s.plan.tp = 4;
        s.plan.pp = 3;
        let e = s.check_placement().expect_err("a 12-GPU replica straddles");
        assert!(e.to_string().contains("tp x pp = 4 x 3"), "{e}");
    }

    /// Qwen3-Next's 36 Gated DeltaNet layers hold a fixed state per request, 36 x (32 x 128 x 128 x
    /// 2 B recurrent + 8192 x 3 x 2 B convolution) = 39.5 MB at TP1, at any context: only the 12
    /// full-attention layers' KV grows with it, and the state's per-step read does not change.
    #[test]
    fn hybrid_state_memory_does_not_grow_with_context() {
        let s = scenario("qwen3-next-80b-a3b", Dtype::Bf16, "h200", "nvlink", 1, 1);
        let state = 36.0 * (32.0 * 128.0 * 128.0 * 2.0 + 8192.0 * 3.0 * 2.0);
        assert!((s.state_bytes_gpu() - state).abs() < 1.0, "{}", s.state_bytes_gpu());
        // 12 layers x K and V x 2 KV heads x 256 x 2 bytes per token.
        let full_kv_per_token = 12.0 * 2.0 * 2.0 * 256.0 * 2.0;
        let grow = s.request_bytes_gpu(20_000.0) - s.request_bytes_gpu(10_000.0);
        assert!((grow - 10_000.0 * full_kv_per_token).abs() / grow < 1e-9, "{grow}");
        assert!((s.request_bytes_gpu(0.0) - state).abs() < 1.0);
        let read_grow = s.kv_read(8.0, 2_000.0) - s.kv_read(8.0, 1_000.0);
        assert!((read_grow - 8.0 * 1_000.0 * full_kv_per_token).abs() / read_grow < 1e-9, "{read_grow}");
        assert!((s.kv_read(8.0, 0.0) - 8.0 * 2.0 * state).abs() < 8.0, "the state is read and written back each step");
        // TP splits the heads, so the state per GPU halves at TP2.
        let tp2 = scenario("qwen3-next-80b-a3b", Dtype::Bf16, "h200", "nvlink", 2, 2);
        assert!((tp2.state_bytes_gpu() - state / 2.0).abs() < 1.0);
    }

    /// gpt-oss alternates 128-token sliding-window layers with full ones: past the window a longer
    /// context adds KV reads in the 18 full layers only; a model of sliding layers alone stops there.
    #[test]
    fn sliding_window_kv_read_stops_growing_past_the_window() {
        let s = scenario("gpt-oss-120b", Dtype::Mxfp4, "h200", "nvlink", 1, 1);
        let per = s.kv_bytes_per_token_layer();
        let inside = s.kv_read(1.0, 100.0) - s.kv_read(1.0, 50.0);
        assert!((inside - 50.0 * 36.0 * per).abs() / inside < 1e-9, "{inside}");
        let past = s.kv_read(1.0, 4_000.0) - s.kv_read(1.0, 2_000.0);
        assert!((past - 2_000.0 * 18.0 * per).abs() / past < 1e-9, "{past}");
        let mut only = s.clone();
        only.model.layer_counts = crate::spec::LayerCounts { full: 0, sliding: 36, linear: 0 };
        assert_eq!(only.kv_read(1.0, 128.0), only.kv_read(1.0, 100_000.0));
        assert_eq!(only.request_bytes_gpu(128.0), only.request_bytes_gpu(100_000.0));
        // Memory: a request holds the window, not its whole context, in the sliding layers.
        let mut long = s.clone();
        (long.input_len, long.output_len) = (30_000, 2_000);
        let full_only = long.memory().kv_gb * 1e9 / (32_000.0 * 36.0 * per);
        assert!(long.max_concurrency() as f64 > 1.9 * full_only, "{} vs {full_only:.0}", long.max_concurrency());
    }

    /// The new catalog models give finite, plausible predictions on GPUs they fit: single-request
    /// TPOT between 1 and 200 ms, throughput rising with concurrency.
    #[test]
    fn new_catalog_models_predict_finite_plausible_rates() {
        let cases = [
            ("kimi-k2", Dtype::Fp8, "b300", "nvlink5", 8),
            ("minimax-m2", Dtype::Fp8, "mi300x", "xgmi", 4),
            ("glm-4.5", Dtype::Fp8, "h200", "nvlink", 8),
            ("glm-4.6", Dtype::Bf16, "gb200", "nvlink5", 8),
            ("qwen3-next-80b-a3b", Dtype::Bf16, "h100-sxm", "nvlink", 4),
            ("qwen3.5-397b-a17b", Dtype::Fp8, "mi355x", "xgmi4", 4),
            ("gpt-oss-20b", Dtype::Mxfp4, "rtx-5090", "pcie5-p2p", 1),
            ("llama-3.1-8b", Dtype::Bf16, "a100-40gb", "nvlink3", 1),
            ("qwen3-30b-a3b", Dtype::Fp8, "mi325x", "xgmi", 2),
        ];
        for (m, q, g, l, tp) in cases {
            let s = scenario(m, q, g, l, tp, tp);
            s.check_fit().unwrap_or_else(|e| panic!("{m} on {g}: {e}"));
            let one = s.point(1);
            assert!(one.tpot_ms.is_finite() && (1.0..200.0).contains(&one.tpot_ms), "{m} on {g}: TPOT {}", one.tpot_ms);
            let many = s.point(64.min(s.max_concurrency()));
            assert!(many.output_tokens_per_s.is_finite() && many.output_tokens_per_s > one.output_tokens_per_s, "{m} on {g}");
        }
    }
}
