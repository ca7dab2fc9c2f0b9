//! A run stopped mid-way (what Ctrl-C does) restores everything it changed:
//! load threads gone, proxy and server closed, a partial verdict written.

#![allow(clippy::unwrap_used)]

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stagetrace_experiment::{run, thread_names, Plan, RunOptions};

static SERIAL: Mutex<()> = Mutex::new(());

fn stop_mid_level(factor: &str, levels: &str, load_thread: &str) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let plan = Plan::from_toml(&format!(
        "[target]\nkind = \"demo\"\nhz = 20\nmodel_ms = 5\npayload_kb = 8\nwarmup_s = 0.5\n\
         [baseline]\nhold_s = 1.5\n[factor]\nkind = \"{factor}\"\nhold_s = 30\nlevels = {levels}\n"
    ))
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let seen_load = Arc::new(AtomicBool::new(false));
    // Stop once the first level's load threads are running.
    let watcher = {
        let (stop, seen_load) = (Arc::clone(&stop), Arc::clone(&seen_load));
        let name = load_thread.to_owned();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if thread_names().contains(&name) {
                    seen_load.store(true, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(800));
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            stop.store(true, Ordering::SeqCst);
        })
    };
    let started = Instant::now();
    let report = run(
        &plan,
        &RunOptions {
            out: dir.path().to_path_buf(),
            progress: false,
            stop,
        },
    )
    .unwrap();
    watcher.join().unwrap();
    assert!(seen_load.load(Ordering::SeqCst), "{load_thread} never ran");
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the stop was not prompt"
    );
    assert!(report.interrupted);
    assert!(report
        .stopped_because
        .as_deref()
        .unwrap()
        .contains("interrupted"));
    let names = thread_names();
    for gone in [
        load_thread,
        "stagetrace-proxy",
        "experiment-robot",
        "st-sampler",
    ] {
        assert!(
            !names.iter().any(|n| n == gone),
            "{gone} still running: {names:?}"
        );
    }
    // The proxy and the server no longer accept connections.
    for addr in report.addresses.values() {
        assert!(
            TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(1)).is_err(),
            "{addr} still accepts connections"
        );
    }
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
