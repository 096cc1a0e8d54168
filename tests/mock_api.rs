//! The exporter against a scripted API server (a tower service behind
//! `kube::Client`): what kmock's emulator cannot do — watch drops, 410 Gone,
//! 403 on one resource — and proof that only GET requests are ever sent.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_drop_and_410_recover_without_losing_state() {
    let api = FakeApi::new(|path, is_watch, n| match (path, is_watch, n) {
        (LEASES, false, 1) => held_leases(&[("a", "alice@laptop", 1)], 5),
        // Dropped connection: one event, then the stream ends.
        (LEASES, true, 1) => Reply::Watch(
            vec![json!({"type": "ADDED", "object": lease("b", Some("bob@desk"), 6)})],
            false,
        ),
        // The resumed watch is told its resourceVersion expired.
        (LEASES, true, 2) => Reply::Watch(vec![expired()], false),
        (LEASES, false, _) => held_leases(
            &[
                ("a", "alice@laptop", 1),
                ("b", "bob@desk", 6),
                ("c", "carol@vm", 7),
            ],
            20,
        ),
        (LEASES, true, _) => open_watch(),
        (PODS, w, _) => empty(w),
        _ => not_served(),
    });
    let shared = start(&api);
    wait_for(&shared, "lock a", 10, |t| has_lock(t, "a", "foreign")).await;
    // From here on, lock a must be in every scrape.
    wait_keeping(&shared, "a", "the recovery", 15, |t| {
        has_lock(t, "b", "foreign") && has_lock(t, "c", "foreign")
    })
    .await;
    assert_eq!(
        api.calls(LEASES, false),
        2,
        "one list at start, one relist after 410"
    );
    let log = api.log.lock().unwrap().clone();
    let watches: Vec<&String> = log
        .iter()
        .filter(|(_, p)| p.starts_with(LEASES) && p.contains("watch=true"))
        .map(|(_, p)| p)
        .collect();
    assert!(watches.len() >= 2);
    assert!(
        watches[1].contains("resourceVersion=6"),
        "after a drop the watch resumes from the last version: {}",
        watches[1]
    );
    let text = scrape(&shared);
    assert!(
        value(
            &text,
            "captf_lock_exporter_watch_errors_total{resource=\"leases\",reason=\"gone\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{text}"
    );
    assert!(text.contains("captf_lock_exporter_watch_up{resource=\"leases\"} 1"));
    // The label selector is sent: the API server does the filtering it can.
    assert!(
        log.iter()
            .any(|(_, p)| p.starts_with(LEASES) && p.contains("labelSelector=tfstate%3Dtrue")),
        "{log:?}"
    );
    api.assert_only_get();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_pods_make_own_locks_unverified_and_the_rest_works() {
    let api = FakeApi::new(|path, is_watch, _| match (path, is_watch) {
        (LEASES, false) => Reply::Json(
            200,
            list(
                vec![
                    lease("web", Some(&format!("@{WEB_POD}")), 1),
                    lease("other", Some("alice@laptop"), 2),
                ],
                5,
            ),
        ),
        (LEASES, true) => open_watch(),
        (MACHINES, false) => {
            Reply::Json(200, list(vec![machine("web", 3), machine("other", 4)], 5))
        }
        (MACHINES, true) => open_watch(),
        (p, _) if p.starts_with("/api/v1/") && p.contains("pods") => {
            Reply::Json(403, status(403, "Forbidden"))
        }
        // No RBAC on Events either: force-unlock counting is blind, locks are not.
        (EVENTS, _) => Reply::Json(403, status(403, "Forbidden")),
        _ => not_served(),
    });
    let shared = start(&api);
    let text = wait_for(&shared, "own_unverified", 10, |t| {
        has_lock(t, "web", "own_unverified") && has_lock(t, "other", "foreign")
    })
    .await;
    assert!(
        text.contains("captf_lock_exporter_watch_up{resource=\"events\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("captf_lock_exporter_watch_up{resource=\"pods\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("captf_lock_exporter_watch_up{resource=\"leases\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("captf_lock_exporter_watch_up{resource=\"terraformclusters\"} 0"),
        "{text}"
    );
    let text = wait_for(&shared, "a failed pod read", 10, |t| {
        value(t, "captf_lock_exporter_pod_reads_total{result=\"error\"}").unwrap_or(0.0) >= 1.0
    })
    .await;
    assert!(
        value(
            &text,
            "captf_lock_exporter_watch_errors_total{resource=\"pods\",reason=\"forbidden\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{text}"
    );
    assert!(value(&text, "captf_lock_exporter_watch_errors_total{resource=\"terraformclusters\",reason=\"not_found\"}").unwrap_or(0.0) >= 1.0, "{text}");
    // A missing CRD and missing RBAC settle readiness instead of blocking it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !shared.health.ready() {
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    api.assert_only_get();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_is_confirmed_by_a_live_get_and_only_get_is_used() {
    let api = FakeApi::new(|path, is_watch, _| match (path, is_watch) {
        (LEASES, false) => Reply::Json(
            200,
            list(vec![lease("web", Some(&format!("@{WEB_POD}")), 1)], 5),
        ),
        (LEASES, true) => open_watch(),
        (MACHINES, false) => Reply::Json(200, list(vec![machine("web", 3)], 5)),
        (MACHINES, true) => open_watch(),
        (PODS, false) => Reply::Json(200, list(vec![], 5)),
        (PODS, true) => open_watch(),
        (p, false) if p == format!("/api/v1/namespaces/{NS}/pods/{WEB_POD}") => {
            Reply::Json(404, status(404, "NotFound"))
        }
        _ => not_served(),
    });
    let shared = start(&api);
    wait_for(&shared, "own_stale", 10, |t| {
        has_lock(t, "web", "own_stale")
    })
    .await;
    let text = scrape(&shared);
    assert!(
        value(
            &text,
            "captf_lock_exporter_pod_reads_total{result=\"not_found\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{text}"
    );
    assert_eq!(
        api.calls(&format!("/api/v1/namespaces/{NS}/pods/{WEB_POD}"), false),
        1,
        "one live read per verdict"
    );
    api.assert_only_get();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_and_garbage_do_not_stop_the_exporter() {
    let api = FakeApi::new(|path, is_watch, n| match (path, is_watch, n) {
        (LEASES, false, 1) => Reply::Json(500, status(500, "InternalError")),
        // Not JSON at all.
        (LEASES, false, 2) => Reply::Json(200, json!("this is not a list")),
        (LEASES, false, _) => held_leases(&[("a", "alice@laptop", 1)], 5),
        (LEASES, true, _) => Reply::Watch(
            vec![
                json!({"type": "ADDED", "object": {"metadata": 7}}),
                json!({"type": "ADDED", "object": lease("b", Some("bob@desk"), 9)}),
            ],
            true,
        ),
        (PODS, w, _) => empty(w),
        _ => not_served(),
    });
    let shared = start(&api);
    let text = wait_for(&shared, "lock a after errors", 15, |t| {
        has_lock(t, "a", "foreign")
    })
    .await;
    assert!(
        value(
            &text,
            "captf_lock_exporter_watch_errors_total{resource=\"leases\",reason=\"server_error\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{text}"
    );
    assert!(
        value(
            &text,
            "captf_lock_exporter_watch_errors_total{resource=\"leases\",reason=\"decode\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{text}"
    );
    api.assert_only_get();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_watch_resumes_without_relist_and_is_up_again() {
    let api = FakeApi::new(|path, is_watch, n| match (path, is_watch, n) {
        (LEASES, false, _) => held_leases(&[("a", "alice@laptop", 1)], 5),
        // The connection breaks mid-watch: a transport error, not a 410.
        (LEASES, true, 1) => Reply::WatchBroken(vec![]),
        // The watcher resumes from the same resourceVersion; a change flows.
        (LEASES, true, _) => Reply::Watch(
            vec![json!({"type": "MODIFIED", "object": lease("a", None, 6)})],
            true,
        ),
        (PODS, w, _) => empty(w),
        _ => not_served(),
    });
    let shared = start(&api);
    let text = wait_for(&shared, "the release after the resumed watch", 15, |t| {
        t.contains(
            "captf_state_lock_held{namespace=\"ns1\",kind=\"TerraformMachine\",name=\"a\"} 0",
        )
    })
    .await;
    assert!(
        value(
            &text,
            "captf_lock_exporter_watch_errors_total{resource=\"leases\",reason=\"transport\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{text}"
    );
    assert!(
        text.contains("captf_lock_exporter_watch_up{resource=\"leases\"} 1"),
        "a resumed watch is up again once changes flow:\n{text}"
    );
    assert_eq!(api.calls(LEASES, false), 1, "resumed, not relisted");
    let log = api.log.lock().unwrap().clone();
    let watches: Vec<&String> = log
        .iter()
        .filter(|(_, p)| p.starts_with(LEASES) && p.contains("watch=true"))
        .map(|(_, p)| p)
        .collect();
    assert!(
        watches.len() >= 2 && watches[1].contains("resourceVersion=5"),
        "{watches:?}"
    );
    api.assert_only_get();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skipped_resource_is_never_requested_exports_no_watch_series_and_does_not_gate_readiness()
{
    use captf_lock_exporter::index::Resource;
    const POOLS: &str = "/apis/infrastructure.cluster.x-k8s.io/v1alpha1/terraformmachinepools";
    // TerraformMachinePools answer 503 forever: a transient failure, which
    // holds readiness back for as long as the resource is watched.
    let script = |path: &str, is_watch: bool, _: usize| match (path, is_watch) {
        (LEASES, false) => held_leases(&[("web", "alice@laptop", 1)], 5),
        (LEASES, true) => open_watch(),
        (MACHINES, false) => Reply::Json(200, list(vec![machine("web", 3)], 5)),
        (MACHINES, true) => open_watch(),
        (POOLS, _) => Reply::Json(503, status(503, "ServiceUnavailable")),
        _ => not_served(),
    };

    // Watched: the pools hold readiness back and report watch_up 0.
    let watched = FakeApi::new(script);
    let all = start(&watched);
    wait_for(&all, "the pools' 503", 10, |t| {
        value(
            t,
            "captf_lock_exporter_watch_errors_total{resource=\"terraformmachinepools\",reason=\"server_error\"}",
        )
        .unwrap_or(0.0)
            >= 1.0
            && has_lock(t, "web", "foreign")
    })
    .await;
    assert!(!all.health.ready(), "a 503 is worth waiting for");

    // Skipped (--skip-resources terraformmachinepools): never requested,
    // no series for it, and ready once the rest has listed.
    let skipping = FakeApi::new(script);
    let resources: Vec<Resource> = Resource::ALL
        .into_iter()
        .filter(|r| *r != Resource::TerraformMachinePools)
        .collect();
    let shared = start_watching(&skipping, &resources);
    wait_for(&shared, "the lock", 10, |t| has_lock(t, "web", "foreign")).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !shared.health.ready() {
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = scrape(&shared);
    assert!(
        text.contains("captf_lock_exporter_watch_up{resource=\"leases\"} 1"),
        "{text}"
    );
    assert!(
        !text.contains("resource=\"terraformmachinepools\""),
        "a skipped resource has no watch series:\n{text}"
    );
    assert!(
        shared
            .health
            .not_up()
            .iter()
            .all(|w| w.resource != Resource::TerraformMachinePools),
        "/readyz does not list it as down"
    );
    assert_eq!(
        skipping.calls(POOLS, false) + skipping.calls(POOLS, true),
        0
    );
    skipping.assert_only_get();
}
