//! The comparison with the injected truth as the demo prints it: a table
//! of record fields, then the sentences.

use std::fmt::Write as _;

use stagetrace_analyze::table::{Align, Table};
use stagetrace_schema::Figure;

use super::{Against, DriftTruth, Truth};
use crate::args::DemoArgs;

impl Truth {
    /// The comparison as a table of record fields, then the sentences
    /// (the warning, if any, is printed apart: see [`Truth::warning`]).
    pub(crate) fn text(&self, a: &DemoArgs, steady: u64) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "against the injected truth (medians of {steady} steady calls):"
        );
        let mut t = Table::new(
            2,
            &[
                ("field", Align::Left),
                ("measured", Align::Right),
                ("injected", Align::Right),
                ("what it rests on", Align::Left),
            ],
        );
        self.against_rows(&mut t, a);
        if let Some(d) = &self.drift {
            d.row(&mut t);
        }
        t.write(&mut s);
        // A blank line: what follows is no row of the table.
        s.push('\n');
        if let Some(h) = &self.hops {
            h.text(&mut s);
        }
        if let Some(x) = &self.executor {
            x.text(&mut s);
        }
        for line in self
            .sentences(a)
            .into_iter()
            .skip(usize::from(self.clocks_disagree.is_some()))
        {
            let _ = writeln!(s, "  - {line}");
        }
        s
    }

    /// The table's rows of the figures against what was injected, each
    /// with what its verdict rests on.
    fn against_rows(&self, s: &mut Table, a: &DemoArgs) {
        if let Some(x) = &self.net {
            x.row(
                s,
                false,
                format!(
                    "exact without clock sync; {:+.3} ms of loopback, framing and copies",
                    x.measured_ms - x.injected_ms
                ),
            );
        }
        for x in [&self.uplink, &self.downlink].into_iter().flatten() {
            let note = match x.bound_ms {
                Some(b) => format!(
                    "± {b:.3} ms ({}): {}",
                    Figure::SplitErr.field(),
                    x.verdict()
                ),
                None => format!("from trusted clocks, no bound: {}", x.verdict()),
            };
            x.row(s, false, note);
        }
        if let Some(x) = &self.offset {
            let note = match (x.bound_ms, x.inside) {
                (Some(b), Some(_)) => {
                    format!(
                        "± {b:.3} ms ({}): {}",
                        Figure::SplitErr.field(),
                        x.verdict()
                    )
                }
                _ if a.server_drift_ppm != 0.0 => {
                    "the clock drifts during the run (see below)".to_owned()
                }
                _ => "the clock stepped during the run (see below)".to_owned(),
            };
            x.row(s, true, note);
        }
        if let Some(x) = &self.infer {
            x.row(
                s,
                false,
                "the model's cost; pre/post-processing included".to_owned(),
            );
        }
        if let Some(x) = &self.ttfb {
            x.row(
                s,
                false,
                format!(
                    "uplink + model + downlink delays, unsplit: the server sent no timing (a black box); {:+.3} ms of loopback, framing and copies",
                    x.measured_ms - x.injected_ms
                ),
            );
        }
    }
}

impl Against {
    /// Whether the truth lies inside what the figure claims, as printed.
    fn verdict(&self) -> &'static str {
        match self.inside {
            Some(true) => "inside",
            Some(false) => "OUTSIDE",
            None => "",
        }
    }

    /// The figure's row of the table, followed by `note`.
    fn row(&self, t: &mut Table, signed: bool, note: String) {
        let v = |ms: f64| {
            if signed {
                format!("{ms:+.3} ms")
            } else {
                format!("{ms:.3} ms")
            }
        };
        t.row(vec![
            self.field.to_string(),
            v(self.measured_ms),
            v(self.injected_ms),
            note,
        ]);
    }
}

impl DriftTruth {
    /// The drift's row of the table.
    fn row(&self, t: &mut Table) {
        t.row(vec![
            "drift_ppm".to_string(),
            format!("{:+.1} ppm", self.estimated_ppm),
            format!("{:+.1} ppm", self.injected_ppm),
            format!(
                "± {:.1} ppm: {}",
                self.err_ppm,
                if (self.estimated_ppm - self.injected_ppm).abs() <= self.err_ppm {
                    "inside"
                } else {
                    "OUTSIDE"
                }
            ),
        ]);
    }
}
