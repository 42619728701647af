//! GPUs and links, read from the data files `data/gpus.json` and `data/links.json` (every value
//! carries its source there), the link kinds the model branches on (all-reduce costs are in [`crate::comm`]).
//! Links can be replaced by measured values (`--link-latency`, `--link-bw`, or a `servetune fabric`
//! JSON, see [`crate::inputs`]).

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::quant::ComputeFormat;
use crate::ModelError;

/// A GPU architecture: what its tensor (matrix) cores compute natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    /// NVIDIA Ampere (A100, SM80): BF16 tensor cores, no FP8 or FP4.
    Ampere,
    /// NVIDIA Ada Lovelace (L40S, RTX 4090, SM89): BF16 and FP8.
    Ada,
    /// NVIDIA Hopper (H100, H200, SM90): BF16 and FP8.
    Hopper,
    /// NVIDIA data-centre Blackwell (B200, GB200, B300, SM100): BF16, FP8 and FP4.
    Blackwell,
    /// NVIDIA RTX Blackwell (RTX PRO 6000, RTX 5090, SM120): BF16, FP8 and FP4.
    BlackwellRtx,
    /// AMD CDNA 3 (MI300X, MI325X): BF16 and FP8.
    Cdna3,
    /// AMD CDNA 4 (MI355X): BF16, FP8 and MXFP4.
    Cdna4,
}

impl Arch {
    /// The compute formats its tensor cores run natively, widest first.
    pub fn formats(self) -> &'static [ComputeFormat] {
        match self {
            Arch::Ampere => &[ComputeFormat::Bf16],
            Arch::Ada | Arch::Hopper | Arch::Cdna3 => &[ComputeFormat::Bf16, ComputeFormat::Fp8],
            Arch::Blackwell | Arch::BlackwellRtx | Arch::Cdna4 => &[ComputeFormat::Bf16, ComputeFormat::Fp8, ComputeFormat::Fp4],
        }
    }
}

/// One GPU model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuSpec {
    /// Catalog name (`--gpu`).
    pub name: String,
    /// Its architecture (the compute formats it supports).
    pub arch: Arch,
    /// PCIe generation of its host link.
    pub pcie_gen: u32,
    /// The catalog link between two of these GPUs in their usual server (`--link` default).
    pub link: String,
    /// Memory the driver reports (nvidia-smi's total), GB (10^9 bytes): 85.5 for an "80 GB" H100,
    /// whose datasheet size is binary (docs/reference.md).
    pub memory_gb: f64,
    /// Peak memory bandwidth, GB/s.
    pub mem_bw_gbs: f64,
    /// Dense BF16 tensor TFLOPS (no sparsity).
    pub bf16_tflops: f64,
    /// Dense FP8 tensor TFLOPS; 0 when the GPU has no FP8 tensor cores.
    pub fp8_tflops: f64,
    /// Dense FP4 tensor TFLOPS; 0 when the GPU has no FP4 tensor cores.
    pub fp4_tflops: f64,
    /// NVLink bandwidth per direction, GB/s (0: none).
    pub nvlink_gbs: f64,
    /// Where the numbers come from (one line per value in `crates/model/data/gpus.json`).
    pub source: String,
}

impl GpuSpec {
    /// Dense TFLOPS for a GEMM computing in `fmt`; falls back to the next wider format when the GPU
    /// lacks the narrow one.
    pub fn tflops(&self, fmt: ComputeFormat) -> f64 {
        match fmt {
            ComputeFormat::Fp4 if self.fp4_tflops > 0.0 => self.fp4_tflops,
            ComputeFormat::Fp4 | ComputeFormat::Fp8 if self.fp8_tflops > 0.0 => self.fp8_tflops,
            _ => self.bf16_tflops,
        }
    }
}

/// What a link physically is: the model and the fixes branch on this, never on a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkKind {
    /// NVLink between the GPUs.
    Nvlink,
    /// PCIe with GPU peer-to-peer DMA (`p2p` in a fabric document).
    #[serde(alias = "p2p")]
    PcieP2p,
    /// PCIe without peer access: every copy is staged through host memory.
    HostStaged,
    /// InfiniBand between nodes (NCCL's NET/IB transport, GPUDirect RDMA).
    Infiniband,
    /// RDMA over Converged Ethernet between nodes (NCCL's NET/IB transport over RoCEv2).
    Roce,
    /// Plain Ethernet between nodes: NCCL's NET/Socket transport over TCP.
    Ethernet,
    /// AMD Infinity Fabric (xGMI): one link from each GPU to each peer (a fully connected mesh, no
    /// switch), so a GPU reaches its n-1 peers at once over n-1 links.
    Xgmi,
}

