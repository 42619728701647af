//! Unit tests of the config parser: published parameter counts, each family's layer layout, the
//! checkpoint formats, and the refusals that name a field.

use serde_json::Value;

use super::config::*;
use super::*;
use crate::predict::EngineName;

fn within(got: f64, want: f64, tol: f64) -> bool {
    (got - want).abs() / want < tol
}

/// Published totals and active counts. Vendors count "active" differently, so each figure is
/// checked against the count its vendor uses: DeepSeek, Qwen, Mistral and Meta include the
/// embedding table and the LM head; OpenAI's gpt-oss model card counts the LM head but not the
/// embedding; Z.ai's "40B active" for GLM-5 matches the count without both. New entries: Kimi-K2
/// (Moonshot's tech report: 1.04T total, 32B active, which matches the count with the LM head);
/// MiniMax-M2 (230B, 10B active: without embedding and LM head); GLM-4.5 and GLM-4.6 (Z.ai:
/// 355B, 32B active, without both); gpt-oss-20b (OpenAI's model card: 20.91B, 3.61B active);
/// Qwen3.5-397B-A17B (Qwen: 397B, 17B active).
#[test]
fn parameter_counts_match_published_totals_within_two_percent() {
    let cases: &[(&str, f64, f64, &str)] = &[
        ("glm-5", 744e9, 40e9, "non_embedding"),
        ("deepseek-v3", 671e9, 37e9, "all"),
        ("qwen3-235b-a22b", 235e9, 22e9, "all"),
        ("qwen3-30b-a3b", 30.5e9, 3.3e9, "all"),
        ("llama-3.1-70b", 70.6e9, 70.6e9, "all"),
        ("llama-3.1-8b", 8.03e9, 8.03e9, "all"),
        ("mixtral-8x7b", 46.7e9, 12.9e9, "all"),
        ("gpt-oss-120b", 116.83e9, 5.13e9, "lm_head"),
        ("gpt-oss-20b", 20.91e9, 3.61e9, "lm_head"),
        ("kimi-k2", 1.04e12, 32e9, "lm_head"),
        ("minimax-m2", 230e9, 10e9, "non_embedding"),
        ("glm-4.5", 355e9, 32e9, "non_embedding"),
        ("glm-4.6", 355e9, 32e9, "non_embedding"),
        // Meta's model cards: 17B active of 109B (Scout) and of 400B (Maverick), the vision
        // encoder (not modelled) included.
        ("llama-4-scout", 109e9, 17e9, "all"),
        ("llama-4-maverick", 400e9, 17e9, "all"),
    ];
    for &(name, total, active, conv) in cases {
        let p = catalog(name).expect("catalog").params();
        let a = match conv {
            "all" => p.active,
            "lm_head" => p.active_non_embedding + p.lm_head,
            _ => p.active_non_embedding,
        };
        assert!(within(p.total, total, 0.02), "{name}: total {:.2}B vs {:.2}B", p.total / 1e9, total / 1e9);
        assert!(within(a, active, 0.02), "{name}: active {:.2}B vs {:.2}B ({conv})", a / 1e9, active / 1e9);
    }
}

/// Qwen publishes Qwen3-Next-80B-A3B as "80B in total, 79B non-embedding, 3B activated" and
/// Qwen3.5-397B-A17B as "397B in total, 17B activated": the totals are checked within 2%, the
/// active counts to the published figures' own precision (they are rounded to whole billions:
/// the counts here are 3.25B without embeddings and 17.35B with them).
#[test]
fn qwen_hybrid_counts_match_the_model_cards() {
    let p = catalog("qwen3-next-80b-a3b").expect("catalog").params();
    assert!(within(p.total, 80e9, 0.02), "total {:.2}B", p.total / 1e9);
    assert!(within(p.total - p.embeddings - p.lm_head, 79e9, 0.02), "non-embedding {:.2}B", (p.total - p.embeddings - p.lm_head) / 1e9);
    assert!((2.5e9..3.5e9).contains(&p.active_non_embedding), "active {:.2}B", p.active_non_embedding / 1e9);
    let p = catalog("qwen3.5-397b-a17b").expect("catalog").params();
    assert!(within(p.total, 397e9, 0.02), "total {:.2}B", p.total / 1e9);
    assert!((16.5e9..17.5e9).contains(&p.active), "active {:.2}B", p.active / 1e9);
}

#[test]
fn hybrid_and_sliding_layers_are_read_from_the_configs() {
    let next = catalog("qwen3-next-80b-a3b").expect("next");
    assert_eq!(next.layer_counts, LayerCounts { full: 12, sliding: 0, linear: 36 });
    let la = next.linear.expect("linear attention");
    assert_eq!((la.key_heads, la.value_heads, la.key_head_dim, la.value_head_dim, la.state_bytes), (16, 32, 128, 128, 2));
    // The config names no state type: vLLM keeps the model's bf16, sglang float32.
    assert_eq!((la.state_bytes_under(EngineName::Vllm), la.state_bytes_under(EngineName::Sglang)), (2, 4));
    let q35 = catalog("qwen3.5-397b-a17b").expect("3.5");
    assert_eq!(q35.layer_counts, LayerCounts { full: 15, sliding: 0, linear: 45 });
    let q35_la = q35.linear.expect("linear");
    assert_eq!((q35_la.state_bytes, q35_la.state_bytes_sglang), (4, 4), "mamba_ssm_dtype float32");
    assert!(matches!(q35.attention, Attention::Gqa { gate: true, .. }));
    let oss = catalog("gpt-oss-120b").expect("oss");
    assert_eq!((oss.layer_counts, oss.sliding_window), (LayerCounts { full: 18, sliding: 18, linear: 0 }, Some(128)));
    assert_eq!(catalog("kimi-k2").expect("kimi").moe.expect("moe").experts, 384);
    assert!(matches!(catalog("kimi-k2").expect("kimi").attention, Attention::Mla { .. }));
    assert_eq!(catalog("glm-4.6").expect("glm").max_context, 202_752);
    // Without layer_types, Qwen3-Next's full_attention_interval places the same layers.
    let mut cfg: Value = serde_json::from_str(include_str!("../../data/models/qwen3.5-397b-a17b.json")).expect("json");
    cfg["text_config"].as_object_mut().expect("text_config").remove("layer_types");
    let derived = from_hf_config(&cfg.to_string(), "c.json").expect("derived");
    assert_eq!(derived.layer_counts, q35.layer_counts);
}

#[test]
fn glm5_breakdown_is_dominated_by_routed_experts() {
    let p = catalog("glm-5").expect("glm").params();
    assert!(p.routed_experts / p.total > 0.97);
    assert!((p.per_expert - 3.0 * 6144.0 * 2048.0).abs() < 1.0);
}

#[test]
fn hf_config_reads_deepseek_v3_like_the_catalog() {
    let cfg = r#"{"model_type":"deepseek_v3","hidden_size":7168,"num_hidden_layers":61,"vocab_size":129280,"num_attention_heads":128,
        "q_lora_rank":1536,"kv_lora_rank":512,"qk_nope_head_dim":128,"qk_rope_head_dim":64,"v_head_dim":128,"n_routed_experts":256,
        "num_experts_per_tok":8,"n_shared_experts":1,"moe_intermediate_size":2048,"intermediate_size":18432,"first_k_dense_replace":3,
        "max_position_embeddings":163840}"#;
    let a = from_hf_config(cfg, "config.json").expect("parse");
    let b = catalog("deepseek-v3").expect("catalog");
    assert!((a.params().total - b.params().total).abs() < 1.0);
}

