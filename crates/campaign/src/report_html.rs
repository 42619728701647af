//! The HTML status report: one self-contained file (inline CSS and SVG, no script, no external
//! fetch) rendered from [`Report`], in the order a reader asks: where do we stand, what is done,
//! how to launch it, what is wrong, what was measured, and what next.

use std::io::{self, Write};

use crate::journal::TaskState;
use crate::report::Report;
use crate::report_svg::{
    self as svg, esc, BarChart, Callout, Group, Heatmap, LegendEntry, LineChart, Mark, Segment, Series, ValueHeatmap, PALETTE,
};

const CSS: &str = "body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1b1b1b;max-width:1180px;margin:0 auto;padding:24px}\
h1{font-size:26px;margin:0 0 4px}h2{font-size:20px;border-bottom:2px solid #0072b2;padding-bottom:3px;margin-top:32px}h3{font-size:16px;margin:20px 0 6px}\
.headline{font-size:17px;background:#eef5fb;border-left:5px solid #0072b2;padding:10px 14px}\
.counts{display:flex;gap:12px;margin:8px 0}.count{border:1px solid #ccc;border-radius:6px;padding:6px 14px;text-align:center}.count b{display:block;font-size:24px}\
table{border-collapse:collapse;width:100%;margin:8px 0}th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}\
td.n{text-align:right;font-variant-numeric:tabular-nums}pre{background:#f6f6f6;border:1px solid #ddd;padding:8px;white-space:pre-wrap;word-break:break-all;font-size:13px}\
.sev-warning,.sev-error,.sev-critical{color:#b00020;font-weight:600}.person{color:#8a4b00;font-weight:600}\
svg.chart{width:100%;max-width:960px;height:auto;display:block;margin:6px 0 18px;font:13px system-ui,sans-serif}svg .label{font-weight:600}svg .cell{font-size:11px}\
.rec{color:#666;font-size:12px}.chart-title{font-weight:600;margin:10px 0 0}\
@media print{body{padding:0;font-size:11pt}h2{break-after:avoid}svg.chart,table,pre{break-inside:avoid}.headline{background:none}}";

/// Writes the HTML report.
pub fn write_html(r: &Report, mut w: impl Write) -> io::Result<()> {
    let mut o = String::with_capacity(64 * 1024);
    o.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    o.push_str(&format!("<title>servetune campaign report: {}</title><style>{CSS}</style></head><body>\n", esc(&r.goal)));
    o.push_str(&format!(
        "<h1>servetune campaign report</h1><p class=\"rec\">Model <code>{}</code>, engine <code>{}</code>, schema {}. Numbers name their journal record (hover a mark in a chart, or see the record column).</p>\n",
        esc(&r.model),
        esc(&r.engine),
        r.schema
    ));
    standing(r, &mut o);
    tasks(r, &mut o);
    launch(r, &mut o);
    warnings(r, &mut o);
    results(r, &mut o);
    track_record(r, &mut o);
    analysis(r, &mut o);
    o.push_str("</body></html>\n");
    w.write_all(o.as_bytes())
}

fn standing(r: &Report, o: &mut String) {
    let env = &r.environment;
    o.push_str(&format!(
        "<section id=\"standing\"><h2>Goal and standing</h2><p>Goal: <b>{}</b>. Box: {} GPU(s) {}, virtualization {}/{}, GPU peer-to-peer {}.</p><p class=\"headline\">{}</p>",
        esc(&r.goal),
        env.gpus,
        esc(env.gpu_name.as_deref().unwrap_or("unknown")),
        esc(&env.vm),
        esc(&env.container),
        if env.p2p_ok { "available" } else { "not available" },
        esc(&r.standing.headline)
    ));
    if let Some(s) = &r.stop_reason {
        o.push_str(&format!("<p><b>Stopped:</b> {}</p>", esc(s)));
    }
    o.push_str("</section>\n");
}

