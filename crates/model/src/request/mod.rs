//! What `servetune plan` is asked, as plain data the CLI (or the demo, or `sim --from-plan`, or a
//! campaign) fills: a [`ScenarioSpec`] resolves into a [`Scenario`], a [`WhatIf`] changes one, and
//! [`build_report`] runs the whole plan into a [`PlanReport`].

use servetune_stats::Slo;

use crate::calibrate::{self, Measured};
use crate::hw::{self, Cluster, GpuSpec, LinkProfile};
use crate::predict::{Engine, EngineName, MemShare, Overlap, Plan, Scenario};
use crate::quant::{Dtype, KvDtype, Quant};
use crate::rank::{self, ConcurrencyRange};
use crate::report::{self, FitSuggestion, GpuSuggestion, PlanReport, Versus};
use crate::spec::{self, ModelSpec};
use crate::workload::{VirtualBench, Workload};
use crate::ModelError;

/// Where the model comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelSource {
    /// A catalog name (`--model`).
    Catalog(String),
    /// A Hugging Face `config.json` the caller read (`--model-config`).
    Config {
        /// The file's text.
        text: String,
        /// The file's path, for errors.
        path: String,
    },
}

/// Which link joins the GPUs.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkSource {
    /// NVLink when the GPU has it, else PCIe Gen5 P2P.
    Default,
    /// A catalog name (`--link`).
    Catalog(String),
    /// A measured link (`--fabric`), already validated.
    Measured(LinkProfile),
}

/// Weight and KV formats; None fields take the checkpoint's.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct QuantSpec {
    /// The checkpoint format (`--quant`; None: the model's published format).
    pub checkpoint: Option<Dtype>,
    /// Attention weights (`--quant-attention`).
    pub attention: Option<Dtype>,
    /// Routed and shared experts (`--quant-experts`).
    pub experts: Option<Dtype>,
    /// Dense FFN (`--quant-dense`).
    pub dense: Option<Dtype>,
    /// KV cache (`--kv-dtype`).
    pub kv_cache: Option<KvDtype>,
}

/// A deployment as the user describes it, before it is resolved and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioSpec {
    /// The model.
    pub model: ModelSource,
    /// Its formats.
    pub quant: QuantSpec,
    /// GPU catalog name.
    pub gpu: String,
    /// GPUs in the deployment.
    pub gpus: u32,
    /// Nodes the GPUs are on (`--nodes`; None: from `gpus_per_node`, or one node).
    pub nodes: Option<u32>,
    /// GPUs on each node (`--gpus-per-node`; None: from `nodes`, or all on one node).
    pub gpus_per_node: Option<u32>,
    /// NICs on each node (`--nics-per-node`; None: one per GPU).
    pub nics_per_node: Option<u32>,
    /// The network between nodes, a catalog name (`--net`); needed when there are 2 or more nodes.
    pub net: Option<String>,
    /// Measured network latency replacing the catalog's (`--net-latency`), us.
    pub net_latency_us: Option<f64>,
    /// Measured bandwidth per NIC replacing the catalog's (`--net-bw`), GB/s.
    pub net_bw_gbs: Option<f64>,
    /// The link.
    pub link: LinkSource,
    /// Measured hop latency replacing the link's, us.
    pub link_latency_us: Option<f64>,
    /// Measured bandwidth replacing the link's, GB/s.
    pub link_bw_gbs: Option<f64>,
    /// The box's measured NCCL all-reduce (`--allreduce`, already validated); it prices the link
    /// and GPU it names (`measured_on`), else this deployment's.
    pub allreduce: Option<crate::comm::MeasuredAllReduce>,
    /// Tensor parallelism (None: all GPUs over the pipeline's stages, `gpus / pp` where `pp`
    /// divides them, else `gpus`).
    pub tp: Option<u32>,
    /// Pipeline parallelism.
    pub pp: u32,
    /// Expert parallelism within the TP group.
    pub ep: u32,
    /// Data-parallel attention.
    pub dp_attention: bool,
    /// Prompt tokens per request.
    pub input_len: u32,
    /// Output tokens per request.
    pub output_len: u32,
    /// The server's running-request limit.
    pub max_running: Option<u32>,
    /// CUDA graphs for decode.
    pub cuda_graphs: bool,
    /// Communication overlap.
    pub overlap: Overlap,
    /// Prefill rides inside decode steps.
    pub mixed_prefill: bool,
    /// Host overhead per step replacing the default per-kernel floor, ms (the per-request cost
    /// stays: [`Self::request_step_us`]).
    pub step_overhead_ms: Option<f64>,
    /// Per-step cost of each running request replacing the fitted default, us.
    pub request_step_us: Option<f64>,
    /// The serving path's latency outside the GPU (it adds to TTFT), replacing sglang's default, ms.
    pub request_latency_ms: Option<f64>,
    /// The router's skew over the experts (a Zipf exponent, 0 = uniform routing), replacing the
    /// kernel-derived default ([`Engine::routing_skew`]): for traffic whose routing is measured.
    pub routing_skew: Option<f64>,
    /// Fraction of memory bandwidth the fused-MoE kernels reach, replacing the default (untuned
    /// kernels reach less than tuned ones), 0 < f <= 1.
    pub moe_efficiency: Option<f64>,
    /// Share of each GPU's memory the engine may use for weights and KV cache, replacing the
    /// engine's default (sglang's `--mem-fraction-static`, vLLM's `--gpu-memory-utilization`),
    /// 0 < f <= 1.
    pub mem_fraction: Option<f64>,
    /// The serving engine, whose defaults apply where no flag says otherwise
    /// ([`EngineName::defaults`]).
    pub engine: EngineName,
    /// Its release, when given (`--engine sglang@0.4.6`): the release's defaults apply
    /// ([`crate::predict::EngineRelease::defaults`]); `None` for the current release.
    pub engine_version: Option<String>,
}

