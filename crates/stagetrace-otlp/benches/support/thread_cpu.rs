//! The calling thread's own CPU time as a criterion measurement: on a
//! machine of 2 shared cores, wall time per call also counts the waits for a
//! core while the worker and exporter threads (or other processes) run,
//! which is not what the app thread pays.

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::Throughput;

pub(crate) use stagetrace_test_support::thread_cpu_ns;

/// Criterion measurement: the benchmark thread's CPU time, ns.
pub(crate) struct ThreadCpu;

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
        &CpuFormatter
    }
}

struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (div, unit) = if typical >= 1e6 {
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
        let per = match t {
            Throughput::Elements(n) | Throughput::ElementsAndBytes { elements: n, .. } => *n as f64,
            Throughput::Bytes(n) | Throughput::BytesDecimal(n) => *n as f64,
            Throughput::Bits(n) => *n as f64,
        };
        values.iter_mut().for_each(|v| *v = per * 1e9 / *v);
        "elem/s cpu"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}
