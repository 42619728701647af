//! The analysis as one typed, serializable result (`servetune.trace/1`): the steps as the engine
//! ran them (each with its kind, tokens, requests and split), steps by kind, top kernels, NCCL
//! calls and the kernels no rule knew.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::classify::{parse_nccl, NcclAlgo, NcclProto};
use crate::compare::Comparison;
use crate::steps::{segment, split, Family, Phase, PhaseSource, Segmentation, StepStat};
use crate::{union_sorted, Category, Timeline, TraceError};

/// The schema name and major version of the JSON document.
pub const SCHEMA: &str = "servetune.trace/1";
/// Minor version: additions that old readers may ignore.
pub const SCHEMA_MINOR: u32 = 2;
/// How many kernels the top list holds.
pub const TOP_KERNELS: usize = 15;

/// Everything `servetune trace` found in one trace.
#[derive(Debug, Clone, Serialize)]
pub struct TraceReport {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// [`SCHEMA_MINOR`].
    pub schema_minor: u32,
    /// The trace file.
    pub file: String,
    /// Events in the file.
    pub events: u64,
    /// GPU kernels, copies and memsets.
    pub gpu_events: u64,
    /// GPU events left out: a start more than a day from the other GPU events, or a start or
    /// duration that is not a time (negative, not finite, or over
    /// a day; since schema minor 1).
    pub skipped_gpu_events: u64,
    /// Summed GPU event durations, ms (concurrent kernels counted each).
    pub kernel_ms: f64,
    /// Union of GPU event intervals, ms (concurrent kernels counted once).
    pub busy_ms: f64,
    /// From the first GPU event's start to the last one's end, ms.
    pub span_ms: f64,
    /// How the steps were found.
    pub segmentation: Segmentation,
    /// Whose annotations marked the steps (null when graphs or gaps cut them; since minor 2).
    pub step_annotations: Option<Family>,
    /// The idle gap that ends a step when gaps cut the trace, ms.
    pub gap_ms: f64,
    /// GPU events that fell in no step.
    pub events_outside_steps: u64,
    /// Steps by kind (prefill, mixed, decode, idle), kinds without steps left out.
    pub phases: Vec<PhaseSummary>,
    /// Share of summed kernel time in kernels no rule knew (category "other"), % (since minor 2).
    pub other_pct: f64,
    /// Every step in time order (since minor 2).
    pub steps: Vec<StepRow>,
    /// Kernels by total time.
    pub top_kernels: Vec<KernelRow>,
    /// NCCL kernels by collective, algorithm and protocol.
    pub nccl: Vec<NcclRow>,
    /// Kernels no rule matched (category "other"), by total time: never dropped.
    pub other_kernels: Vec<KernelRow>,
    /// The model's prediction beside the decode split, with `--vs-plan`.
    pub comparison: Option<Comparison>,
}

/// One step as the engine ran it.
#[derive(Debug, Clone, Serialize)]
pub struct StepRow {
    /// Its place in the trace, from 0.
    pub index: usize,
    /// Start, ms after the trace's first GPU event.
    pub start_ms: f64,
    /// Wall time on the GPU, ms.
    pub ms: f64,
    /// Its kind.
    pub phase: Phase,
    /// How the kind was decided.
    pub phase_source: PhaseSource,
    /// Tokens it ran, from the engine's annotation (null when not given).
    pub tokens: Option<u64>,
    /// Requests in it, from the engine's annotation (null when not given).
    pub requests: Option<u64>,
    /// The annotation that marked it (null when graphs or gaps did).
    pub annotation: Option<String>,
    /// CUDA/HIP graph replays in it.
    pub graph_replays: u32,
    /// GPU events in it.
    pub kernels: u64,
    /// Union of its kernels, ms.
    pub busy_ms: f64,
    /// GPU idle inside it, ms.
    pub idle_ms: f64,
    /// All-reduce kernels (NCCL, custom, fused with the norm).
    pub allreduce_calls: u32,
    /// NCCL kernels (every collective).
    pub nccl_calls: u32,
    /// Time by category (union of the category's kernels), categories without time left out.
    pub categories: Vec<StepCategory>,
}

