//! When a watch-list falls short, which syncs list in pages (issue 43,
//! item 2). Only a definitive answer turns streaming off for every watch
//! of the process: the server refused the watch-list (422, its WatchList
//! feature off) or answered an ordinary watch (a change or a plain
//! bookmark before the initial-events-end bookmark). A watch-list cut
//! short (an early end, 20 s of silence between initial events) pages
//! that one sync, and the next whole sync streams again; a relist that is
//! due while a watch-list streams its initial events waits for them.
//!
//! On tokio's paused clock, with the production `Timing::DEFAULT`.

mod support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use captf_lock_exporter::health::SyncMode;
use captf_lock_exporter::index::Resource;
use captf_lock_exporter::shared::Shared;
use captf_lock_exporter::watch;
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};
use support::*;
use tokio::sync::mpsc;
use tokio::time::Instant;

fn added(obj: Value) -> Value {
    json!({"type": "ADDED", "object": obj})
}

fn end_bookmark(kind: &str, rv: u32) -> Value {
    json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": "v1",
        "metadata": {"resourceVersion": rv.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}}})
}

/// A change of Lease b the exporter cannot decode (a resourceVersion of
/// the wrong type): skipped, counted, and the scope relisted within 60 s.
fn undecodable_change() -> Value {
    let mut b = lease("b", Some("bob@desk"), 21);
    b["metadata"]["resourceVersion"] = json!(21);
    json!({"type": "MODIFIED", "object": b})
}

