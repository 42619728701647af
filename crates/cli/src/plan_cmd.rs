//! `servetune plan`: parse the flags into a `servetune_model::PlanRequest`, run
//! `servetune_model::build_report`, and render the report. The logic lives in the library.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::builder::PossibleValuesParser;
use clap::{Args, ValueEnum};
use servetune_model::inputs::{BenchInput, FabricInput};
use servetune_model::predict::{Engine, Overlap};
use servetune_model::quant::{Dtype, KvDtype};
use servetune_model::request::{LinkSource, QuantSpec};
use servetune_model::workload::{LengthDist, Workload};
use servetune_model::{hw, report, spec, validate, ModelError, ModelSource, PlanRequest, ScenarioSpec, WhatIf};

use crate::Failure;

/// `on` or `off`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OnOff {
    /// Enabled.
    On,
    /// Disabled.
    Off,
}

/// `--engine ENGINE[@VERSION]`: the engine and, when given, its release.
fn engine_release(v: &str) -> Result<servetune_model::predict::EngineRelease, String> {
    servetune_model::predict::EngineRelease::parse("--engine", v).map_err(|e| e.to_string())
}

/// `--overlap`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OverlapArg {
    /// Communication adds to the step.
    None,
    /// Communication hides behind compute and memory traffic.
    Full,
}

impl From<OverlapArg> for Overlap {
    fn from(o: OverlapArg) -> Self {
        match o {
            OverlapArg::None => Overlap::None,
            OverlapArg::Full => Overlap::Full,
        }
    }
}

/// A weight format flag.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum QuantArg {
    /// BF16 (or FP16).
    #[value(alias = "fp16")]
    Bf16,
    /// FP8 with 128x128 block scales.
    Fp8,
    /// NVFP4 (fp4 with an fp8 scale per 16).
    Nvfp4,
    /// MXFP4 (fp4 with an e8m0 scale per 32).
    Mxfp4,
    /// INT4 weight-only (w4a16).
    #[value(alias = "w4a16")]
    Int4,
}

impl From<QuantArg> for Dtype {
    fn from(q: QuantArg) -> Self {
        match q {
            QuantArg::Bf16 => Dtype::Bf16,
            QuantArg::Fp8 => Dtype::Fp8,
            QuantArg::Nvfp4 => Dtype::Nvfp4,
            QuantArg::Mxfp4 => Dtype::Mxfp4,
            QuantArg::Int4 => Dtype::Int4,
        }
    }
}

/// `--kv-dtype`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum KvArg {
    /// Two bytes per element.
    #[value(alias = "fp16")]
    Bf16,
    /// One byte per element.
    Fp8,
}

impl From<KvArg> for KvDtype {
    fn from(k: KvArg) -> Self {
        match k {
            KvArg::Bf16 => KvDtype::Bf16,
            KvArg::Fp8 => KvDtype::Fp8,
        }
    }
}

/// A catalog model by its name or the Hugging Face repository of a checkpoint the catalog lists
/// (`spec::named_model`), kept as given: [`scenario_spec`] reads the checkpoint's format from it.
fn model_name(s: &str) -> Result<String, String> {
    spec::named_model(s).map(|_| s.to_string()).map_err(|e| format!("{e}; for any other model give --model-config path/to/config.json"))
}

/// `--model`'s help: the catalog's names, and under `--help` each one's checkpoints.
fn model_help() -> String {
    format!(
        "Catalog model: a name ({}) or the Hugging Face repository of a checkpoint the catalog lists (zai-org/GLM-5-FP8), which also sets --quant; `--help` lists them",
        spec::catalog_names().join(", ")
    )
}

/// `--model`'s long help: what it takes, and each catalog model's checkpoint repositories.
fn model_long_help() -> String {
    let mut out = String::from(
        "Catalog model (its published config.json under crates/model/data/models/): a name, or the Hugging Face repository (any letter case) of a checkpoint the catalog lists, which also sets --quant to that checkpoint's format. The catalog:",
    );
    for m in spec::catalog_names().into_iter().filter_map(|n| spec::catalog_entry(n).ok()) {
        let repos: Vec<String> = m.checkpoints.iter().filter_map(|c| c.repository().map(|r| format!("{r} ({})", c.quant.name()))).collect();
        // A release published with an architecture the catalog already has reads that entry's config.
        let owner = spec::architecture_of(m);
        out.push_str(&format!(
            "\n  {}: {}{}",
            m.name,
            if repos.is_empty() { "no checkpoint repository listed".into() } else { repos.join(", ") },
            owner.map(|o| format!(" ({}'s architecture and config)", o.name)).unwrap_or_default()
        ));
    }
    out
}

