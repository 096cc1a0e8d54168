//! The runbook's fix for one lock, by class, with every value filled in:
//! what `explain` prints after the evidence chain. Sans-IO: the values the
//! commands need (pinned image, backend labels) are looked up by the
//! caller and passed in, each either found or named as unreadable with
//! the command that would read it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::core::classify::HolderClass;
use crate::core::kind::Kind;

use super::commands::{guarded_holder_read, Holder, HOLDER_CHANGED};
use super::model::{FixInputs, LockReport, Lookup, OwnVerdict};
use super::render::human_duration;
use super::shell::shq;
use crate::core::shown::has_hidden;

/// Labels the kubernetes backend sets itself on the Lease and the state
/// Secrets; every other label of the Lease came from the Job's `labels`.
pub const BACKEND_OWN_LABELS: [&str; 4] = [
    "tfstate",
    "tfstateSecretSuffix",
    "tfstateWorkspace",
    "app.kubernetes.io/managed-by",
];

/// Annotation of the applied-inputs Secret with the pinned image digest.
pub const IMAGE_DIGEST_ANNOTATION: &str = "captf.io/image-digest";
/// Annotation of the applied-inputs Secret with the image reference.
pub const IMAGE_ANNOTATION: &str = "captf.io/image";

/// The minimal root module force-unlock needs: a backend declaration.
pub const MAIN_TF_JSON: &str =
    "{\n  \"terraform\": {\n    \"backend\": {\n      \"kubernetes\": {}\n    }\n  }\n}";

/// CAPTF's applied-inputs Secret of an object (`captf-applied-<short>-<name>`).
pub fn applied_secret_name(kind: Kind, name: &str) -> String {
    format!("captf-applied-{}-{name}", kind.short())
}

/// `<image>@<digest>` from a digest annotation or `status.source.imageDigest`
/// (`repo@sha256:…`), or from an image reference and a bare digest
/// (`sha256:…`): the tag is dropped, `@` and the digest appended.
pub fn pinned_image(image: Option<&str>, digest: &str) -> Option<String> {
    let digest = digest.trim();
    if digest.is_empty() {
        return None;
    }
    if digest.contains('@') {
        return Some(digest.to_string());
    }
    let image = image?.trim();
    let repo = image.split('@').next().unwrap_or(image);
    // A ':' after the last '/' is a tag; one before it is a registry port.
    let repo = match repo.rfind(':') {
        Some(i) if !repo[i..].contains('/') => &repo[..i],
        _ => repo,
    };
    (!repo.is_empty()).then(|| format!("{repo}@{digest}"))
}

