//! Model architectures: reading a Hugging Face `config.json` (the catalog's entries are the
//! published files under `crates/model/data/models/`, read by the same parser as `--model-config`),
//! validating them, and parameter counts computed from the architecture.
//!
//! Layers are full attention, sliding-window attention (gpt-oss, Mistral) or Gated DeltaNet linear
//! attention (Qwen3-Next, Qwen3.5), read from `layer_types` or the config class's documented
//! default. A field the parser does not understand for the `model_type` is refused by name and
//! value, never guessed.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::quant::Dtype;
use crate::ModelError;

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
    /// Gated DeltaNet linear attention (`linear_attention`): a fixed-size recurrent state per
    /// request instead of a KV cache.
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
    /// Gated DeltaNet linear-attention layers.
    pub linear: u32,
}

/// Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): per request and layer it keeps a
/// recurrent state of value_heads x key_head_dim x value_head_dim and a causal-convolution state of
/// (2 x key_heads x key_head_dim + value_heads x value_head_dim) x (conv_kernel - 1).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinearAttention {
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
    /// Bytes per element of the recurrent state (`mamba_ssm_dtype`; 2 when absent: vLLM's
    /// `--mamba-ssm-cache-dtype auto` keeps the model's bf16).
    pub state_bytes: u32,
}

impl LinearAttention {
    /// Width of the query/key/value streams through the causal convolution.
    pub fn conv_dim(&self) -> f64 {
        2.0 * self.key_heads as f64 * self.key_head_dim as f64 + self.value_heads as f64 * self.value_head_dim as f64
    }

    /// Parameters of one layer: the fused q/k/v/z projection, the beta/alpha (decay) projection,
    /// the convolution, per-head decay and bias, the gated norm and the output projection.
    pub fn params(&self, hidden: u32) -> f64 {
        let h = hidden as f64;
        let key = self.key_heads as f64 * self.key_head_dim as f64;
        let value = self.value_heads as f64 * self.value_head_dim as f64;
        let vh = self.value_heads as f64;
        h * (2.0 * key + 2.0 * value)
            + h * 2.0 * vh
            + self.conv_dim() * self.conv_kernel as f64
            + 2.0 * vh
            + self.value_head_dim as f64
            + value * h
    }

    /// Bytes of state one request holds in one layer: (recurrent state, convolution state in bf16).
    pub fn state_bytes_per_layer(&self) -> (f64, f64) {
        let recurrent = self.value_heads as f64 * self.key_head_dim as f64 * self.value_head_dim as f64 * self.state_bytes as f64;
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
    /// Transformer layers (the MTP layer is not counted).
    pub layers: u32,
    /// The first layers with a dense FFN instead of experts (all of them for dense models).
    pub dense_layers: u32,
    /// Dense FFN intermediate size.
    pub ffn: u32,
    /// Vocabulary size.
    pub vocab: u32,
    /// The LM head shares the embedding table.
    pub tied_embeddings: bool,
    /// Attention and its KV layout.
    pub attention: Attention,
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

/// Parameter counts, by component.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct ParamCounts {
    /// Attention (with the DSA indexer), all layers.
    pub attention: f64,
    /// Dense FFN layers.
    pub dense_ffn: f64,
    /// Every routed expert.
    pub routed_experts: f64,
    /// Shared experts.
    pub shared_experts: f64,
    /// Routers.
    pub router: f64,
    /// Embedding table.
    pub embeddings: f64,
    /// LM head (0 when tied to the embeddings).
    pub lm_head: f64,
    /// Norm weights.
    pub norms: f64,
    /// Everything.
    pub total: f64,
    /// Weights one token touches: everything but the routed experts it is not sent to.
    pub active: f64,
    /// `active` without the embedding table and the LM head.
    pub active_non_embedding: f64,
    /// One routed expert.
    pub per_expert: f64,
}

impl ModelSpec {
    /// Layers with routed experts.
    pub fn moe_layers(&self) -> u32 {
        if self.moe.is_some() {
            self.layers - self.dense_layers
        } else {
            0
        }
    }

    /// Layers that keep a KV cache (full and sliding-window attention).
    pub fn kv_layers(&self) -> u32 {
        self.layer_counts.full + self.layer_counts.sliding
    }

    /// Parameters of one attention layer's attention (with the DSA indexer); linear-attention
    /// layers have [`LinearAttention::params`] instead.
    pub fn attention_params_per_layer(&self) -> f64 {
        let h = self.hidden as f64;
        let mut p = match self.attention {
            Attention::Gqa { heads, kv_heads, head_dim, bias, gate } => {
                let q = heads as f64 * head_dim as f64;
                let kv = kv_heads as f64 * head_dim as f64;
                let q_out = if gate { 2.0 * q } else { q };
                let w = h * q_out + 2.0 * h * kv + q * h;
                w + if bias { q_out + 2.0 * kv + h } else { 0.0 }
            }
            Attention::Mla { heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim } => {
                let n = heads as f64;
                let qk = (qk_nope_head_dim + qk_rope_head_dim) as f64;
                let q = match q_lora_rank {
                    Some(r) => h * r as f64 + r as f64 + r as f64 * n * qk,
                    None => h * n * qk,
                };
                let kv_a = h * (kv_lora_rank + qk_rope_head_dim) as f64 + kv_lora_rank as f64;
                let kv_b = kv_lora_rank as f64 * n * (qk_nope_head_dim + v_head_dim) as f64;
                let o = n * v_head_dim as f64 * h;
                q + kv_a + kv_b + o
            }
        };
        if let Some(d) = self.dsa {
            let q_in = match self.attention {
                Attention::Mla { q_lora_rank: Some(r), .. } => r as f64,
                _ => h,
            };
            // Averaged over the layers: only the indexer layers hold its weights.
            p += (q_in * (d.index_heads * d.index_head_dim) as f64
                + h * d.index_head_dim as f64
                + h * d.index_heads as f64
                + 2.0 * d.index_head_dim as f64)
                * self.indexer_share();
        }
        p
    }

    /// The share of layers that run the DSA indexer ([`Dsa::indexer_layers`]; 0 without one).
    pub fn indexer_share(&self) -> f64 {
        self.dsa.map_or(0.0, |d| d.indexer_layers as f64 / self.layers.max(1) as f64)
    }

    /// Parameter counts computed from the architecture (the MTP layer of GLM-5/DeepSeek-V3 is not
    /// counted: it serves only speculative decoding).
    pub fn params(&self) -> ParamCounts {
        let h = self.hidden as f64;
        let l = self.layers as f64;
        let linear = self.linear.map_or(0.0, |la| la.params(self.hidden) * self.layer_counts.linear as f64);
        let attention = self.attention_params_per_layer() * self.kv_layers() as f64 + linear;
        let dense_ffn = 3.0 * h * self.ffn as f64 * self.dense_layers as f64;
        let (mut routed, mut shared, mut router, mut per_expert, mut active_routed) = (0.0, 0.0, 0.0, 0.0, 0.0);
        if let Some(m) = self.moe {
            let ml = self.moe_layers() as f64;
            per_expert = 3.0 * h * m.expert_ffn as f64 + if m.bias { 2.0 * m.expert_ffn as f64 + h } else { 0.0 };
            routed = per_expert * m.experts as f64 * ml;
            shared = 3.0 * h * m.shared_ffn as f64 * ml;
            router = h * m.experts as f64 * ml + if m.bias { m.experts as f64 * ml } else { 0.0 };
            active_routed = per_expert * m.top_k as f64 * ml;
        }
        let embeddings = self.vocab as f64 * h;
        let lm_head = if self.tied_embeddings { 0.0 } else { self.vocab as f64 * h };
        let norms = 2.0 * h * l + h;
        let total = attention + dense_ffn + routed + shared + router + embeddings + lm_head + norms;
        let active_non_embedding = attention + dense_ffn + active_routed + shared + router + norms;
        ParamCounts {
            attention,
            dense_ffn,
            routed_experts: routed,
            shared_experts: shared,
            router,
            embeddings,
            lm_head,
            norms,
            total,
            active: active_non_embedding + embeddings + lm_head,
            active_non_embedding,
            per_expert,
        }
    }

    /// Elements of KV cache per token per layer, by part: (latent or K+V, rope part, indexer keys
    /// in a layer that runs the indexer: see [`Self::indexer_share`]).
    pub fn kv_elems_per_token_layer(&self) -> (f64, f64, f64) {
        let idx = self.dsa.map_or(0.0, |d| d.index_head_dim as f64);
        match self.attention {
            Attention::Gqa { kv_heads, head_dim, .. } => (2.0 * kv_heads as f64 * head_dim as f64, 0.0, idx),
            Attention::Mla { kv_lora_rank, qk_rope_head_dim, .. } => (kv_lora_rank as f64, qk_rope_head_dim as f64, idx),
        }
    }
}

/// A catalog model: its published `config.json` and the checkpoint formats published for it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CatalogEntry {
    /// The name `--model` takes.
    pub name: String,
    /// File under `crates/model/data/models/`.
    pub config: String,
    /// The Hugging Face repository the config comes from.
    pub repo: String,
    /// Published checkpoints, the default (the config's own format) first.
    pub checkpoints: Vec<Checkpoint>,
}

/// One published checkpoint of a catalog model.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Checkpoint {
    /// Its weight format.
    pub quant: Dtype,
    /// Where it is published.
    pub repo: String,
}

#[derive(Debug, Deserialize)]
struct CatalogFile {
    models: Vec<CatalogEntry>,
}

/// The catalog's config files, embedded at build time.
const CONFIGS: [(&str, &str); 17] = [
    ("glm-5.json", include_str!("../data/models/glm-5.json")),
    ("deepseek-v3.json", include_str!("../data/models/deepseek-v3.json")),
    ("qwen3-235b-a22b.json", include_str!("../data/models/qwen3-235b-a22b.json")),
    ("qwen3-30b-a3b.json", include_str!("../data/models/qwen3-30b-a3b.json")),
    ("llama-3.1-70b.json", include_str!("../data/models/llama-3.1-70b.json")),
    ("llama-3.1-8b.json", include_str!("../data/models/llama-3.1-8b.json")),
    ("mixtral-8x7b.json", include_str!("../data/models/mixtral-8x7b.json")),
    ("gpt-oss-120b.json", include_str!("../data/models/gpt-oss-120b.json")),
    ("kimi-k2.json", include_str!("../data/models/kimi-k2.json")),
    ("minimax-m2.json", include_str!("../data/models/minimax-m2.json")),
    ("glm-4.5.json", include_str!("../data/models/glm-4.5.json")),
    ("glm-4.6.json", include_str!("../data/models/glm-4.6.json")),
    ("qwen3-next-80b-a3b.json", include_str!("../data/models/qwen3-next-80b-a3b.json")),
    ("qwen3.5-397b-a17b.json", include_str!("../data/models/qwen3.5-397b-a17b.json")),
    ("gpt-oss-20b.json", include_str!("../data/models/gpt-oss-20b.json")),
    ("llama-4-scout.json", include_str!("../data/models/llama-4-scout.json")),
    ("llama-4-maverick.json", include_str!("../data/models/llama-4-maverick.json")),
];

fn catalog_file() -> &'static CatalogFile {
    static FILE: OnceLock<CatalogFile> = OnceLock::new();
    // Part of the crate and unit-tested: a parse failure is a build bug, not an input error.
    FILE.get_or_init(|| {
        serde_json::from_str(include_str!("../data/models/catalog.json"))
            .expect("crates/model/data/models/catalog.json is valid (unit-tested)")
    })
}

/// Catalog names, in the catalog's order.
pub fn catalog_names() -> Vec<&'static str> {
    catalog_file().models.iter().map(|m| m.name.as_str()).collect()
}

/// The catalog entry `name`.
pub fn catalog_entry(name: &str) -> Result<&'static CatalogEntry, ModelError> {
    catalog_file().models.iter().find(|m| m.name == name).ok_or_else(|| {
        ModelError::Input(format!(
            "--model {name:?} is not in the catalog; known: {} (or give --model-config path/to/config.json)",
            catalog_names().join(", ")
        ))
    })
}

/// A catalog model, read from its published `config.json` by [`from_hf_config`].
pub fn catalog(name: &str) -> Result<ModelSpec, ModelError> {
    let entry = catalog_entry(name)?;
    let (file, text) = CONFIGS
        .iter()
        .find(|(f, _)| *f == entry.config)
        .ok_or_else(|| ModelError::Input(format!("catalog entry {name:?} names {:?}, which is not embedded", entry.config)))?;
    let mut spec = from_hf_config(text, &format!("crates/model/data/models/{file}"))?;
    spec.name = name.to_string();
    Ok(spec)
}