/// A catalog GPU, by its catalog name or an alias (`hw::resolve_gpu_name`: nvidia-smi's product
/// name, "h100", ...), read as its catalog name.
fn gpu_name(s: &str) -> Result<String, String> {
    hw::resolve_gpu_name(s).map(str::to_string).ok_or_else(|| hw::unknown_gpu_message(s))
}

/// `--gpu`'s help: what it takes, and the catalog's names.
fn gpu_help() -> String {
    format!(
        "GPU model: a catalog name or nvidia-smi's product name (\"NVIDIA H100 80GB HBM3\"); the catalog (crates/model/data/gpus.json): {}",
        hw::gpu_names().join(", ")
    )
}

fn links() -> PossibleValuesParser {
    PossibleValuesParser::new(hw::link_names())
}

fn nets() -> PossibleValuesParser {
    PossibleValuesParser::new(hw::net_names())
}

fn what_if(s: &str) -> Result<WhatIf, String> {
    WhatIf::parse(s).map_err(|e| e.to_string())
}

/// Predict the serving ceiling of a model on GPUs under a parallelism plan, explain where the step
/// time goes, and rank plans and fixes.
#[derive(Debug, Args)]
#[command(
    allow_negative_numbers = true,
    after_help = "Examples:\n  servetune plan --model glm-5 --quant nvfp4 --gpu rtx-pro-6000-se --gpus 8 --link pcie-host-staged --tp 8 --explain --rank\n  servetune plan --model deepseek-v3 --gpu h200 --gpus 8 --vs link=pcie5-p2p --vs tp=4,pp=2\n  servetune plan --model deepseek-v3 --gpu h100-sxm --gpus 16 --gpus-per-node 8 --net ib-ndr --tp 8 --pp 2 --rank\n  servetune plan --validate"
)]
pub struct PlanArgs {
    // Catalog model: the help lists the catalog (model_help, model_long_help).
    #[arg(long, value_parser = model_name, conflicts_with = "model_config", required_unless_present_any = ["model_config", "validate"], help = model_help(), long_help = model_long_help())]
    pub model: Option<String>,
    /// A Hugging Face config.json instead of a catalog name
    #[arg(long, value_name = "FILE")]
    pub model_config: Option<PathBuf>,
    /// Checkpoint format (default: the model's published checkpoint; 4-bit formats quantize a MoE model's experts, the rest staying bf16, and every linear layer of a dense model)
    #[arg(long, value_enum)]
    pub quant: Option<QuantArg>,
    /// Override the attention weights' format
    #[arg(long, value_enum, value_name = "DTYPE")]
    pub quant_attention: Option<QuantArg>,
    /// Override the routed and shared experts' format
    #[arg(long, value_enum, value_name = "DTYPE")]
    pub quant_experts: Option<QuantArg>,
    /// Override the dense FFN's format
    #[arg(long, value_enum, value_name = "DTYPE")]
    pub quant_dense: Option<QuantArg>,
    /// KV-cache format (default: what the engine's --kv-cache-dtype auto gives the checkpoint: fp8 where it declares an FP8 cache, as NVIDIA's NVFP4 exports do, and the engine release reads that; else bf16)
    #[arg(long, value_enum, value_name = "DTYPE")]
    pub kv_dtype: Option<KvArg>,
    // GPU model: the help lists the catalog (gpu_help).
    #[arg(long, value_parser = gpu_name, required_unless_present = "validate", help = gpu_help())]
    pub gpu: Option<String>,
    /// Number of GPUs (default: --nodes x --gpus-per-node, else 8)
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Nodes the GPUs are on (--gpus must split evenly over them)
    #[arg(long, value_name = "N")]
    pub nodes: Option<u32>,
    /// GPUs on each node (--gpus must be a multiple of it)
    #[arg(long, value_name = "N")]
    pub gpus_per_node: Option<u32>,
    /// Network between the nodes (needed with 2 or more nodes); its bandwidth is per NIC
    #[arg(long, value_parser = nets())]
    pub net: Option<String>,
    /// NICs on each node (default: one per GPU, as on rail-optimized InfiniBand and RoCE clusters)
    #[arg(long, value_name = "N")]
    pub nics_per_node: Option<u32>,
    /// Measured network latency (one NET step), microseconds, replacing --net's
    #[arg(long, value_name = "US")]
    pub net_latency: Option<f64>,
    /// Measured network bandwidth per NIC, GB/s, replacing --net's
    #[arg(long, value_name = "GBS")]
    pub net_bw: Option<f64>,
    /// GPU-to-GPU link within a node (default: nvlink when the GPU has it, else pcie5-p2p)
    #[arg(long, value_parser = links())]
    pub link: Option<String>,
    /// Measured link latency (one hop), microseconds
    #[arg(long, value_name = "US")]
    pub link_latency: Option<f64>,
    /// Measured link bandwidth per direction, GB/s
    #[arg(long, value_name = "GBS")]
    pub link_bw: Option<f64>,
    /// A `servetune fabric p2p --json` file: its measured link replaces the catalog's
    #[arg(long, value_name = "FILE", conflicts_with = "link")]
    pub fabric: Option<PathBuf>,
    /// A `servetune fabric allreduce --json` file: the box's measured NCCL all-reduce (the run with
    /// NCCL's defaults at the plan's TP size, else the nearest size measured) prices the TP
    /// all-reduces the engine runs with NCCL within the node (not its own custom kernel), in
    /// place of the model, on this link and GPU only; the report names the file
    #[arg(long, value_name = "FILE")]
    pub allreduce: Option<PathBuf>,
    /// Tensor parallelism (default: one pipeline stage's GPUs, --gpus / --pp; a --pp that does
    /// not divide --gpus is refused)
    #[arg(long)]
    pub tp: Option<u32>,
    /// Pipeline parallelism
    #[arg(long, default_value_t = 1)]
    pub pp: u32,
    /// Expert parallelism within the TP group (1: experts split over TP ranks)
    #[arg(long, default_value_t = 1)]
    pub ep: u32,
    /// Data-parallel attention (each TP rank serves its own requests; MoE over EP)
    #[arg(long)]
    pub dp_attention: bool,
    /// Concurrencies to predict, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,64,128,256")]
    pub concurrency: Vec<u32>,
    /// Prompt tokens per request: N, uniform:LO..HI, or normal:MEAN,STD (as `servetune bench`; the steady state uses the mean)
    #[arg(long, default_value = "1024", value_name = "LEN")]
    pub input_len: String,
    /// Output tokens per request: N, uniform:LO..HI, or normal:MEAN,STD (as `servetune bench`; the steady state uses the mean)
    #[arg(long, default_value = "1024", value_name = "LEN")]
    pub output_len: String,
    /// Requests of the benchmark run the client-measured figures are for (default: 10 x concurrency, InferenceX's convention)
    #[arg(long, value_name = "N")]
    pub requests: Option<u64>,
    /// The server's running-request limit (sglang --max-running-requests, vLLM --max-num-seqs)
    #[arg(long, value_name = "N")]
    pub max_running: Option<u32>,
    /// The serving engine, whose defaults apply: its serving-path latency (TTFT), whether prefill rides in decode steps, whether steps carrying prompt tokens run as CUDA graphs (vLLM; sglang since 0.5.10) or eagerly (TensorRT-LLM), its memory share, and on an NVLink box its custom all-reduce's measured latency.
    /// Give ENGINE@VERSION (sglang@0.4.6, vllm@0.7.3) for a release's defaults: sglang before 0.5.10 runs prefill eagerly; vLLM before 0.8.0 (V0) runs prompts as steps of their own. Engines: sglang, vllm, trtllm
    #[arg(long, value_parser = engine_release, default_value = "sglang", value_name = "ENGINE[@VERSION]")]
    pub engine: servetune_model::predict::EngineRelease,
    /// CUDA graphs for decode
    #[arg(long, value_enum, default_value = "on")]
    pub cuda_graphs: OnOff,
    /// Whether communication overlaps compute
    #[arg(long, value_enum, default_value = "none")]
    pub overlap: OverlapArg,
    /// Prefill rides inside decode steps (sglang --enable-mixed-chunk; always on for the vllm and trtllm engines) instead of its own passes; without it the virtual run schedules prompts first, alone, while decoding waits (sglang's default)
    #[arg(long)]
    pub mixed_prefill: bool,
    /// Host overhead per decode step, ms: replaces the model's per-kernel floor (5.2 us x the kernels a step runs, 1.9x that on MI300X/MI325X, fitted on public measurements; see VALIDATION.md); the 35 us per running request stays (--request-step-us)
    #[arg(long, value_name = "MS")]
    pub step_overhead_ms: Option<f64>,
    /// Per-step cost of each running request, us (scheduling, sampling and output work that grows with the batch) [default: 35, fitted on public measurements; see VALIDATION.md]
    #[arg(long, value_name = "US")]
    pub request_step_us: Option<f64>,
    /// How unevenly the router spreads a decode batch's tokens over the experts: a Zipf exponent, 0 for uniform routing, higher for fewer distinct experts per step (MoE models only) [default: 0.45, read off AIConfigurator's fused-MoE timings under power-law routing; see VALIDATION.md]. Set it from your own traffic's routing where you have measured it
    #[arg(long, value_name = "S")]
    pub routing_skew: Option<f64>,
    /// The serving path's latency outside the GPU (HTTP, tokenization, scheduler hand-offs), ms; it adds to TTFT only [default: the engine's: sglang 218.9, vLLM 18.5, TensorRT-LLM 77.0, fitted on public TTFTs: VALIDATION.md]
    #[arg(long, value_name = "MS")]
    pub request_latency_ms: Option<f64>,
    /// Share of each GPU's memory the engine may use for weights and KV cache, as sglang's --mem-fraction-static or vLLM's --gpu-memory-utilization sets it [default: the engine's: sglang's own by GPU, TP and release (0.893 for a GQA model on an H200 at TP8 today: docs/plan.md), vLLM 0.9; the model also keeps 3 GB per GPU outside it]
    #[arg(long, value_name = "F")]
    pub mem_fraction: Option<f64>,
    /// Show everything behind the headline: the step time by term, the steady-state rates, the client's full table and the bottleneck at every concurrency
    #[arg(long)]
    pub explain: bool,
    /// Rank every feasible plan on these GPUs with its interval and ties, searching past --concurrency's largest up to what the KV cache holds when the best plan sits there; print the fixes and the best plans' launch commands
    #[arg(long)]
    pub rank: bool,
    /// Ranked plans to show
    #[arg(long, default_value_t = 5)]
    pub top: usize,
    /// Objectives for ranking, e.g. tpot:p50<50ms,ttft:p99<2s (ttft, tpot, itl, e2e; the model predicts one value, so the percentile is not modelled)
    #[arg(long)]
    pub slo: Option<String>,
    /// What-if: KEY=VALUE[,KEY=VALUE] with keys gpu, link, net, tp, pp, ep, gpus, quant, overlap (repeatable)
    #[arg(long, value_name = "CHANGE", value_parser = what_if)]
    pub vs: Vec<WhatIf>,
    /// Fit efficiency factors to a `servetune bench --json` file's measured throughput
    #[arg(long, value_name = "BENCH_JSON")]
    pub calibrate: Option<PathBuf>,
    /// Score the model on the public end-to-end cases (crates/model/data/validation/e2e.toml): fit and test sets apart, the test median first (VALIDATION.md), and exit
    #[arg(long)]
    pub validate: bool,
    /// Write the report as JSON (servetune.plan/1.5) to FILE; `-` for stdout (the text report then goes to stderr)
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the report as Markdown to FILE; `-` for stdout (the text report then goes to stderr)
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Write each ranked plan's launch command as an executable shell script into DIR (created if missing)
    #[arg(long, value_name = "DIR", requires = "rank")]
    pub emit_launch: Option<PathBuf>,
    /// With --validate: write the prediction-interval table (the test set's residuals by GPU architecture x engine x model kind, and its calibrated residuals pooled; each span chosen by leaving each publication out in turn) to FILE; the committed one is crates/model/data/validation/intervals.json
    #[arg(long, value_name = "FILE", requires = "validate", conflicts_with = "holdout")]
    pub write_intervals: Option<PathBuf>,
    /// With --validate: also score each deployment calibrated on its lowest measured concurrency (as `--calibrate` does with one point) at its other concurrencies, and at every row of the other deployments (plans, GPU counts) its source measured of the same model, beside the raw error on the same rows
    #[arg(long, requires = "validate")]
    pub calibrated: bool,
    /// With --validate: score the frozen holdout (crates/model/data/validation/holdout.toml, raw and calibrated) instead of e2e.toml; log every look in HOLDOUT.md beside it
    #[arg(long, requires = "validate")]
    pub holdout: bool,
}

