//! CPU, sockets, NUMA nodes, kernel, IOMMU groups.

use serde::{Deserialize, Serialize};

use crate::fs::Root;

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NumaNode {
    /// The node number (sysfs `nodeN`).
    pub id: u32,
    /// Its CPUs as a cpulist (`0-31,64-95`).
    pub cpus: String,
    /// Its memory, GB (10^9 bytes).
    pub memory_gb: Option<f64>,
}

/// One IOMMU group.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct IommuGroup {
    /// The group number.
    pub id: u32,
    /// Its translation type as the kernel names it (DMA, DMA-FQ, identity, ...); `unknown` when
    /// the type file is missing.
    pub kind: String,
}

/// The CPU side of the box.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// The first `model name` in /proc/cpuinfo.
    pub cpu_model: Option<String>,
    /// Distinct `physical id`s (at least 1).
    pub sockets: u32,
    /// Physical cores over all sockets; 0 when unknown (a socket's `cpu cores` past any CPU made).
    pub cores: u32,
    /// Logical CPUs.
    pub threads: u32,
    /// NUMA nodes, by number.
    pub numa_nodes: Vec<NumaNode>,
    /// Kernel release.
    pub kernel: Option<String>,
    /// IOMMU groups, by number; empty when the IOMMU is off.
    pub iommu_groups: Vec<IommuGroup>,
}

/// The most memory one NUMA node is taken to have, kB (16 TiB).
const MAX_NODE_KB: u64 = 16 << 30;

/// The most cores one socket's `cpu cores` may give (today's largest server CPUs have 192; a
/// margin for what comes next): above it the figure is damaged, not a CPU.
const MAX_CORES_PER_SOCKET: u32 = 1024;

/// Reads the host's CPU, NUMA, kernel and IOMMU facts under `fs`.
pub fn detect(fs: &Root) -> Host {
    let cpuinfo = fs.read("/proc/cpuinfo").unwrap_or_default();
    let mut model = None;
    let mut sockets = std::collections::BTreeSet::new();
    let mut cores_per = std::collections::BTreeMap::new();
    let mut threads = 0;
    let mut cur_phys = 0u32;
    for l in cpuinfo.lines() {
        let Some((k, v)) = l.split_once(':') else { continue };
        let (k, v) = (k.trim(), v.trim());
        match k {
            "processor" => threads += 1,
            "model name" if model.is_none() => model = Some(v.to_string()),
            "physical id" => {
                cur_phys = v.parse().unwrap_or(0);
                sockets.insert(cur_phys);
            }
            "cpu cores" => {
                cores_per.insert(cur_phys, v.parse::<u32>().unwrap_or(0));
            }
            _ => {}
        }
    }
    let sockets_n = sockets.len().max(1) as u32;
    // A socket of more than MAX_CORES_PER_SOCKET cores is no CPU made: the count is unknown.
    // More cores than logical CPUs is not a fault: a container's cpuinfo (lxcfs) or a guest
    // with CPUs offline lists fewer CPUs than the sockets' cores.
    let cores = match cores_per.iter().find(|(_, c)| **c > MAX_CORES_PER_SOCKET) {
        Some((socket, c)) => {
            fs.skip(format!(
                "/proc/cpuinfo: socket {socket} has {c} cpu cores, more than any CPU made ({MAX_CORES_PER_SOCKET}), so the core count is shown as unknown"
            ));
            0
        }
        None if cores_per.is_empty() => threads,
        None => cores_per.values().fold(0u32, |a, c| a.saturating_add(*c)),
    };
    let mut numa_nodes = Vec::new();
    for n in fs.list("/sys/devices/system/node") {
        let Some(id) = n.strip_prefix("node").and_then(|x| x.parse::<u32>().ok()) else { continue };
        let cpus = fs.read(&format!("/sys/devices/system/node/{n}/cpulist")).unwrap_or_default();
        let file = format!("/sys/devices/system/node/{n}/meminfo");
        let total = fs
            .read(&file)
            .and_then(|m| m.lines().find(|l| l.contains("MemTotal:")).and_then(|l| l.split_whitespace().rev().nth(1)).map(str::to_string));
        // A whole number of kB, at most MAX_NODE_KB; anything else (NaN, 1e300, -5) is unknown.
        let mem = total.as_deref().and_then(|kb| match kb.parse::<u64>() {
            Ok(kb) if kb <= MAX_NODE_KB => Some(kb as f64 / 1e6),
            _ => {
                fs.skip(format!(
                    "{file}: MemTotal {kb} is not a whole number of kB up to 16 TiB, so node {id}'s memory is shown as unknown"
                ));
                None
            }
        });
        numa_nodes.push(NumaNode { id, cpus, memory_gb: mem });
    }
    numa_nodes.sort_by_key(|n| n.id);
    let mut iommu_groups: Vec<IommuGroup> = fs
        .list("/sys/kernel/iommu_groups")
        .into_iter()
        .filter_map(|g| {
            let id = g.parse::<u32>().ok()?;
            Some(IommuGroup { id, kind: fs.read(&format!("/sys/kernel/iommu_groups/{g}/type")).unwrap_or_else(|| "unknown".into()) })
        })
        .collect();
    iommu_groups.sort();
    Host { cpu_model: model, sockets: sockets_n, cores, threads, numa_nodes, kernel: fs.read("/proc/sys/kernel/osrelease"), iommu_groups }
}
