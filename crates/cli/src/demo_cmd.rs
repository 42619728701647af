//! `servetune demo`: the reference deployment's tuning campaign told on the simulator, through the
//! campaign library. A KVM guest without P2P is probed (fixture), the baseline is measured, the
//! planner asks the P2P question, the demo answers it the way the team did (moved to LXC, re-probed
//! from the LXC fixture), the campaign goes on by itself until it stops, and the status report is
//! written as HTML, Markdown and JSON beside the journal.
//!
//! The simulated server is the campaign's own executor launching `servetune sim --profile
//! DIR/profiles/{link}.json`: the probe's link picks the profile, so moving the box to LXC changes
//! the server the way it did for the team (the `reference-kvm` and `reference-lxc` presets).
//!
//! Each probed environment's interconnect is measured the way `servetune fabric p2p --backend sim
//! --sim-link LINK --json FILE` measures it (the same sweep, fit and document, in process) over
//! the link its probe reports, and recorded with `campaign fabric`, so the report draws it.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use servetune_campaign::campaign::{self, Answer, InitOptions, RunOptions, Stopped};
use servetune_campaign::controller;
use servetune_campaign::journal::{self, Journal};
use servetune_campaign::{engine, fabric_step, report, report_html};
use servetune_fabric::measure::{self, P2pOptions};
use servetune_fabric::sim::SimFabric;
use servetune_sim::cost::preset;

use crate::campaign_cmd::{cancel_on_ctrl_c, lib, stopped_code};
use crate::{ExitCode, Failure};

/// Run the whole story on the simulator: KVM baseline, the P2P question, the move to LXC, the
/// campaign going on by itself, and the status report (report.html, report.md, the journal).
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  servetune demo                 # writes ./servetune-demo/report.html\n  servetune demo --out /tmp/d -q"
)]
pub struct DemoArgs {
    /// Where the campaign (journal, server logs, bench JSON) and the report go
    #[arg(long, default_value = "servetune-demo", value_name = "DIR")]
    pub out: PathBuf,
    /// The probe fixtures (proxmox-kvm-8gpu, proxmox-lxc-8gpu); the repository's by default
    #[arg(long, value_name = "DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../probe/tests/fixtures"))]
    pub fixtures: PathBuf,
    /// No progress lines from the campaign steps
    #[arg(long, short)]
    pub quiet: bool,
}

/// The team's goal (DESIGN: "485 tok/s at concurrency 64 and they need 1,000+").
const GOAL: &str = "output_tok_s>=1000";
/// Concurrency points: below the engine's 64-request limit, at it, and past it (requests queue),
/// so the planner sees the running cap. Counts stay small so the story ends in about a minute.
const CONCURRENCY: [u32; 3] = [32, 64, 128];
const REQUESTS: u64 = 128;
const INPUT_TOKENS: u32 = 64;
const OUTPUT_TOKENS: u32 = 32;

/// What the demo's servers are, said wherever their numbers are shown (the demo's output and the
/// report's notes): their timing is calibration to the team's measurements, not the model's.
const REPLAY: &str = "The simulated servers replay the team's measured curves: the reference-kvm and reference-lxc presets are cost terms fitted to the team's ~485 tok/s (KVM) and ~806 tok/s (LXC). Their measurements are calibration data for this story, not a test of the model; the model's own predictions are set against them in the findings and the track record.";

/// The demo's engine: the simulator with the profile that the probe's link selects.
fn template(profiles: &Path) -> Result<engine::EngineTemplate, Failure> {
    let profile = serde_json::to_string(&format!("{}/{{link}}.json", profiles.display())).map_err(|e| Failure::runtime(e.to_string()))?;
    let text = format!(
        r#"[[engine]]
name = "sim-reference"
description = "servetune sim with the reference deployment's profile for the probed link (KVM: host-staged, LXC: P2P)"
argv = ["{{servetune}}", "sim", "--listen", "{{host}}:{{port}}", "--model", "{{model}}", "--profile", {profile}]
health = "/health"
generate = "/v1/completions"
metrics = "/metrics"
version = {{ command = ["{{servetune}}", "--version"] }}
ready_timeout_s = 60
knobs = [
  {{ name = "max_running", help = "running-request cap", domain = {{ int = {{ min = 1, max = 65536 }} }}, args = ["--max-running-requests", "{{value}}"] }},
]
logs = [
  {{ contains = "Using default MoE kernel config", signal = "moe_default_config" }},
  {{ contains = "Using MoE kernel config from", signal = "moe_config_loaded" }},
]
"#
    );
    let mut all = engine::parse(&text, "the demo's engine").map_err(lib)?;
    all.pop().ok_or_else(|| Failure::runtime("the demo's engine template did not parse"))
}

