//! `servetune campaign`: flags -> the campaign library; outcomes -> exit codes (0 progress,
//! 3 needs a person, 4 nothing left, 2 bad input, 1 runtime failure).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

use clap::{Args, Subcommand};
use servetune_campaign::campaign::{self, Answer, InitOptions, RunOptions, Stopped};
use servetune_campaign::engine;
use servetune_campaign::journal::Journal;
use servetune_campaign::planner::{StepKind, Verdict};
use servetune_campaign::CampaignError;
use servetune_campaign::{report, report_compare, report_html};
use servetune_model::spec::NamedModel;

use crate::{ExitCode, Failure};

/// Run a tuning campaign: a crash-safe journal of experiments on real servers, the next step with
/// its expected gain, and a question when a person is needed.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  servetune campaign init c1 --engine sglang --model /models/GLM-5 --catalog-model glm-5 --quant nvfp4 --goal 'output_tok_s>=1000 at tpot:p90<50ms'\n  servetune campaign continue c1 --until-blocked\n  servetune campaign answer c1 1 --done\n  servetune campaign report c1 --markdown status.md"
)]
pub struct CampaignArgs {
    #[command(subcommand)]
    cmd: Sub,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Probe the box and start a campaign journal in DIR
    Init(Box<InitArgs>),
    /// Re-probe the box (after moving it) and record the new environment
    Probe(ProbeArgs),
    /// Record a `servetune fabric p2p --json` document for the current environment (the report draws its matrices)
    Fabric(FabricArgs),
    /// Print the status: done / in progress / not done, and the next steps
    #[command(after_help = "Example:\n  servetune campaign status c1")]
    Status(DirArg),
    /// Show the ranked next steps without running them
    #[command(after_help = "Example:\n  servetune campaign next c1")]
    Next(DirArg),
    /// Run the top runnable step and record it (exit 0), or stop: 3 needs a person, 4 nothing left
    Continue(ContinueArgs),
    /// Answer a question: a text, --done or --declined
    Answer(AnswerArgs),
    /// Queue an experiment with knob values (runs before the planner's steps)
    Add(AddArgs),
    /// Write the status report as HTML (charts), Markdown and/or JSON
    Report(ReportArgs),
    /// Before/after: throughput and latency deltas and what changed, between two campaigns
    Compare(CompareArgs),
    /// Add a free-text note to the journal
    #[command(after_help = "Example:\n  servetune campaign note c1 \"BIOS: ACS disabled on all root ports\"")]
    Note(NoteArgs),
    /// List the engine templates and their knobs
    Engines(EnginesArgs),
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  servetune campaign init c1 --engine sim --model qwen3-30b-a3b --goal 'output_tok_s>=5000' --probe-root crates/probe/tests/fixtures/proxmox-lxc-8gpu\n  servetune campaign init c2 --engine llama-server --model tiny.gguf --goal 'output_tok_s>=100' --set n_threads=2 --gpu h200 --gpus 1"
)]
struct InitArgs {
    /// Campaign directory (journal, server logs, bench JSON files)
    dir: PathBuf,
    /// Engine template (see `servetune campaign engines`)
    #[arg(long)]
    engine: String,
    /// What the template's {model} becomes: a path, a Hugging Face id or a catalog name
    #[arg(long)]
    model: String,
    /// The performance model's catalog model for it, when --model is a path: a catalog name (glm-5) or a listed checkpoint's Hugging Face repository (zai-org/GLM-5-FP8) [default: --model's, when it is one of those]
    #[arg(long, value_name = "NAME")]
    catalog_model: Option<String>,
    /// Goal: output_tok_s>=N, optionally ' at ' latency objectives (tpot:p90<50ms)
    #[arg(long)]
    goal: String,
    /// Checkpoint format for the model's predictions (bf16, fp8, nvfp4, mxfp4, int4) [default: the format of the model's published checkpoint, as `servetune plan` takes it: that of the listed checkpoint repository --model (else --catalog-model) names, else the catalog model's published one; bf16 for a model outside the catalog]
    #[arg(long, value_name = "DTYPE")]
    quant: Option<String>,
    /// Knob values every experiment sets, KEY=VALUE (repeatable)
    #[arg(long = "set", value_name = "KNOB=VALUE")]
    set: Vec<String>,
    /// User engine templates (TOML, [[engine]] tables)
    #[arg(long, value_name = "FILE")]
    engines: Option<PathBuf>,
    /// Analyse a probe snapshot (servetune probe --capture DIR) instead of this box
    #[arg(long, value_name = "DIR")]
    probe_root: Option<PathBuf>,
    /// GPU model for predictions when the probe finds none (catalog name, e.g. h200)
    #[arg(long)]
    gpu: Option<String>,
    /// GPU count for predictions and {gpus} when the probe finds none
    #[arg(long)]
    gpus: Option<u32>,
    /// Benchmark concurrencies of every experiment
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 8, 32])]
    concurrency: Vec<u32>,
    /// Measured requests per concurrency
    #[arg(long, default_value_t = 32)]
    requests: u64,
    /// Prompt length of every benchmark request, in tokens
    #[arg(long, default_value_t = 256, value_name = "TOKENS")]
    input_len: u32,
    /// Output length of every benchmark request, in tokens
    #[arg(long, default_value_t = 64, value_name = "TOKENS")]
    output_len: u32,
    /// Per-request time limit
    #[arg(long, default_value = "120s", value_name = "DURATION")]
    request_timeout: String,
    /// Readiness time limit (default: the engine template's)
    #[arg(long, value_name = "DURATION")]
    ready_timeout: Option<String>,
    /// Environment variables whose values are secrets: stripped from fingerprints (repeatable)
    #[arg(long, value_name = "NAME")]
    secret_env: Vec<String>,
    /// Where experiments run: local (a process group here) or slurm (one batch job per experiment)
    #[arg(long, value_enum, default_value = "local")]
    executor: ExecutorArg,
    /// --executor slurm: the partition (default: the cluster's default partition)
    #[arg(long, value_name = "NAME", help_heading = "Slurm")]
    partition: Option<String>,
    /// --executor slurm: the account to charge
    #[arg(long, value_name = "NAME", help_heading = "Slurm")]
    account: Option<String>,
    /// --executor slurm: nodes per experiment (multi-node templates get {nnodes}, {node_rank}, {head})
    #[arg(long, default_value = "1", value_parser = at_least_one_node, help_heading = "Slurm")]
    nodes: std::num::NonZeroU32,
    /// --executor slurm: GPUs per node to ask for (default: the partition's gres, none on CPU nodes)
    #[arg(long, value_name = "N", help_heading = "Slurm")]
    gpus_per_node: Option<u32>,
    /// --executor slurm: each job's time limit in Slurm's syntax (2:00:00)
    #[arg(long, value_name = "TIME", help_heading = "Slurm")]
    slurm_time: Option<String>,
    /// --executor slurm: one more sbatch argument, a whole --flag=value word (repeatable)
    #[arg(long = "slurm-arg", value_name = "--FLAG=VALUE", allow_hyphen_values = true, help_heading = "Slurm")]
    slurm_args: Vec<String>,
    /// --executor slurm: how long a job may wait in the queue before the experiment fails
    #[arg(long, default_value = "1h", value_name = "DURATION", help_heading = "Slurm")]
    queue_timeout: String,
}

