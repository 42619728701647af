//! Prepares a benchmark (reachability, model discovery, calibration, metrics endpoint, workload),
//! each start-up request bounded by `--preflight-timeout`, and assembles the report of a sweep.
//! The load points themselves run in [`crate::sweep`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde::Serialize;

use crate::api::{build_body, model_ids, Api, RequestBody};
use crate::client::{normalize_url, strip_userinfo, HttpClient, SimpleError};
use crate::definitions::{self, DefinedMetric, Definitions};
use crate::record::RequestRecord;
use crate::report::RunReport;
use crate::saturation::{self, Saturation};
use crate::scrape;
use crate::spec::{BenchConfig, InputError, Load, PromptSource};
use crate::sweep::PointOutcome;
use crate::tokenizer::Tokenizer;
use crate::workload::{probe_prompt, Calibration, Workload};

/// A benchmark error: bad input (exit 2) or a runtime failure (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The user's input cannot be used (exit 2).
    #[error(transparent)]
    Input(#[from] InputError),
    /// The environment failed (exit 1).
    #[error("{0}")]
    Runtime(String),
}

/// Live counters for a progress display.
#[derive(Debug, Default)]
pub struct Progress {
    /// The current load point in words.
    pub label: Mutex<String>,
    /// Requests this point will send (0 when bounded by time only).
    pub planned: AtomicU64,
    /// Requests finished.
    pub done: AtomicU64,
    /// Requests failed.
    pub failed: AtomicU64,
    /// Requests in flight now.
    pub in_flight: AtomicU64,
    /// Output tokens received.
    pub tokens: AtomicU64,
    /// Nanoseconds since the Unix epoch when the current point started (0 before).
    pub point_started_unix_ns: AtomicU64,
    /// Index of the current point (1-based).
    pub point: AtomicU64,
    /// How many points the sweep has.
    pub points: AtomicU64,
}

impl Progress {
    pub(crate) fn reset(&self, label: String, planned: u64, point: u64, points: u64) {
        if let Ok(mut l) = self.label.lock() {
            *l = label;
        }
        self.planned.store(planned, Ordering::Relaxed);
        for c in [&self.done, &self.failed, &self.in_flight, &self.tokens] {
            c.store(0, Ordering::Relaxed);
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        self.point_started_unix_ns.store(now, Ordering::Relaxed);
        self.point.store(point, Ordering::Relaxed);
        self.points.store(points, Ordering::Relaxed);
    }
}

/// The configuration as recorded in the report (no secrets, no URL userinfo).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ConfigEcho {
    /// The server's base URL.
    pub url: String,
    /// The API spoken.
    pub api: Api,
    /// The model asked for.
    pub model: Option<String>,
    /// Streamed responses.
    pub stream: bool,
    /// Prompt lengths in words.
    pub input: String,
    /// Output lengths (`max_tokens`) in words.
    pub output: String,
    /// Workload and schedule seed.
    pub seed: u64,
    /// Warmup requests per point.
    pub warmup: u64,
    /// Measured requests per point, when every point has the same count.
    pub requests: Option<u64>,
    /// Measured seconds per point.
    pub duration_s: Option<f64>,
    /// Ramp-up, s.
    pub ramp_up_s: f64,
    /// `--ignore-eos`.
    pub ignore_eos: bool,
    /// The EOS id sent in a logit bias.
    pub eos_token_id: Option<u32>,
    /// Whole-request limit, s (`--timeout`).
    pub timeout_s: f64,
    /// Connect limit, s.
    pub connect_timeout_s: f64,
    /// Send-to-response-head limit, s.
    pub first_byte_timeout_s: f64,
    /// Longest silent gap within a response, s.
    pub idle_timeout_s: f64,
    /// The tokenizer file.
    pub tokenizer: Option<String>,
    /// Words-to-tokens calibration.
    pub calibration: Calibration,
    /// The metrics endpoint scraped.
    pub metrics_url: Option<String>,
    /// Name of the environment variable the API key came from, if one was used.
    pub api_key_env: Option<String>,
}

/// The whole result, `--json`'s document.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BenchReport {
    /// Always [`SCHEMA`]: the major version readers gate on.
    pub schema: &'static str,
    /// [`SCHEMA_MINOR`]: fields added within the major version.
    pub schema_minor: u32,
    /// The servetune version that wrote it.
    pub servetune_version: &'static str,
    /// Unix seconds at the start.
    pub started_at: u64,
    /// The configuration.
    pub config: ConfigEcho,
    /// True when a signal cut the benchmark short.
    pub partial: bool,
    /// One report per load point, in run order.
    pub runs: Vec<RunReport>,
    /// The knee of the sweep.
    pub saturation: Option<Saturation>,
    /// The latency metrics under `--definitions`, one list per run.
    pub definitions: Option<DefinitionsReport>,
    /// Preflight observations (model found, calibration, metrics endpoint).
    pub notes: Vec<String>,
}

