//! Snapshot tests of every exporter over a fixed, synthetic report.

use servetune_bench::api::Api;
use servetune_bench::export;
use servetune_bench::record::{Chunk, ErrorKind, RequestRecord};
use servetune_bench::report::{self, RunContext};
use servetune_bench::runner::{BenchReport, ConfigEcho, SCHEMA, SCHEMA_MINOR};
use servetune_bench::saturation;
use servetune_bench::spec::{Load, Slo, SloMetric};
use servetune_bench::workload::Calibration;

const MS: u64 = 1_000_000;

/// `n` requests at concurrency `c`, each with TTFT `ttft` ms and 8 tokens `itl` ms apart.
fn records(n: u64, c: u64, ttft: u64, itl: u64) -> Vec<RequestRecord> {
    (0..n)
        .map(|i| {
            let start = (i / c) * (ttft + 8 * itl) * MS;
            let mut r = RequestRecord::new(i, false, start, 100, 8);
            r.actual_ns = start + 50_000;
            r.chunks = (0..8).map(|k| Chunk { at_ns: start + (ttft + k * itl) * MS, tokens: 1, content: true }).collect();
            r.output_tokens_chunks = 8;
            r.output_tokens_server = Some(8);
            r.input_tokens_server = Some(100);
            r.end_ns = start + (ttft + 7 * itl) * MS + 100_000;
            r.finish_reason = Some("length".into());
            if i == 3 {
                r.fail(ErrorKind::HttpStatus, "HTTP 503 from http://127.0.0.1:1/v1/completions: overloaded", start + MS);
            }
            r
        })
        .collect()
}

fn sample_report() -> BenchReport {
    let slos = [Slo { metric: SloMetric::Ttft, percentile: 99.0, threshold_ms: 500.0 }];
    let mut runs = Vec::new();
    for (c, ttft, itl) in [(1u32, 50u64, 10u64), (8, 120, 20), (32, 900, 70)] {
        let recs = records(64, c as u64, ttft, itl);
        let ctx = RunContext {
            load: Load::Closed { concurrency: c },
            partial: false,
            ignore_eos: true,
            slos: &slos,
            last_intended_ns: 0,
            stopped_ns: None,
        };
        runs.push(report::compute(&recs, &ctx, None));
    }
    let saturation = saturation::find(&runs);
    BenchReport {
        schema: SCHEMA,
        schema_minor: SCHEMA_MINOR,
        servetune_version: "0.0.0-test",
        started_at: 1_700_000_000,
        config: ConfigEcho {
            url: "http://127.0.0.1:30000".into(),
            api: Api::OpenaiCompletions,
            model: Some("glm-5".into()),
            stream: true,
            input: "100".into(),
            output: "8".into(),
            seed: 0,
            warmup: 0,
            requests: Some(64),
            duration_s: None,
            ramp_up_s: 0.0,
            ignore_eos: true,
            eos_token_id: None,
            timeout_s: 600.0,
            connect_timeout_s: 10.0,
            first_byte_timeout_s: 300.0,
            idle_timeout_s: 120.0,
            tokenizer: None,
            calibration: Calibration::default(),
            metrics_url: None,
            api_key_env: None,
        },
        partial: false,
        runs,
        saturation,
        definitions: None,
        notes: vec!["model \"glm-5\" found at /v1/models".into()],
    }
}

fn render(f: impl Fn(&BenchReport, &mut Vec<u8>) -> std::io::Result<()>) -> String {
    let mut v = Vec::new();
    f(&sample_report(), &mut v).expect("render");
    String::from_utf8(v).expect("utf8")
}

#[test]
fn terminal_snapshot() {
    insta::assert_snapshot!(render(|r, w| export::write_terminal(r, w)));
}

#[test]
fn markdown_snapshot() {
    insta::assert_snapshot!(render(|r, w| export::write_markdown(r, w)));
}

#[test]
fn csv_snapshot() {
    insta::assert_snapshot!(render(|r, w| export::write_csv(r, w)));
}

#[test]
fn json_snapshot() {
    insta::assert_snapshot!(render(|r, w| export::write_json(r, w)));
}

#[test]
fn records_lines_carry_the_run_label() {
    let rep = sample_report();
    let recs = vec![records(2, 1, 5, 1)];
    let mut v = Vec::new();
    export::write_records(&rep, &recs, &mut v).expect("render");
    let lines: Vec<serde_json::Value> =
        String::from_utf8(v).expect("utf8").lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["run"], "c=1");
    assert_eq!(lines[0]["chunks"].as_array().map(Vec::len), Some(8));
}

#[test]
fn the_sample_sweep_finds_its_knee() {
    let rep = sample_report();
    let s = rep.saturation.expect("knee");
    assert_eq!(s.at_concurrency, Some(8), "{}", s.evidence);
    assert!(s.evidence.contains("from concurrency 8"), "{}", s.evidence);
}
