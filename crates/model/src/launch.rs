//! The engine's launch command for a plan: one server per replica (its GPUs in
//! `CUDA_VISIBLE_DEVICES`, its own port), the parallelism, memory-share and running-cap flags the
//! prediction assumed, and a router in front of the replicas; rendered as a shell script.
//!
//! Every flag name was read from the engine's own argument parser:
//! - sglang: `sgl-project/sglang` `python/sglang/srt/server_args.py` and its field modules
//!   `python/sglang/srt/arg_groups/fields/{model,parallel,schedule,serving}.py` (release 0.5.23:
//!   `--model-path`, `--tp-size`, `--pp-size`, `--ep-size`, `--dp-size`, `--enable-dp-attention`
//!   (deprecated there for `--attn-dp-size`, still accepted), `--mem-fraction-static`,
//!   `--max-running-requests`, `--kv-cache-dtype fp8_e4m3`, `--enable-mixed-chunk`,
//!   `--disable-cuda-graph`, `--nnodes`, `--node-rank`, `--dist-init-addr`, `--trust-remote-code`,
//!   `--host`, `--port`);
//!   the router: `sglang_router.launch_router`'s parser (`--host`, `--port`, `--worker-urls`);
//! - vLLM: `vllm-project/vllm` `vllm/engine/arg_utils.py` at 99d7eb5d6a51
//!   (`--tensor-parallel-size`, `--pipeline-parallel-size`, `--data-parallel-size`,
//!   `--enable-expert-parallel`, `--gpu-memory-utilization`, `--max-num-seqs`, `--kv-cache-dtype`,
//!   `--enforce-eager`, `--trust-remote-code`, `--host`, `--port`; `vllm serve MODEL`);
//! - TensorRT-LLM: `NVIDIA/TensorRT-LLM` `tensorrt_llm/commands/serve.py` at 00209af149e7
//!   (`trtllm-serve MODEL`, `--tp_size`, `--pp_size`, `--ep_size`, `--max_batch_size`,
//!   `--free_gpu_memory_fraction`, `--config` for a YAML of LLM API options such as
//!   `enable_attention_dp`, `--host`, `--port`).

use serde::Serialize;

use crate::predict::{EngineName, Plan, Scenario};
use crate::quant::KvDtype;

/// The argument that stands for the checkpoint in [`Server::argv`]; a script sets it from
/// `$MODEL` (defaulting to the published checkpoint).
pub const MODEL_ARG: &str = "$MODEL";

/// One server process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Server {
    /// The GPUs it runs on (`CUDA_VISIBLE_DEVICES`).
    pub cuda_visible_devices: String,
    /// Its HTTP port.
    pub port: u16,
    /// The command, [`MODEL_ARG`] standing for the checkpoint.
    pub argv: Vec<String>,
    /// A YAML file of engine options the command reads (`--config`), as (file name, content).
    pub config_file: Option<(String, String)>,
}

/// How to launch a plan with its engine.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Launch {
    /// The engine.
    pub engine: EngineName,
    /// The checkpoint: a Hugging Face repository, when the catalog names one.
    pub checkpoint: Option<String>,
    /// One server per replica (empty when the plan cannot be launched as generated: see
    /// `notes`).
    pub servers: Vec<Server>,
    /// The router in front of several replicas (sglang's), or None.
    pub router: Option<Vec<String>>,
    /// The port clients send to.
    pub client_port: u16,
    /// What a user must know: load balancing without a router, multi-node steps, semantics that
    /// differ from the model's.
    pub notes: Vec<String>,
}

/// The Hugging Face repository of the scenario's checkpoint, when the catalog names one.
fn checkpoint(s: &Scenario) -> Option<String> {
    let entry = crate::spec::catalog_entry(&s.model.name).ok()?;
    let format = s.quant.headline(s.model.moe.is_some());
    // Some catalog entries describe a checkpoint in words instead of naming a repository.
    entry.checkpoints.iter().find(|c| c.quant == format).and_then(|c| c.repository()).map(str::to_string)
}

