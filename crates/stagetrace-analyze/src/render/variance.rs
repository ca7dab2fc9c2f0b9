//! How the e2e variance of a kind splits over its stages and the gap.

use std::fmt::Write as _;

use stagetrace_schema::Figure;

use crate::analysis::GroupReport;
use crate::figures;
use crate::format::fmt_ms;

/// How the e2e variance splits over the stages and the gap.
pub(super) fn variance(s: &mut String, g: &GroupReport) {
    if let Some(gp) = &g.gap {
        // A figure inside another one of the list is shown "of which" under
        // the tightest one holding it (queue and infer under server, pre,
        // model and post under infer, the observer under the gap).
        let present = || gp.shares.keys().filter_map(|k| Figure::from_name(k));
        let inner =
            |k: &str| -> Option<Figure> { figures::container(Figure::from_name(k)?, present()) };
        let mut top: Vec<(&str, f64)> = gp
            .shares
            .iter()
            .filter(|(k, _)| inner(k).is_none())
            .map(|(k, v)| (*k, *v))
            .collect();
        top.sort_by(|a, b| b.1.total_cmp(&a.1));
        fn item(
            k: &str,
            v: f64,
            shares: &std::collections::BTreeMap<&'static str, f64>,
            inner: &dyn Fn(&str) -> Option<Figure>,
        ) -> String {
            // Inside figures in the table's order.
            let mut subs: Vec<(Figure, f64)> = shares
                .iter()
                .filter(|(sk, _)| inner(sk).is_some_and(|c| c.name() == k))
                .filter_map(|(sk, sv)| Some((Figure::from_name(sk)?, *sv)))
                .collect();
            subs.sort_by_key(|(f, _)| *f);
            if subs.is_empty() {
                format!("{k} {:.1}%", 100.0 * v)
            } else {
                let subs: Vec<String> = subs
                    .iter()
                    .map(|(f, sv)| item(f.name(), *sv, shares, inner))
                    .collect();
                format!("{k} {:.1}% (of which {})", 100.0 * v, subs.join(", "))
            }
        }
        let list: Vec<String> = top
            .iter()
            .map(|(k, v)| item(k, *v, &gp.shares, &inner))
            .collect();
        let _ = writeln!(
            s,
            "\n  e2e variance (σ {}) explained by: {}",
            fmt_ms(gp.e2e_stddev_ms),
            list.join(", ")
        );
    }
}
