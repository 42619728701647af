//! servetune's interconnect measurements, the way serving engines use the fabric.
//!
//! - [`Fabric`]: GPU copies (P2P enabled or host-staged), with [`cuda::CudaFabric`] (the CUDA driver,
//!   loaded at run time) and [`sim::SimFabric`] (devices with configured alpha/beta) behind it;
//! - [`AllReduce`]: NCCL all-reduce with one process per GPU ([`nccl`]), or simulated;
//! - [`host`]: host memory copies per NUMA-node pair (runs anywhere);
//! - [`measure`]: sweeps, matrices and verification over a backend; [`fit`]: alpha-beta fits;
//! - [`report`]: the `servetune.fabric/1` document (a LinkProfile `servetune plan --fabric` takes).

pub mod cuda;
pub mod fit;
pub mod host;
pub mod measure;
pub mod nccl;
pub mod report;
pub mod sim;

use serde::{Deserialize, Serialize};

/// Errors; the CLI maps `Input` to exit 2 and the rest to exit 1.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    #[error("no NVIDIA driver found: libcuda could not be loaded (searched {searched})")]
    NoDriver { searched: String },
    #[error("{0}")]
    NoNccl(String),
    #[error("{0}")]
    Input(String),
    #[error("{0}")]
    Runtime(String),
}

/// Whether a copy goes GPU to GPU directly or through host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "snake_case")]
pub enum CopyMode {
    /// Peer access enabled (cuCtxEnablePeerAccess): DMA between the GPUs when the platform allows.
    P2p,
    /// Peer access not enabled: the driver stages the copy through host memory.
    HostStaged,
}

impl CopyMode {
    pub fn name(self) -> &'static str {
        match self {
            CopyMode::P2p => "P2P=Enabled",
            CopyMode::HostStaged => "P2P=Disabled",
        }
    }
}

/// One device as a backend sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Device {
    pub index: usize,
    pub name: String,
}

/// GPU copies, timed on the device.
pub trait Fabric {
    fn name(&self) -> &'static str;
    fn devices(&self) -> &[Device];
    /// Whether `src` can enable peer access to `dst` (cuDeviceCanAccessPeer).
    fn can_access_peer(&self, src: usize, dst: usize) -> bool;
    /// Seconds per copy of `bytes` from `src` to `dst` (both directions at once when `bidir`),
    /// averaged over `iters` copies timed as one batch with events on a held stream.
    fn copy(&mut self, src: usize, dst: usize, bytes: u64, mode: CopyMode, bidir: bool, iters: u32) -> Result<f64, FabricError>;
    /// Writes a pattern on `src`, copies it with P2P to `dst`, reads it back: does P2P deliver?
    fn verify(&mut self, src: usize, dst: usize, bytes: u64) -> Result<bool, FabricError>;
    /// Host-to-device and device-to-host bandwidth, GB/s: (pinned h2d, pinned d2h, pageable h2d, pageable d2h).
    fn host_transfers(&mut self, dev: usize, bytes: u64) -> Result<(f64, f64, f64, f64), FabricError>;
}

/// One all-reduce measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllReducePoint {
    pub bytes: u64,
    /// Mean time of one out-of-place all-reduce, microseconds.
    pub time_us: f64,
}

/// What an all-reduce sweep returns: points and the transports NCCL reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct AllReduceRun {
    pub ranks: usize,
    pub points: Vec<AllReducePoint>,
    /// "via P2P/IPC", "via SHM/direct/direct", "via NET/Socket/0", ... with counts.
    pub transports: Vec<(String, usize)>,
    pub env: Vec<(String, String)>,
}

/// NCCL all-reduce over `ranks` GPUs.
pub trait AllReduce {
    fn name(&self) -> &'static str;
    fn run(&mut self, ranks: &[usize], sizes: &[u64], iters: u32, env: &[(String, String)]) -> Result<AllReduceRun, FabricError>;
}

/// Sizes from `min` to `max` by factor 4 (p2pBandwidthLatencyTest-style sweep: 4 B .. 256 MB).
pub fn sizes(min: u64, max: u64) -> Result<Vec<u64>, FabricError> {
    const LIMIT: u64 = 1 << 30;
    if min == 0 || max == 0 || min > max || max > LIMIT {
        return Err(FabricError::Input(format!("sizes {min}..{max} bytes are out of range: give 1 <= --min-size <= --max-size <= 1G")));
    }
    let mut v = Vec::new();
    let mut s = min;
    while s <= max {
        v.push(s);
        s = s.saturating_mul(4);
    }
    Ok(v)
}

/// Parses `4`, `4K`, `256M`, `1G` (powers of 1024).
pub fn parse_size(flag: &str, s: &str) -> Result<u64, FabricError> {
    let t = s.trim();
    let (num, mul) = match t.chars().last() {
        Some('K') | Some('k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') | Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('G') | Some('g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| FabricError::Input(format!("{flag} {s:?} is not a size: write it like 4, 64K, 256M or 1G")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_sweep_by_factor_four() {
        let s = sizes(4, 256 << 20).expect("sizes");
        assert_eq!(s.first(), Some(&4));
        assert_eq!(s.last(), Some(&(256 << 20)));
        assert_eq!(s.len(), 14); // 4^1 .. 4^14
        assert!(sizes(0, 4).is_err() && sizes(8, 4).is_err() && sizes(4, 2 << 30).is_err());
    }

    #[test]
    fn size_suffixes_parse() {
        assert_eq!(parse_size("--max-size", "256M").expect("size"), 256 << 20);
        assert_eq!(parse_size("--min-size", "4").expect("size"), 4);
        assert!(parse_size("--max-size", "lots").is_err());
    }
}
