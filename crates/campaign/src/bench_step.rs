//! The one place the campaign calls servetune-bench: an experiment's sweep through the bench
//! library (not a subprocess), its JSON written next to the journal, and the summary the journal
//! and the planner keep.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use servetune_bench::api::Api;
use servetune_bench::runner;
use servetune_bench::spec::{BenchConfig, LengthDist, Limits, Load, PromptSource, Stop};
use servetune_bench::{export, run_sweep as bench_sweep, BenchError, BenchReport, Control, Progress, Stopping, SweepPoint};

/// The sweep every experiment of a campaign runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchPlan {
    /// Concurrency points, in the order they run.
    pub concurrency: Vec<u32>,
    /// Measured requests per point.
    pub requests: u64,
    /// Prompt tokens per request.
    pub input_len: u32,
    /// Output tokens per request.
    pub output_len: u32,
    /// Per-request time limit, seconds.
    pub timeout_s: f64,
    /// The goal's latency objectives in bench's syntax (`tpot:p90<50ms`), judged per point.
    pub slos: Option<String>,
}

/// One load point, as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointSummary {
    /// Requests kept in flight.
    pub concurrency: u32,
    /// Requests that completed.
    pub completed: u64,
    /// Requests that failed.
    pub failed: u64,
    /// Output throughput, output tokens per second.
    pub output_tok_s: f64,
    /// Median time to first token, ms.
    pub ttft_p50_ms: f64,
    /// 99th-percentile time to first token, ms.
    pub ttft_p99_ms: f64,
    /// Median time per output token, ms.
    pub tpot_p50_ms: f64,
    /// 90th-percentile time per output token, ms.
    pub tpot_p90_ms: f64,
    /// 99th-percentile time per output token, ms.
    pub tpot_p99_ms: f64,
    /// Every goal latency objective met (None without objectives).
    pub slos_met: Option<bool>,
    /// Server metrics: most requests running, queued, and the highest KV usage (0..1).
    pub server_max_running: Option<f64>,
    /// Most requests queued at once (server metrics).
    pub server_max_queued: Option<f64>,
    /// Highest KV-cache usage, 0..1 (server metrics).
    pub server_max_kv_usage: Option<f64>,
}

/// A sweep's summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchSummary {
    /// The load points, in the order they ran.
    pub points: Vec<PointSummary>,
    /// Concurrency at the saturation knee, with bench's evidence.
    pub knee_concurrency: Option<u32>,
    /// Bench's evidence for the knee, in words.
    pub knee_evidence: Option<String>,
    /// The sweep stopped early (a stop signal or a failure): the points are those measured.
    pub partial: bool,
    /// An example error when requests failed.
    pub error_example: Option<String>,
}

impl BenchSummary {
    /// The best output tok/s over the points (meeting the goal's latency objectives when given).
    pub fn best_output_tok_s(&self, under_slo: bool) -> f64 {
        self.points.iter().filter(|p| !under_slo || p.slos_met != Some(false)).map(|p| p.output_tok_s).fold(0.0, f64::max)
    }

    /// Every request of every point failed.
    pub fn all_failed(&self) -> bool {
        self.points.iter().all(|p| p.completed == 0)
    }
}

/// Runs `plan` against `base_url`, writes the bench JSON to `json_path`, and summarises it.
pub fn run_sweep(base_url: &str, plan: &BenchPlan, json_path: &Path, cancel: &Arc<AtomicBool>) -> Result<BenchSummary, String> {
    let cfg = config(base_url, plan)?;
    let rt = servetune_bench::sweep::client_runtime_builder()
        .worker_threads(2)
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let report = rt.block_on(async {
        let prepared = runner::prepare(cfg, None).await.map_err(|e| match e {
            BenchError::Input(i) => i.0,
            BenchError::Runtime(r) => r,
        })?;
        let (tx, rx) = tokio::sync::watch::channel(Stopping::Running);
        let flag = Arc::clone(cancel);
        let watcher = tokio::spawn(async move {
            while !flag.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let _ = tx.send(Stopping::Draining);
        });
        let points: Vec<SweepPoint> = prepared.cfg.loads.iter().map(|&load| SweepPoint { load, stop: prepared.cfg.stop }).collect();
        let ctl = Control { stopping: rx, progress: Arc::new(Progress::default()), observer: None };
        let out = bench_sweep(&prepared, &points, &ctl, None).await;
        watcher.abort();
        Ok::<BenchReport, String>(out.report)
    })?;
    rt.shutdown_timeout(Duration::from_millis(100));
    let mut buf = Vec::new();
    export::write_json(&report, &mut buf).map_err(|e| format!("bench JSON: {e}"))?;
    servetune_io::open_plain_for_write(json_path, true)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &buf))
        .map_err(|e| format!("{}: cannot write the bench JSON ({e})", json_path.display()))?;
    Ok(summarise(&report))
}

fn config(base_url: &str, plan: &BenchPlan) -> Result<BenchConfig, String> {
    let slos = match &plan.slos {
        Some(s) => servetune_stats::parse_slos_stored("--goal", s).map_err(|e| e.0)?,
        None => Vec::new(),
    };
    let cfg = BenchConfig {
        base_url: base_url.to_string(),
        api: Api::OpenaiCompletions,
        model: None,
        api_key: None,
        stream: true,
        loads: plan.concurrency.iter().map(|&c| Load::Closed { concurrency: c }).collect(),
        stop: Stop { requests: Some(plan.requests), duration: None },
        warmup: 0,
        ramp_up: Duration::ZERO,
        prompts: PromptSource::Random { input: LengthDist::Fixed { len: plan.input_len }, prefix_len: 0, prefix_groups: 1 },
        output: LengthDist::Fixed { len: plan.output_len },
        seed: 0,
        ignore_eos: true,
        eos_token_id: None,
        metrics_api_key: None,
        limits: Limits { request: Duration::from_secs_f64(plan.timeout_s), ..Limits::default() },
        slos,
        tokenizer_path: None,
        metrics_url: None,
        scrape_interval: Duration::from_millis(250),
        drain_timeout: Duration::from_secs(5),
        calibrate: false,
    };
    cfg.validate().map_err(|e| e.0)?;
    Ok(cfg)
}

fn summarise(r: &BenchReport) -> BenchSummary {
    let points = r
        .runs
        .iter()
        .map(|run| {
            let sm = run.server_metrics.as_ref();
            PointSummary {
                concurrency: run.concurrency.unwrap_or(0),
                completed: run.requests.completed,
                failed: run.requests.failed,
                output_tok_s: run.throughput.output_tokens_per_s,
                ttft_p50_ms: run.latency_ms.ttft.p50,
                ttft_p99_ms: run.latency_ms.ttft.p99,
                tpot_p50_ms: run.latency_ms.tpot.p50,
                tpot_p90_ms: run.latency_ms.tpot.p90,
                tpot_p99_ms: run.latency_ms.tpot.p99,
                slos_met: run.goodput.as_ref().map(|g| g.slos.iter().all(|s| s.met)),
                server_max_running: sm.and_then(|m| m.max_running),
                server_max_queued: sm.and_then(|m| m.max_queued),
                server_max_kv_usage: sm.and_then(|m| m.max_kv_usage),
            }
        })
        .collect();
    let error_example = r.runs.iter().flat_map(|run| run.requests.error_examples.values().flatten()).next().cloned();
    BenchSummary {
        points,
        knee_concurrency: r.saturation.as_ref().and_then(|s| s.at_concurrency),
        knee_evidence: r.saturation.as_ref().map(|s| s.evidence.clone()),
        partial: r.partial,
        error_example,
    }
}
