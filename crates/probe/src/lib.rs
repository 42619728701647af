//! servetune's probe: what this box is, how its GPUs connect, and what is wrong with it.
//!
//! Facts come through one [`fs::Root`] (the live `/` or a snapshot tree) and one
//! [`gpu::GpuSource`] (live NVML or a recorded `nvml.json`), so a snapshot is analysed through the
//! same code paths as a live machine. [`findings`] turns facts into ranked findings; [`render`]
//! prints them.

pub mod findings;
pub mod fs;
pub mod gpu;
pub mod host;
pub mod pcie;
pub mod render;
pub mod virt;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The facts of one probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeFacts {
    pub virtualization: virt::Virtualization,
    pub host: host::Host,
    pub pcie: Vec<pcie::PciGpu>,
    pub nvml: gpu::NvmlSnapshot,
    /// /sys/module/nvidia_uvm/parameters/*.
    pub uvm_params: BTreeMap<String, String>,
    /// Files that could not be read (the probe went on without them).
    pub unreadable: Vec<String>,
}

/// `servetune probe --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// Always "servetune.probe/1".
    pub schema: String,
    /// Unix seconds.
    pub probed_at: u64,
    pub virtualization: virt::Virtualization,
    pub host: host::Host,
    pub pcie: Vec<pcie::PciGpu>,
    pub gpus: Vec<gpu::Gpu>,
    pub driver: Driver,
    pub topology: Topology,
    pub p2p: BTreeMap<String, Vec<Vec<String>>>,
    pub uvm_params: BTreeMap<String, String>,
    pub findings: Vec<findings::Finding>,
    pub unreadable: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Driver {
    pub found: bool,
    pub error: Option<String>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    /// GPU index order of the matrices.
    pub gpus: Vec<String>,
    pub matrix: Vec<Vec<String>>,
}

pub const SCHEMA: &str = "servetune.probe/1";

/// Gathers facts from `fs` and `gpus`. `cpuid`: the hypervisor signature (live) or `None` to read
/// the captured `/servetune/cpuid`.
pub fn gather(fs: &fs::Root, gpus: &dyn gpu::GpuSource, cpuid: Option<String>) -> ProbeFacts {
    let mut unreadable = Vec::new();
    let cpuid = cpuid.or_else(|| fs.read("/servetune/cpuid"));
    let virtualization = virt::detect(fs, cpuid.as_deref());
    let host = host::detect(fs);
    if host.cpu_model.is_none() {
        unreadable.push("/proc/cpuinfo".into());
    }
    let pcie = pcie::detect(fs, &mut unreadable);
    let uvm_params = fs
        .list("/sys/module/nvidia_uvm/parameters")
        .into_iter()
        .filter_map(|p| fs.read(&format!("/sys/module/nvidia_uvm/parameters/{p}")).map(|v| (p, v)))
        .collect();
    ProbeFacts { virtualization, host, pcie, nvml: gpus.snapshot(), uvm_params, unreadable }
}

/// The report of `facts`.
pub fn report(facts: ProbeFacts, probed_at: u64) -> ProbeReport {
    let findings = findings::evaluate(&facts);
    let n = facts.nvml;
    ProbeReport {
        schema: SCHEMA.into(),
        probed_at,
        virtualization: facts.virtualization,
        host: facts.host,
        pcie: facts.pcie,
        driver: Driver {
            found: n.error.is_none(),
            error: n.error.clone(),
            driver_version: n.driver_version.clone(),
            cuda_version: n.cuda_version.clone(),
        },
        topology: Topology { gpus: n.gpus.iter().map(|g| format!("GPU{}", g.index)).collect(), matrix: n.topology.clone() },
        p2p: n.p2p.clone(),
        gpus: n.gpus,
        uvm_params: facts.uvm_params,
        findings,
        unreadable: facts.unreadable,
    }
}

/// Probes the live machine.
pub fn probe_live(now: u64) -> ProbeReport {
    report(gather(&fs::Root::live(), &gpu::Live, virt::cpuid_signature()), now)
}

/// Analyses a snapshot tree (`--root DIR`) with its recorded `nvml.json`.
pub fn probe_root(dir: &Path, now: u64) -> Result<ProbeReport, String> {
    if !dir.is_dir() {
        return Err(format!("--root {}: not a directory; give a tree written by servetune probe --capture", dir.display()));
    }
    let nvml = match std::fs::read_to_string(dir.join("nvml.json")) {
        Ok(t) => Some(
            serde_json::from_str::<gpu::NvmlSnapshot>(&t)
                .map_err(|e| format!("--root {}: nvml.json is not a recorded NVML snapshot ({e})", dir.display()))?,
        ),
        Err(_) => None,
    };
    Ok(report(gather(&fs::Root::at(dir), &gpu::Recorded(nvml), None), now))
}

/// Probes the live machine and copies what it read into `dir` (with `nvml.json` and the CPUID
/// signature), so `probe_root(dir)` reproduces the report.
pub fn capture(dir: &Path, now: u64) -> Result<(ProbeReport, usize), String> {
    let fs = fs::Root::recording();
    let cpuid = virt::cpuid_signature();
    let facts = gather(&fs, &gpu::Live, cpuid.clone());
    std::fs::create_dir_all(dir).map_err(|e| format!("--capture {}: cannot create it ({e})", dir.display()))?;
    let n = fs::copy_recorded(&fs.recorded(), dir).map_err(|e| format!("--capture {}: {e}", dir.display()))?;
    let w = |p: &Path, s: String| std::fs::write(p, s).map_err(|e| format!("--capture {}: {e}", p.display()));
    w(&dir.join("nvml.json"), serde_json::to_string_pretty(&facts.nvml).unwrap_or_default())?;
    if let Some(c) = cpuid {
        std::fs::create_dir_all(dir.join("servetune")).map_err(|e| e.to_string())?;
        w(&dir.join("servetune/cpuid"), c)?;
    }
    Ok((report(facts, now), n + 1))
}
