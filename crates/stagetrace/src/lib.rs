//! stagetrace: where does a control loop's latency go?

mod builder;
pub mod clock;
pub mod health;
mod ids;
mod layer;
pub mod record;
pub mod sink;
pub mod stage;
mod stamp;
pub mod summary;
pub mod wire;
mod worker;

pub use builder::{BuildError, FlushGuard, Rotation, StageLayerBuilder};
pub use health::{count_clamped, count_rejected_header};
pub use layer::{
    mark_failed, record_output_digest, record_server_timing, trace_parent, FilteredStageLayer,
    StageFilter, StageLayer,
};
pub use sink::RecordSink;
pub use summary::{Summary, WindowSummary};
pub use wire::TraceParent;

pub use clock::ClockMode;
pub use record::{CallRecord, ClockBasis, ServerRecord};
pub use stage::Stage;
pub use wire::ServerTiming;
