//! Timeout resolution vectors, CAPTF's own among them.
use super::*;

fn pol(lock: Option<i64>, deadline: Option<i64>) -> JobsPolicy {
    JobsPolicy {
        lock_timeout_seconds: lock,
        active_deadline_seconds: deadline,
    }
}

fn eff(lock: i64, deadline: i64) -> Effective {
    Effective {
        lock_timeout_seconds: lock,
        active_deadline_seconds: deadline,
    }
}

const INHERITING: [Kind; 2] = [Kind::TerraformMachine, Kind::TerraformMachinePool];

#[test]
fn built_in_defaults() {
    for kind in Kind::ALL {
        assert_eq!(effective(kind, None, None), eff(300, 3600));
        assert_eq!(
            effective(
                kind,
                Some(&JobsPolicy::default()),
                Some(&ClusterPolicies::default())
            ),
            eff(300, 3600)
        );
    }
    assert_eq!(DEFAULT_LOCK_TIMEOUT_SECONDS, 300);
    assert_eq!(DEFAULT_ACTIVE_DEADLINE_SECONDS, 3600);
}

#[test]
fn cluster_uses_only_its_own_policy() {
    let cluster = ClusterPolicies {
        jobs: Some(pol(Some(10), Some(20))),
        default_jobs: Some(pol(Some(30), Some(40))),
    };
    let own = pol(Some(60), Some(600));
    assert_eq!(
        effective(Kind::TerraformCluster, Some(&own), Some(&cluster)),
        eff(60, 600)
    );
    // Defaults are for machines and pools, never the cluster itself.
    assert_eq!(
        effective(Kind::TerraformCluster, None, Some(&cluster)),
        eff(300, 3600)
    );
    assert_eq!(
        effective(Kind::TerraformCluster, Some(&pol(Some(0), Some(0))), None),
        eff(0, 3600)
    );
}

#[test]
fn machines_and_pools_inherit_defaults_field_by_field() {
    let cluster = ClusterPolicies {
        jobs: Some(pol(Some(11), Some(22))),
        default_jobs: Some(pol(Some(30), Some(40))),
    };
    for kind in INHERITING {
        assert_eq!(effective(kind, None, Some(&cluster)), eff(30, 40));
        assert_eq!(
            effective(kind, Some(&pol(Some(5), None)), Some(&cluster)),
            eff(5, 40)
        );
        assert_eq!(
            effective(kind, Some(&pol(None, Some(50))), Some(&cluster)),
            eff(30, 50)
        );
        assert_eq!(
            effective(kind, Some(&pol(Some(5), Some(50))), Some(&cluster)),
            eff(5, 50)
        );
    }
}

#[test]
fn cluster_own_jobs_are_the_last_inherited_layer() {
    // A vector from CAPTF's docs: cluster spec.jobs {150, 1800}, no defaults,
    // a machine without spec.jobs gets 150 and 1800.
    let cluster = ClusterPolicies {
        jobs: Some(pol(Some(150), Some(1800))),
        default_jobs: None,
    };
    for kind in INHERITING {
        assert_eq!(effective(kind, None, Some(&cluster)), eff(150, 1800));
        assert_eq!(
            effective(kind, Some(&JobsPolicy::default()), Some(&cluster)),
            eff(150, 1800)
        );
    }
    // Defaults win field by field; the cluster's own fills the rest.
    let partial = ClusterPolicies {
        jobs: Some(pol(Some(11), Some(22))),
        default_jobs: Some(pol(None, Some(40))),
    };
    for kind in INHERITING {
        assert_eq!(effective(kind, None, Some(&partial)), eff(11, 40));
        assert_eq!(
            effective(kind, Some(&pol(Some(7), None)), Some(&partial)),
            eff(7, 40)
        );
        assert_eq!(
            effective(kind, Some(&pol(None, Some(5))), Some(&partial)),
            eff(11, 5)
        );
    }
    // The cluster itself never looks at its defaults.
    assert_eq!(
        effective(
            Kind::TerraformCluster,
            Some(&pol(Some(11), Some(22))),
            Some(&partial)
        ),
        eff(11, 22)
    );
}

