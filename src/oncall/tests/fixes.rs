//! The fix text of each class: every value filled in, the image check.

use std::time::SystemTime;

use super::*;
#[test]
fn foreign_fix_fills_every_value() {
    let now = SystemTime::now();
    let r = LockReport::build(
        &facts(HolderClass::Foreign, Some("alice@laptop"), 400, None, now),
        now,
    );
    let labels = captf_backend_labels(Kind::TerraformMachine, "web", Some("prod"));
    let inputs = FixInputs {
        image: Lookup::Found {
            value: "ghcr.io/ex/mod@sha256:abc".into(),
            from: "x".into(),
        },
        labels: Lookup::Found {
            value: hcl_map(&labels),
            from: "y".into(),
        },
        trusted_repository: "ghcr.io/ex/mod".into(),
    };
    let mut out = String::new();
    fix_text(&r, Some(&inputs), &mut out);
    for want in [
        "IMAGE=ghcr.io/ex/mod@sha256:abc",
        r#"LABELS='{"captf.infrastructure.cluster.x-k8s.io/owner-kind"="TerraformMachine","captf.infrastructure.cluster.x-k8s.io/owner-name"="web","captf.io/managed"="true","cluster.x-k8s.io/cluster-name"="prod","clusterctl.cluster.x-k8s.io/move"=""}'"#,
        "-backend-config=secret_suffix=1cc4ffb6d396d1c4-m -backend-config=namespace=team-a",
        "\"$IMAGE\" force-unlock -force -- 3442fe8d-2b45",
        "\"kubernetes\": {}",
        &format!("kubectl get lease -n team-a {LEASE} -o jsonpath='{{.spec.holderIdentity}}'"),
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
    // An unreadable image is named; nothing reads it at run time unchecked.
    let inputs = FixInputs {
        image: Lookup::Unreadable {
            why: "403".into(),
            read_with: "kubectl get secret x".into(),
        },
        labels: Lookup::Found {
            value: "{}".into(),
            from: "y".into(),
        },
        trusted_repository: "ghcr.io/ex/mod".into(),
    };
    let mut out = String::new();
    fix_text(&r, Some(&inputs), &mut out);
    assert!(
        out.contains("could not be read, so no command here runs it (403)")
            && !out.contains("IMAGE="),
        "{out}"
    );
}

#[test]
fn labels_images_and_kinds() {
    let mut l = std::collections::BTreeMap::new();
    for (k, v) in [
        ("tfstate", "true"),
        ("tfstateSecretSuffix", "s"),
        ("tfstateWorkspace", "default"),
        ("app.kubernetes.io/managed-by", "terraform"),
        (
            "captf.infrastructure.cluster.x-k8s.io/owner-kind",
            "TerraformMachine",
        ),
        ("captf.io/managed", "true"),
    ] {
        l.insert(k.to_string(), v.to_string());
    }
    assert_eq!(
        hcl_map(&backend_labels(&l).expect("labels")),
        r#"{"captf.infrastructure.cluster.x-k8s.io/owner-kind"="TerraformMachine","captf.io/managed"="true"}"#
    );
    assert_eq!(
        pinned_image(None, "r.io/m@sha256:1").as_deref(),
        Some("r.io/m@sha256:1")
    );
    assert_eq!(
        pinned_image(Some("r.io:5000/m:v1"), "sha256:1").as_deref(),
        Some("r.io:5000/m@sha256:1")
    );
    assert_eq!(pinned_image(Some("r.io/m"), "").as_deref(), None);
    for s in [
        "terraformmachine",
        "TerraformMachine",
        "terraformmachines",
        "TERRAFORMMACHINES",
        "terraformmachines.infrastructure.cluster.x-k8s.io",
    ] {
        assert_eq!(parse_kind(s), Some(Kind::TerraformMachine), "{s}");
    }
    assert_eq!(
        parse_kind("terraformmachinepool"),
        Some(Kind::TerraformMachinePool)
    );
    // The short names of CAPTF's newest CRDs.
    assert_eq!(parse_kind("tfm"), Some(Kind::TerraformMachine));
    assert_eq!(parse_kind("TFC"), Some(Kind::TerraformCluster));
    assert_eq!(parse_kind("tfmp"), Some(Kind::TerraformMachinePool));
    assert_eq!(parse_kind("tfplan"), None, "a plan has no lock");
    assert_eq!(
        parse_kind("m"),
        None,
        "the Job-name short kind is not a CRD name"
    );
    assert!(parse_target("terraformcluster/prod").is_ok());
    assert!(parse_target("machine/x").is_err());
}

#[test]
fn hostile_values_are_quoted_in_commands() {
    let now = SystemTime::now();
    let r = LockReport::build(
        &facts(
            HolderClass::Foreign,
            Some("x@$(touch /tmp/p)"),
            10,
            None,
            now,
        ),
        now,
    );
    assert_eq!(
        r.commands.pod, None,
        "not a runner pod name: no pod command"
    );
    // A hostile value in a pod-named host is quoted too (and an invalid pod
    // name gets no command at all).
    let r = LockReport::build(
        &facts(
            HolderClass::OwnUnverified,
            Some("@captf-m-web-apply-a1-abc$(x)-x7k2p"),
            10,
            None,
            now,
        ),
        now,
    );
    assert_eq!(r.commands.pod, None);
    let mut out = String::new();
    fix_text(&r, None, &mut out);
    assert!(out.contains("no name a pod can be read by"), "{out}");
}

#[test]
fn the_manual_force_unlock_names_opentofu_and_terraform() {
    let now = SystemTime::now();
    let r = LockReport::build(
        &facts(HolderClass::Foreign, Some("alice@laptop"), 10, None, now),
        now,
    );
    let mut out = String::new();
    fix_text(&r, None, &mut out);
    assert!(out.contains("TF=tofu\n"), "{out}");
    assert!(out.contains("\"$TF\" init -input=false"), "{out}");
    assert!(
        out.contains("&& \"$TF\" force-unlock -force -- 3442fe8d-2b45)"),
        "{out}"
    );
    assert!(out.contains("(Version 1.9.0 is an OpenTofu or a"), "{out}");
    assert!(!out.contains("terraform init"), "{out}");
}

#[test]
fn a_refused_guarded_patch_is_explained() {
    let now = SystemTime::now();
    let r = LockReport::build(&malformed_facts(now), now);
    let mut out = String::new();
    fix_text(&r, None, &mut out);
    assert!(
        out.contains(
            "kubectl printing \"The request is invalid: the server rejected our request due to an error\n     in our request\" (HTTP 422) means the test failed"
        ),
        "{out}"
    );
    assert!(
        crate::pages::evidence_html(&r).contains("The request is invalid"),
        "the page says it too"
    );
}

#[test]
fn a_cut_holder_identity_is_read_whole_from_the_lease_by_every_command() {
    let now = SystemTime::now();
    let whole = "h".repeat(1_500_000);
    let kept = crate::watch::trim::keep_lock_id(&whole);
    // Foreign, lock-info parses: force-unlock reads the ID from the Lease,
    // only while it has the length and head seen (run in
    // hostile::a_printed_force_unlock_of_a_cut_holder_refuses_a_changed_holder).
    let mut f = facts(HolderClass::Foreign, Some("alice@laptop"), 400, None, now);
    f.lease.holder_identity = kept.clone();
    let mut out = String::new();
    fix_text(&LockReport::build(&f, now), None, &mut out);
    let read = format!(
        "HID=\"$(kubectl get lease -n team-a {LEASE} -o json | jq -er --argjson n 1500000 --arg head {} ",
        "h".repeat(128)
    );
    assert!(
        out.contains(&read)
            && out.contains("&& \"$TF\" force-unlock -force -- \"$HID\")")
            && out.contains("spec.holderIdentity is 1500000 bytes, shown cut")
            && !out.contains(&"h".repeat(2000)),
        "{out}"
    );
    // lock-info does not parse: the guarded release is built from the
    // Lease, only while its holderIdentity has the length and head seen.
    let mut f = malformed_facts(now);
    f.lease.holder_identity = kept;
    let release = LockReport::build(&f, now)
        .commands
        .release
        .expect("a release");
    assert!(
        release.starts_with(&format!(
            "kubectl get lease -n team-a {LEASE} -o json | jq -ce --argjson n 1500000 --arg head {} ",
            "h".repeat(128)
        )) && release.ends_with(&format!(
            "kubectl patch lease -n team-a {LEASE} --type=json --patch-file release-patch.json"
        )),
        "{release}"
    );
}
