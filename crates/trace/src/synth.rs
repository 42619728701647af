//! Kineto traces this project writes itself, shaped as each engine writes them, for the tests
//! (no trace fetched from another project is committed here).
//!
//! A trace is drawn by running the steps of a small model on a toy clock: a host thread launches
//! kernels, copies and graph replays (`cudaLaunchKernel`, `cudaGraphLaunch`, `cudaMemcpyAsync`,
//! or HIP's), each with a correlation id the GPU event carries too; the GPU runs them in order,
//! never before their launch; the engine's step annotations are written the way the engine
//! writes them (host `user_annotation`, and its GPU copy `gpu_user_annotation` spanning the
//! kernels launched inside the range, as Kineto writes it). Kernel names are the engines' real
//! ones. [`Truth`] keeps what was drawn, to check the analysis against.

use std::io::Write;
use std::path::Path;

use serde_json::{json, Value};

use crate::steps::Phase;
use crate::{classify, Category};

/// Which engine's trace to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// sglang on H100, a MoE model at TP 4: decode as one CUDA graph, prefill eager (FlashInfer,
    /// the custom all-reduce, NCCL for large prefills, Triton fused MoE).
    SglangCuda,
    /// sglang on MI300X (ROCm): hipBLASLt, AITER attention / MoE / all-reduce, CK, RCCL; HIP
    /// launches and copies.
    SglangRocm,
    /// vLLM on H100, a dense model at TP 4: decode as one full CUDA graph, prefill and mixed
    /// steps eager (FlashAttention 3, vLLM's custom all-reduce).
    VllmFull,
    /// vLLM with piecewise CUDA graphs: every step is one graph per layer with attention run
    /// eagerly between them.
    VllmPiecewise,
    /// TensorRT-LLM's PyTorch backend on B200, an FP4 MoE model at TP 4: decode as one CUDA
    /// graph, context eager; trtllm-gen FMHA and batched MoE GEMMs, moe::dev routing and
    /// finalize, the fused all-reduce + RMSNorm.
    TrtLlm,
}

/// The engine's step annotations to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Annotations {
    /// The host range and its GPU copy (how torch.profiler writes a record_function range).
    HostAndGpu,
    /// The host range only.
    Host,
    /// sglang before its step[...] ranges: only the model runner's Python frames (with_stack).
    PythonFrames,
    /// None (a trace taken with torch.profiler by hand around an engine).
    None,
}

/// One step to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepSpec {
    /// Context (prefill) requests.
    pub context_requests: u64,
    /// Their tokens.
    pub context_tokens: u64,
    /// Generation (decode) requests, one token each.
    pub generation_requests: u64,
}

impl StepSpec {
    /// A prefill of `requests` prompts of `tokens` tokens in all.
    pub fn prefill(requests: u64, tokens: u64) -> StepSpec {
        StepSpec { context_requests: requests, context_tokens: tokens, generation_requests: 0 }
    }
    /// A decode step of `requests` requests.
    pub fn decode(requests: u64) -> StepSpec {
        StepSpec { context_requests: 0, context_tokens: 0, generation_requests: requests }
    }
    /// A chunk of prefill beside `requests` decoding requests.
    pub fn mixed(context_tokens: u64, requests: u64) -> StepSpec {
        StepSpec { context_requests: 1, context_tokens, generation_requests: requests }
    }
    /// The step's kind.
    pub fn kind(&self) -> Phase {
        match (self.context_requests > 0, self.generation_requests > 0) {
            (true, true) => Phase::Mixed,
            (true, false) => Phase::Prefill,
            (false, true) => Phase::Decode,
            (false, false) => Phase::Idle,
        }
    }
    /// Tokens the step runs.
    pub fn tokens(&self) -> u64 {
        self.context_tokens + self.generation_requests
    }
    /// Requests in the step.
    pub fn requests(&self) -> u64 {
        self.context_requests + self.generation_requests
    }
}

/// A trace to draw.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The engine.
    pub engine: Engine,
    /// Its annotations.
    pub annotations: Annotations,
    /// Transformer layers.
    pub layers: u32,
    /// The steps, in order.
    pub steps: Vec<StepSpec>,
    /// A host stall (us) in the middle of every prefill's layers, after the host waited for the
    /// GPU (a synchronizing copy, then a Python GC pause): it leaves the GPU idle inside the step.
    pub prefill_stall_us: f64,
}

impl Spec {
    /// The usual test trace of an engine: prefills, decodes and a mixed step, 8 layers.
    pub fn typical(engine: Engine) -> Spec {
        let steps = vec![
            StepSpec::prefill(2, 3000),
            StepSpec::decode(2),
            StepSpec::decode(2),
            StepSpec::prefill(1, 1024),
            StepSpec::decode(3),
            StepSpec::mixed(512, 3),
            StepSpec::decode(4),
            StepSpec::decode(4),
        ];
        Spec { engine, annotations: Annotations::HostAndGpu, layers: 8, steps, prefill_stall_us: 1500.0 }
    }
}

