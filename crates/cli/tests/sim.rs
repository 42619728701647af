//! `servetune bench` against `servetune sim`: timing, plateau, KV exhaustion, every fault mode,
//! request validation, and the CLI's bad input.

use std::time::Duration;

use servetune_sim::{Faults, MetricsStyle, SimConfig};

use crate::common::{bench_json, flat_profile, num, raw_http, sim};

#[test]
fn tpot_at_concurrency_one_equals_the_step_time() {
    // Margins: 3% (5% for TTFT) plus two wake-ups (the server's and the client's) of this
    // machine's measured jitter, spread over the 11 intervals TPOT averages.
    let probe = crate::common::JitterProbe::start();
    let s = sim(SimConfig::new(flat_profile(40.0, 64, 1 << 20)));
    let (code, v, err) = bench_json(&["--url", s.url(), "--concurrency", "1", "--requests", "4", "--output-len", "12", "--ignore-eos"]);
    let jitter = probe.p90_ms();
    assert_eq!(code, 0, "{err}");
    let tpot = num(&v, "runs.0.latency_ms.tpot.p50");
    assert!((tpot - 40.0).abs() < 0.03 * 40.0 + 2.0 * jitter / 11.0, "TPOT {tpot} ms vs 40 ms step (jitter {jitter:.3} ms)");
    let ttft = num(&v, "runs.0.latency_ms.ttft.p50");
    assert!((ttft - 40.0).abs() < 0.05 * 40.0 + 2.0 * jitter, "first token after one prefill step: {ttft} (jitter {jitter:.3} ms)");
}

#[test]
fn kv_exhaustion_shows_as_queued_requests_in_scraped_metrics() {
    // 2,048 KV tokens hold about 7 requests of 200 + 64 tokens; 32 are sent at once.
    let s = sim(SimConfig::new(flat_profile(5.0, 256, 2048)));
    let (code, v, err) = bench_json(&[
        "--url",
        s.url(),
        "--concurrency",
        "32",
        "--requests",
        "64",
        "--input-len",
        "200",
        "--output-len",
        "64",
        "--ignore-eos",
        "--scrape-interval",
        "200ms",
    ]);
    assert_eq!(code, 0, "{err}");
    let m = &v["runs"][0]["server_metrics"];
    assert_eq!(m["style"], "sglang");
    assert!(m["max_queued"].as_f64().unwrap_or(0.0) >= 10.0, "{m}");
    assert!(m["max_running"].as_f64().unwrap_or(99.0) < 32.0, "{m}");
    assert!(m["max_kv_usage"].as_f64().unwrap_or(0.0) > 0.8, "{m}");
    assert!(m["summary"].to_string().contains("caps concurrency"), "{}", m["summary"]);
}

#[test]
fn vllm_metric_style_is_scraped_too() {
    let cfg = SimConfig { metrics_style: MetricsStyle::Vllm, ..SimConfig::new(flat_profile(5.0, 4, 1 << 20)) };
    let s = sim(cfg);
    let (code, v, err) =
        // Requests of 100 steps of 5 ms keep 4 running for about 2 s: ten scrapes, so at least one
        // lands while the cap is full even on a loaded machine.
        bench_json(&["--url", s.url(), "--concurrency", "8", "--requests", "16", "--output-len", "100", "--ignore-eos", "--scrape-interval", "200ms"]);
    assert_eq!(code, 0, "{err}");
    let m = &v["runs"][0]["server_metrics"];
    assert_eq!(m["style"], "vllm");
    assert_eq!(m["max_running"], 4.0, "{m}");
}

fn faulty(f: Faults, extra: &[&str]) -> serde_json::Value {
    let cfg = SimConfig { faults: f, ..SimConfig::new(flat_profile(5.0, 64, 1 << 20)) };
    let s = sim(cfg);
    let mut args = vec!["--url", s.url(), "--concurrency", "2", "--requests", "6", "--output-len", "20", "--ignore-eos", "--no-calibrate"];
    args.extend_from_slice(extra);
    let (_, v, err) = bench_json(&args);
    assert!(v.is_object(), "{err}");
    v["runs"][0]["requests"].clone()
}

#[test]
fn fault_error_status_is_recorded_as_http_status() {
    let r = faulty(Faults { error_status: Some(503), error_rate: 1.0, ..Default::default() }, &[]);
    assert_eq!(r["errors"]["http_status"], 6, "{r}");
    assert!(r["error_examples"]["http_status"][0].as_str().unwrap_or("").contains("HTTP 503"));
}

