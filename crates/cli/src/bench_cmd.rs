//! `servetune bench`: flags -> [`BenchConfig`], run, render, write files, exit code.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, ValueEnum};
use servetune_bench::api::Api;
use servetune_bench::definitions::Definitions;
use servetune_bench::runner::{self, Outcome};
use servetune_bench::spec::{self, parse_duration, Arrival, BenchConfig, LengthDist, Load, PromptSource, Stop};
use servetune_bench::{export, BenchError, Progress};

use crate::Failure;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ApiArg {
    /// OpenAI `/v1/completions`
    OpenaiCompletions,
    /// OpenAI `/v1/chat/completions`
    OpenaiChat,
    /// sglang native `/generate`
    Sglang,
}

impl From<ApiArg> for Api {
    fn from(a: ApiArg) -> Self {
        match a {
            ApiArg::OpenaiCompletions => Api::OpenaiCompletions,
            ApiArg::OpenaiChat => Api::OpenaiChat,
            ApiArg::Sglang => Api::Sglang,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DefsArg {
    Servetune,
    Sglang,
    Vllm,
    Aiperf,
    Guidellm,
}

impl From<DefsArg> for Definitions {
    fn from(d: DefsArg) -> Self {
        match d {
            DefsArg::Servetune => Definitions::Servetune,
            DefsArg::Sglang => Definitions::Sglang,
            DefsArg::Vllm => Definitions::Vllm,
            DefsArg::Aiperf => Definitions::Aiperf,
            DefsArg::Guidellm => Definitions::Guidellm,
        }
    }
}

/// Load-test a serving endpoint: closed loop (--concurrency) or open loop (--rate), one point or a
/// sweep. Latencies are measured from the intended send time (corrected for coordinated omission)
/// and from the actual send time.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  servetune bench --url http://127.0.0.1:30000 --concurrency 1,8,64,256 --requests 200 --input-len 1024 --output-len 256 --json out.json\n  servetune bench --url http://127.0.0.1:8000 --rate 2,4,8 --arrival poisson --duration 60s --slo ttft:p99<2s,tpot:p90<50ms"
)]
pub struct BenchArgs {
    /// Base URL of the server, e.g. http://127.0.0.1:30000
    #[arg(long)]
    pub url: String,
    /// API to speak
    #[arg(long, value_enum, default_value = "openai-completions")]
    pub api: ApiArg,
    /// Model name; found from /v1/models when omitted
    #[arg(long)]
    pub model: Option<String>,
    /// Environment variable holding the API key (sent as a Bearer token, never printed)
    #[arg(long, default_value = "OPENAI_API_KEY", value_name = "NAME")]
    pub api_key_env: String,
    /// Do not stream: one JSON response per request (TTFT then equals E2E)
    #[arg(long)]
    pub no_stream: bool,

    /// Closed loop: requests kept in flight; a list sweeps (1,8,64,256)
    #[arg(long, value_delimiter = ',', value_name = "N[,N...]")]
    pub concurrency: Vec<u32>,
    /// Open loop: arrivals per second; a list sweeps (1,2,4)
    #[arg(long, value_delimiter = ',', value_name = "R[,R...]")]
    pub rate: Vec<f64>,
    /// Open-loop inter-arrival distribution: poisson, constant, gamma:SHAPE
    #[arg(long, default_value = "poisson")]
    pub arrival: String,
    /// Open loop: at most this many requests in flight (waiting shows in the corrected latencies)
    #[arg(long, value_name = "N")]
    pub max_concurrency: Option<u32>,
    /// Ramp the load up over this time (closed: slots start staggered; open: the rate grows linearly)
    #[arg(long, default_value = "0s", value_name = "DURATION")]
    pub ramp_up: String,

    /// Measured requests per load point (warmup not included)
    #[arg(long, value_name = "N")]
    pub requests: Option<u64>,
    /// Measured time per load point (e.g. 60s, 5m)
    #[arg(long, value_name = "DURATION")]
    pub duration: Option<String>,
    /// Requests sent first and excluded from every statistic
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub warmup: u64,

