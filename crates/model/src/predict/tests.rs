//! Unit tests of the performance model, and the scenario builders other modules' tests use
//! (`crate::predict::tests::scenario`, `on_nodes`).

use super::*;
use crate::comm;
use crate::hw::{gpu, link};
use crate::quant::{ComputeFormat, Dtype, KvDtype};
use crate::spec::catalog;

pub fn scenario(model: &str, q: Dtype, g: &str, l: &str, gpus: u32, tp: u32) -> Scenario {
    Scenario {
        model: catalog(model).expect("model"),
        quant: Quant::preset(q),
        gpu: gpu(g).expect("gpu"),
        link: link(l).expect("link"),
        plan: Plan { gpus, tp, pp: 1, ep: 1, dp_attention: false },
        engine: Engine::default(),
        input_len: 1024,
        output_len: 1024,
        max_running: None,
        cluster: None,
        measured_allreduce: None,
        calibrated_on: None,
    }
}

#[test]
fn relatives_read_every_kernel_rate_of_the_gpu_whose_tables_they_share() {
    use crate::kernels::{
        dense_decode_table, mla_decode_efficiency, moe_decode_efficiency, prefill_attention_efficiency, MoeSplit, PrefillAttention,
    };
    for (relative, tables) in [
        ("h800", "h100-sxm"),
        ("gh200-96gb", "h100-sxm"),
        ("gh200-144gb", "h200"),
        ("h200-nvl", "h200"),
        ("a100-pcie", "a100"),
        ("a100-pcie-40gb", "a100"),
        ("a100-40gb", "a100"),
    ] {
        assert_eq!(hopper_fp8_kv_efficiency(relative), hopper_fp8_kv_efficiency(tables), "{relative}");
        for dt in [Dtype::Bf16, Dtype::Fp8, Dtype::Int4] {
            assert_eq!(dense_decode_table(relative, dt), dense_decode_table(tables, dt), "{relative} {dt:?}");
            for split in [MoeSplit::Tp, MoeSplit::Ep] {
                assert_eq!(moe_decode_efficiency(relative, dt, split), moe_decode_efficiency(tables, dt, split), "{relative} {dt:?}");
            }
        }
        assert_eq!(mla_decode_efficiency(relative, false, 16.0), mla_decode_efficiency(tables, false, 16.0), "{relative}");
        assert_eq!(
            prefill_attention_efficiency(relative, PrefillAttention::Gqa, 4096.0),
            prefill_attention_efficiency(tables, PrefillAttention::Gqa, 4096.0),
            "{relative}"
        );
    }
    // The relatives do read tables: the Hopper ones an FP8-KV rate, all a BF16 GEMM rate.
    assert!(hopper_fp8_kv_efficiency("h800").is_some() && hopper_fp8_kv_efficiency("gh200-144gb").is_some());
    assert!(dense_decode_table("a100-pcie", Dtype::Bf16).is_some() && dense_decode_table("gh200-96gb", Dtype::Bf16).is_some());
}

#[test]
fn dense_mla_reads_its_kv_at_the_tables_rate_for_its_heads_per_rank() {
    use crate::kernels::mla_decode_efficiency;
    // DeepSeek-V3 (128 heads) at TP8 on a B200 with an FP8 cache: 16 heads per rank.
    let mut tp8 = scenario("deepseek-v3", Dtype::Fp8, "b200", "nvlink5", 8, 8);
    // DeepSeek's block-FP8 checkpoint declares no KV format (a BF16 cache under `auto`): stated.
    assert_eq!(tp8.quant.kv_cache, KvDtype::Bf16);
    tp8.quant.kv_cache = KvDtype::Fp8;
    assert_eq!(Some(tp8.kv_read_efficiency()), mla_decode_efficiency("b200", true, 16.0));
    // DP attention keeps every head on each rank.
    let mut dp = tp8.clone();
    dp.plan.dp_attention = true;
    assert_eq!(Some(dp.kv_read_efficiency()), mla_decode_efficiency("b200", true, 128.0));
    assert!(dp.kv_read_efficiency() < tp8.kv_read_efficiency(), "more heads per rank, a slower latent read");
    // A BF16 cache reads at its own column.
    let mut bf16 = tp8.clone();
    bf16.quant.kv_cache = KvDtype::Bf16;
    assert_eq!(Some(bf16.kv_read_efficiency()), mla_decode_efficiency("b200", false, 16.0));
    // Hopper's FP8 path, a DSA model, and a GPU without tables keep the engine's efficiency.
    let hbm = Engine::default().hbm_efficiency;
    let fp8_kv = |mut s: Scenario| {
        s.quant.kv_cache = KvDtype::Fp8;
        s.kv_read_efficiency()
    };
    assert_eq!(fp8_kv(scenario("deepseek-v3", Dtype::Fp8, "h200", "nvlink", 8, 8)), hbm);
    assert_eq!(fp8_kv(scenario("glm-5", Dtype::Fp8, "b200", "nvlink5", 8, 8)), hbm);
    assert_eq!(fp8_kv(scenario("deepseek-v3", Dtype::Fp8, "mi300x", "xgmi", 8, 8)), hbm);
}

#[test]
fn a_chunk_beside_decode_costs_its_all_reduce_bytes_beyond_the_decode_batch_and_less_than_a_pass() {
    let s = scenario("llama-3.1-70b", Dtype::Fp8, "h100-sxm", "nvlink", 8, 8);
    for tokens in [64.0, 1024.0, 8192.0] {
        let beside = s.prefill_ms(tokens, 1024.0, PrefillPass::Beside(64.0));
        let alone = s.prefill_ms(tokens, 1024.0, PrefillPass::Standalone);
        assert!(beside > 0.0 && beside < alone, "{tokens} tokens: beside {beside} ms, alone {alone} ms");
    }
    // The chunk's bytes are priced beyond the decode batch's own message: against a larger
    // decode batch the same chunk adds what the all-reduce model charges for the difference.
    let m = &s.model;
    let bytes = |t: f64| t * m.hidden as f64 * 2.0;
    let extra = |decode: f64| s.tp_allreduce(bytes(1024.0 + decode)).us - s.tp_allreduce(bytes(decode)).us;
    let (small, large) = (s.prefill_ms(1024.0, 1024.0, PrefillPass::Beside(1.0)), s.prefill_ms(1024.0, 1024.0, PrefillPass::Beside(256.0)));
    // Two all-reduces per layer and the embedding's, and the one sampled token's logits beyond
    // the decode batch's in the LM head's all-gather.
    let gather = |d: f64| s.logits_gather_us(d + 1.0) - s.logits_gather_us(d);
    let want = ((2.0 * m.layers as f64 + 1.0) * (extra(256.0) - extra(1.0)) + gather(256.0) - gather(1.0)) * 1e-3 * s.engine.comm_scale;
    assert!((large - small - want).abs() < 1e-9, "{large} - {small} vs {want}");
}

#[test]
fn kernels_per_step_follow_the_documented_per_layer_counts() {
    // Llama-3.1-70B: 80 GQA layers of 5 attention + 4 FFN kernels, two all-reduces each under TP,
    // and once per pass the embedding's all-reduce and the logits' all-gather.
    let llama_tp8 = scenario("llama-3.1-70b", Dtype::Fp8, "h200", "nvlink", 8, 8);
    assert_eq!(llama_tp8.kernels_per_step(), 80.0 * (5.0 + 4.0 + 2.0) + 4.0 + 2.0);
    let llama_tp1 = scenario("llama-3.1-70b", Dtype::Fp8, "h200", "nvlink", 1, 1);
    assert_eq!(llama_tp1.kernels_per_step(), 80.0 * (5.0 + 4.0) + 4.0);
    // DeepSeek-V3: 61 MLA layers, 3 dense FFNs, 58 MoE layers with a shared expert.
    let ds = scenario("deepseek-v3", Dtype::Fp8, "h200", "nvlink", 8, 8);
    assert_eq!(ds.kernels_per_step(), 61.0 * 10.0 + 3.0 * 4.0 + 58.0 * 11.0 + 61.0 * 2.0 + 4.0 + 2.0);
    // GLM-5's DSA indexer adds 8 kernels to each of its MLA layers.
    let glm = scenario("glm-5", Dtype::Fp8, "b200", "nvlink5", 8, 8);
    let m = &glm.model;
    let moe = m.moe.expect("moe");
    let ffn = m.dense_layers as f64 * 4.0 + m.moe_layers() as f64 * (8.0 + if moe.shared_experts > 0 { 3.0 } else { 0.0 });
    assert_eq!(glm.kernels_per_step(), m.layers as f64 * (18.0 + 2.0) + ffn + 4.0 + 2.0);
    // The floor is the count times the fitted per-kernel cost.
    let e = Engine::default();
    assert!((ds.overhead_ms() - e.kernel_overhead_us * ds.kernels_per_step() / 1e3).abs() < 1e-12);
}