impl ScenarioSpec {
    /// The engine release the scenario runs.
    pub fn release(&self) -> crate::predict::EngineRelease {
        crate::predict::EngineRelease { name: self.engine, version: self.engine_version.clone() }
    }

    /// `model` on 8 `gpu`s with the defaults of `servetune plan`'s flags.
    pub fn new(model: ModelSource, gpu: impl Into<String>) -> Self {
        Self {
            model,
            quant: QuantSpec::default(),
            gpu: gpu.into(),
            gpus: 8,
            nodes: None,
            gpus_per_node: None,
            nics_per_node: None,
            net: None,
            net_latency_us: None,
            net_bw_gbs: None,
            link: LinkSource::Default,
            link_latency_us: None,
            link_bw_gbs: None,
            allreduce: None,
            tp: None,
            pp: 1,
            ep: 1,
            dp_attention: false,
            input_len: 1024,
            output_len: 1024,
            max_running: None,
            cuda_graphs: true,
            overlap: Overlap::None,
            mixed_prefill: false,
            step_overhead_ms: None,
            request_step_us: None,
            routing_skew: None,
            request_latency_ms: None,
            moe_efficiency: None,
            mem_fraction: None,
            engine: EngineName::Sglang,
            engine_version: None,
        }
    }

    /// Parses `KEY=VALUE[,KEY=VALUE]` given to `flag` (`sim --from-plan`): keys model (a catalog
    /// name or a listed checkpoint's Hugging Face repository, [`spec::named_model`]),
    /// gpu, gpus, link, quant, kv-dtype, tp, pp, ep, dp-attention, input-len, output-len,
    /// max-running, overlap, cuda-graphs, mixed-prefill, step-overhead-ms, request-step-us,
    /// request-latency-ms, routing-skew, moe-efficiency, mem-fraction, engine.
    /// `model` and `gpu` are required.
    pub fn parse_pairs(flag: &str, s: &str) -> Result<Self, ModelError> {
        let pairs = split_pairs(flag, s, "model=glm-5,gpu=rtx-pro-6000-se,gpus=8,link=pcie-host-staged")?;
        let get = |k: &str| pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        let model = get("model")
            .ok_or_else(|| ModelError::Input(format!("{flag}: give model=NAME (catalog: {})", spec::catalog_names().join(", "))))?;
        let gpu =
            get("gpu").ok_or_else(|| ModelError::Input(format!("{flag}: give gpu=NAME (catalog: {})", hw::gpu_names().join(", "))))?;
        let named = spec::named_model(model).map_err(|e| ModelError::Input(format!("{flag} model={model}: {e}")))?;
        let mut out = ScenarioSpec::new(ModelSource::Catalog(named.entry.name.clone()), gpu);
        for (k, v) in &pairs {
            out.set(flag, k, v)?;
        }
        // A checkpoint's repository names its format; a quant= of another format is refused.
        match (named.checkpoint, out.quant.checkpoint) {
            (Some(c), Some(q)) if c != q => Err(ModelError::Input(format!(
                "{flag} model={model} is the {} checkpoint of {}, but quant={} asks for another format: give model={} quant={}",
                c.name(),
                named.entry.name,
                q.name(),
                named.entry.name,
                q.name()
            ))),
            (c, q) => {
                out.quant.checkpoint = q.or(c);
                Ok(out)
            }
        }
    }

