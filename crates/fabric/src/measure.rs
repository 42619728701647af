//! Sweeps over a backend: every pair and size, both modes and directions; verification; the
//! all-reduce sweep with nccl-tests' algbw and busbw.

use serde::{Deserialize, Serialize};

use crate::fit::Sample;
use crate::{AllReduce, AllReduceRun, CopyMode, EnvSetting, Fabric, FabricError};

/// One pair, mode and direction, over every size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// Source GPU.
    pub src: usize,
    /// Destination GPU (equal to `src`: a copy within one GPU).
    pub dst: usize,
    /// Peer access enabled or host-staged.
    pub mode: CopyMode,
    /// Both directions at once.
    pub bidir: bool,
    /// Time per copy at each size.
    pub points: Vec<Sample>,
}

/// An ordered pair of GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuPair {
    /// Source GPU.
    pub src: usize,
    /// Destination GPU.
    pub dst: usize,
}

/// Whether P2P delivered a pattern intact (`--verify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verification {
    /// Source GPU.
    pub src: usize,
    /// Destination GPU.
    pub dst: usize,
    /// The pattern read back on `dst` equals what `src` wrote.
    pub delivered: bool,
}

/// Everything a P2P sweep measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct P2pResult {
    /// `cuda` or `sim`.
    pub backend: String,
    /// Every device the backend saw.
    pub devices: Vec<crate::Device>,
    /// The GPUs swept (indices into `devices`).
    pub gpus: Vec<usize>,
    /// The sizes swept, bytes.
    pub sizes: Vec<u64>,
    /// One series per pair, mode and direction.
    pub series: Vec<Series>,
    /// `--verify` results, one per pair that can enable peer access.
    pub verify: Vec<Verification>,
    /// Pairs that can enable peer access.
    pub peer_access: Vec<GpuPair>,
    /// What the reader should know (one GPU only, P2P that lost data).
    pub notes: Vec<String>,
}

/// Options of a P2P sweep.
#[derive(Debug, Clone)]
pub struct P2pOptions {
    /// GPU indices (empty: all).
    pub gpus: Vec<usize>,
    /// Copy sizes, bytes.
    pub sizes: Vec<u64>,
    /// Copies per measurement for the smallest sizes (fewer for large ones).
    pub iters: u32,
    /// Also check that P2P delivers data.
    pub verify: bool,
}

/// Copies per measurement: about 256 MiB moved, between 3 (or `max`, when it is below 3) and
/// `max` (`--iters`, at least 1: [`check_iters`]).
pub fn iters_for(bytes: u64, max: u32) -> u32 {
    ((256u64 << 20) / bytes.max(1)).clamp(u64::from(max.min(3)), u64::from(max)) as u32
}

/// Refuses `--iters 0`: a measurement of no copies has no time.
pub fn check_iters(iters: u32) -> Result<(), FabricError> {
    if iters == 0 {
        return Err(FabricError::Input("--iters 0: a measurement needs at least one copy; give --iters 1 or more".into()));
    }
    Ok(())
}

