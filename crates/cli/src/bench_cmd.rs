//! `servetune bench`: flags -> [`BenchConfig`], run, render, write files, exit code.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use clap::{Args, ValueEnum};
use servetune_bench::api::Api;
use servetune_bench::definitions::Definitions;
use servetune_bench::record::{ErrorKind, RequestRecord};
use servetune_bench::runner::{self, Outcome};
use servetune_bench::spec::{self, parse_duration, Arrival, BenchConfig, LengthDist, Limits, Load, PromptSource, Stop};
use servetune_bench::{export, sweep, BenchError, Control, Progress, Stopping, SweepObserver};
use tokio::sync::watch;

use crate::{ExitCode, Failure};

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
    Sglang,
    Vllm,
    Aiperf,
    Guidellm,
}

impl From<DefsArg> for Definitions {
    fn from(d: DefsArg) -> Self {
        match d {
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
    allow_negative_numbers = true,
    after_help = "Examples:\n  servetune bench --url http://127.0.0.1:30000 --concurrency 1,8,64,256 --requests 200 --input-len 1024 --output-len 256 --json out.json\n  servetune bench --url http://127.0.0.1:8000 --rate 2,4,8 --arrival poisson --duration 60s --slo ttft:p99<2s,tpot:p90<50ms"
)]
pub struct BenchArgs {
    /// Record N engine steps with the server's profiler during the run (POST /start_profile with
    /// num_steps N, /stop_profile after; sglang and the simulator), then say where the trace is
    /// and analyse it when this machine can read it
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub profile: Option<u64>,
    /// Base URL of the server, e.g. http://127.0.0.1:30000
    #[arg(long)]
    pub url: String,
    /// API to speak
    #[arg(long, value_enum, default_value = "openai-completions")]
    pub api: ApiArg,
    /// Model name; found from /v1/models when omitted
    #[arg(long)]
    pub model: Option<String>,
    /// Environment variable holding the API key, sent as a Bearer token to --url's origin only and
    /// never printed; it must be set when given. Without the flag, OPENAI_API_KEY is used when set
    #[arg(long, value_name = "NAME")]
    pub api_key_env: Option<String>,
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
    /// Measured time per load point (e.g. 60s, 5m): no request is sent after it, and those in flight then finish or reach --timeout
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
    /// Whole-request time limit, send to last byte
    #[arg(long, default_value = "600s", value_name = "DURATION")]
    pub timeout: String,
    /// Time limit for a TCP connection to open
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub connect_timeout: String,
    /// Time limit from sending a request to its response head, and from the head to the first byte of a stream (a queued request waits this long)
    #[arg(long, default_value = "300s", value_name = "DURATION")]
    pub first_byte_timeout: String,
    /// Longest silence allowed inside a response once it has started (between chunks)
    #[arg(long, default_value = "120s", value_name = "DURATION")]
    pub idle_timeout: String,
    /// Time limit for each start-up request (GET /v1/models, calibration, the /metrics check)
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub preflight_timeout: String,
    /// After a stop (SIGINT, SIGTERM, SIGHUP), how long in-flight requests may finish; a second signal ends it at once
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub drain_timeout: String,

    /// Service-level objectives for goodput, e.g. ttft:p99<2s,tpot:p90<50ms,e2e:p99<30s
    #[arg(long, value_name = "SLOS")]
    pub slo: Option<String>,
    /// Prometheus endpoint to scrape during the run ("off" to disable; default: the server's /metrics)
    #[arg(long, value_name = "URL")]
    pub metrics_url: Option<String>,
    /// Environment variable holding a key for a --metrics-url on another origin (the API key goes to --url's origin only)
    #[arg(long, value_name = "NAME")]
    pub metrics_api_key_env: Option<String>,
    /// Scrape interval (100ms or more)
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub scrape_interval: String,
    /// Time limit for each metrics scrape
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub scrape_timeout: String,
    /// Also print the latencies under another tool's definitions
    #[arg(long, value_enum, value_name = "TOOL")]
    pub definitions: Option<DefsArg>,