    fn set(&mut self, flag: &str, k: &str, v: &str) -> Result<(), ModelError> {
        let what = format!("{flag} {k}={v}");
        match k {
            "model" | "gpu" => {}
            "gpus" => self.gpus = whole(&what, v)?,
            "link" => self.link = LinkSource::Catalog(v.to_string()),
            "quant" => self.quant.checkpoint = Some(Dtype::parse(&what, v)?),
            "kv-dtype" => self.quant.kv_cache = Some(KvDtype::parse(&what, v)?),
            "nodes" => self.nodes = Some(whole(&what, v)?),
            "gpus-per-node" => self.gpus_per_node = Some(whole(&what, v)?),
            "nics-per-node" => self.nics_per_node = Some(whole(&what, v)?),
            "net" => self.net = Some(v.to_string()),
            "tp" => self.tp = Some(whole(&what, v)?),
            "pp" => self.pp = whole(&what, v)?,
            "ep" => self.ep = whole(&what, v)?,
            "dp-attention" => self.dp_attention = boolean(&what, v)?,
            "input-len" => self.input_len = whole(&what, v)?,
            "output-len" => self.output_len = whole(&what, v)?,
            "max-running" => self.max_running = Some(whole(&what, v)?),
            "overlap" => self.overlap = Overlap::parse(&what, v)?,
            "cuda-graphs" => self.cuda_graphs = boolean(&what, v)?,
            "mixed-prefill" => self.mixed_prefill = boolean(&what, v)?,
            "step-overhead-ms" => {
                self.step_overhead_ms = Some(v.parse().map_err(|_| ModelError::Input(format!("{what}: not a number of milliseconds")))?)
            }
            "request-step-us" => {
                self.request_step_us = Some(v.parse().map_err(|_| ModelError::Input(format!("{what}: not a number of microseconds")))?)
            }
            "request-latency-ms" => {
                self.request_latency_ms =
                    Some(v.parse().map_err(|_| ModelError::Input(format!("{what}: not a number of milliseconds")))?)
            }
            "routing-skew" => {
                self.routing_skew = Some(v.parse().map_err(|_| ModelError::Input(format!("{what}: not a number like 0.45")))?)
            }
            "moe-efficiency" => {
                self.moe_efficiency = Some(v.parse().map_err(|_| ModelError::Input(format!("{what}: not a fraction like 0.8")))?)
            }
            "mem-fraction" => {
                self.mem_fraction = Some(v.parse().map_err(|_| ModelError::Input(format!("{what}: not a fraction like 0.9")))?)
            }
            "engine" => {
                let release = crate::predict::EngineRelease::parse(&what, v)?;
                self.engine = release.name;
                self.engine_version = release.version;
            }
            other => {
                return Err(ModelError::Input(format!(
                    "{flag}: unknown key {other:?}; keys: model, gpu, gpus, nodes, gpus-per-node, nics-per-node, net, link, quant, kv-dtype, tp, pp, ep, dp-attention, input-len, output-len, max-running, overlap, cuda-graphs, mixed-prefill, step-overhead-ms, request-step-us, request-latency-ms, routing-skew, moe-efficiency, mem-fraction, engine"
                )))
            }
        }
        Ok(())
    }

    /// The model this spec names, read and validated.
    pub fn model_spec(&self) -> Result<ModelSpec, ModelError> {
        match &self.model {
            ModelSource::Catalog(name) => spec::catalog(name),
            ModelSource::Config { text, path } => spec::from_hf_config(text, path),
        }
    }

    /// The checkpoint formats published for the model, the default first (only the config's own
    /// format for a `--model-config`).
    pub fn published_formats(&self, model: &ModelSpec) -> Vec<Dtype> {
        match &self.model {
            ModelSource::Catalog(name) => {
                spec::catalog_entry(name).map(|e| e.checkpoints.iter().map(|c| c.quant).collect()).unwrap_or_default()
            }
            ModelSource::Config { .. } => vec![model.checkpoint.unwrap_or(Dtype::Bf16)],
        }
    }

    /// Resolves and checks everything: the model, formats, GPU, link, plan and engine.
    pub fn build(&self) -> Result<Scenario, ModelError> {
        let model = self.model_spec()?;
        let quant = self.resolve_quant(&model);
        let gpu = hw::gpu(&self.gpu)?;
        let link = self.resolve_link(&gpu)?;
        if self.gpus == 0 {
            return Err(ModelError::Input("--gpus 0: give the number of GPUs, 1 or more".into()));
        }
        // Unset, the TP spans the GPUs of one pipeline stage.
        let tp = self.tp.unwrap_or(if self.pp > 0 && self.gpus.is_multiple_of(self.pp) { self.gpus / self.pp } else { self.gpus });
        let plan = Plan { gpus: self.gpus, tp, pp: self.pp, ep: self.ep, dp_attention: self.dp_attention };
        if self.tp.is_none() && self.pp > 1 && !self.gpus.is_multiple_of(self.pp) {
            return Err(ModelError::Input(format!(
                "--pp {} does not divide --gpus {}: give a --pp that divides it, or --tp with tp x pp dividing --gpus",
                self.pp, self.gpus
            )));
        }
        plan.check(&model).map_err(|e| self.tp_named(e, tp))?;
        let cluster = self.resolve_cluster()?;
        if self.input_len == 0 || self.output_len == 0 {
            return Err(ModelError::Input("--input-len and --output-len must be at least 1 token".into()));
        }
        if self.max_running == Some(0) {
            return Err(ModelError::Input("--max-running 0 runs nothing: give 1 or more, or leave it out".into()));
        }
        let engine = self.resolve_engine()?;
        if plan.dp_attention && !crate::predict::dp_attention_runs(&model, engine.serving) {
            return Err(ModelError::Input(format!(
                "--dp-attention: sglang runs this model's {} KDA layers tensor-parallel over the whole TP group, with no data-parallel attention for them; drop --dp-attention (or give --engine vllm, whose DP attention is data parallelism at TP1)",
                model.layer_counts.linear
            )));
        }
        // The measured all-reduce prices the box it was measured on only: the one it names, else
        // this deployment's link and GPU.
        let measured_allreduce = self.allreduce.clone().map(|m| {
            let on = m.measured_on.clone().or_else(|| Some((link.name.clone(), gpu.name.clone())));
            std::sync::Arc::new(crate::comm::MeasuredAllReduce { measured_on: on, ..m })
        });
        Ok(Scenario {
            model,
            quant,
            gpu,
            link,
            plan,
            engine,
            input_len: self.input_len,
            output_len: self.output_len,
            max_running: self.max_running,
            cluster,
            measured_allreduce,
            calibrated_on: None,
        })
        .and_then(|s| s.check_placement().map(|_| s))
        .map_err(|e| self.tp_named(e, tp))
    }

