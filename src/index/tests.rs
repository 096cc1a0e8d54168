//! Index tests with synthetic objects: no cluster, no runtime.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use super::*;
use crate::core::lockinfo::LockInfo;
use crate::core::suffix::lock_lease_name;
use crate::core::timeouts::{InfraRef, JobsPolicy};

const NS: &str = "ns1";

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn info(who: &str) -> LockInfo {
    LockInfo {
        id: "id-1".into(),
        operation: "OperationTypeApply".into(),
        who: who.into(),
        version: "1.9.0".into(),
        created: None,
    }
}

fn lease_change(kind: Kind, name: &str, held: Option<LockInfo>) -> Change {
    let suffix = state_suffix(NS, kind, name);
    let holder = if held.is_some() {
        "lock-1".to_string()
    } else {
        String::new()
    };
    let entry = LockLease::new(
        NS.into(),
        suffix.clone(),
        Some(kind.as_str()),
        Some(name.into()),
        holder,
        Ok(held),
    );
    Change {
        key: (NS.into(), lock_lease_name(&suffix)),
        entry: Some(Entry::Lease(entry)),
    }
}

fn object(
    kind: Kind,
    name: &str,
    label: Option<&str>,
    jobs: Option<JobsPolicy>,
    cluster: Option<ClusterPolicies>,
) -> Change {
    let obj = TfObject {
        kind,
        name: name.into(),
        cluster_label: label.map(Into::into),
        jobs,
        cluster,
    };
    Change {
        key: (NS.into(), name.into()),
        entry: Some(Entry::Object(obj)),
    }
}

fn pod(name: &str, finished: bool) -> Change {
    Change {
        key: (NS.into(), name.into()),
        entry: Some(Entry::Pod(PodState { finished })),
    }
}

fn gone(name: &str) -> Change {
    Change {
        key: (NS.into(), name.into()),
        entry: None,
    }
}

/// The class of the lock of (kind, name), via the public render path.
fn class_of(ix: &Index, kind: Kind, name: &str) -> Option<HolderClass> {
    let mut out = None;
    ix.for_each_lock(|v| {
        if v.kind == kind.as_str() && v.name == name {
            out = v.lease.class;
        }
    });
    out
}

fn effective_of(ix: &Index, kind: Kind, name: &str) -> Option<Effective> {
    let mut out = None;
    ix.for_each_lock(|v| {
        if v.kind == kind.as_str() && v.name == name {
            out = Some(v.effective);
        }
    });
    ix.for_each_unlocked_object(|_, o, e| {
        if o.kind == kind && o.name == name {
            out = Some(e);
        }
    });
    out
}

const WEB_POD: &str = "captf-m-web-apply-a1-abc123-x7k2p";

fn web_locked_by_own_pod(pod_finished: Option<bool>) -> (Index, Effects) {
    let mut ix = Index::new();
    let m = Kind::TerraformMachine;
    ix.apply(
        Resource::TerraformMachines,
        object(m, "web", None, None, None),
        t0(),
    );
    if let Some(f) = pod_finished {
        ix.apply(Resource::Pods, pod(WEB_POD, f), t0());
    }
    let fx = ix.apply(
        Resource::Leases,
        lease_change(m, "web", Some(info(&format!("@{WEB_POD}")))),
        t0(),
    );
    (ix, fx)
}

#[test]
fn own_pod_running_is_own_live_without_a_read() {
    let (ix, fx) = web_locked_by_own_pod(Some(false));
    assert_eq!(
        class_of(&ix, Kind::TerraformMachine, "web"),
        Some(HolderClass::OwnLive)
    );
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
    assert_eq!(fx.confirm, vec![(NS.to_string(), WEB_POD.to_string())]);
    // Not confirmed yet: never guessed stale.
    assert_eq!(
        class_of(&ix, Kind::TerraformMachine, "web"),
        Some(HolderClass::OwnUnverified)
    );
    let fx = ix.record_pod_read((NS.into(), WEB_POD.into()), PodRead::Gone, t0());
    assert_eq!(
        class_of(&ix, Kind::TerraformMachine, "web"),
        Some(HolderClass::OwnStale)
    );
    assert_eq!(fx.class_changes[0].from, Some(HolderClass::OwnUnverified));
}

