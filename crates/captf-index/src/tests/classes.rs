//! Holder classes: own pods, live reads, foreign and unknown holders.

use super::*;

/// The class of the lock of TerraformMachine "web", the object most tests use.
fn web_class(ix: &Index) -> Option<HolderClass> {
    class_of(ix, Kind::TerraformMachine, "web")
}

#[test]
fn own_pod_running_is_own_live_without_a_read() {
    let (ix, fx) = web_locked_by_own_pod(Some(false));
    assert_eq!(web_class(&ix), Some(HolderClass::OwnLive));
    assert!(
        fx.confirm.is_empty(),
        "a live cached pod needs no live read"
    );
    assert_eq!(fx.class_changes.len(), 1);
    assert_eq!(fx.class_changes[0].to, Some(HolderClass::OwnLive));
}

#[test]
fn stale_needs_a_live_read_before_it_is_reported() {
    let (mut ix, fx) = web_locked_by_own_pod(None);
    assert_eq!(fx.confirm, vec![ObjectKey::new(NS, WEB_POD)]);
    // Not confirmed yet: never guessed stale.
    assert_eq!(web_class(&ix), Some(HolderClass::OwnUnverified));
    let fx = ix.record_pod_read(ObjectKey::new(NS, WEB_POD), PodRead::Gone, t0());
    assert_eq!(web_class(&ix), Some(HolderClass::OwnStale));
    assert_eq!(fx.class_changes[0].from, Some(HolderClass::OwnUnverified));
}

#[test]
fn a_pod_the_watch_shows_finished_is_stale_without_a_read() {
    // Succeeded and Failed are final phases: the pod can only stay there
    // or be deleted, both stale for CAPTF. Only a cache miss is read.
    let (mut ix, _) = web_locked_by_own_pod(Some(false));
    let fx = ix.feed(Resource::Pods, pod(WEB_POD, true));
    assert!(fx.confirm.is_empty(), "{fx:?}");
    assert_eq!(web_class(&ix), Some(HolderClass::OwnStale));
    assert_eq!(fx.class_changes[0].from, Some(HolderClass::OwnLive));
    assert_eq!(fx.class_changes[0].to, Some(HolderClass::OwnStale));
    assert!(!ix.needs_read(&ObjectKey::new(NS, WEB_POD)));
    assert!(ix.pods_to_recheck().is_empty());
}

#[test]
fn deleted_pod_and_cache_lag() {
    let (mut ix, _) = web_locked_by_own_pod(Some(false));
    ix.feed(Resource::Pods, gone(WEB_POD));
    // The live read still finds it (cache ahead of the server is impossible,
    // but a read racing a recreate is not): it stays live.
    ix.record_pod_read(ObjectKey::new(NS, WEB_POD), PodRead::Live, t0());
    assert_eq!(web_class(&ix), Some(HolderClass::OwnLive));
    assert_eq!(ix.pods_to_recheck(), vec![ObjectKey::new(NS, WEB_POD)]);
    ix.record_pod_read(ObjectKey::new(NS, WEB_POD), PodRead::Gone, t0());
    assert_eq!(web_class(&ix), Some(HolderClass::OwnStale));
    assert!(
        ix.pods_to_recheck().is_empty(),
        "a confirmed gone pod is final"
    );
    assert!(
        !ix.needs_read(&ObjectKey::new(NS, WEB_POD)),
        "a queued duplicate read is dropped"
    );
    assert!(!ix.needs_read(&ObjectKey::new(NS, "unrelated")));
}

#[test]
fn unreadable_pod_is_own_unverified_and_rechecked() {
    let (mut ix, _) = web_locked_by_own_pod(None);
    ix.record_pod_read(ObjectKey::new(NS, WEB_POD), PodRead::Failed, t0());
    assert_eq!(web_class(&ix), Some(HolderClass::OwnUnverified));
    assert_eq!(ix.pods_to_recheck().len(), 1);
}

