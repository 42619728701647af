//! The simulator's HTTP surface: OpenAI completions and chat (streaming or not, with usage),
//! sglang's `/generate`, `/health`, `/health_generate`, `/get_server_info`, `/v1/models` and
//! Prometheus `/metrics`; request validation with OpenAI-style 400 bodies; fault injection.
//!
//! Tokens: one word of prompt text counts as one prompt token (a list of token ids counts its
//! length); output tokens are words from a fixed list, chosen by request and position.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::sync::watch;

use crate::cost::Profile;
use crate::driver::{self, EngineHandle, Out, Published, Stall};
use crate::engine::{Engine, EngineRequest};
use crate::{metrics, SimConfig, SimError};

const WORDS: &[&str] = &[
    " the",
    " model",
    " serves",
    " tokens",
    " from",
    " a",
    " simulated",
    " batch",
    " of",
    " requests",
    " and",
    " every",
    " step",
    " takes",
    " time",
    " that",
    " grows",
    " with",
    " load",
    " while",
    " cache",
    " pages",
    " fill",
    " up",
    " then",
    " queue",
];

fn word(id: u64, index: u32) -> &'static str {
    WORDS[((id.wrapping_mul(31) ^ (index as u64 * 17)) % WORDS.len() as u64) as usize]
}

/// A running simulated server. Dropping it stops it.
#[derive(Debug)]
pub struct SimServer {
    pub addr: SocketAddr,
    /// `http://ADDR`.
    pub url: String,
    engine: EngineHandle,
    task: tokio::task::JoinHandle<()>,
    crashed: watch::Receiver<bool>,
    profile: Profile,
}

impl SimServer {
    /// Resolves when `--crash-after` has fired (never otherwise).
    pub async fn crashed(&mut self) {
        let _ = self.crashed.wait_for(|c| *c).await;
    }

    pub fn snapshot(&self) -> Published {
        self.engine.snapshot()
    }

    pub fn profile(&self) -> &Profile {
        &self.profile
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        self.task.abort();
        self.engine.shutdown();
    }
}

struct St {
    cfg: SimConfig,
    engine: EngineHandle,
    next_id: AtomicU64,
    started: Instant,
}

impl St {
    fn ready(&self) -> bool {
        self.cfg.faults.slow_start.is_none_or(|d| self.started.elapsed() >= d)
    }
}

/// Starts the engine thread and the HTTP listener on `listen` (port 0 picks a free port).
pub async fn start(cfg: SimConfig, listen: SocketAddr) -> Result<SimServer, SimError> {
    cfg.profile.validate().map_err(|e| SimError::Input(format!("profile {:?}: {e}", cfg.profile.name)))?;
    cfg.faults.validate()?;
    let cost = cfg.cost.clone().unwrap_or_else(|| Arc::new(cfg.profile.cost));
    let engine =
        driver::spawn(Engine::new(cfg.profile.clone(), cfg.seed), cost, Stall { every: cfg.faults.stall_every, dur: cfg.faults.stall_for })
            .map_err(|e| SimError::Runtime(format!("cannot start the engine thread: {e}")))?;
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| SimError::Input(format!("--listen {listen}: cannot listen there ({e}); pick a free port or 127.0.0.1:0")))?;
    let addr = listener.local_addr().map_err(|e| SimError::Runtime(e.to_string()))?;
    let (crash_tx, crashed) = watch::channel(false);
    let profile = cfg.profile.clone();
    let crash_after = cfg.faults.crash_after;
    let st = Arc::new(St { cfg, engine: engine.clone(), next_id: AtomicU64::new(1), started: Instant::now() });
    let engine_for_crash = engine.clone();
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        let crash = async {
            match crash_after {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::pin!(crash);
        loop {
            tokio::select! {
                acc = listener.accept() => {
                    let Ok((sock, _)) = acc else { continue };
                    let _ = sock.set_nodelay(true);
                    let st = Arc::clone(&st);
                    conns.spawn(async move {
                        let svc = hyper::service::service_fn(move |req| {
                            let st = Arc::clone(&st);
                            async move { Ok::<_, Infallible>(handle(st, req).await) }
                        });
                        let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(sock), svc).await;
                    });
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
                _ = &mut crash => {
                    // The process "dies": every connection drops mid-response and nothing listens.
                    conns.abort_all();
                    engine_for_crash.shutdown();
                    let _ = crash_tx.send(true);
                    return;
                }
            }
        }
    });
    Ok(SimServer { addr, url: format!("http://{addr}"), engine, task, crashed, profile })
}

