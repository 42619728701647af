//! What `servetune plan` is asked, as plain data the CLI (or the demo, or `sim --from-plan`, or a
//! campaign) fills: a [`ScenarioSpec`] resolves into a [`Scenario`], a [`WhatIf`] changes one, and
//! [`build_report`] runs the whole plan into a [`PlanReport`].

use servetune_stats::Slo;

use crate::calibrate::{self, Measured};
use crate::hw::{self, Cluster, GpuSpec, LinkProfile};
use crate::predict::{Engine, EngineName, Overlap, Plan, Scenario};
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
    /// Tensor parallelism (None: all GPUs).
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
}

impl ScenarioSpec {
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
            request_latency_ms: None,
            moe_efficiency: None,
            mem_fraction: None,
            engine: EngineName::Sglang,
        }
    }

    /// Parses `KEY=VALUE[,KEY=VALUE]` given to `flag` (`sim --from-plan`): keys model (catalog),
    /// gpu, gpus, link, quant, kv-dtype, tp, pp, ep, dp-attention, input-len, output-len,
    /// max-running, overlap, cuda-graphs, mixed-prefill, step-overhead-ms, moe-efficiency, engine.
    /// `model` and `gpu` are required.
    pub fn parse_pairs(flag: &str, s: &str) -> Result<Self, ModelError> {
        let pairs = split_pairs(flag, s, "model=glm-5,gpu=rtx-pro-6000-se,gpus=8,link=pcie-host-staged")?;
        let get = |k: &str| pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        let model = get("model")
            .ok_or_else(|| ModelError::Input(format!("{flag}: give model=NAME (catalog: {})", spec::catalog_names().join(", "))))?;
        let gpu =
            get("gpu").ok_or_else(|| ModelError::Input(format!("{flag}: give gpu=NAME (catalog: {})", hw::gpu_names().join(", "))))?;
        let mut out = ScenarioSpec::new(ModelSource::Catalog(model.to_string()), gpu);
        for (k, v) in &pairs {
            out.set(flag, k, v)?;
        }
        Ok(out)
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
            "moe-efficiency" => {
                self.moe_efficiency = Some(v.parse().map_err(|_| ModelError::Input(format!("{what}: not a fraction like 0.8")))?)
            }
            "mem-fraction" => {
                self.mem_fraction = Some(v.parse().map_err(|_| ModelError::Input(format!("{what}: not a fraction like 0.9")))?)
            }
            "engine" => self.engine = EngineName::parse(&what, v)?,
            other => {
                return Err(ModelError::Input(format!(
                    "{flag}: unknown key {other:?}; keys: model, gpu, gpus, nodes, gpus-per-node, nics-per-node, net, link, quant, kv-dtype, tp, pp, ep, dp-attention, input-len, output-len, max-running, overlap, cuda-graphs, mixed-prefill, step-overhead-ms, request-latency-ms, moe-efficiency, mem-fraction, engine"
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
        let plan = Plan { gpus: self.gpus, tp: self.tp.unwrap_or(self.gpus), pp: self.pp, ep: self.ep, dp_attention: self.dp_attention };
        plan.check(&model)?;
        let cluster = self.resolve_cluster()?;
        if self.input_len == 0 || self.output_len == 0 {
            return Err(ModelError::Input("--input-len and --output-len must be at least 1 token".into()));
        }
        if self.max_running == Some(0) {
            return Err(ModelError::Input("--max-running 0 runs nothing: give 1 or more, or leave it out".into()));
        }
        let defaults = self.engine.defaults();
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
        let request_step_us = match self.request_step_us {
            Some(r) if !(r.is_finite() && REQUEST_STEP_US.contains(&r)) => {
                return Err(ModelError::Input(format!(
                    "--request-step-us {r:?} is out of range: give microseconds from {} to {} per running request per decode step (the fitted default is {})",
                    REQUEST_STEP_US.start(),
                    REQUEST_STEP_US.end(),
                    defaults.request_step_us
                )))
            }
            Some(r) => r,
            None => defaults.request_step_us,
        };
        let request_latency_ms = match self.request_latency_ms {
            Some(l) if !(l.is_finite() && REQUEST_LATENCY_MS.contains(&l)) => {
                return Err(ModelError::Input(format!(
                    "--request-latency-ms {l:?} is out of range: give milliseconds from {} to {} (sglang {}, vLLM {}, TensorRT-LLM {}: VALIDATION.md)",
                    REQUEST_LATENCY_MS.start(),
                    REQUEST_LATENCY_MS.end(),
                    crate::predict::SGLANG_REQUEST_LATENCY_MS,
                    crate::predict::VLLM_REQUEST_LATENCY_MS,
                    crate::predict::TRTLLM_REQUEST_LATENCY_MS
                )))
            }
            Some(l) => l,
            None => defaults.request_latency_ms,
        };
        let moe_efficiency = match self.moe_efficiency {
            Some(f) if !(f.is_finite() && (MIN_MOE_EFFICIENCY..=1.0).contains(&f)) => {
                return Err(ModelError::Input(format!(
                    "moe-efficiency {f:?}: give the fraction of memory bandwidth the MoE kernels reach, from {MIN_MOE_EFFICIENCY} to 1"
                )))
            }
            given => given.unwrap_or(defaults.moe_efficiency),
        };
        let mem_fraction = fraction(self.mem_fraction, defaults.mem_fraction, |f| {
            format!(
                "--mem-fraction {f}: give the share of each GPU's memory the engine may use, above 0 and at most 1 (sglang's --mem-fraction-static, vLLM's --gpu-memory-utilization)"
            )
        })?;
        let engine = Engine {
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
            mem_fraction,
            ..defaults
        };
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
        })
        .and_then(|s| s.check_placement().map(|_| s))
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
        if let Some(k) = q.kv_cache {
            quant.kv_cache = k;
        }
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

fn split_pairs<'a>(flag: &str, s: &'a str, example: &str) -> Result<Vec<(&'a str, &'a str)>, ModelError> {
    s.split(',')
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .filter(|(k, v)| !k.is_empty() && !v.is_empty())
                .ok_or_else(|| ModelError::Input(format!("{flag} {s:?}: write KEY=VALUE[,KEY=VALUE], e.g. {example}")))
        })
        .collect()
}

