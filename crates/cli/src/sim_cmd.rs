//! `servetune sim`: run the simulated server until Ctrl-C (or its simulated crash).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use servetune_bench::spec::parse_duration;
use servetune_sim::cost::{preset, Profile, PRESETS};
use servetune_sim::{Faults, MetricsStyle, SimConfig, SimError};

use crate::Failure;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StyleArg {
    Sglang,
    Vllm,
}

/// Run a simulated sglang/vLLM-compatible server: continuous batching, paged KV cache and queueing,
/// with step times from a preset or a profile file. For demos, what-if questions and testing clients.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  servetune sim --preset reference-kvm --listen 127.0.0.1:30000\n  servetune sim --profile my-deploy.toml --metrics-style vllm\n  servetune sim --preset tiny --error-status 503 --error-rate 0.1 --stall-every 200 --stall-for 2s"
)]
pub struct SimArgs {
    /// Address to listen on (port 0 picks a free one)
    #[arg(long, default_value = "127.0.0.1:30000")]
    pub listen: SocketAddr,
    /// Built-in deployment profile (see --list-presets)
    #[arg(long, default_value = "reference-kvm", conflicts_with = "profile")]
    pub preset: String,
    /// Profile file (TOML or JSON) with the engine limits and step-cost terms
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// List the presets and exit
    #[arg(long)]
    pub list_presets: bool,
    /// Override: maximum running requests
    #[arg(long, value_name = "N")]
    pub max_running_requests: Option<u32>,
    /// Override: KV-cache capacity in tokens
    #[arg(long, value_name = "N")]
    pub kv_tokens: Option<u64>,
    /// Override: tokens per KV page
    #[arg(long, value_name = "N")]
    pub page_size: Option<u32>,
    /// Override: token budget per step (chunked prefill)
    #[arg(long, value_name = "N")]
    pub chunked_prefill_size: Option<u32>,
    /// Override: served model name
    #[arg(long)]
    pub model: Option<String>,
    /// Override: mean output length when ignore_eos is off
    #[arg(long, value_name = "N")]
    pub eos_mean_tokens: Option<u32>,
    /// Prometheus metric names
    #[arg(long, value_enum, default_value = "sglang")]
    pub metrics_style: StyleArg,
    /// Seed of EOS positions and fault choices
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Fault: fraction of requests failing mid-stream with an error event
    #[arg(long, default_value_t = 0.0, value_name = "F")]
    pub fail_rate: f64,
    /// Fault: HTTP status to answer (with --error-rate)
    #[arg(long, value_name = "CODE")]
    pub error_status: Option<u16>,
    /// Fault: fraction of requests answered with --error-status (default 1 when --error-status is given)
    #[arg(long, value_name = "F")]
    pub error_rate: Option<f64>,
    /// Fault: every N-th engine step stalls
    #[arg(long, value_name = "N")]
    pub stall_every: Option<u64>,
    /// Fault: how long a stall lasts
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub stall_for: String,
    /// Fault: the server stops after this long
    #[arg(long, value_name = "DURATION")]
    pub crash_after: Option<String>,
    /// Fault: /health and generation answer 503 for this long after start
    #[arg(long, value_name = "DURATION")]
    pub slow_start: Option<String>,
    /// Time steps with the performance model, the deployment as KEY=VALUE pairs (keys as plan's
    /// flags: model, gpu, gpus, link, quant, kv-dtype, tp, pp, ep, dp-attention, input-len,
    /// output-len, max-running, overlap, cuda-graphs, mixed-prefill, step-overhead-ms), e.g.
    /// --from-plan model=glm-5,quant=nvfp4,gpu=rtx-pro-6000-se,gpus=8,link=pcie-host-staged
    #[arg(long, value_name = "KEY=VALUE,...", conflicts_with = "profile")]
    pub from_plan: Option<String>,
}

fn input(e: impl std::fmt::Display) -> Failure {
    Failure::usage(e.to_string())
}

