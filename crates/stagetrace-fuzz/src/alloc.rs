//! A counting global allocator: the peak of bytes one thread holds while a
//! parser runs, so a target can assert that a parse stays within a stated
//! memory bound.
//!
//! Counters are per thread (a `const` thread-local, which never allocates),
//! so test threads running next to the fuzzer do not disturb its figures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting what the current thread holds.
#[derive(Debug)]
pub struct CountingAlloc;

thread_local! {
    static CURRENT: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn add(delta: isize) {
    // `try_with`: during thread teardown the slots may be gone; those
    // allocations are not inside any measured parse.
    let _ = CURRENT.try_with(|c| {
        let now = c.get() + delta;
        c.set(now);
        let _ = PEAK.try_with(|p| {
            if now > p.get() {
                p.set(now);
            }
        });
    });
}

// SAFETY: every call is forwarded to `System` unchanged; we only count.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        add(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // A moving realloc holds both blocks for a moment: count the
            // new one before the old one goes, as a real peak would.
            add(new_size as isize);
            add(-(layout.size() as isize));
        }
        p
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Runs `f` and returns its result with the most bytes the current thread
/// held at once during it, beyond what it held before.
pub fn peak_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let before = CURRENT.with(Cell::get);
    PEAK.with(|p| p.set(before));
    let r = f();
    let peak = PEAK.with(Cell::get);
    (r, usize::try_from(peak - before).unwrap_or(0))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_peak_not_the_end() {
        let ((), peak) = peak_during(|| {
            let v = vec![0u8; 10_000];
            drop(v);
            let w = vec![0u8; 100];
            drop(w);
        });
        assert_eq!(peak, 10_000);
    }
}
