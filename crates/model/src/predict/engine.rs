//! The serving engine's behaviour that the prediction assumes.
//!
//! [`Engine`] holds every figure the model takes from the engine rather than from the hardware or
//! the architecture: the per-step and per-kernel overhead floors, whether decode and prefill steps
//! run as CUDA graphs, whether prefill rides inside decode steps, the streaming and GEMM
//! efficiencies used where the kernel tables have no rate, the memory share the engine may use,
//! the workspace it reserves, the communication and streaming multipliers `--calibrate` fits, and
//! the serving-path latency a client adds to TTFT. Each field's doc names its source: a fit on the
//! FIT set of e2e.toml (never the test set), a kernel table, an engine's documented default, or
//! an assumption said as such.
//!
//! [`EngineName`] is the engine a user names (sglang, vLLM, TensorRT-LLM) and gives its defaults:
//! its request latency (the constants below, measured as the median serving-path time of each
//! engine's fit rows), whether its prompt-carrying steps replay CUDA graphs (sglang since
//! [`SGLANG_PIECEWISE_DEFAULT`]), and its memory share (vLLM's `--gpu-memory-utilization`
//! default, [`VLLM_GPU_MEMORY_UTILIZATION`]).

use serde::{Deserialize, Serialize};

use super::{BatchDefaults, MemShare, Overlap, StatePoolRelease};
use crate::ModelError;

/// [`Engine::cdna3_floor_scale`]'s default: fitted on the fit set's CDNA 3 rows (see there).
pub const CDNA3_FLOOR_SCALE: f64 = 1.9;

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
    /// counted from the model's layers ([`Scenario::kernels_per_step`](super::Scenario::kernels_per_step): a dense GQA layer runs
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
    /// step 23, 40 us since the refit on the dated extension of 2026-12-05 (with the per-kernel
    /// floor then 5.3 us and the MoE efficiency 0.50; `validate::tests::joint_refit_on_the_fit_set`),
    /// kept by the refit of 2026-12-06 after the engines' KV-cache default (floor 5.2 us), 42.5 us
    /// since the refit on the third dated extension (2026-12-06, Nemotron-H; floor 4.9 us), 45 us
    /// since the objective weighs each source by the square root of its rows (step 31, chosen by
    /// `validate::crossval`; floor 5.0 us), 40 us since the refit on the fourth dated extension
    /// (step 33, 2026-12-06; the objective is flat there: 0.1070 at 42.5 us, 0.1069 at 40), 35 us
    /// since the router's skew was fitted with it (step 34: floor 6.0 us), 40 us since the skew
    /// was set from kernel data instead (step 35: floor 5.0 us, MoE efficiency 0.45), 35 us since
    /// MXFP4 experts read at the kernel tables' rates (step 37: floor 5.2 us, MoE efficiency
    /// 0.55), kept by the refit after the embedding's all-reduce and the LM head's logits
    /// all-gather were priced (step 43, 2026-12-07: objective 0.1008); one
    /// figure for every engine and GPU (the fit set cannot tell them
    /// apart: one source each). A stated `--step-overhead-ms` leaves it in place;
    /// `--request-step-us` replaces it.
    pub request_step_us: f64,
    /// Whether communication hides behind compute.
    pub overlap: Overlap,
    /// Achieved fraction of peak memory bandwidth reading the KV cache where kernels.toml has no
    /// decode-attention rate (all but FP8 GQA on Hopper and dense MLA on the tables' GPUs:
    /// `Scenario::kv_read_efficiency`), and dense weights on a GPU or in a format it has no GEMM
    /// rate for ([`Scenario::dense_stream_efficiency`](super::Scenario::dense_stream_efficiency)); an assumption, typical of decode GEMV kernels.
    pub hbm_efficiency: f64,
    /// Achieved fraction of peak bandwidth reading expert weights in fused-MoE kernels at decode
    /// batch sizes, on a GPU or in a format kernels.toml has no MoE rate for (AMD, the H20 and other
    /// GPUs without tables; MXFP4 only on those and the A100 since step 37: [`Self::moe_table`]); chosen on the FIT set of
    /// e2e.toml with `kernel_overhead_us`, see there.
    pub moe_efficiency: f64,
    /// Achieved fraction of peak tensor TFLOPS in decode steps (a torch BF16 GEMM reached 417 of 468
    /// TFLOPS on the reference RTX PRO 6000); prefill uses [`prefill_gemm_efficiency`](super::prefill_gemm_efficiency) and
    /// [`PREFILL_MOE_EFFICIENCY`](super::PREFILL_MOE_EFFICIENCY) from the kernel tables.
    pub gemm_efficiency: f64,
    /// Multiplier on modelled communication time (1 = the NCCL alpha-beta model; fitted by `--calibrate`).
    pub comm_scale: f64,
    /// Distinct experts the busiest EP rank reads over the mean rank's expected count under uniform
    /// routing. 1.0: chosen on the FIT set (the argmin of `validate::fit_objective` over 1.0..1.3
    /// by 0.05, each value with the per-kernel floor, the MoE efficiency and the per-request cost
    /// re-chosen; `validate::tests::ep_imbalance_scan_on_the_fit_set`, VALIDATION.md step 23),
    /// never the test set. The fit set's 168 rows with EP (step 23's count; the scan of step 36 moves 177) see no net excess: skewed routing loads
    /// the busiest rank more but also leaves fewer experts touched, and the two cancel there. It
    /// was 1.2, an assumption with no source, until step 23. Fitted under uniform routing, and
    /// scanned again under the kernel-derived [`Self::routing_skew`] in step 36 with the floor,
    /// MoE efficiency and per-request cost refit at each value: 1.0 stays the argmin (fit
    /// objective 0.0962; 0.0973 at 1.05, 0.0967 at 1.10, 0.0997 at 1.20; VALIDATION.md, eleventh
    /// sitting).
    pub ep_imbalance: f64,
    /// How unevenly the router spreads a decode step's tokens over the experts: expert i (by
    /// popularity) is picked with a probability proportional to i^-s (a Zipf law; 0 is uniform,
    /// every expert equally likely, the model before step 34), which lowers the distinct experts
    /// a batch of 16 to 256 tokens reads ([`distinct_expert_fraction`]; at 256 experts, top 8 and
    /// 64 tokens: 87% of the experts uniform, 81% at 0.45). 0.45: derived from kernel data, not
    /// fitted (VALIDATION.md, eleventh sitting, step 35). NVIDIA AIConfigurator
    /// (github.com/ai-dynamo/aiconfigurator @ 095f58a5, Apache-2.0) times each fused-MoE layer
    /// under balanced routing and under its power-law routing (alpha 1.01, its estimate for
    /// DeepSeek-V3/R1 on CNN/DailyMail and OpenOrca prompts, in that repository's
    /// `docs/POWER_LAW_DISTRIBUTION.md`; power law is its predictions' default, its
    /// `aic-core/src/aiconfigurator_core/sdk/config.py`). A balanced call of n tokens reads
    /// min(E, n k) experts, so its line through latency against experts read turns a power-law
    /// call's latency into the experts it effectively reads; over sglang 0.5.14's and vLLM
    /// 0.24.0's kernels on H100, H200, B200 and B300 the Zipf exponent closest to those shares is
    /// 0.45 (kernels.toml `[[routing]]`, `scripts/routing-skew-from-kernels`; the test
    /// `kernels::tests::the_routing_skew_is_the_kernel_tables_argmin` recomputes it; every GPU
    /// and engine alone gives 0.40 to 0.55). The share is what the kernel's time shows, which is
    /// what a step prices; AIConfigurator's generator leaves more experts untouched than that
    /// (27-31% of 256 experts at 16 tokens), as hot experts cost more than one read. Step 34 had
    /// fitted 0.85 on the FIT set; the kernel tables put 0.85 far off (median |ln| 0.228 against
    /// 0.078) and step 35 replaced it. Benchmarks send random token ids; this is not a measured
    /// router statistic, and the test set and holdout took no part in it.
    pub routing_skew: f64,
    /// How the engine sizes its share of each GPU's memory for weights and caches: a given share,
    /// or the release's default rule ([`MemShare`]; [`Scenario::mem_fraction`] gives the share).
    ///
    /// [`Scenario::mem_fraction`]: super::Scenario::mem_fraction
    pub mem_share: MemShare,
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
    /// Multiplier on every step's time (decode terms, overhead, prefill) for an early release
    /// ([`EngineRelease::is_early`]): [`EARLY_RELEASE_STEP_SCALE`] there, else 1. A calibration
    /// fitted on the fit set's early-release rows, not a modelled feature.
    pub release_step_scale: f64,
    /// The scale an early release gets ([`EARLY_RELEASE_STEP_SCALE`]); the refit varies it.
    pub early_release_scale: f64,
    /// The release family whose default batch limits apply: the running cap a scheduler keeps
    /// and the largest decode batch it replays as a CUDA graph ([`BatchDefaults`], from the
    /// engines' code; [`EngineRelease::batch_defaults`]).
    pub batch: BatchDefaults,
    /// The engine's own pool for a hybrid model's linear-attention state, by release
    /// ([`StatePoolRelease`]: sglang's), or None where the state shares the KV cache's memory.
    pub state_pool: Option<StatePoolRelease>,
    /// The cuts the release makes to its share of memory for a multimodal model and on AMD GPUs
    /// ([`ShareCuts`]).
    pub share_cuts: ShareCuts,
}

