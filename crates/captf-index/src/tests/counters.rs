//! Force-unlock counters and the overdue warning.

use super::*;

fn fu_event(name: &str, object: &str, occurrences: u64, at: f64) -> Change {
    let ev = ForceUnlockEvent {
        namespace: NS.into(),
        kind: "TerraformMachine".into(),
        name: object.into(),
        occurrences,
        last_seen: Some(at),
    };
    Change {
        key: (NS.into(), name.into()),
        entry: Some(Entry::ForceUnlock(ev)),
    }
}

#[test]
fn force_unlocks_count_each_event_and_series_increase_once() {
    let mut ix = Index::new();
    let total = |ix: &Index, o: &str| ix.force_unlocks_of(NS, "TerraformMachine", o).total;
    // The first list is history: not counted, but it sets the time.
    ix.relist(
        Resource::Events,
        None,
        vec![fu_event("old", "web", 3, 100.0)],
    );
    assert_eq!(total(&ix, "web"), 0);
    assert_eq!(
        ix.force_unlocks_of(NS, "TerraformMachine", "web").last_seen,
        Some(100.0)
    );
    // A repeat of the old Event counts the increase only.
    ix.feed(Resource::Events, fu_event("old", "web", 4, 200.0));
    assert_eq!(total(&ix, "web"), 1);
    // Two new Events about two objects, one of them unknown to the index.
    ix.feed(Resource::Events, fu_event("e1", "web", 1, 300.0));
    ix.feed(Resource::Events, fu_event("e2", "ghost", 1, 300.0));
    assert_eq!(total(&ix, "web"), 2);
    assert_eq!(total(&ix, "ghost"), 1);
    // A relist re-sends everything: nothing is counted twice; a series that
    // grew while the watch was down counts its increase; a new Event counts.
    ix.relist(
        Resource::Events,
        None,
        vec![
            fu_event("old", "web", 4, 200.0),
            fu_event("e1", "web", 2, 400.0),
            fu_event("e3", "web", 1, 500.0),
        ],
    );
    assert_eq!(total(&ix, "web"), 4);
    // e2, the only Event naming the unknown object "ghost", is gone: so is
    // its counter (no series left behind); see the next test for known ones.
    assert_eq!(total(&ix, "ghost"), 0);
    assert_eq!(
        ix.force_unlocks_of(NS, "TerraformMachine", "web").last_seen,
        Some(500.0)
    );
    // An update that does not raise the count (or lowers it) adds nothing.
    ix.feed(Resource::Events, fu_event("e1", "web", 2, 400.0));
    assert_eq!(total(&ix, "web"), 4);
}

/// Machine `a` with lockTimeoutSeconds 60, its lock held by a workstation
/// since `t0()`.
fn index_with_alices_lock_on_a() -> Index {
    let mut ix = Index::new();
    ix.feed(
        Resource::TerraformMachines,
        machine_with_lock_timeout("a", 60),
    );
    ix.feed(
        Resource::Leases,
        lease_change(Kind::TerraformMachine, "a", Some(info("alice@laptop"))),
    );
    ix
}

#[test]
fn overdue_is_reported_once_per_lock() {
    let mut ix = index_with_alices_lock_on_a();
    let m = Kind::TerraformMachine;
    assert!(ix.newly_overdue(t0() + Duration::from_secs(59)).is_empty());
    let o = ix.newly_overdue(t0() + Duration::from_secs(61));
    assert_eq!(o.len(), 1);
    assert_eq!(
        (
            o[0].name.as_str(),
            o[0].timeout_seconds,
            o[0].holder.as_str()
        ),
        ("a", 60, "alice@laptop")
    );
    assert!(
        ix.newly_overdue(t0() + Duration::from_secs(62)).is_empty(),
        "once, not per check"
    );
    // An own live lock never is.
    ix.feed(Resource::Pods, pod(WEB_POD, false));
    ix.feed(
        Resource::TerraformMachines,
        object(
            m,
            "web",
            None,
            Some(JobsPolicy {
                lock_timeout_seconds: Some(0),
                active_deadline_seconds: None,
            }),
            None,
        ),
    );
    ix.feed(
        Resource::Leases,
        lease_change(m, "web", Some(info(&format!("@{WEB_POD}")))),
    );
    assert!(ix
        .newly_overdue(t0() + Duration::from_secs(1000))
        .is_empty());
}

