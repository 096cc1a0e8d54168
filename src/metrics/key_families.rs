//! The families of one lock key (contract 7.1 and 7.2), each declared
//! with the writer of its lines from the key's [`Subject`].

use std::sync::LazyLock;

use bytes::Bytes;

use super::families::{counter, flag, gauge, Family, FamilyDoc, Sample};
use super::families::{BUILD_INFO, HELD_PER_CLASS, WATCH_LAST_SUCCESS, WATCH_UP};
use super::gzip::Piece;
use super::Format;

/// The labels every per-object series starts with, so that they join with
/// CAPTF's own metrics.
const OBJECT: &[&str] = &["namespace", "kind", "name"];

const LOCK: &str = "Per held lock";
const PER_OBJECT: &str = "Per object with something to tell";

// 7.1 Per held lock.

pub(super) const LOCK_INFO: Family = gauge(
    LOCK,
    "captf_state_lock_info",
    "A held state lock and its holder (1 while held).",
    &[
        "namespace",
        "kind",
        "name",
        "class",
        "operation",
        "holder",
        "lock_id",
        "version",
    ],
    |s, out| {
        if let Some(l) = &s.lock {
            let [ns, kind, name] = s.object;
            let info = [
                ns,
                kind,
                name,
                l.class,
                l.operation,
                l.holder,
                l.lock_id,
                l.version,
            ];
            out.line(&info, Sample::Float(1.0));
        }
    },
);
pub(super) const LOCK_ACQUIRED: Family = gauge(
    LOCK,
    "captf_state_lock_acquired_timestamp_seconds",
    "When a held state lock was taken, as Unix time: lock-info Created, else when this exporter first saw it held (age_source).",
    &["namespace", "kind", "name", "class", "age_source"],
    |s, out| {
        if let Some(l) = &s.lock {
            let [ns, kind, name] = s.object;
            let labels = [ns, kind, name, l.class, l.age_source];
            out.line(&labels, Sample::Float(l.acquired));
        }
    },
);
pub(super) const LOCK_AGE: Family = gauge(
    LOCK,
    "captf_state_lock_age_seconds",
    "Age of a held state lock: now minus lock-info Created, else since first observed (only with --export-lock-age).",
    &["namespace", "kind", "name", "class", "age_source"],
    |s, out| {
        if let Some(l) = &s.lock {
            let [ns, kind, name] = s.object;
            out.line(&[ns, kind, name, l.class, l.age_source], Sample::Float(l.age));
        }
    },
)
.only_with(|e| e.lock_age);
pub(super) const LOCK_CREATED: Family = gauge(
    LOCK,
    "captf_state_lock_created_timestamp_seconds",
    "lock-info Created of a held state lock, as Unix time.",
    OBJECT,
    |s, out| {
        if let Some(created) = s.lock.as_ref().and_then(|l| l.created) {
            out.line(&s.object, Sample::Float(created));
        }
    },
);
pub(super) const LOCK_OVERDUE: Family = gauge(
    LOCK,
    "captf_state_lock_overdue",
    "1 when a foreign or unknown lock is older than the effective lockTimeoutSeconds.",
    &["namespace", "kind", "name", "class"],
    |s, out| {
        if let Some(l) = &s.lock {
            let [ns, kind, name] = s.object;
            out.line(&[ns, kind, name, l.class], flag(l.overdue));
        }
    },
);

pub(super) const HOLDER_NODE_LOST: Family = gauge(
    LOCK,
    "captf_state_lock_holder_node_lost_timestamp_seconds",
    "When the evidence began that the node of the own runner pod holding the lock is lost (Unix time); only while the class is own_live and the evidence holds: CAPTF counts the pod alive and never force-unlocks.",
    &["namespace", "kind", "name", "node", "reason"],
    |s, out| {
        if let Some(lost) = s.lock.as_ref().and_then(|l| l.node_lost) {
            let [ns, kind, name] = s.object;
            let labels = [ns, kind, name, &lost.node, lost.reason.as_str()];
            out.line(&labels, Sample::Float(lost.since));
        }
    },
);

// 7.2 Per object with something to tell (every known object with
// --export-idle-objects).

