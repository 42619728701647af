//! Peers' own clients against `servetune sim`: sglang's `bench_serving` (from the sglang wheel)
//! with its `sglang`, `sglang-oai` and `vllm` backends, and the `openai` Python client. Each must
//! finish without error, and its output throughput and mean TTFT must agree with `servetune
//! bench` run just before it on the same simulator within 5%.
//!
//! Why one request at a time: at higher concurrency, equal-length requests move through the
//! engine's steps in lock step, and a client a few milliseconds slower to send the next request
//! misses a whole step (tens of ms), so two correct clients disagree by the step, not by their
//! accounting. At concurrency 1 a client's own overhead is a few ms against a ~0.4 s prefill and
//! a ~2 s request, well inside 5%.
//!
//! The Python side comes from `scripts/setup-test-env` (`.venv-test`, or `SERVETUNE_TEST_VENV`).

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The reference deployment (GLM-5 NVFP4 on 8 RTX PRO 6000 over PCIe P2P) with a stated step
/// overhead of 100 ms: steps of ~115 ms, so the few milliseconds a loaded machine adds to a
/// wake-up (the server's or a client's) stay well inside 5%. With the fitted ~20 ms steps,
/// `servetune bench` itself varied by 5% between runs on the shared 2-core machine.
const DEPLOYMENT: &str = "model=glm-5,quant=nvfp4,gpu=rtx-pro-6000-se,gpus=8,link=pcie5-p2p,step-overhead-ms=100";
/// Requests per run.
const REQUESTS: u32 = 6;
/// Prompt tokens per request.
const INPUT_LEN: u32 = 2048;
/// Output tokens per request.
const OUTPUT_LEN: u32 = 16;
/// How far a peer's figure may be from `servetune bench`'s.
const AGREE: f64 = 0.05;
/// The longest one client run may take (Python's imports alone take up to a minute on a busy
/// 2-core machine).
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// `sglang.benchmark.serving` run as `python -m sglang.bench_serving` would, except that the
/// `sglang` package's `__init__` (which imports torch and the serving stack) is not executed:
/// the packages on the way are registered bare, and `sglang.srt.disaggregation.utils`, which the
/// benchmark imports for one constant and which imports torch, is replaced by that constant (its
/// value in sglang 0.5.23). Everything else is the wheel's own code.
const SGLANG_BENCH: &str = r#"
import importlib.util, runpy, sys, types
root = importlib.util.find_spec("sglang").submodule_search_locations[0]
for name, sub in [("sglang", ""), ("sglang.srt", "/srt"), ("sglang.srt.utils", "/srt/utils"), ("sglang.srt.disaggregation", "/srt/disaggregation")]:
    m = types.ModuleType(name)
    m.__path__ = [root + sub]
    sys.modules[name] = m
d = types.ModuleType("sglang.srt.disaggregation.utils")
d.FAKE_BOOTSTRAP_HOST = "2.2.2.2"
sys.modules[d.__name__] = d
sys.argv[0] = "sglang.bench_serving"
runpy.run_module("sglang.benchmark.serving", run_name="__main__", alter_sys=True)
"#;

/// The `openai` client in a closed loop of one: streamed completions with the usage block
/// (`stream_options.include_usage`), TTFT to the first text, output tokens from the usage; one
/// warm-up request first, not counted.
/// argv: URL MODEL REQUESTS INPUT_LEN OUTPUT_LEN; prints one JSON line.
const OPENAI_LOOP: &str = r#"
import json, sys, time
import openai
url, model, n, inp, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
assert c.models.list().data[0].id == model
# One warm-up request first, as bench_serving sends: the client builds its stream types on first use.
for ch in c.completions.create(model=model, prompt="w1 w2", max_tokens=2, stream=True, stream_options={"include_usage": True}):
    pass
ttfts, tokens, done = [], 0, 0
start = time.perf_counter()
for i in range(n):
    prompt = " ".join(f"w{(i * 7 + j) % 1000}" for j in range(inp))
    st, first, usage = time.perf_counter(), None, None
    for ch in c.completions.create(model=model, prompt=prompt, max_tokens=out, stream=True,
                                   stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
        if ch.choices and ch.choices[0].text and first is None:
            first = time.perf_counter() - st
        if ch.usage:
            usage = ch.usage
    assert usage is not None and usage.prompt_tokens == inp and usage.completion_tokens == out, usage
    ttfts.append(first * 1e3)
    tokens += usage.completion_tokens
    done += 1
dur = time.perf_counter() - start
print(json.dumps({"completed": done, "output_throughput": tokens / dur, "mean_ttft_ms": sum(ttfts) / len(ttfts)}))
"#;

fn venv_python() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = std::env::var_os("SERVETUNE_TEST_VENV").map(PathBuf::from).unwrap_or_else(|| root.join(".venv-test"));
    let py = venv.join("bin/python");
    assert!(py.exists(), "{} is missing: run scripts/setup-test-env", py.display());
    py
}

