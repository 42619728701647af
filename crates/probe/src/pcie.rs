//! The PCIe view from sysfs: NVIDIA devices (vendor 0x10de, class 0x03xx), their links, NUMA node,
//! IOMMU group, the bridges above them, and ACS on those bridges when config space is readable.

use serde::{Deserialize, Serialize};

use crate::fs::Root;

/// A GPU's PCIe link as sysfs reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// PCIe generation it trained at (from `current_link_speed`).
    pub current_gen: Option<u32>,
    /// Highest generation the device supports (from `max_link_speed`).
    pub max_gen: Option<u32>,
    /// Lanes it trained at.
    pub current_width: Option<u32>,
    /// Lanes the device supports.
    pub max_width: Option<u32>,
    /// Running below its maximum generation or width.
    pub downgraded: bool,
}

/// Whether a bridge redirects peer-to-peer traffic up to the root complex (ACS P2P redirect).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AcsState {
    /// P2P request or completion redirect is set.
    On,
    /// ACS is absent or no redirect bit is set.
    Off,
    /// Config space beyond 256 bytes was not readable (it needs root).
    Unknown,
}

impl AcsState {
    /// `on`, `off` or `unknown`.
    pub fn name(self) -> &'static str {
        match self {
            AcsState::On => "on",
            AcsState::Off => "off",
            AcsState::Unknown => "unknown",
        }
    }
}

/// A PCIe bridge or switch port above a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bridge {
    /// Its PCI address (0000:00:01.1).
    pub bus_id: String,
    /// ACS P2P redirect.
    pub acs: AcsState,
    /// ACS control bits set, when readable.
    pub acs_bits: Vec<String>,
}

/// An NVIDIA display or 3D controller on the PCIe bus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PciGpu {
    /// Its PCI address, domain-qualified (0000:01:00.0).
    pub bus_id: String,
    /// PCI device id, four hex digits.
    pub device_id: String,
    /// -1 when the platform reports none.
    pub numa_node: i32,
    /// Its PCIe link.
    pub link: Link,
    /// IOMMU group number, when the IOMMU is on.
    pub iommu_group: Option<u32>,
    /// The group's translation type as the kernel names it (DMA, DMA-FQ, identity).
    pub iommu_type: Option<String>,
    /// Upstream bridges, nearest first.
    pub bridges: Vec<Bridge>,
    /// The PCI root (host bridge) it hangs under, e.g. pci0000:00.
    pub root: Option<String>,
}

/// "32.0 GT/s PCIe" -> generation 5. `Unknown` (a link that is down, a device in D3cold) and a
/// rate that is not a finite positive number are no generation.
pub fn speed_to_gen(s: &str) -> Option<u32> {
    let gts: f64 = s.split_whitespace().next()?.parse().ok()?;
    if !(gts.is_finite() && gts > 0.0) {
        return None;
    }
    Some(match gts {
        x if x >= 120.0 => 7,
        x if x >= 60.0 => 6,
        x if x >= 30.0 => 5,
        x if x >= 15.0 => 4,
        x if x >= 7.5 => 3,
        x if x >= 4.5 => 2,
        _ => 1,
    })
}