    /// Write the report as JSON ("-" for stdout: stdout then holds only JSON, the text report goes to stderr)
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write one JSON line per request, each as its request finishes (kept when the run is stopped)
    #[arg(long, value_name = "FILE")]
    pub records: Option<PathBuf>,
    /// Write one CSV row per load point
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write a Markdown summary
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// No progress line and no text report
    #[arg(long, short)]
    pub quiet: bool,
}

/// Files a bench process holds besides its connections: standard streams, the runtime's, the
/// outputs, a metrics scrape.
const FILES_BESIDE_CONNECTIONS: u64 = 32;

/// Each request in flight holds a connection, so `in_flight` at once (`flag`'s `n`, or fewer when
/// the point sends fewer) needs about that many open files: more than the process may open would
/// fail the excess as connect errors, blamed on the server. `limit` is the open-file limit
/// (already raised to the hard limit at start); None where unknown.
fn check_open_files(flag: &str, n: u32, in_flight: u32, limit: Option<u64>) -> Result<(), spec::InputError> {
    let need = u64::from(in_flight) + FILES_BESIDE_CONNECTIONS;
    match limit {
        Some(limit) if need > limit => Err(spec::InputError(format!(
            "{flag} {n} needs about {need} open files (a connection per request in flight), but this process may open {limit} (the hard limit of `ulimit -n`): raise it (`ulimit -n {need}`, LimitNOFILE= for a service, --ulimit nofile= for a container) or give a lower {flag}"
        ))),
        _ => Ok(()),
    }
}

/// Resolves the flags into a checked configuration.
pub fn resolve(a: &BenchArgs) -> Result<BenchConfig, spec::InputError> {
    let bad = |m: &str| spec::InputError(m.to_string());
    if !a.concurrency.is_empty() && !a.rate.is_empty() {
        return Err(bad("--concurrency and --rate contradict each other: --concurrency is a closed loop, --rate an open loop; give one (cap an open loop with --max-concurrency)"));
    }
    if a.rate.is_empty() {
        if a.max_concurrency.is_some() {
            return Err(bad("--max-concurrency caps an open loop: use it with --rate (for a closed loop give --concurrency)"));
        }
        if a.arrival != "poisson" {
            return Err(bad("--arrival shapes an open loop: use it with --rate"));
        }
    }
    let arrival = Arrival::parse(&a.arrival)?;
    let loads: Vec<Load> = if !a.rate.is_empty() {
        a.rate.iter().map(|&rate| Load::Open { rate, arrival, max_concurrency: a.max_concurrency }).collect()
    } else {
        a.concurrency.iter().map(|&c| Load::Closed { concurrency: c }).collect()
    };
    // A point never has more in flight than it sends: --requests (and the warmup) bound it.
    let sends = a.requests.filter(|_| a.duration.is_none()).map(|r| r.saturating_add(a.warmup));
    if let Some((flag, n)) = loads
        .iter()
        .filter_map(|l| match *l {
            Load::Closed { concurrency } => Some(("--concurrency", concurrency)),
            Load::Open { max_concurrency: Some(m), .. } => Some(("--max-concurrency", m)),
            Load::Open { .. } => None,
        })
        .max_by_key(|(_, n)| *n)
    {
        let in_flight = sends.map_or(n, |s| n.min(u32::try_from(s).unwrap_or(u32::MAX)));
        check_open_files(flag, n, in_flight, crate::open_file_limit())?;
    }
    let duration = a.duration.as_deref().map(|d| parse_duration("--duration", d)).transpose()?;
    let prompts = match &a.dataset {
        Some(path) => {
            if a.prefix_len > 0 {
                return Err(bad("--prefix-len builds random prompts; it cannot be combined with --dataset"));
            }
            PromptSource::Dataset { path: path.clone() }
        }
        None => PromptSource::Random {
            input: LengthDist::parse("--input-len", &a.input_len)?,
            prefix_len: a.prefix_len,
            prefix_groups: a.prefix_groups,
        },
    };
    let slos = a.slo.as_deref().map(|s| spec::parse_slos("--slo", s)).transpose()?.unwrap_or_default();
    let metrics_url = match a.metrics_url.as_deref() {
        None => None,
        Some("off") | Some("none") => Some(None),
        Some(u) => Some(Some(u.to_string())),
    };
    let (api_key, metrics_api_key) = keys(a)?;
    let cfg = BenchConfig {
        base_url: a.url.clone(),
        api: a.api.into(),
        model: a.model.clone(),
        api_key,
        metrics_api_key,
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
        limits: limits(a)?,
        slos,
        tokenizer_path: a.tokenizer.clone(),
        metrics_url,
        scrape_interval: parse_duration("--scrape-interval", &a.scrape_interval)?,
        drain_timeout: parse_duration("--drain-timeout", &a.drain_timeout)?,
        calibrate: !a.no_calibrate,
    };
    cfg.validate()?;
    Ok(cfg)
}

fn limits(a: &BenchArgs) -> Result<Limits, spec::InputError> {
    Ok(Limits {
        connect: parse_duration("--connect-timeout", &a.connect_timeout)?,
        first_byte: parse_duration("--first-byte-timeout", &a.first_byte_timeout)?,
        idle: parse_duration("--idle-timeout", &a.idle_timeout)?,
        request: parse_duration("--timeout", &a.timeout)?,
        preflight: parse_duration("--preflight-timeout", &a.preflight_timeout)?,
        scrape: parse_duration("--scrape-timeout", &a.scrape_timeout)?,
    })
}

/// The variable named by `flag`, which must be set and non-empty.
fn required_env(flag: &str, name: &str) -> Result<String, spec::InputError> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => Err(spec::InputError(format!(
            "{flag} {name}: the variable {name} is not set (or is empty): export it, or leave {flag} out to send no key"
        ))),
    }
}

