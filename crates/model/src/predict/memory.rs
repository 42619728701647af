//! The memory fit: what one GPU holds, and how many requests run at once.
//!
//! Weights: each stage's share of the layers (the heaviest stage counts), attention, dense FFN and
//! shared experts split over TP, routed experts over TP or EP, the embedding and LM head on the
//! first and last stage, each part in its checkpoint format. KV per token and layer: MLA's latent
//! and rope part (replicated on every TP rank, as sglang and vLLM keep it), or GQA's K and V split
//! by KV head; a DSA indexer adds its fp8 keys and scales in the layers that run it; a sliding
//! layer holds at most its window. A linear-attention layer (Gated DeltaNet, Mamba-2, KDA) holds a
//! fixed state per request instead of KV.
//!
//! [`Memory`] is the GPU's capacity, the engine's usable share, weights, workspace and what is
//! left for the KV cache. From it: the tokens the deployment's cache holds, and the requests that
//! run at once: those whose KV at the mean context of a closed loop (the prompt and half the
//! output: both engines page the cache and grow a request's pages as it decodes) fits, under the
//! running cap. [`Scenario::check_fit`] refuses a plan whose weights do not fit, with the numbers
//! and the fix.

use serde::Serialize;

use super::Scenario;
use crate::quant::KvDtype;
use crate::spec::Attention;
use crate::ModelError;

/// Memory per GPU, GB.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Memory {
    /// The GPU's memory.
    pub capacity_gb: f64,
    /// The share of the GPU's memory the engine takes ([`Scenario::mem_fraction`]).
    pub mem_fraction: f64,
    /// What the engine may use (capacity x mem_fraction).
    pub usable_gb: f64,
    /// Weights on the busiest GPU.
    pub weights_gb: f64,
    /// Activations and workspace.
    pub workspace_gb: f64,
    /// Left for the KV cache.
    pub kv_gb: f64,
    /// Left for the linear-attention state, where the engine keeps it in a pool of its own
    /// ([`super::StatePool`]: sglang's hybrid models); 0 where the state shares the KV cache's
    /// memory or the model has none.
    pub state_gb: f64,
    /// KV bytes per token on one GPU.
    pub kv_bytes_per_token: f64,
}

impl Scenario {
    pub(super) fn layers_per_stage(&self) -> f64 {
        self.model.layers as f64 / self.plan.pp as f64
    }

    /// KV layers of one stage: (full-attention, sliding-window).
    pub(super) fn kv_layers_per_stage(&self) -> (f64, f64) {
        let pp = self.plan.pp as f64;
        let c = self.model.layer_counts;
        (c.full as f64 / pp, c.sliding as f64 / pp)
    }

    /// Token-layers of KV one request holds (and reads) on a stage at context `ctx`: every token in a
    /// full-attention layer, at most the window in a sliding one. Where the full layers have their
    /// own shape (Gemma 4), a full layer's token counts as [`Self::full_layer_kv_weight`] of a
    /// sliding layer's, whose shape the per-token bytes and [`Self::kv_split`] are.
    pub(super) fn kv_token_layers(&self, ctx: f64) -> f64 {
        let (full, sliding) = self.kv_layers_per_stage();
        let window = self.model.sliding_window.map_or(ctx, |w| ctx.min(w as f64));
        full * ctx * self.full_layer_kv_weight() + sliding * window
    }

    /// Token-layers of attention arithmetic per token on a stage at context `ctx`, in units of a
    /// sliding layer's head dimension: as [`Self::kv_token_layers`], a full layer's token weighing
    /// its head dimension over a sliding layer's.
    pub(super) fn attention_token_layers(&self, ctx: f64) -> f64 {
        let (full, sliding) = self.kv_layers_per_stage();
        let window = self.model.sliding_window.map_or(ctx, |w| ctx.min(w as f64));
        full * ctx * self.model.full_head_dim_ratio() + sliding * window
    }

