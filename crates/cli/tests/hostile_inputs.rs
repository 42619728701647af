//! Hostile inputs, second round: every file input is read with a limit that its error names (exit
//! 2), `bench --dataset` on a FIFO nobody writes to still stops on a signal, a gzip bomb given to
//! `trace` stops at its decompressed-size limit, and a sweep kept beside a full journal is imported
//! by the next `campaign continue` instead of being measured again.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use crate::common::servetune;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Runs `servetune ARGS`; returns (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let out = servetune().args(args).output().expect("run");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A file of `len` bytes that takes no disk space (its size is what a limit checks first).
fn sparse(dir: &Path, name: &str, len: u64) -> PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p).expect("create").set_len(len).expect("set_len");
    p
}

fn mkfifo(p: &Path) {
    assert!(StdCommand::new("mkfifo").arg(p).status().expect("mkfifo").success(), "mkfifo {}", p.display());
}

#[test]
fn trace_vs_plan_json_from_an_endless_device_is_refused_naming_the_flag_and_the_limit() {
    let d = tempfile::tempdir().expect("tmp");
    let trace = sparse(d.path(), "t.json", 10);
    let endless = crate::common::endless_text(d.path(), "plan.json");
    let (code, out, err) = run(&["trace", s(&trace), "--vs-plan-json", s(&endless)]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains(&format!("--vs-plan-json {}: larger than 16 MiB, the most this input may hold", endless.display())), "{err}");
    let (code, out, err) = run(&["trace", s(&trace), "--vs-plan-json", "/dev/zero"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("--vs-plan-json /dev/zero: not UTF-8 text"), "{err}");
}

#[test]
fn bench_dataset_over_its_limit_is_refused_naming_the_flag_and_the_limit() {
    let d = tempfile::tempdir().expect("tmp");
    let big = sparse(d.path(), "huge.jsonl", (1 << 30) + 1);
    let t = Instant::now();
    let (code, out, err) =
        run(&["bench", "--url", "http://127.0.0.1:9", "--concurrency", "1", "--requests", "1", "--dataset", s(&big), "--quiet"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains(&format!("--dataset {}: larger than 1024 MiB, the most this input may hold", big.display())), "{err}");
    assert!(t.elapsed() < Duration::from_secs(20), "the size is checked before reading: {:?}", t.elapsed());
}

#[test]
fn bench_tokenizer_over_its_limit_is_refused_naming_the_flag_and_the_limit() {
    let d = tempfile::tempdir().expect("tmp");
    let big = sparse(d.path(), "tokenizer.json", (256 << 20) + 1);
    let (code, out, err) =
        run(&["bench", "--url", "http://127.0.0.1:9", "--concurrency", "1", "--requests", "1", "--tokenizer", s(&big), "--quiet"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains(&format!("--tokenizer {}: larger than 256 MiB, the most this input may hold", big.display())), "{err}");
}

/// Whether a thread of `pid` waits in the kernel for a FIFO's other end (an `open` blocked on it).
fn waits_on_a_fifo(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().any(|t| std::fs::read_to_string(t.path().join("wchan")).is_ok_and(|w| w.contains("wait_for_partner")))
}

/// `bench --dataset FIFO` with nobody writing: `signal` while it waits ends it at once with
/// 128 + the signal's number and says that nothing was measured.
fn dataset_fifo_stopped_by(signal: &str, code: i32) {
    let d = tempfile::tempdir().expect("tmp");
    let fifo = d.path().join("prompts.jsonl");
    mkfifo(&fifo);
    let bin = assert_cmd::cargo::cargo_bin("servetune");
    let child = StdCommand::new(bin)
        .args(["bench", "--url", "http://127.0.0.1:9", "--concurrency", "1", "--requests", "1", "--dataset", s(&fifo), "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let t = Instant::now();
    while !waits_on_a_fifo(child.id()) {
        assert!(t.elapsed() < Duration::from_secs(20), "{signal}: bench never opened the FIFO");
        std::thread::sleep(Duration::from_millis(20));
    }
    let sent = Instant::now();
    assert!(StdCommand::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().expect("kill").success());
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(sent.elapsed() < Duration::from_secs(10), "{signal}: it took {:?} to stop (the FIFO deadline is 30 s)", sent.elapsed());
    assert_eq!(out.status.code(), Some(code), "{signal}: {err}");
    assert!(err.contains(&format!("stopped by SIG{signal} while preparing")) && err.contains("nothing was measured"), "{signal}: {err}");
}

#[test]
fn bench_dataset_fifo_without_a_writer_stops_on_sigterm_sigint_and_sighup() {
    dataset_fifo_stopped_by("TERM", 143);
    dataset_fifo_stopped_by("INT", 130);
    dataset_fifo_stopped_by("HUP", 129);
}

/// Gzips `parts` (written in order, `repeat` times the middle one) with the system's gzip.
fn gzip(path: &Path, head: &[u8], middle: &[u8], repeat: usize, tail: &[u8]) {
    let f = std::fs::File::create(path).expect("create");
    let mut gz = StdCommand::new("gzip").arg("-c").stdin(Stdio::piped()).stdout(f).spawn().expect("gzip");
    {
        let mut w = gz.stdin.take().expect("stdin");
        w.write_all(head).expect("head");
        for _ in 0..repeat {
            w.write_all(middle).expect("middle");
        }
        w.write_all(tail).expect("tail");
    }
    assert!(gz.wait().expect("gzip").success());
}

#[test]
fn a_gzip_bomb_trace_stops_at_the_decompressed_size_limit() {
    let d = tempfile::tempdir().expect("tmp");
    // 20 MB of white space inside the events array: valid JSON to the scanner until the limit.
    let bomb = d.path().join("bomb.json.gz");
    gzip(&bomb, br#"{"traceEvents":["#, &[b' '; 1 << 20], 20, b"]}");
    let gz_len = std::fs::metadata(&bomb).expect("meta").len();
    assert!(gz_len < 1 << 20, "a bomb: {gz_len} bytes that inflate to 20 MiB");
    let (code, out, err) = run(&["trace", s(&bomb), "--max-json-mb", "8"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains(&format!("{}: once decompressed it holds more than 8 MiB of JSON, the limit for this file", bomb.display()))
            && err.contains("--max-json-mb"),
        "{err}"
    );
    let (code, _, err) = run(&["trace", s(&bomb), "--max-json-mb", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--max-json-mb 0"), "{err}");
}

#[test]
fn a_trace_event_inflated_to_megabytes_is_refused_not_held() {
    let d = tempfile::tempdir().expect("tmp");
    let bomb = d.path().join("one-event.json.gz");
    gzip(&bomb, br#"{"traceEvents":[{"ph":"X","cat":"kernel","name":""#, &[b'a'; 1 << 20], 20, br#"","ts":1,"dur":1}]}"#);
    let (code, out, err) = run(&["trace", s(&bomb)]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("is larger than 1 MiB, the most one traceEvents entry may hold") && err.contains("not a Kineto trace"), "{err}");
}

/// The state of experiment 1 in the campaign at `dir`.
fn first_state(dir: &Path) -> Option<String> {
    rusqlite::Connection::open_with_flags(dir.join("journal.sqlite"), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .ok()?
        .query_row("SELECT state FROM experiments WHERE id = 1", [], |r| r.get(0))
        .ok()
}

/// A sim campaign at `dir` whose `continue` was killed (-9) while benchmarking experiment 1: the
/// step left as a full disk leaves it, benchmarking with its owner gone.
fn campaign_killed_mid_benchmark(dir: &Path) {
    crate::campaign::sim_campaign(dir, "proxmox-lxc-8gpu");
    let bin = assert_cmd::cargo::cargo_bin("servetune");
    let mut child =
        StdCommand::new(bin).args(["campaign", "continue", s(dir)]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
    let t = Instant::now();
    while first_state(dir).as_deref() != Some("benchmarking") {
        assert!(t.elapsed() < Duration::from_secs(60), "the step never reached benchmarking: {:?}", first_state(dir));
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("kill -9");
    child.wait().expect("reap");
}

#[test]
fn a_sweep_kept_beside_a_full_journal_is_imported_by_the_next_continue_not_rerun() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    campaign_killed_mid_benchmark(&dir);
    let db = || rusqlite::Connection::open_with_flags(dir.join("journal.sqlite"), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).expect("db");
    // The sweep the killed continue could not record is the kept file.
    let kept = serde_json::json!({
        "points": [{
            "concurrency": 4, "completed": 32, "failed": 0, "output_tok_s": 4321.5,
            "ttft_p50_ms": 12.0, "ttft_p99_ms": 30.0, "tpot_p50_ms": 2.0, "tpot_p90_ms": 2.5, "tpot_p99_ms": 3.0,
            "slos_met": null, "server_max_running": null, "server_max_queued": null, "server_max_kv_usage": null
        }],
        "knee_concurrency": null, "knee_evidence": null, "partial": false, "error_example": null
    });
    let file = dir.join("exp-1.result.json");
    std::fs::write(&file, kept.to_string()).expect("write the kept sweep");
    let (code, out, err) = run(&["campaign", "continue", s(&dir)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("experiment 1: imported the sweep kept in {}", file.display())), "{out}{err}");
    assert!(!out.contains("re-queued") && !out.contains("attempt 2"), "the step was run again: {out}");
    assert_eq!(first_state(&dir).as_deref(), Some("done"));
    let result: String = db().query_row("SELECT result FROM experiments WHERE id = 1", [], |r| r.get(0)).expect("result");
    let result: serde_json::Value = serde_json::from_str(&result).expect("json");
    assert_eq!(result["points"][0]["output_tok_s"], 4321.5, "{result}");
    assert!(!file.exists(), "the imported file is removed");
}

#[test]
fn a_kept_sweep_that_is_not_a_summary_is_named_and_the_step_rerun() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    campaign_killed_mid_benchmark(&dir);
    let file = dir.join("exp-1.result.json");
    std::fs::write(&file, "{\"points\": \"garbage\"}").expect("write");
    let (code, out, err) = run(&["campaign", "continue", s(&dir)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("experiment 1: the kept sweep cannot be imported") && out.contains("not a sweep summary"), "{out}");
    assert!(out.contains("experiment 1 done"), "the step is re-run: {out}");
}

/// An output naming an input file, or two outputs naming one file, is refused before anything
/// runs, and the input is left as it was; an output in a missing folder gets the folder made.
#[test]
fn an_output_that_names_an_input_or_another_output_is_refused_and_the_input_kept() {
    let d = tempfile::tempdir().expect("tmp");
    let cfg = d.path().join("config.json");
    let text = r#"{"model_type":"llama","hidden_size":4096,"num_hidden_layers":32,"vocab_size":128256,"num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":14336}"#;
    std::fs::write(&cfg, text).expect("write");
    let (code, _, err) = run(&["plan", "--model-config", s(&cfg), "--gpu", "h100-sxm", "--gpus", "1", "--json", s(&cfg)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("that is the --model-config file, which writing this output would overwrite"), "{err}");
    assert_eq!(std::fs::read_to_string(&cfg).expect("kept"), text);
    let out = d.path().join("out.md");
    let (code, _, err) =
        run(&["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "1", "--json", s(&out), "--markdown", s(&out)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--json and --markdown both name"), "{err}");
    let dataset = d.path().join("prompts.jsonl");
    std::fs::write(&dataset, "{\"prompt\": \"hi\"}\n").expect("write");
    let (code, _, err) = run(&[
        "bench",
        "--url",
        "http://127.0.0.1:1",
        "--concurrency",
        "1",
        "--requests",
        "1",
        "--dataset",
        s(&dataset),
        "--json",
        s(&dataset),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("that is the --dataset file"), "{err}");
    assert_eq!(std::fs::read_to_string(&dataset).expect("kept"), "{\"prompt\": \"hi\"}\n");
    let nested = d.path().join("new/sub/plan.json");
    let (code, _, err) = run(&["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "1", "--json", s(&nested)]);
    assert_eq!(code, 0, "{err}");
    assert!(nested.is_file(), "{}", nested.display());
    // A folder given for a report file: bad input (exit 2) before the report is printed.
    let (code, out, err) = run(&["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "1", "--markdown", s(d.path())]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--markdown") && err.contains("is a directory; give a file path"), "{err}");
    assert!(out.is_empty(), "nothing printed before the refusal: {out}");
}

/// More requests in flight than the process may open files is refused up front (exit 2, naming
/// the limit and how to raise it): the excess would fail as connect errors blamed on the server.
#[test]
fn bench_concurrency_above_the_open_file_limit_is_refused_naming_ulimit() {
    let bin = env!("CARGO_BIN_EXE_servetune");
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("ulimit -n 256 && exec {bin} bench --url http://127.0.0.1:1 --concurrency 1,1000 --requests 2000"))
        .output()
        .expect("bash runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--concurrency 1000 needs about 1032 open files") && err.contains("may open 256"), "{err}");
    assert!(err.contains("ulimit -n 1032"), "{err}");
}
