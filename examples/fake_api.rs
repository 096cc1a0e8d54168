//! A fast fake Kubernetes API server for scale runs of the exporter
//! (issue 9; driven by `scripts/bench.sh`).
//!
//! ```text
//! cargo run --release --example fake_api -- --objects 100000 --held-fraction 0.1 --port 0
//! ```
//!
//! It builds a CAPTF fleet once, serialises every object once (with the
//! metadata a real API server returns, managedFields included, so decoding
//! costs what it costs against a cluster) and pre-assembles the list pages
//! of the exporter's page size, so a list page is a copy of shared bytes.
//! What it serves, for every resource of the exporter's resource table:
//!
//! - `GET <collection>` (all namespaces or one): a list, paginated by `limit`
//!   and `continue` (the token is the list's resourceVersion and an offset;
//!   every page carries the first page's resourceVersion);
//! - `GET <collection>?watch=true&sendInitialEvents=true`: a watch-list, every
//!   live object as ADDED, then the `k8s.io/initial-events-end` bookmark, then
//!   the changes, as kube-apiserver 1.34+ streams it;
//! - `GET <collection>?watch=true&resourceVersion=R`: the changes after `R`,
//!   then changes as they are made, a BOOKMARK every `--bookmark-seconds`,
//!   closed after `timeoutSeconds`;
//! - `GET .../namespaces/<ns>/pods/<name>`: the pod, or a 404 Status.
//!
//! Selectors are not evaluated: every object served already matches the
//! exporter's selectors (`tfstate=true,!captf.io/lease`,
//! `captf.io/managed=true`, `reason=ForceUnlocked`).
//!
//! Control endpoints (not Kubernetes):
//!
//! - `GET /_stats`: requests counted by verb and resource (and pod GETs
//!   answered 404, list starts, watches ended by timeout and by 410), as JSON;
//! - `GET /_info`: the fleet: object counts and bytes per resource, and the
//!   held locks with their holder type;
//! - `POST /_change/release?lease=<ns>/<name>`: releases a held lock;
//! - `POST /_change/lock?lease=<ns>/<name>&id=<lock ID>&who=<Who>[&created=<unix s>]`:
//!   takes a free lock (lock-info with that ID and `Who`, `holderIdentity`
//!   the ID; 409 when held);
//! - `POST /_change/pod-failed?pod=<ns>/<name>`: turns a pod Failed
//!   (`/_change/pod-phase?pod=…&phase=Running|Succeeded|Failed`: any phase);
//! - `POST /_change/pod-create?i=<object>&attempt=<n>`: a Running runner pod
//!   of object `i` (`captf-<k>-<name>-apply-a<n>-abc123-x7k2p`);
//!   `POST /_change/pod-delete?pod=<ns>/<name>` deletes a pod;
//! - `POST /_change/create?i=<object>`: object `i` of the fleet's generator
//!   (`i` at or past `--objects` gives a new TerraformMachine) and its free
//!   lock Lease; `POST /_change/delete?i=<object>` deletes both;
//!   every change is delivered on open watches (MODIFIED, ADDED, DELETED)
//!   with a new resourceVersion;
//! - `POST /_change/gone`: every open watch ends with an ERROR event 410
//!   Expired, so the client relists (a watch whose subscriber lags behind
//!   the changes ends the same way);
//! - `GET /_objects`: the live Terraform objects with their Lease and lock
//!   (holder `Who`, lock ID), and the live pods with their phase;
//! - `PUT /_static` stores a body that `GET /_static` then serves as is (the
//!   bench's static-bytes anchor).
//!
//! It prints `listening on 127.0.0.1:<port>` once the fleet is built.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use captf_lock_exporter::core::jobname::{job_name, Op};
use captf_lock_exporter::core::kind::{Kind, API_GROUP, API_VERSION};
use captf_lock_exporter::core::suffix::{lock_lease_name, owner_name_label_value, state_suffix};
use captf_lock_exporter::index::Resource;
use captf_lock_exporter::watch::Served;
use chrono::{SecondsFormat, Utc};
use clap::Parser;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::sync::{broadcast, mpsc};

/// Command line.
#[derive(Debug, Parser)]
#[command(about = "Fast fake Kubernetes API server for exporter scale runs")]
struct Args {
    /// Terraform objects (TerraformClusters and TerraformMachines), one
    /// lock Lease each.
    #[arg(long, default_value_t = 1000)]
    objects: usize,
    /// Fraction of the locks that are held.
    #[arg(long, default_value_t = 0.1)]
    held_fraction: f64,
    /// Port on 127.0.0.1 (0: any free port; the line printed says which).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Seconds between BOOKMARK events on an open watch.
    #[arg(long, default_value_t = 30)]
    bookmark_seconds: u64,
    /// List page size whose pages are assembled at start (the exporter's).
    #[arg(long, default_value_t = 500)]
    page_size: usize,
}

// ---------------------------------------------------------------------------
// The fleet
// ---------------------------------------------------------------------------

/// Who holds a held lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holder {
    /// A CAPTF runner pod that exists and is Running.
    OwnAlive,
    /// A CAPTF runner pod that no longer exists.
    OwnGone,
    /// A workstation (`user@laptop-N`).
    Workstation,
}

/// A held lock: one of the fleet's, or one taken through `/_change/lock`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Lock {
    Fleet(Holder),
    Custom {
        id: String,
        who: String,
        created: i64,
    },
}

