//! The fuzz targets: each feeds one input to one parser of untrusted data and checks an oracle.

use std::path::{Path, PathBuf};

use servetune_bench::sse::{SseEvent, SseParser};

/// One parser under fuzzing.
pub trait Target {
    /// The name used on the command line and as the corpus folder.
    fn name(&self) -> &'static str;
    /// Tokens of the input format that the mutator splices in.
    fn dictionary(&self) -> &'static [&'static str];
    /// Runs the parser on `input`; `Err` when an oracle beyond "no panic" fails.
    fn check(&mut self, input: &[u8]) -> Result<(), String>;
}

/// Every target, by name. `probe_fixture` is the snapshot tree the probe target mutates.
pub fn all_targets(probe_fixture: &Path) -> std::io::Result<Vec<Box<dyn Target>>> {
    Ok(vec![
        Box::new(Sse),
        Box::new(ModelConfig),
        Box::new(ProbeTree::new(probe_fixture)?),
        Box::new(SimRequest),
        Box::new(TraceFile::new()?),
    ])
}

/// `servetune trace` over a profiler trace file (user-supplied, often hand-cut or truncated).
/// Oracles: the streaming scanner hands out the same events whether the bytes arrive whole or
/// one at a time, and an analysed trace reports only finite figures.
#[derive(Debug)]
pub struct TraceFile {
    dir: tempfile::TempDir,
}

impl TraceFile {
    /// A target writing each input to a file in its own temporary folder.
    pub fn new() -> std::io::Result<Self> {
        Ok(Self { dir: tempfile::tempdir()? })
    }
}

/// A reader that gives one byte per read, to move every buffer boundary.
struct Trickle<'a>(&'a [u8]);

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match (self.0.split_first(), buf.first_mut()) {
            (Some((b, rest)), Some(slot)) => {
                *slot = *b;
                self.0 = rest;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}

fn trace_events(r: impl std::io::Read) -> (Vec<String>, bool) {
    let mut seen = Vec::new();
    let ok = servetune_trace::read::read_events(r, &mut |e| seen.push(format!("{:?} {:?} {:?} {}", e.cat, e.ts, e.dur, e.name))).is_ok();
    (seen, ok)
}

impl Target for TraceFile {
    fn name(&self) -> &'static str {
        "trace"
    }
    fn dictionary(&self) -> &'static [&'static str] {
        &[
            "{\"traceEvents\":[",
            "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"sm90_xmma_gemm\",\"ts\":",
            "{\"ph\":\"X\",\"cat\":\"gpu_user_annotation\",\"name\":\"decode\",\"ts\":",
            "\"cat\":\"gpu_memcpy\"",
            "\"name\":\"ncclDevKernel_AllReduce_Sum_bf16_RING_LL\"",
            ",\"dur\":",
            "\"args\":{\"correlation\":",
            "1e308",
            "-1",
            "NaN",
            "\"\\u0000\"",
            "]}",
            "},",
            "\"",
            "[",
        ]
    }
    fn check(&mut self, input: &[u8]) -> Result<(), String> {
        let (whole, whole_ok) = trace_events(input);
        let (trickled, trickled_ok) = trace_events(Trickle(input));
        if whole != trickled || whole_ok != trickled_ok {
            return Err(format!(
                "the scanner depends on how reads fall: {} events ({whole_ok}) whole, {} ({trickled_ok}) byte by byte",
                whole.len(),
                trickled.len()
            ));
        }
        let path = self.dir.path().join("t.json");
        std::fs::write(&path, input).map_err(|e| format!("cannot write the input: {e}"))?;
        let Ok(r) = servetune_trace::analyze(&path, 1.0) else { return Ok(()) };
        let mut figures = vec![("kernel_ms", r.kernel_ms), ("busy_ms", r.busy_ms), ("span_ms", r.span_ms)];
        for p in &r.phases {
            figures.extend([("median_ms", p.median_ms), ("p90_ms", p.p90_ms), ("mean_ms", p.mean_ms), ("idle_ms", p.idle_ms)]);
            figures.extend(p.categories.iter().map(|c| ("category ms", c.ms)));
        }
        figures.extend(r.top_kernels.iter().map(|k| ("kernel total_ms", k.total_ms)));
        match figures.iter().find(|(_, v)| !v.is_finite()) {
            Some((what, v)) => Err(format!("an analysed trace reports {what} = {v}")),
            None => Ok(()),
        }
    }
}