    /// Prompt tokens: N, uniform:LO..HI, or normal:MEAN,STD
    #[arg(long, default_value = "128", value_name = "LEN")]
    pub input_len: String,
    /// Output tokens (max_tokens): N, uniform:LO..HI, or normal:MEAN,STD
    #[arg(long, default_value = "128", value_name = "LEN")]
    pub output_len: String,
    /// Tokens of shared prefix in front of each prompt (prefix-cache workloads)
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub prefix_len: u32,
    /// Number of distinct shared prefixes
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub prefix_groups: u32,
    /// Prompts from a JSONL file ({"prompt": ...} per line) or a ShareGPT JSON file
    #[arg(long, value_name = "FILE")]
    pub dataset: Option<PathBuf>,
    /// A local tokenizer.json for exact token counts
    #[arg(long, value_name = "FILE")]
    pub tokenizer: Option<PathBuf>,
    /// Do not calibrate prompt lengths from the server's reported prompt tokens
    #[arg(long)]
    pub no_calibrate: bool,
    /// Seed of the workload and the arrival schedule
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Force exactly --output-len tokens: ignore_eos/min_tokens, plus an EOS logit_bias when the EOS id is known
    #[arg(long)]
    pub ignore_eos: bool,
    /// EOS token id for the logit_bias sent with --ignore-eos
    #[arg(long, value_name = "ID")]
    pub eos_token_id: Option<u32>,
    /// Per-request time limit
    #[arg(long, default_value = "600s", value_name = "DURATION")]
    pub timeout: String,
    /// After a stop (Ctrl-C), how long in-flight requests may finish
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub drain_timeout: String,

    /// Service-level objectives for goodput, e.g. ttft:p99<2s,tpot:p90<50ms,e2e:p99<30s
    #[arg(long, value_name = "SLOS")]
    pub slo: Option<String>,
    /// Prometheus endpoint to scrape during the run ("off" to disable; default: the server's /metrics)
    #[arg(long, value_name = "URL")]
    pub metrics_url: Option<String>,
    /// Scrape interval
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub scrape_interval: String,
    /// Also print the latencies under another tool's definitions
    #[arg(long, value_enum, value_name = "TOOL")]
    pub definitions: Option<DefsArg>,

    /// Write the report as JSON ("-" for stdout)
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write one JSON line per request
    #[arg(long, value_name = "FILE")]
    pub records: Option<PathBuf>,
    /// Write one CSV row per load point
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write a Markdown summary
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// No progress line and no summary on stdout
    #[arg(long, short)]
    pub quiet: bool,
}

/// Resolves the flags into a checked configuration.
pub fn resolve(a: &BenchArgs) -> Result<BenchConfig, spec::InputError> {
    let bad = |m: String| spec::InputError(m);
    if !a.concurrency.is_empty() && !a.rate.is_empty() {
        return Err(bad("--concurrency and --rate contradict each other: --concurrency is a closed loop, --rate an open loop; give one (cap an open loop with --max-concurrency)".into()));
    }
    if a.rate.is_empty() {
        if a.max_concurrency.is_some() {
            return Err(bad("--max-concurrency caps an open loop: use it with --rate (for a closed loop give --concurrency)".into()));
        }
        if a.arrival != "poisson" {
            return Err(bad("--arrival shapes an open loop: use it with --rate".into()));
        }
    }
    let arrival = Arrival::parse(&a.arrival)?;
    let loads: Vec<Load> = if !a.rate.is_empty() {
        a.rate.iter().map(|&rate| Load::Open { rate, arrival, max_concurrency: a.max_concurrency }).collect()
    } else {
        a.concurrency.iter().map(|&c| Load::Closed { concurrency: c }).collect()
    };
    let duration = a.duration.as_deref().map(|d| parse_duration("--duration", d)).transpose()?;
    let prompts = match &a.dataset {
        Some(path) => {
            if a.prefix_len > 0 {
                return Err(bad("--prefix-len builds random prompts; it cannot be combined with --dataset".into()));
            }
            PromptSource::Dataset { path: path.clone() }
        }
        None => PromptSource::Random {
            input: LengthDist::parse("--input-len", &a.input_len)?,
            prefix_len: a.prefix_len,
            prefix_groups: a.prefix_groups,
        },
    };
    let slos = a.slo.as_deref().map(spec::parse_slos).transpose()?.unwrap_or_default();
    let metrics_url = match a.metrics_url.as_deref() {
        None => None,
        Some("off") | Some("none") => Some(None),
        Some(u) => Some(Some(u.to_string())),
    };
    let api_key = std::env::var(&a.api_key_env).ok().filter(|k| !k.is_empty());
    let cfg = BenchConfig {
        base_url: a.url.clone(),
        api: a.api.into(),
        model: a.model.clone(),
        api_key,
        stream: !a.no_stream,
        loads,
        stop: Stop { requests: a.requests, duration },
        warmup: a.warmup,
        ramp_up: parse_duration("--ramp-up", &a.ramp_up)?,
        prompts,
        output: LengthDist::parse("--output-len", &a.output_len)?,
        seed: a.seed,
        ignore_eos: a.ignore_eos,
        eos_token_id: a.eos_token_id,
        timeout: parse_duration("--timeout", &a.timeout)?,
        slos,
        tokenizer_path: a.tokenizer.clone(),
        metrics_url,
        scrape_interval: parse_duration("--scrape-interval", &a.scrape_interval)?.max(std::time::Duration::from_millis(100)),
        drain_timeout: parse_duration("--drain-timeout", &a.drain_timeout)?,
        calibrate: !a.no_calibrate,
    };
    cfg.validate()?;
    Ok(cfg)
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("cannot start the async runtime: {e}")))
}

