//! The simulator's HTTP surface: OpenAI completions and chat (streaming or not, with usage),
//! sglang's `/generate`, `/health`, `/health_generate`, `/get_server_info`, `/v1/models` and
//! Prometheus `/metrics`; sglang's `/start_profile` and `/stop_profile` (traces by
//! [`crate::profile`]); OpenAI-style error bodies; the request-level faults. The shapes are in
//! [`crate::wire`], the streaming body in [`crate::stream`], the connections in [`crate::conn`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::sync::watch;

use crate::conn::{self, Notice, Notices};
use crate::cost::Profile;
use crate::driver::{self, EngineHandle, Out, Published, Stall};
use crate::engine::{Engine, EngineRequest, Finish};
use crate::profile::{ProfileError, Recorder, StartProfile};
use crate::stream::{exact_source, SseBody, StreamFaults};
use crate::wire::{self, chance, Ask, ChunkWriter, Endpoint};
use crate::{compat, metrics, Mode, SimConfig, SimError};

/// The largest request body read (bytes); a larger one is answered 400.
const MAX_BODY: usize = 32 << 20;
/// How long `/stop_profile` waits for the trace to be written before answering 500.
const PROFILE_WRITE_LIMIT: Duration = Duration::from_secs(120);

/// A running simulated server. Dropping it stops it.
#[derive(Debug)]
pub struct SimServer {
    /// The address it listens on.
    pub addr: std::net::SocketAddr,
    /// `http://ADDR`.
    pub url: String,
    st: Arc<St>,
    task: tokio::task::JoinHandle<()>,
    crashed: watch::Receiver<bool>,
    notices: mpsc::Receiver<Notice>,
}

impl SimServer {
    /// Resolves when `--crash-after` has fired (never otherwise).
    pub fn crashed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.crashed.clone();
        async move {
            let _ = rx.wait_for(|c| *c).await;
        }
    }

    /// The next thing the operator should know (fd shortage, connection cap, dropped clients).
    pub async fn next_notice(&mut self) -> Option<Notice> {
        self.notices.recv().await
    }

    /// The engine's figures after its last step.
    pub fn snapshot(&self) -> Published {
        self.st.engine.snapshot()
    }

    /// The deployment it simulates.
    pub fn profile(&self) -> &Profile {
        &self.st.cfg.profile
    }

    /// Generation requests received so far.
    pub fn requests(&self) -> u64 {
        self.st.next_id.load(Ordering::Relaxed) - 1
    }

    /// Serves one HTTP/1.1 connection over `io` with this server's handlers and limits, until the
    /// peer closes it. Any bytes are safe to give (the property tests feed it arbitrary ones).
    pub async fn serve_io<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(&self, io: S) {
        conn::serve(Arc::clone(&self.st), io, None).await;
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        self.task.abort();
        self.st.engine.shutdown();
    }
}

/// What every handler shares.
#[derive(Debug)]
pub(crate) struct St {
    pub(crate) cfg: SimConfig,
    pub(crate) engine: EngineHandle,
    recorder: Recorder,
    next_id: AtomicU64,
    /// Exact mode: requests whose schedule is still running (the `/metrics` running gauge).
    exact_running: Arc<AtomicU64>,
    started: Instant,
    /// Unix seconds at start (`created` of `/v1/models`, sglang's `startup_time`).
    started_unix: u64,
    pub(crate) notices: Notices,
}

impl St {
    fn starting(&self) -> bool {
        self.cfg.faults.slow_start.is_some_and(|d| self.started.elapsed() < d)
    }
}

