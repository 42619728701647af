//! Failure classification: the exit status and the log tail of a server decide the kind; each kind
//! keeps its evidence lines and maps to one corrective step.

use serde::{Deserialize, Serialize};

/// Why an experiment failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// CUDA out of memory, or the KV cache does not fit.
    OutOfMemory,
    /// An NCCL error or a collective that hung.
    Nccl,
    /// CUDA could not initialise.
    CudaInit,
    /// NaN or invalid output.
    InvalidOutput,
    /// A kernel or graph failed to compile.
    Compile,
    /// The port was taken.
    PortInUse,
    /// Not ready within the time limit.
    Timeout,
    /// Killed by a signal.
    Crash,
    /// Exited with an error not recognised above.
    Exited,
    /// The server stayed up but every benchmark request failed.
    BenchFailed,
    /// The launch command could not be started at all.
    SpawnFailed,
    /// Slurm ended the job at its time limit (TIMEOUT).
    JobTimeLimit,
    /// A node of the Slurm job failed (NODE_FAIL, BOOT_FAIL).
    NodeFail,
    /// A higher-priority job preempted it (PREEMPTED).
    Preempted,
    /// Someone else cancelled the Slurm job (CANCELLED without servetune asking).
    Cancelled,
}

impl FailureKind {
    /// The name used in the journal and the report.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::OutOfMemory => "out_of_memory",
            FailureKind::Nccl => "nccl",
            FailureKind::CudaInit => "cuda_init",
            FailureKind::InvalidOutput => "invalid_output",
            FailureKind::Compile => "compile",
            FailureKind::PortInUse => "port_in_use",
            FailureKind::Timeout => "timeout",
            FailureKind::Crash => "crash",
            FailureKind::Exited => "exited",
            FailureKind::BenchFailed => "bench_failed",
            FailureKind::SpawnFailed => "spawn_failed",
            FailureKind::JobTimeLimit => "job_time_limit",
            FailureKind::NodeFail => "node_fail",
            FailureKind::Preempted => "preempted",
            FailureKind::Cancelled => "cancelled",
        }
    }

    /// The corrective step for this kind.
    pub fn corrective(self) -> &'static str {
        match self {
            FailureKind::OutOfMemory => "lower the memory the engine claims (sglang --mem-fraction-static, vLLM --gpu-memory-utilization), cap running requests, use an fp8 KV cache, or spread the model over more GPUs (higher TP/PP)",
            FailureKind::Nccl => "rerun with NCCL_DEBUG=INFO to see the failing transport; check P2P with servetune fabric p2p; try NCCL_P2P_DISABLE=1 or another NCCL_ALGO/NCCL_PROTO",
            FailureKind::CudaInit => "CUDA failed to initialise: inside a VM set the nvidia_uvm module option uvm_disable_hmm=1 (servetune probe's hmm_enabled finding), check the driver with nvidia-smi, and check CUDA_VISIBLE_DEVICES",
            FailureKind::InvalidOutput => "the model produced NaN or invalid output: pick another attention backend (sglang --attention-backend / --*-decode-backend) or a different KV dtype, and check the checkpoint's quantization",
            FailureKind::Compile => "a kernel failed to compile: check the CUDA toolkit and the compiler version the engine needs, clear its kernel cache, or turn off torch.compile / custom kernels",
            FailureKind::PortInUse => "another process holds the port: stop it (ss -ltnp shows which), or let servetune pick another free port and run the step again",
            FailureKind::Timeout => "the server did not become ready in time: raise --ready-timeout (large models load for minutes), and read the log for where loading stopped",
            FailureKind::Crash => "the server was killed by a signal: read the log's last lines, check dmesg for the OOM killer, and rerun the step",
            FailureKind::Exited => "the server exited with an error: read the evidence lines and the log, fix the flag or file it names, and rerun the step",
            FailureKind::BenchFailed => "every benchmark request failed while the server stayed up: check the API path and model name the engine serves, and the log for request errors",
            FailureKind::SpawnFailed => "the launch command could not be started: install the engine, or give the right executable in the engine template",
            FailureKind::JobTimeLimit => "Slurm ended the job at its time limit: give the campaign a longer --slurm-time (within the partition's MaxTime, see sinfo), or benchmark fewer points",
            FailureKind::NodeFail => "a node of the job failed: check it with sinfo -R and scontrol show node, exclude it (--slurm-arg=--exclude=NODE), and run the step again",
            FailureKind::Preempted => "a higher-priority job preempted this one: run the step again, or use a partition or QOS that is not preemptible",
            FailureKind::Cancelled => "the job was cancelled outside servetune (scancel, or an administrator): ask why, then run the step again",
        }
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// Exit code when it exited.
    pub code: Option<i32>,
    /// Signal number when a signal killed it.
    pub signal: Option<i32>,
}

/// A classified failure with its evidence and corrective step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// What went wrong.
    pub kind: FailureKind,
    /// How the server ended (absent when it was still running, e.g. a timeout we ended).
    pub exit: Option<ExitInfo>,
    /// The log lines (or facts) that decided the kind.
    pub evidence: Vec<String>,
    /// The step that fixes it, in words.
    pub corrective: String,
    /// One line of context in words.
    pub summary: String,
}

