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
        Box::new(HttpResponse),
        Box::new(EngineToml),
        Box::new(FabricDoc),
        Box::new(SnapshotTree::new()?),
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
            "\"moe_layer_freq\": ",
            "\"linear_attn_config\": {",
            "\"kda_layers\": [",
            "\"full_attn_layers\": [",
            "\"model_type\": \"kimi_linear\"",
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
            "\"model_type\": \"nemotron_h\"",
            "\"hybrid_override_pattern\": \"M*E-",
            "\"layers_block_type\": [\"mamba\", \"moe\"",
            "\"moe_latent_size\": ",
            "\"mamba_num_heads\": ",
            "\"n_groups\": ",
            "\"model_type\": \"gemma4_text\"",
            "\"global_head_dim\": ",
            "\"num_global_key_value_heads\": ",
            "\"attention_k_eq_v\": true",
            "\"enable_moe_block\": true",
            "\"top_k_experts\": ",
            "\"layer_types\": [\"sliding_attention\", \"full_attention\"",
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

/// The campaign's readiness, model-list and version requests (bench's HTTP client) over server
/// bytes: each input is served as the whole reply of a loopback server. Oracles: no panic, and
/// the same response and verdict whether the server writes the bytes at once or one at a time.
#[derive(Debug)]
pub struct HttpResponse;

/// Replies longer than this are served whole only (byte-by-byte writes of a long reply only slow
/// the fuzzer down).
const HTTP_TRICKLE_MAX: usize = 4096;

/// The loopback listener every reply is served on, bound once for the run: a listener per reply
/// leaves its port in TIME_WAIT after each connection, and a fast box binds every free port
/// within the minute ("Address already in use", found by a CI run).
fn loopback_listener() -> Result<&'static std::net::TcpListener, String> {
    static LISTENER: std::sync::OnceLock<std::net::TcpListener> = std::sync::OnceLock::new();
    if let Some(l) = LISTENER.get() {
        return Ok(l);
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot bind a loopback port: {e}"))?;
    Ok(LISTENER.get_or_init(|| l))
}

/// Serves `reply` to the connection whose request names `nonce`, after reading its head, whole or
/// one byte per write, then closes it. A connection that does not name it (one an earlier reply's
/// client left behind) is dropped unanswered.
fn serve_reply(reply: Vec<u8>, trickle: bool, nonce: String) -> Result<(u16, std::thread::JoinHandle<()>), String> {
    use std::io::{Read, Write};
    let l = loopback_listener()?;
    let port = l.local_addr().map_err(|e| e.to_string())?.port();
    let h = std::thread::spawn(move || loop {
        let Ok((mut c, _)) = l.accept() else { return };
        let _ = c.set_nodelay(true);
        let _ = c.set_read_timeout(Some(std::time::Duration::from_secs(5)));
        let mut head = Vec::new();
        let mut b = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match c.read(&mut b) {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&b[..n]),
            }
        }
        if !head.windows(nonce.len()).any(|w| w == nonce.as_bytes()) {
            continue;
        }
        let pieces: Vec<&[u8]> = if trickle { reply.chunks(1).collect() } else { vec![&reply[..]] };
        for p in pieces {
            if c.write_all(p).is_err() {
                return;
            }
        }
        return;
    });
    Ok((port, h))
}

/// One GET against a server replying `reply`.
fn get_reply(reply: &[u8], trickle: bool) -> Result<Result<servetune_campaign::http::Response, String>, String> {
    use servetune_campaign::http::{get, Endpoint};
    static REQUESTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = REQUESTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nonce = format!("/health/{n}-");
    let (port, server) = serve_reply(reply.to_vec(), trickle, nonce.clone())?;
    let r = get(&Endpoint::local(port), &nonce, std::time::Duration::from_secs(5)).map_err(|e| e.to_string());
    server.join().map_err(|_| "the loopback server panicked".to_string())?;
    Ok(r)
}

