//! Runs a benchmark: preflight (model discovery, calibration, metrics endpoint), then each load
//! point of the sweep in turn on the same seeded workload.
//!
//! Closed loops run one task per slot. Open loops are paced by a dedicated OS thread that sleeps to
//! each precomputed absolute send time (no relative sleeps, no 1 ms timer-wheel rounding) and then
//! spawns the request on the runtime; a `--max-concurrency` slot is awaited inside the request, so
//! the wait shows as schedule lag and in the corrected latencies.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use tokio::sync::{watch, Semaphore};

use crate::api::{build_body, first_model_id, Api, RequestBody};
use crate::client::{since, Exec, HttpClient};
use crate::definitions::{self, DefinedMetric, Definitions};
use crate::record::{ErrorKind, RequestRecord};
use crate::report::{self, RunContext, RunReport};
use crate::saturation::{self, Saturation};
use crate::schedule;
use crate::scrape::{self, ServerMetrics};
use crate::spec::{BenchConfig, InputError, Load, PromptSource};
use crate::tokenizer::Tokenizer;
use crate::workload::{probe_prompt, Calibration, Workload};

/// A benchmark error: bad input (exit 2) or a runtime failure (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{0}")]
    Runtime(String),
}

/// Live counters for a progress display.
#[derive(Debug, Default)]
pub struct Progress {
    pub label: Mutex<String>,
    /// Requests this point will send (0 when bounded by time only).
    pub planned: AtomicU64,
    pub done: AtomicU64,
    pub failed: AtomicU64,
    pub in_flight: AtomicU64,
    pub tokens: AtomicU64,
    /// Nanoseconds since the Unix epoch when the current point started (0 before).
    pub point_started_unix_ns: AtomicU64,
    /// Index of the current point and how many there are.
    pub point: AtomicU64,
    pub points: AtomicU64,
}

impl Progress {
    fn reset(&self, label: String, planned: u64, point: u64, points: u64) {
        if let Ok(mut l) = self.label.lock() {
            *l = label;
        }
        self.planned.store(planned, Ordering::Relaxed);
        for c in [&self.done, &self.failed, &self.in_flight, &self.tokens] {
            c.store(0, Ordering::Relaxed);
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        self.point_started_unix_ns.store(now, Ordering::Relaxed);
        self.point.store(point, Ordering::Relaxed);
        self.points.store(points, Ordering::Relaxed);
    }
}

/// The configuration as recorded in the report (no secrets).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ConfigEcho {
    pub url: String,
    pub api: Api,
    pub model: Option<String>,
    pub stream: bool,
    pub input: String,
    pub output: String,
    pub seed: u64,
    pub warmup: u64,
    pub requests: Option<u64>,
    pub duration_s: Option<f64>,
    pub ramp_up_s: f64,
    pub ignore_eos: bool,
    pub eos_token_id: Option<u32>,
    pub timeout_s: f64,
    pub tokenizer: Option<String>,
    pub calibration: Calibration,
    pub metrics_url: Option<String>,
    /// Name of the environment variable the API key came from, if one was used.
    pub api_key_env: Option<String>,
}

/// The whole result, `--json`'s document.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BenchReport {
    /// Always "servetune.bench/1".
    pub schema: &'static str,
    pub servetune_version: &'static str,
    /// Unix seconds at the start.
    pub started_at: u64,
    pub config: ConfigEcho,
    /// True when a stop (Ctrl-C) cut the benchmark short.
    pub partial: bool,
    pub runs: Vec<RunReport>,
    pub saturation: Option<Saturation>,
    /// The latency metrics under `--definitions`, one list per run (absent for servetune's own).
    pub definitions: Option<DefinitionsReport>,
    /// Preflight observations (model found, calibration, metrics endpoint).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DefinitionsReport {
    pub tool: Definitions,
    pub runs: Vec<Vec<DefinedMetric>>,
}

pub const SCHEMA: &str = "servetune.bench/1";

/// Everything resolved before the first request.
#[derive(Debug)]
pub struct Prepared {
    pub cfg: BenchConfig,
    pub client: HttpClient,
    pub model: Option<String>,
    pub tokenizer: Option<Arc<Tokenizer>>,
    pub workload: Arc<Workload>,
    pub calibration: Calibration,
    pub metrics_url: Option<String>,
    pub eos_token_id: Option<u32>,
    pub notes: Vec<String>,
    pub api_key_env: Option<String>,
}

