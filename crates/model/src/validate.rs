//! Predictions against the public end-to-end measurements in `data/validation/e2e.toml`, scored
//! separately on its fit set and its test set (the split is by source and fixed in that file), the
//! test set's median being the headline. `servetune plan --validate` prints this; VALIDATION.md
//! holds a copy.
//!
//! Every case that is not excluded and that the model can express (a catalog model or a config
//! under `data/validation/configs/`, a catalog GPU, a stated tp, a known weight format, a modelled
//! interconnect, a client concurrency below the engine's stated running-request cap, and a measured
//! output rate or a measured TTFT and TPOT) is scored with `plan`'s defaults plus only what the case
//! states; every other case is counted with its reason.

use serde::{Deserialize, Serialize};

use crate::hw;
use crate::predict::{Engine, Scenario};
use crate::quant::Dtype;
use crate::request::{LinkSource, ModelSource, ScenarioSpec};
use crate::workload::{LengthDist, VirtualBench, Workload};
use crate::ModelError;

const E2E: &str = include_str!("../data/validation/e2e.toml");
const E2E_PATH: &str = "crates/model/data/validation/e2e.toml";

use crate::predict::VLLM_GPU_MEMORY_UTILIZATION;

/// The config.json files under `data/validation/configs/` (their origins: that folder's README.md).
const CONFIGS: [(&str, &str); 11] = [
    ("MiniMaxAI--MiniMax-M2.5.json", include_str!("../data/validation/configs/MiniMaxAI--MiniMax-M2.5.json")),
    ("MiniMaxAI--MiniMax-M2.7.json", include_str!("../data/validation/configs/MiniMaxAI--MiniMax-M2.7.json")),
    ("Qwen--Qwen3-14B.json", include_str!("../data/validation/configs/Qwen--Qwen3-14B.json")),
    ("Qwen--Qwen3-32B.json", include_str!("../data/validation/configs/Qwen--Qwen3-32B.json")),
    ("Qwen--Qwen3.5-397B-A17B.json", include_str!("../data/validation/configs/Qwen--Qwen3.5-397B-A17B.json")),
    ("moonshotai--Kimi-K2.5.json", include_str!("../data/validation/configs/moonshotai--Kimi-K2.5.json")),
    ("nvidia--DeepSeek-V3.1-NVFP4.json", include_str!("../data/validation/configs/nvidia--DeepSeek-V3.1-NVFP4.json")),
    ("nvidia--Kimi-K2.5-NVFP4.json", include_str!("../data/validation/configs/nvidia--Kimi-K2.5-NVFP4.json")),
    ("zai-org--GLM-5.1-FP8.json", include_str!("../data/validation/configs/zai-org--GLM-5.1-FP8.json")),
    ("zai-org--GLM-5.2-FP8.json", include_str!("../data/validation/configs/zai-org--GLM-5.2-FP8.json")),
    ("zai-org--GLM-5.json", include_str!("../data/validation/configs/zai-org--GLM-5.json")),
];

/// Where a case's model comes from.
#[derive(Debug, Clone, Copy)]
enum ModelRef {
    /// A catalog name.
    Catalog(&'static str),
    /// A file under `data/validation/configs/`.
    Config(&'static str),
}

/// Hugging Face id in e2e.toml -> the model `plan` runs, and why when it is a stand-in.
const MODELS: [(&str, ModelRef, &str); 30] = [
    ("deepseek-ai/DeepSeek-R1-0528", ModelRef::Catalog("deepseek-v3"), "DeepSeek-V3 architecture"),
    ("deepseek-ai/DeepSeek-R1", ModelRef::Catalog("deepseek-v3"), "DeepSeek-V3 architecture"),
    ("deepseek-ai/DeepSeek-V3", ModelRef::Catalog("deepseek-v3"), ""),
    ("nvidia/DeepSeek-R1-0528-NVFP4-v2", ModelRef::Catalog("deepseek-v3"), "DeepSeek-V3 architecture"),
    ("nvidia/DeepSeek-R1-NVFP4", ModelRef::Catalog("deepseek-v3"), "DeepSeek-V3 architecture"),
    ("nvidia/DeepSeek-V3.1-NVFP4", ModelRef::Config("nvidia--DeepSeek-V3.1-NVFP4.json"), ""),
    ("nvidia/Llama-3.3-70B-Instruct-FP8", ModelRef::Catalog("llama-3.1-70b"), "Llama-3.1-70B architecture"),
    ("nvidia/Llama-3.3-70B-Instruct-FP4", ModelRef::Catalog("llama-3.1-70b"), "Llama-3.1-70B architecture"),
    ("meta-llama/Llama-3.1-70B", ModelRef::Catalog("llama-3.1-70b"), ""),
    ("meta-llama/Llama-3.1-8B-Instruct", ModelRef::Catalog("llama-3.1-8b"), ""),
    ("nvidia/Llama-3.1-8B-Instruct-FP8", ModelRef::Catalog("llama-3.1-8b"), ""),
    ("nvidia/Qwen3-235B-A22B-FP4", ModelRef::Catalog("qwen3-235b-a22b"), ""),
    ("nvidia/Qwen3-235B-A22B-FP8", ModelRef::Catalog("qwen3-235b-a22b"), ""),
    ("Qwen/Qwen3-235B-A22B-FP8", ModelRef::Catalog("qwen3-235b-a22b"), ""),
    ("nvidia/Qwen3-30B-A3B-FP4", ModelRef::Catalog("qwen3-30b-a3b"), ""),
    ("openai/gpt-oss-120b", ModelRef::Catalog("gpt-oss-120b"), ""),
    ("nvidia/Kimi-K2.5-NVFP4", ModelRef::Config("nvidia--Kimi-K2.5-NVFP4.json"), ""),
    ("moonshotai/Kimi-K2.5", ModelRef::Config("moonshotai--Kimi-K2.5.json"), ""),
    ("moonshotai/Kimi-K2.6", ModelRef::Config("moonshotai--Kimi-K2.5.json"), "K2.5's config"),
    ("Qwen/Qwen3-14B-AWQ", ModelRef::Config("Qwen--Qwen3-14B.json"), "base Qwen3-14B config"),
    ("Qwen/Qwen3-32B", ModelRef::Config("Qwen--Qwen3-32B.json"), ""),
    ("nvidia/Qwen3-32B-NVFP4", ModelRef::Config("Qwen--Qwen3-32B.json"), "base Qwen3-32B config"),
    ("Qwen/Qwen3.5-397B-A17B", ModelRef::Config("Qwen--Qwen3.5-397B-A17B.json"), ""),
    ("MiniMaxAI/MiniMax-M2.5", ModelRef::Config("MiniMaxAI--MiniMax-M2.5.json"), ""),
    ("MiniMaxAI/MiniMax-M2.7", ModelRef::Config("MiniMaxAI--MiniMax-M2.7.json"), ""),
    ("MiniMaxAI/MiniMax-M2", ModelRef::Config("MiniMaxAI--MiniMax-M2.5.json"), "M2.5's config"),
    ("zai-org/GLM-4.6", ModelRef::Catalog("glm-4.6"), ""),
    ("zhipuai/GLM-5", ModelRef::Config("zai-org--GLM-5.json"), ""),
    ("zai-org/GLM-5.1-FP8", ModelRef::Config("zai-org--GLM-5.1-FP8.json"), ""),
    ("zai-org/GLM-5.2-FP8", ModelRef::Config("zai-org--GLM-5.2-FP8.json"), ""),
];

/// Which half of the data a case belongs to (e2e.toml's `set`, fixed by a hash of its source).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Set {
    /// Data constants may be chosen from.
    Fit,
    /// Held out: never used to choose a constant.
    Test,
}

/// The serving engine a case ran (e2e.toml's `engine`).
pub use crate::predict::EngineName;

/// One `[[case]]` of e2e.toml: the fields scoring reads (the file's schema is in its header).
#[derive(Debug, Clone, Deserialize)]
struct E2eCase {
    id: String,
    set: Set,
    source_key: String,
    engine: EngineName,
    gpu: String,
    gpu_count: Option<u32>,
    interconnect: String,
    model: String,
    quantization: String,
    tp: Option<u32>,
    pp: Option<u32>,
    ep: Option<u32>,
    dp: Option<u32>,
    dp_attention: Option<bool>,
    cuda_graphs: Option<bool>,
    max_concurrency: Option<u32>,
    benchmark_tool: Option<String>,
    num_prompts: Option<u64>,
    range_ratio: Option<f64>,
    input_len: Option<u32>,
    output_len: Option<u32>,
    max_running_requests: Option<u32>,
    output_tok_s: Option<f64>,
    ttft_ms: Option<f64>,
    ttft_ms_mean: Option<f64>,
    tpot_ms: Option<f64>,
    tpot_ms_mean: Option<f64>,
    exclude: Option<bool>,
    exclude_reason: Option<String>,
    engine_version: Option<String>,
    date: Option<String>,
    /// Read by the tests only (which cases the fit-set extension added).
    #[cfg_attr(not(test), allow(dead_code))]
    note: Option<String>,
}

/// What the note of each case that `scripts/silicon-cases` added to the fit set begins its
/// second sentence with (those cases were not run through AIConfigurator).
pub const FIT_EXTENSION_NOTE: &str = "Added by the fit-set extension of 2026-12-02";

impl E2eCase {
    /// The measured TTFT, ms: the source's figure, else its mean.
    fn ttft(&self) -> Option<f64> {
        self.ttft_ms.or(self.ttft_ms_mean)
    }

