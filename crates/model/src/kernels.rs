//! Decode weight-streaming rates per GPU and weight format, read off the kernel tables in
//! `data/validation/kernels.toml` (NVIDIA AIConfigurator's per-kernel timings, sglang 0.5.14 and
//! 0.5.10; sources and licence in docs/plan-data-sources.md).
//!
//! A decode step reads every weight it touches once, so the time of a GEMM or a fused-MoE layer at
//! decode batch sizes is its weight bytes over the bandwidth the kernel achieves. One global figure
//! (the engine's `hbm_efficiency` 0.8, `moe_efficiency` 0.65 before) hid how much that rate differs by GPU
//! and format: the same 8192 x 8192 GEMM reaches 84% of peak in BF16 on an H100 and 33% in FP8 on
//! a B200. These tables give the rate per (GPU, format) where kernels.toml measured one; elsewhere
//! (AMD, older GPUs, MXFP4) the engine's figures stay.
//!
//! How each figure is derived (the test `the_decode_tables_are_the_kernel_files_medians`
//! recomputes every one from kernels.toml and fails on a drift over 0.0005):
//! - dense: `[[gemm]]` rows of shape N = K = 8192 (a 70B-class projection), every point with
//!   M <= 64 tokens (decode batches; larger ones turn compute-bound and the compute term takes
//!   over), achieved bandwidth N x K x bytes per weight / latency over the GPU's peak, median. An
//!   FP8 checkpoint is either per-tensor scaled (sgl-kernel `fp8_scaled_mm`) or 128 x 128 block
//!   scaled (DeepGEMM); the model does not know which, so FP8 pools both tables. The rate includes
//!   that GEMM's own launch floor (5-10 us in these tables), as a decode step does.
//! - experts: `[[moe]]` rows with balanced routing (AIConfigurator spreads the tokens evenly, so
//!   every expert is read once tokens x top-k reaches the expert count), every point with 1 to 8
//!   tokens per expert, all experts' bytes on a rank (E x 3 x hidden x expert FFN x bytes per
//!   weight / 8 ranks) / latency over the peak, median; points above the peak (the bytes read are
//!   then not what the table's shape implies) are dropped. Below one token per expert the
//!   kernel's floor dominates, which the model counts per kernel
//!   ([`crate::Engine::kernel_overhead_us`]), not in the rate.

use crate::quant::Dtype;

/// Dense decode GEMM rate, share of peak memory bandwidth, by (GPU, weight format).
pub const DENSE_DECODE: &[(&str, Dtype, f64)] = &[
    ("a100", Dtype::Bf16, 0.660),
    ("b200", Dtype::Bf16, 0.706),
    ("b200", Dtype::Fp8, 0.328),
    ("b200", Dtype::Nvfp4, 0.343),
    ("b300", Dtype::Bf16, 0.747),
    ("b300", Dtype::Fp8, 0.358),
    ("b300", Dtype::Nvfp4, 0.373),
    ("gb200", Dtype::Bf16, 0.759),
    ("gb200", Dtype::Fp8, 0.377),
    ("gb200", Dtype::Nvfp4, 0.370),
    ("h100-sxm", Dtype::Bf16, 0.837),
    ("h100-sxm", Dtype::Fp8, 0.683),
    ("h200", Dtype::Bf16, 0.809),
    ("h200", Dtype::Fp8, 0.612),
    ("l40s", Dtype::Bf16, 0.797),
    ("l40s", Dtype::Fp8, 0.682),
    ("rtx-pro-6000-se", Dtype::Bf16, 0.763),
    ("rtx-pro-6000-se", Dtype::Fp8, 0.509),
    ("rtx-pro-6000-se", Dtype::Nvfp4, 0.512),
];

/// Fused-MoE decode rate with every expert read, share of peak memory bandwidth, by (GPU, expert
/// format).
pub const MOE_DECODE: &[(&str, Dtype, f64)] = &[
    ("a100", Dtype::Bf16, 0.720),
    ("a100", Dtype::Int4, 0.588),
    ("b200", Dtype::Bf16, 0.859),
    ("b200", Dtype::Fp8, 0.717),
    ("b200", Dtype::Int4, 0.395),
    ("b200", Dtype::Nvfp4, 0.694),
    ("b300", Dtype::Bf16, 0.850),
    ("b300", Dtype::Fp8, 0.714),
    ("b300", Dtype::Int4, 0.411),
    ("b300", Dtype::Nvfp4, 0.693),
    ("gb200", Dtype::Bf16, 0.899),
    ("gb200", Dtype::Fp8, 0.756),
    ("gb200", Dtype::Int4, 0.413),
    ("gb200", Dtype::Nvfp4, 0.739),
    ("h100-sxm", Dtype::Bf16, 0.827),
    ("h100-sxm", Dtype::Fp8, 0.776),
    ("h100-sxm", Dtype::Int4, 0.648),
    ("h200", Dtype::Bf16, 0.784),
    ("h200", Dtype::Fp8, 0.698),
    ("h200", Dtype::Int4, 0.530),
    ("l40s", Dtype::Bf16, 0.788),
    ("l40s", Dtype::Int4, 0.766),
    ("rtx-pro-6000-se", Dtype::Bf16, 0.807),
    ("rtx-pro-6000-se", Dtype::Fp8, 0.781),
    ("rtx-pro-6000-se", Dtype::Int4, 0.729),
    ("rtx-pro-6000-se", Dtype::Nvfp4, 0.724),
];

