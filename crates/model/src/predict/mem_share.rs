//! The share of each GPU's memory an engine takes for weights and caches ([`MemShare`]): a share
//! given to it, a fixed default (vLLM's `--gpu-memory-utilization` 0.9), or sglang's default
//! `--mem-fraction-static`, which sglang computes from the GPU's memory, the parallel sizes and
//! its own batch defaults, by a rule that changed five times over its releases.
//!
//! Sources: sglang's released wheels on PyPI, `ServerArgs.__post_init__` and later
//! `_handle_gpu_memory_settings` (python/sglang/srt/server_args.py; from 0.5.20
//! `handle_gpu_memory_settings` in srt/arg_groups/memory_hook.py), read for 0.4.3 .. 0.4.10,
//! 0.5.1 .. 0.5.5, 0.5.9, 0.5.10, 0.5.12 .. 0.5.14, 0.5.17, 0.5.20 and 0.5.23 (docs/plan.md,
//! "sglang's memory share"). `gpu_mem` there is the device's memory in MiB as nvidia-smi (or
//! rocm-smi) reports it, which the GPU catalog's `memory_gb` is (hw.rs).

use serde::Serialize;

use std::fmt::Write as _;

use super::{AiterCut, Scenario, VisionCut};
use crate::hw::{Arch, GpuSpec};
use crate::spec::Attention;

/// Bytes in a mebibyte: sglang compares the device's memory in MiB.
const MIB: f64 = 1024.0 * 1024.0;

/// How an engine sizes its share of each GPU's memory ([`Scenario::mem_fraction`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemShare {
    /// A share given to the engine (`--mem-fraction`, `mem-fraction=` pairs, a campaign's
    /// `mem_fraction` knob).
    Given(f64),
    /// vLLM's fixed default, `--gpu-memory-utilization` 0.9 (vLLM "Engine Arguments").
    VllmDefault,
    /// The share TensorRT-LLM is given: sglang's classic 0.88 (an assumption; its
    /// `free_gpu_memory_fraction` is a share of the memory left after the weights, which the
    /// model does not track).
    TrtllmAssumed,
    /// sglang before 0.4.6: by TP size, 0.88 at TP1, 0.87 from TP2, 0.85 from TP4, 0.81 from
    /// TP8 and 0.79 from TP16.
    SglangByTp,
    /// sglang 0.4.6 (its .post1 .. .post4 not read): the TP table on GPUs of at most 80 GiB;
    /// above, all but 13 GiB.
    Sglang046,
    /// sglang 0.4.7: the table by TP x PP up to 80 GiB and 0.88 above; then 0.79 on NVIDIA
    /// GPUs above 180,000 MiB, and above 96 GiB the lesser of the share plus 48 GiB of what it
    /// leaves and all but 18 GiB.
    Sglang047 {
        /// The 0.79 on NVIDIA GPUs over 180,000 MiB: 0.4.7 has it, 0.4.6.post5 (which has the
        /// rest of this rule) does not.
        over_180k: bool,
    },
    /// sglang 0.4.8 .. 0.5.2: a reserve by the GPU's memory class, (2.8 + TP x PP / 10) GiB up
    /// to 35 GiB, (9.5 + TP x PP / 2) up to 90 GiB, (12 + TP x PP / 2) up to 160 GiB and 32 GiB
    /// above, 4 GiB more under DP attention; the share is what it leaves.
    SglangByClass,
    /// sglang from 0.5.3: a reserve of 512 MiB, 1.5 MiB per token of the default prefill chunk,
    /// 2 MiB per request of the largest decode CUDA graph, 1 GiB per 8 GPUs of TP x PP, under DP
    /// attention 3 MiB (4.5 above 300 requests) per graph request and rank, the prefill CUDA
    /// graphs' reserve where the release captures them (8 MiB per captured size, 1.5 GiB for an
    /// MLA model; the default from 0.5.10), and at least 10 GiB on GPUs over 60 GiB; the share is
    /// what it leaves. The cuts for a multimodal model's vision encoder
    /// ([`Scenario::vision_scale`]) and on AMD GPUs ([`Scenario::aiter_scale`]) apply on top.
    SglangReserve {
        /// The 0.5.x minor release (3 and up): the prefill chunk under 35 GiB (2048 tokens,
        /// 4096 from 0.5.20) and which prefill graphs are captured depend on it.
        minor: u32,
    },
}

