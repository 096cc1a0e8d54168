//! The admin HTTP server: `/metrics`, `/healthz`, `/readyz` and `/`.
//!
//! `respond` answers one request: the target, the guard, `/metrics` from
//! the scrape cache (shared bytes, gzip when asked, at most a few
//! superseded snapshots kept by slow readers: `pins`), the pages, the
//! probes. `listen` owns the accept loop and its limits: header-read
//! timeout, response deadline, connection cap with fair slots (`slots`),
//! page-render bound, backoff on accept errors, failed TLS handshakes
//! summed up (`handshakes`), graceful shutdown. `tls` serves the
//! certificate (files read again when they change, or self-signed);
//! `auth` decides who may read the protected paths (the API server's
//! TokenReview and SubjectAccessReview).

pub mod auth;
mod deadline;
mod episode;
mod handshakes;
mod listen;
mod negotiate;
mod observed;
mod pins;
mod respond;
mod slots;
pub mod tls;

pub use listen::{serve, serve_with, AcceptBackoff, Config, Endpoint, Listener, Transport};

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::CONTENT_TYPE;
use hyper::{Method, Response, StatusCode};
use std::convert::Infallible;
use tokio::net::TcpListener;

use crate::health::NotUp;
use crate::shared::Shared;

/// Errors of the admin server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr} (--listen-address): {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    r
}

/// Answers a probe, a page or a refused method from memory. `/metrics`
/// is not here: [`respond::Answers::respond`] answers it from the
/// [`ScrapeCache`](crate::metrics::ScrapeCache).
pub fn handle(shared: &Arc<Shared>, method: &Method, path: &str) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != Method::GET && method != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "method not allowed\n");
    }
    // On-call pages (src/pages): `/` with its query, `/locks/<ns>/<kind>/<name>`.
    const HTML: &str = "text/html; charset=utf-8";
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    if path == "/" {
        return reply(
            StatusCode::OK,
            HTML,
            crate::pages::locks_page(shared, query),
        );
    }
    if let Some(rest) = path.strip_prefix("/locks/") {
        return match crate::pages::lock_page(shared, rest) {
            Some(page) => reply(StatusCode::OK, HTML, page),
            None => reply(StatusCode::NOT_FOUND, TEXT, "no such held lock\n"),
        };
    }
    match path {
        "/healthz" | "/livez" | "/live" => reply(StatusCode::OK, TEXT, "ok\n"),
        "/readyz" | "/ready" => {
            let (status, head) = if shared.health.ready() {
                (StatusCode::OK, "ready")
            } else {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "not ready: waiting for the first list of every watch",
                )
            };
            reply(status, TEXT, readiness_body(head, &shared.health.not_up()))
        }
        _ => reply(StatusCode::NOT_FOUND, TEXT, "not found\n"),
    }
}

/// `/readyz` text: the verdict, then every watch that is not up. After
/// start-up the status stays 200 (the pod must stay scrapeable so that
/// `watch_up 0` reaches the alerts) and the body says what is stale.
fn readiness_body(head: &str, not_up: &[NotUp]) -> String {
    let mut out = format!("{head}\n");
    for w in not_up {
        let scope = if w.scope.is_empty() {
            "all namespaces"
        } else {
            &w.scope
        };
        let since = match w.since_success {
            Some(d) => format!("last success {} s ago", d.as_secs()),
            None => "never succeeded".to_string(),
        };
        let reason = w.reason.map_or("pending", |r| r.as_str());
        out.push_str(&format!(
            "watch {} ({scope}) down: {reason}, {since}; its data may be stale\n",
            w.resource.as_str()
        ));
    }
    out
}

/// Binds `addr`; fails at start with a message naming the flag.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

/// The body type of every answer.
pub type RespBody = BoxBody<Bytes, Infallible>;

fn boxed(r: Response<Full<Bytes>>) -> Response<RespBody> {
    r.map(|b| b.boxed())
}

#[cfg(test)]
mod documented_limits;
#[cfg(test)]
mod tests {
    use super::*;

    fn content_type(r: &Response<Full<Bytes>>) -> &str {
        r.headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    #[test]
    fn routes_and_methods() {
        let (shared, _rx) = Shared::new();
        let get = |path: &str| handle(&shared, &Method::GET, path);
        assert_eq!(get("/healthz").status(), StatusCode::OK);
        assert_eq!(get("/live").status(), StatusCode::OK);
        // No watch has listed yet.
        assert_eq!(get("/readyz").status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(get("/nope").status(), StatusCode::NOT_FOUND);
        let page = get("/");
        assert_eq!(page.status(), StatusCode::OK);
        assert_eq!(content_type(&page), "text/html; charset=utf-8");
        assert!(format!("{:?}", page.body()).contains("captf-lock-exporter"));
        assert_eq!(
            handle(&shared, &Method::POST, "/metrics").status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
        let id = shared.health.register(crate::index::Resource::Leases, "");
        shared.health.on_synced(id);
        assert_eq!(get("/ready").status(), StatusCode::OK);
        shared
            .health
            .on_error(id, crate::health::ErrorReason::Timeout);
        let after = get("/ready");
        assert_eq!(after.status(), StatusCode::OK, "start-up semantics only");
        let body = format!("{:?}", after.body());
        assert!(
            body.contains("watch leases (all namespaces) down: timeout"),
            "{body}"
        );
    }
}
