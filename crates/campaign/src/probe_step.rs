//! The one place the campaign calls servetune-probe: probe the live box or a snapshot, and reduce
//! the report to the facts the campaign plans with (GPU model, count, P2P, versions) plus a hash
//! that says whether two probes describe the same environment.

use std::path::Path;

use serde::{Deserialize, Serialize};
pub use servetune_probe::findings::FindingId;
use servetune_probe::findings::Severity;
use servetune_probe::ProbeReport;

use crate::journal::stable_hash;
use crate::{CampaignError, Result};

/// What the campaign needs from a probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxFacts {
    /// none, kvm, ... (probe's words).
    pub vm: String,
    /// none, lxc, docker, ...
    pub container: String,
    /// The GPU's name as NVML reports it.
    pub gpu_name: Option<String>,
    /// The model catalog's name for it, when known.
    pub gpu_model: Option<String>,
    /// The number of GPUs.
    pub gpus: u32,
    /// Every GPU pair can read its peer directly.
    pub p2p_ok: bool,
    /// Any NVLink is active.
    pub nvlink: bool,
    /// The NVIDIA driver version, when read.
    pub driver_version: Option<String>,
    /// The CUDA version the driver supports, when read.
    pub cuda_version: Option<String>,
    /// Hash of the identifying facts (not the probe time).
    pub hash: String,
}

/// A probe finding, as the campaign records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeFinding {
    /// The probe's finding id, e.g. `vm_no_p2p`.
    pub code: FindingId,
    /// How much it matters.
    pub severity: crate::finding::Severity,
    /// One line: what is wrong and what it costs.
    pub title: String,
    /// The facts that raised it, naming where they were read.
    pub evidence: String,
    /// What to do about it.
    pub fix: String,
}

/// A probe's outcome.
#[derive(Debug, Clone)]
pub struct Probed {
    /// The whole probe report (JSON).
    pub report: serde_json::Value,
    /// The facts the campaign needs.
    pub facts: BoxFacts,
    /// The probe's findings.
    pub findings: Vec<ProbeFinding>,
}

/// Probes the live box, or the snapshot tree at `root` (a `servetune probe --capture` directory).
pub fn probe(root: Option<&Path>) -> Result<Probed> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let r = match root {
        Some(dir) => servetune_probe::probe_root(dir, now).map_err(|e| CampaignError::Input(e.replace("--root", "--probe-root")))?,
        None => servetune_probe::probe_live(now),
    };
    let facts = facts(&r);
    let findings = r
        .findings
        .iter()
        .map(|f| ProbeFinding {
            code: f.id,
            severity: match f.severity {
                Severity::Critical => crate::finding::Severity::Critical,
                Severity::Warning => crate::finding::Severity::Warning,
                Severity::Info => crate::finding::Severity::Info,
            },
            title: f.title.clone(),
            evidence: f.evidence.clone(),
            fix: f.fix.clone(),
        })
        .collect();
    let report = serde_json::to_value(&r).map_err(|e| CampaignError::Runtime(format!("probe report: {e}")))?;
    Ok(Probed { report, facts, findings })
}

/// The model catalog's GPU for an NVML name (`hw::resolve_gpu_name`: an exact product, never a
/// relative: an "NVIDIA A100 80GB PCIe" is the catalog's a100-pcie, never its SXM A100).
pub fn catalog_gpu(name: &str) -> Option<&'static str> {
    servetune_model::hw::resolve_gpu_name(name)
}

fn facts(r: &ProbeReport) -> BoxFacts {
    let read = r.p2p.get("read").cloned().unwrap_or_default();
    let p2p_ok = r.gpus.len() > 1 && read.iter().enumerate().all(|(i, row)| row.iter().enumerate().all(|(j, s)| i == j || s == "OK"));
    let gpu_name = r.gpus.first().map(|g| g.name.clone());
    let ident = serde_json::json!({
        "vm": r.virtualization.vm, "container": r.virtualization.container,
        "gpus": r.gpus.iter().map(|g| &g.name).collect::<Vec<_>>(),
        "driver": r.driver.driver_version, "cuda": r.driver.cuda_version,
        "p2p": r.p2p, "topology": r.topology.matrix, "uvm": r.uvm_params,
    });
    BoxFacts {
        vm: r.virtualization.vm.name().to_string(),
        container: r.virtualization.container.name().to_string(),
        gpu_model: gpu_name.as_deref().and_then(catalog_gpu).map(str::to_string),
        gpu_name,
        gpus: r.gpus.len() as u32,
        p2p_ok,
        nvlink: r.gpus.iter().any(|g| g.nvlinks_active > 0),
        driver_version: r.driver.driver_version.clone(),
        cuda_version: r.driver.cuda_version.clone(),
        hash: stable_hash(&ident.to_string()),
    }
}

impl BoxFacts {
    /// The model catalog's link for this box: what the probe saw, on the GPU's own NVLink or PCIe
    /// generation (`hw::probed_link`).
    pub fn link(&self) -> &'static str {
        servetune_model::hw::probed_link(self.gpu_model.as_deref(), self.nvlink, self.p2p_ok)
    }
}
