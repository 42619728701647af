//! A cluster's probe: one report per node (from `servetune probe --slurm`, or snapshots), merged
//! into what differs between nodes (the node with another driver, a downgraded link, no P2P, a
//! different kernel) and which findings hold on every node or only on some.

use std::collections::BTreeMap;
use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::findings::Severity;
use crate::ProbeReport;

/// The cluster report's schema.
pub const SCHEMA: &str = "servetune.probe-cluster/1";

/// One node's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    /// The node's name (Slurm's node name, or the snapshot's).
    pub node: String,
    /// Its probe.
    pub report: ProbeReport,
}

/// One aspect whose value is not the same on every node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    /// What differs (`driver`, `gpus`, `p2p`, ...).
    pub aspect: String,
    /// Each node's value.
    pub values: BTreeMap<String, String>,
    /// The nodes that differ from the most common value (the ones to look at).
    pub odd_nodes: Vec<String>,
}

/// A finding and the nodes it holds on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterFinding {
    /// How much it matters.
    pub severity: Severity,
    /// The finding's title (as on one node).
    pub title: String,
    /// Its fix.
    pub fix: String,
    /// The nodes it holds on.
    pub nodes: Vec<String>,
    /// Whether it holds on every node.
    pub everywhere: bool,
}

/// The merged report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterReport {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Every node's summary values, by aspect.
    pub nodes: BTreeMap<String, BTreeMap<String, String>>,
    /// The aspects that differ, most important first.
    pub differences: Vec<Difference>,
    /// Findings, most severe first, with the nodes they hold on.
    pub findings: Vec<ClusterFinding>,
    /// Nodes whose probe failed, with why.
    pub failed: BTreeMap<String, String>,
    /// The per-node reports.
    pub reports: Vec<NodeReport>,
}

/// The values two nodes of one cluster should share, in the order they matter for serving.
fn aspects(r: &ProbeReport) -> Vec<(&'static str, String)> {
    let gpus = {
        let mut by: BTreeMap<&str, usize> = BTreeMap::new();
        for g in &r.gpus {
            *by.entry(g.name.as_str()).or_default() += 1;
        }
        if by.is_empty() {
            format!("{} NVIDIA PCIe device(s), none through NVML", r.pcie.len())
        } else {
            by.iter().map(|(n, c)| format!("{c} x {n}")).collect::<Vec<_>>().join(", ")
        }
    };
    let links = {
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for p in &r.pcie {
            let l = &p.link;
            let w = format!(
                "Gen{} x{}{}",
                l.current_gen.map_or("?".into(), |g| g.to_string()),
                l.current_width.map_or("?".into(), |w| w.to_string()),
                if l.downgraded { " (downgraded)" } else { "" }
            );
            *by.entry(w).or_default() += 1;
        }
        by.iter().map(|(w, c)| format!("{c} x {w}")).collect::<Vec<_>>().join(", ")
    };
    let p2p = r.p2p.get("read").map_or_else(
        || "not read".to_string(),
        |m| {
            let cells: Vec<&String> =
                m.iter().enumerate().flat_map(|(i, row)| row.iter().enumerate().filter(move |(j, _)| *j != i).map(|(_, c)| c)).collect();
            let ok = cells.iter().filter(|c| c.as_str() == "OK").count();
            format!("{ok} of {} pairs OK", cells.len())
        },
    );
    let numa = r.host.numa_nodes.len().to_string();
    vec![
        ("virtualization", format!("vm {} / container {}", r.virtualization.vm.name(), r.virtualization.container.name())),
        ("gpus", gpus),
        ("driver", r.driver.driver_version.clone().unwrap_or_else(|| if r.driver.found { "unknown".into() } else { "no driver".into() })),
        ("cuda", r.driver.cuda_version.clone().unwrap_or_else(|| "-".into())),
        ("p2p", p2p),
        ("pcie links", if links.is_empty() { "none".into() } else { links }),
        ("numa nodes", numa),
        ("kernel", r.host.kernel.clone().unwrap_or_else(|| "unknown".into())),
        ("cpu", r.host.cpu_model.clone().unwrap_or_else(|| "unknown".into())),
        ("nvidia_uvm hmm", r.uvm_params.get("uvm_disable_hmm").map_or("-".into(), |v| format!("uvm_disable_hmm={v}"))),
    ]
}

