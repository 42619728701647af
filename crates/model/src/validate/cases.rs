//! The data files read into scenarios: e2e.toml and the frozen holdout, the configs and model
//! mapping they use, and the rules that turn a case into a scenario (or a reason to skip it).

use serde::Deserialize;

use crate::quant::KvDtype;

use super::*;

pub(crate) const E2E: &str = include_str!("../../data/validation/e2e.toml");
pub(crate) const E2E_PATH: &str = "crates/model/data/validation/e2e.toml";
pub(crate) const HOLDOUT: &str = include_str!("../../data/validation/holdout.toml");
pub(crate) const HOLDOUT_PATH: &str = "crates/model/data/validation/holdout.toml";

/// Which data file a validation scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Data {
    /// e2e.toml: the fit and the test set.
    E2e,
    /// holdout.toml: the frozen holdout.
    Holdout,
}

impl Data {
    /// The file's path in the repository.
    pub fn path(self) -> &'static str {
        match self {
            Data::E2e => E2E_PATH,
            Data::Holdout => HOLDOUT_PATH,
        }
    }

    /// Its cases.
    pub(crate) fn cases(self) -> Result<E2eFile, ModelError> {
        let text = match self {
            Data::E2e => E2E,
            Data::Holdout => HOLDOUT,
        };
        toml::from_str(text).map_err(|e| ModelError::Input(format!("{}: {e}", self.path())))
    }
}

/// The config.json files under `data/validation/configs/` (their origins: that folder's README.md).
pub(crate) const CONFIGS: [(&str, &str); 4] = [
    ("nvidia--DeepSeek-V3.1-NVFP4.json", include_str!("../../data/validation/configs/nvidia--DeepSeek-V3.1-NVFP4.json")),
    ("nvidia--Kimi-K2.5-NVFP4.json", include_str!("../../data/validation/configs/nvidia--Kimi-K2.5-NVFP4.json")),
    (
        "nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4.json",
        include_str!("../../data/validation/configs/nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4.json"),
    ),
    ("zai-org--GLM-5.json", include_str!("../../data/validation/configs/zai-org--GLM-5.json")),
];

