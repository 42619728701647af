//! The Slurm executor, `probe --slurm` and `fabric allreduce --slurm` on a real Slurm cluster:
//! Debian's slurm-wlm with munge, slurmctld and two slurmd (nodes n1 and n2 on this machine), no
//! accounting storage, started by `scripts/slurm-test-cluster` (called from scripts/setup-test-env).

use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::common::servetune;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The test cluster's slurm.conf; the tests fail (never skip) when it is not up.
fn conf() -> PathBuf {
    let p = std::env::var_os("SERVETUNE_TEST_SLURM_CONF").map_or_else(|| repo().join(".slurm-test/slurm.conf"), PathBuf::from);
    // Busy (mix, alloc, or comp while a finished job's nodes clean up) while other tests run
    // jobs; never down or unknown. A node between states is given a few seconds.
    let state_ok = || {
        StdCommand::new("sinfo").env("SLURM_CONF", &p).args(["-h", "-o", "%t"]).output().is_ok_and(|o| {
            let t = String::from_utf8_lossy(&o.stdout).to_string();
            o.status.success() && ["idle", "mix", "alloc", "comp"].iter().any(|s| t.contains(s))
        })
    };
    let up = p.is_file()
        && (0..20).any(|i| {
            if i > 0 {
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
            state_ok()
        });
    assert!(
        up,
        "no Slurm test cluster at {}: run scripts/slurm-test-cluster start (as root), or set SERVETUNE_TEST_SLURM_CONF",
        p.display()
    );
    p
}

fn st(args: &[&str]) -> (i32, String, String) {
    let out = servetune().env("SLURM_CONF", conf()).args(args).output().expect("run");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn fixture(name: &str) -> String {
    repo().join("crates/probe/tests/fixtures").join(name).display().to_string()
}

/// A sim campaign on the Slurm executor; `bench` replaces the short default benchmark.
fn init(dir: &Path, extra: &[&str]) {
    init_with(dir, &["--concurrency", "1,4", "--requests", "8", "--input-len", "32", "--output-len", "8"], extra);
}

/// A benchmark long enough (seconds at one request at a time) to act on while it runs.
const LONG: &[&str] = &["--concurrency", "1", "--requests", "200", "--input-len", "32", "--output-len", "64"];

fn init_with(dir: &Path, bench: &[&str], extra: &[&str]) {
    let mut a =
        vec!["campaign", "init", s(dir), "--engine", "sim", "--model", "qwen3-30b-a3b", "--goal", "output_tok_s>=1000000", "--probe-root"];
    let fx = fixture("proxmox-lxc-8gpu");
    a.push(&fx);
    a.extend(bench);
    a.extend(["--executor", "slurm"]);
    a.extend(extra);
    let (code, out, err) = st(&a);
    assert_eq!(code, 0, "{out}{err}");
}

fn db(dir: &Path) -> Connection {
    Connection::open_with_flags(dir.join("journal.sqlite"), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).expect("journal")
}

fn one<T: rusqlite::types::FromSql>(c: &Connection, sql: &str) -> T {
    c.query_row(sql, [], |r| r.get(0)).expect(sql)
}

fn squeue_state(job: i64) -> String {
    let out =
        StdCommand::new("squeue").env("SLURM_CONF", conf()).args(["-h", "-o", "%T", "-j", &job.to_string()]).output().expect("squeue");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Waits until `f` holds (polling every 100 ms) or panics after `limit`, saying `what`.
fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_two_node_sim_experiment_runs_as_one_job_with_a_log_per_node_and_every_node_fingerprinted() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    init(&dir, &["--nodes", "2"]);
    let (code, out, err) = st(&["campaign", "continue", s(&dir)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("experiment 1 done"), "{out}");
    let c = db(&dir);
    let job: i64 = one(&c, "SELECT slurm_job FROM experiments WHERE id = 1");
    assert!(job > 0);
    let submitted: i64 = one(&c, "SELECT COUNT(*) FROM events WHERE detail LIKE 'experiment 1: submitted Slurm job%'");
    // One job, unless another process took the picked port first: that race gets one resubmission
    // on a new port, recorded as a retry event (seen once on a loaded CI machine).
    let retried: i64 = one(&c, "SELECT COUNT(*) FROM events WHERE detail LIKE 'experiment 1: port % was taken%'");
    assert!(retried <= 1, "{retried} port retries");
    assert_eq!(submitted, 1 + retried, "{retried} port retries");
    // The head waited for node 1 at the head address the job gave it; node 1 joined it.
    let n0 = std::fs::read_to_string(dir.join("exp-1-a1.node0.log")).expect("node 0 log");
    let n1 = std::fs::read_to_string(dir.join("exp-1-a1.node1.log")).expect("node 1 log");
    assert!(n0.contains("node 1 of 2 joined"), "{n0}");
    assert!(n1.contains("node 1 of 2 joined the head"), "{n1}");
    let fp: String = one(&c, "SELECT f.body FROM fingerprints f JOIN experiments e ON e.fingerprint = f.id WHERE e.id = 1");
    let v: serde_json::Value = serde_json::from_str(&fp).expect("fingerprint json");
    assert_eq!(v["slurm_job"].as_i64(), Some(job));
    let nodes: Vec<&str> = v["nodes"].as_array().expect("nodes").iter().filter_map(|n| n.as_str()).collect();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    assert!(nodes.iter().any(|n| n.starts_with("node=n1 ") && n.contains("rank=0 nnodes=2")), "{nodes:?}");
    assert!(nodes.iter().any(|n| n.starts_with("node=n2 ") && n.contains("rank=1 nnodes=2")), "{nodes:?}");
    let argv = v["argv"].as_array().expect("argv").iter().filter_map(|w| w.as_str()).collect::<Vec<_>>().join(" ");
    assert!(argv.contains("--node-rank {node_rank}") && argv.contains("--dist-init-addr {head}:"), "{argv}");
    // Torn down: the job ended (its exit record says SIGTERM) and is no longer running.
    assert_eq!(std::fs::read_to_string(dir.join("exp-1-a1.exit")).expect("exit record").trim(), "143");
    assert_ne!(squeue_state(job), "RUNNING");
}

fn failing_engine(dir: &Path) -> PathBuf {
    let f = dir.join("engines.toml");
    std::fs::write(
        &f,
        "[[engine]]\nname = \"oom\"\nargv = [\"/bin/sh\", \"-c\", \"echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB'; exit 1\"]\nhealth = \"/health\"\ngenerate = \"/v1/completions\"\nready_timeout_s = 60\n",
    )
    .expect("engines");
    f
}

#[test]
fn a_job_that_fails_is_classified_from_its_node_log_with_the_slurm_state_as_evidence() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    let eng = failing_engine(d.path());
    let fx = fixture("proxmox-lxc-8gpu");
    let (code, out, err) = st(&[
        "campaign",
        "init",
        s(&dir),
        "--engine",
        "oom",
        "--engines",
        s(&eng),
        "--model",
        "m",
        "--goal",
        "output_tok_s>=10",
        "--probe-root",
        &fx,
        "--executor",
        "slurm",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = st(&["campaign", "continue", s(&dir)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("failed: out_of_memory"), "{out}");
    let c = db(&dir);
    let failure: String = one(&c, "SELECT failure FROM experiments WHERE id = 1");
    let f: serde_json::Value = serde_json::from_str(&failure).expect("failure json");
    let ev = f["evidence"].to_string();
    assert!(ev.contains("slurm job") && ev.contains("FAILED"), "{ev}");
    assert!(ev.contains("CUDA out of memory"), "{ev}");
}

/// Starts `servetune campaign continue DIR` in the background.
fn continue_bg(dir: &Path) -> std::process::Child {
    StdCommand::new(env!("CARGO_BIN_EXE_servetune"))
        .env("SLURM_CONF", conf())
        .args(["campaign", "continue", s(dir)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("continue")
}

/// A one-request-at-a-time campaign in `dir` with `bench`'s sweep, its `continue` started in the
/// background and waited on until experiment 1 benchmarks: the controller and the Slurm job id.
fn benchmarking(dir: &Path, bench: &[&str]) -> (std::process::Child, i64) {
    init_with(dir, bench, &["--set", "max_running=1"]);
    let child = continue_bg(dir);
    wait_for("the benchmark to start", Duration::from_secs(120), || state(dir).as_deref() == Some("benchmarking"));
    (child, one(&db(dir), "SELECT slurm_job FROM experiments WHERE id = 1"))
}

fn state(dir: &Path) -> Option<String> {
    Connection::open_with_flags(dir.join("journal.sqlite"), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .ok()?
        .query_row("SELECT state FROM experiments WHERE id = 1", [], |r| r.get(0))
        .ok()
}

#[test]
fn a_job_cancelled_mid_run_by_someone_else_fails_as_cancelled() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    let (child, job) = benchmarking(&dir, LONG);
    let st = StdCommand::new("scancel").env("SLURM_CONF", conf()).arg(job.to_string()).status().expect("scancel");
    assert!(st.success());
    let out = child.wait_with_output().expect("continue");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("failed: cancelled"), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(state(&dir).as_deref(), Some("failed"));
}

#[test]
fn ctrl_c_scancels_the_job_and_records_the_step_as_interrupted() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    let (child, job) = benchmarking(&dir, LONG);
    assert_eq!(squeue_state(job), "RUNNING");
    let _ = StdCommand::new("kill").args(["-INT", &child.id().to_string()]).status();
    let out = child.wait_with_output().expect("continue");
    assert_eq!(state(&dir).as_deref(), Some("interrupted"), "{}", String::from_utf8_lossy(&out.stdout));
    let gone = squeue_state(job);
    assert!(gone.is_empty() || gone == "CANCELLED" || gone == "COMPLETING", "job {job} is {gone} after Ctrl-C");
}

#[test]
fn a_controller_killed_with_kill_9_is_reattached_to_its_running_job_instead_of_submitting_again() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    // A few seconds of benchmark: still running when the controller dies, then run again in full.
    let (mut child, job) = benchmarking(&dir, &["--concurrency", "1", "--requests", "24", "--input-len", "32", "--output-len", "32"]);
    child.kill().expect("kill -9");
    let _ = child.wait();
    assert_eq!(squeue_state(job), "RUNNING", "the job outlives its controller");
    let (code, out, err) = st(&["campaign", "continue", s(&dir)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("re-attached to Slurm job {job}")), "{out}");
    assert!(out.contains("experiment 1 done"), "{out}");
    let c = db(&dir);
    let submitted: i64 = one(&c, "SELECT COUNT(*) FROM events WHERE detail LIKE 'experiment 1: submitted Slurm job%'");
    let retried: i64 = one(&c, "SELECT COUNT(*) FROM events WHERE detail LIKE 'experiment 1: port % was taken%'");
    assert_eq!(submitted, 1 + retried, "submitted once (plus a port-race retry at launch), followed twice");
    assert_eq!(one::<i64>(&c, "SELECT slurm_job FROM experiments WHERE id = 1"), job);
    assert_eq!(one::<i64>(&c, "SELECT attempt FROM experiments WHERE id = 1"), 1);
}

#[test]
fn slurm_bad_input_exits_2_naming_the_problem() {
    let d = tempfile::tempdir().expect("tmp");
    let fx = fixture("proxmox-lxc-8gpu");
    let base = |dir: &str| -> Vec<String> {
        [
            "campaign",
            "init",
            dir,
            "--engine",
            "sim",
            "--model",
            "qwen3-30b-a3b",
            "--goal",
            "output_tok_s>=10",
            "--probe-root",
            &fx,
            "--executor",
            "slurm",
        ]
        .iter()
        .map(|x| x.to_string())
        .collect()
    };
    let run = |extra: &[&str], path: Option<&str>| {
        let dir = d.path().join(format!("c{}", extra.len())).display().to_string();
        let mut a = base(&dir);
        a.extend(extra.iter().map(|x| x.to_string()));
        let mut cmd = servetune();
        cmd.env("SLURM_CONF", conf()).args(&a);
        if let Some(p) = path {
            cmd.env("PATH", p);
        }
        let o = cmd.output().expect("run");
        (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (code, err) = run(&[], Some("/nonexistent"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("sbatch not found on PATH"), "{err}");
    let (code, err) = run(&["--partition", "nosuch"], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--partition nosuch is not a partition") && err.contains("debug*"), "{err}");
    let (code, err) = run(&["--nodes", "2", "--gpus-per-node", "2"], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("allocation is smaller than the plan") && err.contains("needs 8"), "{err}");
    let (code, err) = run(&["--nodes", "3"], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("partition debug has 2 node(s)"), "{err}");
    let (code, err) = run(&["--slurm-arg", "exclusive"], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--slurm-arg \"exclusive\""), "{err}");
    let dir = d.path().join("local").display().to_string();
    let o = servetune()
        .args([
            "campaign",
            "init",
            &dir,
            "--engine",
            "sim",
            "--model",
            "qwen3-30b-a3b",
            "--goal",
            "output_tok_s>=10",
            "--probe-root",
            &fx,
            "--nodes",
            "2",
        ])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("need --executor slurm"));
}

#[test]
fn probe_slurm_runs_on_every_node_through_srun_and_merges_the_reports() {
    let d = tempfile::tempdir().expect("tmp");
    let json = d.path().join("cluster.json");
    let out = servetune()
        .env("SLURM_CONF", conf())
        .current_dir(d.path())
        .args(["probe", "--slurm", "--nodes", "2", "--json", s(&json)])
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("== cluster: 2 node(s) probed") && text.contains("nothing: every node reports the same"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("parse");
    assert_eq!(v["schema"], "servetune.probe-cluster/1");
    let mut nodes: Vec<&str> = v["reports"].as_array().expect("reports").iter().filter_map(|r| r["node"].as_str()).collect();
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2"]);
    // The nodes' scratch files are gone.
    assert_eq!(std::fs::read_dir(d.path()).expect("dir").count(), 1);
}

#[test]
fn fabric_allreduce_slurm_starts_one_rank_per_gpu_across_nodes_and_hands_over_the_id() {
    let d = tempfile::tempdir().expect("tmp");
    let json = d.path().join("ar.json");
    let args = [
        "fabric",
        "allreduce",
        "--slurm",
        "--nodes",
        "2",
        "--gpus-per-node",
        "2",
        "--backend",
        "sim",
        "--sim-link",
        "pcie5-p2p",
        "--max-size",
        "1M",
        "--json",
        s(&json),
    ];
    let out = servetune().env("SLURM_CONF", conf()).current_dir(d.path()).args(args).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("all-reduce, 4 ranks"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("parse");
    assert!(v.to_string().contains("sim (slurm)"), "{v}");
    // The CUDA backend on nodes without a driver: every rank says so, and the command does too.
    let out = servetune()
        .env("SLURM_CONF", conf())
        .current_dir(d.path())
        .args(["fabric", "allreduce", "--slurm", "--nodes", "2", "--gpus-per-node", "1"])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no NVIDIA driver found") && err.contains("each of the 2 ranks on 2 node(s)"), "{err}");
    let out =
        servetune().env("SLURM_CONF", conf()).args(["fabric", "allreduce", "--slurm", "--partition", "nosuch"]).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--partition nosuch is not a partition"));
}
