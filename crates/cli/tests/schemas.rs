//! Every machine-readable output against its committed JSON Schema (`crates/*/schema/`), checked
//! by a JSON Schema 2020-12 validator (the `jsonschema` crate), so every keyword the schemas use
//! counts: `type`, `const`, `enum`, `required`, `properties`, `additionalProperties`, `items`,
//! `minimum`, `exclusiveMinimum`, `oneOf`, `$ref`. Each document that passes is then broken once
//! for each of `required`, `minimum` (or `exclusiveMinimum`) and `additionalProperties`, wherever
//! the schema states one along the document, and every broken copy must fail.

use serde_json::Value;

use crate::common::servetune;

/// Every schema in the repository; [`every_schema_in_the_repository_is_checked`] keeps the list
/// whole, and each has a test below (or in `trace.rs`) that runs [`check`] on a real document.
const SCHEMAS: [&str; 6] = [
    "bench/schema/bench.schema.json",
    "campaign/schema/report.schema.json",
    "fabric/schema/fabric.schema.json",
    "model/schema/plan.schema.json",
    "probe/schema/probe.schema.json",
    "trace/schema/trace.schema.json",
];

fn crates_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The schema `file` (under `crates/`) and its validator.
fn load(file: &str) -> (Value, jsonschema::Validator) {
    let text = std::fs::read_to_string(crates_dir().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let schema: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    let v = jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{file} is not a valid JSON Schema: {e}"));
    (schema, v)
}

fn errors(v: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    v.iter_errors(doc).map(|e| format!("{}: {e}", e.instance_path())).collect()
}

/// One way to break a document: a pointer into it and the rule the change breaks.
#[derive(Debug)]
struct Break {
    rule: &'static str,
    at: String,
    doc: Value,
}

/// `schema` with local `$ref`s followed.
fn resolve<'a>(root: &'a Value, mut schema: &'a Value) -> &'a Value {
    while let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        schema = r.trim_start_matches("#/").split('/').fold(root, |s, k| &s[k]);
    }
    schema
}

/// Walks the document along its schema (through `properties`, `items` and `$ref`; not into
/// `oneOf`, where breaking one branch may satisfy another) and collects, at every place the schema
/// states one of the three rules, a copy of the whole document that breaks it there.
fn breaks(root: &Value, schema: &Value, whole: &Value, at: &str, doc: &Value, out: &mut Vec<Break>) {
    let schema = resolve(root, schema);
    let mut broken = |rule: &'static str, change: &dyn Fn(&mut Value)| {
        // One break per rule and place in the schema: array elements alike are one place.
        let place = |a: &str| a.split('/').map(|s| if s.parse::<usize>().is_ok() { "*" } else { s }).collect::<Vec<_>>().join("/");
        if out.iter().any(|b| b.rule == rule && place(&b.at) == place(at)) {
            return;
        }
        let mut copy = whole.clone();
        change(copy.pointer_mut(at).expect("the walk follows the document"));
        out.push(Break { rule, at: at.to_string(), doc: copy });
    };
    if let (Some(min), Some(_)) = (schema.get("minimum").and_then(Value::as_f64), doc.as_f64()) {
        broken("minimum", &|v| *v = serde_json::json!(min - 1.0));
    }
    if let (Some(min), Some(_)) = (schema.get("exclusiveMinimum").and_then(Value::as_f64), doc.as_f64()) {
        broken("minimum", &|v| *v = serde_json::json!(min));
    }
    let Some(obj) = doc.as_object() else {
        if let (Some(items), Some(arr)) = (schema.get("items"), doc.as_array()) {
            for (i, x) in arr.iter().enumerate() {
                breaks(root, items, whole, &format!("{at}/{i}"), x, out);
            }
        }
        return;
    };
    if let Some(k) = schema.get("required").and_then(Value::as_array).and_then(|r| r.first()).and_then(Value::as_str) {
        broken("required", &|v| {
            v.as_object_mut().expect("object").remove(k);
        });
    }
    if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
        broken("additionalProperties", &|v| {
            v.as_object_mut().expect("object").insert("not_in_the_schema".into(), Value::Bool(true));
        });
    }
    for (k, s) in schema.get("properties").and_then(Value::as_object).into_iter().flatten() {
        if let Some(x) = obj.get(k) {
            let key = k.replace('~', "~0").replace('/', "~1");
            breaks(root, s, whole, &format!("{at}/{key}"), x, out);
        }
    }
}

/// Checks that `doc` passes `schema_file`, and that a copy breaking `required`, `minimum` and
/// `additionalProperties` (each wherever the schema states it along the document) fails; each
/// rule must occur somewhere along the document, or the check would prove nothing about it.
fn validate_and_break(schema_file: &str, doc: &Value) -> Value {
    let (schema, v) = load(schema_file);
    let errs = errors(&v, doc);
    assert!(errs.is_empty(), "{schema_file}: {errs:#?}");
    let mut all = Vec::new();
    breaks(&schema, &schema, doc, "", doc, &mut all);
    for rule in ["required", "minimum", "additionalProperties"] {
        assert!(all.iter().any(|b| b.rule == rule), "{schema_file}: no {rule} along the document, so breaking it proves nothing");
    }
    for b in &all {
        assert!(!v.is_valid(&b.doc), "{schema_file}: the document breaking {} at {:?} passed", b.rule, b.at);
    }
    schema
}