#[test]
fn failed_pod_turns_stale_after_confirmation_and_keeps_live_meanwhile() {
    let (mut ix, _) = web_locked_by_own_pod(Some(false));
    let fx = ix.apply(Resource::Pods, pod(WEB_POD, true), t0());
    assert_eq!(fx.confirm, vec![(NS.to_string(), WEB_POD.to_string())]);
    assert!(
        fx.class_changes.is_empty(),
        "pending read keeps the last verdict"
    );
    assert_eq!(
        class_of(&ix, Kind::TerraformMachine, "web"),
        Some(HolderClass::OwnLive)
    );
    let fx = ix.record_pod_read((NS.into(), WEB_POD.into()), PodRead::Finished, t0());
    assert_eq!(
        class_of(&ix, Kind::TerraformMachine, "web"),
        Some(HolderClass::OwnStale)
    );
    assert_eq!(fx.class_changes[0].from, Some(HolderClass::OwnLive));
    assert_eq!(fx.class_changes[0].to, Some(HolderClass::OwnStale));
}

#[test]
fn deleted_pod_and_cache_lag() {
    let (mut ix, _) = web_locked_by_own_pod(Some(false));
    ix.apply(Resource::Pods, gone(WEB_POD), t0());
    // The live read still finds it (cache ahead of the server is impossible,
    // but a read racing a recreate is not): it stays live.
    ix.record_pod_read((NS.into(), WEB_POD.into()), PodRead::Live, t0());
    assert_eq!(
        class_of(&ix, Kind::TerraformMachine, "web"),
        Some(HolderClass::OwnLive)
    );
    assert_eq!(
        ix.pods_to_recheck(),
        vec![(NS.to_string(), WEB_POD.to_string())]
    );
    ix.record_pod_read((NS.into(), WEB_POD.into()), PodRead::Gone, t0());
    assert_eq!(
        class_of(&ix, Kind::TerraformMachine, "web"),
        Some(HolderClass::OwnStale)
    );
    assert!(
        ix.pods_to_recheck().is_empty(),
        "a confirmed gone pod is final"
    );
    assert!(
        !ix.needs_read(&(NS.to_string(), WEB_POD.to_string())),
        "a queued duplicate read is dropped"
    );
    assert!(!ix.needs_read(&(NS.to_string(), "unrelated".to_string())));
}

#[test]
fn unreadable_pod_is_own_unverified_and_rechecked() {
    let (mut ix, _) = web_locked_by_own_pod(None);
    ix.record_pod_read((NS.into(), WEB_POD.into()), PodRead::Failed, t0());
    assert_eq!(
        class_of(&ix, Kind::TerraformMachine, "web"),
        Some(HolderClass::OwnUnverified)
    );
    assert_eq!(ix.pods_to_recheck().len(), 1);
}

