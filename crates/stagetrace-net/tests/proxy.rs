//! The shaping proxy on loopback: injected delays show up in the measured
//! roundtrip, a bandwidth limit paces a bulk transfer, settings change at
//! runtime, and shutdown closes everything.

#![allow(missing_docs, clippy::unwrap_used)]

use stagetrace_schema::ns_to_ms;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use stagetrace_net::proxy::{LinkConfig, Proxy, ProxyConfig, Stall};
use stagetrace_test_support::timing;

/// A blocking echo server on its own thread; returns its address.
fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            s.set_nodelay(true).unwrap();
            thread::spawn(move || {
                let mut buf = [0u8; 65536];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

/// A server that reads everything and reports (bytes, time of the last byte).
fn sink_server() -> (SocketAddr, std::sync::mpsc::Receiver<(usize, Instant)>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; 65536];
        let mut total = 0;
        let mut last = Instant::now();
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    total += n;
                    last = Instant::now();
                }
            }
        }
        let _ = tx.send((total, last));
    });
    (addr, rx)
}

/// Median roundtrip of `n` 64-byte pings over `s`, in ms.
fn median_rtt_ms(s: &mut TcpStream, n: usize) -> f64 {
    let msg = [7u8; 64];
    let mut back = [0u8; 64];
    let mut rtts: Vec<f64> = (0..n)
        .map(|_| {
            let t = Instant::now();
            s.write_all(&msg).unwrap();
            s.read_exact(&mut back).unwrap();
            let rtt = t.elapsed().as_secs_f64() * 1e3;
            assert_eq!(back, msg);
            rtt
        })
        .collect();
    rtts.sort_by(f64::total_cmp);
    rtts[n / 2]
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

#[test]
fn delays_show_up_in_the_roundtrip() {
    let echo = echo_server();
    let proxy =
        Proxy::spawn_in_thread("127.0.0.1:0".parse().unwrap(), echo, ProxyConfig::default())
            .unwrap();
    let mut s = connect(proxy.local_addr());
    // Baseline through the proxy with no shaping: loopback + proxy cost.
    let base = median_rtt_ms(&mut s, 30);
    proxy.set_uplink(LinkConfig::delay(Duration::from_millis(20)));
    proxy.set_downlink(LinkConfig::delay(Duration::from_millis(5)));
    let shaped = median_rtt_ms(&mut s, 30);
    let extra = shaped - base;
    // A difference of two medians of 30 round trips, each through the
    // proxy's release timer, which a loaded machine wakes up to ~1 ms late
    // in either set: 2 ms. A delay applied twice, to the wrong direction or
    // not at all is off by 5 ms or more.
    timing::error("extra roundtrip vs 25 ms injected (ms)", extra - 25.0, 2.0);
    assert!(
        (extra - 25.0).abs() < 2.0,
        "baseline {base:.3} ms, shaped {shaped:.3} ms, extra {extra:.3} ms"
    );
    // Each direction on its own.
    proxy.set_downlink(LinkConfig::default());
    let up_only = median_rtt_ms(&mut s, 20) - base;
    eprintln!("baseline {base:.3} extra {extra:.3} up_only {up_only:.3}");
    // The same, over 20 round trips: a little wider.
    timing::error(
        "uplink-only extra vs 20 ms injected (ms)",
        up_only - 20.0,
        2.5,
    );
    assert!((up_only - 20.0).abs() < 2.5, "uplink only: {up_only:.3} ms");
    let stats = proxy.stats();
    assert_eq!((stats.connections, stats.active), (1, 1));
    assert_eq!(stats.bytes_up, 80 * 64);
    // The last echo's count may land just after the client read it.
    assert!((79 * 64..=80 * 64).contains(&stats.bytes_down), "{stats:?}");
    drop(s);
    proxy.shutdown();
}

#[test]
fn bandwidth_limit_paces_a_transfer() {
    let (sink, done) = sink_server();
    let cfg = ProxyConfig {
        uplink: LinkConfig::default().with_bandwidth(1_000_000),
        ..ProxyConfig::default()
    };
    let proxy = Proxy::spawn_in_thread("127.0.0.1:0".parse().unwrap(), sink, cfg).unwrap();
    let mut s = connect(proxy.local_addr());
    let data = vec![0xabu8; 500_000];
    let start = Instant::now();
    s.write_all(&data).unwrap();
    drop(s);
    let (n, last) = done.recv_timeout(Duration::from_secs(10)).unwrap();
    let secs = last.duration_since(start).as_secs_f64();
    eprintln!("500 KB at 1 MB/s: {secs:.3} s");
    assert_eq!(n, 500_000);
    // The token bucket's burst (10 ms of traffic) and a late last wake-up
    // move the end by tens of ms; a limit 20 % off moves it by 0.1 s.
    timing::error("500 KB at 1 MB/s vs 0.5 s (s)", secs - 0.5, 0.1);
    assert!(
        (0.4..=0.6).contains(&secs),
        "500 KB at 1 MB/s took {secs:.3} s"
    );
    proxy.shutdown();
}

#[tokio::test]
async fn works_inside_a_runtime_and_shuts_down() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let echo = echo_server();
    let cfg = ProxyConfig {
        uplink: LinkConfig::delay(Duration::from_millis(10)),
        ..ProxyConfig::default()
    };
    let proxy = Proxy::start("127.0.0.1:0".parse().unwrap(), echo, cfg).unwrap();
    let mut s = tokio::net::TcpStream::connect(proxy.local_addr())
        .await
        .unwrap();
    s.set_nodelay(true).unwrap();
    let t = Instant::now();
    s.write_all(b"hello").await.unwrap();
    let mut back = [0u8; 5];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"hello");
    assert!(t.elapsed() >= Duration::from_millis(10));
    assert_eq!(proxy.uplink().delay, Duration::from_millis(10));
    let addr = proxy.local_addr();
    proxy.shutdown();
    // The open connection is closed and the listener is gone.
    let mut buf = [0u8; 1];
    let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
    assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "{r:?}");
    let mut refused = false;
    for _ in 0..50 {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused, "proxy still accepting after shutdown");
}