/// The cuts sglang makes to the share of memory it takes, by release ([`EngineRelease::share_cuts`];
/// what they come to for a model and GPU: `Scenario::vision_scale`, `Scenario::aiter_scale`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ShareCuts {
    /// The cut for a multimodal model's vision encoder.
    pub vision: VisionCut,
    /// Gemma 3 and Llama 4 are served as text models unless `--enable-multimodal` is given, so
    /// take no vision cut (`mm_disabled_models`, from 0.4.6; 0.4.5 cuts Gemma 3).
    pub text_only_families: bool,
    /// Which models keep 0.85 of the share on AMD GPUs whose attention runs on aiter.
    pub aiter: AiterCut,
}

/// How an sglang release cuts its share of memory for a multimodal model, one it serves with its
/// vision encoder (read from its released code; docs/plan.md, "sglang's memory share").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VisionCut {
    /// No cut (vLLM, TensorRT-LLM).
    None,
    /// 0.95 of any share, a given one too, in `ModelRunner` (0.4.3 and 0.4.4 read; taken for
    /// every release before 0.4.5).
    AnyShare95,
    /// 0.90 of any share, a given one too, in `ModelRunner` (0.4.5, 0.4.6 and 0.4.8 read).
    AnyShare90,
    /// 0.90 of its own default only, in `ServerArgs` (0.4.9).
    OwnDefault90,
    /// Its own default only, by the encoder's size (`adjust_mem_fraction_for_vlm`, from 0.4.10).
    BySize,
}

impl VisionCut {
    /// The cut is the model runner's, on any share, given ones too, after the flag's value.
    pub fn in_runner(self) -> bool {
        matches!(self, VisionCut::AnyShare95 | VisionCut::AnyShare90)
    }
}

