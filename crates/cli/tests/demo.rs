//! `servetune demo`, as the README runs it: the sweep, its findings, and what it writes.

use crate::common::{num, servetune};

/// Masks every standalone number (not part of a name such as `p99`, `E2E`, `GLM-5` or a label such
/// as `c=64`), so the snapshot holds the structure and the words, not the timings.
fn mask(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        // A signed number (" -9%", "| +12%") is masked whole, sign included.
        let signed = (b[i] == b'-' || b[i] == b'+')
            && i + 1 < b.len()
            && b[i + 1].is_ascii_digit()
            && (i == 0 || matches!(b[i - 1], b' ' | b'|' | b'('));
        if signed {
            i += 1;
            while i < b.len() && (b[i].is_ascii_digit() || (b[i] == b'.' && i + 1 < b.len() && b[i + 1].is_ascii_digit())) {
                i += 1;
            }
            out.push('N');
            continue;
        }
        if b[i].is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_digit() || (b[i] == b'.' && i + 1 < b.len() && b[i + 1].is_ascii_digit())) {
                i += 1;
            }
            let prev = if start > 0 { b[start - 1] } else { b' ' };
            let keep = prev.is_ascii_alphanumeric() || prev == b'-' || prev == b'=' || prev == b'_';
            out.push_str(if keep { &s[start..i] } else { "N" });
        } else {
            let ch = s[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

#[test]
fn demo_runs_the_reference_sweep_and_writes_results() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = servetune().args(["demo", "-q", "--out"]).arg(dir.path().join("out")).output().expect("run demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("saturation: throughput plateaus at"), "{stdout}");
    assert!(stdout.contains("caps concurrency at 64"), "the server-metrics summary names the limit: {stdout}");

    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out/bench.json")).expect("bench.json")).expect("json");
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.iter().map(|r| r["concurrency"].as_u64().unwrap_or(0)).collect::<Vec<_>>(), vec![1, 8, 32, 64, 128, 256]);
    assert!(runs.iter().all(|r| r["requests"]["failed"] == 0));
    // The preset's plateau (485 tok/s near concurrency 64) within 10%.
    let plateau = num(&v, "saturation.plateau_output_tokens_per_s");
    assert!((plateau - 485.0).abs() / 485.0 < 0.10, "plateau {plateau}");
    assert_eq!(v["saturation"]["at_concurrency"], 64, "{}", v["saturation"]["evidence"]);

    let md = std::fs::read_to_string(dir.path().join("out/demo.md")).expect("demo.md");
    insta::assert_snapshot!(mask(&md));
    assert!(std::fs::metadata(dir.path().join("out/records.jsonl")).map(|m| m.len() > 0).unwrap_or(false));
}

#[test]
fn mask_keeps_names_and_labels() {
    assert_eq!(mask("c=64 took 12.5 ms, 3 of 4, p99 E2E GLM-5 | -0% | +12%"), "c=64 took N ms, N of N, p99 E2E GLM-5 | N% | N%");
}
