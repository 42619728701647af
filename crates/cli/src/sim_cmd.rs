//! `servetune sim`: run the simulated server until Ctrl-C (or its simulated crash).

use std::net::SocketAddr;
use std::path::PathBuf;

use std::time::Duration;

use clap::{Args, ValueEnum};
use servetune_sim::cost::{preset, Profile, Scheduling, PRESETS};
use servetune_sim::rendezvous::NodePlace;
use servetune_sim::{ExactTiming, Faults, Limits, MetricsStyle, Mode, SimConfig, SimError};
use servetune_stats::parse_duration;

use crate::Failure;

/// `--metrics-style`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StyleArg {
    Sglang,
    Vllm,
}

/// `--scheduling`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SchedulingArg {
    Mixed,
    PrefillFirst,
}

impl From<SchedulingArg> for Scheduling {
    fn from(a: SchedulingArg) -> Self {
        match a {
            SchedulingArg::Mixed => Scheduling::Mixed,
            SchedulingArg::PrefillFirst => Scheduling::PrefillFirst,
        }
    }
}

/// Run a simulated sglang/vLLM-compatible server: continuous batching, paged KV cache and queueing,
/// with step times from a preset or a profile file. For demos, what-if questions and testing clients.
#[derive(Debug, Args)]
#[command(
    allow_negative_numbers = true,
    after_help = "Examples:\n  servetune sim --preset reference-kvm --listen 127.0.0.1:30000\n  servetune sim --profile my-deploy.toml --metrics-style vllm\n  servetune sim --preset tiny --error-status 503 --error-rate 0.1 --stall-every 200 --stall-for 2s\n  servetune sim --exact --ttft 80ms --itl 20ms --tokens-per-chunk 2 --truncate-rate 0.05"
)]
pub struct SimArgs {
    /// Address to listen on (port 0 picks a free one)
    #[arg(long, default_value = "127.0.0.1:30000")]
    pub listen: SocketAddr,
    /// Multi-node: nodes in the deployment; node 0 serves once the others joined it (sglang's --nnodes)
    #[arg(long, default_value_t = 1, help_heading = "Multi-node")]
    pub nnodes: u32,
    /// Multi-node: this node's rank; ranks above 0 join the head and serve nothing themselves
    #[arg(long, default_value_t = 0, help_heading = "Multi-node")]
    pub node_rank: u32,
    /// Multi-node: the head's rendezvous address HOST:PORT
    #[arg(long, value_name = "HOST:PORT", help_heading = "Multi-node")]
    pub dist_init_addr: Option<String>,
    /// Multi-node: how long the head waits for the others, and a follower for the head
    #[arg(long, default_value = "300s", value_name = "DURATION", help_heading = "Multi-node")]
    pub join_timeout: String,
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
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_running_requests: Option<u32>,
    /// Override: KV-cache capacity in tokens
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(2..=1_000_000_000_000))]
    pub kv_tokens: Option<u64>,
    /// Override: tokens per KV page
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub page_size: Option<u32>,
    /// Override: token budget per step (chunked prefill)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=16_777_216))]
    pub chunked_prefill_size: Option<u32>,
    /// Override: how a step is composed while prompts wait: `mixed` (prompt chunks ride in decode
    /// steps: vLLM, TensorRT-LLM, sglang --enable-mixed-chunk) or `prefill-first` (prompts run alone
    /// and decoding waits: sglang's default)
    #[arg(long, value_enum, value_name = "MODE")]
    pub scheduling: Option<SchedulingArg>,
    /// Override: served model name
    #[arg(long)]
    pub model: Option<String>,
    /// Override: mean output length when ignore_eos is off
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=16_777_216))]
    pub eos_mean_tokens: Option<u32>,
    /// Prometheus metric names
    #[arg(long, value_enum, default_value = "sglang")]
    pub metrics_style: StyleArg,
    /// Seed of EOS positions and fault choices
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Exact timing: serve every request on its own fixed schedule (--ttft, --itl), no batching,
    /// so a client's measurements can be checked against known values
    #[arg(long)]
    pub exact: bool,
    /// Exact timing: time to the first chunk
    #[arg(long, default_value = "0ms", value_name = "DURATION", requires = "exact")]
    pub ttft: String,
    /// Exact timing: time between chunks
    #[arg(long, default_value = "0ms", value_name = "DURATION", requires = "exact")]
    pub itl: String,
    /// Exact timing: output tokens per chunk
    #[arg(long, default_value_t = 1, value_name = "N", requires = "exact",
          value_parser = clap::value_parser!(u32).range(1..=servetune_sim::MAX_TOKENS_PER_CHUNK as i64))]
    pub tokens_per_chunk: u32,
    /// Exact timing: the first N output tokens of a chat stream are reasoning_content
    #[arg(long, default_value_t = 0, value_name = "N", requires = "exact")]
    pub reasoning_tokens: u32,
    /// Exact timing: no role-only first chunk on chat streams
    #[arg(long, requires = "exact")]
    pub no_role_chunk: bool,

    /// Fault: fraction of requests failing mid-stream with an error event
    #[arg(long, default_value_t = 0.0, value_name = "F")]
    pub fail_rate: f64,
    /// Fault: fraction of streams that send an event that is not JSON after the first chunk
    #[arg(long, default_value_t = 0.0, value_name = "F")]
    pub malformed_rate: f64,
    /// Fault: fraction of streams whose connection breaks after the first chunk
    #[arg(long, default_value_t = 0.0, value_name = "F")]
    pub truncate_rate: f64,
    /// Fault: fraction of requests answered 200 with an HTML page instead of an event stream
    #[arg(long, default_value_t = 0.0, value_name = "F")]
    pub not_sse_rate: f64,
    /// Fault: fraction of streams that pause for --stall-for after the first chunk
    #[arg(long, default_value_t = 0.0, value_name = "F")]
    pub stall_rate: f64,
    /// Fault: streams stop after N tokens with finish reason "stop", whatever ignore_eos says
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub early_stop_at: Option<u32>,
    /// Fault: HTTP status to answer (with --error-rate)
    #[arg(long, value_name = "CODE")]
    pub error_status: Option<u16>,
    /// Fault: fraction of requests answered with --error-status (default 1 when --error-status is given)
    #[arg(long, value_name = "F")]
    pub error_rate: Option<f64>,
    /// Fault: every N-th engine step stalls
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
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

    /// A request's headers must be complete this long after its first byte
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub header_timeout: String,
    /// A request's body must arrive this long after its headers (else HTTP 408)
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub body_timeout: String,
    /// A connection with no request in progress is closed after this long
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    pub idle_timeout: String,
    /// Connections served at once; more get HTTP 503 and are closed
    #[arg(long, default_value_t = 10_000, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=servetune_sim::conn::MAX_CONNECTIONS as i64))]
    pub max_connections: u32,
    /// Time steps with the performance model, the deployment as KEY=VALUE pairs (keys as plan's
    /// flags: model, gpu, gpus, link, quant, kv-dtype, tp, pp, ep, dp-attention, input-len,
    /// output-len, max-running, overlap, cuda-graphs, mixed-prefill, step-overhead-ms,
    /// request-step-us, request-latency-ms, routing-skew, moe-efficiency, engine), e.g.
    /// --from-plan model=glm-5,quant=nvfp4,gpu=rtx-pro-6000-se,gpus=8,link=pcie-host-staged
    #[arg(long, value_name = "KEY=VALUE,...", conflicts_with = "profile")]
    pub from_plan: Option<String>,
    /// The only directory /stop_profile writes traces under; a client's output_dir names a
    /// subdirectory of it, never a path [default: servetune-profile in the system temp directory]
    #[arg(long, value_name = "DIR")]
    pub profile_dir: Option<PathBuf>,
    /// With --from-plan: the fraction of memory bandwidth the fused-MoE kernels reach, replacing
    /// the kernel tables' rate for the GPU and format (untuned kernels reach less than tuned
    /// ones; absent: the tables' rate, else the model's default; for MXFP4 experts the tables give
    /// the kernel's marginal rate, its fixed part counted in the per-kernel floors), e.g. 0.8
    #[arg(long, value_name = "F", requires = "from_plan")]
    pub moe_efficiency: Option<f64>,
}

