//! A weighted least-squares line with a stated bound on its slope: what
//! the drift estimate (`filter.rs`) fits through each direction's
//! per-second minima.

/// Most lag-1 correlation of the drift fit's residuals believed (the
/// variance widens at most 9-fold, the bound 3-fold).
const MAX_RESIDUAL_RHO: f64 = 0.8;

/// Standard errors a ± bound spans for the coverage of ± 3σ (99.73 %,
/// two-sided) when σ itself is estimated from a fit with `df` degrees of
/// freedom: Student's t quantile. With few drift buckets 3 standard errors
/// cover far less (about 94 % with 5 buckets); between tabulated values the
/// smaller `df`'s (larger) factor is used, so the bound never covers less.
pub(super) fn coverage_factor(df: usize) -> f64 {
    // (df, t_{0.99865}(df))
    const TABLE: [(usize, f64); 13] = [
        (1, 235.8),
        (2, 19.21),
        (3, 9.22),
        (4, 6.62),
        (5, 5.51),
        (6, 4.90),
        (7, 4.53),
        (8, 4.28),
        (10, 3.96),
        (12, 3.76),
        (16, 3.54),
        (20, 3.42),
        (30, 3.27),
    ];
    if df >= 60 {
        // Down to 3.0 as df grows: 3.13 never covers less.
        return 3.13;
    }
    TABLE
        .iter()
        .rev()
        .find(|(d, _)| *d <= df)
        .map_or(TABLE[0].1, |(_, t)| *t)
}

/// Weighted least-squares line through `(x, y, weight)` points in x order:
/// (slope, its ± bound: the fit's standard error times [`coverage_factor`]);
/// `None` with fewer than three points or no spread in x.
///
/// Why the residuals' lag-1 correlation widens the bound: neighbouring
/// buckets' minima share their cause — a robot loop and a proxy's timer on
/// the same millisecond ticks keep the same phase for seconds, a busy host
/// stays busy — so n correlated minima hold fewer than n independent
/// errors, and the textbook standard error (which assumes n) states a bound
/// the truth falls outside. With AR(1) residuals of correlation ρ a trend's
/// slope varies about (1 + ρ)/(1 − ρ) times more: the variance is widened
/// by that (ρ read from the residuals, at most [`MAX_RESIDUAL_RHO`]).
pub(super) fn line_fit(points: &[(f64, f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len();
    if n < 3 {
        return None;
    }
    let sw: f64 = points.iter().map(|p| p.2).sum();
    let mx = points.iter().map(|p| p.2 * p.0).sum::<f64>() / sw;
    let my = points.iter().map(|p| p.2 * p.1).sum::<f64>() / sw;
    let sxx: f64 = points.iter().map(|p| p.2 * (p.0 - mx).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| p.2 * (p.0 - mx) * (p.1 - my)).sum();
    let slope = sxy / sxx;
    // Residuals scaled by √weight: equal variance when the weights are right.
    let r: Vec<f64> = points
        .iter()
        .map(|p| p.2.sqrt() * (p.1 - (my + slope * (p.0 - mx))))
        .collect();
    let rss: f64 = r.iter().map(|v| v * v).sum();
    let lag1: f64 = r.windows(2).map(|w| w[0] * w[1]).sum();
    // Negative correlation would narrow the bound: never trusted. Above
    // 0.8 the few points hold no estimate of ρ worth more than its cap.
    let rho = if rss > 0.0 {
        (lag1 / rss).clamp(0.0, MAX_RESIDUAL_RHO)
    } else {
        0.0
    };
    let inflation = (1.0 + rho) / (1.0 - rho);
    Some((
        slope,
        coverage_factor(n - 2) * (inflation * rss / (n as f64 - 2.0) / sxx).sqrt(),
    ))
}
