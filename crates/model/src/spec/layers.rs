//! What differs per family: attention, the kind of each layer, experts and dense layers.
//!
//! - Attention is grouped-query (heads, KV heads, head dimension, biases, Qwen3-Next's output
//!   gate) or, for the DeepSeek family (DeepSeek-V2/V3/V3.2, GLM-5, Kimi-K2, Kimi Linear's full
//!   layers), Multi-head Latent
//!   Attention (the query and KV LoRA ranks and the rope, no-rope and value head dimensions). A
//!   DSA indexer (DeepSeek-V3.2, GLM-5) adds its heads, head dimension and top-k, and runs only in
//!   the layers `indexer_types` marks "full".
//! - Each layer is full attention, sliding-window attention or linear attention (Gated DeltaNet,
//!   Mamba-2, or Kimi Linear's KDA as `linear_attn_config` lists it, [`read_kimi_linear`]):
//!   from `layer_types` where the file lists them, else from the config class's documented default
//!   (Gemma's and Llama 4's interleaving, Qwen3-Next's and OLMo 3's every fourth layer full,
//!   Mistral's and Ministral 3's window on every layer; Granite 4.0 names Mamba-2 and attention
//!   layers in a list of its own, [`granite_layer_kinds`]). A sliding window
//!   applies only where the family's modelling code reads it (Qwen's needs
//!   `use_sliding_window: true`); a layer kind or window servetune cannot model is refused, naming
//!   the field and the value.
//! - Nemotron-H's layers are single-operation blocks ([`read_nemotron_blocks`]): Mamba-2,
//!   attention, MLP or MoE, from `hybrid_override_pattern` or `layers_block_type`.
//! - Linear-attention layers read their key and value heads and head dimensions and the
//!   convolution kernel (Mamba-2: groups, state size, heads and head dimension); MiniMax-M2's `attn_type_list` must be all softmax attention (its lightning
//!   attention is not modelled), and its QK norm may span the heads.
//! - Experts: the routed count (more than one makes a MoE model), top-k, an expert's FFN width,
//!   shared experts and their width. Which layers are dense: DeepSeek's `first_k_dense_replace`,
//!   Qwen's `mlp_only_layers` and `decoder_sparse_step`, Llama 4's `interleave_moe_layer_step` (or
//!   its list of MoE layers), ERNIE 4.5's `moe_layer_start_index`, `moe_layer_end_index` and
//!   `moe_layer_interval` ([`ernie_dense_layers`]). ERNIE and Ling name their expert counts their
//!   own way ([`read_moe`]).
//!
//! Every reader takes the parsed JSON, the file's name for errors and the family, and returns a
//! typed value or an error naming the field; the shared field readers are in `config`.

use serde_json::Value;

use super::config::{field, need, HYBRID_ARCHS, MLA_ARCHS, OPT_IN_SLIDING_ARCHS, SLIDING_ARCHS};
use super::{Attention, GlobalAttention, LayerCounts, LayerKind, LinearAttention, LinearMixer, Moe};
use crate::ModelError;

pub(super) fn read_attention(v: &Value, source: &str, arch: &str, hidden: u32) -> Result<Attention, ModelError> {
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
    // Nemotron-H's first configs name it `attention_head_dim`.
    // Granite 4.0's attention is hidden / heads wide whatever the file says (GraniteMoeHybridAttention).
    let head_keys: &[&str] = match arch {
        "nemotron_h" | "hunyuan_v1_moe" => &["head_dim", "attention_head_dim"],
        "granitemoehybrid" => &[],
        _ => &["head_dim"],
    };
    let head_dim = match field(v, head_keys, source)? {
        Some(d) => d,
        None if heads == 0 => {
            return Err(ModelError::Input(format!("{source}: field \"num_attention_heads\" is 0: a model needs at least one head")))
        }
        None => hidden / heads,
    };
    // Seed-OSS's class biases q, k and v by default (SeedOssConfig: attention_bias True).
    let bias_default = matches!(arch, "qwen2" | "qwen2_moe" | "gpt_oss" | "seed_oss");
    // ERNIE 4.5 biases every linear by `use_bias`; Ling its fused q/k/v by `use_qkv_bias` or
    // `use_bias` (vLLM's BailingAttention).
    let bias_key = match arch {
        "ernie4_5_moe" => "use_bias",
        "bailing_moe" => "use_qkv_bias",
        _ => "attention_bias",
    };
    let bias = v.get(bias_key).and_then(Value::as_bool).unwrap_or(bias_default)
        || (arch == "bailing_moe" && v.get("use_bias").and_then(Value::as_bool) == Some(true));
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

/// Gemma 4's full-attention layers' shape ([`GlobalAttention`]), None where it is the sliding
/// layers': `global_head_dim` (the sliding layers' `head_dim` when absent) and, when
/// `attention_k_eq_v` is true, `num_global_key_value_heads` KV heads (else the sliding layers'
/// count), as transformers' and vLLM's `Gemma4Attention` read them. Two Gemma 4 features are
/// refused by field: Per-Layer Embeddings (`hidden_size_per_layer_input` above 0, Gemma 4 E2B and
/// E4B) and layers that reuse an earlier layer's KV cache (`num_kv_shared_layers` above 0).
pub(super) fn read_gemma4_global(v: &Value, source: &str, attention: &Attention) -> Result<Option<GlobalAttention>, ModelError> {
    let refuse = |key: &str, n: u32, what: &str| {
        Err(ModelError::Input(format!("{source}: field {key:?} is {n}: {what} are not modelled; servetune cannot plan this model")))
    };
    match field(v, &["hidden_size_per_layer_input"], source)? {
        Some(n) if n > 0 => return refuse("hidden_size_per_layer_input", n, "Per-Layer Embeddings (Gemma 4 E2B/E4B)"),
        _ => {}
    }
    match field(v, &["num_kv_shared_layers"], source)? {
        Some(n) if n > 0 => return refuse("num_kv_shared_layers", n, "layers that reuse an earlier layer's KV cache"),
        _ => {}
    }
    let Attention::Gqa { kv_heads, head_dim, .. } = *attention else { return Ok(None) };
    let k_eq_v = match v.get("attention_k_eq_v") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(x) => return Err(ModelError::Input(format!("{source}: field \"attention_k_eq_v\" is {x}, not true or false"))),
    };
    let global = GlobalAttention {
        kv_heads: if k_eq_v { field(v, &["num_global_key_value_heads"], source)?.unwrap_or(kv_heads) } else { kv_heads },
        head_dim: field(v, &["global_head_dim"], source)?.unwrap_or(head_dim),
        k_eq_v,
    };
    Ok((global != GlobalAttention { kv_heads, head_dim, k_eq_v: false }).then_some(global))
}

