//! `servetune fabric` on this machine (no GPU): host copies for real, GPU commands refusing cleanly,
//! the simulated backend end to end, and `plan --fabric`.

use crate::common::run;

#[test]
fn host_copies_are_measured_for_real() {
    let (code, out, err) = run(&["fabric", "host", "--min-size", "1K", "--max-size", "64M"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("host copy: memory on node 0 copied by node 0"), "{out}");
    assert!(out.contains("64 MiB"), "{out}");
}

#[test]
fn gpu_commands_without_a_driver_exit_1_naming_the_search() {
    if std::path::Path::new("/dev/nvidiactl").exists() {
        return; // a GPU machine
    }
    for cmd in ["p2p", "allreduce"] {
        let (code, _, err) = run(&["fabric", cmd]);
        assert_eq!(code, 1, "{cmd}: {err}");
        assert!(err.contains("no NVIDIA driver found") && err.contains("libcuda.so.1"), "{cmd}: {err}");
    }
}

#[test]
fn bad_input_is_refused_with_exit_2() {
    for (args, needle) in [
        (vec!["fabric", "p2p", "--backend", "sim", "--min-size", "0"], "out of range"),
        (vec!["fabric", "p2p", "--backend", "sim", "--max-size", "4G"], "out of range"),
        (vec!["fabric", "p2p", "--backend", "sim", "--sim-gpus", "2", "--gpus", "0,3"], "GPU 3 does not exist"),
        (vec!["fabric", "allreduce", "--backend", "sim", "--env", "NCCL_ALGO"], "has no '='"),
        (vec!["fabric", "allreduce", "--backend", "sim", "--sim-gpus", "2", "--gpus", "7"], "GPU 7 does not exist"),
        (vec!["fabric", "allreduce", "--backend", "sim", "--sim-gpus", "2", "--gpus", "0,0"], "GPU 0 is named twice"),
        (vec!["fabric", "p2p", "--backend", "sim", "--sim-gpus", "4", "--gpus", "0,1,0"], "GPU 0 is named twice"),
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: want {needle:?} in {err}");
    }
}

#[test]
fn simulated_p2p_feeds_plan_fabric() {
    let dir = tempfile::tempdir().expect("tmp");
    let j = dir.path().join("f.json");
    let js = j.to_string_lossy().to_string();
    let (code, out, err) =
        run(&["fabric", "p2p", "--backend", "sim", "--sim-gpus", "8", "--sim-link", "pcie5-p2p", "--verify", "--json", &js]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Unidirectional P2P=Enabled Bandwidth Matrix"), "{out}");
    assert!(out.contains("verify 0 -> 1: data delivered"), "{out}");
    let (code, out, err) = run(&[
        "plan",
        "--model",
        "glm-5",
        "--quant",
        "nvfp4",
        "--gpu",
        "rtx-pro-6000-se",
        "--gpus",
        "8",
        "--fabric",
        &js,
        "--concurrency",
        "1,64",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("link measured-p2p"), "{out}");
    assert!(out.contains("alpha 1.0 us, beta 50.0 GB/s"), "{out}");
}

#[test]
fn simulated_allreduce_compares_settings() {
    let (code, out, err) =
        run(&["fabric", "allreduce", "--backend", "sim", "--sim-link", "pcie5-p2p", "--env", "NCCL_P2P_DISABLE=1", "--max-size", "1M"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("all-reduce, 8 ranks, out of place, defaults"), "{out}");
    assert!(out.contains("all-reduce, 8 ranks, out of place, NCCL_P2P_DISABLE=1"), "{out}");
    assert!(out.contains("transports: via SHM/direct/direct"), "{out}");
}

#[test]
fn plan_fabric_without_a_link_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let j = dir.path().join("one.json");
    let js = j.to_string_lossy().to_string();
    let (code, _, err) = run(&["fabric", "p2p", "--backend", "sim", "--sim-gpus", "1", "--json", &js]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(&["plan", "--model", "glm-5", "--gpu", "b200", "--fabric", &js]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no link profile"), "{err}");
}

#[test]
fn fabric_to_a_full_device_exits_1_instead_of_0_with_nothing_written() {
    let base = ["fabric", "p2p", "--backend", "sim", "--sim-gpus", "2", "--max-size", "1M"];
    for extra in [&[][..], &["--json", "-"]] {
        let args = [&base[..], extra].concat();
        let (code, err) = crate::probe::to_a_full_device(&args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains("error: cannot write the report to stdout (No space left on device"), "{args:?}: {err}");
    }
}

#[test]
fn zero_iterations_or_slurm_nodes_exit_2_naming_the_flag() {
    for args in [&["fabric", "p2p", "--backend", "sim", "--iters", "0"][..], &["fabric", "allreduce", "--backend", "sim", "--iters", "0"]] {
        let (code, _, err) = run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("--iters"), "{args:?}: {err}");
    }
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    let dir = dir.to_string_lossy();
    for (flag, value) in [("--nodes", "0"), ("--queue-timeout", "0s"), ("--ready-timeout", "500ms")] {
        let init = ["campaign", "init", &dir, "--engine", "sim", "--model", "glm-5", "--goal", "output_tok_s>=1", "--executor", "slurm"];
        let (code, _, err) = run(&[&init[..], &[flag, value]].concat());
        assert_eq!(code, 2, "{flag} {value}: {err}");
        assert!(err.contains(flag), "{flag} {value}: {err}");
    }
}
