//! An in-process OpenAI/sglang-compatible test server with exact, configurable timing (TTFT, ITL,
//! tokens per chunk) and failure injection. It exists to test and benchmark the load generator:
//! every request is served independently, on an absolute schedule from its arrival, so the true
//! TTFT and ITL are known. (The simulated *engine* with batching and queueing is `servetune sim`.)
//!
//! One word of prompt counts as one prompt token; every output token is the text " tok".

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// Timing and faults of the test server. Rates are fractions of requests (0..1), chosen
/// deterministically from the request's arrival number and `seed`.
#[derive(Debug, Clone)]
pub struct TestServerConfig {
    pub ttft: Duration,
    pub itl: Duration,
    pub tokens_per_chunk: u32,
    /// Output tokens when the request names none.
    pub default_output: u32,
    /// Send a role-only first chunk on chat streams (as vLLM and sglang do).
    pub role_chunk: bool,
    /// Stream this many reasoning tokens (`reasoning_content`) before the content on chat.
    pub reasoning_tokens: u32,
    /// Answer with `error_status` before streaming.
    pub fail_rate: f64,
    pub error_status: u16,
    /// Send an error object mid-stream.
    pub error_payload_rate: f64,
    /// Send an event that is not JSON after the first chunk.
    pub malformed_rate: f64,
    /// Break the connection mid-stream.
    pub truncate_rate: f64,
    /// Pause this long after the first chunk.
    pub stall: Option<Duration>,
    pub stall_rate: f64,
    /// Answer 200 with an HTML page instead of an event stream.
    pub not_sse: bool,
    /// Stop after this many tokens with finish_reason "stop", whatever ignore_eos says.
    pub early_stop_at: Option<u32>,
    pub seed: u64,
}

impl Default for TestServerConfig {
    fn default() -> Self {
        Self {
            ttft: Duration::ZERO,
            itl: Duration::ZERO,
            tokens_per_chunk: 1,
            default_output: 16,
            role_chunk: true,
            reasoning_tokens: 0,
            fail_rate: 0.0,
            error_status: 500,
            error_payload_rate: 0.0,
            malformed_rate: 0.0,
            truncate_rate: 0.0,
            stall: None,
            stall_rate: 0.0,
            not_sse: false,
            early_stop_at: None,
            seed: 1,
        }
    }
}

/// A running test server; stops when dropped.
#[derive(Debug)]
pub struct TestServer {
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.state.arrivals.load(Ordering::Relaxed)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Debug)]
struct State {
    cfg: TestServerConfig,
    arrivals: AtomicU64,
    running: AtomicU64,
}

/// Starts a server on 127.0.0.1 with an OS-chosen port.
pub async fn start(cfg: TestServerConfig) -> std::io::Result<TestServer> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let state = Arc::new(State { cfg, arrivals: AtomicU64::new(0), running: AtomicU64::new(0) });
    let st = Arc::clone(&state);
    let task = tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                continue;
            };
            let _ = sock.set_nodelay(true);
            let st = Arc::clone(&st);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let st = Arc::clone(&st);
                    async move { Ok::<_, Infallible>(handle(st, req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(sock), svc).await;
            });
        }
    });
    Ok(TestServer { addr, url: format!("http://{addr}"), state, task })
}

/// A streamed body fed from a channel; an `Err` item breaks the connection (a truncated stream).
pub struct ChanBody {
    rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
}

impl hyper::body::Body for ChanBody {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Ok(b))) => Poll::Ready(Some(Ok(Frame::data(b)))),
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

type Resp = Response<http_body_util::Either<http_body_util::Full<Bytes>, ChanBody>>;

