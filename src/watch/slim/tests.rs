//! Decoding API objects into the slim types: metadata, CAPI infrastructure
//! references of both versions, CAPTF's status and TerraformPlans keep only
//! the fields the exporter reads, and a value of the wrong type past the
//! metadata reads as unset instead of failing the whole object.

use super::*;
use serde_json::json;

#[test]
fn metadata_keeps_only_what_is_read() {
    let lease: LeaseObject = serde_json::from_value(json!({
        "metadata": {
            "name": "lock-tfstate-default-x-m", "namespace": "ns", "resourceVersion": "7",
            "labels": {"tfstate": "true"},
            "annotations": {"app.terraform.io/lock-info": "{}", "kubectl.kubernetes.io/last-applied-configuration": "huge"},
            "managedFields": [{"manager": "terraform", "fieldsV1": {"f:spec": {}}}],
            "uid": "u", "generation": 3,
        },
        "spec": {"holderIdentity": "id-1", "leaseDurationSeconds": 15},
    }))
    .expect("decodes");
    let m = &lease.metadata;
    assert_eq!(m.name.as_deref(), Some("lock-tfstate-default-x-m"));
    assert_eq!(m.resource_version.as_deref(), Some("7"));
    assert!(m.managed_fields.is_none() && m.uid.is_none());
    let ann = m.annotations.as_ref().expect("annotations");
    assert_eq!(ann.len(), 1, "{ann:?}");
    assert_eq!(
        ann.get(LOCK_INFO_ANNOTATION).map(String::as_str),
        Some("{}")
    );
    assert_eq!(
        lease.spec.map(|s| s.holder_identity).as_deref(),
        Some("id-1")
    );
}

#[test]
fn capi_infrastructure_refs_of_both_versions() {
    let v2: CapiClusterObject = serde_json::from_value(json!({
        "metadata": {"name": "prod"},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TerraformCluster", "name": "tc"}},
    }))
    .expect("decodes");
    let r = v2.spec.and_then(|s| s.infrastructure_ref).expect("ref");
    assert_eq!(
        r.api_group.as_deref(),
        Some("infrastructure.cluster.x-k8s.io")
    );
    assert_eq!(
        (r.kind.as_str(), r.name.as_str()),
        ("TerraformCluster", "tc")
    );
    let v1: CapiClusterObject = serde_json::from_value(json!({
        "metadata": {"name": "prod"},
        "spec": {"infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformCluster", "name": "tc"}},
    }))
    .expect("decodes");
    let r = v1.spec.and_then(|s| s.infrastructure_ref).expect("ref");
    assert_eq!(r.api_group, None);
    assert_eq!(r.api_version, "infrastructure.cluster.x-k8s.io/v1alpha1");
}

#[test]
fn status_keeps_only_state_readable_and_whether_a_job_runs() {
    let obj: TerraformObject = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "message": "x".repeat(10_000)},
                "not a condition",
                {"type": "StateReadable", "status": "False", "reason": "StateLocked",
                 "message": "The state lock a is held by b@c", "lastTransitionTime": "2026-11-30T10:00:00Z"},
                {"type": 7},
            ],
            "activeJob": {"name": "j", "operation": "apply", "attempt": 1},
            "lastRun": {"steps": [1, 2, 3]},
        },
    }))
    .expect("decodes");
    let st = obj.status.expect("status");
    let c = st.state_readable.expect("StateReadable kept");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "StateLocked")
    );
    assert_eq!(c.last_transition_time, "2026-11-30T10:00:00Z");
    assert!(st.active_job.is_some());
    for odd in [
        json!({"conditions": "x", "activeJob": null}),
        json!({"conditions": {"a": 1}, "activeJob": "yes"}),
        json!([]),
    ] {
        let obj: TerraformObject =
            serde_json::from_value(json!({"metadata": {"name": "w"}, "status": odd}))
                .expect("decodes");
        let st = obj.status.unwrap_or_default();
        assert!(
            st.state_readable.is_none() && st.active_job.is_none(),
            "{st:?}"
        );
    }
}

#[test]
fn a_plan_keeps_its_target_and_phase() {
    let p: TerraformPlanObject = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "labels": {"captf.io/plan-phase": "Pending"}},
        "spec": {"targetRef": {"kind": "TerraformCluster", "name": "prod"}, "summary": {"create": 1}},
        "status": {"phase": 5},
    }))
    .expect("decodes");
    let t = p.spec.and_then(|s| s.target_ref).expect("target");
    assert_eq!(
        (t.kind.as_str(), t.name.as_str()),
        ("TerraformCluster", "prod")
    );
    assert_eq!(p.status.map(|s| s.phase).as_deref(), Some(""));
}

#[test]
fn wrong_types_past_metadata_read_as_unset() {
    let obj: TerraformObject = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"jobs": {"lockTimeoutSeconds": "300", "activeDeadlineSeconds": 1800}, "module": {"big": [1, 2, 3]}},
    }))
    .expect("decodes");
    let jobs = obj.spec.and_then(|s| s.jobs).expect("jobs");
    assert_eq!(jobs.lock_timeout_seconds, None);
    assert_eq!(jobs.active_deadline_seconds, Some(1800));
    let odd: TerraformObject = serde_json::from_value(json!({
        "metadata": {"name": "web"}, "spec": "not an object",
    }))
    .expect("decodes");
    assert!(odd.spec.is_none());
    let ev: EventObject = serde_json::from_value(json!({
        "metadata": {"name": "e"}, "reason": 5, "series": {"count": -1}, "regarding": [],
    }))
    .expect("decodes");
    assert_eq!(ev.reason, "");
    assert_eq!(ev.series.and_then(|s| s.count), None);
    assert!(ev.regarding.is_none());
}