/// An array of whole numbers (`mlp_only_layers`), or an error naming the field.
pub(super) fn index_list(v: &Value, key: &str, source: &str) -> Result<Vec<u64>, ModelError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| x.as_u64().ok_or_else(|| ModelError::Input(format!("{source}: field {key:?} holds {x}, not a layer index"))))
            .collect(),
        Some(x) => Err(ModelError::Input(format!("{source}: field {key:?} is {x}, not a list of layer indices"))),
    }
}

/// Dense layers of the DeepSeek-V2 family ([`DEEPSEEK_MOE_ARCHS`](super::config::DEEPSEEK_MOE_ARCHS)):
/// every layer but those from `first_k_dense_replace` (0 when absent) on whose index is a
/// multiple of `moe_layer_freq` (1 when absent).
pub(super) fn deepseek_dense_layers(v: &Value, source: &str, layers: u32) -> Result<u32, ModelError> {
    let first = field(v, &["first_k_dense_replace"], source)?.unwrap_or(0);
    let every = match field(v, &["moe_layer_freq"], source)? {
        Some(0) => return Err(ModelError::Input(format!("{source}: field \"moe_layer_freq\" is 0: it must be at least 1"))),
        f => f.unwrap_or(1),
    };
    if first >= layers {
        // No MoE layer: as many dense ones as the field says (the spec's check refuses more
        // than the model has).
        return Ok(first);
    }
    // Multiples of `every` from `first` to `layers - 1` (none when the first is past the end).
    let moe = ((layers - 1) / every + 1).saturating_sub(first.div_ceil(every));
    Ok(layers - moe)
}

