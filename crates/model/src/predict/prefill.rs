//! Per-step overhead and prefill.
//!
//! The overhead outside the modelled kernels has three parts: a fixed part per step
//! ([`super::Engine::step_overhead_ms`]), a floor per kernel the step runs (the kernels are
//! counted from the layers as sglang and vLLM build them: [`Scenario::kernels_per_step`]) with
//! CUDA graphs, plus each kernel's launch without them, and a cost per running request
//! ([`super::Engine::request_step_us`]). A step carrying prompt tokens that the engine runs
//! eagerly while decode replays graphs pays the launches too ([`Scenario::eager_prefill_ms`]).
//!
//! Prefill ([`Scenario::prefill_ms`]) runs as a pass of its own, which streams the weights once
//! and pays its own all-reduces, or beside a decode step that reads the weights anyway
//! ([`PrefillPass`]). Its compute runs at the kernel tables' prefill rates:
//! [`prefill_gemm_efficiency`] for dense GEMMs by format, [`PREFILL_MOE_EFFICIENCY`] for fused
//! MoE, and the prefill-attention rates of `crate::kernels`.

use super::collectives::QK_NORM_BYTES_PER_TOKEN;
use super::Scenario;
use crate::kernels::{prefill_attention_efficiency, PrefillAttention};
use crate::quant::{ComputeFormat, Dtype};
use crate::spec::Attention;

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

