use super::*;

fn glm_on_rtx(quant: Option<Dtype>) -> ScenarioSpec {
    let mut s = ScenarioSpec::new(ModelSource::Catalog("glm-5".into()), "rtx-pro-6000-se");
    s.link = LinkSource::Catalog("pcie-host-staged".into());
    s.quant.checkpoint = quant;
    s
}

#[test]
fn quant_defaults_to_the_published_checkpoint() {
    assert_eq!(glm_on_rtx(None).build().expect("glm").quant.experts, Dtype::Fp8);
    let mut oss = ScenarioSpec::new(ModelSource::Catalog("gpt-oss-120b".into()), "h100-sxm");
    oss.gpus = 1;
    assert_eq!(oss.build().expect("oss").quant.experts, Dtype::Mxfp4);
    assert_eq!(glm_on_rtx(Some(Dtype::Nvfp4)).build().expect("nvfp4").quant.experts, Dtype::Nvfp4);
}

#[test]
fn a_dense_models_4_bit_checkpoint_quantizes_every_linear_layer_and_a_moe_models_only_its_experts() {
    let mut llama = ScenarioSpec::new(ModelSource::Catalog("llama-3.1-70b".into()), "b200");
    llama.gpus = 1;
    llama.quant.checkpoint = Some(Dtype::Nvfp4);
    let s = llama.build().expect("llama nvfp4");
    assert_eq!((s.quant.attention, s.quant.dense_ffn, s.quant.embeddings), (Dtype::Nvfp4, Dtype::Nvfp4, Dtype::Bf16));
    // 70.6B parameters at 0.5625 bytes, the 2.1B of embeddings and LM head in bf16: about 43 GB.
    let gb = s.weight_bytes_gpu() / 1e9;
    assert!((40.0..46.0).contains(&gb), "{gb} GB");
    // A part's flag still wins.
    llama.quant.attention = Some(Dtype::Fp8);
    assert_eq!(llama.build().expect("--quant-attention").quant.attention, Dtype::Fp8);
    assert_eq!(glm_on_rtx(Some(Dtype::Nvfp4)).build().expect("glm").quant.attention, Dtype::Bf16, "a MoE model keeps BF16 attention");
    // `--vs quant=nvfp4` from a dense FP8 plan takes the same layout.
    llama.quant = QuantSpec::default();
    llama.quant.checkpoint = Some(Dtype::Fp8);
    let fp8 = llama.build().expect("llama fp8");
    let vs = WhatIf::parse("quant=nvfp4").expect("parse").apply(&fp8).expect("applies");
    assert_eq!((vs.quant.attention, vs.quant.dense_ffn), (Dtype::Nvfp4, Dtype::Nvfp4));
}

#[test]
fn a_mixed_precision_checkpoint_quantizes_each_part_as_it_says_unless_quant_names_one() {
    let text = include_str!("../../tests/configs/nvidia--Qwen3.6-35B-A3B-NVFP4.json").to_string();
    let mut spec = ScenarioSpec::new(ModelSource::Config { text, path: "q.json".into() }, "h200");
    spec.gpus = 1;
    let q = spec.build().expect("mixed").quant;
    // Its LM head is W4A16 NVFP4: the format a decode step reads it in.
    assert_eq!((q.attention, q.experts, q.shared_experts, q.embeddings), (Dtype::Fp8, Dtype::Int4, Dtype::Int4, Dtype::Int4));
    spec.quant.checkpoint = Some(Dtype::Nvfp4);
    let q = spec.build().expect("--quant").quant;
    assert_eq!((q.attention, q.experts), (Dtype::Bf16, Dtype::Nvfp4), "--quant names the whole checkpoint");
    spec.quant.checkpoint = None;
    spec.quant.attention = Some(Dtype::Bf16);
    assert_eq!(spec.build().expect("--quant-attention").quant.attention, Dtype::Bf16, "a part's flag still wins");
}

