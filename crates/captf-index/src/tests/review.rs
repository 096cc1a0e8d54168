//! Defects a code review found on 51cdee4, each pinned by a test that
//! failed there (docs/decisions/verdict.md names them).

use super::*;
use chrono::{DateTime, Utc};

fn web_class(ix: &Index) -> Option<HolderClass> {
    class_of(ix, Kind::TerraformMachine, "web")
}

fn web_pod() -> ObjectKey {
    ObjectKey::new(NS, WEB_POD)
}

/// Defect 1: the relist delivers the pod already Failed after a live read
/// had found it running (OOM-killed meanwhile): the cache wins.
#[test]
fn a_pod_entering_the_cache_finished_overrides_an_earlier_live_read() {
    let (mut ix, _) = web_locked_by_own_pod(None);
    ix.record_pod_read(web_pod(), PodRead::Live, t0());
    assert_eq!(web_class(&ix), Some(HolderClass::OwnLive));
    let fx = ix.feed(Resource::Pods, pod(WEB_POD, true));
    assert_eq!(
        web_class(&ix),
        Some(HolderClass::OwnStale),
        "CAPTF reads the pod Failed: stale"
    );
    assert_eq!(fx.class_changes.len(), 1, "{fx:?}");
    assert_eq!(fx.class_changes[0].from, Some(HolderClass::OwnLive));
    assert!(fx.confirm.is_empty(), "a final phase needs no read");
    // Through a relist (reset) as well.
    let (mut ix, _) = web_locked_by_own_pod(None);
    ix.record_pod_read(web_pod(), PodRead::Live, t0());
    ix.relist(Resource::Pods, None, vec![pod(WEB_POD, true)]);
    assert_eq!(web_class(&ix), Some(HolderClass::OwnStale));
}

/// Defect 1, second path: a failed read's own_unverified must not outlive
/// the pod's arrival in the cache.
#[test]
fn a_pod_entering_the_cache_overrides_a_failed_read() {
    let (mut ix, _) = web_locked_by_own_pod(None);
    ix.record_pod_read(web_pod(), PodRead::Failed, t0());
    assert_eq!(web_class(&ix), Some(HolderClass::OwnUnverified));
    ix.feed(Resource::Pods, pod(WEB_POD, true));
    assert_eq!(web_class(&ix), Some(HolderClass::OwnStale));
    // And a running pod arriving after a failed read is live.
    let (mut ix, _) = web_locked_by_own_pod(None);
    ix.record_pod_read(web_pod(), PodRead::Failed, t0());
    ix.feed(Resource::Pods, pod(WEB_POD, false));
    assert_eq!(web_class(&ix), Some(HolderClass::OwnLive));
}

/// Defect 10: a read that started before a cache change of its pod and is
/// answered after it describes the pod before the change: it is dropped and
/// the pod is read again.
#[test]
fn a_read_answered_after_a_cache_change_is_not_recorded() {
    let (mut ix, fx) = web_locked_by_own_pod(None);
    assert_eq!(fx.confirm, vec![web_pod()]);
    let ticket = ix.begin_pod_read(web_pod());
    // Meanwhile the watch shows the pod running, then deleted.
    ix.feed(Resource::Pods, pod(WEB_POD, false));
    ix.feed(Resource::Pods, gone(WEB_POD));
    // The old answer ("running") arrives last.
    let fx = ix.finish_pod_read(ticket, PodRead::Live, t0());
    assert_eq!(
        ix.pods.last_read(&web_pod()),
        None,
        "an answer older than the deletion must not be recorded"
    );
    assert_eq!(fx.confirm, vec![web_pod()], "read again");
    assert!(ix.needs_read(&web_pod()));
    // The new read settles it.
    let ticket = ix.begin_pod_read(web_pod());
    ix.finish_pod_read(ticket, PodRead::Gone, t0());
    assert_eq!(web_class(&ix), Some(HolderClass::OwnStale));
    // A read with no cache change in between is recorded as before.
    let (mut ix, _) = web_locked_by_own_pod(None);
    let ticket = ix.begin_pod_read(web_pod());
    let fx = ix.finish_pod_read(ticket, PodRead::Gone, t0());
    assert!(fx.confirm.is_empty());
    assert_eq!(web_class(&ix), Some(HolderClass::OwnStale));
}