impl LinkKind {
    /// Words for a reader.
    pub fn describe(self) -> &'static str {
        match self {
            LinkKind::Nvlink => "NVLink",
            LinkKind::PcieP2p => "PCIe peer-to-peer",
            LinkKind::HostStaged => "PCIe staged through host memory",
            LinkKind::Infiniband => "InfiniBand",
            LinkKind::Roce => "RoCE",
            LinkKind::Ethernet => "Ethernet (TCP sockets)",
            LinkKind::Xgmi => "AMD xGMI (fully connected)",
        }
    }

    /// Whether the link joins nodes (`--net`) rather than the GPUs of one node (`--link`).
    pub fn is_network(self) -> bool {
        matches!(self, LinkKind::Infiniband | LinkKind::Roce | LinkKind::Ethernet)
    }
}

/// A GPU-to-GPU link in the alpha-beta model: time(bytes) = alpha + bytes / beta. The one link
/// type: catalog links, `--link-latency`/`--link-bw` overrides and a `servetune fabric` document's
/// `link` (whose `mode` is read as the kind) all become this.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkProfile {
    /// Catalog name, or `measured-...` for a `servetune fabric` link.
    pub name: String,
    /// What the link is.
    #[serde(alias = "mode")]
    pub kind: LinkKind,
    /// Latency of one copy between two GPUs, microseconds; feeds the per-step latency of an all-reduce
    /// ([`crate::comm`]), never a whole all-reduce.
    pub alpha_us: f64,
    /// Bandwidth per direction, GB/s.
    pub beta_gbs: f64,
    /// Where the numbers come from.
    pub source: String,
}

/// The link and network latencies a flag or a measurement may give, microseconds: from 0 (a
/// latency too small to measure) to one second, a thousand times the slowest network hop.
pub const LINK_LATENCY_US: std::ops::RangeInclusive<f64> = 0.0..=1e6;

/// The link and network bandwidths a flag or a measurement may give, GB/s: from 1 MB/s (below
/// any real interconnect; slower would turn one step into hours) to 100,000 GB/s (over 50 times
/// NVLink 5).
pub const LINK_BANDWIDTH_GBS: std::ops::RangeInclusive<f64> = 1e-3..=1e5;

impl LinkProfile {
    /// Refuses a latency or bandwidth that is not finite or outside [`LINK_LATENCY_US`] and
    /// [`LINK_BANDWIDTH_GBS`], naming `origin` (the flag or file the link came from).
    pub fn validate(&self, origin: &str) -> Result<(), ModelError> {
        if !(self.alpha_us.is_finite() && LINK_LATENCY_US.contains(&self.alpha_us)) {
            return Err(ModelError::Input(format!(
                "{origin}: link latency (alpha_us) {:?} is not a latency this tool takes: give microseconds from {} to {}",
                self.alpha_us,
                LINK_LATENCY_US.start(),
                LINK_LATENCY_US.end()
            )));
        }
        if !(self.beta_gbs.is_finite() && LINK_BANDWIDTH_GBS.contains(&self.beta_gbs)) {
            return Err(ModelError::Input(format!(
                "{origin}: link bandwidth (beta_gbs) {:?} is not a bandwidth this tool takes: give GB/s from {} to {}",
                self.beta_gbs,
                LINK_BANDWIDTH_GBS.start(),
                LINK_BANDWIDTH_GBS.end()
            )));
        }
        // Printed in every report: a terminal must not act on what a file says.
        for (field, v) in [("name", &self.name), ("source", &self.source)] {
            if v.chars().any(char::is_control) {
                return Err(ModelError::Input(format!(
                    "{origin}: link {field} {v:?} holds a control character: give a name and source of printable text"
                )));
            }
        }
        Ok(())
    }
}

/// One value of a data file and where it comes from.
#[derive(Debug, Clone, Deserialize)]
struct Sourced {
    value: f64,
    source: String,
}

#[derive(Debug, Deserialize)]
struct GpuEntry {
    name: String,
    /// Other spellings of the same product (nvidia-smi's and amd-smi's names, AIConfigurator's
    /// system names, shorthands), matched after [`normalize_gpu_name`].
    #[serde(default)]
    aliases: Vec<String>,
    arch: Arch,
    link: String,
    pcie_gen: Sourced,
    memory_gb: Sourced,
    mem_bw_gbs: Sourced,
    bf16_tflops: Sourced,
    fp8_tflops: Sourced,
    fp4_tflops: Sourced,
    nvlink_gbs: Sourced,
}

#[derive(Debug, Deserialize)]
struct GpuFile {
    gpus: Vec<GpuEntry>,
}

#[derive(Debug, Deserialize)]
struct LinkEntry {
    name: String,
    kind: LinkKind,
    alpha_us: Sourced,
    beta_gbs: Sourced,
}

#[derive(Debug, Deserialize)]
struct LinkFile {
    links: Vec<LinkEntry>,
}

const GPU_DATA: &str = include_str!("../data/gpus.json");
const LINK_DATA: &str = include_str!("../data/links.json");

fn gpu_file() -> &'static GpuFile {
    static FILE: OnceLock<GpuFile> = OnceLock::new();
    // The file is part of the crate and checked by a unit test, so a parse failure is a build bug.
    FILE.get_or_init(|| serde_json::from_str(GPU_DATA).expect("crates/model/data/gpus.json is valid (unit-tested)"))
}

