//! Every value of a plan checked before anything starts; the error names
//! the field and the fix.

use super::error::{invalid, PlanError};
use super::factor::{Direction, FactorKind, Hold, Level};
use super::target::TargetKind;
use super::Plan;

impl Plan {
    /// Check every value; the error names the field and the fix.
    pub fn validate(&self) -> Result<(), PlanError> {
        self.check_target_values()?;
        self.check_target_kind()?;
        self.check_transport()?;
        check_hold("baseline", &self.baseline)?;
        check_hold("factor", &self.factor.hold())?;
        self.check_factor()?;
        if !(self.sampler.hz.is_finite() && self.sampler.hz > 0.0 && self.sampler.hz <= 100.0) {
            return Err(invalid("sampler.hz must be between 0 and 100"));
        }
        self.check_levels()
    }

    /// The target's rate, stage times, path shaping, payload, server
    /// concurrency and warm-up, each in range.
    fn check_target_values(&self) -> Result<(), PlanError> {
        let t = &self.target;
        let ms_ok = |v: f64| v.is_finite() && (0.0..=60_000.0).contains(&v);
        if !(t.hz.is_finite() && t.hz > 0.0 && t.hz <= 1000.0) {
            return Err(invalid(format!(
                "target.hz = {} must be a rate between 0 and 1000 calls per second",
                t.hz
            )));
        }
        for (name, v) in [
            ("target.model_ms", t.model_ms),
            ("target.capture_ms", t.capture_ms),
            ("target.dispatch_ms", t.dispatch_ms),
            ("target.uplink_delay_ms", t.uplink_delay_ms),
            ("target.downlink_delay_ms", t.downlink_delay_ms),
        ] {
            if !ms_ok(v) {
                return Err(invalid(format!(
                    "{name} = {v} must be between 0 and 60000 ms"
                )));
            }
        }
        if let Some(b) = t.bandwidth_mbps {
            if !(b.is_finite() && b > 0.0) {
                return Err(invalid(format!(
                    "target.bandwidth_mbps = {b} must be above 0 (leave it out for no limit)"
                )));
            }
        }
        if t.payload_kb > 16 * 1024 {
            return Err(invalid("target.payload_kb must be at most 16384 (16 MiB)"));
        }
        if t.server_concurrency == 0 || t.server_concurrency > 1024 {
            return Err(invalid(
                "target.server_concurrency must be between 1 and 1024",
            ));
        }
        if !(t.warmup_s.is_finite() && (0.0..=600.0).contains(&t.warmup_s)) {
            return Err(invalid("target.warmup_s must be between 0 and 600 s"));
        }
        Ok(())
    }

    /// The factor's settle time within its hold, its number of levels, and
    /// `kernel` and `direction` on a net factor only.
    fn check_factor(&self) -> Result<(), PlanError> {
        let f = &self.factor;
        if !(f.settle_s.is_finite() && f.settle_s >= 0.0) {
            return Err(invalid("factor.settle_s must be 0 or more seconds"));
        }
        if let Some(s) = f.hold_s {
            if f.settle_s >= s {
                return Err(invalid(format!(
                    "factor.settle_s = {} leaves nothing of hold_s = {s}; lower settle_s",
                    f.settle_s
                )));
            }
        }
        if f.levels.is_empty() {
            return Err(invalid(
                "factor.levels is empty: give at least one level, e.g. levels = [5, 20]",
            ));
        }
        if f.levels.len() > 64 {
            return Err(invalid("factor.levels: at most 64 levels"));
        }
        if f.kernel && f.kind != FactorKind::Net {
            return Err(invalid(format!(
                "factor.kernel applies to net only, not {}",
                f.kind.name()
            )));
        }
        if f.direction != Direction::Both && f.kind != FactorKind::Net {
            return Err(invalid(format!(
                "factor.direction applies to net only, not {}",
                f.kind.name()
            )));
        }
        Ok(())
    }

