//! The requests the endpoint's guard sends: exactly a POST of a TokenReview
//! and a POST of a SubjectAccessReview (non-resource URL, verb get), each
//! carrying the User-Agent, and nothing else, over a real `kube::Client`
//! answered by a recording service. A token the API server rejects is
//! never followed by a SubjectAccessReview. With `--auth-audiences` the
//! TokenReview asks for them and an answer for another audience is a
//! rejection; the API server's 403 to the exporter's own review is a
//! refusal, its 503 no answer (only the latter may let an older answer
//! stand in).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

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

/// The API server's answer: tokens `good` (authenticated for the
/// audiences asked for, as an audience-aware server answers), `api-aud`
/// (for the API server's audience only), `no-aud` (answered without
/// audiences); `forbidden` and `unavailable` get that status code.
fn answer(path: &str, body: &Value) -> (u16, Value) {
    if path.ends_with("/tokenreviews") {
        let token = body["spec"]["token"].as_str().unwrap_or("");
        let audiences = match token {
            "good" => body["spec"]["audiences"].clone(),
            "api-aud" => json!(["https://kubernetes.default.svc"]),
            _ => Value::Null,
        };
        let code = match token {
            "forbidden" => 403,
            "unavailable" => 503,
            _ => 200,
        };
        if code != 200 {
            return (
                code,
                json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code,
                                 "message": if code == 403 { "tokenreviews.authentication.k8s.io is forbidden" } else { "etcd is down" }}),
            );
        }
        let ok = matches!(token, "good" | "api-aud" | "no-aud");
        (
            200,
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": body["spec"],
               "status": if ok { json!({"authenticated": true, "audiences": audiences, "user": {"username": "system:serviceaccount:monitoring:prometheus",
                   "uid": "u-1", "groups": ["system:serviceaccounts", "system:authenticated"]}}) } else { json!({"authenticated": false}) }}),
        )
    } else {
        let attrs = &body["spec"]["nonResourceAttributes"];
        let allowed = attrs["path"] == "/metrics" && attrs["verb"] == "get";
        (
            200,
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": body["spec"],
               "status": {"allowed": allowed}}),
        )
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
            let (code, reply) = answer(&path, &value);
            if let Ok(mut log) = rec.0.lock() {
                log.push((parts.method.clone(), path, ua, value));
            }
            let mut resp = Response::new(Full::new(Bytes::from(reply.to_string())));
            *resp.status_mut() = http::StatusCode::from_u16(code).unwrap_or_default();
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
    let guard = Guard::kubernetes(Arc::new(KubeReviewer::new(client(&rec))));
    let health = Arc::new(Health::new());
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
        if path.ends_with("tokenreviews") {
            assert!(
                body["spec"]["audiences"].is_null(),
                "no audiences asked for"
            );
        }
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

fn bearer(token: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!("Bearer {token}")).ok()
}

/// The guard's decision on `GET /metrics` with `token`.
async fn metrics(guard: &Guard, token: &str) -> Result<(), Refusal> {
    let health = Arc::new(Health::new());
    guard
        .check(&health, &Method::GET, "/metrics", bearer(token).as_ref())
        .await
}

#[tokio::test]
async fn audiences_are_asked_for_and_the_answer_must_name_one() {
    let rec = Recorded::default();
    let reviewer =
        KubeReviewer::new(client(&rec)).with_audiences(vec!["captf-lock-exporter".into()]);
    let guard = Guard::kubernetes(Arc::new(reviewer));
    assert_eq!(metrics(&guard, "good").await, Ok(()));
    // Valid tokens, but not for the exporter: an ordinary ServiceAccount
    // token (the API server's audience), and an answer naming none.
    for token in ["api-aud", "no-aud"] {
        assert!(
            matches!(
                metrics(&guard, token).await,
                Err(Refusal::Unauthenticated(_))
            ),
            "{token}"
        );
    }
    let log = rec.0.lock().map(|l| l.clone()).unwrap_or_default();
    let token_reviews: Vec<&Value> = log
        .iter()
        .filter(|(_, p, _, _)| p.ends_with("/tokenreviews"))
        .map(|(_, _, _, body)| body)
        .collect();
    assert_eq!(token_reviews.len(), 3);
    for body in token_reviews {
        assert_eq!(body["spec"]["audiences"], json!(["captf-lock-exporter"]));
    }
}

#[tokio::test]
async fn the_api_servers_403_is_a_refusal_and_its_503_no_answer() {
    let rec = Recorded::default();
    let guard = Guard::kubernetes(Arc::new(KubeReviewer::new(client(&rec))));
    assert_eq!(
        metrics(&guard, "forbidden").await,
        Err(Refusal::ReviewRefused)
    );
    assert_eq!(
        metrics(&guard, "unavailable").await,
        Err(Refusal::Unavailable)
    );
}