/// The runs' latencies under another tool's definitions.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DefinitionsReport {
    /// Whose definitions.
    pub tool: Definitions,
    /// One list per run.
    pub runs: Vec<Vec<DefinedMetric>>,
}

/// The report's schema (major version).
pub const SCHEMA: &str = "servetune.bench/1";
/// The report's minor version: 1 added `schema_minor`, typed error kinds (`no_response`,
/// `stalled`, `disconnected`, `too_many_tokens`, `no_tokens`), `http_statuses`, `chunks_dropped`,
/// `failed_scrapes`, a null `style` for unrecognised metrics, and the per-wait timeouts; 2 added
/// each run's `client` self-check (CPU per token, wake-up delay).
pub const SCHEMA_MINOR: u32 = 2;

/// Everything resolved before the first request.
#[derive(Debug)]
pub struct Prepared {
    /// The configuration.
    pub cfg: BenchConfig,
    /// The client (keys, limits).
    pub client: HttpClient,
    /// The model sent in requests.
    pub model: Option<String>,
    /// The local tokenizer.
    pub tokenizer: Option<Arc<Tokenizer>>,
    /// The seeded requests.
    pub workload: Arc<Workload>,
    /// Words-to-tokens calibration.
    pub calibration: Calibration,
    /// The metrics endpoint to scrape (no userinfo).
    pub metrics_url: Option<String>,
    /// The EOS id for `--ignore-eos`.
    pub eos_token_id: Option<u32>,
    /// Preflight observations.
    pub notes: Vec<String>,
    /// Where the API key came from.
    pub api_key_env: Option<String>,
}

/// Checks the server, finds the model, calibrates prompt lengths, finds the metrics endpoint and
/// builds the workload. Every start-up request is bounded by `--preflight-timeout`.
pub async fn prepare(cfg: BenchConfig, api_key_env: Option<String>) -> Result<Prepared, BenchError> {
    cfg.validate()?;
    let explicit_metrics = match &cfg.metrics_url {
        Some(Some(u)) => Some(normalize_url("--metrics-url", u)?),
        _ => None,
    };
    let mut client = HttpClient::new(&cfg.base_url, cfg.api_key.as_deref(), cfg.limits)?;
    if let (Some(u), Some(k)) = (&explicit_metrics, &cfg.metrics_api_key) {
        client = client.with_key_for(u, k)?;
    }
    let tokenizer = match &cfg.tokenizer_path {
        Some(p) => Some(Arc::new(Tokenizer::load(p)?)),
        None => None,
    };
    let mut notes = Vec::new();
    if strip_userinfo(&cfg.base_url) != cfg.base_url {
        notes.push("--url carried user:password@: it is not sent and not stored; give a key with --api-key-env".into());
    }
    // Local input first: a bad file is reported before any network error.
    let dataset = match &cfg.prompts {
        PromptSource::Dataset { path } => {
            let (prompts, skipped) = crate::workload::load_dataset_counted(path)?;
            if skipped > 0 {
                notes.push(format!(
                    "--dataset {}: {skipped} of its {} entries {} no user turn (or {} not an object) and {} skipped; {} prompts were used",
                    path.display(),
                    skipped + prompts.len(),
                    if skipped == 1 { "has" } else { "have" },
                    if skipped == 1 { "is" } else { "are" },
                    if skipped == 1 { "was" } else { "were" },
                    prompts.len()
                ));
            }
            Some(prompts)
        }
        PromptSource::Random { .. } => None,
    };
    let model = discover_model(&client, &cfg, &mut notes).await?;
    let eos_token_id = cfg.eos_token_id.or_else(|| tokenizer.as_ref().and_then(|t| t.eos_token_id()));
    if cfg.ignore_eos && eos_token_id.is_none() && cfg.api != Api::Sglang {
        notes.push("--ignore-eos without --eos-token-id or --tokenizer: only ignore_eos/min_tokens are sent; servers that ignore them may stop early (reported per run)".into());
    }
    let calibration = calibrate_if_asked(&client, &cfg, model.as_deref(), tokenizer.is_some(), &mut notes).await;
    let metrics_url = match explicit_metrics {
        Some(u) => Some(u),
        None if cfg.metrics_url.is_some() => None,
        None => find_metrics(&client, &mut notes).await,
    };
    let (count, wanted) = pool_size(&cfg);
    if wanted > count as u64 {
        notes.push(format!(
            "the workload holds {count} distinct prompts; a point sending more reuses them in order (prefix caches may then hit)"
        ));
    }
    let workload = Workload::build(&cfg.prompts, dataset.as_deref(), &cfg.output, cfg.seed, count, &calibration, tokenizer.as_deref())?;
    Ok(Prepared { cfg, client, model, tokenizer, workload: Arc::new(workload), calibration, metrics_url, eos_token_id, notes, api_key_env })
}

