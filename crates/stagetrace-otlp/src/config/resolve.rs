//! Resolving the builder against the environment: an explicit setting beats
//! the standard `OTEL_*` variable, which beats the default.

use std::time::Duration;

use http::{HeaderName, HeaderValue};
use stagetrace::AdviceFor;

use super::builder::{OtlpBuilder, DEFAULT_SERVICE_NAME, DEFAULT_TIMEOUT};
use super::endpoint::{default_endpoint, endpoint_url};
use super::env::{
    EnvLookup, ENV_ENDPOINT, ENV_HEADERS, ENV_PROTOCOL, ENV_RESOURCE_ATTRIBUTES, ENV_SERVICE_NAME,
    ENV_TIMEOUT, ENV_TRACES_ENDPOINT, ENV_TRACES_EXPORTER, ENV_TRACES_HEADERS, ENV_TRACES_PROTOCOL,
    ENV_TRACES_TIMEOUT,
};
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
    /// `OTEL_TRACES_EXPORTER=none`: nothing is exported.
    pub(crate) disabled: bool,
    pub(crate) resource_attributes: Vec<(String, String)>,
    /// Whose settings the loss warning names.
    pub(crate) advice: AdviceFor,
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
        let env = EnvLookup(env);
        let disabled = env.exporter_off(ENV_TRACES_EXPORTER)?;
        let protocol = resolve_protocol(self.protocol, env)?;
        let endpoint = resolve_endpoint(self.endpoint, protocol, env)?;
        let headers = resolve_headers(
            &[
                (ENV_HEADERS, env.get(ENV_HEADERS)),
                (ENV_TRACES_HEADERS, env.get(ENV_TRACES_HEADERS)),
            ],
            &self.headers,
        )?;
        let service_name = resolve_service_name(self.service_name, env);
        let timeout = resolve_timeout(self.timeout, env)?;

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
            disabled,
            resource_attributes: self.resource_attributes,
            advice: self.advice,
        })
    }
}

/// The builder's protocol, else the traces or generic variable's, else
/// HTTP/protobuf; gRPC only with the `grpc` feature.
fn resolve_protocol(
    explicit: Option<Protocol>,
    env: EnvLookup<'_>,
) -> Result<Protocol, BuildError> {
    let protocol = match explicit {
        Some(p) => p,
        None => env.protocol(ENV_TRACES_PROTOCOL, ENV_PROTOCOL)?,
    };
    if protocol == Protocol::Grpc && !cfg!(feature = "grpc") {
        let origin = if explicit.is_some() {
            Origin::Builder
        } else {
            Origin::Env(
                env.either(ENV_TRACES_PROTOCOL, ENV_PROTOCOL)
                    .map_or(ENV_PROTOCOL, |(v, _)| v),
            )
        };
        return Err(BuildError::UnsupportedProtocol {
            value: Protocol::Grpc.name().into(),
            origin,
        });
    }
    Ok(protocol)
}

/// The full URL the requests go to: the builder's endpoint, else the
/// traces variable's (as is), else the generic one's, else the default.
fn resolve_endpoint(
    explicit: Option<String>,
    protocol: Protocol,
    env: EnvLookup<'_>,
) -> Result<String, BuildError> {
    match explicit.filter(|e| !e.trim().is_empty()) {
        Some(e) => endpoint_url(e.trim(), protocol, Origin::Builder),
        None => match env.either(ENV_TRACES_ENDPOINT, ENV_ENDPOINT) {
            // The signal-specific URL is used as is: no path is added.
            Some((ENV_TRACES_ENDPOINT, e)) => {
                endpoint_url(e.trim(), Protocol::Grpc, Origin::Env(ENV_TRACES_ENDPOINT))
            }
            Some((var, e)) => endpoint_url(e.trim(), protocol, Origin::Env(var)),
            None => endpoint_url(default_endpoint(protocol), protocol, Origin::Builder),
        },
    }
}

/// The builder's service name, else `OTEL_SERVICE_NAME`, else the
/// `service.name` in `OTEL_RESOURCE_ATTRIBUTES`, else the default.
fn resolve_service_name(explicit: Option<String>, env: EnvLookup<'_>) -> String {
    explicit
        .filter(|s| !s.trim().is_empty())
        .or_else(|| env.get(ENV_SERVICE_NAME).map(|s| s.trim().to_owned()))
        .or_else(|| {
            env.get(ENV_RESOURCE_ATTRIBUTES)
                .and_then(|attrs| resource_service_name(&attrs))
        })
        .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned())
}