fn tasks(r: &Report, o: &mut String) {
    let c = &r.counts;
    o.push_str(&format!(
        "<section id=\"tasks\"><h2>Done, in progress, not done</h2><div class=\"counts\"><div class=\"count\"><b>{}</b>done</div><div class=\"count\"><b>{}</b>in progress</div><div class=\"count\"><b>{}</b>not done</div></div>",
        c.done, c.in_progress, c.not_done
    ));
    let exps: Vec<String> = c.experiments.iter().map(|(k, v)| format!("{v} {k}")).collect();
    o.push_str(&format!("<p>Experiments: {}.</p>", esc(&exps.join(", "))));
    for (state, head) in [(TaskState::Done, "Done"), (TaskState::InProgress, "In progress"), (TaskState::NotDone, "Not done")] {
        o.push_str(&format!("<h3>{head}</h3><ul>"));
        let lines: Vec<_> = r.tasks.iter().filter(|t| t.state == state).collect();
        if lines.is_empty() {
            o.push_str("<li>(none)</li>");
        }
        for t in lines {
            o.push_str(&format!(
                "<li>{}: {} <span class=\"rec\">[{}, task {}]</span></li>",
                esc(&t.title),
                esc(&t.outcome),
                esc(&t.record),
                t.id
            ));
        }
        o.push_str("</ul>");
    }
    o.push_str("</section>\n");
}

fn launch(r: &Report, o: &mut String) {
    o.push_str("<section id=\"launch\"><h2>Working launch commands</h2>");
    if r.launch_commands.is_empty() {
        o.push_str("<p>No experiment has reached readiness yet.</p>");
    }
    for l in &r.launch_commands {
        o.push_str(&format!(
            "<h3>Experiment {} <span class=\"rec\">(engine version {})</span></h3><pre>{}</pre>",
            l.experiment,
            esc(l.engine_version.as_deref().unwrap_or("unknown")),
            esc(&l.command)
        ));
    }
    o.push_str("</section>\n");
}

/// One table cell: its HTML (escaped when made from text) and its class.
pub(crate) struct Cell {
    class: Option<String>,
    html: String,
}

impl Cell {
    /// Text, escaped, no class.
    pub(crate) fn text(s: impl AsRef<str>) -> Self {
        Self { class: None, html: esc(s.as_ref()) }
    }

    /// A number, right-aligned (`n`).
    pub(crate) fn num(s: impl AsRef<str>) -> Self {
        Self { class: Some("n".into()), html: esc(s.as_ref()) }
    }

    /// A journal record reference, in small grey type (`rec`).
    pub(crate) fn rec(s: impl AsRef<str>) -> Self {
        Self { class: Some("rec".into()), html: esc(s.as_ref()) }
    }

    /// Text with a class of the report's style sheet.
    pub(crate) fn class(class: &str, s: impl AsRef<str>) -> Self {
        Self { class: Some(esc(class)), html: esc(s.as_ref()) }
    }
}

/// The one HTML table writer of the reports: a header row, then one row per item.
pub(crate) fn table(o: &mut String, head: &[&str], rows: impl IntoIterator<Item = Vec<Cell>>) {
    o.push_str("<table><tr>");
    for h in head {
        o.push_str(&format!("<th>{}</th>", esc(h)));
    }
    o.push_str("</tr>");
    for row in rows {
        o.push_str("<tr>");
        for c in row {
            match &c.class {
                Some(class) => o.push_str(&format!("<td class=\"{class}\">{}</td>", c.html)),
                None => o.push_str(&format!("<td>{}</td>", c.html)),
            }
        }
        o.push_str("</tr>");
    }
    o.push_str("</table>");
}

fn warnings(r: &Report, o: &mut String) {
    o.push_str("<section id=\"warnings\"><h2>Warnings and findings</h2>");
    if r.warnings.is_empty() {
        o.push_str("<p>None.</p>");
    } else {
        let rows = r.warnings.iter().map(|f| {
            vec![
                Cell::text(&f.title),
                Cell::class(&format!("sev-{}", f.severity), f.severity.name()),
                Cell::text(&f.evidence),
                Cell::text(&f.fix),
                Cell::rec(crate::report::finding_records(f)),
            ]
        });
        table(o, &["finding", "severity", "evidence", "fix", "record"], rows);
    }
    o.push_str("</section>\n");
}