#[test]
fn minimax_all_reduces_its_qk_norm_in_every_layer_under_tp_only() {
    // MiniMax-M2's q/k norm spans all heads: under TP each of its 62 layers adds the norm's
    // all-reduce and the norm's second half to the kernels, and the all-reduce to the step.
    // (On PCIe, where the all-reduce is the model's and costs more than its kernel floor.)
    let tp4 = scenario("minimax-m2", Dtype::Fp8, "h200", "pcie5-p2p", 4, 4);
    let mut local = tp4.clone();
    local.model.qk_norm_across_heads = false;
    assert_eq!(tp4.kernels_per_step() - local.kernels_per_step(), 2.0 * 62.0);
    let (a, b) = (tp4.stage(64.0, 1536.0).0, local.stage(64.0, 1536.0).0);
    let expected = 62.0 * tp4.tp_allreduce(64.0 * 8.0).us * 1e-3 * tp4.engine.comm_scale;
    assert!((a.communication - b.communication - expected).abs() < 1e-9, "{} vs {}", a.communication, b.communication);
    assert!(tp4.tp_allreduce(64.0 * 8.0).us > 0.0);
    let d = tp4.stage(64.0, 1536.0).1;
    assert_eq!((d.qk_norm_allreduces, d.qk_norm_allreduce_us), (62.0, tp4.tp_allreduce(64.0 * 8.0).us));
    assert_eq!(local.stage(64.0, 1536.0).1.qk_norm_allreduces, 0.0);
    // The bottleneck's words count them apart from the activation all-reduces.
    let words = |qk_norm_us: f64| {
        crate::report::bottleneck_words(&Bottleneck::Communication {
            share: 0.5,
            step_ms: 20.0,
            tp: 4,
            link: "pcie5-p2p".into(),
            allreduces: 124.0,
            allreduce_us: 30.0,
            qk_norm: Some(QkNormAllReduces { count: 62.0, us: qk_norm_us }),
            qk_gathers: None,
            logits_gather_us: None,
            across: None,
        })
    };
    let priced = words(12.5);
    assert!(priced.contains("124 all-reduces x 30.0 us and 62 q/k-norm all-reduces x 12.5 us"), "{priced}");
    let within = words(0.0);
    assert!(within.contains("and 62 q/k-norm all-reduces within their kernel floors"), "{within}");
    // On one GPU, or with DP attention (every rank holds all heads), there is nothing to reduce.
    let tp1 = scenario("minimax-m2", Dtype::Fp8, "h200", "pcie5-p2p", 1, 1);
    let mut tp1_local = tp1.clone();
    tp1_local.model.qk_norm_across_heads = false;
    assert_eq!(tp1.kernels_per_step(), tp1_local.kernels_per_step());
    let mut dp = tp4.clone();
    dp.plan.dp_attention = true;
    let mut dp_local = dp.clone();
    dp_local.model.qk_norm_across_heads = false;
    assert_eq!(dp.kernels_per_step(), dp_local.kernels_per_step());
}

#[test]
fn a_measured_all_reduce_prices_nccls_all_reduces_and_leaves_the_custom_kernel_alone() {
    use crate::comm::{MeasuredAllReduce, MeasuredRun};
    // 8 PCIe GPUs without P2P: the engines run NCCL. A box whose NCCL takes three times the
    // model's (plus the floor a measurement holds) costs three times the model's all-reduces.
    let mut s = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie-host-staged", 8, 8);
    let floor = s.engine.gemm_floor_us;
    let pts = (10..=27).step_by(2).map(|p| (2f64.powi(p), 3.0 * comm::nccl(&s.link, 8, 2f64.powi(p)).us + floor)).collect();
    let m = MeasuredAllReduce {
        source: "ar.json".into(),
        runs: vec![MeasuredRun::new(8, pts).expect("run")],
        measured_on: Some((s.link.name.clone(), s.gpu.name.clone())),
    };
    let before = s.point(16);
    let bytes = 16.0 * s.model.hidden as f64 * 2.0;
    let model = s.tp_allreduce(bytes).us;
    s.measured_allreduce = Some(std::sync::Arc::new(m.clone()));
    let measured = s.tp_allreduce(bytes);
    assert_eq!(measured.method, comm::Method::Measured { ranks: 8 });
    assert!((measured.us / model - 3.0).abs() < 0.05, "{} against {model}", measured.us);
    assert!(s.point(16).tpot_ms > before.tpot_ms, "slower all-reduces, a longer step");
    // An early release's step scale leaves the measured all-reduce alone (the box's own figure)
    // and scales the model's terms.
    let mut early = s.clone();
    early.engine.release_step_scale = 2.2;
    // (The logits' all-gather is the model's, not the measurement's: it takes the scale.)
    let (now, then) = (s.point(16).step_ms, early.point(16).step_ms);
    let c = s.communication(16.0);
    assert!(c.measured_ms > 0.0 && c.ms > c.measured_ms);
    let want = 1.2 * (c.ms - c.measured_ms);
    assert!((then.communication - now.communication - want).abs() < 1e-9 * now.communication, "{then:?} against {now:?}");
    assert!((then.weights / now.weights - 2.2).abs() < 1e-9);
    // It prices this box only: the same deployment with P2P (a what-if, the P2P fix) takes the model.
    let mut p2p = s.clone();
    p2p.link = crate::hw::link("pcie5-p2p").expect("link");
    assert_eq!(p2p.tp_allreduce(bytes), comm::allreduce(&p2p.link, 8, bytes, true));
    // 8x H200 on NVLink under vLLM runs its custom kernel for decode-sized messages: the
    // measured NCCL does not describe it and changes nothing there.
    let mut nv = scenario("llama-3.1-70b", Dtype::Fp8, "h200", "nvlink", 8, 8);
    nv.engine = EngineName::Vllm.defaults();
    let small = 16.0 * 8192.0 * 2.0;
    let custom = nv.tp_allreduce(small);
    nv.measured_allreduce = Some(std::sync::Arc::new(m));
    assert_eq!(nv.tp_allreduce(small), custom);
}

#[test]
fn a_catalog_nvlink_box_prices_the_custom_all_reduce_from_the_measured_table() {
    // 8x H200 under vLLM, 2 MiB (128 tokens of Llama-3.1-70B's 8192 bf16 activations): the
    // measured 18.11 us at 1 Mi elements, less the per-kernel floor the step counts for it.
    let mut s = scenario("llama-3.1-70b", Dtype::Fp8, "h200", "nvlink", 8, 8);
    s.engine = EngineName::Vllm.defaults();
    let bytes = 128.0 * 8192.0 * 2.0;
    assert!(s.measured_custom_allreduce());
    let ar = s.tp_allreduce(bytes);
    assert!((ar.us - (18.11 - s.engine.gemm_floor_us)).abs() < 1e-9, "{ar:?}");
    assert!(ar.us > comm::allreduce(&s.link, 8, bytes, true).us - s.engine.gemm_floor_us, "the table is above the model here");
    // Each engine reads its own row: TensorRT-LLM's two-shot is slower at this size.
    s.engine = EngineName::Trtllm.defaults();
    assert!((s.tp_allreduce(bytes).us - (30.5 - s.engine.gemm_floor_us)).abs() < 1e-9);
    // User-given numbers for the same NVLink scale the measured figure by the model's ratio:
    // a slower link costs more, a faster one never more than the catalog's.
    let mut given = s.clone();
    given.link.beta_gbs = 300.0;
    assert!(given.measured_custom_allreduce() && given.measured_custom_allreduce_scaled());
    let ratio = comm::allreduce(&given.link, 8, bytes, true).us / comm::allreduce(&s.link, 8, bytes, true).us;
    assert!(ratio > 1.0);
    assert!((given.tp_allreduce(bytes).us - (30.5 * ratio - s.engine.gemm_floor_us)).abs() < 1e-9);
    given.link.beta_gbs = 1800.0;
    assert!(given.tp_allreduce(bytes).us < s.tp_allreduce(bytes).us);
    // A measured link (another name) keeps the model, which takes its latency and bandwidth.
    s.link.name = "measured-h200".into();
    assert!(!s.measured_custom_allreduce());
    assert_eq!(s.tp_allreduce(bytes), comm::allreduce(&s.link, 8, bytes, true));
    // So does a group size the table lacks, and eager mode.
    let mut six = scenario("llama-3.1-70b", Dtype::Fp8, "h200", "nvlink", 6, 6);
    six.engine = EngineName::Vllm.defaults();
    assert!(!six.measured_custom_allreduce());
    assert_eq!(six.tp_allreduce(bytes), comm::allreduce(&six.link, 6, bytes, true));
    let mut eager = scenario("llama-3.1-70b", Dtype::Fp8, "h200", "nvlink", 8, 8);
    eager.engine.cuda_graphs = false;
    assert!(!eager.measured_custom_allreduce());
    assert_eq!(eager.tp_allreduce(bytes), comm::allreduce(&eager.link, 8, bytes, false));
    // Past the custom kernel's 8 MiB, NCCL's model even on the measured box.
    let big = 16.0 * 1024.0 * 1024.0;
    s.link.name = "nvlink".into();
    assert_eq!(s.tp_allreduce(big), comm::allreduce(&s.link, 8, big, true));
}

#[test]
fn dense_model_batch_one_weight_time_is_bytes_over_bandwidth() {
    let mut s = scenario("llama-3.1-8b", Dtype::Bf16, "h100-sxm", "nvlink", 1, 1);
    // Every streaming rate, the kernel table's and the engine's, capped at the peak.
    s.engine.stream_scale = 10.0;
    let p = s.point(1);
    // Attention, FFN and LM head are read once per step (the embedding table is a lookup).
    let params = s.model.params();
    let bytes = (params.attention + params.dense_ffn + params.lm_head) * 2.0;
    let want = bytes / 3350e9 * 1e3;
    assert!((p.step_ms.weights - want).abs() / want < 1e-9, "{} vs {want}", p.step_ms.weights);
    assert_eq!(p.step_ms.communication, 0.0);
}

#[test]
fn layers_sharing_the_indexers_top_k_keep_no_indexer_keys_and_run_no_indexer_kernels() {
    // GLM-5 with its indexer in one layer of four (GLM-5.2's "shared" layers reuse the top-k).
    let mut every = scenario("glm-5", Dtype::Fp8, "b200", "nvlink5", 8, 8);
    every.quant.kv_cache = KvDtype::Fp8;
    let mut shared = every.clone();
    let layers = shared.model.layers;
    if let Some(d) = shared.model.dsa.as_mut() {
        d.indexer_layers = layers / 4;
    }
    let share = (layers / 4) as f64 / layers as f64;
    let idx = every.model.dsa.expect("GLM-5 has a DSA indexer").index_head_dim as f64;
    // Each layer that stops running it drops its fp8 keys and their fp32 scale per 128.
    let key_bytes = (idx + (idx / 128.0).ceil() * 4.0) * layers as f64;
    let dropped = every.kv_bytes_per_token_gpu() - shared.kv_bytes_per_token_gpu();
    assert!((dropped - key_bytes * (1.0 - share)).abs() < 1e-6, "{dropped} vs {}", key_bytes * (1.0 - share));
    assert!((every.kernels_per_step() - shared.kernels_per_step() - 8.0 * (layers - layers / 4) as f64).abs() < 1e-9);
    assert!(shared.model.params().attention < every.model.params().attention);
    assert!(shared.decode_step_ms(64.0, 4096.0) < every.decode_step_ms(64.0, 4096.0));
}