/// One category's time in one step.
#[derive(Debug, Clone, Serialize)]
pub struct StepCategory {
    /// The category.
    pub category: Category,
    /// ms.
    pub ms: f64,
}

/// The steps of one kind.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseSummary {
    /// Prefill, mixed, decode or idle.
    pub phase: Phase,
    /// How the kind was decided (the rule most of the kind's steps used).
    pub phase_source: PhaseSource,
    /// Whether the kind was guessed rather than read from the engine's annotations (since minor 2).
    pub kind_guessed: bool,
    /// Steps.
    pub steps: usize,
    /// Median step by nearest rank (the lower middle step of an even count), ms.
    pub median_ms: f64,
    /// 90th-percentile step by nearest rank, ms.
    pub p90_ms: f64,
    /// Mean step, ms.
    pub mean_ms: f64,
    /// Time per step by category (union of the category's kernels), with its share of the step.
    pub categories: Vec<CategoryShare>,
    /// GPU idle inside the step (between kernels): host overhead, ms per step.
    pub idle_ms: f64,
    /// Idle as a share of the step, %.
    pub idle_pct: f64,
    /// Kernel time that ran concurrently with other kernels (counted once above), ms per step.
    pub overlap_ms: f64,
    /// NCCL kernels per step.
    pub nccl_calls_per_step: f64,
    /// Mean NCCL kernel duration, us (0 without NCCL kernels).
    pub nccl_mean_us: f64,
    /// All-reduce kernels per step: NCCL all-reduces, custom and fused all-reduces (since minor 2).
    pub allreduce_calls_per_step: f64,
    /// Mean tokens per step over the steps whose annotation gives them (null when none does;
    /// since minor 2).
    pub tokens_per_step: Option<f64>,
    /// Mean requests per step over the steps whose annotation gives them (null when none does).
    pub requests_per_step: Option<f64>,
    /// Step wall time per token over the steps with tokens, us (null without tokens).
    pub us_per_token: Option<f64>,
}

/// One category's time in a step.
#[derive(Debug, Clone, Serialize)]
pub struct CategoryShare {
    /// The category.
    pub category: Category,
    /// Mean per step, ms.
    pub ms: f64,
    /// Share of the step, %.
    pub pct: f64,
    /// Its time per token over the steps whose annotation gives tokens, us (null without
    /// tokens; since minor 2).
    pub us_per_token: Option<f64>,
}

/// One kernel name's total.
#[derive(Debug, Clone, Serialize)]
pub struct KernelRow {
    /// Kernel name as the trace gives it.
    pub name: String,
    /// Its category.
    pub category: Category,
    /// Launches.
    pub count: u64,
    /// Summed duration, ms.
    pub total_ms: f64,
    /// Mean duration, us.
    pub mean_us: f64,
    /// Share of summed kernel time, %.
    pub pct: f64,
}

/// NCCL kernels of one collective/algorithm/protocol.
#[derive(Debug, Clone, Serialize)]
pub struct NcclRow {
    /// AllReduce, AllGather, Broadcast, SendRecv, ...
    pub collective: String,
    /// Algorithm from the kernel name.
    pub algorithm: NcclAlgo,
    /// Protocol from the kernel name.
    pub protocol: NcclProto,
    /// Kernels.
    pub count: u64,
    /// Mean duration, us.
    pub mean_us: f64,
    /// Summed duration, ms.
    pub total_ms: f64,
}

/// Reads and analyses the trace at `path`, cutting steps at idle gaps over `gap_ms`.
pub fn analyze(path: &Path, gap_ms: f64) -> Result<TraceReport, TraceError> {
    if !(gap_ms.is_finite() && gap_ms > 0.0) {
        return Err(TraceError::Input(format!("--gap-ms {gap_ms}: give the idle gap that ends a step, in ms > 0 (e.g. 1)")));
    }
    let t = Timeline::read(path)?;
    Ok(report(&t, &path.display().to_string(), gap_ms))
}

