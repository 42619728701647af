//! The one place the campaign calls servetune-model: a scenario for the box and an experiment's
//! knobs, the predicted throughput at each of the campaign's sweep points, and the what-ifs the
//! planner prices (a P2P link, tuned MoE kernels, another parallelism plan, a higher running cap).
//!
//! Every prediction the campaign shows goes through [`scenario`], so one [`ModelBox`] (the box, the
//! workload, the sweep and, when the box has one, its [`Calibration`]) gives one number per point:
//! the planner's gains, the gap finding, the report's charts and `campaign next` all agree.
//!
//! A point's number is what the campaign's own bench would measure there ([`client_rate`]): the
//! model's step run in virtual time over the sweep's workload (its request count and lengths, the
//! running cap, prompts queued behind it), as `servetune plan` answers. The steady state (every
//! request running, prefill amortized) is not what a sweep of a few waves of requests measures:
//! on the demo's box at concurrency 128 with 128 requests and a 64-request cap it says 465 tok/s
//! where the virtual run says 749 and the simulated server gives about 825.

use serde::{Deserialize, Serialize};
use servetune_model::calibrate::{self, Factors, Measured};
use servetune_model::hw;
use servetune_model::predict::{EngineName, Scenario};
use servetune_model::quant::Dtype;
use servetune_model::rank::{self, ConcurrencyRange, TUNED_MOE_EFFICIENCY};
use servetune_model::request::LinkSource;
use servetune_model::workload::{ClientRun, LengthDist, VirtualBench, Workload};
use servetune_model::{ModelSource, ScenarioSpec};
use servetune_sim::from_plan::PlanBench;
use servetune_stats::{Slo, SloMetric};

/// What the model needs to know about the campaign.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelBox {
    /// Catalog model name.
    pub model: String,
    /// The checkpoint's format (`--quant`).
    pub quant: String,
    /// Catalog GPU name.
    pub gpu: String,
    /// GPUs in the deployment.
    pub gpus: u32,
    /// Catalog link between the GPUs.
    pub link: String,
    /// Prompt tokens per request.
    pub input_len: u32,
    /// Output tokens per request.
    pub output_len: u32,
    /// Requests the campaign's bench measures at each sweep point (its `BenchPlan::requests`, set by
    /// `campaign::model_box`; a virtual run simulates at most [`virtual_requests_cap`] of them);
    /// `None` (a box an API caller builds without a sweep): ten per client, `plan`'s default.
    #[serde(default)]
    pub requests: Option<u64>,
    /// The goal's latency objectives (metric, percentile, bound): a predicted point must meet each
    /// with the virtual run's figure at that percentile, as a measured one must with the bench's.
    #[serde(skip)]
    pub objectives: Vec<Slo>,
    /// Highest concurrency the campaign benchmarks.
    pub max_concurrency: u32,
    /// The concurrencies the campaign benchmarks: a "best" prediction is the best of these points,
    /// as a measured best is the best of the measured ones.
    #[serde(default)]
    pub sweep: Vec<u32>,
    /// The serving engine whose defaults the model takes (sglang's for an engine it does not
    /// know, such as llama.cpp or the simulator).
    #[serde(default)]
    pub serving: EngineName,
    /// The serving engine's release as the server reported it (`/get_server_info`, `/version`),
    /// when it names a release: its defaults apply (`EngineRelease`); `None`: the current release.
    #[serde(default)]
    pub engine_version: Option<String>,
    /// The box's calibration, when an experiment in this environment has been measured; every
    /// prediction made with this box applies it.
    #[serde(default)]
    pub calibration: Option<Calibration>,
    /// The box's measured NCCL all-reduce (a recorded `fabric allreduce` document of this
    /// environment, [`crate::fabric_step::allreduce_for`]) with its fabric record: a measurement,
    /// so every prediction with this box uses it, raw and calibrated. Not stored with the box.
    #[serde(skip)]
    pub allreduce: Option<(i64, servetune_model::comm::MeasuredAllReduce)>,
}

impl ModelBox {
    /// The same box with the engine release the server reported, when the campaign's engine
    /// (`engine`, its template's name) is one the model knows; another engine's version (llama.cpp,
    /// the simulator) says nothing about the model's engine defaults.
    pub fn with_engine_version(self, engine: &str, v: Option<String>) -> ModelBox {
        let known = EngineName::from_name(engine) == Some(self.serving);
        ModelBox { engine_version: v.filter(|_| known), ..self }
    }

    /// The reported engine version when it names a release the model reads (a version such as
    /// `0.4.6` or a dated nightly); anything else (a simulator's or llama.cpp's version string) is
    /// the current release.
    fn release_version(&self) -> Option<String> {
        let v = self.engine_version.as_deref()?;
        servetune_model::predict::EngineRelease::parse("engine version", &format!("{}@{v}", self.serving.name()))
            .ok()
            .and_then(|r| r.version)
    }