/// The default HTTP port of each engine's server.
fn default_port(e: EngineName) -> u16 {
    match e {
        EngineName::Sglang => 30000,
        EngineName::Vllm | EngineName::Trtllm => 8000,
    }
}

/// Whether the checkpoint is launched with `--trust-remote-code`: NVIDIA's Nemotron-H checkpoints
/// name their own configuration code (`auto_map`: `configuration_nemotron_h.NemotronHConfig`), and
/// their published recipes (the model cards, sgl-cookbook, vLLM's recipes) launch sglang and vLLM
/// with the flag.
fn trusts_remote_code(s: &Scenario) -> bool {
    // Ling 2.0's (`bailing_moe`) and Hunyuan-A13B's checkpoints name their own configuration code
    // too (`configuration_bailing_moe_v2`, `configuration_hunyuan`): inclusionAI/Ling-V2's README
    // launches sglang with the flag, Tencent-Hunyuan/Hunyuan-A13B's README launches vLLM with it,
    // and Kimi Linear's (`configuration_kimi`) README and vLLM recipe launch vLLM with it. Kimi-K2
    // and K2.5 (`configuration_deepseek`, `configuration_kimi_k25`) and MiniMax-M2.x
    // (`configuration_minimax_m2`) do too: sgl-cookbook's Kimi-K2 and MiniMax-M2.5 pages launch
    // sglang with the flag.
    matches!(s.model.arch.as_str(), "nemotron_h" | "bailing_moe" | "hunyuan_v1_moe" | "kimi_linear" | "kimi_k2" | "minimax_m2")
}

fn push(argv: &mut Vec<String>, flag: &str, value: impl ToString) {
    argv.push(flag.to_string());
    argv.push(value.to_string());
}

/// The GPU ids `first..first+n`, comma-separated.
fn gpu_list(first: u32, n: u32) -> String {
    (first..first + n).map(|g| g.to_string()).collect::<Vec<_>>().join(",")
}

/// The running cap per server: the plan's concurrency shared over its replicas, rounded up.
/// The memory share the plan's servers run with: the scenario's, for `plan`'s parallel sizes
/// (sglang's default depends on them).
fn mem_fraction(s: &Scenario, plan: &Plan) -> f64 {
    Scenario { plan: *plan, ..s.clone() }.mem_fraction_flag()
}

fn running_cap(plan: &Plan, concurrency: u32) -> u32 {
    concurrency.div_ceil(plan.dp()).max(1)
}

fn sglang(s: &Scenario, plan: &Plan, cap: u32, port: u16, nodes: u32) -> Vec<String> {
    let mut a: Vec<String> = ["python", "-m", "sglang.launch_server", "--model-path", MODEL_ARG].map(String::from).to_vec();
    if trusts_remote_code(s) {
        a.push("--trust-remote-code".into());
    }
    push(&mut a, "--tp-size", plan.tp);
    if plan.pp > 1 {
        push(&mut a, "--pp-size", plan.pp);
    }
    if plan.ep > 1 {
        push(&mut a, "--ep-size", plan.ep);
    }
    if plan.dp_attention {
        push(&mut a, "--dp-size", plan.tp);
        a.push("--enable-dp-attention".into());
    }
    push(&mut a, "--mem-fraction-static", format!("{:.3}", mem_fraction(s, plan)));
    push(&mut a, "--max-running-requests", cap);
    if s.quant.kv_cache == KvDtype::Fp8 {
        push(&mut a, "--kv-cache-dtype", "fp8_e4m3");
    }
    if s.engine.mixed_prefill {
        a.push("--enable-mixed-chunk".into());
    }
    if !s.engine.cuda_graphs {
        a.push("--disable-cuda-graph".into());
    }
    if nodes > 1 {
        push(&mut a, "--nnodes", nodes);
        push(&mut a, "--node-rank", "$NODE_RANK");
        push(&mut a, "--dist-init-addr", "$MASTER_ADDR:5000");
    }
    push(&mut a, "--host", "0.0.0.0");
    push(&mut a, "--port", port);
    a
}

