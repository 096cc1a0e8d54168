//! Starting like client-go: one streaming watch-list per resource
//! (`sendInitialEvents=true`, ended by the `k8s.io/initial-events-end`
//! bookmark), and the paged list for a server that does not stream, chosen
//! once per server on a definitive answer (tests/watch_list_fallback.rs has
//! the answers that are not) and counted in `watch_syncs_total{mode}`.
//!
//! The scripted API (`support::FakeApi`) answers as kube-apiserver does;
//! the same paths run against the real one in `tests/realkube/test_watch.py`.

mod support;

use std::time::{Duration, Instant};

use captf_lock_exporter::health::SyncMode;
use captf_lock_exporter::index::Resource;
use serde_json::{json, Value};
use support::*;

fn added(obj: Value) -> Value {
    json!({"type": "ADDED", "object": obj})
}

fn end_bookmark(kind: &str, rv: u32) -> Value {
    json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": "v1",
        "metadata": {"resourceVersion": rv.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}}})
}

fn watch_queries(api: &FakeApi, path: &str) -> Vec<String> {
    api.log
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, p)| p.starts_with(&format!("{path}?")) && p.contains("watch=true"))
        .map(|(_, p)| p.clone())
        .collect()
}

async fn wait_ready(shared: &std::sync::Arc<captf_lock_exporter::shared::Shared>, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !shared.health.ready() {
        assert!(Instant::now() < deadline, "not ready within {secs} s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_server_is_read_with_one_watch_list_per_resource_and_no_list() {
    let api = FakeApi::streaming(|path, is_watch, n| match (path, is_watch, n) {
        (LEASES, true, 1) => Reply::Watch(
            vec![
                added(lease("a", Some("alice@laptop"), 3)),
                added(lease("b", None, 4)),
                end_bookmark("Lease", 20),
            ],
            true,
        ),
        (PODS, true, 1) => Reply::Watch(vec![end_bookmark("Pod", 20)], true),
        (MACHINES, true, 1) => Reply::Watch(
            vec![added(machine("a", 5)), end_bookmark("TerraformMachine", 20)],
            true,
        ),
        (LEASES | PODS | MACHINES, true, _) => open_watch(),
        _ => not_served(),
    });
    let (shared, ctx) = start_with_context(&api);
    wait_ready(&shared, 10).await;
    wait_for(&shared, "lock a", 10, |t| has_lock(t, "a", "foreign")).await;
    assert_eq!(api.calls(LEASES, false), 0, "no LIST at all");
    assert_eq!(api.calls(MACHINES, false), 0, "no LIST at all");
    let q = &watch_queries(&api, LEASES)[0];
    for part in [
        "sendInitialEvents=true",
        "resourceVersionMatch=NotOlderThan",
        "allowWatchBookmarks=true",
        "resourceVersion=&",
    ] {
        assert!(
            q.contains(part) || q.ends_with(part.trim_end_matches('&')),
            "{part} missing in {q}"
        );
    }
    let secs: u32 = q
        .split('&')
        .find_map(|kv| kv.strip_prefix("timeoutSeconds="))
        .and_then(|v| v.parse().ok())
        .expect("timeoutSeconds");
    assert!((300..600).contains(&secs), "client-go's 5-10 min: {secs}");
    assert_eq!(shared.health.syncs(Resource::Leases, SyncMode::Stream), 1);
    assert_eq!(shared.health.syncs(Resource::Leases, SyncMode::Paged), 0);
    assert!(ctx.watch_list.streams());
    let text = scrape(&shared);
    assert_eq!(
        value(
            &text,
            "captf_lock_exporter_watch_syncs_total{resource=\"leases\",mode=\"stream\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "captf_lock_exporter_watch_up{resource=\"leases\"}"),
        Some(1.0)
    );
    api.assert_only_get();
}

/// Objects streamed before the initial-events-end bookmark are not shown
/// and do not make the exporter ready; a server that never sends the
/// bookmark is then listed in pages for that sync (silence is no
/// definitive answer: the next whole sync streams again).
#[tokio::test(start_paused = true)]
async fn a_half_streamed_state_is_never_shown_and_no_end_bookmark_pages_that_sync() {
    let api = FakeApi::streaming(|path, is_watch, n| match (path, is_watch, n) {
        // An ordinary watch from "now" with its objects as ADDED: what an
        // API server that ignores sendInitialEvents answers.
        (LEASES, true, 1) => Reply::Watch(vec![added(lease("a", Some("alice@laptop"), 3))], true),
        (LEASES, false, _) => held_leases(&[("a", "alice@laptop", 3), ("b", "bob@desk", 4)], 20),
        (PODS, true, 1) => Reply::Watch(vec![end_bookmark("Pod", 20)], true),
        (_, true, _) => open_watch(),
        _ => not_served(),
    });
    let (shared, ctx) = start_with_context(&api);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let text = scrape(&shared);
    assert!(
        !has_lock(&text, "a", "foreign"),
        "half a state shown:\n{text}"
    );
    assert!(!shared.health.ready(), "ready on half a state");
    assert_eq!(
        value(&text, "captf_lock_exporter_watch_up{resource=\"leases\"}"),
        Some(0.0)
    );
    wait_for(&shared, "the paged list", 60, |t| {
        has_lock(t, "a", "foreign") && has_lock(t, "b", "foreign")
    })
    .await;
    assert!(shared.health.ready());
    assert!(ctx.watch_list.streams(), "silence pages that sync only");
    assert_eq!(shared.health.syncs(Resource::Leases, SyncMode::Paged), 1);
    assert_eq!(shared.health.syncs(Resource::Leases, SyncMode::Stream), 0);
    assert_eq!(shared.health.syncs(Resource::Pods, SyncMode::Stream), 1);
    let leases = watch_queries(&api, LEASES);
    assert!(
        leases[1].contains("resourceVersion=20") && !leases[1].contains("sendInitialEvents"),
        "after the list, an ordinary watch from its version: {}",
        leases[1]
    );
}

/// A change before the initial-events-end bookmark is an ordinary watch
/// too: no waiting for the silence.
#[tokio::test(start_paused = true)]
async fn a_change_before_the_end_bookmark_falls_back_at_once() {
    let api = FakeApi::streaming(|path, is_watch, n| match (path, is_watch, n) {
        (LEASES, true, 1) => Reply::Watch(
            vec![
                added(lease("a", Some("alice@laptop"), 3)),
                json!({"type": "MODIFIED", "object": lease("a", None, 21)}),
            ],
            true,
        ),
        (LEASES, false, _) => Reply::Json(200, list(vec![lease("a", None, 21)], 21)),
        (_, true, _) => Reply::Watch(vec![end_bookmark("Pod", 20)], true),
        _ => not_served(),
    });
    let t0 = tokio::time::Instant::now();
    let (shared, ctx) = start_with_context(&api);
    wait_ready(&shared, 10).await;
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(!ctx.watch_list.streams());
    assert_eq!(api.calls(LEASES, false), 1);
    assert!(!has_lock(&scrape(&shared), "a", "foreign"));
}

/// A server that refuses the watch-list (422: its WatchList feature is off)
/// is listed in pages by every watch, and asked for a watch-list no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_server_is_listed_in_pages_and_asked_no_more() {
    let api = FakeApi::new(|path, is_watch, n| match (path, is_watch, n) {
        (LEASES, false, 1) => held_leases(&[("a", "alice@laptop", 1)], 5),
        (LEASES, true, 1) => Reply::Watch(vec![expired()], false),
        (LEASES, false, _) => held_leases(&[("a", "alice@laptop", 1), ("c", "carol@vm", 7)], 20),
        (LEASES, true, _) => open_watch(),
        (PODS, w, _) => empty(w),
        _ => not_served(),
    });
    let (shared, ctx) = start_with_context(&api);
    wait_for(&shared, "the relist after 410", 15, |t| {
        has_lock(t, "c", "foreign")
    })
    .await;
    let refused = api.refused.lock().unwrap().len();
    assert!(
        (1..=Resource::ALL.len() + 2).contains(&refused),
        "each watch asks once at most: {refused}"
    );
    assert!(!ctx.watch_list.streams());
    assert_eq!(shared.health.syncs(Resource::Leases, SyncMode::Paged), 2);
    assert_eq!(shared.health.syncs(Resource::Leases, SyncMode::Stream), 0);
    assert_eq!(
        api.refused.lock().unwrap().len(),
        refused,
        "the relist was paged"
    );
    api.assert_only_get();
}

/// A relist (after 410) on a streaming server is a watch-list again; the
/// scope is replaced at its end, never emptied first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_streams_again_and_replaces_the_scope_at_its_end() {
    let api = FakeApi::streaming(|path, is_watch, n| match (path, is_watch, n) {
        (LEASES, true, 1) => Reply::Watch(
            vec![
                added(lease("a", Some("alice@laptop"), 3)),
                end_bookmark("Lease", 20),
                expired(),
            ],
            false,
        ),
        (LEASES, true, _) => Reply::Watch(
            vec![
                added(lease("a", Some("alice@laptop"), 3)),
                added(lease("c", Some("carol@vm"), 25)),
                end_bookmark("Lease", 30),
            ],
            true,
        ),
        (_, true, _) => Reply::Watch(vec![end_bookmark("Pod", 20)], true),
        _ => not_served(),
    });
    let (shared, ctx) = start_with_context(&api);
    wait_for(&shared, "lock a", 10, |t| has_lock(t, "a", "foreign")).await;
    wait_keeping(&shared, "a", "the relist", 15, |t| {
        has_lock(t, "c", "foreign")
    })
    .await;
    assert_eq!(shared.health.syncs(Resource::Leases, SyncMode::Stream), 2);
    assert_eq!(api.calls(LEASES, false), 0, "no LIST");
    assert!(ctx.watch_list.streams());
    let leases = watch_queries(&api, LEASES);
    assert!(
        leases[1].contains("sendInitialEvents=true"),
        "{}",
        leases[1]
    );
}

/// An ordinary watch for an answer (the Leases: a bookmark without the
/// annotation, as a server that ignores sendInitialEvents sends one) makes
/// every watch list in pages, and an early end (the pods) pages that sync;
/// both at once, without waiting for a silence.
#[tokio::test(start_paused = true)]
async fn a_plain_bookmark_or_an_early_end_falls_back_at_once() {
    let api = FakeApi::streaming(|path, is_watch, n| match (path, is_watch, n) {
        (LEASES, true, 1) => Reply::Watch(
            vec![
                json!({"type": "BOOKMARK", "object": {"kind": "Lease", "apiVersion": "v1",
                "metadata": {"resourceVersion": "7"}}}),
            ],
            false,
        ),
        (PODS, true, 1) => Reply::Watch(vec![added(lease("x", None, 2))], false),
        (LEASES, false, _) => held_leases(&[("a", "alice@laptop", 3)], 7),
        (PODS, false, _) => Reply::Json(200, list(vec![], 7)),
        (LEASES | PODS, true, _) => open_watch(),
        _ => not_served(),
    });
    let t0 = tokio::time::Instant::now();
    let (shared, ctx) = start_with_context(&api);
    wait_ready(&shared, 10).await;
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(!ctx.watch_list.streams());
    assert!(has_lock(&scrape(&shared), "a", "foreign"));
    assert_eq!(shared.health.syncs(Resource::Leases, SyncMode::Paged), 1);
}

/// The silence limit (75 s) applies where the server sends bookmarks or no
/// ping watches the connection; a quiet watch on a pinged (HTTP/2)
/// connection that never had a bookmark (kube-apiserver sends none for a
/// resource nothing writes) is kept until its own timeout: at rest, no
/// request.
#[tokio::test(start_paused = true)]
async fn a_quiet_watch_is_restarted_by_silence_only_where_bookmarks_come_or_no_ping_watches() {
    let plain_bookmark = json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
        "metadata": {"resourceVersion": "9"}}});
    let api = FakeApi::new(move |path, is_watch, _| match (path, is_watch) {
        (LEASES, false) => held_leases(&[("a", "alice@laptop", 3)], 7),
        (PODS, false) => Reply::Json(200, list(vec![], 7)),
        (LEASES, true) => open_watch(),
        (PODS, true) => Reply::Watch(vec![plain_bookmark.clone()], true),
        _ => not_served(),
    });
    let (shared, ctx) = start_with_context(&api);
    // What the production stack notes from an HTTP/2 answer.
    ctx.api.note_version(http::Version::HTTP_2);
    wait_ready(&shared, 10).await;
    tokio::time::sleep(Duration::from_secs(200)).await;
    assert_eq!(
        api.calls(LEASES, true),
        1,
        "a pinged quiet watch without bookmarks is kept"
    );
    assert!(
        api.calls(PODS, true) >= 3,
        "one with bookmarks restarts after 75 s of silence: {}",
        api.calls(PODS, true)
    );
    tokio::time::sleep(Duration::from_secs(500)).await;
    assert!(
        api.calls(LEASES, true) >= 2,
        "kept no longer than its timeout + 15 s"
    );
    // Over HTTP/1.1 (no pings) the limit applies to every watch (from the
    // next wait of a watch on: the one open now keeps its long limit).
    ctx.api.note_version(http::Version::HTTP_11);
    let before = api.calls(LEASES, true);
    tokio::time::sleep(Duration::from_secs(615 + 160)).await;
    assert!(
        api.calls(LEASES, true) >= before + 2,
        "{} -> {}",
        before,
        api.calls(LEASES, true)
    );
    assert_eq!(
        value(
            &scrape(&shared),
            "captf_lock_exporter_watch_up{resource=\"leases\"}"
        ),
        Some(1.0),
        "a silence restart is no failure"
    );
}

