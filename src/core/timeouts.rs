//! Effective `lockTimeoutSeconds` and `activeDeadlineSeconds` of an object,
//! and the lookup of a machine's or pool's TerraformCluster, as CAPTF
//! resolves them (`internal/controllers/shared/effective.go` `Resolve` and
//! `MergeJobPolicy`, `internal/jobs/spec.go`, `dependencies.go`
//! `LookupCluster`).

use super::kind::{Kind, API_GROUP};

/// Built-in `lockTimeoutSeconds` (`jobs.DefaultLockTimeoutSeconds`).
pub const DEFAULT_LOCK_TIMEOUT_SECONDS: i64 = 300;
/// Built-in `activeDeadlineSeconds` (`jobs.DefaultActiveDeadlineSeconds`).
pub const DEFAULT_ACTIVE_DEADLINE_SECONDS: i64 = 3600;

/// The two fields of a `spec.jobs` (or `spec.defaults.jobs`) policy that
/// matter here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobsPolicy {
    /// `lockTimeoutSeconds`; a pointer in Go, so an explicit 0 counts as set.
    pub lock_timeout_seconds: Option<i64>,
    /// `activeDeadlineSeconds`; a plain integer in Go, so 0 (or `None`)
    /// means unset.
    pub active_deadline_seconds: Option<i64>,
}

/// A TerraformCluster's policies as seen by its machines and pools.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterPolicies {
    /// The TerraformCluster's own `spec.jobs`: the last inherited layer
    /// (docs/contract.md section 2.9; see [`effective`]).
    pub jobs: Option<JobsPolicy>,
    /// The TerraformCluster's `spec.defaults.jobs`, inherited field by field.
    pub default_jobs: Option<JobsPolicy>,
}

/// The values a runner Job of the object actually gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effective {
    /// Effective `lockTimeoutSeconds`.
    pub lock_timeout_seconds: i64,
    /// Effective `activeDeadlineSeconds`.
    pub active_deadline_seconds: i64,
}

/// Resolves the effective values field by field, as CAPTF's
/// `shared.Resolve` and Job builder do. A TerraformCluster uses its own
/// `spec.jobs`, else the built-in value (`cluster` is ignored). A
/// TerraformMachine or TerraformMachinePool uses its own `spec.jobs`, else
/// its TerraformCluster's `spec.defaults.jobs`, else the built-in value.
///
/// The rule to follow is docs/contract.md section 2.9 (CAPTF's
/// `effective.go` at 2b1fddf4), which adds the cluster's own `spec.jobs` as
/// a last inherited layer; docs/decisions/core-parity.md records the
/// parity decisions.
pub fn effective(
    kind: Kind,
    own: Option<&JobsPolicy>,
    cluster: Option<&ClusterPolicies>,
) -> Effective {
    let defaults = match kind {
        Kind::TerraformCluster => None,
        Kind::TerraformMachine | Kind::TerraformMachinePool => {
            cluster.and_then(|c| c.default_jobs.as_ref())
        }
    };
    let layers = [own, defaults];
    let lock_timeout_seconds = layers
        .iter()
        .flatten()
        .find_map(|p| p.lock_timeout_seconds)
        .unwrap_or(DEFAULT_LOCK_TIMEOUT_SECONDS);
    let active_deadline_seconds = layers
        .iter()
        .flatten()
        .find_map(|p| p.active_deadline_seconds.filter(|v| *v > 0))
        .unwrap_or(DEFAULT_ACTIVE_DEADLINE_SECONDS);
    Effective {
        lock_timeout_seconds,
        active_deadline_seconds,
    }
}

/// A CAPI Cluster's spec.infrastructureRef, normalised across v1beta2
/// (apiGroup) and v1beta1 (apiVersion "group/version").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InfraRef {
    /// API group of the referenced object (`""` for the core group).
    pub api_group: String,
    /// Kind of the referenced object.
    pub kind: String,
    /// Name of the referenced object (same namespace as the Cluster).
    pub name: String,
}

impl InfraRef {
    /// Builds a ref from a v1beta1 `apiVersion`: the group is the text
    /// before the first `/`, `""` when there is none (core `v1`).
    pub fn from_api_version(api_version: &str, kind: &str, name: &str) -> Self {
        let api_group = api_version.split_once('/').map_or("", |(group, _)| group);
        InfraRef {
            api_group: api_group.to_owned(),
            kind: kind.to_owned(),
            name: name.to_owned(),
        }
    }
}

/// Outcome of reading the CAPI Cluster named by an object's
/// `cluster.x-k8s.io/cluster-name` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapiClusterLookup<'a> {
    /// The Cluster exists; its infrastructureRef.
    Found(&'a InfraRef),
    /// The Cluster does not exist (not found).
    NotFound,
}

/// Name of the TerraformCluster a machine or pool inherits from, as CAPTF's
/// `LookupCluster` finds it. `cluster_name_label` is the object's
/// `cluster.x-k8s.io/cluster-name` label; `tcs_with_same_label` are the
/// TerraformClusters in its namespace carrying that same label value, used
/// only when the CAPI Cluster is gone. `None` means no cluster: own values,
/// then built-in. The caller still has to find the TerraformCluster by name.
pub fn terraform_cluster_name<'a>(
    cluster_name_label: Option<&str>,
    capi: CapiClusterLookup<'a>,
    tcs_with_same_label: &[&'a str],
) -> Option<&'a str> {
    // util.GetClusterFromMetadata: no (or an empty) label means no Cluster.
    cluster_name_label.filter(|l| !l.is_empty())?;
    match capi {
        CapiClusterLookup::Found(r) => {
            if r.name.is_empty()
                || r.api_group != API_GROUP
                || r.kind != Kind::TerraformCluster.as_str()
            {
                None
            } else {
                Some(r.name.as_str())
            }
        }
        // lookupOrphanedCluster: exactly one labelled TerraformCluster.
        CapiClusterLookup::NotFound => match tcs_with_same_label {
            [only] => Some(*only),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
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
    fn cluster_own_jobs_are_not_inherited() {
        // CAPTF merges only spec.defaults.jobs into a machine's or pool's
        // policy; the cluster's own spec.jobs is for its own Jobs.
        let cluster = ClusterPolicies {
            jobs: Some(pol(Some(11), Some(22))),
            default_jobs: None,
        };
        for kind in INHERITING {
            assert_eq!(effective(kind, None, Some(&cluster)), eff(300, 3600));
        }
        let partial = ClusterPolicies {
            jobs: Some(pol(Some(11), Some(22))),
            default_jobs: Some(pol(None, Some(40))),
        };
        for kind in INHERITING {
            assert_eq!(effective(kind, None, Some(&partial)), eff(300, 40));
            assert_eq!(
                effective(kind, Some(&pol(Some(7), None)), Some(&partial)),
                eff(7, 40)
            );
        }
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
            // Defaults 0 beats the built-in.
            assert_eq!(lock(kind, None, &cp(Some(0), Some(98))), 0);
            // The cluster's own value, even 0, is not inherited.
            assert_eq!(lock(kind, None, &cp(None, Some(0))), 300);
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
            assert_eq!(deadline(kind, Some(0), &cp(Some(0), Some(800))), 3600);
            assert_eq!(deadline(kind, Some(0), &cp(Some(0), Some(0))), 3600);
            assert_eq!(deadline(kind, Some(-5), &cp(None, None)), 3600);
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
}
