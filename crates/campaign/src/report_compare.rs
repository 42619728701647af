//! `campaign compare`: before/after between two campaigns (or two experiments of one), computed
//! into [`Comparison`] (throughput and latency deltas at each common concurrency, and what changed
//! in the fingerprints), then rendered for the terminal, Markdown and HTML.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;

use serde::Serialize;

use crate::bench_step::PointSummary;
use crate::campaign::{EnvBody, LaunchFingerprint, Snapshot};
use crate::journal::{ExpState, Experiment, Journal};
use crate::report_html::{table, Cell};
use crate::report_svg::{self as svg, esc, LineChart, Mark, Series, PALETTE};
use crate::text::md;
use crate::{CampaignError, Result};

/// The comparison's schema.
pub const SCHEMA: &str = "servetune.compare/1";

/// One side: a done experiment of a campaign.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    /// The campaign directory as given.
    pub dir: String,
    /// The experiment compared.
    pub experiment: i64,
    /// Its configuration, in words.
    pub title: String,
    /// The model it served.
    pub model: String,
    /// The engine it ran on.
    pub engine: String,
    /// The GPU model, when known.
    pub gpu: Option<String>,
    /// The number of GPUs.
    pub gpus: u32,
}

/// Throughput at one concurrency on both sides.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThroughputDelta {
    /// The concurrency both sides measured.
    pub concurrency: u32,
    /// Side A's output tok/s.
    pub a_output_tok_s: f64,
    /// Side B's output tok/s.
    pub b_output_tok_s: f64,
    /// b / a - 1.
    pub change: f64,
}

/// A latency percentile at one concurrency on both sides.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatencyDelta {
    /// The concurrency both sides measured.
    pub concurrency: u32,
    /// e.g. "TTFT p99".
    pub metric: String,
    /// Side A's value, ms.
    pub a_ms: f64,
    /// Side B's value, ms.
    pub b_ms: f64,
    /// b / a - 1.
    pub change: f64,
}

/// A fingerprint field that differs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldDiff {
    /// environment, engine, version, flag or env.
    pub kind: DiffKind,
    /// The field's name.
    pub field: String,
    /// Side A's value, if it has one.
    pub a: Option<String>,
    /// Side B's value, if it has one.
    pub b: Option<String>,
}

/// Which part of the fingerprint a difference is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffKind {
    /// The model.
    Model,
    /// The GPUs.
    Hardware,
    /// The environment (virtualization, container, P2P).
    Environment,
    /// An engine, driver or CUDA version.
    Version,
    /// A knob.
    Knob,
    /// A launch flag.
    Flags,
    /// An environment variable.
    EnvVar,
}

/// The comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Always "servetune.compare/1".
    pub schema: &'static str,
    /// Side A.
    pub a: Side,
    /// Side B.
    pub b: Side,
    /// Said first: the two sides run different models or hardware.
    pub caveats: Vec<String>,
    /// Throughput at each shared concurrency.
    pub throughput: Vec<ThroughputDelta>,
    /// Latency percentiles at each shared concurrency.
    pub latency: Vec<LatencyDelta>,
    /// Fingerprint fields that differ.
    pub differences: Vec<FieldDiff>,
}

struct Loaded {
    side: Side,
    exp: Experiment,
    env: Option<EnvBody>,
    launch: Option<LaunchFingerprint>,
}

fn load(dir: &Path, pick: Option<i64>) -> Result<Loaded> {
    let j = Journal::open(dir)?;
    let snap = Snapshot::read(&j)?;
    let done = |e: &&Experiment| e.state == ExpState::Done && e.result.is_some();
    let exp = match pick {
        Some(id) => snap.experiments.iter().find(|e| e.id == id).filter(done).cloned().ok_or_else(|| {
            CampaignError::Input(format!(
                "{}: experiment {id} is not a done experiment of this campaign; see servetune campaign status",
                dir.display()
            ))
        })?,
        None => snap.experiments.iter().filter(done).max_by(|a, b| best(a).total_cmp(&best(b))).cloned().ok_or_else(|| {
            CampaignError::Input(format!("{}: no done experiment to compare; run servetune campaign continue first", dir.display()))
        })?,
    };
    let env =
        exp.env_fingerprint.and_then(|id| j.fingerprint(id).ok().flatten()).and_then(|f| serde_json::from_value::<EnvBody>(f.body).ok());
    let launch = exp.fingerprint.and_then(|id| j.fingerprint(id).ok().flatten()).and_then(|f| serde_json::from_value(f.body).ok());
    let facts = env.as_ref().map_or(&snap.env.facts, |e| &e.facts);
    let side = Side {
        dir: dir.display().to_string(),
        experiment: exp.id,
        title: exp.title.clone(),
        model: snap.settings.model.clone(),
        engine: snap.settings.engine.name.clone(),
        gpu: snap.settings.gpu.clone().or_else(|| facts.gpu_model.clone()).or_else(|| facts.gpu_name.clone()),
        gpus: snap.settings.gpus.unwrap_or(facts.gpus),
    };
    Ok(Loaded { side, exp, env, launch })
}

