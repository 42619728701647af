//! Traces this project draws itself (`servetune_trace::synth`), shaped as sglang (CUDA and ROCm),
//! vLLM (full and piecewise CUDA graphs), TensorRT-LLM and a DDP training job write them: the
//! steps found must be the engine's, with their kinds, tokens and requests; every kernel must land
//! in its category ("other" under 5%); and the reader's totals must match an independent count.

use std::path::{Path, PathBuf};
use std::process::Command;

use servetune_trace::report::TraceReport;
use servetune_trace::steps::{PhaseSource, Segmentation};
use servetune_trace::synth::{self, Annotations, Engine, Spec, Truth};
use servetune_trace::{analyze, Category, Family, Phase, TraceError};

fn drawn(spec: &Spec) -> (TraceReport, Truth, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("t.trace.json.gz");
    let truth = synth::write(spec, &path).expect("writes");
    (analyze(&path, 1.0).expect("analyses"), truth, dir)
}

/// The steps found are the drawn ones: count, kind, tokens, requests, GPU span, all-reduces and
/// each category's time (summed kernel time, which equals the union on one stream).
fn assert_steps_are_the_engines(r: &TraceReport, truth: &Truth, with_counts: bool) {
    assert_eq!(r.steps.len(), truth.steps.len(), "{:#?}", r.steps.iter().map(|s| (s.phase, s.ms)).collect::<Vec<_>>());
    for (s, t) in r.steps.iter().zip(&truth.steps) {
        assert_eq!(s.phase, t.kind, "step {}", s.index);
        if with_counts {
            assert_eq!((s.tokens, s.requests), (Some(t.tokens), Some(t.requests)), "step {}", s.index);
        }
        assert!((s.ms - (t.end - t.start) / 1e3).abs() < 1e-6, "step {}: {} ms against {}", s.index, s.ms, (t.end - t.start) / 1e3);
        assert_eq!(s.allreduce_calls, t.allreduces, "step {}", s.index);
        for c in Category::ALL {
            let got = s.categories.iter().find(|x| x.category == c).map_or(0.0, |x| x.ms);
            assert!(
                (got - t.category_us[c.index()] / 1e3).abs() < 1e-6,
                "step {} {c:?}: {got} ms against {}",
                s.index,
                t.category_us[c.index()] / 1e3
            );
        }
    }
    // Only the tail of the step the profiler started in (its sampling) falls outside.
    assert!(r.events_outside_steps <= 2, "{}", r.events_outside_steps);
}

fn category_pct(r: &TraceReport, c: Category) -> f64 {
    let total: f64 = r.steps.iter().flat_map(|s| &s.categories).map(|x| x.ms).sum();
    let mine: f64 = r.steps.iter().flat_map(|s| &s.categories).filter(|x| x.category == c).map(|x| x.ms).sum();
    100.0 * mine / total
}

fn check_engine(engine: Engine, family: Family) -> TraceReport {
    let spec = Spec::typical(engine);
    let (r, truth, _dir) = drawn(&spec);
    assert_eq!((r.segmentation, r.step_annotations), (Segmentation::StepAnnotations, Some(family)), "{engine:?}");
    assert_steps_are_the_engines(&r, &truth, true);
    assert!(r.phases.iter().all(|p| !p.kind_guessed && p.phase_source == PhaseSource::Annotation));
    assert!(r.other_pct < 5.0 && r.other_pct > 0.0, "{engine:?}: other {}%", r.other_pct);
    assert_eq!(r.other_kernels.len(), 1, "{engine:?}: {:?}", r.other_kernels.iter().map(|k| &k.name).collect::<Vec<_>>());
    // Two all-reduces per layer in every step, whichever kernel runs them, and the embedding's
    // (sglang and vLLM); the LM head's all-gather of the logits is not an all-reduce.
    let want = 2 * spec.layers + u32::from(engine != Engine::TrtLlm);
    for s in &r.steps {
        assert_eq!(s.allreduce_calls, want, "{engine:?} step {}", s.index);
    }
    let decode = r.phases.iter().find(|p| p.phase == Phase::Decode).expect("decode steps");
    assert_eq!(decode.allreduce_calls_per_step, want as f64);
    // Per token: the decode steps' tokens are their requests.
    let want_tokens = truth.steps.iter().filter(|t| t.kind == Phase::Decode).map(|t| t.tokens as f64).sum::<f64>() / decode.steps as f64;
    assert!((decode.tokens_per_step.expect("tokens") - want_tokens).abs() < 1e-9);
    let per_token = decode.us_per_token.expect("per token");
    assert!((per_token - decode.mean_ms * 1e3 / want_tokens).abs() < 1e-6 * per_token, "{per_token}");
    r
}