    /// The same box without its calibration: the model's own prediction.
    pub fn uncalibrated(&self) -> ModelBox {
        ModelBox { calibration: None, ..self.clone() }
    }

    /// The same box with `c` (or none).
    pub fn calibrated(&self, c: Option<Calibration>) -> ModelBox {
        ModelBox { calibration: c, ..self.clone() }
    }

    /// This box with the environment's measured NCCL all-reduce, if one was recorded: measured on
    /// this box's link and GPU, so an alternative on another link (the P2P move) is priced by the
    /// model.
    pub fn with_allreduce(self, m: Option<(i64, servetune_model::comm::MeasuredAllReduce)>) -> ModelBox {
        // The catalog's names, as the scenario carries them (a probed GPU name is an alias).
        let gpu = servetune_model::hw::gpu(&self.gpu).map_or_else(|_| self.gpu.clone(), |g| g.name);
        let link = servetune_model::hw::link(&self.link).map_or_else(|_| self.link.clone(), |l| l.name);
        let on = (link, gpu);
        ModelBox { allreduce: m.map(|(id, m)| (id, servetune_model::comm::MeasuredAllReduce { measured_on: Some(on), ..m })), ..self }
    }
}

/// Efficiency factors fitted to one measured sweep of this box (`servetune plan --calibrate`'s
/// fit, [`Factors`]: one point gives a scale on the whole step; more give a memory-bandwidth
/// scale, the per-step overhead and, with four or more points, a communication scale), with the
/// journal records it came from. Calibration, not a prediction: every figure made with it says so.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// The journal's calibration record.
    pub id: i64,
    /// The experiment whose sweep it was fitted to.
    pub experiment: i64,
    /// The fitted factors (a journal written before the one-point form holds the terms).
    #[serde(flatten)]
    pub factors: Factors,
    /// Root-mean-square of ln(predicted / measured) over the fitted points.
    pub rms_log_error: f64,
    /// Points fitted.
    pub points: usize,
    /// What the factors were fitted against; a body written before the field says nothing and
    /// reads as the steady state.
    #[serde(default)]
    pub fitted_to: FittedTo,
}

/// What a calibration's factors were fitted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FittedTo {
    /// The steady state (every request running, prefill amortized): calibrations recorded before
    /// the campaign priced its sweep's own run. Predictions no longer use them: applied to the
    /// sweep's run they would be off by the run's share of the steady rate.
    #[default]
    SteadyState,
    /// What the campaign's sweep measures (its run in virtual time, [`client_rate`]).
    SweepRun,
}

/// The parallelism, cap and memory settings of one experiment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Layout {
    /// Tensor parallelism.
    pub tp: u32,
    /// Pipeline parallelism.
    pub pp: u32,
    /// Expert parallelism.
    pub ep: u32,
    /// The running-request cap, when one is set or shown.
    pub max_running: Option<u32>,
    /// The KV cache's format the engine was told (`kv_dtype`); None: its `auto`, which the model
    /// decides for the checkpoint and release. Absent in journals written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache: Option<servetune_model::quant::KvDtype>,
    /// The share of GPU memory the engine was told to take (`mem_fraction`); None: its default,
    /// which the model applies by engine. Absent in journals written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_fraction: Option<f64>,
}

/// A prediction: best output tok/s under the goal, at which concurrency.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Predicted {
    /// Output tokens per second.
    pub output_tok_s: f64,
    /// The concurrency it is reached at.
    pub concurrency: u32,
}

/// Another plan the model ranks above the current one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alternative {
    /// The alternative's parallelism.
    pub layout: Layout,
    /// The alternative in words.
    pub label: String,
    /// What the model predicts for it.
    pub predicted: Predicted,
}

/// Checks that the model can price this campaign (catalog model, GPU, quant, link).
pub fn check(mb: &ModelBox) -> Result<(), String> {
    scenario(mb, Layout { tp: mb.gpus, pp: 1, ep: 1, max_running: None, kv_cache: None, mem_fraction: None }).map(|_| ())
}

/// The scenario of `mb` under `l`, built and validated by the model's own `ScenarioSpec` (the
/// campaign holds no second copy of plan logic).
pub fn scenario(mb: &ModelBox, l: Layout) -> Result<Scenario, String> {
    let mut spec = ScenarioSpec::new(ModelSource::Catalog(mb.model.clone()), mb.gpu.clone());
    // `Dtype::parse` takes any letter case: journals written before `campaign init` stored the
    // canonical name keep "FP8" as typed.
    spec.quant.checkpoint = Some(Dtype::parse("--quant", &mb.quant).map_err(|e| e.to_string())?);
    spec.link = LinkSource::Catalog(mb.link.clone());
    spec.gpus = mb.gpus;
    spec.tp = Some(l.tp);
    spec.pp = l.pp;
    spec.ep = l.ep;
    spec.input_len = mb.input_len;
    spec.output_len = mb.output_len;
    spec.max_running = l.max_running;
    spec.quant.kv_cache = l.kv_cache;
    spec.mem_fraction = l.mem_fraction;
    spec.engine = mb.serving;
    spec.engine_version = mb.release_version();
    spec.allreduce = mb.allreduce.as_ref().map(|(_, m)| m.clone());
    let mut s = spec.build().map_err(|e| e.to_string())?;
    if let Some(c) = &mb.calibration {
        s.engine = c.factors.apply(&s.engine);
    }
    Ok(s)
}

