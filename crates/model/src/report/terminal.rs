//! The terminal rendering of a plan report: the answer first, then the points, memory, ranked
//! plans, fixes, what-ifs and calibration; `--explain` adds the step-time terms.

use super::*;

/// The terminal report. `explain`: the bottleneck at every concurrency (else only at the last).
pub fn write_terminal(r: &PlanReport, explain: bool, mut w: impl Write) -> io::Result<()> {
    write_header(r, &mut w)?;
    write_memory(r, &mut w)?;
    if explain {
        write_points(r, explain, &mut w)?;
    } else {
        write_points_brief(r, &mut w)?;
    }
    if let Some(sat) = &r.saturation {
        writeln!(
            w,
            "\nsaturation: {:.0} tok/s at concurrency {}: {}",
            sat.output_tokens_per_s,
            sat.concurrency,
            saturation_words(&sat.reason)
        )?;
    }
    write_fixes(r, &mut w)?;
    write_ranked(r, &mut w)?;
    write_launches(r, &mut w)?;
    write_versus(r, &mut w)?;
    write_calibration(r, &mut w)
}

fn write_header(r: &PlanReport, w: &mut impl Write) -> io::Result<()> {
    let s = &r.scenario;
    let p = &r.params;
    writeln!(
        w,
        "servetune plan  {} ({:.0}B total, {:.1}B active)  {}  on {} x {}  link {}  {}",
        r.model,
        p.total / 1e9,
        p.active / 1e9,
        s.quant.label(&s.model),
        s.plan.gpus,
        s.gpu.name,
        s.link.name,
        s.plan.label()
    )?;
    write_answer(r, w)?;
    writeln!(
        w,
        "  input {} / output {} tokens; link {}: alpha {:.1} us, beta {:.1} GB/s ({})",
        s.input_len,
        s.output_len,
        s.link.kind.describe(),
        s.link.alpha_us,
        s.link.beta_gbs,
        s.link.source
    )?;
    if r.engine_release.version.is_some() {
        let features: Vec<String> = r
            .engine_release
            .features()
            .iter()
            .map(|f| format!("{} {} (since {})", f.feature, if f.on { "on" } else { "off" }, f.since))
            .collect();
        writeln!(w, "  engine {}: {}", r.engine_release.label(), features.join("; "))?;
    }
    if s.measured_custom_allreduce() {
        let scaled = if s.measured_custom_allreduce_scaled() {
            format!(", scaled by the model's ratio of the given link to the catalog {}", s.link.name)
        } else {
            String::new()
        };
        writeln!(
            w,
            "  all-reduce: {}'s custom kernel at its measured latency on {} x {} up to 8 MiB (AIConfigurator's table in crates/model/data/validation/comm.toml){scaled}, NCCL beyond",
            s.engine.serving.name(),
            s.plan.tp,
            s.gpu.name
        )?;
    }
    if let Some(m) = s.measured_allreduce.as_deref().filter(|m| s.plan.tp > 1 && m.prices(&s.link.name, &s.gpu.name)) {
        let ranks: Vec<String> = m.runs.iter().map(|r| r.ranks().to_string()).collect();
        let scaled = if m.runs.iter().any(|r| r.ranks() == s.plan.tp) {
            String::new()
        } else {
            format!("; TP {} was not measured: the nearest run's ratio to the model is carried over", s.plan.tp)
        };
        writeln!(
            w,
            "  all-reduce: NCCL as measured on the box ({}, {} ranks) wherever the engine runs NCCL within the node (not its own custom kernel){scaled}",
            m.source,
            ranks.join(", ")
        )?;
    }
    if let Some(c) = &s.cluster {
        writeln!(
            w,
            "  nodes: {} x {} GPUs, {} NICs per node; net {} ({}): alpha {:.1} us, beta {:.1} GB/s per NIC ({})",
            c.nodes,
            c.gpus_per_node,
            c.nics_per_node,
            c.net.name,
            c.net.kind.describe(),
            c.net.alpha_us,
            c.net.beta_gbs,
            c.net.source
        )?;
    }
    let e = &s.engine;
    writeln!(
        w,
        "  engine: {}, overhead {:.1} ms/step + {} us per running request, cuda-graphs {}, overlap {}, mixed-prefill {}, memory eff {:.2} (attention weights {:.2}{}), GEMM eff {:.2}, comm x{:.2}",
        e.serving.name(),
        s.overhead_ms(),
        e.request_step_us,
        if e.cuda_graphs { "on" } else { "off" },
        e.overlap.name(),
        if e.mixed_prefill { "on" } else { "off" },
        s.scaled(e.hbm_efficiency),
        s.dense_stream_efficiency(s.quant.attention),
        if s.model.moe.is_some() {
            let from = if e.routing_skew == crate::predict::Engine::default().routing_skew {
                "from AIConfigurator's MoE kernel timings"
            } else {
                "stated by --routing-skew"
            };
            // MXFP4's table rate is a slope (kernels.rs): say so, as it is not the achieved share.
            let slope = if s.expert_rate_is_marginal() { " (the MXFP4 kernel's marginal rate; its fixed part is in the per-kernel floors)" } else { "" };
            format!(", experts {:.2}{slope}, router skew {:.2} ({from})", s.expert_stream_efficiency(), e.routing_skew)
        } else {
            String::new()
        },
        e.gemm_efficiency,
        e.comm_scale
    )?;
    if let Some(words) = super::early_release_words(e, r.calibration.is_some()) {
        writeln!(w, "  early release: {words}")?;
    }
    Ok(())
}

