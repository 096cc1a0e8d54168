//! The network a real cluster has (issue 15): Retry-After is honoured, and
//! a rotated token file is picked up at once, trimmed.
//!
//! Retry-After runs against the scripted API with tokio's clock paused;
//! the token test runs the exporter's own HTTP stack (`client::build`)
//! against a small HTTP server on 127.0.0.1 that checks the bearer token.

mod support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use captf_lock_exporter::client;
use captf_lock_exporter::index::Resource;
use captf_lock_exporter::shared::Shared;
use captf_lock_exporter::watch::{self, Timing};
use futures::StreamExt;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::json;
use support::*;

#[tokio::test(start_paused = true)]
async fn retry_after_on_429_is_honoured() {
    let throttled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let t = throttled.clone();
    let api = FakeApi::new(move |path, is_watch, _| {
        if t.load(Ordering::SeqCst) && path == LEASES {
            return Reply::JsonWith(
                429,
                status(429, "TooManyRequests"),
                vec![("retry-after", "20".into())],
            );
        }
        match (path, is_watch) {
            (LEASES, false) => held_leases(&[("a", "alice@laptop", 1)], 5),
            // Watches end after a bookmark: every resumption is a request.
            (LEASES, true) => Reply::Watch(
                vec![json!({"type": "BOOKMARK", "object": {"kind": "Lease",
                    "apiVersion": "coordination.k8s.io/v1", "metadata": {"resourceVersion": "5"}}})],
                false,
            ),
            (PODS, false) => Reply::Json(200, list(vec![], 1)),
            (PODS, true) => open_watch(),
            _ => not_served(),
        }
    });
    let (shared, rx) = Shared::new();
    let ctx = Arc::new(watch::Context::default());
    start_on(
        api.client_observed(ctx.api.clone()),
        &shared,
        &ctx,
        rx,
        Duration::from_secs(3600),
        100,
    );
    wait_for(&shared, "first sync", 30, |t| {
        t.contains("captf_lock_exporter_watch_up{resource=\"leases\"} 1")
    })
    .await;
    let before = api.log.lock().unwrap().len();
    throttled.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(60)).await;
    let lease_requests = api.log.lock().unwrap()[before..]
        .iter()
        .filter(|(_, p)| p.starts_with(LEASES))
        .count();
    println!("Lease requests in 60 s of 429 with Retry-After: 20: {lease_requests}");
    // One request per 20 s asked, plus the one that met the first 429.
    assert!(
        lease_requests <= 4,
        "{lease_requests} requests in 60 s while the server asked for 20 s between them"
    );
    assert!(lease_requests >= 2, "it stopped asking: {lease_requests}");
    throttled.store(false, Ordering::SeqCst);
    let text = wait_for(&shared, "recovery", 30, |t| {
        t.contains("captf_lock_exporter_watch_up{resource=\"leases\"} 1")
    })
    .await;
    assert!(text.contains("reason=\"throttled\"} "), "{text}");
    api.assert_only_get();
}

/// The tokens the test server accepts, and what it saw.
#[derive(Default)]
struct Auth {
    accepted: Mutex<String>,
    refused: AtomicUsize,
    served_after_switch: Mutex<Option<std::time::Instant>>,
}

/// A JSON answer of the test servers.
fn json(
    code: u16,
    v: serde_json::Value,
) -> http::Response<http_body_util::combinators::BoxBody<Bytes, Infallible>> {
    http::Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(v.to_string())).boxed())
        .unwrap()
}