#[test]
fn sglang_cuda_steps_are_its_step_annotations() {
    let r = check_engine(Engine::SglangCuda, Family::Sglang);
    // The 3000-token prefill runs its 17 all-reduces (two per layer and the embedding's) over
    // NCCL, the decode steps the custom all-reduce; every step all-gathers its logits over NCCL.
    let prefill = r.steps.iter().find(|s| s.tokens == Some(3000)).expect("the long prefill");
    assert_eq!(prefill.nccl_calls, 17 + 1);
    assert!(r.steps.iter().filter(|s| s.phase == Phase::Decode).all(|s| s.nccl_calls == 1 && s.graph_replays == 1));
    assert!(category_pct(&r, Category::MoeGemm) > 10.0);
    // The gather runs as NCCL's Generic kernel, whose name does not say it: the profiler's args
    // do, so it is shown as a gather and not counted as an all-reduce (assert_steps_are_the_engines).
    let gathers = r.steps.len() as u64;
    assert!(r.nccl.iter().any(|n| n.collective == "Generic (allgather)" && n.count == gathers), "{:?}", r.nccl);
}

#[test]
fn sglang_rocm_steps_and_amd_kernels() {
    let r = check_engine(Engine::SglangRocm, Family::Sglang);
    // hipBLASLt, AITER's paged attention, fused MoE and all-reduce, CK's MoE sorting, RCCL for the
    // long prefill, HIP's host-to-device copies: each in its category (check_engine: nothing but
    // the fixture's one unknown kernel is "other").
    for c in [
        Category::DenseGemm,
        Category::Attention,
        Category::MoeGemm,
        Category::MoeRouting,
        Category::CustomAllreduce,
        Category::Nccl,
        Category::MemcpyMemset,
    ] {
        assert!(category_pct(&r, c) > 0.0, "{c:?}");
    }
    assert!(r.top_kernels.iter().any(|k| k.name.starts_with("Cijk_") && k.category == Category::DenseGemm));
    // RCCL in the two long prefills (3000 and 1024 tokens), 17 all-reduces each (a Generic kernel
    // whose args name the collective), and one
    // all-gather of the logits in each of the 8 steps.
    assert!(r.nccl.iter().any(|n| n.collective == "Generic (allreduce)" && n.count == 34), "{:?}", r.nccl);
    assert!(r.nccl.iter().any(|n| n.collective == "AllGather" && n.count == 8), "{:?}", r.nccl);
}

#[test]
fn vllm_full_graphs_steps_are_its_execute_context_annotations() {
    let r = check_engine(Engine::VllmFull, Family::Vllm);
    let kinds: Vec<Phase> = r.steps.iter().map(|s| s.phase).collect();
    assert!(kinds.contains(&Phase::Mixed) && kinds.contains(&Phase::Prefill));
    assert!(r.steps.iter().all(|s| s.annotation.as_deref().is_some_and(|a| a.starts_with("execute_context_"))));
}

#[test]
fn vllm_piecewise_graphs_are_one_step_per_forward_pass() {
    let r = check_engine(Engine::VllmPiecewise, Family::Vllm);
    // One graph per layer plus the last piece: 9 replays in every step, mixed and decode alike.
    assert!(r.steps.iter().all(|s| s.graph_replays == 9), "{:?}", r.steps.iter().map(|s| s.graph_replays).collect::<Vec<_>>());
}

