//! The `servetune.plan/1` document and its renderings (terminal with an ASCII curve, Markdown).

use std::io::{self, Write};

use serde::Serialize;

use crate::calibrate::Fit;
use crate::predict::{Memory, Point, Scenario};
use crate::rank::{Fix, Ranked};
use crate::spec::ParamCounts;

/// Where throughput stops growing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Saturation {
    pub concurrency: u32,
    pub output_tokens_per_s: f64,
    pub reason: String,
}

/// A what-if comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Versus {
    pub change: String,
    pub points: Vec<Point>,
}

/// `servetune plan --json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanReport {
    /// Always "servetune.plan/1".
    pub schema: &'static str,
    pub model: String,
    pub params: ParamCounts,
    pub scenario: Scenario,
    pub fits: bool,
    /// Why it does not fit, when it does not.
    pub fit_error: Option<String>,
    pub memory_per_gpu_gb: Memory,
    pub max_kv_tokens: u64,
    pub max_concurrency: u32,
    pub points: Vec<Point>,
    pub saturation: Option<Saturation>,
    pub ranked_plans: Vec<Ranked>,
    pub fixes: Vec<Fix>,
    pub vs: Vec<Versus>,
    pub calibration: Option<Fit>,
    /// The objectives and concurrency range ranking and fixes were judged under.
    pub slo: crate::rank::Slo,
}

pub const SCHEMA: &str = "servetune.plan/1";

/// The first concurrency after which doubling buys under 10% more throughput, or where the KV
/// cache (or the running limit) caps the batch.
pub fn saturation(s: &Scenario, points: &[Point]) -> Option<Saturation> {
    let cap = s.max_concurrency();
    for w in points.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        if b.running <= a.running && a.running == cap {
            return Some(Saturation {
                concurrency: a.running,
                output_tokens_per_s: a.output_tokens_per_s,
                reason: format!(
                    "the KV cache (or the running-request limit) holds {cap} requests of {} tokens; more concurrency only queues",
                    s.input_len + s.output_len
                ),
            });
        }
        if b.output_tokens_per_s < a.output_tokens_per_s * 1.10 && b.concurrency >= a.concurrency * 2 {
            return Some(Saturation {
                concurrency: a.concurrency,
                output_tokens_per_s: a.output_tokens_per_s,
                reason: format!(
                    "from concurrency {} to {} throughput grows only {:.0}%",
                    a.concurrency,
                    b.concurrency,
                    (b.output_tokens_per_s / a.output_tokens_per_s - 1.0) * 100.0
                ),
            });
        }
    }
    None
}

fn slo_words(s: &crate::rank::Slo) -> String {
    let mut parts = Vec::new();
    if let Some(c) = s.max_concurrency {
        parts.push(format!("concurrency <= {c}"));
    }
    if let Some(t) = s.tpot_ms {
        parts.push(format!("TPOT < {t:.0} ms"));
    }
    if let Some(t) = s.ttft_ms {
        parts.push(format!("TTFT < {t:.0} ms"));
    }
    if parts.is_empty() {
        "no SLO".into()
    } else {
        parts.join(", ")
    }
}

fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let s: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| if i == 0 { format!("{c:<width$}", width = w[i]) } else { format!("{c:>width$}", width = w[i]) })
            .collect();
        out.push_str(s.join("  ").trim_end());
        out.push('\n');
    };
    line(headers.to_vec(), &mut out);
    line(w.iter().map(|n| "-".repeat(*n)).collect::<Vec<_>>().iter().map(String::as_str).collect(), &mut out);
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

fn point_rows(points: &[Point]) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let h = vec![
        "conc",
        "running",
        "out tok/s",
        "tok/s/user",
        "TPOT ms",
        "TTFT ms",
        "weights",
        "kv",
        "compute",
        "comm",
        "overhead",
        "prefill",
        "step ms",
    ];
    let rows = points
        .iter()
        .map(|p| {
            let s = &p.step_ms;
            vec![
                p.concurrency.to_string(),
                p.running.to_string(),
                format!("{:.0}", p.output_tokens_per_s),
                format!("{:.1}", p.per_user_tokens_per_s),
                format!("{:.1}", p.tpot_ms),
                format!("{:.0}", p.ttft_ms),
                format!("{:.1}", s.weights),
                format!("{:.1}", s.kv),
                format!("{:.1}", s.compute),
                format!("{:.1}", s.communication),
                format!("{:.1}", s.overhead),
                format!("{:.1}", s.prefill),
                format!("{:.1}", s.total),
            ]
        })
        .collect();
    (h, rows)
}