#[test]
fn fault_fail_rate_is_recorded_as_error_payload() {
    let r = faulty(Faults { fail_rate: 1.0, ..Default::default() }, &[]);
    assert_eq!(r["errors"]["error_payload"], 6, "{r}");
}

#[test]
fn fault_stall_is_recorded_as_timeout() {
    let r = faulty(Faults { stall_every: Some(3), stall_for: Duration::from_secs(3), ..Default::default() }, &["--timeout", "800ms"]);
    assert_eq!(r["errors"]["timeout"], 6, "{r}");
}

#[test]
fn fault_slow_start_is_recorded_as_http_503() {
    let cfg = SimConfig {
        faults: Faults { slow_start: Some(Duration::from_secs(30)), ..Default::default() },
        ..SimConfig::new(flat_profile(5.0, 64, 1 << 20))
    };
    let s = sim(cfg);
    assert_eq!(raw_http(s.url(), "GET", "/health", "").0, 503);
    let (_, v, _) = bench_json(&["--url", s.url(), "--concurrency", "1", "--requests", "2", "--output-len", "4", "--no-calibrate"]);
    assert_eq!(v["runs"][0]["requests"]["errors"]["http_status"], 2, "{}", v["runs"][0]["requests"]);
}

#[test]
fn fault_crash_is_recorded_as_truncated_then_connect() {
    let cfg = SimConfig {
        faults: Faults { crash_after: Some(Duration::from_millis(1500)), ..Default::default() },
        ..SimConfig::new(flat_profile(10.0, 64, 1 << 20))
    };
    let s = sim(cfg);
    let (_, v, err) =
        bench_json(&["--url", s.url(), "--concurrency", "2", "--requests", "12", "--output-len", "100", "--ignore-eos", "--no-calibrate"]);
    let e = &v["runs"][0]["requests"]["errors"];
    assert!(e["truncated_stream"].as_u64().unwrap_or(0) >= 1, "in-flight streams break: {e} {err}");
    assert!(e["connect"].as_u64().unwrap_or(0) >= 1, "later requests cannot connect: {e}");
    assert!(v["runs"][0]["requests"]["completed"].as_u64().unwrap_or(0) >= 1, "requests before the crash completed");
}

