//! Where each fitted constant of the model came from.

use super::*;
use crate::predict::VLLM_GPU_MEMORY_UTILIZATION;

/// Where the fitted constants came from (the engine defaults in `predict::Engine`).
pub fn constants() -> Vec<ConstantOrigin> {
    let mut out = step_constants();
    out.extend(comm_prefill_and_serving_constants());
    out
}

/// The step's fitted and kernel-table constants.
fn step_constants() -> Vec<ConstantOrigin> {
    let e = Engine::default();
    let fit = "fit: every scored fit case of today's releases (the steady-state fit median absolute error, each source weighing the square root of its rows since 2026-12-06's step 31 (chosen by leave-sources-out cross-validation on the fit set, validate::crossval; each source the same before), at a local minimum of a 0.1 us x 0.05 x 2.5 us grid: validate::tests::joint_refit_on_the_fit_set, 2026-12-05; the per-kernel floor again on 2026-12-06 after the engines' KV-cache default, and with the per-request cost on the third dated extension of 2026-12-06, under the square-root weighting, on the fourth dated extension and with the router's skew, step 34; under the kernel-derived skew, step 35; with the MXFP4 kernel rates, step 37)";
    vec![
        ConstantOrigin { name: "kernel_overhead_us (per kernel per step)", value: e.kernel_overhead_us, set_from: fit },
        ConstantOrigin {
            name: "moe_efficiency (GPUs and formats without a kernels.toml MoE rate)",
            value: e.moe_efficiency,
            set_from: fit,
        },
        ConstantOrigin {
            name: "request_step_us (per request running in a decode step)",
            value: e.request_step_us,
            set_from: "fit: every scored fit case of today's releases, with kernel_overhead_us and moe_efficiency (the same objective and descent, on a 2.5 us grid)",
        },
        ConstantOrigin {
            name: "EARLY_RELEASE_STEP_SCALE (step time of sglang < 0.4.8, vLLM < 0.9.2, TensorRT-LLM < 1.0 over the model's)",
            value: crate::predict::EARLY_RELEASE_STEP_SCALE,
            set_from: "calibration: the fit set's early-release rows (dstack DeepSeek-R1 on 8 H200 / 8 MI300X, Qwen docs on H20; argmin of their source-weighted median absolute error on a 0.05 grid)",
        },
        ConstantOrigin {
            name: "cdna3_floor_scale (the per-kernel floor on MI300X / MI325X over kernel_overhead_us)",
            value: e.cdna3_floor_scale,
            set_from: "fit: the fit set's CDNA 3 rows of today's releases (InferenceX issue 890 and PR 3318, MI325X; argmin of their median absolute error on a 0.1 grid at the fitted floor)",
        },
        ConstantOrigin {
            name: "hbm_efficiency (KV and weight reads without a kernels.toml rate)",
            value: e.hbm_efficiency,
            set_from: "assumption (typical decode GEMV); no e2e case",
        },
        ConstantOrigin {
            name: "kernels::DENSE_DECODE (per GPU and format, before netting the kernel floor)",
            value: crate::kernels::dense_decode_table("h200", crate::quant::Dtype::Fp8).unwrap_or(0.0),
            set_from: "kernels.toml [[gemm]] N=K=8192, M <= 64, median achieved bandwidth (19 entries; h200 fp8 shown); no e2e case",
        },
        ConstantOrigin {
            name: "kernels::MOE_DECODE (per GPU, expert format and split)",
            value: crate::kernels::moe_decode_efficiency("h200", crate::quant::Dtype::Fp8, crate::kernels::MoeSplit::Ep).unwrap_or(0.0),
            set_from:
                "kernels.toml [[moe]] balanced, 1-8 tokens per expert, median achieved bandwidth; MXFP4 (step 37): the slope of latency against bytes read, up to 8 tokens per expert (76 entries; h200 fp8 EP shown); no e2e case",
        },
        ConstantOrigin {
            name: "gemm_efficiency (decode steps only)",
            value: e.gemm_efficiency,
            set_from: "a torch BF16 GEMM on the reference RTX PRO 6000 (team measurement); no e2e case",
        },
    ]
}

