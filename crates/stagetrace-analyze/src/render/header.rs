//! The kind's heading: its calls and time span, its rate, what the
//! mitigations did and the action queue of an asynchronous policy.

use std::fmt::Write as _;

use crate::analysis::GroupReport;
use crate::format::{fmt_ms, iso_time};

/// The kind's line, its rate (per robot when robots are merged) and what
/// the mitigations did.
pub(super) fn header(s: &mut String, g: &GroupReport) {
    let _ = writeln!(
        s,
        "\nkind \"{}\": {} steady call(s) ({} warm-up excluded, {} failed), {} → {}",
        g.kind,
        g.steady,
        g.warmup_excluded,
        g.failed,
        iso_time(g.start_unix_ms),
        iso_time(g.end_unix_ms)
    );
    let rate = rate(g);
    if !rate.is_empty() {
        let _ = writeln!(s, "  {}", rate.join("; "));
    }
    mitigations(s, g);
    action_queue(s, g);
}

/// The rate line's parts: the effective rate, the completion jitter and
/// the deadline misses.
fn rate(g: &GroupReport) -> Vec<String> {
    let mut rate = Vec::new();
    let merged_robots = !g.robots.is_empty();
    if merged_robots {
        // Interleaved robots make neither a rate nor a jitter.
        rate.push("rate and completion jitter per robot (below)".to_string());
    } else if let Some(hz) = g.rate.effective_hz {
        rate.push(format!("{hz:.1} Hz effective"));
    }
    if let (false, Some(j)) = (merged_robots, &g.rate.jitter) {
        rate.push(format!(
            "completion jitter |Δ²t| p50 {} p99 {}",
            fmt_ms(j.p50),
            fmt_ms(j.p99)
        ));
    }
    if let Some(d) = &g.rate.deadline {
        let mut t = format!(
            "deadline misses {} of {} ({:.2}%)",
            d.misses,
            d.calls,
            100.0 * d.miss_rate
        );
        if let Some(l) = &d.late {
            let _ = write!(t, ", late p99 {}", fmt_ms(l.p99));
        }
        rate.push(t);
    }
    rate
}

/// What the mitigations did: batches, the result cache, stale actions.
fn mitigations(s: &mut String, g: &GroupReport) {
    let Some(m) = &g.mitigations else {
        return;
    };
    let mut parts = Vec::new();
    if let Some(mean) = m.mean_batch {
        parts.push(format!(
            "batched {} call(s), mean batch {mean:.2}",
            m.batched_calls
        ));
    }
    if let Some(rate) = m.cache_hit_rate {
        parts.push(format!(
            "cache {} hit / {} miss ({:.1}% hit)",
            m.cache_hits,
            m.cache_misses,
            100.0 * rate
        ));
    }
    if m.stale_calls > 0 {
        parts.push(format!(
            "{} stale action(s) dropped in {} call(s)",
            m.stale_dropped, m.stale_calls
        ));
    }
    let _ = writeln!(s, "  mitigations: {}", parts.join("; "));
}

/// An asynchronous policy's action queue: its margin, and the chunks that
/// came after it ran dry.
fn action_queue(s: &mut String, g: &GroupReport) {
    let Some(q) = &g.action_queue else {
        return;
    };
    let dry = match q.dry_p50_ms {
        Some(late) if q.dry_chunks > 0 => format!(
            "; ran dry before {} ({} idle ticks, a median {} before the chunk came)",
            q.dry_chunks,
            q.dry_ticks,
            fmt_ms(late)
        ),
        _ => String::new(),
    };
    let _ = writeln!(
        s,
        "  action queue: {} chunks, margin p50 {}{dry}",
        q.chunks,
        fmt_ms(q.margin_p50_ms)
    );
}
