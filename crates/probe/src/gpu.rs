//! GPUs through NVML, loaded at run time (nvml-wrapper dlopens libnvidia-ml), or from a recorded
//! `nvml.json`. No driver is a normal outcome: the snapshot says so and everything else goes on.

use serde::{Deserialize, Serialize};

/// One GPU as NVML describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    /// NVML's device index.
    pub index: u32,
    /// Product name.
    pub name: String,
    /// GPU UUID.
    pub uuid: String,
    /// PCI bus id, lower-case and domain-qualified like sysfs (0000:01:00.0).
    pub bus_id: String,
    /// CUDA compute capability, `major.minor` (12.0).
    pub compute_capability: Option<String>,
    /// NVML's architecture name (Blackwell).
    pub architecture: Option<String>,
    /// Total memory, MiB.
    pub memory_total_mib: Option<u64>,
    /// Persistence mode on.
    pub persistence_mode: Option<bool>,
    /// Maximum graphics clock, MHz.
    pub max_graphics_clock_mhz: Option<u32>,
    /// Maximum memory clock, MHz.
    pub max_memory_clock_mhz: Option<u32>,
    /// Enforced power limit, watts.
    pub power_limit_w: Option<f64>,
    /// ECC currently enabled.
    pub ecc_enabled: Option<bool>,
    /// MIG mode currently enabled.
    pub mig_enabled: Option<bool>,
    /// Active NVLink links.
    pub nvlinks_active: u32,
}

/// What NVML said, or why it could not be asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct NvmlSnapshot {
    /// Set when NVML could not be loaded or initialised.
    pub error: Option<String>,
    /// Driver version (580.82.07).
    pub driver_version: Option<String>,
    /// Highest CUDA version the driver supports (13.0).
    pub cuda_version: Option<String>,
    /// Every GPU NVML lists.
    pub gpus: Vec<Gpu>,
    /// topology[i][j]: X, NV#, PIX, PXB, PHB, NODE, SYS (as `nvidia-smi topo -m`).
    pub topology: Vec<Vec<String>>,
    /// P2P status matrices by capability: read, write, nvlink, atomics. Entries: X, OK, CNS, GNS,
    /// TNS, DIS, NS, U (as `nvidia-smi topo -p2p`).
    pub p2p: std::collections::BTreeMap<String, Vec<Vec<String>>>,
}

/// The most a recorded GPU figure can be and still be something NVML reported. Power: no board
/// draws 5 kW (0 is an unreported limit); memory: 16 TiB; graphics clock: 10 GHz;
/// NVLink: NVML_NVLINK_MAX_LINKS.
const MAX_POWER_W: f64 = 5000.0;
const MAX_MEMORY_MIB: u64 = 16 * 1024 * 1024;
const MAX_GRAPHICS_CLOCK_MHZ: u32 = 10_000;
const MAX_NVLINKS: u32 = 18;

impl NvmlSnapshot {
    /// Why this snapshot is not one NVML could have given, naming the GPU and field: a figure out
    /// of NVML's range.
    pub fn check(&self) -> Result<(), String> {
        for g in &self.gpus {
            let bad =
                |field: &str, v: String, range: &str| Err(format!("GPU{} {field} is {v}, which NVML does not report ({range})", g.index));
            // 0 is taken: an older capture stored a limit NVML did not report as 0.
            if let Some(w) = g.power_limit_w.filter(|w| !(0.0..=MAX_POWER_W).contains(w)) {
                return bad("power_limit_w", w.to_string(), "0 to 5000 W");
            }
            if let Some(m) = g.memory_total_mib.filter(|m| *m > MAX_MEMORY_MIB) {
                return bad("memory_total_mib", m.to_string(), "at most 16 TiB, 16777216 MiB");
            }
            if let Some(c) = g.max_graphics_clock_mhz.filter(|c| *c > MAX_GRAPHICS_CLOCK_MHZ) {
                return bad("max_graphics_clock_mhz", c.to_string(), "at most 10000 MHz");
            }
            if g.nvlinks_active > MAX_NVLINKS {
                return bad("nvlinks_active", g.nvlinks_active.to_string(), "at most 18 links");
            }
        }
        Ok(())
    }