/// A `servetune sim` process; killed when dropped.
struct Sim {
    child: Child,
    url: String,
}

impl Sim {
    fn start(args: &[&str]) -> Sim {
        let mut child = Command::new(env!("CARGO_BIN_EXE_servetune"))
            .arg("sim")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn servetune sim");
        let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("first line");
        let url = line.trim().rsplit(' ').next().unwrap_or_default().to_string();
        assert!(url.starts_with("http://127.0.0.1:"), "unexpected first line {line:?}");
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut out, &mut std::io::sink());
        });
        Sim { child, url }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `cmd` with its output in files under `dir`, killed at `RUN_LIMIT`; returns (success,
/// stdout, stderr).
fn run_bounded(mut cmd: Command, dir: &Path, tag: &str) -> (bool, String, String) {
    let (out_path, err_path) = (dir.join(format!("{tag}.out")), dir.join(format!("{tag}.err")));
    let out = std::fs::File::create(&out_path).expect("stdout file");
    let err = std::fs::File::create(&err_path).expect("stderr file");
    let mut child = cmd.stdin(Stdio::null()).stdout(out).stderr(err).spawn().expect("spawn");
    let deadline = Instant::now() + RUN_LIMIT;
    let ok = loop {
        match child.try_wait().expect("wait") {
            Some(st) => break st.success(),
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break false;
            }
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let read = |p: &Path| {
        let mut s = String::new();
        let _ = std::fs::File::open(p).and_then(|mut f| f.read_to_string(&mut s));
        s
    };
    (ok, read(&out_path), read(&err_path))
}

/// A word-level tokenizer (Hugging Face `tokenizer.json` and `tokenizer_config.json` in `dir`)
/// whose tokens are whitespace-separated words: the simulator counts one word as one token, so the
/// client's lengths and the server's agree exactly. Its vocabulary is the simulator's output words
/// and `w0`..`w999`.
fn write_tokenizer(dir: &Path) {
    let mut vocab = serde_json::Map::new();
    vocab.insert("[UNK]".into(), json!(0));
    let words = servetune_sim::wire::WORDS.iter().map(|w| w.trim().to_string()).chain((0..1000).map(|i| format!("w{i}")));
    for w in words {
        let id = vocab.len();
        vocab.entry(w).or_insert(json!(id));
    }
    let tok = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
        "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
    });
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).expect("tokenizer.json");
    let cfg = json!({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "model_max_length": 1_000_000});
    std::fs::write(dir.join("tokenizer_config.json"), cfg.to_string()).expect("tokenizer_config.json");
}

/// What a client measured.
#[derive(Debug, Clone, Copy)]
struct Figures {
    output_tok_s: f64,
    mean_ttft_ms: f64,
}

