//! `servetune plan`: predict, explain and rank serving throughput from the performance model.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use servetune_model::calibrate::{self, Measured};
use servetune_model::hw::{self, LinkProfile};
use servetune_model::predict::{Engine, Overlap, Plan, Scenario};
use servetune_model::quant::{Dtype, KvDtype, Quant};
use servetune_model::rank::{self, Slo};
use servetune_model::report::{self, PlanReport, Versus};
use servetune_model::{spec, validate, ModelError};

use crate::Failure;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OverlapArg {
    None,
    Full,
}

/// Predict the serving ceiling of a model on GPUs under a parallelism plan, explain where the step
/// time goes, and rank plans and fixes.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  servetune plan --model glm-5 --quant nvfp4 --gpu rtx-pro-6000-se --gpus 8 --link pcie-host-staged --tp 8 --explain --rank\n  servetune plan --model deepseek-v3 --quant fp8 --gpu h200 --gpus 8 --vs link=pcie5-p2p --vs tp=4,pp=2\n  servetune plan --validate"
)]
pub struct PlanArgs {
    /// Catalog model (glm-5, deepseek-v3, qwen3-235b-a22b, qwen3-30b-a3b, llama-3.1-70b, llama-3.1-8b, mixtral-8x7b, gpt-oss-120b)
    #[arg(long, conflicts_with = "model_config")]
    pub model: Option<String>,
    /// A Hugging Face config.json instead of a catalog name
    #[arg(long, value_name = "FILE")]
    pub model_config: Option<PathBuf>,
    /// Checkpoint format: bf16, fp8, nvfp4, mxfp4, int4 (4-bit formats quantize the experts; the rest stays bf16)
    #[arg(long, default_value = "bf16")]
    pub quant: String,
    /// Override the attention weights' format
    #[arg(long, value_name = "DTYPE")]
    pub quant_attention: Option<String>,
    /// Override the routed and shared experts' format
    #[arg(long, value_name = "DTYPE")]
    pub quant_experts: Option<String>,
    /// Override the dense FFN's format
    #[arg(long, value_name = "DTYPE")]
    pub quant_dense: Option<String>,
    /// KV-cache format: bf16 or fp8 (default: fp8 for quantized checkpoints)
    #[arg(long, value_name = "DTYPE")]
    pub kv_dtype: Option<String>,
    /// GPU model (rtx-pro-6000-se, h100-sxm, h200, b200, a100, l40s, rtx-5090, rtx-4090)
    #[arg(long)]
    pub gpu: Option<String>,
    /// Number of GPUs
    #[arg(long, default_value_t = 8)]
    pub gpus: u32,
    /// GPU-to-GPU link: nvlink, pcie5-p2p, pcie4-p2p, pcie-host-staged, cross-numa (default: nvlink when the GPU has it, else pcie5-p2p)
    #[arg(long)]
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
    /// Tensor parallelism (default: all GPUs)
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
    /// Concurrencies to predict
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,64,128,256")]
    pub concurrency: Vec<u32>,
    #[arg(long, default_value_t = 1024)]
    pub input_len: u32,
    #[arg(long, default_value_t = 1024)]
    pub output_len: u32,
    /// The server's running-request limit (sglang --max-running-requests)
    #[arg(long, value_name = "N")]
    pub max_running: Option<u32>,
    /// CUDA graphs for decode
    #[arg(long, value_enum, default_value = "on")]
    pub cuda_graphs: OnOff,
    /// Whether communication overlaps compute
    #[arg(long, value_enum, default_value = "none")]
    pub overlap: OverlapArg,
    /// Prefill rides inside decode steps (vLLM V1; sglang --enable-mixed-chunk) instead of its own passes
    #[arg(long)]
    pub mixed_prefill: bool,
    /// Host overhead per decode step, ms (default 2.0, calibrated on public measurements)
    #[arg(long, value_name = "MS")]
    pub step_overhead_ms: Option<f64>,
    /// Explain the bottleneck at every concurrency
    #[arg(long)]
    pub explain: bool,
    /// Rank every feasible plan on these GPUs
    #[arg(long)]
    pub rank: bool,
    /// Ranked plans to show
    #[arg(long, default_value_t = 5)]
    pub top: usize,
    /// Objectives for ranking, e.g. tpot:p50<50ms,ttft:p99<2s (tpot and ttft)
    #[arg(long)]
    pub slo: Option<String>,
    /// What-if: KEY=VALUE[,KEY=VALUE] with keys gpu, link, tp, pp, ep, quant, overlap (repeatable)
    #[arg(long, value_name = "CHANGE")]
    pub vs: Vec<String>,
    /// Fit efficiency factors to a `servetune bench --json` file's measured throughput
    #[arg(long, value_name = "BENCH_JSON")]
    pub calibrate: Option<PathBuf>,
    /// Print predictions against public measurements (VALIDATION.md) and exit
    #[arg(long)]
    pub validate: bool,
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
}

