//! The timing, statistics, fitting and output logic of servetune-fabric, run through the simulated
//! backend (devices with configured alpha/beta).

use servetune_fabric::host::{HostPair, HostPoint};
use servetune_fabric::measure::{self, P2pOptions};
use servetune_fabric::report::{self, FabricReport, GpuTransfers};
use servetune_fabric::sim::{SimAllReduce, SimFabric};
use servetune_fabric::{sizes, CopyMode, EnvSetting, FabricError, HostTransfers};

fn sweep(f: &mut SimFabric, gpus: Vec<usize>, verify: bool) -> Result<FabricReport, FabricError> {
    let o = P2pOptions { gpus, sizes: sizes(4, 256 << 20)?, iters: 100, verify };
    let mut calls = 0;
    let r = measure::p2p(f, &o, &mut |done, total| {
        calls += 1;
        assert!(done <= total);
    })?;
    assert!(calls > 0, "progress is reported");
    Ok(report::p2p_report(r))
}

#[test]
fn host_staged_fabric_fits_the_reference_alpha_and_beta() {
    let mut f = SimFabric::new(4, "pcie-host-staged").expect("sim");
    let r = sweep(&mut f, vec![], false).expect("sweep");
    let l = r.link.expect("link");
    assert_eq!(l.mode, CopyMode::HostStaged);
    assert!((l.alpha_us - 13.3).abs() < 0.01, "{}", l.alpha_us);
    assert!((l.beta_gbs - 29.4).abs() < 0.01, "{}", l.beta_gbs);
    // 4 GPUs: 3 bandwidth matrices x 2 modes... 4 bandwidth + 2 latency, each 4 x 4.
    assert_eq!(r.matrices.len(), 6);
    assert!(r.matrices.iter().all(|m| m.values.len() == 4 && m.values.iter().all(|row| row.len() == 4)));
    // Without peer access the "P2P=Enabled" latency equals the staged one (the driver stages).
    let lat_en = r.matrices.iter().find(|m| m.title.starts_with("P2P=Enabled Latency")).expect("latency");
    let lat_dis = r.matrices.iter().find(|m| m.title.starts_with("P2P=Disabled Latency")).expect("latency");
    assert_eq!(lat_en.values[0][1], lat_dis.values[0][1]);
}

#[test]
fn p2p_fabric_fits_the_p2p_link_and_bidirectional_doubles_bandwidth() {
    let mut f = SimFabric::new(2, "pcie5-p2p").expect("sim");
    let r = sweep(&mut f, vec![], true).expect("sweep");
    let l = r.link.expect("link");
    assert_eq!(l.mode, CopyMode::P2p);
    // The model's catalog (crates/model/data/links.json): pcie5-p2p is 1.0 us and 50 GB/s.
    assert!((l.alpha_us - 1.0).abs() < 0.01 && (l.beta_gbs - 50.0).abs() < 0.05, "{l:?}");
    let uni = r.matrices.iter().find(|m| m.title.starts_with("Unidirectional P2P=Enabled")).expect("uni").values[0][1].expect("value");
    let bi = r.matrices.iter().find(|m| m.title.starts_with("Bidirectional P2P=Enabled")).expect("bi").values[0][1].expect("value");
    assert!((bi / uni - 2.0).abs() < 0.01, "full duplex: {bi} vs {uni}");
    assert_eq!(r.p2p.as_ref().map(|p| p.verify.len()), Some(2));
}

#[test]
fn verification_catches_p2p_that_drops_data_and_the_link_falls_back() {
    let mut f = SimFabric::new(2, "pcie5-p2p").expect("sim");
    f.p2p_drops_data = true;
    let r = sweep(&mut f, vec![], true).expect("sweep");
    assert!(r.notes.iter().any(|n| n.contains("P2P DID NOT DELIVER DATA")), "{:?}", r.notes);
    assert_eq!(r.link.expect("link").mode, CopyMode::HostStaged, "lossy P2P is not what the model should assume");
}

#[test]
fn one_gpu_has_no_peer_and_no_link() {
    let mut f = SimFabric::new(1, "pcie5-p2p").expect("sim");
    let r = sweep(&mut f, vec![], true).expect("sweep");
    assert!(r.link.is_none());
    assert!(r.notes.iter().any(|n| n.contains("one GPU")), "{:?}", r.notes);
    let lat = r.matrices.iter().find(|m| m.title.contains("Latency")).expect("latency");
    assert!(lat.values[0][0].is_some(), "copies within the GPU are measured");
}

#[test]
fn gpu_indices_that_do_not_exist_are_refused() {
    let mut f = SimFabric::new(2, "nvlink").expect("sim");
    let e = sweep(&mut f, vec![0, 5], false).expect_err("bad index");
    assert!(matches!(e, FabricError::Input(_)) && e.to_string().contains("GPU 5 does not exist"), "{e}");
}

