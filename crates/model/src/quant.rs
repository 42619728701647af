//! Bytes per weight (scales included) and per-component quantization.

use serde::{Deserialize, Serialize};

use crate::spec::ModelSpec;
use crate::ModelError;

/// A weight storage format (a checkpoint's quantization).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// BF16 (or FP16): two bytes per weight.
    Bf16,
    /// FP8 with one fp32 scale per 128x128 block (DeepSeek-V3's checkpoint format).
    Fp8,
    /// NVFP4: fp4 e2m1 with one fp8 e4m3 scale per 16 elements (plus a per-tensor fp32 scale).
    Nvfp4,
    /// MXFP4 (OCP): fp4 with one e8m0 scale per 32 elements.
    Mxfp4,
    /// INT4 weight-only (w4a16): one fp16 scale and one fp16 zero point per group of 128.
    Int4,
}

/// The tensor-core format a GEMM runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ComputeFormat {
    /// BF16 tensor cores.
    Bf16,
    /// FP8 tensor cores.
    Fp8,
    /// FP4 tensor cores (Blackwell).
    Fp4,
}

impl ComputeFormat {
    /// The lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            ComputeFormat::Bf16 => "bf16",
            ComputeFormat::Fp8 => "fp8",
            ComputeFormat::Fp4 => "fp4",
        }
    }
}

impl Dtype {
    /// Every format, widest first (the order "does not fit" suggestions try them in).
    pub const ALL: [Dtype; 5] = [Dtype::Bf16, Dtype::Fp8, Dtype::Int4, Dtype::Nvfp4, Dtype::Mxfp4];

    /// Parses a format given to `flag` (`bf16`/`fp16`, `fp8`, `nvfp4`, `mxfp4`, `int4`/`w4a16`), in
    /// any letter case and with surrounding spaces ("FP8" is fp8); the error quotes it as given.
    pub fn parse(flag: &str, s: &str) -> Result<Self, ModelError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "bf16" | "fp16" => Ok(Dtype::Bf16),
            "fp8" => Ok(Dtype::Fp8),
            "nvfp4" => Ok(Dtype::Nvfp4),
            "mxfp4" => Ok(Dtype::Mxfp4),
            "int4" | "w4a16" => Ok(Dtype::Int4),
            _ => Err(ModelError::Input(format!("{flag} {s:?} is unknown; known: bf16, fp8, nvfp4, mxfp4, int4"))),
        }
    }

    /// Bytes per weight, scales included.
    pub fn bytes(self) -> f64 {
        match self {
            Dtype::Bf16 => 2.0,
            Dtype::Fp8 => 1.0 + 4.0 / (128.0 * 128.0),
            Dtype::Nvfp4 => 0.5 + 1.0 / 16.0,
            Dtype::Mxfp4 => 0.5 + 1.0 / 32.0,
            Dtype::Int4 => 0.5 + 4.0 / 128.0,
        }
    }

    /// The tensor-core format a GEMM on these weights runs in (INT4 weight-only runs in BF16).
    pub fn compute(self) -> ComputeFormat {
        match self {
            Dtype::Bf16 | Dtype::Int4 => ComputeFormat::Bf16,
            Dtype::Fp8 => ComputeFormat::Fp8,
            Dtype::Nvfp4 | Dtype::Mxfp4 => ComputeFormat::Fp4,
        }
    }

    /// The name `--quant` takes.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bf16 => "bf16",
            Dtype::Fp8 => "fp8",
            Dtype::Nvfp4 => "nvfp4",
            Dtype::Mxfp4 => "mxfp4",
            Dtype::Int4 => "int4",
        }
    }
}

/// The format of each weight component.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Quant {
    /// Attention projections.
    pub attention: Dtype,
    /// Dense FFN layers.
    pub dense_ffn: Dtype,
    /// Routed experts.
    pub experts: Dtype,
    /// Shared experts and the router.
    pub shared_experts: Dtype,
    /// Embedding table and LM head.
    pub embeddings: Dtype,
    /// KV cache.
    pub kv_cache: KvDtype,
}

/// KV-cache storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KvDtype {
    /// Two bytes per element.
    Bf16,
    /// One byte per element (plus the layout's scales).
    Fp8,
}

