//! The validation report as Markdown (what `plan --validate` prints and VALIDATION.md holds).

use super::*;

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn summary_line(name: &str, s: &SetSummary) -> String {
    format!(
        "| {name} | {} | {} | {} | {:+.1}% | {} of {} | {} (n={}) | {} (n={}) | {} (n={}) |\n",
        s.cases,
        pct(s.median_abs_error),
        pct(s.steady_median_abs_error),
        s.median_error * 100.0,
        s.over_predicted,
        s.cases,
        pct(s.measured_median_abs_error),
        s.measured_cases,
        pct(s.tpot_median_abs_error),
        s.tpot_cases,
        pct(s.ttft_median_abs_error),
        s.ttft_cases
    )
}

fn aic_lines(a: &AicComparison) -> String {
    let line = |name: &str, x: &crate::aic::SideBySide| {
        format!(
            "| {name} | {} of {} | {} | {} | {} of {} |\n",
            x.cases,
            x.scored,
            pct(x.aic_median_abs_error),
            pct(x.plan_median_abs_error),
            x.plan_closer,
            x.cases
        )
    };
    format!(
        "\n{} on the same cases (its `cli estimate`, offline; estimates in {}, made by scripts/aic-estimate):\n\n| set | cases it estimates | its median abs error | plan's on those cases | plan closer |\n|---|---:|---:|---:|---:|\n{}{}",
        a.tool,
        a.data,
        line("test", &a.test),
        line("fit", &a.fit)
    )
}

fn rows_table(v: &Validation, set: Set) -> String {
    let mut s = String::from(
        "| case | source | GPU | engine | c | running | measured tok/s | predicted tok/s | error | steady tok/s | steady error | TPOT meas / pred ms | TTFT meas / pred ms | AIConfigurator tok/s (error) |\n|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|\n",
    );
    for r in v.rows.iter().filter(|r| r.set == set) {
        let star = if r.measure == Measure::DerivedFromTtftTpot { "*" } else { "" };
        let tpot = r.tpot_measured_ms.map_or(format!("- / {:.1}", r.tpot_predicted_ms), |m| format!("{m:.1} / {:.1}", r.tpot_predicted_ms));
        let ttft = r.ttft_measured_ms.map_or(format!("- / {:.0}", r.ttft_predicted_ms), |m| format!("{m:.0} / {:.0}", r.ttft_predicted_ms));
        let aic = r.aic_predicted.zip(r.aic_error).map_or("-".to_string(), |(a, e)| format!("{a:.0} ({:+.1}%)", e * 100.0));
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {:.0}{star} | {:.0} | {:+.1}% | {:.0} | {:+.1}% | {tpot} | {ttft} | {aic} |\n",
            r.id,
            r.source_key,
            r.gpu,
            r.engine.name(),
            r.concurrency,
            r.running,
            r.measured,
            r.predicted,
            r.error * 100.0,
            r.predicted_steady,
            (r.predicted_steady - r.measured) / r.measured * 100.0
        );
    }
    s
}

fn set_name(set: Set) -> &'static str {
    match set {
        Set::Fit => "fit",
        Set::Test => "test",
        Set::Holdout => "holdout",
    }
}

/// The error by set and concurrency band.
pub fn bands_table(bands: &[BandSummary]) -> String {
    let mut s = String::from(
        "\nError by client concurrency band:\n\n| set | band | cases | median abs error | signed median | over-predicted |\n|---|---|---:|---:|---:|---:|\n",
    );
    for b in bands {
        s += &format!(
            "| {} | {} | {} | {} | {:+.1}% | {} of {} |\n",
            set_name(b.set),
            b.band.words(),
            b.cases,
            pct(b.median_abs_error),
            b.median_error * 100.0,
            b.over_predicted,
            b.cases
        );
    }
    s
}

/// The signed TPOT and TTFT errors by set, engine and band.
fn latency_table(bands: &[LatencyBand]) -> String {
    let mut s = String::from(
        "\nTPOT and TTFT by engine and concurrency band (signed medians, predicted / measured - 1, where the source gives them): a throughput can score well with a decode step too slow and a prefill too fast, which other lengths would not forgive.\n\n| set | engine | band | TPOT cases | TPOT signed | TTFT cases | TTFT signed |\n|---|---|---|---:|---:|---:|---:|\n",
    );
    let signed = |n: usize, x: f64| if n == 0 { "-".to_string() } else { format!("{:+.1}%", x * 100.0) };
    for b in bands {
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            set_name(b.set),
            b.engine.name(),
            b.band.words(),
            b.tpot_cases,
            signed(b.tpot_cases, b.tpot_median_error),
            b.ttft_cases,
            signed(b.ttft_cases, b.ttft_median_error)
        );
    }
    s
}

