//! The engines' default limits on one scheduler's batch: how many requests it runs at once, and
//! the largest decode batch it replays as a CUDA graph (a larger one runs eagerly and pays each
//! kernel's launch). Both are set by the engine, not the hardware, and both change with the
//! release, so [`BatchDefaults`] names the release family and [`Scenario`] turns it into numbers
//! for the GPU, the plan and the KV cache.
//!
//! Sources (the engines' released code, read per release; docs/plan.md "Engine batch limits"):
//! - vLLM's running cap is `max_num_seqs`, per engine core (per data-parallel rank): 256 under V0;
//!   under V1 (0.8.0, March 2025) 1024 on every GPU until 0.8.4, then 1024 on GPUs with at least
//!   70 GiB (0.8.5, `EngineArgs._set_default_args_v1`) and, from 0.9.0, not on an A100
//!   (vLLM PR 17885); 256 otherwise. Its largest captured decode batch is 256 under V0 and 512
//!   under V1 (`min(2 x max_num_seqs, 512)` from 0.10.0), 1024 on data-centre Blackwell from
//!   0.28.0; above it `CudagraphDispatcher.dispatch` runs the step without a graph.
//! - sglang's running cap, unset, is derived per scheduler (each attention-DP worker) from its KV
//!   pool: the request slots `KV tokens / context length x 512`, held to [2048, 4096], and at
//!   most half the KV tokens. Its `cuda_graph_max_bs` is a table by GPU memory and TP size from
//!   0.5.3 (2025-10-06; `ServerArgs._handle_gpu_memory_settings`): under 20 GB 8; under 35 GB 16
//!   (24 from 0.5.5, 48 from 0.5.20) below TP4 and 80 (160 from 0.5.20) at TP4 and up (0.5.17 has
//!   the old rows and 0.5.20 the new; 0.5.18 and 0.5.19 were not read); under
//!   60 GB 32 / 160; under 160 GB 256 / 512; 512 above. Before 0.5.3 (0.4.8 .. 0.5.2) it was 160,
//!   256 above 90 GB and 512 above 160 GB whatever the TP (under 35 GB, 8 below TP4 and 80 from
//!   it); releases before 0.4.8 captured fewer sizes (160 on most GPUs), which the model does not
//!   tell apart. A batch above it runs eagerly (`CudaGraphRunner.can_run` is false).
//! - sglang keeps a hybrid model's linear-attention state in a pool of its own, whose states cap
//!   the running requests over any other cap ([`StatePoolRelease`], by release and mixer).
//! - TensorRT-LLM's `max_batch_size` defaults to 2048 (LLM API and `trtllm-serve`). Its CUDA-graph
//!   batch sizes (up to 128, no padding by default) are not modelled: the rule for a batch
//!   outside the captured list comes from its docs, not its code.

use serde::Serialize;

use super::Scenario;
use crate::hw::{Arch, GpuSpec};
use crate::spec::LinearMixer;

/// Bytes in a mebibyte: the engines compare the device's memory in MiB or GiB.
const MIB: f64 = 1024.0 * 1024.0;

/// The release family whose default batch limits apply ([`super::EngineRelease::batch_defaults`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchDefaults {
    /// No default limit: only the KV cache bounds the batch, and every decode batch replays a graph.
    Unlimited,
    /// sglang before 0.5.3: `cuda_graph_max_bs` by memory alone.
    SglangBeforeTable {
        /// 0.4.8 and later: the prefill chunk by three memory classes (before, 8192 from 25,000
        /// MiB, [`BatchDefaults::step_tokens`]).
        since_0_4_8: bool,
    },
    /// sglang from 0.5.3: the table by memory and TP, whose smallest-GPU rows `minor` (the
    /// release's 0.5.x number) picks.
    SglangTable {
        /// The 0.5.x minor release (3 .. 23 and up).
        minor: u32,
    },
    /// vLLM's V0 engine (before 0.8.0): 256 running, graphs up to 256.
    VllmV0,
    /// vLLM's V1 engine.
    VllmV1 {
        /// 0.8.5 and later: the 1024 cap and the 8192-token step only on GPUs with at least 70
        /// GiB (before, the step's 8192 tokens only on an H100 or H200, by name).
        by_memory: bool,
        /// 0.9.0 and later: not on an A100 either.
        not_a100: bool,
        /// 0.28.0 and later: graphs up to 1024 on data-centre Blackwell, and 16384 tokens a step
        /// on GPUs with at least 160 GiB.
        blackwell_1024: bool,
    },
    /// TensorRT-LLM: `max_batch_size` 2048; graphs not modelled.
    Trtllm,
}

