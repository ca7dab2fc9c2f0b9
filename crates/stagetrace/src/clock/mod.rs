//! Clocks (`docs/architecture.md` §2): wall/monotonic anchor, per-peer offset
//! estimation and the stitching of server timing onto the client's timeline.
//!
//! - [`Anchor`] (`anchor.rs`): a (wall, monotonic) pair that turns an
//!   [`Instant`](std::time::Instant) into Unix nanoseconds, so intervals stay
//!   monotonic and only the cross-machine stitching uses wall time.
//! - [`NtpSample`] (`sample.rs`): the free NTP sample every instrumented call
//!   gives.
//! - [`OffsetFilter`] (`filter.rs`): one peer's server − client offset, an
//!   NTP clock filter over those samples: minimum delay over a sliding
//!   window, drift followed by regression, clock steps detected and the
//!   window reset.
//! - [`Stitcher::stitch_hops`] (`relay_stitch.rs`): a call through relays, one
//!   estimate per hop, offsets and bounds composed along the path.
//! - [`Stitcher`] (`stitch.rs`): per-peer filters plus the [`ClockMode`];
//!   turns a call's [`ClientTimes`] and [`ServerTiming`](crate::ServerTiming)
//!   into [`Stitched`] stage times, in integer nanoseconds.
//!
//! `docs/clocks.md` explains what `offset_ms` and `split_err_ms` mean and
//! why path asymmetry cannot be measured from two clocks.

mod anchor;
mod filter;
mod fit;
mod relay_stitch;
mod sample;
mod stitch;

pub use anchor::{Anchor, WallClock, ANCHOR_REFRESH, RATE_BASELINE};
pub use filter::{FilterConfig, OffsetEstimate, OffsetFilter};
pub use sample::NtpSample;
pub use stitch::{ClientTimes, ClockMode, Stitched, Stitcher, MAX_PEERS};