/// `--nodes`: a whole number of nodes, at least one (clap names the flag and exits with 2).
fn at_least_one_node(s: &str) -> Result<std::num::NonZeroU32, String> {
    let n: u32 = s.trim().parse().map_err(|_| format!("{s:?} is not a whole number of nodes"))?;
    std::num::NonZeroU32::new(n).ok_or_else(|| "give the number of nodes each experiment runs on (1 or more)".to_string())
}

/// A duration flag of at least one second (the journal keeps whole seconds).
fn whole_seconds(flag: &str, v: &str) -> Result<u64, Failure> {
    let d = servetune_stats::parse_duration(flag, v).map_err(|e| Failure::usage(e.0))?;
    match d.as_secs() {
        0 => Err(Failure::usage(format!("{flag} {v}: give at least 1s"))),
        s => Ok(s),
    }
}

/// Where experiments run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ExecutorArg {
    /// A process group on this machine
    Local,
    /// A Slurm batch job per experiment (sbatch, squeue, scancel)
    Slurm,
}

#[derive(Debug, Args)]
struct DirArg {
    /// Campaign directory
    dir: PathBuf,
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  servetune campaign probe c1 --probe-root crates/probe/tests/fixtures/proxmox-lxc-8gpu")]
struct ProbeArgs {
    /// Campaign directory
    dir: PathBuf,
    /// Analyse a probe snapshot instead of this box
    #[arg(long, value_name = "DIR")]
    probe_root: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  servetune fabric p2p --json p2p.json && servetune campaign fabric c1 p2p.json\n  servetune fabric allreduce --json ar.json && servetune campaign fabric c1 ar.json\n  servetune fabric p2p --backend sim --sim-link pcie5-p2p --json sim.json && servetune campaign fabric c1 sim.json\n\nThe document (servetune.fabric/1, kind p2p or allreduce) is stored in the journal against the\nenvironment of the newest probe. `campaign report` draws a p2p document's per-pair bandwidth (GB/s)\nand small-message latency (us) as heatmaps; an allreduce document's NCCL all-reduce (the runs with\nNCCL's defaults) prices the NCCL all-reduces of every later prediction in that environment, as\n`plan --allreduce` does, and a calibration made before it is not carried over. Re-probe first\n(campaign probe) when the box has moved."
)]
struct FabricArgs {
    /// Campaign directory
    dir: PathBuf,
    /// The JSON `servetune fabric p2p --json FILE` or `servetune fabric allreduce --json FILE` wrote
    file: PathBuf,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  servetune campaign continue c1\n  servetune campaign continue c1 --until-blocked")]
struct ContinueArgs {
    /// Campaign directory
    dir: PathBuf,
    /// Keep going until a person is needed (3) or nothing is left (4)
    #[arg(long)]
    until_blocked: bool,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  servetune campaign answer c1 1 --done\n  servetune campaign answer c1 2 --declined\n  servetune campaign answer c1 3 \"bare metal is not possible until March\""
)]
struct AnswerArgs {
    /// Campaign directory
    dir: PathBuf,
    /// Question number (from status, next or continue)
    question: i64,
    /// The answer in words
    text: Option<String>,
    /// The person did it
    #[arg(long, conflicts_with_all = ["declined", "text"])]
    done: bool,
    /// The person will not do it
    #[arg(long, conflicts_with = "text")]
    declined: bool,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  servetune campaign add c1 --set n_threads=1\n  servetune campaign add c1 --set max_running=256 --force"
)]
struct AddArgs {
    /// Campaign directory
    dir: PathBuf,
    /// Knob values of the experiment to add, KEY=VALUE (repeatable; the knobs of the campaign's engine template)
    #[arg(long = "set", value_name = "KNOB=VALUE", required = true)]
    set: Vec<String>,
    /// Run it even if the same configuration already ran in this environment
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  servetune campaign report c1 --html status.html\n  servetune campaign report c1 --markdown status.md --json status.json\n\nThe HTML file is self-contained (inline CSS and SVG charts, no script, no network); the JSON follows\ncrates/campaign/schema/report.schema.json (servetune.report/1)."
)]
struct ReportArgs {
    /// Campaign directory
    dir: PathBuf,
    /// One self-contained HTML page with charts
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Markdown, for a ticket
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
    /// JSON (servetune.report/1)
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  servetune campaign compare kvm-campaign lxc-campaign\n  servetune campaign compare c1 c1 --a-experiment 1 --b-experiment 4 --html compare.html\n\nEach side is the campaign's best done experiment unless picked. Campaigns with different models or\nhardware are compared and the difference is said first; sides with no measured concurrency in\ncommon are refused (exit 2)."
)]
struct CompareArgs {
    /// The "before" campaign directory
    a: PathBuf,
    /// The "after" campaign directory (may be the same as A, with --a/--b-experiment)
    b: PathBuf,
    /// Experiment of A to compare (default: its best done one)
    #[arg(long, value_name = "N")]
    a_experiment: Option<i64>,
    /// Experiment of B to compare (default: its best done one)
    #[arg(long, value_name = "N")]
    b_experiment: Option<i64>,
    /// Also write Markdown
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
    /// Also write one self-contained HTML page
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Also write JSON (servetune.compare/1)
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct NoteArgs {
    /// Campaign directory
    dir: PathBuf,
    /// The note, kept in the journal with the time it was written
    text: String,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  servetune campaign engines\n  servetune campaign engines --engines my-engines.toml\n\nA template file holds [[engine]] tables: name, argv (a list of words with {placeholders}), health,\ngenerate, metrics, version = { http = { path, field } } or { command = [...] }, ready_timeout_s,\nknobs = [{ name, help, domain = { int = { min, max } } | { float = {..} } | { choice = [..] } | \"text\",\ndefault, args = [\"--flag\", \"{value}\"], env = \"VAR\" }], logs = [{ contains, signal }]."
)]
struct EnginesArgs {
    /// User engine templates (TOML, [[engine]] tables) to list with the built-in ones
    #[arg(long, value_name = "FILE")]
    engines: Option<PathBuf>,
}

/// A campaign error as the CLI's failure: bad input exits 2, a run-time failure 1.
pub(crate) fn lib(e: CampaignError) -> Failure {
    match e {
        CampaignError::Input(m) => Failure::usage(m),
        CampaignError::Runtime(m) => Failure::runtime(m),
    }
}

/// `--set KNOB=VALUE` flags as knobs; a knob set twice is refused (which value was meant is
/// unknown).
fn knobs(set: &[String]) -> Result<BTreeMap<String, String>, Failure> {
    let mut out = BTreeMap::new();
    for kv in set {
        let (k, v) = kv
            .split_once('=')
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .ok_or_else(|| Failure::usage(format!("--set {kv:?}: write KNOB=VALUE, e.g. --set tp=4")))?;
        if let Some(before) = out.get(&k) {
            return Err(Failure::usage(format!("--set {k}={v}: {k} is already set to {before}; give each knob once")));
        }
        out.insert(k, v);
    }
    Ok(out)
}

pub fn run(a: CampaignArgs) -> Result<(), Failure> {
    match a.cmd {
        Sub::Init(i) => init(*i),
        Sub::Probe(p) => {
            let f = campaign::reprobe(&p.dir, p.probe_root.as_deref()).map_err(lib)?;
            crate::say!(
                "environment {}: {} GPU(s), vm {}, container {}, P2P {}",
                f.hash,
                f.gpus,
                f.vm,
                f.container,
                if f.p2p_ok { "ok" } else { "not available" }
            );
            Ok(())
        }
        Sub::Fabric(f) => {
            use servetune_campaign::fabric_step::{self, Document};
            let r = fabric_step::record(&f.dir, &f.file).map_err(lib)?;
            let what = match &r.document {
                Document::P2p(m) => format!(
                    "{} GPU(s) measured ({} backend); {}",
                    m.gpus.len(),
                    m.backend,
                    m.link.as_deref().map_or("no link fitted".to_string(), |l| format!("link {l}"))
                ),
                Document::AllReduce(m) => {
                    let runs: Vec<String> = m
                        .runs
                        .iter()
                        .map(|r| format!("{} ranks, {:.1} us at {} B", r.ranks(), r.us(0.0), r.points().first().map_or(0.0, |p| p.0)))
                        .collect();
                    format!(
                        "NCCL all-reduce ({}); the environment's newest all-reduce record prices the NCCL all-reduces of its predictions",
                        runs.join("; ")
                    )
                }
            };
            crate::say!(
                "fabric record {}: {what} for environment {} (vm {}, container {})",
                r.id,
                r.facts.hash,
                r.facts.vm,
                r.facts.container
            );
            if let Some(n) = &r.note {
                crate::tell!("note: {n}");
            }
            Ok(())
        }
        Sub::Status(d) => {
            let r = open_report(&d.dir)?;
            report::write_terminal(&r, std::io::stdout().lock()).map_err(|e| Failure::runtime(format!("stdout: {e}")))
        }
        Sub::Next(d) => next(&d.dir),
        Sub::Continue(c) => continue_cmd(&c),
        Sub::Answer(a) => answer(a),
        Sub::Add(a) => {
            let id = campaign::add(&a.dir, &knobs(&a.set)?, a.force).map_err(lib)?;
            crate::say!("experiment {id} queued; servetune campaign continue {} runs it", a.dir.display());
            Ok(())
        }
        Sub::Report(r) => write_report(&r),
        Sub::Compare(c) => compare(&c),
        Sub::Note(n) => {
            let j = Journal::open(&n.dir).map_err(lib)?;
            let id = j.add_note(&n.text).map_err(lib)?;
            crate::say!("note {id} added");
            Ok(())
        }
        Sub::Engines(e) => engines(&e),
    }
}

/// The executor from the Slurm flags; Slurm flags without `--executor slurm` are refused.
fn executor(a: &InitArgs) -> Result<campaign::Executor, Failure> {
    let slurm_flags = a.partition.is_some()
        || a.account.is_some()
        || a.nodes.get() != 1
        || a.gpus_per_node.is_some()
        || a.slurm_time.is_some()
        || !a.slurm_args.is_empty();
    if a.executor == ExecutorArg::Local {
        if slurm_flags {
            return Err(Failure::usage(
                "--partition, --account, --nodes, --gpus-per-node, --slurm-time and --slurm-arg need --executor slurm",
            ));
        }
        return Ok(campaign::Executor::Local);
    }
    let word = |flag: &str, v: &Option<String>| -> Result<(), Failure> {
        match v {
            Some(x) if x.is_empty() || x.contains(char::is_whitespace) => {
                Err(Failure::usage(format!("{flag} {x:?}: a Slurm name has no spaces")))
            }
            _ => Ok(()),
        }
    };
    word("--partition", &a.partition)?;
    word("--account", &a.account)?;
    word("--slurm-time", &a.slurm_time)?;
    if let Some(bad) = a.slurm_args.iter().find(|x| !x.starts_with("--") || !x.contains('=')) {
        return Err(Failure::usage(format!(
            "--slurm-arg {bad:?}: give one whole sbatch option as --flag=value (e.g. --slurm-arg=--exclusive=user)"
        )));
    }
    let queue_timeout_s = whole_seconds("--queue-timeout", &a.queue_timeout)?;
    Ok(campaign::Executor::Slurm(servetune_campaign::executor_slurm::SlurmSettings {
        partition: a.partition.clone(),
        account: a.account.clone(),
        nodes: a.nodes,
        gpus_per_node: a.gpus_per_node.unwrap_or(0),
        time: a.slurm_time.clone(),
        args: a.slurm_args.clone(),
        queue_timeout_s,
    }))
}

/// What `--model` and `--catalog-model` name in the catalog ([`servetune_model::spec::named_model`]):
/// `--model` only where it is a catalog name or a listed checkpoint's repository (else a path or an
/// id the catalog does not know). The two must agree: the same catalog model, and not two
/// different checkpoints.
fn named(a: &InitArgs) -> Result<(Option<NamedModel>, Option<NamedModel>), Failure> {
    let model = servetune_model::spec::named_model(&a.model).ok();
    let catalog = match &a.catalog_model {
        Some(c) => Some(
            servetune_model::spec::named_model(c)
                .map_err(|e| Failure::usage(format!("--catalog-model: {e}; for a model outside the catalog leave --catalog-model out")))?,
        ),
        None => None,
    };
    if let (Some(m), Some(c)) = (model, catalog) {
        let formats_differ = matches!((m.checkpoint, c.checkpoint), (Some(x), Some(y)) if x != y);
        if m.entry.name != c.entry.name || formats_differ {
            return Err(Failure::usage(format!(
                "--model {} is {} but --catalog-model {} is {}: they must name the same model; give --catalog-model {} or leave it out",
                a.model,
                describe(&m),
                a.catalog_model.as_deref().unwrap_or_default(),
                describe(&c),
                m.entry.name
            )));
        }
    }
    Ok((model, catalog))
}

/// "glm-5" or "the fp8 checkpoint of glm-5".
fn describe(n: &NamedModel) -> String {
    match n.checkpoint {
        Some(q) => format!("the {} checkpoint of {}", q.name(), n.entry.name),
        None => n.entry.name.clone(),
    }
}

fn init(a: InitArgs) -> Result<(), Failure> {
    if a.model.trim().is_empty() || a.model.chars().any(char::is_control) {
        return Err(Failure::usage(format!(
            "--model {:?}: give what the engine serves (a path, a Hugging Face id or a catalog name), in printable characters",
            a.model
        )));
    }
    let all = engine::all(a.engines.as_deref()).map_err(lib)?;
    let tmpl = engine::find(&all, &a.engine).map_err(lib)?;
    let (model, catalog) = named(&a)?;
    // A checkpoint's repository names its format, `--model`'s first (what the engine loads); a
    // --quant of another format is refused, as `servetune plan` refuses it.
    let checkpoint = model.and_then(|m| m.checkpoint.map(|q| (q, "--model", a.model.clone(), m)));
    let checkpoint = checkpoint
        .or_else(|| catalog.and_then(|c| c.checkpoint.map(|q| (q, "--catalog-model", a.catalog_model.clone().unwrap_or_default(), c))));
    // --quant in any letter case ("FP8" is fp8), stored under its canonical name: the journal keeps
    // it and the plan step parses it again, so an unknown one would only lose every prediction.
    let asked = a
        .quant
        .as_deref()
        .map(|q| servetune_model::quant::Dtype::parse("--quant", q))
        .transpose()
        .map_err(|e| Failure::usage(e.to_string()))?;
    if let (Some((c, flag, value, n)), Some(asked)) = (&checkpoint, asked) {
        if asked != *c {
            let q = a.quant.as_deref().unwrap_or_default();
            let fix = if *flag == "--model" {
                "leave --quant out (the engine loads that checkpoint), or point --model at a checkpoint in the other format".to_string()
            } else {
                format!("give --catalog-model {} --quant {q}", n.entry.name)
            };
            return Err(Failure::usage(format!(
                "{flag} {value} is the {} checkpoint of {}, but --quant {q} asks for another format: {fix}",
                c.name(),
                n.entry.name
            )));
        }
    }
    let quant = match (asked, &checkpoint) {
        (Some(q), _) => q,
        (None, Some((c, ..))) => *c,
        // The catalog model's published checkpoint, as `servetune plan` defaults --quant to it;
        // bf16 for a model outside the catalog.
        (None, None) => catalog
            .or(model)
            .and_then(|n| servetune_model::spec::catalog(&n.entry.name).ok()?.checkpoint)
            .unwrap_or(servetune_model::quant::Dtype::Bf16),
    }
    .name()
    .to_string();
    let mut s = campaign::settings(&a.goal, tmpl, &a.model, &quant, knobs(&a.set)?).map_err(lib)?;
    if let Some(c) = catalog {
        s.catalog_model = Some(c.entry.name.clone());
    }
    // The catalog name, however the GPU was spelled ("NVIDIA H100 80GB HBM3" is h100-sxm), so the
    // journal and the report compare like with like.
    let gpu = a
        .gpu
        .as_deref()
        .map(|g| servetune_model::hw::gpu(g).map(|g| g.name))
        .transpose()
        .map_err(|e| Failure::usage(format!("--gpu: {e}")))?;
    if a.gpus == Some(0) {
        return Err(Failure::usage("--gpus 0: give the number of GPUs the server uses"));
    }
    if a.concurrency.is_empty() || a.concurrency.contains(&0) || a.requests == 0 || a.input_len == 0 || a.output_len == 0 {
        return Err(Failure::usage("--concurrency, --requests, --input-len and --output-len must be at least 1"));
    }
    let dur = |flag: &str, v: &str| servetune_stats::parse_duration(flag, v).map_err(|e| Failure::usage(e.0));
    s.gpu = gpu;
    s.gpus = a.gpus;
    s.bench.concurrency = a.concurrency.clone();
    s.bench.requests = a.requests;
    s.bench.input_len = a.input_len;
    s.bench.output_len = a.output_len;
    s.bench.timeout_s = dur("--request-timeout", &a.request_timeout)?.as_secs_f64();
    if s.bench.timeout_s <= 0.0 {
        return Err(Failure::usage(format!(
            "--request-timeout {}: every request would fail at once; give a positive duration such as 120s",
            a.request_timeout
        )));
    }
    s.ready_timeout_s = a.ready_timeout.as_deref().map(|r| whole_seconds("--ready-timeout", r)).transpose()?;
    s.secret_env = a.secret_env.clone();
    s.executor = executor(&a)?;
    let j = campaign::init(&InitOptions { dir: a.dir.clone(), settings: s, probe_root: a.probe_root.clone() }).map_err(lib)?;
    crate::say!("campaign started in {} (journal {})", a.dir.display(), j.path().display());
    crate::say!("next: servetune campaign next {0}   or   servetune campaign continue {0} --until-blocked", a.dir.display());
    Ok(())
}

fn open_report(dir: &Path) -> Result<report::Report, Failure> {
    let j = Journal::open(dir).map_err(lib)?;
    report::build(&j).map_err(lib)
}

fn next(dir: &Path) -> Result<(), Failure> {
    match campaign::next(dir).map_err(lib)? {
        Verdict::GoalMet { experiment, output_tok_s } => {
            crate::say!("goal met: experiment {experiment} reached {output_tok_s:.1} output tok/s; nothing to do")
        }
        Verdict::NothingLeft { reason } => crate::say!("nothing left: {reason}"),
        Verdict::Steps(steps) => {
            let track = servetune_campaign::verdict::track_record(&Journal::open(dir).map_err(lib)?).map_err(lib)?;
            for (i, s) in steps.iter().enumerate() {
                let line = report::step_line(&track, i + 1, s);
                let gain = if s.gain.is_some() { format!("expected {}", report::step_gain_words(&line)) } else { "gain unknown".into() };
                match &s.kind {
                    StepKind::Runnable { knobs } => {
                        let k: Vec<String> = knobs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                        crate::say!("{}. [runnable] {} ({gain})\n   experiment: {}\n   why: {}", i + 1, s.title, k.join(" "), s.basis);
                    }
                    StepKind::NeedsPerson { question, .. } => {
                        crate::say!("{}. [needs a person] {} ({gain})\n   question: {question}", i + 1, s.title)
                    }
                }
                if !line.evidence.is_empty() {
                    crate::say!("   evidence: {}", line.evidence.join(", "));
                }
            }
        }
    }
    Ok(())
}

/// Ctrl-C sets the flag; the running step tears its server down and is recorded as interrupted.
/// The signal that stopped a campaign step (0 until one came).
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// A flag set by the first SIGINT, SIGTERM or SIGHUP (an ssh disconnect): each is handled as
/// Ctrl-C is, so the step drains, keeps its partial bench JSON, tears the server down and is
/// recorded as interrupted. [`stop_code`] gives the exit code, 128 + the signal's number.
pub(crate) fn cancel_on_ctrl_c() -> Arc<AtomicBool> {
    use tokio::signal::unix::{signal, SignalKind};
    let flag = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&flag);
    // Registered before the thread starts, so a signal that comes at once is not missed.
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return flag };
    let streams = rt.block_on(async {
        Ok::<_, std::io::Error>((signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?, signal(SignalKind::hangup())?))
    });
    let Ok((mut int, mut term, mut hup)) = streams else { return flag };
    std::thread::spawn(move || {
        rt.block_on(async {
            let (n, name) = tokio::select! {
                _ = int.recv() => (libc::SIGINT, "SIGINT"),
                _ = term.recv() => (libc::SIGTERM, "SIGTERM"),
                _ = hup.recv() => (libc::SIGHUP, "SIGHUP"),
            };
            STOP_SIGNAL.store(n, Ordering::Relaxed);
            crate::tell!("\n{name}: stopping: the partial sweep is kept, the server torn down and the step recorded as interrupted");
            f.store(true, Ordering::Relaxed);
        });
    });
    flag
}