impl BatchDefaults {
    /// Requests one scheduler runs at once by default, given its KV tokens and the model's
    /// context length (None: no default cap).
    pub fn running_cap(self, gpu: &GpuSpec, kv_tokens: f64, context_len: u32) -> Option<u32> {
        match self {
            BatchDefaults::Unlimited => None,
            BatchDefaults::SglangBeforeTable { .. } | BatchDefaults::SglangTable { .. } => {
                let slots = (kv_tokens / f64::from(context_len.max(1)) * 512.0).clamp(2048.0, 4096.0);
                Some(slots.min((kv_tokens / 2.0).floor()).max(1.0) as u32)
            }
            BatchDefaults::VllmV0 => Some(256),
            BatchDefaults::VllmV1 { by_memory, not_a100, .. } => {
                let big = gpu.memory_gb * 1e9 / (1024.0 * MIB) >= 70.0;
                let a100 = gpu.name.starts_with("a100");
                Some(if !by_memory || (big && !(not_a100 && a100)) { 1024 } else { 256 })
            }
            BatchDefaults::Trtllm => Some(2048),
        }
    }

    /// The tokens one replica's step takes at most by default, on `gpu`: sglang's
    /// `--chunked-prefill-size` (the prompt tokens of one prefill pass; under DP attention each
    /// rank takes its share of it), vLLM's `max_num_batched_tokens` (decode tokens and prompt
    /// chunks together, per data-parallel rank) and TensorRT-LLM's `max_num_tokens` (8192, its LLM
    /// API default). vLLM V1's under `vllm serve` (`EngineArgs._set_default_args_v1`, later
    /// `get_batch_defaults`): 8192 on the GPUs its 1024 running cap applies to (above), 2048 on
    /// the others, and from 0.28.0 16384 on GPUs with at least 160 GiB. vLLM V0 ran without
    /// chunked prefill unless the context is over 32,768 tokens; it keeps 8192 here (not
    /// modelled).
    /// sglang's, by GPU memory (`_handle_gpu_memory_settings`): 0.4.8 .. 0.5.2 2048 under 35 GiB,
    /// 8192 under 160 GiB and 16384 above; from 0.5.3 2048 under 35 GiB (4096 from 0.5.20),
    /// 4096 under 60 GiB, 8192 under 160 GiB and 16384 above; before 0.4.8, 2048 under 25,000 MiB
    /// and 8192 above (0.4.7's 16384 over 180,000 MiB is not told apart).
    pub fn step_tokens(self, gpu: &GpuSpec) -> u32 {
        let gib = gpu.memory_gb * 1e9 / MIB / 1024.0;
        match self {
            BatchDefaults::SglangBeforeTable { since_0_4_8: false } => {
                if gpu.memory_gb * 1e9 / MIB < 25_000.0 {
                    2048
                } else {
                    8192
                }
            }
            BatchDefaults::SglangBeforeTable { since_0_4_8: true } => match gib {
                g if g < 35.0 => 2048,
                g if g < 160.0 => 8192,
                _ => 16384,
            },
            BatchDefaults::SglangTable { minor } => match gib {
                g if g < 20.0 => 2048,
                g if g < 35.0 => {
                    if minor >= 20 {
                        4096
                    } else {
                        2048
                    }
                }
                g if g < 60.0 => 4096,
                g if g < 160.0 => 8192,
                _ => 16384,
            },
            BatchDefaults::VllmV1 { by_memory, not_a100, blackwell_1024 } => {
                let name = gpu.name.as_str();
                let big = if by_memory {
                    gib >= 70.0 && !(not_a100 && name.starts_with("a100"))
                } else {
                    name.contains("h100") || name.contains("h200")
                };
                match (blackwell_1024 && gib >= 160.0, big) {
                    (true, _) => 16384,
                    (false, true) => 8192,
                    (false, false) => 2048,
                }
            }
            BatchDefaults::VllmV0 | BatchDefaults::Trtllm | BatchDefaults::Unlimited => 8192,
        }
    }

