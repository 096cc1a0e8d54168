//! The JSON of each object the fleet serves, as an API server returns it.

use captf_lock_exporter::core::kind::{Kind, API_GROUP, API_VERSION};
use captf_lock_exporter::core::suffix::{lock_lease_name, owner_name_label_value, state_suffix};
use chrono::SecondsFormat;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::*;

/// The lock-info of a held lock: (ID, Who, Created, the Lease's
/// holderIdentity).
type LockInfo = (
    String,
    String,
    Option<chrono::DateTime<chrono::Utc>>,
    String,
);

/// The lock-info of object `i`'s lock held as `lock` (its Lease `name`).
fn lock_info(f: &Fleet, i: usize, name: &str, lock: &Lock) -> LockInfo {
    match lock {
        Lock::Fleet(holder) => {
            let who = who(&f.obj(i), i, *holder);
            let age = 60 + (i as i64 * 37) % 7200;
            (
                uid(&format!("{name}/{who}")),
                who,
                chrono::DateTime::from_timestamp(f.started - age, 315_668_626),
                uid(&format!("lock/{name}")),
            )
        }
        Lock::Custom { id, who, created } => (
            id.clone(),
            who.clone(),
            chrono::DateTime::from_timestamp(*created, 0),
            id.clone(),
        ),
    }
}

/// The lock ID of object `i`'s lock held as `lock`.
pub(crate) fn lock_id_of(f: &Fleet, i: usize, lock: &Lock) -> String {
    let o = f.obj(i);
    let name = lock_lease_name(&state_suffix(&o.namespace, o.kind, &o.name));
    lock_info(f, i, &name, lock).0
}

pub(crate) fn lease_json(
    f: &Fleet,
    i: usize,
    held: Option<&Lock>,
    rv: u64,
) -> (String, String, Value) {
    let o = f.obj(i);
    let suffix = state_suffix(&o.namespace, o.kind, &o.name);
    let name = lock_lease_name(&suffix);
    let info = held.map(|lock| lock_info(f, i, &name, lock));
    let lease = LeaseParts {
        namespace: &o.namespace,
        name: &name,
        kind: o.kind.as_str(),
        owner_name: Some(owner_name_label_value(&o.name)),
        created: f.started - 86_400 - (i as i64 % 86_400),
        updated: f.started - (i as i64 % 3600),
    };
    (
        o.namespace.clone(),
        name.clone(),
        lease_object(&lease, info, rv),
    )
}

/// A lock Lease not made from the fleet's generator (`/_change/lease-add`):
/// any name in any namespace, as a tenant may create it.
pub(crate) fn named_lease_json(
    f: &Fleet,
    namespace: &str,
    name: &str,
    held: Option<&Lock>,
    rv: u64,
) -> (String, String, Value) {
    let info = held.map(|lock| match lock {
        Lock::Custom { id, who, created } => (
            id.clone(),
            who.clone(),
            chrono::DateTime::from_timestamp(*created, 0),
            id.clone(),
        ),
        // Fleet holders are tied to a fleet object; a named Lease has none.
        Lock::Fleet(_) => (
            uid(&format!("{namespace}/{name}")),
            "tenant@laptop-0".to_owned(),
            chrono::DateTime::from_timestamp(f.started - 600, 0),
            uid(&format!("lock/{namespace}/{name}")),
        ),
    });
    let lease = LeaseParts {
        namespace,
        name,
        kind: "TerraformMachine",
        owner_name: None,
        created: f.started - 3600,
        updated: f.started - 60,
    };
    (
        namespace.to_owned(),
        name.to_owned(),
        lease_object(&lease, info, rv),
    )
}

/// What a lock Lease's JSON is made of besides its lock.
struct LeaseParts<'a> {
    namespace: &'a str,
    name: &'a str,
    kind: &'a str,
    owner_name: Option<String>,
    created: i64,
    updated: i64,
}

