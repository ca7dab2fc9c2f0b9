//! The app's own log, kept in memory: what the library said through the
//! app's `tracing` (a loss report is one warning there, said once), for a
//! test to read back.

use std::io::{self, Write};
use std::sync::{Arc, Mutex, PoisonError};

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// What the app's `fmt` layer wrote. Clones share the text.
#[derive(Clone, Debug, Default)]
pub struct AppLog(Arc<Mutex<Vec<u8>>>);

impl AppLog {
    /// The app's `fmt` layer writing here, at INFO as an app's would (an
    /// HTTP client's own debug lines stay out), without colours.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        tracing_subscriber::fmt::layer()
            .with_writer(self.clone())
            .with_ansi(false)
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO)
    }

    /// The app's subscriber when it has no stage layer: its `fmt` layer
    /// only.
    pub fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync {
        tracing_subscriber::registry().with(self.layer())
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }

    /// The lines at WARN level so far.
    pub fn warnings(&self) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains(" WARN "))
            .map(str::to_owned)
            .collect()
    }
}

impl Write for AppLog {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for AppLog {
    type Writer = AppLog;

    fn make_writer(&'a self) -> AppLog {
        self.clone()
    }
}