fn vllm(s: &Scenario, plan: &Plan, cap: u32, port: u16) -> Vec<String> {
    let mut a: Vec<String> = ["vllm", "serve", MODEL_ARG].map(String::from).to_vec();
    // vLLM's attention data parallelism is its data parallelism with TP 1 per rank; its expert
    // parallelism spans the TP x DP ranks.
    let (tp, dp) = if plan.dp_attention { (1, plan.tp) } else { (plan.tp, 1) };
    if trusts_remote_code(s) {
        a.push("--trust-remote-code".into());
    }
    push(&mut a, "--tensor-parallel-size", tp);
    if plan.pp > 1 {
        push(&mut a, "--pipeline-parallel-size", plan.pp);
    }
    if dp > 1 {
        push(&mut a, "--data-parallel-size", dp);
    }
    if plan.ep > 1 {
        a.push("--enable-expert-parallel".into());
    }
    push(&mut a, "--gpu-memory-utilization", format!("{:.2}", mem_fraction(s, plan)));
    // --max-num-seqs holds for each data-parallel rank.
    push(&mut a, "--max-num-seqs", cap.div_ceil(dp).max(1));
    if s.quant.kv_cache == KvDtype::Fp8 {
        push(&mut a, "--kv-cache-dtype", "fp8");
    }
    if !s.engine.cuda_graphs {
        a.push("--enforce-eager".into());
    }
    push(&mut a, "--host", "0.0.0.0");
    push(&mut a, "--port", port);
    a
}

/// TensorRT-LLM's command and its `--config` YAML (attention DP and the KV format are LLM API
/// options, not flags).
fn trtllm(s: &Scenario, plan: &Plan, cap: u32, port: u16) -> (Vec<String>, Option<(String, String)>) {
    let mut a: Vec<String> = ["trtllm-serve", MODEL_ARG].map(String::from).to_vec();
    push(&mut a, "--tp_size", plan.tp);
    if plan.pp > 1 {
        push(&mut a, "--pp_size", plan.pp);
    }
    if plan.ep > 1 {
        push(&mut a, "--ep_size", plan.ep);
    }
    push(&mut a, "--max_batch_size", cap);
    // TensorRT-LLM's fraction is of the memory left after the weights, not of the whole GPU: the
    // model's KV share of it.
    let m = s.memory();
    let free = (m.capacity_gb - m.weights_gb).max(1e-9);
    push(&mut a, "--free_gpu_memory_fraction", format!("{:.2}", (m.kv_gb / free).clamp(0.01, 0.99)));
    let mut yaml = String::new();
    if plan.dp_attention {
        yaml += "enable_attention_dp: true\n";
    }
    if s.quant.kv_cache == KvDtype::Fp8 {
        yaml += "kv_cache_config:\n  dtype: fp8\n";
    }
    let config = (!yaml.is_empty()).then(|| {
        let name = format!("trtllm-options-{port}.yaml");
        push(&mut a, "--config", &name);
        (name, yaml)
    });
    push(&mut a, "--host", "0.0.0.0");
    push(&mut a, "--port", port);
    (a, config)
}

