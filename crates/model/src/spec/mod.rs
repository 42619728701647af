//! Model architectures: reading a Hugging Face `config.json` (the catalog's entries are the
//! published files under `crates/model/data/models/`, read by the same parser as `--model-config`),
//! validating them, and parameter counts computed from the architecture.
//!
//! Layers are full attention, sliding-window attention (gpt-oss, Mistral) or linear attention
//! (Gated DeltaNet: Qwen3-Next, Qwen3.5; Mamba-2: Nemotron-H, Granite 4.0; KDA: Kimi Linear), read
//! from `layer_types` (Nemotron-H: its block list; Kimi Linear: `linear_attn_config`'s lists) or
//! the config class's documented default. A field the parser does not understand for the `model_type` is refused by name and
//! value, never guessed.
//!
//! This file holds the types every other part of the model reads: [`ModelSpec`] and its parts
//! ([`Attention`], [`Dsa`], [`LayerCounts`], [`LinearAttention`], [`Moe`], [`PartFormats`]). The
//! work is split by concern:
//!
//! - `config`: the entry point [`from_hf_config`]. It parses the JSON (Python's `NaN` and
//!   `Infinity` tokens read as null), picks the language model out of a multimodal wrapper, maps
//!   the `model_type` onto one of the [`SUPPORTED`] families, fills in the fields a config class
//!   defaults (Gemma), and reads the whole-number fields every family shares, each bounded so
//!   that sums of a few of them cannot overflow.
//! - `layers`: what differs per family: attention (grouped-query or DeepSeek's latent attention,
//!   and the DSA indexer with the layers that run it), which layers are full, sliding-window or
//!   linear attention, the sliding window, the linear mixers' sizes (Gated DeltaNet, Mamba-2,
//!   KDA), MiniMax's layer list and norm, experts (routed, shared, top-k) and which layers are
//!   dense (Qwen's `mlp_only_layers`, Llama 4's interleaving, DeepSeek's `first_k_dense_replace`
//!   and `moe_layer_freq`).
//! - `checkpoint`: the weight format from `quantization_config`, per part where a checkpoint
//!   quantizes parts differently (ModelOpt mixed precision, fbgemm FP8 exports, compressed-tensors).
//! - `catalog`: the catalog's entries, their embedded config files and published checkpoints.
//! - `params`: [`ParamCounts`] from the architecture, the KV cache elements a token stores per
//!   layer, and the layer counts the predictions use.
//! - `check`: [`ModelSpec::validate`], which refuses an architecture no model can have, naming
//!   the field.
//!
//! The public paths are this module's (`spec::from_hf_config`, `spec::catalog`,
//! `spec::ParamCounts`): callers do not see the split.

mod catalog;
mod check;
mod checkpoint;
mod config;
mod layers;
mod params;
#[cfg(test)]
mod tests;

pub use catalog::{architecture_of, catalog, catalog_entry, catalog_names, named_model, CatalogEntry, Checkpoint, NamedModel};
pub use config::{from_hf_config, SUPPORTED};
pub use params::ParamCounts;

use serde::Serialize;

use crate::quant::Dtype;

/// How attention stores and reads its KV cache.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Attention {
    /// Multi-head or grouped-query attention (MHA when kv_heads == heads).
    Gqa {
        /// Query heads.
        heads: u32,
        /// Key/value heads (divides `heads`).
        kv_heads: u32,
        /// Dimension of one head.
        head_dim: u32,
        /// Projections carry biases.
        bias: bool,
        /// The query projection also produces a sigmoid output gate (Qwen3-Next, Qwen3.5 "gated
        /// attention"): it is twice as wide.
        gate: bool,
    },
    /// Multi-head latent attention (DeepSeek-V2/V3, GLM-5).
    Mla {
        /// Query heads.
        heads: u32,
        /// Rank of the query compression (None: queries are not compressed).
        q_lora_rank: Option<u32>,
        /// Rank of the KV latent (what the cache stores per token and layer).
        kv_lora_rank: u32,
        /// Per-head query/key dimension without rotary embedding.
        qk_nope_head_dim: u32,
        /// Per-head rotary dimension (also cached per token).
        qk_rope_head_dim: u32,
        /// Per-head value dimension.
        v_head_dim: u32,
    },
}

