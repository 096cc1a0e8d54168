//! The shell commands a lock's report carries ([`Commands`], built here): inspect the
//! Lease and the holder pod, confirm the release, `explain` the lock,
//! nudge CAPTF, and the guarded release of a lock whose lock-info does not
//! parse, each with every placeholder filled in; and the review of a
//! TerraformPlan the object's apply waits for ([`plan_review`]).
//!
//! Separate from the report's data ([`super::model`]) and from how its
//! verdicts are reached ([`super::report`]): a person runs these, so what
//! each one does, when it is safe to print it and how its values are
//! quoted ([`shq`]: lock-info is untrusted) is one concern, reviewed in
//! one place. The runbook's fix commands are [`super::fix`].

use crate::core::podname::{check_pod_name, PodName};
use crate::index::LockFacts;

use super::model::{Commands, NotOwn, OwnVerdict};
use super::shell::shq;

impl Commands {
    /// The commands for the held lock `f`, whose Lease is `lease_name`,
    /// whose holder's host is `host` and whose own-pod verdict is `own`.
    pub fn for_lock(
        f: &LockFacts,
        lease_name: &str,
        host: Option<&str>,
        own: &OwnVerdict,
    ) -> Commands {
        let ns = &f.namespace;
        let lease = &f.lease;
        Commands {
            lease: format!(
                "kubectl get lease -n {} {} -o yaml",
                shq(ns),
                shq(lease_name)
            ),
            pod: host
                .filter(|h| pod_named(own, h))
                .map(|h| pod_command(ns, h)),
            confirm: format!(
                "kubectl get lease -n {} {} -o jsonpath='{{.spec.holderIdentity}}'",
                shq(ns),
                shq(lease_name)
            ),
            explain: format!(
                "captf-lock-exporter explain {}/{} -n {}",
                kubectl_kind(f.kind_label),
                shq(&f.name),
                shq(ns)
            ),
            nudge: format!(
                "kubectl annotate -n {} {} {} {NUDGE_ANNOTATION}=\"$(date +%s)\" --overwrite",
                shq(ns),
                kubectl_kind(f.kind_label),
                shq(&f.name)
            ),
            release: lease
                .info_error
                .is_some()
                .then(|| guarded_release(ns, lease_name, &lease.holder_identity)),
        }
    }
}

/// The annotation the nudge writes. Not `captf.io/`: CAPTF owns that
/// prefix and acts on some of its annotations (a restore, an approval).
pub const NUDGE_ANNOTATION: &str = "captf-lock-exporter/reconcile-nudge";

/// The guarded release of a lock whose lock-info no Terraform can parse:
/// a JSON patch whose `test` makes the API server refuse it unless
/// `spec.holderIdentity` is still `holder_identity`, then the two removals
/// `Unlock` makes.
///
/// A holderIdentity the exporter keeps cut (longer than
/// [`crate::watch::trim::MAX_LOCK_ID_BYTES`]) cannot be printed whole:
/// the patch is then built from the Lease by `jq`, and only when its
/// holderIdentity still has the length and head the exporter saw.
pub fn guarded_release(namespace: &str, lease: &str, holder_identity: &str) -> String {
    let patch = r#"[{op:"test",path:"/spec/holderIdentity",value:.spec.holderIdentity},{op:"remove",path:"/spec/holderIdentity"},{op:"remove",path:"/metadata/annotations/app.terraform.io~1lock-info"}]"#;
    if let Some(read) = read_if_unchanged(namespace, lease, holder_identity, "-ce", patch) {
        return format!(
            "{read} > release-patch.json && kubectl patch lease -n {} {} --type=json --patch-file release-patch.json",
            shq(namespace),
            shq(lease),
        );
    }
    let patch = serde_json::json!([
        {"op": "test", "path": "/spec/holderIdentity", "value": holder_identity},
        {"op": "remove", "path": "/spec/holderIdentity"},
        {"op": "remove", "path": "/metadata/annotations/app.terraform.io~1lock-info"},
    ]);
    format!(
        "kubectl patch lease -n {} {} --type=json -p {}",
        shq(namespace),
        shq(lease),
        shq(&patch.to_string())
    )
}

