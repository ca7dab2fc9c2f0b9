//! `--fail-if` conditions for CI gates: `infer.p99>80ms`, `call:e2e.max>=0.2s`,
//! and per robot of a fleet report (`--per-robot`): `arm-2@infer.p99>40ms`,
//! `*@e2e.p50>30ms` (any robot).

use std::fmt;
use std::str::FromStr;

use stagetrace_schema::Figure;

use crate::analysis::{GroupReport, Report, ALL_KINDS};
use crate::figures;

/// Comparison of a gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
}

impl Op {
    fn holds(self, a: f64, b: f64) -> bool {
        match self {
            Op::Gt => a > b,
            Op::Ge => a >= b,
            Op::Lt => a < b,
            Op::Le => a <= b,
        }
    }

    fn symbol(self) -> &'static str {
        match self {
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Lt => "<",
            Op::Le => "<=",
        }
    }
}

/// What a gate looks at.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// A statistic of a stage (`infer.p99`), in ms (`n` is a count).
    Stage {
        /// The figure (any the analysis reads).
        figure: Figure,
        /// `n`, `min`, `p50`, `p90`, `p99`, `p999`, `max`, `mean`, `stddev`.
        stat: String,
    },
    /// `deadline.misses` (a count).
    DeadlineMisses,
    /// `deadline.miss_rate` (a fraction; `1%` is accepted).
    DeadlineMissRate,
    /// `outliers.count`: rounds that stand out.
    Outliers,
}

/// One `--fail-if` condition.
#[derive(Clone, Debug, PartialEq)]
pub struct Gate {
    /// The text as given.
    pub text: String,
    /// Restrict to one kind (`call:infer.p99>80ms`); default: all kinds pooled.
    pub kind: Option<String>,
    /// One robot of a fleet report (`arm-2@infer.p99>40ms`), or `*`: each
    /// robot (`*@infer.p99>40ms` fires when any robot's does). `None`: the
    /// merged records.
    pub robot: Option<String>,
    /// What is compared.
    pub target: Target,
    /// The comparison.
    pub op: Op,
    /// The limit, in ms for durations.
    pub limit: f64,
}

/// Why a `--fail-if` condition could not be read or evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateError(pub String);

impl fmt::Display for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GateError {}

const SYNTAX: &str =
    "write [ROBOT@][KIND:]STAGE.STAT OP VALUE[UNIT], e.g. 'infer.p99>80ms' or 'call:e2e.max>=0.2s' \
     (STAT: n min p50 p90 p99 p999 max mean stddev; OP: > >= < <=; UNIT: ms (default), us, s; \
     also deadline.misses, deadline.miss_rate, outliers.count; with --per-robot, ROBOT@ (a \
     robot's name, or * for each robot) gates a stage's n, p50 or p99 per robot)";

impl FromStr for Gate {
    type Err = GateError;

    fn from_str(text: &str) -> Result<Gate, GateError> {
        let t: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        let bad = |why: &str| GateError(format!("--fail-if '{text}': {why}; {SYNTAX}"));
        let (lhs, op, value) = split_comparison(&t).map_err(bad)?;
        let (robot, kind, lhs) = split_scope(lhs).map_err(bad)?;
        let (stage, stat) = lhs
            .split_once('.')
            .ok_or_else(|| bad("expected STAGE.STAT before the comparison"))?;
        let target = target(stage, stat).map_err(|why| bad(&why))?;
        if robot.is_some()
            && !matches!(&target, Target::Stage { stat, .. } if ["n", "p50", "p99"].contains(&stat.as_str()))
        {
            return Err(bad(
                "a per-robot gate (ROBOT@) reads a stage's n, p50 or p99",
            ));
        }
        let limit = limit(value, &target, lhs).map_err(|why| bad(&why))?;
        Ok(Gate {
            text: text.to_string(),
            kind,
            robot,
            target,
            op,
            limit,
        })
    }
}