/// Which models an sglang release keeps 0.85 of the share for on AMD GPUs whose attention runs on
/// aiter, when their context is over 8,192 tokens, given share or default alike
/// (`ModelRunner.model_specific_adjustment` from 0.4.8 to 0.5.3,
/// `_handle_attention_backend_compatibility` from 0.5.5; 0.5.4 not read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AiterCut {
    /// None: before 0.4.8, and vLLM and TensorRT-LLM.
    None,
    /// Every model on aiter but GPT-OSS, which sglang sends to Triton on AMD GPUs (its model
    /// adjustments in 0.5.1 .. 0.5.9 read; taken until 0.5.17).
    NotGptOss,
    /// Every model on aiter (from 0.5.17, whose GPT-OSS overrides pick aiter on AMD GPUs).
    Every,
}

impl Default for Engine {
    fn default() -> Self {
        Self {
            step_overhead_ms: 0.0,
            kernel_overhead_us: 5.2,
            gemm_floor_us: 5.2,
            cdna3_floor_scale: CDNA3_FLOOR_SCALE,
            cuda_graphs: true,
            prefill_graphs: true,
            launch_us: 4.0,
            request_step_us: 35.0,
            overlap: Overlap::None,
            hbm_efficiency: 0.80,
            moe_efficiency: 0.55,
            gemm_efficiency: 0.89,
            comm_scale: 1.0,
            ep_imbalance: 1.0,
            routing_skew: 0.45,
            mem_share: MemShare::SglangReserve { minor: SGLANG_CURRENT_MINOR },
            workspace_gb: 3.0,
            request_latency_ms: SGLANG_REQUEST_LATENCY_MS,
            mixed_prefill: false,
            moe_table: true,
            stream_scale: 1.0,
            serving: EngineName::Sglang,
            release_step_scale: 1.0,
            early_release_scale: EARLY_RELEASE_STEP_SCALE,
            batch: BatchDefaults::SglangTable { minor: SGLANG_CURRENT_MINOR },
            state_pool: Some(StatePoolRelease::Split0523),
            share_cuts: ShareCuts { vision: VisionCut::BySize, text_only_families: true, aiter: AiterCut::Every },
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
        let base = Engine {
            serving: self,
            request_latency_ms: self.request_latency_ms(),
            mixed_prefill: self.mixes_prefill(),
            prefill_graphs: self.graphs_prefill(),
            ..Engine::default()
        };
        EngineRelease::current(self).with_defaults(base, None)
    }
}

/// The first sglang release, and the date, with piecewise CUDA graphs for prefill on by default
/// (sglang PR 16331 "Piecewise Cuda Graph set default", merged 2026-03-02; 0.5.9 predates it):
/// older sglang runs its prefill passes eagerly ([`EngineName::graphs_prefill`]).
pub const SGLANG_PIECEWISE_DEFAULT: ((u32, u32, u32), &str) = ((0, 5, 10), "2026-03-02");

/// The newest sglang 0.5.x release read for its defaults (0.5.23, 2026-10-30): what a current
/// sglang runs ([`BatchDefaults::SglangTable`], [`MemShare::SglangReserve`]).
pub const SGLANG_CURRENT_MINOR: u32 = SGLANG_0_5_RELEASES[0].0;

/// sglang 0.4.5's, 0.4.9's and 0.4.10's PyPI upload dates: the releases whose cut for a
/// multimodal model's share changed ([`VisionCut`]; their .post releases not read).
const SGLANG_0_4_5_DATE: &str = "2025-04-07";
const SGLANG_0_4_9_DATE: &str = "2025-07-06";
const SGLANG_0_4_10_DATE: &str = "2025-07-31";

/// sglang 0.5.17's PyPI upload date: its prefill-graph rules, and GPT-OSS on aiter on AMD GPUs.
const SGLANG_0_5_17_DATE: &str = "2026-08-08";

/// The date that stands for sglang 0.4.6 where a measurement names no release (not checked).
const SGLANG_0_4_6_DATE: &str = "2025-04-27";

/// The sglang 0.5.x releases whose defaults differ from the release before them in what the model
/// reads (batch table, memory share, state pool, prefill graphs' reserve), newest first, each with
/// its PyPI upload date: the date stands for the release when a measurement or a nightly names no
/// version ([`EngineRelease::sglang_minor`]).
const SGLANG_0_5_RELEASES: [(u32, &str); 10] = [
    (23, "2026-10-30"),
    (20, "2026-09-18"),
    (17, SGLANG_0_5_17_DATE),
    (14, "2026-06-26"),
    (9, "2026-02-23"),
    (8, "2026-01-23"),
    (7, "2026-01-01"),
    (5, "2025-11-06"),
    (4, "2025-10-24"),
    (3, "2025-10-06"),
];

/// The first release of each engine (sglang, vLLM, TensorRT-LLM) after the early ones, with the
/// date that stands for it when a measurement names no version: sglang 0.4.8 (PyPI, 2025-06-24),
/// vLLM 0.9.2 (2025-07-08), TensorRT-LLM 1.0 (its date not checked: 2025-07-01 stands in). The
/// model's fitted constants describe the releases from these on; an earlier one is
/// [`EngineRelease::is_early`].
pub const EARLY_RELEASES_END: (FirstRelease, FirstRelease, FirstRelease) =
    (((0, 4, 8), "2025-06-24"), ((0, 9, 2), "2025-07-08"), ((1, 0, 0), "2025-07-01"));

/// A release number and the date that stands for it.
pub type FirstRelease = ((u32, u32, u32), &'static str);

/// How much longer an early release's steps take than the model's figures for today's
/// ([`Engine::release_step_scale`]): the argmin of the median |error| of the FIT set's
/// early-release rows over 1.0..4.0 by 0.05 (`validate::tests::early_release_scan_on_the_fit_set`;
/// two sources, DeepSeek-R1 on 8 H200 and 8 MI300X under sglang 0.4.2/0.4.3, vLLM 0.7.3/0.7.4
/// and TensorRT-LLM 0.17, and Qwen3 on H20 under sglang 0.4.6), never the test set or the
/// holdout. A calibration, not a model of what changed: 2.2 until the refit of 2026-12-06, when the
/// engines' KV-cache default gave early vLLM releases a BF16 cache ([`VLLM_CHECKPOINT_KV`]); 2.15
/// until the objective weighed each source by the square root of its rows (step 31); 2.1 until
/// the router's skew (step 34), which priced every MoE decode step lighter; 2.6 until step 35 set
/// that skew from kernel data (0.45, not 0.85).
pub const EARLY_RELEASE_STEP_SCALE: f64 = 2.1;

/// The first vLLM release whose default engine is V1 (vLLM 0.8.0 release notes, March 2025: "V1
/// engine enabled by default"): V1 puts new prompts' tokens into the running decode steps. V0,
/// the default before it, ran a waiting prompt as a prefill step of its own first (its chunked
/// prefill was opt-in for most models), as sglang does.
pub const VLLM_V1_DEFAULT: (u32, u32, u32) = (0, 8, 0);

/// The first vLLM release whose `--kv-cache-dtype auto` takes a ModelOpt checkpoint's declared KV
/// format (`kv_cache_quant_algo`): vLLM PR 30785 (opened 2025-12-16, the re-landing of the reverted
/// PR 29980), taken as 0.14.0, the first release after it. Earlier releases kept the model's BF16
/// unless `--kv-cache-dtype fp8` was given. The date stands for 0.14.0 where a measurement names
/// no release: on 2026-01-09 only 0.13 was published (QwenLM/Qwen3-VL-Embedding issue 7), and a
/// downstream "Support vllm 0.14.0" PR is dated 2026-01-16 (MetaX-MACA/vLLM-metax PR 197).
pub const VLLM_CHECKPOINT_KV: ((u32, u32, u32), &str) = ((0, 14, 0), "2026-01-16");

/// The first sglang release whose `--kv-cache-dtype auto` takes a ModelOpt checkpoint's declared
/// KV format: 0.5.3 for NVFP4 exports (0.5.4 for FP8 ones, not told apart here), read from its
/// released code (docs/plan-data-sources.md); the date is 0.5.3's, as for its batch defaults.
pub const SGLANG_CHECKPOINT_KV: ((u32, u32, u32), &str) = ((0, 5, 3), "2025-10-06");

/// An engine release as a user names it (`sglang`, `sglang@0.4.6`, `vllm@0.7.3`): the engine and,
/// when given, its version, whose release-dependent defaults the model applies
/// ([`EngineRelease::defaults`]). Without a version, the engine's current defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EngineRelease {
    /// The engine.
    pub name: EngineName,
    /// The version as given (a release such as `0.4.6`, a nightly tag with its yyyymmdd date, or
    /// an image tag), `None` for the current release.
    pub version: Option<String>,
}

/// One release-dependent default and whether a release has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReleaseFeature {
    /// What it is.
    pub feature: &'static str,
    /// Whether the release has it on by default.
    pub on: bool,
    /// The first release with it, and where that is stated.
    pub since: &'static str,
}

