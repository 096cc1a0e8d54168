//! The three CAPTF kinds whose state locks the exporter watches.

/// API group of the CAPTF kinds.
pub const API_GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// API version of the CAPTF kinds.
pub const API_VERSION: &str = "v1alpha1";

/// A CAPTF object kind that owns a Terraform state (and so a state lock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `TerraformCluster` (short `c`).
    TerraformCluster,
    /// `TerraformMachine` (short `m`).
    TerraformMachine,
    /// `TerraformMachinePool` (short `mp`).
    TerraformMachinePool,
}

impl Kind {
    /// Every kind, in a stable order (for pre-creating per-kind series).
    pub const ALL: [Kind; 3] = [
        Kind::TerraformCluster,
        Kind::TerraformMachine,
        Kind::TerraformMachinePool,
    ];

    /// The full Kind string, as in `kind:` and in the state suffix hash.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::TerraformCluster => "TerraformCluster",
            Kind::TerraformMachine => "TerraformMachine",
            Kind::TerraformMachinePool => "TerraformMachinePool",
        }
    }

    /// CAPTF's short kind (`state.KindShort`), used in suffixes and Job names.
    pub fn short(self) -> &'static str {
        match self {
            Kind::TerraformCluster => "c",
            Kind::TerraformMachine => "m",
            Kind::TerraformMachinePool => "mp",
        }
    }

    /// The CRD's short name (`kubectl get tfm`), declared by CAPTF's
    /// newest CRDs (docs/contract.md section 2.1). Not the Job-name short kind
    /// ([`Kind::short`]).
    pub fn short_name(self) -> &'static str {
        match self {
            Kind::TerraformCluster => "tfc",
            Kind::TerraformMachine => "tfm",
            Kind::TerraformMachinePool => "tfmp",
        }
    }

    /// The resource plural, as used in API paths.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::TerraformCluster => "terraformclusters",
            Kind::TerraformMachine => "terraformmachines",
            Kind::TerraformMachinePool => "terraformmachinepools",
        }
    }

    /// Parses the exact full Kind string (case-sensitive, as Kubernetes is).
    pub fn from_kind(kind: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == kind)
    }

    /// Parses an exact short kind (`c`, `m`, `mp`).
    pub fn from_short(short: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.short() == short)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_match_captf() {
        let table = [
            (
                Kind::TerraformCluster,
                "TerraformCluster",
                "c",
                "terraformclusters",
            ),
            (
                Kind::TerraformMachine,
                "TerraformMachine",
                "m",
                "terraformmachines",
            ),
            (
                Kind::TerraformMachinePool,
                "TerraformMachinePool",
                "mp",
                "terraformmachinepools",
            ),
        ];
        for (k, full, short, plural) in table {
            assert_eq!(k.as_str(), full);
            assert_eq!(k.to_string(), full);
            assert_eq!(k.short(), short);
            assert_eq!(k.plural(), plural);
            assert_eq!(Kind::from_kind(full), Some(k));
            assert_eq!(Kind::from_short(short), Some(k));
        }
        assert_eq!(Kind::ALL.len(), 3);
    }

    #[test]
    fn parsing_is_exact() {
        for bad in [
            "",
            "terraformmachine",
            "TerraformMachine ",
            "Machine",
            "TERRAFORMCLUSTER",
        ] {
            assert_eq!(Kind::from_kind(bad), None, "{bad:?}");
        }
        for bad in ["", "C", "M", "MP", "p", "mpp", " m", "cluster"] {
            assert_eq!(Kind::from_short(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn constants() {
        assert_eq!(API_GROUP, "infrastructure.cluster.x-k8s.io");
        assert_eq!(API_VERSION, "v1alpha1");
    }
}