#[test]
fn glm5_kv_is_about_62_kb_per_token() {
    let s = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie-host-staged", 8, 8);
    let kb = s.kv_bytes_per_token_gpu() / 1e3;
    assert!((kb - 62.25).abs() / 62.25 < 0.03, "{kb} KB vs the vLLM log's 62.25");
}

#[test]
fn a_dense_mla_fp8_cache_holds_576_bytes_per_token_and_layer_and_only_dsa_takes_the_656_byte_layout() {
    // DeepSeek-V3: 512 latent + 64 rope, one byte each, over 61 layers.
    let mut ds = scenario("deepseek-v3", Dtype::Fp8, "h200", "nvlink", 8, 8);
    ds.quant.kv_cache = KvDtype::Fp8;
    assert_eq!(ds.kv_bytes_per_token_gpu(), 576.0 * 61.0);
    ds.quant.kv_cache = KvDtype::Bf16;
    assert_eq!(ds.kv_bytes_per_token_gpu(), 2.0 * 576.0 * 61.0);
    // GLM-5 (DSA): 656 B of sparse layout plus its indexer keys (fp8, an fp32 scale per 128).
    let glm = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie-host-staged", 8, 8);
    let idx = glm.model.dsa.expect("GLM-5 has a DSA indexer").index_head_dim as f64;
    let per_layer = glm.kv_bytes_per_token_gpu() / glm.model.layers as f64;
    assert_eq!(per_layer, 656.0 + idx + (idx / 128.0).ceil() * 4.0);
}

#[test]
fn glm5_nvfp4_weights_match_the_measured_56_gb_per_gpu() {
    let s = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie-host-staged", 8, 8);
    let gb = s.memory().weights_gb;
    assert!((gb - 56.0).abs() / 56.0 < 0.03, "{gb} GB");
}

/// Without P2P, a quarter or more of a low-concurrency TP8 step is the all-reduces staged through
/// host memory (the step with P2P is that much shorter); with P2P the same plan is bound by expert
/// weight reads.
#[test]
fn host_staged_tp8_spends_a_quarter_of_a_low_concurrency_step_in_all_reduces() {
    let staged = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie-host-staged", 8, 8).point(1);
    let p2p = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie5-p2p", 8, 8).point(1);
    let (a, b) = (staged.step_ms.total, p2p.step_ms.total);
    assert!((a - b) / a > 0.25, "staged {a} ms, P2P {b} ms");
    let q = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie5-p2p", 8, 8).point(64);
    assert!(matches!(q.bottleneck, Bottleneck::Weights { distinct_experts: Some(_), .. }), "{:?}", q.bottleneck);
}

/// The prefill efficiencies (medians over all five GPUs) against two H200 entries of
/// kernels.toml at 8192 tokens: `[[moe]]` 15 (fp8_block, hidden 7168, expert FFN 2048, 256
/// experts, top-8, moe_tp 8: 1881.3 us) and `[[gemm]]` 10 (fp8_block, N=K=8192: 992.74 us),
/// within 25%.
#[test]
fn prefill_efficiencies_reproduce_h200_kernel_tables_within_25_percent() {
    let g = gpu("h200").expect("gpu");
    let fp8 = g.tflops(ComputeFormat::Fp8) * 1e12;
    let moe_us = 2.0 * 3.0 * 7168.0 * 2048.0 * 8.0 * 8192.0 / 8.0 / (fp8 * PREFILL_MOE_EFFICIENCY) * 1e6;
    assert!(((moe_us - 1881.3) / 1881.3).abs() < 0.25, "fused MoE {moe_us:.0} us vs 1881.3");
    let gemm_us = 2.0 * 8192.0f64.powi(3) / (fp8 * prefill_gemm_efficiency(ComputeFormat::Fp8)) * 1e6;
    assert!(((gemm_us - 992.74) / 992.74).abs() < 0.25, "GEMM {gemm_us:.0} us vs 992.74");
}

#[test]
fn prefill_of_many_prompts_costs_their_sum_not_one_long_sequence() {
    // Regression: n prompts prefilled together were once charged attention as one prompt n times
    // as long (quadratic in n), so throughput fell with concurrency (found by the property test).
    let s = scenario("mixtral-8x7b", Dtype::Fp8, "h100-sxm", "nvlink", 2, 2);
    let one = s.prefill_ms(2048.0, 2048.0, PrefillPass::Beside(1.0));
    let eight = s.prefill_ms(8.0 * 2048.0, 2048.0, PrefillPass::Beside(1.0));
    assert!(eight <= 8.0 * one * (1.0 + 1e-9), "{eight} vs 8 x {one}");
    let mut s = s;
    s.input_len = 4096;
    s.output_len = 64;
    let (a, b) = (s.point(512).output_tokens_per_s, s.point(1024.min(s.max_concurrency())).output_tokens_per_s);
    assert!(b >= a, "{a} -> {b}");
}

#[test]
fn the_steady_ttft_adds_the_request_latency_and_the_rate_does_not_change() {
    let mut s = scenario("llama-3.1-70b", Dtype::Fp8, "h200", "nvlink", 8, 8);
    s.engine.request_latency_ms = 0.0;
    let without = s.point(16);
    s.engine.request_latency_ms = 251.0;
    let with = s.point(16);
    assert!((with.ttft_ms - without.ttft_ms - 251.0).abs() < 1e-9, "{} vs {}", with.ttft_ms, without.ttft_ms);
    assert_eq!(with.output_tokens_per_s, without.output_tokens_per_s);
    assert_eq!(Engine::default().request_latency_ms, SGLANG_REQUEST_LATENCY_MS);
}

#[test]
fn only_an_engine_that_graphs_decode_but_not_prefill_pays_eager_launches_on_prompt_steps() {
    let mut s = scenario("llama-3.1-70b", Dtype::Fp8, "h200", "nvlink", 8, 8);
    s.engine = EngineName::Trtllm.defaults();
    let launches = s.engine.launch_us * s.kernels_per_step() / 1e3;
    assert!((s.eager_prefill_ms() - launches).abs() < 1e-12 && launches > 0.0);
    // vLLM and today's sglang replay graphs for prompt steps too.
    for e in [EngineName::Vllm, EngineName::Sglang] {
        s.engine = e.defaults();
        assert_eq!(s.eager_prefill_ms(), 0.0, "{}", e.name());
    }
    // Without CUDA graphs every step already pays the launches (overhead_ms): not twice.
    s.engine = Engine { cuda_graphs: false, prefill_graphs: false, ..EngineName::Trtllm.defaults() };
    assert_eq!(s.eager_prefill_ms(), 0.0);
    // In the steady state the prompt steps' launches raise the step, by at most one step's worth.
    let graphs = Scenario { engine: EngineName::Trtllm.defaults(), ..s.clone() };
    let eager_free = Scenario { engine: Engine { prefill_graphs: true, ..graphs.engine }, ..s.clone() };
    let (with, without) = (graphs.point(64).step_ms.total, eager_free.point(64).step_ms.total);
    assert!(with > without && with - without <= launches + 1e-9, "{with} vs {without}");
}

#[test]
fn an_fp8_kv_cache_streams_at_the_fa3_tables_rate_on_hopper_gqa_only() {
    let kv_ms = |model: &str, gpu: &str, kv: KvDtype| {
        let mut s = scenario(model, Dtype::Fp8, gpu, "nvlink", 8, 8);
        s.quant.kv_cache = kv;
        let bytes = s.kv_read(64.0, 2048.0);
        (s.stage(64.0, 2048.0).0.kv, bytes / (s.gpu.mem_bw_gbs * 1e9) * 1e3)
    };
    let (fp8, ideal) = kv_ms("llama-3.1-70b", "h200", KvDtype::Fp8);
    assert!((fp8 - ideal / 0.535).abs() < 1e-9, "{fp8} vs {ideal} / 0.535");
    let (bf16, ideal) = kv_ms("llama-3.1-70b", "h200", KvDtype::Bf16);
    assert!((bf16 - ideal / Engine::default().hbm_efficiency).abs() < 1e-9);
    let (b200, ideal) = kv_ms("llama-3.1-70b", "b200", KvDtype::Fp8);
    assert!((b200 - ideal / Engine::default().hbm_efficiency).abs() < 1e-9, "Blackwell keeps the engine's efficiency");
    let (mla, ideal) = kv_ms("deepseek-v3", "h200", KvDtype::Fp8);
    assert!((mla - ideal / Engine::default().hbm_efficiency).abs() < 1e-9, "MLA runs FlashMLA, not FA3");
}

#[test]
fn step_terms_add_up_under_the_overlap_rule() {
    for l in ["pcie-host-staged", "nvlink"] {
        let mut s = scenario("deepseek-v3", Dtype::Fp8, "h200", l, 8, 8);
        for overlap in [Overlap::None, Overlap::Full] {
            s.engine.overlap = overlap;
            for c in [1, 16, 256] {
                let t = s.point(c).step_ms;
                let want = match overlap {
                    Overlap::None => (t.weights + t.kv).max(t.compute) + t.communication + t.overhead + t.prefill,
                    Overlap::Full => (t.weights + t.kv).max(t.compute).max(t.communication) + t.overhead + t.prefill,
                };
                assert!((t.total - want).abs() < 1e-9);
            }
        }
    }
}

#[test]
fn plan_needing_more_gpus_is_refused() {
    let s = scenario("llama-3.1-8b", Dtype::Bf16, "h100-sxm", "nvlink", 4, 8);
    let e = s.plan.check(&s.model).expect_err("tp > gpus");
    assert!(e.to_string().contains("tp x pp = 8 x 1 = 8 GPUs but --gpus is 4"), "{e}");
}

