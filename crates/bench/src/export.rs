//! Renders a [`BenchReport`]: a terminal summary, Markdown, JSON, CSV, and per-request JSONL.
//! Each exporter writes to `impl Write`, so tests render into a `Vec<u8>`.

use comfy_table::CellAlignment;
use std::io::{self, Write};

use crate::record::RequestRecord;
use crate::report::{Goodput, RunReport};
use crate::runner::BenchReport;
use crate::selfcheck::ClientCheck;

/// Percentiles from fewer requests than this are marked with their sample count.
pub const FEW_SAMPLES: u64 = 100;

/// The summary table's columns: (header, value). Each header is defined once in [`LEGEND`].
fn columns(r: &RunReport) -> Vec<(&'static str, String)> {
    let l = &r.latency_ms;
    vec![
        ("load", r.label.clone()),
        ("ok", r.requests.completed.to_string()),
        ("failed", r.requests.failed.to_string()),
        ("req/s", format!("{:.2}", r.throughput.requests_per_s)),
        ("out tok/s", format!("{:.1}", r.throughput.output_tokens_per_s)),
        ("total tok/s", format!("{:.1}", r.throughput.total_tokens_per_s)),
        ("TTFT p50", ms(l.ttft.p50)),
        ("TTFT p99", tail(l.ttft.p99, l.ttft.count)),
        ("TTFT p99 uncorr", tail(l.ttft_uncorrected.p99, l.ttft_uncorrected.count)),
        ("TPOT p50", ms(l.tpot.p50)),
        ("ITL p50", ms(l.itl.p50)),
        ("E2E p99", tail(l.e2e.p99, l.e2e.count)),
        ("lag p99", tail(r.schedule_lag_ms.p99, r.schedule_lag_ms.count)),
        ("mean conc", format!("{:.1}", r.concurrency_achieved.mean)),
    ]
}

/// What each column of the summary table means, printed once under it.
pub const LEGEND: &[(&str, &str)] = &[
    ("load", "c=N: closed loop, N requests kept in flight; rate=R/s: open loop, R arrivals per second"),
    ("ok / failed", "measured requests that completed / failed (warmup excluded); failures by kind below"),
    ("req/s, out tok/s, total tok/s", "completed requests, output tokens, and input+output tokens per second over the run"),
    ("TTFT", "time to first token, from the intended send time (coordinated-omission corrected)"),
    ("uncorr", "the same latency from the actual send time (hides time spent waiting to be sent)"),
    ("TPOT", "time per output token after the first, per request"),
    ("ITL", "gap between consecutive token-carrying chunks"),
    ("E2E", "end to end, intended send to the response's end"),
    ("lag", "schedule lag: actual send minus intended send"),
    ("mean conc", "mean requests in flight over the whole run, ramp-up and drain included (Little's law); the steady-state line's \"in flight\" covers only its window, after the ramp and before the drain"),
    ("pNN (n=K)", "a percentile from fewer than 100 requests: K samples, so the tail is coarse"),
];

/// A latency in ms, marked with its sample count when there are too few for a tail percentile.
fn tail(v: f64, n: u64) -> String {
    if n > 0 && n < FEW_SAMPLES {
        format!("{} (n={n})", ms(v))
    } else {
        ms(v)
    }
}

/// A relative change in percent with its sign; a change that rounds to zero is "0%", never "-0%".
pub fn signed_pct(fraction: f64) -> String {
    let p = (fraction * 100.0).round();
    if p == 0.0 {
        "0%".into()
    } else {
        format!("{p:+.0}%")
    }
}

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// A plain text table: numeric columns right-aligned, the first and text columns left-aligned.
pub fn text_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    // Numbers align right; the first column and any column holding words align left.
    let numeric = |c: &str| {
        let c = c.split_once(" (n=").map_or(c, |(v, _)| v);
        !c.is_empty() && c.chars().all(|ch| ch.is_ascii_digit() || ".,+-%x".contains(ch))
    };
    let left: Vec<bool> =
        (0..headers.len()).map(|i| i == 0 || rows.iter().any(|r| r.get(i).is_some_and(|c| c != "-" && !numeric(c)))).collect();
    let mut t = comfy_table::Table::new();
    t.load_style(TABLE_STYLE).set_header(headers.to_vec()).add_rows(rows.to_vec());
    for (i, c) in t.column_iter_mut().enumerate() {
        c.set_padding((0, 1));
        c.set_cell_alignment(if left.get(i).copied().unwrap_or(true) { CellAlignment::Left } else { CellAlignment::Right });
    }
    t.lines().map(|l| l.trim_end().to_string() + "\n").collect()
}

