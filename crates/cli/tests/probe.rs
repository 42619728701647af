//! `servetune probe` as a user runs it on this machine (no GPU), and on a fixture.

use crate::common::servetune;

#[test]
fn probe_on_this_machine_reports_and_exits_zero_without_a_driver() {
    let out = servetune().args(["probe"]).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    for section in ["== virtualization", "== host", "== PCIe", "== GPUs (NVML)", "== findings"] {
        assert!(text.contains(section), "{section} missing:\n{text}");
    }
}

#[test]
fn probe_root_on_the_kvm_fixture_prints_matrices_and_findings() {
    let fx = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../probe/tests/fixtures/proxmox-kvm-8gpu");
    let dir = tempfile::tempdir().expect("tmp");
    let j = dir.path().join("p.json");
    let out = servetune().arg("probe").arg("--root").arg(&fx).arg("--json").arg(&j).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    assert!(text.contains("P2P read (as nvidia-smi topo -p2p r)"), "{text}");
    assert!(text.contains("[Critical] kvm guest without GPU peer-to-peer"), "{text}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&j).expect("json")).expect("parse");
    assert_eq!(v["schema"], "servetune.probe/1.1");
    assert_eq!(v["virtualization"]["vm"], "kvm");
    for k in ["host", "gpus", "topology", "p2p", "findings"] {
        assert!(!v[k].is_null(), "{k}");
    }
    let f = &v["findings"][0];
    for k in ["id", "severity", "title", "evidence", "fix"] {
        assert!(f[k].is_string(), "{k}");
    }
}

#[test]
fn probe_root_that_is_not_a_directory_is_refused() {
    let out = servetune().args(["probe", "--root", "/nonexistent/snapshot"]).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--root /nonexistent/snapshot: not a directory"));
}

#[test]
fn probe_root_on_an_empty_directory_is_not_a_capture_and_exits_2() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = servetune().arg("probe").arg("--root").arg(dir.path()).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a probe capture") && err.contains("servetune probe --capture DIR"), "{err}");
    assert!(out.stdout.is_empty(), "no report for a directory that is not a capture");
}

#[test]
fn probe_root_on_a_partial_capture_warns_on_stderr_and_in_the_report() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(dir.path().join("proc")).expect("dir");
    std::fs::write(dir.path().join("proc/cpuinfo"), "processor : 0\n").expect("write");
    let out = servetune().arg("probe").arg("--root").arg(dir.path()).output().expect("run");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("warning: --root"), "{text}");
    assert!(text.contains("has no nvml.json"), "{text}");
    let out = servetune().arg("probe").arg("-q").arg("--root").arg(dir.path()).output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("warning: --root") && err.contains("has no sys/bus/pci/devices"), "{err}");
}

/// Runs `servetune ARGS` with stdout on `/dev/full` (every write fails with "no space left");
/// returns the exit code and stderr. Shared by the plan and fabric tests.
pub(crate) fn to_a_full_device(args: &[&str]) -> (i32, String) {
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_servetune")).args(args).stdout(full).output().expect("run");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn probe_to_a_full_device_exits_1_saying_the_report_was_not_written() {
    let fx = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../probe/tests/fixtures/proxmox-kvm-8gpu");
    let fx = fx.to_string_lossy();
    for args in [vec!["probe", "--root", &fx], vec!["probe", "--root", &fx, "--json", "-"]] {
        let (code, err) = to_a_full_device(&args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains("error: cannot write the report to stdout (No space left on device"), "{args:?}: {err}");
    }
}

#[test]
fn probe_root_escapes_control_characters_of_snapshot_gpu_names_on_the_terminal() {
    let fx = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../probe/tests/fixtures/no-gpu");
    let dir = tempfile::tempdir().expect("tmp");
    for part in ["proc", "sys"] {
        let ok = std::process::Command::new("cp").arg("-a").arg(fx.join(part)).arg(dir.path()).status().expect("cp").success();
        assert!(ok, "copy {part}");
    }
    let nvml = serde_json::json!({"error": null, "driver_version": "1\u{1b}[31m", "gpus": [], "topology": [], "p2p": {}});
    std::fs::write(dir.path().join("nvml.json"), nvml.to_string()).expect("write");
    let out = servetune().arg("probe").arg("--root").arg(dir.path()).output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains('\u{1b}'), "a raw escape reached the terminal:\n{text}");
    assert!(text.contains("driver 1\\x1b[31m"), "{text}");
}