type Body = Either<Full<Bytes>, SimBody>;

fn full(status: StatusCode, ctype: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Either::Left(Full::new(body.into())));
    *r.status_mut() = status;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(ctype));
    r
}

fn json_resp(status: StatusCode, v: &Value) -> Response<Body> {
    full(status, "application/json", serde_json::to_vec(v).unwrap_or_default())
}

/// The error body OpenAI clients parse (`error.message`, `error.type`, `error.param`, `error.code`).
fn openai_error(status: StatusCode, message: &str, param: Option<&str>) -> Response<Body> {
    let kind = match status.as_u16() {
        400 => "invalid_request_error",
        404 => "not_found_error",
        503 => "service_unavailable",
        _ => "server_error",
    };
    json_resp(status, &json!({"error": {"message": message, "type": kind, "param": param, "code": status.as_u16()}}))
}

async fn handle(st: Arc<St>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let known_get = ["/health", "/health_generate", "/get_server_info", "/server_info", "/v1/models", "/metrics", "/get_model_info"];
    let known_post = ["/v1/completions", "/v1/chat/completions", "/generate"];
    if method == Method::GET {
        match path.as_str() {
            "/health" => {
                return if st.ready() {
                    full(StatusCode::OK, "text/plain", "")
                } else {
                    full(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "starting")
                };
            }
            "/health_generate" => return health_generate(&st).await,
            "/get_server_info" | "/server_info" => return json_resp(StatusCode::OK, &server_info(&st.cfg)),
            "/get_model_info" => return json_resp(StatusCode::OK, &json!({"model_path": st.cfg.profile.model, "is_generation": true})),
            "/v1/models" => {
                return json_resp(
                    StatusCode::OK,
                    &json!({"object": "list", "data": [{"id": st.cfg.profile.model, "object": "model", "created": 0, "owned_by": "servetune-sim", "max_model_len": st.cfg.profile.kv_tokens}]}),
                )
            }
            "/metrics" => {
                return full(
                    StatusCode::OK,
                    "text/plain; version=0.0.4",
                    metrics::render(&st.engine.snapshot(), st.cfg.metrics_style, &st.cfg.profile.model),
                )
            }
            _ => {}
        }
    }
    if method == Method::POST {
        match path.as_str() {
            "/v1/completions" => return generate(st, req, Api::Completions).await,
            "/v1/chat/completions" => return generate(st, req, Api::Chat).await,
            "/generate" => return generate(st, req, Api::Sglang).await,
            _ => {}
        }
    }
    if known_get.contains(&path.as_str()) || known_post.contains(&path.as_str()) {
        return openai_error(StatusCode::METHOD_NOT_ALLOWED, &format!("method {method} is not allowed on {path}"), None);
    }
    openai_error(StatusCode::NOT_FOUND, &format!("no route {path}"), None)
}

fn server_info(cfg: &SimConfig) -> Value {
    let p = &cfg.profile;
    json!({
        "model_path": p.model,
        "served_model_name": p.model,
        "tp_size": p.tp_size,
        "max_running_requests": p.max_running_requests,
        "max_total_num_tokens": p.kv_tokens,
        "page_size": p.page_size,
        "chunked_prefill_size": p.chunked_prefill_size,
        "version": concat!("servetune-sim ", env!("CARGO_PKG_VERSION")),
        "servetune_sim": { "profile": p.name, "cost": p.cost, "seed": cfg.seed, "eos_mean_tokens": p.eos_mean_tokens },
    })
}