    /// The measured TPOT, ms: the source's figure, else its mean.
    fn tpot(&self) -> Option<f64> {
        self.tpot_ms.or(self.tpot_ms_mean)
    }
}

#[derive(Debug, Deserialize)]
struct E2eFile {
    case: Vec<E2eCase>,
}

/// What a row's measured output rate is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// The source's output tokens/s.
    OutputTokS,
    /// c x output_len / (TTFT + (output_len - 1) x TPOT) from the source's TTFT and TPOT
    /// (AIConfigurator's silicon rows publish no rate): a derivation, not a measurement.
    DerivedFromTtftTpot,
}

/// One scored case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// e2e.toml's id.
    pub id: String,
    /// Fit or test.
    pub set: Set,
    /// The publication it came from.
    pub source_key: String,
    /// GPU as e2e.toml names it.
    pub gpu: String,
    /// Engine.
    pub engine: EngineName,
    /// Client concurrency.
    pub concurrency: u32,
    /// Requests the model runs at once (concurrency capped by its KV capacity).
    pub running: u32,
    /// What `measured` is.
    pub measure: Measure,
    /// Output tokens/s of the deployment, measured (or derived, see `measure`).
    pub measured: f64,
    /// Output tokens/s predicted: what the case's benchmark would measure (the workload run in
    /// virtual time, derived from TTFT and TPOT as the measurement was when it was), else the
    /// steady state.
    pub predicted: f64,
    /// The steady-state prediction (every request running, prefill amortized).
    pub predicted_steady: f64,
    /// Whether `predicted` comes from a virtual run of the case's workload.
    pub virtual_run: bool,
    /// The workload the virtual run used, in words (requests and lengths), empty without one.
    pub workload: String,
    /// (predicted - measured) / measured.
    pub error: f64,
    /// Measured TPOT, ms, when the source gives it.
    pub tpot_measured_ms: Option<f64>,
    /// Predicted TPOT, ms.
    pub tpot_predicted_ms: f64,
    /// Measured TTFT, ms, when the source gives it.
    pub ttft_measured_ms: Option<f64>,
    /// Predicted TTFT, ms: the virtual run's mean, else the steady state's.
    pub ttft_predicted_ms: f64,
    /// Stand-ins the scoring used (a sibling model's config), empty when none.
    pub note: String,
    /// AIConfigurator 0.12.0's estimate of the same output tokens/s ([`crate::aic`]), when it
    /// gave one.
    pub aic_predicted: Option<f64>,
    /// Its (estimate - measured) / measured.
    pub aic_error: Option<f64>,
    /// Dense or MoE: with the GPU's architecture and the engine, the family whose residuals give
    /// a prediction's interval ([`crate::interval`]).
    pub model_kind: crate::interval::ModelKind,
}

/// Why a case was not scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// e2e.toml excludes it: speculative decoding.
    ExcludedSpeculative,
    /// e2e.toml excludes it: a decode-only benchmark at a fixed context.
    ExcludedDecodeOnly,
    /// e2e.toml excludes it: client concurrency at or above the server's running cap.
    ExcludedAtRunningCap,
    /// e2e.toml excludes it: the deployment (parallelism, workers) is unresolved in the source.
    ExcludedUnresolved,
    /// e2e.toml excludes it for another reason.
    ExcludedOther,
    /// An offline run (all requests queued at once): no client concurrency below the engine's cap.
    Offline,
    /// Concurrency at or above the stated running-request cap.
    AtRunningCap,
    /// The source states no tp.
    NoTp,
    /// The model has no catalog entry or config here.
    UnknownModel,
    /// The GPU is not in the catalog.
    UnknownGpu,
    /// The weight format is not stated.
    UnknownQuant,
    /// The interconnect (xGMI) has no link in the catalog.
    UnmodelledInterconnect,
    /// Neither an output rate nor TTFT and TPOT were measured.
    NoMeasure,
    /// The model refused the deployment (an architecture it cannot parse, or it does not fit).
    Refused,
    /// The measured rate needs more prefill compute than the GPUs' dense peak: the prompts
    /// cannot all have been computed (a prefix-cache hit or a misreported length), so the case
    /// does not measure what its lengths say.
    Implausible,
}

impl SkipReason {
    /// Words for a reader.
    pub fn words(self) -> &'static str {
        match self {
            SkipReason::ExcludedSpeculative => "excluded in e2e.toml: speculative decoding",
            SkipReason::ExcludedDecodeOnly => "excluded in e2e.toml: decode-only benchmark at a fixed context",
            SkipReason::ExcludedAtRunningCap => "excluded in e2e.toml: client concurrency at or above the running cap",
            SkipReason::ExcludedUnresolved => "excluded in e2e.toml: deployment unresolved in the source",
            SkipReason::ExcludedOther => "excluded in e2e.toml: other",
            SkipReason::Offline => "offline run (all requests queued at once, above any engine's running cap)",
            SkipReason::AtRunningCap => "concurrency at or above the stated running-request cap",
            SkipReason::NoTp => "tp not stated",
            SkipReason::UnknownModel => "model not in the catalog nor under data/validation/configs",
            SkipReason::UnknownGpu => "GPU not in the catalog",
            SkipReason::UnknownQuant => "weight format not stated",
            SkipReason::UnmodelledInterconnect => "interconnect without a catalog link for this GPU",
            SkipReason::NoMeasure => "no output rate, nor TTFT and TPOT, measured",
            SkipReason::Refused => "plan refused the deployment",
            SkipReason::Implausible => "measured rate needs more prefill compute than the GPUs' dense peak",
        }
    }

    fn of_exclusion(reason: &str) -> SkipReason {
        if reason.starts_with("speculative") {
            SkipReason::ExcludedSpeculative
        } else if reason.starts_with("decode-only") {
            SkipReason::ExcludedDecodeOnly
        } else if reason.contains("running") || reason.starts_with("client concurrency") {
            SkipReason::ExcludedAtRunningCap
        } else if reason.contains("unresolved") {
            SkipReason::ExcludedUnresolved
        } else {
            SkipReason::ExcludedOther
        }
    }
}

/// Skipped cases with one reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skipped {
    /// The reason.
    pub reason: SkipReason,
    /// The reason in words.
    pub words: &'static str,
    /// How many cases.
    pub count: usize,
    /// The first such case's id.
    pub first_id: String,
    /// The first such case's detail (its GPU, model, or plan's error).
    pub first_detail: String,
}

/// Medians of one set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SetSummary {
    /// Scored cases.
    pub cases: usize,
    /// Median |error| over the set's rows (0 when none).
    pub median_abs_error: f64,
    /// Median signed error.
    pub median_error: f64,
    /// Rows predicted above the measurement.
    pub over_predicted: usize,
    /// Rows whose rate was measured (not derived).
    pub measured_cases: usize,
    /// Median |error| over those rows.
    pub measured_median_abs_error: f64,
    /// Rows with a measured TPOT.
    pub tpot_cases: usize,
    /// Median |TPOT error| over those rows.
    pub tpot_median_abs_error: f64,
    /// Rows with a measured TTFT.
    pub ttft_cases: usize,
    /// Median |TTFT error| over those rows.
    pub ttft_median_abs_error: f64,
    /// Median |error| of the steady-state prediction over the same rows (equal to
    /// `median_abs_error` when no virtual run was made).
    pub steady_median_abs_error: f64,
}

/// A constant of the model and the data it was chosen from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConstantOrigin {
    /// The engine field or data entry.
    pub name: &'static str,
    /// Its value.
    pub value: f64,
    /// The fit cases or the kernel/comm data it was set from, or "assumption".
    pub set_from: &'static str,
}

/// The validation report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Validation {
    /// Always "servetune.validation/2".
    pub schema: &'static str,
    /// The file scored.
    pub data: &'static str,
    /// Cases in it.
    pub total_cases: usize,
    /// The headline: median |error| of output tokens/s on the test set.
    pub headline_test_median_abs_error: f64,
    /// The fit set's medians.
    pub fit: SetSummary,
    /// The test set's medians.
    pub test: SetSummary,
    /// One row per scored case, test set first.
    pub rows: Vec<Row>,
    /// Cases not scored, by reason.
    pub skipped: Vec<Skipped>,
    /// Where each fitted constant came from.
    pub constants: Vec<ConstantOrigin>,
    /// The engine defaults every case started from.
    pub engine: Engine,
    /// What the predictions are.
    pub predicted_by: PredictedBy,
    /// AIConfigurator beside `plan` on the cases it estimated.
    pub aiconfigurator: AicComparison,
}

