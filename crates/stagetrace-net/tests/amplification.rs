//! A message of one-byte msgpack elements must not make the policy server
//! decode it into forty times its size. Alone in its test binary: the
//! process's peak memory is the measurement.

#![allow(clippy::unwrap_used)]

use futures_util::{SinkExt, StreamExt};
use stagetrace_net::msg::MAX_ELEMENTS;
use stagetrace_net::ws::DEFAULT_MAX_MESSAGE_BYTES;
use stagetrace_net::{msg::MsgMap, msg::NdArray, ws::PolicyClient, ws::PolicyServer, InferTimer};
use stagetrace_test_support::rt;
use tokio_tungstenite::tungstenite::Message;

/// Peak resident memory of this process so far (`VmHWM`), bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/self/status");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

/// `{"x": [[], [], …]}`: as many empty arrays (one byte each) as fit in the
/// server's largest accepted message.
fn empty_array_bomb() -> Vec<u8> {
    let n = DEFAULT_MAX_MESSAGE_BYTES - 64;
    let mut b = vec![0x81, 0xa1, b'x', 0xdd];
    b.extend_from_slice(&u32::try_from(n).unwrap().to_be_bytes());
    b.resize(b.len() + n, 0x90);
    b
}

#[test]
fn a_message_of_one_byte_elements_is_refused_before_it_is_decoded() {
    let rt = rt();
    rt.block_on(async {
        let server = PolicyServer::builder()
            .spawn("127.0.0.1:0", |_req: MsgMap, _t: InferTimer| async move {
                Ok(MsgMap::new().with("actions", NdArray::from_f32(&[0.5; 14], &[2, 7])))
            })
            .await
            .unwrap();
        // A well-behaved robot, connected before the attack, served throughout.
        let mut robot = PolicyClient::connect(&server.url()).await.unwrap();
        assert!(robot.infer(&MsgMap::new()).await.is_ok());

        let bomb = empty_array_bomb();
        let (mut ws, _) = tokio_tungstenite::connect_async(server.url())
            .await
            .unwrap();
        let _metadata = ws.next().await.unwrap().unwrap();
        let before = peak_rss();
        ws.send(Message::Binary(bomb.into())).await.unwrap();
        match ws.next().await {
            Some(Ok(Message::Text(t))) => assert!(
                t.contains(&format!("more than {MAX_ELEMENTS} msgpack values")),
                "{t}"
            ),
            other => panic!("expected an error frame, got {other:?}"),
        }
        let grown = peak_rss().saturating_sub(before);
        // The frame itself is 32 MiB and travels through a few buffers;
        // decoding it would have taken 32 Mi × 40 bytes ≈ 1.3 GB.
        assert!(
            grown < 256 << 20,
            "peak memory grew {} MiB for one 32 MiB message",
            grown >> 20
        );

        assert!(robot.infer(&MsgMap::new()).await.is_ok());
        let stats = server.stats();
        assert_eq!(stats.failed, 1, "{stats:?}");
        assert_eq!(stats.requests, 3, "{stats:?}");
        server.shutdown().await;
    });
}