/// DeepSeek Sparse Attention's indexer (DeepSeek-V3.2, GLM-5).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Dsa {
    /// Indexer heads.
    pub index_heads: u32,
    /// Indexer head dimension (its keys are cached per token and layer).
    pub index_head_dim: u32,
    /// Tokens each query attends to.
    pub topk: u32,
    /// Layers that run the indexer; the others reuse the top-k of the last layer that did
    /// (GLM-5.2's `indexer_types` "shared") and keep no indexer keys. All layers when the config
    /// names none.
    pub indexer_layers: u32,
}

/// What one layer's token mixer is (`layer_types` in a config.json).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerKind {
    /// Attention over the whole context (`full_attention`).
    Full,
    /// Attention over the last `sliding_window` tokens (`sliding_attention`).
    Sliding,
    /// Linear attention (`linear_attention`; Nemotron-H's and Granite 4.0's Mamba-2): a fixed-size recurrent
    /// state per request instead of a KV cache.
    Linear,
}

impl LayerKind {
    /// The `layer_types` spelling.
    pub fn name(self) -> &'static str {
        match self {
            LayerKind::Full => "full_attention",
            LayerKind::Sliding => "sliding_attention",
            LayerKind::Linear => "linear_attention",
        }
    }
}

/// Layers by kind (they add up to `ModelSpec::layers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct LayerCounts {
    /// Full-attention layers.
    pub full: u32,
    /// Sliding-window attention layers.
    pub sliding: u32,
    /// Linear-attention layers (Gated DeltaNet, Mamba-2 or KDA).
    pub linear: u32,
}

/// Which recurrent token mixer a linear layer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinearMixer {
    /// Gated DeltaNet (Qwen3-Next, Qwen3.5): a fused q/k/v/z projection and a beta/alpha projection.
    GatedDeltaNet,
    /// Mamba-2 (Nemotron-H; Granite 4.0's Bamba mixer, under its `mamba_n_groups`, `mamba_d_state`,
    /// `mamba_n_heads` and `mamba_d_head`): one input projection to z, x, B, C and dt. Its shape
    /// maps onto the same fields: B and C are `key_heads` = `n_groups` groups of `key_head_dim` =
    /// `ssm_state_size`; x is `value_heads` = `mamba_num_heads` heads of `value_head_dim` =
    /// `mamba_head_dim`; the state is heads x head_dim x state_size.
    Mamba2,
    /// Kimi Delta Attention (Kimi Linear; vLLM's `KimiDeltaAttention`): separate q, k and v
    /// projections of `num_heads` x `head_dim` each with a short convolution on each, a low-rank
    /// decay gate and a low-rank output gate (`head_dim` wide in the middle), a per-head beta, a
    /// per-head gated norm and the output projection. Its `linear_attn_config` maps onto the
    /// fields as `key_heads` = `value_heads` = `num_heads` and `key_head_dim` = `value_head_dim`
    /// = `head_dim`: the state is heads x head_dim x head_dim, as Gated DeltaNet's.
    Kda,
}

/// A linear (recurrent) token mixer, Gated DeltaNet (Qwen3-Next, Qwen3.5), Mamba-2
/// (Nemotron-H, Granite 4.0) or KDA (Kimi Linear): per request and layer it keeps a recurrent state of value_heads x key_head_dim x
/// value_head_dim and a causal-convolution state of (2 x key_heads x key_head_dim + value_heads x
/// value_head_dim) x (conv_kernel - 1).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinearAttention {
    /// Which mixer it is.
    pub mixer: LinearMixer,
    /// Key (and query) heads, `linear_num_key_heads`.
    pub key_heads: u32,
    /// Value heads, `linear_num_value_heads` (a multiple of the key heads).
    pub value_heads: u32,
    /// `linear_key_head_dim`.
    pub key_head_dim: u32,
    /// `linear_value_head_dim`.
    pub value_head_dim: u32,
    /// `linear_conv_kernel_dim`.
    pub conv_kernel: u32,
    /// Bytes per element of the recurrent state as vLLM keeps it (`mamba_ssm_dtype` for Gated
    /// DeltaNet, 2 when absent: its `--mamba-ssm-cache-dtype auto` keeps the model's bf16;
    /// `mamba_ssm_cache_dtype` for Mamba-2, 4 when absent for Nemotron-H and 2 for Granite 4.0;
    /// always 4 for KDA, vLLM's `kda_state_dtype`).
    pub state_bytes: u32,
    /// Bytes per element of the recurrent state as sglang keeps it: the config's `mamba_ssm_dtype`,
    /// else float32 (`mamba2_state_dtype` in sglang's `python/sglang/srt/configs/mamba_utils.py`:
    /// the `SGLANG_MAMBA_SSM_DTYPE` environment variable, then the config's `mamba_ssm_dtype`, then
    /// "float32"; the same for Gated DeltaNet, Mamba-2 and KDA).
    pub state_bytes_sglang: u32,
}