    /// Empties each topology or P2P matrix that is not N x N for the snapshot's N GPUs (its
    /// pairs would be counted against the wrong GPUs), saying which, one sentence each.
    pub fn drop_misshapen_matrices(&mut self) -> Vec<String> {
        let n = self.gpus.len();
        let misshapen = |m: &Vec<Vec<String>>| !m.is_empty() && (m.len() != n || m.iter().any(|r| r.len() != n));
        let say = |name: &str, m: &Vec<Vec<String>>| {
            format!(
                "{name} is {}x{} but it lists {n} GPU(s), so that matrix is left out and no finding is drawn from it",
                m.len(),
                m.iter().map(Vec::len).max().unwrap_or(0)
            )
        };
        let mut notes = Vec::new();
        if misshapen(&self.topology) {
            notes.push(say("topology", &self.topology));
            self.topology.clear();
        }
        for (k, m) in &mut self.p2p {
            if misshapen(m) {
                notes.push(say(&format!("p2p.{k}"), m));
                m.clear();
            }
        }
        notes
    }
}

/// The NVML side of a probe: live or recorded.
pub trait GpuSource {
    /// Everything NVML says, or why it could not be asked.
    fn snapshot(&self) -> NvmlSnapshot;
}

/// A recorded `nvml.json` (`--root`); a missing file means the capture had no driver either.
#[derive(Debug)]
pub struct Recorded(pub Option<NvmlSnapshot>);

impl GpuSource for Recorded {
    fn snapshot(&self) -> NvmlSnapshot {
        self.0.clone().unwrap_or_else(|| NvmlSnapshot { error: Some("no nvml.json in the snapshot".into()), ..Default::default() })
    }
}

/// The live driver.
#[derive(Debug, Default)]
pub struct Live;

fn p2p_short(s: &nvml_wrapper::enum_wrappers::device::P2pStatus) -> &'static str {
    use nvml_wrapper::enum_wrappers::device::P2pStatus::*;
    match s {
        Ok => "OK",
        ChipsetNotSupported => "CNS",
        GpuNotSupported => "GNS",
        IohTopologyNotSupported => "TNS",
        DisabledByRegkey => "DIS",
        NotSupported => "NS",
        Unknown => "U",
    }
}

fn topo_short(t: &nvml_wrapper::enum_wrappers::device::TopologyLevel) -> &'static str {
    use nvml_wrapper::enum_wrappers::device::TopologyLevel::*;
    match t {
        Internal => "X",
        Single => "PIX",
        Multiple => "PXB",
        HostBridge => "PHB",
        Node => "NODE",
        System => "SYS",
    }
}

/// sysfs spelling of an NVML bus id ("00000000:01:00.0" -> "0000:01:00.0").
pub fn sysfs_bus_id(nvml: &str) -> String {
    let s = nvml.to_ascii_lowercase();
    match s.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 => format!("{}:{rest}", &dom[dom.len() - 4..]),
        _ => s,
    }
}

