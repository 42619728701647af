//! `servetune bench` against hostile servers, signals and absurd input: it never hangs, never
//! panics, never loses what it measured and never leaks a secret. Each server is a few lines of
//! std::net on 127.0.0.1:0, written here so the hostile behaviour is plain to read.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command as StdCommand, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{servetune, usage_error};

/// A request as a hostile server saw it.
#[derive(Debug, Clone, Default)]
struct Req {
    method: String,
    path: String,
    /// Header lines, lower-cased names.
    headers: Vec<(String, String)>,
    body: String,
}

impl Req {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// `max_tokens` (or sglang's `max_new_tokens`) of the JSON body.
    fn max_tokens(&self) -> u64 {
        let v: serde_json::Value = serde_json::from_str(&self.body).unwrap_or_default();
        v["max_tokens"].as_u64().or(v["sampling_params"]["max_new_tokens"].as_u64()).unwrap_or(1)
    }
}

fn read_request(s: &mut TcpStream) -> Option<Req> {
    let mut r = BufReader::new(s.try_clone().ok()?);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let len: usize = headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some(Req { method, path, headers, body: String::from_utf8_lossy(&body).into_owned() })
}

fn respond(s: &mut TcpStream, status: &str, ctype: &str, body: &str) {
    let _ = write!(s, "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
}

/// Starts an event stream whose end is the connection's close.
fn sse_head(s: &mut TcpStream) -> bool {
    s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n").is_ok()
}

fn token_event(s: &mut TcpStream) -> bool {
    s.write_all(b"data: {\"choices\":[{\"text\":\"t\",\"finish_reason\":null}]}\n\n").is_ok()
}

/// A well-behaved streamed completion of `n` tokens, `gap` apart.
fn good_stream(s: &mut TcpStream, n: u64, gap: Duration) {
    if !sse_head(s) {
        return;
    }
    for _ in 0..n {
        std::thread::sleep(gap);
        if !token_event(s) {
            return;
        }
    }
    let end = format!("data: {{\"choices\":[{{\"text\":\"\",\"finish_reason\":\"length\"}}],\"usage\":{{\"prompt_tokens\":4,\"completion_tokens\":{n}}}}}\n\ndata: [DONE]\n\n");
    let _ = s.write_all(end.as_bytes());
}

/// A server running `handle` on every request but `GET /v1/models` and `GET /metrics`, which
/// it answers normally (so the hostility meets the benchmark itself).
struct Hostile {
    url: String,
    /// Requests seen, in order.
    seen: Arc<Mutex<Vec<Req>>>,
}

impl Hostile {
    fn completions_seen(&self) -> usize {
        self.seen.lock().map(|v| v.iter().filter(|r| r.method == "POST").count()).unwrap_or(0)
    }
}

fn hostile(handle: impl Fn(&mut TcpStream, &Req) + Send + Sync + 'static) -> Hostile {
    serve(move |s, r| match r.path.as_str() {
        "/v1/models" => respond(s, "200 OK", "application/json", r#"{"data":[{"id":"m"}]}"#),
        _ => handle(s, r),
    })
}

/// A server running `handle` on every request.
fn serve(handle: impl Fn(&mut TcpStream, &Req) + Send + Sync + 'static) -> Hostile {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = Arc::clone(&seen);
    let handle = Arc::new(handle);
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { continue };
            let (handle, seen) = (Arc::clone(&handle), Arc::clone(&seen2));
            std::thread::spawn(move || {
                if let Some(r) = read_request(&mut s) {
                    if let Ok(mut v) = seen.lock() {
                        v.push(r.clone());
                    }
                    handle(&mut s, &r);
                }
            });
        }
    });
    Hostile { url, seen }
}

/// A server that accepts connections and never reads or answers.
fn silent() -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().flatten() {
            held.push(c);
        }
    });
    url
}

