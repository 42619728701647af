//! Exact-timing mode: the schedule in virtual time (no wall-clock sleeps, so no jitter to allow
//! for), and the chunk contents and stream faults over HTTP.

use std::time::Duration;

use servetune_sim::driver::Out;
use servetune_sim::engine::Finish;
use servetune_sim::stream::exact_source;
use servetune_sim::wire::{parse_request, Api};
use servetune_sim::{ExactTiming, Faults, Mode, SimConfig};

use crate::{post, profile};

#[test]
fn exact_chunks_leave_at_ttft_plus_k_itl_in_virtual_time() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().expect("rt");
    let got = rt.block_on(async {
        let timing =
            ExactTiming { ttft: Duration::from_millis(80), itl: Duration::from_millis(40), tokens_per_chunk: 4, ..Default::default() };
        let ask = parse_request(Api::Completions, br#"{"prompt":"a b","max_tokens":10}"#).expect("ask").ask();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let t0 = tokio::time::Instant::now();
        tokio::spawn(exact_source(timing, ask, t0, tx));
        let mut got = Vec::new();
        while let Some(o) = rx.recv().await {
            got.push((t0.elapsed(), o));
        }
        got
    });
    let ms = Duration::from_millis;
    assert_eq!(
        got,
        vec![
            (ms(80), Out::Tokens { first: 0, count: 4 }),
            (ms(120), Out::Tokens { first: 4, count: 4 }),
            (ms(160), Out::Tokens { first: 8, count: 2 }),
            (ms(160), Out::Done { finish: Finish::Length, prompt_tokens: 2, completion_tokens: 10 }),
        ]
    );
}

#[test]
fn exact_schedules_of_a_week_do_not_overflow_the_clock() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().expect("rt");
    let first = rt.block_on(async {
        let week = Duration::from_secs(7 * 24 * 3600);
        let timing = ExactTiming { ttft: week, itl: week, ..Default::default() };
        let ask = parse_request(Api::Completions, br#"{"prompt":"a","max_tokens":3}"#).expect("ask").ask();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(exact_source(timing, ask, tokio::time::Instant::now(), tx));
        rx.recv().await
    });
    assert_eq!(first, Some(Out::Tokens { first: 0, count: 1 }));
}

fn exact_server(timing: ExactTiming, faults: Faults) -> (servetune_sim::SimServer, tokio::runtime::Runtime) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let mut cfg = SimConfig::new(profile());
    cfg.mode = Mode::Exact(timing);
    cfg.faults = faults;
    let srv = rt.block_on(servetune_sim::start(cfg, "127.0.0.1:0".parse().expect("addr"))).expect("start");
    (srv, rt)
}

fn events(out: &str) -> Vec<&str> {
    out.lines().filter_map(|l| l.strip_prefix("data: ")).collect()
}

#[test]
fn exact_chat_streams_reasoning_then_content_in_chunks_of_tokens() {
    let (srv, _rt) = exact_server(ExactTiming { tokens_per_chunk: 2, reasoning_tokens: 2, ..Default::default() }, Faults::default());
    let out = post(
        &srv.addr.to_string(),
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"a b c"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}"#,
    );
    let ev = events(&out);
    // role, 3 chunks (2+2+1 tokens), finish, usage, [DONE]
    assert_eq!(ev.len(), 7, "{out}");
    assert!(ev[0].contains(r#""role":"assistant""#), "{}", ev[0]);
    assert!(ev[1].contains("reasoning_content") && !ev[1].contains(r#""content""#), "{}", ev[1]);
    assert!(ev[2].contains(r#""content""#) && !ev[2].contains("reasoning"), "{}", ev[2]);
    assert!(ev[5].contains(r#""completion_tokens":5"#) && ev[5].contains(r#""prompt_tokens":3"#), "{}", ev[5]);
    assert_eq!(ev[6], "[DONE]");
}

#[test]
fn exact_stream_faults_end_streams_as_configured() {
    let body = r#"{"prompt":"a","max_tokens":6,"stream":true}"#;
    let cases = [
        (Faults { malformed_rate: 1.0, ..Default::default() }, "{this is not json"),
        (Faults { fail_rate: 1.0, ..Default::default() }, "injected error mid-stream"),
        (Faults { early_stop_at: Some(2), ..Default::default() }, r#""finish_reason":"stop""#),
    ];
    for (faults, needle) in cases {
        let (srv, _rt) = exact_server(ExactTiming::default(), faults.clone());
        let out = post(&srv.addr.to_string(), "/v1/completions", body);
        assert!(out.contains(needle), "{faults:?}: {out}");
    }
    let (srv, _rt) = exact_server(ExactTiming::default(), Faults { truncate_rate: 1.0, ..Default::default() });
    let out = post(&srv.addr.to_string(), "/v1/completions", body);
    assert_eq!(events(&out).len(), 1, "one chunk, then the connection breaks: {out}");
    assert!(!out.contains("[DONE]") && !out.ends_with("0\r\n\r\n"), "no clean end: {out}");
    let (srv, _rt) = exact_server(ExactTiming::default(), Faults { not_sse_rate: 1.0, ..Default::default() });
    let out = post(&srv.addr.to_string(), "/v1/completions", body);
    assert!(out.starts_with("HTTP/1.1 200") && out.contains("text/html"), "{out}");
}

#[test]
fn exact_metrics_count_the_requests_in_flight() {
    let timing = ExactTiming { ttft: Duration::from_secs(1), ..Default::default() };
    let (srv, _rt) = exact_server(timing, Faults::default());
    let addr = srv.addr.to_string();
    let client = {
        let addr = addr.clone();
        std::thread::spawn(move || post(&addr, "/v1/completions", r#"{"prompt":"a","max_tokens":1}"#))
    };
    let running = |m: &str| m.lines().any(|l| l.starts_with("sglang:num_running_reqs") && l.ends_with(" 1"));
    let deadline = std::time::Instant::now() + Duration::from_millis(900);
    let mut seen = false;
    while !seen && std::time::Instant::now() < deadline {
        seen = running(&crate::get(&addr, "/metrics"));
    }
    assert!(seen, "one request in flight during its 1 s schedule");
    assert!(client.join().expect("client").starts_with("HTTP/1.1 200"));
    assert!(!running(&crate::get(&addr, "/metrics")), "none once it finished");
}