fn full(status: StatusCode, ctype: &str, body: impl Into<Bytes>) -> Resp {
    let mut r = Response::new(http_body_util::Either::Left(http_body_util::Full::new(body.into())));
    *r.status_mut() = status;
    if let Ok(v) = http::HeaderValue::from_str(ctype) {
        r.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    r
}

fn json_resp(status: StatusCode, v: &Value) -> Resp {
    full(status, "application/json", serde_json::to_vec(v).unwrap_or_default())
}

/// A deterministic uniform number in [0, 1) for arrival `n`, fault `salt`.
fn chance(seed: u64, n: u64, salt: u64) -> f64 {
    let mut x = seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Completions,
    Chat,
    Sglang,
}

async fn handle(st: Arc<State>, req: Request<Incoming>) -> Resp {
    let path = req.uri().path().to_string();
    match (req.method().as_str(), path.as_str()) {
        ("GET", "/v1/models") => json_resp(
            StatusCode::OK,
            &json!({"object": "list", "data": [{"id": "test-model", "object": "model", "owned_by": "servetune"}]}),
        ),
        ("GET", "/health") => full(StatusCode::OK, "text/plain", ""),
        ("GET", "/metrics") => {
            let running = st.running.load(Ordering::Relaxed);
            full(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                format!("# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{{model_name=\"test-model\"}} {running}\nsglang:num_queue_reqs{{model_name=\"test-model\"}} 0\nsglang:token_usage{{model_name=\"test-model\"}} 0.0\n"),
            )
        }
        ("POST", "/v1/completions") => generate(st, req, Kind::Completions).await,
        ("POST", "/v1/chat/completions") => generate(st, req, Kind::Chat).await,
        ("POST", "/generate") => generate(st, req, Kind::Sglang).await,
        _ => json_resp(StatusCode::NOT_FOUND, &json!({"detail": "Not Found"})),
    }
}

fn event(v: &Value) -> Bytes {
    let mut s = Vec::with_capacity(160);
    s.extend_from_slice(b"data: ");
    let _ = serde_json::to_writer(&mut s, v);
    s.extend_from_slice(b"\n\n");
    Bytes::from(s)
}

async fn generate(st: Arc<State>, req: Request<Incoming>, kind: Kind) -> Resp {
    let n = st.arrivals.fetch_add(1, Ordering::Relaxed);
    let arrival = tokio::time::Instant::now();
    let cfg = &st.cfg;
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return json_resp(StatusCode::BAD_REQUEST, &json!({"error": {"message": "body read failed"}})),
    };
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return json_resp(StatusCode::BAD_REQUEST, &json!({"error": {"message": "invalid JSON", "type": "invalid_request_error"}}));
    };
    let (prompt_tokens, max_tokens, stream, usage) = match kind {
        Kind::Sglang => (
            v["text"].as_str().map_or(0, |t| t.split_whitespace().count()) as u64,
            v["sampling_params"]["max_new_tokens"].as_u64(),
            v["stream"].as_bool().unwrap_or(false),
            true,
        ),
        Kind::Completions => (
            v["prompt"].as_str().map_or(0, |t| t.split_whitespace().count()) as u64,
            v["max_tokens"].as_u64(),
            v["stream"].as_bool().unwrap_or(false),
            v["stream_options"]["include_usage"].as_bool().unwrap_or(false),
        ),
        Kind::Chat => (
            v["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["content"].as_str())
                .map(|t| t.split_whitespace().count() as u64)
                .sum(),
            v["max_tokens"].as_u64().or(v["max_completion_tokens"].as_u64()),
            v["stream"].as_bool().unwrap_or(false),
            v["stream_options"]["include_usage"].as_bool().unwrap_or(false),
        ),
    };
    let max_tokens = max_tokens.unwrap_or(cfg.default_output as u64) as u32;
    if max_tokens == 0 {
        return json_resp(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"message": "max_tokens must be at least 1", "type": "invalid_request_error"}}),
        );
    }
    if chance(cfg.seed, n, 1) < cfg.fail_rate {
        let status = StatusCode::from_u16(cfg.error_status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return json_resp(status, &json!({"error": {"message": "injected failure", "code": cfg.error_status}}));
    }
    if cfg.not_sse {
        return full(StatusCode::OK, "text/html", "<html><body>not an API</body></html>");
    }
    let out_tokens = cfg.early_stop_at.map_or(max_tokens, |e| e.min(max_tokens));
    let finish = if out_tokens < max_tokens { "stop" } else { "length" };
    let reasoning = if kind == Kind::Chat { cfg.reasoning_tokens.min(out_tokens) } else { 0 };
    let tpc = cfg.tokens_per_chunk.max(1);

    if !stream {
        let total = cfg.ttft + cfg.itl * out_tokens.div_ceil(tpc).saturating_sub(1);
        tokio::time::sleep_until(arrival + total).await;
        let text = " tok".repeat(out_tokens as usize);
        let usage_v =
            json!({"prompt_tokens": prompt_tokens, "completion_tokens": out_tokens, "total_tokens": prompt_tokens + out_tokens as u64});
        let v = match kind {
            Kind::Completions => {
                json!({"id": format!("cmpl-{n}"), "object": "text_completion", "model": "test-model", "choices": [{"index": 0, "text": text, "finish_reason": finish}], "usage": usage_v})
            }
            Kind::Chat => {
                json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion", "model": "test-model", "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}], "usage": usage_v})
            }
            Kind::Sglang => {
                json!({"text": text, "meta_info": {"prompt_tokens": prompt_tokens, "completion_tokens": out_tokens, "finish_reason": {"type": finish}}})
            }
        };
        return json_resp(StatusCode::OK, &v);
    }

    let (tx, rx) = mpsc::channel(64);
    let faults = (
        chance(cfg.seed, n, 2) < cfg.error_payload_rate,
        chance(cfg.seed, n, 3) < cfg.malformed_rate,
        chance(cfg.seed, n, 4) < cfg.truncate_rate,
        if chance(cfg.seed, n, 5) < cfg.stall_rate { cfg.stall } else { None },
    );
    let st2 = Arc::clone(&st);
    tokio::spawn(async move {
        st2.running.fetch_add(1, Ordering::Relaxed);
        stream_tokens(&st2.cfg, tx, kind, n, arrival, prompt_tokens, out_tokens, reasoning, finish, usage, faults).await;
        st2.running.fetch_sub(1, Ordering::Relaxed);
    });
    let mut r = Response::new(http_body_util::Either::Right(ChanBody { rx }));
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/event-stream; charset=utf-8"));
    r.headers_mut().insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static("no-cache"));
    r
}