#[test]
fn foreign_unknown_and_release() {
    let mut ix = Index::new();
    let m = Kind::TerraformMachine;
    for n in ["a", "b", "c", "d"] {
        ix.feed(Resource::TerraformMachines, object(m, n, None, None, None));
    }
    ix.feed(
        Resource::Leases,
        lease_change(m, "a", Some(info("alice@laptop"))),
    );
    // Another object's runner pod is foreign to this one.
    ix.feed(
        Resource::Leases,
        lease_change(m, "b", Some(info(&format!("@{WEB_POD}")))),
    );
    ix.feed(
        Resource::Leases,
        lease_change(m, "c", Some(info("no-at-sign"))),
    );
    let suffix = state_suffix(NS, m, "d");
    let bad = LockLease::new(
        NS.into(),
        suffix.clone(),
        None,
        None,
        "lock-d".into(),
        Err(captf_core::lockinfo::parse_lock_info("{").unwrap_err()),
    );
    ix.feed(
        Resource::Leases,
        Change {
            key: (NS.into(), lock_lease_name(&suffix)),
            entry: Some(Entry::Lease(bad)),
        },
    );
    assert_eq!(class_of(&ix, m, "a"), Some(HolderClass::Foreign));
    assert_eq!(class_of(&ix, m, "b"), Some(HolderClass::Foreign));
    assert_eq!(class_of(&ix, m, "c"), Some(HolderClass::Unknown));
    assert_eq!(class_of(&ix, m, "d"), Some(HolderClass::Unknown));
    let counts = ix.held_per_class();
    assert!(counts.contains(&(HolderClass::Foreign, 2)));
    assert!(counts.contains(&(HolderClass::Unknown, 2)));

    let fx = ix.feed(Resource::Leases, lease_change(m, "a", None));
    assert_eq!(class_of(&ix, m, "a"), None);
    assert_eq!(fx.class_changes[0].to, None);
    assert!(ix.held_per_class().contains(&(HolderClass::Foreign, 1)));
}

#[test]
fn resync_drops_what_vanished_in_scope_only() {
    let mut ix = Index::new();
    let m = Kind::TerraformMachine;
    ix.feed(
        Resource::Leases,
        lease_change(m, "a", Some(info("x@laptop"))),
    );
    ix.feed(
        Resource::Leases,
        lease_change(m, "b", Some(info("x@laptop"))),
    );
    let fx = ix.relist(Resource::Leases, Some("other-ns"), vec![]);
    assert!(fx.class_changes.is_empty());
    assert_eq!(ix.sizes().0, 2);
    let fx = ix.relist(
        Resource::Leases,
        Some(NS),
        vec![lease_change(m, "b", Some(info("x@laptop")))],
    );
    assert_eq!(ix.sizes().0, 1);
    assert_eq!(fx.class_changes.len(), 1, "only the vanished lock changed");
    assert_eq!(fx.class_changes[0].name, "a");
}

#[test]
fn observed_age_survives_updates_of_the_same_lock() {
    let mut ix = Index::new();
    let m = Kind::TerraformMachine;
    ix.feed(
        Resource::Leases,
        lease_change(m, "a", Some(info("x@laptop"))),
    );
    let later = t0() + Duration::from_secs(100);
    feed(
        &mut ix,
        Resource::Leases,
        lease_change(m, "a", Some(info("x@laptop"))),
        later,
    );
    let mut age = None;
    ix.for_each_lock(|v| age = v.age(later + Duration::from_secs(5)));
    let (secs, source) = age.expect("held");
    assert_eq!(source, entries::AgeSource::Observed);
    assert!((secs - 105.0).abs() < 1e-6, "age {secs}");
}