/// The launch of `plan` at `concurrency` (the plan's best, which sets the running cap) on the
/// scenario's engine, GPUs and nodes.
pub fn launch(s: &Scenario, plan: &Plan, concurrency: u32) -> Launch {
    let engine = s.engine.serving;
    let per_replica = plan.tp * plan.pp;
    let replicas = plan.dp();
    let cap = running_cap(plan, concurrency);
    let base = default_port(engine);
    let gpn = s.cluster.as_ref().map_or(plan.gpus, |c| c.gpus_per_node);
    let nodes_per_replica = per_replica.div_ceil(gpn.max(1));
    let mut notes = Vec::new();
    let mut out = Launch { engine, checkpoint: checkpoint(s), servers: Vec::new(), router: None, client_port: base, notes: Vec::new() };
    if out.checkpoint.is_none() {
        notes.push(format!("set MODEL to the {} checkpoint's path or repository", s.quant.label(&s.model)));
    }
    if nodes_per_replica > 1 && engine != EngineName::Sglang {
        notes.push(format!(
            "not generated: one replica spans {nodes_per_replica} nodes, which {} launches through its own multi-node tooling ({}); launch TP{} PP{} that way",
            engine.name(),
            if engine == EngineName::Vllm { "a Ray cluster" } else { "mpirun or Slurm" },
            plan.tp,
            plan.pp
        ));
        out.notes = notes;
        return out;
    }
    if engine == EngineName::Vllm && plan.ep > 1 && plan.ep != plan.tp {
        notes.push(format!(
            "vLLM's expert parallelism spans all {} ranks of a replica; EP{} within TP{} has no vLLM flag",
            plan.tp, plan.ep, plan.tp
        ));
    }
    let with_router = replicas > 1;
    for r in 0..replicas {
        let port = if with_router { base + 1 + r as u16 } else { base };
        // On several nodes, each replica's GPUs are numbered within its node.
        let first = if nodes_per_replica > 1 { 0 } else { (r * per_replica) % gpn.max(1) };
        let gpus = gpu_list(first, per_replica.min(gpn));
        let (argv, config_file) = match engine {
            EngineName::Sglang => (sglang(s, plan, cap, port, nodes_per_replica), None),
            EngineName::Vllm => (vllm(s, plan, cap, port), None),
            EngineName::Trtllm => trtllm(s, plan, cap, port),
        };
        out.servers.push(Server { cuda_visible_devices: gpus, port, argv, config_file });
    }
    if nodes_per_replica > 1 {
        notes.push(format!(
            "run each server's command on all {nodes_per_replica} nodes of its replica with NODE_RANK=0..{} and MASTER_ADDR set to the first node's address",
            nodes_per_replica - 1
        ));
    } else if s.cluster.is_some() && replicas > 1 {
        notes.push(format!(
            "{} servers per node: run each on the node that holds its replica, and point the router at those nodes' addresses",
            (gpn / per_replica).max(1)
        ));
    }
    if with_router {
        add_router(&mut out, &mut notes, base, replicas);
    }
    notes.push(format!(
        "running cap {cap} per server: the plan's concurrency {concurrency} over {replicas} replica{}, as predicted",
        if replicas > 1 { "s" } else { "" }
    ));
    out.notes = notes;
    out
}

/// The router in front of several replicas: sglang's own, or a note for the engines without one.
fn add_router(out: &mut Launch, notes: &mut Vec<String>, base: u16, replicas: u32) {
    let urls: Vec<String> = out.servers.iter().map(|x| format!("http://127.0.0.1:{}", x.port)).collect();
    if out.engine == EngineName::Sglang {
        let mut a: Vec<String> = ["python", "-m", "sglang_router.launch_router"].map(String::from).to_vec();
        push(&mut a, "--host", "0.0.0.0");
        push(&mut a, "--port", base);
        a.push("--worker-urls".into());
        a.extend(urls);
        out.router = Some(a);
    } else {
        notes.push(format!(
            "{replicas} replicas on ports {}..{}: put a load balancer in front of them (any HTTP round-robin proxy), or send each benchmark client's share to its own port",
            base + 1,
            base + replicas as u16
        ));
        out.client_port = base + 1;
    }
}

