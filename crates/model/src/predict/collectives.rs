//! Communication: the collectives of one step, and where a plan crosses the network.
//!
//! Under TP every layer all-reduces twice; the cost of one is [`Scenario::tp_allreduce`]: the
//! engine's custom all-reduce (one-shot or two-shot) where it runs one, with the measured latency
//! rows of an NVLink box where the engine has them, else NCCL's cheapest algorithm and protocol
//! ([`crate::comm`]) over the link, or hierarchically over the nodes and the network when the TP
//! group spans nodes. A q/k norm over all heads (MiniMax-M2) adds an all-reduce of its sums of
//! squares in each full-attention layer; one over the whole projections (OLMo 2/3, OLMoE) an
//! all-gather of q and one of k in each attention layer ([`Scenario::qk_gather_us`]). Once per
//! forward pass the vocab-parallel embedding all-reduces its output and the vocab-parallel LM head
//! all-gathers the step's logits ([`Scenario::logits_gather_us`]). With DP
//! attention a MoE layer's dispatch and combine replace the all-reduces; pipeline stages send the
//! activations to the next stage, over the network when the next stage is on another node. [`Comm`] is one stage step's total (the
//! calibrated communication scale applied) and its parts.
//!
//! For a multi-node deployment [`Across`] says which collectives cross the network, and
//! [`Scenario::check_placement`] refuses a plan whose ranks cannot be placed on the nodes.

use serde::Serialize;

use super::Scenario;
use crate::comm;
use crate::hw::{LinkKind, LinkProfile};
use crate::ModelError;

/// Bytes per token of a q/k norm's all-reduce over the TP ranks ([`ModelSpec::qk_norm_across_heads`]):
/// the q and the k sum of squares, one fp32 each.
pub(super) const QK_NORM_BYTES_PER_TOKEN: f64 = 2.0 * 4.0;

/// Which collectives of a multi-node plan cross the network.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Across {
    /// The network's name.
    pub net: String,
    /// Nodes one TP group spans (1: TP stays within a node).
    pub tp_nodes: u32,
    /// Pipeline stages send to a stage on another node.
    pub pp: bool,
}

/// Collectives of one stage step.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Comm {
    /// Time, ms (comm_scale applied).
    pub(super) ms: f64,
    /// The part of `ms` that is the box's measured all-reduce (`--allreduce`), which an early
    /// release's step scale leaves alone: it is the box's own figure, not the model's.
    pub(super) measured_ms: f64,
    /// All-reduces per stage step.
    pub(super) allreduces: f64,
    /// One all-reduce, us.
    pub(super) allreduce_us: f64,
    /// The q/k norm's all-reduces per stage step, and one of them, us.
    pub(super) qk_norm_allreduces: f64,
    pub(super) qk_norm_allreduce_us: f64,
    /// The q and k all-gathers per stage step ([`Scenario::qk_gather_us`]), and their time, us.
    pub(super) qk_gathers: f64,
    pub(super) qk_gather_us: f64,
    /// The LM head's all-gather of the logits, us per stage step (one per forward pass, over the
    /// stages: [`Scenario::logits_gather_us`] / PP).
    pub(super) logits_gather_us: f64,
}

/// The q and k all-gathers of a step and their time ([`Bottleneck::Communication`](super::Bottleneck::Communication)).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct QkGathers {
    /// All-gathers per step (all stages).
    pub count: f64,
    /// All of them, us.
    pub us: f64,
}

/// A q/k norm's all-reduces per step and the cost of one ([`Bottleneck::Communication`](super::Bottleneck::Communication)).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct QkNormAllReduces {
    /// All-reduces per step (all stages).
    pub count: f64,
    /// One all-reduce, us.
    pub us: f64,
}

