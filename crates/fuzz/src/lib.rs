//! Time-bounded mutation fuzzing of the parsers that read untrusted input: the SSE stream parser
//! (server bytes), `config.json` (user files), probe snapshots (sysfs/procfs text), the
//! simulator's HTTP request parsing (client bytes), profiler traces (`servetune trace`'s
//! streaming JSON scanner and analysis), the campaign's HTTP response reader (server bytes), engine
//! template files, fabric documents, and hostile snapshot trees (symlinks out, loops, FIFOs).
//!
//! Coverage-guided fuzzers (cargo-fuzz, AFL) need a nightly toolchain or compiler plugins that CI
//! does not have; this runner needs neither. Each target states an oracle beyond "no panic" where
//! the format gives one (split-invariance for SSE, plausible parameter counts for a model), and
//! every hostile case found or written by hand is kept in `corpus/<target>/` and replayed by the
//! tests.

#![warn(missing_docs)]

pub mod mutate;
pub mod targets;

use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::Once;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub use targets::{all_targets, Target};

/// An input that broke a target: it panicked, or its oracle failed.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The input, as fed to the target.
    pub input: Vec<u8>,
    /// The panic message or the oracle's complaint.
    pub message: String,
}

/// What one fuzzing run did.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Inputs executed (corpus replays included).
    pub execs: u64,
    /// Inputs that broke the target (at most [`MAX_FINDINGS`] kept).
    pub findings: Vec<Finding>,
}

/// A run stops collecting after this many findings (the first few are what a fix needs).
pub const MAX_FINDINGS: usize = 8;

/// Runs `input` through `target`, turning a panic into a finding.
pub fn check_one(target: &mut dyn Target, input: &[u8]) -> Result<(), String> {
    quiet_panics();
    QUIET.with(|q| q.set(true));
    let r = panic::catch_unwind(AssertUnwindSafe(|| target.check(input)));
    QUIET.with(|q| q.set(false));
    match r {
        Ok(res) => res,
        Err(p) => Err(format!("panicked: {}", panic_text(&p))),
    }
}

/// Replays `corpus`, then mutates it until `budget` has passed. `seed` makes a run repeatable.
pub fn fuzz(target: &mut dyn Target, corpus: &[Vec<u8>], budget: Duration, seed: u64) -> Outcome {
    let mut out = Outcome::default();
    let seeds: Vec<Vec<u8>> = if corpus.is_empty() { vec![Vec::new()] } else { corpus.to_vec() };
    for input in &seeds {
        record(&mut out, input, check_one(target, input));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let end = Instant::now().checked_add(budget).unwrap_or_else(Instant::now);
    while Instant::now() < end && out.findings.len() < MAX_FINDINGS {
        let base = &seeds[rng.gen_range(0..seeds.len())];
        let other = &seeds[rng.gen_range(0..seeds.len())];
        let input = mutate::mutate(&mut rng, base, other, target.dictionary());
        let res = check_one(target, &input);
        record(&mut out, &input, res);
    }
    out
}

fn record(out: &mut Outcome, input: &[u8], res: Result<(), String>) {
    out.execs += 1;
    if let Err(message) = res {
        if out.findings.len() < MAX_FINDINGS {
            out.findings.push(Finding { input: input.to_vec(), message });
        }
    }
}

/// Reads every file of `dir` (sorted by name) as one corpus entry; a missing folder is empty.
pub fn load_corpus(dir: &Path) -> std::io::Result<Vec<Vec<u8>>> {
    let mut names: Vec<_> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_file()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    names.sort();
    names.iter().map(std::fs::read).collect()
}

thread_local! {
    /// Set while a target runs on this thread: its panics are findings, not noise on stderr.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Installs (once) a panic hook that stays silent for fuzzed calls and prints as usual otherwise.
fn quiet_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                default(info);
            }
        }));
    });
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic".into())
}
