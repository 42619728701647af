//! The report's text exporters over a built [`Report`]: the terminal summary and the Markdown
//! document (sweep tables, fabric tables, findings, next steps), each writing to `impl Write`, and
//! the words a number is said in wherever the report is shown (gains, record references, launch
//! command lines), shared with the HTML exporter and the CLI.

use super::*;

/// A POSIX-shell-quoted command line with its environment in front.
pub fn shell_line(f: &LaunchFingerprint) -> String {
    let q = crate::text::shell_quote;
    let env = f.env.iter().map(|(k, v)| format!("{k}={}", q(v)));
    env.chain(f.argv.iter().map(|a| q(a))).collect::<Vec<_>>().join(" ")
}

pub(crate) fn gain_words(g: Option<f64>) -> String {
    g.map_or("gain unknown".into(), |g| format!("{:+.0}%", (g - 1.0) * 100.0))
}

/// A next step's gain in words: the figure it is ranked by, what it rests on (calibrated on which
/// experiment, with the model's own figure beside it) and its interval.
pub fn step_gain_words(s: &StepLine) -> String {
    let Some(g) = s.gain else { return gain_words(None) };
    let mut w = gain_words(Some(g));
    if let Some(e) = s.calibrated_on {
        w += &format!(" calibrated on experiment {e}; uncalibrated {}", gain_words(s.raw_gain));
    } else {
        w += " uncalibrated";
    }
    if let Some(i) = &s.interval {
        w += &format!("; interval {}..{}", gain_words(Some(i.low)), gain_words(Some(i.high)));
    }
    w
}

/// The journal records a warning line stands for: its findings and experiments.
pub fn finding_records(f: &WarningLine) -> String {
    let ids: Vec<String> = f.findings.iter().map(|i| i.to_string()).collect();
    let mut s = format!("finding{} {}", if ids.len() > 1 { "s" } else { "" }, ids.join(", "));
    if !f.experiments.is_empty() {
        let e: Vec<String> = f.experiments.iter().map(|i| i.to_string()).collect();
        s += &format!("; experiment{} {}", if e.len() > 1 { "s" } else { "" }, e.join(", "));
    }
    s
}

/// The journal records a track-record line rests on.
pub fn track_records(t: &crate::verdict::TrackLine) -> String {
    let mut s = format!("prediction {}, against experiment {}", t.record, t.reference);
    if let Some(q) = t.question {
        s += &format!(", question {q}");
    }
    if let Some(e) = t.experiment {
        s += &format!(", measured by experiment {e}");
    }
    s
}

/// A track-record line in words (terminal, Markdown and the demo).
pub fn track_words(t: &crate::verdict::TrackLine) -> String {
    let cal = t
        .predicted_calibrated
        .map_or(String::new(), |c| format!(", calibrated {} (on experiment {})", gain_words(Some(c)), t.calibrated_on.unwrap_or(0)));
    let iv = t.interval.as_ref().map_or(String::new(), |i| format!(", interval {}..{}", gain_words(Some(i.low)), gain_words(Some(i.high))));
    let m = match (t.measured, t.inside) {
        (Some(m), Some(true)) => format!("measured {} (inside)", gain_words(Some(m))),
        (Some(m), Some(false)) => format!("measured {} (OUTSIDE the interval)", gain_words(Some(m))),
        (Some(m), None) => format!("measured {}", gain_words(Some(m))),
        (None, _) => "not measured yet".into(),
    };
    format!("{}: predicted {} by the model alone{cal}{iv}; {m} [{}]", t.step, gain_words(t.predicted_raw), track_records(t))
}

/// The terminal status: counts, then tasks grouped done / in progress / not done.
pub fn write_terminal(r: &Report, mut out: impl Write) -> io::Result<()> {
    // Rendered whole, then sent with outside text's control characters escaped (`text::term`).
    let mut w: Vec<u8> = Vec::new();
    write_terminal_raw(r, &mut w)?;
    out.write_all(crate::text::term(&String::from_utf8_lossy(&w)).as_bytes())
}

pub(super) fn write_terminal_raw(r: &Report, w: &mut Vec<u8>) -> io::Result<()> {
    writeln!(w, "campaign: {} on {} (engine {})", r.goal, r.model, r.engine)?;
    writeln!(w, "{}", r.standing.headline)?;
    writeln!(w, "tasks: {} done, {} in progress, {} not done", r.counts.done, r.counts.in_progress, r.counts.not_done)?;
    for (state, head) in [(TaskState::Done, "Done"), (TaskState::InProgress, "In progress"), (TaskState::NotDone, "Not done")] {
        writeln!(w, "\n{head}:")?;
        let lines: Vec<&TaskLine> = r.tasks.iter().filter(|t| t.state == state).collect();
        if lines.is_empty() {
            writeln!(w, "  (none)")?;
        }
        for t in lines {
            writeln!(w, "  [{}] {} -> {}", t.record, t.title, t.outcome)?;
        }
    }
    if !r.next_steps.is_empty() {
        writeln!(w, "\nNext steps:")?;
        for s in &r.next_steps {
            writeln!(w, "  {}. {}{} ({})", s.rank, if s.needs_person { "[needs a person] " } else { "" }, s.title, step_gain_words(s))?;
        }
    }
    if !r.track_record.is_empty() {
        writeln!(w, "\nTrack record (predicted against measured gain):")?;
        for t in &r.track_record {
            writeln!(w, "  {}", track_words(t))?;
        }
    }
    if let Some(s) = &r.stop_reason {
        writeln!(w, "\nNothing left: {s}")?;
    }
    Ok(())
}