fn write_memory(r: &PlanReport, w: &mut impl Write) -> io::Result<()> {
    let m = &r.memory_per_gpu_gb;
    let s = &r.scenario;
    writeln!(
        w,
        "\nmemory per GPU: {:.1} GB weights + {:.1} GB workspace + {:.1} GB KV{} of {:.1} GB usable ({:.3} of the {:.1} GB the driver reports: {}); KV {:.1} KB/token in {}; {} tokens; {} requests at a mean context of {} tokens (prompt + half the output)",
        m.weights_gb,
        m.workspace_gb,
        m.kv_gb,
        if m.state_gb > 0.0 { format!(" + {:.1} GB linear-attention state", m.state_gb) } else { String::new() },
        m.usable_gb,
        m.mem_fraction,
        m.capacity_gb,
        s.mem_share_origin(),
        m.kv_bytes_per_token / 1e3,
        super::kv_cache_words(s),
        r.max_kv_tokens, s.kv_concurrency(), s.input_len + s.output_len / 2
    )?;
    if let (Some(pool), Some(slots)) = (s.state_pool(), s.state_slots()) {
        writeln!(
            w,
            "linear-attention state: {:.1} GB per GPU in the engine's own pool ({}), {slots} requests' states sized at {:.1} MB each; a running request keeps {} of them",
            m.state_gb,
            match pool.slots {
                crate::predict::StateSlots::Share(r) => format!("{r:.2} of the KV pool's memory"),
                crate::predict::StateSlots::Fixed(n) => format!("a fixed {n} states"),
            },
            s.state_slot_bytes() / 1e6,
            pool.per_running
        )?;
    }
    if let (cap, limit @ (RunningLimit::Stated | RunningLimit::EngineDefault | RunningLimit::StatePool)) = s.running_limit() {
        writeln!(w, "running cap: {} {cap} requests at once", limit.words())?;
    }
    if let Some(g) = s.graph_max_batch().filter(|_| s.engine.cuda_graphs) {
        writeln!(
            w,
            "CUDA graphs: decode batches up to {g} per scheduler replay a graph; a larger one runs eagerly (+{:.1} ms of launches per step)",
            s.launches_ms()
        )?;
    }
    if let Some(err) = &r.fit_error {
        writeln!(w, "DOES NOT FIT: {err}")?;
    }
    if let Some(f) = &r.fit_suggestion {
        writeln!(w, "smallest change that fits: {}", suggestion_words(f))?;
    }
    Ok(())
}

