//! `servetune plan --rank` answers with a plan one can launch: the engine's command for each
//! ranked plan (checked against the engines' own flag definitions), `--emit-launch DIR` scripts,
//! the headline with its interval and ties, and the committed interval table kept honest.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn servetune(args: &[&str]) -> (i32, String, String) {
    let out = assert_cmd::Command::cargo_bin("servetune").expect("the servetune binary").args(args).output().expect("run servetune");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The ranked plans of a `plan --rank --json -` run.
fn ranked(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["plan", "--rank", "--top", "30", "--json", "-"];
    all.extend_from_slice(args);
    let (code, out, err) = servetune(&all);
    assert_eq!(code, 0, "{all:?}: {err}");
    let v: Value = serde_json::from_str(&out).expect("plan JSON");
    v["ranked_plans"].as_array().expect("ranked plans").clone()
}

/// Every command line (servers and routers) of `ranked`.
fn argvs(ranked: &[Value]) -> Vec<Vec<String>> {
    let strings = |a: &Value| a.as_array().expect("argv").iter().map(|x| x.as_str().expect("string").to_string()).collect::<Vec<_>>();
    let mut out = Vec::new();
    for r in ranked {
        for s in r["launch"]["servers"].as_array().expect("servers") {
            out.push(strings(&s["argv"]));
        }
        if !r["launch"]["router"].is_null() {
            out.push(strings(&r["launch"]["router"]));
        }
    }
    out
}

const QWEN: [&str; 8] = ["--model", "qwen3-235b-a22b", "--gpu", "h100-sxm", "--gpus", "8", "--concurrency", "1,64,256"];
const DEEPSEEK: [&str; 6] = ["--model", "deepseek-v3", "--gpu", "h200", "--gpus", "8"];

/// sglang's server commands parse under sglang's own flag definitions: its real parser where it
/// imports, else its installed sources read with Python's ast module (the test venv holds sglang
/// 0.5.23 installed with --no-deps, whose parser import needs torch); `sglang_flags.py` says which
/// it used.
#[test]
fn sglang_launch_commands_parse_under_sglangs_own_flag_definitions() {
    let venv = std::env::var_os("SERVETUNE_TEST_VENV").map(PathBuf::from).unwrap_or_else(|| root().join(".venv-test"));
    let py = venv.join("bin/python");
    assert!(py.exists(), "{} is missing: run scripts/setup-test-env", py.display());
    let mut plans = ranked(&QWEN);
    plans.extend(ranked(&DEEPSEEK));
    plans.extend(ranked(&[
        "--model",
        "llama-3.1-70b",
        "--gpu",
        "h100-sxm",
        "--gpus",
        "16",
        "--gpus-per-node",
        "8",
        "--net",
        "ib-ndr",
        "--kv-dtype",
        "fp8",
    ]));
    let cmds: Vec<Vec<String>> = argvs(&plans).into_iter().filter(|a| a[..3] == ["python", "-m", "sglang.launch_server"]).collect();
    let all = cmds.concat().join(" ");
    for flag in ["--tp-size", "--ep-size", "--pp-size", "--enable-dp-attention", "--nnodes", "--kv-cache-dtype"] {
        assert!(all.contains(flag), "the plans checked should use {flag}");
    }
    let dir = tempfile::tempdir().expect("tmp");
    let f = dir.path().join("argv.json");
    std::fs::write(&f, serde_json::to_string(&cmds).expect("json")).expect("write");
    let out = Command::new(&py)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/plan_launch/sglang_flags.py"))
        .arg(&f)
        .output()
        .expect("run python");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains(&format!("ok {} commands", cmds.len())), "{text}");
}

/// vLLM's flags as its parser defines them: vllm-project/vllm@99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b
/// vllm/engine/arg_utils.py (EngineArgs.add_cli_args; `vllm serve MODEL`).
const VLLM_FLAGS: [&str; 10] = [
    "--tensor-parallel-size",
    "--pipeline-parallel-size",
    "--data-parallel-size",
    "--enable-expert-parallel",
    "--gpu-memory-utilization",
    "--max-num-seqs",
    "--kv-cache-dtype",
    "--enforce-eager",
    "--host",
    "--port",
];
/// Those of the switches among them (no value).
const VLLM_SWITCHES: [&str; 2] = ["--enable-expert-parallel", "--enforce-eager"];

/// TensorRT-LLM's: NVIDIA/TensorRT-LLM@00209af149e7774406881a37283dce303571eb11
/// tensorrt_llm/commands/serve.py (the `serve` click command; `trtllm-serve MODEL`).
const TRTLLM_FLAGS: [&str; 8] =
    ["--tp_size", "--pp_size", "--ep_size", "--max_batch_size", "--free_gpu_memory_fraction", "--config", "--host", "--port"];

/// Flags of `argv` after its first `skip` words, each with its value: every one must be in
/// `known`, and every non-switch must have a value.
fn check_flags(argv: &[String], skip: usize, known: &[&str], switches: &[&str]) {
    let mut i = skip;
    while i < argv.len() {
        let a = argv[i].as_str();
        assert!(known.contains(&a), "{a} is not among the engine's flags: {argv:?}");
        if switches.contains(&a) {
            i += 1;
        } else {
            assert!(argv.get(i + 1).is_some_and(|v| !v.starts_with("--")), "{a} needs a value: {argv:?}");
            i += 2;
        }
    }
}

