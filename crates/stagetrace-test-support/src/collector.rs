//! Collectors that misbehave, for export tests.

use std::net::TcpListener;

/// An OTLP/HTTP endpoint on loopback that accepts every connection and never
/// sends a byte back (a hung collector); returns its base URL.
pub fn silent_collector() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        // Held, never read or answered, until the test process ends.
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            held.push(s);
        }
    });
    format!("http://127.0.0.1:{port}")
}
