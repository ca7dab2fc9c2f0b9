//! `.parquet(dir)` on the layer's builder: the sink with its defaults, in
//! one call, without the core knowing Arrow.

use std::path::PathBuf;

use stagetrace::StageLayerBuilder;

use crate::{ParquetSink, SinkError};

/// Adds [`parquet`](Self::parquet) to [`StageLayerBuilder`].
pub trait ParquetBuilderExt: Sized {
    /// Also write every record as Parquet under `dir`
    /// (`robot=<robot>/date=<day>/…`, robot from `STAGETRACE_ROBOT` or the
    /// host name); [`ParquetSink::builder`] sets the rest.
    fn parquet(self, dir: impl Into<PathBuf>) -> Result<Self, SinkError>;
}

impl ParquetBuilderExt for StageLayerBuilder {
    fn parquet(self, dir: impl Into<PathBuf>) -> Result<Self, SinkError> {
        Ok(self.sink(Box::new(ParquetSink::new(dir)?)))
    }
}