impl Target for HttpResponse {
    fn name(&self) -> &'static str {
        "http_response"
    }
    fn dictionary(&self) -> &'static [&'static str] {
        &[
            "HTTP/1.1 200 OK\r\n",
            "HTTP/1.0 503 Service Unavailable\r\n",
            "HTTP/1.1 100 Continue\r\n\r\n",
            "Transfer-Encoding: chunked\r\n",
            "Transfer-Encoding: gzip, chunked\r\n",
            "Content-Length: ",
            "\r\n\r\n",
            "\r\n",
            "0\r\n\r\n",
            "5;foo=bar\r\n",
            "FFFFFFFFFFFFFFFF\r\n",
            "\u{e9}",
            "\u{1F600}",
            "{\"data\":[{\"id\":\"m\"}]}",
        ]
    }
    fn check(&mut self, input: &[u8]) -> Result<(), String> {
        let whole = get_reply(input, false)?;
        if input.len() > HTTP_TRICKLE_MAX {
            return Ok(());
        }
        let trickled = get_reply(input, true)?;
        match (&whole, &trickled) {
            (Ok(a), Ok(b)) if a != b => Err(format!("the response depends on how writes fall: {a:?} whole, {b:?} byte by byte")),
            (Ok(_), Err(e)) | (Err(e), Ok(_)) => {
                Err(format!("the verdict depends on how writes fall: whole {}, byte by byte {} ({e})", whole.is_ok(), trickled.is_ok()))
            }
            _ => Ok(()),
        }
    }
}

/// An `--engines` file (the campaign's launch templates). Oracles: an accepted template's knob
/// domains are sane (integer bounds in order, float bounds finite and in order, a choice with a
/// word), its environment names are names, and it renders with its defaults without a panic.
#[derive(Debug)]
pub struct EngineToml;

impl Target for EngineToml {
    fn name(&self) -> &'static str {
        "engine_toml"
    }
    fn dictionary(&self) -> &'static [&'static str] {
        &[
            "[[engine]]\n",
            "name = \"x\"\n",
            "argv = [\"srv\", \"--port\", \"{port}\"]\n",
            "health = \"/health\"\n",
            "generate = \"/v1/completions\"\n",
            "knobs = [",
            "{ name = \"tp\", domain = { int = { min = 1, max = 8 } }, default = \"{gpus}\", args = [\"--tp\", \"{value}\"] }",
            "{ name = \"f\", domain = { float = { min = nan, max = inf } }, env = \"X\" }",
            "domain = { choice = [] }",
            "env = { \"A=B\" = \"1\" }\n",
            "ready_timeout_s = 18446744073709551615\n",
            "{",
            "}",
            "-9223372036854775808",
        ]
    }
    fn check(&mut self, input: &[u8]) -> Result<(), String> {
        use servetune_campaign::engine::{parse, Context, Domain};
        let text = String::from_utf8_lossy(input);
        let Ok(templates) = parse(&text, "fuzz.toml") else { return Ok(()) };
        let mut ctx = Context::default();
        for (k, v) in [("model", "m"), ("host", "127.0.0.1"), ("port", "8000"), ("gpus", "8"), ("servetune", "st"), ("nnodes", "1")] {
            ctx.values.insert(k.into(), v.into());
        }
        for t in &templates {
            for k in &t.knobs {
                let sane = match &k.domain {
                    Domain::Int { min, max } => min <= max,
                    Domain::Float { min, max } => min.is_finite() && max.is_finite() && min <= max,
                    Domain::Choice(c) => !c.is_empty(),
                    Domain::Text => true,
                };
                if !sane {
                    return Err(format!("accepted knob {} with domain {:?}", k.name, k.domain));
                }
            }
            let names = t.env.keys().chain(t.knobs.iter().filter_map(|k| k.env.as_ref()));
            if let Some(bad) = names.into_iter().find(|n| n.is_empty() || n.contains(['=', '\0', ' '])) {
                return Err(format!("accepted the environment name {bad:?}"));
            }
            let _ = t.render(&ctx, &Default::default());
        }
        Ok(())
    }
}

