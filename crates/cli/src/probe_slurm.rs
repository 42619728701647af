//! `servetune probe --slurm`: the probe on every node of a Slurm allocation (srun, one task per
//! node, each writing its report to a file of its own in a directory the nodes share), merged
//! into per-node findings and a table of what differs between nodes.

use std::collections::BTreeMap;
use std::time::Duration;

use servetune_probe::cluster::{self, NodeReport};
use servetune_slurm::{Slurm, SlurmError};

use crate::probe_cmd::ProbeArgs;
use crate::Failure;

fn slurm_failure(e: SlurmError) -> Failure {
    match e {
        SlurmError::Command(m) => Failure::runtime(m),
        other => Failure::usage(other.to_string()),
    }
}

/// How many nodes: the flag, else the allocation's, else the partition's.
fn node_count(a: &ProbeArgs, slurm: &Slurm) -> Result<u32, Failure> {
    if let Some(n) = a.nodes {
        return if n == 0 { Err(Failure::usage("--nodes 0: probe at least one node")) } else { Ok(n) };
    }
    if let Some(n) = std::env::var("SLURM_JOB_NUM_NODES").ok().and_then(|v| v.parse().ok()) {
        return Ok(n);
    }
    let parts = slurm.partitions().map_err(slurm_failure)?;
    let listing = parts.iter().map(|p| p.name.clone()).collect::<Vec<_>>().join(", ");
    let part = match &a.partition {
        Some(name) => parts
            .iter()
            .find(|p| &p.name == name)
            .ok_or_else(|| Failure::usage(format!("--partition {name} is not a partition of this cluster; sinfo lists: {listing}")))?,
        None => parts.iter().find(|p| p.default).or(parts.first()).ok_or_else(|| Failure::usage("sinfo lists no partition"))?,
    };
    Ok(part.nodes.max(1))
}

/// Runs the probe on every node and prints (and writes) the merged report.
pub fn run(a: &ProbeArgs) -> Result<(), Failure> {
    Slurm::check_installed().map_err(slurm_failure)?;
    let slurm = Slurm::default();
    let n = node_count(a, &slurm)?;
    let exe = std::env::current_exe().map_err(|e| Failure::runtime(format!("cannot find the servetune binary: {e}")))?;
    // The nodes write into the current directory, which a cluster shares (home or project space).
    let dir = Scratch::new()?;
    let mut args = vec![format!("--nodes={n}"), "--ntasks-per-node=1".into(), "--kill-on-bad-exit=0".into()];
    if let Some(p) = &a.partition {
        args.push(format!("--partition={p}"));
    }
    args.push(format!("--output={}/node-%t.json", dir.path().display()));
    args.push(format!("--error={}/node-%t.err", dir.path().display()));
    args.extend([exe.display().to_string(), "probe".into(), "--as-slurm-task".into()]);
    crate::tell!("probing {n} node(s) with srun ...");
    let out = slurm.srun(&args, Duration::from_secs(600)).map_err(slurm_failure)?;
    if out.code.is_none() || (out.code != Some(0) && !dir.path().join("node-0.json").exists()) {
        return Err(Failure::usage(format!("srun did not run the probe: {}", out.stderr.trim())));
    }
    let (reports, failed) = collect(dir.path(), n as usize);
    if reports.is_empty() {
        return Err(Failure::runtime(format!("no node returned a report: {}", failed.values().cloned().collect::<Vec<_>>().join("; "))));
    }
    let report = cluster::merge(reports, failed);
    if !a.quiet && a.json.as_ref().is_none_or(|j| j.as_os_str() != "-") {
        let _ = cluster::write_terminal(&report, std::io::stdout().lock());
    }
    match &a.json {
        Some(p) => crate::write_json(p, &report),
        None => Ok(()),
    }
}

/// A directory for the nodes' files, removed when the command ends.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new() -> Result<Self, Failure> {
        let p = std::env::current_dir()
            .map_err(|e| Failure::runtime(format!("no current directory: {e}")))?
            .join(format!(".servetune-probe-slurm-{}", std::process::id()));
        std::fs::create_dir_all(&p).map_err(|e| Failure::runtime(format!("cannot make {} for the nodes' reports: {e}", p.display())))?;
        Ok(Self(p))
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The most a node's report may hold: a probe report is tens of KB (its GPUs, links, NICs).
const MAX_NODE_REPORT: u64 = 16 * servetune_io::MIB;

/// How much of the end of a node's stderr is read for its last line.
const ERR_TAIL: u64 = 64 * 1024;

/// Each task's report, and why the others have none.
fn collect(dir: &std::path::Path, n: usize) -> (Vec<NodeReport>, BTreeMap<String, String>) {
    let mut reports = Vec::new();
    let mut failed = BTreeMap::new();
    for t in 0..n {
        let path = dir.join(format!("node-{t}.json"));
        let body = match servetune_io::read_regular(&path, &format!("task {t}'s report {}", path.display()), MAX_NODE_REPORT) {
            Ok(b) => b,
            Err(e @ servetune_io::ReadError::TooLarge { .. }) => {
                failed.insert(format!("task {t}"), e.to_string());
                continue;
            }
            Err(_) => Vec::new(),
        };
        match serde_json::from_slice::<NodeReport>(body.trim_ascii()) {
            Ok(r) => reports.push(r),
            Err(e) => {
                let err_path = dir.join(format!("node-{t}.err"));
                let err = servetune_io::read_tail(&err_path, &err_path.display().to_string(), ERR_TAIL).unwrap_or_default();
                let err = String::from_utf8_lossy(&err);
                let why = err.lines().rev().find(|l| !l.trim().is_empty()).map_or_else(|| format!("no report ({e})"), str::to_string);
                failed.insert(format!("task {t}"), why);
            }
        }
    }
    (reports, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_report_over_its_limit_is_that_nodes_failure_and_its_stderr_tail_names_the_cause() {
        let d = tempfile::tempdir().expect("tmp");
        let report = d.path().join("node-0.json");
        std::fs::File::create(&report).expect("create").set_len(MAX_NODE_REPORT + 1).expect("len");
        let mut err = "x".repeat(2 * ERR_TAIL as usize);
        err.push_str("\nnvidia-smi: not found\n");
        std::fs::write(d.path().join("node-1.err"), err).expect("write");
        let (reports, failed) = collect(d.path(), 2);
        assert!(reports.is_empty());
        assert!(failed["task 0"].contains("larger than 16 MiB"), "{failed:?}");
        assert_eq!(failed["task 1"], "nvidia-smi: not found");
    }
}