/// Checks GPU indices against the backend's devices.
pub fn check_gpus(f: &dyn Fabric, gpus: &[usize]) -> Result<Vec<usize>, FabricError> {
    let n = f.devices().len();
    if gpus.is_empty() {
        return Ok((0..n).collect());
    }
    for &g in gpus {
        if g >= n {
            return Err(FabricError::Input(format!(
                "--gpus {g}: GPU {g} does not exist; this machine has {n} GPU(s): 0..{}",
                n.saturating_sub(1)
            )));
        }
    }
    let mut v = gpus.to_vec();
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// One measurement series to take: a pair, a mode and a direction.
struct Planned {
    src: usize,
    dst: usize,
    mode: CopyMode,
    bidir: bool,
}

/// Every pair in both modes and directions, host-staged first (enabling peer access is sticky for
/// a context); a GPU with itself is measured once.
fn plan_series(gpus: &[usize]) -> Vec<Planned> {
    let mut plan = Vec::new();
    for mode in [CopyMode::HostStaged, CopyMode::P2p] {
        for &src in gpus {
            for &dst in gpus {
                for bidir in [false, true] {
                    if !(src == dst && (mode == CopyMode::P2p || bidir)) {
                        plan.push(Planned { src, dst, mode, bidir });
                    }
                }
            }
        }
    }
    plan
}

/// The P2P sweep. `progress(done, total)` after each measurement.
pub fn p2p(f: &mut dyn Fabric, o: &P2pOptions, progress: &mut dyn FnMut(usize, usize)) -> Result<P2pResult, FabricError> {
    check_iters(o.iters)?;
    let gpus = check_gpus(f, &o.gpus)?;
    let mut notes = Vec::new();
    if gpus.len() == 1 {
        notes.push(format!("one GPU: no peer to copy to; copies within GPU {} are measured", gpus[0]));
    }
    let peer_access: Vec<GpuPair> = gpus
        .iter()
        .flat_map(|&src| gpus.iter().map(move |&dst| GpuPair { src, dst }))
        .filter(|p| f.can_access_peer(p.src, p.dst))
        .collect();
    let plan = plan_series(&gpus);
    let total = plan.len() * o.sizes.len();
    let mut done = 0;
    let mut series = Vec::with_capacity(plan.len());
    for p in plan {
        let mut points = Vec::with_capacity(o.sizes.len());
        for &bytes in &o.sizes {
            let seconds = f.copy(p.src, p.dst, bytes, p.mode, p.bidir, iters_for(bytes, o.iters))?;
            points.push(Sample { bytes, seconds });
            done += 1;
            progress(done, total);
        }
        series.push(Series { src: p.src, dst: p.dst, mode: p.mode, bidir: p.bidir, points });
    }
    let verify = if o.verify { verify_pairs(f, &peer_access, &mut notes)? } else { Vec::new() };
    Ok(P2pResult {
        backend: f.name().into(),
        devices: f.devices().to_vec(),
        gpus,
        sizes: o.sizes.clone(),
        series,
        verify,
        peer_access,
        notes,
    })
}

/// `--verify`: a 4 MiB pattern over every pair that can enable peer access; notes what failed.
fn verify_pairs(f: &mut dyn Fabric, peers: &[GpuPair], notes: &mut Vec<String>) -> Result<Vec<Verification>, FabricError> {
    let mut verify = Vec::new();
    for p in peers.iter().filter(|p| p.src != p.dst) {
        verify.push(Verification { src: p.src, dst: p.dst, delivered: f.verify(p.src, p.dst, 4 << 20)? });
    }
    if verify.is_empty() {
        notes.push("--verify: no pair can enable peer access, so there is no P2P path to verify".into());
    }
    let bad: Vec<String> = verify.iter().filter(|v| !v.delivered).map(|v| format!("{}->{}", v.src, v.dst)).collect();
    if !bad.is_empty() {
        notes.push(format!(
            "P2P DID NOT DELIVER DATA on {} (reported OK, read back wrong): do not use P2P here; see servetune probe's IOMMU/ACS finding",
            bad.join(", ")
        ));
    }
    Ok(verify)
}

/// One all-reduce size with nccl-tests' definitions (out of place).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllReduceRow {
    /// Buffer size per rank, bytes.
    pub bytes: u64,
    /// Time of one all-reduce, microseconds.
    pub time_us: f64,
    /// bytes / time, GB/s.
    pub algbw_gbs: f64,
    /// algbw * 2(n-1)/n, GB/s.
    pub busbw_gbs: f64,
}

/// Rows from a run.
pub fn allreduce_rows(run: &AllReduceRun) -> Vec<AllReduceRow> {
    let n = run.ranks as f64;
    let factor = if n > 1.0 { 2.0 * (n - 1.0) / n } else { 1.0 };
    run.points
        .iter()
        .map(|p| {
            let algbw = if p.time_us > 0.0 { p.bytes as f64 / (p.time_us * 1e3) } else { 0.0 };
            AllReduceRow { bytes: p.bytes, time_us: p.time_us, algbw_gbs: algbw, busbw_gbs: algbw * factor }
        })
        .collect()
}

/// Runs the sweep once per environment setting (the baseline first).
pub fn allreduce(
    ar: &mut dyn AllReduce,
    ranks: &[usize],
    sizes: &[u64],
    iters: u32,
    envs: &[Vec<EnvSetting>],
) -> Result<Vec<AllReduceRun>, FabricError> {
    check_iters(iters)?;
    let mut out = Vec::new();
    for env in envs {
        out.push(ar.run(ranks, sizes, iters, env)?);
    }
    Ok(out)
}

/// Parses `KEY=VALUE`.
pub fn parse_env(s: &str) -> Result<EnvSetting, FabricError> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok(EnvSetting { name: k.trim().to_string(), value: v.to_string() }),
        _ => Err(FabricError::Input(format!("--env {s:?} has no '=': write KEY=VALUE, e.g. --env NCCL_P2P_DISABLE=1"))),
    }
}
