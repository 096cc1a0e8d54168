//! Builds the report of one held lock from its facts and a clock value:
//! the evidence chain in the order a person checks it (lock-info, own
//! runner pod or not, the pod's state, timeouts and their sources, age),
//! what CAPTF does next, and CAPTF's own verdict beside the exporter's.
//!
//! Sans-IO: built from [`LockFacts`] (what the index, or a one-shot list,
//! knows about a lock) and a clock value; tested with synthetic facts.
//! The class is never decided here: it is the index's verdict (the same
//! `core::classify` the exporter uses); the report only explains it.

use std::time::SystemTime;

use crate::core::captf_verdict::{compare, named_holder, Agreement, CaptfReason, OurVerdict};
use crate::core::classify::HolderClass;
use crate::core::jobname::owns_pod;
use crate::core::kind::Kind;
use crate::core::lockinfo::holder_host;
use crate::core::podname::{check_pod_name, PodName};
use crate::core::shown::shown;
use crate::core::timeouts::Source;
use crate::index::{unix_seconds, CaptfView, LockFacts, LockLease, ObjectKnown, PodFacts, PodRead};

use super::commands::plan_review;
use super::model::Commands;
use super::model::{
    CaptfReport, ConditionReport, InfoFields, LockReport, NotOwn, OwnVerdict, PendingPlan,
    PodReport, Sourced,
};

/// Builds [`CaptfReport`] for the object in `namespace` with the given
/// view, the exporter's verdict on its lock being `ours`.
pub fn captf_report(namespace: &str, view: &CaptfView, ours: OurVerdict<'_>) -> CaptfReport {
    let status = view.status.as_ref();
    let condition = status
        .and_then(|s| s.state_readable.as_ref())
        .map(|c| ConditionReport {
            status: c.status.as_str(),
            reason: shown(&c.raw_reason).into_owned(),
            message: shown(&c.message).into_owned(),
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
            Agreement::Differs(d) => ("differs", shown(&d.text()).into_owned()),
        },
    };
    let pending_plans = view
        .pending_plans
        .iter()
        .map(|p| PendingPlan {
            name: p.clone(),
            review: plan_review(namespace, p),
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
///
/// ```
/// use captf_lock_exporter::core::kind::Kind;
/// use captf_lock_exporter::oncall::report::runner_pod_owner;
///
/// assert_eq!(
///     runner_pod_owner("captf-m-web-apply-a1-abc123-x7k2p"),
///     Some((Kind::TerraformMachine, "web".to_string()))
/// );
/// assert_eq!(
///     runner_pod_owner("captf-mp-pool-1-plan-a2-def456-q9w8e"),
///     Some((Kind::TerraformMachinePool, "pool-1".to_string()))
/// );
/// assert_eq!(runner_pod_owner("web-7d4b9c-x7k2p"), None);
/// ```
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

/// The verdict as shown: the names in it come from Who's host, raw.
fn shown_verdict(own: OwnVerdict) -> OwnVerdict {
    match own {
        OwnVerdict::Own { pod } => OwnVerdict::Own {
            pod: shown(&pod).into_owned(),
        },
        OwnVerdict::NotOwn {
            why: NotOwn::OtherObjectsPod { kind, name },
        } => OwnVerdict::NotOwn {
            why: NotOwn::OtherObjectsPod {
                kind,
                name: shown(&name).into_owned(),
            },
        },
        other => other,
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
    let state = state.unwrap_or_else(|| match (p.cached.as_ref(), read) {
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
        name: shown(&p.name).into_owned(),
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

impl LockReport {
    /// Builds the report of a held lock at `now`.
    pub fn build(f: &LockFacts, now: SystemTime) -> LockReport {
        let lease = &f.lease;
        let owner = match f.object {
            ObjectKnown::Unknown => None,
            _ => f.kind.map(|k| (k, f.name.as_str())),
        };
        let own = own_verdict(lease, owner);
        let age = f.age(now);
        let eff = f.resolved.effective;
        let src = f.resolved.sources;
        let overdue = f.overdue(now);
        let ns = &f.namespace;
        let lease_name = lease.lease_name();
        let host = lease
            .info
            .as_ref()
            .and_then(|i| holder_host(&i.who))
            .map(str::to_string);
        let commands = Commands::for_lock(f, &lease_name, host.as_deref(), &own);
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
            lock_id: lease.shown_lock_id().to_string(),
            holder_identity: lease.shown_holder_identity().to_string(),
            raw_holder_identity: lease.holder_identity.clone(),
            lock_info_id_differs: lease
                .info
                .as_ref()
                .is_some_and(|i| !i.id.is_empty() && i.id != lease.holder_identity),
            info: lease
                .info
                .as_ref()
                .zip(lease.shown_info())
                .map(|(i, [id, who, op, ver])| InfoFields {
                    id: id.to_string(),
                    operation: op.to_string(),
                    who: who.to_string(),
                    version: ver.to_string(),
                    created: i
                        .created
                        .map(|c| c.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
                }),
            info_error: lease.info_error.as_ref().map(ToString::to_string),
            host: host.map(|h| shown(&h).into_owned()),
            own: shown_verdict(own),
            pod: f.pod.as_ref().map(|p| pod_report(p, f.one_shot)),
            node: super::node::report(f),
            lock_timeout: sourced(eff.lock_timeout_seconds, src.lock_timeout_seconds),
            active_deadline: sourced(eff.active_deadline_seconds, src.active_deadline_seconds),
            age_seconds: age.seconds,
            age_source: age.source.as_str(),
            age_known: age.known,
            overdue,
            starting: f.starting,
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