impl MemShare {
    /// Where the share comes from, for a reader.
    pub fn origin(self) -> String {
        let sglang = |era: &str| format!("the --mem-fraction-static default of sglang {era} for this GPU and plan");
        match self {
            MemShare::Given(_) => "as given".into(),
            MemShare::VllmDefault => "vLLM's --gpu-memory-utilization default".into(),
            MemShare::TrtllmAssumed => "the share TensorRT-LLM is given, an assumption".into(),
            MemShare::SglangByTp => sglang("before 0.4.6"),
            MemShare::Sglang046 => sglang("0.4.6"),
            MemShare::Sglang047 { over_180k: true } => sglang("0.4.7"),
            MemShare::Sglang047 { over_180k: false } => sglang("0.4.6.post5"),
            MemShare::SglangByClass => sglang("0.4.8 to 0.5.2"),
            MemShare::SglangReserve { minor } if minor >= 20 => sglang("0.5.20 and later"),
            MemShare::SglangReserve { minor } if minor >= 5 => sglang("0.5.5 to 0.5.19"),
            MemShare::SglangReserve { .. } => sglang("0.5.3 to 0.5.4"),
        }
    }
}

/// The prefill CUDA-graph sizes sglang captures up to `max_tokens` (its piecewise capture list:
/// 4 .. 32 by 4, 48 .. 256 by 16, 288 .. 512 by 32, 576 .. 1024 by 64, 1280 .. 4096 by 256, then
/// by 512): 58 sizes up to 8192 tokens, 74 up to 16384.
fn prefill_graph_sizes(max_tokens: f64) -> usize {
    let runs: [(u32, u32, u32); 6] = [(4, 32, 4), (48, 256, 16), (288, 512, 32), (576, 1024, 64), (1280, 4096, 256), (4608, u32::MAX, 512)];
    runs.iter()
        .map(|&(from, to, by)| {
            let top = f64::from(to).min(max_tokens);
            if top < f64::from(from) {
                0
            } else {
                ((top - f64::from(from)) / f64::from(by)).floor() as usize + 1
            }
        })
        .sum()
}

/// The model families (`model_type`) sglang serves as text models unless `--enable-multimodal` is
/// given, whatever their `vision_config` says (`mm_disabled_models` in sglang's ModelConfig, in
/// 0.4.6 and every release read after it, [`super::ShareCuts::text_only_families`]: Gemma 3 and
/// Llama 4; Step3-VL and Inkling, which the parser does not read, joined later).
pub const SGLANG_TEXT_ONLY_ARCHS: [&str; 2] = ["gemma3", "llama4"];

/// sglang's share by TP size before 0.4.8 (the 0.4.7 table counts TP x PP).
fn by_tp(parallel: u32) -> f64 {
    match parallel {
        p if p >= 16 => 0.79,
        p if p >= 8 => 0.81,
        p if p >= 4 => 0.85,
        p if p >= 2 => 0.87,
        _ => 0.88,
    }
}

impl Scenario {
    /// The share of each GPU's memory the engine is told to take for weights and caches (its
    /// `--mem-fraction-static` / `--gpu-memory-utilization`), by [`super::Engine::mem_share`];
    /// what it then takes is [`Self::mem_fraction`].
    pub fn mem_fraction_flag(&self) -> f64 {
        match self.engine.mem_share {
            MemShare::Given(f) => f,
            // vLLM and TensorRT-LLM make no cut; sglang's own default includes its vision cut
            // from 0.4.9 (before, its model runner cuts whatever share it is given).
            _ if self.engine.share_cuts.vision.in_runner() => self.default_share(),
            _ => self.default_share() * self.vision_scale(),
        }
    }