/// The goal's latency objectives, and the concurrency range the campaign benchmarks.
fn slo(mb: &ModelBox) -> (Vec<Slo>, ConcurrencyRange) {
    (mb.objectives.clone(), ConcurrencyRange { max: Some(mb.max_concurrency) })
}

/// The most requests a virtual run at `concurrency` simulates: the sweep's own count up to this.
/// Past twenty waves of clients the ramp and tail are at most a twentieth of the run, and a
/// sweep of millions of requests would otherwise cost every planning pass minutes (a run costs
/// about 15 ms per 1,000 requests in a release build).
fn virtual_requests_cap(concurrency: u32) -> u64 {
    (20 * u64::from(concurrency)).max(10_000)
}

/// The campaign's bench workload at `concurrency`: its requests per point (at most
/// [`virtual_requests_cap`]) and its fixed lengths.
fn workload(mb: &ModelBox, concurrency: u32) -> Workload {
    Workload {
        requests: mb.requests.map(|r| r.min(virtual_requests_cap(concurrency))),
        input: LengthDist::Fixed { len: mb.input_len.max(1) },
        output: LengthDist::Fixed { len: mb.output_len.max(1) },
        seed: 0,
    }
}

/// What the campaign's bench would measure on `s` at `concurrency`: output tok/s over a
/// virtual-time run of its workload ([`workload`]).
pub fn client_rate(s: &Scenario, mb: &ModelBox, concurrency: u32) -> f64 {
    PlanBench.run(s, &workload(mb, concurrency), concurrency).output_tokens_per_s
}

/// The best point of `s` over the campaign's sweep, each point at what the campaign's bench would
/// measure there ([`client_rate`]'s run: its rate, and its TTFT and TPOT at each of the goal's
/// latency objectives' percentiles, [`meets`]). Without a known sweep (a box built by an API
/// caller), the one point is the concurrency the model's own ranking picks on its ladder up to the
/// highest point.
fn best(s: &Scenario, mb: &ModelBox) -> Option<Predicted> {
    let (slos, range) = slo(mb);
    s.check_fit().ok()?;
    let candidates: Vec<u32> = if mb.sweep.is_empty() { vec![rank::best(s, &slos, range)?.concurrency] } else { mb.sweep.clone() };
    candidates
        .into_iter()
        .map(|c| (c, PlanBench.run(s, &workload(mb, c), c)))
        .filter(|(_, run)| meets(run, &slos, mb.output_len))
        .map(|(c, run)| Predicted { output_tok_s: run.output_tokens_per_s, concurrency: c })
        .max_by(|a, b| a.output_tok_s.total_cmp(&b.output_tok_s))
}

/// Whether a run meets every objective, each judged on the run's figure at the objective's
/// percentile ([`at_percentile`]); an end-to-end bound on that TTFT plus that TPOT over the rest of
/// the output (the run keeps no end-to-end distribution).
fn meets(run: &ClientRun, slos: &[Slo], output_len: u32) -> bool {
    slos.iter().all(|o| {
        let (ttft, tpot) = (at_percentile(&run.ttft_ms, o.percentile), at_percentile(&run.tpot_ms, o.percentile));
        let v = match o.metric {
            SloMetric::Ttft => ttft,
            SloMetric::Tpot | SloMetric::Itl => tpot,
            SloMetric::E2e => ttft + tpot * output_len.saturating_sub(1) as f64,
        };
        o.met_by(v)
    })
}

/// A run's latency at percentile `p`: the run keeps p50, p90 and p99, so the nearest of them at or
/// above `p` (p99 past it), never a figure below the one asked.
fn at_percentile(l: &servetune_model::workload::Latency, p: f64) -> f64 {
    if p <= 50.0 {
        l.p50
    } else if p <= 90.0 {
        l.p90
    } else {
        l.p99
    }
}

/// The best prediction of `l` on `mb`.
pub fn predict(mb: &ModelBox, l: Layout) -> Option<Predicted> {
    best(&scenario(mb, l).ok()?, mb)
}

/// The predicted output tok/s of `l` at one concurrency, as the campaign's bench would measure it.
pub fn predict_at(mb: &ModelBox, l: Layout, concurrency: u32) -> Option<f64> {
    let s = scenario(mb, l).ok()?;
    s.check_fit().ok()?;
    Some(client_rate(&s, mb, concurrency))
}

