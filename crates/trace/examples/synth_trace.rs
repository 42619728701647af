//! Writes one of the test fixtures (`servetune_trace::synth`) to a file, to look at in Perfetto or
//! run `servetune trace` on:
//! `cargo run -p servetune-trace --example synth_trace -- ENGINE FILE [ANNOTATIONS]` with ENGINE
//! one of sglang, sglang-rocm, vllm, vllm-piecewise, trtllm, training, training-rocm and
//! ANNOTATIONS one of host-and-gpu (default), host, frames, none.

use servetune_trace::synth::{self, Annotations, Engine, Spec};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: synth_trace ENGINE FILE [host-and-gpu|host|frames|none]";
    let (Some(engine), Some(file)) = (args.get(1), args.get(2)) else { return Err(usage.into()) };
    let path = std::path::Path::new(file);
    let training = |rocm| synth::write_doc(&synth::training(4, rocm).0, path).map_err(|e| e.to_string());
    let engine = match engine.as_str() {
        "sglang" => Engine::SglangCuda,
        "sglang-rocm" => Engine::SglangRocm,
        "vllm" => Engine::VllmFull,
        "vllm-piecewise" => Engine::VllmPiecewise,
        "trtllm" => Engine::TrtLlm,
        "training" => return training(false),
        "training-rocm" => return training(true),
        _ => return Err(usage.into()),
    };
    let mut spec = Spec::typical(engine);
    spec.annotations = match args.get(3).map(String::as_str) {
        None | Some("host-and-gpu") => Annotations::HostAndGpu,
        Some("host") => Annotations::Host,
        Some("frames") => Annotations::PythonFrames,
        Some("none") => Annotations::None,
        Some(_) => return Err(usage.into()),
    };
    let truth = synth::write(&spec, path).map_err(|e| e.to_string())?;
    for (i, s) in truth.steps.iter().enumerate() {
        println!("step {i}: {:?}, {} tokens, {} requests, {:.3} ms on the GPU", s.kind, s.tokens, s.requests, (s.end - s.start) / 1e3);
    }
    Ok(())
}