/// A gate's text (without whitespace) cut at its comparison: what is
/// compared, the comparison, the limit as written.
fn split_comparison(t: &str) -> Result<(&str, Op, &str), &'static str> {
    let pos = t.find(['>', '<']).ok_or("no comparison (> >= < <=)")?;
    let (lhs, rest) = t.split_at(pos);
    let (op, value) = if let Some(v) = rest.strip_prefix(">=") {
        (Op::Ge, v)
    } else if let Some(v) = rest.strip_prefix("<=") {
        (Op::Le, v)
    } else if let Some(v) = rest.strip_prefix('>') {
        (Op::Gt, v)
    } else if let Some(v) = rest.strip_prefix('<') {
        (Op::Lt, v.trim_start_matches('='))
    } else {
        return Err("no comparison");
    };
    Ok((lhs, op, value))
}

/// What is compared without its scope: the robot (`ROBOT@`) and the kind
/// (`KIND:`) it names, each when given, and the `STAGE.STAT` left.
fn split_scope(lhs: &str) -> Result<(Option<String>, Option<String>, &str), &'static str> {
    let (robot, lhs) = match lhs.split_once('@') {
        Some((r, l)) if !r.is_empty() => (Some(r.to_string()), l),
        Some(_) => return Err("no robot name before '@'"),
        None => (None, lhs),
    };
    let (kind, lhs) = match lhs.split_once(':') {
        Some((k, l)) if !k.is_empty() => (Some(k.to_string()), l),
        _ => (None, lhs),
    };
    Ok((robot, kind, lhs))
}

/// The target `STAGE.STAT` names: a deadline or outlier count, or a
/// statistic of a figure the analysis reads.
fn target(stage: &str, stat: &str) -> Result<Target, String> {
    match (stage, stat) {
        ("deadline", "misses") => return Ok(Target::DeadlineMisses),
        ("deadline", "miss_rate") => return Ok(Target::DeadlineMissRate),
        ("outliers", "count") => return Ok(Target::Outliers),
        _ => {}
    }
    // `transport` and `call` are the span names the docs tell
    // users to write: the records call them roundtrip and e2e.
    let figure = figures::from_user_name(stage)
        .filter(|f| figures::is_read(*f))
        .ok_or_else(|| format!("unknown stage '{stage}'"))?;
    let stat = match stat {
        "p99.9" => "p999",
        "count" => "n",
        "median" => "p50",
        s => s,
    };
    if crate::stats::Distribution::default().get(stat).is_none() {
        return Err(format!("unknown statistic '{stat}'"));
    }
    Ok(Target::Stage {
        figure,
        stat: stat.to_string(),
    })
}

/// The limit `value` gives for `target` (what `lhs` wrote), in ms for a
/// duration: a number with a unit that fits the target, finite once scaled.
fn limit(value: &str, target: &Target, lhs: &str) -> Result<f64, String> {
    let split = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e'))
        .unwrap_or(value.len());
    let (num, unit) = value.split_at(split);
    let num: f64 = num
        .parse()
        .map_err(|_| format!("'{value}' is not a number with an optional unit"))?;
    let is_duration = matches!(target, Target::Stage { stat, .. } if stat != "n");
    let scale = match (unit, is_duration) {
        ("" | "ms", true) => 1.0,
        ("us" | "µs", true) => 1e-3,
        ("s", true) => 1e3,
        ("", false) => 1.0,
        ("%", false) if *target == Target::DeadlineMissRate => 0.01,
        _ => return Err(format!("unit '{unit}' does not fit {lhs}")),
    };
    // `1e309`, or `1e306s` once scaled, reads as infinity: a gate
    // against an infinite limit never (or always) fires, silently.
    let limit = num * scale;
    if !limit.is_finite() {
        return Err(format!("'{value}' is beyond any limit a gate can hold"));
    }
    Ok(limit)
}

/// A gate that fired.
#[derive(Clone, Debug, PartialEq)]
pub struct Fired {
    /// The gate as given.
    pub gate: String,
    /// The measured value.
    pub value: f64,
    /// A sentence for the log.
    pub message: String,
}