    /// One full-attention layer's KV per token on one GPU over a sliding layer's: each keeps keys
    /// and values of its KV heads at its head dimension, split over up to its KV heads' count of TP
    /// ranks (the rest replicate). 1 unless the full layers have their own shape. Like
    /// [`Self::kv_split`], it splits by the plan's TP even under DP attention (which `--rank`
    /// offers only to MLA models).
    pub(super) fn full_layer_kv_weight(&self) -> f64 {
        match (self.model.global_attention, &self.model.attention) {
            (Some(g), Attention::Gqa { kv_heads, head_dim, .. }) => {
                let full = g.kv_heads as f64 * g.head_dim as f64 / self.plan.tp.min(g.kv_heads) as f64;
                let sliding = *kv_heads as f64 * *head_dim as f64 / self.plan.tp.min(*kv_heads) as f64;
                full / sliding
            }
            _ => 1.0,
        }
    }

    /// TP ranks one request's KV is split over: MLA's latent is replicated on every TP rank (sglang
    /// and vLLM keep it whole per rank); GQA splits by KV head.
    pub(super) fn kv_split(&self) -> f64 {
        match self.model.attention {
            Attention::Mla { .. } => 1.0,
            Attention::Gqa { kv_heads, .. } => (self.plan.tp.min(kv_heads)) as f64,
        }
    }

    /// Linear-attention state one request holds on one GPU (this stage's linear layers; heads split
    /// over TP ranks), bytes. It does not depend on the context.
    pub fn state_bytes_gpu(&self) -> f64 {
        let Some(la) = self.model.linear else { return 0.0 };
        let (recurrent, conv) = la.state_bytes_per_layer(self.engine.serving);
        let layers = self.model.layer_counts.linear as f64 / self.plan.pp as f64;
        (recurrent + conv) * layers / la.tp_split(self.plan.tp)
    }

    /// Bytes one request holds on one GPU at context `ctx`: its KV plus its linear-attention state.
    pub fn request_bytes_gpu(&self, ctx: f64) -> f64 {
        self.kv_token_layers(ctx) * self.kv_bytes_per_token_layer() / self.kv_split() + self.state_bytes_gpu()
    }

    pub(super) fn kv_bytes_per_token_layer(&self) -> f64 {
        let (main, rope, idx) = self.model.kv_elems_per_token_layer();
        let mla = matches!(self.model.attention, Attention::Mla { .. });
        let dsa = self.model.dsa.is_some();
        let share = self.model.indexer_share();
        match (self.quant.kv_cache, mla) {
            // A DSA model's sparse MLA backend (vLLM's FlashMLA Sparse, `fp8_ds_mla`: "custom
            // storage format is 656 bytes", its get_kv_cache_shape) keeps an fp8 latent + one fp32
            // scale per 128 + the bf16 rope part (656 B for GLM-5/DeepSeek-V3.2); indexer keys fp8
            // + fp32 scale per 128. Gives 61.5 KB/token for GLM-5 against the 62 KB a vLLM log of
            // GLM-5 reports.
            // Only layers that run the indexer keep its keys ([`ModelSpec::indexer_share`]).
            (KvDtype::Fp8, true) if dsa => main + main / 128.0 * 4.0 + rope * 2.0 + self.indexer_key_bytes(),
            // Dense MLA backends store the whole latent and rope head in the cache's dtype (the
            // same get_kv_cache_shape's other branch: head_size = 576 elements of one byte).
            (KvDtype::Fp8, true) => main + rope,
            (KvDtype::Fp8, false) => main + idx * share,
            (KvDtype::Bf16, _) => (main + rope + idx * share) * 2.0,
        }
    }

    /// Bytes of DSA indexer keys per token and layer, averaged over the layers: fp8 keys and an
    /// fp32 scale per 128 in each layer that runs the indexer.
    pub(super) fn indexer_key_bytes(&self) -> f64 {
        let idx = self.model.kv_elems_per_token_layer().2;
        (idx + (idx / 128.0).ceil() * 4.0) * self.model.indexer_share()
    }

    /// KV bytes per token held on one GPU (all its KV layers; a sliding layer only up to its window;
    /// a full layer of its own shape weighed as in [`Self::kv_token_layers`]).
    pub fn kv_bytes_per_token_gpu(&self) -> f64 {
        let (full, sliding) = self.kv_layers_per_stage();
        self.kv_bytes_per_token_layer() * (full * self.full_layer_kv_weight() + sliding) / self.kv_split()
    }

