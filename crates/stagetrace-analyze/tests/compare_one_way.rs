//! `compare` on a one-way change: it judges uplink / downlink by the
//! report's rule (`docs/report.md`, "Uplink vs downlink"). Between two
//! runs whose split rests on an estimated clock, 15 ms added to the uplink
//! reads as 7.5 ms each way (the offset estimate's midpoint rule): compare
//! says net moved by 15 ms and the direction cannot be told, with the
//! bound, and names neither direction. With trusted clocks the records
//! hold the truth: the uplink is named, the downlink unchanged.

#![allow(clippy::unwrap_used)]

#[path = "support/gen.rs"]
mod gen;

use std::path::Path;

use gen::Scenario;
use stagetrace_analyze::compare::{compare, render, text, Comparison, Row};
use stagetrace_analyze::load::{Dataset, LoadOptions};

/// A 30 Hz loop of 18 ms calls; on an estimated clock the split's bound is
/// half the network time (1.35 ms of 2.7 ms), as the offset filter's is.
fn base(seed: u64) -> Scenario {
    Scenario {
        seed,
        calls: 300,
        hz: 30.0,
        warmup: 10,
        infer_ms: (12.0, 0.2),
        split_err_ms: 1.35,
        digests: true,
        ..Scenario::default()
    }
}

/// A scenario loaded as `compare` loads it (digests kept).
fn load(s: &Scenario) -> Dataset {
    Dataset::load_reader(
        gen::lines(s).as_bytes(),
        Path::new("generated"),
        LoadOptions {
            skip_bad: false,
            keep_digests: true,
        },
    )
    .unwrap()
}

fn row<'a>(c: &'a Comparison, stage: &str, stat: &str) -> &'a Row {
    c.groups[0]
        .rows
        .iter()
        .find(|r| r.stage == stage && r.stat == stat)
        .unwrap_or_else(|| panic!("no {stage} {stat} row"))
}

/// A table line's cells: the text between runs of two or more spaces.
fn cells(line: &str) -> Vec<&str> {
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

/// The rows `text` prints for `stage` (its label may carry the ± bound).
fn printed<'a>(text: &'a str, stage: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| {
            let c = cells(l);
            c.first()
                .is_some_and(|n| *n == stage || n.starts_with(&format!("{stage} ±")))
        })
        .collect()
}

#[test]
fn estimated_clocks_say_net_moved_and_the_direction_cannot_be_told() {
    let before = base(11);
    let after = Scenario {
        seed: 12,
        link_delay_ms: (15.0, 0.0),
        ..base(11)
    };
    let c = compare(&load(&before), &load(&after), 7);
    let out = text(&c);
    eprintln!("{out}");
    let g = &c.groups[0];
    // The bound on a change: each run's median split_err_ms, added
    // (1.35 before; 1.35 + 7.5 after, the offset filter's bound on a path
    // 15 ms longer).
    let bound = g.split_err_ms.unwrap();
    assert!((bound - 10.2).abs() < 0.01, "{bound}");
    // Net, exact, moved by the 15 ms injected.
    let net = row(&c, "net", "p50");
    assert!(net.significant, "{net:?}");
    assert!((net.delta_ms - 15.0).abs() < 0.3, "{net:?}");
    // Each direction read +7.5 ms: within the bound, so neither is named.
    for stage in ["uplink", "downlink"] {
        for stat in ["p50", "p90", "p99"] {
            let r = row(&c, stage, stat);
            assert!(!r.significant, "{r:?}");
            assert!(r.direction_unknown, "{r:?}");
            assert!((r.delta_ms - 7.5).abs() < 0.3, "{r:?}");
        }
    }
    // One sentence: net moved by about 15 ms, the direction cannot be
    // told, the bound.
    let said: Vec<&String> = g
        .summary
        .iter()
        .filter(|l| l.contains("which direction cannot be told"))
        .collect();
    assert_eq!(said.len(), 1, "{:?}", g.summary);
    assert!(
        said[0].starts_with("What changed: net (uplink + downlink, exact) slower by 15."),
        "{}",
        said[0]
    );
    assert!(said[0].contains("± 10.20 ms"), "{}", said[0]);
    assert!(said[0].contains("--clock trusted"), "{}", said[0]);
    // It is the first thing the kind's section says.
    let after_kind = out
        .lines()
        .skip_while(|l| !l.starts_with("kind \"call\""))
        .nth(1)
        .unwrap();
    assert_eq!(after_kind.trim_start(), said[0].as_str());
    // No row claims a significant move of either direction: no
    // percentage, no p-value, the bound named.
    for stage in ["uplink", "downlink"] {
        let rows = printed(&out, stage);
        assert_eq!(rows.len(), 3, "{stage}: {out}");
        for r in rows {
            let c = cells(r);
            assert!(c[0].ends_with("± 10.2"), "{r}");
            assert!(c[4].contains("direction unknown"), "{r}");
            assert!(!r.contains('%') && !r.contains("<0.001"), "{r}");
        }
    }
}

