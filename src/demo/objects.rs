//! The simulated cluster's objects as the API server would return them,
//! labelled and shaped as CAPTF writes them.

use chrono::{SecondsFormat, Utc};
use serde_json::{json, Map, Value};

use super::store::{api_version, ServedResource};
use crate::core::jobname::{job_name, Op};
use crate::core::kind::{Kind, API_GROUP, API_VERSION};
use crate::core::suffix::{lock_lease_name, state_suffix};
use crate::core::timeouts::JobsPolicy;
use crate::index::Resource;
use crate::watch::trim::{
    CAPTF_CONTROLLER, CLUSTER_NAME_LABEL, FORCE_UNLOCKED_REASON, LOCK_INFO_ANNOTATION,
    MANAGED_LABEL, OWNER_KIND_LABEL, OWNER_NAME_LABEL, TFSTATE_LABEL,
};
use crate::watch::Served;

/// The namespace everything lives in.
pub const NS: &str = "demo";
/// The workload cluster's name.
pub const CLUSTER: &str = "prod";

fn now_rfc3339(age_seconds: i64, precision: SecondsFormat) -> String {
    (Utc::now() - chrono::Duration::seconds(age_seconds)).to_rfc3339_opts(precision, true)
}

fn meta(name: &str, labels: Value) -> Value {
    json!({
        "name": name,
        "namespace": NS,
        "labels": labels,
        "creationTimestamp": now_rfc3339(0, SecondsFormat::Secs),
    })
}

fn typed(resource: ServedResource, metadata: Value, rest: Value) -> Value {
    let mut object = Map::new();
    object.insert("apiVersion".into(), json!(api_version(resource)));
    object.insert("kind".into(), json!(resource.spec().kind));
    object.insert("metadata".into(), metadata);
    if let Value::Object(fields) = rest {
        object.extend(fields);
    }
    Value::Object(object)
}

/// The name of the runner pod of an apply Job for this object.
pub fn runner_pod(kind: Kind, name: &str) -> String {
    format!(
        "{}-x7k2p",
        job_name(kind.short(), name, Op::Apply, 1, "a1b2c3")
    )
}

/// A UUID-shaped lock ID derived from the holder, as backends write UUIDs.
pub fn lock_id(who: &str) -> String {
    use sha2::{Digest, Sha256};
    let h = hex::encode(Sha256::digest(who.as_bytes()));
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Lock-info JSON as the backend writes it, created `age_seconds` ago.
pub fn lock_info(who: &str, age_seconds: i64) -> String {
    json!({
        "ID": lock_id(who),
        "Operation": "OperationTypeApply",
        "Info": "",
        "Who": who,
        "Version": "1.9.0",
        "Created": now_rfc3339(age_seconds, SecondsFormat::Nanos),
        "Path": "",
    })
    .to_string()
}

/// The state-lock Lease of an object; `lock_info` set means held.
pub fn lease(kind: Kind, name: &str, lock_info: Option<&str>) -> Value {
    let suffix = state_suffix(NS, kind, name);
    let mut metadata = meta(
        &lock_lease_name(&suffix),
        json!({
            TFSTATE_LABEL: "true",
            OWNER_KIND_LABEL: kind.as_str(),
            OWNER_NAME_LABEL: name,
        }),
    );
    let mut spec = json!({});
    if let Some(info) = lock_info {
        metadata["annotations"] = json!({ LOCK_INFO_ANNOTATION: info });
        // The backend writes holderIdentity and lock-info's ID from one ID;
        // a lock-info without one (the malformed demo lock) gets its own.
        let id = serde_json::from_str::<Value>(info)
            .ok()
            .and_then(|v| v.get("ID").and_then(Value::as_str).map(str::to_string))
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| lease_lock_id(kind, name));
        spec["holderIdentity"] = json!(id);
    }
    typed(Resource::Leases, metadata, json!({ "spec": spec }))
}

/// A runner pod in `phase`.
pub fn pod(name: &str, phase: &str) -> Value {
    let metadata = meta(name, json!({ MANAGED_LABEL: "true" }));
    typed(
        Resource::Pods,
        metadata,
        json!({
            "spec": {"containers": [{"name": "terraform", "image": "opentofu"}]},
            "status": {"phase": phase},
        }),
    )
}

fn jobs_json(jobs: &JobsPolicy) -> Value {
    let mut out = Map::new();
    if let Some(s) = jobs.lock_timeout_seconds {
        out.insert("lockTimeoutSeconds".into(), json!(s));
    }
    if let Some(s) = jobs.active_deadline_seconds {
        out.insert("activeDeadlineSeconds".into(), json!(s));
    }
    Value::Object(out)
}

