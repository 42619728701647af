//! A task's place in its job, read from the variables Slurm sets for every task (`SLURM_PROCID`,
//! `SLURM_NTASKS`, `SLURM_NODEID`, `SLURM_JOB_NUM_NODES`, `SLURM_LOCALID`, `SLURM_JOB_NODELIST`).
//! Multi-node launch templates and the all-reduce ranks come from here.

use std::collections::BTreeMap;

use crate::{Result, SlurmError};

/// Where a task sits in its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEnv {
    /// The job id (`SLURM_JOB_ID`).
    pub job_id: u64,
    /// The task's global rank (`SLURM_PROCID`).
    pub rank: usize,
    /// Tasks in the step (`SLURM_NTASKS`).
    pub ntasks: usize,
    /// The node's index in the job (`SLURM_NODEID`).
    pub node_rank: usize,
    /// Nodes in the job (`SLURM_JOB_NUM_NODES`, or `SLURM_NNODES`).
    pub nnodes: usize,
    /// The task's index on its node (`SLURM_LOCALID`): the GPU it drives.
    pub local_rank: usize,
    /// The job's nodes, expanded; the first is the head.
    pub nodes: Vec<String>,
}

impl TaskEnv {
    /// Reads the task's place from `vars` (the process environment in production, a captured one in
    /// tests); names the first variable that is missing or not a number.
    pub fn from_vars(vars: &BTreeMap<String, String>) -> Result<Self> {
        let num = |names: &[&str]| -> Result<u64> {
            let (name, v) = names
                .iter()
                .find_map(|n| vars.get(*n).map(|v| (*n, v)))
                .ok_or_else(|| SlurmError::Input(format!("{} is not set: run this inside a Slurm job step (srun)", names[0])))?;
            v.trim().parse().map_err(|_| SlurmError::Input(format!("{name}={v:?} is not a number")))
        };
        let list = vars.get("SLURM_JOB_NODELIST").or_else(|| vars.get("SLURM_NODELIST")).cloned().unwrap_or_default();
        let t = TaskEnv {
            job_id: num(&["SLURM_JOB_ID", "SLURM_JOBID"])?,
            rank: num(&["SLURM_PROCID"])? as usize,
            ntasks: num(&["SLURM_NTASKS", "SLURM_NPROCS"])? as usize,
            node_rank: num(&["SLURM_NODEID"])? as usize,
            nnodes: num(&["SLURM_JOB_NUM_NODES", "SLURM_NNODES"])? as usize,
            local_rank: num(&["SLURM_LOCALID"])? as usize,
            nodes: crate::expand_hostlist(&list),
        };
        if t.rank >= t.ntasks || t.node_rank >= t.nnodes {
            return Err(SlurmError::Input(format!(
                "SLURM_PROCID={} of SLURM_NTASKS={} (SLURM_NODEID={} of SLURM_JOB_NUM_NODES={}) is not a place in the job",
                t.rank, t.ntasks, t.node_rank, t.nnodes
            )));
        }
        Ok(t)
    }

    /// The process environment's view.
    pub fn from_env() -> Result<Self> {
        Self::from_vars(&std::env::vars().filter(|(k, _)| k.starts_with("SLURM_")).collect())
    }

    /// The head node (the first of the job's nodes), where rank 0 runs.
    pub fn head(&self) -> Option<&str> {
        self.nodes.first().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_captured_two_node_task_reads_its_ranks_and_head() {
        // Captured from `srun -N2 --ntasks-per-node=2 env` on a two-node job (second node, first task).
        let v = vars(&[
            ("SLURM_JOB_ID", "41"),
            ("SLURM_PROCID", "2"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_NODEID", "1"),
            ("SLURM_JOB_NUM_NODES", "2"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_JOB_NODELIST", "gpu[07-08]"),
        ]);
        let t = TaskEnv::from_vars(&v).expect("task");
        assert_eq!((t.rank, t.ntasks, t.node_rank, t.nnodes, t.local_rank), (2, 4, 1, 2, 0));
        assert_eq!(t.head(), Some("gpu07"));
        assert_eq!(t.nodes, ["gpu07", "gpu08"]);
    }

    #[test]
    fn a_missing_or_impossible_variable_is_named() {
        let e = TaskEnv::from_vars(&vars(&[("SLURM_JOB_ID", "1")])).expect_err("missing");
        assert!(e.to_string().contains("SLURM_PROCID is not set"), "{e}");
        let bad = vars(&[
            ("SLURM_JOB_ID", "1"),
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_NODEID", "0"),
            ("SLURM_NNODES", "1"),
            ("SLURM_LOCALID", "0"),
        ]);
        let e = TaskEnv::from_vars(&bad).expect_err("rank past ntasks");
        assert!(e.to_string().contains("SLURM_PROCID=5 of SLURM_NTASKS=4"), "{e}");
        // A job of no nodes is no job: refused, not read as one node.
        let mut none = bad.clone();
        none.insert("SLURM_PROCID".into(), "0".into());
        none.insert("SLURM_NNODES".into(), "0".into());
        let e = TaskEnv::from_vars(&none).expect_err("no nodes");
        assert!(e.to_string().contains("SLURM_NODEID=0 of SLURM_JOB_NUM_NODES=0"), "{e}");
    }
}
