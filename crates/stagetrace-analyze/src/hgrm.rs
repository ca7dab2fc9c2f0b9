//! HdrHistogram percentile-spectrum files (`.hgrm`): the text
//! `outputPercentileDistribution` writes, which HistogramLogAnalyzer and the
//! hdrhistogram.github.io plotter read. Values come from the exact sorted
//! data (not bucketed), in milliseconds.

use std::fmt::Write as _;

use crate::stats;

/// Reporting ticks per half distance to 100 %, as HdrHistogram's default.
const TICKS_PER_HALF_DISTANCE: f64 = 5.0;

/// The percentile spectrum of a sorted sample, in HdrHistogram's format
/// (value unit: milliseconds, 3 decimals). Empty input gives an empty string.
pub fn percentile_spectrum(sorted: &[f32]) -> String {
    let mut out = String::new();
    let n = sorted.len();
    if n == 0 {
        return out;
    }
    let _ = write!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut level = 0.0f64;
    let mut i = 0usize;
    while i < n {
        let v = sorted[i];
        // From `i + 1`: a NaN equals nothing, not even itself, and would
        // otherwise never be passed.
        let mut j = i + 1;
        while j < n && sorted[j] == v {
            j += 1;
        }
        let cum = j; // values ≤ v
        let current = 100.0 * cum as f64 / n as f64;
        let value = f64::from(v);
        if cum == n {
            if current >= level {
                line(&mut out, value, level, cum);
            }
            let _ = writeln!(out, "{:12.3} {:2.12} {:10}", value, 1.0, cum);
            break;
        }
        while current >= level {
            line(&mut out, value, level, cum);
            let next = next_level(level);
            if next.is_nan() || next <= level {
                // Levels crowd toward 100 % until a step no longer moves
                // one (or a NaN level): stop rather than repeat a line forever.
                break;
            }
            level = next;
        }
        i = j;
    }
    let (mean, var) = stats::mean_var(sorted.iter().map(|v| f64::from(*v)));
    let max = f64::from(sorted[n - 1]);
    let _ = writeln!(
        out,
        "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]",
        mean,
        var.sqrt()
    );
    let _ = writeln!(out, "#[Max     = {:12.3}, Total count    = {:12}]", max, n);
    // Geometry of the HdrHistogram (3 significant digits, 1 µs unit) that
    // would hold this range, for tools that print it.
    let sub_buckets: u64 = 2048;
    let highest = (max * 1000.0).ceil().max(2.0) as u64;
    let mut smallest_untrackable = sub_buckets;
    let mut buckets = 1u64;
    while smallest_untrackable <= highest && buckets < 64 {
        smallest_untrackable = smallest_untrackable.saturating_mul(2);
        buckets += 1;
    }
    let _ = writeln!(
        out,
        "#[Buckets = {:12}, SubBuckets     = {:12}]",
        buckets, sub_buckets
    );
    out
}

fn line(out: &mut String, value: f64, level: f64, cum: usize) {
    let q = level / 100.0;
    let _ = writeln!(
        out,
        "{:12.3} {:2.12} {:10} {:14.2}",
        value,
        q,
        cum,
        1.0 / (1.0 - q)
    );
}

/// HdrHistogram's `PercentileIterator` step: five ticks per halving of the
/// distance to 100 %.
fn next_level(level: f64) -> f64 {
    let halvings = (100.0 / (100.0 - level)).log2().floor();
    let ticks = TICKS_PER_HALF_DISTANCE * 2f64.powf(halvings + 1.0);
    level + 100.0 / ticks
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn matches_hdrhistogram_layout() {
        let v: Vec<f32> = (1..=1000).map(|i| i as f32).collect();
        let s = percentile_spectrum(&v);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(
            lines[0],
            "       Value     Percentile TotalCount 1/(1-Percentile)"
        );
        assert_eq!(lines[1], "");
        assert_eq!(
            lines[2],
            "       1.000 0.000000000000          1           1.00"
        );
        assert_eq!(
            lines[3],
            "     100.000 0.100000000000        100           1.11"
        );
        assert!(lines.contains(&"     500.000 0.500000000000        500           2.00"));
        assert!(lines.contains(&"     550.000 0.550000000000        550           2.22"));
        assert!(s.contains("    1000.000 1.000000000000       1000\n"));
        assert!(s.contains("#[Max     =     1000.000, Total count    =         1000]"));
        assert!(s.ends_with("]\n"));
    }

    #[test]
    fn odd_values_end_promptly() {
        for odd in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX] {
            let sample = vec![1.0, 2.0, odd, odd, 3.0];
            let s = crate::watchdog::within(10, &format!("spectrum with {odd}"), move || {
                percentile_spectrum(&sample)
            });
            // A line per level at most: a few dozen for five values.
            assert!(s.lines().count() < 100, "{odd}: {s}");
        }
    }
}