#[test]
fn a_plan_that_does_not_fit_suggests_a_published_format_and_more_gpus() {
    // GLM-5's published FP8 and BF16 checkpoints need more than 8 RTX PRO 6000s hold.
    for quant in [None, Some(Dtype::Bf16)] {
        let r = build_report(&PlanRequest::new(glm_on_rtx(quant))).expect("report");
        assert!(!r.fits);
        assert!(r.points.is_empty());
        let sug = r.fit_suggestion.expect("suggestion");
        assert_eq!(sug.quant, Some(Dtype::Nvfp4), "the widest published format that fits");
    }
    let r = build_report(&PlanRequest::new(glm_on_rtx(None))).expect("report");
    let sug = r.fit_suggestion.expect("suggestion");
    assert_eq!(sug.gpus, Some(GpuSuggestion { gpus: 16, plan: "TP8+PP2".into() }));
    assert_eq!(crate::report::suggestion_words(&sug), "use --quant nvfp4, or 16 GPUs (TP8+PP2)");
    // BF16 (186 GB per GPU at TP8) needs three pipeline stages.
    let r = build_report(&PlanRequest::new(glm_on_rtx(Some(Dtype::Bf16)))).expect("report");
    assert_eq!(r.fit_suggestion.and_then(|s| s.gpus).map(|g| g.gpus), Some(24));
}

#[test]
fn what_if_parses_typed_changes_and_applies_them() {
    let w = WhatIf::parse("link=pcie5-p2p,tp=4,pp=2").expect("parse");
    assert!(matches!(&w.changes[0], Change::Link(l) if l.kind == hw::LinkKind::PcieP2p));
    assert_eq!(w.changes[1..], [Change::Tp(4), Change::Pp(2)]);
    let base = glm_on_rtx(Some(Dtype::Nvfp4)).build().expect("base");
    let t = w.apply(&base).expect("apply");
    assert_eq!((t.plan.tp, t.plan.pp, t.link.name.as_str()), (4, 2, "pcie5-p2p"));
    for (bad, needle) in
        [("tp", "KEY=VALUE"), ("color=red", "unknown key \"color\""), ("tp=x", "not a whole number"), ("gpu=v100", "known:")]
    {
        let e = WhatIf::parse(bad).expect_err(bad);
        assert!(e.to_string().contains(needle), "{bad}: {e}");
    }
    let e = WhatIf::parse("tp=3").expect("parse").apply(&base).expect_err("tp 3 of 8");
    assert!(e.to_string().starts_with("--vs tp=3: "), "{e}");
}

/// `engine=` takes a release as `--engine` does, and a key given twice is refused.
#[test]
fn plan_pairs_take_an_engine_release_and_refuse_a_repeated_key() {
    let s = ScenarioSpec::parse_pairs("--from-plan", "model=glm-5,gpu=h200,gpus=8,engine=sglang@0.4.6").expect("a release");
    assert_eq!(s.release().label(), "sglang@0.4.6");
    let e = ScenarioSpec::parse_pairs("--from-plan", "model=glm-5,gpu=h200,model=qwen3-32b").expect_err("twice");
    assert!(e.to_string().contains("model is given twice (model=glm-5 and model=qwen3-32b)"), "{e}");
    assert!(ScenarioSpec::parse_pairs("--from-plan", "model=glm-5,gpu=h200,engine=sglang@0.4.6@1").is_err());
}

#[test]
fn from_plan_pairs_build_the_same_scenario_as_the_fields() {
    let a = ScenarioSpec::parse_pairs("--from-plan", "model=glm-5,gpu=rtx-pro-6000-se,gpus=8,link=pcie-host-staged,quant=nvfp4,tp=8")
        .expect("pairs");
    assert_eq!(a.build().expect("a"), glm_on_rtx(Some(Dtype::Nvfp4)).build().expect("b"));
    let e = ScenarioSpec::parse_pairs("--from-plan", "gpu=h200").expect_err("model");
    assert!(e.to_string().contains("give model=NAME"), "{e}");
    let e = ScenarioSpec::parse_pairs("--from-plan", "model=glm-5,gpu=h200,overlap=maybe").expect_err("overlap");
    assert!(e.to_string().contains("overlap=maybe"), "{e}");
}

