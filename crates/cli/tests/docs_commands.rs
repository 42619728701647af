//! Every command in README.md and docs/*.md runs as written.
//!
//! The convention, for whoever writes the docs:
//! - a ```` ```sh ```` block holds commands; they run in order, in one bash script per block, and
//!   each must exit 0 unless its trailing comment says `# exit N` (or `exit N or M`); a line ending
//!   in `&` starts a background job, which is stopped when the block ends;
//! - a ```` ```console ```` block holds `$ command` lines, each followed by what it prints; every
//!   printed line must appear in the command's output (a line `...` stands for lines left out, and
//!   text after `...` inside a line is not compared);
//! - a block that cannot run here (it needs a GPU, a cluster, a server or a long build) is preceded
//!   by `<!-- not run: REASON -->`, and the reason is required;
//! - commands appear in no other kind of block, so none escapes this test.
//!
//! Each file runs in a fresh temporary directory with a fresh `HOME` and `TMPDIR`, the repository's
//! `crates` and `scripts` folders linked in, and the debug `servetune` first on the `PATH`.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Files whose blocks are not checked for hidden commands, and why. Their `sh`/`console` blocks
/// still run.
const SYNOPSIS_ONLY: &[(&str, &str)] = &[("docs/design.md", "its command synopsis is a diagram with placeholders (URL, ADDR)")];

/// A fenced block of a Markdown file.
#[derive(Debug)]
struct Block {
    /// `path:line` of the opening fence.
    at: String,
    /// The fence's info string (`sh`, `console`, `text`, or empty).
    lang: String,
    /// The lines inside the fence.
    lines: Vec<String>,
    /// The reason given by a `<!-- not run: REASON -->` comment right before the fence.
    not_run: Option<String>,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository root")
}

/// README.md and every docs/*.md, as paths relative to the repository root.
fn doc_files() -> Vec<String> {
    let mut files = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("a docs/ entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The fenced blocks of `file`; panics on a `not run` comment that no block follows.
fn blocks(file: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(repo().join(file)).expect("a doc file");
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        if let Some(b) = open.as_mut() {
            if line.trim_start().starts_with("```") {
                out.push(open.take().expect("an open block"));
            } else {
                b.lines.push(line.to_string());
            }
            continue;
        }
        if let Some(fence) = line.trim_start().strip_prefix("```") {
            let not_run = pending.take().map(|(_, r)| r);
            open = Some(Block { at: format!("{file}:{}", i + 1), lang: fence.trim().to_string(), lines: Vec::new(), not_run });
            continue;
        }
        if let Some((at, _)) = &pending {
            panic!("{file}:{at}: a `not run` comment must come right before the fenced block it is about");
        }
        if let Some(rest) = line.trim().strip_prefix("<!-- not run") {
            let reason = rest.trim_start_matches(':').trim_end_matches("-->").trim().to_string();
            pending = Some((i + 1, reason));
        }
    }
    assert!(open.is_none(), "{file}: a fenced block is never closed");
    assert!(pending.is_none(), "{file}: a `not run` comment at the end of the file has no block");
    out
}

fn runnable(b: &Block) -> bool {
    b.lang == "sh" || b.lang == "console"
}

/// The logical command lines of a `sh` block (continuation lines joined), with their line numbers.
fn commands(lines: &[String]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut cur: Option<(usize, String)> = None;
    for (i, line) in lines.iter().enumerate() {
        let (n, mut text) = cur.take().unwrap_or((i, String::new()));
        let l = line.trim_end();
        match l.strip_suffix('\\') {
            Some(head) => {
                text.push_str(head);
                text.push(' ');
                cur = Some((n, text));
            }
            None => {
                text.push_str(l);
                if !text.trim().is_empty() {
                    out.push((n, text));
                }
            }
        }
    }
    assert!(cur.is_none(), "a command ends with a line continuation: {lines:?}");
    out
}

/// The exit codes a command's trailing comment allows (`# exit 3`, `# ... exit 3 or 4 ...`); 0
/// when the comment names none.
fn expected_exits(cmd: &str) -> Vec<i32> {
    let Some((_, comment)) = cmd.split_once(" # ") else { return vec![0] };
    let Some((_, after)) = comment.split_once("exit ") else { return vec![0] };
    let mut codes = Vec::new();
    for word in after.split_whitespace() {
        let digits: String = word.chars().take_while(char::is_ascii_digit).collect();
        match digits.parse() {
            Ok(c) => codes.push(c),
            Err(_) if word == "or" => {}
            Err(_) => break,
        }
    }
    if codes.is_empty() {
        vec![0]
    } else {
        codes
    }
}

/// A fresh place to run one file's blocks: `HOME`, `TMPDIR`, and a working directory with the
/// repository's `crates` and `scripts` linked in.
struct Sandbox {
    _dir: tempfile::TempDir,
    home: PathBuf,
    tmp: PathBuf,
    work: PathBuf,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (home, tmp, work) = (dir.path().join("home"), dir.path().join("tmp"), dir.path().join("work"));
        for d in [&home, &tmp, &work] {
            std::fs::create_dir_all(d).expect("a sandbox directory");
        }
        for link in ["crates", "scripts"] {
            std::os::unix::fs::symlink(repo().join(link), work.join(link)).expect("a link into the repository");
        }
        Self { _dir: dir, home, tmp, work }
    }

    /// `bash` running `script` in the sandbox, with the debug binary first on the PATH.
    fn bash(&self, script: &str) -> assert_cmd::Command {
        let bin_dir = Path::new(env!("CARGO_BIN_EXE_servetune")).parent().expect("the binary's folder").to_path_buf();
        let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
        let mut cmd = assert_cmd::Command::new("bash");
        cmd.arg("-c").arg(script).current_dir(&self.work);
        cmd.env("HOME", &self.home).env("TMPDIR", &self.tmp).env("PATH", path);
        for var in ["XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "OPENAI_API_KEY", "CARGO_TARGET_DIR"] {
            cmd.env_remove(var);
        }
        // The slowest block takes about 20 s with the debug binary; a server that never listens
        // ends the wait here rather than hanging the suite.
        cmd.timeout(Duration::from_secs(300));
        cmd
    }
}