#[expect(clippy::too_many_arguments, reason = "one call site; a struct would only rename these")]
async fn stream_tokens(
    cfg: &TestServerConfig,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    kind: Kind,
    n: u64,
    arrival: tokio::time::Instant,
    prompt_tokens: u64,
    out_tokens: u32,
    reasoning: u32,
    finish: &str,
    usage: bool,
    (error_payload, malformed, truncate, stall): (bool, bool, bool, Option<Duration>),
) {
    let id = format!("cmpl-{n}");
    if kind == Kind::Chat && cfg.role_chunk {
        let v = json!({"id": id, "object": "chat.completion.chunk", "model": "test-model", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]});
        if tx.send(Ok(event(&v))).await.is_err() {
            return;
        }
    }
    let tpc = cfg.tokens_per_chunk.max(1);
    let chunks = out_tokens.div_ceil(tpc);
    let mut sent = 0u32;
    let mut text = String::new();
    for c in 0..chunks {
        let due = arrival + cfg.ttft + cfg.itl * c;
        if due > tokio::time::Instant::now() {
            tokio::time::sleep_until(due).await;
        }
        if c == chunks / 2 && c > 0 {
            if error_payload {
                let _ = tx.send(Ok(event(&json!({"error": {"message": "injected error mid-stream", "code": 500}})))).await;
                return;
            }
            if truncate {
                let _ = tx.send(Err(std::io::Error::other("injected truncation"))).await;
                return;
            }
        }
        let k = tpc.min(out_tokens - sent);
        let piece = " tok".repeat(k as usize);
        sent += k;
        let last = c + 1 == chunks;
        let fr = if last { Value::String(finish.into()) } else { Value::Null };
        let v = match kind {
            Kind::Completions => {
                json!({"id": id, "object": "text_completion", "model": "test-model", "choices": [{"index": 0, "text": piece, "finish_reason": fr}]})
            }
            Kind::Chat => {
                let delta = if sent <= reasoning { json!({"reasoning_content": piece}) } else { json!({"content": piece}) };
                json!({"id": id, "object": "chat.completion.chunk", "model": "test-model", "choices": [{"index": 0, "delta": delta, "finish_reason": fr}]})
            }
            Kind::Sglang => {
                text.push_str(&piece);
                let fr = if last { json!({"type": finish}) } else { Value::Null };
                json!({"text": text, "meta_info": {"prompt_tokens": prompt_tokens, "completion_tokens": sent, "finish_reason": fr}})
            }
        };
        if tx.send(Ok(event(&v))).await.is_err() {
            return;
        }
        if c == 0 {
            if malformed {
                let _ = tx.send(Ok(Bytes::from_static(b"data: {this is not json\n\n"))).await;
                return;
            }
            if let Some(d) = stall {
                tokio::time::sleep(d).await;
            }
        }
    }
    if usage && kind != Kind::Sglang {
        let v = json!({"id": id, "object": "text_completion", "model": "test-model", "choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": out_tokens, "total_tokens": prompt_tokens + out_tokens as u64}});
        if tx.send(Ok(event(&v))).await.is_err() {
            return;
        }
    }
    let _ = tx.send(Ok(Bytes::from_static(b"data: [DONE]\n\n"))).await;
}
