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
        "INSERT INTO findings(source, code, severity, title, evidence, fix, experiment, created_at) VALUES ('log', 'x', 'warning', ?1, ?2, ?3, 1, 0)",
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
    assert!(!text.contains("<script>") && line.contains("&lt;script&gt;"), "{line}");
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
    assert!(text.contains("model \\u{1b}[2Jwipe\\u{7} id"), "shown escaped: {text}");
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