fn input(e: ModelError) -> Failure {
    Failure::usage(e.to_string())
}

/// The most a `--model-config` may hold: published config.json files are under 100 KB.
const MAX_MODEL_CONFIG: u64 = 16 * servetune_io::MIB;

/// The most a `--fabric`, `--allreduce` or `--calibrate` document may hold: both are summaries (matrices,
/// per-run figures) of a few hundred KB at most; per-request records are not in them.
const MAX_DOCUMENT: u64 = 64 * servetune_io::MIB;

/// Reads a flag's file, at most `limit` bytes of it; a FIFO or a device within the I/O crate's
/// deadline.
fn read(flag: &str, p: &Path, limit: u64) -> Result<String, Failure> {
    servetune_io::read_text(p, &format!("{flag} {}", p.display()), limit).map_err(|e| Failure::usage(e.to_string()))
}

/// A report written to stdout or stderr: a write error is the command's failure (exit 1), except
/// a reader that went away (`| head`), which only ends the output.
pub(crate) fn written(r: std::io::Result<()>, to: &str) -> Result<(), Failure> {
    match r {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure::runtime(format!("cannot write the report to {to} ({e}); nothing was written, or only a part")))
        }
        _ => Ok(()),
    }
}

/// The deployment the flags describe (reads --model-config, --fabric and --allreduce).
pub fn scenario_spec(a: &PlanArgs) -> Result<ScenarioSpec, Failure> {
    let named = a.model.as_deref().map(spec::named_model).transpose().map_err(input)?;
    let checkpoint = match (a.quant.map(Dtype::from), named.and_then(|n| n.checkpoint)) {
        (Some(q), Some(c)) if q != c => {
            let (m, name) = (a.model.as_deref().unwrap_or_default(), named.map_or("", |n| n.entry.name.as_str()));
            return Err(Failure::usage(format!(
                "--model {m} is the {} checkpoint of {name}, but --quant {} asks for another format: give --model {name} --quant {}",
                c.name(),
                q.name(),
                q.name()
            )));
        }
        (q, c) => q.or(c),
    };
    let model = match (&named, &a.model_config) {
        (Some(n), _) => ModelSource::Catalog(n.entry.name.clone()),
        (None, Some(p)) => ModelSource::Config { text: read("--model-config", p, MAX_MODEL_CONFIG)?, path: p.display().to_string() },
        (None, None) => return Err(Failure::usage("give --model NAME (see --help for the catalog) or --model-config config.json")),
    };
    let gpu = a.gpu.clone().ok_or_else(|| Failure::usage(format!("give --gpu; known: {}", hw::gpu_names().join(", "))))?;
    let link = match (&a.fabric, &a.link) {
        (Some(p), _) => {
            let src = p.display().to_string();
            LinkSource::Measured(
                FabricInput::parse(&read("--fabric", p, MAX_DOCUMENT)?, &src).and_then(|f| f.link_profile(&src)).map_err(input)?,
            )
        }
        (None, Some(l)) => LinkSource::Catalog(l.clone()),
        (None, None) => LinkSource::Default,
    };
    let allreduce = match &a.allreduce {
        Some(p) => {
            let src = p.display().to_string();
            Some(FabricInput::parse(&read("--allreduce", p, MAX_DOCUMENT)?, &src).and_then(|f| f.measured_allreduce(&src)).map_err(input)?)
        }
        None => None,
    };
    Ok(ScenarioSpec {
        quant: QuantSpec {
            checkpoint,
            attention: a.quant_attention.map(Dtype::from),
            experts: a.quant_experts.map(Dtype::from),
            dense: a.quant_dense.map(Dtype::from),
            kv_cache: a.kv_dtype.map(KvDtype::from),
        },
        gpus: gpu_count(a)?,
        nodes: a.nodes,
        gpus_per_node: a.gpus_per_node,
        nics_per_node: a.nics_per_node,
        net: a.net.clone(),
        net_latency_us: a.net_latency,
        net_bw_gbs: a.net_bw,
        link,
        link_latency_us: a.link_latency,
        link_bw_gbs: a.link_bw,
        allreduce,
        tp: a.tp,
        pp: a.pp,
        ep: a.ep,
        dp_attention: a.dp_attention,
        input_len: mean_len(&lengths(a)?.0),
        output_len: mean_len(&lengths(a)?.1),
        max_running: a.max_running,
        cuda_graphs: matches!(a.cuda_graphs, OnOff::On),
        overlap: a.overlap.into(),
        mixed_prefill: a.mixed_prefill,
        step_overhead_ms: a.step_overhead_ms,
        request_step_us: a.request_step_us,
        request_latency_ms: a.request_latency_ms,
        routing_skew: a.routing_skew,
        mem_fraction: a.mem_fraction,
        engine: a.engine.name,
        engine_version: a.engine.version.clone(),
        ..ScenarioSpec::new(model, gpu)
    })
}

