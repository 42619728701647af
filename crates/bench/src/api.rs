//! The serving APIs the load generator speaks: request bodies and the reading of each response event.
//!
//! OpenAI completions (`/v1/completions`), OpenAI chat (`/v1/chat/completions`) and sglang's native
//! `/generate`. Each streamed event becomes an [`EventInfo`]: how many tokens it carries (when the
//! event says so), whether it carries content, usage counts, a finish reason, or an error payload.
//! Network data is parsed, never trusted: nothing here panics on any input.

use serde::Deserialize;
use serde_json::{json, Value};

/// Which API to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    /// `/v1/completions`.
    OpenaiCompletions,
    /// `/v1/chat/completions`.
    OpenaiChat,
    /// sglang's native `/generate`.
    Sglang,
}

impl Api {
    /// The request path under the base URL.
    pub fn path(self) -> &'static str {
        match self {
            Api::OpenaiCompletions => "/v1/completions",
            Api::OpenaiChat => "/v1/chat/completions",
            Api::Sglang => "/generate",
        }
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Api::OpenaiCompletions => "openai-completions",
            Api::OpenaiChat => "openai-chat",
            Api::Sglang => "sglang",
        }
    }
}

/// What a request asks for, independent of the API's spelling.
#[derive(Debug, Clone)]
pub struct RequestBody<'a> {
    /// The model field, when known.
    pub model: Option<&'a str>,
    /// The prompt text.
    pub prompt: &'a str,
    /// Output tokens asked for.
    pub max_tokens: u32,
    /// Ask for a streamed response.
    pub stream: bool,
    /// Force exactly `max_tokens` output tokens.
    pub ignore_eos: bool,
    /// The EOS token id, for an EOS `logit_bias` on plain OpenAI-compatible servers.
    pub eos_token_id: Option<u32>,
}

/// Builds the JSON body for `api`.
pub fn build_body(api: Api, r: &RequestBody<'_>) -> Vec<u8> {
    let mut v = match api {
        Api::OpenaiCompletions => json!({ "prompt": r.prompt, "max_tokens": r.max_tokens }),
        Api::OpenaiChat => json!({
            "messages": [{ "role": "user", "content": r.prompt }],
            "max_tokens": r.max_tokens,
        }),
        Api::Sglang => {
            let mut sp = json!({ "max_new_tokens": r.max_tokens, "temperature": 0.0 });
            if r.ignore_eos {
                sp["ignore_eos"] = Value::Bool(true);
            }
            json!({ "text": r.prompt, "sampling_params": sp, "stream": r.stream })
        }
    };
    if api != Api::Sglang {
        v["temperature"] = json!(0.0);
        v["stream"] = Value::Bool(r.stream);
        if let Some(m) = r.model {
            v["model"] = Value::String(m.to_string());
        }
        if r.stream {
            // Ask for the server's own token count in a final usage event.
            v["stream_options"] = json!({ "include_usage": true });
        }
        if r.ignore_eos {
            // vLLM and sglang honour these; other OpenAI-compatible servers ignore unknown fields and
            // need the EOS logit bias instead (their request schemas differ on length control).
            v["ignore_eos"] = Value::Bool(true);
            v["min_tokens"] = json!(r.max_tokens);
            if let Some(eos) = r.eos_token_id {
                v["logit_bias"] = json!({ eos.to_string(): -100 });
            }
        }
    }
    serde_json::to_vec(&v).unwrap_or_default()
}

/// What one response event (or a whole non-streamed response) says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventInfo {
    /// Visible text in this event (answer content plus reasoning).
    pub text: String,
    /// The event carries at least one output token (content or reasoning; a role-only delta does not).
    pub has_token: bool,
    /// The event carries answer content (not only reasoning).
    pub has_content: bool,
    /// Tokens in this event when the server says so (sglang's cumulative count, turned into a delta
    /// by the caller); `None` means "count the event as one chunk".
    pub completion_tokens_cumulative: Option<u64>,
    /// `usage.prompt_tokens` or `meta_info.prompt_tokens`.
    pub prompt_tokens: Option<u64>,
    /// `usage.completion_tokens`.
    pub usage_completion_tokens: Option<u64>,
    /// The finish reason, when this event ends the answer.
    pub finish_reason: Option<String>,
    /// An error payload (`{"error": ...}` or `"object": "error"`).
    pub error: Option<String>,
    /// sglang only: the cumulative text so far (the caller takes the delta).
    pub cumulative_text: bool,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

