//! Cutting a trace into engine steps: by step annotations on the GPU timeline, by CUDA graph
//! launches, or by idle gaps; and telling prefill steps from decode steps.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::{Category, Timeline};

/// What a step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Prompt processing.
    Prefill,
    /// One token per running request.
    Decode,
}

/// How the steps were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Segmentation {
    /// The engine's step annotations (gpu_user_annotation ranges named for prefill/decode steps).
    StepAnnotations,
    /// One step per `cudaGraphLaunch` (its kernels share the launch's correlation id); kernels
    /// outside graphs are cut by idle gaps.
    CudaGraphs,
    /// GPU idle gaps longer than the gap threshold.
    IdleGaps,
}

/// How a step's phase was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseSource {
    /// The annotation's name says prefill or decode.
    Annotation,
    /// Graph-launched steps are decode (engines capture decode only); eager ones are prefill.
    CudaGraph,
    /// Steps longer than [`PREFILL_FACTOR`] times the median step are prefill.
    Duration,
}

/// A step more than this many times the median step is taken as prefill when nothing else tells:
/// a prefill pass runs hundreds of tokens per request against decode's one, so its step is several
/// times longer, while decode steps vary with batch far less than 2x between neighbours.
pub const PREFILL_FACTOR: f64 = 2.0;

/// The phase an annotation name states, for names that mark an engine step.
pub fn step_phase(name: &str) -> Option<Option<Phase>> {
    let n = name.to_ascii_lowercase();
    if n.contains("prefill") || n.contains("extend") {
        Some(Some(Phase::Prefill))
    } else if n.contains("decode") {
        Some(Some(Phase::Decode))
    } else if n.contains("execute_model") || n.contains("forward_batch") || n.contains("model_forward") {
        Some(None)
    } else {
        None
    }
}

/// One step's time window and phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Start, us.
    pub start: f64,
    /// End, us.
    pub end: f64,
    /// Phase, when known before the duration rule.
    pub phase: Option<Phase>,
}

/// The steps of a timeline, in time order, each with its phase and how it was decided.
pub fn segment(t: &Timeline, gap_us: f64) -> (Segmentation, Vec<(Window, PhaseSource)>) {
    let (seg, windows, source) = if !t.marks.is_empty() {
        let mut w: Vec<Window> = Vec::new();
        for m in &t.marks {
            // A range inside the previous one (a layer inside a step) belongs to it; one that
            // overlaps its end by the trace's rounding starts where it ends.
            match w.last() {
                Some(p) if m.end <= p.end => {}
                Some(p) => {
                    let start = m.start.max(p.end);
                    w.push(Window { start, end: m.end, phase: m.phase });
                }
                None => w.push(Window { start: m.start, end: m.end, phase: m.phase }),
            }
        }
        (Segmentation::StepAnnotations, w, PhaseSource::Annotation)
    } else if !t.graph_launches.is_empty() {
        (Segmentation::CudaGraphs, graph_windows(t, gap_us), PhaseSource::CudaGraph)
    } else {
        (Segmentation::IdleGaps, gap_windows(t.kernels.iter().map(|k| (k.start, k.end())), gap_us, None), PhaseSource::Duration)
    };
    let mut durs: Vec<f64> = windows.iter().map(|w| w.end - w.start).collect();
    durs.sort_by(f64::total_cmp);
    let median = durs.get(durs.len() / 2).copied().unwrap_or(0.0);
    let out = windows
        .into_iter()
        .map(|w| match w.phase {
            Some(_) => (w, source),
            None => {
                let phase = if w.end - w.start > PREFILL_FACTOR * median { Phase::Prefill } else { Phase::Decode };
                (Window { phase: Some(phase), ..w }, PhaseSource::Duration)
            }
        })
        .collect();
    (seg, out)
}

/// Windows from runs of intervals separated by more than `gap_us`.
fn gap_windows(intervals: impl Iterator<Item = (f64, f64)>, gap_us: f64, phase: Option<Phase>) -> Vec<Window> {
    let mut out: Vec<Window> = Vec::new();
    for (s, e) in intervals {
        match out.last_mut() {
            Some(w) if s - w.end <= gap_us => w.end = w.end.max(e),
            _ => out.push(Window { start: s, end: e, phase }),
        }
    }
    out
}

