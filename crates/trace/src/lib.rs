//! `servetune trace`: where a serving step's GPU time goes. Reads a PyTorch profiler (Kineto)
//! trace as a stream, classifies its kernels by a rule table, cuts it into engine steps and splits
//! each step by category, then sets the split beside the performance model's prediction.

#![warn(missing_docs)]

pub mod classify;
pub mod compare;
pub mod read;
pub mod render;
pub mod report;
pub mod scan;
pub mod steps;
pub mod synth;

use std::collections::HashMap;
use std::path::Path;

pub use classify::{classify, parse_nccl, Category};
pub use compare::{compare, Predicted};
use read::{EventCat, Phase as Ph, RawEvent};
pub use report::{analyze, TraceReport, SCHEMA};
pub use steps::{Family, Phase};

/// What can go wrong reading a trace.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened.
    #[error("{path}: cannot open the trace: {source}")]
    Open {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not Chrome-trace JSON.
    #[error("{path}: {reason}; give a PyTorch profiler / Kineto trace (.json or .json.gz, as torch.profiler, sglang's /start_profile or vLLM's profiler write it)")]
    NotATrace {
        /// The file.
        path: String,
        /// What the parser found.
        reason: String,
    },
    /// The file ends early.
    #[error("{path}: {reason}; the trace was cut short (copy it again, or let the profiler finish writing)")]
    Truncated {
        /// The file.
        path: String,
        /// What ended early.
        reason: String,
    },
    /// The trace has no kernels, copies or memsets.
    #[error("{path}: {events} events but no GPU events (cat kernel, gpu_memcpy, gpu_memset); profile with the CUDA activity on (torch.profiler activities=[CPU, CUDA])")]
    NoGpuEvents {
        /// The file.
        path: String,
        /// Events the file held.
        events: u64,
    },
    /// The GPU events are all of another phase than complete ("ph": "X"), e.g. begin/end pairs.
    #[error("{path}: its {events} GPU events (cat kernel, gpu_memcpy, gpu_memset) are not complete events (\"ph\": \"X\", a start and a duration) but begin/end pairs or another phase; the analysis reads complete events, as torch.profiler and Kineto write them: give such a trace")]
    NoCompleteGpuEvents {
        /// The file.
        path: String,
        /// GPU events of another phase.
        events: u64,
    },
    /// Every GPU event has a start or a duration that is not a time.
    #[error("{path}: all {skipped} GPU events (cat kernel, gpu_memcpy, gpu_memset) have a start (ts) or duration (dur) that is missing or not a time (ts within 1e17 us, dur from 0 to a day); the file is damaged or was rewritten: profile again")]
    NoTimedGpuEvents {
        /// The file.
        path: String,
        /// GPU events left out.
        skipped: u64,
    },
    /// The kernels name more than one device: the file holds several GPUs' timelines.
    #[error("{path}: its kernels ran on {} devices ({}); the analysis reads one GPU's timeline: give the trace of one rank (sglang and vLLM write one file per rank)", devices.len(), devices.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))]
    ManyDevices {
        /// The file.
        path: String,
        /// The devices its GPU events name (the first few).
        devices: Vec<i64>,
    },
    /// The trace is over a size limit (its decompressed JSON, or one entry of it).
    #[error("{path}: {reason}")]
    TooLarge {
        /// The file.
        path: String,
        /// Which limit, how large, and what to do.
        reason: String,
    },
    /// A pipe, a FIFO or a device sent nothing for [`read::STREAM_IDLE`].
    #[error("{path}: nothing arrived for {secs} s: it is a pipe, a FIFO or a device that stopped sending (a FIFO nobody writes to?); give the trace file itself")]
    Stalled {
        /// The file.
        path: String,
        /// The silence allowed, seconds.
        secs: u64,
    },
    /// A setting is out of range.
    #[error("{0}")]
    Input(String),
}

/// One GPU kernel, copy or memset.
#[derive(Debug, Clone, Copy)]
pub struct Kernel {
    /// Start, us.
    pub start: f64,
    /// Correlation id with its launching runtime call (-1 when absent).
    pub correlation: i64,
    /// Duration, us (f32: a kernel of 10 ms keeps 1 ns).
    pub dur: f32,
    /// Index into [`Timeline::names`].
    pub name: u32,
}

// Streams and devices are not kept (the split is the union over all of them): 24 bytes a kernel
// keep a 1 GB trace (about 5 million kernels) near 200 MB.
const _: () = assert!(std::mem::size_of::<Kernel>() == 24);

impl Kernel {
    /// End, us.
    pub fn end(&self) -> f64 {
        self.start + self.dur as f64
    }
}

/// A step annotation (a `record_function` range, or sglang's forward frame) naming an engine step.
#[derive(Debug, Clone)]
pub struct StepMark {
    /// Start, us.
    pub start: f64,
    /// End, us.
    pub end: f64,
    /// What the name says of the step.
    pub info: steps::StepInfo,
    /// Whether the range is the GPU-side copy (gpu_user_annotation) rather than the host range.
    pub gpu: bool,
    /// The host thread that ran the range.
    pub tid: u64,
    /// The name as the trace gives it.
    pub name: String,
}