#[derive(Deserialize, Default)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    text: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    message: Option<Delta<'a>>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct OpenAiEvent<'a> {
    #[serde(default, borrow)]
    choices: Vec<Choice<'a>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default, borrow)]
    object: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
struct SglangMeta {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    finish_reason: Option<Value>,
}

#[derive(Deserialize)]
struct SglangEvent {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    meta_info: Option<SglangMeta>,
    #[serde(default)]
    error: Option<Value>,
}

fn error_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(m) => m.get("message").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| v.to_string()),
        other => other.to_string(),
    }
}

/// Parses one event's JSON. `Err` means the event is not valid JSON of any expected shape.
pub fn parse_event(api: Api, data: &str) -> Result<EventInfo, String> {
    parse_event_with(api, data, true)
}

/// [`parse_event`], collecting [`EventInfo::text`] only when `keep_text` (a tokenizer counts it)
/// or when the API's counting needs it (sglang's cumulative text): a stream read without a
/// tokenizer then allocates nothing for an event's text.
pub fn parse_event_with(api: Api, data: &str, keep_text: bool) -> Result<EventInfo, String> {
    match api {
        Api::OpenaiCompletions | Api::OpenaiChat => parse_openai(data, keep_text),
        Api::Sglang => parse_sglang(data),
    }
}

fn parse_openai(data: &str, keep_text: bool) -> Result<EventInfo, String> {
    let ev: OpenAiEvent<'_> = serde_json::from_str(data).map_err(|e| format!("malformed JSON event: {e}"))?;
    let mut info = EventInfo::default();
    if let Some(err) = &ev.error {
        info.error = Some(error_text(err));
        return Ok(info);
    }
    if ev.object.as_deref() == Some("error") {
        info.error = Some(ev.message.unwrap_or_else(|| "error object".into()));
        return Ok(info);
    }
    for c in &ev.choices {
        if let Some(t) = &c.text {
            if !t.is_empty() {
                info.has_token = true;
                info.has_content = true;
                if keep_text {
                    info.text.push_str(t);
                }
            }
        }
        for d in [&c.delta, &c.message].into_iter().flatten() {
            for r in [&d.reasoning_content, &d.reasoning].into_iter().flatten() {
                if !r.is_empty() {
                    info.has_token = true;
                    if keep_text {
                        info.text.push_str(r);
                    }
                }
            }
            if let Some(t) = &d.content {
                if !t.is_empty() {
                    info.has_token = true;
                    info.has_content = true;
                    if keep_text {
                        info.text.push_str(t);
                    }
                }
            }
        }
        if let Some(f) = &c.finish_reason {
            info.finish_reason = Some(f.clone());
        }
    }
    if let Some(u) = ev.usage {
        info.prompt_tokens = u.prompt_tokens;
        info.usage_completion_tokens = u.completion_tokens;
    }
    Ok(info)
}

fn parse_sglang(data: &str) -> Result<EventInfo, String> {
    let ev: SglangEvent = serde_json::from_str(data).map_err(|e| format!("malformed JSON event: {e}"))?;
    let mut info = EventInfo { cumulative_text: true, ..Default::default() };
    if let Some(err) = &ev.error {
        info.error = Some(error_text(err));
        return Ok(info);
    }
    if let Some(t) = ev.text {
        info.text = t;
    }
    if let Some(m) = ev.meta_info {
        info.prompt_tokens = m.prompt_tokens;
        info.completion_tokens_cumulative = m.completion_tokens;
        info.usage_completion_tokens = m.completion_tokens;
        info.finish_reason = match m.finish_reason {
            None | Some(Value::Null) => None,
            Some(Value::Object(o)) => o.get("type").and_then(Value::as_str).map(str::to_string).or(Some("stop".into())),
            Some(Value::String(s)) => Some(s),
            Some(other) => Some(other.to_string()),
        };
    }
    Ok(info)
}

