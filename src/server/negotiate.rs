//! What a request asks for in its headers: the exposition format
//! (`Accept`) and the content coding (`Accept-Encoding`).

use crate::metrics::Format;

/// Content type of the OpenMetrics text format.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the Prometheus 0.0.4 text format.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The content type of an answer in `format`.
pub fn content_type(format: Format) -> &'static str {
    match format {
        Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
        Format::Prometheus => PROMETHEUS_CONTENT_TYPE,
    }
}

/// The format from an Accept header: OpenMetrics unless the client asks
/// for text/plain without offering OpenMetrics.
pub fn format(accept: Option<&str>) -> Format {
    match accept {
        Some(a) if !a.contains("application/openmetrics-text") && a.contains("text/plain") => {
            Format::Prometheus
        }
        _ => Format::OpenMetrics,
    }
}

/// The content coding of a scrape's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcceptEncoding {
    /// The body as rendered.
    Identity,
    /// The body gzip-compressed (`Content-Encoding: gzip`).
    Gzip,
}

impl AcceptEncoding {
    /// Gzip when the `Accept-Encoding` header lists `gzip` (or `*`) with a
    /// non-zero quality, as Prometheus always does; identity otherwise.
    pub fn negotiate(header: Option<&str>) -> AcceptEncoding {
        let Some(header) = header else {
            return AcceptEncoding::Identity;
        };
        let gzip = header.split(',').any(|item| {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim();
            if !(coding.eq_ignore_ascii_case("gzip") || coding == "*") {
                return false;
            }
            // q=0 means "not acceptable".
            !parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            })
        });
        if gzip {
            AcceptEncoding::Gzip
        } else {
            AcceptEncoding::Identity
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_is_negotiated() {
        for (accept, want) in [
            (None, Format::OpenMetrics),
            (Some("text/plain;version=0.0.4"), Format::Prometheus),
            // What Prometheus sends: OpenMetrics offered first.
            (
                Some("application/openmetrics-text;version=1.0.0,text/plain;q=0.5"),
                Format::OpenMetrics,
            ),
            (Some("*/*"), Format::OpenMetrics),
            // What Prometheus 2 sends: OpenMetrics preferred.
            (
                Some("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
                Format::OpenMetrics,
            ),
            (Some("text/plain; version=0.0.4"), Format::Prometheus),
        ] {
            assert_eq!(format(accept), want, "{accept:?}");
        }
    }

    #[test]
    fn each_format_has_its_content_type() {
        assert_eq!(content_type(format(None)), OPENMETRICS_CONTENT_TYPE);
        let text = format(Some("text/plain; version=0.0.4"));
        assert_eq!(content_type(text), PROMETHEUS_CONTENT_TYPE);
    }

    #[test]
    fn accept_encoding_is_negotiated() {
        use AcceptEncoding::*;
        for (header, want) in [
            (None, Identity),
            (Some(""), Identity),
            // What Prometheus sends.
            (Some("gzip"), Gzip),
            (Some("deflate, GZip;q=0.5"), Gzip),
            (Some("br, *"), Gzip),
            (Some("gzip;q=0"), Identity),
            (Some("gzip; q=0.0, identity"), Identity),
            (Some("identity"), Identity),
            (Some("x-gzip-nope"), Identity),
        ] {
            assert_eq!(AcceptEncoding::negotiate(header), want, "{header:?}");
        }
    }
}
