//! stub
use super::{
    jobname::owns_pod,
    kind::Kind,
    lockinfo::{holder_host, LockInfo},
};
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HolderClass {
    OwnLive,
    OwnStale,
    Foreign,
    Unknown,
    OwnUnverified,
}
impl HolderClass {
    pub const ALL: [HolderClass; 5] = [
        HolderClass::OwnLive,
        HolderClass::OwnStale,
        HolderClass::Foreign,
        HolderClass::Unknown,
        HolderClass::OwnUnverified,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            HolderClass::OwnLive => "own_live",
            HolderClass::OwnStale => "own_stale",
            HolderClass::Foreign => "foreign",
            HolderClass::Unknown => "unknown",
            HolderClass::OwnUnverified => "own_unverified",
        }
    }
}
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    Unknown,
    Foreign,
    OwnPod(String),
}
pub fn holder_of(info: Option<&LockInfo>, owner: Option<(Kind, &str)>) -> Holder {
    let Some(host) = info.and_then(|i| holder_host(&i.who)) else {
        return Holder::Unknown;
    };
    match owner {
        Some((k, n)) if owns_pod(k.short(), n, host) => Holder::OwnPod(host.to_string()),
        _ => Holder::Foreign,
    }
}
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodEvidence {
    Live,
    Gone,
    Finished,
    Unreadable,
}
pub fn classify(holder: &Holder, pod: PodEvidence) -> HolderClass {
    match (holder, pod) {
        (Holder::Unknown, _) => HolderClass::Unknown,
        (Holder::Foreign, _) => HolderClass::Foreign,
        (Holder::OwnPod(_), PodEvidence::Live) => HolderClass::OwnLive,
        (Holder::OwnPod(_), PodEvidence::Gone | PodEvidence::Finished) => HolderClass::OwnStale,
        (Holder::OwnPod(_), PodEvidence::Unreadable) => HolderClass::OwnUnverified,
    }
}
pub fn is_terminal_phase(phase: &str) -> bool {
    phase == "Succeeded" || phase == "Failed"
}
pub fn lock_id<'a>(holder_identity: &'a str, info: Option<&'a LockInfo>) -> &'a str {
    match info {
        Some(i) if !i.id.is_empty() => &i.id,
        _ => holder_identity,
    }
}
pub fn is_overdue(class: HolderClass, age_seconds: f64, lock_timeout_seconds: i64) -> bool {
    matches!(class, HolderClass::Foreign | HolderClass::Unknown)
        && age_seconds > lock_timeout_seconds as f64
}
