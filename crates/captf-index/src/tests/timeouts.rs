//! Effective timeouts through TerraformClusters and CAPI Clusters.

use super::*;

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
        api_group: captf_core::kind::API_GROUP.into(),
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
    ix.feed(
        Resource::TerraformClusters,
        object(
            c,
            "tc-a",
            Some("prod"),
            None,
            Some(tc_policies(Some(90), Some(30))),
        ),
    );
    ix.feed(
        Resource::TerraformClusters,
        object(
            c,
            "tc-b",
            Some("prod"),
            tc_policies(Some(91), Some(31)).jobs,
            Some(tc_policies(Some(91), Some(31))),
        ),
    );
    ix.feed(
        Resource::TerraformMachines,
        object(m, "w", Some("prod"), None, None),
    );
    // Two TerraformClusters carry the label and there is no Cluster: none.
    assert_eq!(
        effective_of(&ix, m, "w").map(|e| e.lock_timeout_seconds),
        Some(300)
    );
    ix.feed(Resource::Clusters, capi("prod", "tc-b"));
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
    ix.feed(Resource::Clusters, gone("prod"));
    ix.feed(
        Resource::TerraformClusters,
        Change {
            key: (NS.into(), "tc-b".into()),
            entry: None,
        },
    );
    assert_eq!(
        effective_of(&ix, m, "w").map(|e| e.lock_timeout_seconds),
        Some(30)
    );
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
    ix.feed(Resource::Clusters, capi("prod", "tc"));
    // The vector: spec.jobs {150, 1800}, no defaults.
    ix.feed(
        Resource::TerraformClusters,
        tc(jobs(Some(150), Some(1800)), None),
    );
    ix.feed(
        Resource::TerraformMachines,
        object(m, "w", Some("prod"), None, None),
    );
    ix.feed(
        Resource::TerraformMachinePools,
        object(mp, "p", Some("prod"), None, None),
    );
    // The machine's lock is held: the locked path resolves the same way.
    ix.feed(
        Resource::Leases,
        lease_change(m, "w", Some(info("alice@laptop"))),
    );
    let pair =
        |e: Option<Effective>| e.map(|e| (e.lock_timeout_seconds, e.active_deadline_seconds));
    assert_eq!(pair(effective_of(&ix, m, "w")), Some((150, 1800)));
    assert_eq!(pair(effective_of(&ix, mp, "p")), Some((150, 1800)));
    let obj = TfObject {
        cluster_label: Some("prod".into()),
        ..TfObject::new(m, "w")
    };
    let sources = ix.resolve_for(NS, &obj).sources;
    assert_eq!(
        (
            sources.lock_timeout_seconds,
            sources.active_deadline_seconds
        ),
        (
            captf_core::timeouts::Source::ClusterJobs,
            captf_core::timeouts::Source::ClusterJobs
        )
    );
    // The cluster's spec.jobs changes: its machines follow at once.
    ix.feed(Resource::TerraformClusters, tc(jobs(Some(0), None), None));
    assert_eq!(pair(effective_of(&ix, m, "w")), Some((0, 3600)));
    assert_eq!(pair(effective_of(&ix, mp, "p")), Some((0, 3600)));
    // spec.defaults.jobs appears and wins field by field.
    ix.feed(
        Resource::TerraformClusters,
        tc(jobs(Some(0), Some(900)), Some(jobs(Some(45), None))),
    );
    assert_eq!(pair(effective_of(&ix, m, "w")), Some((45, 900)));
    // The overdue check uses the inherited value too.
    assert!(ix.newly_overdue(t0() + Duration::from_secs(44)).is_empty());
    assert_eq!(ix.newly_overdue(t0() + Duration::from_secs(46)).len(), 1);
}

#[test]
fn a_lowered_cluster_timeout_brings_a_queued_overdue_warning_forward() {
    let mut ix = Index::new();
    let (c, m) = (Kind::TerraformCluster, Kind::TerraformMachine);
    ix.feed(Resource::Clusters, capi("prod", "tc"));
    ix.feed(
        Resource::TerraformClusters,
        object(
            c,
            "tc",
            Some("prod"),
            None,
            Some(tc_policies(Some(600), None)),
        ),
    );
    ix.feed(
        Resource::TerraformMachines,
        object(m, "web", Some("prod"), None, None),
    );
    ix.feed(
        Resource::Leases,
        lease_change(m, "web", Some(info("alice@laptop"))),
    );
    assert!(ix.newly_overdue(t0() + Duration::from_secs(120)).is_empty());
    // The cluster's own spec.jobs drops to 60 s: web is overdue already.
    ix.feed(
        Resource::TerraformClusters,
        object(
            c,
            "tc",
            Some("prod"),
            None,
            Some(tc_policies(Some(60), None)),
        ),
    );
    let due = ix.newly_overdue(t0() + Duration::from_secs(121));
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].timeout_seconds, 60);
    // Raised again, a new lock of web waits for the new deadline.
    ix.feed(
        Resource::TerraformClusters,
        object(
            c,
            "tc",
            Some("prod"),
            None,
            Some(tc_policies(Some(900), None)),
        ),
    );
    ix.feed(
        Resource::Leases,
        lease_with_id(m, "web", "id-2", "bob@desk"),
    );
    assert!(ix.newly_overdue(t0() + Duration::from_secs(800)).is_empty());
    assert_eq!(ix.newly_overdue(t0() + Duration::from_secs(901)).len(), 1);
}