/// The largest value any size field may hold. The largest real ones are context lengths of about
/// 10M tokens; a bound well above that keeps sums of a few fields (head dimensions, ranks) far
/// from u32 overflow (found by the fuzzer: a rope dimension of 4294967216 overflowed a sum).
const MAX_FIELD: u32 = 1 << 26;

/// A whole-number field from 0 to [`MAX_FIELD`]: `Ok(None)` when absent (or null), an error
/// naming the field when present but negative, fractional, too large or not a number.
fn field(v: &Value, keys: &[&str], source: &str) -> Result<Option<u32>, ModelError> {
    for k in keys {
        match v.get(*k) {
            None | Some(Value::Null) => continue,
            Some(x) => {
                return x
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| *n <= MAX_FIELD)
                    .map(Some)
                    .ok_or_else(|| ModelError::Input(format!("{source}: field {k:?} is {x}, not a whole number from 0 to {MAX_FIELD}")))
            }
        }
    }
    Ok(None)
}

/// Fields a config class fills in when its `config.json` leaves them out, as transformers loads
/// them: Gemma 3's multimodal checkpoints state no `vocab_size` under `text_config` (the 27B and
/// 12B), nor `head_dim` (the 12B, whose 3840 / 16 = 240 is not its 256). From transformers'
/// Gemma2Config and Gemma3TextConfig; other architectures read only what their files state.
fn class_defaults(arch: &str) -> Option<&'static [(&'static str, u32)]> {
    const GEMMA2: &[(&str, u32)] =
        &[("vocab_size", 256_000), ("head_dim", 256), ("num_attention_heads", 8), ("num_key_value_heads", 4), ("sliding_window", 4096)];
    const GEMMA3: &[(&str, u32)] =
        &[("vocab_size", 262_208), ("head_dim", 256), ("num_attention_heads", 8), ("num_key_value_heads", 4), ("sliding_window", 4096)];
    match arch {
        "gemma2" => Some(GEMMA2),
        "gemma3" => Some(GEMMA3),
        _ => None,
    }
}

/// `v` with each of `defaults` added where `v` lacks the key (a key present, even as null, stays).
fn overlay(defaults: &[(&str, u32)], v: &Value) -> Value {
    let mut out = v.clone();
    if let Some(map) = out.as_object_mut() {
        for (k, d) in defaults {
            map.entry(k.to_string()).or_insert_with(|| Value::from(*d));
        }
    }
    out
}

/// A field the architecture needs.
fn need(v: &Value, keys: &[&str], source: &str, arch: &str) -> Result<u32, ModelError> {
    field(v, keys, source)?
        .ok_or_else(|| ModelError::Input(format!("{source}: model_type {arch:?} needs the field {:?}, which is missing", keys[0])))
}

/// `model_type`s the parser understands. A multimodal config's language model under `text_config`
/// is read by its own `model_type` less the `_text` suffix (`qwen3_5_moe_text` as `qwen3_5_moe`,
/// `llama4_text` as `llama4`); Qwen3-VL's language models are Qwen3's and Qwen3-MoE's (its
/// interleaved multimodal rotary embedding costs what Qwen3's does), and are read as those. The
/// vision encoder is not modelled: the requests are text.
pub const SUPPORTED: [&str; 31] = [
    "llama",
    "glm4",
    "phi3",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "llama4",
    "llama4_text",
    "mistral",
    "qwen2",
    "qwen3",
    "qwen2_moe",
    "qwen3_moe",
    "mixtral",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v32",
    "glm4_moe",
    "glm_moe_dsa",
    "gpt_oss",
    "kimi_k2",
    "minimax_m2",
    "qwen3_next",
    "qwen3_5",
    "qwen3_5_text",
    "qwen3_5_moe",
    "qwen3_5_moe_text",
    "qwen3_vl",
    "qwen3_vl_text",
    "qwen3_vl_moe",
    "qwen3_vl_moe_text",
];

/// Architectures with Multi-head Latent Attention (DeepSeek-V3's, which Kimi-K2 reuses).
const MLA_ARCHS: [&str; 5] = ["deepseek_v2", "deepseek_v3", "deepseek_v32", "glm_moe_dsa", "kimi_k2"];

/// Qwen's MoE architectures, whose dense layers are named by `mlp_only_layers` and
/// `decoder_sparse_step` (not `first_k_dense_replace`).
const QWEN_MOE_ARCHS: [&str; 4] = ["qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe"];

/// Architectures with Gated DeltaNet linear-attention layers.
const HYBRID_ARCHS: [&str; 3] = ["qwen3_next", "qwen3_5", "qwen3_5_moe"];

/// Architectures whose modelling code reads `sliding_window` for their sliding layers.
const SLIDING_ARCHS: [&str; 7] = ["gpt_oss", "mistral", "mixtral", "llama4", "phi3", "gemma2", "gemma3"];

/// Architectures whose config class ties the output projection to the embeddings unless
/// `tie_word_embeddings` says otherwise (transformers' Gemma2Config and Gemma3TextConfig).
const TIED_BY_DEFAULT_ARCHS: [&str; 2] = ["gemma2", "gemma3"];

/// Architectures whose configs carry a `sliding_window` that only `use_sliding_window: true` turns on.
const OPT_IN_SLIDING_ARCHS: [&str; 7] = ["qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe"];

/// Reads a Hugging Face `config.json` (its text) and validates it. `source` names the file in errors.
pub fn from_hf_config(text: &str, source: &str) -> Result<ModelSpec, ModelError> {
    let root = parse_config_json(text, source)?;
    // Multimodal wrappers keep the language model under text_config.
    let v = root.get("text_config").filter(|t| t.is_object()).unwrap_or(&root);
    let read = v.get("model_type").or(root.get("model_type")).and_then(Value::as_str).unwrap_or("");
    if !SUPPORTED.contains(&read) {
        return Err(ModelError::Input(format!(
            "{source}: field \"model_type\" is {read:?}, which is not supported; supported: {}",
            SUPPORTED.join(", ")
        )));
    }
    let arch = match read.strip_suffix("_text").unwrap_or(read) {
        "qwen3_vl" => "qwen3",
        "qwen3_vl_moe" => "qwen3_moe",
        a => a,
    }
    .to_string();
    let with_defaults;
    let v = match class_defaults(&arch) {
        Some(defaults) => {
            with_defaults = overlay(defaults, v);
            &with_defaults
        }
        None => v,
    };
    let hidden = need(v, &["hidden_size"], source, &arch)?;
    let layers = need(v, &["num_hidden_layers"], source, &arch)?;
    let attention = read_attention(v, source, &arch, hidden)?;
    let moe = read_moe(v, source, &arch)?;
    let dense_layers = match &moe {
        None => layers,
        Some(_) if QWEN_MOE_ARCHS.contains(&arch.as_str()) => qwen_dense_layers(v, source, layers)?,
        Some(_) if arch == "llama4" => llama4_dense_layers(v, source, layers)?,
        Some(_) => field(v, &["first_k_dense_replace"], source)?.unwrap_or(0),
    };
    let dsa = match (field(v, &["index_n_heads"], source)?, field(v, &["index_head_dim"], source)?, field(v, &["index_topk"], source)?) {
        (Some(h), Some(d), Some(k)) => {
            Some(Dsa { index_heads: h, index_head_dim: d, topk: k, indexer_layers: read_indexer_layers(v, source, layers)? })
        }
        _ => None,
    };
    let layer_counts = read_layer_kinds(v, source, &arch, layers, dsa.is_some())?;
    let sliding_window = read_sliding_window(v, source, &arch, layer_counts)?;
    let linear = if layer_counts.linear > 0 { Some(read_linear(v, source, &arch)?) } else { None };
    check_attn_type_list(v, source, &arch, layers)?;
    let qk_norm_across_heads = arch == "minimax_m2" && read_qk_norm(v, source)?;
    let shape = LayerShape { layers, dense: dense_layers, moe: if moe.is_some() { layers - dense_layers.min(layers) } else { 0 } };
    let (checkpoint, checkpoint_parts) = read_checkpoint(&root, source, shape)?;
    let name = v.get("_name_or_path").and_then(Value::as_str).filter(|s| !s.is_empty()).unwrap_or(source).to_string();
    let spec = ModelSpec {
        name,
        hidden,
        layers,
        dense_layers,
        // Llama 4's dense FFN layers are `intermediate_size_mlp` wide (16,384 when absent, as in
        // transformers' Llama4TextConfig); its `intermediate_size` is an expert's.
        ffn: match arch.as_str() {
            "llama4" => field(v, &["intermediate_size_mlp"], source)?.unwrap_or(16_384),
            _ => field(v, &["intermediate_size"], source)?.unwrap_or(hidden.saturating_mul(4)),
        },
        vocab: need(v, &["vocab_size"], source, &arch)?,
        tied_embeddings: v
            .get("tie_word_embeddings")
            .or(root.get("tie_word_embeddings"))
            .and_then(Value::as_bool)
            .unwrap_or(TIED_BY_DEFAULT_ARCHS.contains(&arch.as_str())),
        attention,
        dsa,
        moe,
        max_context: field(v, &["max_position_embeddings"], source)?.unwrap_or(8192),
        checkpoint,
        checkpoint_parts,
        arch,
        layer_counts,
        sliding_window,
        linear,
        qk_norm_across_heads,
    };
    spec.validate(source)?;
    Ok(spec)
}

/// Parses a config.json. Python's `json.dump` writes the non-standard tokens `NaN`, `Infinity`
/// and `-Infinity` for float fields (Nemotron-H's `time_step_limit` ends in `Infinity`), which
/// strict JSON refuses: where the text fails to parse, those tokens outside strings are read as
/// null and the text is parsed again. servetune reads no field that holds them.
fn parse_config_json(text: &str, source: &str) -> Result<Value, ModelError> {
    serde_json::from_str(text).or_else(|e| {
        python_floats_as_null(text)
            .and_then(|t| serde_json::from_str(&t).ok())
            .ok_or_else(|| ModelError::Input(format!("{source}: not valid JSON ({e})")))
    })
}

/// `text` with every `NaN`, `Infinity` and `-Infinity` token outside a string replaced by `null`,
/// or None when it holds none.
fn python_floats_as_null(text: &str) -> Option<String> {
    const TOKENS: [&str; 3] = ["-Infinity", "Infinity", "NaN"];
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped, mut replaced) = (false, false, false);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            in_string = escaped || c != '"';
            escaped = !escaped && c == '\\';
        } else if c == '"' {
            in_string = true;
        } else if let Some(t) = TOKENS.iter().find(|t| rest.starts_with(*t)) {
            let boundary = |ch: Option<char>| ch.is_none_or(|ch| !(ch.is_ascii_alphanumeric() || ch == '_' || ch == '.'));
            if boundary(out.chars().next_back()) && boundary(rest[t.len()..].chars().next()) {
                out.push_str("null");
                rest = &rest[t.len()..];
                replaced = true;
                continue;
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    replaced.then_some(out)
}

fn read_attention(v: &Value, source: &str, arch: &str, hidden: u32) -> Result<Attention, ModelError> {
    let heads = need(v, &["num_attention_heads"], source, arch)?;
    if MLA_ARCHS.contains(&arch) {
        return Ok(Attention::Mla {
            heads,
            q_lora_rank: field(v, &["q_lora_rank"], source)?,
            kv_lora_rank: need(v, &["kv_lora_rank"], source, arch)?,
            qk_nope_head_dim: need(v, &["qk_nope_head_dim"], source, arch)?,
            qk_rope_head_dim: need(v, &["qk_rope_head_dim"], source, arch)?,
            v_head_dim: need(v, &["v_head_dim"], source, arch)?,
        });
    }
    let head_dim = match field(v, &["head_dim"], source)? {
        Some(d) => d,
        None if heads == 0 => {
            return Err(ModelError::Input(format!("{source}: field \"num_attention_heads\" is 0: a model needs at least one head")))
        }
        None => hidden / heads,
    };
    let bias_default = matches!(arch, "qwen2" | "qwen2_moe" | "gpt_oss");
    let bias = v.get("attention_bias").and_then(Value::as_bool).unwrap_or(bias_default);
    let kv_heads = field(v, &["num_key_value_heads"], source)?.unwrap_or(heads);
    // Qwen3-Next's attention always gates its output (transformers' Qwen3NextAttention); Qwen3.5
    // names it `attn_output_gate` (default true in its config class).
    let gate = match arch {
        "qwen3_next" => true,
        "qwen3_5" | "qwen3_5_moe" => v.get("attn_output_gate").and_then(Value::as_bool).unwrap_or(true),
        _ => false,
    };
    Ok(Attention::Gqa { heads, kv_heads, head_dim, bias, gate })
}

/// An array of whole numbers (`mlp_only_layers`), or an error naming the field.
fn index_list(v: &Value, key: &str, source: &str) -> Result<Vec<u64>, ModelError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| x.as_u64().ok_or_else(|| ModelError::Input(format!("{source}: field {key:?} holds {x}, not a layer index"))))
            .collect(),
        Some(x) => Err(ModelError::Input(format!("{source}: field {key:?} is {x}, not a list of layer indices"))),
    }
}

