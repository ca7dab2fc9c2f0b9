//! A sub-millisecond timer for the proxy's delays.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// A timer thread for sub-millisecond sleeps: tokio's timer wheel ticks in
/// whole milliseconds (a 5 ms delay becomes 5–6 ms), and spinning on a
/// loaded machine gets the spinner preempted. One thread per proxy sleeps on
/// a condition variable (a high-resolution kernel timer) until the earliest
/// deadline and wakes the waiting tasks.
#[derive(Debug, Default)]
pub(super) struct PreciseTimer {
    state: Mutex<TimerState>,
    cv: Condvar,
    /// How early to fire, ns: a low percentile of the wake-up latency the
    /// waiters measure (timer thread → runtime → task), so that a task
    /// resumes at its deadline or just after, rarely before.
    lead_ns: AtomicU64,
}

/// Most lead the timer takes against its measured wake-up latency.
const MAX_LEAD_NS: u64 = 500_000;

#[derive(Debug, Default)]
struct TimerState {
    heap: BinaryHeap<Reverse<Wake>>,
    seq: u64,
    stopped: bool,
}

#[derive(Debug)]
struct Wake {
    at: Instant,
    seq: u64,
    tx: oneshot::Sender<()>,
}

impl PartialEq for Wake {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Wake {}
impl PartialOrd for Wake {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Wake {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

impl PreciseTimer {
    /// Start the timer thread, pinned to `cpu` and raised to real-time
    /// priority when `realtime` is given (it counts the outcome).
    pub(super) fn spawn(
        cpu: Option<usize>,
        realtime: Option<Arc<super::pin::Realtime>>,
    ) -> io::Result<(Arc<Self>, thread::JoinHandle<()>)> {
        let timer = Arc::new(PreciseTimer::default());
        let t = timer.clone();
        let join = thread::Builder::new()
            .name("stagetrace-proxy-timer".into())
            .spawn(move || {
                super::pin::pin_current(cpu);
                if let Some(r) = realtime {
                    r.raise_current();
                }
                t.run()
            })?;
        Ok((timer, join))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TimerState> {
        // The state stays consistent even if a holder panicked.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn run(&self) {
        let mut st = self.lock();
        loop {
            if st.stopped {
                st.heap.clear(); // waiters see the sender dropped
                return;
            }
            let lead = Duration::from_nanos(self.lead_ns.load(Ordering::Relaxed));
            let now = Instant::now();
            match st.heap.peek().map(|w| w.0.at) {
                Some(at) if at <= now + lead => {
                    if let Some(Reverse(w)) = st.heap.pop() {
                        let _ = w.tx.send(());
                    }
                }
                Some(at) => {
                    st = self
                        .cv
                        .wait_timeout(st, (at - now).saturating_sub(lead))
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0);
                }
                None => st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }

    pub(super) fn stop(&self) {
        self.lock().stopped = true;
        self.cv.notify_all();
    }

    /// Sleep until `deadline`, to within the kernel's timer slack (~50 µs).
    pub(super) async fn sleep_until(&self, deadline: Instant) {
        if Instant::now() >= deadline {
            return;
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.lock();
            if st.stopped {
                return;
            }
            st.seq += 1;
            let seq = st.seq;
            let earliest = st.heap.peek().is_none_or(|w| deadline < w.0.at);
            st.heap.push(Reverse(Wake {
                at: deadline,
                seq,
                tx,
            }));
            if earliest {
                self.cv.notify_one();
            }
        }
        // An error means the proxy is shutting down: stop waiting.
        if rx.await.is_ok() {
            self.follow_latency(deadline);
        }
    }

    /// Track the 10th percentile of the wake-up latency: a late wake-up
    /// moves the lead up a small step, an early one down nine steps, so about
    /// one wake-up in ten is early (by little) and the rest late by little.
    fn follow_latency(&self, deadline: Instant) {
        const STEP_NS: u64 = 4_000;
        let lead = self.lead_ns.load(Ordering::Relaxed);
        let next = if Instant::now() >= deadline {
            lead.saturating_add(STEP_NS).min(MAX_LEAD_NS)
        } else {
            lead.saturating_sub(9 * STEP_NS)
        };
        self.lead_ns.store(next, Ordering::Relaxed);
    }
}