    /// The largest decode batch one scheduler replays as a CUDA graph by default, on `gpu` with
    /// TP size `tp` (None: no limit modelled).
    pub fn graph_max_batch(self, gpu: &GpuSpec, tp: u32) -> Option<u32> {
        let mib = gpu.memory_gb * 1e9 / MIB;
        let small_tp = tp < 4;
        match self {
            BatchDefaults::Unlimited | BatchDefaults::Trtllm => None,
            BatchDefaults::SglangBeforeTable { .. } => Some(match (mib, small_tp) {
                (m, true) if m < 35.0 * 1024.0 => 8,
                (m, false) if m < 35.0 * 1024.0 => 80,
                (m, _) if m > 160.0 * 1000.0 => 512,
                (m, _) if m > 90.0 * 1024.0 => 256,
                _ => 160,
            }),
            BatchDefaults::SglangTable { minor } => Some(match (mib / 1024.0, small_tp) {
                (g, _) if g < 20.0 => 8,
                (g, true) if g < 35.0 => match minor {
                    m if m >= 20 => 48,
                    m if m >= 5 => 24,
                    _ => 16,
                },
                (g, false) if g < 35.0 => {
                    if minor >= 20 {
                        160
                    } else {
                        80
                    }
                }
                (g, true) if g < 60.0 => 32,
                (g, false) if g < 60.0 => 160,
                (g, true) if g < 160.0 => 256,
                _ => 512,
            }),
            BatchDefaults::VllmV0 => Some(256),
            BatchDefaults::VllmV1 { blackwell_1024, .. } => Some(if blackwell_1024 && gpu.arch == Arch::Blackwell { 1024 } else { 512 }),
        }
    }
}

/// How sglang keeps a hybrid model's linear-attention state (Gated DeltaNet, Mamba-2, KDA): in a
/// pool of its own beside the KV pool, whose size caps the requests that run at once. vLLM keeps
/// the state in its KV blocks (one shared pool, no such cap), and TensorRT-LLM is not modelled
/// here: both have none.
///
/// sglang's model runner (`handle_max_mamba_cache` and `init_memory`, in
/// python/sglang/srt/model_executor/model_runner.py, later model_runner_kv_cache_mixin.py and
/// mem_cache/kv_cache_configurator.py) sizes the pool in whole requests' states and holds the
/// running requests to its slots over the slots each keeps: the running one, plus two the radix
/// cache saves states in (`MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO`, 3), plus two more where
/// the "extra buffer" tracks states for the cache; the cap applies over a stated
/// `--max-running-requests` too. How, by release, with no memory flag given (the released wheels
/// read one by one; docs/plan.md "Engine batch limits"):
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatePoolRelease {
    /// 0.5.2 .. 0.5.3: 512 states, radix cache off, so 512 running at most.
    Fixed512,
    /// 0.5.4 .. 0.5.6: the memory left splits at `--mamba-full-memory-ratio` (state over KV,
    /// 0.9) and a running request keeps 3 states, for Gated DeltaNet; Mamba-2 and KDA models run
    /// without the radix cache on 512 states.
    Split054,
    /// 0.5.7: the split for Gated DeltaNet and Mamba-2, whose radix cache is on, at 5 states per
    /// running request (an if/else that 0.5.8 fixed); KDA on 512 states.
    Split057,
    /// 0.5.8: as 0.5.7 at 3 states per running request.
    Split058,
    /// 0.5.9 .. 0.5.13: the split for every hybrid model (512 is gone); KDA without the radix
    /// cache keeps 1 state per running request, the others 3.
    Split059,
    /// 0.5.14 .. 0.5.22: the radix cache's "auto" strategy resolves to the extra buffer for
    /// Gated DeltaNet and Mamba-2 (5 states per running request); KDA keeps 3.
    Split0514,
    /// 0.5.23: KDA takes the extra buffer too (5).
    Split0523,
    /// A release from 0.5.9 on run with `--disable-radix-cache` (the fix `plan --rank` prices):
    /// the split, and 1 state per running request (a stated cap sizes the pool instead:
    /// [`Scenario::state_pool`]); `every_stage` is the release's own stage sizing
    /// ([`Self::sizes_by_every_stage`]).
    RadixCacheOff {
        /// Whether the release sizes the pool by every stage's layers.
        every_stage: bool,
    },
}