#[test]
fn foreign_unknown_and_release() {
    let mut ix = Index::new();
    let m = Kind::TerraformMachine;
    for n in ["a", "b", "c", "d"] {
        ix.apply(
            Resource::TerraformMachines,
            object(m, n, None, None, None),
            t0(),
        );
    }
    ix.apply(
        Resource::Leases,
        lease_change(m, "a", Some(info("alice@laptop"))),
        t0(),
    );
    // Another object's runner pod is foreign to this one.
    ix.apply(
        Resource::Leases,
        lease_change(m, "b", Some(info(&format!("@{WEB_POD}")))),
        t0(),
    );
    ix.apply(
        Resource::Leases,
        lease_change(m, "c", Some(info("no-at-sign"))),
        t0(),
    );
    let suffix = state_suffix(NS, m, "d");
    let bad = LockLease::new(
        NS.into(),
        suffix.clone(),
        None,
        None,
        "lock-d".into(),
        Err(crate::core::lockinfo::parse_lock_info("{").unwrap_err()),
    );
    ix.apply(
        Resource::Leases,
        Change {
            key: (NS.into(), lock_lease_name(&suffix)),
            entry: Some(Entry::Lease(bad)),
        },
        t0(),
    );
    assert_eq!(class_of(&ix, m, "a"), Some(HolderClass::Foreign));
    assert_eq!(class_of(&ix, m, "b"), Some(HolderClass::Foreign));
    assert_eq!(class_of(&ix, m, "c"), Some(HolderClass::Unknown));
    assert_eq!(class_of(&ix, m, "d"), Some(HolderClass::Unknown));
    let counts = ix.held_per_class();
    assert!(counts.contains(&(HolderClass::Foreign, 2)));
    assert!(counts.contains(&(HolderClass::Unknown, 2)));

    let fx = ix.apply(Resource::Leases, lease_change(m, "a", None), t0());
    assert_eq!(class_of(&ix, m, "a"), None);
    assert_eq!(fx.class_changes[0].to, None);
    assert!(ix.held_per_class().contains(&(HolderClass::Foreign, 1)));
}

#[test]
fn resync_drops_what_vanished_in_scope_only() {
    let mut ix = Index::new();
    let m = Kind::TerraformMachine;
    ix.apply(
        Resource::Leases,
        lease_change(m, "a", Some(info("x@laptop"))),
        t0(),
    );
    ix.apply(
        Resource::Leases,
        lease_change(m, "b", Some(info("x@laptop"))),
        t0(),
    );
    let fx = ix.resync(Resource::Leases, Some("other-ns"), vec![], t0());
    assert!(fx.class_changes.is_empty());
    assert_eq!(ix.sizes().0, 2);
    let fx = ix.resync(
        Resource::Leases,
        Some(NS),
        vec![lease_change(m, "b", Some(info("x@laptop")))],
        t0(),
    );
    assert_eq!(ix.sizes().0, 1);
    assert_eq!(fx.class_changes.len(), 1, "only the vanished lock changed");
    assert_eq!(fx.class_changes[0].name, "a");
}

#[test]
fn observed_age_survives_updates_of_the_same_lock() {
    let mut ix = Index::new();
    let m = Kind::TerraformMachine;
    ix.apply(
        Resource::Leases,
        lease_change(m, "a", Some(info("x@laptop"))),
        t0(),
    );
    let later = t0() + Duration::from_secs(100);
    ix.apply(
        Resource::Leases,
        lease_change(m, "a", Some(info("x@laptop"))),
        later,
    );
    let mut age = None;
    ix.for_each_lock(|v| age = v.lease.age(later + Duration::from_secs(5)));
    let (secs, source) = age.expect("held");
    assert_eq!(source, entries::AgeSource::Observed);
    assert!((secs - 105.0).abs() < 1e-6, "age {secs}");
}

#[test]
fn lock_of_unknown_object_is_reported_from_labels_and_can_be_own() {
    let (mut ix, _) = (Index::new(), ());
    let m = Kind::TerraformMachine;
    // No TerraformMachine "web" is known, but the label reproduces the suffix.
    ix.apply(Resource::Pods, pod(WEB_POD, false), t0());
    ix.apply(
        Resource::Leases,
        lease_change(m, "web", Some(info(&format!("@{WEB_POD}")))),
        t0(),
    );
    assert_eq!(class_of(&ix, m, "web"), Some(HolderClass::OwnLive));
    // A label that does not reproduce the suffix is not trusted as the name.
    let suffix = state_suffix(NS, m, "real-name");
    let l = LockLease::new(
        NS.into(),
        suffix.clone(),
        Some("TerraformMachine"),
        Some("web".into()),
        "id".into(),
        Ok(Some(info(&format!("@{WEB_POD}")))),
    );
    ix.apply(
        Resource::Leases,
        Change {
            key: (NS.into(), lock_lease_name(&suffix)),
            entry: Some(Entry::Lease(l)),
        },
        t0(),
    );
    let mut classes = Vec::new();
    ix.for_each_lock(|v| classes.push((v.name.to_string(), v.lease.class)));
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
    ix.apply(Resource::Pods, pod(WEB_POD, false), t0());
    let suffix = state_suffix(NS, m, "web");
    let l = LockLease::new(
        NS.into(),
        suffix.clone(),
        None,
        None,
        "id".into(),
        Ok(Some(info(&format!("@{WEB_POD}")))),
    );
    ix.apply(
        Resource::Leases,
        Change {
            key: (NS.into(), lock_lease_name(&suffix)),
            entry: Some(Entry::Lease(l)),
        },
        t0(),
    );
    assert_eq!(ix.held_per_class()[2], (HolderClass::Foreign, 1));
    ix.apply(
        Resource::TerraformMachines,
        object(m, "web", None, None, None),
        t0(),
    );
    assert_eq!(class_of(&ix, m, "web"), Some(HolderClass::OwnLive));
}