/// Resolves the profile and faults from the flags.
pub fn resolve(a: &SimArgs) -> Result<SimConfig, Failure> {
    let mut cost: Option<std::sync::Arc<dyn servetune_sim::StepCost>> = None;
    let mut p: Profile = match (&a.from_plan, &a.profile) {
        (Some(pairs), _) => {
            let s = servetune_model::ScenarioSpec::parse_pairs("--from-plan", pairs).and_then(|spec| spec.build()).map_err(input)?;
            s.check_fit().map_err(|e| Failure::usage(format!("--from-plan: {e}")))?;
            let prof = servetune_sim::from_plan::profile(&s);
            cost = Some(std::sync::Arc::new(servetune_sim::from_plan::PlanCost { scenario: s }));
            prof
        }
        (None, Some(path)) => Profile::load(path).map_err(input)?,
        (None, None) => preset(&a.preset).map_err(input)?,
    };
    if let Some(v) = a.max_running_requests {
        p.max_running_requests = v;
    }
    if let Some(v) = a.kv_tokens {
        p.kv_tokens = v;
    }
    if let Some(v) = a.page_size {
        p.page_size = v;
    }
    if let Some(v) = a.chunked_prefill_size {
        p.chunked_prefill_size = v;
    }
    if let Some(v) = &a.model {
        p.model = v.clone();
    }
    if let Some(v) = a.eos_mean_tokens {
        p.eos_mean_tokens = v;
    }
    p.validate().map_err(|e| Failure::usage(format!("impossible configuration: {e}")))?;
    let dur = |flag: &str, v: &Option<String>| v.as_deref().map(|s| parse_duration(flag, s)).transpose().map_err(|e| Failure::usage(e.0));
    let faults = Faults {
        fail_rate: a.fail_rate,
        error_status: a.error_status,
        error_rate: a.error_rate.unwrap_or(if a.error_status.is_some() { 1.0 } else { 0.0 }),
        stall_every: a.stall_every,
        stall_for: parse_duration("--stall-for", &a.stall_for).map_err(|e| Failure::usage(e.0))?,
        crash_after: dur("--crash-after", &a.crash_after)?,
        slow_start: dur("--slow-start", &a.slow_start)?,
    };
    faults.validate().map_err(input)?;
    let style = match a.metrics_style {
        StyleArg::Sglang => MetricsStyle::Sglang,
        StyleArg::Vllm => MetricsStyle::Vllm,
    };
    Ok(SimConfig { profile: p, cost, seed: a.seed, metrics_style: style, faults })
}

pub fn run(a: SimArgs) -> Result<(), Failure> {
    if a.list_presets {
        for (name, desc) in PRESETS {
            crate::say!("{name:15} {desc}");
        }
        return Ok(());
    }
    let cfg = resolve(&a)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("cannot start the runtime: {e}")))?;
    rt.block_on(async {
        let p = cfg.profile.clone();
        let crash = cfg.faults.crash_after;
        let mut srv = servetune_sim::start(cfg, a.listen).await.map_err(|e| match e {
            SimError::Input(m) => Failure::usage(m),
            SimError::Runtime(m) => Failure::runtime(m),
        })?;
        crate::say!("servetune sim listening on {}", srv.url);
        crate::say!(
            "  profile {}: model {}, tp {}, max running {}, KV {} tokens (pages of {}), step = {} ms + {} ms/decode + {} ms/prefill token + {} us/context token",
            p.name, p.model, p.tp_size, p.max_running_requests, p.kv_tokens, p.page_size, p.cost.overhead_ms, p.cost.per_decode_token_ms, p.cost.per_prefill_token_ms, p.cost.per_context_token_us
        );
        tokio::select! {
            _ = tokio::signal::ctrl_c() => Ok(()),
            _ = srv.crashed() => Err(Failure::runtime(format!(
                "simulated crash after {:.1}s (--crash-after)", crash.map(|d| d.as_secs_f64()).unwrap_or(0.0)
            ))),
        }
    })
}