/// What a release's state pool is for a model's linear mixer ([`StatePoolRelease::pool`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StatePool {
    /// States the pool holds: a fixed count, or what its share of the memory holds.
    pub slots: StateSlots,
    /// States each running request keeps, in the running cap.
    pub per_running: u32,
}

/// How sglang sizes the state pool ([`StatePool::slots`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StateSlots {
    /// A fixed number of states (512 in the releases before the split).
    Fixed(u32),
    /// State memory over KV memory of what is left after the weights (`--mamba-full-memory-ratio`).
    Share(f64),
}

/// sglang's `--mamba-full-memory-ratio` default from 0.5.4 on (sglang PR 11679 raised it from 0.2
/// to 0.9 before the release).
pub const SGLANG_STATE_TO_KV: f64 = 0.9;

impl StatePoolRelease {
    /// Whether the release sizes the pool by the whole model's state per request under pipeline
    /// parallelism: 0.5.10's sizing counts every linear layer of the model, 0.5.23's only the
    /// stage's (`_pp_local_per_request_bytes`); the releases between take 0.5.10's rule (when it
    /// changed was not pinned down).
    pub fn sizes_by_every_stage(self) -> bool {
        match self {
            StatePoolRelease::Split0523 => false,
            StatePoolRelease::RadixCacheOff { every_stage } => every_stage,
            _ => true,
        }
    }

    /// The same release run with `--disable-radix-cache`, where the model knows that rule: from
    /// 0.5.9, whose pool a cache that is off still splits from the memory (before it, such a
    /// pool held 512 states, which the fix would not change for the mixers that had the cache).
    pub fn radix_cache_off(self) -> Option<StatePoolRelease> {
        match self {
            StatePoolRelease::Split059 | StatePoolRelease::Split0514 | StatePoolRelease::Split0523 => {
                Some(StatePoolRelease::RadixCacheOff { every_stage: self.sizes_by_every_stage() })
            }
            _ => None,
        }
    }

    /// The pool this release keeps for a model whose linear layers are `mixer`.
    pub fn pool(self, mixer: LinearMixer) -> StatePool {
        use StatePoolRelease::*;
        let kda = mixer == LinearMixer::Kda;
        let gdn = mixer == LinearMixer::GatedDeltaNet;
        let fixed = StatePool { slots: StateSlots::Fixed(512), per_running: 1 };
        let split = |per_running| StatePool { slots: StateSlots::Share(SGLANG_STATE_TO_KV), per_running };
        match self {
            Fixed512 => fixed,
            Split054 if gdn => split(3),
            Split054 => fixed,
            Split057 | Split058 if kda => fixed,
            Split057 => split(5),
            Split058 => split(3),
            Split059 => split(if kda { 1 } else { 3 }),
            Split0514 => split(if kda { 3 } else { 5 }),
            Split0523 => split(5),
            RadixCacheOff { .. } => split(1),
        }
    }
}

impl Scenario {
    /// The schedulers that each keep their own batch: one per replica, or one per attention-DP
    /// rank under DP attention (sglang's DP workers, vLLM's engine cores).
    pub fn schedulers(&self) -> u32 {
        self.plan.dp() * if self.plan.dp_attention { self.plan.tp } else { 1 }
    }

    /// The engine's default running cap for the whole deployment: each scheduler's
    /// ([`BatchDefaults::running_cap`], from its share of the KV cache) times the schedulers.
    /// None without one. A stated `--max-running` replaces it ([`Self::max_concurrency`]).
    pub fn default_running_cap(&self) -> Option<u32> {
        let n = self.schedulers().max(1);
        let kv = self.max_kv_tokens() as f64 / f64::from(n);
        let per = self.engine.batch.running_cap(&self.gpu, kv, self.model.max_context)?;
        Some(per.saturating_mul(n))
    }

    /// The tokens one replica's step takes at most by default ([`BatchDefaults::step_tokens`]):
    /// the prefill chunk the virtual run schedules. sglang splits its chunk over the
    /// attention-DP ranks; vLLM gives each data-parallel rank its own budget.
    pub fn step_tokens(&self) -> u32 {
        let per = self.engine.batch.step_tokens(&self.gpu);
        match self.engine.batch {
            BatchDefaults::VllmV1 { .. } if self.plan.dp_attention => per.saturating_mul(self.plan.tp),
            _ => per,
        }
    }