/// A watch cache still being filled (a CRD just created) answers a
/// watch-list 429 "storage is (re)initializing"; a LIST is answered from
/// etcd meanwhile: that one sync is paged at once, without waiting for the
/// Retry-After, and the server stays a streaming one.
#[tokio::test(start_paused = true)]
async fn an_initializing_watch_cache_is_listed_at_once_for_that_sync() {
    let api = FakeApi::streaming(|path, is_watch, n| match (path, is_watch, n) {
        (MACHINES, true, 1) => Reply::JsonWith(
            429,
            status(429, "storage is (re)initializing"),
            vec![("retry-after", "1".into())],
        ),
        (MACHINES, false, _) => Reply::Json(200, list(vec![machine("a", 5)], 9)),
        (MACHINES, true, _) => open_watch(),
        (LEASES | PODS, true, _) => Reply::Watch(vec![end_bookmark("Lease", 20)], true),
        _ => not_served(),
    });
    let t0 = tokio::time::Instant::now();
    let (shared, ctx) = start_with_context(&api);
    wait_ready(&shared, 10).await;
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(api.calls(MACHINES, false), 1);
    assert_eq!(
        shared
            .health
            .syncs(Resource::TerraformMachines, SyncMode::Paged),
        1
    );
    assert_eq!(shared.health.syncs(Resource::Leases, SyncMode::Stream), 1);
    assert!(ctx.watch_list.streams(), "a 429 is no refusal");
    // The watch after the list comes once the 1 s between two watch starts is up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let machines = watch_queries(&api, MACHINES);
    assert!(
        machines.len() >= 2 && machines[1].contains("resourceVersion=9"),
        "then a watch from the list's version: {machines:?}"
    );
}