    /// The engine's own default share before any cut ([`MemShare`]; a given share as given).
    fn default_share(&self) -> f64 {
        let share = self.engine.mem_share;
        let gpu = &self.gpu;
        let mib = gpu.memory_gb * 1e9 / MIB;
        let (tp, pp) = (self.plan.tp, self.plan.pp.max(1));
        let round3 = |reserve: f64| ((mib - reserve) / mib * 1000.0).round() / 1000.0;
        match share {
            MemShare::Given(f) => f,
            MemShare::VllmDefault => super::VLLM_GPU_MEMORY_UTILIZATION,
            MemShare::TrtllmAssumed => super::TRTLLM_MEM_FRACTION,
            MemShare::SglangByTp => by_tp(tp),
            MemShare::Sglang046 if mib <= 81920.0 => by_tp(tp),
            MemShare::Sglang046 => (mib - 13.0 * 1024.0) / mib,
            MemShare::Sglang047 { over_180k } => {
                let f = if mib <= 81920.0 { by_tp(tp * pp) } else { 0.88 };
                if over_180k && mib > 180_000.0 && !is_amd(gpu) {
                    0.79
                } else if mib > 96.0 * 1024.0 {
                    (f + 48.0 * 1024.0 * (1.0 - f) / mib).min((mib - 18.0 * 1024.0) / mib)
                } else {
                    f
                }
            }
            MemShare::SglangByClass => {
                let p = f64::from(tp * pp);
                let gib = match mib / 1024.0 {
                    g if g < 35.0 => 2.8 + p / 10.0,
                    g if g < 90.0 => 9.5 + p / 2.0,
                    g if g < 160.0 => 12.0 + p / 2.0,
                    _ => 32.0,
                };
                let dp_attention = if self.plan.dp_attention { 4.0 } else { 0.0 };
                round3((gib + dp_attention) * 1024.0)
            }
            MemShare::SglangReserve { minor } => {
                let chunk = f64::from(super::BatchDefaults::SglangTable { minor }.step_tokens(gpu));
                let graph_bs = f64::from(self.graph_max_batch().unwrap_or(0));
                let mut reserve = 512.0 + chunk.max(2048.0) * 1.5 + graph_bs * 2.0 + f64::from(tp * pp) / 8.0 * 1024.0;
                if self.plan.dp_attention {
                    let ranks = f64::from(tp);
                    reserve += graph_bs * ranks * if graph_bs > 300.0 { 4.5 } else { 3.0 };
                }
                reserve += self.prefill_graph_reserve_mib(minor, chunk);
                if mib > 60.0 * 1024.0 {
                    reserve = reserve.max(10.0 * 1024.0);
                }
                round3(reserve)
            }
        }
    }

    /// The share of each GPU's memory the engine takes: [`Self::mem_fraction_flag`] times the cuts
    /// sglang's model runner makes to any share, the vision cut of releases before 0.4.9
    /// ([`Self::vision_scale`]) and the aiter scale ([`Self::aiter_scale`]).
    pub fn mem_fraction(&self) -> f64 {
        let runner_vision = if self.engine.share_cuts.vision.in_runner() { self.vision_scale() } else { 1.0 };
        self.mem_fraction_flag() * runner_vision * self.aiter_scale()
    }