impl EngineRelease {
    /// The current release of `name`.
    pub fn current(name: EngineName) -> Self {
        EngineRelease { name, version: None }
    }

    /// Parses `engine[@version]` given to `flag`; a version must start with a digit (`0.4.6`,
    /// `v0.4.6`) or name a nightly.
    pub fn parse(flag: &str, s: &str) -> Result<Self, ModelError> {
        let (name, version) = match s.split_once('@') {
            Some((n, v)) => (n, Some(v.trim())),
            None => (s, None),
        };
        let name = EngineName::parse(flag, name)?;
        match version {
            None => Ok(Self::current(name)),
            Some(v) if v.contains('@') => Err(ModelError::Input(format!(
                "{flag} {s}: more than one @; give ENGINE@X.Y.Z (e.g. {}@0.4.6) or the engine alone for its current release",
                name.name()
            ))),
            // vLLM has published a four-part release (0.10.1.1); none has five.
            Some(v) if release_parts(v) > 4 && nightly_date(v).is_none() => Err(ModelError::Input(format!(
                "{flag} {s}: {v:?} has {} numeric parts; a release has at most four (X.Y.Z or X.Y.Z.W, with a suffix such as .post1 or rc2)",
                release_parts(v)
            ))),
            Some(v) if release_numbers(v).is_some() || nightly_date(v).is_some() => {
                Ok(EngineRelease { name, version: Some(v.to_string()) })
            }
            Some(v) => Err(ModelError::Input(format!(
                "{flag} {s}: {v:?} is not a release version; give ENGINE@X.Y.Z (e.g. {}@0.4.6) or the engine alone for its current release",
                name.name()
            ))),
        }
    }

    /// As a user writes it.
    pub fn label(&self) -> String {
        match &self.version {
            Some(v) => format!("{}@{v}", self.name.name()),
            None => self.name.name().to_string(),
        }
    }

    /// Whether the release is at or after `first` (a release number or, for a nightly, its date
    /// against `since`); `date` (of a measurement, yyyy-mm-dd) decides when the version names
    /// neither; with nothing known, the current release.
    fn at_least(&self, first: (u32, u32, u32), since: Option<&str>, date: Option<&str>) -> bool {
        let v = self.version.as_deref().unwrap_or("");
        if let (Some(d), Some(since)) = (nightly_date(v), since) {
            let since: String = since.chars().filter(char::is_ascii_digit).collect();
            return d.as_str() >= since.as_str();
        }
        if let Some(n) = release_numbers(v) {
            return n >= first;
        }
        match (date, since) {
            (Some(d), Some(since)) if d.len() >= 10 && d.is_char_boundary(10) => &d[..10] >= since,
            _ => true,
        }
    }

