use super::*;
use crate::quant::KvDtype;

/// What a validated sglang case runs its prefill with (its release, else its date).
fn sglang_prefill_graphs(version: &str, date: Option<&str>) -> bool {
    crate::predict::EngineRelease { name: EngineName::Sglang, version: Some(version.to_string()) }.prefill_graphs(date)
}

fn validation() -> Validation {
    run().expect("e2e.toml is part of the crate and parses")
}

#[test]
fn every_case_is_scored_or_skipped_with_a_reason() {
    let v = validation();
    let skipped: usize = v.skipped.iter().map(|k| k.count).sum();
    assert_eq!(v.rows.len() + skipped, v.total_cases);
    assert!(v.total_cases >= 190, "{}", v.total_cases);
}

#[test]
fn each_scored_test_case_has_a_finite_error_and_the_medians_come_from_its_rows() {
    let v = validation();
    let test: Vec<&Row> = v.rows.iter().filter(|r| r.set == Set::Test).collect();
    assert!(test.len() >= 20, "{} test rows", test.len());
    for r in &test {
        assert!(r.predicted.is_finite() && r.predicted > 0.0, "{}: {}", r.id, r.predicted);
        assert!(r.error.is_finite(), "{}: {}", r.id, r.error);
    }
    let abs: Vec<f64> = test.iter().map(|r| r.error.abs()).collect();
    let m = servetune_stats::median(&abs).expect("rows");
    assert_eq!(v.test.median_abs_error, m);
    assert_eq!(v.headline_test_median_abs_error, m);
    assert_eq!(v.test.cases, test.len());
}

#[test]
fn no_scored_case_is_at_or_above_its_running_cap_or_excluded() {
    let file: E2eFile = toml::from_str(E2E).expect("parses");
    let v = validation();
    for r in &v.rows {
        let c = file.case.iter().find(|c| c.id == r.id).expect("row comes from a case");
        assert_ne!(c.exclude, Some(true), "{}", r.id);
        assert!(c.max_concurrency.is_some(), "{}: offline runs are not scored", r.id);
        if let Some(cap) = c.max_running_requests {
            assert!(r.concurrency < cap, "{}: c={} cap {cap}", r.id, r.concurrency);
        }
        assert_eq!(c.set, r.set, "{}", r.id);
    }
}

#[test]
fn a_stated_kv_cache_format_is_read_and_an_unstated_one_is_what_the_engines_auto_gives() {
    let file: E2eFile = toml::from_str(E2E).expect("parses");
    let case = |id: &str| file.case.iter().find(|c| c.id == id).expect(id).clone();
    let kv = |c: &E2eCase| spec_of(c).map(|(s, _, _)| s.quant.kv_cache).map_err(|e| e.0);
    // vLLM's FP8-KV blog: the same MXFP4 checkpoint with each cache.
    assert_eq!(kv(&case("vllmfp8kv-gpt-oss-20b-h100-kvbf16-c8")), Ok(Some(KvDtype::Bf16)));
    assert_eq!(kv(&case("vllmfp8kv-gpt-oss-20b-h100-kvfp8-c8")), Ok(Some(KvDtype::Fp8)));
    assert_eq!(kv(&case("vllmfp8kv-llama31-8b-h100-kvfp8-c8")), Ok(Some(KvDtype::Fp8)));
    assert_eq!(
        (
            KvDtype::from_engine_name("FP8_E4M3"),
            KvDtype::from_engine_name("fp16"),
            KvDtype::from_engine_name("fp8 (bf16 in the sliding-window layers)")
        ),
        (Some(KvDtype::Fp8), Some(KvDtype::Bf16), None)
    );
    // Unstated, or `auto`: a public run of a block-FP8 checkpoint keeps the model's BF16; an
    // NVIDIA NVFP4 export declares FP8, which sglang takes, as vLLM does from 0.14.0 on.
    let mut c = file
        .case
        .iter()
        .find(|c| {
            c.kv_cache_dtype.is_none()
                && quant_of(&c.quantization) == Some(Dtype::Fp8)
                && !c.source_key.starts_with("aiconfigurator")
                && spec_of(c).is_ok()
        })
        .expect("a scored public FP8 case without a stated cache")
        .clone();
    c.model = "deepseek-ai/DeepSeek-R1".into();
    c.engine = EngineName::Sglang;
    assert_eq!(kv(&c), Ok(Some(KvDtype::Bf16)));
    c.kv_cache_dtype = Some("auto".into());
    assert_eq!(kv(&c), Ok(Some(KvDtype::Bf16)), "auto is the engine's default, as if unstated");
    // An NVIDIA ModelOpt export declares an FP8 cache; so does a Quark export named for its KV
    // scales.
    for id in ["nvidia/Llama-3.3-70B-Instruct-FP8", "amd/Llama-3.3-70B-Instruct-FP8-KV"] {
        assert_eq!(declared_kv(&E2eCase { model: id.into(), ..c.clone() }, Dtype::Fp8), KvDtype::Fp8, "{id}");
    }
    assert_eq!(declared_kv(&c, Dtype::Nvfp4), KvDtype::Fp8, "an NVFP4 checkpoint declares FP8");
    c.quantization = "nvfp4".into();
    c.engine = EngineName::Vllm;
    c.engine_version = Some("0.13.0".into());
    assert_eq!(kv(&c), Ok(Some(KvDtype::Bf16)), "vLLM before 0.14.0 kept BF16 under auto");
    c.engine_version = Some("0.14.0".into());
    assert_eq!(kv(&c), Ok(Some(KvDtype::Fp8)));
    // AIConfigurator's silicon rows of FP8 and NVFP4 checkpoints ran with the FP8 cache it gives them.
    let aic = file
        .case
        .iter()
        .find(|c| {
            c.source_key.starts_with("aiconfigurator-silicon")
                && c.engine == EngineName::Sglang
                && quant_of(&c.quantization) == Some(Dtype::Fp8)
                && spec_of(c).is_ok()
        })
        .expect("an AIConfigurator sglang FP8 row");
    assert_eq!(kv(aic), Ok(Some(KvDtype::Fp8)));
    let not_nvidia = E2eCase { model: "Qwen/Qwen3-32B".into(), ..aic.clone() };
    assert_eq!(declared_kv(&not_nvidia, Dtype::Int4), KvDtype::Bf16, "only its FP8 and NVFP4 rows");
}

