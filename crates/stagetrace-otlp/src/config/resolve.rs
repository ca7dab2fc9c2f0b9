//! Resolving the builder against the environment: an explicit setting beats
//! the standard `OTEL_*` variable, which beats the default.

use std::time::Duration;

use http::{HeaderName, HeaderValue};

use super::builder::{OtlpBuilder, DEFAULT_SERVICE_NAME, DEFAULT_TIMEOUT};
use super::endpoint::{default_endpoint, endpoint_url};
use super::env::{ENV_ENDPOINT, ENV_HEADERS, ENV_PROTOCOL, ENV_SERVICE_NAME, ENV_TIMEOUT};
use super::error::{BuildError, Origin};
use super::headers::resolve_headers;
use super::protocol::Protocol;
use crate::deadline::ShutdownDeadline;
use crate::sampling::TailSampling;

/// Every setting, resolved.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// Full URL the requests go to (for HTTP, ending in `/v1/traces`).
    pub(crate) endpoint: String,
    pub(crate) protocol: Protocol,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) service_name: String,
    pub(crate) timeout: Duration,
    pub(crate) queue_calls: usize,
    pub(crate) batch_spans: usize,
    pub(crate) export_interval: Duration,
    pub(crate) shutdown_timeout: Duration,
    /// Shared with other exporters, or this exporter's own.
    pub(crate) shutdown_deadline: ShutdownDeadline,
    pub(crate) ca_pem: Option<Vec<u8>>,
    pub(crate) synthesize_server_spans: bool,
    /// `None`: every call is exported.
    pub(crate) tail_sampling: Option<TailSampling>,
}

impl OtlpBuilder {
    /// Resolves every setting against the process environment.
    pub(crate) fn resolve_from_env(self) -> Result<Settings, BuildError> {
        self.resolve(&|var| std::env::var(var).ok())
    }

    /// Resolves every setting against `env` (a lookup of environment variables).
    pub(crate) fn resolve(
        self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Settings, BuildError> {
        // A variable set to blanks counts as unset.
        let env = |var: &str| env(var).filter(|v| !v.trim().is_empty());

        let protocol = match self.protocol {
            Some(p) => p,
            None => match env(ENV_PROTOCOL) {
                Some(v) => Protocol::parse(&v).ok_or(BuildError::UnsupportedProtocol {
                    value: v.trim().to_owned(),
                    origin: Origin::Env(ENV_PROTOCOL),
                })?,
                None => Protocol::HttpProtobuf,
            },
        };
        if protocol == Protocol::Grpc && !cfg!(feature = "grpc") {
            let origin = if self.protocol.is_some() {
                Origin::Builder
            } else {
                Origin::Env(ENV_PROTOCOL)
            };
            return Err(BuildError::UnsupportedProtocol {
                value: Protocol::Grpc.name().into(),
                origin,
            });
        }

        let (base, origin) = match self.endpoint.filter(|e| !e.trim().is_empty()) {
            Some(e) => (e, Origin::Builder),
            None => match env(ENV_ENDPOINT) {
                Some(e) => (e, Origin::Env(ENV_ENDPOINT)),
                None => (default_endpoint(protocol).to_owned(), Origin::Builder),
            },
        };
        let endpoint = endpoint_url(base.trim(), protocol, origin)?;

        let headers = resolve_headers(env(ENV_HEADERS).as_deref(), &self.headers)?;

        let service_name = self
            .service_name
            .filter(|s| !s.trim().is_empty())
            .or_else(|| env(ENV_SERVICE_NAME).map(|s| s.trim().to_owned()))
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned());

        let timeout = match self.timeout {
            Some(t) => t,
            None => match env(ENV_TIMEOUT) {
                Some(v) => v
                    .trim()
                    .parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| BuildError::InvalidTimeout { value: v })?,
                None => DEFAULT_TIMEOUT,
            },
        };