/// An ASCII bar per concurrency, scaled to the largest throughput.
pub fn ascii_curve(points: &[Point]) -> String {
    let max = points.iter().map(|p| p.output_tokens_per_s).fold(0.0, f64::max).max(1e-9);
    let mut s = String::new();
    for p in points {
        let n = (p.output_tokens_per_s / max * 50.0).round() as usize;
        s += &format!("c={:<5} {:<50} {:.0} tok/s\n", p.concurrency, "#".repeat(n), p.output_tokens_per_s);
    }
    s
}

/// The terminal report. `explain`: the bottleneck at every concurrency (else only at the last).
pub fn write_terminal(r: &PlanReport, explain: bool, mut w: impl Write) -> io::Result<()> {
    let s = &r.scenario;
    let p = &r.params;
    writeln!(
        w,
        "servetune plan  {} ({:.0}B total, {:.1}B active)  {}  on {} x {}  link {}  {}",
        r.model,
        p.total / 1e9,
        p.active / 1e9,
        s.quant.experts.name(),
        s.plan.gpus,
        s.gpu.name,
        s.link.name,
        s.plan.label()
    )?;
    writeln!(
        w,
        "  input {} / output {} tokens; link alpha {:.1} us, beta {:.1} GB/s ({})",
        s.input_len, s.output_len, s.link.alpha_us, s.link.beta_gbs, s.link.source
    )?;
    let e = &s.engine;
    writeln!(
        w,
        "  engine: overhead {:.1} ms/step, CUDA graphs {}, overlap {:?}, memory eff {:.2} (experts {:.2}), GEMM eff {:.2}, comm x{:.2}",
        e.step_overhead_ms,
        if e.cuda_graphs { "on" } else { "off" },
        e.overlap,
        e.hbm_efficiency,
        e.moe_efficiency,
        e.gemm_efficiency,
        e.comm_scale
    )?;
    let m = &r.memory_per_gpu_gb;
    writeln!(
        w,
        "\nmemory per GPU: {:.1} GB weights + {:.1} GB workspace + {:.1} GB KV of {:.1} GB usable ({:.1} GB); KV {:.1} KB/token; {} tokens; {} requests of {} tokens",
        m.weights_gb, m.workspace_gb, m.kv_gb, m.usable_gb, m.capacity_gb, m.kv_bytes_per_token / 1e3, r.max_kv_tokens, r.max_concurrency, s.input_len + s.output_len
    )?;
    if let Some(err) = &r.fit_error {
        writeln!(w, "DOES NOT FIT: {err}")?;
    }
    if !r.points.is_empty() {
        writeln!(
            w,
            "\nstep time by term (ms); step = max(weights + kv, compute) + comm + overhead + prefill{}",
            if e.overlap == crate::predict::Overlap::Full { " (comm hidden: max of the three)" } else { "" }
        )?;
        let (h, rows) = point_rows(&r.points);
        write!(w, "{}", table(&h, &rows))?;
        writeln!(w, "\noutput tok/s over concurrency")?;
        write!(w, "{}", ascii_curve(&r.points))?;
        writeln!(w, "\nbottleneck:")?;
        let shown: Vec<&Point> = if explain { r.points.iter().collect() } else { r.points.last().into_iter().collect() };
        for p in shown {
            writeln!(w, "  {}", p.bottleneck)?;
        }
    }
    if let Some(sat) = &r.saturation {
        writeln!(w, "\nsaturation: {:.0} tok/s at concurrency {}: {}", sat.output_tokens_per_s, sat.concurrency, sat.reason)?;
    }
    if !r.fixes.is_empty() {
        writeln!(w, "\nwhat gains most (best throughput with {}):", slo_words(&r.slo))?;
        for f in &r.fixes {
            writeln!(w, "  {:+.0}%  {} -> {:.0} tok/s: {}", (f.gain - 1.0) * 100.0, f.fix, f.output_tokens_per_s, f.how)?;
        }
    }
    if !r.ranked_plans.is_empty() {
        writeln!(w, "\nranked plans on {} GPUs ({}):", s.plan.gpus, slo_words(&r.slo))?;
        let rows: Vec<Vec<String>> = r
            .ranked_plans
            .iter()
            .map(|x| {
                vec![
                    x.label.clone(),
                    x.concurrency.to_string(),
                    format!("{:.0}", x.output_tokens_per_s),
                    format!("{:.1}", x.tokens_per_s_per_gpu),
                    format!("{:.1}", x.tpot_ms),
                    format!("{:+.0}%", (x.gain - 1.0) * 100.0),
                ]
            })
            .collect();
        write!(w, "{}", table(&["plan", "at conc", "out tok/s", "tok/s/GPU", "TPOT ms", "vs current"], &rows))?;
    }
    for v in &r.vs {
        writeln!(w, "\nwhat if {}:", v.change)?;
        let rows: Vec<Vec<String>> = r
            .points
            .iter()
            .zip(&v.points)
            .map(|(a, b)| {
                vec![
                    a.concurrency.to_string(),
                    format!("{:.0}", a.output_tokens_per_s),
                    format!("{:.0}", b.output_tokens_per_s),
                    format!("{:+.0}%", (b.output_tokens_per_s / a.output_tokens_per_s - 1.0) * 100.0),
                    format!("{:.1}", b.tpot_ms),
                ]
            })
            .collect();
        write!(w, "{}", table(&["conc", "now tok/s", "then tok/s", "change", "then TPOT ms"], &rows))?;
    }
    if let Some(f) = &r.calibration {
        writeln!(
            w,
            "\ncalibration: memory efficiency x{:.2}, overhead {:.1} ms/step, comm x{:.2}; rms log error {:.3}",
            f.memory_efficiency_scale, f.step_overhead_ms, f.comm_scale, f.rms_log_error
        )?;
        for (c, m, p, res) in &f.residuals {
            writeln!(w, "  c={c}: measured {m:.0}, predicted {p:.0} tok/s ({:+.1}%)", res * 100.0)?;
        }
    }
    Ok(())
}

