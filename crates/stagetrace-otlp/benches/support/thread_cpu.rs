//! The benchmarks' clock, shared with every crate's benches
//! (`stagetrace_test_support::bench`): the calling thread's own CPU time.

pub(crate) use stagetrace_test_support::bench::{thread_cpu_ns, ThreadCpu};
