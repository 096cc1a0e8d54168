//! stub
use super::kind::Kind;
use sha2::{Digest, Sha256};
pub const LOCK_LEASE_PREFIX: &str = "lock-tfstate-default-";
pub fn state_suffix(namespace: &str, kind: Kind, name: &str) -> String {
    let sum = Sha256::digest(format!("{namespace}/{}/{name}", kind.as_str()).as_bytes());
    format!("{}-{}", &hex::encode(sum)[..16], kind.short())
}
pub fn lock_lease_name(suffix: &str) -> String {
    format!("{LOCK_LEASE_PREFIX}{suffix}")
}
pub fn suffix_of_lock_lease(lease_name: &str) -> Option<&str> {
    lease_name
        .strip_prefix(LOCK_LEASE_PREFIX)
        .filter(|s| !s.is_empty())
}
pub fn kind_of_suffix(suffix: &str) -> Option<Kind> {
    suffix.rsplit('-').next().and_then(Kind::from_short)
}
pub fn owner_name_label_value(name: &str) -> String {
    if name.len() <= 63 {
        name.to_string()
    } else {
        hex::encode(Sha256::digest(name.as_bytes()))[..16].to_string()
    }
}