    /// Every level: its own values, and no kernel-bottleneck field unless
    /// the factor shapes the kernel bottleneck.
    fn check_levels(&self) -> Result<(), PlanError> {
        let f = &self.factor;
        for (i, level) in self.levels().iter().enumerate() {
            check_level(f.kind, i + 1, level)?;
            if !f.kernel {
                check_no_kernel_fields(i + 1, level)?;
            }
        }
        Ok(())
    }

    /// The command target's fields on a command target only, each given
    /// and valid there, and a factor it can take.
    fn check_target_kind(&self) -> Result<(), PlanError> {
        let t = &self.target;
        let command_fields = [
            ("command", t.command.is_some()),
            ("env", !t.env.is_empty()),
            ("records_dir", t.records_dir.is_some()),
            ("upstream", t.upstream.is_some()),
            ("listen", t.listen.is_some()),
            ("payload_env", t.payload_env.is_some()),
            ("replay_file", t.replay_file.is_some()),
            ("replay_http_path", t.replay_http_path.is_some()),
            ("replay_content_type", t.replay_content_type.is_some()),
        ];
        match t.kind {
            TargetKind::Demo => {
                if let Some((name, _)) = command_fields.iter().find(|(_, set)| *set) {
                    return Err(invalid(format!(
                        "target.{name} applies to kind = \"command\" only"
                    )));
                }
            }
            TargetKind::Command => {
                if t.command.as_ref().is_none_or(|c| c.is_empty()) {
                    return Err(invalid(
                        "target.command: give the client's argv, e.g. command = [\"python\", \"client.py\"]",
                    ));
                }
                if t.records_dir.is_none() {
                    return Err(invalid(
                        "target.records_dir: give the directory the client's stage layer writes records-*.jsonl to",
                    ));
                }
                match &t.upstream {
                    Some(u) if u.parse::<std::net::SocketAddr>().is_ok() => {}
                    _ => {
                        return Err(invalid(
                            "target.upstream: give the server's address as ip:port, e.g. \"10.0.0.5:8000\"",
                        ))
                    }
                }
                if let Some(path) = &t.replay_http_path {
                    if !path.starts_with('/') || t.replay_file.is_none() {
                        return Err(invalid(
                            "target.replay_http_path must start with '/' and comes with target.replay_file (the request body to replay)",
                        ));
                    }
                }
                if let Some(l) = &t.listen {
                    if l.parse::<std::net::SocketAddr>().is_err() {
                        return Err(invalid(format!(
                            "target.listen = {l:?} must be ip:port, e.g. \"127.0.0.1:9000\""
                        )));
                    }
                }
                match self.factor.kind {
                    FactorKind::Pause => {
                        return Err(invalid(
                            "a pause factor needs the demo target (it pauses the demo's client)",
                        ))
                    }
                    FactorKind::Payload if t.payload_env.is_none() => {
                        return Err(invalid(
                            "a payload factor on a command target needs target.payload_env: the variable your client reads its frame size (KiB) from",
                        ))
                    }
                    FactorKind::Infer if t.replay_file.is_none() => {
                        return Err(invalid(
                            "an infer factor on a command target needs target.replay_file: a captured observation (msgpack map, or with replay_http_path an HTTP request body) to replay",
                        ))
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

fn check_hold(name: &str, h: &Hold) -> Result<(), PlanError> {
    match (h.hold_s, h.calls) {
        (Some(_), Some(_)) => Err(invalid(format!("{name}: give hold_s or calls, not both"))),
        (None, None) => Err(invalid(format!(
            "{name}: give hold_s (seconds) or calls (calls per phase)"
        ))),
        (Some(s), None) if !(s.is_finite() && s > 0.0 && s <= 86_400.0) => Err(invalid(format!(
            "{name}.hold_s = {s} must be between 0 and 86400 s"
        ))),
        (None, Some(n)) if !(5..=10_000_000).contains(&n) => Err(invalid(format!(
            "{name}.calls = {n}: use at least 5 calls per phase"
        ))),
        _ => Ok(()),
    }
}

/// One level's values: each field belongs to this factor, then each value
/// is in range for it.
fn check_level(kind: FactorKind, i: usize, l: &Level) -> Result<(), PlanError> {
    check_level_fields(kind, i, l)?;
    match kind {
        FactorKind::Net => check_net_level(i, l),
        FactorKind::Infer => check_infer_level(i, l),
        FactorKind::Cpu => check_cpu_level(i, l),
        FactorKind::Payload => check_payload_level(i, l),
        FactorKind::Pause => check_pause_level(i, l),
    }
}

/// Every field set on a level belongs to the factor's kind.
fn check_level_fields(kind: FactorKind, i: usize, l: &Level) -> Result<(), PlanError> {
    let fields: [(&str, bool, &[FactorKind]); 15] = [
        ("rate_mbit", l.rate_mbit.is_some(), &[FactorKind::Net]),
        ("cross_mbit", l.cross_mbit.is_some(), &[FactorKind::Net]),
        ("queue_ms", l.queue_ms.is_some(), &[FactorKind::Net]),
        ("delay_ms", l.delay_ms.is_some(), &[FactorKind::Net]),
        ("jitter_ms", l.jitter_ms.is_some(), &[FactorKind::Net]),
        (
            "bandwidth_mbps",
            l.bandwidth_mbps.is_some(),
            &[FactorKind::Net],
        ),
        (
            "stall_every_ms",
            l.stall_every_ms.is_some(),
            &[FactorKind::Net],
        ),
        ("stall_ms", l.stall_ms.is_some(), &[FactorKind::Net]),
        ("in_flight", l.in_flight.is_some(), &[FactorKind::Infer]),
        ("threads", l.threads.is_some(), &[FactorKind::Cpu]),
        ("duty", l.duty.is_some(), &[FactorKind::Cpu]),
        ("cores", l.cores.is_some(), &[FactorKind::Cpu]),
        ("payload_kb", l.payload_kb.is_some(), &[FactorKind::Payload]),
        ("pause_ms", l.pause_ms.is_some(), &[FactorKind::Pause]),
        ("every_s", l.every_s.is_some(), &[FactorKind::Pause]),
    ];
    for (name, set, kinds) in fields {
        if set && !kinds.contains(&kind) {
            return Err(invalid(format!(
                "level {i}: {name} does not apply to a {} factor",
                kind.name()
            )));
        }
    }
    Ok(())
}

/// A level of a factor without the kernel bottleneck sets none of its fields.
fn check_no_kernel_fields(i: usize, l: &Level) -> Result<(), PlanError> {
    if let Some((name, _)) = [
        ("rate_mbit", l.rate_mbit.is_some()),
        ("cross_mbit", l.cross_mbit.is_some()),
        ("queue_ms", l.queue_ms.is_some()),
    ]
    .iter()
    .find(|(_, set)| *set)
    {
        return Err(invalid(format!(
            "level {i}: {name} shapes the kernel bottleneck; set factor.kernel = true (needs root), or use bandwidth_mbps for the userspace proxy"
        )));
    }
    Ok(())
}

/// Unset, or a finite number of milliseconds up to a minute.
fn level_ms_ok(v: Option<f64>) -> bool {
    v.is_none_or(|v| v.is_finite() && (0.0..=60_000.0).contains(&v))
}

/// A net level: at least one knob, each in range, stalls given in pairs.
fn check_net_level(i: usize, l: &Level) -> Result<(), PlanError> {
    if l.delay_ms.is_none()
        && l.jitter_ms.is_none()
        && l.bandwidth_mbps.is_none()
        && l.stall_ms.is_none()
        && l.rate_mbit.is_none()
        && l.cross_mbit.is_none()
    {
        return Err(invalid(format!(
            "level {i}: a net level needs delay_ms, jitter_ms, bandwidth_mbps, stall_ms, rate_mbit or cross_mbit"
        )));
    }
    for (name, v) in [("rate_mbit", l.rate_mbit), ("cross_mbit", l.cross_mbit)] {
        if let Some(v) = v {
            if !(v.is_finite() && v > 0.0 && v <= 100_000.0) {
                return Err(invalid(format!(
                    "level {i}: {name} = {v} must be above 0 and at most 100000 Mbit/s"
                )));
            }
        }
    }
    if let Some(q) = l.queue_ms {
        if !(q.is_finite() && (1.0..=10_000.0).contains(&q)) {
            return Err(invalid(format!(
                "level {i}: queue_ms = {q} must be between 1 and 10000 ms"
            )));
        }
    }
    for (name, v) in [
        ("delay_ms", l.delay_ms),
        ("jitter_ms", l.jitter_ms),
        ("stall_every_ms", l.stall_every_ms),
        ("stall_ms", l.stall_ms),
    ] {
        if !level_ms_ok(v) {
            return Err(invalid(format!(
                "level {i}: {name} must be between 0 and 60000 ms"
            )));
        }
    }
    if let Some(b) = l.bandwidth_mbps {
        if !(b.is_finite() && b > 0.0) {
            return Err(invalid(format!(
                "level {i}: bandwidth_mbps must be above 0"
            )));
        }
    }
    match (l.stall_every_ms, l.stall_ms) {
        (Some(e), Some(s)) if s >= e => Err(invalid(format!(
            "level {i}: stall_ms ({s}) must be shorter than stall_every_ms ({e})"
        ))),
        (Some(_), None) | (None, Some(_)) => Err(invalid(format!(
            "level {i}: give stall_ms and stall_every_ms together"
        ))),
        _ => Ok(()),
    }
}

/// An infer level: how many calls in flight.
fn check_infer_level(i: usize, l: &Level) -> Result<(), PlanError> {
    match l.in_flight {
        Some(n) if (1..=256).contains(&n) => Ok(()),
        _ => Err(invalid(format!(
            "level {i}: in_flight must be between 1 and 256"
        ))),
    }
}

/// A cpu level: burner threads, their duty cycle and the cores they run on.
fn check_cpu_level(i: usize, l: &Level) -> Result<(), PlanError> {
    match l.threads {
        Some(n) if (1..=256).contains(&n) => {}
        _ => {
            return Err(invalid(format!(
                "level {i}: threads must be between 1 and 256"
            )))
        }
    }
    if let Some(d) = l.duty {
        if !(d.is_finite() && d > 0.0 && d <= 1.0) {
            return Err(invalid(format!("level {i}: duty = {d} must be in (0, 1]")));
        }
    }
    if let Some(cores) = &l.cores {
        // A core the kernel refuses is reported (burners_pinned), not fatal.
        if cores.is_empty() || cores.iter().any(|c| *c >= 1024) {
            return Err(invalid(format!(
                "level {i}: cores must list core numbers (0, 1, ...) below 1024, or be left out"
            )));
        }
    }
    Ok(())
}

/// A payload level: the frame size in KiB.
fn check_payload_level(i: usize, l: &Level) -> Result<(), PlanError> {
    match l.payload_kb {
        Some(kb) if kb <= 16 * 1024 => Ok(()),
        _ => Err(invalid(format!(
            "level {i}: payload_kb must be between 0 and 16384"
        ))),
    }
}

/// A pause level: how long the client pauses and how often.
fn check_pause_level(i: usize, l: &Level) -> Result<(), PlanError> {
    if l.pause_ms.is_none() || !level_ms_ok(l.pause_ms) {
        return Err(invalid(format!(
            "level {i}: pause_ms must be between 0 and 60000"
        )));
    }
    if let Some(e) = l.every_s {
        if !(e.is_finite() && e >= 0.05) {
            return Err(invalid(format!(
                "level {i}: every_s must be at least 0.05 s"
            )));
        }
    }
    Ok(())
}