/// AIConfigurator's estimates scored like `plan`'s, set by set, on the cases it gave one for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AicComparison {
    /// The tool and version.
    pub tool: &'static str,
    /// The file its estimates come from.
    pub data: &'static str,
    /// Test set.
    pub test: crate::aic::SideBySide,
    /// Fit set.
    pub fit: crate::aic::SideBySide,
}

/// What a validation's predictions are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PredictedBy {
    /// The steady state: every request running, prefill amortized.
    SteadyState,
    /// Each case's benchmark workload run through the engine in virtual time.
    VirtualRun,
}

fn model_of(c: &E2eCase) -> Result<(ModelSource, &'static str), (SkipReason, String)> {
    let (_, r, note) = MODELS.iter().find(|(hf, _, _)| *hf == c.model).ok_or((SkipReason::UnknownModel, c.model.clone()))?;
    match r {
        ModelRef::Catalog(name) => Ok((ModelSource::Catalog((*name).to_string()), note)),
        ModelRef::Config(file) => {
            let (_, text) = CONFIGS.iter().find(|(f, _)| f == file).ok_or((SkipReason::UnknownModel, (*file).to_string()))?;
            Ok((ModelSource::Config { text: (*text).to_string(), path: format!("crates/model/data/validation/configs/{file}") }, note))
        }
    }
}

/// Whether an sglang case's steps that carry prompt tokens ran as piecewise CUDA graphs: its
/// release at or after the first with them on by default ([`crate::predict::SGLANG_PIECEWISE_DEFAULT`]),
/// a nightly built on or after that date, or, when the version names neither (blank, an image
/// tag), a measurement on or after it. Neither known: the current default.
fn sglang_prefill_graphs(version: &str, date: Option<&str>) -> bool {
    let ((major, minor, patch), since) = crate::predict::SGLANG_PIECEWISE_DEFAULT;
    let since_digits: String = since.chars().filter(char::is_ascii_digit).collect();
    // A nightly's build date (yyyymmdd) in its tag.
    if version.contains("nightly") {
        let dates: Vec<&str> = version.split(|ch: char| !ch.is_ascii_digit()).filter(|d| d.len() == 8 && d.starts_with("20")).collect();
        if let Some(d) = dates.first() {
            return *d >= since_digits.as_str();
        }
    }
    // A release: its leading x.y.z.
    let head = version.split(|ch: char| !ch.is_ascii_digit() && ch != '.').next().unwrap_or("");
    let nums: Vec<u32> = head.split('.').filter_map(|p| p.parse().ok()).collect();
    if nums.len() >= 3 {
        return (nums[0], nums[1], nums[2]) >= (major, minor, patch);
    }
    match date {
        Some(d) if d.len() >= 10 && d.is_char_boundary(10) => &d[..10] >= since,
        _ => EngineName::Sglang.graphs_prefill(),
    }
}

/// e2e.toml's free-text format -> a checkpoint format (first named wins, NVFP4 before FP8).
fn quant_of(q: &str) -> Option<Dtype> {
    let q = q.to_lowercase();
    if q.starts_with("unstated") {
        return None;
    }
    let keys = [
        ("nvfp4", Dtype::Nvfp4),
        ("mxfp4", Dtype::Mxfp4),
        ("awq", Dtype::Int4),
        ("int4", Dtype::Int4),
        ("fp8", Dtype::Fp8),
        ("bf16", Dtype::Bf16),
        ("fp4", Dtype::Nvfp4),
    ];
    keys.iter().find(|(k, _)| q.contains(k)).map(|(_, d)| *d)
}

/// e2e.toml's interconnect -> a catalog link, None when the catalog has none for it. "nvlink"
/// and "xgmi" are the GPU's own link of that kind (its catalog default: NVLink3 on an A100,
/// NVLink4 on Hopper, NVLink5 on Blackwell, xGMI on CDNA3, xGMI4 on CDNA4), never another
/// generation's.
fn link_of(interconnect: &str, gpu: &hw::GpuSpec) -> Option<String> {
    let pcie = hw::pcie_p2p_link(gpu.pcie_gen);
    let own = |kind: hw::LinkKind| -> Option<String> {
        let name = hw::default_link(gpu);
        hw::link(name).ok().filter(|l| l.kind == kind).map(|_| name.to_string())
    };
    match interconnect {
        "nvlink" => own(hw::LinkKind::Nvlink),
        "xgmi" => own(hw::LinkKind::Xgmi),
        "pcie-no-p2p" => Some("pcie-host-staged".into()),
        "none" | "pcie-p2p" => Some(pcie.into()),
        s if s.starts_with("pcie (") => Some(pcie.into()),
        _ => None,
    }
}

/// The scenario and concurrency a case runs at, or why it cannot be scored.
fn spec_of(c: &E2eCase) -> Result<(ScenarioSpec, u32, &'static str), (SkipReason, String)> {
    if c.exclude == Some(true) {
        let why = c.exclude_reason.clone().unwrap_or_default();
        return Err((SkipReason::of_exclusion(&why), why));
    }
    let (model, note) = model_of(c)?;
    let gpu_name = if c.gpu == "a100-80gb" { "a100" } else { c.gpu.as_str() };
    let gpu = hw::gpu(gpu_name).map_err(|_| (SkipReason::UnknownGpu, c.gpu.clone()))?;
    let tp = c.tp.filter(|t| *t > 0).ok_or((SkipReason::NoTp, String::new()))?;
    let quant = quant_of(&c.quantization).ok_or((SkipReason::UnknownQuant, c.quantization.clone()))?;
    let link = link_of(&c.interconnect, &gpu).ok_or((SkipReason::UnmodelledInterconnect, c.interconnect.clone()))?;
    let conc = c.max_concurrency.ok_or((SkipReason::Offline, String::new()))?;
    if let Some(cap) = c.max_running_requests.filter(|cap| conc >= *cap) {
        return Err((SkipReason::AtRunningCap, format!("c={conc}, cap {cap}")));
    }
    let pp = c.pp.unwrap_or(1).max(1);
    let mut s = ScenarioSpec::new(model, gpu_name);
    s.quant.checkpoint = Some(quant);
    s.gpus = c.gpu_count.filter(|g| *g > 0).unwrap_or(tp * pp);
    s.link = LinkSource::Catalog(link);
    s.tp = Some(tp);
    s.pp = pp;
    s.ep = c.ep.unwrap_or(1).max(1);
    s.dp_attention = c.dp_attention == Some(true) || c.dp.unwrap_or(1) > 1;
    (s.input_len, s.output_len) = match (c.input_len, c.output_len) {
        (Some(i), Some(o)) if i > 0 && o > 0 => (i, o),
        _ => return Err((SkipReason::NoMeasure, "no input/output length".into())),
    };
    s.max_running = c.max_running_requests;
    s.cuda_graphs = c.cuda_graphs != Some(false);
    // The engine's defaults: vLLM V1 and TRT-LLM put new prompts' tokens into the running decode
    // steps; vLLM takes 0.9 of GPU memory (EngineName::defaults).
    s.engine = c.engine;
    Ok((s, conc, note))
}

fn measured_of(c: &E2eCase, conc: u32, osl: u32) -> Option<(Measure, f64)> {
    if let Some(r) = c.output_tok_s.filter(|r| r.is_finite() && *r > 0.0) {
        return Some((Measure::OutputTokS, r));
    }
    let ttft = c.ttft()?;
    let tpot = c.tpot()?;
    let e2e_s = (ttft + (osl as f64 - 1.0) * tpot) / 1e3;
    (e2e_s > 0.0).then(|| (Measure::DerivedFromTtftTpot, conc as f64 * osl as f64 / e2e_s))
}

