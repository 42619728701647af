//! The HTTP side of one request: send it, read the SSE (or JSON) response as it arrives, and fill
//! the [`RequestRecord`]. Connections are pooled with keep-alive; nothing from the network is
//! unwrapped, every wait has a time limit from [`Limits`], and every failure ends in an
//! [`ErrorKind`] with a detail from which the API key has been redacted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Method, Uri};

use crate::api::{parse_event, parse_event_with, Api, EventInfo};
use crate::conn::{Head, Lease, Pool, SendError, Target};
use crate::record::{Chunk, ErrorKind, RequestRecord};
use crate::spec::{InputError, Limits};
use crate::sse::SseParser;
use crate::tokenizer::Tokenizer;

/// Nanoseconds from `t0` to now (saturating; a run never lasts 584 years).
#[inline]
pub fn since(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Removes a secret from text a server sent before it is stored or printed.
#[derive(Clone, Default)]
pub struct Redactor {
    /// The forms the key may take in server text: as sent, and JSON-escaped.
    forms: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor").field("secrets", &self.forms.len()).finish()
    }
}

/// What a redacted secret is replaced by.
pub const REDACTED: &str = "[REDACTED]";

impl Redactor {
    /// A redactor for these secrets (empty ones are ignored).
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Self {
        let mut forms = Vec::new();
        for s in secrets.into_iter().filter(|s| !s.is_empty()) {
            forms.push(s.to_string());
            if let Ok(j) = serde_json::to_string(s) {
                let inner = j.trim_matches('"').to_string();
                if inner != s {
                    forms.push(inner);
                }
            }
        }
        // Longest first, so a key that contains another is replaced whole.
        forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
        Self { forms }
    }

    /// `s` with every secret replaced by [`REDACTED`].
    pub fn clean(&self, s: &str) -> String {
        let mut out = s.to_string();
        for f in &self.forms {
            if out.contains(f.as_str()) {
                out = out.replace(f.as_str(), REDACTED);
            }
        }
        out
    }

    /// Redacts every server-supplied string of a record.
    pub fn scrub(&self, rec: &mut RequestRecord) {
        if self.forms.is_empty() {
            return;
        }
        for s in [&mut rec.error_detail, &mut rec.finish_reason].into_iter().flatten() {
            *s = self.clean(s);
        }
    }
}

/// `url` without `user:password@`: credentials in a URL are never printed or stored.
pub fn strip_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..auth_end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// Scheme, host and port: where a credential may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `http`.
    pub scheme: String,
    /// Host name or address, lower case.
    pub host: String,
    /// The port, 80 when the URL gives none.
    pub port: u16,
}

impl Origin {
    /// The origin of an absolute URL; `None` when it has no host.
    pub fn of(url: &str) -> Option<Self> {
        let u: Uri = url.parse().ok()?;
        let scheme = u.scheme_str()?.to_ascii_lowercase();
        let port = u.port_u16().unwrap_or(if scheme == "https" { 443 } else { 80 });
        Some(Self { host: u.host()?.to_ascii_lowercase(), scheme, port })
    }
}

/// Checks a base URL given to `flag` and returns it without userinfo or a trailing slash.
pub fn normalize_url(flag: &str, url: &str) -> Result<String, InputError> {
    let shown = strip_userinfo(url);
    let u: Uri =
        url.parse().map_err(|e| InputError(format!("{flag} {shown:?} is not a URL ({e}): write it like http://127.0.0.1:30000")))?;
    match u.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(InputError(format!(
                "{flag} {shown:?}: https is not supported by this build; benchmark the server over plain http on its host or a tunnel"
            )))
        }
        _ => return Err(InputError(format!("{flag} {shown:?} has no http:// scheme: write it like http://127.0.0.1:30000"))),
    }
    if u.host().is_none_or(str::is_empty) {
        return Err(InputError(format!("{flag} {shown:?} has no host: write it like http://127.0.0.1:30000")));
    }
    Ok(shown.trim_end_matches('/').to_string())
}

