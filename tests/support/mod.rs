//! A scripted Kubernetes API server for the tests: a tower service behind
//! `kube::Client`, answering each request from a script, logging every
//! method and path so tests can prove the exporter only reads.
#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use captf_lock_exporter::metrics::{render_with, Exposition, Format};
use captf_lock_exporter::pod_reads;
use captf_lock_exporter::shared::Shared;
use captf_lock_exporter::watch;
use http::{Method, Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

pub const NS: &str = "ns1";
pub const WEB_POD: &str = "captf-m-web-apply-a1-abc123-x7k2p";

pub fn suffix(kind: &str, short: &str, name: &str) -> String {
    let h = hex::encode(Sha256::digest(format!("{NS}/{kind}/{name}").as_bytes()));
    format!("{}-{short}", &h[..16])
}

pub fn lease(machine: &str, who: Option<&str>, rv: u32) -> Value {
    let mut meta = json!({
        "name": format!("lock-tfstate-default-{}", suffix("TerraformMachine", "m", machine)),
        "namespace": NS,
        "resourceVersion": rv.to_string(),
        "labels": {
            "tfstate": "true",
            "captf.infrastructure.cluster.x-k8s.io/owner-kind": "TerraformMachine",
            "captf.infrastructure.cluster.x-k8s.io/owner-name": machine,
        },
    });
    let mut spec = json!({});
    if let Some(who) = who {
        let info = json!({"ID": format!("id-{machine}"), "Operation": "OperationTypeApply", "Info": "", "Who": who,
            "Version": "1.9.0", "Created": "2026-09-26T15:53:38.315668626Z", "Path": ""});
        meta["annotations"] = json!({"app.terraform.io/lock-info": info.to_string()});
        spec["holderIdentity"] = json!(format!("id-{machine}"));
    }
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec})
}

/// A ForceUnlocked Event as CAPTF writes it, about TerraformMachine
/// `object`; with `count`, an Event series of that many occurrences.
pub fn force_unlocked(name: &str, object: &str, count: Option<u64>, rv: u32) -> Value {
    let mut ev = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": rv.to_string()},
        "type": "Warning", "reason": "ForceUnlocked", "action": "Run", "reportingController": "captf-manager",
        "reportingInstance": "captf-manager-abc",
        "eventTime": "2026-11-29T10:00:00.000000Z",
        "regarding": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformMachine", "namespace": NS, "name": object},
        "related": {"apiVersion": "batch/v1", "kind": "Job", "namespace": NS, "name": format!("captf-m-{object}-apply-a2-abc123")},
        "note": format!("Job captf-m-{object}-apply-a2-abc123 force-unlocks a stale state lock whose holder pod no longer exists"),
    });
    if let Some(c) = count {
        ev["series"] = json!({"count": c, "lastObservedTime": "2026-11-29T11:00:00.000000Z"});
    }
    ev
}

pub fn machine(name: &str, rv: u32) -> Value {
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformMachine",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": rv.to_string()}, "spec": {}})
}

pub fn list(items: Vec<Value>, rv: u32) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": rv.to_string()}, "items": items})
}

pub fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": reason, "reason": reason, "code": code})
}

pub type FrameSender = mpsc::Sender<Result<Frame<Bytes>, BodyError>>;