/// The Markdown sweep tables: every measured point beside the model's prediction, and the model's
/// step by term at each experiment's best point.
pub(super) fn write_markdown_sweeps(r: &Report, w: &mut impl Write) -> io::Result<()> {
    if r.curves.is_empty() {
        return Ok(());
    }
    writeln!(w, "\n### Sweeps (bench, with `servetune plan`'s prediction)\n")?;
    writeln!(w, "| experiment | concurrency | output tok/s | predicted tok/s | model alone tok/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p90 ms | TPOT p99 ms |")?;
    writeln!(w, "|---|---|---|---|---|---|---|---|---|---|")?;
    for c in &r.curves {
        for p in &c.points {
            let knee = if c.knee_concurrency == Some(p.measured.concurrency) { " (knee)" } else { "" };
            writeln!(
                w,
                "| {} | {}{knee} | {:.1} | {} | {} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} |",
                c.experiment,
                p.measured.concurrency,
                p.measured.output_tok_s,
                p.predicted_output_tok_s.map_or("-".into(), |v| match c.calibrated_on {
                    Some(e) => format!("{v:.1} (calibrated on experiment {e})"),
                    None => format!("{v:.1}"),
                }),
                p.uncalibrated_output_tok_s.map_or("-".into(), |v| format!("{v:.1}")),
                p.measured.ttft_p50_ms,
                p.measured.ttft_p99_ms,
                p.measured.tpot_p50_ms,
                p.measured.tpot_p90_ms,
                p.measured.tpot_p99_ms
            )?;
        }
    }
    if !r.breakdown.is_empty() {
        writeln!(w, "\n### Step time by term (the model, ms)\n")?;
        writeln!(w, "| experiment | concurrency | weights | KV | compute | communication | overhead | prefill | step | bottleneck |")?;
        writeln!(w, "|---|---|---|---|---|---|---|---|---|---|")?;
        for b in &r.breakdown {
            let s = &b.step;
            writeln!(
                w,
                "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
                b.experiment,
                s.concurrency,
                s.weights_ms,
                s.kv_ms,
                s.compute_ms,
                s.communication_ms,
                s.overhead_ms,
                s.prefill_ms,
                s.total_ms,
                md(&s.bottleneck)
            )?;
        }
    }
    Ok(())
}

