//! `servetune campaign` end to end: bad input, the planner on the probe fixtures, a whole campaign
//! on `servetune sim`, `kill -9` at random points, fake servers that fail each way, and a real
//! llama.cpp server.

use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::common::servetune;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(name: &str) -> PathBuf {
    repo().join("crates/probe/tests/fixtures").join(name)
}

/// Runs `servetune campaign ARGS`; returns (exit code, stdout, stderr).
fn campaign(args: &[&str]) -> (i32, String, String) {
    let out = servetune().arg("campaign").args(args).output().expect("run");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A sim campaign on the LXC fixture: a small MoE model, short requests, a low running cap so the
/// planner has steps to take.
pub(crate) fn sim_campaign(dir: &Path, fixture_name: &str) {
    let (code, out, err) = campaign(&[
        "init",
        s(dir),
        "--engine",
        "sim",
        "--model",
        "qwen3-30b-a3b",
        "--goal",
        "output_tok_s>=100000",
        "--probe-root",
        s(&fixture(fixture_name)),
        "--concurrency",
        "4,16,32",
        "--requests",
        "32",
        "--input-len",
        "64",
        "--output-len",
        "16",
        "--set",
        "max_running=4",
    ]);
    assert_eq!(code, 0, "{out}{err}");
}

fn db(dir: &Path) -> Connection {
    Connection::open_with_flags(dir.join("journal.sqlite"), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open journal")
}

fn count(c: &Connection, sql: &str) -> i64 {
    c.query_row(sql, [], |r| r.get(0)).expect(sql)
}

#[test]
fn bad_input_exits_2_naming_the_problem() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    let lxc = fixture("proxmox-lxc-8gpu");
    let base = ["init", s(&dir), "--model", "qwen3-30b-a3b", "--probe-root", s(&lxc)];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        ([&base[..], &["--engine", "nope", "--goal", "output_tok_s>=1"]].concat(), "--engine \"nope\" is unknown"),
        ([&base[..], &["--engine", "sim", "--goal", "fast please"]].concat(), "--goal \"fast please\""),
        ([&base[..], &["--engine", "sim", "--goal", "output_tok_s>=1", "--set", "tp=0"]].concat(), "knob tp=0 is outside its domain"),
        ([&base[..], &["--engine", "sglang", "--goal", "output_tok_s>=1", "--set", "mem_fraction=2"]].concat(), "mem_fraction=2"),
        (vec!["status", s(&dir)], "holds no campaign"),
    ];
    for (args, says) in cases {
        let (code, out, err) = campaign(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let bad = d.path().join("engines.toml");
    std::fs::write(
        &bad,
        "[[engine]]\nname = \"mine\"\nargv = [\"srv\", \"--port\", \"{prot}\"]\nhealth = \"/health\"\ngenerate = \"/v1/completions\"\n",
    )
    .expect("write");
    let (code, _, err) = campaign(&["engines", "--engines", s(&bad)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown placeholder {prot}"), "{err}");
    let (code, out, _) = campaign(&["engines"]);
    assert_eq!(code, 0);
    for e in ["sglang:", "vllm:", "llama-server:", "llama-cpp-python:", "sim:"] {
        assert!(out.contains(e), "{out}");
    }
}

#[test]
fn init_gpu_takes_the_drivers_product_name_and_stores_the_catalog_name() {
    let d = tempfile::tempdir().expect("tmp");
    let lxc = fixture("proxmox-lxc-8gpu");
    for (i, (given, stored)) in
        [("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA GH200 480GB", "gh200-96gb"), ("b200_sxm", "b200"), ("h200", "h200")]
            .into_iter()
            .enumerate()
    {
        let dir = d.path().join(format!("c{i}"));
        let base = ["init", s(&dir), "--engine", "sim", "--model", "qwen3-30b-a3b", "--goal", "output_tok_s>=1", "--probe-root", s(&lxc)];
        let (code, out, err) = campaign(&[&base[..], &["--gpu", given, "--gpus", "1"]].concat());
        assert_eq!(code, 0, "{given}: {out}{err}");
        let settings: String = db(&dir).query_row("SELECT settings FROM campaign", [], |r| r.get(0)).expect("settings");
        let v: serde_json::Value = serde_json::from_str(&settings).expect("settings are JSON");
        assert_eq!(v["gpu"], stored, "{given}: {settings}");
    }
    // A name several entries fit, and a relative the catalog does not hold: exit 2, nothing written.
    for given in ["NVIDIA GH200", "NVIDIA A10G"] {
        let dir = d.path().join("refused");
        let (code, out, err) = campaign(&[
            "init",
            s(&dir),
            "--engine",
            "sim",
            "--model",
            "qwen3-30b-a3b",
            "--goal",
            "output_tok_s>=1",
            "--probe-root",
            s(&lxc),
            "--gpu",
            given,
        ]);
        assert_eq!(code, 2, "{given}: {out}{err}");
        assert!(err.contains(&format!("--gpu {given:?} ")) && err.contains("gh200-144gb"), "{err}");
        assert!(!dir.join("journal.sqlite").exists(), "{given}: a refused init wrote a journal");
    }
}

#[test]
fn journal_refuses_newer_major_and_corrupt_files_without_writing() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    sim_campaign(&dir, "proxmox-lxc-8gpu");
    let (code, _, err) = campaign(&["answer", s(&dir), "7", "--done"]);
    assert_eq!(code, 2);
    assert!(err.contains("no question 7"), "{err}");
    {
        let c = Connection::open(dir.join("journal.sqlite")).expect("open");
        c.execute("UPDATE meta SET value = '2' WHERE key = 'schema_major'", []).expect("bump");
    }
    let (code, _, err) = campaign(&["status", s(&dir)]);
    assert_eq!(code, 2);
    assert!(err.contains("newer servetune") && err.contains(&format!("schema 2.{}", servetune_campaign::journal::SCHEMA_MINOR)), "{err}");
    let path = dir.join("journal.sqlite");
    let mut bytes = std::fs::read(&path).expect("read");
    for b in bytes.iter_mut().skip(4096).take(3000) {
        *b = 0xa5;
    }
    std::fs::write(&path, &bytes).expect("write");
    let (code, _, err) = campaign(&["continue", s(&dir)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("corrupt") && err.contains("integrity check"), "{err}");
    assert_eq!(std::fs::read(&path).expect("read"), bytes, "a corrupt journal must not be written to");
}

#[test]
fn kvm_campaign_asks_about_p2p_first_then_lxc_goes_on_to_runnable_steps() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    sim_campaign(&dir, "proxmox-kvm-8gpu");
    let (code, out, err) = campaign(&["continue", s(&dir)]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("question 1") && out.contains("peer-to-peer"), "{out}");
    assert!(out.contains("plan predicts") && out.contains("output tok/s (+"), "the question carries the predicted gain: {out}");
    assert!(out.contains(&format!("servetune campaign answer {} 1", dir.display())), "{out}");
    let gain: f64 = db(&dir).query_row("SELECT gain FROM questions WHERE id = 1", [], |r| r.get(0)).expect("gain");
    assert!(gain > 1.0, "predicted gain {gain}");
    // Asked again until answered: nothing ran in between.
    assert_eq!(campaign(&["continue", s(&dir)]).0, 3);
    assert_eq!(count(&db(&dir), "SELECT COUNT(*) FROM experiments"), 0);

    let (code, out, _) = campaign(&["probe", s(&dir), "--probe-root", s(&fixture("proxmox-lxc-8gpu"))]);
    assert_eq!(code, 0);
    assert!(out.contains("container lxc, P2P ok"), "{out}");
    assert_eq!(campaign(&["answer", s(&dir), "1", "--done"]).0, 0);
    let (code, _, err) = campaign(&["answer", s(&dir), "1", "--declined"]);
    assert_eq!(code, 2);
    assert!(err.contains("already answered"), "{err}");
    let (code, out, _) = campaign(&["next", s(&dir)]);
    assert_eq!(code, 0);
    assert!(out.starts_with("1. [runnable] baseline"), "{out}");
    assert!(!out.contains("peer-to-peer"), "{out}");
    let (code, out, err) = campaign(&["continue", s(&dir)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("experiment 1 done"), "{out}");
}

#[test]
fn whole_sim_campaign_stops_by_itself_with_a_report_matching_the_journal() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    sim_campaign(&dir, "proxmox-lxc-8gpu");
    let (code, out, err) = campaign(&["continue", s(&dir), "--until-blocked"]);
    assert!(code == 3 || code == 4, "{code}: {out}{err}");
    assert!(out.contains("raise the running-request cap"), "the plateau behind the cap is found: {out}");
    let json = d.path().join("r.json");
    let md = d.path().join("r.md");
    assert_eq!(campaign(&["report", s(&dir), "--json", s(&json), "--markdown", s(&md)]).0, 0);
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("parse");
    let c = db(&dir);
    assert_eq!(r["schema"], "servetune.report/1");
    for (field, state) in [("done", "done"), ("in_progress", "in_progress"), ("not_done", "not_done")] {
        let n = count(&c, &format!("SELECT COUNT(*) FROM tasks WHERE state = '{state}'"));
        assert_eq!(r["counts"][field].as_i64(), Some(n), "{field}");
    }
    let done = count(&c, "SELECT COUNT(*) FROM experiments WHERE state = 'done'");
    assert!(done >= 2, "baseline and at least one step: {done}");
    assert_eq!(r["counts"]["experiments"]["done"].as_i64(), Some(done));
    assert_eq!(r["results"].as_array().map(Vec::len), Some(count(&c, "SELECT COUNT(*) FROM experiments") as usize));
    assert_eq!(r["launch_commands"].as_array().map(Vec::len), Some(done as usize));
    let text = std::fs::read_to_string(&md).expect("md");
    assert!(text.contains(&format!("**{} done, 0 in progress", r["counts"]["done"])), "{text}");
    assert!(text.contains("## Working launch commands") && text.contains("sim --listen 127.0.0.1:"), "{text}");
    // Every experiment's bench JSON sits next to the journal.
    let mut st = c.prepare("SELECT bench_path FROM experiments WHERE state = 'done'").expect("sql");
    for p in st.query_map([], |r| r.get::<_, String>(0)).expect("rows") {
        let p = PathBuf::from(p.expect("path"));
        assert_eq!(p.parent(), Some(dir.as_path()));
        assert!(p.is_file(), "{}", p.display());
    }
}

/// (events as (id, to_state), experiments as (id, state)).
type Snap = (Vec<(i64, String)>, Vec<(i64, String)>);

fn snapshot(dir: &Path) -> Snap {
    let c = db(dir);
    let ok: String = c.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("integrity");
    assert_eq!(ok, "ok");
    let rows = |sql: &str| -> Vec<(i64, String)> {
        let mut st = c.prepare(sql).expect(sql);
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).expect(sql).collect::<Result<_, _>>().expect(sql)
    };
    (rows("SELECT id, to_state FROM events ORDER BY id"), rows("SELECT id, state FROM experiments ORDER BY id"))
}

#[test]
fn kill_9_at_random_points_loses_nothing_and_resumes_the_stale_step() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    sim_campaign(&dir, "proxmox-lxc-8gpu");
    let bin = assert_cmd::cargo::cargo_bin("servetune");
    let mut seed: u64 = 0x5eed_1234;
    let mut prev = snapshot(&dir);
    let (mut kills, mut killed_mid_step) = (0, 0);
    let t = Instant::now();
    while kills < 20 {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let after = Duration::from_millis(100 + (seed >> 33) % 1400);
        let mut child = StdCommand::new(&bin)
            .args(["campaign", "continue", s(&dir), "--until-blocked"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        std::thread::sleep(after);
        if child.try_wait().expect("wait").is_some() {
            break; // it finished before the kill: the campaign is over
        }
        child.kill().expect("kill -9");
        child.wait().expect("reap");
        kills += 1;
        let now = snapshot(&dir);
        assert!(now.0.len() >= prev.0.len() && now.0[..prev.0.len()] == prev.0[..], "committed events were lost after kill {kills}");
        for (id, state) in &prev.1 {
            let still = now.1.iter().find(|(i, _)| i == id).map(|(_, s)| s.as_str());
            assert!(still.is_some(), "experiment {id} vanished");
            if matches!(state.as_str(), "done" | "failed" | "skipped") {
                assert_eq!(still, Some(state.as_str()), "experiment {id} left its final state");
            }
        }
        if now.1.iter().any(|(_, s)| matches!(s.as_str(), "launching" | "ready" | "benchmarking")) {
            killed_mid_step += 1;
        }
        prev = now;
        assert!(t.elapsed() < Duration::from_secs(150), "kill loop took too long");
    }
    assert!(kills >= 20, "only {kills} kills before the campaign ended; the campaign has too little work for the test");
    assert!(killed_mid_step >= 1, "no kill landed inside a running step");
    // The next continue resumes the stale step and the campaign ends by itself.
    let (code, out, err) = campaign(&["continue", s(&dir), "--until-blocked"]);
    assert!(code == 3 || code == 4, "{code}: {out}{err}");
    let fin = snapshot(&dir);
    assert!(fin.0[..prev.0.len()] == prev.0[..]);
    assert!(fin.1.iter().all(|(_, s)| matches!(s.as_str(), "done" | "failed" | "skipped")), "{:?}", fin.1);
    let stale = count(&db(&dir), "SELECT COUNT(*) FROM events WHERE detail LIKE 'stale:%'");
    assert!(stale >= 1, "no stale step was re-queued");
    eprintln!("kill test: {kills} kills, {killed_mid_step} inside a step, {stale} stale steps resumed, 0 records lost");
}

fn fake_campaign(dir: &Path, tmp: &Path) {
    let script = repo().join("crates/campaign/tests/fake_server.py");
    let engines = tmp.join("engines.toml");
    std::fs::write(
        &engines,
        format!(
            "[[engine]]\nname = \"fake\"\nargv = [\"python3\", {:?}, \"--port\", \"{{port}}\"]\nhealth = \"/health\"\ngenerate = \"/v1/completions\"\nready_timeout_s = 4\nknobs = [{{ name = \"mode\", domain = {{ choice = [\"oom\", \"never_ready\", \"port_in_use\", \"crash_mid_bench\", \"never_generates\"] }}, args = [\"--mode\", \"{{value}}\"] }}]\n",
            s(&script)
        ),
    )
    .expect("engines");
    let (code, out, err) = campaign(&[
        "init",
        s(dir),
        "--engine",
        "fake",
        "--engines",
        s(&engines),
        "--model",
        "fake",
        "--goal",
        "output_tok_s>=1",
        "--probe-root",
        s(&fixture("no-gpu")),
        "--concurrency",
        "2",
        "--requests",
        "20",
        "--input-len",
        "8",
        "--output-len",
        "1",
        "--request-timeout",
        "5s",
    ]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn fake_servers_failing_each_way_are_classified_with_evidence_and_a_corrective_step() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    fake_campaign(&dir, d.path());
    let cases = [
        ("oom", "out_of_memory", "CUDA out of memory"),
        ("never_ready", "timeout", "not ready before the time limit"),
        ("port_in_use", "port_in_use", "Address already in use"),
        ("crash_mid_bench", "crash", "signal 9"),
        ("never_generates", "timeout", "not ready before the time limit"),
    ];
    for (mode, _, _) in cases {
        assert_eq!(campaign(&["add", s(&dir), "--set", &format!("mode={mode}")]).0, 0);
    }
    let (code, _, err) = campaign(&["add", s(&dir), "--set", "mode=oom"]);
    assert_eq!(code, 2, "the same configuration is not queued twice");
    assert!(err.contains("--force"), "{err}");
    for (i, (mode, kind, evidence)) in cases.iter().enumerate() {
        let t = Instant::now();
        let (code, out, err) = campaign(&["continue", s(&dir)]);
        if *mode == "never_generates" {
            // The template's ready_timeout_s is 4 s: the one-token check ends by it, not after a
            // fixed 30 s wait of its own (a generous bound on a shared machine).
            assert!(t.elapsed() < Duration::from_secs(25), "{mode}: held {:?} past its 4 s ready deadline", t.elapsed());
        }
        assert_eq!(code, 0, "{mode}: {out}{err}");
        assert!(out.contains(&format!("failed: {kind}")), "{mode}: {out}");
        assert!(out.contains("corrective step:"), "{mode}: {out}");
        let f: String = db(&dir).query_row("SELECT failure FROM experiments WHERE id = ?1", [i as i64 + 1], |r| r.get(0)).expect("failure");
        let f: serde_json::Value = serde_json::from_str(&f).expect("json");
        assert_eq!(f["kind"], *kind, "{mode}");
        let ev = f["evidence"].to_string();
        assert!(ev.contains(evidence), "{mode}: evidence {ev}");
        assert!(!f["corrective"].as_str().unwrap_or("").is_empty(), "{mode}");
        if *mode == "port_in_use" {
            assert!(out.contains("retrying on port"), "a taken port gets one more try on a new port: {out}");
        }
    }
    // Nothing succeeded: the next step is a person fixing the cause, with the evidence.
    let (code, out, _) = campaign(&["continue", s(&dir)]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("failed") && out.contains("Corrective step"), "{out}");
}

#[test]
fn llama_cpp_server_two_configurations_benchmarked_torn_down_and_fingerprinted() {
    let venv = std::env::var_os("SERVETUNE_TEST_VENV").map(PathBuf::from).unwrap_or_else(|| repo().join(".venv-test"));
    let py = venv.join("bin/python");
    assert!(py.exists(), "{} is missing: run scripts/setup-test-env", py.display());
    let d = tempfile::tempdir().expect("tmp");
    let model = d.path().join("tiny.gguf");
    assert!(StdCommand::new(&py).arg(repo().join("scripts/make-tiny-gguf.py")).arg(&model).status().expect("gguf").success());
    let dir = d.path().join("c");
    let python = format!("python={}", s(&py));
    let (code, out, err) = campaign(&[
        "init",
        s(&dir),
        "--engine",
        "llama-cpp-python",
        "--model",
        s(&model),
        "--goal",
        "output_tok_s>=100000",
        "--set",
        &python,
        "--set",
        "n_ctx=2048",
        "--probe-root",
        s(&fixture("no-gpu")),
        "--concurrency",
        "1,2",
        "--requests",
        "4",
        "--input-len",
        "16",
        "--output-len",
        "8",
        "--secret-env",
        "SERVETUNE_TEST_SECRET",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    for n in ["1", "2"] {
        assert_eq!(campaign(&["add", s(&dir), "--set", &format!("n_threads={n}")]).0, 0);
    }
    for _ in 0..2 {
        let out = servetune()
            .env("SERVETUNE_TEST_SECRET", "hunter2")
            .env("HF_TOKEN", "hf_x")
            .args(["campaign", "continue", s(&dir)])
            .output()
            .expect("run");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains("done: best") && text.contains("is free"), "{text}");
    }
    let c = db(&dir);
    let mut st = c.prepare("SELECT e.knobs, e.result, f.body FROM experiments e JOIN fingerprints f ON f.id = e.fingerprint WHERE e.state = 'done' ORDER BY e.id").expect("sql");
    let rows: Vec<(String, String, String)> =
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).expect("rows").collect::<Result<_, _>>().expect("rows");
    assert_eq!(rows.len(), 2, "both configurations done");
    for (i, (knobs, result, fp)) in rows.iter().enumerate() {
        assert!(knobs.contains(&format!("\"n_threads\":\"{}\"", i + 1)), "{knobs}");
        let r: serde_json::Value = serde_json::from_str(result).expect("result");
        assert!(r["points"][0]["output_tok_s"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
        let fp: serde_json::Value = serde_json::from_str(fp).expect("fingerprint");
        let argv: Vec<String> = serde_json::from_value(fp["argv"].clone()).expect("argv");
        assert!(argv.windows(2).any(|w| w[0] == "--n_threads" && w[1] == (i + 1).to_string()), "{argv:?}");
        assert!(fp["engine_version"].as_str().is_some_and(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit())), "{fp}");
        assert_eq!(fp["env"]["HF_TOKEN"], "<redacted>");
        assert!(!fp.to_string().contains("hunter2") && !fp.to_string().contains("hf_x"), "{fp}");
        let port: u16 = argv.windows(2).find(|w| w[0] == "--port").and_then(|w| w[1].parse().ok()).expect("port");
        assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(), "port {port} still taken after teardown");
    }
}

/// Sends `signal` to `campaign continue` while it benchmarks: the server is torn down, the step is
/// recorded as interrupted with its partial bench JSON kept, the exit code is 128 + the signal's
/// number, and the next `continue` runs the step again.
fn stopped_by(signal: &str, code: i32) {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    sim_campaign(&dir, "proxmox-lxc-8gpu");
    let bin = assert_cmd::cargo::cargo_bin("servetune");
    let child =
        StdCommand::new(&bin).args(["campaign", "continue", s(&dir)]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawn");
    let t = Instant::now();
    let state = |c: &Connection| -> Option<String> { c.query_row("SELECT state FROM experiments WHERE id = 1", [], |r| r.get(0)).ok() };
    while state(&db(&dir)).as_deref() != Some("benchmarking") {
        assert!(t.elapsed() < Duration::from_secs(30), "the step never reached benchmarking: {:?}", state(&db(&dir)));
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = StdCommand::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().expect("kill");
    assert!(st.success());
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(code), "{signal}: {}", String::from_utf8_lossy(&out.stdout));
    let c = db(&dir);
    assert_eq!(state(&c).as_deref(), Some("interrupted"), "{signal}");
    let bench: Option<String> = c.query_row("SELECT bench_path FROM experiments WHERE id = 1", [], |r| r.get(0)).expect("bench path");
    assert!(bench.is_some_and(|p| Path::new(&p).is_file()), "{signal}: the partial sweep's bench JSON is kept");
    let argv: String = c
        .query_row("SELECT f.body FROM experiments e JOIN fingerprints f ON f.id = e.fingerprint WHERE e.id = 1", [], |r| r.get(0))
        .expect("fp");
    let listen =
        argv.split("127.0.0.1:").nth(1).and_then(|r| r.split('"').next()).and_then(|p| p.parse::<u16>().ok()).expect("port in argv");
    assert!(std::net::TcpListener::bind(("127.0.0.1", listen)).is_ok(), "port {listen} still taken");
    let (code, out, err) = campaign(&["continue", s(&dir)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("experiment 1 was interrupted: re-queued") && out.contains("experiment 1 done"), "{out}");
}

#[test]
fn ctrl_c_tears_the_server_down_and_records_the_step_as_interrupted() {
    stopped_by("INT", 130);
}

#[test]
fn sigterm_and_sighup_stop_continue_as_ctrl_c_does_keeping_the_partial_sweep() {
    stopped_by("TERM", 143);
    stopped_by("HUP", 129);
}

#[test]
fn every_campaign_command_has_help_with_an_example() {
    for sub in ["init", "probe", "fabric", "status", "next", "continue", "answer", "add", "report", "note", "engines"] {
        let out = servetune().args(["campaign", sub, "--help"]).output().expect("run");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{sub}");
        assert!(text.contains("servetune campaign "), "{sub}: {text}");
        assert!(text.contains("Example"), "{sub}: {text}");
    }
}

/// A copy of a committed fixture journal (`crates/campaign/tests/fixtures/NAME`) in a temp dir, so
/// opening it writes nothing into the repository.
fn fixture_journal(tmp: &Path, name: &str) -> PathBuf {
    let dir = tmp.join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::copy(repo().join("crates/campaign/tests/fixtures").join(name).join("journal.sqlite"), dir.join("journal.sqlite"))
        .expect("copy fixture journal");
    dir
}

#[test]
fn report_of_a_fixed_journal_snapshots_markdown_and_json() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = fixture_journal(d.path(), "report-lxc");
    let (md, js, html) = (d.path().join("r.md"), d.path().join("r.json"), d.path().join("r.html"));
    let (code, out, err) = campaign(&["report", s(&dir), "--markdown", s(&md), "--json", s(&js), "--html", s(&html)]);
    assert_eq!(code, 0, "{out}{err}");
    let md = std::fs::read_to_string(&md).expect("md");
    let js: serde_json::Value = serde_json::from_slice(&std::fs::read(&js).expect("json")).expect("parse");
    insta::assert_snapshot!("report_lxc_markdown", md);
    insta::assert_json_snapshot!("report_lxc_json", js);
    // The same report data feeds all three: the headline and each experiment appear in the HTML.
    let html = std::fs::read_to_string(&html).expect("html");
    assert!(html.contains(&report_html_escape(js["standing"]["headline"].as_str().expect("headline"))), "headline in the HTML");
    for e in js["results"].as_array().expect("results") {
        assert!(html.contains(&format!("experiment {}", e["experiment"])), "experiment {} in the HTML", e["experiment"]);
    }
}

fn report_html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&#39;")
}

#[test]
fn report_numbers_name_their_journal_records() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = fixture_journal(d.path(), "report-kvm");
    let js = d.path().join("r.json");
    let html = d.path().join("r.html");
    let (code, out, err) = campaign(&["report", s(&dir), "--json", s(&js), "--html", s(&html)]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&js).expect("json")).expect("parse");
    let html = std::fs::read_to_string(&html).expect("html");
    let c = db(&dir);
    // Every plotted point carries its experiment id in a tooltip, and that experiment is in the journal.
    for curve in v["curves"].as_array().expect("curves") {
        let id = curve["experiment"].as_i64().expect("id");
        assert_eq!(count(&c, &format!("SELECT count(*) FROM experiments WHERE id = {id} AND state = 'done'")), 1);
        for p in curve["points"].as_array().expect("points") {
            let tip = format!(
                "{:.1} output tok/s at concurrency {} (experiment {id})</title>",
                p["output_tok_s"].as_f64().expect("tok/s"),
                p["concurrency"]
            );
            assert!(html.contains(&tip), "missing tooltip {tip}");
        }
    }
    // Every warning names its finding rows (a repeated finding is one line naming each).
    for w in v["warnings"].as_array().expect("warnings") {
        let id = w["finding"].as_i64().expect("finding id");
        assert_eq!(count(&c, &format!("SELECT count(*) FROM findings WHERE id = {id}")), 1);
        let ids: Vec<String> = w["findings"].as_array().expect("findings").iter().map(|x| x.to_string()).collect();
        assert!(ids.contains(&id.to_string()), "{w}");
        let plural = if ids.len() > 1 { "s" } else { "" };
        assert!(html.contains(&format!(">finding{plural} {}", ids.join(", "))), "finding {id} named in the HTML");
    }
    // The best point is the highest measured one.
    let best = v["standing"]["best"]["output_tok_s"].as_f64().expect("best");
    let max = v["curves"]
        .as_array()
        .expect("curves")
        .iter()
        .flat_map(|c| c["points"].as_array().expect("pts").iter())
        .map(|p| p["output_tok_s"].as_f64().unwrap_or(0.0))
        .fold(0.0, f64::max);
    assert!(best <= max && best > 0.0, "best {best}, max {max}");
}

/// `servetune fabric p2p --backend sim --sim-link LINK --json FILE` over 8 simulated GPUs.
fn sim_fabric(file: &Path, link: &str) {
    let out = servetune()
        .args(["fabric", "p2p", "--backend", "sim", "--sim-link", link, "--max-size", "4M", "--json"])
        .arg(file)
        .output()
        .expect("fabric");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_recorded_fabric_document_is_drawn_per_pair_and_names_its_record() {
    let d = tempfile::tempdir().expect("tmp");
    // A journal written before the fabrics table existed (schema 1.0) takes the record.
    let dir = fixture_journal(d.path(), "report-kvm");
    let minor =
        |dir: &Path| -> String { db(dir).query_row("SELECT value FROM meta WHERE key = 'schema_minor'", [], |r| r.get(0)).expect("minor") };
    assert_eq!(minor(&dir), "0");
    let f = d.path().join("p2p.json");
    sim_fabric(&f, "pcie-host-staged");
    let (code, out, err) = campaign(&["fabric", s(&dir), s(&f)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("fabric record 1: 8 GPU(s) measured (sim backend)") && out.contains("vm kvm"), "{out}");
    // Opening it brought it to this binary's minor version (the fabrics table, the Slurm columns).
    assert_eq!(minor(&dir), servetune_campaign::journal::SCHEMA_MINOR.to_string());
    // The same document again is the same record.
    assert!(campaign(&["fabric", s(&dir), s(&f)]).1.contains("fabric record 1:"));
    let env: i64 =
        db(&dir).query_row("SELECT id FROM fingerprints WHERE kind = 'probe' ORDER BY id DESC LIMIT 1", [], |r| r.get(0)).expect("env");
    assert_eq!(count(&db(&dir), &format!("SELECT COUNT(*) FROM fabrics WHERE env_fingerprint = {env}")), 1);

    let (js, md, html) = (d.path().join("r.json"), d.path().join("r.md"), d.path().join("r.html"));
    assert_eq!(campaign(&["report", s(&dir), "--json", s(&js), "--markdown", s(&md), "--html", s(&html)]).0, 0);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&js).expect("json")).expect("parse");
    assert_eq!(v["schema_minor"].as_u64(), Some(u64::from(servetune_campaign::report::SCHEMA_MINOR)));
    let fabric = &v["fabric"][0];
    assert_eq!((fabric["record"].as_i64(), fabric["fingerprint"].as_i64()), (Some(1), Some(env)));
    assert_eq!(fabric["environment"], "kvm guest, no P2P");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&f).expect("doc")).expect("doc json");
    let bw = fabric["bandwidth"]["values"][0][1].as_f64().expect("GPU0 to GPU1");
    let want = doc["matrices"]
        .as_array()
        .expect("matrices")
        .iter()
        .find(|m| m["title"].as_str().is_some_and(|t| t.starts_with("Unidirectional P2P=Enabled")))
        .and_then(|m| m["values"][0][1].as_f64())
        .expect("the document's GPU0 to GPU1");
    assert_eq!(bw, want, "the report draws the recorded document's numbers");
    // Host-staged copies of 4 MiB over the catalog's link: 13.3 us + 4 MiB / 29.4 GB/s.
    let bytes = 4.0 * 1024.0 * 1024.0;
    let staged = bytes / (13.3e-6 + bytes / 29.4e9) / 1e9;
    assert!((bw - staged).abs() / staged < 0.01, "{bw} GB/s against {staged:.2}");
    assert_eq!(fabric["latency"]["unit"], "us");
    let md = std::fs::read_to_string(&md).expect("md");
    assert!(md.contains("### GPU-to-GPU bandwidth and latency: kvm guest, no P2P (fabric record 1)"), "{md}");
    assert!(md.contains("| from \\ to | GPU0 | GPU1 |"), "{md}");
    let html = std::fs::read_to_string(&html).expect("html");
    assert!(html.contains(r#"data-chart="fabric-bandwidth""#) && html.contains(r#"data-chart="fabric-latency""#));
    assert!(html.contains(&format!("GPU0 to GPU1: Unidirectional Bandwidth (4 MiB), staged through host memory (no P2P) {bw:.1} GB/s (fabric record 1, environment fingerprint {env})</title>")), "cell tooltips name the record");
}

#[test]
fn a_recorded_allreduce_document_is_reported_and_leaves_earlier_experiments_as_they_were_predicted() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = fixture_journal(d.path(), "report-kvm");
    let report = |name: &str| {
        let (js, md, html) =
            (d.path().join(format!("{name}.json")), d.path().join(format!("{name}.md")), d.path().join(format!("{name}.html")));
        assert_eq!(campaign(&["report", s(&dir), "--json", s(&js), "--markdown", s(&md), "--html", s(&html)]).0, 0);
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&js).expect("json")).expect("parse");
        (v, std::fs::read_to_string(&md).expect("md"), std::fs::read_to_string(&html).expect("html"))
    };
    let (before, _, _) = report("before");
    // The box's all-reduce measured at three times the model's.
    let ar = d.path().join("ar.json");
    let out = servetune().args(["fabric", "allreduce", "--backend", "sim", "--sim-gpus", "8", "--json"]).arg(&ar).output().expect("ar");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&ar).expect("doc")).expect("doc json");
    for row in doc["allreduce"][0]["rows"].as_array_mut().expect("rows") {
        row["time_us"] = serde_json::json!(row["time_us"].as_f64().expect("time") * 3.0);
    }
    std::fs::write(&ar, doc.to_string()).expect("write");
    let (code, out, err) = campaign(&["fabric", s(&dir), s(&ar)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("fabric record 1: NCCL all-reduce (8 ranks") && out.contains("prices the NCCL all-reduces"), "{out}");
    let (v, md, html) = report("after");
    let a = &v["allreduce"][0];
    assert_eq!((a["record"].as_i64(), a["runs"][0]["ranks"].as_u64()), (Some(1), Some(8)), "{a}");
    let first = &doc["allreduce"][0]["rows"][0];
    assert_eq!(a["runs"][0]["points"][0][1].as_f64(), first["time_us"].as_f64(), "the report draws the recorded numbers");
    assert!(v["fabric"].as_array().is_some_and(Vec::is_empty), "an all-reduce document has no per-pair matrices");
    // The experiments were measured before the record: their step stays as it was predicted then.
    let comm = |r: &serde_json::Value| r["breakdown"][0]["step"]["communication_ms"].as_f64().expect("a breakdown");
    assert_eq!(comm(&v), comm(&before));
    assert!(md.contains("### NCCL all-reduce: kvm guest, no P2P (fabric record 1)") && md.contains("| size | 8 ranks, us |"), "{md}");
    assert!(html.contains("Measured NCCL all-reduce: kvm guest, no P2P"), "the HTML report shows it");
}