/// How the scripted server answers one request.
pub enum Reply {
    Json(u16, Value),
    /// A watch: these events, then either hang open or end (a dropped connection).
    Watch(Vec<Value>, bool),
    /// A watch whose connection breaks after these events (a transport error).
    WatchBroken(Vec<Value>),
    /// No answer at all: the request hangs (a hung API server).
    Hang,
    /// JSON with extra response headers (Retry-After).
    JsonWith(u16, Value, Vec<(&'static str, String)>),
}

pub type BodyError = std::io::Error;

pub type Script = dyn Fn(&str, bool, usize) -> Reply + Send + Sync;

/// A scripted API server: `script(path, is_watch, nth call of that kind)`.
#[derive(Clone)]
pub struct FakeApi {
    script: Arc<Script>,
    calls: Arc<Mutex<HashMap<(String, bool), usize>>>,
    /// Every request the script answered: method and path with query.
    pub log: Arc<Mutex<Vec<(Method, String)>>>,
    /// Every watch-list refused with 422 (a server that does not stream).
    pub refused: Arc<Mutex<Vec<(Method, String)>>>,
    // Keeps hanging watch streams open until the test ends.
    open: Arc<Mutex<Vec<FrameSender>>>,
    /// False: a watch-list (`sendInitialEvents=true`) is refused with 422
    /// before the script sees it, as a kube-apiserver with its WatchList
    /// feature off refuses it, and the exporter lists in pages. True: the
    /// script answers it.
    streams: bool,
}

impl FakeApi {
    pub fn new(script: impl Fn(&str, bool, usize) -> Reply + Send + Sync + 'static) -> Self {
        FakeApi {
            script: Arc::new(script),
            calls: Default::default(),
            log: Default::default(),
            refused: Default::default(),
            open: Default::default(),
            streams: false,
        }
    }

    /// A scripted server whose script answers watch-lists too.
    pub fn streaming(script: impl Fn(&str, bool, usize) -> Reply + Send + Sync + 'static) -> Self {
        FakeApi {
            streams: true,
            ..FakeApi::new(script)
        }
    }

    pub fn handle(
        &self,
        req: Request<kube::client::Body>,
    ) -> Option<Response<BoxBody<Bytes, BodyError>>> {
        let path = req.uri().path().to_string();
        let query = req.uri().query().unwrap_or("").to_string();
        let is_watch = query.contains("watch=true");
        if !self.streams && query.contains("sendInitialEvents=true") {
            self.refused
                .lock()
                .unwrap()
                .push((req.method().clone(), format!("{path}?{query}")));
            let mut refusal = status(422, "Invalid");
            refusal["message"] = json!("ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled");
            return Some(
                Response::builder()
                    .status(422)
                    .header("content-type", "application/json")
                    .body(
                        Full::new(Bytes::from(refusal.to_string()))
                            .map_err(|never| match never {})
                            .boxed(),
                    )
                    .unwrap(),
            );
        }
        self.log
            .lock()
            .unwrap()
            .push((req.method().clone(), format!("{path}?{query}")));
        let n = {
            let mut c = self.calls.lock().unwrap();
            let e = c.entry((path.clone(), is_watch)).or_default();
            *e += 1;
            *e
        };
        Some(match (self.script)(&path, is_watch, n) {
            Reply::Hang => return None,
            Reply::Json(code, v) => Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(
                    Full::new(Bytes::from(v.to_string()))
                        .map_err(|never| match never {})
                        .boxed(),
                )
                .unwrap(),
            Reply::JsonWith(code, v, headers) => {
                let mut b = Response::builder()
                    .status(code)
                    .header("content-type", "application/json");
                for (k, val) in headers {
                    b = b.header(k, val);
                }
                b.body(
                    Full::new(Bytes::from(v.to_string()))
                        .map_err(|never| match never {})
                        .boxed(),
                )
                .unwrap()
            }
            Reply::Watch(events, hang) => self.watch_response(events, hang, false),
            Reply::WatchBroken(events) => self.watch_response(events, false, true),
        })
    }

    pub fn watch_response(
        &self,
        events: Vec<Value>,
        hang: bool,
        broken: bool,
    ) -> Response<BoxBody<Bytes, BodyError>> {
        let (tx, rx) = mpsc::channel(64);
        for ev in events {
            tx.try_send(Ok(Frame::data(Bytes::from(format!("{ev}\n")))))
                .unwrap();
        }
        if broken {
            let reset =
                std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset");
            tx.try_send(Err(reset)).unwrap();
        }
        if hang {
            self.open.lock().unwrap().push(tx);
        }
        Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(BodyExt::boxed(StreamBody::new(tokio_stream(rx))))
            .unwrap()
    }

    /// The scripted server as a tower service (a hung request never answers).
    fn service(
        &self,
    ) -> impl tower::Service<
        Request<kube::client::Body>,
        Response = Response<BoxBody<Bytes, BodyError>>,
        Error = Infallible,
        Future = impl Send,
    > + Send
           + Clone
           + 'static {
        let me = self.clone();
        tower::service_fn(move |req: Request<kube::client::Body>| {
            let resp = me.handle(req);
            async move {
                match resp {
                    Some(resp) => Ok::<_, Infallible>(resp),
                    None => std::future::pending().await,
                }
            }
        })
    }

    /// A client whose answers pass through the exporter's answer-reading
    /// layer (Retry-After, 401), as the production client's do.
    pub fn client_observed(&self, link: Arc<captf_lock_exporter::client::ApiLink>) -> kube::Client {
        kube::Client::new(
            captf_lock_exporter::client::observe(self.service(), link),
            "default",
        )
    }

    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.service(), "default")
    }

    pub fn calls(&self, path: &str, watch: bool) -> usize {
        self.calls
            .lock()
            .unwrap()
            .get(&(path.to_string(), watch))
            .copied()
            .unwrap_or(0)
    }

    pub fn assert_only_get(&self) {
        let log = self.log.lock().unwrap();
        assert!(!log.is_empty(), "the exporter made no request at all");
        let refused = self.refused.lock().unwrap();
        let bad: Vec<_> = log
            .iter()
            .chain(refused.iter())
            .filter(|(m, _)| m != Method::GET)
            .collect();
        assert!(bad.is_empty(), "non-GET requests were sent: {bad:?}");
    }
}

