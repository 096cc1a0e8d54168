//! HTTP helpers (bodies, Status replies, query strings, Kubernetes paths)
//! and the router that sends each request to the store.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use captf_lock_exporter::core::suffix::{lock_lease_name, state_suffix};
use captf_lock_exporter::index::Resource;
use captf_lock_exporter::watch::Served;
use chrono::Utc;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use captf_lock_exporter::demo::query::params;

use crate::*;

pub(crate) type Body = BoxBody<Bytes, Infallible>;

/// A streamed body fed by a channel (a watch).
pub(crate) struct ChannelBody(pub(crate) mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

pub(crate) fn full(
    status: StatusCode,
    content_type: &str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

pub(crate) fn json_reply(status: StatusCode, v: &Value) -> Response<Body> {
    full(
        status,
        "application/json",
        serde_json::to_vec(v).unwrap_or_default(),
    )
}

pub(crate) fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
    let v = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code});
    json_reply(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &v,
    )
}

/// A Kubernetes path: resource, namespace, object name.
pub(crate) fn route(path: &str) -> Option<(Resource, Option<String>, Option<String>)> {
    let rest = if let Some(r) = path.strip_prefix("/api/") {
        ("", r)
    } else {
        let r = path.strip_prefix("/apis/")?;
        let (group, r) = r.split_once('/')?;
        (group, r)
    };
    let (group, rest) = rest;
    let (version, rest) = rest.split_once('/')?;
    let segs: Vec<&str> = rest.split('/').collect();
    let (ns, plural, name) = match segs.as_slice() {
        [plural] => (None, *plural, None),
        ["namespaces", ns, plural] => (Some(*ns), *plural, None),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name)),
        _ => return None,
    };
    let resource = Resource::ALL.into_iter().find(|r| {
        let s = r.spec();
        s.group == group && s.plural == plural && s.versions.first() == Some(&version)
    })?;
    Some((resource, ns.map(str::to_owned), name.map(str::to_owned)))
}

