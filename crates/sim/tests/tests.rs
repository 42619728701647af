//! Integration tests of servetune-sim over raw HTTP (the load-generator-driven tests live in the CLI
//! crate, which may depend on both bench and sim).

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use servetune_sim::{ParametricCost, Profile, SimConfig};

mod exact;
mod fit_calibrated;
mod hardening;
mod props;
mod vbench;

fn profile() -> Profile {
    Profile {
        name: "t".into(),
        model: "sim-test".into(),
        tp_size: 1,
        max_running_requests: 8,
        kv_tokens: 1 << 16,
        page_size: 16,
        chunked_prefill_size: 8192,
        eos_mean_tokens: 16,
        scheduling: servetune_sim::cost::Scheduling::Mixed,
        cost: ParametricCost { overhead_ms: 10.0, per_decode_token_ms: 0.0, per_prefill_token_ms: 0.0, per_context_token_us: 0.0 },
        moe_efficiency: None,
    }
}

/// `GET path` on a fresh connection; the whole response.
fn get(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("write");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// `POST path` with a JSON body on a fresh connection; the whole response.
fn post(addr: &str, path: &str, body: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn a_streamed_completion_paces_tokens_and_ends_with_usage_and_done() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let srv = rt.block_on(servetune_sim::start(SimConfig::new(profile()), "127.0.0.1:0".parse().expect("addr"))).expect("start");
    let addr = srv.addr.to_string();
    let t = Instant::now();
    let out = post(
        &addr,
        "/v1/completions",
        r#"{"prompt":"a b c","max_tokens":5,"stream":true,"ignore_eos":true,"stream_options":{"include_usage":true}}"#,
    );
    let took = t.elapsed();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.contains("text/event-stream"));
    let events: Vec<&str> = out.lines().filter(|l| l.starts_with("data: ")).collect();
    // 5 token events, the finish event, the usage event, [DONE].
    assert_eq!(events.len(), 8, "{out}");
    assert!(events[5].contains("\"finish_reason\":\"length\""), "{}", events[5]);
    assert!(events[6].contains("\"completion_tokens\":5") && events[6].contains("\"prompt_tokens\":3"), "{}", events[6]);
    assert_eq!(events[7], "data: [DONE]");
    // Five 10 ms steps (one prefill step emitting the first token, four decode steps).
    assert!(took >= Duration::from_millis(50), "{took:?}");
    // The engine thread counts the request after its last event is sent: give it a moment.
    let mut snap = srv.snapshot();
    let until = Instant::now() + Duration::from_secs(5);
    while snap.requests_finished < 1 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
        snap = srv.snapshot();
    }
    assert_eq!(snap.stats.generation_tokens, 5);
    assert_eq!(snap.requests_finished, 1);
}