    /// The sglang 0.5.x minor release this release is or stands for, decided as [`Self::at_least`]
    /// decides: a nightly by its date; a 0.5.x version gives its own minor, a later one (0.6 and
    /// up) the newest of [`SGLANG_0_5_RELEASES`], an earlier one None; with neither, the
    /// measurement's `date` gives the newest release of the table at or before it (None before
    /// 0.5.3's), and with no date the newest. None for other engines.
    pub fn sglang_minor(&self, date: Option<&str>) -> Option<u32> {
        if self.name != EngineName::Sglang {
            return None;
        }
        let v = self.version.as_deref().unwrap_or("");
        match release_numbers(v) {
            Some((0, 5, m)) if nightly_date(v).is_none() => Some(m),
            _ => SGLANG_0_5_RELEASES.iter().find(|(m, since)| self.at_least((0, 5, *m), Some(since), date)).map(|&(m, _)| m),
        }
    }

    /// The cuts the release makes to the share of memory it takes ([`ShareCuts`]); `date`
    /// decides where the version names no release.
    pub fn share_cuts(&self, date: Option<&str>) -> ShareCuts {
        if self.name != EngineName::Sglang {
            return ShareCuts { vision: VisionCut::None, text_only_families: false, aiter: AiterCut::None };
        }
        let vision = if self.at_least((0, 4, 10), Some(SGLANG_0_4_10_DATE), date) {
            VisionCut::BySize
        } else if self.at_least((0, 4, 9), Some(SGLANG_0_4_9_DATE), date) {
            VisionCut::OwnDefault90
        } else if self.at_least((0, 4, 5), Some(SGLANG_0_4_5_DATE), date) {
            VisionCut::AnyShare90
        } else {
            VisionCut::AnyShare95
        };
        let aiter = if self.at_least((0, 5, 17), Some(SGLANG_0_5_17_DATE), date) {
            AiterCut::Every
        } else if self.at_least(EARLY_RELEASES_END.0 .0, Some(EARLY_RELEASES_END.0 .1), date) {
            AiterCut::NotGptOss
        } else {
            AiterCut::None
        };
        ShareCuts { vision, text_only_families: self.at_least((0, 4, 6), Some(SGLANG_0_4_6_DATE), date), aiter }
    }

    /// Whether the release replays CUDA graphs for steps that carry prompt tokens: sglang from
    /// [`SGLANG_PIECEWISE_DEFAULT`], the others as [`EngineName::graphs_prefill`]. `date` is the
    /// measurement's, used when the version names no release.
    pub fn prefill_graphs(&self, date: Option<&str>) -> bool {
        match self.name {
            EngineName::Sglang => {
                let (first, since) = SGLANG_PIECEWISE_DEFAULT;
                self.at_least(first, Some(since), date)
            }
            other => other.graphs_prefill(),
        }
    }

    /// Whether the release puts new prompts' tokens into the running decode steps: vLLM from
    /// [`VLLM_V1_DEFAULT`], the others as [`EngineName::mixes_prefill`].
    pub fn mixes_prefill(&self) -> bool {
        match self.name {
            EngineName::Vllm => self.at_least(VLLM_V1_DEFAULT, None, None),
            other => other.mixes_prefill(),
        }
    }

    /// The release's default batch limits ([`BatchDefaults`]); `date` (the measurement's) decides
    /// where the version names no release.
    pub fn batch_defaults(&self, date: Option<&str>) -> BatchDefaults {
        match self.name {
            EngineName::Sglang => match self.sglang_minor(date) {
                Some(minor) if minor >= 3 => BatchDefaults::SglangTable { minor },
                _ => BatchDefaults::SglangBeforeTable {
                    since_0_4_8: self.at_least(EARLY_RELEASES_END.0 .0, Some(EARLY_RELEASES_END.0 .1), date),
                },
            },
            EngineName::Vllm if !self.mixes_prefill() => BatchDefaults::VllmV0,
            EngineName::Vllm => BatchDefaults::VllmV1 {
                by_memory: self.at_least((0, 8, 5), Some("2025-04-28"), date),
                not_a100: self.at_least((0, 9, 0), Some("2025-05-28"), date),
                blackwell_1024: self.at_least((0, 28, 0), Some("2026-08-26"), date),
            },
            EngineName::Trtllm => BatchDefaults::Trtllm,
        }
    }

    /// The release's default share of each GPU's memory ([`MemShare`]): sglang's rule by release
    /// (the dates are the releases' PyPI uploads; 0.4.6's and 0.4.7's, not checked, stand in
    /// as 2025-04-27 and 2025-06-09), vLLM's `--gpu-memory-utilization` 0.9 and the 0.88
    /// TensorRT-LLM is given. `date` decides where the version names no release.
    pub fn mem_share(&self, date: Option<&str>) -> MemShare {
        match self.name {
            EngineName::Vllm => MemShare::VllmDefault,
            EngineName::Trtllm => MemShare::TrtllmAssumed,
            EngineName::Sglang => {
                let minor = self.sglang_minor(date);
                // 0.4.6.post5 already has 0.4.7's rule but its B200 branch (.post1 .. .post4 not read).
                let post5 = self
                    .version
                    .as_deref()
                    .and_then(|v| v.trim_start_matches('v').strip_prefix("0.4.6.post"))
                    .and_then(|n| n.split(|ch: char| !ch.is_ascii_digit()).next()?.parse::<u32>().ok())
                    .is_some_and(|n| n >= 5);
                match minor {
                    Some(m) if m >= 3 => MemShare::SglangReserve { minor: m },
                    _ if self.at_least((0, 4, 8), Some(EARLY_RELEASES_END.0 .1), date) => MemShare::SglangByClass,
                    _ if self.at_least((0, 4, 7), Some("2025-06-09"), date) => MemShare::Sglang047 { over_180k: true },
                    _ if post5 => MemShare::Sglang047 { over_180k: false },
                    _ if self.at_least((0, 4, 6), Some(SGLANG_0_4_6_DATE), date) => MemShare::Sglang046,
                    _ => MemShare::SglangByTp,
                }
            }
        }
    }

