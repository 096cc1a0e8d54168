//! The report of one held lock: its evidence chain, in the order a person
//! checks it, and the next commands with every placeholder filled in.
//!
//! Sans-IO: built from [`LockFacts`] (what the index, or a one-shot list,
//! knows about a lock) and a clock value; tested with synthetic facts.
//! The class is never decided here: it is the index's verdict (the same
//! `core::classify` the exporter uses); the report only explains it.

use std::time::SystemTime;

use serde::Serialize;

use crate::core::classify::{is_overdue, HolderClass};
use crate::core::jobname::owns_pod;
use crate::core::kind::Kind;
use crate::core::lockinfo::holder_host;
use crate::core::podname::{check_pod_name, PodName};
use crate::core::timeouts::{Resolved, Source};
use crate::core::verdict::{compare, named_holder, Agreement, CaptfReason, OurVerdict};
use crate::index::{unix_seconds, CaptfView, ForceUnlocks, LockLease, PodRead, PodState};

use super::shell::shq;

/// How the lock's object is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjectKnown {
    /// A watched (listed) Terraform* object.
    Watched,
    /// Not listed, but the Lease's owner labels reproduce its suffix.
    ProvenByLabels,
    /// Not known: kind from the labels or the suffix, name is the suffix.
    Unknown,
}

/// What the index (or a one-shot list) knows about the holder pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PodFacts {
    /// The pod name (the host after the last `@`).
    pub name: String,
    /// The watch cache's copy, if any.
    pub cached: Option<PodState>,
    /// The last live read and when it was made.
    pub last_read: Option<(PodRead, Option<SystemTime>)>,
}

/// Everything known about one held lock, as input to [`LockReport::build`].
#[derive(Clone, Debug, PartialEq)]
pub struct LockFacts {
    /// Namespace.
    pub namespace: String,
    /// The object's kind when known (from the object, labels or suffix).
    pub kind: Option<Kind>,
    /// The kind shown (the `kind` label; "" when ambiguous).
    pub kind_label: &'static str,
    /// The object name shown (the `name` label).
    pub name: String,
    /// How the object is known.
    pub object: ObjectKnown,
    /// The trimmed Lease.
    pub lease: LockLease,
    /// The index's class verdict.
    pub class: HolderClass,
    /// When the lock was first seen held (age without `Created`).
    pub first_seen_held: Option<SystemTime>,
    /// Effective timeouts and their sources.
    pub resolved: Resolved,
    /// The holder pod, for holders recognised as own runner pods.
    pub pod: Option<PodFacts>,
    /// Force-unlock counter of the object.
    pub force_unlocks: ForceUnlocks,
    /// ForceUnlocked Events present in the cluster (one-shot commands).
    pub force_unlock_events_present: Option<u64>,
    /// What CAPTF's status says of the object.
    pub captf: CaptfView,
    /// Read once by a one-shot command (`locks`, `explain`), not kept up to
    /// date by a watch: nothing was observed over time, so an age that
    /// would come from observation is unknown, and a pod listed finished
    /// was just read (not a cached copy).
    pub one_shot: bool,
}

/// Why a holder is not one of the object's own runner pods.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum NotOwn {
    /// lock-info is absent or could not be parsed.
    NoLockInfo,
    /// `Who` has no `@`, so no host.
    NoAt,
    /// Nothing follows the last `@` in `Who`.
    EmptyHost,
    /// The object is not known, so no pod can be proven its own.
    ObjectUnknown,
    /// The host is named like a runner pod of another object.
    OtherObjectsPod {
        /// That object's kind.
        #[serde(serialize_with = "ser_display")]
        kind: Kind,
        /// That object's name (or the hash CAPTF puts in long names).
        name: String,
    },
    /// The host is not named like a Job pod of this object.
    NotJobPodName,
}

