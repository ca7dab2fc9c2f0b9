//! The bounds every timing encoding enforces on what a server sends: a
//! leaf module, so the header, the map and the host fields share them
//! without importing one another.

/// Longest `stagetrace-timing` / `Server-Timing` header accepted.
pub const MAX_TIMING_HEADER_LEN: usize = 1024;
/// Largest duration accepted from a server: one hour. Anything longer is a
/// broken clock or a hostile peer, not a control-loop call.
pub const MAX_DURATION_NS: u64 = 3_600_000_000_000;
/// Largest wall time accepted (`i64::MAX` ns, year 2262).
pub const MAX_UNIX_NS: u64 = i64::MAX as u64;
/// Largest batch size accepted from a server (`batch_size` / `batch=`).
pub const MAX_BATCH_SIZE: u32 = 1 << 20;
