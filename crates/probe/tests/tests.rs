//! Integration tests of servetune-probe: each fixture identified with its findings, every rule both
//! fired and not fired, capture then root equal to live, and odd files survived.

use std::path::PathBuf;

use servetune_probe::findings::FindingId::{self, *};
use servetune_probe::pcie::AcsState;
use servetune_probe::virt::{Container, Vm};
use servetune_probe::{probe_root, ProbeReport};

fn fixture(name: &str) -> ProbeReport {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    probe_root(&dir, 0).expect("fixture")
}

fn ids(r: &ProbeReport) -> Vec<FindingId> {
    r.findings.iter().map(|f| f.id).collect()
}

#[test]
fn bare_metal_is_identified_with_numa_and_link_findings() {
    let r = fixture("bare-metal-8gpu");
    assert_eq!((r.virtualization.vm, r.virtualization.container), (Vm::None, Container::None));
    assert_eq!(r.gpus.len(), 8);
    assert_eq!(r.pcie.len(), 8);
    assert_eq!(r.host.sockets, 2);
    assert_eq!(r.host.numa_nodes.len(), 2);
    assert_eq!(ids(&r), vec![LinkDowngraded, GpusSplitNuma]);
    let down = r.pcie.iter().find(|g| g.link.downgraded).expect("one downgraded");
    assert_eq!((down.link.current_gen, down.link.max_gen), (Some(4), Some(5)));
    assert_eq!(r.topology.matrix[0][4], "SYS");
    assert_eq!(r.p2p["read"][0][1], "OK");
}

#[test]
fn proxmox_kvm_guest_is_identified_with_p2p_hmm_and_persistence_findings() {
    let r = fixture("proxmox-kvm-8gpu");
    assert_eq!((r.virtualization.vm, r.virtualization.container), (Vm::Kvm, Container::None));
    let ev = r.virtualization.evidence.join(" | ");
    assert!(ev.contains("QEMU") && ev.contains("KVMKVMKVM") && ev.contains("hypervisor"), "{ev}");
    assert!(r.virtualization.implication.contains("P2P clique"));
    assert_eq!(ids(&r), vec![VmNoP2p, HmmEnabled, PersistenceOff]);
    let f = &r.findings[0];
    assert!(f.evidence.contains("28 of 28 GPU pairs"), "{}", f.evidence);
    assert!(f.fix.contains("x-nv-gpudirect-clique"));
}

#[test]
fn proxmox_lxc_is_identified_with_the_iommu_acs_risk() {
    let r = fixture("proxmox-lxc-8gpu");
    assert_eq!((r.virtualization.vm, r.virtualization.container), (Vm::None, Container::Lxc));
    assert_eq!(ids(&r), vec![P2pIommuAcs, GpusSplitNuma]);
    assert!(r.findings[0].fix.contains("servetune fabric p2p --verify"));
    assert!(r.pcie.iter().all(|g| g.bridges.first().is_some_and(|b| b.acs == AcsState::On)));
}

#[test]
fn docker_is_identified_with_mixed_models_and_mig() {
    let r = fixture("docker");
    assert_eq!((r.virtualization.vm, r.virtualization.container), (Vm::None, Container::Docker));
    assert_eq!(ids(&r), vec![MigEnabled, MixedGpuModels]);
}

#[test]
fn no_gpu_machine_reports_no_driver_and_nothing_else() {
    let r = fixture("no-gpu");
    assert_eq!(r.virtualization.vm, Vm::Kvm);
    assert!(!r.driver.found);
    assert_eq!(ids(&r), vec![NoDriver]);
    assert_eq!(r.findings[0].severity, servetune_probe::findings::Severity::Info);
}

/// Every rule fires on some fixture and stays silent on another.
#[test]
fn every_rule_fires_somewhere_and_not_everywhere() {
    let all: Vec<Vec<FindingId>> =
        ["bare-metal-8gpu", "proxmox-kvm-8gpu", "proxmox-lxc-8gpu", "docker", "no-gpu"].iter().map(|f| ids(&fixture(f))).collect();
    for rule in [VmNoP2p, P2pIommuAcs, LinkDowngraded, GpusSplitNuma, HmmEnabled, PersistenceOff, MigEnabled, MixedGpuModels, NoDriver] {
        assert!(all.iter().any(|f| f.contains(&rule)), "{rule:?} never fires");
        assert!(all.iter().any(|f| !f.contains(&rule)), "{rule:?} always fires");
    }
}

