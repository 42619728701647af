//! Cutting a trace into engine steps the way the engine ran them, and telling each step's kind.
//!
//! Sources, in order (the first that marks steps is used, and the report says which):
//! 1. The engine's own step annotations as they ran on the GPU (`gpu_user_annotation`): vLLM's
//!    `execute_context_N(T)_generation_M(G)`, sglang's `step[decode bs=N]`, TensorRT-LLM's
//!    `[Executor] _forward_step I: A ctx reqs, B gen reqs`, other ranges naming prefill/decode,
//!    and last `ProfilerStep#N`.
//! 2. The same annotations on the host (`user_annotation`, and sglang's `forward_extend` /
//!    `forward_decode` Python frames), mapped onto the GPU through the correlation ids of the
//!    launches each range made.
//! 3. CUDA/HIP graph replays grouped per step: a step starts where the engine copies its inputs to
//!    the GPU (a host-to-device copy after model work), so all the piecewise graphs of one forward
//!    pass, and the eager kernels around them, are one step.
//! 4. Idle gaps on the GPU, as the last resort.
//!
//! An annotation's kind and its token and request counts are taken from its name where it gives
//! them; otherwise the kind is guessed and the report says so.

use std::collections::HashSet;

use serde::Serialize;

use crate::{Category, Timeline};

/// What a step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Prompt processing only (context requests).
    Prefill,
    /// Prompt processing and decoding in one step (chunked prefill beside running requests).
    Mixed,
    /// One token (or a few, speculating) per running request.
    Decode,
    /// A step with no requests (data-parallel padding: the rank runs the collectives only).
    Idle,
}

impl Phase {
    /// Every phase, in report order.
    pub const ALL: [Phase; 4] = [Phase::Prefill, Phase::Mixed, Phase::Decode, Phase::Idle];

    /// The name used in output.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Prefill => "prefill",
            Phase::Mixed => "mixed",
            Phase::Decode => "decode",
            Phase::Idle => "idle",
        }
    }
}

/// How the steps were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Segmentation {
    /// The engine's step annotations as they ran on the GPU (gpu_user_annotation).
    StepAnnotations,
    /// The engine's step annotations on the host, mapped onto the GPU by the correlation ids of
    /// the launches each range made (since schema minor 2).
    CpuAnnotations,
    /// CUDA/HIP graph replays grouped per step (a step starts at the copy of its inputs); without
    /// any input copy, one step per replay.
    CudaGraphs,
    /// GPU idle gaps longer than the gap threshold.
    IdleGaps,
}

/// Whose step annotations marked the steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// vLLM's `execute_context_N(T)_generation_M(G)`: N context requests of T tokens, M
    /// generation requests of G tokens.
    Vllm,
    /// sglang's `step[decode bs=N]`, `step[prefill bs=N toks=T]`, `step[mixed bs=N ext=T dec=D]`,
    /// `step[idle]`; or, without them, its `forward_extend` / `forward_decode` Python frames.
    Sglang,
    /// TensorRT-LLM's `[Executor] _forward_step I: A ctx reqs[, T ctx tokens], B gen reqs` (and
    /// the C++ runtime's `executeStep: A ctx reqs, B gen reqs`).
    TensorrtLlm,
    /// Another range naming a prefill, extend or decode step, or `execute_model` /
    /// `forward_batch` / `model_forward` (the simulator's `prefill_step` / `decode_step`).
    Named,
    /// torch.profiler's `ProfilerStep#N`: one per `profiler.step()`, no kind.
    ProfilerStep,
}

impl Family {
    /// The annotations in words.
    pub fn words(self) -> &'static str {
        match self {
            Family::Vllm => "vLLM's execute_context_N(T)_generation_M(G)",
            Family::Sglang => "sglang's step[...] / forward mode",
            Family::TensorrtLlm => "TensorRT-LLM's _forward_step",
            Family::Named => "ranges named for prefill/decode steps",
            Family::ProfilerStep => "ProfilerStep#N",
        }
    }
}

/// How a step's kind was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseSource {
    /// The annotation's name says it (or its request counts do).
    Annotation,
    /// Guessed from CUDA graphs: a step of one graph replay is decode (engines capture decode
    /// batches whole), a step without a replay is prefill (run eagerly).
    CudaGraph,
    /// Guessed: steps longer than [`PREFILL_FACTOR`] times the median step are prefill.
    Duration,
}

impl PhaseSource {
    /// Whether the kind was guessed rather than read from the engine's annotation.
    pub fn guessed(self) -> bool {
        self != PhaseSource::Annotation
    }
}

/// A step more than this many times the median step is taken as prefill when nothing else tells:
/// a prefill pass runs hundreds of tokens per request against decode's one, so its step is several
/// times longer, while decode steps vary with batch far less than 2x between neighbours.
pub const PREFILL_FACTOR: f64 = 2.0;

/// What a step annotation's name says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepInfo {
    /// Whose annotation.
    pub family: Family,
    /// The step's kind, when the name tells it.
    pub kind: Option<Phase>,
    /// Tokens the step ran, when the name tells them.
    pub tokens: Option<u64>,
    /// Requests in the step, when the name tells them.
    pub requests: Option<u64>,
}

fn kind_from_counts(context: u64, generation: u64) -> Phase {
    match (context > 0, generation > 0) {
        (true, true) => Phase::Mixed,
        (true, false) => Phase::Prefill,
        (false, true) => Phase::Decode,
        (false, false) => Phase::Idle,
    }
}

/// `N(T)` at the start of `s`: (N, T, rest).
fn count_paren(s: &str) -> Option<(u64, u64, &str)> {
    let open = s.find('(')?;
    let close = s[open..].find(')')? + open;
    Some((s[..open].trim().parse().ok()?, s[open + 1..close].trim().parse().ok()?, &s[close + 1..]))
}

