//! docs/jaeger.md section 2, as written: a robot client exporting every call
//! to an OTLP collector. `examples/tests/otlp_no_collector.rs` runs it with
//! nothing listening and reads the warning it logs, and checks that the
//! docs' block is this file's code.
//!
//! ```sh
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 cargo run -p examples --example otlp_client
//! ```

use std::time::Duration;

use stagetrace::StageLayer;
use stagetrace_otlp::OtlpExporter;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let otlp = OtlpExporter::builder()
        .service_name("robot-client") // endpoint: OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318
        .build()?;
    let (stages, _guard) = StageLayer::builder().sink(Box::new(otlp.clone())).build()?;
    tracing_subscriber::registry()
        .with(stages)
        // Your log. stagetrace warns there when calls did not reach the collector.
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(LevelFilter::INFO),
        )
        .init();

    // The control loop: a `call` span per cycle, stage spans inside (docs/stages.md).
    for seq in 0..20u64 {
        let _call = tracing::info_span!("call", kind = "infer", seq).entered();
        tracing::info_span!("capture").in_scope(|| std::thread::sleep(Duration::from_millis(2)));
        tracing::info_span!("infer").in_scope(|| std::thread::sleep(Duration::from_millis(5)));
        tracing::info_span!("dispatch").in_scope(|| std::thread::sleep(Duration::from_millis(1)));
    }
    Ok(())
    // `_guard` drops here: the last calls are sent (within 3 s), and calls
    // the collector never got are one warning in your log.
}