/// A `servetune fabric p2p --json` document, as `plan --fabric` and `campaign fabric` read it.
/// Oracles: an accepted link has a finite latency and a finite, positive bandwidth within the
/// model's ranges; accepted matrices hold only finite, non-negative values.
#[derive(Debug)]
pub struct FabricDoc;

impl Target for FabricDoc {
    fn name(&self) -> &'static str {
        "fabric_doc"
    }
    fn dictionary(&self) -> &'static [&'static str] {
        &[
            "{\"schema\":\"servetune.fabric/1.1\",",
            "\"kind\":\"p2p\",",
            "\"link\":{\"name\":\"measured-p2p\",\"alpha_us\":0.5,\"beta_gbs\":53.8,\"mode\":\"p2p\",\"source\":\"sim\"},",
            "\"mode\":\"host_staged\"",
            "\"p2p\":{\"gpus\":[0,1]},",
            "\"matrices\":[{\"title\":\"P2P=Enabled Latency Matrix (4 B)\",\"unit\":\"us\",\"values\":[[2.0,0.5],[0.5,2.0]]}]",
            "\"unit\":\"GB/s\"",
            "\"kind\":\"allreduce\",",
            "\"allreduce\":[{\"ranks\":8,\"env\":[],\"rows\":[{\"bytes\":8,\"time_us\":40.0},{\"bytes\":1048576,\"time_us\":90.0}]}]",
            "\"env\":[{\"name\":\"NCCL_P2P_DISABLE\",\"value\":\"1\"}]",
            "\"ranks\":4294967297",
            "-53.8",
            "1e-300",
            "1e308",
            "null",
            "]}",
        ]
    }
    fn check(&mut self, input: &[u8]) -> Result<(), String> {
        use servetune_model::hw::{LINK_BANDWIDTH_GBS, LINK_LATENCY_US};
        use servetune_model::inputs::FabricInput;
        let text = String::from_utf8_lossy(input);
        let Ok(doc) = FabricInput::parse(&text, "fuzz.json") else { return Ok(()) };
        if let Ok(l) = doc.link_profile("fuzz.json") {
            if !(LINK_LATENCY_US.contains(&l.alpha_us) && LINK_BANDWIDTH_GBS.contains(&l.beta_gbs)) {
                return Err(format!("accepted a link of {} us and {} GB/s", l.alpha_us, l.beta_gbs));
            }
        }
        if let Ok(m) = doc.measured_allreduce("fuzz.json") {
            // Every accepted run prices every size with a finite, non-negative time.
            let link = servetune_model::hw::link("pcie-host-staged").map_err(|e| e.to_string())?;
            for r in &m.runs {
                for b in [0.0, 1.0, 4096.0, 1e6, 1e12] {
                    let t = r.us(b);
                    if !(t.is_finite() && t >= 0.0) {
                        return Err(format!("a measured all-reduce of {} ranks priced {b} bytes at {t} us", r.ranks()));
                    }
                }
                let a = m.allreduce(&link, 8, 1e6, 5.0).us;
                if !(a.is_finite() && a >= 0.0) {
                    return Err(format!("a measured all-reduce gave {a} us"));
                }
            }
        }
        if let Ok(ms) = doc.checked_matrices("fuzz.json") {
            if let Some(v) = ms.iter().flat_map(|m| m.values.iter().flatten().flatten()).find(|v| !(v.is_finite() && **v >= 0.0)) {
                return Err(format!("accepted a matrix value {v}"));
            }
        }
        // The campaign's reading of the same document must not panic either.
        let _ = servetune_campaign::fabric_step::parse(&text, "fuzz.json");
        Ok(())
    }
}

/// A probe snapshot tree built from the input: each entry is a kind byte, a path byte (one of the
/// paths a probe reads) and, for a file, its content up to a NUL. Kinds: a regular file, a
/// directory, a symlink out of the snapshot (relative or absolute), a symlink loop, a FIFO.
/// Oracles: the probe returns (a FIFO would block it), and nothing of a file outside the snapshot
/// reaches the report.
#[derive(Debug)]
pub struct SnapshotTree {
    dir: tempfile::TempDir,
}