fn parse_vllm(name: &str) -> Option<StepInfo> {
    let rest = &name[name.find("execute_context_")? + "execute_context_".len()..];
    let (nc, ct, rest) = count_paren(rest)?;
    let rest = rest.strip_prefix("_generation_")?;
    let (ng, gt, _) = count_paren(rest)?;
    Some(StepInfo {
        family: Family::Vllm,
        kind: Some(kind_from_counts(nc, ng)),
        tokens: Some(ct.saturating_add(gt)),
        requests: Some(nc.saturating_add(ng)),
    })
}

fn parse_sglang(name: &str) -> Option<StepInfo> {
    let inner = name.trim().strip_prefix("step[")?.strip_suffix(']')?;
    let mode = inner.split_whitespace().next()?.to_ascii_lowercase();
    let get = |k: &str| -> Option<u64> {
        inner.split_whitespace().find_map(|w| w.strip_prefix(k).and_then(|v| v.strip_prefix('=')).and_then(|v| v.parse().ok()))
    };
    let (bs, toks, ext, dec) = (get("bs"), get("toks"), get("ext"), get("dec"));
    let (kind, tokens, requests) = match mode.as_str() {
        // One token per request (sglang names speculative steps by their own modes).
        "decode" => (Some(Phase::Decode), bs, bs),
        "prefill" | "extend" => (Some(Phase::Prefill), toks, bs),
        "mixed" => (Some(Phase::Mixed), ext.zip(dec).map(|(e, d)| e.saturating_add(d)), bs),
        "idle" => (Some(Phase::Idle), Some(0), Some(0)),
        m if m.contains("verify") || m.contains("draft") || m.contains("decode") => (Some(Phase::Decode), None, bs),
        m if m.contains("extend") || m.contains("prefill") => (Some(Phase::Prefill), toks, bs),
        _ => (None, None, bs),
    };
    Some(StepInfo { family: Family::Sglang, kind, tokens, requests })
}

/// sglang's model runner frames (with_stack=True traces of versions without `step[...]`).
fn parse_sglang_frame(name: &str) -> Option<StepInfo> {
    if !name.contains("model_runner.py") {
        return None;
    }
    let func = name.rsplit(':').next()?.trim();
    let kind = match func {
        "forward_extend" | "forward_split_prefill" => Phase::Prefill,
        "forward_decode" => Phase::Decode,
        "forward_idle" => Phase::Idle,
        _ => return None,
    };
    Some(StepInfo { family: Family::Sglang, kind: Some(kind), tokens: None, requests: None })
}

fn parse_trtllm(name: &str) -> Option<StepInfo> {
    let at = name.find("_forward_step").or_else(|| name.find("executeStep:"))?;
    let rest = &name[at..];
    let rest = &rest[rest.find(':')? + 1..];
    let (mut ctx, mut ctx_tokens, mut gen) = (None, None, None);
    for part in rest.split(',') {
        let mut w = part.split_whitespace();
        let (Some(n), Some(a), b) = (w.next().and_then(|n| n.parse::<u64>().ok()), w.next(), w.next()) else { continue };
        match (a, b) {
            ("ctx", Some("reqs")) => ctx = Some(n),
            ("ctx", Some("tokens")) => ctx_tokens = Some(n),
            ("gen", Some("reqs")) => gen = Some(n),
            _ => {}
        }
    }
    if ctx.is_none() && gen.is_none() {
        return None;
    }
    let (c, g) = (ctx.unwrap_or(0), gen.unwrap_or(0));
    // A generation request runs one token (no speculation); context tokens only when named.
    let tokens = match ctx_tokens {
        Some(t) => Some(t.saturating_add(g)),
        None if c == 0 => Some(g),
        None => None,
    };
    Some(StepInfo { family: Family::TensorrtLlm, kind: Some(kind_from_counts(c, g)), tokens, requests: Some(c.saturating_add(g)) })
}

/// What an annotation name says about the step it marks; None for names that mark no step.
pub fn parse_step_name(name: &str) -> Option<StepInfo> {
    if let Some(i) = parse_vllm(name).or_else(|| parse_sglang(name)).or_else(|| parse_trtllm(name)).or_else(|| parse_sglang_frame(name)) {
        return Some(i);
    }
    if name.starts_with("ProfilerStep#") {
        return Some(StepInfo { family: Family::ProfilerStep, kind: None, tokens: None, requests: None });
    }
    // Other names only when the whole name is a step's: "prefill", "decode_step", "step decode",
    // "ForwardMode.EXTEND", "execute_model" (not "decode_attention" or "## decoder fp8 ##").
    let words: Vec<String> =
        name.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_ascii_lowercase).collect();
    let phase_word = |w: &str| match w {
        "prefill" | "extend" => Some(Some(Phase::Prefill)),
        "decode" => Some(Some(Phase::Decode)),
        "mixed" => Some(Some(Phase::Mixed)),
        "idle" => Some(Some(Phase::Idle)),
        _ => None,
    };
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    let kind = match w.as_slice() {
        [p] | [p, "step"] | ["step", p] | ["forwardmode", p] => phase_word(p)?,
        ["execute", "model"] | ["forward", "batch"] | ["model", "forward"] => None,
        _ => return None,
    };
    Some(StepInfo { family: Family::Named, kind, tokens: None, requests: None })
}

/// One step's time window on the GPU, with what is known of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Start, us.
    pub start: f64,
    /// End, us.
    pub end: f64,
    /// Kind, once decided.
    pub kind: Option<Phase>,
    /// How the kind was decided.
    pub source: PhaseSource,
    /// Tokens, from the annotation.
    pub tokens: Option<u64>,
    /// Requests, from the annotation.
    pub requests: Option<u64>,
    /// The annotation's name.
    pub name: Option<String>,
    /// CUDA/HIP graph replays in the step.
    pub graph_replays: u32,
}

impl Window {
    fn new(start: f64, end: f64) -> Window {
        Window { start, end, kind: None, source: PhaseSource::Duration, tokens: None, requests: None, name: None, graph_replays: 0 }
    }