    /// `e` as the user reads it when they gave no `--tp`: a message naming `--tp {tp}` names the
    /// flags the TP came from (`--gpus`, over `--pp`'s stages), not a flag they did not give.
    fn tp_named(&self, e: ModelError, tp: u32) -> ModelError {
        let ModelError::Input(m) = e else { return e };
        let flag = format!("--tp {tp}");
        let named = m.match_indices(&flag).any(|(at, _)| !m[at + flag.len()..].starts_with(|c: char| c.is_ascii_digit()));
        if self.tp.is_some() || !named {
            return ModelError::Input(m);
        }
        let from = if self.pp > 1 { format!("--gpus {} over --pp {}", self.gpus, self.pp) } else { format!("--gpus {}", self.gpus) };
        let said = m.replace(&flag, &format!("TP{tp}")).replace("lower --tp", "give a smaller --tp");
        ModelError::Input(format!("{from} without --tp means TP{tp}: {said}"))
    }

    /// The engine: the release's defaults with every engine flag given, each checked for range.
    fn resolve_engine(&self) -> Result<Engine, ModelError> {
        let defaults = self.release().defaults();
        // A stated per-step overhead replaces the fitted per-kernel floor; the per-request cost,
        // which grows with the batch, stays unless `--request-step-us` states it too.
        let (step_overhead_ms, kernel_overhead_us) = match self.step_overhead_ms {
            Some(o) if !(o.is_finite() && STEP_OVERHEAD_MS.contains(&o)) => {
                return Err(ModelError::Input(format!(
                    "--step-overhead-ms {o:?} is out of range: give milliseconds from {} to {}",
                    STEP_OVERHEAD_MS.start(),
                    STEP_OVERHEAD_MS.end()
                )))
            }
            Some(o) => (o, 0.0),
            None => (defaults.step_overhead_ms, defaults.kernel_overhead_us),
        };
        let request_step_us = ranged(self.request_step_us, &REQUEST_STEP_US, defaults.request_step_us, |r| {
            format!(
                "--request-step-us {r:?} is out of range: give microseconds from {} to {} per running request per decode step (the fitted default is {})",
                REQUEST_STEP_US.start(),
                REQUEST_STEP_US.end(),
                defaults.request_step_us
            )
        })?;
        let request_latency_ms = ranged(self.request_latency_ms, &REQUEST_LATENCY_MS, defaults.request_latency_ms, |l| {
            format!(
                "--request-latency-ms {l:?} is out of range: give milliseconds from {} to {} (sglang {}, vLLM {}, TensorRT-LLM {}: VALIDATION.md)",
                REQUEST_LATENCY_MS.start(),
                REQUEST_LATENCY_MS.end(),
                crate::predict::SGLANG_REQUEST_LATENCY_MS,
                crate::predict::VLLM_REQUEST_LATENCY_MS,
                crate::predict::TRTLLM_REQUEST_LATENCY_MS
            )
        })?;
        let routing_skew = ranged(self.routing_skew, &ROUTING_SKEW, defaults.routing_skew, |s| {
            format!(
                "--routing-skew {s:?} is out of range: give a Zipf exponent from {} (uniform routing) to {} (the default {} is read off AIConfigurator's MoE kernel timings: VALIDATION.md)",
                ROUTING_SKEW.start(),
                ROUTING_SKEW.end(),
                defaults.routing_skew
            )
        })?;
        let moe_efficiency = ranged(self.moe_efficiency, &(MIN_MOE_EFFICIENCY..=1.0), defaults.moe_efficiency, |f| {
            format!("moe-efficiency {f:?}: give the fraction of memory bandwidth the MoE kernels reach, from {MIN_MOE_EFFICIENCY} to 1")
        })?;
        // A given share replaces the release's default rule.
        let mem_share = match self.mem_fraction {
            Some(f) if !(f.is_finite() && f > 0.0 && f <= 1.0) => {
                return Err(ModelError::Input(format!(
                    "--mem-fraction {f}: give the share of each GPU's memory the engine may use, above 0 and at most 1 (sglang's --mem-fraction-static, vLLM's --gpu-memory-utilization)"
                )))
            }
            Some(f) => MemShare::Given(f),
            None => defaults.mem_share,
        };
        Ok(Engine {
            moe_efficiency,
            // A given MoE efficiency replaces the kernel tables' rate.
            moe_table: defaults.moe_table && self.moe_efficiency.is_none(),
            cuda_graphs: self.cuda_graphs,
            overlap: self.overlap,
            // The engine's default, or the flag's (sglang's --enable-mixed-chunk).
            mixed_prefill: self.mixed_prefill || defaults.mixed_prefill,
            step_overhead_ms,
            kernel_overhead_us,
            request_step_us,
            request_latency_ms,
            routing_skew,
            mem_share,
            ..defaults
        })
    }

