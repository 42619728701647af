//! Bytes per weight (scales included) and per-component quantization.

use serde::{Deserialize, Serialize};

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

    /// Parses a format given to `flag` (`bf16`/`fp16`, `fp8`, `nvfp4`, `mxfp4`, `int4`/`w4a16`).
    pub fn parse(flag: &str, s: &str) -> Result<Self, ModelError> {
        match s {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KvDtype {
    /// Two bytes per element.
    Bf16,
    /// One byte per element (plus the layout's scales).
    Fp8,
}

impl KvDtype {
    /// Parses `--kv-dtype` (`bf16`/`fp16` or `fp8`).
    pub fn parse(flag: &str, s: &str) -> Result<Self, ModelError> {
        match s {
            "bf16" | "fp16" => Ok(KvDtype::Bf16),
            "fp8" => Ok(KvDtype::Fp8),
            other => Err(ModelError::Input(format!("{flag} {other:?} is unknown; known: bf16, fp8"))),
        }
    }
}

impl Quant {
    /// A checkpoint format by its usual name. 4-bit checkpoints of MoE models quantize the expert
    /// GEMMs and keep the other weights in bf16 (a dense model's quantize every linear layer:
    /// [`Quant::every_linear_layer`], which `plan` applies to models without experts) (the GLM-5 NVFP4 checkpoint measured 56 GB per GPU at TP8,
    /// measured on the reference deployment; this layout gives 55.8 GB). `fp8` quantizes every linear layer;
    /// embeddings stay bf16 in all of them.
    pub fn preset(q: Dtype) -> Self {
        let four_bit = matches!(q, Dtype::Nvfp4 | Dtype::Mxfp4 | Dtype::Int4);
        let rest = if four_bit { Dtype::Bf16 } else { q };
        Quant {
            attention: rest,
            dense_ffn: rest,
            experts: q,
            shared_experts: q,
            embeddings: Dtype::Bf16,
            kv_cache: if q == Dtype::Bf16 { KvDtype::Bf16 } else { KvDtype::Fp8 },
        }
    }
}

impl Quant {
    /// These formats with every linear layer (attention, FFN, experts) in `dt`: how a dense
    /// model's 4-bit checkpoint is quantized (nvidia's NVFP4 and the AWQ/GPTQ exports of dense
    /// models quantize every linear layer but the LM head), where a MoE model's keeps its
    /// attention in BF16 ([`Quant::preset`]).
    pub fn every_linear_layer(self, dt: Dtype) -> Quant {
        Quant { attention: dt, dense_ffn: dt, experts: dt, shared_experts: dt, ..self }
    }

    /// The weights' format as the plan header writes it: the experts' (`moe`) or the dense FFN's,
    /// followed by the parts that differ from that checkpoint's usual layout (a MoE model's
    /// [`Quant::preset`]; a dense model's every linear layer in the one format), e.g. "int4
    /// (attention fp8)" for a mixed-precision export. `parts` says which parts the model has:
    /// (dense FFN layers, shared experts).
    pub fn label(&self, moe: bool, parts: (bool, bool)) -> String {
        let head = if moe { self.experts } else { self.dense_ffn };
        let usual = if moe { Quant::preset(head) } else { Quant::preset(head).every_linear_layer(head) };
        let mut differ = Vec::new();
        if self.attention != usual.attention {
            differ.push(format!("attention {}", self.attention.name()));
        }
        if moe && parts.0 && self.dense_ffn != usual.dense_ffn {
            differ.push(format!("dense FFN {}", self.dense_ffn.name()));
        }
        if moe && parts.1 && self.shared_experts != usual.shared_experts {
            differ.push(format!("shared experts {}", self.shared_experts.name()));
        }
        if self.embeddings != usual.embeddings {
            differ.push(format!("LM head {}", self.embeddings.name()));
        }
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
    fn the_label_names_the_headline_format_and_the_parts_that_differ_from_its_preset() {
        assert_eq!(Quant::preset(Dtype::Nvfp4).label(true, (true, true)), "nvfp4", "a 4-bit preset's bf16 attention is its usual layout");
        assert_eq!(Quant::preset(Dtype::Fp8).label(false, (true, false)), "fp8");
        let mixed = Quant { attention: Dtype::Fp8, embeddings: Dtype::Int4, ..Quant::preset(Dtype::Int4) };
        assert_eq!(mixed.label(true, (false, true)), "int4 (attention fp8, LM head int4)");
        // A dense model is named by its FFN, whatever its (absent) experts say; its 4-bit
        // checkpoint quantizes every linear layer.
        let dense = Quant { experts: Dtype::Bf16, shared_experts: Dtype::Bf16, ..Quant::preset(Dtype::Fp8) };
        assert_eq!(dense.label(false, (true, false)), "fp8");
        let four_bit = Quant::preset(Dtype::Nvfp4).every_linear_layer(Dtype::Nvfp4);
        assert_eq!(four_bit.label(false, (true, false)), "nvfp4");
        assert_eq!(Quant::preset(Dtype::Nvfp4).label(false, (true, false)), "bf16", "a dense model is named by the FFN it prices");
    }

    #[test]
    fn bytes_per_weight_include_scales() {
        assert_eq!(Dtype::Nvfp4.bytes(), 0.5625);
        assert_eq!(Dtype::Mxfp4.bytes(), 0.53125);
        assert!((Dtype::Fp8.bytes() - 1.000244).abs() < 1e-6);
        assert!(Dtype::parse("--quant", "fp6").is_err());
    }
}
