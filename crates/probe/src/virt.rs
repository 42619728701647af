//! Virtualization, in systemd-detect-virt's order (shared/reference/probe.md): containers first,
//! then VMs; every conclusion carries its evidence.

use serde::{Deserialize, Serialize};

use crate::fs::Root;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Virtualization {
    /// none, kvm, qemu, vmware, xen, microsoft, amazon, google, other.
    pub vm: String,
    /// none, lxc, docker, podman, wsl, other.
    pub container: String,
    pub evidence: Vec<String>,
    /// What it means for GPUs.
    pub implication: String,
}

fn container_kind(s: &str) -> &'static str {
    match s.trim().to_ascii_lowercase().as_str() {
        "lxc" | "lxc-libvirt" => "lxc",
        "docker" => "docker",
        "podman" => "podman",
        "wsl" => "wsl",
        _ => "other",
    }
}

/// Detects the container and VM, reading `cpuid` (the hypervisor vendor signature, leaf 0x40000000)
/// from `/servetune/cpuid` when the caller wrote it there (live probe and captures).
pub fn detect(fs: &Root, cpuid_signature: Option<&str>) -> Virtualization {
    let mut ev = Vec::new();
    let mut container = "none";
    if fs.exists("/proc/vz") && !fs.exists("/proc/bc") {
        container = "other";
        ev.push("/proc/vz exists without /proc/bc: OpenVZ container".into());
    }
    if container == "none" {
        if let Some(os) = fs.read("/proc/sys/kernel/osrelease") {
            if os.contains("Microsoft") || os.contains("WSL") {
                container = "wsl";
                ev.push(format!("/proc/sys/kernel/osrelease is {os:?}: WSL"));
            }
        }
    }
    if container == "none" {
        if let Some(m) = fs.read("/run/host/container-manager") {
            container = container_kind(&m);
            ev.push(format!("/run/host/container-manager says {m:?}"));
        }
    }
    if container == "none" {
        if let Some(env) = fs.read_bytes("/proc/1/environ") {
            if let Some(v) = env.split(|b| *b == 0).find_map(|kv| kv.strip_prefix(b"container=")) {
                let v = String::from_utf8_lossy(v).to_string();
                container = container_kind(&v);
                ev.push(format!("PID 1 environment has container={v}"));
            }
        }
    }
    if container == "none" {
        if let Some(c) = fs.read("/run/systemd/container") {
            container = container_kind(&c);
            ev.push(format!("/run/systemd/container says {c:?}"));
        }
    }
    if container == "none" && fs.exists("/run/.containerenv") {
        container = "podman";
        ev.push("/run/.containerenv exists: podman".into());
    }
    if container == "none" && fs.exists("/.dockerenv") {
        container = "docker";
        ev.push("/.dockerenv exists: docker".into());
    }
    if container == "none" {
        if let Some(cg) = fs.read("/proc/1/cgroup") {
            for (needle, kind) in [("/docker/", "docker"), ("/lxc/", "lxc"), ("libpod", "podman")] {
                if cg.contains(needle) {
                    container = kind;
                    ev.push(format!("/proc/1/cgroup mentions {needle:?} (weak evidence)"));
                    break;
                }
            }
        }
    }

    // VMs. DMI strings first (they survive hidden=1 / kvm=off), then the CPUID signature and flag.
    let dmi: Vec<(String, String)> = ["sys_vendor", "product_name", "board_vendor", "bios_vendor"]
        .iter()
        .filter_map(|f| fs.read(&format!("/sys/class/dmi/id/{f}")).map(|v| (f.to_string(), v)))
        .collect();
    let mut vm = "none";
    for (field, v) in &dmi {
        let kind = if v.contains("Amazon EC2") {
            "amazon"
        } else if v.contains("Google") {
            "google"
        } else if v.contains("KVM") {
            "kvm"
        } else if v.contains("QEMU") {
            "qemu"
        } else if v.contains("VMware") {
            "vmware"
        } else if v.contains("VirtualBox") || v.contains("innotek") {
            "other"
        } else if v.contains("Xen") {
            "xen"
        } else if v.contains("Microsoft Corporation") && dmi.iter().any(|(_, p)| p.contains("Virtual Machine")) {
            "microsoft"
        } else {
            continue;
        };
        vm = kind;
        ev.push(format!("/sys/class/dmi/id/{field} is {v:?}"));
        break;
    }
    if let Some(sig) = cpuid_signature.filter(|s| !s.is_empty()) {
        let kind = match sig {
            "KVMKVMKVM" => "kvm",
            "TCGTCGTCGTCG" => "qemu",
            "VMwareVMware" => "vmware",
            "XenVMMXenVMM" => "xen",
            "Microsoft Hv" => "microsoft",
            _ => "other",
        };
        ev.push(format!("CPUID leaf 0x40000000 signature {sig:?}"));
        // QEMU with Hyper-V enlightenments also says "Microsoft Hv": DMI wins when it spoke.
        if vm == "none" || (vm == "qemu" && kind == "kvm") {
            vm = kind;
        }
    }
    let hypervisor_flag = fs
        .read("/proc/cpuinfo")
        .is_some_and(|c| c.lines().any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor")));
    if hypervisor_flag {
        ev.push("/proc/cpuinfo flags include \"hypervisor\"".into());
        if vm == "none" {
            vm = "other";
        }
    }
    if dmi.iter().any(|(f, v)| f == "product_name" && v.starts_with("Standard PC (")) {
        ev.push("product_name \"Standard PC (...)\" is QEMU's machine type, as Proxmox VMs show".into());
    }
    let implication = match (vm, container) {
        ("none", "none") => "bare metal: GPU P2P depends only on the PCIe topology and the driver".into(),
        (v, "none") => format!("{v} guest: GPU P2P needs a P2P clique from the hypervisor (x-nv-gpudirect-clique) or bare metal; without it every GPU-to-GPU copy is staged through host memory"),
        ("none", "lxc") => "LXC container: shares the host kernel and driver; GPU P2P works as on the host".into(),
        ("none", c) => format!("{c} container: shares the host kernel and driver; GPU P2P works as on the host if the devices are passed in"),
        (v, c) => format!("{c} container inside a {v} guest: P2P is limited by the VM (needs a P2P clique)"),
    };
    Virtualization { vm: vm.into(), container: container.into(), evidence: ev, implication }
}

/// The hypervisor vendor signature from CPUID leaf 0x40000000, when the CPU says it runs under one.
#[cfg(target_arch = "x86_64")]
pub fn cpuid_signature() -> Option<String> {
    use std::arch::x86_64::__cpuid;
    let l1 = __cpuid(1);
    if l1.ecx & (1 << 31) == 0 {
        return None;
    }
    let r = __cpuid(0x4000_0000);
    let mut b = Vec::with_capacity(12);
    for reg in [r.ebx, r.ecx, r.edx] {
        b.extend_from_slice(&reg.to_le_bytes());
    }
    let s = String::from_utf8_lossy(&b).trim_end_matches('\0').trim().to_string();
    Some(s)
}

#[cfg(not(target_arch = "x86_64"))]
pub fn cpuid_signature() -> Option<String> {
    None
}