#[test]
fn capture_then_root_equals_the_live_probe() {
    let dir = tempfile::tempdir().expect("tmp");
    let snap = dir.path().join("snap");
    let (live, files) = servetune_probe::capture(&snap, 7).expect("capture");
    assert!(files > 3, "{files} files captured");
    let offline = probe_root(&snap, 7).expect("root");
    let a = serde_json::to_value(&live).expect("json");
    let b = serde_json::to_value(&offline).expect("json");
    // NVML: a live failure is recorded as the same error.
    assert_eq!(a, b, "live and captured reports differ");
}

#[test]
fn odd_files_do_not_panic_and_are_reported() {
    let dir = tempfile::tempdir().expect("tmp");
    let r = dir.path();
    std::fs::create_dir_all(r.join("proc")).expect("dir");
    std::fs::write(r.join("proc/cpuinfo"), "garbage without colons\nflags\n:::\nphysical id : not-a-number\n").expect("write");
    std::fs::create_dir_all(r.join("sys/bus/pci/devices/0000:01:00.0")).expect("dir");
    for (f, v) in [("vendor", "0x10de"), ("class", "0x030200"), ("current_link_speed", "weird"), ("numa_node", "")] {
        std::fs::write(r.join("sys/bus/pci/devices/0000:01:00.0").join(f), v).expect("write");
    }
    std::fs::write(r.join("nvml.json"), r#"{"error": null, "gpus": [], "topology": [], "p2p": {}}"#).expect("write");
    let rep = probe_root(r, 0).expect("probe");
    assert_eq!(rep.pcie.len(), 1);
    assert_eq!(rep.pcie[0].numa_node, -1);
    assert_eq!(rep.pcie[0].link.current_gen, None);
    std::fs::write(r.join("nvml.json"), "{not json").expect("write");
    let e = probe_root(r, 0).expect_err("bad nvml.json");
    assert!(e.contains("nvml.json is not a recorded NVML snapshot"), "{e}");
}

#[test]
fn every_fixture_is_a_complete_capture_without_warnings() {
    for name in ["bare-metal-8gpu", "proxmox-kvm-8gpu", "proxmox-lxc-8gpu", "docker", "no-gpu"] {
        assert_eq!(fixture(name).warnings, Vec::<String>::new(), "{name}");
    }
}

#[test]
fn an_empty_directory_is_not_a_capture() {
    let dir = tempfile::tempdir().expect("tmp");
    let e = probe_root(dir.path(), 0).expect_err("empty dir");
    assert!(e.contains("not a probe capture") && e.contains("servetune probe --capture"), "{e}");
}

#[test]
fn a_partial_capture_is_analysed_with_a_warning_per_missing_part() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(dir.path().join("proc")).expect("dir");
    std::fs::write(dir.path().join("proc/cpuinfo"), "processor : 0\nmodel name : Test CPU\n").expect("write");
    let r = probe_root(dir.path(), 0).expect("partial capture");
    assert_eq!(r.host.cpu_model.as_deref(), Some("Test CPU"));
    assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
    assert!(r.warnings[0].contains("no sys/bus/pci/devices (the PCIe devices)"), "{:?}", r.warnings);
    assert!(r.warnings[1].contains("no nvml.json (NVML's view of the GPUs)"), "{:?}", r.warnings);
}

/// The terminal report of each fixture, as a user reads it.
#[test]
fn terminal_reports_of_the_fixtures() {
    for name in ["bare-metal-8gpu", "proxmox-kvm-8gpu", "proxmox-lxc-8gpu", "docker", "no-gpu"] {
        let mut out = Vec::new();
        servetune_probe::render::write_terminal(&fixture(name), &mut out).expect("render");
        insta::assert_snapshot!(name, String::from_utf8_lossy(&out));
    }
}