/// A Terraform* object of the cluster, with its own `spec.jobs` and, for a
/// TerraformCluster, the `spec.defaults.jobs` its members inherit.
pub fn terraform_object(
    resource: ServedResource,
    name: &str,
    jobs: Option<JobsPolicy>,
    defaults: Option<JobsPolicy>,
) -> Value {
    let metadata = meta(name, json!({ CLUSTER_NAME_LABEL: CLUSTER }));
    let mut spec = json!({});
    if let Some(j) = &jobs {
        spec["jobs"] = jobs_json(j);
    }
    if let Some(d) = &defaults {
        spec["defaults"] = json!({ "jobs": jobs_json(d) });
    }
    typed(resource, metadata, json!({ "spec": spec }))
}

/// `object` with CAPTF's `StateReadable` condition as its reconcile writes
/// it (changed `since_seconds` ago), and `status.activeJob` when a Job runs.
pub fn with_captf_status(
    mut object: Value,
    condition: (&str, &str, &str),
    since_seconds: i64,
    active_job: bool,
) -> Value {
    let (status, reason, message) = condition;
    object["status"] = json!({
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
             "lastTransitionTime": now_rfc3339(3600, SecondsFormat::Secs)},
            {"type": "StateReadable", "status": status, "reason": reason, "message": message,
             "lastTransitionTime": now_rfc3339(since_seconds, SecondsFormat::Secs)},
        ],
    });
    if active_job {
        object["status"]["activeJob"] = json!({
            "name": "job", "operation": "apply", "attempt": 1,
            "startTime": now_rfc3339(since_seconds, SecondsFormat::Secs),
        });
    }
    object
}

/// CAPTF's StateLocked message for a lock held by `who` (its
/// `foreignLock()` wording; see contract 2.11).
pub fn state_locked_message(lock_id: &str, who: &str, operation: &str) -> String {
    format!(
        "The state lock {lock_id} is held by {who} ({operation}); every Job waits lockTimeoutSeconds for it and fails. Release it with force-unlock once that holder is gone; see the stale-lock runbook"
    )
}

/// The lock ID `lease` writes for an object's held lock.
pub fn lease_lock_id(kind: Kind, name: &str) -> String {
    format!("lock-{}", state_suffix(NS, kind, name))
}

/// A TerraformPlan for (`kind`, `target`) in `phase`, as CAPTF creates it.
pub fn terraform_plan(name: &str, kind: Kind, target: &str, phase: &str) -> Value {
    let metadata = meta(
        name,
        json!({ CLUSTER_NAME_LABEL: CLUSTER, "captf.io/plan-phase": phase, "captf.io/destructive": "true" }),
    );
    typed(
        Resource::TerraformPlans,
        metadata,
        json!({
            "spec": {
                "targetRef": {"kind": kind.as_str(), "name": target},
                "planHash": "sha256:5d1c", "inputsHash": "sha256:77aa", "reason": "Destructive",
                "summary": {"replace": 1, "resources": ["aws_instance.node (replace)"]},
            },
            "status": {"phase": phase},
        }),
    )
}

/// A CAPI Cluster (v1beta2) whose infrastructure is the TerraformCluster
/// of the same name.
pub fn capi_cluster(name: &str) -> Value {
    typed(
        Resource::Clusters,
        meta(name, json!({})),
        json!({
            "spec": {"infrastructureRef": {
                "apiGroup": API_GROUP,
                "kind": Kind::TerraformCluster.as_str(),
                "name": name,
            }},
        }),
    )
}

/// CAPTF's ForceUnlocked Event about an object, seen `count` times.
pub fn force_unlock_event(event_name: &str, kind: Kind, name: &str, count: u64) -> Value {
    let now = now_rfc3339(0, SecondsFormat::Micros);
    // As CAPTF's recorder writes it: related is the Job that force-unlocks.
    let job = job_name(kind.short(), name, Op::Apply, 2, "f0e1d2");
    let mut rest = json!({
        "reason": FORCE_UNLOCKED_REASON,
        "reportingController": CAPTF_CONTROLLER,
        "reportingInstance": format!("{CAPTF_CONTROLLER}-0"),
        "action": "Run",
        "type": "Warning",
        "note": format!("Job {job} force-unlocks a stale state lock whose holder pod no longer exists"),
        "eventTime": now,
        "related": {"apiVersion": "batch/v1", "kind": "Job", "namespace": NS, "name": job},
        "regarding": {
            "apiVersion": format!("{API_GROUP}/{API_VERSION}"),
            "kind": kind.as_str(),
            "namespace": NS,
            "name": name,
        },
    });
    if count > 1 {
        rest["series"] = json!({"count": count, "lastObservedTime": now});
    }
    typed(Resource::Events, meta(event_name, json!({})), rest)
}