/// The API key (`--api-key-env`, else `OPENAI_API_KEY` when set) and the metrics key.
fn keys(a: &BenchArgs) -> Result<(Option<String>, Option<String>), spec::InputError> {
    let api = match &a.api_key_env {
        Some(name) => Some(required_env("--api-key-env", name)?),
        None => std::env::var(DEFAULT_KEY_ENV).ok().filter(|k| !k.is_empty()),
    };
    let metrics = a.metrics_api_key_env.as_deref().map(|n| required_env("--metrics-api-key-env", n)).transpose()?;
    if metrics.is_some() && !matches!(a.metrics_url.as_deref(), Some(u) if u != "off" && u != "none") {
        return Err(spec::InputError("--metrics-api-key-env names a key for --metrics-url: give --metrics-url too".into()));
    }
    Ok((api, metrics))
}

/// The variable read for the API key when `--api-key-env` is not given.
const DEFAULT_KEY_ENV: &str = "OPENAI_API_KEY";

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    sweep::client_runtime().map_err(|e| Failure::runtime(format!("cannot start the async runtime: {e}")))
}

/// Where an output goes: stdout (`-`) or a file opened before the first request.
enum Target {
    Stdout,
    /// A file, opened (created where missing) but not emptied until the first write: a run that
    /// measures nothing leaves a file that was there as it was.
    File {
        w: BufWriter<File>,
        /// The path, to remove the file if this run created it and measured nothing.
        path: PathBuf,
        /// Whether this run created the file (nothing was at the path).
        created: bool,
        /// Whether the first write has emptied it.
        started: bool,
    },
}