/// Checks the server, finds the model, calibrates prompt lengths, finds the metrics endpoint and
/// builds the workload.
pub async fn prepare(cfg: BenchConfig, api_key_env: Option<String>) -> Result<Prepared, BenchError> {
    cfg.validate()?;
    let client = HttpClient::new(&cfg.base_url, cfg.api_key.as_deref())?;
    let tokenizer = match &cfg.tokenizer_path {
        Some(p) => Some(Arc::new(Tokenizer::load(p)?)),
        None => None,
    };
    let mut notes = Vec::new();
    // Local input first: a bad file is reported before any network error.
    let dataset = match &cfg.prompts {
        PromptSource::Dataset { path } => Some(crate::workload::load_dataset(path)?),
        PromptSource::Random { .. } => None,
    };

    // Reachability and model discovery in one request.
    let models = client.simple(http::Method::GET, "/v1/models", Bytes::new()).await.map_err(|e| {
        InputError(format!("{e}\n  is the server running at --url {}? Start it, or fix the address and port", cfg.base_url))
    })?;
    let mut model = cfg.model.clone();
    if model.is_none() && cfg.api != Api::Sglang {
        match (models.status, first_model_id(&models.body)) {
            (200, Some(id)) => {
                notes.push(format!("model {id:?} found at /v1/models"));
                model = Some(id);
            }
            (s, _) => notes.push(format!(
                "no model found at /v1/models (HTTP {s}); requests are sent without a model field: give --model if the server needs one"
            )),
        }
    }

    let eos_token_id = cfg.eos_token_id.or_else(|| tokenizer.as_ref().and_then(|t| t.eos_token_id()));
    if cfg.ignore_eos && eos_token_id.is_none() && cfg.api != Api::Sglang {
        notes.push("--ignore-eos without --eos-token-id or --tokenizer: only ignore_eos/min_tokens are sent; servers that ignore them may stop early (reported per run)".into());
    }

    let mut calibration = Calibration::default();
    if matches!(cfg.prompts, PromptSource::Random { .. }) && tokenizer.is_none() {
        if cfg.calibrate {
            match calibrate(&client, &cfg, model.as_deref()).await {
                Ok(c) => {
                    notes.push(format!(
                        "prompt lengths calibrated from the server's prompt_tokens: {:.3} tokens per word + {:.0} tokens of overhead",
                        c.tokens_per_word, c.overhead_tokens
                    ));
                    calibration = c;
                }
                Err(why) => notes.push(format!("prompt lengths not calibrated ({why}); one word is taken as one token")),
            }
        } else {
            notes.push("prompt lengths not calibrated (--no-calibrate): one word is taken as one token".into());
        }
    }

    let metrics_url = match &cfg.metrics_url {
        Some(Some(u)) => Some(u.clone()),
        Some(None) => None,
        None => {
            let url = format!("{}/metrics", client.base());
            match client.simple(http::Method::GET, &url, Bytes::new()).await {
                Ok(r) if r.status == 200 && scrape::parse(&String::from_utf8_lossy(&r.body)).1 != "unknown" => Some(url),
                _ => {
                    notes.push(format!("no sglang/vLLM metrics at {url}; server metrics are not scraped (give --metrics-url)"));
                    None
                }
            }
        }
    };

    let count = pool_size(&cfg);
    let workload = Workload::build(&cfg.prompts, dataset.as_deref(), &cfg.output, cfg.seed, count, &calibration, tokenizer.as_deref())?;
    Ok(Prepared { cfg, client, model, tokenizer, workload: Arc::new(workload), calibration, metrics_url, eos_token_id, notes, api_key_env })
}

fn pool_size(cfg: &BenchConfig) -> usize {
    let n = match (cfg.stop.requests, cfg.stop.duration) {
        (Some(r), _) => r + cfg.warmup,
        (None, Some(d)) => {
            let max_rate =
                cfg.loads.iter().filter_map(|l| if let Load::Open { rate, .. } = l { Some(*rate) } else { None }).fold(0.0, f64::max);
            if max_rate > 0.0 {
                (max_rate * d.as_secs_f64()) as u64 + cfg.warmup
            } else {
                4096
            }
        }
        (None, None) => 1,
    };
    n.clamp(1, 200_000) as usize
}