#[test]
fn noisy_measurements_still_fit_within_a_few_percent() {
    let mut f = SimFabric::new(2, "pcie-host-staged").expect("sim");
    f.noise = 0.02;
    let l = sweep(&mut f, vec![], false).expect("sweep").link.expect("link");
    assert!((l.alpha_us - 13.3).abs() / 13.3 < 0.05 && (l.beta_gbs - 29.4).abs() / 29.4 < 0.05, "{l:?}");
}

#[test]
fn allreduce_reports_nccl_tests_bus_bandwidth_and_env_comparisons() {
    let mut ar = SimAllReduce { fabric: SimFabric::new(8, "pcie5-p2p").expect("sim") };
    let envs = vec![vec![], vec![EnvSetting { name: "NCCL_P2P_DISABLE".into(), value: "1".into() }]];
    let sz: Vec<u64> = (3..=27).map(|p| 1u64 << p).collect();
    let runs = measure::allreduce(&mut ar, &[0, 1, 2, 3, 4, 5, 6, 7], &sz, 20, &envs).expect("runs");
    let r = report::allreduce_report("sim", &runs);
    assert_eq!(r.allreduce.len(), 2);
    let base = &r.allreduce[0];
    for row in &base.rows {
        assert!((row.busbw_gbs - row.algbw_gbs * 2.0 * 7.0 / 8.0).abs() < 1e-9);
    }
    // The plan's model of NCCL on the same catalog link, size by size, with the kernel's floor.
    let p2p = servetune_model::hw::link("pcie5-p2p").expect("link");
    let floor = servetune_model::predict::Engine::default().gemm_floor_us;
    for row in &base.rows {
        let want = servetune_model::comm::nccl(&p2p, 8, row.bytes as f64).us + floor;
        assert!((row.time_us - want).abs() < 1e-9, "{} B: {} against {want}", row.bytes, row.time_us);
    }
    assert_eq!(base.transports[0].transport, "via P2P/IPC");
    let off = &r.allreduce[1];
    assert_eq!(off.transports[0].transport, "via SHM/direct/direct");
    assert!(off.busbw_large_gbs < base.busbw_large_gbs);
    let mut text = Vec::new();
    report::write_terminal(&r, &mut text).expect("render");
    let text = String::from_utf8(text).expect("utf8");
    assert!(text.contains("all-reduce, 8 ranks, out of place, NCCL_P2P_DISABLE=1"), "{text}");
}

#[test]
fn env_without_equals_is_refused() {
    let e = measure::parse_env("NCCL_ALGO").expect_err("no =");
    assert!(e.to_string().contains("has no '='"), "{e}");
    assert_eq!(measure::parse_env("NCCL_ALGO=Tree").expect("ok"), EnvSetting { name: "NCCL_ALGO".into(), value: "Tree".into() });
}

#[test]
fn the_json_document_round_trips() {
    let mut f = SimFabric::new(2, "pcie-host-staged").expect("sim");
    let r = sweep(&mut f, vec![], false).expect("sweep");
    let text = serde_json::to_string(&r).expect("json");
    let back: FabricReport = serde_json::from_str(&text).expect("parse");
    assert_eq!(back, r);
    assert_eq!(back.schema, "servetune.fabric/1.1");
}

#[test]
fn serialized_pairs_points_and_fits_are_named_objects_not_arrays() {
    let mut f = SimFabric::new(2, "pcie5-p2p").expect("sim");
    let v = serde_json::to_value(sweep(&mut f, vec![], true).expect("sweep")).expect("json");
    let p2p = &v["p2p"];
    assert!(p2p["series"][0]["points"][0]["bytes"].is_u64() && p2p["series"][0]["points"][0]["seconds"].is_f64(), "{}", p2p["series"][0]);
    assert!(p2p["verify"][0]["delivered"].is_boolean(), "{}", p2p["verify"]);
    assert!(p2p["peer_access"][0]["src"].is_u64(), "{}", p2p["peer_access"]);
    let r = &v["pair_fits"][0]["fit"]["residuals"][0];
    for k in ["bytes", "measured_us", "fitted_us", "relative"] {
        assert!(!r[k].is_null(), "{k} in {r}");
    }
    let pairs = vec![HostPair { src_node: 0, dst_node: 0, pinned: true, points: host_points() }];
    let t = HostTransfers { pinned_h2d_gbs: 25.0, pinned_d2h_gbs: 26.0, pageable_h2d_gbs: 12.0, pageable_d2h_gbs: 10.0 };
    let h = serde_json::to_value(report::host_report(pairs, vec![GpuTransfers { gpu: 0, bandwidth: t }], vec![])).expect("json");
    assert_eq!(h["host"]["fits"][0]["src_node"], 0);
    assert!(h["host"]["fits"][0]["fit"]["beta_gbs"].is_f64(), "{}", h["host"]["fits"]);
    assert_eq!(h["host"]["gpu_transfers"][0]["bandwidth"]["pageable_d2h_gbs"], 10.0);
}

