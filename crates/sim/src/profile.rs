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

/// What `/start_profile` asks.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StartProfile {
    /// Directory for the trace (default: the system temp directory).
    #[serde(default)]
    pub output_dir: Option<PathBuf>,
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
#[derive(Clone, Default)]
pub struct Recorder {
    on: Arc<AtomicBool>,
    rec: Arc<Mutex<Option<Recording>>>,
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
    /// Starts recording.
    pub fn start(&self, req: StartProfile) -> Result<(), ProfileError> {
        if req.num_steps == Some(0) {
            return Err(ProfileError::ZeroSteps);
        }
        let mut g = self.rec.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if g.is_some() {
            return Err(ProfileError::AlreadyRunning);
        }
        let dir = req.output_dir.unwrap_or_else(std::env::temp_dir);
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
        let path = r.dir.join(format!("{stamp}-TP-0.trace.json"));
        let split_ms = write_trace(&path, &r.steps, tp)?;
        Ok(Written { trace_path: path.display().to_string(), steps: r.steps.len(), split_ms })
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
    let f = std::fs::File::create(path).map_err(err)?;
    let mut w = BufWriter::with_capacity(1 << 20, f);
    let sum = write_events(&mut w, steps, tp).map_err(err)?;
    w.flush().map_err(err)?;
    Ok(sum)
}

/// The Kineto document: metadata, then per step a GPU-side step annotation, the host-overhead
/// idle, and per layer a GEMM, an attention kernel and (TP > 1) an NCCL all-reduce.
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
        let r = Recorder::default();
        let dir = std::env::temp_dir();
        r.start(StartProfile { output_dir: Some(dir.clone()), num_steps: Some(2) }).expect("starts");
        assert!(matches!(r.start(StartProfile::default()), Err(ProfileError::AlreadyRunning)));
        let b = StepBatch { prefill_tokens: 0, decode_batch: 4, context_tokens: 100 };
        for _ in 0..5 {
            r.record(Instant::now(), &b, || Split { matmul_ms: 1.0, ..Split::default() });
        }
        let w = r.stop(2).expect("writes");
        assert_eq!(w.steps, 2);
        assert!((w.split_ms.matmul_ms - 2.0).abs() < 1e-9);
        let text = std::fs::read_to_string(&w.trace_path).expect("trace");
        let _ = std::fs::remove_file(&w.trace_path);
        let doc: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(doc["servetune_sim"]["steps"], 2);
        assert!(matches!(r.stop(2), Err(ProfileError::NotRunning)));
        assert!(matches!(r.start(StartProfile { output_dir: None, num_steps: Some(0) }), Err(ProfileError::ZeroSteps)));
    }
}