/// Columns separated by two spaces, a dashed line under the header, no borders (the same style as
/// every servetune table: comfy-table, as fabric and plan draw theirs).
const TABLE_STYLE: comfy_table::TableStyle = comfy_table::TableStyle::new()
    .header_lines(comfy_table::ContentLineStyle::none().junction(' '))
    .header_separator(comfy_table::LineStyle::none().fill('-').junction(' '))
    .content_lines(comfy_table::ContentLineStyle::none().junction(' '));

/// `s` with its control characters escaped (`\u{1b}`, `\n`): a server's model id is outside text,
/// and a terminal or a Markdown viewer must not act on it.
fn shown(s: &str) -> String {
    s.chars().flat_map(|c| if c.is_control() { c.escape_default().collect::<Vec<_>>() } else { vec![c] }).collect()
}

/// `s` as a Markdown code span that holds: fenced by one more backtick than its longest run,
/// padded where it starts or ends with one (CommonMark's rule), so a backtick in a server's model
/// id cannot end the span early.
fn code_span(s: &str) -> String {
    let longest = s.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') { " " } else { "" };
    format!("{fence}{pad}{s}{pad}{fence}")
}

/// The terminal summary.
pub fn write_terminal(rep: &BenchReport, mut w: impl Write) -> io::Result<()> {
    let c = &rep.config;
    writeln!(
        w,
        "servetune bench  {}  api={}  model={}  input={}  output={}  seed={}{}",
        shown(&c.url),
        c.api.name(),
        shown(c.model.as_deref().unwrap_or("-")),
        c.input,
        c.output,
        c.seed,
        if rep.partial { "  [PARTIAL]" } else { "" }
    )?;
    for n in &rep.notes {
        writeln!(w, "  note: {n}")?;
    }
    writeln!(w)?;
    let headers: Vec<&str> = rep.runs.first().map(|r| columns(r).iter().map(|(h, _)| *h).collect()).unwrap_or_default();
    let rows: Vec<Vec<String>> = rep.runs.iter().map(|r| columns(r).into_iter().map(|(_, v)| v).collect()).collect();
    if !headers.is_empty() {
        writeln!(w, "latencies in ms")?;
        write!(w, "{}", text_table(&headers, &rows))?;
        write_legend(&mut w, rep)?;
    }
    for r in &rep.runs {
        let lines = run_lines(r);
        if !lines.is_empty() {
            writeln!(w, "\n[{}]", r.label)?;
            for l in lines {
                writeln!(w, "  {l}")?;
            }
        }
    }
    if let Some(s) = &rep.saturation {
        writeln!(w, "\nsaturation: {}", s.evidence)?;
    } else if rep.runs.len() > 1 {
        writeln!(w, "\nsaturation: none found (throughput still rises at the highest load tried)")?;
    }
    write_definitions(&mut w, rep)
}

/// The findings of one run in words: steady state, goodput, errors, server metrics, notes.
fn run_lines(r: &RunReport) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(st) = &r.steady_state {
        lines.push(format!(
            "steady state {:.1}s-{:.1}s: {:.1} out tok/s, {:.1} in flight in this window (target {:.1})",
            st.start_s, st.end_s, st.output_tokens_per_s, st.mean_in_flight, st.target_in_flight
        ));
    }
    if let Some(g) = &r.goodput {
        lines.push(goodput_line(g, r.requests.failed));
    }
    let errs: Vec<String> = r.requests.errors.iter().filter(|(_, n)| **n > 0).map(|(k, n)| format!("{}={n}", k.name())).collect();
    if !errs.is_empty() {
        lines.push(format!("errors: {}", errs.join(" ")));
        for (k, ex) in &r.requests.error_examples {
            if let Some(e) = ex.first() {
                lines.push(format!("  e.g. {}: {}", k.name(), shown(e)));
            }
        }
    }
    if let Some(m) = &r.server_metrics {
        lines.extend(m.summary.iter().map(|s| format!("server: {s}")));
    }
    if let Some(c) = &r.client {
        lines.push(client_line(c));
    }
    lines.extend(r.notes.iter().cloned());
    lines
}