impl Holder {
    fn as_str(self) -> &'static str {
        match self {
            Holder::OwnAlive => "own_pod_alive",
            Holder::OwnGone => "own_pod_gone",
            Holder::Workstation => "workstation",
        }
    }
}

/// The generated fleet: object `i` is a function of `i` and these sizes.
#[derive(Clone, Copy, Debug)]
struct Fleet {
    objects: usize,
    clusters: usize,
    namespaces: usize,
    held_every: usize,
    started: i64,
}

/// One Terraform object of the fleet.
struct Obj {
    kind: Kind,
    name: String,
    namespace: String,
    cluster: String,
    held: Option<Holder>,
}

impl Fleet {
    fn new(objects: usize, held_fraction: f64) -> Fleet {
        let clusters = (objects / 100).max(1);
        let held_every = if held_fraction <= 0.0 {
            usize::MAX
        } else {
            ((1.0 / held_fraction).round() as usize).max(1)
        };
        Fleet {
            objects,
            clusters,
            namespaces: clusters.min(100),
            held_every,
            started: Utc::now().timestamp(),
        }
    }

    fn cluster_name(c: usize) -> String {
        format!("wl-{c:05}")
    }

    fn namespace_of_cluster(&self, c: usize) -> String {
        format!("team-{:03}", c % self.namespaces)
    }

    /// Object `i`: the first `clusters` are TerraformClusters, the rest
    /// TerraformMachines spread over the clusters.
    fn obj(&self, i: usize) -> Obj {
        let c = if i < self.clusters {
            i
        } else {
            i % self.clusters
        };
        let cluster = Fleet::cluster_name(c);
        let (kind, name) = if i < self.clusters {
            (Kind::TerraformCluster, cluster.clone())
        } else {
            (Kind::TerraformMachine, format!("{cluster}-md-{i:06}"))
        };
        let held = (self.held_every != usize::MAX && i % self.held_every == self.held_every / 2)
            .then(|| match (i / self.held_every) % 3 {
                0 => Holder::OwnAlive,
                1 => Holder::OwnGone,
                _ => Holder::Workstation,
            });
        Obj {
            kind,
            name,
            namespace: self.namespace_of_cluster(c),
            cluster,
            held,
        }
    }

    /// Whether object `i` also has a finished (Succeeded) plan pod.
    fn has_history_pod(&self, i: usize) -> bool {
        i % 20 == 7
    }

    fn events(&self) -> usize {
        self.objects / 1000 + 3
    }
}

