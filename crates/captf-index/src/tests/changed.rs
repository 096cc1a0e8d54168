//! Writes that change nothing `/metrics` shows leave the exposition
//! current: the index says so through `take_changed`.

use super::*;

#[test]
fn repeated_and_empty_writes_change_nothing() {
    let m = Kind::TerraformMachine;
    let (mut ix, _) = web_locked_by_own_pod(Some(false));
    assert!(ix.take_changed(), "the first writes change the exposition");
    // The same object again (CAPTF wrote a status field the exporter drops).
    ix.feed(
        Resource::TerraformMachines,
        object(m, "web", None, None, None),
    );
    assert!(!ix.take_changed(), "an identical object");
    // The holder pod written again, still running: no class moves.
    ix.feed(Resource::Pods, pod(WEB_POD, false));
    assert!(!ix.take_changed(), "an identical pod");
    // A pod no lock names comes and goes.
    ix.feed(
        Resource::Pods,
        pod("captf-m-other-apply-a1-abc123-x7k2p", false),
    );
    ix.feed(Resource::Pods, gone("captf-m-other-apply-a1-abc123-x7k2p"));
    assert!(!ix.take_changed(), "a pod no lock names");
    // Deletes of what was never kept: an Event the client filter dropped,
    // an object, a plan.
    ix.feed(Resource::Events, gone("some-event"));
    ix.feed(Resource::TerraformMachines, gone("never-seen"));
    ix.feed(Resource::TerraformPlans, gone("never-seen"));
    assert!(!ix.take_changed(), "deletes of unknown keys");
    // The same Lease again.
    ix.feed(
        Resource::Leases,
        lease_change(m, "web", Some(info(&format!("@{WEB_POD}")))),
    );
    assert!(!ix.take_changed(), "an identical Lease");
}

#[test]
fn every_visible_change_is_marked() {
    let m = Kind::TerraformMachine;
    let (mut ix, _) = web_locked_by_own_pod(Some(false));
    ix.take_changed();
    // The holder pod fails: the class moves to own_stale.
    ix.feed(Resource::Pods, pod(WEB_POD, true));
    assert_eq!(class_of(&ix, m, "web"), Some(HolderClass::OwnStale));
    assert!(ix.take_changed(), "a class change");
    ix.feed(Resource::Leases, lease_change(m, "web", None));
    assert!(ix.take_changed(), "a release");
    ix.feed(
        Resource::TerraformMachines,
        machine_with_lock_timeout("web", 60),
    );
    assert!(ix.take_changed(), "a new timeout");
    ix.feed(Resource::TerraformMachines, gone("web"));
    assert!(ix.take_changed(), "an object deleted");
}

/// The lock keys a change marked, by (kind, name) of their objects.
fn marked(ix: &mut Index, names: &[(Kind, &str)]) -> Vec<String> {
    let changes = ix.take_changes();
    assert!(
        !changes.all(),
        "a change of one object never marks everything"
    );
    let mut out: Vec<String> = names
        .iter()
        .filter(|(k, n)| changes.covers(&LockKey::new(NS, state_suffix(NS, *k, n))))
        .map(|(_, n)| n.to_string())
        .collect();
    assert_eq!(
        out.len(),
        changes.keys().count(),
        "only keys of these objects"
    );
    out.sort();
    out
}

/// CAPTF rewrites a TerraformCluster's status on every Job (activeJob,
/// conditions): that reaches its own series alone. A change of what its
/// machines and pools inherit (its policies, its label, the CAPI Cluster
/// that names it) reaches them, and no one else.
#[test]
fn a_terraform_cluster_change_marks_itself_and_only_its_inheritors() {
    let (c, m) = (Kind::TerraformCluster, Kind::TerraformMachine);
    let mut ix = Index::new();
    let policies = |t: i64| ClusterPolicies {
        jobs: None,
        default_jobs: Some(JobsPolicy {
            lock_timeout_seconds: Some(t),
            active_deadline_seconds: None,
        }),
    };
    let tc = |label: &str, t: i64, active: bool| {
        let mut ch = object(c, "tc", Some(label), None, Some(policies(t)));
        if let Some(Entry::Object(o)) = &mut ch.entry {
            o.captf.active_job = active;
        }
        ch
    };
    ix.feed(Resource::TerraformClusters, tc("prod", 60, false));
    for (name, label) in [("m-prod", "prod"), ("m-dev", "dev"), ("m-capi", "cap")] {
        ix.feed(
            Resource::TerraformMachines,
            object(m, name, Some(label), None, None),
        );
    }
    let all = [(c, "tc"), (m, "m-prod"), (m, "m-dev"), (m, "m-capi")];
    ix.take_changes();

    ix.feed(Resource::TerraformClusters, tc("prod", 60, true));
    assert_eq!(marked(&mut ix, &all), ["tc"], "activeJob set");
    ix.feed(Resource::TerraformClusters, tc("prod", 60, false));
    assert_eq!(marked(&mut ix, &all), ["tc"], "activeJob cleared");
    ix.feed(Resource::TerraformClusters, tc("prod", 90, false));
    assert_eq!(marked(&mut ix, &all), ["m-prod", "tc"], "its policies");
    assert_eq!(
        effective_of(&ix, m, "m-prod").map(|e| e.lock_timeout_seconds),
        Some(90)
    );
    ix.feed(Resource::TerraformClusters, tc("dev", 90, false));
    assert_eq!(
        marked(&mut ix, &all),
        ["m-dev", "m-prod", "tc"],
        "its label: those it leaves and those it reaches"
    );
    // A CAPI Cluster named like m-capi's label, pointing at tc.
    let capi = Change {
        key: (NS.into(), "cap".into()),
        entry: Some(Entry::Capi(CapiCluster {
            infra_ref: InfraRef {
                api_group: "infrastructure.cluster.x-k8s.io".into(),
                kind: "TerraformCluster".into(),
                name: "tc".into(),
            },
        })),
    };
    ix.feed(Resource::Clusters, capi);
    assert_eq!(marked(&mut ix, &all), ["m-capi"], "the CAPI Cluster");
    assert_eq!(
        effective_of(&ix, m, "m-capi").map(|e| e.lock_timeout_seconds),
        Some(90)
    );
    ix.feed(Resource::TerraformClusters, tc("dev", 30, false));
    assert_eq!(
        marked(&mut ix, &all),
        ["m-capi", "m-dev", "tc"],
        "through its label and through the CAPI Cluster"
    );
    ix.feed(Resource::TerraformClusters, gone("tc"));
    assert_eq!(marked(&mut ix, &all), ["m-capi", "m-dev", "tc"], "deleted");
    ix.feed(Resource::Clusters, gone("cap"));
    assert_eq!(
        marked(&mut ix, &all),
        ["m-capi"],
        "the CAPI Cluster deleted"
    );
}