/// A writable copy of a fixture (symlinks kept as symlinks).
fn copy_of(name: &str) -> tempfile::TempDir {
    fn copy(from: &std::path::Path, to: &std::path::Path) {
        std::fs::create_dir_all(to).expect("dir");
        for e in std::fs::read_dir(from).expect("read fixture").map(|e| e.expect("entry")) {
            let (src, dst) = (e.path(), to.join(e.file_name()));
            let t = e.file_type().expect("type");
            if t.is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(&src).expect("link"), &dst).expect("symlink");
            } else if t.is_dir() {
                copy(&src, &dst);
            } else {
                std::fs::copy(&src, &dst).expect("copy");
            }
        }
    }
    let dir = tempfile::tempdir().expect("tmp");
    copy(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name), &dir.path().join("snap"));
    dir
}

fn mkfifo(p: &std::path::Path) {
    let _ = std::fs::remove_file(p);
    assert!(std::process::Command::new("mkfifo").arg(p).status().expect("mkfifo").success(), "mkfifo {}", p.display());
}

/// `probe_root` on another thread: a probe blocked on a FIFO fails the test instead of hanging it.
fn probe_within_a_minute(dir: &std::path::Path) -> Result<ProbeReport, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let d = dir.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(probe_root(&d, 0));
    });
    rx.recv_timeout(std::time::Duration::from_secs(60)).expect("probe_root returned (it did not block on a FIFO)")
}

#[test]
fn symlinks_out_of_the_snapshot_are_not_followed_and_are_noted() {
    let dir = copy_of("proxmox-kvm-8gpu");
    let snap = dir.path().join("snap");
    let host_file = dir.path().join("host-cpuinfo");
    std::fs::write(&host_file, "processor : 0\nmodel name : HOST-SECRET-CPU\n").expect("write");
    // Relative: ../../host-cpuinfo from snap/proc leaves the root. Absolute: the captured
    // machine's path, looked up inside the snapshot, where nothing is.
    std::fs::remove_file(snap.join("proc/cpuinfo")).expect("rm");
    std::os::unix::fs::symlink("../../host-cpuinfo", snap.join("proc/cpuinfo")).expect("symlink");
    std::fs::remove_file(snap.join("proc/sys/kernel/osrelease")).expect("rm");
    std::os::unix::fs::symlink(&host_file, snap.join("proc/sys/kernel/osrelease")).expect("symlink");
    let r = probe_within_a_minute(&snap).expect("probe");
    let json = serde_json::to_string(&r).expect("json");
    assert!(!json.contains("HOST-SECRET-CPU"), "a host file reached the report");
    assert_eq!(r.host.cpu_model, None);
    assert_eq!(r.host.kernel, None);
    assert!(
        r.warnings.iter().any(|w| w.contains("/proc/cpuinfo: a symlink on its way leads out of the snapshot, so it is not read")),
        "{:?}",
        r.warnings
    );
    // The fixture's own relative links inside the root still resolve.
    assert_eq!(r.pcie.len(), 8);
}

#[test]
fn a_fifo_in_the_snapshot_is_never_opened() {
    let dir = copy_of("proxmox-kvm-8gpu");
    let snap = dir.path().join("snap");
    mkfifo(&snap.join("proc/cpuinfo"));
    mkfifo(&snap.join("sys/module/nvidia_uvm/parameters/uvm_disable_hmm"));
    let r = probe_within_a_minute(&snap).expect("probe");
    assert_eq!(r.host.cpu_model, None);
    assert!(!r.uvm_params.contains_key("uvm_disable_hmm"), "{:?}", r.uvm_params);
    let w = r.warnings.join("\n");
    assert!(w.contains("/proc/cpuinfo: is a FIFO, not a regular file, so it is not read"), "{w}");
    assert!(w.contains("uvm_disable_hmm: is a FIFO"), "{w}");
}

#[test]
fn a_huge_sysfs_file_is_skipped_at_the_size_limit() {
    let dir = copy_of("proxmox-kvm-8gpu");
    let snap = dir.path().join("snap");
    // Sparse: 3 GB long, no disk used; a reader without a limit would allocate all of it.
    let f = std::fs::File::create(snap.join("proc/cpuinfo")).expect("create");
    f.set_len(3 << 30).expect("sparse file");
    let r = probe_within_a_minute(&snap).expect("probe");
    assert_eq!(r.host.cpu_model, None);
    assert!(r.warnings.iter().any(|w| w.contains("/proc/cpuinfo: larger than 16 MiB")), "{:?}", r.warnings);
}

