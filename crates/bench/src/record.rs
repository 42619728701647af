//! The per-request record: what was intended, what happened, and every chunk's arrival.
//! Everything the metrics report is derived from these records, and `--records` writes them as-is.

use serde::Serialize;

/// Why a request failed. A failed request is never dropped: it counts against goodput and in
/// `errors` by this kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The TCP connection could not be made (or broke before a response head).
    Connect,
    /// `--timeout` passed before the response ended.
    Timeout,
    /// The server answered with a status other than 200.
    HttpStatus,
    /// The body ended (or the connection broke) before the stream finished.
    TruncatedStream,
    /// An event was not valid JSON, or the response was not an event stream.
    MalformedEvent,
    /// The server sent an error object.
    ErrorPayload,
    /// Still in flight when the drain deadline after a stop passed (or a second signal cut it).
    Cancelled,
    /// No response head, or no byte of an event stream, within `--first-byte-timeout`.
    NoResponse,
    /// The response went silent for longer than `--idle-timeout`.
    Stalled,
    /// The connection closed (or broke) after the request went out and before a response head.
    Disconnected,
    /// The server sent more output tokens than `max_tokens` asked for.
    TooManyTokens,
    /// The response ended well but carried no output token (often the wrong `--api`).
    NoTokens,
}

impl ErrorKind {
    /// Every kind, in the order reports list them.
    pub const ALL: [ErrorKind; 12] = [
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::HttpStatus,
        ErrorKind::TruncatedStream,
        ErrorKind::MalformedEvent,
        ErrorKind::ErrorPayload,
        ErrorKind::Cancelled,
        ErrorKind::NoResponse,
        ErrorKind::Stalled,
        ErrorKind::Disconnected,
        ErrorKind::TooManyTokens,
        ErrorKind::NoTokens,
    ];

    /// The snake_case name used in JSON and in the terminal.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::HttpStatus => "http_status",
            ErrorKind::TruncatedStream => "truncated_stream",
            ErrorKind::MalformedEvent => "malformed_event",
            ErrorKind::ErrorPayload => "error_payload",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::NoResponse => "no_response",
            ErrorKind::Stalled => "stalled",
            ErrorKind::Disconnected => "disconnected",
            ErrorKind::TooManyTokens => "too_many_tokens",
            ErrorKind::NoTokens => "no_tokens",
        }
    }
}

/// One arrival of data carrying at least one output token.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Chunk {
    /// Arrival, in ns since the run's start.
    pub at_ns: u64,
    /// Tokens in this chunk (1 per chunk unless the server or the tokenizer says more).
    pub tokens: u32,
    /// Carries answer content (as opposed to reasoning only).
    pub content: bool,
}

/// Chunks a record stores beyond its `max_tokens`: an honest server sends at most one chunk per
/// token, so a record holds at most `max_tokens + CHUNK_SLACK` chunks; later ones are counted in
/// [`RequestRecord::chunks_dropped`] but not stored, which bounds memory by the work asked for.
pub const CHUNK_SLACK: u32 = 64;

/// Everything measured about one request. Times are ns since the run's start.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestRecord {
    /// Position in the workload (0-based; warmup first).
    pub index: u64,
    /// Warmup requests are kept in the records but excluded from every statistic.
    pub warmup: bool,
    /// When the schedule said to send it.
    pub intended_ns: u64,
    /// When it was actually sent (after any wait for a concurrency slot).
    pub actual_ns: u64,
    /// When the response ended (or the request failed).
    pub end_ns: u64,
    /// HTTP status, when a response head arrived.
    pub status: Option<u16>,
    /// Why it failed; `None` for a success.
    pub error: Option<ErrorKind>,
    /// Human-readable cause of the error (server text has the API key redacted).
    pub error_detail: Option<String>,
    /// Token-carrying arrivals, at most `output_tokens_requested + CHUNK_SLACK` of them.
    pub chunks: Vec<Chunk>,
    /// Token-carrying arrivals past the cap, counted but not stored.
    pub chunks_dropped: u64,
    /// Prompt tokens the workload planned.
    pub input_tokens_planned: u32,
    /// Prompt tokens the server reported.
    pub input_tokens_server: Option<u64>,
    /// Output tokens requested (`max_tokens`).
    pub output_tokens_requested: u32,
    /// Output tokens the server reported in its usage.
    pub output_tokens_server: Option<u64>,
    /// Sum of the chunks' token counts.
    pub output_tokens_chunks: u64,
    /// Output tokens by the local tokenizer over the received text, when one is loaded.
    pub output_tokens_tokenizer: Option<u64>,
    /// The server's finish reason (`length`, `stop`, ...).
    pub finish_reason: Option<String>,
}