pub fn tokio_stream(
    rx: mpsc::Receiver<Result<Frame<Bytes>, BodyError>>,
) -> impl futures::Stream<Item = Result<Frame<Bytes>, BodyError>> + Send + Sync + 'static {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|x| (x, rx)) })
}

pub const LEASES: &str = "/apis/coordination.k8s.io/v1/leases";
pub const PODS: &str = "/api/v1/pods";
pub const MACHINES: &str = "/apis/infrastructure.cluster.x-k8s.io/v1alpha1/terraformmachines";
pub const EVENTS: &str = "/apis/events.k8s.io/v1/events";

pub fn start(api: &FakeApi) -> Arc<Shared> {
    start_with_context(api).0
}

/// [`start`], also giving the watches' context (watch-list support, the
/// API link).
pub fn start_with_context(api: &FakeApi) -> (Arc<Shared>, Arc<watch::Context>) {
    let (shared, rx) = Shared::new();
    let ctx = Arc::new(watch::Context::default());
    start_on(
        api.client(),
        &shared,
        &ctx,
        rx,
        Duration::from_secs(3600),
        100,
    );
    (shared, ctx)
}

/// The exporter's watchers and verifier on `client`, with the verifier's
/// re-check interval and read rate.
pub fn start_on(
    client: kube::Client,
    shared: &Arc<Shared>,
    ctx: &Arc<watch::Context>,
    rx: mpsc::UnboundedReceiver<captf_lock_exporter::index::ObjectKey>,
    recheck: Duration,
    reads_per_second: u32,
) {
    let all = &captf_lock_exporter::index::Resource::ALL;
    spawn_watches(client.clone(), shared, ctx, all, watch::Timing::DEFAULT);
    tokio::spawn(pod_reads::run(
        shared.clone(),
        client,
        ctx.api.clone(),
        rx,
        recheck,
        reads_per_second,
    ));
}

/// Spawns the watches of `resources` in all namespaces, as `main` does
/// under its supervisor.
pub fn spawn_watches(
    client: kube::Client,
    shared: &Arc<Shared>,
    ctx: &Arc<watch::Context>,
    resources: &[captf_lock_exporter::index::Resource],
    timing: watch::Timing,
) {
    let scopes = vec![None];
    for (_, w) in watch::watches(
        client,
        shared.clone(),
        ctx.clone(),
        scopes,
        resources,
        timing,
    ) {
        tokio::spawn(w);
    }
}