/// `--gpus`, or the GPUs `--nodes` x `--gpus-per-node` make, or 8.
fn gpu_count(a: &PlanArgs) -> Result<u32, Failure> {
    match (a.gpus, a.nodes, a.gpus_per_node) {
        (Some(g), _, _) => Ok(g),
        (None, Some(n), Some(g)) => n
            .checked_mul(g)
            .ok_or_else(|| Failure::usage(format!("--nodes {n} x --gpus-per-node {g} is too many GPUs: give smaller numbers"))),
        (None, Some(n), None) => {
            Err(Failure::usage(format!("--nodes {n}: give --gpus or --gpus-per-node too, so the GPUs per node are known")))
        }
        (None, None, _) => Ok(8),
    }
}

/// `--input-len` and `--output-len`, parsed as `servetune bench` parses them.
fn lengths(a: &PlanArgs) -> Result<(LengthDist, LengthDist), Failure> {
    let input = LengthDist::parse("--input-len", &a.input_len).map_err(|e| Failure::usage(e.0))?;
    let output = LengthDist::parse("--output-len", &a.output_len).map_err(|e| Failure::usage(e.0))?;
    Ok((input, output))
}

/// A distribution's mean as a whole token count (at least 1).
fn mean_len(d: &LengthDist) -> u32 {
    d.mean().round().clamp(1.0, u32::MAX as f64) as u32
}

