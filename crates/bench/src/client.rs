//! The HTTP side of one request: send it, read the SSE (or JSON) response as it arrives, and fill
//! the [`RequestRecord`]. Connections are pooled with keep-alive; nothing from the network is
//! unwrapped, and every failure ends in an [`ErrorKind`] with a detail.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;

use crate::api::{parse_event, Api};
use crate::record::{Chunk, ErrorKind, RequestRecord};
use crate::spec::InputError;
use crate::sse::SseParser;
use crate::tokenizer::Tokenizer;

/// Nanoseconds from `t0` to now.
#[inline]
pub fn since(t0: Instant) -> u64 {
    t0.elapsed().as_nanos() as u64
}

/// A pooled HTTP/1.1 client bound to one server.
#[derive(Clone)]
pub struct HttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
    base: String,
    auth: Option<HeaderValue>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The API key is never printed.
        f.debug_struct("HttpClient").field("base", &self.base).field("auth", &self.auth.is_some()).finish()
    }
}

/// Checks a base URL and returns it without a trailing slash.
pub fn normalize_base_url(url: &str) -> Result<String, InputError> {
    let u: Uri = url.parse().map_err(|e| InputError(format!("--url {url:?} is not a URL ({e}): write it like http://127.0.0.1:30000")))?;
    match u.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(InputError(format!(
                "--url {url:?}: https is not supported by this build; benchmark the server over plain http on its host or a tunnel"
            )))
        }
        _ => return Err(InputError(format!("--url {url:?} has no http:// scheme: write it like http://127.0.0.1:30000"))),
    }
    if u.host().is_none() {
        return Err(InputError(format!("--url {url:?} has no host: write it like http://127.0.0.1:30000")));
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// A response read in full (for small requests: `/v1/models`, `/metrics`, calibration).
#[derive(Debug)]
pub struct Simple {
    pub status: u16,
    pub body: Bytes,
}

impl HttpClient {
    pub fn new(base_url: &str, api_key: Option<&str>) -> Result<Self, InputError> {
        let base = normalize_base_url(base_url)?;
        let mut conn = HttpConnector::new();
        conn.set_nodelay(true);
        conn.set_connect_timeout(Some(std::time::Duration::from_secs(10)));
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(usize::MAX)
            .pool_idle_timeout(std::time::Duration::from_secs(60))
            .build(conn);
        let auth = match api_key {
            Some(k) => Some(
                HeaderValue::from_str(&format!("Bearer {k}"))
                    .map_err(|_| InputError("the API key has characters not allowed in an HTTP header".into()))?,
            ),
            None => None,
        };
        Ok(Self { client, base, auth })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn request(&self, method: Method, url: &str, body: Bytes) -> Result<Request<Full<Bytes>>, String> {
        let mut b = Request::builder().method(method).uri(url);
        if !body.is_empty() {
            b = b.header(header::CONTENT_TYPE, "application/json");
        }
        if let Some(a) = &self.auth {
            b = b.header(header::AUTHORIZATION, a.clone());
        }
        b.body(Full::new(body)).map_err(|e| format!("cannot build a request for {url}: {e}"))
    }

    /// GET or POST a URL (absolute, or a path under the base) and read at most 16 MiB of the answer.
    pub async fn simple(&self, method: Method, path_or_url: &str, body: Bytes) -> Result<Simple, String> {
        let url = if path_or_url.starts_with("http") { path_or_url.to_string() } else { format!("{}{}", self.base, path_or_url) };
        let req = self.request(method, &url, body)?;
        let resp = self.client.request(req).await.map_err(|e| describe_client_error(&url, &e))?;
        let status = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), 16 << 20)
            .collect()
            .await
            .map_err(|e| format!("{url}: the response body broke off: {e}"))?
            .to_bytes();
        Ok(Simple { status, body })
    }

    /// Sends one benchmark request and records everything about it into `rec`.
    /// `rec.actual_ns` is stamped here, just before the request goes out.
    pub async fn execute(&self, x: &Exec<'_>, body: Bytes, rec: &mut RequestRecord) {
        let url = format!("{}{}", self.base, x.api.path());
        let req = match self.request(Method::POST, &url, body) {
            Ok(r) => r,
            Err(e) => return rec.fail(ErrorKind::Connect, e, since(x.t0)),
        };
        rec.actual_ns = since(x.t0);
        let resp = match self.client.request(req).await {
            Ok(r) => r,
            Err(e) => return rec.fail(ErrorKind::Connect, describe_client_error(&url, &e), since(x.t0)),
        };
        let status = resp.status().as_u16();
        rec.status = Some(status);
        if status != 200 {
            let body = Limited::new(resp.into_body(), 4096).collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let text = String::from_utf8_lossy(&body);
            let text = text.trim();
            let detail = if text.is_empty() {
                format!("HTTP {status} from {url}")
            } else {
                format!("HTTP {status} from {url}: {}", truncate(text, 300))
            };
            return rec.fail(ErrorKind::HttpStatus, detail, since(x.t0));
        }
        let ctype = resp.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
        let mut body = resp.into_body();
        let sse = ctype.contains("text/event-stream");
        if !x.stream || !sse {
            if x.stream && !ctype.contains("json") {
                return rec.fail(
                    ErrorKind::MalformedEvent,
                    format!("the response is not an event stream (content-type {ctype:?}); is {url} the right API path?"),
                    since(x.t0),
                );
            }
            // Non-streaming (or a server that ignored `stream`): one JSON document.
            let body = match Limited::new(body, 64 << 20).collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => return rec.fail(ErrorKind::TruncatedStream, format!("the response body broke off: {e}"), since(x.t0)),
            };
            let now = since(x.t0);
            let text = String::from_utf8_lossy(&body);
            let info = match parse_event(x.api, &text) {
                Ok(i) => i,
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
            let tokens = rec.output_tokens_server.or(rec.output_tokens_tokenizer).unwrap_or(u64::from(info.has_token)).max(1);
            rec.chunks.push(Chunk { at_ns: now, tokens: tokens as u32, content: info.has_content });
            rec.output_tokens_chunks = tokens;
            x.tokens_counter.fetch_add(tokens, Ordering::Relaxed);
            rec.end_ns = now;
            return;
        }

        let mut parser = SseParser::default();
        let mut st = StreamState {
            api: x.api,
            done: false,
            err: None,
            prev_cum: 0,
            prev_text_len: 0,
            text: String::new(),
            keep_text: x.tokenizer.is_some(),
        };
        loop {
            match body.frame().await {
                None => break,
                Some(Err(e)) => {
                    return rec.fail(ErrorKind::TruncatedStream, format!("the connection broke mid-stream: {e}"), since(x.t0));
                }
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    let now = since(x.t0);
                    let before = rec.output_tokens_chunks;
                    if let Err(e) = parser.feed(&data, &mut |ev| st.on_event(&ev.data, now, rec)) {
                        return rec.fail(ErrorKind::MalformedEvent, e.to_string(), now);
                    }
                    x.tokens_counter.fetch_add(rec.output_tokens_chunks - before, Ordering::Relaxed);
                    if let Some((k, d)) = st.err.take() {
                        return rec.fail(k, d, now);
                    }
                }
            }
        }
        let now = since(x.t0);
        let before = rec.output_tokens_chunks;
        if let Err(e) = parser.finish(&mut |ev| st.on_event(&ev.data, now, rec)) {
            return rec.fail(ErrorKind::MalformedEvent, e.to_string(), now);
        }
        x.tokens_counter.fetch_add(rec.output_tokens_chunks - before, Ordering::Relaxed);
        if let Some((k, d)) = st.err.take() {
            return rec.fail(k, d, now);
        }
        if let Some(t) = x.tokenizer {
            rec.output_tokens_tokenizer = Some(t.count(&st.text) as u64);
        }
        rec.end_ns = now;
        if !st.done && rec.finish_reason.is_none() {
            rec.fail(ErrorKind::TruncatedStream, "the stream ended without [DONE] or a finish_reason", now);
        }
    }
}

