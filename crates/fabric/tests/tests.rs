//! The timing, statistics, fitting and output logic of servetune-fabric, run through the simulated
//! backend (devices with configured alpha/beta).

use servetune_fabric::measure::{self, P2pOptions};
use servetune_fabric::report::{self, FabricReport};
use servetune_fabric::sim::{SimAllReduce, SimFabric};
use servetune_fabric::{sizes, CopyMode, FabricError};

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
    assert!((l.alpha_us - 0.5).abs() < 0.01 && (l.beta_gbs - 53.8).abs() < 0.05, "{l:?}");
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
    let envs = vec![vec![], vec![("NCCL_P2P_DISABLE".to_string(), "1".to_string())]];
    let sz: Vec<u64> = (3..=27).map(|p| 1u64 << p).collect();
    let runs = measure::allreduce(&mut ar, &[0, 1, 2, 3, 4, 5, 6, 7], &sz, 20, &envs).expect("runs");
    let r = report::allreduce_report("sim", &runs);
    assert_eq!(r.allreduce.len(), 2);
    let base = &r.allreduce[0];
    for row in &base.rows {
        assert!((row.busbw_gbs - row.algbw_gbs * 2.0 * 7.0 / 8.0).abs() < 1e-9);
    }
    // NCCL's own model: base 6.6 us + 2(n-1) hops.
    let f = base.fit.as_ref().expect("fit");
    assert!((f.alpha_us - (6.6 + 14.0 * 0.5)).abs() < 0.01, "{}", f.alpha_us);
    assert_eq!(base.transports[0].0, "via P2P/IPC");
    let off = &r.allreduce[1];
    assert_eq!(off.transports[0].0, "via SHM/direct/direct");
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
    assert_eq!(measure::parse_env("NCCL_ALGO=Tree").expect("ok"), ("NCCL_ALGO".into(), "Tree".into()));
}

#[test]
fn the_json_document_round_trips() {
    let mut f = SimFabric::new(2, "pcie-host-staged").expect("sim");
    let r = sweep(&mut f, vec![], false).expect("sweep");
    let text = serde_json::to_string(&r).expect("json");
    let back: FabricReport = serde_json::from_str(&text).expect("parse");
    assert_eq!(back, r);
    assert_eq!(back.schema, "servetune.fabric/1");
}