#[test]
fn the_next_clock_deadline_is_the_first_lock_to_turn_overdue() {
    assert_eq!(
        Index::new().next_clock_deadline(),
        None,
        "nothing waits on the clock"
    );
    let mut ix = index_with_alices_lock_on_a();
    let created_ms = (unix_seconds(t0()) * 1000.0).floor() as i64;
    assert_eq!(ix.next_clock_deadline(), Some(created_ms + 60_000));
    assert!(ix.take_clock_moved(), "a first deadline wakes the checker");
    assert!(!ix.take_clock_moved());
    // Reported: nothing is left to wait for.
    assert_eq!(ix.newly_overdue(t0() + Duration::from_secs(61)).len(), 1);
    assert_eq!(ix.next_clock_deadline(), None);
}

#[test]
fn a_lock_already_overdue_when_written_costs_no_second_render() {
    let mut ix = Index::new();
    ix.feed(
        Resource::TerraformMachines,
        machine_with_lock_timeout("a", 60),
    );
    // Taken an hour before the exporter sees it: overdue from its first render.
    let mut old = info("alice@laptop");
    old.created = Some(chrono::DateTime::<chrono::Utc>::from(
        t0() - Duration::from_secs(3600),
    ));
    ix.feed(
        Resource::Leases,
        lease_change(Kind::TerraformMachine, "a", Some(old)),
    );
    assert!(!ix.take_changes().is_empty(), "the write redraws the lock");
    assert_eq!(ix.newly_overdue(t0() + Duration::from_secs(1)).len(), 1);
    assert!(
        ix.take_changes().is_empty(),
        "that render already showed it overdue: nothing to redraw"
    );
    // One that turns overdue while watched is redrawn when it does.
    let mut ix = index_with_alices_lock_on_a();
    ix.take_changes();
    assert_eq!(ix.newly_overdue(t0() + Duration::from_secs(61)).len(), 1);
    assert!(!ix.take_changes().is_empty());
}

#[test]
fn counters_of_deleted_objects_go_when_no_event_names_them() {
    let mut ix = Index::new();
    let m = Kind::TerraformMachine;
    // Stored counters; what is rendered is checked below.
    let count = |ix: &Index| {
        ix.force_unlocks
            .counters()
            .filter(|(o, _)| o.name == "web")
            .count()
    };
    let rendered = |ix: &Index| {
        let mut n = 0;
        ix.for_each_force_unlock(|_, _, name, _| n += usize::from(name == "web"));
        n
    };
    ix.relist(Resource::Events, None, vec![]);
    ix.feed(
        Resource::TerraformMachines,
        object(m, "web", None, None, None),
    );
    ix.feed(Resource::Events, fu_event("e1", "web", 1, 1.0));
    ix.feed(Resource::Events, fu_event("e2", "web", 1, 2.0));
    assert_eq!(ix.force_unlocks_of(NS, "TerraformMachine", "web").total, 2);
    // The object goes; its Events still name it: the counter stays.
    assert_eq!(rendered(&ix), 1);
    ix.feed(Resource::TerraformMachines, gone("web"));
    assert_eq!(count(&ix), 1);
    assert_eq!(
        rendered(&ix),
        0,
        "an object neither watched nor locked adds no series"
    );
    ix.feed(Resource::Events, gone("e1"));
    assert_eq!(count(&ix), 1, "e2 still names it");
    // The last Event expires: nothing names the object any more.
    ix.feed(Resource::Events, gone("e2"));
    assert_eq!(count(&ix), 0);
    // A known object keeps its counter when its Events expire.
    ix.feed(
        Resource::TerraformMachines,
        object(m, "db", None, None, None),
    );
    ix.feed(Resource::Events, fu_event("e3", "db", 1, 3.0));
    ix.feed(Resource::Events, gone("e3"));
    assert_eq!(ix.force_unlocks_of(NS, "TerraformMachine", "db").total, 1);
}

