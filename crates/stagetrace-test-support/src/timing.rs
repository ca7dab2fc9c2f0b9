//! The timing tests' error report. A test that compares a measured time
//! with its truth or a bound calls [`error`] with what it saw and the bound
//! it holds it to, before it asserts; `cargo xtask timing` runs those tests
//! many times in a row and keeps the worst line of each (the highest
//! error / bound).

/// What every report line starts with (what `cargo xtask timing` looks for).
pub const PREFIX: &str = "stagetrace-timing:";

/// Reports `error` (its absolute value counts) against `bound`, the most
/// the test allows, for the figure `what` (name the unit in it: "ttfb
/// median (ms)", "drift (ppm)").
pub fn error(what: &str, error: f64, bound: f64) {
    eprintln!("{PREFIX} {what} error={:.4} bound={bound:.4}", error.abs());
}

/// Reports the worst of `errors` (by absolute value) against `bound`.
pub fn worst(what: &str, errors: impl IntoIterator<Item = f64>, bound: f64) {
    let worst = errors.into_iter().map(f64::abs).fold(0.0, f64::max);
    error(what, worst, bound);
}

/// Reports the `(error, bound)` pair with the highest |error| / bound (a
/// per-call bound: the call closest to failing).
pub fn worst_pair(what: &str, pairs: impl IntoIterator<Item = (f64, f64)>) {
    let worst = pairs
        .into_iter()
        .max_by(|a, b| (a.0.abs() / a.1).total_cmp(&(b.0.abs() / b.1)));
    if let Some((e, b)) = worst {
        error(what, e, b);
    }
}

/// Runs `f` with the calling thread at real-time priority (`SCHED_FIFO`
/// 1), restoring its policy after; threads `f` starts inherit the priority
/// and keep it. Returns `f`'s value and whether the priority was granted
/// (it takes root or `CAP_SYS_NICE`; without it `f` runs at normal
/// priority).
///
/// For a timing test whose premise a busy host breaks rather than its
/// subject: an emulated network path that must stay symmetric, say. The
/// busy loops of `cargo xtask timing --load` then cannot delay the test's
/// threads; the kernel's real-time throttling still leaves them 5 % of
/// each core.
pub fn realtime<T>(f: impl FnOnce() -> T) -> (T, bool) {
    // SAFETY: sched_getscheduler/sched_getparam/sched_setscheduler on the
    // calling thread (pid 0) with a valid, initialised sched_param.
    unsafe {
        let policy = libc::sched_getscheduler(0);
        let mut old = std::mem::zeroed::<libc::sched_param>();
        let have_old = policy >= 0 && libc::sched_getparam(0, &mut old) == 0;
        let rt = libc::sched_param { sched_priority: 1 };
        let granted = have_old && libc::sched_setscheduler(0, libc::SCHED_FIFO, &rt) == 0;
        let out = f();
        if granted {
            libc::sched_setscheduler(0, policy, &old);
        }
        (out, granted)
    }
}

/// [`realtime`] for test `test`, which needs the priority to hold its bound
/// on a loaded machine: where it is refused (no root, no `CAP_SYS_NICE`),
/// a failure when the run must be complete (under CI, as for every
/// prerequisite: [`crate::prereq`]), else a warning and `f` at normal
/// priority.
#[track_caller]
pub fn at_realtime<T>(test: &str, f: impl FnOnce() -> T) -> T {
    let (out, granted) = realtime(f);
    if !granted {
        let why = "SCHED_FIFO was refused (run as root or grant CAP_SYS_NICE); \
                   at normal priority a loaded host can break the test's premise";
        if crate::prereq::Policy::from_env("realtime").must_have() {
            panic!("{test}: prerequisite `realtime` is missing: {why}");
        }
        eprintln!("{test}: ran at normal priority: {why}");
    }
    out
}