impl Target {
    /// Opens `path` for `flag` now, so an unwritable path is refused before anything is measured.
    fn open(flag: &str, path: &Path) -> Result<Self, Failure> {
        if path.as_os_str() == "-" {
            return Ok(Target::Stdout);
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| cannot_write(flag, path, &e))?;
        }
        let created = std::fs::symlink_metadata(path).is_err();
        let f =
            std::fs::OpenOptions::new().write(true).create(true).truncate(false).open(path).map_err(|e| cannot_write(flag, path, &e))?;
        Ok(Target::File { w: BufWriter::new(f), path: path.to_path_buf(), created, started: false })
    }

    fn write(&mut self, f: &dyn Fn(&mut dyn Write) -> std::io::Result<()>) -> std::io::Result<()> {
        match self {
            Target::Stdout => {
                let mut out = std::io::stdout().lock();
                f(&mut out)?;
                out.flush()
            }
            Target::File { w, started, .. } => {
                if !*started {
                    // Empty a regular file before its first bytes (a device or a pipe has nothing
                    // to empty).
                    if w.get_ref().metadata()?.is_file() {
                        w.get_ref().set_len(0)?;
                    }
                    *started = true;
                }
                f(w)?;
                w.flush()
            }
        }
    }

    /// Empties a regular file nothing was written to yet (a run that measured nothing keeps no
    /// earlier run's content under its name).
    fn empty_if_unwritten(&mut self) -> std::io::Result<()> {
        self.write(&|_| Ok(()))
    }

    /// Removes the file if this run created it and wrote nothing to it; a file that was there
    /// before, or a device, stays as it was.
    fn discard(&self) {
        if let Target::File { path, created: true, started: false, w } = self {
            if w.get_ref().metadata().is_ok_and(|m| m.is_file() && m.len() == 0) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

fn cannot_write(flag: &str, path: &Path, e: &std::io::Error) -> Failure {
    Failure::usage(format!("{flag} {}: cannot open it for writing ({e}): give a writable file path", path.display()))
}

/// `--records`: each finished request is written and flushed at once.
struct RecordsWriter {
    out: Mutex<Target>,
    error: Mutex<Option<String>>,
}

impl SweepObserver for RecordsWriter {
    fn record(&self, run_label: &str, rec: &RequestRecord) {
        let res = match self.out.lock() {
            Ok(mut t) => t.write(&|w| export::write_record_line(run_label, rec, w)),
            Err(_) => Ok(()),
        };
        if let (Err(e), Ok(mut slot)) = (res, self.error.lock()) {
            slot.get_or_insert_with(|| e.to_string());
        }
    }
}

/// Every output, opened before the first request.
struct Outputs {
    json: Option<Target>,
    csv: Option<Target>,
    markdown: Option<Target>,
    records: Option<Arc<RecordsWriter>>,
    /// One output is stdout: the text report goes to stderr.
    stdout_taken: bool,
}

impl Outputs {
    fn open(a: &BenchArgs) -> Result<Self, Failure> {
        let flags = [("--json", &a.json), ("--records", &a.records), ("--csv", &a.csv), ("--markdown", &a.markdown)];
        let dashes: Vec<&str> = flags.iter().filter(|(_, p)| p.as_deref().is_some_and(|p| p.as_os_str() == "-")).map(|(f, _)| *f).collect();
        if dashes.len() > 1 {
            return Err(Failure::usage(format!(
                "{} each ask for stdout (-): only one output may be -, give the others a file",
                dashes.join(" and ")
            )));
        }
        crate::check_outputs(
            &flags.map(|(f, p)| (f, p.as_deref())),
            &[("the --dataset file", a.dataset.as_deref()), ("the --tokenizer file", a.tokenizer.as_deref())],
        )?;
        let open = |flag: &str, p: &Option<PathBuf>| p.as_deref().map(|p| Target::open(flag, p)).transpose();
        let records = open("--records", &a.records)?.map(|t| Arc::new(RecordsWriter { out: Mutex::new(t), error: Mutex::new(None) }));
        Ok(Self {
            json: open("--json", &a.json)?,
            csv: open("--csv", &a.csv)?,
            markdown: open("--markdown", &a.markdown)?,
            records,
            stdout_taken: !dashes.is_empty(),
        })
    }

    /// Removes the files this run created for a run that never started (nothing was measured);
    /// a file that was at an output path before the run keeps its content.
    fn discard(&mut self) {
        for t in [&self.json, &self.csv, &self.markdown].into_iter().flatten() {
            t.discard();
        }
        if let Some(r) = &self.records {
            if let Ok(t) = r.out.lock() {
                t.discard();
            }
        }
    }

    /// Writes the report's files; returns the errors met (records included).
    fn write(&mut self, a: &BenchArgs, rep: &servetune_bench::BenchReport) -> Vec<String> {
        let mut errors = Vec::new();
        let mut put = |t: &mut Option<Target>, path: &Option<PathBuf>, f: &dyn Fn(&mut dyn Write) -> std::io::Result<()>| {
            if let (Some(t), Some(p)) = (t.as_mut(), path) {
                if let Err(e) = t.write(f) {
                    errors.push(format!("{}: {e}", p.display()));
                }
            }
        };
        put(&mut self.json, &a.json, &|w| export::write_json(rep, w));
        put(&mut self.csv, &a.csv, &|w| export::write_csv(rep, w));
        put(&mut self.markdown, &a.markdown, &|w| export::write_markdown(rep, w));
        // A records file no request reached (a stop before the first) holds this run's nothing,
        // not an earlier run's lines.
        if let (Some(r), Some(p)) = (&self.records, &a.records) {
            if let Err(e) =
                r.out.lock().map_err(|_| std::io::Error::other("the records writer panicked")).and_then(|mut t| t.empty_if_unwritten())
            {
                errors.push(format!("{}: {e}", p.display()));
            }
        }
        if let (Some(r), Some(p)) = (&self.records, &a.records) {
            if let Some(e) = r.error.lock().ok().and_then(|e| e.clone()) {
                errors.push(format!("{}: {e}", p.display()));
            }
        }
        errors
    }
}

/// Signals that stop a run, and the exit code each gives (128 + its number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopSignal {
    Hangup,
    Interrupt,
    Terminate,
}

impl StopSignal {
    fn exit_code(self) -> ExitCode {
        use crate::exit::{SIGHUP, SIGINT, SIGTERM};
        ExitCode::Signal(match self {
            StopSignal::Hangup => SIGHUP,
            StopSignal::Interrupt => SIGINT,
            StopSignal::Terminate => SIGTERM,
        })
    }

    fn name(self) -> &'static str {
        match self {
            StopSignal::Hangup => "SIGHUP",
            StopSignal::Interrupt => "SIGINT",
            StopSignal::Terminate => "SIGTERM",
        }
    }
}