impl RequestRecord {
    /// A record of a request not yet sent.
    pub fn new(index: u64, warmup: bool, intended_ns: u64, input_tokens_planned: u32, output_tokens_requested: u32) -> Self {
        Self {
            index,
            warmup,
            intended_ns,
            actual_ns: intended_ns,
            end_ns: intended_ns,
            status: None,
            error: None,
            error_detail: None,
            chunks: Vec::new(),
            chunks_dropped: 0,
            input_tokens_planned,
            input_tokens_server: None,
            output_tokens_requested,
            output_tokens_server: None,
            output_tokens_chunks: 0,
            output_tokens_tokenizer: None,
            finish_reason: None,
        }
    }

    /// Output tokens, reconciled: the server's usage first, then the tokenizer, then chunks. A
    /// usage count above the `max_tokens` the request asked for is not a count (the server cannot
    /// have generated more; [`Self::usage_over_requested`]) and is passed over.
    pub fn output_tokens(&self) -> u64 {
        self.output_tokens_server
            .filter(|_| !self.usage_over_requested())
            .or(self.output_tokens_tokenizer)
            .unwrap_or(self.output_tokens_chunks)
    }

    /// Whether the server's usage reports more output tokens than the request's `max_tokens`.
    pub fn usage_over_requested(&self) -> bool {
        self.output_tokens_requested > 0 && self.output_tokens_server.is_some_and(|u| u > u64::from(self.output_tokens_requested))
    }

    /// Input tokens: the server's count when it gave one, else the plan.
    pub fn input_tokens(&self) -> u64 {
        self.input_tokens_server.unwrap_or(self.input_tokens_planned as u64)
    }

    /// Completed without an error.
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }

    /// First chunk carrying a token (content or reasoning).
    pub fn first_token_ns(&self) -> Option<u64> {
        self.chunks.first().map(|c| c.at_ns)
    }

    /// First chunk carrying answer content.
    pub fn first_content_ns(&self) -> Option<u64> {
        self.chunks.iter().find(|c| c.content).map(|c| c.at_ns)
    }

    /// The server's count and the chunk count disagree.
    pub fn token_count_mismatch(&self) -> bool {
        matches!(self.output_tokens_server, Some(s) if s != self.output_tokens_chunks)
    }

    /// Adds an arrival of `tokens` tokens: stored while under the cap, counted past it.
    pub fn push_chunk(&mut self, chunk: Chunk) {
        self.output_tokens_chunks += u64::from(chunk.tokens);
        let cap = self.output_tokens_requested.saturating_add(CHUNK_SLACK) as usize;
        if self.chunks.len() < cap {
            self.chunks.push(chunk);
        } else {
            self.chunks_dropped += 1;
        }
    }

    /// Makes room for the chunks an honest stream sends (`max_tokens`, up to 64k), so the record
    /// does not grow by copies while tokens arrive.
    pub fn reserve_chunks(&mut self) {
        let want = self.output_tokens_requested.min(1 << 16) as usize;
        self.chunks.reserve(want.saturating_sub(self.chunks.len()));
    }

    /// Marks the request failed with `kind` (the first failure wins) and ends it at `now_ns`.
    pub fn fail(&mut self, kind: ErrorKind, detail: impl Into<String>, now_ns: u64) {
        if self.error.is_none() {
            self.error = Some(kind);
            self.error_detail = Some(detail.into());
        }
        self.end_ns = now_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_past_max_tokens_plus_slack_are_counted_not_stored() {
        let mut r = RequestRecord::new(0, false, 0, 1, 8);
        for i in 0..1000 {
            r.push_chunk(Chunk { at_ns: i, tokens: 1, content: true });
        }
        assert_eq!(r.chunks.len(), 8 + CHUNK_SLACK as usize);
        assert_eq!(r.chunks_dropped, 1000 - 72);
        assert_eq!(r.output_tokens_chunks, 1000, "every token is counted");
    }
}