/// Runs `servetune bench URL ARGS --json FILE --records FILE` with `env`; returns (exit code,
/// stdout, stderr, JSON, records text).
fn bench(url: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String, serde_json::Value, String) {
    let dir = tempfile::tempdir().expect("tmp");
    let (json, rec) = (dir.path().join("o.json"), dir.path().join("r.jsonl"));
    let mut c = servetune();
    c.args(["bench", "--url", url]).args(args).arg("--json").arg(&json).arg("--records").arg(&rec);
    for (k, v) in env {
        c.env(k, v);
    }
    c.timeout(Duration::from_secs(120));
    let out = c.output().expect("run");
    let v = std::fs::read(&json).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or(serde_json::Value::Null);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        v,
        std::fs::read_to_string(&rec).unwrap_or_default(),
    )
}

const FAST: [&str; 6] = ["--model", "m", "--no-calibrate", "--metrics-url", "off", "-q"];

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    FAST.iter().copied().chain(extra.iter().copied()).collect()
}

#[test]
fn bench_ends_when_server_accepts_and_never_answers() {
    let url = silent();
    let (code, _, err, _, _) = bench(&url, &args(&["--concurrency", "1", "--requests", "1", "--preflight-timeout", "300ms"]), &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--preflight-timeout"), "the message names the limit: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bench_ends_when_a_request_is_never_answered() {
    let s = hostile(|_, _| std::thread::sleep(Duration::from_secs(600)));
    let (code, _, err, v, _) = bench(&s.url, &args(&["--concurrency", "2", "--requests", "2", "--first-byte-timeout", "300ms"]), &[]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["runs"][0]["requests"]["errors"]["no_response"], 2, "{v:#}");
    assert_eq!(s.completions_seen(), 2, "both requests reached the server");
}

#[test]
fn bench_ends_when_a_stream_sends_its_head_and_never_a_byte() {
    let s = hostile(|s, _| {
        if sse_head(s) {
            std::thread::sleep(Duration::from_secs(600));
        }
    });
    let (code, _, err, v, _) = bench(&s.url, &args(&["--concurrency", "1", "--requests", "2", "--first-byte-timeout", "300ms"]), &[]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["runs"][0]["requests"]["errors"]["no_response"], 2, "{v:#}");
}

#[test]
fn bench_ends_when_a_stream_sends_tokens_then_goes_silent() {
    let s = hostile(|s, _| {
        if sse_head(s) && token_event(s) && token_event(s) {
            std::thread::sleep(Duration::from_secs(600));
        }
    });
    let (code, _, err, v, recs) =
        bench(&s.url, &args(&["--concurrency", "1", "--requests", "2", "--output-len", "8", "--idle-timeout", "300ms"]), &[]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["runs"][0]["requests"]["errors"]["stalled"], 2, "{v:#}");
    let first: serde_json::Value = serde_json::from_str(recs.lines().next().unwrap_or("null")).expect("record");
    assert_eq!(first["chunks"].as_array().map(Vec::len), Some(2), "the tokens before the silence are kept: {first}");
}

#[test]
fn bench_stops_reading_a_server_that_streams_millions_of_tokens_for_max_tokens_8() {
    let s = hostile(|s, _| {
        if sse_head(s) {
            for _ in 0..2_000_000 {
                if !token_event(s) {
                    return;
                }
            }
        }
    });
    let (code, _, err, v, recs) = bench(&s.url, &args(&["--concurrency", "1", "--requests", "1", "--output-len", "8"]), &[]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["runs"][0]["requests"]["errors"]["too_many_tokens"], 1, "{v:#}");
    let r: serde_json::Value = serde_json::from_str(recs.trim()).expect("one record");
    assert_eq!(r["chunks"].as_array().map(Vec::len), Some(8 + 64), "chunks past max_tokens + 64 are not stored");
    assert!(r["chunks_dropped"].as_u64().unwrap_or(0) > 1000, "{}", r["chunks_dropped"]);
    assert!(num_at(&v, "runs.0.requests.chunks_dropped") > 1000.0);
}

#[test]
fn bench_counts_tokens_beyond_max_tokens_as_a_server_error() {
    let s = hostile(|s, r| good_stream(s, r.max_tokens() + 12, Duration::ZERO));
    let (code, _, err, v, _) = bench(&s.url, &args(&["--concurrency", "1", "--requests", "2", "--output-len", "8"]), &[]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["runs"][0]["requests"]["completed"], 0, "not a plain success: {v:#}");
    assert_eq!(v["runs"][0]["requests"]["errors"]["too_many_tokens"], 2, "{v:#}");
    let ex = v["runs"][0]["requests"]["error_examples"]["too_many_tokens"][0].as_str().unwrap_or("");
    assert!(ex.contains("20 output tokens for max_tokens=8"), "{ex}");
}

#[test]
fn bench_refuses_an_event_that_never_ends() {
    let s = hostile(|s, _| {
        if sse_head(s) {
            let line = format!("data: {}\n", "x".repeat(1000));
            for _ in 0..5000 {
                if s.write_all(line.as_bytes()).is_err() {
                    return;
                }
            }
        }
    });
    let (code, _, err, v, _) = bench(&s.url, &args(&["--concurrency", "1", "--requests", "1"]), &[]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["runs"][0]["requests"]["errors"]["malformed_event"], 1, "{v:#}");
    assert!(v.to_string().contains("never ended the event"), "{v:#}");
}

fn num_at(v: &serde_json::Value, path: &str) -> f64 {
    crate::common::num(v, path)
}

const KEY: &str = "sk-hostile-0123456789";

fn assert_no_key(code: i32, out: &str, err: &str, v: &serde_json::Value, recs: &str) {
    for (what, text) in [("stdout", out), ("stderr", err), ("json", &v.to_string()), ("records", recs)] {
        assert!(!text.contains(KEY), "the key leaked into {what} (exit {code}): {text}");
    }
    assert!(format!("{err}{v}{recs}").contains("[REDACTED]"), "the echo is shown redacted: {err} {v}");
}

#[test]
fn bench_never_prints_the_api_key_a_server_echoes_in_a_401_body() {
    let s = hostile(|s, r| {
        let auth = r.header("authorization").unwrap_or("none").to_string();
        respond(s, "401 Unauthorized", "application/json", &format!(r#"{{"error":"bad key {auth}"}}"#));
    });
    let a =
        ["--model", "m", "--no-calibrate", "--metrics-url", "off", "--concurrency", "1", "--requests", "2", "--api-key-env", "HOSTILE_KEY"];
    let (code, out, err, v, recs) = bench(&s.url, &a, &[("HOSTILE_KEY", KEY)]);
    // The key must actually have been sent and echoed for the test to mean anything.
    assert!(s.seen.lock().expect("seen").iter().any(|r| r.header("authorization") == Some(&format!("Bearer {KEY}"))));
    assert_eq!(code, 2, "all refused with 401 is the user's to fix: {err}");
    assert!(err.contains("--api-key-env"), "{err}");
    assert_no_key(code, &out, &err, &v, &recs);
}

#[test]
fn bench_never_prints_the_api_key_a_server_echoes_in_an_sse_error_event() {
    let s = hostile(|s, r| {
        let auth = r.header("authorization").unwrap_or("none").to_string();
        if sse_head(s) {
            let _ = write!(s, "data: {{\"error\":{{\"message\":\"denied for {auth}\"}}}}\n\n");
        }
    });
    let (code, out, err, v, recs) = bench(
        &s.url,
        &["--no-calibrate", "--metrics-url", "off", "--concurrency", "1", "--requests", "2", "--api-key-env", "HOSTILE_KEY"],
        &[("HOSTILE_KEY", KEY)],
    );
    assert_eq!(v["runs"][0]["requests"]["errors"]["error_payload"], 2, "{v:#}");
    assert_no_key(code, &out, &err, &v, &recs);
}

#[test]
fn bench_never_prints_the_api_key_a_server_puts_in_its_model_name() {
    let s = serve(|s, r| {
        let auth = r.header("authorization").unwrap_or("none").to_string();
        match r.path.as_str() {
            "/v1/models" => respond(s, "200 OK", "application/json", &format!(r#"{{"data":[{{"id":"{auth}"}}]}}"#)),
            _ => good_stream(s, r.max_tokens(), Duration::ZERO),
        }
    });
    let (code, out, err, v, recs) = bench(
        &s.url,
        &["--no-calibrate", "--metrics-url", "off", "--concurrency", "1", "--requests", "2", "--api-key-env", "HOSTILE_KEY"],
        &[("HOSTILE_KEY", KEY)],
    );
    assert_eq!(code, 0, "{err}");
    assert_no_key(code, &out, &err, &v, &recs);
}

#[test]
fn bench_sends_the_api_key_only_to_the_url_origin() {
    let s = hostile(|s, r| good_stream(s, r.max_tokens(), Duration::ZERO));
    let m = serve(|s, _| respond(s, "200 OK", "text/plain", "sglang:num_running_reqs 1\n"));
    let metrics = format!("{}/metrics", m.url);
    let base = ["--model", "m", "--no-calibrate", "--concurrency", "1", "--requests", "2", "--api-key-env", "HOSTILE_KEY", "--metrics-url"];
    let (code, _, err, _, _) =
        bench(&s.url, &[base.as_slice(), &[metrics.as_str(), "--scrape-interval", "100ms"]].concat(), &[("HOSTILE_KEY", KEY)]);
    assert_eq!(code, 0, "{err}");
    assert!(s.seen.lock().expect("seen").iter().all(|r| r.header("authorization") == Some(&format!("Bearer {KEY}"))));
    let seen = m.seen.lock().expect("seen").clone();
    assert!(!seen.is_empty(), "the metrics endpoint was scraped");
    assert!(seen.iter().all(|r| r.header("authorization").is_none()), "no key for another origin: {seen:?}");

    let with = [base.as_slice(), &[metrics.as_str(), "--metrics-api-key-env", "METRICS_KEY"]].concat();
    let (code, _, err, _, _) = bench(&s.url, &with, &[("HOSTILE_KEY", KEY), ("METRICS_KEY", "mk-1")]);
    assert_eq!(code, 0, "{err}");
    let seen = m.seen.lock().expect("seen").clone();
    assert!(seen.iter().any(|r| r.header("authorization") == Some("Bearer mk-1")), "{seen:?}");
    assert!(seen.iter().all(|r| r.header("authorization") != Some(&format!("Bearer {KEY}"))));
}

#[test]
fn bench_strips_the_password_from_every_printed_url() {
    let s = hostile(|s, r| good_stream(s, r.max_tokens(), Duration::ZERO));
    let url = s.url.replace("http://", "http://alice:hunter2@");
    let dir = tempfile::tempdir().expect("tmp");
    let md = dir.path().join("s.md");
    let a = ["--model", "m", "--no-calibrate", "--metrics-url", "off", "--concurrency", "1", "--requests", "2", "--markdown"];
    let (code, out, err, v, recs) = bench(&url, &[a.as_slice(), &[md.to_str().expect("path")]].concat(), &[]);
    assert_eq!(code, 0, "{err}");
    let md = std::fs::read_to_string(&md).expect("markdown");
    for (what, text) in [("stdout", out.as_str()), ("stderr", &err), ("json", &v.to_string()), ("records", &recs), ("markdown", &md)] {
        assert!(!text.contains("hunter2"), "the password is in {what}: {text}");
    }
    assert_eq!(v["config"]["url"], s.url.as_str());
}

#[test]
fn bench_refuses_a_missing_api_key_env_given_explicitly() {
    usage_error(
        "bench",
        &["--url", "http://127.0.0.1:9", "--concurrency", "1", "--requests", "1", "--api-key-env", "SERVETUNE_SURELY_UNSET_KEY"],
        "SERVETUNE_SURELY_UNSET_KEY is not set",
    );
}

#[test]
fn bench_refuses_absurd_durations_with_the_flag_named() {
    for (flag, v) in [
        ("--timeout", "1e19s"),
        ("--duration", "1e30s"),
        ("--ramp-up", "1e30s"),
        ("--drain-timeout", "1e30s"),
        ("--scrape-interval", "1e30s"),
        ("--idle-timeout", "inf"),
        ("--first-byte-timeout", "169h"),
    ] {
        usage_error("bench", &["--url", "http://127.0.0.1:9", "--concurrency", "1", "--requests", "1", flag, v], flag);
    }
}

#[test]
fn bench_refuses_a_scrape_interval_it_would_have_clamped() {
    usage_error(
        "bench",
        &["--url", "http://127.0.0.1:9", "--concurrency", "1", "--requests", "1", "--scrape-interval", "10ms"],
        "--scrape-interval",
    );
}

#[test]
fn bench_with_a_hundred_million_concurrency_allocates_only_for_requests_in_flight() {
    let s = hostile(|s, r| good_stream(s, r.max_tokens(), Duration::ZERO));
    let (code, _, err, v, _) = bench(&s.url, &args(&["--concurrency", "100000000", "--requests", "3", "--output-len", "2"]), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["runs"][0]["requests"]["completed"], 3, "{v:#}");
}

#[test]
fn bench_refuses_an_unwritable_output_before_sending_anything() {
    let s = hostile(|s, r| good_stream(s, r.max_tokens(), Duration::ZERO));
    let dir = tempfile::tempdir().expect("tmp");
    let a = ["bench", "--url", &s.url, "--model", "m", "--concurrency", "1", "--requests", "1", "--csv"];
    let (code, _, err) = crate::common::run(&[a.as_slice(), &[dir.path().to_str().expect("dir")]].concat());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--csv") && err.contains("is a directory; give a file path"), "{err}");
    assert!(s.seen.lock().expect("seen").is_empty(), "nothing was sent before the check");
}

#[test]
fn bench_json_dash_keeps_stdout_pure_json() {
    let s = hostile(|s, r| good_stream(s, r.max_tokens(), Duration::ZERO));
    let out = servetune()
        .args(["bench", "--url", &s.url, "--model", "m", "--no-calibrate", "--metrics-url", "off"])
        .args(["--concurrency", "1", "--requests", "2", "--json", "-"])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    assert_eq!(v["runs"][0]["requests"]["completed"], 2);
    assert!(err.contains("latencies in ms"), "the text report went to stderr: {err}");
}

#[test]
fn bench_sglang_against_an_openai_only_server_is_not_counted_ok() {
    let s = hostile(|s, r| match r.path.as_str() {
        "/generate" => respond(s, "404 Not Found", "application/json", r#"{"detail":"Not Found"}"#),
        _ => good_stream(s, r.max_tokens(), Duration::ZERO),
    });
    let (code, _, err, v, _) = bench(&s.url, &args(&["--api", "sglang", "--concurrency", "2", "--requests", "4"]), &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--api"), "{err}");
    assert_eq!(v["runs"][0]["requests"]["completed"], 0);
    assert_eq!(v["runs"][0]["requests"]["http_statuses"]["404"], 4, "{v:#}");
}

#[test]
fn bench_counts_a_response_without_tokens_as_an_error() {
    // A server that answers /generate with an OpenAI-shaped document sglang's reader finds no text in.
    let s = hostile(|s, _| respond(s, "200 OK", "application/json", r#"{"object":"text_completion","choices":[{"text":"hi"}]}"#));
    let (code, _, err, v, _) = bench(&s.url, &args(&["--api", "sglang", "--concurrency", "1", "--requests", "2"]), &[]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(v["runs"][0]["requests"]["errors"]["no_tokens"], 2, "{v:#}");
    assert!(err.contains("--api"), "{err}");
}

#[test]
fn bench_says_nothing_was_scraped_when_no_scrape_finished() {
    let s = hostile(|s, r| good_stream(s, r.max_tokens(), Duration::ZERO));
    let metrics = format!("{}/metrics", silent());
    let (code, _, err, v, _) = bench(
        &s.url,
        &[
            "--model",
            "m",
            "--no-calibrate",
            "-q",
            "--concurrency",
            "1",
            "--requests",
            "2",
            "--metrics-url",
            &metrics,
            "--scrape-timeout",
            "200ms",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let summary = v["runs"][0]["server_metrics"]["summary"].to_string();
    assert!(summary.contains("nothing was scraped"), "{summary}");
    assert!(!summary.contains("peaked at 0"), "{summary}");
    assert!(v["runs"][0]["server_metrics"]["style"].is_null());
}

#[test]
fn bench_reports_a_refused_oversized_prompt_as_refused_not_as_a_connect_failure() {
    let s = hostile(|s, _| respond(s, "413 Payload Too Large", "text/plain", "prompt too long"));
    let (code, _, err, _, _) = bench(&s.url, &args(&["--concurrency", "1", "--requests", "2"]), &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("refused every request") && err.contains("HTTP 413"), "{err}");
    assert!(!err.contains("failed to connect"), "{err}");
}

#[test]
fn bench_reports_a_connection_closed_unanswered_as_a_disconnect_not_a_connect_failure() {
    let s = hostile(|s, _| {
        let _ = s.shutdown(std::net::Shutdown::Both);
    });
    let (code, _, err, v, _) = bench(&s.url, &args(&["--concurrency", "1", "--requests", "2"]), &[]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["runs"][0]["requests"]["errors"]["disconnected"], 2, "{v:#}");
    assert!(!err.contains("failed to connect"), "{err}");
}

/// Spawns bench on a slow server with `--records`, waits until `ready` records were written (the
/// readiness line), sends `signals` one after another, and returns (exit code, JSON, records).
fn stopped_by(signals: &[&str], drain: &str, slow_after: u64) -> (Option<i32>, serde_json::Value, String, String) {
    stopped_under(&["--concurrency", "2", "--requests", "100000"], signals, drain, slow_after)
}

/// [`stopped_by`] under the load `load` (a closed or an open loop).
fn stopped_under(load: &[&str], signals: &[&str], drain: &str, slow_after: u64) -> (Option<i32>, serde_json::Value, String, String) {
    let served = Arc::new(AtomicU64::new(0));
    let served2 = Arc::clone(&served);
    let s = hostile(move |s, r| {
        let n = served2.fetch_add(1, Ordering::Relaxed);
        let gap = if n < slow_after { Duration::from_millis(1) } else { Duration::from_millis(200) };
        good_stream(s, r.max_tokens(), gap);
    });
    let dir = tempfile::tempdir().expect("tmp");
    let (json, rec) = (dir.path().join("p.json"), dir.path().join("r.jsonl"));
    let mut child: Child = StdCommand::new(assert_cmd::cargo::cargo_bin("servetune"))
        .args(["bench", "--url", &s.url, "--model", "m", "--no-calibrate", "--metrics-url", "off", "-q"])
        .args(load)
        .args(["--output-len", "50", "--drain-timeout", drain, "--json"])
        .arg(&json)
        .arg("--records")
        .arg(&rec)
        .env_remove("OPENAI_API_KEY")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_for_lines(&rec, 2, &mut child);
    for sig in signals {
        let _ = StdCommand::new("kill").args([&format!("-{sig}"), &child.id().to_string()]).status();
        std::thread::sleep(Duration::from_millis(300));
    }
    let code = wait_bounded(&mut child, Duration::from_secs(60));
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let v = std::fs::read(&json).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or(serde_json::Value::Null);
    (code, v, std::fs::read_to_string(&rec).unwrap_or_default(), err)
}

/// Waits (bounded) until `path` holds `n` complete lines.
fn wait_for_lines(path: &Path, n: usize, child: &mut Child) {
    let until = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(path).map(|t| t.lines().count()).unwrap_or(0) < n {
        if Instant::now() > until || matches!(child.try_wait(), Ok(Some(_))) {
            let _ = child.kill();
            panic!("bench never wrote {n} records to {}", path.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_bounded(child: &mut Child, limit: Duration) -> Option<i32> {
    let until = Instant::now() + limit;
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return st.code();
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("bench did not end within {limit:?} of the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_partial_and_kept(v: &serde_json::Value, recs: &str, err: &str) {
    assert_eq!(v["partial"], true, "{err}");
    assert_eq!(v["runs"][0]["partial"], true);
    let lines = recs.lines().count() as f64;
    let r = &v["runs"][0]["requests"];
    let counted = r["completed"].as_f64().unwrap_or(0.0) + r["failed"].as_f64().unwrap_or(0.0) + r["warmup"].as_f64().unwrap_or(0.0);
    assert!(lines >= 2.0, "records were streamed: {lines}");
    assert_eq!(lines, counted, "every measured request is in the records file");
}

#[test]
fn bench_sigterm_writes_partial_records_and_exits_143() {
    let (code, v, recs, err) = stopped_by(&["TERM"], "30s", u64::MAX);
    assert_eq!(code, Some(143), "{err}");
    assert_partial_and_kept(&v, &recs, &err);
    assert!(err.contains("SIGTERM"), "{err}");
}

#[test]
fn bench_sighup_writes_partial_records_and_exits_129() {
    let (code, v, recs, err) = stopped_by(&["HUP"], "30s", u64::MAX);
    assert_eq!(code, Some(129), "{err}");
    assert_partial_and_kept(&v, &recs, &err);
}

#[test]
fn ctrl_c_stops_drains_writes_partial_results_and_exits_130() {
    let (code, v, recs, err) = stopped_by(&["INT"], "30s", u64::MAX);
    assert_eq!(code, Some(130), "{err}");
    assert_partial_and_kept(&v, &recs, &err);
    assert_eq!(v["runs"][0]["requests"]["errors"]["cancelled"], 0, "in-flight requests drained within the deadline");
}

/// The open loop stops sending at the first signal too (its pacer reads the stop), instead of
/// pacing requests out until its duration ends.
#[test]
fn ctrl_c_stops_an_open_loop_run_before_its_duration_ends() {
    let (code, v, recs, err) = stopped_under(&["--rate", "20", "--duration", "600s"], &["INT"], "30s", u64::MAX);
    assert_eq!(code, Some(130), "{err}");
    assert_partial_and_kept(&v, &recs, &err);
}

#[test]
fn a_second_signal_cuts_the_drain_short() {
    // After two quick requests every stream is slow (50 tokens, 200 ms apart = 10 s each), and the
    // drain would allow 600 s: only the second signal can end the run within the test's bound.
    let (code, v, recs, err) = stopped_by(&["INT", "INT"], "600s", 2);
    assert_eq!(code, Some(130), "{err}");
    assert_partial_and_kept(&v, &recs, &err);
    assert!(num_at(&v, "runs.0.requests.errors.cancelled") >= 1.0, "{v:#}");
    assert!(err.contains("cancelling"), "{err}");
}

/// A run that measures nothing (the server cannot be reached) leaves a file that was at an output
/// path as it was, and removes only the files it created itself.
#[test]
fn a_run_that_measures_nothing_keeps_files_that_were_there_and_removes_its_own() {
    let dir = tempfile::tempdir().expect("tmp");
    let (kept, fresh) = (dir.path().join("kept.json"), dir.path().join("fresh.csv"));
    std::fs::write(&kept, "keep me\n").expect("write");
    // A port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let out = servetune()
        .args(["bench", "--url", &format!("http://127.0.0.1:{port}")])
        .args(["-q", "--concurrency", "1", "--requests", "2", "--json"])
        .arg(&kept)
        .arg("--csv")
        .arg(&fresh)
        .timeout(Duration::from_secs(120))
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(std::fs::read_to_string(&kept).expect("still there"), "keep me\n");
    assert!(!fresh.exists(), "the file this run created is removed");
}

/// A server that lists several models: the first is used, and the notes say how many there are
/// and name the others (`--model` chooses another).
#[test]
fn bench_names_the_other_models_a_server_lists_beside_the_one_it_uses() {
    let s = serve(|s, r| match r.path.as_str() {
        "/v1/models" => respond(s, "200 OK", "application/json", r#"{"data":[{"id":"base"},{"id":"base-lora"},{"id":"other"}]}"#),
        _ => good_stream(s, r.max_tokens(), Duration::ZERO),
    });
    let (code, _, err, v, _) =
        bench(&s.url, &["--no-calibrate", "--metrics-url", "off", "--concurrency", "1", "--requests", "2", "-q"], &[]);
    assert_eq!(code, 0, "{err}");
    let notes = v["notes"].to_string();
    assert!(
        notes.contains(
            r#"/v1/models lists 3 models; the first, \"base\", is used: give --model to choose another (\"base-lora\", \"other\")"#
        ),
        "{notes}"
    );
    let posts: Vec<String> = s.seen.lock().expect("seen").iter().filter(|r| r.method == "POST").map(|r| r.body.clone()).collect();
    assert!(!posts.is_empty() && posts.iter().all(|b| b.contains(r#""model":"base""#)), "{posts:?}");
}