    fn annotated(start: f64, end: f64, info: &StepInfo, name: &str) -> Window {
        Window {
            kind: info.kind,
            source: PhaseSource::Annotation,
            tokens: info.tokens,
            requests: info.requests,
            name: Some(name.to_string()),
            ..Window::new(start, end)
        }
    }
}

/// The steps found and how.
#[derive(Debug, Clone)]
pub struct Steps {
    /// Which source cut them.
    pub segmentation: Segmentation,
    /// Whose annotations, when annotations cut them.
    pub family: Option<Family>,
    /// The steps in time order, each with its kind decided.
    pub windows: Vec<Window>,
}

/// Sorts windows, drops those inside the previous one (a layer's range inside its step's) and
/// starts one that overlaps the previous one's end where that ends. With `wrappers_out`, a
/// window around two or more steps of its own kind but of other names ([`wrappers`]) is dropped
/// first: an engine's steps do not nest, so such a range is a wrapper around steps (or a range
/// whose end the profiler lost), not a step, and keeping it would swallow every step inside it.
fn normalize(mut w: Vec<Window>, wrappers_out: bool) -> Vec<Window> {
    w.sort_by(|a, b| a.start.total_cmp(&b.start).then(b.end.total_cmp(&a.end)));
    if wrappers_out {
        let spans: Vec<(f64, f64, &str)> = w.iter().map(|x| (x.start, x.end, x.name.as_deref().unwrap_or(""))).collect();
        let wraps = wrappers(&spans);
        w = w.into_iter().zip(wraps).filter_map(|(x, wraps)| (!wraps).then_some(x)).collect();
    }
    let mut out: Vec<Window> = Vec::with_capacity(w.len());
    for mut x in w {
        match out.last() {
            Some(p) if x.end <= p.end => {}
            Some(p) => {
                x.start = x.start.max(p.end);
                out.push(x);
            }
            None => out.push(x),
        }
    }
    out
}

/// Which of an engine's step names `name` is: ranges of one kind are steps of one loop, which
/// do not nest. sglang's `step[...]` and its forward frames are two kinds (a step may run a
/// draft and a verify frame), as are TensorRT-LLM's Python `_forward_step` and C++ `executeStep`.
fn kind_of_name(name: &str) -> u8 {
    if parse_vllm(name).is_some() {
        0
    } else if name.trim_start().starts_with("step[") {
        1
    } else if parse_sglang_frame(name).is_some() {
        2
    } else if name.contains("_forward_step") {
        3
    } else if name.contains("executeStep:") {
        4
    } else if name.starts_with("ProfilerStep#") {
        5
    } else {
        6
    }
}

/// For (start, end, name) spans sorted by start (and, at one start, longest first), whether each
/// is a wrapper: it holds two or more spans of its own kind ([`kind_of_name`]) whose names differ
/// from its own. Copies of one range with its name inside it are not counted: Kineto writes a
/// range once per stream its kernels ran on, the longest around the others.
fn wrappers(spans: &[(f64, f64, &str)]) -> Vec<bool> {
    let mut by_kind: std::collections::HashMap<u8, Vec<usize>> = std::collections::HashMap::new();
    let mut by_name: std::collections::HashMap<(u8, &str), Vec<usize>> = std::collections::HashMap::new();
    for (i, s) in spans.iter().enumerate() {
        let k = kind_of_name(s.2);
        by_kind.entry(k).or_default().push(i);
        by_name.entry((k, s.2)).or_default().push(i);
    }
    let mut inside = vec![0u32; spans.len()];
    for group in by_kind.values() {
        for (i, n) in group.iter().zip(contained(&group.iter().map(|&i| (spans[i].0, spans[i].1)).collect::<Vec<_>>())) {
            inside[*i] += n;
        }
    }
    for group in by_name.values() {
        for (i, n) in group.iter().zip(contained(&group.iter().map(|&i| (spans[i].0, spans[i].1)).collect::<Vec<_>>())) {
            inside[*i] -= n;
        }
    }
    inside.iter().map(|n| *n >= 2).collect()
}

/// For spans sorted by start (and, at one start, longest first), how many of the others each
/// holds. A later span starts no earlier, so it lies inside span i exactly when it ends no later:
/// counted with a Fenwick tree over the ends, from the last span back (n log n, where a hostile
/// trace of overlapping ranges would make a pairwise scan quadratic).
fn contained(spans: &[(f64, f64)]) -> Vec<u32> {
    let mut ends: Vec<f64> = spans.iter().map(|s| s.1).collect();
    ends.sort_by(f64::total_cmp);
    ends.dedup();
    let mut tree = vec![0u32; ends.len() + 1];
    let mut out = vec![0u32; spans.len()];
    for (i, s) in spans.iter().enumerate().rev() {
        // Spans seen so far (all later in order) that end at or before this one's end.
        let mut k = ends.partition_point(|e| *e <= s.1);
        while k > 0 {
            out[i] += tree[k];
            k &= k - 1;
        }
        let mut k = ends.partition_point(|e| *e < s.1) + 1;
        while k < tree.len() {
            tree[k] += 1;
            k += k & k.wrapping_neg();
        }
    }
    out
}

/// The steps of a timeline, in time order, each with its kind and how it was decided.
pub fn segment(t: &Timeline, gap_us: f64) -> Steps {
    let (segmentation, family, windows) = if let Some((seg, fam, w)) = annotation_windows(t) {
        (seg, Some(fam), w)
    } else if !t.graph_launches.is_empty() {
        (Segmentation::CudaGraphs, None, graph_windows(t, gap_us))
    } else {
        (Segmentation::IdleGaps, None, gap_windows(t.kernels.iter().map(|k| (k.start, k.end())), gap_us))
    };
    let windows = guess_kinds(windows);
    Steps { segmentation, family, windows }
}

