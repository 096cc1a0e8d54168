//! Decoded API objects ([`super::slim`]) → index entries: what the index
//! keeps of each, and which objects it keeps at all.

use kube::ResourceExt;

use crate::core::jobname::is_job_of;
use crate::core::kind::Kind;
use crate::core::lockinfo::parse_lock_info;
use crate::core::node_lost::CondStatus;
use crate::core::podname::is_dns1123_subdomain;
use crate::core::suffix::suffix_of_lock_lease;
use crate::core::timeouts::{ClusterPolicies, InfraRef, JobsPolicy};
use crate::index::{
    CapiCluster, CaptfStatus, ForceUnlockEvent, LockLease, NodeEntry, ObjectKey, PlanEntry,
    PodNode, PodState, StateReadable, TfObject,
};

/// A trimmed watch object: its key, and what the index keeps of it (None
/// when it does not pass the filters, which the index treats as a delete).
pub type Trimmed<K, T> = (K, Option<T>);

/// Label every backend-created lock Lease carries.
pub const TFSTATE_LABEL: &str = "tfstate";
/// Label of CAPTF's run and cluster Leases, which are not state locks.
pub const CAPTF_LEASE_LABEL: &str = "captf.io/lease";
/// Label of CAPTF-managed objects (runner Jobs and pods).
pub const MANAGED_LABEL: &str = "captf.io/managed";
pub use super::lock_id::{cut_lock_id_parts, keep_lock_id, lock_id_cut, MAX_LOCK_ID_BYTES};
use super::slim::JobsDoc;
pub use super::slim::{
    CapiClusterObject, EventObject, EventRef, LeaseObject, NodeObject, PodObject, TerraformObject,
    TerraformPlanObject, LOCK_INFO_ANNOTATION,
};
/// The label CAPTF mirrors a TerraformPlan's phase to; it survives
/// clusterctl move, which drops status.
pub const PLAN_PHASE_LABEL: &str = "captf.io/plan-phase";
/// Owner kind label on Leases, Jobs and pods.
pub const OWNER_KIND_LABEL: &str = "captf.infrastructure.cluster.x-k8s.io/owner-kind";
/// Owner name label (the name, or its hash when over 63 bytes).
pub const OWNER_NAME_LABEL: &str = "captf.infrastructure.cluster.x-k8s.io/owner-name";
/// CAPI's cluster-name label.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// Longest name an object can have (a DNS-1123 subdomain), and so the
/// most of a reference to one (a plan's target, a Cluster's
/// infrastructureRef: written by whoever may write the object) that can
/// match anything.
const MAX_NAME_BYTES: usize = 253;

/// A name, kind or group read from a reference, as kept: as written up to
/// [`MAX_NAME_BYTES`], else its head and `…`, which no name, kind or
/// group holds, so a cut reference still matches nothing.
fn keep_name(s: &str) -> String {
    if s.len() <= MAX_NAME_BYTES {
        return s.to_owned();
    }
    format!("{}…", crate::index::cap(s, MAX_NAME_BYTES - 3))
}

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
            // Cut as decoded (`slim`, `proto`): a list page holds the
            // objects it decoded, not 500 whole holderIdentities.
            let holder = obj
                .spec
                .as_ref()
                .map(|s| s.holder_identity.clone())
                .unwrap_or_default();
            let info = match obj.annotations().get(LOCK_INFO_ANNOTATION) {
                Some(raw) if !raw.is_empty() => parse_lock_info(raw).map(|info| {
                    Some(crate::core::lockinfo::LockInfo {
                        id: keep_lock_id(&info.id),
                        ..info
                    })
                }),
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
    let status = obj.status.as_ref();
    let phase = status.map_or("", |s| s.phase.as_str());
    let condition = |c: Option<&String>| c.and_then(|s| CondStatus::parse(s));
    let entry = managed.then(|| PodState {
        finished: crate::core::classify::is_terminal_phase(phase),
        node: PodNode::of(obj.spec.as_ref().map_or("", |s| s.node_name.as_str())),
        deletion: obj.metadata.deletion_timestamp.as_ref().map(time_seconds),
        deletion_grace_seconds: obj.metadata.deletion_grace_period_seconds,
        ready: condition(status.and_then(|s| s.conditions.ready.as_ref())),
        disruption_target: condition(status.and_then(|s| s.conditions.disruption_target.as_ref())),
    });
    (key, entry)
}

