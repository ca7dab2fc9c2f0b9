//! Tests of code that once looped forever on odd input: each runs the code
//! on a thread of its own and fails, rather than hangs, when it does not
//! return in time.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// Runs `f`; panics when it has not returned after `secs` seconds (the
/// thread is left behind: the test process ends with the test run).
#[track_caller]
pub(crate) fn within<T: Send + 'static>(
    secs: u64,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => v,
        Err(e) => panic!("{what}: no result after {secs} s ({e})"),
    }
}
