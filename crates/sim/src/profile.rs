//! `/start_profile` and `/stop_profile` (sglang's shape): the engine records the steps it runs,
//! and stopping writes them as a PyTorch profiler (Kineto) trace whose kernels follow each step's
//! cost split, so `servetune trace` and `bench --profile` run end to end against the simulator.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use servetune_model::predict::Scenario;

use crate::cost::StepBatch;

/// Where one step's time goes, ms (the terms add up to the step).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Split {
    /// GEMMs: weight reads and compute (prefill GEMMs too).
    pub matmul_ms: f64,
    /// Attention: KV reads.
    pub attention_ms: f64,
    /// All-reduces.
    pub communication_ms: f64,
    /// Host overhead: the GPU idles.
    pub overhead_ms: f64,
}

impl Split {
    /// The sum of the terms.
    pub fn total_ms(&self) -> f64 {
        self.matmul_ms + self.attention_ms + self.communication_ms + self.overhead_ms
    }

    /// The split fitted to a step that took `dur`: the kernel terms scaled in proportion, or, where
    /// the step ran longer than its cost (an injected stall), the extra time as overhead.
    pub fn fitted(self, dur: Duration) -> Split {
        let want = dur.as_secs_f64() * 1e3;
        let total = self.total_ms();
        if total <= 0.0 {
            return Split { overhead_ms: want, ..Split::default() };
        }
        if want >= total {
            return Split { overhead_ms: self.overhead_ms + (want - total), ..self };
        }
        let k = want / total;
        Split {
            matmul_ms: self.matmul_ms * k,
            attention_ms: self.attention_ms * k,
            communication_ms: self.communication_ms * k,
            overhead_ms: self.overhead_ms * k,
        }
    }
}

/// One recorded step.
#[derive(Debug, Clone, Copy)]
pub struct StepRecord {
    /// Start, us from the start of the recording.
    pub start_us: f64,
    /// The step's split.
    pub split: Split,
    /// Whether the step prefilled prompt tokens (alone, or mixed with decodes: an "extend" step).
    pub prefill: bool,
}

/// What `/start_profile` asks (sglang's body; its other fields, such as `activities`, are
/// accepted and have no effect).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StartProfile {
    /// Where the trace goes: a name of a subdirectory of the simulator's profile directory, or
    /// that directory itself as an absolute path (what `servetune bench --profile` sends). Any
    /// other path is refused: a client never chooses where on the server's disk a file goes.
    #[serde(default)]
    pub output_dir: Option<String>,
    /// Steps to record; all steps until `/stop_profile` when absent.
    #[serde(default)]
    pub num_steps: Option<u64>,
}

/// Why a profile request failed.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// `/start_profile` while recording.
    #[error("a profile is already being recorded: POST /stop_profile first")]
    AlreadyRunning,
    /// `/stop_profile` without a recording.
    #[error("no profile is being recorded: POST /start_profile first")]
    NotRunning,
    /// `num_steps` 0.
    #[error("num_steps 0 records nothing: give 1 or more, or leave it out to record until /stop_profile")]
    ZeroSteps,
    /// `output_dir` names a path outside the profile directory.
    #[error("output_dir {given:?} is {why}: servetune sim writes profiles only under its profile directory {dir} (--profile-dir); give a plain name (one path component, no '/', '\\', '.' or '..') for a subdirectory there, or leave output_dir out")]
    OutsideDir {
        /// What the client gave.
        given: String,
        /// What is wrong with it.
        why: &'static str,
        /// The profile directory.
        dir: String,
    },
    /// The trace could not be written.
    #[error("cannot write the trace to {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

struct Recording {
    dir: PathBuf,
    remaining: Option<u64>,
    t0: Instant,
    steps: Vec<StepRecord>,
}

/// Shared between the HTTP handlers and the engine thread; cheap to check while not recording.
#[derive(Clone)]
pub struct Recorder {
    on: Arc<AtomicBool>,
    rec: Arc<Mutex<Option<Recording>>>,
    /// The only directory traces are written under.
    root: Arc<PathBuf>,
}

/// The longest name a client may give for a profile subdirectory, bytes.
pub const MAX_NAME_BYTES: usize = 128;

