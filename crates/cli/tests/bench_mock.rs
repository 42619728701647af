//! `servetune bench` against the simulator in exact-timing mode, whose timing and faults are known.

use servetune_sim::{ExactTiming, Faults};

use crate::common::{bench_json, exact, ms, num, servetune, timed};

#[test]
fn known_ttft_and_itl_are_measured_within_three_percent() {
    // 3% of 40 ms gaps, plus two wake-ups (the server's and the client's) of the wake-up jitter
    // measured on this machine during the run.
    let probe = crate::common::JitterProbe::start();
    let s = timed(ms(80), ms(40));
    let (code, v, err) =
        bench_json(&["--url", s.url(), "--concurrency", "4", "--requests", "40", "--output-len", "8", "--input-len", "16"]);
    let jitter = probe.p90_ms();
    assert_eq!(code, 0, "{err}");
    let ttft = num(&v, "runs.0.latency_ms.ttft.p50");
    let itl = num(&v, "runs.0.latency_ms.itl.p50");
    let tpot = num(&v, "runs.0.latency_ms.tpot.p50");
    assert!((ttft - 80.0).abs() < 0.03 * 80.0 + 2.0 * jitter, "ttft p50 {ttft} (jitter {jitter:.3} ms)");
    assert!((itl - 40.0).abs() < 0.03 * 40.0 + 2.0 * jitter, "itl p50 {itl} (jitter {jitter:.3} ms)");
    assert!((tpot - 40.0).abs() < 0.03 * 40.0 + 2.0 * jitter, "tpot p50 {tpot} (jitter {jitter:.3} ms)");
    assert_eq!(num(&v, "runs.0.requests.completed"), 40.0);
    // Closed loop: intended == actual, so corrected and uncorrected agree.
    let unc = num(&v, "runs.0.latency_ms.ttft_uncorrected.p50");
    assert!((ttft - unc).abs() < 1.0, "{ttft} vs {unc}");
}

#[test]
fn json_contract_has_the_documented_fields() {
    let s = timed(ms(0), ms(1));
    let (code, v, err) = bench_json(&["--url", s.url(), "--concurrency", "1,4,16", "--requests", "32", "--output-len", "8"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["schema"], "servetune.bench/1");
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3);
    for (r, c) in runs.iter().zip([1, 4, 16]) {
        assert_eq!(r["concurrency"], c);
        assert!(r["rate"].is_null());
        for k in ["completed", "failed"] {
            assert!(r["requests"][k].is_u64(), "{k}");
        }
        assert!(r["requests"]["errors"].is_object());
        for m in ["ttft", "ttft_uncorrected", "itl", "tpot", "e2e", "e2e_uncorrected"] {
            for s in ["mean", "p50", "p90", "p99", "max"] {
                assert!(r["latency_ms"][m][s].is_f64(), "{m}.{s} in {r:#}");
            }
        }
        for s in ["mean", "p50", "p90", "p99", "max"] {
            assert!(r["schedule_lag_ms"][s].is_f64());
        }
        for t in ["requests_per_s", "output_tokens_per_s", "total_tokens_per_s"] {
            assert!(r["throughput"][t].as_f64().expect(t) > 0.0);
        }
    }
    assert!(v.get("saturation").is_some(), "saturation key present (null or object)");
}

#[test]
fn poisson_run_achieves_its_rate_within_two_percent() {
    let s = timed(ms(0), ms(0));
    let (code, v, err) = bench_json(&[
        "--url",
        s.url(),
        "--rate",
        "200",
        "--arrival",
        "poisson",
        "--requests",
        "5000",
        "--output-len",
        "4",
        "--input-len",
        "8",
    ]);
    assert_eq!(code, 0, "{err}");
    let rate = num(&v, "runs.0.achieved_send_rate_per_s");
    assert!((rate - 200.0).abs() / 200.0 < 0.02, "achieved {rate} req/s");
    assert_eq!(num(&v, "runs.0.requests.completed"), 5000.0);
    assert_eq!(v["runs"][0]["rate"], 200.0);
}

#[test]
fn too_small_concurrency_cap_shows_in_corrected_latency_only() {
    // 20 req/s but one slot and 100 ms per request: requests queue for the slot.
    let s = timed(ms(50), ms(10));
    let (code, v, err) = bench_json(&[
        "--url",
        s.url(),
        "--rate",
        "20",
        "--arrival",
        "constant",
        "--max-concurrency",
        "1",
        "--requests",
        "20",
        "--output-len",
        "6",
    ]);
    assert_eq!(code, 0, "{err}");
    let corrected = num(&v, "runs.0.latency_ms.ttft.p99");
    let uncorrected = num(&v, "runs.0.latency_ms.ttft_uncorrected.p99");
    let lag = num(&v, "runs.0.schedule_lag_ms.p99");
    assert!(uncorrected < 70.0, "uncorrected TTFT stays near the server's 50 ms: {uncorrected}");
    assert!(corrected > 500.0, "corrected TTFT includes the queueing: {corrected}");
    assert!(lag > 400.0, "lag shows the wait: {lag}");
    let notes = v["runs"][0]["notes"].to_string();
    assert!(notes.contains("waited for a free slot"), "{notes}");
}

