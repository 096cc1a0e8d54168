//! ForceUnlocked Events about objects that do not exist (issue 43, item
//! 6): whoever may create Events in a namespace may send any number. At
//! most 256 per namespace are kept; the rest are dropped and counted in
//! `captf_lock_exporter_force_unlock_events_dropped_total`, and Events
//! about objects that exist are still counted. (What they cost in memory:
//! tests/hostile_memory.rs.)

mod support;

use std::time::Duration;

use captf_lock_exporter::index::MAX_UNKNOWN_OBJECT_EVENTS_PER_NAMESPACE;
use serde_json::{json, Value};
use support::*;
use tokio::time::Instant;

/// Events listed at the start about objects that do not exist.
const LISTED: usize = 300;
/// More of them on the watch.
const WATCHED: usize = 10;

const DROPPED: &str = "captf_lock_exporter_force_unlock_events_dropped_total";

#[tokio::test(start_paused = true)]
async fn events_about_unknown_objects_past_the_cap_are_dropped_and_counted() {
    let api = FakeApi::new(|path, is_watch, n| match (path, is_watch, n) {
        (MACHINES, false, _) => Reply::Json(200, list(vec![machine("web", 3)], 5)),
        (MACHINES, true, _) => open_watch(),
        // The first answer fails, so the Events are listed after the
        // machines (a second later): "web" is known by then.
        (EVENTS, false, 1) => Reply::Json(500, status(500, "InternalError")),
        (EVENTS, false, _) => {
            let ghosts = (0..LISTED)
                .map(|i| force_unlocked(&format!("old-{i}"), &format!("ghost-{i}"), None, 1))
                .collect();
            Reply::Json(200, list(ghosts, 10))
        }
        (EVENTS, true, 1) => {
            let mut events: Vec<Value> = (0..WATCHED)
                .map(|i| {
                    let ev =
                        force_unlocked(&format!("new-{i}"), &format!("ghost-new-{i}"), None, 11);
                    json!({"type": "ADDED", "object": ev})
                })
                .collect();
            // An Event about an object that exists: counted, cap or not.
            events
                .push(json!({"type": "ADDED", "object": force_unlocked("e-web", "web", None, 12)}));
            Reply::Watch(events, true)
        }
        (EVENTS, true, _) => open_watch(),
        _ => not_served(),
    });
    let shared = start(&api);
    let web = format!(
        "captf_state_lock_force_unlocks_total{{namespace=\"{NS}\",kind=\"TerraformMachine\",name=\"web\"}}"
    );
    let limit = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = scrape(&shared);
        if value(&text, &web) == Some(1.0) {
            break text;
        }
        assert!(
            Instant::now() < limit,
            "web's force-unlock not counted:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let dropped = (LISTED + WATCHED - MAX_UNKNOWN_OBJECT_EVENTS_PER_NAMESPACE) as f64;
    assert_eq!(value(&text, DROPPED), Some(dropped), "{text}");
    assert_eq!(shared.health.events_dropped(), dropped as u64);
    assert!(
        !text.contains("name=\"ghost-"),
        "no series for objects that do not exist:\n{text}"
    );
    api.assert_only_get();
}