/// A TP size the engines refuse (heads or key/value heads not split evenly) is refused, and
/// `--rank` does not offer it: Qwen3-32B has 64 heads and 8 key/value heads.
#[test]
fn a_tp_that_does_not_split_the_heads_evenly_is_refused_and_not_ranked() {
    let s = scenario("qwen3-32b", Dtype::Bf16, "h100-sxm", "nvlink", 7, 7);
    let e = s.plan.check(&s.model).expect_err("64 heads over 7 ranks");
    assert!(e.to_string().contains("--tp 7 does not divide the model's 64 attention heads"), "{e}");
    assert!(crate::rank::enumerate(&s).iter().all(|p| p.tp == 1), "{:?}", crate::rank::enumerate(&s));
    // 16 ranks hold 4 heads each, and each of the 8 key/value heads on 2 ranks: accepted.
    let s16 = scenario("qwen3-32b", Dtype::Bf16, "h100-sxm", "nvlink", 16, 16);
    assert!(s16.plan.check(&s16.model).is_ok());
    // Key/value heads that neither divide nor are divided by the TP size are refused.
    let mut odd = s16.clone();
    odd.model.attention = match odd.model.attention {
        crate::spec::Attention::Gqa { heads, head_dim, bias, gate, .. } => {
            crate::spec::Attention::Gqa { heads, kv_heads: 12, head_dim, bias, gate }
        }
        a => a,
    };
    odd.plan.tp = 8;
    let e = odd.plan.check(&odd.model).expect_err("12 key/value heads over 8 ranks");
    assert!(e.to_string().contains("12 key/value heads"), "{e}");
}

#[test]
fn a_plan_that_does_not_fit_gives_the_numbers() {
    let s = scenario("deepseek-v3", Dtype::Bf16, "rtx-4090", "pcie4-p2p", 8, 8);
    let e = s.check_fit().expect_err("does not fit");
    assert!(e.to_string().contains("GB of weights"), "{e}");
}

pub fn on_nodes(mut s: Scenario, net: &str, gpus_per_node: u32) -> Scenario {
    let net = crate::hw::net(net).expect("net");
    s.cluster = Some(Cluster { nodes: s.plan.gpus / gpus_per_node, gpus_per_node, nics_per_node: gpus_per_node, net });
    s.check_placement().expect("placed");
    s
}

fn deepseek_16(net: &str, tp: u32, pp: u32) -> Scenario {
    let mut s = scenario("deepseek-v3", Dtype::Fp8, "h100-sxm", "nvlink", 16, tp);
    s.plan.pp = pp;
    on_nodes(s, net, 8)
}

/// Over 100 GbE, TP16 pays two NCCL all-reduces per layer across the network (socket latency
/// on every NET step), while TP8+PP2 keeps its all-reduces on NVLink and sends one activation
/// per stage: TP16 is slower per step at every concurrency.
#[test]
fn tp16_across_two_nodes_is_slower_per_step_than_tp8_pp2_on_100gbe() {
    let tp16 = deepseek_16("eth-100g", 16, 1);
    let tp8pp2 = deepseek_16("eth-100g", 8, 2);
    for c in [1, 8, 32, 64] {
        let (a, b) = (tp16.point(c), tp8pp2.point(c));
        assert!(a.step_ms.total > b.step_ms.total, "c={c}: TP16 {:.1} ms vs TP8+PP2 {:.1} ms", a.step_ms.total, b.step_ms.total);
        assert!(a.step_ms.communication > b.step_ms.communication, "c={c}");
    }
    // TP16's all-reduces cross the network, and at c=16 they are a large share of its step (the
    // per-kernel floor and the weight reads share the rest).
    assert_eq!(tp16.across_nodes(), Some(Across { net: "eth-100g".into(), tp_nodes: 2, pp: false }));
    let at16 = tp16.point(16).step_ms;
    assert!(at16.communication > 0.25 * at16.total, "{at16:?}");
    assert_eq!(tp8pp2.across_nodes(), Some(Across { net: "eth-100g".into(), tp_nodes: 1, pp: true }));
}

#[test]
fn more_network_bandwidth_is_never_slower() {
    for (tp, pp, dpa) in [(16, 1, false), (8, 2, false), (16, 1, true), (4, 4, false)] {
        let mut s = deepseek_16("roce-200", tp, pp);
        if dpa {
            s.plan.ep = tp;
            s.plan.dp_attention = true;
        }
        for c in [1, 16, 128] {
            let mut prev = f64::INFINITY;
            for beta in [5.0, 22.5, 47.0, 94.0, 400.0] {
                let mut t = s.clone();
                if let Some(cl) = &mut t.cluster {
                    cl.net.beta_gbs = beta;
                }
                let step = t.point(c).step_ms.total;
                assert!(step <= prev + 1e-9, "TP{tp} PP{pp} c={c}: {beta} GB/s gives {step} ms, slower than {prev}");
                prev = step;
            }
        }
    }
}

/// A cluster whose groups all fit in one node changes nothing, and a plan on one node has no
/// cluster at all: the numbers are the single-node ones.
#[test]
fn groups_within_a_node_keep_the_single_node_numbers() {
    let one = scenario("deepseek-v3", Dtype::Fp8, "h200", "nvlink", 16, 8);
    let two = on_nodes(one.clone(), "eth-100g", 8);
    assert_eq!(two.across_nodes(), None);
    for c in [1, 32, 256] {
        assert_eq!(one.point(c), two.point(c));
    }
    assert_eq!(one.prefill_ms(4096.0, 1024.0, PrefillPass::Standalone), two.prefill_ms(4096.0, 1024.0, PrefillPass::Standalone));
}

#[test]
fn groups_that_straddle_nodes_are_refused_naming_the_flag() {
    let mut s = scenario("llama-3.1-70b", Dtype::Bf16, "h100-sxm", "nvlink", 24, 8);
    s.cluster = Some(Cluster { nodes: 3, gpus_per_node: 8, nics_per_node: 8, net: crate::hw::net("ib-ndr").expect("net") });
    s.check_placement().expect("TP8 on 8-GPU nodes");
    s.plan.tp = 12;
    let e = s.check_placement().expect_err("TP12 straddles");
    assert!(e.to_string().contains("--tp 12") && e.to_string().contains("--gpus-per-node"), "{e}");
    s.plan.tp = 4;
    s.plan.pp = 3;
    let e = s.check_placement().expect_err("a 12-GPU replica straddles");
    assert!(e.to_string().contains("tp x pp = 4 x 3"), "{e}");
}

/// Qwen3-Next's 36 Gated DeltaNet layers hold a fixed state per request, under vLLM 36 x (32 x
/// 128 x 128 x 2 B recurrent + 8192 x 3 x 2 B convolution) = 39.5 MB at TP1, at any context:
/// only the 12 full-attention layers' KV grows with it, and the state's per-step read does not
/// change. Under sglang the recurrent state is float32 (its default where the config names no
/// type), twice vLLM's.
#[test]
fn hybrid_state_memory_does_not_grow_with_context() {
    let vllm = |mut s: Scenario| {
        s.engine = EngineName::Vllm.defaults();
        s
    };
    let sglang = scenario("qwen3-next-80b-a3b", Dtype::Bf16, "h200", "nvlink", 1, 1);
    let fp32 = 36.0 * (32.0 * 128.0 * 128.0 * 4.0 + 8192.0 * 3.0 * 2.0);
    assert!((sglang.state_bytes_gpu() - fp32).abs() < 1.0, "{}", sglang.state_bytes_gpu());
    let s = vllm(scenario("qwen3-next-80b-a3b", Dtype::Bf16, "h200", "nvlink", 1, 1));
    let state = 36.0 * (32.0 * 128.0 * 128.0 * 2.0 + 8192.0 * 3.0 * 2.0);
    assert!((s.state_bytes_gpu() - state).abs() < 1.0, "{}", s.state_bytes_gpu());
    // 12 layers x K and V x 2 KV heads x 256 x 2 bytes per token.
    let full_kv_per_token = 12.0 * 2.0 * 2.0 * 256.0 * 2.0;
    let grow = s.request_bytes_gpu(20_000.0) - s.request_bytes_gpu(10_000.0);
    assert!((grow - 10_000.0 * full_kv_per_token).abs() / grow < 1e-9, "{grow}");
    assert!((s.request_bytes_gpu(0.0) - state).abs() < 1.0);
    let read_grow = s.kv_read(8.0, 2_000.0) - s.kv_read(8.0, 1_000.0);
    assert!((read_grow - 8.0 * 1_000.0 * full_kv_per_token).abs() / read_grow < 1e-9, "{read_grow}");
    assert!((s.kv_read(8.0, 0.0) - 8.0 * 2.0 * state).abs() < 8.0, "the state is read and written back each step");
    // TP splits the heads, so the state per GPU halves at TP2.
    let tp2 = vllm(scenario("qwen3-next-80b-a3b", Dtype::Bf16, "h200", "nvlink", 2, 2));
    assert!((tp2.state_bytes_gpu() - state / 2.0).abs() < 1.0);
}

