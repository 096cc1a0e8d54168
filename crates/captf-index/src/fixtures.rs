//! Objects the unit tests of several modules write into an index (test
//! builds only): one definition, so that a change of the Lease's shape is
//! made once.

use captf_core::kind::Kind;
use captf_core::lockinfo::{parse_lock_info, LockInfo};
use captf_core::suffix::{lock_lease_name, state_suffix};

use super::{LockLease, ObjectKey};

/// lock-info of an apply held by `who`, lock ID `id-1`, no creation time.
pub fn lock_info(who: &str) -> LockInfo {
    LockInfo {
        id: "id-1".into(),
        operation: "OperationTypeApply".into(),
        who: who.into(),
        version: "1.9.0".into(),
        created: None,
    }
}

/// A lock Lease in `ns` of any suffix and owner labels, held by `who`
/// (holder `id-x`), with its key.
pub fn held_lease(
    ns: &str,
    suffix: &str,
    kind: Option<&str>,
    name: Option<&str>,
    who: &str,
) -> (ObjectKey, LockLease) {
    let l = LockLease::new(
        ns.into(),
        suffix.into(),
        kind,
        name.map(Into::into),
        "id-x".into(),
        Ok(Some(lock_info(who))),
    );
    (ObjectKey::new(ns, lock_lease_name(suffix)), l)
}

/// The lock Lease of TerraformMachine `ns/<name>`, held by a workstation
/// (`<who>`, a foreign holder) since `created` (RFC 3339), with its key.
pub fn workstation_lock(name: &str, who: &str, created: &str) -> (ObjectKey, LockLease) {
    let suffix = state_suffix("ns", Kind::TerraformMachine, name);
    let info = serde_json::json!({
        "ID": "id-1", "Operation": "OperationTypeApply", "Info": "", "Who": who,
        "Version": "1.9.0", "Created": created, "Path": "",
    })
    .to_string();
    let lease = LockLease::new(
        "ns".into(),
        suffix.clone(),
        Some("TerraformMachine"),
        Some(name.into()),
        "id-1".into(),
        parse_lock_info(&info).map(Some),
    );
    (ObjectKey::new("ns", lock_lease_name(&suffix)), lease)
}
