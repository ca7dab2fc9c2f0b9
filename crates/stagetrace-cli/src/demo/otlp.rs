//! `--otlp`: the demo's robot client and policy server exported as two OTLP
//! services, and its gateway and remote executor as two more when asked.

use std::sync::Arc;
use std::time::Duration;

use stagetrace::record::ServerRecord;
use stagetrace_net::RequestHook;
use stagetrace_otlp::{OtlpExporter, OtlpMetrics, ShutdownDeadline, TailSampling};

use super::error::{err, DemoError};

/// The robot client's service name, for traces and metrics.
const CLIENT_SERVICE: &str = "stagetrace-demo-client";

/// How often the demo exports its metrics when `OTEL_METRIC_EXPORT_INTERVAL`
/// is not set.
const DEMO_EXPORT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// `--metrics`: the robot's stage histograms and counters. An empty
/// `endpoint` leaves it to the OTEL_* variables or the default.
pub(super) fn start_metrics(endpoint: &str, robot: Option<&str>) -> Result<OtlpMetrics, DemoError> {
    let mut b = OtlpMetrics::builder().service_name(CLIENT_SERVICE);
    if !endpoint.trim().is_empty() {
        b = b.endpoint(endpoint);
    }
    if let Some(robot) = robot {
        b = b.resource_attribute("service.instance.id", robot);
    }
    // A demo lasts seconds to minutes: at the SDK's default 60 s a
    // Prometheus stays empty until the demo exits. Every 5 s, unless the
    // environment says otherwise.
    if std::env::var_os("OTEL_METRIC_EXPORT_INTERVAL").is_none() {
        b = b.export_interval(DEMO_EXPORT_INTERVAL);
    }
    b.build().map_err(|e| err(format!("--metrics: {e}")))
}

/// Sends what the metrics pipeline holds and says on stderr how it went.
pub(super) fn finish_metrics(metrics: &OtlpMetrics) {
    let stats = metrics.shutdown();
    eprintln!(
        "{CLIENT_SERVICE} metrics -> {}: {stats}",
        metrics.endpoint()
    );
}

/// `--otlp`: one exporter for the robot client, one for the policy server,
/// and one each for the gateway and the executor when the demo has them:
/// each a service of its own in the same trace.
pub(super) struct DemoOtlp {
    pub(super) client: OtlpExporter,
    server: OtlpExporter,
    gateway: Option<OtlpExporter>,
    executor: Option<OtlpExporter>,
}

/// Which services the demo runs besides the robot and the policy server.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Services {
    pub(super) gateway: bool,
    pub(super) executor: bool,
}

impl DemoOtlp {
    /// An empty `endpoint` leaves it to OTEL_EXPORTER_OTLP_ENDPOINT or the
    /// default. Flushing at the end waits at most `shutdown` for both
    /// exporters together: they share one deadline, fixed when the layer
    /// flushes the client's exporter.
    /// `robot` names the process (`service.instance.id`); `tail_sample`
    /// exports only the client calls worth a look.
    pub(super) fn start(
        endpoint: &str,
        shutdown: Duration,
        robot: Option<&str>,
        tail_sample: bool,
        services: Services,
    ) -> Result<DemoOtlp, DemoError> {
        let deadline = ShutdownDeadline::new();
        let build = |service: &str, sample: bool| {
            let mut b = OtlpExporter::builder()
                .endpoint(endpoint)
                .service_name(service)
                .shutdown_timeout(shutdown)
                .shutdown_deadline(&deadline);
            if let Some(robot) = robot {
                b = b.resource_attribute("service.instance.id", robot);
            }
            if sample {
                b = b.tail_sampling(TailSampling::new());
            }
            b.build().map_err(|e| err(format!("--otlp: {e}")))
        };
        Ok(DemoOtlp {
            client: build(CLIENT_SERVICE, tail_sample)?,
            server: build("stagetrace-demo-server", false)?,
            gateway: services
                .gateway
                .then(|| build("stagetrace-demo-gateway", false))
                .transpose()?,
            executor: services
                .executor
                .then(|| build("stagetrace-demo-executor", false))
                .transpose()?,
        })
    }

    pub(super) fn server_hook(&self) -> RequestHook {
        hook_of(&self.server)
    }

    /// The gateway's records to its exporter (`None`: no gateway).
    pub(super) fn gateway_hook(&self) -> Option<RequestHook> {
        self.gateway.as_ref().map(hook_of)
    }

    /// The executor's records to its exporter (`None`: no remote executor).
    pub(super) fn executor_hook(&self) -> Option<RequestHook> {
        self.executor.as_ref().map(hook_of)
    }

    /// Sends what is still queued within what is left of the shutdown
    /// bound and says on stderr what went where: every record, exported,
    /// dropped, failed or abandoned.
    pub(super) fn finish(&self) {
        let services = [Some(&self.client), Some(&self.server)]
            .into_iter()
            .chain([self.gateway.as_ref(), self.executor.as_ref()]);
        for exporter in services.flatten() {
            let stats = exporter.shutdown();
            eprintln!(
                "{} -> {}: {stats}",
                exporter.service_name(),
                exporter.endpoint(),
            );
            if let Some(sampled) = exporter.sample_stats() {
                eprintln!("{}: {sampled}", exporter.service_name());
            }
        }
    }
}

/// A service's request records to `exporter`.
fn hook_of(exporter: &OtlpExporter) -> RequestHook {
    let exporter = exporter.clone();
    Arc::new(move |rec: &ServerRecord| {
        exporter.export_server(rec);
    })
}