/// What jq says when a cut holderIdentity is no longer the one the
/// exporter saw (another length or head): the lock changed hands.
pub const HOLDER_CHANGED: &str = "spec.holderIdentity is no longer the one read";

/// For a holderIdentity the exporter keeps cut: reads the Lease and, with
/// jq, prints `then` (a jq expression) only while its holderIdentity still
/// has the length and head the exporter saw; otherwise jq fails with
/// [`HOLDER_CHANGED`] and prints nothing. None for an ID kept whole.
fn read_if_unchanged(
    namespace: &str,
    lease: &str,
    holder_identity: &str,
    jq_flags: &str,
    then: &str,
) -> Option<String> {
    let (head, len) = crate::watch::trim::cut_lock_id_parts(holder_identity)?;
    let check = format!(
        r#"if (.spec.holderIdentity|utf8bytelength) == $n and (.spec.holderIdentity|startswith($head)) then {then} else error("{HOLDER_CHANGED}") end"#
    );
    Some(format!(
        "kubectl get lease -n {} {} -o json | jq {jq_flags} --argjson n {len} --arg head {} {}",
        shq(namespace),
        shq(lease),
        shq(crate::index::cap(head, 128)),
        shq(&check),
    ))
}

/// For a holderIdentity the exporter keeps cut (it cannot be printed
/// whole): the assignment that sets `HID` to the whole holderIdentity read
/// from the Lease, which fails (non-zero, jq's error naming
/// [`HOLDER_CHANGED`]) unless it still has the length and head the
/// exporter saw, so a force-unlock chained after it with `&&` never
/// releases a lock that changed hands since `explain` ran. None for an ID
/// kept whole: that one is printed as it is.
pub fn guarded_holder_read(namespace: &str, lease: &str, holder_identity: &str) -> Option<String> {
    let read = read_if_unchanged(
        namespace,
        lease,
        holder_identity,
        "-er",
        ".spec.holderIdentity",
    )?;
    Some(format!("HID=\"$({read})\""))
}

/// Whether the host is named like a CAPTF runner pod (this object's or
/// another's) and can be a pod's name: only then is a pod command printed.
/// Any other host is a workstation or a machine outside the cluster, where
/// `kubectl get pod` can only fail.
pub fn pod_named(own: &OwnVerdict, host: &str) -> bool {
    let runner = matches!(
        own,
        OwnVerdict::Own { .. }
            | OwnVerdict::NotOwn {
                why: NotOwn::OtherObjectsPod { .. }
            }
    );
    runner && check_pod_name(host) == PodName::Valid
}

/// Lists the pod by name: exits 0 whether it exists (a row with its
/// status: `Running`, `Failed`, `Terminating`, ...) or not (`No resources
/// found`), unlike `kubectl get pod <name>`, which exits 1 for a gone pod.
pub fn pod_command(namespace: &str, pod: &str) -> String {
    format!(
        "kubectl get pods -n {} --field-selector {} -o wide",
        shq(namespace),
        shq(&format!("metadata.name={pod}"))
    )
}

/// The kind as kubectl takes it (lowercase singular).
pub fn kubectl_kind(kind: &str) -> String {
    if kind.is_empty() {
        "terraformmachine".into()
    } else {
        kind.to_ascii_lowercase()
    }
}

/// Shows a pending TerraformPlan for review before anyone approves it.
pub fn plan_review(namespace: &str, plan: &str) -> String {
    format!(
        "kubectl get tfplan -n {} {} -o yaml",
        shq(namespace),
        shq(plan)
    )
}

/// The holderIdentity as force-unlock is given it: `word` (quoted, or
/// `"$HID"`), after `guard` (empty, or the guarded read that sets `HID`
/// and `&&`).
pub struct Holder {
    /// Runs first and sets `HID`, chained with `&&`; empty for an ID
    /// printed whole.
    pub guard: String,
    /// The argument.
    pub word: String,
}