    /// GPUs per node from `--nodes`/`--gpus-per-node` and `--gpus` (None: no node flag), checked
    /// against each other.
    fn gpus_per_node(&self) -> Result<Option<u32>, ModelError> {
        let gpus = self.gpus;
        match (self.nodes, self.gpus_per_node) {
            (Some(0), _) => Err(ModelError::Input("--nodes 0: give the number of nodes, 1 or more".into())),
            (_, Some(0)) => Err(ModelError::Input("--gpus-per-node 0: give the GPUs on each node, 1 or more".into())),
            (None, None) => Ok(None),
            (Some(n), Some(g)) if n.checked_mul(g) != Some(gpus) => Err(ModelError::Input(format!(
                "--gpus {gpus} is not --nodes {n} x --gpus-per-node {g} = {}: give matching numbers, or leave --gpus out",
                u64::from(n) * u64::from(g)
            ))),
            (Some(_), Some(g)) => Ok(Some(g)),
            (Some(n), None) if !gpus.is_multiple_of(n) => {
                Err(ModelError::Input(format!("--gpus {gpus} does not split evenly over --nodes {n}: give a multiple of {n}")))
            }
            (Some(n), None) => Ok(Some(gpus / n)),
            (None, Some(g)) if !gpus.is_multiple_of(g) => Err(ModelError::Input(format!(
                "--gpus {gpus} is not a multiple of --gpus-per-node {g}: nodes are whole, give a multiple of {g}"
            ))),
            (None, Some(g)) => Ok(Some(g)),
        }
    }

    /// The nodes and network (None on one node: a single-node plan is unchanged).
    fn resolve_cluster(&self) -> Result<Option<Cluster>, ModelError> {
        let Some(gpus_per_node) = self.gpus_per_node()? else {
            let network = self.net.is_some() || self.nics_per_node.is_some() || self.net_latency_us.is_some() || self.net_bw_gbs.is_some();
            return if network {
                Err(ModelError::Input(
                    "--net, --nics-per-node, --net-latency and --net-bw describe a network between nodes: say how the GPUs split into nodes with --nodes or --gpus-per-node".into(),
                ))
            } else {
                Ok(None)
            };
        };
        let nodes = self.gpus / gpus_per_node;
        if nodes == 1 {
            return Ok(None);
        }
        let name = self.net.as_deref().ok_or_else(|| {
            ModelError::Input(format!(
                "a plan over {nodes} nodes needs --net (the network between them); known: {}",
                hw::net_names().join(", ")
            ))
        })?;
        let mut net = hw::net(name)?;
        if let Some(l) = self.net_latency_us {
            net.alpha_us = l;
            net.source = format!("measured (--net-latency); {}", net.source);
        }
        if let Some(b) = self.net_bw_gbs {
            net.beta_gbs = b;
            net.source = format!("measured (--net-bw); {}", net.source);
        }
        net.validate("--net-latency/--net-bw")?;
        let nics_per_node = self.nics_per_node.unwrap_or(gpus_per_node);
        if nics_per_node == 0 {
            return Err(ModelError::Input("--nics-per-node 0: give the NICs on each node, 1 or more".into()));
        }
        Ok(Some(Cluster { nodes, gpus_per_node, nics_per_node, net }))
    }

    fn resolve_quant(&self, model: &ModelSpec) -> Quant {
        let q = &self.quant;
        let mut quant = Quant::checkpoint(q.checkpoint.or(model.checkpoint).unwrap_or(Dtype::Bf16), model.moe.is_some());
        // A mixed checkpoint's own parts, unless --quant names another format.
        if let (None, Some(p)) = (q.checkpoint, model.checkpoint_parts) {
            quant.attention = p.attention;
            quant.dense_ffn = p.dense_ffn;
            quant.experts = p.experts;
            quant.shared_experts = p.shared_experts;
            // The model keeps one format for the embedding table and the LM head; a decode step
            // reads only the head, so a quantized head's format is the one priced (the table's
            // memory is then undercounted by its share).
            if let Some(h) = p.lm_head {
                quant.embeddings = h;
            }
        }
        if let Some(d) = q.attention {
            quant.attention = d;
        }
        if let Some(d) = q.experts {
            quant.experts = d;
            quant.shared_experts = d;
        }
        if let Some(d) = q.dense {
            quant.dense_ffn = d;
        }
        // Stated, else what the engine's `--kv-cache-dtype auto` gives: the config's declaration
        // (unless --quant names another checkpoint), else the checkpoint format's, as the release
        // reads it.
        let declared = match q.checkpoint {
            Some(d) if Some(d) != model.checkpoint => None,
            _ => model.kv_declared,
        };
        quant.kv_cache = match q.kv_cache {
            Some(k) => k,
            None => self.release().auto_kv(declared.unwrap_or(quant.kv_cache), None),
        };
        quant
    }

