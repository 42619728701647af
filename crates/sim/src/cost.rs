//! How long one engine step takes: the [`StepCost`] seam, the built-in parametric profile, its
//! file format (TOML or JSON) and the named presets.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::SimError;

/// What one iteration of the engine does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepBatch {
    /// Prompt tokens prefilled in this step (chunked prefill).
    pub prefill_tokens: u32,
    /// Requests decoding one token each in this step.
    pub decode_batch: u32,
    /// KV tokens the step's attention reads (context of every request in the batch).
    pub context_tokens: u64,
}

/// The duration of one step: the parametric profile, or the performance model (`--from-plan`).
pub trait StepCost: Send + Sync + std::fmt::Debug {
    /// How long a step of batch `b` takes.
    fn step(&self, b: &StepBatch) -> Duration;

    /// How this cost prices a step, in words (`/server_info` shows it).
    fn pricing(&self) -> String {
        PARAMETRIC_PRICING.to_string()
    }

    /// Where the step's time goes, for `/start_profile` traces (all GEMM unless the cost knows).
    fn split(&self, b: &StepBatch) -> crate::profile::Split {
        crate::profile::Split { matmul_ms: self.step(b).as_secs_f64() * 1e3, ..Default::default() }
    }
}

/// How [`ParametricCost`] prices a step, in words.
pub const PARAMETRIC_PRICING: &str = "the profile's terms: overhead_ms per step, plus per_decode_token_ms per request in the decode batch, per_prefill_token_ms per prefilled prompt token and per_context_token_us per context token attention reads";

/// The largest value a cost term may have: a step of one request, token or context token
/// costing more than [`MAX_STEP`] is not a deployment the simulator can run.
pub const MAX_TERM_MS: f64 = 3_600_000.0;

/// `overhead + decode * per_decode + prefill * per_prefill + context * per_context`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParametricCost {
    /// Fixed cost of every step: launch overhead, synchronisation, per-layer collectives (ms).
    pub overhead_ms: f64,
    /// Added per request in the decode batch (ms): weight and expert reads that grow with batch.
    pub per_decode_token_ms: f64,
    /// Added per prefilled prompt token (ms).
    pub per_prefill_token_ms: f64,
    /// Added per context token read by attention (microseconds).
    pub per_context_token_us: f64,
}

impl ParametricCost {
    fn check(&self) -> Result<(), String> {
        for (name, v) in [
            ("overhead_ms", self.overhead_ms),
            ("per_decode_token_ms", self.per_decode_token_ms),
            ("per_prefill_token_ms", self.per_prefill_token_ms),
            ("per_context_token_us", self.per_context_token_us),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("cost.{name} = {v}: must be a finite number >= 0"));
            }
            let ms = if name == "per_context_token_us" { v / 1e3 } else { v };
            if ms > MAX_TERM_MS {
                return Err(format!("cost.{name} = {v:?}: more than the simulator's limit of an hour per step: give a smaller value"));
            }
        }
        if self.overhead_ms + self.per_decode_token_ms + self.per_prefill_token_ms <= 0.0 {
            return Err("the cost terms are all zero: a step must take some time".into());
        }
        Ok(())
    }
}

impl StepCost for ParametricCost {
    fn step(&self, b: &StepBatch) -> Duration {
        let ms = self.overhead_ms
            + self.per_decode_token_ms * b.decode_batch as f64
            + self.per_prefill_token_ms * b.prefill_tokens as f64
            + self.per_context_token_us * 1e-3 * b.context_tokens as f64;
        // A finite but absurd cost term must not panic the engine thread: a step is held to MAX_STEP.
        Duration::try_from_secs_f64(ms.max(0.0) / 1e3).map_or(MAX_STEP, |d| d.min(MAX_STEP))
    }

    fn split(&self, b: &StepBatch) -> crate::profile::Split {
        crate::profile::Split {
            matmul_ms: self.per_decode_token_ms * b.decode_batch as f64 + self.per_prefill_token_ms * b.prefill_tokens as f64,
            attention_ms: self.per_context_token_us * 1e-3 * b.context_tokens as f64,
            communication_ms: 0.0,
            overhead_ms: self.overhead_ms,
        }
    }
}

/// The longest one step may take (an hour); a larger cost is held to it.
pub const MAX_STEP: Duration = Duration::from_secs(3600);