impl LinearAttention {
    /// Width of the query/key/value streams through the causal convolution.
    pub fn conv_dim(&self) -> f64 {
        2.0 * self.key_heads as f64 * self.key_head_dim as f64 + self.value_heads as f64 * self.value_head_dim as f64
    }

    /// Parameters of one layer. Gated DeltaNet: the fused q/k/v/z projection, the beta/alpha
    /// (decay) projection, the convolution, per-head decay and bias, the gated norm (one head's
    /// width) and the output projection. Mamba-2 (transformers' and vLLM's `Mamba2Mixer`): one input
    /// projection to z, x, B, C and one dt per head, the convolution with its bias, per-head dt
    /// bias, A and D, the gated norm over the whole inner width, and the output projection.
    pub fn params(&self, hidden: u32) -> f64 {
        let h = hidden as f64;
        let key = self.key_heads as f64 * self.key_head_dim as f64;
        let value = self.value_heads as f64 * self.value_head_dim as f64;
        let vh = self.value_heads as f64;
        let conv = self.conv_dim() * self.conv_kernel as f64;
        match self.mixer {
            LinearMixer::GatedDeltaNet => {
                h * (2.0 * key + 2.0 * value) + h * 2.0 * vh + conv + 2.0 * vh + self.value_head_dim as f64 + value * h
            }
            LinearMixer::Mamba2 => h * (2.0 * key + 2.0 * value + vh) + conv + self.conv_dim() + 3.0 * vh + value + value * h,
            // q, k and v; the three convolutions (no bias); the decay gate's and the output
            // gate's down (hidden to one head's width) and up (to all heads) halves; the decay's
            // per-channel bias and per-head A; beta; the per-head norm; the output projection.
            // Kimi-Linear-48B-A3B's 39,514,272 per KDA layer (its tensors, docs/reference.md).
            LinearMixer::Kda => {
                let d = self.key_head_dim as f64;
                h * (2.0 * key + value) + conv + 2.0 * (h * d + d * value) + value + vh + h * vh + self.value_head_dim as f64 + value * h
            }
        }
    }

    /// Kernels one decode step of one layer runs (see `Scenario::kernels_per_step`). Gated
    /// DeltaNet: input norm, two input GEMMs, causal conv, gating, the recurrent update, gated
    /// norm, output GEMM: 8. Mamba-2: input norm, the input GEMM, causal conv, the selective state
    /// update, gated norm, output GEMM: 6. KDA (vLLM's `KimiDeltaAttention`): input norm, the q, k
    /// and v GEMMs, the two gates' four GEMMs and beta's, the three convolutions, the decay gate,
    /// the recurrent update, gated norm, output GEMM: 16.
    pub fn kernels(&self) -> f64 {
        match self.mixer {
            LinearMixer::GatedDeltaNet => 8.0,
            LinearMixer::Mamba2 => 6.0,
            LinearMixer::Kda => 16.0,
        }
    }

    /// The tensor-parallel ranks one layer's state and recurrence are split over at TP `tp`:
    /// Gated DeltaNet's key heads (as modelled since the Qwen3-Next work); Mamba-2's heads (vLLM's
    /// `MambaMixer2` shards the heads, and replicates B and C's groups when there are fewer); KDA's
    /// heads (vLLM's `KimiDeltaAttention` splits every projection but the gates' down halves by
    /// head, and asserts the heads divide by TP; the model splits the gates' replicated down halves
    /// too, 2 x hidden x head_dim per layer, 24 MB in bf16 over Kimi-Linear-48B-A3B's 20 layers).
    pub fn tp_split(&self, tp: u32) -> f64 {
        match self.mixer {
            LinearMixer::GatedDeltaNet => tp.min(self.key_heads) as f64,
            LinearMixer::Mamba2 | LinearMixer::Kda => tp.min(self.value_heads) as f64,
        }
    }