/// The exit code after a stop signal: 128 + its number (130 for SIGINT when none was recorded).
pub(crate) fn stop_code() -> ExitCode {
    match STOP_SIGNAL.load(Ordering::Relaxed) {
        n @ 1..=31 => ExitCode::Signal(n as u8),
        _ => ExitCode::Signal(crate::exit::SIGINT),
    }
}

/// The exit code a stopped `continue` ends with: 0 after a step, 3 for a question, 4 when nothing
/// is left, 128 + the signal's number after a stop signal.
pub(crate) fn stopped_code(s: &Stopped) -> ExitCode {
    match s {
        Stopped::Stepped => ExitCode::Ok,
        Stopped::Interrupted => stop_code(),
        Stopped::NeedsPerson(_) => ExitCode::NeedsPerson,
        Stopped::NothingLeft { .. } => ExitCode::NothingLeft,
    }
}

fn continue_cmd(c: &ContinueArgs) -> Result<(), Failure> {
    let opts = RunOptions { cancel: cancel_on_ctrl_c() };
    let stopped = campaign::continue_until(&c.dir, &opts, c.until_blocked, &mut |l| crate::say!("{l}"), &mut |_| {}).map_err(lib)?;
    let code = stopped_code(&stopped);
    match stopped {
        Stopped::Stepped => Ok(()),
        Stopped::Interrupted => {
            Err(Failure { code, msg: "interrupted: the step was torn down and recorded as interrupted; continue runs it again".into() })
        }
        Stopped::NeedsPerson(q) => {
            crate::say!("needs a person (question {}): {}", q.id, q.text);
            crate::say!("  {}", q.how);
            crate::say!(
                "  answer with: servetune campaign answer {0} {1} \"...\"   or   servetune campaign answer {0} {1} --done   or   --declined",
                c.dir.display(),
                q.id
            );
            Err(Failure { code, msg: format!("stopped to ask question {}", q.id) })
        }
        Stopped::NothingLeft { goal_met, reason } => {
            crate::say!("{reason}");
            let why = if goal_met { "goal met" } else { "no step with a positive expected gain" };
            Err(Failure { code, msg: format!("nothing left: {why}") })
        }
    }
}