/// `model=` takes a listed checkpoint's repository, whose format a `quant=` may repeat but not
/// contradict; an unknown model is refused under the flag's own name.
#[test]
fn from_plan_pairs_take_a_checkpoints_repository_and_refuse_another_format() {
    // glm-5's default checkpoint is FP8; its BF16 repository must bring BF16 (16 GPUs hold it).
    let by_repo = ScenarioSpec::parse_pairs("--from-plan", "model=zai-org/GLM-5,gpu=h200,gpus=16").expect("repository");
    let by_name = ScenarioSpec::parse_pairs("--from-plan", "model=glm-5,gpu=h200,gpus=16,quant=bf16").expect("name");
    assert_eq!(by_repo.quant.checkpoint, Some(Dtype::Bf16));
    assert_eq!(by_repo.build().expect("a"), by_name.build().expect("b"));
    assert!(ScenarioSpec::parse_pairs("--from-plan", "model=zai-org/GLM-5-FP8,gpu=h200,quant=fp8").is_ok(), "the same format");
    let e = ScenarioSpec::parse_pairs("--from-plan", "model=zai-org/GLM-5-FP8,gpu=h200,quant=nvfp4").expect_err("another format");
    assert!(e.to_string().contains("--from-plan model=zai-org/GLM-5-FP8 is the fp8 checkpoint of glm-5, but quant=nvfp4"), "{e}");
    let e = ScenarioSpec::parse_pairs("--vs-plan", "model=gpt-9,gpu=h200").expect_err("unknown");
    assert!(e.to_string().starts_with("--vs-plan model=gpt-9: \"gpt-9\" is not in the model catalog"), "{e}");
}

#[test]
fn a_stated_routing_skew_replaces_the_kernel_derived_one_and_uniform_routing_reads_more_experts() {
    let pairs = ScenarioSpec::parse_pairs("--from-plan", "model=glm-5,gpu=rtx-pro-6000-se,routing-skew=0").expect("pairs");
    assert_eq!(pairs.routing_skew, Some(0.0));
    let default = glm_on_rtx(None).build().expect("default");
    assert_eq!(default.engine.routing_skew, crate::predict::Engine::default().routing_skew);
    let mut s = glm_on_rtx(None);
    s.routing_skew = Some(0.0);
    let uniform = s.build().expect("uniform");
    assert_eq!(uniform.engine.routing_skew, 0.0);
    // At a mid batch uniform routing reads more distinct experts, so the decode step is longer;
    // one token reads top-k experts under any skew, so the batch-1 step is the same.
    assert!(uniform.decode_step_ms(32.0, 1536.0) > default.decode_step_ms(32.0, 1536.0));
    assert!((uniform.decode_step_ms(1.0, 1536.0) - default.decode_step_ms(1.0, 1536.0)).abs() < 1e-9);
}

#[test]
fn a_stated_per_request_cost_replaces_the_fitted_one_and_a_stated_overhead_keeps_it() {
    let fitted = glm_on_rtx(None).build().expect("default");
    let pairs = ScenarioSpec::parse_pairs("--from-plan", "model=glm-5,gpu=rtx-pro-6000-se,request-step-us=0").expect("pairs");
    assert_eq!(pairs.request_step_us, Some(0.0));
    let mut s = glm_on_rtx(None);
    s.request_step_us = Some(0.0);
    let none = s.build().expect("zero");
    assert_eq!(none.engine.request_step_us, 0.0);
    // At batch 64 the fitted cost adds 64 x request_step_us to the step.
    let gap = fitted.decode_step_ms(64.0, 1536.0) - none.decode_step_ms(64.0, 1536.0);
    assert!((gap - 64.0 * fitted.engine.request_step_us / 1e3).abs() < 1e-9, "{gap}");
    let mut stated = glm_on_rtx(None);
    stated.step_overhead_ms = Some(5.0);
    assert_eq!(stated.build().expect("overhead").engine.request_step_us, fitted.engine.request_step_us);
}