/// Checks a base URL and returns it without userinfo or a trailing slash.
pub fn normalize_base_url(url: &str) -> Result<String, InputError> {
    normalize_url("--url", url)
}

/// A response read in full (for small requests: `/v1/models`, `/metrics`, calibration).
#[derive(Debug)]
pub struct Simple {
    /// The HTTP status.
    pub status: u16,
    /// The body, at most 16 MiB.
    pub body: Bytes,
}

/// Why a small request got no response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimpleError {
    /// No TCP connection could be made.
    #[error("{0}")]
    Connect(String),
    /// The time limit passed.
    #[error("{0}")]
    Timeout(String),
    /// The connection broke, or the request could not be built.
    #[error("{0}")]
    Other(String),
}

/// A pooled HTTP/1.1 client bound to one server.
#[derive(Clone)]
pub struct HttpClient {
    /// Keep-alive connections, shared by the clones of this client.
    pool: Arc<Pool>,
    base: String,
    origin: Option<Origin>,
    auth: Option<HeaderValue>,
    /// A second credential for one other origin (the metrics endpoint's).
    other_auth: Option<(Origin, HeaderValue)>,
    limits: Limits,
    redactor: Redactor,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The API key is never printed.
        f.debug_struct("HttpClient").field("base", &self.base).field("auth", &self.auth.is_some()).finish()
    }
}

fn bearer(flag: &str, key: &str) -> Result<HeaderValue, InputError> {
    HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
        InputError(format!("the key named by {flag} has characters not allowed in an HTTP header: check the variable's value"))
    })
}

impl HttpClient {
    /// A client for `base_url` sending `api_key` (to that origin only), with these time limits.
    pub fn new(base_url: &str, api_key: Option<&str>, limits: Limits) -> Result<Self, InputError> {
        let base = normalize_base_url(base_url)?;
        let auth = api_key.map(|k| bearer("--api-key-env", k)).transpose()?;
        let origin = Origin::of(&base);
        Ok(Self { pool: Arc::default(), base, origin, auth, other_auth: None, limits, redactor: Redactor::new(api_key) })
    }

    /// This client with host names resolved by `resolve` instead of the system's resolver (a
    /// caller with a name service of its own; tests with a resolver that stalls). The lookup is
    /// inside the connect limit either way.
    pub fn with_resolver(mut self, resolve: crate::conn::Resolve) -> Self {
        self.pool = Arc::new(crate::conn::Pool::with_resolver(resolve));
        self
    }

    /// Also sends `key` to the origin of `url` (`--metrics-api-key-env`), and redacts it too.
    pub fn with_key_for(mut self, url: &str, key: &str) -> Result<Self, InputError> {
        let origin = Origin::of(url).ok_or_else(|| InputError(format!("--metrics-url {url:?} has no host")))?;
        self.other_auth = Some((origin, bearer("--metrics-api-key-env", key)?));
        let mut forms = self.redactor.forms.clone();
        forms.extend(Redactor::new([key]).forms);
        forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
        self.redactor = Redactor { forms };
        Ok(self)
    }

    /// The base URL (no userinfo, no trailing slash).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The time limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The redactor of the keys this client holds.
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// The credential for `url`: the API key for the base origin only; another origin gets a key
    /// only when one was given for it.
    fn auth_for(&self, url: &str) -> Option<HeaderValue> {
        let o = Origin::of(url)?;
        if self.origin.as_ref() == Some(&o) {
            return self.auth.clone();
        }
        self.other_auth.as_ref().filter(|(origin, _)| *origin == o).map(|(_, v)| v.clone())
    }

    fn target(&self, method: Method, url: &str, body: Bytes) -> Result<Target, String> {
        Target::new(method, url, self.auth_for(url), body).map_err(|e| format!("cannot build a request for {}: {e}", strip_userinfo(url)))
    }

    /// The connections this client opened so far (kept alive and reused between requests).
    pub fn connections_opened(&self) -> u64 {
        self.pool.opened()
    }

