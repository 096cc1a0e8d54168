//! The runbook pages (`docs/runbooks/`) and the README's on-call commands,
//! checked against what they must name: the resources the exporter watches (with their API groups,
//! for `kubectl auth can-i`), the backend's unlock rules (holderIdentity,
//! the backend block `init` needs, the guarded release of a lock-info that
//! does not parse), and both installs (the Helm chart and the kustomize
//! sidecar of CAPTF's manager, whose names are read from `deploy/`).

use std::path::Path;

use captf_lock_exporter::index::Resource;
use captf_lock_exporter::watch::Served;

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The text of the `## <title>` section of `text`, up to the next `## `.
fn section(text: &str, title: &str) -> String {
    let head = format!("\n## {title}\n");
    let start = text
        .find(&head)
        .unwrap_or_else(|| panic!("no section {title:?}"));
    let body = &text[start + head.len()..];
    body[..body.find("\n## ").unwrap_or(body.len())].to_string()
}

/// The runbook page `docs/runbooks/<name>.md`.
fn page(name: &str) -> String {
    read(&format!("docs/runbooks/{name}.md"))
}

/// Every runbook page, in name order.
fn pages() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/runbooks");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .collect();
    names.sort();
    assert!(names.len() >= 10, "only {names:?} in docs/runbooks");
    names
        .iter()
        .map(|n| page(n.trim_end_matches(".md")))
        .collect()
}

/// A resource as `kubectl auth can-i` must name it: `plural.group`, or the
/// plural alone for the core group.
fn can_i_name(r: Resource) -> String {
    let spec = r.spec();
    if spec.group.is_empty() {
        spec.plural.to_string()
    } else {
        format!("{}.{}", spec.plural, spec.group)
    }
}

/// The value of the first `<key>: <value>` line of a YAML file, after a
/// line containing `after`.
fn yaml_value(yaml: &str, after: &str, key: &str) -> String {
    let from = yaml
        .find(after)
        .unwrap_or_else(|| panic!("{after:?} not found"));
    yaml[from..]
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}:")))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no {key} after {after:?}"))
}

struct Sidecar {
    container: String,
    deployment: String,
    service: String,
    service_account: String,
}

fn sidecar() -> Sidecar {
    Sidecar {
        container: yaml_value(
            &read("deploy/kustomize/manager-sidecar-patch.yaml"),
            "value:",
            "name",
        ),
        deployment: yaml_value(
            &read("deploy/kustomize/kustomization.yaml"),
            "kind: Deployment",
            "name",
        ),
        service: yaml_value(&read("deploy/kustomize/service.yaml"), "metadata:", "name"),
        service_account: yaml_value(
            &read("deploy/kustomize/rbac.yaml"),
            "kind: ServiceAccount",
            "name",
        ),
    }
}

#[test]
fn every_can_i_names_the_resource_with_its_api_group() {
    let text = pages().join("\n") + &read("README.md");
    let allowed: Vec<String> = Resource::ALL.into_iter().map(can_i_name).collect();
    let mut seen = 0;
    for line in text.lines().filter(|l| l.contains("auth can-i")) {
        let mut words = line
            .split("auth can-i")
            .nth(1)
            .unwrap_or_default()
            .split_whitespace();
        let (_verb, resource) = (words.next(), words.next().unwrap_or_default());
        let resource = resource.trim_matches(['"', '`', '\'']);
        assert!(
            resource.starts_with('$') || allowed.iter().any(|a| a == resource),
            "`kubectl auth can-i` must name a watched resource with its API group (one of {allowed:?}), not {resource:?}:\n{line}"
        );
        seen += 1;
    }
    assert!(seen > 0, "the runbook checks RBAC with kubectl auth can-i");
    // The loop of CAPTFLockExporterWatchDown checks every watched resource.
    let watch_down = page("CAPTFLockExporterWatchDown");
    for name in &allowed {
        assert!(
            watch_down.contains(&format!(" {name} ")) || watch_down.contains(&format!(" {name};")),
            "CAPTFLockExporterWatchDown does not check {name}"
        );
    }
    assert!(watch_down.contains("events.events.k8s.io"));
}

