//! servetune's simulated inference server: an sglang/vLLM-compatible HTTP surface over a
//! continuous-batching engine that runs in real time, timed by a [`cost::StepCost`], or, in
//! [`Mode::Exact`], a server with exact, configured timing per request (for testing and
//! benchmarking clients). It is servetune's only HTTP server.
//!
//! - [`cost`]: the step-cost seam, the parametric profile, its file format and the presets;
//! - [`engine`]: admission, paged KV, chunked prefill, decode, preemption (pure, virtual time);
//! - [`driver`]: the engine thread that runs steps on the wall clock and routes tokens;
//! - [`wire`]: the three APIs' request parsing and every response and chunk shape, written once;
//! - [`stream`]: the one streaming body type, with the stream faults, and the exact-timing source;
//! - [`conn`]: accepting and serving connections: time limits, the connection cap, fd back-off;
//! - [`server`]: the HTTP endpoints (OpenAI, sglang native, health, metrics);
//! - [`compat`]: the informational endpoints in the shapes sglang's and vLLM's clients read;
//! - [`metrics`]: Prometheus text in sglang's or vLLM's naming;
//! - [`vtime`]: the engine run in virtual time, without sleeping.

#![warn(missing_docs)]

pub mod compat;
pub mod conn;
pub mod cost;
pub mod driver;
pub mod engine;
pub mod from_plan;
pub mod metrics;
pub mod profile;
pub mod rendezvous;
pub mod server;
pub mod stream;
pub mod vtime;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

pub use conn::{Limits, Notice};
pub use cost::{ParametricCost, Profile, StepBatch, StepCost};
pub use server::{start, SimServer};

/// Errors of the simulator: bad input (exit 2) or a runtime failure (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A flag, profile or address the user gave is wrong; the message says how to fix it.
    #[error("{0}")]
    Input(String),
    /// Something failed while running (a thread or the listener).
    #[error("{0}")]
    Runtime(String),
}

/// Which metric names `/metrics` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetricsStyle {
    /// sglang's `sglang:*` names.
    #[default]
    Sglang,
    /// vLLM's `vllm:*` names.
    Vllm,
}

/// How requests are timed.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Mode {
    /// The continuous-batching engine: step times from the cost, queueing, KV capacity.
    #[default]
    Engine,
    /// Every request on its own exact schedule from its arrival, no batching: the true TTFT and
    /// ITL are known, for testing and benchmarking load generators.
    Exact(ExactTiming),
}

/// The schedule of [`Mode::Exact`]: chunk `k` (from 0) of a request goes out at
/// `arrival + ttft + k * itl`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExactTiming {
    /// Time to the first chunk.
    pub ttft: Duration,
    /// Time between chunks.
    pub itl: Duration,
    /// Output tokens per chunk (at least 1).
    pub tokens_per_chunk: u32,
    /// Chat streams: the first this many output tokens are `reasoning_content`.
    pub reasoning_tokens: u32,
    /// Send a role-only first chunk on chat streams (as vLLM and sglang do).
    pub role_chunk: bool,
}

impl Default for ExactTiming {
    fn default() -> Self {
        Self { ttft: Duration::ZERO, itl: Duration::ZERO, tokens_per_chunk: 1, reasoning_tokens: 0, role_chunk: true }
    }
}

/// The largest tokens per chunk [`ExactTiming`] accepts.
pub const MAX_TOKENS_PER_CHUNK: u32 = 4096;

/// Faults to inject, for testing clients and campaigns. Rates are fractions of requests (0 to 1),
/// chosen deterministically from the arrival number and the seed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// Requests whose stream ends with an error event after their first chunk (a non-streamed one
    /// answers HTTP 500).
    pub fail_rate: f64,
    /// Answer this HTTP status (with an OpenAI-shaped error body) to `error_rate` of requests.
    pub error_status: Option<u16>,
    /// Fraction of requests answered with `error_status`.
    pub error_rate: f64,
    /// Requests whose stream sends an event that is not JSON after the first chunk, then ends.
    pub malformed_rate: f64,
    /// Requests whose connection breaks mid-stream, after the first chunk.
    pub truncate_rate: f64,
    /// Requests answered 200 with an HTML page instead of an event stream.
    pub not_sse_rate: f64,
    /// Requests whose stream pauses for `stall_for` after the first chunk.
    pub stall_rate: f64,
    /// Every N-th engine step stalls for `stall_for` (all streams pause; engine mode only).
    pub stall_every: Option<u64>,
    /// How long a stall lasts.
    pub stall_for: Duration,
    /// Streams stop after this many tokens with finish reason "stop", whatever `ignore_eos` says
    /// (a server that does not honour it).
    pub early_stop_at: Option<u32>,
    /// The server stops after this long: connections drop, the listener closes.
    pub crash_after: Option<Duration>,
    /// `/health` and generation answer 503 until this long after start.
    pub slow_start: Option<Duration>,
}

