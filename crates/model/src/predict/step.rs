//! The decode step's terms, and a step turned into the figures of one concurrency.
//!
//! One pipeline stage's step for a micro-batch of x requests ([`Scenario::stage`]) is the sum of
//! its terms by the overlap rule ([`super::Overlap`]):
//!
//! - weights: the bytes one GPU reads ([`WeightRead`]): attention, dense FFN, shared experts,
//!   router and LM head, plus the distinct routed experts the batch touches (busiest EP rank with
//!   EP), each part at its streaming rate: the kernel tables' dense GEMM and fused-MoE rates where
//!   kernels.toml has them, else the engine's figures ([`super::Engine::hbm_efficiency`],
//!   [`super::Engine::moe_efficiency`]), times `--calibrate`'s streaming scale;
//! - KV: the context each request reads (see `memory` for the bytes), at the decode-attention
//!   rate the tables give (FP8 GQA on Hopper: [`hopper_fp8_kv_efficiency`]) or the engine's;
//!   linear-attention state read and written once per step;
//! - compute: 2 x active parameters x tokens at the GEMM format's TFLOPS, and attention's FLOPs;
//! - communication (`collectives`), overhead and the prefill share (`prefill`).
//!
//! [`Scenario::decode_step_ms`] gives the whole step over the stages; [`Scenario::point`] runs
//! the memory fit, the step at the running batch and the prefill, and returns throughput, TPOT,
//! TTFT and the bottleneck at one concurrency.

use super::{Overlap, Point, PrefillPass, Scenario, StepDetail, StepMs};
use crate::quant::{Dtype, KvDtype};
use crate::spec::Attention;

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

/// Weight bytes one GPU reads per stage step.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct WeightRead {
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

