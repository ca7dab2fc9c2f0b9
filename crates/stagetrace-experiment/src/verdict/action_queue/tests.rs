//! The action queue's verdict on synthetic runs of LeRobot's async pair at
//! 30 Hz, chunks of 10 refilled at half a chunk: a healthy chunk comes with
//! 5 actions (166.7 ms) left, one every 4 ticks.

#![allow(clippy::unwrap_used)]

use stagetrace_schema::Figure;
use stagetrace_schema::FIGURE_COUNT;

use crate::figures;
use crate::plan::VerdictSpec;
use crate::verdict::obs::{Obs, PhaseSpan};
use crate::verdict::{analyze, ExperimentVerdict};

const HZ: f64 = 30.0;
const TICK: f32 = 1000.0 / 30.0;

fn phase(phase: &str, level: usize, start: f64, end: f64) -> PhaseSpan {
    PhaseSpan {
        phase: phase.into(),
        level,
        label: format!("{phase} {level}"),
        start_unix_ms: start,
        settle_until_unix_ms: start,
        end_unix_ms: end,
        calls: 0,
        excluded_calls: 0,
    }
}

/// One chunk's call: every stage at its healthy value (`uplink` moved by
/// `up` ms), the margin and the dry ticks before it.
#[derive(Clone, Copy)]
struct Chunk {
    up: f32,
    margin: f32,
    dry: u32,
}

const HEALTHY: Chunk = Chunk {
    up: 0.0,
    margin: 5.0 * TICK,
    dry: 0,
};

fn obs(ts: f64, phase: usize, seq: u64, c: Chunk, noise: f32) -> Obs {
    let mut vals = [f32::NAN; FIGURE_COUNT];
    for f in figures::compared() {
        vals[f.index()] = noise
            + match f {
                Figure::Capture => 3.0,
                Figure::Uplink => 1.4 + c.up,
                Figure::Queue => 0.5,
                Figure::Infer => 8.4,
                Figure::PollWait => 0.07,
                Figure::Downlink => 0.9,
                Figure::Dispatch => 18.7 - c.up.min(18.0),
                Figure::Gap => 0.1,
                Figure::Net => 2.3 + c.up,
                Figure::E2e => 33.3,
                _ => f32::NAN,
            };
    }
    vals[Figure::Margin.index()] = c.margin;
    Obs {
        ts_ms: ts,
        phase,
        settling: false,
        failed: false,
        seq,
        dry_ticks: c.dry,
        vals,
    }
}

/// A baseline and `levels.len()` levels of 4 s each: 30 chunks a phase;
/// `levels[i](k)` is the k-th chunk of level i + 1, `ticks_per_chunk[i]`
/// the level's ticks between two refills (4: every tick runs an action).
fn run(levels: &[&dyn Fn(usize) -> Chunk], ticks_per_chunk: &[f64]) -> (Vec<PhaseSpan>, Vec<Obs>) {
    let mut phases = vec![phase("baseline", 0, 0.0, 4000.0)];
    let mut out = Vec::new();
    let mut x = 3u32;
    let mut seq = 100u64;
    for p in 0..=levels.len() {
        let start = p as f64 * 4000.0;
        if p > 0 {
            phases.push(phase("level", p, start, start + 4000.0));
        }
        let gap = if p == 0 { 4.0 } else { ticks_per_chunk[p - 1] };
        for k in 0..30 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let noise = (x >> 16) as f32 / 65536.0 * 0.2;
            let c = if p == 0 { HEALTHY } else { levels[p - 1](k) };
            let ts = start + 1.0 + k as f64 * gap * 1000.0 / HZ;
            out.push(obs(ts, p, seq, c, noise));
            seq += 4;
        }
    }
    (phases, out)
}

fn verdict_of(
    phases: &[PhaseSpan],
    obs: &[Obs],
) -> (Vec<crate::verdict::LevelResult>, ExperimentVerdict) {
    let (th, base_res, mut levels, mut v) = analyze(phases, obs, &[], &VerdictSpec::default());
    super::attach(
        (phases, obs),
        HZ,
        (&th, base_res.as_ref()),
        &mut levels,
        &mut v,
    );
    (levels, v)
}

