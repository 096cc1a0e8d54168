//! The in-memory index: trimmed copies of the watched objects, joined by key.
//!
//! Split by concern, as the sub-indexes it owns:
//! - [`locks`]: lock Leases, their derived state, and holder-pod links;
//! - [`pods`]: the runner-pod cache and the live reads that confirm it;
//! - [`policy`]: Terraform* objects and CAPI Clusters, for names and
//!   effective timeouts;
//! - [`force_unlocks`]: per-object counters from ForceUnlocked Events;
//! - [`plans`]: TerraformPlans, by the object whose apply waits for them;
//! - [`disagreements`]: disagreements with CAPTF's own verdict, and their age;
//! - [`nodes`]: Nodes, and the runner pods bound to each, for the
//!   lost-node evidence of a lock (`lost`).
//!
//! [`Index::facts`] gives the read model of one held lock ([`LockFacts`]).
//!
//! Watchers feed it through [`IndexResource`]: per resource type an
//! `apply`, a `delete` and a `reset` (the end of a list). The index joins
//! the sub-indexes, keeps holder classes up to date on every change (so a
//! transition is logged once, when it happens) and answers what `/metrics`
//! and the verifier ask. It does no I/O: it is tested with synthetic
//! objects and no runtime. Every join is a hash lookup.

mod changes;
mod classes;
mod deadlines;
pub mod disagreements;
mod entries;
mod facts;
pub mod force_unlocks;
mod inputs;
mod keys;
pub mod locks;
mod lost;
pub mod nodes;
pub mod plans;
pub mod pods;
pub mod policy;
mod resource;
mod views;

use std::time::SystemTime;

pub use captf_core::captf_verdict::StateReadable;
pub use captf_core::captf_verdict::MAX_CONDITION_MESSAGE_BYTES;
pub use captf_core::shown::{cap, MAX_LABEL_BYTES};
pub use changes::Changes;
pub use disagreements::{Disagreement, DEFAULT_VERDICT_GRACE};
pub use entries::{
    unix_ms, unix_seconds, AgeSource, CapiCluster, CaptfStatus, ForceUnlockEvent, ForceUnlocks,
    LockLease, NodeEntry, PlanEntry, PodNode, PodState, TerraformCluster, TfObject,
};
pub use facts::{AgeAt, CaptfView, LockFacts, LockFilter, NodeFacts, ObjectKnown, PodFacts};
pub use force_unlocks::{
    MAX_FORCE_UNLOCKS_PER_EVENT_UPDATE, MAX_UNKNOWN_OBJECT_EVENTS_PER_NAMESPACE,
    MAX_UNKNOWN_OBJECT_EVENTS_WHILE_STARTING,
};
pub use keys::{LockKey, ObjectKey, ObjectRef};
pub use locks::{Lock, LockState};
pub use lost::NodeLost;
pub use nodes::NodeView;
pub use pods::{PodRead, ReadTicket};
pub use resource::Resource;
pub use views::{KeyView, LockView, MismatchLog, ObjectView, OverdueLog};

use captf_core::classify::HolderClass;

/// A lock whose holder class changed, for the log line.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassChange {
    /// Namespace of the lock.
    pub namespace: String,
    /// Kind of the lock's object.
    pub kind: &'static str,
    /// Name of the lock's object.
    pub name: String,
    /// Class before (None: not held).
    pub from: Option<HolderClass>,
    /// Class after (None: released).
    pub to: Option<HolderClass>,
    /// The holder (lock-info Who, capped).
    pub holder: String,
    /// Lock age in seconds, when held.
    pub age_seconds: Option<f64>,
}

/// Side effects a change asks of the caller: log lines and pods to read live.
#[derive(Debug, Default, PartialEq)]
pub struct Effects {
    /// Locks whose class changed.
    pub class_changes: Vec<ClassChange>,
    /// Holder pods whose cached state says "not live" and that must be
    /// confirmed by a live read before a lock is called stale.
    pub confirm: Vec<ObjectKey>,
    /// ForceUnlocked Events not kept: about objects the index does not
    /// know, in a namespace that holds the most such Events already
    /// ([`force_unlocks::MAX_UNKNOWN_OBJECT_EVENTS_PER_NAMESPACE`]).
    pub events_dropped: u64,
    /// Runner pods whose `spec.nodeName` is not a name a Node can have
    /// (kept without node evidence).
    pub invalid_node_names: u64,
}

impl Effects {
    fn extend(&mut self, more: Effects) {
        self.class_changes.extend(more.class_changes);
        self.confirm.extend(more.confirm);
        self.events_dropped += more.events_dropped;
        self.invalid_node_names += more.invalid_node_names;
    }
}

/// How the watchers feed one resource type into the index, after kubert's
/// `IndexNamespacedResource`: typed, so an object can only land where it
/// belongs.
pub trait IndexResource<T> {
    /// What identifies one object of this type.
    type Key;
    /// What one watch of this type covers: a namespace, None for all (and,
    /// for Terraform* objects, the kind).
    type Scope;
    /// An object was added or changed.
    fn apply(&mut self, key: Self::Key, item: T, now: SystemTime) -> Effects;
    /// An object was deleted, or no longer passes the watch's filters.
    fn delete(&mut self, key: Self::Key, now: SystemTime) -> Effects;
    /// A (re)list of `scope` finished: `items` replace everything of this
    /// type there; what is missing was deleted while the watch was down.
    fn reset(
        &mut self,
        scope: &Self::Scope,
        items: Vec<(Self::Key, T)>,
        now: SystemTime,
    ) -> Effects;
}

/// The index. Not thread-safe by itself; the runtime wraps it in a lock.
#[derive(Debug, Default)]
pub struct Index {
    locks: locks::LockIndex,
    pods: pods::PodIndex,
    policy: policy::PolicyIndex,
    force_unlocks: force_unlocks::ForceUnlockIndex,
    deadlines: deadlines::DeadlineQueue,
    plans: plans::PlanIndex,
    disagreements: disagreements::Disagreements,
    nodes: nodes::NodeIndex,
    /// Lost-node evidence of locks held by own runner pods (`lost`).
    lost: std::collections::HashMap<LockKey, NodeLost>,
    /// When each terminating holder pod's grace ends (`lost`).
    grace: deadlines::DeadlineQueue,
    /// What `/metrics` shows that changed since [`Index::take_changes`].
    changes: Changes,
    /// Locks shown under a name that depends on another key: a Lease
    /// whose object is unknown and whose owner labels do not prove its
    /// name is shown with its kind only while the key (namespace, kind,
    /// its suffix) gives has no object and no Lease; by that claimed key.
    /// A change of the claimed key marks the claimant too.
    claims: std::collections::HashMap<LockKey, LockKey>,
    /// Set by [`Index::begin_start`] until [`Index::finish_start`]: the
    /// first lists are still arriving, one kind at a time.
    /// - No lock is judged overdue: a lock seen before its object would be
    ///   judged against the built-in timeout, and one whose
    ///   TerraformCluster is not listed yet against its own value instead
    ///   of the inherited one.
    /// - No class change is recorded: every lock of the first lists would
    ///   "change" from released, and every own lock again as its pods
    ///   arrive after its Lease (a restart with 10k held locks logged 10k
    ///   lines saying nothing changed). The start's summary says what the
    ///   start found instead.
    starting: bool,
}

#[cfg(any(test, feature = "fixtures"))]
#[doc(hidden)]
pub mod fixtures;
#[cfg(test)]
mod tests;