/// What [`HttpClient::execute`] needs besides the body.
pub struct Exec<'a> {
    pub api: Api,
    pub stream: bool,
    pub t0: Instant,
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
    fn on_event(&mut self, data: &str, now: u64, rec: &mut RequestRecord) {
        if self.err.is_some() || self.done {
            return;
        }
        let d = data.trim();
        if d == "[DONE]" {
            self.done = true;
            return;
        }
        if d.is_empty() {
            return;
        }
        let info = match parse_event(self.api, d) {
            Ok(i) => i,
            Err(e) => {
                self.err = Some((ErrorKind::MalformedEvent, format!("{e} in event {:?}", truncate(d, 120))));
                return;
            }
        };
        if let Some(e) = info.error {
            self.err = Some((ErrorKind::ErrorPayload, format!("the server sent an error mid-stream: {}", truncate(&e, 300))));
            return;
        }
        if info.prompt_tokens.is_some() {
            rec.input_tokens_server = info.prompt_tokens;
        }
        if info.usage_completion_tokens.is_some() {
            rec.output_tokens_server = info.usage_completion_tokens;
        }
        if info.finish_reason.is_some() {
            rec.finish_reason = info.finish_reason;
        }
        if info.cumulative_text {
            // sglang: text and completion_tokens are cumulative.
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
                rec.chunks.push(Chunk { at_ns: now, tokens: tokens as u32, content: true });
                rec.output_tokens_chunks += tokens;
            }
        } else if info.has_token {
            if self.keep_text {
                self.text.push_str(&info.text);
            }
            rec.chunks.push(Chunk { at_ns: now, tokens: 1, content: info.has_content });
            rec.output_tokens_chunks += 1;
        }
    }
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn describe_client_error(url: &str, e: &hyper_util::client::legacy::Error) -> String {
    use std::error::Error as _;
    let mut cause = String::new();
    let mut src = e.source();
    while let Some(s) = src {
        cause = s.to_string();
        src = s.source();
    }
    if e.is_connect() {
        format!("cannot connect to {url}: {cause}")
    } else if cause.is_empty() {
        format!("{url}: {e}")
    } else {
        format!("{url}: {e}: {cause}")
    }
}
