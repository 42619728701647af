//! `servetune trace`: real traces, bad input, the JSON schema, the comparison with the model.

use std::path::PathBuf;

use crate::common::servetune;

fn hta(name: &str) -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../trace/tests/data/hta").join(name)
}

fn run(args: &[&str]) -> (i32, String, String) {
    let o = servetune().args(args).output().expect("run");
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into())
}

#[test]
fn trace_prints_the_split_nccl_calls_and_unknown_kernels() {
    let f = hta("nccl_data.json.gz");
    let (code, out, err) = run(&["trace", &f.to_string_lossy()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("AllReduce      Ring/Ll: 15 calls"), "{out}");
    assert!(out.contains("Broadcast      Ring/Ll: 6 calls"), "{out}");
    assert!(out.contains("kernels no rule knew (category other)") && out.contains("nchwToNhwcKernel"), "{out}");
    assert!(out.contains("idle (host overhead)") && out.contains("median"), "{out}");
}

#[test]
fn trace_json_matches_its_schema_with_and_without_a_comparison() {
    let f = hta("sampled_rank-0.json.gz");
    let f = f.to_string_lossy();
    let (doc, _) = crate::schemas::check("trace/schema/trace.schema.json", &["trace", &f]);
    assert!(doc["comparison"].is_null());
    let (doc, _) = crate::schemas::check(
        "trace/schema/trace.schema.json",
        &["trace", &f, "--vs-plan", "model=llama-3.1-70b,gpu=h100-sxm,gpus=4", "--concurrency", "16"],
    );
    assert_eq!(doc["comparison"]["rows"].as_array().map(Vec::len), Some(5));
}

#[test]
fn vs_plan_names_the_largest_mismatch_in_words() {
    let f = hta("sampled_rank-0.json.gz");
    let (code, out, err) =
        run(&["trace", &f.to_string_lossy(), "--vs-plan", "model=llama-3.1-70b,gpu=h100-sxm,gpus=4", "--concurrency", "16"]);
    assert_eq!(code, 0, "{err}");
    let line = out.lines().find(|l| l.contains("largest mismatch:")).expect("a mismatch line");
    assert!(line.contains("% measured against") && line.contains("% predicted"), "{line}");
}

#[test]
fn vs_plan_without_a_concurrency_is_refused() {
    let f = hta("sampled_rank-0.json.gz");
    let (code, _, err) = run(&["trace", &f.to_string_lossy(), "--vs-plan", "model=llama-3.1-70b,gpu=h100-sxm,gpus=4"]);
    assert_eq!(code, 2);
    assert!(err.contains("--concurrency"), "{err}");
}

#[test]
fn bad_traces_exit_2_with_the_reason() {
    let dir = tempfile::tempdir().expect("tmp");
    let not_json = dir.path().join("notes.json");
    std::fs::write(&not_json, "these are notes, not a trace\n").expect("write");
    let whole = std::fs::read(hta("sampled_rank-0.json.gz")).expect("read");
    let cut = dir.path().join("cut.json.gz");
    std::fs::write(&cut, &whole[..whole.len() / 2]).expect("write");
    let no_events = dir.path().join("empty.json");
    std::fs::write(&no_events, r#"{"schemaVersion": 1, "traceEvents": []}"#).expect("write");
    let other_json = dir.path().join("other.json");
    std::fs::write(&other_json, r#"{"hello": "world"}"#).expect("write");
    for (file, reason) in [
        (not_json, "not Chrome-trace JSON"),
        (cut, "gzip stream is truncated"),
        (hta("rank_non_gpu.json.gz"), "no GPU events"),
        (no_events, "no GPU events"),
        (other_json, "without a traceEvents array"),
        (dir.path().join("missing.json"), "cannot open"),
    ] {
        let (code, _, err) = run(&["trace", &file.to_string_lossy()]);
        assert_eq!(code, 2, "{}: {err}", file.display());
        assert!(err.contains(reason) && err.contains(&*file.to_string_lossy()), "{}: {err}", file.display());
    }
}
