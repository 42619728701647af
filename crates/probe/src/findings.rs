//! Rules that turn facts into ranked findings, each with severity, evidence and fix.

use serde::{Deserialize, Serialize};

use crate::ProbeFacts;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    Warning,
    Info,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub id: String,
    pub severity: Severity,
    pub title: String,
    pub evidence: String,
    pub fix: String,
}

fn f(id: &str, severity: Severity, title: impl Into<String>, evidence: impl Into<String>, fix: impl Into<String>) -> Finding {
    Finding { id: id.into(), severity, title: title.into(), evidence: evidence.into(), fix: fix.into() }
}

/// Pairs (i, j), i < j, whose status in `m` is not "OK".
fn bad_pairs(m: &[Vec<String>]) -> Vec<(usize, usize, String)> {
    let mut v = Vec::new();
    for (i, row) in m.iter().enumerate() {
        for (j, s) in row.iter().enumerate() {
            if i < j && s != "OK" && s != "X" {
                v.push((i, j, s.clone()));
            }
        }
    }
    v
}

/// Every rule, most severe first.
pub fn evaluate(p: &ProbeFacts) -> Vec<Finding> {
    let mut out = Vec::new();
    let v = &p.virtualization;
    let n = &p.nvml;
    let read = n.p2p.get("read").cloned().unwrap_or_default();
    let in_vm = v.vm != "none";

    if n.error.is_some() && n.gpus.is_empty() {
        let pci = p.pcie.len();
        out.push(f(
            "no_driver",
            if pci > 0 { Severity::Critical } else { Severity::Info },
            "No NVIDIA driver found",
            format!("{}; {} NVIDIA device(s) on the PCIe bus", n.error.as_deref().unwrap_or(""), pci),
            if pci > 0 {
                "install the NVIDIA driver (and nvidia-container-toolkit inside a container), then probe again"
            } else {
                "nothing to do on a machine without NVIDIA GPUs"
            },
        ));
    }

    let bad = bad_pairs(&read);
    if in_vm && !bad.is_empty() {
        let total = n.gpus.len() * n.gpus.len().saturating_sub(1) / 2;
        let ex: Vec<String> = bad.iter().take(4).map(|(i, j, s)| format!("GPU{i}-GPU{j} {s}")).collect();
        out.push(f(
            "vm_no_p2p",
            Severity::Critical,
            format!("{} guest without GPU peer-to-peer: every TP collective is staged through host memory", v.vm),
            format!("P2P read is not OK on {} of {} GPU pairs ({}); {}", bad.len(), total, ex.join(", "), v.evidence.join("; ")),
            "give the VM a P2P clique (QEMU/Proxmox: x-nv-gpudirect-clique on every passed-through GPU), or serve from an LXC container or bare metal; then check with servetune fabric p2p",
        ));
    }

    let translated: Vec<&crate::pcie::PciGpu> =
        p.pcie.iter().filter(|g| matches!(g.iommu_type.as_deref(), Some("DMA") | Some("DMA-FQ"))).collect();
    let acs_on: Vec<String> = p.pcie.iter().flat_map(|g| g.bridges.iter().filter(|b| b.acs == "on").map(|b| b.bus_id.clone())).collect();
    let any_ok = read.iter().enumerate().any(|(i, r)| r.iter().enumerate().any(|(j, s)| i != j && s == "OK"));
    if any_ok && !translated.is_empty() && !acs_on.is_empty() {
        out.push(f(
            "p2p_iommu_acs",
            Severity::Warning,
            "P2P reported OK behind a translating IOMMU with ACS redirect on the path: P2P may silently drop data",
            format!("IOMMU type DMA on {} GPU group(s); ACS P2P redirect on bridge(s) {}", translated.len(), acs_on.join(", ")),
            "verify with servetune fabric p2p --verify; if data is lost, set iommu=pt (passthrough) or disable ACS redirect on those bridges (BIOS or setpci)",
        ));
    }

    for g in p.pcie.iter().filter(|g| g.link.downgraded) {
        let l = &g.link;
        out.push(f(
            "link_downgraded",
            Severity::Warning,
            format!("GPU {} runs its PCIe link below its maximum", g.bus_id),
            format!("Gen{} x{} of Gen{} x{}", l.current_gen.unwrap_or(0), l.current_width.unwrap_or(0), l.max_gen.unwrap_or(0), l.max_width.unwrap_or(0)),
            "reseat the card or riser, check the slot's BIOS link setting (Gen/bifurcation), and read again under load (idle GPUs may train down to save power)",
        ));
    }

    let nodes: std::collections::BTreeSet<i32> = p.pcie.iter().map(|g| g.numa_node).filter(|n| *n >= 0).collect();
    if nodes.len() > 1 {
        let mut pairs = Vec::new();
        for (i, a) in p.pcie.iter().enumerate() {
            for b in p.pcie.iter().skip(i + 1) {
                if a.numa_node != b.numa_node && a.numa_node >= 0 && b.numa_node >= 0 {
                    pairs.push(format!("{}-{}", a.bus_id, b.bus_id));
                }
            }
        }
        out.push(f(
            "gpus_split_numa",
            Severity::Warning,
            format!("GPUs are split across {} NUMA nodes: cross-socket pairs are slower", nodes.len()),
            format!("{} cross-socket pairs, e.g. {}", pairs.len(), pairs.iter().take(3).cloned().collect::<Vec<_>>().join(", ")),
            "keep a TP group on one socket (e.g. TP4 per socket with PP2 or DP2), and on AMD EPYC check the NPS setting; measure with servetune fabric p2p",
        ));
    }

    if p.uvm_params.get("uvm_disable_hmm").is_some_and(|v| v == "N" || v == "0") {
        out.push(f(
            "hmm_enabled",
            Severity::Warning,
            "nvidia_uvm runs with HMM enabled: some kernel/driver pairs fail every CUDA call",
            "/sys/module/nvidia_uvm/parameters/uvm_disable_hmm is N; with HMM, cuInit can return NOT_INITIALIZED (NVIDIA/open-gpu-kernel-modules issues 797 and 901)",
            "add `options nvidia_uvm uvm_disable_hmm=1` to /etc/modprobe.d/ and reload nvidia_uvm (or reboot)",
        ));
    }

    let off: Vec<String> = n.gpus.iter().filter(|g| g.persistence_mode == Some(false)).map(|g| g.index.to_string()).collect();
    if !off.is_empty() {
        out.push(f(
            "persistence_off",
            Severity::Info,
            "Persistence mode is off",
            format!("GPU {}", off.join(", ")),
            "run nvidia-persistenced (or nvidia-smi -pm 1) so the driver stays initialised between processes",
        ));
    }

    let mig: Vec<String> = n.gpus.iter().filter(|g| g.mig_enabled == Some(true)).map(|g| g.index.to_string()).collect();
    if !mig.is_empty() {
        out.push(f(
            "mig_enabled",
            Severity::Warning,
            "MIG is enabled",
            format!("GPU {}", mig.join(", ")),
            "disable MIG (nvidia-smi -mig 0) for tensor-parallel serving across whole GPUs",
        ));
    }

    let names: std::collections::BTreeSet<&str> = n.gpus.iter().map(|g| g.name.as_str()).collect();
    if names.len() > 1 {
        out.push(f(
            "mixed_gpu_models",
            Severity::Warning,
            "Mixed GPU models",
            names.into_iter().collect::<Vec<_>>().join(", "),
            "a TP group runs at the speed of its slowest member: group identical GPUs",
        ));
    }

    out.sort_by_key(|x| x.severity);
    out
}
