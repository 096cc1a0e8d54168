//! stub
use super::kind::Kind;
pub const DEFAULT_LOCK_TIMEOUT_SECONDS: i64 = 300;
pub const DEFAULT_ACTIVE_DEADLINE_SECONDS: i64 = 3600;
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobsPolicy {
    pub lock_timeout_seconds: Option<i64>,
    pub active_deadline_seconds: Option<i64>,
}
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterPolicies {
    pub jobs: Option<JobsPolicy>,
    pub default_jobs: Option<JobsPolicy>,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effective {
    pub lock_timeout_seconds: i64,
    pub active_deadline_seconds: i64,
}
pub fn effective(
    _kind: Kind,
    own: Option<&JobsPolicy>,
    _cluster: Option<&ClusterPolicies>,
) -> Effective {
    Effective {
        lock_timeout_seconds: own
            .and_then(|p| p.lock_timeout_seconds)
            .unwrap_or(DEFAULT_LOCK_TIMEOUT_SECONDS),
        active_deadline_seconds: DEFAULT_ACTIVE_DEADLINE_SECONDS,
    }
}
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InfraRef {
    pub api_group: String,
    pub kind: String,
    pub name: String,
}
impl InfraRef {
    pub fn from_api_version(api_version: &str, kind: &str, name: &str) -> Self {
        InfraRef {
            api_group: api_version
                .split_once('/')
                .map(|(g, _)| g)
                .unwrap_or("")
                .to_string(),
            kind: kind.into(),
            name: name.into(),
        }
    }
}
pub enum CapiClusterLookup<'a> {
    Found(&'a InfraRef),
    NotFound,
}
pub fn terraform_cluster_name<'a>(
    label: Option<&str>,
    capi: CapiClusterLookup<'a>,
    tcs: &[&'a str],
) -> Option<&'a str> {
    label.filter(|l| !l.is_empty())?;
    match capi {
        CapiClusterLookup::Found(r) => Some(r.name.as_str()),
        CapiClusterLookup::NotFound => {
            if tcs.len() == 1 {
                tcs.first().copied()
            } else {
                None
            }
        }
    }
}
