//! UDP cross traffic: a built-in sender that fills the bottleneck from one
//! namespace to a sink in the other.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::namespaces::{enter, in_ns};

/// Cross-traffic datagram payload (fits a 1500-byte MTU).
const DATAGRAM: usize = 1400;

/// UDP sent at a fixed rate from one namespace to a sink in the other.
#[derive(Debug)]
pub(super) struct CrossSender {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    _sink: UdpSocket,
}

impl CrossSender {
    /// Send `mbit` from namespace `from_ns` to a sink bound at `to` in
    /// `to_ns`, counting the bytes sent in `sent`.
    pub(super) fn start(
        from_ns: &str,
        to_ns: &str,
        to: [u8; 4],
        mbit: f64,
        sent: Arc<AtomicU64>,
    ) -> Result<CrossSender, String> {
        let sink = in_ns(to_ns, move || UdpSocket::bind(SocketAddr::from((to, 0))))?;
        let dest = sink.local_addr().map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let thread = {
            let stop = Arc::clone(&stop);
            let from_ns = from_ns.to_owned();
            std::thread::Builder::new()
                .name("st-cross-udp".into())
                .spawn(move || {
                    let sock = enter(&from_ns).and_then(|()| {
                        UdpSocket::bind(SocketAddr::from(([0, 0, 0, 0], 0)))
                            .map_err(|e| e.to_string())
                    });
                    let sock = match sock {
                        Ok(s) => {
                            let _ = ready_tx.send(Ok(()));
                            s
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    pace(&sock, dest, mbit, &stop, &sent);
                })
                .map_err(|e| e.to_string())?
        };
        let mut s = CrossSender {
            stop,
            thread: Some(thread),
            _sink: sink,
        };
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => Ok(s),
            Ok(Err(e)) => {
                s.stop();
                Err(e)
            }
            Err(_) => {
                s.stop();
                Err("the cross-traffic sender did not start".into())
            }
        }
    }

    /// Stop sending and join the sender.
    pub(super) fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for CrossSender {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Send datagrams so that the bytes sent follow `mbit` over time (1 ms
/// ticks; a lag of more than 50 ms is forgiven rather than burst out).
fn pace(sock: &UdpSocket, dest: SocketAddr, mbit: f64, stop: &AtomicBool, sent: &AtomicU64) {
    let buf = [0x5au8; DATAGRAM];
    let bytes_per_s = mbit * 1e6 / 8.0;
    let start = Instant::now();
    let mut done = 0.0f64;
    while !stop.load(Ordering::Relaxed) {
        let due = start.elapsed().as_secs_f64() * bytes_per_s;
        if due - done > bytes_per_s * 0.05 {
            done = due - bytes_per_s * 0.05;
        }
        while done + DATAGRAM as f64 <= due {
            // A full queue drops the datagram (that is the point); not an error.
            if sock.send_to(&buf, dest).is_ok() {
                sent.fetch_add(DATAGRAM as u64, Ordering::Relaxed);
            }
            done += DATAGRAM as f64;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
