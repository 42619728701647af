//! A real client nobody here wrote: the `openai` Python package against `servetune sim`.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn openai_python_client_streams_completions_and_chat_from_sim() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = std::env::var_os("SERVETUNE_TEST_VENV").map(PathBuf::from).unwrap_or_else(|| root.join(".venv-test"));
    let py = venv.join("bin/python");
    assert!(py.exists(), "{} is missing: run scripts/setup-test-env", py.display());
    let sim = crate::common::Proc::start(&["sim", "--preset", "tiny", "--listen", "127.0.0.1:0"]);
    let url = sim.url.clone();
    let out = Command::new(&py)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/openai_client.py"))
        .arg(&url)
        .output()
        .expect("run python");
    drop(sim);
    assert!(out.status.success(), "stdout: {}\nstderr: {}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("openai client ok"));
}
