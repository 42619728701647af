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
    assert!(out.contains("157 all-reduces"), "{out}");
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
    assert_eq!(v["schema"], "servetune.plan/1.5");
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
        assert!(p["bottleneck"]["kind"].is_string() && p["bottleneck"]["share"].is_f64(), "typed bottleneck: {p}");
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
    // The interval of a calibrated prediction is the calibrated one, said so.
    assert!(out.contains("(calibrated: the errors of"), "{out}");
}

#[test]
fn validate_reports_the_test_set_first_and_its_median_from_its_rows() {
    let (code, out, err) = plan(&["--validate"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("HEADLINE (test set): median absolute error"), "{out}");
    let (test, fit) = (out.find("### Test set").expect("test rows"), out.find("### Fit set").expect("fit rows"));
    assert!(test < fit, "{out}");
    // The headline median is the median of the test rows' printed errors.
    let mut errs: Vec<f64> = out[test..fit]
        .lines()
        .filter(|l| l.starts_with("| ") && l.ends_with(" |") && !l.starts_with("| case"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            cells[9].trim_end_matches('%').parse::<f64>().expect("error cell").abs()
        })
        .collect();
    assert!(errs.len() >= 20, "{} test rows", errs.len());
    assert!(errs.iter().all(|e| e.is_finite()));
    errs.sort_by(f64::total_cmp);
    let n = errs.len();
    let median = if n % 2 == 1 { errs[n / 2] } else { (errs[n / 2 - 1] + errs[n / 2]) / 2.0 };
    let headline: f64 = out["HEADLINE (test set): median absolute error of output tokens/s = ".len()..]
        .split('%')
        .next()
        .and_then(|x| x.parse().ok())
        .expect("headline number");
    // Printed errors are rounded to 0.1%.
    assert!((headline - median).abs() <= 0.1, "headline {headline} vs median of rows {median}");
    assert!(out.contains(&format!("over {n} held-out cases")), "{out}");
    assert!(out.contains("| fit |") && out.contains("skipped"), "{out}");
}

#[test]
fn validate_json_has_both_sets_and_the_skipped_reasons() {
    let (code, out, err) = plan(&["--validate", "--json", "-"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("pure JSON on stdout");
    assert_eq!(v["schema"], "servetune.validation/2");
    assert_eq!(v["headline_test_median_abs_error"], v["test"]["median_abs_error"]);
    let rows = v["rows"].as_array().expect("rows");
    let skipped: u64 = v["skipped"].as_array().expect("skipped").iter().map(|k| k["count"].as_u64().expect("count")).sum();
    assert_eq!(rows.len() as u64 + skipped, v["total_cases"].as_u64().expect("total"));
    assert!(rows.iter().filter(|r| r["set"] == "test").all(|r| r["error"].as_f64().is_some_and(f64::is_finite)));
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

/// The c=64 row's tok/s of a plan's table.
fn rate_at_64(out: &str) -> f64 {
    let row = out.lines().find(|l| l.split_whitespace().next() == Some("64")).unwrap_or_else(|| panic!("no c=64 row: {out}"));
    row.split_whitespace().nth(1).and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("no rate in {row:?}"))
}

/// The "+N%" of a `--vs` table's c=64 row.
fn vs_change_at_64(out: &str) -> f64 {
    let table = &out[out.find("what if").unwrap_or_else(|| panic!("no what-if: {out}"))..];
    let row = table.lines().find(|l| l.split_whitespace().next() == Some("64")).unwrap_or_else(|| panic!("no c=64 row: {table}"));
    row.split_whitespace().nth(3).and_then(|t| t.trim_end_matches('%').parse().ok()).unwrap_or_else(|| panic!("no change in {row:?}"))
}

#[test]
fn a_measured_nccl_all_reduce_prices_the_plan_on_its_own_box_only() {
    let dir = tempfile::tempdir().expect("tmp");
    let (ar, slow, p2p) = (dir.path().join("ar.json"), dir.path().join("slow.json"), dir.path().join("p2p.json"));
    let (ars, slows, p2ps) = (ar.to_string_lossy().to_string(), slow.to_string_lossy().to_string(), p2p.to_string_lossy().to_string());
    // The simulated box's NCCL is the plan's own model of it, so the plan prices about the same.
    let (code, _, err) = crate::common::run(&["fabric", "allreduce", "--backend", "sim", "--sim-gpus", "8", "--json", &ars]);
    assert_eq!(code, 0, "{err}");
    // A box whose all-reduces take three times as long.
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&ar).expect("read")).expect("json");
    for row in doc["allreduce"][0]["rows"].as_array_mut().expect("rows") {
        row["time_us"] = serde_json::json!(row["time_us"].as_f64().expect("time") * 3.0);
    }
    std::fs::write(&slow, doc.to_string()).expect("write");
    fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        [&REF[..12], &["--concurrency", "1,16,64", "--vs", "link=pcie5-p2p"], extra].concat()
    }
    let (code, model, err) = plan(&args(&[]));
    assert_eq!(code, 0, "{err}");
    let (code, same, err) = plan(&args(&["--allreduce", &ars]));
    assert_eq!(code, 0, "{err}");
    assert!(same.contains("all-reduce: NCCL as measured on the box") && same.contains("8 ranks"), "{same}");
    let (a, b) = (rate_at_64(&model), rate_at_64(&same));
    assert!((b / a - 1.0).abs() < 0.03, "the model's own NCCL measured: {b} against {a}");
    let (code, slower, err) = plan(&args(&["--allreduce", &slows]));
    assert_eq!(code, 0, "{err}");
    assert!(rate_at_64(&slower) < 0.95 * a, "three times the all-reduce time: {} against {a}", rate_at_64(&slower));
    // The measurement prices the host-staged box only: with P2P the model takes over, so the
    // what-if gains more from a slower staged all-reduce.
    assert!(vs_change_at_64(&slower) > vs_change_at_64(&model) + 5.0, "{slower}");
    // A p2p document holds no all-reduce.
    let (code, _, err) = crate::common::run(&["fabric", "p2p", "--backend", "sim", "--sim-gpus", "2", "--json", &p2ps]);
    assert_eq!(code, 0, "{err}");
    usage_error(
        &args(&["--allreduce", &p2ps]),
        "not \"allreduce\": --allreduce takes the document servetune fabric allreduce --json FILE writes",
    );
}

