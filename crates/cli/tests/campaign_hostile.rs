//! The campaign's output under hostile text in its journal (a server's log line, a model id, an
//! answer): Markdown keeps pipes and HTML as text, the terminal gets control characters escaped,
//! and a failed write to standard output is an error.

use std::path::{Path, PathBuf};

use crate::common::servetune;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A copy of the committed `report-kvm` fixture journal with a finding whose text is hostile.
fn hostile_journal(tmp: &Path) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../campaign/tests/fixtures/report-kvm");
    let dir = tmp.join("c");
    std::fs::create_dir_all(&dir).expect("dir");
    for e in std::fs::read_dir(&src).expect("fixture") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), dir.join(e.file_name())).expect("copy");
    }
    let c = rusqlite::Connection::open(dir.join("journal.sqlite")).expect("open");
    c.execute(
        "INSERT INTO findings(source, code, severity, title, evidence, fix, experiment, created_at) VALUES ('log', 'moe_default_config', 'warning', ?1, ?2, ?3, 1, 0)",
        ["title\x1b]0;pwned\x07 | cell", "a|b <script>alert(1)</script> [x](javascript:y)", "run `rm -rf /`\nnext line"],
    )
    .expect("insert");
    c.execute("INSERT INTO tasks(title, state, updated_at) VALUES ('model \x1b[2Jwipe\x07 id', 'not_done', 0)", []).expect("task");
    dir
}

#[test]
fn report_markdown_keeps_pipes_and_html_from_outside_text_as_text() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = hostile_journal(d.path());
    let md = d.path().join("r.md");
    let out = servetune().args(["campaign", "report", s(&dir), "--markdown", s(&md)]).output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&md).expect("md");
    let line = text.lines().find(|l| l.contains("pwned")).expect("the finding's line");
    assert!(!text.contains("<script>") && line.contains("&lt;script>"), "{line}");
    assert!(line.contains("a\\|b") && line.contains("\\[x\\](javascript:y)"), "{line}");
    assert!(!text.contains('\x1b') && !text.contains('\x07'), "control characters escaped");
    assert!(line.contains("next line"), "the newline in a field does not start a new Markdown line: {line}");
}

#[test]
fn status_on_a_terminal_shows_control_characters_escaped() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = hostile_journal(d.path());
    let out = servetune().args(["campaign", "status", s(&dir)]).output().expect("status");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.stdout.contains(&0x1b) && !out.stdout.contains(&0x07), "{text}");
    assert!(text.contains("model \\x1b[2Jwipe\\x07 id"), "shown escaped: {text}");
}

#[test]
fn a_failed_write_to_standard_output_exits_1_naming_it() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = hostile_journal(d.path());
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
    let bin = assert_cmd::cargo::cargo_bin("servetune");
    let out = std::process::Command::new(bin).args(["campaign", "status", s(&dir)]).stdout(full).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("No space left on device"), "{err}");
}

/// An engine whose knob sets HF_TOKEN, and whose "server" writes the token and the model it got to
/// a file, then exits.
fn secret_engine(tmp: &Path, seen: &Path) -> PathBuf {
    let engines = tmp.join("engines.toml");
    let body = format!(
        "[[engine]]\nname = \"tell\"\nargv = [\"sh\", \"-c\", \"printf '%s %s' \\\"$HF_TOKEN\\\" '{{model}}' > {}; exit 3\"]\nhealth = \"/health\"\ngenerate = \"/v1/completions\"\nready_timeout_s = 5\nknobs = [{{ name = \"hf_token\", domain = \"text\", env = \"HF_TOKEN\" }}]\n",
        seen.display()
    );
    std::fs::write(&engines, body).expect("engines");
    engines
}

#[test]
fn secret_knob_values_and_url_passwords_reach_the_server_but_no_journal_or_report() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    let seen = d.path().join("seen");
    let engines = secret_engine(d.path(), &seen);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../probe/tests/fixtures/no-gpu");
    let out = servetune()
        .args(["campaign", "init", s(&dir), "--engine", "tell", "--engines", s(&engines)])
        .args(["--model", "https://me:pa55word@models.example/org/m", "--goal", "output_tok_s>=1", "--probe-root", s(&root)])
        .args(["--set", "hf_token=hf_s3cret", "--concurrency", "1", "--requests", "1"])
        .output()
        .expect("init");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = servetune().args(["campaign", "continue", s(&dir)]).output().expect("continue");
    let said = [out.stdout, out.stderr].concat();
    assert_eq!(std::fs::read_to_string(&seen).expect("the server ran"), "hf_s3cret https://me:pa55word@models.example/org/m");
    let report = d.path().join("r.md");
    let json = d.path().join("r.json");
    assert_eq!(
        servetune()
            .args(["campaign", "report", s(&dir), "--markdown", s(&report), "--json", s(&json)])
            .output()
            .expect("report")
            .status
            .code(),
        Some(0)
    );
    for secret in ["hf_s3cret", "pa55word"] {
        let hay = [
            std::fs::read(dir.join("journal.sqlite")).expect("journal"),
            std::fs::read(dir.join("journal.sqlite-wal")).unwrap_or_default(),
            std::fs::read(&report).expect("md"),
            std::fs::read(&json).expect("json"),
            said.clone(),
        ];
        for (i, h) in hay.iter().enumerate() {
            assert!(!String::from_utf8_lossy(h).contains(secret), "{secret} written in place {i}");
        }
    }
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(dir.join("secrets.json")).expect("the secrets file").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "readable by its owner only");
}

