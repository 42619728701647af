//! Kernel names to categories, by the rule table in `rules.toml` (kept as data), and NCCL kernel
//! names to their collective, algorithm and protocol.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// Where a GPU kernel's time goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// NCCL/RCCL collectives and point-to-point.
    Nccl,
    /// The engine's own all-reduce (one-shot/two-shot, `cross_device_reduce_*`).
    CustomAllreduce,
    /// All-reduce fused with the residual add and RMSNorm.
    FusedAllreduceNorm,
    /// MoE expert GEMMs (fused MoE, grouped GEMM).
    MoeGemm,
    /// MoE routing: top-k, expert alignment, permutation.
    MoeRouting,
    /// Attention (FlashInfer, FlashAttention, FlashMLA, FMHA, Triton).
    Attention,
    /// Dense GEMM (cuBLAS, CUTLASS, nvjet, hipBLASLt, CK).
    DenseGemm,
    /// Norms, activations, rotary, element-wise and small reductions.
    NormElementwise,
    /// Copies and memsets.
    MemcpyMemset,
    /// No rule matched: listed by name in the report.
    Other,
}

impl Category {
    /// Every category, in report order.
    pub const ALL: [Category; 10] = [
        Category::Nccl,
        Category::CustomAllreduce,
        Category::FusedAllreduceNorm,
        Category::MoeGemm,
        Category::MoeRouting,
        Category::Attention,
        Category::DenseGemm,
        Category::NormElementwise,
        Category::MemcpyMemset,
        Category::Other,
    ];

    /// The name used in output.
    pub fn name(self) -> &'static str {
        match self {
            Category::Nccl => "nccl",
            Category::CustomAllreduce => "custom_allreduce",
            Category::FusedAllreduceNorm => "fused_allreduce_norm",
            Category::MoeGemm => "moe_gemm",
            Category::MoeRouting => "moe_routing",
            Category::Attention => "attention",
            Category::DenseGemm => "dense_gemm",
            Category::NormElementwise => "norm_elementwise",
            Category::MemcpyMemset => "memcpy_memset",
            Category::Other => "other",
        }
    }

    /// Whether the category is communication between GPUs.
    pub fn is_communication(self) -> bool {
        matches!(self, Category::Nccl | Category::CustomAllreduce | Category::FusedAllreduceNorm)
    }

    /// Its index in [`Category::ALL`].
    pub fn index(self) -> usize {
        Category::ALL.iter().position(|c| *c == self).unwrap_or(Category::ALL.len() - 1)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    rule: Vec<Rule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    category: Category,
    #[serde(default)]
    any: Vec<String>,
    #[serde(default)]
    starts: Vec<String>,
}

impl Rule {
    fn matches(&self, lower: &str) -> bool {
        let head = lower.strip_prefix("void ").unwrap_or(lower);
        self.starts.iter().any(|p| head.starts_with(p.as_str())) || self.any.iter().any(|s| lower.contains(s.as_str()))
    }
}

const RULES_TOML: &str = include_str!("rules.toml");

fn rules() -> &'static [Rule] {
    static RULES: OnceLock<Vec<Rule>> = OnceLock::new();
    RULES.get_or_init(|| match toml::from_str::<RuleFile>(RULES_TOML) {
        Ok(f) => f.rule,
        // The table is compiled in and checked by `the_rule_table_parses`; an empty table would
        // send every kernel to "other", which the report shows by name.
        Err(_) => Vec::new(),
    })
}

/// The category of a kernel called `name`.
pub fn classify(name: &str) -> Category {
    let lower = name.to_ascii_lowercase();
    rules().iter().find(|r| r.matches(&lower)).map_or(Category::Other, |r| r.category)
}

/// Whether a kernel of `category` called `name` is one all-reduce: the engines' custom and fused
/// all-reduce kernels, and NCCL's AllReduce kernels (and NCCL kernels whose name does not say the
/// collective, as `ncclDevKernel_Generic`: serving runs all-reduces through them).
pub fn is_allreduce(name: &str, category: Category) -> bool {
    match category {
        Category::CustomAllreduce | Category::FusedAllreduceNorm => true,
        Category::Nccl => parse_nccl(name).is_none_or(|k| k.collective == "AllReduce" || k.collective.starts_with("Generic")),
        _ => false,
    }
}