fn best(e: &Experiment) -> f64 {
    e.result.as_ref().map_or(0.0, |r| r.best_output_tok_s(true))
}

fn change(a: f64, b: f64) -> f64 {
    if a > 0.0 {
        b / a - 1.0
    } else {
        0.0
    }
}

/// Compares the best done experiment of `a` with that of `b` (or the ones picked). Refuses, as
/// bad input naming both, two sides with no concurrency in common.
pub fn compare(a: &Path, a_exp: Option<i64>, b: &Path, b_exp: Option<i64>) -> Result<Comparison> {
    let (la, lb) = (load(a, a_exp)?, load(b, b_exp)?);
    let points = |l: &Loaded| -> BTreeMap<u32, PointSummary> {
        l.exp.result.iter().flat_map(|r| r.points.iter()).filter(|p| p.completed > 0).map(|p| (p.concurrency, p.clone())).collect()
    };
    let (pa, pb) = (points(&la), points(&lb));
    let common: Vec<u32> = pa.keys().filter(|c| pb.contains_key(c)).copied().collect();
    if common.is_empty() {
        return Err(CampaignError::Input(format!(
            "{} (experiment {}, concurrency {:?}) and {} (experiment {}, concurrency {:?}) have no measured concurrency in common: nothing to compare; run both with a shared --concurrency point",
            a.display(),
            la.side.experiment,
            pa.keys().collect::<Vec<_>>(),
            b.display(),
            lb.side.experiment,
            pb.keys().collect::<Vec<_>>()
        )));
    }
    let mut throughput = Vec::new();
    let mut latency = Vec::new();
    for c in &common {
        let (x, y) = (&pa[c], &pb[c]);
        throughput.push(ThroughputDelta {
            concurrency: *c,
            a_output_tok_s: x.output_tok_s,
            b_output_tok_s: y.output_tok_s,
            change: change(x.output_tok_s, y.output_tok_s),
        });
        for (metric, va, vb) in [
            ("TTFT p50", x.ttft_p50_ms, y.ttft_p50_ms),
            ("TTFT p99", x.ttft_p99_ms, y.ttft_p99_ms),
            ("TPOT p50", x.tpot_p50_ms, y.tpot_p50_ms),
            ("TPOT p90", x.tpot_p90_ms, y.tpot_p90_ms),
            ("TPOT p99", x.tpot_p99_ms, y.tpot_p99_ms),
        ] {
            latency.push(LatencyDelta { concurrency: *c, metric: metric.into(), a_ms: va, b_ms: vb, change: change(va, vb) });
        }
    }
    let differences = differences(&la, &lb);
    let caveats = differences
        .iter()
        .filter(|d| matches!(d.kind, DiffKind::Model | DiffKind::Hardware))
        .map(|d| {
            format!("different {}: {} in A, {} in B", d.field, d.a.as_deref().unwrap_or("unknown"), d.b.as_deref().unwrap_or("unknown"))
        })
        .collect();
    Ok(Comparison { schema: SCHEMA, a: la.side, b: lb.side, caveats, throughput, latency, differences })
}