#[test]
fn chunks_keep_their_order_under_jitter_and_stalls() {
    let echo = echo_server();
    let cfg = ProxyConfig {
        uplink: LinkConfig::delay(Duration::from_millis(3)).with_jitter(
            stagetrace_net::proxy::Jitter::Uniform(Duration::from_millis(3)),
        ),
        downlink: LinkConfig::delay(Duration::from_millis(1))
            .with_jitter(stagetrace_net::proxy::Jitter::Normal(
                Duration::from_millis(2),
            ))
            .with_stall(Stall {
                every: Duration::from_millis(100),
                length: Duration::from_millis(20),
            }),
        ..ProxyConfig::default()
    };
    let proxy = Proxy::spawn_in_thread("127.0.0.1:0".parse().unwrap(), echo, cfg).unwrap();
    let mut s = connect(proxy.local_addr());
    let writer = {
        let mut w = s.try_clone().unwrap();
        thread::spawn(move || {
            for i in 0..2000u32 {
                w.write_all(&i.to_le_bytes()).unwrap();
                if i % 100 == 0 {
                    thread::sleep(Duration::from_millis(2));
                }
            }
        })
    };
    let mut got = [0u8; 4];
    for i in 0..2000u32 {
        s.read_exact(&mut got).unwrap();
        assert_eq!(u32::from_le_bytes(got), i, "reordered at {i}");
    }
    writer.join().unwrap();
    // The counter moves just after the write the reader already saw.
    let t = Instant::now();
    while proxy.stats().bytes_down < 8000 && t.elapsed() < Duration::from_secs(5) {
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(proxy.stats().bytes_down, 8000);
}

#[test]
fn unreachable_upstream_is_refused_and_counted() {
    // A port nobody listens on: bind, read the port, close.
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy =
        Proxy::spawn_in_thread("127.0.0.1:0".parse().unwrap(), dead, ProxyConfig::default())
            .unwrap();
    let mut s = connect(proxy.local_addr());
    let mut buf = [0u8; 1];
    let r = s.read(&mut buf);
    assert!(matches!(r, Ok(0) | Err(_)));
    let t = Instant::now();
    while proxy.stats().refused == 0 && t.elapsed() < Duration::from_secs(5) {
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(proxy.stats().refused, 1);
    assert_eq!(proxy.stats().connections, 0);
}

/// A policy-like server over raw TCP: reads a 64-byte request, stamps its
/// receive time on a clock `skew_ms` ahead, "infers" for `model`, and answers
/// with `recv_unix_ns`, `total_ns` and, for the test's ground truth, the
/// receive time on the true (unskewed) clock — 8 bytes each.
fn timing_server(skew_ms: i64, model: Duration) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut req = [0u8; 64];
        while s.read_exact(&mut req).is_ok() {
            let recv = Instant::now();
            let true_recv = PROCESS_ANCHOR.to_unix_ns(recv);
            let recv_unix = (true_recv as i64 + skew_ms * 1_000_000) as u64;
            let until = recv + model;
            while Instant::now() < until {
                thread::sleep(Duration::from_micros(200).min(until - Instant::now()));
            }
            let mut resp = [0u8; 24];
            resp[..8].copy_from_slice(&recv_unix.to_le_bytes());
            resp[16..].copy_from_slice(&true_recv.to_le_bytes());
            let total = recv.elapsed().as_nanos() as u64;
            resp[8..16].copy_from_slice(&total.to_le_bytes());
            if s.write_all(&resp).is_err() {
                return;
            }
        }
    });
    addr
}

