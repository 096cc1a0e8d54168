//! `locks` and `explain` against the scripted API server (every request
//! recorded: GET only) and against the demo's simulated cluster.

mod support;

use captf_lock_exporter::oncall::{self, render::Output};
use serde_json::json;
use support::*;

/// The repository of the pinned images these tests serve: the fix may run them.
const TRUSTED: &str = "ghcr.io/ex/mod";
const NSP: &str = "/apis/coordination.k8s.io/v1/namespaces/ns1/leases";
const NPODS: &str = "/api/v1/namespaces/ns1/pods";
const NMACHINES: &str =
    "/apis/infrastructure.cluster.x-k8s.io/v1alpha1/namespaces/ns1/terraformmachines";
const STALE_POD: &str = "captf-m-stale-apply-a2-abc123-x7k2p";
const LIVE_POD: &str = "captf-m-live-apply-a1-abc123-x7k2p";

/// `explain target -n namespace` with the trusted image repository: the exit
/// code, what it printed and what it printed as errors.
async fn explain(client: &kube::Client, target: &str, namespace: &str) -> (i32, String, String) {
    let (mut out, mut err) = (String::new(), String::new());
    let code = oncall::explain(client, target, namespace, TRUSTED, &mut out, &mut err).await;
    (code, out, err)
}

fn scripted() -> FakeApi {
    FakeApi::new(|path, _watch, _n| {
        let leases = vec![
            lease("web", Some("alice@laptop"), 1),
            lease("stale", Some(&format!("@{STALE_POD}")), 2),
            lease("live", Some(&format!("root@{LIVE_POD}")), 3),
            lease("free", None, 4),
        ];
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": LIVE_POD, "namespace": NS,
            "labels": {"captf.io/managed": "true"}}, "status": {"phase": "Running"}});
        match path {
            NSP | LEASES => Reply::Json(200, list(leases, 9)),
            NPODS | PODS => Reply::Json(200, list(vec![pod], 9)),
            NMACHINES | MACHINES => Reply::Json(
                200,
                list(
                    ["web", "stale", "live", "free"]
                        .iter()
                        .map(|n| machine(n, 1))
                        .collect(),
                    9,
                ),
            ),
            p if p == format!("{NPODS}/{STALE_POD}") => Reply::Json(404, status(404, "NotFound")),
            p if p == format!("{NMACHINES}/web") => {
                let mut m = machine("web", 1);
                m["status"] = json!({"source": {"image": "ghcr.io/ex/mod:v1", "imageDigest": "ghcr.io/ex/mod@sha256:feed"}});
                Reply::Json(200, m)
            }
            "/api/v1/namespaces/ns1/secrets/captf-applied-m-web" => {
                Reply::Json(403, status(403, "Forbidden"))
            }
            _ => not_served(),
        }
    })
}

#[tokio::test]
async fn locks_classifies_orders_and_fails_on_overdue_with_get_only() {
    let api = scripted();
    let client = api.client();
    let (mut out, mut err) = (String::new(), String::new());
    let code = oncall::locks(&client, Some(NS), Output::Table, true, &mut out, &mut err).await;
    assert_eq!(code, oncall::EXIT_ATTENTION, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("NAMESPACE"), "{out}");
    assert!(
        lines[1].contains(" web ") && lines[1].contains("foreign") && lines[1].contains("yes"),
        "{out}"
    );
    assert!(
        lines[2].contains(" stale ") && lines[2].contains("own_stale"),
        "{out}"
    );
    assert!(
        lines[3].contains(" live ") && lines[3].contains("own_live"),
        "{out}"
    );
    assert_eq!(lines.len(), 4, "the released lock is not listed:\n{out}");
    // JSON for scripts; without the option the exit code is 0.
    let (mut out, mut err) = (String::new(), String::new());
    let code = oncall::locks(&client, Some(NS), Output::Json, false, &mut out, &mut err).await;
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v[0]["class"], "foreign");
    assert_eq!(v[0]["lock_id"], "id-web");
    assert_eq!(v[1]["pod"]["state"], "not found (live read): gone");
    api.assert_only_get();
    let log = api.log.lock().unwrap().clone();
    assert!(
        log.iter()
            .any(|(_, p)| p.starts_with(&format!("{NPODS}/{STALE_POD}"))),
        "the stale verdict was confirmed by a live read"
    );
    assert!(
        !log.iter().any(|(_, p)| p.contains("laptop")),
        "a workstation host is never read as a pod"
    );
}