/// Listens for SIGINT, SIGTERM and SIGHUP: the first stops sending and drains, the second cuts
/// the drain short. The first signal is kept for the exit code.
/// The first stop signal received, once one has come.
type FirstSignal = Arc<Mutex<Option<StopSignal>>>;

fn listen_for_signals(drain: std::time::Duration) -> Result<(watch::Receiver<Stopping>, FirstSignal), Failure> {
    use tokio::signal::unix::{signal, SignalKind};
    let mk = |k: SignalKind| signal(k).map_err(|e| Failure::runtime(format!("cannot listen for signals: {e}")));
    let (mut int, mut term, mut hup) = (mk(SignalKind::interrupt())?, mk(SignalKind::terminate())?, mk(SignalKind::hangup())?);
    let (tx, rx) = watch::channel(Stopping::Running);
    let first = Arc::new(Mutex::new(None));
    let first2 = Arc::clone(&first);
    tokio::spawn(async move {
        loop {
            let sig = tokio::select! {
                _ = int.recv() => StopSignal::Interrupt,
                _ = term.recv() => StopSignal::Terminate,
                _ = hup.recv() => StopSignal::Hangup,
            };
            if *tx.borrow() == Stopping::Running {
                if let Ok(mut f) = first2.lock() {
                    *f = Some(sig);
                }
                crate::tell!(
                    "\n{}: stopping; no new requests. In-flight requests get {:.0}s to finish (a second signal ends them now), then results are written, marked partial",
                    sig.name(),
                    drain.as_secs_f64()
                );
                let _ = tx.send(Stopping::Draining);
            } else {
                crate::tell!("\n{}: cancelling the requests still in flight", sig.name());
                let _ = tx.send(Stopping::Abort);
                return;
            }
        }
    });
    Ok((rx, first))
}

