//! A run stopped mid-way (what Ctrl-C does) restores everything it changed:
//! load threads gone, proxy and server closed, a partial verdict written.

#![allow(clippy::unwrap_used)]

use std::sync::Mutex;
use std::time::Duration;

use stagetrace_experiment::plan::Plan;

mod support;

static SERIAL: Mutex<()> = Mutex::new(());

fn stop_mid_level(factor: &str, levels: &str, load_thread: &str) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let plan = Plan::from_toml(&format!(
        "[target]\nkind = \"demo\"\nhz = 20\nmodel_ms = 5\npayload_kb = 8\nwarmup_s = 0.5\n\
         [baseline]\nhold_s = 1.5\n[factor]\nkind = \"{factor}\"\nhold_s = 30\nlevels = {levels}\n"
    ))
    .unwrap();
    // Stop once the first level's load threads are running.
    let stopped = support::run_until_thread(&plan, dir.path(), load_thread, || {});
    let report = stopped.report;
    assert!(stopped.seen, "{load_thread} never ran");
    assert!(
        stopped.took < Duration::from_secs(25),
        "the stop was not prompt"
    );
    assert!(report.interrupted);
    assert!(report
        .stopped_because
        .as_deref()
        .unwrap()
        .contains("interrupted"));
    // No thread of the run is left; the proxy and the server no longer
    // accept connections.
    support::assert_gone(
        &report,
        &[
            load_thread,
            "stagetrace-proxy",
            "experiment-robot",
            "st-sampler",
        ],
    );
    // The partial report is on disk and says so.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("experiment.json")).unwrap())
            .unwrap();
    assert_eq!(json["interrupted"], true);
    assert!(!report.restored.is_empty(), "nothing restored");
    if factor == "cpu" {
        // Both burners of level 1 were pinned to core 0 as asked.
        assert_eq!(report.counters["burners_pinned"], 2);
    }
}

#[test]
fn stopping_a_cpu_ramp_mid_level_stops_the_burners() {
    stop_mid_level(
        "cpu",
        "[{ threads = 2, duty = 0.5, cores = [0] }, 4]",
        "st-burner",
    );
}

#[test]
fn stopping_an_infer_ramp_mid_level_stops_the_replayed_load() {
    stop_mid_level("infer", "[2, 4]", "st-infer-load");
}