    fn resolve_link(&self, gpu: &GpuSpec) -> Result<LinkProfile, ModelError> {
        let mut link = match &self.link {
            LinkSource::Default => hw::link(hw::default_link(gpu))?,
            LinkSource::Catalog(name) => hw::link(name)?,
            LinkSource::Measured(l) => l.clone(),
        };
        if let Some(l) = self.link_latency_us {
            link.alpha_us = l;
            link.source = format!("measured (--link-latency); {}", link.source);
        }
        if let Some(b) = self.link_bw_gbs {
            link.beta_gbs = b;
            link.source = format!("measured (--link-bw); {}", link.source);
        }
        link.validate("--link-latency/--link-bw")?;
        Ok(link)
    }
}

/// `KEY=VALUE[,KEY=VALUE]` as pairs; a key given twice is refused (which one was meant is unknown).
fn split_pairs<'a>(flag: &str, s: &'a str, example: &str) -> Result<Vec<(&'a str, &'a str)>, ModelError> {
    let pairs: Vec<(&str, &str)> = s
        .split(',')
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .filter(|(k, v)| !k.is_empty() && !v.is_empty())
                .ok_or_else(|| ModelError::Input(format!("{flag} {s:?}: write KEY=VALUE[,KEY=VALUE], e.g. {example}")))
        })
        .collect::<Result<_, _>>()?;
    for (i, (k, v)) in pairs.iter().enumerate() {
        if let Some((_, other)) = pairs[..i].iter().find(|(key, _)| key == k) {
            return Err(ModelError::Input(format!("{flag}: {k} is given twice ({k}={other} and {k}={v}); give it once")));
        }
    }
    Ok(pairs)
}

/// A stated fraction in (0, 1], else `default`; `why` words the refusal of any other value.
/// `--step-overhead-ms`: host time per decode step, up to 10 s (the fitted floor is well under 1 ms;
/// a step that long is a stalled server, not a setting).
pub const STEP_OVERHEAD_MS: std::ops::RangeInclusive<f64> = 0.0..=1e4;

/// `--request-step-us`: per running request per decode step, up to 1 s (the fitted value is 35 us).
pub const REQUEST_STEP_US: std::ops::RangeInclusive<f64> = 0.0..=1e6;

/// `--routing-skew`: the Zipf exponent of the router's expert popularity, from uniform routing
/// (0) to 3 (beyond it nearly every token picks the same top-k experts).
pub const ROUTING_SKEW: std::ops::RangeInclusive<f64> = 0.0..=3.0;

/// `--request-latency-ms`: the serving path's latency outside the GPU, up to 10 minutes.
pub const REQUEST_LATENCY_MS: std::ops::RangeInclusive<f64> = 0.0..=6e5;

/// The lowest MoE efficiency taken: below 1% of memory bandwidth a step's time is a typo's
/// (and reaches durations no clock holds).
pub const MIN_MOE_EFFICIENCY: f64 = 0.01;

/// A stated finite value inside `range`, else `default`; `why` words the refusal of any other.
fn ranged(
    given: Option<f64>,
    range: &std::ops::RangeInclusive<f64>,
    default: f64,
    why: impl FnOnce(f64) -> String,
) -> Result<f64, ModelError> {
    match given {
        Some(x) if !(x.is_finite() && range.contains(&x)) => Err(ModelError::Input(why(x))),
        Some(x) => Ok(x),
        None => Ok(default),
    }
}

fn whole(what: &str, v: &str) -> Result<u32, ModelError> {
    v.parse().map_err(|_| ModelError::Input(format!("{what}: not a whole number")))
}

fn boolean(what: &str, v: &str) -> Result<bool, ModelError> {
    match v {
        "on" | "true" | "yes" => Ok(true),
        "off" | "false" | "no" => Ok(false),
        _ => Err(ModelError::Input(format!("{what}: use on or off"))),
    }
}

/// One change of a what-if (`--vs`).
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Another GPU.
    Gpu(GpuSpec),
    /// Another link.
    Link(LinkProfile),
    /// Tensor parallelism.
    Tp(u32),
    /// Pipeline parallelism.
    Pp(u32),
    /// Expert parallelism.
    Ep(u32),
    /// GPU count.
    Gpus(u32),
    /// Checkpoint format (its preset layout).
    Quant(Dtype),
    /// Communication overlap.
    Overlap(Overlap),
    /// Another network between the nodes.
    Net(LinkProfile),
}

/// A what-if: `KEY=VALUE[,KEY=VALUE]` with keys gpu, link, net, tp, pp, ep, gpus, quant, overlap.
#[derive(Debug, Clone, PartialEq)]
pub struct WhatIf {
    /// As the user wrote it.
    pub text: String,
    /// The changes, in order.
    pub changes: Vec<Change>,
}

