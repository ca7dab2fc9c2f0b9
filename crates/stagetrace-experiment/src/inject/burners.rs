//! The cpu factor's load: burner threads at a duty cycle, optionally pinned
//! to cores.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::ExperimentError;

/// CPU burner threads at a duty cycle (10 ms periods), optionally pinned.
#[derive(Debug)]
pub(super) struct Burners {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Threads pinned to their core as asked.
    pub(super) pinned: Arc<AtomicU64>,
}

impl Burners {
    /// Start `threads` burners busy `duty` of each period, spread over
    /// `cores` when given.
    pub(super) fn start(
        threads: u32,
        duty: f64,
        cores: Option<Vec<usize>>,
    ) -> Result<Burners, ExperimentError> {
        let stop = Arc::new(AtomicBool::new(false));
        let pinned = Arc::new(AtomicU64::new(0));
        let mut handles = Vec::new();
        let period = Duration::from_millis(10);
        let on = period.mul_f64(duty.clamp(0.0, 1.0));
        for i in 0..threads {
            let (stop_t, pinned_t) = (Arc::clone(&stop), Arc::clone(&pinned));
            let core = cores
                .as_ref()
                .filter(|c| !c.is_empty())
                .map(|c| c[i as usize % c.len()]);
            let spawned = std::thread::Builder::new()
                .name("st-burner".into())
                .spawn(move || {
                    if let Some(core) = core {
                        if pin_to(core) {
                            pinned_t.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    let mut x = 0x1234_5678u64;
                    let mut next = Instant::now();
                    while !stop_t.load(Ordering::Relaxed) {
                        let busy_until = next + on;
                        while Instant::now() < busy_until {
                            for _ in 0..1000 {
                                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                            }
                        }
                        std::hint::black_box(x);
                        next += period;
                        let now = Instant::now();
                        if next > now {
                            std::thread::sleep(next - now);
                        } else {
                            next = now;
                        }
                    }
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    let mut partial = Burners {
                        stop,
                        threads: handles,
                        pinned,
                    };
                    partial.stop();
                    return Err(ExperimentError::Start(format!("a CPU burner thread: {e}")));
                }
            }
        }
        Ok(Burners {
            stop,
            threads: handles,
            pinned,
        })
    }

    /// Stop and join every burner.
    pub(super) fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Burners {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Pin the calling thread to one core; false when the kernel refuses.
fn pin_to(core: usize) -> bool {
    let mut set = rustix::thread::CpuSet::new();
    if core >= rustix::thread::CpuSet::MAX_CPU {
        return false;
    }
    set.set(core);
    rustix::thread::sched_setaffinity(None, &set).is_ok()
}