fn tc_policies(lock: Option<i64>, default_lock: Option<i64>) -> ClusterPolicies {
    ClusterPolicies {
        jobs: Some(JobsPolicy {
            lock_timeout_seconds: lock,
            active_deadline_seconds: Some(1800),
        }),
        default_jobs: Some(JobsPolicy {
            lock_timeout_seconds: default_lock,
            active_deadline_seconds: None,
        }),
    }
}

fn capi(name: &str, infra: &str) -> Change {
    let infra_ref = InfraRef {
        api_group: crate::core::kind::API_GROUP.into(),
        kind: "TerraformCluster".into(),
        name: infra.into(),
    };
    Change {
        key: (NS.into(), name.into()),
        entry: Some(Entry::Capi(CapiCluster { infra_ref })),
    }
}

#[test]
fn timeouts_inherit_through_the_capi_cluster() {
    let mut ix = Index::new();
    let (c, m) = (Kind::TerraformCluster, Kind::TerraformMachine);
    ix.apply(
        Resource::TerraformClusters,
        object(
            c,
            "tc-a",
            Some("prod"),
            None,
            Some(tc_policies(Some(90), Some(30))),
        ),
        t0(),
    );
    ix.apply(
        Resource::TerraformClusters,
        object(
            c,
            "tc-b",
            Some("prod"),
            tc_policies(Some(91), Some(31)).jobs,
            Some(tc_policies(Some(91), Some(31))),
        ),
        t0(),
    );
    ix.apply(
        Resource::TerraformMachines,
        object(m, "w", Some("prod"), None, None),
        t0(),
    );
    // Two TerraformClusters carry the label and there is no Cluster: none.
    assert_eq!(
        effective_of(&ix, m, "w").map(|e| e.lock_timeout_seconds),
        Some(300)
    );
    ix.apply(Resource::Clusters, capi("prod", "tc-b"), t0());
    let e = effective_of(&ix, m, "w").expect("known");
    assert_eq!(e.lock_timeout_seconds, 31, "from tc-b's spec.defaults.jobs");
    assert_eq!(
        e.active_deadline_seconds, 1800,
        "defaults leave it unset: tc-b's own spec.jobs"
    );
    let tc = effective_of(&ix, Kind::TerraformCluster, "tc-b").expect("known");
    assert_eq!(
        (tc.lock_timeout_seconds, tc.active_deadline_seconds),
        (91, 1800),
        "a cluster uses its own spec.jobs"
    );
    // Without the Cluster, exactly one labelled TerraformCluster is used.
    ix.apply(Resource::Clusters, gone("prod"), t0());
    ix.apply(
        Resource::TerraformClusters,
        Change {
            key: (NS.into(), "tc-b".into()),
            entry: None,
        },
        t0(),
    );
    assert_eq!(
        effective_of(&ix, m, "w").map(|e| e.lock_timeout_seconds),
        Some(30)
    );
}

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
    ix.resync(
        Resource::Events,
        None,
        vec![fu_event("old", "web", 3, 100.0)],
        t0(),
    );
    assert_eq!(total(&ix, "web"), 0);
    assert_eq!(
        ix.force_unlocks_of(NS, "TerraformMachine", "web").last_seen,
        Some(100.0)
    );
    // A repeat of the old Event counts the increase only.
    ix.apply(Resource::Events, fu_event("old", "web", 4, 200.0), t0());
    assert_eq!(total(&ix, "web"), 1);
    // Two new Events about two objects, one of them unknown to the index.
    ix.apply(Resource::Events, fu_event("e1", "web", 1, 300.0), t0());
    ix.apply(Resource::Events, fu_event("e2", "ghost", 1, 300.0), t0());
    assert_eq!(total(&ix, "web"), 2);
    assert_eq!(total(&ix, "ghost"), 1);
    // A relist re-sends everything: nothing is counted twice; a series that
    // grew while the watch was down counts its increase; a new Event counts.
    ix.resync(
        Resource::Events,
        None,
        vec![
            fu_event("old", "web", 4, 200.0),
            fu_event("e1", "web", 2, 400.0),
            fu_event("e3", "web", 1, 500.0),
        ],
        t0(),
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
    ix.apply(Resource::Events, fu_event("e1", "web", 2, 400.0), t0());
    assert_eq!(total(&ix, "web"), 4);
}

