//! `servetune fabric`: measure the GPU interconnect the way serving engines use it.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use servetune_fabric::cuda::CudaFabric;
use servetune_fabric::measure::{self, P2pOptions};
use servetune_fabric::nccl::NcclAllReduce;
use servetune_fabric::report::{self, FabricReport};
use servetune_fabric::sim::{SimAllReduce, SimFabric};
use servetune_fabric::{parse_size, sizes, AllReduce, Fabric, FabricError};

use crate::Failure;

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Backend {
    /// The CUDA driver (and NCCL for allreduce), loaded at run time
    Cuda,
    /// A simulated fabric of --sim-gpus GPUs joined by --sim-link
    Sim,
}

/// Where results go, and the simulated fabric's shape.
#[derive(Debug, Args)]
pub struct Common {
    /// What to measure: the real GPUs through the CUDA driver, or simulated ones (no GPU needed)
    #[arg(long, value_enum, default_value = "cuda")]
    pub backend: Backend,
    /// GPU indices (default: all)
    #[arg(long, value_delimiter = ',')]
    pub gpus: Vec<usize>,
    /// Smallest size (4, 64K, 256M, 1G)
    #[arg(long)]
    pub min_size: Option<String>,
    /// Largest size
    #[arg(long)]
    pub max_size: Option<String>,
    /// Write the report as JSON (servetune.fabric/1.1; `-` for stdout); a p2p report carries the link for `servetune plan --fabric FILE`
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the report as Markdown tables
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// --backend sim: number of GPUs
    #[arg(long, default_value_t = 8)]
    pub sim_gpus: usize,
    /// --backend sim: link (pcie-host-staged, pcie5-p2p, pcie4-p2p, nvlink)
    #[arg(long, default_value = "pcie-host-staged")]
    pub sim_link: String,
}

#[derive(Debug, Subcommand)]
pub enum FabricCmd {
    /// GPU-to-GPU copies for every pair and size, P2P enabled and host-staged (p2pBandwidthLatencyTest's matrices)
    P2p {
        #[command(flatten)]
        common: Common,
        /// Copies per measurement at the smallest sizes
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
        iters: u32,
        /// Write a pattern through P2P and read it back on the peer: proves P2P delivers data
        #[arg(long)]
        verify: bool,
    },
    /// NCCL all-reduce, one process per GPU, with nccl-tests' algbw and busbw
    Allreduce {
        #[command(flatten)]
        common: Common,
        /// All-reduces per measurement
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
        iters: u32,
        /// Compare a setting with the defaults, e.g. NCCL_P2P_DISABLE=1 or NCCL_ALGO=Tree (repeatable)
        #[arg(long, value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// Across the nodes of a Slurm allocation: srun starts one rank per GPU (ranks from Slurm)
        #[arg(long, help_heading = "Slurm")]
        slurm: bool,
        /// --slurm: nodes
        #[arg(long, default_value_t = 2, requires = "slurm", help_heading = "Slurm")]
        nodes: u32,
        /// --slurm: ranks (GPUs) per node (with --backend sim: simulated GPUs per node)
        #[arg(long, default_value_t = 8, requires = "slurm", help_heading = "Slurm")]
        gpus_per_node: u32,
        /// --slurm: the partition
        #[arg(long, requires = "slurm", help_heading = "Slurm")]
        partition: Option<String>,
    },
    /// Host memory copies per NUMA-node pair; with GPUs, pinned and pageable H2D/D2H
    Host {
        /// Smallest size (4, 64K, 256M, 1G)
        #[arg(long)]
        min_size: Option<String>,
        /// Largest size
        #[arg(long)]
        max_size: Option<String>,
        /// Write the report as JSON (servetune.fabric/1.1; `-` for stdout)
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Write the report as Markdown tables
        #[arg(long, value_name = "FILE")]
        markdown: Option<PathBuf>,
    },
    /// One all-reduce rank (started by `fabric allreduce`)
    #[command(hide = true)]
    AllreduceWorker {
        #[arg(long, required_unless_present = "slurm_rendezvous")]
        rank: Option<usize>,
        #[arg(long, required_unless_present = "slurm_rendezvous")]
        nranks: Option<usize>,
        #[arg(long, required_unless_present = "slurm_rendezvous")]
        device: Option<usize>,
        #[arg(long, required_unless_present = "slurm_rendezvous")]
        id: Option<String>,
        #[arg(long, value_delimiter = ',')]
        sizes: Vec<u64>,
        #[arg(long)]
        iters: u32,
        /// Inside an srun step: ranks from SLURM_*, the id handed over in this shared directory
        #[arg(long, value_name = "DIR")]
        slurm_rendezvous: Option<PathBuf>,
        /// With --slurm-rendezvous: simulate the timings on this link
        #[arg(long)]
        sim_link: Option<String>,
    },
}

