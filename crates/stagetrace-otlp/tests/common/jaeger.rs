//! A real Jaeger (v2, all-in-one, in-memory storage) for end-to-end tests:
//! each test starts its own on free loopback ports from a generated config,
//! so tests do not share traces and a test may stop and restart it.
//!
//! The binary comes from `STAGETRACE_JAEGER_BIN` (`cargo xtask test` builds
//! it from the pinned Go module in `tests/jaeger-tool` and sets the variable).
//! Without it the test says loudly that it was SKIPPED; with
//! `STAGETRACE_REQUIRE_JAEGER=1` (set by xtask when Go is present) it fails.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::tool::ToolProcess;

/// One running (or stopped) Jaeger.
pub struct Jaeger {
    tool: ToolProcess,
    /// OTLP/HTTP receiver port.
    pub otlp_http: u16,
    /// OTLP/gRPC receiver port.
    pub otlp_grpc: u16,
    /// Query API (HTTP) port.
    pub query_http: u16,
    query_grpc: u16,
    /// Jaeger's own metrics (the collector's telemetry, Prometheus text):
    /// `otelcol_receiver_accepted_spans_total` and the like.
    pub metrics_http: u16,
}

impl Jaeger {
    /// Starts a Jaeger for `test`, or returns `None` after a loud SKIPPED
    /// message when no binary is configured (panics instead under CI or with
    /// `STAGETRACE_REQUIRE_JAEGER=1`: `stagetrace_test_support::prereq`).
    pub fn start_or_skip(test: &str) -> Option<Jaeger> {
        let tool =
            ToolProcess::locate(test, "Jaeger", "jaeger", "STAGETRACE_JAEGER_BIN", "jaeger")?;
        let ports = stagetrace_test_support::ports::reserve(5);
        let mut jaeger = Jaeger {
            tool,
            otlp_http: ports[0],
            otlp_grpc: ports[1],
            query_http: ports[2],
            query_grpc: ports[3],
            metrics_http: ports[4],
        };
        std::fs::write(jaeger.tool.dir().join("jaeger.yaml"), jaeger.config()).unwrap();
        jaeger.spawn();
        Some(jaeger)
    }