/// The prediction with the GPUs on another link (e.g. `pcie5-p2p`).
pub fn with_link(mb: &ModelBox, l: Layout, link: &str) -> Option<Predicted> {
    let mut s = scenario(mb, l).ok()?;
    s.link = hw::link(link).ok()?;
    best(&s, mb)
}

/// The prediction with tuned fused-MoE kernels (expert reads at 80% of bandwidth, the model's
/// tuned-kernel assumption, times the box's calibrated memory or step scale); `None` for dense models or
/// when the model's own rate for this GPU and format is already at the tuned level. Whether the
/// kernels are tuned is the model's question, not the calibration's: a memory scale fitted to a
/// sweep moves every stream at once and cannot tell the MoE kernels from the rest.
pub fn with_tuned_moe(mb: &ModelBox, l: Layout) -> Option<Predicted> {
    let own = scenario(&mb.uncalibrated(), l).ok()?;
    own.model.moe?;
    if own.expert_stream_efficiency() >= TUNED_MOE_EFFICIENCY {
        return None;
    }
    let mut s = scenario(mb, l).ok()?;
    s.engine.moe_efficiency = TUNED_MOE_EFFICIENCY;
    s.engine.moe_table = false;
    best(&s, mb)
}

/// Single-replica plans (TP x PP = all GPUs) the campaign's predictions put above `l`, best first:
/// the model's enumeration of plans, each priced on the campaign's sweep (and calibration) as
/// every other prediction is. Replicas need a data-parallel launch (a router or --dp) that the
/// templates' knobs do not turn.
pub fn better_plans(mb: &ModelBox, l: Layout) -> Vec<Alternative> {
    let Ok(base) = scenario(mb, l) else { return Vec::new() };
    let Some(current) = predict(mb, l) else { return Vec::new() };
    let (slos, range) = slo(mb);
    let mut out: Vec<Alternative> = rank::rank(&base, &slos, range)
        .into_iter()
        .filter(|r| r.plan != base.plan && !r.plan.dp_attention && r.plan.dp() == 1)
        .filter_map(|r| {
            let layout = Layout {
                tp: r.plan.tp,
                pp: r.plan.pp,
                ep: r.plan.ep,
                max_running: l.max_running,
                kv_cache: l.kv_cache,
                mem_fraction: l.mem_fraction,
            };
            let predicted = predict(mb, layout)?;
            (predicted.output_tok_s > current.output_tok_s).then_some(Alternative { layout, label: r.label, predicted })
        })
        .collect();
    out.sort_by(|a, b| b.predicted.output_tok_s.total_cmp(&a.predicted.output_tok_s));
    out
}

/// The model's step at one concurrency, by term (ms), with the dominant term in words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepAt {
    /// The concurrency priced.
    pub concurrency: u32,
    /// Requests the model lets run at once (the cap and KV capacity applied).
    pub running: u32,
    /// Streaming the weights, ms per step.
    pub weights_ms: f64,
    /// Reading the KV cache, ms per step.
    pub kv_ms: f64,
    /// Compute, ms per step.
    pub compute_ms: f64,
    /// Communication (all-reduce and friends), ms per step.
    pub communication_ms: f64,
    /// Fixed per-step overhead, ms.
    pub overhead_ms: f64,
    /// Prefill's share of the step, ms.
    pub prefill_ms: f64,
    /// The step by the model's overlap rule (not the sum of the terms).
    pub total_ms: f64,
    /// The output tok/s the campaign's bench would measure there ([`client_rate`]), the figure
    /// every other prediction of the point gives.
    pub predicted_output_tok_s: f64,
    /// The dominant term with its numbers, as `servetune plan` words it.
    pub bottleneck: String,
    /// Its share of the step (0..1).
    pub bottleneck_share: f64,
    /// Tensor parallelism of the plan (its all-reduces are the communication term).
    pub tp: u32,
    /// The fused-MoE kernels' share of memory bandwidth the model assumes, for MoE models.
    pub moe_efficiency: Option<f64>,
}

/// The model's step of `l` on `mb` at `concurrency`, when the plan fits.
pub fn step_at(mb: &ModelBox, l: Layout, concurrency: u32) -> Option<StepAt> {
    let s = scenario(mb, l).ok()?;
    s.check_fit().ok()?;
    let p = s.point(concurrency);
    Some(StepAt {
        concurrency,
        running: p.running,
        weights_ms: p.step_ms.weights,
        kv_ms: p.step_ms.kv,
        compute_ms: p.step_ms.compute,
        communication_ms: p.step_ms.communication,
        overhead_ms: p.step_ms.overhead,
        prefill_ms: p.step_ms.prefill,
        total_ms: p.step_ms.total,
        predicted_output_tok_s: client_rate(&s, mb, concurrency),
        bottleneck: servetune_model::report::bottleneck_words(&p.bottleneck),
        bottleneck_share: p.bottleneck.share(),
        tp: s.plan.tp,
        moe_efficiency: s.model.moe.map(|_| s.expert_stream_efficiency()),
    })
}