impl Faults {
    /// Checks rates, the status and the step interval; the error names the flag.
    pub fn validate(&self) -> Result<(), SimError> {
        let rates = [
            ("--fail-rate", self.fail_rate),
            ("--error-rate", self.error_rate),
            ("--malformed-rate", self.malformed_rate),
            ("--truncate-rate", self.truncate_rate),
            ("--not-sse-rate", self.not_sse_rate),
            ("--stall-rate", self.stall_rate),
        ];
        for (n, r) in rates {
            if !(0.0..=1.0).contains(&r) {
                return Err(SimError::Input(format!("{n} {r} is not a fraction: give a value from 0 to 1")));
            }
        }
        if let Some(s) = self.error_status {
            if !(400..=599).contains(&s) {
                return Err(SimError::Input(format!("--error-status {s} is not an error status: give 400..599, e.g. 503")));
            }
        }
        if self.error_rate > 0.0 && self.error_status.is_none() {
            return Err(SimError::Input("--error-rate needs --error-status (e.g. --error-status 503)".into()));
        }
        if self.stall_every == Some(0) {
            return Err(SimError::Input("--stall-every 0: give the step interval, e.g. --stall-every 100".into()));
        }
        if self.early_stop_at == Some(0) {
            return Err(SimError::Input("--early-stop-at 0: give the token count after which streams stop, at least 1".into()));
        }
        Ok(())
    }
}

/// Everything a simulated server needs.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Engine limits, step cost terms and the served model name.
    pub profile: Profile,
    /// Step cost; `None` uses the profile's parametric cost.
    pub cost: Option<Arc<dyn StepCost>>,
    /// Seed of EOS positions and fault choices.
    pub seed: u64,
    /// Metric names of `/metrics`.
    pub metrics_style: MetricsStyle,
    /// Faults to inject.
    pub faults: Faults,
    /// Engine-timed or exact-timed requests.
    pub mode: Mode,
    /// Connection time limits and cap.
    pub limits: Limits,
    /// The only directory `/stop_profile` writes traces under (a client names at most a
    /// subdirectory of it, never a path).
    pub profile_dir: std::path::PathBuf,
}

/// The default profile directory: `servetune-profile` in the system temp directory, the
/// directory `servetune bench --profile` names in its `/start_profile` request.
pub fn default_profile_dir() -> std::path::PathBuf {
    std::env::temp_dir().join("servetune-profile")
}

impl SimConfig {
    /// The engine mode of `profile`, no faults, default limits, seed 0.
    pub fn new(profile: Profile) -> Self {
        Self {
            profile,
            cost: None,
            seed: 0,
            metrics_style: MetricsStyle::Sglang,
            faults: Faults::default(),
            mode: Mode::Engine,
            limits: Limits::default(),
            profile_dir: default_profile_dir(),
        }
    }

    /// Checks the profile, faults, mode and limits together.
    pub fn validate(&self) -> Result<(), SimError> {
        self.profile.validate().map_err(|e| SimError::Input(format!("profile {:?}: {e}", self.profile.name)))?;
        self.faults.validate()?;
        self.limits.validate()?;
        if let Mode::Exact(t) = self.mode {
            if !(1..=MAX_TOKENS_PER_CHUNK).contains(&t.tokens_per_chunk) {
                return Err(SimError::Input(format!(
                    "--tokens-per-chunk {} is out of range: give 1..={MAX_TOKENS_PER_CHUNK}",
                    t.tokens_per_chunk
                )));
            }
            if self.faults.stall_every.is_some() {
                return Err(SimError::Input(
                    "--stall-every stalls engine steps, and --exact has no engine: use --stall-rate with --stall-for".into(),
                ));
            }
        }
        Ok(())
    }
}