    /// GET or POST a URL (absolute, or a path under the base) and read at most 16 MiB of the
    /// answer, all within `limit` (and the connect limit). Server text in errors is redacted.
    pub async fn simple(&self, method: Method, path_or_url: &str, body: Bytes, limit: Duration) -> Result<Simple, SimpleError> {
        let url = if path_or_url.starts_with("http") { path_or_url.to_string() } else { format!("{}{}", self.base, path_or_url) };
        let shown = strip_userinfo(&url);
        let t = self.target(method, &url, body).map_err(SimpleError::Other)?;
        let work = async {
            let (head, mut lease) = self.pool.send(&t, &shown, self.limits.connect).await.map_err(|e| match e {
                SendError::Connect(d) => SimpleError::Connect(d),
                SendError::ConnectTimeout(d) => SimpleError::Timeout(d),
                SendError::Closed(d) => SimpleError::Other(d),
            })?;
            let status = head.status;
            let body =
                lease.collect(16 << 20).await.map_err(|e| SimpleError::Other(format!("{shown}: the response body broke off: {e}")))?;
            lease.release();
            Ok(Simple { status, body: Bytes::from(body) })
        };
        match tokio::time::timeout(limit, work).await {
            Ok(r) => r.map_err(|e| match e {
                SimpleError::Connect(m) => SimpleError::Connect(self.redactor.clean(&m)),
                SimpleError::Timeout(m) => SimpleError::Timeout(self.redactor.clean(&m)),
                SimpleError::Other(m) => SimpleError::Other(self.redactor.clean(&m)),
            }),
            Err(_) => Err(SimpleError::Timeout(format!("{shown}: no complete answer within {}", secs(limit)))),
        }
    }

    /// Sends one benchmark request and records everything about it into `rec`.
    /// `rec.actual_ns` is stamped here, just before the request goes out. The whole-request limit
    /// is the caller's; the first-byte and idle limits are applied here. A connection whose
    /// response was read to its end goes back to the pool; any other is closed.
    pub async fn execute(&self, x: &Exec<'_>, body: Bytes, rec: &mut RequestRecord) {
        let url = format!("{}{}", self.base, x.api.path());
        if let Some((head, mut lease)) = self.send(x, &url, body, rec).await {
            self.read_response(x, &url, &head, &mut lease, rec).await;
            lease.release();
        }
        if rec.ok() {
            check_tokens(rec);
        }
        self.redactor.scrub(rec);
    }

    /// Step 1: the request goes out and its response head comes back within the first-byte limit.
    async fn send(&self, x: &Exec<'_>, url: &str, body: Bytes, rec: &mut RequestRecord) -> Option<(Head, Lease<'_>)> {
        let t = match self.target(Method::POST, url, body) {
            Ok(t) => t,
            Err(e) => {
                rec.fail(ErrorKind::Connect, e, since(x.t0));
                return None;
            }
        };
        rec.actual_ns = since(x.t0);
        match tokio::time::timeout(self.limits.first_byte, self.pool.send(&t, url, self.limits.connect)).await {
            Ok(Ok(r)) => Some(r),
            Ok(Err(e)) => {
                let (kind, detail) = match e {
                    SendError::Connect(d) => (ErrorKind::Connect, d),
                    SendError::ConnectTimeout(d) => (ErrorKind::NoResponse, d),
                    SendError::Closed(d) => (ErrorKind::Disconnected, d),
                };
                rec.fail(kind, detail, since(x.t0));
                None
            }
            Err(_) => {
                let d = format!("no response head from {url} within --first-byte-timeout {}", secs(self.limits.first_byte));
                rec.fail(ErrorKind::NoResponse, d, since(x.t0));
                None
            }
        }
    }