async fn health_generate(st: &St) -> Response<Body> {
    if !st.ready() {
        return full(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "starting");
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let id = st.next_id.fetch_add(1, Ordering::Relaxed);
    if !st.engine.submit(EngineRequest { id, prompt_tokens: 1, max_tokens: 1, min_tokens: 0, ignore_eos: true }, tx) {
        return full(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "engine stopped");
    }
    let wait = async {
        while let Some(o) = rx.recv().await {
            if matches!(o, Out::Done { .. }) {
                return true;
            }
        }
        false
    };
    match tokio::time::timeout(Duration::from_secs(60), wait).await {
        Ok(true) => full(StatusCode::OK, "text/plain", ""),
        _ => full(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "generation did not complete"),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Completions,
    Chat,
    Sglang,
}

const COMPLETION_FIELDS: &[&str] = &[
    "model",
    "prompt",
    "max_tokens",
    "temperature",
    "top_p",
    "n",
    "stream",
    "stream_options",
    "stop",
    "logprobs",
    "echo",
    "presence_penalty",
    "frequency_penalty",
    "best_of",
    "logit_bias",
    "user",
    "seed",
    "suffix",
    "ignore_eos",
    "min_tokens",
    "top_k",
    "min_p",
    "repetition_penalty",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "stop_token_ids",
    "include_stop_str_in_output",
    "priority",
    "extra_body",
];
const CHAT_FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "n",
    "stream",
    "stream_options",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "user",
    "seed",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "ignore_eos",
    "min_tokens",
    "top_k",
    "min_p",
    "repetition_penalty",
    "chat_template_kwargs",
    "reasoning_effort",
    "store",
    "metadata",
    "stop_token_ids",
    "skip_special_tokens",
    "include_stop_str_in_output",
    "priority",
    "service_tier",
    "modalities",
    "prediction",
    "audio",
];

/// What a generation request asks for.
struct Ask {
    prompt_tokens: u32,
    max_tokens: u32,
    min_tokens: u32,
    ignore_eos: bool,
    stream: bool,
    include_usage: bool,
}

fn words(s: &str) -> u32 {
    s.split_whitespace().count() as u32
}

fn bad(msg: impl Into<String>, param: Option<&'static str>) -> Result<Ask, (String, Option<&'static str>)> {
    Err((msg.into(), param))
}

fn uint(o: &Map<String, Value>, k: &'static str) -> Result<Option<u32>, (String, Option<&'static str>)> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| *n <= u32::MAX as u64)
            .map(|n| Some(n as u32))
            .ok_or_else(|| (format!("{k} must be a non-negative integer, got {v}"), Some(k))),
    }
}

fn parse_ask(api: Api, v: &Value) -> Result<Ask, (String, Option<&'static str>)> {
    let Some(o) = v.as_object() else {
        return bad("the request body must be a JSON object", None);
    };
    if api != Api::Sglang {
        let allowed = if api == Api::Chat { CHAT_FIELDS } else { COMPLETION_FIELDS };
        if let Some(k) = o.keys().find(|k| !allowed.contains(&k.as_str())) {
            return bad(format!("unknown field {k:?} in the request"), None);
        }
        if let Some(n) = uint(o, "n")? {
            if n != 1 {
                return bad("n must be 1: servetune sim generates one choice per request", Some("n"));
            }
        }
    }
    let stream = o.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = o.get("stream_options").and_then(|s| s.get("include_usage")).and_then(Value::as_bool).unwrap_or(false);
    // Each API: prompt tokens, max tokens, the object holding the sampling fields, and the names
    // of the max and min fields there.
    let sp_owned;
    let (prompt_tokens, max_tokens, params, max_key, min_key) = match api {
        Api::Completions => {
            let prompt_tokens = match o.get("prompt") {
                Some(Value::String(s)) => words(s),
                Some(Value::Array(a)) if a.iter().all(Value::is_u64) => a.len() as u32,
                Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => a[0].as_str().map_or(0, words),
                Some(Value::Array(a)) if a.len() == 1 && a[0].as_array().is_some_and(|x| x.iter().all(Value::is_u64)) => {
                    a[0].as_array().map_or(0, |x| x.len() as u32)
                }
                None => return bad("prompt is required", Some("prompt")),
                _ => return bad("prompt must be a string, a list of token ids, or a one-element list of either", Some("prompt")),
            };
            (prompt_tokens, uint(o, "max_tokens")?.unwrap_or(16), o, "max_tokens", "min_tokens")
        }
        Api::Chat => {
            let Some(msgs) = o.get("messages").and_then(Value::as_array) else {
                return bad("messages is required and must be a list", Some("messages"));
            };
            if msgs.is_empty() {
                return bad("messages must not be empty", Some("messages"));
            }
            let mut prompt_tokens = 0;
            for m in msgs {
                if m.get("role").and_then(Value::as_str).is_none() {
                    return bad("every message needs a role", Some("messages"));
                }
                prompt_tokens += match m.get("content") {
                    Some(Value::String(s)) => words(s),
                    Some(Value::Array(parts)) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).map(words).sum(),
                    _ => 0,
                };
            }
            let max_tokens = match (uint(o, "max_completion_tokens")?, uint(o, "max_tokens")?) {
                (Some(m), _) | (None, Some(m)) => m,
                (None, None) => 512,
            };
            (prompt_tokens, max_tokens, o, "max_tokens", "min_tokens")
        }
        Api::Sglang => {
            let prompt_tokens = match (o.get("text"), o.get("input_ids")) {
                (Some(Value::String(s)), _) => words(s),
                (_, Some(Value::Array(a))) => a.len() as u32,
                _ => return bad("text (a string) or input_ids (a list) is required", Some("text")),
            };
            sp_owned = o.get("sampling_params").and_then(Value::as_object).cloned().unwrap_or_default();
            (prompt_tokens, uint(&sp_owned, "max_new_tokens")?.unwrap_or(128), &sp_owned, "max_new_tokens", "min_new_tokens")
        }
    };
    if max_tokens == 0 {
        let name = if api == Api::Sglang { "sampling_params.max_new_tokens" } else { "max_tokens" };
        return bad(format!("{name} must be at least 1"), Some(max_key));
    }
    Ok(Ask {
        prompt_tokens,
        max_tokens,
        min_tokens: uint(params, min_key)?.unwrap_or(0),
        ignore_eos: params.get("ignore_eos").and_then(Value::as_bool).unwrap_or(false),
        stream,
        // sglang's native stream always carries its counts in meta_info.
        include_usage: include_usage || api == Api::Sglang,
    })
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

