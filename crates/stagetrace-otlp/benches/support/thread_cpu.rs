//! The benchmarks' clock, shared with every crate's benches
//! (`stagetrace_test_support::ThreadCpu`): the calling thread's own CPU time.

pub(crate) use stagetrace_test_support::{thread_cpu_ns, ThreadCpu};