#[test]
fn a_symlink_loop_in_the_snapshot_is_noted_not_followed_forever() {
    let dir = copy_of("proxmox-kvm-8gpu");
    let snap = dir.path().join("snap");
    std::fs::remove_file(snap.join("proc/cpuinfo")).expect("rm");
    std::os::unix::fs::symlink("cpuinfo", snap.join("proc/cpuinfo")).expect("loop");
    let r = probe_within_a_minute(&snap).expect("probe");
    assert!(r.warnings.iter().any(|w| w.contains("/proc/cpuinfo: more than 40 symlinks on its way (a loop)")), "{:?}", r.warnings);
}

#[test]
fn an_unreadable_nvml_json_is_an_error_naming_the_file_and_cause_not_a_missing_driver() {
    let dir = copy_of("proxmox-kvm-8gpu");
    let snap = dir.path().join("snap");
    mkfifo(&snap.join("nvml.json"));
    let e = probe_within_a_minute(&snap).expect_err("a FIFO nvml.json");
    assert!(e.contains("nvml.json cannot be read: /nvml.json: is a FIFO, not a regular file"), "{e}");
    assert!(!e.contains("no NVIDIA driver"), "{e}");
    std::fs::remove_file(snap.join("nvml.json")).expect("rm");
    std::fs::create_dir(snap.join("nvml.json")).expect("dir");
    let e = probe_within_a_minute(&snap).expect_err("a directory nvml.json");
    assert!(e.contains("nvml.json cannot be read: /nvml.json: is a directory"), "{e}");
}

#[test]
fn control_characters_in_a_snapshot_gpu_name_are_escaped_on_the_terminal() {
    let dir = copy_of("proxmox-kvm-8gpu");
    let snap = dir.path().join("snap");
    let nvml = std::fs::read_to_string(snap.join("nvml.json")).expect("nvml");
    let mut v: serde_json::Value = serde_json::from_str(&nvml).expect("json");
    v["gpus"][0]["name"] = serde_json::Value::from("NVIDIA \u{1b}]2;owned\u{7}\u{1b}[2J H100");
    std::fs::write(snap.join("nvml.json"), v.to_string()).expect("write");
    let r = probe_within_a_minute(&snap).expect("probe");
    let mut out = Vec::new();
    servetune_probe::render::write_terminal(&r, &mut out).expect("render");
    let text = String::from_utf8(out).expect("utf-8");
    assert!(!text.contains('\u{1b}') && !text.contains('\u{7}'), "a raw control character reached the terminal");
    assert!(text.contains("NVIDIA \\x1b]2;owned\\x07\\x1b[2J H100"), "{text}");
}

/// `snap/nvml.json` edited by `f`.
fn edit_nvml(snap: &std::path::Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(snap.join("nvml.json")).expect("nvml")).expect("json");
    f(&mut v);
    std::fs::write(snap.join("nvml.json"), v.to_string()).expect("write");
}

#[test]
fn numa_memtotal_that_is_not_whole_kb_in_range_is_unknown_with_a_warning_naming_the_file() {
    for bad in ["1e300", "NaN", "-5", "inf", "393216000.5", "99999999999999999999"] {
        let dir = copy_of("proxmox-kvm-8gpu");
        let snap = dir.path().join("snap");
        let meminfo = snap.join("sys/devices/system/node/node0/meminfo");
        let text = std::fs::read_to_string(&meminfo).expect("meminfo").replace("393216000", bad);
        std::fs::write(&meminfo, text).expect("write");
        let r = probe_within_a_minute(&snap).expect("probe");
        assert_eq!(r.host.numa_nodes[0].memory_gb, None, "{bad}");
        assert!(
            r.warnings.iter().any(|w| w.contains("/sys/devices/system/node/node0/meminfo: MemTotal") && w.contains("shown as unknown")),
            "{bad}: {:?}",
            r.warnings
        );
    }
    assert_eq!(fixture("proxmox-kvm-8gpu").host.numa_nodes[0].memory_gb, Some(393.216));
}