#[test]
fn the_unknown_lock_path_uses_holder_identity_and_releases_malformed_lock_info() {
    let read_the_lock = section(&page("before-you-begin"), "Read the lock");
    assert!(
        read_the_lock.contains(
            r#"HID="$(kubectl -n "$NS" get lease "$LEASE" -o jsonpath='{.spec.holderIdentity}')""#
        ),
        "Read the lock prints the command that reads holderIdentity"
    );
    assert!(
        read_the_lock.contains("does not match existing lock")
            && read_the_lock.contains("If `$HID` is not the alert's `lock_id`"),
        "Read the lock says what a mismatch with the alert's lock_id means"
    );
    let foreign = page("CAPTFStateLockForeignOverdue");
    assert!(
        !foreign.contains("force-unlock <lock_id>"),
        "lock-info's ID does not unlock: Unlock compares spec.holderIdentity"
    );
    assert!(foreign.contains(r#""$TF" force-unlock -force -- "$HID""#));
    assert!(
        foreign.contains("TF=tofu   # or TF=terraform"),
        "the manual force-unlock names both tools"
    );
    assert!(
        foreign.contains("The request is invalid"),
        "the runbook says what kubectl prints when the guarded patch's test fails"
    );
    for want in [
        r#"{op: "test",   path: "/spec/holderIdentity", value: $hid}"#,
        r#"{op: "remove", path: "/spec/holderIdentity"}"#,
        r#"{op: "remove", path: "/metadata/annotations/app.terraform.io~1lock-info"}"#,
        r#"kubectl -n "$NS" patch lease "$LEASE" --type=json"#,
        "lock-info is present\n     but malformed",
    ] {
        assert!(
            foreign.contains(want),
            "the unknown-lock path lacks {want:?}"
        );
    }
}

#[test]
fn the_manual_force_unlock_shows_the_backend_block_init_needs() {
    let foreign = page("CAPTFStateLockForeignOverdue");
    for want in [
        r#"'{"terraform": {"backend": {"kubernetes": {}}}}' > main.tf.json"#,
        r#""$TF" init -input=false"#,
        r#"-backend-config="secret_suffix=$SUFFIX""#,
        r#"-backend-config="namespace=$NS""#,
        r#"-backend-config="labels=$LABELS""#,
        r#"-backend-config="config_path=$HOME/.kube/config""#,
        r#".metadata.labels
     | del(.tfstate, .tfstateSecretSuffix, .tfstateWorkspace, ."app.kubernetes.io/managed-by")"#,
    ] {
        assert!(
            foreign.contains(want),
            "the manual force-unlock lacks {want:?}"
        );
    }
    assert!(
        !foreign.contains("-backend-config=backend.hcl"),
        "a backend.hcl that the runbook never shows is no step"
    );
}

#[test]
fn every_command_about_the_exporter_has_a_sidecar_variant() {
    let sc = sidecar();
    assert_eq!(sc.deployment, "captf-controller-manager");
    let manager_pods =
        "-l control-plane=controller-manager,cluster.x-k8s.io/provider=infrastructure-terraform";
    let mut units = pages();
    units.push(section(&read("README.md"), "On-call"));
    let text = units.join("\n");
    for placeholder in [
        "<exporter-pod>",
        "deploy/<exporter>",
        "<exporter-serviceaccount>",
    ] {
        assert!(
            !text.contains(placeholder),
            "{placeholder} fits neither install: name both"
        );
    }
    let chart_pods = "-l app.kubernetes.io/name=captf-lock-exporter";
    let mut checked = 0;
    for sub in &units {
        let lines: Vec<&str> = sub.lines().collect();
        let has = |pred: &dyn Fn(&str) -> bool| lines.iter().any(|l| pred(l));
        if has(&|l| l.contains(" logs ") && l.contains(chart_pods)) {
            assert!(
                has(&|l| l.contains(" logs ")
                    && l.contains(chart_pods)
                    && l.contains("-c exporter")),
                "chart logs name the container:\n{sub}"
            );
            assert!(
                has(&|l| l.contains(" logs ")
                    && l.contains(manager_pods)
                    && l.contains(&format!("-c {}", sc.container))),
                "no sidecar variant (-c {}) of the chart's logs command:\n{sub}",
                sc.container
            );
            checked += 1;
        }
        if has(&|l| l.contains("get deploy,pods") && l.contains(chart_pods)) {
            assert!(
                has(&|l| l.contains("get pods") && l.contains(manager_pods)),
                "no sidecar variant of the chart's get pods:\n{sub}"
            );
            checked += 1;
        }
        if has(&|l| l.contains("port-forward svc/captf-lock-exporter ")) {
            assert!(
                has(&|l| l.contains(&format!("port-forward svc/{} ", sc.service))),
                "no sidecar variant of the chart's port-forward:\n{sub}"
            );
            checked += 1;
        }
        if has(&|l| l.contains("serviceaccount:captf-system:captf-lock-exporter")) {
            assert!(
                has(&|l| l.contains(&format!(
                    "serviceaccount:captf-system:{}",
                    sc.service_account
                ))),
                "no sidecar variant of the chart's ServiceAccount:\n{sub}"
            );
            checked += 1;
        }
        if has(&|l| l.contains("rollout restart deploy/captf-lock-exporter")) {
            assert!(
                sub.contains(&format!("rollout restart deploy/{}", sc.deployment))
                    && sub.contains("restarts CAPTF's controllers"),
                "the sidecar's restart names CAPTF's manager and warns that it restarts it:\n{sub}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 5, "only {checked} chart commands found");
}

#[test]
fn the_reconcile_nudge_is_an_exact_command() {
    let nudge = r#"kubectl -n "$NS" annotate "$KIND" "$NAME" captf-lock-exporter/reconcile-nudge="$(date +%s)" --overwrite"#;
    for alert in ["CAPTFStateLockStale", "CAPTFStateLockVerdictMismatch"] {
        let sub = page(alert);
        assert!(sub.contains(nudge), "{alert} lacks the nudge command");
        assert!(
            !sub.contains("editing an\n   annotation on the object")
                && !sub.contains("edit an annotation on the\n   object"),
            "{alert} still says only 'edit an annotation'"
        );
    }
    assert!(page("CAPTFStateLockStale").contains("This is safe"));
}

/// "Before you begin" prints the on-call Role the realtools stage applies
/// as written: it must cover what the printed fixes do (update and patch
/// the Lease, read the state Secrets for force-unlock's init, patch the
/// object for the nudge, watch pods for the follow command) and create
/// nothing.
#[test]
fn before_you_begin_prints_the_oncall_role() {
    let begin = page("before-you-begin");
    let start = begin
        .find("**What you need: the on-call Role.**")
        .expect("Before you begin names the on-call Role");
    let yaml = &begin[start..];
    let yaml = &yaml[yaml.find("```yaml\n").expect("a yaml block") + 8..];
    let yaml = &yaml[..yaml.find("```").expect("the block ends")];
    for want in [
        "kind: Role",
        "resources: [leases]\n    verbs: [get, list, update, patch]",
        "resources: [pods, events]\n    verbs: [get, list, watch]",
        "resources: [secrets]\n    verbs: [get, list]",
        "resources: [terraformclusters, terraformmachines, terraformmachinepools]\n    verbs: [get, list, patch]",
    ] {
        assert!(yaml.contains(want), "the on-call Role lacks {want:?}:\n{yaml}");
    }
    assert!(!yaml.contains("create"), "the on-call Role creates nothing");
    assert!(!yaml.contains('*'), "no wildcard in the on-call Role");
}