/// A measured value as the report prints it: 3 significant digits or more.
pub(crate) fn measured_words(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The Markdown tables of each environment's measured bandwidth and latency, and of its measured
/// NCCL all-reduce.
pub(super) fn write_markdown_fabric(r: &Report, w: &mut impl Write) -> io::Result<()> {
    for a in &r.allreduce {
        writeln!(w, "\n### NCCL all-reduce: {} (fabric record {})\n", md(&a.environment), a.record)?;
        writeln!(
            w,
            "Measured by `servetune fabric allreduce` with NCCL's defaults, recorded from {}; the predictions in this environment price NCCL's all-reduces from it (`plan --allreduce`).\n",
            md(&a.source)
        )?;
        let (head, rows) = a.table();
        writeln!(w, "| size | {} |\n|---|{}", head.join(" | "), "---|".repeat(head.len()))?;
        for (size, cells) in rows {
            writeln!(w, "| {size} | {} |", cells.join(" | "))?;
        }
    }
    for f in &r.fabric {
        let m = &f.matrices;
        writeln!(w, "\n### GPU-to-GPU bandwidth and latency: {} (fabric record {})\n", md(&f.environment), f.record)?;
        writeln!(
            w,
            "Measured by `servetune fabric p2p` ({} backend), recorded from {}{}.",
            md(&m.backend),
            md(&f.source),
            m.link.as_ref().map_or(String::new(), |l| format!("; the link `servetune plan --fabric` takes: {l}"))
        )?;
        for x in [&m.bandwidth, &m.latency] {
            writeln!(w, "\n{} ({}), row: from GPU, column: to GPU\n", x.title, x.unit)?;
            let head: Vec<String> = m.gpus.iter().map(|g| format!("GPU{g}")).collect();
            writeln!(w, "| from \\ to | {} |\n|---|{}", head.join(" | "), "---|".repeat(head.len()))?;
            for (g, row) in m.gpus.iter().zip(&x.values) {
                let cells: Vec<String> = row.iter().map(|v| v.map_or("-".into(), measured_words)).collect();
                writeln!(w, "| GPU{g} | {} |", cells.join(" | "))?;
            }
        }
    }
    Ok(())
}

/// The Markdown report.
pub fn write_markdown(r: &Report, mut w: impl Write) -> io::Result<()> {
    writeln!(w, "# Campaign status: {}\n", md(&r.goal))?;
    writeln!(
        w,
        "Model {}, engine {}. Tasks: **{} done, {} in progress, {} not done**.\n",
        md(&r.model),
        md(&r.engine),
        r.counts.done,
        r.counts.in_progress,
        r.counts.not_done
    )?;
    writeln!(w, "{}\n", md(&r.standing.headline))?;
    for (state, head) in [(TaskState::Done, "Done"), (TaskState::InProgress, "In progress"), (TaskState::NotDone, "Not done")] {
        writeln!(w, "## {head}\n")?;
        let lines: Vec<&TaskLine> = r.tasks.iter().filter(|t| t.state == state).collect();
        if lines.is_empty() {
            writeln!(w, "- (none)")?;
        }
        for t in lines {
            writeln!(w, "- {} ({}): {}", md(&t.title), md(&t.record), md(&t.outcome))?;
        }
        writeln!(w)?;
    }
    write_markdown_launches_findings_results(r, &mut w)?;
    write_markdown_sweeps(r, &mut w)?;
    write_markdown_fabric(r, &mut w)?;
    writeln!(w, "\n## Analysis\n")?;
    for a in &r.analysis {
        writeln!(w, "- {}", md(a))?;
    }
    write_markdown_track(r, &mut w)?;
    writeln!(w, "\n## Next steps\n")?;
    for s in &r.next_steps {
        writeln!(
            w,
            "{}. {}{} ({}): {} [evidence: {}]",
            s.rank,
            if s.needs_person { "(needs a person) " } else { "" },
            md(&s.title),
            md(&step_gain_words(s)),
            md(&s.basis),
            md(&s.evidence.join(", "))
        )?;
    }
    if let Some(s) = &r.stop_reason {
        writeln!(w, "Nothing left: {}", md(s))?;
    }
    if !r.open_questions.is_empty() {
        writeln!(w, "\n## Open questions\n")?;
        for q in &r.open_questions {
            writeln!(w, "- Q{}: {} ({})", q.id, md(&q.text), md(&q.how))?;
        }
    }
    Ok(())
}

/// The Markdown launch commands, findings and results table.
fn write_markdown_launches_findings_results(r: &Report, w: &mut impl Write) -> io::Result<()> {
    writeln!(w, "## Working launch commands\n")?;
    for l in &r.launch_commands {
        writeln!(
            w,
            "Experiment {} (engine version {}):\n\n{fence}sh\n{}\n{fence}\n",
            l.experiment,
            md(l.engine_version.as_deref().unwrap_or("unknown")),
            crate::text::term(&l.command),
            fence = crate::text::fence(&l.command)
        )?;
    }
    writeln!(w, "## Warnings and findings\n")?;
    for f in &r.warnings {
        writeln!(
            w,
            "- **{}** ({}, {}): {}. Fix: {}",
            md(&f.title),
            md(f.severity.name()),
            finding_records(f),
            md(&f.evidence),
            md(&f.fix)
        )?;
    }
    writeln!(w, "\n## Results\n\n| experiment | configuration | state | best output tok/s | at concurrency | TPOT p90 ms | knee | failure |\n|---|---|---|---|---|---|---|---|")?;
    let num = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.1}"));
    for x in &r.results {
        writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            x.experiment,
            md(&x.title),
            x.state.as_str(),
            num(x.best_output_tok_s),
            x.at_concurrency.map_or("-".into(), |c| c.to_string()),
            num(x.tpot_p90_ms),
            x.knee_concurrency.map_or("-".into(), |c| c.to_string()),
            md(x.failure.as_deref().unwrap_or("-"))
        )?;
    }
    Ok(())
}

/// The Markdown track record and calibrations.
fn write_markdown_track(r: &Report, w: &mut impl Write) -> io::Result<()> {
    writeln!(w, "\n## Track record\n")?;
    if r.track_record.is_empty() {
        writeln!(w, "- (no step with a predicted gain taken yet)")?;
    }
    for t in &r.track_record {
        writeln!(w, "- {}", md(&track_words(t)))?;
    }
    if !r.calibrations.is_empty() {
        writeln!(w, "\n### Calibrations (the model fitted to each measured sweep)\n")?;
        writeln!(w, "| fitted to | environment | fitted factors | rms log error | points | used |\n|---|---|---|---|---|---|")?;
        for c in &r.calibrations {
            let f = &c.factors;
            writeln!(
                w,
                "| experiment {} | {} | {} | {:.3} | {} | {} |",
                c.experiment,
                md(&c.environment),
                md(&f.factors.words()),
                f.rms_log_error,
                f.points,
                c.used_words()
            )?;
        }
    }
    Ok(())
}
