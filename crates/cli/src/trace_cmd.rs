//! `servetune trace`: a PyTorch profiler (Kineto) trace split by step and kernel category, and
//! beside the performance model's prediction with `--vs-plan`.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use clap::Args;
use servetune_trace::{Predicted, TraceError, TraceReport};

use crate::Failure;

/// Where a serving step's GPU time goes: reads a PyTorch profiler / Kineto trace (.json or
/// .json.gz, as sglang's /start_profile, vLLM's profiler, TensorRT-LLM's TLLM_TORCH_PROFILE_TRACE
/// or torch.profiler write it) as a stream, cuts it into the steps the engine ran (by its own step
/// annotations, else CUDA graph replays, else idle gaps), gives each step's kind, tokens and
/// requests, splits each step by kernel category (NCCL, custom all-reduce, MoE, attention, GEMM,
/// norm/element-wise, copies, GPU idle) and lists the top kernels, NCCL calls and the kernels no
/// rule knew.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  servetune trace rank0.trace.json.gz\n  servetune trace t.json.gz --json split.json\n  servetune trace t.json.gz --vs-plan model=qwen3-32b,gpu=h100-sxm,gpus=4 --concurrency 32\n  servetune trace t.json.gz --vs-plan-json plan.json --concurrency 32"
)]
pub struct TraceArgs {
    /// The trace file (.json or .json.gz)
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Write the analysis as JSON (servetune.trace/1; "-" for stdout)
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Compare with the model's prediction for this plan (KEY=VALUE pairs as `sim --from-plan` takes)
    #[arg(long, value_name = "KEY=VALUE,..", conflicts_with = "vs_plan_json")]
    pub vs_plan: Option<String>,
    /// Compare with a prediction written by `servetune plan --json`
    #[arg(long, value_name = "FILE")]
    pub vs_plan_json: Option<PathBuf>,
    /// Requests running when the trace was taken: the prediction's concurrency
    #[arg(long, value_name = "N")]
    pub concurrency: Option<u32>,
    /// GPU idle longer than this ends a step when neither step annotations nor CUDA graphs mark steps (ms)
    #[arg(long, value_name = "MS", default_value_t = 1.0)]
    pub gap_ms: f64,
    /// The most JSON the trace may hold once decompressed, in MiB [default: a .gz file 100 times
    /// its size, at least 256; a plain file its size]
    #[arg(long, value_name = "MIB")]
    pub max_json_mb: Option<u64>,
}

pub fn run(a: TraceArgs) -> Result<(), Failure> {
    crate::check_outputs(
        &[("--json", a.json.as_deref())],
        &[("the trace being read", Some(&a.file)), ("the --vs-plan-json file", a.vs_plan_json.as_deref())],
    )?;
    let predicted = prediction(&a)?;
    if a.max_json_mb == Some(0) {
        return Err(Failure::usage("--max-json-mb 0: give the most JSON the trace may hold once decompressed, in MiB (at least 1)"));
    }
    let mut report = analyze(&a.file, a.gap_ms, a.max_json_mb.map(|m| m.saturating_mul(servetune_io::MIB)))?;
    if let Some(p) = predicted {
        report.comparison = servetune_trace::compare(&report, p);
    }
    emit(&report, a.json.as_deref())
}

/// Reads and analyses a trace (its decompressed JSON at most `max_json` bytes; None: the
/// default limit), mapping its errors to exit codes (bad input: 2).
pub fn analyze(file: &Path, gap_ms: f64, max_json: Option<u64>) -> Result<TraceReport, Failure> {
    let usage = |e: TraceError| match e {
        TraceError::Open { .. }
        | TraceError::NotATrace { .. }
        | TraceError::Truncated { .. }
        | TraceError::NoGpuEvents { .. }
        | TraceError::NoTimedGpuEvents { .. }
        | TraceError::ManyDevices { .. }
        | TraceError::TooLarge { .. }
        | TraceError::Stalled { .. }
        | TraceError::NoCompleteGpuEvents { .. }
        | TraceError::Input(_) => Failure::usage(e.to_string()),
    };
    if !(gap_ms.is_finite() && gap_ms > 0.0) {
        return Err(usage(TraceError::Input(format!("--gap-ms {gap_ms}: give the idle gap that ends a step, in ms > 0 (e.g. 1)"))));
    }
    let t = servetune_trace::Timeline::read_within(file, max_json).map_err(usage)?;
    Ok(servetune_trace::report::report(&t, &file.display().to_string(), gap_ms))
}

/// Prints the terminal view, and writes the JSON document when asked.
pub fn emit(report: &TraceReport, json: Option<&Path>) -> Result<(), Failure> {
    if json.is_none_or(|j| j.as_os_str() != "-") {
        let mut out = std::io::stdout().lock();
        let _ = servetune_trace::render::terminal(report, &mut out);
    }
    match json {
        Some(p) => crate::write_json(p, report),
        None => Ok(()),
    }
}

