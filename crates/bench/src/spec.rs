//! The resolved description of a benchmark: load shape, stop rule, workload lengths, SLOs, and the
//! parsers that turn command-line strings into them. Every parse error names the input and the fix.

use std::time::Duration;

use serde::Serialize;

use crate::api::Api;
pub use servetune_stats::{parse_duration, parse_slos, InputError, LengthDist, Slo, SloMetric};

fn bad(msg: impl Into<String>) -> InputError {
    InputError(msg.into())
}

/// Inter-arrival distribution of an open loop.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Arrival {
    /// Exponential gaps (a Poisson process).
    Poisson,
    /// Equal gaps.
    Constant,
    /// Gamma-distributed gaps with this shape (shape 1 is Poisson; < 1 is burstier).
    Gamma {
        /// The gamma shape, > 0.
        shape: f64,
    },
}

impl Arrival {
    /// Parses `--arrival`: `poisson`, `constant` or `gamma:SHAPE`.
    pub fn parse(s: &str) -> Result<Self, InputError> {
        match s.trim() {
            "poisson" => Ok(Arrival::Poisson),
            "constant" => Ok(Arrival::Constant),
            t => {
                if let Some(k) = t.strip_prefix("gamma:") {
                    let shape: f64 = k.parse().map_err(|_| bad(format!("--arrival {s:?}: gamma needs a shape, e.g. gamma:0.5")))?;
                    if !(shape > 0.0 && shape.is_finite()) {
                        return Err(bad(format!("--arrival {s:?}: the gamma shape must be > 0")));
                    }
                    Ok(Arrival::Gamma { shape })
                } else {
                    Err(bad(format!("--arrival {s:?} is unknown: use poisson, constant or gamma:SHAPE")))
                }
            }
        }
    }
}

/// One load point of a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Load {
    /// Closed loop: this many requests always in flight.
    Closed {
        /// Requests in flight.
        concurrency: u32,
    },
    /// Open loop: arrivals at `rate` per second, optionally capped in flight.
    Open {
        /// Arrivals per second.
        rate: f64,
        /// Inter-arrival distribution.
        arrival: Arrival,
        /// At most this many in flight.
        max_concurrency: Option<u32>,
    },
}

impl Load {
    /// The load in words: `c=8`, `rate=2/s`, `rate=2/s cap=4`.
    pub fn label(&self) -> String {
        match self {
            Load::Closed { concurrency } => format!("c={concurrency}"),
            Load::Open { rate, max_concurrency: Some(m), .. } => format!("rate={rate}/s cap={m}"),
            Load::Open { rate, .. } => format!("rate={rate}/s"),
        }
    }
}

/// Where prompts come from.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptSource {
    /// Random words (or random tokens with a tokenizer), `prefix_len` shared tokens in `prefix_groups` groups.
    Random {
        /// Prompt lengths.
        input: LengthDist,
        /// Shared prefix tokens.
        prefix_len: u32,
        /// Distinct shared prefixes.
        prefix_groups: u32,
    },
    /// Prompts from a JSONL or ShareGPT file.
    Dataset {
        /// The file.
        path: std::path::PathBuf,
    },
}

/// When a run stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stop {
    /// Measured requests (warmup excluded).
    pub requests: Option<u64>,
    /// Wall time of the measured part.
    pub duration: Option<Duration>,
}

/// The time limits of every network wait. Each comes from a flag, and each is bounded by
/// [`servetune_stats::MAX_DURATION`], so adding one to an `Instant` cannot overflow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// TCP connect (`--connect-timeout`).
    pub connect: Duration,
    /// From sending a request to its response head, and from the head to the first byte of an
    /// event stream (`--first-byte-timeout`): a queued request may wait this long.
    pub first_byte: Duration,
    /// The longest gap between two pieces of a response body once it has started (`--idle-timeout`).
    pub idle: Duration,
    /// A whole benchmark request, send to last byte (`--timeout`).
    pub request: Duration,
    /// A whole start-up request: `/v1/models`, calibration, the `/metrics` check (`--preflight-timeout`).
    pub preflight: Duration,
    /// One metrics scrape (`--scrape-timeout`).
    pub scrape: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            first_byte: Duration::from_secs(300),
            idle: Duration::from_secs(120),
            request: Duration::from_secs(600),
            preflight: Duration::from_secs(30),
            scrape: Duration::from_secs(5),
        }
    }
}

