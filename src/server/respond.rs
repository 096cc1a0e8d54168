//! Answering one request: the request target, the guard, then
//! `/metrics` from the scrape cache, the pages off the reactor, the probes
//! at once; the headers every answer carries.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::{
    HeaderValue, ACCEPT, ACCEPT_ENCODING, AUTHORIZATION, CACHE_CONTROL, CONNECTION,
    CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY,
    RETRY_AFTER, VARY, WWW_AUTHENTICATE, X_CONTENT_TYPE_OPTIONS,
};
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::Semaphore;

use super::auth::{self, Guard, Refusal};
use super::negotiate::{self, AcceptEncoding};
use super::pins::{Pin, Pins};
use super::slots::Conn;
use super::{boxed, handle, reply, RespBody};
use crate::metrics::{Body, ScrapeCache};
use crate::shared::Shared;

/// A scrape's body as it is cached: its chunks are sent one after the
/// other, never copied into one buffer (a body kept compressed is
/// decompressed a step at a time as the client reads). `pin` lives as
/// long as the body is being sent.
fn chunked(status: StatusCode, content_type: &str, body: &Body, pin: Pin) -> Response<RespBody> {
    let len = body.len();
    let frames = body.frames().map(move |c| {
        let _held = &pin;
        Ok::<_, Infallible>(Frame::data(c))
    });
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

/// What every connection's requests are answered from.
pub(super) struct Answers {
    pub(super) shared: Arc<Shared>,
    pub(super) cache: Arc<ScrapeCache>,
    /// The bound on on-call page renders in flight.
    pub(super) pages: Arc<Semaphore>,
    pub(super) guard: Guard,
    /// The scrapes in flight, by the generation of their bodies.
    pub(super) pins: Arc<Pins>,
}

impl Answers {
    /// Answers one request of `caller`: `/metrics` from the scrape cache,
    /// the pages from [`handle`] off the reactor, the rest from [`handle`]
    /// at once. At most `pages`' permits of on-call pages render at once;
    /// past that the answer is 503 with `Retry-After: 1`: a render queued
    /// behind others would hold its connection and a blocking thread for
    /// nothing, and a person reloading a second later is served. A request
    /// the API server's review allowed marks `caller` reviewed (the
    /// connection slots keep such callers longest). Every answer carries
    /// [`secure`]'s headers, and every refusal `Connection: close` (see
    /// [`close_after_refusal`]).
    pub(super) async fn respond(
        &self,
        req: &Request<Incoming>,
        caller: &Arc<Conn>,
    ) -> Response<RespBody> {
        let Some(target) = Target::of(req.uri()) else {
            let mut r = boxed(reply(
                StatusCode::BAD_REQUEST,
                "text/plain; charset=utf-8",
                "bad request: the request target must be a path, as in GET /metrics\n",
            ));
            secure(r.headers_mut());
            close_after_refusal(r.headers_mut());
            return r;
        };
        let checked = self
            .guard
            .check(
                &self.shared.health,
                req.method(),
                target.path,
                req.headers().get(AUTHORIZATION),
            )
            .await;
        let (mut r, refusal) = match checked {
            Err(refusal) => (boxed(refused(&refusal)), true),
            Ok(()) => {
                let protected = !auth::is_open(target.path);
                if protected {
                    caller.let_in();
                    if matches!(self.guard, Guard::Kubernetes(_)) {
                        caller.reviewed();
                    }
                }
                (self.answer(req, &target, caller).await, false)
            }
        };
        secure(r.headers_mut());
        if refusal {
            close_after_refusal(r.headers_mut());
        }
        r
    }

    /// The answer to a request the guard let through for `target`.
    async fn answer(
        &self,
        req: &Request<Incoming>,
        target: &Target<'_>,
        caller: &Arc<Conn>,
    ) -> Response<RespBody> {
        let (shared, cache, pages) = (&self.shared, &self.cache, &self.pages);
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
                    // Taken after the body: a render in between makes the body
                    // look newer than it is, by one generation at most.
                    let pin = self.pins.hold(cache.renders(), caller);
                    let ct = negotiate::content_type(format);
                    let mut r = chunked(StatusCode::OK, ct, &body, pin);
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
}

/// A refusal (and a 400 for a target that is not a path) says `Connection:
/// close`: hyper reads nothing more on that connection, so a client without
/// a token is answered once per connection. A probe's answer keeps its
/// connection, as a keep-alive prober expects; a client that pipelines
/// probes and reads slowly is instead given no hold on its slot (see
/// [`super::slots`]): only an answer to a protected path the guard let in
/// keeps a slot while it moves.
fn close_after_refusal(h: &mut hyper::HeaderMap) {
    h.insert(CONNECTION, HeaderValue::from_static("close"));
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
}