#[tokio::test]
async fn explain_foreign_prints_the_filled_in_force_unlock() {
    let api = scripted();
    let client = api.client();
    let (code, out, err) = explain(&client, "TerraformMachines/web", NS).await;
    assert_eq!(code, 0, "{err}");
    let suffix = suffix("TerraformMachine", "m", "web");
    let lease = format!("lock-tfstate-default-{suffix}");
    for want in [
        "TerraformMachine ns1/web: foreign lock, OVERDUE".to_string(),
        format!("kubectl get lease -n ns1 {lease} -o yaml"),
        "the host laptop is not a CAPTF runner pod (a\n     workstation or another machine, user alice)".into(),
        "Own runner pod: no: the host is not the name of a Job pod".into(),
        "lockTimeoutSeconds:    300 (from built-in (no spec sets it))".into(),
        "cannot read Secret captf-applied-m-web: 403 forbidden".into(),
        "IMAGE=ghcr.io/ex/mod@sha256:feed".into(),
        r#"LABELS='{"captf.infrastructure.cluster.x-k8s.io/owner-kind"="TerraformMachine","captf.infrastructure.cluster.x-k8s.io/owner-name"="web"}'"#.into(),
        format!("-backend-config=secret_suffix={suffix} -backend-config=namespace=ns1"),
        "\"$IMAGE\" force-unlock -force -- id-web".into(),
        format!("kubectl get lease -n ns1 {lease} -o jsonpath='{{.spec.holderIdentity}}'"),
    ] {
        assert!(out.contains(&want), "missing {want:?} in\n{out}");
    }
    api.assert_only_get();
}

#[tokio::test]
async fn explain_own_stale_and_live_and_missing() {
    let api = scripted();
    let client = api.client();
    let (code, out, _) = explain(&client, "terraformmachine/stale", NS).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("own_stale lock") && out.contains(&format!("yes: {STALE_POD} is a Job pod")),
        "{out}"
    );
    assert!(
        out.contains("CAPTF force-unlocks lock ID id-stale")
            && out.contains("kubectl annotate -n ns1 terraformmachine stale"),
        "{out}"
    );
    let (code, out, _) = explain(&client, "terraformmachine/live", NS).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("own_live lock") && out.contains("Do not unlock"),
        "{out}"
    );
    let (code, out, _) = explain(&client, "terraformmachine/free", NS).await;
    assert_eq!(code, 0);
    assert!(out.contains("not held"), "{out}");
    let (code, _, _) = explain(&client, "terraformmachine/nope", NS).await;
    assert_eq!(code, oncall::EXIT_ATTENTION);
    api.assert_only_get();
}

#[tokio::test]
async fn commands_against_the_demo() {
    let (client, _sim) = captf_lock_exporter::demo::start();
    let (mut out, mut err) = (String::new(), String::new());
    let code = oncall::locks(&client, None, Output::Wide, false, &mut out, &mut err).await;
    assert_eq!(code, 0, "{err}");
    for (name, class) in [
        ("prod-md-1", "foreign"),
        ("prod-pool", "unknown"),
        ("prod-md-3", "own_unverified"),
        ("prod-cp-0", "own_live"),
    ] {
        assert!(
            out.lines()
                .any(|l| l.contains(&format!(" {name} ")) && l.contains(class)),
            "{name} {class}:\n{out}"
        );
    }
    let (code, out, err) = explain(&client, "terraformmachine/prod-md-1", "demo").await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("lockTimeoutSeconds:    30 (from its TerraformCluster's spec.defaults.jobs)"),
        "{out}"
    );
    assert!(
        out.contains("activeDeadlineSeconds: 1800 (from its TerraformCluster's own spec.jobs)"),
        "{out}"
    );
    assert!(out.contains("force-unlock -force"), "{out}");
}

