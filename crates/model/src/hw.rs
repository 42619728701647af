//! GPUs and links. Every number carries its source in a comment; links can be replaced by
//! measured values (`--link-latency`, `--link-bw`, or a `servetune fabric` LinkProfile).

use serde::{Deserialize, Serialize};

use crate::ModelError;

/// One GPU model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuSpec {
    pub name: &'static str,
    pub memory_gb: f64,
    /// Peak memory bandwidth, GB/s.
    pub mem_bw_gbs: f64,
    /// Dense tensor TFLOPS (no sparsity).
    pub bf16_tflops: f64,
    pub fp8_tflops: f64,
    /// 0 when the GPU has no FP4 tensor cores.
    pub fp4_tflops: f64,
    /// NVLink bandwidth per direction, GB/s (0: none).
    pub nvlink_gbs: f64,
    pub source: &'static str,
}

pub const GPUS: &[&str] = &["rtx-pro-6000-se", "h100-sxm", "h200", "b200", "a100", "l40s", "rtx-5090", "rtx-4090"];

/// The GPU catalog.
pub fn gpu(name: &str) -> Result<GpuSpec, ModelError> {
    let g = match name {
        // shared/reference/hardware.md: 96 GB GDDR7 (nvidia-smi 97,887 MiB), 1,792 GB/s (third-party
        // spec pages), 468/936/1,871 TFLOPS at 2,430 MHz (NVIDIA AIConfigurator system file).
        "rtx-pro-6000-se" => GpuSpec {
            name: "rtx-pro-6000-se",
            memory_gb: 97_887.0 * 1.048_576 / 1000.0,
            mem_bw_gbs: 1792.0,
            bf16_tflops: 468.0,
            fp8_tflops: 936.0,
            fp4_tflops: 1871.0,
            nvlink_gbs: 0.0,
            source: "shared/reference/hardware.md (AIConfigurator system file; spec pages)",
        },
        // hardware.md / NVIDIA H100 datasheet (SXM): 80 GB HBM3, 3.35 TB/s, 989.5 / 1,979 dense, NVLink 900 GB/s total.
        "h100-sxm" => GpuSpec {
            name: "h100-sxm",
            memory_gb: 80.0,
            mem_bw_gbs: 3350.0,
            bf16_tflops: 989.5,
            fp8_tflops: 1979.0,
            fp4_tflops: 0.0,
            nvlink_gbs: 450.0,
            source: "shared/reference/hardware.md; NVIDIA H100 datasheet",
        },
        // hardware.md / NVIDIA H200 datasheet: 141 GB HBM3e, 4.8 TB/s.
        "h200" => GpuSpec {
            name: "h200",
            memory_gb: 141.0,
            mem_bw_gbs: 4800.0,
            bf16_tflops: 989.5,
            fp8_tflops: 1979.0,
            fp4_tflops: 0.0,
            nvlink_gbs: 450.0,
            source: "shared/reference/hardware.md; NVIDIA H200 datasheet",
        },
        // hardware.md: B200 (HGX) 180 GB HBM3e, 8 TB/s, 2,250 / 4,500 / 9,000 dense, NVLink 900 GB/s per direction.
        "b200" => GpuSpec {
            name: "b200",
            memory_gb: 180.0,
            mem_bw_gbs: 8000.0,
            bf16_tflops: 2250.0,
            fp8_tflops: 4500.0,
            fp4_tflops: 9000.0,
            nvlink_gbs: 900.0,
            source: "shared/reference/hardware.md; NVIDIA HGX B200 datasheet",
        },
        // NVIDIA A100 80GB SXM datasheet: 2,039 GB/s, BF16 312 dense, NVLink 600 GB/s total; no FP8.
        "a100" => GpuSpec {
            name: "a100",
            memory_gb: 80.0,
            mem_bw_gbs: 2039.0,
            bf16_tflops: 312.0,
            fp8_tflops: 312.0,
            fp4_tflops: 0.0,
            nvlink_gbs: 300.0,
            source: "NVIDIA A100 80GB SXM datasheet (FP8 runs at the BF16 rate)",
        },
        // NVIDIA L40S datasheet: 48 GB GDDR6, 864 GB/s, BF16 362 / FP8 733 dense (half the sparsity figures), PCIe Gen4.
        "l40s" => GpuSpec {
            name: "l40s",
            memory_gb: 48.0,
            mem_bw_gbs: 864.0,
            bf16_tflops: 362.0,
            fp8_tflops: 733.0,
            fp4_tflops: 0.0,
            nvlink_gbs: 0.0,
            source: "NVIDIA L40S datasheet",
        },
        // NVIDIA RTX Blackwell (GB202) whitepaper, GeForce RTX 5090: 32 GB GDDR7, 1,792 GB/s; dense
        // FP16/BF16 with FP32 accumulate 209.5, FP8 419, FP4 838 (half the published sparse AI TOPS);
        // not confirmed from a datasheet.
        "rtx-5090" => GpuSpec {
            name: "rtx-5090",
            memory_gb: 32.0,
            mem_bw_gbs: 1792.0,
            bf16_tflops: 209.5,
            fp8_tflops: 419.0,
            fp4_tflops: 838.0,
            nvlink_gbs: 0.0,
            source: "NVIDIA RTX Blackwell whitepaper (derived, unconfirmed)",
        },
        // NVIDIA Ada whitepaper, RTX 4090: 24 GB, 1,008 GB/s; dense FP16 w/ FP32 accumulate 165.2, FP8 330.3.
        "rtx-4090" => GpuSpec {
            name: "rtx-4090",
            memory_gb: 24.0,
            mem_bw_gbs: 1008.0,
            bf16_tflops: 165.2,
            fp8_tflops: 330.3,
            fp4_tflops: 0.0,
            nvlink_gbs: 0.0,
            source: "NVIDIA Ada Lovelace architecture whitepaper",
        },
        other => return Err(ModelError::Input(format!("--gpu {other:?} is unknown; known: {}", GPUS.join(", ")))),
    };
    Ok(g)
}

