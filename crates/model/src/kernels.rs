//! Decode weight-streaming rates per GPU and weight format, read off the kernel tables in
//! `data/validation/kernels.toml` (NVIDIA AIConfigurator's per-kernel timings, sglang 0.5.14 and
//! 0.5.10; sources and licence in docs/plan-data-sources.md).
//!
//! A decode step reads every weight it touches once, so the time of a GEMM or a fused-MoE layer at
//! decode batch sizes is its weight bytes over the bandwidth the kernel achieves. One global figure
//! (before: the engine's `hbm_efficiency` 0.8 and `moe_efficiency` 0.65) hid how much that rate
//! differs by GPU and format: the same 8192 x 8192 GEMM reaches 84% of peak in BF16 on an H100 and
//! 44% in FP8 on a B200 (its FP8 GEMMs take about 19 us at any M up to 64). These tables give the
//! rate per (GPU, format) where kernels.toml measured one; elsewhere (AMD, the H20 and other GPUs
//! without tables, MXFP4 on the A100) the engine's figures stay. Relatives read another GPU's tables ([`table_gpu`]): the A100 40 GB and the A100
//! PCIe cards the A100 80 GB SXM's, the H800 and the 96 GB GH200 the H100 SXM's, the H200 NVL and
//! the 144 GB GH200 the H200's, the RTX PRO 6000 Workstation Edition and the GeForce RTX 5090 the
//! Server Edition's.
//!
//! How each figure is derived (the test `the_decode_tables_are_the_kernel_files_medians`
//! recomputes every one from kernels.toml and fails on a drift over 0.0005):
//! - dense: `[[gemm]]` rows of shape N = K = 8192 (a 70B-class projection), every point with
//!   M <= 64 tokens (decode batches; larger ones turn compute-bound and the compute term takes
//!   over), achieved bandwidth N x K x bytes per weight / latency over the GPU's peak, median. An
//!   FP8 checkpoint is either per-tensor scaled (sgl-kernel `fp8_scaled_mm`) or 128 x 128 block
//!   scaled (DeepGEMM); the model does not know which, so FP8 pools both tables. A table's latency
//!   includes the GEMM's own launch floor, which the step counts per kernel, so the model uses the
//!   rate net of that floor ([`dense_decode_efficiency`]).
//! - experts: `[[moe]]` rows with balanced routing (AIConfigurator spreads the tokens evenly, so
//!   every expert is read once tokens x top-k reaches the expert count), every point with 1 to 8
//!   tokens per expert, all experts' bytes on a rank (E x 3 x hidden x expert FFN x bytes per
//!   weight / 8 ranks) / latency over the peak, median, per split ([`MoeSplit`]: sliced experts
//!   and whole experts differ, e.g. BF16 on an H200 0.81 against 0.55). A row with any such point
//!   above the peak is dropped whole (its bytes read are not what its shape implies: one
//!   DeepSeek-shape TP row per GPU in FP8 and NVFP4). At these sizes a layer takes hundreds of
//!   microseconds, so the few kernel floors inside it (a few percent) are left in the rate.
//! - MXFP4 experts (step 37, VALIDATION.md twelfth sitting): the `[[moe]]` rows of the kernel vLLM
//!   0.24.0 runs for a GPT-OSS checkpoint (OpenAI's triton_kernels on Hopper, FlashInfer's TRT-LLM
//!   MXFP4 kernel on B200/B300/GB200/GB300, Marlin on the L40S and the RTX PRO 6000; sglang picks
//!   the same family on Hopper and SM100), balanced routing, at most 8 tokens per expert, experts
//!   sliced over any rank count the tables hold (1 to 32) or whole (2 to 128 ranks), written by
//!   `scripts/moe-mxfp4-rows`. The rate is
//!   the slope of a least-squares line of latency against the bytes one rank reads, over the peak,
//!   per split; the line's intercept (20-77 us) is left to the eight kernel floors the step charges
//!   per MoE layer. GPT-OSS's layers are small per rank (211 MB for the 120B model at TP8, against
//!   1.4 GB for DeepSeek-V3), so that fixed part is a large share of a call's latency and the
//!   median rate of the rule above would price it twice. The slopes run 0.54-0.85 of the peak
//!   (H200 lowest), where the engine's figure gave every GPU 0.45.

use crate::quant::Dtype;

/// Dense decode GEMM rate, share of peak memory bandwidth, by (GPU, weight format).
pub const DENSE_DECODE: &[(&str, Dtype, f64)] = &[
    ("a100", Dtype::Bf16, 0.660),
    ("b200", Dtype::Bf16, 0.706),
    ("b200", Dtype::Fp8, 0.441),
    ("b200", Dtype::Nvfp4, 0.343),
    ("b300", Dtype::Bf16, 0.699),
    ("b300", Dtype::Fp8, 0.444),
    ("b300", Dtype::Nvfp4, 0.353),
    ("gb200", Dtype::Bf16, 0.759),
    ("gb200", Dtype::Fp8, 0.474),
    ("gb200", Dtype::Nvfp4, 0.370),
    ("gb300", Dtype::Bf16, 0.747),
    ("gb300", Dtype::Fp8, 0.467),
    ("gb300", Dtype::Nvfp4, 0.373),
    ("h100-sxm", Dtype::Bf16, 0.837),
    ("h100-sxm", Dtype::Fp8, 0.683),
    ("h200", Dtype::Bf16, 0.809),
    ("h200", Dtype::Fp8, 0.612),
    ("l40s", Dtype::Bf16, 0.797),
    ("l40s", Dtype::Fp8, 0.682),
    ("rtx-pro-6000-se", Dtype::Bf16, 0.8561),
    ("rtx-pro-6000-se", Dtype::Fp8, 0.5715),
    ("rtx-pro-6000-se", Dtype::Nvfp4, 0.5740),
];

