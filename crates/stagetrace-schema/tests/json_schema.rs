//! The published JSON Schema (`docs/record.schema.json`) and the table agree:
//! the same keys, the same required ones, and only signed figures may be negative.

use serde_json::Value;
use stagetrace_schema::{FieldType, FIELDS};

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

#[test]
fn only_signed_figures_may_be_negative() {
    let schema = published();
    let dur_min = &schema["$defs"]["dur"]["minimum"];
    for info in &FIELDS {
        let FieldType::Figure(f) = info.ty else {
            continue;
        };
        let prop = &schema["properties"][info.name];
        let minimum = if prop.get("$ref").is_some() {
            dur_min
        } else {
            &prop["minimum"]
        };
        assert_eq!(
            minimum.is_null(),
            f.is_signed(),
            "{}: signed in the table = no minimum in the schema",
            info.name
        );
    }
}
