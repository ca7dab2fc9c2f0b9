//! One NTP sample: the four timestamps of an instrumented call and the
//! offset θ and delay δ they give (`docs/architecture.md` §2).

/// One call's four timestamps, ns since the Unix epoch: `t0`, `t3` on the
/// client clock, `t1`, `t2` on the server clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NtpSample {
    /// Client sends the request.
    pub t0: u64,
    /// Server has the whole request.
    pub t1: u64,
    /// Server sends the response (`t1 + total_ns`).
    pub t2: u64,
    /// Client has the whole response.
    pub t3: u64,
}

impl NtpSample {
    /// Offset θ = ((t1−t0)+(t2−t3))/2, ns (server − client).
    pub fn offset_ns(&self) -> f64 {
        (diff(self.t1, self.t0) + diff(self.t2, self.t3)) / 2.0
    }

    /// Delay δ = (t3−t0)−(t2−t1), ns: the network part of the roundtrip.
    pub fn delay_ns(&self) -> f64 {
        diff(self.t3, self.t0) - diff(self.t2, self.t1)
    }
}

/// `a − b` in ns as f64, exact for any realistic difference.
pub(crate) fn diff(a: u64, b: u64) -> f64 {
    (i128::from(a) - i128::from(b)) as f64
}