fn link_file() -> &'static LinkFile {
    static FILE: OnceLock<LinkFile> = OnceLock::new();
    FILE.get_or_init(|| serde_json::from_str(LINK_DATA).expect("crates/model/data/links.json is valid (unit-tested)"))
}

/// GPU catalog names, in the data file's order.
pub fn gpu_names() -> Vec<&'static str> {
    gpu_file().gpus.iter().map(|g| g.name.as_str()).collect()
}

/// `name` as the catalog compares it: lower case, a vendor prefix ("NVIDIA", "AMD Instinct",
/// "AMD", "GeForce") dropped, and every run of spaces, underscores and hyphens one hyphen. So
/// "NVIDIA H100 80GB HBM3", "h100_80gb_hbm3" and "H100-80GB-HBM3" read alike.
pub fn normalize_gpu_name(name: &str) -> String {
    let lower = name.trim().to_ascii_lowercase();
    let mut words: Vec<&str> = lower.split(|c: char| c.is_whitespace() || c == '_' || c == '-').filter(|w| !w.is_empty()).collect();
    for prefix in ["nvidia", "amd", "instinct", "geforce"] {
        if words.first() == Some(&prefix) {
            words.remove(0);
        }
    }
    words.join("-")
}

/// The catalog name of the GPU `name` denotes (a catalog name, or an alias of one: nvidia-smi's or
/// amd-smi's product name, AIConfigurator's system name such as "h100_sxm"), or None. A name several
/// entries fit ("H100": SXM, PCIe or NVL; "GH200": 96 or 144 GB) is an alias of none of them. A
/// product that differs from every catalog entry in its memory, clocks or links (an RTX PRO 6000
/// Max-Q, an H20 with 141 GB) resolves to none, never to its nearest relative.
pub fn resolve_gpu_name(name: &str) -> Option<&'static str> {
    gpu_entry(name).map(|g| g.name.as_str())
}

/// The catalog entry `name` denotes ([`resolve_gpu_name`]): a catalog name as is, else by
/// [`normalize_gpu_name`] against every name and alias.
fn gpu_entry(name: &str) -> Option<&'static GpuEntry> {
    let gpus = &gpu_file().gpus;
    gpus.iter().find(|g| g.name == name).or_else(|| {
        let n = normalize_gpu_name(name);
        gpus.iter().find(|g| normalize_gpu_name(&g.name) == n || g.aliases.iter().any(|a| normalize_gpu_name(a) == n))
    })
}

/// The error for a GPU name the catalog does not hold: the catalog and how to add one. It offers no
/// "did you mean": GPU names one character apart are different products (L40 and L40S, A10G and
/// A10, GH200 and H200, H20 and H200), so a near miss is no evidence of a typo.
pub fn unknown_gpu_message(name: &str) -> String {
    let fits = gpus_a_name_fits(name);
    if fits.len() > 1 {
        return format!(
            "{name:?} names several GPUs in the catalog: {}; give one of them (nvidia-smi's product name, such as \"NVIDIA H100 80GB HBM3\", names one)",
            fits.join(", ")
        );
    }
    format!(
        "{name:?} is not in the GPU catalog; known: {} (nvidia-smi's product names such as \"NVIDIA H100 80GB HBM3\" are read too); a GPU outside the catalog needs an entry in crates/model/data/gpus.json",
        gpu_names().join(", ")
    )
}

/// The catalog entries whose name or an alias begins with every word of `name` ("H100": h100-sxm,
/// h100-pcie, h100-nvl), for the error of a name several entries fit. Whole words only: "L40" is
/// not a start of "l40s".
fn gpus_a_name_fits(name: &str) -> Vec<&'static str> {
    let n = normalize_gpu_name(name);
    if n.is_empty() {
        return Vec::new();
    }
    let starts = |s: &str| normalize_gpu_name(s).starts_with(&format!("{n}-"));
    gpu_file().gpus.iter().filter(|g| starts(&g.name) || g.aliases.iter().any(|a| starts(a))).map(|g| g.name.as_str()).collect()
}

/// Link catalog names within a node (`--link`), in the data file's order.
pub fn link_names() -> Vec<&'static str> {
    link_file().links.iter().filter(|l| !l.kind.is_network()).map(|l| l.name.as_str()).collect()
}

/// Network catalog names between nodes (`--net`), in the data file's order.
pub fn net_names() -> Vec<&'static str> {
    link_file().links.iter().filter(|l| l.kind.is_network()).map(|l| l.name.as_str()).collect()
}