#[test]
fn trusted_clocks_name_the_uplink_and_keep_the_downlink() {
    let before = Scenario {
        trusted_clocks: true,
        ..base(13)
    };
    let after = Scenario {
        seed: 14,
        link_delay_ms: (15.0, 0.0),
        ..before.clone()
    };
    let c = compare(&load(&before), &load(&after), 7);
    let out = text(&c);
    eprintln!("{out}");
    let g = &c.groups[0];
    assert_eq!(g.split_err_ms, None);
    let up = row(&c, "uplink", "p50");
    assert!(up.significant && !up.direction_unknown, "{up:?}");
    assert!((up.delta_ms - 15.0).abs() < 0.3, "{up:?}");
    for stat in ["p50", "p90", "p99"] {
        let down = row(&c, "downlink", stat);
        assert!(!down.significant && !down.direction_unknown, "{down:?}");
    }
    assert!(
        g.summary[0].starts_with("What changed: uplink slower by 15."),
        "{:?}",
        g.summary
    );
    assert!(
        g.summary[0].contains("downlink unchanged"),
        "{:?}",
        g.summary
    );
    assert!(!out.contains("direction unknown"), "{out}");
    // The downlink, unchanged, is not listed; the uplink is.
    assert!(printed(&out, "downlink").is_empty(), "{out}");
    assert_eq!(printed(&out, "uplink").len(), 3, "{out}");
}

#[test]
fn a_direction_that_moved_beyond_the_bound_is_named() {
    // The split read +3 ms on the downlink alone, its bound 0.1 ms.
    let before = Scenario {
        split_err_ms: 0.05,
        ..base(15)
    };
    let after = Scenario {
        seed: 16,
        link_shift_ms: (0.0, 3.0),
        ..before.clone()
    };
    let c = compare(&load(&before), &load(&after), 7);
    let down = row(&c, "downlink", "p50");
    assert!(down.significant && !down.direction_unknown, "{down:?}");
    assert!(!row(&c, "uplink", "p50").significant);
    assert!(
        c.groups[0].summary[0].starts_with("What changed: downlink slower by 3."),
        "{:?}",
        c.groups[0].summary
    );
}

#[test]
fn the_answer_comes_first_and_unchanged_rows_wait_for_all() {
    let before = base(17);
    let after = Scenario {
        seed: 18,
        infer_factor: 1.2,
        ..base(17)
    };
    let c = compare(&load(&before), &load(&after), 7);
    let out = text(&c);
    eprintln!("{out}");
    let g = &c.groups[0];
    assert!(
        g.summary[0].starts_with("What changed: infer slower by 2."),
        "{:?}",
        g.summary
    );
    // The sums that hold infer are not named beside it; the call is.
    assert!(!g.summary[0].contains("server"), "{:?}", g.summary);
    assert!(
        g.summary[1].starts_with("The whole call: e2e slower by 2."),
        "{:?}",
        g.summary
    );
    // By default only the rows that changed, and no `~`.
    assert!(!printed(&out, "infer").is_empty());
    assert!(printed(&out, "capture").is_empty(), "{out}");
    assert!(!out.contains(" ~"), "{out}");
    assert!(out.contains("row(s) unchanged"), "{out}");
    // With --all, the unchanged rows too, and a `~` row prints no p.
    let all = render(&c, true);
    let capture = printed(&all, "capture");
    assert_eq!(capture.len(), 3, "{all}");
    for r in capture {
        assert_eq!(cells(r).last(), Some(&"~"), "{r}");
    }
    // The outputs in words (the warm-up calls too: same inputs, same outputs).
    assert!(
        out.contains(
            "outputs: the policy's outputs were identical for all 310 calls (same kind and seq)"
        ),
        "{out}"
    );
}