/// Polls `cond` once per virtual 100 ms until it holds; fails past `limit`.
async fn until(shared: &Arc<Shared>, what: &str, limit: Duration, cond: impl Fn(&str) -> bool) {
    let start = Instant::now();
    loop {
        let text = scrape(shared);
        if cond(&text) {
            return;
        }
        assert!(
            start.elapsed() <= limit,
            "{what}: not within {limit:?}; last scrape:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A watch answer that sends `first`, then `rest` after `gap`, then stays
/// open: a watch-list whose initial events arrive as a real server's do,
/// not all in the first read.
fn in_two_parts(
    first: Vec<Value>,
    gap: Duration,
    rest: Vec<Value>,
) -> Response<BoxBody<Bytes, BodyError>> {
    let (tx, rx) = mpsc::channel(64);
    let frame = |ev: &Value| Ok(Frame::data(Bytes::from(format!("{ev}\n"))));
    for ev in &first {
        assert!(
            tx.try_send(frame(ev)).is_ok(),
            "the channel holds 64 frames"
        );
    }
    tokio::spawn(async move {
        tokio::time::sleep(gap).await;
        for ev in &rest {
            if tx.send(frame(ev)).await.is_err() {
                return;
            }
        }
        // Open until the test ends.
        std::future::pending::<()>().await;
    });
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(BodyExt::boxed(StreamBody::new(tokio_stream(rx))))
        .unwrap_or_else(|e| panic!("a response: {e}"))
}

/// The exporter's watches on `api`, except that the second watch of the
/// Leases is answered by `second` (its request is not in `api`'s log).
fn start_with_second_leases_watch(
    api: &FakeApi,
    second: impl Fn() -> Response<BoxBody<Bytes, BodyError>> + Send + Sync + 'static,
) -> (Arc<Shared>, Arc<watch::Context>) {
    let leases_watches = Arc::new(AtomicUsize::new(0));
    let second = Arc::new(second);
    let api = api.clone();
    let service = tower::service_fn(move |req: Request<kube::client::Body>| {
        let leases_watch = req.uri().path() == LEASES
            && req.uri().query().is_some_and(|q| q.contains("watch=true"));
        let n = if leases_watch {
            leases_watches.fetch_add(1, Ordering::SeqCst) + 1
        } else {
            0
        };
        let resp = if n == 2 {
            Some(second())
        } else {
            api.handle(req)
        };
        async move {
            match resp {
                Some(resp) => Ok::<_, Infallible>(resp),
                None => std::future::pending().await,
            }
        }
    });
    let client = kube::Client::new(service, "default");
    let (shared, _rx) = Shared::new();
    let ctx = Arc::new(watch::Context::default());
    spawn_watches(
        client,
        &shared,
        &ctx,
        &Resource::ALL,
        watch::Timing::DEFAULT,
    );
    (shared, ctx)
}

/// An undecodable change after a streamed sync makes a relist due 60 s
/// later; that relist is a watch-list whose initial events come with a
/// pause between them (as any real stream's do). The due relist must not
/// cut those initial events short: before issue 43 the wait for the next
/// initial event was the time left until the relist, zero, and the first
/// pause between two initial events turned streaming off for every watch
/// of the process.
#[tokio::test(start_paused = true)]
async fn a_relist_due_during_a_watch_list_does_not_turn_streaming_off() {
    let api = FakeApi::streaming(|path, is_watch, n| match (path, is_watch, n) {
        (LEASES, true, 1) => Reply::Watch(
            vec![
                added(lease("a", Some("alice@laptop"), 3)),
                end_bookmark("Lease", 20),
                undecodable_change(),
            ],
            true,
        ),
        // Only a watch-list that fell back lists.
        (LEASES, false, _) => held_leases(&[("a", "alice@laptop", 3), ("c", "carol@vm", 25)], 30),
        (LEASES, true, _) => open_watch(),
        (_, true, _) => Reply::Watch(vec![end_bookmark("Pod", 20)], true),
        _ => not_served(),
    });
    let (shared, ctx) = start_with_second_leases_watch(&api, || {
        in_two_parts(
            vec![added(lease("a", Some("alice@laptop"), 3))],
            Duration::from_secs(1),
            vec![
                added(lease("c", Some("carol@vm"), 25)),
                end_bookmark("Lease", 30),
            ],
        )
    });
    until(
        &shared,
        "the relist shows c",
        Duration::from_secs(120),
        |t| has_lock(t, "a", "foreign") && has_lock(t, "c", "foreign"),
    )
    .await;
    assert_eq!(leases_errors(&scrape(&shared), "decode"), 1.0);
    assert!(
        ctx.watch_list.streams(),
        "a relist due during a watch-list turned streaming off for the process"
    );
    assert_eq!(api.calls(LEASES, false), 0, "the relist streamed: no LIST");
    assert_eq!(shared.health.syncs(Resource::Leases, SyncMode::Stream), 2);
    assert_eq!(shared.health.syncs(Resource::Leases, SyncMode::Paged), 0);
}

/// A watch-list that ends before its initial-events-end bookmark (a
/// server going away mid-stream) says nothing definite about the server:
/// that sync is listed in pages, and the next whole sync (after a 410)
/// streams again. Before issue 43 every watch of the process listed in
/// pages from then on.
#[tokio::test(start_paused = true)]
async fn a_watch_list_cut_short_pages_that_sync_and_the_next_one_streams() {
    let api = FakeApi::streaming(|path, is_watch, n| match (path, is_watch, n) {
        // Cut after its first object.
        (LEASES, true, 1) => Reply::Watch(vec![added(lease("a", Some("alice@laptop"), 3))], false),
        (LEASES, false, _) => held_leases(&[("a", "alice@laptop", 3)], 20),
        // The watch after the list: its version expired, a whole state next.
        (LEASES, true, 2) => Reply::Watch(vec![expired()], false),
        (LEASES, true, 3) => Reply::Watch(
            vec![
                added(lease("a", Some("alice@laptop"), 3)),
                added(lease("c", Some("carol@vm"), 25)),
                end_bookmark("Lease", 30),
            ],
            true,
        ),
        (LEASES, true, _) => open_watch(),
        (_, true, _) => Reply::Watch(vec![end_bookmark("Pod", 20)], true),
        _ => not_served(),
    });
    let (shared, ctx) = start_with_context(&api);
    until(
        &shared,
        "the relist shows c",
        Duration::from_secs(60),
        |t| has_lock(t, "c", "foreign"),
    )
    .await;
    assert!(ctx.watch_list.streams(), "streaming turned off for good");
    assert_eq!(api.calls(LEASES, false), 1, "one paged sync, then a stream");
    assert_eq!(shared.health.syncs(Resource::Leases, SyncMode::Paged), 1);
    assert_eq!(shared.health.syncs(Resource::Leases, SyncMode::Stream), 1);
    api.assert_only_get();
}

/// 20 s of silence between initial events (a slow or hung server, or one
/// that ignores sendInitialEvents and has nothing more to say) pages that
/// sync; the server is still asked for watch-lists afterwards.
#[tokio::test(start_paused = true)]
async fn silence_in_a_watch_list_pages_that_sync_only() {
    let api = FakeApi::streaming(|path, is_watch, n| match (path, is_watch, n) {
        (LEASES, true, 1) => Reply::Watch(vec![added(lease("a", Some("alice@laptop"), 3))], true),
        (LEASES, false, _) => held_leases(&[("a", "alice@laptop", 3), ("b", "bob@desk", 4)], 20),
        (LEASES, true, 2) => Reply::Watch(vec![expired()], false),
        (LEASES, true, 3) => Reply::Watch(
            vec![
                added(lease("b", Some("bob@desk"), 4)),
                end_bookmark("Lease", 30),
            ],
            true,
        ),
        (LEASES, true, _) => open_watch(),
        (_, true, _) => Reply::Watch(vec![end_bookmark("Pod", 20)], true),
        _ => not_served(),
    });
    let (shared, ctx) = start_with_context(&api);
    until(&shared, "the paged list", Duration::from_secs(60), |t| {
        has_lock(t, "a", "foreign") && has_lock(t, "b", "foreign")
    })
    .await;
    // The watch-list after the 410 replaces the scope: a is gone.
    until(
        &shared,
        "the streamed relist",
        Duration::from_secs(60),
        |t| !has_lock(t, "a", "foreign") && has_lock(t, "b", "foreign"),
    )
    .await;
    assert!(
        ctx.watch_list.streams(),
        "silence turned streaming off for good"
    );
    assert_eq!(api.calls(LEASES, false), 1);
    assert_eq!(shared.health.syncs(Resource::Leases, SyncMode::Paged), 1);
    assert_eq!(shared.health.syncs(Resource::Leases, SyncMode::Stream), 1);
}

/// An initial-events-end bookmark without a resourceVersion (issue 43,
/// item 7) leaves the streamed state without a version to watch from: a
/// decode error, and that sync is paged; the server still streams.
#[tokio::test(start_paused = true)]
async fn an_end_bookmark_without_a_version_pages_that_sync() {
    let api = FakeApi::streaming(|path, is_watch, n| match (path, is_watch, n) {
        (LEASES, true, 1) => {
            let mut end = end_bookmark("Lease", 20);
            end["object"]["metadata"]["resourceVersion"] = json!("");
            Reply::Watch(vec![added(lease("a", Some("alice@laptop"), 3)), end], true)
        }
        (LEASES, false, _) => held_leases(&[("a", "alice@laptop", 3)], 20),
        (LEASES, true, _) => open_watch(),
        (_, true, _) => Reply::Watch(vec![end_bookmark("Pod", 20)], true),
        _ => not_served(),
    });
    let (shared, ctx) = start_with_context(&api);
    until(&shared, "the paged list", Duration::from_secs(10), |t| {
        has_lock(t, "a", "foreign")
    })
    .await;
    assert_eq!(leases_errors(&scrape(&shared), "decode"), 1.0);
    assert!(ctx.watch_list.streams());
    assert_eq!(shared.health.syncs(Resource::Leases, SyncMode::Paged), 1);
    assert_eq!(shared.health.syncs(Resource::Leases, SyncMode::Stream), 0);
    // The watch after the list (paced 1 s after the watch-list).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let watches: Vec<String> = api
        .log
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(_, p)| p.starts_with(LEASES) && p.contains("watch=true"))
        .map(|(_, p)| p.clone())
        .collect();
    assert!(
        watches.len() >= 2 && watches[1].contains("resourceVersion=20"),
        "then a watch from the list's version: {watches:?}"
    );
}