/// The GPU catalog entry `name`: a catalog name or an alias of one ([`resolve_gpu_name`]).
pub fn gpu(name: &str) -> Result<GpuSpec, ModelError> {
    let g = gpu_entry(name).ok_or_else(|| ModelError::Input(format!("--gpu {}", unknown_gpu_message(name))))?;
    let values = [&g.memory_gb, &g.mem_bw_gbs, &g.bf16_tflops, &g.fp8_tflops, &g.fp4_tflops, &g.nvlink_gbs, &g.pcie_gen];
    let mut sources: Vec<&str> = Vec::new();
    for v in values {
        if !sources.contains(&v.source.as_str()) {
            sources.push(&v.source);
        }
    }
    Ok(GpuSpec {
        name: g.name.clone(),
        arch: g.arch,
        pcie_gen: g.pcie_gen.value as u32,
        link: g.link.clone(),
        memory_gb: g.memory_gb.value,
        mem_bw_gbs: g.mem_bw_gbs.value,
        bf16_tflops: g.bf16_tflops.value,
        fp8_tflops: g.fp8_tflops.value,
        fp4_tflops: g.fp4_tflops.value,
        nvlink_gbs: g.nvlink_gbs.value,
        source: sources.join("; "),
    })
}

/// The link catalog entry `name` within a node (`--link`). Hop latencies follow NCCL's own cost
/// model for Ring/LL (`src/graph/tuning.cc`): 0.6 us per NVLink hop, 1.0 us per PCIe hop.
pub fn link(name: &str) -> Result<LinkProfile, ModelError> {
    let l = entry(name).filter(|l| !l.kind.is_network()).ok_or_else(|| {
        let hint = if net_names().contains(&name) { " (it is a network between nodes: give it to --net)" } else { "" };
        ModelError::Input(format!("--link {name:?} is unknown{hint}; known: {}", link_names().join(", ")))
    })?;
    Ok(profile(l))
}

/// The network catalog entry `name` between nodes (`--net`): InfiniBand, RoCE or Ethernet, its
/// bandwidth per NIC and NCCL's NET hop latency (or more, for TCP sockets).
pub fn net(name: &str) -> Result<LinkProfile, ModelError> {
    let l = entry(name).filter(|l| l.kind.is_network()).ok_or_else(|| {
        let hint = if link_names().contains(&name) { " (it is a link within a node: give it to --link)" } else { "" };
        ModelError::Input(format!("--net {name:?} is unknown{hint}; known: {}", net_names().join(", ")))
    })?;
    Ok(profile(l))
}

/// Whether `l` is the catalog link of its name as the catalog gives it: no measured or
/// user-given latency or bandwidth in place of the catalog's.
pub fn is_catalog_link(l: &LinkProfile) -> bool {
    entry(&l.name).is_some_and(|e| e.kind == l.kind && e.alpha_us.value == l.alpha_us && e.beta_gbs.value == l.beta_gbs)
}

fn entry(name: &str) -> Option<&'static LinkEntry> {
    link_file().links.iter().find(|l| l.name == name)
}

fn profile(l: &LinkEntry) -> LinkProfile {
    let source = if l.alpha_us.source == l.beta_gbs.source {
        l.alpha_us.source.clone()
    } else {
        format!("alpha: {}; beta: {}", l.alpha_us.source, l.beta_gbs.source)
    };
    LinkProfile { name: l.name.clone(), kind: l.kind, alpha_us: l.alpha_us.value, beta_gbs: l.beta_gbs.value, source }
}

/// The machines a multi-node deployment spans: `nodes` nodes of `gpus_per_node` GPUs, each node
/// with `nics_per_node` NICs on the network `net`. Ranks are placed as the engines place them:
/// consecutive ranks (a TP group first, then pipeline stages, then replicas) fill a node before
/// the next.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cluster {
    /// Nodes (2 or more; one node is no cluster).
    pub nodes: u32,
    /// GPUs on each node.
    pub gpus_per_node: u32,
    /// NICs on each node (one per GPU on rail-optimized InfiniBand and RoCE clusters).
    pub nics_per_node: u32,
    /// The network between the nodes; `beta_gbs` is one NIC's bandwidth.
    pub net: LinkProfile,
}

impl Cluster {
    /// Network bandwidth one GPU has, GB/s: its own NIC's, or its share when GPUs share NICs.
    pub fn net_gbs_per_gpu(&self) -> f64 {
        self.net.beta_gbs * (self.nics_per_node as f64 / self.gpus_per_node as f64).min(1.0)
    }

    /// Nodes a group of `n` consecutive ranks spans (1 when it fits in one node).
    pub fn span(&self, n: u32) -> u32 {
        n.div_ceil(self.gpus_per_node.max(1)).max(1)
    }

    /// Refuses a group of `n` consecutive ranks (`what`, e.g. `--tp 6`) that would straddle a node
    /// boundary: it must divide the GPUs of a node or be a whole number of nodes.
    pub fn check_group(&self, n: u32, what: &str) -> Result<(), ModelError> {
        let g = self.gpus_per_node;
        if (n <= g && g.is_multiple_of(n)) || (n > g && n.is_multiple_of(g)) {
            return Ok(());
        }
        Err(ModelError::Input(format!(
            "{what} does not fit the nodes: a group of {n} GPUs would straddle nodes of {g} (--gpus-per-node); use a size that divides {g} or is a multiple of it"
        )))
    }
}