/// Starts the engine thread and the HTTP listener on `listen` (port 0 picks a free port).
pub async fn start(cfg: SimConfig, listen: std::net::SocketAddr) -> Result<SimServer, SimError> {
    cfg.validate()?;
    let cost = cfg.cost.clone().unwrap_or_else(|| Arc::new(cfg.profile.cost));
    let stall = Stall { every: cfg.faults.stall_every, dur: cfg.faults.stall_for };
    let recorder = Recorder::new(cfg.profile_dir.clone());
    let engine = driver::spawn(Engine::new(cfg.profile.clone(), cfg.seed), cost, stall, recorder.clone())
        .map_err(|e| SimError::Runtime(format!("cannot start the engine thread: {e}")))?;
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| SimError::Input(format!("--listen {listen}: cannot listen there ({e}); pick a free port or 127.0.0.1:0")))?;
    let addr = listener.local_addr().map_err(|e| SimError::Runtime(e.to_string()))?;
    let (crash_tx, crashed) = watch::channel(false);
    let (notice_tx, notices) = mpsc::channel(256);
    let crash_after = cfg.faults.crash_after;
    let st = Arc::new(St {
        cfg,
        engine,
        recorder,
        next_id: AtomicU64::new(1),
        exact_running: Arc::default(),
        started: Instant::now(),
        started_unix: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        notices: Notices(notice_tx),
    });
    let loop_st = Arc::clone(&st);
    let task = tokio::spawn(async move {
        let crash = async {
            match crash_after {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = conn::accept_loop(listener, Arc::clone(&loop_st)) => {}
            // The process "dies": the accept loop (and every connection with it) is dropped.
            _ = crash => {
                loop_st.engine.shutdown();
                let _ = crash_tx.send(true);
            }
        }
    });
    Ok(SimServer { addr, url: format!("http://{addr}"), st, task, crashed, notices })
}

/// A response body: a whole one, or a stream.
pub(crate) type Body = Either<Full<Bytes>, SseBody>;

fn full(status: StatusCode, ctype: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Either::Left(Full::new(body.into())));
    *r.status_mut() = status;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(ctype));
    r
}

fn json_resp(status: StatusCode, v: &Value) -> Response<Body> {
    full(status, "application/json", serde_json::to_vec(v).unwrap_or_default())
}

fn openai_error(status: StatusCode, message: &str, param: Option<&str>) -> Response<Body> {
    full(status, "application/json", wire::error_body(status.as_u16(), message, param))
}

/// Routes one request.
pub(crate) async fn handle(st: Arc<St>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    if path == "/start_profile" || path == "/stop_profile" {
        return profile(st, req, path == "/start_profile").await;
    }
    if path == "/flush_cache" {
        return flush_cache(&st, &req);
    }
    let Some(ep) = Endpoint::from_path(&path) else {
        return openai_error(StatusCode::NOT_FOUND, &format!("no route {path}"), None);
    };
    if req.method().as_str() != ep.method() {
        let mut r = openai_error(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("method {} is not allowed on {path}: use {}", req.method(), ep.method()),
            None,
        );
        r.headers_mut().insert(http::header::ALLOW, http::HeaderValue::from_static(ep.method()));
        return r;
    }
    let cfg = &st.cfg;
    match ep {
        Endpoint::Health => health(&st),
        Endpoint::HealthGenerate => health_generate(&st).await,
        Endpoint::ServerInfo => json_resp(StatusCode::OK, &compat::server_info(cfg, &st.engine.snapshot(), st.started_unix)),
        Endpoint::ModelInfo => json_resp(StatusCode::OK, &compat::model_info(&cfg.profile)),
        Endpoint::Models => json_resp(StatusCode::OK, &compat::models(&cfg.profile, st.started_unix)),
        Endpoint::Version => json_resp(StatusCode::OK, &compat::version()),
        Endpoint::Metrics => {
            let mut snap = st.engine.snapshot();
            if let Mode::Exact(_) = cfg.mode {
                snap.stats.running = usize::try_from(st.exact_running.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
            }
            full(StatusCode::OK, "text/plain; version=0.0.4", metrics::render(&snap, cfg.metrics_style, &cfg.profile.model))
        }
        Endpoint::Generate(api) => generate(st, req, api).await,
    }
}

/// `/start_profile` (optional JSON `{"output_dir", "num_steps"}`; `output_dir` names a
/// subdirectory of the profile directory, never a path: [`crate::profile::trace_dir`]) and
/// `/stop_profile`, which writes the trace and answers where (sglang answers GET and POST on both).
async fn profile(st: Arc<St>, req: Request<Incoming>, start: bool) -> Response<Body> {
    if !matches!(req.method().as_str(), "POST" | "GET") {
        return openai_error(StatusCode::METHOD_NOT_ALLOWED, &format!("method {} is not allowed here: use POST", req.method()), None);
    }
    let limit = st.cfg.limits.body_timeout;
    let body = match tokio::time::timeout(limit, Limited::new(req.into_body(), 1 << 16).collect()).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) => return openai_error(StatusCode::BAD_REQUEST, &format!("cannot read the request body: {e}"), None),
        Err(_) => return openai_error(StatusCode::REQUEST_TIMEOUT, "the request body did not arrive in time", None),
    };
    let refused = |e: ProfileError| openai_error(StatusCode::BAD_REQUEST, &e.to_string(), None);
    if start {
        let ask: StartProfile = if body.iter().all(u8::is_ascii_whitespace) {
            StartProfile::default()
        } else {
            match serde_json::from_slice(&body) {
                Ok(a) => a,
                Err(e) => {
                    let msg = format!("the body is not {{\"output_dir\": NAME, \"num_steps\": N}}: {e}");
                    return openai_error(StatusCode::BAD_REQUEST, &msg, None);
                }
            }
        };
        return match st.recorder.start(ask) {
            Ok(()) => full(StatusCode::OK, "text/plain", "Start profiling.\n"),
            Err(e) => refused(e),
        };
    }
    let recorder = st.recorder.clone();
    let tp = st.cfg.profile.tp_size;
    let write = tokio::task::spawn_blocking(move || recorder.stop(tp));
    let Ok(written) = tokio::time::timeout(PROFILE_WRITE_LIMIT, write).await else {
        let msg = format!("writing the trace took longer than {} s: check the profile directory's disk", PROFILE_WRITE_LIMIT.as_secs());
        return openai_error(StatusCode::INTERNAL_SERVER_ERROR, &msg, None);
    };
    match written {
        Ok(Ok(w)) => json_resp(StatusCode::OK, &serde_json::to_value(&w).unwrap_or_default()),
        Ok(Err(e @ ProfileError::Write { .. })) => openai_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string(), None),
        Ok(Err(e)) => refused(e),
        Err(e) => openai_error(StatusCode::INTERNAL_SERVER_ERROR, &format!("writing the trace failed: {e}"), None),
    }
}

