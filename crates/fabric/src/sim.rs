//! A simulated fabric: devices joined by configured alpha-beta links, with P2P allowed or not per
//! pair and, to test verification, P2P that silently drops data; its NCCL all-reduce is the plan's
//! model of NCCL on the same catalog link (`servetune_model::comm::nccl`). A first-class backend
//! (`servetune fabric --backend sim`), used by the tests of the timing, fitting and output logic.

use servetune_model::hw::LinkKind;

use crate::{
    AllReduce, AllReducePoint, AllReduceRun, CopyMode, Device, EnvSetting, Fabric, FabricError, HostTransfers, Link, TransportCount,
};

/// A copy within one GPU's memory: launch latency, microseconds.
const LOCAL_ALPHA_US: f64 = 2.0;
/// A copy within one GPU's memory: bandwidth, GB/s (about half of a current GPU's HBM bandwidth,
/// since a copy reads and writes).
const LOCAL_BETA_GBS: f64 = 1500.0;
/// Host-to-device and device-to-host bandwidth the simulated GPUs report (a PCIe Gen4 x16 slot).
const SIM_HOST_TRANSFERS: HostTransfers =
    HostTransfers { pinned_h2d_gbs: 25.0, pinned_d2h_gbs: 26.0, pageable_h2d_gbs: 12.0, pageable_d2h_gbs: 10.0 };

/// The link names `--sim-link` accepts: the catalog links within a node
/// (`crates/model/data/links.json`) that a PCIe or NVLink box has.
pub const SIM_LINKS: &[&str] = &["pcie-host-staged", "pcie5-p2p", "pcie4-p2p", "nvlink"];

/// The catalog link `name` (one of [`SIM_LINKS`]) with the model's alpha and beta: the simulator
/// and `servetune plan` read the same catalog, so a simulated sweep fits the link the plan assumes.
fn catalog_link(name: &str) -> Result<Link, FabricError> {
    if !SIM_LINKS.contains(&name) {
        return Err(FabricError::Input(format!("--sim-link {name:?} is unknown; known: {}", SIM_LINKS.join(", "))));
    }
    let l = servetune_model::hw::link(name).map_err(|e| FabricError::Input(format!("--sim-link {name:?}: {e}")))?;
    let mode = if l.kind == LinkKind::HostStaged { CopyMode::HostStaged } else { CopyMode::P2p };
    let source = format!("crates/model/data/links.json ({})", l.source);
    Ok(Link { name: l.name, alpha_us: l.alpha_us, beta_gbs: l.beta_gbs, mode, source })
}

/// A simulated machine.
#[derive(Debug, Clone)]
pub struct SimFabric {
    /// Its GPUs.
    pub devices: Vec<Device>,
    /// Direct GPU-to-GPU (used when peer access is enabled and allowed).
    pub p2p: Link,
    /// Through host memory.
    pub staged: Link,
    /// Whether each pair may enable peer access.
    pub p2p_allowed: bool,
    /// P2P reports success but loses data (IOMMU/ACS trouble).
    pub p2p_drops_data: bool,
    /// Relative timing noise amplitude (deterministic by size and pair); 0.02 is ±2%.
    pub noise: f64,
}

impl SimFabric {
    /// `n` GPUs joined by the catalog link `link` (one of [`SIM_LINKS`]), with copies that cannot go
    /// peer to peer staged over the catalog's `pcie-host-staged`; the numbers are the model's
    /// catalog values (`crates/model/data/links.json`).
    pub fn new(n: usize, link: &str) -> Result<Self, FabricError> {
        let p2p = catalog_link(link)?;
        if n == 0 || n > 64 {
            return Err(FabricError::Input(format!("--sim-gpus {n}: give 1 to 64")));
        }
        Ok(Self {
            devices: (0..n).map(|i| Device { index: i, name: format!("simulated GPU ({link})") }).collect(),
            p2p_allowed: p2p.mode == CopyMode::P2p,
            p2p,
            staged: catalog_link("pcie-host-staged")?,
            p2p_drops_data: false,
            noise: 0.0,
        })
    }

    fn jitter(&self, a: usize, b: usize, bytes: u64) -> f64 {
        let mut x = (a as u64).wrapping_mul(0x9e37_79b9) ^ (b as u64).wrapping_mul(0x85eb_ca6b) ^ bytes.wrapping_mul(0xc2b2_ae35);
        x ^= x >> 15;
        x = x.wrapping_mul(0x2c1b_3c6d);
        x ^= x >> 12;
        1.0 + self.noise * (((x % 2001) as f64 / 1000.0) - 1.0)
    }

