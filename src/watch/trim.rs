//! Decoded API objects ([`super::slim`]) → index entries: what the index
//! keeps of each, and which objects it keeps at all.

use kube::ResourceExt;

use crate::core::jobname::is_job_of;
use crate::core::kind::Kind;
use crate::core::lockinfo::parse_lock_info;
use crate::core::podname::is_dns1123_subdomain;
use crate::core::suffix::suffix_of_lock_lease;
use crate::core::timeouts::{ClusterPolicies, InfraRef, JobsPolicy};
use crate::index::{CapiCluster, ForceUnlockEvent, LockLease, ObjectKey, PodState, TfObject};

/// A trimmed watch object: its key, and what the index keeps of it (None
/// when it does not pass the filters, which the index treats as a delete).
pub type Trimmed<K, T> = (K, Option<T>);

/// Label every backend-created lock Lease carries.
pub const TFSTATE_LABEL: &str = "tfstate";
/// Label of CAPTF's run and cluster Leases, which are not state locks.
pub const CAPTF_LEASE_LABEL: &str = "captf.io/lease";
/// Label of CAPTF-managed objects (runner Jobs and pods).
pub const MANAGED_LABEL: &str = "captf.io/managed";
use super::slim::JobsDoc;
pub use super::slim::{
    CapiClusterObject, EventObject, EventRef, LeaseObject, PodObject, TerraformObject,
    LOCK_INFO_ANNOTATION,
};
/// Owner kind label on Leases, Jobs and pods.
pub const OWNER_KIND_LABEL: &str = "captf.infrastructure.cluster.x-k8s.io/owner-kind";
/// Owner name label (the name, or its hash when over 63 bytes).
pub const OWNER_NAME_LABEL: &str = "captf.infrastructure.cluster.x-k8s.io/owner-name";
/// CAPI's cluster-name label.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