/// Validates the document `args` writes; returns it and the schema.
pub(crate) fn check(schema_file: &str, args: &[&str]) -> (Value, Value) {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("o.json");
    let st = servetune().args(args).arg("--json").arg(&out).output().expect("run");
    assert_eq!(st.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&st.stderr));
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).expect("output")).expect("json");
    let schema = validate_and_break(schema_file, &doc);
    (doc, schema)
}

#[test]
fn every_schema_in_the_repository_is_checked() {
    let mut found = Vec::new();
    for c in std::fs::read_dir(crates_dir()).expect("crates").flatten() {
        for f in std::fs::read_dir(c.path().join("schema")).into_iter().flatten().flatten() {
            found.push(format!("{}/schema/{}", c.file_name().to_string_lossy(), f.file_name().to_string_lossy()));
        }
    }
    found.sort();
    assert_eq!(found, SCHEMAS, "a schema was added or removed: list it in SCHEMAS and check a document against it");
    for s in SCHEMAS {
        load(s);
    }
}

#[test]
fn the_validator_checks_minimum_additional_properties_and_required() {
    let schema = serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["n"],
        "additionalProperties": false,
        "properties": {"n": {"type": "integer", "minimum": 1}, "x": {"type": "number", "exclusiveMinimum": 0}}
    });
    let v = jsonschema::validator_for(&schema).expect("schema");
    assert!(v.is_valid(&serde_json::json!({"n": 1, "x": 0.5})));
    for bad in
        [serde_json::json!({"n": 0}), serde_json::json!({"n": 1, "x": 0}), serde_json::json!({"n": 1, "y": 2}), serde_json::json!({"x": 1})]
    {
        assert!(!v.is_valid(&bad), "{bad} passed");
    }
    let mut all = Vec::new();
    let doc = serde_json::json!({"n": 3, "x": 2.0});
    breaks(&schema, &schema, &doc, "", &doc, &mut all);
    let rules: Vec<(&str, &str)> = all.iter().map(|b| (b.rule, b.at.as_str())).collect();
    assert_eq!(rules, [("required", ""), ("additionalProperties", ""), ("minimum", "/n"), ("minimum", "/x")]);
    assert!(all.iter().all(|b| !v.is_valid(&b.doc)));
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
fn plan_json_calibrated_on_one_point_or_on_a_sweep_matches_its_schema() {
    let dir = tempfile::tempdir().expect("tmp");
    let b = dir.path().join("bench.json");
    let bs = b.to_string_lossy().to_string();
    for (points, form, absent) in [
        (&[(8, 300.0)][..], "step_scale", "memory_efficiency_scale"),
        (&[(1, 24.0), (8, 150.0), (32, 300.0)][..], "memory_efficiency_scale", "step_scale"),
    ] {
        let runs: Vec<Value> =
            points.iter().map(|(c, t)| serde_json::json!({"concurrency": c, "throughput": {"output_tokens_per_s": t}})).collect();
        std::fs::write(&b, serde_json::json!({"schema": "servetune.bench/1", "runs": runs}).to_string()).expect("write");
        let (doc, _) = check(
            "model/schema/plan.schema.json",
            &["plan", "--model", "glm-5", "--quant", "nvfp4", "--gpu", "rtx-pro-6000-se", "--calibrate", &bs],
        );
        let c = &doc["calibration"];
        assert!(c[form].as_f64().is_some_and(|x| x > 0.0), "{} point(s) fit {form}: {c}", points.len());
        assert!(c[absent].is_null(), "{} point(s) hold no {absent}: {c}", points.len());
    }
}

#[test]
fn plan_json_with_a_measured_all_reduce_matches_its_schema_and_carries_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let ar = dir.path().join("ar.json");
    let ars = ar.to_string_lossy().to_string();
    let st = servetune().args(["fabric", "allreduce", "--backend", "sim", "--sim-gpus", "4", "--json", &ars]).output().expect("run");
    assert_eq!(st.status.code(), Some(0), "{}", String::from_utf8_lossy(&st.stderr));
    let (doc, _) = check(
        "model/schema/plan.schema.json",
        &["plan", "--model", "glm-5", "--quant", "nvfp4", "--gpu", "rtx-pro-6000-se", "--link", "pcie-host-staged", "--allreduce", &ars],
    );
    let m = &doc["scenario"]["measured_allreduce"];
    assert_eq!(m["source"], ars.as_str());
    assert_eq!(m["runs"][0]["ranks"], 4, "{m}");
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