#[test]
fn the_cases_that_set_the_defaults_are_in_the_fit_set() {
    let v = validation();
    let ix: Vec<&Row> = v.rows.iter().filter(|r| r.source_key == "inferencex-issue-870").collect();
    assert_eq!(ix.len(), 4);
    assert!(ix.iter().all(|r| r.set == Set::Fit));
    assert!(v.constants.iter().any(|c| c.name.starts_with("kernel_overhead_us") && c.set_from.starts_with("fit: ")));
}

/// The defaults minimize the FIT set's source-weighted median |error| ([`fit_objective`]) over their grid neighbourhood (the search
/// that chose them, [`refit_on_the_fit_set`], spans kernel_overhead_us 0.5..8.0 by 0.1 and
/// moe_efficiency 0.30..0.80 by 0.05); the test set plays no part.
#[test]
fn the_fitted_defaults_minimize_the_fit_median_among_their_grid_neighbours() {
    let d = Engine::default();
    assert_eq!(d.gemm_floor_us, d.kernel_overhead_us, "the netted GEMM floor is the fitted per-kernel floor");
    let at_default = fit_objective(&run_with(&d).expect("runs")).expect("fit rows");
    for o in -2..=2 {
        for m in -2..=2 {
            for r in -1..=1 {
                let floor = d.kernel_overhead_us + 0.1 * o as f64;
                let e = Engine {
                    kernel_overhead_us: floor,
                    gemm_floor_us: floor,
                    moe_efficiency: d.moe_efficiency + 0.05 * m as f64,
                    request_step_us: d.request_step_us + 2.5 * r as f64,
                    ..d
                };
                let fit = fit_objective(&run_with(&e).expect("runs")).expect("fit rows");
                assert!(
                    at_default <= fit + 1e-12,
                    "kernel overhead {} moe {} per-request {}: fit {fit} < {at_default}",
                    e.kernel_overhead_us,
                    e.moe_efficiency,
                    e.request_step_us
                );
            }
        }
    }
}

/// `ep_imbalance` is the fit objective's minimum against its grid neighbour (1.05; below 1.0 the
/// busiest EP rank would read fewer experts than the mean), the search
/// [`ep_imbalance_scan_on_the_fit_set`] prints; the test set plays no part.
#[test]
fn the_ep_imbalance_minimizes_the_fit_objective_against_its_grid_neighbour() {
    let d = Engine::default();
    assert_eq!(d.ep_imbalance, 1.0);
    let at_default = fit_objective(&run_with(&d).expect("runs")).expect("fit rows");
    let above = fit_objective(&run_with(&Engine { ep_imbalance: d.ep_imbalance + 0.05, ..d }).expect("runs")).expect("fit rows");
    assert!(at_default <= above + 1e-12, "ep_imbalance 1.05: fit {above} < {at_default}");
}

/// The refit itself (run by hand: `cargo test -p servetune-model --lib -- --ignored
/// refit_on_the_fit_set --nocapture`): every point of the documented grid (kernel_overhead_us
/// 0.5..8.0 by 0.1, moe_efficiency 0.30..0.80 by 0.05), scored on the FIT set only; it prints
/// the argmin (the first of equal medians, overhead-major order), and how flat the minimum is:
/// the grid points whose fit median is within 0.1 percentage point of it and the ranges they
/// span (a wide range means a small change elsewhere can move the argmin far).
#[test]
#[ignore]
fn refit_on_the_fit_set() {
    let d = Engine::default();
    let mut grid = Vec::new();
    for i in 0..=75 {
        for j in 0..=10 {
            let (o, m) = (0.5 + 0.1 * i as f64, 0.30 + 0.05 * j as f64);
            let f = fit_objective(&run_with(&Engine { kernel_overhead_us: o, gemm_floor_us: o, moe_efficiency: m, ..d }).expect("runs"))
                .expect("fit rows");
            grid.push((f, o, m));
        }
    }
    let best = grid.iter().fold((f64::INFINITY, 0.0, 0.0), |b, g| if g.0 < b.0 - 1e-12 { *g } else { b });
    let (f, o, m) = best;
    println!("fit argmin: kernel_overhead_us {o:.1}, moe_efficiency {m:.2}, fit median {f:.4}");
    let near: Vec<_> = grid.iter().filter(|g| g.0 <= f + 0.001).collect();
    let span =
        |k: fn(&&(f64, f64, f64)) -> f64| near.iter().map(k).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let ((olo, ohi), (mlo, mhi)) = (span(|g| g.1), span(|g| g.2));
    println!(
        "within 0.1 point of it: {} of {} grid points, kernel_overhead_us {olo:.1}..{ohi:.1}, moe_efficiency {mlo:.2}..{mhi:.2}",
        near.len(),
        grid.len()
    );
}

/// The scan that chose [`Engine::request_step_us`] (run by hand: `cargo test -p
/// servetune-model --lib -- --ignored request_step_scan_on_the_fit_set --nocapture`): for each
/// per-request cost from 0 to 40 us by 2.5, the best fit objective over the per-kernel floor
/// (+-1.0 us by 0.1 around the default) and the MoE efficiency (+-0.15 by 0.05), with the
/// plain fit median and signed median at that point; FIT set only (VALIDATION.md, step 22).
#[test]
#[ignore]
fn request_step_scan_on_the_fit_set() {
    let d = Engine::default();
    for r in (0..=16).map(|i| 2.5 * i as f64) {
        let mut best = (f64::INFINITY, 0.0, 0.0);
        for i in -10..=10 {
            for j in -3..=3 {
                let o = d.kernel_overhead_us + 0.1 * i as f64;
                let m = d.moe_efficiency + 0.05 * j as f64;
                let e = Engine { kernel_overhead_us: o, gemm_floor_us: o, moe_efficiency: m, request_step_us: r, ..d };
                let f = fit_objective(&run_with(&e).expect("runs")).expect("fit");
                if f < best.0 {
                    best = (f, o, m);
                }
            }
        }
        let e = Engine { kernel_overhead_us: best.1, gemm_floor_us: best.1, moe_efficiency: best.2, request_step_us: r, ..d };
        let v = run_with(&e).expect("runs");
        let fit = summary(&v.rows, Set::Fit);
        println!(
            "request_step_us {r}: fit objective {:.4} at overhead {:.1} moe {:.2}; fit median {:.4} signed {:.4}",
            best.0, best.1, best.2, fit.median_abs_error, fit.median_error
        );
    }
}

