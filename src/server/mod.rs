//! The admin HTTP server: `/metrics`, `/healthz`, `/readyz` and `/`.
//!
//! `/metrics` is answered from the scrape cache (shared bytes, gzip when
//! asked); `listen` owns the accept loop and its limits: header-read
//! timeout, response deadline, connection cap with fair slots (`slots`),
//! page-render bound, backoff on accept errors, graceful shutdown. `tls`
//! serves the certificate (files read again when they change, or
//! self-signed); `auth` decides who may read the protected paths (the API
//! server's TokenReview and SubjectAccessReview).

pub mod auth;
mod deadline;
mod episode;
mod handshakes;
mod listen;
mod negotiate;
mod observed;
mod slots;
pub mod tls;

pub use listen::{serve, serve_with, AcceptBackoff, Config, Endpoint, Listener, Transport};

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::body::{Bytes, Incoming};
use hyper::header::{
    HeaderValue, ACCEPT, ACCEPT_ENCODING, AUTHORIZATION, CACHE_CONTROL, CONNECTION,
    CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY,
    RETRY_AFTER, VARY, WWW_AUTHENTICATE, X_CONTENT_TYPE_OPTIONS,
};
use hyper::{Method, Request, Response, StatusCode};
use std::convert::Infallible;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::health::NotUp;
use crate::metrics::{Body, ScrapeCache};
use crate::shared::Shared;
use auth::{Guard, Refusal};
use negotiate::AcceptEncoding;

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
/// is not here: [`respond`] answers it from the [`ScrapeCache`].
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

/// A scrape's body as it is cached: its chunks are sent one after the
/// other, never copied into one buffer (a body kept compressed is
/// decompressed a step at a time as the client reads).
fn chunked(status: StatusCode, content_type: &str, body: &Body) -> Response<RespBody> {
    let len = body.len();
    let frames = body.frames().map(|c| Ok::<_, Infallible>(Frame::data(c)));
    let mut r = Response::new(StreamBody::new(futures::stream::iter(frames)).boxed());
    *r.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    r.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(len));
    r
}

/// True for the on-call pages, which walk the index to render.
fn is_page(method: &Method, path: &str) -> bool {
    (method == Method::GET || method == Method::HEAD)
        && (path == "/" || path.starts_with("/locks/"))
}

/// Answers one request: `/metrics` from the scrape cache, the pages from
/// [`handle`] off the reactor, the rest from [`handle`] at once. At most `pages`' permits of on-call pages
/// render at once; past that the answer is 503 with `Retry-After: 1`: a
/// render queued behind others would hold its connection and a blocking
/// thread for nothing, and a person reloading a second later is served.
/// `reviewed` is called when the API server's review allowed the request
/// (the connection slots keep such callers longest). Every answer carries
/// [`secure`]'s headers, and every answer but one to a protected path the
/// guard let in carries `Connection: close` (see [`keep_alive`]).
pub async fn respond(
    shared: &Arc<Shared>,
    cache: &Arc<ScrapeCache>,
    pages: &Arc<Semaphore>,
    guard: &Guard,
    req: &Request<Incoming>,
    reviewed: impl FnOnce(),
) -> Response<RespBody> {
    let Some(target) = Target::of(req.uri()) else {
        let mut r = boxed(reply(
            StatusCode::BAD_REQUEST,
            "text/plain; charset=utf-8",
            "bad request: the request target must be a path, as in GET /metrics\n",
        ));
        secure(r.headers_mut());
        keep_alive(r.headers_mut(), false);
        return r;
    };
    let checked = guard
        .check(
            &shared.health,
            req.method(),
            target.path,
            req.headers().get(AUTHORIZATION),
        )
        .await;
    let (mut r, let_in) = match checked {
        Err(refusal) => (boxed(refused(&refusal)), false),
        Ok(()) => {
            let protected = !auth::is_open(target.path);
            if protected && matches!(guard, Guard::Kubernetes(_)) {
                reviewed();
            }
            (answer(shared, cache, pages, req, &target).await, protected)
        }
    };
    secure(r.headers_mut());
    keep_alive(r.headers_mut(), let_in);
    r
}

/// Only a caller the guard let into a protected path keeps its connection
/// for another request: every other answer (a probe, a refusal) says
/// `Connection: close`, and hyper reads nothing more on that connection.
/// A client that pipelines `/healthz` and reads slowly is always owed an
/// answer that moves, which the connection slots protect, and its
/// deadline starts again with each request; one answer per connection
/// bounds it by the response deadline. The kubelet closes after each probe
/// anyway, and Prometheus' scrapes are let in.
fn keep_alive(h: &mut hyper::HeaderMap, let_in: bool) {
    if !let_in {
        h.insert(CONNECTION, HeaderValue::from_static("close"));
    }
}

/// What a request asks for, when its target is a path: origin-form
/// (`/locks/ns?x`), or absolute-form (`http://host/metrics`, which RFC 9112
/// says a server must accept), of which only the path and query count,
/// its authority ignored as `Host` is. The guard checks `path` and the
/// answer is routed on the same string, so a target that is not a path
/// (`GET x`, authority-form `host:80`, asterisk-form `*`) has no path to
/// be checked for one thing and served as another: it is a 400.
struct Target<'a> {
    /// `/metrics`, `/locks/ns/Kind/name`: what the guard checks.
    path: &'a str,
    /// The path with its query, which the pages read their filters from.
    path_and_query: &'a str,
}

