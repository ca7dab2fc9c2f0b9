//! Calls through a gateway, on generated runs with a
//! known truth: `report` shows each hop of the records' `hops` (each way,
//! both ways, the gateway's own time, the hop's bound), the verdict names
//! the hop and direction or the gateway that moved — and the executor's
//! wait — largest first, and `compare` shows the hop that moved.

#![allow(clippy::unwrap_used)]

#[path = "support/gen.rs"]
mod gen;

use gen::{run, Gateway, Scenario};
use stagetrace_analyze::analysis::{analyze, AnalyzeOptions};
use stagetrace_analyze::{compare, render};

fn through(seed: u64, g: Gateway) -> Scenario {
    Scenario {
        seed,
        gateway: Some(g),
        ..Scenario::default()
    }
}

/// A table line's cells: the text between runs of two or more spaces.
fn cells(line: &str) -> Vec<&str> {
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

#[test]
fn report_shows_each_hop_each_way_the_gateway_and_the_bounds() {
    let (r, text) = run(&through(201, Gateway::default()), None);
    let hops = &r.groups[0].hops;
    assert_eq!(hops.len(), 2, "{text}");
    assert_eq!(
        (hops[0].name(), hops[1].name()),
        (
            "hop 1 (robot → gateway)".to_owned(),
            "hop 2 (gateway → server)".to_owned()
        )
    );
    let p50 = |l: usize, key: &str| hops[l].figures[key].p50;
    // The generated medians (spread 0.1 ms over 3000 calls).
    for (l, key, truth) in [
        (0, "up_ms", 3.0),
        (0, "down_ms", 1.0),
        (0, "net_ms", 4.0),
        (0, "relay_ms", 0.2),
        (1, "up_ms", 1.0),
        (1, "down_ms", 2.0),
        (1, "net_ms", 3.0),
    ] {
        assert!(
            (p50(l, key) - truth).abs() <= 0.01,
            "hop {} {key}: {} against {truth}",
            l + 1,
            p50(l, key)
        );
    }
    // The bounds as the records state them, every call.
    // (Columns hold f32: 0.05 is 0.05000000075.)
    let exactly = |v: f64, truth: f64| assert!((v - truth).abs() <= 1e-6, "{v} against {truth}");
    exactly(hops[0].figures["err_ms"].min, 0.05);
    exactly(hops[0].figures["err_ms"].max, 0.05);
    exactly(hops[1].figures["err_ms"].p50, 0.04);
    // The last hop ends at the server: no gateway time there.
    assert!(!hops[1].figures.contains_key("relay_ms"));
    assert_eq!(hops[0].figures["up_ms"].n, 3000);
    assert!(text.contains("hops (per hop"), "{text}");
    for hop in ["hop 1 (robot → gateway)", "hop 2 (gateway → server)"] {
        assert!(
            text.lines().any(|l| cells(l).starts_with(&[hop, "up"])),
            "{hop} up: {text}"
        );
    }
    // The JSON report carries them too.
    let json = render::json(&r).unwrap();
    assert!(json.contains("\"hops\""), "{json}");
    // Without gateways, nothing changes: no hops section.
    let (plain, text) = run(&Scenario::default(), None);
    assert!(plain.groups[0].hops.is_empty());
    assert!(!text.contains("hops (per hop"), "{text}");
    assert!(!render::json(&plain).unwrap().contains("\"hops\""));
}

/// A baseline through the default gateway, and a run whose hop 2
/// (gateway → server) uplink is 5 ms slower, nothing else.
fn link_2_uplink_slower() -> (Scenario, Scenario) {
    let base = through(203, Gateway::default());
    let slower = through(
        204,
        Gateway {
            up: [3.0, 6.0],
            ..Gateway::default()
        },
    );
    (base, slower)
}

#[test]
fn a_slower_hop_is_named_with_its_direction_not_the_whole_path() {
    let (base, s) = link_2_uplink_slower();
    let (r, text) = run(&s, Some(&base));
    let v = &r.verdicts[0];
    assert_eq!(v.code, "hop_slower", "{text}");
    assert!(
        v.text
            .starts_with("hop 2 (gateway → server) uplink got slower as a whole: median"),
        "{}",
        v.text
    );
    assert_eq!(v.evidence["hop"], 2);
    assert_eq!(v.evidence["figure"], "up_ms");
    // +5 ms, as injected.
    let cost = v.evidence["cost_ms"].as_f64().unwrap();
    assert!((cost - 5.0).abs() <= 0.02, "{cost}");
    assert!(v.text.contains("bandwidth, frame size"), "{}", v.text);
    // Only that hop: not hop 1, not the path's uplink or network.
    assert_eq!(
        r.verdicts.iter().map(|v| v.code).collect::<Vec<_>>(),
        ["hop_slower"],
        "{text}"
    );
    assert!(
        !text.contains("hop 1 (robot → gateway) uplink got"),
        "{text}"
    );
    // The table shows the change per hop.
    assert!(text.contains("hops against the baseline"), "{text}");
}

#[test]
fn the_executor_wait_and_the_gateway_are_named_largest_first() {
    let base = Scenario {
        remote_executor: Some((5, 0.05)),
        ..through(205, Gateway::default())
    };
    let s = Scenario {
        remote_executor: Some((5, 12.0)),
        ..through(
            206,
            Gateway {
                relay_ms: 3.2,
                ..Gateway::default()
            },
        )
    };
    let (r, text) = run(&s, Some(&base));
    let named: Vec<(&str, Option<&str>)> = r.verdicts.iter().map(|v| (v.code, v.stage)).collect();
    // The wait costs the p99 ~12 ms (its every-5th-call period is a
    // verdict too, at the same cost), the gateway the median 3 ms.
    assert_eq!(named[0], ("tail_only", Some("exec_wait")), "{text}");
    let gw_at = named
        .iter()
        .position(|n| *n == ("hop_slower", Some("relay")))
        .unwrap_or_else(|| panic!("the gateway is not named: {text}"));
    assert!(
        named[..gw_at].iter().all(|n| n.1 == Some("exec_wait")),
        "{text}"
    );
    // Every verdict on the wait (its tail, its period) carries the
    // executor's next steps.
    for v in r.verdicts.iter().filter(|v| v.stage == Some("exec_wait")) {
        assert!(v.text.contains("task queue, bus occupancy"), "{}", v.text);
    }
    let wait = &r.verdicts[0].text;
    for step in [
        "task queue",
        "bus occupancy",
        "blocked by the previous action",
        "merge commands, drop stale actions",
    ] {
        assert!(wait.contains(step), "{wait}");
    }
    let gw = &r.verdicts[gw_at];
    assert!(
        gw.text.starts_with(
            "the gateway's own time (where hop 1, robot → gateway, ends) got slower as a whole"
        ),
        "{}",
        gw.text
    );
    assert!(gw.text.contains("its load, its queue"), "{}", gw.text);
    let cost = gw.evidence["cost_ms"].as_f64().unwrap();
    assert!((cost - 3.0).abs() <= 0.02, "{cost}");
    // The path's relay_ms verdict is the same change, said less well.
    assert!(
        !r.verdicts
            .iter()
            .any(|v| v.code != "hop_slower" && v.stage == Some("relay")),
        "{text}"
    );
}

#[test]
fn compare_shows_the_hop_that_moved() {
    let before = gen::dataset(&through(207, Gateway::default()));
    let after = gen::dataset(&through(
        208,
        Gateway {
            down: [4.0, 2.0],
            ..Gateway::default()
        },
    ));
    let c = compare::compare(&before, &after, 7);
    let text = compare::text(&c);
    eprintln!("{text}");
    let g = &c.groups[0];
    assert_eq!(g.hops.len(), 2);
    let row = |hop: usize, stage: &str, stat: &str| {
        g.hops[hop - 1]
            .rows
            .iter()
            .find(|r| r.stage == stage && r.stat == stat)
            .unwrap()
    };
    // Hop 1's downlink 1 → 4 ms: +300 %.
    let d = row(1, "down", "p50");
    assert!(d.significant, "{text}");
    assert!((d.delta_pct - 300.0).abs() <= 5.0, "{}", d.delta_pct);
    for (hop, stage) in [(1, "up"), (2, "up"), (2, "down"), (1, "relay")] {
        assert!(
            !row(hop, stage, "p50").significant,
            "hop {hop} {stage}: {text}"
        );
    }
    // The rows that changed by default; every row with --all.
    let row_shown =
        |text: &str, label: &str| text.lines().any(|l| cells(l).starts_with(&[label, "p50"]));
    assert!(row_shown(&text, "hop 1 down"), "{text}");
    assert!(!row_shown(&text, "hop 1 relay"), "{text}");
    assert!(row_shown(&compare::render(&c, true), "hop 1 relay"));
    assert_eq!(
        (g.hops[0].from.as_str(), g.hops[0].to.as_str()),
        ("robot", "gateway")
    );
}

/// The HTML report has the hops too: a row per hop with each figure's
/// p50 / p99, and the hop and figure the verdict names marked (only them).
#[test]
fn the_html_report_has_a_row_per_hop_and_marks_the_one_that_moved() {
    let (base, s) = link_2_uplink_slower();
    let (ds, b) = (gen::dataset(&s), gen::dataset(&base));
    let a = analyze(&ds, Some(&b), &AnalyzeOptions::default());
    let html = stagetrace_analyze::html::html(&a);
    let start = html
        .find("<table id=\"hops\" class=\"robots\">")
        .expect(&html);
    let table = &html[start..start + html[start..].find("</table>").unwrap()];
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("<tr data-hop="))
        .collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(
        rows[0].starts_with("<tr data-hop=\"1\"><td>hop 1 (robot → gateway)</td><td>3000</td>"),
        "{table}"
    );
    let up = a.report.groups[0].hops[1].figures["up_ms"];
    let cell = format!("<td class=\"differs\">{:.2} / {:.2}</td>", up.p50, up.p99);
    assert!(
        rows[1].starts_with(
            "<tr data-hop=\"2\" class=\"differs\"><td>hop 2 (gateway → server)</td><td>3000</td>"
        ),
        "{table}"
    );
    // Hop 2's uplink cell, its p50 6 ms as generated: the cell is the
    // first figure after the calls.
    assert!(rows[1].contains(&cell), "{cell} not in {}", rows[1]);
    assert!((up.p50 - 6.0).abs() <= 0.01, "{}", up.p50);
    assert_eq!(table.matches("class=\"differs\"").count(), 2, "{table}");
    // Without gateways there is no hops table.
    let plain = gen::dataset(&Scenario::default());
    let html = stagetrace_analyze::html::html(&analyze(&plain, None, &AnalyzeOptions::default()));
    assert!(!html.contains("id=\"hops"), "a hops table without gateways");
}