/// The builder's export timeout, else the traces or generic variable's (in
/// ms), else the default.
fn resolve_timeout(explicit: Option<Duration>, env: EnvLookup<'_>) -> Result<Duration, BuildError> {
    match explicit {
        Some(t) => Ok(t),
        None => match env.either(ENV_TRACES_TIMEOUT, ENV_TIMEOUT) {
            Some((var, v)) => v
                .trim()
                .parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| BuildError::InvalidTimeout { var, value: v }),
            None => Ok(DEFAULT_TIMEOUT),
        },
    }
}

/// The `service.name` of an `OTEL_RESOURCE_ATTRIBUTES` value
/// (`key=value,…`, values percent-encoded).
fn resource_service_name(attrs: &str) -> Option<String> {
    attrs.split(',').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k.trim() == "service.name")
            .then(|| v.trim().replace("%20", " "))
            .filter(|v| !v.is_empty())
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// The resolved headers as (name, value) strings, in order.
    fn header_pairs(s: &Settings) -> Vec<(String, String)> {
        s.headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect()
    }

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
        assert_eq!(
            header_pairs(&s),
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
            .resolve(&env_of(&[(ENV_PROTOCOL, "http/xml")]))
            .unwrap_err();
        assert_eq!(
            e,
            BuildError::UnsupportedProtocol {
                value: "http/xml".into(),
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
                var: ENV_TIMEOUT,
                value: "soon".into()
            }
        );
    }

    #[test]
    fn traces_specific_variables_beat_the_generic_ones() {
        let env = env_of(&[
            (ENV_ENDPOINT, "http://generic:4318"),
            (ENV_TRACES_ENDPOINT, "http://traces:4318/custom/path"),
            (ENV_PROTOCOL, "http/protobuf"),
            (ENV_TRACES_PROTOCOL, "http/json"),
            (ENV_HEADERS, "authorization=generic,x-tenant=robots"),
            (ENV_TRACES_HEADERS, "authorization=traces"),
            (ENV_TIMEOUT, "2500"),
            (ENV_TRACES_TIMEOUT, "700"),
        ]);
        let s = OtlpBuilder::new().resolve(&env).unwrap();
        // The signal-specific URL is used as is (OTLP spec): no /v1/traces added.
        assert_eq!(s.endpoint, "http://traces:4318/custom/path");
        assert_eq!(s.protocol, Protocol::HttpJson);
        assert_eq!(s.timeout, Duration::from_millis(700));
        assert_eq!(
            header_pairs(&s),
            vec![
                ("x-tenant".into(), "robots".into()),
                ("authorization".into(), "traces".into()),
            ]
        );
        let e = OtlpBuilder::new()
            .resolve(&env_of(&[(ENV_TRACES_TIMEOUT, "soon")]))
            .unwrap_err();
        assert!(e.to_string().contains(ENV_TRACES_TIMEOUT), "{e}");
        // The builder still beats both.
        let s = OtlpBuilder::new()
            .endpoint("http://explicit:4318")
            .resolve(&env)
            .unwrap();
        assert_eq!(s.endpoint, "http://explicit:4318/v1/traces");
    }

    #[test]
    fn service_name_in_resource_attributes_is_honoured() {
        let attrs = (
            ENV_RESOURCE_ATTRIBUTES,
            "deployment=lab,service.name=arm-3,x=y",
        );
        let s = OtlpBuilder::new().resolve(&env_of(&[attrs])).unwrap();
        assert_eq!(s.service_name, "arm-3");
        let s = OtlpBuilder::new()
            .resolve(&env_of(&[attrs, (ENV_SERVICE_NAME, "arm-4")]))
            .unwrap();
        assert_eq!(s.service_name, "arm-4");
        let s = OtlpBuilder::new()
            .service_name("explicit")
            .resolve(&env_of(&[attrs, (ENV_SERVICE_NAME, "arm-4")]))
            .unwrap();
        assert_eq!(s.service_name, "explicit");
    }

    #[test]
    fn traces_exporter_none_disables_and_others_are_refused() {
        let s = OtlpBuilder::new().resolve(&env_of(&[])).unwrap();
        assert!(!s.disabled);
        let s = OtlpBuilder::new()
            .resolve(&env_of(&[(ENV_TRACES_EXPORTER, "none")]))
            .unwrap();
        assert!(s.disabled);
        let e = OtlpBuilder::new()
            .resolve(&env_of(&[(ENV_TRACES_EXPORTER, "zipkin")]))
            .unwrap_err();
        assert_eq!(
            e,
            BuildError::UnsupportedExporter {
                value: "zipkin".into(),
                origin: Origin::Env(ENV_TRACES_EXPORTER)
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