/// A host call that put work on the GPU (a kernel or graph launch, a copy, a memset), kept to map
/// host step ranges onto the GPU.
#[derive(Debug, Clone, Copy)]
pub struct Launch {
    /// When it was called, us.
    pub ts: f64,
    /// Its correlation id (the kernels it launched carry the same).
    pub correlation: i64,
    /// The thread that called it.
    pub tid: u64,
}

/// The parts of a trace the analysis uses, kept compactly (names interned).
#[derive(Debug, Default)]
pub struct Timeline {
    /// Distinct kernel names.
    pub names: Vec<String>,
    /// Category of each name.
    pub categories: Vec<Category>,
    /// Whether each name is an all-reduce (NCCL AllReduce, custom or fused all-reduce).
    pub allreduce: Vec<bool>,
    /// GPU events.
    pub kernels: Vec<Kernel>,
    /// Correlation ids of `cudaGraphLaunch`/`hipGraphLaunch` calls.
    pub graph_launches: Vec<i64>,
    /// Host launch calls, by time.
    pub launches: Vec<Launch>,
    /// Step annotations, GPU and host, by start.
    pub marks: Vec<StepMark>,
    /// Events in the file.
    pub events: u64,
    /// GPU events left out because their start or duration is not a time ([`MAX_EVENT_US`]), or
    /// their start is more than a day from the median GPU event's.
    pub skipped: u64,
    /// The devices the kernels name (Kineto's `args.device`; at most 8 kept).
    pub devices: Vec<i64>,
    /// GPU events of a phase other than complete ("B"/"E" pairs and the like), not read.
    pub other_phase: u64,
}

/// The longest GPU event taken, us (a day): a longer, negative or non-finite duration, or a start
/// that is not finite, is a corrupt or hand-edited event, left out and counted
/// ([`Timeline::skipped`]), so that one of them cannot turn every figure into infinity.
pub const MAX_EVENT_US: f64 = 86_400e6;

/// Whether a host runtime call puts work on the GPU.
fn is_launch(name: &str) -> bool {
    name.contains("Launch") || name.contains("Memcpy") || name.contains("Memset")
}

/// Whether a time is one (finite, within 3,000 years of the clock's zero).
fn is_time(ts: f64) -> bool {
    ts.is_finite() && ts.abs() < 1e17
}

impl Timeline {
    /// Reads the trace at `path`, within the default size limits ([`read::json_limit`]).
    pub fn read(path: &Path) -> Result<Timeline, TraceError> {
        Self::read_within(path, None)
    }

    /// Reads the trace at `path`; its JSON, once decompressed, may hold at most `max_json` bytes
    /// (None: the default for its kind, [`read::json_limit`]).
    pub fn read_within(path: &Path, max_json: Option<u64>) -> Result<Timeline, TraceError> {
        let mut t = Timeline::default();
        let mut index: HashMap<String, u32> = HashMap::new();
        let stats = read::for_each_event_within(path, max_json, &mut |e| t.add(&mut index, e))?;
        t.events = stats.events;
        if !stats.had_events {
            return Err(TraceError::NotATrace { path: path.display().to_string(), reason: "JSON without a traceEvents array".into() });
        }
        if t.kernels.is_empty() && t.skipped > 0 {
            return Err(TraceError::NoTimedGpuEvents { path: path.display().to_string(), skipped: t.skipped });
        }
        if t.kernels.is_empty() && t.other_phase > 0 {
            return Err(TraceError::NoCompleteGpuEvents { path: path.display().to_string(), events: t.other_phase });
        }
        if t.kernels.is_empty() {
            return Err(TraceError::NoGpuEvents { path: path.display().to_string(), events: stats.events });
        }
        if t.devices.len() > 1 {
            return Err(TraceError::ManyDevices { path: path.display().to_string(), devices: t.devices.clone() });
        }
        // Unstable: no merge buffer of half the kernels (the order of equal starts is irrelevant:
        // every figure is a union or a sum).
        t.kernels.sort_unstable_by(|a, b| a.start.total_cmp(&b.start));
        // A GPU event more than a day from the median start is a stray (a hand-edited `ts` of 0
        // among epoch-microsecond starts): one would stretch the span over decades and make a
        // step of its own. Left out and counted like an event whose start is not a time.
        let mid = t.kernels[t.kernels.len() / 2].start;
        let before = t.kernels.len();
        t.kernels.retain(|k| (k.start - mid).abs() <= MAX_EVENT_US);
        t.skipped += (before - t.kernels.len()) as u64;
        t.launches.sort_unstable_by(|a, b| a.ts.total_cmp(&b.ts));
        t.marks.sort_by(|a, b| a.start.total_cmp(&b.start));
        Ok(t)
    }