#[test]
fn captf_resolve_cluster_spec_level_vectors() {
    // CAPTF pure_test.go TestResolveClusterSpecLevel (commit 2b1fddf):
    // the cluster's own spec.jobs {activeDeadlineSeconds: 900}; without
    // defaults a machine gets 900, and defaults that leave the deadline
    // unset still let the cluster's 900 through; the object's own
    // value beats both.
    let no_defaults = ClusterPolicies {
        jobs: Some(pol(None, Some(900))),
        default_jobs: None,
    };
    let with_defaults = ClusterPolicies {
        jobs: Some(pol(None, Some(900))),
        default_jobs: Some(pol(None, None)),
    };
    for kind in INHERITING {
        assert_eq!(effective(kind, None, Some(&no_defaults)), eff(300, 900));
        assert_eq!(effective(kind, None, Some(&with_defaults)), eff(300, 900));
        assert_eq!(
            effective(kind, Some(&pol(None, Some(60))), Some(&with_defaults)),
            eff(300, 60)
        );
    }
    // TestMergeJobPolicy: an own explicit lockTimeoutSeconds 0 wins over
    // defaults {600, 60}; the deadline comes from the defaults.
    let full = ClusterPolicies {
        jobs: None,
        default_jobs: Some(pol(Some(60), Some(600))),
    };
    for kind in INHERITING {
        assert_eq!(
            effective(kind, Some(&pol(Some(0), None)), Some(&full)),
            eff(0, 600)
        );
        assert_eq!(
            effective(kind, Some(&pol(Some(6), Some(7))), Some(&full)),
            eff(6, 7)
        );
        assert_eq!(effective(kind, None, Some(&full)), eff(60, 600));
    }
    // TestResolve: no cluster known yet gives the built-ins.
    for kind in Kind::ALL {
        assert_eq!(effective(kind, None, None), eff(300, 3600));
    }
}

#[test]
fn sources_name_the_layer_that_set_each_field() {
    use Source::*;
    let src = |r: Resolved| {
        (
            r.sources.lock_timeout_seconds,
            r.sources.active_deadline_seconds,
        )
    };
    let cluster = ClusterPolicies {
        jobs: Some(pol(Some(11), Some(22))),
        default_jobs: Some(pol(None, Some(40))),
    };
    for kind in INHERITING {
        let r = resolve(kind, None, Some(&cluster));
        assert_eq!(r.effective, eff(11, 40));
        assert_eq!(src(r), (ClusterJobs, ClusterDefaults));
        let r = resolve(kind, Some(&pol(Some(0), Some(0))), Some(&cluster));
        assert_eq!(r.effective, eff(0, 40));
        assert_eq!(src(r), (Own, ClusterDefaults), "own 0 deadline is unset");
        assert_eq!(src(resolve(kind, None, None)), (BuiltIn, BuiltIn));
    }
    let r = resolve(
        Kind::TerraformCluster,
        Some(&pol(Some(5), None)),
        Some(&cluster),
    );
    assert_eq!(r.effective, eff(5, 3600));
    assert_eq!(src(r), (Own, BuiltIn));
    let names: Vec<&str> = Source::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(
        names,
        ["own", "cluster_defaults", "cluster_jobs", "built_in"]
    );
}

#[test]
fn explicit_zero_lock_timeout_is_set_at_each_level() {
    let cp = |defaults: Option<i64>, own: Option<i64>| ClusterPolicies {
        jobs: Some(pol(own, None)),
        default_jobs: Some(pol(defaults, None)),
    };
    let lock = |kind, own: Option<i64>, c: &ClusterPolicies| {
        effective(kind, Some(&pol(own, None)), Some(c)).lock_timeout_seconds
    };
    for kind in INHERITING {
        // Own 0 beats both cluster layers.
        assert_eq!(lock(kind, Some(0), &cp(Some(99), Some(98))), 0);
        // Defaults 0 beats the cluster's own and the built-in.
        assert_eq!(lock(kind, None, &cp(Some(0), Some(98))), 0);
        // The cluster's own 0 beats the built-in.
        assert_eq!(lock(kind, None, &cp(None, Some(0))), 0);
        assert_eq!(lock(kind, None, &cp(None, None)), 300);
    }
    assert_eq!(
        lock(Kind::TerraformCluster, Some(0), &cp(Some(9), Some(8))),
        0
    );
    assert_eq!(
        lock(Kind::TerraformCluster, None, &cp(Some(9), Some(8))),
        300
    );
}