fn ts(unix: i64) -> String {
    chrono::DateTime::from_timestamp(unix, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn uid(seed: &str) -> String {
    let h = hex::encode(Sha256::digest(seed.as_bytes()));
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn runner_pod(o: &Obj, attempt: i32) -> String {
    format!(
        "{}-x7k2p",
        job_name(o.kind.short(), &o.name, Op::Apply, attempt, "abc123")
    )
}

fn history_pod(o: &Obj) -> String {
    format!(
        "{}-q9w8e",
        job_name(o.kind.short(), &o.name, Op::Plan, 1, "def456")
    )
}

fn who(o: &Obj, i: usize, holder: Holder) -> String {
    match holder {
        Holder::OwnAlive | Holder::OwnGone => format!("@{}", runner_pod(o, 1)),
        Holder::Workstation => format!("user{}@laptop-{}", i % 50, i % 200),
    }
}

const OWNER_KIND: &str = "captf.infrastructure.cluster.x-k8s.io/owner-kind";
const OWNER_NAME: &str = "captf.infrastructure.cluster.x-k8s.io/owner-name";

fn lease_json(f: &Fleet, i: usize, held: Option<&Lock>, rv: u64) -> (String, String, Value) {
    let o = f.obj(i);
    let suffix = state_suffix(&o.namespace, o.kind, &o.name);
    let name = lock_lease_name(&suffix);
    let created = f.started - 86_400 - (i as i64 % 86_400);
    let mut labels = json!({
        "tfstate": "true",
        OWNER_KIND: o.kind.as_str(),
        OWNER_NAME: owner_name_label_value(&o.name),
        "app.kubernetes.io/managed-by": "terraform",
    });
    let mut managed_labels = json!({
        "f:tfstate": {},
        format!("f:{OWNER_KIND}"): {},
        format!("f:{OWNER_NAME}"): {},
        "f:app.kubernetes.io/managed-by": {},
    });
    let mut meta = json!({
        "name": name,
        "namespace": o.namespace,
        "uid": uid(&name),
        "resourceVersion": rv.to_string(),
        "creationTimestamp": ts(created),
    });
    let mut spec = json!({});
    let mut fields_meta = json!({});
    if let Some(lock) = held {
        let (id, who, created, holder_identity) = match lock {
            Lock::Fleet(holder) => {
                let who = who(&o, i, *holder);
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
        };
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
        "time": ts(f.started - (i as i64 % 3600)),
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": fields_meta, "f:spec": {"f:holderIdentity": {}}},
    }]);
    let obj = json!({
        "kind": "Lease",
        "apiVersion": "coordination.k8s.io/v1",
        "metadata": meta,
        "spec": spec,
    });
    (o.namespace, name, obj)
}

fn pod_json(
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

fn condition(t: &str, at: i64) -> Value {
    json!({"type": t, "status": "True", "lastTransitionTime": ts(at), "reason": "Succeeded", "observedGeneration": 3})
}

fn jobs(i: usize) -> Value {
    json!({"lockTimeoutSeconds": 1800 + (i % 4) * 600, "activeDeadlineSeconds": 3600})
}

fn terraform_json(f: &Fleet, i: usize, rv: u64) -> (String, String, Value) {
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
            "labels": {"cluster.x-k8s.io/cluster-name": o.cluster},
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

fn capi_cluster_json(f: &Fleet, c: usize, rv: u64) -> (String, String, Value) {
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

fn event_json(f: &Fleet, e: usize, rv: u64) -> (String, String, Value) {
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

// ---------------------------------------------------------------------------
// The store
// ---------------------------------------------------------------------------

/// How to rebuild an item after a change.
#[derive(Clone, Debug)]
enum Gen {
    Lease {
        i: usize,
        held: Option<Lock>,
    },
    Pod {
        i: usize,
        history: bool,
        attempt: i32,
        phase: &'static str,
    },
    Terraform {
        i: usize,
    },
    Other,
}

impl Gen {
    /// The object this generator gives at resourceVersion `rv`.
    fn render(&self, f: &Fleet, rv: u64) -> Option<(String, String, Value)> {
        Some(match self {
            Gen::Lease { i, held } => lease_json(f, *i, held.as_ref(), rv),
            Gen::Pod {
                i,
                history,
                attempt,
                phase,
            } => pod_json(f, *i, *history, *attempt, phase, rv),
            Gen::Terraform { i } => terraform_json(f, *i, rv),
            Gen::Other => return None,
        })
    }
}

struct Item {
    ns: String,
    json: Bytes,
    generator: Gen,
    /// Deleted (a tombstone: indices, and so continue tokens, stay put).
    deleted: bool,
}

/// A change as delivered on watches.
#[derive(Clone)]
struct Change {
    rv: u64,
    ns: String,
    line: Bytes,
}

struct Table {
    resource: Resource,
    items: Vec<Item>,
    by_key: HashMap<(String, String), usize>,
    /// resourceVersion of this table's last change (the list's).
    rv: u64,
    history: Vec<Change>,
    /// Assembled all-namespace pages by (offset, limit).
    pages: HashMap<(usize, usize), Bytes>,
    tx: broadcast::Sender<Change>,
}

impl Table {
    fn new(resource: Resource, rv: u64) -> Table {
        Table {
            resource,
            items: Vec::new(),
            by_key: HashMap::new(),
            rv,
            history: Vec::new(),
            pages: HashMap::new(),
            tx: broadcast::channel(4096).0,
        }
    }

    fn push(&mut self, (ns, name, obj): (String, String, Value), generator: Gen) {
        let json = Bytes::from(serde_json::to_vec(&obj).unwrap_or_default());
        self.by_key.insert((ns.clone(), name), self.items.len());
        self.items.push(Item {
            ns,
            json,
            generator,
            deleted: false,
        });
    }

    fn api_version(&self) -> String {
        let spec = self.resource.spec();
        let version = spec.versions.first().copied().unwrap_or("v1");
        if spec.group.is_empty() {
            version.to_owned()
        } else {
            format!("{}/{version}", spec.group)
        }
    }

    /// One list page: up to `limit` live items in `ns` from raw index
    /// `offset` on, as of the list's resourceVersion `rv`. The continue token
    /// is `<rv>:<raw index>` (deleted items stay as tombstones, so an index
    /// keeps its place); every page of a list carries the first page's
    /// resourceVersion, from which the watch then replays what changed.
    fn page(&self, ns: Option<&str>, offset: usize, limit: usize, rv: u64) -> Bytes {
        let keep = |it: &Item| !it.deleted && ns.is_none_or(|n| it.ns == n);
        let want = if limit == 0 { usize::MAX } else { limit };
        let mut selected: Vec<&Item> = Vec::new();
        let mut end = offset;
        for (k, it) in self.items.iter().enumerate().skip(offset) {
            if selected.len() == want {
                break;
            }
            end = k + 1;
            if keep(it) {
                selected.push(it);
            }
        }
        let remaining = self.items.iter().skip(end).filter(|it| keep(it)).count();
        let cont = if limit != 0 && remaining > 0 {
            format!(",\"continue\":\"{rv}:{end}\",\"remainingItemCount\":{remaining}")
        } else {
            String::new()
        };
        let head = format!(
            "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{rv}\"{cont}}},\"items\":[",
            self.resource.spec().kind,
            self.api_version(),
        );
        let size = head.len() + selected.iter().map(|i| i.json.len() + 1).sum::<usize>() + 2;
        let mut out = BytesMut::with_capacity(size);
        out.extend_from_slice(head.as_bytes());
        for (k, it) in selected.iter().enumerate() {
            if k > 0 {
                out.extend_from_slice(b",");
            }
            out.extend_from_slice(&it.json);
        }
        out.extend_from_slice(b"]}");
        out.freeze()
    }

    /// Pre-assembles the all-namespace pages of the current items: valid
    /// until the next change, which drops them (later lists assemble each
    /// page when asked).
    fn assemble_pages(&mut self, limit: usize) {
        let mut offset = 0;
        loop {
            let page = self.page(None, offset, limit, self.rv);
            self.pages.insert((offset, limit), page);
            offset += limit;
            if offset >= self.items.len() {
                break;
            }
        }
    }

    fn bookmark(&self) -> Bytes {
        Bytes::from(format!(
            "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{}\"}}}}}}\n",
            self.resource.spec().kind,
            self.api_version(),
            self.rv
        ))
    }
}

struct Store {
    fleet: Fleet,
    rv: AtomicU64,
    tables: HashMap<Resource, RwLock<Table>>,
    stats: Mutex<HashMap<(String, String), u64>>,
    watches_open: AtomicU64,
    static_body: RwLock<Bytes>,
    bookmark_every: Duration,
    page_size: usize,
    held: Vec<Value>,
    /// `/_change/gone`: every open watch ends with an ERROR 410 event.
    gone: broadcast::Sender<()>,
    /// Watches ended by `/_change/gone` (or a lagging subscriber), and at
    /// their `timeoutSeconds`.
    watches_gone: AtomicU64,
    watches_timed_out: AtomicU64,
}

fn build(fleet: Fleet, page_size: usize, bookmark_every: Duration) -> Store {
    let mut rv = 1000_u64;
    let mut next = || {
        rv += 1;
        rv
    };
    let mut tables: HashMap<Resource, Table> = Resource::ALL
        .into_iter()
        .map(|r| (r, Table::new(r, 0)))
        .collect();
    let mut held = Vec::new();
    for i in 0..fleet.objects {
        let o = fleet.obj(i);
        let lock = o.held.map(Lock::Fleet);
        let lease = lease_json(&fleet, i, lock.as_ref(), next());
        let resource = match o.kind {
            Kind::TerraformCluster => Resource::TerraformClusters,
            Kind::TerraformMachine => Resource::TerraformMachines,
            Kind::TerraformMachinePool => Resource::TerraformMachinePools,
        };
        if let Some(holder) = o.held {
            held.push(json!({
                "lease": format!("{}/{}", lease.0, lease.1),
                "namespace": o.namespace,
                "kind": o.kind.as_str(),
                "name": o.name,
                "holder": holder.as_str(),
                "pod": (holder != Holder::Workstation).then(|| format!("{}/{}", o.namespace, runner_pod(&o, 1))),
            }));
        }
        if let Some(t) = tables.get_mut(&Resource::Leases) {
            t.push(lease, Gen::Lease { i, held: lock });
        }
        let tf = terraform_json(&fleet, i, next());
        if let Some(t) = tables.get_mut(&resource) {
            t.push(tf, Gen::Terraform { i });
        }
        if let Some(t) = tables.get_mut(&Resource::Pods) {
            if o.held == Some(Holder::OwnAlive) {
                t.push(
                    pod_json(&fleet, i, false, 1, "Running", next()),
                    Gen::Pod {
                        i,
                        history: false,
                        attempt: 1,
                        phase: "Running",
                    },
                );
            }
            if fleet.has_history_pod(i) {
                t.push(
                    pod_json(&fleet, i, true, 1, "Succeeded", next()),
                    Gen::Pod {
                        i,
                        history: true,
                        attempt: 1,
                        phase: "Succeeded",
                    },
                );
            }
        }
    }
    for c in 0..fleet.clusters {
        let obj = capi_cluster_json(&fleet, c, next());
        if let Some(t) = tables.get_mut(&Resource::Clusters) {
            t.push(obj, Gen::Other);
        }
    }
    for e in 0..fleet.events() {
        let obj = event_json(&fleet, e, next());
        if let Some(t) = tables.get_mut(&Resource::Events) {
            t.push(obj, Gen::Other);
        }
    }
    let last = next();
    let tables = tables
        .into_iter()
        .map(|(r, mut t)| {
            t.rv = last;
            t.assemble_pages(page_size);
            (r, RwLock::new(t))
        })
        .collect();
    Store {
        fleet,
        rv: AtomicU64::new(last),
        tables,
        stats: Mutex::new(HashMap::new()),
        watches_open: AtomicU64::new(0),
        static_body: RwLock::new(Bytes::new()),
        bookmark_every,
        page_size,
        held,
        gone: broadcast::channel(16).0,
        watches_gone: AtomicU64::new(0),
        watches_timed_out: AtomicU64::new(0),
    }
}

// ---------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------

type Body = BoxBody<Bytes, Infallible>;

/// A streamed body fed by a channel (a watch).
struct ChannelBody(mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

fn json_reply(status: StatusCode, v: &Value) -> Response<Body> {
    full(
        status,
        "application/json",
        serde_json::to_vec(v).unwrap_or_default(),
    )
}

fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
    let v = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code});
    json_reply(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &v,
    )
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut k = 0;
    while k < b.len() {
        match b[k] {
            b'%' if k + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[k + 1..k + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(v) => {
                        out.push(v);
                        k += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        k += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query(q: Option<&str>) -> HashMap<String, String> {
    q.unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

/// A Kubernetes path: resource, namespace, object name.
fn route(path: &str) -> Option<(Resource, Option<String>, Option<String>)> {
    let rest = if let Some(r) = path.strip_prefix("/api/") {
        ("", r)
    } else {
        let r = path.strip_prefix("/apis/")?;
        let (group, r) = r.split_once('/')?;
        (group, r)
    };
    let (group, rest) = rest;
    let (version, rest) = rest.split_once('/')?;
    let segs: Vec<&str> = rest.split('/').collect();
    let (ns, plural, name) = match segs.as_slice() {
        [plural] => (None, *plural, None),
        ["namespaces", ns, plural] => (Some(*ns), *plural, None),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name)),
        _ => return None,
    };
    let resource = Resource::ALL.into_iter().find(|r| {
        let s = r.spec();
        s.group == group && s.plural == plural && s.versions.first() == Some(&version)
    })?;
    Some((resource, ns.map(str::to_owned), name.map(str::to_owned)))
}

impl Store {
    fn count(&self, verb: &str, what: &str) {
        if let Ok(mut s) = self.stats.lock() {
            *s.entry((verb.to_owned(), what.to_owned())).or_default() += 1;
        }
    }

    fn stats(&self) -> Value {
        let mut by_verb: serde_json::Map<String, Value> = serde_json::Map::new();
        let mut total = 0;
        let mut list_starts = serde_json::Map::new();
        let mut not_found = serde_json::Map::new();
        if let Ok(s) = self.stats.lock() {
            for ((verb, what), n) in s.iter() {
                match verb.as_str() {
                    "list_start" => {
                        list_starts.insert(what.clone(), json!(n));
                        continue;
                    }
                    "get_not_found" => {
                        not_found.insert(what.clone(), json!(n));
                        continue;
                    }
                    _ => {}
                }
                total += n;
                let e = by_verb.entry(verb.clone()).or_insert_with(|| json!({}));
                e[what] = json!(n);
            }
        }
        json!({
            "requests": by_verb,
            "total": total,
            "list_starts": list_starts,
            "get_not_found": not_found,
            "watches_open": self.watches_open.load(Ordering::Relaxed),
            "watches_ended_gone": self.watches_gone.load(Ordering::Relaxed),
            "watches_ended_timeout": self.watches_timed_out.load(Ordering::Relaxed),
            "resource_version": self.rv.load(Ordering::Relaxed),
        })
    }

    fn info(&self) -> Value {
        let mut counts = serde_json::Map::new();
        let mut bytes = serde_json::Map::new();
        for (r, t) in &self.tables {
            if let Ok(t) = t.read() {
                counts.insert(r.as_str().into(), json!(t.items.len()));
                bytes.insert(
                    r.as_str().into(),
                    json!(t.items.iter().map(|i| i.json.len()).sum::<usize>()),
                );
            }
        }
        json!({
            "objects": self.fleet.objects,
            "clusters": self.fleet.clusters,
            "namespaces": self.fleet.namespaces,
            "page_size": self.page_size,
            "items": counts,
            "bytes": bytes,
            "held": self.held,
        })
    }

    fn list(
        &self,
        resource: Resource,
        ns: Option<&str>,
        q: &HashMap<String, String>,
    ) -> Response<Body> {
        let limit: usize = q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
        // The continue token: `<list resourceVersion>:<raw index>`.
        let token = q
            .get("continue")
            .filter(|c| !c.is_empty())
            .and_then(|c| c.split_once(':'))
            .and_then(|(rv, off)| Some((rv.parse::<u64>().ok()?, off.parse::<usize>().ok()?)));
        let Some(table) = self.tables.get(&resource) else {
            return status(404, "NotFound", "not served");
        };
        let Ok(t) = table.read() else {
            return status(500, "InternalError", "poisoned");
        };
        let (rv, offset) = token.unwrap_or((t.rv, 0));
        let body = match (ns, t.pages.get(&(offset, limit))) {
            (None, Some(page)) if rv == t.rv => page.clone(),
            _ => t.page(ns, offset, limit, rv),
        };
        full(StatusCode::OK, "application/json", body)
    }

    fn get(&self, resource: Resource, ns: &str, name: &str) -> Response<Body> {
        let Some(Ok(t)) = self.tables.get(&resource).map(|t| t.read()) else {
            return status(500, "InternalError", "no table");
        };
        match t.by_key.get(&(ns.to_owned(), name.to_owned())) {
            Some(&k) => full(StatusCode::OK, "application/json", t.items[k].json.clone()),
            None => {
                self.count("get_not_found", resource.as_str());
                status(
                    404,
                    "NotFound",
                    &format!("{} \"{name}\" not found", resource.as_str()),
                )
            }
        }
    }

    fn watch(
        self: &Arc<Self>,
        resource: Resource,
        ns: Option<String>,
        q: &HashMap<String, String>,
    ) -> Response<Body> {
        let streaming = q.get("sendInitialEvents").map(String::as_str) == Some("true");
        let mut from: u64 = q
            .get("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let timeout = Duration::from_secs(
            q.get("timeoutSeconds")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1800),
        );
        let bookmarks = q.get("allowWatchBookmarks").map(String::as_str) == Some("true");
        let Some(Ok(t)) = self.tables.get(&resource).map(|t| t.read()) else {
            return status(500, "InternalError", "no table");
        };
        let mut sub = t.tx.subscribe();
        let mut gone = self.gone.subscribe();
        // A watch-list, as kube-apiserver streams it: every live object as
        // ADDED (the serialised bytes, shared), then the bookmark ending
        // the initial events, then the watch from the table's version.
        let initial: Vec<Bytes> = if streaming {
            from = t.rv;
            t.items
                .iter()
                .filter(|it| !it.deleted && ns.as_ref().is_none_or(|n| it.ns == *n))
                .map(|it| it.json.clone())
                .collect()
        } else {
            Vec::new()
        };
        let end_bookmark = streaming.then(|| {
            Bytes::from(format!(
                "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{}\",\"annotations\":{{\"k8s.io/initial-events-end\":\"true\"}}}}}}}}\n",
                resource.spec().kind,
                t.api_version(),
                t.rv
            ))
        });
        let expired = Bytes::from(format!(
            "{}\n",
            json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": format!("too old resource version: {from} ({})", t.rv),
                "reason": "Expired", "code": 410}})
        ));
        let matches = move |c: &Change, ns: &Option<String>| ns.as_ref().is_none_or(|n| *n == c.ns);
        let backlog: Vec<Change> = t
            .history
            .iter()
            .filter(|c| c.rv > from && matches(c, &ns))
            .cloned()
            .collect();
        drop(t);
        let (tx, rx) = mpsc::channel::<Bytes>(256);
        let store = self.clone();
        store.watches_open.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            let mut last = from;
            let mut tick = tokio::time::interval_at(
                tokio::time::Instant::now() + store.bookmark_every,
                store.bookmark_every,
            );
            let mut open = true;
            for json in initial {
                let mut line = BytesMut::with_capacity(json.len() + 32);
                line.extend_from_slice(b"{\"type\":\"ADDED\",\"object\":");
                line.extend_from_slice(&json);
                line.extend_from_slice(b"}\n");
                if tx.send(line.freeze()).await.is_err() {
                    open = false;
                    break;
                }
            }
            if let Some(b) = end_bookmark.filter(|_| open) {
                open = tx.send(b).await.is_ok();
            }
            for c in backlog {
                last = last.max(c.rv);
                if tx.send(c.line).await.is_err() {
                    open = false;
                    break;
                }
            }
            while open {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => {
                        store.watches_timed_out.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    _ = tx.closed() => break,
                    _ = gone.recv() => {
                        store.watches_gone.fetch_add(1, Ordering::Relaxed);
                        let _ = tx.send(expired).await;
                        break;
                    }
                    _ = tick.tick(), if bookmarks => {
                        let line = store.tables.get(&resource).and_then(|t| t.read().ok().map(|t| t.bookmark()));
                        if let Some(line) = line {
                            open = tx.send(line).await.is_ok();
                        }
                    }
                    got = sub.recv() => match got {
                        Ok(c) if c.rv > last && matches(&c, &ns) => {
                            last = c.rv;
                            open = tx.send(c.line).await.is_ok();
                        }
                        Ok(_) => {}
                        // Changes were lost to this watch: end it as an
                        // API server would, so the client relists.
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            store.watches_gone.fetch_add(1, Ordering::Relaxed);
                            let _ = tx.send(expired).await;
                            break;
                        }
                        Err(broadcast::error::RecvError::Closed) => break,
                    },
                }
            }
            store.watches_open.fetch_sub(1, Ordering::Relaxed);
        });
        let mut r = Response::new(ChannelBody(rx).boxed());
        if let Ok(v) = "application/json".parse() {
            r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        r
    }

    /// Rebuilds item `key` of `resource` with `edit` applied to its
    /// generator, and delivers it as MODIFIED.
    fn change(
        &self,
        resource: Resource,
        key: &str,
        edit: impl FnOnce(Gen) -> Option<Gen>,
    ) -> Response<Body> {
        let Some((ns, name)) = key.split_once('/') else {
            return status(400, "BadRequest", "expected <namespace>/<name>");
        };
        let Some(Ok(mut t)) = self.tables.get(&resource).map(|t| t.write()) else {
            return status(500, "InternalError", "no table");
        };
        let Some(&k) = t.by_key.get(&(ns.to_owned(), name.to_owned())) else {
            return status(404, "NotFound", &format!("{key} not found"));
        };
        let Some(generator) = edit(t.items[k].generator.clone()) else {
            return status(409, "Conflict", &format!("{key} cannot change that way"));
        };
        let rv = self.rv.fetch_add(1, Ordering::SeqCst) + 1;
        let Some((_, _, obj)) = generator.render(&self.fleet, rv) else {
            return status(409, "Conflict", "not changeable");
        };
        let json = Bytes::from(serde_json::to_vec(&obj).unwrap_or_default());
        t.items[k].json = json.clone();
        t.items[k].generator = generator;
        Store::deliver(&mut t, "MODIFIED", rv, ns, &json);
        json_reply(StatusCode::OK, &json!({"resourceVersion": rv.to_string()}))
    }

    /// Adds the object `generator` gives to `resource`, delivered as ADDED.
    fn add(&self, resource: Resource, generator: Gen) -> Response<Body> {
        let Some(Ok(mut t)) = self.tables.get(&resource).map(|t| t.write()) else {
            return status(500, "InternalError", "no table");
        };
        let rv = self.rv.fetch_add(1, Ordering::SeqCst) + 1;
        let Some((ns, name, obj)) = generator.render(&self.fleet, rv) else {
            return status(409, "Conflict", "not creatable");
        };
        let key = (ns.clone(), name.clone());
        if t.by_key.contains_key(&key) {
            return status(409, "AlreadyExists", &format!("{ns}/{name} already exists"));
        }
        let json = Bytes::from(serde_json::to_vec(&obj).unwrap_or_default());
        t.push((ns.clone(), name.clone(), obj), generator);
        Store::deliver(&mut t, "ADDED", rv, &ns, &json);
        json_reply(
            StatusCode::OK,
            &json!({"resourceVersion": rv.to_string(), "key": format!("{ns}/{name}")}),
        )
    }

    /// Deletes item `key` of `resource` (it stays as a tombstone), delivered
    /// as DELETED with the object at the deletion's resourceVersion.
    fn delete(&self, resource: Resource, key: &str) -> Response<Body> {
        let Some((ns, name)) = key.split_once('/') else {
            return status(400, "BadRequest", "expected <namespace>/<name>");
        };
        let Some(Ok(mut t)) = self.tables.get(&resource).map(|t| t.write()) else {
            return status(500, "InternalError", "no table");
        };
        let Some(k) = t.by_key.remove(&(ns.to_owned(), name.to_owned())) else {
            return status(404, "NotFound", &format!("{key} not found"));
        };
        let rv = self.rv.fetch_add(1, Ordering::SeqCst) + 1;
        let json = match t.items[k].generator.render(&self.fleet, rv) {
            Some((_, _, obj)) => Bytes::from(serde_json::to_vec(&obj).unwrap_or_default()),
            None => t.items[k].json.clone(),
        };
        t.items[k].deleted = true;
        t.items[k].json = Bytes::new();
        Store::deliver(&mut t, "DELETED", rv, ns, &json);
        json_reply(StatusCode::OK, &json!({"resourceVersion": rv.to_string()}))
    }

    /// Records a change at `rv` in the table's history and sends it to the
    /// open watches. The pre-assembled pages are dropped (later lists
    /// assemble each page when asked).
    fn deliver(t: &mut Table, kind: &str, rv: u64, ns: &str, json: &[u8]) {
        let mut line = BytesMut::with_capacity(json.len() + 32);
        line.extend_from_slice(format!("{{\"type\":\"{kind}\",\"object\":").as_bytes());
        line.extend_from_slice(json);
        line.extend_from_slice(b"}\n");
        let change = Change {
            rv,
            ns: ns.to_owned(),
            line: line.freeze(),
        };
        t.rv = rv;
        t.history.push(change.clone());
        t.pages.clear();
        let _ = t.tx.send(change);
    }

    /// The live Terraform objects with their lock Lease and lock state, and
    /// the live pods (`GET /_objects`, for the soak driver).
    fn objects(&self) -> Value {
        let f = &self.fleet;
        let mut objects = Vec::new();
        let mut pods = Vec::new();
        if let Some(Ok(t)) = self.tables.get(&Resource::Leases).map(|t| t.read()) {
            for it in t.items.iter().filter(|it| !it.deleted) {
                let Gen::Lease { i, held } = &it.generator else {
                    continue;
                };
                let o = f.obj(*i);
                let lease = lock_lease_name(&state_suffix(&o.namespace, o.kind, &o.name));
                let (who, id) = match held {
                    None => (None, None),
                    Some(Lock::Fleet(h)) => {
                        let w = who(&o, *i, *h);
                        (Some(w.clone()), Some(uid(&format!("{lease}/{w}"))))
                    }
                    Some(Lock::Custom { id, who, .. }) => (Some(who.clone()), Some(id.clone())),
                };
                objects.push(json!({
                    "i": i, "namespace": o.namespace, "kind": o.kind.as_str(), "name": o.name,
                    "lease": format!("{}/{lease}", o.namespace), "held": held.is_some(),
                    "who": who, "lock_id": id,
                }));
            }
        }
        if let Some(Ok(t)) = self.tables.get(&Resource::Pods).map(|t| t.read()) {
            for it in t.items.iter().filter(|it| !it.deleted) {
                if let Gen::Pod {
                    i,
                    history,
                    attempt,
                    phase,
                } = &it.generator
                {
                    let o = f.obj(*i);
                    let name = if *history {
                        history_pod(&o)
                    } else {
                        runner_pod(&o, *attempt)
                    };
                    pods.push(json!({"i": i, "pod": format!("{}/{name}", o.namespace),
                        "history": history, "attempt": attempt, "phase": phase}));
                }
            }
        }
        json!({"objects": objects, "pods": pods})
    }

    /// The Terraform resource of object `i` (created objects are machines).
    fn terraform_resource(&self, i: usize) -> Resource {
        match self.fleet.obj(i).kind {
            Kind::TerraformCluster => Resource::TerraformClusters,
            Kind::TerraformMachine => Resource::TerraformMachines,
            Kind::TerraformMachinePool => Resource::TerraformMachinePools,
        }
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        let path = req.uri().path().to_owned();
        let q = query(req.uri().query());
        let method = req.method().clone();
        match (method, path.as_str()) {
            (Method::GET, "/_stats") => return json_reply(StatusCode::OK, &self.stats()),
            (Method::GET, "/_info") => return json_reply(StatusCode::OK, &self.info()),
            (Method::GET, "/_static") => {
                let body = self
                    .static_body
                    .read()
                    .map(|b| b.clone())
                    .unwrap_or_default();
                return full(StatusCode::OK, "text/plain; version=0.0.4", body);
            }
            (Method::PUT, "/_static") => {
                let body = match req.into_body().collect().await {
                    Ok(b) => b.to_bytes(),
                    Err(e) => return status(400, "BadRequest", &e.to_string()),
                };
                let n = body.len();
                if let Ok(mut s) = self.static_body.write() {
                    *s = body;
                }
                return json_reply(StatusCode::OK, &json!({"bytes": n}));
            }
            (Method::GET, "/_objects") => return json_reply(StatusCode::OK, &self.objects()),
            (Method::POST, "/_change/release") => {
                let key = q.get("lease").cloned().unwrap_or_default();
                return self.change(Resource::Leases, &key, |g| match g {
                    Gen::Lease { i, held: Some(_) } => Some(Gen::Lease { i, held: None }),
                    _ => None,
                });
            }
            (Method::POST, "/_change/lock") => {
                let key = q.get("lease").cloned().unwrap_or_default();
                let (Some(id), Some(who)) = (q.get("id"), q.get("who")) else {
                    return status(400, "BadRequest", "lock needs id and who");
                };
                let created = q
                    .get("created")
                    .and_then(|c| c.parse().ok())
                    .unwrap_or_else(|| Utc::now().timestamp());
                let lock = Lock::Custom {
                    id: id.clone(),
                    who: who.clone(),
                    created,
                };
                return self.change(Resource::Leases, &key, |g| match g {
                    Gen::Lease { i, held: None } => Some(Gen::Lease {
                        i,
                        held: Some(lock),
                    }),
                    _ => None,
                });
            }
            (Method::POST, "/_change/pod-failed" | "/_change/pod-phase") => {
                let key = q.get("pod").cloned().unwrap_or_default();
                let new_phase = match q.get("phase").map(String::as_str) {
                    None | Some("Failed") => "Failed",
                    Some("Succeeded") => "Succeeded",
                    Some("Running") => "Running",
                    Some(p) => return status(400, "BadRequest", &format!("phase {p}?")),
                };
                return self.change(Resource::Pods, &key, |g| match g {
                    Gen::Pod {
                        i,
                        history,
                        attempt,
                        ..
                    } => Some(Gen::Pod {
                        i,
                        history,
                        attempt,
                        phase: new_phase,
                    }),
                    _ => None,
                });
            }
            (Method::POST, "/_change/pod-create") => {
                let (Some(i), Some(attempt)) = (
                    q.get("i").and_then(|v| v.parse().ok()),
                    q.get("attempt").and_then(|v| v.parse().ok()),
                ) else {
                    return status(400, "BadRequest", "pod-create needs i and attempt");
                };
                return self.add(
                    Resource::Pods,
                    Gen::Pod {
                        i,
                        history: false,
                        attempt,
                        phase: "Running",
                    },
                );
            }
            (Method::POST, "/_change/pod-delete") => {
                let key = q.get("pod").cloned().unwrap_or_default();
                return self.delete(Resource::Pods, &key);
            }
            (Method::POST, "/_change/create") => {
                let Some(i) = q.get("i").and_then(|v| v.parse().ok()) else {
                    return status(400, "BadRequest", "create needs i");
                };
                let r = self.add(self.terraform_resource(i), Gen::Terraform { i });
                if r.status() != StatusCode::OK {
                    return r;
                }
                let r = self.add(Resource::Leases, Gen::Lease { i, held: None });
                if r.status() != StatusCode::OK {
                    return r;
                }
                let o = self.fleet.obj(i);
                let lease = lock_lease_name(&state_suffix(&o.namespace, o.kind, &o.name));
                return json_reply(
                    StatusCode::OK,
                    &json!({"i": i, "namespace": o.namespace, "kind": o.kind.as_str(), "name": o.name,
                        "lease": format!("{}/{lease}", o.namespace)}),
                );
            }
            (Method::POST, "/_change/delete") => {
                let Some(i) = q.get("i").and_then(|v| v.parse::<usize>().ok()) else {
                    return status(400, "BadRequest", "delete needs i");
                };
                let o = self.fleet.obj(i);
                let lease = lock_lease_name(&state_suffix(&o.namespace, o.kind, &o.name));
                let r = self.delete(Resource::Leases, &format!("{}/{lease}", o.namespace));
                if r.status() != StatusCode::OK {
                    return r;
                }
                return self.delete(
                    self.terraform_resource(i),
                    &format!("{}/{}", o.namespace, o.name),
                );
            }
            (Method::POST, "/_change/gone") => {
                let n = self.gone.send(()).unwrap_or(0);
                return json_reply(StatusCode::OK, &json!({"watches": n}));
            }
            (Method::GET, _) => {}
            (m, _) => {
                self.count("other", m.as_str());
                return status(405, "MethodNotAllowed", "read-only fake");
            }
        }
        let Some((resource, ns, name)) = route(&path) else {
            self.count("other", "unknown-path");
            return status(
                404,
                "NotFound",
                &format!("the server could not find {path}"),
            );
        };
        let what = resource.as_str();
        match (name, q.get("watch").map(String::as_str)) {
            (Some(name), _) => {
                self.count("get", what);
                self.get(resource, ns.as_deref().unwrap_or_default(), &name)
            }
            (None, Some("true" | "1")) => {
                self.count("watch", what);
                self.watch(resource, ns, &q)
            }
            (None, _) => {
                self.count("list", what);
                if q.get("continue").is_none_or(|c| c.is_empty()) {
                    self.count("list_start", what);
                }
                self.list(resource, ns.as_deref(), &q)
            }
        }
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let t = Instant::now();
    let fleet = Fleet::new(args.objects, args.held_fraction);
    let store = Arc::new(build(
        fleet,
        args.page_size.max(1),
        Duration::from_secs(args.bookmark_seconds.max(1)),
    ));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    let addr = listener.local_addr()?;
    eprintln!(
        "fake API: {} objects built and serialised in {:.2} s",
        args.objects,
        t.elapsed().as_secs_f64()
    );
    println!("listening on {addr}");
    use std::io::Write;
    std::io::stdout().flush()?;
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let store = store.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let store = store.clone();
                async move { Ok::<_, Infallible>(store.handle(req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