/// How a fused-MoE layer's experts are split over the GPUs of a TP group, as kernels.toml's
/// `[[moe]]` rows measure it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeSplit {
    /// Every expert sliced over the ranks (`moe_tp = 8`; the MXFP4 rows also 1 to 32 ranks, one
    /// GPU included): narrow GEMMs over all experts.
    Tp,
    /// Whole experts, an eighth of them per rank (`moe_ep = 8`; the MXFP4 rows also 2 to 128).
    Ep,
}

/// Fused-MoE decode rate with every expert read, share of peak memory bandwidth, by (GPU, expert
/// format, split); MXFP4's is the slope of latency against bytes read (the module's notes).
pub const MOE_DECODE: &[(&str, Dtype, MoeSplit, f64)] = &[
    ("a100", Dtype::Bf16, MoeSplit::Tp, 0.820),
    ("a100", Dtype::Bf16, MoeSplit::Ep, 0.520),
    ("a100", Dtype::Int4, MoeSplit::Tp, 0.680),
    ("a100", Dtype::Int4, MoeSplit::Ep, 0.343),
    ("b200", Dtype::Bf16, MoeSplit::Tp, 0.852),
    ("b200", Dtype::Bf16, MoeSplit::Ep, 0.866),
    ("b200", Dtype::Fp8, MoeSplit::Tp, 0.737),
    ("b200", Dtype::Fp8, MoeSplit::Ep, 0.680),
    ("b200", Dtype::Int4, MoeSplit::Tp, 0.392),
    ("b200", Dtype::Int4, MoeSplit::Ep, 0.411),
    ("b200", Dtype::Mxfp4, MoeSplit::Tp, 0.593),
    ("b200", Dtype::Mxfp4, MoeSplit::Ep, 0.569),
    ("b200", Dtype::Nvfp4, MoeSplit::Tp, 0.654),
    ("b200", Dtype::Nvfp4, MoeSplit::Ep, 0.710),
    ("b300", Dtype::Bf16, MoeSplit::Tp, 0.845),
    ("b300", Dtype::Bf16, MoeSplit::Ep, 0.855),
    ("b300", Dtype::Fp8, MoeSplit::Tp, 0.725),
    ("b300", Dtype::Fp8, MoeSplit::Ep, 0.683),
    ("b300", Dtype::Int4, MoeSplit::Tp, 0.410),
    ("b300", Dtype::Int4, MoeSplit::Ep, 0.427),
    ("b300", Dtype::Mxfp4, MoeSplit::Tp, 0.599),
    ("b300", Dtype::Mxfp4, MoeSplit::Ep, 0.574),
    ("b300", Dtype::Nvfp4, MoeSplit::Tp, 0.657),
    ("b300", Dtype::Nvfp4, MoeSplit::Ep, 0.710),
    ("gb200", Dtype::Bf16, MoeSplit::Tp, 0.892),
    ("gb200", Dtype::Bf16, MoeSplit::Ep, 0.910),
    ("gb200", Dtype::Fp8, MoeSplit::Tp, 0.768),
    ("gb200", Dtype::Fp8, MoeSplit::Ep, 0.712),
    ("gb200", Dtype::Int4, MoeSplit::Tp, 0.411),
    ("gb200", Dtype::Int4, MoeSplit::Ep, 0.429),
    ("gb200", Dtype::Mxfp4, MoeSplit::Tp, 0.617),
    ("gb200", Dtype::Mxfp4, MoeSplit::Ep, 0.586),
    ("gb200", Dtype::Nvfp4, MoeSplit::Tp, 0.697),
    ("gb200", Dtype::Nvfp4, MoeSplit::Ep, 0.749),
    ("gb300", Dtype::Bf16, MoeSplit::Tp, 0.865),
    ("gb300", Dtype::Bf16, MoeSplit::Ep, 0.880),
    ("gb300", Dtype::Fp8, MoeSplit::Tp, 0.742),
    ("gb300", Dtype::Fp8, MoeSplit::Ep, 0.707),
    ("gb300", Dtype::Int4, MoeSplit::Tp, 0.425),
    ("gb300", Dtype::Int4, MoeSplit::Ep, 0.444),
    ("gb300", Dtype::Mxfp4, MoeSplit::Tp, 0.616),
    ("gb300", Dtype::Mxfp4, MoeSplit::Ep, 0.585),
    ("gb300", Dtype::Nvfp4, MoeSplit::Tp, 0.682),
    ("gb300", Dtype::Nvfp4, MoeSplit::Ep, 0.728),
    ("h100-sxm", Dtype::Bf16, MoeSplit::Tp, 0.844),
    ("h100-sxm", Dtype::Bf16, MoeSplit::Ep, 0.653),
    ("h100-sxm", Dtype::Fp8, MoeSplit::Tp, 0.753),
    ("h100-sxm", Dtype::Fp8, MoeSplit::Ep, 0.805),
    ("h100-sxm", Dtype::Int4, MoeSplit::Tp, 0.663),
    ("h100-sxm", Dtype::Int4, MoeSplit::Ep, 0.581),
    ("h100-sxm", Dtype::Mxfp4, MoeSplit::Tp, 0.756),
    ("h100-sxm", Dtype::Mxfp4, MoeSplit::Ep, 0.736),
    ("h200", Dtype::Bf16, MoeSplit::Tp, 0.811),
    ("h200", Dtype::Bf16, MoeSplit::Ep, 0.554),
    ("h200", Dtype::Fp8, MoeSplit::Tp, 0.641),
    ("h200", Dtype::Fp8, MoeSplit::Ep, 0.749),
    ("h200", Dtype::Int4, MoeSplit::Tp, 0.542),
    ("h200", Dtype::Int4, MoeSplit::Ep, 0.409),
    ("h200", Dtype::Mxfp4, MoeSplit::Tp, 0.558),
    ("h200", Dtype::Mxfp4, MoeSplit::Ep, 0.540),
    ("l40s", Dtype::Bf16, MoeSplit::Tp, 0.804),
    ("l40s", Dtype::Bf16, MoeSplit::Ep, 0.508),
    ("l40s", Dtype::Int4, MoeSplit::Tp, 0.774),
    ("l40s", Dtype::Int4, MoeSplit::Ep, 0.758),
    ("l40s", Dtype::Mxfp4, MoeSplit::Tp, 0.745),
    ("l40s", Dtype::Mxfp4, MoeSplit::Ep, 0.742),
    ("rtx-pro-6000-se", Dtype::Bf16, MoeSplit::Tp, 0.9236),
    ("rtx-pro-6000-se", Dtype::Bf16, MoeSplit::Ep, 0.6086),
    ("rtx-pro-6000-se", Dtype::Fp8, MoeSplit::Tp, 0.8907),
    ("rtx-pro-6000-se", Dtype::Fp8, MoeSplit::Ep, 0.8680),
    ("rtx-pro-6000-se", Dtype::Int4, MoeSplit::Tp, 0.8388),
    ("rtx-pro-6000-se", Dtype::Int4, MoeSplit::Ep, 0.8010),
    ("rtx-pro-6000-se", Dtype::Mxfp4, MoeSplit::Tp, 0.825),
    ("rtx-pro-6000-se", Dtype::Mxfp4, MoeSplit::Ep, 0.846),
    ("rtx-pro-6000-se", Dtype::Nvfp4, MoeSplit::Tp, 0.6730),
    ("rtx-pro-6000-se", Dtype::Nvfp4, MoeSplit::Ep, 0.8191),
];