/// Where a trace goes for `output_dir`: the profile directory `root` itself, or one subdirectory
/// of it named by a plain name. A path elsewhere (absolute, with a separator, `.` or `..`) is
/// refused.
pub fn trace_dir(root: &Path, output_dir: Option<&str>) -> Result<PathBuf, ProfileError> {
    let Some(given) = output_dir else { return Ok(root.to_path_buf()) };
    let refuse = |why| Err(ProfileError::OutsideDir { given: given.to_string(), why, dir: root.display().to_string() });
    let p = Path::new(given);
    if p.is_absolute() {
        // sglang's clients (and `servetune bench --profile`) send an absolute directory; the
        // profile directory itself is where the trace goes anyway.
        let same = p == root || (p.canonicalize().ok().is_some_and(|c| root.canonicalize().ok().is_some_and(|r| r == c)));
        return if same { Ok(root.to_path_buf()) } else { refuse("an absolute path outside the profile directory") };
    }
    if given.is_empty() {
        return refuse("empty");
    }
    if given.len() > MAX_NAME_BYTES {
        return refuse("longer than 128 bytes");
    }
    if given.contains(['/', '\\', '\0']) {
        return refuse("a path (it has a separator)");
    }
    if given == "." || given == ".." {
        return refuse("not a name");
    }
    Ok(root.join(given))
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("on", &self.on.load(Ordering::Relaxed)).finish()
    }
}

/// What `/stop_profile` wrote.
#[derive(Debug, Clone, Serialize)]
pub struct Written {
    /// The trace file.
    pub trace_path: String,
    /// Steps in it.
    pub steps: usize,
    /// The split the simulator itself gave those steps, summed, ms.
    pub split_ms: Split,
}

impl Recorder {
    /// A recorder that writes traces under `root` only.
    pub fn new(root: PathBuf) -> Self {
        Self { on: Arc::default(), rec: Arc::default(), root: Arc::new(root) }
    }

    /// The profile directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Starts recording.
    pub fn start(&self, req: StartProfile) -> Result<(), ProfileError> {
        if req.num_steps == Some(0) {
            return Err(ProfileError::ZeroSteps);
        }
        let dir = trace_dir(&self.root, req.output_dir.as_deref())?;
        let mut g = self.rec.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if g.is_some() {
            return Err(ProfileError::AlreadyRunning);
        }
        // A directory the trace cannot go to is refused now, not after the steps were recorded.
        make_dir(&self.root, &dir).map_err(|source| ProfileError::Write { path: dir.display().to_string(), source })?;
        *g = Some(Recording { dir, remaining: req.num_steps, t0: Instant::now(), steps: Vec::new() });
        self.on.store(true, Ordering::Release);
        Ok(())
    }

    /// Records a step that starts at `start` (engine thread).
    pub fn record(&self, start: Instant, batch: &StepBatch, split: impl FnOnce() -> Split) {
        if !self.on.load(Ordering::Acquire) {
            return;
        }
        let mut g = self.rec.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(r) = g.as_mut() else { return };
        if r.remaining == Some(0) {
            return;
        }
        let start_us = start.saturating_duration_since(r.t0).as_secs_f64() * 1e6;
        r.steps.push(StepRecord { start_us, split: split(), prefill: batch.prefill_tokens > 0 });
        r.remaining = r.remaining.map(|n| n - 1);
    }

    /// Stops recording and writes the trace (blocking file I/O: call off the async runtime).
    pub fn stop(&self, tp: u32) -> Result<Written, ProfileError> {
        let r = {
            let mut g = self.rec.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            self.on.store(false, Ordering::Release);
            g.take().ok_or(ProfileError::NotRunning)?
        };
        let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
        let n = TRACE_SEQ.fetch_add(1, Ordering::Relaxed);
        let path = r.dir.join(format!("{stamp}-{}-{n}-TP-0.trace.json", std::process::id()));
        make_dir(&self.root, &r.dir).map_err(|source| ProfileError::Write { path: r.dir.display().to_string(), source })?;
        let split_ms = write_trace(&path, &r.steps, tp)?;
        Ok(Written { trace_path: path.display().to_string(), steps: r.steps.len(), split_ms })
    }
}

/// Traces written by this process, for unique file names.
static TRACE_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Creates the profile directory `root` and, when `dir` is a subdirectory of it, that one; a
/// subdirectory that exists as a symbolic link is refused, so a trace never lands outside `root`
/// through one.
///
/// The root itself must be a real directory of this user: the default one sits in the shared
/// temporary directory, where another user could have made it first (a link elsewhere, or a
/// folder they can read).
fn make_dir(root: &Path, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(root)?;
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(root)?;
    if m.file_type().is_symlink() {
        return Err(std::io::Error::other(format!(
            "the profile directory {} is a symbolic link; give --profile-dir a real directory",
            root.display()
        )));
    }
    // /proc/self belongs to the process's effective user.
    if let Ok(me) = std::fs::metadata("/proc/self") {
        if m.uid() != me.uid() {
            return Err(std::io::Error::other(format!(
                "the profile directory {} belongs to another user (uid {}); give --profile-dir a directory of your own",
                root.display(),
                m.uid()
            )));
        }
    }
    if dir == root {
        return Ok(());
    }
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => {
            Err(std::io::Error::other("it is a symbolic link; the simulator writes only real directories"))
        }
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(std::io::Error::other("it exists and is not a directory")),
        Err(_) => std::fs::create_dir(dir),
    }
}