/// The backend labels the Job passes, from the Lease's labels: every label
/// but the backend's own. None when the Lease carries no CAPTF owner label
/// (re-created by hand: its labels then say nothing).
pub fn backend_labels(lease_labels: &BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    if !lease_labels.contains_key("captf.infrastructure.cluster.x-k8s.io/owner-kind") {
        return None;
    }
    Some(
        lease_labels
            .iter()
            .filter(|(k, _)| !BACKEND_OWN_LABELS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

/// The labels CAPTF passes to the backend for an object (`state.BackendLabels`):
/// owner kind and name, cluster name, managed and clusterctl's move label.
pub fn captf_backend_labels(
    kind: Kind,
    name: &str,
    cluster: Option<&str>,
) -> BTreeMap<String, String> {
    use crate::core::suffix::owner_name_label_value as label_value;
    [
        (
            "captf.infrastructure.cluster.x-k8s.io/owner-kind",
            kind.as_str().to_string(),
        ),
        (
            "captf.infrastructure.cluster.x-k8s.io/owner-name",
            label_value(name),
        ),
        (
            "cluster.x-k8s.io/cluster-name",
            label_value(cluster.unwrap_or_default()),
        ),
        ("captf.io/managed", "true".to_string()),
        ("clusterctl.cluster.x-k8s.io/move", String::new()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The labels as the HCL object the Job passes (CAPTF's `HCLMap`: sorted,
/// quoted keys, no spaces): `{"a"="b","c"=""}`.
pub fn hcl_map(labels: &BTreeMap<String, String>) -> String {
    let parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{}={}", go_quote(k), go_quote(v)))
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// The fix section `explain` prints for `r`.
pub fn fix_text(r: &LockReport, inputs: Option<&FixInputs>, out: &mut String) {
    let _ = writeln!(out, "\nWhat to do ({}):", r.class);
    if r.lock_info_id_differs {
        id_mismatch(r, out);
    }
    match r.class {
        HolderClass::OwnLive if r.node.as_ref().is_some_and(|n| n.lost_reason.is_some()) => {
            let _ = writeln!(
                out,
                "  Do not unlock. The holder is this object's own runner and CAPTF counts it alive."
            );
            if let Some(n) = &r.node {
                super::node::fix_text(n, out);
            }
        }
        HolderClass::OwnLive => {
            let _ = writeln!(
                out,
                "  Do not unlock. The holder is this object's own runner and it is alive; a second\n  writer would corrupt the state. Let it finish."
            );
            #[allow(clippy::cast_precision_loss)]
            let left = r.active_deadline.seconds as f64 - r.age_seconds;
            let _ = writeln!(
                out,
                "  Its Job is stopped at activeDeadlineSeconds ({} s): at most {} from now (counted from\n  the lock's creation; the Job started earlier), then the runner has up to 600 s to release\n  the lock. CAPTFStateLockHeldTooLong fires if it is still held after that.",
                r.active_deadline.seconds,
                human_duration(left.max(0.0))
            );
            if let Some(cmd) = &r.commands.pod {
                let _ = writeln!(out, "  Follow the pod:\n    {cmd} -w");
            }
        }
        HolderClass::OwnStale if r.lock_info_id_differs => {
            let _ = writeln!(
                out,
                "  So no Job clears this stale lock: each one passes lock-info's ID to force-unlock,\n  which fails, then waits for the lock and fails. Once the holder pod is confirmed gone,\n  force-unlock it by hand with spec.holderIdentity ({}), as the runbook's\n  CAPTFStateLockForeignOverdue section, step 2, shows.\n  Then watch the lock clear (empty output):\n    {}",
                shq(&r.holder_identity),
                r.commands.confirm
            );
        }
        HolderClass::OwnStale => {
            let _ = writeln!(
                out,
                "  Nothing to unlock by hand: CAPTF force-unlocks lock ID {} when it starts this\n  object's next Job (an apply, a refresh, a drift check or a destroy). If one is due but\n  the controller has not looked at the object again, make it reconcile now:\n    {}\n  Safe: CAPTF renders no object metadata into a run, so this annotation (a name CAPTF\n  does not own) changes nothing it applies; any update of the object makes it reconcile.\n  A reconcile starts a Job only when one is due: with an apply waiting for approval or a\n  long backoff the lock stays, and the manual force-unlock of the runbook's\n  CAPTFStateLockStale section is the way.",
                shq(&r.lock_id),
                r.commands.nudge
            );
            let _ = writeln!(
                out,
                "  Then watch the lock clear (empty output):\n    {}",
                r.commands.confirm
            );
        }
        HolderClass::OwnUnverified => match &r.commands.pod {
            Some(cmd) => {
                let _ = writeln!(
                    out,
                    "  The exporter could not read the holder pod. Read it yourself:\n    {cmd}\n  Exists and not Succeeded/Failed: the lock is live, do not unlock. No resources found,\n  Succeeded or Failed: CAPTF force-unlocks it with the object's next Job (as own_stale)."
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "  The holder's host is no name a pod can be read by (see Pod above): CAPTF's own read of\n  it fails too, so CAPTF never force-unlocks it. Once nothing holds the lock, release it by\n  hand with spec.holderIdentity ({}), as the runbook's CAPTFStateLockForeignOverdue\n  section, step 2, shows.",
                    shq(&r.holder_identity)
                );
            }
        },
        HolderClass::Foreign | HolderClass::Unknown => foreign_fix(r, inputs, out),
    }
}

fn foreign_fix(r: &LockReport, inputs: Option<&FixInputs>, out: &mut String) {
    let ns = shq(&r.namespace);
    let who = match (&r.own, &r.commands.pod) {
        (OwnVerdict::NotOwn { .. }, Some(pod)) if r.host.is_some() => format!(
            "  1. Make sure nothing still holds it: the host {} is named like a CAPTF runner pod of\n     another object; while that pod exists and has not finished, its run owns the lock:\n       {pod}\n",
            shq(r.host.as_deref().unwrap_or_default()),
        ),
        (OwnVerdict::NotOwn { .. }, None) if r.host.is_some() => format!(
            "  1. Make sure nothing still holds it: the host {} is not a CAPTF runner pod (a\n     workstation or another machine, user {}); a terraform/tofu command still running there\n     owns the lock. Ask that person, with the Operation and Created above.\n",
            shq(r.host.as_deref().unwrap_or_default()),
            shq(r.info.as_ref().map_or("", |i| who_user(&i.who)))
        ),
        _ => "  1. Make sure nothing still holds it: the holder is unknown (no readable Who), so confirm\n     with the people and pipelines that use this object's state that none is running.\n".into(),
    };
    let _ = write!(
        out,
        "  CAPTF never releases this lock; every Job of the object waits {} s for it and fails.\n  Never delete the Lease.\n{who}",
        r.lock_timeout.seconds
    );
    if let (Some(release), Some(err)) = (&r.commands.release, &r.info_error) {
        let _ = writeln!(
            out,
            "  2. lock-info is present but does not parse ({err}). Terraform's and OpenTofu's\n     Unlock parse lock-info before they compare the ID, so force-unlock fails with any ID\n     (\"Failed to unlock state: ...\"). Release the lock as Unlock would (clear\n     spec.holderIdentity and the lock-info annotation) in one request, which the API\n     server refuses unless spec.holderIdentity is still {} (needs patch on leases in {ns}):\n    {release}\n     kubectl printing \"The request is invalid: the server rejected our request due to an error\n     in our request\" (HTTP 422) means the test failed: the holder changed since it was read\n     (the API server drops the reason). Nothing was changed; read the lock again and start over.\n  3. Confirm the lock is clear (empty output):\n    {}",
            shq(&r.holder_identity),
            r.commands.confirm
        );
        return;
    }
    let labels = match inputs.map(|i| &i.labels) {
        Some(Lookup::Found { value, from }) => {
            format!(
                "     (backend labels from {from})\n    LABELS={}",
                shq(value)
            )
        }
        Some(Lookup::Unreadable { why, read_with }) => format!(
            "     (could not derive the backend labels: {why})\n    LABELS=\"$({read_with})\""
        ),
        None => "    LABELS='<labels>'".into(),
    };
    let suffix = shq(&r.suffix);
    // The raw holderIdentity, quoted: the one value the backend compares.
    // `--` ends the flags (Go's flag package), so an ID that starts with
    // '-' is never read as one.
    // A holderIdentity the exporter keeps cut is read whole from the Lease,
    // and only while it is still the one seen: pasted later, after the
    // lock changed hands, the command must not release the new holder.
    let cut = crate::watch::trim::cut_lock_id_parts(&r.raw_holder_identity);
    let holder = match guarded_holder_read(&r.namespace, &r.lease, &r.raw_holder_identity) {
        Some(read) => Holder {
            guard: format!("{read} \\\n      && "),
            word: "\"$HID\"".into(),
        },
        None => Holder {
            guard: String::new(),
            word: shq(&r.raw_holder_identity),
        },
    };
    let hid = &holder.word;
    let guard = &holder.guard;
    let id_note = if let Some((_, len)) = cut {
        format!("     (spec.holderIdentity is {len} bytes, shown cut above: HID is read whole from the Lease,\n     and only while it still has that length and head. jq failing with\n     \"{HOLDER_CHANGED}\" means the lock changed hands since explain ran:\n     nothing was released; run explain again)\n")
    } else if has_hidden(&r.raw_holder_identity) {
        "     (the holderIdentity holds control, bidi or zero-width characters: written above as\n     $'...' with octal escapes, which bash, zsh, ksh and busybox sh read, dash does not)\n".into()
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "  2. Force-unlock it with OpenTofu or Terraform installed on your machine (TF=tofu or\n     TF=terraform), with your kubeconfig (the management cluster). force-unlock takes\n     spec.holderIdentity ({}): the backend's Unlock compares that, not lock-info's ID.\n\n{labels}\n    mkdir -p root\n    cat > root/main.tf.json <<'EOF'\n{}\nEOF\n    echo '{{}}' > root/terraform.tfvars.json\n    TF=tofu\n    {guard}(cd root && \"$TF\" init -input=false \\\n      -backend-config=secret_suffix={suffix} -backend-config=namespace={ns} \\\n      -backend-config=\"labels=$LABELS\" -backend-config=config_path=\"$HOME/.kube/config\" \\\n      && \"$TF\" force-unlock -force -- {hid})\n{id_note}     Either tool releases a lock the other took: both kubernetes backends keep the lock the\n     same way in this Lease. lock-info cannot tell them apart (Version {} is an OpenTofu or a\n     Terraform release number); use the one you have.",
        shq(&r.holder_identity),
        MAIN_TF_JSON
            .lines()
            .map(|l| format!("    {l}"))
            .collect::<Vec<_>>()
            .join("\n"),
        shq(r.info.as_ref().map_or("?", |i| i.version.as_str())),
    );
    let image = inputs.map(|i| (&i.image, i.trusted_repository.as_str()));
    super::image::image_variant(r, image, &suffix, &holder, out);
    let _ = writeln!(
        out,
        "  3. Confirm the lock is clear (empty output):\n    {}",
        r.commands.confirm
    );
}

/// The user part of `Who` (`<user>@<host>`): everything before the last `@`.
fn who_user(who: &str) -> &str {
    who.rsplit_once('@').map_or("", |(user, _)| user)
}

/// What a lock-info `ID` that is not `spec.holderIdentity` means. The
/// backend's `Lock` writes both from one ID in one request; its `Unlock`
/// compares the given ID with `spec.holderIdentity`.
fn id_mismatch(r: &LockReport, out: &mut String) {
    let info_id = r.info.as_ref().map_or("", |i| i.id.as_str());
    let _ = writeln!(
        out,
        "  lock-info's ID ({}) is not spec.holderIdentity ({}). Terraform and OpenTofu write both\n  from one ID, so something else wrote this Lease: treat lock-info as a claim. The alert's\n  lock_id is lock-info's ID, but force-unlock must be given spec.holderIdentity; with\n  lock-info's ID it fails (\"does not match existing lock\"), and so does CAPTF's own\n  force-unlock, which uses lock-info's ID: CAPTF never clears this lock itself.",
        shq(info_id),
        shq(&r.holder_identity)
    );
}
