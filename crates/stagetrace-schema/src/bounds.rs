//! The largest values a record's numbers can hold: what a latency, a clock
//! offset or a timestamp can be. The analysis refuses a line beyond them (a
//! corrupt line, not a slow call) and `docs/record.schema.json` publishes
//! the same bounds (`tests/json_schema.rs` checks that they agree).

use crate::Figure;

/// Largest |value| of a latency figure, in ms: one day. A call that takes
/// longer is not a control cycle; the core's wire bounds one duration at an
/// hour.
pub const MAX_LATENCY_MS: f64 = 86_400_000.0;

/// Largest Unix time, in ms: the last nanosecond an `i64` of Unix
/// nanoseconds holds (year 2262), what the core can write.
pub const MAX_UNIX_MS: f64 = 9_223_372_036_854.775;

/// Largest |clock offset|, in ms: two clocks each anywhere in
/// `0..=MAX_UNIX_MS` (a host whose clock was never set reads 1970, so a
/// real offset may exceed any latency).
pub const MAX_OFFSET_MS: f64 = MAX_UNIX_MS;

impl Figure {
    /// Largest |value| of this figure, in ms.
    pub fn max_abs_ms(self) -> f64 {
        if matches!(self, Figure::Offset | Figure::ExecOffset) {
            MAX_OFFSET_MS
        } else {
            MAX_LATENCY_MS
        }
    }

    /// Largest |value| of this figure in its record unit (`_ms` or `_us`),
    /// as `docs/record.schema.json` states it.
    pub fn max_abs_in_unit(self) -> f64 {
        self.max_abs_ms() * (1_000_000 / self.unit().ns()) as f64
    }
}