impl NotOwn {
    /// The reason in words.
    pub fn text(&self) -> String {
        match self {
            NotOwn::NoLockInfo => "lock-info is missing or unreadable, so there is no holder to check".into(),
            NotOwn::NoAt => "Who has no '@', so it names no host".into(),
            NotOwn::EmptyHost => "nothing follows the last '@' in Who".into(),
            NotOwn::ObjectUnknown => {
                "the lock's object is not known, so no pod can be proven to be one of its runners".into()
            }
            NotOwn::OtherObjectsPod { kind, name } => {
                format!("the host is a runner pod name of another object ({kind} {name})")
            }
            NotOwn::NotJobPodName => {
                "the host is not the name of a Job pod of this object (a workstation, or a look-alike)"
                    .into()
            }
        }
    }
}

/// Whether the holder is one of the object's own runner pods.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "verdict")]
pub enum OwnVerdict {
    /// An own runner pod.
    Own {
        /// The pod name.
        pod: String,
    },
    /// Not an own runner pod, and why.
    NotOwn {
        /// Why.
        #[serde(flatten)]
        why: NotOwn,
    },
}

/// One effective value and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Sourced {
    /// Seconds.
    pub seconds: i64,
    /// `own`, `cluster_defaults`, `cluster_jobs` or `built_in`.
    pub source: &'static str,
}

/// Where a value came from, in words.
pub fn source_text(source: &str, kind: Option<Kind>) -> &'static str {
    match source {
        "own" => "the object's own spec.jobs",
        "cluster_defaults" => "its TerraformCluster's spec.defaults.jobs",
        "cluster_jobs" => "its TerraformCluster's own spec.jobs",
        _ if kind.is_none() => "built-in (object not known)",
        _ => "built-in (no spec sets it)",
    }
}

/// The holder pod as the report shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PodReport {
    /// Pod name.
    pub name: String,
    /// Its state in words.
    pub state: String,
    /// When it was last read live (Unix seconds), if it was.
    pub read_at: Option<f64>,
}

/// The lock-info fields.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InfoFields {
    /// `ID`.
    pub id: String,
    /// `Operation`.
    pub operation: String,
    /// `Who`.
    pub who: String,
    /// `Version`.
    pub version: String,
    /// `Created` (RFC 3339), when usable.
    pub created: Option<String>,
}

/// The kubectl commands for this lock, placeholders filled and quoted.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Commands {
    /// Inspect the Lease.
    pub lease: String,
    /// Inspect the holder pod: only when the host is named like a CAPTF
    /// runner pod (of this object or another) and is a valid pod name. A
    /// list by name, so it exits 0 and says `No resources found` when the
    /// pod is gone. None for a workstation host.
    pub pod: Option<String>,
    /// Reads `spec.holderIdentity`, the ID Terraform's and OpenTofu's
    /// `Unlock` compares; empty output once the lock is clear.
    pub confirm: String,
    /// This report from the command line.
    pub explain: String,
    /// Makes CAPTF reconcile the object: an annotation CAPTF does not own.
    pub nudge: String,
    /// For lock-info that is present but does not parse: the one request
    /// that does what the backend's `Unlock` does (clear the holder and
    /// lock-info), refused by the API server if the holder changed.
    /// `force-unlock` cannot release such a lock with any ID.
    pub release: Option<String>,
}

/// The annotation the nudge writes. Not `captf.io/`: CAPTF owns that
/// prefix and acts on some of its annotations (a restore, an approval).
pub const NUDGE_ANNOTATION: &str = "captf-lock-exporter/reconcile-nudge";