/// Qwen MoE layers: layer i has experts unless it is in `mlp_only_layers`, and when
/// (i + 1) is a multiple of `decoder_sparse_step` (transformers' Qwen2/3-MoE and Qwen3-Next
/// decoder layers); the others have a dense FFN of `intermediate_size`.
pub(super) fn qwen_dense_layers(v: &Value, source: &str, layers: u32) -> Result<u32, ModelError> {
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
pub(super) fn llama4_dense_layers(v: &Value, source: &str, layers: u32) -> Result<u32, ModelError> {
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

/// ERNIE 4.5's dense layers: layer i is MoE when (i + 1) is a multiple of `moe_layer_interval`
/// and `moe_layer_start_index` <= i <= `moe_layer_end_index`, as transformers' and vLLM's
/// Ernie4_5_MoeModel build them; every other layer is a dense FFN of `intermediate_size`. Where the
/// file leaves a field out, transformers' defaults apply (interval 1, start 1, end the last layer;
/// an end of -1 is the last layer too); vLLM's own default start is 0, and the released configs
/// state theirs.
pub(super) fn ernie_dense_layers(v: &Value, source: &str, layers: u32) -> Result<u32, ModelError> {
    let interval = field(v, &["moe_layer_interval"], source)?.unwrap_or(1);
    if interval == 0 {
        return Err(ModelError::Input(format!("{source}: field \"moe_layer_interval\" is 0: it must be at least 1")));
    }
    let start = field(v, &["moe_layer_start_index"], source)?.unwrap_or(1);
    let last = layers.saturating_sub(1);
    let end = match v.get("moe_layer_end_index") {
        Some(x) if x.as_i64() == Some(-1) => last,
        _ => field(v, &["moe_layer_end_index"], source)?.unwrap_or(last).min(last),
    };
    let moe = (0..layers).filter(|i| (i + 1) % interval == 0 && *i >= start && *i <= end).count() as u32;
    Ok(layers - moe)
}

/// Llama 4's attention: a layer with rotary embedding attends within its chunk of
/// `attention_chunk_size` tokens (chunked local attention), a NoPE layer to the whole context.
/// The rotary layers are those `no_rope_layers` marks 1, else all but every
/// `no_rope_layer_interval`-th (4: transformers' default). Chunked layers are modelled as sliding
/// windows of the chunk size: exact while a context fits one chunk, and reading up to twice the
/// average chunk's keys beyond. Without a chunk size every layer is full attention.
pub(super) fn llama4_layer_kinds(v: &Value, source: &str, layers: u32) -> Result<LayerCounts, ModelError> {
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
/// `sliding_window_pattern`-th layer; OLMo 3 slides in all but every fourth; Mistral, Ministral 3,
/// Mixtral and Phi-3 with a `sliding_window` slide in every layer; everything else is full
/// attention. `dsa`: the model has a DSA indexer (its
/// layers may be spelled "deepseek_sparse_attention").
pub(super) fn read_layer_kinds(v: &Value, source: &str, arch: &str, layers: u32, dsa: bool) -> Result<LayerCounts, ModelError> {
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
pub(super) fn layer_kind(t: &Value, i: usize, source: &str, arch: &str, dsa: bool) -> Result<LayerKind, ModelError> {
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

pub(super) fn default_layer_kinds(v: &Value, source: &str, arch: &str, layers: u32) -> Result<LayerCounts, ModelError> {
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
        // Ministral 3 has no `layer_types`: a window, where set, applies to every layer.
        "mistral" | "ministral3" | "mixtral" | "phi3" if field(v, &["sliding_window"], source)?.is_some() => all(LayerKind::Sliding),
        // OLMo 3 without `layer_types`: layer i is full when (i + 1) is a multiple of 4, else it
        // slides (transformers' Olmo3Config).
        "olmo3" => LayerCounts { full: layers / 4, sliding: layers - layers / 4, linear: 0 },
        // Gemma 4's configs list their layers; without the list which layers slide is not stated.
        "gemma4" => {
            return Err(ModelError::Input(format!(
                "{source}: model_type \"gemma4\" needs the field \"layer_types\" (one sliding_attention or full_attention per layer), which is missing"
            )))
        }
        _ => all(LayerKind::Full),
    })
}

/// The window of the sliding layers. A `sliding_window` on an architecture without sliding layers
/// is refused (Qwen's configs carry one that `use_sliding_window: false` leaves off; `true` is
/// refused: its `max_window_layers` split is not modelled).
pub(super) fn read_sliding_window(v: &Value, source: &str, arch: &str, counts: LayerCounts) -> Result<Option<u32>, ModelError> {
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
pub(super) fn read_indexer_layers(v: &Value, source: &str, layers: u32) -> Result<u32, ModelError> {
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

/// Bytes per element of the recurrent state from `key`, `absent` when the config does not say.
fn read_state_bytes(v: &Value, source: &str, key: &str, absent: u32) -> Result<u32, ModelError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(absent),
        Some(x) => match x.as_str() {
            Some("float32") => Ok(4),
            Some("bfloat16" | "float16") => Ok(2),
            _ => Err(ModelError::Input(format!(
                "{source}: field {key:?} is {x}, which servetune does not understand (known: float32, bfloat16, float16)"
            ))),
        },
    }
}

/// Gated DeltaNet's shape (Qwen3-Next, Qwen3.5). The state's type is `mamba_ssm_dtype`; absent,
/// 2 bytes under vLLM (its `--mamba-ssm-cache-dtype auto` keeps the model's bf16) and 4 under
/// sglang ([`LinearAttention::state_bytes_sglang`]).
pub(super) fn read_linear(v: &Value, source: &str, arch: &str) -> Result<LinearAttention, ModelError> {
    let names =
        ["linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim"];
    read_linear_shape(v, source, arch, LinearMixer::GatedDeltaNet, names, ("mamba_ssm_dtype", 2))
}

/// Kimi Linear's layer kinds and KDA shape from its `linear_attn_config` (Moonshot's
/// Kimi-Linear-48B-A3B config.json; vLLM's and sglang's `KimiLinearConfig`): `kda_layers` and
/// `full_attn_layers` list the KDA and the MLA layers by number from 1 (layer i is KDA when i + 1
/// is listed) and must together name every layer once; `num_heads` heads of `head_dim` and a
/// `short_conv_kernel_size` convolution. The recurrent state is float32 under vLLM whatever the
/// config says (its `kda_state_dtype`) and under sglang unless `mamba_ssm_dtype` names another
/// type (its `mamba2_state_dtype`).
pub(super) fn read_kimi_linear(v: &Value, source: &str, layers: u32) -> Result<(LayerCounts, LinearAttention), ModelError> {
    let cfg = match v.get("linear_attn_config") {
        Some(c) if c.is_object() => c,
        other => {
            return Err(ModelError::Input(format!(
                "{source}: field \"linear_attn_config\" is {}: Kimi Linear lists its KDA and MLA layers and the KDA heads there",
                other.map_or("missing".to_string(), |x| format!("{x}, not an object"))
            )))
        }
    };
    let inner = format!("{source}: linear_attn_config");
    // Kimi-K3's language model states `kimi_linear` too, with parts Kimi Linear lacks: refused by
    // field rather than priced as Kimi Linear's. A switch of K3's is refused unless absent, null
    // or false.
    let switch = |obj: &Value, at: &str, key: &str, what: &str| match obj.get(key) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(()),
        Some(x) => Err(ModelError::Input(format!(
            "{at}: field {key:?} is {x}: {what} (Kimi-K3) are not modelled; servetune cannot plan this model"
        ))),
    };
    switch(cfg, &inner, "use_full_rank_gate", "KDA's full-rank gates")?;
    switch(v, source, "mla_use_output_gate", "gated MLA outputs")?;
    match v.get("hidden_act") {
        None | Some(Value::Null) => {}
        Some(Value::String(a)) if a == "silu" => {}
        Some(x) => {
            return Err(ModelError::Input(format!(
                "{source}: field \"hidden_act\" is {x}: Kimi Linear's MLPs are SwiGLU (\"silu\"); another activation (Kimi-K3's \"situ\") is not modelled; servetune cannot plan this model"
            )))
        }
    }
    let hidden = field(v, &["hidden_size"], source)?;
    match field(v, &["routed_expert_hidden_size"], source)? {
        Some(w) if Some(w) != hidden => {
            return Err(ModelError::Input(format!(
                "{source}: field \"routed_expert_hidden_size\" is {w}: experts that run at another width than hidden_size (Kimi-K3's) are not modelled; servetune cannot plan this model"
            )))
        }
        _ => {}
    }
    if v.get("attn_res_block_size").is_some_and(|x| !x.is_null()) {
        return Err(ModelError::Input(format!(
            "{source}: field \"attn_res_block_size\" is set: Kimi-K3's attention residual blocks are not modelled; servetune cannot plan this model"
        )));
    }
    // The listed numbers (the lists are as long as the file, not as the layer count says).
    let mut listed = std::collections::BTreeSet::new();
    let mut linear = 0u32;
    for key in ["kda_layers", "full_attn_layers"] {
        let Some(list) = cfg.get(key).and_then(Value::as_array) else {
            return Err(ModelError::Input(format!("{inner}: field {key:?} is missing or not a list of layer numbers (from 1)")));
        };
        for x in list {
            let n = x.as_u64().filter(|n| (1..=layers as u64).contains(n)).ok_or_else(|| {
                ModelError::Input(format!("{inner}: field {key:?} holds {x}, not a layer number from 1 to {layers} (num_hidden_layers)"))
            })?;
            if !listed.insert(n) {
                return Err(ModelError::Input(format!(
                    "{inner}: layer {n} is listed twice in \"kda_layers\" and \"full_attn_layers\": each layer is one kind"
                )));
            }
            linear += u32::from(key == "kda_layers");
        }
    }
    if listed.len() != layers as usize {
        let missing = (1..=layers as u64).find(|n| !listed.contains(n)).unwrap_or(1);
        return Err(ModelError::Input(format!(
            "{inner}: layer {missing} is in neither \"kda_layers\" nor \"full_attn_layers\": list every layer, numbered from 1"
        )));
    }
    let counts = LayerCounts { full: layers - linear, sliding: 0, linear };
    let size = |key: &str| -> Result<u32, ModelError> {
        match field(cfg, &[key], &inner)? {
            Some(n) if n > 0 => Ok(n),
            Some(_) => Err(ModelError::Input(format!("{inner}: field {key:?} is 0: it must be at least 1"))),
            None => Err(ModelError::Input(format!("{inner}: field {key:?} is missing: Kimi Linear's KDA layers need it"))),
        }
    };
    let (heads, head_dim) = (size("num_heads")?, size("head_dim")?);
    let la = LinearAttention {
        mixer: LinearMixer::Kda,
        key_heads: heads,
        value_heads: heads,
        key_head_dim: head_dim,
        value_head_dim: head_dim,
        conv_kernel: size("short_conv_kernel_size")?,
        state_bytes: 4,
        state_bytes_sglang: read_state_bytes(v, source, "mamba_ssm_dtype", 4)?,
    };
    Ok((counts, la))
}

/// A linear mixer's shape from the config fields `names` (key heads, value heads, key head
/// dimension, value head dimension, convolution kernel) and its state's type from `state`
/// (field, bytes when absent): every size at least 1, the value heads a multiple of the key
/// heads, each refusal naming its field.
fn read_linear_shape(
    v: &Value,
    source: &str,
    arch: &str,
    mixer: LinearMixer,
    names: [&str; 5],
    state: (&str, u32),
) -> Result<LinearAttention, ModelError> {
    let [kh, vh, kd, vd, conv] = names;
    let la = LinearAttention {
        mixer,
        key_heads: need(v, &[kh], source, arch)?,
        value_heads: need(v, &[vh], source, arch)?,
        key_head_dim: need(v, &[kd], source, arch)?,
        value_head_dim: need(v, &[vd], source, arch)?,
        conv_kernel: need(v, &[conv], source, arch)?,
        state_bytes: read_state_bytes(v, source, state.0, state.1)?,
        state_bytes_sglang: read_state_bytes(v, source, "mamba_ssm_dtype", 4)?,
    };
    let sizes = [la.key_heads, la.value_heads, la.key_head_dim, la.value_head_dim, la.conv_kernel];
    if let Some((name, _)) = names.iter().zip(sizes).find(|(_, x)| *x == 0) {
        return Err(ModelError::Input(format!("{source}: field {name:?} is 0: it must be at least 1")));
    }
    if !la.value_heads.is_multiple_of(la.key_heads) {
        return Err(ModelError::Input(format!(
            "{source}: field \"{vh}\" is {}: it must be a multiple of {kh} {}",
            la.value_heads, la.key_heads
        )));
    }
    Ok(la)
}

/// Whether a MiniMax-M2 config's q/k norm spans a layer's heads
/// ([`ModelSpec::qk_norm_across_heads`]): `qk_norm_type` "per_layer" with `use_qk_norm`;
/// "per_head" (or no field) is a local norm. Any other value is refused, naming the field. Other
/// architectures' configs are not read for it (their engines' norms are per head).
pub(super) fn read_qk_norm(v: &Value, source: &str) -> Result<bool, ModelError> {
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
pub(super) fn check_attn_type_list(v: &Value, source: &str, arch: &str, layers: u32) -> Result<(), ModelError> {
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

pub(super) fn read_moe(v: &Value, source: &str, arch: &str) -> Result<Option<Moe>, ModelError> {
    if arch == "gemma4" {
        return read_gemma4_moe(v, source, arch);
    }
    if arch == "hunyuan_v1_moe" {
        return read_hunyuan_moe(v, source, arch);
    }
    // ERNIE 4.5 names its experts `moe_num_experts`, `moe_k` and `moe_num_shared_experts`
    // (Ernie4_5_MoeConfig); Ling's and Kimi Linear's `num_shared_experts` (BailingMoeV2Config,
    // KimiLinearConfig).
    let ernie = arch == "ernie4_5_moe";
    let experts_key: &[&str] = if ernie { &["moe_num_experts"] } else { &["n_routed_experts", "num_experts", "num_local_experts"] };
    let experts = match field(v, experts_key, source)? {
        Some(e) if e > 1 => e,
        _ => return Ok(None),
    };
    // Kimi Linear spells it `num_experts_per_token`.
    let top_k_key: &[&str] =
        if ernie { &["moe_k"] } else { &["num_experts_per_tok", "experts_per_token", "moe_top_k", "num_experts_per_token"] };
    let top_k = need(v, top_k_key, source, arch)?;
    let expert_ffn = field(v, &["moe_intermediate_size", "intermediate_size"], source)?.ok_or_else(|| {
        ModelError::Input(format!("{source}: model_type {arch:?} has experts but no \"moe_intermediate_size\" or \"intermediate_size\""))
    })?;
    // Every Llama 4 MoE layer has one shared expert of an expert's size (transformers' Llama4TextMoe).
    let shared_default = if arch == "llama4" { 1 } else { 0 };
    let shared_key: &[&str] = match arch {
        "ernie4_5_moe" => &["moe_num_shared_experts"],
        "bailing_moe" | "kimi_linear" => &["num_shared_experts"],
        _ => &["n_shared_experts"],
    };
    let shared_experts = field(v, shared_key, source)?.unwrap_or(shared_default);
    let shared_ffn = if arch == "granitemoehybrid" {
        // Granite 4.0's one shared MLP runs beside the routed experts (GraniteMoeHybridMoE).
        field(v, &["shared_intermediate_size"], source)?
    } else if arch == "nemotron_h" {
        // Nemotron-H sizes one shared expert (vLLM's NemotronHMoE: the width times the count).
        field(v, &["moe_shared_expert_intermediate_size"], source)?.map(|w| w.saturating_mul(shared_experts.max(1)))
    } else if arch == "bailing_moe" {
        // Ling: the width times the count, none without shared experts (vLLM's BailingMoE).
        let w = field(v, &["moe_shared_expert_intermediate_size"], source)?.unwrap_or(expert_ffn);
        Some(w.saturating_mul(shared_experts))
    } else {
        field(v, &["shared_expert_intermediate_size"], source)?
    }
    .unwrap_or(shared_experts.saturating_mul(expert_ffn));
    // LatentMoE (Nemotron-3 Super): the routed experts run at `moe_latent_size`.
    let latent = if arch == "nemotron_h" { field(v, &["moe_latent_size"], source)? } else { None };
    if latent == Some(0) {
        return Err(ModelError::Input(format!("{source}: field \"moe_latent_size\" is 0: it must be at least 1 (or null)")));
    }
    Ok(Some(Moe {
        experts,
        top_k,
        // Qwen2-MoE names no shared-expert count, only its size: one block.
        shared_experts: if shared_experts == 0 && shared_ffn > 0 { 1 } else { shared_experts },
        expert_ffn,
        shared_ffn,
        bias: arch == "gpt_oss",
        latent,
    }))
}

/// One value of a field that Hunyuan may give per layer: a whole number, or a list with one entry
/// per layer whose MoE layers' entries (from `skipped`, the leading dense layers, on) must all be
/// equal (servetune prices every MoE layer alike); None when absent.
fn per_layer(v: &Value, key: &str, source: &str, layers: u32, skipped: u32) -> Result<Option<u32>, ModelError> {
    match v.get(key) {
        Some(Value::Array(a)) => {
            if a.len() != layers as usize {
                return Err(ModelError::Input(format!(
                    "{source}: field {key:?} has {} entries but \"num_hidden_layers\" is {layers}: give one per layer",
                    a.len()
                )));
            }
            let mut values = a.iter().skip(skipped as usize).map(|x| {
                x.as_u64().and_then(|n| u32::try_from(n).ok()).filter(|n| *n <= super::config::MAX_FIELD).ok_or_else(|| {
                    ModelError::Input(format!(
                        "{source}: field {key:?} holds {x}, not a whole number from 0 to {}",
                        super::config::MAX_FIELD
                    ))
                })
            });
            let first = values.next().ok_or_else(|| ModelError::Input(format!("{source}: field {key:?} lists no MoE layer")))??;
            for x in values {
                if x? != first {
                    return Err(ModelError::Input(format!(
                        "{source}: field {key:?} differs between layers: servetune prices every MoE layer alike; give one value"
                    )));
                }
            }
            Ok(Some(first))
        }
        _ => field(v, &[key], source),
    }
}

/// Hunyuan-A13B's experts (`hunyuan_v1_moe`; Tencent's HunYuanConfig and vLLM's `hunyuan_v1.py`):
/// `num_experts` experts of `moe_intermediate_size` (else `intermediate_size`) wide, `moe_topk`
/// of them per token, and with `use_mixed_mlp_moe` a shared MLP of `intermediate_size` x
/// `num_shared_expert`; each may be a per-layer list ([`per_layer`]). Cross-layer
/// attention (`use_cla`, KV shared between layers as in Hunyuan-Large) is refused: not modelled.
fn read_hunyuan_moe(v: &Value, source: &str, arch: &str) -> Result<Option<Moe>, ModelError> {
    if v.get("use_cla").and_then(Value::as_bool) == Some(true) {
        return Err(ModelError::Input(format!(
            "{source}: field \"use_cla\" is true: cross-layer attention (layers sharing one KV cache) is not modelled by servetune"
        )));
    }
    let layers = need(v, &["num_hidden_layers"], source, arch)?;
    let skipped = field(v, &["moe_layer_num_skipped"], source)?.unwrap_or(0).min(layers);
    let per_layer = |key: &str| per_layer(v, key, source, layers, skipped);
    let experts = match per_layer("num_experts")? {
        Some(e) if e > 1 => e,
        _ => return Ok(None),
    };
    let top_k = per_layer("moe_topk")?
        .ok_or_else(|| ModelError::Input(format!("{source}: model_type {arch:?} needs the field \"moe_topk\", which is missing")))?;
    let width = need(v, &["intermediate_size"], source, arch)?;
    let expert_ffn = per_layer("moe_intermediate_size")?.unwrap_or(width);
    let mixed = v.get("use_mixed_mlp_moe").and_then(Value::as_bool).unwrap_or(false);
    let shared_experts = if mixed { per_layer("num_shared_expert")?.unwrap_or(1) } else { 0 };
    Ok(Some(Moe {
        experts,
        top_k,
        shared_experts: shared_experts.min(1),
        expert_ffn,
        shared_ffn: width.saturating_mul(shared_experts),
        bias: false,
        latent: None,
    }))
}

/// Gemma 4's experts (`enable_moe_block`: Gemma 4 26B-A4B): every layer runs its dense MLP
/// (`intermediate_size` wide) and, beside it, `num_experts` experts of `moe_intermediate_size`
/// with `top_k_experts` per token (transformers' `Gemma4TextDecoderLayer`). The dense MLP is
/// modelled as one shared expert: every token runs it. Without the flag the model is dense.
fn read_gemma4_moe(v: &Value, source: &str, arch: &str) -> Result<Option<Moe>, ModelError> {
    match v.get("enable_moe_block") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => return Ok(None),
        Some(Value::Bool(true)) => {}
        Some(x) => return Err(ModelError::Input(format!("{source}: field \"enable_moe_block\" is {x}, not true or false"))),
    }
    let experts = need(v, &["num_experts"], source, arch)?;
    if experts < 2 {
        return Err(ModelError::Input(format!(
            "{source}: field \"num_experts\" is {experts}, but \"enable_moe_block\" is true: a MoE block needs at least 2 experts"
        )));
    }
    let top_k = need(v, &["top_k_experts"], source, arch)?;
    let expert_ffn = need(v, &["moe_intermediate_size", "expert_intermediate_size"], source, arch)?;
    let shared_ffn = need(v, &["intermediate_size"], source, arch)?;
    if shared_ffn == 0 {
        return Err(ModelError::Input(format!(
            "{source}: field \"intermediate_size\" is 0, but every Gemma 4 layer runs its dense MLP beside the experts"
        )));
    }
    Ok(Some(Moe { experts, top_k, shared_experts: 1, expert_ffn, shared_ffn, bias: false, latent: None }))
}

/// Nemotron-H's blocks by kind.
pub(super) struct Blocks {
    /// Token mixers: attention blocks as full attention, Mamba-2 blocks as linear.
    pub(super) mixers: LayerCounts,
    /// MLP (dense FFN) blocks.
    pub(super) mlp: u32,
    /// MoE blocks.
    pub(super) moe: u32,
    /// The config field the blocks were read from.
    pub(super) field: &'static str,
}

/// Nemotron-H's blocks: each of its `num_hidden_layers` is one operation, named by a character of
/// `hybrid_override_pattern` (`M` Mamba-2, `*` attention, `-` MLP, `E` MoE; transformers'
/// `NemotronHConfig`) or, in newer configs, an entry of `layers_block_type` ("mamba", "attention",
/// "mlp", "moe"); where both are given they must agree. A list without a mixer is refused.
pub(super) fn read_nemotron_blocks(v: &Value, source: &str, layers: u32) -> Result<Blocks, ModelError> {
    const PATTERN: &str = "hybrid_override_pattern";
    const LIST: &str = "layers_block_type";
    let from_list = match v.get(LIST).filter(|x| !x.is_null()) {
        None => None,
        Some(Value::Array(a)) => Some(
            a.iter()
                .enumerate()
                .map(|(i, t)| match t.as_str() {
                    Some("mamba") => Ok('M'),
                    Some("attention") => Ok('*'),
                    Some("mlp") => Ok('-'),
                    Some("moe") => Ok('E'),
                    _ => Err(ModelError::Input(format!(
                        "{source}: field \"{LIST}\" entry {i} is {t}, which servetune does not understand (known: mamba, attention, mlp, moe)"
                    ))),
                })
                .collect::<Result<Vec<char>, _>>()?,
        ),
        Some(x) => return Err(ModelError::Input(format!("{source}: field \"{LIST}\" is {x}, not a list of block kinds"))),
    };
    let from_pattern = match v.get(PATTERN).filter(|x| !x.is_null()) {
        None => None,
        Some(Value::String(p)) => {
            if let Some((i, c)) = p.chars().enumerate().find(|(_, c)| !matches!(c, 'M' | '*' | '-' | 'E')) {
                return Err(ModelError::Input(format!(
                    "{source}: field \"{PATTERN}\" character {i} is {c:?}, which servetune does not understand (known: M Mamba-2, * attention, - MLP, E MoE)"
                )));
            }
            Some(p.chars().collect::<Vec<char>>())
        }
        Some(x) => return Err(ModelError::Input(format!("{source}: field \"{PATTERN}\" is {x}, not a string"))),
    };
    let (kinds, field_name) = match (from_list, from_pattern) {
        (Some(l), Some(p)) if l != p => {
            return Err(ModelError::Input(format!(
                "{source}: fields \"{LIST}\" and \"{PATTERN}\" name different blocks; give one of them, or make them agree"
            )))
        }
        (Some(l), _) => (l, LIST),
        (None, Some(p)) => (p, PATTERN),
        (None, None) => {
            return Err(ModelError::Input(format!(
                "{source}: model_type \"nemotron_h\" needs the field \"{PATTERN}\" (or \"{LIST}\"), which is missing"
            )))
        }
    };
    if kinds.len() != layers as usize {
        return Err(ModelError::Input(format!(
            "{source}: field \"{field_name}\" has {} entries but \"num_hidden_layers\" is {layers}: give one per layer",
            kinds.len()
        )));
    }
    let count = |c: char| kinds.iter().filter(|k| **k == c).count() as u32;
    let mixers = LayerCounts { full: count('*'), sliding: 0, linear: count('M') };
    if mixers.full + mixers.linear == 0 {
        return Err(ModelError::Input(format!(
            "{source}: field \"{field_name}\" names no Mamba-2 or attention block: a model needs at least one token mixer"
        )));
    }
    Ok(Blocks { mixers, mlp: count('-'), moe: count('E'), field: field_name })
}

/// Granite 4.0's layer kinds: `layer_types` (alias `layers_block_type`) names each layer's token
/// mixer, "mamba" (Mamba-2) or "attention"; without the list every layer is Mamba-2
/// (GraniteMoeHybridConfig). Every layer, whichever its mixer, has an FFN after it.
pub(super) fn granite_layer_kinds(v: &Value, source: &str, layers: u32) -> Result<LayerCounts, ModelError> {
    let (key, list) = match (v.get("layer_types").filter(|x| !x.is_null()), v.get("layers_block_type").filter(|x| !x.is_null())) {
        (Some(l), _) => ("layer_types", l),
        (None, Some(l)) => ("layers_block_type", l),
        (None, None) => return Ok(LayerCounts { full: 0, sliding: 0, linear: layers }),
    };
    let Value::Array(a) = list else {
        return Err(ModelError::Input(format!("{source}: field {key:?} is {list}, not a list of layer kinds")));
    };
    if a.len() != layers as usize {
        return Err(ModelError::Input(format!(
            "{source}: field {key:?} has {} entries but \"num_hidden_layers\" is {layers}: give one per layer",
            a.len()
        )));
    }
    let mut counts = LayerCounts { full: 0, sliding: 0, linear: 0 };
    for (i, t) in a.iter().enumerate() {
        match t.as_str() {
            Some("attention") => counts.full += 1,
            Some("mamba") => counts.linear += 1,
            _ => {
                return Err(ModelError::Input(format!(
                    "{source}: field {key:?} entry {i} is {t}, which servetune does not understand (known: mamba, attention)"
                )))
            }
        }
    }
    Ok(counts)
}

/// Granite 4.0's Mamba-2 (transformers' BambaMixer under GraniteMoeHybridConfig's names):
/// `mamba_n_groups` groups of `mamba_d_state` for B and C, `mamba_n_heads` heads of `mamba_d_head`
/// for x (its "auto", or no field, is `mamba_expand` x hidden / heads, which must divide; a stated
/// width must equal it, as the config class checks), and `mamba_d_conv`. The state's type:
/// `mamba_ssm_cache_dtype` where the file names one, else 2 bytes under vLLM (the model's type,
/// which `--mamba-ssm-cache-dtype auto` keeps; an assumption: that vLLM has no Granite-specific
/// default was not checked) and 4 under sglang, as for Gated DeltaNet.
pub(super) fn read_granite_mamba(v: &Value, source: &str, hidden: u32) -> Result<LinearAttention, ModelError> {
    let arch = "granitemoehybrid";
    let mut with_head = v.clone();
    let heads = need(v, &["mamba_n_heads"], source, arch)?;
    let inner = u64::from(need(v, &["mamba_expand"], source, arch)?) * u64::from(hidden);
    if v.get("mamba_d_head").is_none_or(|d| d.is_null() || d.as_str() == Some("auto")) {
        if heads == 0 || !inner.is_multiple_of(u64::from(heads)) {
            return Err(ModelError::Input(format!(
                "{source}: field \"mamba_n_heads\" is {heads}: it must divide mamba_expand x hidden_size ({inner}), or give \"mamba_d_head\""
            )));
        }
        if let Some(map) = with_head.as_object_mut() {
            map.insert("mamba_d_head".into(), Value::from(inner / u64::from(heads)));
        }
    } else if let Some(d) = field(v, &["mamba_d_head"], source)? {
        if u64::from(d) * u64::from(heads) != inner {
            return Err(ModelError::Input(format!(
                "{source}: field \"mamba_d_head\" is {d}: mamba_n_heads x mamba_d_head ({heads} x {d}) must equal mamba_expand x hidden_size ({inner})"
            )));
        }
    }
    let names = ["mamba_n_groups", "mamba_n_heads", "mamba_d_state", "mamba_d_head", "mamba_d_conv"];
    read_linear_shape(&with_head, source, arch, LinearMixer::Mamba2, names, ("mamba_ssm_cache_dtype", 2))
}

/// Mamba-2's shape (Nemotron-H): `n_groups` groups of `ssm_state_size` for B and C,
/// `mamba_num_heads` heads of `mamba_head_dim` for x, `conv_kernel`, and the state's type
/// (`mamba_ssm_cache_dtype`, float32 in Nemotron-3's configs). Under `--mamba-ssm-cache-dtype
/// auto` vLLM takes the config's type for NemotronH, float32 when it names none
/// (`NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE` in
/// `vllm/model_executor/models/config.py`; float16 in releases before that default).
pub(super) fn read_mamba2(v: &Value, source: &str, arch: &str) -> Result<LinearAttention, ModelError> {
    let names = ["n_groups", "mamba_num_heads", "ssm_state_size", "mamba_head_dim", "conv_kernel"];
    read_linear_shape(v, source, arch, LinearMixer::Mamba2, names, ("mamba_ssm_cache_dtype", 4))
}