impl Scenario {
    /// Collectives per stage step for a micro-batch of `x`.
    pub(super) fn communication(&self, x: f64) -> Comm {
        let m = &self.model;
        let tp = self.plan.tp as f64;
        let ls = self.layers_per_stage();
        let act = x * m.hidden as f64 * 2.0;
        let mut c = Comm::default();
        let mut us = 0.0;
        if self.plan.dp_attention {
            // Attention is local; MoE layers dispatch and combine tokens over EP (or TP) ranks; dense layers all-reduce.
            let n = self.plan.ep.max(self.plan.tp);
            let k = m.moe.map_or(1.0, |mo| mo.top_k as f64);
            let bytes = act / tp * k;
            let a2a = self.across(n).map_or_else(|| self.link.alltoall_us(n, bytes), |h| comm::alltoall_across_us(&h, bytes));
            us += 2.0 * a2a * self.frac_moe() * ls;
            c.allreduces = 2.0 * self.frac_dense() * ls;
        } else if self.plan.tp > 1 {
            // Each token mixer's and each FFN's output (two per layer of attention then FFN), and
            // the vocab-parallel embedding's output once per pass (on the first stage: spread over
            // the stages, as the LM head's weight read is).
            let embedding = if self.embedding_allreduce() { 1.0 / self.plan.pp as f64 } else { 0.0 };
            c.allreduces = m.tp_reductions() as f64 / m.layers as f64 * ls + embedding;
        }
        let mut measured_us = 0.0;
        let is_measured = |a: &comm::AllReduce| matches!(a.method, comm::Method::Measured { .. });
        if c.allreduces > 0.0 {
            let a = self.tp_allreduce(act);
            c.allreduce_us = a.us;
            us += c.allreduces * a.us;
            if is_measured(&a) {
                measured_us += c.allreduces * a.us;
            }
        }
        if self.qk_norm_allreduce() {
            // In every full-attention layer.
            c.qk_norm_allreduces = m.layer_counts.full as f64 / self.plan.pp as f64;
            let a = self.tp_allreduce(x * QK_NORM_BYTES_PER_TOKEN);
            c.qk_norm_allreduce_us = a.us;
            us += c.qk_norm_allreduces * a.us;
            if is_measured(&a) {
                measured_us += c.qk_norm_allreduces * a.us;
            }
        }
        if self.qk_norm_gather() {
            c.qk_gathers = 2.0 * m.kv_layers() as f64 / self.plan.pp as f64;
            c.qk_gather_us = self.qk_gather_us(x);
            us += c.qk_gather_us;
        }
        if self.logits_gathered() {
            c.logits_gather_us = self.logits_gather_us(x) / self.plan.pp as f64;
            us += c.logits_gather_us;
        }
        if self.plan.pp > 1 {
            us += self.pp_send_us(act);
        }
        c.ms = us * 1e-3 * self.engine.comm_scale;
        c.measured_ms = measured_us * 1e-3 * self.engine.comm_scale;
        c
    }