    /// Weight bytes on one GPU (the heaviest pipeline stage).
    pub fn weight_bytes_gpu(&self) -> f64 {
        let m = &self.model;
        let p = m.params();
        let q = &self.quant;
        let tp = self.plan.tp as f64;
        let stage = 1.0 / self.plan.pp as f64;
        let attn_split = if self.plan.dp_attention { 1.0 } else { tp };
        let experts = p.routed_experts * q.experts.bytes() / tp;
        let body = p.attention * q.attention.bytes() / attn_split
            + p.dense_ffn * q.dense_ffn.bytes() / tp
            + (p.shared_experts + p.router) * q.shared_experts.bytes() / tp
            + p.latent_projections * q.shared_experts.bytes()
            + experts
            + p.norms * 2.0;
        body * stage + (p.embeddings + p.lm_head) * q.embeddings.bytes() / tp
    }

    /// Memory per GPU and the KV capacity it leaves.
    pub fn memory(&self) -> Memory {
        let cap = self.gpu.memory_gb;
        let mem_fraction = self.mem_fraction();
        let usable = cap * mem_fraction;
        let weights = self.weight_bytes_gpu() / 1e9;
        let rest = (usable - weights - self.engine.workspace_gb).max(0.0);
        // sglang splits what is left between its state pool and its KV pool at a fixed ratio, or
        // takes a fixed number of states from it first.
        let state = match self.state_pool().map(|p| p.slots) {
            Some(super::StateSlots::Share(r)) => rest * r / (1.0 + r),
            Some(super::StateSlots::Fixed(n)) => (self.fixed_slots_per_scheduler(n) * self.state_slot_bytes() / 1e9).min(rest),
            None => 0.0,
        };
        Memory {
            capacity_gb: cap,
            mem_fraction,
            usable_gb: usable,
            weights_gb: weights,
            workspace_gb: self.engine.workspace_gb,
            kv_gb: rest - state,
            state_gb: state,
            kv_bytes_per_token: self.kv_bytes_per_token_gpu(),
        }
    }

    /// The engine's own pool for the linear-attention state ([`super::Engine::state_pool`]: sglang's),
    /// where the model has linear-attention layers. Where the radix cache is off (a running
    /// request keeps 1 state) and the running cap is stated, sglang sizes the pool at that cap
    /// instead (`handle_max_mamba_cache`).
    pub fn state_pool(&self) -> Option<super::StatePool> {
        if self.engine.serving != super::EngineName::Sglang {
            return None;
        }
        let la = self.model.linear.filter(|_| self.model.layer_counts.linear > 0 && self.state_bytes_gpu() > 0.0)?;
        let pool = self.engine.state_pool?.pool(la.mixer);
        match (pool.per_running, self.max_running) {
            (1, Some(m)) => Some(super::StatePool { slots: super::StateSlots::Fixed(m.div_ceil(self.plan.dp().max(1))), ..pool }),
            _ => Some(pool),
        }
    }

    /// The bytes one request's state takes in the pool of one GPU, as sglang sizes it: its share
    /// of the state over TP ([`Self::state_bytes_gpu`]), whole under DP attention (each rank
    /// keeps its own requests' states, with the linear layers unsplit), and every stage's layers
    /// where the release sized the pool by the whole model's state per request
    /// ([`super::StatePoolRelease::sizes_by_every_stage`]).
    pub fn state_slot_bytes(&self) -> f64 {
        let whole_on_rank = match self.model.linear {
            Some(la) if self.plan.dp_attention => la.tp_split(self.plan.tp),
            _ => 1.0,
        };
        let stages = match self.engine.state_pool {
            Some(era) if era.sizes_by_every_stage() => self.plan.pp.max(1) as f64,
            _ => 1.0,
        };
        self.state_bytes_gpu() * whole_on_rank * stages
    }

    /// A fixed count of states for one sglang server (replica) on one scheduler: DP attention
    /// divides it over its ranks (`max_mamba_cache_size // dp_size`).
    fn fixed_slots_per_scheduler(&self, n: u32) -> f64 {
        let ranks = if self.plan.dp_attention { self.plan.tp.max(1) } else { 1 };
        f64::from(n / ranks)
    }

