//! The `servetune.plan/1.5` document and its renderings (terminal with an ASCII curve, Markdown).
//! Decisions arrive typed ([`Bottleneck`], [`SaturationReason`], [`FitSuggestion`]); this is the
//! only place they become words.

use std::io::{self, Write};

use serde::Serialize;
use servetune_stats::{knee, LoadPoint, Slo, MIN_GAIN};

use crate::calibrate::Fit;
use crate::interval::Interval;
use crate::predict::{Bottleneck, Memory, Overlap, Point, RunningLimit, Scenario};
use crate::quant::Dtype;
use crate::rank::{ConcurrencyRange, ConcurrencyReason, Fix, Ranked};
use crate::spec::ParamCounts;
use crate::workload::Workload;

mod markdown;
mod terminal;

pub use markdown::write_markdown;
pub use terminal::{concurrency_words, write_terminal};

/// Why throughput stops growing.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SaturationReason {
    /// No more requests run at once; more concurrency queues. `limit` says what holds them: the KV
    /// cache, a stated running cap or the engine's default one.
    RunningLimit {
        /// Requests that run at once.
        requests: u32,
        /// Tokens each holds on average (input + half the output: the KV cache is paged).
        tokens_per_request: u32,
        /// What sets `requests`.
        limit: RunningLimit,
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
    /// The engine release whose defaults the scenario runs (`--engine ENGINE[@VERSION]`).
    pub engine_release: crate::predict::EngineRelease,
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
pub const SCHEMA: &str = "servetune.plan/1.5";

/// Where the curve saturates: the running limit ([`Scenario::running_limit`]) capping the batch, or the knee of
/// [`servetune_stats::knee`], whichever comes first.
pub fn saturation(s: &Scenario, points: &[Point]) -> Option<Saturation> {
    let (cap, limit) = s.running_limit();
    let kv = points.windows(2).position(|w| w[1].running <= w[0].running && w[0].running == cap).map(|i| Saturation {
        concurrency: points[i].running,
        output_tokens_per_s: points[i].output_tokens_per_s,
        reason: SaturationReason::RunningLimit { requests: cap, tokens_per_request: s.mean_context().round() as u32, limit },
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

/// The KV cache's format in words for the reports: what `--kv-dtype` stated, else what the
/// engine's `--kv-cache-dtype auto` gives the checkpoint (docs/reference.md, "The KV cache's
/// format").
pub fn kv_cache_words(s: &crate::predict::Scenario) -> &'static str {
    match s.quant.kv_cache {
        crate::quant::KvDtype::Fp8 => "an fp8 cache (--kv-dtype, else the engine's auto for this checkpoint)",
        crate::quant::KvDtype::Bf16 => "a bf16 cache (--kv-dtype, else the engine's auto for this checkpoint)",
    }
}

/// What an early release's step scale ([`crate::predict::Engine::release_step_scale`]) does, in
/// words, or None for today's releases and for a calibrated plan (a calibration replaces the
/// release's scale, and its own line says what it set).
pub fn early_release_words(e: &crate::predict::Engine, calibrated: bool) -> Option<String> {
    (e.release_step_scale != 1.0 && !calibrated).then(|| {
        format!(
            "every step term x{:.2}{} (a calibration on the validation fit set's early-release rows; VALIDATION.md)",
            e.release_step_scale,
            if e.step_overhead_ms > 0.0 { ", but the stated step overhead" } else { "" }
        )
    })
}

/// The saturation reason in words.
pub fn saturation_words(r: &SaturationReason) -> String {
    match r {
        SaturationReason::RunningLimit { requests, tokens_per_request, limit } => {
            format!("{} {requests} requests at a mean context of {tokens_per_request} tokens; more concurrency only queues", limit.words())
        }
        SaturationReason::Plateau { min_gain, up_to } => {
            format!("no higher concurrency up to {up_to} adds {:.0}% or more throughput", min_gain * 100.0)
        }
    }
}

/// A bottleneck in words and numbers.
pub fn bottleneck_words(b: &Bottleneck) -> String {
    let pct = b.share() * 100.0;
    match b {
        Bottleneck::Communication {
            step_ms, tp, link, allreduces, allreduce_us, qk_norm, qk_gathers, logits_gather_us, across, ..
        } => {
            let over = match across {
                None => link.clone(),
                Some(a) if a.tp_nodes > 1 => {
                    format!("{link} within and {} across {} nodes{}", a.net, a.tp_nodes, if a.pp { ", PP sends too" } else { "" })
                }
                Some(a) => format!("{link} (PP sends across nodes over {})", a.net),
            };
            format!(
                "TP{tp} all-reduce over {over} is {pct:.0}% of the {step_ms:.1} ms step: {allreduces:.0} all-reduces x {allreduce_us:.1} us{}{}{} (plus a per-kernel floor each, counted in the overhead)",
                qk_norm.map_or(String::new(), |q| if q.us < 0.05 {
                    format!(" and {:.0} q/k-norm all-reduces within their kernel floors", q.count)
                } else {
                    format!(" and {:.0} q/k-norm all-reduces x {:.1} us", q.count, q.us)
                }),
                qk_gathers.map_or(String::new(), |g| format!(", {:.0} q/k all-gathers taking {:.2} ms in all", g.count, g.us / 1e3)),
                logits_gather_us.map_or(String::new(), |us| format!(", and the logits' all-gather {:.2} ms", us / 1e3))
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
        s = if r.slos.is_empty() { String::new() } else { format!("{s}, ") } + "concurrency up to what each plan runs at once";
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
