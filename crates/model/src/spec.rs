//! Model architectures: the built-in catalog (written from the published `config.json` values;
//! shared/reference/models.md for GLM-5 and DeepSeek-V3), reading a Hugging Face `config.json`, and
//! parameter counts computed from the architecture.

use serde::Serialize;
use serde_json::Value;

use crate::ModelError;

/// How attention stores and reads its KV cache.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Attention {
    /// Multi-head or grouped-query attention (MHA when kv_heads == heads).
    Gqa { heads: u32, kv_heads: u32, head_dim: u32, bias: bool },
    /// Multi-head latent attention (DeepSeek-V2/V3, GLM-5).
    Mla { heads: u32, q_lora_rank: Option<u32>, kv_lora_rank: u32, qk_nope_head_dim: u32, qk_rope_head_dim: u32, v_head_dim: u32 },
}

/// DeepSeek Sparse Attention's indexer (DeepSeek-V3.2, GLM-5).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Dsa {
    pub index_heads: u32,
    pub index_head_dim: u32,
    /// Tokens each query attends to.
    pub topk: u32,
}

/// Routed experts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Moe {
    pub experts: u32,
    pub top_k: u32,
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
    pub name: String,
    /// The `model_type` it was read as.
    pub arch: String,
    pub hidden: u32,
    pub layers: u32,
    /// The first layers with a dense FFN instead of experts (all of them for dense models).
    pub dense_layers: u32,
    /// Dense FFN intermediate size.
    pub ffn: u32,
    pub vocab: u32,
    pub tied_embeddings: bool,
    pub attention: Attention,
    pub dsa: Option<Dsa>,
    pub moe: Option<Moe>,
    pub max_context: u32,
}

/// Parameter counts, by component.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct ParamCounts {
    pub attention: f64,
    pub dense_ffn: f64,
    pub routed_experts: f64,
    pub shared_experts: f64,
    pub router: f64,
    pub embeddings: f64,
    pub lm_head: f64,
    pub norms: f64,
    pub total: f64,
    /// Weights one token touches: everything but the routed experts it is not sent to.
    pub active: f64,
    /// `active` without the embedding table and the LM head.
    pub active_non_embedding: f64,
    /// One routed expert.
    pub per_expert: f64,
}