/// Host copies of a machine whose memory copies at 10 GB/s after 1 us.
fn host_points() -> Vec<HostPoint> {
    [64u64, 1 << 20, 16 << 20, 64 << 20]
        .iter()
        .map(|&bytes| {
            let time_us = 1.0 + bytes as f64 / 10e3;
            HostPoint { bytes, time_us, gbs: bytes as f64 / time_us / 1e3 }
        })
        .collect()
}

fn render(r: &FabricReport) -> String {
    let mut out = Vec::new();
    report::write_terminal(r, &mut out).expect("render");
    String::from_utf8(out).expect("utf8")
}

/// The terminal report of a P2P sweep over two simulated PCIe 5 GPUs, verified.
#[test]
fn terminal_report_of_a_p2p_sweep() {
    let mut f = SimFabric::new(2, "pcie5-p2p").expect("sim");
    let o = P2pOptions { gpus: vec![], sizes: sizes(4, 16 << 20).expect("sizes"), iters: 10, verify: true };
    let r = report::p2p_report(measure::p2p(&mut f, &o, &mut |_, _| {}).expect("sweep"));
    insta::assert_snapshot!(render(&r));
}

/// The terminal report of an all-reduce sweep with and without P2P.
#[test]
fn terminal_report_of_an_allreduce_comparison() {
    let mut ar = SimAllReduce { fabric: SimFabric::new(4, "pcie5-p2p").expect("sim") };
    let envs = vec![vec![], vec![EnvSetting { name: "NCCL_P2P_DISABLE".into(), value: "1".into() }]];
    let runs = measure::allreduce(&mut ar, &[0, 1, 2, 3], &sizes(8, 8 << 20).expect("sizes"), 5, &envs).expect("runs");
    insta::assert_snapshot!(render(&report::allreduce_report("sim", &runs)));
}

/// The terminal report of host copies (fixed measurements, so the snapshot does not depend on this machine).
#[test]
fn terminal_report_of_host_copies() {
    let pairs = vec![HostPair { src_node: 0, dst_node: 1, pinned: false, points: host_points() }];
    let t = HostTransfers { pinned_h2d_gbs: 25.0, pinned_d2h_gbs: 26.0, pageable_h2d_gbs: 12.0, pageable_d2h_gbs: 10.0 };
    let r = report::host_report(pairs, vec![GpuTransfers { gpu: 0, bandwidth: t }], vec!["one note".into()]);
    insta::assert_snapshot!(render(&r));
}

/// The simulator has no link table of its own: every `--sim-link` is the model's catalog entry.
#[test]
fn every_sim_link_has_the_model_catalog_alpha_and_beta() {
    for name in servetune_fabric::sim::SIM_LINKS {
        let f = SimFabric::new(2, name).expect("sim");
        let l = servetune_model::hw::link(name).expect("catalog");
        assert_eq!((f.p2p.alpha_us, f.p2p.beta_gbs), (l.alpha_us, l.beta_gbs), "{name}");
        assert_eq!(f.p2p.mode == CopyMode::HostStaged, name == &"pcie-host-staged", "{name}");
        assert!(f.p2p.source.contains("links.json"), "{}", f.p2p.source);
    }
    let staged = servetune_model::hw::link("pcie-host-staged").expect("catalog");
    let f = SimFabric::new(2, "nvlink").expect("sim");
    assert_eq!((f.staged.alpha_us, f.staged.beta_gbs), (staged.alpha_us, staged.beta_gbs));
    let e = SimFabric::new(2, "ib-ndr").expect_err("a network is no link within a node");
    assert!(e.to_string().contains("--sim-link \"ib-ndr\" is unknown"), "{e}");
}

/// `--iters 0` is refused where a sweep starts, not turned into some other count; 1 and 2 copies
/// are what the user asked for.
#[test]
fn zero_iterations_are_refused_and_few_are_kept() {
    let mut f = SimFabric::new(2, "pcie5-p2p").expect("sim");
    let o = P2pOptions { gpus: vec![], sizes: sizes(4, 1 << 20).expect("sizes"), iters: 0, verify: false };
    let e = measure::p2p(&mut f, &o, &mut |_, _| {}).expect_err("no copies");
    assert!(matches!(e, FabricError::Input(_)) && e.to_string().contains("--iters 0"), "{e}");
    let mut ar = SimAllReduce { fabric: f };
    let e = measure::allreduce(&mut ar, &[0, 1], &[1024], 0, &[vec![]]).expect_err("no all-reduces");
    assert!(e.to_string().contains("--iters 0"), "{e}");
    assert_eq!([1, 2, 3, 100].map(|m| measure::iters_for(4, m)), [1, 2, 3, 100]);
    assert_eq!(measure::iters_for(256 << 20, 100), 3, "large copies: at least 3 when --iters allows");
}