impl Scenario {
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
            floor + self.launches_ms()
        }
    }

    /// Each kernel of one step launched from the host ([`Engine::launch_us`](super::Engine::launch_us)
    /// x [`Self::kernels_per_step`]): what a step run without a CUDA graph pays, ms.
    pub fn launches_ms(&self) -> f64 {
        self.engine.launch_us * self.kernels_per_step() / 1e3
    }

    /// The overhead of a decode step of `b` running requests: [`Self::overhead_ms`] plus each
    /// request's [`Engine::request_step_us`](super::Engine::request_step_us), plus the launches
    /// of a batch above the largest captured CUDA graph ([`Self::eager_decode_ms`]), ms.
    pub fn decode_overhead_ms(&self, b: f64) -> f64 {
        self.scaled_overhead_ms() + (self.engine.request_step_us * b / 1e3 + self.eager_decode_ms(b)) * self.engine.release_step_scale
    }

    /// [`Self::overhead_ms`] at the release's step scale ([`Engine::release_step_scale`](super::Engine::release_step_scale)),
    /// but for a stated `--step-overhead-ms`: that is the user's measurement of their engine's
    /// per-step cost, not a figure of today's releases, so it is not scaled again, ms.
    pub fn scaled_overhead_ms(&self) -> f64 {
        let stated = self.engine.step_overhead_ms;
        stated + (self.overhead_ms() - stated) * self.engine.release_step_scale
    }

    /// What a step carrying prompt tokens adds when the engine runs it without CUDA graphs while
    /// decode has them ([`Engine::prefill_graphs`](super::Engine::prefill_graphs)): each kernel's launch, ms (0 when decode runs
    /// eagerly too: [`Self::overhead_ms`] already counts the launches).
    pub fn eager_prefill_ms(&self) -> f64 {
        let e = &self.engine;
        if e.cuda_graphs && !e.prefill_graphs {
            self.launches_ms() * e.release_step_scale
        } else {
            0.0
        }
    }

    /// [`Self::eager_prefill_ms`] for a step carrying prompt tokens in `pass`: nothing when the
    /// tokens ride (`PrefillPass::Beside`, the replica's whole decode batch, as
    /// [`Self::eager_decode_ms`] takes it) in a decode step that already runs eagerly for being
    /// above the largest captured graph: a step launches its kernels once, ms.
    pub fn eager_prefill_ms_in(&self, pass: PrefillPass) -> f64 {
        match pass {
            PrefillPass::Beside(b) if self.eager_decode_ms(b) > 0.0 => 0.0,
            _ => self.eager_prefill_ms(),
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
    /// - Linear attention ([`crate::spec::LinearAttention::kernels`]): Gated DeltaNet's input
    ///   norm, two input GEMMs, causal conv, gating, the recurrent update, gated norm, output GEMM:
    ///   8; Mamba-2's input norm, input GEMM, causal conv, state update, gated norm, output GEMM: 6;
    ///   KDA's input norm, q, k and v GEMMs, the two gates' four GEMMs and beta's, three convs,
    ///   the decay gate, the recurrent update, gated norm, output GEMM: 16.
    /// - Dense FFN: post-attention norm, gate/up GEMM, activation, down GEMM: 4.
    /// - MoE FFN: norm, router GEMM, top-k, token sort, the two grouped GEMMs, activation and
    ///   the weighted combine: 8; a shared expert adds its gate/up, activation and down: 3.
    /// - Collectives: one all-reduce per mixer and per FFN under TP, two per layer of attention
    ///   then FFN ([`crate::spec::ModelSpec::tp_reductions`]; a DP-attention MoE layer's
    ///   dispatch and combine instead); once per pass the vocab-parallel embedding's all-reduce
    ///   (not under DP attention) and the LM head's logits all-gather
    ///   ([`Scenario::logits_gather_us`]).
    /// - A q/k norm over all heads (MiniMax-M2) under TP: its own all-reduce and the norm's
    ///   second half, in each full-attention layer: 2. A q/k norm over the whole projections (OLMo
    ///   2/3, OLMoE) under TP: the q and the k all-gathers, in each attention layer: 2.
    /// - Per step: embedding, final norm, LM head, sampling: 4.
    pub fn kernels_per_step(&self) -> f64 {
        let m = &self.model;
        let c = m.layer_counts;
        let mla = matches!(m.attention, Attention::Mla { .. });
        let full = if mla { 10.0 + 8.0 * m.indexer_share() } else { 5.0 };
        let linear = m.linear.map_or(0.0, |la| la.kernels());
        let attention = c.full as f64 * full + c.sliding as f64 * 5.0 + c.linear as f64 * linear;
        let moe = m.moe.map_or(0.0, |mo| 8.0 + if mo.shared_experts > 0 { 3.0 } else { 0.0 });
        let ffn = m.dense_layers as f64 * 4.0 + m.moe_layers() as f64 * moe;
        // And once per pass the embedding's all-reduce and the LM head's logits all-gather, where
        // the engine runs them (`Scenario::embedding_allreduce`, `Scenario::logits_gathered`).
        let layers = if self.plan.tp > 1 || self.plan.dp_attention { m.tp_reductions() as f64 } else { 0.0 };
        let collectives = layers + f64::from(u8::from(self.embedding_allreduce())) + f64::from(u8::from(self.logits_gathered()));
        // A q/k norm over all heads splits around its own all-reduce: that collective and the
        // norm's second half, in each full-attention layer.
        let qk_norm = if self.qk_norm_allreduce() { 2.0 * c.full as f64 } else { 0.0 };
        // A q/k norm over the whole projections gathers q and k in each attention layer.
        let qk_gathers = if self.qk_norm_gather() { 2.0 * m.kv_layers() as f64 } else { 0.0 };
        attention + ffn + collectives + qk_norm + qk_gathers + 4.0
    }

    /// All-reduces of a prompt pass's activations under TP: each mixer's and each FFN's output,
    /// and the vocab-parallel embedding's where the engine runs it
    /// ([`Scenario::embedding_allreduce`](super::Scenario)). The LM head's logits all-gather
    /// covers the sampled tokens only, one per prompt ([`Self::prefill_ms`]).
    fn prefill_allreduces(&self) -> f64 {
        self.model.tp_reductions() as f64 + f64::from(u8::from(self.embedding_allreduce()))
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
            // A latent MoE's projections run whole on every TP rank.
            + dense(p.latent_projections * tp, q.shared_experts)
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
        let span_layers = c.full as f64 * span * m.full_head_dim_ratio() + c.sliding as f64 * window;
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
        // The LM head samples one token per prompt: its logits all-gather covers those.
        let sampled = (tokens / prompt_len.max(1.0)).max(1.0);
        let comm_us = match pass {
            _ if self.plan.tp <= 1 => 0.0,
            PrefillPass::Standalone => {
                let qk_norm =
                    if self.qk_norm_allreduce() { c.full as f64 * self.tp_allreduce(tokens * QK_NORM_BYTES_PER_TOKEN).us } else { 0.0 };
                self.prefill_allreduces() * self.tp_allreduce(bytes).us
                    + qk_norm
                    + self.qk_gather_us(tokens) * self.plan.pp as f64
                    + self.logits_gather_us(sampled)
            }
            // Riding in a decode step's all-reduces: only the extra bytes cost time, as the
            // all-reduce model prices them (its algorithm and protocol for the larger message)
            // beyond the decode tokens' own message (at least one token's).
            PrefillPass::Beside(d) => {
                let decode = d.max(1.0) * m.hidden as f64 * 2.0;
                self.prefill_allreduces() * (self.tp_allreduce(bytes + decode).us - self.tp_allreduce(decode).us).max(0.0)
                    + (self.qk_gather_us(tokens + d.max(1.0)) - self.qk_gather_us(d.max(1.0))) * self.plan.pp as f64
                    + (self.logits_gather_us(sampled + d.max(1.0)) - self.logits_gather_us(d.max(1.0))).max(0.0)
            }
        };
        // A measured all-reduce is the box's own figure: the release's scale leaves it alone.
        let measured = self.plan.tp > 1 && matches!(self.tp_allreduce(bytes).method, crate::comm::Method::Measured { .. });
        let comm_scale = if measured { 1.0 } else { e.release_step_scale };
        (gemm_s.max(read_s) + attn_s) * 1e3 * e.release_step_scale + comm_us * 1e-3 * e.comm_scale * comm_scale
    }
}
