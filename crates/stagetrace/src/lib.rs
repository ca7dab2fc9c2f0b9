//! stagetrace: where does a control loop's latency go?

pub mod clock;
pub mod record;
pub mod stage;
pub mod wire;

pub use clock::ClockMode;
pub use record::{CallRecord, ClockBasis};
pub use stage::Stage;
pub use wire::ServerTiming;
