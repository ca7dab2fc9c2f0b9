//! `--otlp`: the demo's client and server exported as two OTLP services.

use std::sync::Arc;
use std::time::Duration;

use stagetrace::ServerRecord;
use stagetrace_net::RequestHook;
use stagetrace_otlp::{OtlpExporter, ShutdownDeadline};

use super::args::{err, DemoError};

/// `--otlp`: one exporter for the robot client, one for the policy server.
pub(super) struct DemoOtlp {
    pub(super) client: OtlpExporter,
    server: OtlpExporter,
}

impl DemoOtlp {
    /// An empty `endpoint` leaves it to OTEL_EXPORTER_OTLP_ENDPOINT or the
    /// default. Flushing at the end waits at most `shutdown` for both
    /// exporters together: they share one deadline, fixed when the layer
    /// flushes the client's exporter.
    pub(super) fn start(endpoint: &str, shutdown: Duration) -> Result<DemoOtlp, DemoError> {
        let deadline = ShutdownDeadline::new();
        let build = |service: &str| {
            OtlpExporter::builder()
                .endpoint(endpoint)
                .service_name(service)
                .shutdown_timeout(shutdown)
                .shutdown_deadline(&deadline)
                .build()
                .map_err(|e| err(format!("--otlp: {e}")))
        };
        Ok(DemoOtlp {
            client: build("stagetrace-demo-client")?,
            server: build("stagetrace-demo-server")?,
        })
    }

    pub(super) fn server_hook(&self) -> RequestHook {
        let server = self.server.clone();
        Arc::new(move |rec: &ServerRecord| {
            server.export_server(rec);
        })
    }

    /// Sends what is still queued within what is left of the shutdown
    /// bound and says on stderr what went where: every record, exported,
    /// dropped, failed or abandoned.
    pub(super) fn finish(&self) {
        for exporter in [&self.client, &self.server] {
            let stats = exporter.shutdown();
            eprintln!(
                "{} -> {}: {stats}",
                exporter.service_name(),
                exporter.endpoint(),
            );
        }
    }
}
