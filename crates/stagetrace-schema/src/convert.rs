//! Nanoseconds inside, the record's unit at the edge.

use crate::kind::Unit;

/// Nanoseconds as milliseconds, exactly (no rounding): for display.
pub fn ns_to_ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

/// Milliseconds to nanoseconds, rounded to the nearest; `None` when not
/// finite or out of range.
pub fn ms_to_ns(ms: f64) -> Option<i64> {
    from_unit(ms, Unit::Millis)
}

/// `ns` in `unit`, rounded to a thousandth of the unit. Integer rounding
/// first, then one division: the printed value has at most three decimals.
pub(crate) fn to_unit(ns: i64, unit: Unit) -> f64 {
    // thousandths of the unit: µs for ms, ns for µs
    let step = unit.ns() / 1000;
    let half = step / 2;
    let thousandths = if ns >= 0 {
        (ns + half) / step
    } else {
        -((-ns + half) / step)
    };
    thousandths as f64 / 1000.0
}

pub(crate) fn from_unit(value: f64, unit: Unit) -> Option<i64> {
    let ns = (value * unit.ns() as f64).round();
    // i64 covers ±292 years of nanoseconds; anything beyond is not a latency.
    if ns.is_finite() && ns.abs() < 9.0e18 {
        Some(ns as i64)
    } else {
        None
    }
}