pub fn run(a: BenchArgs) -> Result<(), Failure> {
    let cfg = resolve(&a).map_err(|e| Failure::usage(e.0))?;
    let key_env = cfg.api_key.as_ref().map(|_| a.api_key_env.clone());
    let rt = runtime()?;
    let outcome = rt.block_on(async {
        let prepared = runner::prepare(cfg, key_env).await.map_err(|e| match e {
            BenchError::Input(i) => Failure::usage(i.0),
            BenchError::Runtime(r) => Failure::runtime(r),
        })?;
        let (int_tx, int_rx) = tokio::sync::watch::channel(false);
        let drain = prepared.cfg.drain_timeout;
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                crate::tell!(
                    "\nstopping: no new requests; in-flight requests get {:.0}s to finish, then results are written (marked partial)",
                    drain.as_secs_f64()
                );
                let _ = int_tx.send(true);
            }
        });
        let progress = Arc::new(Progress::default());
        let bar = crate::progress::spawn(Arc::clone(&progress), !a.quiet);
        let out = runner::run(&prepared, int_rx, progress, a.definitions.map(Into::into)).await;
        crate::progress::finish(bar);
        Ok::<Outcome, Failure>(out)
    })?;
    rt.shutdown_timeout(std::time::Duration::from_millis(100));
    let rep = &outcome.report;

    let mut write_errors = Vec::new();
    if !a.quiet {
        let mut out = std::io::stdout().lock();
        if let Err(e) = export::write_terminal(rep, &mut out) {
            write_errors.push(format!("stdout: {e}"));
        }
    }
    let mut write = |path: &Option<PathBuf>, f: &dyn Fn(&mut dyn Write) -> std::io::Result<()>| {
        if let Some(p) = path {
            if let Err(e) = write_file(p, f) {
                write_errors.push(format!("{}: {e}", p.display()));
            }
        }
    };
    write(&a.json, &|w| export::write_json(rep, w));
    write(&a.records, &|w| export::write_records(rep, &outcome.records, w));
    write(&a.csv, &|w| export::write_csv(rep, w));
    write(&a.markdown, &|w| export::write_markdown(rep, w));
    if !write_errors.is_empty() {
        return Err(Failure::runtime(format!("could not write results: {}", write_errors.join("; "))));
    }
    verdict(rep)
}

fn write_file(p: &Path, f: &dyn Fn(&mut dyn Write) -> std::io::Result<()>) -> std::io::Result<()> {
    if p.as_os_str() == "-" {
        let mut out = std::io::stdout().lock();
        return f(&mut out);
    }
    if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut w = BufWriter::new(File::create(p)?);
    f(&mut w)?;
    w.flush()
}

/// Exit status from the results: every request failing is a failure; when they all failed with
/// 404/405 or could not connect, the input (URL or API) is what is wrong.
fn verdict(rep: &servetune_bench::BenchReport) -> Result<(), Failure> {
    let completed: u64 = rep.runs.iter().map(|r| r.requests.completed).sum();
    let failed: u64 = rep.runs.iter().map(|r| r.requests.failed).sum();
    if completed > 0 || failed == 0 {
        return Ok(());
    }
    let example = rep.runs.iter().flat_map(|r| r.requests.error_examples.values().flatten()).next().cloned().unwrap_or_default();
    let all_404 = rep.runs.iter().all(|r| r.requests.errors.get("http_status").copied().unwrap_or(0) == r.requests.failed)
        && (example.contains("HTTP 404") || example.contains("HTTP 405"));
    let all_connect = rep.runs.iter().all(|r| r.requests.errors.get("connect").copied().unwrap_or(0) == r.requests.failed);
    if all_404 {
        Err(Failure::usage(format!(
            "every request failed: {example}\n  the server does not serve {} there: pick the API it speaks with --api (openai-completions, openai-chat, sglang) or fix the --url path",
            rep.config.api.path()
        )))
    } else if all_connect {
        Err(Failure::usage(format!("every request failed to connect: {example}\n  check --url and that the server is up")))
    } else {
        Err(Failure::runtime(format!("every request failed ({failed}); e.g. {example}. The results were written")))
    }
}