/// Qwen MoE layers: layer i has experts unless it is in `mlp_only_layers`, and when
/// (i + 1) is a multiple of `decoder_sparse_step` (transformers' Qwen2/3-MoE and Qwen3-Next
/// decoder layers); the others have a dense FFN of `intermediate_size`.
fn qwen_dense_layers(v: &Value, source: &str, layers: u32) -> Result<u32, ModelError> {
    let step = field(v, &["decoder_sparse_step"], source)?.unwrap_or(1);
    if step == 0 {
        return Err(ModelError::Input(format!("{source}: field \"decoder_sparse_step\" is 0: it must be at least 1")));
    }
    let mut dense_only = index_list(v, "mlp_only_layers", source)?;
    dense_only.sort_unstable();
    dense_only.dedup();
    let forced = dense_only.iter().filter(|i| **i < layers as u64 && (**i + 1) % step as u64 == 0).count() as u32;
    Ok(layers - (layers / step - forced))
}

/// Llama 4's dense layers: the MoE layers are `moe_layers` when given, else every
/// `interleave_moe_layer_step`-th layer, layers step - 1, 2 step - 1, ... (transformers'
/// `Llama4TextConfig`); the rest have a dense FFN.
fn llama4_dense_layers(v: &Value, source: &str, layers: u32) -> Result<u32, ModelError> {
    if v.get("moe_layers").is_some_and(|x| !x.is_null()) {
        let mut moe = index_list(v, "moe_layers", source)?;
        moe.sort_unstable();
        moe.dedup();
        if let Some(i) = moe.iter().find(|i| **i >= layers as u64) {
            return Err(ModelError::Input(format!("{source}: field \"moe_layers\" holds {i}, but there are {layers} layers")));
        }
        return Ok(layers - moe.len() as u32);
    }
    let step = field(v, &["interleave_moe_layer_step"], source)?.unwrap_or(1);
    if step == 0 {
        return Err(ModelError::Input(format!("{source}: field \"interleave_moe_layer_step\" is 0: it must be at least 1")));
    }
    Ok(layers - layers / step)
}

/// Llama 4's attention: a layer with rotary embedding attends within its chunk of
/// `attention_chunk_size` tokens (chunked local attention), a NoPE layer to the whole context.
/// The rotary layers are those `no_rope_layers` marks 1, else all but every
/// `no_rope_layer_interval`-th (4: transformers' default). Chunked layers are modelled as sliding
/// windows of the chunk size: exact while a context fits one chunk, and reading up to twice the
/// average chunk's keys beyond. Without a chunk size every layer is full attention.
fn llama4_layer_kinds(v: &Value, source: &str, layers: u32) -> Result<LayerCounts, ModelError> {
    if field(v, &["attention_chunk_size"], source)?.is_none() {
        return Ok(LayerCounts { full: layers, sliding: 0, linear: 0 });
    }
    // An absent or empty list is the default interval, as transformers reads it.
    let marks = index_list(v, "no_rope_layers", source)?;
    let rope = if !marks.is_empty() {
        if marks.len() != layers as usize || marks.iter().any(|m| *m > 1) {
            return Err(ModelError::Input(format!(
                "{source}: field \"no_rope_layers\" must hold one 0 (NoPE) or 1 (rotary) per layer, {layers} in all"
            )));
        }
        marks.iter().filter(|m| **m == 1).count() as u32
    } else {
        let every = field(v, &["no_rope_layer_interval"], source)?.unwrap_or(4);
        if every == 0 {
            return Err(ModelError::Input(format!("{source}: field \"no_rope_layer_interval\" is 0: it must be at least 1")));
        }
        layers - layers / every
    };
    Ok(LayerCounts { full: layers - rope, sliding: rope, linear: 0 })
}

/// Layer kinds from `layer_types`, or the config class's default when it is absent: Qwen3-Next
/// and Qwen3.5 put a full-attention layer every `full_attention_interval` layers (the rest linear);
/// gpt-oss and Gemma 2 alternate sliding (even layers) and full; Gemma 3 slides in all but every
/// `sliding_window_pattern`-th layer; Mistral, Mixtral and Phi-3 with a `sliding_window` slide in
/// every layer; everything else is full attention. `dsa`: the model has a DSA indexer (its
/// layers may be spelled "deepseek_sparse_attention").
fn read_layer_kinds(v: &Value, source: &str, arch: &str, layers: u32, dsa: bool) -> Result<LayerCounts, ModelError> {
    let kinds: Vec<LayerKind> = match v.get("layer_types") {
        None | Some(Value::Null) => return default_layer_kinds(v, source, arch, layers),
        Some(Value::Array(a)) => {
            if a.len() != layers as usize {
                return Err(ModelError::Input(format!(
                    "{source}: field \"layer_types\" has {} entries but \"num_hidden_layers\" is {layers}: give one per layer",
                    a.len()
                )));
            }
            a.iter().enumerate().map(|(i, t)| layer_kind(t, i, source, arch, dsa)).collect::<Result<_, _>>()?
        }
        Some(x) => return Err(ModelError::Input(format!("{source}: field \"layer_types\" is {x}, not a list of layer kinds"))),
    };
    for (i, k) in kinds.iter().enumerate() {
        let allowed = match k {
            LayerKind::Full => true,
            LayerKind::Sliding => SLIDING_ARCHS.contains(&arch),
            LayerKind::Linear => HYBRID_ARCHS.contains(&arch),
        };
        if !allowed {
            return Err(ModelError::Input(format!(
                "{source}: field \"layer_types\" entry {i} is {:?}, which model_type {arch:?} does not have; servetune cannot model it",
                k.name()
            )));
        }
    }
    let count = |want: LayerKind| kinds.iter().filter(|k| **k == want).count() as u32;
    Ok(LayerCounts { full: count(LayerKind::Full), sliding: count(LayerKind::Sliding), linear: count(LayerKind::Linear) })
}

/// One `layer_types` entry. Two spellings are architecture-specific: GLM-5.2's
/// "deepseek_sparse_attention" (full attention read through the DSA indexer's top-k, on a model
/// with an indexer) and Llama 4's "chunked_attention" (newer transformers write Llama 4's layer
/// kinds out: its chunked layers, [`llama4_layer_kinds`]).
fn layer_kind(t: &Value, i: usize, source: &str, arch: &str, dsa: bool) -> Result<LayerKind, ModelError> {
    match t.as_str() {
        Some("full_attention") => Ok(LayerKind::Full),
        Some("sliding_attention") => Ok(LayerKind::Sliding),
        Some("linear_attention") => Ok(LayerKind::Linear),
        Some("deepseek_sparse_attention") if dsa => Ok(LayerKind::Full),
        Some("chunked_attention") if arch == "llama4" => Ok(LayerKind::Sliding),
        _ => Err(ModelError::Input(format!(
            "{source}: field \"layer_types\" entry {i} is {t}, which servetune does not understand (known: full_attention, sliding_attention, linear_attention{}{})",
            if dsa { ", deepseek_sparse_attention" } else { "" },
            if arch == "llama4" { ", chunked_attention" } else { "" }
        ))),
    }
}

fn default_layer_kinds(v: &Value, source: &str, arch: &str, layers: u32) -> Result<LayerCounts, ModelError> {
    let all = |kind: LayerKind| LayerCounts {
        full: if kind == LayerKind::Full { layers } else { 0 },
        sliding: if kind == LayerKind::Sliding { layers } else { 0 },
        linear: 0,
    };
    Ok(match arch {
        _ if HYBRID_ARCHS.contains(&arch) => {
            let every = need(v, &["full_attention_interval"], source, arch)?;
            if every == 0 {
                return Err(ModelError::Input(format!("{source}: field \"full_attention_interval\" is 0: it must be at least 1")));
            }
            LayerCounts { full: layers / every, sliding: 0, linear: layers - layers / every }
        }
        "llama4" => llama4_layer_kinds(v, source, layers)?,
        // Layer i slides when i is even (gpt-oss; Gemma 2's decoder layers alike).
        "gpt_oss" | "gemma2" => LayerCounts { full: layers / 2, sliding: layers - layers / 2, linear: 0 },
        // Gemma 3 without `layer_types`: layer i is global when (i + 1) is a multiple of
        // `sliding_window_pattern` (6 when absent, transformers' Gemma3TextConfig), else it slides.
        "gemma3" => {
            let every = field(v, &["sliding_window_pattern"], source)?.unwrap_or(6);
            if every == 0 {
                return Err(ModelError::Input(format!("{source}: field \"sliding_window_pattern\" is 0: it must be at least 1")));
            }
            LayerCounts { full: layers / every, sliding: layers - layers / every, linear: 0 }
        }
        "mistral" | "mixtral" | "phi3" if field(v, &["sliding_window"], source)?.is_some() => all(LayerKind::Sliding),
        _ => all(LayerKind::Full),
    })
}

/// The window of the sliding layers. A `sliding_window` on an architecture without sliding layers
/// is refused (Qwen's configs carry one that `use_sliding_window: false` leaves off; `true` is
/// refused: its `max_window_layers` split is not modelled).
fn read_sliding_window(v: &Value, source: &str, arch: &str, counts: LayerCounts) -> Result<Option<u32>, ModelError> {
    // Llama 4's chunked layers ([`llama4_layer_kinds`]) attend within `attention_chunk_size`.
    let key = if arch == "llama4" { "attention_chunk_size" } else { "sliding_window" };
    let window = field(v, &[key], source)?;
    if counts.sliding > 0 {
        return match window {
            Some(w) if w > 0 => Ok(Some(w)),
            Some(_) => Err(ModelError::Input(format!("{source}: field {key:?} is 0: sliding layers need a window of at least 1 token"))),
            None => Err(ModelError::Input(format!(
                "{source}: model_type {arch:?} has {} sliding-window layers but no field {key:?}",
                counts.sliding
            ))),
        };
    }
    let Some(w) = window else { return Ok(None) };
    if OPT_IN_SLIDING_ARCHS.contains(&arch) {
        return match v.get("use_sliding_window").and_then(Value::as_bool) {
            Some(true) => Err(ModelError::Input(format!(
                "{source}: field \"use_sliding_window\" is true (window {w}): Qwen's per-layer sliding window (max_window_layers) is not modelled; set it to false"
            ))),
            _ => Ok(None),
        };
    }
    if SLIDING_ARCHS.contains(&arch) {
        return Ok(None);
    }
    Err(ModelError::Input(format!(
        "{source}: field \"sliding_window\" is {w}, but model_type {arch:?} has no sliding-window layers; servetune cannot model it (remove the field if it is unused)"
    )))
}

/// Layers running the DSA indexer, from `indexer_types` (one "full" or "shared" per layer: GLM-5.2
/// runs the indexer in the "full" layers and the "shared" ones reuse its top-k); all layers without
/// it. An `index_topk_freq` above 1 without that list is refused: which layers share is not
/// stated.
fn read_indexer_layers(v: &Value, source: &str, layers: u32) -> Result<u32, ModelError> {
    let bad = |k: &str, why: String| Err(ModelError::Input(format!("{source}: field {k:?} {why}")));
    match v.get("indexer_types").filter(|x| !x.is_null()) {
        None => match field(v, &["index_topk_freq"], source)? {
            Some(f) if f > 1 => {
                bad("index_topk_freq", format!("is {f}, but no \"indexer_types\" says which layers share the indexer's top-k"))
            }
            _ => Ok(layers),
        },
        Some(Value::Array(a)) if a.len() == layers as usize => {
            let mut full = 0;
            for (i, t) in a.iter().enumerate() {
                match t.as_str() {
                    Some("full") => full += 1,
                    Some("shared") if full > 0 => {}
                    Some("shared") => return bad("indexer_types", format!("entry {i} is \"shared\" before any \"full\" layer")),
                    _ => {
                        return bad("indexer_types", format!("entry {i} is {t}, which servetune does not understand (known: full, shared)"))
                    }
                }
            }
            Ok(full)
        }
        Some(Value::Array(a)) => {
            bad("indexer_types", format!("has {} entries but \"num_hidden_layers\" is {layers}: give one per layer", a.len()))
        }
        Some(x) => bad("indexer_types", format!("is {x}, not a list")),
    }
}

