//! Mitigations, checked with `stagetrace compare` on records written by the
//! real stage layer: a result cache keyed on the whole request keeps the
//! outputs (compare passes, and says so); a cache whose key leaves out the
//! image changes them (compare fails on outputs).

#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::time::Duration;

use stagetrace::StageLayer;
use stagetrace_mitigate::{action_cache, record_action_digest, CachedHandler, KeySpec};
use stagetrace_net::{
    msg::MsgMap, msg::NdArray, ws::HandlerError, ws::PolicyClient, ws::PolicyServer, InferTimer,
};
use support::{p, stagetrace, stderr, stdout};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

const CALLS: u64 = 40;
const SCENES: u64 = 4;

/// The policy: a deterministic function of the whole observation.
async fn model(obs: MsgMap, _t: InferTimer) -> Result<MsgMap, HandlerError> {
    tokio::time::sleep(Duration::from_millis(8)).await;
    let sum: u64 = obs.to_msgpack().iter().map(|&b| u64::from(b)).sum();
    let acts: Vec<f32> = (0..7).map(|i| (sum % 10_000) as f32 + i as f32).collect();
    Ok(MsgMap::new().with("actions", NdArray::from_f32(&acts, &[1, 7])))
}

/// One run of `CALLS` calls (cycling over `SCENES` camera images, one
/// prompt), records written to `dir` by the stage layer.
fn run(dir: &Path, cache: Option<KeySpec>) {
    let (layer, guard) = StageLayer::builder().output_dir(dir).build().unwrap();
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let server = match cache {
            None => PolicyServer::builder().spawn("127.0.0.1:0", model).await,
            Some(spec) => {
                let handler = CachedHandler::new(model, action_cache(16 << 20), spec);
                PolicyServer::builder().spawn("127.0.0.1:0", handler).await
            }
        }
        .unwrap();
        let mut client = PolicyClient::connect(&server.url()).await.unwrap();
        for seq in 0..CALLS {
            let image = NdArray::from_u8(vec![(seq % SCENES) as u8; 48 * 48 * 3], &[48, 48, 3]);
            let obs = MsgMap::new()
                .with("prompt", "put the cup on the plate")
                .with("image", image);
            async {
                let reply = client.infer(&obs).await.unwrap();
                record_action_digest(&tracing::Span::current(), &reply.action);
            }
            .instrument(tracing::info_span!("call", seq = seq))
            .await;
        }
        server.shutdown().await;
    });
    guard.finish();
}

#[test]
fn compare_passes_a_sound_cache_and_fails_one_whose_key_misses_the_image() {
    let tmp = tempfile::tempdir().unwrap();
    let (before, good, bad) = (
        tmp.path().join("before"),
        tmp.path().join("cached"),
        tmp.path().join("cached-bad-key"),
    );
    run(&before, None);
    run(&good, Some(KeySpec::All));
    run(&bad, Some(KeySpec::Only(vec!["prompt".into()])));

    let ok = stagetrace(&["compare", p(&before), p(&good)]);
    let text = stdout(&ok);
    assert!(ok.status.success(), "{text}\n{}", stderr(&ok));
    assert!(
        text.contains(&format!(
            "the policy's outputs were identical for all {CALLS} calls"
        )),
        "{text}"
    );

    let fail = stagetrace(&["compare", p(&before), p(&bad)]);
    let text = stdout(&fail);
    assert_eq!(fail.status.code(), Some(1), "{text}\n{}", stderr(&fail));
    // Every scene but the first got the first scene's action.
    let changed = CALLS - CALLS / SCENES;
    assert!(
        text.contains(&format!("OUTPUTS CHANGED: {changed} of {CALLS} calls")),
        "{text}"
    );
    assert!(stderr(&fail).contains("FAILED"), "{}", stderr(&fail));
}
