//! `servetune demo`, as the README runs it: the campaign story on the simulator (KVM baseline, the
//! P2P question, the move to LXC, the campaign going on by itself) and the report it writes.

use std::path::Path;

use rusqlite::Connection;

use crate::common::servetune;

fn count(c: &Connection, sql: &str) -> i64 {
    c.query_row(sql, [], |r| r.get(0)).expect(sql)
}

/// Output tok/s of experiment `id` at `concurrency`, from the journal's bench summary.
fn measured(c: &Connection, id: i64, concurrency: u64) -> f64 {
    let result: String = c.query_row("SELECT result FROM experiments WHERE id = ?1", [id], |r| r.get(0)).expect("result");
    let v: serde_json::Value = serde_json::from_str(&result).expect("result json");
    v["points"]
        .as_array()
        .expect("points")
        .iter()
        .find(|p| p["concurrency"] == concurrency)
        .and_then(|p| p["output_tok_s"].as_f64())
        .expect("point")
}

fn env_of(c: &Connection, id: i64) -> String {
    c.query_row("SELECT f.body FROM experiments e JOIN fingerprints f ON f.id = e.env_fingerprint WHERE e.id = ?1", [id], |r| {
        r.get::<_, String>(0)
    })
    .expect("env fingerprint")
}

#[test]
fn demo_tells_the_campaign_story_writes_a_report_matching_the_journal_and_reruns_afresh() {
    let d = tempfile::tempdir().expect("tmp");
    let out_dir = d.path().join("out");
    let out = servetune().args(["demo", "-q", "--out"]).arg(&out_dir).output().expect("run demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // The story's stops, in order: the P2P question on KVM (exit 3), then 3 or 4 after LXC.
    let ask = stdout.find("campaign continue -> exit 3, needs a person (question 1)").expect("the P2P question");
    assert!(stdout[ask..].contains("peer-to-peer") && stdout[ask..].contains("plan predicts"), "{stdout}");
    let moved = stdout.find("moved to an LXC container").expect("the answer");
    let last = stdout.rfind("campaign continue -> exit ").expect("the last stop");
    assert!(ask < moved && moved < last, "{stdout}");
    let last_code = &stdout[last + "campaign continue -> exit ".len()..][..1];
    // After the runnable steps, the campaign stops at the question tuning the fused-MoE kernels
    // (it needs the real GPUs), which the server's log line raised.
    assert_eq!(last_code, "3", "{stdout}");
    assert!(stdout[last..].contains("fused-MoE tuning"), "{stdout}");

    assert!(stdout.contains(&format!("{}", out_dir.join("report.html").display())), "says where the report is: {stdout}");

    for f in ["report.html", "report.md", "report.json", "journal.sqlite"] {
        assert!(out_dir.join(f).metadata().map(|m| m.len() > 0).unwrap_or(false), "{f} written");
    }
    let c = Connection::open_with_flags(out_dir.join("journal.sqlite"), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).expect("journal");
    // A calibration check, not the model's accuracy: the demo's servers replay the team's measured
    // curves (the reference presets are fitted to them), so experiment 1, the KVM baseline, reads
    // ~485 tok/s at concurrency 64 and the LXC baseline ~806. The demo says so.
    assert!(stdout.contains("replay the team's measured curves"), "{stdout}");
    assert!(env_of(&c, 1).contains("\"vm\":\"kvm\""), "experiment 1 ran in the KVM guest");
    let kvm = measured(&c, 1, 64);
    assert!((kvm - 485.0).abs() / 485.0 < 0.10, "KVM baseline {kvm}");
    let lxc_base: i64 = c
        .query_row("SELECT id FROM experiments WHERE title LIKE 'baseline%' ORDER BY id DESC LIMIT 1", [], |r| r.get(0))
        .expect("LXC baseline");
    assert!(env_of(&c, lxc_base).contains("\"container\":\"lxc\""), "experiment {lxc_base} ran in LXC");
    let lxc = measured(&c, lxc_base, 64);
    assert!((lxc - 806.0).abs() / 806.0 < 0.10, "LXC baseline {lxc}");
    assert_eq!(count(&c, "SELECT count(*) FROM questions WHERE id = 1 AND state = 'done' AND text LIKE '%peer-to-peer%'"), 1);
    // The P2P question was the KVM box's top step: nothing but the baseline ran there before it.
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM experiments e JOIN fingerprints f ON f.id = e.env_fingerprint WHERE f.body LIKE '%\"vm\":\"kvm\"%'"
        ),
        1
    );
    // The untuned fused-MoE kernels are found in the server's log and become a question (tuning
    // them needs the real GPU).
    assert!(count(&c, "SELECT count(*) FROM findings WHERE source = 'log' AND code = 'moe_default_config' AND evidence LIKE '%Using default MoE kernel config%'") >= 1);
    assert_eq!(count(&c, "SELECT count(*) FROM questions WHERE key LIKE 'moe:%' AND state = 'open'"), 1);
    let tried = "SELECT count(*) FROM experiments WHERE title LIKE 'raise the running-request cap%' AND state = 'done'";
    assert_eq!(count(&c, tried), 1, "the runnable step is tried and recorded before the question");

    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(out_dir.join("report.json")).expect("report.json")).expect("json");
    let md = std::fs::read_to_string(out_dir.join("report.md")).expect("report.md");
    report_agrees_with_the_journal(&c, &r, &md);
    assert!(r["notes"].to_string().contains("replay the team's measured curves"), "the report says what the servers are: {}", r["notes"]);
    let html = std::fs::read_to_string(out_dir.join("report.html")).expect("report.html");
    verdicts_agree(&r, &html, &md);
    the_docs_quote_the_models_own_figures(&r, lxc_base);
    assert_eq!(html.matches(r#"data-chart="fabric-bandwidth""#).count(), 2, "one bandwidth heatmap per environment");
    // The journal is a campaign the CLI goes on with: it stops again the same way.
    let again = servetune().args(["campaign", "continue"]).arg(&out_dir).output().expect("continue");
    assert_eq!(again.status.code(), Some(last_code.parse::<i32>().expect("code")), "{}", String::from_utf8_lossy(&again.stdout));
    drop(c);

    // A second demo into the same folder starts afresh (the README's command, run twice): the
    // same story, and a journal of its own, not the first run's experiments with new ones added.
    let started_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as i64;
    let rerun = servetune().args(["demo", "-q", "--out"]).arg(&out_dir).output().expect("rerun demo");
    let restdout = String::from_utf8_lossy(&rerun.stdout);
    assert_eq!(rerun.status.code(), Some(0), "{restdout}\n{}", String::from_utf8_lossy(&rerun.stderr));
    assert!(restdout.contains("campaign continue -> exit 3, needs a person (question 1)"), "{restdout}");
    let c = Connection::open_with_flags(out_dir.join("journal.sqlite"), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).expect("journal");
    let oldest: i64 = c.query_row("SELECT min(created_at) FROM experiments", [], |r| r.get(0)).expect("experiments");
    assert!(
        oldest >= started_ms,
        "the rerun's journal holds its own experiments only: the oldest was planned at {oldest}, the rerun began at {started_ms}"
    );
}

/// One prediction per point: each experiment's best point carries the same predicted figure in the
/// JSON curve, the verdict finding, the HTML chart and the Markdown sweep; "explains" only inside
/// the interval; the track record lists the steps taken with their predicted and measured gains;
/// the log warning that every LXC launch repeats is one line.
fn verdicts_agree(r: &serde_json::Value, html: &str, md: &str) {
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    let warnings = r["warnings"].as_array().expect("warnings");
    for c in r["curves"].as_array().expect("curves") {
        let id = c["experiment"].as_i64().expect("id");
        let best = c["points"]
            .as_array()
            .expect("points")
            .iter()
            .max_by(|a, b| f(&a["output_tok_s"]).total_cmp(&f(&b["output_tok_s"])))
            .expect("point");
        let pred = f(&best["predicted_output_tok_s"]);
        let words = format!("vs {pred:.1} predicted");
        let verdict = warnings
            .iter()
            .find(|w| w["experiments"] == serde_json::json!([id]) && w["title"].as_str().is_some_and(|t| t.starts_with("measured")))
            .unwrap_or_else(|| panic!("a verdict for experiment {id}: {warnings:?}"));
        let evidence = verdict["evidence"].as_str().expect("evidence");
        assert!(evidence.contains(&words), "experiment {id}: the finding quotes the chart's {pred:.1}: {evidence}");
        assert!(html.contains(&format!("predicted {pred:.1} tok/s")), "experiment {id}: the HTML chart shows {pred:.1}");
        assert!(
            md.contains(&format!("| {id} | {}", best["concurrency"])) && md.contains(&format!("{pred:.1}")),
            "experiment {id} in the Markdown sweep"
        );
        let (lo, hi) = (f(&best["predicted_low"]), f(&best["predicted_high"]));
        let m = f(&best["output_tok_s"]);
        let explains = verdict["fix"].as_str().is_some_and(|x| x.contains("the model explains the measurement"));
        assert_eq!(explains, (lo..=hi).contains(&m), "experiment {id}: 'explains' only inside {lo}..{hi}: {verdict}");
    }
    let track = r["track_record"].as_array().expect("track record");
    let p2p = track.iter().find(|t| t["question"] == 1).expect("the P2P step in the track record");
    assert!(f(&p2p["predicted_raw"]) > 1.0 && f(&p2p["measured"]) > 1.0, "{p2p}");
    let cap =
        track.iter().find(|t| t["step"].as_str().is_some_and(|s| s.starts_with("raise the running-request cap"))).expect("the cap step");
    assert!(f(&cap["predicted_raw"]) > 1.0 && f(&cap["measured"]) > 0.0 && cap["inside"].is_boolean(), "{cap}");
    let moe: Vec<_> = warnings.iter().filter(|w| w["title"] == "fused-MoE kernels run with untuned default configs").collect();
    assert_eq!(moe.len(), 1, "one line for the repeated log warning: {moe:?}");
    assert!(moe[0]["experiments"].as_array().is_some_and(|e| e.len() >= 2), "it lists its experiments: {}", moe[0]);
}

/// README.md and docs/campaign.md quote the demo's figures that do not depend on a measurement:
/// the model alone's predictions at concurrency 128 of the two baselines, and its predicted gains
/// for the P2P move and the higher cap (the measured figures move with the simulated servers'
/// timing and are quoted as "about"). A change to the model or the campaign's predictions that
/// moves them fails here until the docs say the new figures.
fn the_docs_quote_the_models_own_figures(r: &serde_json::Value, lxc_base: i64) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(repo.join("README.md")).expect("README.md");
    let guide = std::fs::read_to_string(repo.join("docs/campaign.md")).expect("docs/campaign.md");
    let at_128 = |id: i64| {
        let c = r["curves"].as_array().expect("curves").iter().find(|c| c["experiment"] == id).expect("curve");
        let p = c["points"].as_array().expect("points").iter().find(|p| p["concurrency"] == 128).expect("c=128");
        p["predicted_output_tok_s"].as_f64().expect("predicted")
    };
    let (kvm, lxc) = (at_128(1), at_128(lxc_base));
    let both = format!("{kvm:.0} and {lxc:.0} tok/s");
    assert!(guide.contains(&both), "docs/campaign.md quotes the baselines' predictions as {both:?}");
    let gain = |pick: &dyn Fn(&serde_json::Value) -> bool| {
        let t = r["track_record"].as_array().expect("track record").iter().find(|t| pick(t)).expect("a track-record step");
        (t["predicted_raw"].as_f64().expect("predicted_raw") - 1.0) * 100.0
    };
    let p2p = gain(&|t| t["question"] == 1);
    let cap = gain(&|t| t["step"].as_str().is_some_and(|s| s.starts_with("raise the running-request cap")));
    for (doc, name) in [(&readme, "README.md"), (&guide, "docs/campaign.md")] {
        let alone = format!("+{p2p:.0}% by the model alone");
        assert!(doc.contains(&alone), "{name} quotes the P2P gain as {alone:?}");
    }
    let readme_cap = format!("the higher cap +{cap:.0}%");
    assert!(readme.contains(&readme_cap), "README.md quotes {readme_cap:?}");
    let guide_cap = format!("predicted +{cap:.0}% by the model alone");
    assert!(guide.contains(&guide_cap), "docs/campaign.md quotes {guide_cap:?}");
}