/// Log patterns per kind, lower-case, most specific first.
const PATTERNS: &[(FailureKind, &[&str])] = &[
    (FailureKind::PortInUse, &["address already in use", "errno 98", "port is already in use", "bind failed"]),
    (
        FailureKind::OutOfMemory,
        &[
            "cuda out of memory",
            "outofmemoryerror",
            "cuda error: out of memory",
            "not enough memory",
            "kv cache does not fit",
            "no available memory for the cache blocks",
            "insufficient memory",
        ],
    ),
    (
        FailureKind::CudaInit,
        &[
            "cuda initialization",
            "cuinit",
            "cudaerrorinitializationerror",
            "cuda driver initialization failed",
            "no cuda gpus are available",
            "cuda_error_not_initialized",
        ],
    ),
    (
        FailureKind::Nccl,
        &[
            "nccl error",
            "ncclsystemerror",
            "ncclinternalerror",
            "ncclunhandledcudaerror",
            "nccl watchdog",
            "nccl timeout",
            "watchdog caught collective operation timeout",
        ],
    ),
    (FailureKind::InvalidOutput, &["nan", "inf or nan", "invalid output", "probability tensor contains either"]),
    (
        FailureKind::Compile,
        &["compilation error", "compile error", "failed to compile", "nvcc fatal", "triton compilation", "error: identifier"],
    ),
];

fn matches_word(line: &str, pat: &str) -> bool {
    if pat != "nan" {
        return line.contains(pat);
    }
    // "nan" must stand as a word: "finance" or "nanoseconds" are not NaNs.
    line.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| w == "nan")
}

/// Classifies a server that ended (`exit`) or was ended by us (`timed_out`), from its log tail.
pub fn classify(exit: Option<ExitInfo>, timed_out: bool, log_tail: &[String]) -> Failure {
    for (kind, pats) in PATTERNS {
        let ev: Vec<String> = log_tail
            .iter()
            .filter(|l| {
                let low = l.to_ascii_lowercase();
                pats.iter().any(|p| matches_word(&low, p))
            })
            .take(5)
            .cloned()
            .collect();
        if !ev.is_empty() {
            return failure(*kind, exit, ev);
        }
    }
    let last: Vec<String> = log_tail.iter().rev().take(5).rev().cloned().collect();
    let kind = if timed_out {
        FailureKind::Timeout
    } else if exit.is_some_and(|e| e.signal.is_some()) {
        FailureKind::Crash
    } else {
        FailureKind::Exited
    };
    let mut ev = vec![exit_words(exit, timed_out)];
    ev.extend(last);
    failure(kind, exit, ev)
}

fn failure(kind: FailureKind, exit: Option<ExitInfo>, evidence: Vec<String>) -> Failure {
    Failure {
        kind,
        exit,
        summary: format!("{}: {}", kind.name(), exit_words(exit, false)),
        evidence,
        corrective: kind.corrective().to_string(),
    }
}

/// The exit status in words.
pub fn exit_words(exit: Option<ExitInfo>, timed_out: bool) -> String {
    match exit {
        _ if timed_out => "not ready before the time limit; servetune stopped it".into(),
        Some(ExitInfo { signal: Some(s), .. }) => format!("killed by signal {s}"),
        Some(ExitInfo { code: Some(c), .. }) => format!("exited with status {c}"),
        Some(_) => "ended".into(),
        None => "still running".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &[&str]) -> Vec<String> {
        s.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn kinds_from_log_lines() {
        let exit = Some(ExitInfo { code: Some(1), signal: None });
        let cases = [
            ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", FailureKind::OutOfMemory),
            ("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error", FailureKind::Nccl),
            ("RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.", FailureKind::CudaInit),
            ("ValueError: logits contain NaN at step 3", FailureKind::InvalidOutput),
            ("triton compilation failed: nvcc fatal : Unsupported gpu architecture", FailureKind::Compile),
            ("OSError: [Errno 98] Address already in use", FailureKind::PortInUse),
        ];
        for (line, kind) in cases {
            let f = classify(exit, false, &lines(&["loading", line, "bye"]));
            assert_eq!(f.kind, kind, "{line}");
            assert_eq!(f.evidence, vec![line.to_string()]);
            assert_eq!(f.corrective, kind.corrective());
        }
    }

    #[test]
    fn exit_status_decides_without_a_known_line() {
        let sig = classify(Some(ExitInfo { code: None, signal: Some(9) }), false, &lines(&["serving"]));
        assert_eq!(sig.kind, FailureKind::Crash);
        assert!(sig.evidence[0].contains("signal 9"));
        assert_eq!(classify(None, true, &lines(&["loading weights"])).kind, FailureKind::Timeout);
        assert_eq!(classify(Some(ExitInfo { code: Some(2), signal: None }), false, &[]).kind, FailureKind::Exited);
        assert_eq!(
            classify(Some(ExitInfo { code: Some(2), signal: None }), false, &lines(&["finance nanoseconds"])).kind,
            FailureKind::Exited
        );
    }
}