#[test]
fn one_event_update_moves_a_counter_by_a_bounded_amount() {
    let mut ix = Index::new();
    let total = |ix: &Index| ix.force_unlocks_of(NS, "TerraformMachine", "web").total;
    let huge = i64::MAX as u64;
    ix.relist(Resource::Events, None, vec![fu_event("old", "web", 1, 1.0)]);
    // A known Event whose series.count jumps to 2^63-1.
    ix.feed(Resource::Events, fu_event("old", "web", huge, 2.0));
    assert_eq!(total(&ix), MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE);
    // Later increases count from the reported count, still bounded.
    ix.feed(Resource::Events, fu_event("old", "web", huge, 3.0));
    assert_eq!(total(&ix), MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE);
    ix.feed(Resource::Events, fu_event("old", "web", huge + 1, 4.0));
    assert_eq!(total(&ix), MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE + 1);
    ix.feed(Resource::Events, fu_event("old", "web", u64::MAX, 5.0));
    assert_eq!(total(&ix), 2 * MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE + 1);
    // A new Event born with a huge series.count is bounded too.
    ix.feed(Resource::Events, fu_event("new", "web", huge, 6.0));
    assert_eq!(total(&ix), 3 * MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE + 1);
    // A relist re-sends them: nothing more.
    ix.relist(
        Resource::Events,
        None,
        vec![
            fu_event("old", "web", u64::MAX, 5.0),
            fu_event("new", "web", huge, 6.0),
        ],
    );
    assert_eq!(total(&ix), 3 * MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE + 1);
    // Small, real increases are counted exactly.
    ix.feed(Resource::Events, fu_event("e1", "web", 1, 7.0));
    ix.feed(Resource::Events, fu_event("e1", "web", 3, 8.0));
    assert_eq!(total(&ix), 3 * MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE + 4);
}

/// Whether `/metrics` draws the lock of TerraformMachine `name` overdue at `now`.
fn view_overdue(ix: &Index, name: &str, now: SystemTime) -> Option<bool> {
    let key = LockKey::new(NS, state_suffix(NS, Kind::TerraformMachine, name));
    ix.with_view_of(&key, |v| match v {
        KeyView::Lock(l) => {
            let (age, _) = l.age(now)?;
            Some(l.overdue(l.state.class?, age))
        }
        KeyView::Object(_) => None,
    })
    .flatten()
}

#[test]
fn the_read_model_judges_overdue_as_metrics_does() {
    let mut ix = index_with_alices_lock_on_a();
    let key = LockKey::new(NS, state_suffix(NS, Kind::TerraformMachine, "a"));
    let facts = |ix: &Index| ix.facts(&key).expect("a's lock is held");
    for (secs, overdue) in [(59, false), (61, true)] {
        let now = t0() + Duration::from_secs(secs);
        assert_eq!(facts(&ix).overdue(now), overdue, "at {secs} s");
        assert_eq!(view_overdue(&ix, "a", now), Some(overdue), "at {secs} s");
    }
    // While the timeouts are pending, neither judges it.
    ix.begin_start();
    let late = t0() + Duration::from_secs(61);
    assert!(facts(&ix).starting);
    assert!(!facts(&ix).overdue(late));
    assert_eq!(view_overdue(&ix, "a", late), Some(false));
    ix.finish_start(late);
    assert!(facts(&ix).overdue(late));
}

/// Events about objects the index does not know are
/// kept up to a cap per namespace; past it they are dropped and the write
/// says so. A kept Event's update is not dropped, a deletion frees its
/// slot, an object that comes frees its Events' slots, another namespace
/// has its own cap, and Events about known objects never count.
#[test]
fn events_about_unknown_objects_are_capped_per_namespace() {
    let cap = crate::MAX_UNKNOWN_OBJECT_EVENTS_PER_NAMESPACE;
    let mut ix = Index::new();
    let ghost = |i: usize| fu_event(&format!("ev-{i}"), &format!("ghost-{i}"), 1, 100.0);
    let dropped = |fx: Effects| fx.events_dropped;
    let kept = |ix: &Index| ix.force_unlocks.unknown_kept(NS);
    for i in 0..cap {
        assert_eq!(dropped(ix.feed(Resource::Events, ghost(i))), 0, "{i}");
    }
    assert_eq!(kept(&ix), cap);
    assert_eq!(dropped(ix.feed(Resource::Events, ghost(cap))), 1);
    assert_eq!(
        ix.force_unlocks_of(NS, "TerraformMachine", &format!("ghost-{cap}"))
            .total,
        0
    );
    // A kept one's update is kept (and counts its increase).
    assert_eq!(
        dropped(ix.feed(Resource::Events, fu_event("ev-0", "ghost-0", 2, 200.0))),
        0
    );
    assert_eq!(
        ix.force_unlocks_of(NS, "TerraformMachine", "ghost-0").total,
        2
    );
    // A deletion frees its slot.
    ix.feed(
        Resource::Events,
        Change {
            key: (NS.into(), "ev-1".into()),
            entry: None,
        },
    );
    assert_eq!(kept(&ix), cap - 1);
    assert_eq!(dropped(ix.feed(Resource::Events, ghost(cap))), 0);
    // The object of ev-2 comes (its Lease): its Event no longer counts.
    ix.feed(
        Resource::Leases,
        lease_change(Kind::TerraformMachine, "ghost-2", None),
    );
    assert_eq!(kept(&ix), cap - 1);
    assert_eq!(dropped(ix.feed(Resource::Events, ghost(cap + 1))), 0);
    assert_eq!(dropped(ix.feed(Resource::Events, ghost(cap + 2))), 1);
    // Events about a known object are never dropped.
    ix.feed(
        Resource::TerraformMachines,
        object(Kind::TerraformMachine, "web", None, None, None),
    );
    for i in 0..20 {
        let ev = fu_event(&format!("web-{i}"), "web", 1, 300.0);
        assert_eq!(dropped(ix.feed(Resource::Events, ev)), 0);
    }
    assert_eq!(ix.force_unlocks_of(NS, "TerraformMachine", "web").total, 20);
    // A relist past the cap says how many it dropped; the stale ones went.
    let listed: Vec<Change> = (0..cap + 5).map(|i| ghost(1000 + i)).collect();
    assert_eq!(dropped(ix.relist(Resource::Events, None, listed)), 5);
    assert_eq!(kept(&ix), cap);
}