    /// Step 2: a non-200 status, one JSON document, or an event stream.
    async fn read_response(&self, x: &Exec<'_>, url: &str, head: &Head, lease: &mut Lease<'_>, rec: &mut RequestRecord) {
        let status = head.status;
        rec.status = Some(status);
        if status != 200 {
            let body = tokio::time::timeout(self.limits.idle, lease.collect(4096)).await;
            let body = body.ok().and_then(Result::ok).unwrap_or_default();
            let text = String::from_utf8_lossy(&body);
            let detail = http_status_detail(status, url, text.trim());
            return rec.fail(ErrorKind::HttpStatus, detail, since(x.t0));
        }
        let ctype = head.content_type.as_str();
        if x.stream && ctype.contains("text/event-stream") {
            return self.read_stream(x, lease, rec).await;
        }
        if x.stream && !ctype.contains("json") {
            let d = format!("the response is not an event stream (content-type {ctype:?}); is {url} the right API path?");
            return rec.fail(ErrorKind::MalformedEvent, d, since(x.t0));
        }
        self.read_document(x, url, ctype, lease, rec).await;
    }

    /// Non-streaming (or a server that ignored `stream`): one JSON document. A body that is not
    /// one is named with its content type, its start and the URL, as a stream that is not an
    /// event stream is.
    async fn read_document(&self, x: &Exec<'_>, url: &str, ctype: &str, lease: &mut Lease<'_>, rec: &mut RequestRecord) {
        let collected = tokio::time::timeout(self.limits.idle, lease.collect(64 << 20)).await;
        let body = match collected {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => return rec.fail(ErrorKind::TruncatedStream, format!("the response body broke off: {e}"), since(x.t0)),
            Err(_) => return rec.fail(ErrorKind::Stalled, stalled(self.limits.idle), since(x.t0)),
        };
        let now = arrival(x.t0, lease);
        let text = String::from_utf8_lossy(&body);
        let info = match parse_event(x.api, &text) {
            Ok(i) => i,
            Err(e) if !ctype.contains("json") => {
                let start: String = text.trim_start().chars().take(60).collect();
                let d = format!(
                    "the response is not a JSON document (content-type {ctype:?}, it starts {start:?}); is {url} the right API path? ({e})"
                );
                return rec.fail(ErrorKind::MalformedEvent, d, now);
            }
            Err(e) => return rec.fail(ErrorKind::MalformedEvent, e, now),
        };
        if let Some(err) = info.error {
            return rec.fail(ErrorKind::ErrorPayload, err, now);
        }
        rec.input_tokens_server = info.prompt_tokens;
        rec.output_tokens_server = info.usage_completion_tokens;
        rec.finish_reason = info.finish_reason;
        if let Some(t) = x.tokenizer {
            rec.output_tokens_tokenizer = Some(t.count(&info.text) as u64);
        }
        let tokens = rec.output_tokens_server.or(rec.output_tokens_tokenizer).unwrap_or(u64::from(info.has_token));
        if tokens > 0 {
            rec.push_chunk(Chunk { at_ns: now, tokens: clamp_u32(tokens), content: info.has_content });
            x.tokens_counter.fetch_add(tokens, Ordering::Relaxed);
        }
        rec.end_ns = now;
    }