fn input(e: impl std::fmt::Display) -> Failure {
    Failure::usage(e.to_string())
}

/// Resolves the profile and faults from the flags.
pub fn resolve(a: &SimArgs) -> Result<SimConfig, Failure> {
    let (mut p, cost): (Profile, Option<std::sync::Arc<dyn servetune_sim::StepCost>>) = match (&a.from_plan, &a.profile) {
        (Some(pairs), _) => {
            let (prof, cost) = from_plan(a, pairs)?;
            (prof, Some(cost))
        }
        (None, Some(path)) => (Profile::load(path).map_err(input)?, None),
        (None, None) => (preset(&a.preset).map_err(input)?, None),
    };
    override_profile(a, &mut p);
    p.validate().map_err(|e| Failure::usage(format!("impossible configuration: {e}")))?;
    let faults = faults(a)?;
    faults.validate().map_err(input)?;
    let style = match a.metrics_style {
        StyleArg::Sglang => MetricsStyle::Sglang,
        StyleArg::Vllm => MetricsStyle::Vllm,
    };
    let limits = Limits {
        header_timeout: dur("--header-timeout", &a.header_timeout)?,
        body_timeout: dur("--body-timeout", &a.body_timeout)?,
        idle_timeout: dur("--idle-timeout", &a.idle_timeout)?,
        max_connections: a.max_connections,
    };
    let mode = if a.exact {
        Mode::Exact(ExactTiming {
            ttft: dur("--ttft", &a.ttft)?,
            itl: dur("--itl", &a.itl)?,
            tokens_per_chunk: a.tokens_per_chunk,
            reasoning_tokens: a.reasoning_tokens,
            role_chunk: !a.no_role_chunk,
        })
    } else {
        Mode::Engine
    };
    let profile_dir = a.profile_dir.clone().unwrap_or_else(servetune_sim::default_profile_dir);
    let cfg = SimConfig { profile: p, cost, seed: a.seed, metrics_style: style, faults, mode, limits, profile_dir };
    cfg.validate().map_err(input)?;
    Ok(cfg)
}