/// Kinds the source left open: by duration against the median step.
fn guess_kinds(windows: Vec<Window>) -> Vec<Window> {
    let mut durs: Vec<f64> = windows.iter().map(|w| w.end - w.start).collect();
    durs.sort_by(f64::total_cmp);
    let median = durs.get(durs.len() / 2).copied().unwrap_or(0.0);
    windows
        .into_iter()
        .map(|w| match w.kind {
            Some(_) => w,
            None => {
                let kind = if w.end - w.start > PREFILL_FACTOR * median { Phase::Prefill } else { Phase::Decode };
                Window { kind: Some(kind), source: PhaseSource::Duration, ..w }
            }
        })
        .collect()
}

/// Steps from the most specific family of annotations present: on the GPU where the trace has
/// them there, else on the host mapped through launch correlations.
fn annotation_windows(t: &Timeline) -> Option<(Segmentation, Family, Vec<Window>)> {
    let mut families: Vec<Family> = t.marks.iter().map(|m| m.info.family).collect();
    families.sort();
    families.dedup();
    for fam in families {
        let gpu: Vec<Window> =
            t.marks.iter().filter(|m| m.gpu && m.info.family == fam).map(|m| Window::annotated(m.start, m.end, &m.info, &m.name)).collect();
        if !gpu.is_empty() {
            return Some((Segmentation::StepAnnotations, fam, normalize(gpu, fam != Family::Named)));
        }
        let cpu = cpu_windows(t, fam);
        if !cpu.is_empty() {
            return Some((Segmentation::CpuAnnotations, fam, normalize(cpu, fam != Family::Named)));
        }
    }
    None
}

/// Host ranges of `fam` mapped onto the GPU: the launches a range made (on its thread, between its
/// start and end) give a span of correlation ids (ids grow with launch time), and the kernels of
/// those ids give the step's window.
fn cpu_windows(t: &Timeline, fam: Family) -> Vec<Window> {
    let mut ranges: Vec<(i64, i64, usize)> = Vec::new();
    // Marks come sorted by start; a range inside the previous one belongs to it, and one around
    // two or more steps is a wrapper, not a step (as on the GPU, [`normalize`]).
    let mut host: Vec<&crate::StepMark> = t.marks.iter().filter(|m| !m.gpu && m.info.family == fam).collect();
    host.sort_by(|a, b| a.start.total_cmp(&b.start).then(b.end.total_cmp(&a.end)));
    if fam != Family::Named {
        let wraps = wrappers(&host.iter().map(|m| (m.start, m.end, m.name.as_str())).collect::<Vec<_>>());
        host = host.into_iter().zip(wraps).filter_map(|(m, wraps)| (!wraps).then_some(m)).collect();
    }
    let mut marks: Vec<&crate::StepMark> = Vec::new();
    for m in host {
        if marks.last().is_none_or(|p| m.end > p.end) {
            marks.push(m);
        }
    }
    for (i, m) in marks.iter().enumerate() {
        let lo = t.launches.partition_point(|l| l.ts < m.start);
        let hi = t.launches.partition_point(|l| l.ts <= m.end);
        let span = |same_thread: bool| {
            t.launches[lo..hi].iter().filter(|l| !same_thread || l.tid == m.tid).fold(None, |acc: Option<(i64, i64)>, l| {
                Some(acc.map_or((l.correlation, l.correlation), |(a, b)| (a.min(l.correlation), b.max(l.correlation))))
            })
        };
        if let Some((a, b)) = span(true).or_else(|| span(false)) {
            ranges.push((a, b, i));
        }
    }
    if ranges.is_empty() {
        return Vec::new();
    }
    ranges.sort_unstable();
    let mut span: Vec<Option<(f64, f64)>> = vec![None; marks.len()];
    for k in t.kernels.iter().filter(|k| k.correlation >= 0) {
        let at = ranges.partition_point(|r| r.0 <= k.correlation);
        if at == 0 {
            continue;
        }
        let (_, b, i) = ranges[at - 1];
        if k.correlation <= b {
            let s = span[i].get_or_insert((k.start, k.end()));
            *s = (s.0.min(k.start), s.1.max(k.end()));
        }
    }
    marks.iter().zip(span).filter_map(|(m, s)| s.map(|(a, b)| Window::annotated(a, b, &m.info, &m.name))).collect()
}

/// Whether a kernel name is a host-to-device copy (CUDA's "Memcpy HtoD (Pinned -> Device)", HIP's
/// "CopyHostToDevice").
pub fn is_host_to_device(name: &str) -> bool {
    name.contains("HtoD") || name.contains("HostToDevice")
}

/// Whether a category is the model's own work (not copies, element-wise glue or unknown kernels).
fn model_work(c: Category) -> bool {
    !matches!(c, Category::MemcpyMemset | Category::NormElementwise | Category::Other)
}

