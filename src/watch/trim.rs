//! API objects → index entries: keep only the fields the exporter uses.
//!
//! Decoding is lenient past `metadata`: a field of the wrong type reads as
//! unset instead of failing the whole list, so one odd object cannot blind
//! the exporter to all the others.

use kube::core::object::{NotUsed, Object};
use kube::core::DynamicObject;
use kube::ResourceExt;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::core::kind::Kind;
use crate::core::lockinfo::parse_lock_info;
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
/// Annotation holding the backend's lock-info JSON.
pub const LOCK_INFO_ANNOTATION: &str = "app.terraform.io/lock-info";
/// Owner kind label on Leases, Jobs and pods.
pub const OWNER_KIND_LABEL: &str = "captf.infrastructure.cluster.x-k8s.io/owner-kind";
/// Owner name label (the name, or its hash when over 63 bytes).
pub const OWNER_NAME_LABEL: &str = "captf.infrastructure.cluster.x-k8s.io/owner-name";
/// CAPI's cluster-name label.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

fn lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let v = Value::deserialize(d)?;
    Ok(v.as_str().unwrap_or_default().to_owned())
}

/// The part of a Lease spec the exporter reads.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseSpec {
    /// The lock ID while held.
    #[serde(default, deserialize_with = "lenient_string")]
    pub holder_identity: String,
}

/// A Lease decoded with only the fields used.
pub type LeaseObject = Object<Option<LeaseSpec>, NotUsed>;

/// The part of a pod status the exporter reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct PodStatus {
    /// Pending, Running, Succeeded, Failed or Unknown.
    #[serde(default, deserialize_with = "lenient_string")]
    pub phase: String,
}

/// A pod decoded with only its status phase (the spec is skipped unread).
pub type PodObject = Object<Option<serde::de::IgnoredAny>, PodStatus>;

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

fn int_at(v: &Value, path: &[&str]) -> Option<i64> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_i64()
}

fn jobs_policy(jobs: Option<&Value>) -> Option<JobsPolicy> {
    let jobs = jobs.filter(|j| j.is_object())?;
    Some(JobsPolicy {
        lock_timeout_seconds: int_at(jobs, &["lockTimeoutSeconds"]),
        active_deadline_seconds: int_at(jobs, &["activeDeadlineSeconds"]),
    })
}

/// A Terraform* object.
pub fn terraform_object(kind: Kind, obj: &DynamicObject) -> Trimmed<(Kind, ObjectKey), TfObject> {
    let key = key_of(&obj.metadata);
    let spec = obj.data.get("spec");
    let jobs = jobs_policy(spec.and_then(|s| s.get("jobs")));
    let cluster = (kind == Kind::TerraformCluster).then(|| ClusterPolicies {
        jobs,
        default_jobs: jobs_policy(
            spec.and_then(|s| s.get("defaults"))
                .and_then(|d| d.get("jobs")),
        ),
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
pub fn capi_cluster(obj: &DynamicObject) -> Trimmed<ObjectKey, CapiCluster> {
    let key = key_of(&obj.metadata);
    let r = obj
        .data
        .get("spec")
        .and_then(|s| s.get("infrastructureRef"));
    let text = |k: &str| {
        r.and_then(|r| r.get(k))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let infra_ref = match r.and_then(|r| r.get("apiGroup")).and_then(Value::as_str) {
        Some(group) => InfraRef {
            api_group: group.to_owned(),
            kind: text("kind").to_owned(),
            name: text("name").to_owned(),
        },
        None => InfraRef::from_api_version(text("apiVersion"), text("kind"), text("name")),
    };
    (key, Some(CapiCluster { infra_ref }))
}

/// Reason of the controller's force-unlock Events.
pub const FORCE_UNLOCKED_REASON: &str = "ForceUnlocked";
/// reportingController of CAPTF's Events.
pub const CAPTF_CONTROLLER: &str = "captf-manager";

fn rfc3339_seconds(v: Option<&Value>) -> Option<f64> {
    let s = v?.as_str()?;
    let t = chrono::DateTime::parse_from_rfc3339(s).ok()?;
    Some(t.timestamp() as f64 + f64::from(t.timestamp_subsec_nanos()) / 1e9)
}

/// An events.k8s.io/v1 Event: kept when it is one of CAPTF's
/// ForceUnlocked Events (filtered client side as well).
pub fn force_unlock_event(obj: &DynamicObject) -> Trimmed<ObjectKey, ForceUnlockEvent> {
    let key = key_of(&obj.metadata);
    let d = &obj.data;
    let text = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or_default();
    let ours =
        text("reason") == FORCE_UNLOCKED_REASON && text("reportingController") == CAPTF_CONTROLLER;
    let regarding = d.get("regarding");
    let reg = |k: &str| {
        regarding
            .and_then(|r| r.get(k))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let entry = ours.then(|| {
        let series = d.get("series");
        let occurrences = series
            .and_then(|s| s.get("count"))
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .max(1);
        let last_seen = rfc3339_seconds(series.and_then(|s| s.get("lastObservedTime")))
            .or_else(|| rfc3339_seconds(d.get("eventTime")))
            .or_else(|| rfc3339_seconds(d.get("deprecatedLastTimestamp")))
            .or_else(|| {
                rfc3339_seconds(
                    obj.metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| serde_json::json!(t.0.to_string()))
                        .as_ref(),
                )
            });
        let namespace = Some(reg("namespace"))
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| key.namespace.clone());
        ForceUnlockEvent {
            namespace,
            kind: reg("kind"),
            name: reg("name"),
            occurrences,
            last_seen,
        }
    });
    (key, entry)
}
