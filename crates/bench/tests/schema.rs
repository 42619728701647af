//! The `--json` document against the committed JSON Schema (`schema/bench.schema.json`), with a
//! small validator for the subset the schema uses: type, const, enum, required, properties, items, $ref.

use serde_json::Value;

use crate::exporters::sample_report;

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
    if let Some(c) = schema.get("const") {
        if c != v {
            errs.push(format!("{path}: {v} != {c}"));
        }
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
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (k, s) in props {
                if let Some(x) = obj.get(k) {
                    validate(s, root, x, &format!("{path}.{k}"), errs);
                }
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for (i, x) in arr.iter().enumerate() {
            validate(items, root, x, &format!("{path}[{i}]"), errs);
        }
    }
}

fn schema() -> Value {
    serde_json::from_str(include_str!("../schema/bench.schema.json")).expect("schema parses")
}

#[test]
fn report_json_matches_the_committed_schema() {
    let s = schema();
    let doc = serde_json::to_value(sample_report()).expect("serialize");
    let mut errs = Vec::new();
    validate(&s, &s, &doc, "$", &mut errs);
    assert!(errs.is_empty(), "{errs:#?}");
}

#[test]
fn the_validator_rejects_a_document_missing_fields() {
    let s = schema();
    let mut doc = serde_json::to_value(sample_report()).expect("serialize");
    doc["runs"][0]["latency_ms"].as_object_mut().expect("obj").remove("ttft");
    doc["schema"] = Value::String("servetune.bench/2".into());
    let mut errs = Vec::new();
    validate(&s, &s, &doc, "$", &mut errs);
    assert_eq!(errs.len(), 2, "{errs:#?}");
}