fn results(r: &Report, o: &mut String) {
    o.push_str("<section id=\"results\"><h2>Results</h2>");
    let num = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.1}"));
    let int = |x: Option<u32>| x.map_or("-".into(), |v| v.to_string());
    let rows = r.results.iter().map(|x| {
        vec![
            Cell::rec(format!("experiment {}", x.experiment)),
            Cell::text(&x.title),
            Cell::text(x.state.as_str()),
            Cell::num(num(x.best_output_tok_s)),
            Cell::num(int(x.at_concurrency)),
            Cell::num(num(x.tpot_p90_ms)),
            Cell::num(int(x.knee_concurrency)),
            Cell::text(x.failure.as_deref().unwrap_or("-")),
        ]
    });
    let head = ["experiment", "configuration", "state", "best output tok/s", "at concurrency", "TPOT p90 ms", "knee", "failure"];
    table(o, &head, rows);
    if r.curves.iter().all(|c| c.points.is_empty()) {
        o.push_str("<p>No measured sweep yet: the charts appear once an experiment is done.</p>");
    } else {
        o.push_str("<h3>Output throughput over concurrency</h3>");
        svg::line_chart(&throughput_chart(r), o);
        o.push_str("<h3>Latency percentiles over concurrency</h3>");
        svg::line_chart(&latency_chart(r, Latency::Ttft), o);
        svg::line_chart(&latency_chart(r, Latency::Tpot), o);
        o.push_str("<h3>Predicted against measured</h3>");
        svg::bar_chart(&versus_chart(r), o);
    }
    if !r.breakdown.is_empty() {
        o.push_str("<h3>Step time by term (the performance model, at each experiment's best point)</h3>");
        svg::bar_chart(&breakdown_chart(r), o);
    }
    for m in &r.p2p {
        o.push_str(&format!("<h3>GPU peer-to-peer matrix: {}</h3>", esc(&m.environment)));
        svg::heatmap(&p2p_heatmap(m), o);
    }
    for a in &r.allreduce {
        o.push_str(&format!(
            "<h3>Measured NCCL all-reduce: {}</h3><p class=\"rec\">servetune fabric allreduce with NCCL's defaults, recorded from {} [fabric record {}]; the predictions in this environment price NCCL's all-reduces from it</p>",
            esc(&a.environment),
            esc(&a.source),
            a.record
        ));
        let (head, rows) = a.table();
        let mut heads = vec!["size"];
        heads.extend(head.iter().map(String::as_str));
        table(
            o,
            &heads,
            rows.into_iter().map(|(size, cells)| std::iter::once(Cell::text(size)).chain(cells.into_iter().map(Cell::num)).collect()),
        );
    }
    for f in &r.fabric {
        let m = &f.matrices;
        o.push_str(&format!(
            "<h3>Measured GPU-to-GPU bandwidth and latency: {}</h3><p class=\"rec\">servetune fabric p2p ({} backend), recorded from {} [fabric record {}]{}</p>",
            esc(&f.environment),
            esc(&m.backend),
            esc(&f.source),
            f.record,
            esc(&m.link.as_ref().map_or(String::new(), |l| format!("; the link servetune plan --fabric takes: {l}")))
        ));
        for (x, name, higher) in [(&m.bandwidth, "fabric-bandwidth", true), (&m.latency, "fabric-latency", false)] {
            // One colour scale per quantity across the environments, so colours compare.
            let scale: Vec<f64> = r
                .fabric
                .iter()
                .flat_map(|g| svg::pair_values(if higher { &g.matrices.bandwidth.values } else { &g.matrices.latency.values }))
                .collect();
            let h = fabric_heatmap(f, x, name, higher, scale);
            o.push_str(&format!("<p class=\"chart-title\">{}</p>", esc(&h.caption)));
            svg::value_heatmap(&h, o);
        }
    }
    o.push_str("</section>\n");
}

fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