fn key_of(meta: &kube::core::ObjectMeta) -> ObjectKey {
    ObjectKey::new(
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// A Lease: kept when it is a state lock.
pub fn lease(obj: &LeaseObject) -> Trimmed<ObjectKey, LockLease> {
    let key = key_of(&obj.metadata);
    let labels = obj.labels();
    let is_lock = labels.get(TFSTATE_LABEL).map(String::as_str) == Some("true")
        && !labels.contains_key(CAPTF_LEASE_LABEL);
    let suffix = suffix_of_lock_lease(&key.name).map(str::to_owned);
    let entry = match (is_lock, suffix) {
        (true, Some(suffix)) => {
            let holder = obj
                .spec
                .as_ref()
                .map(|s| s.holder_identity.clone())
                .unwrap_or_default();
            let info = match obj.annotations().get(LOCK_INFO_ANNOTATION) {
                Some(raw) if !raw.is_empty() => parse_lock_info(raw).map(Some),
                _ => Ok(None),
            };
            Some(LockLease::new(
                key.namespace.clone(),
                suffix,
                labels.get(OWNER_KIND_LABEL).map(String::as_str),
                labels.get(OWNER_NAME_LABEL).cloned(),
                holder,
                info,
            ))
        }
        _ => None,
    };
    (key, entry)
}

/// A runner pod: kept when CAPTF manages it.
pub fn pod(obj: &PodObject) -> Trimmed<ObjectKey, PodState> {
    let key = key_of(&obj.metadata);
    let managed = obj.labels().get(MANAGED_LABEL).map(String::as_str) == Some("true");
    let phase = obj.status.as_ref().map_or("", |s| s.phase.as_str());
    let entry = managed.then(|| PodState {
        finished: crate::core::classify::is_terminal_phase(phase),
    });
    (key, entry)
}

fn jobs_policy(jobs: Option<JobsDoc>) -> Option<JobsPolicy> {
    jobs.map(|j| JobsPolicy {
        lock_timeout_seconds: j.lock_timeout_seconds,
        active_deadline_seconds: j.active_deadline_seconds,
    })
}

/// A Terraform* object.
pub fn terraform_object(kind: Kind, obj: &TerraformObject) -> Trimmed<(Kind, ObjectKey), TfObject> {
    let key = key_of(&obj.metadata);
    let spec = obj.spec.unwrap_or_default();
    let jobs = jobs_policy(spec.jobs);
    let cluster = (kind == Kind::TerraformCluster).then(|| ClusterPolicies {
        jobs,
        default_jobs: jobs_policy(spec.defaults.and_then(|d| d.jobs)),
    });
    let entry = TfObject {
        kind,
        name: key.name.clone(),
        cluster_label: obj.labels().get(CLUSTER_NAME_LABEL).cloned(),
        jobs,
        cluster,
    };
    ((kind, key), Some(entry))
}

/// A CAPI Cluster (v1beta2 or v1beta1).
pub fn capi_cluster(obj: &CapiClusterObject) -> Trimmed<ObjectKey, CapiCluster> {
    let key = key_of(&obj.metadata);
    let r = obj
        .spec
        .as_ref()
        .and_then(|s| s.infrastructure_ref.clone())
        .unwrap_or_default();
    let infra_ref = match r.api_group {
        Some(group) => InfraRef {
            api_group: group,
            kind: r.kind,
            name: r.name,
        },
        None => InfraRef::from_api_version(&r.api_version, &r.kind, &r.name),
    };
    (key, Some(CapiCluster { infra_ref }))
}

/// Reason of the controller's force-unlock Events.
pub const FORCE_UNLOCKED_REASON: &str = "ForceUnlocked";
/// reportingController of CAPTF's Events.
pub const CAPTF_CONTROLLER: &str = "captf-manager";

fn rfc3339_seconds(s: &str) -> Option<f64> {
    let t = chrono::DateTime::parse_from_rfc3339(s).ok()?;
    Some(t.timestamp() as f64 + f64::from(t.timestamp_subsec_nanos()) / 1e9)
}

/// API group of the Terraform* kinds.
const INFRA_GROUP: &str = "infrastructure.cluster.x-k8s.io";

/// The group of an `apiVersion` (`""` for the core group).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// Whether `regarding` and `related` are what CAPTF's recorder writes on a
/// ForceUnlocked Event in `namespace`: regarding a Terraform* object with
/// a name an object can have, related a Job whose name CAPTF's job-name
/// rule gives for that object. Anyone who may create Events can claim to
/// be `captf-manager`; only an Event CAPTF could have written moves a
/// counter or adds a series. The object name's bound (a DNS-1123
/// subdomain, at most 253 bytes) is the label cap: a cut name would not
/// match the object's other series.
pub fn plausible_force_unlock(
    namespace: &str,
    regarding: &EventRef,
    related: Option<&EventRef>,
) -> bool {
    let same_ns = |r: &EventRef| r.namespace.is_empty() || r.namespace == namespace;
    let Some(kind) = Kind::from_kind(&regarding.kind) else {
        return false;
    };
    let Some(job) = related else {
        return false;
    };
    group_of(&regarding.api_version) == INFRA_GROUP
        && same_ns(regarding)
        && is_dns1123_subdomain(&regarding.name)
        && job.kind == "Job"
        && job.api_version == "batch/v1"
        && same_ns(job)
        && is_job_of(kind.short(), &regarding.name, &job.name)
}

/// An events.k8s.io/v1 Event: kept when it is one of CAPTF's
/// ForceUnlocked Events (filtered client side as well) and
/// [`plausible_force_unlock`].
pub fn force_unlock_event(obj: &EventObject) -> Trimmed<ObjectKey, ForceUnlockEvent> {
    let key = key_of(&obj.metadata);
    let regarding = obj.regarding.clone().unwrap_or_default();
    let ours = obj.reason == FORCE_UNLOCKED_REASON
        && obj.reporting_controller == CAPTF_CONTROLLER
        && plausible_force_unlock(&key.namespace, &regarding, obj.related.as_ref());
    let entry = ours.then(|| {
        let series = obj.series.as_ref();
        let occurrences = series.and_then(|s| s.count).unwrap_or(1).max(1);
        let last_seen = series
            .and_then(|s| rfc3339_seconds(&s.last_observed_time))
            .or_else(|| rfc3339_seconds(&obj.event_time))
            .or_else(|| rfc3339_seconds(&obj.deprecated_last_timestamp))
            .or_else(|| {
                let created = obj.metadata.creation_timestamp.as_ref()?;
                rfc3339_seconds(&created.0.to_string())
            });
        ForceUnlockEvent {
            namespace: key.namespace.clone(),
            kind: regarding.kind,
            name: regarding.name,
            occurrences,
            last_seen,
        }
    });
    (key, entry)
}
