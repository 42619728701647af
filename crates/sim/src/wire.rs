//! The wire format, written once: the three generation APIs (OpenAI completions, OpenAI chat,
//! sglang `/generate`), their typed request bodies, the OpenAI-shaped error body, and every chunk
//! and response JSON shape, framed as server-sent events.
//!
//! Tokens: one word of prompt text counts as one prompt token (a list of token ids counts its
//! length); output tokens are words from a fixed list, chosen by request and position.

use std::io::Write as _;

use serde_json::{json, Map, Value};

use crate::engine::Finish;

/// One of the three generation APIs the simulator serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// OpenAI `POST /v1/completions`.
    Completions,
    /// OpenAI `POST /v1/chat/completions`.
    Chat,
    /// sglang's native `POST /generate`.
    Sglang,
}

impl Api {
    /// Every API, in route order.
    pub const ALL: [Api; 3] = [Api::Completions, Api::Chat, Api::Sglang];

    /// The request path this API is served on.
    pub fn path(self) -> &'static str {
        match self {
            Api::Completions => "/v1/completions",
            Api::Chat => "/v1/chat/completions",
            Api::Sglang => "/generate",
        }
    }

    /// The API served on `path`, if any.
    pub fn from_path(path: &str) -> Option<Api> {
        Api::ALL.into_iter().find(|a| a.path() == path)
    }

    /// Output tokens when the request names none (each server's own default).
    fn default_max_tokens(self) -> u32 {
        match self {
            Api::Completions => 16,
            Api::Chat => 512,
            Api::Sglang => 128,
        }
    }
}

/// An endpoint of the simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `GET /health`: 200 once ready, 503 while starting or after the engine stopped.
    Health,
    /// `GET /health_generate`: generates one token.
    HealthGenerate,
    /// `GET /get_server_info` (or `/server_info`): the engine's limits and per-replica state, sglang-style.
    ServerInfo,
    /// `GET /get_model_info` (or `/model_info`).
    ModelInfo,
    /// `GET /v1/models`.
    Models,
    /// `GET /version` (vLLM's).
    Version,
    /// `GET /metrics`: Prometheus text.
    Metrics,
    /// `POST` to one of the generation APIs.
    Generate(Api),
}

impl Endpoint {
    /// The endpoint served on `path`, if any.
    pub fn from_path(path: &str) -> Option<Endpoint> {
        Some(match path {
            "/health" => Endpoint::Health,
            "/health_generate" => Endpoint::HealthGenerate,
            "/get_server_info" | "/server_info" => Endpoint::ServerInfo,
            "/get_model_info" | "/model_info" => Endpoint::ModelInfo,
            "/v1/models" => Endpoint::Models,
            "/version" => Endpoint::Version,
            "/metrics" => Endpoint::Metrics,
            other => return Api::from_path(other).map(Endpoint::Generate),
        })
    }

    /// The one method the endpoint answers (the `Allow` header of a 405).
    pub fn method(self) -> &'static str {
        match self {
            Endpoint::Generate(_) => "POST",
            _ => "GET",
        }
    }
}

/// A request the simulator refuses with HTTP 400: what is wrong, and the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BadRequest {
    /// The reason, in words a client's log can show.
    pub message: String,
    /// The request field at fault, when one is.
    pub param: Option<&'static str>,
}

fn bad<T>(message: impl Into<String>, param: Option<&'static str>) -> Result<T, BadRequest> {
    Err(BadRequest { message: message.into(), param })
}

/// The sampling fields every API shares (under `sampling_params` for sglang).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sampling {
    /// `max_tokens` / `max_completion_tokens` / `max_new_tokens`, when given.
    pub max_tokens: Option<u32>,
    /// `min_tokens` / `min_new_tokens`, when given.
    pub min_tokens: Option<u32>,
    /// Generate past EOS up to the maximum.
    pub ignore_eos: bool,
}

/// `POST /v1/completions`, the fields the simulator acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionRequest {
    /// Prompt length in tokens (words, or token ids).
    pub prompt_tokens: u32,
    /// Length limits and EOS handling.
    pub sampling: Sampling,
    /// Answer as an event stream.
    pub stream: bool,
    /// `stream_options.include_usage`: end the stream with a usage chunk.
    pub include_usage: bool,
}