/// Steps from graph replays. A step starts:
/// - at a host-to-device copy that follows model work (the engine copying the step's inputs), so
///   every graph a forward pass replays (one per layer with piecewise graphs) and the eager
///   kernels around them (attention between the pieces, sampling after) are one step;
/// - at a replay that starts a forward pass, when no copy started the step already: the forward
///   pass's first graph is the one whose first kernel is the rarest first kernel among the replays
///   (with piecewise graphs the middle layers' pieces all start alike, the first piece once per
///   pass; with whole-pass graphs every replay starts alike);
/// - in a trace without any input copy, also at an eager kernel of that same name (an eager
///   forward pass starting) and after an idle gap over `gap_us`.
///
/// A stretch without model work joins the step before it; kernels before the first start are a
/// step cut by the profiler's start, left out.
fn graph_windows(t: &Timeline, gap_us: f64) -> Vec<Window> {
    let launches: HashSet<i64> = t.graph_launches.iter().copied().collect();
    let is_copy_in = |k: &crate::Kernel| t.category(k) == Category::MemcpyMemset && is_host_to_device(&t.names[k.name as usize]);
    // The first kernel of each replay, and how many replays start with each name.
    let mut seen: HashSet<i64> = HashSet::new();
    let mut firsts: Vec<(usize, u32)> = Vec::new();
    let mut count: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    for (i, k) in t.kernels.iter().enumerate() {
        if launches.contains(&k.correlation) && seen.insert(k.correlation) {
            firsts.push((i, k.name));
            *count.entry(k.name).or_default() += 1;
        }
    }
    let start_name = firsts.iter().min_by_key(|(i, n)| (count[n], *i)).map(|(_, n)| *n);
    let pass_starts: HashSet<usize> = firsts.iter().filter(|(_, n)| Some(*n) == start_name).map(|(i, _)| *i).collect();
    let copies = t.kernels.iter().any(is_copy_in);
    // Step starts.
    let mut starts: Vec<f64> = Vec::new();
    let mut work_since = true;
    let mut prev_end = f64::NEG_INFINITY;
    for (i, k) in t.kernels.iter().enumerate() {
        let replay = launches.contains(&k.correlation);
        if is_copy_in(k) {
            if work_since {
                starts.push(k.start);
                work_since = false;
            }
        } else if (pass_starts.contains(&i) || (!copies && !replay && (k.start - prev_end > gap_us || Some(k.name) == start_name)))
            && work_since
        {
            starts.push(k.start);
        }
        if replay || model_work(t.category(k)) {
            work_since = true;
        }
        prev_end = prev_end.max(k.end());
    }
    struct Seg {
        w: Window,
        work: bool,
        replays: HashSet<i64>,
    }
    let mut segs: Vec<Option<Seg>> = (0..starts.len()).map(|_| None).collect();
    for k in &t.kernels {
        let at = starts.partition_point(|s| *s <= k.start);
        if at == 0 {
            continue;
        }
        let s = segs[at - 1].get_or_insert_with(|| Seg { w: Window::new(k.start, k.end()), work: false, replays: HashSet::new() });
        s.w.end = s.w.end.max(k.end());
        s.work |= model_work(t.category(k));
        if launches.contains(&k.correlation) {
            s.replays.insert(k.correlation);
            s.work = true;
        }
    }
    let mut out: Vec<Window> = Vec::new();
    for s in segs.into_iter().flatten() {
        match out.last_mut() {
            Some(prev) if !s.work => prev.end = prev.end.max(s.w.end),
            // The tail of a step the profiler cut: left out.
            None if !s.work => {}
            _ => {
                let n = s.replays.len() as u32;
                let (kind, source) = match n {
                    // Engines capture decode batches as one graph and run prefill eagerly.
                    0 => (Some(Phase::Prefill), PhaseSource::CudaGraph),
                    1 => (Some(Phase::Decode), PhaseSource::CudaGraph),
                    // Piecewise graphs run prefill, mixed and decode steps alike.
                    _ => (None, PhaseSource::Duration),
                };
                out.push(Window { kind, source, graph_replays: n, ..s.w });
            }
        }
    }
    normalize(out, false)
}

/// Windows from runs of intervals separated by more than `gap_us`.
fn gap_windows(intervals: impl Iterator<Item = (f64, f64)>, gap_us: f64) -> Vec<Window> {
    let mut out: Vec<Window> = Vec::new();
    for (s, e) in intervals {
        match out.last_mut() {
            Some(w) if s - w.end <= gap_us => w.end = w.end.max(e),
            _ => out.push(Window::new(s, e)),
        }
    }
    out
}

/// What one step spent, by category.
#[derive(Debug, Clone)]
pub struct StepStat {
    /// The step's window, kind and annotation.
    pub window: Window,
    /// Wall time of the step, ms.
    pub ms: f64,
    /// Union of each category's kernels, ms (index: [`Category::index`]).
    pub category_ms: [f64; Category::ALL.len()],
    /// Union of all kernels, ms.
    pub busy_ms: f64,
    /// Sum of kernel durations, ms.
    pub kernel_ms: f64,
    /// GPU events in the step.
    pub kernels: u64,
    /// NCCL kernels in the step.
    pub nccl_calls: u32,
    /// Their summed duration, ms.
    pub nccl_ms: f64,
    /// All-reduce kernels in the step: NCCL all-reduces, the engines' custom all-reduces and the
    /// fused all-reduce + norm kernels.
    pub allreduce_calls: u32,
    /// CUDA/HIP graph replays whose kernels ran in the step.
    pub graph_replays: u32,
}

impl StepStat {
    /// The step's kind.
    pub fn phase(&self) -> Phase {
        self.window.kind.unwrap_or(Phase::Decode)
    }
}

