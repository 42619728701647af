//! HolisticTraceAnalysis's Kineto traces (A100 with NCCL, MI250), checked against an independent
//! count by a short Python script (stdlib json and gzip).

use std::path::{Path, PathBuf};
use std::process::Command;

use servetune_trace::{analyze, Category, TraceError};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hta").join(name)
}

/// The independent count: GPU events, NCCL kernels, summed and union durations (ms).
const COUNT_PY: &str = r#"
import gzip, json, sys
with gzip.open(sys.argv[1], "rt") as f:
    doc = json.load(f)
ev = doc["traceEvents"] if isinstance(doc, dict) else doc
gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph", "X") == "X" and "ts" in e]
iv = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in gpu)
busy, cur = 0.0, None
for s, t in iv:
    if cur and s <= cur[1]:
        cur[1] = max(cur[1], t)
    else:
        if cur:
            busy += cur[1] - cur[0]
        cur = [s, t]
busy += (cur[1] - cur[0]) if cur else 0.0
nccl = sum(1 for e in gpu if e.get("cat") == "kernel" and e["name"].startswith("nccl"))
print(len(gpu), nccl, sum(t - s for s, t in iv) / 1e3, busy / 1e3)
"#;

struct Count {
    gpu: u64,
    nccl: u64,
    kernel_ms: f64,
    busy_ms: f64,
}

fn python_count(path: &Path) -> Count {
    let out = match Command::new("python3").arg("-c").arg(COUNT_PY).arg(path).output() {
        Ok(o) if o.status.success() => o,
        Ok(o) => panic!("the count script failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => panic!("python3 is needed for the independent count: {e}"),
    };
    let text = String::from_utf8(out.stdout).expect("utf8");
    let f: Vec<&str> = text.split_whitespace().collect();
    Count {
        gpu: f[0].parse().expect("n"),
        nccl: f[1].parse().expect("n"),
        kernel_ms: f[2].parse().expect("ms"),
        busy_ms: f[3].parse().expect("ms"),
    }
}

fn check_against_python(name: &str) -> servetune_trace::TraceReport {
    let path = data(name);
    let r = analyze(&path, 1.0).expect("analyses");
    let c = python_count(&path);
    let nccl: u64 = r.nccl.iter().map(|n| n.count).sum();
    eprintln!(
        "{name}: gpu {} / {}, nccl {nccl} / {}, kernel_ms {:.3} / {:.3}, busy_ms {:.3} / {:.3}",
        r.gpu_events, c.gpu, c.nccl, r.kernel_ms, c.kernel_ms, r.busy_ms, c.busy_ms
    );
    assert_eq!(r.gpu_events, c.gpu, "{name}: GPU events");
    assert_eq!(nccl, c.nccl, "{name}: NCCL kernels");
    assert!((r.kernel_ms - c.kernel_ms).abs() < 1e-6 * c.kernel_ms.max(1.0), "{name}: kernel ms {} vs {}", r.kernel_ms, c.kernel_ms);
    assert!((r.busy_ms - c.busy_ms).abs() < 1e-6 * c.busy_ms.max(1.0), "{name}: busy ms {} vs {}", r.busy_ms, c.busy_ms);
    r
}

#[test]
fn a100_nccl_trace_matches_the_independent_count() {
    let r = check_against_python("nccl_data.json.gz");
    let ring_ll: Vec<_> = r.nccl.iter().filter(|n| format!("{:?}/{:?}", n.algorithm, n.protocol) == "Ring/Ll").collect();
    assert!(ring_ll.iter().any(|n| n.collective == "AllReduce" && n.count == 15), "{:?}", r.nccl);
    assert!(ring_ll.iter().any(|n| n.collective == "Broadcast" && n.count == 6), "{:?}", r.nccl);
}

#[test]
fn a100_sendrecv_trace_matches_the_independent_count() {
    let r = check_against_python("sampled_rank-0.json.gz");
    assert!(r.nccl.iter().any(|n| n.collective == "SendRecv" && n.count == 10), "{:?}", r.nccl);
    assert!(r.phases.iter().map(|p| p.steps).sum::<usize>() > 0);
}

#[test]
fn mi250_trace_matches_the_independent_count_and_knows_hipblaslt() {
    let r = check_against_python("mi250_minitoy_train_ROCm6_2_kineto.json.gz");
    assert!(r.top_kernels.iter().any(|k| k.name.starts_with("Cijk_") && k.category == Category::DenseGemm));
}

#[test]
fn unknown_kernels_are_listed_not_dropped() {
    let r = analyze(&data("nccl_data.json.gz"), 1.0).expect("analyses");
    assert!(r.other_kernels.iter().any(|k| k.name.contains("nchwToNhwcKernel")), "{:?}", r.other_kernels);
    let other_ms: f64 = r.other_kernels.iter().map(|k| k.total_ms).sum();
    let listed: f64 = r.top_kernels.iter().chain(&r.other_kernels).map(|k| k.total_ms).sum();
    assert!(other_ms > 0.0 && listed > 0.0);
}

#[test]
fn gpu_events_whose_times_are_not_times_are_left_out_and_counted() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("corrupt.json");
    let doc = r#"{"traceEvents":[
        {"ph":"X","cat":"kernel","name":"sm90_xmma_gemm_bf16","ts":100,"dur":50,"pid":0,"tid":7},
        {"ph":"X","cat":"kernel","name":"sm90_xmma_gemm_bf16","ts":1e308,"dur":1e308,"pid":0,"tid":7},
        {"ph":"X","cat":"kernel","name":"flash_fwd_kernel","ts":200,"dur":-3,"pid":0,"tid":7},
        {"ph":"X","cat":"kernel","name":"flash_fwd_kernel","ts":300,"dur":1e12,"pid":0,"tid":7},
        {"ph":"X","cat":"kernel","name":"flash_fwd_kernel","ts":400,"dur":20,"pid":0,"tid":7}]}"#;
    std::fs::write(&path, doc).expect("writes");
    let r = analyze(&path, 1.0).expect("analyses the two good events");
    assert_eq!((r.events, r.gpu_events, r.skipped_gpu_events), (5, 2, 3));
    assert!(r.kernel_ms.is_finite() && (r.kernel_ms - 0.07).abs() < 1e-9, "{}", r.kernel_ms);
    assert!((r.span_ms - 0.32).abs() < 1e-9, "{}", r.span_ms);
    let mut out = Vec::new();
    servetune_trace::render::terminal(&r, &mut out).expect("renders");
    let text = String::from_utf8(out).expect("utf8");
    assert!(text.contains("3 GPU events left out") && !text.contains("inf") && !text.contains("NaN"), "{text}");
}

#[test]
fn a_trace_without_gpu_events_is_refused() {
    let err = analyze(&data("rank_non_gpu.json.gz"), 1.0).expect_err("no GPU events");
    assert!(matches!(err, TraceError::NoGpuEvents { .. }), "{err}");
}

#[test]
fn terminal_view_of_the_a100_trace() {
    let mut r = analyze(&data("nccl_data.json.gz"), 1.0).expect("analyses");
    r.file = "nccl_data.json.gz".into();
    let mut out = Vec::new();
    servetune_trace::render::terminal(&r, &mut out).expect("renders");
    insta::assert_snapshot!(String::from_utf8(out).expect("utf8"));
}