fn error_kind_of(faults: Faults, extra: &[&str]) -> serde_json::Value {
    let s = exact(ExactTiming::default(), faults);
    let mut args = vec!["--url", s.url(), "--concurrency", "2", "--requests", "6", "--output-len", "6", "--no-calibrate"];
    args.extend_from_slice(extra);
    let (_code, v, err) = bench_json(&args);
    assert!(v.is_object(), "results written even when requests fail: {err}");
    v["runs"][0]["requests"].clone()
}

#[test]
fn http_errors_are_recorded_as_http_status() {
    let r = error_kind_of(Faults { error_status: Some(503), error_rate: 1.0, ..Default::default() }, &[]);
    assert_eq!(r["errors"]["http_status"], 6);
    assert!(r["error_examples"]["http_status"][0].as_str().unwrap_or("").contains("HTTP 503"), "{r}");
}

#[test]
fn truncated_streams_are_recorded() {
    let r = error_kind_of(Faults { truncate_rate: 1.0, ..Default::default() }, &[]);
    assert_eq!(r["errors"]["truncated_stream"], 6, "{r}");
}

#[test]
fn malformed_events_are_recorded() {
    let r = error_kind_of(Faults { malformed_rate: 1.0, ..Default::default() }, &[]);
    assert_eq!(r["errors"]["malformed_event"], 6, "{r}");
}

#[test]
fn error_payload_mid_stream_is_recorded() {
    let r = error_kind_of(Faults { fail_rate: 1.0, ..Default::default() }, &[]);
    assert_eq!(r["errors"]["error_payload"], 6, "{r}");
    assert!(r["error_examples"]["error_payload"][0].as_str().unwrap_or("").contains("injected error"), "{r}");
}

#[test]
fn stalled_server_hits_the_timeout_and_keeps_partial_chunks() {
    let s = exact(ExactTiming::default(), Faults { stall_for: ms(5_000), stall_rate: 1.0, ..Default::default() });
    let dir = tempfile::tempdir().expect("tmp");
    let rec = dir.path().join("r.jsonl");
    let out = servetune()
        .args([
            "bench",
            "--url",
            s.url(),
            "--concurrency",
            "2",
            "--requests",
            "2",
            "--output-len",
            "6",
            "--timeout",
            "300ms",
            "-q",
            "--records",
        ])
        .arg(&rec)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "all failed is a runtime failure: {}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&rec).expect("records").lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    assert_eq!(lines.len(), 2);
    for l in &lines {
        assert_eq!(l["error"], "timeout");
        assert_eq!(l["chunks"].as_array().map(Vec::len), Some(1), "the first chunk measured before the stall is kept: {l}");
    }
}

#[test]
fn a_response_that_is_not_sse_is_a_malformed_event() {
    let r = error_kind_of(Faults { not_sse_rate: 1.0, ..Default::default() }, &[]);
    assert_eq!(r["errors"]["malformed_event"], 6, "{r}");
    assert!(r["error_examples"]["malformed_event"][0].as_str().unwrap_or("").contains("not an event stream"), "{r}");
    // Without streaming, the HTML body is named as what it is, with the URL to check.
    let r = error_kind_of(Faults { not_sse_rate: 1.0, ..Default::default() }, &["--no-stream"]);
    assert_eq!(r["errors"]["malformed_event"], 6, "{r}");
    let e = r["error_examples"]["malformed_event"][0].as_str().unwrap_or("");
    assert!(e.starts_with("the response is not a JSON document (content-type \"text/html\", it starts \"<html><body>not an API"), "{e}");
    assert!(e.contains("/v1/completions the right API path?"), "{e}");
}