/// Splits every window by category (kernels clipped to the window; overlap counted once).
pub fn split(t: &Timeline, windows: &[Window]) -> (Vec<StepStat>, u64) {
    let launches: HashSet<i64> = t.graph_launches.iter().copied().collect();
    let mut replays: HashSet<i64> = HashSet::new();
    let mut out = Vec::with_capacity(windows.len());
    let mut ki = 0;
    let mut outside = 0u64;
    let mut per_cat: Vec<Vec<(f64, f64)>> = vec![Vec::new(); Category::ALL.len()];
    let mut all: Vec<(f64, f64)> = Vec::new();
    for w in windows {
        while ki < t.kernels.len() && t.kernels[ki].start < w.start {
            outside += 1;
            ki += 1;
        }
        per_cat.iter_mut().for_each(Vec::clear);
        all.clear();
        replays.clear();
        let (mut kernel_us, mut nccl_calls, mut nccl_us, mut allreduce_calls, mut n) = (0.0, 0u32, 0.0, 0u32, 0u64);
        while ki < t.kernels.len() && t.kernels[ki].start < w.end.max(w.start + f64::MIN_POSITIVE) {
            let k = &t.kernels[ki];
            let iv = (k.start, k.end().min(w.end));
            let cat = t.category(k);
            per_cat[cat.index()].push(iv);
            all.push(iv);
            kernel_us += iv.1 - iv.0;
            n += 1;
            if cat == Category::Nccl {
                nccl_calls += 1;
                nccl_us += iv.1 - iv.0;
            }
            if t.allreduce[k.name as usize] {
                allreduce_calls += 1;
            }
            if launches.contains(&k.correlation) {
                replays.insert(k.correlation);
            }
            ki += 1;
        }
        let mut category_ms = [0.0; Category::ALL.len()];
        for (c, v) in per_cat.iter_mut().enumerate() {
            category_ms[c] = crate::union_len(v) / 1e3;
        }
        out.push(StepStat {
            window: w.clone(),
            ms: (w.end - w.start) / 1e3,
            category_ms,
            busy_ms: crate::union_len(&mut all) / 1e3,
            kernel_ms: kernel_us / 1e3,
            kernels: n,
            nccl_calls,
            nccl_ms: nccl_us / 1e3,
            allreduce_calls,
            graph_replays: replays.len() as u32,
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
        let mut t = Timeline::default();
        for n in names {
            t.push_name(n, crate::classify(n));
        }
        t.kernels =
            ks.iter().map(|&(start, end, name, correlation)| Kernel { start, dur: (end - start) as f32, correlation, name }).collect();
        t
    }

    fn kinds(s: &Steps) -> Vec<(Phase, PhaseSource)> {
        s.windows.iter().map(|w| (w.kind.expect("decided"), w.source)).collect()
    }

    #[test]
    fn idle_gaps_cut_steps_and_a_long_step_is_prefill() {
        let t = timeline(&["nvjet_gemm"], &[(0.0, 100.0, 0, 1), (150.0, 200.0, 0, 2), (2000.0, 2100.0, 0, 3), (4000.0, 5000.0, 0, 4)]);
        let s = segment(&t, 1000.0);
        assert_eq!(s.segmentation, Segmentation::IdleGaps);
        let d = PhaseSource::Duration;
        assert_eq!(kinds(&s), [(Phase::Decode, d), (Phase::Decode, d), (Phase::Prefill, d)]);
        let (stats, outside) = split(&t, &s.windows);
        assert_eq!(outside, 0);
        // Step 1 spans 0..200 with 150 us busy: the 50 us between kernels is idle.
        assert!((stats[0].ms - 0.2).abs() < 1e-12 && (stats[0].busy_ms - 0.15).abs() < 1e-12);
    }

    #[test]
    fn without_input_copies_each_graph_replay_is_a_decode_step_and_eager_kernels_after_a_gap_prefill() {
        // Each replay starts with the embedding; sampling runs eagerly after it; a prefill runs
        // eagerly after an idle gap.
        let mut t = timeline(
            &["nvjet_gemm", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "flash_fwd_kernel", "indexSelectLargeIndex", "argmax_kernel"],
            &[
                (0.0, 5.0, 3, 10),
                (5.0, 50.0, 0, 10),
                (50.0, 60.0, 1, 10),
                (65.0, 70.0, 4, -1),
                (500.0, 505.0, 3, 11),
                (505.0, 550.0, 0, 11),
                (5000.0, 9000.0, 2, 99),
            ],
        );
        t.graph_launches = vec![10, 11];
        let s = segment(&t, 100.0);
        assert_eq!(s.segmentation, Segmentation::CudaGraphs);
        let got: Vec<_> = s.windows.iter().map(|w| (w.start, w.end, w.kind, w.source)).collect();
        let g = PhaseSource::CudaGraph;
        assert_eq!(
            got,
            [(0.0, 70.0, Some(Phase::Decode), g), (500.0, 550.0, Some(Phase::Decode), g), (5000.0, 9000.0, Some(Phase::Prefill), g),]
        );
        let (stats, _) = split(&t, &s.windows);
        assert_eq!((stats[0].nccl_calls, stats[0].allreduce_calls), (1, 1));
        assert!((stats[0].category_ms[Category::Nccl.index()] - 0.01).abs() < 1e-12);
    }

    #[test]
    fn piecewise_graphs_between_input_copies_are_one_step() {
        // Two forward passes of three piecewise graphs each (the first starts with the
        // embedding, the others with the output projection), attention run eagerly between them,
        // each pass after its input copy and followed by sampling.
        let names = [
            "Memcpy HtoD (Pinned -> Device)",
            "nvjet_tst_64x8_64x16_4x1_v_bz_TNT",
            "kernel_unified_attention_2d",
            "void at::native::argmax_kernel",
            "void at::native::indexSelectLargeIndex",
        ];
        let mut ks = Vec::new();
        let mut corr = 100;
        for step in 0..2 {
            let t0 = step as f64 * 1000.0;
            ks.push((t0, t0 + 2.0, 0, -1));
            for piece in 0..3 {
                let p0 = t0 + 10.0 + piece as f64 * 100.0;
                ks.push((p0, p0 + 5.0, if piece == 0 { 4 } else { 1 }, corr));
                ks.push((p0 + 5.0, p0 + 60.0, 1, corr));
                ks.push((p0 + 61.0, p0 + 90.0, 2, -1));
                corr += 1;
            }
            ks.push((t0 + 400.0, t0 + 410.0, 3, -1));
        }
        let mut t = timeline(&names, &ks);
        t.graph_launches = (100..106).collect();
        let s = segment(&t, 1.0);
        assert_eq!(s.segmentation, Segmentation::CudaGraphs);
        assert_eq!(s.windows.len(), 2, "{:?}", s.windows);
        assert_eq!(s.windows.iter().map(|w| w.graph_replays).collect::<Vec<_>>(), [3, 3]);
        assert_eq!((s.windows[0].start, s.windows[0].end), (0.0, 410.0));
        let (_, outside) = split(&t, &s.windows);
        assert_eq!(outside, 0);
    }

    #[test]
    fn without_input_copies_each_forward_pass_starts_at_its_first_graph() {
        // Piecewise passes of three graphs, no copies: a pass starts at the graph whose first
        // kernel (the embedding) is the rarest.
        let names = ["nvjet_tst_64x8_64x16_4x1_v_bz_TNT", "kernel_unified_attention_2d", "void at::native::indexSelectLargeIndex"];
        let mut ks = Vec::new();
        let mut corr = 100;
        for step in 0..3 {
            let t0 = step as f64 * 1000.0;
            for piece in 0..3 {
                let p0 = t0 + piece as f64 * 100.0;
                ks.push((p0, p0 + 5.0, if piece == 0 { 2 } else { 0 }, corr));
                ks.push((p0 + 5.0, p0 + 60.0, 0, corr));
                ks.push((p0 + 61.0, p0 + 90.0, 1, -1));
                corr += 1;
            }
        }
        let mut t = timeline(&names, &ks);
        t.graph_launches = (100..109).collect();
        let s = segment(&t, 1.0);
        assert_eq!(s.windows.iter().map(|w| (w.start, w.graph_replays)).collect::<Vec<_>>(), [(0.0, 3), (1000.0, 3), (2000.0, 3)]);
    }

    #[test]
    fn overlapping_streams_are_counted_once_and_reported() {
        let mut t = timeline(&["nvjet_gemm", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"], &[(0.0, 100.0, 0, 1), (50.0, 150.0, 1, 2)]);
        let info = parse_step_name("decode_step").expect("a step");
        t.marks = vec![StepMark { start: 0.0, end: 200.0, info, gpu: true, tid: 0, name: "decode_step".into() }];
        let s = segment(&t, 1000.0);
        assert_eq!(s.segmentation, Segmentation::StepAnnotations);
        let (stats, _) = split(&t, &s.windows);
        let st = &stats[0];
        assert!((st.busy_ms - 0.15).abs() < 1e-12, "{}", st.busy_ms);
        assert!((st.kernel_ms - st.busy_ms - 0.05).abs() < 1e-12, "overlap {}", st.kernel_ms - st.busy_ms);
        assert!((st.ms - st.busy_ms - 0.05).abs() < 1e-12, "idle {}", st.ms - st.busy_ms);
    }

    #[test]
    fn host_ranges_map_onto_the_gpu_through_their_launches() {
        let mut t = timeline(&["nvjet_gemm"], &[(100.0, 150.0, 0, 1), (150.0, 300.0, 0, 2), (900.0, 950.0, 0, 3)]);
        t.launches = vec![
            crate::Launch { ts: 10.0, correlation: 1, tid: 7 },
            crate::Launch { ts: 20.0, correlation: 2, tid: 7 },
            crate::Launch { ts: 500.0, correlation: 3, tid: 7 },
        ];
        let name = "[Executor] _forward_step 5: 0 ctx reqs, 32 gen reqs";
        let info = parse_step_name(name).expect("a step");
        t.marks = vec![
            StepMark { start: 0.0, end: 40.0, info, gpu: false, tid: 7, name: name.into() },
            StepMark { start: 450.0, end: 600.0, info, gpu: false, tid: 7, name: name.into() },
        ];
        let s = segment(&t, 1.0);
        assert_eq!((s.segmentation, s.family), (Segmentation::CpuAnnotations, Some(Family::TensorrtLlm)));
        let got: Vec<_> = s.windows.iter().map(|w| (w.start, w.end, w.requests, w.tokens)).collect();
        assert_eq!(got, [(100.0, 300.0, Some(32), Some(32)), (900.0, 950.0, Some(32), Some(32))]);
    }

    #[test]
    fn the_most_specific_annotations_win_and_nested_ranges_belong_to_their_step() {
        let mut t = timeline(&["nvjet_gemm"], &[(0.0, 100.0, 0, 1)]);
        let mark = |name: &str, start, end| StepMark {
            start,
            end,
            info: parse_step_name(name).expect("a step"),
            gpu: true,
            tid: 0,
            name: name.into(),
        };
        t.marks = vec![
            mark("ProfilerStep#3", 0.0, 200.0),
            mark("execute_context_1(512)_generation_3(3)", 0.0, 120.0),
            mark("decode", 10.0, 20.0),
        ];
        let s = segment(&t, 1.0);
        assert_eq!(s.family, Some(Family::Vllm));
        assert_eq!(s.windows.len(), 1);
        let w = &s.windows[0];
        assert_eq!((w.kind, w.tokens, w.requests, w.source), (Some(Phase::Mixed), Some(515), Some(4), PhaseSource::Annotation));
    }

    #[test]
    fn step_names_give_kind_tokens_and_requests() {
        let p = |n: &str| parse_step_name(n).map(|i| (i.family, i.kind, i.tokens, i.requests));
        use Family::*;
        assert_eq!(p("execute_context_2(4096)_generation_0(0)"), Some((Vllm, Some(Phase::Prefill), Some(4096), Some(2))));
        assert_eq!(p("execute_context_0(0)_generation_64(64)"), Some((Vllm, Some(Phase::Decode), Some(64), Some(64))));
        assert_eq!(p("execute_context_0(0)_generation_0(0)"), Some((Vllm, Some(Phase::Idle), Some(0), Some(0))));
        assert_eq!(p("step[decode bs=48]"), Some((Sglang, Some(Phase::Decode), Some(48), Some(48))));
        assert_eq!(p("step[prefill bs=2 toks=3000]"), Some((Sglang, Some(Phase::Prefill), Some(3000), Some(2))));
        assert_eq!(p("step[mixed bs=9 ext=1024 dec=8]"), Some((Sglang, Some(Phase::Mixed), Some(1032), Some(9))));
        assert_eq!(p("step[idle]"), Some((Sglang, Some(Phase::Idle), Some(0), Some(0))));
        assert_eq!(p("step[target_verify bs=8]"), Some((Sglang, Some(Phase::Decode), None, Some(8))));
        assert_eq!(
            p("python/sglang/srt/model_executor/model_runner.py(1820): forward_extend"),
            Some((Sglang, Some(Phase::Prefill), None, None))
        );
        assert_eq!(p("[Executor] _forward_step 12: 0 ctx reqs, 32 gen reqs"), Some((TensorrtLlm, Some(Phase::Decode), Some(32), Some(32))));
        assert_eq!(p("[Executor] _forward_step 12587: 18 gen reqs"), Some((TensorrtLlm, Some(Phase::Decode), Some(18), Some(18))));
        assert_eq!(
            p("[Executor] _forward_step 7: 2 ctx reqs, 2048 ctx tokens, 30 gen reqs"),
            Some((TensorrtLlm, Some(Phase::Mixed), Some(2078), Some(32)))
        );
        assert_eq!(p("[Executor] _forward_step 7: 1 ctx reqs, 0 gen reqs"), Some((TensorrtLlm, Some(Phase::Prefill), None, Some(1))));
        assert_eq!(p("executeStep: 0 ctx reqs, 8 gen reqs"), Some((TensorrtLlm, Some(Phase::Decode), Some(8), Some(8))));
        assert_eq!(p("ProfilerStep#17"), Some((ProfilerStep, None, None, None)));
        assert_eq!(p("decode_step"), Some((Named, Some(Phase::Decode), None, None)));
        assert_eq!(p("ForwardMode.EXTEND"), Some((Named, Some(Phase::Prefill), None, None)));
        assert_eq!(p("execute_model"), Some((Named, None, None, None)));
        assert_eq!(p("prefill"), Some((Named, Some(Phase::Prefill), None, None)));
        assert_eq!(p("nccl:all_reduce"), None);
        assert_eq!(p("decode_attention"), None);
        assert_eq!(p("## decoder fp8 None ##"), None);
        assert_eq!(p("aten::mm"), None);
        assert_eq!(p("python/torch/nn/modules/module.py(1750): _call_impl"), None);
    }
    fn gpu_mark(name: &str, start: f64, end: f64) -> StepMark {
        StepMark { start, end, info: parse_step_name(name).expect("a step"), gpu: true, tid: 0, name: name.into() }
    }

    #[test]
    fn spans_inside_each_span_are_counted_with_ties() {
        let spans = [(0.0, 100.0), (0.0, 50.0), (10.0, 20.0), (30.0, 40.0), (60.0, 70.0), (90.0, 300.0), (95.0, 96.0)];
        assert_eq!(contained(&spans), [5, 2, 0, 0, 0, 1, 0]);
        assert_eq!(contained(&[(0.0, 10.0), (0.0, 10.0)]), [1, 0], "a duplicate holds one");
        assert_eq!(contained(&[(0.0, 10.0), (2.0, 10.0), (5.0, 10.0)]), [2, 1, 0], "equal ends are inside");
        assert!(contained(&[]).is_empty());
    }

    #[test]
    fn a_wrapper_holds_two_steps_of_its_kind_with_other_names() {
        let w = |spans: &[(f64, f64, &str)]| wrappers(spans);
        let (d4, d5, p) = ("step[decode bs=4]", "step[decode bs=5]", "step[prefill bs=1 toks=9]");
        assert_eq!(w(&[(0.0, 100.0, "step[decode bs=64]"), (0.0, 40.0, d4), (50.0, 90.0, d5)]), [true, false, false]);
        // One range copied per stream (Kineto): the longest copy holds the others of its name.
        assert_eq!(w(&[(0.0, 100.0, d4), (1.0, 30.0, d4), (40.0, 60.0, d4)]), [false, false, false]);
        // A step holding its draft and verify frames (another kind) is a step.
        let (fd, fe) = ("model_runner.py(1): forward_decode", "model_runner.py(2): forward_extend");
        assert_eq!(w(&[(0.0, 100.0, p), (0.0, 40.0, fd), (50.0, 90.0, fe)]), [false, false, false]);
    }

    #[test]
    fn a_step_annotation_around_other_steps_is_a_wrapper_and_does_not_swallow_them() {
        let mut t = timeline(&["nvjet_gemm"], &[(0.0, 90.0, 0, 1), (100.0, 190.0, 0, 2), (200.0, 290.0, 0, 3)]);
        t.marks = vec![
            gpu_mark("step[decode bs=64]", 0.0, 1e9),
            gpu_mark("step[decode bs=4]", 0.0, 95.0),
            gpu_mark("step[decode bs=5]", 100.0, 195.0),
            gpu_mark("step[prefill bs=1 toks=512]", 200.0, 295.0),
        ];
        let s = segment(&t, 1.0);
        assert_eq!(s.segmentation, Segmentation::StepAnnotations);
        let got: Vec<_> = s.windows.iter().map(|w| (w.start, w.end, w.requests, w.kind)).collect();
        let once_per_stream = got.clone();
        assert_eq!(
            got,
            [
                (0.0, 95.0, Some(4), Some(Phase::Decode)),
                (100.0, 195.0, Some(5), Some(Phase::Decode)),
                (200.0, 295.0, Some(1), Some(Phase::Prefill))
            ],
            "the wrapper is gone and each step keeps its own counts"
        );
        // Each step written once per stream, as Kineto writes a range whose kernels ran on three
        // streams: the same steps, each once.
        let mut copies = Vec::new();
        for m in &t.marks[1..] {
            copies.push(m.clone());
            copies.push(gpu_mark(&m.name, m.start + 1.0, m.start + 10.0));
            copies.push(gpu_mark(&m.name, m.start + 20.0, m.start + 30.0));
        }
        t.marks = copies;
        let s = segment(&t, 1.0);
        let got: Vec<_> = s.windows.iter().map(|w| (w.start, w.end, w.requests, w.kind)).collect();
        assert_eq!(got, once_per_stream);
    }

    #[test]
    fn a_named_range_around_its_sub_ranges_stays_one_step() {
        // Generic names (execute_model, model_forward, ...) may nest inside one step: the outer one
        // is the step, as before, even around two inner ranges.
        let mut t = timeline(&["nvjet_gemm"], &[(0.0, 90.0, 0, 1)]);
        t.marks = vec![gpu_mark("execute_model", 0.0, 100.0), gpu_mark("model_forward", 5.0, 40.0), gpu_mark("forward_batch", 45.0, 80.0)];
        let s = segment(&t, 1.0);
        assert_eq!(s.family, Some(Family::Named));
        assert_eq!(s.windows.len(), 1);
        assert_eq!(s.windows[0].name.as_deref(), Some("execute_model"));
    }
}
