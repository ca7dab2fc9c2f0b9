//! Records buffered as Arrow columns until a row group is written.

use std::sync::Arc;

use arrow_array::builder::{
    ArrayBuilder, BooleanBuilder, Float64Builder, ListBuilder, StringBuilder,
    StringDictionaryBuilder, StructBuilder, UInt64Builder,
};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, DataType, Field as ArrowField, SchemaRef};
use stagetrace::record::CallRecord;
use stagetrace_schema::FIELDS;

use crate::cells::{cell, hop_values, Cell};
use crate::schema::{arrow_schema, hop_fields, Column};

/// One column being filled.
enum ColumnBuilder {
    Count(UInt64Builder),
    Number(Float64Builder),
    Label(StringDictionaryBuilder<Int32Type>),
    Text(StringBuilder),
    Bool(BooleanBuilder),
    Hops(ListBuilder<StructBuilder>),
}

impl ColumnBuilder {
    fn new(column: Column) -> ColumnBuilder {
        match column {
            Column::Count => ColumnBuilder::Count(UInt64Builder::new()),
            Column::Number => ColumnBuilder::Number(Float64Builder::new()),
            Column::Label => ColumnBuilder::Label(StringDictionaryBuilder::new()),
            Column::Text => ColumnBuilder::Text(StringBuilder::new()),
            Column::Bool => ColumnBuilder::Bool(BooleanBuilder::new()),
            Column::Hops => {
                let fields = hop_fields();
                let children: Vec<Box<dyn ArrayBuilder>> = fields
                    .iter()
                    .map(|_| Box::new(Float64Builder::new()) as Box<dyn ArrayBuilder>)
                    .collect();
                let item = ArrowField::new("item", DataType::Struct(fields.clone()), true);
                ColumnBuilder::Hops(
                    ListBuilder::new(StructBuilder::new(fields, children)).with_field(item),
                )
            }
        }
    }

    /// Appends one value. A value of another kind than the column's (which
    /// the field table rules out) is written as null rather than panicking.
    fn append(&mut self, value: Cell<'_>) {
        match (self, value) {
            (ColumnBuilder::Count(b), Cell::Count(v)) => b.append_option(v),
            (ColumnBuilder::Number(b), Cell::Number(v)) => b.append_option(v),
            (ColumnBuilder::Label(b), Cell::Text(v)) => match v {
                Some(s) => {
                    // Only a dictionary past i32::MAX entries fails.
                    if b.append(s).is_err() {
                        b.append_null();
                    }
                }
                None => b.append_null(),
            },
            (ColumnBuilder::Text(b), Cell::Text(v)) => b.append_option(v),
            (ColumnBuilder::Bool(b), Cell::Bool(v)) => b.append_option(v),
            (ColumnBuilder::Hops(b), Cell::Hops(hops)) => append_hops(b, hops),
            (other, _) => other.append_null(),
        }
    }

    fn append_null(&mut self) {
        match self {
            ColumnBuilder::Count(b) => b.append_null(),
            ColumnBuilder::Number(b) => b.append_null(),
            ColumnBuilder::Label(b) => b.append_null(),
            ColumnBuilder::Text(b) => b.append_null(),
            ColumnBuilder::Bool(b) => b.append_null(),
            ColumnBuilder::Hops(b) => b.append(false),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            ColumnBuilder::Count(b) => Arc::new(b.finish()),
            ColumnBuilder::Number(b) => Arc::new(b.finish()),
            ColumnBuilder::Label(b) => Arc::new(b.finish()),
            ColumnBuilder::Text(b) => Arc::new(b.finish()),
            ColumnBuilder::Bool(b) => Arc::new(b.finish()),
            ColumnBuilder::Hops(b) => Arc::new(b.finish()),
        }
    }
}

fn append_hops(list: &mut ListBuilder<StructBuilder>, hops: &[stagetrace::hop_record::HopFigures]) {
    if hops.is_empty() {
        // No relay: the JSON record has no `hops`, the row a null.
        list.append(false);
        return;
    }
    let entries = list.values();
    for hop in hops {
        for (i, v) in hop_values(hop).into_iter().enumerate() {
            if let Some(b) = entries.field_builder::<Float64Builder>(i) {
                b.append_option(v);
            }
        }
        entries.append(true);
    }
    list.append(true);
}

/// Records not yet written, one builder per field of the record.
pub(crate) struct RowBuffer {
    schema: SchemaRef,
    columns: Vec<ColumnBuilder>,
    rows: usize,
}

impl std::fmt::Debug for RowBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowBuffer")
            .field("rows", &self.rows)
            .finish()
    }
}

impl RowBuffer {
    pub(crate) fn new() -> RowBuffer {
        RowBuffer {
            schema: arrow_schema(),
            columns: FIELDS
                .iter()
                .map(|info| ColumnBuilder::new(Column::of(info)))
                .collect(),
            rows: 0,
        }
    }

    pub(crate) fn push(&mut self, rec: &CallRecord) {
        for (builder, info) in self.columns.iter_mut().zip(FIELDS.iter()) {
            builder.append(cell(rec, info));
        }
        self.rows += 1;
    }

    pub(crate) fn len(&self) -> usize {
        self.rows
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The buffered rows as one batch; the buffer is empty afterwards.
    pub(crate) fn take(&mut self) -> Result<RecordBatch, ArrowError> {
        let arrays: Vec<ArrayRef> = self.columns.iter_mut().map(ColumnBuilder::finish).collect();
        self.rows = 0;
        RecordBatch::try_new(self.schema.clone(), arrays)
    }
}