/// One window per graph launch; eager kernels within `gap_us` after a graph join it (sampling,
/// output copies), the rest are cut by gaps and taken as prefill.
fn graph_windows(t: &Timeline, gap_us: f64) -> Vec<Window> {
    let launches: HashSet<i64> = t.graph_launches.iter().copied().collect();
    let mut graphs: HashMap<i64, Window> = HashMap::new();
    for k in t.kernels.iter().filter(|k| launches.contains(&k.correlation)) {
        let w = graphs.entry(k.correlation).or_insert(Window { start: k.start, end: k.end(), phase: Some(Phase::Decode) });
        w.start = w.start.min(k.start);
        w.end = w.end.max(k.end());
    }
    let mut windows: Vec<Window> = graphs.into_values().collect();
    windows.sort_by(|a, b| a.start.total_cmp(&b.start));
    let mut eager = Vec::new();
    let mut gi = 0;
    for k in t.kernels.iter().filter(|k| !launches.contains(&k.correlation)) {
        while gi + 1 < windows.len() && windows[gi + 1].start <= k.start {
            gi += 1;
        }
        match windows.get_mut(gi) {
            Some(w) if w.start <= k.start && k.start <= w.end + gap_us => w.end = w.end.max(k.end()),
            _ => eager.push((k.start, k.end())),
        }
    }
    windows.extend(gap_windows(eager.into_iter(), gap_us, Some(Phase::Prefill)));
    windows.sort_by(|a, b| a.start.total_cmp(&b.start));
    windows
}

/// What one step spent, by category.
#[derive(Debug, Clone)]
pub struct StepStat {
    /// The step's phase.
    pub phase: Phase,
    /// Wall time of the step, ms.
    pub ms: f64,
    /// Union of each category's kernels, ms (index: [`Category::index`]).
    pub category_ms: [f64; Category::ALL.len()],
    /// Union of all kernels, ms.
    pub busy_ms: f64,
    /// Sum of kernel durations, ms.
    pub kernel_ms: f64,
    /// NCCL kernels in the step.
    pub nccl_calls: u32,
    /// Their summed duration, ms.
    pub nccl_ms: f64,
}

