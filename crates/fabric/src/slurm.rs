//! NCCL all-reduce across the nodes of a Slurm allocation: `srun` starts one worker per GPU
//! (ranks from `SLURM_PROCID`, the GPU from `SLURM_LOCALID`), rank 0 makes NCCL's unique id and
//! hands it to the others through a file in a directory the nodes share, each worker writes its
//! timings to a file of its own, and NCCL's `NCCL_DEBUG=INFO` lines (one file per process through
//! `NCCL_DEBUG_FILE`) give the transport of every channel (NET/IB, NET/Socket, P2P, SHM).
//! The sim backend runs the same launch and hand-over with simulated timings, so the Slurm path is
//! tested on machines without GPUs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use servetune_slurm::{Slurm, SlurmError, TaskEnv};

use crate::nccl::{self, WorkerOut};
use crate::sim::{SimAllReduce, SimFabric};
use crate::{AllReduce, AllReduceRun, EnvSetting, FabricError};

const ID_FILE: &str = "nccl-id";
const FAILED_FILE: &str = "nccl-id.failed";
/// How long ranks above 0 wait for rank 0's id.
const ID_WAIT: Duration = Duration::from_secs(120);

fn slurm_err(e: SlurmError) -> FabricError {
    match e {
        SlurmError::Command(m) => FabricError::Runtime(m),
        other => FabricError::Input(other.to_string()),
    }
}

/// The all-reduce over an allocation of `nodes` x `gpus_per_node` ranks.
#[derive(Debug, Clone)]
pub struct SlurmAllReduce {
    /// Nodes.
    pub nodes: u32,
    /// Ranks (GPUs) per node.
    pub gpus_per_node: u32,
    /// The partition, when not the default.
    pub partition: Option<String>,
    /// The program and leading words that start one worker (`servetune fabric allreduce-worker`).
    pub worker_cmd: Vec<String>,
    /// Simulate the timings on this link instead of running NCCL.
    pub sim_link: Option<String>,
    /// The shared directory for the id hand-over, results and NCCL logs.
    pub dir: PathBuf,
    /// Ask Slurm for the GPUs as gres (`--gpus-per-node`); off where the partition lists none.
    pub request_gpus: bool,
}

impl SlurmAllReduce {
    /// Whether `partition` (the default one when `None`) lists GPUs as gres.
    pub fn partition_has_gpus(partition: Option<&str>) -> Result<bool, FabricError> {
        let parts = Slurm::default().partitions().map_err(slurm_err)?;
        let p = match partition {
            Some(name) => parts.iter().find(|p| p.name == name).ok_or_else(|| {
                FabricError::Input(format!(
                    "--partition {name} is not a partition of this cluster; sinfo lists: {}",
                    parts.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
                ))
            })?,
            None => {
                parts.iter().find(|p| p.default).or(parts.first()).ok_or_else(|| FabricError::Input("sinfo lists no partition".into()))?
            }
        };
        Ok(p.gpus_per_node() > 0)
    }
}

impl SlurmAllReduce {
    fn srun_args(&self, sizes: &[u64], iters: u32, env: &[EnvSetting]) -> Vec<String> {
        let d = self.dir.display();
        let mut export = format!("--export=ALL,NCCL_DEBUG=INFO,NCCL_DEBUG_FILE={d}/nccl-%h-%p.log");
        for e in env {
            export.push_str(&format!(",{}={}", e.name, e.value));
        }
        let mut a = vec![
            format!("--nodes={}", self.nodes),
            format!("--ntasks-per-node={}", self.gpus_per_node),
            "--kill-on-bad-exit=0".into(),
            export,
            format!("--output={d}/rank-%t.json"),
            format!("--error={d}/rank-%t.err"),
        ];
        if self.sim_link.is_none() && self.request_gpus {
            a.push(format!("--gpus-per-node={}", self.gpus_per_node));
        }
        if let Some(p) = &self.partition {
            a.push(format!("--partition={p}"));
        }
        a.extend(self.worker_cmd.iter().cloned());
        a.extend(["--slurm-rendezvous".into(), d.to_string()]);
        a.extend(["--sizes".into(), sizes.iter().map(u64::to_string).collect::<Vec<_>>().join(",")]);
        a.extend(["--iters".into(), iters.to_string()]);
        if let Some(l) = &self.sim_link {
            a.extend(["--sim-link".into(), l.clone()]);
        }
        a
    }
}

impl AllReduce for SlurmAllReduce {
    fn name(&self) -> &'static str {
        if self.sim_link.is_some() {
            "sim (slurm)"
        } else {
            "nccl (slurm)"
        }
    }

    fn run(&mut self, _ranks: &[usize], sizes: &[u64], iters: u32, env: &[EnvSetting]) -> Result<AllReduceRun, FabricError> {
        Slurm::check_installed().map_err(slurm_err)?;
        let _ = std::fs::remove_dir_all(&self.dir);
        std::fs::create_dir_all(&self.dir).map_err(|e| FabricError::Runtime(format!("{}: {e}", self.dir.display())))?;
        let n = (self.nodes * self.gpus_per_node) as usize;
        let out = Slurm::default().srun(&self.srun_args(sizes, iters, env), Duration::from_secs(1800)).map_err(slurm_err)?;
        let mut outs = Vec::new();
        let mut errors = Vec::new();
        for r in 0..n {
            let body = rank_file(&self.dir.join(format!("rank-{r}.json"))).unwrap_or_default();
            match body.lines().find_map(|l| serde_json::from_str::<WorkerOut>(l.trim()).ok()) {
                Some(w) => outs.push(w),
                None => {
                    let err = rank_file(&self.dir.join(format!("rank-{r}.err"))).unwrap_or_default();
                    errors.push(format!("rank {r}: {}", err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no result")));
                }
            }
        }
        let started = (0..n).any(|r| self.dir.join(format!("rank-{r}.err")).exists() || self.dir.join(format!("rank-{r}.json")).exists());
        if !started {
            return Err(FabricError::Input(format!("srun did not start the ranks: {}", out.stderr.trim())));
        }
        if outs.len() < n {
            if outs.is_empty() && errors.iter().all(|e| e.contains("no NVIDIA driver found")) {
                return Err(FabricError::NoDriver {
                    searched: format!("{}; each of the {n} ranks on {} node(s) said so", crate::cuda::searched(), self.nodes),
                });
            }
            let srun = out.stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").to_string();
            return Err(FabricError::Runtime(format!("{} of {n} ranks gave no result: {} {srun}", n - outs.len(), errors.join("; "))));
        }
        let points = nccl::slowest(sizes, &outs);
        let mut log = String::new();
        for e in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().starts_with("nccl-") && e.file_name().to_string_lossy().ends_with(".log") {
                log.push_str(&rank_file(&e.path()).unwrap_or_default());
            }
        }
        Ok(AllReduceRun { ranks: n, points, transports: nccl::transports(&log), env: env.to_vec() })
    }
}

