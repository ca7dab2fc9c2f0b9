//! Records for the tests that write and read Parquet: the sample file's
//! calls (every kind of field, hops, failures and mitigations), the failed
//! ones also warm-up calls, so both flags are written.

use stagetrace::record::CallRecord;

pub(crate) use stagetrace_parquet::sample::T0_NS;

pub(crate) fn record(i: u64) -> CallRecord {
    let mut r = stagetrace_parquet::sample::record(i);
    if r.failed == Some(true) {
        r.warmup = Some(true);
    }
    r
}
