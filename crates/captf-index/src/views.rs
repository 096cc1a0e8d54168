//! What `/metrics`, the status page and the overdue check read.

use std::time::{Duration, SystemTime};

use super::{
    AgeSource, CaptfStatus, Disagreement, ForceUnlocks, Index, Lock, LockKey, LockLease, LockState,
    NodeLost, ObjectRef, TfObject,
};
use captf_core::classify::{is_overdue, HolderClass};
use captf_core::kind::Kind;
use captf_core::timeouts::{effective, Effective, Resolved};

/// What `/metrics`, the status page and the overdue check read.
impl Index {
    /// Effective timeouts of an object, resolved through its TerraformCluster.
    pub fn effective_for(&self, namespace: &str, obj: &TfObject) -> Effective {
        self.resolve_for(namespace, obj).effective
    }

    /// Effective timeouts of an object and where each came from.
    pub fn resolve_for(&self, namespace: &str, obj: &TfObject) -> Resolved {
        self.policy.resolve_for(namespace, obj)
    }

    /// The force-unlock counter of an object (zero when none was seen).
    pub fn force_unlocks_of(&self, namespace: &str, kind: &str, name: &str) -> ForceUnlocks {
        self.force_unlocks
            .of(&ObjectRef::new(namespace, kind, name))
    }

    /// Calls `f` for every force-unlock counter of an object the index
    /// knows: a watched object, or a lock Lease whose suffix the name
    /// gives. An Event about anything else adds no series: whoever may
    /// create Events cannot grow the exposition.
    pub fn for_each_force_unlock(&self, mut f: impl FnMut(&str, &str, &str, ForceUnlocks)) {
        for (obj, c) in self.force_unlocks.counters() {
            if self.object_known(obj) {
                f(&obj.namespace, &obj.kind, &obj.name, *c);
            }
        }
    }

    /// Calls `f` for every lock Lease with its display kind and name.
    pub fn for_each_lock(&self, mut f: impl FnMut(LockView<'_>)) {
        for (key, lock) in self.locks.iter() {
            self.with_lock_view(key, lock, &mut f);
        }
    }

    fn with_lock_view<T>(
        &self,
        key: &LockKey,
        lock: &Lock,
        f: impl FnOnce(LockView<'_>) -> T,
    ) -> T {
        let (kind, name) = self.display_owner(key, &lock.lease);
        let object = ObjectView {
            namespace: &key.namespace,
            kind,
            name: &name,
            effective: self.effective_of_lock(key, &lock.lease),
            captf: self.policy.object(key).map(|o| &o.captf),
            mismatch: self.disagreements.flagged(key),
            pending_plans: self.plans.pending_for(key).collect(),
        };
        f(LockView {
            object,
            lease: &lock.lease,
            state: &lock.state,
            starting: self.starting,
            node_lost: self.lost.get(key),
        })
    }

    fn object_view<'a>(&'a self, key: &'a LockKey, obj: &'a TfObject) -> ObjectView<'a> {
        ObjectView {
            namespace: &key.namespace,
            kind: obj.kind.as_str(),
            name: &obj.name,
            effective: self.effective_for(&key.namespace, obj),
            captf: Some(&obj.captf),
            mismatch: self.disagreements.flagged(key),
            pending_plans: self.plans.pending_for(key).collect(),
        }
    }

