//! servetune's probe: what this box is, how its GPUs connect, and what is wrong with it.
//!
//! Facts come through one [`fs::Root`] (the live `/` or a snapshot tree) and one
//! [`gpu::GpuSource`] (live NVML or a recorded `nvml.json`), so a snapshot is analysed through the
//! same code paths as a live machine. [`findings`] turns facts into ranked findings; [`render`]
//! prints them.

#![warn(missing_docs)]

pub mod cluster;
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
    /// VM and container, with evidence.
    pub virtualization: virt::Virtualization,
    /// CPU, NUMA, kernel, IOMMU.
    pub host: host::Host,
    /// NVIDIA devices on the PCIe bus.
    pub pcie: Vec<pcie::PciGpu>,
    /// What NVML said.
    pub nvml: gpu::NvmlSnapshot,
    /// /sys/module/nvidia_uvm/parameters/*.
    pub uvm_params: BTreeMap<String, String>,
    /// Files that could not be read (the probe went on without them).
    pub unreadable: Vec<String>,
}

/// `servetune probe --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Unix seconds.
    pub probed_at: u64,
    /// VM and container, with evidence.
    pub virtualization: virt::Virtualization,
    /// CPU, NUMA, kernel, IOMMU.
    pub host: host::Host,
    /// NVIDIA devices on the PCIe bus, with links and bridges.
    pub pcie: Vec<pcie::PciGpu>,
    /// GPUs as NVML lists them.
    pub gpus: Vec<gpu::Gpu>,
    /// Whether a driver answered, and its versions.
    pub driver: Driver,
    /// `nvidia-smi topo -m`'s matrix.
    pub topology: Topology,
    /// P2P status matrices by capability (read, write, nvlink, atomics), as `nvidia-smi topo -p2p`.
    pub p2p: BTreeMap<String, Vec<Vec<String>>>,
    /// /sys/module/nvidia_uvm/parameters/*.
    pub uvm_params: BTreeMap<String, String>,
    /// Ranked findings, most severe first.
    pub findings: Vec<findings::Finding>,
    /// Files that could not be read (the probe went on without them).
    pub unreadable: Vec<String>,
    /// What makes this report incomplete, e.g. a `--root` snapshot that lacks part of a capture.
    pub warnings: Vec<String>,
}

/// The NVIDIA driver as NVML saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Driver {
    /// NVML loaded and initialised.
    pub found: bool,
    /// Why not, when it did not.
    pub error: Option<String>,
    /// Driver version.
    pub driver_version: Option<String>,
    /// Highest CUDA version the driver supports.
    pub cuda_version: Option<String>,
}

/// The GPU topology matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    /// GPU names in the order of the matrices' rows and columns (GPU0, GPU1, ...).
    pub gpus: Vec<String>,
    /// `matrix[i][j]`: X, NV#, PIX, PXB, PHB, NODE or SYS (as `nvidia-smi topo -m`).
    pub matrix: Vec<Vec<String>>,
}

/// The `schema` of every probe document.
///
/// 1.1 (from 1): `host.iommu_groups` entries are `{id, kind}` objects instead of `[id, kind]`
/// arrays, and `warnings` is new.
pub const SCHEMA: &str = "servetune.probe/1.1";

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
    let mut pcie = pcie::detect(fs, &mut unreadable);
    pcie::check_numa_nodes(fs, &mut pcie, &host.numa_nodes.iter().map(|n| n.id).collect::<Vec<_>>());
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
        warnings: Vec::new(),
    }
}

/// Probes the live machine.
pub fn probe_live(now: u64) -> ProbeReport {
    report(gather(&fs::Root::live(), &gpu::Live, virt::cpuid_signature()), now)
}

/// What every capture holds (paths relative to its root), with what each is for.
const CAPTURE_PARTS: &[CapturePart] = &[
    CapturePart { path: "proc/cpuinfo", holds: "the CPU" },
    CapturePart { path: "sys/bus/pci/devices", holds: "the PCIe devices" },
    CapturePart { path: "nvml.json", holds: "NVML's view of the GPUs" },
];