fn input(e: ModelError) -> Failure {
    Failure::usage(e.to_string())
}

fn dtype(flag: &str, v: &Option<String>) -> Result<Option<Dtype>, Failure> {
    v.as_deref().map(|s| Dtype::parse(flag, s)).transpose().map_err(input)
}

/// Builds the scenario the flags describe.
pub fn scenario(a: &PlanArgs) -> Result<Scenario, Failure> {
    let model = match (&a.model, &a.model_config) {
        (Some(m), _) => spec::catalog(m).map_err(input)?,
        (None, Some(p)) => {
            let text =
                std::fs::read_to_string(p).map_err(|e| Failure::usage(format!("--model-config {}: cannot read it ({e})", p.display())))?;
            spec::from_hf_config(&text, &p.display().to_string()).map_err(input)?
        }
        (None, None) => return Err(Failure::usage("give --model NAME (see --help for the catalog) or --model-config config.json")),
    };
    let mut quant = Quant::preset(Dtype::parse("--quant", &a.quant).map_err(input)?);
    if let Some(d) = dtype("--quant-attention", &a.quant_attention)? {
        quant.attention = d;
    }
    if let Some(d) = dtype("--quant-experts", &a.quant_experts)? {
        quant.experts = d;
        quant.shared_experts = d;
    }
    if let Some(d) = dtype("--quant-dense", &a.quant_dense)? {
        quant.dense_ffn = d;
    }
    if let Some(k) = &a.kv_dtype {
        quant.kv_cache = match k.as_str() {
            "bf16" | "fp16" => KvDtype::Bf16,
            "fp8" => KvDtype::Fp8,
            other => return Err(Failure::usage(format!("--kv-dtype {other:?} is unknown; known: bf16, fp8"))),
        };
    }
    let gpu_name = a.gpu.as_deref().ok_or_else(|| Failure::usage(format!("give --gpu; known: {}", hw::GPUS.join(", "))))?;
    let gpu = hw::gpu(gpu_name).map_err(input)?;
    let link_name = a.link.clone().unwrap_or_else(|| if gpu.nvlink_gbs > 0.0 { "nvlink".into() } else { "pcie5-p2p".into() });
    let mut link: LinkProfile = match &a.fabric {
        Some(p) => fabric_link(p)?,
        None => hw::link(&link_name).map_err(input)?,
    };
    if let Some(l) = a.link_latency {
        if !(l >= 0.0 && l.is_finite()) {
            return Err(Failure::usage(format!("--link-latency {l}: give microseconds >= 0")));
        }
        link.alpha_us = l;
        link.source = format!("measured (--link-latency); {}", link.source);
    }
    if let Some(b) = a.link_bw {
        if !(b > 0.0 && b.is_finite()) {
            return Err(Failure::usage(format!("--link-bw {b}: give GB/s > 0")));
        }
        link.beta_gbs = b;
        link.source = format!("measured (--link-bw); {}", link.source);
    }
    if a.gpus == 0 {
        return Err(Failure::usage("--gpus 0: give the number of GPUs"));
    }
    let plan = Plan { gpus: a.gpus, tp: a.tp.unwrap_or(a.gpus), pp: a.pp, ep: a.ep, dp_attention: a.dp_attention };
    plan.check(&model).map_err(input)?;
    let defaults = Engine::default();
    let engine = Engine {
        cuda_graphs: matches!(a.cuda_graphs, OnOff::On),
        overlap: match a.overlap {
            OverlapArg::None => Overlap::None,
            OverlapArg::Full => Overlap::Full,
        },
        mixed_prefill: a.mixed_prefill,
        step_overhead_ms: a.step_overhead_ms.map_or(defaults.step_overhead_ms, |o| o.max(0.0)),
        ..defaults
    };
    if a.input_len == 0 || a.output_len == 0 {
        return Err(Failure::usage("--input-len and --output-len must be at least 1"));
    }
    if a.concurrency.contains(&0) {
        return Err(Failure::usage("--concurrency 0 predicts nothing: give 1 or more"));
    }
    Ok(Scenario { model, quant, gpu, link, plan, engine, input_len: a.input_len, output_len: a.output_len, max_running: a.max_running })
}