#[test]
fn a_journal_another_process_holds_is_called_locked_with_its_path_not_corrupt() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = hostile_journal(d.path());
    let mut c = rusqlite::Connection::open(dir.join("journal.sqlite")).expect("open");
    let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive).expect("lock");
    let out = servetune().args(["campaign", "note", s(&dir), "a note"]).output().expect("run");
    drop(tx);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("locked by another process") && err.contains("journal.sqlite"), "{err}");
    assert!(!err.contains("corrupt"), "{err}");
}

#[test]
fn a_second_continue_on_a_running_campaign_names_the_first_ones_pid() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../probe/tests/fixtures/proxmox-lxc-8gpu");
    let out = servetune()
        .args(["campaign", "init", s(&dir), "--engine", "sim", "--model", "qwen3-30b-a3b", "--goal", "output_tok_s>=100000"])
        .args(["--probe-root", s(&root), "--concurrency", "4,16", "--requests", "32", "--input-len", "64", "--output-len", "64"])
        .output()
        .expect("init");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let bin = assert_cmd::cargo::cargo_bin("servetune");
    let mut first = std::process::Command::new(&bin)
        .args(["campaign", "continue", s(&dir)])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("first");
    // Wait until the first one holds the campaign (its pid is in the lock file).
    let lock = dir.join("controller.lock");
    let t = std::time::Instant::now();
    while std::fs::read_to_string(&lock).unwrap_or_default().trim() != first.id().to_string() {
        assert!(t.elapsed() < std::time::Duration::from_secs(30), "the first continue never took the campaign");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let second = servetune().args(["campaign", "continue", s(&dir)]).output().expect("second");
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("another servetune campaign continue (pid {})", first.id())), "{err}");
    assert!(first.wait().expect("wait").success(), "the first one went on undisturbed");
}