/// The file that marks a folder as the demo's: only a folder holding it is cleaned for a rerun.
const DEMO_MARK: &str = ".servetune-demo";

/// The lock a running demo holds on its folder (the kernel's, with its pid in it), so that a
/// second demo on the same folder stops before it removes the first one's files.
const DEMO_LOCK: &str = ".servetune-demo.lock";

/// Removes what an earlier demo wrote in `out` (only the demo's own files, and only in a folder
/// an earlier demo marked), then writes the simulator profiles: one per link the probe can report.
/// A folder that holds anything else and no mark is refused: it may be a real campaign. So is a
/// folder where a demo or a `campaign continue` is running, before anything is removed. Returns
/// the profiles' folder and the demo's lock on `out`, to hold for the whole run.
fn prepare_dir(out: &Path) -> Result<(PathBuf, std::fs::File), Failure> {
    let io = |what: &str, p: &Path, e: std::io::Error| Failure::runtime(format!("cannot {what} {}: {e}", p.display()));
    // A demo folder written before the mark existed holds the demo's two simulator profiles.
    let earlier_demo =
        out.join(DEMO_MARK).is_file() || ["pcie-host-staged.json", "pcie5-p2p.json"].iter().all(|f| out.join("profiles").join(f).is_file());
    if out.is_dir() && !earlier_demo {
        let names: Vec<String> = std::fs::read_dir(out)
            .map_err(|e| io("read", out, e))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if !names.is_empty() {
            let shown: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
            return Err(Failure::usage(format!(
                "--out {}: the folder holds files no demo wrote ({}{}), which a demo run would replace or remove; give a new or empty folder",
                out.display(),
                shown.join(", "),
                if names.len() > 3 { ", ..." } else { "" }
            )));
        }
    }
    std::fs::create_dir_all(out).map_err(|e| io("create", out, e))?;
    let mark = out.join(DEMO_MARK);
    std::fs::write(&mark, "written by servetune demo: a rerun may remove the demo's files here\n").map_err(|e| io("write", &mark, e))?;
    let running = |who: &str, pid: &str| {
        let pid = if pid.is_empty() { String::new() } else { format!(" (pid {pid})") };
        Failure::usage(format!(
            "--out {}: {who}{pid} is running there; wait for it to finish, or give another --out (nothing was removed)",
            out.display()
        ))
    };
    let lock_path = out.join(DEMO_LOCK);
    let demo_lock = controller::lock(&lock_path).map_err(|e| io("lock", &lock_path, e))?.map_err(|pid| running("a demo", &pid))?;
    // A campaign continue started by hand on the demo's journal holds the controller's lock; held
    // here until the files are removed, and released before this demo's own continue takes it.
    let held = if journal::path_in(out).is_file() {
        let p = out.join(controller::FILE);
        Some(controller::lock(&p).map_err(|e| io("lock", &p, e))?.map_err(|pid| running("a servetune campaign continue", &pid))?)
    } else {
        None
    };
    for entry in std::fs::read_dir(out).map_err(|e| io("read", out, e))?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = ["journal.sqlite", "exp-", "report.", "fabric-"].iter().any(|p| name.starts_with(p));
        if ours {
            std::fs::remove_file(entry.path()).map_err(|e| io("remove", &entry.path(), e))?;
        }
    }
    drop(held);
    let profiles = std::path::absolute(out.join("profiles")).map_err(|e| io("resolve", out, e))?;
    std::fs::create_dir_all(&profiles).map_err(|e| io("create", &profiles, e))?;
    for (link, name) in [("pcie-host-staged", "reference-kvm"), ("pcie5-p2p", "reference-lxc")] {
        let p = preset(name).map_err(|e| Failure::runtime(e.to_string()))?;
        let path = profiles.join(format!("{link}.json"));
        let body = serde_json::to_vec_pretty(&p).map_err(|e| Failure::runtime(e.to_string()))?;
        std::fs::write(&path, body).map_err(|e| io("write", &path, e))?;
    }
    Ok((profiles, demo_lock))
}