#[test]
fn lock_of_unknown_object_is_reported_from_labels_and_can_be_own() {
    let (mut ix, _) = (Index::new(), ());
    let m = Kind::TerraformMachine;
    // No TerraformMachine "web" is known, but the label reproduces the suffix.
    ix.feed(Resource::Pods, pod(WEB_POD, false));
    ix.feed(
        Resource::Leases,
        lease_change(m, "web", Some(info(&format!("@{WEB_POD}")))),
    );
    assert_eq!(class_of(&ix, m, "web"), Some(HolderClass::OwnLive));
    // A label that does not reproduce the suffix is not trusted as the name.
    let suffix = state_suffix(NS, m, "real-name");
    let who = format!("@{WEB_POD}");
    let l = raw_lease(&suffix, Some("TerraformMachine"), Some("web"), &who);
    ix.feed(Resource::Leases, l);
    let mut classes = Vec::new();
    ix.for_each_lock(|v| classes.push((v.object.name.to_string(), v.state.class)));
    // Nor as the display name: that would render a second "web".
    assert!(
        classes.contains(&(suffix.clone(), Some(HolderClass::Foreign))),
        "{classes:?}"
    );
    assert_eq!(
        classes.iter().filter(|(n, _)| n == "web").count(),
        1,
        "{classes:?}"
    );
}

#[test]
fn object_arriving_after_its_lock_reclassifies() {
    let mut ix = Index::new();
    let m = Kind::TerraformMachine;
    ix.feed(Resource::Pods, pod(WEB_POD, false));
    let suffix = state_suffix(NS, m, "web");
    let who = format!("@{WEB_POD}");
    ix.feed(Resource::Leases, raw_lease(&suffix, None, None, &who));
    assert_eq!(ix.held_per_class()[2], (HolderClass::Foreign, 1));
    ix.feed(
        Resource::TerraformMachines,
        object(m, "web", None, None, None),
    );
    assert_eq!(class_of(&ix, m, "web"), Some(HolderClass::OwnLive));
}

#[test]
fn a_new_lock_never_inherits_the_previous_locks_class() {
    let m = Kind::TerraformMachine;
    let next_pod = "captf-m-web-apply-a2-def456-q9w8e";
    let pending = ObjectKey::new(NS, next_pod);
    // Lock 1 of a gone pod, confirmed: own_stale.
    let stale_then = || {
        let (mut ix, _) = web_locked_by_own_pod(None);
        ix.record_pod_read(ObjectKey::new(NS, WEB_POD), PodRead::Gone, t0());
        assert_eq!(class_of(&ix, m, "web"), Some(HolderClass::OwnStale));
        ix
    };

    // The next Job force-unlocks and takes lock 2 before its pod is cached.
    let mut ix = stale_then();
    let fx = ix.feed(
        Resource::Leases,
        lease_with_id(m, "web", "id-2", &format!("@{next_pod}")),
    );
    assert_eq!(
        class_of(&ix, m, "web"),
        Some(HolderClass::OwnUnverified),
        "lock 2 must not show lock 1's own_stale"
    );
    assert_eq!(fx.confirm, vec![pending.clone()]);
    assert_eq!(fx.class_changes.len(), 1, "the transition is logged");
    assert_eq!(fx.class_changes[0].from, Some(HolderClass::OwnStale));
    assert_eq!(fx.class_changes[0].to, Some(HolderClass::OwnUnverified));
    let fx = ix.record_pod_read(pending.clone(), PodRead::Live, t0());
    assert_eq!(class_of(&ix, m, "web"), Some(HolderClass::OwnLive));
    assert_eq!(fx.class_changes[0].from, Some(HolderClass::OwnUnverified));

    // Same, through a release in between.
    let mut ix = stale_then();
    ix.feed(Resource::Leases, lease_change(m, "web", None));
    ix.feed(
        Resource::Leases,
        lease_with_id(m, "web", "id-2", &format!("@{next_pod}")),
    );
    assert_eq!(class_of(&ix, m, "web"), Some(HolderClass::OwnUnverified));

    // A new lock whose holder pod is cached live is own_live at once.
    let mut ix = stale_then();
    ix.feed(Resource::Pods, pod(next_pod, false));
    let fx = ix.feed(
        Resource::Leases,
        lease_with_id(m, "web", "id-2", &format!("@{next_pod}")),
    );
    assert_eq!(class_of(&ix, m, "web"), Some(HolderClass::OwnLive));
    assert!(fx.confirm.is_empty());
    assert_eq!(fx.class_changes[0].from, Some(HolderClass::OwnStale));

    // An update of the same lock still keeps its verdict while a read is
    // pending (no own_live -> own_unverified flap).
    let (mut ix, _) = web_locked_by_own_pod(Some(false));
    ix.feed(Resource::Pods, gone(WEB_POD));
    let fx = ix.feed(
        Resource::Leases,
        lease_change(m, "web", Some(info(&format!("@{WEB_POD}")))),
    );
    assert!(fx.class_changes.is_empty());
    assert_eq!(class_of(&ix, m, "web"), Some(HolderClass::OwnLive));
}