/// A calibration fits the model to what a sweep measured, so it prices the workload that sweep
/// ran: a bench file whose prompt or output lengths differ from the plan's by more than 10% (on
/// the mean) is refused, naming the flags that would match it. The lengths are the ones
/// `config` gives; a prompt length it gives only in words (a `--dataset` or shared-prefix sweep)
/// is the mean the runs measured (prompt tokens over requests).
fn same_workload(a: &PlanArgs, b: &BenchInput, src: &str) -> Result<(), Failure> {
    let Some(w) = &b.config else { return Ok(()) };
    let (input, output) = lengths(a)?;
    // What the sweep ran, as a flag's value and its mean: the config's length text where it is
    // one, else (prompts only) the measured mean.
    let ran = |field: &str, text: &Option<String>, measured: Option<f64>| -> Option<(String, f64)> {
        match text.as_deref().map(|t| (t, LengthDist::parse(field, t))) {
            Some((t, Ok(d))) => Some((t.to_string(), d.mean())),
            _ => measured.filter(|m| *m >= 0.5).map(|m| (format!("{}", m.round()), m)),
        }
    };
    let (ri, ro) = (ran("config.input", &w.input, b.measured_input_len()), ran("config.output", &w.output, None));
    let differs = |r: &Option<(String, f64)>, planned: &LengthDist| {
        r.as_ref().is_some_and(|(_, m)| (m - planned.mean()).abs() > 0.1 * planned.mean().max(*m))
    };
    if !differs(&ri, &input) && !differs(&ro, &output) {
        return Ok(());
    }
    let said = |r: &Option<(String, f64)>, text: &Option<String>| match (r, text) {
        (Some((flag, _)), Some(t)) if flag != t => format!("{t} (a mean of {flag})"),
        (Some((flag, _)), _) => flag.clone(),
        (None, Some(t)) => t.clone(),
        (None, None) => "?".into(),
    };
    Err(Failure::usage(format!(
        "--calibrate {src}: the sweep ran prompts of {} and outputs of {} tokens, the plan is for {} and {}: a calibration prices the workload it measured; give --input-len {} --output-len {}",
        said(&ri, &w.input),
        said(&ro, &w.output),
        a.input_len,
        a.output_len,
        ri.as_ref().map_or(a.input_len.as_str(), |r| r.0.as_str()),
        ro.as_ref().map_or(a.output_len.as_str(), |r| r.0.as_str()),
    )))
}