#[test]
fn demo_without_the_probe_fixtures_exits_2_naming_the_flag() {
    let d = tempfile::tempdir().expect("tmp");
    let out = servetune().args(["demo", "-q", "--out"]).arg(d.path().join("o")).arg("--fixtures").arg(d.path()).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--fixtures") && err.contains("proxmox-kvm-8gpu"), "{err}");
    assert!(!Path::new(&d.path().join("o/journal.sqlite")).exists());
}

/// The demo's report says what its journal holds: the task and experiment counts, one curve per
/// done experiment, the plateau explained with its evidence, and each environment's fabric record.
fn report_agrees_with_the_journal(c: &Connection, r: &serde_json::Value, md: &str) {
    // The report's counts are the journal's.
    for (field, state) in [("done", "done"), ("in_progress", "in_progress"), ("not_done", "not_done")] {
        assert_eq!(r["counts"][field].as_i64(), Some(count(c, &format!("SELECT count(*) FROM tasks WHERE state = '{state}'"))), "{field}");
    }
    assert_eq!(r["results"].as_array().map(Vec::len), Some(count(c, "SELECT count(*) FROM experiments") as usize));
    let done = count(c, "SELECT count(*) FROM experiments WHERE state = 'done'");
    assert_eq!(r["counts"]["experiments"]["done"].as_i64(), Some(done));
    assert_eq!(r["curves"].as_array().map(Vec::len), Some(done as usize), "one throughput line per done experiment");
    assert!(
        md.contains(&format!(
            "**{} done, {} in progress, {} not done**",
            r["counts"]["done"], r["counts"]["in_progress"], r["counts"]["not_done"]
        )),
        "{md}"
    );
    // The plateau is explained with evidence: the running cap and the model's step terms.
    let analysis = r["analysis"].to_string();
    for words in ["running-request cap", "MoE kernels at", "TP8 communication"] {
        assert!(analysis.contains(words), "analysis names {words}: {analysis}");
    }
    assert!(r["open_questions"].to_string().contains("fused-MoE tuning"), "{}", r["open_questions"]);
    // Each probed environment's interconnect is measured and drawn, traceable to its record.
    let fabric = r["fabric"].as_array().expect("fabric");
    assert_eq!(fabric.len(), 2, "the KVM guest and the LXC container");
    for (f, env, gbs, us) in [(&fabric[0], "kvm guest, no P2P", 29.4, 13.3), (&fabric[1], "lxc container, P2P", 50.0, 1.0)] {
        assert_eq!(f["environment"], env);
        let (bw, lat) = (f["bandwidth"]["values"][0][1].as_f64().expect("bw"), f["latency"]["values"][0][1].as_f64().expect("lat"));
        assert!((bw - gbs).abs() < 0.5 && (lat - us).abs() < 0.2, "{env}: {bw} GB/s, {lat} us");
        let rec = f["record"].as_i64().expect("record");
        let fp = f["fingerprint"].as_i64().expect("fingerprint");
        assert_eq!(count(c, &format!("SELECT count(*) FROM fabrics WHERE id = {rec} AND env_fingerprint = {fp}")), 1);
    }
}

