//! The tower layers: [`TimingLayer`] times every request of an axum (or any
//! tower HTTP) server and answers with its timing headers; its
//! [`TimingService`] wraps the server's routes.

pub use crate::http::server::{TimingLayer, TimingService};
