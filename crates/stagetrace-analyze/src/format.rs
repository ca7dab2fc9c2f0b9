//! How numbers and times are written in every text the analysis produces.

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

/// A change in ms with its sign (`"+20.00 ms"`, `"−850 µs"`).
pub fn signed_ms(v: f64) -> String {
    if v >= 0.0 {
        format!("+{}", fmt_ms(v))
    } else {
        format!("−{}", fmt_ms(-v))
    }
}

/// A duration in ms, with a precision that suits its size (`"36.20 ms"`, `"850 µs"`).
pub fn fmt_ms(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a >= 1000.0 {
        format!("{:.0} ms", v)
    } else if a >= 100.0 {
        format!("{:.1} ms", v)
    } else if a >= 1.0 {
        format!("{:.2} ms", v)
    } else if a >= 0.1 || a == 0.0 {
        format!("{:.3} ms", v)
    } else {
        format!("{:.1} µs", v * 1000.0)
    }
}

/// UTC ISO-8601 with milliseconds for a Unix time in ms
/// (`2023-11-14T22:13:20.123Z`); `-` for a time before the epoch, past the
/// year 9999 or not a number.
pub fn iso_time(unix_ms: f64) -> String {
    const NO_TIME: &str = "-";
    if !unix_ms.is_finite() || unix_ms < 0.0 {
        return NO_TIME.to_string();
    }
    let Some(t) = UNIX_EPOCH.checked_add(Duration::from_millis(unix_ms.round() as u64)) else {
        return NO_TIME.to_string();
    };
    let mut s = String::with_capacity(24);
    // humantime refuses (fmt::Error) the years it cannot write in four digits.
    match write!(s, "{}", humantime::format_rfc3339_millis(t)) {
        Ok(()) => s,
        Err(_) => NO_TIME.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_times() {
        assert_eq!(iso_time(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_time(1_700_000_000_123.0), "2023-11-14T22:13:20.123Z");
        assert_eq!(iso_time(951_782_400_000.0), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso_time(1_700_000_000_123.6), "2023-11-14T22:13:20.124Z");
        assert_eq!(iso_time(-1.0), "-");
        assert_eq!(iso_time(f64::NAN), "-");
        assert_eq!(iso_time(1e300), "-");
    }

    #[test]
    fn durations_keep_a_precision_that_suits_them() {
        assert_eq!(fmt_ms(36.2), "36.20 ms");
        assert_eq!(fmt_ms(0.85), "0.850 ms");
        assert_eq!(fmt_ms(0.085), "85.0 µs");
        assert_eq!(fmt_ms(1234.4), "1234 ms");
    }
}