fn lease_object(l: &LeaseParts<'_>, info: Option<LockInfo>, rv: u64) -> Value {
    let name = l.name;
    let mut labels = json!({
        "tfstate": "true",
        OWNER_KIND: l.kind,
        "app.kubernetes.io/managed-by": "terraform",
    });
    let mut managed_labels = json!({
        "f:tfstate": {},
        format!("f:{OWNER_KIND}"): {},
        "f:app.kubernetes.io/managed-by": {},
    });
    if let Some(owner) = &l.owner_name {
        labels[OWNER_NAME] = json!(owner);
        managed_labels[format!("f:{OWNER_NAME}")] = json!({});
    }
    let mut meta = json!({
        "name": name,
        "namespace": l.namespace,
        "uid": uid(name),
        "resourceVersion": rv.to_string(),
        "creationTimestamp": ts(l.created),
    });
    let mut spec = json!({});
    let mut fields_meta = json!({});
    if let Some((id, who, created, holder_identity)) = info {
        let info = json!({
            "ID": id,
            "Operation": "OperationTypeApply",
            "Info": "",
            "Who": who,
            "Version": "1.9.0",
            "Created": created
                .unwrap_or_default()
                .to_rfc3339_opts(SecondsFormat::Nanos, true),
            "Path": "",
        })
        .to_string();
        meta["annotations"] = json!({ "app.terraform.io/lock-info": info });
        fields_meta["f:annotations"] = json!({".": {}, "f:app.terraform.io/lock-info": {}});
        spec["holderIdentity"] = json!(holder_identity);
    }
    fields_meta["f:labels"] = json!({".": {}});
    if let (Value::Object(dst), Value::Object(src)) =
        (&mut fields_meta["f:labels"], managed_labels.take())
    {
        dst.extend(src);
    }
    labels["app.kubernetes.io/part-of"] = json!("captf");
    meta["labels"] = labels;
    meta["managedFields"] = json!([{
        "manager": "terraform",
        "operation": "Update",
        "apiVersion": "coordination.k8s.io/v1",
        "time": ts(l.updated),
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": fields_meta, "f:spec": {"f:holderIdentity": {}}},
    }]);
    json!({
        "kind": "Lease",
        "apiVersion": "coordination.k8s.io/v1",
        "metadata": meta,
        "spec": spec,
    })
}