/// A stated fraction in (0, 1], else `default`; `why` words the refusal of any other value.
/// `--step-overhead-ms`: host time per decode step, up to 10 s (the fitted floor is well under 1 ms;
/// a step that long is a stalled server, not a setting).
pub const STEP_OVERHEAD_MS: std::ops::RangeInclusive<f64> = 0.0..=1e4;

/// `--request-step-us`: per running request per decode step, up to 1 s (the fitted value is 25 us).
pub const REQUEST_STEP_US: std::ops::RangeInclusive<f64> = 0.0..=1e6;

/// `--request-latency-ms`: the serving path's latency outside the GPU, up to 10 minutes.
pub const REQUEST_LATENCY_MS: std::ops::RangeInclusive<f64> = 0.0..=6e5;

/// The lowest MoE efficiency taken: below 1% of memory bandwidth a step's time is a typo's
/// (and reaches durations no clock holds).
pub const MIN_MOE_EFFICIENCY: f64 = 0.01;

fn fraction(given: Option<f64>, default: f64, why: impl FnOnce(f64) -> String) -> Result<f64, ModelError> {
    match given {
        Some(f) if !(f.is_finite() && f > 0.0 && f <= 1.0) => Err(ModelError::Input(why(f))),
        Some(f) => Ok(f),
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
                Change::Quant(d) => s.quant = Quant::checkpoint(*d, s.model.moe.is_some()),
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
    let quant = formats.into_iter().find(|d| Scenario { quant: Quant::checkpoint(*d, has_experts), ..s.clone() }.check_fit().is_ok());
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
mod tests {
    use super::*;

    fn glm_on_rtx(quant: Option<Dtype>) -> ScenarioSpec {
        let mut s = ScenarioSpec::new(ModelSource::Catalog("glm-5".into()), "rtx-pro-6000-se");
        s.link = LinkSource::Catalog("pcie-host-staged".into());
        s.quant.checkpoint = quant;
        s
    }

    #[test]
    fn quant_defaults_to_the_published_checkpoint() {
        assert_eq!(glm_on_rtx(None).build().expect("glm").quant.experts, Dtype::Fp8);
        let mut oss = ScenarioSpec::new(ModelSource::Catalog("gpt-oss-120b".into()), "h100-sxm");
        oss.gpus = 1;
        assert_eq!(oss.build().expect("oss").quant.experts, Dtype::Mxfp4);
        assert_eq!(glm_on_rtx(Some(Dtype::Nvfp4)).build().expect("nvfp4").quant.experts, Dtype::Nvfp4);
    }

    #[test]
    fn a_dense_models_4_bit_checkpoint_quantizes_every_linear_layer_and_a_moe_models_only_its_experts() {
        let mut llama = ScenarioSpec::new(ModelSource::Catalog("llama-3.1-70b".into()), "b200");
        llama.gpus = 1;
        llama.quant.checkpoint = Some(Dtype::Nvfp4);
        let s = llama.build().expect("llama nvfp4");
        assert_eq!((s.quant.attention, s.quant.dense_ffn, s.quant.embeddings), (Dtype::Nvfp4, Dtype::Nvfp4, Dtype::Bf16));
        // 70.6B parameters at 0.5625 bytes, the 2.1B of embeddings and LM head in bf16: about 43 GB.
        let gb = s.weight_bytes_gpu() / 1e9;
        assert!((40.0..46.0).contains(&gb), "{gb} GB");
        // A part's flag still wins.
        llama.quant.attention = Some(Dtype::Fp8);
        assert_eq!(llama.build().expect("--quant-attention").quant.attention, Dtype::Fp8);
        assert_eq!(glm_on_rtx(Some(Dtype::Nvfp4)).build().expect("glm").quant.attention, Dtype::Bf16, "a MoE model keeps BF16 attention");
        // `--vs quant=nvfp4` from a dense FP8 plan takes the same layout.
        llama.quant = QuantSpec::default();
        llama.quant.checkpoint = Some(Dtype::Fp8);
        let fp8 = llama.build().expect("llama fp8");
        let vs = WhatIf::parse("quant=nvfp4").expect("parse").apply(&fp8).expect("applies");
        assert_eq!((vs.quant.attention, vs.quant.dense_ffn), (Dtype::Nvfp4, Dtype::Nvfp4));
    }

    #[test]
    fn a_mixed_precision_checkpoint_quantizes_each_part_as_it_says_unless_quant_names_one() {
        let text = include_str!("../tests/configs/nvidia--Qwen3.6-35B-A3B-NVFP4.json").to_string();
        let mut spec = ScenarioSpec::new(ModelSource::Config { text, path: "q.json".into() }, "h200");
        spec.gpus = 1;
        let q = spec.build().expect("mixed").quant;
        // Its LM head is W4A16 NVFP4: the format a decode step reads it in.
        assert_eq!((q.attention, q.experts, q.shared_experts, q.embeddings), (Dtype::Fp8, Dtype::Int4, Dtype::Int4, Dtype::Int4));
        spec.quant.checkpoint = Some(Dtype::Nvfp4);
        let q = spec.build().expect("--quant").quant;
        assert_eq!((q.attention, q.experts), (Dtype::Bf16, Dtype::Nvfp4), "--quant names the whole checkpoint");
        spec.quant.checkpoint = None;
        spec.quant.attention = Some(Dtype::Bf16);
        assert_eq!(spec.build().expect("--quant-attention").quant.attention, Dtype::Bf16, "a part's flag still wins");
    }

    #[test]
    fn a_plan_that_does_not_fit_suggests_a_published_format_and_more_gpus() {
        // GLM-5's published FP8 and BF16 checkpoints need more than 8 RTX PRO 6000s hold.
        for quant in [None, Some(Dtype::Bf16)] {
            let r = build_report(&PlanRequest::new(glm_on_rtx(quant))).expect("report");
            assert!(!r.fits);
            assert!(r.points.is_empty());
            let sug = r.fit_suggestion.expect("suggestion");
            assert_eq!(sug.quant, Some(Dtype::Nvfp4), "the widest published format that fits");
        }
        let r = build_report(&PlanRequest::new(glm_on_rtx(None))).expect("report");
        let sug = r.fit_suggestion.expect("suggestion");
        assert_eq!(sug.gpus, Some(GpuSuggestion { gpus: 16, plan: "TP8+PP2".into() }));
        assert_eq!(crate::report::suggestion_words(&sug), "use --quant nvfp4, or 16 GPUs (TP8+PP2)");
        // BF16 (186 GB per GPU at TP8) needs three pipeline stages.
        let r = build_report(&PlanRequest::new(glm_on_rtx(Some(Dtype::Bf16)))).expect("report");
        assert_eq!(r.fit_suggestion.and_then(|s| s.gpus).map(|g| g.gpus), Some(24));
    }

    #[test]
    fn what_if_parses_typed_changes_and_applies_them() {
        let w = WhatIf::parse("link=pcie5-p2p,tp=4,pp=2").expect("parse");
        assert!(matches!(&w.changes[0], Change::Link(l) if l.kind == hw::LinkKind::PcieP2p));
        assert_eq!(w.changes[1..], [Change::Tp(4), Change::Pp(2)]);
        let base = glm_on_rtx(Some(Dtype::Nvfp4)).build().expect("base");
        let t = w.apply(&base).expect("apply");
        assert_eq!((t.plan.tp, t.plan.pp, t.link.name.as_str()), (4, 2, "pcie5-p2p"));
        for (bad, needle) in
            [("tp", "KEY=VALUE"), ("color=red", "unknown key \"color\""), ("tp=x", "not a whole number"), ("gpu=v100", "known:")]
        {
            let e = WhatIf::parse(bad).expect_err(bad);
            assert!(e.to_string().contains(needle), "{bad}: {e}");
        }
        let e = WhatIf::parse("tp=3").expect("parse").apply(&base).expect_err("tp 3 of 8");
        assert!(e.to_string().starts_with("--vs tp=3: "), "{e}");
    }

    #[test]
    fn from_plan_pairs_build_the_same_scenario_as_the_fields() {
        let a = ScenarioSpec::parse_pairs("--from-plan", "model=glm-5,gpu=rtx-pro-6000-se,gpus=8,link=pcie-host-staged,quant=nvfp4,tp=8")
            .expect("pairs");
        assert_eq!(a.build().expect("a"), glm_on_rtx(Some(Dtype::Nvfp4)).build().expect("b"));
        let e = ScenarioSpec::parse_pairs("--from-plan", "gpu=h200").expect_err("model");
        assert!(e.to_string().contains("give model=NAME"), "{e}");
        let e = ScenarioSpec::parse_pairs("--from-plan", "model=glm-5,gpu=h200,overlap=maybe").expect_err("overlap");
        assert!(e.to_string().contains("overlap=maybe"), "{e}");
    }

    #[test]
    fn a_stated_per_request_cost_replaces_the_fitted_one_and_a_stated_overhead_keeps_it() {
        let fitted = glm_on_rtx(None).build().expect("default");
        let pairs = ScenarioSpec::parse_pairs("--from-plan", "model=glm-5,gpu=rtx-pro-6000-se,request-step-us=0").expect("pairs");
        assert_eq!(pairs.request_step_us, Some(0.0));
        let mut s = glm_on_rtx(None);
        s.request_step_us = Some(0.0);
        let none = s.build().expect("zero");
        assert_eq!(none.engine.request_step_us, 0.0);
        // At batch 64 the fitted cost adds 64 x request_step_us to the step.
        let gap = fitted.decode_step_ms(64.0, 1536.0) - none.decode_step_ms(64.0, 1536.0);
        assert!((gap - 64.0 * fitted.engine.request_step_us / 1e3).abs() < 1e-9, "{gap}");
        let mut stated = glm_on_rtx(None);
        stated.step_overhead_ms = Some(5.0);
        assert_eq!(stated.build().expect("overhead").engine.request_step_us, fitted.engine.request_step_us);
    }

    #[test]
    fn impossible_numbers_are_refused_before_predicting() {
        let mut s = glm_on_rtx(None);
        s.link_bw_gbs = Some(-5.0);
        assert!(s.build().expect_err("bw").to_string().contains("beta_gbs"));
        let mut s = glm_on_rtx(None);
        s.step_overhead_ms = Some(f64::NAN);
        assert!(s.build().expect_err("overhead").to_string().contains("--step-overhead-ms"));
        let mut s = glm_on_rtx(None);
        s.request_latency_ms = Some(-1.0);
        assert!(s.build().expect_err("latency").to_string().contains("--request-latency-ms -1"));
        let mut s = glm_on_rtx(None);
        s.request_latency_ms = Some(34.0);
        assert_eq!(s.build().expect("vllm latency").engine.request_latency_ms, 34.0);
        for bad in [f64::NAN, -1.0, f64::INFINITY] {
            let mut s = glm_on_rtx(None);
            s.request_step_us = Some(bad);
            assert!(s.build().expect_err("per-request").to_string().contains("--request-step-us"), "{bad}");
        }
        let mut r = PlanRequest::new(glm_on_rtx(None));
        r.top = 0;
        assert!(build_report(&r).expect_err("top").to_string().contains("--top 0"));
    }

    #[test]
    fn absurd_client_and_request_counts_are_refused_before_the_virtual_run_allocates_them() {
        let mut r = PlanRequest::new(glm_on_rtx(Some(Dtype::Nvfp4)));
        r.concurrency = vec![8, u32::MAX];
        let e = build_report(&r).expect_err("concurrency").to_string();
        assert!(e.contains(&format!("--concurrency {}", u32::MAX)) && e.contains(&MAX_CONCURRENCY.to_string()), "{e}");
        r.concurrency = vec![MAX_CONCURRENCY];
        r.workload.requests = Some(u64::MAX);
        let e = build_report(&r).expect_err("requests").to_string();
        assert!(e.contains(&format!("--requests {}", u64::MAX)) && e.contains(&MAX_REQUESTS.to_string()), "{e}");
        // The limits themselves are accepted (steady state only: no virtual run here).
        r.workload.requests = Some(MAX_REQUESTS);
        assert!(build_report(&r).is_ok());
    }

    #[test]
    fn more_tensor_parallel_ranks_than_attention_heads_are_refused_unless_attention_is_data_parallel() {
        let mut s = ScenarioSpec::new(ModelSource::Catalog("glm-5".into()), "h200");
        s.gpus = 128;
        s.tp = Some(128);
        let e = s.build().expect_err("tp 128 over 64 heads").to_string();
        assert!(e.contains("--tp 128") && e.contains("64 attention heads"), "{e}");
        s.dp_attention = true;
        s.ep = 128;
        assert!(s.build().is_ok(), "DP attention holds every head on each rank");
        let mut s = ScenarioSpec::new(ModelSource::Catalog("glm-5".into()), "h200");
        s.gpus = 64;
        s.tp = Some(64);
        assert!(s.build().is_ok(), "one head per rank is allowed");
    }

    #[test]
    fn an_engine_brings_its_defaults_and_the_flags_still_override_them() {
        let sglang = glm_on_rtx(None).build().expect("sglang");
        assert_eq!(sglang.engine.serving, EngineName::Sglang);
        assert!(!sglang.engine.mixed_prefill);
        let mut s = glm_on_rtx(None);
        s.engine = EngineName::Vllm;
        let vllm = s.build().expect("vllm");
        assert_eq!(vllm.engine.serving, EngineName::Vllm);
        assert!(vllm.engine.mixed_prefill, "vLLM V1 mixes prefill into decode steps");
        assert_eq!(vllm.engine.request_latency_ms, crate::predict::VLLM_REQUEST_LATENCY_MS);
        assert_eq!(vllm.engine.mem_fraction, crate::predict::VLLM_GPU_MEMORY_UTILIZATION);
        // The fitted step constants are the same for every engine.
        assert_eq!(vllm.engine.kernel_overhead_us, sglang.engine.kernel_overhead_us);
        s.request_latency_ms = Some(5.0);
        assert_eq!(s.build().expect("vllm, stated latency").engine.request_latency_ms, 5.0);
        // A stated memory share replaces the engine's, and more of it holds more KV.
        s.mem_fraction = Some(0.95);
        let roomier = s.build().expect("vllm at 0.95");
        assert_eq!(roomier.engine.mem_fraction, 0.95);
        assert!(roomier.memory().kv_gb > vllm.memory().kv_gb);
        for bad in [0.0, 1.5, f64::NAN, -0.1] {
            s.mem_fraction = Some(bad);
            let e = s.build().expect_err("bad memory share").to_string();
            assert!(e.contains("--mem-fraction") && e.contains("above 0 and at most 1"), "{e}");
        }
        let pairs = ScenarioSpec::parse_pairs("--vs", "model=glm-5,gpu=h200,mem-fraction=0.8").expect("pairs").build().expect("0.8");
        assert_eq!(pairs.engine.mem_fraction, 0.8);
        let trt = ScenarioSpec::parse_pairs("--from-plan", "model=glm-5,gpu=h200,engine=trtllm").expect("pairs").build().expect("trt");
        assert_eq!(trt.engine.serving, EngineName::Trtllm);
        assert!(trt.engine.mixed_prefill);
        let e = ScenarioSpec::parse_pairs("--from-plan", "model=glm-5,gpu=h200,engine=tgi").expect_err("tgi");
        assert!(e.to_string().contains("engine=tgi") && e.to_string().contains("sglang, vllm or trtllm"), "{e}");
    }

    #[test]
    fn moe_efficiency_replaces_the_default_and_tuned_kernels_predict_more() {
        let pairs = "model=glm-5,gpu=rtx-pro-6000-se,gpus=8,link=pcie-host-staged,quant=nvfp4,tp=8";
        let untuned = ScenarioSpec::parse_pairs("--from-plan", pairs).expect("pairs").build().expect("untuned");
        let tuned =
            ScenarioSpec::parse_pairs("--from-plan", &format!("{pairs},moe-efficiency=0.8")).expect("pairs").build().expect("tuned");
        assert_eq!(tuned.expert_stream_efficiency(), 0.8);
        assert!(untuned.expert_stream_efficiency() < 0.8);
        assert!(tuned.point(64).output_tokens_per_s > untuned.point(64).output_tokens_per_s);
        for bad in ["0", "1.5", "NaN"] {
            let e =
                ScenarioSpec::parse_pairs("--from-plan", &format!("{pairs},moe-efficiency={bad}")).expect("pairs").build().expect_err(bad);
            assert!(e.to_string().contains("moe-efficiency"), "{e}");
        }
    }

    fn deepseek_on_h100(gpus: u32) -> ScenarioSpec {
        let mut s = ScenarioSpec::new(ModelSource::Catalog("deepseek-v3".into()), "h100-sxm");
        s.gpus = gpus;
        s
    }

    #[test]
    fn node_flags_resolve_to_a_cluster_or_are_refused_naming_the_flag() {
        let mut s = deepseek_on_h100(16);
        s.gpus_per_node = Some(8);
        s.net = Some("ib-ndr".into());
        s.tp = Some(8);
        s.pp = 2;
        let c = s.build().expect("2 x 8").cluster.expect("cluster");
        assert_eq!((c.nodes, c.gpus_per_node, c.nics_per_node, c.net.name.as_str()), (2, 8, 8, "ib-ndr"));
        let pairs = "model=deepseek-v3,gpu=h100-sxm,gpus=16,gpus-per-node=8,net=ib-ndr,tp=8,pp=2";
        assert_eq!(ScenarioSpec::parse_pairs("--from-plan", pairs).expect("pairs").build().expect("pairs"), s.build().expect("spec"));
        let mut by_nodes = s.clone();
        by_nodes.gpus_per_node = None;
        by_nodes.nodes = Some(2);
        assert_eq!(by_nodes.build().expect("--nodes 2").cluster, Some(c));
        type Edit = &'static dyn Fn(&mut ScenarioSpec);
        let cases: [(Edit, &str); 7] = [
            (&|s| s.gpus_per_node = Some(6), "--gpus 16 is not a multiple of --gpus-per-node 6"),
            (&|s| s.nodes = Some(3), "--gpus 16 is not --nodes 3 x --gpus-per-node 8 = 24"),
            (&|s| s.net = None, "needs --net"),
            (&|s| s.net = Some("nvlink".into()), "give it to --link"),
            (
                &|s| {
                    s.gpus = 24;
                    s.tp = Some(12);
                    s.pp = 1;
                },
                "--tp 12 does not fit",
            ),
            (&|s| s.gpus_per_node = Some(0), "--gpus-per-node 0"),
            (&|s| s.nics_per_node = Some(0), "--nics-per-node 0"),
        ];
        for (change, needle) in cases {
            let mut t = s.clone();
            change(&mut t);
            let e = t.build().map(|_| ()).expect_err(needle);
            assert!(e.to_string().contains(needle), "{needle}: {e}");
        }
        let mut measured = s.clone();
        measured.net_bw_gbs = Some(20.0);
        measured.net_latency_us = Some(5.0);
        let net = measured.build().expect("measured").cluster.expect("cluster").net;
        assert_eq!((net.alpha_us, net.beta_gbs), (5.0, 20.0));
        assert!(net.source.starts_with("measured (--net-bw); measured (--net-latency)"), "{}", net.source);
        measured.net_bw_gbs = Some(-1.0);
        assert!(measured.build().expect_err("negative").to_string().contains(
            "--net-latency/--net-bw: link bandwidth (beta_gbs) -1.0 is not a bandwidth this tool takes: give GB/s from 0.001 to 100000"
        ));
        let mut one = deepseek_on_h100(8);
        one.net = Some("ib-ndr".into());
        assert!(one.build().expect_err("net on one node").to_string().contains("--nodes or --gpus-per-node"));
    }

    /// `--nodes 1` (or a node as large as the deployment) is the single-node plan, number for number.
    #[test]
    fn one_node_is_the_single_node_plan() {
        let plain = deepseek_on_h100(8);
        let mut one = plain.clone();
        one.gpus_per_node = Some(8);
        one.net = Some("eth-100g".into());
        let (a, b) = (plain.build().expect("plain"), one.build().expect("one node"));
        assert_eq!(a, b);
        assert!(b.cluster.is_none());
    }

    #[test]
    fn what_if_changes_the_network_and_the_node_count_with_the_gpus() {
        let mut s = deepseek_on_h100(16);
        s.gpus_per_node = Some(8);
        s.net = Some("eth-100g".into());
        s.tp = Some(16);
        let base = s.build().expect("base");
        let t = WhatIf::parse("net=ib-xdr").expect("parse").apply(&base).expect("apply");
        assert_eq!(t.cluster.as_ref().map(|c| c.net.name.as_str()), Some("ib-xdr"));
        assert!(t.point(32).output_tokens_per_s > base.point(32).output_tokens_per_s);
        let t = WhatIf::parse("gpus=32,tp=8,pp=4").expect("parse").apply(&base).expect("apply");
        assert_eq!(t.cluster.map(|c| c.nodes), Some(4));
        let one = deepseek_on_h100(8).build().expect("one node");
        assert!(WhatIf::parse("net=ib-ndr").expect("parse").apply(&one).expect_err("one node").to_string().contains("one node"));
        assert!(WhatIf::parse("net=nvlink").expect_err("not a net").to_string().contains("--net \"nvlink\" is unknown"));
    }
}
