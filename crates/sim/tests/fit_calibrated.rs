//! Scans of the validation FIT set with virtual-time runs (`PlanBench`), which the model crate's
//! own scans cannot run. Run by hand: `cargo test -p servetune-sim --release --test sim
//! fit_calibrated -- --ignored --nocapture`. They print the fit set's figures only: the test set
//! and the holdout are never printed here.

use std::collections::BTreeMap;

use servetune_model::predict::Engine;
use servetune_model::validate::{self, Set};
use servetune_sim::from_plan::PlanBench;

fn median(v: &[f64]) -> f64 {
    servetune_stats::median(v).unwrap_or(0.0)
}

/// `plan --validate --calibrated`'s scoring of the fit set (each deployment calibrated on its
/// lowest concurrency, scored at the others, as a client would measure), by band and source.
#[test]
#[ignore]
fn calibrated_fit_set_with_virtual_runs() {
    let v = validate::run_calibrated(validate::Data::E2e, &Engine::default(), Some(&PlanBench)).expect("runs");
    for s in v.sets.iter().filter(|s| s.set == Set::Fit) {
        println!(
            "fit: {} rows, {} deployments: raw {:.4}, calibrated {:.4}",
            s.cases, s.deployments, s.raw_median_abs_error, s.calibrated_median_abs_error
        );
    }
    for b in v.bands.iter().filter(|b| b.set == Set::Fit) {
        println!("fit band {}: {} rows, median |error| {:.4}, signed {:+.4}", b.band.words(), b.cases, b.median_abs_error, b.median_error);
    }
    let mut by: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for r in v.rows.iter().filter(|r| r.set == Set::Fit) {
        by.entry(r.source_key.as_str()).or_default().push(r.error);
    }
    for (k, e) in by {
        let abs: Vec<f64> = e.iter().map(|x| x.abs()).collect();
        println!("  {k:<45} n={:3} signed {:+.3} abs {:.3}", e.len(), median(&e), median(&abs));
    }
}

/// The fit objective when the fitted constants are scored on what the client measures (the
/// virtual run, as `plan --validate` reports) rather than the steady state the refits use: a
/// descent over the per-kernel floor (0.1 us), the MoE efficiency (0.05) and the per-request cost
/// (2.5 us) to the best neighbour until none is better ([`validate::refit_descent`]). On
/// 2026-12-05 (fifth sitting): before the second dated extension 0.1147 at the defaults and
/// 0.1054 at floor 5.1 us, per-request 42.5 us; after it 0.1157 at the defaults and 0.1028 at
/// floor 5.2 us, per-request 32.5 us (the steady objective there 0.1000 against 0.0900): the
/// per-request cost moved opposite ways with eight more fit cases. Not adopted (VALIDATION.md,
/// fifth sitting).
#[test]
#[ignore]
fn virtual_run_refit_scan_on_the_fit_set() {
    let objective = |e: &Engine| validate::fit_objective(&validate::run_with_bench(e, Some(&PlanBench)).expect("runs")).expect("fit");
    let steady = |e: &Engine| validate::fit_objective(&validate::run_with(e).expect("runs")).expect("fit");
    let e = Engine::default();
    println!("defaults: virtual {:.4}, steady {:.4}", objective(&e), steady(&e));
    validate::refit_descent(e, [1, 1, 1], &objective, &mut |e, f| {
        println!(
            "floor {:.1} moe {:.2} per-request {:.1}: virtual {f:.4}, steady {:.4}",
            e.kernel_overhead_us,
            e.moe_efficiency,
            e.request_step_us,
            steady(e)
        )
    });
}
