//! The tower layers: [`AdmissionLayer`], admission control for HTTP
//! servers (a concurrency limit, a bounded and timed queue, load shedding),
//! and the [`AdmissionService`] it wraps around the server's routes.

pub use crate::admission::{AdmissionLayer, AdmissionService};
