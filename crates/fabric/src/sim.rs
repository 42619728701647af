//! A simulated fabric: devices joined by configured alpha-beta links, with P2P allowed or not per
//! pair and, to test verification, P2P that silently drops data. A first-class backend
//! (`servetune fabric --backend sim`), used by the tests of the timing, fitting and output logic.

use crate::{AllReduce, AllReducePoint, AllReduceRun, CopyMode, Device, Fabric, FabricError};

/// One link class: time = alpha + bytes / beta.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    pub alpha_us: f64,
    pub beta_gbs: f64,
}

impl Link {
    fn secs(&self, bytes: u64) -> f64 {
        self.alpha_us * 1e-6 + bytes as f64 / (self.beta_gbs * 1e9)
    }
}

#[derive(Debug, Clone)]
pub struct SimFabric {
    pub devices: Vec<Device>,
    /// Direct GPU-to-GPU (used when peer access is enabled and allowed).
    pub p2p: Link,
    /// Through host memory.
    pub staged: Link,
    /// Within one GPU.
    pub local: Link,
    /// Whether each pair may enable peer access.
    pub p2p_allowed: bool,
    /// P2P reports success but loses data (IOMMU/ACS trouble).
    pub p2p_drops_data: bool,
    /// Relative timing noise amplitude (deterministic by size and pair).
    pub noise: f64,
}

impl SimFabric {
    /// `n` GPUs of a named kind; links from the same facts as the plan's catalog
    /// (shared/reference/hardware.md).
    pub fn new(n: usize, link: &str) -> Result<Self, FabricError> {
        let (p2p, p2p_allowed) = match link {
            "pcie-host-staged" => (Link { alpha_us: 13.3, beta_gbs: 29.4 }, false),
            "pcie5-p2p" => (Link { alpha_us: 0.5, beta_gbs: 53.8 }, true),
            "pcie4-p2p" => (Link { alpha_us: 0.8, beta_gbs: 24.0 }, true),
            "nvlink" => (Link { alpha_us: 0.6, beta_gbs: 450.0 }, true),
            other => {
                return Err(FabricError::Input(format!(
                    "--sim-link {other:?} is unknown; known: pcie-host-staged, pcie5-p2p, pcie4-p2p, nvlink"
                )))
            }
        };
        if n == 0 || n > 64 {
            return Err(FabricError::Input(format!("--sim-gpus {n}: give 1 to 64")));
        }
        Ok(Self {
            devices: (0..n).map(|i| Device { index: i, name: format!("simulated GPU ({link})") }).collect(),
            p2p,
            staged: Link { alpha_us: 13.3, beta_gbs: 29.4 },
            local: Link { alpha_us: 2.0, beta_gbs: 1500.0 },
            p2p_allowed,
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
            self.local.secs(bytes)
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

    fn host_transfers(&mut self, dev: usize, _bytes: u64) -> Result<(f64, f64, f64, f64), FabricError> {
        self.check(dev)?;
        Ok((25.0, 26.0, 12.0, 10.0))
    }
}

/// A simulated NCCL: NCCL's ring cost model (tuning.cc; hardware.md) over the fabric's links.
#[derive(Debug, Clone)]
pub struct SimAllReduce {
    pub fabric: SimFabric,
}

impl AllReduce for SimAllReduce {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn run(&mut self, ranks: &[usize], sizes: &[u64], _iters: u32, env: &[(String, String)]) -> Result<AllReduceRun, FabricError> {
        for &r in ranks {
            self.fabric.check(r)?;
        }
        let n = ranks.len() as f64;
        let p2p_off = env.iter().any(|(k, v)| k == "NCCL_P2P_DISABLE" && v == "1");
        let use_p2p = self.fabric.p2p_allowed && !p2p_off;
        let link = if use_p2p { self.fabric.p2p } else { self.fabric.staged };
        let points = sizes
            .iter()
            .map(|&b| {
                let t = if n <= 1.0 {
                    self.fabric.local.secs(b) * 1e6
                } else {
                    6.6 + 2.0 * (n - 1.0) * link.alpha_us + b as f64 * 2.0 * (n - 1.0) / n / (link.beta_gbs * 1e3)
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
            transports: vec![(transport.to_string(), ranks.len().saturating_sub(1) * 2)],
            env: env.to_vec(),
        })
    }
}