impl KvDtype {
    /// The KV format a checkpoint in `q` declares when its own config says nothing about it, which
    /// is what the engines' `--kv-cache-dtype auto` then gives ([`crate::predict::EngineRelease::auto_kv`]):
    /// FP8 for NVFP4, whose checkpoints are NVIDIA ModelOpt exports that declare an FP8 cache
    /// (`kv_cache_quant_algo` "FP8" or an 8-bit float `kv_cache_scheme`: the nvidia/Kimi-K2.5-NVFP4
    /// config under `data/validation/configs/`, and nvidia/Qwen3-30B-A3B-NVFP4 in vLLM issue
    /// 34752); the model's BF16 for the others. Block-scaled FP8 (DeepSeek, Qwen, GLM, MiniMax),
    /// MXFP4 (gpt-oss, AMD's Quark exports) and AWQ/GPTQ INT4 checkpoints declare no KV format,
    /// and sglang and vLLM then keep the cache in the model's dtype (sglang's
    /// `configure_kv_cache_dtype`; vLLM's docs: "auto" uses the model's unquantized type;
    /// InferenceX PR 1776: its Qwen3.5-MXFP4 sglang recipes "ran with the default (bf16) KV cache").
    /// docs/reference.md, "The KV cache's format".
    pub fn declared_by(q: Dtype) -> KvDtype {
        if q == Dtype::Nvfp4 {
            KvDtype::Fp8
        } else {
            KvDtype::Bf16
        }
    }

    /// A KV-cache format as the engines' `--kv-cache-dtype` names it (any case): `fp8` and its
    /// E4M3/E5M2 variants, or a 16-bit type (`bf16`, `bfloat16`, `fp16`, `float16`, `half`). None
    /// for anything else, `auto` included (the engine's default, which
    /// [`crate::predict::EngineRelease::auto_kv`] decides): callers say what that means.
    pub fn from_engine_name(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fp8" | "fp8_e4m3" | "fp8_e5m2" => Some(KvDtype::Fp8),
            "bf16" | "bfloat16" | "fp16" | "float16" | "half" => Some(KvDtype::Bf16),
            _ => None,
        }
    }

    /// Parses `--kv-dtype` (`bf16`/`fp16` or `fp8`).
    pub fn parse(flag: &str, s: &str) -> Result<Self, ModelError> {
        match s {
            "bf16" | "fp16" => Ok(KvDtype::Bf16),
            "fp8" => Ok(KvDtype::Fp8),
            other => Err(ModelError::Input(format!("{flag} {other:?} is unknown; known: bf16, fp8"))),
        }
    }
}

impl Dtype {
    /// A 4-bit format (NVFP4, MXFP4, INT4 weight-only).
    pub fn is_four_bit(self) -> bool {
        matches!(self, Dtype::Nvfp4 | Dtype::Mxfp4 | Dtype::Int4)
    }
}

impl Quant {
    /// A MoE model's checkpoint format by its usual name. 4-bit checkpoints quantize the expert
    /// GEMMs and keep the other weights in bf16 (the GLM-5 NVFP4 checkpoint measured 56 GB per GPU
    /// at TP8 on the reference deployment; this layout gives 55.8 GB). `fp8` quantizes every
    /// linear layer; embeddings stay bf16 in all of them. The KV cache is the format the checkpoint
    /// declares ([`KvDtype::declared_by`]). [`Quant::checkpoint`] is the layout for either kind of
    /// model.
    pub fn preset(q: Dtype) -> Self {
        let rest = if q.is_four_bit() { Dtype::Bf16 } else { q };
        Quant {
            attention: rest,
            dense_ffn: rest,
            experts: q,
            shared_experts: q,
            embeddings: Dtype::Bf16,
            kv_cache: KvDtype::declared_by(q),
        }
    }

    /// A checkpoint in `q` of a model with or without experts: [`Quant::preset`] for a MoE model;
    /// a dense model's 4-bit checkpoint quantizes every linear layer but the LM head (NVIDIA's
    /// NVFP4 and the AWQ/GPTQ exports of dense models).
    pub fn checkpoint(q: Dtype, has_experts: bool) -> Self {
        let preset = Quant::preset(q);
        if has_experts || !q.is_four_bit() {
            preset
        } else {
            Quant { attention: q, dense_ffn: q, experts: q, shared_experts: q, ..preset }
        }
    }

    /// The format that names the checkpoint: the experts' in a model with experts, else the dense
    /// FFN's.
    pub fn headline(&self, has_experts: bool) -> Dtype {
        if has_experts {
            self.experts
        } else {
            self.dense_ffn
        }
    }