/// Fits the model to one measured sweep of `l` on `mb` (the box's own, uncalibrated model):
/// `(concurrency, output tok/s)` points, each against what the bench would measure there
/// ([`calibrate::fit_client`]: a sweep that plateaus at the running cap is the virtual run's
/// plateau too, so the factors fit the step, not the queue). The returned factors carry `id` and
/// `experiment` 0 until the journal stores them. `None` when the model cannot price the plan or no
/// point produced tokens.
pub fn calibrate(mb: &ModelBox, l: Layout, points: &[(u32, f64)]) -> Option<Calibration> {
    let s = scenario(&mb.uncalibrated(), l).ok()?;
    s.check_fit().ok()?;
    let pts: Vec<Measured> = points
        .iter()
        .filter(|(c, t)| *c > 0 && t.is_finite() && *t > 0.0)
        .map(|&(concurrency, output_tokens_per_s)| Measured { concurrency, output_tokens_per_s })
        .collect();
    let f = calibrate::fit_client(&s, &pts, &|sc, c| client_rate(sc, mb, c))?;
    Some(Calibration {
        id: 0,
        experiment: 0,
        factors: f.factors,
        rms_log_error: f.rms_log_error,
        points: pts.len(),
        fitted_to: FittedTo::SweepRun,
    })
}

/// A term of the model's step that would explain a measurement on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TermChange {
    /// Which term, in words ("the TP8 communication (all-reduces and the logits' all-gather)", "memory
    /// reads", "the per-step overhead").
    pub term: String,
    /// The term's time per step in the prediction, ms.
    pub predicted_ms: f64,
    /// The factor it would have to be multiplied by for the model to give the measurement.
    pub factor: f64,
    /// The measurement that would settle whether it is this term.
    pub settle_with: String,
}

/// The scenario with one step term multiplied by a factor.
type ScaledBy<'a> = &'a dyn Fn(f64) -> Scenario;

/// `base` with its per-step overhead ([`Scenario::scaled_overhead_ms`], an early release's scale
/// included) `x` times as long, stated as `--step-overhead-ms` would state it. The eager launches of
/// a run without CUDA graphs stay as they are (the stated figure would add them again): at `x` = 1
/// it prices every step as `base` does.
pub fn overhead_times(base: &Scenario, x: f64) -> Scenario {
    let e = &base.engine;
    let launches_ms = if e.cuda_graphs { 0.0 } else { base.launches_ms() * e.release_step_scale };
    // A stated figure is not scaled again; the launches `overhead_ms` adds to it are, as in `base`.
    let fixed = base.scaled_overhead_ms() - launches_ms;
    let mut s = base.clone();
    s.engine.kernel_overhead_us = 0.0;
    s.engine.step_overhead_ms = fixed * x;
    s
}