impl GpuSource for Live {
    fn snapshot(&self) -> NvmlSnapshot {
        use nvml_wrapper::enum_wrappers::device::{Clock, P2pCapabilitiesIndex};
        let nvml = match nvml_wrapper::Nvml::init() {
            Ok(n) => n,
            Err(e) => {
                return NvmlSnapshot {
                    error: Some(format!("no NVIDIA driver found: libnvidia-ml.so.1 could not be loaded or initialised ({e}); searched the dynamic loader's paths (LD_LIBRARY_PATH, ld.so.cache)")),
                    ..Default::default()
                }
            }
        };
        let mut snap = NvmlSnapshot {
            driver_version: nvml.sys_driver_version().ok(),
            cuda_version: nvml.sys_cuda_driver_version().ok().map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10)),
            ..Default::default()
        };
        let n = nvml.device_count().unwrap_or(0);
        let devs: Vec<_> = (0..n).filter_map(|i| nvml.device_by_index(i).ok()).collect();
        for (i, d) in devs.iter().enumerate() {
            let nvlinks_active = (0..18).filter(|l| d.link_wrapper_for(*l).is_active().unwrap_or(false)).count() as u32;
            snap.gpus.push(Gpu {
                index: i as u32,
                name: d.name().unwrap_or_default(),
                uuid: d.uuid().unwrap_or_default(),
                bus_id: d.pci_info().map(|p| sysfs_bus_id(&p.bus_id)).unwrap_or_default(),
                compute_capability: d.cuda_compute_capability().ok().map(|c| format!("{}.{}", c.major, c.minor)),
                architecture: d.architecture().ok().map(|a| format!("{a:?}")),
                memory_total_mib: d.memory_info().ok().map(|m| m.total / (1 << 20)),
                persistence_mode: d.is_in_persistent_mode().ok(),
                max_graphics_clock_mhz: d.max_clock_info(Clock::Graphics).ok(),
                max_memory_clock_mhz: d.max_clock_info(Clock::Memory).ok(),
                // A limit of 0 is one NVML does not enforce or report: unknown.
                power_limit_w: d.enforced_power_limit().ok().filter(|mw| *mw > 0).map(|mw| mw as f64 / 1000.0),
                ecc_enabled: d.is_ecc_enabled().ok().map(|e| e.currently_enabled),
                mig_enabled: d.mig_mode().ok().map(|m| m.current == 1),
                nvlinks_active,
            });
        }
        let k = devs.len();
        let mut topo = vec![vec!["X".to_string(); k]; k];
        let caps = [
            ("read", P2pCapabilitiesIndex::Read),
            ("write", P2pCapabilitiesIndex::Write),
            ("nvlink", P2pCapabilitiesIndex::NvLink),
            ("atomics", P2pCapabilitiesIndex::Atomics),
        ];
        let mut p2p: std::collections::BTreeMap<String, Vec<Vec<String>>> =
            caps.iter().map(|(n, _)| (n.to_string(), vec![vec!["X".to_string(); k]; k])).collect();
        for i in 0..k {
            for j in 0..k {
                if i == j {
                    continue;
                }
                // NVLink-connected pairs show as NV#, the number of links, like nvidia-smi.
                let nv = if snap.gpus[i].nvlinks_active > 0
                    && devs[i].p2p_status(&devs[j], P2pCapabilitiesIndex::NvLink).map(|s| p2p_short(&s) == "OK").unwrap_or(false)
                {
                    Some(format!("NV{}", snap.gpus[i].nvlinks_active))
                } else {
                    None
                };
                // topology_common_ancestor takes the other device by value; fetch it again.
                let lvl = nvml
                    .device_by_index(j as u32)
                    .ok()
                    .and_then(|o| devs[i].topology_common_ancestor(o).ok())
                    .map(|t| topo_short(&t).to_string());
                topo[i][j] = nv.or(lvl).unwrap_or_else(|| "?".into());
                for (name, idx) in &caps {
                    let s = devs[i].p2p_status(&devs[j], *idx).map(|s| p2p_short(&s).to_string()).unwrap_or_else(|_| "U".into());
                    if let Some(m) = p2p.get_mut(*name) {
                        m[i][j] = s;
                    }
                }
            }
        }
        snap.topology = topo;
        snap.p2p = p2p;
        snap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvml_bus_ids_become_sysfs_ones() {
        assert_eq!(sysfs_bus_id("00000000:1B:00.0"), "0000:1b:00.0");
        assert_eq!(sysfs_bus_id("0000:01:00.0"), "0000:01:00.0");
    }

    #[test]
    fn live_nvml_without_a_driver_reports_it() {
        // On a machine with a driver this is a real snapshot; without one, a clear error.
        let s = Live.snapshot();
        match &s.error {
            Some(e) => assert!(e.starts_with("no NVIDIA driver found"), "{e}"),
            None => assert_eq!(s.topology.len(), s.gpus.len()),
        }
    }
}
