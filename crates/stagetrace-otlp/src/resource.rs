//! The resource naming the robot, shared by both signals.

use opentelemetry::{Key, KeyValue, Value};
use opentelemetry_sdk::Resource;

use crate::config::DEFAULT_SERVICE_NAME;

/// The resource of both signals: the SDK's detectors (`OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES` with its `service.name`), then `attributes`
/// and `service_name` over them; `service.name` defaults to `stagetrace`
/// (never the SDK's `unknown_service`), `host.name` to this host's name and
/// `service.instance.id` to `<host.name>-<pid>`.
pub(crate) fn resource(service_name: Option<&str>, attributes: &[(String, String)]) -> Resource {
    let detected = Resource::builder().build();
    let has = |key: &'static str| {
        detected
            .get(&Key::from_static_str(key))
            .is_some_and(|v| !v.as_str().starts_with("unknown_service"))
    };
    let host = hostname();
    let mut extra: Vec<KeyValue> = Vec::new();
    if !has("service.name") {
        extra.push(KeyValue::new("service.name", DEFAULT_SERVICE_NAME));
    }
    if !has("host.name") {
        if let Some(h) = &host {
            extra.push(KeyValue::new("host.name", h.clone()));
        }
    }
    if !has("service.instance.id") {
        let id = format!(
            "{}-{}",
            host.as_deref().unwrap_or("host"),
            std::process::id()
        );
        extra.push(KeyValue::new("service.instance.id", id));
    }
    extra.extend(
        attributes
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), Value::from(v.clone()))),
    );
    if let Some(name) = service_name.filter(|n| !n.trim().is_empty()) {
        extra.push(KeyValue::new("service.name", name.trim().to_owned()));
    }
    Resource::builder().with_attributes(extra).build()
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}