/// MLA decode attention's KV read rate, share of peak memory bandwidth, by (GPU, FP8 cache,
/// query heads per rank): from kernels.toml's `[[decode_attention]]` rows of kind "mla"
/// (AIConfigurator's sglang 0.5.14 `generation_mla_perf` tables: FA3 on Hopper, trtllm-gen MLA on
/// Blackwell, Triton on SM120 and SM89). For each table at batch 32 and 128, the latent bytes added
/// between its two longest contexts (batch x context x 576 elements x the cache's bytes) over the
/// latency added, against the GPU's peak; the median of the two. The latent is shared by every head,
/// so more heads per rank add compute but no bytes: at 128 heads the rate falls (0.50-0.71 on
/// Hopper and Blackwell, 0.14-0.19 with the Triton kernel), at 8 heads the kernel streams (0.73-0.96;
/// Hopper's FP8 cache, 0.06-0.08, is the exception: [`mla_decode_efficiency`]).
/// Kernel data, not an end-to-end case; [`mla_decode_efficiency`] reads it.
pub const MLA_DECODE: &[(&str, bool, u32, f64)] = &[
    ("b200", false, 8, 0.733),
    ("b200", false, 128, 0.579),
    ("b200", true, 8, 0.844),
    ("b200", true, 128, 0.495),
    ("b300", false, 8, 0.730),
    ("b300", false, 128, 0.644),
    ("b300", true, 8, 0.825),
    ("b300", true, 128, 0.626),
    ("gb200", false, 8, 0.765),
    ("gb200", false, 128, 0.652),
    ("gb200", true, 8, 0.868),
    ("gb200", true, 128, 0.640),
    ("h100-sxm", false, 8, 0.916),
    ("h100-sxm", false, 128, 0.714),
    ("h100-sxm", true, 8, 0.084),
    ("h100-sxm", true, 128, 0.081),
    ("h200", false, 8, 0.925),
    ("h200", false, 128, 0.519),
    ("h200", true, 8, 0.063),
    ("h200", true, 128, 0.058),
    ("l40s", false, 8, 0.876),
    ("l40s", false, 128, 0.188),
    ("rtx-pro-6000-se", false, 8, 0.9558),
    ("rtx-pro-6000-se", false, 128, 0.1605),
];

/// The KV read rate of dense (not DSA) MLA decode attention on `gpu` with `heads_per_rank` query
/// heads per rank: [`MLA_DECODE`] interpolated linearly in log(heads) between its 8- and 128-head
/// columns and held beyond them. None where there is no table, and for an FP8 cache on Hopper: the
/// tables time sglang's FA3 path there, which dequantizes at 6-8% of the peak, while vLLM
/// (FlashMLA) and TensorRT-LLM run other FP8 kernels; the model has no engine to tell them apart,
/// so the engine's memory efficiency stays.
pub fn mla_decode_efficiency(gpu: &str, fp8_cache: bool, heads_per_rank: f64) -> Option<f64> {
    let gpu = table_gpu(gpu);
    if fp8_cache && matches!(gpu, "h100-sxm" | "h200") {
        return None;
    }
    let at = |h: u32| MLA_DECODE.iter().find(|(g, f, n, _)| *g == gpu && *f == fp8_cache && *n == h).map(|(_, _, _, e)| *e);
    Some(log_interp(&[8.0, 128.0], &[at(8)?, at(128)?], heads_per_rank))
}

