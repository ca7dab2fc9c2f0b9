//! Headers sent with every export: `OTEL_EXPORTER_OTLP_HEADERS` parsed, and
//! the builder's headers laid over it.

use http::{HeaderName, HeaderValue};

use super::error::{BuildError, Origin};

/// The headers of each `(variable, value)` of `env` in turn (`k=v,k2=v2`,
/// URL-encoded values; a later variable's header replaces an earlier one of
/// the same name), then `explicit`, which replace them all.
pub(super) fn resolve_headers(
    env: &[(&'static str, Option<String>)],
    explicit: &[(String, String)],
) -> Result<Vec<(HeaderName, HeaderValue)>, BuildError> {
    let mut headers: Vec<(HeaderName, HeaderValue)> = Vec::new();
    for (var, raw) in env {
        let Some(raw) = raw else { continue };
        for pair in raw.split(',').filter(|p| !p.trim().is_empty()) {
            let bad = || BuildError::InvalidHeader {
                header: pair.trim().to_owned(),
                origin: Origin::Env(var),
            };
            let (k, v) = pair.split_once('=').ok_or_else(bad)?;
            let value = percent_decode(v.trim()).ok_or_else(bad)?;
            insert_header(&mut headers, k.trim(), &value).ok_or_else(bad)?;
        }
    }
    for (k, v) in explicit {
        insert_header(&mut headers, k.trim(), v).ok_or_else(|| BuildError::InvalidHeader {
            header: k.clone(),
            origin: Origin::Builder,
        })?;
    }
    Ok(headers)
}

/// Adds a header, replacing an earlier one of the same name.
fn insert_header(
    headers: &mut Vec<(HeaderName, HeaderValue)>,
    name: &str,
    value: &str,
) -> Option<()> {
    let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
    let value = HeaderValue::from_str(value).ok()?;
    headers.retain(|(n, _)| *n != name);
    headers.push((name, value));
    Some(())
}

/// Decodes `%XX` escapes (W3C baggage-style values in `OTEL_EXPORTER_OTLP_HEADERS`).
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_rejects_broken_escapes() {
        assert_eq!(percent_decode("a%2Cb").as_deref(), Some("a,b"));
        assert_eq!(percent_decode("a%2"), None);
        assert_eq!(percent_decode("a%zz"), None);
    }
}