/// Measure the GPU interconnect: P2P and host-staged copies, NCCL all-reduce, host memory.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  servetune fabric p2p --verify --json p2p.json   # then: servetune plan ... --fabric p2p.json\n  servetune fabric allreduce --env NCCL_P2P_DISABLE=1\n  servetune fabric host\n  servetune fabric p2p --backend sim --sim-gpus 8 --sim-link pcie-host-staged"
)]
pub struct FabricArgs {
    #[command(subcommand)]
    pub cmd: FabricCmd,
}

fn fail(e: FabricError) -> Failure {
    match e {
        FabricError::Input(m) => Failure::usage(m),
        e @ FabricError::NoDriver { .. } => Failure::runtime(format!(
            "{e}; without a GPU, --backend sim runs the same measurement on simulated GPUs (add --backend sim --sim-link pcie5-p2p to this command)"
        )),
        other => Failure::runtime(other.to_string()),
    }
}

fn size_range(min: &Option<String>, max: &Option<String>, dmin: u64, dmax: u64) -> Result<Vec<u64>, Failure> {
    let lo = min.as_deref().map(|s| parse_size("--min-size", s)).transpose().map_err(fail)?.unwrap_or(dmin);
    let hi = max.as_deref().map(|s| parse_size("--max-size", s)).transpose().map_err(fail)?.unwrap_or(dmax);
    sizes(lo, hi).map_err(fail)
}