    fn add(&mut self, index: &mut HashMap<String, u32>, e: RawEvent<'_>) {
        let complete = e.ph.is_none_or(|p| p == Ph::Complete);
        let on_gpu = matches!(e.cat, EventCat::Kernel | EventCat::Memcpy | EventCat::Memset);
        if on_gpu && !complete {
            self.other_phase += 1;
        }
        let gpu = on_gpu && complete;
        let (Some(ts), dur) = (e.ts, e.dur.unwrap_or(0.0)) else {
            // A GPU event without a start is left out like one with a start that is not a time.
            if gpu {
                self.skipped += 1;
            }
            return;
        };
        let tid = e.tid.map_or(0, |t| t.0);
        match e.cat {
            EventCat::Kernel | EventCat::Memcpy | EventCat::Memset if complete => {
                // A start past 1e17 us (3,000 years from the clock's zero) or a duration past a day
                // is not a time.
                if !(is_time(ts) && (0.0..=MAX_EVENT_US).contains(&dur)) {
                    self.skipped += 1;
                    return;
                }
                let name = match e.args.collective.filter(|_| classify::collective_not_named(&e.name)) {
                    Some(c) => self.intern_collective(index, &e.name, c),
                    None => self.intern(index, &e.name, e.cat),
                };
                self.kernels.push(Kernel { start: ts, dur: dur as f32, correlation: e.args.correlation.unwrap_or(-1), name });
                // The devices kernels ran on, the first few (two already refuse the trace); a
                // copy may name the device at its other end, so copies are not counted.
                if let Some(d) = e.args.device.0.filter(|_| e.cat == EventCat::Kernel) {
                    if !self.devices.contains(&d) && self.devices.len() < 8 {
                        self.devices.push(d);
                    }
                }
            }
            EventCat::Runtime if is_launch(&e.name) => {
                let Some(c) = e.args.correlation else { return };
                if e.name.contains("GraphLaunch") {
                    self.graph_launches.push(c);
                }
                if is_time(ts) {
                    self.launches.push(Launch { ts, correlation: c, tid });
                }
            }
            EventCat::GpuUserAnnotation | EventCat::UserAnnotation | EventCat::PythonFunction if complete => {
                // Only sglang's model-runner frames among Python frames (cheap test first).
                if e.cat == EventCat::PythonFunction && !e.name.contains("model_runner.py") {
                    return;
                }
                if !(is_time(ts) && (0.0..=MAX_EVENT_US).contains(&dur)) {
                    return;
                }
                if let Some(info) = steps::parse_step_name(&e.name) {
                    let gpu = e.cat == EventCat::GpuUserAnnotation;
                    self.marks.push(StepMark { start: ts, end: ts + dur, info, gpu, tid, name: e.name.into_owned() });
                }
            }
            _ => {}
        }
    }

    fn intern(&mut self, index: &mut HashMap<String, u32>, name: &str, cat: EventCat) -> u32 {
        if let Some(i) = index.get(name) {
            return *i;
        }
        let category = match cat {
            EventCat::Memcpy | EventCat::Memset => Category::MemcpyMemset,
            _ => classify(name),
        };
        let i = self.push_name(name, category);
        index.insert(name.to_string(), i);
        i
    }

    /// An NCCL kernel whose name does not say its collective, with the collective its `args`
    /// name: kept under its name with the collective appended (`ncclDevKernel_Generic_4(...)
    /// [allgather]`), an all-reduce only when the args say so.
    fn intern_collective(&mut self, index: &mut HashMap<String, u32>, name: &str, c: read::Collective) -> u32 {
        let shown = format!("{name} [{}]", c.name());
        if let Some(i) = index.get(&shown) {
            return *i;
        }
        let i = self.push_name_as(&shown, Category::Nccl, c == read::Collective::AllReduce);
        index.insert(shown, i);
        i
    }

    /// Adds a kernel name of a known category; returns its index.
    pub fn push_name(&mut self, name: &str, category: Category) -> u32 {
        self.push_name_as(name, category, classify::is_allreduce(name, category))
    }

    /// [`Self::push_name`] with whether its kernels are all-reduces stated.
    fn push_name_as(&mut self, name: &str, category: Category, allreduce: bool) -> u32 {
        let i = self.names.len() as u32;
        self.categories.push(category);
        self.allreduce.push(allreduce);
        self.names.push(name.to_string());
        i
    }

    /// The category of a kernel.
    pub fn category(&self, k: &Kernel) -> Category {
        self.categories[k.name as usize]
    }
}

/// Total length of the union of `intervals` (sorted here), us.
pub fn union_len(intervals: &mut [(f64, f64)]) -> f64 {
    intervals.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    union_sorted(intervals.iter().copied())
}

/// Total length of the union of intervals given in order of start, us.
pub fn union_sorted(intervals: impl Iterator<Item = (f64, f64)>) -> f64 {
    let mut total = 0.0;
    let mut cur: Option<(f64, f64)> = None;
    for (s, e) in intervals {
        cur = match cur {
            Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    total + cur.map_or(0.0, |(s, e)| e - s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_union_counts_overlap_once() {
        let mut v = vec![(0.0, 10.0), (5.0, 12.0), (20.0, 25.0), (21.0, 22.0)];
        assert_eq!(union_len(&mut v), 17.0);
        assert_eq!(union_len(&mut []), 0.0);
    }
}
