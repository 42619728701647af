//! The `servetune.plan/1.2` document and its renderings (terminal with an ASCII curve, Markdown).
//! Decisions arrive typed ([`Bottleneck`], [`SaturationReason`], [`FitSuggestion`]); this is the
//! only place they become words.

use std::io::{self, Write};

use serde::Serialize;
use servetune_stats::{knee, LoadPoint, Slo, MIN_GAIN};

use crate::calibrate::Fit;
use crate::interval::Interval;
use crate::predict::{Bottleneck, Memory, Overlap, Point, Scenario};
use crate::quant::Dtype;
use crate::rank::{ConcurrencyRange, ConcurrencyReason, Fix, Ranked};
use crate::spec::ParamCounts;
use crate::workload::Workload;

/// Why throughput stops growing.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SaturationReason {
    /// The KV cache (or the running-request limit) holds no more requests; more concurrency queues.
    KvCapacity {
        /// Requests that run at once.
        requests: u32,
        /// Tokens each holds on average (input + half the output: the KV cache is paged).
        tokens_per_request: u32,
    },
    /// No higher concurrency adds [`MIN_GAIN`] or more throughput (the one saturation rule,
    /// `servetune_stats::knee`).
    Plateau {
        /// The gain threshold, a fraction.
        min_gain: f64,
        /// The highest concurrency looked at.
        up_to: u32,
    },
}

/// Where throughput stops growing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Saturation {
    /// The concurrency at the knee.
    pub concurrency: u32,
    /// Output tokens/s there.
    pub output_tokens_per_s: f64,
    /// Why.
    pub reason: SaturationReason,
}

/// A what-if comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Versus {
    /// The change as written (`--vs`).
    pub change: String,
    /// Predictions with it, at the same concurrencies.
    pub points: Vec<Point>,
}

/// More GPUs that make a plan fit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuSuggestion {
    /// GPU count.
    pub gpus: u32,
    /// The plan on them, e.g. `TP8+PP2`.
    pub plan: String,
}

/// The smallest changes that make a plan fit (either one suffices).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitSuggestion {
    /// The widest other published checkpoint format that fits.
    pub quant: Option<Dtype>,
    /// The fewest GPUs (a whole multiple) that fit.
    pub gpus: Option<GpuSuggestion>,
}

/// `servetune plan --json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanReport {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// The model's name.
    pub model: String,
    /// Its parameter counts.
    pub params: ParamCounts,
    /// Everything the prediction used.
    pub scenario: Scenario,
    /// Whether the weights and one request's KV fit.
    pub fits: bool,
    /// Why it does not fit, when it does not.
    pub fit_error: Option<String>,
    /// The smallest change that fits, when it does not.
    pub fit_suggestion: Option<FitSuggestion>,
    /// Memory per GPU.
    pub memory_per_gpu_gb: Memory,
    /// Tokens the deployment's KV cache holds.
    pub max_kv_tokens: u64,
    /// Requests that run at once.
    pub max_concurrency: u32,
    /// One prediction per requested concurrency (empty when it does not fit).
    pub points: Vec<Point>,
    /// Where throughput stops growing, if it does within the points.
    pub saturation: Option<Saturation>,
    /// Plans ranked under the objectives (`--rank`).
    pub ranked_plans: Vec<Ranked>,
    /// Fixes ranked by gain (`--rank`).
    pub fixes: Vec<Fix>,
    /// What-if comparisons (`--vs`).
    pub vs: Vec<Versus>,
    /// The calibration fit (`--calibrate`).
    pub calibration: Option<Fit>,
    /// The objectives ranking and fixes were judged under (`--slo`).
    pub slos: Vec<Slo>,
    /// The concurrencies ranking considered.
    pub concurrency_range: ConcurrencyRange,
    /// The benchmark workload of the points' client-measured figures (`None` when none was run).
    pub workload: Option<Workload>,
    /// How far the predicted rates may be off: the interval of this deployment's family from the
    /// validation residuals ([`crate::interval`]); `None` when it does not fit.
    pub interval: Option<Interval>,
    /// Each point's headline rate with its interval, in the order of `points`.
    pub point_intervals: Vec<PointInterval>,
}