/// The guarded release of a lock whose lock-info no Terraform can parse:
/// a JSON patch whose `test` makes the API server refuse it unless
/// `spec.holderIdentity` is still `holder_identity`, then the two removals
/// `Unlock` makes.
pub fn guarded_release(namespace: &str, lease: &str, holder_identity: &str) -> String {
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

/// The evidence chain of one held lock.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LockReport {
    /// Namespace.
    pub namespace: String,
    /// Kind shown ("" when ambiguous).
    pub kind: &'static str,
    /// Name shown.
    pub name: String,
    /// How the object is known.
    pub object: ObjectKnown,
    /// The Lease name.
    pub lease: String,
    /// The state suffix (backend `secret_suffix`).
    pub suffix: String,
    /// The lock ID force-unlock needs.
    pub lock_id: String,
    /// `spec.holderIdentity`: the ID `force-unlock` must be given (the
    /// backend's `Unlock` compares it, not lock-info's `ID`).
    pub holder_identity: String,
    /// lock-info's `ID` is set and is not `spec.holderIdentity`: the
    /// backend writes both from one ID, so something else wrote the Lease.
    pub lock_info_id_differs: bool,
    /// lock-info fields, when it parsed.
    pub info: Option<InfoFields>,
    /// Why lock-info was rejected, when it was.
    pub info_error: Option<String>,
    /// The host after the last `@` in Who.
    pub host: Option<String>,
    /// Own runner pod or not, and why.
    pub own: OwnVerdict,
    /// The holder pod, for own runner pods.
    pub pod: Option<PodReport>,
    /// Effective lockTimeoutSeconds.
    pub lock_timeout: Sourced,
    /// Effective activeDeadlineSeconds.
    pub active_deadline: Sourced,
    /// Age in seconds (0 when not known).
    pub age_seconds: f64,
    /// `lock_info` or `observed`.
    pub age_source: &'static str,
    /// False when a one-shot command would have to observe the age (no
    /// usable `Created`): it has observed nothing, so the age and whether
    /// the lock is overdue are unknown.
    pub age_known: bool,
    /// Foreign or unknown and past lockTimeoutSeconds.
    pub overdue: bool,
    /// The class.
    #[serde(serialize_with = "ser_display")]
    pub class: HolderClass,
    /// Sort rank: 0 is the most urgent.
    pub urgency: u8,
    /// What CAPTF does next, in words.
    pub captf_next: String,
    /// Force-unlocks counted since the exporter started.
    pub force_unlocks_counted: u64,
    /// ForceUnlocked Events present (one-shot commands only).
    pub force_unlock_events_present: Option<u64>,
    /// When a ForceUnlocked Event about the object was last seen.
    pub last_force_unlock: Option<f64>,
    /// The next commands.
    pub commands: Commands,
    /// CAPTF's own verdict beside the exporter's.
    pub captf: CaptfReport,
}

/// CAPTF's `StateReadable` condition as written.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConditionReport {
    /// True, False, Unknown (else `other`).
    pub status: &'static str,
    /// The reason as written (capped).
    pub reason: String,
    /// The message (capped).
    pub message: String,
    /// lastTransitionTime, RFC 3339.
    pub since: Option<String>,
}

/// A TerraformPlan the object's apply waits for.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PendingPlan {
    /// Its name.
    pub name: String,
    /// The command that shows it for review.
    pub review: String,
}

/// CAPTF's own verdict on the lock, beside the exporter's class.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CaptfReport {
    /// The object is watched (else CAPTF's status is not known).
    pub object_known: bool,
    /// The condition, when the object has one.
    pub condition: Option<ConditionReport>,
    /// `status.activeJob` is set.
    pub active_job: bool,
    /// `agrees`, `differs`, `silent` (CAPTF says nothing about the lock) or
    /// `not_compared` (object unknown, or a Job runs).
    pub agreement: &'static str,
    /// The comparison in words.
    pub text: String,
    /// When the exporter first saw the disagreement (exporter only).
    pub differs_since: Option<f64>,
    /// `verdict_mismatch` is 1: it outlasted the grace (exporter only).
    pub mismatch_reported: bool,
    /// TerraformPlans in phase Pending for the object.
    pub pending_plans: Vec<PendingPlan>,
}