/// The model's split of a step of batch `b` that takes `dur`: the decode terms in the
/// proportions the plan predicts at that batch (weights and KV reads split the memory-or-compute
/// part), the prefill share as GEMM; [`Split::fitted`] then scales them to the step.
pub fn plan_split(s: &Scenario, b: &StepBatch, dur: Duration) -> Split {
    let dur_ms = dur.as_secs_f64() * 1e3;
    let prefill_ms = if b.prefill_tokens > 0 {
        s.prefill_ms(b.prefill_tokens as f64, s.input_len.max(1) as f64, crate::from_plan::prefill_pass(s, b)).min(dur_ms)
    } else {
        0.0
    };
    if b.decode_batch == 0 {
        return Split { matmul_ms: prefill_ms, overhead_ms: (dur_ms - prefill_ms).max(0.0), ..Split::default() };
    }
    let st = s.point(b.decode_batch.saturating_mul(s.plan.dp())).step_ms;
    let mem = st.weights + st.kv;
    let body = mem.max(st.compute);
    let (mm, attn) = if mem > 0.0 { (body * st.weights / mem, body * st.kv / mem) } else { (body, 0.0) };
    let decode = Split { matmul_ms: mm, attention_ms: attn, communication_ms: st.communication, overhead_ms: st.overhead }
        .fitted(Duration::from_secs_f64((dur_ms - prefill_ms).max(0.0) / 1e3));
    Split { matmul_ms: decode.matmul_ms + prefill_ms, ..decode }
}

/// Layers each step is drawn as (kernels per term per step): enough for realistic kernel counts,
/// few enough that a long recording stays small.
pub const LAYERS: u32 = 8;

/// Kernel names by term, as real engines name them (the trace classifier's rules map them back).
const GEMM: &str = "nvjet_tst_128x64_64x8_2x1_v_bz_TNT";
const DECODE_ATTN: &str = "void flashinfer::BatchDecodeWithPagedKVCacheKernel<128u, 8u, 2u, __nv_bfloat16>";
const PREFILL_ATTN: &str = "void flashinfer::BatchPrefillWithPagedKVCacheKernel<128u, 4u, __nv_bfloat16>";
const ALLREDUCE: &str = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL";

/// Writes `steps` as a Kineto trace at `path`; returns the summed split it drew.
pub fn write_trace(path: &Path, steps: &[StepRecord], tp: u32) -> Result<Split, ProfileError> {
    let err = |source| ProfileError::Write { path: path.display().to_string(), source };
    // A new file only: never through a link, never over an existing file.
    let f = std::fs::OpenOptions::new().write(true).create_new(true).open(path).map_err(err)?;
    let mut w = BufWriter::with_capacity(1 << 20, f);
    let sum = write_events(&mut w, steps, tp).map_err(err)?;
    w.flush().map_err(err)?;
    Ok(sum)
}