/// What was drawn.
#[derive(Debug, Clone, Default)]
pub struct Truth {
    /// Per step: kind, tokens, requests, GPU start and end (us), summed kernel time by category
    /// (index [`Category::index`], us), all-reduce kernels.
    pub steps: Vec<TruthStep>,
    /// GPU events written.
    pub gpu_events: u64,
    /// Summed GPU event time, us.
    pub kernel_us: f64,
}

/// One drawn step.
#[derive(Debug, Clone)]
pub struct TruthStep {
    /// Its kind.
    pub kind: Phase,
    /// Tokens.
    pub tokens: u64,
    /// Requests.
    pub requests: u64,
    /// First kernel start, us.
    pub start: f64,
    /// Last kernel end, us.
    pub end: f64,
    /// Summed kernel time by category, us.
    pub category_us: [f64; Category::ALL.len()],
    /// All-reduce kernels.
    pub allreduces: u32,
    /// Graph replays.
    pub graph_replays: u32,
}

/// A piece of a forward pass: kernels launched one by one, or replayed as one graph.
enum Piece {
    Eager(Vec<(&'static str, f64)>),
    Graph(Vec<(&'static str, f64)>),
}

struct Names {
    norm: &'static str,
    qkv: &'static str,
    rope: &'static str,
    kv_write: Option<&'static str>,
    attn_decode: &'static str,
    attn_prefill: &'static str,
    o_proj: &'static str,
    allreduce: &'static str,
    /// For large messages (prefill), when the engine switches to NCCL.
    allreduce_large: Option<&'static str>,
    /// Dense MLP: gate/up, activation, down. MoE: routing kernels, expert GEMMs, activation, combine.
    mlp: Mlp,
    embed: &'static str,
    lm_head: &'static str,
    /// The vocab-parallel LM head's all-gather of the logits (NCCL; RCCL on ROCm).
    logits_gather: &'static str,
    /// The collective PyTorch's profiler names in the `args` of kernels whose name does not say it
    /// (NCCL's `ncclDevKernel_Generic`): kernel name, `"Collective name"`.
    collective_args: &'static [(&'static str, &'static str)],
    sample: &'static [&'static str],
    copy_in: &'static str,
    unknown: &'static str,
    rocm: bool,
}

enum Mlp {
    Dense { gate_up: &'static str, act: &'static str, down: &'static str },
    Moe { router: &'static str, routing: &'static [&'static str], experts: &'static [&'static str], combine: &'static str },
}

fn names(e: Engine) -> Names {
    match e {
        Engine::SglangCuda => NAMES_SGLANG_CUDA,
        Engine::SglangRocm => NAMES_SGLANG_ROCM,
        Engine::VllmFull | Engine::VllmPiecewise => NAMES_VLLM_FULL,
        Engine::TrtLlm => NAMES_TRT_LLM,
    }
}

/// The kernel names a SglangCuda trace carries.
const NAMES_SGLANG_CUDA: Names = Names {
    norm: "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)",
    qkv: "nvjet_tst_128x64_64x8_2x1_v_bz_TNT",
    rope: "void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheHeadParallelismKernel<true, 128u, 8u, 16u, __nv_bfloat16, long>(...)",
    kv_write: Some("void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<...>>(long, ...)"),
    attn_decode: "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 4u, 1u, 8u, 16u, 1u, 8u, flashinfer::DefaultAttention<false, false, false, false>, ...>(...)",
    attn_prefill: "void flashinfer::BatchPrefillWithRaggedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1, 128u, 1u, 8u, 8u, 8u, 1u, 4u, ...>>(...)",
    o_proj: "nvjet_tst_64x8_64x16_4x1_v_bz_TNT",
    allreduce: "void sglang::cross_device_reduce_1stage<__nv_bfloat16, 4>(sglang::RankData*, sglang::Signal*, sglang::Signal*, __nv_bfloat16*, int, int)",
    allreduce_large: Some("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
    mlp: Mlp::Moe {
        router: "nvjet_tst_64x8_64x16_4x1_v_bz_TNT",
        routing: &["void topkGatingSoftmax<4, 128, 4, 16, 32, int, (sglang::moe::ScoringFunc)0>(...)", "void moe_align_block_size_kernel<int>(int*, int*, int*, int*, int, int, int, int, unsigned long, int*)"],
        experts: &["fused_moe_kernel", "fused_moe_kernel"],
        combine: "void moe_sum_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16 const*, int)",
    },
    embed: "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(...)",
    lm_head: "nvjet_tst_256x128_64x4_2x1_v_bz_coopA_TNT",
    // Newer NCCL runs collectives it has no specialized kernel for as `ncclDevKernel_Generic`;
    // only the profiler's args say it is a gather.
    logits_gather: "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)",
    collective_args: &[("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", "_allgather_base")],
    sample: &["void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(...)", "void flashinfer::sampling::TopKTopPSamplingFromProbKernel<1024u, (cub::BlockScanAlgorithm)2, (cub::BlockReduceAlgorithm)2, 4u, false, float, int>(...)"],
    copy_in: "Memcpy HtoD (Pinned -> Device)",
    unknown: "void sglang_fixture_unknown_kernel<int>(int*)",
    rocm: false,
};

/// The kernel names a SglangRocm trace carries.
const NAMES_SGLANG_ROCM: Names = Names {
    norm: "void ck_tile::kentry<256, 1, ck_tile::AddRmsnorm2dRdquantFwd<ck_tile::AddRmsnorm2dRdquantFwdPipelineOnePass<...>>>(...)",
    qkv: "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x128x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_GRVWA8_GRVWB8_GSUAMB_IU1_K1_MIWT4_4_NTn1_PGR2_PLR1_SIA3_SS1_SU0_WG32_8_1",
    rope: "void rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, int, long, long, int, int, int)",
    kv_write: Some("void aiter::reshape_and_cache_flash_kernel<__hip_bfloat16, __hip_bfloat16, (vllm::Fp8KVCacheDataType)0>(...)"),
    attn_decode: "_ZN5aiter30paged_attention_ll4mi_QKV_mfma16_kernelI13__hip_bfloat16S1_Li128ELi16ELi1ELb0ELi4EEEvPKT_S5_S5_",
    attn_prefill: "void ck_tile::kentry<256, 2, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVSAsync<...>>>(...)",
    o_proj: "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x16x128_MI16x16x1_SN_LDSB1_AFC1_AFEM1_GRVWA8_GRVWB8_GSUAMB_IU1_K1_MIWT2_1_NTn1_PGR2_PLR1_SIA3_SS1_SU0_WG16_16_1",
    allreduce: "void aiter::cross_device_reduce_1stage<__hip_bfloat16, 8>(aiter::RankData*, aiter::Signal*, aiter::Signal*, __hip_bfloat16*, int)",
    allreduce_large: Some("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"),
    mlp: Mlp::Moe {
        router: "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x256_MI16x16x1_SN_LDSB1_GRVWA8_GRVWB8_IU1_K1_MIWT1_1_SU0_WG16_16_1",
        routing: &["void aiter::topkGatingSoftmax<__hip_bfloat16, 8, 256, 8, 32>(...)", "void ck_tile::kentry<256, 1, ck_tile::MoeSortingKernel<ck_tile::MoeSortingProblemEx<int, float, 1, true, false, true>>>(...)"],
        experts: &["_ZN5aiter43fmoe_bf16_blockscaleFp8_g1u1_vs_silu_1tg_32x256E"],
        combine: "void aiter::moe_sum_kernel<__hip_bfloat16, 8>(...)",
    },
    embed: "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(...)",
    lm_head: "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64_MI16x16x1_SN_LDSB1_GRVWA8_GRVWB8_IU1_K1_MIWT4_4_SU0_WG32_8_1",
    logits_gather: "void rccl::ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
    collective_args: &[("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", "allreduce")],
    sample: &["void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(...)", "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4>>(...)"],
    copy_in: "CopyHostToDevice",
    unknown: "void sglang_fixture_unknown_kernel<int>(int*)",
    rocm: true,
};

/// The kernel names a VllmFull | VllmPiecewise trace carries.
const NAMES_VLLM_FULL: Names = Names {
    norm: "void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, float, int, int)",
    qkv: "nvjet_tst_128x64_64x8_2x1_v_bz_TNT",
    rope: "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, int, long, long, int, int, int)",
    kv_write: Some("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(...)"),
    attn_decode: "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1>>, ...>>>>(...)",
    attn_prefill: "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1>>, cute::tuple<cute::C<128>, ...>>>>>(...)",
    o_proj: "nvjet_tst_64x8_64x16_4x1_v_bz_TNT",
    allreduce: "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 4>(vllm::RankData*, vllm::Signal*, vllm::Signal*, __nv_bfloat16*, int, int)",
    allreduce_large: Some("void vllm::cross_device_reduce_2stage<__nv_bfloat16, 4>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)"),
    mlp: Mlp::Dense {
        gate_up: "nvjet_tst_192x128_64x5_2x1_v_bz_coopB_TNT",
        act: "void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>(c10::BFloat16 const&)), true>(c10::BFloat16*, c10::BFloat16 const*, int)",
        down: "nvjet_tst_128x128_64x6_2x1_v_bz_TNT",
    },
    embed: "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(...)",
    lm_head: "nvjet_tst_256x128_64x4_2x1_v_bz_coopA_TNT",
    logits_gather: "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    collective_args: &[],
    sample: &["void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(...)", "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4>>(...)"],
    copy_in: "Memcpy HtoD (Pinned -> Device)",
    unknown: "void vllm_fixture_unknown_kernel<int>(int*)",
    rocm: false,
};

/// The kernel names a TrtLlm trace carries.
const NAMES_TRT_LLM: Names = Names {
    norm: "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16, true, 4, (tensorrt_llm::kernels::ar_fusion::AllReduceFusionPattern)1>(...)",
    qkv: "gemm_Bfloat16_E4m3E4m3_Fp32_t128x8x512u2_s3_et128x8_m128x8x32_cga1x1x1_16dp256b_TN_transOut_schedS_sm100f",
    rope: "void tensorrt_llm::kernels::applyBiasRopeUpdateKVCacheV2<__nv_bfloat16, __nv_bfloat16, float, false, true, 128, ...>(...)",
    kv_write: None,
    attn_decode: "fmhaSm100fKernel_QkvE4m3OBfloat16HQk128HV128HVPerCta128PagedKvDenseP32VarSeqQ8Kv128PersistentSwapsAbForGen",
    attn_prefill: "fmhaSm100fKernel_QkvBfloat16OBfloat16H128PagedKvCausalP32VarSeqQ128Kv128PersistentContext",
    o_proj: "gemm_Bfloat16_E4m3E4m3_Fp32_t128x16x256u2_s4_et128x16_m128x16x32_cga1x1x1_16dp256b_TN_transOut_schedS_sm100f",
    // The fused all-reduce + residual + RMSNorm stands for both the norm and the all-reduce.
    allreduce: "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16, true, 4, (tensorrt_llm::kernels::ar_fusion::AllReduceFusionPattern)1>(...)",
    allreduce_large: Some("void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_twoshot_sync<__nv_bfloat16, true, 4, (tensorrt_llm::kernels::ar_fusion::AllReduceFusionPattern)1>(...)"),
    mlp: Mlp::Moe {
        router: "nvjet_sm100_tst_64x8_64x16_4x1_v_bz_TNT",
        routing: &["void moe::dev::routing::routingRenormalize::routingIndicesWarpKernel<moe::dev::routing::routingRenormalize::KernelParams<__nv_bfloat16, __nv_bfloat16, 128, 8, true>>(...)", "void tensorrt_llm::kernels::quantize_with_block_size<(tensorrt_llm::kernels::BlockScaleQuantizationType)0, __nv_bfloat16, 16, false>(...)"],
        experts: &[
            "bmm_MxE4m3_MxE2m1E2m1_Fp32_t128x8x512u2_s3_et128x8_m128x8x32_cga1x1x1_16dp256b_rM_TN_transOut_schedS_bN_sm100f",
            "bmm_Bfloat16_MxE2m1Bfloat16_Fp32_t128x8x256u2_s4_et128x8_m128x8x16_cga1x1x1_16dp256b_rM_TN_transOut_schedS_bN_sm100f",
        ],
        combine: "void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<__nv_bfloat16, __nv_bfloat16, float>>(...)",
    },
    embed: "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(...)",
    lm_head: "nvjet_sm100_tst_256x128_64x4_2x1_v_bz_coopA_TNT",
    logits_gather: "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    collective_args: &[],
    sample: &["void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(...)", "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4>>(...)"],
    copy_in: "Memcpy HtoD (Pinned -> Device)",
    unknown: "void trtllm_fixture_unknown_kernel<int>(int*)",
    rocm: false,
};

/// Kernel durations (us) for a step of `n` tokens and `r` requests, by role.
fn dur(role: &str, n: f64, r: f64) -> f64 {
    match role {
        "gemm" => 6.0 + 0.05 * n,
        "attn_decode" => 4.0 + 0.4 * r,
        "attn_prefill" => 8.0 + 0.03 * n,
        "small" => 2.0 + 0.002 * n,
        "allreduce" => 5.0 + 0.004 * n,
        "routing" => 3.0 + 0.002 * n,
        "expert" => 10.0 + 0.04 * n,
        _ => 3.0,
    }
}

/// The forward pass of one step, as pieces the engine launches.
fn forward(e: Engine, names: &Names, layers: u32, s: &StepSpec) -> Vec<Piece> {
    let (n, r) = (s.tokens() as f64, s.requests() as f64);
    let prefill = s.context_requests > 0;
    let attn = if prefill { (names.attn_prefill, dur("attn_prefill", n, r)) } else { (names.attn_decode, dur("attn_decode", n, r)) };
    // Large messages go over NCCL (sglang) or the two-stage kernel (vLLM, TensorRT-LLM).
    let ar = match names.allreduce_large {
        Some(big) if n >= 1024.0 => (big, dur("allreduce", n, r) * 2.0),
        _ => (names.allreduce, dur("allreduce", n, r)),
    };
    let small = dur("small", n, r);
    let gemm = dur("gemm", n, r);
    let trt = e == Engine::TrtLlm;
    // Per layer: the part before attention, attention, the part after.
    let before = |first: bool| {
        let mut v = Vec::new();
        if first {
            v.push((names.embed, small));
            // sglang's and vLLM's vocab-parallel embedding all-reduces its output under TP
            // (`VocabParallelEmbedding.forward`); TensorRT-LLM's is not drawn.
            if !trt {
                v.push(ar);
            }
        }
        if !trt || first {
            // TensorRT-LLM's fused all-reduce + norm is the norm after the first layer.
            v.push((names.norm, small));
        }
        v.push((names.qkv, gemm));
        v.push((names.rope, small));
        v
    };
    let attention = || {
        let mut v = Vec::new();
        if let Some(k) = names.kv_write {
            v.push((k, small));
        }
        v.push(attn);
        v
    };
    let after = |last: bool| {
        let mut v = vec![(names.o_proj, gemm), ar];
        if !trt {
            v.push((names.norm, small));
        }
        match &names.mlp {
            Mlp::Dense { gate_up, act, down } => v.extend([(*gate_up, 2.0 * gemm), (*act, small), (*down, gemm)]),
            Mlp::Moe { router, routing, experts, combine } => {
                v.push((*router, gemm * 0.3));
                v.extend(routing.iter().map(|k| (*k, dur("routing", n, r))));
                v.extend(experts.iter().map(|k| (*k, dur("expert", n, r))));
                v.push((*combine, small));
            }
        }
        v.push(ar);
        if last {
            v.push((names.norm, small));
            v.push((names.lm_head, 2.0 * gemm));
            v.push((names.logits_gather, dur("allreduce", n, r)));
        }
        v
    };
    let piecewise = e == Engine::VllmPiecewise;
    let graph = !prefill && !piecewise;
    let mut pieces = Vec::new();
    let mut run: Vec<(&'static str, f64)> = Vec::new();
    for l in 0..layers {
        run.extend(before(l == 0));
        if piecewise {
            pieces.push(Piece::Graph(std::mem::take(&mut run)));
            pieces.push(Piece::Eager(attention()));
        } else {
            run.extend(attention());
        }
        run.extend(after(l + 1 == layers));
    }
    pieces.push(if graph || piecewise { Piece::Graph(run) } else { Piece::Eager(run) });
    pieces
}

/// The host-side state of the drawing.
struct Draw {
    events: Vec<Value>,
    corr: i64,
    cpu: f64,
    gpu: f64,
    rocm: bool,
    truth: Truth,
    /// The step being drawn: its kernels' span, time by category, all-reduces, replays.
    cur: Option<TruthStep>,
    /// [`Names::collective_args`].
    collective_args: &'static [(&'static str, &'static str)],
}

const PID: u64 = 4_242;
const TID: u64 = 4_243;
const STREAM: u64 = 7;
const T0: f64 = 6_048_793_917_083.0;

impl Draw {
    fn runtime(&mut self, name: &str, dur: f64) -> i64 {
        self.corr += 1;
        let name = if self.rocm { name.replace("cuda", "hip") } else { name.to_string() };
        self.events.push(json!({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": TID, "ts": self.cpu, "dur": dur, "args": {"correlation": self.corr}}));
        self.cpu += dur;
        self.corr
    }

    fn gpu_event(&mut self, cat: &str, name: &str, dur: f64, corr: i64, stream: u64) {
        // Durations on a 1/256 us grid: exact in the f32 the reader keeps them in, so the checks
        // against the truth can be exact too.
        let dur = (dur * 256.0).round() / 256.0;
        let start = self.gpu.max(self.cpu + 4.0);
        let mut args = json!({"device": 0, "stream": stream, "correlation": corr});
        let collective = self.collective_args.iter().find(|(k, _)| *k == name).map(|(_, c)| *c);
        if let Some(c) = collective {
            args["Collective name"] = json!(c);
        }
        if cat == "kernel" {
            args["grid"] = json!([132, 1, 1]);
            args["block"] = json!([384, 1, 1]);
        } else {
            args["bytes"] = json!(65536);
        }
        self.events.push(json!({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": start, "dur": dur, "args": args}));
        self.gpu = start + dur;
        self.truth.gpu_events += 1;
        self.truth.kernel_us += dur;
        if let Some(s) = self.cur.as_mut() {
            if s.start.is_nan() {
                s.start = start;
            }
            s.end = s.end.max(start + dur);
            let c = if cat == "kernel" { classify(name) } else { Category::MemcpyMemset };
            s.category_us[c.index()] += dur;
            let allreduce = match collective {
                Some(k) => crate::read::Collective::from_name(k) == crate::read::Collective::AllReduce,
                None => crate::classify::is_allreduce(name, c),
            };
            if allreduce {
                s.allreduces += 1;
            }
        }
    }

    fn eager(&mut self, kernels: &[(&'static str, f64)]) {
        for (name, dur) in kernels {
            let c = self.runtime("cudaLaunchKernel", 5.0);
            self.gpu_event("kernel", name, *dur, c, STREAM);
        }
    }

    fn graph(&mut self, kernels: &[(&'static str, f64)]) {
        let c = self.runtime("cudaGraphLaunch", 12.0);
        // The replay starts once the launch is made; its nodes run back to back.
        for (name, dur) in kernels {
            self.gpu_event("kernel", name, *dur, c, STREAM);
        }
        if let Some(s) = self.cur.as_mut() {
            s.graph_replays += 1;
        }
    }

    fn copy_in(&mut self, name: &str) {
        let c = self.runtime(if self.rocm { "hipMemcpyWithStream" } else { "cudaMemcpyAsync" }, 6.0);
        self.gpu_event("gpu_memcpy", name, 1.5, c, STREAM);
    }

    fn range(&mut self, cat: &str, name: &str, start: f64, end: f64, pid: u64, tid: u64) {
        self.events.push(json!({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": start, "dur": (end - start).max(0.0), "args": {"External id": self.corr}}));
    }
}

fn step_name(e: Engine, i: usize, s: &StepSpec) -> String {
    match e {
        Engine::SglangCuda | Engine::SglangRocm => match s.kind() {
            Phase::Decode => format!("step[decode bs={}]", s.requests()),
            Phase::Prefill => format!("step[prefill bs={} toks={}]", s.requests(), s.tokens()),
            Phase::Mixed => format!("step[mixed bs={} ext={} dec={}]", s.requests(), s.context_tokens, s.generation_requests),
            Phase::Idle => "step[idle]".into(),
        },
        Engine::VllmFull | Engine::VllmPiecewise => format!(
            "execute_context_{}({})_generation_{}({})",
            s.context_requests, s.context_tokens, s.generation_requests, s.generation_requests
        ),
        Engine::TrtLlm => {
            format!("[Executor] _forward_step {}: {} ctx reqs, {} gen reqs", 100 + i, s.context_requests, s.generation_requests)
        }
    }
}

/// Draws the trace of `spec` as a Kineto document.
pub fn draw(spec: &Spec) -> (Value, Truth) {
    let n = names(spec.engine);
    let mut d = Draw {
        events: Vec::new(),
        corr: 1000,
        cpu: T0,
        gpu: T0,
        rocm: n.rocm,
        truth: Truth::default(),
        cur: None,
        collective_args: n.collective_args,
    };
    let gpu_name = if n.rocm {
        "AMD Instinct MI300X"
    } else if spec.engine == Engine::TrtLlm {
        "NVIDIA B200"
    } else {
        "NVIDIA H100 80GB HBM3"
    };
    d.events.push(json!({"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "python3"}}));
    d.events.push(json!({"ph": "M", "name": "thread_name", "pid": PID, "tid": TID, "args": {"name": "python3"}}));
    d.events.push(json!({"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}}));
    // The profiler starts mid-step: the tail of a step before the first one drawn (sampling).
    d.eager(&n.sample.iter().map(|k| (*k, 3.0)).collect::<Vec<_>>());
    d.cpu += 300.0;
    for (i, s) in spec.steps.iter().enumerate() {
        let cpu_start = d.cpu;
        let first_event = d.events.len();
        d.cur = Some(TruthStep {
            kind: s.kind(),
            tokens: s.tokens(),
            requests: s.requests(),
            start: f64::NAN,
            end: f64::NEG_INFINITY,
            category_us: [0.0; Category::ALL.len()],
            allreduces: 0,
            graph_replays: 0,
        });
        d.copy_in(n.copy_in);
        d.copy_in(n.copy_in);
        let pieces = forward(spec.engine, &n, spec.layers, s);
        let stall_at = pieces.len().max(2) / 2;
        for (pi, p) in pieces.iter().enumerate() {
            match p {
                Piece::Eager(ks) if s.context_requests > 0 && spec.prefill_stall_us > 0.0 && ks.len() > 8 => {
                    // Eager prefill: the host waits for the GPU half-way through the layers (a
                    // synchronizing copy), then stalls.
                    let half = ks.len() / 2;
                    d.eager(&ks[..half]);
                    d.cpu = d.cpu.max(d.gpu) + spec.prefill_stall_us;
                    d.eager(&ks[half..]);
                }
                Piece::Eager(ks) => d.eager(ks),
                Piece::Graph(ks) => d.graph(ks),
            }
            if pi + 1 == stall_at && s.context_requests > 0 && matches!(p, Piece::Graph(_)) {
                d.cpu = d.cpu.max(d.gpu) + spec.prefill_stall_us;
            }
        }
        d.eager(&n.sample.iter().map(|k| (*k, 3.0)).collect::<Vec<_>>());
        if i == 1 {
            // One kernel no rule knows, once: listed by name, a sliver of the time.
            d.eager(&[(n.unknown, 2.0)]);
        }
        let cpu_end = d.cpu + 2.0;
        let Some(truth) = d.cur.take() else { continue };
        annotate(&mut d, spec, i, s, (cpu_start, cpu_end), &truth);
        sort_step_events(&mut d.events[first_event..]);
        d.truth.steps.push(truth);
        // The scheduler runs between steps.
        d.cpu = d.cpu.max(d.gpu - 200.0) + 400.0;
    }
    let doc = json!({
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": gpu_name, "totalGlobalMem": 85_899_345_920u64}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 4},
        "traceEvents": d.events,
        "traceName": "servetune-synthetic",
        "displayTimeUnit": "ms",
    });
    (doc, d.truth)
}

/// The step's annotations as the engine's profiler writes them: host and GPU ranges, Python
/// frames, or none, and vLLM's ProfilerStep range.
fn annotate(d: &mut Draw, spec: &Spec, i: usize, s: &StepSpec, (cpu_start, cpu_end): (f64, f64), truth: &TruthStep) {
    let name = step_name(spec.engine, i, s);
    match spec.annotations {
        Annotations::HostAndGpu | Annotations::Host => {
            d.range("user_annotation", &name, cpu_start, cpu_end, PID, TID);
            if spec.annotations == Annotations::HostAndGpu {
                d.range("gpu_user_annotation", &name, truth.start, truth.end, 0, STREAM);
            }
        }
        Annotations::PythonFrames => {
            let func = match s.kind() {
                Phase::Decode => "forward_decode",
                _ => "forward_extend",
            };
            let frame = format!("python/sglang/srt/model_executor/model_runner.py(1810): {func}");
            d.events.push(json!({"ph": "X", "cat": "python_function", "name": frame, "pid": PID, "tid": TID, "ts": cpu_start, "dur": cpu_end - cpu_start, "args": {"Python id": 77}}));
        }
        Annotations::None => {}
    }
    if matches!(spec.engine, Engine::VllmFull | Engine::VllmPiecewise) && spec.annotations != Annotations::None {
        // vLLM steps the profiler in each step: ProfilerStep#N spans the step and the
        // scheduling after it.
        d.range("user_annotation", &format!("ProfilerStep#{}", 10 + i), cpu_start - 1.0, cpu_end + 150.0, PID, TID);
    }
}

/// Orders one step's events as Kineto writes them: host events in time order, then GPU events.
fn sort_step_events(events: &mut [Value]) {
    events.sort_by(|a, b| {
        let k = |v: &Value| {
            (
                v["cat"].as_str().is_some_and(|c| c == "kernel" || c == "gpu_memcpy" || c == "gpu_user_annotation"),
                v["ts"].as_f64().unwrap_or(0.0),
            )
        };
        let (ka, kb) = (k(a), k(b));
        ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1))
    });
}

/// Draws the trace of `spec` into `path` (gzipped when the name ends in .gz).
pub fn write(spec: &Spec, path: &Path) -> std::io::Result<Truth> {
    let (doc, truth) = draw(spec);
    write_doc(&doc, path)?;
    Ok(truth)
}

/// Writes a Kineto document (gzipped when the name ends in .gz).
pub fn write_doc(doc: &Value, path: &Path) -> std::io::Result<()> {
    let f = std::io::BufWriter::new(std::fs::File::create(path)?);
    if path.extension().is_some_and(|e| e == "gz") {
        let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
        serde_json::to_writer(&mut gz, doc)?;
        gz.finish()?.flush()
    } else {
        let mut f = f;
        serde_json::to_writer(&mut f, doc)?;
        f.flush()
    }
}

/// A data-parallel training trace of a convolutional network, as torch.profiler writes one on an
/// A100 with DDP (the shape of the traces HolisticTraceAnalysis tests on): `ProfilerStep#N` host
/// ranges, cuDNN convolutions and batch norms, CUTLASS GEMMs, element-wise kernels, NCCL ring-LL
/// all-reduces (`nccl:all_reduce` ranges around them) and broadcasts, copies and memsets.
/// `rocm` draws it as on an MI250 (hipBLASLt GEMMs, MIOpen, RCCL, HIP launches, its
/// `ProfilerStep#N` on the GPU too). Returns the document and the steps' GPU spans.
pub fn training(steps: usize, rocm: bool) -> (Value, Truth) {
    let mut d = Draw { events: Vec::new(), corr: 500, cpu: T0, gpu: T0, rocm, truth: Truth::default(), cur: None, collective_args: &[] };
    let conv: &[(&'static str, f64)] = if rocm {
        &[
            ("Cijk_Ailk_Bljk_SB_MT64x64x16_MI32x32x2x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1_AMAS3_ASE_ASGT_ASLT_ASAE01_ASCE01_ASEM1_AAC0_BL1_BS1_DTL0_DTVA0_DVO0_ETSP_EPS1_FL0_GRVW4_GSU1_GSUASB_GLS0_ISA90a_IU1_K1_KLA_LBSPP0_LPA0_LPB0_LDL1_LRVW4_LWPMn1_LDW0_FMA_MIAV0_MDA2_NTA0_NTB0_NTC0_NTD0_NEPBS0_NLCA1_NLCB1_ONLL1_OPLV0_PK0_PAP0_PGR1_PLR1_RK0_SIA1_SS0_SU32_SUM0_SUS256_SCIUI1_SPO0_SRVW0_SSO0_SVW4_SNLL0_TT2_32_TLDS0_USFGROn1_VAW1_VSn1_VW4_WSGRA0_WSGRB0_WS64_WG32_8_1_WGM1", 40.0),
            ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>>(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", 8.0),
            ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>>(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)", 5.0),
        ]
    } else {
        &[
            ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)", 12.0),
            ("sm80_xmma_fprop_implicit_gemm_indexed_f32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel_cudnn", 60.0),
            ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float const*, float, float, float*, float*, float*, float*, float, float)", 18.0),
            ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#14}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>>(int, ...)", 7.0),
            ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4::Params)", 45.0),
            ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float, float, float, float, cudnnTensorStruct, float const*, cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float*, float*, float const*, float const*, float)", 25.0),
            ("void cudnn::cnn::reduce_wgrad_nchw_helper<float, float>(void*, void const*, float, int, int)", 4.0),
        ]
    };
    // RCCL's kernel does not name its collective.
    let allreduce = if rocm {
        "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"
    } else {
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
    };
    let broadcast = "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)";
    let copy = if rocm { "Memcpy HtoD (Host -> Device)" } else { "Memcpy HtoD (Pageable -> Device)" };
    for i in 0..steps {
        let cpu_start = d.cpu;
        d.cur = Some(TruthStep {
            kind: Phase::Decode,
            tokens: 0,
            requests: 0,
            start: f64::NAN,
            end: f64::NEG_INFINITY,
            category_us: [0.0; Category::ALL.len()],
            allreduces: 0,
            graph_replays: 0,
        });
        if i == 0 {
            for _ in 0..2 {
                let r0 = d.cpu;
                let c = d.runtime("cudaLaunchKernel", 6.0);
                d.gpu_event("kernel", broadcast, 19.0, c, 20);
                d.range("user_annotation", "nccl:broadcast", r0, d.cpu, PID, TID);
            }
        }
        d.copy_in(copy);
        for _ in 0..4 {
            d.eager(conv);
        }
        let r0 = d.cpu;
        let c = d.runtime("cudaLaunchKernel", 6.0);
        d.gpu_event("kernel", allreduce, 900.0, c, 20);
        d.range("user_annotation", "nccl:all_reduce", r0, d.cpu, PID, TID);
        let c = d.runtime("cudaMemsetAsync", 3.0);
        d.gpu_event("gpu_memset", "Memset (Device)", 1.0, c, STREAM);
        d.cpu += 200.0;
        let cpu_end = d.cpu;
        let Some(truth) = d.cur.take() else { continue };
        let name = format!("ProfilerStep#{}", 3 + i);
        d.range("user_annotation", &name, cpu_start, cpu_end, PID, TID);
        if rocm {
            d.range("gpu_user_annotation", &name, truth.start, truth.end, 0, STREAM);
        }
        d.truth.steps.push(truth);
        d.cpu = d.cpu.max(d.gpu) + 3000.0;
    }
    // Host-only events as the profiler writes them (operators), which the analysis skips.
    d.events.push(json!({"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": PID, "tid": TID, "ts": T0 + 1.0, "dur": 3.0, "args": {"External id": 1}}));
    let doc = json!({
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": if rocm { "AMD Instinct MI250X / MI250" } else { "NVIDIA A100-SXM4-40GB" }}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},
        "traceEvents": d.events,
    });
    (doc, d.truth)
}

/// A trace with host events only (profiled without the CUDA activity): must be refused.
pub fn host_only() -> Value {
    let events: Vec<Value> = (0..50)
        .map(|i| json!({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": PID, "tid": TID, "ts": T0 + i as f64 * 10.0, "dur": 5.0}))
        .chain([json!({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": PID, "tid": TID, "ts": T0, "dur": 600.0})])
        .collect();
    json!({"schemaVersion": 1, "traceEvents": events})
}