#[test]
fn nvml_figures_out_of_nvmls_range_refuse_the_snapshot_naming_gpu_and_field() {
    let cases: [(usize, &str, serde_json::Value, &str); 5] = [
        (0, "power_limit_w", 1e300.into(), "GPU0 power_limit_w"),
        (1, "power_limit_w", (-600.0).into(), "GPU1 power_limit_w is -600"),
        (2, "memory_total_mib", u64::MAX.into(), "GPU2 memory_total_mib is 18446744073709551615"),
        (3, "max_graphics_clock_mhz", u32::MAX.into(), "GPU3 max_graphics_clock_mhz is 4294967295"),
        (4, "nvlinks_active", u32::MAX.into(), "GPU4 nvlinks_active is 4294967295"),
    ];
    for (i, field, value, says) in cases {
        let dir = copy_of("proxmox-kvm-8gpu");
        let snap = dir.path().join("snap");
        edit_nvml(&snap, |v| v["gpus"][i][field] = value);
        let e = probe_within_a_minute(&snap).expect_err(field);
        assert!(e.contains("nvml.json: ") && e.contains(says) && e.contains("which NVML does not report"), "{e}");
    }
    // A limit of 0 (one NVML did not report, as an older capture stored it) is taken.
    let dir = copy_of("proxmox-kvm-8gpu");
    let snap = dir.path().join("snap");
    edit_nvml(&snap, |v| v["gpus"][1]["power_limit_w"] = 0.0.into());
    let r = probe_within_a_minute(&snap).expect("a 0 W limit is not refused");
    assert_eq!(r.gpus[1].power_limit_w, None, "a 0 W limit is unknown, as the live reader records it");
}

#[test]
fn nvml_matrices_that_are_not_one_row_and_column_per_gpu_are_left_out_with_a_warning() {
    let dir = copy_of("proxmox-kvm-8gpu");
    let snap = dir.path().join("snap");
    edit_nvml(&snap, |v| {
        let two: Vec<serde_json::Value> = v["gpus"].as_array().expect("gpus")[..2].to_vec();
        v["gpus"] = two.into();
    });
    let r = probe_within_a_minute(&snap).expect("probe");
    let w = r.warnings.join("\n");
    assert!(w.contains("nvml.json: topology is 8x8 but it lists 2 GPU(s), so that matrix is left out"), "{w}");
    assert!(w.contains("nvml.json: p2p.read is 8x8 but it lists 2 GPU(s)"), "{w}");
    assert!(r.topology.matrix.is_empty() && r.p2p.values().all(Vec::is_empty));
    // No "28 of 1 GPU pairs": no P2P finding is drawn from a matrix that does not fit.
    assert!(!ids(&r).contains(&VmNoP2p), "{:?}", r.findings);
    edit_nvml(&snap, |v| v["gpus"] = serde_json::json!([]));
    let r = probe_within_a_minute(&snap).expect("probe");
    assert!(r.warnings.iter().any(|w| w.contains("topology is 8x8 but it lists 0 GPU(s)")), "{:?}", r.warnings);
    assert!(!ids(&r).contains(&VmNoP2p), "{:?}", r.findings);
}

#[test]
fn cpu_cores_past_any_cpu_are_unknown_with_a_warning_and_more_cores_than_threads_are_kept() {
    let dir = copy_of("proxmox-kvm-8gpu");
    let snap = dir.path().join("snap");
    let cpuinfo = snap.join("proc/cpuinfo");
    let text = std::fs::read_to_string(&cpuinfo).expect("cpuinfo");
    // The fixture's 8 CPUs as two sockets (the last 4 on socket 1) of `cores` cores each.
    let two_sockets = |cores: &str| {
        let blocks: Vec<String> = text
            .split("\n\n")
            .filter(|b| !b.trim().is_empty())
            .enumerate()
            .map(|(i, b)| {
                let b = b.replace("cpu cores\t: 8", &format!("cpu cores\t: {cores}"));
                if i >= 4 {
                    b.replace("physical id\t: 0", "physical id\t: 1")
                } else {
                    b
                }
            })
            .collect();
        std::fs::write(&cpuinfo, blocks.join("\n\n") + "\n").expect("write");
    };
    // Two sockets of 4294967295 cores each: a wrapping sum gives 4294967294.
    two_sockets("4294967295");
    let r = probe_within_a_minute(&snap).expect("probe");
    assert_eq!((r.host.sockets, r.host.cores, r.host.threads), (2, 0, 8));
    assert!(r.warnings.iter().any(|w| w.contains("/proc/cpuinfo: socket 0 has 4294967295 cpu cores")), "{:?}", r.warnings);
    let mut out = Vec::new();
    servetune_probe::render::write_terminal(&r, &mut out).expect("render");
    assert!(String::from_utf8_lossy(&out).contains("(2 socket(s), ? cores, 8 threads)"));
    assert_eq!(fixture("proxmox-kvm-8gpu").host.cores, 8);
    // A container's cpuinfo lists 8 CPUs of two 64-core sockets: kept as the host's 128 cores.
    two_sockets("64");
    let r = probe_within_a_minute(&snap).expect("probe");
    assert_eq!((r.host.sockets, r.host.cores, r.host.threads), (2, 128, 8));
    assert!(!r.warnings.iter().any(|w| w.contains("cpu cores")), "{:?}", r.warnings);
}

