//! Reading a Hugging Face `config.json`: the entry point [`from_hf_config`] and the field readers
//! every family shares.
//!
//! A config is parsed as JSON, with the `NaN`, `Infinity` and `-Infinity` tokens Python's
//! `json.dump` writes read as null (servetune reads no field that holds them). A multimodal
//! wrapper keeps its language model under `text_config`; its `model_type` less the `_text` suffix
//! names the family, and Qwen3-VL's and GLM-V's language models are read as their text families'
//! ([`SUPPORTED`]). A `model_type` outside [`SUPPORTED`] is refused with the list.
//!
//! Sizes are whole numbers from 0 to [`MAX_FIELD`] (2^26): a field present but negative,
//! fractional, larger or not a number is refused by name and value; a field an architecture needs
//! and the file leaves out is refused as missing. Where transformers' config class fills in a
//! field the file omits (Gemma 2 and 3: vocabulary, head dimension, heads, window) or its default
//! differs from what the parser would otherwise assume (Ministral 3, Seed-OSS, OLMo 3, Ling,
//! Granite 4.0: [`class_defaults`]), the class's value is added before reading, and nowhere else.
//!
//! The families differ in how they lay out attention, layers and experts: those readers are in
//! `layers`; the weight format is read in `checkpoint`; and the finished [`ModelSpec`] is checked
//! by [`ModelSpec::validate`] before it is returned. The architecture lists below say which
//! family reads which fields.

use serde_json::Value;

use super::checkpoint::{read_checkpoint, read_kv_declared, LayerShape};
use super::layers::{
    check_attn_type_list, deepseek_dense_layers, ernie_dense_layers, granite_layer_kinds, llama4_dense_layers, qwen_dense_layers,
    read_attention, read_gemma4_global, read_granite_mamba, read_indexer_layers, read_kimi_linear, read_layer_kinds, read_linear,
    read_mamba2, read_moe, read_nemotron_blocks, read_qk_norm, read_sliding_window,
};
use super::{Dsa, ModelSpec};
use crate::ModelError;

/// The largest value any size field may hold. The largest real ones are context lengths of about
/// 10M tokens; a bound well above that keeps sums of a few fields (head dimensions, ranks) far
/// from u32 overflow (found by the fuzzer: a rope dimension of 4294967216 overflowed a sum).
pub(super) const MAX_FIELD: u32 = 1 << 26;

/// A whole-number field from 0 to [`MAX_FIELD`]: `Ok(None)` when absent (or null), an error
/// naming the field when present but negative, fractional, too large or not a number.
pub(super) fn field(v: &Value, keys: &[&str], source: &str) -> Result<Option<u32>, ModelError> {
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
/// Gemma2Config and Gemma3TextConfig. Where a class's default differs from what the parser would
/// otherwise assume, it is added too: Ministral 3's and Seed-OSS's head dimension is 128, not
/// hidden / heads (Ministral3Config, SeedOssConfig: the 3B's 3072 / 32 would be 96), OLMo 3's
/// window is 4,096 tokens (Olmo3Config), Ling 2.0's first layer is dense and it has one shared
/// expert (BailingMoeV2Config; Ling 1.x files state theirs), and Granite 4.0's expert, Mamba-2 and shared-MLP sizes are
/// GraniteMoeHybridConfig's. Other architectures read only what their files state.
pub(super) fn class_defaults(arch: &str) -> Option<&'static [(&'static str, u32)]> {
    const GEMMA2: &[(&str, u32)] =
        &[("vocab_size", 256_000), ("head_dim", 256), ("num_attention_heads", 8), ("num_key_value_heads", 4), ("sliding_window", 4096)];
    const GEMMA3: &[(&str, u32)] =
        &[("vocab_size", 262_208), ("head_dim", 256), ("num_attention_heads", 8), ("num_key_value_heads", 4), ("sliding_window", 4096)];
    const HEAD_DIM_128: &[(&str, u32)] = &[("head_dim", 128)];
    const OLMO3: &[(&str, u32)] = &[("sliding_window", 4096)];
    const BAILING: &[(&str, u32)] = &[("first_k_dense_replace", 1), ("num_shared_experts", 1)];
    const GRANITE: &[(&str, u32)] = &[
        ("num_local_experts", 8),
        ("num_experts_per_tok", 2),
        ("intermediate_size", 11008),
        ("shared_intermediate_size", 1024),
        ("mamba_n_heads", 128),
        ("mamba_n_groups", 1),
        ("mamba_d_state", 256),
        ("mamba_d_conv", 4),
        ("mamba_expand", 2),
    ];
    match arch {
        "granitemoehybrid" => Some(GRANITE),
        "bailing_moe" => Some(BAILING),
        "gemma2" => Some(GEMMA2),
        "gemma3" => Some(GEMMA3),
        "ministral3" | "seed_oss" => Some(HEAD_DIM_128),
        "olmo3" => Some(OLMO3),
        _ => None,
    }
}