/// The shortest scrape interval accepted: a Prometheus exposition of a busy server takes tens of
/// milliseconds to render, so faster scraping would measure the scraper.
pub const MIN_SCRAPE_INTERVAL: Duration = Duration::from_millis(100);

/// The most sends one open-loop point may schedule: the schedule is computed in advance (8 bytes a
/// send), so `--rate x --duration` beyond this is refused rather than allocated.
pub const MAX_SCHEDULED: u64 = 20_000_000;

/// Everything a benchmark needs, resolved and checked.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// The server's base URL as given (userinfo is stripped before use).
    pub base_url: String,
    /// The API spoken.
    pub api: Api,
    /// The model to ask for; found from `/v1/models` when `None`.
    pub model: Option<String>,
    /// The bearer token's value (read from the environment by the CLI; never serialized). Sent only
    /// to the origin of `base_url`, and to the metrics URL when it shares that origin.
    pub api_key: Option<String>,
    /// The bearer token for a metrics URL on another origin (`--metrics-api-key-env`).
    pub metrics_api_key: Option<String>,
    /// Ask for streamed responses.
    pub stream: bool,
    /// The load points of the sweep.
    pub loads: Vec<Load>,
    /// When each point stops.
    pub stop: Stop,
    /// Requests sent first at each point and excluded from every statistic.
    pub warmup: u64,
    /// Time over which the load ramps up.
    pub ramp_up: Duration,
    /// Where prompts come from.
    pub prompts: PromptSource,
    /// Output lengths (`max_tokens`).
    pub output: LengthDist,
    /// Seed of the workload and the schedule.
    pub seed: u64,
    /// Force exactly `max_tokens` output tokens.
    pub ignore_eos: bool,
    /// EOS id for the logit bias sent with `ignore_eos`.
    pub eos_token_id: Option<u32>,
    /// Time limits of every network wait.
    pub limits: Limits,
    /// Objectives for goodput.
    pub slos: Vec<Slo>,
    /// A local `tokenizer.json`.
    pub tokenizer_path: Option<std::path::PathBuf>,
    /// `None`: try `<base>/metrics`; `Some(None)`: off; `Some(Some(url))`: that URL.
    pub metrics_url: Option<Option<String>>,
    /// Time between scrapes, at least [`MIN_SCRAPE_INTERVAL`].
    pub scrape_interval: Duration,
    /// How long in-flight requests may finish after a stop (Ctrl-C or the duration).
    pub drain_timeout: Duration,
    /// Calibrate the words-to-tokens ratio from the server's reported prompt tokens.
    pub calibrate: bool,
}

impl BenchConfig {
    /// Checks flag combinations that parse on their own but contradict each other.
    pub fn validate(&self) -> Result<(), InputError> {
        if self.loads.is_empty() {
            return Err(bad("no load given: use --concurrency N (closed loop) or --rate R (open loop)"));
        }
        for l in &self.loads {
            match *l {
                Load::Closed { concurrency: 0 } => {
                    return Err(bad("--concurrency 0 sends nothing: give 1 or more"));
                }
                Load::Open { rate, max_concurrency, .. } => {
                    if !(rate > 0.0 && rate.is_finite()) {
                        return Err(bad(format!(
                            "--rate {rate} is not a rate: give requests per second > 0, or use --concurrency for a closed loop"
                        )));
                    }
                    if max_concurrency == Some(0) {
                        return Err(bad("--max-concurrency 0 lets nothing run: give 1 or more, or leave it out"));
                    }
                }
                _ => {}
            }
        }
        if self.stop.requests.is_none() && self.stop.duration.is_none() {
            return Err(bad("no stop rule: give --requests N and/or --duration D"));
        }
        if self.stop.requests == Some(0) {
            return Err(bad("--requests 0 measures nothing: give 1 or more"));
        }
        if self.stop.duration == Some(Duration::ZERO) {
            return Err(bad("--duration 0 measures nothing: give a positive duration such as 30s"));
        }
        self.validate_limits()?;
        self.validate_schedule_size()?;
        if let PromptSource::Random { input, prefix_len, prefix_groups } = self.prompts {
            if prefix_len > 0 && prefix_groups == 0 {
                return Err(bad("--prefix-groups 0 with --prefix-len > 0: give 1 or more groups"));
            }
            let longest = prefix_len as u64 + input.max() as u64;
            if longest > servetune_stats::MAX_TOKENS as u64 {
                return Err(bad(format!(
                    "--prefix-len {prefix_len} with --input-len {} makes prompts of up to {longest} tokens, more than {} (the longest context window of any model): give a shorter prefix",
                    input.label(),
                    servetune_stats::MAX_TOKENS
                )));
            }
        }
        if self.warmup > MAX_SCHEDULED {
            return Err(bad(format!("--warmup {}: at most {MAX_SCHEDULED} warm-up requests; give fewer", self.warmup)));
        }
        Ok(())
    }