/// Scores one case with `engine`'s fitted constants (the case keeps its own CUDA graphs and
/// prefill mixing): its row, or why it was skipped. With `bench`, the prediction is what the
/// case's benchmark would measure (its workload run in virtual time).
fn score(c: &E2eCase, engine: &Engine, bench: Option<&dyn VirtualBench>, latency: Latency) -> Result<Row, (SkipReason, String)> {
    let (spec, conc, note) = spec_of(c)?;
    let (measure, measured) = measured_of(c, conc, spec.output_len).ok_or((SkipReason::NoMeasure, String::new()))?;
    let mut s: Scenario = spec.build().map_err(|e| (SkipReason::Refused, e.to_string()))?;
    // The fitted constants under scoring, with what the case and its engine set.
    let e = s.engine;
    let request_latency_ms = match latency {
        Latency::PerEngine => e.request_latency_ms,
        Latency::Zero => 0.0,
    };
    // sglang's prefill ran eagerly before its piecewise CUDA graphs became the default.
    let prefill_graphs = if c.engine == EngineName::Sglang {
        sglang_prefill_graphs(c.engine_version.as_deref().unwrap_or(""), c.date.as_deref())
    } else {
        e.prefill_graphs
    };
    s.engine = Engine {
        cuda_graphs: e.cuda_graphs,
        prefill_graphs,
        mixed_prefill: e.mixed_prefill,
        mem_fraction: e.mem_fraction,
        serving: e.serving,
        request_latency_ms,
        ..*engine
    };
    s.check_fit().map_err(|e| (SkipReason::Refused, e.to_string()))?;
    check_plausible(&s, measured)?;
    let p = s.point(conc);
    let w = workload_of(c, spec.input_len, spec.output_len);
    let client = bench.map(|b| b.run(&s, &w, conc));
    let ttft = client.map_or(p.ttft_ms, |r| r.ttft_ms.mean);
    let (predicted, tpot) = match (client, measure) {
        (None, _) => (p.output_tokens_per_s, p.tpot_ms),
        (Some(r), Measure::OutputTokS) => (r.output_tokens_per_s, r.tpot_ms.mean),
        (Some(r), Measure::DerivedFromTtftTpot) => {
            // The same derivation as the measurement's, from the predicted mean TTFT and TPOT.
            let e2e_s = (r.ttft_ms.mean + (spec.output_len as f64 - 1.0) * r.tpot_ms.mean) / 1e3;
            (conc as f64 * spec.output_len as f64 / e2e_s.max(1e-12), r.tpot_ms.mean)
        }
    };
    Ok(Row {
        id: c.id.clone(),
        set: c.set,
        source_key: c.source_key.clone(),
        gpu: c.gpu.clone(),
        engine: c.engine,
        concurrency: conc,
        running: p.running,
        measure,
        measured,
        predicted,
        predicted_steady: p.output_tokens_per_s,
        virtual_run: client.is_some(),
        workload: client.map_or(String::new(), |r| format!("{} req, in {}, out {}", r.requests, w.input.label(), w.output.label())),
        error: (predicted - measured) / measured,
        tpot_measured_ms: c.tpot(),
        tpot_predicted_ms: tpot,
        ttft_measured_ms: c.ttft(),
        ttft_predicted_ms: ttft,
        note: note.to_string(),
        aic_predicted: None,
        aic_error: None,
        model_kind: crate::interval::ModelKind::of(&s.model),
    })
}

/// Refuses a measured output rate whose prompts could not have been computed: `rate` output
/// tokens/s carry `rate x input / output` prompt tokens/s, each costing 2 FLOPs per active
/// parameter, and that must stay under the GPUs' dense peak in the checkpoint's compute format.
/// A rule on the data alone, the same for both sets; no prediction is looked at.
fn check_plausible(s: &Scenario, rate: f64) -> Result<(), (SkipReason, String)> {
    let prompt_tok_s = rate * s.input_len as f64 / s.output_len.max(1) as f64;
    let need = prompt_tok_s * 2.0 * s.model.params().active_non_embedding;
    let peak = s.plan.gpus as f64 * s.gpu.tflops(s.quant.experts.compute()) * 1e12;
    if need > peak {
        return Err((
            SkipReason::Implausible,
            format!(
                "{rate:.0} tok/s at {}/{} tokens needs {:.2} PFLOP/s of prefill; {} GPUs peak at {:.2}",
                s.input_len,
                s.output_len,
                need / 1e15,
                s.plan.gpus,
                peak / 1e15
            ),
        ));
    }
    Ok(())
}

/// The benchmark workload a case ran: its prompt count (else 10 x concurrency, InferenceX's
/// convention) and its length distributions. InferenceX's client (kedarpotdar-nv/bench_serving
/// `sample_random_requests`, run with `--random-range-ratio 0.8` per the InferenceMAX README)
/// draws each length uniformly from [floor(0.8 L), L]; `vllm bench serve` with a stated range
/// ratio r draws from [L (1 - r), L (1 + r)]; every other case runs its stated lengths.
fn workload_of(c: &E2eCase, input: u32, output: u32) -> Workload {
    let tool = c.benchmark_tool.as_deref().unwrap_or("");
    let dist = |len: u32| -> LengthDist {
        if tool.starts_with("InferenceX") {
            return LengthDist::Uniform { lo: ((len as f64 * 0.8).floor() as u32).max(1), hi: len };
        }
        match c.range_ratio.filter(|r| *r > 0.0 && *r < 1.0 && tool.starts_with("vllm bench serve")) {
            Some(r) => {
                LengthDist::Uniform { lo: ((len as f64 * (1.0 - r)).floor() as u32).max(1), hi: (len as f64 * (1.0 + r)).floor() as u32 }
            }
            None => LengthDist::Fixed { len },
        }
    };
    Workload { requests: c.num_prompts.filter(|n| *n > 0), input: dist(input), output: dist(output), seed: 0 }
}

fn median(xs: &[f64]) -> f64 {
    servetune_stats::median(xs).unwrap_or(0.0)
}

/// The medians of the rows of `set`.
pub fn summary(rows: &[Row], set: Set) -> SetSummary {
    let rs: Vec<&Row> = rows.iter().filter(|r| r.set == set).collect();
    let abs: Vec<f64> = rs.iter().map(|r| r.error.abs()).collect();
    let signed: Vec<f64> = rs.iter().map(|r| r.error).collect();
    let meas: Vec<f64> = rs.iter().filter(|r| r.measure == Measure::OutputTokS).map(|r| r.error.abs()).collect();
    let tpot: Vec<f64> = rs.iter().filter_map(|r| r.tpot_measured_ms.map(|m| ((r.tpot_predicted_ms - m) / m).abs())).collect();
    let ttft: Vec<f64> =
        rs.iter().filter_map(|r| r.ttft_measured_ms.filter(|m| *m > 0.0).map(|m| ((r.ttft_predicted_ms - m) / m).abs())).collect();
    let steady: Vec<f64> = rs.iter().map(|r| ((r.predicted_steady - r.measured) / r.measured).abs()).collect();
    SetSummary {
        cases: rs.len(),
        median_abs_error: median(&abs),
        median_error: median(&signed),
        over_predicted: signed.iter().filter(|e| **e > 0.0).count(),
        measured_cases: meas.len(),
        measured_median_abs_error: median(&meas),
        tpot_cases: tpot.len(),
        tpot_median_abs_error: median(&tpot),
        ttft_cases: ttft.len(),
        ttft_median_abs_error: median(&ttft),
        steady_median_abs_error: median(&steady),
    }
}

/// The objective the fitted constants minimize: the median |error| over the FIT set's rows with
/// each source weighing the same (a row weighs 1 / its source's scored fit rows). The split assigns
/// whole sources to a set, so the test set asks how the model does on sources it has not seen;
/// a plain median would let the three AIConfigurator sources that hold most of the fit rows set
/// the constants alone. The weighted median is the lower one ([`servetune_stats::weighted_median`]).
/// None without fit rows.
pub fn fit_objective(v: &Validation) -> Option<f64> {
    let rows: Vec<&Row> = v.rows.iter().filter(|r| r.set == Set::Fit).collect();
    let mut per_source = std::collections::HashMap::new();
    for r in &rows {
        *per_source.entry(r.source_key.as_str()).or_insert(0usize) += 1;
    }
    let weighted: Vec<(f64, f64)> = rows.iter().map(|r| (r.error.abs(), 1.0 / per_source[r.source_key.as_str()] as f64)).collect();
    servetune_stats::weighted_median(&weighted)
}