fn fixture(a: &DemoArgs, name: &str) -> Result<PathBuf, Failure> {
    let p = a.fixtures.join(name);
    if !p.is_dir() {
        return Err(Failure::usage(format!(
            "--fixtures {}: no {name} probe fixture there; give the repository's crates/probe/tests/fixtures",
            a.fixtures.display()
        )));
    }
    Ok(p.canonicalize().unwrap_or(p))
}

/// `servetune campaign continue DIR --until-blocked`: the campaign command's own loop. A stop
/// signal ends the demo with the exit code `continue` gives it.
fn until_blocked(dir: &Path, opts: &RunOptions, quiet: bool) -> Result<Stopped, Failure> {
    let mut say = |l: &str| {
        if !quiet {
            crate::say!("    {l}");
        }
    };
    // Without -q the step's own lines (above) already end with its summary line.
    let mut stepped = |l: &str| {
        if quiet {
            crate::say!("  {l}");
        }
    };
    let stopped = campaign::continue_until(dir, opts, true, &mut say, &mut stepped).map_err(lib)?;
    if stopped == Stopped::Interrupted {
        return Err(Failure {
            code: stopped_code(&stopped),
            msg: "interrupted: the step was torn down and recorded as interrupted".into(),
        });
    }
    Ok(stopped)
}

/// Says how `continue` stopped and returns its exit code.
fn say_stop(stop: &Stopped) -> ExitCode {
    let code = stopped_code(stop);
    match stop {
        Stopped::NeedsPerson(q) => crate::say!("  campaign continue -> exit {code}, needs a person (question {}): {}", q.id, q.text),
        Stopped::NothingLeft { goal_met, reason } => {
            crate::say!("  campaign continue -> exit {code}, {}: {reason}", if *goal_met { "goal met" } else { "nothing left" });
        }
        Stopped::Stepped | Stopped::Interrupted => crate::say!("  campaign continue -> exit {code}"),
    }
    code
}

/// Runs the demo.
pub fn run(a: DemoArgs) -> Result<(), Failure> {
    let kvm = fixture(&a, "proxmox-kvm-8gpu")?;
    let lxc = fixture(&a, "proxmox-lxc-8gpu")?;
    let (profiles, _demo_lock) = prepare_dir(&a.out)?;
    let dir = a.out.clone();
    let opts = RunOptions { cancel: cancel_on_ctrl_c() };
    crate::say!("servetune demo: GLM-5 NVFP4, TP8 on 8 RTX PRO 6000, tuned by a campaign on the simulator (goal {GOAL})");

    crate::say!("  {REPLAY}");
    crate::say!("\n1. A campaign starts on the Proxmox KVM guest (probe fixture {}).", kvm.display());
    start(&dir, &kvm, &profiles)?;
    let j = Journal::open(&dir).map_err(lib)?;
    j.add_note(REPLAY).map_err(lib)?;
    for f in j.findings().map_err(lib)?.iter().filter(|f| f.severity != servetune_campaign::finding::Severity::Info) {
        crate::say!("  probe finding {} ({}): {}", f.id, f.severity, f.title);
    }
    drop(j);
    fabric(&dir, "kvm")?;
    crate::say!(
        "  baseline sweep: concurrency {CONCURRENCY:?}, {REQUESTS} requests each, {INPUT_TOKENS} prompt / {OUTPUT_TOKENS} output tokens"
    );
    campaign::add(&dir, &BTreeMap::new(), false).map_err(lib)?;

    crate::say!("\n2. servetune campaign continue --until-blocked");
    let first = until_blocked(&dir, &opts, a.quiet)?;
    say_stop(&first);
    let Stopped::NeedsPerson(q) = first else {
        return Err(Failure::runtime("the KVM campaign did not stop at the P2P question; see the journal"));
    };

    crate::say!("\n3. The answer the team gave: the GPUs moved to an LXC container. Re-probe (fixture {}):", lxc.display());
    let facts = campaign::reprobe(&dir, Some(&lxc)).map_err(lib)?;
    crate::say!(
        "  {} GPU(s), container {}, GPU peer-to-peer {}",
        facts.gpus,
        facts.container,
        if facts.p2p_ok { "available" } else { "not available" }
    );
    fabric(&dir, "lxc")?;
    let q = campaign::answer(&dir, q.id, &Answer::Done).map_err(lib)?;
    crate::say!("  campaign answer {} --done", q.id);

    crate::say!("\n4. servetune campaign continue --until-blocked (the campaign goes on by itself)");
    let last = until_blocked(&dir, &opts, a.quiet)?;
    let code = say_stop(&last);
    finish(&dir, code)
}