    /// Bytes per element of the recurrent state under `engine`: sglang's type
    /// ([`Self::state_bytes_sglang`]) or vLLM's ([`Self::state_bytes`], which TensorRT-LLM is
    /// taken to share).
    pub fn state_bytes_under(&self, engine: crate::predict::EngineName) -> u32 {
        match engine {
            crate::predict::EngineName::Sglang => self.state_bytes_sglang,
            _ => self.state_bytes,
        }
    }

    /// Bytes of state one request holds in one layer under `engine`: (recurrent state, convolution
    /// state in bf16).
    pub fn state_bytes_per_layer(&self, engine: crate::predict::EngineName) -> (f64, f64) {
        let recurrent =
            self.value_heads as f64 * self.key_head_dim as f64 * self.value_head_dim as f64 * self.state_bytes_under(engine) as f64;
        let conv = self.conv_dim() * self.conv_kernel.saturating_sub(1) as f64 * 2.0;
        (recurrent, conv)
    }
}

/// Routed experts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Moe {
    /// Routed experts per MoE layer.
    pub experts: u32,
    /// Experts each token is routed to (at most `experts`).
    pub top_k: u32,
    /// Shared experts every token passes through.
    pub shared_experts: u32,
    /// Intermediate size of one expert.
    pub expert_ffn: u32,
    /// Intermediate size of the shared expert block (defaults to shared_experts * expert_ffn).
    pub shared_ffn: u32,
    /// Experts carry biases (gpt-oss).
    pub bias: bool,
    /// The width routed experts run at where it is not the hidden size (LatentMoE, Nemotron-3
    /// Super's `moe_latent_size`): each MoE layer projects a token down to it before the experts
    /// and back up after them; the shared expert runs at the hidden size.
    pub latent: Option<u32>,
}

/// A model, as the performance model needs it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelSpec {
    /// Catalog name, the config's `_name_or_path`, or the file it was read from.
    pub name: String,
    /// The `model_type` it was read as.
    pub arch: String,
    /// Hidden size.
    pub hidden: u32,
    /// Transformer layers (the MTP layer is not counted). In a model of single-operation blocks
    /// (Nemotron-H: each of its `num_hidden_layers` is a Mamba-2, attention, MLP or MoE block) a
    /// layer is one block, and [`Self::ffn_free_layers`] says how many have no FFN.
    pub layers: u32,
    /// Layers with a dense FFN instead of experts (all of them for dense models; for DeepSeek the
    /// first `first_k_dense_replace`).
    pub dense_layers: u32,
    /// Layers with a token mixer and no FFN (Nemotron-H's Mamba-2 and attention blocks; 0 for
    /// every model whose layers are attention then FFN). Layers with an FFN and no mixer are the
    /// layers less the mixers ([`Self::mixer_layers`]).
    pub ffn_free_layers: u32,
    /// Dense FFN intermediate size.
    pub ffn: u32,
    /// The FFNs (dense, experts and shared experts) are gated, three matrices (gate, up, down,
    /// SwiGLU); false for a plain two-matrix FFN (up, down: Nemotron-H's squared ReLU).
    pub ffn_gated: bool,
    /// Vocabulary size.
    pub vocab: u32,
    /// The LM head shares the embedding table.
    pub tied_embeddings: bool,
    /// Attention and its KV layout (a sliding layer's where the full layers have their own shape:
    /// [`Self::global_attention`]).
    pub attention: Attention,
    /// The full-attention layers' own KV heads and head dimension, where they differ from the
    /// sliding layers' (Gemma 4); None when every attention layer has [`Self::attention`]'s shape.
    pub global_attention: Option<GlobalAttention>,
    /// The sparse-attention indexer, if any.
    pub dsa: Option<Dsa>,
    /// Routed experts, if any.
    pub moe: Option<Moe>,
    /// Longest context, tokens.
    pub max_context: u32,
    /// The checkpoint's weight format, from its `quantization_config` (None: unquantized, BF16);
    /// a mixed checkpoint's is its experts' (MoE) or its dense FFN's.
    pub checkpoint: Option<Dtype>,
    /// Each part's format where the checkpoint quantizes its parts differently (ModelOpt's
    /// `MIXED_PRECISION`); None when one format covers them ([`Quant::preset`] of `checkpoint`).
    ///
    /// [`Quant::preset`]: crate::quant::Quant::preset
    pub checkpoint_parts: Option<PartFormats>,
    /// The KV-cache format the checkpoint's `quantization_config` declares (None: it says nothing,
    /// and the checkpoint's format decides, [`crate::quant::KvDtype::declared_by`]).
    pub kv_declared: Option<crate::quant::KvDtype>,
    /// Layers by kind.
    pub layer_counts: LayerCounts,
    /// Tokens a sliding-window layer attends to (Some exactly when there are sliding layers).
    pub sliding_window: Option<u32>,
    /// The linear-attention layers' shape (Some exactly when there are linear layers).
    pub linear: Option<LinearAttention>,
    /// The query and key RMSNorm runs over all heads of a layer, not per head (MiniMax-M2's
    /// `use_qk_norm` with `qk_norm_type` "per_layer"): under tensor parallelism each rank holds
    /// some heads, so the engines all-reduce the sum of squares across the TP ranks between the
    /// norm's two halves (vLLM `MiniMaxText01RMSNormTP.forward_qk`, sglang
    /// `MiniMaxM2RMSNormTP`).
    pub qk_norm_across_heads: bool,
    /// The query and key RMSNorm runs over the whole q and k projections (OLMo 2, OLMo 3, OLMoE):
    /// under tensor parallelism vLLM all-gathers each attention layer's q and k across the TP
    /// ranks before the norm and splits them after (`olmo2.py`, `olmoe.py`: `_apply_qk_norm`),
    /// two all-gathers per attention layer.
    pub qk_norm_gathered: bool,
    /// The vision encoder a multimodal checkpoint declares (its top-level `vision_config`), None
    /// for a text model. The model does not price it (the requests are text), but sglang cuts its
    /// memory share for it, by release ([`crate::predict::VisionCut`]).
    pub vision: Option<VisionTower>,
}