fn write_points(r: &PlanReport, explain: bool, w: &mut impl Write) -> io::Result<()> {
    if r.points.is_empty() {
        return Ok(());
    }
    let full = r.scenario.engine.overlap == Overlap::Full;
    writeln!(
        w,
        "\nstep time by term (ms); step = max(weights + kv, compute) + comm + overhead + prefill{}",
        if full { " (comm hidden: max of the three)" } else { "" }
    )?;
    let (h, rows) = point_rows(&r.points);
    write!(w, "{}", table(&h, &rows))?;
    writeln!(w, "conc: requests offered; running: requests the KV cache and running limit admit (the rest queue)")?;
    write_client(r, w)?;
    writeln!(w, "\noutput tok/s over concurrency{}", if r.workload.is_some() { " (what the benchmark client measures)" } else { "" })?;
    write!(w, "{}", ascii_curve(&r.points))?;
    writeln!(w, "\nbottleneck:")?;
    let shown: Vec<&Point> = if explain { r.points.iter().collect() } else { r.points.last().into_iter().collect() };
    for p in shown {
        writeln!(w, "  {}", point_words(p))?;
        if explain {
            writeln!(w, "    {}", effects_words(p))?;
        }
    }
    Ok(())
}

fn write_client(r: &PlanReport, w: &mut impl Write) -> io::Result<()> {
    let Some(wl) = &r.workload else { return Ok(()) };
    let count =
        wl.requests.map_or_else(|| format!("{} x concurrency", crate::workload::DEFAULT_REQUESTS_PER_CONCURRENCY), |n| n.to_string());
    writeln!(
        w,
        "\nwhat a benchmark client measures (closed loop, {count} requests, input {}, output {}; the engine run in virtual time):",
        wl.input.label(),
        wl.output.label()
    )?;
    let (h, rows) = client_rows(&r.points);
    write!(w, "{}", table(&h, &rows))?;
    writeln!(w, "bench tok/s: output tokens over the whole run (prefill, queueing, ramp-up and tail included); steady tok/s: every request running, prefill amortized")
}

fn write_fixes(r: &PlanReport, w: &mut impl Write) -> io::Result<()> {
    if r.fixes.is_empty() {
        return Ok(());
    }
    writeln!(w, "\nwhat gains most (best throughput with {}):", ranking_words(r))?;
    for f in &r.fixes {
        writeln!(w, "  {}  {} -> {:.0} tok/s: {}", gain_words(f.gain), f.fix, f.output_tokens_per_s, f.how)?;
    }
    Ok(())
}

/// A gain over the current plan as a signed percentage ("new" when the current plan meets no
/// objective).
pub(super) fn gain_words(gain: Option<f64>) -> String {
    gain.map_or_else(|| "new".into(), |g| signed_pct(g - 1.0))
}

/// A fraction as a signed whole percentage; a change that rounds to zero reads "+0%", never "-0%".
/// What the rates of rankings and what-ifs are, when a benchmark workload was run.
fn client_words(r: &PlanReport) -> &'static str {
    if r.workload.is_some() {
        "; tok/s and TPOT (p50): what the benchmark client measures at that concurrency (virtual time)"
    } else {
        ""
    }
}

fn signed_pct(frac: f64) -> String {
    let pct = (frac * 100.0).round();
    if pct == 0.0 {
        "+0%".into()
    } else {
        format!("{pct:+.0}%")
    }
}

fn write_ranked(r: &PlanReport, w: &mut impl Write) -> io::Result<()> {
    if r.ranked_plans.is_empty() {
        return Ok(());
    }
    let multi = r.scenario.cluster.as_ref();
    let on = multi.map_or(String::new(), |c| format!(" ({} nodes x {}, net {})", c.nodes, c.gpus_per_node, c.net.name));
    writeln!(w, "\nranked plans on {} GPUs{on} ({}):", r.scenario.plan.gpus, ranking_words(r))?;
    let rows: Vec<Vec<String>> = r
        .ranked_plans
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let mut row = vec![
                x.label.clone(),
                x.concurrency.to_string(),
                format!("{:.0}", x.output_tokens_per_s),
                format!("{:.0}-{:.0}", x.output_tokens_per_s_low, x.output_tokens_per_s_high),
                match (i, x.tied_with_best) {
                    (0, _) => "best".into(),
                    (_, true) => "tied".into(),
                    _ => String::new(),
                },
                format!("{:.1}", x.tokens_per_s_per_gpu),
                format!("{:.1}", x.tpot_ms),
                gain_words(x.gain),
            ];
            if multi.is_some() {
                row.push(bound_words(&x.bottleneck));
            }
            row
        })
        .collect();
    let mut headers = vec!["plan", "at conc", "out tok/s", "interval", "best?", "tok/s/GPU", "TPOT ms", "vs current"];
    if multi.is_some() {
        headers.push("bound by");
    }
    write!(w, "{}", table(&headers, &rows))?;
    writeln!(
        w,
        "at conc: the concurrency giving the plan's most output under the objectives; interval: the rate's {}; best?: tied with the best (within the model's median error); vs current: over the current plan's best{}",
        r.ranked_plans.first().map_or(String::new(), |x| format!("{:.0}% interval", x.interval.coverage * 100.0)),
        client_words(r)
    )?;
    if let (Some(_), Some(top)) = (multi, r.ranked_plans.first()) {
        writeln!(w, "best {}: {}", top.label, bottleneck_words(&top.bottleneck))?;
    }
    Ok(())
}