impl<'a> Target<'a> {
    fn of(uri: &'a hyper::Uri) -> Option<Target<'a>> {
        let pq = uri.path_and_query()?;
        pq.as_str().starts_with('/').then(|| Target {
            path: pq.path(),
            path_and_query: pq.as_str(),
        })
    }
}

/// The answer to a request the guard let through for `target`.
async fn answer(
    shared: &Arc<Shared>,
    cache: &Arc<ScrapeCache>,
    pages: &Arc<Semaphore>,
    req: &Request<Incoming>,
    target: &Target<'_>,
) -> Response<RespBody> {
    let header = |name| {
        req.headers()
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    let method = req.method().clone();
    let path = target.path_and_query.to_owned();
    let accept = header(ACCEPT).map(str::to_owned);
    if target.path == "/metrics" && (method == Method::GET || method == Method::HEAD) {
        let format = negotiate::format(accept.as_deref());
        let encoding = AcceptEncoding::negotiate(header(ACCEPT_ENCODING));
        return match cache.body(format, encoding == AcceptEncoding::Gzip).await {
            Ok(body) => {
                let mut r = chunked(StatusCode::OK, negotiate::content_type(format), &body);
                let h = r.headers_mut();
                // Caches between us and a scraper must key on the coding.
                h.insert(VARY, HeaderValue::from_static("Accept-Encoding"));
                if encoding == AcceptEncoding::Gzip {
                    h.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
                }
                r
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot render /metrics");
                boxed(reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain; charset=utf-8",
                    "encoding failed\n",
                ))
            }
        };
    }
    if !is_page(&method, target.path) {
        // Probes and refusals read a few flags: no need for a thread hop.
        return boxed(handle(shared, &method, &path));
    }
    let Ok(permit) = pages.clone().try_acquire_owned() else {
        return busy();
    };
    let shared = shared.clone();
    // The pages walk the index: keep them off the reactor threads. The
    // permit lives as long as the render, also when the client hangs up
    // meanwhile (the blocking task cannot be cancelled).
    let r = tokio::task::spawn_blocking(move || {
        let r = handle(&shared, &method, &path);
        drop(permit);
        r
    })
    .await
    .unwrap_or_else(|_| {
        reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain; charset=utf-8",
            "internal error\n",
        )
    });
    boxed(r)
}

/// Headers on every answer. The pages and `/metrics` carry lock IDs,
/// holders and release commands: no cache keeps them (`no-store`), no
/// other site frames a page (`frame-ancestors`, which a `<meta>` policy
/// cannot set), nothing loads but the pages' inline style, a browser never
/// guesses a type other than the one sent (`nosniff`), and a link followed
/// from a page does not tell the next site the path it came from
/// (`no-referrer`: paths name namespaces and objects). The rest of the
/// answers (probes, errors) say nothing worth caching either.
fn secure(h: &mut hyper::HeaderMap) {
    h.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(crate::pages::CONTENT_SECURITY_POLICY),
    );
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
}

/// The answer to a request the guard refused. The token is not echoed;
/// the user is (it is the caller's own name, as the API server's 403 says).
fn refused(refusal: &Refusal) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    match refusal {
        Refusal::Unauthenticated(why) => {
            let mut r = reply(StatusCode::UNAUTHORIZED, TEXT, format!("unauthorized: {why}\n"));
            r.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"captf-lock-exporter\""),
            );
            r
        }
        Refusal::Forbidden { user, path } => reply(
            StatusCode::FORBIDDEN,
            TEXT,
            format!(
                "forbidden: user {user:?} may not get {path:?} (RBAC: a ClusterRole with nonResourceURLs [{path:?}], verbs [get])\n"
            ),
        ),
        Refusal::Unavailable => unavailable(
            "cannot check the request: the API server does not answer reviews\n",
            "5",
        ),
        Refusal::Busy => unavailable(
            "cannot check the request now: too many reviews in flight; retry in a second\n",
            "1",
        ),
        Refusal::ReviewRefused => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            TEXT,
            "cannot check the request: the API server refuses the exporter's reviews (see its log)\n",
        ),
    }
}

/// 503 with `Retry-After: <seconds>`.
fn unavailable(text: &'static str, seconds: &'static str) -> Response<Full<Bytes>> {
    let mut r = reply(
        StatusCode::SERVICE_UNAVAILABLE,
        "text/plain; charset=utf-8",
        text,
    );
    r.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static(seconds));
    r
}

/// The answer to a page request over the render bound.
fn busy() -> Response<RespBody> {
    boxed(unavailable(
        "busy: too many pages rendering; retry in a second\n",
        "1",
    ))
}

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
    fn refusals_and_their_status_codes() {
        let retry_after = |r: &Response<Full<Bytes>>| {
            r.headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let cases = [
            (
                Refusal::Unavailable,
                StatusCode::SERVICE_UNAVAILABLE,
                Some("5"),
            ),
            (Refusal::Busy, StatusCode::SERVICE_UNAVAILABLE, Some("1")),
            (
                Refusal::ReviewRefused,
                StatusCode::INTERNAL_SERVER_ERROR,
                None,
            ),
            (
                Refusal::Unauthenticated("no token"),
                StatusCode::UNAUTHORIZED,
                None,
            ),
        ];
        for (refusal, status, after) in cases {
            let r = refused(&refusal);
            assert_eq!(r.status(), status, "{refusal:?}");
            assert_eq!(retry_after(&r).as_deref(), after, "{refusal:?}");
        }
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