/// Client and server share the process's clocks, so one anchor gives both
/// sides the same true wall time.
static PROCESS_ANCHOR: std::sync::LazyLock<stagetrace::clock::Anchor> =
    std::sync::LazyLock::new(stagetrace::clock::Anchor::now);

/// One call's stitched figures and its true one-way delays (ms).
struct Call {
    st: stagetrace::clock::Stitched,
    true_up: f64,
    true_down: f64,
}

/// `n` calls through `s`, stitched.
fn stitched_calls(s: &mut TcpStream, st: &mut stagetrace::clock::Stitcher, n: usize) -> Vec<Call> {
    use stagetrace::clock::ClientTimes;
    let anchor = *PROCESS_ANCHOR;
    (0..n)
        .map(|_| {
            let t0 = Instant::now();
            s.write_all(&[1u8; 64]).unwrap();
            let mut resp = [0u8; 24];
            s.read_exact(&mut resp).unwrap();
            let t3 = Instant::now();
            let word = |i: usize| u64::from_le_bytes(resp[i * 8..i * 8 + 8].try_into().unwrap());
            let timing = stagetrace::ServerTiming {
                recv_unix_ns: Some(word(0)),
                total_ns: Some(word(1)),
                ..Default::default()
            };
            let client = ClientTimes {
                send_unix_ns: anchor.to_unix_ns(t0),
                recv_unix_ns: anchor.to_unix_ns(t3),
                first_byte_unix_ns: None,
                request_first_byte_unix_ns: None,
            };
            let true_recv = word(2);
            Call {
                st: st.stitch("server", client, &timing),
                true_up: (true_recv as f64 - client.send_unix_ns as f64) / 1e6,
                true_down: (client.recv_unix_ns as f64 - (true_recv + word(1)) as f64) / 1e6,
            }
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn ground_truth_split_through_the_proxy() {
    use stagetrace::clock::{ClockMode, Stitcher};
    use stagetrace::record::ClockBasis;
    // Server clock +250 ms, uplink 20 ms, downlink 5 ms.
    let server = timing_server(250, Duration::from_millis(3));
    let proxy = Proxy::spawn_in_thread(
        "127.0.0.1:0".parse().unwrap(),
        server,
        ProxyConfig::default(),
    )
    .unwrap();
    let mut s = connect(proxy.local_addr());
    // Loopback + proxy cost, measured the same way.
    let base = stitched_calls(&mut s, &mut Stitcher::new(ClockMode::None), 30);
    let base = median(
        base.iter()
            .map(|c| c.st.net_ns.map(ns_to_ms).unwrap())
            .collect(),
    );
    proxy.set_uplink(LinkConfig::delay(Duration::from_millis(20)));
    proxy.set_downlink(LinkConfig::delay(Duration::from_millis(5)));
    let mut st = Stitcher::new(ClockMode::Estimate);
    let calls = stitched_calls(&mut s, &mut st, 40);
    let net = median(
        calls
            .iter()
            .map(|c| c.st.net_ns.map(ns_to_ms).unwrap())
            .collect(),
    );
    let err = median(
        calls
            .iter()
            .map(|c| c.st.split_err_ns.map(ns_to_ms).unwrap())
            .collect(),
    );
    eprintln!(
        "ground truth: loopback net {base:.3} ms, shaped net {net:.3} ms, split ± {err:.3} ms"
    );
    timing::error("net vs 25 ms + loopback (ms)", net - 25.0 - base, 1.5);
    assert!(
        (net - 25.0 - base).abs() < 1.5,
        "net {net:.3} vs 25 + {base:.3}"
    );
    // Anchor readings on one host agree to well under this.
    const EPS: f64 = 0.01;
    // Each per-call check's worst call: (figure − truth, bound).
    let pairs = |fig: fn(&Call) -> Option<i64>, truth: fn(&Call) -> f64| {
        calls.iter().filter_map(move |c| {
            let err = ns_to_ms(c.st.split_err_ns?) + EPS;
            Some((ns_to_ms(fig(c)?) - truth(c), err))
        })
    };
    timing::worst_pair(
        "uplink vs truth (ms)",
        pairs(|c| c.st.uplink_ns, |c| c.true_up),
    );
    timing::worst_pair(
        "downlink vs truth (ms)",
        pairs(|c| c.st.downlink_ns, |c| c.true_down),
    );
    timing::worst_pair(
        "offset vs +250 ms (ms)",
        pairs(|c| c.st.offset_ns, |_| 250.0),
    );
    for c in &calls {
        let st = &c.st;
        assert_eq!(st.basis, Some(ClockBasis::Estimate));
        assert!(!st.clamped);
        let (up, down, err) = (
            st.uplink_ns.map(ns_to_ms).unwrap(),
            st.downlink_ns.map(ns_to_ms).unwrap(),
            st.split_err_ns.map(ns_to_ms).unwrap(),
        );
        assert!(
            (up - c.true_up).abs() <= err + EPS,
            "uplink {up:.3} ± {err:.3}, true {:.3}",
            c.true_up
        );
        assert!(
            (down - c.true_down).abs() <= err + EPS,
            "downlink {down:.3} ± {err:.3}, true {:.3}",
            c.true_down
        );
        // Asymmetry shows up as offset error, inside the bound.
        let off = st.offset_ns.map(ns_to_ms).unwrap();
        assert!(
            (off - 250.0).abs() <= err + EPS,
            "offset {off:.3} ± {err:.3}"
        );
    }
    assert_eq!(st.filter("server").unwrap().steps(), 0);
}

#[test]
fn trusted_clocks_give_the_injected_split() {
    use stagetrace::clock::{ClockMode, Stitcher};
    let server = timing_server(0, Duration::from_millis(3));
    let cfg = ProxyConfig {
        uplink: LinkConfig::delay(Duration::from_millis(20)),
        downlink: LinkConfig::delay(Duration::from_millis(5)),
        ..ProxyConfig::default()
    };
    let proxy = Proxy::spawn_in_thread("127.0.0.1:0".parse().unwrap(), server, cfg).unwrap();
    let mut s = connect(proxy.local_addr());
    let mut st = Stitcher::new(ClockMode::Trusted);
    let calls = stitched_calls(&mut s, &mut st, 30);
    let up = median(
        calls
            .iter()
            .map(|c| c.st.uplink_ns.map(ns_to_ms).unwrap())
            .collect(),
    );
    let down = median(
        calls
            .iter()
            .map(|c| c.st.downlink_ns.map(ns_to_ms).unwrap())
            .collect(),
    );
    eprintln!("trusted: uplink {up:.3} ms, downlink {down:.3} ms");
    // Medians of 30 calls; the proxy's release timer and the scheduling of
    // the server and the client add up to about 1 ms on a loaded machine.
    // A split that mixed the directions would be off by 7.5 ms or more.
    timing::error("uplink p50 vs 20 ms injected (ms)", up - 20.0, 1.5);
    timing::error("downlink p50 vs 5 ms injected (ms)", down - 5.0, 1.5);
    assert!((up - 20.0).abs() < 1.5, "uplink {up:.3}");
    assert!((down - 5.0).abs() < 1.5, "downlink {down:.3}");
}
