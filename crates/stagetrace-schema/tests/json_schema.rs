//! The published JSON Schema (`docs/record.schema.json`) and the table agree:
//! the same keys, the same required ones, and only signed figures may be negative.

use serde_json::Value;
use stagetrace_schema::{bounds, FieldType, FIELDS};

fn published() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/record.schema.json");
    let text = std::fs::read_to_string(path).expect("docs/record.schema.json is readable");
    serde_json::from_str(&text).expect("docs/record.schema.json is JSON")
}

#[test]
fn every_field_of_the_table_is_published_and_nothing_else() {
    let schema = published();
    let props = schema["properties"].as_object().expect("properties");
    let mut published: Vec<&str> = props.keys().map(String::as_str).collect();
    let mut table: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
    published.sort_unstable();
    table.sort_unstable();
    assert_eq!(published, table);
}

#[test]
fn required_fields_agree() {
    let schema = published();
    let mut published: Vec<&str> = schema["required"]
        .as_array()
        .expect("required")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let mut table: Vec<&str> = FIELDS
        .iter()
        .filter(|f| f.required)
        .map(|f| f.name)
        .collect();
    published.sort_unstable();
    table.sort_unstable();
    assert_eq!(published, table);
}

/// A figure's `(minimum, maximum)` as published, following a `$ref`.
fn published_range(schema: &Value, field: &str) -> (Value, Value) {
    let mut prop = &schema["properties"][field];
    if let Some(r) = prop.get("$ref").and_then(Value::as_str) {
        let name = r.strip_prefix("#/$defs/").expect("a local $ref");
        prop = &schema["$defs"][name];
    }
    (prop["minimum"].clone(), prop["maximum"].clone())
}

#[test]
fn only_signed_figures_may_be_negative() {
    let schema = published();
    for info in &FIELDS {
        let FieldType::Figure(f) = info.ty else {
            continue;
        };
        let (minimum, _) = published_range(&schema, info.name);
        let expected = if f.is_signed() {
            -f.max_abs_in_unit()
        } else {
            0.0
        };
        assert_eq!(
            minimum.as_f64(),
            Some(expected),
            "{}: signed in the table = minimum -max in the schema, else 0",
            info.name
        );
    }
}

#[test]
fn every_figure_publishes_the_bound_the_loader_enforces() {
    let schema = published();
    for info in &FIELDS {
        let FieldType::Figure(f) = info.ty else {
            continue;
        };
        let (_, maximum) = published_range(&schema, info.name);
        assert_eq!(maximum.as_f64(), Some(f.max_abs_in_unit()), "{}", info.name);
    }
    let (min, max) = published_range(&schema, "ts_unix_ms");
    assert_eq!(min.as_f64(), Some(0.0));
    assert_eq!(max.as_f64(), Some(bounds::MAX_UNIX_MS));
}
