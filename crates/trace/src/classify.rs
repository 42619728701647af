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
    any: Vec<String>,
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
    rules().iter().find(|r| r.any.iter().any(|s| lower.contains(s.as_str()))).map_or(Category::Other, |r| r.category)
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
            ],
        );
    }

    #[test]
    fn rule_fused_allreduce_norm() {
        all(
            Category::FusedAllreduceNorm,
            &[
                "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16>",
                "fused_allreduce_rmsnorm_kernel",
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
            ],
        );
    }

    #[test]
    fn rule_moe_routing() {
        all(
            Category::MoeRouting,
            &["void moe_align_block_size_kernel<int>", "void vllm::moe::topkGatingSoftmax<8, 128>", "biased_grouped_topk_kernel"],
        );
    }

    #[test]
    fn rule_moe_gemm() {
        all(
            Category::MoeGemm,
            &["fused_moe_kernel", "void cutlass::device_kernel<grouped_gemm::Sm90GroupedGemm>", "m_grouped_fp8_gemm_nt"],
        );
    }

    #[test]
    fn rule_attention() {
        all(
            Category::Attention,
            &[
                "void flashinfer::BatchPrefillWithPagedKVCacheKernel<...>",
                "void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128>>",
                "void flash::flash_fwd_splitkv_mla_kernel<...>",
                "fmha_v2_flash_attention_fp16_64_128_S_128_sm90_kernel",
                "kernel_unified_attention_2d",
                "_attn_fwd",
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
            ],
        );
    }

    #[test]
    fn rule_memcpy_memset() {
        all(Category::MemcpyMemset, &["Memcpy HtoD (Pinned -> Device)", "Memset (Device)"]);
    }

    #[test]
    fn an_unknown_kernel_is_other() {
        all(Category::Other, &["void cudnn::ops::nchwToNhwcKernel<float>", "my_mystery_kernel"]);
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