async fn calibrate(client: &HttpClient, cfg: &BenchConfig, model: Option<&str>) -> Result<Calibration, String> {
    let mut pts = Vec::new();
    for words in [32u32, 160] {
        let prompt = probe_prompt(words);
        let body = build_body(
            cfg.api,
            &RequestBody { model, prompt: &prompt, max_tokens: 1, stream: false, ignore_eos: false, eos_token_id: None },
        );
        let r = client.simple(http::Method::POST, cfg.api.path(), Bytes::from(body)).await?;
        if r.status != 200 {
            return Err(format!("HTTP {} from {}", r.status, cfg.api.path()));
        }
        let info = crate::api::parse_event(cfg.api, &String::from_utf8_lossy(&r.body))?;
        let t = info.prompt_tokens.ok_or("the server reports no prompt_tokens")?;
        pts.push((words, t));
    }
    Calibration::fit(pts[0].0, pts[0].1, pts[1].0, pts[1].1).ok_or_else(|| format!("implausible prompt token counts {pts:?}"))
}

/// One load point's report and its records.
#[derive(Debug)]
pub struct PointOutcome {
    pub report: RunReport,
    pub records: Vec<RequestRecord>,
    pub interrupted: bool,
}

struct Shared {
    client: HttpClient,
    api: Api,
    stream: bool,
    model: Option<String>,
    ignore_eos: bool,
    eos: Option<u32>,
    timeout: Duration,
    warmup: u64,
    t0: Instant,
    workload: Arc<Workload>,
    tokenizer: Option<Arc<Tokenizer>>,
    records: Mutex<Vec<RequestRecord>>,
    progress: Arc<Progress>,
    /// No more sends.
    stop: AtomicBool,
    /// In-flight requests give up (drain deadline passed).
    abort: watch::Receiver<bool>,
}

impl Shared {
    async fn one(&self, index: u64, intended_ns: u64, slot: Option<&Semaphore>) {
        let _permit = match slot {
            Some(s) => match s.acquire().await {
                Ok(p) => Some(p),
                Err(_) => return,
            },
            None => None,
        };
        if self.stop.load(Ordering::Relaxed) && slot.is_some() {
            return; // stopped while waiting for a slot: never sent, not measured
        }
        let spec = self.workload.get(index);
        let mut rec = RequestRecord::new(index, index < self.warmup, intended_ns, spec.input_tokens, spec.output_tokens);
        let body = build_body(
            self.api,
            &RequestBody {
                model: self.model.as_deref(),
                prompt: &spec.prompt,
                max_tokens: spec.output_tokens,
                stream: self.stream,
                ignore_eos: self.ignore_eos,
                eos_token_id: self.eos,
            },
        );
        self.progress.in_flight.fetch_add(1, Ordering::Relaxed);
        let x = Exec {
            api: self.api,
            stream: self.stream,
            t0: self.t0,
            tokenizer: self.tokenizer.as_deref(),
            tokens_counter: &self.progress.tokens,
        };
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut abort = self.abort.clone();
        let mut outcome = 0u8;
        tokio::select! {
            _ = self.client.execute(&x, Bytes::from(body), &mut rec) => {}
            _ = tokio::time::sleep_until(deadline) => outcome = 1,
            _ = abort.wait_for(|a| *a) => outcome = 2,
        }
        let now = since(self.t0);
        match outcome {
            1 => rec.fail(ErrorKind::Timeout, format!("no complete response within --timeout {:.1}s", self.timeout.as_secs_f64()), now),
            2 => rec.fail(ErrorKind::Cancelled, "still in flight when the drain deadline after the stop passed", now),
            _ => {}
        }
        self.progress.in_flight.fetch_sub(1, Ordering::Relaxed);
        if rec.error.is_some() {
            self.progress.failed.fetch_add(1, Ordering::Relaxed);
        }
        self.progress.done.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut r) = self.records.lock() {
            r.push(rec);
        }
    }
}