#[test]
fn a_pcie_width_pcie_lacks_and_a_numa_node_the_host_lacks_are_unknown_with_notes() {
    let dir = copy_of("proxmox-kvm-8gpu");
    let snap = dir.path().join("snap");
    let dev = |b: &str, f: &str| snap.join("sys/devices/pci0000:00").join(b).join(f);
    std::fs::write(dev("0000:00:1c.0/0000:01:00.0", "max_link_width"), "4294967295\n").expect("write");
    std::fs::write(dev("0000:00:1c.1/0000:02:00.0", "numa_node"), "99999\n").expect("write");
    std::fs::write(dev("0000:00:1c.2/0000:03:00.0", "numa_node"), "-7\n").expect("write");
    let r = probe_within_a_minute(&snap).expect("probe");
    let gpu = |b: &str| r.pcie.iter().find(|g| g.bus_id == b).expect(b);
    assert_eq!(gpu("0000:01:00.0").link.max_width, None);
    assert!(!gpu("0000:01:00.0").link.downgraded, "an unknown width is no downgrade");
    assert!(!ids(&r).contains(&LinkDowngraded), "{:?}", ids(&r));
    assert_eq!((gpu("0000:02:00.0").numa_node, gpu("0000:03:00.0").numa_node), (-1, -1));
    let w = r.warnings.join("\n");
    assert!(w.contains("0000:01:00.0/max_link_width: 4294967295 is not a PCIe link width"), "{w}");
    assert!(w.contains("0000:02:00.0/numa_node: 99999 is not a NUMA node of this host (-1 or 0)"), "{w}");
    assert!(w.contains("0000:03:00.0/numa_node: -7 is not a NUMA node"), "{w}");
}

#[test]
fn an_nvml_json_linked_out_of_the_snapshot_is_an_error_not_a_missing_driver() {
    let dir = copy_of("proxmox-kvm-8gpu");
    let snap = dir.path().join("snap");
    let real = dir.path().join("nvml-real.json");
    std::fs::rename(snap.join("nvml.json"), &real).expect("mv");
    std::os::unix::fs::symlink(&real, snap.join("nvml.json")).expect("symlink");
    let e = probe_within_a_minute(&snap).expect_err("a link out of the snapshot");
    assert!(e.contains("nvml.json cannot be read: /nvml.json: a symlink to") && e.contains("which is not in the snapshot"), "{e}");
    assert!(!e.contains("no NVIDIA driver"), "{e}");
    std::fs::remove_file(snap.join("nvml.json")).expect("rm");
    std::os::unix::fs::symlink("/dev/zero", snap.join("nvml.json")).expect("symlink");
    let e = probe_within_a_minute(&snap).expect_err("a link to /dev/zero");
    assert!(e.contains("/nvml.json: a symlink to /dev/zero, which is not in the snapshot"), "{e}");
}

#[test]
fn a_capture_into_an_existing_file_says_it_is_a_file_not_a_folder() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("afile");
    std::fs::write(&file, "x\n").expect("write");
    let e = servetune_probe::capture(&file, 0).expect_err("a file");
    assert!(e.contains("afile: that is a file, not a folder; give a new or empty folder"), "{e}");
    assert_eq!(std::fs::read(&file).expect("kept"), b"x\n");
}
