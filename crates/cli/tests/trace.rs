//! `servetune trace`: traces drawn as the engines write them (`servetune_trace::synth`), bad
//! input, the JSON schema, the comparison with the model.

use std::path::{Path, PathBuf};

use servetune_trace::synth::{self, Engine, Spec};

use crate::common::servetune;

/// An engine's typical trace, written into `dir`.
fn drawn(dir: &Path, engine: Engine) -> PathBuf {
    let path = dir.join(format!("{engine:?}.trace.json.gz"));
    synth::write(&Spec::typical(engine), &path).expect("writes");
    path
}

fn run(args: &[&str]) -> (i32, String, String) {
    let o = servetune().args(args).output().expect("run");
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into())
}

#[test]
fn trace_prints_the_steps_split_nccl_calls_and_unknown_kernels() {
    let dir = tempfile::tempdir().expect("tmp");
    let f = drawn(dir.path(), Engine::SglangCuda);
    let (code, out, err) = run(&["trace", &f.to_string_lossy()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("8 steps found by the engine's step annotations on the GPU (sglang's step[...]"), "{out}");
    assert!(
        out.contains("prefill: 2 steps (kind from the annotation)") && out.contains("decode: 5 steps") && out.contains("mixed: 1 steps"),
        "{out}"
    );
    assert!(out.contains("step[prefill bs=2 toks=3000]") && out.contains("us/token"), "{out}");
    // Two long prefills over NCCL, 17 all-reduces each (two per layer and the embedding's).
    assert!(out.contains("AllReduce      RING/LL: 34 calls"), "{out}");
    assert!(out.contains("kernels no rule knew (category other): 1") && out.contains("sglang_fixture_unknown_kernel"), "{out}");
    assert!(out.contains("idle (host overhead)") && out.contains("median"), "{out}");
}

#[test]
fn trace_json_matches_its_schema_with_and_without_a_comparison() {
    let dir = tempfile::tempdir().expect("tmp");
    for engine in [Engine::VllmPiecewise, Engine::TrtLlm] {
        let f = drawn(dir.path(), engine);
        let f = f.to_string_lossy();
        let (doc, _) = crate::schemas::check("trace/schema/trace.schema.json", &["trace", &f]);
        assert!(doc["comparison"].is_null());
        assert_eq!(doc["schema_minor"], 2);
        assert_eq!(doc["steps"].as_array().map(Vec::len), Some(8), "{engine:?}");
        let (doc, _) = crate::schemas::check(
            "trace/schema/trace.schema.json",
            &["trace", &f, "--vs-plan", "model=llama-3.1-70b,gpu=h100-sxm,gpus=4", "--concurrency", "16"],
        );
        assert_eq!(doc["comparison"]["rows"].as_array().map(Vec::len), Some(5));
        assert_eq!(doc["comparison"]["allreduce_calls"]["predicted_per_step"], 161.0);
    }
    // Without annotations (graph replays) and with host ranges only: the same schema.
    for annotations in [synth::Annotations::None, synth::Annotations::Host] {
        let mut spec = Spec::typical(Engine::SglangRocm);
        spec.annotations = annotations;
        let f = dir.path().join("rocm.json");
        synth::write(&spec, &f).expect("writes");
        crate::schemas::check("trace/schema/trace.schema.json", &["trace", &f.to_string_lossy()]);
    }
}

#[test]
fn vs_plan_names_the_largest_mismatch_and_checks_the_all_reduce_count() {
    let dir = tempfile::tempdir().expect("tmp");
    // vLLM serving Llama-3.1-70B at TP 4: 80 layers, two all-reduces each, and the embedding's.
    let mut spec = Spec::typical(Engine::VllmFull);
    spec.layers = 80;
    let f = dir.path().join("vllm-70b.trace.json.gz");
    synth::write(&spec, &f).expect("writes");
    let (code, out, err) =
        run(&["trace", &f.to_string_lossy(), "--vs-plan", "model=llama-3.1-70b,gpu=h100-sxm,gpus=4", "--concurrency", "4"]);
    assert_eq!(code, 0, "{err}");
    let line = out.lines().find(|l| l.contains("largest mismatch:")).expect("a mismatch line");
    assert!(line.contains("% measured against") && line.contains("% predicted"), "{line}");
    assert!(out.contains("all-reduce calls: 161.0 all-reduces per decode step, as the model counts"), "{out}");
    // A trace of 8 layers against the 80-layer model: the count says so.
    let f = drawn(dir.path(), Engine::VllmFull);
    let (code, out, err) =
        run(&["trace", &f.to_string_lossy(), "--vs-plan", "model=llama-3.1-70b,gpu=h100-sxm,gpus=4", "--concurrency", "4"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("all-reduce calls: 17.0 all-reduces per decode step measured against 161 in the model (-89%)"), "{out}");
}

#[test]
fn vs_plan_without_a_concurrency_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let f = drawn(dir.path(), Engine::VllmFull);
    let (code, _, err) = run(&["trace", &f.to_string_lossy(), "--vs-plan", "model=llama-3.1-70b,gpu=h100-sxm,gpus=4"]);
    assert_eq!(code, 2);
    assert!(err.contains("--concurrency"), "{err}");
}

#[test]
fn bad_traces_exit_2_with_the_reason() {
    let dir = tempfile::tempdir().expect("tmp");
    let not_json = dir.path().join("notes.json");
    std::fs::write(&not_json, "these are notes, not a trace\n").expect("write");
    let whole = std::fs::read(drawn(dir.path(), Engine::SglangCuda)).expect("read");
    let cut = dir.path().join("cut.json.gz");
    std::fs::write(&cut, &whole[..whole.len() / 2]).expect("write");
    let host_only = dir.path().join("host.json.gz");
    synth::write_doc(&synth::host_only(), &host_only).expect("write");
    let no_events = dir.path().join("empty.json");
    std::fs::write(&no_events, r#"{"schemaVersion": 1, "traceEvents": []}"#).expect("write");
    let other_json = dir.path().join("other.json");
    std::fs::write(&other_json, r#"{"hello": "world"}"#).expect("write");
    for (file, reason) in [
        (not_json, "not Chrome-trace JSON"),
        (cut, "gzip stream is truncated"),
        (host_only, "no GPU events"),
        (no_events, "no GPU events"),
        (other_json, "without a traceEvents array"),
        (dir.path().join("missing.json"), "cannot open"),
    ] {
        let (code, _, err) = run(&["trace", &file.to_string_lossy()]);
        assert_eq!(code, 2, "{}: {err}", file.display());
        assert!(err.contains(reason) && err.contains(&*file.to_string_lossy()), "{}: {err}", file.display());
    }
}

/// A simulator priced by the plan of `pairs` (as `sim --from-plan` starts one).
fn from_plan_config(pairs: &str) -> servetune_sim::SimConfig {
    let scenario = servetune_model::ScenarioSpec::parse_pairs("test", pairs).and_then(|s| s.build()).expect("plan");
    let mut cfg = servetune_sim::SimConfig::new(servetune_sim::from_plan::profile(&scenario));
    cfg.cost = Some(std::sync::Arc::new(servetune_sim::from_plan::PlanCost { scenario }));
    cfg
}

fn from_plan_sim(pairs: &str) -> crate::common::Sim {
    crate::common::sim(from_plan_config(pairs))
}

/// `servetune plan --json` of Llama 3.1 70B on 4 H100s at `concurrency`, written to DIR/plan.json.
fn plan_json(dir: &std::path::Path, concurrency: &str) -> std::path::PathBuf {
    let plan = dir.join("plan.json");
    let plan_s = plan.to_string_lossy().to_string();
    let (code, _, err) =
        run(&["plan", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "4", "--concurrency", concurrency, "--json", &plan_s]);
    assert_eq!(code, 0, "{err}");
    plan
}

#[test]
fn bench_profile_captures_a_sim_trace_attributed_as_the_sim_split_it() {
    // Eight GPUs: on four, a decode step's 128 KiB all-reduce takes 4.1 us as measured, inside the
    // per-kernel floor the overhead already counts, so the split has no communication to write.
    let s = from_plan_sim("model=llama-3.1-70b,gpu=h100-sxm,gpus=8");
    let (code, out, err) = run(&[
        "bench",
        "-q",
        "--url",
        s.url(),
        "--concurrency",
        "8",
        "--requests",
        "24",
        "--input-len",
        "256",
        "--output-len",
        "24",
        "--profile",
        "30",
    ]);
    assert_eq!(code, 0, "{err}");
    let path = out.lines().find_map(|l| l.strip_prefix("profile: the server wrote ")).expect("the trace's path").trim().to_string();
    assert!(out.contains("steps found by the engine's step annotations") && out.contains("AllReduce      RING/LL"), "{out}");
    let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).expect("trace")).expect("json");
    let _ = std::fs::remove_file(&path);
    assert_eq!(trace["servetune_sim"]["steps"], 30);
    let sim = &trace["servetune_sim"]["split_ms"];
    let dir = tempfile::tempdir().expect("tmp");
    let copy = dir.path().join("t.json");
    std::fs::write(&copy, serde_json::to_vec(&trace).expect("json")).expect("write");
    let (code, doc, err) = run(&["trace", &copy.to_string_lossy(), "--json", "-"]);
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&doc).expect("json");
    // Totals over both phases: mean per step times steps.
    let total = |f: &dyn Fn(&serde_json::Value) -> f64| -> f64 {
        doc["phases"].as_array().expect("phases").iter().map(|p| f(p) * p["steps"].as_f64().expect("steps")).sum()
    };
    let cat = |name: &'static str| {
        move |p: &serde_json::Value| {
            p["categories"].as_array().expect("cats").iter().find(|c| c["category"] == name).map_or(0.0, |c| c["ms"].as_f64().expect("ms"))
        }
    };
    for (measured, key) in [
        (total(&cat("dense_gemm")), "matmul_ms"),
        (total(&cat("attention")), "attention_ms"),
        (total(&cat("nccl")), "communication_ms"),
        (total(&|p| p["idle_ms"].as_f64().expect("idle")), "overhead_ms"),
    ] {
        let truth = sim[key].as_f64().expect("sim split");
        assert!((measured - truth).abs() <= 0.02 * truth, "{key}: measured {measured} against the sim's {truth}");
    }
}