/// ACS from a config-space dump: walk the extended capabilities from 0x100 for ID 0x000D and read
/// its control register (capability + 6). `None` when the dump stops at 256 bytes (unprivileged).
pub fn acs_from_config(cfg: &[u8]) -> Option<Vec<String>> {
    if cfg.len() <= 0x100 {
        return None;
    }
    let rd32 = |o: usize| -> Option<u32> { cfg.get(o..o + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])) };
    let mut off = 0x100usize;
    for _ in 0..64 {
        let hdr = rd32(off)?;
        // All ones is what a read of a device that does not answer returns: unknown, not off.
        if hdr == 0xffff_ffff {
            return None;
        }
        if hdr == 0 {
            return Some(Vec::new());
        }
        if hdr & 0xffff == 0x000d {
            let ctrl = cfg.get(off + 6..off + 8).map(|b| u16::from_le_bytes([b[0], b[1]]))?;
            let names = [
                "SourceValidation",
                "TranslationBlocking",
                "P2PRequestRedirect",
                "P2PCompletionRedirect",
                "UpstreamForwarding",
                "P2PEgressControl",
                "DirectTranslatedP2P",
            ];
            return Some(names.iter().enumerate().filter(|(i, _)| ctrl & (1 << i) != 0).map(|(_, n)| n.to_string()).collect());
        }
        let next = ((hdr >> 20) & 0xffc) as usize;
        if next < 0x100 {
            return Some(Vec::new());
        }
        off = next;
    }
    Some(Vec::new())
}

/// The link widths PCIe defines, in lanes.
const PCIE_WIDTHS: [u32; 7] = [1, 2, 4, 8, 12, 16, 32];

/// Sets a GPU's NUMA node that is not -1 and not one of `nodes` (the host's, by number; when the
/// host lists none, any of 0 to 1023) to -1, unknown, with a note on `fs`.
pub fn check_numa_nodes(fs: &Root, gpus: &mut [PciGpu], nodes: &[u32]) {
    for g in gpus {
        let n = g.numa_node;
        let listed = if nodes.is_empty() { (0..=1023).contains(&n) } else { u32::try_from(n).is_ok_and(|n| nodes.contains(&n)) };
        if n != -1 && !listed {
            let known = if nodes.is_empty() {
                "-1 or 0 to 1023".to_string()
            } else {
                format!("-1 or {}", nodes.iter().map(u32::to_string).collect::<Vec<_>>().join(", "))
            };
            fs.skip(format!(
                "/sys/bus/pci/devices/{}/numa_node: {n} is not a NUMA node of this host ({known}), so it is shown as unknown (-1)",
                g.bus_id
            ));
            g.numa_node = -1;
        }
    }
}