fn prediction(a: &TraceArgs) -> Result<Option<Predicted>, Failure> {
    if a.concurrency == Some(0) {
        return Err(Failure::usage("--concurrency 0: give the requests running when the trace was taken, 1 or more"));
    }
    if let Some(pairs) = &a.vs_plan {
        let Some(c) = a.concurrency else {
            return Err(Failure::usage(
                "--vs-plan needs --concurrency N: the requests running when the trace was taken (the prediction depends on the batch)",
            ));
        };
        let spec = servetune_model::ScenarioSpec::parse_pairs("--vs-plan", pairs).map_err(|e| Failure::usage(e.to_string()))?;
        // The model words its checks by plan's flags (--tp); here the values came from pairs.
        let s = spec
            .build()
            .map_err(|e| Failure::usage(format!("--vs-plan {pairs}: {e} (a flag named here is the pair of that name: --tp is tp=)")))?;
        let p = s.point(c);
        let st = p.step_ms;
        return Ok(Some(Predicted {
            label: format!("{} on {} x {} ({})", s.model.name, s.plan.gpus, s.gpu.name, s.plan.label()),
            concurrency: p.running,
            weights_ms: st.weights,
            kv_ms: st.kv,
            compute_ms: st.compute,
            communication_ms: st.communication,
            overhead_ms: st.overhead,
            step_ms: st.total - st.prefill,
            allreduces_per_step: Some(p.detail.allreduces + p.detail.qk_norm_allreduces),
        }));
    }
    match &a.vs_plan_json {
        Some(path) => from_plan_json(path, a.concurrency).map(Some),
        None if a.concurrency.is_some() => Err(Failure::usage("--concurrency is for the prediction: give --vs-plan or --vs-plan-json too")),
        None => Ok(None),
    }
}

/// The most a `--vs-plan-json` document may hold: `plan --json` writes a few KB per point, and a
/// plan has at most a few hundred points.
const MAX_PLAN_JSON: u64 = 16 * servetune_io::MIB;

/// The point of a `servetune plan --json` document at `concurrency` (or its only point).
fn from_plan_json(path: &Path, concurrency: Option<u32>) -> Result<Predicted, Failure> {
    let bad =
        |why: String| Failure::usage(format!("--vs-plan-json {}: {why}; give a file written by `servetune plan --json`", path.display()));
    let text = servetune_io::read_text(path, &format!("--vs-plan-json {}", path.display()), MAX_PLAN_JSON)
        .map_err(|e| Failure::usage(format!("{e}; give a file written by `servetune plan --json`")))?;
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON ({e})")))?;
    if !doc["schema"].as_str().is_some_and(|s| s.starts_with("servetune.plan/")) {
        return Err(bad("not a servetune.plan document".into()));
    }
    if doc["fits"].as_bool() == Some(false) {
        return Err(bad("its plan does not fit in GPU memory (\"fits\": false), so it predicts no step to compare".into()));
    }
    let points =
        doc["points"].as_array().filter(|p| !p.is_empty()).ok_or_else(|| bad("no predicted points (the plan does not fit?)".into()))?;
    let point = match concurrency {
        Some(c) => points.iter().find(|p| p["concurrency"].as_u64() == Some(c as u64)).ok_or_else(|| {
            let have: Vec<String> = points.iter().filter_map(|p| p["concurrency"].as_u64()).map(|c| c.to_string()).collect();
            if have.is_empty() {
                bad("no point has a concurrency (points[].concurrency, a whole number)".into())
            } else {
                Failure::usage(format!(
                    "--vs-plan-json {}: no point at concurrency {c}; it has {}: give one of them to --concurrency",
                    path.display(),
                    have.join(", ")
                ))
            }
        })?,
        None if points.len() == 1 => &points[0],
        None => return Err(bad(format!("{} points: pick one with --concurrency N", points.len()))),
    };
    let st = &point["step_ms"];
    // A step term is a time, at most an hour (a plan's step is milliseconds): a negative,
    // non-finite or absurd one is no plan's.
    let f = |k: &str| match st[k].as_f64() {
        Some(x) if x.is_finite() && (0.0..=MAX_STEP_MS).contains(&x) => Ok(x),
        Some(x) => Err(bad(format!("points[].step_ms.{k} is {x:?}, not a step time in ms (0 to an hour)"))),
        None => Err(bad(format!("points[].step_ms.{k} is missing"))),
    };
    let (total, prefill) = (f("total")?, f("prefill")?);
    if total <= prefill {
        return Err(bad(format!("points[].step_ms.total ({total:?}) is not above its prefill ({prefill:?}), so there is no decode step")));
    }
    let running = point["running"]
        .as_u64()
        .and_then(|r| u32::try_from(r).ok())
        .filter(|r| *r >= 1)
        .ok_or_else(|| bad("points[].running is missing or not a whole number of requests from 1".into()))?;
    // Older plan documents may lack the detail: no count to check then.
    let count = |k: &str| match point["detail"][k].as_f64() {
        Some(x) if x.is_finite() && (0.0..=MAX_ALLREDUCES).contains(&x) => Ok(Some(x)),
        Some(x) => Err(bad(format!("points[].detail.{k} is {x:?}, not a count of all-reduces per step"))),
        None => Ok(None),
    };
    let allreduces = count("allreduces")?;
    let qk = count("qk_norm_allreduces")?.unwrap_or(0.0);
    Ok(Predicted {
        label: format!("{} (from {})", doc["model"].as_str().unwrap_or("plan"), path.display()),
        concurrency: running,
        weights_ms: f("weights")?,
        kv_ms: f("kv")?,
        compute_ms: f("compute")?,
        communication_ms: f("communication")?,
        overhead_ms: f("overhead")?,
        step_ms: total - prefill,
        allreduces_per_step: allreduces.map(|a| a + qk),
    })
}