/// The link a GPU gets when none is named: the one its catalog entry names (its NVLink or xGMI
/// generation, else PCIe P2P of its PCIe generation).
pub fn default_link(gpu: &GpuSpec) -> &str {
    &gpu.link
}

/// The catalog link between the GPUs of a probed box: what the probe saw (active NVLink, PCIe
/// peer-to-peer, or neither) on the link catalog's entry for this GPU (`gpu`: a catalog name or an
/// alias, None if the GPU is not in the catalog).
/// - NVLink is the GPU's own generation (`nvlink5` on a B200, `nvlink3` on an A100, `nvlink-h800`
///   on an H800). On a PCIe card NVLink is a bridge joining two (or four) cards, so a collective
///   over the box still crosses PCIe: such a card takes its PCIe P2P link.
/// - PCIe P2P is the GPU's PCIe generation (`pcie4-p2p` on an L40S or A100 PCIe; Gen6 reads
///   Gen5's, the newest the catalog holds).
/// - An AMD GPU takes its xGMI link whatever the probe saw: the probe reads NVIDIA's driver only,
///   and the catalog's AMD boxes are fully connected by xGMI.
/// - A GPU the catalog does not hold takes NVLink4 and PCIe Gen5.
pub fn probed_link(gpu: Option<&str>, nvlink: bool, p2p: bool) -> &'static str {
    let g = gpu.and_then(gpu_entry);
    let own = g.and_then(|g| entry(&g.link));
    if let Some(l) = own.filter(|l| l.kind == LinkKind::Xgmi) {
        return l.name.as_str();
    }
    if nvlink {
        match own {
            Some(l) if l.kind == LinkKind::Nvlink => return l.name.as_str(),
            None => return "nvlink",
            // A bridged PCIe card: its PCIe P2P link below.
            Some(_) => {}
        }
    } else if !p2p {
        return "pcie-host-staged";
    }
    match own.filter(|l| l.kind == LinkKind::PcieP2p) {
        Some(l) => l.name.as_str(),
        None => pcie_p2p_link(g.map_or(5, |g| g.pcie_gen.value as u32)),
    }
}

/// The catalog's PCIe peer-to-peer link for PCIe generation `gen`: `pcie4-p2p` up to Gen4,
/// `pcie5-p2p` from Gen5 (Gen6 reads Gen5's, the newest the catalog holds).
pub fn pcie_p2p_link(gen: u32) -> &'static str {
    if gen <= 4 {
        "pcie4-p2p"
    } else {
        "pcie5-p2p"
    }
}

/// The catalog link a P2P fix moves a `kind` link to, if any: host-staged PCIe becomes PCIe P2P.
pub fn p2p_replacement(kind: LinkKind) -> Option<&'static str> {
    match kind {
        LinkKind::HostStaged => Some("pcie5-p2p"),
        LinkKind::Nvlink | LinkKind::PcieP2p | LinkKind::Xgmi | LinkKind::Infiniband | LinkKind::Roce | LinkKind::Ethernet => None,
    }
}

/// NCCL's base latency of one Ring/LL collective, microseconds (comm.toml `[nccl_tuning]`
/// base_latency_us_ring, NCCL `src/graph/tuning.cc`); the all-to-all and sends use it.
pub const NCCL_RING_LL_BASE_US: f64 = 6.6;

impl LinkProfile {
    /// Bandwidth per direction one GPU has to the other `n - 1` GPUs of its group at once, GB/s: on
    /// xGMI's fully connected mesh every peer has its own link, so it is `beta x (n - 1)`; NVLink
    /// (through NVSwitch) and PCIe give a GPU one `beta` however many peers share it.
    pub fn aggregate_gbs(&self, n: u32) -> f64 {
        match self.kind {
            LinkKind::Xgmi => self.beta_gbs * n.saturating_sub(1).max(1) as f64,
            LinkKind::Nvlink | LinkKind::PcieP2p | LinkKind::HostStaged | LinkKind::Infiniband | LinkKind::Roce | LinkKind::Ethernet => {
                self.beta_gbs
            }
        }
    }

    /// Point-to-point send of `bytes`, microseconds.
    pub fn send_us(&self, bytes: f64) -> f64 {
        self.alpha_us + bytes / (self.beta_gbs * 1e3)
    }

