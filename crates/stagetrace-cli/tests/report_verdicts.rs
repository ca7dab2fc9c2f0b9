//! `stagetrace report` names the injected stage and shape in the terminal
//! verdict and in `--json`.

#![allow(clippy::unwrap_used)]

mod support;

use support::gen::{self, Scenario};
use support::{p, seeded, stagetrace, stderr, stdout};

struct Case {
    name: &'static str,
    run: Scenario,
    baseline: Option<Scenario>,
    code: &'static str,
    stages: &'static [&'static str],
    group: &'static str,
    forbidden: &'static [&'static str],
}

#[test]
fn each_ground_truth_is_named_in_text_and_json() {
    let cases = [
        Case {
            name: "transport-tail",
            run: Scenario {
                seed: 101,
                transport_tail: Some((0.04, 15.0)),
                ..Scenario::default()
            },
            baseline: Some(seeded(102)),
            code: "tail_only",
            stages: &["uplink", "downlink", "roundtrip", "net"],
            group: "transport",
            forbidden: &["median_shift", "periodic", "unexplained_gap"],
        },
        Case {
            name: "infer-median",
            run: Scenario {
                seed: 103,
                infer_factor: 1.2,
                ..Scenario::default()
            },
            baseline: Some(seeded(104)),
            code: "median_shift",
            stages: &["infer"],
            group: "server",
            forbidden: &["tail_only", "periodic", "unexplained_gap"],
        },
        Case {
            name: "dispatch-periodic",
            run: Scenario {
                seed: 105,
                dispatch_spikes: Some((2.0, 12.0)),
                ..Scenario::default()
            },
            baseline: None,
            code: "periodic",
            stages: &["dispatch"],
            group: "client",
            forbidden: &["median_shift", "tail_only", "unexplained_gap"],
        },
        Case {
            name: "gap-jitter",
            run: Scenario {
                seed: 107,
                gap_jitter_ms: 4.0,
                ..Scenario::default()
            },
            baseline: Some(seeded(108)),
            code: "unexplained_gap",
            stages: &["gap"],
            group: "call",
            forbidden: &["median_shift", "periodic"],
        },
    ];
    let dir = tempfile::tempdir().unwrap();
    for c in &cases {
        let run = dir.path().join(format!("{}.jsonl", c.name));
        gen::write(&run, &c.run);
        let mut args = vec!["report", p(&run)];
        let base_path = dir.path().join(format!("{}-idle.jsonl", c.name));
        if let Some(b) = &c.baseline {
            gen::write(&base_path, b);
            args.extend(["--baseline", p(&base_path)]);
        }
        // Terminal: the verdict sentence names the stage, the code follows it.
        let out = stagetrace(&args);
        let text = stdout(&out);
        assert!(out.status.success(), "{}: {}\n{text}", c.name, stderr(&out));
        let verdict = text.split("verdict:").nth(1).unwrap_or_default();
        let lines: Vec<&str> = verdict
            .lines()
            .filter(|l| l.contains(&format!("({})", c.code)))
            .collect();
        assert!(
            !lines.is_empty(),
            "{}: no {} verdict in\n{text}",
            c.name,
            c.code
        );
        for l in &lines {
            assert!(
                c.stages
                    .iter()
                    .any(|s| l.trim_start_matches([' ', '*']).starts_with(s)
                        || l.contains(&format!(" {s} "))),
                "{}: {l}",
                c.name
            );
        }
        for f in c.forbidden {
            assert!(
                !verdict.contains(&format!("({f})")),
                "{}: {f} in\n{verdict}",
                c.name
            );
        }
        // JSON: the same verdict, machine-readable.
        args.push("--json");
        let out = stagetrace(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["schema"], "stagetrace-report/1");
        let verdicts = json["verdicts"].as_array().unwrap();
        assert!(
            verdicts.iter().any(|v| v["code"] == c.code
                && c.stages.iter().any(|s| v["stage"] == *s)
                && v["group"] == c.group
                && v["kind"] == "call"),
            "{}: {verdicts:#?}",
            c.name
        );
        for f in c.forbidden {
            assert!(!verdicts.iter().any(|v| v["code"] == *f), "{}: {f}", c.name);
        }
        let g = &json["groups"][0];
        assert_eq!(g["kind"], "call");
        assert_eq!(g["warmup_excluded"], 20);
        for stage in [
            "capture",
            "uplink",
            "queue",
            "infer",
            "downlink",
            "dispatch",
            "roundtrip",
            "server",
            "net",
            "e2e",
            "gap",
            "observer",
        ] {
            for field in ["n", "min", "p50", "p90", "p99", "p999", "max", "mean"] {
                assert!(g["stages"][stage][field].is_number(), "{stage}.{field}");
            }
        }
    }
}

/// A server that reports no timing, whose model spikes on 3 % of the calls:
/// the table shows the black box (`ttfb`, `rx`) with its note, and the
/// verdict names `ttfb` as server and network together — never `infer`,
/// which nothing measured.
#[test]
fn a_silent_servers_spikes_are_named_as_the_black_box_never_as_inference() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("silent.jsonl");
    gen::write(
        &run,
        &gen::Scenario {
            seed: 211,
            silent_server: true,
            infer_spikes: Some((0.03, 80.0)),
            ..gen::Scenario::default()
        },
    );
    let out = stagetrace(&["report", p(&run)]);
    let text = stdout(&out);
    assert!(out.status.success(), "{}\n{text}", stderr(&out));
    let row = |name: &str| {
        text.lines()
            .any(|l| l.trim_start().starts_with(&format!("{name} ")))
    };
    assert!(row("ttfb") && row("rx") && row("roundtrip"), "{text}");
    for absent in ["infer", "queue", "server", "uplink", "downlink", "net"] {
        assert!(!row(absent), "{absent} row in\n{text}");
    }
    assert!(text.contains(stagetrace_schema::BLACK_BOX_NOTE), "{text}");
    let verdict = text.split("verdict:").nth(1).unwrap();
    let spikes: Vec<&str> = verdict.lines().filter(|l| l.contains("(spikes)")).collect();
    assert_eq!(spikes.len(), 1, "{verdict}");
    assert!(
        spikes[0]
            .trim_start_matches([' ', '*'])
            .starts_with("ttfb spikes"),
        "{verdict}"
    );
    assert!(spikes[0].contains("black box"), "{verdict}");
    assert!(
        !verdict
            .lines()
            .any(|l| l.trim_start_matches([' ', '*']).starts_with("infer")),
        "{verdict}"
    );

    let out = stagetrace(&["report", p(&run), "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let v = &json["verdicts"][0];
    assert_eq!(
        (v["code"].as_str(), v["stage"].as_str()),
        (Some("spikes"), Some("ttfb"))
    );
    assert_eq!(v["group"], "transport");
    let named: Vec<&str> = json["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["stage"].as_str())
        .collect();
    assert_eq!(named, ["ttfb"], "{json:#}");
}