/// The client's self-check in words.
fn client_line(c: &ClientCheck) -> String {
    let w = c.wake_delay_ms;
    let cpu = match (c.cpu_user_s, c.cpu_system_s) {
        (Some(u), Some(s)) => {
            let per = c.cpu_us_per_output_token.map(|p| format!(", {p:.2} us per output token")).unwrap_or_default();
            format!("CPU {u:.2}s user + {s:.2}s system{per}")
        }
        _ => "CPU not measured on this system".to_string(),
    };
    format!("client self-check: {cpu}; a woken task waited {:.3} ms p50, {:.3} ms p99 (max {:.3} ms)", w.p50, w.p99, w.max)
}

fn goodput_line(g: &Goodput, failed: u64) -> String {
    let parts: Vec<String> = g
        .slos
        .iter()
        .map(|s| {
            let cmp = if s.met { "<" } else { ">=" };
            format!("{} p{}={} ms {cmp} {} ms", s.metric.name(), s.percentile, ms(s.value_ms), ms(s.threshold_ms))
        })
        .collect();
    let verdict = if g.all_met {
        "SLOs met".to_string()
    } else if g.slos.iter().all(|s| s.met) {
        format!("SLO percentiles met, but {failed} request(s) failed")
    } else {
        "SLOs NOT met".to_string()
    };
    format!(
        "goodput {:.2} req/s ({:.1}% of requests meet every SLO); {verdict}: {}",
        g.requests_per_s,
        g.fraction * 100.0,
        parts.join(", ")
    )
}

/// `--definitions`: the latencies under another tool's definitions, each defined in its row.
fn write_definitions(mut w: impl Write, rep: &BenchReport) -> io::Result<()> {
    let Some(d) = &rep.definitions else {
        return Ok(());
    };
    writeln!(w, "\nunder {} definitions (ms):", d.tool.name())?;
    let mut rows = Vec::new();
    for (run, metrics) in rep.runs.iter().zip(&d.runs) {
        for m in metrics {
            let s = &m.summary_ms;
            rows.push(vec![run.label.clone(), m.name.to_string(), ms(s.mean), ms(s.p50), tail(s.p99, s.count), m.definition.to_string()]);
        }
    }
    write!(w, "{}", text_table(&["load", "metric", "mean", "p50", "p99", "definition"], &rows))
}

fn write_legend(mut w: impl Write, rep: &BenchReport) -> io::Result<()> {
    let few = rep.runs.iter().any(|r| r.latency_ms.e2e.count > 0 && r.latency_ms.e2e.count < FEW_SAMPLES);
    let width = LEGEND.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in LEGEND.iter().filter(|(k, _)| few || !k.starts_with("pNN")) {
        writeln!(w, "  {k:<width$}  {v}")?;
    }
    Ok(())
}

/// Markdown: the same table and findings.
pub fn write_markdown(rep: &BenchReport, mut w: impl Write) -> io::Result<()> {
    let c = &rep.config;
    writeln!(w, "# servetune bench{}\n", if rep.partial { " (partial)" } else { "" })?;
    writeln!(
        w,
        "- url: {}, api: `{}`, model: {}",
        code_span(&shown(&c.url)),
        c.api.name(),
        code_span(&shown(c.model.as_deref().unwrap_or("-")))
    )?;
    writeln!(w, "- input tokens: {}, output tokens: {}, seed: {}, warmup: {}", c.input, c.output, c.seed, c.warmup)?;
    for n in &rep.notes {
        writeln!(w, "- {n}")?;
    }
    writeln!(w, "\nLatencies in ms.\n")?;
    if let Some(first) = rep.runs.first() {
        let h: Vec<&str> = columns(first).iter().map(|(h, _)| *h).collect();
        writeln!(w, "| {} |", h.join(" | "))?;
        writeln!(w, "|{}", "---|".repeat(h.len()))?;
        for r in &rep.runs {
            let v: Vec<String> = columns(r).into_iter().map(|(_, v)| v).collect();
            writeln!(w, "| {} |", v.join(" | "))?;
        }
        writeln!(w)?;
        for (k, v) in LEGEND {
            writeln!(w, "- **{k}**: {v}")?;
        }
    }
    if let Some(s) = &rep.saturation {
        writeln!(w, "\n**Saturation:** {}", s.evidence)?;
    }
    for r in &rep.runs {
        let mut items: Vec<String> = Vec::new();
        if let Some(m) = &r.server_metrics {
            items.extend(m.summary.iter().map(|s| format!("server: {s}")));
        }
        items.extend(r.notes.iter().cloned());
        if !items.is_empty() {
            writeln!(w, "\n### {}\n", r.label)?;
            for i in items {
                writeln!(w, "- {i}")?;
            }
        }
    }
    Ok(())
}