#[test]
fn a_one_point_calibration_scales_the_whole_step_and_is_not_called_an_early_release() {
    let dir = tempfile::tempdir().expect("tmp");
    let b = dir.path().join("b.json");
    let runs = serde_json::json!([{"concurrency": 8, "throughput": {"output_tokens_per_s": 150.0}}]);
    std::fs::write(&b, serde_json::json!({"schema": "servetune.bench/1", "runs": runs}).to_string()).expect("write");
    let bs = b.to_string_lossy().to_string();
    let args = [&REF[..], &["--calibrate", &bs, "--concurrency", "8,64"]].concat();
    let (code, out, err) = plan(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("calibration: every step term x"), "{out}");
    assert!(out.contains("c=8: measured 150, predicted 150"), "{out}");
    assert!(!out.contains("early release"), "{out}");
}

#[test]
fn unknown_model_gpu_and_link_list_the_known_ones() {
    usage_error(&["--model", "gpt-9", "--gpu", "h200"], "\"gpt-9\" is not in the model catalog: give a catalog name (glm-5, deepseek-v3");
    usage_error(&["--model", "glm-5", "--gpu", "tpu-v5e"], "\"tpu-v5e\" is not in the GPU catalog; known: rtx-pro-6000-se");
    usage_error(&["--model", "glm-5", "--gpu", "h200", "--link", "ethernet"], "[possible values: nvlink, pcie5-p2p");
    usage_error(
        &["--model", "glm-5", "--gpu", "NVIDIA H100"],
        "\"NVIDIA H100\" names several GPUs in the catalog: h100-sxm, h100-pcie, h100-nvl;",
    );
    usage_error(&["--model", "glm-5", "--gpu", "h200", "--quant", "fp6"], "[possible values: bf16, fp8, nvfp4, mxfp4, int4]");
}

#[test]
fn help_lists_catalog_values_and_every_flag_has_a_help_line() {
    let (code, out, _) = plan(&["--help"]);
    assert_eq!(code, 0);
    for v in ["glm-5", "rtx-pro-6000-se", "pcie-host-staged", "nvfp4"] {
        assert!(out.contains(v), "{v} missing from --help:\n{out}");
    }
    // The figures the help quotes are the model's.
    let e = servetune_model::predict::Engine::default();
    let floor = format!("{} us x the kernels", e.kernel_overhead_us);
    let latencies = [servetune_model::predict::EngineName::Sglang, servetune_model::predict::EngineName::Vllm]
        .map(|n| format!("{} {}", n.name(), n.request_latency_ms()));
    // clap wraps the help text: compare with single spaces, case aside.
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase();
    let per_request = format!("the {} us per running request", e.request_step_us);
    let cdna3 = format!("{}x that on mi300x/mi325x", e.cdna3_floor_scale);
    for v in [floor, per_request, cdna3].into_iter().chain(latencies) {
        assert!(flat.contains(&v), "{v:?} missing from --help:\n{out}");
    }
    // clap puts a flag's help on the line after it (long help) or beside it; a flag with no help
    // is followed directly by the next flag.
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("--") && !l.contains("  ") {
            let next = lines.get(i + 1).copied().unwrap_or("");
            assert!(!next.is_empty() && !next.starts_with("--"), "{l} has no help line:\n{out}");
        }
    }
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
    let (code, out, err) = plan(&["--model", "deepseek-v3", "--quant", "bf16", "--gpu", "rtx-4090", "--gpus", "8"]);
    assert_eq!(code, 2, "{err}");
    assert!(out.contains("GB of weights"), "{out}");
    assert!(!err.contains("GB of weights"), "the numbers are printed once: {err}");
}