    /// All-to-all of `bytes` per GPU over `n` GPUs ((n-1)/n of the data leaves each GPU), microseconds.
    pub fn alltoall_us(&self, n: u32, bytes: f64) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        let n = n as f64;
        let bw = self.aggregate_gbs(n as u32);
        NCCL_RING_LL_BASE_US + (n - 1.0) * self.alpha_us + bytes * (n - 1.0) / n / (bw * 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catalog_entry_loads_with_positive_finite_values() {
        for n in gpu_names() {
            let g = gpu(n).expect("gpu");
            for v in [g.memory_gb, g.mem_bw_gbs, g.bf16_tflops] {
                assert!(v.is_finite() && v > 0.0, "{n}: {v}");
            }
            for v in [g.fp8_tflops, g.fp4_tflops, g.nvlink_gbs] {
                assert!(v.is_finite() && v >= 0.0, "{n}: {v}");
            }
            assert!((3..=6).contains(&g.pcie_gen), "{n}: PCIe gen {}", g.pcie_gen);
            assert!(!g.source.is_empty());
        }
        for n in link_names() {
            link(n).expect("link").validate(n).expect("valid");
        }
    }

    #[test]
    fn every_name_and_alias_resolves_to_its_own_entry_and_to_no_other() {
        let mut seen: std::collections::HashMap<String, &str> = std::collections::HashMap::new();
        for g in &gpu_file().gpus {
            for spelling in std::iter::once(&g.name).chain(&g.aliases) {
                assert_eq!(resolve_gpu_name(spelling), Some(g.name.as_str()), "{spelling}");
                if let Some(other) = seen.insert(normalize_gpu_name(spelling), &g.name) {
                    assert_eq!(other, g.name, "{spelling} names both {other} and {}", g.name);
                }
            }
            assert_eq!(gpu(&g.name).expect("catalog gpu").name, g.name);
        }
    }

    #[test]
    fn driver_product_names_resolve_to_the_same_product_and_relatives_to_none() {
        for (driver_name, catalog) in [
            ("NVIDIA H100 80GB HBM3", "h100-sxm"),
            ("NVIDIA H100 PCIe", "h100-pcie"),
            ("NVIDIA H100 NVL", "h100-nvl"),
            ("NVIDIA H200", "h200"),
            ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
            ("NVIDIA A100-SXM4-80GB", "a100"),
            ("NVIDIA GeForce RTX 4090", "rtx-4090"),
            ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000-se"),
            ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000-ws"),
            ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
            ("NVIDIA L4", "l4"),
            ("AMD Instinct MI300X", "mi300x"),
            ("  nvidia   h20 ", "h20"),
            ("b200_sxm", "b200"),
            ("NVIDIA A100 80GB PCIe", "a100-pcie"),
            ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
            ("NVIDIA H200 NVL", "h200-nvl"),
            ("NVIDIA GH200 480GB", "gh200-96gb"),
            ("NVIDIA GH200 120GB", "gh200-96gb"),
            ("NVIDIA GH200 144G HBM3e", "gh200-144gb"),
        ] {
            assert_eq!(resolve_gpu_name(driver_name), Some(catalog), "{driver_name}");
            assert_eq!(gpu(driver_name).expect("resolves").name, catalog, "{driver_name}");
        }
        // Other memory, clocks or links than any catalog entry, a name several entries fit, or
        // one character from an entry (another product): no nearest relative is taken, none is
        // guessed, and the error lists the catalog.
        for other in [
            "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
            "NVIDIA H100 SXM5 64GB",
            "NVIDIA L40",
            "NVIDIA A10G",
            "NVIDIA H20 141GB HBM3e",
            "h2000",
            "h2",
            "",
        ] {
            assert_eq!(resolve_gpu_name(other), None, "{other}");
            let e = gpu(other).expect_err("unknown").to_string();
            assert!(e.contains("is not in the GPU catalog; known: rtx-pro-6000-se") && e.contains("gpus.json"), "{e}");
            assert!(!e.contains("did you mean"), "{e}");
        }
    }

    #[test]
    fn a_name_several_gpus_fit_lists_only_those_gpus() {
        for (name, fits) in [("H100", "h100-sxm, h100-pcie, h100-nvl"), ("NVIDIA GH200", "gh200-96gb, gh200-144gb")] {
            assert_eq!(resolve_gpu_name(name), None, "{name}");
            let e = gpu(name).expect_err("ambiguous").to_string();
            assert!(e.contains(&format!("names several GPUs in the catalog: {fits};")), "{e}");
            assert!(!e.contains("rtx-pro-6000-se") && !e.contains("b200"), "only the candidates: {e}");
        }
    }

    #[test]
    fn the_rtx_pro_6000_editions_are_two_entries_with_their_own_bandwidth() {
        // The Server Edition runs its GDDR7 at 12,481 MHz (1,597 GB/s), the Workstation Edition at
        // 14,001 MHz (1,792 GB/s): "RTX PRO 6000" alone does not say which.
        let e = gpu("RTX PRO 6000").expect_err("ambiguous").to_string();
        assert!(e.contains("names several GPUs in the catalog: rtx-pro-6000-se, rtx-pro-6000-ws;"), "{e}");
        let (se, ws) = (gpu("rtx-pro-6000-se").expect("se"), gpu("rtx-pro-6000-ws").expect("ws"));
        assert_eq!((se.mem_bw_gbs, ws.mem_bw_gbs), (1597.0, 1792.0));
        assert_eq!((se.arch, se.memory_gb, se.bf16_tflops), (ws.arch, ws.memory_gb, ws.bf16_tflops));
        // The Workstation Edition reads the Server Edition's kernel tables as shares of its own peak.
        assert_eq!(crate::kernels::table_gpu("rtx-pro-6000-ws"), "rtx-pro-6000-se");
    }

    #[test]
    fn every_gpus_memory_is_the_driver_reported_total_its_source_quotes() {
        // Each entry quotes the total nvidia-smi / amd-smi printed ("NNN,NNN MiB"); the value is
        // that many MiB in 10^9-byte GB, not the datasheet's binary "80 GB" read as decimal.
        for g in &gpu_file().gpus {
            let src = &g.memory_gb.source;
            let at = src.find(" MiB").unwrap_or_else(|| panic!("{}: no MiB figure in {src:?}", g.name));
            let figure = src[..at].rsplit(|c: char| !(c.is_ascii_digit() || c == ',')).next().unwrap_or("");
            let digits = figure.replace(',', "");
            let mib: f64 = digits.parse().unwrap_or_else(|_| panic!("{}: {src:?}", g.name));
            let gb = mib * 1_048_576.0 / 1e9;
            assert!((g.memory_gb.value - gb).abs() < 1e-6, "{}: {} GB against {mib} MiB = {gb} GB", g.name, g.memory_gb.value);
        }
        // The binary reading: an "80 GB" H100 holds 85.5 GB, a "180 GB" B200 192.3 GB.
        assert!((gpu("h100-sxm").expect("h100").memory_gb - 85.52).abs() < 0.01);
        assert!((gpu("b200").expect("b200").memory_gb - 192.27).abs() < 0.01);
    }

    #[test]
    fn networks_are_a_catalog_of_their_own_with_sources() {
        let nets = net_names();
        assert_eq!(nets, ["ib-ndr", "ib-xdr", "roce-200", "roce-400", "eth-100g"]);
        for n in &nets {
            let l = net(n).expect("net");
            l.validate(n).expect("valid");
            assert!(l.kind.is_network() && !link_names().contains(n), "{n}");
            assert!(l.source.contains("alpha: ") && l.source.contains("beta: "), "{n}: {}", l.source);
        }
        // NDR is 400 Gb/s (50 GB/s) on the wire, XDR twice that; what NCCL reaches stays below.
        let (ndr, xdr) = (net("ib-ndr").expect("ndr"), net("ib-xdr").expect("xdr"));
        assert!(ndr.beta_gbs < 50.0 && xdr.beta_gbs < 100.0 && xdr.beta_gbs > ndr.beta_gbs);
        assert!(net("eth-100g").expect("eth").alpha_us > ndr.alpha_us, "TCP sockets are slower to start than RDMA");
        assert!(link("ib-ndr").expect_err("a network is not a node link").to_string().contains("give it to --net"));
        assert!(net("nvlink").expect_err("a node link is not a network").to_string().contains("give it to --link"));
    }

    #[test]
    fn host_staged_link_reproduces_the_reference_copies() {
        let l = link("pcie-host-staged").expect("link");
        assert_eq!(l.kind, LinkKind::HostStaged);
        assert!((l.send_us(12_288.0) - 13.7).abs() < 0.2, "{}", l.send_us(12_288.0));
        assert!((l.send_us(786_432.0) - 40.0).abs() < 1.0, "{}", l.send_us(786_432.0));
    }

    #[test]
    fn unknown_names_list_the_catalog() {
        assert!(gpu("v100").expect_err("gpu").to_string().contains("rtx-pro-6000-se, h100-sxm"));
        assert!(link("infiniband").expect_err("link").to_string().contains("nvlink, pcie5-p2p"));
    }

    #[test]
    fn negative_or_infinite_link_values_are_refused_naming_the_field() {
        let mut l = link("nvlink").expect("link");
        l.alpha_us = -1.0;
        assert!(l.validate("f.json").expect_err("alpha").to_string().contains("alpha_us"));
        l.alpha_us = 1.0;
        l.beta_gbs = f64::INFINITY;
        assert!(l.validate("f.json").expect_err("beta").to_string().contains("beta_gbs"));
        // A name or source a terminal would act on (a title-setting escape) is refused.
        let mut l = link("nvlink").expect("link");
        l.name = "x\u{1b}]0;owned\u{7}".into();
        assert!(l
            .validate("f.json")
            .expect_err("name")
            .to_string()
            .contains("link name \"x\\u{1b}]0;owned\\u{7}\" holds a control character"));
    }

    /// A GPU lists FP8 (FP4) throughput exactly when its architecture has FP8 (FP4) tensor cores,
    /// and each narrower format is at least as fast as the wider one: no A100 FP8, no Hopper FP4.
    #[test]
    fn tensor_formats_follow_the_architecture() {
        for n in gpu_names() {
            let g = gpu(n).expect("gpu");
            let has = |f: ComputeFormat| g.arch.formats().contains(&f);
            assert_eq!(g.fp8_tflops > 0.0, has(ComputeFormat::Fp8), "{n}: fp8 {} on {:?}", g.fp8_tflops, g.arch);
            assert_eq!(g.fp4_tflops > 0.0, has(ComputeFormat::Fp4), "{n}: fp4 {} on {:?}", g.fp4_tflops, g.arch);
            assert!(g.tflops(ComputeFormat::Fp8) >= g.bf16_tflops && g.tflops(ComputeFormat::Fp4) >= g.tflops(ComputeFormat::Fp8), "{n}");
        }
        let a = gpu("a100").expect("a100");
        assert_eq!(a.tflops(ComputeFormat::Fp8), a.bf16_tflops);
        assert_eq!(gpu("mi355x").expect("mi355x").tflops(ComputeFormat::Fp4), 10066.3);
    }

    /// Every GPU's default link is in the link catalog and matches the GPU: NVLink at the GPU's
    /// own NVLink bandwidth, xGMI on AMD, else PCIe P2P of the GPU's PCIe generation.
    #[test]
    fn each_gpu_defaults_to_its_own_link() {
        for n in gpu_names() {
            let g = gpu(n).expect("gpu");
            let l = link(default_link(&g)).expect("its link is in the catalog");
            match l.kind {
                LinkKind::Nvlink => assert_eq!(l.beta_gbs, g.nvlink_gbs, "{n}"),
                LinkKind::Xgmi => assert!(matches!(g.arch, Arch::Cdna3 | Arch::Cdna4) && g.nvlink_gbs == 0.0, "{n}"),
                LinkKind::PcieP2p => {
                    assert_eq!(g.nvlink_gbs, 0.0, "{n}");
                    assert_eq!(l.name, format!("pcie{}-p2p", g.pcie_gen), "{n}");
                }
                LinkKind::HostStaged => panic!("{n} defaults to a host-staged link"),
                LinkKind::Infiniband | LinkKind::Roce | LinkKind::Ethernet => panic!("{n} defaults to a network between nodes"),
            }
        }
    }

    #[test]
    fn a_probed_box_links_over_its_own_gpus_nvlink_or_pcie_generation() {
        // NVLink active: the GPU's own NVLink generation.
        assert_eq!(probed_link(Some("b200"), true, true), "nvlink5");
        assert_eq!(probed_link(Some("NVIDIA A100-SXM4-80GB"), true, true), "nvlink3");
        assert_eq!(probed_link(Some("h800"), true, true), "nvlink-h800");
        assert_eq!(probed_link(Some("NVIDIA H100 80GB HBM3"), true, true), "nvlink");
        // A PCIe card with a bridge: the bridge joins pairs, a collective over the box crosses PCIe.
        assert_eq!(probed_link(Some("h100-pcie"), true, true), "pcie5-p2p");
        assert_eq!(probed_link(Some("NVIDIA A100 80GB PCIe"), true, false), "pcie4-p2p");
        // AMD: its xGMI mesh, which the NVIDIA-only probe cannot see.
        assert_eq!(probed_link(Some("mi300x"), false, false), "xgmi");
        assert_eq!(probed_link(Some("AMD Instinct MI355X"), false, false), "xgmi4");
        // PCIe peer-to-peer: the GPU's PCIe generation, even for an SXM GPU whose NVLink is down.
        assert_eq!(probed_link(Some("l40s"), false, true), "pcie4-p2p");
        assert_eq!(probed_link(Some("NVIDIA A100 80GB PCIe"), false, true), "pcie4-p2p");
        assert_eq!(probed_link(Some("a100"), false, true), "pcie4-p2p");
        assert_eq!(probed_link(Some("rtx-pro-6000-se"), false, true), "pcie5-p2p");
        assert_eq!(probed_link(Some("b300"), false, true), "pcie5-p2p");
        // No peer-to-peer: staged through host memory whatever the GPU.
        assert_eq!(probed_link(Some("l40s"), false, false), "pcie-host-staged");
        assert_eq!(probed_link(Some("b200"), false, false), "pcie-host-staged");
        // Not in the catalog: NVLink4 or PCIe Gen5.
        assert_eq!(probed_link(None, true, true), "nvlink");
        assert_eq!(probed_link(Some("Tesla T4"), false, true), "pcie5-p2p");
        for (gpu, nv, p2p) in [("b200", true, true), ("l40s", false, true), ("h200", false, false)] {
            link(probed_link(Some(gpu), nv, p2p)).expect("a catalog link");
        }
    }

    #[test]
    fn xgmi_reaches_every_peer_at_once_nvlink_does_not() {
        let x = link("xgmi4").expect("link");
        assert_eq!(x.aggregate_gbs(8), 7.0 * 76.8);
        assert_eq!(x.aggregate_gbs(2), 76.8);
        let nv = link("nvlink5").expect("link");
        assert_eq!(nv.aggregate_gbs(8), nv.beta_gbs);
        assert!(x.alltoall_us(8, 1e8) < x.alltoall_us(2, 1e8), "the mesh spreads an all-to-all over 7 links");
    }

    #[test]
    fn compute_format_falls_back_to_the_next_wider_one() {
        let h = gpu("h100-sxm").expect("gpu");
        assert_eq!(h.tflops(ComputeFormat::Fp4), h.fp8_tflops);
        assert_eq!(h.tflops(ComputeFormat::Bf16), h.bf16_tflops);
    }
}