/// The report of a timeline already read.
pub fn report(t: &Timeline, file: &str, gap_ms: f64) -> TraceReport {
    let found = segment(t, gap_ms * 1e3);
    let (stats, outside) = split(t, &found.windows);
    let mut phases = Vec::new();
    for phase in Phase::ALL {
        let steps: Vec<&StepStat> = stats.iter().filter(|s| s.phase() == phase).collect();
        if !steps.is_empty() {
            phases.push(summarize(phase, &steps));
        }
    }
    let (top, other, nccl) = kernel_tables(t);
    let start = t.kernels.iter().map(|k| k.start).fold(f64::INFINITY, f64::min);
    let end = t.kernels.iter().map(|k| k.end()).fold(f64::NEG_INFINITY, f64::max);
    let kernel_us: f64 = t.kernels.iter().map(|k| k.dur as f64).sum();
    // + 0.0: an empty f64 sum is -0.0, which would print as "-0.00".
    let other_us: f64 = t.kernels.iter().filter(|k| t.category(k) == Category::Other).map(|k| k.dur as f64).sum::<f64>() + 0.0;
    let steps = stats.iter().enumerate().map(|(i, s)| step_row(i, s, start)).collect();
    TraceReport {
        schema: SCHEMA,
        schema_minor: SCHEMA_MINOR,
        file: file.to_string(),
        events: t.events,
        gpu_events: t.kernels.len() as u64,
        skipped_gpu_events: t.skipped,
        kernel_ms: kernel_us / 1e3,
        busy_ms: union_sorted(t.kernels.iter().map(|k| (k.start, k.end()))) / 1e3,
        span_ms: (end - start).max(0.0) / 1e3,
        segmentation: found.segmentation,
        step_annotations: found.family,
        gap_ms,
        events_outside_steps: outside,
        phases,
        other_pct: if kernel_us > 0.0 { 100.0 * other_us / kernel_us } else { 0.0 },
        steps,
        top_kernels: top,
        nccl,
        other_kernels: other,
        comparison: None,
    }
}

fn step_row(index: usize, s: &StepStat, t0: f64) -> StepRow {
    let w = &s.window;
    StepRow {
        index,
        start_ms: (w.start - t0) / 1e3,
        ms: s.ms,
        phase: s.phase(),
        phase_source: w.source,
        tokens: w.tokens,
        requests: w.requests,
        annotation: w.name.clone(),
        graph_replays: s.graph_replays,
        kernels: s.kernels,
        busy_ms: s.busy_ms,
        idle_ms: (s.ms - s.busy_ms).max(0.0),
        allreduce_calls: s.allreduce_calls,
        nccl_calls: s.nccl_calls,
        categories: Category::ALL
            .iter()
            .filter(|c| s.category_ms[c.index()] > 0.0)
            .map(|c| StepCategory { category: *c, ms: s.category_ms[c.index()] })
            .collect(),
    }
}

