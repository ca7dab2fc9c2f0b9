//! Must show: repeated inputs hit the cache (infer drops to near zero, each
//! record says hit or miss) and the output digests match the uncached run; a
//! key that leaves out part of the input changes the outputs. (The memory
//! bound: `cache_memory.rs`.)

#![allow(clippy::unwrap_used)]

mod support;

use stagetrace_schema::Figure;
use std::time::Duration;

use stagetrace::{record::CacheOutcome, record::CallRecord};
use stagetrace_mitigate::{action_cache, record_action_digest, CacheStats, CachedHandler, KeySpec};
use stagetrace_net::{msg::MsgMap, ws::PolicyClient, ws::PolicyServer, InferTimer};
use stagetrace_test_support::{quantile, rt, timing, Observed};
use support::{digests, observation, policy};
use tracing::Instrument;

const CALLS: u64 = 24;
const SCENES: u64 = 4;
const MODEL_MS: u64 = 15;

async fn model(o: MsgMap, _t: InferTimer) -> Result<MsgMap, stagetrace_net::ws::HandlerError> {
    tokio::time::sleep(Duration::from_millis(MODEL_MS)).await;
    Ok(policy(&o))
}

/// One client, `CALLS` calls cycling over `SCENES` observations (same prompt).
fn run(cache: Option<KeySpec>) -> (Vec<CallRecord>, Option<CacheStats>) {
    let mut obs = Observed::new();
    let stats = rt().block_on(async {
        let handle_cache = action_cache(8 << 20);
        let server = match &cache {
            None => PolicyServer::builder().spawn("127.0.0.1:0", model).await,
            Some(spec) => {
                let h = CachedHandler::new(model, handle_cache.clone(), spec.clone());
                PolicyServer::builder().spawn("127.0.0.1:0", h).await
            }
        }
        .unwrap();
        let mut client = PolicyClient::connect(&server.url()).await.unwrap();
        for seq in 0..CALLS {
            let call = tracing::info_span!("call", seq = seq);
            let o = observation("pick up the cup", (seq % SCENES) as u8);
            async {
                let r = client.infer(&o).await.unwrap();
                record_action_digest(&tracing::Span::current(), &r.action);
            }
            .instrument(call)
            .await;
        }
        server.shutdown().await;
        handle_cache.run_pending_tasks();
        cache.map(|_| handle_cache.stats())
    });
    (obs.finish(), stats)
}

/// Each call's `cache` field, by seq.
fn outcomes(recs: &[CallRecord]) -> Vec<Option<CacheOutcome>> {
    assert!(recs.windows(2).all(|w| w[0].seq < w[1].seq));
    recs.iter().map(|r| r.cache).collect()
}

#[test]
fn repeated_inputs_hit_the_cache_with_unchanged_outputs() {
    let (plain, _) = run(None);
    let (cached, stats) = run(Some(KeySpec::All));
    let stats = stats.unwrap();
    assert_eq!(
        (stats.misses, stats.hits),
        (SCENES, CALLS - SCENES),
        "{stats:?}"
    );
    assert_eq!(stats.entries, SCENES);
    // On the records: the first pass over the scenes misses, the rest hit;
    // without a cache the field is absent.
    let want: Vec<_> = (0..CALLS)
        .map(|seq| {
            Some(if seq < SCENES {
                CacheOutcome::Miss
            } else {
                CacheOutcome::Hit
            })
        })
        .collect();
    assert_eq!(outcomes(&cached), want);
    assert_eq!(outcomes(&plain), vec![None; CALLS as usize]);

    let infer = |recs: &[CallRecord], first: bool| -> Vec<f64> {
        recs.iter()
            .filter(|r| (r.seq < SCENES) == first)
            .map(|r| r.ms(Figure::Infer).unwrap())
            .collect()
    };
    let plain_infer = quantile(&infer(&plain, false), 0.5);
    let miss_infer = quantile(&infer(&cached, true), 0.5);
    let hit_infer = infer(&cached, false);
    eprintln!(
        "infer p50: uncached {plain_infer:.2} ms, cache miss {miss_infer:.2} ms, cache hit {:.3} ms (max {:.3})",
        quantile(&hit_infer, 0.5),
        quantile(&hit_infer, 1.0)
    );
    assert!(plain_infer >= MODEL_MS as f64 * 0.9);
    assert!(miss_infer >= MODEL_MS as f64 * 0.9);
    // A hit skips the model: near zero (well under a tenth of it).
    timing::error(
        "cache hit infer p90 (ms)",
        quantile(&hit_infer, 0.9),
        MODEL_MS as f64 / 10.0,
    );
    assert!(
        quantile(&hit_infer, 0.9) < MODEL_MS as f64 / 10.0,
        "{hit_infer:?}"
    );
    assert_eq!(digests(&plain), digests(&cached));
}

#[test]
fn a_key_that_leaves_out_the_image_changes_the_outputs() {
    let (plain, _) = run(None);
    // The prompt never changes: every scene gets the first scene's answer.
    let (bad, stats) = run(Some(KeySpec::Only(vec!["prompt".into()])));
    let stats = stats.unwrap();
    assert_eq!((stats.misses, stats.hits), (1, CALLS - 1));
    let want: Vec<_> = (0..CALLS)
        .map(|seq| Some(CacheOutcome::from_hit(seq > 0)))
        .collect();
    assert_eq!(outcomes(&bad), want);
    let (p, b) = (digests(&plain), digests(&bad));
    let changed = p.iter().filter(|(k, v)| b.get(k) != Some(v)).count() as u64;
    // Scenes 1..SCENES-1 got scene 0's action.
    assert_eq!(changed, CALLS - CALLS / SCENES);
}