/// The fit rows on AMD CDNA 3 GPUs (MI300X, MI325X): the only rows
/// [`Engine::cdna3_floor_scale`] moves.
fn cdna3_fit_errors(v: &Validation) -> Vec<f64> {
    let cdna3 = |gpu: &str| crate::hw::gpu(gpu).is_ok_and(|g| g.arch == crate::hw::Arch::Cdna3);
    v.rows.iter().filter(|r| r.set == Set::Fit && !r.early_release && cdna3(&r.gpu)).map(|r| r.error).collect()
}

/// The CDNA 3 floor scale is the argmin of the median |error| of the FIT set's CDNA 3 rows over
/// its grid neighbours (0.1 apart), the search [`cdna3_floor_scan_on_the_fit_set`] prints;
/// the test set plays no part, and no other row moves with it.
#[test]
fn the_cdna3_floor_scale_minimizes_its_fit_rows_median_among_its_grid_neighbours() {
    let d = Engine::default();
    let objective = |v: &Validation| {
        let errors: Vec<f64> = cdna3_fit_errors(v).iter().map(|e| e.abs()).collect();
        assert!(!errors.is_empty(), "CDNA 3 fit rows");
        servetune_stats::median(&errors).expect("rows")
    };
    let at_scale = |scale: f64| run_with(&Engine { cdna3_floor_scale: scale, ..d }).expect("runs");
    let fitted = run_with(&d).expect("runs");
    let at = objective(&fitted);
    for step in [-0.1, 0.1] {
        assert!(at <= objective(&at_scale(d.cdna3_floor_scale + step)) + 1e-12, "scale {}", d.cdna3_floor_scale + step);
    }
    let one = at_scale(1.0);
    assert_eq!(one.rows.len(), fitted.rows.len());
    for (a, b) in one.rows.iter().zip(&fitted.rows) {
        assert_eq!(a.id, b.id);
        if crate::hw::gpu(&a.gpu).is_ok_and(|g| g.arch == crate::hw::Arch::Cdna3) {
            assert!(b.predicted < a.predicted, "{}: a CDNA 3 row slows with the scaled floor", a.id);
        } else {
            assert_eq!(a.predicted, b.predicted, "{} is not CDNA 3 and must not move", a.id);
        }
    }
}

/// The CDNA 3 floor scale scanned on the FIT set's CDNA 3 rows by hand
/// (`cargo test -p servetune-model --lib -- --ignored cdna3_floor_scan_on_the_fit_set
/// --nocapture`): 1.0..6.0 by 0.1, printing each row's error and the rows' median |error|.
#[test]
#[ignore]
fn cdna3_floor_scan_on_the_fit_set() {
    let d = Engine::default();
    for i in 0..=50 {
        let scale = 1.0 + 0.1 * i as f64;
        let v = run_with(&Engine { cdna3_floor_scale: scale, ..d }).expect("runs");
        let errors = cdna3_fit_errors(&v);
        let abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
        let med = servetune_stats::median(&abs).unwrap_or(f64::NAN);
        let each: Vec<String> = errors.iter().map(|e| format!("{:+.1}%", e * 100.0)).collect();
        println!("scale {scale:.1}: median |error| {:.1}%  rows {}", med * 100.0, each.join(" "));
    }
}

/// The launch cost of an eager prefill step (`launch_us`), scanned on the FIT set by hand
/// (`cargo test -p servetune-model --lib -- --ignored launch_scan_on_the_fit_set --nocapture`):
/// 0..12 us by 1 at the fitted floor and MoE efficiency, printing the objective of each.
#[test]
#[ignore]
fn launch_scan_on_the_fit_set() {
    let d = Engine::default();
    for i in 0..=12 {
        let e = Engine { launch_us: i as f64, ..d };
        let f = fit_objective(&run_with(&e).expect("runs")).expect("fit rows");
        println!("launch_us {i}: fit objective {f:.4}");
    }
}

/// The busiest EP rank's load over the mean (`ep_imbalance`), scanned on the FIT set by hand
/// (`cargo test -p servetune-model --lib -- --ignored ep_imbalance_scan_on_the_fit_set
/// --nocapture`): for each value from 1.0 (no excess; below it the busiest rank would read
/// less than the mean) to 1.3 by 0.05, the fit objective after the per-kernel floor, the MoE
/// efficiency and the per-request cost are refit from the defaults by [`refit_descent`] (step 23
/// searched a fixed grid around the defaults instead; step 36 ran this form under the router's
/// skew), with the fit median and the median |error| and signed error of the fit rows the
/// constant moves (EP > 1 with fewer distinct experts than a rank holds); FIT set only
/// (VALIDATION.md, steps 23 and 36).
#[test]
#[ignore]
fn ep_imbalance_scan_on_the_fit_set() {
    let d = Engine::default();
    let (lo, hi) =
        (run_with(&Engine { ep_imbalance: 1.0, ..d }).expect("runs"), run_with(&Engine { ep_imbalance: 1.4, ..d }).expect("runs"));
    let moves: Vec<bool> = lo
        .rows
        .iter()
        .zip(&hi.rows)
        .map(|(a, b)| a.set == Set::Fit && (a.predicted - b.predicted).abs() > 1e-9 * a.predicted.abs())
        .collect();
    for i in 0..=6 {
        let x = 1.0 + 0.05 * i as f64;
        let objective = |e: &Engine| fit_objective(&run_with(e).expect("runs")).expect("fit rows");
        let e = refit_descent(Engine { ep_imbalance: x, ..d }, [2, 2, 1], &objective, &mut |_, _| {});
        let best = (objective(&e), e);
        let (f, e) = best;
        let v = run_with(&e).expect("runs");
        let fit = summary(&v.rows, Set::Fit);
        let moved: Vec<f64> = v.rows.iter().zip(&moves).filter(|(_, m)| **m).map(|(r, _)| r.error).collect();
        let abs: Vec<f64> = moved.iter().map(|e| e.abs()).collect();
        println!(
            "ep_imbalance {x:.2}: fit objective {f:.4} at floor {:.1} us, moe {:.2}, per-request {:.1} us; fit median {:.4} signed {:.4}; the {} rows it moves: median |error| {:.4}, signed {:.4}",
            e.kernel_overhead_us,
            e.moe_efficiency,
            e.request_step_us,
            fit.median_abs_error,
            fit.median_error,
            moved.len(),
            servetune_stats::median(&abs).unwrap_or(f64::NAN),
            servetune_stats::median(&moved).unwrap_or(f64::NAN)
        );
    }
}

