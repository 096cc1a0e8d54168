//! The simulated API server: a tower service answering the requests of a
//! real `kube::Client` from a [`Store`], in process (no socket, no HTTP
//! parsing; the client's request and response types are passed directly).
//!
//! It answers what the exporter asks and nothing else: GET of a collection
//! (list, or watch with `watch=true`) and GET of one object. Any other
//! method is 405, a path it does not serve is 404, both as Status JSON.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};

use super::query::{params, Filter};
use super::store::{api_version, Expired, Lookup, ServedResource, Store};
use crate::watch::Served;

/// Response body of the simulated API.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// A bookmark this often on a quiet watch, as API servers send them.
const BOOKMARK_EVERY: Duration = Duration::from_secs(20);

/// A watch without `timeoutSeconds` ends after this.
const DEFAULT_WATCH_SECONDS: u64 = 300;

/// A `kube::Client` whose every request is answered by the simulated API
/// over `store`. Must be called within a Tokio runtime (the client spawns
/// its request buffer).
pub fn client(store: Arc<Store>) -> kube::Client {
    let svc = tower::service_fn(move |req: Request<kube::client::Body>| {
        let resp = answer(&store, req.method(), req.uri());
        std::future::ready(Ok::<_, Infallible>(resp))
    });
    kube::Client::new(svc, "default")
}

fn with_status(status: StatusCode, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    let body = Full::new(Bytes::from(value.to_string())).boxed_unsync();
    with_status(status, body)
}

/// A Kubernetes `Status` failure object.
fn status_object(code: StatusCode, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    })
}

fn failure(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    json_response(code, &status_object(code, reason, message))
}

/// What a request path names.
#[derive(Debug, PartialEq, Eq)]
enum Target<'a> {
    /// A collection, in one namespace or all.
    Collection(ServedResource, Option<&'a str>),
    /// One object.
    Object(ServedResource, &'a str, &'a str),
}

fn route(path: &str) -> Option<Target<'_>> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let served = |plural: &str| {
        ServedResource::ALL.into_iter().find(|r| {
            let spec = r.spec();
            spec.group == group && spec.versions.first() == Some(&version) && spec.plural == plural
        })
    };
    match rest {
        [plural] => Some(Target::Collection(served(plural)?, None)),
        ["namespaces", ns, plural] => Some(Target::Collection(served(plural)?, Some(*ns))),
        ["namespaces", ns, plural, name] => Some(Target::Object(served(plural)?, ns, name)),
        _ => None,
    }
}