#[test]
fn unsupported_architecture_names_the_field() {
    let e = from_hf_config(r#"{"model_type":"mamba"}"#, "c.json").expect_err("unsupported");
    assert!(e.to_string().contains("\"model_type\""), "{e}");
    let e = from_hf_config(r#"{"model_type":"llama","hidden_size":4096}"#, "c.json").expect_err("missing");
    assert!(e.to_string().contains("\"num_hidden_layers\""), "{e}");
}

#[test]
fn unknown_catalog_name_lists_the_catalog() {
    let e = catalog("gpt-5").expect_err("unknown");
    assert!(e.to_string().contains("glm-5, deepseek-v3"), "{e}");
}

#[test]
fn every_catalog_config_names_its_checkpoint_and_defaults_to_it() {
    for name in catalog_names() {
        let e = catalog_entry(name).expect("entry");
        let spec = catalog(name).expect("config");
        assert!(!e.checkpoints.is_empty(), "{name}");
        assert_eq!(spec.checkpoint.unwrap_or(Dtype::Bf16), e.checkpoints[0].quant, "{name}: the config's format is the default");
    }
    assert_eq!(catalog("glm-5").expect("glm").checkpoint, Some(Dtype::Fp8));
    assert_eq!(catalog("gpt-oss-120b").expect("oss").checkpoint, Some(Dtype::Mxfp4));
}

fn llama_with(extra: &str) -> String {
    format!(
        r#"{{"model_type":"llama","hidden_size":4096,"num_hidden_layers":32,"vocab_size":128256,"num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":14336{extra}}}"#
    )
}

#[test]
fn impossible_architectures_are_refused_naming_the_field() {
    let cases = [
        (llama_with(r#","num_hidden_layers":0"#), "\"num_hidden_layers\" is 0"),
        (llama_with(r#","hidden_size":0"#), "\"hidden_size\" is 0"),
        (llama_with(r#","num_attention_heads":0"#), "\"num_attention_heads\" is 0"),
        (llama_with(r#","num_key_value_heads":64"#), "\"num_key_value_heads\" is 64"),
        (llama_with(r#","num_key_value_heads":3"#), "divide num_attention_heads"),
        (llama_with(r#","vocab_size":-5"#), "\"vocab_size\" is -5, not a whole number"),
        (llama_with(r#","hidden_size":1e20"#), "\"hidden_size\""),
    ];
    for (cfg, needle) in cases {
        let e = from_hf_config(&cfg, "c.json").expect_err(needle);
        assert!(e.to_string().contains(needle) && e.to_string().starts_with("c.json: "), "{e}");
    }
}

#[test]
fn top_k_above_the_expert_count_is_refused() {
    let cfg = r#"{"model_type":"mixtral","hidden_size":4096,"num_hidden_layers":32,"vocab_size":32000,"num_attention_heads":32,
        "num_key_value_heads":8,"intermediate_size":14336,"num_local_experts":8,"num_experts_per_tok":200}"#;
    let e = from_hf_config(cfg, "m.json").expect_err("top-k");
    assert!(e.to_string().contains("\"num_experts_per_tok\" is 200: it must be from 1 to the 8 experts"), "{e}");
    let neg = cfg.replace("\"num_local_experts\":8", "\"num_local_experts\":-8");
    assert!(from_hf_config(&neg, "m.json").expect_err("negative").to_string().contains("num_local_experts"));
}

#[test]
fn an_unknown_quantization_method_is_refused() {
    let e = from_hf_config(&llama_with(r#","quantization_config":{"quant_method":"bitsandbytes"}"#), "q.json").expect_err("quant");
    assert!(e.to_string().contains("quantization_config.quant_method"), "{e}");
}

/// A document that is not an object, a non-string `model_type` and a non-object
/// `quantization_config` are refused saying what they are; a byte-order mark is skipped.
#[test]
fn config_documents_of_the_wrong_shape_are_refused_by_what_they_are() {
    for (text, said) in
        [("[1, 2]", "is an array, not a JSON object"), ("null", "is null, not a JSON object"), ("42", "is a number, not a JSON object")]
    {
        let e = from_hf_config(text, "c.json").expect_err(text);
        assert!(e.to_string().contains(said), "{text}: {e}");
    }
    let e = from_hf_config(r#"{"model_type":7}"#, "c.json").expect_err("number");
    assert!(e.to_string().contains("\"model_type\" is 7, not a string"), "{e}");
    let e = from_hf_config(&llama_with(r#","quantization_config":"fp8""#), "q.json").expect_err("string");
    assert!(e.to_string().contains("\"quantization_config\" is \"fp8\", not an object"), "{e}");
    let e = from_hf_config(&llama_with(r#","quantization_config":{"quant_method":8}"#), "q.json").expect_err("number");
    assert!(e.to_string().contains("quant_method\" is 8, not a string"), "{e}");
    let bom = format!("\u{feff}{}", llama_with(""));
    assert_eq!(from_hf_config(&bom, "c.json").expect("a BOM is skipped").layers, 32);
}

fn gpt_oss_with(extra: &str) -> String {
    format!(
        r#"{{"model_type":"gpt_oss","hidden_size":2880,"num_hidden_layers":4,"vocab_size":201088,"num_attention_heads":64,"num_key_value_heads":8,"head_dim":64,"num_local_experts":32,"num_experts_per_tok":4,"intermediate_size":2880,"sliding_window":128{extra}}}"#
    )
}

fn qwen3_next_with(extra: &str) -> String {
    format!(
        r#"{{"model_type":"qwen3_next","hidden_size":2048,"num_hidden_layers":8,"vocab_size":151936,"num_attention_heads":16,"num_key_value_heads":2,"head_dim":256,"num_experts":512,"num_experts_per_tok":10,"moe_intermediate_size":512,"shared_expert_intermediate_size":512,"full_attention_interval":4,"linear_num_key_heads":16,"linear_num_value_heads":32,"linear_key_head_dim":128,"linear_value_head_dim":128,"linear_conv_kernel_dim":4{extra}}}"#
    )
}

/// Every architecture feature the model cannot express is refused with the field and the
/// value it did not understand, never approximated.
#[test]
fn unmodellable_layers_and_windows_are_refused_naming_the_field_and_value() {
    let cases = [
        (
            gpt_oss_with(r#","layer_types":["sliding_attention","full_attention","sliding_attention","chunked_attention"]"#),
            "\"layer_types\" entry 3 is \"chunked_attention\"",
        ),
        (
            gpt_oss_with(r#","layer_types":["sliding_attention","full_attention"]"#),
            "\"layer_types\" has 2 entries but \"num_hidden_layers\" is 4",
        ),
        (
            gpt_oss_with(r#","layer_types":["linear_attention","full_attention","sliding_attention","full_attention"]"#),
            "entry 0 is \"linear_attention\", which model_type \"gpt_oss\" does not have",
        ),
        (gpt_oss_with(r#","sliding_window":null"#), "sliding-window layers but no field \"sliding_window\""),
        (gpt_oss_with(r#","layer_types":"full""#), "\"layer_types\" is \"full\", not a list"),
        (llama_with(r#","sliding_window":4096"#), "\"sliding_window\" is 4096, but model_type \"llama\" has no sliding-window layers"),
        (llama_with(r#","layer_types":["full_attention","sliding_attention"]"#), "\"layer_types\" has 2 entries"),
        (llama_with(r#","attn_type_list":[1]"#), "\"attn_type_list\" is set, but model_type \"llama\""),
        (qwen3_next_with(r#","sliding_window":4096,"use_sliding_window":true"#), "\"use_sliding_window\" is true (window 4096)"),
        (qwen3_next_with(r#","linear_num_value_heads":null"#), "needs the field \"linear_num_value_heads\""),
        (qwen3_next_with(r#","linear_num_value_heads":24"#), "\"linear_num_value_heads\" is 24: it must be a multiple"),
        (qwen3_next_with(r#","full_attention_interval":null"#), "needs the field \"full_attention_interval\""),
        (qwen3_next_with(r#","full_attention_interval":0"#), "\"full_attention_interval\" is 0"),
        (qwen3_next_with(r#","mamba_ssm_dtype":"int8""#), "\"mamba_ssm_dtype\" is \"int8\""),
        (qwen3_next_with(r#","decoder_sparse_step":0"#), "\"decoder_sparse_step\" is 0"),
        (qwen3_next_with(r#","mlp_only_layers":"all""#), "\"mlp_only_layers\" is \"all\""),
        (
            qwen3_next_with(
                r#","layer_types":["linear_attention","mamba","linear_attention","full_attention","linear_attention","linear_attention","linear_attention","full_attention"]"#,
            ),
            "entry 1 is \"mamba\"",
        ),
    ];
    for (cfg, needle) in cases {
        let e = from_hf_config(&cfg, "c.json").expect_err(needle);
        assert!(e.to_string().contains(needle) && e.to_string().starts_with("c.json: "), "{needle}: {e}");
    }
    // A window the config itself turns off is not a sliding layer.
    let off = from_hf_config(&qwen3_next_with(r#","sliding_window":4096,"use_sliding_window":false"#), "c.json").expect("off");
    assert_eq!((off.sliding_window, off.layer_counts.sliding), (None, 0));
}

#[test]
fn minimax_lightning_attention_layers_are_refused() {
    let text = include_str!("../../data/models/minimax-m2.json");
    let mut cfg: Value = serde_json::from_str(text).expect("json");
    cfg["attn_type_list"][7] = Value::from(0);
    let e = from_hf_config(&cfg.to_string(), "m.json").expect_err("lightning");
    assert!(e.to_string().contains("\"attn_type_list\" entry 7 is 0"), "{e}");
    cfg["attn_type_list"] = Value::from(vec![1; 3]);
    let e = from_hf_config(&cfg.to_string(), "m.json").expect_err("length");
    assert!(e.to_string().contains("has 3 entries but \"num_hidden_layers\" is 62"), "{e}");
}

#[test]
fn minimax_qk_norm_spans_the_heads_and_other_norm_types_are_read_or_refused() {
    let text = include_str!("../../data/models/minimax-m2.json");
    assert!(from_hf_config(text, "m.json").expect("minimax").qk_norm_across_heads, "per_layer spans all heads");
    let mut cfg: Value = serde_json::from_str(text).expect("json");
    cfg["qk_norm_type"] = Value::from("per_head");
    assert!(!from_hf_config(&cfg.to_string(), "m.json").expect("per_head").qk_norm_across_heads);
    cfg["qk_norm_type"] = Value::from("per_layer");
    cfg["use_qk_norm"] = Value::from(false);
    assert!(!from_hf_config(&cfg.to_string(), "m.json").expect("no norm").qk_norm_across_heads);
    cfg["qk_norm_type"] = Value::from("per_group");
    let e = from_hf_config(&cfg.to_string(), "m.json").expect_err("unknown norm type");
    assert!(e.to_string().contains("field \"qk_norm_type\" is \"per_group\""), "{e}");
    // Other architectures' configs are not read for it, whatever the field says.
    let other = from_hf_config(&qwen3_next_with(r#","qk_norm_type":"rms""#), "q.json").expect("qwen3-next with the field");
    assert!(!other.qk_norm_across_heads);
    // Models whose q/k norm is per head (Qwen3) or absent do not all-reduce it.
    assert!(!catalog("qwen3-235b-a22b").expect("qwen3").qk_norm_across_heads);
    assert!(!catalog("deepseek-v3").expect("dsv3").qk_norm_across_heads);
}

#[test]
fn mistral_sliding_window_applies_to_every_layer_and_dense_qwen_layers_are_counted() {
    let m = from_hf_config(
        r#"{"model_type":"mistral","hidden_size":4096,"num_hidden_layers":32,"vocab_size":32000,"num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":14336,"sliding_window":4096}"#,
        "m.json",
    )
    .expect("mistral");
    assert_eq!((m.layer_counts.sliding, m.sliding_window), (32, Some(4096)));
    let q = from_hf_config(&qwen3_next_with(r#","mlp_only_layers":[0,5],"intermediate_size":5120"#), "q.json").expect("qwen");
    assert_eq!(q.dense_layers, 2);
    let q = from_hf_config(&qwen3_next_with(r#","decoder_sparse_step":2,"intermediate_size":5120"#), "q.json").expect("qwen");
    assert_eq!(q.dense_layers, 4);
}

#[test]
fn gemma_phi3_and_glm4_configs_read_their_layer_kinds_windows_and_tied_embeddings() {
    // Gemma 3 27B (multimodal wrapper, text model under text_config, the older
    // sliding_window_pattern spelling): every sixth layer global, the rest a 1,024-token window.
    let gemma3 = r#"{"model_type":"gemma3","text_config":{"model_type":"gemma3_text","hidden_size":5376,"intermediate_size":21504,"num_hidden_layers":62,"num_attention_heads":32,"num_key_value_heads":16,"head_dim":128,"sliding_window":1024,"sliding_window_pattern":6,"vocab_size":262208,"query_pre_attn_scalar":168}}"#;
    let g = from_hf_config(gemma3, "g.json").expect("gemma3");
    assert_eq!(g.arch, "gemma3");
    assert_eq!((g.layer_counts.full, g.layer_counts.sliding, g.sliding_window), (10, 52, Some(1024)));
    assert!(g.tied_embeddings, "Gemma ties its output projection unless told otherwise");
    assert!(matches!(g.attention, Attention::Gqa { heads: 32, kv_heads: 16, head_dim: 128, .. }), "{:?}", g.attention);
    // The newer spelling, layer_types, wins over the pattern.
    let kinds: Vec<&str> = (0..62).map(|i| if i % 2 == 0 { "sliding_attention" } else { "full_attention" }).collect();
    let typed = gemma3.replace(r#""sliding_window_pattern":6"#, &format!(r#""layer_types":{}"#, serde_json::json!(kinds)));
    let g = from_hf_config(&typed, "g.json").expect("gemma3 layer_types");
    assert_eq!((g.layer_counts.full, g.layer_counts.sliding), (31, 31));
    let e = from_hf_config(&gemma3.replace(r#""sliding_window_pattern":6"#, r#""sliding_window_pattern":0"#), "g.json").expect_err("0");
    assert!(e.to_string().contains("\"sliding_window_pattern\" is 0"), "{e}");
    // Gemma 3 12B as Google ships it: no vocab_size and no head_dim under text_config (the
    // config class's 262,208 and 256 apply, not hidden / heads = 240).
    let g12 = from_hf_config(
        r#"{"model_type":"gemma3","text_config":{"model_type":"gemma3_text","hidden_size":3840,"intermediate_size":15360,"num_hidden_layers":48,"num_attention_heads":16,"num_key_value_heads":8,"sliding_window":1024}}"#,
        "g12.json",
    )
    .expect("gemma3 12b");
    assert!(matches!(g12.attention, Attention::Gqa { head_dim: 256, kv_heads: 8, .. }), "{:?}", g12.attention);
    assert_eq!((g12.vocab, g12.layer_counts.full, g12.sliding_window), (262_208, 8, Some(1024)));
    let total = g12.params().total / 1e9;
    assert!((11.6..12.0).contains(&total), "Gemma 3 12B's language model is about 11.8B: {total}");
    // Gemma 2 9B: even layers slide, a text-only config that states its tie.
    let g2 = from_hf_config(
        r#"{"model_type":"gemma2","hidden_size":3584,"intermediate_size":14336,"num_hidden_layers":42,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":256,"sliding_window":4096,"vocab_size":256000,"tie_word_embeddings":false}"#,
        "g2.json",
    )
    .expect("gemma2");
    assert_eq!((g2.layer_counts.full, g2.layer_counts.sliding, g2.sliding_window, g2.tied_embeddings), (21, 21, Some(4096), false));
    // Phi-4 (phi3 architecture): no window, all full; Phi-3-mini's 2,047-token window slides everywhere.
    let phi = |window: &str| {
        format!(
            r#"{{"model_type":"phi3","hidden_size":5120,"intermediate_size":17920,"num_hidden_layers":40,"num_attention_heads":40,"num_key_value_heads":10,"vocab_size":100352,"sliding_window":{window}}}"#
        )
    };
    let p = from_hf_config(&phi("null"), "p.json").expect("phi-4");
    assert_eq!((p.layer_counts.full, p.sliding_window, p.tied_embeddings), (40, None, false));
    let p = from_hf_config(&phi("2047"), "p.json").expect("phi-3");
    assert_eq!((p.layer_counts.sliding, p.sliding_window), (40, Some(2047)));
    // GLM-4-32B-0414: dense GQA with biased attention.
    let glm = from_hf_config(
        r#"{"model_type":"glm4","hidden_size":6144,"intermediate_size":23040,"num_hidden_layers":61,"num_attention_heads":48,"num_key_value_heads":2,"head_dim":128,"vocab_size":151552,"attention_bias":true}"#,
        "glm.json",
    )
    .expect("glm4");
    assert_eq!(glm.layer_counts.full, 61);
    assert!(matches!(glm.attention, Attention::Gqa { kv_heads: 2, bias: true, .. }), "{:?}", glm.attention);
    // A window on GLM-4, which has no sliding layers, is still refused by name.
    let e = from_hf_config(
        r#"{"model_type":"glm4","hidden_size":6144,"intermediate_size":23040,"num_hidden_layers":61,"num_attention_heads":48,"num_key_value_heads":2,"vocab_size":151552,"sliding_window":4096}"#,
        "glm.json",
    )
    .expect_err("window");
    assert!(e.to_string().contains("model_type \"glm4\" has no sliding-window layers"), "{e}");
}

#[test]
fn compressed_tensors_checkpoints_name_their_format_or_are_refused() {
    let ct = |bits: u32, kind: &str| {
        llama_with(&format!(
            r#","quantization_config":{{"quant_method":"compressed-tensors","config_groups":{{"group_0":{{"weights":{{"num_bits":{bits},"type":"{kind}"}}}}}}}}"#
        ))
    };
    assert_eq!(from_hf_config(&ct(4, "int"), "c.json").expect("int4").checkpoint, Some(Dtype::Int4));
    assert_eq!(from_hf_config(&ct(8, "float"), "c.json").expect("fp8").checkpoint, Some(Dtype::Fp8));
    let e = from_hf_config(&ct(2, "int"), "c.json").expect_err("2-bit");
    assert!(e.to_string().contains("quantization_config.config_groups") && e.to_string().contains("2-bit \"int\" weights"), "{e}");
}

/// An edit to a config's JSON object.
type Edit<'a> = &'a dyn Fn(&mut serde_json::Map<String, Value>);

/// A config's JSON as a value to edit.
fn json(text: &str) -> Value {
    serde_json::from_str(text).expect("json")
}

#[test]
fn python_float_tokens_outside_strings_are_read_as_null() {
    let cfg = llama_with(r#","time_step_limit":[0.0, Infinity],"x":NaN,"y":-Infinity,"_name_or_path":"NaN -Infinity""#);
    let m = from_hf_config(&cfg, "c.json").expect("python's float tokens");
    assert_eq!(m.name, "NaN -Infinity", "a string keeps its text");
    assert_eq!(
        python_floats_as_null(r#"{"a": "Infinity \" NaN", "b": [NaN, -Infinity]}"#).as_deref(),
        Some(r#"{"a": "Infinity \" NaN", "b": [null, null]}"#)
    );
    assert_eq!(python_floats_as_null(r#"{"NaN": 1, "a": NaNx}"#), None, "inside a string, or not a whole token");
    let e = from_hf_config(r#"{"a": Infinity,}"#, "c.json").expect_err("still not JSON");
    assert!(e.to_string().contains("c.json: not valid JSON"), "{e}");
    // NVIDIA's Nemotron-3 Super config ends time_step_limit in Infinity: it parses.
    let text = include_str!("../../tests/configs/nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json");
    assert!(text.contains("Infinity"), "the fixture keeps its Infinity token");
    let m = from_hf_config(text, "n.json").expect("nemotron_h");
    assert_eq!(m.arch, "nemotron_h");
}

fn print_counts(name: &str, m: &ModelSpec) {
    let p = m.params();
    println!("{name}: total {:.3}B active {:.3}B non-emb {:.3}B", p.total / 1e9, p.active / 1e9, p.active_non_embedding / 1e9);
}

/// Nemotron-H's layers are single-operation blocks: the pattern's characters are counted as
/// mixers (attention full, Mamba-2 linear) without an FFN, and MLP or MoE blocks without a mixer.
/// NVIDIA's model cards: Nemotron-3 Nano 30B-A3B has 31.6B parameters, 3.2B active (3.6B with
/// the embeddings and LM head); Nemotron-3 Super 120B-A12B has 120B, 12B active (12.7B with the
/// embeddings and LM head, as counted here).
#[test]
fn nemotron_h_blocks_are_counted_as_mixers_and_ffns_and_match_the_model_cards() {
    let nano = catalog("nemotron-3-nano-30b-a3b").expect("catalog");
    print_counts("nano", &nano);
    assert_eq!(nano.layer_counts, LayerCounts { full: 6, sliding: 0, linear: 23 });
    assert_eq!((nano.layers, nano.dense_layers, nano.ffn_free_layers, nano.moe_layers()), (52, 0, 29, 23));
    assert_eq!((nano.mixer_layers(), nano.ffn_layers(), nano.tp_reductions()), (29, 23, 52));
    assert!(!nano.ffn_gated, "squared ReLU: up and down only");
    let la = nano.linear.expect("mamba");
    assert_eq!(
        (la.mixer, la.key_heads, la.value_heads, la.key_head_dim, la.value_head_dim, la.state_bytes),
        (LinearMixer::Mamba2, 8, 64, 128, 64, 4)
    );
    // State per request and layer: 64 heads x 64 x 128 in fp32, and the conv's (4096 + 2 x 8 x 128) x 3 in bf16.
    for engine in EngineName::ALL {
        assert_eq!(la.state_bytes_per_layer(engine), (64.0 * 64.0 * 128.0 * 4.0, (4096.0 + 2048.0) * 3.0 * 2.0), "{engine:?}");
    }
    let p = nano.params();
    assert!(within(p.total, 31.6e9, 0.02), "total {:.2}B", p.total / 1e9);
    // 3.2B is the count with the LM head (gpt-oss's convention), 3.6B with the embeddings too.
    assert!(within(p.active_non_embedding + p.lm_head, 3.2e9, 0.02), "active {:.2}B", (p.active_non_embedding + p.lm_head) / 1e9);
    assert!(within(p.active, 3.6e9, 0.02), "active with embeddings {:.2}B", p.active / 1e9);

    let sup =
        from_hf_config(include_str!("../../tests/configs/nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json"), "s.json").expect("super");
    print_counts("super", &sup);
    assert_eq!(sup.moe.expect("moe").latent, Some(1024));
    assert_eq!((sup.layers, sup.mixer_layers() + sup.ffn_layers()), (88, 88));
    let p = sup.params();
    assert!(within(p.total, 120e9, 0.02), "total {:.2}B", p.total / 1e9);
    assert!(within(p.active, 12.7e9, 0.02), "active {:.2}B", p.active / 1e9);

    // The newer list spelling reads the same blocks; an unknown block is refused by name.
    let mut v: Value = serde_json::from_str(include_str!("../../data/models/nemotron-3-nano-30b-a3b.json")).expect("json");
    let blocks: Vec<&str> = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
        .chars()
        .map(|c| match c {
            'M' => "mamba",
            'E' => "moe",
            _ => "attention",
        })
        .collect();
    let t = v.as_object_mut().expect("object");
    t.remove("hybrid_override_pattern");
    t.insert("layers_block_type".into(), serde_json::json!(blocks));
    let listed = from_hf_config(&v.to_string(), "l.json").expect("layers_block_type");
    assert_eq!(listed.params(), nano.params());
    // Nemotron 3 Ultra's config states no num_hidden_layers: the list's length is the count.
    let mut uncounted = v.clone();
    uncounted.as_object_mut().expect("object").remove("num_hidden_layers");
    assert_eq!(from_hf_config(&uncounted.to_string(), "u.json").expect("counted by the list").layers, 52);
    uncounted.as_object_mut().expect("object").remove("layers_block_type");
    let e = from_hf_config(&uncounted.to_string(), "u.json").expect_err("no count, no list");
    assert!(e.to_string().contains("u.json: model_type \"nemotron_h\" needs the field \"num_hidden_layers\""), "{e}");
    let bad = v.to_string().replacen("\"mamba\"", "\"mamba3\"", 1);
    let e = from_hf_config(&bad, "l.json").expect_err("unknown block");
    assert!(e.to_string().contains("l.json: field \"layers_block_type\" entry 0 is \"mamba3\""), "{e}");
    let short = include_str!("../../data/models/nemotron-3-nano-30b-a3b.json").replacen("MEMEM*E", "MEMEM*", 1);
    let e = from_hf_config(&short, "p.json").expect_err("51 blocks");
    assert!(e.to_string().contains("has 51 entries but \"num_hidden_layers\" is 52"), "{e}");
    // A list without a mixer, two block fields that disagree, MLP blocks without their width.
    let nano_text = include_str!("../../data/models/nemotron-3-nano-30b-a3b.json");
    let no_mixer = nano_text.replace("MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", &"E".repeat(52));
    let e = from_hf_config(&no_mixer, "p.json").expect_err("no mixer");
    assert!(e.to_string().contains("field \"hybrid_override_pattern\" names no Mamba-2 or attention block"), "{e}");
    let mut both = v.clone();
    both.as_object_mut().expect("object").insert("hybrid_override_pattern".into(), serde_json::json!("M".repeat(52)));
    let e = from_hf_config(&both.to_string(), "b.json").expect_err("disagree");
    assert!(e.to_string().contains("fields \"layers_block_type\" and \"hybrid_override_pattern\" name different blocks"), "{e}");
    let mlp = nano_text.replacen("MEMEM*E", "MEMEM*-", 1).replace("  \"intermediate_size\": 1856,\n", "");
    let e = from_hf_config(&mlp, "m.json").expect_err("no MLP width");
    assert!(e.to_string().contains("m.json: model_type \"nemotron_h\" needs the field \"intermediate_size\""), "{e}");
    let odd = include_str!("../../data/models/nemotron-3-nano-30b-a3b.json").replacen("MEMEM*E", "MEMEM#E", 1);
    let e = from_hf_config(&odd, "p.json").expect_err("#");
    assert!(e.to_string().contains("\"hybrid_override_pattern\" character 5 is '#'"), "{e}");
}

#[test]
fn modelopt_mixed_precision_checkpoints_give_each_part_its_format() {
    let moe = from_hf_config(include_str!("../../tests/configs/nvidia--Qwen3.6-35B-A3B-NVFP4.json"), "q.json").expect("Qwen3.6 MoE");
    let p = moe.checkpoint_parts.expect("mixed");
    assert_eq!((p.attention, p.experts, p.shared_experts, p.dense_ffn), (Dtype::Fp8, Dtype::Int4, Dtype::Int4, Dtype::Bf16));
    assert_eq!(moe.checkpoint, Some(Dtype::Int4), "a MoE checkpoint is named by its experts");
    assert_eq!(p.lm_head, Some(Dtype::Int4), "its LM head is W4A16 NVFP4 too");
    let dense = from_hf_config(include_str!("../../tests/configs/nvidia--Qwen3.6-27B-NVFP4.json"), "q.json").expect("Qwen3.6 dense");
    let p = dense.checkpoint_parts.expect("mixed");
    assert_eq!((p.attention, p.dense_ffn), (Dtype::Fp8, Dtype::Int4));
    assert_eq!(dense.checkpoint, Some(Dtype::Int4), "a dense one by its FFN");
    // An older ModelOpt export names itself only by its producer.
    let fp8 = from_hf_config(include_str!("../../tests/configs/Qwen--Qwen3-32B-FP8-Static-PerTensor.json"), "q.json").expect("FP8");
    assert_eq!((fp8.checkpoint, fp8.checkpoint_parts), (Some(Dtype::Fp8), None));
    let refused = |q: &str, want: &str| {
        let e = from_hf_config(&llama_with(&format!(r#","quantization_config":{q}"#)), "c.json").expect_err(want);
        assert!(e.to_string().contains(want), "{e}");
    };
    refused(r#"{"quant_method":"modelopt","quant_algo":"INT8_SQ"}"#, r#"field "quantization_config.quant_algo" is "INT8_SQ""#);
    let mixed = |layers: &str| format!(r#"{{"quant_method":"modelopt","quant_algo":"MIXED_PRECISION","quantized_layers":{{{layers}}}}}"#);
    refused(
        &mixed(r#""model.layers.0.self_attn.q_proj":{"quant_algo":"FP8"},"model.layers.1.self_attn.q_proj":{"quant_algo":"NVFP4"}"#),
        "mixes fp8 and nvfp4 within the attention",
    );
    refused(&mixed(r#""model.layers.0.input_norm":{"quant_algo":"FP8"}"#), "is not an attention, FFN or expert module");
    // Llama 4's FFN modules and a quantized LM head are read; the vision tower and the
    // routers are passed over.
    let layers = r#""model.layers.0.feed_forward.down_proj":{"quant_algo":"FP8"},"lm_head":{"quant_algo":"NVFP4"},"model.visual.blocks.0.attn.qkv":{"quant_algo":"NVFP4"},"model.layers.0.mlp.gate":{"quant_algo":"NVFP4"}"#;
    let cfg = llama_with(&format!(r#","quantization_config":{}"#, mixed(layers)));
    let parts = from_hf_config(&cfg, "c.json").expect("mixed").checkpoint_parts.expect("parts");
    assert_eq!((parts.dense_ffn, parts.attention, parts.lm_head), (Dtype::Fp8, Dtype::Bf16, Some(Dtype::Nvfp4)));
    refused(&mixed(r#""model.layers.0.mlp.up_proj":{"quant_algo":"W4A8_AWQ"}"#), "quant_algo \"W4A8_AWQ\", which servetune does not model");
    refused(&mixed(""), "quantization_config.quantized_layers\" is missing or empty");
}

#[test]
fn fbgemm_fp8_checkpoints_keep_the_parts_their_unconverted_list_names_in_most_layers_in_bf16() {
    let with = |unconverted: &str| {
        let q = format!(
            r#","quantization_config":{{"quant_method":"fbgemm_fp8","activation_scale_ub":1200.0,"modules_to_not_convert":{unconverted}}}"#
        );
        from_hf_config(&llama_with(&q), "c.json").expect("fbgemm")
    };
    // Every attention layer and the first and last FFN unconverted, as Meta's 405B export does.
    let mut names: Vec<String> = (0..32).map(|i| format!("model.layers.{i}.self_attn")).collect();
    names.extend(["model.layers.0.mlp".to_string(), "model.layers.31.mlp".to_string(), "lm_head".to_string()]);
    let m = with(&serde_json::json!(names).to_string());
    let p = m.checkpoint_parts.expect("mixed");
    assert_eq!((p.attention, p.dense_ffn, p.lm_head, m.checkpoint), (Dtype::Bf16, Dtype::Fp8, None, Some(Dtype::Fp8)));
    // Nothing unconverted but the head: one FP8 format for every part.
    let all = with(r#"["lm_head"]"#);
    assert_eq!((all.checkpoint, all.checkpoint_parts), (Some(Dtype::Fp8), None));
    // Llama 4 Maverick's routed experts FP8, the rest (attention, shared experts, dense FFNs) BF16.
    let mut cfg = json(include_str!("../../data/models/llama-4-maverick.json"));
    let mut names: Vec<String> = Vec::new();
    for i in 0..48 {
        names.push(format!("language_model.model.layers.{i}.self_attn"));
        names.push(format!("language_model.model.layers.{i}.feed_forward.{}", if i % 2 == 1 { "shared_expert" } else { "down_proj" }));
        names.push(format!("language_model.model.layers.{i}.feed_forward.router"));
    }
    names.push("vision_model".into());
    cfg["quantization_config"] = serde_json::json!({"quant_method": "fbgemm_fp8", "modules_to_not_convert": names});
    let m = from_hf_config(&cfg.to_string(), "m.json").expect("maverick fp8");
    let p = m.checkpoint_parts.expect("mixed");
    assert_eq!((p.experts, p.shared_experts, p.attention, p.dense_ffn), (Dtype::Fp8, Dtype::Bf16, Dtype::Bf16, Dtype::Bf16));
    assert_eq!(m.checkpoint, Some(Dtype::Fp8), "a MoE checkpoint is named by its experts");
}

#[test]
fn llama4_interleaves_its_moe_layers_and_chunks_three_layers_in_four() {
    let scout = catalog("llama-4-scout").expect("scout");
    assert_eq!(scout.arch, "llama4");
    assert_eq!((scout.layers, scout.dense_layers, scout.moe_layers()), (48, 0, 48));
    // Every fourth layer is NoPE global attention; the rotary ones attend within 8,192-token chunks.
    assert_eq!((scout.layer_counts.full, scout.layer_counts.sliding, scout.sliding_window), (12, 36, Some(8192)));
    let m = scout.moe.expect("experts");
    assert_eq!((m.experts, m.top_k, m.shared_experts, m.expert_ffn, m.shared_ffn), (16, 1, 1, 8192, 8192));
    let maverick = catalog("llama-4-maverick").expect("maverick");
    assert_eq!(
        (maverick.dense_layers, maverick.moe_layers(), maverick.ffn),
        (24, 24, 16384),
        "every other layer dense, intermediate_size_mlp wide"
    );
    let edited = |edit: Edit| {
        let mut cfg = json(include_str!("../../data/models/llama-4-maverick.json"));
        edit(cfg["text_config"].as_object_mut().expect("text_config"));
        from_hf_config(&cfg.to_string(), "m.json")
    };
    let listed = edited(&|t| {
        t.insert("moe_layers".into(), serde_json::json!([1, 3, 5]));
    })
    .expect("moe_layers");
    assert_eq!(listed.dense_layers, 45, "moe_layers places the MoE layers when given");
    let marks: Vec<u32> = (0..48).map(|i| u32::from(i % 2 == 0)).collect();
    let nope = edited(&|t| {
        t.insert("no_rope_layers".into(), serde_json::json!(marks));
    })
    .expect("no_rope_layers");
    assert_eq!((nope.layer_counts.full, nope.layer_counts.sliding), (24, 24), "no_rope_layers marks the chunked (rotary) layers");
    let global = edited(&|t| {
        t.insert("attention_chunk_size".into(), Value::Null);
    })
    .expect("no chunks");
    assert_eq!((global.layer_counts.full, global.sliding_window), (48, None), "without a chunk size every layer is global");
    // Newer transformers write the layer kinds out, the chunked ones as "chunked_attention".
    let kinds: Vec<&str> = (0..48).map(|i| if (i + 1) % 4 == 0 { "full_attention" } else { "chunked_attention" }).collect();
    let written = edited(&|t| {
        t.insert("layer_types".into(), serde_json::json!(kinds));
    })
    .expect("layer_types");
    assert_eq!((written.layer_counts.full, written.layer_counts.sliding, written.sliding_window), (12, 36, Some(8192)));
    let empty = edited(&|t| {
        t.insert("no_rope_layers".into(), serde_json::json!([]));
    })
    .expect("an empty no_rope_layers");
    assert_eq!(empty.layer_counts, maverick.layer_counts, "an empty list is the default interval, as transformers reads it");
    let bare = edited(&|t| {
        t.remove("intermediate_size_mlp");
    })
    .expect("no intermediate_size_mlp");
    assert_eq!(bare.ffn, 16_384, "transformers' default");
    let refusals: [(Edit, &str); 4] = [
        (&|t| drop(t.insert("no_rope_layers".into(), serde_json::json!([1, 0]))), "field \"no_rope_layers\" must hold one 0 (NoPE) or 1"),
        (&|t| drop(t.insert("interleave_moe_layer_step".into(), serde_json::json!(0))), "\"interleave_moe_layer_step\" is 0"),
        (&|t| drop(t.insert("moe_layers".into(), serde_json::json!([48]))), "field \"moe_layers\" holds 48"),
        (&|t| drop(t.insert("layer_types".into(), serde_json::json!(["chunked_attention"]))), "\"layer_types\" has 1 entries"),
    ];
    for (edit, want) in refusals {
        let e = edited(edit).expect_err(want);
        assert!(e.to_string().contains(want), "{e}");
    }
}

#[test]
fn qwen3_vl_language_models_read_as_qwen3() {
    let moe = from_hf_config(include_str!("../../tests/configs/Qwen--Qwen3-VL-235B-A22B-Instruct.json"), "v.json").expect("VL MoE");
    assert_eq!(moe.arch, "qwen3_moe");
    assert!(within(moe.params().total, 235e9, 0.02), "{}", moe.params().total / 1e9);
    let dense = from_hf_config(include_str!("../../tests/configs/Qwen--Qwen3-VL-8B-Instruct.json"), "v.json").expect("VL dense");
    assert_eq!((dense.arch.as_str(), dense.moe), ("qwen3", None));
}

#[test]
fn glm_5_2_runs_its_dsa_indexer_only_in_its_full_indexer_layers() {
    let text = include_str!("../../data/models/glm-5.2.json");
    let m = from_hf_config(text, "g.json").expect("GLM-5.2");
    let cfg = json(text);
    let types = cfg["indexer_types"].as_array().expect("indexer_types");
    let full = types.iter().filter(|t| *t == "full").count() as u32;
    assert!(full > 0 && full < m.layers, "{full} of {}", m.layers);
    assert_eq!(m.dsa.expect("dsa").indexer_layers, full);
    assert!((m.indexer_share() - full as f64 / m.layers as f64).abs() < 1e-12);
    // Without the list (and its frequency) every layer would run it and hold its weights.
    let mut every = cfg.clone();
    let o = every.as_object_mut().expect("object");
    o.remove("indexer_types");
    o.remove("index_topk_freq");
    let every = from_hf_config(&every.to_string(), "g.json").expect("every layer");
    assert_eq!(every.dsa.expect("dsa").indexer_layers, every.layers);
    assert!(every.params().attention > m.params().attention);
    // NVIDIA's NVFP4 export names its layers deepseek_sparse_attention: full attention.
    let nv = from_hf_config(include_str!("../../tests/configs/nvidia--GLM-5.2-NVFP4.json"), "n.json").expect("GLM-5.2 NVFP4");
    assert_eq!((nv.layer_counts.full, nv.dsa.expect("dsa").indexer_layers, nv.checkpoint), (nv.layers, full, Some(Dtype::Nvfp4)));
    let refused = |edit: Edit, want: &str| {
        let mut c = cfg.clone();
        edit(c.as_object_mut().expect("object"));
        let e = from_hf_config(&c.to_string(), "g.json").expect_err(want);
        assert!(e.to_string().contains(want), "{e}");
    };
    refused(&|o| drop(o.remove("indexer_types")), "field \"index_topk_freq\" is 4, but no \"indexer_types\"");
    refused(&|o| o["indexer_types"][5] = "sparse".into(), "entry 5 is \"sparse\", which servetune does not understand");
    refused(&|o| o["indexer_types"][0] = "shared".into(), "entry 0 is \"shared\" before any \"full\" layer");
    refused(&|o| drop(o.insert("indexer_types".into(), serde_json::json!(["full"]))), "has 1 entries but \"num_hidden_layers\" is 78");
    // A model without an indexer has no sparse-attention layers.
    let e =
        from_hf_config(&llama_with(&format!(r#","layer_types":{}"#, serde_json::json!(vec!["deepseek_sparse_attention"; 32]))), "c.json")
            .expect_err("not DSA");
    assert!(e.to_string().contains("entry 0 is \"deepseek_sparse_attention\", which servetune does not understand"), "{e}");
    // Nor does a lone index_topk make one: the indexer needs its heads and dimension too.
    let lone = llama_with(&format!(r#","index_topk":2048,"layer_types":{}"#, serde_json::json!(vec!["deepseek_sparse_attention"; 32])));
    assert!(from_hf_config(&lone, "c.json").is_err());
}

#[test]
fn every_fixture_config_parses_or_is_refused_by_a_named_field() {
    let fixtures: [(&str, &str); 9] = [
        (
            "meta-llama--Llama-4-Scout-17B-16E-Instruct.json",
            include_str!("../../tests/configs/meta-llama--Llama-4-Scout-17B-16E-Instruct.json"),
        ),
        (
            "meta-llama--Llama-4-Maverick-17B-128E-Instruct.json",
            include_str!("../../tests/configs/meta-llama--Llama-4-Maverick-17B-128E-Instruct.json"),
        ),
        ("nvidia--Qwen3.6-35B-A3B-NVFP4.json", include_str!("../../tests/configs/nvidia--Qwen3.6-35B-A3B-NVFP4.json")),
        ("nvidia--Qwen3.6-27B-NVFP4.json", include_str!("../../tests/configs/nvidia--Qwen3.6-27B-NVFP4.json")),
        ("Qwen--Qwen3-VL-235B-A22B-Instruct.json", include_str!("../../tests/configs/Qwen--Qwen3-VL-235B-A22B-Instruct.json")),
        ("Qwen--Qwen3-VL-8B-Instruct.json", include_str!("../../tests/configs/Qwen--Qwen3-VL-8B-Instruct.json")),
        ("Qwen--Qwen3-32B-FP8-Static-PerTensor.json", include_str!("../../tests/configs/Qwen--Qwen3-32B-FP8-Static-PerTensor.json")),
        ("nvidia--GLM-5.2-NVFP4.json", include_str!("../../tests/configs/nvidia--GLM-5.2-NVFP4.json")),
        (
            "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json",
            include_str!("../../tests/configs/nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json"),
        ),
    ];
    for (name, text) in fixtures {
        match from_hf_config(text, name) {
            Ok(m) => assert!(m.params().total > 1e9, "{name}: {} parameters", m.params().total),
            Err(e) => assert!(e.to_string().starts_with(&format!("{name}: field \"")), "{name}: {e}"),
        }
    }
}

#[test]
fn a_checkpoints_declared_kv_cache_format_is_read_from_its_quantization_config() {
    use crate::quant::KvDtype;
    let read = |text: &str| from_hf_config(text, "c.json").expect("parses").kv_declared;
    // NVIDIA's NVFP4 exports declare an 8-bit float cache; an older ModelOpt FP8 export names it.
    assert_eq!(read(include_str!("../../tests/configs/nvidia--GLM-5.2-NVFP4.json")), Some(KvDtype::Fp8));
    assert_eq!(read(include_str!("../../tests/configs/Qwen--Qwen3-32B-FP8-Static-PerTensor.json")), Some(KvDtype::Fp8));
    // Moonshot's INT4 checkpoint states a null scheme inside its text_config: no KV
    // quantization, the model's BF16; and its weights are read from there too.
    let kimi = from_hf_config(include_str!("../../data/models/kimi-k2.5.json"), "k.json").expect("Kimi-K2.5");
    assert_eq!((kimi.kv_declared, kimi.checkpoint), (Some(KvDtype::Bf16), Some(Dtype::Int4)));
    // No quantization_config, or one silent about the cache: the checkpoint's format decides.
    assert_eq!(read(&llama_with("")), None);
    assert_eq!(read(&llama_with(r#","quantization_config":{"quant_method":"fp8","weight_block_size":[128,128]}"#)), None);
    assert_eq!(
        read(&llama_with(r#","quantization_config":{"quant_method":"modelopt","quant_algo":"FP8","kv_cache_quant_algo":"FP8"}"#)),
        Some(KvDtype::Fp8)
    );
    assert_eq!(
        read(&llama_with(r#","quantization_config":{"quant_method":"modelopt","quant_algo":"FP8","kv_cache_quant_algo":null}"#)),
        Some(KvDtype::Bf16)
    );
    // A cache servetune does not model (8-bit integer) is not taken as FP8.
    let int8 = r#","quantization_config":{"quant_method":"compressed-tensors","config_groups":{"g":{"weights":{"num_bits":8,"type":"float","strategy":"tensor"},"targets":["Linear"]}},"kv_cache_scheme":{"num_bits":8,"type":"int"}}"#;
    assert_eq!(read(&llama_with(int8)), None);
    // ModelOpt's spellings of the FP8 cache, and a float bit count.
    assert_eq!(
        read(&llama_with(r#","quantization_config":{"quant_method":"modelopt","quant_algo":"FP8","kv_cache_quant_algo":"FP8_E4M3"}"#)),
        Some(KvDtype::Fp8)
    );
    let float_bits = r#","quantization_config":{"quant_method":"modelopt","quant_algo":"NVFP4","kv_cache_quant_algo":"NVFP4","kv_cache_scheme":{"num_bits":8.0,"type":"float"}}"#;
    assert_eq!(read(&llama_with(float_bits)), Some(KvDtype::Fp8), "an unmodelled algo does not hide the scheme");
}

/// Gemma 4's full-attention layers have their own shape: 26B-A4B's 5 full layers (every sixth)
/// have 2 KV heads of 512 whose keys give the values (no value projection), its 25 sliding layers
/// 8 KV heads of 256 over a 1,024-token window. Each layer runs its dense MLP (2,112 wide, read
/// as one shared expert) beside 128 experts of 704, top 8. The counts match Google's model card
/// (25.2B total, 3.8B active); the 31B is dense (30.7B with its 1.4B tied embeddings).
#[test]
fn gemma_4_reads_its_full_layers_own_shape_and_its_mlp_beside_the_experts() {
    let moe = catalog("gemma-4-26b-a4b").expect("catalog");
    print_counts("gemma-4-26b-a4b", &moe);
    assert_eq!(moe.arch, "gemma4");
    assert_eq!((moe.layer_counts, moe.sliding_window), (LayerCounts { full: 5, sliding: 25, linear: 0 }, Some(1024)));
    assert!(matches!(moe.attention, Attention::Gqa { heads: 16, kv_heads: 8, head_dim: 256, .. }), "{:?}", moe.attention);
    assert_eq!(moe.global_attention, Some(GlobalAttention { kv_heads: 2, head_dim: 512, k_eq_v: true }));
    let m = moe.moe.expect("experts");
    assert_eq!((m.experts, m.top_k, m.expert_ffn, m.shared_experts, m.shared_ffn), (128, 8, 704, 1, 2112));
    assert_eq!((moe.dense_layers, moe.moe_layers(), moe.tied_embeddings), (0, 30, true));
    // A sliding layer: q, k, v and o of 16 x 256 or 8 x 256; a full one: q and o of 16 x 512, k of 2 x 512.
    let h = 2816.0;
    assert_eq!(moe.attention_params_per_layer(), h * (4096.0 + 2.0 * 2048.0 + 4096.0));
    assert_eq!(moe.full_attention_params_per_layer(), h * (8192.0 + 1024.0 + 8192.0));
    assert_eq!(moe.full_head_dim_ratio(), 2.0);
    let p = moe.params();
    assert!(within(p.total, 25.2e9, 0.01), "total {:.2}B", p.total / 1e9);
    assert!(within(p.active, 3.8e9, 0.02), "active {:.2}B", p.active / 1e9);
    let dense = catalog("gemma-4-31b").expect("catalog");
    print_counts("gemma-4-31b", &dense);
    assert_eq!((dense.moe, dense.dense_layers, dense.ffn), (None, 60, 21504));
    assert_eq!(dense.layer_counts, LayerCounts { full: 10, sliding: 50, linear: 0 });
    assert_eq!(dense.global_attention, Some(GlobalAttention { kv_heads: 4, head_dim: 512, k_eq_v: true }));
    assert_eq!(dense.checkpoint, Some(crate::quant::Dtype::Nvfp4), "NVIDIA's NVFP4 export is the catalog's config");
    assert!(within(dense.params().total, 30.7e9, 0.01), "total {:.2}B", dense.params().total / 1e9);
}

/// Without `attention_k_eq_v` a full layer keeps the sliding layers' KV heads at its own head
/// dimension and a value projection; with the same shape it has none of its own. Per-Layer
/// Embeddings, KV-shared layers, a missing `layer_types` and bad global fields are refused by name.
#[test]
fn gemma_4_variants_and_refusals_name_their_fields() {
    let base: Value = serde_json::from_str(include_str!("../../data/models/gemma-4-26b-a4b.json")).expect("json");
    let with = |edit: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let mut v = base.clone();
        edit(v["text_config"].as_object_mut().expect("text_config"));
        from_hf_config(&v.to_string(), "g4.json")
    };
    let plain = with(&|t| {
        t.insert("attention_k_eq_v".into(), Value::Bool(false));
    })
    .expect("no k_eq_v");
    assert_eq!(plain.global_attention, Some(GlobalAttention { kv_heads: 8, head_dim: 512, k_eq_v: false }));
    assert_eq!(plain.full_attention_params_per_layer(), 2816.0 * (8192.0 + 2.0 * 4096.0 + 8192.0));
    let same = with(&|t| {
        t.insert("attention_k_eq_v".into(), Value::Bool(false));
        t.insert("global_head_dim".into(), Value::from(256));
    })
    .expect("one shape");
    assert_eq!(same.global_attention, None);
    let dense = with(&|t| {
        t.insert("enable_moe_block".into(), Value::Bool(false));
    })
    .expect("dense");
    assert_eq!((dense.moe, dense.dense_layers, dense.ffn), (None, 30, 2112));
    for (edit, want) in [
        (
            &(|t: &mut serde_json::Map<String, Value>| {
                t.insert("hidden_size_per_layer_input".into(), Value::from(256));
            }) as &dyn Fn(&mut serde_json::Map<String, Value>),
            "\"hidden_size_per_layer_input\" is 256",
        ),
        (
            &|t| {
                t.insert("num_kv_shared_layers".into(), Value::from(20));
            },
            "\"num_kv_shared_layers\" is 20",
        ),
        (
            &|t| {
                t.remove("layer_types");
            },
            "needs the field \"layer_types\"",
        ),
        (
            &|t| {
                t.insert("num_global_key_value_heads".into(), Value::from(3));
            },
            "\"num_global_key_value_heads\" is 3",
        ),
        (
            &|t| {
                t.insert("global_head_dim".into(), Value::from(0));
            },
            "\"global_head_dim\" is 0",
        ),
        (
            &|t| {
                t.insert("attention_k_eq_v".into(), Value::from("yes"));
            },
            "\"attention_k_eq_v\" is \"yes\"",
        ),
        (
            &|t| {
                t.insert("enable_moe_block".into(), Value::from(1));
            },
            "\"enable_moe_block\" is 1",
        ),
        (
            &|t| {
                t.remove("top_k_experts");
            },
            "needs the field \"top_k_experts\"",
        ),
    ] {
        let e = with(edit).expect_err(want);
        assert!(e.to_string().contains(want), "{e} lacks {want}");
    }
}

/// `--model` takes a catalog name or the Hugging Face repository of a checkpoint the catalog lists,
/// in any letter case, and the repository names that checkpoint's format; the entry's config
/// repository that is no checkpoint's names no format. Each entry lists one checkpoint per format,
/// so the launch script's repository for the named format is the one the user named.
#[test]
fn a_model_is_named_by_its_catalog_name_or_a_listed_checkpoints_repository() {
    let named = named_model("glm-5").expect("a catalog name");
    assert_eq!((named.entry.name.as_str(), named.checkpoint), ("glm-5", None));
    let mut repos = 0;
    for name in catalog_names() {
        let entry = catalog_entry(name).expect("entry");
        let formats: std::collections::BTreeSet<&str> = entry.checkpoints.iter().map(|c| c.quant.name()).collect();
        assert_eq!(formats.len(), entry.checkpoints.len(), "{name}: one checkpoint per format");
        for c in &entry.checkpoints {
            let Some(repo) = c.repository() else { continue };
            for spelled in [repo.to_string(), repo.to_lowercase(), repo.to_uppercase(), format!(" {repo}/")] {
                let n = named_model(&spelled).unwrap_or_else(|e| panic!("{spelled}: {e}"));
                assert_eq!((n.entry.name.as_str(), n.checkpoint), (name, Some(c.quant)), "{spelled}");
            }
            repos += 1;
        }
    }
    assert!(repos >= 30, "the catalog lists {repos} checkpoint repositories");
    assert_eq!(named_model("GLM-5").expect("any letter case").entry.name, "glm-5");
    // Refused: a release of a catalog architecture the catalog does not list, the repository Qwen3-Next's config was
    // read from (no listed checkpoint: the launch script would serve another), a checkpoint the
    // catalog describes in words (Kimi-K2's INT4, written as prose), and what is no repository.
    let kimi_words = catalog_entry("kimi-k2").expect("kimi").checkpoints[1].repo.clone();
    assert!(kimi_words.contains(' '), "kimi-k2's INT4 checkpoint is described in words: {kimi_words}");
    for bad in [
        "deepseek-ai/DeepSeek-V3-Base",
        "Qwen/Qwen3-Next-80B-A3B-Thinking",
        &kimi_words,
        "zai-org",
        "zai-org/GLM-5-FP8/extra",
        "",
        "/models/GLM-5-FP8",
    ] {
        let e = named_model(bad).expect_err(bad).to_string();
        assert!(e.contains(&format!("{bad:?} is not in the model catalog: give a catalog name (glm-5,")), "{bad}: {e}");
    }
}

/// The releases the catalog lists with another model's config (DeepSeek-R1 with DeepSeek-V3's,
/// Llama 3.3 70B with Llama 3.1 70B's): each is named by its own repositories and launched with
/// them, reads exactly its architecture's model (the same spec, its own name), and says whose
/// config it reads. An entry that shares no file says nothing.
#[test]
fn a_release_with_another_models_architecture_reads_that_config_and_says_so() {
    let mut shared = 0;
    for name in catalog_names() {
        let entry = catalog_entry(name).expect("entry");
        let first =
            catalog_names().into_iter().map(|n| catalog_entry(n).expect("entry")).find(|e| e.config == entry.config).expect("itself");
        let Some(owner) = architecture_of(entry) else {
            assert_eq!(first.name, entry.name, "{name} reads {}'s file", first.name);
            continue;
        };
        assert_eq!(owner.name, first.name, "{name}: the entry that owns the file is the first to read it");
        assert_eq!(architecture_of(owner), None, "{name}: {} reads a file of its own", owner.name);
        shared += 1;
        let note = entry.note.as_deref().unwrap_or_else(|| panic!("{name} reads {}'s config and says nothing", owner.name));
        assert!(note.contains(&entry.config), "{name}: the note names the file it reads: {note}");
        assert_eq!(entry.repo, owner.repo, "{name}: the config's repository is the owner's");
        let (mut mine, theirs) = (catalog(name).expect("config"), catalog(&owner.name).expect("config"));
        assert_eq!(mine.name, name);
        mine.name = theirs.name.clone();
        assert_eq!(mine, theirs, "{name}: {}'s architecture", owner.name);
        for c in entry.checkpoints.iter().filter_map(|c| c.repository().map(|r| (r, c.quant))) {
            let n = named_model(c.0).expect("its repository names it");
            assert_eq!((n.entry.name.as_str(), n.checkpoint), (name, Some(c.1)), "{}", c.0);
        }
    }
    assert!(shared >= 7, "{shared} releases share a config");
    let r1 = named_model("deepseek-ai/DeepSeek-R1-0528").expect("R1-0528");
    assert_eq!((r1.entry.name.as_str(), r1.checkpoint), ("deepseek-r1-0528", Some(Dtype::Fp8)));
    assert_eq!(named_model("meta-llama/Llama-3.3-70B-Instruct").expect("Llama 3.3").entry.name, "llama-3.3-70b");
    assert_eq!(catalog_entry("glm-5").expect("glm").note, None);
}

/// The families read since stop 56 (docs/reference.md, "More architectures"): each published
/// config's sizes (as the model's config.json states them) give its published parameter counts,
/// and the fields that differ from the families they resemble are read as their config classes
/// define them: Ministral 3's and Seed-OSS's 128-wide heads when the file leaves head_dim out,
/// OLMo 3's three sliding layers in four, ERNIE 4.5's expert field names and its first dense
/// layer, Ling's shared-expert width, GLM-4.5V's language model as GLM-4.5-Air's.
#[test]
fn newer_families_match_their_published_parameter_counts() {
    let read = |cfg: &str| from_hf_config(cfg, "c.json").unwrap_or_else(|e| panic!("{e}\n{cfg}"));
    // (name, config, total, active with embeddings and head, tolerance)
    let cases: &[(&str, String, f64, Option<f64>, f64)] = &[
        // Mistral AI's Ministral 3 cards: "13.5B" and "3.4B" language models beside a 0.4B vision
        // encoder (not modelled); the 3B ties its embeddings, and its 3072 / 32 heads would be 96 wide.
        (
            "ministral-3-14b",
            r#"{"model_type":"mistral3","text_config":{"model_type":"ministral3","hidden_size":5120,"num_hidden_layers":40,"num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":16384,"vocab_size":131072,"tie_word_embeddings":false,"max_position_embeddings":262144,"sliding_window":null}}"#.into(),
            13.5e9,
            None,
            0.01,
        ),
        (
            "ministral-3-3b",
            r#"{"model_type":"mistral3","text_config":{"model_type":"ministral3","hidden_size":3072,"num_hidden_layers":26,"num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":9216,"vocab_size":131072,"tie_word_embeddings":true}}"#.into(),
            3.43e9,
            None,
            0.01,
        ),
        // Seed-OSS-36B: 36,151,104,512 parameters in its safetensors index; q, k and v biased.
        (
            "seed-oss-36b",
            r#"{"model_type":"seed_oss","hidden_size":5120,"num_hidden_layers":64,"num_attention_heads":80,"num_key_value_heads":8,"head_dim":128,"intermediate_size":27648,"vocab_size":155136,"tie_word_embeddings":false,"attention_bias":true,"max_position_embeddings":524288}"#.into(),
            36.151e9,
            None,
            0.002,
        ),
        // OLMo-2-0425-1B: "1.48B"; OLMo 3 7B and 32B.
        (
            "olmo-2-1b",
            r#"{"model_type":"olmo2","hidden_size":2048,"num_hidden_layers":16,"num_attention_heads":16,"num_key_value_heads":16,"intermediate_size":8192,"vocab_size":100352,"tie_word_embeddings":false}"#.into(),
            1.48e9,
            None,
            0.01,
        ),
        (
            "olmo-3-32b",
            r#"{"model_type":"olmo3","hidden_size":5120,"num_hidden_layers":64,"num_attention_heads":40,"num_key_value_heads":8,"intermediate_size":27648,"vocab_size":100278,"tie_word_embeddings":false,"max_position_embeddings":65536}"#.into(),
            32.2e9,
            None,
            0.01,
        ),
        // OLMoE-1B-7B-0924: 6.9B total, 1.3B active (the OLMoE paper); every layer MoE.
        (
            "olmoe-1b-7b",
            r#"{"model_type":"olmoe","hidden_size":2048,"num_hidden_layers":16,"num_attention_heads":16,"num_key_value_heads":16,"intermediate_size":1024,"num_experts":64,"num_experts_per_tok":8,"vocab_size":50304,"tie_word_embeddings":false}"#.into(),
            6.9e9,
            Some(1.28e9),
            0.01,
        ),
        // ERNIE-4.5-21B-A3B: 21,825,437,888 parameters in its safetensors (with the fp32 routers);
        // layer 0 dense, two shared experts, tied embeddings by the class's default.
        (
            "ernie-4.5-21b-a3b",
            r#"{"model_type":"ernie4_5_moe","hidden_size":2560,"num_hidden_layers":28,"num_attention_heads":20,"num_key_value_heads":4,"intermediate_size":12288,"moe_intermediate_size":1536,"moe_num_experts":64,"moe_k":6,"moe_num_shared_experts":2,"moe_layer_start_index":1,"moe_layer_interval":1,"vocab_size":103424,"max_position_embeddings":131072}"#.into(),
            21.825e9,
            Some(3.35e9),
            0.005,
        ),
        // Ling-mini-2.0: "1.43B activated of 16.26B"; Ling-flash-2.0: 103B, 6.1B active.
        (
            "ling-mini-2.0",
            r#"{"model_type":"bailing_moe","hidden_size":2048,"num_hidden_layers":20,"num_attention_heads":16,"num_key_value_heads":4,"head_dim":128,"intermediate_size":5120,"vocab_size":157184,"tie_word_embeddings":false,"num_experts":256,"num_experts_per_tok":8,"moe_intermediate_size":512,"num_shared_experts":1,"moe_shared_expert_intermediate_size":512,"first_k_dense_replace":1}"#.into(),
            16.26e9,
            Some(1.43e9),
            0.005,
        ),
        (
            "ling-flash-2.0",
            r#"{"model_type":"bailing_moe_v2","hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":4,"head_dim":128,"intermediate_size":9216,"vocab_size":157184,"tie_word_embeddings":false,"num_experts":256,"num_experts_per_tok":8,"moe_intermediate_size":1024,"num_shared_experts":1,"first_k_dense_replace":1}"#.into(),
            102.9e9,
            Some(6.15e9),
            0.01,
        ),
        // GLM-4.5V's language model (its tensors less the vision tower: 106,852,251,264).
        (
            "glm-4.5v",
            r#"{"model_type":"glm4v_moe","text_config":{"model_type":"glm4v_moe_text","hidden_size":4096,"num_hidden_layers":46,"num_attention_heads":96,"num_key_value_heads":8,"head_dim":128,"intermediate_size":10944,"moe_intermediate_size":1408,"n_routed_experts":128,"n_shared_experts":1,"num_experts_per_tok":8,"first_k_dense_replace":1,"attention_bias":true,"partial_rotary_factor":0.5,"vocab_size":151552,"tie_word_embeddings":false,"max_position_embeddings":65536}}"#.into(),
            106.852e9,
            None,
            0.002,
        ),
    ];
    for (name, cfg, total, active, tol) in cases {
        let p = read(cfg).params();
        assert!(within(p.total, *total, *tol), "{name}: total {:.3}B vs {:.3}B", p.total / 1e9, total / 1e9);
        if let Some(a) = active {
            assert!(within(p.active, *a, 0.02), "{name}: active {:.3}B vs {:.3}B", p.active / 1e9, a / 1e9);
        }
    }
    let head_dim = |cfg: &str| match read(cfg).attention {
        Attention::Gqa { head_dim, .. } => head_dim,
        a => panic!("{a:?}"),
    };
    assert_eq!(head_dim(&cases[1].1), 128, "Ministral 3's class default, not 3072 / 32");
    let olmo3 = read(&cases[4].1);
    assert_eq!(
        (olmo3.layer_counts.full, olmo3.layer_counts.sliding, olmo3.sliding_window),
        (16, 48, Some(4096)),
        "OLMo 3 without layer_types: every fourth layer full, the class's 4,096-token window"
    );
    let listed = cases[4].1.replace(
        r#""max_position_embeddings":65536"#,
        &format!(r#""sliding_window":2048,"layer_types":[{}]"#, vec![r#""full_attention""#; 64].join(",")),
    );
    assert_eq!((read(&listed).layer_counts.sliding, read(&listed).sliding_window), (0, None), "a listed layer_types wins");
    // OLMo's q/k norm spans the whole projections (gathered under TP); the other families' not.
    for (i, (name, cfg, ..)) in cases.iter().enumerate() {
        assert_eq!(read(cfg).qk_norm_gathered, name.starts_with("olmo"), "{name} (case {i})");
    }
    let ernie = read(&cases[6].1);
    assert_eq!((ernie.dense_layers, ernie.tied_embeddings), (1, true), "ERNIE: layer 0 dense, embeddings tied");
    let every_other = cases[6].1.replace(r#""moe_layer_interval":1"#, r#""moe_layer_interval":2,"moe_layer_end_index":-1"#);
    assert_eq!(read(&every_other).dense_layers, 14, "MoE where (i + 1) % 2 == 0 from layer 1: 14 of 28");
    let moe = ernie.moe.expect("moe");
    assert_eq!((moe.experts, moe.top_k, moe.shared_experts, moe.shared_ffn), (64, 6, 2, 3072));
    let ling = read(&cases[7].1).moe.expect("moe");
    assert_eq!((ling.shared_experts, ling.shared_ffn), (1, 512));
    assert_eq!(read(&cases[9].1).arch, "glm4_moe", "GLM-4.5V's language model is read as GLM-4.5's");
    let e =
        from_hf_config(&cases[6].1.replace(r#""moe_layer_interval":1"#, r#""moe_layer_interval":0"#), "e.json").expect_err("interval 0");
    assert!(e.to_string().contains("e.json: field \"moe_layer_interval\" is 0"), "{e}");
    // Seed-OSS without head_dim or attention_bias: the class's 128-wide, biased heads.
    let seed = read(&cases[2].1.replace(r#""head_dim":128,"#, "").replace(r#","attention_bias":true"#, ""));
    assert!(matches!(seed.attention, Attention::Gqa { head_dim: 128, bias: true, .. }), "{:?}", seed.attention);
    // Ling without shared experts has none; a MoBA sparse-attention checkpoint is refused by name.
    let no_shared = read(&cases[7].1.replace(r#""num_shared_experts":1"#, r#""num_shared_experts":0"#)).moe.expect("moe");
    assert_eq!((no_shared.shared_experts, no_shared.shared_ffn), (0, 0));
    let moba = cases[7].1.replace(r#""first_k_dense_replace":1"#, r#""first_k_dense_replace":1,"moba_block_size":4096"#);
    let e = from_hf_config(&moba, "r.json").expect_err("moba").to_string();
    assert!(e.contains("r.json: field \"moba_block_size\" is set"), "{e}");
    // GLM-4.1V's language model is GLM-4's (dense): 40 layers, 32 heads of 128, 2 KV heads.
    let glm41v = read(
        r#"{"model_type":"glm4v","text_config":{"model_type":"glm4v_text","hidden_size":4096,"num_hidden_layers":40,"num_attention_heads":32,"num_key_value_heads":2,"intermediate_size":13696,"attention_bias":true,"vocab_size":151552,"tie_word_embeddings":false,"max_position_embeddings":65536}}"#,
    );
    assert_eq!((glm41v.arch.as_str(), glm41v.moe.is_none(), glm41v.layers), ("glm4", true, 40));
    assert!(matches!(glm41v.attention, Attention::Gqa { head_dim: 128, kv_heads: 2, bias: true, .. }), "{:?}", glm41v.attention);
}

/// IBM Granite 4.0 (`granitemoehybrid`, docs/reference.md "More architectures"): Mamba-2 and
/// attention layers by `layer_types`, each followed by its FFN (72 experts of 768 beside a 1,536
/// shared MLP in H-Small; the shared MLP alone in H-Micro), Mamba-2 sizes under Granite's names,
/// and heads hidden / heads wide. H-Small's count equals its published 32,207,337,984; H-Micro's
/// is IBM's "3B".
#[test]
fn granite_4_hybrids_read_their_mixers_ffns_and_published_counts() {
    let kinds = |attention: &[usize], n: usize| {
        (0..n).map(|i| if attention.contains(&i) { r#""attention""# } else { r#""mamba""# }).collect::<Vec<_>>().join(",")
    };
    let small = format!(
        r#"{{"model_type":"granitemoehybrid","hidden_size":4096,"num_hidden_layers":40,"num_attention_heads":32,"num_key_value_heads":8,"num_local_experts":72,"num_experts_per_tok":10,"intermediate_size":768,"shared_intermediate_size":1536,"mamba_n_heads":128,"mamba_d_head":64,"mamba_d_state":128,"mamba_n_groups":1,"mamba_d_conv":4,"mamba_expand":2,"vocab_size":100352,"tie_word_embeddings":true,"layer_types":[{}]}}"#,
        kinds(&[5, 15, 25, 35], 40)
    );
    let m = from_hf_config(&small, "s.json").expect("h-small");
    assert_eq!((m.layer_counts.full, m.layer_counts.linear, m.dense_layers, m.ffn_free_layers), (4, 36, 0, 0));
    let moe = m.moe.expect("moe");
    assert_eq!((moe.experts, moe.top_k, moe.expert_ffn, moe.shared_experts, moe.shared_ffn), (72, 10, 768, 1, 1536));
    let la = m.linear.expect("mamba");
    assert_eq!((la.mixer, la.key_heads, la.value_heads, la.key_head_dim, la.value_head_dim), (LinearMixer::Mamba2, 1, 128, 128, 64));
    // Granite's attention is hidden / heads wide whatever a head_dim says.
    let stated = from_hf_config(&small.replace(r#""num_key_value_heads":8"#, r#""num_key_value_heads":8,"head_dim":256"#), "s.json");
    assert!(matches!(stated.expect("head_dim").attention, Attention::Gqa { head_dim: 128, .. }), "4096 / 32, not the stated 256");
    let e = from_hf_config(&small.replace(r#""mamba_d_head":64"#, r#""mamba_d_head":32"#), "s.json").expect_err("32").to_string();
    assert!(e.contains("s.json: field \"mamba_d_head\" is 32: mamba_n_heads x mamba_d_head (128 x 32) must equal"), "{e}");
    assert!(within(m.params().total, 32_207_337_984.0, 0.001), "h-small {:.4}B", m.params().total / 1e9);
    // "auto" (or no field) derives the head width from mamba_expand x hidden / heads.
    let auto = small.replace(r#""mamba_d_head":64"#, r#""mamba_d_head":"auto""#);
    assert_eq!(from_hf_config(&auto, "a.json").expect("auto").linear.expect("mamba").value_head_dim, 64);
    let micro = format!(
        r#"{{"model_type":"granitemoehybrid","hidden_size":2048,"num_hidden_layers":40,"num_attention_heads":32,"num_key_value_heads":8,"num_local_experts":0,"num_experts_per_tok":0,"intermediate_size":8192,"shared_intermediate_size":8192,"mamba_n_heads":64,"mamba_d_head":64,"mamba_d_state":128,"mamba_n_groups":1,"mamba_d_conv":4,"vocab_size":100352,"tie_word_embeddings":true,"layer_types":[{}]}}"#,
        kinds(&[5, 15, 25, 35], 40)
    );
    let m = from_hf_config(&micro, "m.json").expect("h-micro");
    assert!(m.moe.is_none() && m.dense_layers == 40 && m.ffn == 8192, "the shared MLP alone in every layer");
    assert!(within(m.params().total, 3.19e9, 0.01), "h-micro {:.3}B", m.params().total / 1e9);
    // Without layer_types every layer is Mamba-2; another kind is refused by name.
    let all_mamba = micro.replace(&format!(r#","layer_types":[{}]"#, kinds(&[5, 15, 25, 35], 40)), "");
    assert_eq!(from_hf_config(&all_mamba, "m.json").expect("all mamba").layer_counts.linear, 40);
    let e = from_hf_config(&micro.replacen(r#""attention""#, r#""moe""#, 1), "m.json").expect_err("unknown kind").to_string();
    assert!(e.contains("m.json: field \"layer_types\" entry 5 is \"moe\"") && e.contains("known: mamba, attention"), "{e}");
    let e = from_hf_config(&auto.replace(r#""mamba_n_heads":128"#, r#""mamba_n_heads":96"#), "a.json").expect_err("96 heads").to_string();
    assert!(e.contains("\"mamba_n_heads\" is 96: it must divide"), "{e}");
}

/// Hunyuan-A13B (Tencent's config.json, `model_type` "hunyuan" there and `hunyuan_v1_moe` in
/// transformers): per-layer lists of one value, 128-wide heads from `attention_head_dim`, 64
/// experts of 3,072, top-8, a shared MLP of 3,072 beside them; Tencent's "80B total, 13B active".
/// Lists that differ between layers and cross-layer attention are refused by name.
#[test]
fn hunyuan_a13b_reads_its_per_layer_lists_and_published_counts() {
    let list = |x: u32| vec![x.to_string(); 32].join(",");
    let cfg = format!(
        r#"{{"model_type":"hunyuan","architectures":["HunYuanMoEV1ForCausalLM"],"hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"attention_head_dim":128,"intermediate_size":3072,"moe_intermediate_size":[{}],"num_experts":64,"moe_topk":[{}],"num_shared_expert":[{}],"use_mixed_mlp_moe":true,"moe_layer_num_skipped":0,"use_cla":false,"cla_share_factor":2,"vocab_size":128167,"tie_word_embeddings":true}}"#,
        list(3072),
        list(8),
        list(1)
    );
    let m = from_hf_config(&cfg, "h.json").expect("hunyuan");
    assert_eq!(m.arch, "hunyuan_v1_moe");
    let moe = m.moe.expect("moe");
    assert_eq!((moe.experts, moe.top_k, moe.expert_ffn, moe.shared_experts, moe.shared_ffn, m.dense_layers), (64, 8, 3072, 1, 3072, 0));
    let p = m.params();
    assert!(within(p.total, 80e9, 0.01), "total {:.2}B", p.total / 1e9);
    assert!(within(p.active, 13e9, 0.03), "active {:.2}B (13B published, rounded)", p.active / 1e9);
    let uneven = cfg.replacen("8,8", "8,4", 1);
    let e = from_hf_config(&uneven, "h.json").expect_err("uneven").to_string();
    assert!(e.contains("h.json: field \"moe_topk\" differs between layers"), "{e}");
    let cla = cfg.replace(r#""use_cla":false"#, r#""use_cla":true"#);
    let e = from_hf_config(&cla, "h.json").expect_err("cla").to_string();
    assert!(e.contains("h.json: field \"use_cla\" is true"), "{e}");
    let dense_first = cfg.replace(r#""moe_layer_num_skipped":0"#, r#""moe_layer_num_skipped":2"#);
    assert_eq!(from_hf_config(&dense_first, "h.json").expect("skipped").dense_layers, 2);
    // The skipped dense layers' entries may differ (an expert width of 1 there); the MoE layers' may not.
    let one_first = dense_first.replacen("[3072,3072", "[1,1", 1);
    assert_eq!(from_hf_config(&one_first, "h.json").expect("dense entries differ").moe.expect("moe").expert_ffn, 3072);
    // Heads as wide as attention_head_dim says (64 here, where 4096 / 32 is 128), under
    // transformers' spelling of the type too.
    let narrow = cfg.replace(r#""attention_head_dim":128"#, r#""attention_head_dim":64"#).replace(r#""hunyuan""#, r#""hunyuan_v1_moe""#);
    assert!(matches!(from_hf_config(&narrow, "h.json").expect("64").attention, Attention::Gqa { head_dim: 64, .. }));
    let short = cfg.replacen("[8,", "[", 1);
    let e = from_hf_config(&short, "h.json").expect_err("31 entries").to_string();
    assert!(e.contains("h.json: field \"moe_topk\" has 31 entries but \"num_hidden_layers\" is 32"), "{e}");
}

#[test]
fn kimi_linear_reads_its_kda_and_mla_layers_and_matches_its_tensor_count() {
    let text = include_str!("../../data/models/kimi-linear-48b-a3b.json");
    let m = from_hf_config(text, "k.json").expect("kimi linear");
    assert_eq!(m.arch, "kimi_linear");
    // 20 KDA layers and 7 MLA layers (4, 8, ..., 24 and 27, numbered from 1); the first dense.
    assert_eq!((m.layer_counts.full, m.layer_counts.linear, m.layer_counts.sliding), (7, 20, 0));
    assert_eq!((m.dense_layers, m.moe_layers()), (1, 26));
    assert_eq!(m.max_context, 1_048_576, "model_max_length stands in for max_position_embeddings");
    let moe = m.moe.expect("moe");
    assert_eq!((moe.experts, moe.top_k, moe.expert_ffn, moe.shared_experts, moe.shared_ffn), (256, 8, 1024, 1, 1024));
    assert!(matches!(
        m.attention,
        Attention::Mla { heads: 32, q_lora_rank: None, kv_lora_rank: 512, qk_nope_head_dim: 128, qk_rope_head_dim: 64, v_head_dim: 128 }
    ));
    let la = m.linear.expect("kda");
    assert_eq!(
        (la.mixer, la.key_heads, la.value_heads, la.key_head_dim, la.value_head_dim, la.conv_kernel),
        (LinearMixer::Kda, 32, 32, 128, 128, 4)
    );
    // Its tensors (a listing of the checkpoint's 20,493 tensors): 39,514,272 per KDA layer,
    // 29,114,880 per MLA layer, 49,122,681,728 in all, of which the routers' 26 x 256 score
    // biases are not modelled.
    assert_eq!(la.params(m.hidden), 39_514_272.0);
    assert_eq!(m.attention_params_per_layer(), 29_114_880.0);
    let p = m.params();
    assert_eq!(p.total, 49_122_681_728.0 - 26.0 * 256.0, "total {}", p.total);
    // Activated: eight routed experts and the shared one per MoE layer, every other weight: 3.48B
    // with the embedding table and the LM head, 3.11B without the table (Moonshot's "3B").
    assert!(within(p.active - p.embeddings, 3.0e9, 0.05), "active {:.3}B without the embedding table", (p.active - p.embeddings) / 1e9);
    // The recurrent state is float32 under both engines unless sglang is told otherwise.
    assert_eq!((la.state_bytes, la.state_bytes_sglang), (4, 4));
    let bf16 = text.replacen("\"dtype\"", "\"mamba_ssm_dtype\": \"bfloat16\", \"dtype\"", 1);
    let la = from_hf_config(&bf16, "k.json").expect("bf16 state").linear.expect("kda");
    assert_eq!((la.state_bytes, la.state_bytes_sglang), (4, 2), "vLLM keeps KDA's state in float32 whatever the config says");
}

#[test]
fn kimi_linear_refuses_bad_layer_lists_sizes_and_kimi_k3s_fields_naming_each() {
    let text = include_str!("../../data/models/kimi-linear-48b-a3b.json");
    for (name, from, to, want) in [
        ("twice", "\"full_attn_layers\": [4,", "\"full_attn_layers\": [3, 4,", "linear_attn_config: layer 3 is listed twice"),
        ("missing", "\"full_attn_layers\": [4,", "\"full_attn_layers\": [", "linear_attn_config: layer 4 is in neither"),
        ("beyond", "24, 27]", "24, 28]", "field \"full_attn_layers\" holds 28, not a layer number from 1 to 27"),
        ("zero", "[1, 2, 3,", "[0, 2, 3,", "field \"kda_layers\" holds 0"),
        ("not a list", "\"kda_layers\": [", "\"kda_layers\": 3, \"x\": [", "field \"kda_layers\" is missing or not a list"),
        ("no heads", "\"num_heads\": 32", "\"num_heads\": 0", "linear_attn_config: field \"num_heads\" is 0"),
        ("no kernel", "\"short_conv_kernel_size\": 4", "\"other\": 4", "field \"short_conv_kernel_size\" is missing"),
        ("no config", "\"linear_attn_config\"", "\"linear_attn_config_x\"", "field \"linear_attn_config\" is missing"),
        // Kimi-K3's language model states kimi_linear with parts that are not modelled.
        ("full-rank gate", "\"num_heads\": 32", "\"num_heads\": 32, \"use_full_rank_gate\": true", "field \"use_full_rank_gate\" is true"),
        (
            "latent experts",
            "\"hidden_size\": 2304",
            "\"hidden_size\": 2304, \"routed_expert_hidden_size\": 1152",
            "field \"routed_expert_hidden_size\" is 1152",
        ),
        (
            "full-rank gate as a number",
            "\"num_heads\": 32",
            "\"num_heads\": 32, \"use_full_rank_gate\": 1",
            "field \"use_full_rank_gate\" is 1",
        ),
        (
            "gated MLA output",
            "\"mla_use_nope\": true",
            "\"mla_use_nope\": true, \"mla_use_output_gate\": true",
            "field \"mla_use_output_gate\" is true",
        ),
        ("another activation", "\"hidden_act\": \"silu\"", "\"hidden_act\": \"situ\"", "field \"hidden_act\" is \"situ\""),
        // Its context length is `model_max_length` (it states no max_position_embeddings).
        (
            "no context",
            "\"model_max_length\": 1048576",
            "\"model_max_length\": 0",
            "field \"model_max_length\" is 0: it must be at least 1",
        ),
        (
            "attention residuals",
            "\"hidden_size\": 2304",
            "\"hidden_size\": 2304, \"attn_res_block_size\": 12",
            "field \"attn_res_block_size\" is set",
        ),
    ] {
        let bad = text.replacen(from, to, 1);
        assert_ne!(bad, text, "{name}: the replacement applies");
        let e = from_hf_config(&bad, "k.json").expect_err(name).to_string();
        assert!(e.starts_with("k.json: ") && e.contains(want), "{name}: {e}");
    }
}

#[test]
fn deepseek_family_moe_layers_follow_first_k_dense_replace_and_moe_layer_freq() {
    let text = include_str!("../../data/models/kimi-linear-48b-a3b.json");
    // Layer i holds experts when i >= first_k_dense_replace and i is a multiple of moe_layer_freq.
    // (26, 4) and (1, 40): no multiple of the frequency in range, so no MoE layer (and no underflow).
    for (first, every, dense) in [(1, 1, 1), (0, 1, 0), (1, 2, 14), (3, 2, 15), (27, 1, 27), (26, 4, 27), (1, 40, 27), (0, 40, 26)] {
        let t = text.replacen("\"first_k_dense_replace\": 1", &format!("\"first_k_dense_replace\": {first}"), 1).replacen(
            "\"moe_layer_freq\": 1",
            &format!("\"moe_layer_freq\": {every}"),
            1,
        );
        let m = from_hf_config(&t, "k.json").expect("layout");
        assert_eq!((m.dense_layers, m.moe_layers()), (dense, 27 - dense), "first {first}, every {every}");
    }
    let zero = text.replacen("\"moe_layer_freq\": 1", "\"moe_layer_freq\": 0", 1);
    let e = from_hf_config(&zero, "k.json").expect_err("0").to_string();
    assert!(e.contains("k.json: field \"moe_layer_freq\" is 0"), "{e}");
}

#[test]
fn a_vision_config_is_read_with_sglangs_defaults_and_its_bad_fields_are_refused() {
    // Gemma 4 states its encoder's layers and width; Qwen3.5 names its layers `depth`, which
    // sglang does not read, so 24; a text model has none.
    let gemma = catalog("gemma-4-31b").expect("gemma").vision;
    assert_eq!(gemma, Some(VisionTower { layers: 27, hidden: 1152 }));
    assert_eq!(catalog("qwen3.5-397b-a17b").expect("qwen").vision, Some(VisionTower { layers: 24, hidden: 1152 }));
    assert_eq!(catalog("llama-3.1-8b").expect("llama").vision, None);
    let empty = from_hf_config(&llama_with(r#","vision_config":{}"#), "v.json").expect("an empty vision config");
    assert_eq!(empty.vision, Some(VisionTower { layers: 24, hidden: 1024 }));
    assert_eq!(from_hf_config(&llama_with(r#","vision_config":null"#), "v.json").expect("null").vision, None);
    // Not an object: no encoder sglang could read either.
    assert_eq!(from_hf_config(&llama_with(r#","vision_config":"x""#), "v.json").expect("a string").vision, None);
    for (bad, shown) in [(r#""wide""#, r#""wide""#), ("-1", "-1"), ("27.5", "27.5"), ("134217728", "134217728")] {
        let text = llama_with(&format!(r#","vision_config":{{"hidden_size":{bad}}}"#));
        let e = from_hf_config(&text, "v.json").expect_err(bad).to_string();
        assert!(e.starts_with(&format!("v.json: vision_config: field \"hidden_size\" is {shown}")), "{e}");
    }
}