/// An argument as a POSIX shell reads it: bare when it is plain, else single-quoted;
/// [`MODEL_ARG`] is `"$MODEL"`, and `$NODE_RANK` / `$MASTER_ADDR` stay expandable.
pub fn shell_word(a: &str) -> String {
    if a == MODEL_ARG {
        return "\"$MODEL\"".into();
    }
    if a == "$NODE_RANK" || a == "$MASTER_ADDR:5000" {
        return format!("\"{a}\"");
    }
    if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "_./:=,@+-".contains(c)) {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

/// A command line as a user types it, the checkpoint written out when known.
pub fn command_line(l: &Launch, argv: &[String]) -> String {
    argv.iter()
        .map(|a| match (a.as_str(), &l.checkpoint) {
            (MODEL_ARG, Some(c)) => shell_word(c),
            _ => shell_word(a),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The launch as a bash script: `MODEL` defaulting to the checkpoint, each server in the
/// background with its GPUs, the router, then `wait`. `title` is its first comment line.
pub fn script(l: &Launch, title: &str) -> String {
    let mut out = format!("#!/usr/bin/env bash\n# {}\n", title.replace('\n', " "));
    for n in &l.notes {
        out += &format!("# {}\n", n.replace('\n', " "));
    }
    out += "set -euo pipefail\n";
    if l.servers.is_empty() {
        out += "echo 'servetune: this plan has no generated launch command (see the notes above)' >&2\nexit 1\n";
        return out;
    }
    out += &match &l.checkpoint {
        Some(c) => format!("MODEL=\"${{MODEL:-{c}}}\"\n"),
        None => "MODEL=\"${MODEL:?set MODEL to the checkpoint's path or repository}\"\n".into(),
    };
    if l.servers.iter().any(|s| s.argv.iter().any(|a| a == "$NODE_RANK")) {
        out += "NODE_RANK=\"${NODE_RANK:?set NODE_RANK to this node's rank in the replica}\"\nMASTER_ADDR=\"${MASTER_ADDR:?set MASTER_ADDR to the first node's address}\"\n";
    }
    for s in &l.servers {
        if let Some((name, yaml)) = &s.config_file {
            out += &format!("cat > {} <<'YAML'\n{yaml}YAML\n", shell_word(name));
        }
    }
    let background = l.servers.len() > 1 || l.router.is_some();
    for s in &l.servers {
        let cmd = s.argv.iter().map(|a| shell_word(a)).collect::<Vec<_>>().join(" ");
        out += &format!("CUDA_VISIBLE_DEVICES={} {cmd}{}\n", s.cuda_visible_devices, if background { " &" } else { "" });
    }
    if let Some(r) = &l.router {
        out += &format!("{} &\n", r.iter().map(|a| shell_word(a)).collect::<Vec<_>>().join(" "));
    }
    if background {
        out += "wait\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::tests::scenario;
    use crate::quant::Dtype;

    fn plan(gpus: u32, tp: u32, pp: u32, ep: u32, dp_attention: bool) -> Plan {
        Plan { gpus, tp, pp, ep, dp_attention }
    }

    #[test]
    fn replicas_get_their_own_gpus_ports_and_an_sglang_router() {
        let s = scenario("qwen3-235b-a22b", Dtype::Fp8, "h100-sxm", "nvlink", 8, 8);
        let l = launch(&s, &plan(8, 4, 1, 4, false), 256);
        assert_eq!(l.checkpoint.as_deref(), Some("Qwen/Qwen3-235B-A22B-FP8"));
        assert_eq!(l.servers.len(), 2);
        assert_eq!((l.servers[0].cuda_visible_devices.as_str(), l.servers[0].port), ("0,1,2,3", 30001));
        assert_eq!((l.servers[1].cuda_visible_devices.as_str(), l.servers[1].port), ("4,5,6,7", 30002));
        let a = l.servers[1].argv.join(" ");
        assert!(a.contains("--tp-size 4 --ep-size 4") && a.contains("--max-running-requests 128"), "{a}");
        let router = l.router.expect("a router").join(" ");
        assert!(router.ends_with("--port 30000 --worker-urls http://127.0.0.1:30001 http://127.0.0.1:30002"), "{router}");
        let sh = script(&launch(&s, &plan(8, 4, 1, 4, false), 256), "t");
        assert!(sh.contains("MODEL=\"${MODEL:-Qwen/Qwen3-235B-A22B-FP8}\""), "{sh}");
        assert!(sh.contains("CUDA_VISIBLE_DEVICES=4,5,6,7 python -m sglang.launch_server --model-path \"$MODEL\" --tp-size 4"), "{sh}");
        assert!(sh.trim_end().ends_with("wait"), "{sh}");
    }

    #[test]
    fn each_engine_spells_its_own_flags() {
        let mut s = scenario("deepseek-v3", Dtype::Fp8, "h200", "nvlink", 8, 8);
        let dpa = plan(8, 8, 1, 8, true);
        let a = launch(&s, &dpa, 512).servers[0].argv.join(" ");
        assert!(a.contains("--tp-size 8 --ep-size 8 --dp-size 8 --enable-dp-attention --mem-fraction-static 0.758"), "{a}");
        s.engine.serving = EngineName::Vllm;
        let a = launch(&s, &dpa, 512).servers[0].argv.join(" ");
        assert!(a.starts_with("vllm serve $MODEL --tensor-parallel-size 1 --data-parallel-size 8 --enable-expert-parallel"), "{a}");
        assert!(a.contains("--max-num-seqs 64"), "per DP rank: {a}");
        s.engine.serving = EngineName::Trtllm;
        let l = launch(&s, &dpa, 512);
        let a = l.servers[0].argv.join(" ");
        assert!(a.starts_with("trtllm-serve $MODEL --tp_size 8 --ep_size 8 --max_batch_size 512"), "{a}");
        let (name, yaml) = l.servers[0].config_file.clone().expect("attention DP is an LLM API option");
        assert!(a.contains(&format!("--config {name}")) && yaml.contains("enable_attention_dp: true"), "{a} {yaml}");
    }

    /// Nemotron-H checkpoints launch with `--trust-remote-code` under sglang and vLLM, as their
    /// recipes do; other models do not.
    #[test]
    fn nemotron_h_launches_trust_the_checkpoints_code() {
        let mut s = scenario("nemotron-3-nano-30b-a3b", Dtype::Fp8, "h100-sxm", "nvlink", 2, 2);
        let one = plan(2, 2, 1, 1, false);
        for engine in [EngineName::Sglang, EngineName::Vllm] {
            s.engine.serving = engine;
            let a = launch(&s, &one, 64).servers[0].argv.join(" ");
            assert!(a.contains(" --trust-remote-code "), "{engine:?}: {a}");
        }
        // Kimi Linear's checkpoint names its own configuration code (`configuration_kimi`).
        let mut kimi = scenario("kimi-linear-48b-a3b", Dtype::Bf16, "h100-sxm", "nvlink", 2, 2);
        for engine in [EngineName::Sglang, EngineName::Vllm] {
            kimi.engine.serving = engine;
            let a = launch(&kimi, &one, 64).servers[0].argv.join(" ");
            assert!(a.contains(" --trust-remote-code "), "Kimi Linear under {engine:?}: {a}");
        }
        // Kimi-K2/K2.5 and MiniMax-M2.x name theirs too (sgl-cookbook launches them with the flag).
        let eight = plan(8, 8, 1, 1, false);
        for (model, q) in [("kimi-k2", Dtype::Fp8), ("kimi-k2.5", Dtype::Int4), ("minimax-m2.5", Dtype::Fp8)] {
            let m = scenario(model, q, "h200", "nvlink", 8, 8);
            let a = launch(&m, &eight, 64).servers[0].argv.join(" ");
            assert!(a.contains(" --trust-remote-code "), "{model}: {a}");
        }
        let other = scenario("llama-3.1-8b", Dtype::Fp8, "h100-sxm", "nvlink", 2, 2);
        assert!(!launch(&other, &one, 64).servers[0].argv.iter().any(|x| x == "--trust-remote-code"));
    }

    #[test]
    fn odd_arguments_are_single_quoted() {
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word("--tp-size"), "--tp-size");
        assert_eq!(shell_word(MODEL_ARG), "\"$MODEL\"");
        assert_eq!(shell_word(""), "''");
    }
}
