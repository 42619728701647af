//! The server under hostile or broken clients and a broken engine: time limits, the connection
//! cap, 405s, and `/health` when the engine thread dies. Every test is bounded by socket timeouts.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use servetune_sim::{Limits, Notice, SimConfig, SimServer, StepBatch, StepCost};

use crate::profile;

/// A server with `limits` on its own runtime.
fn serve(limits: Limits) -> (SimServer, tokio::runtime::Runtime) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let mut cfg = SimConfig::new(profile());
    cfg.limits = limits;
    let srv = rt.block_on(servetune_sim::start(cfg, "127.0.0.1:0".parse().expect("addr"))).expect("start");
    (srv, rt)
}

fn short(header: u64, body: u64, idle: u64) -> Limits {
    Limits {
        header_timeout: Duration::from_millis(header),
        body_timeout: Duration::from_millis(body),
        idle_timeout: Duration::from_millis(idle),
        ..Limits::default()
    }
}

/// Reads until EOF or `limit`; returns what arrived and how long it took.
fn read_until_closed(s: &mut TcpStream, limit: Duration) -> (String, Duration) {
    let t = Instant::now();
    s.set_read_timeout(Some(limit)).expect("timeout");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    (String::from_utf8_lossy(&out).into_owned(), t.elapsed())
}

/// The next notice, waiting at most five seconds.
fn notice(srv: &mut SimServer, rt: &tokio::runtime::Runtime) -> Option<Notice> {
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), srv.next_notice()).await.ok().flatten() })
}

#[test]
fn sim_drops_a_client_that_never_finishes_its_headers() {
    let (mut srv, rt) = serve(short(300, 30_000, 30_000));
    let mut s = TcpStream::connect(srv.addr).expect("connect");
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ").expect("write");
    let (out, took) = read_until_closed(&mut s, Duration::from_secs(10));
    assert!(out.is_empty(), "no answer to half a request: {out}");
    assert!(took >= Duration::from_millis(250) && took < Duration::from_secs(8), "closed after the header timeout: {took:?}");
    match notice(&mut srv, &rt) {
        Some(n @ Notice::Dropped { .. }) => assert!(n.to_string().contains("did not finish its request headers"), "{n}"),
        other => panic!("want a dropped-connection notice, got {other:?}"),
    }
}

#[test]
fn sim_closes_a_connection_that_stays_idle() {
    let (srv, _rt) = serve(short(30_000, 30_000, 300));
    let mut s = TcpStream::connect(srv.addr).expect("connect");
    let (out, took) = read_until_closed(&mut s, Duration::from_secs(10));
    assert!(out.is_empty(), "{out}");
    assert!(took >= Duration::from_millis(250) && took < Duration::from_secs(8), "closed after the idle timeout: {took:?}");
}

#[test]
fn sim_answers_408_when_the_body_never_arrives() {
    let (srv, _rt) = serve(short(30_000, 300, 30_000));
    let mut s = TcpStream::connect(srv.addr).expect("connect");
    s.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
        .expect("write");
    let (out, _) = read_until_closed(&mut s, Duration::from_secs(10));
    assert!(out.starts_with("HTTP/1.1 408"), "{out}");
    assert!(out.contains("--body-timeout"), "{out}");
}

/// A declared body over the 32 MiB cap is refused at once (413), not after the body timeout.
#[test]
fn sim_answers_413_at_once_for_a_body_declared_over_the_cap() {
    let (srv, _rt) = serve(short(30_000, 30_000, 30_000));
    let mut s = TcpStream::connect(srv.addr).expect("connect");
    s.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 40000000\r\n\r\n{\"prompt\"")
        .expect("write");
    let (out, took) = read_until_closed(&mut s, Duration::from_secs(20));
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");
    assert!(out.contains("40000000 bytes, over the 32 MiB"), "{out}");
    assert!(took < Duration::from_secs(15), "answered before the 30 s body timeout: {took:?}");
}