#[test]
fn overdue_is_reported_once_per_lock() {
    let mut ix = Index::new();
    let m = Kind::TerraformMachine;
    ix.apply(
        Resource::TerraformMachines,
        object(
            m,
            "a",
            None,
            Some(JobsPolicy {
                lock_timeout_seconds: Some(60),
                active_deadline_seconds: None,
            }),
            None,
        ),
        t0(),
    );
    ix.apply(
        Resource::Leases,
        lease_change(m, "a", Some(info("alice@laptop"))),
        t0(),
    );
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
    ix.apply(Resource::Pods, pod(WEB_POD, false), t0());
    ix.apply(
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
        t0(),
    );
    ix.apply(
        Resource::Leases,
        lease_change(m, "web", Some(info(&format!("@{WEB_POD}")))),
        t0(),
    );
    assert!(ix
        .newly_overdue(t0() + Duration::from_secs(1000))
        .is_empty());
}

#[test]
fn counters_of_deleted_objects_go_when_no_event_names_them() {
    let mut ix = Index::new();
    let m = Kind::TerraformMachine;
    let count = |ix: &Index| {
        let mut n = 0;
        ix.for_each_force_unlock(|_, _, name, _| n += usize::from(name == "web"));
        n
    };
    ix.resync(Resource::Events, None, vec![], t0());
    ix.apply(
        Resource::TerraformMachines,
        object(m, "web", None, None, None),
        t0(),
    );
    ix.apply(Resource::Events, fu_event("e1", "web", 1, 1.0), t0());
    ix.apply(Resource::Events, fu_event("e2", "web", 1, 2.0), t0());
    assert_eq!(ix.force_unlocks_of(NS, "TerraformMachine", "web").total, 2);
    // The object goes; its Events still name it: the counter stays.
    ix.apply(Resource::TerraformMachines, gone("web"), t0());
    assert_eq!(count(&ix), 1);
    ix.apply(Resource::Events, gone("e1"), t0());
    assert_eq!(count(&ix), 1, "e2 still names it");
    // The last Event expires: nothing names the object any more.
    ix.apply(Resource::Events, gone("e2"), t0());
    assert_eq!(count(&ix), 0);
    // A known object keeps its counter when its Events expire.
    ix.apply(
        Resource::TerraformMachines,
        object(m, "db", None, None, None),
        t0(),
    );
    ix.apply(Resource::Events, fu_event("e3", "db", 1, 3.0), t0());
    ix.apply(Resource::Events, gone("e3"), t0());
    assert_eq!(ix.force_unlocks_of(NS, "TerraformMachine", "db").total, 1);
}

