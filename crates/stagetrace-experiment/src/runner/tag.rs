//! Tagging: every record and resource sample gets the phase and level it
//! fell in, is written to its file with them, and joins the observations the
//! verdict reads.

use std::io::Write;

use serde::Serialize;
use stagetrace::record::CallRecord;
use stagetrace_schema::Figure;
use stagetrace_schema::{ns_to_ms, FIGURE_COUNT};

use crate::sampler::ResourceSample;
use crate::verdict::{Obs, PhaseSpan};

/// One line of `records-experiment.jsonl` or `resources.jsonl`: the record
/// (or sample) as written, then its phase and level.
#[derive(Serialize)]
struct Tagged<'a, T: Serialize> {
    #[serde(flatten)]
    item: &'a T,
    phase: &'a str,
    level: usize,
    /// Present (and true) only for calls left out as settling.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    settling: bool,
}

/// The run so far: its phases, the calls and the resource samples in them.
pub(crate) struct State {
    pub(crate) phases: Vec<PhaseSpan>,
    pub(crate) obs: Vec<Obs>,
    pub(crate) samples: Vec<(usize, ResourceSample)>,
    pub(crate) write_errors: u64,
}

impl State {
    pub(crate) fn new() -> State {
        State {
            phases: Vec::new(),
            obs: Vec::new(),
            samples: Vec::new(),
            write_errors: 0,
        }
    }

    /// The phase a wall time falls in.
    fn phase_at(&self, ts: f64) -> Option<usize> {
        self.phases
            .iter()
            .rposition(|p| p.start_unix_ms <= ts)
            .filter(|&i| ts < self.phases[i].end_unix_ms)
    }

    fn write_line<T: Serialize>(&mut self, out: &mut impl Write, line: &Tagged<'_, T>) {
        let ok = serde_json::to_writer(&mut *out, line).is_ok() && out.write_all(b"\n").is_ok();
        if !ok {
            self.write_errors += 1;
        }
    }

    pub(crate) fn tag_record(&mut self, rec: &CallRecord, out: &mut impl Write) {
        let ts_unix_ms = rec.ts_unix_ms();
        let Some(pi) = self.phase_at(ts_unix_ms) else {
            return;
        };
        let p = &self.phases[pi];
        // Settling after a change, or straddling the next change.
        let e2e_ms = rec.ms(Figure::E2e).unwrap_or(0.0);
        let settling = ts_unix_ms < p.settle_until_unix_ms || ts_unix_ms + e2e_ms > p.end_unix_ms;
        let failed = rec.failed == Some(true);
        // The statistics run in ms; a required figure the record lacks
        // counts as 0, as the record writes it.
        let mut vals = [f32::NAN; FIGURE_COUNT];
        for f in Figure::ALL {
            if let Some(ms) = rec.get(f).map(ns_to_ms).or(f.is_required().then_some(0.0)) {
                vals[f.index()] = ms as f32;
            }
        }
        let (phase, level) = (p.phase.clone(), p.level);
        self.obs.push(Obs {
            ts_ms: ts_unix_ms,
            phase: pi,
            settling,
            failed,
            seq: rec.seq,
            dry_ticks: rec.dry_ticks.unwrap_or(0),
            vals,
        });
        let line = Tagged {
            item: rec,
            phase: &phase,
            level,
            settling,
        };
        self.write_line(out, &line);
    }

    pub(crate) fn tag_sample(&mut self, s: ResourceSample, out: &mut impl Write) {
        let Some(pi) = self.phase_at(s.ts_unix_ms) else {
            return;
        };
        let p = &self.phases[pi];
        let (phase, level, settled) = (
            p.phase.clone(),
            p.level,
            s.ts_unix_ms >= p.settle_until_unix_ms,
        );
        let line = Tagged {
            item: &s,
            phase: &phase,
            level,
            settling: false,
        };
        self.write_line(out, &line);
        if settled {
            self.samples.push((pi, s));
        }
    }

    /// Calls of phase `pi` counted in the statistics.
    pub(crate) fn counted(&self, pi: usize) -> usize {
        self.obs
            .iter()
            .filter(|o| o.phase == pi && o.counts())
            .count()
    }

    /// Fills in each phase's counted and excluded calls.
    pub(crate) fn count_calls(&mut self) {
        for pi in 0..self.phases.len() {
            let total = self.obs.iter().filter(|o| o.phase == pi).count();
            let counted = self.counted(pi);
            self.phases[pi].calls = counted as u64;
            self.phases[pi].excluded_calls = (total - counted) as u64;
        }
    }
}