/// sglang's `/flush_cache` (GET or POST, an optional `?timeout=` query): the simulator keeps no
/// prefix cache, so there is nothing to drop; it answers as sglang does when the flush succeeded.
fn flush_cache(st: &St, req: &Request<Incoming>) -> Response<Body> {
    if !matches!(req.method().as_str(), "POST" | "GET") {
        let mut r = openai_error(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("method {} is not allowed on /flush_cache: use POST", req.method()),
            None,
        );
        r.headers_mut().insert(http::header::ALLOW, http::HeaderValue::from_static("GET, POST"));
        return r;
    }
    if !st.engine.is_alive() {
        return full(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "the engine thread has stopped");
    }
    full(StatusCode::OK, "text/plain", compat::FLUSH_CACHE_OK)
}

fn health(st: &St) -> Response<Body> {
    if !st.engine.is_alive() {
        full(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "the engine thread has stopped")
    } else if st.starting() {
        full(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "starting")
    } else {
        full(StatusCode::OK, "text/plain", "")
    }
}

async fn health_generate(st: &St) -> Response<Body> {
    if st.starting() {
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

/// Reads and parses a generation request, or the error response that refuses it.
async fn read_ask(st: &St, req: Request<Incoming>, api: wire::Api) -> Result<Ask, Response<Body>> {
    let limit = st.cfg.limits.body_timeout;
    // A body declared over the cap is refused at once, not after waiting for bytes never read.
    let declared = req.headers().get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(n) = declared.filter(|n| *n > MAX_BODY as u64) {
        let msg = format!("the request body is {n} bytes, over the {} MiB this server reads", MAX_BODY >> 20);
        return Err(openai_error(StatusCode::PAYLOAD_TOO_LARGE, &msg, None));
    }
    let body = match tokio::time::timeout(limit, Limited::new(req.into_body(), MAX_BODY).collect()).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) => return Err(openai_error(StatusCode::BAD_REQUEST, &format!("cannot read the request body: {e}"), None)),
        Err(_) => {
            let msg = format!("the request body did not arrive within {:.1} s (--body-timeout)", limit.as_secs_f64());
            return Err(openai_error(StatusCode::REQUEST_TIMEOUT, &msg, None));
        }
    };
    let ask = wire::parse_request(api, &body).map_err(|e| openai_error(StatusCode::BAD_REQUEST, &e.message, e.param))?.ask();
    let kv = st.cfg.profile.kv_tokens;
    let need = u64::from(ask.prompt_tokens) + u64::from(ask.max_tokens);
    if need > kv {
        let msg = format!(
            "this request needs {need} tokens (prompt {} + max_tokens {}), more than the KV cache's {kv} tokens",
            ask.prompt_tokens, ask.max_tokens
        );
        return Err(openai_error(StatusCode::BAD_REQUEST, &msg, Some("max_tokens")));
    }
    if st.starting() {
        return Err(openai_error(StatusCode::SERVICE_UNAVAILABLE, "the server is still starting (--slow-start)", None));
    }
    Ok(ask)
}