#[test]
fn machine_inherits_its_clusters_own_jobs_and_follows_their_changes() {
    let mut ix = Index::new();
    let (c, m, mp) = (
        Kind::TerraformCluster,
        Kind::TerraformMachine,
        Kind::TerraformMachinePool,
    );
    let jobs = |lock, deadline| JobsPolicy {
        lock_timeout_seconds: lock,
        active_deadline_seconds: deadline,
    };
    let tc = |own: JobsPolicy, defaults: Option<JobsPolicy>| {
        object(
            c,
            "tc",
            None,
            Some(own),
            Some(ClusterPolicies {
                jobs: Some(own),
                default_jobs: defaults,
            }),
        )
    };
    ix.apply(Resource::Clusters, capi("prod", "tc"), t0());
    // Issue 7's vector: spec.jobs {150, 1800}, no defaults.
    ix.apply(
        Resource::TerraformClusters,
        tc(jobs(Some(150), Some(1800)), None),
        t0(),
    );
    ix.apply(
        Resource::TerraformMachines,
        object(m, "w", Some("prod"), None, None),
        t0(),
    );
    ix.apply(
        Resource::TerraformMachinePools,
        object(mp, "p", Some("prod"), None, None),
        t0(),
    );
    // The machine's lock is held: the locked path resolves the same way.
    ix.apply(
        Resource::Leases,
        lease_change(m, "w", Some(info("alice@laptop"))),
        t0(),
    );
    let pair =
        |e: Option<Effective>| e.map(|e| (e.lock_timeout_seconds, e.active_deadline_seconds));
    assert_eq!(pair(effective_of(&ix, m, "w")), Some((150, 1800)));
    assert_eq!(pair(effective_of(&ix, mp, "p")), Some((150, 1800)));
    let obj = TfObject {
        kind: m,
        name: "w".into(),
        cluster_label: Some("prod".into()),
        jobs: None,
        cluster: None,
    };
    let sources = ix.resolve_for(NS, &obj).sources;
    assert_eq!(
        (
            sources.lock_timeout_seconds,
            sources.active_deadline_seconds
        ),
        (
            crate::core::timeouts::Source::ClusterJobs,
            crate::core::timeouts::Source::ClusterJobs
        )
    );
    // The cluster's spec.jobs changes: its machines follow at once.
    ix.apply(
        Resource::TerraformClusters,
        tc(jobs(Some(0), None), None),
        t0(),
    );
    assert_eq!(pair(effective_of(&ix, m, "w")), Some((0, 3600)));
    assert_eq!(pair(effective_of(&ix, mp, "p")), Some((0, 3600)));
    // spec.defaults.jobs appears and wins field by field.
    ix.apply(
        Resource::TerraformClusters,
        tc(jobs(Some(0), Some(900)), Some(jobs(Some(45), None))),
        t0(),
    );
    assert_eq!(pair(effective_of(&ix, m, "w")), Some((45, 900)));
    // The overdue check uses the inherited value too.
    assert!(ix.newly_overdue(t0() + Duration::from_secs(44)).is_empty());
    assert_eq!(ix.newly_overdue(t0() + Duration::from_secs(46)).len(), 1);
}

fn lease_with_id(kind: Kind, name: &str, id: &str, who: &str) -> Change {
    let mut c = lease_change(kind, name, Some(info(who)));
    if let Some(Entry::Lease(l)) = &mut c.entry {
        l.holder_identity = id.into();
        if let Some(i) = &mut l.info {
            i.id = id.into();
        }
    }
    c
}