fn web_locked_by(who: &str) -> (Index, Effects) {
    let mut ix = Index::new();
    let m = Kind::TerraformMachine;
    ix.feed(
        Resource::TerraformMachines,
        object(m, "web", None, None, None),
    );
    let fx = ix.feed(Resource::Leases, lease_change(m, "web", Some(info(who))));
    (ix, fx)
}

/// Defect 2: a host that passes CAPTF's own-pod rule (hash6 and the pod
/// suffix are unchecked) but is no pod name is never read; its verdict is
/// what CAPTF's read gives.
#[test]
fn a_holder_host_that_is_no_pod_name_is_never_read() {
    // client-go refuses '/' (and '%'): CAPTF's check errors, it never
    // force-unlocks: own_unverified, for good.
    for host in [
        "captf-m-web-apply-a1-abc/12-x7k2p",
        "captf-m-web-apply-a1-a%2F-x7k2p",
    ] {
        let (ix, fx) = web_locked_by(&format!("x@{host}"));
        assert!(fx.confirm.is_empty(), "{host}: read queued: {fx:?}");
        assert_eq!(web_class(&ix), Some(HolderClass::OwnUnverified), "{host}");
        let pod = ObjectKey::new(NS, host);
        assert!(!ix.needs_read(&pod), "{host}");
        assert!(ix.pods_to_recheck().is_empty(), "{host}");
    }
    // Any other invalid name is sent by client-go, and the API server
    // answers 404 (no pod can have it): CAPTF calls it stale.
    for host in [
        "captf-m-web-apply-a1-ab?c=1-x7k2p",
        "captf-m-web-apply-a1-ABC123-x7k2p",
    ] {
        let (ix, fx) = web_locked_by(&format!("x@{host}"));
        assert!(fx.confirm.is_empty(), "{host}: read queued: {fx:?}");
        assert_eq!(web_class(&ix), Some(HolderClass::OwnStale), "{host}");
        assert!(ix.pods_to_recheck().is_empty(), "{host}");
    }
}

/// Defect 8: an object over 63 bytes (owner-name label hashed) deleted
/// before its Lease (deletionPolicy Retain): the Lease's deletion must drop
/// the counter kept under the real name.
#[test]
fn a_lease_outliving_its_long_named_object_takes_the_counter_with_it() {
    let mut ix = Index::new();
    let m = Kind::TerraformMachine;
    let name = format!("web-{}", "x".repeat(70));
    let suffix = state_suffix(NS, m, &name);
    let hashed = captf_core::suffix::owner_name_label_value(&name).to_string();
    ix.relist(Resource::Events, None, vec![]);
    ix.feed(
        Resource::TerraformMachines,
        object(m, &name, None, None, None),
    );
    ix.feed(
        Resource::Leases,
        raw_lease(&suffix, Some(m.as_str()), Some(&hashed), "alice@laptop"),
    );
    let ev = ForceUnlockEvent {
        namespace: NS.into(),
        kind: m.as_str().into(),
        name: name.clone(),
        occurrences: 1,
        last_seen: Some(1.0),
    };
    ix.feed(
        Resource::Events,
        Change {
            key: (NS.into(), "e1".into()),
            entry: Some(Entry::ForceUnlock(ev)),
        },
    );
    let stored = |ix: &Index| {
        ix.force_unlocks
            .counters()
            .filter(|(o, _)| o.name == name)
            .count()
    };
    assert_eq!(stored(&ix), 1);
    // Retain: the object goes first, the Event expires, the Lease stays.
    ix.feed(Resource::TerraformMachines, gone(&name));
    ix.feed(
        Resource::Events,
        Change {
            key: (NS.into(), "e1".into()),
            entry: None,
        },
    );
    assert_eq!(stored(&ix), 1, "the Lease still names it");
    // Then the Lease is deleted.
    ix.feed(
        Resource::Leases,
        Change {
            key: (NS.into(), lock_lease_name(&suffix)),
            entry: None,
        },
    );
    assert_eq!(stored(&ix), 0, "the counter leaked");
}