#[test]
fn impossible_numbers_are_refused_before_predicting() {
    let mut s = glm_on_rtx(None);
    s.link_bw_gbs = Some(-5.0);
    assert!(s.build().expect_err("bw").to_string().contains("beta_gbs"));
    let mut s = glm_on_rtx(None);
    s.step_overhead_ms = Some(f64::NAN);
    assert!(s.build().expect_err("overhead").to_string().contains("--step-overhead-ms"));
    let mut s = glm_on_rtx(None);
    s.request_latency_ms = Some(-1.0);
    assert!(s.build().expect_err("latency").to_string().contains("--request-latency-ms -1"));
    let mut s = glm_on_rtx(None);
    s.request_latency_ms = Some(34.0);
    assert_eq!(s.build().expect("vllm latency").engine.request_latency_ms, 34.0);
    for bad in [f64::NAN, -1.0, f64::INFINITY] {
        let mut s = glm_on_rtx(None);
        s.request_step_us = Some(bad);
        assert!(s.build().expect_err("per-request").to_string().contains("--request-step-us"), "{bad}");
    }
    for bad in [f64::NAN, -0.1, 3.5, f64::INFINITY] {
        let mut s = glm_on_rtx(None);
        s.routing_skew = Some(bad);
        assert!(s.build().expect_err("skew").to_string().contains("--routing-skew"), "{bad}");
    }
    let mut r = PlanRequest::new(glm_on_rtx(None));
    r.top = 0;
    assert!(build_report(&r).expect_err("top").to_string().contains("--top 0"));
}

#[test]
fn absurd_client_and_request_counts_are_refused_before_the_virtual_run_allocates_them() {
    let mut r = PlanRequest::new(glm_on_rtx(Some(Dtype::Nvfp4)));
    r.concurrency = vec![8, u32::MAX];
    let e = build_report(&r).expect_err("concurrency").to_string();
    assert!(e.contains(&format!("--concurrency {}", u32::MAX)) && e.contains(&MAX_CONCURRENCY.to_string()), "{e}");
    r.concurrency = vec![MAX_CONCURRENCY];
    r.workload.requests = Some(u64::MAX);
    let e = build_report(&r).expect_err("requests").to_string();
    assert!(e.contains(&format!("--requests {}", u64::MAX)) && e.contains(&MAX_REQUESTS.to_string()), "{e}");
    // The limits themselves are accepted (steady state only: no virtual run here).
    r.workload.requests = Some(MAX_REQUESTS);
    assert!(build_report(&r).is_ok());
}

#[test]
fn more_tensor_parallel_ranks_than_attention_heads_are_refused_unless_attention_is_data_parallel() {
    let mut s = ScenarioSpec::new(ModelSource::Catalog("glm-5".into()), "h200");
    s.gpus = 128;
    s.tp = Some(128);
    let e = s.build().expect_err("tp 128 over 64 heads").to_string();
    assert!(e.contains("--tp 128") && e.contains("64 attention heads"), "{e}");
    s.dp_attention = true;
    s.ep = 128;
    assert!(s.build().is_ok(), "DP attention holds every head on each rank");
    let mut s = ScenarioSpec::new(ModelSource::Catalog("glm-5".into()), "h200");
    s.gpus = 64;
    s.tp = Some(64);
    assert!(s.build().is_ok(), "one head per rank is allowed");
    // Without --tp the TP is --gpus's: the message names the flag the user gave.
    let mut s = ScenarioSpec::new(ModelSource::Catalog("glm-5".into()), "h200");
    s.gpus = 128;
    let e = s.build().expect_err("128 GPUs, TP128 by default").to_string();
    assert!(e.starts_with("--gpus 128 without --tp means TP128: TP128 is more than"), "{e}");
    assert!(e.contains("give a smaller --tp") && !e.contains("--tp 128"), "{e}");
    // With --pp and no --tp, the TP spans one stage's GPUs: 16 GPUs over 2 stages is TP8.
    let mut s = ScenarioSpec::new(ModelSource::Catalog("glm-5".into()), "h200");
    s.gpus = 16;
    s.pp = 2;
    assert_eq!(s.build().expect("TP8 PP2 on 16").plan.tp, 8);
    // A --pp that does not divide --gpus is named as such, not as a --tp the user did not give.
    s.pp = 3;
    let e = s.build().expect_err("16 over 3 stages").to_string();
    assert!(e.starts_with("--pp 3 does not divide --gpus 16") && !e.contains("lower --tp"), "{e}");
    // 256 GPUs over 2 stages is TP128, over GLM-5's 64 heads: the message says where TP128 came from.
    s.gpus = 256;
    s.pp = 2;
    let e = s.build().expect_err("TP128").to_string();
    assert!(e.starts_with("--gpus 256 over --pp 2 without --tp means TP128: TP128 is more than"), "{e}");
}