/// The SSE parser over server bytes. Oracle: feeding the bytes whole or split at any point gives
/// the same events and the same verdict (the parser must not depend on how reads fall).
#[derive(Debug)]
pub struct Sse;

/// Small enough that the fuzzer reaches the line-length limit.
const SSE_MAX_LINE: usize = 512;

fn parse_sse(pieces: &[&[u8]]) -> (Vec<SseEvent>, bool) {
    let mut p = SseParser::new(SSE_MAX_LINE);
    let mut events = Vec::new();
    let mut ok = true;
    for piece in pieces {
        if p.feed(piece, &mut |e| events.push(e)).is_err() {
            ok = false;
            break;
        }
    }
    if ok && p.finish(&mut |e| events.push(e)).is_err() {
        ok = false;
    }
    (events, ok)
}

impl Target for Sse {
    fn name(&self) -> &'static str {
        "sse"
    }
    fn dictionary(&self) -> &'static [&'static str] {
        &[
            "data: ",
            "data:",
            "event: error\n",
            ": keep-alive\n",
            "\n\n",
            "\r\n",
            "\r",
            "[DONE]",
            "id: 1\n",
            "retry: 10\n",
            "{\"choices\":[{\"text\":\"x\"}]}",
        ]
    }
    fn check(&mut self, input: &[u8]) -> Result<(), String> {
        let (whole, whole_ok) = parse_sse(&[input]);
        let cut = input.first().map_or(0, |b| *b as usize % (input.len() + 1));
        let (a, b) = input.split_at(cut);
        let (split, split_ok) = parse_sse(&[a, b]);
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        let (single, single_ok) = parse_sse(&bytes);
        if whole_ok != split_ok || whole_ok != single_ok {
            return Err(format!(
                "verdict depends on the read split: whole {whole_ok}, split at {cut} {split_ok}, byte by byte {single_ok}"
            ));
        }
        if whole_ok && (whole != split || whole != single) {
            return Err(format!(
                "events depend on the read split (whole {} events, split at {cut} {}, byte by byte {})",
                whole.len(),
                split.len(),
                single.len()
            ));
        }
        Ok(())
    }
}

/// A Hugging Face `config.json` read as a model. Oracle: a config that is accepted describes a
/// model with positive, finite parameter counts, active no more than total.
#[derive(Debug)]
pub struct ModelConfig;

impl Target for ModelConfig {
    fn name(&self) -> &'static str {
        "model_config"
    }
    fn dictionary(&self) -> &'static [&'static str] {
        &[
            "\"num_experts\": ",
            "\"n_routed_experts\": ",
            "\"num_experts_per_tok\": ",
            "\"num_attention_heads\": ",
            "\"num_key_value_heads\": ",
            "\"hidden_size\": ",
            "\"num_hidden_layers\": ",
            "\"kv_lora_rank\": ",
            "\"text_config\": {",
            "\"model_type\": \"deepseek_v3\"",
            "\"model_type\": \"qwen3_moe\"",
            "\"model_type\": \"llama4_text\"",
            "\"interleave_moe_layer_step\": ",
            "\"no_rope_layers\": [",
            "\"attention_chunk_size\": ",
            "\"indexer_types\": [\"full\", \"shared\"",
            "\"quantized_layers\": {",
            "\"modules_to_not_convert\": [\"model.layers.0.self_attn\"",
            "Infinity",
            "NaN",
            "null",
            "-7",
            "1e308",
        ]
    }
    fn check(&mut self, input: &[u8]) -> Result<(), String> {
        let text = String::from_utf8_lossy(input).into_owned();
        let Ok(spec) = servetune_model::spec::from_hf_config(&text, "fuzz.json") else { return Ok(()) };
        let p = spec.params();
        let plausible =
            p.total.is_finite() && p.total > 0.0 && p.active.is_finite() && p.active > 0.0 && p.active <= p.total * (1.0 + 1e-9);
        if !plausible {
            return Err(format!("accepted a config with total {} and active {} parameters", p.total, p.active));
        }
        predict_on_a_known_box(text)
    }
}

