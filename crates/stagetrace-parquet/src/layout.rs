//! The Hive-style layout: `robot=<robot>/date=<YYYY-MM-DD>/part-<run>-<n>.parquet`,
//! so DuckDB, Spark, polars and `stagetrace report --robot/--since` read only
//! the partitions a query names.

use std::path::{Path, PathBuf};

/// Nanoseconds in a day.
const DAY_NS: u64 = 86_400 * 1_000_000_000;

/// The extension of a finished file.
pub(crate) const PART_EXTENSION: &str = "parquet";
/// The suffix of a file still being written: engines skip names that start
/// with a dot, and a crash leaves this name behind, never a file without footer
/// under the finished name.
pub(crate) const IN_PROGRESS_SUFFIX: &str = ".inprogress";

/// A robot name as a partition value: letters, digits, `.`, `-` and `_`
/// kept, anything else (`/`, `=`, spaces) made `_`.
pub fn partition_value(robot: &str) -> String {
    let s: String = robot
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.chars().all(|c| c == '.') {
        "unknown".to_owned()
    } else {
        s
    }
}

/// The UTC day (days since 1970-01-01) of a Unix time in nanoseconds.
pub(crate) fn day_of(unix_ns: u64) -> i64 {
    (unix_ns / DAY_NS) as i64
}

/// A day as `YYYY-MM-DD` (proleptic Gregorian, UTC).
pub fn date_string(day: i64) -> String {
    let (y, m, d) = civil_from_days(day);
    format!("{y:04}-{m:02}-{d:02}")
}

/// `YYYY-MM-DD` as days since 1970-01-01; `None` when it is not a date.
pub fn parse_date(s: &str) -> Option<i64> {
    let mut parts = s.splitn(3, '-');
    let y: i64 = parts.next()?.parse().ok()?;
    let m: u32 = parts.next()?.parse().ok()?;
    let d: u32 = parts.next()?.parse().ok()?;
    if s.len() != 10 || !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return None;
    }
    Some(days_from_civil(y, m, d))
}

/// The partition directory of one robot's day.
pub(crate) fn partition_dir(root: &Path, robot: &str, day: i64) -> PathBuf {
    root.join(format!("robot={robot}"))
        .join(format!("date={}", date_string(day)))
}

/// The finished name of a run's `n`-th file.
pub(crate) fn part_name(run: &str, n: u64) -> String {
    format!("part-{run}-{n:05}.{PART_EXTENSION}")
}

/// The name a file has while it is written.
pub(crate) fn in_progress_name(run: &str, n: u64) -> String {
    format!(".{}{IN_PROGRESS_SUFFIX}", part_name(run, n))
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's civil-calendar algorithms (public domain): exact for
// every day an i64 of days can hold that a record's u64 ns can reach.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_through_days() {
        assert_eq!(date_string(0), "1970-01-01");
        assert_eq!(date_string(11_016), "2000-02-29");
        assert_eq!(parse_date("2000-02-29"), Some(11_016));
        assert_eq!(parse_date("2001-02-29"), None);
        assert_eq!(parse_date("2026-12-3"), None);
        for day in [-1, 0, 59, 10_000, 20_425, 40_000] {
            assert_eq!(parse_date(&date_string(day)), Some(day));
        }
    }

    #[test]
    fn robot_names_become_safe_partition_values() {
        assert_eq!(partition_value("arm-3"), "arm-3");
        assert_eq!(partition_value("lab/arm=3 b"), "lab_arm_3_b");
        assert_eq!(partition_value(""), "unknown");
        assert_eq!(partition_value(".."), "unknown");
    }
}