fn progress(label: &'static str) -> impl FnMut(usize, usize) {
    let tty = std::io::stderr().is_terminal();
    move |done, total| {
        if tty {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[2K[{label}] {done}/{total} measurements");
            if done == total {
                let _ = write!(e, "\r\x1b[2K");
            }
            let _ = e.flush();
        }
    }
}

fn output(r: &FabricReport, json: &Option<PathBuf>, md: &Option<PathBuf>) -> Result<(), Failure> {
    if json.as_ref().is_none_or(|j| j.as_os_str() != "-") {
        let mut out = std::io::stdout().lock();
        crate::plan_cmd::written(report::write_terminal(r, &mut out).and_then(|_| out.flush()), "stdout")?;
    }
    if let Some(p) = json {
        crate::plan_cmd::write_file(p, &|w| {
            serde_json::to_writer_pretty(&mut *w, r).map_err(std::io::Error::other).and_then(|_| writeln!(w))
        })?;
    }
    if let Some(p) = md {
        crate::plan_cmd::write_file(p, &|w| report::write_markdown(r, w))?;
    }
    Ok(())
}

fn fabric(c: &Common) -> Result<Box<dyn Fabric>, Failure> {
    Ok(match c.backend {
        Backend::Sim => Box::new(SimFabric::new(c.sim_gpus, &c.sim_link).map_err(fail)?),
        Backend::Cuda => Box::new(CudaFabric::open().map_err(fail)?),
    })
}

/// `fabric allreduce --slurm`: one rank per GPU across `nodes`, NCCL (or the sim) in an srun step.
fn slurm_allreduce(
    common: &Common,
    nodes: u32,
    gpus_per_node: u32,
    partition: Option<String>,
    sizes: &[u64],
    iters: u32,
    envs: &[Vec<servetune_fabric::EnvSetting>],
) -> Result<(), Failure> {
    if nodes == 0 || gpus_per_node == 0 {
        return Err(Failure::usage("--nodes and --gpus-per-node must be at least 1"));
    }
    if !common.gpus.is_empty() {
        return Err(Failure::usage("--gpus picks GPUs of one machine; with --slurm the ranks are --nodes x --gpus-per-node"));
    }
    let exe = std::env::current_exe().map_err(|e| Failure::runtime(format!("cannot find my own executable: {e}")))?;
    let dir = std::env::current_dir()
        .map_err(|e| Failure::runtime(format!("no current directory: {e}")))?
        .join(format!(".servetune-allreduce-slurm-{}", std::process::id()));
    let mut ar = servetune_fabric::slurm::SlurmAllReduce {
        nodes,
        gpus_per_node,
        partition: partition.clone(),
        worker_cmd: vec![exe.display().to_string(), "fabric".into(), "allreduce-worker".into()],
        sim_link: (common.backend == Backend::Sim).then(|| common.sim_link.clone()),
        dir: dir.clone(),
        request_gpus: common.backend == Backend::Cuda
            && servetune_fabric::slurm::SlurmAllReduce::partition_has_gpus(partition.as_deref()).map_err(fail)?,
    };
    crate::tell!("all-reduce over {nodes} node(s) x {gpus_per_node} rank(s) with srun ...");
    let ranks: Vec<usize> = (0..(nodes * gpus_per_node) as usize).collect();
    let runs = measure::allreduce(&mut ar, &ranks, sizes, iters, envs);
    let _ = std::fs::remove_dir_all(&dir);
    let name = ar.name();
    output(&report::allreduce_report(name, &runs.map_err(fail)?), &common.json, &common.markdown)
}

pub fn run(a: FabricArgs) -> Result<(), Failure> {
    match a.cmd {
        FabricCmd::P2p { common, iters, verify } => {
            // A repeated index would measure fewer pairs than were asked for.
            if let Some(twice) = common.gpus.iter().enumerate().find(|(i, g)| common.gpus[..*i].contains(g)).map(|(_, g)| *g) {
                return Err(Failure::usage(format!(
                    "--gpus: GPU {twice} is named twice; p2p measures every pair of the GPUs named, so name each GPU once"
                )));
            }
            let sz = size_range(&common.min_size, &common.max_size, 4, 256 << 20)?;
            let mut f = fabric(&common)?;
            let o = P2pOptions { gpus: common.gpus.clone(), sizes: sz, iters, verify };
            let r = measure::p2p(f.as_mut(), &o, &mut progress("p2p")).map_err(fail)?;
            output(&report::p2p_report(r), &common.json, &common.markdown)
        }
        FabricCmd::Allreduce { common, iters, env, slurm, nodes, gpus_per_node, partition } => {
            let sz = size_range(&common.min_size, &common.max_size, 8, 128 << 20)?;
            let mut envs = vec![Vec::new()];
            for e in &env {
                envs.push(vec![measure::parse_env(e).map_err(fail)?]);
            }
            if slurm {
                return slurm_allreduce(&common, nodes, gpus_per_node, partition, &sz, iters, &envs);
            }
            let (mut ar, n): (Box<dyn AllReduce>, usize) = match common.backend {
                Backend::Sim => {
                    (Box::new(SimAllReduce { fabric: SimFabric::new(common.sim_gpus, &common.sim_link).map_err(fail)? }), common.sim_gpus)
                }
                Backend::Cuda => {
                    let f = CudaFabric::open().map_err(fail)?;
                    let exe = std::env::current_exe().map_err(|e| Failure::runtime(format!("cannot find my own executable: {e}")))?;
                    let cmd = vec![exe.display().to_string(), "fabric".into(), "allreduce-worker".into()];
                    (Box::new(NcclAllReduce { worker_cmd: cmd }), f.devices().len())
                }
            };
            let ranks: Vec<usize> = if common.gpus.is_empty() { (0..n).collect() } else { common.gpus.clone() };
            if let Some(bad) = ranks.iter().find(|g| **g >= n) {
                return Err(Failure::usage(format!("--gpus {bad}: GPU {bad} does not exist; this machine has {n} GPU(s)")));
            }
            if let Some(twice) = ranks.iter().enumerate().find(|(i, g)| ranks[..*i].contains(g)).map(|(_, g)| *g) {
                return Err(Failure::usage(format!(
                    "--gpus: GPU {twice} is named twice; an all-reduce runs one rank per GPU, so name each GPU once"
                )));
            }
            let runs = measure::allreduce(ar.as_mut(), &ranks, &sz, iters, &envs).map_err(fail)?;
            output(&report::allreduce_report(ar.name(), &runs), &common.json, &common.markdown)
        }
        FabricCmd::Host { min_size, max_size, json, markdown } => {
            let sz = size_range(&min_size, &max_size, 64, 256 << 20)?;
            let pairs = servetune_fabric::host::measure(&sz, 1 << 30, &mut progress("host")).map_err(fail)?;
            let mut notes = Vec::new();
            let mut gpu = Vec::new();
            match CudaFabric::open() {
                Ok(mut f) => {
                    for d in 0..f.devices().len() {
                        gpu.push(report::GpuTransfers { gpu: d, bandwidth: f.host_transfers(d, 64 << 20).map_err(fail)? });
                    }
                }
                Err(e) => notes.push(format!("GPU transfers not measured: {e}")),
            }
            output(&report::host_report(pairs, gpu, notes), &json, &markdown)
        }
        FabricCmd::AllreduceWorker { rank, nranks, device, id, sizes, iters, slurm_rendezvous, sim_link } => {
            let out = match (&slurm_rendezvous, rank, nranks, device, id) {
                (Some(dir), ..) => servetune_fabric::slurm::worker(dir, &sizes, iters, sim_link.as_deref()),
                (None, Some(r), Some(n), Some(d), Some(id)) => servetune_fabric::nccl::worker(r, n, d, &id, &sizes, iters),
                _ => return Err(Failure::usage("allreduce-worker needs --rank, --nranks, --device and --id, or --slurm-rendezvous DIR")),
            }
            .map_err(fail)?;
            crate::say!("{}", serde_json::to_string(&out).unwrap_or_default());
            Ok(())
        }
    }
}