/// Where a case's model comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ModelRef {
    /// A catalog name.
    Catalog(&'static str),
    /// A file under `data/validation/configs/`.
    Config(&'static str),
}

/// Hugging Face id in e2e.toml -> the model `plan` runs, and why when it is a stand-in.
pub(crate) const MODELS: [(&str, ModelRef, &str); 66] = [
    ("deepseek-ai/DeepSeek-R1-0528", ModelRef::Catalog("deepseek-r1-0528"), "DeepSeek-V3 architecture"),
    ("deepseek-ai/DeepSeek-R1", ModelRef::Catalog("deepseek-r1"), "DeepSeek-V3 architecture"),
    ("deepseek-ai/DeepSeek-V3", ModelRef::Catalog("deepseek-v3"), ""),
    ("nvidia/DeepSeek-R1-0528-NVFP4-v2", ModelRef::Catalog("deepseek-v3"), "DeepSeek-V3 architecture"),
    ("nvidia/DeepSeek-R1-NVFP4", ModelRef::Catalog("deepseek-r1"), "DeepSeek-V3 architecture"),
    ("nvidia/DeepSeek-V3.1-NVFP4", ModelRef::Config("nvidia--DeepSeek-V3.1-NVFP4.json"), ""),
    ("nvidia/Llama-3.3-70B-Instruct-FP8", ModelRef::Catalog("llama-3.3-70b"), "Llama-3.1-70B architecture"),
    ("nvidia/Llama-3.3-70B-Instruct-FP4", ModelRef::Catalog("llama-3.3-70b"), "Llama-3.1-70B architecture"),
    ("meta-llama/Llama-3.1-70B", ModelRef::Catalog("llama-3.1-70b"), ""),
    ("meta-llama/Llama-3.1-8B-Instruct", ModelRef::Catalog("llama-3.1-8b-instruct"), ""),
    ("nvidia/Llama-3.1-8B-Instruct-FP8", ModelRef::Catalog("llama-3.1-8b-instruct"), ""),
    ("nvidia/Qwen3-235B-A22B-FP4", ModelRef::Catalog("qwen3-235b-a22b"), ""),
    ("nvidia/Qwen3-235B-A22B-FP8", ModelRef::Catalog("qwen3-235b-a22b"), ""),
    ("Qwen/Qwen3-235B-A22B-FP8", ModelRef::Catalog("qwen3-235b-a22b"), ""),
    ("nvidia/Qwen3-30B-A3B-FP4", ModelRef::Catalog("qwen3-30b-a3b"), ""),
    ("openai/gpt-oss-120b", ModelRef::Catalog("gpt-oss-120b"), ""),
    ("nvidia/Kimi-K2.5-NVFP4", ModelRef::Config("nvidia--Kimi-K2.5-NVFP4.json"), ""),
    ("moonshotai/Kimi-K2.5", ModelRef::Catalog("kimi-k2.5"), ""),
    ("moonshotai/Kimi-K2.6", ModelRef::Catalog("kimi-k2.5"), "K2.5's config"),
    ("Qwen/Qwen3-14B-AWQ", ModelRef::Catalog("qwen3-14b"), "base Qwen3-14B config"),
    ("Qwen/Qwen3-32B", ModelRef::Catalog("qwen3-32b"), ""),
    ("nvidia/Qwen3-32B-NVFP4", ModelRef::Catalog("qwen3-32b"), "base Qwen3-32B config"),
    ("Qwen/Qwen3.5-397B-A17B", ModelRef::Catalog("qwen3.5-397b-a17b"), ""),
    ("MiniMaxAI/MiniMax-M2.5", ModelRef::Catalog("minimax-m2.5"), ""),
    ("MiniMaxAI/MiniMax-M2.7", ModelRef::Catalog("minimax-m2.7"), ""),
    ("MiniMaxAI/MiniMax-M2", ModelRef::Catalog("minimax-m2"), ""),
    ("zai-org/GLM-4.6", ModelRef::Catalog("glm-4.6"), ""),
    ("zhipuai/GLM-5", ModelRef::Config("zai-org--GLM-5.json"), ""),
    ("zai-org/GLM-5.1-FP8", ModelRef::Catalog("glm-5.1"), ""),
    ("zai-org/GLM-5.2-FP8", ModelRef::Catalog("glm-5.2"), ""),
    // The frozen holdout's ids (HOLDOUT.md "Models and the catalog", each mapped before any holdout case was scored).
    ("openai/gpt-oss-20b", ModelRef::Catalog("gpt-oss-20b"), ""),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", ModelRef::Catalog("qwen3-235b-a22b"), ""),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", ModelRef::Catalog("qwen3-next-80b-a3b"), ""),
    ("deepseek-ai/DeepSeek-V3.1", ModelRef::Catalog("deepseek-v3.1"), "DeepSeek-V3 architecture"),
    ("meta-llama/Llama-3.3-70B-Instruct", ModelRef::Catalog("llama-3.3-70b"), "Llama-3.1-70B architecture"),
    ("ibnzterrell/Meta-Llama-3.3-70B-Instruct-AWQ-INT4", ModelRef::Catalog("llama-3.3-70b"), "Llama-3.1-70B architecture"),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", ModelRef::Catalog("llama-4-scout"), ""),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", ModelRef::Catalog("llama-4-maverick"), ""),
    ("moonshotai/Kimi-K2-Instruct", ModelRef::Catalog("kimi-k2"), ""),
    ("zai-org/GLM-4.6-FP8", ModelRef::Catalog("glm-4.6"), ""),
    (
        "QuantTrio/Qwen3-Coder-30B-A3B-Instruct-AWQ",
        ModelRef::Catalog("qwen3-30b-a3b"),
        "Qwen3-30B-A3B architecture (the Coder model card's layer, head and expert counts)",
    ),
    (
        "Qwen/Qwen3-Coder-Next",
        ModelRef::Catalog("qwen3-next-80b-a3b"),
        "Qwen3-Next-80B-A3B architecture (the published layer, head and expert counts)",
    ),
    // The 2026-12-05 extension's ids (mapped before any of its cases was scored).
    ("Qwen/Qwen3-235B-A22B", ModelRef::Catalog("qwen3-235b-a22b"), ""),
    ("Qwen/Qwen3-30B-A3B", ModelRef::Catalog("qwen3-30b-a3b"), ""),
    // The second 2026-12-05 extension's ids (mapped before any of its cases was scored).
    ("deepseek-ai/DeepSeek-V3-0324", ModelRef::Catalog("deepseek-v3-0324"), ""),
    ("nvidia/DeepSeek-R1-FP4", ModelRef::Catalog("deepseek-r1"), "DeepSeek-V3 architecture"),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", ModelRef::Catalog("qwen3-235b-a22b"), ""),
    ("Qwen/Qwen3-32B-FP8", ModelRef::Catalog("qwen3-32b"), "base Qwen3-32B config"),
    ("cognitivecomputations/Qwen3-30B-A3B-AWQ", ModelRef::Catalog("qwen3-30b-a3b"), ""),
    ("amd/Llama-3.3-70B-Instruct-FP8-KV", ModelRef::Catalog("llama-3.3-70b"), "Llama-3.1-70B architecture"),
    ("zai-org/GLM-5", ModelRef::Config("zai-org--GLM-5.json"), ""),
    ("nvidia/GLM-5.2-NVFP4", ModelRef::Catalog("glm-5.2"), "GLM-5.2's config"),
    // The 2026-12-06 extension's ids (mapped before any of its cases was scored).
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", ModelRef::Catalog("nemotron-3-nano-30b-a3b"), ""),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8", ModelRef::Catalog("nemotron-3-nano-30b-a3b"), ""),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4", ModelRef::Catalog("nemotron-3-nano-30b-a3b"), ""),
    ("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16", ModelRef::Catalog("nemotron-3-super-120b-a12b"), "the FP8 export's config"),
    ("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8", ModelRef::Catalog("nemotron-3-super-120b-a12b"), ""),
    ("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4", ModelRef::Catalog("nemotron-3-super-120b-a12b"), "the FP8 export's config"),
    ("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4", ModelRef::Config("nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4.json"), ""),
    // Gemma 4's published ids, mapped when its catalog entries were added (stop 52). The frozen
    // holdout's sglang-pr-31216 rows name google/gemma-4-31B-it (HOLDOUT.md, look 21).
    ("google/gemma-4-26B-A4B", ModelRef::Catalog("gemma-4-26b-a4b"), ""),
    ("google/gemma-4-26B-A4B-it", ModelRef::Catalog("gemma-4-26b-a4b"), ""),
    ("nvidia/Gemma-4-26B-A4B-NVFP4", ModelRef::Catalog("gemma-4-26b-a4b"), ""),
    ("google/gemma-4-31B-it", ModelRef::Catalog("gemma-4-31b"), ""),
    ("nvidia/Gemma-4-31B-IT-NVFP4", ModelRef::Catalog("gemma-4-31b"), ""),
    // The fourth 2026-12-06 extension's ids (mapped before any of its cases was scored).
    ("Qwen/Qwen3-30B-A3B-FP8", ModelRef::Catalog("qwen3-30b-a3b"), ""),
    (
        "Qwen/Qwen3-Coder-Next-FP8",
        ModelRef::Catalog("qwen3-next-80b-a3b"),
        "Qwen3-Next-80B-A3B architecture (the published layer, head and expert counts)",
    ),
];

