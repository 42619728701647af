//! CPU, sockets, NUMA nodes, kernel, IOMMU groups.

use serde::{Deserialize, Serialize};

use crate::fs::Root;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NumaNode {
    pub id: u32,
    pub cpus: String,
    pub memory_gb: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    pub cpu_model: Option<String>,
    pub sockets: u32,
    pub cores: u32,
    pub threads: u32,
    pub numa_nodes: Vec<NumaNode>,
    pub kernel: Option<String>,
    /// IOMMU group number and its type (DMA, DMA-FQ, identity, ...).
    pub iommu_groups: Vec<(u32, String)>,
}

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
    let cores = if cores_per.is_empty() { threads } else { cores_per.values().sum() };
    let mut numa_nodes = Vec::new();
    for n in fs.list("/sys/devices/system/node") {
        let Some(id) = n.strip_prefix("node").and_then(|x| x.parse::<u32>().ok()) else { continue };
        let cpus = fs.read(&format!("/sys/devices/system/node/{n}/cpulist")).unwrap_or_default();
        let mem = fs.read(&format!("/sys/devices/system/node/{n}/meminfo")).and_then(|m| {
            m.lines()
                .find(|l| l.contains("MemTotal:"))
                .and_then(|l| l.split_whitespace().rev().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
                .map(|kb| kb / 1e6)
        });
        numa_nodes.push(NumaNode { id, cpus, memory_gb: mem });
    }
    numa_nodes.sort_by_key(|n| n.id);
    let mut iommu_groups: Vec<(u32, String)> = fs
        .list("/sys/kernel/iommu_groups")
        .into_iter()
        .filter_map(|g| {
            let id = g.parse::<u32>().ok()?;
            Some((id, fs.read(&format!("/sys/kernel/iommu_groups/{g}/type")).unwrap_or_else(|| "unknown".into())))
        })
        .collect();
    iommu_groups.sort();
    Host { cpu_model: model, sockets: sockets_n, cores, threads, numa_nodes, kernel: fs.read("/proc/sys/kernel/osrelease"), iommu_groups }
}