/// The communication, prefill and serving-path constants.
fn comm_prefill_and_serving_constants() -> Vec<ConstantOrigin> {
    let e = Engine::default();
    vec![
        ConstantOrigin {
            name: "comm::SHM_HOP_SHARE",
            value: crate::comm::SHM_HOP_SHARE,
            set_from: "fit: argmin of the fit set's P2P/no-P2P pairs' median gain error on a 0.01 grid (one runnable pair, rtx6kpro-kimik25-ctx0k, decode-only, so not scored here); 0.32 before 2026-12-05, chosen by hand from the same pair; 0.24 until the refit of the second 2026-12-05 sitting; 0.26 until the refit on the third dated extension of 2026-12-06; 0.25 until the router's skew of step 34; 0.28 until step 35 set that skew from kernel data; 0.25 until step 37's MXFP4 kernel rates and their refit",
        },
        ConstantOrigin {
            name: "comm::RING_SIMPLE_EFFICIENCY",
            value: crate::comm::RING_SIMPLE_EFFICIENCY,
            set_from: "comm.toml [[nccl_tests]] h100-sxm (nccl-tests issue 212: ring 370 of 450 GB/s)",
        },
        ConstantOrigin {
            name: "comm::NVLS_LATENCY_US",
            value: crate::comm::NVLS_LATENCY_US,
            set_from: "comm.toml [nccl_tuning] hw_latency_us_nvlink_nvls_simple (NCCL 2.30.7 tuning.cc); no e2e case",
        },
        ConstantOrigin {
            name: "predict::prefill_gemm_efficiency (bf16 / fp8 / fp4)",
            value: crate::predict::prefill_gemm_efficiency(crate::quant::ComputeFormat::Fp8),
            set_from: "kernels.toml [[gemm]] medians at M >= 2048 (0.728 / 0.523 / 0.434; fp8 shown); no e2e case",
        },
        ConstantOrigin {
            name: "kernels::PREFILL_ATTENTION (per GPU, MHA/GQA or MLA, over prompt length)",
            value: crate::kernels::prefill_attention_efficiency("h200", crate::kernels::PrefillAttention::Gqa, 4096.0),
            set_from: "AIConfigurator sglang 0.5.14 context-attention tables, median achieved share of BF16 peak per length (scripts/context-attention-rates; h200 GQA at 4096 shown); no e2e case",
        },
        ConstantOrigin {
            name: "predict::PREFILL_MOE_EFFICIENCY",
            value: crate::predict::PREFILL_MOE_EFFICIENCY,
            set_from: "kernels.toml [[moe]] median, balanced routing, >= 4096 tokens; no e2e case",
        },
        ConstantOrigin {
            name: "predict::hopper_fp8_kv_efficiency (h100-sxm / h200)",
            value: crate::predict::hopper_fp8_kv_efficiency("h200").unwrap_or(0.0),
            set_from: "kernels.toml [[decode_attention]] FA3 fp8 slopes at batch 32 and 256 (0.665 / 0.535; h200 shown); no e2e case",
        },
        ConstantOrigin {
            name: "kernels::MLA_DECODE (per GPU, cache format, 8 or 128 heads per rank)",
            value: crate::kernels::mla_decode_efficiency("b200", false, 16.0).unwrap_or(0.0),
            set_from: "kernels.toml [[decode_attention]] MLA marginal latent-read rates at batch 32 and 128, log-interpolated in heads (b200 BF16 at 16 heads shown); no e2e case",
        },
        ConstantOrigin {
            name: "request_latency_ms (sglang / vLLM / TensorRT-LLM)",
            value: crate::predict::SGLANG_REQUEST_LATENCY_MS,
            set_from: "fit: median TTFT gap of each engine's fit cases at c <= 8, virtual run (218.9 / 18.5 / 77.0 ms; sglang shown; early releases left out; sglang's 224.1 until step 40)",
        },
        ConstantOrigin {
            name: "launch_us (each kernel's launch in a step run without CUDA graphs)",
            value: e.launch_us,
            set_from: "assumption (CUDA launch ~4 us; the fit set cannot tell 1 from 12 us); TensorRT-LLM context/mixed steps and sglang < 0.5.10 prefill passes pay it (engine docs); no e2e case",
        },
        ConstantOrigin {
            name: "routing_skew (Zipf exponent of the router's expert popularity; 0 = uniform)",
            value: e.routing_skew,
            set_from: "kernel data: AIConfigurator's fused-MoE timings under its power-law routing (alpha 1.01) against balanced routing, sglang 0.5.14 and vLLM 0.24.0 on H100/H200/B200/B300, the Zipf exponent closest to the experts they effectively read (kernels.toml [[routing]], scripts/routing-skew-from-kernels; kernels::tests recomputes it); no e2e case",
        },
        ConstantOrigin {
            name: "ep_imbalance (busiest EP rank's distinct experts over the mean)",
            value: e.ep_imbalance,
            set_from: "fit: every scored fit case, argmin of the same objective over 1.0..1.3 by 0.05 with the floor, MoE efficiency and per-request cost re-chosen at each",
        },
        ConstantOrigin {
            name: "mem_fraction (TensorRT-LLM cases; sglang's is its own rule by release, GPU and TP: docs/plan.md)",
            value: crate::predict::TRTLLM_MEM_FRACTION,
            set_from: "assumption (sglang's classic --mem-fraction-static); no e2e case",
        },
        ConstantOrigin {
            name: "mem_fraction (vLLM cases)",
            value: VLLM_GPU_MEMORY_UTILIZATION,
            set_from: "vLLM's --gpu-memory-utilization default; no e2e case",
        },
    ]
}
