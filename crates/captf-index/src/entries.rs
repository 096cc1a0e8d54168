//! What the index keeps of each watched object: only the fields it uses.

use std::time::SystemTime;

use captf_core::captf_verdict::StateReadable;
use captf_core::classify::{lock_id, HolderClass};
use captf_core::kind::Kind;
use captf_core::lockinfo::{LockInfo, LockInfoError};
use captf_core::node_lost::{CondStatus, PodSigns, Taints};
use captf_core::podname::is_dns1123_subdomain;
use captf_core::shown::{cap, has_hidden, kept_shown, shown, MAX_LABEL_BYTES};
use captf_core::suffix::{kind_of_suffix, lock_lease_name, state_suffix};
use captf_core::timeouts::{ClusterPolicies, InfraRef, JobsPolicy};

/// Who is kept up to this size; longer values keep their head and the host.
const MAX_WHO_BYTES: usize = 1024;

/// Pod names are DNS subdomains (≤ 253); a longer host is never a pod, and
/// cutting it there keeps that verdict.
const MAX_HOST_BYTES: usize = 254;

/// Where a lock's age comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgeSource {
    /// lock-info `Created`.
    LockInfo,
    /// The moment this exporter first saw the lock held.
    Observed,
}

impl AgeSource {
    /// The `age_source` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            AgeSource::LockInfo => "lock_info",
            AgeSource::Observed => "observed",
        }
    }
}

/// A state-lock Lease, trimmed.
#[derive(Clone, Debug, PartialEq)]
pub struct LockLease {
    /// Namespace of the Lease.
    pub namespace: String,
    /// State suffix from the Lease name.
    pub suffix: String,
    /// Kind from the `owner-kind` label, when it names a Terraform* kind.
    pub label_kind: Option<Kind>,
    /// The `owner-name` label (the name, or its hash when over 63 bytes).
    pub label_name: Option<String>,
    /// `spec.holderIdentity`, whole; empty when released.
    pub holder_identity: String,
    /// Parsed lock-info, capped; None when absent or unparseable.
    pub info: Option<LockInfo>,
    /// Why lock-info could not be used, when present but bad.
    pub info_error: Option<LockInfoError>,
    /// `Who` was longer than kept: `info.who` is its head and host only.
    pub who_cut: bool,
    /// The owner labels (kind, name) reproduce the suffix: computed once
    /// here, in the watch task, not under the index's lock at every
    /// reclassification (a sha256 each).
    label_owner_verified: bool,
    /// The shown forms of the holder and lock-info strings, made once here
    /// when one holds a character [`captf_core::shown`] escapes (None for
    /// a clean Lease: the raw values are their own shown forms), each cut
    /// past 1024 bytes as a raw lock ID is. Verdicts
    /// and printed commands use the raw values; every reader that shows a
    /// value uses the `shown_*` accessors. Made from the values `new` was
    /// given: a Lease that changes is a new entry.
    shown: Option<Box<ShownLease>>,
}

/// The shown forms of a Lease's untrusted strings, as kept: escaped, the
/// IDs and `Who` past 1024 bytes cut like a raw lock ID (head, length,
/// sha256: [`kept_shown`]), `Operation` and `Version` capped at 128 bytes
/// like their raw values. An escaped form is up to six times its raw
/// value; kept whole, the five of an all-ESC Lease took about 27 KB.
#[derive(Clone, Debug, PartialEq)]
struct ShownLease {
    holder_identity: Box<str>,
    id: Box<str>,
    who: Box<str>,
    operation: Box<str>,
    version: Box<str>,
}

impl ShownLease {
    /// Escaped copies, when any of the strings needs one.
    fn of(holder_identity: &str, info: Option<&LockInfo>) -> Option<Box<ShownLease>> {
        let empty = String::new();
        let fields = info.map_or([&empty; 4], |i| [&i.id, &i.who, &i.operation, &i.version]);
        if !has_hidden(holder_identity) && !fields.iter().any(|f| has_hidden(f)) {
            return None;
        }
        let [id, who, operation, version] = fields;
        Some(Box::new(ShownLease {
            holder_identity: kept_shown(holder_identity),
            id: kept_shown(id),
            who: kept_shown(who),
            // Capped as their raw values are, and as their labels must be
            // (7.5): an all-ESC Operation was a 768-byte label.
            operation: cap(&shown(operation), MAX_LABEL_BYTES).into(),
            version: cap(&shown(version), MAX_LABEL_BYTES).into(),
        }))
    }
}

