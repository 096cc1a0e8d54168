//! The data of one held lock's report: the report the pages, `locks` and
//! `explain` show ([`LockReport`] with its parts, and [`CaptfReport`],
//! CAPTF's own verdict beside the exporter's), built from the index's read
//! model ([`crate::index::LockFacts`]).
//!
//! Plain data, serialized as it is for `locks -o json`: building a report
//! from facts is [`super::report`], and the shell commands it carries are
//! [`super::commands`]. Kept apart so the shape of the report, which the
//! JSON output and the pages depend on, reads in one place.

use serde::Serialize;

use crate::core::classify::HolderClass;
use crate::core::kind::Kind;
use crate::index::ObjectKnown;

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

/// The holder pod's node, as the report shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeReport {
    /// The pod's `spec.nodeName` (a DNS-1123 subdomain).
    pub name: String,
    /// Whether the exporter (or the one-shot list) sees Nodes; false in a
    /// namespaced install, or when Nodes may not be read.
    pub watched: bool,
    /// The Node exists; None when Nodes are not seen.
    pub exists: Option<bool>,
    /// `Ready`'s status: `True`, `False`, `Unknown`; None without one.
    pub ready: Option<&'static str>,
    /// `Ready`'s reason, as shown.
    pub ready_reason: String,
    /// `Ready`'s `lastTransitionTime` (RFC 3339), when usable.
    pub ready_since: Option<String>,
    /// The kept taints that are set.
    pub taints: Vec<&'static str>,
    /// The pod's `deletionTimestamp` (the end of its grace period).
    pub pod_deletion: Option<String>,
    /// The pod's `deletionGracePeriodSeconds`.
    pub pod_grace_seconds: Option<i64>,
    /// The pod's `Ready` condition.
    pub pod_ready: Option<&'static str>,
    /// The pod's `DisruptionTarget` condition.
    pub pod_disruption_target: Option<&'static str>,
    /// The lost-node reason, when the evidence holds.
    pub lost_reason: Option<&'static str>,
    /// Since when (RFC 3339).
    pub lost_since: Option<String>,
    /// Since when, Unix seconds (for the duration shown).
    pub lost_since_seconds: Option<f64>,
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
    /// The lock ID (lock-info's ID, else holderIdentity), as shown: hidden
    /// characters escaped (docs/contract.md, section 7.5).
    pub lock_id: String,
    /// `spec.holderIdentity` as shown: the ID `force-unlock` must be given (the
    /// backend's `Unlock` compares it, not lock-info's `ID`).
    pub holder_identity: String,
    /// `spec.holderIdentity` as written: the argument of the printed
    /// force-unlock (quoted there by `shq`), never shown as it is.
    #[serde(skip)]
    pub raw_holder_identity: String,
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
    /// The holder pod's node, when the cache shows it bound to one.
    pub node: Option<NodeReport>,
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
    /// Not judged overdue yet: the exporter is still listing the kinds a
    /// timeout comes from (see [`crate::index::LockFacts::starting`]).
    #[serde(skip)]
    pub starting: bool,
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

fn ser_display<T: std::fmt::Display, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

impl LockReport {
    /// Seconds until the lock becomes overdue (foreign/unknown not yet past
    /// their timeout).
    pub fn overdue_in(&self) -> Option<f64> {
        #[allow(clippy::cast_precision_loss)]
        let t = self.lock_timeout.seconds as f64;
        (self.age_known
            && !self.starting
            && matches!(self.class, HolderClass::Foreign | HolderClass::Unknown))
        .then_some(t - self.age_seconds)
        .filter(|s| *s >= 0.0)
    }
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

/// A value the fix needs: found (and where), or not readable (why, and
/// the command that reads it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The value and where it came from.
    Found {
        /// The value.
        value: String,
        /// Where it was read.
        from: String,
    },
    /// Could not be read.
    Unreadable {
        /// What could not be read and why, in words.
        why: String,
        /// A shell command that prints the value.
        read_with: String,
    },
}

/// What the fix needs beyond the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixInputs {
    /// The pinned `<image>@<digest>`.
    pub image: Lookup,
    /// The backend labels as an HCL object.
    pub labels: Lookup,
    /// The image repository (or, ending in `/`, the repository prefix)
    /// whose images the fix may run (`--runner-image-repository`).
    pub trusted_repository: String,
}
