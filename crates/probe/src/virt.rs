//! Virtualization, in systemd-detect-virt's order (docs/reference.md): containers first, then VMs;
//! every conclusion carries its evidence.

use serde::{Deserialize, Serialize};

use crate::fs::Root;

/// The hypervisor a guest runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vm {
    /// Not a virtual machine.
    None,
    /// Linux KVM (Proxmox, libvirt, most clouds).
    Kvm,
    /// QEMU without KVM acceleration, or QEMU's machine type without a more specific signature.
    Qemu,
    /// VMware.
    Vmware,
    /// Xen.
    Xen,
    /// Hyper-V.
    Microsoft,
    /// Amazon EC2 (Nitro).
    Amazon,
    /// Google Compute Engine.
    Google,
    /// A hypervisor this probe does not name (VirtualBox, an unknown CPUID signature, the bare
    /// `hypervisor` CPU flag).
    Other,
}

impl Vm {
    /// The lowercase name used in the JSON and the terminal report.
    pub fn name(self) -> &'static str {
        match self {
            Vm::None => "none",
            Vm::Kvm => "kvm",
            Vm::Qemu => "qemu",
            Vm::Vmware => "vmware",
            Vm::Xen => "xen",
            Vm::Microsoft => "microsoft",
            Vm::Amazon => "amazon",
            Vm::Google => "google",
            Vm::Other => "other",
        }
    }
}

/// The container runtime a process runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Container {
    /// Not in a container.
    None,
    /// LXC (Proxmox CT, lxc-libvirt).
    Lxc,
    /// Docker.
    Docker,
    /// Podman.
    Podman,
    /// Windows Subsystem for Linux.
    Wsl,
    /// A container this probe does not name (OpenVZ, an unknown `container=` value).
    Other,
}

impl Container {
    /// The lowercase name used in the JSON and the terminal report.
    pub fn name(self) -> &'static str {
        match self {
            Container::None => "none",
            Container::Lxc => "lxc",
            Container::Docker => "docker",
            Container::Podman => "podman",
            Container::Wsl => "wsl",
            Container::Other => "other",
        }
    }

    fn from_marker(s: &str) -> Self {
        match s.trim().to_ascii_lowercase().as_str() {
            "lxc" | "lxc-libvirt" => Container::Lxc,
            "docker" => Container::Docker,
            "podman" => Container::Podman,
            "wsl" => Container::Wsl,
            _ => Container::Other,
        }
    }
}

/// What the probe concluded about virtualization, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Virtualization {
    /// The hypervisor, or `none`.
    pub vm: Vm,
    /// The container runtime, or `none`.
    pub container: Container,
    /// One line per fact that led to the conclusion, naming the file or CPUID leaf it came from.
    pub evidence: Vec<String>,
    /// What it means for GPUs.
    pub implication: String,
}

/// Detects the container and VM, reading `cpuid` (the hypervisor vendor signature, leaf 0x40000000)
/// from `/servetune/cpuid` when the caller wrote it there (live probe and captures).
pub fn detect(fs: &Root, cpuid_signature: Option<&str>) -> Virtualization {
    let mut evidence = Vec::new();
    let container = detect_container(fs, &mut evidence);
    let vm = detect_vm(fs, cpuid_signature, &mut evidence);
    Virtualization { vm, container, evidence, implication: implication(vm, container) }
}

/// One container check: the container it found, with its evidence pushed, or `None`.
type ContainerCheck = fn(&Root, &mut Vec<String>) -> Option<Container>;

/// Containers, strongest marker first (systemd-detect-virt's order); the first that speaks wins.
fn detect_container(fs: &Root, ev: &mut Vec<String>) -> Container {
    let steps: [ContainerCheck; 5] = [openvz, wsl, container_manager_files, container_marker_files, cgroup_names];
    steps.iter().find_map(|step| step(fs, ev)).unwrap_or(Container::None)
}

fn openvz(fs: &Root, ev: &mut Vec<String>) -> Option<Container> {
    (fs.exists("/proc/vz") && !fs.exists("/proc/bc")).then(|| {
        ev.push("/proc/vz exists without /proc/bc: OpenVZ container".into());
        Container::Other
    })
}

fn wsl(fs: &Root, ev: &mut Vec<String>) -> Option<Container> {
    let os = fs.read("/proc/sys/kernel/osrelease")?;
    (os.contains("Microsoft") || os.contains("WSL")).then(|| {
        ev.push(format!("/proc/sys/kernel/osrelease is {os:?}: WSL"));
        Container::Wsl
    })
}

/// `/run/host/container-manager`, PID 1's `container=` variable, `/run/systemd/container`.
fn container_manager_files(fs: &Root, ev: &mut Vec<String>) -> Option<Container> {
    if let Some(m) = fs.read("/run/host/container-manager") {
        ev.push(format!("/run/host/container-manager says {m:?}"));
        return Some(Container::from_marker(&m));
    }
    if let Some(env) = fs.read_bytes("/proc/1/environ") {
        if let Some(v) = env.split(|b| *b == 0).find_map(|kv| kv.strip_prefix(b"container=")) {
            let v = String::from_utf8_lossy(v).to_string();
            ev.push(format!("PID 1 environment has container={v}"));
            return Some(Container::from_marker(&v));
        }
    }
    let c = fs.read("/run/systemd/container")?;
    ev.push(format!("/run/systemd/container says {c:?}"));
    Some(Container::from_marker(&c))
}