fn differences(a: &Loaded, b: &Loaded) -> Vec<FieldDiff> {
    let mut out = Vec::new();
    let mut push = |kind: DiffKind, field: &str, x: Option<String>, y: Option<String>| {
        if x != y {
            out.push(FieldDiff { kind, field: field.into(), a: x, b: y });
        }
    };
    push(DiffKind::Model, "model", Some(a.side.model.clone()), Some(b.side.model.clone()));
    push(DiffKind::Hardware, "GPU", a.side.gpu.clone(), b.side.gpu.clone());
    push(DiffKind::Hardware, "GPU count", Some(a.side.gpus.to_string()), Some(b.side.gpus.to_string()));
    let facts = |l: &Loaded| l.env.as_ref().map(|e| e.facts.clone());
    let (fa, fb) = (facts(a), facts(b));
    let f = |x: &Option<crate::probe_step::BoxFacts>, g: &dyn Fn(&crate::probe_step::BoxFacts) -> String| x.as_ref().map(g);
    push(DiffKind::Environment, "virtual machine", f(&fa, &|x| x.vm.clone()), f(&fb, &|x| x.vm.clone()));
    push(DiffKind::Environment, "container", f(&fa, &|x| x.container.clone()), f(&fb, &|x| x.container.clone()));
    push(DiffKind::Environment, "GPU peer-to-peer", f(&fa, &|x| x.p2p_ok.to_string()), f(&fb, &|x| x.p2p_ok.to_string()));
    push(DiffKind::Environment, "link", f(&fa, &|x| x.link().to_string()), f(&fb, &|x| x.link().to_string()));
    push(
        DiffKind::Version,
        "driver",
        fa.as_ref().and_then(|x| x.driver_version.clone()),
        fb.as_ref().and_then(|x| x.driver_version.clone()),
    );
    push(DiffKind::Version, "CUDA", fa.as_ref().and_then(|x| x.cuda_version.clone()), fb.as_ref().and_then(|x| x.cuda_version.clone()));
    let launch = |l: &Loaded, g: &dyn Fn(&LaunchFingerprint) -> Option<String>| l.launch.as_ref().and_then(g);
    push(DiffKind::Version, "engine", Some(a.side.engine.clone()), Some(b.side.engine.clone()));
    push(DiffKind::Version, "engine version", launch(a, &|x| x.engine_version.clone()), launch(b, &|x| x.engine_version.clone()));
    push(DiffKind::Version, "NCCL", launch(a, &|x| x.nccl_version.clone()), launch(b, &|x| x.nccl_version.clone()));
    let keys: std::collections::BTreeSet<&String> = a.exp.knobs.keys().chain(b.exp.knobs.keys()).collect();
    for k in keys {
        push(DiffKind::Knob, k, a.exp.knobs.get(k).cloned(), b.exp.knobs.get(k).cloned());
    }
    // Launch flags and environment, with the ports (always different) left out.
    let flags =
        |l: &Loaded| l.launch.as_ref().map(|x| x.argv.iter().filter(|w| !w.contains("127.0.0.1:")).cloned().collect::<Vec<_>>().join(" "));
    push(DiffKind::Flags, "launch flags", flags(a), flags(b));
    let env = |l: &Loaded| l.launch.as_ref().map(|x| x.env.clone()).unwrap_or_default();
    let (ea, eb) = (env(a), env(b));
    let names: std::collections::BTreeSet<&String> = ea.keys().chain(eb.keys()).collect();
    for n in names {
        push(DiffKind::EnvVar, n, ea.get(n).cloned(), eb.get(n).cloned());
    }
    out
}

fn pct(x: f64) -> String {
    format!("{:+.1}%", x * 100.0)
}

fn or_dash(x: &Option<String>) -> &str {
    x.as_deref().unwrap_or("-")
}

/// The comparison for a terminal.
pub fn write_terminal(c: &Comparison, mut out: impl Write) -> io::Result<()> {
    // Rendered whole, then sent with outside text's control characters escaped (`text::term`).
    let mut w: Vec<u8> = Vec::new();
    write_terminal_raw(c, &mut w)?;
    out.write_all(crate::text::term(&String::from_utf8_lossy(&w)).as_bytes())
}

fn write_terminal_raw(c: &Comparison, w: &mut Vec<u8>) -> io::Result<()> {
    for k in &c.caveats {
        writeln!(w, "NOTE: {k}")?;
    }
    writeln!(w, "A: {} experiment {} ({})", c.a.dir, c.a.experiment, c.a.title)?;
    writeln!(w, "B: {} experiment {} ({})", c.b.dir, c.b.experiment, c.b.title)?;
    writeln!(w, "\n{:>5}  {:>12}  {:>12}  {:>8}", "conc", "A tok/s", "B tok/s", "change")?;
    for t in &c.throughput {
        writeln!(w, "{:>5}  {:>12.1}  {:>12.1}  {:>8}", t.concurrency, t.a_output_tok_s, t.b_output_tok_s, pct(t.change))?;
    }
    writeln!(w, "\n{:>5}  {:<9} {:>10}  {:>10}  {:>8}", "conc", "latency", "A ms", "B ms", "change")?;
    for l in &c.latency {
        writeln!(w, "{:>5}  {:<9} {:>10.2}  {:>10.2}  {:>8}", l.concurrency, l.metric, l.a_ms, l.b_ms, pct(l.change))?;
    }
    writeln!(w, "\nWhat changed:")?;
    if c.differences.is_empty() {
        writeln!(w, "  nothing in the fingerprints")?;
    }
    for d in &c.differences {
        writeln!(w, "  {:?} {}: {} -> {}", d.kind, d.field, or_dash(&d.a), or_dash(&d.b))?;
    }
    Ok(())
}