/// The whole request the flags describe.
pub fn request(a: &PlanArgs) -> Result<PlanRequest, Failure> {
    let slos = match &a.slo {
        Some(s) => servetune_stats::parse_slos("--slo", s).map_err(|e| Failure::usage(e.0))?,
        None => Vec::new(),
    };
    let calibration = match &a.calibrate {
        Some(p) => {
            let src = p.display().to_string();
            let b = BenchInput::parse(&read("--calibrate", p, MAX_DOCUMENT)?, &src).map_err(input)?;
            same_workload(a, &b, &src)?;
            b.measured(&src).map_err(input)?
        }
        None => Vec::new(),
    };
    Ok(PlanRequest {
        scenario: scenario_spec(a)?,
        concurrency: a.concurrency.clone(),
        slos,
        rank: a.rank,
        top: a.top,
        what_ifs: a.vs.clone(),
        calibration,
        workload: {
            let (input, output) = lengths(a)?;
            Workload { requests: a.requests, input, output, seed: 0 }
        },
    })
}

/// Writes a document to `p`, or to stdout for `-`; a write error is a failure (exit 1).
pub(crate) fn write_file(p: &Path, f: &dyn Fn(&mut dyn Write) -> std::io::Result<()>) -> Result<(), Failure> {
    if p.as_os_str() == "-" {
        let mut out = std::io::stdout().lock();
        return written(f(&mut out).and_then(|_| out.flush()), "stdout");
    }
    // A missing folder is made, as bench makes its outputs'.
    if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::runtime(format!("cannot write {}: cannot make {}: {e}", p.display(), dir.display())))?;
    }
    let mut out =
        std::io::BufWriter::new(std::fs::File::create(p).map_err(|e| Failure::runtime(format!("cannot write {}: {e}", p.display())))?);
    f(&mut out).and_then(|_| out.flush()).map_err(|e| Failure::runtime(format!("cannot write {}: {e}", p.display())))
}