#[test]
fn an_engine_brings_its_defaults_and_the_flags_still_override_them() {
    let sglang = glm_on_rtx(None).build().expect("sglang");
    assert_eq!(sglang.engine.serving, EngineName::Sglang);
    assert!(!sglang.engine.mixed_prefill);
    let mut s = glm_on_rtx(None);
    s.engine = EngineName::Vllm;
    let vllm = s.build().expect("vllm");
    assert_eq!(vllm.engine.serving, EngineName::Vllm);
    assert!(vllm.engine.mixed_prefill, "vLLM V1 mixes prefill into decode steps");
    assert_eq!(vllm.engine.request_latency_ms, crate::predict::VLLM_REQUEST_LATENCY_MS);
    assert_eq!(vllm.mem_fraction(), crate::predict::VLLM_GPU_MEMORY_UTILIZATION);
    // The fitted step constants are the same for every engine.
    assert_eq!(vllm.engine.kernel_overhead_us, sglang.engine.kernel_overhead_us);
    s.request_latency_ms = Some(5.0);
    assert_eq!(s.build().expect("vllm, stated latency").engine.request_latency_ms, 5.0);
    // A stated memory share replaces the engine's, and more of it holds more KV.
    s.mem_fraction = Some(0.95);
    let roomier = s.build().expect("vllm at 0.95");
    assert_eq!(roomier.mem_fraction(), 0.95);
    assert!(roomier.memory().kv_gb > vllm.memory().kv_gb);
    for bad in [0.0, 1.5, f64::NAN, -0.1] {
        s.mem_fraction = Some(bad);
        let e = s.build().expect_err("bad memory share").to_string();
        assert!(e.contains("--mem-fraction") && e.contains("above 0 and at most 1"), "{e}");
    }
    let pairs = ScenarioSpec::parse_pairs("--vs", "model=glm-5,gpu=h200,mem-fraction=0.8").expect("pairs").build().expect("0.8");
    assert_eq!(pairs.mem_fraction(), 0.8);
    let trt = ScenarioSpec::parse_pairs("--from-plan", "model=glm-5,gpu=h200,engine=trtllm").expect("pairs").build().expect("trt");
    assert_eq!(trt.engine.serving, EngineName::Trtllm);
    assert!(trt.engine.mixed_prefill);
    let e = ScenarioSpec::parse_pairs("--from-plan", "model=glm-5,gpu=h200,engine=tgi").expect_err("tgi");
    assert!(e.to_string().contains("engine=tgi") && e.to_string().contains("sglang, vllm or trtllm"), "{e}");
}

#[test]
fn moe_efficiency_replaces_the_default_and_tuned_kernels_predict_more() {
    let pairs = "model=glm-5,gpu=rtx-pro-6000-se,gpus=8,link=pcie-host-staged,quant=nvfp4,tp=8";
    let untuned = ScenarioSpec::parse_pairs("--from-plan", pairs).expect("pairs").build().expect("untuned");
    let tuned = ScenarioSpec::parse_pairs("--from-plan", &format!("{pairs},moe-efficiency=0.8")).expect("pairs").build().expect("tuned");
    assert_eq!(tuned.expert_stream_efficiency(), 0.8);
    assert!(untuned.expert_stream_efficiency() < 0.8);
    assert!(tuned.point(64).output_tokens_per_s > untuned.point(64).output_tokens_per_s);
    for bad in ["0", "1.5", "NaN"] {
        let e = ScenarioSpec::parse_pairs("--from-plan", &format!("{pairs},moe-efficiency={bad}")).expect("pairs").build().expect_err(bad);
        assert!(e.to_string().contains("moe-efficiency"), "{e}");
    }
}

