//! stub
pub const API_GROUP: &str = "infrastructure.cluster.x-k8s.io";
pub const API_VERSION: &str = "v1alpha1";
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    TerraformCluster,
    TerraformMachine,
    TerraformMachinePool,
}
impl Kind {
    pub const ALL: [Kind; 3] = [
        Kind::TerraformCluster,
        Kind::TerraformMachine,
        Kind::TerraformMachinePool,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::TerraformCluster => "TerraformCluster",
            Kind::TerraformMachine => "TerraformMachine",
            Kind::TerraformMachinePool => "TerraformMachinePool",
        }
    }
    pub fn short(self) -> &'static str {
        match self {
            Kind::TerraformCluster => "c",
            Kind::TerraformMachine => "m",
            Kind::TerraformMachinePool => "mp",
        }
    }
    pub fn plural(self) -> &'static str {
        match self {
            Kind::TerraformCluster => "terraformclusters",
            Kind::TerraformMachine => "terraformmachines",
            Kind::TerraformMachinePool => "terraformmachinepools",
        }
    }
    pub fn from_kind(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
    pub fn from_short(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.short() == s)
    }
}