/// The exporter's watchers of `resources` only (as `--skip-resources`
/// leaves them) and its verifier, on `api`.
pub fn start_watching(
    api: &FakeApi,
    resources: &[captf_lock_exporter::index::Resource],
) -> Arc<Shared> {
    let (shared, rx) = Shared::new();
    let ctx = Arc::new(watch::Context::default());
    let client = api.client();
    spawn_watches(
        client.clone(),
        &shared,
        &ctx,
        resources,
        watch::Timing::DEFAULT,
    );
    tokio::spawn(pod_reads::run(
        shared.clone(),
        client,
        ctx.api.clone(),
        rx,
        Duration::from_secs(3600),
        100,
    ));
    shared
}

/// Every series, idle objects' too (`--export-idle-objects`): these tests
/// follow objects with nothing to tell (a counter at 0, a lock released).
/// The default exposition has its own tests (metrics, exposition_golden).
pub fn scrape(shared: &Arc<Shared>) -> String {
    let everything = Exposition {
        idle_objects: true,
        ..Exposition::default()
    };
    let now = std::time::SystemTime::now();
    render_with(shared, Format::Prometheus, now, everything).expect("renders")
}

/// Polls `cond` on fresh scrapes until it holds or the deadline passes.
pub async fn wait_for(
    shared: &Arc<Shared>,
    what: &str,
    secs: u64,
    cond: impl FnMut(&str) -> bool,
) -> String {
    poll(shared, what, secs, Duration::from_millis(20), cond).await
}

/// [`wait_for`], with every scrape on the way still showing the foreign
/// lock `kept` (a relist replaces the index content at its end, it never
/// empties it first); scraped more often, to catch a short gap.
pub async fn wait_keeping(
    shared: &Arc<Shared>,
    kept: &str,
    what: &str,
    secs: u64,
    mut cond: impl FnMut(&str) -> bool,
) -> String {
    let every = Duration::from_millis(5);
    poll(shared, what, secs, every, |text| {
        assert!(
            has_lock(text, kept, "foreign"),
            "lock {kept} vanished while waiting for {what}:\n{text}"
        );
        cond(text)
    })
    .await
}

async fn poll(
    shared: &Arc<Shared>,
    what: &str,
    secs: u64,
    every: Duration,
    mut cond: impl FnMut(&str) -> bool,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let text = scrape(shared);
        if cond(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last scrape:\n{text}"
        );
        tokio::time::sleep(every).await;
    }
}

pub fn has_lock(text: &str, name: &str, class: &str) -> bool {
    text.lines().any(|l| {
        l.starts_with("captf_state_lock_info{")
            && l.contains(&format!("name=\"{name}\""))
            && l.contains(&format!("class=\"{class}\""))
    })
}

pub fn value(text: &str, series_prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series_prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A list of Leases, each `(machine, who, resourceVersion)` held by `who`,
/// at the list's `resourceVersion`.
pub fn held_leases(locks: &[(&str, &str, u32)], rv: u32) -> Reply {
    let items = locks
        .iter()
        .map(|&(machine, who, item_rv)| lease(machine, Some(who), item_rv))
        .collect();
    Reply::Json(200, list(items, rv))
}

/// A watch that stays open and sends nothing.
pub fn open_watch() -> Reply {
    Reply::Watch(vec![], true)
}

/// Nothing to serve: an empty list, or a watch that stays open and sends
/// nothing.
pub fn empty(is_watch: bool) -> Reply {
    if is_watch {
        open_watch()
    } else {
        Reply::Json(200, list(vec![], 1))
    }
}

/// The event that ends a watch whose resourceVersion is too old (410).
pub fn expired() -> Value {
    json!({"type": "ERROR", "object": status(410, "Expired")})
}

/// `captf_lock_exporter_watch_errors_total` of the Leases watch for
/// `reason` (0 when the series is absent).
pub fn leases_errors(text: &str, reason: &str) -> f64 {
    value(
        text,
        &format!(
            "captf_lock_exporter_watch_errors_total{{resource=\"leases\",reason=\"{reason}\"}}"
        ),
    )
    .unwrap_or(0.0)
}

/// Everything not scripted is a resource that is not served.
pub fn not_served() -> Reply {
    Reply::Json(404, status(404, "NotFound"))
}