    fn check(&self, d: usize) -> Result<(), FabricError> {
        if d >= self.devices.len() {
            return Err(FabricError::Input(format!("GPU {d} does not exist: this fabric has GPUs 0..{}", self.devices.len() - 1)));
        }
        Ok(())
    }
}

impl Fabric for SimFabric {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn devices(&self) -> &[Device] {
        &self.devices
    }

    fn can_access_peer(&self, src: usize, dst: usize) -> bool {
        src != dst && self.p2p_allowed
    }

    fn copy(&mut self, src: usize, dst: usize, bytes: u64, mode: CopyMode, bidir: bool, _iters: u32) -> Result<f64, FabricError> {
        self.check(src)?;
        self.check(dst)?;
        let t = if src == dst {
            LOCAL_ALPHA_US * 1e-6 + bytes as f64 / (LOCAL_BETA_GBS * 1e9)
        } else if mode == CopyMode::P2p && self.can_access_peer(src, dst) {
            // Full duplex: both directions at once take as long as one.
            self.p2p.secs(bytes)
        } else if bidir {
            // Both directions share host memory bandwidth.
            self.staged.alpha_us * 1e-6 + 2.0 * bytes as f64 / (self.staged.beta_gbs * 1e9)
        } else {
            self.staged.secs(bytes)
        };
        Ok(t * self.jitter(src, dst, bytes))
    }

    fn verify(&mut self, src: usize, dst: usize, _bytes: u64) -> Result<bool, FabricError> {
        self.check(src)?;
        self.check(dst)?;
        Ok(!(self.p2p_drops_data && self.can_access_peer(src, dst)))
    }

    fn host_transfers(&mut self, dev: usize, _bytes: u64) -> Result<HostTransfers, FabricError> {
        self.check(dev)?;
        Ok(SIM_HOST_TRANSFERS)
    }
}

/// A simulated NCCL: the plan's model of NCCL (`servetune_model::comm::nccl`: NCCL's tuning model,
/// docs/reference.md) over the fabric's catalog link, plus the per-kernel floor a measurement holds.
#[derive(Debug, Clone)]
pub struct SimAllReduce {
    /// The machine it runs on.
    pub fabric: SimFabric,
}

impl AllReduce for SimAllReduce {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn run(&mut self, ranks: &[usize], sizes: &[u64], _iters: u32, env: &[EnvSetting]) -> Result<AllReduceRun, FabricError> {
        for &r in ranks {
            self.fabric.check(r)?;
        }
        let n = ranks.len() as f64;
        let p2p_off = env.iter().any(|e| e.name == "NCCL_P2P_DISABLE" && e.value == "1");
        let use_p2p = self.fabric.p2p_allowed && !p2p_off;
        let link = if use_p2p { &self.fabric.p2p } else { &self.fabric.staged };
        // The plan's own model of NCCL on the catalog link (one model of NCCL, the plan's), plus
        // the per-kernel floor a measurement holds and the plan counts apart, so a simulated
        // measurement given back to `plan --allreduce` prices what the plan does.
        let floor = servetune_model::predict::Engine::default().gemm_floor_us;
        let profile = servetune_model::hw::link(&link.name).map_err(|e| FabricError::Input(format!("--sim-link {:?}: {e}", link.name)))?;
        let points = sizes
            .iter()
            .map(|&b| {
                let t = if n <= 1.0 {
                    (LOCAL_ALPHA_US * 1e-6 + b as f64 / (LOCAL_BETA_GBS * 1e9)) * 1e6
                } else {
                    servetune_model::comm::nccl(&profile, ranks.len() as u32, b as f64).us + floor
                };
                AllReducePoint { bytes: b, time_us: t }
            })
            .collect();
        let transport = if ranks.len() <= 1 {
            "none (one rank)"
        } else if use_p2p {
            "via P2P/IPC"
        } else {
            "via SHM/direct/direct"
        };
        Ok(AllReduceRun {
            ranks: ranks.len(),
            points,
            transports: vec![TransportCount { transport: transport.to_string(), count: ranks.len().saturating_sub(1) * 2 }],
            env: env.to_vec(),
        })
    }
}