/// Which single term of the step, scaled alone, makes the model give `measured` output tok/s at
/// `concurrency` for `l` on `mb` (its calibration included), and by how much: the all-reduce
/// (communication time), memory reads (every streaming rate) and the per-step overhead. Terms that
/// cannot reach the measurement within a factor of 20 either way are left out.
pub fn explain_gap(mb: &ModelBox, l: Layout, concurrency: u32, measured: f64) -> Vec<TermChange> {
    let Ok(base) = scenario(mb, l) else { return Vec::new() };
    if base.check_fit().is_err() || !(measured.is_finite() && measured > 0.0) {
        return Vec::new();
    }
    let p = base.point(concurrency);
    let rate = |f: &dyn Fn(f64) -> Scenario, x: f64| client_rate(&f(x), mb, concurrency);
    // Each term as a function of its factor x (x = 1 is the prediction); throughput falls as x grows.
    let comm = |x: f64| Scenario {
        engine: servetune_model::predict::Engine { comm_scale: base.engine.comm_scale * x, ..base.engine },
        ..base.clone()
    };
    let mem = |x: f64| Scenario {
        engine: servetune_model::predict::Engine { stream_scale: base.engine.stream_scale / x, ..base.engine },
        ..base.clone()
    };
    let over_ms = base.scaled_overhead_ms();
    let over = |x: f64| overhead_times(&base, x);
    let tp = base.plan.tp;
    // A recorded all-reduce already prices the term (the box's own link: `with_allreduce`): name
    // it, and ask for what would move it.
    let (comm_term, comm_settle) = match &mb.allreduce {
        Some((id, _)) => (
            format!("the TP{tp} communication (all-reduces as measured, fabric record {id}, and the logits' all-gather)"),
            "measure it again with `servetune fabric allreduce` while the server runs, or profile one serving step with `servetune trace` and compare its all-reduce kernels with the measurement".to_string(),
        ),
        None => (
            format!("the TP{tp} communication (all-reduces and the logits' all-gather)"),
            "run `servetune fabric allreduce --json ar.json` on the box and record it with `servetune campaign fabric`: the predictions then price the all-reduce from it".to_string(),
        ),
    };
    let terms: [(String, f64, ScaledBy<'_>, &str); 3] = [
        (comm_term, p.step_ms.communication, &comm, &comm_settle),
        (
            "memory reads (weights, experts and KV)".into(),
            p.step_ms.weights + p.step_ms.kv,
            &mem,
            "profile one serving step with `servetune trace` and compare the GEMM and MoE kernels' time with the model's",
        ),
        (
            "the per-step overhead".into(),
            over_ms,
            &over,
            "profile one serving step with `servetune trace`: host gaps between kernels are the overhead",
        ),
    ];
    let mut out = Vec::new();
    for (term, predicted_ms, f, settle) in terms {
        if predicted_ms <= 0.0 {
            continue;
        }
        // Bisection on ln(x) in [1/20, 20]: the rate is monotone in each factor. 16 halvings leave
        // the factor within 1e-4 of its own size, below what the figure is printed to (0.4x).
        let (mut lo, mut hi) = ((1.0f64 / 20.0).ln(), 20.0f64.ln());
        let at = |lx: f64| rate(f, lx.exp());
        if !(at(lo) >= measured && at(hi) <= measured) {
            continue;
        }
        for _ in 0..16 {
            let mid = (lo + hi) / 2.0;
            if at(mid) > measured {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        out.push(TermChange { term, predicted_ms, factor: ((lo + hi) / 2.0).exp(), settle_with: settle.into() });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_experiments_kv_dtype_knob_prices_the_cache_it_set_and_auto_the_engines_default() {
        let mb = ModelBox {
            model: "glm-5".into(),
            // GLM-5's block-FP8 checkpoint declares no FP8 cache: sglang's `auto` keeps BF16.
            quant: "fp8".into(),
            gpu: "h200".into(),
            gpus: 8,
            link: "nvlink".into(),
            input_len: 4096,
            output_len: 1024,
            requests: Some(1024),
            objectives: Vec::new(),
            max_concurrency: 256,
            sweep: vec![256],
            serving: EngineName::Sglang,
            engine_version: None,
            calibration: None,
            allreduce: None,
        };
        let knobs = |kv: &str| {
            let k: std::collections::BTreeMap<String, String> = [("kv_dtype".to_string(), kv.to_string())].into();
            crate::planner::layout(&crate::knobs::KnobValues::parse(&k, "experiment 1").expect("valid"), 8)
        };
        let (auto, fp8, bf16) = (knobs("auto"), knobs("fp8_e4m3"), knobs("bf16"));
        assert_eq!(scenario(&mb, auto).expect("auto").quant.kv_cache, servetune_model::quant::KvDtype::Bf16);
        assert_eq!(scenario(&mb, fp8).expect("fp8").quant.kv_cache, servetune_model::quant::KvDtype::Fp8);
        let at = |l: Layout| predict_at(&mb, l, 256).expect("priced");
        assert_eq!(at(auto), at(bf16), "auto is the engine's BF16 here");
        assert!(at(fp8) > at(bf16), "half the cache bytes read per step: {} against {}", at(fp8), at(bf16));
        // A journal written before the field reads as the engine's default.
        let old: Layout = serde_json::from_str(r#"{"tp":8,"pp":1,"ep":1,"max_running":null}"#).expect("old layout");
        assert_eq!((old.kv_cache, old.mem_fraction), (None, None));
        assert!(!serde_json::to_string(&auto).expect("json").contains("kv_cache"), "an unset cache writes nothing");
        assert!(!serde_json::to_string(&auto).expect("json").contains("mem_fraction"), "an unset share writes nothing");
        // A set share round-trips and is priced. sglang's default for GLM-5 (MLA) on an H200 at
        // TP8 reserves 16,384 MiB of 143,771 (512 + 1.5 x 8192 + 2 x 512 + 1024 + 1536): 0.886.
        let roomier = Layout { mem_fraction: Some(0.92), ..auto };
        let back: Layout = serde_json::from_str(&serde_json::to_string(&roomier).expect("json")).expect("reads back");
        assert_eq!(back, roomier);
        assert_eq!(scenario(&mb, roomier).expect("priced").mem_fraction(), 0.92);
        assert_eq!(scenario(&mb, auto).expect("priced").mem_fraction(), 0.886);
        // An older journal's quant as the user typed it prices the same.
        let upper = ModelBox { quant: "FP8".into(), ..mb.clone() };
        assert_eq!(predict_at(&upper, auto, 256).expect("FP8 priced"), at(auto));
    }

    #[test]
    fn a_measured_all_reduce_prices_the_boxs_predictions_and_not_its_p2p_alternative() {
        let mb = ModelBox {
            model: "glm-5".into(),
            quant: "nvfp4".into(),
            // As a probe names it: an alias of the catalog's rtx-pro-6000-se.
            gpu: "NVIDIA RTX PRO 6000 Blackwell Server Edition".into(),
            gpus: 8,
            link: "pcie-host-staged".into(),
            input_len: 1024,
            output_len: 1024,
            requests: Some(128),
            objectives: Vec::new(),
            max_concurrency: 64,
            sweep: vec![64],
            serving: EngineName::Sglang,
            engine_version: None,
            calibration: None,
            allreduce: None,
        };
        let l = Layout { tp: 8, pp: 1, ep: 1, max_running: None, kv_cache: None, mem_fraction: None };
        let staged = servetune_model::hw::link("pcie-host-staged").expect("link");
        // A box whose NCCL all-reduce takes three times the model's.
        let pts = (10..=27).map(|p| 2f64.powi(p)).map(|b| (b, 3.0 * servetune_model::comm::nccl(&staged, 8, b).us + 6.0)).collect();
        let run = servetune_model::comm::MeasuredRun::new(8, pts).expect("run");
        let measured = mb.clone().with_allreduce(Some((
            1,
            servetune_model::comm::MeasuredAllReduce { source: "ar.json".into(), runs: vec![run], measured_on: None },
        )));
        let (model, slow) = (predict_at(&mb, l, 64).expect("model"), predict_at(&measured, l, 64).expect("measured"));
        assert!(slow < 0.9 * model, "{slow} against {model}");
        // The same box with P2P is another link: the measurement does not price it.
        let p2p = |m: &ModelBox| predict_at(&ModelBox { link: "pcie5-p2p".into(), ..m.clone() }, l, 64).expect("p2p");
        assert_eq!(p2p(&mb), p2p(&measured));
    }

    fn glm_box(link: &str, requests: u64) -> ModelBox {
        ModelBox {
            model: "glm-5".into(),
            quant: "nvfp4".into(),
            gpu: "rtx-pro-6000-se".into(),
            gpus: 8,
            link: link.into(),
            input_len: 64,
            output_len: 32,
            requests: Some(requests),
            objectives: Vec::new(),
            max_concurrency: 128,
            sweep: vec![32, 64, 128],
            serving: EngineName::Sglang,
            engine_version: None,
            calibration: None,
            allreduce: None,
        }
    }

    /// A point's prediction is the campaign's own sweep run in virtual time: its request count
    /// and lengths, the cap with the prompts queued behind it. Behind a 64-request cap the run
    /// plateaus, where the steady state (every request running, prefill amortized) is far below it.
    #[test]
    fn a_prediction_is_the_sweeps_own_run_in_virtual_time_and_plateaus_at_the_cap() {
        let mb = glm_box("pcie5-p2p", 128);
        let l = Layout { tp: 8, pp: 1, ep: 1, max_running: Some(64), kv_cache: None, mem_fraction: None };
        let s = scenario(&mb, l).expect("prices");
        let w = Workload { requests: Some(128), input: LengthDist::Fixed { len: 64 }, output: LengthDist::Fixed { len: 32 }, seed: 0 };
        for c in [32, 64, 128] {
            assert_eq!(predict_at(&mb, l, c), Some(PlanBench.run(&s, &w, c).output_tokens_per_s), "c={c}");
        }
        let (at64, at128) = (predict_at(&mb, l, 64).expect("64"), predict_at(&mb, l, 128).expect("128"));
        assert!((at128 / at64 - 1.0).abs() < 0.02, "plateau: {at64} then {at128}");
        assert!(s.point(128).output_tokens_per_s < 0.8 * at128, "the steady state at 128: {:?}", s.point(128).output_tokens_per_s);
        // Another request count is another run: 96 requests are one full wave behind the cap and
        // a half one, where 128 are two full waves (whole waves of equal requests give the same
        // rate to the last bit, whatever their number).
        let other = predict_at(&glm_box("pcie5-p2p", 96), l, 128).expect("96");
        assert!((other / at128 - 1.0).abs() > 0.01, "{other} against {at128}");
    }

    /// A latency objective is judged on the sweep run's figure at the objective's own percentile,
    /// as the bench judges a measured point: 128 prompts of 2,048 tokens sent at once are prefilled
    /// in chunks, so the last first token comes several chunks after the median one, and a TTFT
    /// bound between the run's median and its p99 keeps the point for a p50 objective and drops it
    /// for a p99 one.
    #[test]
    fn a_latency_objective_is_judged_at_its_own_percentile_of_the_sweeps_run() {
        let base = ModelBox { sweep: vec![128], input_len: 2048, ..glm_box("pcie5-p2p", 128) };
        let l = Layout { tp: 8, pp: 1, ep: 1, max_running: None, kv_cache: None, mem_fraction: None };
        let s = scenario(&base, l).expect("prices");
        let run = PlanBench.run(&s, &workload(&base, 128), 128);
        assert!(run.ttft_ms.p99 > 1.5 * run.ttft_ms.p50, "the queue spreads TTFT: {:?}", run.ttft_ms);
        let bound = (run.ttft_ms.p50 + run.ttft_ms.p99) / 2.0;
        let with = |percentile: f64| ModelBox {
            objectives: vec![Slo { metric: SloMetric::Ttft, percentile, threshold_ms: bound }],
            ..base.clone()
        };
        assert_eq!(predict(&with(50.0), l).map(|p| p.concurrency), Some(128));
        assert_eq!(predict(&with(99.0), l), None, "the p99 TTFT {} is over {bound}", run.ttft_ms.p99);
        assert_eq!(at_percentile(&run.ttft_ms, 95.0), run.ttft_ms.p99, "between kept percentiles, the higher one");
    }

    /// A sweep of a billion requests per point is priced as its first twenty waves (at least 10,000
    /// requests), not simulated request by request.
    #[test]
    fn a_huge_sweep_is_priced_on_a_capped_virtual_run() {
        let l = Layout { tp: 8, pp: 1, ep: 1, max_running: None, kv_cache: None, mem_fraction: None };
        let capped = predict_at(&glm_box("pcie5-p2p", virtual_requests_cap(64)), l, 64);
        assert!(capped.is_some_and(|r| r > 0.0), "{capped:?}");
        assert_eq!(predict_at(&glm_box("pcie5-p2p", 1_000_000_000), l, 64), capped);
        assert_eq!(virtual_requests_cap(64), 10_000);
        assert_eq!(virtual_requests_cap(4096), 81_920);
    }

    /// A sweep that plateaus at the running cap (measured on a box slower than the model) calibrates
    /// the step: the fit follows every point, so the calibration is used. One an older servetune
    /// stored (fitted against the steady state) is not.
    #[test]
    fn a_sweep_that_plateaus_at_the_cap_calibrates_within_the_models_held_out_error() {
        let mb = glm_box("pcie-host-staged", 128);
        let l = Layout { tp: 8, pp: 1, ep: 1, max_running: Some(64), kv_cache: None, mem_fraction: None };
        let own = scenario(&mb, l).expect("prices");
        let truth = Scenario { engine: Factors::StepScale { step_scale: 1.3 }.apply(&own.engine), ..own.clone() };
        let measured: Vec<(u32, f64)> = mb.sweep.iter().map(|&c| (c, client_rate(&truth, &mb, c))).collect();
        assert!((measured[2].1 / measured[1].1 - 1.0).abs() < 0.03, "the sweep plateaus: {measured:?}");
        let c = calibrate(&mb, l, &measured).expect("calibrates");
        assert!(matches!(c.factors, Factors::Terms { .. }), "{c:?}");
        assert_eq!(c.fitted_to, FittedTo::SweepRun);
        assert!(crate::verdict::usable(&c), "{c:?}");
        let cal = mb.calibrated(Some(c));
        for &(conc, m) in &measured {
            let p = predict_at(&cal, l, conc).expect("prices");
            assert!((p / m - 1.0).abs() < 0.05, "c={conc}: {p} against {m}");
        }
        // A calibration an older servetune stored (fitted against the steady state) is not used.
        assert!(!crate::verdict::usable(&Calibration { fitted_to: FittedTo::SteadyState, ..c }));
    }

    #[test]
    fn the_overhead_at_factor_one_prices_every_step_as_the_model_does() {
        let mut spec = ScenarioSpec::new(ModelSource::Catalog("glm-5".into()), "rtx-pro-6000-se");
        spec.tp = Some(8);
        let base = spec.build().expect("builds");
        // Today's release with CUDA graphs, an early release's scale, and an early release run
        // without CUDA graphs (whose launches the overhead adds on its own).
        let mut early = base.clone();
        early.engine.release_step_scale = 2.2;
        let mut eager = early.clone();
        eager.engine.cuda_graphs = false;
        for (name, s) in [("today", &base), ("early", &early), ("early, eager", &eager)] {
            let (want, got) = (s.point(64), overhead_times(s, 1.0).point(64));
            assert!(
                (want.step_ms.total - got.step_ms.total).abs() < 1e-9 * want.step_ms.total,
                "{name}: {:?} vs {:?}",
                want.step_ms,
                got.step_ms
            );
            // Twice the overhead adds the scaled overhead once more.
            let more = overhead_times(s, 2.0).point(64).step_ms.total - want.step_ms.total;
            let launches =
                if s.engine.cuda_graphs { 0.0 } else { s.engine.launch_us * s.kernels_per_step() / 1e3 * s.engine.release_step_scale };
            assert!((more - (s.scaled_overhead_ms() - launches)).abs() < 1e-6, "{name}: {more} ms more");
        }
    }
}