/// Markdown.
pub fn write_markdown(r: &PlanReport, mut w: impl Write) -> io::Result<()> {
    let s = &r.scenario;
    writeln!(w, "# servetune plan: {} on {} x {} ({}, {})\n", r.model, s.plan.gpus, s.gpu.name, s.plan.label(), s.link.name)?;
    let m = &r.memory_per_gpu_gb;
    writeln!(
        w,
        "- memory per GPU: {:.1} GB weights, {:.1} GB KV ({} tokens, {} requests)",
        m.weights_gb, m.kv_gb, r.max_kv_tokens, r.max_concurrency
    )?;
    if let Some(err) = &r.fit_error {
        writeln!(w, "- **does not fit**: {err}")?;
    }
    if !r.points.is_empty() {
        let (h, rows) = point_rows(&r.points);
        writeln!(w, "\n| {} |\n|{}", h.join(" | "), "---|".repeat(h.len()))?;
        for row in rows {
            writeln!(w, "| {} |", row.join(" | "))?;
        }
        writeln!(w)?;
        for p in &r.points {
            writeln!(w, "- {}", p.bottleneck)?;
        }
    }
    if let Some(sat) = &r.saturation {
        writeln!(w, "\n**Saturation:** {:.0} tok/s at concurrency {}: {}", sat.output_tokens_per_s, sat.concurrency, sat.reason)?;
    }
    if !r.fixes.is_empty() {
        writeln!(w, "\n## What gains most\n")?;
        for f in &r.fixes {
            writeln!(w, "- {:+.0}%: {} ({:.0} tok/s): {}", (f.gain - 1.0) * 100.0, f.fix, f.output_tokens_per_s, f.how)?;
        }
    }
    if !r.ranked_plans.is_empty() {
        writeln!(w, "\n## Ranked plans\n\n| plan | at conc | out tok/s | tok/s/GPU | vs current |\n|---|---|---|---|---|")?;
        for x in &r.ranked_plans {
            writeln!(
                w,
                "| {} | {} | {:.0} | {:.1} | {:+.0}% |",
                x.label,
                x.concurrency,
                x.output_tokens_per_s,
                x.tokens_per_s_per_gpu,
                (x.gain - 1.0) * 100.0
            )?;
        }
    }
    Ok(())
}