/// A deployment to simulate: the engine's limits and its step cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The profile's name (a preset's, or the file's).
    pub name: String,
    /// Served model name (for /v1/models and /get_server_info).
    #[serde(default = "default_model")]
    pub model: String,
    /// Tensor-parallel GPUs (reported by `/get_server_info`).
    #[serde(default = "one")]
    pub tp_size: u32,
    /// sglang `--max-running-requests` / vLLM `--max-num-seqs`.
    pub max_running_requests: u32,
    /// KV-cache capacity in tokens.
    pub kv_tokens: u64,
    /// Tokens per KV page.
    #[serde(default = "default_page")]
    pub page_size: u32,
    /// Token budget of one step (decode tokens plus prefill chunks).
    #[serde(default = "default_chunk")]
    pub chunked_prefill_size: u32,
    /// Mean output length when `ignore_eos` is off (EOS falls geometrically).
    #[serde(default = "default_eos")]
    pub eos_mean_tokens: u32,
    /// How a step with prompt tokens waiting is composed ([`Scheduling`]); `mixed` when absent.
    #[serde(default)]
    pub scheduling: Scheduling,
    /// Step-cost terms.
    pub cost: ParametricCost,
    /// For a MoE model: the fraction of memory bandwidth its fused-MoE kernels reach. Below
    /// [`TUNED_MOE_EFFICIENCY`] the server logs the warning sglang prints when no tuned kernel
    /// config exists (see [`Profile::moe_config_warning`]); absent for dense models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_efficiency: Option<f64>,
}

/// How the engine composes a step while admitted requests still have prompt tokens to prefill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheduling {
    /// Prompt chunks ride in the decode step under one token budget, and every running request
    /// decodes each step (vLLM V1's chunked prefill; TensorRT-LLM's in-flight batching; sglang with
    /// `--enable-mixed-chunk`).
    #[default]
    Mixed,
    /// A step runs prompt chunks alone while any admitted request has prompt tokens left, and the
    /// decoding requests wait for it: sglang's scheduler without `--enable-mixed-chunk`
    /// (`Scheduler.get_next_batch_to_run` takes a new prefill batch before the running decode
    /// batch). A burst of arrivals is therefore prefilled in full before any of them decodes, so
    /// requests that start together also finish together (docs/reference.md, "Engine
    /// scheduling").
    PrefillFirst,
}

/// The fused-MoE efficiency of tuned kernels: the model's one figure (`servetune plan`'s "tuned
/// MoE kernels" fix and the campaign's MoE question use the same), against the untuned default.
pub use servetune_model::rank::TUNED_MOE_EFFICIENCY;

impl Profile {
    /// The log line of an engine running untuned fused-MoE kernels: sglang's own warning when no
    /// tuned config file exists (python/sglang/srt/layers/moe/fused_moe_triton/fused_moe_triton_config.py,
    /// `get_moe_configs`: "Using default MoE kernel config. Performance might be sub-optimal! Config
    /// file not found at %s, you can create them with ..."), with the simulated efficiency where
    /// sglang names the file it looked for.
    pub fn moe_config_warning(&self) -> Option<String> {
        let e = self.moe_efficiency.filter(|e| *e < TUNED_MOE_EFFICIENCY)?;
        Some(format!(
            "Using default MoE kernel config. Performance might be sub-optimal! Config file not found at (simulated: no tuned config for {}; its fused-MoE kernels read experts at {:.0}% of memory bandwidth, tuned ones at {:.0}%), you can create them with https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton",
            self.model,
            e * 100.0,
            TUNED_MOE_EFFICIENCY * 100.0
        ))
    }
}

fn default_model() -> String {
    "sim-model".into()
}
fn one() -> u32 {
    1
}
fn default_page() -> u32 {
    16
}
fn default_chunk() -> u32 {
    8192
}
fn default_eos() -> u32 {
    256
}

/// The built-in presets: name, one-line description.
pub const PRESETS: &[(&str, &str)] = &[
    ("reference-kvm", "GLM-5 NVFP4, TP8 on 8 PCIe RTX PRO 6000 in a KVM guest without P2P: peak ~485 output tok/s near concurrency 64"),
    ("reference-lxc", "the same box in an LXC container with P2P: plateau ~806 output tok/s"),
    ("tiny", "a fast small-model profile for tests and demos (~2 ms steps)"),
];