/// The measured link in a `servetune fabric` JSON.
fn fabric_link(p: &PathBuf) -> Result<LinkProfile, Failure> {
    let text = std::fs::read_to_string(p).map_err(|e| Failure::usage(format!("--fabric {}: cannot read it ({e})", p.display())))?;
    let r: servetune_fabric::report::FabricReport = serde_json::from_str(&text).map_err(|e| {
        Failure::usage(format!(
            "--fabric {}: not a servetune fabric JSON ({e}); write one with servetune fabric p2p --json FILE",
            p.display()
        ))
    })?;
    if !r.schema.starts_with("servetune.fabric/1") {
        return Err(Failure::usage(format!("--fabric {}: schema {:?} is not servetune.fabric/1", p.display(), r.schema)));
    }
    let l = r.link.ok_or_else(|| {
        Failure::usage(format!("--fabric {}: no link profile in it (it needs a fabric p2p run over two or more GPUs)", p.display()))
    })?;
    Ok(LinkProfile { name: l.name, alpha_us: l.alpha_us, beta_gbs: l.beta_gbs, source: format!("{} ({})", l.source, p.display()) })
}

fn slo(a: &PlanArgs) -> Result<Slo, Failure> {
    let mut out = Slo { max_concurrency: a.concurrency.iter().copied().max(), ..Slo::default() };
    if let Some(s) = &a.slo {
        for x in servetune_bench::spec::parse_slos("--slo", s).map_err(|e| Failure::usage(e.0))? {
            match x.metric {
                servetune_bench::spec::SloMetric::Tpot => out.tpot_ms = Some(x.threshold_ms),
                servetune_bench::spec::SloMetric::Ttft => out.ttft_ms = Some(x.threshold_ms),
                m => return Err(Failure::usage(format!("--slo: plan ranks by tpot and ttft; {:?} is not modelled", m.name()))),
            }
        }
    }
    Ok(out)
}

/// Applies one `--vs` change.
fn versus(base: &Scenario, change: &str) -> Result<Scenario, Failure> {
    let mut s = base.clone();
    for kv in change.split(',') {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| Failure::usage(format!("--vs {change:?}: write KEY=VALUE, e.g. link=pcie5-p2p or tp=4,pp=2")))?;
        let num = |v: &str| v.parse::<u32>().map_err(|_| Failure::usage(format!("--vs {k}={v}: not a whole number")));
        match k.trim() {
            "gpu" => s.gpu = hw::gpu(v).map_err(input)?,
            "link" => s.link = hw::link(v).map_err(input)?,
            "tp" => s.plan.tp = num(v)?,
            "pp" => s.plan.pp = num(v)?,
            "ep" => s.plan.ep = num(v)?,
            "gpus" => s.plan.gpus = num(v)?,
            "quant" => s.quant = Quant::preset(Dtype::parse("--vs quant", v).map_err(input)?),
            "overlap" => {
                s.engine.overlap = match v {
                    "full" => Overlap::Full,
                    "none" => Overlap::None,
                    _ => return Err(Failure::usage(format!("--vs overlap={v}: use none or full"))),
                }
            }
            other => return Err(Failure::usage(format!("--vs: unknown key {other:?}; keys: gpu, link, tp, pp, ep, gpus, quant, overlap"))),
        }
    }
    s.plan.check(&s.model).map_err(input)?;
    Ok(s)
}

