//! `servetune bench` against a real llama.cpp server (llama-cpp-python) serving a tiny random GGUF.
//!
//! `scripts/setup-test-env` builds the virtualenv (`.venv-test`, or `$SERVETUNE_TEST_VENV`). These
//! tests fail when it is missing: there is no switch to skip them, because a skipped test would
//! report itself as passed.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{bench_json, num};

struct Llama {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Llama {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Starts llama_cpp.server on a free loopback port.
fn llama() -> Llama {
    let venv = std::env::var_os("SERVETUNE_TEST_VENV").map(PathBuf::from).unwrap_or_else(|| repo_root().join(".venv-test"));
    let py = venv.join("bin/python");
    assert!(py.exists(), "{} is missing: run scripts/setup-test-env", py.display());
    let dir = tempfile::tempdir().expect("tmp");
    let model = dir.path().join("tiny.gguf");
    let st = Command::new(&py).arg(repo_root().join("scripts/make-tiny-gguf.py")).arg(&model).status().expect("run make-tiny-gguf.py");
    assert!(st.success(), "make-tiny-gguf.py failed");
    let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
    let log = std::fs::File::create(dir.path().join("server.log")).expect("log");
    // interrupt_requests: llama-cpp-python otherwise aborts a stream when the next request arrives.
    let child = Command::new(&py)
        .args([
            "-m",
            "llama_cpp.server",
            "--host",
            "127.0.0.1",
            "--n_ctx",
            "2048",
            "--model_alias",
            "tiny",
            "--interrupt_requests",
            "False",
            "--model",
        ])
        .arg(&model)
        .args(["--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start llama_cpp.server");
    let url = format!("http://127.0.0.1:{port}");
    let l = Llama { child, url, _dir: dir };
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(120) {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return l;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = std::fs::read_to_string(l._dir.path().join("server.log")).unwrap_or_default();
    panic!("llama_cpp.server did not start in 120 s:\n{log}");
}

fn records(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).expect("records").lines().map(|l| serde_json::from_str(l).expect("json line")).collect()
}

/// Every record is complete and self-consistent: TTFT before E2E, chunks in order, nothing lost.
fn check_records(recs: &[serde_json::Value], expect: usize) {
    assert_eq!(recs.len(), expect, "one record per request sent");
    for r in recs {
        assert!(r["error"].is_null(), "no failure: {r}");
        let chunks = r["chunks"].as_array().expect("chunks");
        assert!(!chunks.is_empty(), "at least one token chunk: {r}");
        let at: Vec<u64> = chunks.iter().map(|c| c["at_ns"].as_u64().expect("at_ns")).collect();
        assert!(at.windows(2).all(|w| w[0] <= w[1]), "chunks in arrival order");
        let (intended, actual, end) =
            (r["intended_ns"].as_u64().expect("i"), r["actual_ns"].as_u64().expect("a"), r["end_ns"].as_u64().expect("e"));
        assert!(intended <= actual && actual < at[0] && at[at.len() - 1] <= end, "intended <= sent < first token <= last <= end: {r}");
        let chunk_tokens: u64 = chunks.iter().map(|c| c["tokens"].as_u64().unwrap_or(0)).sum();
        assert_eq!(chunk_tokens, r["output_tokens_chunks"].as_u64().expect("n"));
        assert!(r["input_tokens_server"].as_u64().is_some() || r["input_tokens_planned"].as_u64().is_some());
    }
}

#[test]
fn llama_completions_sweep_gives_table_and_json() {
    let l = llama();
    let dir = tempfile::tempdir().expect("tmp");
    let rec = dir.path().join("r.jsonl");
    let rec_s = rec.to_string_lossy().to_string();
    let (code, v, err) = bench_json(&[
        "--url",
        &l.url,
        "--concurrency",
        "1,4,16",
        "--requests",
        "40",
        "--input-len",
        "128",
        "--output-len",
        "32",
        "--ignore-eos",
        "--eos-token-id",
        "2",
        "--records",
        &rec_s,
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["config"]["model"], "tiny", "found from /v1/models");
    assert!(v["notes"].to_string().contains("calibrated from the server's prompt_tokens"), "{}", v["notes"]);
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3);
    for r in runs {
        assert_eq!(r["requests"]["completed"], 40);
        assert_eq!(r["requests"]["failed"], 0);
        assert!(num(r, "latency_ms.ttft.p50") < num(r, "latency_ms.e2e.p50"));
        assert!(num(r, "throughput.output_tokens_per_s") > 0.0);
    }
    // The calibrated prompts land near 128 tokens by the server's own count.
    let recs = records(&rec);
    check_records(&recs, 120);
    let served: Vec<f64> = recs.iter().filter_map(|r| r["input_tokens_server"].as_f64()).collect();
    if !served.is_empty() {
        let mean = served.iter().sum::<f64>() / served.len() as f64;
        assert!((mean - 128.0).abs() / 128.0 < 0.15, "mean prompt tokens {mean}");
    }
    // Whether a knee is found depends on timing on a shared machine; the key is always there.
    assert!(v.get("saturation").is_some());
}

#[test]
fn llama_chat_streaming_works() {
    let l = llama();
    let dir = tempfile::tempdir().expect("tmp");
    let rec = dir.path().join("r.jsonl");
    let rec_s = rec.to_string_lossy().to_string();
    let (code, v, err) = bench_json(&[
        "--url",
        &l.url,
        "--api",
        "openai-chat",
        "--concurrency",
        "2",
        "--requests",
        "10",
        "--output-len",
        "16",
        "--warmup",
        "2",
        "--records",
        &rec_s,
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["runs"][0]["requests"]["completed"], 10);
    check_records(&records(&rec), 12);
}

#[test]
fn llama_forced_output_length_matches_server_usage() {
    let l = llama();
    let dir = tempfile::tempdir().expect("tmp");
    let rec = dir.path().join("r.jsonl");
    let rec_s = rec.to_string_lossy().to_string();
    // Non-streaming responses carry usage: the server's count must show the forced length.
    let (code, v, err) = bench_json(&[
        "--url",
        &l.url,
        "--no-stream",
        "--concurrency",
        "2",
        "--requests",
        "10",
        "--output-len",
        "24",
        "--ignore-eos",
        "--eos-token-id",
        "2",
        "--records",
        &rec_s,
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["runs"][0]["requests"]["stopped_early"], 0, "{}", v["runs"][0]["notes"]);
    for r in records(&rec) {
        let n = r["output_tokens_server"].as_u64().expect("usage");
        // llama-cpp-python's usage sometimes counts a few tokens more than max_tokens (it counts the
        // re-tokenized text); a forced length must never give fewer.
        assert!(n >= 24, "usage {n} for max_tokens 24: the server stopped early");
    }
}

#[test]
fn llama_streamed_chunks_agree_with_usage_of_the_same_request() {
    let l = llama();
    // The same seeded workload streamed and not streamed: per request, the streamed token chunks
    // never exceed the server's usage count for it, and every request is accounted for.
    let dir = tempfile::tempdir().expect("tmp");
    let (a, b) = (dir.path().join("s.jsonl"), dir.path().join("n.jsonl"));
    let common = [
        "--url",
        &l.url,
        "--concurrency",
        "1",
        "--requests",
        "8",
        "--output-len",
        "20",
        "--ignore-eos",
        "--eos-token-id",
        "2",
        "--seed",
        "5",
    ];
    let (c1, _, e1) = bench_json(&[&common[..], &["--records", &a.to_string_lossy()]].concat());
    let (c2, _, e2) = bench_json(&[&common[..], &["--no-stream", "--records", &b.to_string_lossy()]].concat());
    assert_eq!((c1, c2), (0, 0), "{e1} {e2}");
    let (s, n) = (records(&a), records(&b));
    assert_eq!((s.len(), n.len()), (8, 8));
    for (x, y) in s.iter().zip(&n) {
        let chunks = x["output_tokens_chunks"].as_u64().expect("chunks");
        let usage = y["output_tokens_server"].as_u64().expect("usage");
        assert!(chunks >= 1 && chunks <= usage, "streamed chunks {chunks} vs usage {usage}");
    }
}
