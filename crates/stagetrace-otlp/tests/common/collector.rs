//! A one-request OTLP/HTTP "collector" that shows what arrived, and an
//! endpoint with no collector at all.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};

/// The base URL of an endpoint nothing listens on: a loopback port bound
/// and released (connections to it are refused).
pub fn dead_endpoint() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://127.0.0.1:{}", l.local_addr().unwrap().port())
}

/// Reads one HTTP request (head and body) and answers 200 with an empty body.
pub fn answer_one(stream: TcpStream) -> (String, Vec<(String, String)>, usize) {
    answer_one_with(stream, "200 OK")
}

/// Reads one HTTP request and answers with `status` (e.g. `"401 Unauthorized"`).
pub fn answer_one_with(stream: TcpStream, status: &str) -> (String, Vec<(String, String)>, usize) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    reader.read_line(&mut request_line).unwrap();
    let mut headers = Vec::new();
    let mut len = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':').unwrap();
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_owned());
        if k == "content-length" {
            len = v.parse().unwrap();
        }
        headers.push((k, v));
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    let mut stream = stream;
    stream
        .write_all(
            format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/x-protobuf\r\n\
                 Content-Length: 0\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
    (request_line, headers, len)
}