/// Builds [`CaptfReport`] for the object in `namespace` with the given
/// view, the exporter's verdict on its lock being `ours`.
pub fn captf_report(namespace: &str, view: &CaptfView, ours: OurVerdict<'_>) -> CaptfReport {
    let status = view.status.as_ref();
    let condition = status
        .and_then(|s| s.state_readable.as_ref())
        .map(|c| ConditionReport {
            status: c.status.as_str(),
            reason: c.raw_reason.clone(),
            message: c.message.clone(),
            since: c.since.map(super::render::at),
        });
    let active_job = status.is_some_and(|s| s.active_job);
    let (agreement, text) = match status {
        None => (
            "not_compared",
            "CAPTF's status is not known: the object is not watched".to_string(),
        ),
        Some(_) if active_job => (
            "not_compared",
            "a Job of the object is running: CAPTF checks the lock only between Jobs, so its condition may describe an earlier lock".to_string(),
        ),
        Some(s) => match compare(s.state_readable.as_ref(), ours) {
            Agreement::Agrees => ("agrees", "agrees with the exporter".to_string()),
            Agreement::Silent => ("silent", silent_text(s.state_readable.as_ref())),
            Agreement::Differs(d) => ("differs", d.text()),
        },
    };
    let pending_plans = view
        .pending_plans
        .iter()
        .map(|p| PendingPlan {
            name: p.clone(),
            review: format!(
                "kubectl get tfplan -n {} {} -o yaml",
                shq(namespace),
                shq(p)
            ),
        })
        .collect();
    CaptfReport {
        object_known: status.is_some(),
        condition,
        active_job,
        agreement,
        text,
        differs_since: view.disagreement.as_ref().map(|d| unix_seconds(d.since)),
        mismatch_reported: view.disagreement.as_ref().is_some_and(|d| d.flagged),
        pending_plans,
    }
}

fn silent_text(c: Option<&crate::index::StateReadable>) -> String {
    match c {
        None => "CAPTF has not written a StateReadable condition".into(),
        Some(c) if c.reason == CaptfReason::StateLocked => match named_holder(&c.message) {
            Some(_) => {
                "CAPTF's StateLocked message is not in the wording the exporter knows".into()
            }
            None => "CAPTF's StateLocked message names no holder".into(),
        },
        Some(c) => format!(
            "CAPTF reports {}/{}, which says nothing about the lock",
            c.status.as_str(),
            c.raw_reason
        ),
    }
}

/// What an own stale lock waiting for an approval means, with the plan to
/// review; None when no plan is pending.
pub fn waits_for_approval(plans: &[PendingPlan]) -> Option<String> {
    let first = plans.first()?;
    Some(format!(
        "The object's apply waits for the approval of TerraformPlan {} (phase Pending), so no Job starts and nothing clears this lock. Review the plan first: {}. Approving it applies the plan's changes; the exporter never approves anything.",
        first.name, first.review
    ))
}

fn ser_display<T: std::fmt::Display, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// Urgency rank of a class: foreign/unknown past their timeout first, then
/// own_stale, own_unverified, foreign, unknown, own_live.
pub fn urgency(class: HolderClass, overdue: bool) -> u8 {
    match class {
        HolderClass::Foreign | HolderClass::Unknown if overdue => 0,
        HolderClass::OwnStale => 1,
        HolderClass::OwnUnverified => 2,
        HolderClass::Foreign => 3,
        HolderClass::Unknown => 4,
        HolderClass::OwnLive => 5,
    }
}

/// (kind, name) of the object whose runner a pod name is, if it is named
/// like a CAPTF Job pod of any object (the name may be CAPTF's hash).
pub fn runner_pod_owner(pod: &str) -> Option<(Kind, String)> {
    // mp before m: "captf-mp-" also starts with "captf-m".
    for kind in [
        Kind::TerraformMachinePool,
        Kind::TerraformMachine,
        Kind::TerraformCluster,
    ] {
        let Some(rest) = pod.strip_prefix(&format!("captf-{}-", kind.short())) else {
            continue;
        };
        // rest = <name>-<op>-a<n>-<hash6>-<5>: peel four segments.
        let mut name = rest;
        for _ in 0..4 {
            name = name.rsplit_once('-')?.0;
        }
        if !name.is_empty() && owns_pod(kind.short(), name, pod) {
            return Some((kind, name.to_string()));
        }
    }
    None
}

/// Why the holder is or is not an own runner pod of (kind, name).
pub fn own_verdict(lease: &LockLease, owner: Option<(Kind, &str)>) -> OwnVerdict {
    let not = |why| OwnVerdict::NotOwn { why };
    let Some(info) = &lease.info else {
        return not(NotOwn::NoLockInfo);
    };
    if !info.who.contains('@') {
        return not(NotOwn::NoAt);
    }
    let Some(host) = holder_host(&info.who) else {
        return not(NotOwn::EmptyHost);
    };
    let Some((kind, name)) = owner else {
        return not(NotOwn::ObjectUnknown);
    };
    if owns_pod(kind.short(), name, host) {
        return OwnVerdict::Own {
            pod: host.to_string(),
        };
    }
    match runner_pod_owner(host) {
        Some((k, n)) => not(NotOwn::OtherObjectsPod { kind: k, name: n }),
        None => not(NotOwn::NotJobPodName),
    }
}

