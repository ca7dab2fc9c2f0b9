//! stagetrace-mitigate: the remedies for a slow control loop — batching,
//! admission control, caching, dropping stale actions — as library pieces
//! that report their own effect, so you can turn one on and prove it helped.
//!
//! # Core concepts
//!
//! - **Server side**, wrapping a `stagetrace-net` policy server handler:
//!   - [`Batcher`]: a dynamic batcher (`max_batch`, `max_wait`, bounded queue,
//!     per-request deadlines) that runs a batch at once when every caller it
//!     can hear from (each open connection) is already in it
//!     ([`BatchPolicy::AllIn`]). Each request's wait is reported as the
//!     `queue` stage (its [`InferTimer`](stagetrace_net::InferTimer) is marked
//!     when its batch starts) and its batch size lands on the call's record
//!     (`batch_size`).
//!   - [`Admission`] / [`AdmittedHandler`] (WebSocket) and
//!     [`tower::AdmissionLayer`]
//!     (HTTP, on tower's concurrency-limit and timeout services): a
//!     concurrency limit, a bounded queue with a timeout, and load shedding
//!     with an error that says what happened, counted.
//!   - [`ResultCache`] / [`CachedHandler`]: a moka cache bounded in bytes,
//!     keyed by a 128-bit hash of the request ([`CacheKey`], [`KeySpec`]),
//!     hits and misses counted and each on its call's record (`cache`).
//! - **Client / executor side**: [`StaleFilter`] drops action chunks older
//!   than a configured age (counted, and on the call's record as
//!   `stale_dropped`);
//!   [`CommandMerger`] merges the commands of one control period.
//! - **Proof that outputs did not change**: [`record_action_digest`] puts a
//!   stable digest of the returned action on the call record
//!   (`output_digest`); `stagetrace compare BEFORE AFTER` fails when an
//!   optimisation changed it.
//!
//! # Usage
//!
//! A batched policy server whose model costs a + b·batch:
//!
//! ```no_run
//! use std::time::Duration;
//! use stagetrace_mitigate::{BatchConfig, Batcher, BatchedHandler};
//! use stagetrace_net::{msg::MsgMap, ws::PolicyServer};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let batcher = Batcher::spawn(
//!     BatchConfig::default().max_batch(8).max_wait(Duration::from_millis(3)),
//!     |obs: Vec<MsgMap>| async move {
//!         let n = obs.len() as u64;
//!         tokio::time::sleep(Duration::from_millis(20 + 2 * n)).await; // the model
//!         Ok::<_, std::convert::Infallible>(obs.iter().map(|_| MsgMap::new().with("ok", true)).collect())
//!     },
//! )?;
//! let server = PolicyServer::builder()
//!     .max_concurrency(64) // let requests reach the batcher together
//!     .spawn("127.0.0.1:0", BatchedHandler::new(batcher))
//!     .await?;
//! # drop(server); Ok(()) }
//! ```
//!
//! See `docs/mitigations.md` for the worked example: measure, turn one on,
//! measure again, `stagetrace compare`.
//!
//! # Supported Rust versions
//!
//! Built and tested on stable Rust; the minimum supported version is 1.85.
//!
//! # Public API
//!
//! - Admission: [`Admission`], [`AdmissionConfig`], [`AdmissionStats`],
//!   [`Admitted`], [`AdmittedHandler`] (WebSocket), [`Shed`]; for HTTP the
//!   [`tower`] module's [`AdmissionLayer`](tower::AdmissionLayer) and
//!   [`AdmissionService`](tower::AdmissionService).
//! - Batching: [`Batcher`], [`BatchConfig`], [`BatchPolicy`], [`Batched`],
//!   [`BatchError`], [`BatchStats`], [`BatchCaller`], [`BatchedHandler`].
//! - Caching: [`ResultCache`], [`ActionCache`] ([`action_cache`]),
//!   [`CachedHandler`], [`CacheStats`], [`CacheKey`], [`KeySpec`],
//!   `ENTRY_OVERHEAD_BYTES`.
//! - Stale actions: [`StaleFilter`], [`Stale`], [`CommandMerger`], `STALE_REASON`.
//! - Digests: [`digest_bytes`], [`digest_hex`], [`digest_map`],
//!   [`record_action_digest`].

mod admission;
mod batch;
mod cache;
mod callers;
mod digest;
mod handler;
mod stale;
pub mod tower;

pub use admission::{Admission, AdmissionConfig, AdmissionStats, Admitted, AdmittedHandler, Shed};
pub use batch::{BatchConfig, BatchError, BatchPolicy, BatchStats, Batched, Batcher};
pub use cache::{
    action_cache, ActionCache, CacheStats, CachedHandler, ResultCache, ENTRY_OVERHEAD_BYTES,
};
pub use callers::BatchCaller;
pub use digest::{digest_bytes, digest_hex, digest_map, record_action_digest, CacheKey, KeySpec};
pub use handler::BatchedHandler;
pub use stale::{CommandMerger, Stale, StaleFilter, STALE_REASON};
