//! Shared helpers: an in-process test server kept alive on its own runtime, and the binary.

use std::time::Duration;

use assert_cmd::Command;
use servetune_bench::testserver::{self, TestServer, TestServerConfig};

/// A test server and the runtime that drives it.
pub struct Server {
    pub srv: TestServer,
    _rt: tokio::runtime::Runtime,
}

impl Server {
    pub fn url(&self) -> &str {
        &self.srv.url
    }
}

pub fn server(cfg: TestServerConfig) -> Server {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let srv = rt
        .block_on(testserver::start(cfg))
        .expect("start test server");
    Server { srv, _rt: rt }
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn servetune() -> Command {
    let mut c = Command::cargo_bin("servetune").expect("binary");
    c.env_remove("OPENAI_API_KEY");
    c.timeout(Duration::from_secs(600));
    c
}

/// Runs `servetune bench` with `args` plus `--json FILE -q`; returns (exit code, JSON, stderr).
pub fn bench_json(args: &[&str]) -> (i32, serde_json::Value, String) {
    let dir = tempfile::tempdir().expect("tmp");
    let json = dir.path().join("out.json");
    let out = servetune()
        .arg("bench")
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg("-q")
        .output()
        .expect("run");
    let code = out.status.code().unwrap_or(-1);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let v = std::fs::read(&json)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(serde_json::Value::Null);
    (code, v, stderr)
}

/// The number at a dotted path (`runs.0.latency_ms.ttft.p50`), panicking with the document when missing.
pub fn num(v: &serde_json::Value, path: &str) -> f64 {
    let mut cur = v;
    for k in path.split('.') {
        cur = match k.parse::<usize>() {
            Ok(i) => &cur[i],
            Err(_) => &cur[k],
        };
    }
    cur.as_f64()
        .unwrap_or_else(|| panic!("{path} missing in {v:#}"))
}