    /// The release's pool for a hybrid model's linear-attention state ([`StatePoolRelease`]):
    /// sglang's, by release (the dates are the releases' PyPI uploads); vLLM and TensorRT-LLM
    /// have none. `date` decides where the version names no release.
    pub fn state_pool(&self, date: Option<&str>) -> Option<StatePoolRelease> {
        if self.name != EngineName::Sglang {
            return None;
        }
        let era = match self.sglang_minor(date) {
            Some(23..) => StatePoolRelease::Split0523,
            Some(14..=22) => StatePoolRelease::Split0514,
            Some(9..=13) => StatePoolRelease::Split059,
            Some(8) => StatePoolRelease::Split058,
            Some(7) => StatePoolRelease::Split057,
            Some(4..=6) => StatePoolRelease::Split054,
            _ => StatePoolRelease::Fixed512,
        };
        Some(era)
    }

    /// The KV-cache format the release's `--kv-cache-dtype auto` (every engine's default) gives a
    /// checkpoint that declares `declared` ([`crate::quant::KvDtype::declared_by`]): the declared
    /// format for TensorRT-LLM (its `auto` reads the checkpoint's quantization config), for
    /// sglang from [`SGLANG_CHECKPOINT_KV`] (its `configure_kv_cache_dtype` reads
    /// `kv_cache_quant_algo`) and for vLLM from [`VLLM_CHECKPOINT_KV`]; before those, the model's
    /// BF16. `date` (the measurement's) decides where the version names no release.
    pub fn auto_kv(&self, declared: crate::quant::KvDtype, date: Option<&str>) -> crate::quant::KvDtype {
        let first = match self.name {
            EngineName::Sglang => SGLANG_CHECKPOINT_KV,
            EngineName::Vllm => VLLM_CHECKPOINT_KV,
            EngineName::Trtllm => return declared,
        };
        if self.at_least(first.0, Some(first.1), date) {
            declared
        } else {
            crate::quant::KvDtype::Bf16
        }
    }

    /// Whether the release is an early one, before the model's fitted constants
    /// ([`EARLY_RELEASES_END`]): those run markedly slower than the model's figures (the
    /// early-2025 releases' MLA, MoE and scheduling paths), which [`EARLY_RELEASE_STEP_SCALE`]
    /// stands in for. `date` decides where the version names no release.
    pub fn is_early(&self, date: Option<&str>) -> bool {
        let (first, since) = match self.name {
            EngineName::Sglang => EARLY_RELEASES_END.0,
            EngineName::Vllm => EARLY_RELEASES_END.1,
            EngineName::Trtllm => EARLY_RELEASES_END.2,
        };
        !self.at_least(first, Some(since), date)
    }

    /// The release-dependent defaults the model applies, for a reader.
    pub fn features(&self) -> Vec<ReleaseFeature> {
        let mut out = Vec::new();
        if self.name == EngineName::Sglang {
            out.push(ReleaseFeature {
                feature: "--kv-cache-dtype auto takes the checkpoint's declared KV format (FP8 for ModelOpt NVFP4 exports)",
                on: self.at_least(SGLANG_CHECKPOINT_KV.0, Some(SGLANG_CHECKPOINT_KV.1), None),
                since: "sglang 0.5.3 (0.5.4 for ModelOpt FP8 exports; before it, BF16 unless --kv-cache-dtype fp8_e4m3)",
            });
            out.push(ReleaseFeature {
                feature: "piecewise CUDA graphs for prefill",
                on: self.prefill_graphs(None),
                since: "sglang 0.5.10 (PR 16331, merged 2026-03-02)",
            });
        }
        if self.is_early(None) {
            out.push(ReleaseFeature {
                feature: "early release: every step takes the fitted early-release scale times the model's time (EARLY_RELEASE_STEP_SCALE, a calibration on the fit set's early-release rows)",
                on: true,
                since: "sglang 0.4.8, vLLM 0.9.2, TensorRT-LLM 1.0 end it (VALIDATION.md)",
            });
        }
        if self.name == EngineName::Vllm {
            out.push(ReleaseFeature {
                feature: "--kv-cache-dtype auto takes the checkpoint's declared KV format (FP8 for ModelOpt NVFP4 exports)",
                on: self.at_least(VLLM_CHECKPOINT_KV.0, Some(VLLM_CHECKPOINT_KV.1), None),
                since: "vLLM 0.14.0 (PR 30785, opened 2025-12-16; before it, BF16 unless --kv-cache-dtype fp8)",
            });
            out.push(ReleaseFeature {
                feature: "V1 engine (prompt tokens ride in decode steps)",
                on: self.mixes_prefill(),
                since: "vLLM 0.8.0 (release notes: V1 engine enabled by default)",
            });
        }
        out
    }

    /// The model's defaults for this release: [`EngineName::defaults`] with the release's
    /// prefill mixing and prefill graphs.
    pub fn defaults(&self) -> Engine {
        let base = Engine { mixed_prefill: self.mixes_prefill(), prefill_graphs: self.prefill_graphs(None), ..self.name.defaults() };
        self.with_defaults(base, None)
    }