        Ok(Settings {
            endpoint,
            protocol,
            headers,
            service_name,
            timeout,
            queue_calls: self.queue_calls,
            batch_spans: self.batch_spans,
            export_interval: self.export_interval,
            shutdown_timeout: self.shutdown_timeout,
            shutdown_deadline: self.shutdown_deadline.unwrap_or_default(),
            ca_pem: self.ca_pem,
            synthesize_server_spans: self.synthesize_server_spans,
            tail_sampling: self.tail_sampling,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_apply_without_settings_or_env() {
        let s = OtlpBuilder::new().resolve(&env_of(&[])).unwrap();
        assert_eq!(s.endpoint, "http://localhost:4318/v1/traces");
        assert_eq!(s.protocol, Protocol::HttpProtobuf);
        assert_eq!(s.service_name, "stagetrace");
        assert_eq!(s.timeout, Duration::from_secs(10));
        assert!(s.headers.is_empty());
    }

    #[test]
    fn env_beats_defaults() {
        let env = env_of(&[
            (ENV_ENDPOINT, "https://collector.example:4318/"),
            (ENV_HEADERS, "authorization=Bearer%20abc,x-tenant=robots"),
            (ENV_SERVICE_NAME, "arm-7"),
            (ENV_TIMEOUT, "2500"),
            (ENV_PROTOCOL, "http/protobuf"),
        ]);
        let s = OtlpBuilder::new().resolve(&env).unwrap();
        assert_eq!(s.endpoint, "https://collector.example:4318/v1/traces");
        assert_eq!(s.service_name, "arm-7");
        assert_eq!(s.timeout, Duration::from_millis(2500));
        let h: Vec<(String, String)> = s
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        assert_eq!(
            h,
            vec![
                ("authorization".into(), "Bearer abc".into()),
                ("x-tenant".into(), "robots".into())
            ]
        );
    }

    #[test]
    fn explicit_settings_beat_env() {
        let env = env_of(&[
            (ENV_ENDPOINT, "http://from-env:4318"),
            (ENV_HEADERS, "authorization=from-env,x-tenant=robots"),
            (ENV_SERVICE_NAME, "from-env"),
            (ENV_TIMEOUT, "2500"),
            (ENV_PROTOCOL, "grpc"),
        ]);
        let s = OtlpBuilder::new()
            .endpoint("http://127.0.0.1:9999/v1/traces")
            .protocol(Protocol::HttpProtobuf)
            .header("Authorization", "Bearer explicit")
            .service_name("policy-server")
            .timeout(Duration::from_millis(300))
            .resolve(&env)
            .unwrap();
        assert_eq!(s.endpoint, "http://127.0.0.1:9999/v1/traces");
        assert_eq!(s.protocol, Protocol::HttpProtobuf);
        assert_eq!(s.service_name, "policy-server");
        assert_eq!(s.timeout, Duration::from_millis(300));
        let auth: Vec<&HeaderValue> = s
            .headers
            .iter()
            .filter(|(k, _)| k == "authorization")
            .map(|(_, v)| v)
            .collect();
        assert_eq!(auth, vec![&HeaderValue::from_static("Bearer explicit")]);
        assert!(s
            .headers
            .iter()
            .any(|(k, v)| k == "x-tenant" && v == "robots"));
    }

    #[test]
    fn bad_values_name_their_origin_and_fix() {
        let e = OtlpBuilder::new()
            .resolve(&env_of(&[(ENV_PROTOCOL, "http/json")]))
            .unwrap_err();
        assert_eq!(
            e,
            BuildError::UnsupportedProtocol {
                value: "http/json".into(),
                origin: Origin::Env(ENV_PROTOCOL)
            }
        );
        assert!(e.to_string().contains("OTEL_EXPORTER_OTLP_PROTOCOL"));

        let e = OtlpBuilder::new()
            .endpoint("localhost:4318")
            .resolve(&env_of(&[]))
            .unwrap_err();
        assert!(matches!(
            e,
            BuildError::InvalidEndpoint {
                origin: Origin::Builder,
                ..
            }
        ));
        assert!(e.to_string().contains("http://localhost:4318"), "{e}");

        let e = OtlpBuilder::new()
            .resolve(&env_of(&[(ENV_HEADERS, "novalue")]))
            .unwrap_err();
        assert!(matches!(e, BuildError::InvalidHeader { .. }), "{e}");

        let e = OtlpBuilder::new()
            .resolve(&env_of(&[(ENV_TIMEOUT, "soon")]))
            .unwrap_err();
        assert_eq!(
            e,
            BuildError::InvalidTimeout {
                value: "soon".into()
            }
        );
    }

    #[cfg(not(feature = "grpc"))]
    #[test]
    fn grpc_without_the_feature_says_which_feature() {
        let e = OtlpBuilder::new()
            .protocol(Protocol::Grpc)
            .resolve(&env_of(&[]))
            .unwrap_err();
        assert!(e.to_string().contains("`grpc` feature"), "{e}");
    }

    #[cfg(feature = "grpc")]
    #[test]
    fn grpc_endpoint_is_used_as_given() {
        let s = OtlpBuilder::new()
            .resolve(&env_of(&[(ENV_PROTOCOL, "grpc")]))
            .unwrap();
        assert_eq!(s.protocol, Protocol::Grpc);
        assert_eq!(s.endpoint, "http://localhost:4317");
    }
}