fn summarize(phase: Phase, steps: &[&StepStat]) -> PhaseSummary {
    let n = steps.len() as f64;
    let mut durs: Vec<f64> = steps.iter().map(|s| s.ms).collect();
    durs.sort_by(f64::total_cmp);
    let total: f64 = durs.iter().sum();
    let pct = |ms: f64| if total > 0.0 { 100.0 * ms / total } else { 0.0 };
    // Per token: over the steps whose annotation gives tokens.
    let with_tokens: Vec<&&StepStat> = steps.iter().filter(|s| s.window.tokens.is_some_and(|t| t > 0)).collect();
    // Saturating: the counts come from names in the file, which may be anything.
    let tokens: u64 = with_tokens.iter().filter_map(|s| s.window.tokens).fold(0u64, u64::saturating_add);
    let per_token =
        |f: &dyn Fn(&StepStat) -> f64| (tokens > 0).then(|| with_tokens.iter().map(|s| f(s)).sum::<f64>() * 1e3 / tokens as f64);
    let categories = Category::ALL
        .iter()
        .map(|c| {
            let sum: f64 = steps.iter().map(|s| s.category_ms[c.index()]).sum();
            CategoryShare { category: *c, ms: sum / n, pct: pct(sum), us_per_token: per_token(&|s| s.category_ms[c.index()]) }
        })
        .filter(|c| c.ms > 0.0)
        .collect();
    let idle: f64 = steps.iter().map(|s| (s.ms - s.busy_ms).max(0.0)).sum();
    let overlap: f64 = steps.iter().map(|s| s.kernel_ms - s.busy_ms).sum();
    let calls: u32 = steps.iter().map(|s| s.nccl_calls).sum();
    let nccl_ms: f64 = steps.iter().map(|s| s.nccl_ms).sum();
    let allreduces: u64 = steps.iter().map(|s| s.allreduce_calls as u64).sum();
    let mean_of = |f: &dyn Fn(&StepStat) -> Option<u64>| {
        let known: Vec<u64> = steps.iter().filter_map(|s| f(s)).collect();
        (!known.is_empty()).then(|| known.iter().map(|k| *k as f64).sum::<f64>() / known.len() as f64)
    };
    // The rule most of the kind's steps used (an annotation family marks all of them alike; graph
    // segmentation may decide some by graph and some by duration).
    let sources = [PhaseSource::Annotation, PhaseSource::CudaGraph, PhaseSource::Duration];
    let phase_source =
        sources.into_iter().max_by_key(|src| steps.iter().filter(|s| s.window.source == *src).count()).unwrap_or(PhaseSource::Duration);
    PhaseSummary {
        phase,
        phase_source,
        kind_guessed: steps.iter().any(|s| s.window.source.guessed()),
        steps: steps.len(),
        // Nearest rank: a step that ran, never a mean of two.
        median_ms: servetune_stats::nearest_rank(&durs, 50.0).unwrap_or(0.0),
        p90_ms: servetune_stats::nearest_rank(&durs, 90.0).unwrap_or(0.0),
        mean_ms: total / n,
        categories,
        idle_ms: idle / n,
        idle_pct: pct(idle),
        overlap_ms: overlap / n,
        nccl_calls_per_step: calls as f64 / n,
        nccl_mean_us: if calls > 0 { nccl_ms * 1e3 / calls as f64 } else { 0.0 },
        allreduce_calls_per_step: allreduces as f64 / n,
        tokens_per_step: mean_of(&|s| s.window.tokens),
        requests_per_step: mean_of(&|s| s.window.requests),
        us_per_token: per_token(&|s| s.ms),
    }
}

fn kernel_tables(t: &Timeline) -> (Vec<KernelRow>, Vec<KernelRow>, Vec<NcclRow>) {
    let mut per_name = vec![(0u64, 0.0f64); t.names.len()];
    for k in &t.kernels {
        let e = &mut per_name[k.name as usize];
        e.0 += 1;
        e.1 += k.dur as f64;
    }
    let total_us: f64 = per_name.iter().map(|p| p.1).sum();
    let mut rows: Vec<KernelRow> = per_name
        .iter()
        .enumerate()
        .filter(|(_, p)| p.0 > 0)
        .map(|(i, p)| KernelRow {
            name: t.names[i].clone(),
            category: t.categories[i],
            count: p.0,
            total_ms: p.1 / 1e3,
            mean_us: p.1 / p.0 as f64,
            pct: if total_us > 0.0 { 100.0 * p.1 / total_us } else { 0.0 },
        })
        .collect();
    rows.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms).then_with(|| a.name.cmp(&b.name)));
    let other: Vec<KernelRow> = rows.iter().filter(|r| r.category == Category::Other).cloned().collect();
    let mut nccl: BTreeMap<(String, NcclAlgo, NcclProto), (u64, f64)> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.category == Category::Nccl) {
        // A kernel whose collective only the trace's args named carries it in brackets.
        let named = r.name.strip_suffix(']').and_then(|n| n.rsplit_once(" [")).map(|(_, c)| c);
        let key = match parse_nccl(&r.name) {
            Some(k) => (named.map_or(k.collective.clone(), |c| format!("{} ({c})", k.collective)), k.algorithm, k.protocol),
            None => (r.name.split('(').next().unwrap_or(&r.name).to_string(), NcclAlgo::Unknown, NcclProto::Unknown),
        };
        let e = nccl.entry(key).or_default();
        e.0 += r.count;
        e.1 += r.total_ms;
    }
    let nccl = nccl
        .into_iter()
        .map(|((collective, algorithm, protocol), (count, ms))| NcclRow {
            collective,
            algorithm,
            protocol,
            count,
            mean_us: ms * 1e3 / count as f64,
            total_ms: ms,
        })
        .collect();
    rows.truncate(TOP_KERNELS);
    (rows, other, nccl)
}
