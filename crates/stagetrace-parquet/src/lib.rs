//! Parquet output of stagetrace records, partitioned by robot and day, and
//! its reader.
//!
//! # What it is
//!
//! [`ParquetSink`] is a [`stagetrace::sink::RecordSink`]: registered on the
//! layer's builder, it writes every call as one row of a Parquet file under
//! `robot=<robot>/date=<YYYY-MM-DD>/part-<run>-<n>.parquet`, which DuckDB,
//! polars, pandas, Spark and ClickHouse read as one partitioned table. The
//! columns are the JSON record's fields (the schema table of
//! `stagetrace-schema`, [`arrow_schema()`]): the same names, units and
//! absences (null where the JSON record has no key). [`read`] gives the
//! files back as the JSON lines of the same calls, for `stagetrace report`.
//!
//! # Usage
//!
//! ```
//! use stagetrace::StageLayer;
//! use stagetrace_parquet::ParquetSink;
//! use tracing_subscriber::prelude::*;
//!
//! let dir = tempfile::tempdir()?;
//! let sink = ParquetSink::builder(dir.path()).robot("arm-3").build()?;
//! let (stages, guard) = StageLayer::builder().sink(Box::new(sink)).build()?;
//! let subscriber = tracing_subscriber::registry().with(stages);
//! tracing::subscriber::with_default(subscriber, || {
//!     let _call = tracing::info_span!("call").entered();
//!     tracing::info_span!("capture").in_scope(|| { /* grab frames */ });
//! });
//! guard.finish();
//!
//! // Or with the defaults (robot: STAGETRACE_ROBOT, else the host name):
//! use stagetrace_parquet::ParquetBuilderExt;
//! let (stages, guard) = StageLayer::builder().parquet(dir.path())?.build()?;
//! let _subscriber = tracing_subscriber::registry().with(stages);
//! guard.finish();
//! // robot=arm-3/date=<today>/part-<run>-00000.parquet
//! let listing = stagetrace_parquet::read::list(dir.path(), &Default::default())?;
//! assert_eq!(listing.files.len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The sink runs on the layer's worker thread: the app thread never waits
//! for it. Its losses (`parquet.dropped`, `parquet.write_errors`) are in
//! every summary window. A crash loses the file still open (at most
//! `max_file_age` of calls, 5 minutes by default), which stays behind as a
//! hidden `.part-….parquet.inprogress` file that readers skip and count.
//!
//! # Public API
//!
//! At the root, writing:
//!
//! - [`ParquetSink`]: the sink; [`ParquetSink::new`] with the defaults, or
//!   [`ParquetSink::builder`] for [`ParquetOptions`] (robot, run, row-group
//!   size, file age and size limits).
//! - [`ParquetBuilderExt`]: adds [`parquet`](ParquetBuilderExt::parquet) to
//!   the layer's builder, a sink with the defaults in one call.
//! - [`SinkError`]: why a sink could not start.
//! - [`arrow_schema()`]: the Arrow schema of every file written.
//! - [`file_bytes`]: one Parquet file of given records in memory, written as
//!   the sink writes (for tests and tools).
//! - [`date_string`], [`parse_date`], [`partition_value`]: the partition
//!   values, a day as `YYYY-MM-DD` and back, and a robot name made safe.
//!
//! [`read`]: reading records back:
//!
//! - [`read::list`]: the finished files under a path that a
//!   [`read::Selection`] (robots, time range) keeps, as a [`read::Listing`].
//! - [`read::open`], [`read::open_reader`]: one file (or bytes in memory) as
//!   [`read::JsonLines`], a reader of the calls as JSON lines.
//! - [`read::load_part`], [`read::load_part_reader`]: one file's columns straight into the analysis's
//!   dataset (a `stagetrace_analyze::load::FilePart`), row groups outside
//!   the time range skipped; [`read::PartError`]: damaged, or a corrupt
//!   record. [`read::group_rows`] and [`read::load_part_groups`]: a big
//!   file a few row groups at a time.
//! - [`read::is_parquet`]: whether a path holds Parquet records.
//! - [`read::verify`]: decode a whole file and check its columns.
//! - [`read::ReadError`]: why records could not be read.

mod builder_ext;
mod cells;
mod file;
mod layout;
mod options;
pub mod read;
mod rows;
#[doc(hidden)]
pub mod sample;
mod schema;
mod sink;

pub use builder_ext::ParquetBuilderExt;
pub use file::file_bytes;
pub use layout::{date_string, parse_date, partition_value};
pub use options::ParquetOptions;
pub use schema::arrow_schema;
pub use sink::{ParquetSink, SinkError};
