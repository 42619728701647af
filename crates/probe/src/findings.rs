//! Rules that turn facts into ranked findings, each with severity, evidence and fix.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::pcie::{AcsState, PciGpu};
use crate::virt::Vm;
use crate::ProbeFacts;

/// How much a finding matters; findings are listed most severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Serving will be slow or wrong until it is fixed.
    Critical,
    /// Likely to cost throughput or stability.
    Warning,
    /// Worth knowing; nothing may be wrong.
    Info,
}

/// Which rule a finding comes from (its stable id in the JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingId {
    /// No NVIDIA driver answered.
    NoDriver,
    /// A VM guest whose GPUs cannot do peer-to-peer.
    VmNoP2p,
    /// P2P reported OK behind a translating IOMMU with ACS redirect.
    P2pIommuAcs,
    /// A GPU's PCIe link trained below its maximum.
    LinkDowngraded,
    /// GPUs on more than one NUMA node.
    GpusSplitNuma,
    /// nvidia_uvm with HMM enabled.
    HmmEnabled,
    /// Persistence mode off.
    PersistenceOff,
    /// MIG enabled.
    MigEnabled,
    /// More than one GPU model.
    MixedGpuModels,
}

/// One thing wrong (or worth knowing) about the box.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The rule that fired.
    pub id: FindingId,
    /// How much it matters.
    pub severity: Severity,
    /// One line: what is wrong and what it costs.
    pub title: String,
    /// The facts that fired the rule, naming where they were read.
    pub evidence: String,
    /// What to do about it.
    pub fix: String,
}

fn f(id: FindingId, severity: Severity, title: impl Into<String>, evidence: impl Into<String>, fix: impl Into<String>) -> Finding {
    Finding { id, severity, title: title.into(), evidence: evidence.into(), fix: fix.into() }
}

/// A GPU pair (i < j) whose P2P status is not "OK".
struct BadPair {
    i: usize,
    j: usize,
    status: String,
}

fn bad_pairs(m: &[Vec<String>]) -> Vec<BadPair> {
    let mut v = Vec::new();
    for (i, row) in m.iter().enumerate() {
        for (j, s) in row.iter().enumerate() {
            if i < j && s != "OK" && s != "X" {
                v.push(BadPair { i, j, status: s.clone() });
            }
        }
    }
    v
}

/// Every rule, most severe first.
pub fn evaluate(p: &ProbeFacts) -> Vec<Finding> {
    let rules: [fn(&ProbeFacts) -> Vec<Finding>; 9] = [
        no_driver,
        vm_without_p2p,
        p2p_behind_iommu_and_acs,
        downgraded_links,
        gpus_split_across_numa,
        hmm_enabled,
        persistence_off,
        mig_enabled,
        mixed_gpu_models,
    ];
    let mut out: Vec<Finding> = rules.iter().flat_map(|rule| rule(p)).collect();
    out.sort_by_key(|x| x.severity);
    out
}

fn p2p_read(p: &ProbeFacts) -> &[Vec<String>] {
    p.nvml.p2p.get("read").map(Vec::as_slice).unwrap_or_default()
}

fn no_driver(p: &ProbeFacts) -> Vec<Finding> {
    let n = &p.nvml;
    if n.error.is_none() || !n.gpus.is_empty() {
        return Vec::new();
    }
    let pci = p.pcie.len();
    vec![f(
        FindingId::NoDriver,
        if pci > 0 { Severity::Critical } else { Severity::Info },
        "No NVIDIA driver found",
        format!("{}; {} NVIDIA device(s) on the PCIe bus", n.error.as_deref().unwrap_or(""), pci),
        if pci > 0 {
            "install the NVIDIA driver (and nvidia-container-toolkit inside a container), then probe again"
        } else {
            "nothing to do on a machine without NVIDIA GPUs"
        },
    )]
}

fn vm_without_p2p(p: &ProbeFacts) -> Vec<Finding> {
    let v = &p.virtualization;
    let bad = bad_pairs(p2p_read(p));
    if v.vm == Vm::None || bad.is_empty() {
        return Vec::new();
    }
    let gpus = p.nvml.gpus.len();
    let total = gpus * gpus.saturating_sub(1) / 2;
    let ex: Vec<String> = bad.iter().take(4).map(|b| format!("GPU{}-GPU{} {}", b.i, b.j, b.status)).collect();
    vec![f(
        FindingId::VmNoP2p,
        Severity::Critical,
        format!("{} guest without GPU peer-to-peer: every TP collective is staged through host memory", v.vm.name()),
        format!("P2P read is not OK on {} of {} GPU pairs ({}); {}", bad.len(), total, ex.join(", "), v.evidence.join("; ")),
        "give the VM a P2P clique (QEMU/Proxmox: x-nv-gpudirect-clique on every passed-through GPU), or serve from an LXC container or bare metal; then check with servetune fabric p2p. Until then, NCCL_SHM_USE_CUDA_MEMCPY=1 in the server's environment makes NCCL's host-memory (SHM) transport copy with the copy engines (cudaMemcpy, on the sending side by default) instead of GPU stores to host memory; AWS's EFA cheatsheet advises it on its g5/g6 instances; compare with servetune fabric allreduce before and after",
    )]
}