fn find(table: &[(&str, Dtype, f64)], gpu: &str, dt: Dtype) -> Option<f64> {
    table.iter().find(|(g, d, _)| *g == gpu && *d == dt).map(|(_, _, e)| *e)
}

/// The dense decode GEMM rate of [`DENSE_DECODE`] for `dt` weights on `gpu` (a catalog name),
/// where kernels.toml has one, as measured: the GEMM's whole latency, its launch floor included.
pub fn dense_decode_table(gpu: &str, dt: Dtype) -> Option<f64> {
    find(DENSE_DECODE, gpu, dt)
}

/// Bytes of the table's 8192 x 8192 GEMM in `dt`, by kernels.toml's convention for
/// `weight_read_gbs` (bf16 2, fp8 1, nvfp4 0.5625 bytes per weight).
fn table_gemm_bytes(dt: Dtype) -> f64 {
    let per_weight = match dt {
        Dtype::Bf16 => 2.0,
        Dtype::Nvfp4 => 0.5625,
        _ => 1.0,
    };
    8192.0 * 8192.0 * per_weight
}

/// The dense decode rate for `dt` weights on `gpu` with peak bandwidth `peak_gbs`, net of a
/// `floor_us` the step already counts for each kernel ([`crate::Engine::kernel_overhead_us`]):
/// the table's latency less that floor is the time spent streaming. At 5.2 us this takes an H100's
/// BF16 rate from 0.84 to 0.94 and a B200's FP8 rate from 0.33 to 0.41 (its FP8 GEMV floor is
/// about 10 us); a floor longer than the whole measured latency leaves the peak.
pub fn dense_decode_efficiency(gpu: &str, dt: Dtype, peak_gbs: f64, floor_us: f64) -> Option<f64> {
    let rate = dense_decode_table(gpu, dt)?;
    let bytes_per_us = peak_gbs * 1e3;
    let bytes = table_gemm_bytes(dt);
    let stream_us = bytes / (rate * bytes_per_us) - floor_us.max(0.0);
    Some(if stream_us > 0.0 { (bytes / (stream_us * bytes_per_us)).min(1.0) } else { 1.0 })
}