/// Merges node reports (in node order) and the nodes whose probe failed.
pub fn merge(reports: Vec<NodeReport>, failed: BTreeMap<String, String>) -> ClusterReport {
    let mut nodes: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut order: Vec<&'static str> = Vec::new();
    for nr in &reports {
        let a = aspects(&nr.report);
        if order.is_empty() {
            order = a.iter().map(|(k, _)| *k).collect();
        }
        nodes.insert(nr.node.clone(), a.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    }
    let mut differences = Vec::new();
    for aspect in order {
        let values: BTreeMap<String, String> = nodes.iter().filter_map(|(n, a)| a.get(aspect).map(|v| (n.clone(), v.clone()))).collect();
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for v in values.values() {
            *counts.entry(v.as_str()).or_default() += 1;
        }
        if counts.len() <= 1 {
            continue;
        }
        // The most common value is the norm (ties: the first node's value).
        let first = reports.first().and_then(|r| values.get(&r.node)).map(String::as_str);
        let best = counts.values().copied().max().unwrap_or(0);
        let norm = first
            .filter(|f| counts.get(f) == Some(&best))
            .or_else(|| counts.iter().find(|(_, c)| **c == best).map(|(v, _)| *v))
            .unwrap_or("");
        let odd_nodes = values.iter().filter(|(_, v)| v.as_str() != norm).map(|(n, _)| n.clone()).collect();
        differences.push(Difference { aspect: aspect.to_string(), values, odd_nodes });
    }
    let mut by_title: BTreeMap<(Severity, String), ClusterFinding> = BTreeMap::new();
    for nr in &reports {
        for f in &nr.report.findings {
            let e = by_title.entry((f.severity, f.title.clone())).or_insert_with(|| ClusterFinding {
                severity: f.severity,
                title: f.title.clone(),
                fix: f.fix.clone(),
                nodes: Vec::new(),
                everywhere: false,
            });
            e.nodes.push(nr.node.clone());
        }
    }
    let n = reports.len();
    let findings = by_title
        .into_values()
        .map(|mut f| {
            f.everywhere = f.nodes.len() == n;
            f
        })
        .collect();
    ClusterReport { schema: SCHEMA.into(), nodes, differences, findings, failed, reports }
}

/// The terminal view: what differs, then the findings with their nodes.
pub fn write_terminal(c: &ClusterReport, mut w: impl Write) -> std::io::Result<()> {
    writeln!(
        w,
        "== cluster: {} node(s) probed{}",
        c.reports.len(),
        if c.failed.is_empty() { String::new() } else { format!(", {} failed", c.failed.len()) }
    )?;
    for (n, why) in &c.failed {
        writeln!(w, "  {n}: probe failed: {why}")?;
    }
    if c.differences.is_empty() {
        writeln!(w, "== what differs between nodes\n  nothing: every node reports the same virtualization, GPUs, driver, CUDA, P2P, links, NUMA, kernel, CPU and HMM setting")?;
    } else {
        writeln!(w, "== what differs between nodes (look at the odd nodes first)")?;
        for d in &c.differences {
            writeln!(w, "  {}: odd node(s) {}", d.aspect, d.odd_nodes.join(", "))?;
            for (n, v) in &d.values {
                writeln!(w, "    {n:<16} {v}")?;
            }
        }
    }
    writeln!(w, "== findings")?;
    if c.findings.is_empty() {
        writeln!(w, "  none")?;
    }
    for f in &c.findings {
        let sev = match f.severity {
            Severity::Critical => "Critical",
            Severity::Warning => "Warning",
            Severity::Info => "Info",
        };
        let on = if f.everywhere { "every node".to_string() } else { format!("only {}", f.nodes.join(", ")) };
        writeln!(w, "  [{sev}] {} ({on})\n      fix: {}", f.title, f.fix)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(name: &str) -> ProbeReport {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
        crate::probe_root(&dir, 0).expect("fixture")
    }

    #[test]
    fn the_node_without_p2p_in_a_kvm_guest_is_named_as_the_odd_one() {
        let nodes = vec![
            NodeReport { node: "gpu01".into(), report: fixture("bare-metal-8gpu") },
            NodeReport { node: "gpu02".into(), report: fixture("bare-metal-8gpu") },
            NodeReport { node: "gpu03".into(), report: fixture("proxmox-kvm-8gpu") },
        ];
        let c = merge(nodes, BTreeMap::new());
        let virt = c.differences.iter().find(|d| d.aspect == "virtualization").expect("virtualization differs");
        assert_eq!(virt.odd_nodes, ["gpu03"]);
        let p2p = c.differences.iter().find(|d| d.aspect == "p2p").expect("p2p differs");
        assert_eq!(p2p.odd_nodes, ["gpu03"]);
        assert!(p2p.values["gpu01"].contains("56 of 56") || p2p.values["gpu01"].contains("of 56 pairs OK"), "{:?}", p2p.values);
        let crit = c.findings.iter().find(|f| f.severity == Severity::Critical).expect("critical finding");
        assert_eq!((crit.nodes.clone(), crit.everywhere), (vec!["gpu03".to_string()], false));
        let mut out = Vec::new();
        write_terminal(&c, &mut out).expect("render");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.contains("p2p: odd node(s) gpu03") && text.contains("(only gpu03)"), "{text}");
    }

    #[test]
    fn identical_nodes_differ_in_nothing_and_their_findings_hold_everywhere() {
        let nodes = (1..=2).map(|i| NodeReport { node: format!("n{i}"), report: fixture("proxmox-lxc-8gpu") }).collect();
        let c = merge(nodes, BTreeMap::from([("n3".to_string(), "srun: error: n3: task 2: Exited with exit code 1".to_string())]));
        assert!(c.differences.is_empty(), "{:?}", c.differences);
        assert!(!c.findings.is_empty() && c.findings.iter().all(|f| f.everywhere));
        assert_eq!(c.failed.len(), 1);
    }
}