fn deepseek_on_h100(gpus: u32) -> ScenarioSpec {
    let mut s = ScenarioSpec::new(ModelSource::Catalog("deepseek-v3".into()), "h100-sxm");
    s.gpus = gpus;
    s
}

#[test]
fn node_flags_resolve_to_a_cluster_or_are_refused_naming_the_flag() {
    let mut s = deepseek_on_h100(16);
    s.gpus_per_node = Some(8);
    s.net = Some("ib-ndr".into());
    s.tp = Some(8);
    s.pp = 2;
    let c = s.build().expect("2 x 8").cluster.expect("cluster");
    assert_eq!((c.nodes, c.gpus_per_node, c.nics_per_node, c.net.name.as_str()), (2, 8, 8, "ib-ndr"));
    let pairs = "model=deepseek-v3,gpu=h100-sxm,gpus=16,gpus-per-node=8,net=ib-ndr,tp=8,pp=2";
    assert_eq!(ScenarioSpec::parse_pairs("--from-plan", pairs).expect("pairs").build().expect("pairs"), s.build().expect("spec"));
    let mut by_nodes = s.clone();
    by_nodes.gpus_per_node = None;
    by_nodes.nodes = Some(2);
    assert_eq!(by_nodes.build().expect("--nodes 2").cluster, Some(c));
    type Edit = &'static dyn Fn(&mut ScenarioSpec);
    let cases: [(Edit, &str); 7] = [
        (&|s| s.gpus_per_node = Some(6), "--gpus 16 is not a multiple of --gpus-per-node 6"),
        (&|s| s.nodes = Some(3), "--gpus 16 is not --nodes 3 x --gpus-per-node 8 = 24"),
        (&|s| s.net = None, "needs --net"),
        (&|s| s.net = Some("nvlink".into()), "give it to --link"),
        (
            &|s| {
                s.gpus = 24;
                s.tp = Some(12);
                s.pp = 1;
            },
            "--tp 12 does not fit",
        ),
        (&|s| s.gpus_per_node = Some(0), "--gpus-per-node 0"),
        (&|s| s.nics_per_node = Some(0), "--nics-per-node 0"),
    ];
    for (change, needle) in cases {
        let mut t = s.clone();
        change(&mut t);
        let e = t.build().map(|_| ()).expect_err(needle);
        assert!(e.to_string().contains(needle), "{needle}: {e}");
    }
    let mut measured = s.clone();
    measured.net_bw_gbs = Some(20.0);
    measured.net_latency_us = Some(5.0);
    let net = measured.build().expect("measured").cluster.expect("cluster").net;
    assert_eq!((net.alpha_us, net.beta_gbs), (5.0, 20.0));
    assert!(net.source.starts_with("measured (--net-bw); measured (--net-latency)"), "{}", net.source);
    measured.net_bw_gbs = Some(-1.0);
    assert!(measured.build().expect_err("negative").to_string().contains(
        "--net-latency/--net-bw: link bandwidth (beta_gbs) -1.0 is not a bandwidth this tool takes: give GB/s from 0.001 to 100000"
    ));
    let mut one = deepseek_on_h100(8);
    one.net = Some("ib-ndr".into());
    assert!(one.build().expect_err("net on one node").to_string().contains("--nodes or --gpus-per-node"));
}

/// `--nodes 1` (or a node as large as the deployment) is the single-node plan, number for number.
#[test]
fn one_node_is_the_single_node_plan() {
    let plain = deepseek_on_h100(8);
    let mut one = plain.clone();
    one.gpus_per_node = Some(8);
    one.net = Some("eth-100g".into());
    let (a, b) = (plain.build().expect("plain"), one.build().expect("one node"));
    assert_eq!(a, b);
    assert!(b.cluster.is_none());
}

