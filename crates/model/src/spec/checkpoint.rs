//! The weight format of a checkpoint, from its `quantization_config`.
//!
//! No `quantization_config` is an unquantized checkpoint in the config's own dtype. Otherwise the
//! `quant_method` names the exporter: FP8 (DeepSeek's block-scaled FP8, fbgemm), MXFP4 (gpt-oss),
//! ModelOpt (NVFP4, FP8, W4A16 NVFP4; named by `quant_method` "modelopt" or, in older exports, by
//! `producer.name`) or compressed-tensors (its weight bits and type). An unknown method, or a
//! setting servetune does not model, is refused, naming `quantization_config.<key>` and how to go
//! on (give `--quant`).
//!
//! Some checkpoints quantize parts of the model differently, and then each part's format is kept
//! ([`PartFormats`]): a ModelOpt `MIXED_PRECISION` export lists each quantized module and its
//! algorithm (a part none of whose modules is listed stays BF16); an fbgemm FP8 export lists the
//! modules it left unconverted, and a part whose modules are unconverted in most layers is taken
//! as BF16. Routers, gates, the vision tower and the MTP layer are not modelled and are passed
//! over. [`LayerShape`] says how many layers hold each part, so "most layers" can be counted.

use serde_json::Value;

use super::PartFormats;
use crate::quant::{Dtype, KvDtype};
use crate::ModelError;

/// How many layers have each part, for reading which parts a checkpoint left unquantized.
#[derive(Debug, Clone, Copy)]
pub(super) struct LayerShape {
    pub(super) layers: u32,
    pub(super) dense: u32,
    pub(super) moe: u32,
}

/// The checkpoint format from `quantization_config` (None: unquantized), and each part's where a
/// checkpoint quantizes them differently (ModelOpt `MIXED_PRECISION`, an fbgemm FP8 export that
/// leaves parts in BF16). A ModelOpt checkpoint is named by `quant_method` "modelopt" or, in older
/// exports without one, by `producer.name`.
pub(super) fn read_checkpoint(root: &Value, source: &str, shape: LayerShape) -> Result<(Option<Dtype>, Option<PartFormats>), ModelError> {
    let moe = shape.moe > 0;
    let Some(q) = root.get("quantization_config").filter(|q| !q.is_null()) else {
        return Ok((None, None));
    };
    if !q.is_object() {
        return Err(ModelError::Input(format!(
            "{source}: field \"quantization_config\" is {q}, not an object with \"quant_method\"; remove it and give --quant"
        )));
    }
    if let Some(m) = q.get("quant_method").filter(|m| !m.is_string() && !m.is_null()) {
        return Err(ModelError::Input(format!(
            "{source}: field \"quantization_config.quant_method\" is {m}, not a string; remove it and give --quant"
        )));
    }
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

/// The KV-cache format a checkpoint's `quantization_config` declares, which the engines'
/// `--kv-cache-dtype auto` takes: a ModelOpt `kv_cache_quant_algo` ("FP8", "FP8_E4M3"), or a
/// compressed-tensors or newer ModelOpt `kv_cache_scheme` (8-bit float, or "FP8" in older ModelOpt
/// exports). A key present and null declares none: the model's BF16. None when the config says
/// nothing servetune models (no `quantization_config`, neither key, or a cache format it does not
/// model such as an integer or 4-bit one): the checkpoint's format then decides
/// ([`KvDtype::declared_by`]), and `--kv-dtype` states the cache where that is wrong.
pub(super) fn read_kv_declared(root: &Value) -> Option<KvDtype> {
    let q = root.get("quantization_config").filter(|q| !q.is_null())?;
    let fp8 = |a: &str| a.to_ascii_lowercase().starts_with("fp8");
    let by_algo = match q.get("kv_cache_quant_algo") {
        None => None,
        Some(Value::Null) => Some(KvDtype::Bf16),
        Some(Value::String(a)) if fp8(a) => Some(KvDtype::Fp8),
        Some(_) => None,
    };
    let by_scheme = match q.get("kv_cache_scheme") {
        None => None,
        Some(Value::Null) => Some(KvDtype::Bf16),
        Some(Value::String(a)) => fp8(a).then_some(KvDtype::Fp8),
        Some(scheme) => {
            let bits = scheme.get("num_bits").and_then(Value::as_f64);
            let float = scheme.get("type").and_then(Value::as_str) == Some("float");
            (bits == Some(8.0) && float).then_some(KvDtype::Fp8)
        }
    };
    // An FP8 declaration in either key wins over a null in the other.
    match (by_algo, by_scheme) {
        (Some(KvDtype::Fp8), _) | (_, Some(KvDtype::Fp8)) => Some(KvDtype::Fp8),
        (a, b) => a.or(b),
    }
}

/// An error naming `quantization_config.<key>` in `source`, with the way out.
pub(super) fn quant_error(source: &str, key: &str, why: &str) -> ModelError {
    ModelError::Input(format!("{source}: field \"quantization_config.{key}\" {why}; remove quantization_config and give --quant"))
}

/// `quantization_config.<key>` as a non-empty object, or an error naming it.
pub(super) fn quant_object<'a>(q: &'a Value, key: &str, source: &str) -> Result<&'a serde_json::Map<String, Value>, ModelError> {
    q.get(key).and_then(Value::as_object).filter(|o| !o.is_empty()).ok_or_else(|| quant_error(source, key, "is missing or empty"))
}

/// A ModelOpt `quant_algo` (lower case) as a weight format. W4A16_NVFP4 keeps NVFP4 weights with
/// bf16 activations: priced as INT4 weight-only (4-bit weights, bf16 GEMMs; 0.53 against 0.56
/// bytes per weight).
pub(super) fn modelopt_algo(a: &str) -> Option<Dtype> {
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
pub(super) fn modelopt_mixed(q: &Value, source: &str) -> Result<PartFormats, ModelError> {
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
pub(super) enum Part {
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
pub(super) enum ModulePart {
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
pub(super) fn module_part(module: &str) -> ModulePart {
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
pub(super) fn fbgemm_parts(q: &Value, shape: LayerShape) -> PartFormats {
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
pub(super) fn compressed_tensors(q: &Value, source: &str) -> Result<Dtype, ModelError> {
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