#[test]
fn a_new_lock_never_inherits_the_previous_locks_class() {
    let m = Kind::TerraformMachine;
    let next_pod = "captf-m-web-apply-a2-def456-q9w8e";
    let pending = (NS.to_string(), next_pod.to_string());
    // Lock 1 of a gone pod, confirmed: own_stale.
    let stale_then = || {
        let (mut ix, _) = web_locked_by_own_pod(None);
        ix.record_pod_read((NS.into(), WEB_POD.into()), PodRead::Gone, t0());
        assert_eq!(class_of(&ix, m, "web"), Some(HolderClass::OwnStale));
        ix
    };

    // The next Job force-unlocks and takes lock 2 before its pod is cached.
    let mut ix = stale_then();
    let fx = ix.apply(
        Resource::Leases,
        lease_with_id(m, "web", "id-2", &format!("@{next_pod}")),
        t0(),
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
    ix.apply(Resource::Leases, lease_change(m, "web", None), t0());
    ix.apply(
        Resource::Leases,
        lease_with_id(m, "web", "id-2", &format!("@{next_pod}")),
        t0(),
    );
    assert_eq!(class_of(&ix, m, "web"), Some(HolderClass::OwnUnverified));

    // A new lock whose holder pod is cached live is own_live at once.
    let mut ix = stale_then();
    ix.apply(Resource::Pods, pod(next_pod, false), t0());
    let fx = ix.apply(
        Resource::Leases,
        lease_with_id(m, "web", "id-2", &format!("@{next_pod}")),
        t0(),
    );
    assert_eq!(class_of(&ix, m, "web"), Some(HolderClass::OwnLive));
    assert!(fx.confirm.is_empty());
    assert_eq!(fx.class_changes[0].from, Some(HolderClass::OwnStale));

    // An update of the same lock still keeps its verdict while a read is
    // pending (no own_live -> own_unverified flap).
    let (mut ix, _) = web_locked_by_own_pod(Some(false));
    ix.apply(Resource::Pods, pod(WEB_POD, true), t0());
    let fx = ix.apply(
        Resource::Leases,
        lease_change(m, "web", Some(info(&format!("@{WEB_POD}")))),
        t0(),
    );
    assert!(fx.class_changes.is_empty());
    assert_eq!(class_of(&ix, m, "web"), Some(HolderClass::OwnLive));
}

#[test]
fn one_event_update_moves_a_counter_by_a_bounded_amount() {
    let mut ix = Index::new();
    let total = |ix: &Index| ix.force_unlocks_of(NS, "TerraformMachine", "web").total;
    let huge = i64::MAX as u64;
    ix.resync(
        Resource::Events,
        None,
        vec![fu_event("old", "web", 1, 1.0)],
        t0(),
    );
    // A known Event whose series.count jumps to 2^63-1.
    ix.apply(Resource::Events, fu_event("old", "web", huge, 2.0), t0());
    assert_eq!(total(&ix), MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE);
    // Later increases count from the reported count, still bounded.
    ix.apply(Resource::Events, fu_event("old", "web", huge, 3.0), t0());
    assert_eq!(total(&ix), MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE);
    ix.apply(
        Resource::Events,
        fu_event("old", "web", huge + 1, 4.0),
        t0(),
    );
    assert_eq!(total(&ix), MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE + 1);
    ix.apply(
        Resource::Events,
        fu_event("old", "web", u64::MAX, 5.0),
        t0(),
    );
    assert_eq!(total(&ix), 2 * MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE + 1);
    // A new Event born with a huge series.count is bounded too.
    ix.apply(Resource::Events, fu_event("new", "web", huge, 6.0), t0());
    assert_eq!(total(&ix), 3 * MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE + 1);
    // A relist re-sends them: nothing more.
    ix.resync(
        Resource::Events,
        None,
        vec![
            fu_event("old", "web", u64::MAX, 5.0),
            fu_event("new", "web", huge, 6.0),
        ],
        t0(),
    );
    assert_eq!(total(&ix), 3 * MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE + 1);
    // Small, real increases are counted exactly.
    ix.apply(Resource::Events, fu_event("e1", "web", 1, 7.0), t0());
    ix.apply(Resource::Events, fu_event("e1", "web", 3, 8.0), t0());
    assert_eq!(total(&ix), 3 * MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE + 4);
}

/// Every sample line of a Prometheus 0.0.4 exposition, as (metric name and
/// label set) -> how often it appears.
fn series_counts(text: &str) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
        *out.entry(series.to_string()).or_default() += 1;
    }
    out
}