pub(crate) fn pod_json(
    f: &Fleet,
    i: usize,
    history: bool,
    attempt: i32,
    phase: &str,
    rv: u64,
) -> (String, String, Value) {
    let o = f.obj(i);
    let name = if history {
        history_pod(&o)
    } else {
        runner_pod(&o, attempt)
    };
    let job = name.rsplit_once('-').map_or(name.as_str(), |(j, _)| j);
    let job_uid = uid(&format!("job/{job}"));
    let started = f.started - 600 - (i as i64 % 3000);
    let cond = |t: &str, s: &str| json!({"type": t, "status": s, "lastProbeTime": null, "lastTransitionTime": ts(started + 5)});
    let ready = if phase == "Running" { "True" } else { "False" };
    let state = match phase {
        "Running" => json!({"running": {"startedAt": ts(started + 4)}}),
        _ => {
            json!({"terminated": {"exitCode": i32::from(phase != "Succeeded"), "reason": if phase == "Succeeded" { "Completed" } else { "Error" }, "startedAt": ts(started + 4), "finishedAt": ts(started + 90), "containerID": format!("containerd://{}", hex::encode(Sha256::digest(name.as_bytes())))}})
        }
    };
    let obj = json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "generateName": format!("{job}-"),
            "namespace": o.namespace,
            "uid": uid(&name),
            "resourceVersion": rv.to_string(),
            "creationTimestamp": ts(started),
            "labels": {
                "batch.kubernetes.io/controller-uid": job_uid,
                "batch.kubernetes.io/job-name": job,
                "controller-uid": job_uid,
                "job-name": job,
                "captf.io/managed": "true",
                OWNER_KIND: o.kind.as_str(),
                OWNER_NAME: owner_name_label_value(&o.name),
                "cluster.x-k8s.io/cluster-name": o.cluster,
            },
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": job_uid,
                "controller": true, "blockOwnerDeletion": true,
            }],
            "finalizers": ["batch.kubernetes.io/job-tracking"],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": ts(started), "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:finalizers": {".": {}, "v:\"batch.kubernetes.io/job-tracking\"": {}}, "f:generateName": {}, "f:labels": {".": {}, "f:batch.kubernetes.io/controller-uid": {}, "f:batch.kubernetes.io/job-name": {}, "f:captf.io/managed": {}, "f:controller-uid": {}, "f:job-name": {}}, "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{job_uid}\"}}"): {}}},
                              "f:spec": {"f:containers": {"k:{\"name\":\"terraform\"}": {".": {}, "f:args": {}, "f:command": {}, "f:env": {".": {}, "k:{\"name\":\"TF_IN_AUTOMATION\"}": {".": {}, "f:name": {}, "f:value": {}}}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {}, "f:resources": {}, "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}, "f:volumeMounts": {}}}, "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {}, "f:serviceAccountName": {}, "f:terminationGracePeriodSeconds": {}, "f:volumes": {}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": ts(started + 5), "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"ContainersReady\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}, "k:{\"type\":\"Initialized\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}, "k:{\"type\":\"Ready\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}}, "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {".": {}, "k:{\"ip\":\"10.244.3.17\"}": {".": {}, "f:ip": {}}}, "f:startTime": {}}}},
            ],
        },
        "spec": {
            "volumes": [
                {"name": "workspace", "emptyDir": {}},
                {"name": "backend-config", "secret": {"secretName": format!("{}-backend", o.name), "defaultMode": 420}},
                {"name": "kube-api-access-x2v9q", "projected": {"sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}, {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}], "defaultMode": 420}},
            ],
            "containers": [{
                "name": "terraform",
                "image": "ghcr.io/opentofu/opentofu:1.9.0",
                "command": ["/bin/sh", "-c"],
                "args": ["tofu init -input=false && tofu apply -input=false -auto-approve"],
                "env": [
                    {"name": "TF_IN_AUTOMATION", "value": "1"},
                    {"name": "KUBE_NAMESPACE", "value": o.namespace},
                    {"name": "TF_VAR_cluster_name", "value": o.cluster},
                ],
                "resources": {"limits": {"memory": "512Mi"}, "requests": {"cpu": "100m", "memory": "256Mi"}},
                "volumeMounts": [
                    {"name": "workspace", "mountPath": "/workspace"},
                    {"name": "backend-config", "readOnly": true, "mountPath": "/etc/captf/backend"},
                    {"name": "kube-api-access-x2v9q", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
                ],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "activeDeadlineSeconds": 3600,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "captf-runner",
            "serviceAccount": "captf-runner",
            "nodeName": format!("worker-{}", i % 40),
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
            "priority": 0,
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": phase,
            "conditions": [cond("Initialized", "True"), cond("Ready", ready), cond("ContainersReady", ready), cond("PodScheduled", "True")],
            "hostIP": "172.18.0.4",
            "hostIPs": [{"ip": "172.18.0.4"}],
            "podIP": "10.244.3.17",
            "podIPs": [{"ip": "10.244.3.17"}],
            "startTime": ts(started),
            "containerStatuses": [{
                "name": "terraform", "state": state, "lastState": {}, "ready": phase == "Running",
                "restartCount": 0, "image": "ghcr.io/opentofu/opentofu:1.9.0",
                "imageID": "ghcr.io/opentofu/opentofu@sha256:5d1c4a2f0e1f2c0b4c3e9b1a7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e",
                "containerID": format!("containerd://{}", hex::encode(Sha256::digest(name.as_bytes()))),
                "started": phase == "Running",
            }],
            "qosClass": "Burstable",
        },
    });
    (o.namespace, name, obj)
}

pub(crate) fn condition(t: &str, at: i64) -> Value {
    json!({"type": t, "status": "True", "lastTransitionTime": ts(at), "reason": "Succeeded", "observedGeneration": 3})
}

pub(crate) fn jobs(i: usize) -> Value {
    json!({"lockTimeoutSeconds": 1800 + (i % 4) * 600, "activeDeadlineSeconds": 3600})
}

pub(crate) fn terraform_json(
    f: &Fleet,
    i: usize,
    edit: &TfEdit,
    rv: u64,
) -> (String, String, Value) {
    let o = f.obj(i);
    let at = f.started - 86_400 - (i as i64 % 86_400);
    let mut spec = json!({
        "module": {"source": "git::https://git.example.com/infra/modules.git//machine?ref=v2.14.1"},
        "variables": {"flavor": "m5.large", "zone": format!("zone-{}", i % 3), "image": "ubuntu-24.04-k8s-1.33"},
        "backend": {"type": "kubernetes", "secretRef": {"name": format!("{}-backend", o.name)}},
    });
    let mut status = json!({
        "ready": true,
        "observedGeneration": 3,
        "conditions": [condition("Ready", at + 300), condition("StateLocked", at + 10), condition("Applied", at + 290)],
        "lastAppliedRevision": "v2.14.1",
        "outputs": {"address": format!("10.{}.{}.{}", i % 250, (i / 250) % 250, i % 200)},
    });
    edit.apply_status(&o, &mut status);
    if o.kind == Kind::TerraformCluster {
        if i % 3 == 0 {
            spec["jobs"] = jobs(i);
        }
        if i % 2 == 0 {
            spec["defaults"] = json!({"jobs": jobs(i + 1)});
        }
        status["controlPlaneEndpoint"] =
            json!({"host": format!("{}.k8s.example.com", o.name), "port": 6443});
    } else {
        spec["providerID"] = json!(format!("terraform://{}/{}", o.namespace, o.name));
        if i % 50 == 3 {
            spec["jobs"] = jobs(i);
        }
    }
    let plural = o.kind.plural();
    let obj = json!({
        "apiVersion": format!("{API_GROUP}/{API_VERSION}"),
        "kind": o.kind.as_str(),
        "metadata": {
            "name": o.name,
            "namespace": o.namespace,
            "uid": uid(&format!("{plural}/{}/{}", o.namespace, o.name)),
            "resourceVersion": rv.to_string(),
            "generation": 3,
            "creationTimestamp": ts(at),
            "labels": {"cluster.x-k8s.io/cluster-name": edit.cluster_label.as_ref().unwrap_or(&o.cluster)},
            "annotations": {"captf.io/last-applied-hash": hex::encode(&Sha256::digest(o.name.as_bytes())[..16])},
            "finalizers": ["captf.infrastructure.cluster.x-k8s.io/finalizer"],
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": if o.kind == Kind::TerraformCluster { "Cluster" } else { "Machine" }, "name": o.name, "uid": uid(&format!("owner/{}", o.name)), "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": format!("{API_GROUP}/{API_VERSION}"), "time": ts(at), "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:cluster.x-k8s.io/cluster-name": {}}}, "f:spec": {".": {}, "f:backend": {".": {}, "f:secretRef": {}, "f:type": {}}, "f:module": {".": {}, "f:source": {}}, "f:variables": {".": {}, "f:flavor": {}, "f:image": {}, "f:zone": {}}}}},
                {"manager": "captf-manager", "operation": "Update", "apiVersion": format!("{API_GROUP}/{API_VERSION}"), "time": ts(at + 300), "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:captf.io/last-applied-hash": {}}, "f:finalizers": {".": {}, "v:\"captf.infrastructure.cluster.x-k8s.io/finalizer\"": {}}, "f:ownerReferences": {}}}},
                {"manager": "captf-manager", "operation": "Update", "apiVersion": format!("{API_GROUP}/{API_VERSION}"), "time": ts(at + 300), "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {".": {}, "f:conditions": {}, "f:lastAppliedRevision": {}, "f:observedGeneration": {}, "f:outputs": {}, "f:ready": {}}}},
            ],
        },
        "spec": spec,
        "status": status,
    });
    (o.namespace, o.name, obj)
}

