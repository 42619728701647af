//! The terminal view of a [`TraceReport`].

use std::io::{self, Write};

use crate::report::TraceReport;
use crate::steps::{Phase, PhaseSource, Segmentation};

fn segmentation(s: Segmentation) -> &'static str {
    match s {
        Segmentation::StepAnnotations => "the engine's step annotations",
        Segmentation::CudaGraphs => "CUDA graph launches",
        Segmentation::IdleGaps => "idle gaps",
    }
}

fn phase(p: Phase) -> &'static str {
    match p {
        Phase::Prefill => "prefill",
        Phase::Decode => "decode",
    }
}

fn source(s: PhaseSource) -> &'static str {
    match s {
        PhaseSource::Annotation => "annotation name",
        PhaseSource::CudaGraph => "graph-launched or eager",
        PhaseSource::Duration => "duration against the median",
    }
}

fn short(name: &str, n: usize) -> String {
    if name.chars().count() <= n {
        name.to_string()
    } else {
        format!("{}...", name.chars().take(n - 3).collect::<String>())
    }
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
            "  {} GPU events left out: a start or duration that is not a time (negative, not finite, or over a day)",
            r.skipped_gpu_events
        )?;
    }
    writeln!(w, "  steps found by {} ({} GPU events outside steps)", segmentation(r.segmentation), r.events_outside_steps)?;
    for p in &r.phases {
        writeln!(w)?;
        writeln!(
            w,
            "{}: {} steps (phase by {}), median {:.3} ms, p90 {:.3} ms, mean {:.3} ms",
            phase(p.phase),
            p.steps,
            source(p.phase_source),
            p.median_ms,
            p.p90_ms,
            p.mean_ms
        )?;
        for c in &p.categories {
            writeln!(w, "  {:<22} {:>9.3} ms {:>6.1}%", c.category.name(), c.ms, c.pct)?;
        }
        writeln!(w, "  {:<22} {:>9.3} ms {:>6.1}%", "idle (host overhead)", p.idle_ms, p.idle_pct)?;
        writeln!(w, "  overlap between streams: {:.3} ms per step (counted once above)", p.overlap_ms)?;
        if p.nccl_calls_per_step > 0.0 {
            writeln!(w, "  NCCL: {:.1} calls per step, mean {:.1} us", p.nccl_calls_per_step, p.nccl_mean_us)?;
        }
    }
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
    }
    Ok(())
}