/// One part of a capture.
struct CapturePart {
    path: &'static str,
    holds: &'static str,
}

/// Checks that `dir` looks like a capture: an error when it holds none of a capture's parts, a
/// warning per missing part when it holds some.
fn check_capture(dir: &Path) -> Result<Vec<String>, String> {
    if !dir.is_dir() {
        return Err(format!("--root {}: not a directory; give a tree written by servetune probe --capture", dir.display()));
    }
    let missing: Vec<&CapturePart> = CAPTURE_PARTS.iter().filter(|p| !dir.join(p.path).exists()).collect();
    if missing.len() == CAPTURE_PARTS.len() {
        return Err(format!(
            "--root {}: not a probe capture (it has none of {}); give a directory written by servetune probe --capture DIR",
            dir.display(),
            CAPTURE_PARTS.iter().map(|p| p.path).collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(missing
        .iter()
        .map(|p| {
            format!(
                "--root {}: the snapshot has no {} ({}), so that part of the report is empty; a capture written by servetune probe --capture always has it",
                dir.display(),
                p.path,
                p.holds
            )
        })
        .collect())
}

/// Analyses a snapshot tree (`--root DIR`) with its recorded `nvml.json`. An error when `dir` is
/// not a capture; a warning in the report for each part of a capture it lacks.
pub fn probe_root(dir: &Path, now: u64) -> Result<ProbeReport, String> {
    let mut warnings = check_capture(dir)?;
    let root = fs::Root::at(dir);
    let mut nvml = match root.read_file("/nvml.json") {
        Ok(Some(bytes)) => Some(serde_json::from_slice::<gpu::NvmlSnapshot>(&bytes).map_err(|e| {
            format!(
                "--root {}: nvml.json is not a recorded NVML snapshot ({e}); give the nvml.json servetune probe --capture wrote",
                dir.display()
            )
        })?),
        Ok(None) => None,
        Err(why) => {
            return Err(format!(
                "--root {}: nvml.json cannot be read: {why}; give the nvml.json servetune probe --capture wrote (a regular file)",
                dir.display()
            ))
        }
    };
    if let Some(n) = &mut nvml {
        n.check()
            .map_err(|why| format!("--root {}: nvml.json: {why}; give the nvml.json servetune probe --capture wrote", dir.display()))?;
        warnings.extend(n.drop_misshapen_matrices().into_iter().map(|w| format!("--root {}: nvml.json: {w}", dir.display())));
        // A limit of 0 (or -0) is one NVML did not report, as an older capture stored it:
        // unknown, as the live reader records it now.
        for g in &mut n.gpus {
            g.power_limit_w = g.power_limit_w.filter(|w| *w > 0.0);
        }
    }
    let mut r = report(gather(&root, &gpu::Recorded(nvml), None), now);
    r.warnings = warnings;
    r.warnings.extend(root.notes().into_iter().map(|n| format!("--root {}: {n}", dir.display())));
    Ok(r)
}

/// Probes the live machine and copies what it read into `dir` (with `nvml.json` and the CPUID
/// signature), so `probe_root(dir)` reproduces the report.
/// `dir` must be new or empty: a capture mixed into an older one describes no real machine, and a
/// link already in it would be written through.
pub fn capture(dir: &Path, now: u64) -> Result<(ProbeReport, usize), String> {
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(format!("--capture {}: that is a symbolic link; give a new folder", dir.display()));
    }
    if std::fs::metadata(dir).is_ok_and(|m| !m.is_dir()) {
        return Err(format!("--capture {}: that is a file, not a folder; give a new or empty folder", dir.display()));
    }
    if let Ok(mut entries) = std::fs::read_dir(dir) {
        if entries.next().is_some() {
            return Err(format!(
                "--capture {}: the folder is not empty, and a capture mixed into what is there describes no one machine; give a new or empty folder",
                dir.display()
            ));
        }
    }
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