/// The comparison as Markdown.
pub fn write_markdown(c: &Comparison, mut w: impl Write) -> io::Result<()> {
    writeln!(w, "# Campaign comparison\n")?;
    for k in &c.caveats {
        writeln!(w, "> **Note:** {}\n", md(k))?;
    }
    writeln!(w, "- A: {}, experiment {} ({})", md(&c.a.dir), c.a.experiment, md(&c.a.title))?;
    writeln!(w, "- B: {}, experiment {} ({})\n", md(&c.b.dir), c.b.experiment, md(&c.b.title))?;
    writeln!(w, "## Throughput\n\n| concurrency | A output tok/s | B output tok/s | change |\n|---|---|---|---|")?;
    for t in &c.throughput {
        writeln!(w, "| {} | {:.1} | {:.1} | {} |", t.concurrency, t.a_output_tok_s, t.b_output_tok_s, pct(t.change))?;
    }
    writeln!(w, "\n## Latency\n\n| concurrency | metric | A ms | B ms | change |\n|---|---|---|---|---|")?;
    for l in &c.latency {
        writeln!(w, "| {} | {} | {:.2} | {:.2} | {} |", l.concurrency, l.metric, l.a_ms, l.b_ms, pct(l.change))?;
    }
    writeln!(w, "\n## What changed\n\n| kind | field | A | B |\n|---|---|---|---|")?;
    for d in &c.differences {
        writeln!(w, "| {:?} | {} | {} | {} |", d.kind, md(&d.field), md(or_dash(&d.a)), md(or_dash(&d.b)))?;
    }
    Ok(())
}

/// The comparison as one self-contained HTML page with a throughput chart.
pub fn write_html(c: &Comparison, mut w: impl Write) -> io::Result<()> {
    let mut o =
        String::from("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>servetune campaign comparison</title>");
    o.push_str("<style>body{font:15px/1.45 system-ui,sans-serif;max-width:1180px;margin:0 auto;padding:24px}table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:4px 8px}.note{background:#fff4e5;border-left:5px solid #e69f00;padding:8px 12px}svg.chart{width:100%;max-width:960px;height:auto;font:13px system-ui,sans-serif}</style></head><body>");
    o.push_str("<h1>Campaign comparison</h1>");
    for k in &c.caveats {
        o.push_str(&format!("<p class=\"note\"><b>Note:</b> {}</p>", esc(k)));
    }
    for (name, s) in [("A", &c.a), ("B", &c.b)] {
        o.push_str(&format!("<p><b>{name}</b>: <code>{}</code>, experiment {} ({})</p>", esc(&s.dir), s.experiment, esc(&s.title)));
    }
    let series = |name: &str, color: &'static str, exp: i64, f: &dyn Fn(&ThroughputDelta) -> f64| Series {
        name: format!("{name}: experiment {exp}"),
        color,
        dash: None,
        marks: c
            .throughput
            .iter()
            .map(|t| Mark {
                x: f64::from(t.concurrency),
                y: f(t),
                title: format!("{name} {:.1} tok/s at concurrency {} (experiment {exp})", f(t), t.concurrency),
            })
            .collect(),
    };
    let chart = LineChart {
        name: "compare-throughput".into(),
        caption: "Output tok/s over concurrency, A against B".into(),
        x_label: "concurrency (requests in flight, log scale)".into(),
        y_label: "output throughput (tok/s)".into(),
        series: vec![
            series("A", PALETTE[0], c.a.experiment, &|t| t.a_output_tok_s),
            series("B", PALETTE[1], c.b.experiment, &|t| t.b_output_tok_s),
        ],
        callouts: Vec::new(),
        legend: None,
        log_y: false,
    };
    o.push_str("<h2>Throughput</h2>");
    svg::line_chart(&chart, &mut o);
    o.push_str("<h2>Tables</h2>");
    let rows = c.throughput.iter().map(|t| {
        vec![
            Cell::text(t.concurrency.to_string()),
            Cell::text(format!("{:.1}", t.a_output_tok_s)),
            Cell::text(format!("{:.1}", t.b_output_tok_s)),
            Cell::text(pct(t.change)),
        ]
    });
    table(&mut o, &["concurrency", "A tok/s", "B tok/s", "change"], rows);
    o.push_str("<h2>Latency</h2>");
    let rows = c.latency.iter().map(|l| {
        vec![
            Cell::text(l.concurrency.to_string()),
            Cell::text(&l.metric),
            Cell::text(format!("{:.2}", l.a_ms)),
            Cell::text(format!("{:.2}", l.b_ms)),
            Cell::text(pct(l.change)),
        ]
    });
    table(&mut o, &["concurrency", "metric", "A ms", "B ms", "change"], rows);
    o.push_str("<h2>What changed</h2>");
    let rows = c
        .differences
        .iter()
        .map(|d| vec![Cell::text(format!("{:?}", d.kind)), Cell::text(&d.field), Cell::text(or_dash(&d.a)), Cell::text(or_dash(&d.b))]);
    table(&mut o, &["kind", "field", "A", "B"], rows);
    o.push_str("</body></html>\n");
    w.write_all(o.as_bytes())
}