impl LockLease {
    /// A Lease entry from its parts; lock-info is capped here, once.
    pub fn new(
        namespace: String,
        suffix: String,
        label_kind: Option<&str>,
        label_name: Option<String>,
        holder_identity: String,
        info: Result<Option<LockInfo>, LockInfoError>,
    ) -> Self {
        let who_cut = matches!(&info, Ok(Some(i)) if i.who.len() > MAX_WHO_BYTES);
        let (info, info_error) = match info {
            Ok(i) => (i.map(cap_info), None),
            Err(e) => (None, Some(e)),
        };
        let label_kind = label_kind.and_then(Kind::from_kind);
        let label_owner_verified =
            match (label_kind.or_else(|| kind_of_suffix(&suffix)), &label_name) {
                (Some(kind), Some(name)) => state_suffix(&namespace, kind, name) == suffix,
                _ => false,
            };
        let shown = ShownLease::of(&holder_identity, info.as_ref());
        let mut holder_identity = holder_identity;
        holder_identity.shrink_to_fit();
        LockLease {
            namespace,
            suffix,
            label_kind,
            label_name,
            holder_identity,
            info,
            info_error,
            who_cut,
            label_owner_verified,
            shown,
        }
    }

    /// `spec.holderIdentity` as shown (hidden characters escaped; past
    /// 1024 bytes cut, [`captf_core::shown::kept_shown`]).
    pub fn shown_holder_identity(&self) -> &str {
        self.shown
            .as_ref()
            .map_or(&self.holder_identity, |s| &s.holder_identity)
    }

    /// lock-info's `ID`, `Who`, `Operation` and `Version` as shown; None
    /// without lock-info.
    pub fn shown_info(&self) -> Option<[&str; 4]> {
        let i = self.info.as_ref()?;
        Some(match &self.shown {
            Some(s) => [&s.id, &s.who, &s.operation, &s.version],
            None => [&i.id, &i.who, &i.operation, &i.version],
        })
    }

    /// The lock ID as shown (see [`LockLease::lock_id`]).
    pub fn shown_lock_id(&self) -> &str {
        match self.shown_info() {
            Some([id, ..]) if !id.is_empty() => id,
            _ => self.shown_holder_identity(),
        }
    }

    /// Kind and name from the owner labels, only when they reproduce the
    /// suffix. A long name is hashed in the label, and a copied label
    /// names another object: neither is this lock's object.
    pub fn verified_label_owner(&self) -> Option<(Kind, &str)> {
        let kind = self.owner_kind()?;
        let name = self.label_name.as_deref()?;
        self.label_owner_verified.then_some((kind, name))
    }

    /// The Lease's name.
    pub fn lease_name(&self) -> String {
        lock_lease_name(&self.suffix)
    }

    /// Held means a non-empty holderIdentity.
    pub fn is_held(&self) -> bool {
        !self.holder_identity.is_empty()
    }

    /// The lock ID, whole: lock-info ID when non-empty, else
    /// holderIdentity. What tells one lock from the next, and what a
    /// force-unlock needs.
    pub fn lock_id(&self) -> &str {
        lock_id(&self.holder_identity, self.info.as_ref())
    }

    /// The lock ID as shown, capped for a label value.
    pub fn lock_id_label(&self) -> &str {
        cap(self.shown_lock_id(), MAX_LABEL_BYTES)
    }

    /// Kind from the labels, else from the suffix.
    pub fn owner_kind(&self) -> Option<Kind> {
        self.label_kind.or_else(|| kind_of_suffix(&self.suffix))
    }

    /// Who as shown, capped for a label value.
    pub fn holder_label(&self) -> &str {
        self.shown_info()
            .map_or("", |[_, who, ..]| cap(who, MAX_LABEL_BYTES))
    }

    /// lock-info `Created` as Unix seconds, when usable.
    pub fn created_seconds(&self) -> Option<f64> {
        let created = self.info.as_ref()?.created?;
        Some(created.timestamp() as f64 + f64::from(created.timestamp_subsec_nanos()) / 1e9)
    }