/// Measures the current environment's GPU-to-GPU copies on the simulated fabric of its probed link
/// (as `servetune fabric p2p --backend sim --sim-link LINK --json DIR/fabric-NAME.json` does), and
/// records the document in the journal.
fn fabric(dir: &Path, name: &str) -> Result<(), Failure> {
    let j = Journal::open(dir).map_err(lib)?;
    let (_, env) = campaign::current_env(&j).map_err(lib)?;
    drop(j);
    let link = env.facts.link();
    let fail = |e: servetune_fabric::FabricError| Failure::runtime(format!("the simulated fabric sweep: {e}"));
    let mut f = SimFabric::new(env.facts.gpus.max(1) as usize, link).map_err(fail)?;
    let sizes = servetune_fabric::sizes(4, 256 << 20).map_err(fail)?;
    let r = measure::p2p(&mut f, &P2pOptions { gpus: Vec::new(), sizes, iters: 100, verify: false }, &mut |_, _| {}).map_err(fail)?;
    let doc = servetune_fabric::report::p2p_report(r);
    let path = dir.join(format!("fabric-{name}.json"));
    let text = serde_json::to_string_pretty(&doc).map_err(|e| Failure::runtime(e.to_string()))?;
    std::fs::write(&path, text + "\n").map_err(|e| Failure::runtime(format!("cannot write {}: {e}", path.display())))?;
    let rec = fabric_step::record(dir, &path).map_err(lib)?;
    let fabric_step::Document::P2p(m) = &rec.document else {
        return Err(Failure::runtime(format!("{}: the simulated sweep wrote no p2p document", path.display())));
    };
    let at = |m: &fabric_step::Measured| m.values.first().and_then(|r| r.get(1).copied().flatten()).unwrap_or(0.0);
    crate::say!(
        "  servetune fabric p2p --backend sim --sim-link {link} --json {}; campaign fabric: record {} (GPU0 to GPU1 {:.1} GB/s, {:.1} us)",
        path.display(),
        rec.id,
        at(&m.bandwidth),
        at(&m.latency)
    );
    Ok(())
}

fn start(dir: &Path, kvm: &Path, profiles: &Path) -> Result<(), Failure> {
    let mut s = campaign::settings(GOAL, template(profiles)?, "glm-5", "nvfp4", BTreeMap::new()).map_err(lib)?;
    s.bench.concurrency = CONCURRENCY.to_vec();
    s.bench.requests = REQUESTS;
    s.bench.input_len = INPUT_TOKENS;
    s.bench.output_len = OUTPUT_TOKENS;
    campaign::init(&InitOptions { dir: dir.to_path_buf(), settings: s, probe_root: Some(kvm.to_path_buf()) }).map_err(lib)?;
    Ok(())
}

/// Writes report.html, report.md and report.json, and says where they are.
fn finish(dir: &Path, code: ExitCode) -> Result<(), Failure> {
    let j = Journal::open(dir).map_err(lib)?;
    let r = report::build(&j).map_err(lib)?;
    crate::say!("\n5. Where it stands (campaign stopped with exit {code}):\n  {}", r.standing.headline);
    for a in &r.analysis {
        crate::say!("  - {a}");
    }
    if !r.track_record.is_empty() {
        crate::say!("  Track record (each step's predicted gain against the gain measured):");
        for t in &r.track_record {
            crate::say!("  - {}", report::track_words(t));
        }
    }
    let write = |name: &str, f: &dyn Fn(&mut Vec<u8>) -> std::io::Result<()>| -> Result<PathBuf, Failure> {
        let p = dir.join(name);
        let mut buf = Vec::new();
        f(&mut buf).map_err(|e| Failure::runtime(e.to_string()))?;
        std::fs::write(&p, buf).map_err(|e| Failure::runtime(format!("cannot write {}: {e}", p.display())))?;
        Ok(p)
    };
    let html = write("report.html", &|w| report_html::write_html(&r, w))?;
    let md = write("report.md", &|w| report::write_markdown(&r, w))?;
    let js = write("report.json", &|w| serde_json::to_writer_pretty(w, &r).map_err(std::io::Error::other))?;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "\nThe report: {} (open it in a browser), {} and {}; the journal: {}",
        html.display(),
        md.display(),
        js.display(),
        j.path().display()
    );
    let _ = writeln!(out, "Go on by hand: servetune campaign status {0}; servetune campaign next {0}", dir.display());
    Ok(())
}