impl Store {
    pub(crate) async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        let path = req.uri().path().to_owned();
        let q = params(req.uri().query().unwrap_or_default());
        let method = req.method().clone();
        if method == Method::POST {
            if let Some(reply) = self.churn(&path, &q) {
                return reply;
            }
        }
        match (method, path.as_str()) {
            (Method::GET, "/_stats") => return json_reply(StatusCode::OK, &self.stats()),
            (Method::GET, "/_info") => return json_reply(StatusCode::OK, &self.info()),
            (Method::GET, "/_static") => {
                let body = self
                    .static_body
                    .read()
                    .map(|b| b.clone())
                    .unwrap_or_default();
                return full(StatusCode::OK, "text/plain; version=0.0.4", body);
            }
            (Method::PUT, "/_static") => {
                let body = match req.into_body().collect().await {
                    Ok(b) => b.to_bytes(),
                    Err(e) => return status(400, "BadRequest", &e.to_string()),
                };
                let n = body.len();
                if let Ok(mut s) = self.static_body.write() {
                    *s = body;
                }
                return json_reply(StatusCode::OK, &json!({"bytes": n}));
            }
            (Method::GET, "/_objects") => return json_reply(StatusCode::OK, &self.objects()),
            (Method::POST, "/_change/release") => {
                let key = q.get("lease").cloned().unwrap_or_default();
                return self.change(Resource::Leases, &key, |g| with_lock(g, None));
            }
            (Method::POST, "/_change/lock") => {
                let key = q.get("lease").cloned().unwrap_or_default();
                let (Some(id), Some(who)) = (q.get("id"), q.get("who")) else {
                    return status(400, "BadRequest", "lock needs id and who");
                };
                let created = q
                    .get("created")
                    .and_then(|c| c.parse().ok())
                    .unwrap_or_else(|| Utc::now().timestamp());
                let lock = Lock::Custom {
                    id: id.clone(),
                    who: who.clone(),
                    created,
                };
                return self.change(Resource::Leases, &key, |g| with_lock(g, Some(lock)));
            }
            (Method::POST, "/_change/pod-failed" | "/_change/pod-phase") => {
                let key = q.get("pod").cloned().unwrap_or_default();
                let new_phase = match q.get("phase").map(String::as_str) {
                    None | Some("Failed") => "Failed",
                    Some("Succeeded") => "Succeeded",
                    Some("Running") => "Running",
                    Some(p) => return status(400, "BadRequest", &format!("phase {p}?")),
                };
                return self.change(Resource::Pods, &key, |g| match g {
                    Gen::Pod {
                        i,
                        history,
                        attempt,
                        ..
                    } => Some(Gen::Pod {
                        i,
                        history,
                        attempt,
                        phase: new_phase,
                    }),
                    _ => None,
                });
            }
            (Method::POST, "/_change/pod-create") => {
                let (Some(i), Some(attempt)) = (
                    q.get("i").and_then(|v| v.parse().ok()),
                    q.get("attempt").and_then(|v| v.parse().ok()),
                ) else {
                    return status(400, "BadRequest", "pod-create needs i and attempt");
                };
                return self.add(
                    Resource::Pods,
                    Gen::Pod {
                        i,
                        history: false,
                        attempt,
                        phase: "Running",
                    },
                );
            }
            (Method::POST, "/_change/pod-delete") => {
                let key = q.get("pod").cloned().unwrap_or_default();
                return self.delete(Resource::Pods, &key);
            }
            (Method::POST, "/_change/create") => {
                let Some(i) = q.get("i").and_then(|v| v.parse().ok()) else {
                    return status(400, "BadRequest", "create needs i");
                };
                let edit = TfEdit::initial(&self.fleet, i);
                let r = self.add(self.terraform_resource(i), Gen::Terraform { i, edit });
                if r.status() != StatusCode::OK {
                    return r;
                }
                let r = self.add(Resource::Leases, Gen::Lease { i, held: None });
                if r.status() != StatusCode::OK {
                    return r;
                }
                let o = self.fleet.obj(i);
                let lease = lock_lease_name(&state_suffix(&o.namespace, o.kind, &o.name));
                return json_reply(
                    StatusCode::OK,
                    &json!({"i": i, "namespace": o.namespace, "kind": o.kind.as_str(), "name": o.name,
                        "lease": format!("{}/{lease}", o.namespace)}),
                );
            }
            (Method::POST, "/_change/delete") => {
                let Some(i) = q.get("i").and_then(|v| v.parse::<usize>().ok()) else {
                    return status(400, "BadRequest", "delete needs i");
                };
                let o = self.fleet.obj(i);
                let lease = lock_lease_name(&state_suffix(&o.namespace, o.kind, &o.name));
                let r = self.delete(Resource::Leases, &format!("{}/{lease}", o.namespace));
                if r.status() != StatusCode::OK {
                    return r;
                }
                return self.delete(
                    self.terraform_resource(i),
                    &format!("{}/{}", o.namespace, o.name),
                );
            }
            (Method::POST, "/_change/gone") => {
                let n = self.gone.send(()).unwrap_or(0);
                return json_reply(StatusCode::OK, &json!({"watches": n}));
            }
            (Method::GET, _) => {}
            (m, _) => {
                self.count("other", m.as_str());
                return status(405, "MethodNotAllowed", "read-only fake");
            }
        }
        let Some((resource, ns, name)) = route(&path) else {
            self.count("other", "unknown-path");
            return status(
                404,
                "NotFound",
                &format!("the server could not find {path}"),
            );
        };
        let what = resource.as_str();
        match (name, q.get("watch").map(String::as_str)) {
            (Some(name), _) => {
                self.count("get", what);
                self.get(resource, ns.as_deref().unwrap_or_default(), &name)
            }
            (None, Some("true" | "1")) => {
                self.count("watch", what);
                self.watch(resource, ns, &q)
            }
            (None, _) => {
                self.count("list", what);
                if q.get("continue").is_none_or(|c| c.is_empty()) {
                    self.count("list_start", what);
                }
                self.list(resource, ns.as_deref(), &q)
            }
        }
    }
}