fn throughput_chart(r: &Report) -> LineChart {
    let mut series = Vec::new();
    let mut callouts = Vec::new();
    for (i, c) in r.curves.iter().enumerate() {
        let marks = c
            .points
            .iter()
            .map(|p| Mark {
                x: f64::from(p.measured.concurrency),
                y: p.measured.output_tok_s,
                title: format!(
                    "{:.1} output tok/s at concurrency {} (experiment {})",
                    p.measured.output_tok_s, p.measured.concurrency, c.experiment
                ),
            })
            .collect();
        series.push(Series { name: legend_name(c), color: color(i), dash: None, marks });
        if let Some(p) = c.knee_concurrency.and_then(|k| c.points.iter().find(|p| p.measured.concurrency == k)) {
            callouts.push(Callout {
                x: f64::from(p.measured.concurrency),
                y: p.measured.output_tok_s,
                label: format!("knee c={}", p.measured.concurrency),
                color: color(i),
                title: format!("saturation knee of experiment {} at concurrency {}", c.experiment, p.measured.concurrency),
            });
        }
    }
    LineChart {
        name: "throughput".into(),
        caption: "Output tokens per second over concurrency, one line per experiment, knee circled".into(),
        x_label: "concurrency (requests in flight, log scale)".into(),
        y_label: "output throughput (tok/s)".into(),
        series,
        callouts,
        legend: None,
        log_y: false,
    }
}

#[derive(Clone, Copy)]
enum Latency {
    Ttft,
    Tpot,
}