fn answer(a: AnswerArgs) -> Result<(), Failure> {
    let ans = match (a.done, a.declined, a.text) {
        (true, _, _) => Answer::Done,
        (_, true, _) => Answer::Declined,
        (_, _, Some(t)) if !t.trim().is_empty() => Answer::Text(t),
        _ => return Err(Failure::usage("give an answer: a text in quotes, --done or --declined")),
    };
    let q = campaign::answer(&a.dir, a.question, &ans).map_err(lib)?;
    crate::say!("question {} answered ({}); servetune campaign continue {} goes on", q.id, q.state.as_str(), a.dir.display());
    Ok(())
}

/// The files of campaign `dir` that an output must never replace: the journal (with SQLite's
/// write-ahead files), the secrets, the controller's lock, and what was measured: every bench
/// result, server log and fabric document the journal names or the campaign wrote in `dir`.
fn campaign_files(dir: &std::path::Path) -> Vec<(String, PathBuf)> {
    let journal = servetune_campaign::journal::FILE_NAME;
    let (secrets, lock) = (servetune_campaign::secrets::FILE, servetune_campaign::controller::FILE);
    let mut files: Vec<(String, PathBuf)> =
        [journal.to_string(), format!("{journal}-wal"), format!("{journal}-shm"), secrets.into(), lock.into()]
            .into_iter()
            .map(|f| (format!("the campaign's {f}"), dir.join(f)))
            .collect();
    // Read-only: a refused command writes nothing, and a journal that does not read is reported
    // by the command itself.
    files.extend(servetune_campaign::journal::recorded_files(dir));
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(what) = measured_file(&name) {
            files.push((what, entry.path()));
        }
    }
    files
}