/// Where the fitted constants came from (the engine defaults in `predict::Engine`).
pub fn constants() -> Vec<ConstantOrigin> {
    let e = Engine::default();
    let fit = "fit: every scored fit case (argmin of the steady-state fit median absolute error, each source weighing the same, on a 0.1 us x 0.05 grid)";
    vec![
        ConstantOrigin { name: "kernel_overhead_us (per kernel per step)", value: e.kernel_overhead_us, set_from: fit },
        ConstantOrigin {
            name: "moe_efficiency (GPUs and formats without a kernels.toml MoE rate)",
            value: e.moe_efficiency,
            set_from: fit,
        },
        ConstantOrigin {
            name: "request_step_us (per request running in a decode step)",
            value: e.request_step_us,
            set_from: "fit: every scored fit case, with kernel_overhead_us and moe_efficiency (argmin of the same objective, on a 2.5 us grid)",
        },
        ConstantOrigin {
            name: "cdna3_floor_scale (the per-kernel floor on MI300X / MI325X over kernel_overhead_us)",
            value: e.cdna3_floor_scale,
            set_from: "fit: the fit set's CDNA 3 rows (InferenceX issue 890 and PR 3318, MI325X; argmin of their median absolute error on a 0.1 grid at the fitted floor)",
        },
        ConstantOrigin {
            name: "hbm_efficiency (KV and weight reads without a kernels.toml rate)",
            value: e.hbm_efficiency,
            set_from: "assumption (typical decode GEMV); no e2e case",
        },
        ConstantOrigin {
            name: "kernels::DENSE_DECODE (per GPU and format, before netting the kernel floor)",
            value: crate::kernels::dense_decode_table("h200", crate::quant::Dtype::Fp8).unwrap_or(0.0),
            set_from: "kernels.toml [[gemm]] N=K=8192, M <= 64, median achieved bandwidth (19 entries; h200 fp8 shown); no e2e case",
        },
        ConstantOrigin {
            name: "kernels::MOE_DECODE (per GPU, expert format and split)",
            value: crate::kernels::moe_decode_efficiency("h200", crate::quant::Dtype::Fp8, crate::kernels::MoeSplit::Ep).unwrap_or(0.0),
            set_from:
                "kernels.toml [[moe]] balanced, 1-8 tokens per expert, median achieved bandwidth (52 entries; h200 fp8 EP shown); no e2e case",
        },
        ConstantOrigin {
            name: "gemm_efficiency (decode steps only)",
            value: e.gemm_efficiency,
            set_from: "a torch BF16 GEMM on the reference RTX PRO 6000 (team measurement); no e2e case",
        },
        ConstantOrigin {
            name: "comm::SHM_HOP_SHARE",
            value: crate::comm::SHM_HOP_SHARE,
            set_from: "fit: rtx6kpro-kimik25-ctx0k P2P/no-P2P pair (decode-only, so not scored here)",
        },
        ConstantOrigin {
            name: "comm::RING_SIMPLE_EFFICIENCY",
            value: crate::comm::RING_SIMPLE_EFFICIENCY,
            set_from: "comm.toml [[nccl_tests]] h100-sxm (nccl-tests issue 212: ring 370 of 450 GB/s)",
        },
        ConstantOrigin {
            name: "comm::NVLS_LATENCY_US",
            value: crate::comm::NVLS_LATENCY_US,
            set_from: "comm.toml [nccl_tuning] hw_latency_us_nvlink_nvls_simple (NCCL 2.30.7 tuning.cc); no e2e case",
        },
        ConstantOrigin {
            name: "predict::prefill_gemm_efficiency (bf16 / fp8 / fp4)",
            value: crate::predict::prefill_gemm_efficiency(crate::quant::ComputeFormat::Fp8),
            set_from: "kernels.toml [[gemm]] medians at M >= 2048 (0.728 / 0.523 / 0.434; fp8 shown); no e2e case",
        },
        ConstantOrigin {
            name: "kernels::PREFILL_ATTENTION (per GPU, MHA/GQA or MLA, over prompt length)",
            value: crate::kernels::prefill_attention_efficiency("h200", crate::kernels::PrefillAttention::Gqa, 4096.0),
            set_from: "AIConfigurator sglang 0.5.14 context-attention tables, median achieved share of BF16 peak per length (scripts/context-attention-rates; h200 GQA at 4096 shown); no e2e case",
        },
        ConstantOrigin {
            name: "predict::PREFILL_MOE_EFFICIENCY",
            value: crate::predict::PREFILL_MOE_EFFICIENCY,
            set_from: "kernels.toml [[moe]] median, balanced routing, >= 4096 tokens; no e2e case",
        },
        ConstantOrigin {
            name: "predict::hopper_fp8_kv_efficiency (h100-sxm / h200)",
            value: crate::predict::hopper_fp8_kv_efficiency("h200").unwrap_or(0.0),
            set_from: "kernels.toml [[decode_attention]] FA3 fp8 slopes at batch 32 and 256 (0.665 / 0.535; h200 shown); no e2e case",
        },
        ConstantOrigin {
            name: "kernels::MLA_DECODE (per GPU, cache format, 8 or 128 heads per rank)",
            value: crate::kernels::mla_decode_efficiency("b200", false, 16.0).unwrap_or(0.0),
            set_from: "kernels.toml [[decode_attention]] MLA marginal latent-read rates at batch 32 and 128, log-interpolated in heads (b200 BF16 at 16 heads shown); no e2e case",
        },
        ConstantOrigin {
            name: "request_latency_ms (sglang / vLLM / TensorRT-LLM)",
            value: crate::predict::SGLANG_REQUEST_LATENCY_MS,
            set_from: "fit: median TTFT gap of each engine's fit cases at c <= 8, virtual run (230.2 / 19.4 / 77.5 ms; sglang shown)",
        },
        ConstantOrigin {
            name: "launch_us (each kernel's launch in a step run without CUDA graphs)",
            value: e.launch_us,
            set_from: "assumption (CUDA launch ~4 us; the fit set cannot tell 1 from 12 us); TensorRT-LLM context/mixed steps and sglang < 0.5.10 prefill passes pay it (engine docs); no e2e case",
        },
        ConstantOrigin {
            name: "ep_imbalance (busiest EP rank's distinct experts over the mean)",
            value: e.ep_imbalance,
            set_from: "fit: every scored fit case, argmin of the same objective over 1.0..1.3 by 0.05 with the floor, MoE efficiency and per-request cost re-chosen at each",
        },
        ConstantOrigin { name: "mem_fraction", value: e.mem_fraction, set_from: "sglang's --mem-fraction-static default; no e2e case" },
        ConstantOrigin {
            name: "mem_fraction (vLLM cases)",
            value: VLLM_GPU_MEMORY_UTILIZATION,
            set_from: "vLLM's --gpu-memory-utilization default; no e2e case",
        },
    ]
}

fn group_skips(skips: Vec<(SkipReason, String, String)>) -> Vec<Skipped> {
    let mut out: Vec<Skipped> = Vec::new();
    for (reason, id, detail) in skips {
        match out.iter_mut().find(|s| s.reason == reason) {
            Some(s) => s.count += 1,
            None => out.push(Skipped { reason, words: reason.words(), count: 1, first_id: id, first_detail: detail }),
        }
    }
    out.sort_by(|a, b| b.count.cmp(&a.count).then(a.reason.cmp(&b.reason)));
    out
}

/// Scores every case of e2e.toml with the engine defaults, steady state only.
pub fn run() -> Result<Validation, ModelError> {
    run_with(&Engine::default())
}

/// Scores every case of e2e.toml with `engine`'s constants, steady state only (to refit them on
/// the fit set).
pub fn run_with(engine: &Engine) -> Result<Validation, ModelError> {
    run_with_bench(engine, None)
}

/// Scores every case of e2e.toml with `engine`'s constants; with `bench`, each prediction is what
/// the case's benchmark would measure (`servetune plan --validate` passes the simulator's
/// virtual-time engine).
pub fn run_with_bench(engine: &Engine, bench: Option<&dyn VirtualBench>) -> Result<Validation, ModelError> {
    run_cases(engine, bench, Latency::PerEngine)
}

/// Which serving-path latency the cases run with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Latency {
    /// Each case its engine's ([`EngineName::request_latency_ms`]).
    PerEngine,
    /// None (to measure the TTFT gap the latencies are fitted to).
    Zero,
}

/// As [`run_with_bench`] with no serving-path latency in any case: the TTFT gaps
/// (measured - predicted) of its fit rows are what [`EngineName::request_latency_ms`] is the
/// median of.
pub fn run_without_request_latency(engine: &Engine, bench: Option<&dyn VirtualBench>) -> Result<Validation, ModelError> {
    run_cases(engine, bench, Latency::Zero)
}

/// Highest client concurrency at which a row's TTFT gap counts toward an engine's serving-path
/// latency ([`median_ttft_gap_ms`]): the rows where a prompt rarely waits for another. It was
/// set when the virtual run mixed sglang's prompts into decode steps and the gap of sglang's fit
/// rows grew with concurrency (median 243 ms at c <= 8, 463 at c = 16..32, 1,046 above). With
/// sglang's prefill-first scheduling the gap is flat up to c = 64 (226 / 258 / 213 ms); the rule
/// was kept as it was.
pub const LATENCY_FIT_MAX_CONCURRENCY: u32 = 8;

/// The median TTFT gap, measured less predicted, ms, over the `set` rows of `engine` that
/// measured a TTFT at a client concurrency of at most [`LATENCY_FIT_MAX_CONCURRENCY`] (None when
/// there are none).
pub fn median_ttft_gap_ms(v: &Validation, set: Set, engine: EngineName) -> Option<f64> {
    let gaps: Vec<f64> = v
        .rows
        .iter()
        .filter(|r| r.set == set && r.engine == engine && r.concurrency <= LATENCY_FIT_MAX_CONCURRENCY)
        .filter_map(|r| r.ttft_measured_ms.map(|m| m - r.ttft_predicted_ms))
        .collect();
    servetune_stats::median(&gaps)
}