fn p2p_behind_iommu_and_acs(p: &ProbeFacts) -> Vec<Finding> {
    let translated = p.pcie.iter().filter(|g| matches!(g.iommu_type.as_deref(), Some("DMA") | Some("DMA-FQ"))).count();
    let acs_on: Vec<String> =
        p.pcie.iter().flat_map(|g| g.bridges.iter().filter(|b| b.acs == AcsState::On).map(|b| b.bus_id.clone())).collect();
    let any_ok = p2p_read(p).iter().enumerate().any(|(i, r)| r.iter().enumerate().any(|(j, s)| i != j && s == "OK"));
    if !any_ok || translated == 0 || acs_on.is_empty() {
        return Vec::new();
    }
    vec![f(
        FindingId::P2pIommuAcs,
        Severity::Warning,
        "P2P reported OK behind a translating IOMMU with ACS redirect on the path: P2P may silently drop data",
        format!("IOMMU type DMA on {translated} GPU group(s); ACS P2P redirect on bridge(s) {}", acs_on.join(", ")),
        "verify with servetune fabric p2p --verify; if data is lost, set iommu=pt (passthrough) or disable ACS redirect on those bridges (BIOS or setpci)",
    )]
}

fn downgraded_links(p: &ProbeFacts) -> Vec<Finding> {
    p.pcie
        .iter()
        .filter(|g| g.link.downgraded)
        .map(|g| {
            let l = &g.link;
            f(
                FindingId::LinkDowngraded,
                Severity::Warning,
                format!("GPU {} runs its PCIe link below its maximum", g.bus_id),
                format!(
                    "Gen{} x{} of Gen{} x{}",
                    l.current_gen.unwrap_or(0),
                    l.current_width.unwrap_or(0),
                    l.max_gen.unwrap_or(0),
                    l.max_width.unwrap_or(0)
                ),
                "reseat the card or riser, check the slot's BIOS link setting (Gen/bifurcation), and read again under load (idle GPUs may train down to save power)",
            )
        })
        .collect()
}

fn gpus_split_across_numa(p: &ProbeFacts) -> Vec<Finding> {
    let nodes: BTreeSet<i32> = p.pcie.iter().map(|g| g.numa_node).filter(|n| *n >= 0).collect();
    if nodes.len() <= 1 {
        return Vec::new();
    }
    let cross = |a: &PciGpu, b: &PciGpu| a.numa_node != b.numa_node && a.numa_node >= 0 && b.numa_node >= 0;
    let pairs: Vec<String> = p
        .pcie
        .iter()
        .enumerate()
        .flat_map(|(i, a)| p.pcie.iter().skip(i + 1).filter(move |b| cross(a, b)).map(move |b| format!("{}-{}", a.bus_id, b.bus_id)))
        .collect();
    vec![f(
        FindingId::GpusSplitNuma,
        Severity::Warning,
        format!("GPUs are split across {} NUMA nodes: cross-socket pairs are slower", nodes.len()),
        format!("{} cross-socket pairs, e.g. {}", pairs.len(), pairs.iter().take(3).cloned().collect::<Vec<_>>().join(", ")),
        "keep a TP group on one socket (e.g. TP4 per socket with PP2 or DP2), and on AMD EPYC check the NPS setting; measure with servetune fabric p2p",
    )]
}

fn hmm_enabled(p: &ProbeFacts) -> Vec<Finding> {
    if !p.uvm_params.get("uvm_disable_hmm").is_some_and(|v| v == "N" || v == "0") {
        return Vec::new();
    }
    vec![f(
        FindingId::HmmEnabled,
        Severity::Warning,
        "nvidia_uvm runs with HMM enabled: some kernel/driver pairs fail every CUDA call",
        "/sys/module/nvidia_uvm/parameters/uvm_disable_hmm is N; with HMM, cuInit can return NOT_INITIALIZED (NVIDIA/open-gpu-kernel-modules issues 797 and 901)",
        "add `options nvidia_uvm uvm_disable_hmm=1` to /etc/modprobe.d/ and reload nvidia_uvm (or reboot)",
    )]
}

fn persistence_off(p: &ProbeFacts) -> Vec<Finding> {
    let off: Vec<String> = p.nvml.gpus.iter().filter(|g| g.persistence_mode == Some(false)).map(|g| g.index.to_string()).collect();
    if off.is_empty() {
        return Vec::new();
    }
    vec![f(
        FindingId::PersistenceOff,
        Severity::Info,
        "Persistence mode is off",
        format!("GPU {}", off.join(", ")),
        "run nvidia-persistenced (or nvidia-smi -pm 1) so the driver stays initialised between processes",
    )]
}

fn mig_enabled(p: &ProbeFacts) -> Vec<Finding> {
    let mig: Vec<String> = p.nvml.gpus.iter().filter(|g| g.mig_enabled == Some(true)).map(|g| g.index.to_string()).collect();
    if mig.is_empty() {
        return Vec::new();
    }
    vec![f(
        FindingId::MigEnabled,
        Severity::Warning,
        "MIG is enabled",
        format!("GPU {}", mig.join(", ")),
        "disable MIG (nvidia-smi -mig 0) for tensor-parallel serving across whole GPUs",
    )]
}

fn mixed_gpu_models(p: &ProbeFacts) -> Vec<Finding> {
    let names: BTreeSet<&str> = p.nvml.gpus.iter().map(|g| g.name.as_str()).collect();
    if names.len() <= 1 {
        return Vec::new();
    }
    vec![f(
        FindingId::MixedGpuModels,
        Severity::Warning,
        "Mixed GPU models",
        names.into_iter().collect::<Vec<_>>().join(", "),
        "a TP group runs at the speed of its slowest member: group identical GPUs",
    )]
}
