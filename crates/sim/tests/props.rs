//! Arbitrary bytes never panic the server: not its HTTP request handling, not any API's body
//! parser. (`SimServer::serve_io` and `wire::parse_request` are public for a fuzz harness too.)

use std::time::Duration;

use proptest::prelude::*;
use servetune_sim::wire::{parse_request, Api};
use servetune_sim::SimConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::profile;

/// Request-like bytes: a real method, path and header set, with arbitrary bytes mixed in.
fn request_bytes() -> impl Strategy<Value = Vec<u8>> {
    let method = prop::sample::select(vec!["GET", "POST", "PUT", "HEAD", "G\0T", ""]);
    let path = prop::sample::select(vec!["/health", "/v1/completions", "/v1/chat/completions", "/generate", "/metrics", "/x", "*"]);
    (method, path, prop::collection::vec(any::<u8>(), 0..300), any::<bool>()).prop_map(|(m, p, junk, framed)| {
        if framed {
            let mut v = format!("{m} {p} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", junk.len()).into_bytes();
            v.extend_from_slice(&junk);
            v
        } else {
            junk
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_to_the_http_server_never_panic(bytes in request_bytes()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        let out = rt.block_on(async {
            let srv = servetune_sim::start(SimConfig::new(profile()), "127.0.0.1:0".parse().expect("addr")).await.expect("start");
            let (mut client, server) = tokio::io::duplex(1 << 16);
            let serving = srv.serve_io(server);
            let talk = async {
                let _ = client.write_all(&bytes).await;
                let _ = client.shutdown().await;
                let mut out = Vec::new();
                let _ = client.read_to_end(&mut out).await;
                out
            };
            let (_, out) = tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(serving, talk) }).await.expect("answered in time");
            out
        });
        prop_assert!(out.is_empty() || out.starts_with(b"HTTP/1.1 "), "{}", String::from_utf8_lossy(&out));
    }

    #[test]
    fn arbitrary_bodies_never_panic_any_parser(body in prop::collection::vec(any::<u8>(), 0..512)) {
        for api in Api::ALL {
            if let Ok(r) = parse_request(api, &body) {
                let a = r.ask();
                prop_assert!(a.max_tokens >= 1 && a.min_tokens <= a.max_tokens);
            }
        }
    }

    #[test]
    fn arbitrary_json_bodies_never_panic_any_parser(
        max in any::<i64>(), prompt in ".{0,40}", ids in prop::collection::vec(any::<u32>(), 0..8), stream in any::<bool>()
    ) {
        let bodies = [
            serde_json::json!({"prompt": prompt, "max_tokens": max, "stream": stream}),
            serde_json::json!({"prompt": ids, "min_tokens": max}),
            serde_json::json!({"messages": [{"role": "user", "content": prompt}], "max_completion_tokens": max}),
            serde_json::json!({"text": prompt, "sampling_params": {"max_new_tokens": max}, "stream": stream}),
            serde_json::json!({"input_ids": ids, "sampling_params": max}),
        ];
        for b in &bodies {
            let bytes = serde_json::to_vec(b).expect("json");
            for api in Api::ALL {
                let _ = parse_request(api, &bytes);
            }
        }
    }
}