/// `--json`: the report as one pretty JSON document.
pub fn write_json(rep: &BenchReport, mut w: impl Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut w, rep)?;
    writeln!(w)
}

/// `--csv`: one row per run.
pub fn write_csv(rep: &BenchReport, mut w: impl Write) -> io::Result<()> {
    writeln!(
        w,
        "load,concurrency,rate,partial,completed,failed,duration_s,requests_per_s,input_tokens_per_s,output_tokens_per_s,total_tokens_per_s,ttft_p50_ms,ttft_p99_ms,ttft_uncorrected_p99_ms,tpot_p50_ms,itl_p50_ms,e2e_p50_ms,e2e_p99_ms,e2e_uncorrected_p99_ms,schedule_lag_p99_ms,concurrency_mean"
    )?;
    for r in &rep.runs {
        let l = &r.latency_ms;
        writeln!(
            w,
            "\"{}\",{},{},{},{},{},{:.3},{:.4},{:.2},{:.2},{:.2},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.2}",
            r.label.replace('"', "'"),
            r.concurrency.map(|c| c.to_string()).unwrap_or_default(),
            r.rate.map(|c| c.to_string()).unwrap_or_default(),
            r.partial,
            r.requests.completed,
            r.requests.failed,
            r.duration_s,
            r.throughput.requests_per_s,
            r.throughput.input_tokens_per_s,
            r.throughput.output_tokens_per_s,
            r.throughput.total_tokens_per_s,
            l.ttft.p50,
            l.ttft.p99,
            l.ttft_uncorrected.p99,
            l.tpot.p50,
            l.itl.p50,
            l.e2e.p50,
            l.e2e.p99,
            l.e2e_uncorrected.p99,
            r.schedule_lag_ms.p99,
            r.concurrency_achieved.mean
        )?;
    }
    Ok(())
}

/// `--records`: one JSON line per request, with the run's label.
pub fn write_records(rep: &BenchReport, records: &[Vec<RequestRecord>], mut w: impl Write) -> io::Result<()> {
    for (run, recs) in rep.runs.iter().zip(records) {
        for r in recs {
            write_record_line(&run.label, r, &mut w)?;
        }
    }
    Ok(())
}

/// One `--records` line: the record's fields plus `run`, the label of its load point.
pub fn write_record_line(run_label: &str, r: &RequestRecord, mut w: impl Write) -> io::Result<()> {
    let mut v = serde_json::to_value(r)?;
    if let Some(o) = v.as_object_mut() {
        o.insert("run".into(), serde_json::Value::String(run_label.to_string()));
    }
    serde_json::to_writer(&mut w, &v)?;
    writeln!(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_text_in_the_header_is_shown_with_its_control_characters_escaped() {
        assert_eq!(shown("m\u{1b}[31m\nx\u{7}"), "m\\u{1b}[31m\\nx\\u{7}");
        assert_eq!(shown("Qwen/Qwen3-32B"), "Qwen/Qwen3-32B");
    }

    #[test]
    fn a_backtick_in_outside_text_cannot_end_its_markdown_code_span() {
        assert_eq!(code_span("Qwen/Qwen3-32B"), "`Qwen/Qwen3-32B`");
        assert_eq!(code_span("a`b"), "``a`b``");
        assert_eq!(code_span("``x"), "``` ``x ```");
    }

    #[test]
    fn a_change_that_rounds_to_zero_is_never_minus_zero() {
        assert_eq!(signed_pct(-0.001), "0%");
        assert_eq!(signed_pct(0.0), "0%");
        assert_eq!(signed_pct(0.124), "+12%");
        assert_eq!(signed_pct(-0.5), "-50%");
    }

    #[test]
    fn a_tail_percentile_from_few_samples_carries_its_count() {
        assert_eq!(tail(12.34, 4), "12.3 (n=4)");
        assert_eq!(tail(12.34, 100), "12.3");
        assert_eq!(tail(0.0, 0), "0.000");
    }
}
