//! The data a render encodes, copied out of the index key by key under a
//! short read lock so that encoding never holds it.

use std::time::SystemTime;

use crate::core::classify::HolderClass;
use crate::index::{CaptfStatus, ForceUnlocks, Index, KeyView, LockKey, LockView, ObjectView};

/// One held lock, as rendered.
#[derive(Debug)]
pub(super) struct LockRow {
    pub(super) ns: String,
    pub(super) kind: &'static str,
    pub(super) name: String,
    pub(super) class: HolderClass,
    pub(super) operation: String,
    pub(super) holder: String,
    pub(super) lock_id: String,
    pub(super) version: String,
    pub(super) age: f64,
    pub(super) age_source: &'static str,
    pub(super) created: Option<f64>,
    pub(super) overdue: bool,
    /// What the age counts from (Unix seconds): `Created`, else first seen.
    pub(super) base: f64,
}

/// One force-unlock counter, as rendered.
#[derive(Debug)]
pub(super) struct FuRow {
    pub(super) ns: String,
    pub(super) kind: String,
    pub(super) name: String,
    pub(super) fu: ForceUnlocks,
}

/// The rows of some lock keys (one bucket of the exposition), copied out
/// of the index so that encoding never holds its lock.
#[derive(Debug, Default)]
pub(super) struct Rows {
    pub(super) locks: Vec<LockRow>,
    pub(super) objects: Vec<ObjectRow>,
    pub(super) force_unlocks: Vec<FuRow>,
}

/// One object, as rendered.
#[derive(Debug)]
pub(super) struct ObjectRow {
    pub(super) ns: String,
    pub(super) kind: &'static str,
    pub(super) name: String,
    pub(super) held: bool,
    pub(super) timeout: i64,
    pub(super) deadline: i64,
    /// CAPTF's StateReadable condition: (status, reason) label values.
    pub(super) condition: Option<(&'static str, &'static str)>,
    /// `status.activeJob` is set.
    pub(super) job_active: bool,
    /// The disagreement with CAPTF outlasted the grace.
    pub(super) mismatch: bool,
    /// Pending TerraformPlans.
    pub(super) plans: Vec<String>,
}

fn condition_labels(captf: Option<&CaptfStatus>) -> Option<(&'static str, &'static str)> {
    let c = captf?.state_readable.as_ref()?;
    Some((c.status.as_str(), c.reason.as_str()))
}

impl Rows {
    /// Adds the rows of `key`; false when it has no series.
    pub(super) fn push_key(&mut self, ix: &Index, key: &LockKey, now: SystemTime) -> bool {
        let display = ix.with_view_of(key, |view| match view {
            KeyView::Lock(v) => self.push_lock(&v, now),
            KeyView::Object(v) => self.push_object(&v),
        });
        let Some((ns, kind, name)) = display else {
            return false;
        };
        // Every object shows its counter (0 before any force-unlock), and
        // a counter kept under another name of the same lock beside it.
        let fu = ix.force_unlocks_of(&ns, kind, &name);
        for (obj, fu) in ix.force_unlocks_of_lock(key) {
            if (obj.namespace.as_str(), obj.kind.as_str(), obj.name.as_str())
                != (ns.as_str(), kind, name.as_str())
            {
                self.force_unlocks.push(FuRow {
                    ns: obj.namespace.clone(),
                    kind: obj.kind.clone(),
                    name: obj.name.clone(),
                    fu,
                });
            }
        }
        self.force_unlocks.push(FuRow {
            ns,
            kind: kind.to_string(),
            name,
            fu,
        });
        true
    }

    /// Puts the rows in label order: stable output helps diffing and
    /// humans, and cheap next to I/O.
    pub(super) fn sort(&mut self) {
        self.force_unlocks
            .sort_by(|a, b| (&a.ns, &a.kind, &a.name).cmp(&(&b.ns, &b.kind, &b.name)));
        self.locks
            .sort_by(|a, b| (&a.ns, a.kind, &a.name).cmp(&(&b.ns, b.kind, &b.name)));
        self.objects
            .sort_by(|a, b| (&a.ns, a.kind, &a.name).cmp(&(&b.ns, b.kind, &b.name)));
    }

    /// The object row of a lock, and its lock row when held; returns the
    /// labels it is shown under.
    fn push_lock(&mut self, v: &LockView<'_>, now: SystemTime) -> (String, &'static str, String) {
        let held = v.lease.is_held();
        self.objects.push(ObjectRow {
            ns: v.namespace.to_string(),
            kind: v.kind,
            name: v.name.to_string(),
            held,
            timeout: v.effective.lock_timeout_seconds,
            deadline: v.effective.active_deadline_seconds,
            condition: condition_labels(v.captf),
            job_active: v.captf.is_some_and(|c| c.active_job),
            mismatch: v.mismatch,
            plans: v.pending_plans.iter().map(|p| p.to_string()).collect(),
        });
        if let (Some(class), Some((age, source))) = (v.state.class, v.age(now)) {
            // Shown forms (docs/contract.md 7.5): a label value never
            // carries a character that steers a terminal or a chat.
            let info = v.lease.shown_info();
            self.locks.push(LockRow {
                ns: v.namespace.to_string(),
                kind: v.kind,
                name: v.name.to_string(),
                class,
                operation: info.map(|[_, _, op, _]| op.to_string()).unwrap_or_default(),
                holder: v.lease.holder_label().to_string(),
                lock_id: v.lease.lock_id_label().to_string(),
                version: info.map(|[.., ver]| ver.to_string()).unwrap_or_default(),
                age,
                age_source: source.as_str(),
                created: v.lease.created_seconds(),
                overdue: v.overdue(class, age),
                base: v
                    .lease
                    .age_base(v.state.first_seen_held, Some(class), now)
                    .map_or(0.0, |(base, _)| base),
            });
        }
        (v.namespace.to_string(), v.kind, v.name.to_string())
    }

    /// The row of an object without a lock Lease; returns its labels.
    fn push_object(&mut self, v: &ObjectView<'_>) -> (String, &'static str, String) {
        self.objects.push(ObjectRow {
            ns: v.namespace.to_string(),
            kind: v.object.kind.as_str(),
            name: v.object.name.clone(),
            held: false,
            timeout: v.effective.lock_timeout_seconds,
            deadline: v.effective.active_deadline_seconds,
            condition: condition_labels(Some(&v.object.captf)),
            job_active: v.object.captf.active_job,
            mismatch: v.mismatch,
            plans: v.pending_plans.iter().map(|p| p.to_string()).collect(),
        });
        (
            v.namespace.to_string(),
            v.object.kind.as_str(),
            v.object.name.clone(),
        )
    }
}