/// Text only a file outside the snapshot holds.
const OUTSIDE_MARKER: &str = "OUTSIDE-THE-SNAPSHOT-7f3a";

/// Paths a probe reads, relative to a snapshot's root.
const SNAPSHOT_PATHS: &[&str] = &[
    "nvml.json",
    "proc/cpuinfo",
    "proc/1/cgroup",
    "proc/1/environ",
    "proc/sys/kernel/osrelease",
    "servetune/cpuid",
    "sys/class/dmi/id/sys_vendor",
    "sys/class/dmi/id/product_name",
    "sys/bus/pci/devices",
    "sys/bus/pci/devices/0000:01:00.0",
    "sys/bus/pci/devices/0000:01:00.0/class",
    "sys/bus/pci/devices/0000:01:00.0/vendor",
    "sys/bus/pci/devices/0000:01:00.0/config",
    "sys/bus/pci/devices/0000:01:00.0/current_link_speed",
    "sys/bus/pci/devices/0000:01:00.0/iommu_group",
    "sys/devices/system/node/node0/cpulist",
    "sys/module/nvidia_uvm/parameters/uvm_disable_hmm",
];

impl SnapshotTree {
    /// A target with its own temporary folder: `outside` holds the marker, `snap/` the tree.
    pub fn new() -> std::io::Result<Self> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("outside"), format!("model name\t: {OUTSIDE_MARKER}\n{OUTSIDE_MARKER}\n"))?;
        Ok(Self { dir })
    }

    /// Builds the tree the input describes under `snap`. An entry that cannot be made (its folder
    /// is a link or a FIFO made by an earlier entry) is left out: such a tree is still hostile.
    fn build(&self, snap: &Path, input: &[u8]) {
        let outside = self.dir.path().join("outside");
        let mut rest = input;
        while let [kind, pick, tail @ ..] = rest {
            rest = tail;
            let rel = SNAPSHOT_PATHS[*pick as usize % SNAPSHOT_PATHS.len()];
            let p = snap.join(rel);
            if let Some(parent) = p.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            let depth = rel.matches('/').count() + 1;
            let _ = match kind % 6 {
                0 => {
                    let end = tail.iter().position(|b| *b == 0).unwrap_or(tail.len());
                    rest = tail.get(end + 1..).unwrap_or_default();
                    if p.symlink_metadata().is_ok() {
                        continue;
                    }
                    std::fs::write(&p, &tail[..end])
                }
                1 => std::fs::create_dir_all(&p),
                2 => std::os::unix::fs::symlink(format!("{}outside", "../".repeat(depth)), &p),
                3 => std::os::unix::fs::symlink(&outside, &p),
                4 => std::os::unix::fs::symlink(p.file_name().unwrap_or_default(), &p),
                _ => std::process::Command::new("mkfifo").arg(&p).stderr(std::process::Stdio::null()).status().map(|_| ()),
            };
        }
    }
}

impl Target for SnapshotTree {
    fn name(&self) -> &'static str {
        "snapshot_tree"
    }
    fn dictionary(&self) -> &'static [&'static str] {
        &["\u{0}\u{0}", "\u{2}\u{1}", "\u{3}\u{0}", "\u{5}\u{1}", "\u{4}\u{8}", "model name\t: x\n", "{}", "\u{0}"]
    }
    fn check(&mut self, input: &[u8]) -> Result<(), String> {
        let snap = self.dir.path().join("snap");
        let _ = std::fs::remove_dir_all(&snap);
        std::fs::create_dir_all(&snap).map_err(|e| format!("fuzzer: {e}"))?;
        self.build(&snap, input);
        let r = servetune_probe::probe_root(&snap, 0);
        let text = match &r {
            Ok(report) => serde_json::to_string(report).map_err(|e| format!("the probe report does not serialize: {e}"))?,
            Err(e) => e.clone(),
        };
        if text.contains(OUTSIDE_MARKER) {
            return Err("a file outside the snapshot reached the report".into());
        }
        Ok(())
    }
}