/// The longest step term a plan document may give, ms (an hour).
const MAX_STEP_MS: f64 = 3.6e6;

/// The most all-reduces a plan's step may count (a model of a few hundred layers runs a few per
/// layer).
const MAX_ALLREDUCES: f64 = 1e6;

/// How long the profile endpoints may take to answer (sglang's stop writes the trace first).
const PROFILE_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// `bench --profile N`: asks the server to record `steps` engine steps into `dir` (POST
/// /start_profile, sglang's shape); returns when it asked, to tell its trace from older ones.
/// An error says why, for a warning: the run goes on without.
pub async fn start_profile(client: &servetune_bench::client::HttpClient, steps: u64, dir: &Path) -> Result<SystemTime, String> {
    let asked = SystemTime::now();
    let ask = |body: serde_json::Value| async move {
        client
            .simple(http::Method::POST, "/start_profile", bytes::Bytes::from(body.to_string()), PROFILE_LIMIT)
            .await
            .map_err(|e| format!("POST /start_profile failed: {e}"))
    };
    let mut r = ask(serde_json::json!({"output_dir": dir.display().to_string(), "num_steps": steps})).await?;
    // A server that writes profiles only under a directory of its own (`servetune sim
    // --profile-dir`) refuses this one: asked again without it, it uses its own, and
    // /stop_profile names the trace.
    if r.status == 400 && String::from_utf8_lossy(&r.body).contains("output_dir") {
        r = ask(serde_json::json!({"num_steps": steps})).await?;
    }
    if r.status != 200 {
        return Err(format!("POST /start_profile answered {}: {}", r.status, String::from_utf8_lossy(&r.body).trim()));
    }
    Ok(asked)
}

/// Stops the server's profiler; returns the trace it wrote: the path the answer names (the
/// simulator's), else the newest `*.trace.json*` written in `dir` since `since`, when this machine
/// can read it (sglang's).
pub async fn stop_profile(client: &servetune_bench::client::HttpClient, dir: &Path, since: SystemTime) -> Result<PathBuf, String> {
    let r = client
        .simple(http::Method::POST, "/stop_profile", bytes::Bytes::new(), PROFILE_LIMIT)
        .await
        .map_err(|e| format!("POST /stop_profile failed: {e}"))?;
    let text = String::from_utf8_lossy(&r.body).trim().to_string();
    if r.status != 200 {
        // sglang stops by itself after num_steps and then refuses /stop_profile; the trace is
        // written all the same.
        return newest_trace(dir, since).ok_or_else(|| format!("POST /stop_profile answered {}: {text}", r.status));
    }
    let named = serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v["trace_path"].as_str().map(PathBuf::from));
    if let Some(p) = named {
        return Ok(p);
    }
    newest_trace(dir, since).ok_or_else(|| {
        format!(
            "the server stopped profiling ({text}) but no *.trace.json* is readable under {} here: look there on the server's machine",
            dir.display()
        )
    })
}

fn newest_trace(dir: &Path, since: SystemTime) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains(".trace.json"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .filter(|(t, _)| *t >= since)
        .max()
        .map(|(_, p)| p)
}

/// Prints where the trace is and, when it is readable here, its analysis (to stderr when stdout
/// carries a machine-readable document).
pub fn report_captured(path: &Path, stdout_taken: bool) {
    if stdout_taken {
        crate::tell!("profile: the server wrote {} (analyse it with `servetune trace {}`)", path.display(), path.display());
        return;
    }
    crate::say!("\nprofile: the server wrote {}", path.display());
    if !path.is_file() {
        crate::say!("  (not readable from this machine: copy it here and run `servetune trace {}`)", path.display());
        return;
    }
    match analyze(path, 1.0, None) {
        Ok(r) => {
            let _ = emit(&r, None);
        }
        Err(f) => crate::tell!("warning: the captured trace could not be analysed: {}", f.msg),
    }
}