    /// An event stream: every event into the record, each chunk timed by the read that brought
    /// it. The events are parsed straight from the connection's read buffer, all that one read
    /// brought before the next read. The first byte must come within the first-byte limit, each
    /// later one within the idle limit of the one before.
    async fn read_stream(&self, x: &Exec<'_>, lease: &mut Lease<'_>, rec: &mut RequestRecord) {
        let mut parser = SseParser::default();
        let mut st = StreamState::new(x.api, x.tokenizer.is_some());
        let mut live = LiveCount { counter: x.tokens_counter, pending: 0 };
        rec.reserve_chunks();
        // A server that queues a request may send the head at once and the first byte of the body
        // only when it is scheduled: that first wait is bounded by the first-byte limit, later
        // silences by the idle limit. One timer serves the whole stream and is moved only when it
        // fires (or once, at the first byte): a timer per read would cost a timer-wheel insert
        // and removal per arrival.
        let mut first = true;
        let mut last = Instant::now();
        let mut limit = self.limits.first_byte;
        let deadline = tokio::time::sleep(limit);
        tokio::pin!(deadline);
        // Body bytes that came with the head carry the head's read time.
        let mut now = arrival(x.t0, lease);
        loop {
            let got = match drain(lease, &mut parser, &mut st, &mut live, now, rec) {
                Ok(got) => got,
                Err((kind, detail)) => return rec.fail(kind, detail, now),
            };
            if got && first {
                first = false;
                limit = self.limits.idle;
                last = lease.last_read().unwrap_or_else(Instant::now);
                deadline.as_mut().reset(last.checked_add(limit).unwrap_or(last).into());
            }
            if lease.body_done() {
                break;
            }
            let read = tokio::select! {
                biased;
                r = lease.fill() => r,
                () = &mut deadline => {
                    let due = last.checked_add(limit).unwrap_or(last);
                    if due > Instant::now() {
                        deadline.as_mut().reset(due.into());
                        continue;
                    }
                    return rec.fail(if first { ErrorKind::NoResponse } else { ErrorKind::Stalled }, silent(first, limit), since(x.t0));
                }
            };
            if let Err(e) = read {
                return rec.fail(ErrorKind::TruncatedStream, format!("the connection broke mid-stream: {e}"), since(x.t0));
            }
            now = arrival(x.t0, lease);
            last = lease.last_read().unwrap_or_else(Instant::now);
        }
        let before = rec.output_tokens_chunks;
        if let Err(e) = parser.finish_ref(&mut |ev| st.on_event(ev.data, now, rec)) {
            return rec.fail(ErrorKind::MalformedEvent, e.to_string(), now);
        }
        live.add(rec.output_tokens_chunks - before);
        if let Some((k, d)) = st.err.take() {
            return rec.fail(k, d, now);
        }
        if let Some(t) = x.tokenizer {
            rec.output_tokens_tokenizer = Some(t.count(&st.text) as u64);
        }
        rec.end_ns = now;
        if !st.done && rec.finish_reason.is_none() {
            return rec.fail(ErrorKind::TruncatedStream, "the stream ended without [DONE] or a finish_reason", now);
        }
        check_streamed_tokens(rec);
    }
}

/// Parses every body byte the connection holds into `rec`, each event timed `now` (the read that
/// brought it): `Ok(true)` when any byte came. `Err` ends the stream, with its kind and detail.
fn drain(
    lease: &mut Lease<'_>,
    parser: &mut SseParser,
    st: &mut StreamState,
    live: &mut LiveCount<'_>,
    now: u64,
    rec: &mut RequestRecord,
) -> Result<bool, (ErrorKind, String)> {
    let before = rec.output_tokens_chunks;
    let mut got = false;
    loop {
        let piece = match lease.take_data() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(e) => return Err((ErrorKind::TruncatedStream, format!("the response's framing broke mid-stream: {e}"))),
        };
        got = true;
        if let Err(e) = parser.feed_ref(piece, &mut |ev| st.on_event(ev.data, now, rec)) {
            return Err((ErrorKind::MalformedEvent, e.to_string()));
        }
        if st.err.is_some() || runaway(rec) {
            break;
        }
    }
    live.add(rec.output_tokens_chunks - before);
    if let Some(e) = st.err.take() {
        return Err(e);
    }
    if runaway(rec) {
        let d = format!(
            "the server sent at least {} output tokens for max_tokens={}; stopped reading",
            rec.output_tokens_chunks, rec.output_tokens_requested
        );
        return Err((ErrorKind::TooManyTokens, d));
    }
    Ok(got)
}

/// The time of the read that brought the data just taken from `lease`, in ns since `t0` (now,
/// when the connection has read nothing yet).
fn arrival(t0: Instant, lease: &Lease<'_>) -> u64 {
    match lease.last_read() {
        Some(at) => u64::try_from(at.saturating_duration_since(t0).as_nanos()).unwrap_or(u64::MAX),
        None => since(t0),
    }
}

/// The live token count for the progress display, added to in batches: one shared atomic add per
/// arrival would bounce its cache line between the runtime's threads.
struct LiveCount<'a> {
    counter: &'a AtomicU64,
    pending: u64,
}

impl LiveCount<'_> {
    /// Tokens added before the count is published.
    const BATCH: u64 = 32;

    fn add(&mut self, n: u64) {
        self.pending += n;
        if self.pending >= Self::BATCH {
            self.counter.fetch_add(std::mem::take(&mut self.pending), Ordering::Relaxed);
        }
    }
}