    /// Requests' states one scheduler's state pool holds (None without a pool of its own).
    pub fn state_slots(&self) -> Option<u64> {
        self.state_pool()?;
        Some((self.memory().state_gb * 1e9 / self.state_slot_bytes() + 1e-9) as u64)
    }

    /// The running cap the state pool sets for the whole deployment: each scheduler runs at most
    /// its pool's states over the states a running request keeps ([`super::StatePool::per_running`]).
    pub fn state_running_cap(&self) -> Option<u32> {
        Some(self.state_cap_of(self.state_pool()?, self.state_slots()?))
    }

    /// [`Self::state_running_cap`] from the pool and its states per scheduler, already known.
    fn state_cap_of(&self, pool: super::StatePool, slots: u64) -> u32 {
        let per = slots / u64::from(pool.per_running.max(1));
        per.saturating_mul(u64::from(self.schedulers().max(1))).min(u64::from(u32::MAX)) as u32
    }

    /// Tokens the whole deployment's KV cache holds.
    pub fn max_kv_tokens(&self) -> u64 {
        let m = self.memory();
        let per_pool = if m.kv_bytes_per_token > 0.0 { m.kv_gb * 1e9 / m.kv_bytes_per_token } else { 0.0 };
        // With DP attention each TP rank keeps its own requests' KV.
        let pools = self.plan.dp() as f64 * if self.plan.dp_attention { self.plan.tp as f64 } else { 1.0 };
        (per_pool * pools) as u64
    }

    /// The context a running request holds on average in a closed loop: its prompt and half its
    /// output. Both engines page the KV cache and grow each request's pages as it decodes (vLLM
    /// allocates blocks on demand and preempts on a full cache; sglang admits against an
    /// estimated output reservation and retracts when it runs out), so the requests at different
    /// stages of their output share the cache, not each at its full length.
    pub fn mean_context(&self) -> f64 {
        self.input_len as f64 + self.output_len as f64 / 2.0
    }

    /// Requests whose KV at `ctx` tokens each fits in the cache (before any running cap).
    pub(super) fn requests_at(&self, ctx: f64) -> u64 {
        let c = self.model.layer_counts;
        let ctx = ctx.max(1.0);
        if c.sliding == 0 && c.linear == 0 {
            return (self.max_kv_tokens() as f64 / ctx) as u64;
        }
        // Sliding layers hold at most their window, linear layers a fixed state: count bytes per request.
        let pools = self.plan.dp() as f64 * if self.plan.dp_attention { self.plan.tp as f64 } else { 1.0 };
        if let Some(slots) = self.state_slots() {
            // The state in a pool of its own: the KV pool and the state pool each bound the requests.
            let kv = self.kv_token_layers(ctx) * self.kv_bytes_per_token_layer() / self.kv_split();
            let by_kv = if kv > 0.0 { self.memory().kv_gb * 1e9 / kv } else { f64::INFINITY };
            return (by_kv.min(slots as f64) * pools) as u64;
        }
        let per_request = self.request_bytes_gpu(ctx);
        if per_request > 0.0 {
            (self.memory().kv_gb * 1e9 / per_request * pools) as u64
        } else {
            0
        }
    }

    /// Requests whose KV at the mean context ([`Self::mean_context`]) fits, before any running cap.
    pub fn kv_concurrency(&self) -> u32 {
        self.requests_at(self.mean_context()).min(u32::MAX as u64) as u32
    }

    /// Requests that run at once: those whose KV at the mean context fits
    /// ([`Self::kv_concurrency`]), under the running cap: the stated one (`--max-running`), else
    /// the engine's default ([`Self::default_running_cap`]). [`Self::running_limit`] says which binds.
    pub fn max_concurrency(&self) -> u32 {
        self.running_limit().0
    }

