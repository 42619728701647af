//! Model architectures: reading a Hugging Face `config.json` (the catalog's entries are the
//! published files under `crates/model/data/models/`, read by the same parser as `--model-config`),
//! validating them, and parameter counts computed from the architecture.

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
    /// The checkpoint's weight format, from its `quantization_config` (None: unquantized, BF16).
    pub checkpoint: Option<Dtype>,
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

    /// Parameters of attention in one layer (with the DSA indexer).
    pub fn attention_params_per_layer(&self) -> f64 {
        let h = self.hidden as f64;
        let mut p = match self.attention {
            Attention::Gqa { heads, kv_heads, head_dim, bias } => {
                let q = heads as f64 * head_dim as f64;
                let kv = kv_heads as f64 * head_dim as f64;
                let w = h * q + 2.0 * h * kv + q * h;
                w + if bias { q + 2.0 * kv + h } else { 0.0 }
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
            p += q_in * (d.index_heads * d.index_head_dim) as f64
                + h * d.index_head_dim as f64
                + h * d.index_heads as f64
                + 2.0 * d.index_head_dim as f64;
        }
        p
    }

    /// Parameter counts computed from the architecture (the MTP layer of GLM-5/DeepSeek-V3 is not
    /// counted: it serves only speculative decoding).
    pub fn params(&self) -> ParamCounts {
        let h = self.hidden as f64;
        let l = self.layers as f64;
        let attention = self.attention_params_per_layer() * l;
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

    /// Elements of KV cache per token per layer, by part: (latent or K+V, rope part, indexer keys).
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
const CONFIGS: [(&str, &str); 8] = [
    ("glm-5.json", include_str!("../data/models/glm-5.json")),
    ("deepseek-v3.json", include_str!("../data/models/deepseek-v3.json")),
    ("qwen3-235b-a22b.json", include_str!("../data/models/qwen3-235b-a22b.json")),
    ("qwen3-30b-a3b.json", include_str!("../data/models/qwen3-30b-a3b.json")),
    ("llama-3.1-70b.json", include_str!("../data/models/llama-3.1-70b.json")),
    ("llama-3.1-8b.json", include_str!("../data/models/llama-3.1-8b.json")),
    ("mixtral-8x7b.json", include_str!("../data/models/mixtral-8x7b.json")),
    ("gpt-oss-120b.json", include_str!("../data/models/gpt-oss-120b.json")),
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

/// A field the architecture needs.
fn need(v: &Value, keys: &[&str], source: &str, arch: &str) -> Result<u32, ModelError> {
    field(v, keys, source)?
        .ok_or_else(|| ModelError::Input(format!("{source}: model_type {arch:?} needs the field {:?}, which is missing", keys[0])))
}

/// `model_type`s the parser understands.
pub const SUPPORTED: [&str; 13] = [
    "llama",
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
];

/// Reads a Hugging Face `config.json` (its text) and validates it. `source` names the file in errors.
pub fn from_hf_config(text: &str, source: &str) -> Result<ModelSpec, ModelError> {
    let root: Value = serde_json::from_str(text).map_err(|e| ModelError::Input(format!("{source}: not valid JSON ({e})")))?;
    // Multimodal wrappers keep the language model under text_config.
    let v = root.get("text_config").filter(|t| t.is_object()).unwrap_or(&root);
    let arch = v.get("model_type").or(root.get("model_type")).and_then(Value::as_str).unwrap_or("").to_string();
    if !SUPPORTED.contains(&arch.as_str()) {
        return Err(ModelError::Input(format!(
            "{source}: model_type {arch:?} is not supported; supported: {} (field \"model_type\")",
            SUPPORTED.join(", ")
        )));
    }
    let hidden = need(v, &["hidden_size"], source, &arch)?;
    let layers = need(v, &["num_hidden_layers"], source, &arch)?;
    let attention = read_attention(v, source, &arch, hidden)?;
    let moe = read_moe(v, source, &arch)?;
    let dense_layers = match &moe {
        None => layers,
        Some(_) => field(v, &["first_k_dense_replace"], source)?.unwrap_or(0),
    };
    let dsa = match (field(v, &["index_n_heads"], source)?, field(v, &["index_head_dim"], source)?, field(v, &["index_topk"], source)?) {
        (Some(h), Some(d), Some(k)) => Some(Dsa { index_heads: h, index_head_dim: d, topk: k }),
        _ => None,
    };
    let name = v.get("_name_or_path").and_then(Value::as_str).filter(|s| !s.is_empty()).unwrap_or(source).to_string();
    let spec = ModelSpec {
        name,
        hidden,
        layers,
        dense_layers,
        ffn: field(v, &["intermediate_size"], source)?.unwrap_or(hidden.saturating_mul(4)),
        vocab: need(v, &["vocab_size"], source, &arch)?,
        tied_embeddings: v.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false),
        attention,
        dsa,
        moe,
        max_context: field(v, &["max_position_embeddings"], source)?.unwrap_or(8192),
        checkpoint: read_checkpoint(&root, source)?,
        arch,
    };
    spec.validate(source)?;
    Ok(spec)
}

fn read_attention(v: &Value, source: &str, arch: &str, hidden: u32) -> Result<Attention, ModelError> {
    let heads = need(v, &["num_attention_heads"], source, arch)?;
    if matches!(arch, "deepseek_v2" | "deepseek_v3" | "deepseek_v32" | "glm_moe_dsa") {
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
    Ok(Attention::Gqa { heads, kv_heads, head_dim, bias })
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
    let shared_experts = field(v, &["n_shared_experts"], source)?.unwrap_or(0);
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

/// The checkpoint format from `quantization_config` (None: unquantized).
fn read_checkpoint(root: &Value, source: &str) -> Result<Option<Dtype>, ModelError> {
    let Some(q) = root.get("quantization_config").filter(|q| !q.is_null()) else {
        return Ok(None);
    };
    let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("");
    let algo = q.get("quant_algo").and_then(Value::as_str).unwrap_or("").to_ascii_lowercase();
    match (method, algo.as_str()) {
        ("fp8", _) => Ok(Some(Dtype::Fp8)),
        ("mxfp4", _) => Ok(Some(Dtype::Mxfp4)),
        ("modelopt", "nvfp4") => Ok(Some(Dtype::Nvfp4)),
        ("modelopt", "fp8") => Ok(Some(Dtype::Fp8)),
        ("awq" | "gptq", _) => Ok(Some(Dtype::Int4)),
        _ => Err(ModelError::Input(format!(
            "{source}: field \"quantization_config.quant_method\" {method:?} is not understood (known: fp8, mxfp4, modelopt with NVFP4 or FP8, awq, gptq); remove it and give --quant"
        ))),
    }
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
    /// embedding; Z.ai's "40B active" for GLM-5 matches the count without both.
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
}