/// `--from-plan PAIRS`: the simulator's profile and step cost from the performance model's
/// scenario, every number checked.
fn from_plan(a: &SimArgs, pairs: &str) -> Result<(Profile, std::sync::Arc<dyn servetune_sim::StepCost>), Failure> {
    let mut spec = servetune_model::ScenarioSpec::parse_pairs("--from-plan", pairs).map_err(input)?;
    if let Some(f) = a.moe_efficiency {
        if !(servetune_model::request::MIN_MOE_EFFICIENCY..=1.0).contains(&f) {
            // As typed for everyday values; in exponent form only where the digits would run on.
            let shown = if f == 0.0 || (1e-6..1e9).contains(&f.abs()) { format!("{f}") } else { format!("{f:e}") };
            return Err(Failure::usage(format!(
                "--moe-efficiency {shown}: give the fraction of memory bandwidth the fused-MoE kernels reach, from {} to 1",
                servetune_model::request::MIN_MOE_EFFICIENCY
            )));
        }
        spec.moe_efficiency = Some(f);
    }
    // The model names its flags (--request-step-us); here the value came from a pair.
    let mut s = spec.build().map_err(|e| Failure::usage(format!("--from-plan {pairs}: {e}")))?;
    // The step cost prices prompt chunks as the engine composes its steps: mixed steps let
    // them ride in decode, prefill-first runs them as passes of their own.
    if let Some(v) = a.scheduling {
        s.engine.mixed_prefill = Scheduling::from(v) == Scheduling::Mixed;
    }
    s.check_fit().map_err(|e| Failure::usage(format!("--from-plan: {e}")))?;
    let prof = servetune_sim::from_plan::profile(&s);
    servetune_sim::from_plan::check_cost(&s, &prof).map_err(|e| {
        Failure::usage(format!(
            "--from-plan {pairs}{}: {e}; a number in it is out of range (step-overhead-ms, request-step-us, request-latency-ms, moe-efficiency): give a realistic value",
            a.moe_efficiency.map(|f| format!(" --moe-efficiency {f:?}")).unwrap_or_default()
        ))
    })?;
    Ok((prof, std::sync::Arc::new(servetune_sim::from_plan::PlanCost { scenario: s })))
}

/// The profile flags given on the command line, over the profile.
fn override_profile(a: &SimArgs, p: &mut Profile) {
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
    if let Some(v) = a.scheduling {
        p.scheduling = v.into();
    }
    if let Some(v) = &a.model {
        p.model = v.clone();
    }
    if let Some(v) = a.eos_mean_tokens {
        p.eos_mean_tokens = v;
    }
}