impl Gate {
    /// Evaluates the gate; `Ok(Some(_))` when it fires, `Err` when the
    /// report has no such figure (a misconfigured gate must not pass silently).
    pub fn check(&self, report: &Report) -> Result<Option<Fired>, GateError> {
        let group = self.group(report)?;
        if let Some(robot) = &self.robot {
            return self.check_robots(report, group, robot);
        }
        let (value, unit) = self.measured(group)?;
        if !self.op.holds(value, self.limit) {
            return Ok(None);
        }
        Ok(Some(Fired {
            gate: self.text.clone(),
            value,
            message: format!(
                "fail-if fired: {} — measured {value:.3}{unit} {} {}{unit} (kind {})",
                self.text,
                self.op.symbol(),
                self.limit,
                group.kind
            ),
        }))
    }

    /// The group the gate reads: its kind's, else all kinds pooled (or the
    /// only kind).
    fn group<'r>(&self, report: &'r Report) -> Result<&'r GroupReport, GateError> {
        match &self.kind {
            Some(k) => report.groups.iter().find(|g| &g.kind == k),
            None => report
                .groups
                .iter()
                .find(|g| g.kind == ALL_KINDS)
                .or_else(|| report.groups.first()),
        }
        .ok_or_else(|| {
            GateError(format!(
                "--fail-if '{}': no calls of kind '{}' in the records",
                self.text,
                self.kind.as_deref().unwrap_or("*")
            ))
        })
    }

    /// The error for a gate on something the records do not carry.
    fn missing(&self, what: &str) -> GateError {
        GateError(format!(
            "--fail-if '{}': the records carry no {what}",
            self.text
        ))
    }

    /// The value the gate compares in `group`, and its unit as printed.
    fn measured(&self, group: &GroupReport) -> Result<(f64, &'static str), GateError> {
        let deadline = || {
            group
                .rate
                .deadline
                .as_ref()
                .ok_or_else(|| self.missing("deadlines (no target rate)"))
        };
        Ok(match &self.target {
            Target::Stage { figure, stat } => {
                let s = group
                    .stages
                    .get(figure.name())
                    .ok_or_else(|| self.missing_figure(*figure, group))?;
                let v = s.get(stat).ok_or_else(|| self.missing(stat))?;
                (v, if stat == "n" { "" } else { " ms" })
            }
            Target::DeadlineMisses => (deadline()?.misses as f64, ""),
            Target::DeadlineMissRate => (deadline()?.miss_rate, ""),
            Target::Outliers => (group.outliers.count as f64, ""),
        })
    }

    /// The error for a gate on a figure `group` does not carry: the figures
    /// it does carry, and why a server's are absent when none came.
    fn missing_figure(&self, figure: Figure, group: &GroupReport) -> GateError {
        let has = |f: Figure| group.stages.contains_key(f.name());
        let carried: Vec<&str> = figures::call_rows()
            .into_iter()
            .filter(|f| has(*f))
            .map(Figure::name)
            .collect();
        let why = if crate::render::lacks_server_timing(has) {
            "; no server timing: the policy server sends none (docs/protocol.md)"
        } else {
            ""
        };
        self.missing(&format!(
            "{} figures (they carry {}{why})",
            figure.name(),
            carried.join(", ")
        ))
    }
}