    /// sglang's cut to its share for a multimodal model ([`VisionCut`], by release): from 0.4.10
    /// its own default times 0.95 x (1 - 0.1 x (L x H^2 / (24 x 1024^2) - 1)), the second factor
    /// held to 0.8 .. 1.05, for a vision encoder of L layers of width H against ViT-L/14's
    /// 24 x 1024 (`adjust_mem_fraction_for_vlm`): 0.910 for Gemma 4's 27 x 1152, 0.925 for
    /// Qwen3.5's (its config class has no `num_hidden_layers`, so sglang takes 24). 0.4.9 takes
    /// 0.90 of its own default; 0.4.5 .. 0.4.8 0.90 of any share, a given one too, and earlier
    /// releases 0.95. 1 for a share given to 0.4.9 or later, for vLLM and TensorRT-LLM, and for
    /// a model the model does not count as multimodal: one without a `vision_config`, or (from
    /// 0.4.6) of a family sglang serves as text unless `--enable-multimodal` is given
    /// ([`SGLANG_TEXT_ONLY_ARCHS`]). Not modelled: sglang decides by architecture (its release's
    /// multimodal list; from 0.4.10 it also skips a config without `vision_config`), so the cut
    /// is applied for any release named, even one that cannot load the model; and it skips the
    /// cut under `--language-only` or on a disaggregated decode server.
    pub fn vision_scale(&self) -> f64 {
        let Some(v) = self.model.vision else { return 1.0 };
        let cuts = self.engine.share_cuts;
        if cuts.text_only_families && SGLANG_TEXT_ONLY_ARCHS.contains(&self.model.arch.as_str()) {
            return 1.0;
        }
        let given = matches!(self.engine.mem_share, MemShare::Given(_));
        match cuts.vision {
            VisionCut::BySize if !given => {
                let ratio = f64::from(v.layers) * f64::from(v.hidden).powi(2) / (24.0 * 1024.0 * 1024.0);
                0.95 * (1.0 - 0.1 * (ratio - 1.0)).clamp(0.8, 1.05)
            }
            VisionCut::OwnDefault90 if !given => 0.9,
            VisionCut::AnyShare90 => 0.9,
            VisionCut::AnyShare95 => 0.95,
            _ => 1.0,
        }
    }

    /// Where the share in force comes from, for a reader: [`MemShare::origin`] and the cuts on
    /// it ([`Self::vision_scale`], [`Self::aiter_scale`]).
    pub fn mem_share_origin(&self) -> String {
        let mut words = self.engine.mem_share.origin();
        let vision = self.vision_scale();
        if vision != 1.0 {
            let _ = write!(words, ", times {vision:.3} for the vision encoder");
        }
        if self.aiter_scale() != 1.0 {
            words.push_str(", times the 0.85 sglang keeps on AMD GPUs whose attention runs on aiter");
        }
        words
    }

    /// sglang's scale on its share from 0.4.8, on AMD GPUs whose attention runs on aiter, for a
    /// model whose context is over 8,192 tokens: 0.85, whether the share was given or its own
    /// default (`ModelRunner.model_specific_adjustment` in 0.4.8 .. 0.5.3,
    /// `_handle_attention_backend_compatibility` from 0.5.5; 0.5.20's
    /// `SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION`, off by default, exempts a given share). 1
    /// elsewhere ([`AiterCut`]).
    pub fn aiter_scale(&self) -> f64 {
        if self.runs_on_aiter() && self.model.max_context > 8192 {
            0.85
        } else {
            1.0
        }
    }

    /// sglang's reserve for its prefill CUDA graphs, MiB, where its release captures them for this
    /// model and plan (the default from 0.5.10: [`super::Engine::prefill_graphs`]): 8 MiB per
    /// captured size up to the prefill chunk, or a flat 1.5 GiB for an MLA model. None on AMD
    /// GPUs, under DP attention or pipeline parallelism before 0.5.17 (0.5.10 .. 0.5.14 read),
    /// or for an MLA model without DSA in 0.5.17 .. 0.5.19 (0.5.17 read).
    fn prefill_graph_reserve_mib(&self, minor: u32, chunk: f64) -> f64 {
        let mla = matches!(self.model.attention, Attention::Mla { .. });
        let off = !self.engine.prefill_graphs
            || is_amd(&self.gpu)
            || (minor < 17 && (self.plan.dp_attention || self.plan.pp > 1))
            || ((17..20).contains(&minor) && mla && self.model.dsa.is_none());
        match (off, mla) {
            (true, _) => 0.0,
            (false, true) => 1536.0,
            (false, false) => prefill_graph_sizes(chunk) as f64 * 8.0,
        }
    }