/// Gated DeltaNet's shape (Qwen3-Next, Qwen3.5).
fn read_linear(v: &Value, source: &str, arch: &str) -> Result<LinearAttention, ModelError> {
    let state_bytes = match v.get("mamba_ssm_dtype") {
        None | Some(Value::Null) => 2,
        Some(x) => match x.as_str() {
            Some("float32") => 4,
            Some("bfloat16" | "float16") => 2,
            _ => {
                return Err(ModelError::Input(format!(
                    "{source}: field \"mamba_ssm_dtype\" is {x}, which servetune does not understand (known: float32, bfloat16, float16)"
                )))
            }
        },
    };
    let la = LinearAttention {
        key_heads: need(v, &["linear_num_key_heads"], source, arch)?,
        value_heads: need(v, &["linear_num_value_heads"], source, arch)?,
        key_head_dim: need(v, &["linear_key_head_dim"], source, arch)?,
        value_head_dim: need(v, &["linear_value_head_dim"], source, arch)?,
        conv_kernel: need(v, &["linear_conv_kernel_dim"], source, arch)?,
        state_bytes,
    };
    let sizes = [
        ("linear_num_key_heads", la.key_heads),
        ("linear_num_value_heads", la.value_heads),
        ("linear_key_head_dim", la.key_head_dim),
        ("linear_value_head_dim", la.value_head_dim),
        ("linear_conv_kernel_dim", la.conv_kernel),
    ];
    if let Some((name, _)) = sizes.iter().find(|(_, x)| *x == 0) {
        return Err(ModelError::Input(format!("{source}: field {name:?} is 0: it must be at least 1")));
    }
    if !la.value_heads.is_multiple_of(la.key_heads) {
        return Err(ModelError::Input(format!(
            "{source}: field \"linear_num_value_heads\" is {}: it must be a multiple of linear_num_key_heads {}",
            la.value_heads, la.key_heads
        )));
    }
    Ok(la)
}

/// Whether a MiniMax-M2 config's q/k norm spans a layer's heads
/// ([`ModelSpec::qk_norm_across_heads`]): `qk_norm_type` "per_layer" with `use_qk_norm`;
/// "per_head" (or no field) is a local norm. Any other value is refused, naming the field. Other
/// architectures' configs are not read for it (their engines' norms are per head).
fn read_qk_norm(v: &Value, source: &str) -> Result<bool, ModelError> {
    let used = v.get("use_qk_norm").and_then(Value::as_bool).unwrap_or(false);
    match v.get("qk_norm_type").filter(|x| !x.is_null()) {
        None => Ok(false),
        Some(Value::String(t)) if t == "per_layer" => Ok(used),
        Some(Value::String(t)) if t == "per_head" => Ok(false),
        Some(t) => Err(ModelError::Input(format!(
            "{source}: field \"qk_norm_type\" is {t}: servetune models \"per_layer\" (one norm over all heads) and \"per_head\""
        ))),
    }
}

/// MiniMax's `attn_type_list`: 1 is softmax attention in that layer, 0 MiniMax-01's lightning
/// (linear) attention, which is not modelled and is refused.
fn check_attn_type_list(v: &Value, source: &str, arch: &str, layers: u32) -> Result<(), ModelError> {
    let Some(list) = v.get("attn_type_list").filter(|x| !x.is_null()) else { return Ok(()) };
    let bad = |why: String| Err(ModelError::Input(format!("{source}: field \"attn_type_list\" {why}")));
    if arch != "minimax_m2" {
        return bad(format!("is set, but model_type {arch:?} has no such field; servetune cannot model it"));
    }
    let Some(a) = list.as_array() else { return bad(format!("is {list}, not a list")) };
    if a.len() != layers as usize {
        return bad(format!("has {} entries but \"num_hidden_layers\" is {layers}", a.len()));
    }
    match a.iter().enumerate().find(|(_, t)| t.as_u64() != Some(1)) {
        Some((i, t)) => bad(format!(
            "entry {i} is {t}: only 1 (softmax attention) is modelled; 0 is MiniMax lightning linear attention, which servetune cannot model"
        )),
        None => Ok(()),
    }
}

fn read_moe(v: &Value, source: &str, arch: &str) -> Result<Option<Moe>, ModelError> {
    let experts = match field(v, &["n_routed_experts", "num_experts", "num_local_experts"], source)? {
        Some(e) if e > 1 => e,
        _ => return Ok(None),
    };
    let top_k = need(v, &["num_experts_per_tok", "experts_per_token", "moe_top_k"], source, arch)?;
    let expert_ffn = field(v, &["moe_intermediate_size", "intermediate_size"], source)?.ok_or_else(|| {
        ModelError::Input(format!("{source}: model_type {arch:?} has experts but no \"moe_intermediate_size\" or \"intermediate_size\""))
    })?;
    // Every Llama 4 MoE layer has one shared expert of an expert's size (transformers' Llama4TextMoe).
    let shared_default = if arch == "llama4" { 1 } else { 0 };
    let shared_experts = field(v, &["n_shared_experts"], source)?.unwrap_or(shared_default);
    let shared_ffn = field(v, &["shared_expert_intermediate_size"], source)?.unwrap_or(shared_experts.saturating_mul(expert_ffn));
    Ok(Some(Moe {
        experts,
        top_k,
        // Qwen2-MoE names no shared-expert count, only its size: one block.
        shared_experts: if shared_experts == 0 && shared_ffn > 0 { 1 } else { shared_experts },
        expert_ffn,
        shared_ffn,
        bias: arch == "gpt_oss",
    }))
}

/// How many layers have each part, for reading which parts a checkpoint left unquantized.
#[derive(Debug, Clone, Copy)]
struct LayerShape {
    layers: u32,
    dense: u32,
    moe: u32,
}

/// The checkpoint format from `quantization_config` (None: unquantized), and each part's where a
/// checkpoint quantizes them differently (ModelOpt `MIXED_PRECISION`, an fbgemm FP8 export that
/// leaves parts in BF16). A ModelOpt checkpoint is named by `quant_method` "modelopt" or, in older
/// exports without one, by `producer.name`.
fn read_checkpoint(root: &Value, source: &str, shape: LayerShape) -> Result<(Option<Dtype>, Option<PartFormats>), ModelError> {
    let moe = shape.moe > 0;
    let Some(q) = root.get("quantization_config").filter(|q| !q.is_null()) else {
        return Ok((None, None));
    };
    let producer = q.get("producer").and_then(|p| p.get("name")).and_then(Value::as_str);
    let method = match q.get("quant_method").and_then(Value::as_str).unwrap_or("") {
        "" if producer == Some("modelopt") => "modelopt",
        m => m,
    };
    let algo = q.get("quant_algo").and_then(Value::as_str).unwrap_or("").to_ascii_lowercase();
    let one = |d: Dtype| Ok((Some(d), None));
    match (method, algo.as_str()) {
        ("fp8", _) => one(Dtype::Fp8),
        ("fbgemm_fp8", _) => {
            let parts = fbgemm_parts(q, shape);
            let uniform = [parts.attention, parts.dense_ffn, parts.experts, parts.shared_experts].iter().all(|d| *d == Dtype::Fp8);
            Ok((Some(parts.headline(moe)), (!uniform).then_some(parts)))
        }
        ("mxfp4", _) => one(Dtype::Mxfp4),
        ("modelopt", "mixed_precision") => {
            let parts = modelopt_mixed(q, source)?;
            Ok((Some(parts.headline(moe)), Some(parts)))
        }
        ("modelopt", a) => match modelopt_algo(a) {
            Some(d) => one(d),
            None => Err(ModelError::Input(format!(
                "{source}: field \"quantization_config.quant_algo\" is {:?}, which servetune does not model for a ModelOpt checkpoint (known: NVFP4, W4A16_NVFP4, FP8, MIXED_PRECISION); remove quantization_config and give --quant",
                q.get("quant_algo").and_then(Value::as_str).unwrap_or("")
            ))),
        },
        ("awq" | "gptq", _) => one(Dtype::Int4),
        ("compressed-tensors", _) => compressed_tensors(q, source).map(|d| (Some(d), None)),
        _ => Err(ModelError::Input(format!(
            "{source}: field \"quantization_config.quant_method\" {method:?} is not understood (known: fp8, fbgemm_fp8, mxfp4, modelopt, awq, gptq, compressed-tensors); remove it and give --quant"
        ))),
    }
}

/// An error naming `quantization_config.<key>` in `source`, with the way out.
fn quant_error(source: &str, key: &str, why: &str) -> ModelError {
    ModelError::Input(format!("{source}: field \"quantization_config.{key}\" {why}; remove quantization_config and give --quant"))
}

/// `quantization_config.<key>` as a non-empty object, or an error naming it.
fn quant_object<'a>(q: &'a Value, key: &str, source: &str) -> Result<&'a serde_json::Map<String, Value>, ModelError> {
    q.get(key).and_then(Value::as_object).filter(|o| !o.is_empty()).ok_or_else(|| quant_error(source, key, "is missing or empty"))
}

/// A ModelOpt `quant_algo` (lower case) as a weight format. W4A16_NVFP4 keeps NVFP4 weights with
/// bf16 activations: priced as INT4 weight-only (4-bit weights, bf16 GEMMs; 0.53 against 0.56
/// bytes per weight).
fn modelopt_algo(a: &str) -> Option<Dtype> {
    match a {
        "nvfp4" => Some(Dtype::Nvfp4),
        "w4a16_nvfp4" => Some(Dtype::Int4),
        "fp8" => Some(Dtype::Fp8),
        _ => None,
    }
}

/// A ModelOpt `MIXED_PRECISION` checkpoint's format per part, from `quantized_layers` (module name
/// -> its `quant_algo`): a module under `shared_expert` is a shared expert's, under `experts` a
/// routed expert's, under `self_attn`, `linear_attn` or `attn` attention's, under `mlp` or
/// `feed_forward` a dense FFN's, `lm_head` the LM head's; a part none of whose modules is listed
/// stays BF16. Routers and gates (`gate`, `router`, `shared_expert_gate`), the vision tower and the
/// MTP layer are not modelled and are passed over. A part whose modules disagree, a module of no
/// known part, or an algorithm servetune does not model is refused, naming it.
fn modelopt_mixed(q: &Value, source: &str) -> Result<PartFormats, ModelError> {
    let bad = |why: String| quant_error(source, "quantized_layers", &why);
    let layers = quant_object(q, "quantized_layers", source)?;
    let mut parts: [Option<Dtype>; 5] = [None; 5];
    for (module, spec) in layers {
        let part = match module_part(module) {
            ModulePart::Part(p) => p,
            ModulePart::PassedOver => continue,
            ModulePart::Unknown => return Err(bad(format!("lists {module:?}, which is not an attention, FFN or expert module"))),
        };
        let algo = spec.get("quant_algo").and_then(Value::as_str).unwrap_or("");
        let d = modelopt_algo(&algo.to_ascii_lowercase()).ok_or_else(|| {
            bad(format!("gives {module:?} quant_algo {algo:?}, which servetune does not model (known: NVFP4, W4A16_NVFP4, FP8)"))
        })?;
        match parts[part as usize] {
            Some(have) if have != d => {
                return Err(bad(format!("mixes {} and {} within the {}", have.name(), d.name(), part.name())));
            }
            _ => parts[part as usize] = Some(d),
        }
    }
    let bf16 = |p: Part| parts[p as usize].unwrap_or(Dtype::Bf16);
    Ok(PartFormats {
        attention: bf16(Part::Attention),
        dense_ffn: bf16(Part::DenseFfn),
        experts: bf16(Part::Experts),
        shared_experts: bf16(Part::SharedExperts),
        lm_head: parts[Part::LmHead as usize],
    })
}