#[test]
fn what_if_changes_the_network_and_the_node_count_with_the_gpus() {
    let mut s = deepseek_on_h100(16);
    s.gpus_per_node = Some(8);
    s.net = Some("eth-100g".into());
    s.tp = Some(16);
    let base = s.build().expect("base");
    let t = WhatIf::parse("net=ib-xdr").expect("parse").apply(&base).expect("apply");
    assert_eq!(t.cluster.as_ref().map(|c| c.net.name.as_str()), Some("ib-xdr"));
    assert!(t.point(32).output_tokens_per_s > base.point(32).output_tokens_per_s);
    let t = WhatIf::parse("gpus=32,tp=8,pp=4").expect("parse").apply(&base).expect("apply");
    assert_eq!(t.cluster.map(|c| c.nodes), Some(4));
    let one = deepseek_on_h100(8).build().expect("one node");
    assert!(WhatIf::parse("net=ib-ndr").expect("parse").apply(&one).expect_err("one node").to_string().contains("one node"));
    assert!(WhatIf::parse("net=nvlink").expect_err("not a net").to_string().contains("--net \"nvlink\" is unknown"));
}

#[test]
fn the_kv_cache_is_what_the_engines_auto_gives_the_checkpoint_unless_kv_dtype_states_it() {
    use crate::quant::KvDtype;
    let kv = |s: &ScenarioSpec| s.build().expect("builds").quant.kv_cache;
    // GLM-5's published block-FP8 checkpoint declares no KV format: BF16; its NVFP4 export, FP8.
    assert_eq!(kv(&glm_on_rtx(None)), KvDtype::Bf16);
    assert_eq!(kv(&glm_on_rtx(Some(Dtype::Nvfp4))), KvDtype::Fp8);
    // vLLM before 0.14.0 kept the model's BF16 whatever the checkpoint declared.
    let mut old_vllm = glm_on_rtx(Some(Dtype::Nvfp4));
    old_vllm.engine = EngineName::Vllm;
    old_vllm.engine_version = Some("0.11.0".into());
    assert_eq!(kv(&old_vllm), KvDtype::Bf16);
    // --kv-dtype wins either way.
    old_vllm.quant.kv_cache = Some(KvDtype::Fp8);
    assert_eq!(kv(&old_vllm), KvDtype::Fp8);
    let mut stated = glm_on_rtx(Some(Dtype::Nvfp4));
    stated.quant.kv_cache = Some(KvDtype::Bf16);
    assert_eq!(kv(&stated), KvDtype::Bf16);
    // A config's own declaration is read: a ModelOpt FP8 export declares an FP8 cache, where a
    // block-FP8 checkpoint's format alone would give BF16; --quant naming another checkpoint
    // drops the declaration with the config's format.
    let text = include_str!("../../tests/configs/Qwen--Qwen3-32B-FP8-Static-PerTensor.json").to_string();
    let mut qwen = ScenarioSpec::new(ModelSource::Config { text, path: "qwen.json".into() }, "h100-sxm");
    qwen.gpus = 1;
    assert_eq!(kv(&qwen), KvDtype::Fp8, "the config declares it");
    qwen.quant.checkpoint = Some(Dtype::Int4);
    assert_eq!(kv(&qwen), KvDtype::Bf16, "an AWQ checkpoint of the same model declares none");
    // `--vs quant=` changes the weights and keeps the deployment's cache.
    let fp8 = glm_on_rtx(None).build().expect("glm fp8");
    let vs = WhatIf::parse("quant=nvfp4").expect("parse").apply(&fp8).expect("applies");
    assert_eq!((vs.quant.experts, vs.quant.kv_cache), (Dtype::Nvfp4, KvDtype::Bf16));
}

#[test]
fn sglang_refuses_dp_attention_for_kimi_linear_and_vllm_takes_it() {
    let mut spec = ScenarioSpec::new(ModelSource::Catalog("kimi-linear-48b-a3b".into()), "h100-sxm");
    spec.gpus = 4;
    spec.tp = Some(4);
    spec.ep = 4;
    spec.dp_attention = true;
    let e = spec.build().expect_err("sglang").to_string();
    assert!(
        e.contains("--dp-attention: sglang runs this model's 20 KDA layers tensor-parallel") && e.contains("drop --dp-attention"),
        "{e}"
    );
    spec.engine = EngineName::Vllm;
    assert!(spec.build().expect("vllm").plan.dp_attention);
    spec.engine = EngineName::Sglang;
    spec.dp_attention = false;
    assert!(spec.build().is_ok(), "sglang without DP attention");
}