fn run_cases(engine: &Engine, bench: Option<&dyn VirtualBench>, latency: Latency) -> Result<Validation, ModelError> {
    let file: E2eFile = toml::from_str(E2E).map_err(|e| ModelError::Input(format!("{E2E_PATH}: {e}")))?;
    let mut rows = Vec::new();
    let mut skips = Vec::new();
    for c in &file.case {
        match score(c, engine, bench, latency) {
            Ok(r) => rows.push(r),
            Err((reason, detail)) => skips.push((reason, c.id.clone(), detail)),
        }
    }
    rows.sort_by_key(|r| r.set != Set::Test);
    let aic = crate::aic::estimates()?;
    for r in &mut rows {
        r.aic_predicted = aic.get(&r.id).and_then(crate::aic::Estimate::rate);
        r.aic_error = r.aic_predicted.map(|a| (a - r.measured) / r.measured);
    }
    let side = |set: Set| {
        let errors: Vec<(f64, Option<f64>)> = rows.iter().filter(|r| r.set == set).map(|r| (r.error, r.aic_error)).collect();
        crate::aic::side_by_side(&errors)
    };
    let aiconfigurator =
        AicComparison { tool: crate::aic::AIC_TOOL, data: crate::aic::AIC_PATH, test: side(Set::Test), fit: side(Set::Fit) };
    let (fit, test) = (summary(&rows, Set::Fit), summary(&rows, Set::Test));
    Ok(Validation {
        schema: "servetune.validation/2",
        data: E2E_PATH,
        total_cases: file.case.len(),
        headline_test_median_abs_error: test.median_abs_error,
        fit,
        test,
        rows,
        skipped: group_skips(skips),
        constants: constants(),
        engine: *engine,
        predicted_by: if bench.is_some() { PredictedBy::VirtualRun } else { PredictedBy::SteadyState },
        aiconfigurator,
    })
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn summary_line(name: &str, s: &SetSummary) -> String {
    format!(
        "| {name} | {} | {} | {} | {:+.1}% | {} of {} | {} (n={}) | {} (n={}) | {} (n={}) |\n",
        s.cases,
        pct(s.median_abs_error),
        pct(s.steady_median_abs_error),
        s.median_error * 100.0,
        s.over_predicted,
        s.cases,
        pct(s.measured_median_abs_error),
        s.measured_cases,
        pct(s.tpot_median_abs_error),
        s.tpot_cases,
        pct(s.ttft_median_abs_error),
        s.ttft_cases
    )
}

fn aic_lines(a: &AicComparison) -> String {
    let line = |name: &str, x: &crate::aic::SideBySide| {
        format!(
            "| {name} | {} of {} | {} | {} | {} of {} |\n",
            x.cases,
            x.scored,
            pct(x.aic_median_abs_error),
            pct(x.plan_median_abs_error),
            x.plan_closer,
            x.cases
        )
    };
    format!(
        "\n{} on the same cases (its `cli estimate`, offline; estimates in {}, made by scripts/aic-estimate):\n\n| set | cases it estimates | its median abs error | plan's on those cases | plan closer |\n|---|---:|---:|---:|---:|\n{}{}",
        a.tool,
        a.data,
        line("test", &a.test),
        line("fit", &a.fit)
    )
}

fn rows_table(v: &Validation, set: Set) -> String {
    let mut s = String::from(
        "| case | source | GPU | engine | c | running | measured tok/s | predicted tok/s | error | steady tok/s | steady error | TPOT meas / pred ms | TTFT meas / pred ms | AIConfigurator tok/s (error) |\n|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|\n",
    );
    for r in v.rows.iter().filter(|r| r.set == set) {
        let star = if r.measure == Measure::DerivedFromTtftTpot { "*" } else { "" };
        let tpot = r.tpot_measured_ms.map_or(format!("- / {:.1}", r.tpot_predicted_ms), |m| format!("{m:.1} / {:.1}", r.tpot_predicted_ms));
        let ttft = r.ttft_measured_ms.map_or(format!("- / {:.0}", r.ttft_predicted_ms), |m| format!("{m:.0} / {:.0}", r.ttft_predicted_ms));
        let aic = r.aic_predicted.zip(r.aic_error).map_or("-".to_string(), |(a, e)| format!("{a:.0} ({:+.1}%)", e * 100.0));
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {:.0}{star} | {:.0} | {:+.1}% | {:.0} | {:+.1}% | {tpot} | {ttft} | {aic} |\n",
            r.id,
            r.source_key,
            r.gpu,
            r.engine.name(),
            r.concurrency,
            r.running,
            r.measured,
            r.predicted,
            r.error * 100.0,
            r.predicted_steady,
            (r.predicted_steady - r.measured) / r.measured * 100.0
        );
    }
    s
}