/// What the campaign's file `name` holds, when it is one it writes as a measurement:
/// `exp-N-aM.bench.json`, `exp-N-aM.log` (and the job's files beside it), `fabric-*.json`.
fn measured_file(name: &str) -> Option<String> {
    if name.starts_with("fabric-") && name.ends_with(".json") {
        return Some(format!("a fabric document the campaign measured ({name})"));
    }
    // `exp-N-aM.*` or `exp-N.result.json`: a report the user names `exp-2-vs-3.html` is not the
    // campaign's.
    let rest = name.strip_prefix("exp-")?;
    let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let after = &rest[n.len()..];
    let attempt = after.strip_prefix("-a").map_or(0, |a| {
        let m = a.chars().take_while(char::is_ascii_digit).count();
        if a[m..].starts_with('.') {
            m
        } else {
            0
        }
    });
    if n.is_empty() || (attempt == 0 && after != ".result.json") {
        return None;
    }
    let what = if name.ends_with(".bench.json") {
        "measured bench result"
    } else if name.ends_with(".log") {
        "server log"
    } else {
        "file"
    };
    Some(format!("experiment {n}'s {what} ({name})"))
}

/// Refuses outputs that name a campaign's own files or one another ([`crate::check_outputs`]).
fn check_campaign_outputs(outputs: &[(&str, Option<&PathBuf>)], dirs: &[&std::path::Path]) -> Result<(), Failure> {
    let files: Vec<(String, PathBuf)> = dirs.iter().flat_map(|d| campaign_files(d)).collect();
    let inputs: Vec<(&str, Option<&std::path::Path>)> = files.iter().map(|(what, p)| (what.as_str(), Some(p.as_path()))).collect();
    let outs: Vec<(&str, Option<&std::path::Path>)> = outputs.iter().map(|(f, p)| (*f, p.map(PathBuf::as_path))).collect();
    crate::check_outputs(&outs, &inputs)
}

