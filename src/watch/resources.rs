//! Where the API server serves each watched resource and how its watch
//! filters it: one table ([`ResourceSpec`] per [`Resource`], read through
//! [`Served::spec`]). Watchers, pod reads, the one-shot commands, the demo
//! API and the RBAC documentation test read it; the index knows only the
//! names.

use crate::core::kind::{API_GROUP, API_VERSION};
use crate::index::Resource;

/// Where and how one resource is watched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceSpec {
    /// API group ("" for the core group).
    pub group: &'static str,
    /// Versions to try, in order: the first one served is watched.
    pub versions: &'static [&'static str],
    /// Kind.
    pub kind: &'static str,
    /// Plural resource name (also the `resource` label value).
    pub plural: &'static str,
    /// Server-side label selector (also checked client side).
    pub label_selector: Option<&'static str>,
    /// Server-side field selector; dropped if the server rejects it.
    pub field_selector: Option<&'static str>,
}

/// Lock Leases: created by the backend with `tfstate=true`; CAPTF's own run
/// and cluster Leases carry `captf.io/lease` and are not state locks.
pub const LEASE_SELECTOR: &str = "tfstate=true,!captf.io/lease";
/// Runner pods.
pub const POD_SELECTOR: &str = "captf.io/managed=true";
/// CAPTF's force-unlock Events.
pub const EVENT_FIELD_SELECTOR: &str = "reason=ForceUnlocked";

const fn spec(
    group: &'static str,
    versions: &'static [&'static str],
    kind: &'static str,
    plural: &'static str,
) -> ResourceSpec {
    ResourceSpec {
        group,
        versions,
        kind,
        plural,
        label_selector: None,
        field_selector: None,
    }
}

const LEASES: ResourceSpec = ResourceSpec {
    label_selector: Some(LEASE_SELECTOR),
    ..spec("coordination.k8s.io", &["v1"], "Lease", "leases")
};
const PODS: ResourceSpec = ResourceSpec {
    label_selector: Some(POD_SELECTOR),
    ..spec("", &["v1"], "Pod", "pods")
};
const EVENTS: ResourceSpec = ResourceSpec {
    field_selector: Some(EVENT_FIELD_SELECTOR),
    ..spec("events.k8s.io", &["v1"], "Event", "events")
};
const TF_CLUSTERS: ResourceSpec = spec(
    API_GROUP,
    &[API_VERSION],
    "TerraformCluster",
    "terraformclusters",
);
const TF_MACHINES: ResourceSpec = spec(
    API_GROUP,
    &[API_VERSION],
    "TerraformMachine",
    "terraformmachines",
);
const TF_POOLS: ResourceSpec = spec(
    API_GROUP,
    &[API_VERSION],
    "TerraformMachinePool",
    "terraformmachinepools",
);
const TF_PLANS: ResourceSpec = spec(API_GROUP, &[API_VERSION], "TerraformPlan", "terraformplans");
/// Nodes: cluster-scoped, watched once whatever `--namespaces` says.
const NODES: ResourceSpec = spec("", &["v1"], "Node", "nodes");
/// CAPI serves `Cluster` as v1beta2, and as v1beta1 on older installs.
const CAPI_CLUSTERS: ResourceSpec = spec(
    "cluster.x-k8s.io",
    &["v1beta2", "v1beta1"],
    "Cluster",
    "clusters",
);

impl ResourceSpec {
    /// The server-side filters of a watch; `with_fields` false leaves the
    /// field selector out (a server that rejects it).
    pub fn selectors(&self, with_fields: bool) -> Selectors {
        Selectors {
            labels: self.label_selector,
            fields: self.field_selector.filter(|_| with_fields),
        }
    }
}

/// Server-side filters of one watch.
#[derive(Clone, Debug, Default)]
pub struct Selectors {
    /// Label selector.
    pub labels: Option<&'static str>,
    /// Field selector.
    pub fields: Option<&'static str>,
}

/// The table's row of a resource.
pub trait Served {
    /// Where and how this resource is watched.
    fn spec(self) -> &'static ResourceSpec;
}

impl Served for Resource {
    fn spec(self) -> &'static ResourceSpec {
        match self {
            Resource::Leases => &LEASES,
            Resource::Pods => &PODS,
            Resource::Events => &EVENTS,
            Resource::TerraformClusters => &TF_CLUSTERS,
            Resource::TerraformMachines => &TF_MACHINES,
            Resource::TerraformMachinePools => &TF_POOLS,
            Resource::TerraformPlans => &TF_PLANS,
            Resource::Clusters => &CAPI_CLUSTERS,
            Resource::Nodes => &NODES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_value_is_the_plural() {
        for r in Resource::ALL {
            assert_eq!(r.as_str(), r.spec().plural);
        }
    }

    #[test]
    fn terraform_rows_agree_with_the_kinds() {
        for r in Resource::ALL {
            if let Some(kind) = r.kind() {
                assert_eq!(r.spec().kind, kind.as_str());
                assert_eq!(r.spec().plural, kind.plural());
                assert_eq!(r.spec().group, API_GROUP);
            }
        }
    }

    #[test]
    fn the_install_guide_rbac_table_lists_every_watched_resource() {
        let install = include_str!("../../docs/install.md");
        let rbac = install
            .split("\n## RBAC it needs\n")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .unwrap_or_default();
        for r in Resource::ALL {
            let spec = r.spec();
            let group = if spec.group.is_empty() {
                "`\"\"` (core)".to_string()
            } else {
                format!("`{}`", spec.group)
            };
            let row = rbac
                .lines()
                .find(|l| l.starts_with(&format!("| {group} |")))
                .unwrap_or_else(|| panic!("no RBAC row for group {group}"));
            assert!(
                row.contains(&format!("`{}`", spec.plural)),
                "{row} lacks {}",
                spec.plural
            );
        }
    }
}