/// Every model id a `/v1/models` response lists, in its order (a server may serve several: LoRA
/// adapters beside their base, or a router's models).
pub fn model_ids(body: &[u8]) -> Vec<String> {
    let Ok(v) = serde_json::from_slice::<Value>(body) else { return Vec::new() };
    let Some(data) = v.get("data").and_then(Value::as_array) else { return Vec::new() };
    data.iter().filter_map(|m| m.get("id").and_then(Value::as_str).map(str::to_string)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_model_id_is_read_in_order() {
        let body = br#"{"object":"list","data":[{"id":"base"},{"object":"model"},{"id":"base-lora"}]}"#;
        assert_eq!(model_ids(body), ["base", "base-lora"]);
        assert!(model_ids(b"not json").is_empty() && model_ids(br#"{"data":{}}"#).is_empty());
    }

    #[test]
    fn role_only_chat_chunk_is_not_a_token() {
        let e = parse_event(Api::OpenaiChat, r#"{"choices":[{"delta":{"role":"assistant"},"index":0}]}"#).expect("parse");
        assert!(!e.has_token);
        let e = parse_event(Api::OpenaiChat, r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#).expect("parse");
        assert!(!e.has_token);
    }

    #[test]
    fn reasoning_delta_counts_as_output_but_not_content() {
        for field in ["reasoning_content", "reasoning"] {
            let data = format!(r#"{{"choices":[{{"delta":{{"{field}":"hm"}}}}]}}"#);
            let e = parse_event(Api::OpenaiChat, &data).expect("parse");
            assert!(e.has_token && !e.has_content, "{field}");
        }
    }

    #[test]
    fn usage_event_with_no_choices_is_read() {
        let e =
            parse_event(Api::OpenaiCompletions, r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":64,"total_tokens":76}}"#)
                .expect("parse");
        assert_eq!((e.prompt_tokens, e.usage_completion_tokens, e.has_token), (Some(12), Some(64), false));
    }

    #[test]
    fn error_payloads_are_recognised() {
        let e = parse_event(Api::OpenaiCompletions, r#"{"error":{"message":"out of memory","code":500}}"#).expect("parse");
        assert_eq!(e.error.as_deref(), Some("out of memory"));
        let e = parse_event(Api::OpenaiCompletions, r#"{"object":"error","message":"bad"}"#).expect("parse");
        assert_eq!(e.error.as_deref(), Some("bad"));
    }

    #[test]
    fn malformed_json_is_an_error_not_a_panic() {
        assert!(parse_event(Api::OpenaiChat, "{not json").is_err());
        assert!(parse_event(Api::Sglang, "[1,2").is_err());
    }

    #[test]
    fn sglang_meta_info_gives_cumulative_counts() {
        let e = parse_event(
            Api::Sglang,
            r#"{"text":"ab","meta_info":{"prompt_tokens":5,"completion_tokens":2,"finish_reason":{"type":"length"}}}"#,
        )
        .expect("parse");
        assert_eq!(e.completion_tokens_cumulative, Some(2));
        assert_eq!(e.finish_reason.as_deref(), Some("length"));
    }

    #[test]
    fn ignore_eos_sets_each_api_field() {
        let r = RequestBody { model: Some("m"), prompt: "hi", max_tokens: 8, stream: true, ignore_eos: true, eos_token_id: Some(2) };
        let v: Value = serde_json::from_slice(&build_body(Api::OpenaiCompletions, &r)).expect("json");
        assert_eq!(v["ignore_eos"], true);
        assert_eq!(v["min_tokens"], 8);
        assert_eq!(v["logit_bias"]["2"], -100);
        assert_eq!(v["stream_options"]["include_usage"], true);
        let v: Value = serde_json::from_slice(&build_body(Api::Sglang, &r)).expect("json");
        assert_eq!(v["sampling_params"]["ignore_eos"], true);
        assert_eq!(v["sampling_params"]["max_new_tokens"], 8);
    }
}
