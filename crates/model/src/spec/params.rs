//! Parameter counts from the architecture, and the per-layer figures the predictions use.
//!
//! [`ModelSpec::params`] counts weights by component: attention (with the DSA indexer, averaged
//! over the layers that hold it), linear-attention layers (Gated DeltaNet, Mamba-2, KDA), dense FFN layers
//! (three matrices: gate, up, down), routed and shared experts, routers, the embedding table, the
//! LM head (none when tied to the embeddings) and the norms. "Active" is what one token touches:
//! everything but the routed experts it is not sent to. Vendors count active parameters
//! differently (with or without the embedding table and the LM head), so both sums are kept; the
//! unit tests check each catalog model against the count its vendor publishes. The MTP layer of
//! GLM-5 and DeepSeek-V3 is not counted: it serves only speculative decoding.
//!
//! The same architecture gives the layer counts that memory fit and step time need:
//! [`ModelSpec::moe_layers`], [`ModelSpec::kv_layers`] (full and sliding-window attention, the
//! layers that keep a KV cache), [`ModelSpec::indexer_share`] and
//! [`ModelSpec::kv_elems_per_token_layer`] (latent or K and V, the rope part, the indexer's keys).

use serde::Serialize;

use super::{Attention, ModelSpec};

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
    /// A latent MoE's projections down to its latent width and back up (Nemotron 3 Super and
    /// Ultra): the engines keep a whole copy on every tensor-parallel rank (vLLM's
    /// `ReplicatedLinear`), so the predictions do not split them over TP.
    pub latent_projections: f64,
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
    /// Layers with routed experts: those with an FFN ([`Self::ffn_layers`]) that is not dense.
    pub fn moe_layers(&self) -> u32 {
        if self.moe.is_some() {
            self.layers.saturating_sub(self.dense_layers + self.ffn_free_layers)
        } else {
            0
        }
    }

    /// Layers with a token mixer (attention of any kind, or a linear mixer): all of them but
    /// Nemotron-H's MLP and MoE blocks.
    pub fn mixer_layers(&self) -> u32 {
        let c = self.layer_counts;
        c.full + c.sliding + c.linear
    }

    /// Layers with an FFN, dense or experts: all of them but Nemotron-H's mixer blocks.
    pub fn ffn_layers(&self) -> u32 {
        self.dense_layers + self.moe_layers()
    }

    /// Operations per forward pass whose output a tensor-parallel group all-reduces: each token
    /// mixer and each FFN (two per layer of attention then FFN; one per Nemotron-H block).
    pub fn tp_reductions(&self) -> u32 {
        self.mixer_layers() + self.ffn_layers()
    }

    /// Weight matrices of one FFN or expert: 3 gated (gate, up, down), 2 plain (up, down).
    pub fn ffn_matrices(&self) -> f64 {
        if self.ffn_gated {
            3.0
        } else {
            2.0
        }
    }

    /// Layers that keep a KV cache (full and sliding-window attention).
    pub fn kv_layers(&self) -> u32 {
        self.layer_counts.full + self.layer_counts.sliding
    }

    /// Parameters of one attention layer's attention (with the DSA indexer); linear-attention
    /// layers have [`LinearAttention::params`](super::LinearAttention::params) instead, and a full
    /// layer of its own shape [`Self::full_attention_params_per_layer`].
    pub fn attention_params_per_layer(&self) -> f64 {
        let h = self.hidden as f64;
        let mut p = match self.attention {
            Attention::Gqa { heads, kv_heads, head_dim, bias, gate } => gqa_params(h, heads, kv_heads, head_dim, bias, gate, true),
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

    /// Parameters of one full-attention layer's attention: [`Self::attention_params_per_layer`]
    /// unless the full layers have their own shape ([`Self::global_attention`](super::ModelSpec::global_attention): its KV heads
    /// and head dimension, and no value projection when the keys give the values).
    pub fn full_attention_params_per_layer(&self) -> f64 {
        match (self.global_attention, &self.attention) {
            (Some(g), Attention::Gqa { heads, bias, gate, .. }) => {
                gqa_params(self.hidden as f64, *heads, g.kv_heads, g.head_dim, *bias, *gate, !g.k_eq_v)
            }
            _ => self.attention_params_per_layer(),
        }
    }

    /// A full-attention layer's head dimension over a sliding layer's: what its attention
    /// arithmetic per token of context costs against theirs (1 unless the full layers have their
    /// own shape).
    pub fn full_head_dim_ratio(&self) -> f64 {
        match (self.global_attention, &self.attention) {
            (Some(g), Attention::Gqa { head_dim, .. }) => g.head_dim as f64 / *head_dim as f64,
            _ => 1.0,
        }
    }

    /// The share of layers that run the DSA indexer ([`Dsa::indexer_layers`](super::Dsa::indexer_layers); 0 without one).
    pub fn indexer_share(&self) -> f64 {
        self.dsa.map_or(0.0, |d| d.indexer_layers as f64 / self.layers.max(1) as f64)
    }

    /// Parameter counts computed from the architecture (the MTP layer of GLM-5/DeepSeek-V3 is not
    /// counted: it serves only speculative decoding).
    pub fn params(&self) -> ParamCounts {
        let h = self.hidden as f64;
        let linear = self.linear.map_or(0.0, |la| la.params(self.hidden) * self.layer_counts.linear as f64);
        let attention = self.attention_params_per_layer() * self.layer_counts.sliding as f64
            + self.full_attention_params_per_layer() * self.layer_counts.full as f64
            + linear;
        let mats = self.ffn_matrices();
        let dense_ffn = mats * h * self.ffn as f64 * self.dense_layers as f64;
        let (mut routed, mut shared, mut router, mut per_expert, mut active_routed) = (0.0, 0.0, 0.0, 0.0, 0.0);
        let mut latent_projections = 0.0;
        if let Some(m) = self.moe {
            let ml = self.moe_layers() as f64;
            // A latent MoE's experts run at the latent width.
            let width = m.latent.map_or(h, |d| d as f64);
            per_expert = mats * width * m.expert_ffn as f64 + if m.bias { 2.0 * m.expert_ffn as f64 + width } else { 0.0 };
            routed = per_expert * m.experts as f64 * ml;
            shared = mats * h * m.shared_ffn as f64 * ml;
            router = h * m.experts as f64 * ml + if m.bias { m.experts as f64 * ml } else { 0.0 };
            // A latent MoE's projections down to the latent and back up.
            latent_projections = m.latent.map_or(0.0, |d| 2.0 * h * d as f64) * ml;
            active_routed = per_expert * m.top_k as f64 * ml;
        }
        let embeddings = self.vocab as f64 * h;
        let lm_head = if self.tied_embeddings { 0.0 } else { self.vocab as f64 * h };
        // One norm before each mixer and each FFN, and the final norm.
        let norms = h * self.tp_reductions() as f64 + h;
        let total = attention + dense_ffn + routed + shared + router + latent_projections + embeddings + lm_head + norms;
        let active_non_embedding = attention + dense_ffn + active_routed + shared + router + latent_projections + norms;
        ParamCounts {
            attention,
            dense_ffn,
            routed_experts: routed,
            shared_experts: shared,
            router,
            latent_projections,
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

/// One grouped-query attention layer's parameters at hidden size `h`: the query projection (twice
/// as wide with an output gate), the key projection, the value projection when `v_proj`, the output
/// projection, and their biases.
fn gqa_params(h: f64, heads: u32, kv_heads: u32, head_dim: u32, bias: bool, gate: bool, v_proj: bool) -> f64 {
    let q = heads as f64 * head_dim as f64;
    let kv = kv_heads as f64 * head_dim as f64;
    let q_out = if gate { 2.0 * q } else { q };
    let kv_mats = if v_proj { 2.0 } else { 1.0 };
    let w = h * q_out + kv_mats * h * kv + q * h;
    w + if bias { q_out + kv_mats * kv + h } else { 0.0 }
}