/// Splits every window by category (kernels clipped to the window; overlap counted once).
pub fn split(t: &Timeline, windows: &[(Window, PhaseSource)]) -> (Vec<StepStat>, u64) {
    let mut out = Vec::with_capacity(windows.len());
    let mut ki = 0;
    let mut outside = 0u64;
    let mut per_cat: Vec<Vec<(f64, f64)>> = vec![Vec::new(); Category::ALL.len()];
    let mut all: Vec<(f64, f64)> = Vec::new();
    for (w, _) in windows {
        while ki < t.kernels.len() && t.kernels[ki].start < w.start {
            outside += 1;
            ki += 1;
        }
        per_cat.iter_mut().for_each(Vec::clear);
        all.clear();
        let (mut kernel_us, mut nccl_calls, mut nccl_us) = (0.0, 0u32, 0.0);
        while ki < t.kernels.len() && t.kernels[ki].start < w.end.max(w.start + f64::MIN_POSITIVE) {
            let k = &t.kernels[ki];
            let iv = (k.start, k.end().min(w.end));
            let cat = t.category(k);
            per_cat[cat.index()].push(iv);
            all.push(iv);
            kernel_us += iv.1 - iv.0;
            if cat == Category::Nccl {
                nccl_calls += 1;
                nccl_us += iv.1 - iv.0;
            }
            ki += 1;
        }
        let mut category_ms = [0.0; Category::ALL.len()];
        for (c, v) in per_cat.iter_mut().enumerate() {
            category_ms[c] = crate::union_len(v) / 1e3;
        }
        out.push(StepStat {
            phase: w.phase.unwrap_or(Phase::Decode),
            ms: (w.end - w.start) / 1e3,
            category_ms,
            busy_ms: crate::union_len(&mut all) / 1e3,
            kernel_ms: kernel_us / 1e3,
            nccl_calls,
            nccl_ms: nccl_us / 1e3,
        });
    }
    outside += (t.kernels.len() - ki) as u64;
    (out, outside)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Kernel, StepMark};

    /// A timeline of kernels given as (start, end, name index, correlation).
    fn timeline(names: &[&str], ks: &[(f64, f64, u32, i64)]) -> Timeline {
        let mut t = Timeline {
            names: names.iter().map(|s| s.to_string()).collect(),
            categories: names.iter().map(|n| crate::classify(n)).collect(),
            ..Timeline::default()
        };
        t.kernels =
            ks.iter().map(|&(start, end, name, correlation)| Kernel { start, dur: (end - start) as f32, correlation, name }).collect();
        t
    }

    #[test]
    fn idle_gaps_cut_steps_and_a_long_step_is_prefill() {
        let t = timeline(&["nvjet_gemm"], &[(0.0, 100.0, 0, 1), (150.0, 200.0, 0, 2), (2000.0, 2100.0, 0, 3), (4000.0, 5000.0, 0, 4)]);
        let (seg, w) = segment(&t, 1000.0);
        assert_eq!(seg, Segmentation::IdleGaps);
        let phases: Vec<_> = w.iter().map(|(w, _)| w.phase).collect();
        assert_eq!(phases, [Some(Phase::Decode), Some(Phase::Decode), Some(Phase::Prefill)]);
        let (stats, outside) = split(&t, &w);
        assert_eq!(outside, 0);
        // Step 1 spans 0..200 with 150 us busy: the 50 us between kernels is idle.
        assert!((stats[0].ms - 0.2).abs() < 1e-12 && (stats[0].busy_ms - 0.15).abs() < 1e-12);
    }

    #[test]
    fn graph_launches_make_decode_steps_and_eager_kernels_prefill() {
        let mut t = timeline(
            &["nvjet_gemm", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "flash_fwd_kernel"],
            &[(0.0, 50.0, 0, 10), (50.0, 60.0, 1, 10), (65.0, 70.0, 0, -1), (500.0, 550.0, 0, 11), (5000.0, 9000.0, 2, 99)],
        );
        t.graph_launches = vec![10, 11];
        let (seg, w) = segment(&t, 100.0);
        assert_eq!(seg, Segmentation::CudaGraphs);
        let got: Vec<_> = w.iter().map(|(w, s)| (w.start, w.end, w.phase, *s)).collect();
        assert_eq!(
            got,
            [
                (0.0, 70.0, Some(Phase::Decode), PhaseSource::CudaGraph),
                (500.0, 550.0, Some(Phase::Decode), PhaseSource::CudaGraph),
                (5000.0, 9000.0, Some(Phase::Prefill), PhaseSource::CudaGraph),
            ]
        );
        let (stats, _) = split(&t, &w);
        assert_eq!(stats[0].nccl_calls, 1);
        assert!((stats[0].category_ms[Category::Nccl.index()] - 0.01).abs() < 1e-12);
    }

    #[test]
    fn overlapping_streams_are_counted_once_and_reported() {
        let mut t = timeline(&["nvjet_gemm", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"], &[(0.0, 100.0, 0, 1), (50.0, 150.0, 1, 2)]);
        t.marks = vec![StepMark { start: 0.0, end: 200.0, phase: Some(Phase::Decode) }];
        let (seg, w) = segment(&t, 1000.0);
        assert_eq!(seg, Segmentation::StepAnnotations);
        let (stats, _) = split(&t, &w);
        let s = &stats[0];
        assert!((s.busy_ms - 0.15).abs() < 1e-12, "{}", s.busy_ms);
        assert!((s.kernel_ms - s.busy_ms - 0.05).abs() < 1e-12, "overlap {}", s.kernel_ms - s.busy_ms);
        assert!((s.ms - s.busy_ms - 0.05).abs() < 1e-12, "idle {}", s.ms - s.busy_ms);
    }

    #[test]
    fn step_annotation_names_give_the_phase() {
        assert_eq!(step_phase("decode_step"), Some(Some(Phase::Decode)));
        assert_eq!(step_phase("ForwardMode.EXTEND"), Some(Some(Phase::Prefill)));
        assert_eq!(step_phase("execute_model"), Some(None));
        assert_eq!(step_phase("aten::mm"), None);
    }
}