/// A bottleneck's term in a word or two, naming the network when communication crosses nodes.
fn bound_words(b: &Bottleneck) -> String {
    match b {
        Bottleneck::Communication { across: Some(a), .. } if a.tp_nodes > 1 => format!("TP over {}", a.net),
        Bottleneck::Communication { across: Some(a), .. } => format!("comm (PP over {})", a.net),
        Bottleneck::Communication { .. } => "communication".into(),
        Bottleneck::Weights { .. } => "weights".into(),
        Bottleneck::KvCache { .. } => "kv cache".into(),
        Bottleneck::Compute { .. } => "compute".into(),
        Bottleneck::Overhead { .. } => "overhead".into(),
        Bottleneck::Prefill { .. } => "prefill".into(),
    }
}

fn write_versus(r: &PlanReport, w: &mut impl Write) -> io::Result<()> {
    for v in &r.vs {
        writeln!(w, "\nwhat if {}:", v.change)?;
        let rows: Vec<Vec<String>> = r
            .points
            .iter()
            .zip(&v.points)
            .map(|(a, b)| {
                let (now, then) = (headline_rate(a), headline_rate(b));
                vec![
                    a.concurrency.to_string(),
                    format!("{now:.0}"),
                    format!("{then:.0}"),
                    signed_pct(then / now - 1.0),
                    format!("{:.1}", b.client.map_or(b.tpot_ms, |c| c.tpot_ms.p50)),
                ]
            })
            .collect();
        write!(w, "{}", table(&["conc", "now tok/s", "then tok/s", "change", "then TPOT ms"], &rows))?;
    }
    if !r.vs.is_empty() {
        writeln!(w, "now: the plan as given; then: with the change{}", client_words(r))?;
    }
    Ok(())
}

fn write_calibration(r: &PlanReport, w: &mut impl Write) -> io::Result<()> {
    let Some(f) = &r.calibration else { return Ok(()) };
    writeln!(w, "\ncalibration: {}; rms log error {:.3}", f.factors.words(), f.rms_log_error)?;
    for x in &f.residuals {
        writeln!(w, "  c={}: measured {:.0}, predicted {:.0} tok/s ({:+.1}%)", x.concurrency, x.measured, x.predicted, x.error * 100.0)?;
    }
    Ok(())
}

/// Why a plan's best concurrency is where it is, in words.
pub fn concurrency_words(c: u32, why: &ConcurrencyReason) -> String {
    match why {
        ConcurrencyReason::RunningLimit { requests, limit } => {
            format!("concurrency {c}: {} {requests} requests at once; more clients only queue", limit.words())
        }
        ConcurrencyReason::RangeEnd { max } => format!("concurrency {c}: the end of the range searched ({max}); higher was not tried"),
        ConcurrencyReason::Peak { next, next_tokens_per_s } => format!(
            "concurrency {c}: the most output of the concurrencies tried; at {next} the steady rate is {next_tokens_per_s:.0} tok/s, no more"
        ),
        ConcurrencyReason::Objective { next } => format!("concurrency {c}: at {next} an objective (--slo) is missed"),
    }
}

/// "80% interval 5,400-8,700 tok/s (23 validation test-set cases of hopper x sglang x moe)".
fn interval_words(i: &Interval, rate: f64) -> String {
    let (lo, hi) = i.of(rate);
    format!("{:.0}% interval {lo:.0}-{hi:.0} tok/s ({})", i.coverage * 100.0, i.source_words())
}

