//! Effective `lockTimeoutSeconds` and `activeDeadlineSeconds` of an object,
//! and the lookup of a machine's or pool's TerraformCluster, as CAPTF
//! resolves them (`internal/controllers/shared/effective.go` `Resolve`,
//! `clusterInherited` and `MergeJobPolicy` at commit
//! `2b1fddf48dd94c167dab2366ff29b3f9c87e4f32`, `internal/jobs/spec.go`,
//! `dependencies.go` `LookupCluster`).

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
    /// The TerraformCluster's own `spec.jobs`: for its machines and pools
    /// the last inherited layer, under `spec.defaults.jobs`.
    pub jobs: Option<JobsPolicy>,
    /// The TerraformCluster's `spec.defaults.jobs`, inherited field by field
    /// before the cluster's own `spec.jobs`.
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

/// Where one effective value came from: the layer of the inheritance chain
/// that set it. Pure data, so a later metric or log can say why an object
/// has the timeout it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The object's own `spec.jobs`.
    Own,
    /// Its TerraformCluster's `spec.defaults.jobs` (machines and pools only).
    ClusterDefaults,
    /// Its TerraformCluster's own `spec.jobs` (machines and pools only).
    ClusterJobs,
    /// No layer set it: CAPTF's built-in value.
    BuiltIn,
}

impl Source {
    /// Every source, from the strongest layer to the weakest.
    pub const ALL: [Source; 4] = [
        Source::Own,
        Source::ClusterDefaults,
        Source::ClusterJobs,
        Source::BuiltIn,
    ];

    /// A stable snake_case name, fit for a label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Own => "own",
            Source::ClusterDefaults => "cluster_defaults",
            Source::ClusterJobs => "cluster_jobs",
            Source::BuiltIn => "built_in",
        }
    }
}

/// The source of each field of an [`Effective`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sources {
    /// Where `lock_timeout_seconds` came from.
    pub lock_timeout_seconds: Source,
    /// Where `active_deadline_seconds` came from.
    pub active_deadline_seconds: Source,
}

/// The effective values and, field by field, where each came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The values.
    pub effective: Effective,
    /// Their sources.
    pub sources: Sources,
}

/// Resolves the effective values field by field, as CAPTF's
/// `shared.Resolve` and Job builder do, and says where each came from.
///
/// - A TerraformCluster: its own `spec.jobs`, else the built-in value
///   (`cluster` is ignored: `spec.defaults` are for its machines and pools).
/// - A TerraformMachine or TerraformMachinePool: its own `spec.jobs`, else
///   its TerraformCluster's `spec.defaults.jobs`, else that cluster's own
///   `spec.jobs`, else the built-in value. CAPTF computes this as
///   `MergeJobPolicy(spec.Jobs, clusterInherited(cluster))`, with
///   `clusterInherited = MergeJobPolicy(defaults.Jobs, cluster.Spec.Jobs)`.
///
/// `lockTimeoutSeconds` is a pointer in Go: an explicit 0 is set and stops
/// the search. `activeDeadlineSeconds` is a plain integer merged with
/// `cmp.Or`, which returns its first argument that is not the zero value:
/// 0 is unset and the search goes on, but a negative value (only on an
/// object that bypassed validation) is not zero, so it stops the search;
/// the Job builder then uses the built-in value for anything not above 0.
pub fn resolve(
    kind: Kind,
    own: Option<&JobsPolicy>,
    cluster: Option<&ClusterPolicies>,
) -> Resolved {
    let inherited = match kind {
        Kind::TerraformCluster => None,
        Kind::TerraformMachine | Kind::TerraformMachinePool => cluster,
    };
    let layers = [
        (own, Source::Own),
        (
            inherited.and_then(|c| c.default_jobs.as_ref()),
            Source::ClusterDefaults,
        ),
        (inherited.and_then(|c| c.jobs.as_ref()), Source::ClusterJobs),
    ];
    let first = |pick: &dyn Fn(&JobsPolicy) -> Option<i64>, built_in: i64| {
        layers
            .iter()
            .find_map(|(p, src)| p.and_then(pick).map(|v| (v, *src)))
            .unwrap_or((built_in, Source::BuiltIn))
    };
    let (lock, lock_src) = first(&|p| p.lock_timeout_seconds, DEFAULT_LOCK_TIMEOUT_SECONDS);
    let (deadline, deadline_src) = match first(
        &|p| p.active_deadline_seconds.filter(|v| *v != 0),
        DEFAULT_ACTIVE_DEADLINE_SECONDS,
    ) {
        (v, _) if v < 0 => (DEFAULT_ACTIVE_DEADLINE_SECONDS, Source::BuiltIn),
        found => found,
    };
    Resolved {
        effective: Effective {
            lock_timeout_seconds: lock,
            active_deadline_seconds: deadline,
        },
        sources: Sources {
            lock_timeout_seconds: lock_src,
            active_deadline_seconds: deadline_src,
        },
    }
}

/// The effective values alone: [`resolve`] without the sources.
pub fn effective(
    kind: Kind,
    own: Option<&JobsPolicy>,
    cluster: Option<&ClusterPolicies>,
) -> Effective {
    resolve(kind, own, cluster).effective
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
mod tests;