#[test]
fn tensorrt_llm_steps_from_host_ranges_and_its_moe_kernels() {
    let mut spec = Spec::typical(Engine::TrtLlm);
    // TensorRT-LLM's step ranges as host ranges only: mapped onto the GPU by launch correlation.
    spec.annotations = Annotations::Host;
    let (r, truth, _dir) = drawn(&spec);
    assert_eq!((r.segmentation, r.step_annotations), (Segmentation::CpuAnnotations, Some(Family::TensorrtLlm)));
    assert_steps_are_the_engines(&r, &truth, false);
    // Requests always; tokens of a generation-only step (one per request); not of a context step
    // whose range does not give its tokens.
    for (s, t) in r.steps.iter().zip(&truth.steps) {
        assert_eq!(s.requests, Some(t.requests));
        assert_eq!(s.tokens, (t.kind == Phase::Decode).then_some(t.tokens), "step {}", s.index);
    }
    assert!(r.other_pct < 5.0, "other {}%", r.other_pct);
    // The MoE: trtllm-gen batched GEMMs over FP4 experts, moe::dev routing and finalize.
    let moe = category_pct(&r, Category::MoeGemm);
    assert!(moe > 15.0, "MoE GEMM {moe}%");
    assert!(category_pct(&r, Category::MoeRouting) > 1.0, "{}", category_pct(&r, Category::MoeRouting));
    assert!(category_pct(&r, Category::FusedAllreduceNorm) > 5.0);
    assert!(r.top_kernels.iter().any(|k| k.name.starts_with("bmm_MxE4m3_MxE2m1") && k.category == Category::MoeGemm));
    assert!(r.top_kernels.iter().any(|k| k.name.contains("moe::dev::finalize") && k.category == Category::MoeRouting));
}

#[test]
fn tensorrt_llm_gpu_ranges_give_the_same_steps() {
    let (r, truth, _dir) = drawn(&Spec::typical(Engine::TrtLlm));
    assert_eq!((r.segmentation, r.step_annotations), (Segmentation::StepAnnotations, Some(Family::TensorrtLlm)));
    assert_steps_are_the_engines(&r, &truth, false);
}

#[test]
fn without_annotations_graph_replays_grouped_per_step_are_the_engines_steps() {
    for engine in [Engine::SglangCuda, Engine::SglangRocm, Engine::VllmFull, Engine::TrtLlm] {
        let mut spec = Spec::typical(engine);
        spec.annotations = Annotations::None;
        let (r, truth, _dir) = drawn(&spec);
        assert_eq!((r.segmentation, r.step_annotations), (Segmentation::CudaGraphs, None), "{engine:?}");
        // Mixed steps run eagerly like prefills: without an annotation they are guessed prefill.
        let want: Vec<Phase> = truth.steps.iter().map(|t| if t.kind == Phase::Mixed { Phase::Prefill } else { t.kind }).collect();
        let got: Vec<Phase> = r.steps.iter().map(|s| s.phase).collect();
        assert_eq!(got, want, "{engine:?}");
        assert!(r.phases.iter().all(|p| p.kind_guessed), "{engine:?}");
        assert!(r.steps.iter().all(|s| s.tokens.is_none()));
        assert!(r.events_outside_steps <= 2, "{engine:?}: {}", r.events_outside_steps);
    }
}

#[test]
fn without_annotations_or_input_copies_each_forward_pass_is_still_a_step() {
    for engine in [Engine::SglangCuda, Engine::VllmFull, Engine::VllmPiecewise] {
        let mut spec = Spec::typical(engine);
        spec.annotations = Annotations::None;
        spec.prefill_stall_us = 0.0;
        let (mut doc, truth) = synth::draw(&spec);
        let events = doc["traceEvents"].as_array_mut().expect("events");
        events.retain(|e| e["cat"] != "gpu_memcpy" && e["name"] != "cudaMemcpyAsync");
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("t.json");
        synth::write_doc(&doc, &path).expect("writes");
        let r = analyze(&path, 1.0).expect("analyses");
        assert_eq!(r.segmentation, Segmentation::CudaGraphs);
        assert_eq!(r.steps.len(), truth.steps.len(), "{engine:?}");
        if engine != Engine::VllmPiecewise {
            let want: Vec<Phase> = truth.steps.iter().map(|t| if t.kind == Phase::Mixed { Phase::Prefill } else { t.kind }).collect();
            assert_eq!(r.steps.iter().map(|s| s.phase).collect::<Vec<_>>(), want, "{engine:?}");
        }
    }
}

#[test]
fn without_annotations_a_piecewise_forward_pass_is_one_step_not_one_per_layer() {
    let mut spec = Spec::typical(Engine::VllmPiecewise);
    spec.annotations = Annotations::None;
    let (r, truth, _dir) = drawn(&spec);
    assert_eq!(r.segmentation, Segmentation::CudaGraphs);
    assert_eq!(r.steps.len(), truth.steps.len());
    assert!(r.steps.iter().all(|s| s.graph_replays == 9));
    // The kind of a piecewise step is a guess by duration: the long prefills stand out.
    let prefills: Vec<usize> = r.steps.iter().filter(|s| s.phase == Phase::Prefill).map(|s| s.index).collect();
    assert!(prefills.contains(&0), "{prefills:?}");
    assert!(r.steps.iter().all(|s| s.phase_source == PhaseSource::Duration));
}

