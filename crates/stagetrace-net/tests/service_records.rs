//! Services' own records (OTLP): the gateway ([`Relay`]) and the remote executor
//! hand their exporters a record of their own, as the policy server does:
//! the context the request came with, what kind of service they are and, for
//! the gateway, the parent id it sent on and when it forwarded and had the
//! reply. The robot's `dispatch` span is the parent the executor is told.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use stagetrace::{record::ServerRecord, record::ServiceRole};
use stagetrace_net::executor::{ExecutorClient, ExecutorServer};
use stagetrace_net::{msg::MsgMap, msg::NdArray, ws::PolicyClient, ws::PolicyServer, ws::Relay};
use stagetrace_test_support::{rt, Observed};
use tracing::Instrument;

type Seen = Arc<Mutex<Vec<ServerRecord>>>;

fn keep(seen: &Seen) -> impl Fn(&ServerRecord) + Send + Sync + 'static {
    let seen = Arc::clone(seen);
    move |r| seen.lock().unwrap().push(r.clone())
}

#[test]
fn the_gateways_record_names_the_parent_it_sent_and_its_forward_stamps() {
    let (server_seen, relay_seen): (Seen, Seen) = Default::default();
    let mut obs = Observed::new();
    rt().block_on(async {
        let server = PolicyServer::builder()
            .on_request(keep(&server_seen))
            .spawn("127.0.0.1:0", |_req: MsgMap, _timer| async move {
                tokio::time::sleep(Duration::from_millis(3)).await;
                Ok(MsgMap::new().with("actions", NdArray::from_f32(&[0.5; 14], &[2, 7])))
            })
            .await
            .unwrap();
        let relay = Relay::builder()
            .on_request(keep(&relay_seen))
            .spawn("127.0.0.1:0", &server.url())
            .await
            .unwrap();
        let mut client = PolicyClient::connect(&relay.url()).await.unwrap();
        for seq in 0..3u64 {
            let req = MsgMap::new().with("state", NdArray::from_f32(&[0.1; 7], &[7]));
            client
                .infer(&req)
                .instrument(tracing::info_span!("call", seq = seq))
                .await
                .unwrap();
        }
        client.close().await;
        relay.shutdown().await;
        server.shutdown().await;
    });
    let records = obs.finish();
    let (server_seen, relay_seen) = (server_seen.lock().unwrap(), relay_seen.lock().unwrap());
    assert_eq!(
        (records.len(), relay_seen.len(), server_seen.len()),
        (3, 3, 3)
    );
    for ((rec, relay), server) in records
        .iter()
        .zip(relay_seen.iter())
        .zip(server_seen.iter())
    {
        assert_eq!(server.role, ServiceRole::PolicyServer);
        assert_eq!(server.forward, None);
        assert_eq!(relay.role, ServiceRole::Relay);
        // The robot's transport span is the gateway's parent ...
        let incoming = relay.trace_parent.unwrap();
        assert_eq!(
            Some(incoming.trace_id_hex()),
            rec.trace_id,
            "the gateway continues the robot's trace"
        );
        assert_eq!(Some(incoming.parent_id), rec.timeline.transport_span_id);
        // ... and the parent id it sent on is the one the server got.
        let sent_on = server.trace_parent.unwrap();
        assert_eq!(sent_on.trace_id, incoming.trace_id);
        let f = relay.forward.unwrap();
        assert_eq!(f.span_id, Some(sent_on.parent_id));
        assert_ne!(sent_on.parent_id, incoming.parent_id);
        // Its stamps: forwarded, then the reply (after the server's 3 ms),
        // then its own total.
        let total = relay.timing.total_ns.unwrap();
        assert!(f.forward_ns <= f.reply_ns && f.reply_ns <= total, "{f:?}");
        assert!(
            f.reply_ns - f.forward_ns >= server.timing.total_ns.unwrap(),
            "{f:?} vs {:?}",
            server.timing
        );
        // The same own time the robot's record shows for this hop.
        let own = f.forward_ns + (total - f.reply_ns);
        assert_eq!(rec.hops[0].relay_ns, Some(own as i64));
    }
}

#[test]
fn the_executor_hears_the_robots_dispatch_span_as_its_parent() {
    let seen: Seen = Arc::default();
    let mut obs = Observed::new();
    rt().block_on(async {
        let (server, mut chunks) = ExecutorServer::builder()
            .on_request(keep(&seen))
            .spawn("127.0.0.1:0")
            .await
            .unwrap();
        let controller = tokio::spawn(async move {
            while let Some(chunk) = chunks.recv().await {
                chunk.ticket.started();
            }
        });
        let mut client = ExecutorClient::connect(&server.url()).await.unwrap();
        for seq in 0..3u64 {
            let chunk = MsgMap::new().with("actions", NdArray::from_f32(&[0.25; 14], &[2, 7]));
            // The dispatch span opened inside the call.
            async {
                let dispatch = tracing::info_span!("dispatch");
                client.dispatch(&chunk).instrument(dispatch).await.unwrap();
            }
            .instrument(tracing::info_span!("call", seq = seq))
            .await;
        }
        client.close().await;
        server.shutdown().await;
        controller.await.unwrap();
    });
    let records = obs.finish();
    let seen = seen.lock().unwrap();
    assert_eq!((records.len(), seen.len()), (3, 3));
    for (rec, exec) in records.iter().zip(seen.iter()) {
        assert_eq!(exec.role, ServiceRole::Executor);
        let tp = exec.trace_parent.unwrap();
        assert_eq!(Some(tp.trace_id_hex()), rec.trace_id);
        let dispatch = rec.timeline.dispatch_span_id.expect("a dispatch span id");
        assert_eq!(tp.parent_id, dispatch, "the dispatch span, not the call");
        assert_ne!(Some(dispatch), rec.timeline.call_span_id);
        assert_eq!(
            exec.timing.queue_ns.map(|ns| ns as i64),
            rec.get(stagetrace_schema::Figure::ExecWait)
        );
    }
}