async fn serve(
    req: http::Request<hyper::body::Incoming>,
    auth: Arc<Auth>,
) -> Result<http::Response<http_body_util::combinators::BoxBody<Bytes, Infallible>>, Infallible> {
    let want = format!("Bearer {}", auth.accepted.lock().unwrap());
    let got = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if got != want {
        auth.refused.fetch_add(1, Ordering::SeqCst);
        return Ok(json(401, status(401, "Unauthorized")));
    }
    if req.uri().path() == LEASES {
        auth.served_after_switch
            .lock()
            .unwrap()
            .get_or_insert_with(std::time::Instant::now);
    }
    let query = req.uri().query().unwrap_or("");
    if !query.contains("watch=true") {
        return Ok(json(200, list(vec![], 7)));
    }
    // A watch: one bookmark, then the server closes it after 1.5 s, so the
    // exporter keeps making requests.
    let bookmark = json!({"type": "BOOKMARK", "object": {"kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
        "metadata": {"resourceVersion": "7"}}});
    let stream = futures::stream::unfold(0u8, move |n| {
        let line = format!("{bookmark}\n");
        async move {
            match n {
                0 => Some((Ok::<_, Infallible>(Frame::data(Bytes::from(line))), 1)),
                1 => {
                    tokio::time::sleep(Duration::from_millis(1500)).await;
                    None
                }
                _ => None,
            }
        }
    });
    Ok(http::Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_token_file_is_used_at_once_and_trimmed() {
    let auth = Arc::new(Auth::default());
    *auth.accepted.lock().unwrap() = "token-one".into();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let a = auth.clone();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                return;
            };
            let a = a.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| serve(req, a.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    let dir = std::env::temp_dir().join(format!("captf-token-rotation-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    // What `kubectl create token NAME > file` writes: a trailing newline.
    std::fs::write(&token, "token-one\n").unwrap();
    let mut config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    config.auth_info.token_file = Some(token.display().to_string());
    let (shared, rx) = Shared::new();
    let ctx = Arc::new(watch::Context::default());
    let kube = client::build(config, ctx.api.clone(), client::Tuning::DEFAULT).expect("client");
    start_on(kube, &shared, &ctx, rx, Duration::from_secs(3600), 100);
    wait_for(&shared, "first sync", 20, |t| {
        t.contains("captf_lock_exporter_watch_up{resource=\"leases\"} 1")
    })
    .await;
    assert_eq!(
        auth.refused.load(Ordering::SeqCst),
        0,
        "the trailing newline was sent"
    );

    // The old token is refused from now on (revoked), and a moment later
    // the new one is in the file, written aside and renamed over as the
    // kubelet does.
    *auth.accepted.lock().unwrap() = "token-two".into();
    let refused_at_switch = auth.refused.load(Ordering::SeqCst);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while auth.refused.load(Ordering::SeqCst) == refused_at_switch {
        assert!(
            std::time::Instant::now() < deadline,
            "no request met the revoked token"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    *auth.served_after_switch.lock().unwrap() = None;
    let refused_before = auth.refused.load(Ordering::SeqCst);
    let aside = dir.join("token.new");
    std::fs::write(&aside, "token-two\n").unwrap();
    std::fs::rename(&aside, &token).unwrap();
    let rotated = std::time::Instant::now();
    let deadline = rotated + Duration::from_secs(20);
    let took = loop {
        if let Some(at) = *auth.served_after_switch.lock().unwrap() {
            break at.saturating_duration_since(rotated);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new token was not used within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let refused = auth.refused.load(Ordering::SeqCst) - refused_before;
    println!(
        "new token used {took:?} after the rotation; {refused_before} requests refused before it, {refused} after"
    );
    // Within the watchers' first backoff after a 401 (1 s, jittered).
    assert!(took < Duration::from_secs(5), "{took:?}");
    // Only requests already sent with the old token when the file changed.
    assert!(
        refused <= 8,
        "{refused} requests refused after the rotation"
    );
    let text = scrape(&shared);
    let unauthorized: f64 = text
        .lines()
        .filter(|l| {
            l.starts_with("captf_lock_exporter_watch_errors_total{")
                && l.contains("reason=\"unauthorized\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        unauthorized >= 1.0,
        "a 401 counts with its own reason:\n{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Kubernetes API over HTTP/1.1 on 127.0.0.1 as a new user might write
/// one: Leases listed and watched in JSON (a watch from a resourceVersion
/// sends what changes from then on, or, with `replay`, first the changes
/// after that version, as kube-apiserver's watch cache does), pods listed
/// empty, watch-lists refused (422), everything else not served. It can
/// hang: connections are accepted and nothing is answered; then come back
/// for new connections only, the connections opened before staying silent.
struct HangingApi {
    leases: Mutex<Vec<serde_json::Value>>,
    rv: AtomicUsize,
    replay: bool,
    /// Serial of the next connection accepted.
    next_conn: AtomicUsize,
    /// Connections with a serial below this are silent (usize::MAX: all).
    silent_below: AtomicUsize,
}

impl HangingApi {
    fn hang(&self) {
        self.silent_below.store(usize::MAX, Ordering::SeqCst);
    }

    /// Answers again, on connections accepted from now on.
    fn come_back(&self) {
        let next = self.next_conn.load(Ordering::SeqCst);
        self.silent_below.store(next, Ordering::SeqCst);
    }

    /// Replaces Lease `machine` (held by `who`, or free) at a new version.
    fn set(&self, machine: &str, who: Option<&str>) {
        let rv = self.rv.fetch_add(1, Ordering::SeqCst) as u32 + 1;
        let new = lease(machine, who, rv);
        let mut leases = self.leases.lock().unwrap();
        leases.retain(|l| l["metadata"]["name"] != new["metadata"]["name"]);
        leases.push(new);
    }

    fn answer(
        &self,
        req: &http::Request<hyper::body::Incoming>,
    ) -> http::Response<http_body_util::combinators::BoxBody<Bytes, Infallible>> {
        let query = req.uri().query().unwrap_or("");
        if query.contains("sendInitialEvents=true") {
            return json(422, status(422, "sendInitialEvents is forbidden"));
        }
        let rv = self.rv.load(Ordering::SeqCst) as u32;
        let watch = query.contains("watch=true");
        match (req.uri().path(), watch) {
            (LEASES, false) => json(200, list(self.leases.lock().unwrap().clone(), rv)),
            (PODS, false) => json(200, list(vec![], rv)),
            (LEASES | PODS, true) => {
                let from: u32 = query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("resourceVersion="))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(rv);
                let replayed: Vec<Bytes> = if self.replay && req.uri().path() == LEASES {
                    self.leases
                        .lock()
                        .unwrap()
                        .iter()
                        .filter(|l| {
                            l["metadata"]["resourceVersion"]
                                .as_str()
                                .and_then(|v| v.parse::<u32>().ok())
                                .is_some_and(|v| v > from)
                        })
                        .map(|l| {
                            Bytes::from(format!("{}\n", json!({"type": "MODIFIED", "object": l})))
                        })
                        .collect()
                } else {
                    vec![]
                };
                // The replay, then open for ever with nothing more.
                let body = futures::stream::iter(replayed)
                    .map(|b| Ok::<_, Infallible>(Frame::data(b)))
                    .chain(futures::stream::pending());
                http::Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(BodyExt::boxed(StreamBody::new(body)))
                    .unwrap()
            }
            _ => json(404, status(404, "NotFound")),
        }
    }
}

/// Serves `api` on a port of 127.0.0.1, HTTP/1.1 only.
async fn serve_hanging(api: Arc<HangingApi>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                return;
            };
            let serial = api.next_conn.fetch_add(1, Ordering::SeqCst);
            let api = api.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let api = api.clone();
                    async move {
                        if serial < api.silent_below.load(Ordering::SeqCst) {
                            // Accepted, never answered.
                            futures::future::pending::<()>().await;
                        }
                        Ok::<_, Infallible>(api.answer(&req))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    addr
}

/// Whether `/metrics` shows Lease `name` held.
fn held(text: &str, name: &str) -> bool {
    text.lines()
        .any(|l| l.starts_with("captf_state_lock_info{") && l.contains(&format!("name=\"{name}\"")))
}

/// The production limits, scaled down so that a hang longer than the
/// silence limit and a recovery take seconds of real time.
const SCALED: Timing = Timing {
    request: Duration::from_secs(2),
    silence: Duration::from_secs(4),
    backoff_max: Duration::from_secs(2),
    ..Timing::DEFAULT
};

/// Issue 33, defect 7: the hang of an HTTP/1.1 API server that comes back
/// for new connections only, old ones silent. During the hang Lease a is
/// released and b taken. `watch_up` must fall while nothing flows, and
/// the truth must show soon after new connections are answered.
async fn hang_over_http1_then_back(replay: bool) {
    let api = Arc::new(HangingApi {
        leases: Mutex::new(vec![]),
        rv: AtomicUsize::new(1),
        replay,
        next_conn: AtomicUsize::new(0),
        silent_below: AtomicUsize::new(0),
    });
    api.set("a", Some("alice@laptop"));
    api.set("b", None);
    let addr = serve_hanging(api.clone()).await;
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    let (shared, _rx) = Shared::new();
    let ctx = Arc::new(watch::Context::default());
    let tuning = client::Tuning {
        connect_timeout: Duration::from_secs(1),
        ..client::Tuning::DEFAULT
    };
    let kube = client::build(config, ctx.api.clone(), tuning).expect("client");
    let resources = [Resource::Leases, Resource::Pods];
    spawn_watches(kube, &shared, &ctx, &resources, SCALED);
    wait_for(&shared, "first sync", 20, |t| {
        has_lock(t, "a", "foreign") && !held(t, "b")
    })
    .await;

    api.hang();
    api.set("a", None);
    api.set("b", Some("bob@desk"));
    // Nothing flows: health says so within silence + request (+ slack).
    let hung = std::time::Instant::now();
    wait_for(&shared, "watch_up 0 during the hang", 15, |t| {
        t.contains("captf_lock_exporter_watch_up{resource=\"leases\"} 0")
    })
    .await;
    println!(
        "watch_up 0 {:.1} s into the hang",
        hung.elapsed().as_secs_f64()
    );
    // Hung past the silence limit, then back for new connections only.
    tokio::time::sleep(SCALED.silence).await;
    api.come_back();
    let back = std::time::Instant::now();
    let text = wait_for(&shared, "the truth after the hang", 20, |t| {
        has_lock(t, "b", "foreign")
            && !held(t, "a")
            && t.contains("captf_lock_exporter_watch_up{resource=\"leases\"} 1")
    })
    .await;
    println!(
        "right {:.1} s after new connections were answered (replay {replay})",
        back.elapsed().as_secs_f64()
    );
    assert!(!text.contains("holder=\"alice@laptop\""), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_hang_converges_on_a_server_that_replays_from_a_version() {
    hang_over_http1_then_back(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_hang_converges_on_a_server_that_does_not_replay() {
    hang_over_http1_then_back(false).await;
}
