//! A dataset's summary, column by column: the steady calls are sorted by
//! kind once, then each figure's column is recorded into its sketch in one
//! pass, and only the few calls that can be among the slowest have their
//! stage times gathered.

use std::collections::BTreeMap;

use stagetrace_schema::Figure;

use super::sketch::Sketch;
use super::{micros, robot_of, SlowCall, Summary, TOP_K};
use crate::analysis::{analyze, AnalyzeOptions, VerdictEvidence};
use crate::figures;
use crate::load::{Dataset, F_DEADLINE_MISS, F_HAS_DEADLINE};

impl Summary {
    /// Summarises a dataset; each file's calls belong to the robot
    /// [`robot_of`] names after the file's path.
    pub fn of(ds: &Dataset) -> Summary {
        let mut s = Summary::new();
        let read: Vec<Figure> = figures::read().collect();
        // The steady calls, by the dataset's kind.
        let mut steady: Vec<Vec<u32>> = vec![Vec::new(); ds.kinds().len()];
        for (file, path) in ds.files.iter().enumerate() {
            let robot = robot_of(path);
            let calls = ds.file_calls(file);
            if !calls.is_empty() {
                *s.robots.entry(robot.clone()).or_insert(0) += calls.len() as u64;
            }
            let mut file_steady = Vec::new();
            for i in calls {
                if s.count_call(ds, i) {
                    let k = ds.kind.get(i).map_or(0, |k| usize::from(*k));
                    if let Some(calls) = steady.get_mut(k) {
                        calls.push(i as u32);
                    }
                    file_steady.push(i);
                }
            }
            s.add_slowest(ds, &file_steady, &robot, &read);
        }
        for (k, calls) in steady.iter().enumerate() {
            if !calls.is_empty() {
                s.add_kind(ds, &ds.kinds()[k], calls, &read);
            }
        }
        for (reason, count) in &ds.errors {
            *s.reasons.entry(reason.clone()).or_insert(0) += count;
        }
        s.trim_slowest();
        s.trim_reasons();
        s
    }

    /// Summarises a dataset as [`of`](Self::of) does, with the evidence of
    /// its verdicts: the dataset (a partition) analysed exactly, against
    /// `baseline` when given, and reduced to what its verdicts stand on
    /// (`analysis::evidence`). Merged summaries then give the verdicts of
    /// the whole ([`Summary::report`]).
    pub fn of_analysed(ds: &Dataset, baseline: Option<&Dataset>) -> Summary {
        let mut s = Summary::of(ds);
        let a = analyze(ds, baseline, &AnalyzeOptions::default());
        for (kind, ev) in VerdictEvidence::of_report(&a.report) {
            if let Some(k) = s.kinds.get_mut(&kind) {
                k.verdicts = Some(ev);
            }
        }
        s
    }

    /// Counts call `i`; true when it is steady (neither warm-up nor
    /// failed: those are kept out of the figures, as
    /// `analysis::group_data` keeps them out).
    fn count_call(&mut self, ds: &Dataset, i: usize) -> bool {
        self.calls += 1;
        let ts = ds.ts_unix_ms(i);
        if ts.is_finite() {
            self.first_ts_unix_ms = Some(self.first_ts_unix_ms.map_or(ts, |t| t.min(ts)));
            self.last_ts_unix_ms = Some(self.last_ts_unix_ms.map_or(ts, |t| t.max(ts)));
        }
        let (warmup, failed) = (ds.is_warmup(i), ds.is_failed(i));
        self.warmup += u64::from(warmup);
        self.failed += u64::from(failed);
        !(warmup || failed)
    }

    /// One kind's steady calls: their count, deadline evidence, and each
    /// figure's sketch (a figure none of them carries gets none).
    fn add_kind(&mut self, ds: &Dataset, kind: &str, calls: &[u32], read: &[Figure]) {
        let k = self.kinds.entry(kind.to_owned()).or_default();
        k.steady += calls.len() as u64;
        for &i in calls {
            let flags = ds.flags.get(i as usize).copied().unwrap_or(0);
            if flags & F_HAS_DEADLINE != 0 {
                k.deadline_calls += 1;
                k.deadline_misses += u64::from(flags & F_DEADLINE_MISS != 0);
            }
        }
        for &f in read {
            let Some(column) = ds.columns.get(f.index()).filter(|c| !c.is_empty()) else {
                continue;
            };
            let mut sketch: Option<Sketch> = k.figures.remove(f.name());
            for &i in calls {
                let Some(&v) = column.get(i as usize) else {
                    continue;
                };
                if v.is_nan() {
                    continue;
                }
                if sketch.is_none() {
                    sketch = Sketch::new();
                }
                if let Some(s) = sketch.as_mut() {
                    s.record(v);
                }
            }
            if let Some(s) = sketch {
                k.figures.insert(f.name().to_owned(), s);
            }
        }
    }

    /// The calls of one robot's file that can be among the [`TOP_K`]
    /// slowest by e2e (every call tied with the k-th too), with their
    /// stage times; the merge keeps the slowest of all.
    fn add_slowest(&mut self, ds: &Dataset, calls: &[usize], robot: &str, read: &[Figure]) {
        let Some(e2e) = ds.columns.get(Figure::E2e.index()) else {
            return;
        };
        let mut slow: Vec<(f32, usize)> = calls
            .iter()
            .filter_map(|&i| {
                let v = *e2e.get(i)?;
                (!v.is_nan()).then_some((v, i))
            })
            .collect();
        if slow.len() > TOP_K {
            slow.select_nth_unstable_by(TOP_K - 1, |a, b| b.0.total_cmp(&a.0));
            // Ranked as the report shows them, rounded to the µs: every
            // call that rounds level with the k-th is kept (a µs below
            // the k-th's value holds them all).
            let cut = micros(slow[TOP_K - 1].0);
            slow.retain(|(e, _)| *e >= (cut - 0.001) as f32 && micros(*e) >= cut);
        }
        for (e2e, i) in slow {
            let e2e_ms = micros(e2e);
            let mut stages = BTreeMap::new();
            for &f in read {
                if f == Figure::E2e {
                    continue;
                }
                if let Some(&v) = ds.columns.get(f.index()).and_then(|c| c.get(i)) {
                    if !v.is_nan() {
                        stages.insert(f.name().to_owned(), micros(v));
                    }
                }
            }
            self.slowest.push(SlowCall {
                e2e_ms,
                robot: robot.to_owned(),
                kind: ds.kind_of(i).to_owned(),
                seq: ds.seq(i),
                ts_unix_ms: ds.ts_unix_ms(i),
                stages,
            });
        }
        self.trim_slowest();
    }
}
