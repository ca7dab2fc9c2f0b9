//! `--otlp`: the demo's client and server exported as two OTLP services.

use std::sync::Arc;
use std::time::Duration;

use stagetrace::ServerRecord;
use stagetrace_net::RequestHook;
use stagetrace_otlp::OtlpExporter;

use super::args::{err, DemoError};

/// `--otlp`: one exporter for the robot client, one for the policy server.
pub(super) struct DemoOtlp {
    pub(super) client: OtlpExporter,
    server: OtlpExporter,
}

impl DemoOtlp {
    /// An empty `endpoint` leaves it to OTEL_EXPORTER_OTLP_ENDPOINT or the default.
    pub(super) fn start(endpoint: &str) -> Result<DemoOtlp, DemoError> {
        let build = |service: &str| {
            OtlpExporter::builder()
                .endpoint(endpoint)
                .service_name(service)
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

    /// Sends what is still queued and says on stderr what went where.
    pub(super) fn finish(&self) {
        for exporter in [&self.client, &self.server] {
            exporter.flush(Duration::from_secs(5));
            eprintln!(
                "{} -> {}: {}",
                exporter.service_name(),
                exporter.endpoint(),
                exporter.stats()
            );
        }
    }
}