#[test]
fn sim_answers_503_past_the_connection_cap() {
    let (mut srv, rt) = serve(Limits { max_connections: 2, ..Limits::default() });
    let held: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(srv.addr).expect("connect")).collect();
    // Let the accept loop take both before the third arrives.
    std::thread::sleep(Duration::from_millis(200));
    let mut third = TcpStream::connect(srv.addr).expect("connect");
    let (out, _) = read_until_closed(&mut third, Duration::from_secs(10));
    assert!(out.starts_with("HTTP/1.1 503"), "{out}");
    assert!(out.contains("--max-connections"), "{out}");
    assert_eq!(notice(&mut srv, &rt), Some(Notice::ConnectionCap { cap: 2 }));
    drop(held);
}

#[test]
fn sim_405_names_allowed_methods() {
    let (srv, _rt) = serve(Limits::default());
    for (method, path, allow) in [("GET", "/v1/completions", "POST"), ("POST", "/health", "GET"), ("DELETE", "/generate", "POST")] {
        let mut s = TcpStream::connect(srv.addr).expect("connect");
        write!(s, "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").expect("write");
        let (out, _) = read_until_closed(&mut s, Duration::from_secs(10));
        assert!(out.starts_with("HTTP/1.1 405"), "{out}");
        assert!(out.to_ascii_lowercase().contains(&format!("allow: {}", allow.to_ascii_lowercase())), "{out}");
        let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(body).expect("json body");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        assert_eq!(v["error"]["code"], 405);
    }
}

/// A step cost that panics: the engine thread dies at its first step.
#[derive(Debug)]
struct Panics;

impl StepCost for Panics {
    fn step(&self, _: &StepBatch) -> Duration {
        panic!("a broken cost model")
    }
}

#[test]
fn sim_health_stops_saying_200_when_the_engine_thread_dies() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let mut cfg = SimConfig::new(profile());
    cfg.cost = Some(std::sync::Arc::new(Panics));
    let srv = rt.block_on(servetune_sim::start(cfg, "127.0.0.1:0".parse().expect("addr"))).expect("start");
    let addr = srv.addr.to_string();
    assert!(crate::get(&addr, "/health").starts_with("HTTP/1.1 200"));
    let out = crate::post(&addr, "/v1/completions", r#"{"prompt":"a","max_tokens":2}"#);
    assert!(out.starts_with("HTTP/1.1 503"), "the request fails cleanly: {out}");
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut health = crate::get(&addr, "/health");
    while health.starts_with("HTTP/1.1 200") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        health = crate::get(&addr, "/health");
    }
    assert!(health.starts_with("HTTP/1.1 503") && health.contains("engine thread has stopped"), "{health}");
}

/// A profile directory of its own under the system temp directory, removed when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("servetune-sim-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn sim_writes_profiles_only_under_its_profile_directory() {
    let root = TempDir::new("profiles");
    let outside = TempDir::new("outside");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let mut cfg = SimConfig::new(profile());
    cfg.profile_dir = root.0.clone();
    let srv = rt.block_on(servetune_sim::start(cfg, "127.0.0.1:0".parse().expect("addr"))).expect("start");
    let addr = srv.addr.to_string();
    let elsewhere = outside.0.display().to_string();
    for bad in [elsewhere.as_str(), "../escape", "a/b", "..", "/etc", "a\\b"] {
        let body = serde_json::json!({"output_dir": bad, "num_steps": 2}).to_string();
        let out = crate::post(&addr, "/start_profile", &body);
        assert!(out.starts_with("HTTP/1.1 400"), "{bad}: {out}");
        assert!(out.contains("--profile-dir") && out.contains("give a plain name"), "{bad}: {out}");
    }
    assert!(!outside.0.exists(), "nothing was written outside the profile directory");
    let out = crate::post(&addr, "/start_profile", r#"{"output_dir": "run-1", "num_steps": 2, "activities": ["CPU", "GPU"]}"#);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let gen = crate::post(&addr, "/v1/completions", r#"{"prompt":"a b","max_tokens":4,"ignore_eos":true}"#);
    assert!(gen.starts_with("HTTP/1.1 200"), "{gen}");
    let out = crate::post(&addr, "/stop_profile", "");
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(body).expect("json");
    let path = std::path::PathBuf::from(v["trace_path"].as_str().expect("trace_path"));
    assert!(path.starts_with(root.0.join("run-1")) && path.exists(), "{}", path.display());
}