/// Runs one load point. `interrupt` turning true stops sending, drains in-flight requests for
/// `drain_timeout`, then cancels the rest; the outcome is then marked partial.
pub async fn run_point(
    p: &Prepared,
    load: Load,
    interrupt: watch::Receiver<bool>,
    progress: Arc<Progress>,
    point: (u64, u64),
) -> PointOutcome {
    let cfg = &p.cfg;
    let (abort_tx, abort_rx) = watch::channel(false);
    let planned = cfg.stop.requests.map(|r| r + cfg.warmup);
    progress.reset(load.label(), planned.unwrap_or(0), point.0, point.1);
    let t0 = Instant::now();
    let sh = Arc::new(Shared {
        client: p.client.clone(),
        api: cfg.api,
        stream: cfg.stream,
        model: p.model.clone(),
        ignore_eos: cfg.ignore_eos,
        eos: p.eos_token_id,
        timeout: cfg.timeout,
        warmup: cfg.warmup,
        t0,
        workload: Arc::clone(&p.workload),
        tokenizer: p.tokenizer.clone(),
        records: Mutex::new(Vec::with_capacity(planned.unwrap_or(1024).min(1 << 20) as usize)),
        progress: Arc::clone(&progress),
        stop: AtomicBool::new(false),
        abort: abort_rx,
    });

    // Server metrics.
    let (scrape_stop_tx, scrape_stop_rx) = watch::channel(false);
    let scraper = p.metrics_url.clone().map(|u| {
        let c = p.client.clone();
        tokio::spawn(scrape::scrape_loop(c, u, cfg.scrape_interval, t0, scrape_stop_rx))
    });

    // Ctrl-C: stop sending, then after the drain deadline cancel what is still in flight.
    let interrupted = Arc::new(AtomicBool::new(false));
    let watcher = {
        let sh = Arc::clone(&sh);
        let interrupted = Arc::clone(&interrupted);
        let drain = cfg.drain_timeout;
        let mut interrupt = interrupt.clone();
        tokio::spawn(async move {
            if interrupt.wait_for(|v| *v).await.is_ok() {
                interrupted.store(true, Ordering::Relaxed);
                sh.stop.store(true, Ordering::Relaxed);
                tokio::time::sleep(drain).await;
                let _ = abort_tx.send(true);
            }
        })
    };

    let mut last_intended_ns = 0;
    match load {
        Load::Closed { concurrency } => {
            let next = Arc::new(AtomicU64::new(0));
            let measure_start = Arc::new(Mutex::new(None::<Instant>));
            let mut workers = Vec::with_capacity(concurrency as usize);
            for k in 0..concurrency {
                let sh = Arc::clone(&sh);
                let next = Arc::clone(&next);
                let measure_start = Arc::clone(&measure_start);
                let start_at = t0 + cfg.ramp_up.mul_f64(k as f64 / concurrency as f64);
                let (warmup, duration) = (cfg.warmup, cfg.stop.duration);
                workers.push(tokio::spawn(async move {
                    tokio::time::sleep_until(start_at.into()).await;
                    loop {
                        if sh.stop.load(Ordering::Relaxed) {
                            break;
                        }
                        if let (Some(d), Ok(ms)) = (duration, measure_start.lock().map(|m| *m)) {
                            if ms.is_some_and(|s| s.elapsed() >= d) {
                                break;
                            }
                        }
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if planned.is_some_and(|n| i >= n) {
                            break;
                        }
                        if i == warmup {
                            if let Ok(mut m) = measure_start.lock() {
                                *m = Some(Instant::now());
                            }
                        }
                        // Closed loop: the slot is free now, so now is the intended time.
                        sh.one(i, since(sh.t0), None).await;
                    }
                }));
            }
            for w in workers {
                let _ = w.await;
            }
        }
        Load::Open { rate, arrival, max_concurrency } => {
            // The measured part starts at the warmup's end; without warmup, at 0.
            let sched = schedule::arrivals(rate, arrival, cfg.ramp_up, cfg.seed, planned, None);
            let sched = match (cfg.stop.duration, planned) {
                (Some(d), _) => {
                    let start = if cfg.warmup > 0 {
                        let full = schedule::arrivals(rate, arrival, cfg.ramp_up, cfg.seed, Some(cfg.warmup + 1), None);
                        full.last().copied().unwrap_or(0)
                    } else {
                        0
                    };
                    let until = start + d.as_nanos() as u64;
                    if planned.is_some() {
                        sched.into_iter().take_while(|&t| t <= until).collect()
                    } else {
                        schedule::arrivals(rate, arrival, cfg.ramp_up, cfg.seed, None, Some(until))
                    }
                }
                _ => sched,
            };
            progress.planned.store(sched.len() as u64, Ordering::Relaxed);
            last_intended_ns = sched.last().copied().unwrap_or(0);
            let slot = max_concurrency.map(|m| Arc::new(Semaphore::new(m as usize)));
            let handle = tokio::runtime::Handle::current();
            let sh2 = Arc::clone(&sh);
            let dispatched = tokio::task::spawn_blocking(move || {
                let mut handles = Vec::with_capacity(sched.len());
                for (i, &t) in sched.iter().enumerate() {
                    let target = sh2.t0 + Duration::from_nanos(t);
                    loop {
                        if sh2.stop.load(Ordering::Relaxed) {
                            return handles;
                        }
                        let now = Instant::now();
                        if now >= target {
                            break;
                        }
                        // Sleep in slices of at most 50 ms so a stop is seen promptly.
                        std::thread::sleep((target - now).min(Duration::from_millis(50)));
                    }
                    let sh3 = Arc::clone(&sh2);
                    let slot = slot.clone();
                    handles.push(handle.spawn(async move { sh3.one(i as u64, t, slot.as_deref()).await }));
                }
                handles
            })
            .await
            .unwrap_or_default();
            for h in dispatched {
                let _ = h.await;
            }
        }
    }
    watcher.abort();
    let _ = scrape_stop_tx.send(true);
    let server_metrics = match scraper {
        Some(h) => match h.await {
            Ok((samples, style)) => {
                let target = match load {
                    Load::Closed { concurrency } => Some(concurrency as f64),
                    Load::Open { max_concurrency, .. } => max_concurrency.map(f64::from),
                };
                p.metrics_url.clone().map(|u| ServerMetrics::new(u, style, samples, target))
            }
            Err(_) => None,
        },
        None => None,
    };
    let mut records = sh.records.lock().map(|mut r| std::mem::take(&mut *r)).unwrap_or_default();
    records.sort_by_key(|r| r.index);
    let was_interrupted = interrupted.load(Ordering::Relaxed);
    let ctx = RunContext { load, partial: was_interrupted, ignore_eos: cfg.ignore_eos, slos: &cfg.slos, last_intended_ns };
    let report = report::compute(&records, &ctx, server_metrics);
    PointOutcome { report, records, interrupted: was_interrupted }
}