#[test]
fn old_sglang_steps_from_its_model_runner_frames() {
    let mut spec = Spec::typical(Engine::SglangCuda);
    spec.annotations = Annotations::PythonFrames;
    let (r, truth, _dir) = drawn(&spec);
    assert_eq!((r.segmentation, r.step_annotations), (Segmentation::CpuAnnotations, Some(Family::Sglang)));
    // forward_extend runs prefill and mixed batches alike: the frame says extend.
    let want: Vec<Phase> = truth.steps.iter().map(|t| if t.kind == Phase::Mixed { Phase::Prefill } else { t.kind }).collect();
    assert_eq!(r.steps.iter().map(|s| s.phase).collect::<Vec<_>>(), want);
}

#[test]
fn idle_gaps_would_cut_a_prefill_the_annotation_keeps_whole() {
    // The host stalls 1.5 ms inside each prefill: longer than the 1 ms gap.
    let spec = Spec::typical(Engine::SglangCuda);
    let (r, truth, _dir) = drawn(&spec);
    assert_eq!(r.steps.len(), truth.steps.len());
    let prefill = &r.steps[0];
    assert_eq!(prefill.phase, Phase::Prefill);
    assert!(prefill.idle_ms > 1.4, "{}", prefill.idle_ms);
}

#[test]
fn the_last_resort_is_idle_gaps() {
    // Eager steps only, no annotations and no graphs: gaps cut the steps, kinds guessed.
    let mut spec = Spec::typical(Engine::VllmFull);
    spec.annotations = Annotations::None;
    spec.steps = vec![synth::StepSpec::prefill(1, 2000); 3];
    spec.prefill_stall_us = 0.0;
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("t.json");
    let truth = synth::write(&spec, &path).expect("writes");
    // The scheduler leaves the GPU idle some 200 us between steps: a 0.1 ms gap cuts there.
    let r = analyze(&path, 0.1).expect("analyses");
    assert_eq!(r.segmentation, Segmentation::IdleGaps);
    // The tail of the step the profiler started in is a step of its own here.
    assert_eq!(r.steps.len(), truth.steps.len() + 1);
    assert!(r.steps.iter().all(|s| s.phase_source == PhaseSource::Duration));
}

// --- The reader against an independent count --------------------------------------------------

/// The independent count: GPU events, NCCL kernels, summed and union durations (ms).
const COUNT_PY: &str = r#"
import gzip, json, sys
opener = gzip.open if sys.argv[1].endswith(".gz") else open
with opener(sys.argv[1], "rt") as f:
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