/// A copy of the `no-gpu` capture in a temporary folder, to edit.
fn no_gpu_copy() -> tempfile::TempDir {
    let fx = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../probe/tests/fixtures/no-gpu");
    let dir = tempfile::tempdir().expect("tmp");
    let ok = std::process::Command::new("cp").arg("-a").arg(fx.join(".")).arg(dir.path()).status().expect("cp").success();
    assert!(ok, "copy the fixture");
    dir
}

#[test]
fn probe_root_with_a_fifo_in_the_snapshot_finishes_and_names_it() {
    let dir = no_gpu_copy();
    let cpuinfo = dir.path().join("proc/cpuinfo");
    let _ = std::fs::remove_file(&cpuinfo);
    assert!(std::process::Command::new("mkfifo").arg(&cpuinfo).status().expect("mkfifo").success());
    let out = servetune().arg("probe").arg("-q").arg("--root").arg(dir.path()).output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/proc/cpuinfo: is a FIFO, not a regular file, so it is not read"), "{err}");
}

/// The report inside the snapshot it reads is refused (it could replace nvml.json), and a capture
/// into a folder that already holds files is refused, the files kept.
#[test]
fn probe_refuses_a_report_inside_its_snapshot_and_a_capture_into_a_full_folder() {
    let dir = no_gpu_copy();
    let nvml = dir.path().join("nvml.json");
    let before = std::fs::read(&nvml).expect("nvml.json");
    let out = servetune().arg("probe").arg("--root").arg(dir.path()).arg("--json").arg(&nvml).output().expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("inside the snapshot folder"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&nvml).expect("kept"), before);
    // Beside the snapshot, written through its folder's parent, is fine.
    let beside = dir.path().join("..").join(format!("{}-report.json", dir.path().file_name().and_then(|n| n.to_str()).unwrap_or("snap")));
    let out = servetune().arg("probe").arg("--root").arg(dir.path()).arg("--json").arg(&beside).arg("-q").output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_file(&beside);
    let out = servetune().arg("probe").arg("--capture").arg(dir.path()).output().expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the folder is not empty"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&nvml).expect("kept"), before);
}

/// A `--json` that is a link into the snapshot (made by `--root` or `--capture`) is refused, the
/// snapshot's nvml.json kept; so is a dangling link whose target would be made inside it.
#[test]
fn probe_json_that_is_a_symbolic_or_hard_link_into_the_snapshot_is_refused_and_the_snapshot_kept() {
    let dir = no_gpu_copy();
    let nvml = dir.path().join("nvml.json");
    let before = std::fs::read(&nvml).expect("nvml.json");
    let out_dir = tempfile::tempdir().expect("tmp");
    let link = out_dir.path().join("report.json");
    std::os::unix::fs::symlink(&nvml, &link).expect("symlink");
    let dangling = out_dir.path().join("new.json");
    std::os::unix::fs::symlink(dir.path().join("new-report.json"), &dangling).expect("symlink");
    for (flag, out) in [("--root", &link), ("--root", &dangling), ("--capture", &link)] {
        let o = servetune().arg("probe").arg(flag).arg(dir.path()).arg("-q").arg("--json").arg(out).output().expect("run");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flag} {}: {err}", out.display());
        assert!(err.contains("it is a link to") && err.contains("inside the snapshot folder"), "{err}");
        assert_eq!(std::fs::read(&nvml).expect("kept"), before);
    }
    assert!(!dir.path().join("new-report.json").exists(), "nothing written into the snapshot");
    // A hard link is another name of the same file.
    let hard = out_dir.path().join("hard.json");
    std::fs::hard_link(&nvml, &hard).expect("hard link");
    let o = servetune().arg("probe").arg("--root").arg(dir.path()).arg("-q").arg("--json").arg(&hard).output().expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("another name (a hard link) of the snapshot's") && err.contains("nvml.json"), "{err}");
    assert_eq!(std::fs::read(&nvml).expect("kept"), before);
}

#[test]
fn probe_json_that_is_a_directory_exits_2_before_probing() {
    let fx = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../probe/tests/fixtures/proxmox-kvm-8gpu");
    let out_dir = tempfile::tempdir().expect("tmp");
    let o = servetune().arg("probe").arg("--root").arg(&fx).arg("-q").arg("--json").arg(out_dir.path()).output().expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--json") && err.contains("is a directory; give a file path to write into"), "{err}");
}

#[test]
fn probe_capture_into_an_existing_file_says_it_is_a_file_not_a_folder() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("afile");
    std::fs::write(&file, "x\n").expect("write");
    let o = servetune().arg("probe").arg("--capture").arg(&file).arg("-q").output().expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("that is a file, not a folder; give a new or empty folder"), "{err}");
    assert_eq!(std::fs::read(&file).expect("kept"), b"x\n");
}
