//! Replays every kept hostile input, then fuzzes each target for a short, bounded time
//! (`SERVETUNE_FUZZ_SECS`, default 2 s; CI runs the `servetune-fuzz` binary for longer).

use std::path::Path;
use std::time::Duration;

use servetune_fuzz::{all_targets, check_one, fuzz, load_corpus, Target};

fn targets() -> Vec<Box<dyn Target>> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    all_targets(&here.join("../probe/tests/fixtures/proxmox-kvm-8gpu")).expect("the probe fixture copies")
}

fn corpus(t: &dyn Target) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(t.name());
    let c = load_corpus(&dir).expect("corpus readable");
    assert!(!c.is_empty(), "{} has no corpus in {}", t.name(), dir.display());
    c
}

fn budget() -> Duration {
    let secs = std::env::var("SERVETUNE_FUZZ_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(2);
    Duration::from_secs(secs)
}

#[test]
fn every_kept_hostile_input_is_handled() {
    for mut t in targets() {
        for (i, input) in corpus(t.as_ref()).iter().enumerate() {
            if let Err(e) = check_one(t.as_mut(), input) {
                panic!("{} corpus entry {i}: {e}", t.name());
            }
        }
    }
}

#[test]
fn the_oracles_catch_a_broken_target() {
    struct Panics;
    impl Target for Panics {
        fn name(&self) -> &'static str {
            "panics"
        }
        fn dictionary(&self) -> &'static [&'static str] {
            &["x"]
        }
        fn check(&mut self, input: &[u8]) -> Result<(), String> {
            assert!(!input.contains(&b'x'), "found an x");
            Ok(())
        }
    }
    let out = fuzz(&mut Panics, &[b"abc".to_vec()], Duration::from_millis(300), 3);
    assert!(!out.findings.is_empty(), "the fuzzer never produced an 'x' in {} execs", out.execs);
    assert!(out.findings[0].message.contains("found an x"), "{}", out.findings[0].message);
}

#[test]
fn fuzzing_each_target_finds_nothing() {
    for mut t in targets() {
        let c = corpus(t.as_ref());
        let out = fuzz(t.as_mut(), &c, budget(), 42);
        assert!(out.execs > c.len() as u64, "{} ran only {} inputs", t.name(), out.execs);
        if let Some(f) = out.findings.first() {
            panic!("{}: {} (input: {:?})", t.name(), f.message, String::from_utf8_lossy(&f.input));
        }
    }
}