/// `servetune bench` with `api` on the same workload.
fn servetune_bench(url: &str, api: &str, dir: &Path) -> Figures {
    let json_path = dir.join(format!("bench-{api}.json"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_servetune"));
    cmd.args(["bench", "-q", "--url", url, "--api", api, "--concurrency", "1", "--ignore-eos"])
        .args(["--requests", &REQUESTS.to_string(), "--input-len", &INPUT_LEN.to_string(), "--output-len", &OUTPUT_LEN.to_string()])
        .arg("--json")
        .arg(&json_path);
    let (ok, out, err) = run_bounded(cmd, dir, &format!("bench-{api}"));
    assert!(ok, "servetune bench --api {api} failed:\n{out}\n{err}");
    let v: Value = serde_json::from_slice(&std::fs::read(&json_path).expect("bench json")).expect("bench json parses");
    let run = &v["runs"][0];
    assert_eq!(run["requests"]["completed"].as_u64(), Some(u64::from(REQUESTS)), "{}", run["requests"]);
    assert_eq!(run["requests"]["failed"].as_u64(), Some(0), "{}", run["requests"]);
    Figures {
        output_tok_s: run["throughput"]["output_tokens_per_s"].as_f64().expect("throughput"),
        mean_ttft_ms: run["latency_ms"]["ttft"]["mean"].as_f64().expect("ttft"),
    }
}

/// sglang's `bench_serving` with `backend`; its figures, and the `/server_info` document it saved.
fn sglang_bench_serving(py: &Path, url: &str, backend: &str, tokenizer: &Path, dir: &Path) -> (Figures, Value) {
    let results = dir.join(format!("sglang-{backend}.jsonl"));
    let mut cmd = Command::new(py);
    cmd.args(["-c", SGLANG_BENCH, "--backend", backend, "--base-url", url, "--model", "glm-5", "--dataset-name", "random-ids"])
        .arg("--tokenizer")
        .arg(tokenizer)
        .args(["--random-input-len", &INPUT_LEN.to_string(), "--random-output-len", &OUTPUT_LEN.to_string(), "--random-range-ratio", "1.0"])
        .args(["--num-prompts", &REQUESTS.to_string(), "--max-concurrency", "1", "--request-rate", "inf", "--seed", "1"])
        .arg("--output-file")
        .arg(&results)
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1");
    let (ok, out, err) = run_bounded(cmd, dir, &format!("sglang-{backend}"));
    let tail = |s: &str| s.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
    assert!(ok, "bench_serving --backend {backend} failed:\n{}\n{}", tail(&out), tail(&err));
    assert!(!err.contains("Traceback") && !out.contains("Traceback"), "bench_serving --backend {backend} raised:\n{}", tail(&err));
    let text = std::fs::read_to_string(&results).expect("bench_serving results");
    // Python's json writes `--request-rate inf` as the bare word Infinity, which JSON has not.
    let line = text.lines().last().expect("a result line").replace("-Infinity", "null").replace("Infinity", "null").replace("NaN", "null");
    let v: Value = serde_json::from_str(&line).expect("result JSON");
    assert_eq!(v["completed"].as_u64(), Some(u64::from(REQUESTS)), "{}", tail(&out));
    assert_eq!(v["total_output_tokens"].as_u64(), Some(u64::from(REQUESTS * OUTPUT_LEN)));
    assert_eq!(v["total_input_tokens"].as_u64(), Some(u64::from(REQUESTS * INPUT_LEN)));
    let f = Figures {
        output_tok_s: v["output_throughput"].as_f64().expect("output_throughput"),
        mean_ttft_ms: v["mean_ttft_ms"].as_f64().expect("mean_ttft_ms"),
    };
    (f, v["server_info"].clone())
}

fn openai_loop(py: &Path, url: &str, dir: &Path) -> Figures {
    let mut cmd = Command::new(py);
    cmd.args(["-c", OPENAI_LOOP, url, "glm-5", &REQUESTS.to_string(), &INPUT_LEN.to_string(), &OUTPUT_LEN.to_string()]);
    let (ok, out, err) = run_bounded(cmd, dir, "openai");
    assert!(ok, "the openai client failed:\n{out}\n{err}");
    let v: Value = serde_json::from_str(out.lines().last().unwrap_or_default()).expect("openai loop JSON");
    assert_eq!(v["completed"].as_u64(), Some(u64::from(REQUESTS)), "{v}");
    Figures { output_tok_s: v["output_throughput"].as_f64().expect("throughput"), mean_ttft_ms: v["mean_ttft_ms"].as_f64().expect("ttft") }
}

/// Asserts `peer` within [`AGREE`] of `reference` on both figures; prints both for the log.
fn agree(client: &str, peer: Figures, reference: Figures) {
    println!(
        "{client:28} output {:8.2} tok/s (servetune bench {:8.2})  mean TTFT {:8.2} ms (servetune bench {:8.2})",
        peer.output_tok_s, reference.output_tok_s, peer.mean_ttft_ms, reference.mean_ttft_ms
    );
    let off = |a: f64, b: f64| (a - b).abs() / b;
    assert!(
        off(peer.output_tok_s, reference.output_tok_s) <= AGREE,
        "{client}: output {:.2} tok/s against servetune bench's {:.2}",
        peer.output_tok_s,
        reference.output_tok_s
    );
    assert!(
        off(peer.mean_ttft_ms, reference.mean_ttft_ms) <= AGREE,
        "{client}: mean TTFT {:.2} ms against servetune bench's {:.2}",
        peer.mean_ttft_ms,
        reference.mean_ttft_ms
    );
}

/// One test, so the runs never overlap (they share the machine's two cores with nothing else of
/// this binary's).
#[test]
fn peer_clients_finish_and_agree_with_servetune_bench() {
    let py = venv_python();
    let dir = tempfile::tempdir().expect("tmp");
    let tokenizer = dir.path().join("tokenizer");
    std::fs::create_dir_all(&tokenizer).expect("tokenizer dir");
    write_tokenizer(&tokenizer);
    let sim = Sim::start(&["--listen", "127.0.0.1:0", "--from-plan", DEPLOYMENT]);

    for (backend, api) in [("sglang", "sglang"), ("sglang-oai", "openai-completions"), ("vllm", "openai-completions")] {
        let reference = servetune_bench(&sim.url, api, dir.path());
        let (peer, info) = sglang_bench_serving(&py, &sim.url, backend, &tokenizer, dir.path());
        if backend.starts_with("sglang") {
            // What the client read after its run: the per-replica states, and no speculative
            // accept length (the simulator runs no draft model).
            assert!(info["internal_states"][0].is_object(), "server_info as saved by bench_serving: {info}");
            assert!(info["internal_states"][0].get("avg_spec_accept_length").is_none(), "{info}");
        }
        agree(&format!("sglang bench_serving {backend}"), peer, reference);
    }
    let reference = servetune_bench(&sim.url, "openai-completions", dir.path());
    agree("openai client", openai_loop(&py, &sim.url, dir.path()), reference);
}