/// Uplink +10 ms at level 1 (the margin holds: the chunk still comes
/// before the next tick), +40 ms at level 2 (a tick passes first: one action
/// less left), and at level 3 a third of the chunks come 20 ms after the
/// queue emptied: uplink moved first, the margin fell at level 2, the queue
/// ran dry at level 3 — said in that order, in the robot's terms.
#[test]
fn the_margin_falling_and_dry_ticks_are_the_queue_s_moves() {
    let l1 = |_| Chunk {
        up: 10.0,
        ..HEALTHY
    };
    let l2 = |_| Chunk {
        up: 40.0,
        margin: 4.0 * TICK,
        dry: 0,
    };
    let l3 = |k: usize| match k % 3 {
        0 => Chunk {
            up: 40.0,
            margin: -20.0,
            dry: 1,
        },
        _ => Chunk {
            up: 40.0,
            margin: 4.0 * TICK,
            dry: 0,
        },
    };
    let (phases, obs) = run(&[&l1, &l2, &l3], &[4.0, 4.0, 4.0]);
    let (levels, v) = verdict_of(&phases, &obs);
    assert_eq!(v.first_stage, Some("uplink"), "{}", v.summary);
    assert_eq!(v.first_level, Some(1));
    let aq = v.action_queue.as_ref().unwrap();
    assert_eq!(aq.first_level, Some(2));
    assert_eq!(aq.margin_fell_level, Some(2));
    assert_eq!(aq.ran_dry_level, Some(3));
    assert_eq!(aq.fell_behind_level, None);
    let l1q = levels[0].action_queue.as_ref().unwrap();
    assert!(!l1q.moved, "{l1q:?}");
    let l3q = levels[2].action_queue.as_ref().unwrap();
    assert_eq!(l3q.phase.dry_chunks, 10);
    // 10 dry ticks in 4 s at 30 Hz: 10 of 120 ticks.
    assert!((l3q.phase.dry_tick_share - 10.0 / 120.0).abs() < 1e-9);
    assert!(
        v.summary.contains("The action queue: its margin fell at level 2 (level 2): the closest tenth of the chunks came with 133.3 ms of actions left, 166.7 ms in the baseline; the control loop kept its 30 actions per second; it ran dry at level 3 (level 3): 8.3 % of control ticks without an action, before 10 of 30 chunks."),
        "{}",
        v.summary
    );
    assert!(
        v.next_step.contains("raise refill_threshold"),
        "{}",
        v.next_step
    );
}

/// More actions left when the chunks come (a faster path) is good news:
/// no move, and the verdict says the queue held.
#[test]
fn a_larger_margin_is_never_a_move() {
    let more = |_| Chunk {
        margin: 8.0 * TICK,
        ..HEALTHY
    };
    let (phases, obs) = run(&[&more], &[4.0]);
    let (levels, v) = verdict_of(&phases, &obs);
    let q = levels[0].action_queue.as_ref().unwrap();
    assert!(q.margin_change.unwrap().diff > 0.0);
    assert!(!q.moved, "{q:?}");
    assert_eq!(v.first_stage, None, "{}", v.summary);
    assert!(
        v.summary.contains("The action queue held: its margin held"),
        "{}",
        v.summary
    );
}

/// The margin is whole ticks: 4 of 30 chunks a tick short (where the
/// baseline had none) moves the p10 in the point estimate, not at its
/// interval's end — a healthy level gets no mover. Twelve of 30 do.
#[test]
fn a_few_chunks_a_tick_short_are_noise_not_a_fall() {
    let few = |k: usize| Chunk {
        margin: if k % 8 == 3 { 4.0 * TICK } else { 5.0 * TICK },
        ..HEALTHY
    };
    let many = |k: usize| Chunk {
        margin: if k % 5 < 2 { 4.0 * TICK } else { 5.0 * TICK },
        ..HEALTHY
    };
    let (phases, obs) = run(&[&few, &many], &[4.0, 4.0]);
    let (levels, v) = verdict_of(&phases, &obs);
    let q = |i: usize| levels[i].action_queue.as_ref().unwrap();
    assert!(!q(0).margin_fell, "{:?}", q(0));
    assert!(q(1).margin_fell, "{:?}", q(1));
    // No stage moved: the queue is named first.
    assert_eq!(v.first_stage, Some("margin"), "{}", v.summary);
    assert_eq!(v.first_level, Some(2));
    assert!(
        v.summary.starts_with(
            "the robot's action queue moved first, at level 2 (level 2): its margin fell: "
        ),
        "{}",
        v.summary
    );
    assert!(
        v.summary
            .contains("no stage moved beyond noise at any level"),
        "{}",
        v.summary
    );
}

/// Five actions run every 155 ms instead of every 133 ms: the loop fell
/// behind (14 % of its ticks ran nothing) with no dry tick — said as the
/// loop waiting, not as a dry queue.
#[test]
fn a_loop_that_ran_late_fell_behind_without_running_dry() {
    let late = |_| Chunk {
        up: 40.0,
        ..HEALTHY
    };
    let (phases, obs) = run(&[&late], &[4.65]);
    let (levels, v) = verdict_of(&phases, &obs);
    let q = levels[0].action_queue.as_ref().unwrap();
    let lost = q.phase.ticks_lost_share.unwrap();
    assert!((lost - (1.0 - 4.0 / 4.65)).abs() < 0.01, "{lost}");
    assert!(q.fell_behind && !q.ran_dry && !q.margin_fell, "{q:?}");
    assert!(
        v.summary.contains("the control loop fell behind at the same level: 25.8 of its 30 actions per second (14 % of its ticks ran no action, few of them dry"),
        "{}",
        v.summary
    );
    assert!(v.next_step.contains("SendObservations"), "{}", v.next_step);
}

/// A request/response target (no margin in its records) gets no action queue.
#[test]
fn records_without_a_margin_have_no_action_queue() {
    let (phases, mut obs) = run(&[&|_| HEALTHY], &[4.0]);
    for o in &mut obs {
        o.vals[Figure::Margin.index()] = f32::NAN;
    }
    let (levels, v) = verdict_of(&phases, &obs);
    assert!(levels[0].action_queue.is_none());
    assert!(v.action_queue.is_none());
}
