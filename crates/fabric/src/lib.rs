//! servetune's interconnect measurements, the way serving engines use the fabric.
//!
//! - [`Fabric`]: GPU copies (P2P enabled or host-staged), with [`cuda::CudaFabric`] (the CUDA driver,
//!   loaded at run time) and [`sim::SimFabric`] (devices with configured alpha/beta) behind it;
//! - [`AllReduce`]: NCCL all-reduce with one process per GPU ([`nccl`]), or simulated;
//! - [`host`]: host memory copies per NUMA-node pair (runs anywhere);
//! - [`measure`]: sweeps, matrices and verification over a backend; [`fit`]: alpha-beta fits;
//! - [`report`]: the `servetune.fabric/1.1` document (a [`Link`] that `servetune plan --fabric` takes).

#![warn(missing_docs)]

pub mod cuda;
pub mod fit;
pub mod host;
pub mod measure;
pub mod nccl;
pub mod report;
pub mod sim;
pub mod slurm;

use serde::{Deserialize, Serialize};

/// Errors; the CLI maps `Input` to exit 2 and the rest to exit 1.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// libcuda could not be loaded.
    #[error("no NVIDIA driver found: libcuda could not be loaded (searched {searched})")]
    NoDriver {
        /// The library names tried, comma-separated.
        searched: String,
    },
    /// NCCL could not be loaded; the message names the packages that provide it.
    #[error("{0}")]
    NoNccl(String),
    /// A value the user gave is unusable; the message names it and the fix.
    #[error("{0}")]
    Input(String),
    /// The measurement failed at run time.
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
    /// p2pBandwidthLatencyTest's label: `P2P=Enabled` or `P2P=Disabled`.
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
    /// The backend's device ordinal (CUDA's device index).
    pub index: usize,
    /// The product name, as the driver reports it.
    pub name: String,
}

/// One link between two GPUs (or through host memory): time of a copy = alpha + bytes / beta.
///
/// The simulated fabric is built from these, and a P2P sweep's report carries the measured one
/// that `servetune plan --fabric` uses in place of the catalog's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// A name for it: a catalog name (`pcie5-p2p`) or `measured-p2p` / `measured-host-staged`.
    pub name: String,
    /// Latency of one copy, microseconds.
    pub alpha_us: f64,
    /// Bandwidth, GB/s (10^9 bytes per second).
    pub beta_gbs: f64,
    /// Whether copies over it are direct or staged through host memory.
    pub mode: CopyMode,
    /// Where the numbers come from.
    pub source: String,
}

impl Link {
    /// Seconds one copy of `bytes` takes over this link.
    pub fn secs(&self, bytes: u64) -> f64 {
        self.alpha_us * 1e-6 + bytes as f64 / (self.beta_gbs * 1e9)
    }
}

/// Host-to-device and device-to-host bandwidth of one GPU, GB/s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HostTransfers {
    /// Host to device from pinned (page-locked) memory.
    pub pinned_h2d_gbs: f64,
    /// Device to host into pinned memory.
    pub pinned_d2h_gbs: f64,
    /// Host to device from ordinary (pageable) memory.
    pub pageable_h2d_gbs: f64,
    /// Device to host into pageable memory.
    pub pageable_d2h_gbs: f64,
}

/// One environment variable given to every NCCL rank (`--env KEY=VALUE`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvSetting {
    /// The variable, e.g. `NCCL_P2P_DISABLE`.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// How many NCCL channels used one transport.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransportCount {
    /// As NCCL_DEBUG=INFO prints it: `via P2P/IPC`, `via SHM/direct/direct`, `via NET/Socket/0`.
    pub transport: String,
    /// Lines of the log that named it.
    pub count: usize,
}

/// GPU copies, timed on the device.
pub trait Fabric {
    /// The backend's name in reports: `cuda` or `sim`.
    fn name(&self) -> &'static str;
    /// The GPUs it can copy between.
    fn devices(&self) -> &[Device];
    /// Whether `src` can enable peer access to `dst` (cuDeviceCanAccessPeer).
    fn can_access_peer(&self, src: usize, dst: usize) -> bool;
    /// Seconds per copy of `bytes` from `src` to `dst` (both directions at once when `bidir`),
    /// averaged over `iters` copies timed as one batch with events on a held stream.
    fn copy(&mut self, src: usize, dst: usize, bytes: u64, mode: CopyMode, bidir: bool, iters: u32) -> Result<f64, FabricError>;
    /// Writes a pattern on `src`, copies it with P2P to `dst`, reads it back: does P2P deliver?
    fn verify(&mut self, src: usize, dst: usize, bytes: u64) -> Result<bool, FabricError>;
    /// Host-to-device and device-to-host bandwidth of `dev` with copies of `bytes`.
    fn host_transfers(&mut self, dev: usize, bytes: u64) -> Result<HostTransfers, FabricError>;
}

/// One all-reduce measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllReducePoint {
    /// Buffer size per rank, bytes.
    pub bytes: u64,
    /// Mean time of one out-of-place all-reduce, microseconds.
    pub time_us: f64,
}

/// What an all-reduce sweep returns: points and the transports NCCL reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct AllReduceRun {
    /// Number of ranks (one per GPU).
    pub ranks: usize,
    /// One point per size.
    pub points: Vec<AllReducePoint>,
    /// The transports NCCL reported, with counts.
    pub transports: Vec<TransportCount>,
    /// The settings this run was given (empty: NCCL's defaults).
    pub env: Vec<EnvSetting>,
}

/// NCCL all-reduce over `ranks` GPUs.
pub trait AllReduce {
    /// The backend's name in reports: `nccl` or `sim`.
    fn name(&self) -> &'static str;
    /// All-reduces of each of `sizes` bytes over the GPUs `ranks`, `iters` times each, with `env` set.
    fn run(&mut self, ranks: &[usize], sizes: &[u64], iters: u32, env: &[EnvSetting]) -> Result<AllReduceRun, FabricError>;
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