impl Scenario {
    /// One pipeline stage's decode step for a micro-batch of `x` requests on one replica.
    pub(super) fn stage(&self, x: f64, mean_ctx: f64) -> (StepMs, StepDetail) {
        let bw = self.gpu.mem_bw_gbs * 1e9;
        let w = self.weight_read(x);
        let kv_b = self.kv_read(x, mean_ctx);
        let comm = self.communication(x);
        // An early release's steps take longer by its fitted scale (1 for today's releases).
        let k = self.engine.release_step_scale;
        let step = StepMs {
            weights: w.stream_bytes / bw * 1e3 * k,
            kv: kv_b / (bw * self.kv_read_efficiency()) * 1e3 * k,
            compute: self.compute_ms(x, mean_ctx) * k,
            // A measured all-reduce is the box's own figure: the release's scale leaves it alone.
            communication: (comm.ms - comm.measured_ms) * k + comm.measured_ms,
            ..Default::default()
        };
        let detail = StepDetail {
            allreduces: comm.allreduces,
            allreduce_us: comm.allreduce_us,
            qk_norm_allreduces: comm.qk_norm_allreduces,
            qk_norm_allreduce_us: comm.qk_norm_allreduce_us,
            qk_gathers: comm.qk_gathers,
            qk_gather_us: comm.qk_gather_us,
            logits_gather_us: comm.logits_gather_us,
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
    pub(super) fn kv_read_efficiency(&self) -> f64 {
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
        self.scaled(self.expert_table_rate().unwrap_or(self.engine.moe_efficiency))
    }

    /// The kernel tables' fused-MoE rate for this GPU, the experts' format and split, unless the
    /// engine reads no table.
    fn expert_table_rate(&self) -> Option<f64> {
        let split = if self.plan.ep > 1 { crate::kernels::MoeSplit::Ep } else { crate::kernels::MoeSplit::Tp };
        self.engine.moe_table.then(|| crate::kernels::moe_decode_efficiency(&self.gpu.name, self.quant.experts, split)).flatten()
    }

    /// Whether [`Self::expert_stream_efficiency`] is a kernel's marginal rate (its fixed part counted
    /// in the per-kernel floors) rather than an achieved share: MXFP4 experts read at the kernel
    /// tables' slope ([`crate::kernels`], step 37).
    pub fn expert_rate_is_marginal(&self) -> bool {
        self.quant.experts == Dtype::Mxfp4 && self.expert_table_rate().is_some()
    }

    /// Share of layers with experts.
    pub(super) fn frac_moe(&self) -> f64 {
        self.model.moe_layers() as f64 / self.model.layers as f64
    }

    /// Share of layers with a dense FFN.
    pub(super) fn frac_dense(&self) -> f64 {
        self.model.dense_layers as f64 / self.model.layers as f64
    }

    /// TP ranks attention weights are split over (1 with DP attention).
    pub(super) fn attn_split(&self) -> f64 {
        if self.plan.dp_attention {
            1.0
        } else {
            self.plan.tp as f64
        }
    }

    /// Weight bytes one GPU reads per stage step for a micro-batch of `x`.
    pub(super) fn weight_read(&self, x: f64) -> WeightRead {
        let m = &self.model;
        let p = m.params();
        let q = &self.quant;
        let tp = self.plan.tp as f64;
        let ls = self.layers_per_stage();
        let moe_layers_stage = self.frac_moe() * ls;
        let attn_b = p.attention / m.layers as f64 * ls * q.attention.bytes() / self.attn_split();
        let dense_b = if m.dense_layers > 0 {
            p.dense_ffn / m.dense_layers as f64 * (self.frac_dense() * ls) * q.dense_ffn.bytes() / tp
        } else {
            0.0
        };
        let shared_b = if m.moe_layers() > 0 {
            (p.shared_experts + p.router) / m.moe_layers() as f64 * moe_layers_stage * q.shared_experts.bytes() / tp
        } else {
            0.0
        };
        // A latent MoE's projections: whole on every TP rank.
        let latent_b = if m.moe_layers() > 0 {
            p.latent_projections / m.moe_layers() as f64 * moe_layers_stage * q.shared_experts.bytes()
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
                let share = super::engine::distinct_expert_fraction(ee, k, x, self.engine.routing_skew);
                distinct = (per_rank * share * self.engine.ep_imbalance).min(per_rank);
                // Experts live whole on their EP rank; ranks in a TP group beyond EP split them.
                experts = distinct * expert_bytes * moe_layers_stage / (tp / self.plan.ep as f64);
            } else {
                distinct = ee * super::engine::distinct_expert_fraction(ee, k, x, self.engine.routing_skew);
                experts = distinct * expert_bytes * moe_layers_stage / tp;
            }
        }
        let eff = |dt: Dtype| self.dense_stream_efficiency(dt);
        let stream_bytes = attn_b / eff(q.attention)
            + dense_b / eff(q.dense_ffn)
            + (shared_b + latent_b) / eff(q.shared_experts)
            + lm_b / eff(q.embeddings)
            + if experts > 0.0 { experts / self.expert_stream_efficiency() } else { 0.0 };
        WeightRead { dense: attn_b + dense_b + shared_b + latent_b + lm_b, experts, distinct, stream_bytes }
    }

    /// KV-cache bytes one GPU reads per stage step for a micro-batch of `x` at `mean_ctx`, plus the
    /// linear-attention state each request's step reads and writes back.
    pub(super) fn kv_read(&self, x: f64, mean_ctx: f64) -> f64 {
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
    pub(super) fn linear_flops_per_token(&self) -> f64 {
        let Some(la) = self.model.linear else { return 0.0 };
        let layers = self.model.layer_counts.linear as f64 / self.plan.pp as f64;
        let per_layer = 6.0 * la.value_heads as f64 * la.key_head_dim as f64 * la.value_head_dim as f64;
        per_layer * layers / la.tp_split(self.plan.tp)
    }

    /// GEMM and attention time on one GPU per stage step, ms.
    pub(super) fn compute_ms(&self, x: f64, mean_ctx: f64) -> f64 {
        let m = &self.model;
        let p = m.params();
        let q = &self.quant;
        let g = &self.gpu;
        let tp = self.plan.tp as f64;
        let ls = self.layers_per_stage();
        let moe_layers_stage = self.frac_moe() * ls;
        let eff = self.engine.gemm_efficiency * 1e12;
        let gemm = |params: f64, dt: Dtype, split: f64| 2.0 * params * x / split / (g.tflops(dt.compute()) * eff);
        let dense_params = if m.dense_layers > 0 { p.dense_ffn / m.dense_layers as f64 * self.frac_dense() * ls } else { 0.0 };
        let shared_params = if m.moe_layers() > 0 { (p.shared_experts + p.router) / m.moe_layers() as f64 * moe_layers_stage } else { 0.0 };
        let latent_params = if m.moe_layers() > 0 { p.latent_projections / m.moe_layers() as f64 * moe_layers_stage } else { 0.0 };
        let gemm_s = gemm(p.attention / m.layers as f64 * ls, q.attention, self.attn_split())
            + gemm(dense_params, q.dense_ffn, tp)
            + gemm(shared_params, q.shared_experts, tp)
            + gemm(latent_params, q.shared_experts, 1.0)
            + gemm(m.moe.map_or(0.0, |mo| p.per_expert * mo.top_k as f64) * moe_layers_stage, q.experts, tp)
            + gemm(p.lm_head / self.plan.pp as f64, q.embeddings, tp);
        // Attention scores and values: MLA absorbed, 2*heads*ctx*(2*kv_lora + rope) per token and
        // full-attention layer (every layer but Kimi Linear's KDA ones).
        let attn_flops = match m.attention {
            Attention::Mla { heads, kv_lora_rank, qk_rope_head_dim, .. } => {
                let c = m.dsa.map_or(mean_ctx, |d| mean_ctx.min(d.topk as f64));
                let idx = m.dsa.map_or(0.0, |d| 2.0 * d.index_heads as f64 * d.index_head_dim as f64 * mean_ctx) * m.indexer_share();
                let (full, _) = self.kv_layers_per_stage();
                (2.0 * heads as f64 / self.attn_split() * c * (2.0 * kv_lora_rank as f64 + qk_rope_head_dim as f64) + idx) * x * full
            }
            Attention::Gqa { heads, head_dim, .. } => 4.0 * heads as f64 / tp * head_dim as f64 * self.attention_token_layers(mean_ctx) * x,
        } + self.linear_flops_per_token() * x;
        (gemm_s + attn_flops / (g.bf16_tflops * eff)) * 1e3
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
        // Prompt tokens riding in a decode step that runs eagerly already (above the largest
        // graph) add no second set of launches.
        let pass = if self.engine.mixed_prefill { PrefillPass::Beside(b) } else { PrefillPass::Standalone };
        let prefill = prefill + n.min(1.0) * self.eager_prefill_ms_in(pass);
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
}
