//! A TCP proxy on loopback that counts the bytes the robots send through it
//! (request line, headers and body: what the network carries, before TCP/IP
//! framing), so the fleet simulation can state bytes per robot per signal.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A running proxy: connect to `port`, reach `upstream`.
pub(crate) struct CountingProxy {
    pub(crate) port: u16,
    sent: Arc<AtomicU64>,
}

impl CountingProxy {
    /// Starts forwarding to `127.0.0.1:upstream`. Its threads are named
    /// `sim-proxy`, so that their CPU time is not counted as the robots'.
    pub(crate) fn start(upstream: u16) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let sent = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&sent);
        spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue; // the backend is down: the robot's export fails, as it would
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (c2, s2) = match (client.try_clone(), server.try_clone()) {
                    (Ok(c), Ok(s)) => (c, s),
                    _ => continue,
                };
                let up = Arc::clone(&counted);
                spawn(move || pump(client, server, Some(&up)));
                spawn(move || pump(s2, c2, None));
            }
        });
        CountingProxy { port, sent }
    }

    /// Bytes the robots sent so far.
    pub(crate) fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

fn spawn(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .name("sim-proxy".into())
        .stack_size(64 * 1024)
        .spawn(f)
        .expect("spawn a proxy thread");
}

fn pump(mut from: TcpStream, mut to: TcpStream, count: Option<&AtomicU64>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Some(c) = count {
                    c.fetch_add(n as u64, Ordering::Relaxed);
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
