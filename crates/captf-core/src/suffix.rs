//! CAPTF's state suffix, lock Lease name and owner-name label value
//! (`internal/state/suffix.go`, `internal/state/labels.go`).

use sha2::{Digest, Sha256};

use super::kind::Kind;

/// Name prefix of a state-lock Lease (workspace `default`).
pub const LOCK_LEASE_PREFIX: &str = "lock-tfstate-default-";

/// Longest label value Kubernetes accepts; longer names are hashed.
const MAX_LABEL_VALUE: usize = 63;

/// First 16 hex characters of sha256(data): CAPTF's short hash.
pub(crate) fn sha256_hex16(data: &[u8]) -> String {
    let sum = Sha256::digest(data);
    // 8 bytes = 16 hex characters; iterating avoids any slicing.
    hex::encode(sum.iter().take(8).copied().collect::<Vec<u8>>())
}

/// The backend `secret_suffix` of an object:
/// `hex(sha256(namespace/Kind/name))[:16] + "-" + kindshort`.
pub fn state_suffix(namespace: &str, kind: Kind, name: &str) -> String {
    let id = format!("{namespace}/{}/{name}", kind.as_str());
    format!("{}-{}", sha256_hex16(id.as_bytes()), kind.short())
}

/// Name of the state-lock Lease of `suffix`.
pub fn lock_lease_name(suffix: &str) -> String {
    format!("{LOCK_LEASE_PREFIX}{suffix}")
}

/// The suffix of a state-lock Lease name; `None` when the name lacks the
/// prefix or nothing follows it.
pub fn suffix_of_lock_lease(lease_name: &str) -> Option<&str> {
    lease_name
        .strip_prefix(LOCK_LEASE_PREFIX)
        .filter(|rest| !rest.is_empty())
}

/// The kind a suffix names, from its last `-`segment (`c`, `m`, `mp`).
pub fn kind_of_suffix(suffix: &str) -> Option<Kind> {
    suffix
        .rsplit_once('-')
        .and_then(|(_, short)| Kind::from_short(short))
}

/// CAPTF's `state.LabelValue`: the name itself when it fits a label value
/// (at most 63 bytes), else the first 16 hex characters of its sha256.
pub fn owner_name_label_value(name: &str) -> String {
    if name.len() <= MAX_LABEL_VALUE {
        name.to_owned()
    } else {
        sha256_hex16(name.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Independent sha256 prefix for expected values (full digest, then cut).
    fn full_hex(data: &str) -> String {
        hex::encode(Sha256::digest(data.as_bytes()))
    }

    #[test]
    fn captf_fixture_vectors() {
        assert_eq!(
            state_suffix("fixtures", Kind::TerraformMachine, "terraform-locked"),
            "48db616173c97a97-m"
        );
        assert_eq!(
            state_suffix("fixtures", Kind::TerraformMachine, "opentofu-locked"),
            "8319cb71b6c50144-m"
        );
    }

    #[test]
    fn suffix_uses_full_kind_and_short() {
        for kind in Kind::ALL {
            let want = format!(
                "{}-{}",
                &full_hex(&format!("ns/{}/web", kind.as_str()))[..16],
                kind.short()
            );
            let got = state_suffix("ns", kind, "web");
            assert_eq!(got, want);
            assert_eq!(kind_of_suffix(&got), Some(kind));
        }
        // The namespace is part of the identity.
        assert_ne!(
            state_suffix("a", Kind::TerraformMachine, "x"),
            state_suffix("b", Kind::TerraformMachine, "x")
        );
    }

    #[test]
    fn lease_names() {
        assert_eq!(
            lock_lease_name("48db616173c97a97-m"),
            "lock-tfstate-default-48db616173c97a97-m"
        );
        assert_eq!(
            suffix_of_lock_lease("lock-tfstate-default-48db616173c97a97-m"),
            Some("48db616173c97a97-m")
        );
        assert_eq!(suffix_of_lock_lease("lock-tfstate-default-"), None);
        assert_eq!(suffix_of_lock_lease("captf-run-48db616173c97a97-m"), None);
        assert_eq!(suffix_of_lock_lease("tfstate-default-x"), None);
        assert_eq!(suffix_of_lock_lease(""), None);
    }

    #[test]
    fn kinds_of_suffixes() {
        assert_eq!(kind_of_suffix("abc-c"), Some(Kind::TerraformCluster));
        assert_eq!(kind_of_suffix("abc-m"), Some(Kind::TerraformMachine));
        assert_eq!(kind_of_suffix("a-b-mp"), Some(Kind::TerraformMachinePool));
        assert_eq!(kind_of_suffix("abc-x"), None);
        assert_eq!(kind_of_suffix("abc-"), None);
        assert_eq!(kind_of_suffix("m"), None);
        assert_eq!(kind_of_suffix(""), None);
    }

    #[test]
    fn label_values() {
        let n63 = "a".repeat(63);
        assert_eq!(owner_name_label_value(&n63), n63);
        let n64 = "a".repeat(64);
        assert_eq!(owner_name_label_value(&n64), &full_hex(&n64)[..16]);
        assert_eq!(owner_name_label_value("web"), "web");
        assert_eq!(owner_name_label_value(""), "");
        // Bytes, not characters: 32 two-byte characters are 64 bytes.
        let wide = "é".repeat(32);
        assert_eq!(owner_name_label_value(&wide), &full_hex(&wide)[..16]);
    }
}