/// sglang keeps a hybrid model's state in a pool of its own: today the memory left after the
/// weights splits 0.9 : 1 between the state pool and the KV pool, and the running requests are
/// held to a fifth of the pool's states (the running one, two the radix cache saves, two the
/// extra buffer tracks), over a stated running cap too. vLLM keeps the state with the KV (one
/// pool, no such cap), and a model without linear layers has no state pool under sglang.
#[test]
fn sglang_holds_a_hybrid_models_state_in_its_own_pool_and_caps_the_running_requests_by_it() {
    let mut s = scenario("qwen3-next-80b-a3b", Dtype::Bf16, "h200", "nvlink", 2, 2);
    let m = s.memory();
    let rest = m.usable_gb - m.weights_gb - m.workspace_gb;
    assert!((m.state_gb + m.kv_gb - rest).abs() < 1e-9, "{m:?}");
    assert!((m.state_gb / m.kv_gb - 0.9).abs() < 1e-9, "{m:?}");
    let slots = (m.state_gb * 1e9 / s.state_bytes_gpu()).floor() as u64;
    assert_eq!(s.state_slots(), Some(slots));
    assert_eq!(s.state_running_cap(), Some((slots / 5) as u32));
    // The KV pool alone bounds the requests' KV; the state pool their states.
    let kv = s.kv_token_layers(s.mean_context()) * s.kv_bytes_per_token_layer() / s.kv_split();
    let fits = (m.kv_gb * 1e9 / kv).min(slots as f64) as u32;
    assert_eq!(s.kv_concurrency(), fits);
    assert!(slots / 5 < u64::from(fits), "the cap binds here: {slots} states, {fits} fit");
    assert_eq!(s.running_limit(), ((slots / 5) as u32, RunningLimit::StatePool));
    s.max_running = Some(100_000);
    assert_eq!(s.running_limit(), ((slots / 5) as u32, RunningLimit::StatePool), "over a stated cap too");
    s.max_running = Some(16);
    assert_eq!(s.running_limit(), (16, RunningLimit::Stated));
    // vLLM: one pool, whole, and no state cap.
    let mut v = scenario("qwen3-next-80b-a3b", Dtype::Bf16, "h200", "nvlink", 2, 2);
    v.engine = EngineName::Vllm.defaults();
    let vm = v.memory();
    assert_eq!(vm.state_gb, 0.0);
    assert!((vm.kv_gb - (vm.usable_gb - vm.weights_gb - vm.workspace_gb)).abs() < 1e-9);
    assert_eq!(v.state_running_cap(), None);
    assert_ne!(v.running_limit().1, RunningLimit::StatePool);
    // No linear layers: no state pool under sglang either.
    let dense = scenario("llama-3.1-70b", Dtype::Bf16, "h200", "nvlink", 2, 2);
    assert_eq!(dense.memory().state_gb, 0.0);
    assert_eq!(dense.state_running_cap(), None);
}

/// sglang's state pool by release: 512 states before 0.5.4, then the memory split, with the
/// states a running request keeps changing as the radix cache and its extra buffer reached each
/// mixer; a measurement's date stands in where no version is named.
#[test]
fn sglangs_state_pool_follows_the_release_and_the_mixer() {
    use crate::spec::LinearMixer::{GatedDeltaNet as Gdn, Kda, Mamba2};
    use StateSlots::{Fixed, Share};
    let era = |v: &str| EngineRelease::parse("--engine", v).expect("parses").state_pool(None).expect("sglang");
    let pool = |v: &str, mixer| {
        let p = era(v).pool(mixer);
        (p.slots, p.per_running)
    };
    for mixer in [Gdn, Mamba2, Kda] {
        assert_eq!(pool("sglang@0.5.2", mixer), (Fixed(512), 1));
        assert_eq!(pool("sglang@0.5.23", mixer), (Share(0.9), 5));
        assert_eq!(pool("sglang", mixer), pool("sglang@0.5.23", mixer), "the current release");
    }
    assert_eq!(pool("sglang@0.5.5", Gdn), (Share(0.9), 3));
    assert_eq!(pool("sglang@0.5.5", Mamba2), (Fixed(512), 1));
    assert_eq!(pool("sglang@0.5.7", Mamba2), (Share(0.9), 5));
    assert_eq!(pool("sglang@0.5.7", Kda), (Fixed(512), 1));
    assert_eq!(pool("sglang@0.5.8", Gdn), (Share(0.9), 3));
    assert_eq!(pool("sglang@0.5.10", Kda), (Share(0.9), 1));
    assert_eq!(pool("sglang@0.5.10", Mamba2), (Share(0.9), 3));
    assert_eq!(pool("sglang@0.5.14", Gdn), (Share(0.9), 5));
    assert_eq!(pool("sglang@0.5.14", Kda), (Share(0.9), 3));
    for mixer in [Gdn, Mamba2, Kda] {
        let off = StatePoolRelease::Split0514.radix_cache_off().expect("from 0.5.9").pool(mixer);
        assert_eq!((off.slots, off.per_running), (Share(0.9), 1), "--disable-radix-cache: one state each");
    }
    // Before 0.5.9 a cache that is off held 512 states: the fix is not priced there.
    assert_eq!(StatePoolRelease::Split058.radix_cache_off(), None);
    // The fix keeps the release's own stage sizing.
    assert!(StatePoolRelease::Split0514.radix_cache_off().is_some_and(|r| r.sizes_by_every_stage()));
    assert!(StatePoolRelease::Split0523.radix_cache_off().is_some_and(|r| !r.sizes_by_every_stage()));
    let undated = EngineRelease { name: EngineName::Sglang, version: Some("main branch".into()) };
    assert_eq!(undated.state_pool(Some("2026-03-10")), Some(StatePoolRelease::Split059));
    assert_eq!(undated.state_pool(Some("2025-09-20")), Some(StatePoolRelease::Fixed512));
    for other in ["vllm", "vllm@0.10.2", "trtllm"] {
        assert_eq!(EngineRelease::parse("--engine", other).expect("parses").state_pool(None), None, "{other}");
    }
    // 512 fixed states: 512 requests' states on the GPU, and 512 running at most.
    let mut s = scenario("qwen3-next-80b-a3b", Dtype::Bf16, "h200", "nvlink", 2, 2);
    s.engine.state_pool = Some(StatePoolRelease::Fixed512);
    assert!((s.memory().state_gb - 512.0 * s.state_bytes_gpu() / 1e9).abs() < 1e-9);
    assert_eq!(s.state_running_cap(), Some(512));
}

/// sglang's state pool is one scheduler's: replicas each keep theirs (the cap doubles with two),
/// DP attention's ranks each keep whole states of their own requests, and before 0.5.23 a
/// pipeline stage's pool was sized by the whole model's state per request.
#[test]
fn sglangs_state_pool_is_each_schedulers_own_under_replicas_dp_attention_and_stages() {
    let one = scenario("qwen3-next-80b-a3b", Dtype::Bf16, "h200", "nvlink", 2, 2);
    let per = one.state_running_cap().expect("pool");
    let two = scenario("qwen3-next-80b-a3b", Dtype::Bf16, "h200", "nvlink", 4, 2);
    assert_eq!(two.state_running_cap(), Some(per * 2), "two replicas, two pools");
    let mut dpa = one.clone();
    dpa.plan.dp_attention = true;
    let whole = dpa.state_bytes_gpu() * 2.0;
    assert!((dpa.state_slot_bytes() - whole).abs() < 1.0, "a rank keeps its requests' whole states");
    let slots = (dpa.memory().state_gb * 1e9 / whole).floor() as u64;
    assert_eq!(dpa.state_slots(), Some(slots));
    assert_eq!(dpa.state_running_cap(), Some((slots / 5 * 2) as u32), "two ranks, each its own pool");
    let mut pp = scenario("qwen3-next-80b-a3b", Dtype::Bf16, "h200", "nvlink", 2, 1);
    pp.plan.pp = 2;
    let stage = pp.state_bytes_gpu();
    pp.engine.state_pool = Some(StatePoolRelease::Split0514);
    assert!((pp.state_slot_bytes() - 2.0 * stage).abs() < 1.0, "0.5.14 sizes by both stages' layers");
    pp.engine.state_pool = Some(StatePoolRelease::Split0523);
    assert!((pp.state_slot_bytes() - stage).abs() < 1.0, "0.5.23 by the stage's own");
}

/// Where the radix cache is off (a running request keeps 1 state), a stated running cap sizes
/// sglang's state pool instead of 512 states or the memory split; a pool that does not fit is
/// refused naming the states; and a scenario served by vLLM has no pool whatever its release field.
#[test]
fn a_stated_cap_sizes_sglangs_state_pool_where_the_radix_cache_is_off() {
    let mut s = scenario("nemotron-3-nano-30b-a3b", Dtype::Bf16, "h200", "nvlink", 1, 1);
    s.engine.state_pool = Some(StatePoolRelease::Split054);
    assert_eq!(s.state_pool().map(|p| p.slots), Some(StateSlots::Fixed(512)));
    assert_eq!(s.state_running_cap(), Some(512));
    assert!((s.memory().state_gb - 512.0 * s.state_bytes_gpu() / 1e9).abs() < 1e-9);
    s.max_running = Some(1000);
    assert_eq!(s.state_pool().map(|p| p.slots), Some(StateSlots::Fixed(1000)));
    assert!((s.memory().state_gb - 1000.0 * s.state_bytes_gpu() / 1e9).abs() < 1e-9, "the pool holds the stated 1000");
    assert_eq!(s.state_running_cap(), Some(1000));
    assert_eq!(s.running_limit(), (1000, RunningLimit::StatePool), "the pool, sized at the stated cap, holds 1000");
    // Under DP attention the 512 states divide over the ranks: 256 on each of two.
    let mut dpa = scenario("nemotron-3-nano-30b-a3b", Dtype::Bf16, "h200", "nvlink", 2, 2);
    dpa.engine.state_pool = Some(StatePoolRelease::Split054);
    dpa.plan.dp_attention = true;
    assert_eq!(dpa.state_slots(), Some(256));
    assert_eq!(dpa.state_running_cap(), Some(512));
    // Radix cache on (0.5.8's 3 states each): the stated cap does not size the pool.
    s.engine.state_pool = Some(StatePoolRelease::Split058);
    assert!(matches!(s.state_pool().map(|p| p.slots), Some(StateSlots::Share(_))));
    // More states than the memory left holds: refused, naming them.
    s.engine.state_pool = Some(StatePoolRelease::Fixed512);
    s.max_running = Some(10_000_000);
    let e = s.check_fit().expect_err("ten million states do not fit").to_string();
    assert!(e.contains("the engine's 10000000 linear-attention states per server need"), "{e}");
    // vLLM serving: no pool.
    s.engine.serving = EngineName::Vllm;
    assert_eq!(s.state_pool(), None);
    assert_eq!(s.memory().state_gb, 0.0);
}