/// The error by set and family (GPU architecture x engine x model kind).
fn families_table(v: &Validation) -> String {
    let mut groups: std::collections::BTreeMap<(u8, String), (Set, Vec<f64>)> = std::collections::BTreeMap::new();
    for r in &v.rows {
        let family = crate::interval::row_family(r).map_or_else(|_| format!("{} x {} x ?", r.gpu, r.engine.name()), |f| f.words());
        groups.entry((r.set as u8, family)).or_insert_with(|| (r.set, Vec::new())).1.push(r.error);
    }
    let mut s = String::from("\nError by family (GPU architecture x engine x model kind):\n\n| set | family | cases | median abs error | signed median |\n|---|---|---:|---:|---:|\n");
    for ((_, family), (set, errors)) in groups {
        let abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
        s += &format!("| {} | {family} | {} | {} | {:+.1}% |\n", set_name(set), errors.len(), pct(median(&abs)), median(&errors) * 100.0);
    }
    s
}

/// `plan --validate --calibrated` as Markdown: raw and calibrated medians over the same rows, the
/// calibrated error by band, and the rows.
pub fn calibrated_markdown(v: &CalibratedValidation) -> String {
    let mut s = format!(
        "CALIBRATED on one concurrency ({}): each deployment calibrated on its lowest measured concurrency (`plan --calibrate` with that one point), scored at its others.\n\n| set | cases | deployments | raw median abs error | calibrated median abs error |\n|---|---:|---:|---:|---:|\n",
        v.data
    );
    for x in &v.sets {
        s += &format!(
            "| {} | {} | {} | {} | {} |\n",
            set_name(x.set),
            x.cases,
            x.deployments,
            pct(x.raw_median_abs_error),
            pct(x.calibrated_median_abs_error)
        );
    }
    s += &format!(
        "\n{} deployments measured at one concurrency only are not scored at another concurrency (their calibration still carries to the other deployments below).\n",
        v.single_point_deployments
    );
    s += &bands_table(&v.bands);
    s += "\nCALIBRATED on another deployment: each deployment's one-point calibration applied to every row of the other deployments its source measured of the same model, GPU type, engine, format and lengths (other plans, and in most of the data other GPU counts: `plan --calibrate` carries a calibration to every plan it prices). A case counts once per calibration applied to it; the same-GPU-count columns are the pairs that are another plan of the same box. The rows are in the JSON's `calibrated.other_plans`.\n\n| set | pairs | cases | calibrations | raw median abs error | calibrated median abs error | same GPU count: pairs | raw | calibrated |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for x in &v.other_plan_sets {
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            set_name(x.set),
            x.pairs,
            x.cases,
            x.calibrations,
            pct(x.raw_median_abs_error),
            pct(x.calibrated_median_abs_error),
            x.same_gpu_count_pairs,
            if x.same_gpu_count_pairs > 0 { pct(x.same_gpu_count_raw_median_abs_error) } else { "-".into() },
            if x.same_gpu_count_pairs > 0 { pct(x.same_gpu_count_calibrated_median_abs_error) } else { "-".into() }
        );
    }
    s += &calibrated_coverage_line(&v.interval_coverage);
    s += "\n| case | set | c | calibrated on (c) | measured tok/s | raw tok/s (error) | calibrated tok/s (error) |\n|---|---|---:|---|---:|---:|---:|\n";
    for r in &v.rows {
        s += &format!(
            "| {} | {} | {} | {} ({}) | {:.0} | {:.0} ({:+.1}%) | {:.0} ({:+.1}%) |\n",
            r.id,
            set_name(r.set),
            r.concurrency,
            r.calibrated_on,
            r.calibrated_on_concurrency,
            r.measured,
            r.raw_predicted,
            r.raw_error * 100.0,
            r.predicted,
            r.error * 100.0
        );
    }
    s
}

/// How often the calibrated intervals hold (`CalibratedCoverage`), in sample or out of it.
fn calibrated_coverage_line(c: &CalibratedCoverage) -> String {
    let t = crate::interval::committed();
    let (a, b) = (&t.calibrated.same_deployment, &t.calibrated.other_deployments);
    let span = |f: &crate::interval::CalibratedFigures| {
        format!(
            "{:.2}x to {:.2}x, the {} quantile of the errors' size either side, {} with each publication left out",
            f.figures.low,
            f.figures.high,
            pct(1.0 - 2.0 * f.tail),
            pct(f.cross_validated_coverage)
        )
    };
    format!(
        "\nCalibrated intervals (what `plan --calibrate` prints, every family pooled): {} of {} calibrated measurements ({}) fall inside the {} interval of a calibrated deployment ({}), {} below, {} above; {} of {} pairs ({}) inside the interval of a calibration carried to another deployment ({}), {} below, {} above. {}\n",
        c.same_deployment.inside,
        c.same_deployment.rows,
        pct(c.same_deployment.share()),
        pct(c.nominal),
        span(a),
        c.same_deployment.below,
        c.same_deployment.above,
        c.other_deployments.inside,
        c.other_deployments.rows,
        pct(c.other_deployments.share()),
        span(b),
        c.other_deployments.below,
        c.other_deployments.above,
        if c.out_of_sample {
            "Out of sample: the spans were computed from e2e.toml's test-set rows, none of these."
        } else {
            "Test-set rows, in sample: the spans are computed from them."
        }
    )
}