/// The faults this request draws, by its arrival number.
fn stream_faults(cfg: &SimConfig, id: u64) -> StreamFaults {
    let f = &cfg.faults;
    let hit = |salt: u64, rate: f64| chance(cfg.seed, id, salt) < rate;
    StreamFaults {
        error_event: hit(2, f.fail_rate),
        malformed: hit(3, f.malformed_rate),
        truncate: hit(4, f.truncate_rate),
        stall: hit(5, f.stall_rate).then_some(f.stall_for),
        early_stop_at: f.early_stop_at,
    }
}

/// Starts producing the request's tokens into a channel: the engine, or the exact schedule.
/// `None` when the engine has stopped.
fn source(st: &St, ask: Ask, id: u64) -> Option<UnboundedReceiver<Out>> {
    let (tx, rx) = mpsc::unbounded_channel();
    match st.cfg.mode {
        Mode::Engine => {
            let er = EngineRequest {
                id,
                prompt_tokens: ask.prompt_tokens,
                max_tokens: ask.max_tokens,
                min_tokens: ask.min_tokens,
                ignore_eos: ask.ignore_eos,
            };
            if !st.engine.submit(er, tx) {
                return None;
            }
        }
        Mode::Exact(t) => {
            let running = Arc::clone(&st.exact_running);
            let arrival = tokio::time::Instant::now();
            tokio::spawn(async move {
                running.fetch_add(1, Ordering::Relaxed);
                exact_source(t, ask, arrival, tx).await;
                running.fetch_sub(1, Ordering::Relaxed);
            });
        }
    }
    Some(rx)
}

async fn generate(st: Arc<St>, req: Request<Incoming>, api: wire::Api) -> Response<Body> {
    let ask = match read_ask(&st, req, api).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let id = st.next_id.fetch_add(1, Ordering::Relaxed);
    let cfg = &st.cfg;
    if let Some(status) = cfg.faults.error_status {
        if chance(cfg.seed, id, 1) < cfg.faults.error_rate {
            let s = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            return openai_error(s, &format!("simulated HTTP {status} (--error-status)"), None);
        }
    }
    if chance(cfg.seed, id, 6) < cfg.faults.not_sse_rate {
        return full(StatusCode::OK, "text/html", "<html><body>not an API (--not-sse-rate)</body></html>");
    }
    let faults = stream_faults(cfg, id);
    let Some(rx) = source(&st, ask, id) else {
        return openai_error(StatusCode::SERVICE_UNAVAILABLE, "the engine has stopped", None);
    };
    let (reasoning, role_chunk) = match cfg.mode {
        Mode::Exact(t) => (t.reasoning_tokens, t.role_chunk),
        Mode::Engine => (0, true),
    };
    let writer = ChunkWriter::new(&ask, id, &cfg.profile.model, reasoning);
    if ask.stream {
        let mut r = Response::new(Either::Right(SseBody::new(rx, writer, faults, role_chunk)));
        r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/event-stream; charset=utf-8"));
        r.headers_mut().insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static("no-cache"));
        return r;
    }
    whole(rx, writer, faults).await
}

/// A non-streamed answer: every token collected, then one JSON body.
async fn whole(mut rx: UnboundedReceiver<Out>, mut writer: ChunkWriter, faults: StreamFaults) -> Response<Body> {
    let mut tokens = 0u32;
    while let Some(o) = rx.recv().await {
        match o {
            Out::Tokens { first, count } => {
                let count = faults.early_stop_at.map_or(count, |s| count.min(s.saturating_sub(tokens)));
                writer.push_text(first, count);
                tokens = tokens.saturating_add(count);
                if faults.error_event {
                    return openai_error(StatusCode::INTERNAL_SERVER_ERROR, "injected error: simulated engine failure (--fail-rate)", None);
                }
                if faults.early_stop_at.is_some_and(|s| tokens >= s) {
                    return full(StatusCode::OK, "application/json", writer.whole(Finish::Stop, tokens));
                }
            }
            Out::Done { finish, completion_tokens, .. } => {
                return full(StatusCode::OK, "application/json", writer.whole(finish, completion_tokens))
            }
            Out::Refused => break,
        }
    }
    openai_error(StatusCode::SERVICE_UNAVAILABLE, "the engine stopped before the request finished", None)
}
