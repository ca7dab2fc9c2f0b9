//! The benchmarks' clock: the calling thread's own CPU time as a criterion
//! measurement. On a machine of two shared cores, wall time per iteration
//! also counts the waits for a core while other threads (the layer's
//! worker, an exporter, other processes) run, which is not what the
//! measured thread pays.

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::Throughput;

/// CPU time the calling thread has used, ns: [`stagetrace::host::thread_cpu_ns`],
/// which a benchmark cannot do without.
pub fn thread_cpu_ns() -> u64 {
    stagetrace::host::thread_cpu_ns().expect("clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed")
}

/// Criterion measurement: the benchmark thread's CPU time, ns; throughput
/// printed per second of that CPU time, in `unit` after dividing by `per`.
#[derive(Clone, Copy, Debug)]
pub struct ThreadCpu {
    unit: &'static str,
    per: f64,
}

impl ThreadCpu {
    /// Throughput as elements per CPU second.
    pub const ELEMENTS: ThreadCpu = ThreadCpu {
        unit: "elem/s cpu",
        per: 1.0,
    };

    /// Throughput as millions of `what` per CPU second ("M records/s per core").
    pub const fn millions(unit: &'static str) -> ThreadCpu {
        ThreadCpu { unit, per: 1e6 }
    }
}

impl Measurement for ThreadCpu {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, i: u64) -> u64 {
        thread_cpu_ns().saturating_sub(i)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        self
    }
}

impl ValueFormatter for ThreadCpu {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (div, unit) = if typical >= 1e9 {
            (1e9, "s cpu")
        } else if typical >= 1e6 {
            (1e6, "ms cpu")
        } else if typical >= 1e3 {
            (1e3, "µs cpu")
        } else {
            (1.0, "ns cpu")
        };
        values.iter_mut().for_each(|v| *v /= div);
        unit
    }
    fn scale_throughputs(&self, _typical: f64, t: &Throughput, values: &mut [f64]) -> &'static str {
        let n = match t {
            Throughput::Elements(n) | Throughput::ElementsAndBytes { elements: n, .. } => *n as f64,
            Throughput::Bytes(n) | Throughput::BytesDecimal(n) => *n as f64,
            Throughput::Bits(n) => *n as f64,
        };
        values.iter_mut().for_each(|v| *v = n * 1e9 / *v / self.per);
        self.unit
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}
