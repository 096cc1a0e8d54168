//! The watched resources, by name: the index keys its scopes and health
//! its series by them. Where the API server serves each one and how its
//! watch filters it is the watchers' table, `crate::watch::resources`.

use captf_core::kind::Kind;

/// A watched API resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    /// coordination.k8s.io/v1 leases (state locks).
    Leases,
    /// v1 pods (runner pods).
    Pods,
    /// events.k8s.io/v1 events (ForceUnlocked).
    Events,
    /// TerraformClusters.
    TerraformClusters,
    /// TerraformMachines.
    TerraformMachines,
    /// TerraformMachinePools.
    TerraformMachinePools,
    /// TerraformPlans (approvals an object's apply waits for).
    TerraformPlans,
    /// cluster.x-k8s.io clusters.
    Clusters,
    /// v1 nodes (cluster-scoped: the lost-node evidence of own locks).
    Nodes,
}

impl Resource {
    /// Every resource, in label order.
    pub const ALL: [Resource; 9] = [
        Resource::Leases,
        Resource::Pods,
        Resource::Events,
        Resource::TerraformClusters,
        Resource::TerraformMachines,
        Resource::TerraformMachinePools,
        Resource::TerraformPlans,
        Resource::Clusters,
        Resource::Nodes,
    ];

    /// The `resource` label value: the plural resource name (the same
    /// as the table's in `crate::watch::resources`, checked there).
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Leases => "leases",
            Resource::Pods => "pods",
            Resource::Events => "events",
            Resource::TerraformClusters => "terraformclusters",
            Resource::TerraformMachines => "terraformmachines",
            Resource::TerraformMachinePools => "terraformmachinepools",
            Resource::TerraformPlans => "terraformplans",
            Resource::Clusters => "clusters",
            Resource::Nodes => "nodes",
        }
    }

    /// Served cluster-wide (Nodes): watched once, whatever the namespace
    /// scopes, and never by a Role.
    pub fn cluster_scoped(self) -> bool {
        self == Resource::Nodes
    }

    /// The Terraform* kind this resource holds, if any.
    pub fn kind(self) -> Option<Kind> {
        match self {
            Resource::TerraformClusters => Some(Kind::TerraformCluster),
            Resource::TerraformMachines => Some(Kind::TerraformMachine),
            Resource::TerraformMachinePools => Some(Kind::TerraformMachinePool),
            _ => None,
        }
    }
}