fn check_against_python(path: &Path) -> TraceReport {
    let r = analyze(path, 1.0).expect("analyses");
    let out = match Command::new("python3").arg("-c").arg(COUNT_PY).arg(path).output() {
        Ok(o) if o.status.success() => o,
        Ok(o) => panic!("the count script failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => panic!("python3 is needed for the independent count: {e}"),
    };
    let text = String::from_utf8(out.stdout).expect("utf8");
    let f: Vec<&str> = text.split_whitespace().collect();
    let (gpu, nccl, kernel_ms, busy_ms): (u64, u64, f64, f64) =
        (f[0].parse().expect("n"), f[1].parse().expect("n"), f[2].parse().expect("ms"), f[3].parse().expect("ms"));
    let mine: u64 = r.nccl.iter().map(|n| n.count).sum();
    assert_eq!((r.gpu_events, mine), (gpu, nccl));
    assert!((r.kernel_ms - kernel_ms).abs() < 1e-6 * kernel_ms.max(1.0), "kernel ms {} vs {kernel_ms}", r.kernel_ms);
    assert!((r.busy_ms - busy_ms).abs() < 1e-6 * busy_ms.max(1.0), "busy ms {} vs {busy_ms}", r.busy_ms);
    r
}

fn write_training(rocm: bool) -> (PathBuf, Truth, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("rank0.json.gz");
    let (doc, truth) = synth::training(3, rocm);
    synth::write_doc(&doc, &path).expect("writes");
    (path, truth, dir)
}

#[test]
fn a_training_trace_matches_the_independent_count_and_its_profiler_steps() {
    let (path, truth, _dir) = write_training(false);
    let r = check_against_python(&path);
    let ring_ll: Vec<_> = r.nccl.iter().filter(|n| format!("{:?}/{:?}", n.algorithm, n.protocol) == "Ring/Ll").collect();
    assert!(ring_ll.iter().any(|n| n.collective == "AllReduce" && n.count == 3), "{:?}", r.nccl);
    assert!(ring_ll.iter().any(|n| n.collective == "Broadcast" && n.count == 2), "{:?}", r.nccl);
    // ProfilerStep#N host ranges, mapped onto the GPU; `nccl:all_reduce` ranges are not steps.
    assert_eq!((r.segmentation, r.step_annotations), (Segmentation::CpuAnnotations, Some(Family::ProfilerStep)));
    assert_eq!(r.steps.len(), truth.steps.len());
    for (s, t) in r.steps.iter().zip(&truth.steps) {
        assert!((s.ms - (t.end - t.start) / 1e3).abs() < 1e-6);
    }
    // cuDNN's convolutions, batch norms and layout transforms all have a category.
    assert_eq!(r.other_pct, 0.0, "{:?}", r.other_kernels);
    for (name, c) in
        [("fprop_implicit_gemm", Category::DenseGemm), ("bn_fw_tr", Category::NormElementwise), ("nchwToNhwc", Category::NormElementwise)]
    {
        assert!(r.top_kernels.iter().any(|k| k.name.contains(name) && k.category == c), "{name}");
    }
}

#[test]
fn a_rocm_training_trace_matches_the_independent_count_and_knows_hipblaslt() {
    let (path, truth, _dir) = write_training(true);
    let r = check_against_python(&path);
    assert!(r.top_kernels.iter().any(|k| k.name.starts_with("Cijk_") && k.category == Category::DenseGemm));
    // Its ProfilerStep#N ranges are on the GPU too.
    assert_eq!((r.segmentation, r.steps.len()), (Segmentation::StepAnnotations, truth.steps.len()));
}

#[test]
fn an_engine_trace_matches_the_independent_count() {
    for engine in [Engine::SglangCuda, Engine::TrtLlm] {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("t.json");
        let truth = synth::write(&Spec::typical(engine), &path).expect("writes");
        let r = check_against_python(&path);
        assert_eq!(r.gpu_events, truth.gpu_events);
        assert!((r.kernel_ms - truth.kernel_us / 1e3).abs() < 1e-6);
    }
}

#[test]
fn unknown_kernels_are_listed_not_dropped() {
    let (r, _, _dir) = drawn(&Spec::typical(Engine::VllmFull));
    assert!(r.other_kernels.iter().any(|k| k.name.contains("vllm_fixture_unknown_kernel")), "{:?}", r.other_kernels);
    let mut out = Vec::new();
    servetune_trace::render::terminal(&r, &mut out).expect("renders");
    let text = String::from_utf8(out).expect("utf8");
    assert!(text.contains("kernels no rule knew (category other): 1") && text.contains("vllm_fixture_unknown_kernel"), "{text}");
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

/// Kineto writes starts in epoch microseconds (about 1.7e15): one kernel edited to start at 0 is
/// a stray, left out and counted, not a span of decades and a step of its own.
#[test]
fn a_gpu_event_a_day_away_from_the_others_is_left_out_and_counted() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("stray.json");
    let doc = r#"{"traceEvents":[
        {"ph":"X","cat":"kernel","name":"sm90_xmma_gemm_bf16","ts":1695835585000000,"dur":50,"pid":0,"tid":7},
        {"ph":"X","cat":"kernel","name":"flash_fwd_kernel","ts":1695835585000100,"dur":20,"pid":0,"tid":7},
        {"ph":"X","cat":"kernel","name":"flash_fwd_kernel","ts":0,"dur":20,"pid":0,"tid":7},
        {"ph":"X","cat":"kernel","name":"flash_fwd_kernel","ts":1695835585000200,"dur":20,"pid":0,"tid":7}]}"#;
    std::fs::write(&path, doc).expect("writes");
    let r = analyze(&path, 1.0).expect("analyses the three kernels together");
    assert_eq!((r.gpu_events, r.skipped_gpu_events), (3, 1));
    assert!((r.span_ms - 0.22).abs() < 1e-6, "{}", r.span_ms);
}