/// `v` with each of `defaults` added where `v` lacks the key (a key present, even as null, stays).
pub(super) fn overlay(defaults: &[(&str, u32)], v: &Value) -> Value {
    let mut out = v.clone();
    if let Some(map) = out.as_object_mut() {
        for (k, d) in defaults {
            map.entry(k.to_string()).or_insert_with(|| Value::from(*d));
        }
    }
    out
}

/// A field the architecture needs.
pub(super) fn need(v: &Value, keys: &[&str], source: &str, arch: &str) -> Result<u32, ModelError> {
    field(v, keys, source)?
        .ok_or_else(|| ModelError::Input(format!("{source}: model_type {arch:?} needs the field {:?}, which is missing", keys[0])))
}

/// `model_type`s the parser understands. A multimodal config's language model under `text_config`
/// is read by its own `model_type` less the `_text` suffix (`qwen3_5_moe_text` as `qwen3_5_moe`,
/// `llama4_text` as `llama4`); Qwen3-VL's language models are Qwen3's and Qwen3-MoE's (its
/// interleaved multimodal rotary embedding costs what Qwen3's does), and are read as those, and
/// GLM-4.1V's and GLM-4.5V's are GLM-4's and GLM-4.5's (transformers' Glm4vMoeTextConfig extends
/// Glm4MoeConfig with the same expert fields; docs/reference.md, "More architectures"). Ling 2.0
/// and Ring 2.0 state `bailing_moe` with the V2 layout; `bailing_moe_v2` is read the same. The
/// vision encoder is not modelled: the requests are text.
pub const SUPPORTED: [&str; 50] = [
    "llama",
    "ministral3",
    "seed_oss",
    "olmo2",
    "olmo3",
    "olmoe",
    "glm4",
    "phi3",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "gemma4",
    "gemma4_text",
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
    "glm4v",
    "glm4v_text",
    "glm4v_moe",
    "glm4v_moe_text",
    "glm_moe_dsa",
    "ernie4_5_moe",
    "bailing_moe",
    "bailing_moe_v2",
    "gpt_oss",
    "kimi_k2",
    "kimi_linear",
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
    "nemotron_h",
    "granitemoehybrid",
    "hunyuan",
    "hunyuan_v1_moe",
];

/// Architectures with Multi-head Latent Attention (DeepSeek-V3's, which Kimi-K2 reuses; Kimi
/// Linear's full-attention layers, without rotary embedding but with its cache's rope part).
pub(super) const MLA_ARCHS: [&str; 6] = ["deepseek_v2", "deepseek_v3", "deepseek_v32", "glm_moe_dsa", "kimi_k2", "kimi_linear"];

