//! The one place the campaign calls servetune-model: a scenario for the box and an experiment's
//! knobs, the best predicted throughput under the goal, and the what-ifs the planner prices (a P2P
//! link, tuned MoE kernels, another parallelism plan, a higher running-request cap).

use serde::{Deserialize, Serialize};
use servetune_model::hw;
use servetune_model::predict::{EngineName, Scenario};
use servetune_model::quant::Dtype;
use servetune_model::rank::{self, ConcurrencyRange};
use servetune_model::request::LinkSource;
use servetune_model::{ModelSource, ScenarioSpec};
use servetune_stats::{Slo, SloMetric};

/// What the model needs to know about the campaign.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelBox {
    /// Catalog model name.
    pub model: String,
    pub quant: String,
    pub gpu: String,
    pub gpus: u32,
    pub link: String,
    pub input_len: u32,
    pub output_len: u32,
    /// Goal latency bounds the model can judge (mean against the threshold).
    pub tpot_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    /// Highest concurrency the campaign benchmarks.
    pub max_concurrency: u32,
    /// The serving engine whose defaults the model takes (sglang's for an engine it does not
    /// know, such as llama.cpp or the simulator).
    #[serde(default)]
    pub serving: EngineName,
}

/// The parallelism and cap of one experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub tp: u32,
    pub pp: u32,
    pub ep: u32,
    pub max_running: Option<u32>,
}

/// A prediction: best output tok/s under the goal, at which concurrency.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Predicted {
    pub output_tok_s: f64,
    pub concurrency: u32,
}

/// Another plan the model ranks above the current one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alternative {
    pub layout: Layout,
    pub label: String,
    pub predicted: Predicted,
}

/// Checks that the model can price this campaign (catalog model, GPU, quant, link).
pub fn check(mb: &ModelBox) -> Result<(), String> {
    scenario(mb, Layout { tp: mb.gpus, pp: 1, ep: 1, max_running: None }).map(|_| ())
}

/// The scenario of `mb` under `l`, built and validated by the model's own `ScenarioSpec` (the
/// campaign holds no second copy of plan logic).
pub fn scenario(mb: &ModelBox, l: Layout) -> Result<Scenario, String> {
    let mut spec = ScenarioSpec::new(ModelSource::Catalog(mb.model.clone()), mb.gpu.clone());
    spec.quant.checkpoint = Some(Dtype::parse("--quant", &mb.quant).map_err(|e| e.to_string())?);
    spec.link = LinkSource::Catalog(mb.link.clone());
    spec.gpus = mb.gpus;
    spec.tp = Some(l.tp);
    spec.pp = l.pp;
    spec.ep = l.ep;
    spec.input_len = mb.input_len;
    spec.output_len = mb.output_len;
    spec.max_running = l.max_running;
    spec.engine = mb.serving;
    spec.build().map_err(|e| e.to_string())
}

/// The goal's latency bounds as objectives the model judges (its prediction is deterministic, so
/// the percentile does not matter to it), and the concurrency range the campaign benchmarks.
fn slo(mb: &ModelBox) -> (Vec<Slo>, ConcurrencyRange) {
    let bound = |metric, t: Option<f64>| t.map(|threshold_ms| Slo { metric, percentile: 50.0, threshold_ms });
    let slos = [bound(SloMetric::Tpot, mb.tpot_ms), bound(SloMetric::Ttft, mb.ttft_ms)].into_iter().flatten().collect();
    (slos, ConcurrencyRange { max: Some(mb.max_concurrency) })
}

fn best(s: &Scenario, mb: &ModelBox) -> Option<Predicted> {
    let (slos, range) = slo(mb);
    rank::best(s, &slos, range).map(|b| Predicted { output_tok_s: b.point.output_tokens_per_s, concurrency: b.concurrency })
}

/// The best prediction of `l` on `mb`.
pub fn predict(mb: &ModelBox, l: Layout) -> Option<Predicted> {
    best(&scenario(mb, l).ok()?, mb)
}

/// The predicted output tok/s of `l` at one concurrency.
pub fn predict_at(mb: &ModelBox, l: Layout, concurrency: u32) -> Option<f64> {
    let s = scenario(mb, l).ok()?;
    s.check_fit().ok()?;
    Some(s.point(concurrency).output_tokens_per_s)
}

/// The prediction with the GPUs on another link (e.g. `pcie5-p2p`).
pub fn with_link(mb: &ModelBox, l: Layout, link: &str) -> Option<Predicted> {
    let mut s = scenario(mb, l).ok()?;
    s.link = hw::link(link).ok()?;
    best(&s, mb)
}

/// The prediction with tuned fused-MoE kernels (expert reads at 80% of bandwidth, the model's
/// tuned-kernel assumption); `None` for dense models or when already tuned.
pub fn with_tuned_moe(mb: &ModelBox, l: Layout) -> Option<Predicted> {
    let mut s = scenario(mb, l).ok()?;
    s.model.moe?;
    if s.expert_stream_efficiency() >= 0.8 {
        return None;
    }
    s.engine.moe_efficiency = 0.8;
    s.engine.moe_table = false;
    best(&s, mb)
}

/// Single-replica plans (TP x PP = all GPUs) ranked above `l` by the model, best first. Replicas
/// need a data-parallel launch (a router or --dp) that the templates' knobs do not turn.
pub fn better_plans(mb: &ModelBox, l: Layout) -> Vec<Alternative> {
    let Ok(base) = scenario(mb, l) else { return Vec::new() };
    let (slos, range) = slo(mb);
    rank::rank(&base, &slos, range)
        .into_iter()
        .filter(|r| r.plan != base.plan && !r.plan.dp_attention && r.plan.dp() == 1 && r.gain.is_some_and(|g| g > 1.0))
        .map(|r| Alternative {
            layout: Layout { tp: r.plan.tp, pp: r.plan.pp, ep: r.plan.ep, max_running: l.max_running },
            label: r.label,
            predicted: Predicted { output_tok_s: r.output_tokens_per_s, concurrency: r.concurrency },
        })
        .collect()
}

/// The model's step at one concurrency, by term (ms), with the dominant term in words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepAt {
    pub concurrency: u32,
    /// Requests the model lets run at once (the cap and KV capacity applied).
    pub running: u32,
    pub weights_ms: f64,
    pub kv_ms: f64,
    pub compute_ms: f64,
    pub communication_ms: f64,
    pub overhead_ms: f64,
    pub prefill_ms: f64,
    /// The step by the model's overlap rule (not the sum of the terms).
    pub total_ms: f64,
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
        predicted_output_tok_s: p.output_tokens_per_s,
        bottleneck: servetune_model::report::bottleneck_words(&p.bottleneck),
        bottleneck_share: p.bottleneck.share(),
        tp: s.plan.tp,
        moe_efficiency: s.model.moe.map(|_| s.expert_stream_efficiency()),
    })
}