#[test]
fn wrong_api_path_exits_2_with_a_hint() {
    let s = timed(ms(0), ms(0));
    let url = format!("{}/wrong", s.url());
    let (code, v, err) = bench_json(&["--url", &url, "--concurrency", "1", "--requests", "2", "--no-calibrate"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("HTTP 404") && err.contains("--api"), "{err}");
    assert_eq!(v["runs"][0]["requests"]["errors"]["http_status"], 2, "results still written");
}

#[test]
fn chat_reasoning_counts_as_first_token_and_role_chunk_does_not() {
    let probe = crate::common::JitterProbe::start();
    let s = exact(ExactTiming { ttft: ms(30), itl: ms(20), reasoning_tokens: 3, ..Default::default() }, Faults::default());
    let (code, v, err) =
        bench_json(&["--url", s.url(), "--api", "openai-chat", "--concurrency", "2", "--requests", "6", "--output-len", "6"]);
    let jitter = probe.p90_ms();
    assert_eq!(code, 0, "{err}");
    let ttft = num(&v, "runs.0.latency_ms.ttft.p50");
    let ttfc = num(&v, "runs.0.latency_ms.ttfc.p50");
    // The role chunk leaves at 0 ms, the first reasoning token at 30 ms and the next at 50 ms:
    // TTFT must be the 30 ms one, told from both by a margin that a loaded machine's
    // scheduling delay (two wake-ups of measured jitter on top) does not cross.
    assert!(
        ttft > 20.0 && ttft < 42.0 + 2.0 * jitter,
        "TTFT at the first reasoning token, not the role chunk at 0 ms: {ttft} (jitter {jitter:.3})"
    );
    // Content starts at 90 ms, after the reasoning tokens at 30, 50 and 70; the next is at 110.
    assert!(ttfc > 80.0 && ttfc < 102.0 + 2.0 * jitter, "first content token after 3 reasoning tokens: {ttfc} (jitter {jitter:.3})");
}

#[test]
fn several_tokens_per_chunk_are_reconciled_from_usage() {
    let s = exact(ExactTiming { itl: ms(8), tokens_per_chunk: 4, ..Default::default() }, Faults::default());
    let (code, v, err) = bench_json(&["--url", s.url(), "--concurrency", "2", "--requests", "4", "--output-len", "16"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["runs"][0]["requests"]["token_count_mismatches"], 4);
    let per_chunk = num(&v, "runs.0.latency_ms.itl.p50");
    let per_token = num(&v, "runs.0.latency_ms.itl_per_token.p50");
    assert!((per_chunk / per_token - 4.0).abs() < 0.2, "{per_chunk} vs {per_token}");
    let tput = num(&v, "runs.0.throughput.output_tokens_per_s");
    let req = num(&v, "runs.0.throughput.requests_per_s");
    assert!((tput / req - 16.0).abs() < 0.01, "16 tokens per request from usage");
}

#[test]
fn early_stop_with_ignore_eos_is_reported() {
    let s = exact(ExactTiming::default(), Faults { early_stop_at: Some(3), ..Default::default() });
    let (code, v, err) = bench_json(&["--url", s.url(), "--concurrency", "1", "--requests", "3", "--output-len", "10", "--ignore-eos"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["runs"][0]["requests"]["stopped_early"], 3);
    assert!(v["runs"][0]["notes"].to_string().contains("does not honour ignore_eos"));
}

#[test]
fn sglang_native_api_counts_tokens_from_meta_info() {
    let s = exact(ExactTiming { tokens_per_chunk: 2, itl: ms(2), ..Default::default() }, Faults::default());
    let (code, v, err) = bench_json(&["--url", s.url(), "--api", "sglang", "--concurrency", "2", "--requests", "4", "--output-len", "10"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["runs"][0]["requests"]["token_count_mismatches"], 0, "sglang reports exact per-chunk counts");
    let tput = num(&v, "runs.0.throughput.output_tokens_per_s") / num(&v, "runs.0.throughput.requests_per_s");
    assert!((tput - 10.0).abs() < 0.01);
}

#[test]
fn non_streaming_mode_records_one_chunk() {
    // The whole body arrives at once after 20 ms + 4 x 5 ms: 10% of that, plus the wake-up jitter
    // measured during the run for each of the server's five timed waits and the client's.
    let probe = crate::common::JitterProbe::start();
    let s = timed(ms(20), ms(5));
    let (code, v, err) = bench_json(&["--url", s.url(), "--no-stream", "--concurrency", "2", "--requests", "4", "--output-len", "5"]);
    let jitter = probe.p90_ms();
    assert_eq!(code, 0, "{err}");
    let ttft = num(&v, "runs.0.latency_ms.ttft.p50");
    let e2e = num(&v, "runs.0.latency_ms.e2e.p50");
    assert!((ttft - e2e).abs() < 1.0, "one chunk: TTFT {ttft} equals E2E {e2e}");
    assert!((ttft - 40.0).abs() < 4.0 + 6.0 * jitter, "TTFT {ttft} for 40 ms (jitter {jitter:.3} ms)");
}

#[test]
fn slo_goodput_and_definitions_are_reported() {
    let s = timed(ms(20), ms(5));
    let dir = tempfile::tempdir().expect("tmp");
    let out = servetune()
        .args([
            "bench",
            "--url",
            s.url(),
            "--concurrency",
            "2",
            "--requests",
            "8",
            "--output-len",
            "5",
            "--slo",
            "ttft:p99<1s,tpot:p90<2ms",
            "--definitions",
            "vllm",
        ])
        .current_dir(dir.path())
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    assert!(text.contains("SLOs NOT met"), "tpot 5 ms > 2 ms: {text}");
    assert!(text.contains("under vllm definitions"), "{text}");
    assert!(text.contains("(E2E - TTFT) / (output tokens - 1)"), "{text}");
}

#[test]
fn all_output_files_are_written() {
    let s = timed(ms(0), ms(1));
    let dir = tempfile::tempdir().expect("tmp");
    let p = |n: &str| dir.path().join(n);
    let out = servetune()
        .args(["bench", "--url", s.url(), "--concurrency", "1,2", "--requests", "5", "--output-len", "4", "--warmup", "2", "-q"])
        .arg("--json")
        .arg(p("a.json"))
        .arg("--records")
        .arg(p("r.jsonl"))
        .arg("--csv")
        .arg(p("s.csv"))
        .arg("--markdown")
        .arg(p("s.md"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let recs = std::fs::read_to_string(p("r.jsonl")).expect("records");
    assert_eq!(recs.lines().count(), 14, "5 measured + 2 warmup per point, 2 points");
    assert_eq!(recs.lines().filter(|l| l.contains("\"warmup\":true")).count(), 4);
    let csv = std::fs::read_to_string(p("s.csv")).expect("csv");
    assert_eq!(csv.lines().count(), 3);
    let md = std::fs::read_to_string(p("s.md")).expect("md");
    assert!(md.starts_with("# servetune bench"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p("a.json")).expect("json")).expect("parse");
    assert_eq!(v["runs"][0]["requests"]["completed"], 5, "warmup excluded");
    assert_eq!(v["runs"][0]["requests"]["warmup"], 2);
}

#[test]
fn tokenizer_gives_exact_prompt_lengths_end_to_end() {
    let s = timed(ms(0), ms(0));
    let dir = tempfile::tempdir().expect("tmp");
    let tok = dir.path().join("tokenizer.json");
    // A word-level vocabulary: the simulator counts one token per word, as this tokenizer does.
    std::fs::write(
        &tok,
        r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":0,"content":"</s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
        "normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
        "model":{"type":"WordLevel","vocab":{"</s>":0,"the":1,"of":2,"and":3,"river":4,"tok":5,"<unk>":6},"unk_token":"<unk>"}}"#,
    )
    .expect("write");
    let rec = dir.path().join("r.jsonl");
    let (code, v, err) = bench_json(&[
        "--url",
        s.url(),
        "--concurrency",
        "2",
        "--requests",
        "6",
        "--input-len",
        "uniform:10..50",
        "--output-len",
        "5",
        "--tokenizer",
        &tok.to_string_lossy(),
        "--records",
        &rec.to_string_lossy(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["config"]["eos_token_id"], 0, "EOS found in the tokenizer");
    for l in std::fs::read_to_string(&rec).expect("records").lines() {
        let r: serde_json::Value = serde_json::from_str(l).expect("json");
        assert_eq!(r["input_tokens_planned"], r["input_tokens_server"], "{r}");
        assert_eq!(r["output_tokens_tokenizer"], 5, "{r}");
    }
}

#[test]
fn each_run_reports_the_clients_self_check() {
    let s = timed(ms(0), ms(2));
    let (code, v, err) = bench_json(&["--url", s.url(), "--concurrency", "8", "--requests", "64", "--output-len", "16"]);
    assert_eq!(code, 0, "{err}");
    let c = &v["runs"][0]["client"];
    assert!(c["wake_delay_ms"]["samples"].as_u64().expect("samples") > 0, "{c:#}");
    let (p50, p99, max) = (
        num(&v, "runs.0.client.wake_delay_ms.p50"),
        num(&v, "runs.0.client.wake_delay_ms.p99"),
        num(&v, "runs.0.client.wake_delay_ms.max"),
    );
    assert!(p50 <= p99 && p99 <= max, "{c:#}");
    if cfg!(target_os = "linux") {
        for k in ["cpu_user_s", "cpu_system_s", "cpu_us_per_output_token", "cpu_busy"] {
            assert!(c[k].as_f64().is_some_and(|x| x >= 0.0), "{k} in {c:#}");
        }
    }
}
