//! The values a record can hold. JSON numbers reach `1e308`, a column holds
//! `f32` (whose largest value is `3.4e38`): anything beyond what a latency,
//! a clock offset or a timestamp can be is a corrupt line, so no column ever
//! holds infinity or a number no table, plot or gate can show.

use std::fmt;

use stagetrace_schema::Figure;

// The bounds are the schema's, published in `docs/record.schema.json` too.
use stagetrace_schema::bounds::{MAX_LATENCY_MS, MAX_OFFSET_MS, MAX_UNIX_MS};

// Every value a column accepts is finite as an `f32`.
const _: () = assert!(MAX_LATENCY_MS < f32::MAX as f64);
const _: () = assert!(MAX_OFFSET_MS < f32::MAX as f64);

/// Checks one figure's value as the record gives it (in the figure's
/// unit, `per_ms` of them to a ms); `Err` names the field and the bound.
pub(crate) fn check_figure(figure: Figure, per_ms: f64, value: f64) -> Result<(), String> {
    let max_ms = figure.max_abs_ms();
    let what = if figure == Figure::Offset {
        "a clock offset"
    } else {
        "a latency"
    };
    // Written so that NaN fails the comparison and is refused too.
    if (value / per_ms).abs() <= max_ms {
        Ok(())
    } else {
        Err(format!(
            "{} = {} is not {what} (|ms| must be at most {max_ms})",
            figure.field(),
            Shown(value)
        ))
    }
}

/// Checks `ts_unix_ms`.
pub(crate) fn check_unix_ms(name: &str, value: f64) -> Result<(), String> {
    if (0.0..=MAX_UNIX_MS).contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "{name} = {} is not a Unix time in ms (must be between 0 and {})",
            Shown(value),
            MAX_UNIX_MS.floor()
        ))
    }
}

/// A number as a person would write it in a record: `1e300`, not 301 digits.
struct Shown(f64);

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        if v != 0.0 && v.is_finite() && !(1e-6..1e16).contains(&v.abs()) {
            write!(f, "{v:e}")
        } else {
            write!(f, "{v}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_inclusive_and_refuse_what_is_not_a_number() {
        let ms = |v| check_figure(Figure::E2e, 1.0, v);
        assert_eq!(ms(86_400_000.0), Ok(()));
        assert_eq!(ms(-86_400_000.0), Ok(()));
        assert_eq!(
            ms(86_400_000.5),
            Err("e2e_ms = 86400000.5 is not a latency (|ms| must be at most 86400000)".into())
        );
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300, -1e300] {
            assert!(ms(v).is_err(), "{v}");
        }
        // µs are held to the same bound in ms.
        assert_eq!(
            check_figure(Figure::Observer, 1000.0, 86_400_000_000.0),
            Ok(())
        );
        assert_eq!(
            check_figure(Figure::Observer, 1000.0, 1e300),
            Err("observer_us = 1e300 is not a latency (|ms| must be at most 86400000)".into())
        );
        // A clock offset may be as far as two Unix times apart.
        assert_eq!(check_figure(Figure::Offset, 1.0, -1.7e12), Ok(()));
        assert!(check_figure(Figure::Offset, 1.0, 1e13).is_err());
        assert_eq!(check_unix_ms("ts_unix_ms", 1_764_000_000_123.456), Ok(()));
        assert_eq!(check_unix_ms("ts_unix_ms", 0.0), Ok(()));
        assert_eq!(
            check_unix_ms("ts_unix_ms", 1e300),
            Err(
                "ts_unix_ms = 1e300 is not a Unix time in ms (must be between 0 and 9223372036854)"
                    .into()
            )
        );
        assert!(check_unix_ms("ts_unix_ms", -1.0).is_err());
        assert!(check_unix_ms("ts_unix_ms", f64::NAN).is_err());
    }

    #[test]
    fn numbers_are_shown_as_written() {
        assert_eq!(Shown(1e300).to_string(), "1e300");
        assert_eq!(Shown(-1e300).to_string(), "-1e300");
        assert_eq!(Shown(86_400_000.5).to_string(), "86400000.5");
        assert_eq!(Shown(1.5e-9).to_string(), "1.5e-9");
        assert_eq!(Shown(0.0).to_string(), "0");
    }
}