pub(super) const HELD: Family = gauge(
    PER_OBJECT,
    "captf_state_lock_held",
    "1 while the object's state lock is held, else 0.",
    OBJECT,
    |s, out| out.line(&s.object, flag(s.held)),
);
pub(super) const TIMEOUT: Family = gauge(
    PER_OBJECT,
    "captf_state_lock_timeout_seconds",
    "Effective lockTimeoutSeconds of the object's Jobs.",
    OBJECT,
    |s, out| {
        let t = s.view.effective.lock_timeout_seconds;
        out.line(&s.object, Sample::Float(t as f64));
    },
);
pub(super) const DEADLINE: Family = gauge(
    PER_OBJECT,
    "captf_state_lock_deadline_seconds",
    "Effective activeDeadlineSeconds of the object's Jobs.",
    OBJECT,
    |s, out| {
        let d = s.view.effective.active_deadline_seconds;
        out.line(&s.object, Sample::Float(d as f64));
    },
);
pub(super) const CAPTF_CONDITION: Family = gauge(
    PER_OBJECT,
    "captf_state_lock_captf_condition",
    "CAPTF's own StateReadable condition of the object, as last written (1; reason outside CAPTF's set as other).",
    &["namespace", "kind", "name", "status", "reason"],
    |s, out| {
        if let Some(c) = s.view.captf.and_then(|c| c.state_readable.as_ref()) {
            let [ns, kind, name] = s.object;
            let labels = [ns, kind, name, c.status.as_str(), c.reason.as_str()];
            out.line(&labels, Sample::Float(1.0));
        }
    },
);
pub(super) const VERDICT_MISMATCH: Family = gauge(
    PER_OBJECT,
    "captf_state_lock_verdict_mismatch",
    "1 when CAPTF's StateReadable verdict and the exporter's class have disagreed for longer than --verdict-grace with no Job of the object active, else 0.",
    OBJECT,
    |s, out| out.line(&s.object, flag(s.view.mismatch)),
);
pub(super) const JOB_ACTIVE: Family = gauge(
    PER_OBJECT,
    "captf_state_lock_job_active",
    "1 while the object's status.activeJob is set (CAPTF checks the lock only between Jobs).",
    OBJECT,
    |s, out| {
        if s.view.captf.is_some_and(|c| c.active_job) {
            out.line(&s.object, Sample::Float(1.0));
        }
    },
);
pub(super) const PLAN_PENDING: Family = gauge(
    PER_OBJECT,
    "captf_state_lock_plan_pending",
    "1 for each TerraformPlan in phase Pending for the object: its apply waits for an approval, so no Job runs to clear a stale lock.",
    &["namespace", "kind", "name", "plan"],
    |s, out| {
        let [ns, kind, name] = s.object;
        for plan in &s.view.pending_plans {
            out.line(&[ns, kind, name, plan], Sample::Float(1.0));
        }
    },
);
pub(super) const FORCE_UNLOCKS: Family = counter(
    PER_OBJECT,
    "captf_state_lock_force_unlocks",
    "Force-unlocks of the object's state lock, counted from ForceUnlocked Events since this exporter started.",
    OBJECT,
    |s, out| {
        for (o, fu) in &s.counters {
            out.line(&[&o.namespace, &o.kind, &o.name], Sample::Count(fu.total));
        }
    },
);
pub(super) const LAST_FORCE_UNLOCK: Family = gauge(
    PER_OBJECT,
    "captf_state_lock_last_force_unlock_timestamp_seconds",
    "When a ForceUnlocked Event about the object was last seen (Unix time).",
    OBJECT,
    |s, out| {
        for (o, fu) in &s.counters {
            if let Some(t) = fu.last_seen {
                out.line(&[&o.namespace, &o.kind, &o.name], Sample::Float(t));
            }
        }
    },
);

/// Every family declared in this file, in exposition order. The
/// self-metric counters of [`Health::register_counters`] are not among
/// them; the docs test reads those from their encoding.
pub fn family_docs() -> Vec<FamilyDoc> {
    let mut docs: Vec<FamilyDoc> = KEY_FAMILIES.iter().map(|f| f.doc()).collect();
    for f in [&HELD_PER_CLASS, &BUILD_INFO, &WATCH_UP, &WATCH_LAST_SUCCESS] {
        docs.push(f.doc());
    }
    docs
}

/// The families of one lock key, in exposition order.
pub(super) const KEY_FAMILIES: [&Family; 15] = [
    &LOCK_INFO,
    &LOCK_ACQUIRED,
    &LOCK_AGE,
    &LOCK_CREATED,
    &LOCK_OVERDUE,
    &HOLDER_NODE_LOST,
    &HELD,
    &TIMEOUT,
    &DEADLINE,
    &CAPTF_CONDITION,
    &VERDICT_MISMATCH,
    &JOB_ACTIVE,
    &PLAN_PENDING,
    &FORCE_UNLOCKS,
    &LAST_FORCE_UNLOCK,
];

/// Every key family's header lines per format, plain and as a stored
/// gzip piece; made once.
static HEADERS: LazyLock<[Vec<(Bytes, Piece)>; 2]> = LazyLock::new(|| {
    [Format::OpenMetrics, Format::Prometheus].map(|format| {
        let header = |f: &&Family| {
            let h = f.header(format);
            (Bytes::from(h.clone()), Piece::stored(h.as_bytes(), false))
        };
        KEY_FAMILIES.iter().map(header).collect()
    })
});

/// The header lines of every family of [`KEY_FAMILIES`] in `format`.
pub(super) fn headers(format: Format) -> &'static [(Bytes, Piece)] {
    &HEADERS[format.slot()]
}