/// What a whole benchmark produced.
#[derive(Debug)]
pub struct Outcome {
    pub report: BenchReport,
    /// Records per run, in run order.
    pub records: Vec<Vec<RequestRecord>>,
}

/// Runs every load point of the sweep; stops after an interrupted point.
pub async fn run(p: &Prepared, interrupt: watch::Receiver<bool>, progress: Arc<Progress>, defs: Option<Definitions>) -> Outcome {
    let started_at = unix_now();
    let mut points = Vec::new();
    let mut partial = false;
    let n = p.cfg.loads.len() as u64;
    for (i, load) in p.cfg.loads.iter().enumerate() {
        if *interrupt.borrow() {
            partial = true;
            break;
        }
        let out = run_point(p, *load, interrupt.clone(), Arc::clone(&progress), (i as u64 + 1, n)).await;
        let stop = out.interrupted;
        points.push(out);
        if stop {
            partial = true;
            break;
        }
    }
    assemble(p, started_at, points, partial, defs)
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Builds the report of a sweep from its points (the saturation finding, definitions, config echo).
pub fn assemble(p: &Prepared, started_at: u64, points: Vec<PointOutcome>, partial: bool, defs: Option<Definitions>) -> Outcome {
    let (runs, all_records): (Vec<RunReport>, Vec<Vec<RequestRecord>>) = points.into_iter().map(|o| (o.report, o.records)).unzip();
    let saturation = saturation::find(&runs);
    let definitions = defs
        .filter(|d| *d != Definitions::Servetune)
        .map(|tool| DefinitionsReport { tool, runs: all_records.iter().map(|r| definitions::compute(tool, r)).collect() });
    let cfg = &p.cfg;
    let input = match &cfg.prompts {
        PromptSource::Random { input, prefix_len, prefix_groups } if *prefix_len > 0 => {
            format!("{} + shared prefix {prefix_len} x {prefix_groups} groups", dist_str(input))
        }
        PromptSource::Random { input, .. } => dist_str(input),
        PromptSource::Dataset { path } => format!("dataset {}", path.display()),
    };
    let report = BenchReport {
        schema: SCHEMA,
        servetune_version: env!("CARGO_PKG_VERSION"),
        started_at,
        config: ConfigEcho {
            url: cfg.base_url.clone(),
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
            timeout_s: cfg.timeout.as_secs_f64(),
            tokenizer: cfg.tokenizer_path.as_ref().map(|t| t.display().to_string()),
            calibration: p.calibration,
            metrics_url: p.metrics_url.clone(),
            api_key_env: p.api_key_env.clone(),
        },
        partial,
        runs,
        saturation,
        definitions,
        notes: p.notes.clone(),
    };
    Outcome { report, records: all_records }
}

fn dist_str(d: &crate::spec::LengthDist) -> String {
    use crate::spec::LengthDist::*;
    match *d {
        Fixed { len } => format!("{len}"),
        Uniform { lo, hi } => format!("uniform:{lo}..{hi}"),
        Normal { mean, std } => format!("normal:{mean},{std}"),
    }
}