    /// The OTLP/HTTP base URL to point an exporter at.
    pub fn otlp_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.otlp_http)
    }

    fn config(&self) -> String {
        format!(
            r#"service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: basic
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: {metrics_http}
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query_http}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp_grpc}
      http:
        endpoint: 127.0.0.1:{otlp_http}
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"#,
            query_http = self.query_http,
            query_grpc = self.query_grpc,
            otlp_grpc = self.otlp_grpc,
            otlp_http = self.otlp_http,
            metrics_http = self.metrics_http,
        )
    }

    fn spawn(&mut self) {
        let config = self.tool.dir().join("jaeger.yaml");
        let (otlp_http, query_http) = (self.otlp_http, self.query_http);
        self.tool.spawn(
            &["--config".to_owned(), config.display().to_string()],
            |_| port_open(otlp_http) && port_open(query_http),
        );
    }

    /// Stops Jaeger (its in-memory traces are lost); its ports stay its own
    /// for [`restart`](Self::restart): they lie outside the kernel's
    /// ephemeral range (`stagetrace_test_support::ports`).
    pub fn stop(&mut self) {
        self.tool.stop(self.otlp_http);
    }

    /// Starts Jaeger again on the same ports.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// The process id while it runs (for its CPU time and memory).
    pub fn pid(&self) -> Option<u32> {
        self.tool.pid()
    }

    /// Jaeger's own metrics, Prometheus text format (empty when unreachable).
    pub fn metrics_text(&self) -> String {
        self.tool
            .get_text(&format!("http://127.0.0.1:{}/metrics", self.metrics_http))
    }

    /// Jaeger's log so far (for failure messages).
    pub fn log(&self) -> String {
        self.tool.log()
    }

    /// `GET /api/v3/traces/{trace_id}`: the spans Jaeger has for the trace
    /// (empty while it has none: a 404).
    pub fn trace(&self, trace_id: &str) -> Vec<JSpan> {
        let url = format!(
            "http://127.0.0.1:{}/api/v3/traces/{trace_id}?raw_traces=true",
            self.query_http
        );
        let resp = match self.tool.http.get(&url).send() {
            Ok(r) => r,
            Err(_) => return Vec::new(),
        };
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Vec::new();
        }
        assert!(resp.status().is_success(), "GET {url}: {}", resp.status());
        let body: Value = resp.json().unwrap();
        JSpan::from_response(&body)
    }

    /// The ids of the traces Jaeger holds with a span of `service` starting
    /// in `[start_unix_ns, end_unix_ns]` (its search API, at most `limit`).
    pub fn trace_ids(
        &self,
        service: &str,
        start_unix_ns: u64,
        end_unix_ns: u64,
        limit: usize,
    ) -> Vec<String> {
        let url = format!(
            "http://127.0.0.1:{}/api/traces?service={service}&start={}&end={}&limit={limit}",
            self.query_http,
            start_unix_ns / 1000,
            end_unix_ns / 1000 + 1,
        );
        let resp = match self.tool.http.get(&url).send() {
            Ok(r) => r,
            Err(_) => return Vec::new(),
        };
        if !resp.status().is_success() {
            return Vec::new();
        }
        let body: Value = resp.json().unwrap();
        let mut ids: Vec<String> = body["data"]
            .as_array()
            .map(|traces| {
                traces
                    .iter()
                    .filter_map(|t| t["traceID"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        ids.dedup();
        ids
    }

    /// Polls the trace until `done` accepts its spans or `timeout` passes;
    /// returns the last spans seen.
    pub fn wait_trace(
        &self,
        trace_id: &str,
        timeout: Duration,
        done: impl Fn(&[JSpan]) -> bool,
    ) -> Vec<JSpan> {
        let deadline = Instant::now() + timeout;
        loop {
            let spans = self.trace(trace_id);
            if done(&spans) || Instant::now() >= deadline {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// One span as Jaeger's v3 API returns it (OTLP JSON).
#[derive(Clone, Debug)]
pub struct JSpan {
    pub service: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    pub attributes: Value,
}

impl JSpan {
    fn from_response(body: &Value) -> Vec<JSpan> {
        let mut out = Vec::new();
        let empty = Vec::new();
        let resource_spans = body["result"]["resourceSpans"].as_array().unwrap_or(&empty);
        for rs in resource_spans {
            let service =
                attr_str(&rs["resource"]["attributes"], "service.name").unwrap_or_default();
            for ss in rs["scopeSpans"].as_array().unwrap_or(&empty) {
                for s in ss["spans"].as_array().unwrap_or(&empty) {
                    out.push(JSpan {
                        service: service.clone(),
                        trace_id: id_hex(&s["traceId"]),
                        span_id: id_hex(&s["spanId"]),
                        parent_span_id: id_hex(&s["parentSpanId"]),
                        name: s["name"].as_str().unwrap_or_default().to_owned(),
                        start_unix_ns: num(&s["startTimeUnixNano"]),
                        end_unix_ns: num(&s["endTimeUnixNano"]),
                        attributes: s["attributes"].clone(),
                    });
                }
            }
        }
        out
    }

    /// Duration in ms.
    pub fn dur_ms(&self) -> f64 {
        self.end_unix_ns.saturating_sub(self.start_unix_ns) as f64 / 1e6
    }

    /// A string attribute.
    pub fn attr_str(&self, key: &str) -> Option<String> {
        attr_str(&self.attributes, key)
    }

    /// A numeric attribute.
    pub fn attr_f64(&self, key: &str) -> Option<f64> {
        let v = attr_value(&self.attributes, key)?;
        v["doubleValue"]
            .as_f64()
            .or_else(|| v["intValue"].as_str().and_then(|s| s.parse().ok()))
            .or_else(|| v["intValue"].as_f64())
    }
}

fn attr_value<'a>(attrs: &'a Value, key: &str) -> Option<&'a Value> {
    attrs
        .as_array()?
        .iter()
        .find(|kv| kv["key"] == key)
        .map(|kv| &kv["value"])
}

fn attr_str(attrs: &Value, key: &str) -> Option<String> {
    attr_value(attrs, key)?["stringValue"]
        .as_str()
        .map(str::to_owned)
}

fn num(v: &Value) -> u64 {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| v.as_u64())
        .unwrap_or(0)
}

/// OTLP JSON ids are hex; older gateways sent base64. Normalise to lowercase hex.
fn id_hex(v: &Value) -> String {
    let s = v.as_str().unwrap_or_default();
    if s.bytes().all(|b| b.is_ascii_hexdigit()) {
        s.to_ascii_lowercase()
    } else {
        base64_to_hex(s)
    }
}

fn base64_to_hex(s: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits: u32 = 0;
    let mut nbits = 0;
    let mut out = String::new();
    for c in s.bytes().filter(|&c| c != b'=') {
        let Some(v) = ALPHABET.iter().position(|&a| a == c) else {
            return String::new();
        };
        bits = (bits << 6) | v as u32;
        nbits += 6;
        if nbits >= 8 {
            nbits -= 8;
            out.push_str(&format!("{:02x}", (bits >> nbits) & 0xff));
        }
    }
    out
}

/// `n` distinct free loopback ports (bound together, then released).
pub fn port_open(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    )
    .is_ok()
}

/// Every span of a trace, one line each (service, name, id, parent),
/// sorted: what a failure message shows.
pub fn span_list(trace_id: &str, spans: &[JSpan]) -> String {
    let mut v: Vec<String> = spans
        .iter()
        .map(|s| {
            format!(
                "{} {:?} id {} parent {}",
                s.service, s.name, s.span_id, s.parent_span_id
            )
        })
        .collect();
    v.sort();
    format!("trace {trace_id}:\n{}", v.join("\n"))
}

/// The one span of `service` named `name` in `spans`.
pub fn one<'a>(spans: &'a [JSpan], service: &str, name: &str) -> &'a JSpan {
    let found: Vec<&JSpan> = spans
        .iter()
        .filter(|s| s.service == service && s.name == name)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {service} span named {name:?} in {:#?}",
        spans
            .iter()
            .map(|s| (&s.service, &s.name))
            .collect::<Vec<_>>()
    );
    found[0]
}

/// Each service in `want` exported exactly its names (in any order).
pub fn assert_span_names(spans: &[JSpan], want: &[(&str, &[&str])], dump: &dyn Fn() -> String) {
    for (service, names) in want {
        let mut got: Vec<&str> = spans
            .iter()
            .filter(|s| s.service == *service)
            .map(|s| s.name.as_str())
            .collect();
        got.sort_unstable();
        let mut names = names.to_vec();
        names.sort_unstable();
        assert_eq!(got, names, "{service}: {}", dump());
    }
}

/// What a robot exports per call through one gateway, dispatched to a
/// remote executor.
pub const ROBOT_HOP_SPANS: [&str; 12] = [
    "call",
    "capture",
    "transport",
    "uplink",
    "uplink client → gateway",
    "uplink gateway → server",
    "downlink",
    "downlink server → gateway",
    "downlink gateway → client",
    "dispatch",
    "uplink client → executor",
    "ack executor → client",
];

/// The services of a call through one gateway to a policy server,
/// dispatched to a remote executor.
pub struct FourServices<'s> {
    pub robot: &'s str,
    pub gateway: &'s str,
    pub policy: &'s str,
    pub executor: &'s str,
}