    /// The weights' format as the plan header writes it: the experts' (a MoE model) or the dense
    /// FFN's, followed by the parts of `model` that differ from that checkpoint's usual layout
    /// ([`Quant::checkpoint`]), e.g. "int4 (attention fp8)" for a mixed-precision export.
    pub fn label(&self, model: &ModelSpec) -> String {
        let moe = model.moe.is_some();
        let head = self.headline(moe);
        let usual = Quant::checkpoint(head, moe);
        let shared = model.moe.is_some_and(|m| m.shared_experts > 0);
        let parts = [
            ("attention", self.attention, usual.attention, true),
            ("dense FFN", self.dense_ffn, usual.dense_ffn, moe && model.dense_layers > 0),
            ("shared experts", self.shared_experts, usual.shared_experts, shared),
            ("LM head", self.embeddings, usual.embeddings, true),
        ];
        let differ: Vec<String> = parts
            .iter()
            .filter(|(_, have, want, present)| *present && have != want)
            .map(|(name, have, _, _)| format!("{name} {}", have.name()))
            .collect();
        if differ.is_empty() {
            head.name().to_string()
        } else {
            format!("{} ({})", head.name(), differ.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_names_the_headline_format_and_the_parts_that_differ_from_its_usual_layout() {
        let glm = crate::spec::catalog("glm-5").expect("glm-5");
        let llama = crate::spec::catalog("llama-3.1-8b").expect("llama");
        assert_eq!(Quant::preset(Dtype::Nvfp4).label(&glm), "nvfp4", "a MoE model's 4-bit checkpoint keeps bf16 attention");
        assert_eq!(Quant::preset(Dtype::Fp8).label(&llama), "fp8");
        let mixed = Quant { attention: Dtype::Fp8, embeddings: Dtype::Int4, ..Quant::preset(Dtype::Int4) };
        assert_eq!(mixed.label(&glm), "int4 (attention fp8, LM head int4)");
        // A dense model is named by its FFN, whatever its (absent) experts say; its 4-bit
        // checkpoint quantizes every linear layer.
        let dense = Quant { experts: Dtype::Bf16, shared_experts: Dtype::Bf16, ..Quant::preset(Dtype::Fp8) };
        assert_eq!(dense.label(&llama), "fp8");
        assert_eq!(Quant::checkpoint(Dtype::Nvfp4, false).label(&llama), "nvfp4");
        assert_eq!(Quant::preset(Dtype::Nvfp4).label(&llama), "bf16", "a dense model is named by the FFN it prices");
    }

    #[test]
    fn the_checkpoint_layout_depends_on_the_experts_only_for_4_bit_formats() {
        let dense = Quant::checkpoint(Dtype::Nvfp4, false);
        assert_eq!((dense.attention, dense.dense_ffn, dense.embeddings), (Dtype::Nvfp4, Dtype::Nvfp4, Dtype::Bf16));
        assert_eq!(Quant::checkpoint(Dtype::Nvfp4, true), Quant::preset(Dtype::Nvfp4));
        assert_eq!(Quant::checkpoint(Dtype::Fp8, false), Quant::preset(Dtype::Fp8), "8-bit layouts do not depend on the experts");
    }

    #[test]
    fn bytes_per_weight_include_scales() {
        assert_eq!(Dtype::Nvfp4.bytes(), 0.5625);
        assert_eq!(Dtype::Mxfp4.bytes(), 0.53125);
        assert!((Dtype::Fp8.bytes() - 1.000244).abs() < 1e-6);
        assert!(Dtype::parse("--quant", "fp6").is_err());
    }

    #[test]
    fn a_format_parses_in_any_letter_case_and_the_error_quotes_it_as_given() {
        assert_eq!(Dtype::parse("--quant", " FP8 ").expect("FP8"), Dtype::Fp8);
        assert_eq!(Dtype::parse("--quant", "NvFp4").expect("NvFp4"), Dtype::Nvfp4);
        assert_eq!(Dtype::parse("--quant", "FP16").expect("FP16"), Dtype::Bf16);
        let e = Dtype::parse("--quant", "AWQ").expect_err("awq").to_string();
        assert_eq!(e, "--quant \"AWQ\" is unknown; known: bf16, fp8, nvfp4, mxfp4, int4");
    }
}
