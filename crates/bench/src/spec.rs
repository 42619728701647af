//! The resolved description of a benchmark: load shape, stop rule, workload lengths, SLOs, and the
//! parsers that turn command-line strings into them. Every parse error names the input and the fix.

use std::time::Duration;

use serde::Serialize;

use crate::api::Api;

/// A usage or input error; the CLI maps it to exit code 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InputError(pub String);

fn bad(msg: impl Into<String>) -> InputError {
    InputError(msg.into())
}

/// Parses `500ms`, `2s`, `1.5m`, `1h`, or a bare number of seconds.
pub fn parse_duration(flag: &str, s: &str) -> Result<Duration, InputError> {
    let t = s.trim();
    let (num, mul) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| bad(format!("{flag} {s:?} is not a duration: write it like 500ms, 30s, 2m or 1h")))?;
    if !v.is_finite() || v < 0.0 {
        return Err(bad(format!("{flag} {s:?} is not a duration: it must be a finite value >= 0")));
    }
    Ok(Duration::from_secs_f64(v * mul))
}

/// How a request's length (input or output tokens) is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LengthDist {
    Fixed { len: u32 },
    Uniform { lo: u32, hi: u32 },
    Normal { mean: f64, std: f64 },
}

impl LengthDist {
    /// Parses `128`, `fixed:128`, `uniform:64..256`, `normal:128,32` (mean, standard deviation).
    pub fn parse(flag: &str, s: &str) -> Result<Self, InputError> {
        let hint = "write N, uniform:LO..HI or normal:MEAN,STD (token counts >= 1)";
        let err = || bad(format!("{flag} {s:?} is not a length: {hint}"));
        let t = s.trim();
        let d = if let Some(r) = t.strip_prefix("uniform:") {
            let (lo, hi) = r.split_once("..").ok_or_else(err)?;
            let lo: u32 = lo.trim().parse().map_err(|_| err())?;
            let hi: u32 = hi.trim().parse().map_err(|_| err())?;
            if lo == 0 || hi < lo {
                return Err(bad(format!("{flag} {s:?}: need 1 <= LO <= HI")));
            }
            LengthDist::Uniform { lo, hi }
        } else if let Some(r) = t.strip_prefix("normal:") {
            let (m, sd) = r.split_once(',').ok_or_else(err)?;
            let mean: f64 = m.trim().parse().map_err(|_| err())?;
            let std: f64 = sd.trim().parse().map_err(|_| err())?;
            if !(mean >= 1.0 && std >= 0.0 && mean.is_finite() && std.is_finite()) {
                return Err(bad(format!("{flag} {s:?}: need MEAN >= 1 and STD >= 0")));
            }
            LengthDist::Normal { mean, std }
        } else {
            let n = t.strip_prefix("fixed:").unwrap_or(t);
            let len: u32 = n.trim().parse().map_err(|_| err())?;
            if len == 0 {
                return Err(bad(format!("{flag} 0: a request needs at least 1 token")));
            }
            LengthDist::Fixed { len }
        };
        Ok(d)
    }

    /// The mean length.
    pub fn mean(&self) -> f64 {
        match *self {
            LengthDist::Fixed { len } => len as f64,
            LengthDist::Uniform { lo, hi } => (lo as f64 + hi as f64) / 2.0,
            LengthDist::Normal { mean, .. } => mean,
        }
    }
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
    Gamma { shape: f64 },
}

impl Arrival {
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
    Closed { concurrency: u32 },
    /// Open loop: arrivals at `rate` per second, optionally capped in flight.
    Open { rate: f64, arrival: Arrival, max_concurrency: Option<u32> },
}

impl Load {
    pub fn label(&self) -> String {
        match self {
            Load::Closed { concurrency } => format!("c={concurrency}"),
            Load::Open { rate, max_concurrency: Some(m), .. } => format!("rate={rate}/s cap={m}"),
            Load::Open { rate, .. } => format!("rate={rate}/s"),
        }
    }
}

/// Which latency metric an SLO bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SloMetric {
    Ttft,
    Tpot,
    Itl,
    E2e,
}

impl SloMetric {
    pub fn name(self) -> &'static str {
        match self {
            SloMetric::Ttft => "ttft",
            SloMetric::Tpot => "tpot",
            SloMetric::Itl => "itl",
            SloMetric::E2e => "e2e",
        }
    }
}

/// `metric:pXX<threshold`: the run meets it when that percentile is below the threshold; a request
/// counts toward goodput when its own value is below every threshold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Slo {
    pub metric: SloMetric,
    pub percentile: f64,
    pub threshold_ms: f64,
}