/// The Kineto document: metadata, then per step a GPU-side step annotation, the host-overhead
/// idle, and per layer a GEMM, an attention kernel and an NCCL all-reduce, each where the step has
/// time for it (none for a term the model prices at zero: NVLink's small all-reduces, whose
/// latency sits in the per-kernel floor).
pub fn write_events(w: &mut impl Write, steps: &[StepRecord], tp: u32) -> std::io::Result<Split> {
    let mut sum = Split::default();
    write!(w, "{{\"schemaVersion\":1,\"deviceProperties\":[{{\"id\":0,\"name\":\"servetune-sim\"}}],\"distributedInfo\":{{\"rank\":0,\"world_size\":{tp}}},\"traceEvents\":[")?;
    write!(w, "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":0,\"tid\":0,\"args\":{{\"name\":\"GPU 0\"}}}}")?;
    let mut corr = 1u64;
    for s in steps {
        let sp = s.split;
        sum.matmul_ms += sp.matmul_ms;
        sum.attention_ms += sp.attention_ms;
        sum.communication_ms += sp.communication_ms;
        sum.overhead_ms += sp.overhead_ms;
        let name = if s.prefill { "prefill_step" } else { "decode_step" };
        write!(
            w,
            ",\n{{\"ph\":\"X\",\"cat\":\"gpu_user_annotation\",\"name\":\"{name}\",\"pid\":0,\"tid\":7,\"ts\":{:.3},\"dur\":{:.3}}}",
            s.start_us,
            sp.total_ms() * 1e3
        )?;
        let mut t = s.start_us + sp.overhead_ms * 1e3;
        let attn = if s.prefill { PREFILL_ATTN } else { DECODE_ATTN };
        let per = |ms: f64| ms * 1e3 / LAYERS as f64;
        for _ in 0..LAYERS {
            for (kname, dur) in [(GEMM, per(sp.matmul_ms)), (attn, per(sp.attention_ms)), (ALLREDUCE, per(sp.communication_ms))] {
                if dur <= 0.0 {
                    continue;
                }
                write!(
                    w,
                    ",\n{{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"{kname}\",\"pid\":0,\"tid\":7,\"ts\":{t:.3},\"dur\":{dur:.3},\"args\":{{\"device\":0,\"stream\":7,\"correlation\":{corr}}}}}"
                )?;
                corr += 1;
                t += dur;
            }
        }
    }
    write!(w, "\n],\"servetune_sim\":{{\"steps\":{},\"split_ms\":{}}}}}", steps.len(), serde_json::to_string(&sum).unwrap_or_default())?;
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_is_fitted_to_the_step_it_took() {
        let s = Split { matmul_ms: 6.0, attention_ms: 2.0, communication_ms: 1.0, overhead_ms: 1.0 };
        let f = s.fitted(Duration::from_millis(5));
        assert!((f.total_ms() - 5.0).abs() < 1e-9 && (f.matmul_ms - 3.0).abs() < 1e-9);
        let f = s.fitted(Duration::from_millis(12));
        assert!((f.overhead_ms - 3.0).abs() < 1e-9 && f.matmul_ms == 6.0);
    }

    #[test]
    fn recording_stops_after_num_steps_and_refuses_a_second_start() {
        let root = std::env::temp_dir().join(format!("servetune-sim-profile-test-{}", std::process::id()));
        let r = Recorder::new(root.clone());
        r.start(StartProfile { output_dir: Some("run-1".into()), num_steps: Some(2) }).expect("starts");
        assert!(matches!(r.start(StartProfile::default()), Err(ProfileError::AlreadyRunning)));
        let b = StepBatch { prefill_tokens: 0, decode_batch: 4, context_tokens: 100 };
        for _ in 0..5 {
            r.record(Instant::now(), &b, || Split { matmul_ms: 1.0, ..Split::default() });
        }
        let w = r.stop(2).expect("writes");
        assert_eq!(w.steps, 2);
        assert!((w.split_ms.matmul_ms - 2.0).abs() < 1e-9);
        assert!(Path::new(&w.trace_path).starts_with(root.join("run-1")), "{}", w.trace_path);
        let text = std::fs::read_to_string(&w.trace_path).expect("trace");
        let _ = std::fs::remove_dir_all(&root);
        let doc: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(doc["servetune_sim"]["steps"], 2);
        assert!(matches!(r.stop(2), Err(ProfileError::NotRunning)));
        assert!(matches!(r.start(StartProfile { output_dir: None, num_steps: Some(0) }), Err(ProfileError::ZeroSteps)));
    }

    #[test]
    fn a_client_names_a_subdirectory_of_the_profile_directory_never_a_path() {
        let root = Path::new("/srv/profiles");
        assert_eq!(trace_dir(root, None).ok(), Some(root.to_path_buf()));
        assert_eq!(trace_dir(root, Some("run-7")).ok(), Some(root.join("run-7")));
        assert_eq!(trace_dir(root, Some("/srv/profiles")).ok(), Some(root.to_path_buf()), "the directory itself, as bench sends it");
        for bad in ["/etc", "/srv/profiles/../x", "..", ".", "a/b", "a\\b", "../x", "", "x\0y"] {
            let e = trace_dir(root, Some(bad)).expect_err(bad);
            assert!(e.to_string().contains("--profile-dir") && e.to_string().contains("/srv/profiles"), "{e}");
        }
        assert!(trace_dir(root, Some(&"n".repeat(200))).is_err());
    }

    /// A profile directory that is a link (planted in the shared temporary directory) is refused,
    /// and nothing is made where it points; a real one of this user is taken.
    #[test]
    fn a_profile_directory_that_is_a_link_is_refused() {
        let d = tempfile::tempdir().expect("tmp");
        let elsewhere = d.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).expect("mkdir");
        let root = d.path().join("servetune-profile");
        std::os::unix::fs::symlink(&elsewhere, &root).expect("link");
        let e = make_dir(&root, &root.join("run")).expect_err("a link");
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        assert!(!elsewhere.join("run").exists());
        // /start_profile says so at once, before any step is recorded.
        let r = Recorder::new(root.clone());
        let e = r.start(StartProfile { output_dir: None, num_steps: Some(3) }).expect_err("refused at start");
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        let real = d.path().join("real");
        make_dir(&real, &real.join("run")).expect("a real one");
        assert!(real.join("run").is_dir());
    }
}