async fn generate(st: Arc<St>, req: Request<Incoming>, api: Api) -> Response<Body> {
    let body = match Limited::new(req.into_body(), 32 << 20).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return openai_error(StatusCode::BAD_REQUEST, &format!("cannot read the request body: {e}"), None),
    };
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return openai_error(StatusCode::BAD_REQUEST, &format!("the request body is not valid JSON: {e}"), None),
    };
    let ask = match parse_ask(api, &v) {
        Ok(a) => a,
        Err((m, p)) => return openai_error(StatusCode::BAD_REQUEST, &m, p),
    };
    let p = &st.cfg.profile;
    let need = ask.prompt_tokens as u64 + ask.max_tokens as u64;
    if need > p.kv_tokens {
        return openai_error(
            StatusCode::BAD_REQUEST,
            &format!(
                "this request needs {need} tokens (prompt {} + max_tokens {}), more than the KV cache's {} tokens",
                ask.prompt_tokens, ask.max_tokens, p.kv_tokens
            ),
            Some("max_tokens"),
        );
    }
    if !st.ready() {
        return openai_error(StatusCode::SERVICE_UNAVAILABLE, "the server is still starting (--slow-start)", None);
    }
    let id = st.next_id.fetch_add(1, Ordering::Relaxed);
    let f = &st.cfg.faults;
    if let Some(status) = f.error_status {
        if chance(st.cfg.seed, id, 1) < f.error_rate {
            let s = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            return openai_error(s, &format!("simulated HTTP {status} (--error-status)"), None);
        }
    }
    let fail = chance(st.cfg.seed, id, 2) < f.fail_rate;
    let (tx, rx) = mpsc::unbounded_channel();
    let er = EngineRequest {
        id,
        prompt_tokens: ask.prompt_tokens,
        max_tokens: ask.max_tokens,
        min_tokens: ask.min_tokens.min(ask.max_tokens),
        ignore_eos: ask.ignore_eos,
    };
    if !st.engine.submit(er, tx) {
        return openai_error(StatusCode::SERVICE_UNAVAILABLE, "the engine has stopped", None);
    }
    let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let model_json = serde_json::to_string(&p.model).unwrap_or_else(|_| "\"model\"".into());
    let fmt = Fmt {
        api,
        id,
        model: p.model.clone(),
        created,
        include_usage: ask.include_usage,
        text: String::new(),
        prompt_tokens: ask.prompt_tokens,
        model_json,
    };
    if ask.stream {
        let mut r = Response::new(Either::Right(SimBody { rx, fmt, fail, started: false, finished: false, tokens: 0 }));
        r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/event-stream; charset=utf-8"));
        r.headers_mut().insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static("no-cache"));
        return r;
    }
    non_stream(rx, fmt, fail).await
}