impl WhatIf {
    /// Parses one `--vs` value; catalog names are checked here.
    pub fn parse(s: &str) -> Result<Self, ModelError> {
        let pairs = split_pairs("--vs", s, "link=pcie5-p2p or tp=4,pp=2")?;
        let mut changes = Vec::new();
        for (k, v) in pairs {
            let what = format!("--vs {k}={v}");
            changes.push(match k {
                "gpu" => Change::Gpu(hw::gpu(v)?),
                "link" => Change::Link(hw::link(v)?),
                "net" => Change::Net(hw::net(v)?),
                "tp" => Change::Tp(whole(&what, v)?),
                "pp" => Change::Pp(whole(&what, v)?),
                "ep" => Change::Ep(whole(&what, v)?),
                "gpus" => Change::Gpus(whole(&what, v)?),
                "quant" => Change::Quant(Dtype::parse(&what, v)?),
                "overlap" => Change::Overlap(Overlap::parse(&what, v)?),
                other => {
                    return Err(ModelError::Input(format!(
                        "--vs: unknown key {other:?}; keys: gpu, link, net, tp, pp, ep, gpus, quant, overlap"
                    )))
                }
            });
        }
        Ok(WhatIf { text: s.to_string(), changes })
    }

    /// `base` with the changes made; refuses a plan that no longer holds together or fits.
    pub fn apply(&self, base: &Scenario) -> Result<Scenario, ModelError> {
        let mut s = base.clone();
        for c in &self.changes {
            match c {
                Change::Gpu(g) => s.gpu = g.clone(),
                Change::Link(l) => s.link = l.clone(),
                Change::Tp(v) => s.plan.tp = *v,
                Change::Pp(v) => s.plan.pp = *v,
                Change::Ep(v) => s.plan.ep = *v,
                Change::Gpus(v) => s.plan.gpus = *v,
                // The weights change; the cache stays what the deployment runs (stated or its
                // engine's default), so the what-if prices the weight format alone.
                Change::Quant(d) => s.quant = Quant { kv_cache: s.quant.kv_cache, ..Quant::checkpoint(*d, s.model.moe.is_some()) },
                Change::Overlap(o) => s.engine.overlap = *o,
                Change::Net(n) => match &mut s.cluster {
                    Some(c) => c.net = n.clone(),
                    None => {
                        return Err(ModelError::Input(format!(
                            "--vs {}: the plan is on one node, there is no network to change",
                            self.text
                        )))
                    }
                },
            }
        }
        let tag = |e: ModelError| ModelError::Input(format!("--vs {}: {e}", self.text));
        if let Some(c) = &mut s.cluster {
            // More or fewer GPUs are more or fewer whole nodes.
            if !s.plan.gpus.is_multiple_of(c.gpus_per_node) {
                return Err(tag(ModelError::Input(format!(
                    "--gpus {} is not a multiple of --gpus-per-node {}",
                    s.plan.gpus, c.gpus_per_node
                ))));
            }
            c.nodes = s.plan.gpus / c.gpus_per_node;
        }
        s.plan.check(&s.model).map_err(tag)?;
        s.check_placement().map_err(tag)?;
        s.check_fit().map_err(tag)?;
        Ok(s)
    }
}

/// Everything `servetune plan` is asked.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanRequest {
    /// The deployment.
    pub scenario: ScenarioSpec,
    /// Concurrencies to predict (each >= 1).
    pub concurrency: Vec<u32>,
    /// Objectives ranking and fixes are judged under.
    pub slos: Vec<Slo>,
    /// Rank every feasible plan and the fixes.
    pub rank: bool,
    /// Ranked plans to keep (>= 1).
    pub top: usize,
    /// What-ifs to compare.
    pub what_ifs: Vec<WhatIf>,
    /// Measured points to fit the engine to (empty: no calibration).
    pub calibration: Vec<Measured>,
    /// The benchmark workload the client-measured figures are for (run through a
    /// [`VirtualBench`] by [`build_report_with`]); its means should be the scenario's lengths.
    pub workload: Workload,
}

impl PlanRequest {
    /// `scenario` at the default concurrencies (1, 8, 32, 64, 128, 256), nothing else asked.
    pub fn new(scenario: ScenarioSpec) -> Self {
        Self {
            concurrency: vec![1, 8, 32, 64, 128, 256],
            slos: Vec::new(),
            rank: false,
            top: 5,
            what_ifs: Vec::new(),
            calibration: Vec::new(),
            workload: Workload::fixed(scenario.input_len, scenario.output_len),
            scenario,
        }
    }
}

/// The most clients `plan` predicts for: its virtual run draws 10 x concurrency requests by
/// default ([`MAX_REQUESTS`] at this figure).
pub const MAX_CONCURRENCY: u32 = 100_000;

/// The most requests one virtual run takes (`--requests`): it holds every request's lengths and
/// runs about 15 s per million on one core.
pub const MAX_REQUESTS: u64 = 1_000_000;

/// Runs a plan: resolves the scenario, calibrates, predicts every concurrency, finds saturation,
/// ranks plans and fixes, compares what-ifs. A plan that does not fit is a report with `fits:
/// false` and the smallest change that fits, not an error. The steady state only (no
/// client-measured figures): [`build_report_with`] adds them.
pub fn build_report(req: &PlanRequest) -> Result<PlanReport, ModelError> {
    build_report_with(req, None)
}