#[test]
fn bad_fabric_documents_exit_2_naming_the_file() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = fixture_journal(d.path(), "report-kvm");
    let write = |name: &str, body: &str| {
        let p = d.path().join(name);
        std::fs::write(&p, body).expect("write");
        p
    };
    let cases = [
        (d.path().join("missing.json"), "cannot read it"),
        (write("text.json", "not json at all"), "not a servetune fabric JSON"),
        (write("probe.json", r#"{"schema":"servetune.probe/1.1"}"#), "field \"schema\""),
        (
            write(
                "ar.json",
                r#"{"schema":"servetune.fabric/1.1","kind":"allreduce","allreduce":[{"ranks":8,"rows":[{"bytes":8,"time_us":-1},{"bytes":16,"time_us":2}]}]}"#,
            ),
            "field \"allreduce[0].rows[0].time_us\" is -1",
        ),
        (write("host.json", r#"{"schema":"servetune.fabric/1.1","kind":"host"}"#), "field \"kind\" is \"host\""),
    ];
    for (file, says) in cases {
        let (code, out, err) = campaign(&["fabric", s(&dir), s(&file)]);
        assert_eq!(code, 2, "{}: {out}{err}", file.display());
        assert!(err.contains(&file.display().to_string()) && err.contains(says), "{}: {err}", file.display());
    }
    assert_eq!(count(&db(&dir), "SELECT COUNT(*) FROM fabrics"), 0, "nothing recorded");
}

#[test]
fn report_refuses_missing_corrupt_and_newer_journals_naming_the_file() {
    let d = tempfile::tempdir().expect("tmp");
    let out = d.path().join("r.html");
    let (code, _, err) = campaign(&["report", s(&d.path().join("nowhere")), "--html", s(&out)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nowhere"), "{err}");
    let corrupt = d.path().join("corrupt");
    std::fs::create_dir_all(&corrupt).expect("mkdir");
    std::fs::write(corrupt.join("journal.sqlite"), b"SQLite format 3\0 but not really a database at all, just text").expect("write");
    let (code, _, err) = campaign(&["report", s(&corrupt), "--html", s(&out)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("journal.sqlite"), "{err}");
    let newer = fixture_journal(d.path(), "report-kvm");
    {
        let c = Connection::open(newer.join("journal.sqlite")).expect("open");
        c.execute("UPDATE meta SET value = '9' WHERE key = 'schema_major'", []).expect("bump major");
    }
    let (code, _, err) = campaign(&["report", s(&newer), "--html", s(&out)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("newer"), "{err}");
    assert!(!out.exists(), "nothing written for a refused journal");
}

/// The best done experiment's sweep points of a journal: concurrency -> output tok/s.
fn best_points(dir: &Path) -> (i64, std::collections::BTreeMap<u64, f64>) {
    let c = db(dir);
    let mut st = c.prepare("SELECT id, result FROM experiments WHERE state = 'done'").expect("sql");
    let rows: Vec<(i64, String)> = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).expect("rows").map(|r| r.expect("row")).collect();
    let parse = |s: &str| -> std::collections::BTreeMap<u64, f64> {
        let v: serde_json::Value = serde_json::from_str(s).expect("result");
        v["points"]
            .as_array()
            .expect("points")
            .iter()
            .map(|p| (p["concurrency"].as_u64().expect("c"), p["output_tok_s"].as_f64().expect("tok/s")))
            .collect()
    };
    rows.iter()
        .map(|(id, s)| (*id, parse(s)))
        .max_by(|a, b| a.1.values().fold(0.0, |m: f64, x| m.max(*x)).total_cmp(&b.1.values().fold(0.0, |m: f64, x| m.max(*x))))
        .expect("a done experiment")
}

#[test]
fn compare_kvm_and_lxc_fixtures_gives_the_deltas_and_names_what_changed() {
    let d = tempfile::tempdir().expect("tmp");
    let (a, b) = (fixture_journal(d.path(), "report-kvm"), fixture_journal(d.path(), "report-lxc"));
    let (js, md, html) = (d.path().join("c.json"), d.path().join("c.md"), d.path().join("c.html"));
    let (code, out, err) = campaign(&["compare", s(&a), s(&b), "--json", s(&js), "--markdown", s(&md), "--html", s(&html)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("NOTE:"), "same model and hardware: no caveat: {out}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&js).expect("json")).expect("parse");
    assert_eq!(v["schema"], "servetune.compare/1");
    let ((ea, pa), (eb, pb)) = (best_points(&a), best_points(&b));
    assert_eq!((v["a"]["experiment"].as_i64(), v["b"]["experiment"].as_i64()), (Some(ea), Some(eb)));
    let rows = v["throughput"].as_array().expect("throughput");
    assert_eq!(rows.len(), pa.keys().filter(|c| pb.contains_key(c)).count());
    for r in rows {
        let c = r["concurrency"].as_u64().expect("c");
        let (x, y) = (pa[&c], pb[&c]);
        assert_eq!(r["a_output_tok_s"].as_f64(), Some(x));
        assert_eq!(r["b_output_tok_s"].as_f64(), Some(y));
        assert!((r["change"].as_f64().expect("change") - (y / x - 1.0)).abs() < 1e-12);
        assert!(out.contains(&format!("{:+.1}%", (y / x - 1.0) * 100.0)), "terminal shows the change: {out}");
    }
    assert_eq!(v["latency"].as_array().map(Vec::len), Some(rows.len() * 5), "five percentiles per concurrency");
    let diffs: Vec<(String, String, String)> = v["differences"]
        .as_array()
        .expect("differences")
        .iter()
        .map(|d| {
            (
                d["field"].as_str().unwrap_or("").to_string(),
                d["a"].as_str().unwrap_or("-").to_string(),
                d["b"].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect();
    for want in [("virtual machine", "kvm", "none"), ("container", "none", "lxc"), ("GPU peer-to-peer", "false", "true")] {
        assert!(diffs.iter().any(|(f, x, y)| f == want.0 && x == want.1 && y == want.2), "{want:?} in {diffs:?}");
    }
    assert!(!diffs.iter().any(|(f, _, _)| f == "model" || f == "GPU"), "{diffs:?}");
    let md = std::fs::read_to_string(&md).expect("md");
    assert!(md.contains("| Environment | container | none | lxc |"), "{md}");
    let html = std::fs::read_to_string(&html).expect("html");
    assert!(html.contains(r#"class="series""#) && html.contains("<td>container</td>"), "chart and differences in the HTML");
}

#[test]
fn compare_of_different_models_says_so_at_the_top() {
    let d = tempfile::tempdir().expect("tmp");
    let (a, b) = (fixture_journal(d.path(), "report-lxc"), fixture_journal(d.path(), "report-glm-lxc"));
    let (code, out, err) = campaign(&["compare", s(&a), s(&b)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.lines().next().unwrap_or("").starts_with("NOTE: different model: qwen3-30b-a3b in A, glm-5 in B"), "{out}");
}

#[test]
fn compare_with_nothing_in_common_exits_2_naming_both_campaigns() {
    let d = tempfile::tempdir().expect("tmp");
    let (a, b) = (fixture_journal(d.path(), "report-kvm"), fixture_journal(d.path(), "report-lxc"));
    {
        // B measured at other concurrencies only.
        let c = Connection::open(b.join("journal.sqlite")).expect("open");
        let rows: Vec<(i64, String)> = {
            let mut st = c.prepare("SELECT id, result FROM experiments WHERE result IS NOT NULL").expect("sql");
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).expect("rows").map(|r| r.expect("row")).collect()
        };
        for (id, res) in rows {
            let mut v: serde_json::Value = serde_json::from_str(&res).expect("json");
            for p in v["points"].as_array_mut().expect("points") {
                p["concurrency"] = serde_json::json!(p["concurrency"].as_u64().expect("c") + 1000);
            }
            c.execute("UPDATE experiments SET result = ?1 WHERE id = ?2", rusqlite::params![v.to_string(), id]).expect("update");
        }
    }
    let (code, out, err) = campaign(&["compare", s(&a), s(&b)]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("no measured concurrency in common") && err.contains(s(&a)) && err.contains(s(&b)), "{err}");
    let (code, _, err) = campaign(&["compare", s(&a), s(&d.path().join("missing"))]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("missing"), "{err}");
}

/// A p2p document of more GPUs than the environment's probe found is another box's: refused,
/// nothing recorded.
#[test]
fn a_fabric_document_of_more_gpus_than_the_box_has_is_refused() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = fixture_journal(d.path(), "report-kvm");
    let f = d.path().join("p2p16.json");
    let out = servetune()
        .args(["fabric", "p2p", "--backend", "sim", "--sim-gpus", "16", "--sim-link", "pcie5-p2p", "--max-size", "4M", "--json"])
        .arg(&f)
        .output()
        .expect("fabric");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, out, err) = campaign(&["fabric", s(&dir), s(&f)]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("peer copies between 16 GPUs, but the probe of this environment found 8"), "{err}");
    assert_eq!(count(&db(&dir), "SELECT COUNT(*) FROM fabrics"), 0);
}

/// `next` lists an experiment queued with `campaign add` first (`continue` runs queued ones first), also
/// where the planner alone has nothing left.
#[test]
fn next_lists_a_queued_experiment_first() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = fixture_journal(d.path(), "report-kvm");
    let (code, out, err) = campaign(&["add", s(&dir), "--set", "max_running=16"]);
    assert_eq!(code, 0, "{out}{err}");
    let id = out.split_whitespace().nth(1).expect("experiment id").to_string();
    let (code, out, err) = campaign(&["next", s(&dir)]);
    assert_eq!(code, 0, "{out}{err}");
    let first = out.lines().next().unwrap_or_default();
    assert!(first.starts_with(&format!("1. [runnable] run experiment {id} (")), "{out}");
    assert!(out.contains("it is queued: continue runs it before any step the planner proposes"), "{out}");
}