    /// [`Self::max_concurrency`] and what sets it.
    pub fn running_limit(&self) -> (u32, RunningLimit) {
        let kv = self.kv_concurrency();
        let state = self.state_pool().zip(self.state_slots());
        // The requests that fit may be bound by the state pool's slots rather than the KV pool.
        let fits_by = match state {
            Some((_, slots)) if slots.saturating_mul(u64::from(self.schedulers().max(1))) <= u64::from(kv) => RunningLimit::StatePool,
            _ => RunningLimit::KvCache,
        };
        let capped = match (self.max_running, self.default_running_cap()) {
            (Some(m), _) if m < kv => (m, RunningLimit::Stated),
            (None, Some(m)) if m < kv => (m, RunningLimit::EngineDefault),
            _ => (kv, fits_by),
        };
        // sglang holds a hybrid model's running requests to its state pool's share, whatever the
        // stated cap (`ModelRunner.init_memory`).
        match state.map(|(pool, slots)| self.state_cap_of(pool, slots)) {
            Some(m) if m < capped.0 => (m, RunningLimit::StatePool),
            _ => capped,
        }
    }

    /// Whether one request at its full context (input + output) fits in the KV cache.
    pub fn one_request_fits(&self) -> bool {
        self.requests_at((self.input_len + self.output_len) as f64) >= 1
    }

    /// Refuses a plan whose weights do not fit, with the numbers.
    pub fn check_fit(&self) -> Result<(), ModelError> {
        let m = self.memory();
        let refuse = |why: String| {
            Err(ModelError::DoesNotFit(format!(
                "{} on {} x {} with {}: {why}",
                self.model.name,
                self.plan.gpus,
                self.gpu.name,
                self.plan.label()
            )))
        };
        let weights_fit = m.weights_gb + m.workspace_gb < m.usable_gb;
        if let Some(pool) = self.state_pool() {
            if let super::StateSlots::Fixed(n) = pool.slots {
                let need = self.fixed_slots_per_scheduler(n) * self.state_slot_bytes() / 1e9;
                // What is left after the weights: the KV pool and the state pool together.
                let rest = m.kv_gb + m.state_gb;
                if need >= rest {
                    return refuse(format!(
                        "the engine's {n} linear-attention states per server need {need:.1} GB on each GPU, and only {rest:.1} GB is left after {:.1} GB of weights and {:.1} GB of workspace (mem fraction {:.3}); give more GPUs, or a smaller --max-running",
                        m.weights_gb, m.workspace_gb, m.mem_fraction
                    ));
                }
            }
            let slots = self.state_slots().unwrap_or(0);
            if weights_fit && self.state_cap_of(pool, slots) == 0 {
                return refuse(format!(
                    "the engine's linear-attention state pool ({:.1} GB on each GPU) holds {slots} states of {:.1} MB, fewer than the {} one running request keeps; give more GPUs or a larger mem fraction",
                    m.state_gb,
                    self.state_slot_bytes() / 1e6,
                    pool.per_running
                ));
            }
        }
        if !weights_fit || !self.one_request_fits() || self.max_concurrency() == 0 {
            return refuse(format!(
                "{:.1} GB of weights + {:.1} GB workspace per GPU, but only {:.1} GB of {:.1} GB is usable (mem fraction {:.3}); no room for the KV of one {}-token request",
                m.weights_gb,
                m.workspace_gb,
                m.usable_gb,
                m.capacity_gb,
                m.mem_fraction,
                self.input_len + self.output_len
            ));
        }
        Ok(())
    }
}

/// What bounds the requests a deployment runs at once ([`Scenario::running_limit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunningLimit {
    /// The KV cache: no more requests' KV fits at the mean context.
    KvCache,
    /// The running cap the user stated (`--max-running`).
    Stated,
    /// The engine's default running cap ([`super::BatchDefaults::running_cap`]).
    EngineDefault,
    /// The engine's linear-attention state pool: its slots over the slots each running request
    /// keeps ([`Scenario::state_running_cap`]).
    StatePool,
}

impl RunningLimit {
    /// "the KV cache holds", "the stated running cap (--max-running) allows", ...
    pub fn words(self) -> &'static str {
        match self {
            RunningLimit::KvCache => "the KV cache holds",
            RunningLimit::Stated => "the stated running cap (--max-running) allows",
            RunningLimit::EngineDefault => "the engine's default running cap (docs/plan.md, engine batch limits) allows",
            RunningLimit::StatePool => "the engine's linear-attention state pool (docs/plan.md, engine batch limits) allows",
        }
    }
}
