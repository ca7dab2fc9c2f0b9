//! The figure table of the stagetrace record: every field of a call record,
//! its JSON name, unit, group, display order and the figures it is made of.
//!
//! stagetrace writes one JSON object per call (`records-*.jsonl`); other
//! tools read those files, so the names are a public format. This crate holds
//! that format once. The core's record serialization and rolling summaries,
//! the analysis (`stagetrace report`), the OTLP span attributes, the
//! experiment tables and verdicts all read this table; none keeps a list of
//! its own. Adding a figure means adding a row here, then the code that
//! measures it and its docs (`docs/architecture.md`, "Adding a stage").
//!
//! # Core concepts
//!
//! - A [`Figure`] is one per-call duration: the six stages of a call
//!   ([`Figure::STAGES`]), the figures derived from them (`net = uplink +
//!   downlink`, see [`Figure::parts`]), the clock figures and the observer's
//!   own cost. Inside a process a figure is integer nanoseconds; it becomes
//!   milliseconds (or microseconds, see [`Unit`]) only where a record is
//!   written or shown.
//! - A [`Field`] is one key of the JSON record, figures included, in the
//!   order a record is written ([`FIELDS`]).
//!
//! # Usage
//!
//! ```
//! use stagetrace_schema::{Figure, Group};
//!
//! assert_eq!(Figure::Net.field(), "net_ms");
//! assert_eq!(Figure::Net.parts(), &[Figure::Uplink, Figure::Downlink]);
//! assert_eq!(Figure::from_name("observer_us"), Some(Figure::Observer));
//! assert_eq!(Figure::Infer.group(), Group::ServerStage);
//! // 12.034 ms as written in a record
//! assert_eq!(Figure::Infer.to_unit(12_034_400), 12.034);
//! ```
//!
//! # Supported Rust versions
//!
//! Built and tested on stable Rust; the minimum supported version is 1.85.
//!
//! # Public API
//!
//! At the root, the figure and field tables:
//!
//! - [`Figure`]: one per-call duration (a row of the figure table); its
//!   methods give the JSON name, unit, group, parts and unit conversions.
//! - [`FigureInfo`]: one row of the figure table, as [`Figure::info`] gives it.
//! - [`Field`]: one key of the JSON record (a figure or another field), for
//!   readers and writers that walk the record.
//! - [`FieldInfo`]: one row of the field table; [`FIELDS`] is every row, in
//!   the order a record is written.
//! - [`FieldType`]: a field's JSON value type, for validating or building a
//!   column.
//! - [`HostCount`]: a count of what a host did to a call (switches, faults,
//!   GC), the record's `*_count` host fields.
//! - [`Group`], [`Side`], [`Unit`]: what kind of figure a row is, which part
//!   of the system it belongs to, and the unit it is written in.
//! - [`ms_to_ns`], [`ns_to_ms`]: convert between the record's milliseconds
//!   and in-process nanoseconds.
//! - Constants: [`FIGURE_COUNT`], [`FIELD_COUNT`], [`CLOCK_VALUES`] and
//!   [`CACHE_VALUES`] (the values of `clock` and `cache`), [`HOP_KEYS`] and
//!   [`MAX_HOPS_READ`] (the `hops` entries).
//!
//! [`bounds`]: the largest values a record's numbers can hold, for readers
//! that refuse corrupt lines:
//!
//! - [`bounds::MAX_LATENCY_MS`], [`bounds::MAX_OFFSET_MS`],
//!   [`bounds::MAX_UNIX_MS`]: the bounds of a latency, a clock offset and a
//!   timestamp.
//!
//! [`notes`]: the words printed with a table of figures (the core's summary
//! table and `stagetrace report`):
//!
//! - [`notes::BLACK_BOX_NOTE`], [`notes::NO_SERVER_TIMING_NOTE`],
//!   [`notes::HOST_HEADING`], [`notes::HOST_LEGEND`]: the notes, heading and
//!   legend a table prints.
//! - [`notes::bound`]: a ± bound written as a table writes it.

pub mod bounds;
mod convert;
mod field;
mod figure;
mod kind;
pub mod notes;
mod table;

pub use convert::{ms_to_ns, ns_to_ms};
pub use field::{
    Field, FieldInfo, FieldType, HostCount, CACHE_VALUES, CLOCK_VALUES, FIELDS, FIELD_COUNT,
    HOP_KEYS, MAX_HOPS_READ,
};
pub use figure::{Figure, FIGURE_COUNT};
pub use kind::{Group, Side, Unit};
pub use table::FigureInfo;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_rows_sit_at_their_figures_index() {
        for (i, f) in Figure::ALL.into_iter().enumerate() {
            assert_eq!(f.index(), i, "{f:?}");
            assert_eq!(f.field(), format!("{}{}", f.name(), f.unit().suffix()));
        }
    }

    #[test]
    fn every_figure_is_a_field_once() {
        for f in Figure::ALL {
            let n = FIELDS
                .iter()
                .filter(|i| i.field == Field::Figure(f))
                .count();
            assert_eq!(n, 1, "{f:?}");
        }
        let mut names: Vec<_> = FIELDS.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FIELD_COUNT);
    }

    #[test]
    fn parts_are_finer_than_the_whole() {
        for f in Figure::ALL {
            for p in f.parts() {
                assert_ne!(*p, f);
            }
        }
        assert_eq!(Figure::Net.parts(), &[Figure::Uplink, Figure::Downlink]);
    }

    #[test]
    fn names_look_up_both_ways() {
        assert_eq!(Figure::from_name("infer"), Some(Figure::Infer));
        assert_eq!(Figure::from_name("infer_ms"), Some(Figure::Infer));
        assert_eq!(Figure::from_name("observer_us"), Some(Figure::Observer));
        assert_eq!(Figure::from_name("split_err_ms"), Some(Figure::SplitErr));
        assert_eq!(Figure::from_name("nope"), None);
        assert_eq!(Field::from_name("ts_unix_ms"), Some(Field::TsUnix));
        assert_eq!(Field::Clock.name(), "clock");
    }

    #[test]
    fn units_round_to_a_thousandth() {
        assert_eq!(Figure::Infer.to_unit(12_034_499), 12.034);
        assert_eq!(Figure::Infer.to_unit(12_034_500), 12.035);
        assert_eq!(Figure::Offset.to_unit(-250_000_600), -250.001);
        assert_eq!(Figure::Observer.to_unit(3_250), 3.25);
        assert_eq!(Figure::Infer.from_unit(12.345), Some(12_345_000));
        assert_eq!(Figure::Observer.from_unit(3.25), Some(3_250));
        assert_eq!(Figure::Infer.from_unit(1e300), None);
        assert_eq!(Figure::Infer.from_unit(f64::NAN), None);
    }
}