/// `row` at `x`, linear in log(x) between the columns at `xs` (ascending) and held beyond them.
fn log_interp(xs: &[f64], row: &[f64], x: f64) -> f64 {
    let x = x.max(f64::MIN_POSITIVE);
    if x <= xs[0] {
        return row[0];
    }
    for i in 1..xs.len() {
        if x <= xs[i] {
            let t = (x.ln() - xs[i - 1].ln()) / (xs[i].ln() - xs[i - 1].ln());
            return row[i - 1] + t * (row[i] - row[i - 1]);
        }
    }
    row[xs.len() - 1]
}

/// The tables' name for a catalog GPU whose tables are another's: the kernels' achieved share of
/// peak bandwidth carries over between products of one die and one memory generation.
/// - The A100 40 GB and the A100 PCIe cards read the A100 80 GB SXM's (the same GA100 and SM80
///   kernels; HBM2/HBM2e at 1,555 to 2,039 GB/s).
/// - The H800 reads the H100 SXM's (the same GH100 configuration, 132 SMs and 3.35 TB/s of HBM3;
///   only its NVLink and FP64 are cut).
/// - The GH200 with 96 GB of HBM3 reads the H100 SXM's too (the same GH100 and HBM3 generation, but
///   4.0 TB/s against 3.35: an assumption; the H200's HBM3e tables reach lower shares, so its
///   true rates may sit between the two).
/// - The H200 NVL and the GH200 with 144 GB of HBM3e read the H200's (the same GH100 with HBM3e at
///   4.8 to 4.9 TB/s; the H200 NVL's lower power limit slows its compute, not its memory).
/// - The RTX PRO 6000 Workstation Edition reads the Server Edition's (the same GB202 and 512-bit
///   GDDR7; its memory runs at 14,001 MHz against 12,481, 1,792 GB/s against 1,597, so a share of
///   its own peak is an assumption).
/// - The GeForce RTX 5090 reads the Server Edition's too, for the same reason as the Workstation
///   Edition: the same GB202 and SM120 kernels, and the Workstation Edition's 512-bit GDDR7 at
///   1,792 GB/s (gpus.json). It enables 170 of the die's SMs where the Server Edition has 188, and
///   GeForce halves the FP32-accumulate tensor rate; the prefill attention table is a share of each
///   GPU's own BF16 peak (gpus.json holds the 5090's halved one), and the decode rates are shares
///   of bandwidth. Carrying them over is an assumption no end-to-end fit or test case checks
///   (the frozen holdout holds seven RTX 5090 rows; the mapping was chosen by the die and memory,
///   not from them).
pub(crate) fn table_gpu(gpu: &str) -> &str {
    match gpu {
        "a100-40gb" | "a100-pcie" | "a100-pcie-40gb" => "a100",
        "h800" | "gh200-96gb" => "h100-sxm",
        "h200-nvl" | "gh200-144gb" => "h200",
        "rtx-pro-6000-ws" | "rtx-5090" => "rtx-pro-6000-se",
        g => g,
    }
}

fn find(table: &[(&str, Dtype, f64)], gpu: &str, dt: Dtype) -> Option<f64> {
    let gpu = table_gpu(gpu);
    table.iter().find(|(g, d, _)| *g == gpu && *d == dt).map(|(_, _, e)| *e)
}

/// The dense decode GEMM rate of [`DENSE_DECODE`] for `dt` weights on `gpu` (a catalog name),
/// where kernels.toml has one, as measured: the GEMM's whole latency, its launch floor included.
pub fn dense_decode_table(gpu: &str, dt: Dtype) -> Option<f64> {
    find(DENSE_DECODE, gpu, dt)
}

/// Bytes of the table's 8192 x 8192 GEMM in `dt`, by kernels.toml's convention for
/// `weight_read_gbs` (bf16 2, fp8 1, nvfp4 0.5625 bytes per weight).
fn table_gemm_bytes(dt: Dtype) -> f64 {
    let per_weight = match dt {
        Dtype::Bf16 => 2.0,
        Dtype::Nvfp4 => 0.5625,
        _ => 1.0,
    };
    8192.0 * 8192.0 * per_weight
}

/// The dense decode rate for `dt` weights on `gpu` with peak bandwidth `peak_gbs`, net of a
/// `floor_us` the step already counts for each kernel ([`crate::Engine::kernel_overhead_us`]):
/// the table's latency less that floor is the time spent streaming. At 4.6 us this takes an H100's
/// BF16 rate from 0.84 to 0.93 and a B200's FP8 rate from 0.44 to 0.58; a floor longer than the
/// whole measured latency leaves the peak.
pub fn dense_decode_efficiency(gpu: &str, dt: Dtype, peak_gbs: f64, floor_us: f64) -> Option<f64> {
    let rate = dense_decode_table(gpu, dt)?;
    let bytes_per_us = peak_gbs * 1e3;
    let bytes = table_gemm_bytes(dt);
    let stream_us = bytes / (rate * bytes_per_us) - floor_us.max(0.0);
    Some(if stream_us > 0.0 { (bytes / (stream_us * bytes_per_us)).min(1.0) } else { 1.0 })
}

/// The fused-MoE decode rate for `dt` experts on `gpu` split as `split`, where kernels.toml has
/// one.
pub fn moe_decode_efficiency(gpu: &str, dt: Dtype, split: MoeSplit) -> Option<f64> {
    let gpu = table_gpu(gpu);
    MOE_DECODE.iter().find(|(g, d, s, _)| *g == gpu && *d == dt && *s == split).map(|(_, _, _, e)| *e)
}

/// Which prefill attention kernel a layer runs ([`prefill_attention_efficiency`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefillAttention {
    /// MHA / GQA (flash attention over per-head keys and values).
    Gqa,
    /// MLA (and DSA) prefill: attention over up-projected 192-dim keys and 128-dim values.
    Mla,
}