/// Plans an accepted model on 8 H200s: a scenario that fits must predict finite, non-negative
/// throughput and latency at low and high concurrency.
fn predict_on_a_known_box(text: String) -> Result<(), String> {
    use servetune_model::request::{ModelSource, ScenarioSpec};
    let spec = ScenarioSpec::new(ModelSource::Config { text, path: "fuzz.json".into() }, "h200");
    let Ok(scenario) = spec.build() else { return Ok(()) };
    if scenario.check_fit().is_err() {
        return Ok(());
    }
    for c in [1, 64] {
        let pt = scenario.point(c);
        let finite = [pt.output_tokens_per_s, pt.tpot_ms, pt.ttft_ms].iter().all(|x| x.is_finite() && *x >= 0.0);
        if !finite {
            return Err(format!(
                "predicted output {} tok/s, TPOT {} ms, TTFT {} ms at c={c}",
                pt.output_tokens_per_s, pt.tpot_ms, pt.ttft_ms
            ));
        }
    }
    Ok(())
}

/// A probe snapshot tree in which one file's content is replaced by the input. The first byte of
/// the input picks the file; the rest is its new content. Oracle: the probe returns a report (or
/// an error) and the report serializes.
#[derive(Debug)]
pub struct ProbeTree {
    dir: tempfile::TempDir,
    files: Vec<PathBuf>,
}

impl ProbeTree {
    /// Copies `fixture` (a `servetune probe --capture` tree) into a temporary folder.
    pub fn new(fixture: &Path) -> std::io::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut files = Vec::new();
        copy_tree(fixture, dir.path(), &mut files)?;
        files.sort();
        Ok(Self { dir, files })
    }
}

fn copy_tree(from: &Path, to: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let ty = e.file_type()?;
        if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else if ty.is_dir() {
            copy_tree(&src, &dst, files)?;
        } else {
            std::fs::copy(&src, &dst)?;
            files.push(dst);
        }
    }
    Ok(())
}

impl Target for ProbeTree {
    fn name(&self) -> &'static str {
        "probe_tree"
    }
    fn dictionary(&self) -> &'static [&'static str] {
        &[
            "8.0 GT/s PCIe",
            "32.0 GT/s PCIe",
            "16",
            "x16",
            "-1",
            "0x10de",
            "0x030200",
            "kvm",
            "KVMKVMKVM",
            "Y",
            "N",
            "\n",
            "\"p2p\"",
            "\"NS\"",
            "{",
        ]
    }
    fn check(&mut self, input: &[u8]) -> Result<(), String> {
        let Some((&pick, content)) = input.split_first() else { return Ok(()) };
        if self.files.is_empty() {
            return Ok(());
        }
        let file = &self.files[pick as usize % self.files.len()];
        let saved = std::fs::read(file).map_err(|e| format!("fuzzer: cannot read {}: {e}", file.display()))?;
        std::fs::write(file, content).map_err(|e| format!("fuzzer: cannot write {}: {e}", file.display()))?;
        let r = servetune_probe::probe_root(self.dir.path(), 0);
        std::fs::write(file, saved).map_err(|e| format!("fuzzer: cannot restore {}: {e}", file.display()))?;
        if let Ok(report) = r {
            serde_json::to_string(&report).map_err(|e| format!("the probe report does not serialize: {e}"))?;
        }
        Ok(())
    }
}

/// The simulator's request parsing: the first line is a path for the router, the rest a body
/// parsed as each API's request. Oracle: no panic, and a request routed to a generation API
/// parses (or is refused) the same way twice.
#[derive(Debug)]
pub struct SimRequest;

impl Target for SimRequest {
    fn name(&self) -> &'static str {
        "sim_request"
    }
    fn dictionary(&self) -> &'static [&'static str] {
        &[
            "/v1/completions\n",
            "/v1/chat/completions\n",
            "/generate\n",
            "\"prompt\": ",
            "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]",
            "\"max_tokens\": ",
            "\"min_tokens\": ",
            "\"ignore_eos\": true",
            "\"stream\": true",
            "\"sampling_params\": {",
            "\"input_ids\": [1, 2, 3]",
            "\"logit_bias\": {\"2\": -100}",
        ]
    }
    fn check(&mut self, input: &[u8]) -> Result<(), String> {
        use servetune_sim::wire::{parse_request, Api, Endpoint};
        let cut = input.iter().position(|b| *b == b'\n').unwrap_or(input.len());
        let path = String::from_utf8_lossy(&input[..cut]);
        let body = input.get(cut + 1..).unwrap_or_default();
        let _ = Endpoint::from_path(&path);
        for api in Api::ALL {
            let first = parse_request(api, body).is_ok();
            if first != parse_request(api, body).is_ok() {
                return Err(format!("{api:?}: the same body parsed differently twice"));
            }
        }
        Ok(())
    }
}
