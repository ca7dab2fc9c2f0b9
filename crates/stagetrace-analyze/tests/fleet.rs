//! A fleet report: three robots' records merged, each
//! robot's p50 / p99 per stage, and a verdict naming the robot that differs
//! and the stage, on generated runs with a known truth.

#![allow(clippy::unwrap_used)]

#[path = "support/gen.rs"]
mod gen;

use gen::Scenario;
use stagetrace_analyze::analysis::{analyze, per_robot, AnalyzeOptions, Report, Robot};
use stagetrace_analyze::load::{Dataset, LoadOptions};
use stagetrace_analyze::render;

/// Writes one record file per robot, loads them merged, adds the fleet view.
fn fleet(robots: &[(&str, Scenario)]) -> (Report, String) {
    let (report, text, _) = fleet_with_html(robots);
    (report, text)
}

/// As [`fleet`], with the HTML report too.
fn fleet_with_html(robots: &[(&str, Scenario)]) -> (Report, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    let mut list = Vec::new();
    for (name, s) in robots {
        let path = dir.path().join(format!("records-{name}.jsonl"));
        gen::write(&path, s);
        files.push(path.clone());
        list.push(Robot {
            name: (*name).to_string(),
            files: vec![path],
        });
    }
    let ds = Dataset::load(&files, LoadOptions::default()).unwrap();
    let opts = AnalyzeOptions::default();
    let mut a = analyze(&ds, None, &opts);
    per_robot(&mut a, &list, &opts);
    let text = render::text(&a.report);
    eprintln!("{text}");
    let html = stagetrace_analyze::html::html(&a);
    (a.report, text, html)
}

fn robot(seed: u64, infer_factor: f64) -> Scenario {
    Scenario {
        seed,
        calls: 1500,
        infer_factor,
        ..Scenario::default()
    }
}