    /// When the lock's age starts (Unix seconds) and where that comes
    /// from; None when not held. `first_seen_held` is when this exporter
    /// first saw the lock held.
    ///
    /// Own locks count from `Created`. A foreign or unknown lock counts
    /// from the earlier of `Created` and the first sighting: a workstation
    /// whose clock runs fast writes a future `Created`, and that must not
    /// hide an overdue lock while every Job fails after lockTimeoutSeconds.
    /// Without a usable `Created` the age runs from the first sighting.
    pub fn age_base(
        &self,
        first_seen_held: Option<SystemTime>,
        class: Option<HolderClass>,
        now: SystemTime,
    ) -> Option<(f64, AgeSource)> {
        if !self.is_held() {
            return None;
        }
        let seen = unix_seconds(first_seen_held.unwrap_or(now));
        match self.created_seconds() {
            Some(created)
                if seen < created
                    && matches!(class, Some(HolderClass::Foreign | HolderClass::Unknown)) =>
            {
                Some((seen, AgeSource::Observed))
            }
            Some(created) => Some((created, AgeSource::LockInfo)),
            None => Some((seen, AgeSource::Observed)),
        }
    }

    /// Age at `now` and where it comes from (see [`LockLease::age_base`]);
    /// None when not held. An age is never negative: a future `Created`
    /// of an own lock counts as age 0.
    pub fn age(
        &self,
        now: SystemTime,
        first_seen_held: Option<SystemTime>,
        class: Option<HolderClass>,
    ) -> Option<(f64, AgeSource)> {
        let (base, source) = self.age_base(first_seen_held, class, now)?;
        Some(((unix_seconds(now) - base).max(0.0), source))
    }
}

/// Seconds since the Unix epoch (negative before it).
pub fn unix_seconds(t: SystemTime) -> f64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// `t` as whole Unix milliseconds, rounded down (the unit of the clock's
/// deadline queues).
pub fn unix_ms(t: SystemTime) -> i64 {
    #[allow(clippy::cast_possible_truncation)]
    let ms = (unix_seconds(t) * 1000.0).floor() as i64;
    ms
}

/// lock-info as kept: `Operation` and `Version` capped, a long `Who` cut
/// to its head and host, and no string with spare capacity (a decoded
/// JSON string is allocated for its escaped length, six times an ESC).
fn cap_info(mut info: LockInfo) -> LockInfo {
    info.operation = cap(&info.operation, MAX_LABEL_BYTES).to_string();
    info.version = cap(&info.version, MAX_LABEL_BYTES).to_string();
    if info.who.len() > MAX_WHO_BYTES {
        // Keep the head for the label and the host after the last '@' for
        // classification; the rebuilt string has the same last '@'.
        let head = cap(&info.who, MAX_WHO_BYTES / 2).to_string();
        info.who = match info.who.rfind('@') {
            Some(at) => {
                let host = info.who.get(at + 1..).unwrap_or("");
                format!("{}@{}", head.replace('@', "_"), cap(host, MAX_HOST_BYTES))
            }
            None => head.replace('@', "_"),
        };
    }
    info.id.shrink_to_fit();
    info.who.shrink_to_fit();
    info
}

/// A Terraform* object, trimmed.
#[derive(Clone, Debug, PartialEq)]
pub struct TfObject {
    /// Its kind.
    pub kind: Kind,
    /// Its full name.
    pub name: String,
    /// The `cluster.x-k8s.io/cluster-name` label.
    pub cluster_label: Option<String>,
    /// Its own `spec.jobs` timeouts.
    pub jobs: Option<JobsPolicy>,
    /// For a TerraformCluster: its own and its `spec.defaults.jobs` policies.
    pub cluster: Option<ClusterPolicies>,
    /// What CAPTF wrote in its status about the lock.
    pub captf: CaptfStatus,
}

impl TfObject {
    /// An object with no labels, no policies and no status (what an object
    /// created without a `spec.jobs` looks like).
    pub fn new(kind: Kind, name: impl Into<String>) -> Self {
        TfObject {
            kind,
            name: name.into(),
            cluster_label: None,
            jobs: None,
            cluster: None,
            captf: CaptfStatus::default(),
        }
    }
}

/// What a Terraform* object's status says about its lock: CAPTF's own
/// verdict and whether it is looking at all.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CaptfStatus {
    /// The `StateReadable` condition, when set.
    pub state_readable: Option<StateReadable>,
    /// `status.activeJob` is set: a Job runs, and CAPTF's lock check waits.
    pub active_job: bool,
}

/// A TerraformPlan, trimmed to what the "waits for approval" check needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanEntry {
    /// The target's kind: TerraformCluster or TerraformMachinePool.
    pub target_kind: Kind,
    /// The target's name (in the plan's namespace).
    pub target_name: String,
    /// Phase `Pending`: the target's apply waits for this approval.
    pub pending: bool,
}