fn rfc3339(t: SystemTime) -> DateTime<Utc> {
    DateTime::<Utc>::from(t)
}

/// Defect 9: a workstation whose clock runs an hour ahead writes a future
/// `Created`: the foreign lock must still turn overdue after
/// lockTimeoutSeconds of being seen.
#[test]
fn a_future_created_does_not_hide_an_overdue_foreign_lock() {
    let mut ix = Index::new();
    let m = Kind::TerraformMachine;
    ix.feed(
        Resource::TerraformMachines,
        machine_with_lock_timeout("a", 60),
    );
    let mut held = info("alice@fast-laptop");
    held.created = Some(rfc3339(t0() + Duration::from_secs(3600)));
    ix.feed(Resource::Leases, lease_change(m, "a", Some(held)));
    let later = t0() + Duration::from_secs(61);
    let o = ix.newly_overdue(later);
    assert_eq!(o.len(), 1, "not overdue with a Created an hour ahead");
    let mut age = None;
    ix.for_each_lock(|v| age = v.age(later));
    assert_eq!(age, Some((61.0, AgeSource::Observed)));
    // An own lock keeps Created (its clock is the cluster's): age 0.
    let (mut ix, _) = web_locked_by_own_pod(Some(false));
    let mut own = info(&format!("@{WEB_POD}"));
    own.created = Some(rfc3339(t0() + Duration::from_secs(3600)));
    ix.feed(Resource::Leases, lease_change(m, "web", Some(own.clone())));
    let mut age = None;
    ix.for_each_lock(|v| age = v.age(later));
    assert_eq!(age, Some((0.0, AgeSource::LockInfo)));
    // A Created in the past is the age, as before.
    let mut past = info("bob@desk");
    past.created = Some(rfc3339(t0() - Duration::from_secs(100)));
    let mut ix = Index::new();
    ix.feed(Resource::Leases, lease_change(m, "b", Some(past)));
    let mut age = None;
    ix.for_each_lock(|v| age = v.age(t0()));
    assert_eq!(age, Some((100.0, AgeSource::LockInfo)));
}

/// Defect 10: holderIdentity was cut to 128 bytes before it served as the
/// lock ID: two locks differing after byte 128 were one lock, and the
/// printed force-unlock named an ID that does not exist.
#[test]
fn the_whole_holder_identity_is_the_lock_id() {
    let mut ix = Index::new();
    let m = Kind::TerraformMachine;
    let long = |tail: &str| format!("{}{tail}", "i".repeat(200));
    // Through LockLease::new, where the Lease is trimmed.
    let held = |id: String| {
        let suffix = state_suffix(NS, m, "a");
        let l = LockLease::new(
            NS.into(),
            suffix.clone(),
            Some(m.as_str()),
            Some("a".into()),
            id,
            Ok(None),
        );
        Change {
            key: (NS.into(), lock_lease_name(&suffix)),
            entry: Some(Entry::Lease(l)),
        }
    };
    ix.feed(Resource::Leases, held(long("-one")));
    let mut seen = Vec::new();
    ix.for_each_lock(|v| seen.push((v.lease.lock_id().to_string(), v.state.first_seen_held)));
    assert_eq!(seen[0].0, long("-one"), "the whole ID");
    let later = t0() + Duration::from_secs(30);
    feed(&mut ix, Resource::Leases, held(long("-two")), later);
    let mut seen = Vec::new();
    ix.for_each_lock(|v| {
        seen.push((
            v.lease.lock_id().to_string(),
            v.lease.lock_id_label().len(),
            v.state.first_seen_held,
        ))
    });
    assert_eq!(seen[0].0, long("-two"));
    assert_eq!(seen[0].1, MAX_LABEL_BYTES, "only the label is capped");
    assert_eq!(
        seen[0].2,
        Some(later),
        "another ID is another lock: its observed age starts again"
    );
}