    fn validate_limits(&self) -> Result<(), InputError> {
        let l = &self.limits;
        for (flag, d) in [
            ("--timeout", l.request),
            ("--connect-timeout", l.connect),
            ("--first-byte-timeout", l.first_byte),
            ("--idle-timeout", l.idle),
            ("--preflight-timeout", l.preflight),
            ("--scrape-timeout", l.scrape),
        ] {
            if d.is_zero() {
                return Err(bad(format!("{flag} 0 fails every request: give a positive duration such as 10s")));
            }
        }
        if self.scrape_interval < MIN_SCRAPE_INTERVAL {
            return Err(bad(format!(
                "--scrape-interval {:?} is shorter than {} ms: scraping that often measures the scraper; give 100ms or more",
                self.scrape_interval,
                MIN_SCRAPE_INTERVAL.as_millis()
            )));
        }
        Ok(())
    }

    /// Open loops compute their schedule in advance: refuse one too long to hold.
    fn validate_schedule_size(&self) -> Result<(), InputError> {
        for l in &self.loads {
            if let (Load::Open { rate, .. }, Some(d)) = (*l, self.stop.duration) {
                let sends = rate * d.as_secs_f64() + self.warmup as f64;
                if sends > MAX_SCHEDULED as f64 {
                    return Err(bad(format!(
                        "--rate {rate} for --duration {:?} schedules about {sends:.0} requests, more than the {MAX_SCHEDULED} one load point may hold: shorten --duration or lower --rate",
                        d
                    )));
                }
            }
        }
        if let (Some(n), None) = (self.stop.requests, self.stop.duration) {
            // Without --duration the schedule's length is the sends over the rate: one that would
            // run past a week (the longest duration a point may have) is refused, not started.
            let sends = n.saturating_add(self.warmup) as f64;
            let week = servetune_stats::MAX_DURATION.as_secs_f64();
            if let Some(rate) = self.loads.iter().find_map(|l| match *l {
                Load::Open { rate, .. } if sends / rate > week => Some(rate),
                _ => None,
            }) {
                return Err(bad(format!(
                    "--rate {rate} for {sends:.0} requests schedules sends over about {:.0} days, longer than the week one point may run: give a higher --rate, fewer --requests, or a --duration",
                    sends / rate / 86_400.0
                )));
            }
        }
        if let Some(n) = self.stop.requests {
            let planned = n.saturating_add(self.warmup);
            if self.loads.iter().any(|l| matches!(l, Load::Open { .. })) && planned > MAX_SCHEDULED {
                return Err(bad(format!(
                    "--requests {n} schedules more than the {MAX_SCHEDULED} sends one open-loop point may hold: give fewer"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_distributions_parse() {
        assert_eq!(LengthDist::parse("--input-len", "128"), Ok(LengthDist::Fixed { len: 128 }));
        assert_eq!(LengthDist::parse("--input-len", "uniform:64..256"), Ok(LengthDist::Uniform { lo: 64, hi: 256 }));
        assert_eq!(LengthDist::parse("--input-len", "normal:100,10"), Ok(LengthDist::Normal { mean: 100.0, std: 10.0 }));
        assert!(LengthDist::parse("--input-len", "uniform:9..3").is_err());
        assert!(LengthDist::parse("--input-len", "0").is_err());
    }

    fn config() -> BenchConfig {
        BenchConfig {
            base_url: "http://127.0.0.1:1".into(),
            api: Api::OpenaiCompletions,
            model: None,
            api_key: None,
            metrics_api_key: None,
            stream: true,
            loads: vec![Load::Closed { concurrency: 1 }],
            stop: Stop { requests: Some(1), duration: None },
            warmup: 0,
            ramp_up: Duration::ZERO,
            prompts: PromptSource::Random { input: LengthDist::Fixed { len: 8 }, prefix_len: 0, prefix_groups: 1 },
            output: LengthDist::Fixed { len: 8 },
            seed: 0,
            ignore_eos: false,
            eos_token_id: None,
            limits: Limits::default(),
            slos: Vec::new(),
            tokenizer_path: None,
            metrics_url: None,
            scrape_interval: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(1),
            calibrate: false,
        }
    }

    #[test]
    fn a_scrape_interval_under_100ms_is_refused_not_clamped() {
        let c = BenchConfig { scrape_interval: Duration::from_millis(10), ..config() };
        assert!(c.validate().expect_err("refused").0.contains("--scrape-interval"));
        assert!(config().validate().is_ok());
    }

    #[test]
    fn a_zero_time_limit_is_refused_with_its_flag() {
        let c = BenchConfig { limits: Limits { idle: Duration::ZERO, ..Limits::default() }, ..config() };
        assert!(c.validate().expect_err("refused").0.contains("--idle-timeout"));
    }

    #[test]
    fn an_open_loop_schedule_too_large_to_hold_is_refused() {
        let open = Load::Open { rate: 1e6, arrival: Arrival::Poisson, max_concurrency: None };
        let c = BenchConfig { loads: vec![open], stop: Stop { requests: None, duration: Some(Duration::from_secs(3600)) }, ..config() };
        assert!(c.validate().expect_err("refused").0.contains("schedules about"));
        let c = BenchConfig { loads: vec![open], stop: Stop { requests: Some(u64::MAX), duration: None }, ..config() };
        assert!(c.validate().is_err(), "u64::MAX requests plus warmup does not overflow, it is refused");
    }

    #[test]
    fn an_open_loop_that_would_send_for_more_than_a_week_is_refused() {
        let slow = |rate: f64| Load::Open { rate, arrival: Arrival::Constant, max_concurrency: None };
        for rate in [1e-300, 1e-9] {
            let c = BenchConfig { loads: vec![slow(rate)], stop: Stop { requests: Some(3), duration: None }, ..config() };
            let e = c.validate().expect_err("refused").0;
            assert!(e.contains("longer than the week one point may run") && e.contains("--duration"), "{e}");
        }
        // 3 requests at one a minute is 3 minutes: fine; so is a slow rate bounded by --duration.
        let c = BenchConfig { loads: vec![slow(1.0 / 60.0)], stop: Stop { requests: Some(3), duration: None }, ..config() };
        assert!(c.validate().is_ok());
        let c =
            BenchConfig { loads: vec![slow(1e-9)], stop: Stop { requests: Some(3), duration: Some(Duration::from_secs(60)) }, ..config() };
        assert!(c.validate().is_ok());
    }

    #[test]
    fn prompts_past_any_context_window_and_endless_warmups_are_refused_with_their_flags() {
        let huge_prefix =
            PromptSource::Random { input: LengthDist::Fixed { len: 8 }, prefix_len: servetune_stats::MAX_TOKENS, prefix_groups: 1 };
        let c = BenchConfig { prompts: huge_prefix, ..config() };
        let e = c.validate().expect_err("refused").0;
        assert!(e.contains("--prefix-len") && e.contains("--input-len 8"), "{e}");
        let c = BenchConfig { warmup: u64::MAX, ..config() };
        assert!(c.validate().expect_err("refused").0.contains("--warmup"));
        let fits = PromptSource::Random { input: LengthDist::Fixed { len: 8 }, prefix_len: 1000, prefix_groups: 1 };
        assert!(BenchConfig { prompts: fits, warmup: 10, ..config() }.validate().is_ok());
    }

    #[test]
    fn arrival_parses() {
        assert_eq!(Arrival::parse("gamma:0.5"), Ok(Arrival::Gamma { shape: 0.5 }));
        assert!(Arrival::parse("gamma:0").is_err());
        assert!(Arrival::parse("bursty").is_err());
    }
}