/// The DeepSeek-V2 family's MoE layout (vLLM's `DeepseekV2DecoderLayer` and `KimiDecoderLayer`):
/// layer i holds experts when i >= `first_k_dense_replace` and i is a multiple of
/// `moe_layer_freq` (1 when absent), else a dense MLP.
pub(super) const DEEPSEEK_MOE_ARCHS: [&str; 5] = ["deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "kimi_linear"];

/// Qwen's MoE architectures, whose dense layers are named by `mlp_only_layers` and
/// `decoder_sparse_step` (not `first_k_dense_replace`).
pub(super) const QWEN_MOE_ARCHS: [&str; 4] = ["qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe"];

/// Architectures with Gated DeltaNet linear-attention layers.
pub(super) const HYBRID_ARCHS: [&str; 3] = ["qwen3_next", "qwen3_5", "qwen3_5_moe"];

/// Architectures whose modelling code reads `sliding_window` for their sliding layers.
pub(super) const SLIDING_ARCHS: [&str; 10] =
    ["gpt_oss", "mistral", "ministral3", "mixtral", "llama4", "phi3", "gemma2", "gemma3", "gemma4", "olmo3"];

/// Architectures whose config class ties the output projection to the embeddings unless
/// `tie_word_embeddings` says otherwise (transformers' Gemma2Config, Gemma3TextConfig and
/// Ernie4_5_MoeConfig).
pub(super) const TIED_BY_DEFAULT_ARCHS: [&str; 3] = ["gemma2", "gemma3", "ernie4_5_moe"];

/// Architectures whose configs carry a `sliding_window` that only `use_sliding_window: true` turns on.
pub(super) const OPT_IN_SLIDING_ARCHS: [&str; 7] = ["qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe"];

/// Reads a Hugging Face `config.json` (its text) and validates it. `source` names the file in errors.
pub fn from_hf_config(text: &str, source: &str) -> Result<ModelSpec, ModelError> {
    let root = parse_config_json(text, source)?;
    // Multimodal wrappers keep the language model under text_config.
    let v = root.get("text_config").filter(|t| t.is_object()).unwrap_or(&root);
    let arch = family(&root, v, source)?;
    let with_defaults;
    let v = match class_defaults(&arch) {
        Some(defaults) => {
            with_defaults = overlay(defaults, v);
            &with_defaults
        }
        None => v,
    };
    if arch == "bailing_moe" && v.get("moba_block_size").is_some_and(|x| !x.is_null()) {
        return Err(ModelError::Input(format!(
            "{source}: field \"moba_block_size\" is set: this Ling checkpoint's MoBA sparse attention is not modelled by servetune"
        )));
    }
    let hidden = need(v, &["hidden_size"], source, &arch)?;
    let layers = match field(v, &["num_hidden_layers"], source)? {
        Some(l) => l,
        // Newer Nemotron-H configs (Nemotron 3 Ultra) list their blocks and leave the count to
        // the list's length, as transformers' NemotronHConfig derives it.
        None if arch == "nemotron_h" => match v.get("layers_block_type") {
            Some(Value::Array(a)) if !a.is_empty() && a.len() <= MAX_FIELD as usize => a.len() as u32,
            Some(x) if !x.is_null() => {
                return Err(ModelError::Input(format!(
                    "{source}: field \"layers_block_type\" is {x}: without \"num_hidden_layers\" it must list one block kind per layer"
                )))
            }
            _ => need(v, &["num_hidden_layers"], source, &arch)?,
        },
        None => need(v, &["num_hidden_layers"], source, &arch)?,
    };
    let attention = read_attention(v, source, &arch, hidden)?;
    let global_attention = if arch == "gemma4" { read_gemma4_global(v, source, &attention)? } else { None };
    // Nemotron-H's layers are single-operation blocks (Mamba-2, attention, MLP, MoE).
    let blocks = if arch == "nemotron_h" { Some(read_nemotron_blocks(v, source, layers)?) } else { None };
    let moe = match (&blocks, read_moe(v, source, &arch)?) {
        (Some(b), _) if b.moe == 0 => None,
        (Some(b), None) => {
            return Err(ModelError::Input(format!(
                "{source}: field \"{}\" has MoE blocks but no \"n_routed_experts\" above 1 says how many experts they hold",
                b.field
            )))
        }
        (_, m) => m,
    };
    let dense_layers = match &moe {
        _ if blocks.is_some() => blocks.as_ref().map_or(0, |b| b.mlp),
        None => layers,
        Some(_) if QWEN_MOE_ARCHS.contains(&arch.as_str()) => qwen_dense_layers(v, source, layers)?,
        Some(_) if arch == "llama4" => llama4_dense_layers(v, source, layers)?,
        Some(_) if arch == "ernie4_5_moe" => ernie_dense_layers(v, source, layers)?,
        // Hunyuan's leading dense layers (Tencent's HunYuanConfig: `moe_layer_num_skipped`).
        Some(_) if arch == "hunyuan_v1_moe" => field(v, &["moe_layer_num_skipped"], source)?.unwrap_or(0).min(layers),
        Some(_) if DEEPSEEK_MOE_ARCHS.contains(&arch.as_str()) => deepseek_dense_layers(v, source, layers)?,
        Some(_) => field(v, &["first_k_dense_replace"], source)?.unwrap_or(0),
    };
    let dsa = match (field(v, &["index_n_heads"], source)?, field(v, &["index_head_dim"], source)?, field(v, &["index_topk"], source)?) {
        (Some(h), Some(d), Some(k)) => {
            Some(Dsa { index_heads: h, index_head_dim: d, topk: k, indexer_layers: read_indexer_layers(v, source, layers)? })
        }
        _ => None,
    };
    // Kimi Linear names its layer kinds and its KDA shape in one object.
    let kimi = if arch == "kimi_linear" { Some(read_kimi_linear(v, source, layers)?) } else { None };
    let layer_counts = match (&blocks, kimi) {
        (Some(b), _) => b.mixers,
        (None, Some((counts, _))) => counts,
        (None, None) if arch == "granitemoehybrid" => granite_layer_kinds(v, source, layers)?,
        (None, None) => read_layer_kinds(v, source, &arch, layers, dsa.is_some())?,
    };
    // Blocks with a mixer have no FFN in Nemotron-H; every other family's layer has both.
    let ffn_free_layers = blocks.as_ref().map_or(0, |b| b.mixers.full + b.mixers.linear);
    let sliding_window = read_sliding_window(v, source, &arch, layer_counts)?;
    let linear = match layer_counts.linear {
        0 => None,
        _ if blocks.is_some() => Some(read_mamba2(v, source, &arch)?),
        _ if arch == "granitemoehybrid" => Some(read_granite_mamba(v, source, hidden)?),
        _ if kimi.is_some() => kimi.map(|(_, kda)| kda),
        _ => Some(read_linear(v, source, &arch)?),
    };
    check_attn_type_list(v, source, &arch, layers)?;
    let qk_norm_across_heads = arch == "minimax_m2" && read_qk_norm(v, source)?;
    let qk_norm_gathered = matches!(arch.as_str(), "olmo2" | "olmo3" | "olmoe");
    let moe_layers = match (&moe, &blocks) {
        (None, _) => 0,
        (Some(_), Some(b)) => b.moe,
        (Some(_), None) => layers - dense_layers.min(layers),
    };
    let shape = LayerShape { layers, dense: dense_layers, moe: moe_layers };
    // The checkpoint's quantization_config: at the top, or in a multimodal wrapper's text_config
    // (Moonshot's Kimi-K2.5 keeps its INT4 there).
    let text = root.get("text_config").filter(|t| t.is_object());
    let quant_root = match text {
        Some(t) if root.get("quantization_config").is_none_or(Value::is_null) && t.get("quantization_config").is_some() => t,
        _ => &root,
    };
    let (checkpoint, checkpoint_parts) = read_checkpoint(quant_root, source, shape)?;
    let name = v.get("_name_or_path").and_then(Value::as_str).filter(|s| !s.is_empty()).unwrap_or(source).to_string();
    let spec = ModelSpec {
        name,
        hidden,
        layers,
        dense_layers,
        ffn_free_layers,
        // Nemotron-H's MLP and experts are up and down projections around a squared ReLU
        // (transformers' NemotronHMLP); the other families gate (SwiGLU).
        ffn_gated: arch != "nemotron_h",
        // Llama 4's dense FFN layers are `intermediate_size_mlp` wide (16,384 when absent, as in
        // transformers' Llama4TextConfig); its `intermediate_size` is an expert's.
        ffn: match arch.as_str() {
            "llama4" => field(v, &["intermediate_size_mlp"], source)?.unwrap_or(16_384),
            // Nemotron-H's MLP blocks are `intermediate_size` wide; its class's default is no
            // guide for a file that leaves it out.
            "nemotron_h" if dense_layers > 0 => need(v, &["intermediate_size"], source, &arch)?,
            // Granite 4.0 without experts runs its shared MLP alone (GraniteMoeHybridMoE); its
            // `intermediate_size` is an expert's.
            "granitemoehybrid" => need(v, &["shared_intermediate_size"], source, &arch)?,
            _ => field(v, &["intermediate_size"], source)?.unwrap_or(hidden.saturating_mul(4)),
        },
        vocab: need(v, &["vocab_size"], source, &arch)?,
        tied_embeddings: v
            .get("tie_word_embeddings")
            .or(root.get("tie_word_embeddings"))
            .and_then(Value::as_bool)
            .unwrap_or(TIED_BY_DEFAULT_ARCHS.contains(&arch.as_str())),
        attention,
        global_attention,
        dsa,
        moe,
        // Kimi Linear states `model_max_length` (1,048,576) and no `max_position_embeddings`.
        max_context: match field(v, &["max_position_embeddings"], source)? {
            None if arch == "kimi_linear" => match field(v, &["model_max_length"], source)? {
                Some(0) => return Err(ModelError::Input(format!("{source}: field \"model_max_length\" is 0: it must be at least 1"))),
                m => m.unwrap_or(8192),
            },
            m => m.unwrap_or(8192),
        },
        checkpoint,
        checkpoint_parts,
        kv_declared: read_kv_declared(quant_root),
        arch,
        layer_counts,
        sliding_window,
        linear,
        qk_norm_across_heads,
        qk_norm_gathered,
        vision: read_vision(&root, source)?,
    };
    spec.validate(source)?;
    Ok(spec)
}

/// A multimodal checkpoint's vision encoder from its top-level `vision_config` (an object; absent,
/// null or not an object: none), with sglang's defaults for the fields it leaves out
/// ([`super::VisionTower`]).
fn read_vision(root: &Value, source: &str) -> Result<Option<super::VisionTower>, ModelError> {
    let Some(vc) = root.get("vision_config").filter(|x| x.is_object()) else {
        return Ok(None);
    };
    let inner = |k: &str| field(vc, &[k], &format!("{source}: vision_config"));
    Ok(Some(super::VisionTower { layers: inner("num_hidden_layers")?.unwrap_or(24), hidden: inner("hidden_size")?.unwrap_or(1024) }))
}

/// The family a config is read as: its `model_type` (the language model's, under a multimodal
/// wrapper), less a `_text` suffix, with Qwen3-VL's and GLM-V's language models read as their text
/// families' ([`SUPPORTED`]); a type outside [`SUPPORTED`] is refused with the list.
fn family(root: &Value, v: &Value, source: &str) -> Result<String, ModelError> {
    let field = v.get("model_type").or(root.get("model_type"));
    if let Some(x) = field.filter(|x| !x.is_string()) {
        return Err(ModelError::Input(format!("{source}: field \"model_type\" is {x}, not a string; supported: {}", SUPPORTED.join(", "))));
    }
    let read = field.and_then(Value::as_str).unwrap_or("");
    if !SUPPORTED.contains(&read) {
        return Err(ModelError::Input(format!(
            "{source}: field \"model_type\" is {read:?}, which is not supported; supported: {}",
            SUPPORTED.join(", ")
        )));
    }
    let arch = match read.strip_suffix("_text").unwrap_or(read) {
        "qwen3_vl" => "qwen3",
        "qwen3_vl_moe" => "qwen3_moe",
        "glm4v" => "glm4",
        "glm4v_moe" => "glm4_moe",
        "bailing_moe_v2" => "bailing_moe",
        // Tencent's own configuration code names Hunyuan-A13B `hunyuan`; transformers names it
        // `hunyuan_v1_moe` (HunYuanMoEV1Config).
        "hunyuan" => "hunyuan_v1_moe",
        a => a,
    };
    Ok(arch.to_string())
}

/// Parses a config.json. Python's `json.dump` writes the non-standard tokens `NaN`, `Infinity`
/// and `-Infinity` for float fields (Nemotron-H's `time_step_limit` ends in `Infinity`), which
/// strict JSON refuses: where the text fails to parse, those tokens outside strings are read as
/// null and the text is parsed again. servetune reads no field that holds them.
/// A byte-order mark before the text (Windows editors write one) is skipped; a document that is
/// not a JSON object is refused as such.
pub(super) fn parse_config_json(text: &str, source: &str) -> Result<Value, ModelError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let v: Value = serde_json::from_str(text).or_else(|e| {
        python_floats_as_null(text)
            .and_then(|t| serde_json::from_str(&t).ok())
            .ok_or_else(|| ModelError::Input(format!("{source}: not valid JSON ({e})")))
    })?;
    if !v.is_object() {
        let kind = match &v {
            Value::Array(_) => "an array",
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            _ => "a string",
        };
        return Err(ModelError::Input(format!(
            "{source}: the document is {kind}, not a JSON object; give a Hugging Face config.json (an object with \"model_type\", \"hidden_size\", ...)"
        )));
    }
    Ok(v)
}

/// `text` with every `NaN`, `Infinity` and `-Infinity` token outside a string replaced by `null`,
/// or None when it holds none.
pub(super) fn python_floats_as_null(text: &str) -> Option<String> {
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
