//! On-call tools: the report of a held lock (its data in [`model`], built
//! from the index's facts by [`report`], with the shell commands of
//! [`commands`]), the runbook's fix for it ([`fix`]), and the one-shot
//! commands `locks` and `explain` ([`locks`], [`explain`]) that read a
//! cluster once ([`collect`], GET only) and print them. The class always
//! comes from the exporter's own index and core: there is no second
//! classifier.

pub mod collect;
pub mod commands;
pub mod fix;
pub mod image;
pub mod model;
pub mod node;
pub mod render;
pub mod report;
pub mod shell;

use std::time::SystemTime;

use kube::Client;

use crate::core::captf_verdict::OurVerdict;
use crate::core::classify::HolderClass;
use crate::core::kind::Kind;
use crate::core::suffix::{lock_lease_name, state_suffix};
use crate::index::{LockFilter, LockKey, ObjectKey, ObjectRef};
use fix::{backend_labels, hcl_map};
use model::LockReport;
use model::{FixInputs, Lookup};
use render::Output;
use report::sort_by_urgency;

/// Exit code: something needs a person (`locks --fail-on-overdue`), or
/// `explain` found no such object.
pub const EXIT_ATTENTION: i32 = 1;
/// Exit code: the cluster could not be read.
pub const EXIT_ERROR: i32 = 2;

/// Parses a kind as kubectl accepts it: the Kind, its singular or plural
/// resource name or its CRD short name (`tfc`, `tfm`, `tfmp`), any case,
/// optionally followed by `.<group>` (or `.<version>.<group>`).
pub fn parse_kind(s: &str) -> Option<Kind> {
    let lower = s.to_ascii_lowercase();
    let (head, group) = lower.split_once('.').unwrap_or((&lower, ""));
    let group_ok = group.is_empty()
        || group == crate::core::kind::API_GROUP
        || group
            == format!(
                "{}.{}",
                crate::core::kind::API_VERSION,
                crate::core::kind::API_GROUP
            );
    if !group_ok {
        return None;
    }
    Kind::ALL.into_iter().find(|k| {
        let singular = k.as_str().to_ascii_lowercase();
        head == singular || head == k.plural() || head == k.short_name()
    })
}

/// Splits `KIND/NAME`, the kind as [`parse_kind`] reads it.
///
/// ```
/// use captf_lock_exporter::core::kind::Kind;
/// use captf_lock_exporter::oncall::parse_target;
///
/// assert_eq!(parse_target("tfm/web"), Ok((Kind::TerraformMachine, "web".to_string())));
/// assert_eq!(
///     parse_target("TerraformClusters.infrastructure.cluster.x-k8s.io/prod").map(|t| t.0),
///     Ok(Kind::TerraformCluster)
/// );
/// assert!(parse_target("deployment/web").is_err());
/// assert!(parse_target("tfm/").is_err());
/// ```
pub fn parse_target(s: &str) -> Result<(Kind, String), String> {
    let (kind, name) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?}: expected KIND/NAME, e.g. terraformmachine/web"))?;
    let kind = parse_kind(kind).ok_or_else(|| {
        format!("{kind:?} is not a CAPTF kind (terraformcluster/tfc, terraformmachine/tfm, terraformmachinepool/tfmp)")
    })?;
    if name.is_empty() {
        return Err(format!("{s:?}: the name is empty"));
    }
    Ok((kind, name.to_string()))
}

/// Reports of every held lock of a snapshot, most urgent first.
pub fn reports_of(
    snap: &collect::Snapshot,
    filter: &LockFilter,
    now: SystemTime,
) -> Vec<LockReport> {
    let mut reports: Vec<LockReport> = snap
        .index
        .held_lock_facts(filter)
        .into_iter()
        .map(|mut f| {
            f.one_shot = true;
            f.force_unlock_events_present = Some(
                snap.events_present
                    .get(&ObjectRef::new(&f.namespace, f.kind_label, &f.name))
                    .copied()
                    .unwrap_or(0),
            );
            LockReport::build(&f, now)
        })
        .collect();
    sort_by_urgency(&mut reports);
    reports
}

/// `locks`: prints the held locks of `scope` (None: all namespaces) and
/// returns the exit code.
pub async fn locks(
    client: &Client,
    scope: Option<&str>,
    output: Output,
    fail_on_overdue: bool,
    out: &mut String,
    err: &mut String,
) -> i32 {
    let Some(snap) = snapshot_reporting(client, scope, err).await else {
        return EXIT_ERROR;
    };
    let reports = reports_of(&snap, &LockFilter::default(), SystemTime::now());
    if reports.is_empty() && output != Output::Json {
        err.push_str("No held state locks found.\n");
    } else {
        out.push_str(&render::locks_output(&reports, output));
    }
    let attention = reports
        .iter()
        .filter(|r| r.overdue && matches!(r.class, HolderClass::Foreign | HolderClass::Unknown))
        .count();
    if fail_on_overdue && attention > 0 {
        err.push_str(&format!(
            "{attention} foreign or unknown lock(s) past lockTimeoutSeconds need a person\n"
        ));
        return EXIT_ATTENTION;
    }
    0
}