fn write_report(r: &ReportArgs) -> Result<(), Failure> {
    if r.html.is_none() && r.markdown.is_none() && r.json.is_none() {
        return Err(Failure::usage(
            "give --html FILE, --markdown FILE and/or --json FILE (servetune campaign status prints it in the terminal)",
        ));
    }
    check_campaign_outputs(&[("--html", r.html.as_ref()), ("--markdown", r.markdown.as_ref()), ("--json", r.json.as_ref())], &[&r.dir])?;
    let rep = open_report(&r.dir)?;
    let write = |p: &PathBuf, f: &dyn Fn(&mut Vec<u8>) -> std::io::Result<()>| -> Result<(), Failure> {
        let mut buf = Vec::new();
        f(&mut buf).map_err(|e| Failure::runtime(e.to_string()))?;
        std::fs::write(p, buf).map_err(|e| Failure::runtime(format!("{}: cannot write it ({e})", p.display())))
    };
    if let Some(p) = &r.html {
        write(p, &|w| report_html::write_html(&rep, w))?;
        crate::say!("wrote {}", p.display());
    }
    if let Some(p) = &r.markdown {
        write(p, &|w| report::write_markdown(&rep, w))?;
        crate::say!("wrote {}", p.display());
    }
    if let Some(p) = &r.json {
        write(p, &|w| serde_json::to_writer_pretty(w, &rep).map_err(std::io::Error::other))?;
        crate::say!("wrote {}", p.display());
    }
    Ok(())
}

