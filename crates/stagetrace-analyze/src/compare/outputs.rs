//! The outputs line: whether the policy returned the same outputs in both
//! runs, call by call (joined by kind and `seq`), where records carry an
//! output digest.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::{DigestCheck, Mismatch};
use crate::load::Dataset;

/// Most digest mismatches listed (all are counted).
const MAX_LISTED_MISMATCHES: usize = 20;

/// The outputs of the calls both runs made, compared by their digests
/// (failed calls left out).
pub(super) fn digests(before: &Dataset, after: &Dataset) -> DigestCheck {
    let mut map: HashMap<(&str, u64), &str> = HashMap::new();
    for (i, d) in before.digests() {
        if before.is_failed(i) {
            continue;
        }
        map.entry((before.kind_of(i), before.seq(i))).or_insert(d);
    }
    let mut check = DigestCheck {
        compared: 0,
        matched: 0,
        mismatched: 0,
        only_before: 0,
        only_after: 0,
        mismatches: Vec::new(),
    };
    let mut seen = 0u64;
    for (i, d) in after.digests() {
        if after.is_failed(i) {
            continue;
        }
        let key = (after.kind_of(i), after.seq(i));
        match map.get(&key) {
            Some(b) => {
                seen += 1;
                check.compared += 1;
                if *b == d {
                    check.matched += 1;
                } else {
                    check.mismatched += 1;
                    if check.mismatches.len() < MAX_LISTED_MISMATCHES {
                        check.mismatches.push(Mismatch {
                            kind: key.0.to_string(),
                            seq: key.1,
                            before: (*b).to_string(),
                            after: d.to_string(),
                        });
                    }
                }
            }
            None => check.only_after += 1,
        }
    }
    check.only_before = (map.len() as u64).saturating_sub(seen);
    check
}

/// Whether the policy's outputs stayed the same, in words.
pub(super) fn outputs_text(s: &mut String, o: &DigestCheck) {
    if o.compared == 0 {
        let _ = writeln!(
            s,
            "\noutputs: not compared — no call carries an output digest (output_digest) in both runs with the same kind and seq"
        );
    } else if o.failed() {
        let _ = writeln!(
            s,
            "\nOUTPUTS CHANGED: {} of {} calls (same kind and seq) returned a different output — the change altered the policy's results:",
            o.mismatched, o.compared
        );
        for m in &o.mismatches {
            let _ = writeln!(
                s,
                "  kind {} seq {}: {} → {}",
                m.kind, m.seq, m.before, m.after
            );
        }
    } else {
        let _ = writeln!(
            s,
            "\noutputs: the policy's outputs were identical for all {} calls (same kind and seq)",
            o.compared
        );
    }
    if o.only_before + o.only_after > 0 {
        let _ = writeln!(
            s,
            "  ({} call(s) with a digest only before, {} only after: not compared)",
            o.only_before, o.only_after
        );
    }
}