pub(crate) fn capi_cluster_json(f: &Fleet, c: usize, rv: u64) -> (String, String, Value) {
    let name = Fleet::cluster_name(c);
    let ns = f.namespace_of_cluster(c);
    let at = f.started - 172_800;
    let obj = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {
            "name": name, "namespace": ns, "uid": uid(&format!("capi/{ns}/{name}")),
            "resourceVersion": rv.to_string(), "generation": 2, "creationTimestamp": ts(at),
            "labels": {"cluster.x-k8s.io/cluster-name": name},
            "finalizers": ["cluster.cluster.x-k8s.io"],
            "managedFields": [
                {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "cluster.x-k8s.io/v1beta2", "time": ts(at), "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {".": {}, "f:clusterNetwork": {".": {}, "f:pods": {".": {}, "f:cidrBlocks": {}}}, "f:controlPlaneRef": {}, "f:infrastructureRef": {}}}},
                {"manager": "manager", "operation": "Update", "apiVersion": "cluster.x-k8s.io/v1beta2", "time": ts(at + 600), "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {".": {}, "f:conditions": {}, "f:initialization": {}, "f:phase": {}}}},
            ],
        },
        "spec": {
            "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}, "services": {"cidrBlocks": ["10.128.0.0/12"]}},
            "controlPlaneEndpoint": {"host": format!("{name}.k8s.example.com"), "port": 6443},
            "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": format!("{name}-cp")},
            "infrastructureRef": {"apiGroup": API_GROUP, "kind": "TerraformCluster", "name": name},
        },
        "status": {
            "phase": "Provisioned",
            "initialization": {"infrastructureProvisioned": true, "controlPlaneInitialized": true},
            "conditions": [condition("Available", at + 600), condition("InfrastructureReady", at + 300), condition("ControlPlaneInitialized", at + 500)],
        },
    });
    (ns, name, obj)
}