/// Begin/end pairs ("ph" "B" and "E") are not what the analysis reads: the refusal says so, not
/// that the trace has no GPU events.
#[test]
fn a_trace_of_begin_end_pairs_is_refused_naming_the_phases() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("be.json");
    let doc = r#"{"traceEvents":[
        {"ph":"B","cat":"kernel","name":"ampere_sgemm","ts":1000,"pid":0,"tid":7},
        {"ph":"E","cat":"kernel","name":"ampere_sgemm","ts":1050,"pid":0,"tid":7}]}"#;
    std::fs::write(&path, doc).expect("writes");
    let err = analyze(&path, 1.0).expect_err("no complete events");
    let text = err.to_string();
    assert!(text.contains("2 GPU events") && text.contains("\"ph\": \"X\""), "{text}");
}

#[test]
fn odd_thread_ids_do_not_refuse_a_trace() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("tids.json");
    let doc = r#"{"traceEvents":[
        {"ph":"X","cat":"user_annotation","name":"step[decode bs=4]","ts":0,"dur":50,"pid":1,"tid":"PyTorch thread 3"},
        {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","ts":1,"dur":2,"pid":1,"tid":[1],"args":{"correlation":9}},
        {"ph":"X","cat":"kernel","name":"nvjet_tst_64x8","ts":100,"dur":50,"pid":0,"tid":{"x":7},"args":{"correlation":9}}]}"#;
    std::fs::write(&path, doc).expect("writes");
    let r = analyze(&path, 1.0).expect("analyses");
    assert_eq!((r.segmentation, r.steps.len(), r.steps[0].requests), (Segmentation::CpuAnnotations, 1, Some(4)));
}

#[test]
fn a_trace_without_gpu_events_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("host.json");
    synth::write_doc(&synth::host_only(), &path).expect("writes");
    let err = analyze(&path, 1.0).expect_err("no GPU events");
    assert!(matches!(err, TraceError::NoGpuEvents { .. }), "{err}");
}

/// A trace whose every kernel has a start or duration that is not a time (or none) is refused
/// saying so, not as a trace profiled without the CUDA activity.
#[test]
fn a_trace_whose_every_gpu_event_has_no_usable_time_is_refused_saying_so() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("bad-times.json");
    let doc = r#"{"traceEvents":[
        {"ph":"X","cat":"kernel","name":"k1","ts":1e300,"dur":5,"pid":0,"tid":7},
        {"ph":"X","cat":"kernel","name":"k2","ts":10,"dur":-3,"pid":0,"tid":7},
        {"ph":"X","cat":"kernel","name":"k3","dur":4,"pid":0,"tid":7}]}"#;
    std::fs::write(&path, doc).expect("writes");
    let err = analyze(&path, 1.0).expect_err("no usable GPU event");
    assert!(matches!(err, TraceError::NoTimedGpuEvents { skipped: 3, .. }), "{err}");
    assert!(err.to_string().contains("all 3 GPU events"), "{err}");
}

#[test]
fn terminal_view_of_a_vllm_trace() {
    let (mut r, _, _dir) = drawn(&Spec::typical(Engine::VllmFull));
    r.file = "vllm.trace.json.gz".into();
    let mut out = Vec::new();
    servetune_trace::render::terminal(&r, &mut out).expect("renders");
    insta::assert_snapshot!(String::from_utf8(out).expect("utf8"));
}

#[test]
fn counts_in_annotation_names_cannot_overflow_the_figures() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("huge.json");
    let doc = r#"{"traceEvents":[
        {"ph":"X","cat":"gpu_user_annotation","name":"execute_context_1(18446744073709551615)_generation_1(5)","ts":0,"dur":100,"pid":0,"tid":7},
        {"ph":"X","cat":"gpu_user_annotation","name":"execute_context_1(18446744073709551615)_generation_0(0)","ts":100,"dur":100,"pid":0,"tid":7},
        {"ph":"X","cat":"kernel","name":"nvjet_tst_64x8","ts":10,"dur":50,"pid":0,"tid":7},
        {"ph":"X","cat":"kernel","name":"nvjet_tst_64x8","ts":110,"dur":50,"pid":0,"tid":7}]}"#;
    std::fs::write(&path, doc).expect("writes");
    let r = analyze(&path, 1.0).expect("analyses");
    assert_eq!(r.steps[0].tokens, Some(u64::MAX));
    assert!(r.phases.iter().all(|p| p.us_per_token.is_none_or(f64::is_finite) && p.tokens_per_step.is_none_or(f64::is_finite)));
}