impl Drop for LiveCount<'_> {
    fn drop(&mut self) {
        if self.pending > 0 {
            self.counter.fetch_add(self.pending, Ordering::Relaxed);
        }
    }
}

/// A stream this far past `max_tokens` is not read further: the count is already proof enough,
/// and an endless stream must not run until `--timeout`.
fn runaway(rec: &RequestRecord) -> bool {
    let req = u64::from(rec.output_tokens_requested);
    rec.output_tokens_chunks > req.saturating_mul(2).saturating_add(10_000)
}

/// Token-carrying events a stream may send beyond `max_tokens` before it counts as a server error:
/// a server may split one token's text over two events (llama.cpp does when a token ends inside a
/// UTF-8 character: 17 events for max_tokens=16 were seen), so an eighth more, at least 4, is
/// tolerated.
pub fn extra_events_tolerated(max_tokens: u32) -> u64 {
    (u64::from(max_tokens) / 8).max(4)
}

/// A stream that ended well must not have sent far more token-carrying events than `max_tokens`.
/// Only streamed events are judged: a usage count a little over `max_tokens` (llama.cpp
/// re-tokenizes its text) is a count mismatch, noted in the report, not tokens that arrived.
fn check_streamed_tokens(rec: &mut RequestRecord) {
    let req = u64::from(rec.output_tokens_requested);
    let got = rec.output_tokens_chunks;
    if got > req + extra_events_tolerated(rec.output_tokens_requested) {
        let d = format!("the server sent {got} output tokens for max_tokens={req}");
        let end = rec.end_ns;
        rec.fail(ErrorKind::TooManyTokens, d, end);
    }
}

/// Step 3: a response that ended well must have carried tokens.
fn check_tokens(rec: &mut RequestRecord) {
    if rec.output_tokens() == 0 {
        let d = match &rec.finish_reason {
            Some(f) => format!("the response finished (finish_reason {f:?}) without one output token"),
            None => "the response carried no output token: is --api the API this server speaks?".to_string(),
        };
        let end = rec.end_ns;
        rec.fail(ErrorKind::NoTokens, d, end);
    }
}

fn http_status_detail(status: u16, url: &str, text: &str) -> String {
    let hint = match status {
        413 => " (the request is too large for the server: shorten --input-len)",
        400 | 422 => " (the server refused the request: check --input-len, --output-len and --model)",
        401 | 403 => " (check the key named by --api-key-env)",
        _ => "",
    };
    if text.is_empty() {
        format!("HTTP {status} from {url}{hint}")
    } else {
        format!("HTTP {status} from {url}{hint}: {}", truncate(text, 300))
    }
}

fn stalled(idle: Duration) -> String {
    format!("the response went silent for --idle-timeout {}", secs(idle))
}