fn is_stdout(p: &Option<PathBuf>) -> bool {
    p.as_ref().is_some_and(|p| p.as_os_str() == "-")
}

fn run_validate(a: &PlanArgs) -> Result<(), Failure> {
    if a.engine != servetune_model::predict::EngineRelease::current(servetune_model::predict::EngineName::Sglang) {
        return Err(Failure::usage(
            "--engine does not apply to --validate: every case runs with the engine its source used (e2e.toml's engine); drop --engine",
        ));
    }
    crate::check_outputs(&[("--json", a.json.as_deref()), ("--write-intervals", a.write_intervals.as_deref())], &[])?;
    let bench = servetune_sim::from_plan::PlanBench;
    let (data, mut v) = if a.holdout {
        (validate::Data::Holdout, validate::run_holdout(&Engine::default(), Some(&bench)).map_err(input)?)
    } else {
        (validate::Data::E2e, validate::run_with_bench(&Engine::default(), Some(&bench)).map_err(input)?)
    };
    if a.calibrated || a.holdout || a.write_intervals.is_some() {
        v.calibrated = Some(validate::run_calibrated(data, &Engine::default(), Some(&bench)).map_err(input)?);
    }
    let table = validate::markdown(&v);
    if is_stdout(&a.json) {
        crate::tell!("{table}");
    } else {
        let mut out = std::io::stdout().lock();
        written(writeln!(out, "{table}").and_then(|_| out.flush()), "stdout")?;
    }
    if let Some(p) = &a.json {
        write_file(p, &|w| serde_json::to_writer_pretty(&mut *w, &v).map_err(std::io::Error::other).and_then(|_| writeln!(w)))?;
    }
    if let Some(p) = &a.write_intervals {
        let Some(cal) = &v.calibrated else { return Err(Failure::runtime("the calibrated validation did not run".to_string())) };
        let t = servetune_model::interval::table(&v.rows, cal).map_err(input)?;
        write_file(p, &|w| serde_json::to_writer_pretty(&mut *w, &t).map_err(std::io::Error::other).and_then(|_| writeln!(w)))?;
    }
    Ok(())
}

/// A file name for a ranked plan's script: its rank and label, e.g. `01-tp4-ep4-x2-replicas.sh`.
fn script_name(i: usize, label: &str) -> String {
    let slug: String = label.to_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    let slug = slug.split('-').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("-");
    format!("{:02}-{slug}.sh", i + 1)
}

/// The first line of a comment every script [`emit_launch`] writes starts with (its second line).
const SCRIPT_MARK: &str = "# servetune plan: ";

/// `--emit-launch DIR`: where each ranked plan's script goes.
fn launch_paths(dir: &Path, r: &report::PlanReport) -> Vec<PathBuf> {
    r.ranked_plans.iter().enumerate().map(|(i, x)| dir.join(script_name(i, &x.label))).collect()
}

/// Whether `p` is a script an earlier `--emit-launch` wrote: a plain file named `NN-....sh` whose
/// second line is [`SCRIPT_MARK`]'s. Only those are removed, so a file of the user's in DIR stays.
fn earlier_script(p: &Path) -> bool {
    let named = p
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.len() > 6 && n.as_bytes()[..2].iter().all(u8::is_ascii_digit) && n.as_bytes()[2] == b'-' && n.ends_with(".sh"));
    if !named || !std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_file()) {
        return false;
    }
    let Ok(f) = std::fs::File::open(p) else { return false };
    let mut head = String::new();
    use std::io::Read as _;
    // Two lines of a script are well under 4 KB (a title and the shebang).
    if f.take(4096).read_to_string(&mut head).is_err() {
        return false;
    }
    head.lines().nth(1).is_some_and(|l| l.starts_with(SCRIPT_MARK))
}