    /// `base` with the release's defaults for a measurement of `date` (None where none is known):
    /// its batch limits, state pool, memory share (a share `base` was given stays), the cuts to
    /// that share, and, for an early release, `base`'s early-release step scale. The one place
    /// these are set together, for a plan and for a validation case alike; prefill mixing and
    /// prefill graphs are the caller's, which a case's own flags may change.
    pub fn with_defaults(&self, base: Engine, date: Option<&str>) -> Engine {
        Engine {
            batch: self.batch_defaults(date),
            state_pool: self.state_pool(date),
            share_cuts: self.share_cuts(date),
            mem_share: match base.mem_share {
                MemShare::Given(f) => MemShare::Given(f),
                _ => self.mem_share(date),
            },
            release_step_scale: if self.is_early(date) { base.early_release_scale } else { 1.0 },
            ..base
        }
    }
}

/// A release's leading x.y.z (`0.4.6`, `v0.5.10rc1`, `0.5.10-cu129`), if it has one.
fn release_numbers(v: &str) -> Option<(u32, u32, u32)> {
    let head = release_head(v);
    // An empty part (`0..5`) or one too large for a number (`0.5.99999999999`) is no release.
    let nums: Vec<u32> = head.split('.').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    (nums.len() >= 2).then(|| (nums[0], nums[1], nums.get(2).copied().unwrap_or(0)))
}

/// A version's release part: its leading digits and dots, less a `v` (`0.4.6` of
/// `v0.4.6.post5`: the dot before a suffix is not a part).
fn release_head(v: &str) -> &str {
    v.trim_start_matches('v').split(|ch: char| !ch.is_ascii_digit() && ch != '.').next().unwrap_or("").trim_end_matches('.')
}

/// How many dot-separated numbers a version's release part holds (`0.4.6.post5`: 3).
fn release_parts(v: &str) -> usize {
    release_head(v).split('.').count()
}

/// A nightly's build date (yyyymmdd) from its tag.
fn nightly_date(v: &str) -> Option<String> {
    if !v.contains("nightly") {
        return None;
    }
    v.split(|ch: char| !ch.is_ascii_digit()).find(|d| d.len() == 8 && d.starts_with("20")).map(str::to_string)
}

/// vLLM's `--gpu-memory-utilization` default (vLLM "Engine Arguments", docs.vllm.ai): the memory
/// share a vLLM deployment runs with.
pub const VLLM_GPU_MEMORY_UTILIZATION: f64 = 0.9;

/// The memory share a TensorRT-LLM deployment is given: sglang's classic 0.88 (an assumption;
/// TensorRT-LLM's `free_gpu_memory_fraction` is a share of the memory left after the weights,
/// which the model does not track).
pub const TRTLLM_MEM_FRACTION: f64 = 0.88;

/// sglang's per-request serving-path latency, ms ([`Engine::request_latency_ms`]): the median,
/// over the FIT set's sglang cases of e2e.toml at client concurrency 8 or less
/// ([`crate::validate::LATENCY_FIT_MAX_CONCURRENCY`]), of measured TTFT less the TTFT predicted
/// without it (`validate::tests` recomputes it). Since the virtual run schedules sglang prefill
/// first (a burst of prompts is prefilled before any of them decodes), the gap no longer grows with
/// concurrency on the fit set's sglang rows (medians 226 / 258 / 213 ms at c <= 8, 16-32 and 64;
/// 243 / 463 / 720 ms with mixed steps, 243.3 ms the constant then); the rule stays c <= 8.
/// 230.4 ms until the second dated extension of 2026-12-05 added its fit rows (DeepSeek-R1 on 8
/// H200 under sglang 0.5.12 among them); 223.8 ms until the refit on the third dated extension
/// (2026-12-06) moved the per-kernel floor and the per-request cost; 224.9 ms until the refit under
/// the square-root source weighting (step 31); 224.7 ms until the router's skew (step 34); 221.9 ms
/// until step 35 set that skew from kernel data; 224.7 ms until step 37's MXFP4 kernel rates and
/// their refit; 224.1 ms until step 40 gave the B200 and MI3xx GPUs sglang's own 16,384-token
/// prefill chunk (its fit rows' TTFT at low concurrency grew).
pub const SGLANG_REQUEST_LATENCY_MS: f64 = 218.9;

/// vLLM's per-request serving-path latency, ms: as [`SGLANG_REQUEST_LATENCY_MS`], over the FIT
/// set's vLLM cases at c <= 8 (AIConfigurator's B300 rows; see VALIDATION.md).
pub const VLLM_REQUEST_LATENCY_MS: f64 = 18.5;

/// TensorRT-LLM's per-request serving-path latency, ms: as [`SGLANG_REQUEST_LATENCY_MS`], over
/// the FIT set's TensorRT-LLM cases at c <= 8 (AIConfigurator's H100 rows; see VALIDATION.md).
pub const TRTLLM_REQUEST_LATENCY_MS: f64 = 77.0;