    /// Whether sglang's default attention backend for this model is aiter, in a release that
    /// keeps the 0.85 for it ([`AiterCut`]): on an AMD GPU, for every MHA/GQA model but GPT-OSS
    /// before 0.5.17 (its model adjustments pick Triton), and for an MLA model with 16 or 128
    /// heads per rank (others run on Triton) (`ModelRunner.model_specific_adjustment` from 0.4.8,
    /// where the heads per rank are the config's KV heads over TP, the query heads for DeepSeek's
    /// MLA; `_handle_attention_backend_compatibility` from 0.5.5); a DSA model (GLM-5,
    /// DeepSeek-V3.2) runs on its own NSA backend. Not modelled: a backend given by hand, and
    /// speculative decoding, which sent an MLA model to Triton from 0.4.8 to 0.5.2.
    fn runs_on_aiter(&self) -> bool {
        let release = match self.engine.share_cuts.aiter {
            AiterCut::None => false,
            AiterCut::NotGptOss => self.model.arch != "gpt_oss",
            AiterCut::Every => true,
        };
        if !release || !is_amd(&self.gpu) || self.model.dsa.is_some() {
            return false;
        }
        match self.model.attention {
            Attention::Mla { heads, .. } => {
                let per_rank = heads / self.plan.tp.max(1);
                per_rank == 16 || per_rank == 128
            }
            _ => true,
        }
    }
}

