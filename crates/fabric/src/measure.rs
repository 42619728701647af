//! Sweeps over a backend: every pair and size, both modes and directions; verification; the
//! all-reduce sweep with nccl-tests' algbw and busbw.

use serde::{Deserialize, Serialize};

use crate::{AllReduce, AllReduceRun, CopyMode, Fabric, FabricError};

/// One pair, mode and direction: (bytes, seconds per copy).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub src: usize,
    pub dst: usize,
    pub mode: CopyMode,
    pub bidir: bool,
    pub points: Vec<(u64, f64)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct P2pResult {
    pub backend: String,
    pub devices: Vec<crate::Device>,
    pub gpus: Vec<usize>,
    pub sizes: Vec<u64>,
    pub series: Vec<Series>,
    /// (src, dst, delivered) for `--verify`.
    pub verify: Vec<(usize, usize, bool)>,
    /// (src, dst) pairs that can enable peer access.
    pub peer_access: Vec<(usize, usize)>,
    pub notes: Vec<String>,
}

/// Options of a P2P sweep.
#[derive(Debug, Clone)]
pub struct P2pOptions {
    /// GPU indices (empty: all).
    pub gpus: Vec<usize>,
    pub sizes: Vec<u64>,
    /// Copies per measurement for the smallest sizes (fewer for large ones).
    pub iters: u32,
    pub verify: bool,
}

/// Copies per measurement: about 256 MiB moved, between 3 and `max`.
pub fn iters_for(bytes: u64, max: u32) -> u32 {
    ((256u64 << 20) / bytes.max(1)).clamp(3, max.max(3) as u64) as u32
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

/// The P2P sweep. `progress(done, total)` after each measurement.
pub fn p2p(f: &mut dyn Fabric, o: &P2pOptions, progress: &mut dyn FnMut(usize, usize)) -> Result<P2pResult, FabricError> {
    let gpus = check_gpus(f, &o.gpus)?;
    let mut notes = Vec::new();
    if gpus.len() == 1 {
        notes.push(format!("one GPU: no peer to copy to; copies within GPU {} are measured", gpus[0]));
    }
    let peer_access: Vec<(usize, usize)> =
        gpus.iter().flat_map(|&a| gpus.iter().map(move |&b| (a, b))).filter(|&(a, b)| f.can_access_peer(a, b)).collect();
    let pairs: Vec<(usize, usize)> = gpus.iter().flat_map(|&a| gpus.iter().map(move |&b| (a, b))).collect();
    // Host-staged first: enabling peer access is sticky for a context.
    let plan: Vec<(usize, usize, CopyMode, bool)> = [CopyMode::HostStaged, CopyMode::P2p]
        .iter()
        .flat_map(|&m| pairs.iter().flat_map(move |&(a, b)| [false, true].into_iter().map(move |bi| (a, b, m, bi))))
        .filter(|&(a, b, m, bi)| !(a == b && (m == CopyMode::P2p || bi)))
        .collect();
    let total = plan.len() * o.sizes.len();
    let mut done = 0;
    let mut series = Vec::with_capacity(plan.len());
    for (a, b, m, bi) in plan {
        let mut points = Vec::with_capacity(o.sizes.len());
        for &s in &o.sizes {
            let t = f.copy(a, b, s, m, bi, iters_for(s, o.iters))?;
            points.push((s, t));
            done += 1;
            progress(done, total);
        }
        series.push(Series { src: a, dst: b, mode: m, bidir: bi, points });
    }
    let mut verify = Vec::new();
    if o.verify {
        for &(a, b) in &pairs {
            if a != b && f.can_access_peer(a, b) {
                verify.push((a, b, f.verify(a, b, 4 << 20)?));
            }
        }
        if verify.is_empty() {
            notes.push("--verify: no pair can enable peer access, so there is no P2P path to verify".into());
        }
        let bad: Vec<String> = verify.iter().filter(|v| !v.2).map(|(a, b, _)| format!("{a}->{b}")).collect();
        if !bad.is_empty() {
            notes.push(format!("P2P DID NOT DELIVER DATA on {} (reported OK, read back wrong): do not use P2P here; see servetune probe's IOMMU/ACS finding", bad.join(", ")));
        }
    }
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

/// One all-reduce size with nccl-tests' definitions (out of place).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllReduceRow {
    pub bytes: u64,
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
    envs: &[Vec<(String, String)>],
) -> Result<Vec<AllReduceRun>, FabricError> {
    let mut out = Vec::new();
    for env in envs {
        out.push(ar.run(ranks, sizes, iters, env)?);
    }
    Ok(out)
}

/// Parses `KEY=VALUE`.
pub fn parse_env(s: &str) -> Result<(String, String), FabricError> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(FabricError::Input(format!("--env {s:?} has no '=': write KEY=VALUE, e.g. --env NCCL_P2P_DISABLE=1"))),
    }
}
