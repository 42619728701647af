//! [`ModelSpec::validate`]: refuses an architecture no model can have, naming the field in the
//! file it came from.
//!
//! A config can parse and still describe no model: a size of 0, more KV heads than heads (or a
//! count that does not divide them), top-k above the expert count, more dense layers than layers,
//! a DSA indexer without heads or without a layer that runs it. Every check names the
//! `config.json` field, its value and the range it must be in, so the user can fix the file; the
//! parser calls this before it returns a [`ModelSpec`], so nothing downstream divides by one of
//! these zeros.

use super::{Attention, ModelSpec};
use crate::ModelError;

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
            let field = if self.arch == "granitemoehybrid" { "shared_intermediate_size" } else { "intermediate_size" };
            return bad(field, "is 0, but the model has dense FFN layers".into());
        }
        if self.dense_layers > self.layers {
            return bad("first_k_dense_replace", format!("is {}, more than the {} layers", self.dense_layers, self.layers));
        }
        if self.dense_layers + self.ffn_free_layers > self.layers || self.mixer_layers() > self.layers {
            return bad("num_hidden_layers", format!("is {}, fewer than the blocks the layer list names", self.layers));
        }
        self.validate_attention(source)?;
        if let Some(m) = self.moe {
            if m.top_k == 0 || m.top_k > m.experts {
                let field = match self.arch.as_str() {
                    "gemma4" => "top_k_experts",
                    "ernie4_5_moe" => "moe_k",
                    "hunyuan_v1_moe" => "moe_topk",
                    _ => "num_experts_per_tok",
                };
                return bad(field, format!("is {}: it must be from 1 to the {} experts", m.top_k, m.experts));
            }
            if m.expert_ffn == 0 {
                let field = if self.arch == "granitemoehybrid" { "intermediate_size" } else { "moe_intermediate_size" };
                return bad(field, "is 0: experts need a size".into());
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
                if let Some(g) = self.global_attention {
                    if g.head_dim == 0 {
                        return bad("global_head_dim", "is 0: a full-attention layer's heads need at least 1 dimension".into());
                    }
                    if g.kv_heads == 0 || g.kv_heads > heads || !heads.is_multiple_of(g.kv_heads) {
                        return bad(
                            "num_global_key_value_heads",
                            format!("is {}: it must be from 1 to {heads} and divide num_attention_heads", g.kv_heads),
                        );
                    }
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