fn pod_report(p: &PodFacts, one_shot: bool) -> PodReport {
    let read = p.last_read.map(|(r, _)| r);
    let state = match check_pod_name(&p.name) {
        PodName::Valid => None,
        PodName::RefusedByClient => Some(
            "not a pod name that can be read (contains '/' or '%'): never read; CAPTF's own read of it fails, so it never force-unlocks: not verified".to_string(),
        ),
        PodName::CannotExist => Some(
            "not a valid pod name (DNS-1123): no pod can have it, so CAPTF's read finds none: gone (never read)".to_string(),
        ),
    };
    let state = state.unwrap_or_else(|| match (p.cached, read) {
        (Some(c), _) if !c.finished => {
            "exists and has not finished (watch cache): live".to_string()
        }
        (_, Some(PodRead::Live)) => "exists and has not finished (live read): live".into(),
        (_, Some(PodRead::Finished)) => "Succeeded or Failed (live read): finished".into(),
        (_, Some(PodRead::Gone)) => "not found (live read): gone".into(),
        (_, Some(PodRead::Failed)) => "could not be read (RBAC or API error): not verified".into(),
        // A finished pod never runs again: its lock is stale without a live
        // read (docs/contract.md, section 3), so none is pending.
        (Some(_), None) if one_shot => "Succeeded or Failed (listed just now): finished".into(),
        (Some(_), None) => {
            "Succeeded or Failed (watch cache): finished; no live read needed, a finished pod never runs again".into()
        }
        (None, None) if one_shot => "not in the pod list and not read".into(),
        (None, None) => "not in the watch cache; live read pending".into(),
    });
    PodReport {
        name: p.name.clone(),
        state,
        read_at: p.last_read.and_then(|(_, at)| at).map(unix_seconds),
    }
}

fn captf_next(class: HolderClass, overdue: bool, lock_timeout: i64, deadline: i64) -> String {
    match class {
        HolderClass::OwnLive => format!(
            "Nothing: its own runner still holds the lock. A new Job would wait up to {lock_timeout} s for it; the holder Job is stopped at its activeDeadlineSeconds ({deadline} s) at the latest."
        ),
        HolderClass::OwnStale => "The next Job CAPTF starts for this object force-unlocks this lock ID after init and carries on (a ForceUnlocked Event). Until a Job is due, the lock stays.".into(),
        HolderClass::OwnUnverified => "CAPTF reads the holder pod itself: if it exists and has not finished the lock is live, otherwise the next Job force-unlocks it. The exporter could not read the pod, so it does not guess.".into(),
        HolderClass::Foreign | HolderClass::Unknown => {
            let base = format!(
                "Never unlocks it: every Job of the object waits {lock_timeout} s for the lock, fails and backs off (StateReadable=False, StateLocked)."
            );
            if overdue {
                format!("{base} The lock is older than that: Jobs are failing now; a person must release it.")
            } else {
                base
            }
        }
    }
}