fn container_marker_files(fs: &Root, ev: &mut Vec<String>) -> Option<Container> {
    if fs.exists("/run/.containerenv") {
        ev.push("/run/.containerenv exists: podman".into());
        return Some(Container::Podman);
    }
    fs.exists("/.dockerenv").then(|| {
        ev.push("/.dockerenv exists: docker".into());
        Container::Docker
    })
}

fn cgroup_names(fs: &Root, ev: &mut Vec<String>) -> Option<Container> {
    let cg = fs.read("/proc/1/cgroup")?;
    [("/docker/", Container::Docker), ("/lxc/", Container::Lxc), ("libpod", Container::Podman)].into_iter().find_map(|(needle, kind)| {
        cg.contains(needle).then(|| {
            ev.push(format!("/proc/1/cgroup mentions {needle:?} (weak evidence)"));
            kind
        })
    })
}

/// VMs: DMI strings first (they survive hidden=1 / kvm=off), then the CPUID signature, then the
/// `hypervisor` CPU flag.
fn detect_vm(fs: &Root, cpuid_signature: Option<&str>, ev: &mut Vec<String>) -> Vm {
    let dmi: Vec<DmiField> = ["sys_vendor", "product_name", "board_vendor", "bios_vendor"]
        .iter()
        .filter_map(|f| fs.read(&format!("/sys/class/dmi/id/{f}")).map(|value| DmiField { field: f, value }))
        .collect();
    let mut vm = vm_from_dmi(&dmi, ev);
    if let Some(sig) = cpuid_signature.filter(|s| !s.is_empty()) {
        let kind = vm_from_cpuid(sig);
        ev.push(format!("CPUID leaf 0x40000000 signature {sig:?}"));
        // QEMU with Hyper-V enlightenments also says "Microsoft Hv": DMI wins when it spoke.
        if vm == Vm::None || (vm == Vm::Qemu && kind == Vm::Kvm) {
            vm = kind;
        }
    }
    let hypervisor_flag = fs
        .read("/proc/cpuinfo")
        .is_some_and(|c| c.lines().any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor")));
    if hypervisor_flag {
        ev.push("/proc/cpuinfo flags include \"hypervisor\"".into());
        if vm == Vm::None {
            vm = Vm::Other;
        }
    }
    if dmi.iter().any(|d| d.field == "product_name" && d.value.starts_with("Standard PC (")) {
        ev.push("product_name \"Standard PC (...)\" is QEMU's machine type, as Proxmox VMs show".into());
    }
    vm
}

/// One `/sys/class/dmi/id/*` file.
struct DmiField {
    field: &'static str,
    value: String,
}

fn vm_from_dmi(dmi: &[DmiField], ev: &mut Vec<String>) -> Vm {
    for d in dmi {
        let v = d.value.as_str();
        let kind = if v.contains("Amazon EC2") {
            Vm::Amazon
        } else if v.contains("Google") {
            Vm::Google
        } else if v.contains("KVM") {
            Vm::Kvm
        } else if v.contains("QEMU") {
            Vm::Qemu
        } else if v.contains("VMware") {
            Vm::Vmware
        } else if v.contains("VirtualBox") || v.contains("innotek") {
            Vm::Other
        } else if v.contains("Xen") {
            Vm::Xen
        } else if v.contains("Microsoft Corporation") && dmi.iter().any(|p| p.value.contains("Virtual Machine")) {
            Vm::Microsoft
        } else {
            continue;
        };
        ev.push(format!("/sys/class/dmi/id/{} is {v:?}", d.field));
        return kind;
    }
    Vm::None
}

fn vm_from_cpuid(sig: &str) -> Vm {
    match sig {
        "KVMKVMKVM" => Vm::Kvm,
        "TCGTCGTCGTCG" => Vm::Qemu,
        "VMwareVMware" => Vm::Vmware,
        "XenVMMXenVMM" => Vm::Xen,
        "Microsoft Hv" => Vm::Microsoft,
        _ => Vm::Other,
    }
}

fn implication(vm: Vm, container: Container) -> String {
    match (vm, container) {
        (Vm::None, Container::None) => "bare metal: GPU P2P depends only on the PCIe topology and the driver".into(),
        (v, Container::None) => format!(
            "{} guest: GPU P2P needs a P2P clique from the hypervisor (x-nv-gpudirect-clique) or bare metal; without it every GPU-to-GPU copy is staged through host memory",
            v.name()
        ),
        (Vm::None, Container::Lxc) => "LXC container: shares the host kernel and driver; GPU P2P works as on the host".into(),
        (Vm::None, c) => {
            format!("{} container: shares the host kernel and driver; GPU P2P works as on the host if the devices are passed in", c.name())
        }
        (v, c) => format!("{} container inside a {} guest: P2P is limited by the VM (needs a P2P clique)", c.name(), v.name()),
    }
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

/// The hypervisor vendor signature: not read on this architecture.
#[cfg(not(target_arch = "x86_64"))]
pub fn cpuid_signature() -> Option<String> {
    None
}