fn hex(fs: &Root, p: &str) -> Option<u32> {
    let s = fs.read(p)?;
    u32::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

/// NVIDIA GPUs on the PCIe bus, and every file that could not be read.
pub fn detect(fs: &Root, unreadable: &mut Vec<String>) -> Vec<PciGpu> {
    let mut out = Vec::new();
    let devices = fs.list("/sys/bus/pci/devices");
    if devices.is_empty() {
        unreadable.push("/sys/bus/pci/devices (no PCI devices listed)".into());
    }
    for bdf in devices {
        let base = format!("/sys/bus/pci/devices/{bdf}");
        let link_target = fs.readlink(&base);
        let (Some(vendor), Some(class)) = (hex(fs, &format!("{base}/vendor")), hex(fs, &format!("{base}/class"))) else { continue };
        if vendor != 0x10de || (class >> 16) != 0x03 {
            continue;
        }
        let cur = fs.read(&format!("{base}/current_link_speed"));
        let max = fs.read(&format!("{base}/max_link_speed"));
        // Width 0 is a link that is down: no width, as an unknown speed is no generation. A
        // width PCIe does not have is unknown too, with a note.
        let width = |f: &str| {
            let path = format!("{base}/{f}");
            let w = fs.read(&path).and_then(|w| w.parse::<u32>().ok()).filter(|w| *w > 0)?;
            if PCIE_WIDTHS.contains(&w) {
                return Some(w);
            }
            fs.skip(format!("{path}: {w} is not a PCIe link width (1, 2, 4, 8, 12, 16 or 32), so it is shown as unknown"));
            None
        };
        let (cw, mw) = (width("current_link_width"), width("max_link_width"));
        let (cg, mg) = (cur.as_deref().and_then(speed_to_gen), max.as_deref().and_then(speed_to_gen));
        if cur.is_none() {
            unreadable.push(format!("{base}/current_link_speed"));
        }
        let downgraded = matches!((cg, mg), (Some(c), Some(m)) if c < m) || matches!((cw, mw), (Some(c), Some(m)) if c < m);
        let group = fs.readlink(&format!("{base}/iommu_group")).and_then(|t| t.rsplit('/').next().and_then(|g| g.parse::<u32>().ok()));
        let iommu_type = group.and_then(|g| fs.read(&format!("/sys/kernel/iommu_groups/{g}/type")));
        // Bridges: the path of the device's sysfs link, e.g. ../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0
        let mut bridges = Vec::new();
        let root = link_target.as_deref().and_then(|t| t.split('/').find(|p| p.starts_with("pci")).map(str::to_string));
        if let Some(t) = &link_target {
            let parts: Vec<&str> = t.split('/').filter(|p| p.contains(':') && p.contains('.') && !p.starts_with("pci")).collect();
            for b in parts.iter().rev().skip(1) {
                let cfg = fs.read_bytes(&format!("/sys/bus/pci/devices/{b}/config"));
                let acs = cfg.as_deref().and_then(acs_from_config);
                let (state, bits) = match acs {
                    None => (AcsState::Unknown, Vec::new()),
                    Some(bits) if bits.iter().any(|b| b.contains("Redirect")) => (AcsState::On, bits),
                    Some(bits) => (AcsState::Off, bits),
                };
                bridges.push(Bridge { bus_id: b.to_string(), acs: state, acs_bits: bits });
            }
        }
        out.push(PciGpu {
            bus_id: bdf.clone(),
            device_id: format!("{:04x}", hex(fs, &format!("{base}/device")).unwrap_or(0)),
            numa_node: fs.read(&format!("{base}/numa_node")).and_then(|n| n.parse().ok()).unwrap_or(-1),
            link: Link { current_gen: cg, max_gen: mg, current_width: cw, max_width: mw, downgraded },
            iommu_group: group,
            iommu_type,
            bridges,
            root,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_speeds_map_to_generations() {
        assert_eq!(speed_to_gen("32.0 GT/s PCIe"), Some(5));
        assert_eq!(speed_to_gen("16.0 GT/s PCIe"), Some(4));
        assert_eq!(speed_to_gen("2.5 GT/s PCIe"), Some(1));
        assert_eq!(speed_to_gen("Unknown"), None);
        assert_eq!(speed_to_gen("64.0 GT/s PCIe"), Some(6));
        assert_eq!(speed_to_gen("128.0 GT/s PCIe"), Some(7));
        for bad in ["NaN GT/s PCIe", "-8.0 GT/s PCIe", "inf GT/s PCIe", "0 GT/s PCIe"] {
            assert_eq!(speed_to_gen(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_config_space_of_all_ones_is_unknown_not_acs_off() {
        assert_eq!(acs_from_config(&vec![0xffu8; 4096]), None, "a device that did not answer");
        assert_eq!(acs_from_config(&vec![0u8; 4096]), Some(Vec::new()), "no extended capabilities: off");
    }

    #[test]
    fn acs_capability_is_found_in_extended_config_space() {
        let mut cfg = vec![0u8; 0x200];
        // 0x100: AER (id 1), next 0x140; 0x140: ACS (id 0xd), next 0; control = ReqRedir | CmpltRedir.
        cfg[0x100..0x104].copy_from_slice(&(0x0001u32 | (1 << 16) | (0x140 << 20)).to_le_bytes());
        cfg[0x140..0x144].copy_from_slice(&(0x000du32 | (1 << 16)).to_le_bytes());
        cfg[0x146..0x148].copy_from_slice(&0b0_1100u16.to_le_bytes());
        let bits = acs_from_config(&cfg).expect("readable");
        assert_eq!(bits, vec!["P2PRequestRedirect".to_string(), "P2PCompletionRedirect".to_string()]);
        assert_eq!(acs_from_config(&cfg[..256]), None, "256 bytes: unprivileged read");
    }
}
