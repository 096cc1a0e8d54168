//! The requests the endpoint's guard sends: exactly a POST of a TokenReview
//! and a POST of a SubjectAccessReview (non-resource URL, verb get), each
//! carrying the User-Agent, and nothing else, over a real `kube::Client`
//! answered by a recording service. A token the API server rejects is
//! never followed by a SubjectAccessReview.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use captf_lock_exporter::client::{observe, ApiLink};
use captf_lock_exporter::health::Health;
use captf_lock_exporter::server::auth::{Guard, KubeReviewer, Refusal};
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::header::HeaderValue;
use serde_json::{json, Value};

/// One request as the API server got it: method, path, User-Agent, body.
type Call = (Method, String, String, Value);

#[derive(Clone, Default)]
struct Recorded(Arc<Mutex<Vec<Call>>>);

fn answer(path: &str, body: &Value) -> Value {
    if path.ends_with("/tokenreviews") {
        let ok = body["spec"]["token"] == "good";
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": body["spec"],
               "status": if ok { json!({"authenticated": true, "user": {"username": "system:serviceaccount:monitoring:prometheus",
                   "uid": "u-1", "groups": ["system:serviceaccounts", "system:authenticated"]}}) } else { json!({"authenticated": false}) }})
    } else {
        let attrs = &body["spec"]["nonResourceAttributes"];
        let allowed = attrs["path"] == "/metrics" && attrs["verb"] == "get";
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": body["spec"],
               "status": {"allowed": allowed}})
    }
}

fn client(rec: &Recorded) -> kube::Client {
    let rec = rec.clone();
    let svc = tower::service_fn(move |req: Request<kube::client::Body>| {
        let rec = rec.clone();
        async move {
            let (parts, body) = req.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let ua = parts
                .headers
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let path = parts.uri.path().to_string();
            let reply = answer(&path, &value);
            if let Ok(mut log) = rec.0.lock() {
                log.push((parts.method.clone(), path, ua, value));
            }
            let mut resp = Response::new(Full::new(Bytes::from(reply.to_string())));
            resp.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            Ok::<_, Infallible>(resp)
        }
    });
    kube::Client::new(observe(svc, Arc::new(ApiLink::new())), "default")
}

#[tokio::test]
async fn the_guard_sends_two_reviews_and_nothing_else() {
    let rec = Recorded::default();
    let guard = Guard::kubernetes(Arc::new(KubeReviewer::new(
        client(&rec),
        Duration::from_secs(5),
    )));
    let health = Health::new();
    let bearer = |t: &str| HeaderValue::from_str(&format!("Bearer {t}")).ok();
    let good = bearer("good");
    assert_eq!(
        guard
            .check(&health, &Method::GET, "/metrics", good.as_ref())
            .await,
        Ok(())
    );
    assert!(matches!(
        guard
            .check(
                &health,
                &Method::GET,
                "/locks/ns/TerraformMachine/web",
                good.as_ref()
            )
            .await,
        Err(Refusal::Forbidden { .. })
    ));
    let bad = bearer("bad");
    assert!(matches!(
        guard
            .check(&health, &Method::GET, "/metrics", bad.as_ref())
            .await,
        Err(Refusal::Unauthenticated(_))
    ));
    let log = rec.0.lock().map(|l| l.clone()).unwrap_or_default();
    let paths: Vec<&str> = log.iter().map(|(_, p, _, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/apis/authentication.k8s.io/v1/tokenreviews",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            "/apis/authentication.k8s.io/v1/tokenreviews",
        ],
        "one TokenReview per token, one SubjectAccessReview per path, none for a rejected token"
    );
    for (method, path, ua, body) in &log {
        assert_eq!(method, Method::POST, "{path}");
        assert!(ua.starts_with("captf-lock-exporter/"), "{path}: {ua:?}");
        if path.ends_with("subjectaccessreviews") {
            let spec = &body["spec"];
            assert_eq!(spec["user"], "system:serviceaccount:monitoring:prometheus");
            assert_eq!(spec["uid"], "u-1");
            assert_eq!(spec["groups"][1], "system:authenticated");
            assert_eq!(spec["nonResourceAttributes"]["verb"], "get");
            assert!(spec.get("resourceAttributes").is_none_or(Value::is_null));
        }
    }
}
