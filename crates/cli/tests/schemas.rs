//! Every machine-readable output against its committed JSON Schema (`crates/*/schema/`), with a
//! small validator for the subset the schemas use: type, const, enum, required, properties, items, $ref.

use serde_json::Value;

use crate::common::servetune;

fn type_ok(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_u64() || v.is_i64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => false,
    }
}

fn validate(schema: &Value, root: &Value, v: &Value, path: &str, errs: &mut Vec<String>) {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let target = r.trim_start_matches("#/").split('/').fold(root, |s, k| &s[k]);
        return validate(target, root, v, path, errs);
    }
    if let Some(t) = schema.get("type") {
        let ok = match t {
            Value::String(t) => type_ok(t, v),
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).any(|t| type_ok(t, v)),
            _ => true,
        };
        if !ok {
            errs.push(format!("{path}: {v} is not of type {t}"));
            return;
        }
    }
    if schema.get("const").is_some_and(|c| c != v) {
        errs.push(format!("{path}: {v} is not the constant"));
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            errs.push(format!("{path}: {v} not in {e:?}"));
        }
    }
    if let Some(obj) = v.as_object() {
        for k in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            if !obj.contains_key(k) {
                errs.push(format!("{path}: missing required {k:?}"));
            }
        }
        for (k, s) in schema.get("properties").and_then(Value::as_object).into_iter().flatten() {
            if let Some(x) = obj.get(k) {
                validate(s, root, x, &format!("{path}.{k}"), errs);
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for (i, x) in arr.iter().enumerate() {
            validate(items, root, x, &format!("{path}[{i}]"), errs);
        }
    }
}

/// Validates the document `args` writes; returns it and the schema.
pub(crate) fn check(schema_file: &str, args: &[&str]) -> (Value, Value) {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(schema_file)).expect("schema"),
    )
    .expect("schema json");
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("o.json");
    let st = servetune().args(args).arg("--json").arg(&out).output().expect("run");
    assert_eq!(st.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&st.stderr));
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).expect("output")).expect("json");
    let mut errs = Vec::new();
    validate(&schema, &schema, &doc, "$", &mut errs);
    assert!(errs.is_empty(), "{args:?}: {errs:#?}");
    // The validator itself can fail: a document without its schema field does not pass.
    let mut broken = doc.clone();
    broken.as_object_mut().expect("object").remove("schema");
    let mut errs = Vec::new();
    validate(&schema, &schema, &broken, "$", &mut errs);
    assert!(!errs.is_empty());
    (doc, schema)
}

#[test]
fn bench_json_matches_its_schema() {
    let faults = servetune_sim::Faults { error_status: Some(500), error_rate: 0.2, ..Default::default() };
    let s = crate::common::exact(servetune_sim::ExactTiming::default(), faults);
    check(
        "bench/schema/bench.schema.json",
        &["bench", "-q", "--url", s.url(), "--concurrency", "1,4", "--requests", "10", "--output-len", "4", "--slo", "ttft:p99<1s"],
    );
}

#[test]
fn plan_json_matches_its_schema() {
    check(
        "model/schema/plan.schema.json",
        &["plan", "--model", "glm-5", "--quant", "nvfp4", "--gpu", "rtx-pro-6000-se", "--link", "pcie-host-staged", "--rank"],
    );
}

#[test]
fn multi_node_plan_json_matches_its_schema_and_carries_the_nodes_and_network() {
    let (doc, _) = check(
        "model/schema/plan.schema.json",
        &[
            "plan",
            "--model",
            "deepseek-v3",
            "--gpu",
            "h100-sxm",
            "--gpus",
            "16",
            "--gpus-per-node",
            "8",
            "--net",
            "eth-100g",
            "--tp",
            "16",
            "--rank",
        ],
    );
    let c = &doc["scenario"]["cluster"];
    assert_eq!((c["nodes"].as_u64(), c["gpus_per_node"].as_u64(), c["net"]["name"].as_str()), (Some(2), Some(8), Some("eth-100g")));
    assert_eq!(c["net"]["kind"], "ethernet");
    // The points where communication is the bottleneck name the network it crosses.
    let points = doc["points"].as_array().expect("points");
    let comm: Vec<&serde_json::Value> = points.iter().filter(|p| p["bottleneck"]["kind"] == "communication").collect();
    assert!(!comm.is_empty(), "TP16 over 100GbE is communication-bound somewhere: {}", doc["points"]);
    for p in comm {
        let across = &p["bottleneck"]["across"];
        assert_eq!((across["net"].as_str(), across["tp_nodes"].as_u64()), (Some("eth-100g"), Some(2)), "{p}");
    }
}

#[test]
fn probe_json_matches_its_schema() {
    let fx = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../probe/tests/fixtures/proxmox-lxc-8gpu");
    check("probe/schema/probe.schema.json", &["probe", "-q", "--root", &fx.to_string_lossy()]);
    check("probe/schema/probe.schema.json", &["probe", "-q"]);
}

#[test]
fn fabric_json_matches_its_schema() {
    check("fabric/schema/fabric.schema.json", &["fabric", "p2p", "--backend", "sim", "--sim-gpus", "2", "--max-size", "1M"]);
    check("fabric/schema/fabric.schema.json", &["fabric", "allreduce", "--backend", "sim", "--max-size", "1M"]);
    check("fabric/schema/fabric.schema.json", &["fabric", "host", "--max-size", "1M"]);
}

#[test]
fn campaign_report_json_matches_its_schema() {
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("c");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let fx = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../campaign/tests/fixtures/report-kvm/journal.sqlite");
    std::fs::copy(fx, dir.join("journal.sqlite")).expect("copy fixture journal");
    let fabric = d.path().join("p2p.json");
    let ok = |args: &[&str]| {
        let out = servetune().args(args).output().expect("run");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    ok(&["fabric", "p2p", "--backend", "sim", "--max-size", "1M", "--json", &fabric.to_string_lossy()]);
    ok(&["campaign", "fabric", &dir.to_string_lossy(), &fabric.to_string_lossy()]);
    let (doc, _) = check("campaign/schema/report.schema.json", &["campaign", "report", &dir.to_string_lossy()]);
    assert_eq!(doc["schema"], "servetune.report/1");
    assert!(!doc["curves"].as_array().expect("curves").is_empty(), "the fixture has measured sweeps");
    assert!(!doc["fabric"].as_array().expect("fabric").is_empty(), "the recorded fabric document is in the report");
}