/// Measured (concurrency, output tok/s) from a bench JSON.
fn measured(path: &PathBuf) -> Result<Vec<Measured>, Failure> {
    let text =
        std::fs::read_to_string(path).map_err(|e| Failure::usage(format!("--calibrate {}: cannot read it ({e})", path.display())))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Failure::usage(format!("--calibrate {}: not JSON ({e})", path.display())))?;
    if v["schema"].as_str().is_none_or(|s| !s.starts_with("servetune.bench/")) {
        return Err(Failure::usage(format!("--calibrate {}: not a servetune bench JSON (schema servetune.bench/1)", path.display())));
    }
    let pts: Vec<Measured> = v["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            Some(Measured {
                concurrency: r["concurrency"].as_u64()? as u32,
                output_tokens_per_s: r["throughput"]["output_tokens_per_s"].as_f64().filter(|t| *t > 0.0)?,
            })
        })
        .collect();
    if pts.is_empty() {
        return Err(Failure::usage(format!(
            "--calibrate {}: no closed-loop run with throughput in it (calibration needs --concurrency runs)",
            path.display()
        )));
    }
    Ok(pts)
}

pub fn build(a: &PlanArgs) -> Result<PlanReport, Failure> {
    let mut s = scenario(a)?;
    let slo = slo(a)?;
    let calibration = match &a.calibrate {
        Some(p) => {
            let pts = measured(p)?;
            let f = calibrate::fit(&s, &pts);
            if let Some(f) = &f {
                s.engine = f.engine;
            }
            f
        }
        None => None,
    };
    let fit_error = s.check_fit().err().map(|e| e.to_string());
    let fits = fit_error.is_none();
    let points: Vec<_> = if fits { a.concurrency.iter().map(|&c| s.point(c)).collect() } else { Vec::new() };
    let saturation = report::saturation(&s, &points);
    let ranked = if a.rank { rank::rank(&s, &slo).into_iter().take(a.top.max(1)).collect() } else { Vec::new() };
    let fixes = if a.rank && fits { rank::fixes(&s, &slo) } else { Vec::new() };
    let mut vs = Vec::new();
    for change in &a.vs {
        let t = versus(&s, change)?;
        if let Err(e) = t.check_fit() {
            return Err(Failure::usage(format!("--vs {change}: {e}")));
        }
        vs.push(Versus { change: change.clone(), points: a.concurrency.iter().map(|&c| t.point(c)).collect() });
    }
    Ok(PlanReport {
        schema: report::SCHEMA,
        model: s.model.name.clone(),
        params: s.model.params(),
        fits,
        fit_error,
        memory_per_gpu_gb: s.memory(),
        max_kv_tokens: s.max_kv_tokens(),
        max_concurrency: s.max_concurrency(),
        points,
        saturation,
        ranked_plans: ranked,
        fixes,
        vs,
        calibration,
        scenario: s,
        slo,
    })
}

fn write_file(p: &PathBuf, f: &dyn Fn(&mut dyn Write) -> std::io::Result<()>) -> Result<(), Failure> {
    let mut out: Box<dyn Write> = if p.as_os_str() == "-" {
        Box::new(std::io::stdout())
    } else {
        Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).map_err(|e| Failure::runtime(format!("cannot write {}: {e}", p.display())))?,
        ))
    };
    f(&mut out).and_then(|_| out.flush()).map_err(|e| Failure::runtime(format!("cannot write {}: {e}", p.display())))
}

pub fn run(a: PlanArgs) -> Result<(), Failure> {
    if a.validate {
        let v = validate::run(Engine::default()).map_err(input)?;
        crate::say!("{}", validate::markdown(&v));
        if let Some(p) = &a.json {
            write_file(p, &|w| serde_json::to_writer_pretty(&mut *w, &v).map_err(std::io::Error::other))?;
        }
        return Ok(());
    }
    let r = build(&a)?;
    let mut out = std::io::stdout().lock();
    let _ = report::write_terminal(&r, a.explain, &mut out);
    drop(out);
    if let Some(p) = &a.json {
        write_file(p, &|w| serde_json::to_writer_pretty(&mut *w, &r).map_err(std::io::Error::other).and_then(|_| writeln!(w)))?;
    }
    if let Some(p) = &a.markdown {
        write_file(p, &|w| report::write_markdown(&r, w))?;
    }
    match &r.fit_error {
        Some(e) => Err(Failure::usage(format!("the plan does not fit: {e}"))),
        None => Ok(()),
    }
}