/// A named preset.
pub fn preset(name: &str) -> Result<Profile, SimError> {
    // The reference deployment: GLM-5 (744B MoE) NVFP4 served by sglang with TP8 across 8 RTX PRO
    // 6000 Blackwell (96 GB) cards. The KV capacity is the figure a vLLM log gave for it (19.12 GiB
    // held 329,792 fp8 MLA tokens). The cost terms are fitted to the two throughputs the team
    // measured: 485 tok/s at concurrency 64 in the KVM guest, where every all-reduce is staged
    // through host memory (a large per-step overhead), and a ~806 tok/s plateau in the LXC
    // container once P2P worked. max-running-requests 64 is the limit at which both plateaus
    // begin. These are calibration, not derivation; `--from-plan` derives step costs from the
    // performance model instead. The fused-MoE kernels are untuned for GLM-5's 256 experts (one of
    // the plateau's suspects in docs/design.md), at the model's default efficiency for them
    // (crates/model/src/predict.rs, `Engine::default`), so the server logs sglang's warning.
    let glm = |name: &str, cost: ParametricCost| Profile {
        name: name.into(),
        model: "glm-5".into(),
        tp_size: 8,
        max_running_requests: 64,
        kv_tokens: 329_792,
        page_size: 64,
        chunked_prefill_size: 8192,
        eos_mean_tokens: 512,
        // The cost terms were fitted with prompt chunks mixed into decode steps; they stay so.
        scheduling: Scheduling::Mixed,
        cost,
        moe_efficiency: Some(servetune_model::predict::Engine::default().moe_efficiency),
    };
    match name {
        "reference-kvm" => Ok(glm(
            name,
            ParametricCost { overhead_ms: 36.0, per_decode_token_ms: 1.465, per_prefill_token_ms: 0.010, per_context_token_us: 0.10 },
        )),
        "reference-lxc" => Ok(glm(
            name,
            ParametricCost { overhead_ms: 20.0, per_decode_token_ms: 0.91, per_prefill_token_ms: 0.006, per_context_token_us: 0.06 },
        )),
        "tiny" => Ok(Profile {
            name: name.into(),
            model: "sim-tiny".into(),
            tp_size: 1,
            max_running_requests: 256,
            kv_tokens: 1 << 20,
            page_size: 16,
            chunked_prefill_size: 8192,
            eos_mean_tokens: 64,
            scheduling: Scheduling::Mixed,
            cost: ParametricCost { overhead_ms: 2.0, per_decode_token_ms: 0.01, per_prefill_token_ms: 0.0005, per_context_token_us: 0.0 },
            moe_efficiency: None,
        }),
        other => Err(SimError::Input(format!(
            "--preset {other:?} does not exist; presets: {}",
            PRESETS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// The largest profile file read (16 MiB): a profile is a few hundred bytes.
pub const MAX_PROFILE_BYTES: u64 = 16 << 20;

/// Reads `path` as UTF-8 text of at most `limit` bytes; the error names the file and the limit.
fn read_limited(path: &Path, limit: u64) -> Result<String, SimError> {
    use std::io::Read as _;
    let cannot = |e: std::io::Error| SimError::Input(format!("--profile {}: cannot read it ({e})", path.display()));
    let f = std::fs::File::open(path).map_err(cannot)?;
    let mut buf = Vec::new();
    f.take(limit + 1).read_to_end(&mut buf).map_err(cannot)?;
    if buf.len() as u64 > limit {
        return Err(SimError::Input(format!(
            "--profile {}: larger than the limit of {} MiB for a profile file: give the profile itself (a few lines of TOML or JSON)",
            path.display(),
            limit >> 20
        )));
    }
    String::from_utf8(buf)
        .map_err(|_| SimError::Input(format!("--profile {}: not UTF-8 text: give a TOML or JSON profile", path.display())))
}

impl Profile {
    /// Reads a profile from a TOML or JSON file (by extension; TOML otherwise).
    pub fn load(path: &Path) -> Result<Self, SimError> {
        let text = read_limited(path, MAX_PROFILE_BYTES)?;
        let p: Profile = if path.extension().is_some_and(|e| e == "json") {
            serde_json::from_str(&text).map_err(|e| SimError::Input(format!("--profile {}: not a valid profile: {e}", path.display())))?
        } else {
            toml::from_str(&text).map_err(|e| SimError::Input(format!("--profile {}: not a valid profile: {e}", path.display())))?
        };
        p.validate().map_err(|e| SimError::Input(format!("--profile {}: {e}", path.display())))?;
        Ok(p)
    }

    /// Checks that the engine can run at all, with every count within the range its `sim` flag
    /// takes (a profile file gets no more than a flag).
    pub fn validate(&self) -> Result<(), String> {
        self.cost.check()?;
        if self.model.trim().is_empty() || self.model.chars().any(char::is_control) {
            return Err(format!("model {:?} is not a served model name: give one (clients send it, and /v1/models lists it)", self.model));
        }
        if self.max_running_requests == 0 {
            return Err("max_running_requests is 0: no request could ever run".into());
        }
        if self.page_size == 0 {
            return Err("page_size is 0: give the KV page size in tokens (16 or 64 are usual)".into());
        }
        if self.chunked_prefill_size == 0 {
            return Err("chunked_prefill_size is 0: no prompt could ever be prefilled".into());
        }
        if self.kv_tokens < self.page_size as u64 * 2 {
            return Err(format!(
                "kv_tokens {} is smaller than two pages of {} tokens: not even one request fits",
                self.kv_tokens, self.page_size
            ));
        }
        let ranges: [(&str, u64, u64, u64); 6] = [
            ("tp_size", self.tp_size.into(), 1, 65_536),
            ("max_running_requests", self.max_running_requests.into(), 1, 1_000_000),
            ("kv_tokens", self.kv_tokens, 2, 1_000_000_000_000),
            ("page_size", self.page_size.into(), 1, 65_536),
            ("chunked_prefill_size", self.chunked_prefill_size.into(), 1, 16_777_216),
            ("eos_mean_tokens", self.eos_mean_tokens.into(), 1, 16_777_216),
        ];
        for (field, v, lo, hi) in ranges {
            if !(lo..=hi).contains(&v) {
                return Err(format!("{field} {v} is out of range: give {lo}..={hi}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parametric_cost_adds_its_terms() {
        let c = ParametricCost { overhead_ms: 10.0, per_decode_token_ms: 1.0, per_prefill_token_ms: 0.01, per_context_token_us: 0.5 };
        let d = c.step(&StepBatch { prefill_tokens: 100, decode_batch: 4, context_tokens: 2000 });
        assert!((d.as_secs_f64() * 1e3 - (10.0 + 4.0 + 1.0 + 1.0)).abs() < 1e-9);
    }

    #[test]
    fn untuned_moe_kernels_log_sglangs_default_config_warning_and_tuned_ones_do_not() {
        let mut p = preset("reference-lxc").expect("preset");
        let line = p.moe_config_warning().expect("untuned");
        assert!(line.starts_with("Using default MoE kernel config. Performance might be sub-optimal! Config file not found at"), "{line}");
        let untuned = servetune_model::predict::Engine::default().moe_efficiency;
        assert!(line.contains(&format!("{:.0}%", untuned * 100.0)), "{line}");
        p.moe_efficiency = Some(TUNED_MOE_EFFICIENCY);
        assert_eq!(p.moe_config_warning(), None);
        assert_eq!(preset("tiny").expect("tiny").moe_config_warning(), None, "a dense profile says nothing");
    }

    /// A profile file gets no more than the flags: a count outside its flag's range is refused.
    #[test]
    fn a_profile_count_outside_its_flags_range_is_refused_naming_the_field() {
        let ok = preset("tiny").expect("tiny");
        assert!(ok.validate().is_ok());
        for (p, says) in [
            (Profile { eos_mean_tokens: 0, ..ok.clone() }, "eos_mean_tokens 0 is out of range"),
            (Profile { tp_size: 0, ..ok.clone() }, "tp_size 0 is out of range"),
            (Profile { kv_tokens: u64::MAX, ..ok.clone() }, "kv_tokens 18446744073709551615 is out of range"),
            (Profile { max_running_requests: u32::MAX, ..ok.clone() }, "max_running_requests 4294967295 is out of range"),
        ] {
            let e = p.validate().expect_err(says);
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn unknown_preset_lists_the_presets() {
        let e = preset("nope").expect_err("unknown");
        assert!(e.to_string().contains("reference-kvm, reference-lxc, tiny"), "{e}");
    }

    #[test]
    fn profile_files_load_and_bad_ones_are_explained() {
        let dir = std::env::temp_dir().join(format!("sim-prof-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("p.toml");
        std::fs::write(&p, "name = \"x\"\nmax_running_requests = 8\nkv_tokens = 4096\n[cost]\noverhead_ms = 5.0\nper_decode_token_ms = 0.5\nper_prefill_token_ms = 0.01\nper_context_token_us = 0.0\n").expect("write");
        let prof = Profile::load(&p).expect("load");
        assert_eq!(prof.max_running_requests, 8);
        assert_eq!(prof.page_size, 16);
        let j = dir.join("p.json");
        std::fs::write(&j, serde_json::to_string(&prof).expect("ser")).expect("write");
        assert_eq!(Profile::load(&j).expect("json"), prof);
        std::fs::write(&p, "name = \"x\"\nmax_running_requests = 8\n").expect("write");
        let e = Profile::load(&p).expect_err("missing fields");
        assert!(e.to_string().contains("not a valid profile"), "{e}");
        std::fs::write(&p, "name = \"x\"\nmax_running_requests = 8\nkv_tokens = 8\n[cost]\noverhead_ms = 5.0\nper_decode_token_ms = 0.5\nper_prefill_token_ms = 0.01\nper_context_token_us = 0.0\n").expect("write");
        let e = Profile::load(&p).expect_err("tiny kv");
        assert!(e.to_string().contains("not even one request fits"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