/// What the headline rate is: a benchmark client's measurement, or the steady state.
fn rate_words(r: &PlanReport) -> String {
    match &r.workload {
        Some(wl) => format!(
            "output tok/s a benchmark client would measure (closed loop, {} requests, input {}, output {})",
            wl.requests.map_or_else(|| format!("{} x concurrency", crate::workload::DEFAULT_REQUESTS_PER_CONCURRENCY), |n| n.to_string()),
            wl.input.label(),
            wl.output.label()
        ),
        None => "output tok/s in the steady state (every request running, prefill amortized)".into(),
    }
}

/// The one headline: with `--rank`, the best plan, its interval, ties, why that concurrency and
/// whether the search went past the asked range; without, the current plan's best point asked.
fn write_answer(r: &PlanReport, w: &mut impl Write) -> io::Result<()> {
    if let Some(top) = r.ranked_plans.first() {
        writeln!(w, "answer: {} at concurrency {}: {:.0} {}", top.label, top.concurrency, top.output_tokens_per_s, rate_words(r))?;
        writeln!(w, "  {}", interval_words(&top.interval, top.output_tokens_per_s))?;
        writeln!(w, "  {}", concurrency_words(top.concurrency, &top.concurrency_reason))?;
        if let Some(max) = r.concurrency_range.max.filter(|m| top.searched_up_to > *m) {
            writeln!(
                w,
                "  the best plan sat at the end of the asked range (--concurrency up to {max}), so every plan was searched further, up to the requests it runs at once (its KV cache or running cap)"
            )?;
        }
        let tied: Vec<&Ranked> = r.ranked_plans.iter().skip(1).filter(|x| x.tied_with_best).collect();
        if !tied.is_empty() {
            writeln!(
                w,
                "  tied (within the model's median error of {:.0}%, so it cannot order them): {}; to separate them, launch each (below) and run `servetune bench --url http://HOST:PORT --concurrency N` on each",
                top.interval.median_abs_error * 100.0,
                tied.iter().map(|x| format!("{} {:.0} tok/s at {}", x.label, x.output_tokens_per_s, x.concurrency)).collect::<Vec<_>>().join(", ")
            )?;
        }
        return Ok(());
    }
    // Under objectives, only the points that meet them can be the answer.
    let meeting: Vec<Point> = r.points.iter().filter(|p| crate::rank::meets(&r.scenario, p, &r.slos)).cloned().collect();
    if !r.slos.is_empty() && !r.points.is_empty() && meeting.is_empty() {
        writeln!(
            w,
            "answer: none: {} meets {} at no concurrency asked; relax the objectives (--rank searches every plan on these GPUs for one that meets them)",
            r.scenario.plan.label(),
            r.slos.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")
        )?;
        return Ok(());
    }
    let Some(best) = plateau_start(&meeting) else { return Ok(()) };
    let rate = headline_rate(best);
    writeln!(w, "answer: {} at concurrency {}: {rate:.0} {}", r.scenario.plan.label(), best.concurrency, rate_words(r))?;
    writeln!(w, "  {}", interval_words(&crate::interval::for_scenario(&r.scenario), rate))?;
    let top_asked = r.points.iter().map(|p| p.concurrency).max().unwrap_or(0);
    if best.concurrency == top_asked && r.max_concurrency > top_asked {
        writeln!(
            w,
            "  the highest concurrency asked; {} {} requests: give --concurrency up to {} (or --rank, which searches that far)",
            r.scenario.running_limit().1.words(),
            r.max_concurrency,
            r.max_concurrency
        )?;
    }
    Ok(())
}

/// How close to the best rate a point counts as reaching it: a benchmark cannot tell rates this
/// close apart, and behind a running cap the rates past it differ only by float rounding.
const PLATEAU_TOLERANCE: f64 = 1e-3;