    /// Calls `f` for every known object that has no lock Lease yet.
    pub fn for_each_unlocked_object(&self, mut f: impl FnMut(ObjectView<'_>)) {
        for (key, obj) in self.policy.objects() {
            if !self.locks.contains(key) {
                f(self.object_view(key, obj));
            }
        }
    }

    /// Calls `f` for every lock key that has series: every lock Lease and
    /// every known object (a counter shows only beside one of them).
    pub fn for_each_shown_key(&self, mut f: impl FnMut(&LockKey)) {
        for (key, _) in self.locks.iter() {
            f(key);
        }
        for (key, _) in self.policy.objects() {
            if !self.locks.contains(key) {
                f(key);
            }
        }
    }

    /// The series of one lock key: `f` gets its lock Lease, else its
    /// object without a Lease; None when the key has no series.
    pub fn with_view_of<T>(&self, key: &LockKey, f: impl FnOnce(KeyView<'_>) -> T) -> Option<T> {
        if let Some(lock) = self.locks.get(key) {
            return Some(self.with_lock_view(key, lock, |v| f(KeyView::Lock(v))));
        }
        let obj = self.policy.object(key)?;
        Some(f(KeyView::Object(self.object_view(key, obj))))
    }

    /// The force-unlock counters shown beside lock key `key` of object
    /// `own`, in (namespace, kind, name) order: its own (0 before any
    /// force-unlock) and any kept under another name of the same lock.
    pub fn force_unlocks_beside(
        &self,
        key: &LockKey,
        own: ObjectRef,
    ) -> Vec<(ObjectRef, ForceUnlocks)> {
        let others = self.force_unlocks.of_lock(key);
        let others = others.filter(|(obj, _)| **obj != own);
        let mut all: Vec<_> = others.map(|(obj, fu)| (obj.clone(), fu)).collect();
        let fu = self.force_unlocks.of(&own);
        all.push((own, fu));
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Sets `--verdict-grace`: how long CAPTF's verdict may disagree with
    /// the exporter's before `verdict_mismatch` says so.
    pub fn set_verdict_grace(&mut self, grace: Duration) {
        self.disagreements.set_grace(grace);
    }

    /// Whether some disagreement with CAPTF outlasted the grace and is not
    /// reported yet: a cheap check under the read lock.
    pub fn verdict_mismatch_due(&self, now: SystemTime) -> bool {
        self.disagreements.any_due(now)
    }

    /// Reports every disagreement with CAPTF that outlasted the grace since
    /// the last call (`verdict_mismatch` turns 1); each is returned once.
    pub fn newly_mismatched(&mut self, now: SystemTime) -> Vec<MismatchLog> {
        let flagged = self.disagreements.flag_due(now);
        for (key, _) in &flagged {
            self.mark(key);
        }
        flagged
            .into_iter()
            .map(|(key, d)| {
                let (kind, name) = match (self.policy.object(&key), self.locks.get(&key)) {
                    (Some(obj), _) => (obj.kind.as_str(), obj.name.clone()),
                    (None, Some(lock)) => self.display_owner(&key, &lock.lease),
                    (None, None) => ("", key.suffix.clone()),
                };
                let reason = self
                    .policy
                    .object(&key)
                    .and_then(|o| o.captf.state_readable.as_ref())
                    .map(|c| c.raw_reason.clone())
                    .unwrap_or_default();
                MismatchLog {
                    namespace: key.namespace.clone(),
                    kind,
                    name,
                    disagreement: d,
                    captf_reason: reason,
                }
            })
            .collect()
    }

    /// Effective timeouts of a lock's object; the built-in values of its
    /// kind when the object is not known.
    pub(super) fn effective_of_lock(&self, key: &LockKey, lease: &LockLease) -> Effective {
        match self.policy.object(key) {
            Some(obj) => self.effective_for(&key.namespace, obj),
            None => effective(
                lease.owner_kind().unwrap_or(Kind::TerraformMachine),
                None,
                None,
            ),
        }
    }

    /// The earliest moment (Unix ms) a clock verdict may change: a lock
    /// turning overdue or a disagreement outlasting the grace. `i64::MIN`
    /// when the deadlines must be recomputed first; None when nothing waits
    /// on the clock, so the checker can sleep until a write wakes it.
    pub fn next_clock_deadline(&self) -> Option<i64> {
        [
            self.deadlines.first_deadline(),
            self.disagreements.first_deadline(),
            self.grace.first_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether a write since the last call moved
    /// [`Index::next_clock_deadline`] earlier; clears the mark.
    pub fn take_clock_moved(&mut self) -> bool {
        // Both taken: `||` would leave the second set for a spurious wake.
        let overdue = self.deadlines.take_moved_earlier();
        let verdicts = self.disagreements.take_moved_earlier();
        let grace = self.grace.take_moved_earlier();
        overdue || verdicts || grace
    }

    /// Foreign or unknown locks that became older than their effective
    /// lockTimeoutSeconds since the last call; each lock ID is returned once.
    /// Touches only the locks whose deadline passed (a change of a
    /// TerraformCluster or CAPI Cluster queued its inheritors' again).
    pub fn newly_overdue(&mut self, now: SystemTime) -> Vec<OverdueLog> {
        let now_ms = super::unix_ms(now);
        let mut found = Vec::new();
        for key in self.deadlines.pop_due(now_ms) {
            let shown = self.deadlines.take_shown(&key);
            let Some(lock) = self.locks.get(&key) else {
                continue;
            };
            let effective = self.effective_of_lock(&key, &lock.lease);
            let (Some(class), Some((age, _))) = (lock.state.class, lock.age(now)) else {
                continue;
            };
            if lock.state.overdue_logged || !is_overdue(class, age, effective.lock_timeout_seconds)
            {
                // Not yet after all (rounding, or the timeout grew): queued
                // again at its new deadline, or dropped when logged.
                self.schedule_overdue(&key, now);
                continue;
            }
            let (kind, name) = self.display_owner(&key, &lock.lease);
            found.push(OverdueLog {
                namespace: key.namespace.clone(),
                kind,
                name,
                class,
                holder: lock.lease.holder_label().to_string(),
                operation: lock
                    .lease
                    .shown_info()
                    .map(|[_, _, op, _]| op.to_string())
                    .unwrap_or_default(),
                age_seconds: age,
                timeout_seconds: effective.lock_timeout_seconds,
            });
            if let Some(l) = self.locks.get_mut(&key) {
                l.state.overdue_logged = true;
            }
            // captf_state_lock_overdue turned 1 with the clock alone,
            // unless a render after its deadline already drew it.
            if !shown {
                self.mark(&key);
            }
        }
        found
    }

    /// Number of held locks per class.
    pub fn held_per_class(&self) -> [(HolderClass, u64); 5] {
        self.locks.held_per_class()
    }

    /// Number of lock Leases, objects and cached pods (for the status page).
    pub fn sizes(&self) -> (usize, usize, usize) {
        (self.locks.len(), self.policy.len(), self.pods.len())
    }
}

/// A lock that just became overdue, for the warning log line.
#[derive(Clone, Debug, PartialEq)]
pub struct OverdueLog {
    /// Namespace.
    pub namespace: String,
    /// Kind of its object.
    pub kind: &'static str,
    /// Name of its object.
    pub name: String,
    /// foreign or unknown.
    pub class: HolderClass,
    /// Who, capped.
    pub holder: String,
    /// lock-info Operation.
    pub operation: String,
    /// Age in seconds.
    pub age_seconds: f64,
    /// Effective lockTimeoutSeconds.
    pub timeout_seconds: i64,
}

/// A disagreement with CAPTF that just outlasted the grace, for the log.
#[derive(Clone, Debug, PartialEq)]
pub struct MismatchLog {
    /// Namespace.
    pub namespace: String,
    /// Kind of the object.
    pub kind: &'static str,
    /// Name of the object.
    pub name: String,
    /// What differs and since when.
    pub disagreement: Disagreement,
    /// CAPTF's condition reason as written.
    pub captf_reason: String,
}

/// The series of one lock key, as `/metrics` renders them.
#[derive(Debug)]
pub enum KeyView<'a> {
    /// A lock Lease (and its object, when known).
    Lock(LockView<'a>),
    /// A known object without a lock Lease.
    Object(ObjectView<'a>),
}

impl<'a> KeyView<'a> {
    /// The object part, which every lock key has.
    pub fn object(&self) -> &ObjectView<'a> {
        match self {
            KeyView::Lock(v) => &v.object,
            KeyView::Object(v) => v,
        }
    }
}

/// The object of a lock key as `/metrics` renders it: the object itself,
/// or for a lock Lease of an object not watched what the Lease says of it.
#[derive(Debug)]
pub struct ObjectView<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Full kind for the `kind` label ("" when not known at all).
    pub kind: &'static str,
    /// Object name for the `name` label.
    pub name: &'a str,
    /// Its effective timeouts.
    pub effective: Effective,
    /// CAPTF's status of it, when the object is watched.
    pub captf: Option<&'a CaptfStatus>,
    /// Its disagreement with CAPTF outlasted the grace.
    pub mismatch: bool,
    /// Its pending TerraformPlans (capped).
    pub pending_plans: Vec<&'a str>,
}

/// A lock Lease as `/metrics` renders it.
#[derive(Debug)]
pub struct LockView<'a> {
    /// Its object's series.
    pub object: ObjectView<'a>,
    /// The trimmed Lease.
    pub lease: &'a LockLease,
    /// What the index derived about it.
    pub state: &'a LockState,
    /// Not every kind a timeout comes from has synced yet
    /// ([`Index::begin_start`]): the lock is not judged overdue.
    pub starting: bool,
    /// The holder pod's node is lost (an own live lock only).
    pub node_lost: Option<&'a NodeLost>,
}

impl LockView<'_> {
    /// Whether the lock, held by `class` for `age_seconds`, is overdue;
    /// never while the timeouts are pending.
    pub fn overdue(&self, class: HolderClass, age_seconds: f64) -> bool {
        let timeout = self.object.effective.lock_timeout_seconds;
        !self.starting && is_overdue(class, age_seconds, timeout)
    }

    /// Age at `now` and its source; None when not held.
    pub fn age(&self, now: SystemTime) -> Option<(f64, AgeSource)> {
        self.lease
            .age(now, self.state.first_seen_held, self.state.class)
    }
}