fn latency_chart(r: &Report, which: Latency) -> LineChart {
    type Pick = fn(&crate::report::CurvePoint) -> f64;
    let pcts: &[(&str, Option<&'static str>, Pick)] = match which {
        Latency::Ttft => &[("p50", None, |p| p.measured.ttft_p50_ms), ("p99", Some("6 4"), |p| p.measured.ttft_p99_ms)],
        Latency::Tpot => &[
            ("p50", None, |p| p.measured.tpot_p50_ms),
            ("p90", Some("2 3"), |p| p.measured.tpot_p90_ms),
            ("p99", Some("6 4"), |p| p.measured.tpot_p99_ms),
        ],
    };
    let metric = match which {
        Latency::Ttft => "TTFT",
        Latency::Tpot => "TPOT",
    };
    let mut series = Vec::new();
    let mut legend = Vec::new();
    for (i, c) in r.curves.iter().enumerate() {
        legend.push(LegendEntry { name: legend_name(c), color: color(i), dash: None });
        for (pct, dash, pick) in pcts {
            let marks = c
                .points
                .iter()
                .map(|p| Mark {
                    x: f64::from(p.measured.concurrency),
                    y: pick(p),
                    title: format!(
                        "{metric} {pct} {:.1} ms at concurrency {} (experiment {})",
                        pick(p),
                        p.measured.concurrency,
                        c.experiment
                    ),
                })
                .collect();
            series.push(Series { name: format!("exp {} {metric} {pct}", c.experiment), color: color(i), dash: *dash, marks });
        }
    }
    legend.extend(pcts.iter().map(|(pct, dash, _)| LegendEntry { name: format!("{metric} {pct}"), color: "#555555", dash: *dash }));
    // TTFT's p99 can be a thousand times its p50 (requests queued behind the running cap): on a
    // linear axis set by the p99 the p50 lies on the floor, so TTFT gets a log axis.
    let log_y = matches!(which, Latency::Ttft);
    LineChart {
        name: metric.to_lowercase(),
        caption: format!(
            "{metric} percentiles over concurrency (solid p50, dashed higher percentiles){}",
            if log_y { ", log scale" } else { "" }
        ),
        x_label: "concurrency (requests in flight, log scale)".into(),
        y_label: format!("{metric} (ms){}", if log_y { ", log scale" } else { "" }),
        series,
        callouts: Vec::new(),
        legend: Some(legend),
        log_y,
    }
}

fn versus_chart(r: &Report) -> BarChart {
    let groups = r
        .curves
        .iter()
        .filter_map(|c| {
            let best = c.points.iter().max_by(|a, b| a.measured.output_tok_s.total_cmp(&b.measured.output_tok_s))?;
            let mut segments = vec![Segment {
                series: 0,
                value: best.measured.output_tok_s,
                title: format!(
                    "measured {:.1} tok/s at concurrency {} (experiment {})",
                    best.measured.output_tok_s, best.measured.concurrency, c.experiment
                ),
            }];
            if let Some(p) = best.predicted_output_tok_s {
                let how = c.calibrated_on.map_or("the model alone".to_string(), |e| format!("calibrated on experiment {e}"));
                segments.push(Segment {
                    series: 1,
                    value: p,
                    title: format!(
                        "predicted {p:.1} tok/s ({how}) at concurrency {} (experiment {})",
                        best.measured.concurrency, c.experiment
                    ),
                });
            }
            if let Some(p) = best.uncalibrated_output_tok_s.filter(|_| c.calibrated_on.is_some()) {
                segments.push(Segment {
                    series: 2,
                    value: p,
                    title: format!(
                        "the model alone predicts {p:.1} tok/s at concurrency {} (experiment {})",
                        best.measured.concurrency, c.experiment
                    ),
                });
            }
            Some(Group { label: format!("exp {} (c={})", c.experiment, best.measured.concurrency), segments })
        })
        .collect();
    BarChart {
        name: "versus".into(),
        caption: "Measured output tok/s at each experiment's best point, and the model's prediction for it".into(),
        x_label: "experiment (best concurrency)".into(),
        y_label: "output throughput (tok/s)".into(),
        series: vec![
            "measured (bench)".into(),
            "predicted (model, calibrated where a calibration existed)".into(),
            "model alone (uncalibrated)".into(),
        ],
        groups,
        stacked: false,
    }
}

/// The track record: each step's predicted gain (the model alone, and calibrated) against the gain
/// measured, as a table and a chart.
fn track_record(r: &Report, o: &mut String) {
    o.push_str("<section id=\"track-record\"><h2>Track record: predicted against measured gain</h2>");
    if r.track_record.is_empty() {
        o.push_str("<p>No step with a predicted gain has been taken yet.</p>");
    } else {
        let g = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:+.1}%", (v - 1.0) * 100.0));
        let rows = r.track_record.iter().map(|t| {
            vec![
                Cell::text(&t.step),
                Cell::rec(format!("experiment {}", t.reference)),
                Cell::num(g(t.predicted_raw)),
                Cell::num(
                    t.predicted_calibrated
                        .map_or("-".into(), |v| format!("{} (calibrated on experiment {})", g(Some(v)), t.calibrated_on.unwrap_or(0))),
                ),
                Cell::num(t.interval.as_ref().map_or("-".into(), |i| format!("{}..{}", g(Some(i.low)), g(Some(i.high))))),
                Cell::num(g(t.measured)),
                Cell::text(t.inside.map_or("not measured yet", |x| if x { "yes" } else { "no" })),
                Cell::rec(crate::report::track_records(t)),
            ]
        });
        let head = ["step", "against", "predicted (model alone)", "predicted (calibrated)", "interval", "measured", "inside", "record"];
        table(o, &head, rows);
        svg::bar_chart(&track_chart(r), o);
    }
    if !r.calibrations.is_empty() {
        o.push_str("<h3>Calibrations of the box</h3><p>The model fitted to each measured sweep (calibration, not a prediction). Later predictions in the same environment use the newest one and say so.</p>");
        let rows = r.calibrations.iter().map(|c| {
            let f = &c.factors;
            vec![
                Cell::rec(format!("experiment {}", c.experiment)),
                Cell::text(&c.environment),
                Cell::text(f.factors.words()),
                Cell::num(format!("{:.3}", f.rms_log_error)),
                Cell::num(f.points.to_string()),
                Cell::text(c.used_words()),
            ]
        });
        let head = ["fitted to", "environment", "fitted factors", "rms log error", "points", "used"];
        table(o, &head, rows);
    }
    o.push_str("</section>\n");
}