/// The point the answer names: the lowest concurrency whose rate is within [`PLATEAU_TOLERANCE`]
/// of the best, so a plateau (a running cap, a full KV cache) is named where it starts, not at
/// the highest concurrency that only queues more requests. `None` without points.
fn plateau_start(points: &[Point]) -> Option<&Point> {
    let top = points.iter().map(headline_rate).filter(|r| r.is_finite()).fold(f64::NEG_INFINITY, f64::max);
    if !top.is_finite() {
        return points.first();
    }
    points.iter().filter(|p| headline_rate(p) >= top * (1.0 - PLATEAU_TOLERANCE)).min_by_key(|p| p.concurrency)
}

/// Without `--explain`: what a client measures at each concurrency with its interval, the
/// figures named, and the bottleneck at the last; the step-time terms stay behind `--explain`.
fn write_points_brief(r: &PlanReport, w: &mut impl Write) -> io::Result<()> {
    let (Some(last), Some(i)) = (r.points.last(), &r.interval) else { return Ok(()) };
    let rows: Vec<Vec<String>> = r
        .points
        .iter()
        .zip(&r.point_intervals)
        .map(|(p, pi)| {
            let (tpot, ttft) = p.client.map_or((p.tpot_ms, p.ttft_ms), |c| (c.tpot_ms.p50, c.ttft_ms.p50));
            vec![
                p.concurrency.to_string(),
                format!("{:.0}", pi.output_tokens_per_s),
                format!("{:.0}-{:.0}", pi.low, pi.high),
                format!("{tpot:.1}"),
                format!("{ttft:.0}"),
            ]
        })
        .collect();
    writeln!(w, "\n{}:", rate_words(r))?;
    write!(w, "{}", table(&["conc", "out tok/s", "interval", "TPOT p50 ms", "TTFT p50 ms"], &rows))?;
    writeln!(
        w,
        "interval: the {:.0}% interval of the rate ({}); --explain adds the steady-state rates and the step time by term",
        i.coverage * 100.0,
        i.source_words()
    )?;
    writeln!(w, "\nbottleneck:\n  {}", point_words(last))
}

/// The launch commands of the best plan and those tied with it (`--emit-launch DIR` writes every
/// ranked plan's as a script).
fn write_launches(r: &PlanReport, w: &mut impl Write) -> io::Result<()> {
    let shown: Vec<&Ranked> = r.ranked_plans.iter().filter(|x| x.tied_with_best).take(3).collect();
    for x in shown {
        let l = &x.launch;
        writeln!(w, "\nlaunch {} with {} (clients to port {}):", x.label, l.engine.name(), l.client_port)?;
        for s in &l.servers {
            if let Some((name, yaml)) = &s.config_file {
                writeln!(w, "  # {name}:\n{}", yaml.lines().map(|y| format!("  #   {y}")).collect::<Vec<_>>().join("\n"))?;
            }
            writeln!(w, "  CUDA_VISIBLE_DEVICES={} {}", s.cuda_visible_devices, crate::launch::command_line(l, &s.argv))?;
        }
        if let Some(router) = &l.router {
            writeln!(w, "  {}", crate::launch::command_line(l, router))?;
        }
        for n in &l.notes {
            writeln!(w, "  note: {n}")?;
        }
    }
    if !r.ranked_plans.is_empty() {
        writeln!(w, "(--emit-launch DIR writes every ranked plan's launch as a script)")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::tests::scenario;
    use crate::quant::Dtype;

    #[test]
    fn the_answer_names_where_a_plateau_starts_not_its_highest_concurrency() {
        let s = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie-host-staged", 8, 8);
        let at = |c: u32, rate: f64| Point { output_tokens_per_s: rate, ..s.point(c) };
        // Behind a running cap the rates past it differ by float rounding only.
        let capped = [at(8, 195.0), at(64, 632.0), at(128, 632.0 + 1e-10), at(256, 632.0 + 2e-10)];
        assert_eq!(plateau_start(&capped).map(|p| p.concurrency), Some(64));
        // A rate that still grows past the tolerance is the answer.
        let growing = [at(8, 195.0), at(64, 632.0), at(128, 640.0)];
        assert_eq!(plateau_start(&growing).map(|p| p.concurrency), Some(128));
        // A peak before the end.
        let peak = [at(8, 195.0), at(64, 700.0), at(128, 650.0)];
        assert_eq!(plateau_start(&peak).map(|p| p.concurrency), Some(64));
        assert!(plateau_start(&[]).is_none());
    }
}