/// One `[[case]]` of e2e.toml: the fields scoring reads (the file's schema is in its header).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct E2eCase {
    pub(crate) id: String,
    pub(crate) set: Set,
    pub(crate) source_key: String,
    pub(crate) engine: EngineName,
    pub(crate) gpu: String,
    pub(crate) gpu_count: Option<u32>,
    pub(crate) interconnect: String,
    pub(crate) model: String,
    pub(crate) quantization: String,
    pub(crate) tp: Option<u32>,
    pub(crate) pp: Option<u32>,
    pub(crate) ep: Option<u32>,
    pub(crate) dp: Option<u32>,
    pub(crate) dp_attention: Option<bool>,
    pub(crate) cuda_graphs: Option<bool>,
    pub(crate) max_concurrency: Option<u32>,
    pub(crate) benchmark_tool: Option<String>,
    pub(crate) dataset: Option<String>,
    /// The date a holdout case was added (holdout.toml).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) added: Option<String>,
    /// Cases sharing a pair differ only in the interconnect (read by the SHM refit test).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) pair: Option<String>,
    /// A decode-only benchmark's fixed context, tokens (read by the SHM refit test).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) context_tokens: Option<u32>,
    pub(crate) num_prompts: Option<u64>,
    pub(crate) range_ratio: Option<f64>,
    pub(crate) input_len: Option<u32>,
    pub(crate) output_len: Option<u32>,
    pub(crate) max_running_requests: Option<u32>,
    /// The memory share the server was given where the source states it
    /// (`--mem-fraction-static`, `--gpu-memory-utilization`); unstated, the release's default
    /// ([`crate::predict::MemShare`]).
    pub(crate) mem_fraction: Option<f64>,
    /// The KV cache's format where the source states it (`--kv-cache-dtype`); unstated, what the
    /// engine's `auto` gives the checkpoint ([`declared_kv`]).
    pub(crate) kv_cache_dtype: Option<String>,
    pub(crate) output_tok_s: Option<f64>,
    pub(crate) ttft_ms: Option<f64>,
    pub(crate) ttft_ms_mean: Option<f64>,
    pub(crate) tpot_ms: Option<f64>,
    pub(crate) tpot_ms_mean: Option<f64>,
    pub(crate) exclude: Option<bool>,
    pub(crate) exclude_reason: Option<String>,
    pub(crate) engine_version: Option<String>,
    pub(crate) date: Option<String>,
    /// Read by the tests only (which cases the fit-set extension added).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) note: Option<String>,
}