/// The expected share of `experts` that `tokens` tokens, each routed to `top_k` distinct experts,
/// touch when expert i (1-based, by popularity) is picked with probability min(1, top_k x p_i), p_i
/// proportional to i^-`skew` (a Zipf law over the experts). At `skew` 0 every expert is equally
/// likely and this is 1 - (1 - top_k / experts)^tokens exactly. The cap drops the probability
/// above one pick per token rather than handing it to other experts, so at a strong skew one token
/// reads slightly fewer than `top_k` experts (7.96 of 8 at 128 experts and 0.85). A skew that is
/// not finite counts as uniform (no input sets it: it is an engine default).
pub fn distinct_expert_fraction(experts: f64, top_k: f64, tokens: f64, skew: f64) -> f64 {
    if experts <= 0.0 || tokens <= 0.0 {
        return 0.0;
    }
    if skew == 0.0 || !skew.is_finite() {
        return 1.0 - (1.0 - top_k / experts).powf(tokens);
    }
    let n = experts.round().max(1.0) as usize;
    // ln(1 - min(1, k p_i)) per expert depends on the shape and the skew alone: computed once
    // per shape (a step is priced many times over a virtual run). NEG_INFINITY for an expert
    // every token picks (exp of it is 0: always touched).
    /// (experts, top-k bits, skew bits) and each expert's ln(1 - min(1, k p_i)).
    type MissLogs = Vec<((usize, u64, u64), std::rc::Rc<Vec<f64>>)>;
    thread_local! {
        static MISS_LOGS: std::cell::RefCell<MissLogs> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let key = (n, top_k.to_bits(), skew.to_bits());
    let logs = MISS_LOGS.with(|c| {
        if let Some((_, v)) = c.borrow().iter().find(|(k, _)| *k == key) {
            return v.clone();
        }
        let weights: Vec<f64> = (1..=n).map(|i| (i as f64).powf(-skew)).collect();
        let total: f64 = weights.iter().sum();
        let v = std::rc::Rc::new(weights.iter().map(|w| (1.0 - (top_k * w / total).min(1.0)).ln()).collect::<Vec<f64>>());
        let mut cache = c.borrow_mut();
        if cache.len() >= 64 {
            cache.clear();
        }
        cache.push((key, v.clone()));
        v
    });
    let touched: f64 = logs.iter().map(|l| 1.0 - (tokens * l).exp()).sum();
    touched / n as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sglang(version: Option<&str>) -> EngineRelease {
        EngineRelease { name: EngineName::Sglang, version: version.map(str::to_string) }
    }

    #[test]
    fn one_release_table_places_a_date_for_the_batch_table_the_memory_share_and_the_state_pool() {
        let undated = sglang(None);
        for (minor, date) in SGLANG_0_5_RELEASES {
            let day = Some(date);
            assert_eq!(undated.sglang_minor(day), Some(minor), "{date}");
            assert_eq!(undated.batch_defaults(day), BatchDefaults::SglangTable { minor }, "{date}");
            assert_eq!(undated.mem_share(day), MemShare::SglangReserve { minor }, "{date}");
            // A nightly of that day is that release too; the day before is the release before.
            let nightly = sglang(Some(&format!("nightly-dev-{}", date.replace('-', ""))));
            assert_eq!(nightly.sglang_minor(None), Some(minor), "{date}");
            let before = SGLANG_0_5_RELEASES.iter().map(|&(m, _)| m).find(|&m| m < minor);
            let eve = format!("{}{:02}", &date[..8], date[8..].parse::<u32>().expect("day") - 1);
            if !date.ends_with("-01") {
                assert_eq!(undated.sglang_minor(Some(&eve)), before, "{eve}");
            }
        }
        // The state pool's eras by date.
        for (date, era) in [
            ("2025-10-23", StatePoolRelease::Fixed512),
            ("2025-10-24", StatePoolRelease::Split054),
            ("2026-02-23", StatePoolRelease::Split059),
            ("2026-08-08", StatePoolRelease::Split0514),
            ("2026-10-30", StatePoolRelease::Split0523),
        ] {
            assert_eq!(undated.state_pool(Some(date)), Some(era), "{date}");
        }
        // The day before 0.5.17's upload is 0.5.14; before 0.5.3's, no 0.5.x release.
        assert_eq!(undated.sglang_minor(Some("2026-08-07")), Some(14));
        assert_eq!(undated.sglang_minor(Some("2025-10-05")), None);
        assert_eq!(undated.batch_defaults(Some("2025-10-05")), BatchDefaults::SglangBeforeTable { since_0_4_8: true });
        // A version names its own; a later one the newest; no version and no date, the newest.
        assert_eq!((sglang(Some("0.5.11")).sglang_minor(None), sglang(Some("0.6.0")).sglang_minor(None)), (Some(11), Some(23)));
        assert_eq!((sglang(Some("0.4.9")).sglang_minor(None), undated.sglang_minor(None)), (None, Some(SGLANG_CURRENT_MINOR)));
        // A tag with both numbers and a nightly date goes by the date, as every other default does.
        assert_eq!(sglang(Some("0.5.2-nightly-20251101")).sglang_minor(None), Some(4));
        assert_eq!(EngineRelease::current(EngineName::Vllm).sglang_minor(None), None);
    }

    #[test]
    fn a_release_number_too_large_for_a_number_is_no_release() {
        assert_eq!(release_numbers("0.4.6.post5"), Some((0, 4, 6)));
        assert_eq!(release_numbers("v0.5.10rc1"), Some((0, 5, 10)));
        assert_eq!(release_numbers("0.5.10-cu129"), Some((0, 5, 10)));
        assert_eq!(release_numbers("0.5.99999999999"), None);
        for none in ["nightly-dev-20251101", "latest", "", "0..5", ".5.3"] {
            assert_eq!(release_numbers(none), None, "{none}");
        }
        // A .post with a suffix still counts its number.
        let post = EngineRelease { name: EngineName::Sglang, version: Some("0.4.6.post5-cu124".into()) };
        assert_eq!(post.mem_share(None), MemShare::Sglang047 { over_180k: false });
        let e = EngineRelease::parse("--engine", "sglang@0.5.99999999999").expect_err("refused").to_string();
        assert!(e.contains("is not a release version"), "{e}");
    }
}