/// The spans of such a call that others hang under.
pub struct GatewayTree<'a> {
    pub call: &'a JSpan,
    pub transport: &'a JSpan,
    pub dispatch: &'a JSpan,
    pub uplink: &'a JSpan,
    pub downlink: &'a JSpan,
    pub relay: &'a JSpan,
    pub forward: &'a JSpan,
}

/// Every span of a call through one gateway with a remote executor under
/// its parent exactly: the robot's stages under the call, each hop under
/// its direction, the gateway under the robot's transport span (the parent
/// id the robot sent), its forward under it, the policy server's inference
/// under the forward and the executor under the robot's dispatch.
pub fn assert_gateway_tree<'a>(
    spans: &'a [JSpan],
    s: &FourServices<'_>,
    dump: &dyn Fn() -> String,
) -> GatewayTree<'a> {
    let robot = |name| one(spans, s.robot, name);
    let t = GatewayTree {
        call: robot("call"),
        transport: robot("transport"),
        dispatch: robot("dispatch"),
        uplink: robot("uplink"),
        downlink: robot("downlink"),
        relay: one(spans, s.gateway, "relay"),
        forward: one(spans, s.gateway, "forward"),
    };
    assert!(t.call.parent_span_id.is_empty(), "the call is the root");
    let parents: [(&JSpan, &JSpan); 15] = [
        (robot("capture"), t.call),
        (t.transport, t.call),
        (t.dispatch, t.call),
        (t.uplink, t.transport),
        (t.downlink, t.transport),
        (robot("uplink client → gateway"), t.uplink),
        (robot("uplink gateway → server"), t.uplink),
        (robot("downlink server → gateway"), t.downlink),
        (robot("downlink gateway → client"), t.downlink),
        (robot("uplink client → executor"), t.dispatch),
        (robot("ack executor → client"), t.dispatch),
        (t.relay, t.transport),
        (t.forward, t.relay),
        (one(spans, s.policy, "infer"), t.forward),
        (one(spans, s.executor, "exec_wait"), t.dispatch),
    ];
    for (child, parent) in parents {
        assert_eq!(
            child.parent_span_id,
            parent.span_id,
            "{} {:?} must be a child of {} {:?}\n{}",
            child.service,
            child.name,
            parent.service,
            parent.name,
            dump()
        );
    }
    t
}