/// What the note of each case that `scripts/silicon-cases` added to the fit set begins its
/// second sentence with (those cases were not run through AIConfigurator).
pub const FIT_EXTENSION_NOTE: &str = "Added by the fit-set extension of 2026-12-02";

impl E2eCase {
    /// The measured TTFT, ms: the source's figure, else its mean.
    pub(crate) fn ttft(&self) -> Option<f64> {
        self.ttft_ms.or(self.ttft_ms_mean)
    }

    /// The measured TPOT, ms: the source's figure, else its mean.
    pub(crate) fn tpot(&self) -> Option<f64> {
        self.tpot_ms.or(self.tpot_ms_mean)
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct E2eFile {
    #[serde(default)]
    pub(crate) case: Vec<E2eCase>,
}

pub(crate) fn model_of(c: &E2eCase) -> Result<(ModelSource, &'static str), (SkipReason, String)> {
    let (_, r, note) = MODELS.iter().find(|(hf, _, _)| *hf == c.model).ok_or((SkipReason::UnknownModel, c.model.clone()))?;
    match r {
        ModelRef::Catalog(name) => Ok((ModelSource::Catalog((*name).to_string()), note)),
        ModelRef::Config(file) => {
            let (_, text) = CONFIGS.iter().find(|(f, _)| f == file).ok_or((SkipReason::UnknownModel, (*file).to_string()))?;
            Ok((ModelSource::Config { text: (*text).to_string(), path: format!("crates/model/data/validation/configs/{file}") }, note))
        }
    }
}

/// e2e.toml's free-text format -> a checkpoint format (first named wins, NVFP4 before FP8).
pub(crate) fn quant_of(q: &str) -> Option<Dtype> {
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
pub(crate) fn link_of(interconnect: &str, gpu: &hw::GpuSpec) -> Option<String> {
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
pub(crate) fn spec_of(c: &E2eCase) -> Result<(ScenarioSpec, u32, &'static str), (SkipReason, String)> {
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
    s.mem_fraction = c.mem_fraction;
    // The KV cache as stated, else what `auto` (every engine's default) gave this checkpoint.
    s.quant.kv_cache = Some(match c.kv_cache_dtype.as_deref().filter(|kv| !kv.trim().eq_ignore_ascii_case("auto")) {
        // A mix of formats by layer, say, is not scored.
        Some(kv) => KvDtype::from_engine_name(kv).ok_or((SkipReason::UnknownQuant, format!("KV cache {kv}")))?,
        None => {
            let release = crate::predict::EngineRelease { name: c.engine, version: c.engine_version.clone() };
            release.auto_kv(declared_kv(c, quant), c.date.as_deref())
        }
    });
    s.cuda_graphs = c.cuda_graphs != Some(false);
    // The engine's defaults: vLLM V1 and TRT-LLM put new prompts' tokens into the running decode
    // steps; vLLM takes 0.9 of GPU memory (EngineName::defaults).
    s.engine = c.engine;
    Ok((s, conc, note))
}

/// The KV format a case's checkpoint declares, by what its source and checkpoint id say, before
/// the engine's `auto` reads it ([`crate::predict::EngineRelease::auto_kv`]):
/// - AIConfigurator's silicon rows: FP8 for FP8 and NVFP4 checkpoints. AIConfigurator gives those
///   an FP8 cache (`sdk/models/helpers.py`, its quantization defaults) and its generator passes the
///   cache's format to the engine as `--kv-cache-dtype` (`.claude/rules/generator`).
/// - A checkpoint id naming its KV scales (`...-FP8-KV`, AMD Quark's exports) or published by
///   `nvidia/` (ModelOpt exports, which declare an FP8 cache): FP8.
/// - Otherwise the checkpoint format's declaration ([`KvDtype::declared_by`]).
pub(crate) fn declared_kv(c: &E2eCase, quant: Dtype) -> KvDtype {
    let id = c.model.to_ascii_lowercase();
    let aic = c.source_key.starts_with("aiconfigurator-silicon") && matches!(quant, Dtype::Fp8 | Dtype::Nvfp4);
    if aic || id.contains("fp8-kv") || (id.starts_with("nvidia/") && quant != Dtype::Bf16) {
        KvDtype::Fp8
    } else {
        KvDtype::declared_by(quant)
    }
}

pub(crate) fn measured_of(c: &E2eCase, conc: u32, osl: u32) -> Option<(Measure, f64)> {
    if let Some(r) = c.output_tok_s.filter(|r| r.is_finite() && *r > 0.0) {
        return Some((Measure::OutputTokS, r));
    }
    let ttft = c.ttft()?;
    let tpot = c.tpot()?;
    let e2e_s = (ttft + (osl as f64 - 1.0) * tpot) / 1e3;
    (e2e_s > 0.0).then(|| (Measure::DerivedFromTtftTpot, conc as f64 * osl as f64 / e2e_s))
}

/// Refuses a measured output rate whose prompts could not have been computed: `rate` output
/// tokens/s carry `rate x input / output` prompt tokens/s, each costing 2 FLOPs per active
/// parameter, and that must stay under the GPUs' dense peak in the checkpoint's compute format.
/// A rule on the data alone, the same for both sets; no prediction is looked at.
pub(crate) fn check_plausible(s: &Scenario, rate: f64) -> Result<(), (SkipReason, String)> {
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
/// ratio r draws from [L (1 - r), L (1 + r)]; `sglang.bench_serving --dataset-name random` draws
/// from [max(floor(r L), 1), L] with r its `--random-range-ratio`, 0.0 when not given (its
/// `sample_random_requests` and argument default); every other case runs its stated lengths.
pub(crate) fn workload_of(c: &E2eCase, input: u32, output: u32) -> Workload {
    let tool = c.benchmark_tool.as_deref().unwrap_or("");
    let dist = |len: u32| -> LengthDist {
        if tool.starts_with("InferenceX") {
            return LengthDist::Uniform { lo: ((len as f64 * 0.8).floor() as u32).max(1), hi: len };
        }
        if tool.starts_with("sglang.bench_serving") && c.dataset.as_deref().is_some_and(|d| d.starts_with("random")) {
            // sglang's bench_serving draws each random length from [max(floor(r L), 1), L], r its
            // --random-range-ratio (default 0.0, so [1, L] when the command gives none).
            let r = c.range_ratio.filter(|r| (0.0..=1.0).contains(r)).unwrap_or(0.0);
            return LengthDist::Uniform { lo: ((len as f64 * r).floor() as u32).max(1), hi: len };
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
