//! The Arrow schema, read off the record's field table: one column per
//! field of `stagetrace_schema::FIELDS`, named and typed as the JSON record
//! writes it (`e2e_ms` is milliseconds, `observer_us` microseconds).

use std::sync::Arc;

use arrow_schema::{DataType, Field as ArrowField, Fields, Schema, SchemaRef};
use stagetrace_schema::{FieldInfo, FieldType, FIELDS, HOP_KEYS};

/// How a record field is stored in Arrow (and so in Parquet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Column {
    /// `UInt64`: counts (`seq`, `batch_size`, `stale_dropped`).
    Count,
    /// `Float64`: every figure in its unit, and `ts_unix_ms`.
    Number,
    /// Dictionary-encoded text: few distinct values (`kind`, `clock`, `cache`, `error`).
    Label,
    /// Plain text: one value per call (`trace_id`, `output_digest`).
    Text,
    /// `Boolean`: flags are `true` or null, as the JSON record has them present or absent.
    Bool,
    /// `List<Struct<up_ms, …, drift_ppm>>`: the hops, null without a relay.
    Hops,
}

impl Column {
    /// The column kind of one record field.
    pub(crate) fn of(info: &FieldInfo) -> Column {
        match info.ty {
            FieldType::Count => Column::Count,
            FieldType::UnixMillis | FieldType::Figure(_) => Column::Number,
            FieldType::Text | FieldType::Enum(_) => Column::Label,
            FieldType::TraceId | FieldType::Hex => Column::Text,
            FieldType::Bool | FieldType::Flag => Column::Bool,
            FieldType::Hops => Column::Hops,
        }
    }

    fn data_type(self) -> DataType {
        match self {
            Column::Count => DataType::UInt64,
            Column::Number => DataType::Float64,
            Column::Label => label_type(),
            Column::Text => DataType::Utf8,
            Column::Bool => DataType::Boolean,
            Column::Hops => DataType::List(Arc::new(ArrowField::new(
                "item",
                DataType::Struct(hop_fields()),
                true,
            ))),
        }
    }
}

/// Dictionary-encoded strings: pandas reads them as categoricals.
pub(crate) fn label_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

/// One hop's columns: the `hops` entry's keys, all `Float64` (ms, and `drift_ppm`).
pub(crate) fn hop_fields() -> Fields {
    HOP_KEYS
        .iter()
        .map(|k| ArrowField::new(*k, DataType::Float64, true))
        .collect()
}

/// The schema of every file the sink writes: the record's fields in the
/// record's order; a field present in every record is not nullable.
pub fn arrow_schema() -> SchemaRef {
    let fields: Vec<ArrowField> = FIELDS
        .iter()
        .map(|info| ArrowField::new(info.name, Column::of(info).data_type(), !info.required))
        .collect();
    Arc::new(Schema::new(fields))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_a_column_with_its_json_name() {
        let schema = arrow_schema();
        assert_eq!(schema.fields().len(), FIELDS.len());
        for (col, info) in schema.fields().iter().zip(FIELDS.iter()) {
            assert_eq!(col.name(), info.name);
            assert_eq!(col.is_nullable(), !info.required);
        }
        let e2e = schema
            .field_with_name("e2e_ms")
            .map(|f| f.data_type().clone());
        assert_eq!(e2e.ok(), Some(DataType::Float64));
        let kind = schema
            .field_with_name("kind")
            .map(|f| f.data_type().clone());
        assert_eq!(kind.ok(), Some(label_type()));
    }
}