#[test]
fn zero_or_negative_deadline_is_unset_at_each_level() {
    let cp = |defaults: Option<i64>, own: Option<i64>| ClusterPolicies {
        jobs: Some(pol(None, own)),
        default_jobs: Some(pol(None, defaults)),
    };
    let deadline = |kind, own: Option<i64>, c: &ClusterPolicies| {
        effective(kind, Some(&pol(None, own)), Some(c)).active_deadline_seconds
    };
    for kind in INHERITING {
        assert_eq!(deadline(kind, Some(0), &cp(Some(900), Some(800))), 900);
        assert_eq!(deadline(kind, Some(0), &cp(Some(0), Some(800))), 800);
        assert_eq!(deadline(kind, Some(0), &cp(Some(0), Some(0))), 3600);
        assert_eq!(deadline(kind, Some(-5), &cp(Some(-1), Some(-2))), 3600);
        assert_eq!(deadline(kind, Some(-5), &cp(None, None)), 3600);
        // cmp.Or stops at the first non-zero value, negative included; the
        // Job builder then takes the built-in value, not the inherited one.
        assert_eq!(deadline(kind, Some(-5), &cp(Some(900), Some(800))), 3600);
        assert_eq!(deadline(kind, Some(0), &cp(Some(-1), Some(800))), 3600);
        assert_eq!(deadline(kind, Some(60), &cp(Some(900), Some(800))), 60);
    }
    assert_eq!(
        deadline(Kind::TerraformCluster, Some(0), &cp(Some(9), Some(8))),
        3600
    );
    assert_eq!(
        deadline(Kind::TerraformCluster, Some(-5), &cp(None, None)),
        3600
    );
    assert_eq!(
        deadline(Kind::TerraformCluster, Some(60), &cp(None, None)),
        60
    );
}

#[test]
fn infra_ref_from_api_version() {
    let r = InfraRef::from_api_version(
        "infrastructure.cluster.x-k8s.io/v1alpha1",
        "TerraformCluster",
        "tc",
    );
    assert_eq!(
        r,
        InfraRef {
            api_group: "infrastructure.cluster.x-k8s.io".into(),
            kind: "TerraformCluster".into(),
            name: "tc".into()
        }
    );
    assert_eq!(InfraRef::from_api_version("v1", "K", "n").api_group, "");
    assert_eq!(InfraRef::from_api_version("", "K", "n").api_group, "");
    assert_eq!(InfraRef::from_api_version("g/v/x", "K", "n").api_group, "g");
}

fn tc_ref(name: &str) -> InfraRef {
    InfraRef {
        api_group: API_GROUP.into(),
        kind: "TerraformCluster".into(),
        name: name.into(),
    }
}

#[test]
fn lookup_through_capi_cluster() {
    let r = tc_ref("tc");
    assert_eq!(
        terraform_cluster_name(Some("c1"), CapiClusterLookup::Found(&r), &[]),
        Some("tc")
    );
    // The fallback list is not consulted when the Cluster exists.
    assert_eq!(
        terraform_cluster_name(Some("c1"), CapiClusterLookup::Found(&r), &["other"]),
        Some("tc")
    );
    let v1beta1 = InfraRef::from_api_version(
        "infrastructure.cluster.x-k8s.io/v1alpha1",
        "TerraformCluster",
        "old",
    );
    assert_eq!(
        terraform_cluster_name(Some("c1"), CapiClusterLookup::Found(&v1beta1), &[]),
        Some("old")
    );
}

#[test]
fn lookup_rejects_non_terraform_refs() {
    let empty = tc_ref("");
    assert_eq!(
        terraform_cluster_name(Some("c1"), CapiClusterLookup::Found(&empty), &["x"]),
        None
    );
    let aws = InfraRef {
        api_group: API_GROUP.into(),
        kind: "AWSCluster".into(),
        name: "a".into(),
    };
    assert_eq!(
        terraform_cluster_name(Some("c1"), CapiClusterLookup::Found(&aws), &["x"]),
        None
    );
    let other_group = InfraRef {
        api_group: "example.com".into(),
        kind: "TerraformCluster".into(),
        name: "a".into(),
    };
    assert_eq!(
        terraform_cluster_name(Some("c1"), CapiClusterLookup::Found(&other_group), &[]),
        None
    );
    let v1beta1_core = InfraRef::from_api_version("v1", "TerraformCluster", "a");
    assert_eq!(
        terraform_cluster_name(Some("c1"), CapiClusterLookup::Found(&v1beta1_core), &[]),
        None
    );
}

#[test]
fn lookup_fallback_needs_exactly_one_candidate() {
    assert_eq!(
        terraform_cluster_name(Some("c1"), CapiClusterLookup::NotFound, &[]),
        None
    );
    assert_eq!(
        terraform_cluster_name(Some("c1"), CapiClusterLookup::NotFound, &["tc"]),
        Some("tc")
    );
    assert_eq!(
        terraform_cluster_name(Some("c1"), CapiClusterLookup::NotFound, &["a", "b"]),
        None
    );
}

#[test]
fn lookup_needs_a_label() {
    let r = tc_ref("tc");
    for label in [None, Some("")] {
        assert_eq!(
            terraform_cluster_name(label, CapiClusterLookup::Found(&r), &["tc"]),
            None
        );
        assert_eq!(
            terraform_cluster_name(label, CapiClusterLookup::NotFound, &["tc"]),
            None
        );
    }
}
