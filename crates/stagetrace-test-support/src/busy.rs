//! Rival threads that keep cores busy for a test, stopped and joined when
//! the guard drops (a panicking test leaves no loop spinning behind).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// One rival load at a time in a test process. The tests of one binary run
/// side by side: a test that measures the host under its own load (the
/// kernel's CPU-pressure count against the sampled one, a thread's wait
/// beside a pinned rival) would read another test's load and its reads
/// of the same counters as its own.
static ONE_LOAD: Mutex<()> = Mutex::new(());

/// Busy loops, running until dropped; while they run, no other `Busy` of
/// the process starts.
#[derive(Debug)]
pub struct Busy {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    _alone: MutexGuard<'static, ()>,
}

impl Busy {
    /// `n` busy loops wherever the scheduler puts them.
    pub fn spinners(n: usize) -> Busy {
        Busy::start(n, None)
    }

    /// One busy loop per core the process may run on.
    pub fn on_every_core() -> Busy {
        Busy::spinners(cores())
    }

    /// One busy loop pinned to `cpu`: a thread pinned there beside it
    /// waits on the run queue for whatever of its time the rival takes.
    pub fn pinned(cpu: usize) -> Busy {
        Busy::start(1, Some(cpu))
    }

    fn start(n: usize, cpu: Option<usize>) -> Busy {
        // A test that panicked while it held the load leaves the lock
        // poisoned, not taken: the next one goes on.
        let alone = ONE_LOAD.lock().unwrap_or_else(|e| e.into_inner());
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    if let Some(cpu) = cpu {
                        pin_to_cpu(cpu);
                    }
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Busy {
            stop,
            threads,
            _alone: alone,
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The cores this process may run on (2 when the count is unknown).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// Pins the calling thread to `cpu`; panics if the kernel refuses.
pub fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET and sched_setaffinity
    // only touch it and the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0,
            "cannot pin a thread to CPU {cpu}"
        );
    }
}