/// The fused-MoE decode rate for `dt` experts on `gpu`, where kernels.toml has one.
pub fn moe_decode_efficiency(gpu: &str, dt: Dtype) -> Option<f64> {
    find(MOE_DECODE, gpu, dt)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KERNELS: &str = include_str!("../data/validation/kernels.toml");

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }

    fn peak(gpu: &str) -> f64 {
        crate::hw::gpu(gpu).expect("a catalog GPU").mem_bw_gbs * 1e9
    }

    /// kernels.toml names the A100 80 GB as AIConfigurator's system does; the catalog calls it a100.
    fn catalog_name(table_gpu: &str) -> &str {
        if table_gpu == "a100-80gb" {
            "a100"
        } else {
            table_gpu
        }
    }

    fn floats(v: &toml::Value) -> Vec<f64> {
        v.as_array()
            .expect("an array")
            .iter()
            .map(|x| x.as_float().or_else(|| x.as_integer().map(|i| i as f64)).expect("a number"))
            .collect()
    }

    fn recompute_dense() -> Vec<(String, Dtype, f64)> {
        let t: toml::Table = KERNELS.parse().expect("kernels.toml parses");
        let mut pts: Vec<((String, Dtype), f64)> = Vec::new();
        for g in t["gemm"].as_array().expect("[[gemm]]") {
            if g["n"].as_integer() != Some(8192) || g["k"].as_integer() != Some(8192) {
                continue;
            }
            // The file's bytes-per-weight convention for its derived weight_read_gbs.
            let (dt, bytes) = match g["dtype"].as_str().expect("dtype") {
                "bfloat16" => (Dtype::Bf16, 2.0),
                "fp8" | "fp8_block" => (Dtype::Fp8, 1.0),
                "nvfp4" => (Dtype::Nvfp4, 0.5625),
                other => panic!("an unexpected gemm dtype {other}"),
            };
            let gpu = catalog_name(g["gpu"].as_str().expect("gpu")).to_string();
            for (m, lat) in floats(&g["m_tokens"]).into_iter().zip(floats(&g["latency_us"])) {
                if m <= 64.0 {
                    pts.push(((gpu.clone(), dt), 8192.0 * 8192.0 * bytes / (lat * 1e-6) / peak(&gpu)));
                }
            }
        }
        group(pts)
    }

    fn recompute_moe() -> Vec<(String, Dtype, f64)> {
        let t: toml::Table = KERNELS.parse().expect("kernels.toml parses");
        let mut pts = Vec::new();
        for m in t["moe"].as_array().expect("[[moe]]") {
            if m["routing"].as_str() != Some("balanced") {
                continue;
            }
            let dt = match m["dtype"].as_str().expect("dtype") {
                "bfloat16" => Dtype::Bf16,
                "fp8_block" => Dtype::Fp8,
                "nvfp4" => Dtype::Nvfp4,
                "int4_wo" => Dtype::Int4,
                other => panic!("an unexpected moe dtype {other}"),
            };
            let int = |k: &str| m[k].as_integer().expect(k) as f64;
            let (e, k) = (int("num_experts"), int("topk"));
            let rank_bytes = e * 3.0 * int("hidden_size") * int("inter_size") * dt.bytes() / 8.0;
            let gpu = catalog_name(m["gpu"].as_str().expect("gpu")).to_string();
            for (n, lat) in floats(&m["num_tokens"]).into_iter().zip(floats(&m["latency_us"])) {
                let per_expert = n * k / e;
                let eff = rank_bytes / (lat * 1e-6) / peak(&gpu);
                if (1.0..=8.0).contains(&per_expert) && eff <= 1.0 {
                    pts.push(((gpu.clone(), dt), eff));
                }
            }
        }
        group(pts)
    }

    fn group(pts: Vec<((String, Dtype), f64)>) -> Vec<(String, Dtype, f64)> {
        let mut keys: Vec<(String, Dtype)> = pts.iter().map(|(k, _)| k.clone()).collect();
        keys.sort_by(|a, b| (&a.0, a.1.name()).cmp(&(&b.0, b.1.name())));
        keys.dedup();
        keys.into_iter()
            .map(|key| {
                let v = pts.iter().filter(|(k, _)| *k == key).map(|(_, e)| *e).collect();
                (key.0, key.1, median(v))
            })
            .collect()
    }

    fn check(name: &str, table: &[(&str, Dtype, f64)], derived: Vec<(String, Dtype, f64)>) {
        assert_eq!(table.len(), derived.len(), "{name}: {derived:?}");
        for (gpu, dt, eff) in derived {
            let have = find(table, &gpu, dt).unwrap_or_else(|| panic!("{name}: no entry for {gpu} {}", dt.name()));
            assert!((have - eff).abs() < 5e-4, "{name} {gpu} {}: table {have} vs kernels.toml {eff:.4}", dt.name());
        }
    }

    #[test]
    fn the_decode_tables_are_the_kernel_files_medians() {
        check("dense", DENSE_DECODE, recompute_dense());
        check("moe", MOE_DECODE, recompute_moe());
    }

    #[test]
    fn a_gpu_or_format_without_a_table_has_no_rate() {
        assert_eq!(dense_decode_efficiency("mi300x", Dtype::Bf16, 5300.0, 5.0), None);
        assert_eq!(moe_decode_efficiency("h200", Dtype::Mxfp4), None);
        assert_eq!(dense_decode_table("h200", Dtype::Fp8), Some(0.612));
    }

    #[test]
    fn the_dense_rate_nets_out_the_floor_the_step_counts_per_kernel() {
        // H200 FP8: 67.1 MB at 0.612 of 4,800 GB/s is 22.8 us, of which 5 us is the floor.
        let whole = dense_decode_efficiency("h200", Dtype::Fp8, 4800.0, 0.0).expect("a table");
        assert!((whole - 0.612).abs() < 1e-12);
        let net = dense_decode_efficiency("h200", Dtype::Fp8, 4800.0, 5.0).expect("a table");
        let latency_us = 8192.0 * 8192.0 / (0.612 * 4800.0 * 1e3);
        assert!((net - 0.612 * latency_us / (latency_us - 5.0)).abs() < 1e-9, "{net}");
        assert_eq!(dense_decode_efficiency("h200", Dtype::Fp8, 4800.0, 1e6), Some(1.0), "a floor past the latency leaves the peak");
    }
}