fn raw_lease(suffix: &str, kind: Option<&str>, name: Option<&str>, who: &str) -> Change {
    let l = LockLease::new(
        NS.into(),
        suffix.into(),
        kind,
        name.map(Into::into),
        "id-x".into(),
        Ok(Some(info(who))),
    );
    Change {
        key: (NS.into(), lock_lease_name(suffix)),
        entry: Some(Entry::Lease(l)),
    }
}

#[test]
fn a_lease_cannot_impersonate_another_object_in_the_exposition() {
    use crate::metrics::{render, Format};
    let m = Kind::TerraformMachine;
    let (shared, _rx) = crate::runtime::Shared::new();
    shared.update(|ix, now| {
        let mut fx = Effects::default();
        let mut add = |ix: &mut Index, r: Resource, c: Change| {
            let more = ix.apply(r, c, now);
            fx.class_changes.extend(more.class_changes);
        };
        // The real object "web" and its held lock.
        add(
            ix,
            Resource::TerraformMachines,
            object(m, "web", None, None, None),
        );
        add(
            ix,
            Resource::Leases,
            lease_change(m, "web", Some(info("alice@laptop"))),
        );
        // A Lease with web's labels copied, under another suffix.
        let other = state_suffix(NS, m, "other");
        add(
            ix,
            Resource::Leases,
            raw_lease(
                &other,
                Some("TerraformMachine"),
                Some("web"),
                "mallory@laptop",
            ),
        );
        // The lock of a deleted object (labels verify), and a copy of it.
        add(
            ix,
            Resource::Leases,
            lease_change(m, "retained", Some(info("bob@laptop"))),
        );
        let other2 = state_suffix(NS, m, "other2");
        add(
            ix,
            Resource::Leases,
            raw_lease(
                &other2,
                Some("TerraformMachine"),
                Some("retained"),
                "eve@laptop",
            ),
        );
        // Suffixes that are also the names of a real object and of a
        // retained lock: a label-less Lease falls back to its suffix.
        add(
            ix,
            Resource::TerraformMachines,
            object(m, "x-m", None, None, None),
        );
        add(
            ix,
            Resource::Leases,
            raw_lease("x-m", None, None, "trudy@laptop"),
        );
        add(
            ix,
            Resource::Leases,
            lease_change(m, "y-m", Some(info("carol@laptop"))),
        );
        add(
            ix,
            Resource::Leases,
            raw_lease(
                "y-m",
                Some("TerraformMachine"),
                Some("nope"),
                "oscar@laptop",
            ),
        );
        // No kind anywhere: kind "", name the suffix.
        add(
            ix,
            Resource::Leases,
            raw_lease("plain", None, None, "peggy@laptop"),
        );
        fx
    });
    let text = render(&shared, Format::Prometheus).expect("renders");
    let dups: Vec<(String, usize)> = series_counts(&text)
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .collect();
    assert!(dups.is_empty(), "duplicate series {dups:?}\n{text}");
    // The real objects keep their own series; impostors get their suffix.
    let held = |kind: &str, name: &str| {
        format!("captf_state_lock_held{{namespace=\"{NS}\",kind=\"{kind}\",name=\"{name}\"}} 1")
    };
    for line in [
        held("TerraformMachine", "web"),
        held("TerraformMachine", "retained"),
        held("TerraformMachine", &state_suffix(NS, m, "other")),
        held("TerraformMachine", &state_suffix(NS, m, "other2")),
        held("TerraformMachine", "y-m"),
        held("", "x-m"),
        held("", "y-m"),
        held("", "plain"),
    ] {
        assert!(text.contains(&line), "missing {line}\n{text}");
    }
    assert!(text.contains(&format!(
        "captf_state_lock_held{{namespace=\"{NS}\",kind=\"TerraformMachine\",name=\"x-m\"}} 0"
    )));
    let web_holders = text
        .lines()
        .filter(|l| l.starts_with("captf_state_lock_info{") && l.contains("name=\"web\""))
        .count();
    assert_eq!(web_holders, 1, "{text}");
}