/// A small xorshift: the scrambles below are reproducible without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[test]
fn scrambled_engine_traces_analyse_to_finite_figures() {
    // Events out of order, some dropped, times, durations and correlations changed: the analysis
    // may find other steps, but never panics and never reports a figure that is not a number.
    let dir = tempfile::tempdir().expect("tmp");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let engines = [Engine::SglangCuda, Engine::VllmPiecewise, Engine::TrtLlm, Engine::SglangRocm];
    let annotations = [Annotations::HostAndGpu, Annotations::Host, Annotations::None, Annotations::PythonFrames];
    for round in 0..12 {
        let mut spec = Spec::typical(engines[round % 4]);
        spec.layers = 2;
        spec.annotations = annotations[(round / 4 + round) % 4];
        let (mut doc, _) = synth::draw(&spec);
        let events = doc["traceEvents"].as_array_mut().expect("events");
        for _ in 0..events.len() / 4 {
            let (a, b) = (rng.below(events.len()), rng.below(events.len()));
            events.swap(a, b);
        }
        for _ in 0..events.len() / 10 {
            let i = rng.below(events.len());
            match rng.below(4) {
                0 => {
                    events.remove(i);
                }
                1 => events[i]["ts"] = serde_json::json!(events[i]["ts"].as_f64().unwrap_or(0.0) - rng.below(5000) as f64),
                2 => events[i]["dur"] = serde_json::json!(rng.below(100_000) as f64),
                _ => events[i]["args"]["correlation"] = serde_json::json!(rng.below(3000)),
            }
        }
        let path = dir.path().join(format!("scrambled{round}.json"));
        synth::write_doc(&doc, &path).expect("writes");
        let r = analyze(&path, 1.0).expect("analyses");
        let mut figures: Vec<f64> = vec![r.kernel_ms, r.busy_ms, r.span_ms, r.other_pct];
        for p in &r.phases {
            figures.extend([p.median_ms, p.p90_ms, p.mean_ms, p.idle_ms, p.idle_pct, p.overlap_ms, p.allreduce_calls_per_step]);
            figures.extend(p.tokens_per_step.into_iter().chain(p.requests_per_step).chain(p.us_per_token));
            figures.extend(p.categories.iter().flat_map(|c| [c.ms, c.pct].into_iter().chain(c.us_per_token)));
        }
        for s in &r.steps {
            figures.extend([s.start_ms, s.ms, s.busy_ms, s.idle_ms]);
            figures.extend(s.categories.iter().map(|c| c.ms));
        }
        assert!(figures.iter().all(|f| f.is_finite()), "round {round}: {figures:?}");
        assert!(r.steps.windows(2).all(|w| w[0].start_ms <= w[1].start_ms), "round {round}: steps out of order");
    }
}

/// A file holding several GPUs' kernels (ranks merged, or one process driving two GPUs) is
/// refused naming the devices: one timeline of all of them would count each step's all-reduces
/// once per GPU.
#[test]
fn a_trace_of_several_gpus_is_refused_naming_its_devices() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("two.json");
    let ev = |dev: serde_json::Value, ts: f64| serde_json::json!({"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "pid": 0, "tid": 7, "ts": ts, "dur": 5.0, "args": {"device": dev, "stream": 7}});
    let write = |events: Vec<serde_json::Value>| std::fs::write(&p, serde_json::json!({"traceEvents": events}).to_string()).expect("write");
    write(vec![ev(0.into(), 10.0), ev(1.into(), 20.0), ev(1.into(), 30.0)]);
    let err = servetune_trace::Timeline::read(&p).expect_err("two devices");
    assert!(matches!(err, TraceError::ManyDevices { .. }), "{err}");
    assert!(err.to_string().contains("ran on 2 devices (0, 1)"), "{err}");
    // One device, or a device that is not a number, reads; a copy naming the device at its other
    // end is no second GPU.
    let copy = serde_json::json!({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy PtoP", "pid": 0, "tid": 7, "ts": 40.0, "dur": 2.0, "args": {"device": 5}});
    write(vec![ev(3.into(), 10.0), ev(3.into(), 20.0), ev("cuda:0".into(), 30.0), copy]);
    assert_eq!(servetune_trace::Timeline::read(&p).expect("one device").kernels.len(), 4);
}