/// A part of the model a checkpoint quantizes on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Attention,
    DenseFfn,
    Experts,
    SharedExperts,
    LmHead,
}

impl Part {
    /// How errors name it.
    fn name(self) -> &'static str {
        match self {
            Part::Attention => "attention",
            Part::DenseFfn => "dense FFN",
            Part::Experts => "routed experts",
            Part::SharedExperts => "shared experts",
            Part::LmHead => "LM head",
        }
    }
}

/// Which part of the model a checkpoint's module name belongs to.
enum ModulePart {
    /// One of the parts the model prices.
    Part(Part),
    /// A module the model does not price: a router or gate, the vision tower, the MTP layer.
    PassedOver,
    /// None of those.
    Unknown,
}

/// A module's part, by its name's segments (`model.layers.3.mlp.experts.7.down_proj`: routed
/// experts; `...feed_forward.shared_expert...`: shared experts; `...self_attn...`, `linear_attn`
/// or `attn`: attention; `mlp` or `feed_forward`: dense FFN; a last segment `lm_head`: the head).
fn module_part(module: &str) -> ModulePart {
    const PASSED_OVER: [&str; 8] =
        ["visual", "vision_model", "vision_tower", "multi_modal_projector", "mtp", "gate", "router", "shared_expert_gate"];
    let segs: Vec<&str> = module.split('.').collect();
    let has = |s: &str| segs.contains(&s);
    if PASSED_OVER.iter().any(|p| has(p)) {
        ModulePart::PassedOver
    } else if segs.last() == Some(&"lm_head") {
        ModulePart::Part(Part::LmHead)
    } else if has("shared_expert") || has("shared_experts") {
        ModulePart::Part(Part::SharedExperts)
    } else if has("experts") {
        ModulePart::Part(Part::Experts)
    } else if has("self_attn") || has("linear_attn") || has("attn") {
        ModulePart::Part(Part::Attention)
    } else if has("mlp") || has("feed_forward") {
        ModulePart::Part(Part::DenseFfn)
    } else {
        ModulePart::Unknown
    }
}

/// An fbgemm FP8 checkpoint's parts (Meta's FP8 exports: FP8 weights with a scale per output
/// channel, activations quantized per token at run time). Every linear layer is FP8 except the
/// modules `modules_to_not_convert` lists: a part stays BF16 when the list names it in at least
/// half the layers that have it (layer indices read from `layers.N`), so the few first and last
/// layers a checkpoint keeps in BF16 leave the rest FP8. The LM head stays BF16 (neither
/// transformers nor vLLM converts it); names of no known part are passed over.
fn fbgemm_parts(q: &Value, shape: LayerShape) -> PartFormats {
    let mut listed: [std::collections::BTreeSet<u32>; 5] = Default::default();
    for m in q.get("modules_to_not_convert").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        let segs: Vec<&str> = m.split('.').collect();
        let layer = segs.windows(2).find(|w| w[0] == "layers").and_then(|w| w[1].parse::<u32>().ok());
        if let (ModulePart::Part(p), Some(l)) = (module_part(m), layer) {
            listed[p as usize].insert(l);
        }
    }
    let fmt = |p: Part, with: u32| if with > 0 && 2 * listed[p as usize].len() as u64 >= with as u64 { Dtype::Bf16 } else { Dtype::Fp8 };
    PartFormats {
        attention: fmt(Part::Attention, shape.layers),
        dense_ffn: fmt(Part::DenseFfn, shape.dense),
        experts: fmt(Part::Experts, shape.moe),
        shared_experts: fmt(Part::SharedExperts, shape.moe),
        lm_head: None,
    }
}

/// A compressed-tensors checkpoint's weight format, from its `config_groups`' weights (every group
/// must agree): 4-bit integers (Kimi-K2-Thinking's W4A16), 4-bit floats (NVFP4), 8-bit floats (FP8).
fn compressed_tensors(q: &Value, source: &str) -> Result<Dtype, ModelError> {
    let bad = |why: String| quant_error(source, "config_groups", &why);
    let groups = quant_object(q, "config_groups", source)?;
    let mut found: Option<Dtype> = None;
    for (name, g) in groups {
        let w = g.get("weights").ok_or_else(|| bad(format!("group {name:?} has no \"weights\"")))?;
        let bits = w.get("num_bits").and_then(Value::as_u64);
        let kind = w.get("type").and_then(Value::as_str);
        let d = match (bits, kind) {
            (Some(4), Some("int")) => Dtype::Int4,
            (Some(4), Some("float")) => Dtype::Nvfp4,
            (Some(8), Some("float")) => Dtype::Fp8,
            _ => {
                let bits = bits.map_or("unstated".to_string(), |b| b.to_string());
                return Err(bad(format!(
                    "group {name:?} has {bits}-bit {:?} weights, which servetune does not model",
                    kind.unwrap_or("untyped")
                )));
            }
        };
        if found.is_some_and(|f| f != d) {
            return Err(bad("mixes weight formats across groups".into()));
        }
        found = Some(d);
    }
    found.ok_or_else(|| bad("names no weights".into()))
}

impl ModelSpec {
    /// Refuses an architecture no model can have, naming the field in `source`: zero sizes, more
    /// KV heads than heads (or a count that does not divide them), top-k above the expert count,
    /// more dense layers than layers.
    pub fn validate(&self, source: &str) -> Result<(), ModelError> {
        let bad = |field: &str, why: String| Err(ModelError::Input(format!("{source}: field {field:?} {why}")));
        let positive = [
            ("hidden_size", self.hidden),
            ("num_hidden_layers", self.layers),
            ("vocab_size", self.vocab),
            ("max_position_embeddings", self.max_context),
        ];
        for (name, v) in positive {
            if v == 0 {
                return bad(name, "is 0: it must be at least 1".into());
            }
        }
        if self.dense_layers > 0 && self.ffn == 0 {
            return bad("intermediate_size", "is 0, but the model has dense FFN layers".into());
        }
        if self.dense_layers > self.layers {
            return bad("first_k_dense_replace", format!("is {}, more than the {} layers", self.dense_layers, self.layers));
        }
        self.validate_attention(source)?;
        if let Some(m) = self.moe {
            if m.top_k == 0 || m.top_k > m.experts {
                return bad("num_experts_per_tok", format!("is {}: it must be from 1 to the {} experts", m.top_k, m.experts));
            }
            if m.expert_ffn == 0 {
                return bad("moe_intermediate_size", "is 0: experts need a size".into());
            }
        }
        if let Some(d) = self.dsa {
            if d.index_heads == 0 || d.index_head_dim == 0 || d.topk == 0 {
                return bad("index_n_heads\", \"index_head_dim\" or \"index_topk", "is 0: the indexer needs all three".into());
            }
            if d.indexer_layers == 0 {
                return bad("indexer_types", "names no \"full\" layer: some layer must run the indexer".into());
            }
        }
        Ok(())
    }