fn dur(flag: &str, v: &str) -> Result<Duration, Failure> {
    parse_duration(flag, v).map_err(|e| Failure::usage(e.0))
}

fn faults(a: &SimArgs) -> Result<Faults, Failure> {
    let opt = |flag: &str, v: &Option<String>| v.as_deref().map(|s| dur(flag, s)).transpose();
    Ok(Faults {
        fail_rate: a.fail_rate,
        error_status: a.error_status,
        error_rate: a.error_rate.unwrap_or(if a.error_status.is_some() { 1.0 } else { 0.0 }),
        malformed_rate: a.malformed_rate,
        truncate_rate: a.truncate_rate,
        not_sse_rate: a.not_sse_rate,
        stall_rate: a.stall_rate,
        stall_every: a.stall_every,
        stall_for: dur("--stall-for", &a.stall_for)?,
        early_stop_at: a.early_stop_at,
        crash_after: opt("--crash-after", &a.crash_after)?,
        slow_start: opt("--slow-start", &a.slow_start)?,
    })
}

fn sim_failure(e: SimError) -> Failure {
    match e {
        SimError::Input(m) => Failure::usage(m),
        SimError::Runtime(m) => Failure::runtime(m),
    }
}

pub fn run(a: SimArgs) -> Result<(), Failure> {
    if a.list_presets {
        for (name, desc) in PRESETS {
            crate::say!("{name:15} {desc}");
        }
        return Ok(());
    }
    let place = NodePlace::new(a.nnodes, a.node_rank, a.dist_init_addr.as_deref()).map_err(sim_failure)?;
    let join_timeout = servetune_stats::parse_duration("--join-timeout", &a.join_timeout).map_err(|e| Failure::usage(e.0))?;
    let cfg = resolve(&a)?;
    // Followers join the head and serve nothing; the head serves once all have joined.
    let _followers = match &place {
        Some(p) if p.rank > 0 => return p.follow(join_timeout, &mut |l| crate::tell!("servetune sim: {l}")).map_err(sim_failure),
        Some(p) => {
            crate::tell!("servetune sim: node 0 of {}: waiting for the others at {}", p.nnodes, p.addr);
            p.head_wait(join_timeout, &mut |l| crate::tell!("servetune sim: {l}")).map_err(sim_failure)?
        }
        None => Vec::new(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("cannot start the runtime: {e}")))?;
    rt.block_on(async {
        let p = cfg.profile.clone();
        let crash = cfg.faults.crash_after;
        let mode = cfg.mode;
        let mut srv = servetune_sim::start(cfg, a.listen).await.map_err(sim_failure)?;
        crate::say!("servetune sim listening on {}", srv.url);
        match mode {
            Mode::Exact(t) => crate::say!(
                "  exact timing: ttft {} ms, itl {} ms, {} token(s) per chunk (no batching); model {}",
                t.ttft.as_secs_f64() * 1e3, t.itl.as_secs_f64() * 1e3, t.tokens_per_chunk, p.model
            ),
            Mode::Engine => crate::say!(
                "  profile {}: model {}, tp {}, max running {}, KV {} tokens (pages of {}), step = {} ms + {} ms/decode + {} ms/prefill token + {} us/context token",
                p.name, p.model, p.tp_size, p.max_running_requests, p.kv_tokens, p.page_size, p.cost.overhead_ms, p.cost.per_decode_token_ms, p.cost.per_prefill_token_ms, p.cost.per_context_token_us
            ),
        }
        // What sglang logs at start-up when the fused-MoE kernels have no tuned config.
        if let (Mode::Engine, Some(w)) = (mode, p.moe_config_warning()) {
            crate::tell!("servetune sim: WARNING {w}");
        }
        let ctrl_c = tokio::signal::ctrl_c();
        let crashed = srv.crashed();
        tokio::pin!(ctrl_c, crashed);
        loop {
            tokio::select! {
                _ = &mut ctrl_c => return Ok(()),
                _ = &mut crashed => return Err(Failure::runtime(format!(
                    "simulated crash after {:.1}s (--crash-after)", crash.map(|d| d.as_secs_f64()).unwrap_or(0.0)
                ))),
                Some(n) = srv.next_notice() => crate::tell!("servetune sim: {n}"),
            }
        }
    })
}
