//! `servetune-fuzz [TARGET...] [--seconds N] [--seed S]`: fuzzes each target for N seconds from
//! its corpus (`crates/fuzz/corpus/<target>/`), prints executions and findings, writes each
//! finding to `target/fuzz-findings/`, and exits 1 when any target broke.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use servetune_fuzz::{all_targets, fuzz, load_corpus};

struct Args {
    names: Vec<String>,
    seconds: u64,
    seed: u64,
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args { names: Vec::new(), seconds: 10, seed: 1 };
    while let Some(x) = it.next() {
        let mut num = |flag: &str| -> Result<u64, String> {
            it.next().and_then(|v| v.parse().ok()).ok_or_else(|| format!("{flag} needs a whole number, e.g. {flag} 60"))
        };
        match x.as_str() {
            "--seconds" => {
                a.seconds = num("--seconds")?;
                if !(1..=86_400).contains(&a.seconds) {
                    return Err(format!("--seconds {} is out of range: give 1 to 86400", a.seconds));
                }
            }
            "--seed" => a.seed = num("--seed")?,
            "-h" | "--help" => {
                return Err(
                    "usage: servetune-fuzz [sse|model_config|probe_tree|sim_request|trace|http_response|engine_toml|fabric_doc|snapshot_tree ...] [--seconds N (default 10)] [--seed S]"
                        .into(),
                )
            }
            _ => a.names.push(x),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixture = here.join("../probe/tests/fixtures/proxmox-kvm-8gpu");
    let mut targets = match all_targets(&fixture) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cannot prepare the probe target from {}: {e}", fixture.display());
            return ExitCode::from(1);
        }
    };
    let known: Vec<&str> = targets.iter().map(|t| t.name()).collect();
    if let Some(bad) = args.names.iter().find(|n| !known.contains(&n.as_str())) {
        eprintln!("unknown fuzz target {bad:?}; known: {}", known.join(", "));
        return ExitCode::from(2);
    }
    let mut broke = false;
    for t in targets.iter_mut().filter(|t| args.names.is_empty() || args.names.iter().any(|n| n == t.name())) {
        broke |= run_target(t.as_mut(), here, args.seconds, args.seed);
    }
    if broke {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Fuzzes one target; true when it broke.
fn run_target(t: &mut dyn servetune_fuzz::Target, here: &Path, seconds: u64, seed: u64) -> bool {
    let corpus = match load_corpus(&here.join("corpus").join(t.name())) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}: cannot read its corpus: {e}", t.name());
            return true;
        }
    };
    let out = fuzz(t, &corpus, Duration::from_secs(seconds), seed);
    println!("{:<13} {:>9} execs in {seconds} s ({} corpus entries), {} findings", t.name(), out.execs, corpus.len(), out.findings.len());
    let dir: PathBuf = here.join("../../target/fuzz-findings");
    for (i, f) in out.findings.iter().enumerate() {
        let path = dir.join(format!("{}-{i}.bin", t.name()));
        let saved = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, &f.input));
        let at = match saved {
            Ok(()) => path.display().to_string(),
            Err(e) => format!("(not saved: {e})"),
        };
        println!("  finding {i}: {} -> {at}", f.message);
    }
    !out.findings.is_empty()
}
