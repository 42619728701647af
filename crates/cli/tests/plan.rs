//! `servetune plan` as a user runs it: the reference story, JSON, what-if, calibration, validation,
//! and bad input.

fn plan(args: &[&str]) -> (i32, String, String) {
    crate::common::run(&std::iter::once("plan").chain(args.iter().copied()).collect::<Vec<_>>())
}

const REF: [&str; 13] = [
    "--model",
    "glm-5",
    "--quant",
    "nvfp4",
    "--gpu",
    "rtx-pro-6000-se",
    "--gpus",
    "8",
    "--link",
    "pcie-host-staged",
    "--tp",
    "8",
    "--explain",
];

#[test]
fn reference_story_explains_every_concurrency_and_names_the_best_fix() {
    let mut args = REF.to_vec();
    args.push("--rank");
    let (code, out, err) = plan(&args);
    assert_eq!(code, 0, "{err}");
    for c in [1, 8, 32, 64, 128, 256] {
        assert!(out.contains(&format!("at concurrency {c}")), "bottleneck at {c} missing:\n{out}");
    }
    assert!(out.contains("156 all-reduces"), "{out}");
    assert!(out.contains("what gains most"), "{out}");
    assert!(out.contains("enable GPU peer-to-peer (P2P)"), "{out}");
    assert!(out.contains("ranked plans on 8 GPUs"), "{out}");
    assert!(out.contains("TP4+PP2"), "{out}");
}

#[test]
fn json_has_the_documented_fields() {
    let dir = tempfile::tempdir().expect("tmp");
    let j = dir.path().join("p.json");
    let mut args = REF.to_vec();
    let js = j.to_string_lossy().to_string();
    args.extend_from_slice(&["--rank", "--json", &js]);
    let (code, _, err) = plan(&args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&j).expect("json")).expect("parse");
    assert_eq!(v["schema"], "servetune.plan/1");
    assert_eq!(v["fits"], true);
    for k in ["weights_gb", "kv_gb", "usable_gb", "capacity_gb"] {
        assert!(v["memory_per_gpu_gb"][k].is_f64(), "{k}");
    }
    assert!(v["max_kv_tokens"].as_u64().unwrap_or(0) > 100_000);
    let pts = v["points"].as_array().expect("points");
    assert_eq!(pts.len(), 6);
    for p in pts {
        for k in ["concurrency", "output_tokens_per_s", "tpot_ms", "ttft_ms", "bottleneck"] {
            assert!(!p[k].is_null(), "{k} in {p}");
        }
        for k in ["weights", "kv", "compute", "communication", "overhead"] {
            assert!(p["step_ms"][k].is_f64(), "step_ms.{k}");
        }
    }
    assert!(v.get("saturation").is_some());
    assert!(v["ranked_plans"].as_array().is_some_and(|r| !r.is_empty()));
}

#[test]
fn what_if_p2p_is_faster_than_host_staged() {
    let mut args = REF.to_vec();
    args.extend_from_slice(&["--vs", "link=pcie5-p2p", "--vs", "tp=4,pp=2"]);
    let (code, out, err) = plan(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("what if link=pcie5-p2p"), "{out}");
    assert!(out.contains("what if tp=4,pp=2"), "{out}");
}

#[test]
fn calibration_fits_a_bench_json_and_prints_residuals() {
    let dir = tempfile::tempdir().expect("tmp");
    let b = dir.path().join("b.json");
    // A measured sweep: 24, 150, 300, 485 tok/s at concurrency 1, 8, 32, 64.
    let runs: Vec<serde_json::Value> = [(1, 24.0), (8, 150.0), (32, 300.0), (64, 485.0)]
        .iter()
        .map(|(c, t)| serde_json::json!({"concurrency": c, "throughput": {"output_tokens_per_s": t}}))
        .collect();
    std::fs::write(&b, serde_json::json!({"schema": "servetune.bench/1", "runs": runs}).to_string()).expect("write");
    let mut args = REF.to_vec();
    let bs = b.to_string_lossy().to_string();
    args.extend_from_slice(&["--calibrate", &bs, "--concurrency", "1,8,32,64"]);
    let (code, out, err) = plan(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("calibration: memory efficiency x"), "{out}");
    assert!(out.contains("c=64: measured 485, predicted"), "{out}");
}

#[test]
fn validate_prints_the_table_with_median_error() {
    let (code, out, err) = plan(&["--validate"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("| case | source | predicted tok/s | measured tok/s | error |"), "{out}");
    assert!(out.contains("Median absolute error"), "{out}");
}

#[test]
fn the_committed_validation_table_matches_the_command() {
    let (code, out, _) = plan(&["--validate"]);
    assert_eq!(code, 0);
    let doc = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../VALIDATION.md")).expect("VALIDATION.md");
    assert!(doc.contains(out.trim()), "VALIDATION.md is stale: rerun `servetune plan --validate` and paste its table");
}

fn usage_error(args: &[&str], needle: &str) {
    crate::common::usage_error("plan", args, needle);
}

#[test]
fn unknown_model_gpu_and_link_list_the_known_ones() {
    usage_error(&["--model", "gpt-9", "--gpu", "h200"], "known: glm-5, deepseek-v3");
    usage_error(&["--model", "glm-5", "--gpu", "v100"], "known: rtx-pro-6000-se");
    usage_error(&["--model", "glm-5", "--gpu", "h200", "--link", "ethernet"], "known: nvlink, pcie5-p2p");
}

#[test]
fn impossible_plan_is_refused() {
    usage_error(
        &["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "4", "--tp", "4", "--pp", "2"],
        "tp x pp = 4 x 2 = 8 GPUs but --gpus is 4",
    );
}

#[test]
fn plan_that_does_not_fit_gives_the_numbers() {
    usage_error(&["--model", "deepseek-v3", "--quant", "bf16", "--gpu", "rtx-4090", "--gpus", "8"], "GB of weights");
}

#[test]
fn model_config_json_is_read_and_bad_ones_name_the_field() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("config.json");
    std::fs::write(&p, r#"{"model_type":"llama","hidden_size":4096,"num_hidden_layers":32,"vocab_size":128256,"num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":14336}"#).expect("write");
    let ps = p.to_string_lossy().to_string();
    let (code, out, err) = plan(&["--model-config", &ps, "--gpu", "h100-sxm", "--gpus", "1", "--concurrency", "1,16"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(8B total"), "{out}");
    std::fs::write(&p, r#"{"model_type":"falcon_mamba","hidden_size":4096}"#).expect("write");
    usage_error(&["--model-config", &ps, "--gpu", "h100-sxm"], "\"model_type\"");
}