/// One worker inside the srun step: its rank from Slurm, the id from rank 0, then the timings.
pub fn worker(dir: &Path, sizes: &[u64], iters: u32, sim_link: Option<&str>) -> Result<WorkerOut, FabricError> {
    crate::measure::check_iters(iters)?;
    let t = TaskEnv::from_env().map_err(slurm_err)?;
    let id = hand_over(dir, t.rank, || match sim_link {
        Some(_) => Ok(format!("{:0>256}", format!("{:x}{:x}", t.job_id, std::process::id()))),
        None => {
            if !crate::cuda::driver_present() {
                return Err(FabricError::NoDriver { searched: crate::cuda::searched() });
            }
            nccl::load()?.unique_id().map(|id| id.0.iter().map(|b| format!("{b:02x}")).collect())
        }
    })?;
    match sim_link {
        Some(link) => {
            let mut ar = SimAllReduce { fabric: SimFabric::new(t.ntasks, link)? };
            let ranks: Vec<usize> = (0..t.ntasks).collect();
            let run = ar.run(&ranks, sizes, iters, &[])?;
            Ok(WorkerOut { rank: t.rank, points: run.points })
        }
        None => nccl::worker(t.rank, t.ntasks, t.local_rank, &id, sizes, iters),
    }
}

/// Rank 0 makes the id with `make` and writes it (or why it could not); the others wait for it.
/// Both files appear whole (written beside, then renamed), so a waiting rank never reads one
/// half-written.
fn hand_over(dir: &Path, rank: usize, make: impl FnOnce() -> Result<String, FabricError>) -> Result<String, FabricError> {
    let (id_path, failed_path) = (dir.join(ID_FILE), dir.join(FAILED_FILE));
    let publish = |path: &Path, text: &str| {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, path))
    };
    if rank == 0 {
        return match make() {
            Ok(id) => {
                publish(&id_path, &id).map_err(|e| FabricError::Runtime(format!("{}: {e}", id_path.display())))?;
                Ok(id)
            }
            Err(e) => {
                let _ = publish(&failed_path, &e.to_string());
                Err(e)
            }
        };
    }
    let until = Instant::now() + ID_WAIT;
    loop {
        if let Some(id) = rank_file(&id_path) {
            return Ok(id.trim().to_string());
        }
        if let Some(why) = rank_file(&failed_path) {
            return Err(if why.starts_with("no NVIDIA driver found") {
                FabricError::NoDriver { searched: crate::cuda::searched() }
            } else {
                FabricError::Runtime(format!("rank 0 could not start the communicator: {why}"))
            });
        }
        if Instant::now() > until {
            return Err(FabricError::Runtime(format!(
                "rank {rank}: no NCCL id from rank 0 in {} within {ID_WAIT:?}: is the directory shared by the nodes?",
                dir.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The most a rank's result, log or rendezvous file is read: results are one JSON line, NCCL's
/// INFO log a few MB per rank.
const MAX_RANK_FILE: u64 = 64 << 20;

/// A file a rank wrote on the shared folder, bounded; `None` when it is missing or unreadable
/// (a too-large file is then treated as no result, and the run says which rank gave none).
fn rank_file(p: &Path) -> Option<String> {
    servetune_io::read_bytes(p, &p.display().to_string(), MAX_RANK_FILE).ok().map(|b| String::from_utf8_lossy(&b).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_0s_id_or_its_failure_reaches_the_other_ranks() {
        let d = std::env::temp_dir().join(format!("servetune-handover-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        let dd = d.clone();
        let other = std::thread::spawn(move || hand_over(&dd, 1, || unreachable!("only rank 0 makes the id")));
        assert_eq!(hand_over(&d, 0, || Ok("abc".into())).expect("rank 0"), "abc");
        assert_eq!(other.join().expect("thread").expect("rank 1"), "abc");
        std::fs::remove_file(d.join(ID_FILE)).expect("rm");
        let dd = d.clone();
        let other = std::thread::spawn(move || hand_over(&dd, 2, || unreachable!()));
        let e = hand_over(&d, 0, || Err(FabricError::NoDriver { searched: "libcuda.so.1".into() })).expect_err("no driver");
        assert!(e.to_string().starts_with("no NVIDIA driver found"));
        assert!(other.join().expect("thread").expect_err("told").to_string().starts_with("no NVIDIA driver found"));
        let _ = std::fs::remove_dir_all(&d);
    }
}