impl Gate {
    /// A per-robot gate: the robot's (or, for `*`, each robot's) own p50,
    /// p99 or count of a stage in `group`. When several robots pass the
    /// limit, the one furthest past it is the measured value, and the
    /// others are named too.
    fn check_robots(
        &self,
        report: &Report,
        group: &GroupReport,
        robot: &str,
    ) -> Result<Option<Fired>, GateError> {
        let err = |why: String| GateError(format!("--fail-if '{}': {why}", self.text));
        let Target::Stage { figure, stat } = &self.target else {
            return Err(err("a per-robot gate reads a stage".into()));
        };
        if report.robots.is_empty() {
            return Err(err("a per-robot gate (ROBOT@) needs --per-robot".into()));
        }
        let names: Vec<&str> = report.robots.iter().map(|r| r.name.as_str()).collect();
        if robot != "*" && !names.contains(&robot) {
            return Err(err(format!(
                "no robot '{robot}' (robots: {})",
                names.join(", ")
            )));
        }
        let mut seen = false;
        let mut over: Vec<(&str, f64)> = Vec::new();
        for name in names.into_iter().filter(|n| robot == "*" || *n == robot) {
            let Some(st) = group
                .robots
                .get(name)
                .and_then(|r| r.stages.get(figure.name()))
            else {
                continue;
            };
            seen = true;
            let v = match stat.as_str() {
                "n" => st.n as f64,
                "p50" => st.p50,
                _ => st.p99,
            };
            if self.op.holds(v, self.limit) {
                over.push((name, v));
            }
        }
        if !seen {
            return Err(err(format!(
                "the records carry no {} figures for robot {robot} (kind {})",
                figure.name(),
                group.kind
            )));
        }
        let Some(&(name, value)) = over.iter().max_by(|a, b| {
            (a.1 - self.limit)
                .abs()
                .total_cmp(&(b.1 - self.limit).abs())
        }) else {
            return Ok(None);
        };
        let unit = if stat == "n" { "" } else { " ms" };
        let others: Vec<String> = over
            .iter()
            .filter(|(n, _)| *n != name)
            .map(|(n, v)| format!("{n} {v:.3}{unit}"))
            .collect();
        let also = if others.is_empty() {
            String::new()
        } else {
            format!("; also {}", others.join(", "))
        };
        Ok(Some(Fired {
            gate: self.text.clone(),
            value,
            message: format!(
                "fail-if fired: {} — robot {name} measured {value:.3}{unit} {} {}{unit} (kind {}){also}",
                self.text,
                self.op.symbol(),
                self.limit,
                group.kind
            ),
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        let g: Gate = "infer.p99>80ms".parse().unwrap();
        assert_eq!(g.op, Op::Gt);
        assert_eq!(g.limit, 80.0);
        assert_eq!(
            g.target,
            Target::Stage {
                figure: Figure::Infer,
                stat: "p99".into()
            }
        );
        let g: Gate = "call:e2e.p99.9 >= 0.2s".parse().unwrap();
        assert_eq!(g.kind.as_deref(), Some("call"));
        assert_eq!(g.limit, 200.0);
        assert_eq!(g.op, Op::Ge);
        let g: Gate = "uplink_ms.max<500us".parse().unwrap();
        assert_eq!(g.limit, 0.5);
        let g: Gate = "deadline.miss_rate>1%".parse().unwrap();
        assert_eq!(g.limit, 0.01);
        let g: Gate = "e2e.n<100".parse().unwrap();
        assert_eq!(g.limit, 100.0);
        assert_eq!(g.robot, None);
        let g: Gate = "arm-2@call:infer.p99>40ms".parse().unwrap();
        assert_eq!(g.robot.as_deref(), Some("arm-2"));
        assert_eq!(g.kind.as_deref(), Some("call"));
        assert_eq!(g.limit, 40.0);
        let g: Gate = "*@e2e.median>30".parse().unwrap();
        assert_eq!(g.robot.as_deref(), Some("*"));
    }

    #[test]
    fn a_per_robot_gate_reads_only_what_robots_carry() {
        for bad in [
            "arm-1@infer.max>3ms",
            "*@deadline.misses>0",
            "@infer.p99>3ms",
        ] {
            let e = bad.parse::<Gate>().unwrap_err();
            assert!(e.0.contains("ROBOT@"), "{bad}: {e}");
        }
    }

    #[test]
    fn rejects_nonsense_with_the_syntax() {
        for bad in [
            "infer.p99",
            "infer>80",
            "inferr.p99>80",
            "infer.p98>80",
            "infer.p99>fast",
            "infer.n>3ms",
        ] {
            let e = bad.parse::<Gate>().unwrap_err();
            assert!(e.0.contains("STAGE.STAT"), "{bad}: {e}");
        }
    }

    /// Found by the fuzzer (`stagetrace-fuzz`, target `gate`): these read
    /// as an infinite limit, and a gate against infinity never fires.
    #[test]
    fn an_infinite_limit_is_refused() {
        for bad in [
            "infer.p99>1e309",
            "e2e.p99>1e306s",
            "outliers.count<=1e309",
            "deadline.miss_rate>1e309%",
            "e2e.n<-1e309",
        ] {
            let e = bad.parse::<Gate>().unwrap_err();
            assert!(e.0.contains("beyond any limit"), "{bad}: {e}");
        }
        let g: Gate = "e2e.max<1e305s".parse().unwrap();
        assert_eq!(g.limit, 1e308);
    }
}