/// A TerraformCluster's policies, indexed by name for inheritance.
#[derive(Clone, Debug, PartialEq)]
pub struct TerraformCluster {
    /// Its cluster-name label.
    pub cluster_label: Option<String>,
    /// Its own and default Job policies.
    pub policies: ClusterPolicies,
}

/// A CAPI Cluster, trimmed to its infrastructureRef.
#[derive(Clone, Debug, PartialEq)]
pub struct CapiCluster {
    /// `spec.infrastructureRef`, normalised across API versions.
    pub infra_ref: InfraRef,
}

/// A runner pod, trimmed to what stale detection and the lost-node
/// evidence need.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodState {
    /// Phase Succeeded or Failed. A terminating pod is not finished.
    pub finished: bool,
    /// `spec.nodeName`.
    pub node: PodNode,
    /// `metadata.deletionTimestamp` as Unix seconds: the end of the grace
    /// period of a terminating pod; None when not terminating (or
    /// unparseable).
    pub deletion: Option<f64>,
    /// `metadata.deletionGracePeriodSeconds`.
    pub deletion_grace_seconds: Option<i64>,
    /// The pod's `Ready` condition.
    pub ready: Option<CondStatus>,
    /// The pod's `DisruptionTarget` condition.
    pub disruption_target: Option<CondStatus>,
}

impl PodState {
    /// A pod known only by its phase: not bound to a node, not terminating.
    pub fn new(finished: bool) -> Self {
        PodState {
            finished,
            ..PodState::default()
        }
    }

    /// What the lost-node rules read of it.
    pub fn signs(&self) -> PodSigns<'_> {
        PodSigns {
            node_name: self.node.name(),
            deletion: self.deletion,
            deletion_grace_seconds: self.deletion_grace_seconds,
            ready: self.ready,
            disruption_target: self.disruption_target,
        }
    }
}

/// A pod's `spec.nodeName`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PodNode {
    /// Not bound to a node (unset or empty).
    #[default]
    Unset,
    /// Bound to this node (a DNS-1123 subdomain).
    Named(Box<str>),
    /// Set, but not a name a Node can have: counted, and judged as unset
    /// (no node evidence), never a changed class.
    Invalid,
}

impl PodNode {
    /// The node name as written, when set (cut at 253 bytes: a longer one
    /// is [`PodNode::Invalid`]).
    pub fn of(name: &str) -> PodNode {
        if name.is_empty() {
            PodNode::Unset
        } else if is_dns1123_subdomain(name) {
            PodNode::Named(name.into())
        } else {
            PodNode::Invalid
        }
    }

    /// The node's name, when it is one.
    pub fn name(&self) -> Option<&str> {
        match self {
            PodNode::Named(n) => Some(n),
            _ => None,
        }
    }
}

/// A Node, trimmed to its `Ready` condition and the three taints the
/// lost-node rules read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeEntry {
    /// The `Ready` condition's status; None without one.
    pub ready: Option<CondStatus>,
    /// Its reason, capped at 128 bytes (shown, escaped, on the pages).
    pub ready_reason: Box<str>,
    /// Its `lastTransitionTime` as Unix seconds; None when missing or
    /// unparseable.
    pub ready_since: Option<f64>,
    /// The kept taints.
    pub taints: Taints,
}

impl NodeEntry {
    /// A Node with this `Ready` status and no taints.
    pub fn with_ready(ready: Option<CondStatus>, since: Option<f64>) -> Self {
        NodeEntry {
            ready,
            ready_since: since,
            ..NodeEntry::default()
        }
    }

    /// Same `Ready` status and taints: what decides the evidence, so a
    /// heartbeat-only update keeps the sighting time.
    pub(crate) fn same_state(&self, other: &NodeEntry) -> bool {
        self.ready == other.ready && self.taints == other.taints
    }
}

/// A ForceUnlocked Event, trimmed.
#[derive(Clone, Debug, PartialEq)]
pub struct ForceUnlockEvent {
    /// Namespace of the regarding object.
    pub namespace: String,
    /// Kind of the regarding object.
    pub kind: String,
    /// Name of the regarding object.
    pub name: String,
    /// Occurrences: `series.count` when the Event has a series, else 1.
    pub occurrences: u64,
    /// When it last happened (Unix seconds), when the Event says.
    pub last_seen: Option<f64>,
}

/// Force-unlock counter of one object.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ForceUnlocks {
    /// Force-unlocks counted since this exporter started.
    pub total: u64,
    /// When a ForceUnlocked Event was last seen (Unix seconds).
    pub last_seen: Option<f64>,
}