/// Prepares the run (reads `--dataset` and `--tokenizer`, checks the server, calibrates) on a
/// task of its own, so that a stop signal meanwhile ends the command at once with 128+N: a
/// `--dataset` FIFO nobody writes to, or a slow server, does not hold a SIGTERM, SIGINT or SIGHUP
/// until its deadline. Nothing has been measured then, so nothing is written.
async fn prepare_or_stop(
    cfg: BenchConfig,
    key_env: Option<String>,
    mut stopping: watch::Receiver<Stopping>,
    signal: &FirstSignal,
) -> Result<runner::Prepared, Failure> {
    // On the blocking pool, not a worker: the dataset is read synchronously, and a worker held by
    // it could be the one the signal listener needs (one worker on a one-CPU machine).
    let rt = tokio::runtime::Handle::current();
    let task = tokio::task::spawn_blocking(move || rt.block_on(runner::prepare(cfg, key_env)));
    tokio::select! {
        done = task => match done {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(BenchError::Input(i))) => Err(Failure::usage(i.0)),
            Ok(Err(BenchError::Runtime(r))) => Err(Failure::runtime(r)),
            Err(e) => Err(Failure::runtime(format!("preparing the run failed: {e}"))),
        },
        _ = stopping.wait_for(|s| *s != Stopping::Running) => {
            let sig = signal.lock().ok().and_then(|s| *s).unwrap_or(StopSignal::Interrupt);
            Err(Failure {
                code: sig.exit_code(),
                msg: format!("stopped by {} while preparing (reading the inputs, checking the server): nothing was measured, nothing written", sig.name()),
            })
        }
    }
}

/// `servetune bench`: resolve, open outputs, prepare, run, write, and the exit code.
pub fn run(a: BenchArgs) -> Result<(), Failure> {
    let cfg = resolve(&a).map_err(|e| Failure::usage(e.0))?;
    let key_env = cfg.api_key.as_ref().map(|_| a.api_key_env.clone().unwrap_or_else(|| DEFAULT_KEY_ENV.into()));
    let mut outputs = Outputs::open(&a)?;
    let rt = runtime()?;
    let ran = rt.block_on(async {
        let (stopping, signal) = listen_for_signals(cfg.drain_timeout)?;
        let prepared = prepare_or_stop(cfg, key_env, stopping.clone(), &signal).await?;
        let profile_dir = std::env::temp_dir().join("servetune-profile");
        let profiling = match a.profile {
            Some(n) => {
                let _ = std::fs::create_dir_all(&profile_dir);
                crate::trace_cmd::start_profile(&prepared.client, n, &profile_dir)
                    .await
                    .map_err(|e| crate::tell!("warning: --profile: {e}; the run goes on without a trace"))
                    .ok()
            }
            None => None,
        };
        let progress = Arc::new(Progress::default());
        let observer = outputs.records.clone().map(|r| r as Arc<dyn SweepObserver>);
        let ctl = Control { stopping, progress: Arc::clone(&progress), observer };
        let bar = crate::progress::spawn(progress, !a.quiet);
        let out = sweep::run(&prepared, &ctl, a.definitions.map(Into::into)).await;
        crate::progress::finish(bar);
        let trace = match profiling {
            Some(since) => crate::trace_cmd::stop_profile(&prepared.client, &profile_dir, since)
                .await
                .map_err(|e| crate::tell!("warning: --profile: {e}"))
                .ok(),
            None => None,
        };
        let sig = signal.lock().ok().and_then(|s| *s);
        Ok::<(Outcome, Option<StopSignal>, Option<PathBuf>), Failure>((out, sig, trace))
    });
    // Before the result is looked at: dropping the runtime would wait for a read still blocked
    // (a `--dataset` FIFO nobody writes to, left behind by a stop while preparing).
    rt.shutdown_timeout(std::time::Duration::from_millis(100));
    let (outcome, signal, trace) = ran.inspect_err(|_| outputs.discard())?;
    let rep = &outcome.report;
    let mut write_errors = Vec::new();
    if !a.quiet {
        let res = if outputs.stdout_taken {
            export::write_terminal(rep, std::io::stderr().lock())
        } else {
            export::write_terminal(rep, std::io::stdout().lock())
        };
        if let Err(e) = res {
            write_errors.push(format!("the text report: {e}"));
        }
    }
    write_errors.extend(outputs.write(&a, rep));
    if let Some(t) = &trace {
        crate::trace_cmd::report_captured(t, outputs.stdout_taken);
    }
    if !write_errors.is_empty() {
        return Err(Failure::runtime(format!("could not write results: {}", write_errors.join("; "))));
    }
    let lost: u64 = rep.runs.iter().map(|r| r.requests.lost).sum();
    if lost > 0 {
        return Err(Failure::runtime(format!(
            "{lost} request(s) were lost to a panic in servetune (a bug; please report it); the results written miss them"
        )));
    }
    if let Some(sig) = signal {
        return Err(Failure {
            code: sig.exit_code(),
            msg: format!("stopped by {}: the results measured until then were written, marked partial", sig.name()),
        });
    }
    verdict(rep)
}

