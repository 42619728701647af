//! servetune's simulated inference server: an sglang/vLLM-compatible HTTP surface over a
//! continuous-batching engine that runs in real time, timed by a [`cost::StepCost`].
//!
//! - [`cost`]: the step-cost seam, the parametric profile, its file format and the presets;
//! - [`engine`]: admission, paged KV, chunked prefill, decode, preemption (pure, virtual time);
//! - [`driver`]: the engine thread that runs steps on the wall clock and routes tokens;
//! - [`server`]: the HTTP endpoints (OpenAI, sglang native, health, metrics) and fault injection;
//! - [`metrics`]: Prometheus text in sglang's or vLLM's naming.

pub mod cost;
pub mod driver;
pub mod engine;
pub mod from_plan;
pub mod metrics;
pub mod server;
pub mod vtime;

use std::sync::Arc;
use std::time::Duration;

pub use cost::{ParametricCost, Profile, StepBatch, StepCost};
pub use server::{start, SimServer};

/// Errors of the simulator: bad input (exit 2) or a runtime failure (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{0}")]
    Input(String),
    #[error("{0}")]
    Runtime(String),
}

/// Which metric names `/metrics` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetricsStyle {
    #[default]
    Sglang,
    Vllm,
}

/// Faults to inject, for testing clients and campaigns. Rates are fractions of requests, chosen
/// deterministically from the arrival number and the seed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// Requests that fail mid-stream with an error event after their first token.
    pub fail_rate: f64,
    /// Answer this HTTP status (with an error body) to `error_rate` of requests.
    pub error_status: Option<u16>,
    pub error_rate: f64,
    /// Every N-th engine step stalls for `stall_for` (all streams pause).
    pub stall_every: Option<u64>,
    pub stall_for: Duration,
    /// The server stops after this long: connections drop, the listener closes.
    pub crash_after: Option<Duration>,
    /// `/health` and generation answer 503 until this long after start.
    pub slow_start: Option<Duration>,
}

impl Faults {
    pub fn validate(&self) -> Result<(), SimError> {
        for (n, r) in [("--fail-rate", self.fail_rate), ("--error-rate", self.error_rate)] {
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
        Ok(())
    }
}

/// Everything a simulated server needs.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub profile: Profile,
    /// Step cost; `None` uses the profile's parametric cost.
    pub cost: Option<Arc<dyn StepCost>>,
    pub seed: u64,
    pub metrics_style: MetricsStyle,
    pub faults: Faults,
}

impl SimConfig {
    pub fn new(profile: Profile) -> Self {
        Self { profile, cost: None, seed: 0, metrics_style: MetricsStyle::Sglang, faults: Faults::default() }
    }
}
