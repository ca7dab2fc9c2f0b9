//! `stagetrace demo` with mitigation knobs (`--clients`, `--batch`,
//! `--batch-wait-ms`, `--batch-fixed-window`, `--cache`, `--concurrency`, `--model-per-item-ms`):
//! N closed-loop robot clients against a loopback policy server whose model
//! costs a + b·batch on one simulated GPU, with the mitigations of
//! `stagetrace-mitigate` turned on one at a time. Every call carries an
//! `output_digest`, and a given (client, call) sends the same observation in
//! every run, so `stagetrace compare BEFORE AFTER` joins two runs by seq.
//! See `docs/mitigations.md`.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use stagetrace::StageLayer;
use stagetrace_analyze::analysis::Report;
use stagetrace_analyze::render;
use stagetrace_mitigate::{AdmissionConfig, BatchConfig, BatchPolicy, KeySpec};
use stagetrace_sim::{
    ms, Fleet, FleetStats, ServerConfig, SimModel, SimServer, SimServerStats, Spin,
};
use tracing_subscriber::layer::SubscriberExt;

use crate::args::DemoArgs;
use crate::error::{err, DemoError};
use crate::figures::analyze_run;
use crate::Outcome;

/// `--json`: throughput, the mitigations' counters, analyze's report.
#[derive(Serialize)]
struct ScenarioJson<'a> {
    clients: u64,
    calls_answered: u64,
    calls_failed: u64,
    wall_s: f64,
    throughput_per_s: f64,
    out: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    batch: Option<BatchJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache: Option<CacheJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    admission: Option<AdmissionJson>,
    report: Option<&'a Report>,
}

#[derive(Serialize)]
struct BatchJson<'a> {
    batches: u64,
    mean_size: f64,
    by_size: &'a [u64],
    /// Why batches stopped collecting: full, every client in, window.
    ran_full: u64,
    ran_all_in: u64,
    ran_at_window: u64,
    expired: u64,
    refused: u64,
}

#[derive(Serialize)]
struct CacheJson {
    hits: u64,
    misses: u64,
    entries: u64,
    weighted_bytes: u64,
    max_bytes: u64,
}

#[derive(Serialize)]
struct AdmissionJson {
    admitted: u64,
    shed_queue_full: u64,
    shed_timeout: u64,
}

/// Run the mitigation scenario into `out`; its report.
pub(crate) fn run(
    a: &DemoArgs,
    out: &Path,
    rt: &tokio::runtime::Runtime,
    stop: &Arc<AtomicBool>,
) -> Result<Outcome, DemoError> {
    let k = &a.mitigate;
    let (layer, guard) = StageLayer::builder()
        .output_dir(out)
        .build()
        .map_err(|e| err(e.to_string()))?;
    // The clients are tasks of `rt`, which runs on this thread.
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));

    let server = SimServer::start(server_config(a))
        .map_err(|e| err(format!("cannot start the policy server: {e}")))?;
    let fleet = Fleet {
        clients: k.clients.max(1),
        calls: a.calls,
        scenes: k.scenes,
    };
    let done = rt.block_on(fleet.run(server.addr(), Arc::clone(stop)));
    let server = server.stop();
    let summary = guard.finish();
    if let Some(e) = &done.first_error {
        eprintln!("stagetrace demo: a client stopped: {e}");
    }
    let report = analyze_run(out, &summary.run).ok();
    let text = report_text(a, out, fleet.clients, &done, &server, report.as_ref())?;
    let failed = (done.answered == 0 || done.first_error.is_some()).then(|| {
        err(match &done.first_error {
            Some(e) => format!("a client stopped before its last call: {e}"),
            None => "no call was answered".to_owned(),
        })
    });
    Ok(Outcome {
        report: text,
        failed,
    })
}