impl GpuSpec {
    /// Dense TFLOPS for a GEMM computing in `fmt` ("bf16", "fp8", "fp4"); falls back to the next
    /// wider format when the GPU lacks the narrow one.
    pub fn tflops(&self, fmt: &str) -> f64 {
        match fmt {
            "fp4" if self.fp4_tflops > 0.0 => self.fp4_tflops,
            "fp4" | "fp8" if self.fp8_tflops > 0.0 => self.fp8_tflops,
            _ => self.bf16_tflops,
        }
    }
}

/// A GPU-to-GPU link in the alpha-beta model: time(bytes) = alpha + bytes / beta.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkProfile {
    pub name: String,
    /// Latency of one transfer (one ring hop), microseconds.
    pub alpha_us: f64,
    /// Bandwidth per direction, GB/s.
    pub beta_gbs: f64,
    /// Where the numbers come from.
    pub source: String,
}

pub const LINKS: &[&str] = &["nvlink", "pcie5-p2p", "pcie4-p2p", "pcie-host-staged", "cross-numa"];

/// The link catalog. Hop latencies follow NCCL's own cost model for Ring/LL (NVIDIA/nccl
/// src/graph/tuning.cc, shared/reference/hardware.md): 0.6 us per NVLink hop, 1.0 us per PCIe hop.
pub fn link(name: &str) -> Result<LinkProfile, ModelError> {
    let l = |name: &str, alpha_us: f64, beta_gbs: f64, source: &str| LinkProfile {
        name: name.into(),
        alpha_us,
        beta_gbs,
        source: source.into(),
    };
    Ok(match name {
        "nvlink" => l(name, 0.6, 450.0, "NVLink4 450 GB/s per direction (H100/H200 datasheets); NCCL tuning.cc NVLink LL hop 0.6 us"),
        "pcie5-p2p" => l(name, 1.0, 50.0, "PCIe Gen5 x16 P2P measured 48-55 GB/s, 0.44-0.53 us (hardware.md); NCCL PCIe LL hop 1.0 us"),
        "pcie4-p2p" => l(
            name,
            1.0,
            24.0,
            "PCIe Gen4 x16 (32 GB/s raw); 24 GB/s is an estimate of achieved P2P, not a measurement; NCCL PCIe LL hop 1.0 us",
        ),
        // The reference deployment: 13.7 us for 12 KB and 40 us for 786 KB through host memory
        // (hardware.md): alpha 13.3 us, beta 29.4 GB/s fit those two points.
        "pcie-host-staged" => l(name, 13.3, 29.4, "reference deployment, KVM without P2P: 13.7 us @ 12 KB, 40 us @ 786 KB (hardware.md)"),
        // LXC on the reference box: 40.2 GB/s cross-NUMA vs 53.8 same-NUMA (hardware.md); the latency
        // adds an estimated 0.5 us for the inter-socket hop (not measured).
        "cross-numa" => l(name, 1.5, 40.2, "reference box in LXC: 40.2 GB/s cross-NUMA (hardware.md); latency estimated"),
        other => return Err(ModelError::Input(format!("--link {other:?} is unknown; known: {}", LINKS.join(", ")))),
    })
}

/// NCCL's base latency of one Ring/LL collective, microseconds (tuning.cc, hardware.md).
pub const NCCL_RING_LL_BASE_US: f64 = 6.6;

impl LinkProfile {
    /// Ring all-reduce of `bytes` over `n` GPUs: base + 2(n-1) hops + bytes * 2(n-1)/n / beta
    /// (NCCL's cost model and nccl-tests' bus-bandwidth factor).
    pub fn allreduce_us(&self, n: u32, bytes: f64) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        let n = n as f64;
        NCCL_RING_LL_BASE_US + 2.0 * (n - 1.0) * self.alpha_us + bytes * 2.0 * (n - 1.0) / n / (self.beta_gbs * 1e3)
    }

    /// Point-to-point send of `bytes`.
    pub fn send_us(&self, bytes: f64) -> f64 {
        self.alpha_us + bytes / (self.beta_gbs * 1e3)
    }

    /// All-to-all of `bytes` per GPU over `n` GPUs ((n-1)/n of the data leaves each GPU).
    pub fn alltoall_us(&self, n: u32, bytes: f64) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        let n = n as f64;
        NCCL_RING_LL_BASE_US + (n - 1.0) * self.alpha_us + bytes * (n - 1.0) / n / (self.beta_gbs * 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_staged_link_reproduces_the_reference_copies() {
        let l = link("pcie-host-staged").expect("link");
        assert!((l.send_us(12_288.0) - 13.7).abs() < 0.2, "{}", l.send_us(12_288.0));
        assert!((l.send_us(786_432.0) - 40.0).abs() < 1.0, "{}", l.send_us(786_432.0));
    }

    #[test]
    fn nccl_ring_latency_for_eight_pcie_gpus_is_about_20_us() {
        // hardware.md: 8 GPUs over PCIe with LL: about 20.6 us.
        let l = link("pcie5-p2p").expect("link");
        assert!((l.allreduce_us(8, 0.0) - 20.6).abs() < 0.01);
    }

    #[test]
    fn unknown_names_list_the_catalog() {
        assert!(gpu("v100").expect_err("gpu").to_string().contains("rtx-pro-6000-se, h100-sxm"));
        assert!(link("infiniband").expect_err("link").to_string().contains("nvlink, pcie5-p2p"));
    }
}