/// `POST /v1/chat/completions`, the fields the simulator acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRequest {
    /// Tokens (words) over every message's text.
    pub prompt_tokens: u32,
    /// Length limits and EOS handling (`max_completion_tokens` wins over `max_tokens`).
    pub sampling: Sampling,
    /// Answer as an event stream.
    pub stream: bool,
    /// `stream_options.include_usage`: end the stream with a usage chunk.
    pub include_usage: bool,
}

/// sglang `POST /generate`, the fields the simulator acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerateRequest {
    /// Tokens of `text` (words) or the length of `input_ids`.
    pub prompt_tokens: u32,
    /// `sampling_params`.
    pub sampling: Sampling,
    /// Answer as an event stream (every chunk carries its counts in `meta_info`).
    pub stream: bool,
}

/// A parsed generation request of one of the three APIs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GenRequest {
    /// OpenAI completions.
    Completion(CompletionRequest),
    /// OpenAI chat.
    Chat(ChatRequest),
    /// sglang native.
    Generate(GenerateRequest),
}

/// What the server acts on, whichever API asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    /// Which API, for the response shapes.
    pub api: Api,
    /// Prompt length in tokens.
    pub prompt_tokens: u32,
    /// Output limit in tokens (the API's default when the request names none), at least 1.
    pub max_tokens: u32,
    /// Output floor in tokens, at most `max_tokens`.
    pub min_tokens: u32,
    /// Generate past EOS up to `max_tokens`.
    pub ignore_eos: bool,
    /// Answer as an event stream.
    pub stream: bool,
    /// End the stream with token counts (always for sglang, whose chunks carry them).
    pub include_usage: bool,
}

impl GenRequest {
    /// The API-independent view the server acts on.
    pub fn ask(&self) -> Ask {
        let (api, prompt_tokens, s, stream, include_usage) = match self {
            GenRequest::Completion(r) => (Api::Completions, r.prompt_tokens, r.sampling, r.stream, r.include_usage),
            GenRequest::Chat(r) => (Api::Chat, r.prompt_tokens, r.sampling, r.stream, r.include_usage),
            GenRequest::Generate(r) => (Api::Sglang, r.prompt_tokens, r.sampling, r.stream, true),
        };
        let max_tokens = s.max_tokens.unwrap_or(api.default_max_tokens());
        Ask {
            api,
            prompt_tokens,
            max_tokens,
            min_tokens: s.min_tokens.unwrap_or(0).min(max_tokens),
            ignore_eos: s.ignore_eos,
            stream,
            include_usage,
        }
    }
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
    "separate_reasoning",
    "stream_reasoning",
    "priority",
    "extra_body",
];

/// Parses a request body of `api`. Any bytes are safe to give: the answer is a request or the
/// reason it is refused, never a panic (the fuzz and property tests call this directly).
pub fn parse_request(api: Api, body: &[u8]) -> Result<GenRequest, BadRequest> {
    let v: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return bad(format!("the request body is not valid JSON: {e}"), None),
    };
    let Some(o) = v.as_object() else {
        return bad("the request body must be a JSON object", None);
    };
    match api {
        Api::Completions => parse_completion(o).map(GenRequest::Completion),
        Api::Chat => parse_chat(o).map(GenRequest::Chat),
        Api::Sglang => parse_generate(o).map(GenRequest::Generate),
    }
}

fn words(s: &str) -> u32 {
    u32::try_from(s.split_whitespace().count()).unwrap_or(u32::MAX)
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn uint(o: &Map<String, Value>, k: &'static str) -> Result<Option<u32>, BadRequest> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) => u32::try_from(n)
                .map(Some)
                .map_err(|_| BadRequest { message: format!("{k} {n} is out of range: give 0..={}", u32::MAX), param: Some(k) }),
            None => bad(format!("{k} must be a non-negative integer, got {v}"), Some(k)),
        },
    }
}

