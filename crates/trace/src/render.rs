//! The terminal view of a [`TraceReport`].

use std::io::{self, Write};

use crate::report::TraceReport;
use crate::steps::{PhaseSource, Segmentation};

/// How many steps the terminal lists one by one (`--json` has them all).
pub const STEPS_LISTED: usize = 12;

fn segmentation(r: &TraceReport) -> String {
    let fam = r.step_annotations.map_or("", |f| f.words());
    match r.segmentation {
        Segmentation::StepAnnotations => format!("the engine's step annotations on the GPU ({fam})"),
        Segmentation::CpuAnnotations => format!("the engine's step annotations on the host, mapped to the GPU by launch ({fam})"),
        Segmentation::CudaGraphs => "CUDA graph replays grouped per step (a step starts at its input copy)".into(),
        Segmentation::IdleGaps => format!("idle gaps over {} ms (no step annotations, no CUDA graphs)", r.gap_ms),
    }
}

fn source(s: PhaseSource) -> &'static str {
    match s {
        PhaseSource::Annotation => "kind from the annotation",
        PhaseSource::CudaGraph => "kind guessed: one graph replay is decode, eager is prefill",
        PhaseSource::Duration => "kind guessed: duration against the median",
    }
}

fn opt(v: Option<u64>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

/// A name from the trace file cut to `n` characters, its control characters shown escaped (C0,
/// DEL, C1): a kernel or annotation name cannot move the cursor or retitle the terminal.
fn short(name: &str, n: usize) -> String {
    let cut = if name.chars().count() <= n { name.to_string() } else { format!("{}...", name.chars().take(n - 3).collect::<String>()) };
    cut.chars().flat_map(|c| if c.is_control() { c.escape_default().collect::<Vec<_>>() } else { vec![c] }).collect()
}

/// Writes the report for a terminal.
pub fn terminal(r: &TraceReport, w: &mut impl Write) -> io::Result<()> {
    writeln!(w, "trace {}", r.file)?;
    writeln!(
        w,
        "  {} events, {} on the GPU: {:.2} ms of kernels, {:.2} ms busy (overlap counted once) over {:.2} ms",
        r.events, r.gpu_events, r.kernel_ms, r.busy_ms, r.span_ms
    )?;
    if r.skipped_gpu_events > 0 {
        writeln!(
            w,
            "  {} GPU events left out: a start or duration that is not a time (negative, not finite, or over a day), or a start more than a day from the other GPU events",
            r.skipped_gpu_events
        )?;
    }
    writeln!(w, "  {} steps found by {} ({} GPU events outside steps)", r.steps.len(), segmentation(r), r.events_outside_steps)?;
    writeln!(w, "  kernels no rule knew (other): {:.2}% of kernel time", r.other_pct)?;
    phases(r, w)?;
    steps(r, w)?;
    kernels(r, w)?;
    comparison(r, w)
}

/// Each phase's step figures and its time by category.
fn phases(r: &TraceReport, w: &mut impl Write) -> io::Result<()> {
    for p in &r.phases {
        writeln!(w)?;
        writeln!(
            w,
            "{}: {} steps ({}), median {:.3} ms, p90 {:.3} ms, mean {:.3} ms",
            p.phase.name(),
            p.steps,
            source(p.phase_source),
            p.median_ms,
            p.p90_ms,
            p.mean_ms
        )?;
        match (p.tokens_per_step, p.requests_per_step, p.us_per_token) {
            (Some(t), Some(q), Some(u)) => writeln!(w, "  {t:.1} tokens and {q:.1} requests per step (annotation), {u:.2} us per token")?,
            (None, Some(q), _) => writeln!(w, "  {q:.1} requests per step (annotation; tokens not given)")?,
            _ => {}
        }
        let per_token = p.us_per_token.is_some();
        for c in &p.categories {
            let tok = c.us_per_token.filter(|_| per_token).map_or(String::new(), |u| format!(" {u:>9.2} us/token"));
            writeln!(w, "  {:<22} {:>9.3} ms {:>6.1}%{tok}", c.category.name(), c.ms, c.pct)?;
        }
        writeln!(w, "  {:<22} {:>9.3} ms {:>6.1}%", "idle (host overhead)", p.idle_ms, p.idle_pct)?;
        writeln!(w, "  overlap between streams: {:.3} ms per step (counted once above)", p.overlap_ms)?;
        if p.nccl_calls_per_step > 0.0 || p.allreduce_calls_per_step > 0.0 {
            writeln!(
                w,
                "  all-reduces: {:.1} per step; NCCL: {:.1} calls per step, mean {:.1} us",
                p.allreduce_calls_per_step, p.nccl_calls_per_step, p.nccl_mean_us
            )?;
        }
    }
    Ok(())
}

/// The first steps, one line each.
fn steps(r: &TraceReport, w: &mut impl Write) -> io::Result<()> {
    if !r.steps.is_empty() {
        writeln!(w)?;
        let n = r.steps.len().min(STEPS_LISTED);
        writeln!(w, "steps ({} of {}; all with --json)", n, r.steps.len())?;
        writeln!(
            w,
            "  {:>4} {:>11} {:>9} {:<8} {:>7} {:>6} {:>7} {:>5}  annotation",
            "#", "start ms", "ms", "kind", "tokens", "reqs", "kernels", "AR"
        )?;
        for s in &r.steps[..n] {
            let kind = if s.phase_source.guessed() { format!("{}?", s.phase.name()) } else { s.phase.name().to_string() };
            writeln!(
                w,
                "  {:>4} {:>11.3} {:>9.3} {:<8} {:>7} {:>6} {:>7} {:>5}  {}",
                s.index,
                s.start_ms,
                s.ms,
                kind,
                opt(s.tokens),
                opt(s.requests),
                s.kernels,
                s.allreduce_calls,
                s.annotation.as_deref().map_or(String::new(), |a| short(a, 60))
            )?;
        }
        if r.steps.iter().any(|s| s.phase_source.guessed()) {
            writeln!(w, "  (kind?: guessed, no annotation says it)")?;
        }
    }
    Ok(())
}

/// The top kernels, the NCCL calls and the kernels no rule knew.
fn kernels(r: &TraceReport, w: &mut impl Write) -> io::Result<()> {
    writeln!(w)?;
    writeln!(w, "top kernels")?;
    for k in &r.top_kernels {
        writeln!(w, "  {:>9.3} ms {:>5.1}% {:>7}x  {:<20} {}", k.total_ms, k.pct, k.count, k.category.name(), short(&k.name, 80))?;
    }
    if !r.nccl.is_empty() {
        writeln!(w)?;
        writeln!(w, "NCCL")?;
        for n in &r.nccl {
            writeln!(
                w,
                "  {:<14} {}/{}: {} calls, mean {:.1} us, {:.3} ms",
                n.collective,
                n.algorithm.name(),
                n.protocol.name(),
                n.count,
                n.mean_us,
                n.total_ms
            )?;
        }
    }
    if !r.other_kernels.is_empty() {
        writeln!(w)?;
        writeln!(w, "kernels no rule knew (category other): {}", r.other_kernels.len())?;
        for k in &r.other_kernels {
            writeln!(w, "  {:>9.3} ms {:>7}x  {}", k.total_ms, k.count, short(&k.name, 100))?;
        }
    }
    Ok(())
}

/// The model's step split beside the measured one, when one was asked for.
fn comparison(r: &TraceReport, w: &mut impl Write) -> io::Result<()> {
    if let Some(c) = &r.comparison {
        writeln!(w)?;
        writeln!(
            w,
            "predicted ({}, concurrency {}) against measured decode step: {:.3} ms against {:.3} ms",
            c.predicted.label, c.predicted.concurrency, c.predicted.step_ms, c.measured_step_ms
        )?;
        writeln!(w, "  {:<48} {:>18} {:>18}", "", "predicted", "measured")?;
        for row in &c.rows {
            writeln!(
                w,
                "  {:<48} {:>9.3} ms {:>4.0}% {:>9.3} ms {:>4.0}%",
                row.term.words(),
                row.predicted_ms,
                row.predicted_pct,
                row.measured_ms,
                row.measured_pct
            )?;
        }
        writeln!(w, "  largest mismatch: {}", c.summary)?;
        if let Some(a) = &c.allreduce_calls {
            writeln!(w, "  all-reduce calls: {}", a.summary)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_name_from_the_trace_reaches_the_terminal_with_its_control_characters_escaped() {
        let shown = super::short("evil\u{1b}]0;pwned\u{7}\u{1b}[31mRED\u{9b}31m", 100);
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert_eq!(shown, "evil\\u{1b}]0;pwned\\u{7}\\u{1b}[31mRED\\u{9b}31m");
        assert_eq!(super::short("ampere_sgemm_128x64_nn", 10), "ampere_...");
    }
}