/// The policy server of the scenario: a model costing a + b·batch, behind
/// the mitigations the knobs turn on.
fn server_config(a: &DemoArgs) -> ServerConfig {
    let k = &a.mitigate;
    let model = SimModel::new(ms(a.model_ms))
        .per_item(ms(k.model_per_item_ms))
        .spin(Spin::Yielding);
    let mut config = ServerConfig::new(model)
        .addr(a.server_addr)
        .thread_name("demo-server");
    if k.batch > 1 {
        config = config.batch(
            BatchConfig::default()
                .max_batch(k.batch)
                .max_wait(Duration::from_millis(k.batch_wait_ms))
                .policy(if k.batch_fixed_window {
                    BatchPolicy::FixedWindow
                } else {
                    BatchPolicy::AllIn
                }),
        );
    }
    if k.cache > 0 {
        let key = if k.cache_prompt_only {
            KeySpec::Only(vec!["prompt".into()])
        } else {
            KeySpec::All
        };
        config = config.cache(k.cache << 20, key);
    }
    if k.concurrency > 0 {
        config = config.admission(
            AdmissionConfig::default()
                .max_concurrency(k.concurrency)
                .max_queue(k.queue)
                .queue_timeout(Duration::from_millis(k.queue_timeout_ms)),
        );
    }
    config
}

/// Analyze's tables and verdicts, then the throughput and the
/// mitigations' counters; with `--json`, all of it as one object.
fn report_text(
    a: &DemoArgs,
    out: &Path,
    clients: u64,
    done: &FleetStats,
    server: &SimServerStats,
    report: Option<&Report>,
) -> Result<String, DemoError> {
    if a.json {
        let doc = ScenarioJson::of(clients, done, server, out, report);
        let pretty = serde_json::to_string_pretty(&doc)
            .map_err(|e| err(format!("cannot encode the report as JSON: {e}")))?;
        return Ok(pretty + "\n");
    }
    let mut text = report.map(render::text).unwrap_or_default();
    for l in counter_lines(done, server, out) {
        text.push('\n');
        text.push_str(&l);
    }
    text.push('\n');
    Ok(text)
}

/// The throughput, the mitigations' counters and where the records are,
/// a line each.
fn counter_lines(done: &FleetStats, server: &SimServerStats, out: &Path) -> Vec<String> {
    let wall = done.wall.as_secs_f64();
    let mut lines = vec![format!(
        "{} calls answered, {} failed, in {wall:.2} s: {:.1} calls/s",
        done.answered,
        done.failed,
        done.throughput_per_s()
    )];
    if let Some(s) = &server.batch {
        lines.push(format!(
            "batcher: {} batches, mean size {:.2}, by size {:?}; ran {} full, {} with every client in, {} at the window; {} expired, {} refused",
            s.batches,
            s.mean_batch(),
            s.by_size,
            s.ran_full,
            s.ran_all_in,
            s.ran_at_window,
            s.expired,
            s.queue_full
        ));
    }
    if let Some(s) = &server.cache {
        lines.push(format!(
            "cache: {} hits, {} misses ({:.0}% hit), {} entries, {} of {} bytes",
            s.hits,
            s.misses,
            s.hit_ratio() * 100.0,
            s.entries,
            s.weighted_bytes,
            s.max_bytes
        ));
    }
    if let Some(s) = &server.admission {
        lines.push(format!(
            "admission: {} admitted, {} shed ({} queue full, {} queue timeout)",
            s.admitted,
            s.shed(),
            s.shed_queue_full,
            s.shed_timeout
        ));
    }
    lines.push(format!("records in {}", out.display()));
    lines
}

impl<'a> ScenarioJson<'a> {
    /// The run of `clients` clients as `--json` states it.
    fn of(
        clients: u64,
        done: &FleetStats,
        server: &'a SimServerStats,
        out: &Path,
        report: Option<&'a Report>,
    ) -> ScenarioJson<'a> {
        ScenarioJson {
            clients,
            calls_answered: done.answered,
            calls_failed: done.failed,
            wall_s: done.wall.as_secs_f64(),
            throughput_per_s: done.throughput_per_s(),
            out: out.display().to_string(),
            batch: server.batch.as_ref().map(|s| BatchJson {
                batches: s.batches,
                mean_size: s.mean_batch(),
                by_size: &s.by_size,
                ran_full: s.ran_full,
                ran_all_in: s.ran_all_in,
                ran_at_window: s.ran_at_window,
                expired: s.expired,
                refused: s.queue_full,
            }),
            cache: server.cache.as_ref().map(|s| CacheJson {
                hits: s.hits,
                misses: s.misses,
                entries: s.entries,
                weighted_bytes: s.weighted_bytes,
                max_bytes: s.max_bytes,
            }),
            admission: server.admission.as_ref().map(|s| AdmissionJson {
                admitted: s.admitted,
                shed_queue_full: s.shed_queue_full,
                shed_timeout: s.shed_timeout,
            }),
            report,
        }
    }
}