/// Reachability and model discovery in one request: `GET /v1/models`.
async fn discover_model(client: &HttpClient, cfg: &BenchConfig, notes: &mut Vec<String>) -> Result<Option<String>, BenchError> {
    let base = client.base();
    let limit = cfg.limits.preflight;
    let models = client.simple(http::Method::GET, "/v1/models", Bytes::new(), limit).await.map_err(|e| match e {
        SimpleError::Connect(m) => {
            BenchError::Input(InputError(format!("{m}\n  is the server running at --url {base}? Start it, or fix the address and port")))
        }
        SimpleError::Timeout(m) => BenchError::Runtime(format!(
            "{m}\n  the server at --url {base} accepted the connection but did not answer GET /v1/models within --preflight-timeout {:.1}s: is it still loading? Wait for it, or raise --preflight-timeout",
            limit.as_secs_f64()
        )),
        SimpleError::Other(m) => BenchError::Runtime(format!("{m}\n  the server at --url {base} did not answer GET /v1/models")),
    })?;
    if matches!(models.status, 401 | 403) {
        notes.push(format!(
            "GET /v1/models answered HTTP {}: the server wants a valid key; set the variable named by --api-key-env",
            models.status
        ));
    }
    if cfg.model.is_some() || cfg.api == Api::Sglang {
        return Ok(cfg.model.clone());
    }
    let ids = model_ids(&models.body);
    match (models.status, ids.first()) {
        (200, Some(id)) => {
            let id = client.redactor().clean(id);
            match ids.len() {
                1 => notes.push(format!("model {id:?} found at /v1/models")),
                n => notes.push(format!(
                    "/v1/models lists {n} models; the first, {id:?}, is used: give --model to choose another ({})",
                    ids.iter().skip(1).take(4).map(|m| format!("{:?}", client.redactor().clean(m))).collect::<Vec<_>>().join(", ")
                        + if n > 5 { ", ..." } else { "" }
                )),
            }
            Ok(Some(id))
        }
        (s, _) => {
            notes.push(format!(
                "no model found at /v1/models (HTTP {s}); requests are sent without a model field: give --model if the server needs one"
            ));
            Ok(None)
        }
    }
}

async fn calibrate_if_asked(
    client: &HttpClient,
    cfg: &BenchConfig,
    model: Option<&str>,
    has_tokenizer: bool,
    notes: &mut Vec<String>,
) -> Calibration {
    if !matches!(cfg.prompts, PromptSource::Random { .. }) || has_tokenizer {
        return Calibration::default();
    }
    if !cfg.calibrate {
        notes.push("prompt lengths not calibrated (--no-calibrate): one word is taken as one token".into());
        return Calibration::default();
    }
    match calibrate(client, cfg, model).await {
        Ok(c) => {
            notes.push(format!(
                "prompt lengths calibrated from the server's prompt_tokens: {:.3} tokens per word + {:.0} tokens of overhead",
                c.tokens_per_word, c.overhead_tokens
            ));
            c
        }
        Err(why) => {
            notes.push(format!("prompt lengths not calibrated ({}); one word is taken as one token", client.redactor().clean(&why)));
            Calibration::default()
        }
    }
}

async fn find_metrics(client: &HttpClient, notes: &mut Vec<String>) -> Option<String> {
    let url = format!("{}/metrics", client.base());
    let limit = client.limits().preflight;
    match client.simple(http::Method::GET, &url, Bytes::new(), limit).await {
        Ok(r) if r.status == 200 && scrape::parse(&String::from_utf8_lossy(&r.body)).1.is_some() => Some(url),
        _ => {
            notes.push(format!("no sglang/vLLM metrics at {url}; server metrics are not scraped (give --metrics-url)"));
            None
        }
    }
}

/// The most distinct prompts a workload holds (each is kept in memory).
const MAX_POOL: u64 = 200_000;

