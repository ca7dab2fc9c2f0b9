//! A real Prometheus (3.x, from the pinned Go tool module in
//! `tests/prometheus-tool`) for end-to-end metrics tests: each test starts
//! its own on a free loopback port with the OTLP receiver on, its own data
//! directory, and may stop and restart it.
//!
//! The binary comes from `STAGETRACE_PROMETHEUS_BIN` (`cargo xtask test`
//! builds it and sets the variable; by hand: `cargo xtask prometheus`).
//! Without it the test says loudly that it was SKIPPED; with
//! `STAGETRACE_REQUIRE_PROMETHEUS=1` (set by xtask) or under CI it fails.
//!
//! Native histograms: Prometheus 3 stores an OTLP exponential histogram as a
//! native histogram without a feature flag (`--enable-feature=native-histograms`
//! is a no-op there); the OTLP receiver is `--web.enable-otlp-receiver`.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use serde_json::Value;

use super::jaeger::port_open;
use super::tool::ToolProcess;

/// One running (or stopped) Prometheus.
pub struct Prometheus {
    tool: ToolProcess,
    /// Web port: the query API and the OTLP receiver (`/api/v1/otlp`).
    pub port: u16,
}

impl Prometheus {
    /// Starts a Prometheus for `test`, or returns `None` after a loud SKIPPED
    /// message when no binary is configured (a failure under CI or with
    /// `STAGETRACE_REQUIRE_PROMETHEUS=1`).
    pub fn start_or_skip(test: &str) -> Option<Prometheus> {
        let tool = ToolProcess::locate(
            test,
            "Prometheus",
            "prometheus",
            "STAGETRACE_PROMETHEUS_BIN",
            "prometheus",
        )?;
        let mut p = Prometheus {
            tool,
            port: stagetrace_test_support::ports::reserve(1)[0],
        };
        // No scrape jobs: everything arrives over OTLP. The robot's identity
        // attributes become labels (service.name → job, service.instance.id
        // → instance by default).
        std::fs::write(
            p.tool.dir().join("prometheus.yml"),
            "global:\n  evaluation_interval: 1s\notlp:\n  promote_resource_attributes: [host.name]\n",
        )
        .unwrap();
        p.spawn();
        Some(p)
    }

    /// The OTLP/HTTP base URL to point a metrics exporter at (the exporter
    /// appends `/v1/metrics`).
    pub fn otlp_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/api/v1/otlp", self.port)
    }

    fn spawn(&mut self) {
        let dir = self.tool.dir().to_owned();
        let port = self.port;
        let args = [
            format!("--config.file={}", dir.join("prometheus.yml").display()),
            format!("--storage.tsdb.path={}", dir.join("data").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
            "--web.enable-otlp-receiver".to_owned(),
        ];
        self.tool.spawn(&args, |tool| {
            port_open(port)
                && tool
                    .http
                    .get(format!("http://127.0.0.1:{port}/-/ready"))
                    .send()
                    .is_ok_and(|r| r.status().is_success())
        });
    }

    /// Stops Prometheus (its data directory stays).
    pub fn stop(&mut self) {
        self.tool.stop(self.port);
    }

    /// Starts Prometheus again on the same port and data.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// The process id while it runs (for its CPU time and memory).
    pub fn pid(&self) -> Option<u32> {
        self.tool.pid()
    }

    /// Prometheus's own metrics, text format (`prometheus_tsdb_head_samples_appended_total`
    /// and the like; empty when unreachable).
    pub fn metrics_text(&self) -> String {
        self.tool
            .get_text(&format!("http://127.0.0.1:{}/metrics", self.port))
    }

    /// Prometheus's log so far (for failure messages).
    pub fn log(&self) -> String {
        self.tool.log()
    }

    /// An instant PromQL query: each series' labels and value (NaN values
    /// are kept as NaN).
    pub fn query(&self, promql: &str) -> Vec<(Value, f64)> {
        let url = format!(
            "http://127.0.0.1:{}/api/v1/query?query={}",
            self.port,
            percent_encode(promql)
        );
        let resp = match self.tool.http.get(&url).send() {
            Ok(r) => r,
            Err(_) => return Vec::new(),
        };
        let body: Value = resp.json().unwrap();
        assert_eq!(body["status"], "success", "{promql}: {body}");
        let empty = Vec::new();
        body["data"]["result"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .map(|r| {
                let v = r["value"][1]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(f64::NAN);
                (r["metric"].clone(), v)
            })
            .collect()
    }

    /// The single value of `promql`, polled until `done` accepts it or
    /// `timeout` passes; the last value seen (`None`: no series).
    pub fn wait_value(
        &self,
        promql: &str,
        timeout: Duration,
        done: impl Fn(f64) -> bool,
    ) -> Option<f64> {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.query(promql).first().map(|(_, v)| *v);
            if v.is_some_and(&done) || Instant::now() >= deadline {
                return v;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