/// A boolean field as the engines' request models (pydantic, lax mode) read one: `true`/`false`,
/// 0 or 1, or one of the strings pydantic takes (`"true"`, `"yes"`, `"on"`, `"1"`, ... in any
/// case). Anything else is refused, as the engines answer it with 400.
fn flag(o: &Map<String, Value>, k: &'static str) -> Result<Option<bool>, BadRequest> {
    let v = match o.get(k) {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let b = match v {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => match n.as_u64() {
            Some(0) => Some(false),
            Some(1) => Some(true),
            _ => None,
        },
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "0" | "off" | "f" | "false" | "n" | "no" => Some(false),
            "1" | "on" | "t" | "true" | "y" | "yes" => Some(true),
            _ => None,
        },
        _ => None,
    };
    match b {
        Some(b) => Ok(Some(b)),
        None => bad(format!("{k} must be a boolean, got {v}"), Some(k)),
    }
}

/// A number field (lax: a numeric string is a number), finite, at least `min`.
fn number(o: &Map<String, Value>, k: &'static str, min: f64) -> Result<Option<f64>, BadRequest> {
    let v = match o.get(k) {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let x = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match x {
        Some(x) if x.is_finite() && x >= min => Ok(Some(x)),
        Some(x) if x.is_finite() => bad(format!("{k} must be at least {min}, got {x}"), Some(k)),
        _ => bad(format!("{k} must be a number, got {v}"), Some(k)),
    }
}

/// The OpenAI APIs' sampling fields the engines type-check: booleans, numbers, `stop` (a string
/// or a list of strings), `seed` an integer.
fn check_openai_types(o: &Map<String, Value>) -> Result<(), BadRequest> {
    for k in [
        "echo",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "include_stop_str_in_output",
        "separate_reasoning",
        "stream_reasoning",
        "parallel_tool_calls",
        "store",
    ] {
        flag(o, k)?;
    }
    for (k, min) in [
        ("temperature", 0.0),
        ("top_p", 0.0),
        ("min_p", 0.0),
        ("repetition_penalty", 0.0),
        ("presence_penalty", f64::MIN),
        ("frequency_penalty", f64::MIN),
    ] {
        number(o, k, min)?;
    }
    match o.get("stop") {
        None | Some(Value::Null | Value::String(_)) => {}
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {}
        Some(v) => return bad(format!("stop must be a string or a list of strings, got {v}"), Some("stop")),
    }
    // Lax: 1.0 is the integer 1, as pydantic takes it.
    match o.get("seed") {
        None | Some(Value::Null) => Ok(()),
        Some(v) if v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|x| x.is_finite() && x.fract() == 0.0) => Ok(()),
        Some(v) => bad(format!("seed must be an integer, got {v}"), Some("seed")),
    }
}

/// Refuses unknown fields, fields of the wrong type ([`check_openai_types`]) and `n` other than
/// 1 (the OpenAI APIs).
fn check_openai_fields(o: &Map<String, Value>, allowed: &[&str]) -> Result<(), BadRequest> {
    if let Some(k) = o.keys().find(|k| !allowed.contains(&k.as_str())) {
        return bad(format!("unknown field {k:?} in the request"), None);
    }
    check_openai_types(o)?;
    match uint(o, "n")? {
        Some(n) if n != 1 => bad("n must be 1: servetune sim generates one choice per request", Some("n")),
        _ => Ok(()),
    }
}

fn stream_flags(o: &Map<String, Value>) -> Result<(bool, bool), BadRequest> {
    let stream = flag(o, "stream")?.unwrap_or(false);
    let usage = match o.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(so)) => flag(so, "include_usage")?.unwrap_or(false),
        Some(v) => return bad(format!("stream_options must be an object, got {v}"), Some("stream_options")),
    };
    Ok((stream, usage))
}

fn sampling(o: &Map<String, Value>, max: Option<u32>, max_key: &'static str, min_key: &'static str) -> Result<Sampling, BadRequest> {
    if max == Some(0) {
        return bad(format!("{max_key} must be at least 1"), Some(max_key));
    }
    let min_tokens = uint(o, min_key)?;
    if let (Some(min), Some(max)) = (min_tokens, max) {
        if min > max {
            return bad(format!("{min_key} ({min}) must be at most {max_key} ({max})"), Some(min_key));
        }
    }
    Ok(Sampling { max_tokens: max, min_tokens, ignore_eos: flag(o, "ignore_eos")?.unwrap_or(false) })
}