fn sourced(seconds: i64, source: Source) -> Sourced {
    Sourced {
        seconds,
        source: source.as_str(),
    }
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

impl LockReport {
    /// Builds the report of a held lock at `now`.
    pub fn build(f: &LockFacts, now: SystemTime) -> LockReport {
        let lease = &f.lease;
        let owner = match f.object {
            ObjectKnown::Unknown => None,
            _ => f.kind.map(|k| (k, f.name.as_str())),
        };
        let own = own_verdict(lease, owner);
        let (age, age_source) = lease
            .age(now, f.first_seen_held, Some(f.class))
            .map_or((0.0, "observed"), |(a, s)| (a, s.as_str()));
        // A one-shot command saw the lock once: an observed age would be 0.
        let age_known = !(f.one_shot && age_source == "observed");
        let age = if age_known { age } else { 0.0 };
        let eff = f.resolved.effective;
        let src = f.resolved.sources;
        let overdue = age_known && is_overdue(f.class, age, eff.lock_timeout_seconds);
        let ns = &f.namespace;
        let lease_name = lease.lease_name();
        let host = lease
            .info
            .as_ref()
            .and_then(|i| holder_host(&i.who))
            .map(str::to_string);
        let commands = Commands {
            lease: format!(
                "kubectl get lease -n {} {} -o yaml",
                shq(ns),
                shq(&lease_name)
            ),
            pod: host
                .as_ref()
                .filter(|h| pod_named(&own, h))
                .map(|h| pod_command(ns, h)),
            confirm: format!(
                "kubectl get lease -n {} {} -o jsonpath='{{.spec.holderIdentity}}'",
                shq(ns),
                shq(&lease_name)
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
                .then(|| guarded_release(ns, &lease_name, &lease.holder_identity)),
        };
        let ours = OurVerdict::Held {
            class: f.class,
            who: lease.info.as_ref().map(|i| i.who.as_str()),
            who_cut: lease.who_cut,
        };
        let captf = captf_report(ns, &f.captf, ours);
        let mut captf_next = captf_next(
            f.class,
            overdue,
            eff.lock_timeout_seconds,
            eff.active_deadline_seconds,
        );
        if f.class == HolderClass::OwnStale {
            if let Some(wait) = waits_for_approval(&captf.pending_plans) {
                captf_next = format!("{captf_next} {wait}");
            }
        }
        LockReport {
            namespace: ns.clone(),
            kind: f.kind_label,
            name: f.name.clone(),
            object: f.object,
            lease: lease_name,
            suffix: lease.suffix.clone(),
            lock_id: lease.lock_id().to_string(),
            holder_identity: lease.holder_identity.clone(),
            lock_info_id_differs: lease
                .info
                .as_ref()
                .is_some_and(|i| !i.id.is_empty() && i.id != lease.holder_identity),
            info: lease.info.as_ref().map(|i| InfoFields {
                id: i.id.clone(),
                operation: i.operation.clone(),
                who: i.who.clone(),
                version: i.version.clone(),
                created: i
                    .created
                    .map(|c| c.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
            }),
            info_error: lease.info_error.as_ref().map(ToString::to_string),
            host,
            own,
            pod: f.pod.as_ref().map(|p| pod_report(p, f.one_shot)),
            lock_timeout: sourced(eff.lock_timeout_seconds, src.lock_timeout_seconds),
            active_deadline: sourced(eff.active_deadline_seconds, src.active_deadline_seconds),
            age_seconds: age,
            age_source,
            age_known,
            overdue,
            class: f.class,
            urgency: urgency(f.class, overdue),
            captf_next,
            force_unlocks_counted: f.force_unlocks.total,
            force_unlock_events_present: f.force_unlock_events_present,
            last_force_unlock: f.force_unlocks.last_seen,
            commands,
            captf,
        }
    }

    /// Seconds until the lock becomes overdue (foreign/unknown not yet past
    /// their timeout).
    pub fn overdue_in(&self) -> Option<f64> {
        #[allow(clippy::cast_precision_loss)]
        let t = self.lock_timeout.seconds as f64;
        (self.age_known && matches!(self.class, HolderClass::Foreign | HolderClass::Unknown))
            .then_some(t - self.age_seconds)
            .filter(|s| *s >= 0.0)
    }
}

/// Sorts reports most urgent first, then oldest first, then by name.
pub fn sort_by_urgency(reports: &mut [LockReport]) {
    reports.sort_by(|a, b| {
        a.urgency
            .cmp(&b.urgency)
            .then(b.age_seconds.total_cmp(&a.age_seconds))
            .then_with(|| a.namespace.cmp(&b.namespace))
            .then_with(|| a.name.cmp(&b.name))
    });
}

/// A duration in seconds for people: `95 s`, `12m 5s`, `3h 2m`, `2d 4h`.
pub fn human_duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "0s".into();
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let s = seconds.floor() as u64;
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m{}s", s / 60, s % 60),
        7200..=172_799 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86400, (s % 86400) / 3600),
    }
}
