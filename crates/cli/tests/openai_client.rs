//! A real client nobody here wrote: the `openai` Python package against `servetune sim`.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};

#[test]
fn openai_python_client_streams_completions_and_chat_from_sim() {
    if std::env::var_os("SERVETUNE_SKIP_LLAMA").is_some() {
        eprintln!("SERVETUNE_SKIP_LLAMA is set: skipping the Python client test");
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = std::env::var_os("SERVETUNE_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv-test"));
    let py = venv.join("bin/python");
    assert!(
        py.exists(),
        "{} is missing: run scripts/setup-test-env",
        py.display()
    );
    let mut sim = Command::new(assert_cmd::cargo::cargo_bin("servetune"))
        .args(["sim", "--preset", "tiny", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start sim");
    let mut line = String::new();
    std::io::BufReader::new(sim.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    let url = line
        .trim()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .to_string();
    let out = Command::new(&py)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/openai_client.py"))
        .arg(&url)
        .output()
        .expect("run python");
    let _ = sim.kill();
    let _ = sim.wait();
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("openai client ok"));
}