/// A Lease of machine `name` as something other than the backend may leave
/// it: `lock_info` verbatim (None: no annotation) and its own holderIdentity.
fn odd_lease(name: &str, holder_identity: &str, lock_info: Option<&str>) -> serde_json::Value {
    let mut l = lease(name, None, 5);
    l["spec"] = json!({ "holderIdentity": holder_identity });
    if let Some(info) = lock_info {
        l["metadata"]["annotations"] = json!({ "app.terraform.io/lock-info": info });
    }
    l
}

const BROKEN_INFO: &str = r#"{"ID":"id-broken","Operation":"OperationTypeApply","Who":"alice@laptop","Created":"yesterday"}"#;

fn scripted_odd_locks() -> FakeApi {
    FakeApi::new(|path, _watch, _n| {
        let leases = vec![
            // lock-info present but malformed (Created is no RFC 3339 time).
            odd_lease("broken", "hid-broken", Some(BROKEN_INFO)),
            // lock-info parses, but its ID is not the holderIdentity.
            odd_lease(
                "moved",
                "hid-moved",
                Some(
                    r#"{"ID":"id-moved","Operation":"OperationTypeApply","Info":"","Who":"alice@laptop","Version":"1.9.0","Created":"2026-09-26T15:53:38Z","Path":""}"#,
                ),
            ),
        ];
        match path {
            NSP | LEASES => Reply::Json(200, list(leases, 9)),
            NPODS | PODS => Reply::Json(200, list(vec![], 9)),
            NMACHINES | MACHINES => Reply::Json(
                200,
                list(vec![machine("broken", 1), machine("moved", 1)], 9),
            ),
            _ => not_served(),
        }
    })
}

/// Terraform's and OpenTofu's kubernetes backend `Unlock` parses lock-info
/// before it compares IDs, so no `force-unlock` releases a lock whose
/// lock-info does not parse: explain must print the request that does what
/// `Unlock` does, guarded by holderIdentity, and no force-unlock.
#[tokio::test]
async fn explain_unknown_with_malformed_lock_info_prints_the_guarded_release() {
    let api = scripted_odd_locks();
    let client = api.client();
    let (code, out, err) = explain(&client, "tfm/broken", NS).await;
    assert_eq!(code, 0, "{err}");
    let lease = format!(
        "lock-tfstate-default-{}",
        suffix("TerraformMachine", "m", "broken")
    );
    let release = format!(
        r#"kubectl patch lease -n ns1 {lease} --type=json -p '[{{"op":"test","path":"/spec/holderIdentity","value":"hid-broken"}},{{"op":"remove","path":"/spec/holderIdentity"}},{{"op":"remove","path":"/metadata/annotations/app.terraform.io~1lock-info"}}]'"#
    );
    for want in [
        "TerraformMachine ns1/broken: unknown lock".to_string(),
        "force-unlock fails with any ID".into(),
        release,
        format!("kubectl get lease -n ns1 {lease} -o jsonpath='{{.spec.holderIdentity}}'"),
    ] {
        assert!(out.contains(&want), "missing {want:?} in\n{out}");
    }
    assert!(
        !out.contains("force-unlock -force"),
        "a force-unlock that cannot work is not offered:\n{out}"
    );
    api.assert_only_get();
}

/// `Unlock` compares the given ID with spec.holderIdentity: when lock-info's
/// ID (the alert's lock_id) differs, the force-unlock must take
/// holderIdentity, and explain says what the mismatch means.
#[tokio::test]
async fn explain_force_unlocks_with_holder_identity_when_lock_info_id_differs() {
    let api = scripted_odd_locks();
    let client = api.client();
    let (code, out, err) = explain(&client, "terraformmachine/moved", NS).await;
    assert_eq!(code, 0, "{err}");
    for want in [
        "Lock ID:       id-moved",
        "holderIdentity: hid-moved (not lock-info's ID; force-unlock takes this one)",
        "lock-info's ID (id-moved) is not spec.holderIdentity (hid-moved)",
        "does not match existing lock",
        "\"$TF\" force-unlock -force -- hid-moved",
        "TF=tofu",
        "-backend-config=config_path=\"$HOME/.kube/config\"",
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
    assert!(
        !out.contains("force-unlock -force id-moved"),
        "lock-info's ID does not unlock:\n{out}"
    );
    api.assert_only_get();
}