/// Nemotron 3 Nano's 52 single-operation blocks (23 Mamba-2, 6 attention, 23 MoE): a TP group
/// all-reduces once per block, the kernel count adds each block's own kernels, only the 6
/// attention blocks keep KV, and each request's Mamba-2 state is fp32 and split over the TP ranks.
#[test]
fn a_nemotron_h_step_all_reduces_once_per_block_and_keeps_kv_in_its_attention_blocks_only() {
    let s = scenario("nemotron-3-nano-30b-a3b", Dtype::Bf16, "h100-sxm", "nvlink", 2, 2);
    assert_eq!(s.communication(8.0).allreduces, 52.0 + 1.0, "and the embedding's");
    let moe = 8.0 + 3.0;
    assert_eq!(s.kernels_per_step(), 6.0 * 5.0 + 23.0 * 6.0 + 23.0 * moe + 52.0 + 4.0 + 2.0);
    // 6 layers x K and V x 2 KV heads x 128 x 2 bytes per token, the 2 KV heads split over TP2.
    let kv_per_token = 6.0 * 2.0 * 2.0 * 128.0 * 2.0 / 2.0;
    let grow = s.request_bytes_gpu(20_000.0) - s.request_bytes_gpu(10_000.0);
    assert!((grow - 10_000.0 * kv_per_token).abs() / grow < 1e-9, "{grow}");
    let state = 23.0 * (64.0 * 64.0 * 128.0 * 4.0 + (4096.0 + 2.0 * 8.0 * 128.0) * 3.0 * 2.0) / 2.0;
    assert!((s.state_bytes_gpu() - state).abs() < 1.0, "{} vs {state}", s.state_bytes_gpu());
    // A single request reads the active weights once per step: attention, Mamba-2, shared expert,
    // router, 6 experts in each MoE block and the LM head; BF16, split over TP2.
    let p = s.model.params();
    let active = p.active - p.embeddings - p.norms;
    let read = s.stage(1.0, 100.0).1.weights_gb_per_gpu * 1e9;
    assert!((read - active).abs() / active < 1e-9, "{read} vs {active}");
    let one = s.point(1);
    assert!(one.tpot_ms.is_finite() && (1.0..50.0).contains(&one.tpot_ms), "TPOT {}", one.tpot_ms);
    // TP must divide the 64 Mamba-2 heads.
    let e = Plan { gpus: 3, tp: 3, pp: 1, ep: 1, dp_attention: false }.check(&s.model).expect_err("3 does not divide 64");
    assert!(e.to_string().contains("--tp 3 does not divide the model's 64 Mamba-2 heads"), "{e}");
}

/// A LatentMoE's projections are whole on every TP rank: at TP4 Nemotron 3 Super reads all of
/// them on each GPU, and its weights per GPU hold all of them.
#[test]
fn latent_moe_projections_are_replicated_over_tp() {
    let text = include_str!("../../tests/configs/nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json");
    let mut s = scenario("llama-3.1-8b", Dtype::Bf16, "h200", "nvlink", 4, 4);
    s.model = crate::spec::from_hf_config(text, "super.json").expect("super");
    let p = s.model.params();
    assert!((p.latent_projections - 40.0 * 2.0 * 4096.0 * 1024.0).abs() < 1.0, "{}", p.latent_projections);
    let mut no_latent = s.clone();
    if let Some(m) = no_latent.model.moe.as_mut() {
        m.latent = None;
    }
    // Replicated: the per-GPU weights carry the projections whole (BF16), not a quarter of them.
    let extra = s.weight_bytes_gpu() - no_latent.weight_bytes_gpu();
    let routed_saving = (no_latent.model.params().routed_experts - p.routed_experts) * 2.0 / 4.0;
    assert!((extra - (p.latent_projections * 2.0 - routed_saving)).abs() < 1e3, "{extra}");
}

/// gpt-oss alternates 128-token sliding-window layers with full ones: past the window a longer
/// context adds KV reads in the 18 full layers only; a model of sliding layers alone stops there.
#[test]
fn sliding_window_kv_read_stops_growing_past_the_window() {
    let s = scenario("gpt-oss-120b", Dtype::Mxfp4, "h200", "nvlink", 1, 1);
    let per = s.kv_bytes_per_token_layer();
    let inside = s.kv_read(1.0, 100.0) - s.kv_read(1.0, 50.0);
    assert!((inside - 50.0 * 36.0 * per).abs() / inside < 1e-9, "{inside}");
    let past = s.kv_read(1.0, 4_000.0) - s.kv_read(1.0, 2_000.0);
    assert!((past - 2_000.0 * 18.0 * per).abs() / past < 1e-9, "{past}");
    let mut only = s.clone();
    only.model.layer_counts = crate::spec::LayerCounts { full: 0, sliding: 36, linear: 0 };
    assert_eq!(only.kv_read(1.0, 128.0), only.kv_read(1.0, 100_000.0));
    assert_eq!(only.request_bytes_gpu(128.0), only.request_bytes_gpu(100_000.0));
    // Memory: a request holds the window, not its whole context, in the sliding layers.
    let mut long = s.clone();
    (long.input_len, long.output_len) = (30_000, 2_000);
    let full_only = long.memory().kv_gb * 1e9 / (32_000.0 * 36.0 * per);
    assert!(long.max_concurrency() as f64 > 1.9 * full_only, "{} vs {full_only:.0}", long.max_concurrency());
}

/// The new catalog models give finite, plausible predictions on GPUs they fit: single-request
/// TPOT between 1 and 200 ms, throughput rising with concurrency.
#[test]
fn new_catalog_models_predict_finite_plausible_rates() {
    let cases = [
        ("kimi-k2", Dtype::Fp8, "b300", "nvlink5", 8),
        ("minimax-m2", Dtype::Fp8, "mi300x", "xgmi", 4),
        ("glm-4.5", Dtype::Fp8, "h200", "nvlink", 8),
        ("glm-4.6", Dtype::Bf16, "gb200", "nvlink5", 8),
        ("qwen3-next-80b-a3b", Dtype::Bf16, "h100-sxm", "nvlink", 4),
        ("qwen3.5-397b-a17b", Dtype::Fp8, "mi355x", "xgmi4", 4),
        ("gpt-oss-20b", Dtype::Mxfp4, "rtx-5090", "pcie5-p2p", 1),
        ("llama-3.1-8b", Dtype::Bf16, "a100-40gb", "nvlink3", 1),
        ("qwen3-30b-a3b", Dtype::Fp8, "mi325x", "xgmi", 2),
    ];
    for (m, q, g, l, tp) in cases {
        let s = scenario(m, q, g, l, tp, tp);
        s.check_fit().unwrap_or_else(|e| panic!("{m} on {g}: {e}"));
        let one = s.point(1);
        assert!(one.tpot_ms.is_finite() && (1.0..200.0).contains(&one.tpot_ms), "{m} on {g}: TPOT {}", one.tpot_ms);
        let many = s.point(64.min(s.max_concurrency()));
        assert!(many.output_tokens_per_s.is_finite() && many.output_tokens_per_s > one.output_tokens_per_s, "{m} on {g}");
    }
}

#[test]
fn an_engine_release_applies_its_versions_defaults() {
    use super::{EngineName, EngineRelease};
    let old = EngineRelease::parse("--engine", "sglang@0.4.6").expect("parses");
    assert_eq!(old.label(), "sglang@0.4.6");
    assert!(!old.defaults().prefill_graphs, "sglang before 0.5.10 runs prefill eagerly");
    assert!(EngineRelease::parse("--engine", "sglang@v0.5.10").expect("parses").defaults().prefill_graphs);
    assert!(EngineRelease::parse("--engine", "sglang").expect("parses").defaults().prefill_graphs);
    let v0 = EngineRelease::parse("--engine", "vllm@0.7.3").expect("parses");
    assert!(!v0.defaults().mixed_prefill, "vLLM V0 runs prompts as steps of their own");
    assert!(EngineRelease::parse("--engine", "vllm@0.8.0").expect("parses").defaults().mixed_prefill);
    assert_eq!(EngineRelease::parse("--engine", "trtllm@1.0.0").expect("parses").defaults(), EngineName::Trtllm.defaults());
    // A nightly of 2026-01-01: after 0.5.3's KV default, before 0.5.10's prefill graphs.
    let on: Vec<bool> =
        EngineRelease::parse("--engine", "sglang@nightly-dev-20260101").expect("parses").features().iter().map(|f| f.on).collect();
    assert_eq!(on, [true, false]);
}

/// A version with a second `@` or more than four numbers is refused (vLLM 0.10.1.1 has four);
/// suffixes and a `v` pass.
#[test]
fn an_engine_version_of_the_wrong_shape_is_refused() {
    use super::EngineRelease;
    for bad in ["sglang@0.4.6@1", "vllm@1.2.3.4.5", "vllm@", "vllm@latest"] {
        assert!(EngineRelease::parse("--engine", bad).is_err(), "{bad}");
    }
    let e = EngineRelease::parse("--engine", "vllm@1.2.3.4.5").expect_err("five parts");
    assert!(e.to_string().contains("5 numeric parts"), "{e}");
    for good in ["vllm@v0.8.0", "sglang@0.4.6.post5", "vllm@0.10.1rc1", "vllm@0.10.1.1", "sglang@nightly-dev-20260101"] {
        assert!(EngineRelease::parse("--engine", good).is_ok(), "{good}");
    }
}