#[test]
fn a_rate_needing_more_prefill_than_the_gpus_peak_is_skipped_as_implausible() {
    let s = crate::predict::tests::scenario("llama-3.1-8b", Dtype::Fp8, "h200", "nvlink", 1, 1);
    // 2000-token prompts per 100 output tokens: 20 prompt tokens per output token, 2 x ~7e9
    // FLOPs each; the H200's dense FP8 peak allows about 7,000 output tokens/s.
    let s = Scenario { input_len: 2000, output_len: 100, ..s };
    let peak = s.gpu.tflops(s.quant.experts.compute()) * 1e12;
    let limit = peak / (20.0 * 2.0 * s.model.params().active_non_embedding);
    assert!(check_plausible(&s, limit * 0.9).is_ok());
    let (reason, detail) = check_plausible(&s, limit * 1.1).expect_err("above the peak");
    assert_eq!(reason, SkipReason::Implausible);
    assert!(detail.contains("PFLOP/s"), "{detail}");
}

/// The `added` dates of the dated extensions (e2e.toml's last sections), not run through
/// AIConfigurator.
const DATED_EXTENSIONS: [&str; 2] = ["2026-12-05", "2026-12-06"];

fn in_a_dated_extension(c: &E2eCase) -> bool {
    c.added.as_deref().is_some_and(|d| DATED_EXTENSIONS.contains(&d))
}

#[test]
fn every_scored_case_has_an_aiconfigurator_estimate_or_its_refusal() {
    let v = validation();
    let aic = crate::aic::estimates().expect("parses");
    let file: E2eFile = toml::from_str(E2E).expect("parses");
    let extension = |id: &str| {
        file.case.iter().any(|c| {
            c.id == id
                && ((c.set == Set::Fit && c.note.as_deref().is_some_and(|n| n.contains(FIT_EXTENSION_NOTE))) || in_a_dated_extension(c))
        })
    };
    let mut not_run = 0;
    for r in &v.rows {
        match aic.get(&r.id) {
            Some(e) => assert_eq!(r.aic_predicted, e.rate(), "{}", r.id),
            // The fit-set extension and the dated extensions of 2026-12-05 and 2026-12-06 were
            // not run through AIConfigurator: no figure, and only there.
            None => {
                assert!(extension(&r.id), "{}: no entry in {}", r.id, crate::aic::AIC_PATH);
                assert_eq!(r.aic_predicted, None, "{}", r.id);
                not_run += 1;
            }
        }
    }
    // Every test case from before the dated extension has its estimate (or AIConfigurator's refusal).
    let dated = |id: &str| file.case.iter().any(|c| c.id == id && in_a_dated_extension(c));
    assert!(not_run > 0 && v.rows.iter().filter(|r| r.set == Set::Test && !dated(&r.id)).all(|r| aic.contains_key(&r.id)));
    let with = |set: Set| v.rows.iter().filter(|r| r.set == set && r.aic_error.is_some()).count();
    assert_eq!((v.aiconfigurator.test.cases, v.aiconfigurator.fit.cases), (with(Set::Test), with(Set::Fit)));
}

#[test]
fn the_fit_objective_weighs_each_source_by_the_square_root_of_its_rows() {
    // Source a: four rows, each weighing 1 / sqrt(4) = 1/2, two in all; sources b and c: one row,
    // weighing 1. Against b alone, a's four rows outweigh b's one (2 to 1), where each source
    // weighing the same would tie them and give b's 5%. With c too, the two one-row sources
    // weigh as much as a (2 to 2) and the lower weighted median is theirs, where a plain median
    // over the six rows would give a's 30%.
    let mut v = validation();
    let template = v.rows.iter().find(|r| r.set == Set::Fit && !r.early_release).expect("a fit row").clone();
    let row = |source: &str, error: f64| Row { source_key: source.to_string(), error, ..template.clone() };
    let a = || vec![row("a", 0.3), row("a", -0.3), row("a", 0.3), row("a", 0.3)];
    v.rows = a().into_iter().chain([row("b", 0.05)]).collect();
    assert_eq!(fit_objective(&v), Some(0.3), "a's four rows outweigh b's one");
    v.rows = a().into_iter().chain([row("b", 0.05), row("c", -0.05)]).collect();
    assert_eq!(fit_objective(&v), Some(0.05), "two one-row sources weigh as much as a's four rows");
    v.rows.iter_mut().for_each(|r| r.set = Set::Test);
    assert_eq!(fit_objective(&v), None, "test rows never count");
}

#[test]
fn sglang_cases_run_prefill_eagerly_before_its_piecewise_graph_default() {
    assert!(!sglang_prefill_graphs("0.5.9 (image lmsysorg/sglang:v0.5.9-cu130)", Some("2026-03-20")));
    assert!(!sglang_prefill_graphs("0.5.7", None));
    assert!(sglang_prefill_graphs("0.5.10.post1 (image lmsysorg/sglang:v0.5.10.post1-cu130)", None));
    assert!(sglang_prefill_graphs("0.5.19 (lmsysorg/sglang-rocm:v0.5.19-rocm720-mi35x-20260913)", None));
    assert!(!sglang_prefill_graphs("nightly-dev-20260216-d3bae71e", None));
    assert!(sglang_prefill_graphs("nightly-dev (image lmsysorg/sglang:nightly-dev-cu13-20260317-1eea7448)", None));
    assert!(!sglang_prefill_graphs("", Some("2025-11-10")));
    assert!(sglang_prefill_graphs("glm5-hopper (image lmsysorg/sglang:glm5-hopper)", Some("2026-04-08")));
    assert_eq!(sglang_prefill_graphs("commit 947927bdb", None), EngineName::Sglang.graphs_prefill());
}

