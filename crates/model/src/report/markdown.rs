//! The Markdown rendering of a plan report (`servetune plan --markdown`).

use super::terminal::gain_words;
use super::*;

/// Markdown.
pub fn write_markdown(r: &PlanReport, mut w: impl Write) -> io::Result<()> {
    let s = &r.scenario;
    let nodes = s.cluster.as_ref().map_or(String::new(), |c| format!(", {} nodes over {}", c.nodes, c.net.name));
    writeln!(w, "# servetune plan: {} on {} x {} ({}, {}{nodes})\n", r.model, s.plan.gpus, s.gpu.name, s.plan.label(), s.link.name)?;
    let m = &r.memory_per_gpu_gb;
    writeln!(
        w,
        "- memory per GPU: {:.1} GB weights, {:.1} GB KV in {} ({} tokens, {} requests); the engine takes {:.3} of the GPU's memory ({})",
        m.weights_gb,
        m.kv_gb,
        super::kv_cache_words(s),
        r.max_kv_tokens,
        s.kv_concurrency(),
        m.mem_fraction,
        s.mem_share_origin()
    )?;
    if m.state_gb > 0.0 {
        writeln!(w, "- linear-attention state: {:.1} GB per GPU in the engine's own pool", m.state_gb)?;
    }
    if let (cap, limit @ (RunningLimit::Stated | RunningLimit::EngineDefault | RunningLimit::StatePool)) = s.running_limit() {
        writeln!(w, "- running cap: {} {cap} requests at once", limit.words())?;
    }
    if let Some(words) = super::early_release_words(&s.engine, r.calibration.is_some()) {
        writeln!(w, "- early release ({}): {words}", r.engine_release.label())?;
    }
    if let Some(err) = &r.fit_error {
        writeln!(w, "- **does not fit**: {err}")?;
    }
    if let Some(f) = &r.fit_suggestion {
        writeln!(w, "- smallest change that fits: {}", suggestion_words(f))?;
    }
    if !r.points.is_empty() {
        let (h, rows) = point_rows(&r.points);
        writeln!(w, "\n| {} |\n|{}", h.join(" | "), "---|".repeat(h.len()))?;
        for row in rows {
            writeln!(w, "| {} |", row.join(" | "))?;
        }
        writeln!(w)?;
        if r.workload.is_some() {
            let (h, rows) = client_rows(&r.points);
            writeln!(w, "What a benchmark client measures:\n\n| {} |\n|{}", h.join(" | "), "---|".repeat(h.len()))?;
            for row in rows {
                writeln!(w, "| {} |", row.join(" | "))?;
            }
            writeln!(w)?;
        }
        for p in &r.points {
            if r.workload.is_some() {
                writeln!(w, "- {}; {}", point_words(p), effects_words(p))?;
            } else {
                writeln!(w, "- {}", point_words(p))?;
            }
        }
    }
    if let Some(sat) = &r.saturation {
        writeln!(
            w,
            "\n**Saturation:** {:.0} tok/s at concurrency {}: {}",
            sat.output_tokens_per_s,
            sat.concurrency,
            saturation_words(&sat.reason)
        )?;
    }
    write_markdown_rankings(r, &mut w)
}

fn write_markdown_rankings(r: &PlanReport, w: &mut impl Write) -> io::Result<()> {
    if !r.fixes.is_empty() {
        writeln!(w, "\n## What gains most\n")?;
        for f in &r.fixes {
            writeln!(w, "- {}: {} ({:.0} tok/s): {}", gain_words(f.gain), f.fix, f.output_tokens_per_s, f.how)?;
        }
    }
    if !r.ranked_plans.is_empty() {
        writeln!(w, "\n## Ranked plans\n\n| plan | at conc | out tok/s | interval | tied with best | tok/s/GPU | vs current |\n|---|---|---|---|---|---|---|")?;
        for x in &r.ranked_plans {
            writeln!(
                w,
                "| {} | {} | {:.0} | {:.0}-{:.0} | {} | {:.1} | {} |",
                x.label,
                x.concurrency,
                x.output_tokens_per_s,
                x.output_tokens_per_s_low,
                x.output_tokens_per_s_high,
                if x.tied_with_best { "yes" } else { "" },
                x.tokens_per_s_per_gpu,
                gain_words(x.gain)
            )?;
        }
        if let Some(top) = r.ranked_plans.first() {
            writeln!(w, "\nInterval: {}. Launch of {}:\n\n```sh", top.interval.source_words(), top.label)?;
            for s in &top.launch.servers {
                writeln!(w, "CUDA_VISIBLE_DEVICES={} {}", s.cuda_visible_devices, crate::launch::command_line(&top.launch, &s.argv))?;
            }
            if let Some(router) = &top.launch.router {
                writeln!(w, "{}", crate::launch::command_line(&top.launch, router))?;
            }
            writeln!(w, "```")?;
        }
    }
    Ok(())
}