fn parse_completion(o: &Map<String, Value>) -> Result<CompletionRequest, BadRequest> {
    check_openai_fields(o, COMPLETION_FIELDS)?;
    let ids = |a: &[Value]| a.iter().all(Value::is_u64);
    let prompt_tokens = match o.get("prompt") {
        Some(Value::String(s)) => words(s),
        Some(Value::Array(a)) if ids(a) => count(a.len()),
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => a[0].as_str().map_or(0, words),
        Some(Value::Array(a)) if a.len() == 1 && a[0].as_array().is_some_and(|x| ids(x)) => a[0].as_array().map_or(0, |x| count(x.len())),
        None => return bad("prompt is required", Some("prompt")),
        _ => return bad("prompt must be a string, a list of token ids, or a one-element list of either", Some("prompt")),
    };
    // An empty string or list is no prompt (the engines refuse it); whitespace tokenizes to a
    // token or more in an engine, so it is a prompt, of no words here.
    let empty = match o.get("prompt") {
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Array(a)) => a.is_empty() || a.iter().all(|x| x.as_str() == Some("") || x.as_array().is_some_and(Vec::is_empty)),
        _ => false,
    };
    if empty {
        return bad("prompt must not be empty", Some("prompt"));
    }
    let (stream, include_usage) = stream_flags(o)?;
    let sampling = sampling(o, uint(o, "max_tokens")?, "max_tokens", "min_tokens")?;
    Ok(CompletionRequest { prompt_tokens, sampling, stream, include_usage })
}

fn parse_chat(o: &Map<String, Value>) -> Result<ChatRequest, BadRequest> {
    check_openai_fields(o, CHAT_FIELDS)?;
    let Some(msgs) = o.get("messages").and_then(Value::as_array) else {
        return bad("messages is required and must be a list", Some("messages"));
    };
    if msgs.is_empty() {
        return bad("messages must not be empty", Some("messages"));
    }
    let mut prompt_tokens = 0u32;
    for m in msgs {
        if m.get("role").and_then(Value::as_str).is_none() {
            return bad("every message needs a role", Some("messages"));
        }
        let n = match m.get("content") {
            Some(Value::String(s)) => words(s),
            Some(Value::Array(parts)) => {
                parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).map(words).fold(0, u32::saturating_add)
            }
            _ => 0,
        };
        prompt_tokens = prompt_tokens.saturating_add(n);
    }
    let max_key = if o.get("max_completion_tokens").is_some_and(|v| !v.is_null()) { "max_completion_tokens" } else { "max_tokens" };
    let max = uint(o, "max_completion_tokens")?.or(uint(o, "max_tokens")?);
    let (stream, include_usage) = stream_flags(o)?;
    let sampling = sampling(o, max, max_key, "min_tokens")?;
    Ok(ChatRequest { prompt_tokens, sampling, stream, include_usage })
}

fn parse_generate(o: &Map<String, Value>) -> Result<GenerateRequest, BadRequest> {
    let given = |k: &str| o.get(k).is_some_and(|v| !v.is_null());
    if given("text") && given("input_ids") {
        return bad("give text or input_ids, not both", Some("text"));
    }
    let prompt_tokens = match (o.get("text"), o.get("input_ids")) {
        (Some(Value::String(s)), _) => words(s),
        (_, Some(Value::Array(a))) if a.iter().all(Value::is_u64) => count(a.len()),
        (_, Some(Value::Array(_))) => return bad("input_ids must be a list of token ids (non-negative integers)", Some("input_ids")),
        _ => return bad("text (a string) or input_ids (a list) is required", Some("text")),
    };
    let empty = match (o.get("text"), o.get("input_ids")) {
        (Some(Value::String(s)), _) => s.is_empty(),
        (_, Some(Value::Array(a))) => a.is_empty(),
        _ => false,
    };
    if empty {
        return bad("the prompt (text or input_ids) must not be empty", Some("text"));
    }
    let empty = Map::new();
    let sp = match o.get("sampling_params") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(sp)) => sp,
        Some(_) => return bad("sampling_params must be an object", Some("sampling_params")),
    };
    let sampling = sampling(sp, uint(sp, "max_new_tokens")?, "sampling_params.max_new_tokens", "min_new_tokens")?;
    Ok(GenerateRequest { prompt_tokens, sampling, stream: flag(o, "stream")?.unwrap_or(false) })
}

/// The kind of an OpenAI-shaped error body (`error.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    /// The request is wrong (400, 404, 405, 408, 413).
    InvalidRequest,
    /// The server is not ready or overloaded (503).
    ServiceUnavailable,
    /// The server failed (5xx).
    Server,
}