/// One point's headline rate (what a benchmark client would measure, else the steady state) and
/// its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PointInterval {
    /// Closed-loop concurrency.
    pub concurrency: u32,
    /// The headline output tokens/s ([`headline_rate`]).
    pub output_tokens_per_s: f64,
    /// Low end of the interval, output tokens/s.
    pub low: f64,
    /// High end of the interval, output tokens/s.
    pub high: f64,
}

/// The interval of every point under `i`.
pub fn point_intervals(points: &[Point], i: &Interval) -> Vec<PointInterval> {
    points
        .iter()
        .map(|p| {
            let rate = headline_rate(p);
            let (low, high) = i.of(rate);
            PointInterval { concurrency: p.concurrency, output_tokens_per_s: rate, low, high }
        })
        .collect()
}

/// The document's schema and version.
pub const SCHEMA: &str = "servetune.plan/1.2";

/// Where the curve saturates: the KV cache (or running limit) capping the batch, or the knee of
/// [`servetune_stats::knee`], whichever comes first.
pub fn saturation(s: &Scenario, points: &[Point]) -> Option<Saturation> {
    let cap = s.max_concurrency();
    let kv = points.windows(2).position(|w| w[1].running <= w[0].running && w[0].running == cap).map(|i| Saturation {
        concurrency: points[i].running,
        output_tokens_per_s: points[i].output_tokens_per_s,
        reason: SaturationReason::KvCapacity { requests: cap, tokens_per_request: s.mean_context().round() as u32 },
    });
    let curve: Vec<LoadPoint> =
        points.iter().map(|p| LoadPoint { load: p.concurrency as f64, output_tokens_per_s: p.output_tokens_per_s }).collect();
    let plateau = knee(&curve).map(|i| Saturation {
        concurrency: points[i].concurrency,
        output_tokens_per_s: points[i].output_tokens_per_s,
        reason: SaturationReason::Plateau { min_gain: MIN_GAIN, up_to: points.iter().map(|p| p.concurrency).max().unwrap_or(0) },
    });
    match (kv, plateau) {
        (Some(a), Some(b)) => Some(if b.concurrency < a.concurrency { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The saturation reason in words.
pub fn saturation_words(r: &SaturationReason) -> String {
    match r {
        SaturationReason::KvCapacity { requests, tokens_per_request } => format!(
            "the KV cache (or the running-request limit) holds {requests} requests at a mean context of {tokens_per_request} tokens; more concurrency only queues"
        ),
        SaturationReason::Plateau { min_gain, up_to } => {
            format!("no higher concurrency up to {up_to} adds {:.0}% or more throughput", min_gain * 100.0)
        }
    }
}

/// A bottleneck in words and numbers.
pub fn bottleneck_words(b: &Bottleneck) -> String {
    let pct = b.share() * 100.0;
    match b {
        Bottleneck::Communication { step_ms, tp, link, allreduces, allreduce_us, qk_norm, across, .. } => {
            let over = match across {
                None => link.clone(),
                Some(a) if a.tp_nodes > 1 => {
                    format!("{link} within and {} across {} nodes{}", a.net, a.tp_nodes, if a.pp { ", PP sends too" } else { "" })
                }
                Some(a) => format!("{link} (PP sends across nodes over {})", a.net),
            };
            format!(
                "TP{tp} all-reduce over {over} is {pct:.0}% of the {step_ms:.1} ms step: {allreduces:.0} all-reduces x {allreduce_us:.1} us{} (plus a per-kernel floor each, counted in the overhead)",
                qk_norm.map_or(String::new(), |q| if q.us < 0.05 {
                    format!(" and {:.0} q/k-norm all-reduces within their kernel floors", q.count)
                } else {
                    format!(" and {:.0} q/k-norm all-reduces x {:.1} us", q.count, q.us)
                })
            )
        }
        Bottleneck::Weights { step_ms, gb_per_gpu, distinct_experts, busiest_ep_rank, mem_bw_gbs, .. } => {
            let experts = distinct_experts.map_or(String::new(), |d| {
                format!(" ({d:.0} distinct experts per MoE layer{})", if *busiest_ep_rank { " on the busiest EP rank" } else { "" })
            });
            format!("weight reads are {pct:.0}% of the {step_ms:.1} ms step: {gb_per_gpu:.1} GB per GPU per step{experts} at {mem_bw_gbs:.0} GB/s")
        }
        Bottleneck::KvCache { step_ms, gb_per_gpu, .. } => {
            format!("KV-cache reads are {pct:.0}% of the {step_ms:.1} ms step: {gb_per_gpu:.1} GB per GPU per step")
        }
        Bottleneck::Compute { step_ms, format, .. } => {
            format!("compute is {pct:.0}% of the {step_ms:.1} ms step ({} tensor cores)", format.name())
        }
        Bottleneck::Prefill { step_ms, .. } => format!("prefill mixed into decode is {pct:.0}% of the {step_ms:.1} ms step"),
        Bottleneck::Overhead { step_ms, overhead_ms, cuda_graphs, .. } => format!(
            "per-step overhead is {pct:.0}% of the {step_ms:.1} ms step ({overhead_ms:.1} ms{})",
            if *cuda_graphs { "" } else { ", no CUDA graphs" }
        ),
    }
}

/// A point's bottleneck as a sentence: "at concurrency N (only R run; the rest queue), ...".
pub fn point_words(p: &Point) -> String {
    let capped = if p.running < p.concurrency { format!(" (only {} run; the rest queue)", p.running) } else { String::new() };
    format!("at concurrency {}{capped}, {}", p.concurrency, bottleneck_words(&p.bottleneck))
}

/// The smallest change that fits, as a command-line hint ("use --quant nvfp4, or 16 GPUs (TP8+PP2)").
pub fn suggestion_words(f: &FitSuggestion) -> String {
    let mut parts = Vec::new();
    if let Some(q) = f.quant {
        parts.push(format!("use --quant {}", q.name()));
    }
    if let Some(g) = &f.gpus {
        parts.push(format!("{} GPUs ({})", g.gpus, g.plan));
    }
    if parts.is_empty() {
        "no published format and no more GPUs (up to 8x) fit; use a smaller model".into()
    } else {
        parts.join(", or ")
    }
}

/// The objectives and the concurrencies a ranking searched, in words.
fn ranking_words(r: &PlanReport) -> String {
    let searched = crate::rank::searched_range(r.concurrency_range, &r.ranked_plans);
    let mut s = slo_words(&r.slos, &searched);
    if searched != r.concurrency_range {
        s = if r.slos.is_empty() { String::new() } else { format!("{s}, ") } + "concurrency up to what each plan's KV cache holds";
    }
    s
}

fn slo_words(slos: &[Slo], range: &ConcurrencyRange) -> String {
    let mut parts = Vec::new();
    if let Some(c) = range.max {
        parts.push(format!("concurrency <= {c}"));
    }
    parts.extend(slos.iter().map(|s| s.to_string()));
    if parts.is_empty() {
        "no SLO".into()
    } else {
        parts.join(", ")
    }
}

/// Columns separated by two spaces, a dashed line under the header, no borders (the same style as
/// every servetune table).
const TABLE_STYLE: comfy_table::TableStyle = comfy_table::TableStyle::new()
    .header_lines(comfy_table::ContentLineStyle::none().junction(' '))
    .header_separator(comfy_table::LineStyle::none().fill('-').junction(' '))
    .content_lines(comfy_table::ContentLineStyle::none().junction(' '));

/// A table: the first column left-aligned, the others right-aligned.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut t = comfy_table::Table::new();
    t.load_style(TABLE_STYLE).set_header(headers.to_vec()).add_rows(rows.to_vec());
    for (i, c) in t.column_iter_mut().enumerate() {
        c.set_padding((0, 1));
        c.set_cell_alignment(if i == 0 { comfy_table::CellAlignment::Left } else { comfy_table::CellAlignment::Right });
    }
    t.lines().map(|l| l.trim_end().to_string() + "\n").collect()
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

/// The headline output rate of a point: what a benchmark client measures when a virtual run was
/// made, else the steady state.
pub fn headline_rate(p: &Point) -> f64 {
    p.client.map_or(p.output_tokens_per_s, |c| c.output_tokens_per_s)
}

/// An ASCII bar per concurrency, scaled to the largest throughput (the headline rate).
pub fn ascii_curve(points: &[Point]) -> String {
    let max = points.iter().map(headline_rate).fold(0.0, f64::max).max(1e-9);
    let mut s = String::new();
    for p in points {
        let r = headline_rate(p);
        let n = (r / max * 50.0).round() as usize;
        s += &format!("c={:<5} {:<50} {:.0} tok/s\n", p.concurrency, "#".repeat(n), r);
    }
    s
}

fn client_rows(points: &[Point]) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let h =
        vec!["conc", "requests", "bench tok/s", "steady tok/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms", "peak running"];
    let rows = points
        .iter()
        .filter_map(|p| p.client.map(|c| (p, c)))
        .map(|(p, c)| {
            vec![
                p.concurrency.to_string(),
                c.requests.to_string(),
                format!("{:.0}", c.output_tokens_per_s),
                format!("{:.0}", p.output_tokens_per_s),
                format!("{:.0}", c.ttft_ms.p50),
                format!("{:.0}", c.ttft_ms.p99),
                format!("{:.1}", c.tpot_ms.p50),
                format!("{:.1}", c.tpot_ms.p99),
                c.peak_running.to_string(),
            ]
        })
        .collect();
    (h, rows)
}

/// The share of each effect at a point, in words: the step's terms (weights, KV, compute,
/// communication, overhead, prefill) and, with a virtual run, how the client's figure falls from
/// the steady decode rate (prefill, ramp/tail) and how long requests queue.
pub fn effects_words(p: &Point) -> String {
    let st = &p.step_ms;
    let t = st.total.max(1e-12);
    let hidden = |v: f64, shown: bool| if shown { format!("{:.0}%", v / t * 100.0) } else { format!("{:.0}% (hidden)", v / t * 100.0) };
    let mem_bound = st.weights + st.kv >= st.compute;
    let mut s = format!(
        "steady step {:.1} ms: weights {}, KV {}, compute {}, communication {}, overhead {}, prefill {}",
        st.total,
        hidden(st.weights, mem_bound),
        hidden(st.kv, mem_bound),
        hidden(st.compute, !mem_bound),
        format_args!("{:.0}%", st.communication / t * 100.0),
        format_args!("{:.0}%", st.overhead / t * 100.0),
        format_args!("{:.0}%", st.prefill / t * 100.0)
    );
    if let Some(c) = &p.client {
        let e = &c.effects;
        // A share that rounds to zero reads "0%", never "-0%".
        let pct = |x: f64| format!("{:.0}%", if x.abs() < 0.005 { 0.0 } else { x * 100.0 });
        s += &format!(
            "; client {:.0} tok/s of a steady decode {:.0} tok/s at batch {}: the run's time is {} decode at the full batch, {} prefill, {} ramp-up/tail and partial batches",
            c.output_tokens_per_s,
            c.steady_decode_tokens_per_s,
            c.full_batch,
            pct(e.steady_decode),
            pct(e.prefill),
            pct(e.ramp_tail)
        );
        if e.queueing > 0.005 {
            s += &format!(
                "; requests wait {:.0}% of their latency for admission ({} of {} run at once)",
                e.queueing * 100.0,
                c.full_batch,
                p.concurrency
            );
        }
    }
    s
}

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
        if s.model.moe.is_some() { format!(", experts {:.2}", s.expert_stream_efficiency()) } else { String::new() },
        e.gemm_efficiency,
        e.comm_scale
    )
}

fn write_memory(r: &PlanReport, w: &mut impl Write) -> io::Result<()> {
    let m = &r.memory_per_gpu_gb;
    let s = &r.scenario;
    writeln!(
        w,
        "\nmemory per GPU: {:.1} GB weights + {:.1} GB workspace + {:.1} GB KV of {:.1} GB usable ({:.1} GB as the driver reports it); KV {:.1} KB/token; {} tokens; {} requests at a mean context of {} tokens (prompt + half the output)",
        m.weights_gb, m.workspace_gb, m.kv_gb, m.usable_gb, m.capacity_gb, m.kv_bytes_per_token / 1e3, r.max_kv_tokens, r.max_concurrency, s.input_len + s.output_len / 2
    )?;
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
fn gain_words(gain: Option<f64>) -> String {
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
    writeln!(
        w,
        "\ncalibration: memory efficiency x{:.2}, overhead {:.1} ms/step, comm x{:.2}; rms log error {:.3}",
        f.memory_efficiency_scale, f.step_overhead_ms, f.comm_scale, f.rms_log_error
    )?;
    for x in &f.residuals {
        writeln!(w, "  c={}: measured {:.0}, predicted {:.0} tok/s ({:+.1}%)", x.concurrency, x.measured, x.predicted, x.error * 100.0)?;
    }
    Ok(())
}

/// Markdown.
pub fn write_markdown(r: &PlanReport, mut w: impl Write) -> io::Result<()> {
    let s = &r.scenario;
    let nodes = s.cluster.as_ref().map_or(String::new(), |c| format!(", {} nodes over {}", c.nodes, c.net.name));
    writeln!(w, "# servetune plan: {} on {} x {} ({}, {}{nodes})\n", r.model, s.plan.gpus, s.gpu.name, s.plan.label(), s.link.name)?;
    let m = &r.memory_per_gpu_gb;
    writeln!(
        w,
        "- memory per GPU: {:.1} GB weights, {:.1} GB KV ({} tokens, {} requests)",
        m.weights_gb, m.kv_gb, r.max_kv_tokens, r.max_concurrency
    )?;
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

/// Why a plan's best concurrency is where it is, in words.
pub fn concurrency_words(c: u32, why: &ConcurrencyReason) -> String {
    match why {
        ConcurrencyReason::KvCapacity { requests } => format!(
            "concurrency {c}: the KV cache (or the running-request limit) holds {requests} requests at once; more clients only queue"
        ),
        ConcurrencyReason::RangeEnd { max } => format!("concurrency {c}: the end of the range searched ({max}); higher was not tried"),
        ConcurrencyReason::Peak { next, next_tokens_per_s } => format!(
            "concurrency {c}: the most output of the concurrencies tried; at {next} the steady rate is {next_tokens_per_s:.0} tok/s, no more"
        ),
        ConcurrencyReason::Objective { next } => format!("concurrency {c}: at {next} an objective (--slo) is missed"),
    }
}

/// "80% interval 5,400-8,700 tok/s (23 validation cases of hopper x sglang x moe)".
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
                "  the best plan sat at the end of the asked range (--concurrency up to {max}), so every plan was searched further, up to what its KV cache holds"
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
    let Some(best) = r.points.iter().max_by(|a, b| headline_rate(a).total_cmp(&headline_rate(b))) else { return Ok(()) };
    let rate = headline_rate(best);
    writeln!(w, "answer: {} at concurrency {}: {rate:.0} {}", r.scenario.plan.label(), best.concurrency, rate_words(r))?;
    writeln!(w, "  {}", interval_words(&crate::interval::for_scenario(&r.scenario), rate))?;
    let top_asked = r.points.iter().map(|p| p.concurrency).max().unwrap_or(0);
    if best.concurrency == top_asked && r.max_concurrency > top_asked {
        writeln!(
            w,
            "  the highest concurrency asked; the KV cache holds {} requests: give --concurrency up to {} (or --rank, which searches that far)",
            r.max_concurrency, r.max_concurrency
        )?;
    }
    Ok(())
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