#[test]
fn an_early_release_runs_every_step_longer_by_the_calibrated_scale_and_a_current_one_does_not() {
    use super::{EngineName, EngineRelease, EARLY_RELEASE_STEP_SCALE};
    let scale = |s: &str| EngineRelease::parse("--engine", s).expect("parses").defaults().release_step_scale;
    for early in ["sglang@0.4.6", "sglang@0.4.7.post1", "vllm@0.7.3", "vllm@0.9.1", "trtllm@0.17.0"] {
        assert_eq!(scale(early), EARLY_RELEASE_STEP_SCALE, "{early}");
    }
    for current in ["sglang@0.4.8", "sglang", "vllm@0.9.2", "vllm", "trtllm@1.0.0", "trtllm"] {
        assert_eq!(scale(current), 1.0, "{current}");
    }
    // Without a version, the measurement's date decides.
    let undated = EngineRelease::current(EngineName::Vllm);
    assert!(undated.is_early(Some("2025-03-01")) && !undated.is_early(Some("2025-08-01")) && !undated.is_early(None));
    // Every term of the step and the prefill scale together.
    let s = scenario("llama-3.1-70b", Dtype::Fp8, "h100-sxm", "nvlink", 8, 8);
    let mut early = s.clone();
    early.engine.release_step_scale = 2.0;
    let ctx = s.mean_context();
    assert!((early.decode_step_ms(32.0, ctx) - 2.0 * s.decode_step_ms(32.0, ctx)).abs() < 1e-9);
    let pass = PrefillPass::Standalone;
    assert!((early.prefill_ms(4096.0, 1024.0, pass) - 2.0 * s.prefill_ms(4096.0, 1024.0, pass)).abs() < 1e-9);
    assert!((early.point(16).step_ms.total - 2.0 * s.point(16).step_ms.total).abs() < 1e-9);
}

#[test]
fn an_engine_version_that_names_no_release_is_refused_naming_the_flag() {
    use super::EngineRelease;
    for bad in ["vllm@latest", "sglang@", "tgi@1.0.0"] {
        let e = EngineRelease::parse("--engine", bad).expect_err(bad).to_string();
        assert!(e.contains("--engine"), "{bad}: {e}");
    }
}

#[test]
fn the_engines_auto_kv_cache_takes_the_checkpoints_declaration_as_each_release_reads_it() {
    use super::EngineRelease;
    use crate::quant::{Dtype, KvDtype};
    let auto = |e: &str, q: Dtype, date: Option<&str>| EngineRelease::parse("--engine", e).expect(e).auto_kv(KvDtype::declared_by(q), date);
    // Block FP8, MXFP4 and INT4 checkpoints declare nothing: the model's BF16 in every engine.
    for q in [Dtype::Fp8, Dtype::Mxfp4, Dtype::Int4, Dtype::Bf16] {
        for e in ["sglang", "vllm", "trtllm"] {
            assert_eq!(auto(e, q, None), KvDtype::Bf16, "{e} {q:?}");
        }
    }
    // An NVFP4 export declares FP8: sglang and TensorRT-LLM take it, vLLM from 0.14.0 on.
    assert_eq!(auto("sglang@0.5.3", Dtype::Nvfp4, None), KvDtype::Fp8);
    assert_eq!(auto("sglang@0.4.6", Dtype::Nvfp4, None), KvDtype::Bf16, "before 0.5.3, the model's BF16");
    assert_eq!(auto("trtllm", Dtype::Nvfp4, None), KvDtype::Fp8);
    assert_eq!(auto("vllm@0.13.0", Dtype::Nvfp4, None), KvDtype::Bf16);
    assert_eq!(auto("vllm@0.14.0", Dtype::Nvfp4, None), KvDtype::Fp8);
    assert_eq!(auto("vllm", Dtype::Nvfp4, Some("2025-10-01")), KvDtype::Bf16, "a measurement dated before it");
    assert_eq!(auto("vllm", Dtype::Nvfp4, None), KvDtype::Fp8, "today's release");
}

/// Gemma 4 26B-A4B's KV per request: 25 sliding layers of 8 KV heads x 256 hold at most the
/// 1,024-token window; 5 full layers of 2 KV heads x 512 hold every token, keys and values apart
/// (the values are the keys' projection, but cached on their own). Under TP4 the sliding layers
/// split their 8 KV heads four ways, the full layers' 2 only two ways (each replicated twice). The
/// full layers' attention arithmetic per token is twice a sliding layer's (head dimension 512).
#[test]
fn gemma_4_full_layers_keep_their_own_kv_shape_and_split_only_over_their_kv_heads() {
    let tp1 = scenario("gemma-4-26b-a4b", Dtype::Bf16, "h100-sxm", "nvlink", 1, 1);
    let sliding_token = 2.0 * 8.0 * 256.0 * 2.0;
    let full_token = 2.0 * 2.0 * 512.0 * 2.0;
    let at = |s: &Scenario, ctx: f64| s.request_bytes_gpu(ctx);
    let want = |ctx: f64, sliding_split: f64, full_split: f64| {
        25.0 * ctx.min(1024.0) * sliding_token / sliding_split + 5.0 * ctx * full_token / full_split
    };
    for ctx in [512.0, 4096.0] {
        assert!((at(&tp1, ctx) - want(ctx, 1.0, 1.0)).abs() < 1.0, "{ctx}: {} vs {}", at(&tp1, ctx), want(ctx, 1.0, 1.0));
    }
    let tp4 = scenario("gemma-4-26b-a4b", Dtype::Bf16, "h100-sxm", "nvlink", 4, 4);
    assert!((at(&tp4, 4096.0) - want(4096.0, 4.0, 2.0)).abs() < 1.0, "{} vs {}", at(&tp4, 4096.0), want(4096.0, 4.0, 2.0));
    // The KV pool's bytes per token (every layer's token, no window): each kind at its own shape.
    for (s, sliding_split, full_split) in [(&tp1, 1.0, 1.0), (&tp4, 4.0, 2.0)] {
        let per_token = 25.0 * sliding_token / sliding_split + 5.0 * full_token / full_split;
        assert!((s.kv_bytes_per_token_gpu() - per_token).abs() < 1e-6, "{} vs {per_token}", s.kv_bytes_per_token_gpu());
    }
    // A decode step reads each request's KV as it holds it.
    let read = tp4.kv_read(8.0, 4096.0);
    assert!((read - 8.0 * want(4096.0, 4.0, 2.0)).abs() / read < 1e-9, "{read}");
    // Attention arithmetic: full layers count twice per token of context.
    assert_eq!(tp1.attention_token_layers(4096.0), 25.0 * 1024.0 + 5.0 * 4096.0 * 2.0);
    // Every other model's full layers are the sliding layers' shape.
    let oss = scenario("gpt-oss-120b", Dtype::Mxfp4, "h100-sxm", "nvlink", 1, 1);
    assert_eq!(oss.full_layer_kv_weight(), 1.0);
    assert_eq!(oss.attention_token_layers(4096.0), oss.kv_token_layers(4096.0));
}

#[test]
fn distinct_experts_under_a_skewed_router_are_fewer_at_mid_batches_and_reach_all_at_large_ones() {
    use super::engine::distinct_expert_fraction as share;
    // The Zipf sum at a vanishing skew is uniform routing's closed form; no tokens touch nothing.
    for t in [1.0, 8.0, 64.0, 512.0] {
        let closed = 1.0 - (1.0 - 8.0 / 256.0f64).powf(t);
        assert!((share(256.0, 8.0, t, 1e-12) - closed).abs() < 1e-9, "t={t}");
        assert_eq!(share(256.0, 8.0, t, 0.0), closed);
    }
    assert_eq!(share(256.0, 8.0, 0.0, 0.9), 0.0);
    // A skewed router touches fewer experts at every batch, more the larger the batch, and
    // nearly all of them once the batch is large.
    let mut last = 0.0;
    for t in [1.0, 4.0, 16.0, 64.0, 256.0, 4096.0] {
        let (skewed, uniform) = (share(256.0, 8.0, t, 0.9), share(256.0, 8.0, t, 0.0));
        assert!(skewed <= uniform + 1e-12 && skewed > last, "t={t}: {skewed} vs {uniform}");
        last = skewed;
    }
    assert!(share(256.0, 8.0, 64.0, 0.9) < 0.8 * share(256.0, 8.0, 64.0, 0.0));
    assert!(last > 0.99, "{last}");
    // One token reads about top-k experts whatever the skew (fewer only where an expert's
    // share passes 1 / top-k and is capped).
    assert!((share(256.0, 8.0, 1.0, 0.9) * 256.0 - 8.0).abs() < 1.0);
}

/// Kimi Linear: its 7 MLA layers keep a latent of 576 bf16 elements per token each, its 20 KDA
/// layers a float32 state of 32 heads x 128 x 128 and a bf16 convolution state of 3 x 4,096
/// channels x 3, split over TP by head; the MLA arithmetic runs in the 7 MLA layers only; a TP
/// that does not divide the 32 KDA heads is refused.
#[test]
fn kimi_linear_holds_mla_kv_in_its_full_layers_and_kda_state_in_the_rest() {
    let text = include_str!("../../data/models/kimi-linear-48b-a3b.json");
    let mut s = scenario("llama-3.1-8b", Dtype::Bf16, "h200", "nvlink", 1, 1);
    s.model = crate::spec::from_hf_config(text, "kimi.json").expect("kimi linear");
    s.quant = Quant::preset(Dtype::Bf16);
    s.engine.serving = EngineName::Vllm;
    let state = 20.0 * (32.0 * 128.0 * 128.0 * 4.0 + 3.0 * 4096.0 * 3.0 * 2.0);
    assert_eq!(s.state_bytes_gpu(), state);
    assert_eq!(s.request_bytes_gpu(1000.0), 1000.0 * 7.0 * 576.0 * 2.0 + state);
    // At TP4 the state splits by head; the MLA latent does not.
    let mut tp4 = s.clone();
    tp4.plan = Plan { gpus: 4, tp: 4, pp: 1, ep: 1, dp_attention: false };
    assert_eq!(tp4.request_bytes_gpu(1000.0), 1000.0 * 7.0 * 576.0 * 2.0 + state / 4.0);
    // The MLA arithmetic of a decode step grows with the context in 7 layers, not in all 27:
    // 2 x 32 heads x (2 x 512 + 64) FLOPs per token of context and MLA layer.
    let per_ctx = (s.compute_ms(64.0, 9000.0) - s.compute_ms(64.0, 1000.0)) * 1e-3 * s.gpu.bf16_tflops * 1e12 * s.engine.gemm_efficiency;
    let want = 2.0 * 32.0 * (2.0 * 512.0 + 64.0) * 8000.0 * 7.0 * 64.0;
    assert!((per_ctx / want - 1.0).abs() < 1e-9, "{per_ctx} against {want}");
    for tp in [3, 5] {
        let e = Plan { gpus: tp, tp, pp: 1, ep: 1, dp_attention: false }.check(&s.model).expect_err("uneven").to_string();
        assert!(e.contains(&format!("--tp {tp} does not divide the model's 32 KDA heads")), "{e}");
    }
    assert!(Plan { gpus: 8, tp: 8, pp: 1, ep: 1, dp_attention: false }.check(&s.model).is_ok());
}

