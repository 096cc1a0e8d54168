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
use crate::index::{CapiCluster, Change, Entry, ForceUnlockEvent, LockLease, PodState, TfObject};

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

/// Server-side selector for lock Leases (also checked client side: not every
/// API server honours selectors).
pub const LEASE_SELECTOR: &str = "tfstate=true,!captf.io/lease";
/// Server-side selector for runner pods.
pub const POD_SELECTOR: &str = "captf.io/managed=true";

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

fn key_of(meta: &kube::core::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// A Lease as a change: an entry when it is a state lock, else a removal.
pub fn lease(obj: &LeaseObject) -> Change {
    let key = key_of(&obj.metadata);
    let labels = obj.labels();
    let is_lock = labels.get(TFSTATE_LABEL).map(String::as_str) == Some("true")
        && !labels.contains_key(CAPTF_LEASE_LABEL);
    let suffix = suffix_of_lock_lease(&key.1).map(str::to_owned);
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
            Some(Entry::Lease(LockLease::new(
                key.0.clone(),
                suffix,
                labels.get(OWNER_KIND_LABEL).map(String::as_str),
                labels.get(OWNER_NAME_LABEL).cloned(),
                holder,
                info,
            )))
        }
        _ => None,
    };
    Change { key, entry }
}

/// A runner pod as a change.
pub fn pod(obj: &PodObject) -> Change {
    let key = key_of(&obj.metadata);
    let managed = obj.labels().get(MANAGED_LABEL).map(String::as_str) == Some("true");
    let phase = obj.status.as_ref().map_or("", |s| s.phase.as_str());
    let entry = managed.then(|| {
        Entry::Pod(PodState {
            finished: crate::core::classify::is_terminal_phase(phase),
        })
    });
    Change { key, entry }
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

/// A Terraform* object as a change.
pub fn terraform_object(kind: Kind, obj: &DynamicObject) -> Change {
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
    let entry = Entry::Object(TfObject {
        kind,
        name: key.1.clone(),
        cluster_label: obj.labels().get(CLUSTER_NAME_LABEL).cloned(),
        jobs,
        cluster,
    });
    Change {
        key,
        entry: Some(entry),
    }
}

/// A CAPI Cluster (v1beta2 or v1beta1) as a change.
pub fn capi_cluster(obj: &DynamicObject) -> Change {
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
    Change {
        key,
        entry: Some(Entry::Capi(CapiCluster { infra_ref })),
    }
}

/// Reason of the controller's force-unlock Events.
pub const FORCE_UNLOCKED_REASON: &str = "ForceUnlocked";
/// reportingController of CAPTF's Events.
pub const CAPTF_CONTROLLER: &str = "captf-manager";
/// Server-side field selector for those Events, where supported.
pub const EVENT_FIELD_SELECTOR: &str = "reason=ForceUnlocked";

fn rfc3339_seconds(v: Option<&Value>) -> Option<f64> {
    let s = v?.as_str()?;
    let t = chrono::DateTime::parse_from_rfc3339(s).ok()?;
    Some(t.timestamp() as f64 + f64::from(t.timestamp_subsec_nanos()) / 1e9)
}

/// An events.k8s.io/v1 Event as a change: an entry for CAPTF's
/// ForceUnlocked Events, else a removal (filtered client side as well).
pub fn force_unlock_event(obj: &DynamicObject) -> Change {
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
            .unwrap_or_else(|| key.0.clone());
        Entry::ForceUnlock(ForceUnlockEvent {
            namespace,
            kind: reg("kind"),
            name: reg("name"),
            occurrences,
            last_seen,
        })
    });
    Change { key, entry }
}
