//! Ctrl-C (SIGINT) and SIGTERM for the subcommands that run until told to
//! stop (`experiment`, `tail`): the signal sets a flag, the command finishes
//! what it must and exits with `exit::INTERRUPTED`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, SignalKind};

/// How often a sleeping command looks at the flag: well under what a person
/// notices after pressing Ctrl-C.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// A flag that SIGINT or SIGTERM sets.
///
/// The handlers are in place when this returns, so a signal sent after it
/// cannot kill the process outright. When they cannot be installed the flag
/// never sets and the signals keep their default action (the process dies
/// of them, which shells also report as 130).
pub(crate) fn watch() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    else {
        return stop;
    };
    let (ready_tx, ready_rx) = mpsc::channel();
    let flag = Arc::clone(&stop);
    let spawned = std::thread::Builder::new()
        .name("stagetrace-signals".into())
        .spawn(move || {
            rt.block_on(async move {
                // Registered here, before `ready`: `signal()` installs the
                // handler when called, not when first awaited.
                let int = signal(SignalKind::interrupt()).ok();
                let term = signal(SignalKind::terminate()).ok();
                let _ = ready_tx.send(());
                tokio::select! {
                    _ = recv(int) => {}
                    _ = recv(term) => {}
                }
                flag.store(true, Ordering::SeqCst);
            });
        });
    if spawned.is_ok() {
        let _ = ready_rx.recv();
    }
    stop
}

async fn recv(sig: Option<tokio::signal::unix::Signal>) {
    match sig {
        Some(mut s) => {
            s.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// Sleeps `d`, or less when `stop` sets meanwhile; true when it did.
pub(crate) fn sleep(stop: &AtomicBool, d: Duration) -> bool {
    let until = Instant::now() + d;
    loop {
        if stop.load(Ordering::SeqCst) {
            return true;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(left.min(LOOK_EVERY));
    }
}