/// `campaign report` (or `compare`) told to write over the campaign's own journal is refused
/// and the journal kept; `init` refuses a request timeout of 0 and an empty model at once.
#[test]
fn a_report_over_the_journal_and_init_with_a_zero_timeout_or_no_model_are_refused() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = hostile_journal(d.path());
    let journal = dir.join("journal.sqlite");
    let before = std::fs::read(&journal).expect("journal");
    for flag in ["--html", "--markdown", "--json"] {
        let out = servetune().args(["campaign", "report", s(&dir), flag, s(&journal)]).output().expect("report");
        assert_eq!(out.status.code(), Some(2), "{flag}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("that is the campaign's journal.sqlite"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = servetune().args(["campaign", "compare", s(&dir), s(&dir), "--html", s(&journal)]).output().expect("compare");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&journal).expect("kept"), before);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../probe/tests/fixtures/proxmox-lxc-8gpu");
    for (extra, want) in [
        (["--model", "qwen3-30b-a3b", "--request-timeout", "0s"], "--request-timeout 0s"),
        (["--model", " ", "--request-timeout", "60s"], "--model \" \""),
    ] {
        let c = d.path().join("new");
        let out = servetune()
            .args(["campaign", "init", s(&c), "--engine", "sim", "--goal", "output_tok_s>=100", "--probe-root", s(&root)])
            .args(extra)
            .output()
            .expect("init");
        assert_eq!(out.status.code(), Some(2), "{want}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stderr).contains(want), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(!c.join("journal.sqlite").exists(), "nothing started");
    }
}

/// A journal whose rows hold values of the wrong shape (a hand edit, another version) is bad
/// input: exit 2, saying the journal holds a value this servetune cannot read and what to do.
#[test]
fn a_journal_row_of_the_wrong_shape_is_exit_2_with_what_to_do() {
    for edit in [
        "UPDATE experiments SET knobs = x'00ff' WHERE id = 1",
        "UPDATE experiments SET knobs = '[1,2]' WHERE id = 1",
        "UPDATE experiments SET state = 'exploded' WHERE id = 1",
        "DELETE FROM campaign",
    ] {
        let d = tempfile::tempdir().expect("tmp");
        let dir = hostile_journal(d.path());
        rusqlite::Connection::open(dir.join("journal.sqlite")).expect("open").execute_batch(edit).expect(edit);
        let out = servetune().args(["campaign", "status", s(&dir)]).output().expect("status");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{edit}: {err}");
        assert!(err.contains("journal.sqlite holds a value this servetune cannot read"), "{edit}: {err}");
    }
}

/// A knob given twice to `campaign add` is refused, not the last value taken silently.
#[test]
fn a_knob_set_twice_is_refused() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = hostile_journal(d.path());
    let out = servetune().args(["campaign", "add", s(&dir), "--set", "max_running=8", "--set", "max_running=16"]).output().expect("add");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("max_running is already set to 8"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `campaign report` and `compare` told to write over what the campaign measured (an
/// experiment's bench result or server log, in the folder or where the journal names it, or a
/// fabric document) are refused naming the experiment, and the measured files are kept.
#[test]
fn a_report_over_an_experiments_measured_files_or_a_fabric_document_is_refused_and_they_are_kept() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = hostile_journal(d.path());
    let measured = ["exp-3-a1.bench.json", "exp-3-a1.log", "fabric-kvm.json"];
    for f in measured {
        std::fs::write(dir.join(f), "measured").expect("write");
    }
    // The fixture's journal names experiment 2's bench result as kvm/exp-2-a1.bench.json (from the cwd).
    std::fs::create_dir(d.path().join("kvm")).expect("mkdir");
    std::fs::write(d.path().join("kvm/exp-2-a1.bench.json"), "measured").expect("write");
    let cases = [
        (dir.join("exp-3-a1.bench.json"), "that is experiment 3's measured bench result"),
        (dir.join("exp-3-a1.log"), "that is experiment 3's server log"),
        (dir.join("fabric-kvm.json"), "that is a fabric document the campaign measured"),
        (PathBuf::from("kvm/exp-2-a1.bench.json"), "that is experiment 2's measured bench result"),
    ];
    for (path, want) in &cases {
        for flag in ["--html", "--markdown", "--json"] {
            let out = servetune().current_dir(d.path()).args(["campaign", "report", s(&dir), flag, s(path)]).output().expect("report");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{flag} {}: {err}", path.display());
            assert!(err.contains(want) && err.contains("give another file"), "{err}");
        }
        let out =
            servetune().current_dir(d.path()).args(["campaign", "compare", s(&dir), s(&dir), "--json", s(path)]).output().expect("compare");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{err}");
    }
    for f in measured {
        assert_eq!(std::fs::read_to_string(dir.join(f)).expect("kept"), "measured", "{f}");
    }
    assert_eq!(std::fs::read_to_string(d.path().join("kvm/exp-2-a1.bench.json")).expect("kept"), "measured");
}

/// `campaign init FILE` on an existing file is bad input naming it: exit 2, not "cannot create it".
#[test]
fn init_on_an_existing_file_is_exit_2_saying_it_is_a_file_not_a_folder() {
    let d = tempfile::tempdir().expect("tmp");
    let file = d.path().join("afile");
    std::fs::write(&file, "x").expect("write");
    let out = servetune()
        .args(["campaign", "init", s(&file), "--engine", "sim", "--model", "qwen3-30b-a3b", "--goal", "output_tok_s>=1000"])
        .output()
        .expect("init");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("{} is a file, not a folder; give a new or empty folder", file.display())), "{err}");
    assert_eq!(std::fs::read_to_string(&file).expect("kept"), "x");
}

/// A probe of more GPUs than the engine's tp allows is told where tp came from and how to set it.
#[test]
fn init_on_a_probe_with_more_gpus_than_tp_allows_says_the_value_came_from_the_gpu_count() {
    let d = tempfile::tempdir().expect("tmp");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../probe/tests/fixtures/proxmox-kvm-8gpu");
    let big = d.path().join("big");
    assert!(std::process::Command::new("cp").arg("-a").arg(&src).arg(&big).status().expect("cp").success());
    let nvml = big.join("nvml.json");
    let mut doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&nvml).expect("nvml")).expect("json");
    let g = doc["gpus"][0].clone();
    doc["gpus"] = (0..100)
        .map(|i| {
            let mut x = g.clone();
            x["index"] = i.into();
            x
        })
        .collect();
    std::fs::write(&nvml, doc.to_string()).expect("write");
    let c = d.path().join("cbig");
    let out = servetune()
        .args(["campaign", "init", s(&c), "--engine", "sim", "--model", "qwen3-30b-a3b", "--goal", "output_tok_s>=1000"])
        .args(["--probe-root", s(&big)])
        .output()
        .expect("init");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("tp=100") && err.contains("{gpus} is 100, the GPU count (--gpus, else the probe's)"), "{err}");
    assert!(err.contains("--set tp=VALUE"), "{err}");
    assert!(!c.join("journal.sqlite").exists(), "nothing started");
}

/// Another program's SQLite file at the journal's name is not called corrupt.
#[test]
fn another_programs_sqlite_file_is_not_a_journal_rather_than_corrupt() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("other");
    std::fs::create_dir(&dir).expect("mkdir");
    rusqlite::Connection::open(dir.join("journal.sqlite")).and_then(|c| c.execute_batch("CREATE TABLE t(a);")).expect("db");
    let out = servetune().args(["campaign", "status", s(&dir)]).output().expect("status");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is an SQLite database but not a servetune campaign journal (no meta table)"), "{err}");
    assert!(!err.contains("corrupt") && !err.contains("backup"), "{err}");
}