fn track_chart(r: &Report) -> BarChart {
    let pct = |v: f64| (v - 1.0) * 100.0;
    let groups = r
        .track_record
        .iter()
        .map(|t| {
            let mut segments = Vec::new();
            for (series, v, what) in [
                (0, t.predicted_raw, "predicted by the model alone"),
                (1, t.predicted_calibrated, "predicted, calibrated"),
                (2, t.measured, "measured"),
            ] {
                if let Some(v) = v {
                    segments.push(Segment {
                        series,
                        value: pct(v).max(0.0),
                        title: format!("{what}: {:+.1}% ({})", pct(v), crate::report::track_records(t)),
                    });
                }
            }
            Group { label: format!("step {}", t.record), segments }
        })
        .collect();
    BarChart {
        name: "track-record".into(),
        caption: "Each step's predicted gain against the gain measured (negative gains drawn at zero; the table has the signed figures)"
            .into(),
        x_label: "step (prediction record)".into(),
        y_label: "gain (%)".into(),
        series: vec!["model alone".into(), "calibrated".into(), "measured".into()],
        groups,
        stacked: false,
    }
}

fn breakdown_chart(r: &Report) -> BarChart {
    let groups = r
        .breakdown
        .iter()
        .map(|b| {
            let s = &b.step;
            let terms = [s.weights_ms, s.kv_ms, s.compute_ms, s.communication_ms, s.overhead_ms, s.prefill_ms];
            let names = ["weights", "KV cache", "compute", "communication", "overhead", "prefill"];
            let segments = terms
                .iter()
                .zip(names)
                .enumerate()
                .map(|(i, (v, n))| Segment {
                    series: i,
                    value: *v,
                    title: format!(
                        "{n} {v:.2} ms of the {:.2} ms step at concurrency {} (experiment {})",
                        s.total_ms, s.concurrency, b.experiment
                    ),
                })
                .collect();
            Group { label: format!("exp {} (c={})", b.experiment, s.concurrency), segments }
        })
        .collect();
    BarChart {
        name: "breakdown".into(),
        caption: "The model's decode step by term, stacked (terms overlap, so the step is shorter than the sum)".into(),
        x_label: "experiment (concurrency)".into(),
        y_label: "step time per term (ms)".into(),
        series: ["weights", "KV cache", "compute", "communication", "overhead", "prefill"].iter().map(|s| s.to_string()).collect(),
        groups,
        stacked: true,
    }
}

fn p2p_heatmap(m: &crate::report::P2pMatrix) -> Heatmap {
    Heatmap {
        name: "p2p".into(),
        caption: format!("GPU peer-to-peer {} status between each pair of GPUs in the {}, from the probe", m.capability, m.environment),
        x_label: "to GPU".into(),
        y_label: "from GPU".into(),
        labels: (0..m.rows.len()).map(|i| i.to_string()).collect(),
        rows: m.rows.clone(),
        categories: vec![
            ("OK".into(), "#009e73", "peer-to-peer works".into()),
            ("NS".into(), "#d55e00", "not supported".into()),
            ("CNS".into(), "#e69f00", "chipset not supported".into()),
            ("X".into(), "#dddddd", "self".into()),
        ],
        record: format!("probe fingerprint {}", m.fingerprint),
    }
}

fn fabric_heatmap(
    f: &crate::report::FabricLine,
    m: &crate::fabric_step::Measured,
    name: &str,
    higher: bool,
    scale: Vec<f64>,
) -> ValueHeatmap {
    let better = if higher { "higher is better" } else { "lower is better" };
    let what = measured_title(f, m);
    ValueHeatmap {
        name: name.into(),
        caption: format!(
            "{what} in {} from each GPU (row) to each GPU (column), {}: {better}, brighter is better, one scale for every environment",
            m.unit, f.environment
        ),
        x_label: "to GPU".into(),
        y_label: "from GPU".into(),
        labels: f.matrices.gpus.iter().map(|g| g.to_string()).collect(),
        values: m.values.clone(),
        unit: m.unit.clone(),
        what,
        record: format!("fabric record {}, environment fingerprint {}", f.record, f.fingerprint),
        scale,
        higher_is_better: higher,
    }
}

