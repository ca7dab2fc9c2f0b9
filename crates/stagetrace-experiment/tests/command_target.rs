//! The user's own client as the target: a command whose records directory
//! the experiment reads, with the proxy between it and the user's server.
//! The client here is this test binary itself, relaunched in client mode.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stagetrace::{Rotation, StageLayer};
use stagetrace_experiment::{plan::Plan, run, RunOptions};
use stagetrace_net::{msg::MsgMap, msg::NdArray, ws::PolicyClient, ws::PolicyServer, InferTimer};
use stagetrace_test_support::timing;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

const RECORDS: &str = "STAGETRACE_TEST_CLIENT_RECORDS";

/// Client mode: what a user's robot client does, instrumented with the
/// stage layer, calling the server through `STAGETRACE_PROXY_ADDR` until
/// it is stopped. Launched by `command_target_net_ramp_names_uplink`.
#[test]
#[ignore = "the client process of command_target_net_ramp_names_uplink"]
fn client_main() {
    let records = std::env::var(RECORDS).unwrap();
    let addr = std::env::var("STAGETRACE_PROXY_ADDR").unwrap();
    let kb: usize = std::env::var("FRAME_KB").map_or(8, |v| v.parse().unwrap());
    std::fs::write(
        format!("{records}/client.pid"),
        std::process::id().to_string(),
    )
    .unwrap();
    let (layer, _guard) = StageLayer::builder()
        .output_dir(&records)
        .rotation(Rotation::NEVER)
        .target_hz(20.0)
        .build()
        .unwrap();
    tracing_subscriber::registry().with(layer).init();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = PolicyClient::connect(&format!("ws://{addr}"))
            .await
            .unwrap();
        let start = Instant::now();
        for seq in 0u64.. {
            tokio::time::sleep_until((start + Duration::from_millis(50 * seq)).into()).await;
            let call = tracing::info_span!("call");
            async {
                let frame = {
                    let _c = tracing::info_span!("capture").entered();
                    std::thread::sleep(Duration::from_millis(1));
                    NdArray::from_u8(vec![7; kb * 1024], &[kb as u64 * 1024])
                };
                let obs = MsgMap::new().with("observation/image", frame);
                client.infer(&obs).await.unwrap();
                let _d = tracing::info_span!("dispatch").entered();
                std::thread::sleep(Duration::from_micros(500));
            }
            .instrument(call)
            .await;
        }
    });
}

#[test]
fn command_target_net_ramp_names_uplink() {
    // The user's server.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = rt
        .block_on(PolicyServer::builder().spawn(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            |_obs: MsgMap, _t: InferTimer| async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(MsgMap::new().with("actions", NdArray::from_f32(&[0.0; 7], &[1, 7])))
            },
        ))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("app-records");
    std::fs::create_dir_all(&records).unwrap();
    // An older run's records in the same directory are not read.
    std::fs::write(
        records.join("records-old.jsonl"),
        "{\"seq\":0,\"ts_unix_ms\":1,\"kind\":\"call\",\"e2e_ms\":999}\n",
    )
    .unwrap();
    let exe = std::env::current_exe().unwrap();
    let plan = Plan::from_toml(&format!(
        r#"
        [target]
        kind = "command"
        command = [{exe:?}, "client_main", "--exact", "--ignored", "--nocapture"]
        env = {{ {RECORDS} = {records:?} }}
        records_dir = {records:?}
        upstream = "{}"
        hz = 20
        warmup_s = 1.5
        [baseline]
        hold_s = 3
        [factor]
        kind = "net"
        direction = "uplink"
        hold_s = 3
        levels = [10]
        "#,
        server.local_addr()
    ))
    .unwrap();
    let out = dir.path().join("run");
    let report = run(
        &plan,
        &RunOptions {
            out: out.clone(),
            progress: false,
            stop: Arc::new(AtomicBool::new(false)),
        },
    )
    .unwrap();
    eprintln!("{}", stagetrace_experiment::text(&report));
    assert_eq!(
        report.verdict.first_stage,
        Some("uplink"),
        "{}",
        report.verdict.summary
    );
    // An uplink-only delay is an asymmetric path: once the clock filter
    // re-estimates the offset, part of it may show in downlink (asymmetry
    // cannot be measured from two clocks), but uplink moves first and most.
    let shift = |s: &str| report.levels[0].components[s].p50_ratio.unwrap().ratio;
    timing::error(
        "downlink / uplink p50 ratio",
        shift("downlink") / shift("uplink"),
        1.0,
    );
    assert!(shift("uplink") > shift("downlink"));
    assert!(report
        .phases
        .iter()
        .all(|p| p.phase == "warmup" || p.calls >= 30));
    assert!(
        report.baseline["e2e"][3] < 999.0,
        "the old run's record was read"
    );
    // The client was stopped with the run.
    let pid = std::fs::read_to_string(records.join("client.pid")).unwrap();
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "client {pid} still running"
    );
    rt.block_on(server.shutdown());
}