/// The detail of a stream that went silent: before its first byte, or after.
fn silent(first: bool, limit: Duration) -> String {
    if first {
        format!("no byte of the event stream within --first-byte-timeout {}", secs(limit))
    } else {
        stalled(limit)
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

fn clamp_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// What [`HttpClient::execute`] needs besides the body.
pub struct Exec<'a> {
    /// The API spoken.
    pub api: Api,
    /// Ask for a streamed response.
    pub stream: bool,
    /// The run's start; record times are ns since it.
    pub t0: Instant,
    /// Counts output tokens of the received text, when loaded.
    pub tokenizer: Option<&'a Tokenizer>,
    /// Live count of streamed output tokens (for the progress display).
    pub tokens_counter: &'a AtomicU64,
}

struct StreamState {
    api: Api,
    done: bool,
    err: Option<(ErrorKind, String)>,
    prev_cum: u64,
    prev_text_len: usize,
    text: String,
    keep_text: bool,
}

impl StreamState {
    fn new(api: Api, keep_text: bool) -> Self {
        Self { api, done: false, err: None, prev_cum: 0, prev_text_len: 0, text: String::new(), keep_text }
    }

    fn on_event(&mut self, data: &str, now: u64, rec: &mut RequestRecord) {
        if self.err.is_some() || self.done {
            return;
        }
        // JSON's whitespace is ASCII: the ASCII trim is exact unless an edge is not ASCII, which
        // goes to the (slower) Unicode trim as before.
        let d = data.trim_ascii();
        let d = if d.bytes().next().is_some_and(|b| !b.is_ascii()) || d.bytes().next_back().is_some_and(|b| !b.is_ascii()) {
            d.trim()
        } else {
            d
        };
        if d == "[DONE]" {
            self.done = true;
            return;
        }
        if d.is_empty() {
            return;
        }
        // The token events that make up almost all of a stream are read by a scan that allocates
        // nothing; whatever it is unsure of goes to the full parser.
        let fast = if self.keep_text || self.api == Api::Sglang { None } else { crate::scan::openai_event(d) };
        let mut info = match fast.map_or_else(|| parse_event_with(self.api, d, self.keep_text), Ok) {
            Ok(i) => i,
            Err(e) => {
                self.err = Some((ErrorKind::MalformedEvent, format!("{e} in event {:?}", truncate(d, 120))));
                return;
            }
        };
        if let Some(e) = &info.error {
            self.err = Some((ErrorKind::ErrorPayload, format!("the server sent an error mid-stream: {}", truncate(e, 300))));
            return;
        }
        if info.prompt_tokens.is_some() {
            rec.input_tokens_server = info.prompt_tokens;
        }
        if info.usage_completion_tokens.is_some() {
            rec.output_tokens_server = info.usage_completion_tokens;
        }
        if let Some(f) = info.finish_reason.take() {
            rec.finish_reason = Some(f);
        }
        if info.cumulative_text {
            self.on_cumulative(&info, now, rec);
        } else if info.has_token {
            if self.keep_text {
                self.text.push_str(&info.text);
            }
            rec.push_chunk(Chunk { at_ns: now, tokens: 1, content: info.has_content });
        }
    }

    /// sglang: text and completion_tokens are cumulative; the new part is this chunk.
    fn on_cumulative(&mut self, info: &EventInfo, now: u64, rec: &mut RequestRecord) {
        let delta_tokens = info.completion_tokens_cumulative.map(|c| c.saturating_sub(self.prev_cum));
        if let Some(c) = info.completion_tokens_cumulative {
            self.prev_cum = self.prev_cum.max(c);
        }
        let new_text = info.text.get(self.prev_text_len..).unwrap_or("");
        let tokens = delta_tokens.unwrap_or(u64::from(!new_text.is_empty()));
        if self.keep_text {
            self.text.push_str(new_text);
        }
        self.prev_text_len = self.prev_text_len.max(info.text.len());
        if tokens > 0 {
            rec.push_chunk(Chunk { at_ns: now, tokens: clamp_u32(tokens), content: true });
        }
    }
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_stripped_from_urls() {
        assert_eq!(strip_userinfo("http://u:p@host:8/x"), "http://host:8/x");
        assert_eq!(strip_userinfo("http://host:8/a@b"), "http://host:8/a@b");
        assert_eq!(strip_userinfo("http://host"), "http://host");
    }

    #[test]
    fn the_key_goes_only_to_its_origin() {
        let c = HttpClient::new("http://127.0.0.1:9", Some("sk-1"), Limits::default()).expect("client");
        assert!(c.auth_for("http://127.0.0.1:9/metrics").is_some());
        assert!(c.auth_for("http://127.0.0.2:9/metrics").is_none());
        assert!(c.auth_for("http://127.0.0.1:10/metrics").is_none());
        let c = c.with_key_for("http://m:1/metrics", "mk").expect("metrics key");
        assert_eq!(c.auth_for("http://m:1/x").map(|v| v.as_bytes().to_vec()), Some(b"Bearer mk".to_vec()));
    }

    #[test]
    fn redaction_covers_raw_and_json_escaped_forms() {
        let r = Redactor::new(["a\"b/c"]);
        assert_eq!(r.clean("x a\"b/c y a\\\"b/c"), "x [REDACTED] y [REDACTED]");
    }
}