#[test]
fn bad_requests_get_openai_style_400_bodies() {
    let s = sim(SimConfig::new(flat_profile(2.0, 8, 4096)));
    for (body, needle) in [
        ("{not json", "not valid JSON"),
        (r#"{"prompt":"a","max_tokens":4,"bogus":1}"#, "unknown field \"bogus\""),
        (r#"{"prompt":"a","max_tokens":0}"#, "max_tokens must be at least 1"),
        (r#"{"prompt":"a","max_tokens":5000}"#, "more than the KV cache"),
    ] {
        let (status, text) = raw_http(s.url(), "POST", "/v1/completions", body);
        assert_eq!(status, 400, "{body}: {text}");
        let v: serde_json::Value = serde_json::from_str(&text).expect("json error body");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["error"]["message"].as_str().unwrap_or("").contains(needle), "{text}");
    }
}

#[test]
fn sglang_native_endpoints_answer() {
    let s = sim(SimConfig::new(flat_profile(2.0, 8, 4096)));
    let (st, info) = raw_http(s.url(), "GET", "/get_server_info", "");
    assert_eq!(st, 200);
    let v: serde_json::Value = serde_json::from_str(&info).expect("json");
    assert_eq!(v["max_running_requests"], 8);
    assert_eq!(v["max_total_num_tokens"], 4096);
    assert_eq!(raw_http(s.url(), "GET", "/health_generate", "").0, 200);
    let (code, v, err) =
        bench_json(&["--url", s.url(), "--api", "sglang", "--concurrency", "2", "--requests", "4", "--output-len", "8", "--ignore-eos"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(num(&v, "runs.0.throughput.output_tokens_per_s") / num(&v, "runs.0.throughput.requests_per_s"), 8.0);
    assert_eq!(v["runs"][0]["requests"]["token_count_mismatches"], 0);
}

#[test]
fn chat_streams_with_usage_and_a_role_chunk() {
    let s = sim(SimConfig::new(flat_profile(4.0, 8, 1 << 16)));
    let (code, v, err) = bench_json(&[
        "--url",
        s.url(),
        "--api",
        "openai-chat",
        "--concurrency",
        "2",
        "--requests",
        "4",
        "--output-len",
        "10",
        "--ignore-eos",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["runs"][0]["requests"]["token_count_mismatches"], 0, "usage agrees with chunks");
    assert_eq!(v["runs"][0]["requests"]["stopped_early"], 0);
    // No note about the stream (the client's self-check may warn on a loaded machine: not this test's subject).
    let notes = v["runs"][0]["notes"].as_array().expect("notes");
    let about_the_stream: Vec<_> =
        notes.iter().filter_map(|n| n.as_str()).filter(|n| !n.contains("the client read late") && !n.contains("the client used")).collect();
    assert!(about_the_stream.is_empty(), "{notes:?}");
}

#[test]
fn without_ignore_eos_lengths_vary_but_repeat_under_a_seed() {
    let lens = |seed: &str| {
        let cfg = SimConfig { seed: seed.parse().expect("seed"), ..SimConfig::new(flat_profile(1.0, 64, 1 << 20)) };
        let s = sim(cfg);
        let dir = tempfile::tempdir().expect("tmp");
        let rec = dir.path().join("r.jsonl");
        let (code, _, err) = bench_json(&[
            "--url",
            s.url(),
            "--concurrency",
            "1",
            "--requests",
            "12",
            "--output-len",
            "200",
            "--records",
            &rec.to_string_lossy(),
        ]);
        assert_eq!(code, 0, "{err}");
        std::fs::read_to_string(&rec)
            .expect("records")
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json")["output_tokens_server"].as_u64().unwrap_or(0))
            .collect::<Vec<_>>()
    };
    let a = lens("3");
    assert_eq!(a, lens("3"), "same seed, same EOS positions");
    assert!(a.iter().any(|&n| n < 200) && a.iter().collect::<std::collections::BTreeSet<_>>().len() > 3, "{a:?}");
}

fn sim_usage_error(args: &[&str], needle: &str) {
    crate::common::usage_error("sim", args, needle);
}

#[test]
fn unknown_preset_lists_the_presets() {
    sim_usage_error(&["--preset", "nope"], "presets: reference-kvm, reference-lxc, tiny");
}

#[test]
fn malformed_profile_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("p.toml");
    std::fs::write(&p, "name = 3\n").expect("write");
    sim_usage_error(&["--profile", &p.to_string_lossy()], "not a valid profile");
}

#[test]
fn kv_cache_smaller_than_a_request_is_impossible() {
    sim_usage_error(&["--preset", "tiny", "--kv-tokens", "8"], "impossible configuration");
}

#[test]
fn an_empty_served_model_name_is_refused() {
    sim_usage_error(&["--preset", "tiny", "--model", ""], "model \"\" is not a served model name");
    sim_usage_error(&["--preset", "tiny", "--model", "a\nb"], "is not a served model name");
}

#[test]
fn bad_fault_flags_are_refused() {
    sim_usage_error(&["--preset", "tiny", "--error-status", "200"], "--error-status 200");
    sim_usage_error(&["--preset", "tiny", "--fail-rate", "2"], "--fail-rate 2");
}

#[test]
fn sim_binary_serves_and_prints_its_address() {
    let p = crate::common::Proc::start(&["sim", "--preset", "tiny", "--listen", "127.0.0.1:0", "--crash-after", "3s"]);
    assert_eq!(raw_http(&p.url, "GET", "/health", "").0, 200);
    let (status, err) = p.wait();
    assert_eq!(status.code(), Some(1), "the simulated crash exits 1");
    assert!(err.contains("simulated crash after 3.0s"), "the crash says what it was: {err}");
}

#[test]
fn sim_scheduling_flag_is_reported_in_server_info_and_refused_when_unknown() {
    let info = |extra: &[&str]| {
        let mut args = vec!["sim", "--preset", "tiny", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let p = crate::common::Proc::start(&args);
        let (status, text) = raw_http(&p.url, "GET", "/get_server_info", "");
        assert_eq!(status, 200, "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        v["enable_mixed_chunk"].clone()
    };
    assert_eq!(info(&[]), serde_json::json!(true), "presets mix prompt chunks into decode steps");
    assert_eq!(info(&["--scheduling", "prefill-first"]), serde_json::json!(false));
    assert_eq!(info(&["--scheduling", "mixed"]), serde_json::json!(true));
    sim_usage_error(&["--preset", "tiny", "--scheduling", "sometimes"], "prefill-first");
}

#[test]
fn sim_from_plan_steps_at_the_predicted_decode_time() {
    use servetune_model::{hw, predict, quant, spec};
    let p = crate::common::Proc::start(&[
        "sim",
        "--listen",
        "127.0.0.1:0",
        "--from-plan",
        "model=glm-5,quant=nvfp4,gpu=rtx-pro-6000-se,gpus=8,link=pcie-host-staged,tp=8",
    ]);
    let (code, v, err) =
        bench_json(&["--url", &p.url, "--concurrency", "1", "--requests", "3", "--input-len", "64", "--output-len", "12", "--ignore-eos"]);
    assert_eq!(code, 0, "{err}");
    let s = predict::Scenario {
        model: spec::catalog("glm-5").expect("glm"),
        quant: quant::Quant::preset(quant::Dtype::Nvfp4),
        gpu: hw::gpu("rtx-pro-6000-se").expect("gpu"),
        link: hw::link("pcie-host-staged").expect("link"),
        plan: predict::Plan { gpus: 8, tp: 8, pp: 1, ep: 1, dp_attention: false },
        engine: predict::Engine::default(),
        input_len: 1024,
        output_len: 1024,
        max_running: None,
        cluster: None,
        measured_allreduce: None,
        calibrated_on: None,
    };
    let want = s.decode_step_ms(1.0, 70.0);
    let tpot = num(&v, "runs.0.latency_ms.tpot.p50");
    assert!((tpot - want).abs() / want < 0.05, "TPOT {tpot} ms vs predicted decode step {want} ms");
}

#[test]
fn sim_from_plan_refuses_huge_or_tiny_numbers_with_exit_2_naming_the_pair() {
    let base = "model=llama-3.1-8b,gpu=h100-sxm,gpus=1";
    for pair in ["request-step-us=1e308", "step-overhead-ms=1e300"] {
        let plan = format!("{base},{pair}");
        sim_usage_error(&["--from-plan", &plan], pair);
        sim_usage_error(&["--from-plan", &plan], "out of range");
    }
    // A MoE model whose kernels reach almost none of the memory bandwidth: finite, positive, and
    // a step far past an hour.
    sim_usage_error(&["--from-plan", "model=qwen3-30b-a3b,gpu=h100-sxm,gpus=1", "--moe-efficiency", "1e-300"], "--moe-efficiency 1e-300");
}

#[test]
fn sim_refuses_a_profile_file_over_the_size_limit() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("huge.toml");
    std::fs::write(&p, vec![b'#'; (16 << 20) + 1]).expect("write");
    sim_usage_error(&["--profile", &p.to_string_lossy()], "larger than the limit of 16 MiB");
    let p = dir.path().join("cost.toml");
    std::fs::write(&p, "name = \"x\"\nmax_running_requests = 4\nkv_tokens = 4096\n[cost]\noverhead_ms = 1e300\nper_decode_token_ms = 0.0\nper_prefill_token_ms = 0.0\nper_context_token_us = 0.0\n")
        .expect("write");
    sim_usage_error(&["--profile", &p.to_string_lossy()], "cost.overhead_ms = 1e300: more than the simulator's limit");
}

#[test]
fn sim_answers_the_engines_informational_endpoints_in_their_shapes() {
    let s = sim(SimConfig::new(flat_profile(1.0, 8, 1 << 16)));
    let (code, body) = raw_http(s.url(), "GET", "/server_info", "");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert!(v["internal_states"][0]["effective_max_running_requests_per_dp"] == 8, "{v}");
    assert!(v["servetune_sim"]["step_pricing"].as_str().is_some_and(|p| p.contains("per_prefill_token_ms")), "{v}");
    let (code, body) = raw_http(s.url(), "GET", "/get_model_info", "");
    assert_eq!(code, 200);
    assert!(body.contains("\"is_generation\":true") && body.contains("\"model_path\""), "{body}");
    let (code, body) = raw_http(s.url(), "GET", "/version", "");
    assert_eq!(code, 200);
    assert!(body.contains("\"version\":\"servetune-sim "), "{body}");
    let (code, body) = raw_http(s.url(), "GET", "/v1/models", "");
    assert_eq!(code, 200);
    for k in ["\"root\"", "\"parent\"", "\"max_model_len\"", "\"permission\""] {
        assert!(body.contains(k), "{k} in {body}");
    }
    for method in ["POST", "GET"] {
        let (code, body) = raw_http(s.url(), method, "/flush_cache", "");
        assert_eq!(code, 200, "{method} {body}");
        assert!(body.starts_with("Cache flushed."), "{body}");
    }
}

#[test]
fn sim_from_plan_says_how_prefill_is_priced() {
    let p = crate::common::Proc::start(&["sim", "--listen", "127.0.0.1:0", "--from-plan", "model=llama-3.1-8b,gpu=h100-sxm,gpus=1"]);
    let (code, body) = raw_http(&p.url, "GET", "/get_server_info", "");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    let per_token = v["servetune_sim"]["cost"]["per_prefill_token_ms"].as_f64().expect("per_prefill_token_ms");
    assert!(per_token > 0.0, "prompts are not free: {v}");
    let how = v["servetune_sim"]["step_pricing"].as_str().expect("step_pricing");
    assert!(how.contains("performance model") && how.contains("prefill"), "{how}");
}

#[test]
fn sim_refuses_absurd_durations_with_exit_2() {
    for flag in ["--stall-for", "--crash-after", "--slow-start", "--header-timeout", "--body-timeout", "--idle-timeout"] {
        sim_usage_error(&["--preset", "tiny", flag, "1e30s"], "longer than the limit of a week");
        sim_usage_error(&["--preset", "tiny", &format!("{flag}=-1s")], flag);
    }
    sim_usage_error(&["--preset", "tiny", "--exact", "--itl", "1e19s"], "--itl");
    sim_usage_error(&["--preset", "tiny", "--header-timeout", "0s"], "--header-timeout 0s");
}

#[test]
fn sim_limits_out_of_range_state_the_accepted_range() {
    sim_usage_error(&["--preset", "tiny", "--max-running-requests", "1000000000000"], "1..=1000000");
    sim_usage_error(&["--preset", "tiny", "--max-running-requests", "0"], "1..=1000000");
    sim_usage_error(&["--preset", "tiny", "--max-connections", "0"], "1..=1000000");
    sim_usage_error(&["--preset", "tiny", "--exact", "--tokens-per-chunk", "100000"], "1..=4096");
    sim_usage_error(&["--preset", "tiny", "--ttft", "10ms"], "--exact");
}

/// Sends `GET /health` on a kept-alive connection and returns the status line.
fn health_on(s: &mut std::net::TcpStream) -> String {
    use std::io::{Read, Write};
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") && s.read(&mut byte).map(|n| n == 1).unwrap_or(false) {
        got.push(byte[0]);
    }
    String::from_utf8_lossy(&got).lines().next().unwrap_or_default().to_string()
}

/// CPU seconds (user + system) the process `pid` has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let fields: Vec<&str> = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or_default().split(' ').collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap_or(0.0) + fields[12].parse::<f64>().unwrap_or(0.0);
    ticks / 100.0
}

#[test]
fn sim_keeps_answering_health_when_file_descriptors_run_out() {
    use std::io::BufRead;
    if std::process::Command::new("prlimit").arg("--version").output().is_err() {
        eprintln!("SKIPPED: prlimit (util-linux) is not installed");
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("stderr");
    let mut child = std::process::Command::new("prlimit")
        .arg("--nofile=40:40")
        .arg(assert_cmd::cargo::cargo_bin("servetune"))
        .args(["sim", "--preset", "tiny", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("spawn");
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("first line");
    let addr = line.trim().rsplit("http://").next().unwrap_or_default().to_string();
    let connect = || {
        let s = std::net::TcpStream::connect(&addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        s
    };
    let mut kept = connect();
    assert!(health_on(&mut kept).contains("200"));
    let hogs: Vec<_> = (0..80).map(|_| connect()).collect();
    std::thread::sleep(Duration::from_millis(500));
    let cpu0 = cpu_seconds(child.id());
    std::thread::sleep(Duration::from_secs(1));
    let busy = cpu_seconds(child.id()) - cpu0;
    assert!(busy < 0.3, "the accept loop backs off instead of spinning: {busy:.2} CPU s in 1 s");
    assert!(health_on(&mut kept).contains("200"), "an open connection is still served");
    drop(hogs);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut fresh = String::new();
    while !fresh.contains("200") && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        fresh = health_on(&mut connect());
    }
    assert!(fresh.contains("200"), "new connections are accepted again: {fresh:?}");
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).expect("log");
    // Each shortage is said once when it starts and once when it ends, not once per failed accept
    // (the queued connections accepted after the hogs close may cause a second, short one).
    let said: Vec<bool> = text
        .lines()
        .filter_map(|l| {
            if l.contains("out of file descriptors") {
                Some(true)
            } else if l.contains("accepting connections again") {
                Some(false)
            } else {
                None
            }
        })
        .collect();
    assert!(!said.is_empty() && said.len() <= 8 && said.first() == Some(&true), "{text}");
    assert!(said.windows(2).all(|w| w[0] != w[1]), "start and end of each shortage alternate: {text}");
}