fn compare(c: &CompareArgs) -> Result<(), Failure> {
    check_campaign_outputs(
        &[("--markdown", c.markdown.as_ref()), ("--html", c.html.as_ref()), ("--json", c.json.as_ref())],
        &[&c.a, &c.b],
    )?;
    let cmp = report_compare::compare(&c.a, c.a_experiment, &c.b, c.b_experiment).map_err(lib)?;
    report_compare::write_terminal(&cmp, std::io::stdout().lock()).map_err(|e| Failure::runtime(format!("stdout: {e}")))?;
    let write = |p: &PathBuf, f: &dyn Fn(&mut Vec<u8>) -> std::io::Result<()>| -> Result<(), Failure> {
        let mut buf = Vec::new();
        f(&mut buf).map_err(|e| Failure::runtime(e.to_string()))?;
        std::fs::write(p, buf).map_err(|e| Failure::runtime(format!("{}: cannot write it ({e})", p.display())))?;
        crate::say!("wrote {}", p.display());
        Ok(())
    };
    if let Some(p) = &c.markdown {
        write(p, &|w| report_compare::write_markdown(&cmp, w))?;
    }
    if let Some(p) = &c.html {
        write(p, &|w| report_compare::write_html(&cmp, w))?;
    }
    if let Some(p) = &c.json {
        write(p, &|w| serde_json::to_writer_pretty(w, &cmp).map_err(std::io::Error::other))?;
    }
    Ok(())
}