pub(crate) fn event_json(f: &Fleet, e: usize, rv: u64) -> (String, String, Value) {
    let i = (e * 7919) % f.objects.max(1);
    let o = f.obj(i);
    let name = format!("{}.{:016x}", o.name, 0x17f0_0000_0000_u64 + e as u64);
    let at = chrono::DateTime::from_timestamp(f.started - 3600 + e as i64, 123_456_000)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Micros, true);
    let mut obj = json!({
        "kind": "Event",
        "apiVersion": "events.k8s.io/v1",
        "metadata": {
            "name": name, "namespace": o.namespace, "uid": uid(&name),
            "resourceVersion": rv.to_string(), "creationTimestamp": ts(f.started - 3600),
            "managedFields": [{"manager": "captf-manager", "operation": "Update", "apiVersion": "events.k8s.io/v1", "time": ts(f.started - 3600), "fieldsType": "FieldsV1",
                "fieldsV1": {"f:action": {}, "f:eventTime": {}, "f:note": {}, "f:reason": {}, "f:regarding": {}, "f:reportingController": {}, "f:reportingInstance": {}, "f:type": {}}}],
        },
        "eventTime": at,
        "reportingController": "captf-manager",
        "reportingInstance": "captf-manager-7c9f8d6b5-xk2lp",
        "action": "ForceUnlock",
        "reason": "ForceUnlocked",
        "regarding": {"kind": o.kind.as_str(), "namespace": o.namespace, "name": o.name, "uid": uid(&format!("{}/{}", o.kind.plural(), o.name)), "apiVersion": format!("{API_GROUP}/{API_VERSION}")},
        "note": "state lock force-unlocked: its holder is gone",
        "type": "Normal",
        "deprecatedSource": {},
        "deprecatedFirstTimestamp": null,
        "deprecatedLastTimestamp": null,
    });
    if e % 2 == 1 {
        obj["series"] = json!({"count": 2 + e % 3, "lastObservedTime": at});
    }
    (o.namespace, name, obj)
}