impl ErrorType {
    /// The type for an HTTP status.
    pub fn of_status(status: u16) -> ErrorType {
        match status {
            503 => ErrorType::ServiceUnavailable,
            400..=499 => ErrorType::InvalidRequest,
            _ => ErrorType::Server,
        }
    }

    /// The `error.type` string.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::InvalidRequest => "invalid_request_error",
            ErrorType::ServiceUnavailable => "service_unavailable",
            ErrorType::Server => "server_error",
        }
    }
}

/// The error body OpenAI clients parse (`error.message`, `error.type`, `error.param`, `error.code`).
pub fn error_body(status: u16, message: &str, param: Option<&str>) -> Vec<u8> {
    let v = json!({"error": {"message": message, "type": ErrorType::of_status(status).as_str(), "param": param, "code": status}});
    serde_json::to_vec(&v).unwrap_or_default()
}

/// The output vocabulary: every generated token is one of these words, with its leading space (a
/// client's word-level tokenizer built from them counts the simulator's tokens exactly).
pub const WORDS: &[&str] = &[
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

/// The text of output token `index` of request `id`: one word, with its leading space.
pub fn word(id: u64, index: u32) -> &'static str {
    WORDS[((id.wrapping_mul(31) ^ (u64::from(index) * 17)) % WORDS.len() as u64) as usize]
}