#[test]
fn quant_defaults_to_the_published_checkpoint_and_a_misfit_says_the_smallest_change_once() {
    let (code, out, err) = plan(&["--model", "glm-5", "--gpu", "rtx-pro-6000-se", "--gpus", "8", "--link", "pcie-host-staged"]);
    assert_eq!(code, 2, "{err}");
    assert!(out.contains("glm-5 (744B total, 41.8B active)  fp8"), "GLM-5's published FP8 checkpoint is the default: {out}");
    assert_eq!(out.matches("DOES NOT FIT").count() + err.matches("DOES NOT FIT:").count(), 1, "{out}{err}");
    assert!(out.contains("smallest change that fits: use --quant nvfp4, or 16 GPUs (TP8+PP2)"), "{out}");
    let (code, out, err) = plan(&["--model", "gpt-oss-120b", "--gpu", "h100-sxm", "--gpus", "1", "--concurrency", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("mxfp4"), "{out}");
}

#[test]
fn printed_values_use_the_flags_spelling() {
    let (code, out, err) = plan(&["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "1", "--concurrency", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("overlap none") && out.contains("cuda-graphs on"), "{out}");
    assert!(!out.contains("None"), "{out}");
}

#[test]
fn json_to_stdout_is_pure_json() {
    let mut args = REF.to_vec();
    args.extend_from_slice(&["--json", "-"]);
    let (code, out, err) = plan(&args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{out}"));
    assert_eq!(v["schema"], "servetune.plan/1.5");
    assert!(err.contains("step time by term"), "the text report goes to stderr: {err}");
}

fn model_config(dir: &std::path::Path, json: &str) -> String {
    let p = dir.join("config.json");
    std::fs::write(&p, json).expect("write");
    p.to_string_lossy().to_string()
}

#[test]
fn impossible_model_configs_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().expect("tmp");
    let base = r#""model_type":"mixtral","hidden_size":4096,"num_hidden_layers":32,"vocab_size":32000,"num_key_value_heads":8,"intermediate_size":14336"#;
    let cases = [
        (
            format!(r#"{{{base},"num_attention_heads":32,"num_local_experts":8,"num_experts_per_tok":200}}"#),
            "\"num_experts_per_tok\" is 200",
        ),
        (format!(r#"{{{base},"num_attention_heads":0}}"#), "\"num_attention_heads\" is 0"),
        (format!(r#"{{{base},"num_attention_heads":32,"num_local_experts":-8,"num_experts_per_tok":2}}"#), "\"num_local_experts\" is -8"),
        (format!(r#"{{{base},"num_attention_heads":4}}"#), "\"num_key_value_heads\" is 8"),
    ];
    for (json, needle) in cases {
        let p = model_config(dir.path(), &json);
        usage_error(&["--model-config", &p, "--gpu", "h100-sxm", "--gpus", "1"], needle);
    }
}

#[test]
fn absurd_fabric_and_calibration_values_are_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let f = dir.path().join("fabric.json");
    let link = |alpha: f64| serde_json::json!({"schema": "servetune.fabric/1", "link": {"name": "measured-host-staged", "alpha_us": alpha, "beta_gbs": 29.0, "mode": "host_staged", "source": "test"}});
    std::fs::write(&f, link(-5.0).to_string()).expect("write");
    let fs = f.to_string_lossy().to_string();
    usage_error(&["--model", "glm-5", "--quant", "nvfp4", "--gpu", "rtx-pro-6000-se", "--fabric", &fs], "alpha_us) -5");
    let b = dir.path().join("bench.json");
    std::fs::write(&b, r#"{"schema":"servetune.bench/1","runs":[{"concurrency":8,"throughput":{"output_tokens_per_s":-1e300}}]}"#)
        .expect("write");
    let bs = b.to_string_lossy().to_string();
    usage_error(
        &["--model", "glm-5", "--quant", "nvfp4", "--gpu", "rtx-pro-6000-se", "--calibrate", &bs],
        "runs[0].throughput.output_tokens_per_s",
    );
    usage_error(&["--model", "glm-5", "--quant", "nvfp4", "--gpu", "rtx-pro-6000-se", "--link-bw=-3"], "beta_gbs");
}

#[test]
fn a_measured_host_staged_fabric_link_gets_the_p2p_fix() {
    let dir = tempfile::tempdir().expect("tmp");
    let f = dir.path().join("fabric.json");
    let doc = serde_json::json!({"schema": "servetune.fabric/1", "link": {"name": "measured-host-staged", "alpha_us": 12.5, "beta_gbs": 27.0, "mode": "host_staged", "source": "servetune fabric p2p"}});
    std::fs::write(&f, doc.to_string()).expect("write");
    let fs = f.to_string_lossy().to_string();
    let (code, out, err) = plan(&["--model", "glm-5", "--quant", "nvfp4", "--gpu", "rtx-pro-6000-se", "--fabric", &fs, "--rank"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("link measured-host-staged"), "{out}");
    assert!(out.contains("enable GPU peer-to-peer (P2P)"), "{out}");
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

const MULTI: [&str; 10] = ["--model", "deepseek-v3", "--gpu", "h100-sxm", "--gpus", "16", "--gpus-per-node", "8", "--net", "eth-100g"];

#[test]
fn multi_node_plan_names_the_nodes_and_ranks_tp_within_a_node_first() {
    let mut args = MULTI.to_vec();
    args.extend_from_slice(&["--tp", "16", "--rank", "--explain", "--concurrency", "1,16,64"]);
    let (code, out, err) = plan(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("nodes: 2 x 8 GPUs, 8 NICs per node; net eth-100g (Ethernet (TCP sockets))"), "{out}");
    // The network is named where it costs: the faster network is a ranked fix for TP16.
    assert!(out.contains("a faster network between the nodes: roce-200"), "{out}");
    assert!(out.contains("ranked plans on 16 GPUs (2 nodes x 8, net eth-100g)"), "{out}");
    assert!(out.contains("bound by"), "{out}");
    let best = out.lines().find(|l| l.starts_with("best ")).expect("the best plan's bottleneck");
    assert!(!best.starts_with("best TP16"), "TP within a node wins on 100GbE: {best}");
    // --nodes gives the same plan as --gpus-per-node.
    let by_nodes = ["--model", "deepseek-v3", "--gpu", "h100-sxm", "--nodes", "2", "--gpus-per-node", "8", "--net", "eth-100g"];
    let mut args2 = by_nodes.to_vec();
    args2.extend_from_slice(&["--tp", "16", "--rank", "--explain", "--concurrency", "1,16,64"]);
    let (code, out2, err) = plan(&args2);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, out2);
}

#[test]
fn bad_node_flags_exit_2_naming_the_flag() {
    let base = ["--model", "deepseek-v3", "--gpu", "h100-sxm"];
    let with = |extra: &[&'static str]| base.iter().copied().chain(extra.iter().copied()).collect::<Vec<_>>();
    usage_error(&with(&["--gpus", "12", "--gpus-per-node", "8", "--net", "ib-ndr"]), "--gpus 12 is not a multiple of --gpus-per-node 8");
    usage_error(&with(&["--gpus", "16", "--nodes", "3", "--gpus-per-node", "8"]), "--gpus 16 is not --nodes 3 x --gpus-per-node 8 = 24");
    usage_error(&with(&["--gpus", "16", "--nodes", "3"]), "--gpus 16 does not split evenly over --nodes 3");
    usage_error(&with(&["--nodes", "2"]), "--nodes 2: give --gpus or --gpus-per-node too");
    usage_error(&with(&["--gpus", "16", "--gpus-per-node", "8"]), "needs --net");
    usage_error(&with(&["--gpus", "8", "--net", "ib-ndr"]), "say how the GPUs split into nodes with --nodes or --gpus-per-node");
    usage_error(&with(&["--gpus", "16", "--gpus-per-node", "0", "--net", "ib-ndr"]), "--gpus-per-node 0");
    usage_error(
        &with(&["--gpus", "16", "--gpus-per-node", "8", "--net", "ib-ndr", "--net-bw=-2"]),
        "--net-latency/--net-bw: link bandwidth",
    );
    usage_error(&with(&["--gpus", "8", "--net-bw", "20"]), "describe a network between nodes");
    usage_error(
        &with(&["--gpus", "16", "--gpus-per-node", "8", "--net", "infiniband"]),
        "[possible values: ib-ndr, ib-xdr, roce-200, roce-400, eth-100g]",
    );
    usage_error(&with(&["--gpus", "16", "--gpus-per-node", "8", "--link", "ib-ndr"]), "[possible values: nvlink, pcie5-p2p");
    usage_error(&with(&["--gpus", "24", "--gpus-per-node", "8", "--net", "ib-ndr", "--tp", "12"]), "--tp 12 does not fit the nodes");
}

#[test]
fn a_single_node_plan_is_unchanged_by_node_flags() {
    let (code, plain, err) = plan(&REF);
    assert_eq!(code, 0, "{err}");
    let mut args = REF.to_vec();
    args.extend_from_slice(&["--gpus-per-node", "8"]);
    let (code, one, err) = plan(&args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(plain, one);
    assert!(!plain.contains("nodes:"), "{plain}");
    // The JSON of a single-node plan has none of the multi-node fields.
    let mut args = REF.to_vec();
    args.extend_from_slice(&["--rank", "--json", "-"]);
    let (code, json, err) = plan(&args);
    assert_eq!(code, 0, "{err}");
    assert!(json.contains("\"scenario\"") && !json.contains("\"cluster\"") && !json.contains("\"across\""), "{json}");
}

#[test]
fn architectures_plan_cannot_model_are_refused_with_the_field_and_value() {
    let dir = tempfile::tempdir().expect("tmp");
    let oss = r#""model_type":"gpt_oss","hidden_size":2880,"num_hidden_layers":2,"vocab_size":201088,"num_attention_heads":64,"num_key_value_heads":8,"head_dim":64,"num_local_experts":32,"num_experts_per_tok":4,"intermediate_size":2880"#;
    let cases = [
        (format!(r#"{{{oss},"sliding_window":128,"layer_types":["sliding_attention","chunked_attention"]}}"#), "\"layer_types\" entry 1 is \"chunked_attention\""),
        (format!(r#"{{{oss},"layer_types":["sliding_attention","full_attention"]}}"#), "no field \"sliding_window\""),
        (
            r#"{"model_type":"llama","hidden_size":4096,"num_hidden_layers":32,"vocab_size":128256,"num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":14336,"sliding_window":4096}"#.to_string(),
            "\"sliding_window\" is 4096",
        ),
    ];
    for (json, needle) in cases {
        let p = model_config(dir.path(), &json);
        usage_error(&["--model-config", &p, "--gpu", "h100-sxm", "--gpus", "1"], needle);
    }
}

#[test]
fn hybrid_and_amd_catalog_entries_plan_on_their_own_links() {
    let (code, out, err) = plan(&["--model", "qwen3-next-80b-a3b", "--gpu", "mi300x", "--gpus", "2", "--tp", "2", "--concurrency", "1,64"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("link xgmi"), "{out}");
    let (code, out, err) = plan(&["--model", "kimi-k2", "--gpu", "b300", "--gpus", "8", "--concurrency", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("kimi-k2 (1026B total") && out.contains("link nvlink5"), "{out}");
}

#[test]
fn the_headline_is_what_a_benchmark_client_measures_with_its_workload_in_the_json() {
    let mut args = REF.to_vec();
    args.extend_from_slice(&[
        "--concurrency",
        "8,128",
        "--max-running",
        "64",
        "--requests",
        "256",
        "--input-len",
        "uniform:512..1024",
        "--output-len",
        "normal:256,32",
        "--json",
        "-",
    ]);
    let (code, out, err) = plan(&args);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("what a benchmark client measures (closed loop, 256 requests, input uniform:512..1024, output normal:256,32"),
        "{err}"
    );
    assert!(err.contains("requests wait"), "c=128 above the cap of 64 queues, and --explain says how much: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["workload"]["requests"], 256);
    assert_eq!(v["workload"]["input"]["kind"], "uniform");
    // The steady state runs at the distributions' means.
    assert_eq!(v["scenario"]["input_len"], 768);
    assert_eq!(v["scenario"]["output_len"], 256);
    for p in v["points"].as_array().expect("points") {
        let c = &p["client"];
        assert_eq!(c["requests"], 256, "{c}");
        let (p50, p99) = (c["ttft_ms"]["p50"].as_f64().expect("p50"), c["ttft_ms"]["p99"].as_f64().expect("p99"));
        assert!(p50 > 0.0 && p99 >= p50, "{c}");
        assert!(c["peak_running"].as_u64().expect("peak") <= 64, "{c}");
        assert!(c["output_tokens_per_s"].as_f64().expect("rate") > 0.0, "{c}");
    }
    let q = v["points"][1]["client"]["effects"]["queueing"].as_f64().expect("queueing");
    assert!(q > 0.3, "half the requests at c=128 wait for one of 64 slots: {q}");
}

#[test]
fn bad_workload_flags_name_the_flag() {
    let base = ["--model", "glm-5", "--gpu", "rtx-pro-6000-se"];
    let with = |extra: &[&'static str]| base.iter().copied().chain(extra.iter().copied()).collect::<Vec<_>>();
    usage_error(&with(&["--input-len", "uniform:9..3"]), "--input-len");
    usage_error(&with(&["--output-len", "lots"]), "--output-len \"lots\" is not a length");
    usage_error(&with(&["--requests", "0"]), "--requests 0");
}

#[test]
fn request_latency_moves_the_client_ttft_by_its_difference_and_bad_values_exit_2() {
    let run = |latency: &str| {
        let mut args = REF.to_vec();
        args.extend_from_slice(&["--concurrency", "8", "--requests", "32", "--request-latency-ms", latency, "--json", "-"]);
        let (code, out, err) = plan(&args);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("json");
        let p = &v["points"][0];
        (p["client"]["ttft_ms"]["mean"].as_f64().expect("ttft"), p["client"]["output_tokens_per_s"].as_f64().expect("rate"))
    };
    let (sglang, rate_a) = run("251");
    let (vllm, rate_b) = run("34");
    assert!((sglang - vllm - 217.0).abs() < 1e-6, "{sglang} vs {vllm}");
    assert_eq!(rate_a, rate_b, "the latency is outside the GPU's steps");
    usage_error(&["--model", "glm-5", "--gpu", "rtx-pro-6000-se", "--request-latency-ms=-3"], "--request-latency-ms -3");
}

#[test]
fn mem_fraction_sets_the_engines_memory_share_sglangs_default_follows_gpu_plan_and_release_and_absurd_shares_exit_2() {
    let doc = |extra: &[&str]| {
        let mut args = REF.to_vec();
        args.extend_from_slice(&["--json", "-"]);
        args.extend_from_slice(extra);
        let (code, out, err) = plan(&args);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).expect("json")
    };
    let share = |v: &serde_json::Value| {
        let m = &v["memory_per_gpu_gb"];
        let (usable, cap) = (m["usable_gb"].as_f64().expect("usable"), m["capacity_gb"].as_f64().expect("capacity"));
        let f = m["mem_fraction"].as_f64().expect("mem_fraction");
        assert!((usable - f * cap).abs() < 1e-6, "{usable} of {cap} at {f}");
        f
    };
    // sglang's own default for GLM-5 (MLA) on an RTX PRO 6000 (97,887 MiB) at TP8: all but 512 +
    // 1.5 x 8192 + 2 x 512 + 1024 + 1536 (the prefill graphs' flat reserve for MLA) = 16,384 MiB.
    let default = doc(&[]);
    assert_eq!(share(&default), 0.833);
    assert_eq!(default["scenario"]["engine"]["mem_share"]["sglang_reserve"]["minor"], 23);
    // An early release's table by TP size; vLLM's fixed 0.9; a given share.
    assert_eq!(share(&doc(&["--engine", "sglang@0.4.3"])), 0.81);
    let vllm = doc(&["--engine", "vllm"]);
    assert_eq!((share(&vllm), vllm["scenario"]["engine"]["mem_share"].as_str()), (0.9, Some("vllm_default")));
    let given = doc(&["--mem-fraction", "0.8"]);
    assert_eq!((share(&given), given["scenario"]["engine"]["mem_share"]["given"].as_f64()), (0.8, Some(0.8)));
    // The terminal names the share and where it comes from.
    let (code, out, err) = plan(&REF);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(0.833 of the 102.6 GB the driver reports: the --mem-fraction-static default of sglang 0.5.20 and later for this GPU and plan)"), "{out}");
    for bad in ["1.5", "0", "-0.2", "nan"] {
        usage_error(&["--model", "glm-5", "--gpu", "rtx-pro-6000-se", &format!("--mem-fraction={bad}")], "--mem-fraction");
    }
}

#[test]
fn an_nvlink_box_names_its_measured_custom_all_reduce_and_each_engine_costs_its_own() {
    let run = |extra: &[&str]| {
        let mut args = vec!["--model", "llama-3.1-70b", "--gpu", "h200", "--tp", "8", "--concurrency", "64", "--json", "-"];
        args.extend_from_slice(extra);
        let (code, out, err) = plan(&args);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).expect("json")
    };
    let comm = |v: &serde_json::Value| v["points"][0]["step_ms"]["communication"].as_f64().expect("communication");
    // 64 tokens x 8192 x 2 B = 1 MiB per all-reduce: TensorRT-LLM's measured two-shot is slower there.
    let (vllm, trt) = (run(&["--engine", "vllm"]), run(&["--engine", "trtllm"]));
    assert!(comm(&trt) > 1.2 * comm(&vllm), "{} vs {}", comm(&trt), comm(&vllm));
    let text = |extra: &[&str]| {
        let mut args = vec!["--model", "llama-3.1-70b", "--gpu", "h200", "--tp", "8", "--concurrency", "4"];
        args.extend_from_slice(extra);
        let (code, out, err) = plan(&args);
        assert_eq!(code, 0, "{err}");
        out
    };
    let measured = text(&["--engine", "vllm"]);
    assert!(measured.contains("all-reduce: vllm's custom kernel at its measured latency on 8 x h200"), "{measured}");
    // A user-given link bandwidth scales the measured figure by the model, and says so.
    let given = text(&["--engine", "vllm", "--link-bw", "300"]);
    assert!(given.contains("scaled by the model's ratio of the given link to the catalog nvlink"), "{given}");
    assert!(!measured.contains("scaled by the model"), "{measured}");
}

#[test]
fn engine_names_its_defaults_in_the_header_and_shifts_ttft_by_its_latency() {
    let run = |engine: &str| {
        let mut args = REF.to_vec();
        args.extend_from_slice(&["--concurrency", "8", "--requests", "32", "--engine", engine]);
        let (code, out, err) = plan(&args);
        assert_eq!(code, 0, "{err}");
        out
    };
    let (sglang, vllm) = (run("sglang"), run("vllm"));
    assert!(sglang.contains("engine: sglang,") && sglang.contains("mixed-prefill off"), "{sglang}");
    assert!(vllm.contains("engine: vllm,") && vllm.contains("mixed-prefill on"), "{vllm}");
    let json = |extra: &[&str]| {
        let mut args = REF.to_vec();
        args.extend_from_slice(&["--concurrency", "8", "--requests", "32", "--json", "-"]);
        args.extend_from_slice(extra);
        let (code, out, err) = plan(&args);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).expect("json")
    };
    let trt = json(&["--engine", "trtllm"]);
    assert_eq!(trt["scenario"]["engine"]["serving"], "trtllm");
    assert_eq!(trt["scenario"]["engine"]["request_latency_ms"].as_f64(), Some(servetune_model::predict::TRTLLM_REQUEST_LATENCY_MS));
    // The engine's latency is what its TTFT carries over the same engine without it.
    let ttft = |v: &serde_json::Value| v["points"][0]["client"]["ttft_ms"]["mean"].as_f64().expect("ttft");
    let zero = json(&["--engine", "trtllm", "--request-latency-ms", "0"]);
    assert!(
        (ttft(&trt) - ttft(&zero) - servetune_model::predict::TRTLLM_REQUEST_LATENCY_MS).abs() < 1e-6,
        "{} vs {}",
        ttft(&trt),
        ttft(&zero)
    );
    usage_error(&["--model", "glm-5", "--gpu", "rtx-pro-6000-se", "--engine", "tgi"], "--engine");
    usage_error(&["--validate", "--engine", "vllm"], "--engine does not apply to --validate");
}

/// `--routing-skew` replaces the kernel-derived skew, and the report's engine line says it was
/// stated; uniform routing reads more experts at concurrency 64, so the rate falls.
#[test]
fn a_stated_routing_skew_is_reported_as_stated_and_uniform_routing_is_slower() {
    let base = ["--model", "glm-5", "--quant", "nvfp4", "--gpu", "rtx-pro-6000-se", "--link", "pcie5-p2p", "--concurrency", "64"];
    let (code, default, err) = plan(&base);
    assert_eq!(code, 0, "{err}");
    assert!(default.contains("router skew 0.45 (from AIConfigurator's MoE kernel timings)"), "{default}");
    let (code, uniform, err) = plan(&[&base[..], &["--routing-skew", "0"]].concat());
    assert_eq!(code, 0, "{err}");
    assert!(uniform.contains("router skew 0.00 (stated by --routing-skew)"), "{uniform}");
    assert!(rate_at_64(&uniform) < rate_at_64(&default), "uniform {} against {}", rate_at_64(&uniform), rate_at_64(&default));
}

/// MXFP4 experts on a GPU with AIConfigurator's GPT-OSS kernel rows read at the kernel's marginal
/// rate (kernels.rs, step 37), and the engine line says so; NVFP4 experts keep the plain figure, and
/// an AMD GPU (no table) takes the engine's MoE efficiency.
#[test]
fn mxfp4_experts_report_the_kernel_tables_marginal_rate() {
    use servetune_model::kernels::{moe_decode_efficiency, MoeSplit};
    use servetune_model::quant::Dtype;
    let label = "(the MXFP4 kernel's marginal rate";
    // Sliced experts on one H100, and whole experts over two (expert parallelism).
    for (args, split) in
        [(["--gpus", "1", "--tp", "1", "--ep", "1"], MoeSplit::Tp), (["--gpus", "2", "--tp", "2", "--ep", "2"], MoeSplit::Ep)]
    {
        let (code, out, err) = plan(&[&["--model", "gpt-oss-120b", "--gpu", "h100-sxm", "--concurrency", "4"][..], &args[..]].concat());
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("mxfp4"), "the catalog's GPT-OSS is MXFP4: {out}");
        let rate = moe_decode_efficiency("h100-sxm", Dtype::Mxfp4, split).expect("an MXFP4 rate for the H100");
        assert!(out.contains(&format!("experts {rate:.2} {label}")), "{split:?}: {out}");
    }
    // NVFP4 experts read at an achieved share: the figure stands alone.
    let (code, nvfp4, err) = plan(&["--model", "glm-5", "--quant", "nvfp4", "--gpu", "rtx-pro-6000-se", "--concurrency", "64"]);
    assert_eq!(code, 0, "{err}");
    let se = moe_decode_efficiency("rtx-pro-6000-se", Dtype::Nvfp4, MoeSplit::Tp).expect("an NVFP4 rate");
    assert!(nvfp4.contains(&format!("experts {se:.2}, router skew")) && !nvfp4.contains("marginal rate"), "{nvfp4}");
    // MXFP4 on an AMD GPU has no table: the engine's MoE efficiency, unlabelled.
    let (code, amd, err) = plan(&["--model", "gpt-oss-120b", "--gpu", "mi300x", "--gpus", "1", "--tp", "1", "--concurrency", "4"]);
    assert_eq!(code, 0, "{err}");
    assert!(amd.contains("mxfp4"), "{amd}");
    let e = servetune_model::predict::Engine::default();
    assert!(amd.contains(&format!("experts {:.2}, router skew", e.moe_efficiency)) && !amd.contains("marginal rate"), "{amd}");
}

#[test]
fn numbers_at_the_boundary_exit_2_naming_the_flag_and_the_accepted_range() {
    let one = ["--model", "glm-5", "--quant", "nvfp4", "--gpu", "rtx-pro-6000-se", "--concurrency", "1"];
    let two_nodes = [
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm",
        "--gpus",
        "16",
        "--gpus-per-node",
        "8",
        "--net",
        "ib-ndr",
        "--tp",
        "8",
        "--pp",
        "2",
    ];
    let cases: [(&[&str], &[&str], &str); 8] = [
        (&one, &["--request-step-us", "1e308"], "--request-step-us 1e308 is out of range: give microseconds from 0 to 1000000"),
        (&one, &["--routing-skew", "3.5"], "--routing-skew 3.5 is out of range: give a Zipf exponent from 0 (uniform routing) to 3"),
        (&one, &["--step-overhead-ms", "inf"], "--step-overhead-ms inf is out of range: give milliseconds from 0 to 10000"),
        (&one, &["--request-latency-ms", "1e300"], "--request-latency-ms 1e300 is out of range: give milliseconds from 0 to 600000"),
        (
            &one,
            &["--link-bw", "1e-300"],
            "--link-latency/--link-bw: link bandwidth (beta_gbs) 1e-300 is not a bandwidth this tool takes: give GB/s from 0.001 to 100000",
        ),
        (
            &one,
            &["--link-latency", "1e308"],
            "link latency (alpha_us) 1e308 is not a latency this tool takes: give microseconds from 0 to 1000000",
        ),
        (&two_nodes, &["--net-latency", "1e308"], "--net-latency/--net-bw: link latency (alpha_us) 1e308"),
        (&two_nodes, &["--net-bw", "NaN"], "--net-latency/--net-bw: link bandwidth (beta_gbs) NaN"),
    ];
    for (base, extra, needle) in cases {
        usage_error(&[base, extra].concat(), needle);
    }
    let dir = tempfile::tempdir().expect("tmp");
    let f = dir.path().join("tiny.json");
    let doc = serde_json::json!({"schema": "servetune.fabric/1", "link": {"name": "measured-p2p", "alpha_us": 1.0, "beta_gbs": 1e-300, "mode": "p2p", "source": "test"}});
    std::fs::write(&f, doc.to_string()).expect("write");
    let fs = f.to_string_lossy().to_string();
    usage_error(
        &[&one[..], &["--fabric", &fs]].concat(),
        "tiny.json field \"link\": link bandwidth (beta_gbs) 1e-300 is not a bandwidth this tool takes",
    );
}

#[test]
fn file_inputs_that_are_endless_devices_are_refused_at_their_limit() {
    let dir = tempfile::tempdir().expect("tmp");
    let endless = |name: &str| crate::common::endless_text(dir.path(), name).to_string_lossy().into_owned();
    let cfg = endless("config");
    usage_error(
        &["--model-config", &cfg, "--gpu", "h200"],
        &format!("--model-config {cfg}: larger than 16 MiB, the most this input may hold"),
    );
    let gpu = ["--model", "glm-5", "--quant", "nvfp4", "--gpu", "rtx-pro-6000-se"];
    let fabric = endless("fabric");
    usage_error(&[&gpu[..], &["--fabric", &fabric]].concat(), &format!("--fabric {fabric}: larger than 64 MiB"));
    let cal = endless("calibrate");
    usage_error(&[&gpu[..], &["--calibrate", &cal]].concat(), &format!("--calibrate {cal}: larger than 64 MiB"));
    // A binary device stops at its first byte.
    usage_error(
        &["--model-config", "/dev/zero", "--gpu", "h200"],
        "--model-config /dev/zero: not UTF-8 text (a NUL or invalid byte at offset 0",
    );
    usage_error(&["--model-config", &dir.path().to_string_lossy(), "--gpu", "h200"], "is a directory; give a file");
}

#[test]
fn plan_to_a_full_device_exits_1_instead_of_0_with_nothing_written() {
    let base = ["plan", "--model", "glm-5", "--quant", "nvfp4", "--gpu", "rtx-pro-6000-se", "--concurrency", "1"];
    for extra in [&[][..], &["--json", "-"], &["--markdown", "-"]] {
        let args = [&base[..], extra].concat();
        let (code, err) = crate::probe::to_a_full_device(&args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains("error: cannot write the report to stdout (No space left on device"), "{args:?}: {err}");
    }
}

/// `--model` takes the Hugging Face repository of a checkpoint the catalog lists, as the engines
/// take it: the same plan as the catalog name with that checkpoint's format. A --quant of another
/// format, and a repository the catalog does not list, are refused with exit 2 and the fix.
#[test]
fn a_checkpoints_repository_plans_as_its_catalog_model_and_format() {
    let common = ["--gpu", "h200", "--gpus", "2", "--concurrency", "16", "--json", "-"];
    let with = |model: &[&str]| {
        let args: Vec<&str> = model.iter().chain(common.iter()).copied().collect();
        let (code, out, err) = plan(&args);
        assert_eq!(code, 0, "{model:?}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("json");
        (v["model"].clone(), v["scenario"].clone(), v["points"].clone())
    };
    let by_name = with(&["--model", "qwen3-30b-a3b", "--quant", "fp8"]);
    assert_eq!(with(&["--model", "Qwen/Qwen3-30B-A3B-FP8"]), by_name, "the FP8 checkpoint's repository");
    assert_eq!(with(&["--model", "qwen/qwen3-30b-a3b-fp8", "--quant", "fp8"]), by_name, "any letter case, a matching --quant");
    assert_ne!(with(&["--model", "Qwen/Qwen3-30B-A3B"]), by_name, "the BF16 checkpoint is another format");
    assert_eq!(with(&["--model", "Qwen/Qwen3-30B-A3B"]), with(&["--model", "qwen3-30b-a3b"]), "the default checkpoint is the BF16 one");

    let (code, _, err) = plan(&["--model", "zai-org/GLM-5-FP8", "--quant", "nvfp4", "--gpu", "h200"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--model zai-org/GLM-5-FP8 is the fp8 checkpoint of glm-5") && err.contains("--model glm-5 --quant nvfp4"),
        "{err}"
    );
    let (code, _, err) = plan(&["--model", "deepseek-ai/DeepSeek-V3-Base", "--gpu", "h200"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("\"deepseek-ai/DeepSeek-V3-Base\" is not in the model catalog") && err.contains("give --model-config"), "{err}");
    let (_, help, _) = plan(&["--help"]);
    assert!(help.contains("glm-5: zai-org/GLM-5-FP8 (fp8)") && help.contains("zai-org/GLM-5 (bf16)"), "--help lists the checkpoints");

    // A release the catalog lists with another entry's architecture: DeepSeek-R1-0528 plans as
    // DeepSeek-V3's model under its own name, and --help says whose config it reads.
    let common = ["--gpu", "h200", "--gpus", "8", "--concurrency", "16", "--json", "-"];
    let json = |model: &str| {
        let args: Vec<&str> = ["--model", model].iter().chain(common.iter()).copied().collect();
        let (code, out, err) = plan(&args);
        assert_eq!(code, 0, "{model}: {err}");
        serde_json::from_str::<serde_json::Value>(&out).expect("json")
    };
    let (r1, v3) = (json("deepseek-ai/DeepSeek-R1-0528"), json("deepseek-v3"));
    assert_eq!(r1["model"], "deepseek-r1-0528");
    assert_eq!(r1["points"], v3["points"], "the same architecture, the same prediction");
    assert!(
        help.contains("deepseek-r1-0528: deepseek-ai/DeepSeek-R1-0528 (fp8)") && help.contains("deepseek-v3's architecture and config"),
        "{help}"
    );
}

/// A hybrid model under sglang: `plan` prints the state pool and the cap it sets, and the JSON
/// carries the pool's memory and runs no more requests than the cap; under vLLM the state shares
/// the KV cache and no such cap appears.
#[test]
fn sglangs_state_pool_for_a_hybrid_model_is_printed_and_caps_the_running_requests() {
    let args = |engine: &'static str| {
        ["--model", "qwen3-next-80b-a3b", "--gpu", "h200", "--gpus", "2", "--tp", "2", "--engine", engine, "--concurrency", "64,1024"]
    };
    let (code, out, err) = plan(&args("sglang"));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("linear-attention state:") && out.contains("in the engine's own pool (0.90 of the KV pool's memory)"), "{out}");
    let cap_line = out.lines().find(|l| l.starts_with("running cap: the engine's linear-attention state pool")).expect(&out);
    let cap: u64 = cap_line.split_whitespace().rev().nth(3).and_then(|n| n.parse().ok()).expect(cap_line);
    let (code, json, err) = plan(&[&args("sglang")[..], &["--json", "-"]].concat());
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert!(v["memory_per_gpu_gb"]["state_gb"].as_f64().unwrap_or(0.0) > 1.0, "{}", v["memory_per_gpu_gb"]);
    let running: Vec<u64> = v["points"].as_array().expect("points").iter().filter_map(|p| p["running"].as_u64()).collect();
    assert_eq!(running, vec![64, cap], "{json}");
    let (code, json, err) = plan(&[&args("vllm")[..], &["--json", "-"]].concat());
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(v["memory_per_gpu_gb"]["state_gb"].as_f64(), Some(0.0));
    let last = v["points"].as_array().and_then(|p| p.last()).expect("points")["running"].as_u64().unwrap_or(0);
    assert!(last > cap, "vLLM has no state cap: {last} running against sglang's {cap}");
}

/// Objectives no point meets give no answer that breaks them: the answer says none meets them,
/// with --rank too (where no plan meets them either).
#[test]
fn objectives_nothing_meets_give_no_answer_that_breaks_them() {
    for rank in [false, true] {
        let mut args = REF.to_vec();
        args.extend_from_slice(&["--slo", "tpot:p50<1ms"]);
        if rank {
            args.push("--rank");
        }
        let (code, out, err) = plan(&args);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("answer: none: TP8 meets tpot:p50<1ms at no concurrency asked"), "{out}");
    }
    // An objective some points meet: the answer is one of them.
    let mut args = REF.to_vec();
    args.extend_from_slice(&["--slo", "tpot:p50<60ms"]);
    let (code, out, err) = plan(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("answer: TP8 at concurrency 8:"), "the highest rate whose TPOT is under 60 ms: {out}");
}

/// A sweep of another workload than the plan's, or a run that completed nothing, is refused:
/// a calibration prices the workload it measured.
#[test]
fn a_calibration_of_another_workload_or_an_empty_run_is_refused_naming_the_flags() {
    let dir = tempfile::tempdir().expect("tmp");
    let b = dir.path().join("b.json");
    let doc = |input: &str, completed: u64| {
        serde_json::json!({"schema": "servetune.bench/1", "config": {"input": input, "output": "1024", "model": "m"},
            "runs": [{"concurrency": 8, "throughput": {"output_tokens_per_s": 150.0}, "requests": {"completed": completed}}]})
        .to_string()
    };
    let bs = b.to_string_lossy().to_string();
    std::fs::write(&b, doc("128", 80)).expect("write");
    usage_error(&[&REF[..], &["--calibrate", &bs]].concat(), "the sweep ran prompts of 128 and outputs of 1024 tokens");
    usage_error(&[&REF[..], &["--calibrate", &bs]].concat(), "give --input-len 128 --output-len 1024");
    std::fs::write(&b, doc("1024", 0)).expect("write");
    usage_error(&[&REF[..], &["--calibrate", &bs]].concat(), "run 0 (concurrency 8) completed no request");
    // The same workload (a distribution of the same mean) calibrates.
    std::fs::write(&b, doc("uniform:1000..1048", 80)).expect("write");
    let (code, out, err) = plan(&[&REF[..], &["--calibrate", &bs, "--concurrency", "8"]].concat());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("c=8: measured 150"), "{out}");
    // A --dataset sweep names its prompts in words: the runs' measured mean (prompt tokens over
    // requests, here 2,300 / 10 = 230) is compared, and suggested.
    let dataset = |input_tok_s: f64| {
        serde_json::json!({"schema": "servetune.bench/1", "config": {"input": "dataset /data/sharegpt.json", "output": "1024", "model": "m"},
            "runs": [{"concurrency": 8, "throughput": {"output_tokens_per_s": 150.0, "input_tokens_per_s": input_tok_s, "requests_per_s": 10.0},
                "requests": {"completed": 80}}]})
        .to_string()
    };
    std::fs::write(&b, dataset(2300.0)).expect("write");
    usage_error(
        &[&REF[..], &["--calibrate", &bs]].concat(),
        "the sweep ran prompts of dataset /data/sharegpt.json (a mean of 230) and outputs of 1024 tokens",
    );
    usage_error(&[&REF[..], &["--calibrate", &bs]].concat(), "give --input-len 230 --output-len 1024");
    std::fs::write(&b, dataset(10_100.0)).expect("write");
    let (code, _, err) = plan(&[&REF[..], &["--calibrate", &bs, "--concurrency", "8"]].concat());
    assert_eq!(code, 0, "a dataset of 1,010-token prompts on average is the plan's 1,024: {err}");
}