/// Prompt lengths of [`PREFILL_ATTENTION`]'s columns, tokens.
pub const PREFILL_ATTENTION_LENGTHS: [f64; 7] = [256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0];

/// Causal prefill attention's achieved share of the GPU's dense BF16 peak, by GPU and prompt
/// length: (GPU, MHA/GQA at each of [`PREFILL_ATTENTION_LENGTHS`], MLA at each). From NVIDIA
/// AIConfigurator's sglang 0.5.14 context-attention tables at 095f58a5
/// (`systems/data/<system>/attention/sglang/0.5.14/context_attention_perf.parquet` and
/// `.../mla/sglang/0.5.14/context_mla_perf.parquet`, Apache-2.0): each measured call's causal
/// FLOPs (QK^T and PV over isl x (isl + 1) / 2 pairs per head, 2 x (qk + v dims) each) over its
/// latency over the peak in gpus.json; a BF16 cache, and for MHA/GQA BF16 attention, no window and
/// head_dim 64 to 256 (the MLA tables hold BF16 attention only); at least 4,096 tokens in the
/// call; the median at each length. `scripts/context-attention-rates`
/// recomputes every figure (the tables hold 2,000 to 35,000 rows per GPU, too many to copy into
/// kernels.toml). Short prompts reach a small share (launch and tile quantization dominate), long
/// ones 0.45 to 0.72; sglang's MLA prefill reaches 0.04 to 0.18 on Hopper, SM120 and SM89.
/// Kernel data, not an end-to-end case.
pub const PREFILL_ATTENTION: &[(&str, [f64; 7], [f64; 7])] = &[
    ("h100-sxm", [0.148, 0.24, 0.35, 0.463, 0.532, 0.586, 0.627], [0.059, 0.086, 0.125, 0.148, 0.166, 0.174, 0.18]),
    ("h200", [0.156, 0.247, 0.356, 0.459, 0.53, 0.575, 0.602], [0.063, 0.089, 0.13, 0.152, 0.168, 0.174, 0.178]),
    ("b200", [0.091, 0.154, 0.245, 0.344, 0.425, 0.495, 0.54], [0.082, 0.145, 0.231, 0.334, 0.431, 0.524, 0.569]),
    ("b300", [0.109, 0.181, 0.296, 0.431, 0.549, 0.654, 0.718], [0.091, 0.161, 0.26, 0.374, 0.486, 0.58, 0.616]),
    ("gb200", [0.089, 0.151, 0.24, 0.334, 0.404, 0.469, 0.511], [0.077, 0.135, 0.214, 0.308, 0.375, 0.432, 0.429]),
    ("gb300", [0.098, 0.163, 0.266, 0.388, 0.494, 0.589, 0.646], [0.082, 0.148, 0.239, 0.352, 0.458, 0.579, 0.649]),
    ("rtx-pro-6000-se", [0.259, 0.406, 0.502, 0.567, 0.615, 0.653, 0.664], [0.042, 0.052, 0.058, 0.061, 0.062, 0.063, 0.063]),
    ("l40s", [0.175, 0.287, 0.351, 0.388, 0.423, 0.442, 0.448], [0.042, 0.051, 0.056, 0.058, 0.059, 0.059, 0.06]),
];

/// A GPU without tables (A100, GeForce, AMD): the median of [`PREFILL_ATTENTION`]'s eight GPUs
/// at each length (MHA/GQA, MLA).
pub const PREFILL_ATTENTION_OTHER: ([f64; 7], [f64; 7]) =
    ([0.1285, 0.2105, 0.323, 0.4095, 0.512, 0.5805, 0.6145], [0.07, 0.112, 0.172, 0.23, 0.2715, 0.303, 0.3045]);