/// A deterministic uniform number in [0, 1) for arrival `n` and fault `salt`, under `seed`.
pub fn chance(seed: u64, n: u64, salt: u64) -> f64 {
    let mut x = seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// Appends one server-sent event carrying `json` (already serialized) to `buf`.
fn frame(buf: &mut Vec<u8>, json: impl FnOnce(&mut Vec<u8>)) {
    buf.extend_from_slice(b"data: ");
    json(buf);
    buf.extend_from_slice(b"\n\n");
}

/// The stream's closing event.
pub const DONE_EVENT: &[u8] = b"data: [DONE]\n\n";
/// An event whose data is not JSON (the `malformed` fault).
pub const MALFORMED_EVENT: &[u8] = b"data: {this is not json\n\n";

/// What one chat/completions choice chunk carries.
#[derive(Debug, Clone, Copy)]
enum Delta<'a> {
    /// The chat role chunk (`{"role":"assistant","content":""}`).
    Role,
    /// Answer text.
    Content(&'a str),
    /// Chat reasoning text (`reasoning_content`).
    Reasoning(&'a str),
    /// The finish chunk: no text.
    Empty,
}

/// Writes every response and chunk of one request, in its API's shapes.
#[derive(Debug, Clone)]
pub struct ChunkWriter {
    api: Api,
    id: u64,
    /// Unix seconds.
    created: u64,
    /// The model name as a JSON string literal.
    model_json: String,
    prompt_tokens: u32,
    include_usage: bool,
    /// Chat: the first this many output tokens are reasoning (`reasoning_content`).
    reasoning_tokens: u32,
    /// sglang streams and every non-streamed answer: the text so far.
    text: String,
}

impl ChunkWriter {
    /// A writer for request `id` of `ask`, answering as `model`; the first `reasoning_tokens`
    /// output tokens of a chat stream are reasoning.
    pub fn new(ask: &Ask, id: u64, model: &str, reasoning_tokens: u32) -> Self {
        let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        Self {
            api: ask.api,
            id,
            created,
            model_json: serde_json::to_string(model).unwrap_or_else(|_| "\"model\"".into()),
            prompt_tokens: ask.prompt_tokens,
            include_usage: ask.include_usage,
            reasoning_tokens: if ask.api == Api::Chat { reasoning_tokens } else { 0 },
            text: String::new(),
        }
    }

    fn object(&self) -> (&'static str, &'static str) {
        match self.api {
            Api::Chat => ("chatcmpl", "chat.completion.chunk"),
            Api::Completions | Api::Sglang => ("cmpl", "text_completion"),
        }
    }

    /// One OpenAI choice chunk, written by hand: it is the hot path of a stream.
    fn choice(&self, buf: &mut Vec<u8>, delta: Delta<'_>, finish: Option<Finish>) {
        let (prefix, object) = self.object();
        frame(buf, |b| {
            let _ = write!(
                b,
                "{{\"id\":\"{prefix}-{}\",\"object\":\"{object}\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,",
                self.id, self.created, self.model_json
            );
            let text = match delta {
                Delta::Content(t) | Delta::Reasoning(t) => t,
                Delta::Role | Delta::Empty => "",
            };
            match (self.api, delta) {
                (Api::Chat, Delta::Role) => b.extend_from_slice(b"\"delta\":{\"role\":\"assistant\",\"content\":\"\"}"),
                (Api::Chat, Delta::Empty) => b.extend_from_slice(b"\"delta\":{}"),
                (Api::Chat, Delta::Reasoning(_)) => b.extend_from_slice(b"\"delta\":{\"reasoning_content\":"),
                (Api::Chat, Delta::Content(_)) => b.extend_from_slice(b"\"delta\":{\"content\":"),
                _ => b.extend_from_slice(b"\"text\":"),
            }
            if matches!((self.api, delta), (Api::Chat, Delta::Content(_) | Delta::Reasoning(_)) | (Api::Completions | Api::Sglang, _)) {
                let _ = serde_json::to_writer(&mut *b, text);
                if self.api == Api::Chat {
                    b.push(b'}');
                }
            }
            let _ = match finish {
                Some(f) => write!(b, ",\"logprobs\":null,\"finish_reason\":\"{}\"}}]}}", f.as_str()),
                None => write!(b, ",\"logprobs\":null,\"finish_reason\":null}}]}}"),
            };
        });
    }

    /// sglang's stream chunk: the cumulative text and the counts so far.
    fn sglang_chunk(&self, buf: &mut Vec<u8>, completion_tokens: u32, finish: Option<Finish>) {
        let finish = finish.map(|f| json!({"type": f.as_str()}));
        let v = json!({"text": self.text, "meta_info": {"id": self.id.to_string(), "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens, "finish_reason": finish}});
        frame(buf, |b| {
            let _ = serde_json::to_writer(&mut *b, &v);
        });
    }

    /// The chat stream's first chunk, carrying only the role (as vLLM and sglang send it).
    pub fn role(&self, buf: &mut Vec<u8>) {
        if self.api == Api::Chat {
            self.choice(buf, Delta::Role, None);
        }
    }

    /// One chunk of `count` output tokens starting at token `first`.
    pub fn tokens(&mut self, buf: &mut Vec<u8>, first: u32, count: u32) {
        let mut piece = String::new();
        for i in first..first.saturating_add(count) {
            piece.push_str(word(self.id, i));
        }
        let last = first.saturating_add(count);
        match self.api {
            Api::Sglang => {
                self.text.push_str(&piece);
                self.sglang_chunk(buf, last, None);
            }
            Api::Chat if last <= self.reasoning_tokens => self.choice(buf, Delta::Reasoning(&piece), None),
            _ => self.choice(buf, Delta::Content(&piece), None),
        }
    }

    /// The end of a stream: the finish chunk, the usage chunk when asked, and `[DONE]`.
    pub fn done(&self, buf: &mut Vec<u8>, finish: Finish, completion_tokens: u32) {
        if self.api == Api::Sglang {
            self.sglang_chunk(buf, completion_tokens, Some(finish));
        } else {
            self.choice(buf, Delta::Empty, Some(finish));
        }
        if self.include_usage && self.api != Api::Sglang {
            let (prefix, object) = self.object();
            let v = json!({"id": format!("{prefix}-{}", self.id), "object": object, "created": self.created, "model": self.model(), "choices": [],
                "usage": self.usage(completion_tokens)});
            frame(buf, |b| {
                let _ = serde_json::to_writer(&mut *b, &v);
            });
        }
        buf.extend_from_slice(DONE_EVENT);
    }

    /// An error event mid-stream (`{"error": {...}}`), as sglang and vLLM send one.
    pub fn error(&self, buf: &mut Vec<u8>, message: &str) {
        frame(buf, |b| b.extend_from_slice(&error_body(500, message, None)));
    }

    /// Collects output tokens for a non-streamed answer.
    pub fn push_text(&mut self, first: u32, count: u32) {
        for i in first..first.saturating_add(count) {
            self.text.push_str(word(self.id, i));
        }
    }

    /// The whole non-streamed answer, in the API's shape.
    pub fn whole(&self, finish: Finish, completion_tokens: u32) -> Vec<u8> {
        let usage = self.usage(completion_tokens);
        let (id, f) = (self.id, finish.as_str());
        let v = match self.api {
            Api::Completions => {
                json!({"id": format!("cmpl-{id}"), "object": "text_completion", "created": self.created, "model": self.model(),
                "choices": [{"index": 0, "text": self.text, "logprobs": null, "finish_reason": f}], "usage": usage})
            }
            Api::Chat => {
                json!({"id": format!("chatcmpl-{id}"), "object": "chat.completion", "created": self.created, "model": self.model(),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": self.text}, "finish_reason": f}], "usage": usage})
            }
            Api::Sglang => json!({"text": self.text, "meta_info": {"id": id.to_string(), "prompt_tokens": self.prompt_tokens,
                "completion_tokens": completion_tokens, "finish_reason": {"type": f}}}),
        };
        serde_json::to_vec(&v).unwrap_or_default()
    }

    fn model(&self) -> Value {
        serde_json::from_str(&self.model_json).unwrap_or(Value::Null)
    }

    fn usage(&self, completion_tokens: u32) -> Value {
        let total = u64::from(self.prompt_tokens) + u64::from(completion_tokens);
        json!({"prompt_tokens": self.prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": total})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(api: Api, body: Value) -> Result<Ask, BadRequest> {
        parse_request(api, &serde_json::to_vec(&body).unwrap_or_default()).map(|r| r.ask())
    }

    #[test]
    fn unknown_fields_and_zero_max_tokens_are_400_material() {
        let e = ask(Api::Completions, json!({"prompt": "a", "max_tokens": 4, "frobnicate": 1})).expect_err("unknown");
        assert!(e.message.contains("frobnicate"));
        let e = ask(Api::Completions, json!({"prompt": "a", "max_tokens": 0})).expect_err("zero");
        assert_eq!(e.param, Some("max_tokens"));
        let e = ask(Api::Chat, json!({"messages": [], "max_tokens": 4})).expect_err("empty");
        assert!(e.message.contains("must not be empty"));
        let e = ask(Api::Completions, json!({"prompt": "a", "max_tokens": 10_000_000_000u64})).expect_err("too big");
        assert!(e.message.contains("out of range") && e.message.contains("4294967295"), "{e}");
        assert!(ask(Api::Chat, json!({"messages": [{"role": "user", "content": "a b c"}], "max_completion_tokens": 3})).is_ok());
    }

    #[test]
    fn prompt_tokens_count_words_or_ids_and_defaults_follow_the_api() {
        assert_eq!(ask(Api::Completions, json!({"prompt": "one two three"})).ok().map(|a| (a.prompt_tokens, a.max_tokens)), Some((3, 16)));
        assert_eq!(ask(Api::Completions, json!({"prompt": [1, 2, 3, 4]})).ok().map(|a| a.prompt_tokens), Some(4));
        let a = ask(Api::Sglang, json!({"text": "a b", "sampling_params": {"max_new_tokens": 5, "min_new_tokens": 3}})).expect("sglang");
        assert_eq!((a.max_tokens, a.min_tokens, a.include_usage), (5, 3, true), "sglang counts always");
        assert_eq!(ask(Api::Chat, json!({"messages": [{"role": "u"}]})).ok().map(|a| a.max_tokens), Some(512));
    }

    /// What vLLM's and sglang's request models refuse with 400, the simulator refuses too: a field
    /// of the wrong type, an empty prompt, a minimum above the maximum, token ids that are not
    /// ids, text and ids at once. What pydantic's lax mode takes ("true", 1) it takes.
    #[test]
    fn fields_the_engines_refuse_are_400_and_lax_booleans_are_taken() {
        let param = |api, body: Value| ask(api, body).expect_err("refused").param;
        use Api::*;
        assert_eq!(param(Completions, json!({"prompt": "a", "stream": "maybe"})), Some("stream"));
        assert_eq!(param(Completions, json!({"prompt": "a", "temperature": "hot"})), Some("temperature"));
        assert_eq!(param(Completions, json!({"prompt": "a", "temperature": [1]})), Some("temperature"));
        assert_eq!(param(Completions, json!({"prompt": "a", "temperature": -1})), Some("temperature"));
        assert_eq!(param(Completions, json!({"prompt": "a", "stop": 5})), Some("stop"));
        assert_eq!(param(Completions, json!({"prompt": "a", "ignore_eos": "sometimes"})), Some("ignore_eos"));
        assert_eq!(param(Completions, json!({"prompt": "a", "seed": 1.5})), Some("seed"));
        assert_eq!(param(Chat, json!({"messages": [{"role": "user", "content": "a"}], "stream_options": 3})), Some("stream_options"));
        assert_eq!(param(Completions, json!({"prompt": ""})), Some("prompt"));
        assert_eq!(param(Completions, json!({"prompt": []})), Some("prompt"));
        assert_eq!(param(Completions, json!({"prompt": "a", "max_tokens": 4, "min_tokens": 9})), Some("min_tokens"));
        assert_eq!(param(Sglang, json!({"input_ids": [1, "x", -3]})), Some("input_ids"));
        assert_eq!(param(Sglang, json!({"text": "a", "input_ids": [1]})), Some("text"));
        assert_eq!(param(Sglang, json!({"input_ids": []})), Some("text"));
        assert_eq!(
            param(Sglang, json!({"text": "a b", "sampling_params": {"max_new_tokens": 5, "min_new_tokens": 9}})),
            Some("min_new_tokens")
        );
        // Lax booleans and numeric strings, as pydantic reads them.
        for (v, want) in [(json!("true"), true), (json!(1), true), (json!("yes"), true), (json!("false"), false), (json!(0), false)] {
            assert_eq!(ask(Completions, json!({"prompt": "a", "stream": v})).expect("taken").stream, want);
        }
        assert!(ask(Completions, json!({"prompt": "a", "temperature": "0.7", "stop": ["x", "y"], "seed": -4})).is_ok());
        assert!(ask(Completions, json!({"prompt": " ", "seed": 1.0})).is_ok(), "a space is a prompt; 1.0 is an integer");
        let e = ask(
            Chat,
            json!({"messages": [{"role": "user", "content": "a"}], "max_completion_tokens": 5, "max_tokens": 100, "min_tokens": 50}),
        )
        .expect_err("min above max");
        assert!(e.message.contains("must be at most max_completion_tokens (5)"), "{e:?}");
        assert!(ask(Sglang, json!({"text": "a", "input_ids": null, "stream": "1"})).expect("taken").stream);
    }

    fn data(buf: &[u8]) -> Vec<Value> {
        let s = String::from_utf8_lossy(buf);
        s.split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap_or(Value::Null))
            .collect()
    }

    #[test]
    fn every_chunk_is_valid_json_with_the_escaped_model_name() {
        for api in Api::ALL {
            let body = match api {
                Api::Completions => json!({"prompt": "x"}),
                Api::Chat => json!({"messages": [{"role": "user", "content": "x"}]}),
                Api::Sglang => json!({"text": "x"}),
            };
            let a = ask(api, body).expect("ask");
            let mut w = ChunkWriter::new(&Ask { include_usage: true, ..a }, 7, "m\"x", 1);
            let mut buf = Vec::new();
            w.role(&mut buf);
            w.tokens(&mut buf, 0, 1);
            w.tokens(&mut buf, 1, 2);
            w.done(&mut buf, Finish::Length, 3);
            let events = data(&buf);
            assert!(events.iter().all(|v| !v.is_null()), "{api:?}: {}", String::from_utf8_lossy(&buf));
            assert!(buf.ends_with(DONE_EVENT));
            if api != Api::Sglang {
                assert!(events.iter().all(|v| v["model"] == "m\"x"), "{events:?}");
            }
            if api == Api::Chat {
                assert_eq!(events[1]["choices"][0]["delta"]["reasoning_content"].as_str(), Some(word(7, 0)), "first token is reasoning");
                assert_eq!(events[2]["choices"][0]["delta"]["content"].as_str().map(str::len), Some(word(7, 1).len() + word(7, 2).len()));
            }
        }
    }

    #[test]
    fn error_types_follow_the_status() {
        let v: Value = serde_json::from_slice(&error_body(405, "no", None)).unwrap_or(Value::Null);
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(ErrorType::of_status(503).as_str(), "service_unavailable");
        assert_eq!(ErrorType::of_status(500).as_str(), "server_error");
    }
}
