//! The data a scrape renders, copied out of the index under one short read
//! lock so that encoding never holds it.

use std::collections::HashSet;
use std::time::SystemTime;

use crate::core::classify::{is_overdue, HolderClass};
use crate::index::{CaptfStatus, ForceUnlocks};

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

/// What one scrape renders, copied out of the index.
pub(super) struct Snapshot {
    pub(super) locks: Vec<LockRow>,
    pub(super) objects: Vec<ObjectRow>,
    pub(super) force_unlocks: Vec<FuRow>,
    pub(super) per_class: [(HolderClass, u64); 5],
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

/// Copies what a render needs out of the index under one short read lock.
pub(super) fn take(shared: &crate::shared::Shared, now: SystemTime) -> Snapshot {
    shared.read(|ix| snapshot_of(ix, now))
}

fn snapshot_of(ix: &crate::index::Index, now: SystemTime) -> Snapshot {
    {
        let mut locks = Vec::new();
        let mut objects = Vec::new();
        ix.for_each_lock(|v| {
            let held = v.lease.is_held();
            objects.push(ObjectRow {
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
            let (Some(class), Some((age, source))) = (v.state.class, v.age(now)) else {
                return;
            };
            let info = v.lease.info.as_ref();
            locks.push(LockRow {
                ns: v.namespace.to_string(),
                kind: v.kind,
                name: v.name.to_string(),
                class,
                operation: info.map(|i| i.operation.clone()).unwrap_or_default(),
                holder: v.lease.holder_label().to_string(),
                lock_id: v.lease.lock_id_label().to_string(),
                version: info.map(|i| i.version.clone()).unwrap_or_default(),
                age,
                age_source: source.as_str(),
                created: v.lease.created_seconds(),
                overdue: is_overdue(class, age, v.effective.lock_timeout_seconds),
                base: v
                    .lease
                    .age_base(v.state.first_seen_held, Some(class), now)
                    .map_or(0.0, |(base, _)| base),
            });
        });
        ix.for_each_unlocked_object(|v| {
            objects.push(ObjectRow {
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
        });
        let per_class = ix.held_per_class();
        let mut force_unlocks: Vec<FuRow> = objects
            .iter()
            .map(|o| FuRow {
                ns: o.ns.clone(),
                kind: o.kind.to_string(),
                name: o.name.clone(),
                fu: ix.force_unlocks_of(&o.ns, o.kind, &o.name),
            })
            .collect();
        let known: HashSet<(&str, &str, &str)> = objects
            .iter()
            .map(|o| (o.ns.as_str(), o.kind, o.name.as_str()))
            .collect();
        ix.for_each_force_unlock(|ns, kind, name, fu| {
            if !known.contains(&(ns, kind, name)) {
                force_unlocks.push(FuRow {
                    ns: ns.to_string(),
                    kind: kind.to_string(),
                    name: name.to_string(),
                    fu,
                });
            }
        });
        drop(known);
        force_unlocks.sort_by(|a, b| (&a.ns, &a.kind, &a.name).cmp(&(&b.ns, &b.kind, &b.name)));
        // Stable output order helps diffing and humans; cheap next to I/O.
        locks.sort_by(|a, b| (&a.ns, a.kind, &a.name).cmp(&(&b.ns, b.kind, &b.name)));
        objects.sort_by(|a, b| (&a.ns, a.kind, &a.name).cmp(&(&b.ns, b.kind, &b.name)));
        Snapshot {
            locks,
            objects,
            force_unlocks,
            per_class,
        }
    }
}