/// What a fabric matrix measured, in words. p2pBandwidthLatencyTest's titles say "P2P=Enabled"
/// for copies made with peer access asked for; on a box whose GPUs cannot enable it (the
/// document's link was fitted host-staged) the driver staged those copies through host memory,
/// and the title says that instead of "P2P=Enabled".
fn measured_title(f: &crate::report::FabricLine, m: &crate::fabric_step::Measured) -> String {
    let title = m.title.replace(" Matrix", "");
    let staged = f.matrices.link.as_deref().is_some_and(|l| l.starts_with("measured-host-staged"));
    if staged && title.contains("P2P=Enabled") {
        format!("{}, staged through host memory (no P2P)", title.replace("P2P=Enabled ", ""))
    } else {
        title
    }
}

/// "exp 3 [lxc container, P2P]": which experiment and where it ran (the results table above the
/// charts says what each experiment changed).
fn legend_name(c: &crate::report::Curve) -> String {
    format!("exp {} [{}]", c.experiment, c.environment)
}

fn analysis(r: &Report, o: &mut String) {
    o.push_str("<section id=\"analysis\"><h2>Analysis</h2><ul>");
    for a in &r.analysis {
        o.push_str(&format!("<li>{}</li>", esc(a)));
    }
    for b in &r.breakdown {
        o.push_str(&format!(
            "<li>Experiment {}: {} <span class=\"rec\">[experiment {}, model]</span></li>",
            b.experiment,
            esc(&b.step.bottleneck),
            b.experiment
        ));
    }
    o.push_str("</ul></section>\n<section id=\"next-steps\"><h2>Next steps</h2>");
    if r.next_steps.is_empty() {
        o.push_str(&format!("<p>Nothing left: {}</p>", esc(r.stop_reason.as_deref().unwrap_or("no step proposed"))));
    } else {
        o.push_str("<ol>");
        for s in &r.next_steps {
            o.push_str(&format!(
                "<li>{}<b>{}</b> ({}): {} <span class=\"rec\">[evidence: {}]</span></li>",
                if s.needs_person { "<span class=\"person\">needs a person:</span> " } else { "" },
                esc(&s.title),
                esc(&crate::report::step_gain_words(s)),
                esc(&s.basis),
                esc(&s.evidence.join(", "))
            ));
        }
        o.push_str("</ol>");
    }
    o.push_str("</section>\n<section id=\"questions\"><h2>Open questions</h2>");
    if r.open_questions.is_empty() {
        o.push_str("<p>None.</p>");
    } else {
        o.push_str("<ul>");
        for q in &r.open_questions {
            o.push_str(&format!("<li><b>Q{}</b>: {} <pre>{}</pre></li>", q.id, esc(&q.text), esc(&q.how)));
        }
        o.push_str("</ul>");
    }
    o.push_str("</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric_step::{Measured, PairMatrices};
    use crate::report::FabricLine;

    fn line(link: &str) -> FabricLine {
        let m = |title: &str, unit: &str| Measured { title: title.into(), unit: unit.into(), values: vec![] };
        FabricLine {
            record: 1,
            fingerprint: 2,
            environment: "kvm guest, no P2P".into(),
            source: "p2p.json".into(),
            matrices: PairMatrices {
                backend: "sim".into(),
                gpus: vec![0, 1],
                bandwidth: m("Unidirectional P2P=Enabled Bandwidth Matrix (256 MiB)", "GB/s"),
                latency: m("P2P=Enabled Latency Matrix (4 B)", "us"),
                link: Some(format!("{link}: alpha 13.30 us, beta 29.40 GB/s")),
            },
        }
    }

    #[test]
    fn a_no_p2p_box_matrix_title_says_its_copies_were_staged() {
        let f = line("measured-host-staged");
        let bw = measured_title(&f, &f.matrices.bandwidth);
        assert_eq!(bw, "Unidirectional Bandwidth (256 MiB), staged through host memory (no P2P)");
        assert_eq!(measured_title(&f, &f.matrices.latency), "Latency (4 B), staged through host memory (no P2P)");
        let p2p = line("measured-p2p");
        assert_eq!(measured_title(&p2p, &p2p.matrices.bandwidth), "Unidirectional P2P=Enabled Bandwidth (256 MiB)");
    }
}