#[test]
fn only_own_runner_pods_are_ever_read_live() {
    let mut ix = Index::new();
    let m = Kind::TerraformMachine;
    for n in ["web", "db"] {
        ix.feed(Resource::TerraformMachines, object(m, n, None, None, None));
    }
    // A workstation, and another object's runner pod: neither is an own
    // pod of "web", so neither is queued, linked or re-checked.
    ix.feed(
        Resource::Leases,
        lease_change(m, "web", Some(info("alice@laptop-92"))),
    );
    let other = "captf-m-db-apply-a1-abc123-x7k2p";
    let fx = ix.feed(
        Resource::Leases,
        lease_change(m, "db", Some(info(&format!("@{other}")))),
    );
    assert_eq!(
        fx.confirm,
        vec![ObjectKey::new(NS, other)],
        "db's own pod is"
    );
    let fx = ix.feed(
        Resource::Leases,
        lease_change(m, "web", Some(info(&format!("@{other}")))),
    );
    assert!(fx.confirm.is_empty(), "{fx:?}");
    assert!(!ix.needs_read(&ObjectKey::new(NS, "laptop-92")));
    assert_eq!(ix.pods_to_recheck(), vec![ObjectKey::new(NS, other)]);
    // When db's lock goes, nothing names that pod as an own holder.
    ix.feed(Resource::Leases, lease_change(m, "db", None));
    assert!(ix.pods_to_recheck().is_empty());
    assert!(!ix.needs_read(&ObjectKey::new(NS, other)));
}

#[test]
fn no_class_change_is_recorded_until_the_start_ends() {
    let mut ix = Index::default();
    ix.begin_start();
    let (key, lease) =
        crate::fixtures::workstation_lock("web", "alice@laptop", "2020-01-01T00:00:00Z");
    let fx = ix.apply(key.clone(), lease, t0());
    assert!(fx.class_changes.is_empty(), "found held at start: {fx:?}");
    assert_eq!(web_class(&ix), Some(HolderClass::Foreign));
    ix.finish_start(t0());
    let fx = IndexResource::<LockLease>::delete(&mut ix, key, t0());
    assert_eq!(fx.class_changes.len(), 1, "{fx:?}");
    assert_eq!(fx.class_changes[0].from, Some(HolderClass::Foreign));
}

/// The per-class counts are kept as locks come, go and change class: after
/// every random change they equal a count of the held locks' classes.
#[test]
fn the_per_class_counts_follow_every_change() {
    use crate::fixtures::random::{change, Rng};
    let mut ix = Index::new();
    let mut rng = Rng(17);
    let now = t0();
    let later = now + Duration::from_secs(3600);
    for step in 0..3000 {
        change(&mut rng, &mut ix, now, later);
        let mut counted = HolderClass::ALL.map(|c| (c, 0u64));
        for (_, lock) in ix.locks.held() {
            if let Some(class) = lock.state.class {
                if let Some(slot) = counted.iter_mut().find(|(c, _)| *c == class) {
                    slot.1 += 1;
                }
            }
        }
        assert_eq!(ix.held_per_class(), counted, "after change {step}");
    }
    assert!(
        ix.held_per_class().iter().filter(|(_, n)| *n > 0).count() >= 2,
        "the changes reached several classes: {:?}",
        ix.held_per_class()
    );
}