/// A sim that writes profiles only under a directory of its own refuses bench's output_dir;
/// bench asks again without it and still gets the trace.
#[test]
fn bench_profile_against_a_sim_with_its_own_profile_dir_gets_the_trace_there() {
    let own = tempfile::tempdir().expect("tmp");
    let mut cfg = from_plan_config("model=llama-3.1-8b,gpu=h100-sxm,gpus=1");
    cfg.profile_dir = own.path().to_path_buf();
    let s = crate::common::sim(cfg);
    let (code, out, err) = run(&[
        "bench",
        "-q",
        "--url",
        s.url(),
        "--concurrency",
        "4",
        "--requests",
        "12",
        "--input-len",
        "64",
        "--output-len",
        "16",
        "--profile",
        "10",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("goes on without a trace"), "{err}");
    let path = out.lines().find_map(|l| l.strip_prefix("profile: the server wrote ")).expect("the trace's path").trim().to_string();
    assert!(std::path::Path::new(&path).starts_with(own.path()), "{path} under {}", own.path().display());
    assert!(std::fs::metadata(&path).is_ok_and(|m| m.len() > 0), "{path}");
}

#[test]
fn a_sim_trace_against_its_own_plan_matches_within_a_few_points() {
    let s = from_plan_sim("model=llama-3.1-70b,gpu=h100-sxm,gpus=4");
    let (code, out, err) = run(&[
        "bench",
        "-q",
        "--url",
        s.url(),
        "--concurrency",
        "16",
        "--requests",
        "48",
        "--input-len",
        "256",
        "--output-len",
        "32",
        "--profile",
        "40",
    ]);
    assert_eq!(code, 0, "{err}");
    let path = out.lines().find_map(|l| l.strip_prefix("profile: the server wrote ")).expect("the trace's path").trim().to_string();
    let (code, doc, err) =
        run(&["trace", &path, "--vs-plan", "model=llama-3.1-70b,gpu=h100-sxm,gpus=4", "--concurrency", "16", "--json", "-"]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&doc).expect("json");
    for row in doc["comparison"]["rows"].as_array().expect("rows") {
        let (p, m) = (row["predicted_pct"].as_f64().expect("pct"), row["measured_pct"].as_f64().expect("pct"));
        // Decode steps run at the batch the bench holds (16, less as requests finish), so the split
        // follows the plan's at 16 closely but not exactly.
        assert!((p - m).abs() < 5.0, "{}: predicted {p}% measured {m}%", row["term"]);
    }
}

#[test]
fn vs_plan_json_gives_the_same_comparison_as_vs_plan() {
    let dir = tempfile::tempdir().expect("tmp");
    let plan_s = plan_json(dir.path(), "8,16").to_string_lossy().to_string();
    let f = drawn(dir.path(), Engine::TrtLlm);
    let f = f.to_string_lossy();
    let rows = |args: &[&str]| {
        let (code, out, err) = run(&[&["trace", &f, "--json", "-"], args].concat());
        assert_eq!(code, 0, "{err}");
        let doc: serde_json::Value = serde_json::from_str(&out).expect("json");
        doc["comparison"]["rows"].clone()
    };
    let from_json = rows(&["--vs-plan-json", &plan_s, "--concurrency", "16"]);
    assert!(from_json.as_array().is_some_and(|r| r.len() == 5), "{from_json}");
    assert_eq!(from_json, rows(&["--vs-plan", "model=llama-3.1-70b,gpu=h100-sxm,gpus=4", "--concurrency", "16"]));
    // Two points and no --concurrency: which one is ambiguous.
    let (code, _, err) = run(&["trace", &f, "--vs-plan-json", &plan_s]);
    assert_eq!(code, 2);
    assert!(err.contains("2 points: pick one with --concurrency"), "{err}");
}

/// `--json` naming the trace being read is refused before anything is written: the trace stays.
#[test]
fn a_report_written_over_the_trace_it_reads_is_refused_and_the_trace_kept() {
    let dir = tempfile::tempdir().expect("tmp");
    let f = drawn(dir.path(), Engine::SglangCuda);
    let before = std::fs::read(&f).expect("trace");
    let fs = f.to_string_lossy().to_string();
    let (code, _, err) = run(&["trace", &fs, "--json", &fs]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--json") && err.contains("the trace being read"), "{err}");
    assert_eq!(std::fs::read(&f).expect("still there"), before);
}

/// A plan document edited into nonsense (negative or absurd step terms, a prefill longer than the
/// step, no running requests, a negative all-reduce count, no concurrencies, a plan that does not
/// fit) is refused saying what is wrong, not compared.
#[test]
fn vs_plan_json_with_absurd_terms_no_concurrency_or_no_fit_is_refused_saying_which() {
    let dir = tempfile::tempdir().expect("tmp");
    let plan = plan_json(dir.path(), "8");
    let plan_s = plan.to_string_lossy().to_string();
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&plan).expect("plan")).expect("json");
    let f = drawn(dir.path(), Engine::TrtLlm);
    let f = f.to_string_lossy().to_string();
    let edited = dir.path().join("edited.json");
    let edited_s = edited.to_string_lossy().to_string();
    let refused = |edit: &dyn Fn(&mut serde_json::Value), want: &str| {
        let mut d = doc.clone();
        edit(&mut d);
        std::fs::write(&edited, serde_json::to_vec(&d).expect("json")).expect("write");
        let (code, _, err) = run(&["trace", &f, "--vs-plan-json", &edited_s, "--concurrency", "8"]);
        assert_eq!(code, 2, "{want}: {err}");
        assert!(err.contains(want), "{want}: {err}");
    };
    refused(&|d| d["points"][0]["step_ms"]["weights"] = serde_json::json!(-3.0), "points[].step_ms.weights is -3.0, not a step time in ms");
    refused(
        &|d| d["points"][0]["step_ms"]["weights"] = serde_json::json!(1e300),
        "points[].step_ms.weights is 1e300, not a step time in ms",
    );
    refused(&|d| d["points"][0]["step_ms"]["prefill"] = serde_json::json!(1e5), "is not above its prefill (100000.0)");
    refused(&|d| d["points"][0]["running"] = serde_json::json!(0), "points[].running is missing or not a whole number of requests from 1");
    refused(&|d| d["points"][0]["detail"]["allreduces"] = serde_json::json!(-1e300), "points[].detail.allreduces is -1e300");
    refused(&|d| d["points"][0]["concurrency"] = serde_json::json!(-8), "no point has a concurrency");
    refused(&|d| d["fits"] = serde_json::json!(false), "does not fit in GPU memory");
    // A concurrency the plan has no point at names the ones it has; 0 is no concurrency.
    let (code, _, err) = run(&["trace", &f, "--vs-plan-json", &plan_s, "--concurrency", "7"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no point at concurrency 7; it has 8: give one of them to --concurrency"), "{err}");
    let (code, _, err) = run(&["trace", &f, "--vs-plan-json", &plan_s, "--concurrency", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--concurrency 0"), "{err}");
}
