//! `locks` and `explain` against the scripted API server (every request
//! recorded: GET only) and against the demo's simulated cluster.

mod support;

use captf_lock_exporter::oncall::{self, render::Output};
use serde_json::json;
use support::*;

const NSP: &str = "/apis/coordination.k8s.io/v1/namespaces/ns1/leases";
const NPODS: &str = "/api/v1/namespaces/ns1/pods";
const NMACHINES: &str =
    "/apis/infrastructure.cluster.x-k8s.io/v1alpha1/namespaces/ns1/terraformmachines";
const STALE_POD: &str = "captf-m-stale-apply-a2-abc123-x7k2p";
const LIVE_POD: &str = "captf-m-live-apply-a1-abc123-x7k2p";

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
    let (mut out, mut err) = (String::new(), String::new());
    let code = oncall::explain(&client, "TerraformMachines/web", NS, &mut out, &mut err).await;
    assert_eq!(code, 0, "{err}");
    let suffix = suffix("TerraformMachine", "m", "web");
    let lease = format!("lock-tfstate-default-{suffix}");
    for want in [
        "TerraformMachine ns1/web: foreign lock, OVERDUE".to_string(),
        format!("kubectl get lease -n ns1 {lease} -o yaml"),
        "kubectl get pod -n ns1 laptop".into(),
        "Own runner pod: no: the host is not the name of a Job pod".into(),
        "lockTimeoutSeconds:    300 (from built-in (no spec sets it))".into(),
        "cannot read Secret captf-applied-m-web: 403 forbidden".into(),
        "IMAGE=ghcr.io/ex/mod@sha256:feed".into(),
        r#"LABELS='{"captf.infrastructure.cluster.x-k8s.io/owner-kind"="TerraformMachine","captf.infrastructure.cluster.x-k8s.io/owner-name"="web"}'"#.into(),
        format!("-backend-config=secret_suffix={suffix} -backend-config=namespace=ns1"),
        "\"$IMAGE\" force-unlock -force id-web".into(),
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
    let (mut out, mut err) = (String::new(), String::new());
    assert_eq!(
        oncall::explain(&client, "terraformmachine/stale", NS, &mut out, &mut err).await,
        0
    );
    assert!(
        out.contains("own_stale lock") && out.contains(&format!("yes: {STALE_POD} is a Job pod")),
        "{out}"
    );
    assert!(
        out.contains("CAPTF force-unlocks lock ID id-stale")
            && out.contains("kubectl annotate -n ns1 terraformmachine stale"),
        "{out}"
    );
    let (mut out, mut err) = (String::new(), String::new());
    assert_eq!(
        oncall::explain(&client, "terraformmachine/live", NS, &mut out, &mut err).await,
        0
    );
    assert!(
        out.contains("own_live lock") && out.contains("Do not unlock"),
        "{out}"
    );
    let (mut out, mut err) = (String::new(), String::new());
    assert_eq!(
        oncall::explain(&client, "terraformmachine/free", NS, &mut out, &mut err).await,
        0
    );
    assert!(out.contains("not held"), "{out}");
    let (mut out, mut err) = (String::new(), String::new());
    assert_eq!(
        oncall::explain(&client, "terraformmachine/nope", NS, &mut out, &mut err).await,
        oncall::EXIT_ATTENTION
    );
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
    let (mut out, mut err) = (String::new(), String::new());
    assert_eq!(
        oncall::explain(
            &client,
            "terraformmachine/prod-md-1",
            "demo",
            &mut out,
            &mut err
        )
        .await,
        0,
        "{err}"
    );
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