/// Parses `ttft:p99<2s,tpot:p90<50ms,e2e:p99<30s`.
pub fn parse_slos(s: &str) -> Result<Vec<Slo>, InputError> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let hint = "write METRIC:pNN<TIME, e.g. ttft:p99<2s,tpot:p90<50ms (metrics: ttft, tpot, itl, e2e)";
        let (metric, rest) = part.split_once(':').ok_or_else(|| bad(format!("--slo {part:?}: {hint}")))?;
        let metric = match metric.trim() {
            "ttft" => SloMetric::Ttft,
            "tpot" => SloMetric::Tpot,
            "itl" => SloMetric::Itl,
            "e2e" => SloMetric::E2e,
            m => return Err(bad(format!("--slo {part:?}: unknown SLO metric {m:?}; known: ttft, tpot, itl, e2e"))),
        };
        let (p, t) = rest.split_once('<').ok_or_else(|| bad(format!("--slo {part:?}: {hint}")))?;
        let p = p.trim();
        let percentile: f64 = p
            .strip_prefix('p')
            .and_then(|x| x.parse().ok())
            .filter(|x: &f64| *x > 0.0 && *x <= 100.0)
            .ok_or_else(|| bad(format!("--slo {part:?}: {p:?} is not a percentile like p50, p99 or p99.9")))?;
        let threshold = parse_duration("--slo", t)?;
        out.push(Slo { metric, percentile, threshold_ms: threshold.as_secs_f64() * 1e3 });
    }
    if out.is_empty() {
        return Err(bad("--slo is empty: write METRIC:pNN<TIME, e.g. ttft:p99<2s"));
    }
    Ok(out)
}

/// Where prompts come from.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptSource {
    /// Random words (or random tokens with a tokenizer), `prefix_len` shared tokens in `prefix_groups` groups.
    Random { input: LengthDist, prefix_len: u32, prefix_groups: u32 },
    /// Prompts from a JSONL or ShareGPT file.
    Dataset { path: std::path::PathBuf },
}

/// When a run stops.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stop {
    /// Measured requests (warmup excluded).
    pub requests: Option<u64>,
    /// Wall time of the measured part.
    #[serde(with = "secs")]
    pub duration: Option<Duration>,
}

mod secs {
    use serde::Serializer;
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_f64(d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }
}

/// Everything a benchmark needs, resolved and checked.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub base_url: String,
    pub api: Api,
    pub model: Option<String>,
    /// The bearer token's value (read from the environment by the CLI; never serialized).
    pub api_key: Option<String>,
    pub stream: bool,
    pub loads: Vec<Load>,
    pub stop: Stop,
    pub warmup: u64,
    pub ramp_up: Duration,
    pub prompts: PromptSource,
    pub output: LengthDist,
    pub seed: u64,
    pub ignore_eos: bool,
    pub eos_token_id: Option<u32>,
    pub timeout: Duration,
    pub slos: Vec<Slo>,
    pub tokenizer_path: Option<std::path::PathBuf>,
    /// `None`: try `<base>/metrics`; `Some(None)`: off; `Some(Some(url))`: that URL.
    pub metrics_url: Option<Option<String>>,
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
        if self.timeout.is_zero() {
            return Err(bad("--timeout 0 fails every request: give a positive duration such as 60s"));
        }
        if let PromptSource::Random { prefix_len, prefix_groups, .. } = self.prompts {
            if prefix_len > 0 && prefix_groups == 0 {
                return Err(bad("--prefix-groups 0 with --prefix-len > 0: give 1 or more groups"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("--d", "500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("--d", "2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("--d", "1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("--d", "soon").is_err());
        assert!(parse_duration("--d", "-1s").is_err());
    }

    #[test]
    fn length_distributions_parse() {
        assert_eq!(LengthDist::parse("--input-len", "128"), Ok(LengthDist::Fixed { len: 128 }));
        assert_eq!(LengthDist::parse("--input-len", "uniform:64..256"), Ok(LengthDist::Uniform { lo: 64, hi: 256 }));
        assert_eq!(LengthDist::parse("--input-len", "normal:100,10"), Ok(LengthDist::Normal { mean: 100.0, std: 10.0 }));
        assert!(LengthDist::parse("--input-len", "uniform:9..3").is_err());
        assert!(LengthDist::parse("--input-len", "0").is_err());
    }

    #[test]
    fn slo_parses_and_unknown_metric_is_named() {
        let s = parse_slos("ttft:p99<2s,tpot:p90<50ms,e2e:p99.9<30s").expect("parse");
        assert_eq!(s.len(), 3);
        assert_eq!(s[0], Slo { metric: SloMetric::Ttft, percentile: 99.0, threshold_ms: 2000.0 });
        assert!((s[1].threshold_ms - 50.0).abs() < 1e-9);
        assert_eq!(s[2].percentile, 99.9);
        let e = parse_slos("latency:p99<1s").expect_err("unknown");
        assert!(e.0.contains("unknown SLO metric \"latency\""), "{e}");
    }

    #[test]
    fn arrival_parses() {
        assert_eq!(Arrival::parse("gamma:0.5"), Ok(Arrival::Gamma { shape: 0.5 }));
        assert!(Arrival::parse("gamma:0").is_err());
        assert!(Arrival::parse("bursty").is_err());
    }
}