#[test]
fn vllm_and_tensorrt_llm_commands_use_only_their_documented_flags() {
    for engine in ["vllm", "trtllm"] {
        let mut args = DEEPSEEK.to_vec();
        args.extend_from_slice(&["--engine", engine, "--kv-dtype", "fp8"]);
        let plans = ranked(&args);
        let cmds = argvs(&plans);
        assert!(!cmds.is_empty());
        for argv in &cmds {
            match engine {
                "vllm" => {
                    assert_eq!(argv[..3], ["vllm", "serve", "$MODEL"]);
                    check_flags(argv, 3, &VLLM_FLAGS, &VLLM_SWITCHES);
                }
                _ => {
                    assert_eq!(argv[..2], ["trtllm-serve", "$MODEL"]);
                    check_flags(argv, 2, &TRTLLM_FLAGS, &[]);
                }
            }
        }
        let dpa = plans
            .iter()
            .find(|r| r["plan"]["dp_attention"] == true && r["plan"]["tp"] == 8)
            .expect("a TP8 DP-attention plan of DeepSeek-V3");
        let server = &dpa["launch"]["servers"][0];
        if engine == "vllm" {
            let a = server["argv"].to_string();
            assert!(a.contains(r#""--tensor-parallel-size","1""#) && a.contains(r#""--data-parallel-size","8""#), "{a}");
        } else {
            assert!(server["config_file"][1].as_str().is_some_and(|y| y.contains("enable_attention_dp: true")), "{server}");
        }
    }
}

/// The user's question in one command: the best plan with its interval, ties (what separates
/// them), why that concurrency, and a launchable sglang command.
#[test]
fn rank_answers_with_an_interval_ties_the_concurrency_and_a_launch_command() {
    let (code, out, err) = servetune(&["plan", "--model", "qwen3-235b-a22b", "--gpu", "h100-sxm", "--gpus", "8", "--rank"]);
    assert_eq!(code, 0, "{err}");
    let answer = out.lines().position(|l| l.starts_with("answer: ")).expect("an answer line");
    assert_eq!(answer, 1, "the answer comes right after the title:\n{out}");
    assert!(out.contains("output tok/s a benchmark client would measure"), "{out}");
    assert!(out.contains("80% interval") && out.contains("validation test-set cases"), "{out}");
    assert!(out.lines().nth(3).is_some_and(|l| l.trim_start().starts_with("concurrency ")), "why that concurrency:\n{out}");
    assert!(
        out.contains("CUDA_VISIBLE_DEVICES=") && out.contains("python -m sglang.launch_server --model-path Qwen/Qwen3-235B-A22B"),
        "{out}"
    );
    assert!(!out.contains("step time by term (ms)"), "the step-time table is behind --explain:\n{out}");
    let plans = ranked(&["--model", "qwen3-235b-a22b", "--gpu", "h100-sxm", "--gpus", "8"]);
    let top = plans[0]["output_tokens_per_s"].as_f64().expect("rate");
    let bar = plans[0]["interval"]["median_abs_error"].as_f64().expect("median error");
    for p in &plans {
        let rate = p["output_tokens_per_s"].as_f64().expect("rate");
        assert_eq!(p["tied_with_best"].as_bool(), Some(top / rate - 1.0 <= bar), "{p}");
        assert!(p["output_tokens_per_s_low"].as_f64() < Some(rate) && p["output_tokens_per_s_high"].as_f64() > Some(rate), "{p}");
    }
    if plans.iter().skip(1).any(|p| p["tied_with_best"] == true) {
        assert!(out.contains("tied (within the model's median error") && out.contains("servetune bench"), "{out}");
    }
}

/// A best plan at the end of `--concurrency`'s range is searched further, up to the KV cache.
#[test]
fn a_best_plan_at_the_end_of_the_asked_range_is_searched_further_and_says_so() {
    let mut args = QWEN.to_vec();
    args[7] = "1,8";
    let plans = ranked(&args);
    assert!(plans[0]["concurrency"].as_u64() > Some(8), "{}", plans[0]);
    assert!(plans[0]["searched_up_to"].as_u64() > Some(8));
    let mut all = vec!["plan", "--rank"];
    all.extend_from_slice(&args);
    let (code, out, err) = servetune(&all);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("sat at the end of the asked range (--concurrency up to 8)"), "{out}");
}

fn mode(p: &Path) -> u32 {
    std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).expect("metadata").permissions()) & 0o777
}