    /// The largest decode batch a scheduler replays as a CUDA graph (None: every batch does): the
    /// engine's default ([`BatchDefaults::graph_max_batch`]); from sglang 0.5.23 no more than a
    /// server's stated running limit (`handle_gpu_memory_settings` lowers its default `max_bs` to
    /// `--max-running-requests`, the server's whole cap even under DP attention; 0.5.20 does not,
    /// 0.5.21 and 0.5.22 not read), which also shrinks its memory reserve. A stated limit is the
    /// deployment's, so each replica's server has its share of it (as `plan --launch` writes);
    /// a limit of 0 is refused before it gets here.
    pub fn graph_max_batch(&self) -> Option<u32> {
        let default = self.engine.batch.graph_max_batch(&self.gpu, self.plan.tp);
        match (self.engine.batch, default, self.max_running) {
            (BatchDefaults::SglangTable { minor }, Some(graphs), Some(stated)) if minor >= 23 => {
                Some(graphs.min(stated.div_ceil(self.plan.dp().max(1))))
            }
            _ => default,
        }
    }

    /// One scheduler's decode batch when a replica runs `b` requests: each pipeline stage runs
    /// micro-batches of b / pp, split over the attention-DP ranks under DP attention.
    pub(super) fn scheduler_batch(&self, b: f64) -> f64 {
        let ranks = if self.plan.dp_attention { f64::from(self.plan.tp) } else { 1.0 };
        b / f64::from(self.plan.pp.max(1)) / ranks
    }