/// Exit status from the results: every request failing is a failure; when they all failed with
/// 404/405, another 4xx, or could not connect, the input (URL, API, request) is what is wrong.
fn verdict(rep: &servetune_bench::BenchReport) -> Result<(), Failure> {
    let completed: u64 = rep.runs.iter().map(|r| r.requests.completed).sum();
    let failed: u64 = rep.runs.iter().map(|r| r.requests.failed).sum();
    if completed > 0 || failed == 0 {
        return Ok(());
    }
    let count = |k: ErrorKind| rep.runs.iter().map(|r| r.requests.errors.get(&k).copied().unwrap_or(0)).sum::<u64>();
    let statuses = || rep.runs.iter().flat_map(|r| r.requests.http_statuses.keys().copied());
    let example =
        |k: ErrorKind| rep.runs.iter().find_map(|r| r.requests.error_examples.get(&k).and_then(|v| v.first())).cloned().unwrap_or_default();
    let any = rep.runs.iter().flat_map(|r| r.requests.error_examples.values().flatten()).next().cloned().unwrap_or_default();
    let all_http = count(ErrorKind::HttpStatus) == failed;
    if all_http && statuses().all(|s| s == 404 || s == 405) {
        Err(Failure::usage(format!(
            "every request failed: {}\n  the server does not serve {} there: pick the API it speaks with --api (openai-completions, openai-chat, sglang) or fix the --url path",
            example(ErrorKind::HttpStatus),
            rep.config.api.path()
        )))
    } else if all_http && statuses().all(|s| (400..500).contains(&s)) {
        Err(Failure::usage(format!(
            "the server refused every request: {}\n  fix what it names (prompt or output length, --model, the key); the results were written",
            example(ErrorKind::HttpStatus)
        )))
    } else if count(ErrorKind::NoTokens) == failed {
        Err(Failure::usage(format!(
            "no request returned an output token: {}\n  check that --api matches the server (openai-completions, openai-chat, sglang)",
            example(ErrorKind::NoTokens)
        )))
    } else if count(ErrorKind::Connect) == failed {
        Err(Failure::usage(format!(
            "every request failed to connect: {}\n  check --url and that the server is up",
            example(ErrorKind::Connect)
        )))
    } else {
        Err(Failure::runtime(format!("every request failed ({failed}); e.g. {any}. The results were written")))
    }
}