/// A multimodal checkpoint's vision encoder, as sglang sizes it for its default memory share
/// (`adjust_mem_fraction_for_vlm`, which reads `vision_config.num_hidden_layers` and
/// `hidden_size` with ViT-L/14's 24 and 1024 where a config leaves them out: Qwen3-VL's and
/// Qwen3.5's configs name their depth `depth`, which it does not read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VisionTower {
    /// `vision_config.num_hidden_layers`, 24 where absent.
    pub layers: u32,
    /// `vision_config.hidden_size`, 1024 where absent.
    pub hidden: u32,
}

/// The full-attention layers' shape where it differs from the sliding layers' (Gemma 4's
/// `global_head_dim` and, with `attention_k_eq_v`, `num_global_key_value_heads`; transformers' and
/// vLLM's `Gemma4Attention`). The query heads are the model's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GlobalAttention {
    /// KV heads of a full layer.
    pub kv_heads: u32,
    /// Dimension of one head in a full layer.
    pub head_dim: u32,
    /// The keys' projection also gives the values (`attention_k_eq_v`): a full layer has no value
    /// projection. Its cache still keeps keys and values apart (the values are the projection's
    /// own norm without rotary; vLLM's `Gemma4Attention` passes both to the attention layer).
    pub k_eq_v: bool,
}

/// The weight format of each part of a mixed-precision checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PartFormats {
    /// Attention (and linear-attention) projections.
    pub attention: Dtype,
    /// Dense FFN layers.
    pub dense_ffn: Dtype,
    /// Routed experts.
    pub experts: Dtype,
    /// Shared experts.
    pub shared_experts: Dtype,
    /// The LM head, where the checkpoint quantizes it (None: BF16, the embedding table's).
    pub lm_head: Option<Dtype>,
}

impl PartFormats {
    /// The format that names the checkpoint: the experts' in a model with experts, else the dense
    /// FFN's ([`crate::quant::Quant::headline`]).
    fn headline(&self, has_experts: bool) -> Dtype {
        if has_experts {
            self.experts
        } else {
            self.dense_ffn
        }
    }
}