async fn non_stream(mut rx: UnboundedReceiver<Out>, mut fmt: Fmt, fail: bool) -> Response<Body> {
    while let Some(o) = rx.recv().await {
        match o {
            Out::Token { index } => {
                fmt.text.push_str(word(fmt.id, index));
                if fail {
                    return openai_error(StatusCode::INTERNAL_SERVER_ERROR, "simulated engine failure (--fail-rate)", None);
                }
            }
            Out::Done { finish, prompt_tokens, completion_tokens } => {
                let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens});
                let v = match fmt.api {
                    Api::Completions => {
                        json!({"id": format!("cmpl-{}", fmt.id), "object": "text_completion", "created": fmt.created, "model": fmt.model,
                        "choices": [{"index": 0, "text": fmt.text, "logprobs": null, "finish_reason": finish.as_str()}], "usage": usage})
                    }
                    Api::Chat => {
                        json!({"id": format!("chatcmpl-{}", fmt.id), "object": "chat.completion", "created": fmt.created, "model": fmt.model,
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": fmt.text}, "finish_reason": finish.as_str()}], "usage": usage})
                    }
                    Api::Sglang => {
                        json!({"text": fmt.text, "meta_info": {"id": fmt.id.to_string(), "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                        "finish_reason": {"type": finish.as_str()}}})
                    }
                };
                return json_resp(StatusCode::OK, &v);
            }
            Out::Refused => break,
        }
    }
    openai_error(StatusCode::SERVICE_UNAVAILABLE, "the engine stopped before the request finished", None)
}

/// Formats stream events for one request.
struct Fmt {
    api: Api,
    id: u64,
    model: String,
    created: u64,
    include_usage: bool,
    /// sglang: cumulative text.
    text: String,
    prompt_tokens: u32,
    /// The model name as a JSON string literal.
    model_json: String,
}

impl Fmt {
    fn push(buf: &mut Vec<u8>, v: &Value) {
        buf.extend_from_slice(b"data: ");
        let _ = serde_json::to_writer(&mut *buf, v);
        buf.extend_from_slice(b"\n\n");
    }

    fn role(&self, buf: &mut Vec<u8>) {
        if self.api == Api::Chat {
            Self::push(
                buf,
                &json!({"id": format!("chatcmpl-{}", self.id), "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]}),
            );
        }
    }

    fn token(&mut self, buf: &mut Vec<u8>, index: u32) {
        use std::io::Write as _;
        let w = word(self.id, index);
        // The hot path, written directly: words are plain ASCII and the model name is pre-escaped.
        match self.api {
            Api::Completions => {
                let _ = write!(
                    buf,
                    "data: {{\"id\":\"cmpl-{}\",\"object\":\"text_completion\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"text\":\"{w}\",\"logprobs\":null,\"finish_reason\":null}}]}}\n\n",
                    self.id, self.created, self.model_json
                );
            }
            Api::Chat => {
                let _ = write!(
                    buf,
                    "data: {{\"id\":\"chatcmpl-{}\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{w}\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n",
                    self.id, self.created, self.model_json
                );
            }
            Api::Sglang => {
                self.text.push_str(w);
                Self::push(
                    buf,
                    &json!({"text": self.text, "meta_info": {"id": self.id.to_string(), "prompt_tokens": self.prompt_tokens, "completion_tokens": index + 1, "finish_reason": null}}),
                );
            }
        }
    }

    fn done(&self, buf: &mut Vec<u8>, finish: &str, prompt_tokens: u32, completion_tokens: u32) {
        let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens});
        match self.api {
            Api::Completions => Self::push(
                buf,
                &json!({"id": format!("cmpl-{}", self.id), "object": "text_completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "text": "", "logprobs": null, "finish_reason": finish}]}),
            ),
            Api::Chat => Self::push(
                buf,
                &json!({"id": format!("chatcmpl-{}", self.id), "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "delta": {}, "logprobs": null, "finish_reason": finish}]}),
            ),
            Api::Sglang => Self::push(
                buf,
                &json!({"text": self.text, "meta_info": {"id": self.id.to_string(), "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "finish_reason": {"type": finish}}}),
            ),
        }
        if self.include_usage && self.api != Api::Sglang {
            let obj = if self.api == Api::Chat { "chat.completion.chunk" } else { "text_completion" };
            Self::push(
                buf,
                &json!({"id": format!("cmpl-{}", self.id), "object": obj, "created": self.created, "model": self.model, "choices": [], "usage": usage}),
            );
        }
        buf.extend_from_slice(b"data: [DONE]\n\n");
    }

    fn error(&self, buf: &mut Vec<u8>, msg: &str) {
        Self::push(buf, &json!({"error": {"message": msg, "type": "server_error", "code": 500}}));
    }
}

/// A streamed response: every token the engine emits for this request since the last poll goes out
/// in one frame (one write), as a real server flushes per step.
pub struct SimBody {
    rx: UnboundedReceiver<Out>,
    fmt: Fmt,
    fail: bool,
    started: bool,
    finished: bool,
    tokens: u32,
}

impl hyper::body::Body for SimBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        if this.finished {
            return Poll::Ready(None);
        }
        let mut buf = Vec::new();
        if !this.started {
            this.started = true;
            this.fmt.role(&mut buf);
        }
        loop {
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(Out::Token { index })) => {
                    this.fmt.token(&mut buf, index);
                    this.tokens += 1;
                    if this.fail {
                        this.fmt.error(&mut buf, "simulated engine failure mid-stream (--fail-rate)");
                        this.finished = true;
                        break;
                    }
                }
                Poll::Ready(Some(Out::Done { finish, prompt_tokens, completion_tokens })) => {
                    this.fmt.done(&mut buf, finish.as_str(), prompt_tokens, completion_tokens);
                    this.finished = true;
                    break;
                }
                Poll::Ready(Some(Out::Refused)) => {
                    this.fmt.error(&mut buf, "the engine refused this request");
                    this.finished = true;
                    break;
                }
                Poll::Ready(None) => {
                    // The engine went away mid-request (crash or shutdown): break the connection.
                    this.finished = true;
                    if buf.is_empty() {
                        return Poll::Ready(Some(Err(std::io::Error::other("the simulated engine stopped"))));
                    }
                    break;
                }
                Poll::Pending => break,
            }
        }
        if buf.is_empty() {
            return if this.finished { Poll::Ready(None) } else { Poll::Pending };
        }
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(buf)))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_and_zero_max_tokens_are_400_material() {
        let e = parse_ask(Api::Completions, &json!({"prompt": "a", "max_tokens": 4, "frobnicate": 1})).err().expect("unknown");
        assert!(e.0.contains("frobnicate"));
        let e = parse_ask(Api::Completions, &json!({"prompt": "a", "max_tokens": 0})).err().expect("zero");
        assert_eq!(e.1, Some("max_tokens"));
        let e = parse_ask(Api::Chat, &json!({"messages": [], "max_tokens": 4})).err().expect("empty");
        assert!(e.0.contains("must not be empty"));
        assert!(parse_ask(Api::Chat, &json!({"messages": [{"role": "user", "content": "a b c"}], "max_completion_tokens": 3})).is_ok());
    }

    #[test]
    fn hand_written_token_events_are_valid_json() {
        for api in [Api::Completions, Api::Chat] {
            let model = "m\"x";
            let mut f = Fmt {
                api,
                id: 7,
                model: model.into(),
                created: 1,
                include_usage: false,
                text: String::new(),
                prompt_tokens: 1,
                model_json: serde_json::to_string(model).unwrap_or_default(),
            };
            let mut buf = Vec::new();
            f.token(&mut buf, 3);
            let s = String::from_utf8(buf).unwrap_or_default();
            let data = s.strip_prefix("data: ").and_then(|x| x.strip_suffix("\n\n")).unwrap_or("");
            let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
            assert_eq!(v["model"], model, "{s}");
            let text = if api == Api::Chat { &v["choices"][0]["delta"]["content"] } else { &v["choices"][0]["text"] };
            assert_eq!(text.as_str(), Some(word(7, 3)));
        }
    }

    #[test]
    fn prompt_tokens_count_words_or_ids() {
        assert_eq!(parse_ask(Api::Completions, &json!({"prompt": "one two three"})).ok().map(|a| a.prompt_tokens), Some(3));
        assert_eq!(parse_ask(Api::Completions, &json!({"prompt": [1, 2, 3, 4]})).ok().map(|a| a.prompt_tokens), Some(4));
        assert_eq!(
            parse_ask(Api::Sglang, &json!({"text": "a b", "sampling_params": {"max_new_tokens": 5}})).ok().map(|a| a.max_tokens),
            Some(5)
        );
    }
}