/// (prompts to build, prompts a point would want).
fn pool_size(cfg: &BenchConfig) -> (usize, u64) {
    let n = match (cfg.stop.requests, cfg.stop.duration) {
        (Some(r), _) => r.saturating_add(cfg.warmup),
        (None, Some(d)) => {
            let max_rate =
                cfg.loads.iter().filter_map(|l| if let Load::Open { rate, .. } = l { Some(*rate) } else { None }).fold(0.0, f64::max);
            if max_rate > 0.0 {
                ((max_rate * d.as_secs_f64()) as u64).saturating_add(cfg.warmup)
            } else {
                4096
            }
        }
        (None, None) => 1,
    };
    (n.clamp(1, MAX_POOL) as usize, n)
}

async fn calibrate(client: &HttpClient, cfg: &BenchConfig, model: Option<&str>) -> Result<Calibration, String> {
    let mut pts = Vec::new();
    for words in [32u32, 160] {
        let prompt = probe_prompt(words);
        let body = build_body(
            cfg.api,
            &RequestBody { model, prompt: &prompt, max_tokens: 1, stream: false, ignore_eos: false, eos_token_id: None },
        );
        let r =
            client.simple(http::Method::POST, cfg.api.path(), Bytes::from(body), cfg.limits.preflight).await.map_err(|e| e.to_string())?;
        if r.status != 200 {
            return Err(format!("HTTP {} from {}", r.status, cfg.api.path()));
        }
        let info = crate::api::parse_event(cfg.api, &String::from_utf8_lossy(&r.body))?;
        let t = info.prompt_tokens.ok_or("the server reports no prompt_tokens")?;
        pts.push((words, t));
    }
    Calibration::fit(pts[0].0, pts[0].1, pts[1].0, pts[1].1).ok_or_else(|| format!("implausible prompt token counts {pts:?}"))
}

/// What a whole benchmark produced.
#[derive(Debug)]
pub struct Outcome {
    /// The report.
    pub report: BenchReport,
    /// Records per run, in run order (each sorted by index).
    pub records: Vec<Vec<RequestRecord>>,
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Builds the report of a sweep from its points (the saturation finding, definitions, config echo).
pub fn assemble(p: &Prepared, started_at: u64, points: Vec<PointOutcome>, partial: bool, defs: Option<Definitions>) -> Outcome {
    let (runs, all_records): (Vec<RunReport>, Vec<Vec<RequestRecord>>) = points.into_iter().map(|o| (o.report, o.records)).unzip();
    let saturation = saturation::find(&runs);
    let definitions =
        defs.map(|tool| DefinitionsReport { tool, runs: all_records.iter().map(|r| definitions::compute(tool, r)).collect() });
    let report = BenchReport {
        schema: SCHEMA,
        schema_minor: SCHEMA_MINOR,
        servetune_version: env!("CARGO_PKG_VERSION"),
        started_at,
        config: echo(p),
        partial,
        runs,
        saturation,
        definitions,
        notes: p.notes.clone(),
    };
    Outcome { report, records: all_records }
}

fn echo(p: &Prepared) -> ConfigEcho {
    let cfg = &p.cfg;
    let input = match &cfg.prompts {
        PromptSource::Random { input, prefix_len, prefix_groups } if *prefix_len > 0 => {
            format!("{} + shared prefix {prefix_len} x {prefix_groups} groups", dist_str(input))
        }
        PromptSource::Random { input, .. } => dist_str(input),
        PromptSource::Dataset { path } => format!("dataset {}", path.display()),
    };
    ConfigEcho {
        url: p.client.base().to_string(),
        api: cfg.api,
        model: p.model.clone(),
        stream: cfg.stream,
        input,
        output: dist_str(&cfg.output),
        seed: cfg.seed,
        warmup: cfg.warmup,
        requests: cfg.stop.requests,
        duration_s: cfg.stop.duration.map(|d| d.as_secs_f64()),
        ramp_up_s: cfg.ramp_up.as_secs_f64(),
        ignore_eos: cfg.ignore_eos,
        eos_token_id: p.eos_token_id,
        timeout_s: cfg.limits.request.as_secs_f64(),
        connect_timeout_s: cfg.limits.connect.as_secs_f64(),
        first_byte_timeout_s: cfg.limits.first_byte.as_secs_f64(),
        idle_timeout_s: cfg.limits.idle.as_secs_f64(),
        tokenizer: cfg.tokenizer_path.as_ref().map(|t| t.display().to_string()),
        calibration: p.calibration,
        metrics_url: p.metrics_url.clone(),
        api_key_env: p.api_key_env.clone(),
    }
}

fn dist_str(d: &crate::spec::LengthDist) -> String {
    use crate::spec::LengthDist::*;
    match *d {
        Fixed { len } => format!("{len}"),
        Uniform { lo, hi } => format!("uniform:{lo}..{hi}"),
        Normal { mean, std } => format!("normal:{mean},{std}"),
    }
}