#[test]
fn free_text_formats_map_to_checkpoints() {
    assert_eq!(quant_of("nvfp4 (modelopt), fp8 kv cache"), Some(Dtype::Nvfp4));
    assert_eq!(quant_of("native (INT4 experts) with fp8 kv cache"), Some(Dtype::Int4));
    assert_eq!(quant_of("fp8 (bf16 kv cache on H200)"), Some(Dtype::Fp8));
    assert_eq!(quant_of("unstated"), None);
}

/// The fit set's P2P/no-P2P pairs the model can run: decode-only at no context (the benchmark's
/// decode rate at c, priced with one prompt token and two output tokens, as VALIDATION.md
/// reproduces it; pairs with speculative decoding are left out), each as (pair, measured gain, P2P scenario, host-staged scenario, c).
fn fit_pairs() -> Vec<(String, f64, Scenario, Scenario, u32)> {
    let file: E2eFile = toml::from_str(E2E).expect("parses");
    let mut out = Vec::new();
    let cases: Vec<&E2eCase> = file
        .case
        .iter()
        .filter(|c| c.set == Set::Fit && c.pair.is_some() && c.context_tokens == Some(0))
        .filter(|c| c.exclude_reason.as_deref().is_some_and(|r| r.starts_with("decode-only")))
        .collect();
    for p2p in cases.iter().filter(|c| c.interconnect == "pcie-p2p") {
        let Some(staged) = cases.iter().find(|c| c.pair == p2p.pair && c.interconnect == "pcie-no-p2p") else { continue };
        let build = |c: &E2eCase| -> Option<Scenario> {
            let (model, _) = model_of(c).ok()?;
            let gpu = hw::gpu(&c.gpu).ok()?;
            let mut s = ScenarioSpec::new(model, &c.gpu);
            s.gpus = c.gpu_count.unwrap_or(8);
            s.tp = c.tp;
            s.link = LinkSource::Catalog(link_of(&c.interconnect, &gpu)?);
            s.quant.checkpoint = quant_of(&c.quantization);
            (s.input_len, s.output_len) = (1, 2);
            s.mixed_prefill = true;
            s.engine = c.engine;
            s.build().ok()
        };
        let (Some(a), Some(b), Some(ma), Some(mb), Some(conc)) =
            (build(p2p), build(staged), p2p.output_tok_s, staged.output_tok_s, p2p.max_concurrency)
        else {
            continue;
        };
        out.push((p2p.pair.clone().unwrap_or_default(), ma / mb, a, b, conc));
    }
    out
}

/// The fit pairs' objective at a share: the median |predicted gain / measured gain - 1|.
fn pairs_objective(pairs: &[(String, f64, Scenario, Scenario, u32)], share: f64) -> f64 {
    crate::comm::with_shm_hop_share(share, || {
        let errors: Vec<f64> = pairs
            .iter()
            .map(|(_, measured, p2p, staged, c)| {
                let gain = p2p.point(*c).output_tokens_per_s / staged.point(*c).output_tokens_per_s;
                (gain / measured - 1.0).abs()
            })
            .collect();
        median(&errors)
    })
}

/// [`crate::comm::SHM_HOP_SHARE`] is the argmin of the fit pairs' objective on its 0.01 grid over
/// 0..1 (ties to the lower share); no test case and no goal takes part.
#[test]
fn shm_hop_share_minimizes_the_fit_pairs_objective() {
    let pairs = fit_pairs();
    assert!(!pairs.is_empty(), "the fit set holds a runnable P2P/no-P2P pair");
    let grid: Vec<f64> = (0..=100).map(|i| i as f64 / 100.0).collect();
    let best = grid.iter().copied().fold((f64::INFINITY, 0.0), |(lo, at), x| {
        let o = pairs_objective(&pairs, x);
        if o < lo - 1e-12 {
            (o, x)
        } else {
            (lo, at)
        }
    });
    assert!(
        (best.1 - crate::comm::SHM_HOP_SHARE).abs() < 0.005,
        "the fit pairs' objective is lowest at {} ({:.4}), not at SHM_HOP_SHARE = {}",
        best.1,
        best.0,
        crate::comm::SHM_HOP_SHARE
    );
}

/// Prints the scan [`shm_hop_share_minimizes_the_fit_pairs_objective`] checks.
#[test]
#[ignore]
fn shm_hop_share_scan_on_the_fit_pairs() {
    let pairs = fit_pairs();
    for (name, measured, ..) in &pairs {
        println!("pair {name}: measured gain {measured:.3}");
    }
    for i in 0..=50 {
        let x = i as f64 / 50.0;
        println!("share {x:.2}: objective {:.4}", pairs_objective(&pairs, x));
    }
}

/// SHA-256 of `data` (FIPS 180-4), for recomputing e2e.toml's split from its source keys.
fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be,
        0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa,
        0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85,
        0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
        0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
        0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    ];
    let mut h: [u32; 8] = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 64];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
        }
        let mut v = h;
        for i in 0..64 {
            let s1 = v[4].rotate_right(6) ^ v[4].rotate_right(11) ^ v[4].rotate_right(25);
            let ch = (v[4] & v[5]) ^ (!v[4] & v[6]);
            let t1 = v[7].wrapping_add(s1).wrapping_add(ch).wrapping_add(K[i]).wrapping_add(w[i]);
            let s0 = v[0].rotate_right(2) ^ v[0].rotate_right(13) ^ v[0].rotate_right(22);
            let maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
            let t2 = s0.wrapping_add(maj);
            v = [t1.wrapping_add(t2), v[0], v[1], v[2], v[3].wrapping_add(t1), v[4], v[5], v[6]];
        }
        for (a, b) in h.iter_mut().zip(v) {
            *a = a.wrapping_add(b);
        }
    }
    let mut out = [0u8; 32];
    for (i, x) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

