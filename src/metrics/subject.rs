//! What one lock key's families are written from: plain data read from
//! the index's view of the key ([`super::render`]), so each family's
//! writer ([`super::key_families`]) is tested without an index.

use crate::index::{ForceUnlocks, NodeLost, ObjectRef, ObjectView};

/// A held lock as its families show it (a lock whose class or age is not
/// known yet has none).
pub(super) struct HeldLock<'a> {
    pub(super) class: &'static str,
    pub(super) operation: &'a str,
    pub(super) holder: &'a str,
    pub(super) lock_id: &'a str,
    pub(super) version: &'a str,
    pub(super) age_source: &'static str,
    /// When it was taken, as acquired_timestamp shows it.
    pub(super) acquired: f64,
    pub(super) age: f64,
    /// lock-info Created, when given.
    pub(super) created: Option<f64>,
    pub(super) overdue: bool,
    /// Evidence that its own runner's node is lost.
    pub(super) node_lost: Option<&'a NodeLost>,
}

/// Everything one lock key's families are written from.
pub(super) struct Subject<'a> {
    /// (namespace, kind, name) of its object.
    pub(super) object: [&'a str; 3],
    pub(super) view: &'a ObjectView<'a>,
    pub(super) lock: Option<HeldLock<'a>>,
    /// Its Lease is held (even before its class is known).
    pub(super) held: bool,
    /// The force-unlock counters shown beside it, in (namespace, kind,
    /// name) order.
    pub(super) counters: Vec<(ObjectRef, ForceUnlocks)>,
}

impl Subject<'_> {
    /// Whether the key has anything to tell beyond its existence: a held
    /// lock, a force-unlock seen, a verdict that disagrees with CAPTF's, a
    /// pending plan.
    pub(super) fn tells_something(&self) -> bool {
        self.held
            || self.view.mismatch
            || !self.view.pending_plans.is_empty()
            || !self.counters.is_empty()
    }
}

/// A force-unlock counter that says something: one counted, or one whose
/// Event was seen (history at the first list sets only the time).
pub(super) fn seen(fu: &ForceUnlocks) -> bool {
    fu.total > 0 || fu.last_seen.is_some()
}