    fn validate_attention(&self, source: &str) -> Result<(), ModelError> {
        let bad = |field: &str, why: String| Err(ModelError::Input(format!("{source}: field {field:?} {why}")));
        match self.attention {
            Attention::Gqa { heads, kv_heads, head_dim, .. } => {
                if heads == 0 {
                    return bad("num_attention_heads", "is 0: a model needs at least one head".into());
                }
                if head_dim == 0 {
                    return bad("head_dim", "is 0 (or hidden_size / num_attention_heads is 0)".into());
                }
                if kv_heads == 0 || kv_heads > heads || !heads.is_multiple_of(kv_heads) {
                    return bad(
                        "num_key_value_heads",
                        format!("is {kv_heads}: it must be from 1 to {heads} and divide num_attention_heads"),
                    );
                }
            }
            Attention::Mla { heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim } => {
                let sizes = [
                    ("num_attention_heads", heads),
                    ("kv_lora_rank", kv_lora_rank),
                    ("qk_nope_head_dim", qk_nope_head_dim),
                    ("qk_rope_head_dim", qk_rope_head_dim),
                    ("v_head_dim", v_head_dim),
                    ("q_lora_rank", q_lora_rank.unwrap_or(1)),
                ];
                if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
                    return bad(name, "is 0: it must be at least 1".into());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn within(got: f64, want: f64, tol: f64) -> bool {
        (got - want).abs() / want < tol
    }

    /// Published totals and active counts. Vendors count "active" differently, so each figure is
    /// checked against the count its vendor uses: DeepSeek, Qwen, Mistral and Meta include the
    /// embedding table and the LM head; OpenAI's gpt-oss model card counts the LM head but not the
    /// embedding; Z.ai's "40B active" for GLM-5 matches the count without both. New entries: Kimi-K2
    /// (Moonshot's tech report: 1.04T total, 32B active, which matches the count with the LM head);
    /// MiniMax-M2 (230B, 10B active: without embedding and LM head); GLM-4.5 and GLM-4.6 (Z.ai:
    /// 355B, 32B active, without both); gpt-oss-20b (OpenAI's model card: 20.91B, 3.61B active);
    /// Qwen3.5-397B-A17B (Qwen: 397B, 17B active).
    #[test]
    fn parameter_counts_match_published_totals_within_two_percent() {
        let cases: &[(&str, f64, f64, &str)] = &[
            ("glm-5", 744e9, 40e9, "non_embedding"),
            ("deepseek-v3", 671e9, 37e9, "all"),
            ("qwen3-235b-a22b", 235e9, 22e9, "all"),
            ("qwen3-30b-a3b", 30.5e9, 3.3e9, "all"),
            ("llama-3.1-70b", 70.6e9, 70.6e9, "all"),
            ("llama-3.1-8b", 8.03e9, 8.03e9, "all"),
            ("mixtral-8x7b", 46.7e9, 12.9e9, "all"),
            ("gpt-oss-120b", 116.83e9, 5.13e9, "lm_head"),
            ("gpt-oss-20b", 20.91e9, 3.61e9, "lm_head"),
            ("kimi-k2", 1.04e12, 32e9, "lm_head"),
            ("minimax-m2", 230e9, 10e9, "non_embedding"),
            ("glm-4.5", 355e9, 32e9, "non_embedding"),
            ("glm-4.6", 355e9, 32e9, "non_embedding"),
            // Meta's model cards: 17B active of 109B (Scout) and of 400B (Maverick), the vision
            // encoder (not modelled) included.
            ("llama-4-scout", 109e9, 17e9, "all"),
            ("llama-4-maverick", 400e9, 17e9, "all"),
        ];
        for &(name, total, active, conv) in cases {
            let p = catalog(name).expect("catalog").params();
            let a = match conv {
                "all" => p.active,
                "lm_head" => p.active_non_embedding + p.lm_head,
                _ => p.active_non_embedding,
            };
            assert!(within(p.total, total, 0.02), "{name}: total {:.2}B vs {:.2}B", p.total / 1e9, total / 1e9);
            assert!(within(a, active, 0.02), "{name}: active {:.2}B vs {:.2}B ({conv})", a / 1e9, active / 1e9);
        }
    }

    /// Qwen publishes Qwen3-Next-80B-A3B as "80B in total, 79B non-embedding, 3B activated" and
    /// Qwen3.5-397B-A17B as "397B in total, 17B activated": the totals are checked within 2%, the
    /// active counts to the published figures' own precision (they are rounded to whole billions:
    /// the counts here are 3.25B without embeddings and 17.35B with them).
    #[test]
    fn qwen_hybrid_counts_match_the_model_cards() {
        let p = catalog("qwen3-next-80b-a3b").expect("catalog").params();
        assert!(within(p.total, 80e9, 0.02), "total {:.2}B", p.total / 1e9);
        assert!(within(p.total - p.embeddings - p.lm_head, 79e9, 0.02), "non-embedding {:.2}B", (p.total - p.embeddings - p.lm_head) / 1e9);
        assert!((2.5e9..3.5e9).contains(&p.active_non_embedding), "active {:.2}B", p.active_non_embedding / 1e9);
        let p = catalog("qwen3.5-397b-a17b").expect("catalog").params();
        assert!(within(p.total, 397e9, 0.02), "total {:.2}B", p.total / 1e9);
        assert!((16.5e9..17.5e9).contains(&p.active), "active {:.2}B", p.active / 1e9);
    }

    #[test]
    fn hybrid_and_sliding_layers_are_read_from_the_configs() {
        let next = catalog("qwen3-next-80b-a3b").expect("next");
        assert_eq!(next.layer_counts, LayerCounts { full: 12, sliding: 0, linear: 36 });
        let la = next.linear.expect("linear attention");
        assert_eq!((la.key_heads, la.value_heads, la.key_head_dim, la.value_head_dim, la.state_bytes), (16, 32, 128, 128, 2));
        let q35 = catalog("qwen3.5-397b-a17b").expect("3.5");
        assert_eq!(q35.layer_counts, LayerCounts { full: 15, sliding: 0, linear: 45 });
        assert_eq!(q35.linear.expect("linear").state_bytes, 4, "mamba_ssm_dtype float32");
        assert!(matches!(q35.attention, Attention::Gqa { gate: true, .. }));
        let oss = catalog("gpt-oss-120b").expect("oss");
        assert_eq!((oss.layer_counts, oss.sliding_window), (LayerCounts { full: 18, sliding: 18, linear: 0 }, Some(128)));
        assert_eq!(catalog("kimi-k2").expect("kimi").moe.expect("moe").experts, 384);
        assert!(matches!(catalog("kimi-k2").expect("kimi").attention, Attention::Mla { .. }));
        assert_eq!(catalog("glm-4.6").expect("glm").max_context, 202_752);
        // Without layer_types, Qwen3-Next's full_attention_interval places the same layers.
        let mut cfg: Value = serde_json::from_str(include_str!("../data/models/qwen3.5-397b-a17b.json")).expect("json");
        cfg["text_config"].as_object_mut().expect("text_config").remove("layer_types");
        let derived = from_hf_config(&cfg.to_string(), "c.json").expect("derived");
        assert_eq!(derived.layer_counts, q35.layer_counts);
    }

    #[test]
    fn glm5_breakdown_is_dominated_by_routed_experts() {
        let p = catalog("glm-5").expect("glm").params();
        assert!(p.routed_experts / p.total > 0.97);
        assert!((p.per_expert - 3.0 * 6144.0 * 2048.0).abs() < 1.0);
    }

    #[test]
    fn hf_config_reads_deepseek_v3_like_the_catalog() {
        let cfg = r#"{"model_type":"deepseek_v3","hidden_size":7168,"num_hidden_layers":61,"vocab_size":129280,"num_attention_heads":128,
            "q_lora_rank":1536,"kv_lora_rank":512,"qk_nope_head_dim":128,"qk_rope_head_dim":64,"v_head_dim":128,"n_routed_experts":256,
            "num_experts_per_tok":8,"n_shared_experts":1,"moe_intermediate_size":2048,"intermediate_size":18432,"first_k_dense_replace":3,
            "max_position_embeddings":163840}"#;
        let a = from_hf_config(cfg, "config.json").expect("parse");
        let b = catalog("deepseek-v3").expect("catalog");
        assert!((a.params().total - b.params().total).abs() < 1.0);
    }

    #[test]
    fn unsupported_architecture_names_the_field() {
        let e = from_hf_config(r#"{"model_type":"mamba"}"#, "c.json").expect_err("unsupported");
        assert!(e.to_string().contains("\"model_type\""), "{e}");
        let e = from_hf_config(r#"{"model_type":"llama","hidden_size":4096}"#, "c.json").expect_err("missing");
        assert!(e.to_string().contains("\"num_hidden_layers\""), "{e}");
    }

    #[test]
    fn unknown_catalog_name_lists_the_catalog() {
        let e = catalog("gpt-5").expect_err("unknown");
        assert!(e.to_string().contains("glm-5, deepseek-v3"), "{e}");
    }

    #[test]
    fn every_catalog_config_names_its_checkpoint_and_defaults_to_it() {
        for name in catalog_names() {
            let e = catalog_entry(name).expect("entry");
            let spec = catalog(name).expect("config");
            assert!(!e.checkpoints.is_empty(), "{name}");
            assert_eq!(spec.checkpoint.unwrap_or(Dtype::Bf16), e.checkpoints[0].quant, "{name}: the config's format is the default");
        }
        assert_eq!(catalog("glm-5").expect("glm").checkpoint, Some(Dtype::Fp8));
        assert_eq!(catalog("gpt-oss-120b").expect("oss").checkpoint, Some(Dtype::Mxfp4));
    }

    fn llama_with(extra: &str) -> String {
        format!(
            r#"{{"model_type":"llama","hidden_size":4096,"num_hidden_layers":32,"vocab_size":128256,"num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":14336{extra}}}"#
        )
    }

    #[test]
    fn impossible_architectures_are_refused_naming_the_field() {
        let cases = [
            (llama_with(r#","num_hidden_layers":0"#), "\"num_hidden_layers\" is 0"),
            (llama_with(r#","hidden_size":0"#), "\"hidden_size\" is 0"),
            (llama_with(r#","num_attention_heads":0"#), "\"num_attention_heads\" is 0"),
            (llama_with(r#","num_key_value_heads":64"#), "\"num_key_value_heads\" is 64"),
            (llama_with(r#","num_key_value_heads":3"#), "divide num_attention_heads"),
            (llama_with(r#","vocab_size":-5"#), "\"vocab_size\" is -5, not a whole number"),
            (llama_with(r#","hidden_size":1e20"#), "\"hidden_size\""),
        ];
        for (cfg, needle) in cases {
            let e = from_hf_config(&cfg, "c.json").expect_err(needle);
            assert!(e.to_string().contains(needle) && e.to_string().starts_with("c.json: "), "{e}");
        }
    }

    #[test]
    fn top_k_above_the_expert_count_is_refused() {
        let cfg = r#"{"model_type":"mixtral","hidden_size":4096,"num_hidden_layers":32,"vocab_size":32000,"num_attention_heads":32,
            "num_key_value_heads":8,"intermediate_size":14336,"num_local_experts":8,"num_experts_per_tok":200}"#;
        let e = from_hf_config(cfg, "m.json").expect_err("top-k");
        assert!(e.to_string().contains("\"num_experts_per_tok\" is 200: it must be from 1 to the 8 experts"), "{e}");
        let neg = cfg.replace("\"num_local_experts\":8", "\"num_local_experts\":-8");
        assert!(from_hf_config(&neg, "m.json").expect_err("negative").to_string().contains("num_local_experts"));
    }

    #[test]
    fn an_unknown_quantization_method_is_refused() {
        let e = from_hf_config(&llama_with(r#","quantization_config":{"quant_method":"bitsandbytes"}"#), "q.json").expect_err("quant");
        assert!(e.to_string().contains("quantization_config.quant_method"), "{e}");
    }

    fn gpt_oss_with(extra: &str) -> String {
        format!(
            r#"{{"model_type":"gpt_oss","hidden_size":2880,"num_hidden_layers":4,"vocab_size":201088,"num_attention_heads":64,"num_key_value_heads":8,"head_dim":64,"num_local_experts":32,"num_experts_per_tok":4,"intermediate_size":2880,"sliding_window":128{extra}}}"#
        )
    }

    fn qwen3_next_with(extra: &str) -> String {
        format!(
            r#"{{"model_type":"qwen3_next","hidden_size":2048,"num_hidden_layers":8,"vocab_size":151936,"num_attention_heads":16,"num_key_value_heads":2,"head_dim":256,"num_experts":512,"num_experts_per_tok":10,"moe_intermediate_size":512,"shared_expert_intermediate_size":512,"full_attention_interval":4,"linear_num_key_heads":16,"linear_num_value_heads":32,"linear_key_head_dim":128,"linear_value_head_dim":128,"linear_conv_kernel_dim":4{extra}}}"#
        )
    }

    /// Every architecture feature the model cannot express is refused with the field and the
    /// value it did not understand, never approximated.
    #[test]
    fn unmodellable_layers_and_windows_are_refused_naming_the_field_and_value() {
        let cases = [
            (
                gpt_oss_with(r#","layer_types":["sliding_attention","full_attention","sliding_attention","chunked_attention"]"#),
                "\"layer_types\" entry 3 is \"chunked_attention\"",
            ),
            (
                gpt_oss_with(r#","layer_types":["sliding_attention","full_attention"]"#),
                "\"layer_types\" has 2 entries but \"num_hidden_layers\" is 4",
            ),
            (
                gpt_oss_with(r#","layer_types":["linear_attention","full_attention","sliding_attention","full_attention"]"#),
                "entry 0 is \"linear_attention\", which model_type \"gpt_oss\" does not have",
            ),
            (gpt_oss_with(r#","sliding_window":null"#), "sliding-window layers but no field \"sliding_window\""),
            (gpt_oss_with(r#","layer_types":"full""#), "\"layer_types\" is \"full\", not a list"),
            (llama_with(r#","sliding_window":4096"#), "\"sliding_window\" is 4096, but model_type \"llama\" has no sliding-window layers"),
            (llama_with(r#","layer_types":["full_attention","sliding_attention"]"#), "\"layer_types\" has 2 entries"),
            (llama_with(r#","attn_type_list":[1]"#), "\"attn_type_list\" is set, but model_type \"llama\""),
            (qwen3_next_with(r#","sliding_window":4096,"use_sliding_window":true"#), "\"use_sliding_window\" is true (window 4096)"),
            (qwen3_next_with(r#","linear_num_value_heads":null"#), "needs the field \"linear_num_value_heads\""),
            (qwen3_next_with(r#","linear_num_value_heads":24"#), "\"linear_num_value_heads\" is 24: it must be a multiple"),
            (qwen3_next_with(r#","full_attention_interval":null"#), "needs the field \"full_attention_interval\""),
            (qwen3_next_with(r#","full_attention_interval":0"#), "\"full_attention_interval\" is 0"),
            (qwen3_next_with(r#","mamba_ssm_dtype":"int8""#), "\"mamba_ssm_dtype\" is \"int8\""),
            (qwen3_next_with(r#","decoder_sparse_step":0"#), "\"decoder_sparse_step\" is 0"),
            (qwen3_next_with(r#","mlp_only_layers":"all""#), "\"mlp_only_layers\" is \"all\""),
            (
                qwen3_next_with(
                    r#","layer_types":["linear_attention","mamba","linear_attention","full_attention","linear_attention","linear_attention","linear_attention","full_attention"]"#,
                ),
                "entry 1 is \"mamba\"",
            ),
        ];
        for (cfg, needle) in cases {
            let e = from_hf_config(&cfg, "c.json").expect_err(needle);
            assert!(e.to_string().contains(needle) && e.to_string().starts_with("c.json: "), "{needle}: {e}");
        }
        // A window the config itself turns off is not a sliding layer.
        let off = from_hf_config(&qwen3_next_with(r#","sliding_window":4096,"use_sliding_window":false"#), "c.json").expect("off");
        assert_eq!((off.sliding_window, off.layer_counts.sliding), (None, 0));
    }

    #[test]
    fn minimax_lightning_attention_layers_are_refused() {
        let text = include_str!("../data/models/minimax-m2.json");
        let mut cfg: Value = serde_json::from_str(text).expect("json");
        cfg["attn_type_list"][7] = Value::from(0);
        let e = from_hf_config(&cfg.to_string(), "m.json").expect_err("lightning");
        assert!(e.to_string().contains("\"attn_type_list\" entry 7 is 0"), "{e}");
        cfg["attn_type_list"] = Value::from(vec![1; 3]);
        let e = from_hf_config(&cfg.to_string(), "m.json").expect_err("length");
        assert!(e.to_string().contains("has 3 entries but \"num_hidden_layers\" is 62"), "{e}");
    }

    #[test]
    fn minimax_qk_norm_spans_the_heads_and_other_norm_types_are_read_or_refused() {
        let text = include_str!("../data/models/minimax-m2.json");
        assert!(from_hf_config(text, "m.json").expect("minimax").qk_norm_across_heads, "per_layer spans all heads");
        let mut cfg: Value = serde_json::from_str(text).expect("json");
        cfg["qk_norm_type"] = Value::from("per_head");
        assert!(!from_hf_config(&cfg.to_string(), "m.json").expect("per_head").qk_norm_across_heads);
        cfg["qk_norm_type"] = Value::from("per_layer");
        cfg["use_qk_norm"] = Value::from(false);
        assert!(!from_hf_config(&cfg.to_string(), "m.json").expect("no norm").qk_norm_across_heads);
        cfg["qk_norm_type"] = Value::from("per_group");
        let e = from_hf_config(&cfg.to_string(), "m.json").expect_err("unknown norm type");
        assert!(e.to_string().contains("field \"qk_norm_type\" is \"per_group\""), "{e}");
        // Other architectures' configs are not read for it, whatever the field says.
        let other = from_hf_config(&qwen3_next_with(r#","qk_norm_type":"rms""#), "q.json").expect("qwen3-next with the field");
        assert!(!other.qk_norm_across_heads);
        // Models whose q/k norm is per head (Qwen3) or absent do not all-reduce it.
        assert!(!catalog("qwen3-235b-a22b").expect("qwen3").qk_norm_across_heads);
        assert!(!catalog("deepseek-v3").expect("dsv3").qk_norm_across_heads);
    }

    #[test]
    fn mistral_sliding_window_applies_to_every_layer_and_dense_qwen_layers_are_counted() {
        let m = from_hf_config(
            r#"{"model_type":"mistral","hidden_size":4096,"num_hidden_layers":32,"vocab_size":32000,"num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":14336,"sliding_window":4096}"#,
            "m.json",
        )
        .expect("mistral");
        assert_eq!((m.layer_counts.sliding, m.sliding_window), (32, Some(4096)));
        let q = from_hf_config(&qwen3_next_with(r#","mlp_only_layers":[0,5],"intermediate_size":5120"#), "q.json").expect("qwen");
        assert_eq!(q.dense_layers, 2);
        let q = from_hf_config(&qwen3_next_with(r#","decoder_sparse_step":2,"intermediate_size":5120"#), "q.json").expect("qwen");
        assert_eq!(q.dense_layers, 4);
    }

    #[test]
    fn gemma_phi3_and_glm4_configs_read_their_layer_kinds_windows_and_tied_embeddings() {
        // Gemma 3 27B (multimodal wrapper, text model under text_config, the older
        // sliding_window_pattern spelling): every sixth layer global, the rest a 1,024-token window.
        let gemma3 = r#"{"model_type":"gemma3","text_config":{"model_type":"gemma3_text","hidden_size":5376,"intermediate_size":21504,"num_hidden_layers":62,"num_attention_heads":32,"num_key_value_heads":16,"head_dim":128,"sliding_window":1024,"sliding_window_pattern":6,"vocab_size":262208,"query_pre_attn_scalar":168}}"#;
        let g = from_hf_config(gemma3, "g.json").expect("gemma3");
        assert_eq!(g.arch, "gemma3");
        assert_eq!((g.layer_counts.full, g.layer_counts.sliding, g.sliding_window), (10, 52, Some(1024)));
        assert!(g.tied_embeddings, "Gemma ties its output projection unless told otherwise");
        assert!(matches!(g.attention, Attention::Gqa { heads: 32, kv_heads: 16, head_dim: 128, .. }), "{:?}", g.attention);
        // The newer spelling, layer_types, wins over the pattern.
        let kinds: Vec<&str> = (0..62).map(|i| if i % 2 == 0 { "sliding_attention" } else { "full_attention" }).collect();
        let typed = gemma3.replace(r#""sliding_window_pattern":6"#, &format!(r#""layer_types":{}"#, serde_json::json!(kinds)));
        let g = from_hf_config(&typed, "g.json").expect("gemma3 layer_types");
        assert_eq!((g.layer_counts.full, g.layer_counts.sliding), (31, 31));
        let e = from_hf_config(&gemma3.replace(r#""sliding_window_pattern":6"#, r#""sliding_window_pattern":0"#), "g.json").expect_err("0");
        assert!(e.to_string().contains("\"sliding_window_pattern\" is 0"), "{e}");
        // Gemma 3 12B as Google ships it: no vocab_size and no head_dim under text_config (the
        // config class's 262,208 and 256 apply, not hidden / heads = 240).
        let g12 = from_hf_config(
            r#"{"model_type":"gemma3","text_config":{"model_type":"gemma3_text","hidden_size":3840,"intermediate_size":15360,"num_hidden_layers":48,"num_attention_heads":16,"num_key_value_heads":8,"sliding_window":1024}}"#,
            "g12.json",
        )
        .expect("gemma3 12b");
        assert!(matches!(g12.attention, Attention::Gqa { head_dim: 256, kv_heads: 8, .. }), "{:?}", g12.attention);
        assert_eq!((g12.vocab, g12.layer_counts.full, g12.sliding_window), (262_208, 8, Some(1024)));
        let total = g12.params().total / 1e9;
        assert!((11.6..12.0).contains(&total), "Gemma 3 12B's language model is about 11.8B: {total}");
        // Gemma 2 9B: even layers slide, a text-only config that states its tie.
        let g2 = from_hf_config(
            r#"{"model_type":"gemma2","hidden_size":3584,"intermediate_size":14336,"num_hidden_layers":42,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":256,"sliding_window":4096,"vocab_size":256000,"tie_word_embeddings":false}"#,
            "g2.json",
        )
        .expect("gemma2");
        assert_eq!((g2.layer_counts.full, g2.layer_counts.sliding, g2.sliding_window, g2.tied_embeddings), (21, 21, Some(4096), false));
        // Phi-4 (phi3 architecture): no window, all full; Phi-3-mini's 2,047-token window slides everywhere.
        let phi = |window: &str| {
            format!(
                r#"{{"model_type":"phi3","hidden_size":5120,"intermediate_size":17920,"num_hidden_layers":40,"num_attention_heads":40,"num_key_value_heads":10,"vocab_size":100352,"sliding_window":{window}}}"#
            )
        };
        let p = from_hf_config(&phi("null"), "p.json").expect("phi-4");
        assert_eq!((p.layer_counts.full, p.sliding_window, p.tied_embeddings), (40, None, false));
        let p = from_hf_config(&phi("2047"), "p.json").expect("phi-3");
        assert_eq!((p.layer_counts.sliding, p.sliding_window), (40, Some(2047)));
        // GLM-4-32B-0414: dense GQA with biased attention.
        let glm = from_hf_config(
            r#"{"model_type":"glm4","hidden_size":6144,"intermediate_size":23040,"num_hidden_layers":61,"num_attention_heads":48,"num_key_value_heads":2,"head_dim":128,"vocab_size":151552,"attention_bias":true}"#,
            "glm.json",
        )
        .expect("glm4");
        assert_eq!(glm.layer_counts.full, 61);
        assert!(matches!(glm.attention, Attention::Gqa { kv_heads: 2, bias: true, .. }), "{:?}", glm.attention);
        // A window on GLM-4, which has no sliding layers, is still refused by name.
        let e = from_hf_config(
            r#"{"model_type":"glm4","hidden_size":6144,"intermediate_size":23040,"num_hidden_layers":61,"num_attention_heads":48,"num_key_value_heads":2,"vocab_size":151552,"sliding_window":4096}"#,
            "glm.json",
        )
        .expect_err("window");
        assert!(e.to_string().contains("model_type \"glm4\" has no sliding-window layers"), "{e}");
    }

    #[test]
    fn compressed_tensors_checkpoints_name_their_format_or_are_refused() {
        let ct = |bits: u32, kind: &str| {
            llama_with(&format!(
                r#","quantization_config":{{"quant_method":"compressed-tensors","config_groups":{{"group_0":{{"weights":{{"num_bits":{bits},"type":"{kind}"}}}}}}}}"#
            ))
        };
        assert_eq!(from_hf_config(&ct(4, "int"), "c.json").expect("int4").checkpoint, Some(Dtype::Int4));
        assert_eq!(from_hf_config(&ct(8, "float"), "c.json").expect("fp8").checkpoint, Some(Dtype::Fp8));
        let e = from_hf_config(&ct(2, "int"), "c.json").expect_err("2-bit");
        assert!(e.to_string().contains("quantization_config.config_groups") && e.to_string().contains("2-bit \"int\" weights"), "{e}");
    }

    /// An edit to a config's JSON object.
    type Edit<'a> = &'a dyn Fn(&mut serde_json::Map<String, Value>);

    /// A config's JSON as a value to edit.
    fn json(text: &str) -> Value {
        serde_json::from_str(text).expect("json")
    }

    #[test]
    fn python_float_tokens_outside_strings_are_read_as_null() {
        let cfg = llama_with(r#","time_step_limit":[0.0, Infinity],"x":NaN,"y":-Infinity,"_name_or_path":"NaN -Infinity""#);
        let m = from_hf_config(&cfg, "c.json").expect("python's float tokens");
        assert_eq!(m.name, "NaN -Infinity", "a string keeps its text");
        assert_eq!(
            python_floats_as_null(r#"{"a": "Infinity \" NaN", "b": [NaN, -Infinity]}"#).as_deref(),
            Some(r#"{"a": "Infinity \" NaN", "b": [null, null]}"#)
        );
        assert_eq!(python_floats_as_null(r#"{"NaN": 1, "a": NaNx}"#), None, "inside a string, or not a whole token");
        let e = from_hf_config(r#"{"a": Infinity,}"#, "c.json").expect_err("still not JSON");
        assert!(e.to_string().contains("c.json: not valid JSON"), "{e}");
        // NVIDIA's Nemotron-3 Super config ends time_step_limit in Infinity: it parses, and is then
        // refused by its architecture.
        let e = from_hf_config(include_str!("../tests/configs/nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json"), "n.json")
            .expect_err("nemotron_h");
        assert!(e.to_string().contains("field \"model_type\" is \"nemotron_h\""), "{e}");
    }

    #[test]
    fn modelopt_mixed_precision_checkpoints_give_each_part_its_format() {
        let moe = from_hf_config(include_str!("../tests/configs/nvidia--Qwen3.6-35B-A3B-NVFP4.json"), "q.json").expect("Qwen3.6 MoE");
        let p = moe.checkpoint_parts.expect("mixed");
        assert_eq!((p.attention, p.experts, p.shared_experts, p.dense_ffn), (Dtype::Fp8, Dtype::Int4, Dtype::Int4, Dtype::Bf16));
        assert_eq!(moe.checkpoint, Some(Dtype::Int4), "a MoE checkpoint is named by its experts");
        assert_eq!(p.lm_head, Some(Dtype::Int4), "its LM head is W4A16 NVFP4 too");
        let dense = from_hf_config(include_str!("../tests/configs/nvidia--Qwen3.6-27B-NVFP4.json"), "q.json").expect("Qwen3.6 dense");
        let p = dense.checkpoint_parts.expect("mixed");
        assert_eq!((p.attention, p.dense_ffn), (Dtype::Fp8, Dtype::Int4));
        assert_eq!(dense.checkpoint, Some(Dtype::Int4), "a dense one by its FFN");
        // An older ModelOpt export names itself only by its producer.
        let fp8 = from_hf_config(include_str!("../tests/configs/Qwen--Qwen3-32B-FP8-Static-PerTensor.json"), "q.json").expect("FP8");
        assert_eq!((fp8.checkpoint, fp8.checkpoint_parts), (Some(Dtype::Fp8), None));
        let refused = |q: &str, want: &str| {
            let e = from_hf_config(&llama_with(&format!(r#","quantization_config":{q}"#)), "c.json").expect_err(want);
            assert!(e.to_string().contains(want), "{e}");
        };
        refused(r#"{"quant_method":"modelopt","quant_algo":"INT8_SQ"}"#, r#"field "quantization_config.quant_algo" is "INT8_SQ""#);
        let mixed =
            |layers: &str| format!(r#"{{"quant_method":"modelopt","quant_algo":"MIXED_PRECISION","quantized_layers":{{{layers}}}}}"#);
        refused(
            &mixed(r#""model.layers.0.self_attn.q_proj":{"quant_algo":"FP8"},"model.layers.1.self_attn.q_proj":{"quant_algo":"NVFP4"}"#),
            "mixes fp8 and nvfp4 within the attention",
        );
        refused(&mixed(r#""model.layers.0.input_norm":{"quant_algo":"FP8"}"#), "is not an attention, FFN or expert module");
        // Llama 4's FFN modules and a quantized LM head are read; the vision tower and the
        // routers are passed over.
        let layers = r#""model.layers.0.feed_forward.down_proj":{"quant_algo":"FP8"},"lm_head":{"quant_algo":"NVFP4"},"model.visual.blocks.0.attn.qkv":{"quant_algo":"NVFP4"},"model.layers.0.mlp.gate":{"quant_algo":"NVFP4"}"#;
        let cfg = llama_with(&format!(r#","quantization_config":{}"#, mixed(layers)));
        let parts = from_hf_config(&cfg, "c.json").expect("mixed").checkpoint_parts.expect("parts");
        assert_eq!((parts.dense_ffn, parts.attention, parts.lm_head), (Dtype::Fp8, Dtype::Bf16, Some(Dtype::Nvfp4)));
        refused(
            &mixed(r#""model.layers.0.mlp.up_proj":{"quant_algo":"W4A8_AWQ"}"#),
            "quant_algo \"W4A8_AWQ\", which servetune does not model",
        );
        refused(&mixed(""), "quantization_config.quantized_layers\" is missing or empty");
    }

    #[test]
    fn fbgemm_fp8_checkpoints_keep_the_parts_their_unconverted_list_names_in_most_layers_in_bf16() {
        let with = |unconverted: &str| {
            let q = format!(
                r#","quantization_config":{{"quant_method":"fbgemm_fp8","activation_scale_ub":1200.0,"modules_to_not_convert":{unconverted}}}"#
            );
            from_hf_config(&llama_with(&q), "c.json").expect("fbgemm")
        };
        // Every attention layer and the first and last FFN unconverted, as Meta's 405B export does.
        let mut names: Vec<String> = (0..32).map(|i| format!("model.layers.{i}.self_attn")).collect();
        names.extend(["model.layers.0.mlp".to_string(), "model.layers.31.mlp".to_string(), "lm_head".to_string()]);
        let m = with(&serde_json::json!(names).to_string());
        let p = m.checkpoint_parts.expect("mixed");
        assert_eq!((p.attention, p.dense_ffn, p.lm_head, m.checkpoint), (Dtype::Bf16, Dtype::Fp8, None, Some(Dtype::Fp8)));
        // Nothing unconverted but the head: one FP8 format for every part.
        let all = with(r#"["lm_head"]"#);
        assert_eq!((all.checkpoint, all.checkpoint_parts), (Some(Dtype::Fp8), None));
        // Llama 4 Maverick's routed experts FP8, the rest (attention, shared experts, dense FFNs) BF16.
        let mut cfg = json(include_str!("../data/models/llama-4-maverick.json"));
        let mut names: Vec<String> = Vec::new();
        for i in 0..48 {
            names.push(format!("language_model.model.layers.{i}.self_attn"));
            names.push(format!("language_model.model.layers.{i}.feed_forward.{}", if i % 2 == 1 { "shared_expert" } else { "down_proj" }));
            names.push(format!("language_model.model.layers.{i}.feed_forward.router"));
        }
        names.push("vision_model".into());
        cfg["quantization_config"] = serde_json::json!({"quant_method": "fbgemm_fp8", "modules_to_not_convert": names});
        let m = from_hf_config(&cfg.to_string(), "m.json").expect("maverick fp8");
        let p = m.checkpoint_parts.expect("mixed");
        assert_eq!((p.experts, p.shared_experts, p.attention, p.dense_ffn), (Dtype::Fp8, Dtype::Bf16, Dtype::Bf16, Dtype::Bf16));
        assert_eq!(m.checkpoint, Some(Dtype::Fp8), "a MoE checkpoint is named by its experts");
    }

    #[test]
    fn llama4_interleaves_its_moe_layers_and_chunks_three_layers_in_four() {
        let scout = catalog("llama-4-scout").expect("scout");
        assert_eq!(scout.arch, "llama4");
        assert_eq!((scout.layers, scout.dense_layers, scout.moe_layers()), (48, 0, 48));
        // Every fourth layer is NoPE global attention; the rotary ones attend within 8,192-token chunks.
        assert_eq!((scout.layer_counts.full, scout.layer_counts.sliding, scout.sliding_window), (12, 36, Some(8192)));
        let m = scout.moe.expect("experts");
        assert_eq!((m.experts, m.top_k, m.shared_experts, m.expert_ffn, m.shared_ffn), (16, 1, 1, 8192, 8192));
        let maverick = catalog("llama-4-maverick").expect("maverick");
        assert_eq!(
            (maverick.dense_layers, maverick.moe_layers(), maverick.ffn),
            (24, 24, 16384),
            "every other layer dense, intermediate_size_mlp wide"
        );
        let edited = |edit: Edit| {
            let mut cfg = json(include_str!("../data/models/llama-4-maverick.json"));
            edit(cfg["text_config"].as_object_mut().expect("text_config"));
            from_hf_config(&cfg.to_string(), "m.json")
        };
        let listed = edited(&|t| {
            t.insert("moe_layers".into(), serde_json::json!([1, 3, 5]));
        })
        .expect("moe_layers");
        assert_eq!(listed.dense_layers, 45, "moe_layers places the MoE layers when given");
        let marks: Vec<u32> = (0..48).map(|i| u32::from(i % 2 == 0)).collect();
        let nope = edited(&|t| {
            t.insert("no_rope_layers".into(), serde_json::json!(marks));
        })
        .expect("no_rope_layers");
        assert_eq!((nope.layer_counts.full, nope.layer_counts.sliding), (24, 24), "no_rope_layers marks the chunked (rotary) layers");
        let global = edited(&|t| {
            t.insert("attention_chunk_size".into(), Value::Null);
        })
        .expect("no chunks");
        assert_eq!((global.layer_counts.full, global.sliding_window), (48, None), "without a chunk size every layer is global");
        // Newer transformers write the layer kinds out, the chunked ones as "chunked_attention".
        let kinds: Vec<&str> = (0..48).map(|i| if (i + 1) % 4 == 0 { "full_attention" } else { "chunked_attention" }).collect();
        let written = edited(&|t| {
            t.insert("layer_types".into(), serde_json::json!(kinds));
        })
        .expect("layer_types");
        assert_eq!((written.layer_counts.full, written.layer_counts.sliding, written.sliding_window), (12, 36, Some(8192)));
        let empty = edited(&|t| {
            t.insert("no_rope_layers".into(), serde_json::json!([]));
        })
        .expect("an empty no_rope_layers");
        assert_eq!(empty.layer_counts, maverick.layer_counts, "an empty list is the default interval, as transformers reads it");
        let bare = edited(&|t| {
            t.remove("intermediate_size_mlp");
        })
        .expect("no intermediate_size_mlp");
        assert_eq!(bare.ffn, 16_384, "transformers' default");
        let refusals: [(Edit, &str); 4] = [
            (
                &|t| drop(t.insert("no_rope_layers".into(), serde_json::json!([1, 0]))),
                "field \"no_rope_layers\" must hold one 0 (NoPE) or 1",
            ),
            (&|t| drop(t.insert("interleave_moe_layer_step".into(), serde_json::json!(0))), "\"interleave_moe_layer_step\" is 0"),
            (&|t| drop(t.insert("moe_layers".into(), serde_json::json!([48]))), "field \"moe_layers\" holds 48"),
            (&|t| drop(t.insert("layer_types".into(), serde_json::json!(["chunked_attention"]))), "\"layer_types\" has 1 entries"),
        ];
        for (edit, want) in refusals {
            let e = edited(edit).expect_err(want);
            assert!(e.to_string().contains(want), "{e}");
        }
    }

    #[test]
    fn qwen3_vl_language_models_read_as_qwen3() {
        let moe = from_hf_config(include_str!("../tests/configs/Qwen--Qwen3-VL-235B-A22B-Instruct.json"), "v.json").expect("VL MoE");
        assert_eq!(moe.arch, "qwen3_moe");
        assert!(within(moe.params().total, 235e9, 0.02), "{}", moe.params().total / 1e9);
        let dense = from_hf_config(include_str!("../tests/configs/Qwen--Qwen3-VL-8B-Instruct.json"), "v.json").expect("VL dense");
        assert_eq!((dense.arch.as_str(), dense.moe), ("qwen3", None));
    }

    #[test]
    fn glm_5_2_runs_its_dsa_indexer_only_in_its_full_indexer_layers() {
        let text = include_str!("../data/validation/configs/zai-org--GLM-5.2-FP8.json");
        let m = from_hf_config(text, "g.json").expect("GLM-5.2");
        let cfg = json(text);
        let types = cfg["indexer_types"].as_array().expect("indexer_types");
        let full = types.iter().filter(|t| *t == "full").count() as u32;
        assert!(full > 0 && full < m.layers, "{full} of {}", m.layers);
        assert_eq!(m.dsa.expect("dsa").indexer_layers, full);
        assert!((m.indexer_share() - full as f64 / m.layers as f64).abs() < 1e-12);
        // Without the list (and its frequency) every layer would run it and hold its weights.
        let mut every = cfg.clone();
        let o = every.as_object_mut().expect("object");
        o.remove("indexer_types");
        o.remove("index_topk_freq");
        let every = from_hf_config(&every.to_string(), "g.json").expect("every layer");
        assert_eq!(every.dsa.expect("dsa").indexer_layers, every.layers);
        assert!(every.params().attention > m.params().attention);
        // NVIDIA's NVFP4 export names its layers deepseek_sparse_attention: full attention.
        let nv = from_hf_config(include_str!("../tests/configs/nvidia--GLM-5.2-NVFP4.json"), "n.json").expect("GLM-5.2 NVFP4");
        assert_eq!((nv.layer_counts.full, nv.dsa.expect("dsa").indexer_layers, nv.checkpoint), (nv.layers, full, Some(Dtype::Nvfp4)));
        let refused = |edit: Edit, want: &str| {
            let mut c = cfg.clone();
            edit(c.as_object_mut().expect("object"));
            let e = from_hf_config(&c.to_string(), "g.json").expect_err(want);
            assert!(e.to_string().contains(want), "{e}");
        };
        refused(&|o| drop(o.remove("indexer_types")), "field \"index_topk_freq\" is 4, but no \"indexer_types\"");
        refused(&|o| o["indexer_types"][5] = "sparse".into(), "entry 5 is \"sparse\", which servetune does not understand");
        refused(&|o| o["indexer_types"][0] = "shared".into(), "entry 0 is \"shared\" before any \"full\" layer");
        refused(&|o| drop(o.insert("indexer_types".into(), serde_json::json!(["full"]))), "has 1 entries but \"num_hidden_layers\" is 78");
        // A model without an indexer has no sparse-attention layers.
        let e = from_hf_config(
            &llama_with(&format!(r#","layer_types":{}"#, serde_json::json!(vec!["deepseek_sparse_attention"; 32]))),
            "c.json",
        )
        .expect_err("not DSA");
        assert!(e.to_string().contains("entry 0 is \"deepseek_sparse_attention\", which servetune does not understand"), "{e}");
        // Nor does a lone index_topk make one: the indexer needs its heads and dimension too.
        let lone = llama_with(&format!(r#","index_topk":2048,"layer_types":{}"#, serde_json::json!(vec!["deepseek_sparse_attention"; 32])));
        assert!(from_hf_config(&lone, "c.json").is_err());
    }

    #[test]
    fn every_fixture_config_parses_or_is_refused_by_a_named_field() {
        let fixtures: [(&str, &str); 9] = [
            (
                "meta-llama--Llama-4-Scout-17B-16E-Instruct.json",
                include_str!("../tests/configs/meta-llama--Llama-4-Scout-17B-16E-Instruct.json"),
            ),
            (
                "meta-llama--Llama-4-Maverick-17B-128E-Instruct.json",
                include_str!("../tests/configs/meta-llama--Llama-4-Maverick-17B-128E-Instruct.json"),
            ),
            ("nvidia--Qwen3.6-35B-A3B-NVFP4.json", include_str!("../tests/configs/nvidia--Qwen3.6-35B-A3B-NVFP4.json")),
            ("nvidia--Qwen3.6-27B-NVFP4.json", include_str!("../tests/configs/nvidia--Qwen3.6-27B-NVFP4.json")),
            ("Qwen--Qwen3-VL-235B-A22B-Instruct.json", include_str!("../tests/configs/Qwen--Qwen3-VL-235B-A22B-Instruct.json")),
            ("Qwen--Qwen3-VL-8B-Instruct.json", include_str!("../tests/configs/Qwen--Qwen3-VL-8B-Instruct.json")),
            ("Qwen--Qwen3-32B-FP8-Static-PerTensor.json", include_str!("../tests/configs/Qwen--Qwen3-32B-FP8-Static-PerTensor.json")),
            ("nvidia--GLM-5.2-NVFP4.json", include_str!("../tests/configs/nvidia--GLM-5.2-NVFP4.json")),
            (
                "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json",
                include_str!("../tests/configs/nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json"),
            ),
        ];
        for (name, text) in fixtures {
            match from_hf_config(text, name) {
                Ok(m) => assert!(m.params().total > 1e9, "{name}: {} parameters", m.params().total),
                Err(e) => assert!(e.to_string().starts_with(&format!("{name}: field \"")), "{name}: {e}"),
            }
        }
    }
}