fn engines(e: &EnginesArgs) -> Result<(), Failure> {
    for t in engine::all(e.engines.as_deref()).map_err(lib)? {
        crate::say!("{}: {}", t.name, t.description);
        crate::say!("  argv: {}", t.argv.join(" "));
        crate::say!("  health {}, generate {}, ready within {}s", t.health, t.generate, t.ready_timeout_s);
        for k in &t.knobs {
            let how = match (&k.env, k.args.is_empty()) {
                (Some(v), _) => format!("env {v}"),
                (None, false) => k.args.join(" "),
                (None, true) => "in argv".into(),
            };
            crate::say!(
                "  knob {:<18} {:<28} {} ({how}){}",
                k.name,
                k.domain.describe(),
                k.help,
                k.default.as_ref().map_or(String::new(), |d| format!(", default {d}"))
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::measured_file;

    #[test]
    fn the_campaigns_measured_file_names_are_told_from_a_users_report_names() {
        assert_eq!(measured_file("exp-3-a1.bench.json").as_deref(), Some("experiment 3's measured bench result (exp-3-a1.bench.json)"));
        assert_eq!(measured_file("exp-12-a2.log").as_deref(), Some("experiment 12's server log (exp-12-a2.log)"));
        assert_eq!(measured_file("exp-4.result.json").as_deref(), Some("experiment 4's file (exp-4.result.json)"));
        assert!(measured_file("fabric-kvm.json").is_some());
        for users in ["exp-2-vs-3.html", "exp-.log", "exp-3-a.log", "exp-3-a1", "exp-3.html", "experiment.md", "report.html"] {
            assert_eq!(measured_file(users), None, "{users}");
        }
    }
}