/// `demo --out` a folder that holds files no demo wrote (a real campaign, a user's report) is
/// refused and the files kept (only a folder an earlier demo marked is cleaned for a rerun).
#[test]
fn demo_refuses_a_folder_it_did_not_write_and_keeps_its_files() {
    let d = tempfile::tempdir().expect("tmp");
    let campaign = d.path().join("campaign");
    std::fs::create_dir(&campaign).expect("mkdir");
    for f in ["journal.sqlite", "exp-7-a1.bench.json", "report.docx"] {
        std::fs::write(campaign.join(f), "measured").expect("write");
    }
    let out = servetune().args(["demo", "-q", "--out"]).arg(&campaign).output().expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds files no demo wrote"), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["journal.sqlite", "exp-7-a1.bench.json", "report.docx"] {
        assert_eq!(std::fs::read_to_string(campaign.join(f)).expect("kept"), "measured", "{f}");
    }
}

/// The demo folder's files, each holding "measured", and the demo's mark.
fn demo_folder(out: &Path) -> [&'static str; 4] {
    let files = ["journal.sqlite", "exp-1-a1.bench.json", "exp-1-a1.log", "fabric-kvm.json"];
    std::fs::create_dir_all(out).expect("mkdir");
    std::fs::write(out.join(".servetune-demo"), "written by servetune demo\n").expect("mark");
    for f in files {
        std::fs::write(out.join(f), "measured").expect("write");
    }
    files
}

