//! Bad input: a clear message naming the input and the fix, exit code 2, never a panic.

fn usage_error(args: &[&str], needle: &str) {
    crate::common::usage_error("bench", args, needle);
}

#[test]
fn rate_of_zero_is_refused() {
    usage_error(&["--url", "http://127.0.0.1:9", "--rate", "0", "--requests", "1"], "--rate 0 is not a rate");
}

#[test]
fn negative_rate_is_refused() {
    usage_error(&["--url", "http://127.0.0.1:9", "--rate=-2", "--requests", "1"], "is not a rate");
}

#[test]
fn concurrency_and_rate_together_contradict() {
    usage_error(&["--url", "http://127.0.0.1:9", "--rate", "1", "--concurrency", "2", "--requests", "1"], "contradict");
}

#[test]
fn max_concurrency_without_rate_is_refused() {
    usage_error(
        &["--url", "http://127.0.0.1:9", "--concurrency", "2", "--max-concurrency", "2", "--requests", "1"],
        "--max-concurrency caps an open loop",
    );
}

#[test]
fn unknown_slo_metric_is_named() {
    usage_error(
        &["--url", "http://127.0.0.1:9", "--concurrency", "1", "--requests", "1", "--slo", "latency:p99<1s"],
        "unknown SLO metric \"latency\"",
    );
}

#[test]
fn missing_stop_rule_is_refused() {
    usage_error(&["--url", "http://127.0.0.1:9", "--concurrency", "1"], "no stop rule");
}

#[test]
fn missing_load_is_refused() {
    usage_error(&["--url", "http://127.0.0.1:9", "--requests", "1"], "no load given");
}

#[test]
fn bad_length_spec_is_explained() {
    usage_error(&["--url", "http://127.0.0.1:9", "--concurrency", "1", "--requests", "1", "--input-len", "uniform:9..3"], "LO <= HI");
}

#[test]
fn url_without_scheme_is_refused() {
    usage_error(&["--url", "127.0.0.1:9", "--concurrency", "1", "--requests", "1"], "--url");
}

#[test]
fn unreachable_url_names_the_url_and_the_fix() {
    // Port 9 (discard) on loopback: nothing listens.
    usage_error(
        &["--url", "http://127.0.0.1:9", "--concurrency", "1", "--requests", "1"],
        "is the server running at --url http://127.0.0.1:9",
    );
}

#[test]
fn missing_dataset_file_is_named() {
    usage_error(
        &["--url", "http://127.0.0.1:9", "--concurrency", "1", "--requests", "1", "--dataset", "/nonexistent/x.jsonl"],
        "--dataset /nonexistent/x.jsonl",
    );
}

#[test]
fn metrics_key_without_metrics_url_is_refused() {
    let out = crate::common::servetune()
        .args(["bench", "--url", "http://127.0.0.1:9", "--concurrency", "1", "--requests", "1", "--metrics-api-key-env", "MK"])
        .env("MK", "secret")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("give --metrics-url too"), "{err}");
}

#[test]
fn two_outputs_on_stdout_are_refused() {
    usage_error(
        &["--url", "http://127.0.0.1:9", "--concurrency", "1", "--requests", "1", "--json", "-", "--records", "-"],
        "--json and --records each ask for stdout (-)",
    );
}

#[test]
fn a_zero_time_limit_is_refused_with_its_flag() {
    for flag in ["--timeout", "--connect-timeout", "--first-byte-timeout", "--idle-timeout", "--preflight-timeout", "--scrape-timeout"] {
        usage_error(&["--url", "http://127.0.0.1:9", "--concurrency", "1", "--requests", "1", flag, "0s"], flag);
    }
}

#[test]
fn help_shows_list_defaults_in_the_comma_syntax_that_parses() {
    let (code, out, err) = crate::common::run(&["plan", "--help"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("[default: 1,8,32,64,128,256]"), "{out}");
    assert!(!out.contains("[default: 1 8 32"), "{out}");
}