/// Whoever may create Events filled a namespace's cap
/// with Events about objects that never exist; after a restart, a real
/// force-unlock whose Event came on the live watch before its object's
/// Lease (or Terraform* object) was listed was dropped for good, and its
/// counter never moved.
#[test]
fn a_live_force_unlock_before_its_lease_counts_at_start_despite_a_full_cap() {
    let cap = crate::MAX_UNKNOWN_OBJECT_EVENTS_PER_NAMESPACE;
    let mut ix = Index::new();
    ix.begin_start();
    let ghosts: Vec<Change> = (0..cap)
        .map(|i| fu_event(&format!("ev-{i}"), &format!("ghost-{i}"), 1, 100.0))
        .collect();
    assert_eq!(ix.relist(Resource::Events, None, ghosts).events_dropped, 0);
    assert_eq!(ix.force_unlocks.unknown_kept(NS), cap);
    // The real force-unlock of x, live, before x's Lease is listed.
    let fx = ix.feed(Resource::Events, fu_event("x-unlocked", "x", 1, 200.0));
    assert_eq!(fx.events_dropped, 0, "x's force-unlock was dropped");
    ix.relist(
        Resource::Leases,
        None,
        vec![lease_change(Kind::TerraformMachine, "x", None)],
    );
    assert_eq!(
        ix.force_unlocks_of(NS, "TerraformMachine", "x").total,
        1,
        "x's counter"
    );
    // Once every watch has synced, the cap holds again.
    ix.finish_start(t0());
    let late = fu_event("late", "ghost-late", 1, 300.0);
    assert_eq!(ix.feed(Resource::Events, late).events_dropped, 1);
}

/// What the start lets past the caps is bounded too: live Events about
/// unknown objects beyond [`crate::MAX_UNKNOWN_OBJECT_EVENTS_WHILE_STARTING`]
/// are dropped even while the watches are syncing, and a listed Event never
/// passes its namespace's cap.
#[test]
fn events_kept_past_the_cap_at_start_are_bounded() {
    let cap = crate::MAX_UNKNOWN_OBJECT_EVENTS_PER_NAMESPACE;
    let allowance = crate::MAX_UNKNOWN_OBJECT_EVENTS_WHILE_STARTING;
    let mut ix = Index::new();
    ix.begin_start();
    let listed: Vec<Change> = (0..cap + 10)
        .map(|i| fu_event(&format!("ev-{i}"), &format!("ghost-{i}"), 1, 100.0))
        .collect();
    assert_eq!(ix.relist(Resource::Events, None, listed).events_dropped, 10);
    let mut dropped = 0;
    for i in 0..allowance + 7 {
        let ev = fu_event(&format!("live-{i}"), &format!("live-ghost-{i}"), 1, 200.0);
        dropped += ix.feed(Resource::Events, ev).events_dropped;
    }
    assert_eq!(dropped, 7);
    assert_eq!(ix.force_unlocks.unknown_kept(NS), cap + allowance);
    // Deleting one of them does not open the allowance again.
    ix.feed(
        Resource::Events,
        Change {
            key: (NS.into(), "live-0".into()),
            entry: None,
        },
    );
    let more = fu_event("live-more", "live-ghost-more", 1, 200.0);
    assert_eq!(ix.feed(Resource::Events, more).events_dropped, 1);
}