/// The report as Markdown (what `plan --validate` prints and VALIDATION.md holds).
pub fn markdown(v: &Validation) -> String {
    let scored = v.rows.len();
    let by = match v.predicted_by {
        PredictedBy::VirtualRun => "each case's benchmark workload run through the simulator's engine in virtual time",
        PredictedBy::SteadyState => "the steady state (every request running, prefill amortized)",
    };
    let mut s = format!(
        "HEADLINE (test set): median absolute error of output tokens/s = {} over {} held-out cases of {}. Predicted: {by}; the steady state alone misses the same test cases by a median of {}.\n\n",
        pct(v.headline_test_median_abs_error),
        v.test.cases,
        v.data,
        pct(v.test.steady_median_abs_error)
    );
    s += "| set | cases | median abs error | steady-state median | signed median | over-predicted | measured rate only | TPOT | TTFT |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    s += &summary_line("test", &v.test);
    s += &summary_line("fit", &v.fit);
    s += &aic_lines(&v.aiconfigurator);
    s += &format!(
        "\nScored {scored} of {} cases; skipped {}:\n\n| reason | cases | first case | its detail |\n|---|---:|---|---|\n",
        v.total_cases,
        v.total_cases - scored
    );
    for k in &v.skipped {
        let detail: String = k.first_detail.chars().take(90).collect();
        s += &format!("| {} | {} | {} | {} |\n", k.words, k.count, k.first_id, detail.replace('|', "/"));
    }
    s += "\nRates marked * are derived from the source's TTFT and TPOT: c x output_len / (TTFT + (output_len - 1) x TPOT).\n";
    if v.predicted_by == PredictedBy::VirtualRun {
        s += "Predicted rates are what the case's benchmark would measure: its workload (the stated prompt count, else 10 x concurrency; InferenceX cases draw lengths from [0.8 L, L]) run in virtual time; a * row applies the same derivation to the predicted mean TTFT and TPOT. Steady: every request running, prefill amortized.\n";
    }
    s += "\n### Test set\n\n";
    s += &rows_table(v, Set::Test);
    s += "\n### Fit set\n\n";
    s += &rows_table(v, Set::Fit);
    s += "\n### Constants and where they were set\n\n| constant | value | set from |\n|---|---:|---|\n";
    for c in &v.constants {
        s += &format!("| {} | {} | {} |\n", c.name, (c.value * 1000.0).round() / 1000.0, c.set_from);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validation() -> Validation {
        run().expect("e2e.toml is part of the crate and parses")
    }

    #[test]
    fn every_case_is_scored_or_skipped_with_a_reason() {
        let v = validation();
        let skipped: usize = v.skipped.iter().map(|k| k.count).sum();
        assert_eq!(v.rows.len() + skipped, v.total_cases);
        assert!(v.total_cases >= 190, "{}", v.total_cases);
    }

    #[test]
    fn each_scored_test_case_has_a_finite_error_and_the_medians_come_from_its_rows() {
        let v = validation();
        let test: Vec<&Row> = v.rows.iter().filter(|r| r.set == Set::Test).collect();
        assert!(test.len() >= 20, "{} test rows", test.len());
        for r in &test {
            assert!(r.predicted.is_finite() && r.predicted > 0.0, "{}: {}", r.id, r.predicted);
            assert!(r.error.is_finite(), "{}: {}", r.id, r.error);
        }
        let abs: Vec<f64> = test.iter().map(|r| r.error.abs()).collect();
        let m = servetune_stats::median(&abs).expect("rows");
        assert_eq!(v.test.median_abs_error, m);
        assert_eq!(v.headline_test_median_abs_error, m);
        assert_eq!(v.test.cases, test.len());
    }

    #[test]
    fn no_scored_case_is_at_or_above_its_running_cap_or_excluded() {
        let file: E2eFile = toml::from_str(E2E).expect("parses");
        let v = validation();
        for r in &v.rows {
            let c = file.case.iter().find(|c| c.id == r.id).expect("row comes from a case");
            assert_ne!(c.exclude, Some(true), "{}", r.id);
            assert!(c.max_concurrency.is_some(), "{}: offline runs are not scored", r.id);
            if let Some(cap) = c.max_running_requests {
                assert!(r.concurrency < cap, "{}: c={} cap {cap}", r.id, r.concurrency);
            }
            assert_eq!(c.set, r.set, "{}", r.id);
        }
    }

    #[test]
    fn the_cases_that_set_the_defaults_are_in_the_fit_set() {
        let v = validation();
        let ix: Vec<&Row> = v.rows.iter().filter(|r| r.source_key == "inferencex-issue-870").collect();
        assert_eq!(ix.len(), 4);
        assert!(ix.iter().all(|r| r.set == Set::Fit));
        assert!(v.constants.iter().any(|c| c.name.starts_with("kernel_overhead_us") && c.set_from.starts_with("fit: ")));
    }

    /// The defaults minimize the FIT set's source-weighted median |error| ([`fit_objective`]) over their grid neighbourhood (the search
    /// that chose them, [`refit_on_the_fit_set`], spans kernel_overhead_us 0.5..8.0 by 0.1 and
    /// moe_efficiency 0.30..0.80 by 0.05); the test set plays no part.
    #[test]
    fn the_fitted_defaults_minimize_the_fit_median_among_their_grid_neighbours() {
        let d = Engine::default();
        assert_eq!(d.gemm_floor_us, d.kernel_overhead_us, "the netted GEMM floor is the fitted per-kernel floor");
        let at_default = fit_objective(&run_with(&d).expect("runs")).expect("fit rows");
        for o in -2..=2 {
            for m in -2..=2 {
                for r in -1..=1 {
                    let floor = d.kernel_overhead_us + 0.1 * o as f64;
                    let e = Engine {
                        kernel_overhead_us: floor,
                        gemm_floor_us: floor,
                        moe_efficiency: d.moe_efficiency + 0.05 * m as f64,
                        request_step_us: d.request_step_us + 2.5 * r as f64,
                        ..d
                    };
                    let fit = fit_objective(&run_with(&e).expect("runs")).expect("fit rows");
                    assert!(
                        at_default <= fit + 1e-12,
                        "kernel overhead {} moe {} per-request {}: fit {fit} < {at_default}",
                        e.kernel_overhead_us,
                        e.moe_efficiency,
                        e.request_step_us
                    );
                }
            }
        }
    }

    /// `ep_imbalance` is the fit objective's minimum against its grid neighbour (1.05; below 1.0 the
    /// busiest EP rank would read fewer experts than the mean), the search
    /// [`ep_imbalance_scan_on_the_fit_set`] prints; the test set plays no part.
    #[test]
    fn the_ep_imbalance_minimizes_the_fit_objective_against_its_grid_neighbour() {
        let d = Engine::default();
        assert_eq!(d.ep_imbalance, 1.0);
        let at_default = fit_objective(&run_with(&d).expect("runs")).expect("fit rows");
        let above = fit_objective(&run_with(&Engine { ep_imbalance: d.ep_imbalance + 0.05, ..d }).expect("runs")).expect("fit rows");
        assert!(at_default <= above + 1e-12, "ep_imbalance 1.05: fit {above} < {at_default}");
    }

    /// The refit itself (run by hand: `cargo test -p servetune-model --lib -- --ignored
    /// refit_on_the_fit_set --nocapture`): every point of the documented grid (kernel_overhead_us
    /// 0.5..8.0 by 0.1, moe_efficiency 0.30..0.80 by 0.05), scored on the FIT set only; it prints
    /// the argmin (the first of equal medians, overhead-major order), and how flat the minimum is:
    /// the grid points whose fit median is within 0.1 percentage point of it and the ranges they
    /// span (a wide range means a small change elsewhere can move the argmin far).
    #[test]
    #[ignore]
    fn refit_on_the_fit_set() {
        let d = Engine::default();
        let mut grid = Vec::new();
        for i in 0..=75 {
            for j in 0..=10 {
                let (o, m) = (0.5 + 0.1 * i as f64, 0.30 + 0.05 * j as f64);
                let f =
                    fit_objective(&run_with(&Engine { kernel_overhead_us: o, gemm_floor_us: o, moe_efficiency: m, ..d }).expect("runs"))
                        .expect("fit rows");
                grid.push((f, o, m));
            }
        }
        let best = grid.iter().fold((f64::INFINITY, 0.0, 0.0), |b, g| if g.0 < b.0 - 1e-12 { *g } else { b });
        let (f, o, m) = best;
        println!("fit argmin: kernel_overhead_us {o:.1}, moe_efficiency {m:.2}, fit median {f:.4}");
        let near: Vec<_> = grid.iter().filter(|g| g.0 <= f + 0.001).collect();
        let span = |k: fn(&&(f64, f64, f64)) -> f64| {
            near.iter().map(k).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)))
        };
        let ((olo, ohi), (mlo, mhi)) = (span(|g| g.1), span(|g| g.2));
        println!(
            "within 0.1 point of it: {} of {} grid points, kernel_overhead_us {olo:.1}..{ohi:.1}, moe_efficiency {mlo:.2}..{mhi:.2}",
            near.len(),
            grid.len()
        );
    }

    /// The scan that chose [`Engine::request_step_us`] (run by hand: `cargo test -p
    /// servetune-model --lib -- --ignored request_step_scan_on_the_fit_set --nocapture`): for each
    /// per-request cost from 0 to 40 us by 2.5, the best fit objective over the per-kernel floor
    /// (+-1.0 us by 0.1 around the default) and the MoE efficiency (+-0.15 by 0.05), with the
    /// plain fit median and signed median at that point; FIT set only (VALIDATION.md, step 22).
    #[test]
    #[ignore]
    fn request_step_scan_on_the_fit_set() {
        let d = Engine::default();
        for r in (0..=16).map(|i| 2.5 * i as f64) {
            let mut best = (f64::INFINITY, 0.0, 0.0);
            for i in -10..=10 {
                for j in -3..=3 {
                    let o = d.kernel_overhead_us + 0.1 * i as f64;
                    let m = d.moe_efficiency + 0.05 * j as f64;
                    let e = Engine { kernel_overhead_us: o, gemm_floor_us: o, moe_efficiency: m, request_step_us: r, ..d };
                    let f = fit_objective(&run_with(&e).expect("runs")).expect("fit");
                    if f < best.0 {
                        best = (f, o, m);
                    }
                }
            }
            let e = Engine { kernel_overhead_us: best.1, gemm_floor_us: best.1, moe_efficiency: best.2, request_step_us: r, ..d };
            let v = run_with(&e).expect("runs");
            let fit = summary(&v.rows, Set::Fit);
            println!(
                "request_step_us {r}: fit objective {:.4} at overhead {:.1} moe {:.2}; fit median {:.4} signed {:.4}",
                best.0, best.1, best.2, fit.median_abs_error, fit.median_error
            );
        }
    }

    /// The fit rows on AMD CDNA 3 GPUs (MI300X, MI325X): the only rows
    /// [`Engine::cdna3_floor_scale`] moves.
    fn cdna3_fit_errors(v: &Validation) -> Vec<f64> {
        let cdna3 = |gpu: &str| crate::hw::gpu(gpu).is_ok_and(|g| g.arch == crate::hw::Arch::Cdna3);
        v.rows.iter().filter(|r| r.set == Set::Fit && cdna3(&r.gpu)).map(|r| r.error).collect()
    }

    /// The CDNA 3 floor scale is the argmin of the median |error| of the FIT set's CDNA 3 rows over
    /// its grid neighbours (0.1 apart), the search [`cdna3_floor_scan_on_the_fit_set`] prints;
    /// the test set plays no part, and no other row moves with it.
    #[test]
    fn the_cdna3_floor_scale_minimizes_its_fit_rows_median_among_its_grid_neighbours() {
        let d = Engine::default();
        let objective = |v: &Validation| {
            let errors: Vec<f64> = cdna3_fit_errors(v).iter().map(|e| e.abs()).collect();
            assert!(!errors.is_empty(), "CDNA 3 fit rows");
            servetune_stats::median(&errors).expect("rows")
        };
        let at_scale = |scale: f64| run_with(&Engine { cdna3_floor_scale: scale, ..d }).expect("runs");
        let fitted = run_with(&d).expect("runs");
        let at = objective(&fitted);
        for step in [-0.1, 0.1] {
            assert!(at <= objective(&at_scale(d.cdna3_floor_scale + step)) + 1e-12, "scale {}", d.cdna3_floor_scale + step);
        }
        let one = at_scale(1.0);
        assert_eq!(one.rows.len(), fitted.rows.len());
        for (a, b) in one.rows.iter().zip(&fitted.rows) {
            assert_eq!(a.id, b.id);
            if crate::hw::gpu(&a.gpu).is_ok_and(|g| g.arch == crate::hw::Arch::Cdna3) {
                assert!(b.predicted < a.predicted, "{}: a CDNA 3 row slows with the scaled floor", a.id);
            } else {
                assert_eq!(a.predicted, b.predicted, "{} is not CDNA 3 and must not move", a.id);
            }
        }
    }

    /// The CDNA 3 floor scale scanned on the FIT set's CDNA 3 rows by hand
    /// (`cargo test -p servetune-model --lib -- --ignored cdna3_floor_scan_on_the_fit_set
    /// --nocapture`): 1.0..6.0 by 0.1, printing each row's error and the rows' median |error|.
    #[test]
    #[ignore]
    fn cdna3_floor_scan_on_the_fit_set() {
        let d = Engine::default();
        for i in 0..=50 {
            let scale = 1.0 + 0.1 * i as f64;
            let v = run_with(&Engine { cdna3_floor_scale: scale, ..d }).expect("runs");
            let errors = cdna3_fit_errors(&v);
            let abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
            let med = servetune_stats::median(&abs).unwrap_or(f64::NAN);
            let each: Vec<String> = errors.iter().map(|e| format!("{:+.1}%", e * 100.0)).collect();
            println!("scale {scale:.1}: median |error| {:.1}%  rows {}", med * 100.0, each.join(" "));
        }
    }

    /// The launch cost of an eager prefill step (`launch_us`), scanned on the FIT set by hand
    /// (`cargo test -p servetune-model --lib -- --ignored launch_scan_on_the_fit_set --nocapture`):
    /// 0..12 us by 1 at the fitted floor and MoE efficiency, printing the objective of each.
    #[test]
    #[ignore]
    fn launch_scan_on_the_fit_set() {
        let d = Engine::default();
        for i in 0..=12 {
            let e = Engine { launch_us: i as f64, ..d };
            let f = fit_objective(&run_with(&e).expect("runs")).expect("fit rows");
            println!("launch_us {i}: fit objective {f:.4}");
        }
    }

    /// The busiest EP rank's load over the mean (`ep_imbalance`), scanned on the FIT set by hand
    /// (`cargo test -p servetune-model --lib -- --ignored ep_imbalance_scan_on_the_fit_set
    /// --nocapture`): for each value from 1.0 (no excess; below it the busiest rank would read
    /// less than the mean) to 1.3 by 0.05, the best fit objective over the per-kernel floor (+-0.5
    /// us by 0.1 around the default), the MoE efficiency (+-0.15 by 0.05) and the per-request cost
    /// (15..32.5 us by 2.5), with the fit median and the median |error| and signed error of the fit
    /// rows the constant moves (EP > 1 with fewer distinct experts than a rank holds); FIT set only
    /// (VALIDATION.md, step 23).
    #[test]
    #[ignore]
    fn ep_imbalance_scan_on_the_fit_set() {
        let d = Engine::default();
        let (lo, hi) =
            (run_with(&Engine { ep_imbalance: 1.0, ..d }).expect("runs"), run_with(&Engine { ep_imbalance: 1.4, ..d }).expect("runs"));
        let moves: Vec<bool> = lo
            .rows
            .iter()
            .zip(&hi.rows)
            .map(|(a, b)| a.set == Set::Fit && (a.predicted - b.predicted).abs() > 1e-9 * a.predicted.abs())
            .collect();
        for i in 0..=6 {
            let x = 1.0 + 0.05 * i as f64;
            let mut best = (f64::INFINITY, d);
            for o in -5..=5 {
                for m in -3..=3 {
                    for r in 0..=7 {
                        let floor = d.kernel_overhead_us + 0.1 * o as f64;
                        let e = Engine {
                            ep_imbalance: x,
                            kernel_overhead_us: floor,
                            gemm_floor_us: floor,
                            moe_efficiency: d.moe_efficiency + 0.05 * m as f64,
                            request_step_us: 15.0 + 2.5 * r as f64,
                            ..d
                        };
                        let f = fit_objective(&run_with(&e).expect("runs")).expect("fit rows");
                        if f < best.0 - 1e-12 {
                            best = (f, e);
                        }
                    }
                }
            }
            let (f, e) = best;
            let v = run_with(&e).expect("runs");
            let fit = summary(&v.rows, Set::Fit);
            let moved: Vec<f64> = v.rows.iter().zip(&moves).filter(|(_, m)| **m).map(|(r, _)| r.error).collect();
            let abs: Vec<f64> = moved.iter().map(|e| e.abs()).collect();
            println!(
                "ep_imbalance {x:.2}: fit objective {f:.4} at floor {:.1} us, moe {:.2}, per-request {:.1} us; fit median {:.4} signed {:.4}; the {} rows it moves: median |error| {:.4}, signed {:.4}",
                e.kernel_overhead_us,
                e.moe_efficiency,
                e.request_step_us,
                fit.median_abs_error,
                fit.median_error,
                moved.len(),
                servetune_stats::median(&abs).unwrap_or(f64::NAN),
                servetune_stats::median(&moved).unwrap_or(f64::NAN)
            );
        }
    }

    #[test]
    fn a_rate_needing_more_prefill_than_the_gpus_peak_is_skipped_as_implausible() {
        let s = crate::predict::tests::scenario("llama-3.1-8b", Dtype::Fp8, "h200", "nvlink", 1, 1);
        // 2000-token prompts per 100 output tokens: 20 prompt tokens per output token, 2 x ~7e9
        // FLOPs each; the H200's dense FP8 peak allows about 7,000 output tokens/s.
        let s = Scenario { input_len: 2000, output_len: 100, ..s };
        let peak = s.gpu.tflops(s.quant.experts.compute()) * 1e12;
        let limit = peak / (20.0 * 2.0 * s.model.params().active_non_embedding);
        assert!(check_plausible(&s, limit * 0.9).is_ok());
        let (reason, detail) = check_plausible(&s, limit * 1.1).expect_err("above the peak");
        assert_eq!(reason, SkipReason::Implausible);
        assert!(detail.contains("PFLOP/s"), "{detail}");
    }

    #[test]
    fn every_scored_case_has_an_aiconfigurator_estimate_or_its_refusal() {
        let v = validation();
        let aic = crate::aic::estimates().expect("parses");
        let file: E2eFile = toml::from_str(E2E).expect("parses");
        let extension = |id: &str| {
            file.case.iter().any(|c| c.id == id && c.set == Set::Fit && c.note.as_deref().is_some_and(|n| n.contains(FIT_EXTENSION_NOTE)))
        };
        let mut not_run = 0;
        for r in &v.rows {
            match aic.get(&r.id) {
                Some(e) => assert_eq!(r.aic_predicted, e.rate(), "{}", r.id),
                // The fit-set extension was not run through AIConfigurator: no figure, and only there.
                None => {
                    assert!(extension(&r.id), "{}: no entry in {}", r.id, crate::aic::AIC_PATH);
                    assert_eq!(r.aic_predicted, None, "{}", r.id);
                    not_run += 1;
                }
            }
        }
        assert!(not_run > 0 && v.rows.iter().filter(|r| r.set == Set::Test).all(|r| aic.contains_key(&r.id)));
        let with = |set: Set| v.rows.iter().filter(|r| r.set == set && r.aic_error.is_some()).count();
        assert_eq!((v.aiconfigurator.test.cases, v.aiconfigurator.fit.cases), (with(Set::Test), with(Set::Fit)));
    }

    #[test]
    fn the_fit_objective_weighs_each_source_the_same() {
        // Source a: four rows (a quarter of a source's weight each); source b: one row (a whole
        // source's). With b's row the largest error, half the weight is reached at a's 10%; with
        // b's row the smallest, b's row alone is half the weight.
        let mut v = validation();
        let template = v.rows.iter().find(|r| r.set == Set::Fit).expect("a fit row").clone();
        let row = |source: &str, error: f64| Row { source_key: source.to_string(), error, ..template.clone() };
        v.rows = vec![row("a", 0.1), row("a", -0.1), row("a", 0.1), row("a", 0.1), row("b", 0.5)];
        assert_eq!(fit_objective(&v), Some(0.1));
        v.rows = vec![row("a", 0.3), row("a", 0.3), row("a", -0.3), row("a", 0.3), row("b", 0.05)];
        assert_eq!(fit_objective(&v), Some(0.05), "b weighs as much as all of a");
        v.rows.iter_mut().for_each(|r| r.set = Set::Test);
        assert_eq!(fit_objective(&v), None, "test rows never count");
    }

    #[test]
    fn sglang_cases_run_prefill_eagerly_before_its_piecewise_graph_default() {
        assert!(!sglang_prefill_graphs("0.5.9 (image lmsysorg/sglang:v0.5.9-cu130)", Some("2026-03-20")));
        assert!(!sglang_prefill_graphs("0.5.7", None));
        assert!(sglang_prefill_graphs("0.5.10.post1 (image lmsysorg/sglang:v0.5.10.post1-cu130)", None));
        assert!(sglang_prefill_graphs("0.5.19 (lmsysorg/sglang-rocm:v0.5.19-rocm720-mi35x-20260913)", None));
        assert!(!sglang_prefill_graphs("nightly-dev-20260216-d3bae71e", None));
        assert!(sglang_prefill_graphs("nightly-dev (image lmsysorg/sglang:nightly-dev-cu13-20260317-1eea7448)", None));
        assert!(!sglang_prefill_graphs("", Some("2025-11-10")));
        assert!(sglang_prefill_graphs("glm5-hopper (image lmsysorg/sglang:glm5-hopper)", Some("2026-04-08")));
        assert_eq!(sglang_prefill_graphs("commit 947927bdb", None), EngineName::Sglang.graphs_prefill());
    }

    #[test]
    fn free_text_formats_map_to_checkpoints() {
        assert_eq!(quant_of("nvfp4 (modelopt), fp8 kv cache"), Some(Dtype::Nvfp4));
        assert_eq!(quant_of("native (INT4 experts) with fp8 kv cache"), Some(Dtype::Int4));
        assert_eq!(quant_of("fp8 (bf16 kv cache on H200)"), Some(Dtype::Fp8));
        assert_eq!(quant_of("unstated"), None);
    }
}