/// OLMo's q/k norm over the whole projections: under TP each attention layer all-gathers q (32
/// heads x 128 in bf16 per token here) and k (8 KV heads x 128) by NCCL's ring, and runs the two
/// collectives as kernels of the step; at TP1 there is nothing to gather.
#[test]
fn a_q_k_norm_over_the_whole_projections_gathers_q_and_k_in_every_attention_layer_under_tp() {
    let plain = scenario("llama-3.1-8b", Dtype::Bf16, "h100-sxm", "nvlink", 4, 4);
    let mut s = plain.clone();
    s.model.qk_norm_gathered = true;
    let x = 16.0;
    let want_us =
        32.0 * (comm::nccl_allgather_us(&s.link, 4, x * 32.0 * 128.0 * 2.0) + comm::nccl_allgather_us(&s.link, 4, x * 8.0 * 128.0 * 2.0));
    assert!(want_us > 0.0);
    let extra_ms = s.communication(x).ms - plain.communication(x).ms;
    assert!((extra_ms - want_us * 1e-3 * s.engine.comm_scale).abs() < 1e-9, "{extra_ms} ms against {want_us} us");
    assert_eq!(s.kernels_per_step() - plain.kernels_per_step(), 64.0, "two all-gathers in each of 32 layers");
    let prefill = |sc: &Scenario| sc.prefill_ms(4096.0, 4096.0, PrefillPass::Standalone);
    assert!(prefill(&s) > prefill(&plain), "a prefill pass gathers its tokens' q and k too");
    // The step's detail counts them, and the bottleneck's words name them beside the all-reduces.
    let d = s.stage(x, 1536.0).1;
    assert_eq!((d.qk_gathers, d.qk_gather_us), (64.0, want_us));
    assert_eq!(plain.stage(x, 1536.0).1.qk_gathers, 0.0);
    let words = crate::report::bottleneck_words(&Bottleneck::Communication {
        share: 0.5,
        step_ms: 20.0,
        tp: 4,
        link: "nvlink".into(),
        allreduces: 64.0,
        allreduce_us: 10.0,
        qk_norm: None,
        qk_gathers: Some(QkGathers { count: 64.0, us: 1500.0 }),
        logits_gather_us: None,
        across: None,
    });
    assert!(words.contains("64 all-reduces x 10.0 us, 64 q/k all-gathers taking 1.50 ms in all"), "{words}");
    // Under PP2 each stage gathers in its 16 layers; a prefill pass still gathers in all 32.
    let mut pp2 = s.clone();
    pp2.plan = Plan { gpus: 8, tp: 4, pp: 2, ep: 1, dp_attention: false };
    assert!((pp2.qk_gather_us(x) * 2.0 - want_us).abs() < 1e-9);
    let mut pp2_plain = pp2.clone();
    pp2_plain.model.qk_norm_gathered = false;
    let gathered = |a: &Scenario, b: &Scenario| {
        a.prefill_ms(4096.0, 4096.0, PrefillPass::Standalone) - b.prefill_ms(4096.0, 4096.0, PrefillPass::Standalone)
    };
    assert!((gathered(&pp2, &pp2_plain) - gathered(&s, &plain)).abs() < 1e-9, "the whole replica's gathers in a prefill pass");
    let mut one = scenario("llama-3.1-8b", Dtype::Bf16, "h100-sxm", "nvlink", 1, 1);
    let one_plain = one.clone();
    one.model.qk_norm_gathered = true;
    assert_eq!(one.qk_gather_us(x), 0.0);
    assert_eq!(one.kernels_per_step(), one_plain.kernels_per_step());
}

/// The vocab-parallel embedding and LM head under TP: the embedding all-reduces its output once
/// per pass (one more all-reduce of the step's activations), and the head all-gathers the step's
/// bf16 logits (tokens x vocab x 2 bytes) by NCCL's ring, once per pass, spread over the stages
/// as the head's weight read is; both run as kernels of the step. Nothing at TP1; under DP
/// attention the embedding is replicated, so only the gather.
#[test]
fn under_tp_the_embedding_all_reduces_and_the_lm_head_all_gathers_the_logits_once_per_pass() {
    let s = scenario("llama-3.1-8b", Dtype::Bf16, "h100-sxm", "nvlink", 4, 4);
    let x = 32.0;
    let layers = s.model.layers as f64;
    let want_gather = comm::nccl_allgather_us(&s.link, 4, x * s.model.vocab as f64 * 2.0);
    assert!(want_gather > 0.0);
    assert_eq!(s.logits_gather_us(x), want_gather);
    let c = s.communication(x);
    assert_eq!(c.allreduces, 2.0 * layers + 1.0, "two per layer and the embedding's");
    assert_eq!(c.logits_gather_us, want_gather);
    let want_ms = (c.allreduces * s.tp_allreduce(x * s.model.hidden as f64 * 2.0).us + want_gather) * 1e-3 * s.engine.comm_scale;
    assert!((c.ms - want_ms).abs() < 1e-9, "{} ms against {want_ms}", c.ms);
    assert_eq!(s.stage(x, 1536.0).1.logits_gather_us, want_gather);
    // The bottleneck's words name the gather.
    let words = crate::report::bottleneck_words(&Bottleneck::Communication {
        share: 0.5,
        step_ms: 20.0,
        tp: 4,
        link: "nvlink".into(),
        allreduces: 65.0,
        allreduce_us: 10.0,
        qk_norm: None,
        qk_gathers: None,
        logits_gather_us: Some(250.0),
        across: None,
    });
    assert!(words.contains("65 all-reduces x 10.0 us, and the logits' all-gather 0.25 ms"), "{words}");
    // The logits grow with the batch; a larger vocabulary gathers more.
    assert!(s.logits_gather_us(4.0 * x) > want_gather);
    let mut wide = s.clone();
    wide.model.vocab *= 2;
    assert!(wide.logits_gather_us(x) > want_gather);
    // PP2: each stage step carries half of the pass's embedding all-reduce and logits gather.
    let mut pp2 = scenario("llama-3.1-8b", Dtype::Bf16, "h100-sxm", "nvlink", 8, 4);
    pp2.plan = Plan { gpus: 8, tp: 4, pp: 2, ep: 1, dp_attention: false };
    let c2 = pp2.communication(x);
    assert_eq!(c2.allreduces, layers + 0.5);
    assert!((c2.logits_gather_us - pp2.logits_gather_us(x) / 2.0).abs() < 1e-9);
    // TP1: no collective at all.
    let one = scenario("llama-3.1-8b", Dtype::Bf16, "h100-sxm", "nvlink", 1, 1);
    assert_eq!(one.logits_gather_us(x), 0.0);
    assert_eq!((one.communication(x).allreduces, one.communication(x).ms), (0.0, 0.0));
    // Kernels: the two collectives at TP4, none at TP1 (the per-layer ones aside).
    let per_layer = |sc: &Scenario| sc.kernels_per_step() - if sc.plan.tp > 1 { sc.model.tp_reductions() as f64 } else { 0.0 };
    assert_eq!(per_layer(&s) - per_layer(&one), 2.0);
    let tokens = 4096.0;
    let prefill_comm = |sc: &Scenario| sc.prefill_ms(tokens, tokens, PrefillPass::Standalone);
    let mut no_comm = s.clone();
    no_comm.engine.comm_scale = 0.0;
    // A prompt pass all-reduces its embedding too, and gathers the logits of its one sampled token.
    let want_prefill_us = (2.0 * layers + 1.0) * s.tp_allreduce(tokens * s.model.hidden as f64 * 2.0).us + s.logits_gather_us(1.0);
    let got_us = (prefill_comm(&s) - prefill_comm(&no_comm)) * 1e3 / s.engine.comm_scale;
    assert!((got_us - want_prefill_us).abs() < 1e-6, "{got_us} us against {want_prefill_us}");
    // TensorRT-LLM: the gather, but no embedding all-reduce (its embedding's mode is not confirmed).
    let mut trt = s.clone();
    trt.engine.serving = EngineName::Trtllm;
    assert_eq!(trt.communication(x).allreduces, 2.0 * layers);
    assert_eq!(trt.logits_gather_us(x), want_gather);
    assert_eq!(per_layer(&s) - per_layer(&trt), 1.0);
    // DP attention: no embedding all-reduce; sglang gathers the logits over the TP group, vLLM's
    // DP ranks each hold the whole head.
    let mut dp = scenario("deepseek-v3", Dtype::Fp8, "h200", "nvlink", 8, 8);
    dp.plan = Plan { gpus: 8, tp: 8, pp: 1, ep: 8, dp_attention: true };
    let dense_only = 2.0 * dp.frac_dense() * dp.model.layers as f64;
    assert_eq!(dp.communication(x).allreduces, dense_only);
    assert!(dp.logits_gather_us(x) > 0.0 && dp.communication(x).logits_gather_us > 0.0);
    let mut dp_vllm = dp.clone();
    dp_vllm.engine.serving = EngineName::Vllm;
    assert_eq!((dp_vllm.logits_gather_us(x), dp_vllm.communication(x).logits_gather_us), (0.0, 0.0));
    assert_eq!(dp.kernels_per_step() - dp_vllm.kernels_per_step(), 1.0, "sglang's gather is a kernel of the step");
}
