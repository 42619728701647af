//! Shared helpers: simulated servers kept alive on their own runtime, and the binary.

use std::time::Duration;

use assert_cmd::Command;
use servetune_sim::{ExactTiming, Faults, Mode, SimConfig};

/// A simulated server in exact-timing mode (every request on its own known schedule, no batching),
/// with `faults`: the server the load generator's tests measure against.
pub fn exact(timing: ExactTiming, faults: Faults) -> Sim {
    let mut cfg = SimConfig::new(flat_profile(1.0, 1024, 1 << 24));
    cfg.profile.model = "test-model".into();
    cfg.mode = Mode::Exact(timing);
    cfg.faults = faults;
    sim(cfg)
}

/// Exact timing of `ttft` and `itl` per chunk, one token per chunk, no faults.
pub fn timed(ttft: Duration, itl: Duration) -> Sim {
    exact(ExactTiming { ttft, itl, ..Default::default() }, Faults::default())
}

/// Measures this machine's timer wake-up jitter while a timing test runs: a thread sleeps 1 ms
/// at a time and records how late it wakes. Tests add a multiple of the p90 lateness to their
/// margins, so the lateness a loaded machine imposes on the server's and the client's wake-ups
/// is allowed for, and an idle machine's bound stays tight.
pub struct JitterProbe {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Duration>>,
}

impl JitterProbe {
    /// Starts sampling.
    pub fn start() -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut late = Vec::new();
            // At least 50 samples, then until the test is done.
            while late.len() < 50 || !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let t = std::time::Instant::now();
                std::thread::sleep(Duration::from_millis(1));
                late.push(t.elapsed().saturating_sub(Duration::from_millis(1)));
            }
            late
        });
        Self { stop, thread }
    }

    /// Stops sampling; the p90 lateness of a 1 ms sleep, in ms.
    pub fn p90_ms(self) -> f64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut late = self.thread.join().expect("jitter probe");
        late.sort();
        late[late.len() * 9 / 10].as_secs_f64() * 1e3
    }
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
    let out = servetune().arg("bench").args(args).arg("--json").arg(&json).arg("-q").output().expect("run");
    let code = out.status.code().unwrap_or(-1);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let v = std::fs::read(&json).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or(serde_json::Value::Null);
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
    cur.as_f64().unwrap_or_else(|| panic!("{path} missing in {v:#}"))
}

/// A simulated server on its own runtime.
pub struct Sim {
    pub srv: servetune_sim::SimServer,
    _rt: tokio::runtime::Runtime,
}

impl Sim {
    pub fn url(&self) -> &str {
        &self.srv.url
    }
}

pub fn sim(cfg: servetune_sim::SimConfig) -> Sim {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let srv = rt.block_on(servetune_sim::start(cfg, "127.0.0.1:0".parse().expect("addr"))).expect("start sim");
    Sim { srv, _rt: rt }
}

/// A fast profile: `step_ms` per step whatever the batch, limits as given.
pub fn flat_profile(step_ms: f64, max_running: u32, kv_tokens: u64) -> servetune_sim::Profile {
    servetune_sim::Profile {
        name: "flat".into(),
        model: "sim-flat".into(),
        tp_size: 1,
        max_running_requests: max_running,
        kv_tokens,
        page_size: 16,
        chunked_prefill_size: 8192,
        eos_mean_tokens: 64,
        scheduling: servetune_sim::cost::Scheduling::Mixed,
        cost: servetune_sim::ParametricCost {
            overhead_ms: step_ms,
            per_decode_token_ms: 0.0,
            per_prefill_token_ms: 0.0,
            per_context_token_us: 0.0,
        },
        moe_efficiency: None,
    }
}

/// Sends one raw HTTP/1.1 request and returns (status, body).
pub fn raw_http(url: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    s.write_all(req.as_bytes()).expect("write");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// A `servetune sim` process and the URL it printed first. Its stdout is
/// drained for its whole life, so a closed pipe is never what stops it.
pub struct Proc {
    pub child: std::process::Child,
    pub url: String,
    drain: Option<std::thread::JoinHandle<()>>,
    stderr: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    stderr_drain: Option<std::thread::JoinHandle<()>>,
}

impl Proc {
    pub fn start(args: &[&str]) -> Self {
        use std::io::BufRead;
        // stderr is captured, not inherited: a server's expected complaints (an injected crash, a
        // refused connection) must not read like failures in a passing test run.
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("servetune"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn servetune");
        let mut err = child.stderr.take().expect("stderr");
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = std::sync::Arc::clone(&stderr);
        let stderr_drain = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut err, &mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut v) = sink.lock() {
                    v.extend_from_slice(&buf[..n]);
                }
            }
        });
        let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("first line");
        let url = line.trim().rsplit(' ').next().unwrap_or_default().to_string();
        assert!(url.starts_with("http://127.0.0.1:"), "unexpected first line {line:?}");
        let drain = std::thread::spawn(move || {
            let _ = std::io::copy(&mut out, &mut std::io::sink());
        });
        Proc { child, url, drain: Some(drain), stderr, stderr_drain: Some(stderr_drain) }
    }

    /// Waits for the process to exit by itself; returns its status and everything it wrote to stderr.
    pub fn wait(mut self) -> (std::process::ExitStatus, String) {
        let st = self.child.wait().expect("wait");
        for d in [self.drain.take(), self.stderr_drain.take()].into_iter().flatten() {
            let _ = d.join();
        }
        let err = self.stderr.lock().map(|v| String::from_utf8_lossy(&v).into_owned()).unwrap_or_default();
        (st, err)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `servetune ARGS`; returns (exit code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    let out = servetune().args(args).output().expect("run servetune");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// `servetune CMD ARGS` must exit 2 with `needle` in its message, and never panic.
pub fn usage_error(cmd: &str, args: &[&str], needle: &str) {
    let all: Vec<&str> = std::iter::once(cmd).chain(args.iter().copied()).collect();
    let (code, _, err) = run(&all);
    assert_eq!(code, 2, "{all:?}: {err}");
    assert!(err.contains(needle), "{all:?}: want {needle:?} in {err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// A FIFO at `dir/name` that a thread fills with spaces (valid text, and JSON whitespace) until
/// its reader goes: an endless text stream, for the size limits of inputs read as text (a binary
/// device such as /dev/zero is refused at its first byte instead).
pub fn endless_text(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    use std::io::Write as _;
    let p = dir.join(name);
    assert!(std::process::Command::new("mkfifo").arg(&p).status().expect("mkfifo").success(), "mkfifo {}", p.display());
    let q = p.clone();
    std::thread::spawn(move || {
        if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(&q) {
            let spaces = vec![b' '; 1 << 16];
            while f.write_all(&spaces).is_ok() {}
        }
    });
    p
}