/// [`build_report`], and with `bench` each point also carries what a client running the request's
/// workload would measure ([`crate::predict::Point::client`]).
pub fn build_report_with(req: &PlanRequest, bench: Option<&dyn VirtualBench>) -> Result<PlanReport, ModelError> {
    if req.concurrency.is_empty() || req.concurrency.contains(&0) {
        return Err(ModelError::Input("--concurrency: give one or more concurrencies, each 1 or more".into()));
    }
    if let Some(c) = req.concurrency.iter().copied().find(|c| *c > MAX_CONCURRENCY) {
        return Err(ModelError::Input(format!(
            "--concurrency {c}: at most {MAX_CONCURRENCY} clients (the virtual run holds each of its 10 x concurrency requests); give a smaller concurrency"
        )));
    }
    if let Some(n) = req.workload.requests.filter(|n| *n > MAX_REQUESTS) {
        return Err(ModelError::Input(format!(
            "--requests {n}: at most {MAX_REQUESTS} (the virtual run holds every request and takes about 15 s per million); give fewer"
        )));
    }
    if req.top == 0 {
        return Err(ModelError::Input("--top 0 shows no plan: give 1 or more".into()));
    }
    let mut s = req.scenario.build()?;
    let calibration = calibrate::fit(&s, &req.calibration);
    if let Some(f) = &calibration {
        s.engine = f.engine;
        s.calibrated_on = Some(s.plan);
    }
    let range = ConcurrencyRange { max: req.concurrency.iter().copied().max() };
    let fit_error = s.check_fit().err().map(|e| e.to_string());
    let fits = fit_error.is_none();
    let fit_suggestion = if fits { None } else { Some(suggest_fit(&s, &req.scenario.published_formats(&s.model))) };
    if let Some(n) = req.workload.requests.filter(|n| *n == 0) {
        return Err(ModelError::Input(format!("--requests {n}: a run needs at least 1 request")));
    }
    let mut points: Vec<_> = if fits { req.concurrency.iter().map(|&c| s.point(c)).collect() } else { Vec::new() };
    if let Some(b) = bench {
        for p in &mut points {
            p.client = Some(b.run(&s, &req.workload, p.concurrency));
        }
    }
    let client = bench.map(|b| (b, &req.workload));
    let ranked = if req.rank { rank::rank_with(&s, &req.slos, range, client) } else { Vec::new() };
    let fixes = if req.rank && fits { rank::fixes_with(&s, &req.slos, range, client, &ranked) } else { Vec::new() };
    let ranked_plans = ranked.into_iter().take(req.top).collect();
    let mut vs = Vec::new();
    if fits {
        for w in &req.what_ifs {
            let t = w.apply(&s)?;
            let mut points: Vec<_> = req.concurrency.iter().map(|&c| t.point(c)).collect();
            if let Some(b) = bench {
                for p in points.iter_mut().filter(|p| p.output_tokens_per_s > 0.0) {
                    p.client = Some(b.run(&t, &req.workload, p.concurrency));
                }
            }
            vs.push(Versus { change: w.text.clone(), points });
        }
    }
    let interval = fits.then(|| crate::interval::for_scenario(&s));
    let point_intervals = interval.as_ref().map_or_else(Vec::new, |i| report::point_intervals(&points, i));
    Ok(PlanReport {
        schema: report::SCHEMA,
        model: s.model.name.clone(),
        params: s.model.params(),
        fits,
        fit_error,
        fit_suggestion,
        memory_per_gpu_gb: s.memory(),
        max_kv_tokens: s.max_kv_tokens(),
        max_concurrency: s.max_concurrency(),
        saturation: report::saturation(&s, &points),
        points,
        ranked_plans,
        fixes,
        vs,
        calibration,
        workload: bench.map(|_| req.workload),
        slos: req.slos.clone(),
        concurrency_range: range,
        interval,
        point_intervals,
        engine_release: req.scenario.release(),
        scenario: s,
    })
}

/// The smallest changes that make `s` fit: the widest other published format that fits, and the
/// fewest GPUs (a whole multiple, the TP group kept and more pipeline stages) that fit.
pub fn suggest_fit(s: &Scenario, published: &[Dtype]) -> FitSuggestion {
    let has_experts = s.model.moe.is_some();
    let current = s.quant.headline(has_experts);
    let mut formats: Vec<Dtype> = published.iter().copied().filter(|d| *d != current).collect();
    formats.sort_by(|a, b| b.bytes().total_cmp(&a.bytes()));
    // Each format keeps the deployment's KV cache (stated, or its engine's default).
    let with = |d: Dtype| Quant { kv_cache: s.quant.kv_cache, ..Quant::checkpoint(d, has_experts) };
    let quant = formats.into_iter().find(|d| Scenario { quant: with(*d), ..s.clone() }.check_fit().is_ok());
    let gpus = (2..=8u32).find_map(|k| {
        let plan = Plan { gpus: s.plan.gpus * k, pp: s.plan.pp * k, ..s.plan };
        let mut t = Scenario { plan, ..s.clone() };
        if let Some(c) = &mut t.cluster {
            c.nodes *= k;
        }
        (plan.check(&s.model).is_ok() && t.check_placement().is_ok() && t.check_fit().is_ok())
            .then(|| GpuSuggestion { gpus: plan.gpus, plan: plan.label() })
    });
    FitSuggestion { quant, gpus }
}

#[cfg(test)]
mod tests;