#[test]
fn emit_launch_writes_one_executable_script_per_ranked_plan_and_refuses_a_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let out_dir = dir.path().join("new/launch");
    let d = out_dir.to_string_lossy().to_string();
    let mut args = vec!["plan", "--rank", "--top", "3", "--emit-launch", &d];
    args.extend_from_slice(&QWEN);
    let (code, _, err) = servetune(&args);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("wrote 3 launch scripts to"), "{err}");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&out_dir).expect("dir").map(|e| e.expect("entry").path()).collect();
    files.sort();
    assert_eq!(files.len(), 3, "{files:?}");
    assert!(files[0].file_name().is_some_and(|n| n.to_string_lossy().starts_with("01-tp")), "{files:?}");
    for f in &files {
        assert_eq!(mode(f), 0o755, "{}", f.display());
        let text = std::fs::read_to_string(f).expect("script");
        assert!(text.starts_with("#!/usr/bin/env bash\n# servetune plan: "), "{text}");
        assert!(text.contains("MODEL=\"${MODEL:-Qwen/Qwen3-235B-A22B}\"") && text.contains("--model-path \"$MODEL\""), "{text}");
        let syntax = Command::new("bash").arg("-n").arg(f).output().expect("bash -n");
        assert!(syntax.status.success(), "{}: {}", f.display(), String::from_utf8_lossy(&syntax.stderr));
    }
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").expect("write");
    let f = file.to_string_lossy().to_string();
    let mut args = vec!["plan", "--rank", "--emit-launch", &f];
    args.extend_from_slice(&QWEN);
    let (code, _, err) = servetune(&args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("this is a file, not a directory"), "{err}");
    let (code, _, err) = servetune(&["plan", "--emit-launch", &d, "--model", "qwen3-235b-a22b", "--gpu", "h100-sxm"]);
    assert_eq!(code, 2, "--emit-launch needs --rank: {err}");
    assert!(err.contains("--rank"), "{err}");
}

/// A second ranking into the same folder removes the first one's scripts that it does not
/// rewrite (and nothing of the user's); a script path that is a link, or that another output
/// names, is refused before anything is written or removed.
#[test]
fn emit_launch_replaces_an_earlier_ranking_and_never_writes_through_a_link_or_over_another_output() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path().join("launch");
    let ds = d.to_string_lossy().to_string();
    let run = |top: &str, extra: &[&str]| {
        let mut args = vec!["plan", "--rank", "--top", top, "--emit-launch", &ds];
        args.extend_from_slice(extra);
        args.extend_from_slice(&QWEN);
        servetune(&args)
    };
    let listing = || {
        let mut v: Vec<String> =
            std::fs::read_dir(&d).expect("dir").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    };
    let (code, _, err) = run("3", &[]);
    assert_eq!(code, 0, "{err}");
    let first = listing();
    assert_eq!(first.len(), 3, "{first:?}");
    std::fs::write(d.join("05-mine.sh"), "#!/bin/sh\necho mine\n").expect("write");
    std::fs::write(d.join("notes.txt"), "keep").expect("write");

    // A link planted at the second script's path: refused before anything is written or
    // removed; the link's target, the first script and the third (stale for a top 2) stay.
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").expect("write");
    let second = d.join(&first[1]);
    std::fs::remove_file(&second).expect("rm");
    std::os::unix::fs::symlink(&victim, &second).expect("link");
    std::fs::write(d.join(&first[0]), "edited").expect("write");
    let json = dir.path().join("out.json");
    let (code, _, err) = run("2", &["--json", &json.to_string_lossy()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is a symbolic link"), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "precious");
    assert_eq!(std::fs::read_to_string(d.join(&first[0])).expect("first"), "edited", "nothing rewritten");
    assert!(d.join(&first[2]).exists(), "nothing removed");
    assert!(!json.exists(), "--json not written");
    std::fs::remove_file(&second).expect("rm link");

    let (code, _, err) = run("1", &[]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("wrote 1 launch script to") && err.contains("(removed 1 script of an earlier ranking)"), "{err}");
    assert_eq!(listing(), [first[0].clone(), "05-mine.sh".into(), "notes.txt".into()], "the user's files stay");

    // --json naming the script the ranking writes: refused before either is written.
    let script = d.join(&first[0]);
    std::fs::remove_file(&script).expect("rm");
    let js = script.to_string_lossy().to_string();
    let (code, _, err) = run("1", &["--json", &js]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("both name"), "{err}");
    assert!(!script.exists(), "nothing written");
}

/// The committed interval table is what `plan --validate --write-intervals` computes from the
/// model as it is: a model change that moves the residuals fails here until the table is
/// regenerated with the command in the error.
#[test]
fn the_committed_interval_table_matches_a_recomputation() {
    let dir = tempfile::tempdir().expect("tmp");
    let f = dir.path().join("intervals.json");
    let fs = f.to_string_lossy().to_string();
    let (code, _, err) = servetune(&["plan", "--validate", "--write-intervals", &fs]);
    assert_eq!(code, 0, "{err}");
    let fresh: Value = serde_json::from_str(&std::fs::read_to_string(&f).expect("written")).expect("json");
    let committed: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("crates/model/data/validation/intervals.json")).expect("committed table"),
    )
    .expect("json");
    assert_eq!(
        fresh,
        committed,
        "crates/model/data/validation/intervals.json is stale: regenerate it with `{}`",
        servetune_model::interval::COMMAND
    );
}