    /// A group of `n` consecutive ranks laid over the nodes, when it spans more than one.
    pub(super) fn across(&self, n: u32) -> Option<comm::Hierarchy<'_>> {
        let c = self.cluster.as_ref()?;
        let nodes = c.span(n);
        (nodes > 1).then(|| comm::Hierarchy {
            intra: &self.link,
            net: &c.net,
            nodes,
            per_node: n / nodes,
            net_gbs_per_gpu: c.net_gbs_per_gpu(),
        })
    }

    /// One TP all-reduce of `bytes` as the engine runs it: within a node ([`comm::allreduce`]) or,
    /// when the TP group spans nodes, NCCL's hierarchical one ([`comm::allreduce_across`]).
    ///
    /// Where the engine runs its custom kernel under CUDA graphs on the GPU's own NVLink and
    /// comm.toml measured that kernel for this GPU, engine and group size
    /// ([`comm::custom_measured_us`]), the measured latency replaces the one-shot / two-shot
    /// model, net of the per-kernel floor the step already counts for every collective
    /// ([`Engine::gemm_floor_us`](super::Engine::gemm_floor_us), as for the GEMM tables). The model is 1.3-2.2x below those
    /// measurements from 128 KiB to 2 MiB (8x H200: 5.0 against vLLM's 7.9 us at 128 KiB, 14.2
    /// against vLLM's 18.1 and TensorRT-LLM's 30.5 us at 2 MiB), and above them at small sizes,
    /// where its 3 us floor comes on top of the step's per-kernel floor. When `--link-latency` /
    /// `--link-bw` change that NVLink's numbers, the measured figure is scaled by the model's
    /// ratio of the given link to the catalog one, so a faster link is never priced above the
    /// catalog's (the model and the table disagree by up to 4.8x, and switching between them
    /// would make it so). The custom kernel's model has a fixed latency floor, so the ratio
    /// follows the bandwidth; a latency alone leaves it at 1. A measured link (a `fabric` document) keeps the model. The method keeps
    /// the rule's one-shot / two-shot label. A separate prefill pass's all-reduces take the same
    /// graph-mode figure (sglang before 0.5.10 ran prefill eagerly, which the eager launches of
    /// [`Self::eager_prefill_ms`] price apart) and, in [`Self::point`], no per-kernel floor.
    ///
    /// Where the engine runs NCCL within a node (no custom kernel: PCIe boxes of more than two
    /// GPUs, no P2P, or large messages) and the box's NCCL all-reduce was measured
    /// (`--allreduce`, [`comm::MeasuredAllReduce`]), the measurement replaces the NCCL model, net
    /// of the per-kernel floor: what a VM's IOMMU or one host's memory do to eight processes
    /// staging through it is in the measurement and in no model. It prices the box it was given
    /// with only: a what-if or a fix on another link or GPU takes the model.
    pub fn tp_allreduce(&self, bytes: f64) -> comm::AllReduce {
        let n = self.plan.tp;
        match self.across(n) {
            Some(h) => comm::allreduce_across(&h, bytes),
            None => {
                let ar = comm::allreduce(&self.link, n, bytes, self.engine.cuda_graphs);
                let custom = matches!(ar.method, comm::Method::OneShot | comm::Method::TwoShot);
                if let Some(m) = self.measured_allreduce.as_deref().filter(|m| !custom && m.prices(&self.link.name, &self.gpu.name)) {
                    // The box's own NCCL, net of the per-kernel floor the step counts.
                    return m.allreduce(&self.link, n, bytes, self.engine.gemm_floor_us);
                }
                match self.measured_custom_row() {
                    Some((lat, catalog)) if custom => {
                        let scale = match catalog {
                            None => 1.0,
                            Some(c) => {
                                let base = comm::allreduce(&c, n, bytes, self.engine.cuda_graphs).us;
                                if base > 0.0 {
                                    ar.us / base
                                } else {
                                    1.0
                                }
                            }
                        };
                        let us = comm::measured_latency_us(lat, bytes) * scale;
                        comm::AllReduce { us: (us - self.engine.gemm_floor_us).max(0.0), method: ar.method }
                    }
                    _ => ar,
                }
            }
        }
    }

    /// Whether the TP all-reduce's custom kernel is priced from its measured latency
    /// ([`Self::tp_allreduce`]): one node, CUDA graphs, the GPU's own catalog NVLink (its numbers
    /// or `--link-latency` / `--link-bw`'s, not a `fabric` document), and a comm.toml row for
    /// this GPU, engine and TP size.
    pub fn measured_custom_allreduce(&self) -> bool {
        self.measured_custom_row().is_some()
    }

    /// Whether that measured figure is scaled from the catalog link to user-given numbers.
    pub fn measured_custom_allreduce_scaled(&self) -> bool {
        matches!(self.measured_custom_row(), Some((_, Some(_))))
    }

    /// The comm.toml row [`Self::measured_custom_allreduce`] prices the custom kernel from, and
    /// the catalog link to scale it from when the plan's link has other numbers.
    pub(super) fn measured_custom_row(&self) -> Option<(&'static [f64; 8], Option<LinkProfile>)> {
        let n = self.plan.tp;
        let applies =
            self.across(n).is_none() && self.engine.cuda_graphs && self.link.kind == LinkKind::Nvlink && self.link.name == self.gpu.link;
        if !applies {
            return None;
        }
        let row = comm::custom_measured_row(&self.gpu.name, self.engine.serving.name(), n)?;
        if crate::hw::is_catalog_link(&self.link) {
            return Some((row, None));
        }
        let catalog = crate::hw::link(&self.link.name).ok().filter(|c| c.kind == self.link.kind)?;
        Some((row, Some(catalog)))
    }

    /// Whether some stage boundary of a replica falls between nodes: the replica (tp x pp ranks,
    /// placed node-aligned) is larger than a node.
    pub(super) fn pp_crosses_nodes(&self) -> bool {
        self.cluster.as_ref().is_some_and(|c| self.plan.pp > 1 && self.plan.tp * self.plan.pp > c.gpus_per_node)
    }

    /// One stage's send of `bytes` to the next, us. When a boundary crosses nodes the send goes over
    /// the network; the slowest stage paces the pipeline, so every stage is charged that send.
    pub(super) fn pp_send_us(&self, bytes: f64) -> f64 {
        match &self.cluster {
            Some(c) if self.pp_crosses_nodes() => c.net.alpha_us + bytes / (c.net_gbs_per_gpu() * 1e3),
            _ => self.link.send_us(bytes),
        }
    }

    /// Which collectives cross the network (None on one node, or when every group fits in one).
    pub fn across_nodes(&self) -> Option<Across> {
        let c = self.cluster.as_ref()?;
        let group = if self.plan.dp_attention { self.plan.ep.max(self.plan.tp) } else { self.plan.tp };
        let tp_nodes = c.span(group);
        let pp = self.pp_crosses_nodes();
        (tp_nodes > 1 || pp).then(|| Across { net: c.net.name.clone(), tp_nodes, pp })
    }

    /// Refuses a plan whose groups straddle node boundaries, and a cluster that does not hold the
    /// plan's GPUs: a TP group and a replica (tp x pp) must each divide a node or be whole nodes.
    pub fn check_placement(&self) -> Result<(), ModelError> {
        let Some(c) = &self.cluster else { return Ok(()) };
        if c.nodes * c.gpus_per_node != self.plan.gpus {
            return Err(ModelError::Input(format!(
                "--gpus {} is not --nodes {} x --gpus-per-node {} = {}",
                self.plan.gpus,
                c.nodes,
                c.gpus_per_node,
                c.nodes * c.gpus_per_node
            )));
        }
        c.check_group(self.plan.tp, &format!("--tp {}", self.plan.tp))?;
        c.check_group(self.plan.tp * self.plan.pp, &format!("the replica (tp x pp = {} x {})", self.plan.tp, self.plan.pp))
    }

    /// The q/k all-gathers of one stage step for `tokens` tokens, us
    /// ([`ModelSpec::qk_norm_gathered`]): in every attention layer, q (heads x head dim) and k
    /// (KV heads x head dim) in bf16, gathered over the TP group by NCCL's ring
    /// ([`comm::nccl_allgather_us`]; across nodes, half the ring all-reduce of the same bytes over
    /// the hierarchy, [`comm::allgather_across_us`]). 0 without TP or without the norm.
    pub(super) fn qk_gather_us(&self, tokens: f64) -> f64 {
        let m = &self.model;
        let crate::spec::Attention::Gqa { heads, kv_heads, head_dim, .. } = m.attention else { return 0.0 };
        if !self.qk_norm_gather() {
            return 0.0;
        }
        let layers = m.kv_layers() as f64 / self.plan.pp as f64;
        let (q, k) = (tokens * heads as f64 * head_dim as f64 * 2.0, tokens * kv_heads as f64 * head_dim as f64 * 2.0);
        layers * (self.tp_allgather_us(q) + self.tp_allgather_us(k))
    }

    /// One NCCL all-gather of `bytes` (what each rank ends with) over the TP group: within a node
    /// ([`comm::nccl_allgather_us`]) or, when the group spans nodes, hierarchically
    /// ([`comm::allgather_across_us`]).
    fn tp_allgather_us(&self, bytes: f64) -> f64 {
        match self.across(self.plan.tp) {
            Some(h) => comm::allgather_across_us(&h, bytes),
            None => comm::nccl_allgather_us(&self.link, self.plan.tp, bytes),
        }
    }

    /// Whether the vocab-parallel embedding all-reduces its output once per pass: under TP with
    /// sglang (`VocabParallelEmbedding.forward`, 0.5.9) and vLLM (the same layer); not under DP
    /// attention, where sglang replicates the embedding (`enable_tp=False`) and vLLM's ranks each
    /// hold the whole model; not priced for TensorRT-LLM, whose embedding's parallel mode (an
    /// all-gather over the hidden size, or none) was not confirmed.
    pub(super) fn embedding_allreduce(&self) -> bool {
        self.plan.tp > 1 && !self.plan.dp_attention && self.engine.serving != super::EngineName::Trtllm
    }

    /// Whether the LM head all-gathers the logits once per pass ([`Self::logits_gather_us`]):
    /// under TP; under DP attention only with sglang, which gathers the DP ranks' hidden states,
    /// runs its vocab-parallel head over all of them and all-gathers the logits
    /// (`LogitsProcessor._get_logits`, 0.5.9; the hidden states' own gather is not priced), where
    /// vLLM's DP ranks each hold the whole head.
    pub(super) fn logits_gathered(&self) -> bool {
        self.plan.tp > 1 && (!self.plan.dp_attention || self.engine.serving == super::EngineName::Sglang)
    }

    /// The LM head's all-gather of the logits of `tokens` sampled tokens over the TP ranks, us.
    /// The head is vocab-parallel: each rank computes its share of the vocabulary for every token
    /// and the ranks all-gather the bf16 logits (tokens x vocab x 2 bytes each rank ends with)
    /// through NCCL before sampling. sglang's `LogitsProcessor._get_logits` (0.5.9:
    /// `tensor_model_parallel_all_gather`), vLLM's `LogitsProcessor` (an all-gather on CUDA),
    /// TensorRT-LLM's `LMHead` (an `allgather` of its output). Once per forward pass, on the last
    /// stage; 0 where [`Self::logits_gathered`] is false.
    pub fn logits_gather_us(&self, tokens: f64) -> f64 {
        if !self.logits_gathered() || tokens <= 0.0 {
            return 0.0;
        }
        self.tp_allgather_us(tokens * self.model.vocab as f64 * 2.0)
    }

    /// Whether each attention layer all-gathers its q and k across the TP ranks for a norm over
    /// the whole projections ([`ModelSpec::qk_norm_gathered`]; not with DP attention, where every
    /// rank holds all heads).
    pub(super) fn qk_norm_gather(&self) -> bool {
        self.model.qk_norm_gathered && self.plan.tp > 1 && !self.plan.dp_attention
    }

    /// Whether each full-attention layer all-reduces its q/k norm's sum of squares across the
    /// attention's TP ranks ([`ModelSpec::qk_norm_across_heads`]; not with DP attention, where
    /// every rank holds all heads).
    pub(super) fn qk_norm_allreduce(&self) -> bool {
        self.model.qk_norm_across_heads && self.plan.tp > 1 && !self.plan.dp_attention
    }
}