/// Whether the GPU is AMD's (sglang's ROCm path).
fn is_amd(gpu: &GpuSpec) -> bool {
    matches!(gpu.arch, Arch::Cdna3 | Arch::Cdna4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::tests::scenario;
    use crate::predict::{EngineName, EngineRelease};
    use crate::quant::Dtype;

    fn share(s: &str, g: &str, tp: u32) -> f64 {
        let mut sc = scenario("llama-3.1-70b", Dtype::Bf16, g, "nvlink", tp, tp);
        let r = EngineRelease::parse("--engine", s).expect("parses");
        sc.engine = r.defaults();
        sc.mem_fraction()
    }

    #[test]
    fn the_prefill_graph_reserve_follows_the_release_model_and_plan() {
        let reserve = |model: &str, g: &str, release: &str, dpa: bool| {
            let mut sc = scenario(model, Dtype::Fp8, g, "nvlink", 8, 8);
            sc.engine = EngineRelease::parse("--engine", release).expect("parses").defaults();
            sc.plan.dp_attention = dpa;
            let minor = match sc.engine.mem_share {
                MemShare::SglangReserve { minor } => minor,
                other => panic!("{other:?}"),
            };
            sc.prefill_graph_reserve_mib(minor, 8192.0)
        };
        // GQA: 58 sizes of 8 MiB; MLA: a flat 1.5 GiB; none before 0.5.10 or on AMD.
        assert_eq!(reserve("qwen3-235b-a22b", "h200", "sglang@0.5.23", false), 464.0);
        assert_eq!(reserve("deepseek-v3", "h200", "sglang@0.5.23", false), 1536.0);
        assert_eq!(reserve("deepseek-v3", "h200", "sglang@0.5.9", false), 0.0);
        assert_eq!(reserve("qwen3-235b-a22b", "mi300x", "sglang@0.5.23", false), 0.0);
        // DP attention turns them off until 0.5.17; MLA without DSA is off in 0.5.17.
        assert_eq!(reserve("deepseek-v3", "h200", "sglang@0.5.14", true), 0.0);
        assert_eq!(reserve("deepseek-v3", "h200", "sglang@0.5.17", false), 0.0);
        assert_eq!(reserve("glm-5", "h200", "sglang@0.5.17", false), 1536.0);
    }

    #[test]
    fn prefill_graph_sizes_count_sglangs_capture_list() {
        // 8 + 14 + 8 + 8 + 12 + 8 up to 8192, 16 more by 512 up to 16384, 42 up to MLA's 2048.
        assert_eq!((prefill_graph_sizes(8192.0), prefill_graph_sizes(16384.0), prefill_graph_sizes(2048.0)), (58, 74, 42));
    }

    #[test]
    fn sglangs_default_share_follows_its_release_gpu_and_tp() {
        // The TP table before 0.4.6, on any GPU.
        assert_eq!((share("sglang@0.4.3", "h200", 8), share("sglang@0.4.3", "h100-sxm", 1)), (0.81, 0.88));
        // 0.4.6: the table up to 80 GiB (an A100 reports 81920 MiB), all but 13 GiB above.
        assert_eq!(share("sglang@0.4.6", "a100", 8), 0.81);
        let h200 = 150.754820096e9 / MIB;
        assert!((share("sglang@0.4.6", "h200", 8) - (h200 - 13312.0) / h200).abs() < 1e-12);
        // 0.4.7: 0.79 on a B200; the lesser rule on an H200 (all but 18 GiB binds).
        assert_eq!(share("sglang@0.4.7", "b200", 8), 0.79);
        assert!((share("sglang@0.4.7", "h200", 8) - (h200 - 18432.0) / h200).abs() < 1e-12);
        // 0.4.8 .. 0.5.2: H200 TP8 reserves 16 GiB, H100 TP8 13.5 GiB, B200 32 GiB.
        assert_eq!(share("sglang@0.5.1", "h200", 8), ((h200 - 16384.0) / h200 * 1000.0).round() / 1000.0);
        assert_eq!(share("sglang@0.4.8", "h100-sxm", 8), 0.831);
        assert_eq!(share("sglang@0.5.2", "b200", 8), 0.821);
        // 0.5.3 ..: H200 TP4 512 + 12288 + 1024 + 512 = 14336 MiB (the figure AIConfigurator's
        // derive_sglang_mem_fraction_static gives too: 0.900); B200 TP4 26624 (0.855).
        assert_eq!(share("sglang@0.5.9", "h200", 4), 0.9);
        assert_eq!(share("sglang@0.5.9", "b200", 4), 0.855);
        // 0.4.6.post5 takes 0.4.7's rule without its B200 branch.
        assert!((share("sglang@0.4.6.post5", "h200", 8) - (h200 - 18432.0) / h200).abs() < 1e-12);
        assert!(share("sglang@0.4.6.post5", "b200", 8) > 0.85);
        // 0.5.10 adds the prefill graphs' 58 x 8 MiB on an H200 at TP4: 14800 MiB.
        assert_eq!(share("sglang@0.5.10", "h200", 4), 0.897);
        // An H100 at TP8: 512 + 12288 + 1024 + 1024 + 464 = 15312 MiB of 81559.
        assert_eq!(share("sglang@0.5.23", "h100-sxm", 8), 0.812);
        // vLLM's and TensorRT-LLM's fixed shares.
        assert_eq!((share("vllm", "h100-sxm", 8), share("trtllm", "h100-sxm", 8)), (0.9, 0.88));
    }

    #[test]
    fn aiter_takes_085_of_sglangs_share_for_long_contexts_from_0_4_8() {
        let on = |release: &str, tp: u32| {
            let mut sc = scenario("deepseek-v3", Dtype::Fp8, "mi300x", "nvlink", tp, tp);
            sc.engine = EngineRelease::parse("--engine", release).expect("parses").defaults();
            (sc.mem_fraction_flag(), sc.mem_fraction())
        };
        // DeepSeek-V3 (128 heads, 163,840 tokens of context) at TP8: 16 heads per rank, aiter.
        for release in ["sglang@0.4.8", "sglang@0.5.3", "sglang@0.5.5", "sglang"] {
            let (flag, share) = on(release, 8);
            assert!((share - flag * 0.85).abs() < 1e-12, "{release}: {flag} -> {share}");
        }
        let (flag, share) = on("sglang@0.4.7", 8);
        assert_eq!(share, flag, "0.4.7 has no aiter scale");
        // A date between 0.5.3's and 0.5.5's stands for 0.5.3 or 0.5.4, which have it too.
        let mut dated = scenario("deepseek-v3", Dtype::Fp8, "mi300x", "nvlink", 8, 8);
        let undated = EngineRelease::current(EngineName::Sglang);
        dated.engine.share_cuts = undated.share_cuts(Some("2025-11-01"));
        dated.engine.mem_share = undated.mem_share(Some("2025-11-01"));
        assert_eq!(dated.aiter_scale(), 0.85);
        dated.engine.share_cuts = undated.share_cuts(Some("2025-06-01"));
        assert_eq!(dated.aiter_scale(), 1.0, "before 0.4.8's date");
        // A given share takes the scale too; the flag is the share as given.
        let mut given = scenario("deepseek-v3", Dtype::Fp8, "mi300x", "nvlink", 8, 8);
        given.engine = EngineRelease::parse("--engine", "sglang@0.5.9").expect("parses").defaults();
        given.engine.mem_share = MemShare::Given(0.8);
        assert_eq!(given.mem_fraction_flag(), 0.8);
        assert!((given.mem_fraction() - 0.68).abs() < 1e-12);
        // At TP4 (32 heads per rank) it runs on Triton: no scale.
        let (flag, share) = on("sglang@0.5.5", 4);
        assert_eq!(share, flag);
        // An MHA model takes it where its context is over 8,192 tokens; GPT-OSS runs on Triton
        // before 0.5.17.
        let mha = |model: &str, release: &str, context: u32| {
            let mut sc = scenario(model, Dtype::Bf16, "mi300x", "nvlink", 8, 8);
            sc.engine = EngineRelease::parse("--engine", release).expect("parses").defaults();
            sc.model.max_context = context;
            sc.aiter_scale()
        };
        assert_eq!(mha("llama-3.1-70b", "sglang@0.5.9", 131_072), 0.85);
        assert_eq!(mha("llama-3.1-70b", "sglang@0.5.9", 8192), 1.0);
        assert_eq!(mha("gpt-oss-120b", "sglang@0.5.9", 131_072), 1.0);
        assert_eq!(mha("gpt-oss-120b", "sglang@0.5.17", 131_072), 0.85);
        // NVIDIA GPUs never take it.
        let mut h = scenario("deepseek-v3", Dtype::Fp8, "h200", "nvlink", 8, 8);
        h.engine = EngineName::Sglang.defaults();
        assert_eq!(h.aiter_scale(), 1.0);
        h.engine = EngineRelease::parse("--engine", "sglang@0.4.8").expect("parses").defaults();
        assert_eq!(h.aiter_scale(), 1.0);
    }

    #[test]
    fn sglang_cuts_its_share_for_a_multimodal_models_vision_encoder_by_release() {
        let with = |model: &str, release: &str| {
            let mut sc = scenario(model, Dtype::Bf16, "h200", "nvlink", 8, 8);
            sc.engine = EngineRelease::parse("--engine", release).expect("parses").defaults();
            sc
        };
        // (flag, share in force, the same model without its encoder's flag)
        let at = |model: &str, release: &str| {
            let sc = with(model, release);
            let mut text = sc.clone();
            text.model.vision = None;
            (sc.mem_fraction_flag(), sc.mem_fraction(), text.mem_fraction_flag(), sc.vision_scale())
        };
        // From 0.4.10, by size: Gemma 4's encoder, 27 layers of 1152:
        // 0.95 x (1 - 0.1 x (27 x 1152^2 / (24 x 1024^2) - 1)), in the flag's value.
        let (flag, share, text, v) = at("gemma-4-31b", "sglang@0.5.23");
        assert!((v - 0.909_74).abs() < 1e-5, "{v}");
        assert!((flag - text * v).abs() < 1e-12 && share == flag, "{flag} = {text} x {v}");
        assert!((at("gemma-4-31b", "sglang@0.4.10").3 - v).abs() < 1e-12);
        // Qwen3.5's, 24 layers (none read) of 1152: 0.925.
        assert!((at("qwen3.5-397b-a17b", "sglang@0.5.9").3 - 0.924_77).abs() < 1e-5);
        // 0.4.9: 0.90 of its own default, in the flag.
        let (flag, share, text, v) = at("gemma-4-31b", "sglang@0.4.9");
        assert_eq!(v, 0.9);
        assert!((flag - text * 0.9).abs() < 1e-12 && share == flag);
        // 0.4.5 to 0.4.8: 0.90 of any share in the model runner, after the flag; 0.4.4 and
        // before 0.95.
        let (flag, share, text, _) = at("gemma-4-31b", "sglang@0.4.8");
        assert!(flag == text && (share - flag * 0.9).abs() < 1e-12, "{flag} {share}");
        let (flag, share, text, _) = at("gemma-4-31b", "sglang@0.4.4");
        assert!(flag == text && (share - flag * 0.95).abs() < 1e-12, "{flag} {share}");
        // A date or a nightly's stands for its release; a .post release for its own.
        let undated = EngineRelease::current(EngineName::Sglang);
        assert_eq!(undated.share_cuts(Some("2025-07-30")).vision, VisionCut::OwnDefault90);
        assert_eq!(undated.share_cuts(Some("2025-07-31")).vision, VisionCut::BySize);
        assert_eq!(undated.share_cuts(Some("2025-07-05")).vision, VisionCut::AnyShare90);
        assert_eq!(undated.share_cuts(Some("2025-04-06")).vision, VisionCut::AnyShare95);
        let release = |v: &str| EngineRelease::parse("--engine", v).expect("parses");
        assert_eq!(release("sglang@nightly-dev-20250730").share_cuts(None).vision, VisionCut::OwnDefault90);
        assert_eq!(release("sglang@0.4.9.post1").share_cuts(None).vision, VisionCut::OwnDefault90);
        // The size factor is held to 0.8 .. 1.05: a 48 x 2048 encoder gives 0.95 x 0.8; an
        // encoder of no layers 0.95 x 1.05 (the 1.1 it would give, held).
        let mut big = with("gemma-4-31b", "sglang");
        big.model.vision = Some(crate::spec::VisionTower { layers: 48, hidden: 2048 });
        assert!((big.vision_scale() - 0.76).abs() < 1e-12);
        big.model.vision = Some(crate::spec::VisionTower { layers: 0, hidden: 1152 });
        assert!((big.vision_scale() - 0.9975).abs() < 1e-12);
        // A share given to 0.4.9 or later is not cut; one given to 0.4.8 is.
        for (release, want) in [("sglang", 0.8), ("sglang@0.4.9", 0.8), ("sglang@0.4.8", 0.72), ("sglang@0.4.4", 0.76)] {
            let mut given = with("gemma-4-31b", release);
            given.engine.mem_share = MemShare::Given(0.8);
            assert_eq!(given.mem_fraction_flag(), 0.8, "{release}");
            assert!((given.mem_fraction() - want).abs() < 1e-12, "{release}: {}", given.mem_fraction());
        }
        // vLLM makes no cut; a text model takes none.
        assert_eq!(at("gemma-4-31b", "vllm").1, 0.9);
        assert_eq!(at("llama-3.1-70b", "sglang").3, 1.0);
        // sglang serves Llama 4 and Gemma 3 as text unless told otherwise, whatever their vision
        // configs say.
        let mut llama4 = with("llama-4-scout", "sglang");
        llama4.model.vision = Some(crate::spec::VisionTower { layers: 34, hidden: 1408 });
        assert_eq!(llama4.vision_scale(), 1.0);
        let mut gemma3 = with("gemma-4-31b", "sglang");
        gemma3.model.arch = "gemma3".into();
        assert_eq!(gemma3.vision_scale(), 1.0);
        // 0.4.5 has no such list: it cuts Gemma 3 too.
        gemma3.engine = EngineRelease::parse("--engine", "sglang@0.4.5").expect("parses").defaults();
        assert_eq!(gemma3.vision_scale(), 0.9);
        // The report says so.
        let g = with("gemma-4-31b", "sglang");
        assert!(g.mem_share_origin().ends_with("times 0.910 for the vision encoder"), "{}", g.mem_share_origin());
    }
}