    /// What a decode step of a replica at batch `b` adds when its batch is above the largest
    /// captured CUDA graph ([`Self::graph_max_batch`]): each kernel's launch, as a step that
    /// carries prompt tokens pays it without graphs ([`Self::eager_prefill_ms`]), ms. 0 when the
    /// engine runs without graphs anyway (the per-step overhead already counts the launches).
    pub fn eager_decode_ms(&self, b: f64) -> f64 {
        match self.graph_max_batch() {
            Some(cap) if self.engine.cuda_graphs && self.scheduler_batch(b) > f64::from(cap) => self.launches_ms(),
            _ => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::gpu;
    use crate::predict::tests::scenario;
    use crate::predict::{EngineName, EngineRelease, RunningLimit};
    use crate::quant::Dtype;

    fn release(s: &str) -> BatchDefaults {
        EngineRelease::parse("--engine", s).expect("parses").batch_defaults(None)
    }

    fn with(s: &Scenario, batch: BatchDefaults) -> Scenario {
        let mut s = s.clone();
        s.engine.batch = batch;
        s
    }

    #[test]
    fn vllm_runs_1024_requests_on_70_gib_gpus_but_an_a100_and_256_elsewhere() {
        let v1 = release("vllm");
        let cap = |g: &str| v1.running_cap(&gpu(g).expect("gpu"), 1e6, 131_072);
        assert_eq!(cap("h100-sxm"), Some(1024));
        assert_eq!(cap("h200"), Some(1024));
        assert_eq!(cap("rtx-pro-6000-se"), Some(1024));
        assert_eq!(cap("mi300x"), Some(1024));
        assert_eq!(cap("a100"), Some(256), "0.9.0 keeps the A100 in the small tier");
        assert_eq!(cap("l40s"), Some(256));
        assert_eq!(cap("rtx-5090"), Some(256));
        // 0.8.0 .. 0.8.4 gave every GPU 1024; 0.8.5 .. 0.8.x the A100 too; V0 ran 256.
        assert_eq!(release("vllm@0.8.2").running_cap(&gpu("l40s").expect("gpu"), 1e6, 8192), Some(1024));
        assert_eq!(release("vllm@0.8.5").running_cap(&gpu("a100").expect("gpu"), 1e6, 8192), Some(1024));
        assert_eq!(release("vllm@0.7.3").running_cap(&gpu("h100-sxm").expect("gpu"), 1e6, 8192), Some(256));
    }

    #[test]
    fn sglangs_running_cap_is_its_request_slots_held_to_2048_through_4096() {
        let s = release("sglang");
        let h200 = gpu("h200").expect("gpu");
        // 1M tokens over a 131,072-token context: 3,906 slots.
        assert_eq!(s.running_cap(&h200, 1_000_000.0, 131_072), Some(3906));
        assert_eq!(s.running_cap(&h200, 400_000.0, 131_072), Some(2048), "held up to 2048");
        assert_eq!(s.running_cap(&h200, 1e9, 8192), Some(4096), "held down to 4096");
        assert_eq!(s.running_cap(&h200, 3000.0, 8192), Some(1500), "at most half the KV tokens");
        assert_eq!(release("trtllm").running_cap(&h200, 1e6, 8192), Some(2048));
    }

    #[test]
    fn a_steps_default_token_budget_follows_each_engines_table_by_gpu_and_release() {
        let t = |release_: &str, g: &str| release(release_).step_tokens(&gpu(g).expect("gpu"));
        // sglang's --chunked-prefill-size: 0.4.8 .. 0.5.2 by three classes, then five.
        assert_eq!((t("sglang@0.4.9", "l40s"), t("sglang@0.4.9", "h200"), t("sglang@0.4.9", "b200")), (8192, 8192, 16384));
        // Before 0.4.8: 8192 from 25,000 MiB, whatever the GPU.
        assert_eq!((t("sglang@0.4.3", "rtx-4090"), t("sglang@0.4.3", "rtx-5090"), t("sglang@0.4.3", "mi300x")), (2048, 8192, 8192));
        assert_eq!((t("sglang@0.5.9", "l40s"), t("sglang@0.5.9", "rtx-4090"), t("sglang@0.5.9", "mi300x")), (4096, 2048, 16384));
        assert_eq!((t("sglang@0.5.17", "rtx-5090"), t("sglang@0.5.20", "rtx-5090")), (2048, 4096));
        // vLLM V1's max_num_batched_tokens under `vllm serve`.
        assert_eq!((t("vllm@0.8.2", "h100-sxm"), t("vllm@0.8.2", "mi300x"), t("vllm@0.8.5", "a100")), (8192, 2048, 8192));
        assert_eq!((t("vllm@0.9.2", "a100"), t("vllm@0.9.2", "l40s"), t("vllm@0.9.2", "b200")), (2048, 2048, 8192));
        assert_eq!((t("vllm@0.28.0", "b200"), t("vllm@0.28.0", "h200"), t("vllm@0.28.0", "rtx-5090")), (16384, 8192, 2048));
        assert_eq!(t("trtllm", "h200"), 8192);
    }

    #[test]
    fn sglangs_largest_decode_graph_follows_its_table_by_memory_and_tp() {
        let table = release("sglang");
        let g = |name: &str, tp: u32| table.graph_max_batch(&gpu(name).expect("gpu"), tp);
        assert_eq!((g("h100-sxm", 2), g("h100-sxm", 8)), (Some(256), Some(512)));
        assert_eq!((g("h200", 1), g("h200", 4)), (Some(256), Some(512)));
        assert_eq!((g("b200", 1), g("mi300x", 8)), (Some(512), Some(512)));
        assert_eq!((g("l40s", 2), g("l40s", 4)), (Some(32), Some(160)));
        assert_eq!((g("rtx-5090", 1), g("rtx-5090", 4)), (Some(48), Some(160)), "0.5.20's rows");
        let r = |v: &str| release(v).graph_max_batch(&gpu("rtx-5090").expect("gpu"), 1);
        assert_eq!((r("sglang@0.5.17"), r("sglang@0.5.20")), (Some(24), Some(48)));
        assert_eq!(g("rtx-4090", 1), Some(48));
        let mid = release("sglang@0.5.9");
        assert_eq!(mid.graph_max_batch(&gpu("rtx-5090").expect("gpu"), 1), Some(24));
        assert_eq!(mid.graph_max_batch(&gpu("rtx-5090").expect("gpu"), 8), Some(80));
        // Before the table (0.4.8 .. 0.5.2): by memory alone.
        let old = release("sglang@0.4.9");
        assert_eq!(old, BatchDefaults::SglangBeforeTable { since_0_4_8: true });
        let o = |name: &str| old.graph_max_batch(&gpu(name).expect("gpu"), 8);
        assert_eq!((o("h100-sxm"), o("h200"), o("b200")), (Some(160), Some(256), Some(512)));
        // A measurement that names no release takes its date.
        let undated = EngineRelease::current(EngineName::Sglang);
        assert_eq!(undated.batch_defaults(Some("2025-06-01")), BatchDefaults::SglangBeforeTable { since_0_4_8: false });
        assert_eq!(undated.batch_defaults(Some("2026-03-01")), BatchDefaults::SglangTable { minor: 9 });
    }

    #[test]
    fn vllm_graphs_decode_up_to_512_and_1024_on_data_centre_blackwell_from_0_28() {
        let h100 = gpu("h100-sxm").expect("gpu");
        let b200 = gpu("b200").expect("gpu");
        assert_eq!(release("vllm").graph_max_batch(&h100, 8), Some(512));
        assert_eq!(release("vllm").graph_max_batch(&b200, 8), Some(1024));
        assert_eq!(release("vllm@0.25.0").graph_max_batch(&b200, 8), Some(512));
        assert_eq!(release("vllm@0.7.3").graph_max_batch(&h100, 8), Some(256));
        assert_eq!(release("trtllm").graph_max_batch(&h100, 8), None, "not modelled");
    }

    #[test]
    fn a_decode_batch_above_the_largest_graph_pays_each_kernels_launch_once() {
        let s = scenario("llama-3.1-70b", Dtype::Fp8, "h100-sxm", "nvlink", 8, 8);
        assert_eq!(s.graph_max_batch(), Some(512));
        let launches = s.engine.launch_us * s.kernels_per_step() / 1e3;
        assert!(launches > 0.5, "{launches}");
        let ctx = s.mean_context();
        let unlimited = with(&s, BatchDefaults::Unlimited);
        let extra = |b: f64| s.decode_step_ms(b, ctx) - unlimited.decode_step_ms(b, ctx);
        assert_eq!(extra(512.0), 0.0, "the largest graph itself replays");
        for b in [513.0, 600.0, 1024.0] {
            assert!((extra(b) - launches).abs() < 1e-9, "batch {b}: {} ms more, launches {launches} ms", extra(b));
        }
        // No graphs at all: the launches are in the per-step overhead already, not twice.
        let mut eager = s.clone();
        eager.engine.cuda_graphs = false;
        assert_eq!(eager.eager_decode_ms(600.0), 0.0);
        // Under DP attention each rank's batch is what the graph covers.
        let mut dpa = s.clone();
        dpa.plan.dp_attention = true;
        assert_eq!(dpa.eager_decode_ms(600.0), 0.0);
        assert!(dpa.eager_decode_ms(8.0 * 513.0) > 0.0);
    }

    #[test]
    fn sglang_0_5_23_holds_its_decode_graphs_and_their_reserve_to_a_stated_running_limit() {
        let mut s = scenario("llama-3.1-70b", Dtype::Fp8, "h100-sxm", "nvlink", 8, 8);
        let open = s.mem_fraction_flag();
        s.max_running = Some(64);
        assert_eq!(s.graph_max_batch(), Some(64));
        // An H100 at TP8 reserves 2 MiB per graph request: 448 fewer requests, 896 MiB less of
        // its 15312, so 0.823 of 81559 MiB where it took 0.812.
        assert_eq!((open, s.mem_fraction_flag()), (0.812, 0.823));
        // A stated limit above the default changes nothing; 0.5.20 keeps its default.
        s.max_running = Some(2048);
        assert_eq!(s.graph_max_batch(), Some(512));
        s.max_running = Some(64);
        s.engine.batch = BatchDefaults::SglangTable { minor: 20 };
        assert_eq!(s.graph_max_batch(), Some(512));
        // Two replicas of TP4: each server states half the deployment's cap.
        let mut two = scenario("llama-3.1-70b", Dtype::Fp8, "h100-sxm", "nvlink", 8, 4);
        two.max_running = Some(128);
        assert_eq!(two.graph_max_batch(), Some(64));
        // DP attention over 8 ranks: the server's cap against each rank's graphs, whole. DeepSeek-V3
        // on an H200 with 256 stated reserves 2 x 256 + 256 x 8 x 3 MiB for its decode graphs where
        // it reserved 2 x 512 + 512 x 8 x 4.5: 12,800 MiB less, of 143,771.
        let mut dpa = scenario("deepseek-v3", Dtype::Fp8, "h200", "nvlink", 8, 8);
        dpa.plan.dp_attention = true;
        let open = dpa.mem_fraction_flag();
        dpa.max_running = Some(256);
        assert_eq!(dpa.graph_max_batch(), Some(256));
        let mib = dpa.gpu.memory_gb * 1e9 / (1024.0 * 1024.0);
        assert!((dpa.mem_fraction_flag() - open - 12_800.0 / mib).abs() < 1.5e-3, "{open} -> {}", dpa.mem_fraction_flag());
    }

    #[test]
    fn a_mixed_step_above_the_largest_graph_launches_its_kernels_once() {
        use crate::predict::PrefillPass;
        // Prompt steps run eagerly (sglang before 0.5.10) and ride in the decode steps.
        let mut s = scenario("llama-3.1-70b", Dtype::Fp8, "h100-sxm", "nvlink", 8, 8);
        (s.engine.prefill_graphs, s.engine.mixed_prefill) = (false, true);
        let launches = s.engine.launch_us * s.kernels_per_step() / 1e3;
        assert!(launches > 0.5 && s.eager_prefill_ms() == launches);
        // Under the largest graph the prompt tokens make the step eager: one set of launches.
        assert_eq!(s.eager_prefill_ms_in(PrefillPass::Beside(64.0)), launches);
        // Above it the decode step is eager already: none more.
        assert_eq!(s.eager_prefill_ms_in(PrefillPass::Beside(600.0)), 0.0);
        // A pass of its own launches its own kernels.
        assert_eq!(s.eager_prefill_ms_in(PrefillPass::Standalone), launches);
        // The steady state's step above the graph pays the launches once as well.
        let mut graphed = s.clone();
        graphed.engine.prefill_graphs = true;
        let (at, b) = (s.point(600).step_ms, graphed.point(600).step_ms);
        assert!(s.point(600).running > 512, "the batch is above the largest graph");
        assert!((at.total - b.total).abs() < 1e-9 * b.total, "{} vs {}", at.total, b.total);
    }

    #[test]
    fn the_engines_running_cap_bounds_the_concurrency_per_scheduler_unless_one_is_stated() {
        // gpt-oss-20b on one H200 holds far more requests than vLLM's 1024.
        let base = scenario("gpt-oss-20b", Dtype::Bf16, "h200", "nvlink", 8, 1);
        let vllm = with(&base, release("vllm"));
        assert!(vllm.kv_concurrency() > 8 * 1024, "{}", vllm.kv_concurrency());
        assert_eq!(vllm.schedulers(), 8);
        assert_eq!(vllm.running_limit(), (8 * 1024, RunningLimit::EngineDefault));
        assert_eq!(vllm.point(20_000).running, 8 * 1024);
        // A stated cap replaces the default, even above it.
        let mut stated = vllm.clone();
        stated.max_running = Some(10_000);
        assert_eq!(stated.running_limit(), (10_000, RunningLimit::Stated));
        // Without a default the KV cache bounds it.
        let free = with(&base, BatchDefaults::Unlimited);
        assert_eq!(free.running_limit(), (free.kv_concurrency(), RunningLimit::KvCache));
        // sglang's DP-attention workers each keep their own cap.
        let mut dpa = with(&scenario("deepseek-v3", Dtype::Fp8, "h200", "nvlink", 8, 8), release("sglang"));
        dpa.plan.dp_attention = true;
        assert_eq!(dpa.schedulers(), 8);
        let per = dpa.default_running_cap().expect("sglang has one") / 8;
        assert!((2048..=4096).contains(&per), "{per}");
    }

    #[test]
    fn the_saturation_names_the_limit_that_holds_the_batch() {
        use crate::report::{saturation, saturation_words, SaturationReason};
        let vllm = with(&scenario("gpt-oss-20b", Dtype::Bf16, "h200", "nvlink", 8, 1), release("vllm"));
        let named = |s: &Scenario| {
            let points: Vec<_> = [4096, 8192, 16_384, 32_768].iter().map(|&c| s.point(c)).collect();
            let sat = saturation(s, &points).expect("the batch stops growing");
            match &sat.reason {
                SaturationReason::RunningLimit { limit, .. } => (*limit, saturation_words(&sat.reason)),
                other => panic!("{other:?}"),
            }
        };
        let (limit, words) = named(&vllm);
        assert_eq!(limit, RunningLimit::EngineDefault);
        assert!(words.starts_with("the engine's default running cap") && words.contains("8192 requests"), "{words}");
        let mut stated = vllm.clone();
        stated.max_running = Some(4096);
        let (limit, words) = named(&stated);
        assert_eq!(limit, RunningLimit::Stated);
        assert!(words.contains("(--max-running) allows 4096 requests"), "{words}");
    }
}