/// How often the printed intervals hold (`IntervalCoverage`), in sample or out of it.
fn coverage_line(c: &IntervalCoverage) -> String {
    format!(
        "\nIntervals: {} of {} measurements of today's releases ({}) fall inside the {} interval of their family that `plan` prints (crates/model/data/validation/intervals.json: the {} and {} quantiles of measured / predicted, the narrowest whose leave-one-publication-out coverage on the test set reaches {}: {}); {} below it (over-predicted past it), {} above. {}\n",
        c.inside,
        c.rows,
        pct(c.share()),
        pct(c.nominal),
        pct(c.tail),
        pct(1.0 - c.tail),
        pct(c.nominal),
        pct(c.cross_validated),
        c.below,
        c.above,
        if c.out_of_sample {
            "Out of sample: the table was computed from e2e.toml's test-set rows, none of these."
        } else {
            "Test-set rows, in sample: the table is computed from them, so this checks the table, not the intervals' worth on new deployments (the frozen holdout's figure is that)."
        }
    )
}

/// The report as Markdown (what `plan --validate` prints and VALIDATION.md holds).
pub fn markdown(v: &Validation) -> String {
    let scored = v.rows.len();
    let by = match v.predicted_by {
        PredictedBy::VirtualRun => "each case's benchmark workload run through the simulator's engine in virtual time",
        PredictedBy::SteadyState => "the steady state (every request running, prefill amortized)",
    };
    let mut s = if v.holdout.cases > 0 {
        format!(
            "HEADLINE (frozen holdout): median absolute error of output tokens/s = {} over {} cases of {}, sources used nowhere else in the repository. Predicted: {by}. Every look at this score is logged in HOLDOUT.md.\n\n",
            pct(v.holdout.median_abs_error),
            v.holdout.cases,
            v.data
        )
    } else {
        format!(
            "HEADLINE (test set): median absolute error of output tokens/s = {} over {} held-out cases of {}. Predicted: {by}; the steady state alone misses the same test cases by a median of {}.\n\n",
            pct(v.headline_test_median_abs_error),
            v.test.cases,
            v.data,
            pct(v.test.steady_median_abs_error)
        )
    };
    s += "| set | cases | median abs error | steady-state median | signed median | over-predicted | measured rate only | TPOT | TTFT |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (name, summary) in [("test", &v.test), ("fit", &v.fit), ("holdout", &v.holdout)] {
        if summary.cases > 0 {
            s += &summary_line(name, summary);
        }
    }
    s += &bands_table(&v.bands);
    s += &coverage_line(&v.interval_coverage);
    s += &latency_table(&v.latency_bands);
    s += &families_table(v);
    if v.aiconfigurator.test.scored + v.aiconfigurator.fit.scored > 0 {
        s += &aic_lines(&v.aiconfigurator);
    }
    s += &format!(
        "\nScored {scored} of {} cases; skipped {}:\n\n| reason | cases | first case | its detail |\n|---|---:|---|---|\n",
        v.total_cases,
        v.total_cases - scored
    );
    for k in &v.skipped {
        let detail: String = k.first_detail.chars().take(90).collect();
        s += &format!("| {} | {} | {} | {} |\n", k.words, k.count, k.first_id, detail.replace('|', "/"));
    }
    s += "\nRates marked * are derived from the source's TTFT and TPOT: c x output_len / (TTFT + (output_len - 1) x TPOT).\n";
    if v.predicted_by == PredictedBy::VirtualRun {
        s += "Predicted rates are what the case's benchmark would measure: its workload (the stated prompt count, else 10 x concurrency; InferenceX cases draw lengths from [0.8 L, L]) run in virtual time; a * row applies the same derivation to the predicted mean TTFT and TPOT. Steady: every request running, prefill amortized.\n";
    }
    for (name, set) in [("Test set", Set::Test), ("Fit set", Set::Fit), ("Frozen holdout", Set::Holdout)] {
        if v.rows.iter().any(|r| r.set == set) {
            s += &format!("\n### {name}\n\n");
            s += &rows_table(v, set);
        }
    }
    if let Some(c) = &v.calibrated {
        s += "\n";
        s += &calibrated_markdown(c);
    }
    s += "\n### Constants and where they were set\n\n| constant | value | set from |\n|---|---:|---|\n";
    for c in &v.constants {
        s += &format!("| {} | {} | {} |\n", c.name, (c.value * 1000.0).round() / 1000.0, c.set_from);
    }
    s
}