/// A metav1 time as Unix seconds.
fn time_seconds(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> f64 {
    t.0.as_millisecond() as f64 / 1000.0
}

/// A Node: kept when its name is one a Node can have (the key is the
/// name; Nodes have no namespace).
pub fn node(obj: &NodeObject) -> Trimmed<ObjectKey, NodeEntry> {
    let key = key_of(&obj.metadata);
    let ready = obj.status.as_ref().and_then(|s| s.ready.as_ref());
    let entry = is_dns1123_subdomain(&key.name).then(|| NodeEntry {
        ready: ready.and_then(|c| CondStatus::parse(&c.status)),
        ready_reason: ready
            .map_or("", |c| {
                crate::index::cap(&c.reason, crate::index::MAX_LABEL_BYTES)
            })
            .into(),
        ready_since: ready.and_then(|c| rfc3339_seconds(&c.last_transition_time)),
        taints: obj.spec.as_ref().map(|s| s.taints).unwrap_or_default(),
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
        captf: captf_status(obj),
    };
    ((kind, key), Some(entry))
}

fn captf_status(obj: &TerraformObject) -> CaptfStatus {
    let Some(status) = &obj.status else {
        return CaptfStatus::default();
    };
    CaptfStatus {
        state_readable: status.state_readable.as_ref().map(|c| {
            let since = chrono::DateTime::parse_from_rfc3339(&c.last_transition_time)
                .ok()
                .map(|t| t.timestamp() as f64);
            StateReadable::from_fields(&c.status, &c.reason, &c.message, since)
        }),
        active_job: status.active_job.is_some(),
    }
}

/// A TerraformPlan: kept when its target is a kind a plan can be for.
/// The phase is `status.phase`, else the phase label (after clusterctl
/// move, before CAPTF writes the status again).
pub fn terraform_plan(obj: &TerraformPlanObject) -> Trimmed<ObjectKey, PlanEntry> {
    let key = key_of(&obj.metadata);
    let target = obj.spec.as_ref().and_then(|s| s.target_ref.as_ref());
    let target_kind = target
        .and_then(|t| Kind::from_kind(&t.kind))
        .filter(|k| matches!(k, Kind::TerraformCluster | Kind::TerraformMachinePool));
    let phase = obj
        .status
        .as_ref()
        .map(|s| s.phase.as_str())
        .filter(|p| !p.is_empty())
        .or_else(|| obj.labels().get(PLAN_PHASE_LABEL).map(String::as_str))
        .unwrap_or("");
    let entry = match (target_kind, target) {
        (Some(target_kind), Some(t)) if !t.name.is_empty() => Some(PlanEntry {
            target_kind,
            target_name: keep_name(&t.name),
            pending: phase == "Pending",
        }),
        _ => None,
    };
    (key, entry)
}

/// A CAPI Cluster (v1beta2 or v1beta1).
pub fn capi_cluster(obj: &CapiClusterObject) -> Trimmed<ObjectKey, CapiCluster> {
    let key = key_of(&obj.metadata);
    let r = obj
        .spec
        .as_ref()
        .and_then(|s| s.infrastructure_ref.clone())
        .unwrap_or_default();
    let (kind, name) = (keep_name(&r.kind), keep_name(&r.name));
    let infra_ref = match r.api_group {
        Some(group) => InfraRef {
            api_group: keep_name(&group),
            kind,
            name,
        },
        None => InfraRef::from_api_version(&keep_name(&r.api_version), &kind, &name),
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan(v: serde_json::Value) -> Option<PlanEntry> {
        let obj: TerraformPlanObject = serde_json::from_value(v).expect("decodes");
        terraform_plan(&obj).1
    }

    #[test]
    fn a_plan_is_pending_by_its_status_else_by_its_phase_label() {
        let p = plan(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"targetRef": {"kind": "TerraformMachinePool", "name": "pool"}},
            "status": {"phase": "Pending"},
        }))
        .expect("kept");
        assert_eq!(
            (p.target_kind, p.target_name.as_str(), p.pending),
            (Kind::TerraformMachinePool, "pool", true)
        );
        // After clusterctl move: no status yet, the label says Pending.
        let moved = plan(json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {PLAN_PHASE_LABEL: "Pending"}},
            "spec": {"targetRef": {"kind": "TerraformCluster", "name": "prod"}},
        }))
        .expect("kept");
        assert!(moved.pending);
        // The status wins over the label.
        let approved = plan(json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {PLAN_PHASE_LABEL: "Pending"}},
            "spec": {"targetRef": {"kind": "TerraformCluster", "name": "prod"}},
            "status": {"phase": "Approved"},
        }))
        .expect("kept");
        assert!(!approved.pending);
    }

    #[test]
    fn a_plan_for_a_machine_or_for_nothing_is_not_kept() {
        for target in [
            json!({"kind": "TerraformMachine", "name": "m"}),
            json!({"kind": "TerraformCluster", "name": ""}),
            json!({"kind": "Secret", "name": "s"}),
            json!("prod"),
        ] {
            let v = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"targetRef": target}, "status": {"phase": "Pending"}});
            assert_eq!(plan(v), None);
        }
    }

    /// A lock Lease as a tenant who may create Leases can write it: a
    /// holderIdentity and a lock-info ID of any size.
    fn hostile_lease(holder: &str, id: &str) -> LeaseObject {
        let info = json!({"ID": id, "Operation": "OperationTypeApply", "Who": "eve@laptop",
            "Version": "1.9.0", "Created": "2026-09-26T15:53:38Z"});
        serde_json::from_value(json!({
            "metadata": {"name": "lock-tfstate-default-48db616173c97a97-m", "namespace": "ns",
                "labels": {"tfstate": "true"},
                "annotations": {LOCK_INFO_ANNOTATION: info.to_string()}},
            "spec": {"holderIdentity": holder},
        }))
        .expect("decodes")
    }

    #[test]
    fn a_huge_holder_identity_and_lock_id_are_kept_bounded_and_still_told_apart() {
        let holder = "h".repeat(1_500_000);
        let id = "i".repeat(256 << 10);
        let obj = hostile_lease(&holder, &id);
        let kept_holder = obj.spec.as_ref().map_or(0, |s| s.holder_identity.len());
        assert!(
            kept_holder <= MAX_LOCK_ID_BYTES + 128,
            "the decoded Lease keeps {kept_holder} bytes of holderIdentity"
        );
        let lock = lease(&obj).1.expect("a lock Lease");
        let kept_id = lock.info.as_ref().map_or(0, |i| i.id.len());
        assert!(
            lock.holder_identity.len() <= MAX_LOCK_ID_BYTES + 128
                && kept_id <= MAX_LOCK_ID_BYTES + 128,
            "kept {} bytes of holderIdentity and {kept_id} of the ID",
            lock.holder_identity.len()
        );
        // What the verdicts read is what it was.
        assert!(lock.is_held());
        assert!(lock_id_cut(lock.lock_id()) && lock_id_cut(&lock.holder_identity));
        assert_eq!(lock.lock_id_label(), &id[..crate::index::MAX_LABEL_BYTES]);
        assert!(lock.lock_id().contains(&format!("{} bytes", 256 << 10)));
        // Two IDs that differ in their last byte are two locks.
        let mut other = id.clone();
        other.pop();
        other.push('j');
        let next = lease(&hostile_lease(&holder, &other))
            .1
            .expect("a lock Lease");
        assert_ne!(next.lock_id(), lock.lock_id());
        let (head, len) = cut_lock_id_parts(lock.lock_id()).expect("cut");
        assert_eq!((head, len), (&id[..MAX_LOCK_ID_BYTES], 256 << 10));
        assert_eq!(cut_lock_id_parts("id-a"), None);
        let again = lease(&hostile_lease(&holder, &id)).1.expect("a lock Lease");
        assert_eq!(again.lock_id(), lock.lock_id());
    }

    #[test]
    fn an_id_up_to_the_limit_is_kept_as_written_and_a_cut_one_passes_for_none() {
        let whole = "x".repeat(MAX_LOCK_ID_BYTES);
        assert_eq!(keep_lock_id(&whole), whole);
        assert!(!lock_id_cut(&whole));
        // A multi-byte character across the limit: the head ends before it.
        let across = format!("{}é{}", "x".repeat(MAX_LOCK_ID_BYTES - 1), "y".repeat(10));
        let kept = keep_lock_id(&across);
        assert!(kept.starts_with(&"x".repeat(MAX_LOCK_ID_BYTES - 1)) && lock_id_cut(&kept));
        // Written as an ID, the cut form is cut in turn: never equal.
        assert_ne!(keep_lock_id(&kept), kept);
    }

    #[test]
    fn a_reference_past_any_name_is_kept_short_and_matches_nothing() {
        let long = format!("{}é{}", "a".repeat(251), "b".repeat(100_000));
        let p = plan(json!({"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"targetRef": {"kind": "TerraformCluster", "name": long}}}))
        .expect("kept");
        assert!(p.target_name.len() <= MAX_NAME_BYTES && p.target_name.ends_with('…'));
        assert!(!is_dns1123_subdomain(&p.target_name));
        let obj: CapiClusterObject = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"infrastructureRef": {"apiGroup": long, "kind": long, "name": long}}}))
        .expect("decodes");
        let r = capi_cluster(&obj).1.expect("kept").infra_ref;
        for kept in [&r.api_group, &r.kind, &r.name] {
            assert!(
                kept.len() <= MAX_NAME_BYTES && kept.ends_with('…'),
                "{kept}"
            );
        }
        assert_eq!(keep_name("web"), "web");
    }

    #[test]
    fn a_status_condition_is_capped_and_its_time_parsed() {
        let obj: TerraformObject = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "status": {"conditions": [{"type": "StateReadable", "status": "False", "reason": "StateLocked",
                "message": "m".repeat(100_000), "lastTransitionTime": "2026-11-30T10:00:00Z"}]},
        }))
        .expect("decodes");
        let (_, entry) = terraform_object(Kind::TerraformMachine, &obj);
        let c = entry.and_then(|e| e.captf.state_readable).expect("kept");
        assert!(c.message_cut && c.message.len() == crate::index::MAX_CONDITION_MESSAGE_BYTES);
        assert_eq!(c.since, Some(1_796_032_800.0));
    }
}

#[cfg(test)]
mod node_tests;