/// The bash script of a `sh` block: each command, then a check of its exit code.
fn sh_script(b: &Block) -> String {
    let mut s = String::from("trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n");
    for (n, cmd) in commands(&b.lines) {
        s.push_str(&cmd);
        s.push('\n');
        if cmd.split(" # ").next().unwrap_or("").trim_end().ends_with('&') {
            continue;
        }
        let want = expected_exits(&cmd);
        let pattern: Vec<String> = want.iter().map(i32::to_string).collect();
        s.push_str(&format!(
            "__rc=$?; case $__rc in {}) ;; *) echo \"docs_commands: {} (+{n}): exit $__rc, the text says {want:?}\" >&2; exit 100;; esac\n",
            pattern.join("|"),
            b.at
        ));
    }
    s
}

fn run_sh(sandbox: &Sandbox, b: &Block) {
    let out = sandbox.bash(&sh_script(b)).output().expect("bash runs");
    assert!(
        out.status.success(),
        "{}: the block fails as written ({}):\n--- stdout\n{}\n--- stderr\n{}",
        b.at,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `$ command`s of a `console` block, each with the lines it is shown printing.
fn console_steps(b: &Block) -> Vec<(String, Vec<String>)> {
    let mut steps: Vec<(String, Vec<String>)> = Vec::new();
    for line in &b.lines {
        match line.strip_prefix("$ ") {
            Some(cmd) => steps.push((cmd.to_string(), Vec::new())),
            None => match steps.last_mut() {
                Some((_, shown)) => shown.push(line.clone()),
                None => panic!("{}: a console block must start with a `$ ` command", b.at),
            },
        }
    }
    steps
}

fn run_console(sandbox: &Sandbox, b: &Block) {
    for (cmd, shown) in console_steps(b) {
        let out = sandbox.bash(&cmd).output().expect("bash runs");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let code = out.status.code().unwrap_or(-1);
        assert!(expected_exits(&cmd).contains(&code), "{}: `{cmd}` exits {code}:\n{text}", b.at);
        for line in shown {
            let compared = line.split("...").next().unwrap_or("").trim_end();
            if compared.trim().is_empty() {
                continue;
            }
            assert!(text.contains(compared), "{}: `{cmd}` no longer prints the line shown:\n  {compared}\nit prints:\n{text}", b.at);
        }
    }
}

#[test]
fn every_block_that_is_not_run_says_why() {
    let mut skipped = 0;
    for file in doc_files() {
        for b in blocks(&file) {
            let Some(reason) = &b.not_run else { continue };
            assert!(runnable(&b), "{}: a `not run` comment stands before a `{}` block, which is never run anyway", b.at, b.lang);
            assert!(reason.split_whitespace().count() >= 2, "{}: `<!-- not run: REASON -->` needs a reason, got {reason:?}", b.at);
            skipped += 1;
        }
    }
    assert!(skipped > 0, "the README's demo block is marked `not run`, so at least one is expected");
}

#[test]
fn commands_are_only_in_blocks_that_run() {
    for file in doc_files() {
        if SYNOPSIS_ONLY.iter().any(|(f, _)| *f == file) {
            continue;
        }
        for b in blocks(&file).iter().filter(|b| !runnable(b)) {
            if let Some(l) = b.lines.iter().find(|l| l.starts_with("$ ") || l.starts_with("servetune ")) {
                panic!("{}: a command in a `{}` block escapes the docs test: {l:?}; use ```sh or ```console", b.at, b.lang);
            }
        }
    }
}

#[test]
fn expected_exit_codes_come_from_the_trailing_comment() {
    assert_eq!(expected_exits("servetune plan --rank"), vec![0]);
    assert_eq!(expected_exits("servetune campaign continue c --until-blocked   # exit 3: the P2P question"), vec![3]);
    assert_eq!(expected_exits("x   # baseline, caps; exit 3 or 4 (a question, or nothing left)"), vec![3, 4]);
    assert_eq!(expected_exits("x # where it stands"), vec![0]);
}

#[test]
fn every_command_in_the_readme_and_docs_runs_as_written() {
    let mut ran = 0;
    for file in doc_files() {
        let sandbox = Sandbox::new();
        for b in blocks(&file).iter().filter(|b| runnable(b) && b.not_run.is_none()) {
            match b.lang.as_str() {
                "sh" => run_sh(&sandbox, b),
                _ => run_console(&sandbox, b),
            }
            ran += 1;
        }
    }
    assert!(ran >= 10, "only {ran} blocks ran: the README's tour alone has more");
}

#[test]
fn every_relative_link_points_to_a_file_in_the_repository() {
    let mut checked = 0;
    for file in doc_files() {
        let text = std::fs::read_to_string(repo().join(&file)).expect("a doc file");
        let dir = repo().join(&file).parent().expect("the file's folder").to_path_buf();
        for piece in text.split("](").skip(1) {
            let Some(target) = piece.split(')').next() else { continue };
            if target.contains("://") || target.starts_with('#') || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let path = target.split('#').next().unwrap_or("");
            assert!(dir.join(path).exists(), "{file}: the link ({target}) names no file in the repository");
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} links found: the README alone links every command page");
}