impl ModelSpec {
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

/// Catalog names.
pub const CATALOG: &[&str] =
    &["glm-5", "deepseek-v3", "qwen3-235b-a22b", "qwen3-30b-a3b", "llama-3.1-70b", "llama-3.1-8b", "mixtral-8x7b", "gpt-oss-120b"];

/// A catalog model. Values are the published `config.json` ones (sources in comments).
pub fn catalog(name: &str) -> Result<ModelSpec, ModelError> {
    let gqa = |heads, kv_heads, head_dim, bias| Attention::Gqa { heads, kv_heads, head_dim, bias };
    let spec = match name {
        // zai-org/GLM-5 config.json (transformers GlmMoeDsaConfig defaults), shared/reference/models.md.
        "glm-5" => ModelSpec {
            name: name.into(),
            arch: "glm_moe_dsa".into(),
            hidden: 6144,
            layers: 78,
            dense_layers: 3,
            ffn: 12288,
            vocab: 154_880,
            tied_embeddings: false,
            attention: Attention::Mla {
                heads: 64,
                q_lora_rank: Some(2048),
                kv_lora_rank: 512,
                qk_nope_head_dim: 192,
                qk_rope_head_dim: 64,
                v_head_dim: 256,
            },
            dsa: Some(Dsa { index_heads: 32, index_head_dim: 128, topk: 2048 }),
            moe: Some(Moe { experts: 256, top_k: 8, shared_experts: 1, expert_ffn: 2048, shared_ffn: 2048, bias: false }),
            max_context: 202_752,
        },
        // deepseek-ai/DeepSeek-V3 config.json, shared/reference/models.md.
        "deepseek-v3" => ModelSpec {
            name: name.into(),
            arch: "deepseek_v3".into(),
            hidden: 7168,
            layers: 61,
            dense_layers: 3,
            ffn: 18432,
            vocab: 129_280,
            tied_embeddings: false,
            attention: Attention::Mla {
                heads: 128,
                q_lora_rank: Some(1536),
                kv_lora_rank: 512,
                qk_nope_head_dim: 128,
                qk_rope_head_dim: 64,
                v_head_dim: 128,
            },
            dsa: None,
            moe: Some(Moe { experts: 256, top_k: 8, shared_experts: 1, expert_ffn: 2048, shared_ffn: 2048, bias: false }),
            max_context: 163_840,
        },
        // Qwen/Qwen3-235B-A22B config.json.
        "qwen3-235b-a22b" => ModelSpec {
            name: name.into(),
            arch: "qwen3_moe".into(),
            hidden: 4096,
            layers: 94,
            dense_layers: 0,
            ffn: 12288,
            vocab: 151_936,
            tied_embeddings: false,
            attention: gqa(64, 4, 128, false),
            dsa: None,
            moe: Some(Moe { experts: 128, top_k: 8, shared_experts: 0, expert_ffn: 1536, shared_ffn: 0, bias: false }),
            max_context: 40_960,
        },
        // Qwen/Qwen3-30B-A3B config.json.
        "qwen3-30b-a3b" => ModelSpec {
            name: name.into(),
            arch: "qwen3_moe".into(),
            hidden: 2048,
            layers: 48,
            dense_layers: 0,
            ffn: 6144,
            vocab: 151_936,
            tied_embeddings: false,
            attention: gqa(32, 4, 128, false),
            dsa: None,
            moe: Some(Moe { experts: 128, top_k: 8, shared_experts: 0, expert_ffn: 768, shared_ffn: 0, bias: false }),
            max_context: 40_960,
        },
        // meta-llama/Llama-3.1-70B config.json.
        "llama-3.1-70b" => ModelSpec {
            name: name.into(),
            arch: "llama".into(),
            hidden: 8192,
            layers: 80,
            dense_layers: 80,
            ffn: 28672,
            vocab: 128_256,
            tied_embeddings: false,
            attention: gqa(64, 8, 128, false),
            dsa: None,
            moe: None,
            max_context: 131_072,
        },
        // meta-llama/Llama-3.1-8B config.json.
        "llama-3.1-8b" => ModelSpec {
            name: name.into(),
            arch: "llama".into(),
            hidden: 4096,
            layers: 32,
            dense_layers: 32,
            ffn: 14336,
            vocab: 128_256,
            tied_embeddings: false,
            attention: gqa(32, 8, 128, false),
            dsa: None,
            moe: None,
            max_context: 131_072,
        },
        // mistralai/Mixtral-8x7B-v0.1 config.json.
        "mixtral-8x7b" => ModelSpec {
            name: name.into(),
            arch: "mixtral".into(),
            hidden: 4096,
            layers: 32,
            dense_layers: 0,
            ffn: 14336,
            vocab: 32_000,
            tied_embeddings: false,
            attention: gqa(32, 8, 128, false),
            dsa: None,
            moe: Some(Moe { experts: 8, top_k: 2, shared_experts: 0, expert_ffn: 14336, shared_ffn: 0, bias: false }),
            max_context: 32_768,
        },
        // openai/gpt-oss-120b config.json (attention and expert biases; 64-dim heads).
        "gpt-oss-120b" => ModelSpec {
            name: name.into(),
            arch: "gpt_oss".into(),
            hidden: 2880,
            layers: 36,
            dense_layers: 0,
            ffn: 2880,
            vocab: 201_088,
            tied_embeddings: false,
            attention: gqa(64, 8, 64, true),
            dsa: None,
            moe: Some(Moe { experts: 128, top_k: 4, shared_experts: 0, expert_ffn: 2880, shared_ffn: 0, bias: true }),
            max_context: 131_072,
        },
        other => {
            return Err(ModelError::Input(format!(
                "--model {other:?} is not in the catalog; known: {} (or give --model-config path/to/config.json)",
                CATALOG.join(", ")
            )))
        }
    };
    Ok(spec)
}

fn get_u32(v: &Value, keys: &[&str]) -> Option<u32> {
    keys.iter().find_map(|k| v.get(*k).and_then(Value::as_u64)).map(|x| x as u32)
}

/// Reads a Hugging Face `config.json` (its text). `source` names the file in errors.
pub fn from_hf_config(text: &str, source: &str) -> Result<ModelSpec, ModelError> {
    let root: Value = serde_json::from_str(text).map_err(|e| ModelError::Input(format!("{source}: not valid JSON ({e})")))?;
    // Multimodal wrappers keep the language model under text_config.
    let v = root.get("text_config").filter(|t| t.is_object()).unwrap_or(&root);
    let arch = v.get("model_type").or(root.get("model_type")).and_then(Value::as_str).unwrap_or("").to_string();
    let need = |k: &[&str]| -> Result<u32, ModelError> {
        get_u32(v, k).ok_or_else(|| {
            ModelError::Input(format!("{source}: model_type {arch:?} needs the field {:?}, which is missing or not a number", k[0]))
        })
    };
    let known = [
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
    if !known.contains(&arch.as_str()) {
        return Err(ModelError::Input(format!(
            "{source}: model_type {arch:?} is not supported; supported: {} (field \"model_type\")",
            known.join(", ")
        )));
    }
    let hidden = need(&["hidden_size"])?;
    let layers = need(&["num_hidden_layers"])?;
    let vocab = need(&["vocab_size"])?;
    let heads = need(&["num_attention_heads"])?;
    let tied = v.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false);
    let max_context = get_u32(v, &["max_position_embeddings"]).unwrap_or(8192);
    let mla = matches!(arch.as_str(), "deepseek_v2" | "deepseek_v3" | "deepseek_v32" | "glm_moe_dsa");
    let attention = if mla {
        Attention::Mla {
            heads,
            q_lora_rank: get_u32(v, &["q_lora_rank"]),
            kv_lora_rank: need(&["kv_lora_rank"])?,
            qk_nope_head_dim: need(&["qk_nope_head_dim"])?,
            qk_rope_head_dim: need(&["qk_rope_head_dim"])?,
            v_head_dim: need(&["v_head_dim"])?,
        }
    } else {
        let head_dim = get_u32(v, &["head_dim"]).unwrap_or(hidden / heads.max(1));
        let bias = v.get("attention_bias").and_then(Value::as_bool).unwrap_or(arch == "qwen2" || arch == "qwen2_moe" || arch == "gpt_oss");
        Attention::Gqa { heads, kv_heads: get_u32(v, &["num_key_value_heads"]).unwrap_or(heads), head_dim, bias }
    };
    let dsa = match (get_u32(v, &["index_n_heads"]), get_u32(v, &["index_head_dim"]), get_u32(v, &["index_topk"])) {
        (Some(h), Some(d), Some(k)) => Some(Dsa { index_heads: h, index_head_dim: d, topk: k }),
        _ => None,
    };
    let experts = get_u32(v, &["n_routed_experts", "num_experts", "num_local_experts"]);
    let moe = match experts {
        Some(e) if e > 1 => {
            let top_k = need(&["num_experts_per_tok", "experts_per_token", "moe_top_k"])?;
            let expert_ffn = get_u32(v, &["moe_intermediate_size"]).or_else(|| get_u32(v, &["intermediate_size"])).ok_or_else(|| {
                ModelError::Input(format!(
                    "{source}: model_type {arch:?} has experts but no \"moe_intermediate_size\" or \"intermediate_size\""
                ))
            })?;
            let shared_experts = get_u32(v, &["n_shared_experts"]).unwrap_or(0);
            let shared_ffn = get_u32(v, &["shared_expert_intermediate_size"]).unwrap_or(shared_experts * expert_ffn);
            Some(Moe {
                experts: e,
                top_k,
                shared_experts: shared_experts.max(u32::from(shared_ffn > 0)),
                expert_ffn,
                shared_ffn,
                bias: arch == "gpt_oss",
            })
        }
        _ => None,
    };
    let dense_layers = match &moe {
        None => layers,
        Some(_) => get_u32(v, &["first_k_dense_replace"]).unwrap_or(0).min(layers),
    };
    let ffn = get_u32(v, &["intermediate_size"]).unwrap_or(4 * hidden);
    let name = v.get("_name_or_path").and_then(Value::as_str).filter(|s| !s.is_empty()).unwrap_or(source).to_string();
    Ok(ModelSpec { name, arch, hidden, layers, dense_layers, ffn, vocab, tied_embeddings: tied, attention, dsa, moe, max_context })
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
}