/// `--emit-launch DIR`: one executable script per ranked plan; refuses a DIR that is not a
/// directory, creates a missing one, and removes the scripts an earlier ranking left there (so
/// every script in DIR is of this ranking). A script is never written through a symbolic link.
fn emit_launch(dir: &Path, r: &report::PlanReport, paths: &[PathBuf]) -> Result<usize, Failure> {
    if dir.exists() && !dir.is_dir() {
        return Err(Failure::usage(format!(
            "--emit-launch {}: this is a file, not a directory; give a directory to write the launch scripts into (it is created if missing)",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| Failure::runtime(format!("--emit-launch {}: cannot create the directory: {e}", dir.display())))?;
    let mut removed = 0;
    let entries = std::fs::read_dir(dir).map_err(|e| Failure::runtime(format!("--emit-launch {}: cannot list it: {e}", dir.display())))?;
    for p in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        if !paths.contains(&p) && earlier_script(&p) {
            std::fs::remove_file(&p).map_err(|e| Failure::runtime(format!("cannot remove the earlier script {}: {e}", p.display())))?;
            removed += 1;
        }
    }
    for (x, p) in r.ranked_plans.iter().zip(paths) {
        let title = format!(
            "{}{} for {} on {} x {} ({}): predicted {:.0} output tok/s at concurrency {}",
            SCRIPT_MARK.trim_start_matches("# "),
            x.label,
            r.model,
            r.scenario.plan.gpus,
            r.scenario.gpu.name,
            x.launch.engine.name(),
            x.output_tokens_per_s,
            x.concurrency
        );
        let text = servetune_model::launch::script(&x.launch, &title);
        // Links were refused before anything was written (run); a link put there since is
        // refused by the open.
        let fail = |e: std::io::Error| Failure::runtime(format!("cannot write {}: {e}", p.display()));
        let mut f = servetune_io::open_plain_for_write(p, true).map_err(fail)?;
        f.write_all(text.as_bytes()).map_err(fail)?;
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).map_err(fail)?;
    }
    Ok(removed)
}

/// The files `plan` reads, by what names them in an error: no output may be one of them.
fn inputs(a: &PlanArgs) -> [(&'static str, Option<&Path>); 4] {
    [
        ("the --model-config file", a.model_config.as_deref()),
        ("the --fabric file", a.fabric.as_deref()),
        ("the --allreduce file", a.allreduce.as_deref()),
        ("the --calibrate file", a.calibrate.as_deref()),
    ]
}

/// Runs `servetune plan`.
pub fn run(a: PlanArgs) -> Result<(), Failure> {
    if a.validate {
        return run_validate(&a);
    }
    if is_stdout(&a.json) && is_stdout(&a.markdown) {
        return Err(Failure::usage("--json - and --markdown - both ask for stdout: write one of them to a file"));
    }
    crate::check_outputs(&[("--json", a.json.as_deref()), ("--markdown", a.markdown.as_deref())], &inputs(&a))?;
    // The client-measured figures: the simulator's engine runs the workload in virtual time.
    // A progress line on a terminal while the runs go on (tens of seconds with --rank at 100k clients).
    let req = request(&a)?;
    let bench = crate::progress::CountingBench::default();
    let r = crate::progress::with_plan_progress(&bench, true, || servetune_model::build_report_with(&req, Some(&bench))).map_err(input)?;
    // The scripts' names come from the ranking: checked against the inputs and the other outputs
    // before anything is written.
    let scripts = a.emit_launch.as_deref().map(|dir| (dir, launch_paths(dir, &r)));
    if let Some((_, scripts)) = &scripts {
        if let Some(link) = scripts.iter().find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())) {
            return Err(Failure::usage(format!(
                "--emit-launch: {} is a symbolic link; servetune writes its scripts only as plain files: remove the link, or give another directory",
                link.display()
            )));
        }
        let mut outputs = vec![("--json", a.json.as_deref()), ("--markdown", a.markdown.as_deref())];
        outputs.extend(scripts.iter().map(|p| ("--emit-launch", Some(p.as_path()))));
        crate::check_outputs(&outputs, &inputs(&a))?;
    }
    // With a document on stdout, the text report goes to stderr so stdout stays machine-readable.
    if is_stdout(&a.json) || is_stdout(&a.markdown) {
        written(report::write_terminal(&r, a.explain, std::io::stderr().lock()), "stderr")?;
    } else {
        let mut out = std::io::stdout().lock();
        written(report::write_terminal(&r, a.explain, &mut out).and_then(|_| out.flush()), "stdout")?;
    }
    if let Some(p) = &a.json {
        write_file(p, &|w| serde_json::to_writer_pretty(&mut *w, &r).map_err(std::io::Error::other).and_then(|_| writeln!(w)))?;
    }
    if let Some(p) = &a.markdown {
        write_file(p, &|w| report::write_markdown(&r, w))?;
    }
    if let Some((dir, files)) = &scripts {
        let removed = emit_launch(dir, &r, files)?;
        let earlier = match removed {
            0 => String::new(),
            1 => " (removed 1 script of an earlier ranking)".into(),
            n => format!(" (removed {n} scripts of an earlier ranking)"),
        };
        crate::tell!("wrote {} launch script{} to {}{earlier}", files.len(), if files.len() == 1 { "" } else { "s" }, dir.display());
    }
    if r.fits {
        Ok(())
    } else {
        // The numbers and the smallest change that fits are in the report above; say it once.
        Err(Failure::usage("the plan does not fit in GPU memory (see DOES NOT FIT above)"))
    }
}
