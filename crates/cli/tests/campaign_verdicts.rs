//! The campaign's verdicts against a simulated server that is deliberately not the model: the
//! model alone misses it, the calibration from the first experiment lands the second, and the
//! report, the findings and the JSON give one number per point.

use std::path::Path;

use crate::common::servetune;

fn campaign(args: &[&str]) -> (i32, String, String) {
    let out = servetune().arg("campaign").args(args).output().expect("run");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A sim engine whose timing is the model with other efficiencies than the campaign's model
/// assumes: fused-MoE kernels at 45% of memory bandwidth, and the all-reduce staged through host
/// memory although the probe (the LXC fixture) reports P2P.
const OFF_MODEL: &str = r#"[[engine]]
name = "sim-off"
description = "servetune sim timed by the model with MoE kernels at 45% and a host-staged all-reduce"
argv = ["{servetune}", "sim", "--listen", "{host}:{port}", "--model", "{model}"]
tail = ["--from-plan", "model={model},quant={quant},gpu={gpu},gpus={gpus},link=pcie-host-staged,tp={tp},pp={pp},ep={ep},input-len={input_len},output-len={output_len},moe-efficiency=0.45"]
health = "/health"
generate = "/v1/completions"
metrics = "/metrics"
ready_timeout_s = 60
knobs = [
  { name = "tp", help = "tensor parallelism", domain = { int = { min = 1, max = 64 } }, default = "{gpus}" },
  { name = "pp", help = "pipeline parallelism", domain = { int = { min = 1, max = 64 } }, default = "1" },
  { name = "ep", help = "expert parallelism", domain = { int = { min = 1, max = 64 } }, default = "1" },
  { name = "max_running", help = "running-request cap", domain = { int = { min = 1, max = 65536 } }, args = ["--max-running-requests", "{value}"] },
]
"#;

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

#[test]
fn a_server_unlike_the_model_is_missed_uncalibrated_and_landed_calibrated() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = init_off_model_campaign(d.path());
    for _ in 0..2 {
        let (code, out, err) = campaign(&["continue", s(&dir)]);
        assert_eq!(code, 0, "{out}{err}");
    }
    let json = d.path().join("r.json");
    let md = d.path().join("r.md");
    let (code, out, err) = campaign(&["report", s(&dir), "--json", s(&json), "--markdown", s(&md)]);
    assert_eq!(code, 0, "{out}{err}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("parse");
    let curves = r["curves"].as_array().expect("curves");
    assert_eq!(curves.len(), 2, "{r}");
    assert!(curves[0]["calibrated_on"].is_null(), "the first experiment has no calibration before it");
    assert_eq!(curves[1]["calibrated_on"].as_i64(), Some(1), "the second is predicted with the first's calibration");

    // The second experiment at its best point: the model alone misses, the calibrated one lands.
    let best = curves[1]["points"]
        .as_array()
        .expect("points")
        .iter()
        .max_by(|a, b| f(&a["output_tok_s"]).total_cmp(&f(&b["output_tok_s"])))
        .expect("a point");
    let measured = f(&best["output_tok_s"]);
    let calibrated = f(&best["predicted_output_tok_s"]);
    let raw = f(&best["uncalibrated_output_tok_s"]);
    let miss = |p: f64| (p - measured).abs() / measured;
    assert!(miss(raw) > 0.10, "the model alone should miss a server unlike it: {raw} vs {measured}");
    // Calibrated on batches of at most 4, predicting a batch of 8: the three fitted factors
    // (streaming, overhead, communication) cannot tell a host-staged all-reduce's latency from
    // its bytes, so the calibrated prediction lands near, not on: 5.4% under with the constants
    // of stop 44, 7.6% with today's on a quiet machine, 10.1% under CI's parallel load (the
    // simulated server's timing is wall-clock). It must land within 12% and at most half the
    // raw miss.
    assert!(miss(calibrated) < 0.12, "calibrated on experiment 1: {calibrated} vs {measured} (raw {raw})");
    assert!(miss(calibrated) < miss(raw) / 2.0, "calibrated {calibrated} vs raw {raw}, measured {measured}");

    // One number per point: the verdict finding of experiment 2 quotes the chart's figures.
    let finding = r["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .find(|w| {
            w["experiments"].as_array().is_some_and(|e| e.iter().any(|x| x.as_i64() == Some(2)))
                && w["title"].as_str().is_some_and(|t| t.starts_with("measured"))
        })
        .expect("a verdict for experiment 2");
    let evidence = finding["evidence"].as_str().expect("evidence");
    assert!(
        evidence.contains(&format!(
            "{measured:.1} output tok/s measured vs {calibrated:.1} predicted (calibrated on experiment 1; uncalibrated {raw:.1})"
        )),
        "{evidence}"
    );

    // The track record: the step taken after the baseline, its gain raw and calibrated, and measured.
    let track = r["track_record"].as_array().expect("track record");
    assert_eq!(track.len(), 1, "{track:?}");
    let t = &track[0];
    assert_eq!(t["experiment"].as_i64(), Some(2));
    assert_eq!(t["reference"].as_i64(), Some(1));
    assert_eq!(t["calibrated_on"].as_i64(), Some(1));
    assert!(f(&t["predicted_raw"]) > 0.0 && f(&t["predicted_calibrated"]) > 0.0 && f(&t["measured"]) > 0.0, "{t}");
    let best1 = curves[0]["points"].as_array().expect("points").iter().map(|p| f(&p["output_tok_s"])).fold(0.0, f64::max);
    assert!((f(&t["measured"]) - measured / best1).abs() < 1e-9, "measured gain is best(2) / best(1): {t}");
    let text = std::fs::read_to_string(&md).expect("md");
    assert!(text.contains("## Track record") && text.contains("calibrated on experiment 1"), "{text}");
    let (code, out, _) = campaign(&["status", s(&dir)]);
    assert_eq!(code, 0);
    assert!(out.contains("Track record") && out.contains("by the model alone"), "{out}");
}

/// A campaign on a simulated server unlike the model (engines.toml `sim-off`), in `tmp`.
fn init_off_model_campaign(tmp: &std::path::Path) -> std::path::PathBuf {
    let dir = tmp.join("c");
    let engines = tmp.join("engines.toml");
    std::fs::write(&engines, OFF_MODEL).expect("engines");
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../probe/tests/fixtures/proxmox-lxc-8gpu");
    let (code, out, err) = campaign(&[
        "init",
        s(&dir),
        "--engine",
        "sim-off",
        "--engines",
        s(&engines),
        "--model",
        "qwen3-30b-a3b",
        "--goal",
        "output_tok_s>=1000000",
        "--probe-root",
        s(&root),
        "--concurrency",
        "1,2,4,16,32",
        "--requests",
        "32",
        "--input-len",
        "64",
        "--output-len",
        "16",
        "--set",
        "max_running=4",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    dir
}