/// Whether `name` is an NCCL kernel whose name does not say which collective it runs
/// (`ncclDevKernel_Generic`, or a name [`parse_nccl`] cannot read): only a trace's `args` can.
pub fn collective_not_named(name: &str) -> bool {
    classify(name) == Category::Nccl && parse_nccl(name).is_none_or(|k| k.collective.starts_with("Generic"))
}

/// NCCL's ring/tree/... algorithm, from a kernel name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NcclAlgo {
    /// Ring.
    Ring,
    /// Tree.
    Tree,
    /// NVLink SHARP.
    Nvls,
    /// NVLS + tree.
    NvlsTree,
    /// CollNet (direct or chain).
    Collnet,
    /// PAT.
    Pat,
    /// Not in the name (e.g. `ncclDevKernel_Generic`).
    Unknown,
}

impl NcclAlgo {
    /// The name as NCCL writes it.
    pub fn name(self) -> &'static str {
        match self {
            NcclAlgo::Ring => "RING",
            NcclAlgo::Tree => "TREE",
            NcclAlgo::Nvls => "NVLS",
            NcclAlgo::NvlsTree => "NVLSTREE",
            NcclAlgo::Collnet => "COLLNET",
            NcclAlgo::Pat => "PAT",
            NcclAlgo::Unknown => "?",
        }
    }
}

/// NCCL's wire protocol, from a kernel name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NcclProto {
    /// Low latency (8-byte flags).
    Ll,
    /// LL128.
    Ll128,
    /// Simple.
    Simple,
    /// Not in the name.
    Unknown,
}

impl NcclProto {
    /// The name as NCCL writes it.
    pub fn name(self) -> &'static str {
        match self {
            NcclProto::Ll => "LL",
            NcclProto::Ll128 => "LL128",
            NcclProto::Simple => "SIMPLE",
            NcclProto::Unknown => "?",
        }
    }
}

/// What an NCCL kernel name says.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct NcclKernel {
    /// The collective (AllReduce, AllGather, ReduceScatter, Broadcast, SendRecv, ...).
    pub collective: String,
    /// The algorithm.
    pub algorithm: NcclAlgo,
    /// The protocol.
    pub protocol: NcclProto,
}