/// Reads the cluster once; an error or warnings go to `err`.
async fn snapshot_reporting(
    client: &Client,
    scope: Option<&str>,
    err: &mut String,
) -> Option<collect::Snapshot> {
    match collect::snapshot(client, scope).await {
        Ok(snap) => {
            for w in &snap.warnings {
                err.push_str(&format!("warning: {w}\n"));
            }
            Some(snap)
        }
        Err(e) => {
            err.push_str(&format!("error: {e}\n"));
            None
        }
    }
}

/// `explain`: prints one lock's evidence chain and fix; returns the exit code.
/// The fix runs the object's pinned image only when its repository is
/// `runner_image_repository` (see [`image::trusted`]).
pub async fn explain(
    client: &Client,
    target: &str,
    namespace: &str,
    runner_image_repository: &str,
    out: &mut String,
    err: &mut String,
) -> i32 {
    let (kind, name) = match parse_target(target) {
        Ok(t) => t,
        Err(e) => {
            err.push_str(&format!("error: {e}\n"));
            return EXIT_ERROR;
        }
    };
    let Some(snap) = snapshot_reporting(client, Some(namespace), err).await else {
        return EXIT_ERROR;
    };
    let now = SystemTime::now();
    let Some(mut facts) = snap.index.lock_facts(namespace, kind.as_str(), &name) else {
        let key = LockKey::new(namespace, state_suffix(namespace, kind, &name));
        let lease = lock_lease_name(&key.suffix);
        let exists = snap
            .lease_labels
            .contains_key(&ObjectKey::new(namespace, &lease));
        let view = snap.index.captf_view(&key);
        let captf = report::captf_report(namespace, &view, OurVerdict::Released);
        if exists || captf.object_known {
            let held = if exists {
                format!("the lock is not held (Lease {lease} has no holder)")
            } else {
                format!("no lock Lease {lease} yet (the object has not run a Job)")
            };
            let next = if captf.agreement == "differs" {
                " CAPTF's own verdict differs; see below."
            } else {
                " Nothing to do."
            };
            out.push_str(&format!("{kind} {namespace}/{name}: {held}.{next}\n"));
            render::captf_text(&captf, out);
            return 0;
        }
        err.push_str(&format!(
            "{kind} {namespace}/{name}: no held lock and no lock Lease {lease} in namespace {namespace}\n"
        ));
        return EXIT_ATTENTION;
    };
    facts.one_shot = true;
    facts.force_unlock_events_present = Some(
        snap.events_present
            .get(&ObjectRef::new(namespace, kind.as_str(), &name))
            .copied()
            .unwrap_or(0),
    );
    let report = LockReport::build(&facts, now);
    out.push_str(&render::evidence_text(&report));
    // A lock-info that does not parse is released with a kubectl patch, not
    // with the pinned image: no need to read the image or labels then.
    let inputs = if matches!(report.class, HolderClass::Foreign | HolderClass::Unknown)
        && report.commands.release.is_none()
    {
        let image = collect::pinned_image(client, namespace, kind, &name).await;
        let lease_key = ObjectKey::new(namespace, &report.lease);
        let labels = match snap.lease_labels.get(&lease_key).and_then(backend_labels) {
            Some(l) => Lookup::Found {
                value: hcl_map(&l),
                from: format!("the labels of Lease {}", report.lease),
            },
            None => match snap.index.object_cluster_label(namespace, kind, &name) {
                Some(cluster) => Lookup::Found {
                    value: hcl_map(&fix::captf_backend_labels(kind, &name, cluster.as_deref())),
                    from: format!(
                        "CAPTF's backend-label rule for this object (Lease {} carries no owner labels)",
                        report.lease
                    ),
                },
                None => Lookup::Unreadable {
                    why: format!(
                        "Lease {} carries no CAPTF owner labels and the object is not known",
                        report.lease
                    ),
                    read_with: format!(
                        "kubectl get secret -n {} tfstate-default-{} -o json | jq -c '.metadata.labels | del(.tfstate, .tfstateSecretSuffix, .tfstateWorkspace, .\"app.kubernetes.io/managed-by\")'",
                        shell::shq(namespace),
                        report.suffix
                    ),
                },
            },
        };
        Some(FixInputs {
            image,
            labels,
            trusted_repository: runner_image_repository.to_string(),
        })
    } else {
        None
    };
    fix::fix_text(&report, inputs.as_ref(), out);
    0
}

#[cfg(test)]
mod tests;
