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
    /// A checkpoint format by its usual name. 4-bit checkpoints quantize the expert GEMMs and keep
    /// the other weights in bf16 (the GLM-5 NVFP4 checkpoint measured 56 GB per GPU at TP8,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_per_weight_include_scales() {
        assert_eq!(Dtype::Nvfp4.bytes(), 0.5625);
        assert_eq!(Dtype::Mxfp4.bytes(), 0.53125);
        assert!((Dtype::Fp8.bytes() - 1.000244).abs() < 1e-6);
        assert!(Dtype::parse("--quant", "fp6").is_err());
    }
}