/// Answers one request.
fn answer(store: &Arc<Store>, method: &Method, uri: &http::Uri) -> Response<Body> {
    if method != Method::GET {
        let message = format!("the demo API is read-only: {method} is not allowed");
        return failure(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", &message);
    }
    let query = params(uri.query().unwrap_or_default());
    match route(uri.path()) {
        None => failure(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!(
                "the server could not find the requested resource ({})",
                uri.path()
            ),
        ),
        Some(Target::Object(resource, ns, name)) => match store.get(resource, ns, name) {
            Lookup::Found(object) => json_response(StatusCode::OK, &object),
            Lookup::Absent => failure(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("{} \"{name}\" not found", resource.spec().plural),
            ),
            Lookup::Forbidden => failure(
                StatusCode::FORBIDDEN,
                "Forbidden",
                &format!(
                    "{} \"{name}\" is forbidden in namespace \"{ns}\"",
                    resource.spec().plural
                ),
            ),
        },
        Some(Target::Collection(resource, ns)) => {
            let filter = Filter::from_params(&query);
            if query.get("watch").is_some_and(|w| w == "true" || w == "1") {
                watch(store, resource, ns, filter, &query)
            } else {
                let (items, rv) = store.list(resource, ns, |o| filter.keeps(o));
                let list = json!({
                    "apiVersion": api_version(resource),
                    "kind": format!("{}List", resource.spec().kind),
                    "metadata": {"resourceVersion": rv.to_string()},
                    "items": items,
                });
                json_response(StatusCode::OK, &list)
            }
        }
    }
}

/// An open watch: the changes not yet sent and when it ends.
struct Watch {
    store: Arc<Store>,
    resource: ServedResource,
    namespace: Option<String>,
    filter: Filter,
    wake: tokio::sync::watch::Receiver<u64>,
    /// Every change up to this version has been sent (or filtered out).
    sent: u64,
    lines: std::collections::VecDeque<Bytes>,
    ends: tokio::time::Instant,
    next_bookmark: tokio::time::Instant,
    finished: bool,
}

fn line(value: &Value) -> Bytes {
    Bytes::from(format!("{value}\n"))
}

impl Watch {
    fn bookmark(&self) -> Bytes {
        line(&json!({
            "type": "BOOKMARK",
            "object": {
                "apiVersion": api_version(self.resource),
                "kind": self.resource.spec().kind,
                "metadata": {"resourceVersion": self.sent.to_string()},
            },
        }))
    }

    /// Queues the changes after `sent`; a compacted start gets an ERROR
    /// event (410), after which the client relists.
    fn catch_up(&mut self) {
        let filter = &self.filter;
        let found =
            self.store
                .changes_after(self.sent, self.resource, self.namespace.as_deref(), |o| {
                    filter.keeps(o)
                });
        match found {
            Ok((changes, upto)) => {
                for c in changes {
                    self.lines.push_back(line(&json!({
                        "type": c.change.as_str(),
                        "object": c.object,
                    })));
                }
                self.sent = upto;
            }
            Err(Expired) => {
                let status = status_object(
                    StatusCode::GONE,
                    "Expired",
                    &format!("too old resource version: {}", self.sent),
                );
                self.lines
                    .push_back(line(&json!({"type": "ERROR", "object": status})));
                self.finished = true;
            }
        }
    }

    /// The next line of the stream, None when it ends.
    async fn next_line(&mut self) -> Option<Bytes> {
        loop {
            if let Some(l) = self.lines.pop_front() {
                return Some(l);
            }
            if self.finished {
                return None;
            }
            // Marked seen before reading, so a change made meanwhile wakes us.
            self.wake.borrow_and_update();
            self.catch_up();
            if !self.lines.is_empty() {
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(self.ends) => {
                    // A last bookmark lets the next watch start from here.
                    self.finished = true;
                    return Some(self.bookmark());
                }
                _ = tokio::time::sleep_until(self.next_bookmark) => {
                    self.next_bookmark += BOOKMARK_EVERY;
                    return Some(self.bookmark());
                }
                changed = self.wake.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
            }
        }
    }
}

fn watch(
    store: &Arc<Store>,
    resource: ServedResource,
    namespace: Option<&str>,
    filter: Filter,
    query: &HashMap<String, String>,
) -> Response<Body> {
    let streaming = query.get("sendInitialEvents").is_some_and(|v| v == "true");
    if streaming && query.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan") {
        return failure(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "sendInitialEvents requires resourceVersionMatch=NotOlderThan",
        );
    }
    let mut lines = std::collections::VecDeque::new();
    let from = if streaming {
        // A watch-list, as kube-apiserver streams it: every object as
        // ADDED, then the bookmark that ends the initial events.
        let (items, rv) = store.list(resource, namespace, |o| filter.keeps(o));
        for object in items {
            lines.push_back(line(&json!({"type": "ADDED", "object": object})));
        }
        lines.push_back(line(&json!({
            "type": "BOOKMARK",
            "object": {
                "apiVersion": api_version(resource),
                "kind": resource.spec().kind,
                "metadata": {
                    "resourceVersion": rv.to_string(),
                    "annotations": {crate::watch::INITIAL_EVENTS_END: "true"},
                },
            },
        })));
        rv
    } else {
        let Ok(from) = query
            .get("resourceVersion")
            .map_or("0", String::as_str)
            .parse::<u64>()
        else {
            return failure(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "resourceVersion is not a version this server issued",
            );
        };
        from
    };
    let seconds = query
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(DEFAULT_WATCH_SECONDS);
    let now = tokio::time::Instant::now();
    let state = Watch {
        store: store.clone(),
        resource,
        namespace: namespace.map(str::to_owned),
        filter,
        wake: store.subscribe(),
        sent: from,
        lines,
        ends: now + Duration::from_secs(seconds),
        next_bookmark: now + BOOKMARK_EVERY,
        finished: false,
    };
    let stream = futures::stream::unfold(state, |mut w| async move {
        let l = w.next_line().await?;
        Some((Ok::<_, Infallible>(Frame::data(l)), w))
    });
    with_status(StatusCode::OK, StreamBody::new(stream).boxed_unsync())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Resource;

    #[test]
    fn routes_the_paths_the_exporter_uses() {
        assert_eq!(
            route("/api/v1/pods"),
            Some(Target::Collection(Resource::Pods, None))
        );
        assert_eq!(
            route("/apis/coordination.k8s.io/v1/namespaces/demo/leases"),
            Some(Target::Collection(Resource::Leases, Some("demo")))
        );
        assert_eq!(
            route("/api/v1/namespaces/demo/pods/p1"),
            Some(Target::Object(Resource::Pods, "demo", "p1"))
        );
        assert_eq!(route("/apis/cluster.x-k8s.io/v1beta1/clusters"), None);
        assert_eq!(route("/api/v1/configmaps"), None);
        assert_eq!(route("/version"), None);
    }
}
