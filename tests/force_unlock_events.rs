//! Force-unlock Events (`reason=ForceUnlocked`) against a scripted API
//! server: each is counted once, the field selector falls back when the
//! server refuses it, and Events CAPTF could not have written move nothing.

mod support;

use serde_json::{json, Value};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlocks_are_counted_once_and_the_field_selector_falls_back() {
    let api = FakeApi::new(|path, is_watch, n| match (path, is_watch, n) {
        (MACHINES, false, _) => {
            Reply::Json(200, list(vec![machine("web", 3), machine("db", 4)], 5))
        }
        (MACHINES, true, _) => open_watch(),
        // An API server that does not know the field selector answers 400.
        (EVENTS, false, 1) => Reply::Json(400, status(400, "BadRequest")),
        // The first list (history): counts nothing, sets the time.
        (EVENTS, false, 2) => {
            Reply::Json(200, list(vec![force_unlocked("old", "web", Some(3), 1)], 5))
        }
        (EVENTS, true, 1) => Reply::Watch(
            vec![
                json!({"type": "ADDED", "object": force_unlocked("e1", "db", None, 6)}),
                json!({"type": "MODIFIED", "object": force_unlocked("old", "web", Some(4), 7)}),
                // Someone else's Event with the same reason is not ours.
                json!({"type": "ADDED", "object": {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                    "metadata": {"name": "x", "namespace": NS, "resourceVersion": "8"}, "reason": "ForceUnlocked",
                    "reportingController": "someone-else", "regarding": {"kind": "TerraformMachine", "name": "db"}}}),
                expired(),
            ],
            false,
        ),
        // The relist re-sends everything; only the new Event e2 counts.
        (EVENTS, false, _) => Reply::Json(
            200,
            list(
                vec![
                    force_unlocked("old", "web", Some(4), 7),
                    force_unlocked("e1", "db", None, 6),
                    force_unlocked("e2", "db", None, 9),
                    // About an object the exporter does not know: no series.
                    force_unlocked("e3", "ghost", None, 9),
                ],
                10,
            ),
        ),
        (EVENTS, true, _) => open_watch(),
        _ => not_served(),
    });
    let shared = start(&api);
    let fu = |name: &str| {
        format!("captf_state_lock_force_unlocks_total{{namespace=\"{NS}\",kind=\"TerraformMachine\",name=\"{name}\"}}")
    };
    let text = wait_for(&shared, "counters after relist", 15, |t| {
        value(t, &fu("db")) == Some(2.0)
    })
    .await;
    assert_eq!(value(&text, &fu("ghost")), None, "{text}");
    assert_eq!(
        value(&text, &fu("web")),
        Some(1.0),
        "series 3 -> 4 is one force-unlock:\n{text}"
    );
    assert_eq!(
        value(&text, &fu("db")),
        Some(2.0),
        "e1 once (also after the relist) and the new e2:\n{text}"
    );
    assert!(
        text.contains(&format!("captf_state_lock_last_force_unlock_timestamp_seconds{{namespace=\"{NS}\",kind=\"TerraformMachine\",name=\"web\"}} 1795950000.0")),
        "last seen is series.lastObservedTime (2026-11-29T11:00:00Z = 1795950000):\n{text}"
    );
    let log = api.log.lock().unwrap().clone();
    let event_lists: Vec<&String> = log
        .iter()
        .filter(|(_, p)| p.starts_with(EVENTS))
        .map(|(_, p)| p)
        .collect();
    assert!(
        event_lists[0].contains("fieldSelector=reason%3DForceUnlocked"),
        "{event_lists:?}"
    );
    assert!(
        !event_lists[1].contains("fieldSelector"),
        "falls back after a 400: {event_lists:?}"
    );
    api.assert_only_get();
}

/// Anyone who may create Events can claim to be captf-manager: only an
/// Event CAPTF could have written counts (issue 13, defect 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_force_unlock_events_move_no_counter_and_add_no_series() {
    let forged = |name: &str, rv: u32, edit: &dyn Fn(&mut Value)| {
        let mut ev = force_unlocked(name, "web", None, rv);
        edit(&mut ev);
        json!({"type": "ADDED", "object": ev})
    };
    let long = "w".repeat(300);
    let events = vec![
        // Not a Terraform* kind.
        forged("f1", 6, &|e| e["regarding"]["kind"] = json!("ConfigMap")),
        // A Terraform kind name under another group.
        forged("f2", 7, &|e| {
            e["regarding"]["apiVersion"] = json!("example.com/v1");
        }),
        // No related Job, or one CAPTF's job-name rule cannot give for web.
        forged("f3", 8, &|e| {
            e.as_object_mut().unwrap().remove("related");
        }),
        forged("f4", 9, &|e| {
            e["related"]["name"] = json!("captf-m-db-apply-a2-abc123");
        }),
        forged("f5", 10, &|e| e["related"]["kind"] = json!("Pod")),
        // A name no object can have (300 bytes), with a matching Job name.
        forged("f6", 11, &|e| {
            e["regarding"]["name"] = json!(long);
            e["related"]["name"] = json!(format!("captf-m-{}-apply-a2-abc123", "0000000000000000"));
        }),
        // Regarding another namespace than the Event's.
        forged("f7", 12, &|e| e["regarding"]["namespace"] = json!("other")),
        // The real one, from a clock a day ahead: it counts, but its time
        // must not pin the last force-unlock time.
        forged("f8", 13, &|e| {
            e["eventTime"] = json!("2099-01-01T00:00:00.000000Z");
        }),
    ];
    let api = FakeApi::new(move |path, is_watch, _| match (path, is_watch) {
        (MACHINES, false) => Reply::Json(200, list(vec![machine("web", 3)], 5)),
        (MACHINES, true) => open_watch(),
        (EVENTS, false) => Reply::Json(200, list(vec![], 5)),
        (EVENTS, true) => Reply::Watch(events.clone(), true),
        _ => not_served(),
    });
    let shared = start(&api);
    let fu = "captf_state_lock_force_unlocks_total{namespace=\"ns1\",kind=\"TerraformMachine\",name=\"web\"}";
    let text = wait_for(&shared, "the real Event counted", 15, |t| {
        value(t, fu) == Some(1.0)
    })
    .await;
    let counters: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("captf_state_lock_force_unlocks_total{"))
        .collect();
    assert_eq!(
        counters.len(),
        1,
        "forged Events added series: {counters:?}"
    );
    assert!(
        !text.contains("captf_state_lock_last_force_unlock_timestamp_seconds{namespace=\"ns1\",kind=\"TerraformMachine\",name=\"web\"}"),
        "a time a day ahead pinned the last force-unlock time:\n{text}"
    );
    api.assert_only_get();
}