#[test]
fn the_test_helper_sha256_matches_the_fips_vectors() {
    let hex = |d: [u8; 32]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(hex(sha256(b"abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_eq!(hex(sha256(b"")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    assert_eq!(
        hex(sha256(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
    );
}

/// e2e.toml's split rule, recomputed from the file: a case is "fit" exactly when the first 8 hex
/// digits of sha256(source_key) are 0 modulo 3, so no source straddles the sets.
#[test]
fn every_e2e_case_is_in_the_set_its_source_keys_hash_puts_it() {
    let file: E2eFile = toml::from_str(E2E).expect("parses");
    assert!(file.case.len() > 100);
    for c in &file.case {
        let d = sha256(c.source_key.as_bytes());
        let first8 = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
        let want = if first8.is_multiple_of(3) { Set::Fit } else { Set::Test };
        assert_eq!(c.set, want, "{} (source {})", c.id, c.source_key);
    }
}

/// The frozen holdout parses, every case says so and when it was added, and none of its sources
/// is one e2e.toml uses (no case is scored here: its score is looked at only through
/// `plan --validate --holdout`).
#[test]
fn the_holdout_is_frozen_dated_and_shares_no_source_with_e2e() {
    let holdout = Data::Holdout.cases().expect("holdout.toml parses");
    let e2e: E2eFile = toml::from_str(E2E).expect("parses");
    assert!(holdout.case.len() >= 60, "{} cases", holdout.case.len());
    let e2e_sources: std::collections::HashSet<&str> = e2e.case.iter().map(|c| c.source_key.as_str()).collect();
    let mut ids = std::collections::HashSet::new();
    for c in &holdout.case {
        assert_eq!(c.set, Set::Holdout, "{}", c.id);
        assert!(c.added.as_deref().is_some_and(|d| d.len() == 10 && d.starts_with("20")), "{}: no added date", c.id);
        assert!(!e2e_sources.contains(c.source_key.as_str()), "{}: source {} is in e2e.toml", c.id, c.source_key);
        assert!(ids.insert(c.id.as_str()), "{}: duplicate id", c.id);
    }
}

/// The early-release step scale ([`crate::predict::EARLY_RELEASE_STEP_SCALE`]) scanned on the
/// FIT set's early-release rows by hand (`cargo test -p servetune-model --lib -- --ignored
/// early_release_scan_on_the_fit_set --nocapture`): 1.0..4.0 by 0.05, printing the objective
/// ([`early_release_objective`]) of each and the argmin; the other rows do not move with it.
#[test]
#[ignore]
fn early_release_scan_on_the_fit_set() {
    let d = Engine::default();
    let mut best = (f64::INFINITY, 0.0);
    for i in 0..=60 {
        let k = 1.0 + 0.05 * i as f64;
        let f = early_release_objective(&run_with(&Engine { early_release_scale: k, ..d }).expect("runs")).expect("early fit rows");
        println!("early_release_scale {k:.2}: early objective {f:.4}");
        if f < best.0 - 1e-12 {
            best = (f, k);
        }
    }
    println!("argmin: {:.2} (objective {:.4})", best.1, best.0);
}

/// The early-release scale is the argmin of [`early_release_objective`] against its grid
/// neighbours (0.05 apart), as [`early_release_scan_on_the_fit_set`] chose it; it moves only the
/// early-release rows, so [`fit_objective`] does not see it.
#[test]
fn the_early_release_scale_minimizes_its_fit_rows_objective_and_moves_only_them() {
    let d = Engine::default();
    let at = |k: f64| run_with(&Engine { early_release_scale: k, ..d }).expect("runs");
    let fitted = at(d.early_release_scale);
    let f = early_release_objective(&fitted).expect("early fit rows");
    for step in [-0.05, 0.05] {
        let other = early_release_objective(&at(d.early_release_scale + step)).expect("rows");
        assert!(f <= other + 1e-12, "scale {}: {other} < {f}", d.early_release_scale + step);
    }
    let one = at(1.0);
    assert!(fitted.rows.iter().any(|r| r.early_release && r.set == Set::Fit));
    for (a, b) in one.rows.iter().zip(&fitted.rows) {
        assert_eq!(a.id, b.id);
        if !b.early_release {
            assert_eq!(a.predicted, b.predicted, "{} is not an early release and must not move", a.id);
        }
    }
    assert_eq!(fit_objective(&one), fit_objective(&fitted));
}

/// The joint refit of the round of 2026-12-05's second sitting, run again on 2026-12-06 after the
/// engines' KV-cache default (step 29: floor 5.3 -> 5.2 us, early scale 2.2 -> 2.15) and on the
/// third dated extension (step 30: floor 5.2 -> 4.9 us, per-request 40 -> 42.5 us, CDNA 3 scale
/// 1.8 -> 1.9) and under the square-root source weighting (step 31: floor 4.9 -> 5.0 us,
/// per-request 42.5 -> 45 us, early scale 2.15 -> 2.1) and on the fourth dated extension (step 33:
/// per-request 45 -> 40 us, objective 0.1070 -> 0.1069), under the kernel-derived router skew
/// (step 35: floor 6.0 -> 5.0 us, MoE efficiency 0.50 -> 0.45, per-request 35 -> 40 us) and with
/// the MXFP4 kernel rates (step 37: floor 5.0 -> 5.2 us, MoE efficiency 0.45 -> 0.55, per-request
/// 40 -> 35 us, CDNA 3 scale 1.8 -> 1.9, objective 0.1042 -> 0.1012) and with the embedding's
/// all-reduce and the logits' all-gather priced (step 43: nothing moved, objective 0.1008) (run
/// by hand: `cargo test -p
/// servetune-model --lib -- --ignored joint_refit_on_the_fit_set --nocapture`): from the
/// defaults, a descent over the grid of [`the_fitted_defaults_minimize_the_fit_median_among_their_grid_neighbours`]
/// (the per-kernel floor by 0.1 us, the MoE efficiency by 0.05, the per-request cost by 2.5 us)
/// to the best neighbour until none is better, then the CDNA 3 floor scale's argmin on its rows
/// (1.0..6.0 by 0.1), repeated until neither moves; then the early-release scale's argmin
/// (1.0..4.0 by 0.05). FIT set only; it prints each move and the result.
#[test]
#[ignore]
fn joint_refit_on_the_fit_set() {
    let objective = |e: &Engine| fit_objective(&run_with(e).expect("runs")).expect("fit rows");
    let cdna3 = |e: &Engine| {
        let errors: Vec<f64> = cdna3_fit_errors(&run_with(e).expect("runs")).iter().map(|x| x.abs()).collect();
        servetune_stats::median(&errors).expect("rows")
    };
    let mut e = Engine::default();
    for round in 0..20 {
        let start = e;
        e = refit_descent(e, [2, 2, 1], &objective, &mut |e, f| {
            println!(
                "round {round}: floor {:.1} moe {:.2} per-request {:.1}: objective {f:.4}",
                e.kernel_overhead_us, e.moe_efficiency, e.request_step_us
            )
        });
        let scales = (0..=50).map(|i| ((1.0 + 0.1 * i as f64) * 10.0).round() / 10.0);
        let (_, scale) = scales.map(|k| (cdna3(&Engine { cdna3_floor_scale: k, ..e }), k)).fold((f64::INFINITY, 0.0), |b, x| {
            if x.0 < b.0 - 1e-12 {
                x
            } else {
                b
            }
        });
        e.cdna3_floor_scale = scale;
        println!("round {round}: cdna3_floor_scale {scale:.1}");
        if e == start {
            break;
        }
    }
    let early = (0..=60).map(|i| ((1.0 + 0.05 * i as f64) * 100.0).round() / 100.0);
    let (f, k) = early
        .map(|k| (early_release_objective(&run_with(&Engine { early_release_scale: k, ..e }).expect("runs")).expect("rows"), k))
        .fold((f64::INFINITY, 0.0), |b, x| if x.0 < b.0 - 1e-12 { x } else { b });
    println!(
        "result: kernel_overhead_us {:.1}, moe_efficiency {:.2}, request_step_us {:.1}, cdna3_floor_scale {:.1}, fit objective {:.4}; early_release_scale {k:.2} (early objective {f:.4})",
        e.kernel_overhead_us,
        e.moe_efficiency,
        e.request_step_us,
        e.cdna3_floor_scale,
        objective(&e)
    );
}

/// The FIT set's steady-state errors by concurrency band, engine and source (run by hand: `cargo
/// test -p servetune-model --lib -- --ignored fit_set_by_band_and_source --nocapture`): where
/// the fitted model misses, read without the test set or the holdout.
#[test]
#[ignore]
fn fit_set_by_band_and_source() {
    let v = run_with(&Engine::default()).expect("runs");
    let mut by: std::collections::BTreeMap<(String, String), Vec<f64>> = Default::default();
    for r in v.rows.iter().filter(|r| r.set == Set::Fit && !r.early_release) {
        let band = format!("{:?}", super::Band::of(r.concurrency));
        by.entry((band.clone(), "ALL".into())).or_default().push(r.error);
        by.entry((band.clone(), format!("{:?}", r.engine))).or_default().push(r.error);
        by.entry((band, r.source_key.clone())).or_default().push(r.error);
    }
    for ((b, k), e) in by {
        let abs: Vec<f64> = e.iter().map(|x| x.abs()).collect();
        let m = |v: &[f64]| servetune_stats::median(v).unwrap_or(0.0);
        println!("{b:>8} {k:<40} n={:3} signed {:+.3} abs {:.3}", e.len(), m(&e), m(&abs));
    }
}

/// The per-request cost chosen per engine on the FIT set (run by hand: `cargo test -p
/// servetune-model --lib -- --ignored per_engine_request_step_scan_on_the_fit_set --nocapture`):
/// each engine's rows scored at 0..120 us by 5 with the other constants as they are, a
/// coordinate descent over the three engines on [`fit_objective`]. On 2026-12-05 (fifth sitting):
/// sglang 0, vLLM 50, TensorRT-LLM 30 us, objective 0.0900 -> 0.0845. Not adopted (VALIDATION.md,
/// fifth sitting): 0 us is no scheduler's cost; it absorbs the fit set's sglang rows (NVIDIA's
/// silicon runs on B200) being under-predicted at high concurrency, where public sglang runs were
/// reported over-predicted.
#[test]
#[ignore]
fn per_engine_request_step_scan_on_the_fit_set() {
    let d = Engine::default();
    let grid: Vec<f64> = (0..=24).map(|i| 5.0 * i as f64).collect();
    let runs: Vec<Validation> = grid.iter().map(|&r| run_with(&Engine { request_step_us: r, ..d }).expect("runs")).collect();
    let base = grid.iter().position(|&r| r == d.request_step_us).expect("default on grid");
    let mix = |pick: [usize; 3]| {
        let mut v = runs[base].clone();
        for (i, row) in v.rows.iter_mut().enumerate() {
            let k = EngineName::ALL.iter().position(|e| *e == row.engine).expect("an engine");
            *row = runs[pick[k]].rows[i].clone();
        }
        fit_objective(&v).expect("fit")
    };
    let mut pick = [base; 3];
    println!("start {:.4}", mix(pick));
    for _ in 0..5 {
        for k in 0..3 {
            let (mut best, mut arg) = (f64::INFINITY, pick[k]);
            for g in 0..grid.len() {
                let mut p = pick;
                p[k] = g;
                let f = mix(p);
                if f < best - 1e-12 {
                    (best, arg) = (f, g);
                }
            }
            pick[k] = arg;
        }
        println!("sglang {} vllm {} trtllm {}: {:.4}", grid[pick[0]], grid[pick[1]], grid[pick[2]], mix(pick));
    }
}

#[test]
fn latency_bands_split_tpot_and_ttft_by_set_engine_and_band_with_signs() {
    let template = validation().rows.into_iter().find(|r| r.set == Set::Fit).expect("a fit row");
    let row = |engine: EngineName, c: u32, tpot: Option<(f64, f64)>, ttft: Option<(f64, f64)>| Row {
        engine,
        concurrency: c,
        tpot_measured_ms: tpot.map(|t| t.0),
        tpot_predicted_ms: tpot.map_or(10.0, |t| t.1),
        ttft_measured_ms: ttft.map(|t| t.0),
        ttft_predicted_ms: ttft.map_or(100.0, |t| t.1),
        ..template.clone()
    };
    let rows = vec![
        // sglang at c = 64: decode predicted 20% slow, first token 10% early.
        row(EngineName::Sglang, 64, Some((10.0, 12.0)), Some((200.0, 180.0))),
        // vLLM at c = 4: TPOT only, 10% fast; and a row with neither, which makes no group.
        row(EngineName::Vllm, 4, Some((10.0, 9.0)), None),
        row(EngineName::Vllm, 32, None, None),
    ];
    let bands = super::latency_bands(&rows);
    assert_eq!(bands.len(), 2, "{bands:?}");
    let sglang = bands.iter().find(|b| b.engine == EngineName::Sglang).expect("sglang");
    assert_eq!((sglang.band, sglang.tpot_cases, sglang.ttft_cases), (super::Band::High, 1, 1));
    assert!((sglang.tpot_median_error - 0.2).abs() < 1e-12 && (sglang.ttft_median_error + 0.1).abs() < 1e-12);
    let vllm = bands.iter().find(|b| b.engine == EngineName::Vllm).expect("vllm");
    assert_eq!((vllm.band, vllm.tpot_cases, vllm.ttft_cases, vllm.ttft_median_error), (super::Band::Low, 1, 0, 0.0));
    assert!((vllm.tpot_median_error + 0.1).abs() < 1e-12);
    assert!(super::markdown(&Validation { latency_bands: bands, ..validation() })
        .contains("| fit | sglang | c >= 64 | 1 | +20.0% | 1 | -10.0% |"));
}

/// Step 34's experiment (run by hand; step 35 set the skew from kernel data instead, see
/// [`Engine::routing_skew`]: `cargo test --release -p servetune-model --lib -- --ignored
/// routing_skew_scan_on_the_fit_set --nocapture`): for each Zipf exponent of the router's expert
/// popularity, the refit of the per-kernel floor, the MoE efficiency and the per-request cost
/// from the defaults, and the fit objective it reaches; FIT set only.
#[test]
#[ignore]
fn routing_skew_scan_on_the_fit_set() {
    let objective = |e: &Engine| fit_objective(&run_with(e).expect("runs")).expect("fit rows");
    for s in (0..=28).map(|i| i as f64 * 0.05) {
        let e = refit_descent(Engine { routing_skew: s, ..Engine::default() }, [2, 2, 1], &objective, &mut |_, _| {});
        println!(
            "routing_skew {s:.2}: floor {:.1} moe {:.2} per-request {:.1}: fit objective {:.4}",
            e.kernel_overhead_us,
            e.moe_efficiency,
            e.request_step_us,
            objective(&e)
        );
    }
}

/// The validation's model table and the catalog agree: every e2e.toml or holdout.toml id that
/// `plan --model` also takes reads the same model in both, so a case scores the model a user
/// naming that repository gets. The name and the config's declared format aside: a case is priced
/// in its own `quantization`, a user in the format of the repository named (zai-org/GLM-5's
/// BF16 config against the catalog's FP8 one).
#[test]
fn the_validation_models_agree_with_the_catalog_on_every_id_both_name() {
    let mut both = 0;
    for (id, r, _) in MODELS.iter() {
        let Ok(named) = crate::spec::named_model(id) else { continue };
        both += 1;
        let source = match r {
            ModelRef::Catalog(name) => {
                assert_eq!(*name, named.entry.name, "{id}: the validation names another catalog entry than the one the id names");
                ModelSource::Catalog((*name).to_string())
            }
            ModelRef::Config(file) => {
                let (_, text) = CONFIGS.iter().find(|(f, _)| f == file).expect("an embedded config");
                ModelSource::Config { text: (*text).to_string(), path: (*file).to_string() }
            }
        };
        let mut scored = crate::request::ScenarioSpec::new(source, "h200").model_spec().expect("the validation's model");
        let planned = crate::spec::catalog(&named.entry.name).expect("the catalog's model");
        scored.name = planned.name.clone();
        scored.checkpoint = planned.checkpoint;
        assert_eq!(scored, planned, "{id}: validation and catalog read different models");
    }
    assert!(both >= 45, "{both} ids are in both tables");
}

/// The calibrated interval count takes e2e.toml's calibrated test rows in sample and every
/// calibrated holdout row out of sample, each in exactly one of inside, below and above.
#[test]
fn the_calibrated_interval_count_takes_the_test_rows_in_sample_and_the_holdouts_out_of_sample() {
    let e = run_calibrated(Data::E2e, &Engine::default(), None).expect("scores");
    let c = e.interval_coverage;
    assert!(!c.out_of_sample);
    assert_eq!(c.same_deployment.rows, e.rows.iter().filter(|r| r.set == Set::Test).count());
    assert_eq!(c.other_deployments.rows, e.other_plans.iter().filter(|o| o.row.set == Set::Test).count());
    let h = run_calibrated(Data::Holdout, &Engine::default(), None).expect("scores");
    let hc = h.interval_coverage;
    assert!(hc.out_of_sample && hc.same_deployment.rows == h.rows.len() && hc.same_deployment.rows > 0, "{hc:?}");
    for k in [c.same_deployment, c.other_deployments, hc.same_deployment, hc.other_deployments] {
        assert_eq!(k.inside + k.below + k.above, k.rows, "{k:?}");
    }
}

/// The interval count puts every counted row in exactly one of inside, below and above, counts
/// e2e.toml's test rows of today's releases in sample (the rows the table is computed from), and
/// every scored holdout row of today's releases out of sample.
#[test]
fn the_interval_count_takes_the_tables_rows_in_sample_and_the_holdouts_out_of_sample() {
    let v = validation();
    let c = v.interval_coverage;
    assert!(!c.out_of_sample && (c.nominal - 0.8).abs() < 1e-9, "{c:?}");
    assert_eq!(c.inside + c.below + c.above, c.rows);
    assert_eq!(c.rows, v.rows.iter().filter(|r| crate::interval::table_row(r)).count());
    assert!(c.rows > 100 && c.share() > 0.0 && c.share() < 1.0, "{c:?}");
    let h = run_holdout(&Engine::default(), None).expect("the holdout scores");
    let hc = h.interval_coverage;
    assert!(hc.out_of_sample, "{hc:?}");
    assert_eq!(hc.inside + hc.below + hc.above, hc.rows);
    assert_eq!(hc.rows, h.rows.iter().filter(|r| !r.early_release && r.predicted > 0.0 && r.measured > 0.0).count());
    assert!(hc.rows > 100, "{hc:?}");
}