/// A demo started on a folder where a demo runs (it holds the folder's lock) stops before it
/// removes anything: exit 2 naming the folder and the running one's pid.
#[test]
fn a_demo_on_a_folder_where_a_demo_runs_removes_nothing_and_names_its_pid() {
    let d = tempfile::tempdir().expect("tmp");
    let out = d.path().join("dd");
    let files = demo_folder(&out);
    let held = servetune_campaign::controller::lock(&out.join(".servetune-demo.lock")).expect("lock").expect("free");
    let run = servetune().args(["demo", "-q", "--out"]).arg(&out).output().expect("run");
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    let want = format!(
        "--out {}: a demo (pid {}) is running there; wait for it to finish, or give another --out",
        out.display(),
        std::process::id()
    );
    assert!(err.contains(&want), "{err}");
    for f in files {
        assert_eq!(std::fs::read_to_string(out.join(f)).expect("kept"), "measured", "{f}");
    }
    drop(held);
}

/// A demo started on a folder whose campaign a `campaign continue` runs (it holds the
/// controller's lock) stops before it removes anything, naming that process.
#[test]
fn a_demo_on_a_folder_where_campaign_continue_runs_removes_nothing_and_names_its_pid() {
    let d = tempfile::tempdir().expect("tmp");
    let out = d.path().join("dd");
    let files = demo_folder(&out);
    let held = servetune_campaign::controller::acquire(&out).expect("the controller's lock");
    let run = servetune().args(["demo", "-q", "--out"]).arg(&out).output().expect("run");
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("a servetune campaign continue (pid {}) is running there", std::process::id())), "{err}");
    for f in files {
        assert_eq!(std::fs::read_to_string(out.join(f)).expect("kept"), "measured", "{f}");
    }
    drop(held);
}