/// Parses `ncclDevKernel_AllReduce_Sum_bf16_RING_LL` and the older
/// `ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, ...)`; None for a non-NCCL name.
pub fn parse_nccl(name: &str) -> Option<NcclKernel> {
    let base = name.split('(').next().unwrap_or(name);
    // RCCL's kernels carry a return type and a namespace: `void rccl::ncclKernel_AllGather_...`.
    let base = base.strip_prefix("void ").unwrap_or(base);
    let base = base.strip_prefix("rccl::").unwrap_or(base);
    let rest = base.strip_prefix("ncclDevKernel_").or_else(|| base.strip_prefix("ncclKernel_"))?;
    let mut toks = rest.split('_');
    let collective = toks.next().filter(|t| !t.is_empty())?.to_string();
    let (mut algorithm, mut protocol) = (NcclAlgo::Unknown, NcclProto::Unknown);
    for t in toks {
        match t {
            "RING" => algorithm = NcclAlgo::Ring,
            "TREE" => algorithm = NcclAlgo::Tree,
            "NVLS" => algorithm = NcclAlgo::Nvls,
            "NVLSTREE" => algorithm = NcclAlgo::NvlsTree,
            "COLLNET" | "COLLNETDIRECT" | "COLLNETCHAIN" => algorithm = NcclAlgo::Collnet,
            "PAT" => algorithm = NcclAlgo::Pat,
            "LL" => protocol = NcclProto::Ll,
            "LL128" => protocol = NcclProto::Ll128,
            "SIMPLE" => protocol = NcclProto::Simple,
            _ => {}
        }
    }
    Some(NcclKernel { collective, algorithm, protocol })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(cat: Category, names: &[&str]) {
        for n in names {
            assert_eq!(classify(n), cat, "{n}");
        }
    }

    #[test]
    fn the_rule_table_parses_and_names_every_category_but_other() {
        let f: RuleFile = toml::from_str(RULES_TOML).expect("rules.toml parses");
        for c in Category::ALL.iter().filter(|c| **c != Category::Other) {
            assert!(f.rule.iter().any(|r| r.category == *c), "no rule for {c:?}");
        }
    }

    #[test]
    fn rule_nccl() {
        all(
            Category::Nccl,
            &[
                "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
                "ncclDevKernel_Generic",
                "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)",
                "void rccl::ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            ],
        );
    }

    #[test]
    fn rule_fused_allreduce_norm() {
        all(
            Category::FusedAllreduceNorm,
            &[
                "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16>",
                "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_twoshot_sync<__nv_bfloat16, true>",
                "fused_allreduce_rmsnorm_kernel",
                "void aiter::fused_allreduce_rmsnorm<__hip_bfloat16, 8>",
            ],
        );
    }

    #[test]
    fn rule_custom_allreduce() {
        all(
            Category::CustomAllreduce,
            &[
                "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, ...)",
                "void sglang::cross_device_reduce_2stage<half, 4>(...)",
                "void quickreduce::allreduce_twoshot<half>",
                // The "reduce_kernel" inside it is not an element-wise reduction.
                "void c10d::symmetric_memory::multimem_all_reduce_kernel<__nv_bfloat16, 8, 16>(...)",
                "void c10d::symmetric_memory::one_shot_all_reduce_kernel<__nv_bfloat16, 8>(...)",
                "void c10d::symmetric_memory::two_shot_all_reduce_kernel<__nv_bfloat16, 8>(...)",
                "void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8, false>(AllReduceParams)",
                "void tensorrt_llm::kernels::twoShotAllReduceKernel<__nv_bfloat16, 8, false>(AllReduceParams)",
                "void aiter::cross_device_reduce_1stage_naive<__hip_bfloat16, 8>(...)",
            ],
        );
    }

    #[test]
    fn rule_moe_routing() {
        all(
            Category::MoeRouting,
            &[
                "void moe_align_block_size_kernel<int>",
                "void vllm::moe::topkGatingSoftmax<8, 128>",
                "biased_grouped_topk_kernel",
                // TensorRT-LLM's MoE: routing, permutation, the combine after the expert GEMMs.
                "void moe::dev::routing::routingDeepSeek::routingMainKernel<KernelParams<__nv_bfloat16, float, 8>>(...)",
                "void moe::dev::routing::routingRenormalize::routingIndicesClusterKernel<...>(...)",
                "void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<__nv_bfloat16, __nv_bfloat16, float>>(...)",
                "void moe::dev::activation::activationDeepSeekKernel<...>(...)",
                "void tensorrt_llm::kernels::expandInputRowsKernel<__nv_bfloat16, ...>",
                "void tensorrt_llm::kernels::finalizeMoeRoutingKernel<__nv_bfloat16, ...>",
                // Triton MoE (gpt-oss): routing and the combine.
                "_combined_routing_compute",
                "_sum_bitmatrix_rows",
                "_routing_memset_indx",
                "_finalize_matmul",
                // AMD: CK's and AITER's sorting.
                "void ck_tile::kentry<ck_tile::MoeSortingKernel<ck_tile::MoeSortingProblemEx<int, float, 1, true>>>",
            ],
        );
    }

    #[test]
    fn rule_moe_gemm() {
        all(
            Category::MoeGemm,
            &[
                "fused_moe_kernel",
                "void cutlass::device_kernel<grouped_gemm::Sm90GroupedGemm>",
                "m_grouped_fp8_gemm_nt",
                // TensorRT-LLM's trtllm-gen batched GEMMs over FP4/FP8 expert layouts.
                "bmm_MxE4m3_MxE2m1E2m1_Fp32_t128x8x512u2_s3_et128x8_m128x8x32_cga1x1x1_16dp256b_rM_TN_transOut_schedS_bN_sm100f",
                "bmm_Bfloat16_MxE2m1Bfloat16_Fp32_t128x8x256u2_s4_et128x8_m128x8x16_cga1x1x1_16dp256b_rM_TN_transOut_schedS_bN_sm100f",
                "bmm_E4m3_E4m3E4m3_Fp32_t128x32x128_s6_et128x32_m128x32x32_cga1x1x1_16dp256b_TN_transOut_schedP_sm100a",
                // Triton's matmul_ogs (gpt-oss's MoE).
                "_matmul_ogs_NNT_bf16xbf16xmxfp4_128x64x128x1_swiglu",
                "_p_matmul_ogs_NNT_bf16xbf16xmxfp4_128x256x128x1",
                // DeepGEMM and CUTLASS grouped GEMM, TensorRT-LLM's CUTLASS MoE, Marlin MoE.
                "void deep_gemm::sm90_fp8_gemm_1d2d_impl<0u, 4096u, 7168u, 128u, 128u, 64u, 32u, (deep_gemm::GemmType)1, ...>(...)",
                "void deep_gemm::sm90_m_grouped_fp8_gemm_masked_1d2d_impl<...>(...)",
                "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<cute::tuple<long, long, long>>, ...>>",
                "void tensorrt_llm::kernels::cutlass_kernels::MoeFCGemm<...>",
                "void marlin_moe_wna16::Marlin<...>",
                // AMD: AITER's fused MoE, CK's MoE GEMM.
                "_ZN5aiter43fmoe_bf16_blockscaleFp8_g1u1_vs_silu_1tg_32x256E",
                "void ck::kernel_moe_gemm<ck::GridwiseMoeGemm<...>>",
            ],
        );
        // DeepGEMM's dense GEMM stays dense.
        assert_eq!(classify("void deep_gemm::sm90_fp8_gemm_1d2d_impl<...>"), Category::DenseGemm);
    }

    #[test]
    fn rule_attention() {
        all(
            Category::Attention,
            &[
                "void flashinfer::BatchPrefillWithPagedKVCacheKernel<...>",
                "void flashinfer::BatchDecodeWithPagedKVCacheKernel<128u, 8u, 2u, __nv_bfloat16>",
                "void flashinfer::mla::hopper::BatchMLAPageAttentionHopperKernel<...>",
                "void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128>>",
                "void flash::flash_fwd_splitkv_mla_kernel<...>",
                "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<...>>>",
                "fmha_v2_flash_attention_fp16_64_128_S_128_sm90_kernel",
                "fmhaSm100fKernel_QkvE4m3OBfloat16HQk128HV128HVPerCta128PagedKvDenseP32VarSeqQ128Kv128PersistentSwapsAbForGen",
                "void kernel_mha<...>(xqa::...)",
                "xqa_kernel_dt_bf16_d_128_beam_1_kvt_e4m3_pagedKV_64_nqpkv_8_m_8_sm_90",
                "kernel_unified_attention_2d",
                "_fwd_grouped_kernel_stage1",
                "_attn_fwd",
                // AMD: AITER's paged attention, MLA and FMHA; CK tile FMHA.
                "_ZN5aiter30paged_attention_ll4mi_QKV_mfma16_kernelI13__hip_bfloat16E",
                "aiter::mla_stage1_asm_fwd",
                "void ck_tile::kentry<ck_tile::FmhaFwdKernel<...>>",
            ],
        );
    }

    #[test]
    fn rule_dense_gemm() {
        all(
            Category::DenseGemm,
            &[
                "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT",
                "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
                "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(Params)",
                "Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0",
                "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn",
                "gemm_Bfloat16_E4m3E4m3_Fp32_t128x8x512u2_s3_et128x8_m128x8x32_cga1x1x1_16dp256b_TN_transOut_schedS_sm100f",
                "void ck::kernel_gemm_xdl_cshuffle_v3<...>",
                "_ZN5aiter24gemm_a8w8_blockscale_asmE",
                // cuDNN's convolutions (implicit GEMM), with their weight-gradient reduction.
                "cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1",
                "sm80_xmma_fprop_implicit_gemm_indexed_f32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16",
                "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolution",
                "void cudnn::cnn::reduce_wgrad_nchw_helper<float, float>(void*, void const*, float, int, int)",
                "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::WinogradDataParams<float, float>)",
                "void fft2d_r2c_32x32<float, false, 5u, true>(float2*, float const*, int, int, int, int, int, int, int, int, int, cudnn::reduced_divisor, bool, int2, int, int)",
            ],
        );
    }

    #[test]
    fn rule_norm_elementwise() {
        all(
            Category::NormElementwise,
            &[
                "void flashinfer::norm::FusedAddRMSNormKernel<8, __nv_bfloat16>",
                "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
                "void vllm::act_and_mul_kernel<silu>",
                "triton_poi_fused_add_0",
                "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, 0>",
                // Sampling's top-k is not MoE routing.
                "void flashinfer::sampling::TopKTopPSamplingFromProbKernel<1024u, ...>",
                // cuDNN's batch norm and layout transforms.
                "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(...)",
                "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(...)",
                "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(...)",
                "void cask_cudnn_infer::computeOffsetsKernel<false, false>(cask_cudnn_infer::ComputeOffsetsParams)",
                // AMD.
                "void aiter::rmsnorm2d_fwd<...>",
                // The training side: optimizer steps, Inductor's older kernels, CUB, FBGEMM.
                "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float, float, float, float, float, float, adamMode_t, float, int, int>(...)",
                "triton__0d1d2d3d4d5d",
                "void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, int, int>::Policy800, false, long, int, int, int>(...)",
                "void at_cuda_detail::cub::DeviceScanInitKernel<at_cuda_detail::cub::ScanTileState<long, true> >(...)",
                "void permute_pooled_embs_kernel<float>(float const*, long const*, long const*, long const*, float*, long, long, long)",
            ],
        );
    }

    #[test]
    fn rule_memcpy_memset() {
        all(Category::MemcpyMemset, &["Memcpy HtoD (Pinned -> Device)", "Memset (Device)"]);
    }

    #[test]
    fn an_unknown_kernel_is_other() {
        all(Category::Other, &["my_mystery_kernel", "void sglang_fixture_unknown_kernel<int>(int*)"]);
    }

    #[test]
    fn all_reduces_are_told_from_other_collectives() {
        let ar = |n: &str| is_allreduce(n, classify(n));
        assert!(ar("ncclDevKernel_AllReduce_Sum_bf16_RING_LL"));
        assert!(ar("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"));
        assert!(ar("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>"));
        assert!(ar("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16>"));
        assert!(!ar("ncclDevKernel_AllGather_RING_LL"));
        // RCCL's names carry a return type and a namespace; the collective is still read.
        assert!(!ar("void rccl::ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"));
        assert!(ar("void rccl::ncclKernel_AllReduce_RING_LL_Sum_bf16(ncclDevComm*, unsigned long, ncclWork*)"));
        assert!(!ar("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT"));
    }

    #[test]
    fn nccl_names_give_collective_algorithm_and_protocol() {
        let k = parse_nccl("ncclDevKernel_AllReduce_Sum_bf16_RING_LL").expect("nccl");
        assert_eq!((k.collective.as_str(), k.algorithm, k.protocol), ("AllReduce", NcclAlgo::Ring, NcclProto::Ll));
        let k = parse_nccl("ncclKernel_Broadcast_RING_LL128_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)").expect("nccl");
        assert_eq!((k.collective.as_str(), k.algorithm, k.protocol), ("Broadcast", NcclAlgo::Ring, NcclProto::Ll128));
        let k = parse_nccl("ncclDevKernel_ReduceScatter_Sum_f32_NVLS_SIMPLE").expect("nccl");
        assert_eq!((k.algorithm, k.protocol), (NcclAlgo::Nvls, NcclProto::Simple));
        assert_eq!(parse_nccl("gemm"), None);
    }
}
