//! Property tests: more bandwidth is never slower (on PCIe and on each GPU's own NVLink or xGMI
//! link); throughput does not fall with concurrency before saturation; memory grows with context.
//! The models include the sliding-window (gpt-oss) and hybrid linear-attention (Qwen3-Next,
//! Qwen3.5) ones.

use proptest::prelude::*;
use servetune_model::hw::{gpu, link};
use servetune_model::predict::{Engine, Plan, Scenario};
use servetune_model::quant::{Dtype, Quant};
use servetune_model::spec::catalog;

fn scen(model: &str, q: Dtype, g: &str, l: &str, tp: u32, input: u32, output: u32) -> Scenario {
    Scenario {
        model: catalog(model).expect("model"),
        quant: Quant::preset(q),
        gpu: gpu(g).expect("gpu"),
        link: link(l).expect("link"),
        plan: Plan { gpus: tp, tp, pp: 1, ep: 1, dp_attention: false },
        engine: Engine::default(),
        input_len: input,
        output_len: output,
        max_running: None,
        cluster: None,
        measured_allreduce: None,
        calibrated_on: None,
    }
}

fn model() -> impl Strategy<Value = (&'static str, Dtype, &'static str, u32)> {
    prop_oneof![
        Just(("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", 8)),
        Just(("deepseek-v3", Dtype::Fp8, "h200", 8)),
        Just(("llama-3.1-70b", Dtype::Bf16, "h100-sxm", 4)),
        Just(("qwen3-30b-a3b", Dtype::Bf16, "l40s", 2)),
        Just(("mixtral-8x7b", Dtype::Fp8, "h100-sxm", 2)),
        Just(("gpt-oss-120b", Dtype::Mxfp4, "b200", 1)),
        Just(("gpt-oss-20b", Dtype::Mxfp4, "rtx-5090", 1)),
        Just(("kimi-k2", Dtype::Fp8, "b300", 8)),
        Just(("minimax-m2", Dtype::Fp8, "mi300x", 4)),
        Just(("glm-4.6", Dtype::Fp8, "h200", 8)),
        Just(("glm-4.5", Dtype::Bf16, "gb200", 8)),
        Just(("qwen3-next-80b-a3b", Dtype::Bf16, "h100-sxm", 4)),
        Just(("qwen3.5-397b-a17b", Dtype::Fp8, "mi355x", 4)),
        Just(("llama-4-scout", Dtype::Bf16, "h100-sxm", 4)),
        Just(("llama-4-maverick", Dtype::Fp8, "h200", 8)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn more_bandwidth_is_never_slower(
        (m, q, g, tp) in model(),
        c in 1u32..512,
        mem_scale in 1.0f64..4.0,
        link_scale in 1.0f64..10.0,
        input in 64u32..4096,
        output in 16u32..2048,
    ) {
        let s = scen(m, q, g, "pcie5-p2p", tp, input, output);
        let base = s.point(c).output_tokens_per_s;
        let mut faster = s.clone();
        faster.gpu.mem_bw_gbs *= mem_scale;
        faster.link.beta_gbs *= link_scale;
        let better = faster.point(c).output_tokens_per_s;
        prop_assert!(better >= base * (1.0 - 1e-9), "{m}: {base} -> {better}");
    }

    /// The same on each GPU's own link (NVLink of its generation, AMD's xGMI mesh, PCIe P2P).
    #[test]
    fn more_bandwidth_is_never_slower_on_the_gpus_own_link(
        (m, q, g, tp) in model(),
        c in 1u32..512,
        mem_scale in 1.0f64..4.0,
        link_scale in 1.0f64..10.0,
    ) {
        let own = servetune_model::hw::default_link(&gpu(g).expect("gpu")).to_string();
        let s = scen(m, q, g, &own, tp, 1024, 512);
        let base = s.point(c).output_tokens_per_s;
        let mut faster = s.clone();
        faster.gpu.mem_bw_gbs *= mem_scale;
        faster.link.beta_gbs *= link_scale;
        let better = faster.point(c).output_tokens_per_s;
        prop_assert!(better.is_finite() && better >= base * (1.0 - 1e-9), "{m} on {own}: {base} -> {better}");
    }

    #[test]
    fn throughput_does_not_fall_with_concurrency_before_saturation(
        (m, q, g, tp) in model(),
        input in 64u32..2048,
        output in 64u32..2048,
        l in prop_oneof![Just("nvlink"), Just("pcie5-p2p"), Just("pcie-host-staged")],
    ) {
        let s = scen(m, q, g, l, tp, input, output);
        prop_assume!(s.check_fit().is_ok());
        let cap = s.max_concurrency();
        let mut prev = 0.0;
        let mut c = 1;
        while c <= cap.min(1024) {
            let t = s.point(c).output_tokens_per_s;
            prop_assert!(t >= prev * (1.0 - 1e-9), "{m} {l}: {prev} -> {t} at c={c}");
            prev = t;
            c *= 2;
        }
    }

    #[test]
    fn longer_context_never_fits_more_requests((m, q, g, tp) in model(), a in 128u32..8192, extra in 1u32..8192) {
        let s1 = scen(m, q, g, "nvlink", tp, a, 128);
        let s2 = scen(m, q, g, "nvlink", tp, a + extra, 128);
        prop_assert!(s2.max_concurrency() <= s1.max_concurrency());
    }
}

/// A config.json with the given sizes (any of which may be absurd).
fn config_json(hidden: i64, layers: i64, heads: i64, kv_heads: i64, experts: i64, top_k: i64, ffn: i64) -> String {
    format!(
        r#"{{"model_type":"mixtral","hidden_size":{hidden},"num_hidden_layers":{layers},"vocab_size":32000,"num_attention_heads":{heads},
            "num_key_value_heads":{kv_heads},"intermediate_size":{ffn},"num_local_experts":{experts},"num_experts_per_tok":{top_k}}}"#
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Validation at the boundary: any config either is refused with the file named, or predicts a
    /// finite, positive throughput (never the "-5.2e57 ms" or "0B model at 18,595 tok/s" of before).
    #[test]
    fn any_config_is_refused_or_predicts_finite_positive_throughput(
        hidden in prop_oneof![Just(0i64), Just(-1), 1i64..16384],
        layers in prop_oneof![Just(0i64), 1i64..128],
        heads in prop_oneof![Just(0i64), 1i64..128],
        kv_heads in prop_oneof![Just(0i64), 1i64..128],
        experts in prop_oneof![Just(-8i64), 0i64..300],
        top_k in prop_oneof![Just(0i64), 1i64..400],
        ffn in prop_oneof![Just(0i64), 1i64..65536],
    ) {
        let text = config_json(hidden, layers, heads, kv_heads, experts, top_k, ffn);
        match servetune_model::spec::from_hf_config(&text, "c.json") {
            Err(e) => prop_assert!(e.to_string().starts_with("c.json: "), "{e}"),
            Ok(model) => {
                let s = Scenario { model, ..scen("mixtral-8x7b", Dtype::Fp8, "h100-sxm", "nvlink", 1, 256, 64) };
                if s.check_fit().is_ok() {
                    let p = s.point(4);
                    prop_assert!(p.output_tokens_per_s.is_finite() && p.output_tokens_per_s > 0.0, "{text}: {p:?}");
                    prop_assert!(p.step_ms.total.is_finite() && p.step_ms.total > 0.0, "{text}: {p:?}");
                    let params = s.model.params();
                    prop_assert!(params.active <= params.total * (1.0 + 1e-9), "{text}: {params:?}");
                }
            }
        }
    }
}
