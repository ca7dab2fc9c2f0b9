//! The fleet report's per-robot rows in the HTML report (`stagetrace report
//! --per-robot --html`): one row per robot, each stage's p50 / p99, and the
//! robot and stage a `robot_differs` verdict names marked, so the robot to
//! look at stands out without reading the text tables.

use std::fmt::Write as _;

use super::escape;
use crate::analysis::GroupReport;
use crate::figures;
use crate::render::robot_pair;

/// Writes the table of a group (nothing without robots); `order` is the
/// robots as given on the command line, `suffix` makes its id unique.
pub(super) fn table(s: &mut String, g: &GroupReport, order: &[String], suffix: &str) {
    if g.robots.is_empty() {
        return;
    }
    let differs: Vec<(&str, Option<&str>)> = g
        .verdicts
        .iter()
        .filter(|v| v.code == "robot_differs")
        .filter_map(|v| Some((v.evidence.get("robot")?.as_str()?, v.stage)))
        .collect();
    let stages: Vec<&'static str> = figures::display_order()
        .into_iter()
        .map(|f| f.name())
        .filter(|n| g.robots.values().any(|r| r.stages.contains_key(n)))
        .collect();
    let _ = writeln!(
        s,
        "<h3>Per robot (p50 / p99, ms; marked: the robot and stage a verdict names)</h3>\n\
         <table id=\"robots{suffix}\" class=\"robots\">"
    );
    let _ = write!(s, "<tr><th>robot</th><th>calls</th>");
    for st in &stages {
        let _ = write!(s, "<th>{}</th>", escape(st));
    }
    let _ = writeln!(s, "</tr>");
    for name in order.iter().filter(|n| g.robots.contains_key(*n)) {
        let r = &g.robots[name];
        let named: Vec<Option<&str>> = differs
            .iter()
            .filter(|(robot, _)| *robot == name.as_str())
            .map(|(_, stage)| *stage)
            .collect();
        let class = if named.is_empty() {
            ""
        } else {
            " class=\"differs\""
        };
        let _ = write!(
            s,
            "<tr data-robot=\"{0}\"{class}><td>{0}</td><td>{1}</td>",
            escape(name),
            r.steady
        );
        for st in &stages {
            let cell = r
                .stages
                .get(st)
                .map_or_else(|| "-".to_string(), |v| robot_pair(v.p50, v.p99));
            let class = if named.contains(&Some(*st)) {
                " class=\"differs\""
            } else {
                ""
            };
            let _ = write!(s, "<td{class}>{}</td>", escape(&cell));
        }
        let _ = writeln!(s, "</tr>");
    }
    let _ = writeln!(s, "</table>");
}