/// Prefill attention's share of `gpu`'s dense BF16 peak for prompts of `prompt_len` tokens:
/// [`PREFILL_ATTENTION`] interpolated linearly in log(length) and held at the end columns.
pub fn prefill_attention_efficiency(gpu: &str, kind: PrefillAttention, prompt_len: f64) -> f64 {
    let (gqa, mla) = PREFILL_ATTENTION.iter().find(|(g, _, _)| *g == table_gpu(gpu)).map_or(PREFILL_ATTENTION_OTHER, |(_, g, m)| (*g, *m));
    let row = if kind == PrefillAttention::Mla { mla } else { gqa };
    log_interp(&PREFILL_ATTENTION_LENGTHS, &row, prompt_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KERNELS: &str = include_str!("../data/validation/kernels.toml");

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }

    fn peak(gpu: &str) -> f64 {
        crate::hw::gpu(gpu).expect("a catalog GPU").mem_bw_gbs * 1e9
    }

    /// kernels.toml names the A100 80 GB as AIConfigurator's system does; the catalog calls it a100.
    fn catalog_name(table_gpu: &str) -> &str {
        if table_gpu == "a100-80gb" {
            "a100"
        } else {
            table_gpu
        }
    }

    fn floats(v: &toml::Value) -> Vec<f64> {
        v.as_array()
            .expect("an array")
            .iter()
            .map(|x| x.as_float().or_else(|| x.as_integer().map(|i| i as f64)).expect("a number"))
            .collect()
    }

    fn recompute_dense() -> Vec<((String, Dtype), f64)> {
        let t: toml::Table = KERNELS.parse().expect("kernels.toml parses");
        let mut pts: Vec<((String, Dtype), f64)> = Vec::new();
        for g in t["gemm"].as_array().expect("[[gemm]]") {
            if g["n"].as_integer() != Some(8192) || g["k"].as_integer() != Some(8192) {
                continue;
            }
            // The file's bytes-per-weight convention for its derived weight_read_gbs.
            let (dt, bytes) = match g["dtype"].as_str().expect("dtype") {
                "bfloat16" => (Dtype::Bf16, 2.0),
                "fp8" | "fp8_block" => (Dtype::Fp8, 1.0),
                "nvfp4" => (Dtype::Nvfp4, 0.5625),
                other => panic!("an unexpected gemm dtype {other}"),
            };
            let gpu = catalog_name(g["gpu"].as_str().expect("gpu")).to_string();
            for (m, lat) in floats(&g["m_tokens"]).into_iter().zip(floats(&g["latency_us"])) {
                if m <= 64.0 {
                    pts.push(((gpu.clone(), dt), 8192.0 * 8192.0 * bytes / (lat * 1e-6) / peak(&gpu)));
                }
            }
        }
        medians(pts)
    }

    /// The router skew is derived from kernel data, not fitted: recomputed here from kernels.toml's
    /// `[[routing]]` rows (scripts/routing-skew-from-kernels), it is the Zipf exponent on the
    /// 0..1.4 by 0.05 grid whose distinct-expert share is closest to the kernels' effective share,
    /// the least median |ln(row / model)|, the first of equals.
    #[test]
    fn the_routing_skew_is_the_kernel_tables_argmin() {
        let t: toml::Table = KERNELS.parse().expect("kernels.toml parses");
        let rows: Vec<(f64, f64, f64, f64)> = t["routing"]
            .as_array()
            .expect("[[routing]]")
            .iter()
            .map(|r| {
                let f = |k: &str| r[k].as_float().or_else(|| r[k].as_integer().map(|i| i as f64)).expect("a number");
                (f("experts"), f("topk"), f("tokens"), f("touched_share"))
            })
            .collect();
        assert!(rows.len() >= 40, "{} [[routing]] rows", rows.len());
        let err = |s: f64| {
            median(rows.iter().map(|&(e, k, n, share)| (share / crate::predict::distinct_expert_fraction(e, k, n, s)).ln().abs()).collect())
        };
        let mut best = (0.0, f64::INFINITY);
        for i in 0..=28 {
            let s = (0.05 * i as f64 * 100.0).round() / 100.0;
            let e = err(s);
            if e < best.1 {
                best = (s, e);
            }
        }
        let skew = crate::predict::Engine::default().routing_skew;
        assert!((best.0 - skew).abs() < 1e-9, "kernel argmin {:.2} ({:.4}) against Engine::routing_skew {skew}", best.0, best.1);
        // The kernels rule out the strong skews: 0.85 (the fit set's argmin) misses by far more.
        assert!(err(0.85) > 2.0 * best.1, "0.85: {:.4} against {:.4}", err(0.85), best.1);
    }

    /// A fused-MoE table's key: (GPU, expert format, split).
    type MoeKey = (String, Dtype, MoeSplit);

    fn recompute_moe() -> Vec<(MoeKey, f64)> {
        let t: toml::Table = KERNELS.parse().expect("kernels.toml parses");
        let mut pts: Vec<(MoeKey, f64)> = Vec::new();
        // MXFP4: (bytes one rank reads, latency us) per key, for a line.
        let mut lines: Vec<(MoeKey, (f64, f64))> = Vec::new();
        for m in t["moe"].as_array().expect("[[moe]]") {
            if m["routing"].as_str() != Some("balanced") {
                continue;
            }
            let dt = match m["dtype"].as_str().expect("dtype") {
                "bfloat16" => Dtype::Bf16,
                "fp8_block" => Dtype::Fp8,
                "nvfp4" => Dtype::Nvfp4,
                "int4_wo" => Dtype::Int4,
                "w4a16_mxfp4" => Dtype::Mxfp4,
                other => panic!("an unexpected moe dtype {other}"),
            };
            let int = |k: &str| m[k].as_integer().expect(k) as f64;
            let (e, k) = (int("num_experts"), int("topk"));
            if dt == Dtype::Mxfp4 {
                let (tp, ep) = (int("moe_tp"), int("moe_ep"));
                let gpu = catalog_name(m["gpu"].as_str().expect("gpu")).to_string();
                let split = if ep > 1.0 { MoeSplit::Ep } else { MoeSplit::Tp };
                let expert_bytes = 3.0 * int("hidden_size") * int("inter_size") * dt.bytes() / tp;
                for (n, lat) in floats(&m["num_tokens"]).into_iter().zip(floats(&m["latency_us"])).filter(|(n, _)| n * k / e <= 8.0) {
                    // Balanced routing reads min(E, n k) experts, a rank of EP an ep-th of them.
                    let read = (e / ep).min(n * k / ep);
                    lines.push(((gpu.clone(), dt, split), (read * expert_bytes, lat)));
                }
                continue;
            }
            let rank_bytes = e * 3.0 * int("hidden_size") * int("inter_size") * dt.bytes() / 8.0;
            let gpu = catalog_name(m["gpu"].as_str().expect("gpu")).to_string();
            let split = if m["moe_ep"].as_integer() == Some(8) { MoeSplit::Ep } else { MoeSplit::Tp };
            let row: Vec<f64> = floats(&m["num_tokens"])
                .into_iter()
                .zip(floats(&m["latency_us"]))
                .filter(|(n, _)| (1.0..=8.0).contains(&(n * k / e)))
                .map(|(_, lat)| rank_bytes / (lat * 1e-6) / peak(&gpu))
                .collect();
            // A row past the peak does not read the bytes its shape implies: dropped whole.
            if row.iter().all(|eff| *eff <= 1.0) {
                pts.extend(row.into_iter().map(|eff| ((gpu.clone(), dt, split), eff)));
            }
        }
        let mut rates = medians(pts);
        for (key, xy) in grouped(lines) {
            let nf = xy.len() as f64;
            let (mx, my) = (xy.iter().map(|p| p.0).sum::<f64>() / nf, xy.iter().map(|p| p.1).sum::<f64>() / nf);
            let sxy: f64 = xy.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
            let sxx: f64 = xy.iter().map(|(x, _)| (x - mx).powi(2)).sum();
            // us per byte -> bytes per second, over the peak.
            let rate = 1.0 / (sxy / sxx) * 1e6 / peak(&key.0);
            rates.push((key, rate));
        }
        rates
    }

    /// The median of each key's points, keys in the order first seen.
    fn medians<K: PartialEq>(pts: Vec<(K, f64)>) -> Vec<(K, f64)> {
        grouped(pts).into_iter().map(|(key, v)| (key, median(v))).collect()
    }

    /// Each key's values, keys in the order first seen.
    fn grouped<K: PartialEq, V>(pts: Vec<(K, V)>) -> Vec<(K, Vec<V>)> {
        let mut out: Vec<(K, Vec<V>)> = Vec::new();
        for (k, v) in pts {
            match out.iter_mut().find(|(key, _)| *key == k) {
                Some((_, vs)) => vs.push(v),
                None => out.push((k, vec![v])),
            }
        }
        out
    }

    #[test]
    fn prefill_attention_interpolates_in_log_length_and_holds_its_end_columns() {
        let (gqa, mla) = (PREFILL_ATTENTION[0].1, PREFILL_ATTENTION[0].2);
        assert_eq!(PREFILL_ATTENTION[0].0, "h100-sxm");
        // At a column, its figure; halfway in log length between two, their mean.
        assert_eq!(prefill_attention_efficiency("h100-sxm", PrefillAttention::Gqa, 4096.0), gqa[4]);
        let mid = prefill_attention_efficiency("h100-sxm", PrefillAttention::Gqa, (4096.0f64 * 8192.0).sqrt());
        assert!((mid - (gqa[4] + gqa[5]) / 2.0).abs() < 1e-12, "{mid}");
        // Beyond the ends, the end columns.
        assert_eq!(prefill_attention_efficiency("h100-sxm", PrefillAttention::Mla, 16.0), mla[0]);
        assert_eq!(prefill_attention_efficiency("h100-sxm", PrefillAttention::Mla, 131072.0), mla[6]);
        // A GPU without tables takes the eight's median; the A100 40 GB has none either.
        assert_eq!(prefill_attention_efficiency("mi300x", PrefillAttention::Gqa, 1024.0), PREFILL_ATTENTION_OTHER.0[2]);
        for (i, other) in PREFILL_ATTENTION_OTHER.0.iter().enumerate() {
            let mut col: Vec<f64> = PREFILL_ATTENTION.iter().map(|r| r.1[i]).collect();
            col.sort_by(f64::total_cmp);
            assert!((median(col) - other).abs() < 5e-4, "column {i}");
        }
        // Every rate is a share of the peak, and grows with the prompt.
        for (gpu, g, m) in PREFILL_ATTENTION {
            for row in [g, m] {
                assert!(row.iter().all(|e| *e > 0.0 && *e <= 1.0), "{gpu}: {row:?}");
                assert!(row.windows(2).all(|w| w[1] >= w[0] - 0.01), "{gpu}: {row:?}");
            }
        }
    }

    #[test]
    fn the_decode_tables_are_the_kernel_files_medians() {
        let dense = recompute_dense();
        assert_eq!(DENSE_DECODE.len(), dense.len(), "dense: {dense:?}");
        for ((gpu, dt), eff) in dense {
            let have = dense_decode_table(&gpu, dt).unwrap_or_else(|| panic!("dense: no entry for {gpu} {}", dt.name()));
            assert!((have - eff).abs() < 5e-4, "dense {gpu} {}: table {have} vs kernels.toml {eff:.4}", dt.name());
        }
        let moe = recompute_moe();
        assert_eq!(MOE_DECODE.len(), moe.len(), "moe: {moe:?}");
        for ((gpu, dt, split), eff) in moe {
            let have = moe_decode_efficiency(&gpu, dt, split).unwrap_or_else(|| panic!("moe: no entry for {gpu} {} {split:?}", dt.name()));
            assert!((have - eff).abs() < 5e-4, "moe {gpu} {} {split:?}: table {have} vs kernels.toml {eff:.4}", dt.name());
        }
    }

    #[test]
    fn the_mla_decode_table_is_the_kernel_files_marginal_rates() {
        let t: toml::Table = KERNELS.parse().expect("kernels.toml parses");
        let mut pts: Vec<((String, bool, u32), f64)> = Vec::new();
        for r in t["decode_attention"].as_array().expect("[[decode_attention]]") {
            if r["kind"].as_str() != Some("mla") || r["batch"].as_integer().unwrap_or(0) < 32 {
                continue;
            }
            let fp8 = r["kv_cache_dtype"].as_str() == Some("fp8");
            let (ctx, lat) = (floats(&r["context_tokens"]), floats(&r["latency_us"]));
            // The two longest contexts, each at the median of its repeated measurements.
            let mut cs = ctx.clone();
            cs.sort_by(f64::total_cmp);
            cs.dedup();
            let at = |c: f64| median(ctx.iter().zip(&lat).filter(|(x, _)| **x == c).map(|(_, l)| *l).collect());
            let (c1, c2) = (cs[cs.len() - 2], cs[cs.len() - 1]);
            let batch = r["batch"].as_integer().expect("batch") as f64;
            let bytes = batch * (c2 - c1) * 576.0 * if fp8 { 1.0 } else { 2.0 };
            let gpu = catalog_name(r["gpu"].as_str().expect("gpu")).to_string();
            let heads = r["num_heads"].as_integer().expect("num_heads") as u32;
            pts.push(((gpu.clone(), fp8, heads), bytes / ((at(c2) - at(c1)) * 1e-6) / peak(&gpu)));
        }
        let got = medians(pts);
        assert_eq!(MLA_DECODE.len(), got.len(), "{got:?}");
        for ((gpu, fp8, heads), eff) in got {
            let have = MLA_DECODE.iter().find(|(g, f, h, _)| *g == gpu && *f == fp8 && *h == heads).map(|r| r.3);
            let have = have.unwrap_or_else(|| panic!("no MLA entry for {gpu} fp8={fp8} heads={heads}"));
            assert!((have - eff).abs() < 5e-4, "MLA {gpu} fp8={fp8} {heads} heads: table {have} vs kernels.toml {eff:.4}");
        }
    }

    #[test]
    fn mla_decode_interpolates_in_log_heads_and_leaves_hopper_fp8_to_the_engine() {
        assert_eq!(mla_decode_efficiency("b200", false, 8.0), Some(0.733));
        assert_eq!(mla_decode_efficiency("b200", false, 4.0), Some(0.733), "held below 8 heads");
        assert_eq!(mla_decode_efficiency("b200", false, 256.0), Some(0.579), "held above 128 heads");
        // 32 heads is halfway between 8 and 128 in log(heads).
        let mid = mla_decode_efficiency("b200", false, 32.0).expect("a table");
        assert!((mid - (0.733 + 0.579) / 2.0).abs() < 1e-12, "{mid}");
        assert_eq!(mla_decode_efficiency("h200", true, 16.0), None, "sglang's FA3 FP8 path is not every engine's");
        assert!(mla_decode_efficiency("h200", false, 16.0).is_some());
        assert_eq!(mla_decode_efficiency("mi300x", false, 16.0), None);
        assert_eq!(mla_decode_efficiency("gb300", false, 16.0), None);
    }

    #[test]
    fn a_gpu_or_format_without_a_table_has_no_rate() {
        assert_eq!(dense_decode_efficiency("mi300x", Dtype::Bf16, 5300.0, 5.0), None);
        assert_eq!(moe_decode_efficiency("mi355x", Dtype::Mxfp4, MoeSplit::Ep), None);
        assert_eq!(moe_decode_efficiency("a100", Dtype::Mxfp4, MoeSplit::Tp), None);
        assert_eq!(dense_decode_table("h200", Dtype::Fp8), Some(0.612));
        // The A100 40 GB runs the 80 GB's kernels.
        assert_eq!(dense_decode_table("a100-40gb", Dtype::Bf16), dense_decode_table("a100", Dtype::Bf16));
        assert!(moe_decode_efficiency("h200", Dtype::Bf16, MoeSplit::Tp) > moe_decode_efficiency("h200", Dtype::Bf16, MoeSplit::Ep));
    }

    /// The GeForce RTX 5090 and both RTX PRO 6000 editions are one GB202 die: the 5090 reads the
    /// Server Edition's dense, fused-MoE and prefill attention rates as shares of its own peaks.
    #[test]
    fn the_rtx_5090_reads_the_rtx_pro_6000_server_editions_tables() {
        for dt in [Dtype::Bf16, Dtype::Fp8, Dtype::Nvfp4] {
            let se = dense_decode_table("rtx-pro-6000-se", dt);
            assert!(se.is_some(), "{dt:?}");
            assert_eq!(dense_decode_table("rtx-5090", dt), se, "{dt:?}");
        }
        for split in [MoeSplit::Tp, MoeSplit::Ep] {
            let se = moe_decode_efficiency("rtx-pro-6000-se", Dtype::Nvfp4, split);
            assert!(se.is_some(), "{split:?}");
            assert_eq!(moe_decode_efficiency("rtx-5090", Dtype::Nvfp4, split), se);
        }
        assert_eq!(
            prefill_attention_efficiency("rtx-5090", PrefillAttention::Gqa, 4096.0),
            prefill_attention_efficiency("rtx-pro-6000-se", PrefillAttention::Gqa, 4096.0)
        );
        // The RTX 4090 shares the L40S's AD102 but not its memory generation (GDDR6X against GDDR6):
        // it reads no table.
        assert_eq!(dense_decode_table("rtx-4090", Dtype::Fp8), None);
    }

    #[test]
    fn the_dense_rate_nets_out_the_floor_the_step_counts_per_kernel() {
        // H200 FP8: 67.1 MB at 0.612 of 4,800 GB/s is 22.8 us, of which 5 us is the floor.
        let whole = dense_decode_efficiency("h200", Dtype::Fp8, 4800.0, 0.0).expect("a table");
        assert!((whole - 0.612).abs() < 1e-12);
        let net = dense_decode_efficiency("h200", Dtype::Fp8, 4800.0, 5.0).expect("a table");
        let latency_us = 8192.0 * 8192.0 / (0.612 * 4800.0 * 1e3);
        assert!((net - 0.612 * latency_us / (latency_us - 5.0)).abs() < 1e-9, "{net}");
        assert_eq!(dense_decode_efficiency("h200", Dtype::Fp8, 4800.0, 1e6), Some(1.0), "a floor past the latency leaves the peak");
    }
}