#[test]
fn the_robot_with_a_slower_infer_is_named_with_its_stage() {
    let (r, text) = fleet(&[
        ("arm-1", robot(31, 1.0)),
        ("arm-2", robot(32, 1.2)),
        ("arm-3", robot(33, 1.0)),
    ]);
    let robot_verdicts: Vec<(&str, Option<&str>, &str)> = r
        .verdicts
        .iter()
        .filter(|v| v.code == "robot_differs")
        .map(|v| {
            (
                v.evidence["robot"].as_str().unwrap(),
                v.stage,
                v.evidence["shape"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        robot_verdicts,
        vec![("arm-2", Some("infer"), "median_shift")],
        "{text}"
    );
    // Largest cost first: the robot verdict leads, ahead of anything else.
    assert_eq!(r.verdicts[0].code, "robot_differs", "{text}");
    let v = &r.verdicts[0];
    // infer 30 ms × 1.2: the robot's median 36 ms against the others' 30 ms.
    let cost = v.evidence["cost_ms"].as_f64().unwrap();
    assert!((cost - 6.0).abs() < 0.2, "cost {cost}: {text}");
    assert!((v.evidence["robot_p50_ms"].as_f64().unwrap() - 36.0).abs() < 0.2);
    assert!((v.evidence["others_p50_ms"].as_f64().unwrap() - 30.0).abs() < 0.2);
    assert!(
        v.text
            .starts_with("robot arm-2 is slower than the other 2 robot(s) in infer"),
        "{}",
        v.text
    );
    // The merged tables stay; the per-robot column holds each robot's own
    // median, equal to its records' exact p50.
    assert_eq!(r.groups[0].steady, 4500);
    assert_eq!(r.robots.len(), 3);
    assert_eq!(r.robots[1].name, "arm-2");
    assert_eq!(r.robots[1].records, 1520);
    let g = &r.groups[0];
    for (name, s) in [("arm-1", robot(31, 1.0)), ("arm-2", robot(32, 1.2))] {
        let one = analyze(&gen::dataset(&s), None, &AnalyzeOptions::default()).report;
        let own = &one.groups[0].stages["infer"];
        let col = &g.robots[name].stages["infer"];
        assert_eq!(
            (col.n, col.p50, col.p99),
            (own.n, own.p50, own.p99),
            "{name}"
        );
        assert_eq!(g.robots[name].steady, 1500);
    }
    assert!(text.contains("per robot (p50 / p99, ms"), "{text}");
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["robots"][1]["name"], "arm-2");
    assert!(json["groups"][0]["robots"]["arm-3"]["stages"]["infer"]["p99"].is_f64());
    // The merged run's "steady" verdict would contradict the robot's.
    assert!(!r.verdicts.iter().any(|v| v.code == "steady"), "{text}");
}

#[test]
fn identical_robots_get_no_robot_verdict() {
    let (r, text) = fleet(&[
        ("arm-1", robot(41, 1.0)),
        ("arm-2", robot(42, 1.0)),
        ("arm-3", robot(43, 1.0)),
    ]);
    assert!(
        !r.verdicts.iter().any(|v| v.code == "robot_differs"),
        "{text}"
    );
    let codes: Vec<&str> = r.verdicts.iter().map(|v| v.code).collect();
    assert_eq!(codes, vec!["steady"], "{text}");
    assert_eq!(r.groups[0].robots.len(), 3);
}

#[test]
fn without_robots_the_report_has_no_fleet_fields() {
    let ds = gen::dataset(&robot(51, 1.0));
    let mut a = analyze(&ds, None, &AnalyzeOptions::default());
    // One robot is no fleet.
    per_robot(
        &mut a,
        &[Robot {
            name: "solo".into(),
            files: ds.files.clone(),
        }],
        &AnalyzeOptions::default(),
    );
    let json = serde_json::to_value(&a.report).unwrap();
    assert!(json.get("robots").is_none());
    assert!(json["groups"][0].get("robots").is_none());
}

/// A tight infer (12 ms ± 0.1) on two robots and 20 ms on the third: in the
/// merged timeline the third robot's calls stand out as infer spikes, at its
/// call rate. They are that robot, said once, by the robot verdict.
#[test]
fn a_slower_robot_is_not_also_spikes_of_the_merged_run() {
    let tight = |seed: u64, ms: f64| Scenario {
        seed,
        calls: 1500,
        infer_ms: (ms, 0.1),
        ..Scenario::default()
    };
    let (r, text) = fleet(&[
        ("arm-1", tight(91, 12.0)),
        ("arm-2", tight(92, 12.0)),
        ("arm-3", tight(93, 20.0)),
    ]);
    let codes: Vec<(&str, Option<&str>)> = r.verdicts.iter().map(|v| (v.code, v.stage)).collect();
    assert_eq!(codes, vec![("robot_differs", Some("infer"))], "{text}");
    assert_eq!(r.verdicts[0].evidence["robot"], "arm-3");
    assert_eq!(r.groups[0].verdicts.len(), 1, "{text}");
}

/// The HTML report has the per-robot rows: one per robot, in the order
/// given, each stage's p50 / p99 as the text column shows it, and the robot
/// and stage the verdict names marked (per-robot rows in the
/// HTML report).
#[test]
fn the_html_report_has_a_row_per_robot_and_marks_the_one_that_differs() {
    let (r, _, html) = fleet_with_html(&[
        ("arm-1", robot(31, 1.0)),
        ("arm-2", robot(32, 1.2)),
        ("arm-3", robot(33, 1.0)),
    ]);
    let start = html
        .find("<table id=\"robots\" class=\"robots\">")
        .expect(&html);
    let table = &html[start..start + html[start..].find("</table>").unwrap()];
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("<tr data-robot="))
        .collect();
    assert_eq!(rows.len(), 3, "{table}");
    assert!(
        rows[0].starts_with("<tr data-robot=\"arm-1\"><td>arm-1</td>"),
        "{table}"
    );
    assert!(
        rows[2].starts_with("<tr data-robot=\"arm-3\"><td>arm-3</td>"),
        "{table}"
    );
    // Only arm-2's row and its infer cell are marked, and the cell holds
    // the robot's own p50 / p99.
    let infer = r.groups[0].robots["arm-2"].stages["infer"];
    let cell = format!(
        "<td class=\"differs\">{:.2} / {:.2}</td>",
        infer.p50, infer.p99
    );
    assert!(
        rows[1]
            .starts_with("<tr data-robot=\"arm-2\" class=\"differs\"><td>arm-2</td><td>1500</td>"),
        "{table}"
    );
    assert!(rows[1].contains(&cell), "{cell} not in {}", rows[1]);
    assert_eq!(table.matches("class=\"differs\"").count(), 2, "{table}");
}

/// `--fail-if` per robot (`ROBOT@STAGE.STAT`, `*@` for each robot): a gate
/// on the robots' own p50 fires for the slow robot only, with its own
/// median as the measured value, and names the robot (`--fail-if`
/// per robot).
#[test]
fn per_robot_gates_fire_for_the_robot_over_the_limit() {
    use stagetrace_analyze::gate::Gate;
    let (r, _) = fleet(&[
        ("arm-1", robot(31, 1.0)),
        ("arm-2", robot(32, 1.2)),
        ("arm-3", robot(33, 1.0)),
    ]);
    let p50 = |name: &str| r.groups[0].robots[name].stages["infer"].p50;
    let check = |g: &str| g.parse::<Gate>().unwrap().check(&r);
    // infer's median: 30 ms on arm-1 and arm-3, 36 ms on arm-2.
    let fired = check("*@infer.p50>33ms")
        .unwrap()
        .expect("arm-2 is over 33 ms");
    assert_eq!(fired.value, p50("arm-2"));
    assert!(
        fired.message.contains("robot arm-2 measured") && !fired.message.contains("also"),
        "{}",
        fired.message
    );
    assert_eq!(check("arm-1@infer.p50>33ms").unwrap(), None);
    assert_eq!(
        check("arm-2@infer.p50>33ms").unwrap().unwrap().value,
        p50("arm-2")
    );
    // Every robot over the limit: the one furthest past it is the value,
    // the others are named.
    let all = check("*@infer.p50>1ms").unwrap().unwrap();
    assert_eq!(all.value, p50("arm-2"));
    assert!(
        all.message.contains("also arm-1") && all.message.contains("arm-3"),
        "{}",
        all.message
    );
    let e = check("arm-9@infer.p50>1ms").unwrap_err();
    assert!(
        e.0.contains("no robot 'arm-9' (robots: arm-1, arm-2, arm-3)"),
        "{e}"
    );
}
